//! One client connection: framing, the auth and MULTI gate, the commands holdfast answers
//! itself (HELLO, AUTH, CLIENT, MULTI/EXEC, ...), a client's own backend connection
//! (blocking commands, WATCH, transactions), reply encoding, and the order of execution.
//! Everything else goes through the namespace router to the executor (`crate::exec`), which
//! decides what the client hears.
//!
//! Ordering: requests are finished one at a time (held through retries if need be) in the
//! order sent, so commands take effect in that order and a held command holds only the
//! commands behind it on this connection. The first dispatches of a run of pipelined requests
//! are sent ahead together (`pipelined.rs` picks the run; `exec::ahead` keeps the order when
//! one of them fails). Replies to one batch of pipelined requests are flushed with one write.

mod auth;
mod info;
mod pipelined;
mod subscribe;
mod transaction;

use auth::open_to_all;
use info::command_reply;

use crate::backend::DoubleStyle;
use crate::backend::{Backend, BackendError, Blocking, Dedicated, Proto, Reply, Request};
use crate::command::table::{self, Idempotence, Local};
use crate::command::{Command, CommandError};
use crate::exec::own::{Own, OwnLink};
use crate::exec::{failure_reply, Activity, Ahead, Session};
use crate::metrics as m;
use crate::namespace::Namespace;
use crate::resp::{encode_reply, Limits, Nils, Output, ProtocolError, Sink};
use crate::shared::{Shared, State};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
// The TSC clock: a request reads it twice, and the system clock cost 3% of a pipelined
// request's CPU.
use quanta::Instant;

/// Replies are flushed early once this much is buffered, so a deep pipeline cannot grow the
/// output buffer without bound.
const FLUSH_AT: usize = 64 * 1024;
/// Read buffer growth step while a request is arriving in parts.
const READ_CHUNK: usize = 16 * 1024;
/// Room for the next read when no partial request is buffered: small, so an idle client
/// holds a few KiB, not a whole chunk (10,000 idle clients took 23 KiB each with 16 KiB here).
const IDLE_CHUNK: usize = 2 * 1024;
/// Most room for one read. A client whose reads keep filling the room it was given (a deep
/// pipeline of large values) gets twice as much each time up to this, so its requests reach
/// the backend together instead of one or two per read and round trip.
const READ_MAX: usize = 256 * 1024;

/// Whether to keep serving after a command.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Close,
}

/// MULTI state: the queued commands and whether one of them was refused.
struct Multi {
    /// Commands queued since MULTI.
    queue: Vec<Command>,
    /// A queued command was refused: EXEC answers EXECABORT.
    dirty: bool,
}

/// Per-connection state.
struct ClientConn {
    /// Shared proxy state.
    shared: Arc<Shared>,
    /// The configuration generation this command runs under, taken between commands so a
    /// reload never changes a command half-way.
    state: Arc<State>,
    /// This client's executor; its protocol is the client's.
    exec: Session,
    /// `CLIENT ID`.
    id: u64,
    /// Whether AUTH succeeded (or none is required).
    authed: bool,
    /// The `[[users]]` name this client authenticated as; `None` is `default`.
    user: Option<String>,
    /// `CLIENT SETNAME`.
    name: Option<Bytes>,
    /// Set between MULTI and EXEC/DISCARD.
    multi: Option<Multi>,
    /// A backend connection of this client's own, and the backend it belongs to.
    dedicated: Option<(Arc<Backend>, Dedicated)>,
    /// Whether a WATCH stands on `dedicated`, or stood on one closed since (`exec::own`).
    own: Own,
    /// The command being handled had its first dispatch sent ahead: the namespace it was
    /// routed to then (it is not routed again), and what it left.
    ahead: Option<(Arc<Namespace>, Ahead<Reply, BackendError>)>,
    /// This client as others see it (`CLIENT LIST`, `CLIENT KILL`).
    client: Arc<crate::shared::Client>,
    /// Its Pub/Sub subscriptions, from its first `SUBSCRIBE` (`subscribe.rs`); boxed, so a
    /// client that never subscribes carries one pointer (an idle connection's memory).
    subs: Option<Box<subscribe::Subscriptions>>,
    /// The namespace the command being handled was forwarded to, whose bytes its reply
    /// counts (`handle`).
    routed: Option<&'static m::NamespaceSeries>,
}

fn simple(text: &str) -> Frame {
    Frame::SimpleString {
        data: Bytes::copy_from_slice(text.as_bytes()),
        attributes: None,
    }
}

