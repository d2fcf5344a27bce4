//! holdfast's own Redis connections. Every Redis connection that carries commands is a link: the shared ones (many clients'
//! commands), a client's own (its blocking commands, `WATCH`/`MULTI`/`EXEC`), over TCP or TLS
//! (`dial.rs`), to a standalone server, the primary Sentinel names, or a Cluster's node.
//! Replies are paired with commands by order alone, never by what they hold: a reply's shape
//! (an array that starts with `message`, say) changes nothing of where it goes.
//!
//! Many client connections send on one shared link. Each command is encoded straight into the
//! link's output buffer and its reply slot queued under the same lock, so the order of
//! replies is the order of the bytes. One task writes whatever has accumulated in one write
//! (it lets the other ready clients add theirs first) and reads replies in batches, handing
//! each to the oldest slot. That is where the cost of a proxy goes without pipelining: a
//! client library writes and flushes each command on its own, a syscall per command.
//!
//! Replies are handed over as the bytes Redis wrote ([`Reply::Raw`]): the link only finds
//! where each ends. Error replies and pushes are decoded: the first are classified, the
//! second answer no command.
//!
//! Errors are [`Error`]s (`crate::error::LinkError`), whose kind `classify` reads.

use super::codec::{encode, next_reply, put_command};
use super::dial::{self, Server, Stream, Target};
use super::{Proto, Reply};
use crate::error::{LinkError as Error, LinkErrorKind as ErrorKind};
use crate::resp::Output;
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// A reply, or why none will come.
type Answer = Result<Reply, SendError>;

/// A write's reply, held until the `WAIT` after it answered, with that answer: the replicas
/// that have it (None for an error reply, which applied nothing and is not held), or why the
/// count failed. The outer error: the write's own reply never came (and whether it was
/// written).
pub type Acked = Result<(Reply, Result<Option<i64>, Error>), SendError>;

/// What the link's task and its senders share.
struct LinkShared {
    state: Mutex<LinkState>,
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
    /// Its writer gathers several clients' commands into one write ([`Signals::shared`]).
    gathers: bool,
}

/// What a link tells its pool, kept across the pool slot's dials.
#[derive(Clone, Debug, Default)]
pub struct Signals {
    /// True while commands wait to be written.
    pub unwritten: Arc<AtomicBool>,
    /// `WAIT`s written and not yet answered.
    pub acking: Arc<AtomicUsize>,
    /// The link is shared: its writer lets the other ready clients queue their commands
    /// before it writes (one write for all). A client's own link writes at once: a command
    /// it carries (a blocking one, `WATCH`) must reach the server before commands other
    /// clients send after it.
    pub shared: bool,
}

impl Signals {
    /// The signals of a shared (pooled) link.
    pub fn shared() -> Signals {
        Signals {
            shared: true,
            ..Signals::default()
        }
    }
}

struct LinkState {
    /// Encoded commands not yet written.
    out: Output,
    /// How many commands `out` holds.
    queued: usize,
    /// One slot per written or queued command, oldest first.
    waiting: VecDeque<ReplySlot>,
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
struct ReplySlot {
    waiter: ReplyWaiter,
    deadline: Option<Instant>,
    /// The link's own `WAIT` (counted in `acking` until its reply comes).
    wait: bool,
    /// When it was queued.
    since: Instant,
}

/// Who waits for a reply.
enum ReplyWaiter {
    /// A command's sender.
    Reply(oneshot::Sender<Answer>),
    /// A write acknowledged only after the `WAIT` that follows it; true when an error reply
    /// to it may still have written (a script), so it waits for the `WAIT` too.
    Acked(oneshot::Sender<Acked>, bool),
    /// The `WAIT` the link wrote after a batch, holding the replies of its writes.
    Wait(Vec<(oneshot::Sender<Acked>, Reply)>),
    /// Answered already (with a timeout): a reply that comes is dropped.
    Gone,
}

impl ReplyWaiter {
    fn is_gone(&self) -> bool {
        matches!(self, ReplyWaiter::Gone)
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
            ReplyWaiter::Reply(tx) => {
                let _ = tx.send(Err(failed()));
            }
            ReplyWaiter::Acked(tx, _) => {
                let _ = tx.send(Err(failed()));
            }
            ReplyWaiter::Wait(held) => {
                for (tx, reply) in held {
                    let _ = tx.send(Ok((reply, Err(why()))));
                }
            }
            ReplyWaiter::Gone => {}
        }
    }
}

