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
mod bound;
mod forward;
mod held;
mod info;
mod local;
mod monitor;
mod moving;
mod pipelined;
mod scripted;
mod subscribe;
mod transaction;

use auth::open_to_all;
use bound::{first_key, OwnConn};
use forward::wire_len;
use held::until_gone;

use crate::backend::DoubleStyle;
use crate::backend::{Backend, BackendError, Dedicated, Proto, Reply};
use crate::command::table::{self, Idempotence, Local};
use crate::command::{Command, CommandError};
use crate::exec::own::Own;
use crate::exec::{failure_reply, Ahead, Session};
use crate::metrics as m;
use crate::namespace::Namespace;
use crate::resp::frame::{array, bulk, error, number, ok, simple};
use crate::resp::{encode_reply, Limits, Nils, Output, ProtocolError, Sink};
use crate::shared::{Shared, State};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
// The TSC clock: a request reads it twice, and the system clock is dearer to read.
use quanta::Instant;

/// Replies are flushed early once this much is buffered, so a deep pipeline cannot grow the
/// output buffer without bound.
const FLUSH_AT: usize = 64 * 1024;
/// Read buffer growth step while a request is arriving in parts.
const READ_CHUNK: usize = 16 * 1024;
/// Room for the next read when no partial request is buffered: small, so an idle client
/// holds a few KiB, not a whole chunk.
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
    /// Set by `MONITOR` (`monitor.rs`): the feed this client is sent.
    monitoring: Option<Box<monitor::Monitoring>>,
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
    // `_leave` takes the client off `CLIENT LIST` when serving ends.
    let (mut conn, _leave) = ClientConn::new(shared, addrs);
    let activity = conn.exec.activity();
    let server = &conn.state.config.server;
    let mut requests = Requests::new(server);
    let idle = server.idle_timeout;
    let mut input = BytesMut::new();
    let mut output = Output::default();
    let mut batch: VecDeque<Result<Command, CommandError>> = VecDeque::new();
    let mut read_size = READ_CHUNK;
    // Between commands is a safe point to stop. One wait for the whole connection, not a
    // `changed()` per read, which would join and leave the channel for every request.
    let stopping = stopped(shutdown.clone());
    tokio::pin!(stopping);
    let killed = conn.client.clone();
    let killed = killed.kill.notified();
    tokio::pin!(killed);
    'serve: loop {
        loop {
            // Every complete request in the buffer (up to max_pipeline), then each in order.
            let framing = requests.decode(&mut input, &mut batch);
            if batch.is_empty() && framing.is_none() {
                break;
            }
            while !batch.is_empty() {
                // The next run that may go ahead together, or one request on its own (a
                // lone request is not looked at twice: `handle` routes it). Not boxed: that
                // would shrink an idle connection's memory but cost CPU on every request.
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
                    // take room twice in every connection's task.
                    let flow = {
                        let handled = conn.handle(parsed, &mut output);
                        tokio::pin!(handled);
                        until_gone(handled, &activity, &mut reader, &mut input).await
                    };
                    let Some(flow) = flow else {
                        tracing::debug!(
                            client = conn.id,
                            "client closed while its command was held"
                        );
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
                framing_lost(&e, conn.id, &mut output);
                let _ = output.write_to(&mut writer).await;
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
        let room = make_room(&mut input, read_size);
        tokio::select! {
            // The read first: shutdown is also looked at before each read, above.
            biased;
            read = reader.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => read_size = next_read_size(n, room, read_size),
            },
            // What its subscriptions delivered, or the MONITOR feed: never ready without.
            pushed = monitor::next_push(&mut conn.subs, &mut conn.monitoring) => {
                if !conn.push(pushed, &mut output) {
                    break;
                }
            }
            () = &mut stopping => break,
            () = &mut killed => break,
            () = idle_for(idle) => {
                m::limit("idle_timeout");
                break;
            }
        }
    }
    let _ = writer.shutdown().await;
    conn.close_own().await;
}

impl ClientConn {
    /// A new client, known to `CLIENT LIST` until it is dropped.
    fn new(
        shared: Arc<Shared>,
        addrs: (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>),
    ) -> (ClientConn, crate::shared::Leave) {
        let id = shared.next_client_id();
        let state = shared.current();
        let (client, leave) = shared.clients.join(id, addrs.0, addrs.1);
        let conn = ClientConn {
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
            monitoring: None,
        };
        (conn, leave)
    }
}