fn error(text: impl Into<String>) -> Frame {
    Frame::SimpleError {
        data: bytes_utils::Str::from(text.into()),
        attributes: None,
    }
}

fn bulk(data: impl Into<Bytes>) -> Frame {
    Frame::BlobString {
        data: data.into(),
        attributes: None,
    }
}

fn number(n: i64) -> Frame {
    Frame::Number {
        data: n,
        attributes: None,
    }
}

fn array(items: Vec<Frame>) -> Frame {
    Frame::Array {
        data: items,
        attributes: None,
    }
}

fn ok() -> Frame {
    simple("OK")
}

fn wrongpass() -> Frame {
    error("WRONGPASS invalid username-password pair or user is disabled.")
}

/// Serves one client until it closes, framing is lost, `CLIENT KILL` names it, or shutdown
/// reaches a safe point. `addrs` are the client's address and the one it connected to.
pub async fn serve<S>(
    stream: S,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    addrs: (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>),
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let id = shared.next_client_id();
    let state = shared.current();
    let (client, _leave) = shared.clients.join(id, addrs.0, addrs.1);
    let mut conn = ClientConn {
        client,
        authed: open_to_all(&state),
        user: None,
        exec: Session::new(id, shared.give_up_signal()),
        state,
        shared,
        id,
        name: None,
        multi: None,
        dedicated: None,
        own: Own::default(),
        ahead: None,
        subs: None,
        routed: None,
    };
    let activity = conn.exec.activity();
    let server = &conn.state.config.server;
    let limits = Limits {
        request_bytes: server.max_request_bytes,
        bulk_bytes: server.max_bulk_bytes,
        multibulk_len: server.max_arguments,
    };
    let idle = server.idle_timeout;
    let mut input = BytesMut::new();
    let mut decoder = crate::resp::Decoder::default();
    let mut output = Output::default();
    let max_pipeline = server.max_pipeline;
    let mut batch: VecDeque<Result<Command, CommandError>> = VecDeque::new();
    // The room the next read gets while a partial request is buffered (see READ_MAX).
    let mut read_size = READ_CHUNK;
    // Between commands is a safe point to stop. One wait for the whole connection: a new
    // `changed()` per read registered with the channel and left it again each time (4% of a
    // request's instructions without pipelining).
    let mut stop_watch = shutdown.clone();
    let stopping = async move {
        let _ = stop_watch.changed().await;
    };
    tokio::pin!(stopping);
    let killed = conn.client.clone();
    let killed = killed.kill.notified();
    tokio::pin!(killed);
    'serve: loop {
        loop {
            // Every complete request in the buffer (up to max_pipeline), then each in order.
            let mut framing = None;
            while batch.len() < max_pipeline {
                match decoder.next_request(&mut input, &limits) {
                    Ok(Some(request)) => {
                        batch.push_back(Command::parse_raw(request.args, request.raw));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        framing = Some(e);
                        break;
                    }
                }
            }
            if batch.is_empty() && framing.is_none() {
                break;
            }
            while !batch.is_empty() {
                // The next run that may go ahead together, or one request on its own (a
                // lone request is not looked at twice: `handle` routes it). Not boxed:
                // boxing this and `handle` would shrink an idle connection's memory, but
                // cost 10-15% more CPU per request when measured.
                let ahead = if batch.len() >= 2 {
                    conn.state = conn.shared.current();
                    conn.send_ahead(batch.iter()).await
                } else {
                    Vec::new()
                };
                let run = ahead.len().max(1);
                let mut ahead = ahead.into_iter();
                for parsed in batch.drain(..run) {
                    conn.ahead = ahead.next().flatten();
                    // Pinned here and lent: moved into `until_gone`, the command's future would
                    // take room twice in every connection's task (2.7 KiB more per idle client).
                    let flow = {
                        let handled = conn.handle(parsed, &mut output);
                        tokio::pin!(handled);
                        until_gone(handled, &activity, &mut reader, &mut input).await
                    };
                    let Some(flow) = flow else {
                        tracing::debug!(client = id, "client closed while its command was held");
                        break 'serve;
                    };
                    conn.ahead = None;
                    if flow == Flow::Close || conn.client.killed.load(Ordering::Acquire) {
                        let _ = output.write_to(&mut writer).await;
                        break 'serve;
                    }
                    if output.len() >= FLUSH_AT && output.write_to(&mut writer).await.is_err() {
                        break 'serve;
                    }
                }
            }
            if let Some(e) = framing {
                m::limit(e.limit());
                // Framing is lost: answer why and close this connection only.
                let _ = writeln!(ErrSink(&mut output), "-ERR {e}\r");
                let _ = output.write_to(&mut writer).await;
                tracing::debug!(client = conn.id, error = %e, "closing on a protocol error");
                break 'serve;
            }
        }
        if !output.is_empty() {
            // A client that reads nothing blocks this write; one that is killed meanwhile (a
            // subscriber past its backlog) is closed, not waited on.
            let written = tokio::select! {
                biased;
                written = output.write_to(&mut writer) => written.is_ok(),
                () = &mut killed => false,
            };
            if !written {
                break;
            }
        }
        if *shutdown.borrow() {
            break;
        }
        // What is read now was sent after the replies written so far: a whole retry
        // schedule again for each (see `Session::new_requests`).
        conn.exec.new_requests();
        input.reserve(if input.is_empty() && read_size == READ_CHUNK {
            IDLE_CHUNK
        } else {
            read_size
        });
        let room = input.capacity() - input.len();
        let idle_for = async {
            if idle.is_zero() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(idle).await;
        };
        tokio::select! {
            // The read first: shutdown is also looked at before each read, above.
            biased;
            read = reader.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) if n == room => read_size = (read_size * 2).min(READ_MAX),
                Ok(_) => read_size = READ_CHUNK,
            },
            // What the client's subscriptions delivered; never ready without one.
            delivery = subscribe::next_delivery(&mut conn.subs) => {
                if let Some(delivery) = delivery {
                    conn.deliver(delivery, &mut output);
                }
            }
            () = &mut stopping => break,
            () = &mut killed => break,
            _ = idle_for => {
                m::limit("idle_timeout");
                break;
            }
        }
    }
    let _ = writer.shutdown().await;
    if let Some((_, dedicated)) = conn.dedicated.take() {
        dedicated.close().await;
    }
}

