//! Configuration: figment layers (built-in defaults → TOML file → `HOLDFAST_` environment),
//! the typed shape docs/configuration.md lists, and `validate()`, which runs
//! before any port is bound so a bad configuration exits with a message naming the offending
//! key. One file per section, each checking its own keys: `server`, `backends`, `namespaces`
//! (with `[defaults]`), `users`, `retry` (the schedule's checks and arithmetic,
//! [`InvalidBackoff`], the retry budget, exact mode's [`TOKEN_TTL`]) and `secrets` (passwords
//! from files, URLs redacted, the address parsers the backends dial with: [`host_port`],
//! [`postgres_hosts`]).

mod backends;
mod namespaces;
mod retry;
mod secrets;
mod server;
mod users;

pub use backends::*;
pub use namespaces::*;
pub use retry::*;
pub use secrets::*;
pub use server::*;
pub use users::*;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A configuration that could not be loaded or does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The layers could not be read or do not fit the shape (figment names the key).
    #[error("{0}")]
    Load(#[source] Box<figment::Error>),
    /// A value is well-formed but not acceptable.
    #[error("{key}: {message}")]
    Invalid {
        /// The dotted path of the offending key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listener, metrics port, client authentication.
    #[serde(default)]
    pub server: ServerConfig,
    /// Policy every namespace inherits unless it overrides a key.
    #[serde(default)]
    pub defaults: Defaults,
    /// The process-wide retry budget (shared by every namespace).
    #[serde(default)]
    pub retry_budget: BudgetConfig,
    /// Named backends.
    #[serde(default)]
    pub backends: BTreeMap<String, BackendConfig>,
    /// Key-prefix namespaces; exactly one has no prefixes and takes every other key.
    #[serde(default)]
    pub namespaces: Vec<NamespaceConfig>,
    /// ACL-style users besides `default`. With any configured, every client must
    /// authenticate (`default` then needs `requirepass`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserConfig>,
}

impl Default for Config {
    /// The built-in default: the SQLite backend `local` as the only, catch-all namespace.
    fn default() -> Self {
        let mut backends = BTreeMap::new();
        backends.insert(
            "local".to_string(),
            BackendConfig::Sqlite(SqliteConfig::at("data/holdfast.db")),
        );
        Config {
            server: ServerConfig::default(),
            defaults: Defaults::default(),
            retry_budget: BudgetConfig::default(),
            backends,
            users: Vec::new(),
            namespaces: vec![NamespaceConfig {
                name: "default".to_string(),
                prefixes: Vec::new(),
                channels: Vec::new(),
                backend: "local".to_string(),
                reply_mode: None,
                acquire_timeout: None,
                retry: RetryOverride::default(),
                min_replicas_ack: None,
                replicas_ack_timeout: None,
                allow_scripts: false,
                script_time_limit: None,
                mirror: None,
            }],
        }
    }
}

/// Whether `key`, a `HOLDFAST_` variable's name without the prefix, is one of those
/// Kubernetes sets in every pod of a namespace with a Service named `holdfast` (its "service
/// links"): `SERVICE_HOST`, `SERVICE_PORT`, `SERVICE_PORT_<name>`, `PORT`, and
/// `PORT_<number>_<TCP|UDP|SCTP>` with an optional `_PROTO`, `_PORT` or `_ADDR`. Each is
/// skipped, not refused: a sidecar must start whatever Services its namespace has. Any
/// other unknown variable is still refused like an unknown key (a typo is not ignored).
pub fn service_link(key: &str) -> bool {
    let key = key.to_ascii_uppercase();
    if matches!(key.as_str(), "SERVICE_HOST" | "SERVICE_PORT" | "PORT") {
        return true;
    }
    if let Some(name) = key.strip_prefix("SERVICE_PORT_") {
        return !name.is_empty();
    }
    let Some(rest) = key.strip_prefix("PORT_") else {
        return false;
    };
    let mut parts = rest.split('_');
    let number = parts.next().unwrap_or_default();
    let proto = parts.next().unwrap_or_default();
    let field = parts.next();
    !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && matches!(proto, "TCP" | "UDP" | "SCTP")
        && field.is_none_or(|f| matches!(f, "PROTO" | "PORT" | "ADDR"))
        && parts.next().is_none()
}

impl Config {
    /// Loads defaults, then `file` (when given), then `HOLDFAST_` variables (`__` nests:
    /// `HOLDFAST_SERVER__LISTEN`), and validates the result.
    ///
    /// # Errors
    /// [`ConfigError`] naming the offending key.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::new();
        match file {
            Some(path) => {
                // A file named on the command line must exist; a missing one is a mistake,
                // not a request for the built-in default.
                if !path.exists() {
                    return Err(invalid(
                        "--config",
                        format!("{} does not exist", path.display()),
                    ));
                }
                // Unreadable or not TOML: Toml::file below says so, naming the file.
                let text = std::fs::read_to_string(path).unwrap_or_default();
                figment = figment
                    .merge(Serialized::defaults(Config::base_for(&text)))
                    .merge(Toml::file(path));
            }
            None => figment = figment.merge(Serialized::defaults(Config::default())),
        }
        // HOLDFAST_LOG and HOLDFAST_LOG_FORMAT configure logging, which starts before the
        // configuration is read; they are not configuration keys. Nor are the variables
        // Kubernetes puts into every pod for a Service named `holdfast` (`service_link`).
        figment = figment.merge(
            Env::prefixed("HOLDFAST_")
                .ignore(&["log", "log_format"])
                .filter(|key| !service_link(key.as_str()))
                .split("__"),
        );
        Self::from_figment(figment)
    }

    /// Parses a TOML string over the built-in server and policy defaults (tests, examples).
    ///
    /// # Errors
    /// [`ConfigError`] naming the offending key.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Self::from_figment(
            Figment::new()
                .merge(Serialized::defaults(Config::base_for(text)))
                .merge(Toml::string(text)),
        )
    }

    /// The defaults a configuration file is read over. A file that names any backend or
    /// namespace replaces the built-in ones instead of merging with them, so `local` does not
    /// linger beside its own backends; a file that names neither (one that changes only
    /// `[server]`, say) keeps the built-in embedded default, as running with no file does.
    fn base_for(text: &str) -> Config {
        let names_any = text.parse::<toml::Table>().map_or(true, |table| {
            table.contains_key("backends") || table.contains_key("namespaces")
        });
        if !names_any {
            return Config::default();
        }
        Config {
            backends: BTreeMap::new(),
            namespaces: Vec::new(),
            ..Config::default()
        }
    }

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        if let Some(path) = &config.server.requirepass_file {
            config.server.requirepass = Some(read_secret("server.requirepass_file", path)?);
        }
        for (i, user) in config.users.iter_mut().enumerate() {
            if let Some(path) = &user.password_file {
                user.password = Some(read_secret(&format!("users[{i}].password_file"), path)?);
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks what the types cannot: references, ranges, one catch-all, unique prefixes.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.check()?;
        check_retry("defaults.retry", &self.defaults.retry)?;
        check_acquire("defaults.acquire_timeout", self.defaults.acquire_timeout)?;
        self.retry_budget.check()?;
        for (name, backend) in &self.backends {
            backend.check(&format!("backends.{name}"))?;
        }
        let (names, catch_all) =
            namespaces::check(&self.namespaces, &self.defaults, &self.backends)?;
        users::check(&self.users, &names)?;
        if catch_all.is_none() {
            return Err(invalid(
                "namespaces",
                "one namespace must have no prefixes: it takes every key the others do not",
            ));
        }
        Ok(())
    }

    /// Logs what this configuration serves, at start: where it listens, each backend's kind
    /// and address (passwords redacted; a SQLite file's path), each namespace's prefixes,
    /// backend and reply mode, and how many users.
    pub fn log_summary(&self) {
        tracing::info!(
            listen = %self.server.listen,
            metrics = %self.server.metrics_listen,
            tls = self.server.tls.is_some(),
            users = self.users.len(),
            password = self.server.requirepass.is_some(),
            "holdfast serving"
        );
        for (name, backend) in &self.backends {
            tracing::info!(
                backend = name.as_str(),
                kind = backend.kind(),
                address = backend.address().as_str(),
                "backend"
            );
        }
        for ns in &self.namespaces {
            let mode = ns.reply_mode.unwrap_or(self.defaults.reply_mode);
            let prefixes = if ns.prefixes.is_empty() {
                "(every other key)".to_string()
            } else {
                ns.prefixes.join(",")
            };
            tracing::info!(
                namespace = ns.name.as_str(),
                prefixes = prefixes.as_str(),
                backend = ns.backend.as_str(),
                reply_mode = mode.spelling(),
                "namespace"
            );
        }
    }

    /// The effective configuration as TOML, secrets redacted (`check-config`).
    pub fn to_toml_redacted(&self) -> String {
        let mut shown = self.clone();
        // A password read from a file is shown as the file, not as its content.
        if shown.server.requirepass_file.is_some() {
            shown.server.requirepass = None;
        } else if shown.server.requirepass.is_some() {
            shown.server.requirepass = Some("<redacted>".to_string());
        }
        for user in &mut shown.users {
            if user.password_file.is_some() {
                user.password = None;
            } else if user.password.is_some() {
                user.password = Some("<redacted>".to_string());
            }
        }
        for backend in shown.backends.values_mut() {
            match backend {
                BackendConfig::Redis(redis) => redis.url = redact_url(&redis.url),
                BackendConfig::Postgres(pg) => pg.url = redact_url(&pg.url),
                _ => {}
            }
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
    }
}

#[cfg(test)]
mod tests;
