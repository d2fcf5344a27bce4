//! Backends: where a namespace's commands are executed.
//!
//! A backend takes one request and returns the [`Reply`] or a [`BackendError`] that says,
//! by its variant, whether the request had been handed to a connection. It never retries on
//! its own: every dispatch is the retry loop's to count.

pub mod fake;
pub mod feed;
pub mod health;
pub mod lua;
pub mod pubsub;
pub mod rdb;
pub mod redis;
pub mod scripts;
pub mod sql;

use crate::config::{BackendConfig, Config};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

pub use crate::config::TOKEN_TTL;
pub use crate::error::BackendError;
pub use crate::resp::{DoubleStyle, Proto};

/// A backend's reply.
///
/// From holdfast's own Redis connections a reply is the bytes Redis wrote, already in the
/// client's protocol (each pool speaks one), and goes to the client unchanged: nothing is
/// decoded and encoded again, and nothing a decoded frame forgets is lost (a RESP2 `*-1`, a
/// double's digits, a map's order). Error replies, pushes and everything from SQL come
/// decoded, boxed: a frame is 152 bytes, and a reply is moved through every layer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// One complete reply as Redis encoded it in `proto`; never an error reply (those are
    /// decoded, for `classify`).
    Raw {
        /// The encoded reply.
        bytes: Bytes,
        /// The protocol it is encoded in.
        proto: Proto,
    },
    /// A decoded reply.
    Frame(Box<Frame>),
}

impl Reply {
    /// The reply decoded, for those that look inside one (settled mode, `WAIT`'s count).
    pub fn into_frame(self) -> Frame {
        match self {
            Reply::Frame(frame) => *frame,
            Reply::Raw { bytes, proto } => crate::resp::decode_raw(bytes, proto),
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        match self {
            Reply::Frame(frame) => {
                matches!(**frame, Frame::SimpleError { .. } | Frame::BlobError { .. })
            }
            Reply::Raw { .. } => false,
        }
    }
}

impl From<Frame> for Reply {
    fn from(frame: Frame) -> Reply {
        Reply::Frame(Box::new(frame))
    }
}

/// One command as the backend sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The arguments, the command name first.
    pub args: &'a [Bytes],
    /// The client's protocol: replies must come back in it.
    pub proto: Proto,
    /// The client's pinned connection among a backend's shared ones (any number: taken
    /// modulo the pool's size), so `WAIT` counts that client's writes.
    pub pin: u64,
    /// Whether it may take another shared connection than the pinned one.
    pub placement: Placement<'a>,
    /// Whether the command blocks its connection (BLPOP, ...), and how long: its reply is
    /// due within its own wait plus the backend's response timeout.
    pub blocking: Blocking,
    /// How long a blocking command keeps waiting through a backend it cannot reach (every
    /// try NotAttempted) before it answers the error: its namespace's failover budget.
    pub hold: Duration,
    /// Exact mode: the request's token. The backend applies the command and records its
    /// reply under the token atomically; a dispatch that finds the token answers the
    /// recorded reply and applies nothing.
    pub token: Option<&'a [u8]>,
    /// An earlier dispatch of this request was sent (or may have been): only then can a
    /// reply be recorded under its token already. A first dispatch's token is new, so a SQL
    /// backend does not look for it (one read fewer per group).
    pub again: bool,
    /// A write acknowledged only once this many replicas have it, waited for at most this
    /// long (Redis: `WAIT` on the same connection).
    pub replicas: Option<(u32, Duration)>,
    /// An error reply may come after the command wrote (a script that raised after
    /// `redis.call` changed something: Redis does not roll a script back), so it waits for
    /// the replicas too; any other command's error reply applied nothing.
    pub error_may_write: bool,
    /// What a script it runs may call, and for how long (SQL backends run scripts
    /// themselves); None for any other command.
    pub script: Option<&'a dyn lua::Gate>,
    /// On a Redis Cluster, the key whose hash slot picks the node (None: the first argument,
    /// and a `MOVED` reply when that was not a key). Connection-bound commands carry their
    /// transaction's first key, so `MULTI` and `EXEC` reach the node that holds it.
    pub route: Option<&'a [u8]>,
    /// `args` as the client encoded them (a multibulk), written as they are where a
    /// connection can. A request built with other arguments leaves it `None`
    /// ([`Request::with_args`]).
    pub raw: Option<&'a Bytes>,
}