/// The bytes `command` came in: as sent when it was a plain multibulk, else (an inline
/// command) the multibulk of its arguments.
fn wire_len(command: &Command) -> usize {
    if let Some(raw) = &command.raw {
        return raw.len();
    }
    let header = |n: usize| 3 + decimal_digits(n);
    header(command.args.len())
        + command
            .args
            .iter()
            .map(|arg| header(arg.len()) + arg.len() + 2)
            .sum::<usize>()
}

/// How many decimal digits `n` has.
fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Two `SCRIPT EXISTS` answers as one: 1 where both say 1.
fn both_exist(a: Reply, b: Reply) -> Reply {
    match (a.into_frame(), b.into_frame()) {
        (Frame::Array { data: a, .. }, Frame::Array { data: b, .. }) if a.len() == b.len() => {
            array(
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| match (x, y) {
                        (Frame::Number { data: 1, .. }, Frame::Number { data: 1, .. }) => number(1),
                        _ => number(0),
                    })
                    .collect(),
            )
            .into()
        }
        (a, _) => a.into(),
    }
}

/// Counts a client out of `INFO`'s `blocked_clients` when its blocking command ends.
struct Unblock<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How much a held command's client may send meanwhile before holdfast stops reading it (and
/// so stops noticing that it closed) until the command is done.
const READ_WHILE_HELD: usize = 64 * 1024;

/// Runs `handled` (one command) to its end, or until its client is gone: `None` when the
/// client closed while the command was held. A client that is gone gets nothing more, so its
/// held command stops there: one waiting between attempts is dropped (nothing more is
/// dispatched for it), one in flight is left to finish first (its dispatch is counted like
/// any), and the commands it pipelined behind are not sent. The client's socket is read only once a dispatch of the command has failed, so an
/// unheld command costs no read; what the client sends meanwhile is kept in `input` for the
/// commands after it, up to [`READ_WHILE_HELD`].
async fn until_gone<R: AsyncRead + Unpin>(
    mut handled: Pin<&mut impl Future<Output = Flow>>,
    activity: &Activity,
    reader: &mut R,
    input: &mut BytesMut,
) -> Option<Flow> {
    use std::task::Poll;
    activity.failed.store(false, Ordering::Relaxed);
    let mut gone = false;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(flow) = handled.as_mut().poll(cx) {
            // A dispatch in flight when the client closed has finished: nothing behind it
            // is sent.
            return Poll::Ready((!gone).then_some(flow));
        }
        // `handled` was just polled in this task, so a change of `activity` (made inside
        // that poll) is seen here without a wake-up of its own.
        while !gone && activity.failed.load(Ordering::Relaxed) && input.len() < READ_WHILE_HELD {
            let mut room = [0u8; 4096];
            let mut buf = tokio::io::ReadBuf::new(&mut room);
            match Pin::new(&mut *reader).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    input.extend_from_slice(buf.filled());
                }
                Poll::Ready(_) => gone = true,
                Poll::Pending => break,
            }
        }
        if gone && !activity.in_flight.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// Lets `writeln!` append to the output.
