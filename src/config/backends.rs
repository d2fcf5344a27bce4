//! `[backends]`: each backend's kind, where it is, its pools, timeouts and trust roots.

use super::secrets::{host_port, parse_redis_url, postgres_hosts, read_secret};
use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[backends.NAME]`, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum BackendConfig {
    /// A standalone Redis.
    Redis(RedisConfig),
    /// A Sentinel-managed Redis.
    Sentinel(SentinelConfig),
    /// A Redis Cluster.
    Cluster(ClusterConfig),
    /// PostgreSQL.
    Postgres(PostgresConfig),
    /// SQLite in a local file.
    Sqlite(SqliteConfig),
}

/// `kind = "postgres"`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// `postgres://user[:pass]@host:port/db`, libpq's multi-host form and query parameters
    /// (`sslmode`, `sslrootcert`, ...) included.
    pub url: String,
    /// A file holding the password (a mounted secret), its trailing newline dropped; it wins
    /// over a password in `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    /// Most connections open at once, shared by every client connection.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// Longest a connect plus handshake may take.
    #[serde(default = "default_sql_connection_timeout", with = "humantime_serde")]
    pub connection_timeout: Duration,
    /// PostgreSQL's `statement_timeout` for holdfast's sessions.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// Longest any one database operation may take holdfast's side: a connect, a
    /// statement, a group commit's whole transaction, the wait for a queued request's answer.
    /// Past it the connection is closed, never reused.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
    /// FLUSHDB and FLUSHALL empty the whole database; false refuses them.
    #[serde(default = "default_true")]
    pub allow_flush: bool,
    /// How often a client blocked in `BLPOP`, `BZPOPMIN`, ... (first in line for its key)
    /// tries again without being woken: the latency of a push by another process sharing
    /// the database. A push through this holdfast wakes it at once.
    #[serde(default = "default_blocking_poll", with = "humantime_serde")]
    pub blocking_poll: Duration,
}

/// `kind = "sqlite"`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqliteConfig {
    /// Path of the database file; created, with its directory, when missing.
    pub path: String,
    /// Connections for reads (WAL lets them run beside the one writer).
    #[serde(default = "default_sqlite_readers")]
    pub readers: usize,
    /// How long a statement waits for a lock held by another process; never longer than
    /// `response_timeout` (a SQLite statement cannot be dropped half-way, so its wait is
    /// bounded where it runs).
    #[serde(default = "default_busy_timeout", with = "humantime_serde")]
    pub busy_timeout: Duration,
    /// SQLite's `synchronous`: "full" syncs every commit to disk; "normal" (WAL) survives a
    /// crash of holdfast but may lose the last commits to a power failure.
    #[serde(default = "default_synchronous")]
    pub synchronous: Synchronous,
    /// Longest any one database operation may take (as for `postgres`).
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
    /// FLUSHDB and FLUSHALL empty the whole database; false refuses them.
    #[serde(default = "default_true")]
    pub allow_flush: bool,
    /// How often a client blocked in `BLPOP`, `BZPOPMIN`, ... (first in line for its key)
    /// tries again without being woken: the latency of a push by another process sharing
    /// the database. A push through this holdfast wakes it at once.
    #[serde(default = "default_blocking_poll", with = "humantime_serde")]
    pub blocking_poll: Duration,
}

/// SQLite's `synchronous` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// Sync at every commit.
    Full,
    /// Sync at checkpoints only (WAL).
    Normal,
}

fn default_true() -> bool {
    true
}
/// Two: concurrent `GET`s are read in batches (one `SELECT … IN` each), which fill better
/// with fewer readers, and each reader is a worker thread competing for the cores.
fn default_sqlite_readers() -> usize {
    2
}
fn default_busy_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_sql_connection_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_synchronous() -> Synchronous {
    Synchronous::Full
}

impl SqliteConfig {
    /// The configuration with its defaults.
    pub fn at(path: &str) -> SqliteConfig {
        SqliteConfig {
            path: path.to_string(),
            readers: default_sqlite_readers(),
            busy_timeout: default_busy_timeout(),
            synchronous: default_synchronous(),
            response_timeout: default_response_timeout(),
            allow_flush: true,
            blocking_poll: default_blocking_poll(),
        }
    }
}

impl BackendConfig {
    /// The `kind` key's value.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendConfig::Redis(_) => "redis",
            BackendConfig::Sentinel(_) => "sentinel",
            BackendConfig::Cluster(_) => "cluster",
            BackendConfig::Postgres(_) => "postgres",
            BackendConfig::Sqlite(_) => "sqlite",
        }
    }

    /// Where the backend is, for the log: a URL with its password redacted, a Sentinel's
    /// master and sentinels, a Cluster's seed nodes, a SQLite file's path.
    pub fn address(&self) -> String {
        match self {
            BackendConfig::Redis(redis) => super::redact_url(&redis.url),
            BackendConfig::Sentinel(s) => {
                format!(
                    "master {} via sentinels {}",
                    s.master_name,
                    s.sentinels.join(",")
                )
            }
            BackendConfig::Cluster(c) => format!("cluster seeds {}", c.nodes.join(",")),
            BackendConfig::Postgres(pg) => super::redact_url(&pg.url),
            BackendConfig::Sqlite(sqlite) => sqlite.path.clone(),
        }
    }
}

