//! Authentication and permissions: HELLO, AUTH, the users of `[[users]]` and their NOPERM
//! checks. Passwords are compared in constant time.

use super::*;
use crate::command::table::{sort_patterns, Reach};

impl ClientConn {
    pub(super) fn hello(&mut self, args: &[Bytes]) -> Frame {
        let mut proto = self.exec.proto;
        if let Some(version) = args.get(1) {
            match std::str::from_utf8(version)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(2) => proto = Proto::Resp2,
                Some(3) => proto = Proto::Resp3,
                Some(_) => return error("NOPROTO unsupported protocol version"),
                None => return error("ERR Protocol version is not an integer or out of range"),
            }
        }
        let mut i = 2;
        let mut name = None;
        while i < args.len() {
            let option = &args[i];
            if option.eq_ignore_ascii_case(b"AUTH") && i + 2 < args.len() {
                if !self.check_password(&args[i + 1], &args[i + 2]) {
                    return wrongpass();
                }
                i += 3;
            } else if option.eq_ignore_ascii_case(b"SETNAME") && i + 1 < args.len() {
                name = Some(args[i + 1].clone());
                i += 2;
            } else {
                return error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    crate::command::echo(option)
                ));
            }
        }
        if !self.authed {
            return error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        if name.is_some() {
            self.name = name;
        }
        self.exec.proto = proto;
        let version = match proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        let pairs = vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk(crate::REDIS_VERSION)),
            (bulk("proto"), number(version)),
            (bulk("id"), number(self.id as i64)),
            (bulk("mode"), bulk("standalone")),
            (bulk("role"), bulk("master")),
            (bulk("modules"), array(Vec::new())),
        ];
        Frame::Map {
            data: pairs.into_iter().collect(),
            attributes: None,
        }
    }

    pub(super) fn auth(&mut self, args: &[Bytes]) -> Frame {
        let config = &self.state.config;
        if args.len() == 2 && config.server.requirepass.is_none() && config.users.is_empty() {
            return error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
        }
        let (user, pass) = match args.len() {
            2 => (Bytes::from_static(b"default"), &args[1]),
            3 => (args[1].clone(), &args[2]),
            _ => return error("ERR syntax error"),
        };
        if self.check_password(&user, pass) {
            ok()
        } else {
            wrongpass()
        }
    }

    /// Checks a user and password; on a match the connection is authenticated as that user.
    /// A failed attempt leaves the connection as it was, as in Redis.
    pub(super) fn check_password(&mut self, user: &[u8], pass: &[u8]) -> bool {
        let config = &self.state.config;
        let matched = if user == b"default" {
            match config.server.requirepass.as_deref() {
                Some(expected) => constant_time_eq(expected.as_bytes(), pass),
                // Without requirepass, `default` takes any password, as in Redis, unless
                // users are configured: then `default` is off.
                None => config.users.is_empty(),
            }
        } else {
            config
                .users
                .iter()
                .find(|u| u.name.as_bytes() == user)
                .is_some_and(|u| {
                    constant_time_eq(u.password.as_deref().unwrap_or_default().as_bytes(), pass)
                })
        };
        if matched {
            self.authed = true;
            self.user = (user != b"default").then(|| String::from_utf8_lossy(user).into_owned());
        }
        matched
    }

    /// Whether this client may do what an admin may (`CONFIG SET` to a Redis backend,
    /// `CLIENT KILL`): any client when no `[[users]]` are configured, as Redis's default
    /// user may do anything; with users, one authenticated as a user with `admin`.
    pub(super) fn is_admin(&self) -> bool {
        if self.state.config.users.is_empty() {
            return true;
        }
        let Some(name) = &self.user else {
            return false;
        };
        self.state
            .config
            .users
            .iter()
            .any(|u| &u.name == name && u.admin)
    }

    /// `CONFIG SET` of encoding thresholds only, to a SQL backend: no observable effect.
    fn harmless(&self, command: &Command) -> bool {
        if command.spec.name != "CONFIG|SET" {
            return false;
        }
        let sql = matches!(
            *self.state.router.catch_all().backend,
            crate::backend::Backend::Sql(_)
        );
        sql && command
            .args
            .iter()
            .skip(2)
            .step_by(2)
            .all(|name| crate::backend::sql::harmless_setting(name))
    }

    /// `ACL WHOAMI`, `ACL USERS`, `ACL LIST` over holdfast's users. `WHOAMI` is every
    /// client's; the other two pass the admin rule, as `@admin` commands in Redis. `LIST`
    /// writes each user as Redis would a user of the same reach: `on`, its password as
    /// `#` and its SHA-256 (or `nopass`), `~prefix*` per prefix of the namespaces it may reach
    /// (`~*` for all, or for the catch-all namespace), `&*`, and `+@all`, `+@all -@admin`
    /// (not an admin) or `-@all +@read` (read-only). `default` is listed first; it is `off`
    /// when users exist and no `requirepass` is set (no client may authenticate as it).
    pub(super) fn acl(&self, args: &[Bytes]) -> Frame {
        let sub = args
            .get(1)
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        if sub.as_slice() == b"WHOAMI" {
            return bulk(Bytes::from(
                self.user.clone().unwrap_or_else(|| "default".into()),
            ));
        }
        let name = if sub.as_slice() == b"USERS" {
            "acl|users"
        } else {
            "acl|list"
        };
        if !self.is_admin() {
            return error(cannot_run(name));
        }
        let config = &self.state.config;
        if sub.as_slice() == b"USERS" {
            let names =
                std::iter::once("default").chain(config.users.iter().map(|u| u.name.as_str()));
            return array(names.map(|n| bulk(Bytes::from(n.to_string()))).collect());
        }
        let password =
            |p: Option<&str>| p.map_or("nopass".to_string(), |p| format!("#{}", sha256_hex(p)));
        let default_on = config.users.is_empty() || config.server.requirepass.is_some();
        let mut lines = vec![format!(
            "user default {} {} ~* &* +@all",
            if default_on { "on" } else { "off" },
            password(config.server.requirepass.as_deref())
        )];
        for user in &config.users {
            let keys = match &user.namespaces {
                None => "~*".to_string(),
                Some(names) => config
                    .namespaces
                    .iter()
                    .filter(|ns| names.contains(&ns.name))
                    .flat_map(|ns| {
                        if ns.prefixes.is_empty() {
                            vec!["~*".to_string()]
                        } else {
                            ns.prefixes.iter().map(|p| format!("~{p}*")).collect()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let commands = if user.read_only {
                "-@all +@read"
            } else if user.admin {
                "+@all"
            } else {
                "+@all -@admin"
            };
            lines.push(format!(
                "user {} on {} {keys} &* {commands}",
                user.name,
                password(user.password.as_deref())
            ));
        }
        array(lines.into_iter().map(|l| bulk(Bytes::from(l))).collect())
    }

    /// The namespaces the authenticated user may reach; None: all of them.
    pub(super) fn reachable(&self) -> Option<Vec<String>> {
        let name = self.user.as_ref()?;
        let user = self.state.config.users.iter().find(|u| &u.name == name)?;
        user.namespaces.clone()
    }

    /// Whether the authenticated user may run `command`, with Redis's `NOPERM` wording when
    /// not. Looked up in the current generation, so a reload that removes a user or narrows
    /// its namespaces applies to connections already authenticated as it.
    ///
    /// A user limited to some namespaces is checked on every key the command names, and on
    /// what it reaches beyond them ([`Reach`]): the keys of `SORT`'s patterns, any key at all
    /// (a script: refused unless its namespace has `allow_scripts`), the whole keyspace of a
    /// backend shared with a namespace it may not reach, the server's configuration.
    pub(super) fn permit(&self, command: &Command) -> Result<(), String> {
        refused_to_all(command)?;
        if command.spec.reach == Reach::ServerAdmin && !self.is_admin() && !self.harmless(command) {
            return Err(format!(
                "NOPERM holdfast: '{}' changes the backend server; it needs a user with admin = true in [[users]]",
                command.spec.name.to_ascii_lowercase()
            ));
        }
        let Some(name) = &self.user else {
            return Ok(());
        };
        let cannot_run = || cannot_run(&command.spec.name.to_ascii_lowercase());
        let cannot_access = || {
            "NOPERM this user has no permissions to access one of the keys used as arguments"
                .to_string()
        };
        let Some(user) = self.state.config.users.iter().find(|u| &u.name == name) else {
            return Err(cannot_run());
        };
        // Connection commands are every user's; WATCH names keys and is checked below.
        if !matches!(command.local(), None | Some(Local::Watch)) {
            return Ok(());
        }
        if user.read_only && command.local().is_none() && command.class != Idempotence::Read {
            return Err(cannot_run());
        }
        let Some(allowed) = &user.namespaces else {
            return Ok(());
        };
        let router = &self.state.router;
        let reaches = |ns: &Namespace| allowed.contains(&ns.name);
        if command.spec.reach == Reach::Channel {
            // A publish reaches the namespace its channel routes to, not its keys'.
            return match command.channel().map(|c| router.namespace_of_channel(c)) {
                Some(ns) if reaches(ns) => Ok(()),
                _ => Err(
                    "NOPERM this user has no permissions to access one of the channels used as arguments"
                        .to_string(),
                ),
            };
        }
        let mut keys = command.keys().peekable();
        // FLUSHDB/FLUSHALL check each namespace they would reach themselves.
        if keys.peek().is_none() && !command.spec.every_backend && !reaches(router.catch_all()) {
            return Err(cannot_run());
        }
        let mut routed = Vec::new();
        for key in keys {
            let ns = router.namespace_of(key);
            if !reaches(ns) {
                return Err(cannot_access());
            }
            routed.push(ns);
        }
        match command.spec.reach {
            Reach::Keys | Reach::Database | Reach::ServerAdmin | Reach::Channel => Ok(()),
            Reach::SortPatterns => {
                let outside = sort_patterns(&command.args)
                    .into_iter()
                    .filter_map(|at| command.args.get(at))
                    .filter_map(|pattern| pattern_head(pattern))
                    .any(|head| !router.namespaces_under(head).all(|ns| reaches(ns)));
                if outside {
                    Err(cannot_access())
                } else {
                    Ok(())
                }
            }
            Reach::Scripts => {
                if routed.is_empty() {
                    routed.push(router.catch_all());
                }
                let allows = |ns: &Arc<Namespace>| {
                    self.state
                        .config
                        .namespaces
                        .iter()
                        .any(|c| c.name == ns.name && c.allow_scripts)
                };
                if routed.iter().all(|ns| allows(ns)) {
                    Ok(())
                } else {
                    Err(cannot_run())
                }
            }
            Reach::Keyspace => {
                // The catch-all's backend answers it: every namespace stored there is read.
                let backend = &router.catch_all().backend;
                let shared = router
                    .namespaces()
                    .iter()
                    .any(|ns| Arc::ptr_eq(&ns.backend, backend) && !reaches(ns));
                if shared {
                    Err(cannot_run())
                } else {
                    Ok(())
                }
            }
            Reach::ServerConfig => {
                if command.args.iter().skip(2).all(|p| harmless_parameter(p)) {
                    Ok(())
                } else {
                    Err(cannot_run())
                }
            }
        }
    }
}

/// Whether `COPY source destination [DB n] [REPLACE]` names a database.
fn names_a_database(args: &[Bytes]) -> bool {
    args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"DB"))
}

/// The literal part of a `SORT` pattern before its `*`, which every key it names begins
/// with; None when it names no key (`#`, or no `*`: Redis then looks nothing up).
fn pattern_head(pattern: &[u8]) -> Option<&[u8]> {
    let star = pattern.iter().position(|b| *b == b'*')?;
    Some(&pattern[..star])
}

/// A `CONFIG GET` pattern a limited user may ask: no glob (`*`, `?`, `[`) that could match
/// a secret, and no secret's own name.
fn harmless_parameter(pattern: &[u8]) -> bool {
    const SECRETS: &[&str] = &[
        "requirepass",
        "masterauth",
        "masteruser",
        "tls-key-file-pass",
        "tls-client-key-file-pass",
    ];
    !pattern.iter().any(|b| matches!(b, b'*' | b'?' | b'['))
        && !SECRETS
            .iter()
            .any(|s| pattern.eq_ignore_ascii_case(s.as_bytes()))
}

/// What no client may do through holdfast, admins included.
fn refused_to_all(command: &Command) -> Result<(), String> {
    // `COPY … DB n` writes where no namespace routes (tokens live there).
    if command.spec.reach == Reach::Database && names_a_database(&command.args) {
        return Err(
            "ERR holdfast: COPY with DB is not served: the other database is outside every namespace"
                .to_string(),
        );
    }
    // holdfast dials its backend with the configured address and password, so a client
    // that changed them through it would cut holdfast off from the backend for every other
    // client.
    if command.spec.name == "CONFIG|SET" {
        if let Some(name) = locks_out(&command.args) {
            return Err(format!(
                "ERR holdfast: CONFIG SET {} is refused: holdfast reaches the backend with the address and password of its own configuration, and this would lock it out",
                String::from_utf8_lossy(name).to_ascii_lowercase()
            ));
        }
    }
    Ok(())
}

/// The first parameter of `CONFIG SET name value ...` that changes how holdfast reaches or
/// authenticates to its backend (its password, its port, its listening addresses), if any.
fn locks_out(args: &[Bytes]) -> Option<&[u8]> {
    const REACH: &[&str] = &["requirepass", "port", "tls-port", "bind"];
    args.iter()
        .skip(2)
        .step_by(2)
        .map(|name| name.as_ref())
        .find(|name| {
            REACH
                .iter()
                .any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
        })
}

/// Whether a new connection needs no AUTH: no `requirepass` and no users.
pub(super) fn open_to_all(state: &State) -> bool {
    state.config.server.requirepass.is_none() && state.config.users.is_empty()
}

/// Compares without an early exit, so timing does not reveal how much of a password matched.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Redis's refusal of `command` (its name in lower case) to a user who may not run it.
pub(super) fn cannot_run(command: &str) -> String {
    format!("NOPERM this user has no permissions to run the '{command}' command")
}

/// A password's SHA-256 in hex, as `ACL LIST` shows it.
fn sha256_hex(password: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(password.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::locks_out;
    use bytes::Bytes;

    fn set(args: &[&str]) -> Option<String> {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
        locks_out(&args).map(|n| String::from_utf8_lossy(n).into_owned())
    }

    #[test]
    fn config_set_of_how_holdfast_reaches_its_backend_is_found_among_the_pairs() {
        for (args, found) in [
            (
                &["CONFIG", "SET", "requirepass", "x"][..],
                Some("requirepass"),
            ),
            (
                &["config", "set", "REQUIREPASS", "x"][..],
                Some("REQUIREPASS"),
            ),
            (
                &["CONFIG", "SET", "maxmemory", "1mb", "port", "7000"][..],
                Some("port"),
            ),
            (&["CONFIG", "SET", "bind", "0.0.0.0"][..], Some("bind")),
            (&["CONFIG", "SET", "tls-port", "7001"][..], Some("tls-port")),
            // A value that happens to read as a name is a value.
            (&["CONFIG", "SET", "maxmemory-policy", "port"][..], None),
            (&["CONFIG", "SET", "masterauth", "x"][..], None),
            (
                &["CONFIG", "SET", "hash-max-listpack-entries", "64"][..],
                None,
            ),
        ] {
            assert_eq!(set(args).as_deref(), found, "{args:?}");
        }
    }
}