struct ErrSink<'a>(&'a mut Output);
impl std::fmt::Write for ErrSink<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl From<ProtocolError> for Frame {
    fn from(e: ProtocolError) -> Frame {
        error(format!("ERR {e}"))
    }
}

impl ClientConn {
    /// Writes a reply holdfast made itself.
    fn reply(&self, out: &mut Output, frame: &Frame) {
        encode_reply(
            out,
            frame,
            self.exec.proto,
            Nils::default(),
            DoubleStyle::default(),
        );
    }

    /// Writes a backend's reply to `command`: as Redis encoded it when it came raw, else its
    /// nils as the command's row says and its doubles as the backend spells them.
    fn reply_to(&self, out: &mut Output, reply: Reply, command: &Command, doubles: DoubleStyle) {
        let frame = match reply {
            Reply::Raw { bytes, proto } if proto == self.exec.proto => {
                return out.put_bytes(&bytes)
            }
            // Never seen: the pool a request goes to speaks the client's protocol.
            raw @ Reply::Raw { .. } => raw.into_frame(),
            Reply::Frame(frame) => *frame,
        };
        self.encode_for(out, &frame, command, doubles);
    }

    /// Writes a decoded reply to `command`: its nils as the command's row says, its doubles
    /// as the backend spells them.
    fn encode_for(&self, out: &mut Output, frame: &Frame, command: &Command, doubles: DoubleStyle) {
        let nils = Nils {
            top: command.spec.nil_is_array(command.args.len()),
            nested: command.spec.nested_nil_array,
        };
        let doubles = if command.spec.human_doubles {
            DoubleStyle::Human
        } else {
            doubles
        };
        encode_reply(out, frame, self.exec.proto, nils, doubles);
    }

    async fn handle(&mut self, parsed: Result<Command, CommandError>, out: &mut Output) -> Flow {
        let started = Instant::now();
        self.state = self.shared.current();
        let command = match parsed {
            Ok(command) => command,
            Err(e) => {
                if let Some(multi) = self.multi.as_mut() {
                    multi.dirty = true;
                }
                let label = match e {
                    CommandError::Unknown { .. } => "unknown",
                    CommandError::UnknownSubcommand { container, .. } => container,
                    CommandError::Arity { name } => name,
                };
                m::request("", label, "refused", started.elapsed());
                self.reply(out, &error(e.reply()));
                return Flow::Continue;
            }
        };
        self.note(&command, started);
        let local = command.local();
        if !self.authed
            && !matches!(
                local,
                Some(Local::Auth | Local::Hello | Local::Quit | Local::Reset)
            )
        {
            self.reply(out, &error("NOAUTH Authentication required."));
            return Flow::Continue;
        }
        // A command sent ahead was permitted when its first dispatch went, which may have
        // applied it: a reload since (a user's namespaces narrowed) must not answer it a
        // refusal, which reads as "not applied". It goes on under what admitted it.
        let permitted = match self.ahead {
            Some(_) => Ok(()),
            None => self.permit(&command),
        };
        if let Err(refusal) = permitted {
            if let Some(multi) = self.multi.as_mut() {
                multi.dirty = true;
            }
            m::request("", command.label(), "refused", started.elapsed());
            self.reply(out, &error(refusal));
            return Flow::Continue;
        }
        if self.subscribed()
            && self.exec.proto == Proto::Resp2
            && !matches!(
                local,
                Some(Local::Subscribe | Local::Ping | Local::Quit | Local::Reset)
            )
        {
            self.reply(out, &subscribe::only_subscribe_commands(command.spec.name));
            return Flow::Continue;
        }
        if let Some(multi) = self.multi.as_mut() {
            let what = transaction::in_multi(local, command.spec.every_backend);
            if what == transaction::InMulti::Refuse {
                multi.dirty = true;
                let text = format!(
                    "ERR holdfast: {} inside MULTI is not served",
                    command.spec.name
                );
                self.reply(out, &error(text));
                return Flow::Continue;
            }
            if what == transaction::InMulti::Queue {
                let limit = self.state.config.server.max_queued_commands;
                if multi.queue.len() >= limit {
                    multi.dirty = true;
                    m::limit("max_queued_commands");
                    let text = format!("ERR holdfast: more than {limit} commands queued in MULTI (server.max_queued_commands)");
                    self.reply(out, &error(text));
                    return Flow::Continue;
                }
                multi.queue.push(command);
                self.reply(out, &simple("QUEUED"));
                return Flow::Continue;
            }
        }
        match local {
            Some(local) => self.local(local, command, out).await,
            None => {
                let (reply, doubles) = self.forward(&command, started).await;
                let before = out.len();
                self.reply_to(out, reply, &command, doubles);
                if let Some(series) = self.routed.take() {
                    series.exchanged(wire_len(&command), out.len() - before);
                }
                Flow::Continue
            }
        }
    }

