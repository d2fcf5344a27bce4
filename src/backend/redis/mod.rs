//! The Redis backends: standalone, Sentinel and Cluster, every connection holdfast's own
//! ([`link`]), over TCP or TLS.
//!
//! Nothing is replayed below the retry loop: a command that was written and lost comes back
//! as an error for the loop to count. A dropped connection is dialled again on demand, and a
//! command never outlives the connection it was handed to. Each client connection is pinned
//! to one backend connection, so `WAIT` sees that client's writes; a request joins the
//! connection gathering a write instead, and a write moves the client's pin with it (see
//! [`Placement`]).
//!
//! On a Cluster each pooled connection is a [`Nodes`] of `src/backend/redis/cluster.rs`: a link to
//! each primary, routed by the slot map it keeps, `MOVED`/`ASK` followed there. Sentinel's
//! pooled connections are links to the primary its view names (`src/backend/redis/sentinel.rs`).
//!
//! A client's own connection (its blocking commands, `WATCH`/`MULTI`/`EXEC`) is a link of its
//! own too, taken from those dialled ahead (`warm.rs`), and paired by order like any other:
//! no reply is ever taken for a Pub/Sub message by its shape. A blocking command's reply is
//! due within its own timeout plus `response_timeout`; while it waits (for ever, or long),
//! the backend is probed on a shared connection, and a backend that stops answering ends the
//! wait: the connection is reset, so nothing it took lands later, and the client hears that
//! the command may have been applied (a pop) or was not (a read).

pub mod cluster;
pub mod codec;
pub mod dial;
pub mod exact;
pub mod feed;
pub mod link;
pub mod sentinel;
pub mod warm;

use super::{BackendError, Blocking, DoubleStyle, Placement, Proto, Reply, Request};
use crate::config::{ClusterConfig, RedisConfig, SentinelConfig};
use crate::error::{LinkError, LinkErrorKind};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use cluster::{keyslot, Nodes, Topology};
use dial::{Target, Tls};
use exact::TokenDb;
use redis_protocol::resp3::types::BytesFrame as Frame;
use sentinel::{Addr, Follower, Watch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex, OnceCell};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use warm::Warm;

pub use crate::config::host_port;

/// Resolves when a dialled connection's task ends.
type Closed = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// How often a client's own connection blocked on the backend has it probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Where a backend's clients' own connections go.
pub enum Servers {
    /// One server.
    Fixed(Addr),
    /// The primary the sentinels name.
    Sentinel(Arc<Watch>),
    /// Every primary of a Cluster.
    Cluster(Arc<Topology>),
}

impl Servers {
    /// The servers wanted now, with the Sentinel generation of each.
    fn wanted(&self) -> Vec<(Addr, Option<u64>)> {
        match self {
            Servers::Fixed(addr) => vec![(addr.clone(), None)],
            Servers::Sentinel(watch) => watch
                .usable_now()
                .map(|(addr, generation)| vec![(addr, Some(generation))])
                .unwrap_or_default(),
            Servers::Cluster(topology) => topology
                .map()
                .primaries
                .iter()
                .map(|addr| (addr.clone(), None))
                .collect(),
        }
    }

    /// Whether a link dialled ahead must be checked for its role: a server named by
    /// Sentinel or a Cluster's map may have become a replica since.
    fn check_roles(&self) -> bool {
        !matches!(self, Servers::Fixed(_))
    }
}

/// How a slot dials.
#[derive(Clone)]
enum Dialer {
    /// A link to one server: the standalone one, or the primary Sentinel names at each dial.
    Link(Arc<Target>),
    /// Links to a Cluster's primaries.
    Cluster(Arc<Topology>, Arc<Target>),
}

/// What a dialled connection talks through.
enum PoolConn {
    Link(link::Link),
    Cluster(Arc<Nodes>),
}

/// One dialled connection: its client, and a signal that turns true when its connection
/// task ends.
struct Live {
    conn: PoolConn,
    ended: watch::Receiver<bool>,
    /// `MOVED`/`ASK` redirections each command may follow (0 off a Cluster, and on a
    /// client's own connection).
    redirections: u32,
    /// Where exact mode's tokens live on this connection's server.
    tokens: Option<TokenDb>,
    /// Set when a reply did not come in time: the connection takes no new command and is
    /// closed, failing what is in flight.
    retired: AtomicBool,
    /// Under Sentinel: the view it was dialled in, and its generation. Live only while that
    /// generation stands (see `src/backend/redis/sentinel.rs`).
    fence: Option<(Arc<Watch>, u64)>,
}

impl Live {
    fn is_up(&self) -> bool {
        !*self.ended.borrow()
            && !self.retired.load(Ordering::Acquire)
            && self.fence.as_ref().map_or(true, |(watch, generation)| {
                watch.generation() == *generation
            })
    }

    /// Takes the connection out of service and closes it: its links stop at once, and what
    /// is in flight there fails as sent (a reply that did not come in time may never come).
    fn retire(&self) {
        self.retire_because("the connection was closed by holdfast");
    }

    /// As [`Live::retire`], saying `why` to what was in flight.
    fn retire_because(&self, why: &str) {
        if !self.retired.swap(true, Ordering::AcqRel) {
            match &self.conn {
                PoolConn::Link(link) => link.close_because(why),
                PoolConn::Cluster(nodes) => nodes.close(),
            }
        }
    }

    /// Sends one request, through the exact-mode script when it carries a token.
    async fn send(
        &self,
        request: &Request<'_>,
        response_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        // The hot path: a plain command on a link, whose own close fails what is in flight.
        // Everything else is boxed so its (much larger) future is not carried by every
        // request's.
        let result = match (&self.conn, request.token) {
            (PoolConn::Link(link), None) => on_link(link, request, response_timeout).await,
            (PoolConn::Cluster(nodes), None) => {
                Box::pin(on_cluster(
                    nodes,
                    self.redirections,
                    request,
                    response_timeout,
                ))
                .await
            }
            (_, Some(token)) => Box::pin(exact(self, request, token, response_timeout)).await,
        };
        self.after_send(&result);
        result
    }

    /// A reply that did not come in time retires the connection.
    fn after_send(&self, result: &Result<Reply, BackendError>) {
        if let Err(BackendError::Sent { source }) = result {
            if source.kind() == LinkErrorKind::Timeout {
                self.retire();
            }
        }
    }

    /// The server a request of `route` goes to on this connection, for probes: a Cluster's
    /// node; None elsewhere (one server).
    fn server_of(&self, route: Option<&[u8]>) -> Option<Addr> {
        match &self.conn {
            PoolConn::Cluster(nodes) => nodes.owner_now(route.map(keyslot)),
            PoolConn::Link(_) => None,
        }
    }
}

/// One pooled connection and the dial that (re)opens it.
struct PoolSlot {
    /// How each dial connects: a fresh link each time, so a command still held for a dead
    /// connection dies with it, and is never written to the next connection, long after the
    /// request gave up on it.
    dialer: Dialer,
    /// The connection of the last successful dial.
    live: ArcSwapOption<Live>,
    /// A dial in progress; kept here so a waiter that gives up does not abandon it, and the
    /// next waiter joins it instead of starting a second one.
    dialing: Mutex<Option<JoinHandle<Result<(), LinkError>>>>,
    /// The backend's double spelling, learnt from its version at each dial.
    doubles: Arc<AtomicBool>,
    /// The backend's name, for the pool metrics; empty for a client's own connection.
    backend: Arc<str>,
    /// Redirections each command may follow (see [`Live::redirections`]).
    redirections: u32,
    /// Exact mode's tokens on this backend.
    tokens: Tokens,
    /// What the link of this slot tells the pool: commands not yet written, a `WAIT`
    /// unanswered (kept across its dials).
    signals: link::Signals,
    /// Under Sentinel: the view of the primary each dial asks, and whose changes fence it.
    follow: Option<Arc<Watch>>,
    /// Links dialled ahead, taken before dialling (a client's own connection).
    warm: Option<Arc<Warm>>,
}

