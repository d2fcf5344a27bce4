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

use super::cluster::Topology;
use super::codec::{decode, encode};
use super::dial::Addr;
use super::dial::{self, Stream, Target};
use super::sentinel::Watch;
use super::BackendError;
use crate::backend::pubsub::{Delivery, Outbox, SubKind};
use crate::error::{LinkError as Error, LinkErrorKind as ErrorKind};
use crate::metrics as m;
use crate::resp::{Output, Proto};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often a line pings its server; one silent for this plus the connection timeout is
/// taken for gone.
pub const PING_EVERY: Duration = Duration::from_secs(2);

/// Most names in one `SUBSCRIBE` a line writes (a client's long list is sent in parts).
const NAMES_PER_COMMAND: usize = 1024;

/// Most hash slots one client's shard channels may span on a Cluster backend: each slot is a
/// connection of its own (a Cluster client would open one per node; holdfast follows slots,
/// which move one by one).
pub const MAX_SLOT_LINES: usize = 64;

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
pub(super) struct FeedCtx {
    /// The `[backends]` key, for logs, metrics and deliveries.
    pub backend: Arc<str>,
    /// How to connect and introduce a line (RESP2).
    pub target: Target,
    /// Where a line connects.
    pub locate: Locate,
    /// Where deliveries go.
    pub outbox: Outbox,
    /// How long a line may stay down before its client is lost.
    pub hold: Duration,
}

/// A client waiting for its names to be confirmed by the server: subscribed, or (for an
/// unsubscribe) released.
struct ConfirmWaiter {
    /// The kind of its names (`SubKind::index`).
    kind: usize,
    /// Waiting for subscriptions (else for their release).
    subscribe: bool,
    /// Its names not confirmed yet.
    pending: HashSet<Bytes>,
    /// Answered once `pending` is empty, or with the server's refusal.
    done: oneshot::Sender<Result<(), BackendError>>,
}

/// A line's sets of names, by kind, and who waits on them.
#[derive(Default)]
struct Names {
    /// What the client wants.
    wanted: [HashSet<Bytes>; 3],
    /// What the server confirmed on the current connection, with no `UNSUBSCRIBE` of it
    /// written since.
    confirmed: [HashSet<Bytes>; 3],
    /// Subscribers waiting for confirmations.
    waiters: Vec<ConfirmWaiter>,
    /// Why the last dial failed, for a subscriber that gives up waiting.
    failed: Option<Error>,
}

impl Names {
    fn is_empty(&self) -> bool {
        self.wanted.iter().all(HashSet::is_empty)
    }

    /// A subscriber waits for `pending`, names of `kind`, to be confirmed subscribed
    /// (`subscribe`) or released.
    fn wait_for(
        &mut self,
        kind: usize,
        subscribe: bool,
        pending: HashSet<Bytes>,
    ) -> oneshot::Receiver<Result<(), BackendError>> {
        let (done, answered) = oneshot::channel();
        self.waiters.push(ConfirmWaiter {
            kind,
            subscribe,
            pending,
            done,
        });
        answered
    }

    /// The server's last answer for `name` says it is subscribed (`subscribe`) or released:
    /// it counts for every client waiting on that (constant work per waiter, so a long list
    /// is not scanned again for each name).
    fn settle(&mut self, kind: usize, name: Bytes, subscribe: bool) {
        let mut i = 0;
        while i < self.waiters.len() {
            let waiter = &mut self.waiters[i];
            if waiter.kind == kind
                && waiter.subscribe == subscribe
                && waiter.pending.remove(&name)
                && waiter.pending.is_empty()
            {
                let waiter = self.waiters.swap_remove(i);
                let _ = waiter.done.send(Ok(()));
                continue;
            }
            i += 1;
        }
        if subscribe {
            self.confirmed[kind].insert(name);
        }
    }

    /// The connection ended: the server holds nothing of it any more, so every release
    /// waited for is done; subscriptions wait for the next connection.
    fn connection_ended(&mut self) {
        for set in &mut self.confirmed {
            set.clear();
        }
        let (released, waiting) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| !w.subscribe);
        self.waiters = waiting;
        for waiter in released {
            let _ = waiter.done.send(Ok(()));
        }
    }

    /// The server refused a subscription (`-NOPERM` of its ACL, say): every waiter hears it.
    fn refuse(&mut self, text: &Bytes) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.done.send(Err(BackendError::reply(text.clone())));
        }
    }
}

/// What a line's task and the feed share.
struct FeedShared {
    names: Mutex<Names>,
    /// Wakes the task: what is wanted changed.
    changed: Notify,
}