    /// Counts the command and shows it, with what the client changed of itself, to
    /// `CLIENT LIST`.
    fn note(&self, command: &Command, at: Instant) {
        self.shared.clients.commands.fetch_add(1, Ordering::Relaxed);
        let sub = matches!(command.local(), Some(Local::Client | Local::Command))
            .then(|| command.args.get(1).cloned())
            .flatten();
        let resp = match self.exec.proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        let mut state = self.client.state.lock().unwrap_or_else(|p| p.into_inner());
        state.cmd = (command.spec.name, sub);
        state.last = Some(at);
        state.multi = self.multi.as_ref().map_or(-1, |m| m.queue.len() as i64);
        state.resp = resp;
        if state.name != self.name {
            state.name.clone_from(&self.name);
        }
        if state.user != self.user {
            state.user.clone_from(&self.user);
        }
    }

    /// Sends a command to its namespace's backend through the retry loop.
    async fn forward(&mut self, command: &Command, started: Instant) -> (Reply, DoubleStyle) {
        if let Some((namespace, _)) = &self.ahead {
            // Sent ahead: checked and routed already.
            let namespace = namespace.clone();
            return self.forward_to(namespace, command, started).await;
        }
        // Walked twice rather than collected: no allocation per request.
        let key_count = command.keys().count();
        let max_keys = self.state.config.server.max_keys_per_command;
        if key_count > max_keys {
            m::limit("max_keys_per_command");
            m::request("", command.label(), "refused", started.elapsed());
            let text = format!(
                "ERR holdfast: {key_count} keys in one command; the limit is {max_keys} (server.max_keys_per_command)"
            );
            return (error(text).into(), DoubleStyle::default());
        }
        if command.spec.every_backend {
            return self.every_backend(command, started).await;
        }
        let namespace = match self.route(command) {
            Ok(ns) => ns.clone(),
            Err(e) => {
                m::request("", command.label(), "refused", started.elapsed());
                return (error(e.to_string()).into(), DoubleStyle::default());
            }
        };
        self.forward_to(namespace, command, started).await
    }

    /// The namespace a command goes to: a publish's channel's (`channels`), whatever its keys
    /// say; any other's keys'.
    fn route(&self, command: &Command) -> Result<&Arc<Namespace>, crate::namespace::RouteError> {
        match command.channel() {
            Some(channel) => Ok(self.state.router.namespace_of_channel(channel)),
            None => self.state.router.route(command.keys().map(|k| k.as_ref())),
        }
    }

    /// FLUSHDB, FLUSHALL and SCRIPT: sent once to the backend of each namespace this client
    /// may reach. A backend that also holds a namespace the client may not reach is not its
    /// to empty: NOPERM, and nothing is sent anywhere. `SCRIPT LOAD` and `SCRIPT EXISTS` empty
    /// nothing; the `SCRIPT` commands go to Redis backends only (SQL backends run no scripts).
    async fn every_backend(&mut self, command: &Command, started: Instant) -> (Reply, DoubleStyle) {
        let script = command.spec.name.starts_with("SCRIPT|");
        let harmless = matches!(command.spec.name, "SCRIPT|LOAD" | "SCRIPT|EXISTS");
        let reachable = self.reachable();
        let reach = |ns: &Namespace| {
            reachable
                .as_ref()
                .map_or(true, |names| names.contains(&ns.name))
        };
        let all: Vec<Arc<Namespace>> = self.state.router.namespaces().to_vec();
        let mut targets: Vec<Arc<Namespace>> = Vec::new();
        for ns in all.iter().filter(|ns| reach(ns)) {
            let shared_with_others = all
                .iter()
                .any(|other| Arc::ptr_eq(&other.backend, &ns.backend) && !reach(other));
            if script && matches!(*ns.backend, Backend::Sql(_)) && (harmless || !shared_with_others)
            {
                continue;
            }
            if shared_with_others && !harmless {
                m::request("", command.label(), "refused", started.elapsed());
                let text = format!(
                    "NOPERM this user has no permissions to run the '{}' command",
                    command.spec.name.to_ascii_lowercase()
                );
                return (error(text).into(), DoubleStyle::default());
            }
            if !targets.iter().any(|t| Arc::ptr_eq(&t.backend, &ns.backend)) {
                targets.push(ns.clone());
            }
        }
        if script && targets.is_empty() {
            m::request("", command.label(), "refused", started.elapsed());
            let text = "ERR holdfast: scripts are not served by SQL backends";
            return (error(text).into(), DoubleStyle::default());
        }
        let mut first: Option<(Reply, DoubleStyle)> = None;
        for ns in targets {
            let (reply, doubles) = self.forward_to(ns, command, started).await;
            if reply.is_error() {
                return (reply, doubles);
            }
            first = Some(match first {
                // A script exists only where every backend has it.
                Some((seen, d)) if command.spec.name == "SCRIPT|EXISTS" => {
                    (both_exist(seen, reply), d)
                }
                Some(seen) => seen,
                None => (reply, doubles),
            });
        }
        match command.spec.name {
            "SCRIPT|LOAD" => {
                if let Some(script) = command.args.get(2) {
                    self.state.backends.scripts().remember(script);
                }
            }
            "SCRIPT|FLUSH" => self.state.backends.scripts().forget_all(),
            _ => {}
        }
        first.unwrap_or_else(|| (simple("OK").into(), DoubleStyle::default()))
    }