impl LinkShared {
    fn state(&self) -> MutexGuard<'_, LinkState> {
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
                .fail(at < written, || Error::new(ErrorKind::Io, why.to_string()));
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
                        expired.push(std::mem::replace(&mut slot.waiter, ReplyWaiter::Gone));
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
    shared: Arc<LinkShared>,
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
    /// As [`dial::connect`]: `Io` for a refused or dropped connection, `Timeout`, `Auth` for
    /// a refused password, `Protocol` for any other handshake error reply.
    pub async fn connect(
        target: &Target,
        signals: Signals,
    ) -> Result<(Link, tokio::task::JoinHandle<()>, Server), Error> {
        let (stream, server) = dial::connect(target).await?;
        let response_timeout = target.response_timeout();
        let shared = Arc::new(LinkShared {
            state: Mutex::new(LinkState {
                out: Output::default(),
                queued: 0,
                waiting: VecDeque::new(),
                period: response_timeout,
                closed: false,
                ack: None,
                response_timeout,
            }),
            wake: Notify::new(),
            closing: Notify::new(),
            unwritten: signals.unwritten,
            acking: signals.acking,
            gathers: signals.shared,
        });
        let task = tokio::spawn(run(stream, shared.clone(), target.proto()));
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
        if !self.queue(args, raw, ReplyWaiter::Reply(slot), timeout, None) {
            return Err(SendError::NotSent(Error::new(
                ErrorKind::Io,
                "the connection closed before the request was sent",
            )));
        }
        // The link's task answers a slot whose deadline passed: one timer for the link, not
        // one per request.
        settle(reply.await)
    }

