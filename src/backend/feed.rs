//! A subscribed client's connections to a Redis backend ([`RedisFeed`]): its own, never
//! shared, because a Redis connection in subscribed mode carries one client's messages.
//!
//! Each connection (a *line*) is kept by a task that reconciles two sets per kind of
//! subscription: the names the client wants, and the names the server confirmed. The client
//! side only changes what is wanted and waits for the confirmation; the task writes the
//! `SUBSCRIBE`s and `UNSUBSCRIBE`s that bring the server in line. So a connection that ends
//! (a restart, a failover: under Sentinel the line is fenced when the sentinels name another
//! primary) is dialled again and every wanted name subscribed again on the new server, the
//! client told nothing. What was published between the end of the old connection and the
//! confirmation on the new one is not delivered: Redis keeps no Pub/Sub history. A line that
//! cannot be restored within the namespace's hold budget loses its client
//! ([`Outbox::lose`]), which is closed, as Redis closes a client it cannot serve.
//!
//! A line is pinged every [`PING_EVERY`]: a backend that stops answering (frozen,
//! blackholed) is noticed, not waited on for ever.
//!
//! On a Cluster, channels and patterns go on one line to any primary (a Cluster delivers a
//! `PUBLISH` on every node), and shard channels on one line per hash slot, to the slot's
//! owner; a slot that moves ends its subscriptions there (Redis sends `sunsubscribe`), and the
//! line is dialled again at the slot's new owner.

use super::cluster::{Addr, Topology};
use super::link::{self, Target};
use super::pubsub::{Delivery, Kind, Outbox};
use super::sentinel::Watch;
use super::BackendError;
use crate::metrics as m;
use crate::resp::{Output, Proto};
use bytes::{Bytes, BytesMut};
use fred::error::{Error, ErrorKind};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often a line pings its server; one silent for this plus the connection timeout is
/// taken for gone.
pub const PING_EVERY: Duration = Duration::from_secs(2);

/// Most names in one `SUBSCRIBE` a line writes (a client's long list is sent in parts).
const NAMES_PER_COMMAND: usize = 1024;

/// How a feed finds the server of a line.
pub(super) enum Locate {
    /// One server at the target's address.
    Fixed,
    /// The primary the sentinels name; a line is fenced when they name another.
    Sentinel(Arc<Watch>),
    /// A Cluster: any primary for channels and patterns, a slot's owner for shard channels.
    Cluster(Arc<Topology>),
}

/// Which connection of a feed a name goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Line {
    /// Channels and patterns (and shard channels off a Cluster).
    Main,
    /// A Cluster's shard channels of one hash slot.
    Slot(u16),
}

/// What a feed's lines share.
pub(super) struct Ctx {
    /// The `[backends]` key, for logs and metrics.
    pub backend: String,
    /// How to connect and introduce a line (RESP2).
    pub target: Target,
    /// Where a line connects.
    pub locate: Locate,
    /// Where deliveries go.
    pub outbox: Outbox,
    /// How long a line may stay down before its client is lost.
    pub hold: Duration,
}

fn index(kind: Kind) -> usize {
    match kind {
        Kind::Channel => 0,
        Kind::Pattern => 1,
        Kind::Shard => 2,
    }
}

const KINDS: [Kind; 3] = [Kind::Channel, Kind::Pattern, Kind::Shard];

/// A line's two sets of names, by kind.
#[derive(Default)]
struct Names {
    /// What the client wants.
    wanted: [HashSet<Bytes>; 3],
    /// What the server confirmed on the current connection.
    confirmed: [HashSet<Bytes>; 3],
    /// Why the last dial failed, for a subscriber that gives up waiting.
    failed: Option<Error>,
}

impl Names {
    fn is_empty(&self) -> bool {
        self.wanted.iter().all(HashSet::is_empty)
    }
}

/// What a line's task and the feed share.
struct Shared {
    names: Mutex<Names>,
    /// Wakes the task: what is wanted changed.
    changed: Notify,
    /// Bumped whenever `confirmed` changes.
    confirmations: watch::Sender<u64>,
}