    /// Sends a command to `namespace`'s backend: a connection-bound one on this client's own
    /// connection, any other through the executor.
    async fn forward_to(
        &mut self,
        namespace: Arc<Namespace>,
        command: &Command,
        started: Instant,
    ) -> (Reply, DoubleStyle) {
        let doubles = namespace.backend.double_style();
        if command.class == Idempotence::ConnectionBound {
            return (
                self.bound(&namespace, command, started).await.into(),
                doubles,
            );
        }
        let sent = self.ahead.take().map(|(_, ahead)| ahead);
        self.routed = Some(namespace.series);
        let in_flight = namespace.series.in_flight();
        let (reply, outcome) = self
            .exec
            .execute(&self.shared.budget, &namespace, command, sent)
            .await;
        drop(in_flight);
        m::request(
            &namespace.name,
            command.label(),
            outcome.ended.label(),
            started.elapsed(),
        );
        (reply, doubles)
    }

    /// A connection-bound command: on this client's own backend connection, never retried.
    async fn bound(
        &mut self,
        namespace: &Arc<Namespace>,
        command: &Command,
        started: Instant,
    ) -> Frame {
        // Only blocking commands are forwarded as connection-bound (transactions are local).
        let route = first_key(command);
        // Its client is watched while it blocks: one that closes is gone at once, and its
        // own backend connection is closed with it, so the backend stops waiting on its
        // behalf (Redis drops a blocked client that disconnects; a SQL waiter leaves its
        // line). Left waiting, it would take the next element pushed for a client that can
        // no longer receive it.
        self.exec.activity().failed.store(true, Ordering::Relaxed);
        self.routed = Some(namespace.series);
        let in_flight = namespace.series.in_flight();
        let replicas = namespace
            .replicas
            .filter(|_| namespace.backend.replicates());
        self.leave_other_backend(namespace).await;
        // Exact mode: a pop that may take something carries a token where the backend can
        // record what it took with it (`Backend::blocks_exactly`).
        let token = (namespace.reply_mode == crate::config::ReplyMode::Exact
            && command.writes()
            && namespace.backend.blocks_exactly())
        .then(|| crate::exec::new_token(self.id));
        let mut own = std::mem::take(&mut self.own);
        let mut link = OwnConn::to(self, Some(namespace), route);
        link.token = token.as_deref().map(str::as_bytes);
        let result = own.alone(&mut link, command, replicas).await;
        self.own = own;
        drop(in_flight);
        let (frame, outcome) = failure_reply(result, &**namespace);
        m::request(
            &namespace.name,
            command.label(),
            outcome.ended.label(),
            started.elapsed(),
        );
        frame
    }

    /// Before a command on `namespace`'s backend: the client's own connection to another
    /// backend is closed, and a WATCH that stood on it is lost. Done before `exec::own`'s state
    /// is lent out for the command, so the state sees it.
    async fn leave_other_backend(&mut self, namespace: &Arc<Namespace>) {
        let other = matches!(&self.dedicated, Some((backend, _)) if !Arc::ptr_eq(backend, &namespace.backend));
        if other {
            if let Some((_, old)) = self.dedicated.take() {
                old.close().await;
            }
            self.own.connection_lost();
        }
    }