impl PoolSlot {
    fn new(
        dialer: Dialer,
        doubles: Arc<AtomicBool>,
        backend: Arc<str>,
        (redirections, tokens): (u32, Tokens),
        follow: Option<Arc<Watch>>,
        warm: Option<Arc<Warm>>,
    ) -> Arc<PoolSlot> {
        let signals = if backend.is_empty() {
            link::Signals::default()
        } else {
            link::Signals::shared()
        };
        Arc::new(PoolSlot {
            dialer,
            live: ArcSwapOption::empty(),
            dialing: Mutex::new(None),
            doubles,
            backend,
            redirections,
            tokens,
            signals,
            follow,
            warm,
        })
    }

    /// The connection, while its task runs.
    fn live(&self) -> Option<Arc<Live>> {
        self.live.load_full().filter(|live| live.is_up())
    }

    /// Starts one dial in a task of its own, so a waiter that gives up does not abandon it.
    fn dial(self: &Arc<Self>) -> JoinHandle<Result<(), LinkError>> {
        let slot = self.clone();
        tokio::spawn(async move { slot.open().await })
    }

    /// Dials (or takes a link dialled ahead) and makes it the slot's connection; a watcher
    /// signals the moment the connection's task ends. A client's own connection is opened
    /// here directly, not in a task: with a link ready it is its client's at once, with no
    /// pass through the scheduler that would let other clients' commands overtake its first.
    async fn open(self: &Arc<Self>) -> Result<(), LinkError> {
        let slot = self;
        {
            let pooled = !slot.backend.is_empty();
            // Under Sentinel, the primary the view names, and the generation the connection
            // will belong to.
            let fence = match &slot.follow {
                Some(watch) => Some((watch.clone(), watch.primary().await?)),
                None => None,
            };
            let primary = fence.as_ref().map(|(_, (addr, _))| addr);
            let (conn, task, version) = match &slot.dialer {
                Dialer::Link(target) => {
                    let target = match primary {
                        Some(addr) => target.at(addr),
                        None => (**target).clone(),
                    };
                    let generation = fence.as_ref().map(|(_, (_, generation))| *generation);
                    let taken = slot
                        .warm
                        .as_ref()
                        .and_then(|warm| warm.take(&target, generation));
                    let (link, task, server) = match taken {
                        Some(taken) => taken,
                        None => link::Link::connect(&target, slot.signals.clone()).await?,
                    };
                    if primary.is_some() && !server.is_primary() {
                        link.close();
                        return Err(not_primary(&slot.follow, primary));
                    }
                    if pooled {
                        slot.tokens.learn(&slot.backend, &server.info);
                    }
                    let task: Closed = Box::pin(async move {
                        let _ = task.await;
                    });
                    (PoolConn::Link(link), task, server.version)
                }
                Dialer::Cluster(topology, target) => {
                    let nodes = Nodes::new(
                        topology.clone(),
                        (**target).clone(),
                        slot.signals.clone(),
                        slot.warm.clone(),
                    );
                    // A pooled connection proves the map and a node at once; a client's own
                    // dials each node as its commands need it.
                    if pooled {
                        nodes.dial().await?;
                    }
                    let version = nodes.version();
                    // Its links come and go with the map; it ends when retired.
                    let task: Closed = Box::pin(std::future::pending());
                    (PoolConn::Cluster(nodes), task, version)
                }
            };
            // Redis 7.2 moved from %.17g to the shortest round-trip spelling.
            if let Some(version) = version {
                slot.doubles.store(version >= (7, 2), Ordering::Relaxed);
            }
            let (ended_tx, ended) = watch::channel(false);
            let fence = fence.map(|(watch, (_, generation))| (watch, generation));
            let live = Arc::new(Live {
                conn,
                ended,
                redirections: slot.redirections,
                tokens: slot.tokens.db,
                retired: AtomicBool::new(false),
                fence: fence.clone(),
            });
            if !live.is_up() {
                // Fenced while it was dialled.
                live.retire();
                return Err(LinkError::new(
                    LinkErrorKind::Io,
                    "the primary changed while dialling",
                ));
            }
            let weak = Arc::downgrade(&live);
            slot.live.store(Some(live));
            if pooled {
                crate::metrics::pool_connected(&slot.backend, true);
            }
            let backend = slot.backend.clone();
            tokio::spawn(async move {
                let fenced = async {
                    match &fence {
                        Some((watch, generation)) => watch.fenced(*generation).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = task => {}
                    () = fenced => {
                        // The primary moved or is down: close at once, failing what is in
                        // flight (Transient), so nothing more reaches the old primary and
                        // no reply it writes later is read.
                        if let Some(live) = weak.upgrade() {
                            live.retire();
                        }
                        crate::metrics::connection_fenced(&backend);
                    }
                }
                let _ = ended_tx.send(true);
                if pooled {
                    crate::metrics::pool_connected(&backend, false);
                }
            });
            Ok(())
        }
    }
}

/// Exact mode's tokens on one backend, shared by its slots.
#[derive(Clone, Default)]
struct Tokens {
    /// Their own database (None: beside the data, on a Cluster, which has only database 0).
    db: Option<TokenDb>,
    /// True while the last dial found a `maxmemory-policy` that may evict them.
    evicting: Arc<AtomicBool>,
}

impl Tokens {
    /// Reads the eviction policy from a dial's `INFO` and says so when it changes.
    fn learn(&self, backend: &str, info: &str) {
        let policy = exact::evicting_policy(info);
        if self.evicting.swap(policy.is_some(), Ordering::Relaxed) == policy.is_some() {
            return;
        }
        match policy {
            Some(policy) => tracing::error!(
                backend,
                policy,
                "maxmemory-policy {policy} may evict exact mode's tokens, and a retry that finds none applies its command again: exact-mode writes on this backend are settled instead until a dial finds noeviction or maxmemory 0"
            ),
            None => tracing::info!(
                backend,
                "maxmemory-policy no longer evicts: exact mode is back on this backend"
            ),
        }
    }
}

/// A protocol's shared connections.
#[derive(Default)]
struct Pool {
    slots: Vec<Arc<PoolSlot>>,
    /// The connection the last request that found none gathering started a write on; the
    /// requests after it join it while its commands wait to be written.
    filling: AtomicUsize,
}

impl Pool {
    /// The index of the connection a request pinned to `pin` takes. A request that may move
    /// joins the connection gathering a write, or starts one on its pinned connection; with
    /// fifty clients, one write and one read then carry every command that came in one pass
    /// of the event loop, however many connections the pool has (with eight, each carried an
    /// eighth of them: 10–20% more CPU per request). A `Moves` request takes its pin along.
    ///
    /// A connection whose `WAIT` (`min_replicas_ack`) is unanswered is passed over while
    /// another is free: Redis runs nothing more of it until the replicas answer, so the next
    /// batch starts on a free one, and its `WAIT` waits alongside (one acknowledgement from a
    /// replica answers them all), not after.
    fn place(&self, pin: u64, placement: Placement<'_>) -> usize {
        let len = self.slots.len().max(1);
        // Below `len`, so the cast back to usize is lossless.
        let home = (pin % len as u64) as usize;
        if matches!(placement, Placement::Pinned) || len == 1 {
            return home;
        }
        let filling = self.filling.load(Ordering::Relaxed);
        let signal = |at: usize| {
            self.slots.get(at).map_or((false, false), |slot| {
                let signals = &slot.signals;
                (
                    signals.unwritten.load(Ordering::Relaxed),
                    signals.acking.load(Ordering::Relaxed) == 0,
                )
            })
        };
        let (gathering, free) = signal(filling);
        let at = if gathering && free {
            filling
        } else {
            let start = (0..len)
                .map(|i| (home + i) % len)
                .find(|at| signal(*at).1)
                .unwrap_or(if gathering { filling } else { home });
            if start != filling || !gathering {
                self.filling.store(start, Ordering::Relaxed);
            }
            start
        };
        if let Placement::Moves(pin) = placement {
            if at != home {
                pin.store(at as u64, Ordering::Relaxed);
            }
        }
        at
    }
}

/// How the backend's servers are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    /// One server at a fixed address.
    Standalone,
    /// The primary Sentinel names at each dial.
    Sentinel,
    /// A Redis Cluster, following `MOVED`/`ASK` this many times per command.
    Cluster(u32),
}

