//! Pub/Sub on a SQL backend: holdfast is the server. Subscribers register with the backend's
//! broker ([`Ticket`]); a committed `PUBLISH` is delivered to every matching subscriber, and
//! the reply counts the subscribers it will reach, as Redis counts its clients.
//!
//! On SQLite the subscribers are this process's, delivered to when the transaction commits.
//!
//! On PostgreSQL a `PUBLISH` is a `NOTIFY` inside the command's transaction (so a `PUBLISH`
//! in a `MULTI` that never commits sends nothing, and exact mode's token makes a retried one
//! send once), and one `LISTEN` session per holdfast, opened at the first subscription,
//! hears every holdfast's: deliveries to this process's subscribers come from it, so they
//! arrive in commit order. NOTIFY carries text of under 8000 bytes: a channel and message
//! are sent base64-encoded, so together they may have at most `MAX_NOTIFY_BYTES`; a longer
//! one is refused before anything is sent.
//!
//! **The count is the database's.** Each `LISTEN` session holds an advisory lock of its own
//! for its life and writes, in table `hf_pubsub`, one row per name its holdfast's subscribers
//! hold (with how many hold it) under that lock's key. A `PUBLISH` counts, in its own
//! transaction, the rows of sessions whose lock is held now (a shared try of it fails): the
//! subscribers of every holdfast on the database that are listening, and none of a session
//! that ended (a crashed holdfast, a restarted server), whose `NOTIFY`s nobody hears. A `SUBSCRIBE` is
//! confirmed once its rows are written, an `UNSUBSCRIBE` once they are changed.
//!
//! **A gap closes the subscriber.** What is committed while a `LISTEN` session is down is
//! heard by nobody. When this holdfast's session ends, every client subscribed through it is
//! closed (`holdfast_limits_total{limit="pubsub_gap"}`): its library connects and subscribes
//! again, and knows it may have missed messages, as a Redis subscriber does when its own
//! connection drops. None is left open over a gap.

use super::model::args::glob;
use super::model::pubsub::{decode, LIVE, LOCK_CLASS, PG_CHANNEL};
use crate::backend::pubsub::{Delivery, Outbox, SubKind};
use crate::backend::BackendError;
use crate::metrics as m;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// One subscribed client's names, by kind.
struct Sub {
    outbox: Outbox,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    shards: HashSet<Bytes>,
}

impl Sub {
    fn names(&mut self, kind: SubKind) -> &mut HashSet<Bytes> {
        match kind {
            SubKind::Channel => &mut self.channels,
            SubKind::Pattern => &mut self.patterns,
            SubKind::Shard => &mut self.shards,
        }
    }
}

/// A name of one kind, as the registry keeps it.
pub(super) type Name = (SubKind, Bytes);

#[derive(Default)]
struct BrokerState {
    next: u64,
    subs: HashMap<u64, Sub>,
    /// How many subscribers hold each name: the registry rows this holdfast wants.
    totals: HashMap<Name, i64>,
    /// Names whose total changed since the registry was last written.
    dirty: HashSet<Name>,
    /// Counts changes of `totals`: a change is in the registry once `Listen::synced`
    /// reaches its number.
    changes: u64,
}

impl BrokerState {
    /// `by` more (or fewer) subscribers hold `name`.
    fn add(&mut self, kind: SubKind, name: &Bytes, by: i64) {
        let key = (kind, name.clone());
        let total = self.totals.entry(key.clone()).or_insert(0);
        *total += by;
        if *total <= 0 {
            self.totals.remove(&key);
        }
        self.dirty.insert(key);
        self.changes += 1;
    }
}

/// How messages reach the other holdfasts on the database.
pub enum Carrier {
    /// PostgreSQL's `NOTIFY`, heard by a `LISTEN` session at the first of these hosts that
    /// accepts it (a primary and its standbys).
    Notify(Vec<String>),
    /// SQLite's table `hf_messages`, read by a task of each process that has subscribers
    /// (`inbox.rs`), started by this at the first subscription.
    Table(Inbox),
}

