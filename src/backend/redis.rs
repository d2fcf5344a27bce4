//! The Redis backends: standalone, Sentinel and Cluster, on holdfast's own links or fred.
//!
//! fred's own replay is off (`max_command_attempts = 1`, fail fast, no reconnect policy): a
//! command that was written and lost comes back as an error for the retry loop to count, never
//! re-sent below it. Holdfast re-dials a dropped connection itself, on demand: fred's reconnect
//! loop queues commands while it sleeps between dials instead of failing them, which would turn
//! "not sent" into a response timeout. Each client connection is pinned to one backend
//! connection, so `WAIT` sees that client's writes; on holdfast's own connections
//! ([`link`]) a request joins the connection gathering a write instead, and a write moves the
//! client's pin with it (see [`Placement`]).
//!
//! On a Cluster without TLS each pooled connection is a [`Nodes`] of `src/backend/cluster.rs`:
//! holdfast's own link to each primary, routed by the slot map it keeps, `MOVED`/`ASK`
//! followed there. With TLS it is a fred cluster client (a connection to every primary):
//! commands are routed by their first key's slot and `MOVED`/`ASK` followed by fred (the
//! refusing node executed nothing); a connection lost to any node ends that whole client, and
//! the next dial reads the slot map afresh, which is how a promoted replica is found.
//! Sentinel's pooled connections are links too, to the primary its view names
//! (`src/backend/sentinel.rs`).

use super::cluster::{Nodes, Topology};
use super::exact::{self, TokenDb};
use super::sentinel::{Addr, Follower, Watch};
use super::{link, BackendError, DoubleStyle, Placement, Proto, Reply, Request};
use crate::config::{ClusterConfig, RedisConfig, SentinelConfig};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::prelude::Client;
use fred::types::config::{
    ConnectionConfig, Options, PerformanceConfig, TcpConfig, UnresponsiveConfig,
};
use fred::types::{ClusterHash, CustomCommand, RespVersion, Value};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex, OnceCell};
use tokio::task::JoinHandle;

pub use crate::config::host_port;

/// Builds a fresh fred client for each dial (at the primary Sentinel named, when given).
type Factory = Arc<dyn Fn(Option<&Addr>) -> Client + Send + Sync>;

/// Resolves when a dialled connection's task ends.
type Ended = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// How a slot dials.
#[derive(Clone)]
enum Dialer {
    /// A fresh fred client per dial.
    Fred(Factory),
    /// holdfast's own link (standalone Redis without TLS, pooled connections).
    Link(Arc<link::Target>),
    /// holdfast's own links to a Cluster's primaries (without TLS, pooled connections).
    Cluster(Arc<Topology>, Arc<link::Target>),
}

/// What a dialled connection talks through.
enum Conn {
    Fred(Client),
    Link(link::Link),
    Cluster(Arc<Nodes>),
}

/// One dialled connection: its client, and a signal that turns true when its connection
/// task ends.
struct Live {
    conn: Conn,
    ended: watch::Receiver<bool>,
    /// `MOVED`/`ASK` redirections fred may follow per command (0 off a Cluster).
    redirections: u32,
    /// Where exact mode's tokens live on this connection's server.
    tokens: Option<TokenDb>,
    /// Set when a reply did not come in time: fred pairs replies with commands in order, so
    /// after a reply is lost on the way (a network that drops it) each later command would
    /// get an earlier one's reply. The connection takes no new command and is closed.
    retired: AtomicBool,
    /// Under Sentinel: the view it was dialled in, and its generation. Live only while that
    /// generation stands (see `src/backend/sentinel.rs`).
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