/// A Redis (standalone, Sentinel or Cluster) with one pool per protocol version.
pub struct RedisBackend {
    /// The `[backends]` key.
    name: String,
    /// How its connections are made: address (none under Sentinel and on a Cluster: found
    /// at each dial), credentials, database, TLS and timeouts; RESP2.
    target: Target,
    /// Longest wait for a reply to a sent, non-blocking command.
    response_timeout: Duration,
    /// Pool size, per protocol.
    pool_size: usize,
    /// RESP2 connections, dialled at start.
    resp2: Pool,
    /// RESP3 connections, dialled when the first RESP3 client needs one.
    resp3: OnceCell<Pool>,
    /// True when the backend spells doubles the shortest way (7.2 on).
    doubles: Arc<AtomicBool>,
    /// Sentinel and Cluster: a connection whose server turned replica is dropped, so the
    /// next dial finds the new primary.
    flavor: Flavor,
    /// Exact mode's tokens.
    tokens: Tokens,
    /// Under Sentinel: the sentinels' view of the primary, followed as it changes.
    follower: Option<Follower>,
    /// On a Cluster: the slot map its links follow.
    topology: Option<Arc<Topology>>,
    /// Links dialled ahead for clients' own connections (None: `warm_connections = 0`).
    warm: Option<Arc<Warm>>,
    /// Whether the backend still answers, asked for clients blocked on it.
    probe: Arc<Probe>,
    /// The scripts clients loaded, to answer a NOSCRIPT with.
    scripts: Arc<crate::backend::scripts::Scripts>,
}

/// A backend's TLS: None unless asked for (`rediss://`, `tls = true`, or a `tls_ca`); then
/// the trust roots of `tls_ca`, or the system's.
fn tls_of(
    name: &str,
    wanted: bool,
    ca: Option<&std::path::Path>,
) -> Result<Option<Tls>, BackendError> {
    if !wanted && ca.is_none() {
        return Ok(None);
    }
    let config = match ca {
        Some(ca) => {
            crate::tls::client_config(ca).map_err(|e| (format!("backends.{name}.tls_ca"), e))
        }
        None => crate::tls::system_config().map_err(|e| (format!("backends.{name}"), e)),
    };
    config
        .map(|config| Some(Tls::new(config)))
        .map_err(|(key, e)| BackendError::Unsupported {
            what: format!("{key}: {e}"),
        })
}

/// The `host:port` addresses under `backends.NAME.FIELD`.
fn addresses(name: &str, field: &str, addrs: &[String]) -> Result<Vec<Addr>, BackendError> {
    addrs
        .iter()
        .map(|addr| {
            host_port(addr).ok_or_else(|| BackendError::Unsupported {
                what: format!("backends.{name}.{field}: `{addr}` is not host:port"),
            })
        })
        .collect()
}

/// The target of a backend whose servers are found at each dial (the primary Sentinel
/// names, a Cluster's nodes): no address of its own.
fn found_at_each_dial(
    name: &str,
    password_file: Option<&std::path::Path>,
    (tls, tls_ca): (bool, Option<&std::path::Path>),
    timeouts: (Duration, Duration),
) -> Result<Target, BackendError> {
    let password = match password_file {
        Some(path) => Some(password_from(name, path)?),
        None => None,
    };
    let tls = tls_of(name, tls, tls_ca)?;
    Ok(Target::new((String::new(), 0), Proto::Resp2, timeouts)
        .with_auth(None, password)
        .with_tls(tls))
}

/// What [`RedisBackend::with`] builds a backend of.
struct Parts {
    target: Target,
    pool_size: usize,
    warm: usize,
    flavor: Flavor,
    tokens: Option<TokenDb>,
    follower: Option<Follower>,
    topology: Option<Arc<Topology>>,
}

impl RedisBackend {
    /// Builds the pool and starts dialling in the background (holdfast may start before its
    /// backend does).
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when the URL does not parse.
    pub fn new(name: &str, config: &RedisConfig) -> Result<RedisBackend, BackendError> {
        let url =
            crate::config::parse_redis_url(&config.url).map_err(|e| BackendError::Unsupported {
                what: format!("backends.{name}.url: {e}"),
            })?;
        let password = match &config.password_file {
            Some(path) => Some(password_from(name, path)?),
            None => url.password.clone(),
        };
        let tls = tls_of(name, url.tls, config.tls_ca.as_deref())?;
        let target = Target::new(
            (url.host.clone(), url.port),
            Proto::Resp2,
            (config.connection_timeout, config.response_timeout),
        )
        .with_auth(url.username.clone(), password)
        .with_database(url.database)
        .with_tls(tls);
        let tokens = TokenDb {
            tokens: config.token_db,
            data: url.database.unwrap_or(0),
        };
        Ok(RedisBackend::with(
            name,
            Parts {
                target,
                pool_size: config.pool_size,
                warm: config.warm_connections,
                flavor: Flavor::Standalone,
                tokens: Some(tokens),
                follower: None,
                topology: None,
            },
        ))
    }

    /// A Redis primary found through Sentinel. Each dial asks the sentinels for the primary
    /// (and checks its role), so a re-dial after a failover reaches the promoted replica.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when an address or the password file is unusable.
    pub fn sentinel(name: &str, config: &SentinelConfig) -> Result<RedisBackend, BackendError> {
        let sentinels = addresses(name, "sentinels", &config.sentinels)?;
        let target = found_at_each_dial(
            name,
            config.password_file.as_deref(),
            (config.tls, config.tls_ca.as_deref()),
            (config.connection_timeout, config.response_timeout),
        )?;
        let follower = Follower::start(
            name,
            &config.master_name,
            sentinels,
            config.connection_timeout,
            target.tls().cloned(),
        );
        Ok(RedisBackend::with(
            name,
            Parts {
                target,
                pool_size: config.pool_size,
                warm: config.warm_connections,
                flavor: Flavor::Sentinel,
                tokens: Some(TokenDb {
                    tokens: config.token_db,
                    data: 0,
                }),
                follower: Some(follower),
                topology: None,
            },
        ))
    }

    /// A Redis Cluster, found from its seed nodes.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when an address or the password file is unusable.
    pub fn cluster(name: &str, config: &ClusterConfig) -> Result<RedisBackend, BackendError> {
        let seeds = addresses(name, "nodes", &config.nodes)?;
        let target = found_at_each_dial(
            name,
            config.password_file.as_deref(),
            (config.tls, config.tls_ca.as_deref()),
            (config.connection_timeout, config.response_timeout),
        )?;
        let topology = Topology::start(name, seeds, &target);
        Ok(RedisBackend::with(
            name,
            Parts {
                target,
                pool_size: config.pool_size,
                warm: config.warm_connections,
                flavor: Flavor::Cluster(config.max_redirections),
                tokens: None,
                follower: None,
                topology: Some(topology),
            },
        ))
    }

    fn with(name: &str, parts: Parts) -> RedisBackend {
        let Parts {
            target,
            pool_size,
            warm,
            flavor,
            tokens,
            follower,
            topology,
        } = parts;
        let servers = match (&follower, &topology) {
            (Some(follower), _) => Servers::Sentinel(follower.watch().clone()),
            (_, Some(topology)) => Servers::Cluster(topology.clone()),
            _ => Servers::Fixed(target.addr()),
        };
        let warm = Warm::start(name, target.clone(), servers, warm);
        let mut backend = RedisBackend {
            name: name.to_string(),
            response_timeout: target.response_timeout(),
            target,
            pool_size,
            resp2: Pool::default(),
            resp3: OnceCell::new(),
            doubles: Arc::new(AtomicBool::new(false)),
            flavor,
            tokens: Tokens {
                db: tokens,
                evicting: Arc::new(AtomicBool::new(false)),
            },
            follower,
            topology,
            warm,
            probe: Arc::default(),
            scripts: Arc::default(),
        };
        backend.resp2 = backend.open_pool(Proto::Resp2);
        backend.probe = Arc::new(Probe::new(
            backend.resp2.slots.first().cloned(),
            backend.response_timeout,
        ));
        for slot in &backend.resp2.slots {
            if let Ok(mut dialing) = slot.dialing.try_lock() {
                *dialing = Some(slot.dial());
            }
        }
        backend
    }