/// Starts the task that keeps a SQLite broker's registry and reads its messages (given by
/// the engine, which knows both sides, so the broker needs not know the inbox).
pub type Inbox = Box<dyn Fn(Weak<Broker>) -> tokio::task::JoinHandle<()> + Send + Sync>;

/// The side that keeps the registry and hears other holdfasts: how, and how far the
/// registry is written.
struct Listen {
    carrier: Carrier,
    started: AtomicBool,
    /// The last change of `BrokerState::totals` written to the registry by the session listening
    /// now; None while no session is listening.
    synced: watch::Sender<Option<u64>>,
    /// Wakes the listening task: the totals changed.
    changed: Arc<Notify>,
}

/// The subscribers of one SQL backend in this process.
pub struct Broker {
    name: Arc<str>,
    /// Its id in the registry: random, positive, one per backend instance (two holdfasts in
    /// one process, or a backend replaced by a reload, do not share one).
    origin: i64,
    state: Mutex<BrokerState>,
    listen: Option<Listen>,
}

impl Broker {
    /// A broker whose messages go through `carrier`; None: this process's subscribers
    /// only, counted as they are delivered (unit tests).
    pub fn new(name: &str, carrier: Option<Carrier>) -> Arc<Broker> {
        let listen = carrier.map(|carrier| Listen {
            carrier,
            started: AtomicBool::new(false),
            synced: watch::channel(None).0,
            changed: Arc::new(Notify::new()),
        });
        Arc::new(Broker {
            name: name.into(),
            origin: (rand::random::<u64>() >> 1) as i64,
            state: Mutex::new(BrokerState::default()),
            listen,
        })
    }

    fn state(&self) -> MutexGuard<'_, BrokerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a subscriber delivering into `outbox`.
    pub fn join(self: &Arc<Self>, outbox: Outbox) -> Ticket {
        let mut state = self.state();
        state.next += 1;
        let id = state.next;
        state.subs.insert(
            id,
            Sub {
                outbox,
                channels: HashSet::new(),
                patterns: HashSet::new(),
                shards: HashSet::new(),
            },
        );
        Ticket {
            broker: self.clone(),
            id,
        }
    }

    /// Delivers a message published to `channel` (a shard channel when `shard`) to this
    /// process's subscribers, and answers how many got it (a client matching by two patterns
    /// counts twice, as in Redis).
    pub fn deliver(&self, shard: bool, channel: &Bytes, payload: &Bytes) -> i64 {
        self.reach(shard, channel, Some(payload))
    }

    /// How many of this process's subscribers a message to `channel` reaches.
    #[cfg(test)]
    fn count(&self, shard: bool, channel: &Bytes) -> i64 {
        self.reach(shard, channel, None)
    }

    /// The subscriptions a message to `channel` matches, counted, and given `payload` when
    /// there is one.
    fn reach(&self, shard: bool, channel: &Bytes, payload: Option<&Bytes>) -> i64 {
        let state = self.state();
        let mut count = 0;
        let mut hit = |sub: &Sub, kind: SubKind, pattern: Option<&Bytes>| {
            count += 1;
            if let Some(payload) = payload {
                sub.outbox.put(Delivery {
                    backend: self.name.clone(),
                    kind,
                    pattern: pattern.cloned(),
                    channel: channel.clone(),
                    payload: payload.clone(),
                });
            }
        };
        for sub in state.subs.values() {
            if shard {
                if sub.shards.contains(channel) {
                    hit(sub, SubKind::Shard, None);
                }
                continue;
            }
            if sub.channels.contains(channel) {
                hit(sub, SubKind::Channel, None);
            }
            for pattern in &sub.patterns {
                if glob(pattern, channel) {
                    hit(sub, SubKind::Pattern, Some(pattern));
                }
            }
        }
        count
    }

