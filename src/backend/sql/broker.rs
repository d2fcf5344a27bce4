//! Pub/Sub on a SQL backend: holdfast is the server. Subscribers register with the backend's
//! broker ([`Ticket`]); a committed `PUBLISH` is delivered to every matching subscriber of
//! this process, and the reply counts them, as Redis counts its clients.
//!
//! On PostgreSQL a `PUBLISH` is a `NOTIFY` inside the command's transaction (so a `PUBLISH`
//! in a `MULTI` that never commits sends nothing, and exact mode's token makes a retried one
//! send once), and one `LISTEN` connection per holdfast, opened at the first subscription,
//! hears every holdfast's: deliveries to this process's subscribers come from it, so they
//! arrive in commit order. The reply counts the subscribers of this holdfast only (as a
//! Redis Cluster node counts its own). NOTIFY carries text of under 8000 bytes: a channel and
//! message are sent base64-encoded, so together they may have at most [`MAX_NOTIFY_BYTES`];
//! a longer one is refused before anything is sent. A message published while the `LISTEN`
//! connection is down (the server restarting) is not heard by this holdfast's subscribers,
//! as a Redis subscriber misses what is published while it reconnects.

use super::args::glob;
use crate::backend::pubsub::{Delivery, Kind, Outbox};
use crate::backend::BackendError;
use crate::metrics as m;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// The PostgreSQL channel every holdfast of a database listens on.
pub const PG_CHANNEL: &str = "holdfast_pubsub";

/// Most bytes of channel and message together in one `PUBLISH` on PostgreSQL: base64 of
/// both, and their separators, must stay under NOTIFY's 8000 bytes.
pub const MAX_NOTIFY_BYTES: usize = 5_990;

/// One subscribed client's names, by kind.
struct Sub {
    outbox: Outbox,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    shards: HashSet<Bytes>,
}

impl Sub {
    fn names(&mut self, kind: Kind) -> &mut HashSet<Bytes> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shards,
        }
    }
}

#[derive(Default)]
struct State {
    next: u64,
    subs: HashMap<u64, Sub>,
}

/// PostgreSQL's `LISTEN` side: the hosts to try, and whether it is listening now.
struct Listen {
    urls: Vec<String>,
    started: AtomicBool,
    up: watch::Sender<bool>,
}

/// The subscribers of one SQL backend in this process.
pub struct Broker {
    name: Arc<str>,
    state: Mutex<State>,
    listen: Option<Listen>,
}