    /// Sends a write whose reply is handed over only once `wanted` replicas may have it: the
    /// link follows the write it goes in with one `WAIT wanted timeout` for every such write
    /// in it (`WAIT` counts every write sent before it on its connection), and answers each
    /// with its reply and that count when the `WAIT` returns. An error reply applied nothing
    /// and is answered at once, unless `error_may_write` (a script).
    pub async fn send_acked(
        &self,
        (args, raw): (&[Bytes], Option<&Bytes>),
        timeout: Duration,
        ack: (u32, Duration),
        error_may_write: bool,
    ) -> Acked {
        let (slot, reply) = oneshot::channel();
        let waiter = ReplyWaiter::Acked(slot, error_may_write);
        if !self.queue(args, raw, waiter, Some(timeout), Some(ack)) {
            // Nothing queued, so nothing written: as for `send`, not sent.
            return Err(SendError::NotSent(Error::new(
                ErrorKind::Io,
                "the connection closed before the request was sent",
            )));
        }
        reply.await.unwrap_or_else(|_| {
            Err(SendError::Sent(Error::new(
                ErrorKind::Io,
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
        waiter: ReplyWaiter,
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
            state.waiting.push_back(ReplySlot {
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
                    state.waiting.push_back(ReplySlot {
                        waiter: ReplyWaiter::Reply(slot),
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
        self.close_because("the connection was closed by holdfast");
    }

    /// As [`Link::close`], with `why` as what the commands in flight hear.
    pub fn close_because(&self, why: &str) {
        self.shared.close(why);
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
            ErrorKind::Io,
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
                ErrorKind::Io,
                "the connection closed before the request was sent",
            )))
        })
        .collect()
}

/// The link's task: writes what senders queued and hands replies to their slots, until the
/// connection fails or the link is closed. Closed from outside (a reply that did not come
/// in time, a fenced primary), it stops at once, a write under way included: every command
/// on the link has been answered as failed, so none of it may reach the server later, after
/// what the clients sent since. Reset, not closed, so the kernel drops what it still holds
/// unsent too.
async fn run(stream: Stream, shared: Arc<LinkShared>, proto: Proto) {
    // TCP's halves borrow the socket (no lock between them, the hot path); TLS's share its
    // session behind one.
    let why = match stream {
        Stream::Tcp(mut tcp) => {
            let why = {
                let (mut reader, mut writer) = tcp.split();
                drive(&mut reader, &mut writer, &shared, proto).await
            };
            if why.is_none() {
                let _ = tcp.set_zero_linger();
            }
            why
        }
        Stream::Tls(tls) => {
            let (mut reader, mut writer) = tokio::io::split(*tls);
            let why = drive(&mut reader, &mut writer, &shared, proto).await;
            if why.is_none() {
                let _ = reader.unsplit(writer).get_ref().0.set_zero_linger();
            }
            why
        }
    };
    if let Some(why) = why {
        shared.close(&why);
    }
}

/// Writes and reads one connection's halves until it fails (why) or the link is closed
/// (None).
async fn drive<R, W>(
    reader: &mut R,
    writer: &mut W,
    shared: &LinkShared,
    proto: Proto,
) -> Option<String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let write = write_batches(writer, shared);
    let read = read_replies(reader, shared, proto);
    let closed = async {
        shared.closing.notified().await;
        None
    };
    tokio::select! {
        why = write => Some(why),
        why = read => Some(why),
        why = closed => why,
    }
}

/// Writes what senders queued, each wake a batch (a `WAIT` after the writes that asked for
/// replicas), until the link is closed or a write fails: why.
async fn write_batches<W: AsyncWrite + Unpin>(writer: &mut W, shared: &LinkShared) -> String {
    let mut batch = Output::default();
    // Commands in the last write.
    let mut last = 0;
    loop {
        shared.wake.notified().await;
        // Under load, let the other ready clients queue their commands too: one write for
        // all. A lone client's command (the last write carried one, and nothing else is
        // in flight) goes at once: the yield would cost it a pass through the event loop.
        let lone = !shared.gathers || (last == 1 && shared.state().waiting.len() == 1);
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
                state.waiting.push_back(ReplySlot {
                    waiter: ReplyWaiter::Wait(Vec::new()),
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
        if let Err(e) = batch.write_to(writer).await {
            return format!("writing to the backend failed: {e}");
        }
        batch.clear();
    }
}

/// Reads replies and hands each to the slot that waits for it, in order, and expires slots
/// whose deadline passed, until the connection fails (a read, a reply that does not parse,
/// one nobody asked for): why.
async fn read_replies<R: AsyncRead + Unpin>(
    reader: &mut R,
    shared: &LinkShared,
    proto: Proto,
) -> String {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // Both kept between reads, so a batch of replies allocates nothing.
    let mut replies = Vec::new();
    let mut slots: Vec<ReplySlot> = Vec::new();
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
                    ReplyWaiter::Wait(waiting) => Some(waiting),
                    _ => None,
                }) {
                Some(waiting) => waiting.append(&mut held),
                None => {
                    drop(state);
                    for (tx, reply) in held.drain(..) {
                        let no_wait =
                            Error::new(ErrorKind::Unexpected, "no WAIT followed the write");
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
}

/// Gives `reply` to whoever waits for it. A write waiting for replicas is held (in `held`,
/// until the `WAIT` after it answers) unless its reply is an error that applied nothing; a
/// `WAIT`'s answer releases the writes it holds and those held before it.
fn hand_over(waiter: ReplyWaiter, reply: Reply, held: &mut Vec<(oneshot::Sender<Acked>, Reply)>) {
    match waiter {
        ReplyWaiter::Reply(tx) => {
            let _ = tx.send(Ok(reply));
        }
        ReplyWaiter::Acked(tx, false) if reply.is_error() => {
            let _ = tx.send(Ok((reply, Ok(None))));
        }
        ReplyWaiter::Acked(tx, _) => held.push((tx, reply)),
        ReplyWaiter::Wait(mut waiting) => {
            waiting.append(held);
            let count = match reply.into_frame() {
                Frame::Number { data, .. } => Ok(Some(data)),
                other => Err(Error::new(
                    ErrorKind::Unexpected,
                    format!("WAIT answered {other:?}"),
                )),
            };
            for (tx, reply) in waiting {
                let _ = tx.send(Ok((reply, count.clone())));
            }
        }
        // Timed out already: whatever a WAIT held was answered then.
        ReplyWaiter::Gone => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write waiting for replicas is answered when the `WAIT` after it is, with its count;
    /// an error reply (nothing applied) at once, unless the command may write before its
    /// error (a script); a `WAIT` that fails or times out answers
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
        hand_over(ReplyWaiter::Acked(tx, false), raw(b"+OK\r\n"), &mut held);
        assert!(written.try_recv().is_err(), "held until its WAIT answers");
        let (tx, mut refused) = oneshot::channel();
        hand_over(ReplyWaiter::Acked(tx, false), error(), &mut held);
        assert!(matches!(refused.try_recv(), Ok(Ok((_, Ok(None))))));
        // A script's error may come after it wrote: it waits for the count like a write.
        let (tx, mut scripted) = oneshot::channel();
        hand_over(ReplyWaiter::Acked(tx, true), error(), &mut held);
        assert!(scripted.try_recv().is_err(), "held until its WAIT answers");
        hand_over(ReplyWaiter::Wait(Vec::new()), raw(b":1\r\n"), &mut held);
        assert!(held.is_empty());
        assert!(matches!(written.try_recv(), Ok(Ok((_, Ok(Some(1)))))));
        assert!(matches!(scripted.try_recv(), Ok(Ok((reply, Ok(Some(1))))) if reply.is_error()));

        let (tx, mut written) = oneshot::channel();
        hand_over(ReplyWaiter::Acked(tx, false), raw(b":3\r\n"), &mut held);
        hand_over(ReplyWaiter::Wait(Vec::new()), error(), &mut held);
        assert!(matches!(written.try_recv(), Ok(Ok((_, Err(_))))));

        let (tx, mut written) = oneshot::channel();
        ReplyWaiter::Wait(vec![(tx, raw(b"+OK\r\n"))]).fail(true, || {
            Error::new(ErrorKind::Timeout, "the backend did not reply in time")
        });
        assert!(
            matches!(written.try_recv(), Ok(Ok((_, Err(e)))) if e.kind() == ErrorKind::Timeout)
        );
        let (tx, mut unanswered) = oneshot::channel();
        ReplyWaiter::Acked(tx, false).fail(true, || Error::new(ErrorKind::Io, "closed"));
        assert!(matches!(unanswered.try_recv(), Ok(Err(SendError::Sent(_)))));
    }

    /// A link closed with commands in flight: those the writer took may have been written
    /// (sent: Transient); those still queued never left holdfast (not sent: retried for
    /// every command), a write waiting for replicas included.
    #[test]
    fn closing_fails_the_taken_as_sent_and_the_still_queued_as_not_sent() {
        let link = Link {
            shared: Arc::new(LinkShared {
                state: Mutex::new(LinkState {
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
                gathers: true,
            }),
        };
        let args = [Bytes::from_static(b"INCR"), Bytes::from_static(b"k")];
        let mut replies = Vec::new();
        let mut acked = Vec::new();
        let queue_two = |replies: &mut Vec<_>, acked: &mut Vec<_>| {
            let (tx, rx) = oneshot::channel();
            assert!(link.queue(&args, None, ReplyWaiter::Reply(tx), None, None));
            replies.push(rx);
            let (tx, rx) = oneshot::channel();
            let ack = Some((1, Duration::from_secs(1)));
            assert!(link.queue(&args, None, ReplyWaiter::Acked(tx, false), None, ack));
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
        assert!(
            !link.queue(&args, None, ReplyWaiter::Gone, None, None),
            "closed"
        );
    }
}
