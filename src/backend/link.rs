//! holdfast's own connection to a standalone Redis, for the pooled (shared) connections.
//!
//! Many client connections send on one link. Each command is encoded straight into the
//! link's output buffer and its reply slot queued under the same lock, so the order of
//! replies is the order of the bytes. One task writes whatever has accumulated in one write
//! (it lets the other ready clients add theirs first) and reads replies in batches, handing
//! each to the oldest slot. That is where the cost of a proxy goes without pipelining: fred
//! writes and flushes each command on its own, a syscall per command.
//!
//! Replies are handed over as the bytes Redis wrote ([`Reply::Raw`]): the link only finds
//! where each ends. Error replies and pushes are decoded: the first are classified, the
//! second answer no command.
//!
//! Errors are fred's typed errors (`ErrorKind`), so `classify` reads them as it reads fred's.
//! TLS, Sentinel, Cluster and dedicated connections stay on fred.

use super::{Proto, Reply};
use crate::resp::{Output, Sink};
use bytes::{Bytes, BytesMut};
use fred::error::{Error, ErrorKind};
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// A reply, or why none will come.
type Answer = Result<Reply, SendError>;

/// A write's reply, held until the `WAIT` after it answered, with that answer: the replicas
/// that have it (None for an error reply, which applied nothing and is not held), or why the
/// count failed. The outer error: the write's own reply never came (and whether it was
/// written).
pub type Acked = Result<(Reply, Result<Option<i64>, Error>), SendError>;

/// Where a link connects and how it introduces itself.
#[derive(Clone, Debug)]
pub struct Target {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    database: Option<u8>,
    proto: Proto,
    connection_timeout: Duration,
    /// The reply timeout its senders give: how often the link looks for expired slots.
    response_timeout: Duration,
}

impl Target {
    /// The target of a fred configuration, when a link can serve it: one server, no TLS.
    pub fn of(
        config: &fred::types::config::Config,
        proto: Proto,
        (connection_timeout, response_timeout): (Duration, Duration),
    ) -> Option<Target> {
        if config.tls.is_some() {
            return None;
        }
        let (host, port) = match &config.server {
            fred::types::config::ServerConfig::Centralized { server } => {
                (server.host.to_string(), server.port)
            }
            // The primary the sentinels name, or a Cluster's node, given at each dial (`at`).
            fred::types::config::ServerConfig::Sentinel { .. }
            | fred::types::config::ServerConfig::Clustered { .. } => (String::new(), 0),
        };
        Some(Target {
            host,
            port,
            username: config.username.clone(),
            password: config.password.clone(),
            database: config.database,
            proto,
            connection_timeout,
            response_timeout,
        })
    }
}

impl Target {
    /// The same target at another address (the primary Sentinel named for this dial, a
    /// Cluster's node).
    pub fn at(&self, (host, port): &(String, u16)) -> Target {
        Target {
            host: host.clone(),
            port: *port,
            ..self.clone()
        }
    }

    /// The same target in another protocol.
    pub fn with_proto(&self, proto: Proto) -> Target {
        Target {
            proto,
            ..self.clone()
        }
    }

    /// The address it connects to.
    pub fn addr(&self) -> (String, u16) {
        (self.host.clone(), self.port)
    }

    /// Longest a connect and its handshake may take.
    pub fn connection_timeout(&self) -> Duration {
        self.connection_timeout
    }
}

/// What the link's task and its senders share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the task when a command is queued or the link is closed.
    wake: Notify,
    /// True while queued commands wait for the task to write them: the pool sends other
    /// clients' commands here then, so they go in the same write (the pool's, kept across
    /// its dials).
    unwritten: Arc<AtomicBool>,
    /// `WAIT`s written and not yet answered: Redis runs nothing more of this connection
    /// until they are, so the pool sends elsewhere meanwhile (the pool's, as `unwritten`).
    acking: Arc<AtomicUsize>,
    /// Tells the link's task that the link was closed, even while its writer is stuck in a
    /// write to a peer that stopped reading.
    closing: Notify,
}

/// What a link tells its pool, kept across the pool slot's dials.
#[derive(Clone, Debug, Default)]
pub struct Signals {
    /// True while commands wait to be written.
    pub unwritten: Arc<AtomicBool>,
    /// `WAIT`s written and not yet answered.
    pub acking: Arc<AtomicUsize>,
}

struct State {
    /// Encoded commands not yet written.
    out: Output,
    /// How many commands `out` holds.
    queued: usize,
    /// One slot per written or queued command, oldest first.
    waiting: VecDeque<Slot>,
    /// How often the link looks for expired slots while none is waiting: the shortest reply
    /// timeout a sender gave (the backend's), so no deadline is looked at late.
    period: Duration,
    /// No command is taken any more; every slot has been answered with an error.
    closed: bool,
    /// The `WAIT` the writes queued in `out` want after them (the most replicas, the
    /// longest wait asked): one for the whole write, not one per write.
    ack: Option<(u32, Duration)>,
    /// The reply timeout, added to a `WAIT`'s own wait for its deadline.
    response_timeout: Duration,
}

/// Where a command's reply goes, and by when it must come.
struct Slot {
    waiter: Waiter,
    deadline: Option<Instant>,
    /// The link's own `WAIT` (counted in `acking` until its reply comes).
    wait: bool,
    /// When it was queued.
    since: Instant,
}

/// Who waits for a reply.
enum Waiter {
    /// A command's sender.
    Reply(oneshot::Sender<Answer>),
    /// A write acknowledged only after the `WAIT` that follows it.
    Acked(oneshot::Sender<Acked>),
    /// The `WAIT` the link wrote after a batch, holding the replies of its writes.
    Wait(Vec<(oneshot::Sender<Acked>, Reply)>),
    /// Answered already (with a timeout): a reply that comes is dropped.
    Gone,
}

impl Waiter {
    fn is_gone(&self) -> bool {
        matches!(self, Waiter::Gone)
    }

