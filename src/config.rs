//! Configuration: figment layers (built-in defaults → TOML file → `HOLDFAST_` environment),
//! the typed shape the README's "Configuration" section lists, and `validate()`, which runs
//! before any port is bound so a bad configuration exits with a message naming the offending
//! key. It also owns what validation reads: the retry schedule's checks and arithmetic
//! ([`RetryConfig::check`], [`InvalidBackoff`]), exact mode's [`TOKEN_TTL`], and the address
//! parsers the backends dial with ([`host_port`], [`postgres_hosts`]).

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

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
    /// backend, `CLIENT KILL` closes clients. Without `[[users]]`, `CLIENT KILL` is open
    /// to every client and `CONFIG SET` to none.
    #[serde(default)]
    pub admin: bool,
}

/// `[server]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The Redis endpoint clients connect to. Loopback unless configured otherwise.
    pub listen: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`, `/backendz`.
    pub metrics_listen: SocketAddr,
    /// Serve `/config` (the effective configuration, secrets redacted) on the metrics port.
    /// Off by default: the port answers without authentication, and the image binds it on
    /// every interface for Prometheus and the kubelet.
    #[serde(default)]
    pub serve_config: bool,
    /// When set, clients must `AUTH` (or `HELLO ... AUTH`) with it before anything else.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_like"
    )]
    pub requirepass: Option<String>,
    /// A file holding `requirepass` (a mounted secret); its trailing newline is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirepass_file: Option<std::path::PathBuf>,
    /// Client connections beyond this are refused with an error.
    pub max_clients: usize,
    /// Largest request (one command with its arguments) accepted, in bytes; a larger one
    /// closes that connection, since its framing cannot be trusted to be skipped. The
    /// headers are checked as they arrive, so an announced size over a limit is refused
    /// before its body is buffered.
    pub max_request_bytes: usize,
    /// Largest argument (bulk string) accepted, refused from its header.
    pub max_bulk_bytes: usize,
    /// Most arguments in one request, refused from its header.
    pub max_arguments: usize,
    /// Most keys in one multi-key command (MGET, DEL, ...).
    pub max_keys_per_command: usize,
    /// Most commands queued between MULTI and EXEC; one more is refused and the
    /// transaction discarded (a queue is held in memory until EXEC).
    pub max_queued_commands: usize,
    /// Most pipelined requests of one client taken from its buffer at once, and so the most
    /// whose first dispatch is sent ahead together (see the README's performance section).
    /// Bounds the memory a deep pipeline takes per connection.
    pub max_pipeline: usize,
    /// Most Pub/Sub messages waiting for one subscribed client that does not read them; at
    /// one more the client is disconnected, as Redis does past `client-output-buffer-limit
    /// pubsub` (its library reconnects and subscribes again).
    pub max_pubsub_backlog: usize,
    /// Runtime threads serving clients. 1 (the default) runs everything on one thread, as
    /// twemproxy does: a sidecar shares its host's cores with the application and the
    /// backend, and one thread spares every cross-thread wake-up (measured: a quarter less CPU
    /// per request on a 2-core host). 0: one per core. Read at start only.
    pub threads: usize,
    /// A client silent for this long is disconnected; `0s` (the default) never, as Redis.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How long shutdown waits for held requests before closing connections.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// TLS on the client listener; off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

/// `[server.tls]`: the listener speaks TLS only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// PEM certificate chain, the server's certificate first.
    pub cert: std::path::PathBuf,
    /// PEM private key.
    pub key: std::path::PathBuf,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 6380)),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9380)),
            serve_config: false,
            requirepass: None,
            requirepass_file: None,
            max_clients: 10_000,
            max_request_bytes: 64 * 1024 * 1024,
            max_bulk_bytes: 64 * 1024 * 1024,
            max_arguments: 1024 * 1024,
            max_keys_per_command: 10_000,
            max_queued_commands: 10_000,
            max_pipeline: 256,
            max_pubsub_backlog: 10_000,
            threads: 1,
            idle_timeout: Duration::ZERO,
            shutdown_grace: Duration::from_secs(30),
            tls: None,
        }
    }
}