    /// How a connection of `proto` dials: a link, or a Cluster's links.
    fn dialer(&self, proto: Proto) -> Dialer {
        let target = Arc::new(self.target.with_proto(proto));
        match &self.topology {
            Some(topology) => Dialer::Cluster(topology.clone(), target),
            None => Dialer::Link(target),
        }
    }

    fn open_pool(&self, proto: Proto) -> Pool {
        let slots = (0..self.pool_size)
            .map(|_| {
                PoolSlot::new(
                    self.dialer(proto),
                    self.doubles.clone(),
                    self.name.as_str().into(),
                    (self.redirections(), self.tokens.clone()),
                    self.follow(),
                    None,
                )
            })
            .collect();
        Pool {
            slots,
            filling: AtomicUsize::new(0),
        }
    }

    /// The `[backends]` key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A subscribed client's connections to this backend (`feed.rs`), delivering into
    /// `outbox`, given up after `hold` without a connection.
    pub fn feed(&self, outbox: crate::backend::pubsub::Outbox, hold: Duration) -> feed::RedisFeed {
        use feed::{Ctx, Locate, RedisFeed};
        let locate = match (self.flavor, &self.follower, &self.topology) {
            (Flavor::Sentinel, Some(follower), _) => Locate::Sentinel(follower.watch().clone()),
            (Flavor::Cluster(_), _, Some(topology)) => Locate::Cluster(topology.clone()),
            _ => Locate::Fixed,
        };
        RedisFeed::new(Ctx {
            backend: self.name.as_str().into(),
            target: self.target.with_proto(Proto::Resp2),
            locate,
            outbox,
            hold,
        })
    }

    /// Under Sentinel, the view of the primary its connections follow.
    fn follow(&self) -> Option<Arc<Watch>> {
        self.follower.as_ref().map(|f| f.watch().clone())
    }

    fn redirections(&self) -> u32 {
        match self.flavor {
            Flavor::Cluster(n) => n,
            Flavor::Standalone | Flavor::Sentinel => 0,
        }
    }

    /// Whether `keys` must be refused together, as Redis Cluster refuses keys of several
    /// hash slots in one request (`CROSSSLOT`). Off a Cluster, never.
    pub fn spans_slots(&self, keys: &[&[u8]]) -> bool {
        if !matches!(self.flavor, Flavor::Cluster(_)) {
            return false;
        }
        let mut slots = keys.iter().map(|k| keyslot(k));
        let first = slots.next();
        slots.any(|s| Some(s) != first)
    }

    /// Whether a command of `argc` arguments can run in exact mode here: it fits in the
    /// script (`exact::MAX_ARGS`), and the last dial found no eviction policy that could
    /// take its token. Otherwise it is settled (the README's "Reply modes").
    pub fn takes_token(&self, argc: usize) -> bool {
        argc <= exact::MAX_ARGS && !self.tokens.evicting.load(Ordering::Relaxed)
    }

    /// How this backend spells RESP3 doubles.
    pub fn double_style(&self) -> DoubleStyle {
        if self.doubles.load(Ordering::Relaxed) {
            DoubleStyle::Shortest
        } else {
            DoubleStyle::G17
        }
    }

    /// The connection `request` takes: see [`Placement`].
    async fn placed(&self, request: &Request<'_>) -> &Arc<PoolSlot> {
        let pool = match request.proto {
            Proto::Resp2 => &self.resp2,
            Proto::Resp3 => {
                self.resp3
                    .get_or_init(|| async { self.open_pool(Proto::Resp3) })
                    .await
            }
        };
        // `place` answers an index below the pool's size (validated to be at least 1).
        &pool.slots[pool.place(request.pin, request.placement)]
    }

    /// This holdfast's scripts, shared with its other backends.
    #[must_use]
    pub fn with_scripts(mut self, scripts: &Arc<crate::backend::scripts::Scripts>) -> RedisBackend {
        self.scripts = scripts.clone();
        self
    }