    /// Answers with an error: `why` is the error of the command, or of the `WAIT` for the
    /// writes it holds (their replies came: they were applied). `written`: the command may
    /// have been written (and applied); else it never left holdfast.
    fn fail(self, written: bool, why: impl Fn() -> Error) {
        let failed = || {
            if written {
                SendError::Sent(why())
            } else {
                SendError::NotSent(why())
            }
        };
        match self {
            Waiter::Reply(tx) => {
                let _ = tx.send(Err(failed()));
            }
            Waiter::Acked(tx) => {
                let _ = tx.send(Err(failed()));
            }
            Waiter::Wait(held) => {
                for (tx, reply) in held {
                    let _ = tx.send(Ok((reply, Err(why()))));
                }
            }
            Waiter::Gone => {}
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than losing the link, so a poisoned lock is used as is.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fails every command in flight and refuses new ones. The commands still queued in
    /// `out` (the last `queued` slots) were never handed to the writer: they fail as not sent,
    /// retried for every command; the others may have been written.
    fn close(&self, why: &str) {
        let (waiting, unsent) = {
            let mut state = self.state();
            state.closed = true;
            state.out.clear();
            let unsent = std::mem::take(&mut state.queued);
            (std::mem::take(&mut state.waiting), unsent)
        };
        self.unwritten.store(false, Ordering::Relaxed);
        self.acking.store(0, Ordering::Relaxed);
        let written = waiting.len().saturating_sub(unsent);
        for (at, slot) in waiting.into_iter().enumerate() {
            slot.waiter
                .fail(at < written, || Error::new(ErrorKind::IO, why.to_string()));
        }
        self.wake.notify_one();
        self.closing.notify_one();
    }

    /// Answers every slot whose deadline has passed with a timeout (each keeps its place, so
    /// the replies after it still meet their own commands), and says when to look again. A
    /// command behind an unanswered `WAIT` cannot be answered before it (Redis runs nothing
    /// more of the connection meanwhile): its deadline is the later of its own and the
    /// `WAIT`'s.
    fn expire(&self, now: Instant) -> Instant {
        let mut expired = Vec::new();
        let next = {
            let mut state = self.state();
            let mut next = now + state.period;
            // The latest deadline of the `WAIT`s met so far, unanswered.
            let mut behind: Option<Instant> = None;
            for slot in state.waiting.iter_mut() {
                let due = match (slot.deadline, behind) {
                    (Some(at), Some(wait)) => Some(at.max(wait)),
                    (due, _) => due,
                };
                match due {
                    Some(at) if at <= now && !slot.waiter.is_gone() => {
                        expired.push(std::mem::replace(&mut slot.waiter, Waiter::Gone));
                    }
                    Some(at) if !slot.waiter.is_gone() => next = next.min(at),
                    _ => {}
                }
                if slot.wait && !slot.waiter.is_gone() {
                    behind = behind.max(slot.deadline);
                }
            }
            next
        };
        // A slot may expire before the writer took it (a peer that stopped reading): counted
        // as written all the same, the safe side.
        for waiter in expired {
            waiter.fail(true, || {
                Error::new(ErrorKind::Timeout, "the backend did not reply in time")
            });
        }
        next
    }
}

/// A connected link. Dropping it does not close it; [`Link::close`] does.
pub struct Link {
    shared: Arc<Shared>,
}

/// Why a command got no reply.
#[derive(Debug)]
pub enum SendError {
    /// The link was closed before the command was queued: nothing was written.
    NotSent(Error),
    /// The command was queued and may have been written (and applied).
    Sent(Error),
}

impl Link {
    /// Connects, authenticates, selects the database and switches protocol, then starts the
    /// link's task. Returns the link, the task (it ends when the connection does) and what
    /// the server said of itself. `signals` tell the pool when commands wait to be
    /// written and when a `WAIT` holds the connection.
    ///
    /// # Errors
    /// fred's error kinds: `IO` for a refused or dropped connection, `Timeout`, `Auth` for a
    /// refused password, `Protocol` for any other handshake error reply.
    pub async fn connect(
        target: &Target,
        signals: Signals,
    ) -> Result<(Link, tokio::task::JoinHandle<()>, Server), Error> {
        let dial = async {
            let mut stream = TcpStream::connect((target.host.as_str(), target.port)).await?;
            stream.set_nodelay(true)?;
            let server = handshake(&mut stream, target).await?;
            Ok::<_, Error>((stream, server))
        };
        let (stream, server) = tokio::time::timeout(target.connection_timeout, dial)
            .await
            .map_err(|_| Error::new(ErrorKind::Timeout, "connecting to the backend timed out"))??;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                out: Output::default(),
                queued: 0,
                waiting: VecDeque::new(),
                period: target.response_timeout,
                closed: false,
                ack: None,
                response_timeout: target.response_timeout,
            }),
            wake: Notify::new(),
            closing: Notify::new(),
            unwritten: signals.unwritten,
            acking: signals.acking,
        });
        let task = tokio::spawn(run(stream, shared.clone(), target.proto));
        Ok((Link { shared }, task, server))
    }

    /// Sends one command and waits for its reply, at most `timeout` when one is given.
    ///
    /// # Errors
    /// [`SendError`]: whether the command may have been written.
    pub async fn send(
        &self,
        args: &[Bytes],
        raw: Option<&Bytes>,
        timeout: Option<Duration>,
    ) -> Result<Reply, SendError> {
        let (slot, reply) = oneshot::channel();
        if !self.queue(args, raw, Waiter::Reply(slot), timeout, None) {
            return Err(SendError::NotSent(Error::new(
                ErrorKind::IO,
                "the connection closed before the request was sent",
            )));
        }
        // The link's task answers a slot whose deadline passed: one timer for the link, not
        // one per request (6% of a request's instructions).
        settle(reply.await)
    }

    /// Sends a write whose reply is handed over only once `wanted` replicas may have it: the
    /// link follows the write it goes in with one `WAIT wanted timeout` for every such write
    /// in it (`WAIT` counts every write sent before it on its connection), and answers each
    /// with its reply and that count when the `WAIT` returns.
    pub async fn send_acked(
        &self,
        args: &[Bytes],
        raw: Option<&Bytes>,
        timeout: Duration,
        ack: (u32, Duration),
    ) -> Result<(Reply, Result<Option<i64>, Error>), SendError> {
        let (slot, reply) = oneshot::channel();
        if !self.queue(args, raw, Waiter::Acked(slot), Some(timeout), Some(ack)) {
            // Nothing queued, so nothing written: as for `send`, not sent.
            return Err(SendError::NotSent(Error::new(
                ErrorKind::IO,
                "the connection closed before the request was sent",
            )));
        }
        reply.await.unwrap_or_else(|_| {
            Err(SendError::Sent(Error::new(
                ErrorKind::IO,
                "the connection closed with the request in flight",
            )))
        })
    }

    /// Queues one command and who waits for its reply, wanting the `WAIT` `ack` after it if
    /// given, and wakes the task; false (nothing queued) when the link is closed.
    fn queue(
        &self,
        args: &[Bytes],
        raw: Option<&Bytes>,
        waiter: Waiter,
        timeout: Option<Duration>,
        ack: Option<(u32, Duration)>,
    ) -> bool {
        {
            let mut state = self.shared.state();
            if state.closed {
                return false;
            }
            put_command(&mut state.out, args, raw);
            state.queued += 1;
            let now = Instant::now();
            // A `WAIT` (a client's, or one holdfast sends after a write) holds the connection
            // until it returns: counted in `acking`, so the pool sends elsewhere meanwhile.
            let wait = args
                .first()
                .is_some_and(|name| name.eq_ignore_ascii_case(b"WAIT"));
            if wait {
                self.shared.acking.fetch_add(1, Ordering::Relaxed);
            }
            state.waiting.push_back(Slot {
                waiter,
                deadline: timeout.map(|limit| now + limit),
                wait,
                since: now,
            });
            if let Some(limit) = timeout {
                state.period = state.period.min(limit);
            }
            if let Some((wanted, wait)) = ack {
                state.ack = Some(match state.ack {
                    Some((n, t)) => (n.max(wanted), t.max(wait)),
                    None => (wanted, wait),
                });
            }
            self.shared.unwritten.store(true, Ordering::Relaxed);
        }
        self.shared.wake.notify_one();
        true
    }

    /// Sends commands back to back (queued under one lock, so nothing comes between them) and
    /// waits for their replies in order, each within `timeout` of the sending.
    pub async fn send_all<'a>(
        &self,
        commands: impl Iterator<Item = (&'a [Bytes], Option<&'a Bytes>)>,
        timeout: Duration,
    ) -> Vec<Result<Reply, SendError>> {
        let receivers: Vec<_> = {
            let mut state = self.shared.state();
            if state.closed {
                drop(state);
                return commands_not_sent(commands);
            }
            let now = Instant::now();
            let deadline = now + timeout;
            state.period = state.period.min(timeout);
            let receivers = commands
                .map(|(args, raw)| {
                    put_command(&mut state.out, args, raw);
                    state.queued += 1;
                    let (slot, reply) = oneshot::channel();
                    state.waiting.push_back(Slot {
                        waiter: Waiter::Reply(slot),
                        deadline: Some(deadline),
                        wait: false,
                        since: now,
                    });
                    reply
                })
                .collect();
            self.shared.unwritten.store(true, Ordering::Relaxed);
            receivers
        };
        self.shared.wake.notify_one();
        let mut replies = Vec::with_capacity(receivers.len());
        for reply in receivers {
            replies.push(settle(reply.await));
        }
        replies
    }

    /// Closes the link: commands in flight fail as sent, new ones as not sent.
    pub fn close(&self) {
        self.shared.close("the connection was closed by holdfast");
    }

    /// Whether the link was closed (by holdfast, or because its connection ended).
    pub fn is_closed(&self) -> bool {
        self.shared.state().closed
    }

    /// When the oldest command still waiting for its reply was queued (None: nothing waits,
    /// or only a `WAIT`, which waits for replicas by design).
    pub fn waiting_since(&self) -> Option<Instant> {
        let state = self.shared.state();
        state
            .waiting
            .front()
            .filter(|slot| !slot.wait)
            .map(|slot| slot.since)
    }
}