/// `kind = "sentinel"`: a Redis primary found through Sentinel, and found again after a
/// failover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The master's name in Sentinel.
    pub master_name: String,
    /// `host:port` of each sentinel.
    pub sentinels: Vec<String>,
    /// Backend connections; each client connection is pinned to one of them.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// Longest a connect (sentinel query, then the master) plus handshake may take.
    #[serde(default = "default_connection_timeout", with = "humantime_serde")]
    pub connection_timeout: Duration,
    /// Longest a sent command may wait for its reply before it counts as Transient.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
    /// A file holding the master's password (a mounted secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    /// Speak TLS to every server of the backend (and to the sentinels).
    #[serde(default)]
    pub tls: bool,
    /// PEM trust roots to verify the servers with, instead of the system's; sets `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Backend connections kept dialled for clients' own connections (a blocking command,
    /// `WATCH`), so a client's first one is sent at once, in the order holdfast received it,
    /// rather than after a dial that lets later commands of other clients overtake it.
    #[serde(default = "default_warm_connections")]
    pub warm_connections: usize,
    /// The database exact mode keeps its tokens in, apart from the data (database 0), so a
    /// client's KEYS, SCAN and DBSIZE never show them.
    #[serde(default = "default_token_db")]
    pub token_db: u8,
}

/// `kind = "cluster"`: a Redis Cluster, found from any of its seed nodes. Commands go to the
/// primary that owns their first key's slot; `MOVED` and `ASK` are followed (the command was
/// not executed where it was refused), and a connection lost to one node re-dials the whole
/// cluster, reading the slot map afresh.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    // The pool keys repeat SentinelConfig's: serde's `flatten` would share them, but it does
    // not combine with `deny_unknown_fields`, which names a mistyped key.
    /// `host:port` of one or more nodes; the others are learnt from `CLUSTER SLOTS`.
    pub nodes: Vec<String>,
    /// Backend connections (each one a connection to every primary); each client connection
    /// is pinned to one of them.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// Longest a connect (slot map, then every primary) plus handshake may take.
    #[serde(default = "default_connection_timeout", with = "humantime_serde")]
    pub connection_timeout: Duration,
    /// Longest a sent command may wait for its reply before it counts as Transient.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
    /// `MOVED`/`ASK` redirections followed per dispatch before it fails as NotAttempted.
    #[serde(default = "default_max_redirections")]
    pub max_redirections: u32,
    /// A file holding the nodes' password (a mounted secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    /// Speak TLS to every server of the backend.
    #[serde(default)]
    pub tls: bool,
    /// PEM trust roots to verify the servers with, instead of the system's; sets `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Backend connections kept dialled for clients' own connections (a blocking command,
    /// `WATCH`), so a client's first one is sent at once, in the order holdfast received it,
    /// rather than after a dial that lets later commands of other clients overtake it.
    #[serde(default = "default_warm_connections")]
    pub warm_connections: usize,
}

fn default_max_redirections() -> u32 {
    5
}

/// `kind = "redis"`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:pass@]host:port/db`
    pub url: String,
    /// Backend connections; each client connection is pinned to one of them.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// Longest a TCP connect plus handshake may take.
    #[serde(default = "default_connection_timeout", with = "humantime_serde")]
    pub connection_timeout: Duration,
    /// Longest a sent command may wait for its reply before it counts as Transient.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
    /// A file holding the backend password (a mounted secret); it replaces any password in
    /// `url`. Its trailing newline is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<std::path::PathBuf>,
    /// PEM trust roots to verify the backend with, instead of the system's. TLS is spoken
    /// when the URL is `rediss://` or this is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Backend connections kept dialled for clients' own connections (a blocking command,
    /// `WATCH`), so a client's first one is sent at once, in the order holdfast received it,
    /// rather than after a dial that lets later commands of other clients overtake it.
    #[serde(default = "default_warm_connections")]
    pub warm_connections: usize,
    /// The database exact mode keeps its tokens in, apart from the URL's, so a client's KEYS,
    /// SCAN and DBSIZE never show them.
    #[serde(default = "default_token_db")]
    pub token_db: u8,
}

/// The last of a Redis's 16 default databases: the one least likely to hold data.
fn default_token_db() -> u8 {
    15
}

/// The checks a Sentinel or Cluster backend shares: a pool size in range, at least one
/// `host:port` address under `field`, a readable password file.
fn check_addresses(
    key: &str,
    field: &str,
    addrs: &[String],
    pool_size: usize,
    password_file: Option<&std::path::Path>,
) -> Result<(), ConfigError> {
    if pool_size == 0 || pool_size > 1024 {
        return Err(invalid(
            format!("{key}.pool_size"),
            "must be between 1 and 1024",
        ));
    }
    if addrs.is_empty() {
        return Err(invalid(format!("{key}.{field}"), "names no address"));
    }
    for addr in addrs {
        if host_port(addr).is_none() {
            return Err(invalid(
                format!("{key}.{field}"),
                format!("`{addr}` is not host:port"),
            ));
        }
    }
    if let Some(path) = password_file {
        read_secret(&format!("{key}.password_file"), path)?;
    }
    Ok(())
}