    /// Sends one request on the connection its placement gives (see [`Pool::place`]).
    ///
    /// # Errors
    /// [`BackendError`]: `AcquireTimeout`/`Connect` when nothing was sent, `Sent` when the
    /// request was handed to the connection, `Reply` for an error reply.
    pub async fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        if matches!(self.flavor, Flavor::Cluster(_)) {
            if let Some(answer) = Box::pin(self.on_every_primary(request, acquire_timeout)).await {
                return answer;
            }
        }
        let slot = self.placed(request).await;
        let live = ensure_connected(slot, acquire_timeout).await?;
        let mut result = live.send(request, self.response_timeout).await;
        if let Err(BackendError::Reply { prefix, .. }) = &result {
            // A script the client loaded, missing from this server's cache (a restart, a
            // failover, another Cluster node): nothing ran; its text runs it and caches it.
            if prefix == "NOSCRIPT" {
                if let Some(args) = self.scripts.by_text(request.args) {
                    result = live
                        .send(&request.with_args(&args), self.response_timeout)
                        .await;
                }
            }
        }
        self.after(&live, &result);
        result
    }

    /// Under Sentinel: a request served after a switch ends its measure.
    fn served(&self, result: &Result<Reply, BackendError>) {
        if let (Some(follower), Ok(_)) = (&self.follower, result) {
            follower.watch().served();
        }
    }

    /// Looks at a result for what it says about its connection: under Sentinel or on a
    /// Cluster a `READONLY` is a demoted primary (nothing ran; NotAttempted), so the
    /// connection is retired and the next attempt dials again and finds the new primary.
    fn after(&self, live: &Live, result: &Result<Reply, BackendError>) {
        self.served(result);
        if self.flavor != Flavor::Standalone {
            if let Err(BackendError::Reply { prefix, .. }) = result {
                // A Cluster connection fenced that node's link itself.
                if prefix == "READONLY" && !matches!(live.conn, PoolConn::Cluster(_)) {
                    live.retire();
                    // The sentinels may know of a switch we have not heard.
                    if let Some(watch) = &live.fence {
                        watch.0.requery();
                    }
                }
            }
        }
    }

    /// First attempts of a client's pipelined requests, written back to back on one
    /// connection ([`run_placement`]) in the order given (Redis runs them in that order) and
    /// awaited together. On a Cluster only the leading requests bound for the first one's
    /// node are sent ([`leading_run`]); the results are theirs, and the caller sends the rest
    /// after them.
    /// None when nothing was sent: no connection within `acquire_timeout`, or a request the
    /// Cluster must treat alone (the caller then sends them one by one).
    pub async fn dispatch_batch(
        &self,
        requests: &[Request<'_>],
        acquire_timeout: Duration,
    ) -> Option<Vec<Result<Reply, BackendError>>> {
        let first = requests.first()?;
        if matches!(self.flavor, Flavor::Cluster(_)) && requests.iter().any(whole_keyspace) {
            return None;
        }
        // An EVALSHA may need its NOSCRIPT answered with the script's text (`dispatch`); a
        // client's WAIT waits as long as it asked (`reply_deadline`), longer than the run's.
        if requests
            .iter()
            .any(|r| self.scripts.by_text(r.args).is_some() || client_wait(r.args).is_some())
        {
            return None;
        }
        let lead = Request {
            placement: run_placement(requests),
            ..*first
        };
        let slot = self.placed(&lead).await;
        let live = ensure_connected(slot, acquire_timeout).await.ok()?;
        let requests = match &live.conn {
            PoolConn::Cluster(nodes) => {
                let node = |r: &Request<'_>| nodes.owner_now(request_slot(r));
                requests.get(..leading_run(requests.iter().map(node)))?
            }
            PoolConn::Link(_) => requests,
        };
        if requests
            .iter()
            .all(|r| r.token.is_none() && !r.blocking.blocks())
        {
            // A Cluster connection's link to the run's node, held while the run is sent.
            let cluster_link;
            let link = match &live.conn {
                PoolConn::Link(link) => link,
                PoolConn::Cluster(nodes) => {
                    let node = nodes.owner_now(requests.first().and_then(request_slot))?;
                    cluster_link = nodes.link_to(&node).await.ok()?;
                    &*cluster_link
                }
            };
            {
                // All queued under one lock, in order, and awaited in order.
                let replies = link
                    .send_all(
                        requests.iter().map(|r| (r.args, r.raw)),
                        self.response_timeout,
                    )
                    .await;
                let results: Vec<_> = replies
                    .into_iter()
                    .map(|reply| link_reply(first.proto, reply))
                    .collect();
                for result in &results {
                    live.after_send(result);
                    self.after(&live, result);
                }
                return Some(results);
            }
        }
        // join_all polls each send once, in order, before any is polled again: that first
        // poll queues the command on its link, so they reach the connection in this order.
        let results = futures_util::future::join_all(
            requests
                .iter()
                .map(|request| live.send(request, self.response_timeout)),
        )
        .await;
        for result in &results {
            self.after(&live, result);
        }
        Some(results)
    }

    /// On a Cluster, the commands about the whole keyspace: FLUSHALL/FLUSHDB reach every
    /// primary (a Cluster has only database 0, so both flush it all); KEYS, SCAN, DBSIZE and
    /// RANDOMKEY are refused, since one node's answer would silently be a part of the whole.
    /// None for every other command.
    async fn on_every_primary(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Option<Result<Reply, BackendError>> {
        let name = request.args.first()?;
        if !whole_keyspace(request) {
            return None;
        }
        let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
        if is("FLUSHALL") || is("FLUSHDB") {
            let flush = async {
                let slot = self.placed(request).await;
                let live = ensure_connected(slot, acquire_timeout).await?;
                match &live.conn {
                    PoolConn::Cluster(nodes) => {
                        let links = nodes
                            .every_primary()
                            .await
                            .map_err(|source| BackendError::Connect { source })?;
                        let primaries = links.len();
                        for (flushed, link) in links.into_iter().enumerate() {
                            let reply = link_reply(
                                request.proto,
                                link.send(request.args, None, Some(self.response_timeout))
                                    .await,
                            );
                            match reply {
                                Ok(_) => {}
                                Err(e) if flushed == 0 => return Err(e),
                                // Some primaries flushed already: whatever this one says,
                                // the command was applied in part, so it is in doubt, never
                                // "not applied" (it is idempotent: a retry flushes them all).
                                Err(e) => {
                                    return Err(BackendError::Sent {
                                        source: LinkError::new(
                                            LinkErrorKind::Io,
                                            format!(
                                                "flushed {flushed} of {primaries} primaries, \
                                                 then: {e}"
                                            ),
                                        ),
                                    })
                                }
                            }
                        }
                    }
                    PoolConn::Link(_) => {
                        return Err(BackendError::Unsupported {
                            what: "a cluster connection is not a single link".to_string(),
                        })
                    }
                }
                Ok(Reply::from(Frame::SimpleString {
                    data: Bytes::from_static(b"OK"),
                    attributes: None,
                }))
            };
            return Some(flush.await);
        }
        Some(Err(BackendError::Unsupported {
            what: format!(
                "holdfast: {} is not served on a cluster backend (the keys live on several nodes)",
                String::from_utf8_lossy(name).to_ascii_uppercase()
            ),
        }))
    }

    /// A connection of its own, connected, for connection-bound commands.
    ///
    /// # Errors
    /// [`BackendError::Connect`] or [`BackendError::AcquireTimeout`].
    pub async fn dedicated(
        &self,
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Result<DedicatedRedis, BackendError> {
        // Never re-dialled once it breaks: it carries WATCH or blocking state, which the
        // client must learn is gone, not have silently replaced.
        // Dedicated connections are not pooled: they are not counted in the pool metrics.
        // They follow no redirection: a command inside MULTI redirected to another node
        // would run there at once, outside the transaction.
        let slot = PoolSlot::new(
            self.dialer(proto),
            self.doubles.clone(),
            "".into(),
            (0, self.tokens.clone()),
            self.follow(),
            self.warm.clone(),
        );
        let opened = match tokio::time::timeout(acquire_timeout, slot.open()).await {
            Ok(opened) => opened,
            Err(_) => {
                return Err(BackendError::AcquireTimeout {
                    waited: acquire_timeout,
                })
            }
        };
        opened.map_err(|source| BackendError::Connect { source })?;
        let live = slot.live().ok_or_else(|| BackendError::Connect {
            source: LinkError::new(
                LinkErrorKind::Io,
                "the connection closed as soon as it opened",
            ),
        })?;
        Ok(DedicatedRedis {
            live,
            response_timeout: self.response_timeout,
            probe: self.probe.clone(),
        })
    }

    /// Whether a PING is answered within `timeout`.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let Some(slot) = self.resp2.slots.first() else {
            return false;
        };
        let args = [bytes::Bytes::from_static(b"PING")];
        let request = Request::new(&args, Proto::Resp2, 0);
        // No timeout around the send: its own deadline retires a connection whose reply did
        // not come in time.
        let Ok(live) = ensure_connected(slot, timeout).await else {
            return false;
        };
        live.send(&request, timeout).await.is_ok()
    }
}

/// Where requests sent back to back go: all on one connection (Redis runs them in that
/// order), the pinned one when any of them must be (a `WAIT` in a pipeline), else where the
/// first is placed.
fn run_placement<'a>(requests: &[Request<'a>]) -> Placement<'a> {
    let pinned = requests
        .iter()
        .any(|r| matches!(r.placement, Placement::Pinned));
    match requests.first() {
        Some(first) if !pinned => first.placement,
        _ => Placement::Pinned,
    }
}

/// The slot a request is routed by on a Cluster: its route key, else its first argument;
/// None for a request without one, which goes to any node.
fn request_slot(request: &Request<'_>) -> Option<u16> {
    request
        .route
        .or_else(|| request.args.get(1).map(|key| key.as_ref()))
        .map(keyslot)
}

/// The length of the leading run of equal, known nodes; at least 1 unless empty, since the
/// first request goes anyway (alone, when its node is unknown).
fn leading_run<N: PartialEq>(nodes: impl IntoIterator<Item = Option<N>>) -> usize {
    let mut nodes = nodes.into_iter();
    match nodes.next() {
        None => 0,
        Some(None) => 1,
        Some(Some(first)) => 1 + nodes.take_while(|n| n.as_ref() == Some(&first)).count(),
    }
}

/// A command about the whole keyspace, which a Cluster cannot send to one node.
fn whole_keyspace(request: &Request<'_>) -> bool {
    let Some(name) = request.args.first() else {
        return false;
    };
    ["FLUSHALL", "FLUSHDB", "KEYS", "SCAN", "DBSIZE", "RANDOMKEY"]
        .iter()
        .any(|word| name.eq_ignore_ascii_case(word.as_bytes()))
}

/// Makes sure `slot` is connected, dialling if it is not, within `acquire_timeout`. A dial
/// that fails (refused, handshake error) ends the wait at once as not sent, so a backend that
/// refuses connections during a failover costs a backoff step, not a whole acquire timeout;
/// one that blackholes them costs the acquire timeout.
async fn ensure_connected(
    slot: &Arc<PoolSlot>,
    acquire_timeout: Duration,
) -> Result<Arc<Live>, BackendError> {
    match slot.live() {
        Some(live) => Ok(live),
        // Boxed: the dial's future is large and rarely needed.
        None => Box::pin(redial(slot, acquire_timeout)).await,
    }
}