    /// What follows a committed `PUBLISH`/`SPUBLISH` (`command`, answered `reply` in its
    /// transaction): on SQLite it is delivered to this process's subscribers now (other
    /// processes read it from `hf_messages`); PostgreSQL's deliveries come through `LISTEN`.
    /// Returns the reply's count when it is not the transaction's: a broker with no registry
    /// (unit tests) counts the subscribers it delivered to. None for any other command, or a
    /// `PUBLISH` answered with an error (nothing was sent).
    pub fn published(&self, command: &[Bytes], reply: &Frame) -> Option<i64> {
        if matches!(
            &self.listen,
            Some(Listen {
                carrier: Carrier::Notify(_),
                ..
            })
        ) {
            return None;
        }
        let name = command.first()?;
        let shard = if name.eq_ignore_ascii_case(b"SPUBLISH") {
            true
        } else if name.eq_ignore_ascii_case(b"PUBLISH") {
            false
        } else {
            return None;
        };
        if !matches!(reply, Frame::Number { .. }) {
            return None;
        }
        let (channel, payload) = (command.get(1)?, command.get(2)?);
        let reached = self.deliver(shard, channel, payload);
        self.listen.is_none().then_some(reached)
    }

    /// `PUBSUB …` over this process's subscribers alone (a broker with no registry).
    #[cfg(test)]
    fn pubsub_here(&self, args: &[Bytes]) -> Frame {
        let state = self.state();
        super::model::pubsub::answer(
            args,
            state
                .totals
                .iter()
                .map(|((kind, name), n)| (*kind, name.clone(), *n)),
        )
    }

    /// Starts listening (PostgreSQL) if not yet, and waits up to `timeout` for a session
    /// that listens and has written the registry up to change `change`.
    async fn listening(
        self: &Arc<Self>,
        change: u64,
        timeout: Duration,
    ) -> Result<(), BackendError> {
        let Some(listen) = &self.listen else {
            return Ok(());
        };
        {
            // Under the state lock: the listening task decides to stop under it too.
            let _state = self.state();
            if !listen.started.swap(true, Ordering::AcqRel) {
                let broker = Arc::downgrade(self);
                match &listen.carrier {
                    Carrier::Notify(_) => tokio::spawn(listen_loop(broker)),
                    Carrier::Table(start) => start(broker),
                };
            }
        }
        listen.changed.notify_one();
        let mut synced = listen.synced.subscribe();
        let written = async move {
            synced
                .wait_for(|s| s.is_some_and(|n| n >= change))
                .await
                .is_ok()
        };
        match tokio::time::timeout(timeout, written).await {
            Ok(true) => Ok(()),
            _ => Err(BackendError::Sql {
                stage: super::SqlStage::Connect,
                source: sqlx::Error::PoolTimedOut,
            }),
        }
    }

    /// Its id in the registry (SQLite's; a PostgreSQL session takes a key of its own).
    pub fn origin(&self) -> i64 {
        self.origin
    }

    /// The `[backends]` key.
    pub(super) fn name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// The registry is written up to change `change` by the session listening now.
    pub(super) fn synced(&self, change: u64) {
        if let Some(listen) = &self.listen {
            listen.synced.send_replace(Some(change));
        }
    }

    /// The changes waiting to be written: for a task that sleeps between its writes.
    pub(super) fn changed(&self) -> Option<Arc<Notify>> {
        self.listen.as_ref().map(|l| l.changed.clone())
    }

    /// The session ended: every client subscribed may have missed a message, and is closed.
    pub(super) fn gap(&self) {
        let state = self.state();
        for sub in state.subs.values() {
            let subscribed =
                !(sub.channels.is_empty() && sub.patterns.is_empty() && sub.shards.is_empty());
            if subscribed {
                sub.outbox.lose("pubsub_gap");
            }
        }
        if let Some(listen) = &self.listen {
            listen.synced.send_replace(None);
        }
    }

    /// The registry rows to write: every name (a new session), or those changed since the
    /// last write; with the number of the last change they hold.
    pub(super) fn changes(&self, every: bool) -> (u64, Vec<(Name, i64)>) {
        let mut state = self.state();
        let names: Vec<Name> = if every {
            state.dirty.clear();
            state.totals.keys().cloned().collect()
        } else {
            state.dirty.drain().collect()
        };
        let rows = names
            .into_iter()
            .map(|name| {
                let total = state.totals.get(&name).copied().unwrap_or(0);
                (name, total)
            })
            .collect();
        (state.changes, rows)
    }
}

