//! `[[users]]`: who may connect, with what password, to which namespaces.

use super::secrets::string_like;
use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// `[[users]]`: a client identity with its own password and permissions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The name given to `AUTH name password`.
    pub name: String,
    /// The password (or `password_file`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_like"
    )]
    pub password: Option<String>,
    /// A file holding the password; its trailing newline is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    /// The namespaces whose keys this user may touch; all when absent. Keyless commands
    /// belong to the catch-all namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// Only Read commands (GET, SCAN, ...) are allowed.
    #[serde(default)]
    pub read_only: bool,
    /// May change the backend servers and other clients: `CONFIG SET` reaches a Redis
    /// backend, `CLIENT KILL` closes clients, `MONITOR` and `ACL LIST`/`USERS` see them.
    /// Without `[[users]]` every client may do all of it, as Redis's default user may.
    #[serde(default)]
    pub admin: bool,
}

/// Checks `[[users]]` against the namespaces' `names`.
pub(super) fn check(users_list: &[UserConfig], names: &HashSet<&str>) -> Result<(), ConfigError> {
    let mut users = std::collections::HashSet::new();
    for (i, user) in users_list.iter().enumerate() {
        let key = format!("users[{i}]");
        if user.name.is_empty() || user.name == "default" || user.name.contains(' ') {
            return Err(invalid(
                format!("{key}.name"),
                "must be a word other than `default` (set server.requirepass for default)",
            ));
        }
        if !users.insert(user.name.as_str()) {
            return Err(invalid(
                format!("{key}.name"),
                format!("`{}` is defined twice", user.name),
            ));
        }
        if user.password.as_deref().unwrap_or_default().is_empty() {
            return Err(invalid(
                format!("{key}.password"),
                "a user needs a password (or password_file)",
            ));
        }
        for ns in user.namespaces.iter().flatten() {
            if !names.contains(ns.as_str()) {
                return Err(invalid(
                    format!("{key}.namespaces"),
                    format!("no namespace named `{ns}`"),
                ));
            }
        }
    }
    Ok(())
}