/// The slow half of [`ensure_connected`]: waits for a dial.
async fn redial(
    slot: &Arc<PoolSlot>,
    acquire_timeout: Duration,
) -> Result<Arc<Live>, BackendError> {
    let waiting = Waiting::new(&slot.backend);
    let wait = async {
        let mut dialing = slot.dialing.lock().await;
        if let Some(live) = slot.live() {
            *dialing = None;
            return Ok(live);
        }
        // A dial that finished while nobody waited (the one at start, or one whose waiter
        // gave up) says nothing about now: the slot is down, so dial again.
        if dialing.as_ref().is_some_and(JoinHandle::is_finished) {
            *dialing = None;
        }
        let handle = dialing.get_or_insert_with(|| slot.dial());
        let result = handle.await;
        *dialing = None;
        match result {
            Ok(Ok(())) => slot.live().ok_or_else(|| BackendError::Connect {
                source: LinkError::new(
                    LinkErrorKind::Io,
                    "the connection closed as soon as it opened",
                ),
            }),
            Ok(Err(source)) => Err(BackendError::Connect { source }),
            Err(join) => Err(BackendError::Connect {
                source: LinkError::new(LinkErrorKind::Canceled, join.to_string()),
            }),
        }
    };
    let result = match tokio::time::timeout(acquire_timeout, wait).await {
        Ok(result) => result,
        Err(_) => Err(BackendError::AcquireTimeout {
            waited: acquire_timeout,
        }),
    };
    drop(waiting);
    result
}

/// Counts an attempt in `holdfast_pool_waiting` while it waits for a dial, and out again
/// however the wait ends (even when its request is dropped).
struct Waiting<'a>(&'a str);

impl<'a> Waiting<'a> {
    fn new(backend: &'a str) -> Waiting<'a> {
        if !backend.is_empty() {
            crate::metrics::pool_waiting(backend, true);
        }
        Waiting(backend)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            crate::metrics::pool_waiting(self.0, false);
        }
    }
}

/// Sends one request on a connection, without exact mode's script.
async fn send(
    live: &Live,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    match &live.conn {
        PoolConn::Link(link) => on_link(link, request, response_timeout).await,
        PoolConn::Cluster(nodes) => {
            on_cluster(nodes, live.redirections, request, response_timeout).await
        }
    }
}

/// Sends one request on a Cluster connection: on the link of its slot's primary, following
/// redirections (`src/backend/redis/cluster.rs`). An `ASK` is followed by `ASKING` and the command
/// back to back on the target's link (then a `WAIT` of its own when the write wants
/// replicas).
async fn on_cluster(
    nodes: &Nodes,
    redirections: u32,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    let slot = request_slot(request);
    nodes
        .send(slot, redirections, |link, asking| async move {
            if !asking {
                return on_link(&link, request, response_timeout).await;
            }
            let asking_args = [Bytes::from_static(b"ASKING")];
            let mut replies = link
                .send_all(
                    [(&asking_args[..], None), (request.args, request.raw)].into_iter(),
                    response_timeout,
                )
                .await;
            let reply = link_reply(
                request.proto,
                replies.pop().unwrap_or_else(|| {
                    Err(link::SendError::NotSent(LinkError::new(
                        LinkErrorKind::Io,
                        "nothing was sent",
                    )))
                }),
            );
            // An error reply applied nothing, unless the command may write before its error.
            let counted = reply.is_ok() || request.error_may_write;
            if let (Some((wanted, wait)), true) = (request.replicas, counted) {
                let args = [
                    Bytes::from_static(b"WAIT"),
                    Bytes::from(wanted.to_string()),
                    Bytes::from(wait.as_millis().to_string()),
                ];
                let count = link.send(&args, None, Some(wait + response_timeout)).await;
                replicated(wanted, link_reply(request.proto, count))?;
            }
            reply
        })
        .await
}

/// A client's `WAIT numreplicas timeout`: its timeout (0: for ever). None for any other
/// command, or a `WAIT` whose timeout is not a number (Redis answers its error at once).
fn client_wait(args: &[Bytes]) -> Option<Duration> {
    match args {
        [name, _, timeout] if name.eq_ignore_ascii_case(b"WAIT") => std::str::from_utf8(timeout)
            .ok()?
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis),
        _ => None,
    }
}

/// How long a request on a link may wait for its reply before the link is given up as dead
/// (its other commands failing as sent): `response_timeout`; a blocking command its own
/// timeout plus `response_timeout` (Redis answers it when the timeout passes), and one that
/// waits for ever no longer than the backend answers its probes ([`DedicatedRedis::send`]);
/// a client's `WAIT` likewise its own timeout plus `response_timeout`. A `WAIT` cut short at
/// `response_timeout` would take every other client's command on its link with it.
fn reply_deadline(
    args: &[Bytes],
    blocking: Blocking,
    response_timeout: Duration,
) -> Option<Duration> {
    match (blocking, client_wait(args)) {
        (Blocking::Forever, _) => None,
        (Blocking::For(wait), _) | (Blocking::No, Some(wait)) => {
            Some(wait.saturating_add(response_timeout))
        }
        (Blocking::No, None) => Some(response_timeout),
    }
}

/// A client's `WAIT n 0` (for ever) as it is sent on a shared link: `WAIT n
/// response_timeout`. For ever, it would hold every other client's command queued behind it
/// on that connection for ever; it answers the count reached by then, which a client reads
/// as it reads any `WAIT` that timed out: not yet on `n` replicas. None for any other command.
fn bounded_wait(args: &[Bytes], response_timeout: Duration) -> Option<[Bytes; 3]> {
    match (client_wait(args), args) {
        (Some(Duration::ZERO), [name, replicas, _]) => Some([
            name.clone(),
            replicas.clone(),
            Bytes::from(response_timeout.as_millis().max(1).to_string()),
        ]),
        _ => None,
    }
}

/// Sends one request on a link.
async fn on_link(
    link: &link::Link,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    if let (Some(replicas), false) = (request.replicas, request.blocking.blocks()) {
        let acked = link
            .send_acked(
                (request.args, request.raw),
                response_timeout,
                replicas,
                request.error_may_write,
            )
            .await;
        return acked_reply(request.proto, replicas.0, acked);
    }
    let bounded = bounded_wait(request.args, response_timeout);
    let (args, raw) = match &bounded {
        // Rewritten: the client's bytes no longer describe it.
        Some(args) => (&args[..], None),
        None => (request.args, request.raw),
    };
    let timeout = reply_deadline(args, request.blocking, response_timeout);
    link_reply(request.proto, link.send(args, raw, timeout).await)
}

/// A write's answer on a link with the count of the `WAIT` after it: acknowledged once
/// `wanted` replicas have it; short of them, or when the count failed, applied but not safe.
fn acked_reply(proto: Proto, wanted: u32, acked: link::Acked) -> Result<Reply, BackendError> {
    match acked {
        // The link was closed before the write was queued: nothing was written.
        Err(link::SendError::NotSent(source)) => Err(BackendError::Connect { source }),
        Err(link::SendError::Sent(source)) => Err(BackendError::Sent { source }),
        // An error reply that applied nothing: nothing to count.
        Ok((reply, Ok(None))) => link_reply(proto, Ok(reply)),
        Ok((reply, Ok(Some(got)))) if got >= i64::from(wanted) => link_reply(proto, Ok(reply)),
        Ok((_, Ok(Some(got)))) => Err(BackendError::NotReplicated { wanted, got }),
        Ok((_, Err(source))) => Err(BackendError::WaitFailed {
            wanted,
            source: Box::new(BackendError::Sent { source }),
        }),
    }
}

/// A link's answer as the backend's result: raw replies pass, decoded ones are checked for
/// an error reply.
fn link_reply(proto: Proto, reply: Result<Reply, link::SendError>) -> Result<Reply, BackendError> {
    match reply {
        Ok(Reply::Frame(frame)) if proto == Proto::Resp3 => {
            BackendError::check_reply(crate::resp::restore_map_order(*frame)).map(Reply::from)
        }
        Ok(Reply::Frame(frame)) => BackendError::check_reply(*frame).map(Reply::from),
        Ok(raw) => Ok(raw),
        Err(link::SendError::NotSent(source)) => Err(BackendError::Connect { source }),
        Err(link::SendError::Sent(source)) => Err(BackendError::Sent { source }),
    }
}