/// A client's requests as they are framed: the decoder and the bounds `[server]` sets.
struct Requests {
    decoder: crate::resp::Decoder,
    /// What one request may make holdfast buffer.
    limits: Limits,
    /// Most requests decoded ahead of their turn.
    max_pipeline: usize,
}

impl Requests {
    fn new(server: &crate::config::ServerConfig) -> Requests {
        Requests {
            decoder: crate::resp::Decoder::default(),
            limits: Limits {
                request_bytes: server.max_request_bytes,
                bulk_bytes: server.max_bulk_bytes,
                multibulk_len: server.max_arguments,
            },
            max_pipeline: server.max_pipeline,
        }
    }

    /// Decodes every complete request in `input` into `batch`, up to `max_pipeline` in it;
    /// the error that lost framing, if one did.
    fn decode(
        &mut self,
        input: &mut BytesMut,
        batch: &mut VecDeque<Result<Command, CommandError>>,
    ) -> Option<ProtocolError> {
        while batch.len() < self.max_pipeline {
            match self.decoder.next_request(input, &self.limits) {
                Ok(Some(request)) => {
                    batch.push_back(Command::parse_raw(request.args, request.raw));
                }
                Ok(None) => return None,
                Err(e) => return Some(e),
            }
        }
        None
    }
}

/// Framing is lost: the client is told why, and only this connection is closed.
fn framing_lost(e: &ProtocolError, client: u64, output: &mut Output) {
    m::limit(e.limit());
    let _ = writeln!(ErrSink(output), "-ERR {e}\r");
    tracing::debug!(client, error = %e, "closing on a protocol error");
}

/// Reserves room for the next read and returns how much there is: `read_size` while a request
/// is arriving in parts, a little for an idle client (what an idle connection holds).
fn make_room(input: &mut BytesMut, read_size: usize) -> usize {
    input.reserve(if input.is_empty() && read_size == READ_CHUNK {
        IDLE_CHUNK
    } else {
        read_size
    });
    input.capacity() - input.len()
}

/// The room the next read gets while a partial request is buffered: a read that filled all
/// the `room` it had earns the next one twice as much, up to [`READ_MAX`]; one that did not
/// goes back to [`READ_CHUNK`].
fn next_read_size(read: usize, room: usize, read_size: usize) -> usize {
    if read == room {
        (read_size * 2).min(READ_MAX)
    } else {
        READ_CHUNK
    }
}

/// Ends when shutdown is signalled.
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.changed().await;
}

/// Ends after `idle` (never when it is zero: no idle timeout).
async fn idle_for(idle: std::time::Duration) {
    if idle.is_zero() {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(idle).await;
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
                    CommandError::UnknownSubcommand { container, .. } => {
                        m::refused_label(container)
                    }
                    CommandError::Arity { name } => m::refused_label(name),
                };
                m::request(self.catch_all(), label, "refused", started.elapsed());
                self.reply(out, &error(e.reply()));
                return Flow::Continue;
            }
        };
        self.note(&command, started);
        self.feed_monitors(&command);
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
            m::request(
                self.catch_all(),
                command.label(),
                "refused",
                started.elapsed(),
            );
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
        if self.monitoring.is_some() && !matches!(local, Some(Local::Quit | Local::Reset)) {
            self.reply(
                out,
                &error("ERR holdfast: a client in MONITOR mode may send only QUIT and RESET"),
            );
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
        let mut state = self.client.state.lock().unwrap_or_else(|p| p.into_inner());
        state.cmd = (command.spec.name, sub);
        state.last = Some(at);
        state.multi = self.multi.as_ref().map_or(-1, |m| m.queue.len() as i64);
        drop(state);
        self.show_identity();
    }

    /// Shows the client's name, user and protocol to `CLIENT LIST` as they are now.
    fn show_identity(&self) {
        let mut state = self.client.state.lock().unwrap_or_else(|p| p.into_inner());
        state.resp = match self.exec.proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        if state.name != self.name {
            state.name.clone_from(&self.name);
        }
        if state.user != self.user {
            state.user.clone_from(&self.user);
        }
    }
}

#[cfg(test)]
mod tests;