/// How a namespace answers IdempotentEffect and NonIdempotent commands after a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyMode {
    /// Retry per the idempotence class; a retried reply may under-count.
    Fast,
    /// Settle existence with a read before dispatching.
    Settled,
    /// Exactly-once replies through a per-request token.
    Exact,
}

impl ReplyMode {
    /// As the configuration spells it (`fast`, `settled`, `exact`).
    pub fn spelling(self) -> &'static str {
        match self {
            ReplyMode::Fast => "fast",
            ReplyMode::Settled => "settled",
            ReplyMode::Exact => "exact",
        }
    }
}

/// `[defaults]`: every namespace inherits these.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// fast | settled | exact.
    pub reply_mode: ReplyMode,
    /// Longest one attempt may wait for a backend connection.
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
    /// Backoff between attempts.
    pub retry: RetryConfig,
    /// Redis backends: a write is acknowledged only once this many replicas have it
    /// (`WAIT`), so a failover cannot lose it. 0: as Redis acknowledges.
    #[serde(default)]
    pub min_replicas_ack: u32,
    /// How long `WAIT` may take before the write counts as Transient (applied on the
    /// primary, not known to be on enough replicas).
    #[serde(default = "default_replicas_ack_timeout", with = "humantime_serde")]
    pub replicas_ack_timeout: Duration,
}

fn default_replicas_ack_timeout() -> Duration {
    Duration::from_secs(1)
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            reply_mode: ReplyMode::Settled,
            acquire_timeout: Duration::from_secs(5),
            retry: RetryConfig::default(),
            min_replicas_ack: 0,
            replicas_ack_timeout: default_replicas_ack_timeout(),
        }
    }
}

/// `retry`: the per-request failover budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    #[serde(with = "humantime_serde")]
    pub min_delay: Duration,
    /// Each delay is the previous one times this.
    pub multiplier: f64,
    /// No delay is longer than this (before jitter).
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    /// Proportional jitter: each delay `d` is drawn uniformly from `[d, d·(1+jitter)]`, so
    /// held requests of one outage do not return in lock-step. 0 disables it.
    pub jitter: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 15,
            min_delay: Duration::from_millis(200),
            multiplier: 2.0,
            max_delay: Duration::from_secs(10),
            jitter: 0.15,
        }
    }
}

/// A retry configuration that cannot produce a sane schedule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidBackoff {
    /// `max_attempts` is 0 or absurdly large.
    #[error("must be between 1 and 1000")]
    MaxAttempts,
    /// `min_delay` is zero or above `max_delay`.
    #[error("must be above zero and at most max_delay")]
    MinDelay,
    /// `max_delay` over ten minutes.
    #[error("must be at most 600s")]
    MaxDelay,
    /// `multiplier` below 1 or not finite.
    #[error("must be a finite number between 1 and 100")]
    Multiplier,
    /// `jitter` outside `[0, 1]`.
    #[error("must be between 0 and 1")]
    Jitter,
}

impl InvalidBackoff {
    /// The configuration key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            InvalidBackoff::MaxAttempts => "max_attempts",
            InvalidBackoff::MinDelay => "min_delay",
            InvalidBackoff::MaxDelay => "max_delay",
            InvalidBackoff::Multiplier => "multiplier",
            InvalidBackoff::Jitter => "jitter",
        }
    }
}

/// A namespace's partial override of `[defaults.retry]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryOverride {
    /// See [`RetryConfig::max_attempts`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// See [`RetryConfig::min_delay`].
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_delay: Option<Duration>,
    /// See [`RetryConfig::multiplier`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier: Option<f64>,
    /// See [`RetryConfig::max_delay`].
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_delay: Option<Duration>,
    /// See [`RetryConfig::jitter`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
}