/// A connection owned by one client connection (WATCH/MULTI/EXEC, blocking commands).
pub struct DedicatedRedis {
    /// The connection.
    live: Arc<Live>,
    /// Reply timeout for non-blocking commands.
    response_timeout: Duration,
    /// Asks whether the backend still answers while a blocking command waits here.
    probe: Arc<Probe>,
}

impl DedicatedRedis {
    /// Sends one request; a broken connection is not re-dialled. A blocking command waits as
    /// long as it asked, plus `response_timeout`; while it waits, the backend is probed every
    /// [`PROBE_EVERY`], and one that does not answer within `response_timeout` (frozen,
    /// blackholed, gone) ends the wait: the connection is reset, so whatever the command
    /// takes once the backend wakes is never handed to anyone, and the command fails as sent.
    ///
    /// # Errors
    /// [`BackendError`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Reply, BackendError> {
        if !self.live.is_up() {
            return Err(BackendError::Connect {
                source: LinkError::new(LinkErrorKind::Io, "the dedicated connection is closed"),
            });
        }
        let sent = self.live.send(request, self.response_timeout);
        if !request.blocking.blocks() {
            return sent.await;
        }
        tokio::pin!(sent);
        let server = self.live.server_of(request.route);
        let watched = self.probe.until_silent(request.route, server);
        tokio::select! {
            biased;
            result = &mut sent => result,
            () = watched => {
                self.live.retire_because(
                    "the backend stopped answering while the command waited for it",
                );
                // Closing its link fails the command at once.
                sent.await
            }
        }
    }

    /// Closes the connection. A `QUIT` would wait behind a command still blocking there
    /// (`BLPOP … 0` of a client that went away), which would then take the next element for
    /// nobody: the connection is reset instead, so the server forgets the blocked command at
    /// once.
    pub async fn close(self) {
        self.live.retire();
    }
}

/// Whether a backend still answers, for its clients blocked on their own connections: a
/// `PING` on a shared connection, one at a time per server. An answer is good for
/// [`PROBE_EVERY`] to every client that asks; a probe that ends while others wait for it
/// answers them all, so a hundred clients blocked on a frozen server hear of it together,
/// not a probe's wait apart.
#[derive(Default)]
struct Probe {
    /// The shared connection it is sent on (the first RESP2 one).
    slot: Option<Arc<PoolSlot>>,
    /// How long a probe may wait for its answer.
    response_timeout: Duration,
    /// Each server's (None: the only one) last probe: when it ended, and whether it was
    /// answered.
    last: std::sync::Mutex<HashMap<Option<Addr>, (Instant, bool)>>,
    /// One probe at a time: the others wait for its answer.
    asking: Mutex<()>,
}

impl Probe {
    fn new(slot: Option<Arc<PoolSlot>>, response_timeout: Duration) -> Probe {
        Probe {
            slot,
            response_timeout,
            ..Probe::default()
        }
    }

    /// Resolves once the server of a request routed by `route` (`server` on a Cluster)
    /// stops answering: no connection, or no answer within `response_timeout`.
    async fn until_silent(&self, route: Option<&[u8]>, server: Option<Addr>) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            if !self.answers(route, &server).await {
                return;
            }
        }
    }

    fn last(&self, server: &Option<Addr>) -> Option<(Instant, bool)> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(server).copied()
    }

    async fn answers(&self, route: Option<&[u8]>, server: &Option<Addr>) -> bool {
        let asked = Instant::now();
        if let Some((at, true)) = self.last(server) {
            if at.elapsed() < PROBE_EVERY {
                return true;
            }
        }
        let _asking = self.asking.lock().await;
        // A probe that ended while this one waited answers it.
        if let Some((at, answered)) = self.last(server) {
            if at >= asked {
                return answered;
            }
        }
        let answered = match &self.slot {
            Some(slot) => {
                let args = [Bytes::from_static(b"PING")];
                let ping = Request {
                    route,
                    ..Request::new(&args, Proto::Resp2, 0)
                };
                match ensure_connected(slot, self.response_timeout).await {
                    Ok(live) => live.send(&ping, self.response_timeout).await.is_ok(),
                    Err(_) => false,
                }
            }
            None => false,
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.insert(server.clone(), (Instant::now(), answered));
        answered
    }
}

/// Exact mode: the command inside the script of `src/backend/redis/exact.rs`, by its SHA and, when
/// the server does not have it cached, by its text.
async fn exact(
    live: &Live,
    request: &Request<'_>,
    token: &[u8],
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    let (mut args, tok) = exact::evalsha(request.args, request.proto, token, live.tokens);
    // The token key shares the command key's slot; the script runs on its node.
    let by_sha = Request {
        route: Some(&tok),
        ..request.with_args(&args)
    };
    let reply = match send(live, &by_sha, response_timeout).await {
        // Not in this server's script cache (a restart, a failover): nothing ran. EVAL runs
        // the script and caches it.
        Err(BackendError::Reply { prefix, .. }) if prefix == "NOSCRIPT" => {
            if let Some(first) = args.get_mut(0) {
                *first = Bytes::from_static(b"EVAL");
            }
            if let Some(second) = args.get_mut(1) {
                *second = Bytes::from_static(exact::SCRIPT.as_bytes());
            }
            let by_text = Request {
                route: Some(&tok),
                ..request.with_args(&args)
            };
            send(live, &by_text, response_timeout).await
        }
        other => other,
    };
    reply.map(exact::repair)
}

/// What `WAIT`'s answer says of the write before it: acknowledged once `wanted` replicas
/// have it, else applied but not safe.
fn replicated(wanted: u32, count: Result<Reply, BackendError>) -> Result<(), BackendError> {
    match count.map(Reply::into_frame) {
        Ok(Frame::Number { data, .. }) if data >= i64::from(wanted) => Ok(()),
        Ok(Frame::Number { data, .. }) => Err(BackendError::NotReplicated { wanted, got: data }),
        // WAIT itself failed: the write's fate on the replicas is unknown.
        Ok(_) => Err(BackendError::NotReplicated { wanted, got: 0 }),
        // Whatever it was (a connection closed before WAIT went out is "not sent"), it is
        // WAIT's failure: the write before it was applied, and is in doubt, never retried
        // as if nothing had run.
        Err(e) => Err(BackendError::WaitFailed {
            wanted,
            source: Box::new(e),
        }),
    }
}

/// A dial under Sentinel reached a server that is not a primary: the sentinels are asked
/// again, and nothing was sent.
fn not_primary(follow: &Option<Arc<Watch>>, primary: Option<&Addr>) -> LinkError {
    if let Some(watch) = follow {
        watch.requery();
    }
    LinkError::new(
        LinkErrorKind::Io,
        format!("the server the sentinels named ({primary:?}) is not a primary"),
    )
}

