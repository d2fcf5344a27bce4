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
//! On a Cluster each pooled connection is a [`Nodes`](cluster::Nodes) of `src/backend/redis/cluster.rs`: a link to
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
//!
//! The rooms here: this file builds a [`RedisBackend`] and is its seam (dispatch, a pipelined
//! run, readiness); `servers.rs` reads where its servers are and
//! how they are reached; `pool.rs` keeps its shared connections and places requests on them;
//! `send.rs` sends a request on one and reads its result; `dedicated.rs` is a client's own
//! connection and the probe that watches the backend while it blocks.

pub mod cluster;
pub mod codec;
mod dedicated;
pub mod dial;
pub mod exact;
pub mod feed;
pub mod link;
mod pool;
mod send;
pub mod sentinel;
mod servers;
pub mod warm;

use super::{BackendError, DoubleStyle, Placement, Proto, Reply, Request};
use crate::config::{ClusterConfig, RedisConfig, SentinelConfig};
use cluster::{keyslot, Topology};
use dial::Target;
use exact::TokenDb;
use pool::{ensure_connected, Dialer, Live, Pool, PoolConn, PoolSlot, Tokens};
use send::{client_wait, leading_run, link_reply, request_slot, run_placement, whole_keyspace};
use sentinel::{Follower, Watch};
use servers::{addresses, found_at_each_dial, password_from, tls_of};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;
use warm::Warm;

pub use crate::config::host_port;
use dedicated::Probe;
pub use dedicated::{DedicatedRedis, PROBE_EVERY};
pub use servers::Servers;

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

/// What a constructor hands [`RedisBackend::with`]: how the backend's servers are found
/// ([`Flavor`]) with what that brings: exact mode's token database (none on a Cluster, which
/// has only database 0), the sentinels' view, or the slot map.
enum Finding {
    /// One server at a fixed address.
    Fixed(TokenDb),
    /// The primary Sentinel names at each dial.
    Sentinel(Follower, TokenDb),
    /// A Redis Cluster, following `MOVED`/`ASK` this many times per command.
    Cluster(Arc<Topology>, u32),
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
        let sizes = (config.pool_size, config.warm_connections);
        let finding = Finding::Fixed(tokens);
        Ok(RedisBackend::with(name, target, sizes, finding))
    }

    /// A Redis primary found through Sentinel. Each dial asks the sentinels for the primary
    /// (and checks its role), so a re-dial after a failover reaches the promoted replica.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when an address or the password file is unusable.
    pub fn sentinel(name: &str, config: &SentinelConfig) -> Result<RedisBackend, BackendError> {
        let sentinels = addresses(name, "sentinels", &config.sentinels)?;
        let tls = (config.tls, config.tls_ca.as_deref());
        let timeouts = (config.connection_timeout, config.response_timeout);
        let target = found_at_each_dial(name, config.password_file.as_deref(), tls, timeouts)?;
        let follower = Follower::start(
            name,
            &config.master_name,
            sentinels,
            config.connection_timeout,
            target.tls().cloned(),
        );
        let tokens = TokenDb {
            tokens: config.token_db,
            data: 0,
        };
        let sizes = (config.pool_size, config.warm_connections);
        let finding = Finding::Sentinel(follower, tokens);
        Ok(RedisBackend::with(name, target, sizes, finding))
    }

    /// A Redis Cluster, found from its seed nodes.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when an address or the password file is unusable.
    pub fn cluster(name: &str, config: &ClusterConfig) -> Result<RedisBackend, BackendError> {
        let seeds = addresses(name, "nodes", &config.nodes)?;
        let tls = (config.tls, config.tls_ca.as_deref());
        let timeouts = (config.connection_timeout, config.response_timeout);
        let target = found_at_each_dial(name, config.password_file.as_deref(), tls, timeouts)?;
        let topology = Topology::start(name, seeds, &target);
        let sizes = (config.pool_size, config.warm_connections);
        let finding = Finding::Cluster(topology, config.max_redirections);
        Ok(RedisBackend::with(name, target, sizes, finding))
    }

    /// The backend of `target`, its pool of `pool_size` dialling at once, `warm` links dialled
    /// ahead for its clients' own connections.
    fn with(
        name: &str,
        target: Target,
        (pool_size, warm): (usize, usize),
        finding: Finding,
    ) -> RedisBackend {
        let (flavor, tokens, follower, topology) = match finding {
            Finding::Fixed(tokens) => (Flavor::Standalone, Some(tokens), None, None),
            Finding::Sentinel(follower, tokens) => {
                (Flavor::Sentinel, Some(tokens), Some(follower), None)
            }
            Finding::Cluster(topology, redirections) => {
                (Flavor::Cluster(redirections), None, None, Some(topology))
            }
        };
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
        use feed::{FeedCtx, Locate, RedisFeed};
        let locate = match (self.flavor, &self.follower, &self.topology) {
            (Flavor::Sentinel, Some(follower), _) => Locate::Sentinel(follower.watch().clone()),
            (Flavor::Cluster(_), _, Some(topology)) => Locate::Cluster(topology.clone()),
            _ => Locate::Fixed,
        };
        RedisFeed::new(FeedCtx {
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
    /// take its token. Otherwise it is settled (docs/failures.md, "Reply modes").
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
            // A function missing from this server (a restart, a failover) ran nothing: the
            // libraries loaded through holdfast are loaded again, and the call sent once more.
            if is_fcall(request.args) && function_missing(&result) {
                let loads = self.scripts.library_loads();
                for load in &loads {
                    let _ = live
                        .send(&request.with_args(load), self.response_timeout)
                        .await;
                }
                if !loads.is_empty() {
                    result = live.send(request, self.response_timeout).await;
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
        // An EVALSHA may need its NOSCRIPT answered with the script's text, an FCALL its
        // libraries loaded again (`dispatch`); a
        // client's WAIT waits as long as it asked (`reply_deadline`), longer than the run's.
        if requests.iter().any(|r| {
            self.scripts.by_text(r.args).is_some()
                || client_wait(r.args).is_some()
                || (is_fcall(r.args) && self.scripts.has_libraries())
        }) {
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

    /// Whether a PING is answered within `timeout`, and if not, why.
    ///
    /// # Errors
    /// What the connection or the PING met.
    pub async fn check(&self, timeout: Duration) -> Result<(), BackendError> {
        let Some(slot) = self.resp2.slots.first() else {
            return Err(BackendError::Unsupported {
                what: "the backend has no connection".to_string(),
            });
        };
        let args = [bytes::Bytes::from_static(b"PING")];
        let request = Request::new(&args, Proto::Resp2, 0);
        // No timeout around the send: its own deadline retires a connection whose reply did
        // not come in time.
        let live = ensure_connected(slot, timeout).await?;
        live.send(&request, timeout).await.map(|_| ())
    }
}

/// Whether `args` is an `FCALL` or `FCALL_RO`.
fn is_fcall(args: &[bytes::Bytes]) -> bool {
    args.first()
        .is_some_and(|n| n.eq_ignore_ascii_case(b"FCALL") || n.eq_ignore_ascii_case(b"FCALL_RO"))
}

/// Whether an `FCALL` was answered that its function does not exist. Redis says so only in
/// words (an `ERR` reply), so this reads them; it decides a reload, never a failure class.
fn function_missing(result: &Result<Reply, BackendError>) -> bool {
    match result {
        Err(BackendError::Reply { frame, .. }) => matches!(
            &**frame,
            redis_protocol::resp3::types::BytesFrame::SimpleError { data, .. }
                if &**data == "ERR Function not found"
        ),
        _ => false,
    }
}