impl RetryConfig {
    /// Whether this configuration makes a sane schedule (the retry loop's `Backoff` is built
    /// only from one that does).
    ///
    /// # Errors
    /// [`InvalidBackoff`] naming the first bad key.
    pub fn check(&self) -> Result<(), InvalidBackoff> {
        if self.max_attempts == 0 || self.max_attempts > 1000 {
            return Err(InvalidBackoff::MaxAttempts);
        }
        if self.max_delay > Duration::from_secs(600) {
            return Err(InvalidBackoff::MaxDelay);
        }
        if self.min_delay.is_zero() || self.min_delay > self.max_delay {
            return Err(InvalidBackoff::MinDelay);
        }
        if !self.multiplier.is_finite() || !(1.0..=100.0).contains(&self.multiplier) {
            return Err(InvalidBackoff::Multiplier);
        }
        if !self.jitter.is_finite() || !(0.0..=1.0).contains(&self.jitter) {
            return Err(InvalidBackoff::Jitter);
        }
        Ok(())
    }

    /// The delay after attempt number `attempt` (1-based) failed, before jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(1000) as i32;
        let secs = self.min_delay.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = secs.min(self.max_delay.as_secs_f64());
        Duration::from_secs_f64(capped)
    }

    /// Sum of the delays between all attempts, before jitter: how long a request is held at
    /// most, not counting the attempts themselves.
    pub fn total_before_jitter(&self) -> Duration {
        (1..self.max_attempts).map(|a| self.base_delay(a)).sum()
    }

    /// Sum of the delays between all attempts with every jitter draw at its upper bound: the
    /// longest the delays can hold a request.
    pub fn total_at_most(&self) -> Duration {
        self.total_before_jitter().mul_f64(1.0 + self.jitter)
    }

    fn overridden(&self, o: &RetryOverride) -> RetryConfig {
        RetryConfig {
            max_attempts: o.max_attempts.unwrap_or(self.max_attempts),
            min_delay: o.min_delay.unwrap_or(self.min_delay),
            multiplier: o.multiplier.unwrap_or(self.multiplier),
            max_delay: o.max_delay.unwrap_or(self.max_delay),
            jitter: o.jitter.unwrap_or(self.jitter),
        }
    }
}

/// `[retry_budget]`: a process-wide cap on retries, in the spirit of tower's retry budget.
/// When it is empty a held request skips that dispatch and waits for its next backoff step
/// instead of hammering a sick backend; it fails only when its own attempts run out.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Retries always allowed per second, whatever the request rate.
    pub min_per_second: u32,
    /// Retries allowed as a fraction of recent requests (0.2 = one retry per five requests).
    pub ratio: f32,
    /// How long a request counts toward `ratio`.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            min_per_second: 100,
            ratio: 0.2,
            ttl: Duration::from_secs(10),
        }
    }
}

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
    /// How long a statement waits for a lock held by another process.
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
/// with fewer readers, and each reader is a worker thread competing for the cores. Measured on
/// 2 cores with 50 clients: 74,000 `GET`s/s with 1 or 2 readers, 55,000–62,000 with 4 or 8.
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

/// `[[namespaces]]`
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Used in metrics and errors.
    pub name: String,
    /// Key prefixes; none makes this the catch-all.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// Pub/Sub channel prefixes: a channel's longest matching prefix picks the namespace
    /// whose backend carries it; the catch-all takes every other channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    /// A key of `[backends]`.
    pub backend: String,
    /// Overrides `[defaults] reply_mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_mode: Option<ReplyMode>,
    /// Overrides `[defaults] acquire_timeout`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub acquire_timeout: Option<Duration>,
    /// Overrides keys of `[defaults.retry]`.
    #[serde(default)]
    pub retry: RetryOverride,
    /// Overrides `[defaults] min_replicas_ack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas_ack: Option<u32>,
    /// Overrides `[defaults] replicas_ack_timeout`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub replicas_ack_timeout: Option<Duration>,
    /// Lets a user limited to some namespaces run scripts and functions (`EVAL`, `FCALL`,
    /// ...) whose keys route here. A script may touch any key, so this trusts the scripts,
    /// or a Redis ACL user of the backend's that confines them (README, "Namespaces and
    /// users"). Users that may reach every namespace run scripts regardless.
    #[serde(default)]
    pub allow_scripts: bool,
}