impl<'a> Request<'a> {
    /// A plain request: not blocking, no token, no replica wait, routed by its first
    /// argument.
    pub fn new(args: &'a [Bytes], proto: Proto, pin: u64) -> Request<'a> {
        Request {
            args,
            proto,
            pin,
            placement: Placement::Pinned,
            blocking: Blocking::No,
            hold: Duration::ZERO,
            token: None,
            again: false,
            replicas: None,
            error_may_write: false,
            script: None,
            route: None,
            raw: None,
        }
    }

    /// This request with other arguments (a script around it, a `WAIT` after it): the client's
    /// bytes no longer describe them, so they are dropped.
    pub fn with_args<'b>(&self, args: &'b [Bytes]) -> Request<'b>
    where
        'a: 'b,
    {
        Request {
            args,
            raw: None,
            ..*self
        }
    }
}

/// How long a command may hold its connection by its own arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocking {
    /// It answers at once.
    No,
    /// It may wait this long for something to take (`BLPOP key 5`).
    For(Duration),
    /// It waits until something comes (`BLPOP key 0`).
    Forever,
}

impl Blocking {
    /// What `args` (name first) asks for, read as Redis reads it (`command::wait`). A
    /// timeout Redis refuses is answered at once, so it blocks nothing.
    pub fn of(args: &[Bytes]) -> Blocking {
        match crate::command::wait::wait(args) {
            Some(Ok(Some(wait))) => Blocking::For(wait),
            Some(Ok(None)) => Blocking::Forever,
            Some(Err(_)) | None => Blocking::No,
        }
    }

    /// Whether it blocks at all.
    pub fn blocks(self) -> bool {
        self != Blocking::No
    }
}

/// Which of a pool's shared connections a request may take. Fewer, larger writes are
/// cheaper than many small ones (a system call each, in holdfast and in Redis), so a request
/// joins the connection whose commands are waiting to be written, where the backend keeps
/// such a queue (holdfast's own connection to a standalone Redis); elsewhere it takes the
/// pinned one. The pin matters for `WAIT` only: it counts the writes made on the
/// connection it is sent on, so it must go where the client's last write went.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// The pinned connection: `WAIT`, a client's own connection, holdfast's own requests.
    Pinned,
    /// The connection gathering a write, if one is: a read.
    Joins,
    /// As [`Placement::Joins`], and the client's pin moves to the connection taken: a
    /// write, so that the client's next `WAIT` is sent after it.
    Moves(&'a AtomicU64),
}

/// A configured backend.
pub enum Backend {
    /// Redis: standalone, Sentinel or Cluster, on holdfast's own links.
    Redis(Box<redis::RedisBackend>),
    /// PostgreSQL or SQLite through sqlx.
    Sql(sql::SqlBackend),
}

impl Backend {
    /// Builds the backend `name`; connections are opened in the background so holdfast can
    /// start before its backends do.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] for a configuration the backend cannot use.
    pub fn build(
        name: &str,
        config: &BackendConfig,
        scripts: &Arc<scripts::Scripts>,
    ) -> Result<Backend, BackendError> {
        let redis = |backend: redis::RedisBackend| {
            Ok(Backend::Redis(Box::new(backend.with_scripts(scripts))))
        };
        match config {
            BackendConfig::Redis(config) => redis(redis::RedisBackend::new(name, config)?),
            BackendConfig::Sentinel(config) => redis(redis::RedisBackend::sentinel(name, config)?),
            BackendConfig::Cluster(config) => redis(redis::RedisBackend::cluster(name, config)?),
            BackendConfig::Sqlite(sqlite) => Ok(Backend::Sql(
                sql::SqlBackend::sqlite(name, sqlite)?.with_scripts(scripts),
            )),
            BackendConfig::Postgres(pg) => Ok(Backend::Sql(
                sql::SqlBackend::postgres(name, pg)?.with_scripts(scripts),
            )),
        }
    }

    /// The configured name.
    pub fn name(&self) -> &str {
        match self {
            Backend::Redis(r) => r.name(),
            Backend::Sql(s) => s.name(),
        }
    }