    /// The client's own connection to `namespace`'s backend, opened on first use.
    async fn dedicated_for(
        &mut self,
        namespace: &Arc<Namespace>,
    ) -> Result<&Dedicated, BackendError> {
        let same = matches!(&self.dedicated, Some((backend, _)) if Arc::ptr_eq(backend, &namespace.backend));
        if !same {
            // Callers left another backend's connection first (`leave_other_backend`), while
            // its WATCH state was theirs to update.
            if let Some((_, old)) = self.dedicated.take() {
                old.close().await;
            }
            let fresh = namespace
                .backend
                .dedicated(self.exec.proto, namespace.acquire_timeout)
                .await?;
            self.dedicated = Some((namespace.backend.clone(), fresh));
        }
        match &self.dedicated {
            Some((_, dedicated)) => Ok(dedicated),
            None => Err(BackendError::Unsupported {
                what: "no dedicated connection".to_string(),
            }),
        }
    }

    async fn send_dedicated(
        &mut self,
        namespace: &Arc<Namespace>,
        args: &[Bytes],
        blocking: bool,
        route: Option<&[u8]>,
        token: Option<&[u8]>,
    ) -> Result<Frame, BackendError> {
        let proto = self.exec.proto;
        let pin = self.id;
        let clients = self.shared.clients.clone();
        let dedicated = self.dedicated_for(namespace).await?;
        let request = Request {
            // Inside MULTI, Redis runs a blocking command without blocking.
            blocking: if blocking {
                Blocking::of(args)
            } else {
                Blocking::No
            },
            route,
            hold: namespace.policy.backoff.total_before_jitter(),
            token: token.filter(|_| blocking),
            ..Request::new(args, proto, pin)
        };
        let blocked = &clients.blocked;
        if blocking {
            blocked.fetch_add(1, Ordering::Relaxed);
        }
        // Counted down even when the client goes and this future is dropped.
        let _unblock = blocking.then(|| Unblock(blocked));
        let result = dedicated.send(&request).await;
        drop(_unblock);
        result
    }

    async fn local(&mut self, local: Local, command: Command, out: &mut Output) -> Flow {
        let args = &command.args;
        let frame = match local {
            Local::Ping => match (self.subscribed_ping(args.get(1)), args.get(1)) {
                (Some(pong), _) => pong,
                (None, Some(message)) => bulk(message.clone()),
                (None, None) => simple("PONG"),
            },
            Local::Subscribe => return self.subscription(&command, out).await,
            Local::Pubsub => {
                let (reply, doubles) = self.pubsub_query(&command, Instant::now()).await;
                self.reply_to(out, reply, &command, doubles);
                return Flow::Continue;
            }
            Local::Echo => bulk(args.get(1).cloned().unwrap_or_default()),
            // holdfast is one standalone server to its clients, as Redis without cluster
            // mode answers (a cluster client would otherwise think its replicas readable).
            Local::ClusterOnly => error("ERR This instance has cluster support disabled"),
            Local::Quit => {
                self.reply(out, &ok());
                return Flow::Close;
            }
            Local::Hello => self.hello(args),
            Local::Auth => self.auth(args),
            Local::Select => match std::str::from_utf8(args.get(1).map_or(&b""[..], |a| a))
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(0) => ok(),
                Some(_) => error("ERR DB index is out of range"),
                None => error("ERR value is not an integer or out of range"),
            },
            Local::Client => self.client(args),
            Local::Info => bulk(self.info(args)),
            Local::Command => command_reply(args),
            Local::Reset => {
                self.unsubscribe_all().await;
                self.multi = None;
                self.unwatch().await;
                self.exec.proto = Proto::Resp2;
                self.name = None;
                self.authed = open_to_all(&self.state);
                self.user = None;
                simple("RESET")
            }
            Local::Multi => {
                if self.multi.is_some() {
                    error("ERR MULTI calls can not be nested")
                } else {
                    self.multi = Some(Multi {
                        queue: Vec::new(),
                        dirty: false,
                    });
                    ok()
                }
            }
            Local::Discard => {
                if self.multi.take().is_some() {
                    self.unwatch().await;
                    ok()
                } else {
                    error("ERR DISCARD without MULTI")
                }
            }
            Local::Watch => {
                if self.multi.is_some() {
                    error("ERR WATCH inside MULTI is not allowed")
                } else {
                    self.watch(&command).await
                }
            }
            Local::Unwatch => {
                self.unwatch().await;
                ok()
            }
            Local::Exec => return self.exec(out).await,
        };
        self.reply(out, &frame);
        Flow::Continue
    }
}