impl FeedShared {
    fn names(&self) -> MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One line: its shared sets and its task, stopped (and its connection closed) on drop.
struct LineHandle {
    shared: Arc<FeedShared>,
    task: JoinHandle<()>,
}

impl Drop for LineHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client's subscriptions on one Redis backend.
pub struct RedisFeed {
    ctx: Arc<FeedCtx>,
    lines: Mutex<HashMap<Line, LineHandle>>,
}

impl RedisFeed {
    pub(super) fn new(ctx: FeedCtx) -> RedisFeed {
        RedisFeed {
            ctx: Arc::new(ctx),
            lines: Mutex::new(HashMap::new()),
        }
    }

    fn lines(&self) -> MutexGuard<'_, HashMap<Line, LineHandle>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn line_of(&self, kind: SubKind, name: &[u8]) -> Line {
        match (&self.ctx.locate, kind) {
            (Locate::Cluster(_), SubKind::Shard) => Line::Slot(super::cluster::keyslot(name)),
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
        kind: SubKind,
        names: &[Bytes],
        timeout: Duration,
    ) -> Result<(), BackendError> {
        let mut waits = Vec::new();
        {
            let mut lines = self.lines();
            let mut by_line: HashMap<Line, HashSet<Bytes>> = HashMap::new();
            for name in names {
                by_line
                    .entry(self.line_of(kind, name))
                    .or_default()
                    .insert(name.clone());
            }
            let new_lines = by_line.keys().filter(|l| !lines.contains_key(l)).count();
            let slot_lines = lines.keys().filter(|l| matches!(l, Line::Slot(_))).count();
            if kind == SubKind::Shard && slot_lines + new_lines > MAX_SLOT_LINES {
                return Err(BackendError::Unsupported {
                    what: format!(
                        "a client's shard channels may span at most {MAX_SLOT_LINES} hash slots of a Cluster backend"
                    ),
                });
            }
            for (line, wanted) in by_line {
                let handle = lines.entry(line).or_insert_with(|| {
                    let shared = Arc::new(FeedShared {
                        names: Mutex::new(Names::default()),
                        changed: Notify::new(),
                    });
                    let task = tokio::spawn(run_line(self.ctx.clone(), line, shared.clone()));
                    LineHandle { shared, task }
                });
                let mut names = handle.shared.names();
                let i = kind.index();
                let pending: HashSet<Bytes> = wanted
                    .iter()
                    .filter(|n| !names.confirmed[i].contains(*n))
                    .cloned()
                    .collect();
                names.wanted[i].extend(wanted);
                if pending.is_empty() {
                    continue;
                }
                let answered = names.wait_for(i, true, pending);
                drop(names);
                handle.shared.changed.notify_one();
                waits.push((handle.shared.clone(), answered));
            }
        }
        let confirmed = async {
            for (_, answered) in &mut waits {
                match answered.await {
                    Ok(Ok(())) => {}
                    Ok(Err(refused)) => return Err(refused),
                    // The line is gone (the client is being closed).
                    Err(_) => return Err(self.not_confirmed(timeout, None)),
                }
            }
            Ok(())
        };
        let result = match tokio::time::timeout(timeout, confirmed).await {
            Ok(result) => result,
            Err(_) => {
                let failed = waits
                    .iter()
                    .find_map(|(shared, _)| shared.names().failed.clone());
                Err(self.not_confirmed(timeout, failed))
            }
        };
        if result.is_err() {
            self.unsubscribe(kind, names).await;
        }
        result
    }