/// A namespace's policy after `[defaults]` is applied.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectivePolicy {
    /// fast | settled | exact.
    pub reply_mode: ReplyMode,
    /// Per-attempt wait for a backend connection.
    pub acquire_timeout: Duration,
    /// Backoff.
    pub retry: RetryConfig,
    /// Replicas a write must reach before it is acknowledged, and how long to wait for them
    /// (None: acknowledged as the backend acknowledges it).
    pub replicas: Option<(u32, Duration)>,
}

impl NamespaceConfig {
    /// This namespace's policy with `[defaults]` filled in.
    pub fn effective(&self, defaults: &Defaults) -> EffectivePolicy {
        EffectivePolicy {
            reply_mode: self.reply_mode.unwrap_or(defaults.reply_mode),
            acquire_timeout: self.acquire_timeout.unwrap_or(defaults.acquire_timeout),
            retry: defaults.retry.overridden(&self.retry),
            replicas: match self.min_replicas_ack.unwrap_or(defaults.min_replicas_ack) {
                0 => None,
                n => Some((
                    n,
                    self.replicas_ack_timeout
                        .unwrap_or(defaults.replicas_ack_timeout),
                )),
            },
        }
    }
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
            }],
        }
    }
}

/// Claims `list` (the key prefixes or the channel prefixes at `key`) for namespace `name`:
/// none may be empty (`empty` says why) or claimed by another namespace already.
fn claim<'a>(
    (key, what): (&str, &str),
    list: &'a [String],
    (claimed, name): (&mut BTreeMap<&'a str, &'a str>, &'a str),
    empty: &str,
) -> Result<(), ConfigError> {
    for prefix in list {
        if prefix.is_empty() {
            return Err(invalid(key, empty));
        }
        if let Some(other) = claimed.insert(prefix, name) {
            return Err(invalid(
                key,
                format!("{what} `{prefix}` is claimed by `{other}` too"),
            ));
        }
    }
    Ok(())
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
        && field.map_or(true, |f| matches!(f, "PROTO" | "PORT" | "ADDR"))
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
                // The file replaces the built-in backends and namespaces instead of merging
                // with them, so `local` does not linger beside a file's own backends.
                let base = Config {
                    backends: BTreeMap::new(),
                    namespaces: Vec::new(),
                    ..Config::default()
                };
                figment = figment
                    .merge(Serialized::defaults(base))
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
        let base = Config {
            backends: BTreeMap::new(),
            namespaces: Vec::new(),
            ..Config::default()
        };
        Self::from_figment(
            Figment::new()
                .merge(Serialized::defaults(base))
                .merge(Toml::string(text)),
        )
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
        if self.server.max_clients == 0 {
            return Err(invalid("server.max_clients", "must be at least 1"));
        }
        if self.server.max_request_bytes < 1024 {
            return Err(invalid("server.max_request_bytes", "must be at least 1024"));
        }
        if let Some(tls) = &self.server.tls {
            crate::tls::acceptor(&tls.cert, &tls.key)
                .map_err(|e| invalid("server.tls", e.to_string()))?;
        }
        if self.server.max_bulk_bytes < 1024 {
            return Err(invalid("server.max_bulk_bytes", "must be at least 1024"));
        }
        if self.server.max_arguments < 3 {
            return Err(invalid("server.max_arguments", "must be at least 3"));
        }
        if self.server.max_queued_commands == 0 {
            return Err(invalid("server.max_queued_commands", "must be at least 1"));
        }
        if self.server.max_pubsub_backlog == 0 {
            return Err(invalid("server.max_pubsub_backlog", "must be at least 1"));
        }
        if self.server.max_pipeline == 0 || self.server.max_pipeline > 65_536 {
            return Err(invalid(
                "server.max_pipeline",
                "must be between 1 and 65536",
            ));
        }
        if self.server.threads > 1024 {
            return Err(invalid("server.threads", "must be between 0 and 1024"));
        }
        if self.server.max_keys_per_command == 0 {
            return Err(invalid("server.max_keys_per_command", "must be at least 1"));
        }
        check_retry("defaults.retry", &self.defaults.retry)?;
        check_acquire("defaults.acquire_timeout", self.defaults.acquire_timeout)?;
        if !(self.retry_budget.ratio >= 0.0 && self.retry_budget.ratio <= 1000.0) {
            return Err(invalid("retry_budget.ratio", "must be between 0 and 1000"));
        }
        if self.retry_budget.ttl < Duration::from_secs(1)
            || self.retry_budget.ttl > Duration::from_secs(60)
        {
            return Err(invalid("retry_budget.ttl", "must be between 1s and 60s"));
        }
        for (name, backend) in &self.backends {
            if let BackendConfig::Redis(redis) = backend {
                let key = format!("backends.{name}");
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
            let key = format!("backends.{name}");
            match backend {
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
        }
        if self.namespaces.is_empty() {
            return Err(invalid("namespaces", "at least one namespace is required"));
        }
        let mut catch_all = None;
        let mut names = std::collections::HashSet::new();
        let mut prefixes: BTreeMap<&str, &str> = BTreeMap::new();
        let mut channels: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, ns) in self.namespaces.iter().enumerate() {
            let key = format!("namespaces[{i}]");
            if ns.name.is_empty() {
                return Err(invalid(format!("{key}.name"), "must not be empty"));
            }
            if !names.insert(ns.name.as_str()) {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("`{}` is used by two namespaces", ns.name),
                ));
            }
            if !self.backends.contains_key(&ns.backend) {
                return Err(invalid(
                    format!("{key}.backend"),
                    format!("no backend named `{}` in [backends]", ns.backend),
                ));
            }
            if ns.prefixes.is_empty() {
                if let Some(other) = catch_all.replace(ns.name.as_str()) {
                    return Err(invalid(
                        format!("{key}.prefixes"),
                        format!("`{other}` and `{}` both have no prefixes; only one namespace may be the catch-all", ns.name),
                    ));
                }
            }
            claim(
                (&format!("{key}.prefixes"), "prefix"),
                &ns.prefixes,
                (&mut prefixes, &ns.name),
                "an empty prefix; leave `prefixes` out for the catch-all",
            )?;
            claim(
                (&format!("{key}.channels"), "channel prefix"),
                &ns.channels,
                (&mut channels, &ns.name),
                "an empty prefix; the catch-all takes every channel no prefix claims",
            )?;
            let policy = ns.effective(&self.defaults);
            check_retry(&format!("{key}.retry"), &policy.retry)?;
            check_acquire(&format!("{key}.acquire_timeout"), policy.acquire_timeout)?;
            check_fits(&key, &policy)?;
            if policy.reply_mode == ReplyMode::Exact {
                check_token_outlives_retries(&key, ns, &policy, &self.backends)?;
            }
        }
        let mut users = std::collections::HashSet::new();
        for (i, user) in self.users.iter().enumerate() {
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
        if catch_all.is_none() {
            return Err(invalid(
                "namespaces",
                "one namespace must have no prefixes: it takes every key the others do not",
            ));
        }
        Ok(())
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

/// A password from the environment arrives parsed (`HOLDFAST_SERVER__REQUIREPASS=12345` is a
/// number to figment); any scalar is taken as its text.
fn string_like<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Signed(i64),
        Unsigned(u64),
        Float(f64),
        Bool(bool),
    }
    Ok(
        Option::<Scalar>::deserialize(d)?.map(|scalar| match scalar {
            Scalar::Text(text) => text,
            Scalar::Signed(n) => n.to_string(),
            Scalar::Unsigned(n) => n.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }),
    )
}