    /// How the backend spells RESP3 doubles.
    pub fn double_style(&self) -> DoubleStyle {
        match self {
            Backend::Redis(r) => r.double_style(),
            // SQL backends answer as Redis 7.0 does (holdfast's INFO says 7.0.0).
            Backend::Sql(_) => DoubleStyle::G17,
        }
    }

    /// Whether a command of `argc` arguments can run in exact mode on this backend; if not,
    /// it is settled instead. SQL backends take any.
    pub fn takes_token(&self, argc: usize) -> bool {
        match self {
            Backend::Redis(r) => r.takes_token(argc),
            Backend::Sql(_) => true,
        }
    }

    /// Whether `keys` may not go together in one request: keys of several hash slots on a
    /// Redis Cluster (`CROSSSLOT`). Other backends hold every key in one place.
    pub fn spans_slots(&self, keys: &[&[u8]]) -> bool {
        match self {
            Backend::Redis(r) => r.spans_slots(keys),
            Backend::Sql(_) => false,
        }
    }

    /// Sends one request; `acquire_timeout` bounds the wait for a connected connection.
    ///
    /// # Errors
    /// [`BackendError`]; its variant says whether the request was sent.
    pub async fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        // The TSC clock, as the connection's: cheaper to read than the system's.
        let started = quanta::Instant::now();
        let result = match self {
            Backend::Redis(r) => r.dispatch(request, acquire_timeout).await,
            // Boxed: a SQL command's future is several times a Redis one's, and every
            // request's future would otherwise be that size (and moved as often).
            Backend::Sql(s) => Box::pin(s.dispatch(request, acquire_timeout))
                .await
                .map(Reply::from),
        };
        crate::metrics::backend_dispatched(self.name(), 1, started.elapsed());
        result
    }

    /// First attempts of a client's pipelined requests, sent together in order: all of them,
    /// or a leading part (a Redis Cluster sends only those bound for the first one's node),
    /// with one result each (a SQL backend commits a run of writes in one transaction of its
    /// group commit). None when nothing could be sent together.
    pub async fn dispatch_batch(
        &self,
        requests: &[Request<'_>],
        acquire_timeout: Duration,
    ) -> Option<Vec<Result<Reply, BackendError>>> {
        let started = quanta::Instant::now();
        let results = match self {
            Backend::Redis(r) => r.dispatch_batch(requests, acquire_timeout).await,
            Backend::Sql(s) => Box::pin(s.dispatch_batch(requests, acquire_timeout))
                .await
                .map(|results| results.into_iter().map(|r| r.map(Reply::from)).collect()),
        };
        if let Some(results) = &results {
            crate::metrics::backend_dispatched(self.name(), results.len(), started.elapsed());
        }
        results
    }

    /// Whether its writes reach replicas that `WAIT` can count (`min_replicas_ack`): Redis.
    /// A SQL backend's acknowledged write is already durable, and it has none.
    pub fn replicates(&self) -> bool {
        matches!(self, Backend::Redis(_))
    }

    /// Whether a blocking command can carry exact mode's token here: a SQL backend records
    /// what a pop took under it in the pop's own transaction, so the pop's wait tries again
    /// after a lost reply and answers what was taken. A Redis server cannot (a blocking
    /// command does not block inside a script), so there a lost reply stays in doubt.
    pub fn blocks_exactly(&self) -> bool {
        matches!(self, Backend::Sql(_))
    }

    /// Whether [`Backend::dispatch_batch`] sends requests together: every backend does.
    pub fn pipelines(&self) -> bool {
        true
    }

    /// Opens a connection of its own for connection-bound commands (blocking, WATCH/MULTI).
    ///
    /// # Errors
    /// [`BackendError::Connect`] or [`BackendError::AcquireTimeout`].
    pub async fn dedicated(
        &self,
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Result<Dedicated, BackendError> {
        // Boxed here and below: these futures are kilobytes, and every client connection's
        // task is as large as the largest path it might take, idle or not. Transactions and
        // blocking commands pay an allocation instead.
        match self {
            Backend::Redis(r) => Box::pin(r.dedicated(proto, acquire_timeout))
                .await
                .map(Dedicated::Redis),
            Backend::Sql(s) => Ok(Dedicated::Sql(s.dedicated(proto, acquire_timeout))),
        }
    }

    /// Whether the backend answers a PING within `timeout`, and if not, why (`/backendz`,
    /// `holdfast_backend_up`, the health log).
    ///
    /// # Errors
    /// What the probe met.
    pub async fn check(&self, timeout: Duration) -> Result<(), BackendError> {
        match self {
            Backend::Redis(r) => r.check(timeout).await,
            Backend::Sql(s) => s.check(timeout).await,
        }
    }
}

/// A backend connection owned by one client connection.
pub enum Dedicated {
    /// A link of its own (on a Cluster, one per node it has sent to).
    Redis(redis::DedicatedRedis),
    /// A queue for MULTI/EXEC on a SQL backend.
    Sql(sql::SqlDedicated),
}

impl Dedicated {
    /// Sends one request on this connection; never retried.
    ///
    /// # Errors
    /// [`BackendError`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Frame, BackendError> {
        match self {
            Dedicated::Redis(r) => Box::pin(r.send(request)).await.map(Reply::into_frame),
            Dedicated::Sql(s) => Box::pin(s.send(request)).await,
        }
    }

    /// Closes the connection.
    pub async fn close(self) {
        match self {
            Dedicated::Redis(r) => Box::pin(r.close()).await,
            Dedicated::Sql(_) => {}
        }
    }
}