    fn not_confirmed(&self, timeout: Duration, failed: Option<Error>) -> BackendError {
        BackendError::Connect {
            source: failed.unwrap_or_else(|| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "the subscription was not confirmed within {timeout:?} (backend {})",
                        self.ctx.backend
                    ),
                )
            }),
        }
    }

    /// Unsubscribes from `names`, returning once the server released those it had (as Redis
    /// answers an `UNSUBSCRIBE`: a `PUBLISH` after it no longer counts this client), or once
    /// a silent server has had as long as a line waits for one; a line left with nothing
    /// wanted is closed then. Messages for them still on their way are dropped by the line.
    pub async fn unsubscribe(&self, kind: SubKind, names: &[Bytes]) {
        let i = kind.index();
        let mut waits = Vec::new();
        let mut touched = Vec::new();
        {
            let lines = self.lines();
            let mut by_line: HashMap<Line, Vec<&Bytes>> = HashMap::new();
            for name in names {
                by_line
                    .entry(self.line_of(kind, name))
                    .or_default()
                    .push(name);
            }
            for (line, list) in by_line {
                let Some(handle) = lines.get(&line) else {
                    continue;
                };
                let mut names = handle.shared.names();
                let mut pending = HashSet::new();
                for name in list {
                    names.wanted[i].remove(name);
                    if names.confirmed[i].contains(name) {
                        pending.insert(name.clone());
                    }
                }
                if !pending.is_empty() {
                    waits.push(names.wait_for(i, false, pending));
                }
                drop(names);
                handle.shared.changed.notify_one();
                touched.push(line);
            }
        }
        let silent_for = PING_EVERY + self.ctx.target.connection_timeout();
        let released = async {
            for answered in waits {
                // A line that ends first has released everything with its connection.
                let _ = answered.await;
            }
        };
        let _ = tokio::time::timeout(silent_for, released).await;
        let mut lines = self.lines();
        for line in touched {
            if lines
                .get(&line)
                .is_some_and(|handle| handle.shared.names().is_empty())
            {
                lines.remove(&line);
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
async fn run_line(ctx: Arc<FeedCtx>, line: Line, shared: Arc<FeedShared>) {
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
                shared.names().connection_ended();
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
    Error::new(ErrorKind::Io, text)
}

/// Dials the line's server and introduces the connection.
async fn connect(ctx: &FeedCtx, line: Line) -> Result<(Stream, Fence), Error> {
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
    let (host, port) = target.addr();
    let (stream, server) = dial::connect(&target).await?;
    if let Some((watch, _)) = &fence {
        if !server.is_primary() {
            watch.requery();
            return Err(io_error(format!("{host}:{port} is no primary")));
        }
    }
    Ok((stream, fence))
}

/// A published message as read.
#[derive(Debug, PartialEq, Eq)]
struct Message {
    kind: SubKind,
    pattern: Option<Bytes>,
    channel: Bytes,
    payload: Bytes,
}

/// What a frame from a subscribed connection is.
#[derive(Debug, PartialEq, Eq)]
enum Incoming {
    /// A published message.
    Message(Message),
    /// The server confirmed a subscription.
    Subscribed(SubKind, Bytes),
    /// The server ended a subscription (ours asked, or its own: a moved slot).
    Unsubscribed(SubKind, Bytes),
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
            (Some(channel), Some(payload)) => Incoming::Message(Message {
                kind,
                pattern,
                channel,
                payload,
            }),
            _ => Incoming::Other,
        };
    let named = |make: fn(SubKind, Bytes) -> Incoming, kind| {
        at(0).map_or(Incoming::Other, |n| make(kind, n))
    };
    match what.as_ref() {
        b"message" => delivery(SubKind::Channel, None, at(0), at(1)),
        b"pmessage" => match at(0) {
            Some(pattern) => delivery(SubKind::Pattern, Some(pattern), at(1), at(2)),
            None => Incoming::Other,
        },
        b"smessage" => delivery(SubKind::Shard, None, at(0), at(1)),
        b"subscribe" => named(Incoming::Subscribed, SubKind::Channel),
        b"psubscribe" => named(Incoming::Subscribed, SubKind::Pattern),
        b"ssubscribe" => named(Incoming::Subscribed, SubKind::Shard),
        b"unsubscribe" => named(Incoming::Unsubscribed, SubKind::Channel),
        b"punsubscribe" => named(Incoming::Unsubscribed, SubKind::Pattern),
        b"sunsubscribe" => named(Incoming::Unsubscribed, SubKind::Shard),
        _ => Incoming::Other,
    }
}

/// Serves one connection of a line until it ends.
async fn serve(ctx: &FeedCtx, shared: &FeedShared, mut stream: Stream, fence: Fence) -> End {
    // What was sent on this connection, by kind: the difference to `wanted` is what to send.
    let mut sent: [HashSet<Bytes>; 3] = Default::default();
    // Subscribe and unsubscribe commands written for a name and not answered yet: a
    // confirmation counts only once they are all answered (the client may unsubscribe and
    // subscribe again faster than the server answers), and an `unsubscribe` nobody asked for
    // is the server's own (a moved slot).
    let mut inflight: HashMap<(usize, Bytes), u32> = HashMap::new();
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
        let mut out = Output::default();
        tokio::select! {
            () = shared.changed.notified() => reconcile(shared, &mut sent, &mut inflight, &mut out),
            read = stream.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return End::Lost;
                }
                heard = Instant::now();
                if let Some(end) = take_frames(ctx, shared, &mut buf, &sent, &mut inflight) {
                    return end;
                }
            }
            () = &mut fenced => return End::Lost,
            _ = ping.tick() => {
                if heard.elapsed() > silent_for {
                    return End::Lost;
                }
                encode(&mut out, &[Bytes::from_static(b"PING")]);
            }
        }
        // A server that stops reading (frozen, its socket full) is not waited on for ever.
        if !out.is_empty() {
            let wrote = tokio::time::timeout(silent_for, out.write_to(&mut stream)).await;
            if !matches!(wrote, Ok(Ok(()))) {
                return End::Lost;
            }
        }
    }
}