/// The checks every Redis kind shares: warm connections in range, trust roots that load.
fn check_links(
    key: &str,
    warm: usize,
    tls_ca: Option<&std::path::Path>,
) -> Result<(), ConfigError> {
    if warm > MAX_WARM_CONNECTIONS {
        return Err(invalid(
            format!("{key}.warm_connections"),
            format!("must be at most {MAX_WARM_CONNECTIONS}"),
        ));
    }
    if let Some(ca) = tls_ca {
        crate::tls::client_config(ca)
            .map_err(|e| invalid(format!("{key}.tls_ca"), e.to_string()))?;
    }
    Ok(())
}

fn default_pool_size() -> usize {
    8
}
fn default_warm_connections() -> usize {
    2
}
/// Most warm connections a backend (a Cluster: each primary) may keep.
pub const MAX_WARM_CONNECTIONS: usize = 64;
fn default_connection_timeout() -> Duration {
    Duration::from_secs(2)
}
fn default_blocking_poll() -> Duration {
    Duration::from_millis(100)
}

fn default_response_timeout() -> Duration {
    Duration::from_secs(10)
}

impl BackendConfig {
    /// Checks one backend, at `key` (`backends.<name>`).
    pub(super) fn check(&self, key: &str) -> Result<(), ConfigError> {
        let key = key.to_string();
        if let BackendConfig::Redis(redis) = self {
            if redis.pool_size == 0 || redis.pool_size > 1024 {
                return Err(invalid(
                    format!("{key}.pool_size"),
                    "must be between 1 and 1024",
                ));
            }
            check_links(&key, redis.warm_connections, redis.tls_ca.as_deref())?;
            if let Some(path) = &redis.password_file {
                read_secret(&format!("{key}.password_file"), path)?;
            }
            match parse_redis_url(&redis.url) {
                Err(e) => return Err(invalid(format!("{key}.url"), e)),
                Ok(parsed) if parsed.database.unwrap_or(0) == redis.token_db => {
                    return Err(invalid(
                        format!("{key}.token_db"),
                        format!(
                            "{} is the url's database: exact mode's tokens would show in the clients' KEYS, SCAN and DBSIZE",
                            redis.token_db
                        ),
                    ));
                }
                Ok(_) => {}
            }
        }
        match self {
            BackendConfig::Postgres(pg) => {
                if pg.pool_size == 0 || pg.pool_size > 1024 {
                    return Err(invalid(
                        format!("{key}.pool_size"),
                        "must be between 1 and 1024",
                    ));
                }
                if let Err(e) = postgres_hosts(&pg.url) {
                    return Err(invalid(format!("{key}.url"), e));
                }
                if let Some(path) = &pg.password_file {
                    read_secret(&format!("{key}.password_file"), path)?;
                }
                check_response(&format!("{key}.response_timeout"), pg.response_timeout)?;
            }
            BackendConfig::Sentinel(sentinel) => {
                if sentinel.token_db == 0 {
                    return Err(invalid(
                        format!("{key}.token_db"),
                        "0 is the data's database: exact mode's tokens would show in the clients' KEYS, SCAN and DBSIZE",
                    ));
                }
                check_addresses(
                    &key,
                    "sentinels",
                    &sentinel.sentinels,
                    sentinel.pool_size,
                    sentinel.password_file.as_deref(),
                )?;
                check_links(&key, sentinel.warm_connections, sentinel.tls_ca.as_deref())?;
            }
            BackendConfig::Cluster(cluster) => {
                check_addresses(
                    &key,
                    "nodes",
                    &cluster.nodes,
                    cluster.pool_size,
                    cluster.password_file.as_deref(),
                )?;
                check_links(&key, cluster.warm_connections, cluster.tls_ca.as_deref())?;
            }
            BackendConfig::Sqlite(sqlite) => {
                if sqlite.readers == 0 || sqlite.readers > 64 {
                    return Err(invalid(
                        format!("{key}.readers"),
                        "must be between 1 and 64",
                    ));
                }
                if sqlite.path.is_empty() {
                    return Err(invalid(format!("{key}.path"), "must not be empty"));
                }
                check_response(&format!("{key}.response_timeout"), sqlite.response_timeout)?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// A SQL backend's deadline: zero would fail every operation, and past an hour a stuck
/// database holds requests far beyond any retry budget.
fn check_response(key: &str, timeout: Duration) -> Result<(), ConfigError> {
    if timeout.is_zero() || timeout > Duration::from_secs(3600) {
        return Err(invalid(key, "must be between 1ms and 1h"));
    }
    Ok(())
}