    /// Takes the connection out of service and closes it (in the background: QUIT may wait
    /// on a connection that no longer answers).
    fn retire(&self) {
        if !self.retired.swap(true, Ordering::AcqRel) {
            match &self.conn {
                Conn::Fred(client) => {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let _ = client.quit().await;
                    });
                }
                // Its replies stay paired in order (one reader, one queue), but a reply that
                // did not come in time may never come: close, failing what is in flight.
                Conn::Link(link) => link.close(),
                Conn::Cluster(nodes) => nodes.close(),
            }
        }
    }

    /// Sends one request (through the exact-mode script when it carries a token), unless the
    /// connection ends first: a command fred accepted in the instant its connection died
    /// fails then as Transient, not after `response_timeout`.
    async fn send(
        &self,
        request: &Request<'_>,
        response_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        // The hot path: a plain command on a link, whose own close fails what is in flight.
        // Everything else is boxed so its (much larger) future is not carried by every
        // request's.
        if let (Conn::Link(link), None) = (&self.conn, request.token) {
            let result = on_link(link, request, response_timeout).await;
            self.after_send(&result);
            return result;
        }
        // A Cluster connection's links fail their own commands when they close.
        if let (Conn::Cluster(nodes), None) = (&self.conn, request.token) {
            let sent = on_cluster(nodes, self.redirections, request, response_timeout);
            let result = Box::pin(sent).await;
            self.after_send(&result);
            return result;
        }
        Box::pin(self.send_through_script_or_fred(request, response_timeout)).await
    }

    /// A reply that did not come in time retires the connection.
    fn after_send(&self, result: &Result<Reply, BackendError>) {
        if let Err(BackendError::Sent { source }) = result {
            if *source.kind() == fred::error::ErrorKind::Timeout {
                self.retire();
            }
        }
    }

    async fn send_through_script_or_fred(
        &self,
        request: &Request<'_>,
        response_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        let mut ended = self.ended.clone();
        if *ended.borrow() {
            // Ended before fred took the command: nothing was sent.
            return Err(BackendError::Connect {
                source: fred::error::Error::new(
                    fred::error::ErrorKind::IO,
                    "the connection closed before the request was sent",
                ),
            });
        }
        let sent = async {
            let result = match request.token {
                Some(token) => exact(self, request, token, response_timeout).await,
                None => send(self, request, response_timeout).await,
            };
            self.after_send(&result);
            result
        };
        tokio::select! {
            biased;
            result = sent => result,
            _ = ended.wait_for(|ended| *ended) => Err(BackendError::Sent {
                source: fred::error::Error::new(
                    fred::error::ErrorKind::IO,
                    "the connection closed with the request in flight",
                ),
            }),
        }
    }
}

/// One pooled connection and the dial that (re)opens it.
struct Slot {
    /// Makes the connection each dial uses: a fresh fred client or a fresh link. Fresh per
    /// dial, so a command still held for a dead connection dies with it, and is never
    /// written to the next connection, long after the request gave up on it.
    dialer: Dialer,
    /// The connection of the last successful dial.
    live: ArcSwapOption<Live>,
    /// A dial in progress; kept here so a waiter that gives up does not abandon it, and the
    /// next waiter joins it instead of starting a second one.
    dialing: Mutex<Option<JoinHandle<Result<(), fred::error::Error>>>>,
    /// The backend's double spelling, learnt from its version at each dial.
    doubles: Arc<AtomicBool>,
    /// The backend's name, for the pool metrics.
    backend: Arc<str>,
    /// Redirections each command may follow (see [`Live::redirections`]).
    redirections: u32,
    /// Exact mode's tokens on this backend.
    tokens: Tokens,
    /// What the link of this slot tells the pool: commands not yet written, a `WAIT`
    /// unanswered (kept across its dials; a fred connection sets neither).
    signals: link::Signals,
    /// Under Sentinel: the view of the primary each dial asks, and whose changes fence it.
    follow: Option<Arc<Watch>>,
}

impl Slot {
    fn new(
        dialer: Dialer,
        doubles: Arc<AtomicBool>,
        backend: Arc<str>,
        redirections: u32,
        tokens: Tokens,
        follow: Option<Arc<Watch>>,
    ) -> Arc<Slot> {
        Arc::new(Slot {
            dialer,
            live: ArcSwapOption::empty(),
            dialing: Mutex::new(None),
            doubles,
            backend,
            redirections,
            tokens,
            signals: link::Signals::default(),
            follow,
        })
    }

    /// The connection, while fred's connection task runs. (fred's own `is_connected` stays
    /// true after a connection drops unexpectedly, so it is not used.)
    fn live(&self) -> Option<Arc<Live>> {
        self.live.load_full().filter(|live| live.is_up())
    }