/// Reads a secret from a file, without its trailing newline.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `key` when the file cannot be read.
pub fn read_secret(key: &str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|text| text.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))
}

/// A backend URL as it may be shown: every password hidden. The userinfo ends at the
/// authority's last `@` (the WHATWG URL rule, so a password holding an unencoded `@`, as in
/// `redis://u:p@ss@host`, is hidden whole; a `?` or `#` in a password must be
/// percent-encoded, as in any URL), everything after its first `:` is the password; the
/// authority ends at the first `/` after it, so libpq's multi-host form
/// (`postgres://u:pw@h1:5432,h2:5433/db`) is one authority; and every query parameter named
/// `password` or `sslpassword` (in any case, percent-encoded or not) has its value hidden.
/// Not the `url` crate: it refuses the multi-host form, and would re-encode what it shows.
pub fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "<redacted>";
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    // Before the query: the last `@` there ends the userinfo (a `/` in a password is
    // hidden with it), and the authority runs to the first `/` after it.
    let before_query = rest.find(['?', '#']).unwrap_or(rest.len());
    let pre = &rest[..before_query];
    let authority_end = match pre.rfind('@') {
        Some(at) => pre[at..].find('/').map_or(pre.len(), |i| at + i),
        None => pre.find('/').unwrap_or(pre.len()),
    };
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:{HIDDEN}{host}"),
                None => authority.to_string(),
            }
        }
        None => authority.to_string(),
    };
    let (path, query_and_fragment) = match tail.find('?') {
        Some(q) => tail.split_at(q),
        None => (tail, ""),
    };
    let (query, fragment) = match query_and_fragment.find('#') {
        Some(f) => query_and_fragment.split_at(f),
        None => (query_and_fragment, ""),
    };
    let query = match query.strip_prefix('?') {
        Some(pairs) => {
            let shown: Vec<String> = pairs
                .split('&')
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let name = percent_decoded(key).to_ascii_lowercase();
                    if matches!(name.as_str(), "password" | "sslpassword") && !value.is_empty() {
                        format!("{key}={HIDDEN}")
                    } else {
                        pair.to_string()
                    }
                })
                .collect();
            format!("?{}", shown.join("&"))
        }
        None => String::new(),
    };
    format!("{head}{authority}{path}{query}{fragment}")
}

