//! A backend's shared connections and how each is (re)opened: a [`PoolSlot`] holds one
//! connection ([`Live`]) and the dial that replaces it when it ends; a [`Pool`] is a
//! protocol's slots, and [`Pool::place`] picks the one a request takes.
//!
//! A connection that ended is dialled again when a request next needs it
//! ([`ensure_connected`]), in a task of its own so a request that gives up does not abandon
//! the dial. Under Sentinel a connection lives only while the generation it was dialled in
//! stands, and is closed when the sentinels name another primary. Sending on a connection is
//! `send.rs`'s.

use super::cluster::{keyslot, Nodes, Topology};
use super::dial::Addr;
use super::dial::Target;
use super::exact::{self, TokenDb};
use super::link;
use super::sentinel::Watch;
use super::warm::Warm;
use super::{BackendError, Placement};
use crate::error::{LinkError, LinkErrorKind};
use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

/// Resolves when a dialled connection's task ends.
type Closed = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// How a slot dials.
#[derive(Clone)]
pub(super) enum Dialer {
    /// A link to one server: the standalone one, or the primary Sentinel names at each dial.
    Link(Arc<Target>),
    /// Links to a Cluster's primaries.
    Cluster(Arc<Topology>, Arc<Target>),
}

/// What a dialled connection talks through.
pub(super) enum PoolConn {
    Link(link::Link),
    Cluster(Arc<Nodes>),
}

/// One dialled connection: its client, and a signal that turns true when its connection
/// task ends.
pub(super) struct Live {
    pub(super) conn: PoolConn,
    ended: watch::Receiver<bool>,
    /// `MOVED`/`ASK` redirections each command may follow (0 off a Cluster, and on a
    /// client's own connection).
    pub(super) redirections: u32,
    /// Where exact mode's tokens live on this connection's server.
    pub(super) tokens: Option<TokenDb>,
    /// Set when a reply did not come in time: the connection takes no new command and is
    /// closed, failing what is in flight.
    retired: AtomicBool,
    /// Under Sentinel: the view it was dialled in, and its generation. Live only while that
    /// generation stands (see `src/backend/redis/sentinel.rs`).
    pub(super) fence: Option<(Arc<Watch>, u64)>,
}

impl Live {
    pub(super) fn is_up(&self) -> bool {
        !*self.ended.borrow()
            && !self.retired.load(Ordering::Acquire)
            && self
                .fence
                .as_ref()
                .is_none_or(|(watch, generation)| watch.generation() == *generation)
    }

    /// Takes the connection out of service and closes it: its links stop at once, and what
    /// is in flight there fails as sent (a reply that did not come in time may never come).
    pub(super) fn retire(&self) {
        self.retire_because("the connection was closed by holdfast");
    }

    /// As [`Live::retire`], saying `why` to what was in flight.
    pub(super) fn retire_because(&self, why: &str) {
        if !self.retired.swap(true, Ordering::AcqRel) {
            match &self.conn {
                PoolConn::Link(link) => link.close_because(why),
                PoolConn::Cluster(nodes) => nodes.close(),
            }
        }
    }

    /// The server a request of `route` goes to on this connection, for probes: a Cluster's
    /// node; None elsewhere (one server).
    pub(super) fn server_of(&self, route: Option<&[u8]>) -> Option<Addr> {
        match &self.conn {
            PoolConn::Cluster(nodes) => nodes.owner_now(route.map(keyslot)),
            PoolConn::Link(_) => None,
        }
    }
}

/// One pooled connection and the dial that (re)opens it.
pub(super) struct PoolSlot {
    /// How each dial connects: a fresh link each time, so a command still held for a dead
    /// connection dies with it, and is never written to the next connection, long after the
    /// request gave up on it.
    dialer: Dialer,
    /// The connection of the last successful dial.
    live: ArcSwapOption<Live>,
    /// A dial in progress; kept here so a waiter that gives up does not abandon it, and the
    /// next waiter joins it instead of starting a second one.
    pub(super) dialing: Mutex<Option<JoinHandle<Result<(), LinkError>>>>,
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
    pub(super) fn new(
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
    pub(super) fn live(&self) -> Option<Arc<Live>> {
        self.live.load_full().filter(|live| live.is_up())
    }

    /// Starts one dial in a task of its own, so a waiter that gives up does not abandon it.
    pub(super) fn dial(self: &Arc<Self>) -> JoinHandle<Result<(), LinkError>> {
        let slot = self.clone();
        tokio::spawn(async move { slot.open().await })
    }

    /// Dials (or takes a link dialled ahead) and makes it the slot's connection; a watcher
    /// signals the moment the connection's task ends. A client's own connection is opened
    /// here directly, not in a task: with a link ready it is its client's at once, with no
    /// pass through the scheduler that would let other clients' commands overtake its first.
    pub(super) async fn open(self: &Arc<Self>) -> Result<(), LinkError> {
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
pub(super) struct Tokens {
    /// Their own database (None: beside the data, on a Cluster, which has only database 0).
    pub(super) db: Option<TokenDb>,
    /// True while the last dial found a `maxmemory-policy` that may evict them.
    pub(super) evicting: Arc<AtomicBool>,
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
pub(super) struct Pool {
    pub(super) slots: Vec<Arc<PoolSlot>>,
    /// The connection the last request that found none gathering started a write on; the
    /// requests after it join it while its commands wait to be written.
    pub(super) filling: AtomicUsize,
}

impl Pool {
    /// The index of the connection a request pinned to `pin` takes. A request that may move
    /// joins the connection gathering a write, or starts one on its pinned connection; with
    /// fifty clients, one write and one read then carry every command that came in one pass
    /// of the event loop, however many connections the pool has, not a share of them each.
    /// A `Moves` request takes its pin along.
    ///
    /// A connection whose `WAIT` (`min_replicas_ack`) is unanswered is passed over while
    /// another is free: Redis runs nothing more of it until the replicas answer, so the next
    /// batch starts on a free one, and its `WAIT` waits alongside (one acknowledgement from a
    /// replica answers them all), not after.
    pub(super) fn place(&self, pin: u64, placement: Placement<'_>) -> usize {
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

/// Makes sure `slot` is connected, dialling if it is not, within `acquire_timeout`. A dial
/// that fails (refused, handshake error) ends the wait at once as not sent, so a backend that
/// refuses connections during a failover costs a backoff step, not a whole acquire timeout;
/// one that blackholes them costs the acquire timeout.
pub(super) async fn ensure_connected(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Proto;
    use std::sync::atomic::AtomicU64;

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