impl Broker {
    /// A broker for SQLite (`urls` empty) or for PostgreSQL at `urls` (a primary and its
    /// standbys: `LISTEN` is accepted by the primary only).
    pub fn new(name: &str, urls: Vec<String>) -> Arc<Broker> {
        let listen = (!urls.is_empty()).then(|| Listen {
            urls,
            started: AtomicBool::new(false),
            up: watch::channel(false).0,
        });
        Arc::new(Broker {
            name: name.into(),
            state: Mutex::new(State::default()),
            listen,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
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

    /// How many of this process's subscribers a message to `channel` reaches (PostgreSQL's
    /// `PUBLISH` reply: the deliveries come through `LISTEN`).
    pub fn count(&self, shard: bool, channel: &Bytes) -> i64 {
        self.reach(shard, channel, None)
    }

    /// The subscriptions a message to `channel` matches, counted, and given `payload` when
    /// there is one.
    fn reach(&self, shard: bool, channel: &Bytes, payload: Option<&Bytes>) -> i64 {
        let state = self.state();
        let mut count = 0;
        let mut hit = |sub: &Sub, kind: Kind, pattern: Option<&Bytes>| {
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
                    hit(sub, Kind::Shard, None);
                }
                continue;
            }
            if sub.channels.contains(channel) {
                hit(sub, Kind::Channel, None);
            }
            for pattern in &sub.patterns {
                if glob(pattern, channel) {
                    hit(sub, Kind::Pattern, Some(pattern));
                }
            }
        }
        count
    }

    /// The reply to a committed `PUBLISH`/`SPUBLISH` (`command`, answered `reply` in its
    /// transaction): the subscribers of this process it reaches, delivered to them here on
    /// SQLite (PostgreSQL's come through `LISTEN`). None for any other command, or a
    /// `PUBLISH` answered with an error (nothing was sent).
    pub fn published(&self, command: &[Bytes], reply: &Frame) -> Option<i64> {
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
        Some(if self.notifies() {
            self.count(shard, channel)
        } else {
            self.deliver(shard, channel, payload)
        })
    }

    /// Whether `PUBLISH` goes through `NOTIFY`.
    pub fn notifies(&self) -> bool {
        self.listen.is_some()
    }

    /// `PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB` over this
    /// process's subscribers. `args` are the whole command; arity was checked.
    pub fn pubsub(&self, args: &[Bytes]) -> Frame {
        let sub = args
            .get(1)
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default();
        let state = self.state();
        let bulk = |data: Bytes| Frame::BlobString {
            data,
            attributes: None,
        };
        let number = |data: i64| Frame::Number {
            data,
            attributes: None,
        };
        let array = |data: Vec<Frame>| Frame::Array {
            data,
            attributes: None,
        };
        let active = |kind: Kind| -> BTreeSet<Bytes> {
            state
                .subs
                .values()
                .flat_map(|s| match kind {
                    Kind::Channel => s.channels.iter(),
                    Kind::Pattern => s.patterns.iter(),
                    Kind::Shard => s.shards.iter(),
                })
                .cloned()
                .collect()
        };
        let subscribers = |kind: Kind, name: &Bytes| -> i64 {
            state
                .subs
                .values()
                .filter(|s| match kind {
                    Kind::Shard => s.shards.contains(name),
                    _ => s.channels.contains(name),
                })
                .count() as i64
        };
        match sub.as_slice() {
            b"CHANNELS" | b"SHARDCHANNELS" => {
                let kind = if sub.as_slice() == b"CHANNELS" {
                    Kind::Channel
                } else {
                    Kind::Shard
                };
                let pattern = args.get(2);
                array(
                    active(kind)
                        .into_iter()
                        .filter(|c| pattern.map_or(true, |p| glob(p, c)))
                        .map(bulk)
                        .collect(),
                )
            }
            b"NUMSUB" | b"SHARDNUMSUB" => {
                let kind = if sub.as_slice() == b"NUMSUB" {
                    Kind::Channel
                } else {
                    Kind::Shard
                };
                let mut items = Vec::new();
                for name in &args[2..] {
                    items.push(bulk(name.clone()));
                    items.push(number(subscribers(kind, name)));
                }
                array(items)
            }
            _ => number(active(Kind::Pattern).len() as i64),
        }
    }

    /// Starts listening (PostgreSQL) if not yet, and waits up to `timeout` for it.
    async fn listening(self: &Arc<Self>, timeout: Duration) -> Result<(), BackendError> {
        let Some(listen) = &self.listen else {
            return Ok(());
        };
        {
            // Under the state lock: the listening task decides to stop under it too.
            let _state = self.state();
            if !listen.started.swap(true, Ordering::AcqRel) {
                tokio::spawn(listen_loop(Arc::downgrade(self)));
            }
        }
        let mut up = listen.up.subscribe();
        let listening = async move { up.wait_for(|up| *up).await.is_ok() };
        match tokio::time::timeout(timeout, listening).await {
            Ok(true) => Ok(()),
            _ => Err(BackendError::Sql {
                stage: super::SqlStage::Connect,
                source: sqlx::Error::PoolTimedOut,
            }),
        }
    }
}

/// `NOTIFY`'s payload for a message: `m` or `s` (shard), the channel and the message, each
/// base64 (NOTIFY carries text, and a Redis message is any bytes).
///
/// # Errors
/// The error reply for a message over [`MAX_NOTIFY_BYTES`].
pub fn encode(shard: bool, channel: &[u8], payload: &[u8]) -> Result<String, String> {
    if channel.len() + payload.len() > MAX_NOTIFY_BYTES {
        return Err(format!(
            "ERR holdfast: a PUBLISH on PostgreSQL carries at most {MAX_NOTIFY_BYTES} bytes of channel and message (NOTIFY's limit); this one has {}",
            channel.len() + payload.len()
        ));
    }
    let kind = if shard { 's' } else { 'm' };
    Ok(format!(
        "{kind}{}:{}",
        B64.encode(channel),
        B64.encode(payload)
    ))
}

/// The message of a `NOTIFY` payload made by [`encode`]; None for anything else.
pub fn decode(text: &str) -> Option<(bool, Bytes, Bytes)> {
    let shard = match text.as_bytes().first()? {
        b'm' => false,
        b's' => true,
        _ => return None,
    };
    let (channel, payload) = text.get(1..)?.split_once(':')?;
    Some((
        shard,
        Bytes::from(B64.decode(channel).ok()?),
        Bytes::from(B64.decode(payload).ok()?),
    ))
}

/// How long the `LISTEN` connection may stay quiet before it is asked a `SELECT 1`, and how
/// long that may take: a server that stopped answering is left, not listened to for ever.
const LISTEN_CHECK: Duration = Duration::from_secs(5);
const LISTEN_PROBE: Duration = Duration::from_secs(2);

/// Whether the listening task should stop: no subscriber is left in this process (or the
/// broker is gone). Decided under the state lock, where [`Broker::listening`] starts it.
fn idle(broker: &Weak<Broker>) -> bool {
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
    listen.up.send_replace(false);
    drop(state);
    true
}

fn set_up(broker: &Weak<Broker>, up: bool) {
    if let Some(b) = broker.upgrade() {
        if let Some(listen) = &b.listen {
            listen.up.send_replace(up);
        }
    }
}

/// Listens on the first host that accepts `LISTEN` (the primary), delivering what it hears,
/// and listens again when the connection ends or stops answering, for as long as this
/// process has a subscriber.
async fn listen_loop(broker: Weak<Broker>) {
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
        let urls = listen.urls.clone();
        let name = strong.name.clone();
        drop(strong);
        let mut listener = None;
        for url in &urls {
            let open = async {
                let mut l = sqlx::postgres::PgListener::connect(url).await?;
                l.listen(PG_CHANNEL).await?;
                Ok::<_, sqlx::Error>(l)
            };
            if let Ok(Ok(l)) = tokio::time::timeout(LISTEN_PROBE, open).await {
                listener = Some(l);
                break;
            }
        }
        let Some(mut listener) = listener else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        set_up(&broker, true);
        // Until the connection ends: what is published until it is back is not heard.
        loop {
            match tokio::time::timeout(LISTEN_CHECK, listener.try_recv()).await {
                Ok(Ok(Some(note))) => {
                    let Some(b) = broker.upgrade() else { return };
                    if let Some((shard, channel, payload)) = decode(note.payload()) {
                        b.deliver(shard, &channel, &payload);
                    }
                }
                Ok(_) => break,
                Err(_) => {
                    if idle(&broker) {
                        return;
                    }
                    let probe = sqlx::query("SELECT 1").execute(&mut listener);
                    if !matches!(tokio::time::timeout(LISTEN_PROBE, probe).await, Ok(Ok(_))) {
                        break;
                    }
                }
            }
        }
        tracing::warn!(backend = %name, "the LISTEN connection ended; listening again");
        m::pubsub_resubscribe(&name);
        set_up(&broker, false);
    }
}