/// `%XX` escapes (and `+`) of a query key decoded, for comparing it with a name.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' => {
                match (
                    bytes.get(i + 1).and_then(|b| hex(*b)),
                    bytes.get(i + 2).and_then(|b| hex(*b)),
                ) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `host:port` (an IPv6 host in brackets) as its two parts.
pub fn host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

/// A `redis://` or `rediss://` URL, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisUrl {
    /// `rediss://`: the connection speaks TLS.
    pub tls: bool,
    /// The server's host (an IPv6 address without its brackets).
    pub host: String,
    /// Its port (6379 when the URL gives none).
    pub port: u16,
    /// The ACL user, when the URL names one.
    pub username: Option<String>,
    /// The password, when the URL holds one.
    pub password: Option<String>,
    /// The database (`/3`), when the URL names one.
    pub database: Option<u8>,
}

/// Reads `redis://[[user]:password@]host[:port][/db]` (or `rediss://` for TLS); the user and
/// password percent-decoded. Query parameters are refused rather than ignored: every setting
/// of a backend is a key of its own.
///
/// # Errors
/// Which part of the URL is wrong; the text never holds the password.
pub fn parse_redis_url(text: &str) -> Result<RedisUrl, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
    let tls = match url.scheme() {
        "redis" => false,
        "rediss" => true,
        _ => return Err("must start with redis:// (or rediss:// for TLS)".to_string()),
    };
    let host = match url.host() {
        Some(url::Host::Domain(name)) if !name.is_empty() => name.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err("names no host".to_string()),
    };
    if url.query().is_some() || url.fragment().is_some() {
        return Err("query parameters are not read: set them as keys of the backend".to_string());
    }
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| "its user or password is not UTF-8 once decoded".to_string())
    };
    let username = match url.username() {
        "" => None,
        user => Some(decode(user)?),
    };
    let password = url.password().map(decode).transpose()?;
    let database = match url.path().trim_start_matches('/') {
        "" => None,
        db => Some(
            db.parse::<u8>()
                .map_err(|_| format!("the database `/{db}` is not a number from 0 to 255"))?,
        ),
    };
    Ok(RedisUrl {
        tls,
        host,
        port: url.port().unwrap_or(6379),
        username,
        password,
        database,
    })
}