/// What is wanted changed: encodes into `out` the `SUBSCRIBE`s and `UNSUBSCRIBE`s that bring
/// the server in line, and counts each name's answers still to come.
fn reconcile(
    shared: &FeedShared,
    sent: &mut [HashSet<Bytes>; 3],
    inflight: &mut HashMap<(usize, Bytes), u32>,
    out: &mut Output,
) {
    let mut names = shared.names();
    for kind in SubKind::ALL {
        let i = kind.index();
        let add: Vec<Bytes> = names.wanted[i].difference(&sent[i]).cloned().collect();
        let drop: Vec<Bytes> = sent[i].difference(&names.wanted[i]).cloned().collect();
        for (command, list) in [(kind.subscribe(), &add), (kind.unsubscribe(), &drop)] {
            for part in list.chunks(NAMES_PER_COMMAND) {
                let mut args = vec![Bytes::from_static(command)];
                args.extend(part.iter().cloned());
                encode(out, &args);
            }
        }
        for name in add.iter().chain(&drop) {
            *inflight.entry((i, name.clone())).or_default() += 1;
        }
        for name in &drop {
            sent[i].remove(name);
            names.confirmed[i].remove(name);
        }
        sent[i].extend(add);
    }
}

/// Takes the frames a read completed: delivers messages still wanted and settles the
/// confirmations they answer. Some when one ends the connection.
fn take_frames(
    ctx: &FeedCtx,
    shared: &FeedShared,
    buf: &mut BytesMut,
    sent: &[HashSet<Bytes>; 3],
    inflight: &mut HashMap<(usize, Bytes), u32>,
) -> Option<End> {
    loop {
        let frame = match decode(buf, Proto::Resp2) {
            Ok(Some(frame)) => frame,
            Ok(None) => return None,
            Err(_) => return Some(End::Lost),
        };
        if let Frame::SimpleError { data, .. } = &frame {
            if !data.starts_with("MOVED ") {
                // A subscription refused (an ACL without the channel): its waiters hear why;
                // the connection is dialled again, so what was sent matches what the server
                // has.
                shared.names().refuse(data.inner());
                return Some(End::Lost);
            }
        }
        match incoming(frame) {
            Incoming::Message(m) => {
                let wanted = {
                    let names = shared.names();
                    let name = m.pattern.as_ref().unwrap_or(&m.channel);
                    names.wanted[m.kind.index()].contains(name)
                };
                if wanted {
                    ctx.outbox.put(Delivery {
                        backend: ctx.backend.clone(),
                        kind: m.kind,
                        pattern: m.pattern,
                        channel: m.channel,
                        payload: m.payload,
                    });
                }
            }
            Incoming::Subscribed(kind, name) | Incoming::Unsubscribed(kind, name)
                if answers(inflight, kind.index(), &name) =>
            {
                // The last answer for this name: it stands as `sent` says.
                let subscribed = sent[kind.index()].contains(&name);
                shared.names().settle(kind.index(), name, subscribed);
            }
            Incoming::Subscribed(..) => {}
            Incoming::Unsubscribed(kind, name) => {
                if inflight.contains_key(&(kind.index(), name.clone())) {
                    continue;
                }
                if sent[kind.index()].contains(&name) {
                    // Not asked for: the server moved it away.
                    return Some(End::Moved);
                }
            }
            Incoming::Moved => return Some(End::Moved),
            Incoming::Other => {}
        }
    }
}

/// Counts one answer for `name`; true when it was the last one awaited.
fn answers(inflight: &mut HashMap<(usize, Bytes), u32>, kind: usize, name: &Bytes) -> bool {
    let key = (kind, name.clone());
    match inflight.get_mut(&key) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            inflight.remove(&key);
            true
        }
        None => false,
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
            Incoming::Message(Message {
                kind,
                pattern: pattern.map(b),
                channel: b(channel),
                payload: b(payload),
            })
        };
        let cases = [
            (
                array(&["message", "c", "hi"]),
                message(SubKind::Channel, None, "c", "hi"),
            ),
            (
                array(&["pmessage", "c*", "c1", "hi"]),
                message(SubKind::Pattern, Some("c*"), "c1", "hi"),
            ),
            (
                array(&["smessage", "s", "x"]),
                message(SubKind::Shard, None, "s", "x"),
            ),
            (
                array(&["subscribe", "c", "1"]),
                Incoming::Subscribed(SubKind::Channel, b("c")),
            ),
            (
                array(&["psubscribe", "c*", "2"]),
                Incoming::Subscribed(SubKind::Pattern, b("c*")),
            ),
            (
                array(&["ssubscribe", "s", "1"]),
                Incoming::Subscribed(SubKind::Shard, b("s")),
            ),
            (
                array(&["unsubscribe", "c", "0"]),
                Incoming::Unsubscribed(SubKind::Channel, b("c")),
            ),
            (
                array(&["sunsubscribe", "s", "0"]),
                Incoming::Unsubscribed(SubKind::Shard, b("s")),
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