/// How long the `LISTEN` connection may stay quiet before it is asked a `SELECT 1`, and how
/// long that may take: a server that stopped answering is left, not listened to for ever.
const LISTEN_CHECK: Duration = Duration::from_secs(5);
const LISTEN_PROBE: Duration = Duration::from_secs(2);

/// Whether the listening task should stop: no subscriber is left in this process (or the
/// broker is gone). Decided under the state lock, where [`Broker::listening`] starts it.
pub(super) fn idle(broker: &Weak<Broker>) -> bool {
    let Some(b) = broker.upgrade() else {
        return true;
    };
    let Some(listen) = &b.listen else {
        return true;
    };
    let state = b.state();
    if !state.subs.is_empty() {
        return false;
    }
    listen.started.store(false, Ordering::Release);
    listen.synced.send_replace(None);
    drop(state);
    true
}

/// One `LISTEN` session: its connection, the key of its lock, and its server process.
struct ListenSession {
    listener: sqlx::postgres::PgListener,
    key: i64,
    pid: i32,
}

/// Opens a session at `url`: listening first, then its lock taken, so a row under its key
/// always names a session that hears. `previous`, this holdfast's last session, is ended on
/// the server if it is still there (left because it stopped answering): its rows would count
/// subscribers nobody delivers to. Rows of sessions that ended are removed.
async fn open_session(
    url: &str,
    previous: Option<(i64, i32)>,
) -> Result<ListenSession, sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect(url).await?;
    listener.listen(PG_CHANNEL).await?;
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut listener)
        .await?;
    let key = loop {
        let key = i64::from(rand::random::<u32>() >> 1);
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
            .bind(LOCK_CLASS)
            .bind(key as i32)
            .fetch_one(&mut listener)
            .await?;
        if locked {
            break key;
        }
    };
    if let Some((old, old_pid)) = previous {
        let _ = sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND classid = 1751535699 AND objsubid = 2 AND objid = $1::bigint::oid AND pid = $2",
        )
        .bind(old)
        .bind(old_pid)
        .execute(&mut listener)
        .await;
    }
    // This session's own key reads as dead to itself (one session's locks never conflict),
    // but it has no rows yet.
    sqlx::query(&format!("DELETE FROM hf_pubsub WHERE NOT {LIVE}"))
        .execute(&mut listener)
        .await?;
    Ok(ListenSession { listener, key, pid })
}

/// Writes `rows` (a name and how many subscribers hold it; 0: none any more) under the
/// session's key.
async fn write(session: &mut ListenSession, rows: &[(Name, i64)]) -> Result<(), sqlx::Error> {
    let (held, released): (Vec<_>, Vec<_>) = rows.iter().partition(|(_, total)| *total > 0);
    if !held.is_empty() {
        let kinds: Vec<i64> = held.iter().map(|((k, _), _)| k.index() as i64).collect();
        let names: Vec<Vec<u8>> = held.iter().map(|((_, n), _)| n.to_vec()).collect();
        let totals: Vec<i64> = held.iter().map(|(_, t)| *t).collect();
        sqlx::query(
            "INSERT INTO hf_pubsub (listener, kind, name, clients) \
             SELECT $1, k, n, c FROM UNNEST($2::bigint[], $3::bytea[], $4::bigint[]) AS t(k, n, c) \
             ON CONFLICT (listener, kind, name) DO UPDATE SET clients = excluded.clients",
        )
        .bind(session.key)
        .bind(kinds)
        .bind(names)
        .bind(totals)
        .execute(&mut session.listener)
        .await?;
    }
    if !released.is_empty() {
        let kinds: Vec<i64> = released
            .iter()
            .map(|((k, _), _)| k.index() as i64)
            .collect();
        let names: Vec<Vec<u8>> = released.iter().map(|((_, n), _)| n.to_vec()).collect();
        sqlx::query(
            "DELETE FROM hf_pubsub h USING UNNEST($2::bigint[], $3::bytea[]) AS t(k, n) \
             WHERE h.listener = $1 AND h.kind = t.k AND h.name = t.n",
        )
        .bind(session.key)
        .bind(kinds)
        .bind(names)
        .execute(&mut session.listener)
        .await?;
    }
    Ok(())
}