/// libpq's multi-host URL (`postgres://u@h1:5432,h2:5433/db`) as one single-host URL per
/// host, in order.
///
/// # Errors
/// Which part of the URL is wrong.
pub fn postgres_hosts(url: &str) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or("must start with postgres://")?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    // libpq's passphrase of an encrypted client key: the driver reads no encrypted key, and
    // would log the parameter it ignores, value and all.
    let tail = without_query_key(tail, "sslpassword");
    let mut out = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err("a host in the list is empty".to_string());
        }
        let single = format!("postgres://{userinfo}{host}{tail}");
        single
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(|e| format!("{host}: {e}"))?;
        out.push(single);
    }
    Ok(out)
}

/// A URL's path, query and fragment (`tail`) without the query parameters named `key`.
fn without_query_key(tail: &str, key: &str) -> String {
    let Some((path, rest)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let (query, fragment) = match rest.find('#') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split('=').next() != Some(key))
        .collect();
    if kept.iter().all(|pair| pair.is_empty()) {
        return format!("{path}{fragment}");
    }
    format!("{path}?{}{fragment}", kept.join("&"))
}

/// `url` with `password` as its last query parameter, which PostgreSQL's URL parser applies
/// after the userinfo's password and any earlier `password=`: the one that counts.
pub fn with_password(url: &str, password: &str) -> String {
    let (base, fragment) = match url.find('#') {
        Some(at) => url.split_at(at),
        None => (url, ""),
    };
    let joiner = if !base.contains('?') {
        "?"
    } else if base.ends_with(['?', '&']) {
        ""
    } else {
        "&"
    };
    let mut encoded = String::with_capacity(password.len());
    for byte in password.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("{base}{joiner}password={encoded}{fragment}")
}

fn check_retry(key: &str, retry: &RetryConfig) -> Result<(), ConfigError> {
    retry
        .check()
        .map_err(|e| invalid(format!("{key}.{}", e.key()), e.to_string()))
}

/// A namespace that retries must be able to outlast one blackholed attempt: an acquire
/// timeout longer than the whole backoff schedule would spend the budget on a single wait.
fn check_fits(key: &str, policy: &EffectivePolicy) -> Result<(), ConfigError> {
    let backoff = &policy.retry;
    if backoff.check().is_err() {
        return Ok(());
    }
    let schedule = backoff.total_before_jitter();
    if backoff.max_attempts > 1 && policy.acquire_timeout > schedule {
        return Err(invalid(
            format!("{key}.acquire_timeout"),
            format!(
                "{:?} is longer than the whole retry schedule ({:?} over {} attempts): one blackholed attempt would use up the budget; lower acquire_timeout or raise the retry delays",
                policy.acquire_timeout, schedule, backoff.max_attempts
            ),
        ));
    }
    Ok(())
}

/// How long exact mode keeps a recorded reply: longer than any retry budget holds a request
/// (`validate()` refuses a schedule that could outlast it).
pub const TOKEN_TTL: Duration = Duration::from_secs(15 * 60);