/// The password in `backends.NAME.password_file`.
fn password_from(name: &str, path: &std::path::Path) -> Result<String, BackendError> {
    let key = format!("backends.{name}.password_file");
    crate::config::read_secret(&key, path).map_err(|e| BackendError::Unsupported {
        what: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_reply_is_due_within_its_own_wait_and_the_response_timeout() {
        let second = Duration::from_secs(1);
        let ms = Duration::from_millis;
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        for (words, want) in [
            (&["GET", "k"][..], Some(second)),
            // For ever: bounded by the probe instead.
            (&["BLPOP", "k", "0"][..], None),
            (&["BLPOP", "k", "1.5"][..], Some(ms(2500))),
            (&["BZPOPMIN", "k", "30"][..], Some(ms(31000))),
            (
                &["BLMOVE", "a", "b", "LEFT", "RIGHT", "2"][..],
                Some(ms(3000)),
            ),
            (&["BLMPOP", "2", "1", "k", "LEFT"][..], Some(ms(3000))),
            (
                &["XREAD", "BLOCK", "500", "STREAMS", "s", "$"][..],
                Some(ms(1500)),
            ),
            (&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"][..], None),
            // Refused at once by Redis: an ordinary reply.
            (&["BLPOP", "k", "x"][..], Some(second)),
            (&["WAIT", "1", "1500"][..], Some(ms(2500))),
            (&["wait", "1", "1500"][..], Some(ms(2500))),
            (&["WAIT", "1", "0"][..], Some(second)),
            (&["WAIT", "1", "x"][..], Some(second)),
            (&["WAIT", "1"][..], Some(second)),
        ] {
            let args = args(words);
            assert_eq!(
                reply_deadline(&args, Blocking::of(&args), second),
                want,
                "{words:?}"
            );
        }
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        let sent = |words: &[&str]| {
            bounded_wait(&args(words), second).map(|a| {
                a.iter()
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            sent(&["WAIT", "2", "0"]),
            Some(vec!["WAIT".into(), "2".into(), "1000".into()])
        );
        assert_eq!(sent(&["WAIT", "2", "10"]), None);
        assert_eq!(sent(&["GET", "0"]), None);
    }

    /// A write for `min_replicas_ack` that a closed link never queued was not sent: retried
    /// for every command. One queued and then lost may have been applied.
    #[test]
    fn an_acked_write_not_queued_is_not_attempted() {
        use crate::error::{classify, ErrorClass};
        let io = || LinkError::new(LinkErrorKind::Io, "closed");
        let not_sent = acked_reply(Proto::Resp2, 1, Err(link::SendError::NotSent(io())));
        let sent = acked_reply(Proto::Resp2, 1, Err(link::SendError::Sent(io())));
        assert_eq!(
            not_sent.map_err(|e| classify(&e)).err(),
            Some(ErrorClass::NotAttempted)
        );
        assert_eq!(
            sent.map_err(|e| classify(&e)).err(),
            Some(ErrorClass::Transient)
        );
    }

    fn pool(len: usize) -> Pool {
        let target = Target::new(
            ("127.0.0.1".to_string(), 6379),
            Proto::Resp2,
            (Duration::from_secs(1), Duration::from_secs(1)),
        );
        Pool {
            slots: (0..len)
                .map(|_| {
                    PoolSlot::new(
                        Dialer::Link(Arc::new(target.clone())),
                        Arc::new(AtomicBool::new(false)),
                        "test".into(),
                        (0, Tokens::default()),
                        None,
                        None,
                    )
                })
                .collect(),
            filling: AtomicUsize::new(0),
        }
    }

    fn queue_on(pool: &Pool, at: usize, unwritten: bool) {
        pool.slots[at]
            .signals
            .unwritten
            .store(unwritten, Ordering::Relaxed);
    }

    fn acking_on(pool: &Pool, at: usize, waits: usize) {
        pool.slots[at]
            .signals
            .acking
            .store(waits, Ordering::Relaxed);
    }

    #[test]
    fn a_connection_held_by_a_wait_is_passed_over_while_another_is_free() {
        let pool = pool(4);
        // Home is held: the next free one after it starts the write.
        acking_on(&pool, 1, 1);
        assert_eq!(pool.place(1, Placement::Joins), 2);
        assert_eq!(pool.filling.load(Ordering::Relaxed), 2);
        // Gathering there: others join it.
        queue_on(&pool, 2, true);
        assert_eq!(pool.place(3, Placement::Joins), 2);
        // The gathering one is held now (its WAIT went out with a write still queued).
        acking_on(&pool, 2, 1);
        let pin = AtomicU64::new(2);
        assert_eq!(
            pool.place(2, Placement::Moves(&pin)),
            3,
            "wraps to the next free one"
        );
        assert_eq!(
            pin.load(Ordering::Relaxed),
            3,
            "the write takes its pin along"
        );
        // All held: join the gathering one rather than start behind another WAIT.
        queue_on(&pool, 3, true);
        acking_on(&pool, 0, 1);
        acking_on(&pool, 3, 1);
        assert_eq!(pool.place(0, Placement::Joins), 3);
        // Nothing gathering either: home.
        queue_on(&pool, 3, false);
        assert_eq!(pool.place(0, Placement::Joins), 0);
        // A pinned request never moves, held or not.
        assert_eq!(pool.place(1, Placement::Pinned), 1);
        // Answered: home again.
        for at in 0..4 {
            acking_on(&pool, at, 0);
            queue_on(&pool, at, false);
        }
        assert_eq!(pool.place(1, Placement::Joins), 1);
    }

    #[test]
    fn with_nothing_gathering_a_request_starts_a_write_on_its_pinned_connection() {
        let pool = pool(8);
        let pin = AtomicU64::new(13);
        assert_eq!(pool.place(13, Placement::Moves(&pin)), 5);
        assert_eq!(pool.filling.load(Ordering::Relaxed), 5);
        assert_eq!(
            pin.load(Ordering::Relaxed),
            13,
            "stayed home: the pin is as it was"
        );
        assert_eq!(pool.place(2, Placement::Joins), 2);
        assert_eq!(pool.filling.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn requests_join_the_connection_gathering_a_write_and_a_write_takes_its_pin_along() {
        let pool = pool(8);
        assert_eq!(pool.place(3, Placement::Joins), 3);
        queue_on(&pool, 3, true);
        let pin = AtomicU64::new(6);
        assert_eq!(pool.place(6, Placement::Moves(&pin)), 3);
        assert_eq!(
            pin.load(Ordering::Relaxed),
            3,
            "the client's WAIT must follow"
        );
        assert_eq!(pool.place(7, Placement::Joins), 3, "a read joins too");
        // Written: the next request starts a write of its own at home.
        queue_on(&pool, 3, false);
        assert_eq!(pool.place(6, Placement::Joins), 6);
        assert_eq!(pool.filling.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn a_run_sent_back_to_back_is_pinned_when_one_of_it_must_be() {
        let args = [Bytes::from_static(b"GET"), Bytes::from_static(b"k")];
        let read = Request {
            placement: Placement::Joins,
            ..Request::new(&args, Proto::Resp2, 1)
        };
        let wait = Request::new(&args, Proto::Resp2, 1);
        assert!(matches!(run_placement(&[read, read]), Placement::Joins));
        assert!(matches!(
            run_placement(&[read, wait, read]),
            Placement::Pinned
        ));
        assert!(matches!(run_placement(&[]), Placement::Pinned));
    }

    #[test]
    fn a_cluster_run_goes_together_only_while_it_stays_on_the_first_ones_node() {
        let cases: [(&[Option<u8>], usize); 7] = [
            (&[], 0),
            (&[Some(1)], 1),
            (&[Some(1), Some(1), Some(1)], 3),
            (&[Some(1), Some(2), Some(1)], 1),
            (&[Some(1), Some(1), Some(2), Some(1)], 2),
            // A request whose node is unknown goes alone, and ends the run before it.
            (&[None, Some(1)], 1),
            (&[Some(1), None, Some(1)], 1),
        ];
        for (nodes, want) in cases {
            assert_eq!(leading_run(nodes.iter().copied()), want, "{nodes:?}");
        }
        let args = [Bytes::from_static(b"SET"), Bytes::from_static(b"{t}a")];
        let routed = Request {
            route: Some(b"elsewhere"),
            ..Request::new(&args, Proto::Resp2, 1)
        };
        assert_eq!(
            request_slot(&routed),
            Some(keyslot(b"elsewhere")),
            "the route key"
        );
        let keyless = [Bytes::from_static(b"TIME")];
        assert_eq!(request_slot(&Request::new(&keyless, Proto::Resp2, 1)), None);
    }

    #[test]
    fn a_pinned_request_never_leaves_its_pinned_connection() {
        let pool = pool(8);
        assert_eq!(pool.place(3, Placement::Joins), 3);
        queue_on(&pool, 3, true);
        assert_eq!(pool.place(12, Placement::Pinned), 4);
        assert_eq!(
            pool.filling.load(Ordering::Relaxed),
            3,
            "a pinned request starts nothing"
        );
        let one = self::pool(1);
        queue_on(&one, 0, true);
        assert_eq!(one.place(12, Placement::Joins), 0);
    }
}