/// Brings the registry in line with the subscribers (`every` name: a new session), and says
/// how far it is written. False when the session failed.
async fn sync(broker: &Weak<Broker>, session: &mut ListenSession, every: bool) -> bool {
    let Some(b) = broker.upgrade() else {
        return false;
    };
    let (change, rows) = b.changes(every);
    drop(b);
    let written = tokio::time::timeout(LISTEN_PROBE, write(session, &rows)).await;
    if !matches!(written, Ok(Ok(()))) {
        return false;
    }
    if let Some(b) = broker.upgrade() {
        b.synced(change);
    }
    true
}

/// Listens on the first host that accepts `LISTEN` (the primary), keeping the registry in
/// line and delivering what it hears; when the session ends or stops answering, closes the
/// clients subscribed through it (`Broker::gap`) and listens again, for as long as this
/// process has a subscriber.
async fn listen_loop(broker: Weak<Broker>) {
    let mut previous = None;
    loop {
        if idle(&broker) {
            return;
        }
        let Some(strong) = broker.upgrade() else {
            return;
        };
        let Some(listen) = &strong.listen else {
            return;
        };
        let Carrier::Notify(urls) = &listen.carrier else {
            return;
        };
        let urls = urls.clone();
        let changed = listen.changed.clone();
        let name = strong.name.clone();
        drop(strong);
        let mut session = None;
        for url in &urls {
            if let Ok(Ok(s)) = tokio::time::timeout(LISTEN_PROBE, open_session(url, previous)).await
            {
                session = Some(s);
                break;
            }
        }
        let Some(mut session) = session else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        previous = Some((session.key, session.pid));
        // No client is confirmed on this session before every name is written.
        if !sync(&broker, &mut session, true).await {
            continue;
        }
        loop {
            tokio::select! {
                biased;
                () = changed.notified() => {
                    if !sync(&broker, &mut session, false).await {
                        break;
                    }
                }
                heard = tokio::time::timeout(LISTEN_CHECK, session.listener.try_recv()) => match heard {
                    Ok(Ok(Some(note))) => {
                        let Some(b) = broker.upgrade() else { return };
                        if let Some((shard, channel, payload)) = decode(note.payload()) {
                            b.deliver(shard, &channel, &payload);
                        }
                    }
                    Ok(_) => break,
                    Err(_) => {
                        if idle(&broker) {
                            let bye = sqlx::query("DELETE FROM hf_pubsub WHERE listener = $1")
                                .bind(session.key)
                                .execute(&mut session.listener);
                            let _ = tokio::time::timeout(LISTEN_PROBE, bye).await;
                            return;
                        }
                        let probe = sqlx::query("SELECT 1").execute(&mut session.listener);
                        if !matches!(tokio::time::timeout(LISTEN_PROBE, probe).await, Ok(Ok(_))) {
                            break;
                        }
                    }
                },
            }
        }
        // What was committed from here until a session listens again is heard by nobody.
        tracing::warn!(backend = %name, "the LISTEN connection ended: its subscribers are closed, and it listens again");
        m::pubsub_resubscribe(&name);
        if let Some(b) = broker.upgrade() {
            b.gap();
        }
    }
}

/// One client's registration with a broker; dropped, it subscribes to nothing.
pub struct Ticket {
    broker: Arc<Broker>,
    id: u64,
}

impl Ticket {
    /// Adds `names`; on PostgreSQL, returns once a session listens with them registered.
    ///
    /// # Errors
    /// [`BackendError::Sql`] when PostgreSQL accepted no `LISTEN` within `timeout`.
    pub async fn subscribe(
        &self,
        kind: SubKind,
        names: &[Bytes],
        timeout: Duration,
    ) -> Result<(), BackendError> {
        let change = {
            let mut state = self.broker.state();
            let added: Vec<Bytes> = match state.subs.get_mut(&self.id) {
                Some(sub) => names
                    .iter()
                    .filter(|name| sub.names(kind).insert((*name).clone()))
                    .cloned()
                    .collect(),
                None => Vec::new(),
            };
            for name in &added {
                state.add(kind, name, 1);
            }
            state.changes
        };
        self.broker.listening(change, timeout).await
    }