    /// Starts one dial in a task of its own, with a fresh client; on success a watcher
    /// signals the moment fred's connection task ends.
    fn dial(self: &Arc<Self>) -> JoinHandle<Result<(), fred::error::Error>> {
        let slot = self.clone();
        tokio::spawn(async move {
            let pooled = !slot.backend.is_empty();
            // Under Sentinel, the primary the view names, and the generation the connection
            // will belong to.
            let fence = match &slot.follow {
                Some(watch) => Some((watch.clone(), watch.primary().await?)),
                None => None,
            };
            let primary = fence.as_ref().map(|(_, (addr, _))| addr);
            let (conn, task, version) = match &slot.dialer {
                Dialer::Fred(factory) => {
                    let client = factory(primary);
                    let task = client.init().await?;
                    if primary.is_some() {
                        let role = client
                            .info::<String>(Some(fred::types::InfoKind::Replication))
                            .await;
                        if !role.is_ok_and(|info| link::is_primary(&info)) {
                            let _ = client.quit().await;
                            return Err(not_primary(&slot.follow, primary));
                        }
                    }
                    let version = client
                        .server_version()
                        .map(|v| (v.major as u32, v.minor as u32));
                    // Only pooled connections carry exact mode's script.
                    if pooled {
                        let memory = client
                            .info::<String>(Some(fred::types::InfoKind::Memory))
                            .await;
                        match memory {
                            Ok(info) => slot.tokens.learn(&slot.backend, &info),
                            Err(e) => tracing::warn!(
                                backend = %slot.backend,
                                error = %e,
                                "INFO memory failed: cannot tell whether maxmemory-policy may evict exact mode's tokens"
                            ),
                        }
                    }
                    let task: Ended = Box::pin(async move {
                        let _ = task.await;
                    });
                    (Conn::Fred(client), task, version)
                }
                Dialer::Link(target) => {
                    let target = match primary {
                        Some(addr) => Arc::new(target.at(addr)),
                        None => target.clone(),
                    };
                    let (link, task, server) =
                        link::Link::connect(&target, slot.signals.clone()).await?;
                    if primary.is_some() && !server.is_primary() {
                        link.close();
                        return Err(not_primary(&slot.follow, primary));
                    }
                    if pooled {
                        slot.tokens.learn(&slot.backend, &server.info);
                    }
                    let task: Ended = Box::pin(async move {
                        let _ = task.await;
                    });
                    (Conn::Link(link), task, server.version)
                }
                Dialer::Cluster(topology, target) => {
                    let nodes =
                        Nodes::new(topology.clone(), (**target).clone(), slot.signals.clone());
                    nodes.dial().await?;
                    let version = nodes.version();
                    // Its links come and go with the map; it ends when retired.
                    let task: Ended = Box::pin(std::future::pending());
                    (Conn::Cluster(nodes), task, version)
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
                return Err(fred::error::Error::new(
                    fred::error::ErrorKind::IO,
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
        })
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
    slots: Vec<Arc<Slot>>,
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
    /// Connection settings shared by every client built for this backend.
    config: fred::types::config::Config,
    /// Connection timeouts, replay off.
    connection: ConnectionConfig,
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
    /// On a Cluster without TLS: the slot map its links follow.
    topology: Option<Arc<Topology>>,
    /// The scripts clients loaded, to answer a NOSCRIPT with.
    scripts: Arc<super::scripts::Scripts>,
}

impl RedisBackend {
    /// Builds the pool and starts dialling in the background (holdfast may start before its
    /// backend does).
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when the URL does not parse.
    pub fn new(name: &str, config: &RedisConfig) -> Result<RedisBackend, BackendError> {
        let mut parsed = fred::types::config::Config::from_url(&config.url).map_err(|e| {
            BackendError::Unsupported {
                what: format!("backends.{name}.url: {}", e.details()),
            }
        })?;
        if let Some(ca) = &config.tls_ca {
            let tls = crate::tls::client_config(ca).map_err(|e| BackendError::Unsupported {
                what: format!("backends.{name}.tls_ca: {e}"),
            })?;
            parsed.tls = Some(fred::types::config::TlsConnector::from(tls).into());
        }
        if let Some(path) = &config.password_file {
            parsed.password = Some(password_from(name, path)?);
        }
        let tokens = TokenDb {
            tokens: config.token_db,
            data: parsed.database.unwrap_or(0),
        };
        Ok(RedisBackend::with(
            name,
            parsed,
            (config.connection_timeout, config.response_timeout),
            config.pool_size,
            Flavor::Standalone,
            Some(tokens),
        ))
    }

    /// A Redis primary found through Sentinel. Each dial asks the sentinels for the primary
    /// (and checks its role), so a re-dial after a failover reaches the promoted replica.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when an address or the password file is unusable.
    pub fn sentinel(name: &str, config: &SentinelConfig) -> Result<RedisBackend, BackendError> {
        let server = fred::types::config::ServerConfig::Sentinel {
            hosts: servers(name, "sentinels", &config.sentinels)?,
            service_name: config.master_name.clone(),
        };
        let pool = (
            config.pool_size,
            config.connection_timeout,
            config.response_timeout,
        );
        let tokens = TokenDb {
            tokens: config.token_db,
            data: 0,
        };
        RedisBackend::discovered(
            name,
            server,
            config.password_file.as_deref(),
            pool,
            (Flavor::Sentinel, Some(tokens)),
        )
    }

    /// A Redis Cluster, found from its seed nodes at each dial.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when an address or the password file is unusable.
    pub fn cluster(name: &str, config: &ClusterConfig) -> Result<RedisBackend, BackendError> {
        let server = fred::types::config::ServerConfig::Clustered {
            hosts: servers(name, "nodes", &config.nodes)?,
            policy: fred::types::config::ClusterDiscoveryPolicy::default(),
        };
        let pool = (
            config.pool_size,
            config.connection_timeout,
            config.response_timeout,
        );
        let flavor = Flavor::Cluster(config.max_redirections);
        RedisBackend::discovered(
            name,
            server,
            config.password_file.as_deref(),
            pool,
            (flavor, None),
        )
    }

    /// A backend whose servers are found at each dial (Sentinel, Cluster): `pool` is its
    /// size, connection timeout and response timeout.
    fn discovered(
        name: &str,
        server: fred::types::config::ServerConfig,
        password_file: Option<&std::path::Path>,
        (pool_size, connection_timeout, response_timeout): (usize, Duration, Duration),
        (flavor, tokens): (Flavor, Option<TokenDb>),
    ) -> Result<RedisBackend, BackendError> {
        let mut parsed = fred::types::config::Config {
            server,
            ..fred::types::config::Config::default()
        };
        if let Some(path) = password_file {
            parsed.password = Some(password_from(name, path)?);
        }
        Ok(RedisBackend::with(
            name,
            parsed,
            (connection_timeout, response_timeout),
            pool_size,
            flavor,
            tokens,
        ))
    }

    fn with(
        name: &str,
        parsed: fred::types::config::Config,
        (connection_timeout, response_timeout): (Duration, Duration),
        pool_size: usize,
        flavor: Flavor,
        tokens: Option<TokenDb>,
    ) -> RedisBackend {
        let connection = ConnectionConfig {
            connection_timeout,
            internal_command_timeout: connection_timeout,
            max_command_attempts: 1,
            max_redirections: 0,
            unresponsive: UnresponsiveConfig::default(),
            reconnect_on_auth_error: false,
            auto_client_setname: false,
            tcp: TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            },
            ..ConnectionConfig::default()
        };
        let follower = match (flavor, &parsed.server) {
            (
                Flavor::Sentinel,
                fred::types::config::ServerConfig::Sentinel {
                    hosts,
                    service_name,
                },
            ) => Some(Follower::start(
                name,
                service_name,
                hosts.iter().map(|s| (s.host.to_string(), s.port)).collect(),
                connection_timeout,
            )),
            _ => None,
        };
        let topology = match (flavor, &parsed.server) {
            (Flavor::Cluster(_), fred::types::config::ServerConfig::Clustered { hosts, .. }) => {
                let timeouts = (connection_timeout, response_timeout);
                link::Target::of(&parsed, Proto::Resp2, timeouts).map(|target| {
                    let seeds = hosts.iter().map(|s| (s.host.to_string(), s.port)).collect();
                    Topology::start(name, seeds, &target)
                })
            }
            _ => None,
        };
        let mut backend = RedisBackend {
            name: name.to_string(),
            config: parsed,
            connection,
            response_timeout,
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
            scripts: Arc::default(),
        };
        backend.resp2 = backend.open_pool(RespVersion::RESP2);
        for slot in &backend.resp2.slots {
            if let Ok(mut dialing) = slot.dialing.try_lock() {
                *dialing = Some(slot.dial());
            }
        }
        backend
    }

    /// What each dial of `version` builds its client with.
    fn factory(&self, version: RespVersion) -> Factory {
        let mut config = self.config.clone();
        config.version = version;
        // One dial, no reconnect policy: a dropped connection fails what was in flight and is
        // re-dialled by `ensure_connected`, with a new client.
        config.fail_fast = true;
        let connection = self.connection.clone();
        Arc::new(move |primary: Option<&Addr>| {
            let perf = PerformanceConfig {
                default_command_timeout: Duration::ZERO,
                ..PerformanceConfig::default()
            };
            let mut config = config.clone();
            if let Some((host, port)) = primary {
                config.server = fred::types::config::ServerConfig::Centralized {
                    server: fred::types::config::Server::new(host.as_str(), *port),
                };
            }
            Client::new(config, Some(perf), Some(connection.clone()), None)
        })
    }

    /// How a pooled connection dials: holdfast's own link to a standalone Redis without TLS
    /// (it batches many clients' commands into one write), fred otherwise.
    fn pooled_dialer(&self, version: RespVersion) -> Dialer {
        let proto = match version {
            RespVersion::RESP3 => Proto::Resp3,
            RespVersion::RESP2 => Proto::Resp2,
        };
        let timeouts = (self.connection.connection_timeout, self.response_timeout);
        let target = link::Target::of(&self.config, proto, timeouts);
        match (target, &self.topology) {
            (Some(target), Some(topology)) => Dialer::Cluster(topology.clone(), Arc::new(target)),
            (Some(target), None) if !matches!(self.flavor, Flavor::Cluster(_)) => {
                Dialer::Link(Arc::new(target))
            }
            _ => Dialer::Fred(self.factory(version)),
        }
    }

    fn open_pool(&self, version: RespVersion) -> Pool {
        let slots = (0..self.pool_size)
            .map(|_| {
                Slot::new(
                    self.pooled_dialer(version.clone()),
                    self.doubles.clone(),
                    self.name.as_str().into(),
                    self.redirections(),
                    self.tokens.clone(),
                    self.follow(),
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
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] for a backend reached over TLS: its subscribers would
    /// need a TLS line of their own, which holdfast does not dial yet.
    pub fn feed(
        &self,
        outbox: super::pubsub::Outbox,
        hold: Duration,
    ) -> Result<super::feed::RedisFeed, BackendError> {
        use super::feed::{Ctx, Locate, RedisFeed};
        let timeouts = (self.connection.connection_timeout, self.response_timeout);
        let target = link::Target::of(&self.config, Proto::Resp2, timeouts).ok_or_else(|| {
            BackendError::Unsupported {
                what: format!("Pub/Sub is not carried to backend '{}' over TLS", self.name),
            }
        })?;
        let locate = match (self.flavor, &self.follower, &self.topology) {
            (Flavor::Sentinel, Some(follower), _) => Locate::Sentinel(follower.watch().clone()),
            (Flavor::Cluster(_), _, Some(topology)) => Locate::Cluster(topology.clone()),
            _ => Locate::Fixed,
        };
        Ok(RedisFeed::new(Ctx {
            backend: self.name.as_str().into(),
            target,
            locate,
            outbox,
            hold,
        }))
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
        let mut slots = keys.iter().map(|k| fred::util::redis_keyslot(k));
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
    async fn placed(&self, request: &Request<'_>) -> &Arc<Slot> {
        let pool = match request.proto {
            Proto::Resp2 => &self.resp2,
            Proto::Resp3 => {
                self.resp3
                    .get_or_init(|| async { self.open_pool(RespVersion::RESP3) })
                    .await
            }
        };
        // `place` answers an index below the pool's size (validated to be at least 1).
        &pool.slots[pool.place(request.pin, request.placement)]
    }

    /// This holdfast's scripts, shared with its other backends.
    #[must_use]
    pub fn with_scripts(mut self, scripts: &Arc<super::scripts::Scripts>) -> RedisBackend {
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
        // On a link the write waited for its replicas already, with the others of its batch.
        let counted = matches!(live.conn, Conn::Link(_) | Conn::Cluster(_));
        if let (Ok(_), Some((wanted, timeout)), false) = (&result, request.replicas, counted) {
            if let Err(e) = Box::pin(wait_replicas(&live, request, wanted, timeout)).await {
                result = Err(e);
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
                if prefix == "READONLY" && !matches!(live.conn, Conn::Cluster(_)) {
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
    /// node are sent ([`one_node`]); the results are theirs, and the caller sends the rest
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
        let requests = match (&live.conn, self.flavor) {
            (Conn::Fred(client), Flavor::Cluster(_)) => {
                requests.get(..one_node(client, requests))?
            }
            (Conn::Cluster(nodes), _) => {
                let node = |r: &Request<'_>| nodes.owner_now(request_slot(r));
                requests.get(..leading_run(requests.iter().map(node)))?
            }
            _ => requests,
        };
        if requests.iter().all(|r| r.token.is_none() && !r.blocking) {
            // A Cluster connection's link to the run's node, held while the run is sent.
            let cluster_link;
            let link = match &live.conn {
                Conn::Link(link) => Some(link),
                Conn::Cluster(nodes) => {
                    let node = nodes.owner_now(requests.first().and_then(request_slot))?;
                    cluster_link = nodes.link_to(&node).await.ok()?;
                    Some(&*cluster_link)
                }
                Conn::Fred(_) => None,
            };
            if let Some(link) = link {
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
        // poll hands the command to fred, so they reach the connection in this order.
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
                    Conn::Fred(client) => client
                        .flushall_cluster()
                        .await
                        .map_err(|source| BackendError::Sent { source })?,
                    Conn::Cluster(nodes) => {
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
                                        source: fred::error::Error::new(
                                            fred::error::ErrorKind::IO,
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
                    Conn::Link(_) => {
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
        let version = match proto {
            Proto::Resp2 => RespVersion::RESP2,
            Proto::Resp3 => RespVersion::RESP3,
        };
        // Never re-dialled once it breaks: it carries WATCH or blocking state, which the
        // client must learn is gone, not have silently replaced.
        // Dedicated connections are not pooled: they are not counted in the pool metrics.
        // They follow no redirection: a command inside MULTI redirected to another node
        // would run there at once, outside the transaction.
        let dialer = Dialer::Fred(self.factory(version));
        let slot = Slot::new(
            dialer,
            self.doubles.clone(),
            "".into(),
            0,
            self.tokens.clone(),
            self.follow(),
        );
        let live = ensure_connected(&slot, acquire_timeout).await?;
        Ok(DedicatedRedis {
            live,
            response_timeout: self.response_timeout,
        })
    }

    /// Whether a PING is answered within `timeout`.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let Some(slot) = self.resp2.slots.first() else {
            return false;
        };
        let args = [bytes::Bytes::from_static(b"PING")];
        let request = Request::new(&args, Proto::Resp2, 0);
        // No timeout around the send: cancelling it would leave its PING in fred's queue
        // unanswered; the send's own timeout retires the connection instead.
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

/// How many of `requests`, from the first, a Cluster connection sends to one node: each node
/// has a connection of its own, and requests written to two at once reach their nodes in no
/// set order, so a later write could take effect before an earlier one still on its way (the
/// order `exec::ahead` keeps assumes one connection). The node is read from the slot
/// map the client routes by; without one, only requests of the first one's slot go with it.
fn one_node(client: &Client, requests: &[Request<'_>]) -> usize {
    let routing = client.cached_cluster_state();
    let node = |request: &Request<'_>| {
        let slot = request_slot(request)?;
        match &routing {
            Some(routing) => routing.get_server(slot).cloned().map(Node::Server),
            None => Some(Node::Slot(slot)),
        }
    };
    leading_run(requests.iter().map(node))
}

/// Where a request goes on a Cluster: a primary from the slot map, or only its slot.
#[derive(Debug, PartialEq)]
enum Node {
    Server(fred::types::config::Server),
    Slot(u16),
}

/// The slot fred routes a request by (see [`send`]): its route key, else its first argument;
/// None for a request without one, which fred sends to any node.
fn request_slot(request: &Request<'_>) -> Option<u16> {
    request
        .route
        .or_else(|| request.args.get(1).map(|key| key.as_ref()))
        .map(fred::util::redis_keyslot)
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
    slot: &Arc<Slot>,
    acquire_timeout: Duration,
) -> Result<Arc<Live>, BackendError> {
    match slot.live() {
        Some(live) => Ok(live),
        // Boxed: the dial's future is large and rarely needed.
        None => Box::pin(redial(slot, acquire_timeout)).await,
    }
}

/// The slow half of [`ensure_connected`]: waits for a dial.
async fn redial(slot: &Arc<Slot>, acquire_timeout: Duration) -> Result<Arc<Live>, BackendError> {
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
                source: fred::error::Error::new(
                    fred::error::ErrorKind::IO,
                    "the connection closed as soon as it opened",
                ),
            }),
            Ok(Err(source)) => Err(BackendError::Connect { source }),
            Err(join) => Err(BackendError::Connect {
                source: fred::error::Error::new(fred::error::ErrorKind::Canceled, join.to_string()),
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

async fn send(
    live: &Live,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    let Some((name, rest)) = request.args.split_first() else {
        return Err(BackendError::Unsupported {
            what: "empty command".to_string(),
        });
    };
    let client = match &live.conn {
        Conn::Fred(client) => client,
        Conn::Link(link) => return on_link(link, request, response_timeout).await,
        Conn::Cluster(nodes) => {
            return on_cluster(nodes, live.redirections, request, response_timeout).await
        }
    };
    // Names come from the command table, so they are ASCII.
    let name = String::from_utf8_lossy(name).into_owned();
    let hash = match request.route {
        Some(key) => ClusterHash::Custom(fred::util::redis_keyslot(key)),
        None => ClusterHash::FirstKey,
    };
    let command = CustomCommand::new(name, hash, request.blocking);
    let args: Vec<Value> = rest.iter().map(|a| Value::Bytes(a.clone())).collect();
    let options = Options {
        max_attempts: Some(1),
        max_redirections: Some(live.redirections),
        // Zero means no timeout in fred: a blocking command waits as long as it asked to.
        timeout: Some(if request.blocking {
            Duration::ZERO
        } else {
            response_timeout
        }),
        fail_fast: true,
        ..Options::default()
    };
    match client
        .with_options(&options)
        .custom_raw(command, args)
        .await
    {
        // Maps only exist in RESP3.
        Ok(frame) if request.proto == Proto::Resp3 => {
            BackendError::check_reply(link::restore_map_order(frame)).map(Reply::from)
        }
        Ok(frame) => BackendError::check_reply(frame).map(Reply::from),
        Err(source) => Err(BackendError::Sent { source }),
    }
}

/// Sends one request on a Cluster connection: on the link of its slot's primary, following
/// redirections (`src/backend/cluster.rs`). An `ASK` is followed by `ASKING` and the command
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
                    Err(link::SendError::NotSent(fred::error::Error::new(
                        fred::error::ErrorKind::IO,
                        "nothing was sent",
                    )))
                }),
            )?;
            if let Some((wanted, wait)) = request.replicas {
                let args = [
                    Bytes::from_static(b"WAIT"),
                    Bytes::from(wanted.to_string()),
                    Bytes::from(wait.as_millis().to_string()),
                ];
                let count = link.send(&args, None, Some(wait + response_timeout)).await;
                replicated(wanted, link_reply(request.proto, count))?;
            }
            Ok(reply)
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

/// How long a request on a shared link may wait for its reply before the link is given up
/// as dead (its other commands failing as sent): `response_timeout`; a blocking command as
/// long as it asked; a client's `WAIT` its own timeout plus `response_timeout` (Redis answers
/// it when the timeout passes). A `WAIT` cut short at `response_timeout` would take every
/// other client's command on its link with it.
fn reply_deadline(args: &[Bytes], blocking: bool, response_timeout: Duration) -> Option<Duration> {
    if blocking {
        return None;
    }
    match client_wait(args) {
        Some(wait) => Some(wait.saturating_add(response_timeout)),
        None => Some(response_timeout),
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
    if let (Some(replicas), false) = (request.replicas, request.blocking) {
        let acked = link
            .send_acked(request.args, request.raw, response_timeout, replicas)
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
/// `wanted` replicas have it; short of them, or when the count failed, applied but not safe
/// (see `wait_replicas`, the same rules on fred).
fn acked_reply(
    proto: Proto,
    wanted: u32,
    acked: Result<(Reply, Result<Option<i64>, fred::error::Error>), link::SendError>,
) -> Result<Reply, BackendError> {
    match acked {
        // The link was closed before the write was queued: nothing was written.
        Err(link::SendError::NotSent(source)) => Err(BackendError::Connect { source }),
        Err(link::SendError::Sent(source)) => Err(BackendError::Sent { source }),
        // An error reply applied nothing: nothing to count.
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
            BackendError::check_reply(link::restore_map_order(*frame)).map(Reply::from)
        }
        Ok(Reply::Frame(frame)) => BackendError::check_reply(*frame).map(Reply::from),
        Ok(raw) => Ok(raw),
        Err(link::SendError::NotSent(source)) => Err(BackendError::Connect { source }),
        Err(link::SendError::Sent(source)) => Err(BackendError::Sent { source }),
    }
}

/// A fred client owned by one client connection (WATCH/MULTI/EXEC, blocking commands).
pub struct DedicatedRedis {
    /// The connection.
    live: Arc<Live>,
    /// Reply timeout for non-blocking commands.
    response_timeout: Duration,
}

impl DedicatedRedis {
    /// Sends one request; a broken connection is not re-dialled.
    ///
    /// # Errors
    /// [`BackendError`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Reply, BackendError> {
        if !self.live.is_up() {
            return Err(BackendError::Connect {
                source: fred::error::Error::new(
                    fred::error::ErrorKind::IO,
                    "the dedicated connection is closed",
                ),
            });
        }
        // A blocking command waits as long as it asked to, unless its connection ends.
        self.live.send(request, self.response_timeout).await
    }

    /// Closes the connection. A `QUIT` would wait behind a command still blocking there
    /// (`BLPOP … 0` of a client that went away), which would then take the next element for
    /// nobody: the socket is dropped first (fred's reconnection closes it; nothing is replayed,
    /// its attempts are 1), so the server forgets the blocked command at once.
    pub async fn close(self) {
        match &self.live.conn {
            Conn::Fred(client) => {
                let limit = Duration::from_secs(2);
                let _ = tokio::time::timeout(limit, client.force_reconnection()).await;
                let _ = tokio::time::timeout(limit, client.quit()).await;
            }
            Conn::Link(link) => link.close(),
            Conn::Cluster(nodes) => nodes.close(),
        }
    }
}

/// Exact mode: the command inside the script of `src/backend/exact.rs`, by its SHA and, when
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

/// `WAIT wanted timeout` on the connection that carried the write: the write is acknowledged
/// only once `wanted` replicas have it.
async fn wait_replicas(
    live: &Live,
    request: &Request<'_>,
    wanted: u32,
    timeout: Duration,
) -> Result<(), BackendError> {
    let args = [
        Bytes::from_static(b"WAIT"),
        Bytes::from(wanted.to_string()),
        Bytes::from(timeout.as_millis().to_string()),
    ];
    // On a Cluster, WAIT must reach the node that took the write: its key's node.
    let wait = Request {
        token: None,
        replicas: None,
        route: request.route.or(request.args.get(1).map(|k| k.as_ref())),
        ..request.with_args(&args)
    };
    let count = live.send(&wait, timeout + Duration::from_secs(1)).await;
    replicated(wanted, count)
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
fn not_primary(follow: &Option<Arc<Watch>>, primary: Option<&Addr>) -> fred::error::Error {
    if let Some(watch) = follow {
        watch.requery();
    }
    fred::error::Error::new(
        fred::error::ErrorKind::IO,
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

/// The `host:port` addresses under `backends.NAME.FIELD` as fred's servers.
fn servers(
    name: &str,
    field: &str,
    addrs: &[String],
) -> Result<Vec<fred::types::config::Server>, BackendError> {
    addrs
        .iter()
        .map(|addr| {
            let (host, port) = host_port(addr).ok_or_else(|| BackendError::Unsupported {
                what: format!("backends.{name}.{field}: `{addr}` is not host:port"),
            })?;
            Ok(fred::types::config::Server::new(host, port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_clients_wait_waits_as_long_as_it_asked() {
        let second = Duration::from_secs(1);
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        for (words, blocking, want) in [
            (&["GET", "k"][..], false, Some(second)),
            (&["BLPOP", "k", "0"][..], true, None),
            (
                &["WAIT", "1", "1500"][..],
                false,
                Some(Duration::from_millis(2500)),
            ),
            (
                &["wait", "1", "1500"][..],
                false,
                Some(Duration::from_millis(2500)),
            ),
            (&["WAIT", "1", "0"][..], false, Some(second)),
            (&["WAIT", "1", "x"][..], false, Some(second)),
            (&["WAIT", "1"][..], false, Some(second)),
        ] {
            assert_eq!(
                reply_deadline(&args(words), blocking, second),
                want,
                "{words:?}"
            );
        }
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
        let io = || fred::error::Error::new(fred::error::ErrorKind::IO, "closed");
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
        let target = link::Target::of(
            &fred::types::config::Config::default(),
            Proto::Resp2,
            (Duration::from_secs(1), Duration::from_secs(1)),
        )
        .expect("a standalone server without TLS");
        Pool {
            slots: (0..len)
                .map(|_| {
                    Slot::new(
                        Dialer::Link(Arc::new(target.clone())),
                        Arc::new(AtomicBool::new(false)),
                        "test".into(),
                        0,
                        Tokens::default(),
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
            Some(fred::util::redis_keyslot(b"elsewhere")),
            "the route key, as fred routes it"
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