impl Shared {
    fn names(&self) -> MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn confirmed_changed(&self) {
        self.confirmations.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// One line: its shared sets and its task, stopped (and its connection closed) on drop.
struct LineHandle {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for LineHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client's subscriptions on one Redis backend.
pub struct RedisFeed {
    ctx: Arc<Ctx>,
    lines: Mutex<HashMap<Line, LineHandle>>,
}

impl RedisFeed {
    pub(super) fn new(ctx: Ctx) -> RedisFeed {
        RedisFeed {
            ctx: Arc::new(ctx),
            lines: Mutex::new(HashMap::new()),
        }
    }

    fn lines(&self) -> MutexGuard<'_, HashMap<Line, LineHandle>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn line_of(&self, kind: Kind, name: &[u8]) -> Line {
        match (&self.ctx.locate, kind) {
            (Locate::Cluster(_), Kind::Shard) => Line::Slot(fred::util::redis_keyslot(name)),
            _ => Line::Main,
        }
    }

    /// Subscribes to `names`, returning once the server confirmed every one: a message
    /// published after this returns is delivered.
    ///
    /// # Errors
    /// [`BackendError::Connect`] (nothing subscribed; the names are wanted no more) when the
    /// server did not confirm them within `timeout`.
    pub async fn subscribe(
        &self,
        kind: Kind,
        names: &[Bytes],
        timeout: Duration,
    ) -> Result<(), BackendError> {
        let mut waits = Vec::new();
        {
            let mut lines = self.lines();
            for name in names {
                let line = self.line_of(kind, name);
                let handle = lines.entry(line).or_insert_with(|| {
                    let shared = Arc::new(Shared {
                        names: Mutex::new(Names::default()),
                        changed: Notify::new(),
                        confirmations: watch::Sender::new(0),
                    });
                    let task = tokio::spawn(run_line(self.ctx.clone(), line, shared.clone()));
                    LineHandle { shared, task }
                });
                handle.shared.names().wanted[index(kind)].insert(name.clone());
                if !waits.iter().any(|(l, _)| *l == line) {
                    waits.push((line, handle.shared.clone()));
                }
            }
        }
        for (_, shared) in &waits {
            shared.changed.notify_one();
        }
        let confirmed = async {
            for (_, shared) in &waits {
                let mut seen = shared.confirmations.subscribe();
                let all = |_: &u64| {
                    let names_now = shared.names();
                    names.iter().all(|n| {
                        names_now.confirmed[index(kind)].contains(n)
                            || !names_now.wanted[index(kind)].contains(n)
                    })
                };
                if seen.wait_for(all).await.is_err() {
                    return false;
                }
            }
            true
        };
        if tokio::time::timeout(timeout, confirmed).await == Ok(true) {
            return Ok(());
        }
        let failed = waits
            .iter()
            .find_map(|(_, shared)| shared.names().failed.clone());
        self.unsubscribe(kind, names);
        Err(BackendError::Connect {
            source: failed.unwrap_or_else(|| {
                Error::new(
                    ErrorKind::IO,
                    format!(
                        "the subscription was not confirmed within {timeout:?} (backend {})",
                        self.ctx.backend
                    ),
                )
            }),
        })
    }

    /// Unsubscribes from `names`; a line left with nothing wanted is closed. Messages for
    /// them still on their way are dropped by the line.
    pub fn unsubscribe(&self, kind: Kind, names: &[Bytes]) {
        let mut lines = self.lines();
        let mut touched = Vec::new();
        for name in names {
            let line = self.line_of(kind, name);
            if let Some(handle) = lines.get(&line) {
                handle.shared.names().wanted[index(kind)].remove(name);
                if !touched.contains(&line) {
                    touched.push(line);
                }
            }
        }
        for line in touched {
            let empty = lines
                .get(&line)
                .is_some_and(|handle| handle.shared.names().is_empty());
            if empty {
                lines.remove(&line);
            } else if let Some(handle) = lines.get(&line) {
                handle.shared.changed.notify_one();
            }
        }
    }
}

/// How a connection of a line ended.
enum End {
    /// It failed, or was fenced: dial again where the line's server is now.
    Lost,
    /// The server moved a subscription away (a Cluster slot migrated): read the slot map
    /// before dialling again.
    Moved,
}

/// A line's task: connect, subscribe what is wanted, deliver, and again when the connection
/// ends; gives the client up when the line stays down past the hold budget.
async fn run_line(ctx: Arc<Ctx>, line: Line, shared: Arc<Shared>) {
    let mut served = false;
    let mut down_since: Option<Instant> = None;
    let mut delay = Duration::from_millis(50);
    loop {
        match connect(&ctx, line).await {
            Ok((stream, fence)) => {
                if served {
                    m::pubsub_resubscribe(&ctx.backend);
                    tracing::info!(backend = %ctx.backend, "Pub/Sub connection dialled again; subscriptions restored (messages published meanwhile were missed)");
                }
                served = true;
                down_since = None;
                delay = Duration::from_millis(50);
                shared.names().failed = None;
                let end = serve(&ctx, &shared, stream, fence).await;
                {
                    let mut names = shared.names();
                    for set in &mut names.confirmed {
                        set.clear();
                    }
                }
                shared.confirmed_changed();
                if let (End::Moved, Locate::Cluster(topology)) = (end, &ctx.locate) {
                    let _ = topology.read().await;
                }
                tracing::warn!(backend = %ctx.backend, "a Pub/Sub connection ended; dialling again");
            }
            Err(e) => {
                tracing::debug!(backend = %ctx.backend, error = %e, "a Pub/Sub dial failed");
                shared.names().failed = Some(e);
            }
        }
        if ctx.outbox.is_closed() {
            return;
        }
        let since = *down_since.get_or_insert_with(Instant::now);
        let wanted = !shared.names().is_empty();
        if served && wanted && since.elapsed() >= ctx.hold {
            tracing::warn!(backend = %ctx.backend, "Pub/Sub subscriptions not restored within the hold budget: closing the client");
            ctx.outbox.lose("pubsub_lost");
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// Under Sentinel: the view and the generation a connection belongs to.
type Fence = Option<(Arc<Watch>, u64)>;

fn io_error(text: String) -> Error {
    Error::new(ErrorKind::IO, text)
}

/// Dials the line's server and introduces the connection.
async fn connect(ctx: &Ctx, line: Line) -> Result<(TcpStream, Fence), Error> {
    let (at, fence): (Option<Addr>, Fence) = match &ctx.locate {
        Locate::Fixed => (None, None),
        Locate::Sentinel(watch) => {
            let (addr, generation) = watch.primary().await?;
            (Some(addr), Some((watch.clone(), generation)))
        }
        Locate::Cluster(topology) => {
            let map = topology.known().await?;
            let owner = match line {
                Line::Main => map.primaries.first(),
                Line::Slot(slot) => map.owner(slot),
            };
            let owner = owner
                .cloned()
                .ok_or_else(|| io_error("no node serves the slot".to_string()))?;
            (Some(owner), None)
        }
    };
    let target = at.map_or_else(|| ctx.target.clone(), |addr| ctx.target.at(&addr));
    let within = target.connection_timeout();
    let (host, port) = target.addr();
    let dial = async {
        let mut stream = TcpStream::connect((host.as_str(), port)).await?;
        let _ = stream.set_nodelay(true);
        let server = link::handshake(&mut stream, &target).await?;
        Ok::<_, Error>((stream, server))
    };
    let (stream, server) = tokio::time::timeout(within, dial)
        .await
        .map_err(|_| io_error(format!("no connection to {host}:{port} within {within:?}")))??;
    if let Some((watch, _)) = &fence {
        if !server.is_primary() {
            watch.requery();
            return Err(io_error(format!("{host}:{port} is no primary")));
        }
    }
    Ok((stream, fence))
}

/// What a frame from a subscribed connection is.
#[derive(Debug, PartialEq, Eq)]
enum Incoming {
    /// A published message.
    Message(Delivery),
    /// The server confirmed a subscription.
    Subscribed(Kind, Bytes),
    /// The server ended a subscription (ours asked, or its own: a moved slot).
    Unsubscribed(Kind, Bytes),
    /// A redirection (`-MOVED`): the slot is served elsewhere.
    Moved,
    /// Anything else (a `pong`, another error reply).
    Other,
}

/// Reads one frame of a subscribed connection.
fn incoming(frame: Frame) -> Incoming {
    let items = match frame {
        Frame::Array { data, .. } | Frame::Push { data, .. } => data,
        Frame::SimpleError { data, .. } if data.starts_with("MOVED ") => return Incoming::Moved,
        _ => return Incoming::Other,
    };
    let text = |f: &Frame| match f {
        Frame::BlobString { data, .. } | Frame::SimpleString { data, .. } => Some(data.clone()),
        _ => None,
    };
    let mut parts = items.iter();
    let Some(what) = parts.next().and_then(text) else {
        return Incoming::Other;
    };
    let rest: Vec<Option<Bytes>> = parts.map(text).collect();
    let at = |i: usize| rest.get(i).cloned().flatten();
    let delivery =
        |kind, pattern, channel: Option<Bytes>, payload: Option<Bytes>| match (channel, payload) {
            (Some(channel), Some(payload)) => Incoming::Message(Delivery {
                kind,
                pattern,
                channel,
                payload,
            }),
            _ => Incoming::Other,
        };
    let named =
        |make: fn(Kind, Bytes) -> Incoming, kind| at(0).map_or(Incoming::Other, |n| make(kind, n));
    match what.as_ref() {
        b"message" => delivery(Kind::Channel, None, at(0), at(1)),
        b"pmessage" => match at(0) {
            Some(pattern) => delivery(Kind::Pattern, Some(pattern), at(1), at(2)),
            None => Incoming::Other,
        },
        b"smessage" => delivery(Kind::Shard, None, at(0), at(1)),
        b"subscribe" => named(Incoming::Subscribed, Kind::Channel),
        b"psubscribe" => named(Incoming::Subscribed, Kind::Pattern),
        b"ssubscribe" => named(Incoming::Subscribed, Kind::Shard),
        b"unsubscribe" => named(Incoming::Unsubscribed, Kind::Channel),
        b"punsubscribe" => named(Incoming::Unsubscribed, Kind::Pattern),
        b"sunsubscribe" => named(Incoming::Unsubscribed, Kind::Shard),
        _ => Incoming::Other,
    }
}

/// Serves one connection of a line until it ends.
async fn serve(ctx: &Ctx, shared: &Shared, mut stream: TcpStream, fence: Fence) -> End {
    // What was sent on this connection, by kind: the difference to `wanted` is what to send.
    let mut sent: [HashSet<Bytes>; 3] = Default::default();
    let mut buf = BytesMut::with_capacity(4096);
    let fenced = async {
        match &fence {
            Some((watch, generation)) => watch.fenced(*generation).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(fenced);
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let silent_for = PING_EVERY + ctx.target.connection_timeout();
    let mut heard = Instant::now();
    // Everything wanted goes out at once on a fresh connection.
    shared.changed.notify_one();
    loop {
        tokio::select! {
            () = shared.changed.notified() => {
                let mut out = Output::default();
                {
                    let names = shared.names();
                    for kind in KINDS {
                        let i = index(kind);
                        let add: Vec<Bytes> = names.wanted[i].difference(&sent[i]).cloned().collect();
                        let drop: Vec<Bytes> = sent[i].difference(&names.wanted[i]).cloned().collect();
                        for (command, list) in [(kind.subscribe(), &add), (kind.unsubscribe(), &drop)] {
                            for part in list.chunks(NAMES_PER_COMMAND) {
                                let mut args = vec![Bytes::from_static(command)];
                                args.extend(part.iter().cloned());
                                link::encode(&mut out, &args);
                            }
                        }
                        sent[i].extend(add);
                        for name in &drop {
                            sent[i].remove(name);
                        }
                    }
                }
                if !out.is_empty() && out.write_to(&mut stream).await.is_err() {
                    return End::Lost;
                }
            }
            read = stream.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return End::Lost;
                }
                heard = Instant::now();
                loop {
                    let frame = match link::decode(&mut buf, Proto::Resp2) {
                        Ok(Some(frame)) => frame,
                        Ok(None) => break,
                        Err(_) => return End::Lost,
                    };
                    match incoming(frame) {
                        Incoming::Message(delivery) => {
                            let wanted = {
                                let names = shared.names();
                                let i = index(delivery.kind);
                                let name = delivery.pattern.as_ref().unwrap_or(&delivery.channel);
                                names.wanted[i].contains(name)
                            };
                            if wanted {
                                ctx.outbox.put(delivery);
                            }
                        }
                        Incoming::Subscribed(kind, name) => {
                            let mut names = shared.names();
                            if names.wanted[index(kind)].contains(&name) {
                                names.confirmed[index(kind)].insert(name);
                            }
                            drop(names);
                            shared.confirmed_changed();
                        }
                        Incoming::Unsubscribed(kind, name) => {
                            shared.names().confirmed[index(kind)].remove(&name);
                            shared.confirmed_changed();
                            if sent[index(kind)].contains(&name) {
                                // Not asked for: the server moved it away.
                                return End::Moved;
                            }
                        }
                        Incoming::Moved => return End::Moved,
                        Incoming::Other => {}
                    }
                }
            }
            () = &mut fenced => return End::Lost,
            _ = ping.tick() => {
                if heard.elapsed() > silent_for {
                    return End::Lost;
                }
                let mut out = Output::default();
                link::encode(&mut out, &[Bytes::from_static(b"PING")]);
                if out.write_to(&mut stream).await.is_err() {
                    return End::Lost;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::BlobString {
            data: Bytes::copy_from_slice(s.as_bytes()),
            attributes: None,
        }
    }

    fn array(items: &[&str]) -> Frame {
        Frame::Array {
            data: items.iter().map(|s| bulk(s)).collect(),
            attributes: None,
        }
    }

    #[test]
    fn frames_of_a_subscribed_connection_are_read_by_kind() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let message = |kind, pattern: Option<&str>, channel: &str, payload: &str| {
            Incoming::Message(Delivery {
                kind,
                pattern: pattern.map(b),
                channel: b(channel),
                payload: b(payload),
            })
        };
        let cases = [
            (
                array(&["message", "c", "hi"]),
                message(Kind::Channel, None, "c", "hi"),
            ),
            (
                array(&["pmessage", "c*", "c1", "hi"]),
                message(Kind::Pattern, Some("c*"), "c1", "hi"),
            ),
            (
                array(&["smessage", "s", "x"]),
                message(Kind::Shard, None, "s", "x"),
            ),
            (
                array(&["subscribe", "c", "1"]),
                Incoming::Subscribed(Kind::Channel, b("c")),
            ),
            (
                array(&["psubscribe", "c*", "2"]),
                Incoming::Subscribed(Kind::Pattern, b("c*")),
            ),
            (
                array(&["ssubscribe", "s", "1"]),
                Incoming::Subscribed(Kind::Shard, b("s")),
            ),
            (
                array(&["unsubscribe", "c", "0"]),
                Incoming::Unsubscribed(Kind::Channel, b("c")),
            ),
            (
                array(&["sunsubscribe", "s", "0"]),
                Incoming::Unsubscribed(Kind::Shard, b("s")),
            ),
            (array(&["pong", ""]), Incoming::Other),
            // Cut short: not a message.
            (array(&["message", "c"]), Incoming::Other),
            (array(&["pmessage", "c*", "c1"]), Incoming::Other),
            (
                Frame::SimpleError {
                    data: "MOVED 12 127.0.0.1:7001".into(),
                    attributes: None,
                },
                Incoming::Moved,
            ),
            (
                Frame::SimpleError {
                    data: "NOPERM no".into(),
                    attributes: None,
                },
                Incoming::Other,
            ),
        ];
        for (frame, want) in cases {
            assert_eq!(incoming(frame.clone()), want, "{frame:?}");
        }
    }
}