/// One client's registration with a broker; dropped, it subscribes to nothing.
pub struct Ticket {
    broker: Arc<Broker>,
    id: u64,
}

impl Ticket {
    /// Adds `names`; on PostgreSQL, returns once this holdfast is listening.
    ///
    /// # Errors
    /// [`BackendError::Sql`] when PostgreSQL accepted no `LISTEN` within `timeout`.
    pub async fn subscribe(
        &self,
        kind: Kind,
        names: &[Bytes],
        timeout: Duration,
    ) -> Result<(), BackendError> {
        {
            let mut state = self.broker.state();
            if let Some(sub) = state.subs.get_mut(&self.id) {
                sub.names(kind).extend(names.iter().cloned());
            }
        }
        self.broker.listening(timeout).await
    }

    /// Removes `names`.
    pub fn unsubscribe(&self, kind: Kind, names: &[Bytes]) {
        let mut state = self.broker.state();
        if let Some(sub) = state.subs.get_mut(&self.id) {
            let set = sub.names(kind);
            for name in names {
                set.remove(name);
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.broker.state().subs.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notify_payload_carries_any_bytes_and_refuses_what_does_not_fit() {
        for (shard, channel, payload) in [
            (false, &b"news"[..], &b"hello"[..]),
            (true, b"a:b", b"\x00\xff:\r\n"),
            (false, b"", b""),
        ] {
            let text = encode(shard, channel, payload).expect("fits");
            assert!(text.len() < 8000);
            assert_eq!(
                decode(&text),
                Some((
                    shard,
                    Bytes::copy_from_slice(channel),
                    Bytes::copy_from_slice(payload)
                ))
            );
        }
        let most = vec![b'x'; MAX_NOTIFY_BYTES - 1];
        assert!(encode(true, b"c", &most).expect("fits").len() < 8000);
        assert!(encode(true, b"cc", &most).is_err());
        assert_eq!(decode("x"), None);
        assert_eq!(decode("mnot base64:"), None);
    }

    #[test]
    fn a_publish_counts_each_matching_subscription_as_redis_does() {
        let broker = Broker::new("t", Vec::new());
        let (outbox, mut rx) = Outbox::new(16, Arc::new(|_| {}));
        let ticket = broker.join(outbox);
        let names = |n: &[&str]| -> Vec<Bytes> {
            n.iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        };
        {
            let mut state = broker.state();
            let sub = state.subs.get_mut(&ticket.id).expect("joined");
            sub.names(Kind::Channel).extend(names(&["news"]));
            sub.names(Kind::Pattern).extend(names(&["n*", "*s"]));
            sub.names(Kind::Shard).extend(names(&["news"]));
        }
        let news = Bytes::from_static(b"news");
        assert_eq!(broker.count(false, &news), 3);
        assert_eq!(broker.deliver(false, &news, &Bytes::from_static(b"m")), 3);
        assert_eq!(broker.deliver(true, &news, &Bytes::from_static(b"s")), 1);
        let mut kinds = Vec::new();
        while let Ok(d) = rx.try_recv() {
            kinds.push((d.kind, d.pattern));
        }
        assert_eq!(kinds.len(), 4);
        assert_eq!(kinds[0], (Kind::Channel, None));
        assert_eq!(kinds[3], (Kind::Shard, None));
        ticket.unsubscribe(Kind::Pattern, &names(&["n*", "*s"]));
        assert_eq!(broker.count(false, &news), 1);
        drop(ticket);
        assert_eq!(broker.count(false, &news), 0);
    }
}