/// Exact mode: a retry must find its token, so the token must be kept longer than the
/// longest a request can be retried after its first dispatch applied it. That is every delay
/// with its jitter at the upper bound, plus every attempt's longest wait: the connection
/// (`acquire_timeout`), the reply (the backend's response bound), and `WAIT` for replicas.
/// A retry after the token expired would apply the command again (an `INCR` twice).
fn check_token_outlives_retries(
    key: &str,
    ns: &NamespaceConfig,
    policy: &EffectivePolicy,
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<(), ConfigError> {
    let backoff = &policy.retry;
    if backoff.check().is_err() {
        return Ok(());
    }
    let (response, response_what) = match backends.get(&ns.backend) {
        // The script's EVALSHA, then the EVAL after NOSCRIPT (src/backend/redis/mod.rs).
        Some(BackendConfig::Redis(r)) => (r.response_timeout * 2, "2 × response_timeout"),
        Some(BackendConfig::Sentinel(r)) => (r.response_timeout * 2, "2 × response_timeout"),
        Some(BackendConfig::Cluster(r)) => (r.response_timeout * 2, "2 × response_timeout"),
        // The deadline on the command's whole transaction (src/backend/sql/engine/deadline.rs).
        Some(BackendConfig::Postgres(p)) => (p.response_timeout, "response_timeout"),
        Some(BackendConfig::Sqlite(s)) => (s.response_timeout, "response_timeout"),
        None => (Duration::ZERO, "no response bound"),
    };
    // `WAIT`'s own timeout, and the second its reply may take (src/backend/redis/mod.rs).
    let replicas = policy
        .replicas
        .map_or(Duration::ZERO, |(_, wait)| wait + Duration::from_secs(1));
    let per_attempt = policy.acquire_timeout + response + replicas;
    let delays = backoff.total_at_most();
    let worst = delays + per_attempt * backoff.max_attempts;
    let ttl = TOKEN_TTL;
    if worst <= ttl {
        return Ok(());
    }
    // Name the key the schedule comes from: the namespace's own, or the default it inherits.
    let attempts_key = if ns.retry.max_attempts.is_some() {
        format!("{key}.retry.max_attempts")
    } else {
        "defaults.retry.max_attempts".to_string()
    };
    Err(invalid(
        attempts_key,
        format!(
            "namespace `{}` is in exact reply mode, whose tokens are kept {}s, but a request may be retried for up to {}s after its first dispatch ({} attempts, delays up to {}s with jitter at its bound, each attempt up to {}s: acquire_timeout {}s + {response_what} of backends.{} {}s{}); a retry after its token expired would apply the command again: lower max_attempts, max_delay or the timeouts",
            ns.name,
            ttl.as_secs(),
            worst.as_secs_f64().ceil(),
            backoff.max_attempts,
            delays.as_secs_f64().ceil(),
            per_attempt.as_secs_f64(),
            policy.acquire_timeout.as_secs_f64(),
            ns.backend,
            response.as_secs_f64(),
            if replicas.is_zero() {
                String::new()
            } else {
                format!(" + replicas_ack_timeout and 1s for WAIT {}s", replicas.as_secs_f64())
            },
        ),
    ))
}

fn check_acquire(key: &str, timeout: Duration) -> Result<(), ConfigError> {
    if timeout.is_zero() || timeout > Duration::from_secs(300) {
        return Err(invalid(key, "must be between 1ms and 300s"));
    }
    Ok(())
}

/// A SQL backend's deadline: zero would fail every operation, and past an hour a stuck
/// database holds requests far beyond any retry budget.
fn check_response(key: &str, timeout: Duration) -> Result<(), ConfigError> {
    if timeout.is_zero() || timeout > Duration::from_secs(3600) {
        return Err(invalid(key, "must be between 1ms and 1h"));
    }
    Ok(())
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