    /// Removes `names`; on PostgreSQL, returns once the registry says so (a `PUBLISH` after
    /// it does not count them), or at once when no session listens (none counts them).
    pub async fn unsubscribe(&self, kind: SubKind, names: &[Bytes]) {
        let change = {
            let mut state = self.broker.state();
            let removed: Vec<Bytes> = match state.subs.get_mut(&self.id) {
                Some(sub) => names
                    .iter()
                    .filter(|name| sub.names(kind).remove(*name))
                    .cloned()
                    .collect(),
                None => Vec::new(),
            };
            for name in &removed {
                state.add(kind, name, -1);
            }
            state.changes
        };
        if let Some(listen) = &self.broker.listen {
            listen.changed.notify_one();
            let mut synced = listen.synced.subscribe();
            let released = synced.wait_for(|s| s.is_none_or(|n| n >= change));
            let _ = tokio::time::timeout(LISTEN_PROBE, released).await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.broker.state();
        if let Some(mut sub) = state.subs.remove(&self.id) {
            for kind in SubKind::ALL {
                for name in std::mem::take(sub.names(kind)) {
                    state.add(kind, &name, -1);
                }
            }
        }
        drop(state);
        if let Some(listen) = &self.broker.listen {
            listen.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_publish_counts_each_matching_subscription_as_redis_does() {
        let broker = Broker::new("t", None);
        let (outbox, mut rx) = Outbox::new(16, Arc::new(|_| {}));
        let ticket = broker.join(outbox);
        let names = |n: &[&str]| -> Vec<Bytes> {
            n.iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        };
        let hour = Duration::from_secs(3600);
        for (kind, list) in [
            (SubKind::Channel, names(&["news"])),
            (SubKind::Pattern, names(&["n*", "*s"])),
            (SubKind::Shard, names(&["news"])),
        ] {
            ticket
                .subscribe(kind, &list, hour)
                .await
                .expect("no registry");
        }
        let ask = |words: &[&str]| broker.pubsub_here(&names(words));
        let number = |data| Frame::Number {
            data,
            attributes: None,
        };
        assert_eq!(ask(&["PUBSUB", "NUMPAT"]), number(2));
        assert_eq!(
            ask(&["PUBSUB", "NUMSUB", "news", "none"]),
            Frame::Array {
                data: vec![
                    Frame::BlobString {
                        data: Bytes::from_static(b"news"),
                        attributes: None
                    },
                    number(1),
                    Frame::BlobString {
                        data: Bytes::from_static(b"none"),
                        attributes: None
                    },
                    number(0),
                ],
                attributes: None
            }
        );
        let news = Bytes::from_static(b"news");
        assert_eq!(broker.count(false, &news), 3);
        assert_eq!(broker.deliver(false, &news, &Bytes::from_static(b"m")), 3);
        assert_eq!(broker.deliver(true, &news, &Bytes::from_static(b"s")), 1);
        let mut kinds = Vec::new();
        while let Ok(d) = rx.try_recv() {
            kinds.push((d.kind, d.pattern));
        }
        assert_eq!(kinds.len(), 4);
        assert_eq!(kinds[0], (SubKind::Channel, None));
        assert_eq!(kinds[3], (SubKind::Shard, None));
        ticket
            .unsubscribe(SubKind::Pattern, &names(&["n*", "*s"]))
            .await;
        assert_eq!(broker.count(false, &news), 1);
        assert_eq!(ask(&["PUBSUB", "NUMPAT"]), number(0));
        drop(ticket);
        assert_eq!(broker.count(false, &news), 0);
        assert_eq!(
            ask(&["PUBSUB", "CHANNELS"]),
            Frame::Array {
                data: vec![],
                attributes: None
            }
        );
    }
}