/// What a reply slot yielded: a reply, or the error it was answered with (a timeout among
/// them), or nothing because the link's task is gone.
fn settle(reply: Result<Answer, oneshot::error::RecvError>) -> Result<Reply, SendError> {
    match reply {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(SendError::Sent(Error::new(
            ErrorKind::IO,
            "the connection closed with the request in flight",
        ))),
    }
}

/// Every command refused as not sent: the link was closed before they were queued.
fn commands_not_sent<'a>(
    commands: impl Iterator<Item = (&'a [Bytes], Option<&'a Bytes>)>,
) -> Vec<Result<Reply, SendError>> {
    commands
        .map(|_| {
            Err(SendError::NotSent(Error::new(
                ErrorKind::IO,
                "the connection closed before the request was sent",
            )))
        })
        .collect()
}

/// Appends a command: as the client encoded it when that is known, else encoded here.
fn put_command(out: &mut Output, args: &[Bytes], raw: Option<&Bytes>) {
    match raw {
        Some(raw) => out.put_bytes(raw),
        None => encode(out, args),
    }
}

/// Appends `args` as a RESP multibulk; large arguments by reference.
pub(super) fn encode(out: &mut Output, args: &[Bytes]) {
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b"*");
    out.extend_from_slice(number.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.extend_from_slice(b"$");
        out.extend_from_slice(number.format(arg.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.put_bytes(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Takes one complete reply off the front of `buf`: as the bytes Redis wrote, or decoded when
/// holdfast must look inside (an error reply, to classify it; a push, dropped: `Some(None)`;
/// an attribute or a streamed string, which the scan does not follow). None while the reply
/// is incomplete.
fn next_reply(buf: &mut BytesMut, proto: Proto) -> Result<Option<Option<Reply>>, Error> {
    if !matches!(buf.first(), Some(b'-' | b'!' | b'>')) {
        match scan(buf) {
            Ok(Some(len)) => {
                let bytes = buf.split_to(len).freeze();
                return Ok(Some(Some(Reply::Raw { bytes, proto })));
            }
            Ok(None) => return Ok(None),
            Err(Unscannable) => {}
        }
    }
    Ok(decode(buf, proto)?.map(|frame| match frame {
        Frame::Push { .. } => None,
        frame => Some(Reply::from(frame)),
    }))
}

/// A reply the scan does not follow; the decoder takes it (and refuses it if malformed).
#[derive(Debug, PartialEq)]
struct Unscannable;

/// The length of the complete reply at the front of `buf`, found without decoding it: blob
/// payloads are skipped by their length. None while incomplete. Not redis-protocol's
/// `decode_range`: that builds a frame of ranges, a vector per array and a hash map per RESP3
/// map, where only the length is wanted; a proptest holds this scan to its decoder.
fn scan(buf: &[u8]) -> Result<Option<usize>, Unscannable> {
    let mut at = 0;
    // Replies still to be passed over: the one asked for, then the items of aggregates.
    let mut pending: usize = 1;
    while pending > 0 {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some(rest) = buf.get(at + 1..) else {
            return Ok(None);
        };
        let Some(cr) = memchr::memchr(b'\r', rest) else {
            return Ok(None);
        };
        let line = &rest[..cr];
        match rest.get(cr + 1) {
            None => return Ok(None),
            Some(b'\n') => {}
            Some(_) => return Err(Unscannable),
        }
        at += 1 + cr + 2;
        pending -= 1;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                if let Some(len) = length(line)? {
                    let end = at.checked_add(len).ok_or(Unscannable)?;
                    match buf.get(end..end + 2) {
                        None => return Ok(None),
                        Some(b"\r\n") => at = end + 2,
                        Some(_) => return Err(Unscannable),
                    }
                }
            }
            b'*' | b'~' | b'>' => {
                if let Some(n) = length(line)? {
                    pending = pending.checked_add(n).ok_or(Unscannable)?;
                }
            }
            b'%' => {
                if let Some(n) = length(line)? {
                    let items = n.checked_mul(2).ok_or(Unscannable)?;
                    pending = pending.checked_add(items).ok_or(Unscannable)?;
                }
            }
            _ => return Err(Unscannable),
        }
    }
    Ok(Some(at))
}

/// A blob's length or an aggregate's count; None for RESP2's `-1` (a nil).
fn length(line: &[u8]) -> Result<Option<usize>, Unscannable> {
    if line == b"-1" {
        return Ok(None);
    }
    // 19 digits cannot overflow a usize; `?` (a streamed length) is not a number.
    if line.is_empty() || line.len() > 19 || !line.iter().all(u8::is_ascii_digit) {
        return Err(Unscannable);
    }
    Ok(Some(
        line.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')),
    ))
}

/// A raw reply decoded, for the few that look inside one.
pub fn decode_raw(bytes: Bytes, proto: Proto) -> Frame {
    let mut buf = BytesMut::from(bytes);
    match decode(&mut buf, proto) {
        // Maps only exist in RESP3.
        Ok(Some(frame)) if proto == Proto::Resp3 => restore_map_order(frame),
        Ok(Some(frame)) => frame,
        // The scan found a complete reply the decoder refuses: never seen, but the client
        // gets an error, not a panic.
        Ok(None) | Err(_) => Frame::SimpleError {
            data: "ERR holdfast: the backend's reply could not be decoded".into(),
            attributes: None,
        },
    }
}

/// redis-protocol 6 builds a decoded map by popping pairs off the end, so its entries come out
/// last first; this puts them back in the order Redis sent (HGETALL, CONFIG GET, XINFO).
pub fn restore_map_order(frame: Frame) -> Frame {
    match frame {
        Frame::Map { data, attributes } => Frame::Map {
            data: data
                .into_iter()
                .rev()
                .map(|(k, v)| (restore_map_order(k), restore_map_order(v)))
                .collect(),
            attributes,
        },
        Frame::Array { data, attributes } => Frame::Array {
            data: data.into_iter().map(restore_map_order).collect(),
            attributes,
        },
        Frame::Push { data, attributes } => Frame::Push {
            data: data.into_iter().map(restore_map_order).collect(),
            attributes,
        },
        other => other,
    }
}

/// Takes one complete reply off the front of `buf`, in the connection's protocol, as a RESP3
/// frame (RESP2 replies converted as fred converts them).
pub(super) fn decode(buf: &mut BytesMut, proto: Proto) -> Result<Option<Frame>, Error> {
    let protocol = |e: redis_protocol::error::RedisProtocolError| {
        Error::new(ErrorKind::Protocol, format!("undecodable reply: {e}"))
    };
    match proto {
        Proto::Resp2 => Ok(redis_protocol::resp2::decode::decode_bytes_mut(buf)
            .map_err(protocol)?
            .map(|(frame, _, _)| upgrade(frame))),
        Proto::Resp3 => Ok(
            redis_protocol::resp3::decode::complete::decode_bytes_mut(buf)
                .map_err(protocol)?
                .map(|(frame, _, _)| frame),
        ),
    }
}

/// Writes one command on a connection of its own (a sentinel's, a `CLUSTER SLOTS` query's).
pub(super) async fn write_command(stream: &mut TcpStream, args: &[Bytes]) -> Result<(), Error> {
    let mut out = Output::default();
    encode(&mut out, args);
    out.write_to(stream).await?;
    Ok(())
}

/// Reads one RESP2 reply (or published message) from a connection of its own.
pub(super) async fn read_frame(stream: &mut TcpStream, buf: &mut BytesMut) -> Result<Frame, Error> {
    loop {
        if let Some(frame) = decode(buf, Proto::Resp2)? {
            return Ok(frame);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(Error::new(
                ErrorKind::IO,
                "the server closed the connection",
            ));
        }
    }
}

/// A RESP2 reply as the RESP3 frame the rest of holdfast handles.
fn upgrade(frame: Frame2) -> Frame {
    match frame {
        Frame2::SimpleString(data) => Frame::SimpleString {
            data,
            attributes: None,
        },
        Frame2::Error(data) => Frame::SimpleError {
            data,
            attributes: None,
        },
        Frame2::Integer(data) => Frame::Number {
            data,
            attributes: None,
        },
        Frame2::BulkString(data) => Frame::BlobString {
            data,
            attributes: None,
        },
        Frame2::Array(items) => Frame::Array {
            data: items.into_iter().map(upgrade).collect(),
            attributes: None,
        },
        Frame2::Null => Frame::Null,
    }
}

/// What a server says of itself in the handshake's `INFO`.
#[derive(Debug, Default)]
pub struct Server {
    /// Its version (major, minor).
    pub version: Option<(u32, u32)>,
    /// The whole `INFO` reply (its default sections: the version, and the memory section
    /// exact mode reads its eviction policy from).
    pub info: String,
}

impl Server {
    /// Whether its `INFO` says it is a primary (`role:master` in its replication section).
    pub fn is_primary(&self) -> bool {
        is_primary(&self.info)
    }
}

/// Whether an `INFO` reply's replication section says `role:master`.
pub fn is_primary(info: &str) -> bool {
    info.lines().any(|line| line.trim_end() == "role:master")
}

/// Introduces the connection: AUTH, HELLO 3 for RESP3, SELECT, then INFO for the version and
/// the eviction policy, all in one write.
pub(super) async fn handshake(stream: &mut TcpStream, target: &Target) -> Result<Server, Error> {
    let mut out = Output::default();
    let mut expected = Vec::new();
    if let Some(password) = &target.password {
        let mut args = vec![Bytes::from_static(b"AUTH")];
        args.extend(target.username.iter().map(|u| Bytes::from(u.clone())));
        args.push(Bytes::from(password.clone()));
        encode(&mut out, &args);
        expected.push(ErrorKind::Auth);
    }
    if target.proto == Proto::Resp3 {
        encode(
            &mut out,
            &[Bytes::from_static(b"HELLO"), Bytes::from_static(b"3")],
        );
        expected.push(ErrorKind::Protocol);
    }
    if let Some(db) = target.database.filter(|db| *db != 0) {
        encode(
            &mut out,
            &[Bytes::from_static(b"SELECT"), Bytes::from(db.to_string())],
        );
        expected.push(ErrorKind::Protocol);
    }
    // The default sections: `server` and `memory` in one reply, on every Redis version.
    encode(&mut out, &[Bytes::from_static(b"INFO")]);
    expected.push(ErrorKind::Protocol);
    out.write_to(stream).await?;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut server = Server::default();
    for (i, kind) in expected.iter().enumerate() {
        let frame = loop {
            // The reply to HELLO 3 is RESP3; the ones before it are RESP2, which the RESP3
            // decoder reads too except for nulls, which none of these replies are.
            if let Some(frame) = decode(&mut buf, Proto::Resp3)? {
                break frame;
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(Error::new(
                    ErrorKind::IO,
                    "the backend closed the connection during the handshake",
                ));
            }
        };
        match &frame {
            Frame::SimpleError { data, .. } => {
                return Err(Error::new(handshake_error(kind, data), data.to_string()));
            }
            Frame::BlobString { data, .. } | Frame::VerbatimString { data, .. }
                if i + 1 == expected.len() =>
            {
                server.version = redis_version(data);
                server.info = String::from_utf8_lossy(data).into_owned();
            }
            _ => {}
        }
    }
    Ok(server)
}

/// The kind of an error reply to the handshake's command expecting `kind`. Only a refused
/// password (`WRONGPASS`, `NOAUTH`, `NOPERM`) is an authentication failure, which waiting
/// does not heal; anything else, such as `-ERR max number of clients reached` (which Redis
/// writes at accept, before it reads AUTH), is a server not taking this connection now.
fn handshake_error(kind: &ErrorKind, reply: &str) -> ErrorKind {
    let prefix = reply.split(' ').next().unwrap_or_default();
    match (kind, prefix) {
        (ErrorKind::Auth, "WRONGPASS" | "NOAUTH" | "NOPERM") => ErrorKind::Auth,
        (ErrorKind::Auth, _) => ErrorKind::Protocol,
        (other, _) => other.clone(),
    }
}

/// `redis_version:7.0.15` in an INFO reply, as (7, 0).
fn redis_version(info: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(info).ok()?;
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?;
    let mut parts = value.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The link's task: writes what senders queued and hands replies to their slots, until the
/// connection fails or the link is closed.
async fn run(mut stream: TcpStream, shared: Arc<Shared>, proto: Proto) {
    let (mut reader, mut writer) = stream.split();
    let write = async {
        let mut batch = Output::default();
        // Commands in the last write.
        let mut last = 0;
        loop {
            shared.wake.notified().await;
            // Under load, let the other ready clients queue their commands too: one write for
            // all. A lone client's command (the last write carried one, and nothing else is
            // in flight) goes at once: the yield would cost it a pass through the event loop.
            let lone = last == 1 && shared.state().waiting.len() == 1;
            if !lone {
                tokio::task::yield_now().await;
            }
            {
                let mut state = shared.state();
                if state.closed {
                    return "closed".to_string();
                }
                if let Some((wanted, wait)) = state.ack.take() {
                    // One WAIT after every write of this batch that asked for replicas.
                    let args = [
                        Bytes::from_static(b"WAIT"),
                        Bytes::from(wanted.to_string()),
                        Bytes::from(wait.as_millis().to_string()),
                    ];
                    encode(&mut state.out, &args);
                    state.queued += 1;
                    let now = Instant::now();
                    let deadline = now + wait + state.response_timeout;
                    state.waiting.push_back(Slot {
                        waiter: Waiter::Wait(Vec::new()),
                        deadline: Some(deadline),
                        wait: true,
                        since: now,
                    });
                    shared.acking.fetch_add(1, Ordering::Relaxed);
                }
                std::mem::swap(&mut state.out, &mut batch);
                last = std::mem::take(&mut state.queued);
                shared.unwritten.store(false, Ordering::Relaxed);
            }
            if batch.is_empty() {
                continue;
            }
            if let Err(e) = batch.write_to(&mut writer).await {
                return format!("writing to the backend failed: {e}");
            }
            batch.clear();
        }
    };
    let read = async {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        // Both kept between reads, so a batch of replies allocates nothing.
        let mut replies = Vec::new();
        let mut slots: Vec<Slot> = Vec::new();
        // Writes whose replies came, waiting for their WAIT's.
        let mut held: Vec<(oneshot::Sender<Acked>, Reply)> = Vec::new();
        // Fires by the earliest deadline of a slot still waiting, or a period later.
        let period = shared.state().period;
        let timer = tokio::time::sleep(period);
        tokio::pin!(timer);
        loop {
            tokio::select! {
                biased;
                read = reader.read_buf(&mut buf) => match read {
                    Ok(0) => return "the backend closed the connection".to_string(),
                    Ok(_) => {}
                    Err(e) => return format!("reading from the backend failed: {e}"),
                },
                // Looked at below, with the replies that keep it from being polled.
                () = &mut timer => {}
            }
            loop {
                match next_reply(&mut buf, proto) {
                    Ok(Some(Some(reply))) => replies.push(reply),
                    // A push (a RESP3 out-of-band message) answers no command.
                    Ok(Some(None)) => {}
                    Ok(None) => break,
                    Err(e) => return e.to_string(),
                }
            }
            {
                let mut state = shared.state();
                let n = replies.len().min(state.waiting.len());
                slots.extend(state.waiting.drain(..n));
            }
            if slots.len() < replies.len() {
                return "the backend sent a reply nobody asked for".to_string();
            }
            for (slot, reply) in slots.drain(..).zip(replies.drain(..)) {
                if slot.wait {
                    shared.acking.fetch_sub(1, Ordering::Relaxed);
                }
                hand_over(slot.waiter, reply, &mut held);
            }
            if !held.is_empty() {
                // Their WAIT is still on its way: it holds them from now on.
                let mut state = shared.state();
                match state
                    .waiting
                    .iter_mut()
                    .find_map(|slot| match &mut slot.waiter {
                        Waiter::Wait(waiting) => Some(waiting),
                        _ => None,
                    }) {
                    Some(waiting) => waiting.append(&mut held),
                    None => {
                        drop(state);
                        for (tx, reply) in held.drain(..) {
                            let no_wait =
                                Error::new(ErrorKind::Unknown, "no WAIT followed the write");
                            let _ = tx.send(Ok((reply, Err(no_wait))));
                        }
                    }
                }
            }
            // Expired slots: found by the timer's branch, or here while replies keep coming
            // and keep that branch from being polled.
            if timer.is_elapsed() {
                let next = shared.expire(Instant::now());
                timer.as_mut().reset(next);
            }
            // Room for the rest: at least as much again as a partial reply already holds, so a
            // large reply (an MGET of big values) is moved a few times, not once per read.
            if buf.capacity() - buf.len() < 4096.max(buf.len()) {
                buf.reserve((64 * 1024).max(buf.len()));
            }
        }
    };
    // Closed from outside (a reply that did not come in time, a fenced primary), the task
    // stops at once, a write under way included: every command on the link has been
    // answered as failed, so none of it may reach the server later, after what the clients
    // sent since. Reset, not closed, so the kernel drops what it still holds unsent too.
    let closed = async {
        shared.closing.notified().await;
        None
    };
    let why = tokio::select! {
        why = write => Some(why),
        why = read => Some(why),
        why = closed => why,
    };
    match why {
        Some(why) => shared.close(&why),
        None => {
            let _ = stream.set_zero_linger();
        }
    }
}

/// Gives `reply` to whoever waits for it. A write waiting for replicas is held (in `held`,
/// until the `WAIT` after it answers) unless its reply is an error, which applied nothing; a
/// `WAIT`'s answer releases the writes it holds and those held before it.
fn hand_over(waiter: Waiter, reply: Reply, held: &mut Vec<(oneshot::Sender<Acked>, Reply)>) {
    match waiter {
        Waiter::Reply(tx) => {
            let _ = tx.send(Ok(reply));
        }
        Waiter::Acked(tx) if reply.is_error() => {
            let _ = tx.send(Ok((reply, Ok(None))));
        }
        Waiter::Acked(tx) => held.push((tx, reply)),
        Waiter::Wait(mut waiting) => {
            waiting.append(held);
            let count = match reply.into_frame() {
                Frame::Number { data, .. } => Ok(Some(data)),
                other => Err(Error::new(
                    ErrorKind::Unknown,
                    format!("WAIT answered {other:?}"),
                )),
            };
            for (tx, reply) in waiting {
                let _ = tx.send(Ok((reply, count.clone())));
            }
        }
        // Timed out already: whatever a WAIT held was answered then.
        Waiter::Gone => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::BY_REFERENCE;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;
    use tokio::io::AsyncWrite;

    /// A write waiting for replicas is answered when the `WAIT` after it is, with its count;
    /// an error reply (nothing applied) at once; a `WAIT` that fails or times out answers
    /// the writes it holds with that failure (they were applied: in doubt, not unsent).
    #[test]
    fn a_write_waiting_for_replicas_is_answered_by_the_wait_after_it() {
        let raw = |bytes: &'static [u8]| Reply::Raw {
            bytes: Bytes::from_static(bytes),
            proto: Proto::Resp2,
        };
        let error = || {
            Reply::from(Frame::SimpleError {
                data: "WRONGTYPE not a string".into(),
                attributes: None,
            })
        };
        let mut held = Vec::new();
        let (tx, mut written) = oneshot::channel();
        hand_over(Waiter::Acked(tx), raw(b"+OK\r\n"), &mut held);
        assert!(written.try_recv().is_err(), "held until its WAIT answers");
        let (tx, mut refused) = oneshot::channel();
        hand_over(Waiter::Acked(tx), error(), &mut held);
        assert!(matches!(refused.try_recv(), Ok(Ok((_, Ok(None))))));
        hand_over(Waiter::Wait(Vec::new()), raw(b":1\r\n"), &mut held);
        assert!(held.is_empty());
        assert!(matches!(written.try_recv(), Ok(Ok((_, Ok(Some(1)))))));

        let (tx, mut written) = oneshot::channel();
        hand_over(Waiter::Acked(tx), raw(b":3\r\n"), &mut held);
        hand_over(Waiter::Wait(Vec::new()), error(), &mut held);
        assert!(matches!(written.try_recv(), Ok(Ok((_, Err(_))))));

        let (tx, mut written) = oneshot::channel();
        Waiter::Wait(vec![(tx, raw(b"+OK\r\n"))]).fail(true, || {
            Error::new(ErrorKind::Timeout, "the backend did not reply in time")
        });
        assert!(
            matches!(written.try_recv(), Ok(Ok((_, Err(e)))) if *e.kind() == ErrorKind::Timeout)
        );
        let (tx, mut unanswered) = oneshot::channel();
        Waiter::Acked(tx).fail(true, || Error::new(ErrorKind::IO, "closed"));
        assert!(matches!(unanswered.try_recv(), Ok(Err(SendError::Sent(_)))));
    }

    /// A link closed with commands in flight: those the writer took may have been written
    /// (sent: Transient); those still queued never left holdfast (not sent: retried for
    /// every command), a write waiting for replicas included.
    #[test]
    fn closing_fails_the_taken_as_sent_and_the_still_queued_as_not_sent() {
        let link = Link {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    out: Output::default(),
                    queued: 0,
                    waiting: VecDeque::new(),
                    period: Duration::from_secs(1),
                    closed: false,
                    ack: None,
                    response_timeout: Duration::from_secs(1),
                }),
                wake: Notify::new(),
                closing: Notify::new(),
                unwritten: Arc::default(),
                acking: Arc::default(),
            }),
        };
        let args = [Bytes::from_static(b"INCR"), Bytes::from_static(b"k")];
        let mut replies = Vec::new();
        let mut acked = Vec::new();
        let queue_two = |replies: &mut Vec<_>, acked: &mut Vec<_>| {
            let (tx, rx) = oneshot::channel();
            assert!(link.queue(&args, None, Waiter::Reply(tx), None, None));
            replies.push(rx);
            let (tx, rx) = oneshot::channel();
            let ack = Some((1, Duration::from_secs(1)));
            assert!(link.queue(&args, None, Waiter::Acked(tx), None, ack));
            acked.push(rx);
        };
        queue_two(&mut replies, &mut acked);
        {
            // The writer takes what is queued, as `run` does before writing it.
            let mut state = link.shared.state();
            state.out.clear();
            state.queued = 0;
        }
        queue_two(&mut replies, &mut acked);
        link.shared.close("the connection closed");
        let sent = |r: Option<&SendError>| match r {
            Some(SendError::Sent(_)) => "sent",
            Some(SendError::NotSent(_)) => "not sent",
            None => "answered",
        };
        let got: Vec<&str> = replies
            .iter_mut()
            .map(|rx| sent(rx.try_recv().ok().and_then(|r| r.err()).as_ref()))
            .collect();
        assert_eq!(got, ["sent", "not sent"]);
        let got: Vec<&str> = acked
            .iter_mut()
            .map(|rx| sent(rx.try_recv().ok().and_then(|r| r.err()).as_ref()))
            .collect();
        assert_eq!(got, ["sent", "not sent"]);
        assert!(!link.queue(&args, None, Waiter::Gone, None, None), "closed");
    }

    /// Only a refused password fails a dial for good; a server turning connections away
    /// (`max number of clients`, written at accept, so read as the answer to AUTH) heals.
    #[test]
    fn only_a_refused_password_is_an_authentication_failure() {
        use crate::error::{classify, ErrorClass};
        for (expected, reply, class) in [
            (
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair",
                ErrorClass::Other,
            ),
            (
                ErrorKind::Auth,
                "NOAUTH Authentication required.",
                ErrorClass::Other,
            ),
            (ErrorKind::Auth, "NOPERM no permissions", ErrorClass::Other),
            (
                ErrorKind::Auth,
                "ERR max number of clients reached",
                ErrorClass::NotAttempted,
            ),
            (
                ErrorKind::Protocol,
                "ERR max number of clients reached",
                ErrorClass::NotAttempted,
            ),
            (
                ErrorKind::Protocol,
                "LOADING loading",
                ErrorClass::NotAttempted,
            ),
        ] {
            let source = Error::new(handshake_error(&expected, reply), reply);
            let failed = crate::backend::BackendError::Connect { source };
            assert_eq!(classify(&failed), class, "{reply}");
        }
    }

    /// Takes at most 7 bytes per write, from the first non-empty slice only.
    struct Trickle(Vec<u8>);

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(7);
            self.0.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn written(commands: &[Vec<Bytes>]) -> Vec<u8> {
        let mut out = Output::default();
        for args in commands {
            encode(&mut out, args);
        }
        let mut sink = Trickle(Vec::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(out.write_to(&mut sink)).expect("written");
        sink.0
    }

    #[test]
    fn commands_are_encoded_as_multibulk() {
        let set = vec![
            Bytes::from_static(b"SET"),
            Bytes::from_static(b"k"),
            Bytes::new(),
        ];
        assert_eq!(written(&[set]), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn a_command_goes_as_the_client_encoded_it_when_known() {
        let args = [Bytes::from_static(b"set"), Bytes::from_static(b"k")];
        // Not what encoding `args` gives, so the test tells the two apart: the bytes given
        // are written as they are.
        let raw = Bytes::from_static(b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n");
        let mut out = Output::default();
        put_command(&mut out, &args, Some(&raw));
        put_command(&mut out, &args[..1], None);
        let mut sink = Trickle(Vec::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(out.write_to(&mut sink)).expect("written");
        assert_eq!(sink.0, b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n*1\r\n$3\r\nset\r\n");
    }

    #[test]
    fn large_arguments_are_written_by_reference_in_order() {
        let big = Bytes::from(vec![b'x'; BY_REFERENCE]);
        let bigger = Bytes::from(vec![b'y'; 3 * BY_REFERENCE + 1]);
        let commands = vec![
            vec![
                Bytes::from_static(b"SET"),
                Bytes::from_static(b"a"),
                big.clone(),
            ],
            vec![Bytes::from_static(b"GET"), Bytes::from_static(b"a")],
            vec![big.clone(), bigger.clone(), Bytes::from_static(b"z")],
        ];
        let mut want = Vec::new();
        for args in &commands {
            want.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for arg in args {
                want.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                want.extend_from_slice(arg);
                want.extend_from_slice(b"\r\n");
            }
        }
        assert_eq!(written(&commands), want);
        let mut out = Output::default();
        encode(&mut out, &commands[2]);
        assert_eq!(
            out.pieces(),
            4,
            "two arguments by reference, and the bytes before each"
        );
    }

    #[test]
    fn resp2_replies_become_resp3_frames() {
        let mut buf = BytesMut::from(&b"*3\r\n:1\r\n$-1\r\n-ERR no\r\n+OK"[..]);
        let frame = decode(&mut buf, Proto::Resp2).ok().flatten();
        let Some(Frame::Array { data, .. }) = frame else {
            panic!("expected an array, got {frame:?}");
        };
        assert!(matches!(data[0], Frame::Number { data: 1, .. }));
        assert!(matches!(data[1], Frame::Null));
        assert!(matches!(&data[2], Frame::SimpleError { data, .. } if &**data == "ERR no"));
        // The incomplete reply stays in the buffer.
        assert!(matches!(decode(&mut buf, Proto::Resp2), Ok(None)));
        assert_eq!(&buf[..], b"+OK");
    }

    fn blob(kind: char, data: &[u8]) -> Vec<u8> {
        let mut out = format!("{kind}{}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn aggregate(kind: char, count: usize, items: Vec<Vec<u8>>) -> Vec<u8> {
        let mut out = format!("{kind}{count}\r\n").into_bytes();
        out.extend(items.into_iter().flatten());
        out
    }

    /// Encoded RESP2 replies, nested.
    fn reply2() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("+{t}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("-ERR {t}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| blob('$', &d)),
            Just(b"$-1\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            proptest::collection::vec(inner, 0..4)
                .prop_map(|items| aggregate('*', items.len(), items))
        })
    }

    /// Encoded RESP3 replies, nested.
    fn reply3() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("+{t}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("-ERR {t}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| blob('$', &d)),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| blob('!', &d)),
            "[a-z]{0,8}".prop_map(|t| blob('=', format!("txt:{t}").as_bytes())),
            Just(b"_\r\n".to_vec()),
            Just(b"#t\r\n".to_vec()),
            Just(b",1.5\r\n".to_vec()),
            Just(b"(12345678901234567890\r\n".to_vec()),
        ];
        // Set members and map keys are plain values, as from Redis (the decoder cannot hash
        // an aggregate).
        leaf.clone().prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|items| aggregate(
                    '*',
                    items.len(),
                    items
                )),
                proptest::collection::vec(leaf.clone(), 0..4).prop_map(|items| aggregate(
                    '~',
                    items.len(),
                    items
                )),
                proptest::collection::vec((leaf.clone(), inner), 0..3).prop_map(|pairs| {
                    let count = pairs.len();
                    let items = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
                    aggregate('%', count, items)
                }),
            ]
        })
    }

    /// The scan ends a reply where the decoder does, and finds no end in any part of one.
    fn scans_like_the_decoder(reply: &[u8], proto: Proto) -> Result<(), TestCaseError> {
        let mut input = reply.to_vec();
        input.extend_from_slice(b"+NEXT\r\n");
        prop_assert_eq!(scan(&input), Ok(Some(reply.len())));
        let mut buf = BytesMut::from(&input[..]);
        prop_assert!(matches!(decode(&mut buf, proto), Ok(Some(_))));
        prop_assert_eq!(&buf[..], b"+NEXT\r\n");
        for end in 0..reply.len() {
            prop_assert_eq!(
                scan(&reply[..end]),
                Ok(None),
                "{} of {} bytes",
                end,
                reply.len()
            );
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn resp2_replies_are_scanned_to_their_end(reply in reply2()) {
            scans_like_the_decoder(&reply, Proto::Resp2)?;
        }

        #[test]
        fn resp3_replies_are_scanned_to_their_end(reply in reply3()) {
            scans_like_the_decoder(&reply, Proto::Resp3)?;
        }
    }

    #[test]
    fn plain_replies_pass_raw_and_errors_and_pushes_are_decoded() {
        let mut buf = BytesMut::from(
            &b"*2\r\n$1\r\na\r\n$-1\r\n-READONLY no\r\n>2\r\n+p\r\n+q\r\n:7\r\n"[..],
        );
        let next = |buf: &mut BytesMut| next_reply(buf, Proto::Resp2).ok().flatten();
        assert_eq!(
            next(&mut buf),
            Some(Some(Reply::Raw {
                bytes: Bytes::from_static(b"*2\r\n$1\r\na\r\n$-1\r\n"),
                proto: Proto::Resp2
            }))
        );
        let error = next(&mut buf).flatten();
        assert!(
            matches!(&error, Some(Reply::Frame(f)) if matches!(**f, Frame::SimpleError { .. })),
            "{error:?}"
        );
        let mut push = BytesMut::from(&b">2\r\n+p\r\n+q\r\n:7\r\n"[..]);
        assert_eq!(
            next_reply(&mut push, Proto::Resp3).ok().flatten(),
            Some(None)
        );
        assert_eq!(&push[..], b":7\r\n");
    }

    #[test]
    fn shapes_the_scan_does_not_follow_go_to_the_decoder() {
        assert_eq!(scan(b"|1\r\n+a\r\n+b\r\n+OK\r\n"), Err(Unscannable));
        assert_eq!(scan(b"$?\r\n;1\r\na\r\n;0\r\n"), Err(Unscannable));
        assert_eq!(scan(b"*1\r\n$3\r\nabcd\r\n"), Err(Unscannable));
        assert_eq!(scan(b"+OK\rX"), Err(Unscannable));
        assert_eq!(scan(b"*99999999999999999999\r\n"), Err(Unscannable));
    }

    #[test]
    fn a_raw_reply_decodes_as_the_decoder_reads_it() {
        let map = Bytes::from_static(b"%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n");
        let Frame::Map { data, .. } = decode_raw(map, Proto::Resp3) else {
            panic!("a map");
        };
        let keys: Vec<String> = data.keys().map(|k| format!("{k:?}")).collect();
        assert!(keys[0].contains('a') && keys[1].contains('b'), "{keys:?}");
        let nil = decode_raw(Bytes::from_static(b"$-1\r\n"), Proto::Resp2);
        assert_eq!(nil, Frame::Null);
    }

    #[test]
    fn the_version_is_read_from_info() {
        let info = b"# Server\r\nredis_version:7.2.4\r\nredis_mode:standalone\r\n";
        assert_eq!(redis_version(info), Some((7, 2)));
        assert_eq!(redis_version(b"# Server\r\n"), None);
    }
}