/// Every configured backend that some namespace uses, by name.
pub struct Backends {
    by_name: BTreeMap<String, Arc<Backend>>,
    /// The scripts clients loaded, kept across reloads for every Redis backend.
    scripts: Arc<scripts::Scripts>,
}

impl Backends {
    /// Builds the backends the namespaces refer to. On a reload, `previous` (the running
    /// configuration and its backends) lends every backend whose configuration is unchanged,
    /// connections and all.
    ///
    /// # Errors
    /// The first backend that cannot be built.
    pub fn build(
        config: &Config,
        previous: Option<(&Config, &Backends)>,
    ) -> Result<Backends, BackendError> {
        let scripts = previous.map_or_else(Arc::default, |(_, old)| old.scripts.clone());
        let mut by_name = BTreeMap::new();
        // Each namespace's backend, and its mirror's.
        let used = config.namespaces.iter().flat_map(|ns| {
            std::iter::once(&ns.backend).chain(ns.mirror.as_ref().map(|m| &m.backend))
        });
        for name in used {
            if by_name.contains_key(name) {
                continue;
            }
            let Some(wanted) = config.backends.get(name) else {
                continue;
            };
            let reused = previous.and_then(|(old_config, old)| {
                (old_config.backends.get(name) == Some(wanted))
                    .then(|| old.get(name).cloned())
                    .flatten()
            });
            let backend = match reused {
                Some(backend) => backend,
                None => Arc::new(Backend::build(name, wanted, &scripts)?),
            };
            by_name.insert(name.clone(), backend);
        }
        Ok(Backends { by_name, scripts })
    }

    /// The scripts clients loaded (`SCRIPT LOAD`), for EVALSHA after a NOSCRIPT.
    pub fn scripts(&self) -> &scripts::Scripts {
        &self.scripts
    }

    /// The backend called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Backend>> {
        self.by_name.get(name)
    }

    /// Every backend.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Backend>> {
        self.by_name.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload keeps the scripts clients loaded (a changed backend, built anew, answers its
    /// NOSCRIPT with them); another holdfast in the same process has its own.
    #[tokio::test]
    async fn loaded_scripts_outlive_a_reload_and_stay_with_their_holdfast() {
        let toml = |port: u16| {
            format!(
                "[backends.r]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\n\
                 [[namespaces]]\nname = \"main\"\nbackend = \"r\"\n"
            )
        };
        let first = Config::from_toml(&toml(1)).expect("config");
        let built = Backends::build(&first, None).expect("backends");
        let script = Bytes::from_static(b"return 1");
        built.scripts().remember(&script);
        let sha = scripts::digest(&script);
        let changed = Config::from_toml(&toml(2)).expect("config");
        let reloaded = Backends::build(&changed, Some((&first, &built))).expect("backends");
        assert!(!Arc::ptr_eq(&built.by_name["r"], &reloaded.by_name["r"]));
        assert_eq!(reloaded.scripts().text(sha.as_bytes()), Some(script));
        let other = Backends::build(&first, None).expect("backends");
        assert_eq!(other.scripts().text(sha.as_bytes()), None);
    }
}