/// The client's own connection to a namespace's backend, as `exec::own` sends on it: to
/// `route`'s node on a Cluster. Without a namespace (`UNWATCH`) it is the connection there
/// is, whatever its backend.
struct OwnConn<'a> {
    conn: &'a mut ClientConn,
    namespace: Option<&'a Arc<Namespace>>,
    route: Option<&'a [u8]>,
    /// Exact mode's token for the blocking command sent alone on it.
    token: Option<&'a [u8]>,
}

impl<'a> OwnConn<'a> {
    fn to(
        conn: &'a mut ClientConn,
        namespace: Option<&'a Arc<Namespace>>,
        route: Option<&'a [u8]>,
    ) -> OwnConn<'a> {
        OwnConn {
            conn,
            namespace,
            route,
            token: None,
        }
    }
}

impl OwnLink for OwnConn<'_> {
    async fn send(&mut self, args: &[Bytes], blocking: bool) -> Result<Frame, BackendError> {
        match self.namespace {
            Some(namespace) => {
                self.conn
                    .send_dedicated(namespace, args, blocking, self.route, self.token)
                    .await
            }
            None => match &self.conn.dedicated {
                Some((_, dedicated)) => {
                    let request = Request::new(args, self.conn.exec.proto, self.conn.id);
                    dedicated.send(&request).await
                }
                None => Err(BackendError::Unsupported {
                    what: "no connection of its own".to_string(),
                }),
            },
        }
    }

    async fn close(&mut self) {
        if let Some((_, dedicated)) = self.conn.dedicated.take() {
            dedicated.close().await;
        }
    }
}

/// A command's first key: on a Cluster, the node a connection-bound command goes to.
pub(super) fn first_key(command: &Command) -> Option<&[u8]> {
    command.keys().next().map(|k| k.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An inline command counts as the multibulk of its arguments; a multibulk as sent.
    #[test]
    fn a_request_counts_its_bytes_as_resp() {
        let args = |words: &[&str]| words.iter().map(|w| Bytes::from(w.to_string())).collect();
        let inline = Command::parse_raw(args(&["SET", "a", "b"]), None).unwrap();
        assert_eq!(
            wire_len(&inline),
            b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n".len()
        );
        let long = Command::parse_raw(args(&["GET", &"k".repeat(12)]), None).unwrap();
        assert_eq!(
            wire_len(&long),
            b"*2\r\n$3\r\nGET\r\n$12\r\nkkkkkkkkkkkk\r\n".len()
        );
        let raw = Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        let sent = Command::parse_raw(args(&["GET", "k"]), Some(raw.clone())).unwrap();
        assert_eq!(wire_len(&sent), raw.len());
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
    }

    /// A command whose client closed: dropped at once while it waits between attempts; left
    /// to finish while a dispatch is in flight, and then nothing more; never watched before a
    /// dispatch of it failed.
    #[tokio::test]
    async fn a_command_stops_with_its_client_once_nothing_is_in_flight() {
        use std::sync::atomic::Ordering::Relaxed;
        let (client, mut socket) = tokio::io::duplex(64);
        drop(client);
        let activity = Activity::default();
        let mut input = BytesMut::new();
        // Held between attempts: dropped as soon as the close is seen.
        let waiting = async {
            activity.failed.store(true, Relaxed);
            std::future::pending::<Flow>().await
        };
        let waiting = std::pin::pin!(waiting);
        let ended = until_gone(waiting, &activity, &mut socket, &mut input);
        let ended = tokio::time::timeout(Duration::from_secs(5), ended).await;
        assert!(matches!(ended, Ok(None)), "{ended:?}");
        // In flight: finishes first, and what it answers goes nowhere.
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let in_flight = std::pin::pin!(async {
            activity.failed.store(true, Relaxed);
            activity.in_flight.store(true, Relaxed);
            let _ = finished.await;
            activity.in_flight.store(false, Relaxed);
            Flow::Continue
        });
        {
            let ended = until_gone(in_flight, &activity, &mut socket, &mut input);
            tokio::pin!(ended);
            let early = tokio::time::timeout(Duration::from_millis(50), &mut ended).await;
            assert!(early.is_err(), "a dispatch in flight was cut short");
            let _ = finish.send(());
            assert_eq!(ended.await, None);
        }
        // Nothing failed: the client's socket is not looked at, and the command's flow stands.
        let quiet = async { Flow::Continue };
        let ended = until_gone(std::pin::pin!(quiet), &activity, &mut socket, &mut input).await;
        assert_eq!(ended, Some(Flow::Continue));
    }
}
