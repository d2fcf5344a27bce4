//! One client connection: framing, the commands holdfast answers itself (HELLO, AUTH, CLIENT,
//! MULTI/EXEC, ...), and in-order execution of everything else through the namespace router
//! and the retry loop.
//!
//! Ordering: requests are taken from the buffer one at a time and each is finished (held
//! through retries if need be) before the next starts, so commands take effect in the order
//! sent and a held command holds only the commands behind it on this connection. Replies to
//! one batch of pipelined requests are flushed with one write.

use crate::backend::DoubleStyle;
use crate::backend::{Backend, BackendError, Dedicated, Proto, Request};
use crate::command::table::{self, Idempotence, Local};
use crate::command::{Command, CommandError};
use crate::error::{classify, ErrorClass};
use crate::metrics::{self as m, RequestHooks};
use crate::namespace::Namespace;
use crate::resp::{encode_reply, Limits, Nils, ProtocolError};
use crate::retry::{self, Failure, GaveUp, Why};
use crate::server::{Shared, State};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

/// Replies are flushed early once this much is buffered, so a deep pipeline cannot grow the
/// output buffer without bound.
const FLUSH_AT: usize = 64 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

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
struct Conn {
    /// Shared proxy state.
    shared: Arc<Shared>,
    /// The configuration generation this command runs under, taken between commands so a
    /// reload never changes a command half-way.
    state: Arc<State>,
    /// Turns true when shutdown's grace period is over.
    give_up: watch::Receiver<bool>,
    /// `CLIENT ID`, also the backend pin.
    id: u64,
    /// The client's protocol.
    proto: Proto,
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
    /// WATCH is active on `dedicated`.
    watching: bool,
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

/// Serves one client until it closes, framing is lost, or shutdown reaches a safe point.
pub async fn serve<S>(stream: S, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let id = shared.next_client_id();
    let state = shared.current();
    let mut conn = Conn {
        authed: open_to_all(&state),
        user: None,
        give_up: shared.give_up_signal(),
        state,
        shared,
        id,
        proto: Proto::Resp2,
        name: None,
        multi: None,
        dedicated: None,
        watching: false,
    };
    let server = &conn.state.config.server;
    let limits = Limits {
        request_bytes: server.max_request_bytes,
        bulk_bytes: server.max_bulk_bytes,
        multibulk_len: server.max_arguments,
    };
    let idle = server.idle_timeout;
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut decoder = crate::resp::Decoder::default();
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    'serve: loop {
        loop {
            match decoder.next(&mut input, &limits) {
                Ok(Some(args)) => {
                    let flow = conn.handle(args, &mut output).await;
                    if flow == Flow::Close {
                        let _ = writer.write_all(&output).await;
                        break 'serve;
                    }
                    if output.len() >= FLUSH_AT {
                        if writer.write_all(&output).await.is_err() {
                            break 'serve;
                        }
                        output.clear();
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    m::limit(e.limit());
                    // Framing is lost: answer why and close this connection only.
                    let _ = writeln!(ErrSink(&mut output), "-ERR {e}\r");
                    let _ = writer.write_all(&output).await;
                    tracing::debug!(client = conn.id, error = %e, "closing on a protocol error");
                    break 'serve;
                }
            }
        }
        if !output.is_empty() {
            if writer.write_all(&output).await.is_err() {
                break;
            }
            output.clear();
        }
        if *shutdown.borrow() {
            break;
        }
        input.reserve(READ_CHUNK);
        let idle_for = async {
            if idle.is_zero() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(idle).await;
        };
        tokio::select! {
            read = reader.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            // Between commands is a safe point to stop.
            _ = shutdown.changed() => break,
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

/// Lets `writeln!` append to a `BytesMut`.
struct ErrSink<'a>(&'a mut BytesMut);
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

impl Conn {
    /// Writes a reply holdfast made itself.
    fn reply(&self, out: &mut BytesMut, frame: &Frame) {
        encode_reply(
            out,
            frame,
            self.proto,
            Nils::default(),
            DoubleStyle::default(),
        );
    }

    /// Writes a backend's reply to `command`: its nils as the command's row says, its doubles
    /// as the backend spells them.
    fn reply_to(&self, out: &mut BytesMut, frame: &Frame, command: &Command, doubles: DoubleStyle) {
        let nils = Nils {
            top: command.spec.nil_is_array(command.args.len()),
            nested: command.spec.nested_nil_array,
        };
        let doubles = if command.spec.human_doubles {
            DoubleStyle::Human
        } else {
            doubles
        };
        encode_reply(out, frame, self.proto, nils, doubles);
    }

    async fn handle(&mut self, args: Vec<Bytes>, out: &mut BytesMut) -> Flow {
        let started = Instant::now();
        self.state = self.shared.current();
        let command = match Command::parse(args) {
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
        if let Err(refusal) = self.permit(&command) {
            if let Some(multi) = self.multi.as_mut() {
                multi.dirty = true;
            }
            m::request("", command.label(), "refused", started.elapsed());
            self.reply(out, &error(refusal));
            return Flow::Continue;
        }
        if let Some(multi) = self.multi.as_mut() {
            if !matches!(
                local,
                Some(
                    Local::Exec
                        | Local::Discard
                        | Local::Multi
                        | Local::Watch
                        | Local::Quit
                        | Local::Reset
                )
            ) {
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
                let (frame, doubles) = self.forward(&command, started).await;
                self.reply_to(out, &frame, &command, doubles);
                Flow::Continue
            }
        }
    }

    /// Sends a command to its namespace's backend through the retry loop.
    async fn forward(&mut self, command: &Command, started: Instant) -> (Frame, DoubleStyle) {
        let shared = self.shared.clone();
        let keys: Vec<&[u8]> = command.keys().map(|k| k.as_ref()).collect();
        let max_keys = self.state.config.server.max_keys_per_command;
        if keys.len() > max_keys {
            m::limit("max_keys_per_command");
            m::request("", command.label(), "refused", started.elapsed());
            let text = format!(
                "ERR holdfast: {} keys in one command; the limit is {max_keys} (server.max_keys_per_command)",
                keys.len()
            );
            return (error(text), DoubleStyle::default());
        }
        let namespace = match self.state.router.route(keys) {
            Ok(ns) => ns.clone(),
            Err(e) => {
                m::request("", command.label(), "refused", started.elapsed());
                return (error(e.to_string()), DoubleStyle::default());
            }
        };
        let doubles = namespace.backend.double_style();
        if command.class == Idempotence::ConnectionBound {
            return (self.bound(&namespace, command, started).await, doubles);
        }
        let request = Request {
            args: &command.args,
            proto: self.proto,
            pin: self.id,
            blocking: false,
        };
        let mut hooks =
            RequestHooks::new(&namespace.name, namespace.backend.name(), command.label());
        let result = retry::run(
            &namespace.policy,
            &shared.budget,
            command.class,
            |e: &BackendError| classify(e),
            &mut hooks,
            &mut self.give_up,
            || {
                namespace
                    .backend
                    .dispatch(&request, namespace.acquire_timeout)
            },
        )
        .await;
        if result.is_ok() {
            hooks.dispatched_ok();
        }
        drop(hooks);
        let (frame, outcome) = failure_reply(result, &namespace);
        m::request(&namespace.name, command.label(), outcome, started.elapsed());
        (frame, namespace.backend.double_style())
    }

    /// A connection-bound command: on this client's own backend connection, never retried.
    async fn bound(
        &mut self,
        namespace: &Arc<Namespace>,
        command: &Command,
        started: Instant,
    ) -> Frame {
        // Only blocking commands are forwarded as connection-bound (transactions are local).
        let result = self.send_dedicated(namespace, &command.args, true).await;
        let (frame, outcome) = failure_reply(result.map_err(bound_failure), namespace);
        m::request(&namespace.name, command.label(), outcome, started.elapsed());
        frame
    }

    /// The client's own connection to `namespace`'s backend, opened on first use.
    async fn dedicated_for(
        &mut self,
        namespace: &Arc<Namespace>,
    ) -> Result<&Dedicated, BackendError> {
        let same = matches!(&self.dedicated, Some((backend, _)) if Arc::ptr_eq(backend, &namespace.backend));
        if !same {
            if let Some((_, old)) = self.dedicated.take() {
                old.close().await;
                self.watching = false;
            }
            let fresh = namespace
                .backend
                .dedicated(self.proto, namespace.acquire_timeout)
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
    ) -> Result<Frame, BackendError> {
        let proto = self.proto;
        let pin = self.id;
        let dedicated = self.dedicated_for(namespace).await?;
        let request = Request {
            args,
            proto,
            pin,
            blocking,
        };
        let result = dedicated.send(&request).await;
        if let Err(e) = &result {
            if classify(e) != ErrorClass::Other {
                // The connection is broken; its WATCH or blocking state is gone with it.
                if let Some((_, d)) = self.dedicated.take() {
                    d.close().await;
                }
                self.watching = false;
            }
        }
        result
    }

    async fn local(&mut self, local: Local, command: Command, out: &mut BytesMut) -> Flow {
        let args = &command.args;
        let frame = match local {
            Local::Ping => match args.get(1) {
                Some(message) => bulk(message.clone()),
                None => simple("PONG"),
            },
            Local::Echo => bulk(args.get(1).cloned().unwrap_or_default()),
            Local::Ok => ok(),
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
                self.multi = None;
                self.unwatch().await;
                self.proto = Proto::Resp2;
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

    fn hello(&mut self, args: &[Bytes]) -> Frame {
        let mut proto = self.proto;
        if let Some(version) = args.get(1) {
            match std::str::from_utf8(version)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(2) => proto = Proto::Resp2,
                Some(3) => proto = Proto::Resp3,
                Some(_) => return error("NOPROTO unsupported protocol version"),
                None => return error("ERR Protocol version is not an integer or out of range"),
            }
        }
        let mut i = 2;
        let mut name = None;
        while i < args.len() {
            let option = &args[i];
            if option.eq_ignore_ascii_case(b"AUTH") && i + 2 < args.len() {
                if !self.check_password(&args[i + 1], &args[i + 2]) {
                    return wrongpass();
                }
                i += 3;
            } else if option.eq_ignore_ascii_case(b"SETNAME") && i + 1 < args.len() {
                name = Some(args[i + 1].clone());
                i += 2;
            } else {
                return error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    crate::command::echo(option)
                ));
            }
        }
        if !self.authed {
            return error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        if name.is_some() {
            self.name = name;
        }
        self.proto = proto;
        let version = match proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        let pairs = vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk(crate::REDIS_VERSION)),
            (bulk("proto"), number(version)),
            (bulk("id"), number(self.id as i64)),
            (bulk("mode"), bulk("standalone")),
            (bulk("role"), bulk("master")),
            (bulk("modules"), array(Vec::new())),
        ];
        Frame::Map {
            data: pairs.into_iter().collect(),
            attributes: None,
        }
    }

    fn auth(&mut self, args: &[Bytes]) -> Frame {
        let config = &self.state.config;
        if args.len() == 2 && config.server.requirepass.is_none() && config.users.is_empty() {
            return error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
        }
        let (user, pass) = match args.len() {
            2 => (Bytes::from_static(b"default"), &args[1]),
            3 => (args[1].clone(), &args[2]),
            _ => return error("ERR syntax error"),
        };
        if self.check_password(&user, pass) {
            ok()
        } else {
            wrongpass()
        }
    }

    /// Checks a user and password; on a match the connection is authenticated as that user.
    /// A failed attempt leaves the connection as it was, as in Redis.
    fn check_password(&mut self, user: &[u8], pass: &[u8]) -> bool {
        let config = &self.state.config;
        let matched = if user == b"default" {
            match config.server.requirepass.as_deref() {
                Some(expected) => constant_time_eq(expected.as_bytes(), pass),
                // Without requirepass, `default` takes any password, as in Redis, unless
                // users are configured: then `default` is off.
                None => config.users.is_empty(),
            }
        } else {
            config
                .users
                .iter()
                .find(|u| u.name.as_bytes() == user)
                .is_some_and(|u| {
                    constant_time_eq(u.password.as_deref().unwrap_or_default().as_bytes(), pass)
                })
        };
        if matched {
            self.authed = true;
            self.user = (user != b"default").then(|| String::from_utf8_lossy(user).into_owned());
        }
        matched
    }

    /// Whether the authenticated user may run `command`, with Redis's `NOPERM` wording when
    /// not. Looked up in the current generation, so a reload that removes a user or narrows
    /// its namespaces applies to connections already authenticated as it.
    fn permit(&self, command: &Command) -> Result<(), String> {
        let Some(name) = &self.user else {
            return Ok(());
        };
        let cannot_run = || {
            format!(
                "NOPERM this user has no permissions to run the '{}' command",
                command.spec.name.to_ascii_lowercase()
            )
        };
        let Some(user) = self.state.config.users.iter().find(|u| &u.name == name) else {
            return Err(cannot_run());
        };
        // Connection commands are every user's; WATCH names keys and is checked below.
        if !matches!(command.local(), None | Some(Local::Watch)) {
            return Ok(());
        }
        if user.read_only && command.local().is_none() && command.class != Idempotence::Read {
            return Err(cannot_run());
        }
        let Some(allowed) = &user.namespaces else {
            return Ok(());
        };
        let router = &self.state.router;
        let mut keys = command.keys().peekable();
        if keys.peek().is_none() {
            return if allowed.contains(&router.catch_all().name) {
                Ok(())
            } else {
                Err(cannot_run())
            };
        }
        for key in keys {
            if !allowed.contains(&router.namespace_of(key).name) {
                return Err(
                    "NOPERM this user has no permissions to access one of the keys used as arguments"
                        .to_string(),
                );
            }
        }
        Ok(())
    }

    fn client(&mut self, args: &[Bytes]) -> Frame {
        let sub = args
            .get(1)
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default();
        match sub.as_slice() {
            b"ID" if args.len() == 2 => number(self.id as i64),
            b"SETNAME" if args.len() == 3 => {
                let name = &args[2];
                if name.iter().any(|b| *b <= b' ' || *b > b'~') {
                    return error(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    );
                }
                self.name = if name.is_empty() {
                    None
                } else {
                    Some(name.clone())
                };
                ok()
            }
            b"GETNAME" if args.len() == 2 => match &self.name {
                Some(name) => bulk(name.clone()),
                None => Frame::Null,
            },
            b"SETINFO" if args.len() == 4 => ok(),
            b"NO-EVICT" | b"NO-TOUCH" if args.len() == 3 => ok(),
            b"INFO" if args.len() == 2 => bulk(format!("{}\n", self.client_line())),
            b"LIST" => bulk(format!("{}\n", self.client_line())),
            b"ID" | b"SETNAME" | b"GETNAME" | b"SETINFO" | b"INFO" | b"NO-EVICT" | b"NO-TOUCH" => {
                error(format!(
                    "ERR wrong number of arguments for 'client|{}' command",
                    String::from_utf8_lossy(&sub).to_ascii_lowercase()
                ))
            }
            _ => error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                crate::command::echo(args.get(1).map(|b| b.as_ref()).unwrap_or(b""))
            )),
        }
    }

    fn client_line(&self) -> String {
        let name = self
            .name
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let resp = match self.proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        format!(
            "id={} name={} db=0 multi={} resp={}",
            self.id,
            name,
            self.multi.as_ref().map_or(-1, |m| m.queue.len() as i64),
            resp
        )
    }

    fn info(&self, args: &[Bytes]) -> String {
        let wanted: Vec<String> = args
            .iter()
            .skip(1)
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| w == "all" || w == "everything" || w == "default");
        let want = |s: &str| all || wanted.iter().any(|w| w == s);
        let shared = &self.shared;
        let state = &self.state;
        let mut text = String::new();
        if want("server") {
            let _ = write!(
                text,
                "# Server\r\nredis_version:{}\r\nholdfast_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
                crate::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::process::id(),
                state.config.server.listen.port(),
                shared.started.elapsed().as_secs(),
            );
        }
        if want("replication") {
            text.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
        }
        if want("holdfast") {
            let _ = write!(
                text,
                "# Holdfast\r\nnamespaces:{}\r\n",
                state.router.namespaces().len()
            );
            for ns in state.router.namespaces() {
                let _ = write!(
                    text,
                    "namespace_{}:backend={},reply_mode={:?},max_attempts={},acquire_timeout_ms={}\r\n",
                    ns.name,
                    ns.backend.name(),
                    ns.reply_mode,
                    ns.policy.backoff.max_attempts,
                    ns.acquire_timeout.as_millis()
                );
            }
            text.push_str("\r\n");
        }
        text
    }

    async fn watch(&mut self, command: &Command) -> Frame {
        let keys: Vec<&[u8]> = command.keys().map(|k| k.as_ref()).collect();
        let namespace = match self.state.router.route(keys) {
            Ok(ns) => ns.clone(),
            Err(e) => return error(e.to_string()),
        };
        if self.watching {
            if let Some((backend, _)) = &self.dedicated {
                if !Arc::ptr_eq(backend, &namespace.backend) {
                    return error(
                        "ERR holdfast: WATCH keys of one transaction must live on one backend",
                    );
                }
            }
        }
        let result = self.send_dedicated(&namespace, &command.args, false).await;
        if result.is_ok() {
            self.watching = true;
        }
        failure_reply(result.map_err(bound_failure), &namespace).0
    }

    async fn unwatch(&mut self) {
        if self.watching {
            if let Some((_, dedicated)) = &self.dedicated {
                let args = [Bytes::from_static(b"UNWATCH")];
                let request = Request {
                    args: &args,
                    proto: self.proto,
                    pin: self.id,
                    blocking: false,
                };
                let _ = dedicated.send(&request).await;
            }
        }
        self.watching = false;
    }

    /// Runs the queued commands as one MULTI/EXEC on the client's own backend connection.
    async fn exec(&mut self, out: &mut BytesMut) -> Flow {
        let started = Instant::now();
        let Some(multi) = self.multi.take() else {
            self.reply(out, &error("ERR EXEC without MULTI"));
            return Flow::Continue;
        };
        if multi.dirty {
            self.unwatch().await;
            self.reply(
                out,
                &error("EXECABORT Transaction discarded because of previous errors."),
            );
            return Flow::Continue;
        }
        let keys: Vec<&[u8]> = multi
            .queue
            .iter()
            .flat_map(|c| c.keys())
            .map(|k| k.as_ref())
            .collect();
        let routed = self.state.router.route(keys).map(Arc::clone);
        let namespace = match routed {
            Ok(ns) => ns,
            Err(e) => {
                self.unwatch().await;
                self.reply(out, &error(e.to_string()));
                return Flow::Continue;
            }
        };
        if self.watching {
            if let Some((backend, _)) = &self.dedicated {
                if !Arc::ptr_eq(backend, &namespace.backend) {
                    self.unwatch().await;
                    self.reply(
                        out,
                        &error("ERR holdfast: WATCH and EXEC keys must live on one backend"),
                    );
                    return Flow::Continue;
                }
            }
        }
        let result = self.run_transaction(&namespace, &multi.queue).await;
        self.watching = false;
        let frame = match result {
            Ok(frame) => frame,
            Err(failure) => {
                let (frame, outcome) = failure_reply(Err(failure), &namespace);
                m::request(&namespace.name, "EXEC", outcome, started.elapsed());
                self.reply(out, &frame);
                return Flow::Continue;
            }
        };
        m::request(&namespace.name, "EXEC", "ok", started.elapsed());
        let doubles = namespace.backend.double_style();
        match &frame {
            // Each element is its own command's reply, nils and all.
            Frame::Array { data, .. } if data.len() == multi.queue.len() => {
                let _ = write!(ErrSink(out), "*{}\r\n", data.len());
                for (item, command) in data.iter().zip(&multi.queue) {
                    self.reply_to(out, item, command, doubles);
                }
            }
            // A nil EXEC (a WATCHed key changed) is a null array.
            _ => encode_reply(
                out,
                &frame,
                self.proto,
                Nils {
                    top: true,
                    nested: None,
                },
                doubles,
            ),
        }
        Flow::Continue
    }

    async fn run_transaction(
        &mut self,
        namespace: &Arc<Namespace>,
        queue: &[Command],
    ) -> Result<Frame, Failure<BackendError>> {
        let multi = [Bytes::from_static(b"MULTI")];
        // Nothing is applied before EXEC is sent: a failure up to there is not in doubt.
        self.send_dedicated(namespace, &multi, false)
            .await
            .map_err(not_applied)?;
        for command in queue {
            match self.send_dedicated(namespace, &command.args, false).await {
                Ok(_) => {}
                // Redis answered the queueing itself with an error; EXEC will say EXECABORT.
                Err(BackendError::Reply { .. }) => {}
                Err(e) => return Err(not_applied(e)),
            }
        }
        let exec = [Bytes::from_static(b"EXEC")];
        self.send_dedicated(namespace, &exec, false)
            .await
            .map_err(bound_failure)
    }
}

/// Whether a new connection needs no AUTH: no `requirepass` and no users.
fn open_to_all(state: &State) -> bool {
    state.config.server.requirepass.is_none() && state.config.users.is_empty()
}

/// A failure before EXEC was sent: a transaction that never reached EXEC applied nothing.
fn not_applied(error: BackendError) -> Failure<BackendError> {
    match classify(&error) {
        ErrorClass::Other => Failure::Answer(error),
        class => Failure::Unavailable(GaveUp {
            last: error,
            class,
            attempts: 1,
            elapsed: Duration::ZERO,
            why: Why::MustNotRepeat,
        }),
    }
}

/// The failure of a single, never-retried dispatch on a dedicated connection.
fn bound_failure(error: BackendError) -> Failure<BackendError> {
    let class = classify(&error);
    let gave_up = |last| GaveUp {
        last,
        class,
        attempts: 1,
        elapsed: Duration::ZERO,
        why: Why::MustNotRepeat,
    };
    match class {
        ErrorClass::Other => Failure::Answer(error),
        ErrorClass::NotAttempted => Failure::Unavailable(gave_up(error)),
        ErrorClass::Transient => Failure::InDoubt(gave_up(error)),
    }
}

/// The reply and the metric outcome of a request's result.
fn failure_reply(
    result: Result<Frame, Failure<BackendError>>,
    namespace: &Namespace,
) -> (Frame, &'static str) {
    match result {
        Ok(frame) => (frame, "ok"),
        Err(Failure::Answer(BackendError::Reply { frame, .. })) => (*frame, "error_reply"),
        Err(Failure::Answer(other)) => (
            error(format!("ERR holdfast: {}", chain(&other))),
            "error_reply",
        ),
        Err(Failure::Unavailable(g)) => (
            error(gave_up_text("UNAVAILABLE", "not applied", &g, namespace)),
            "unavailable",
        ),
        Err(Failure::InDoubt(g)) => (
            error(gave_up_text(
                "INDOUBT",
                "may have been applied",
                &g,
                namespace,
            )),
            "indoubt",
        ),
    }
}

fn gave_up_text(code: &str, what: &str, g: &GaveUp<BackendError>, namespace: &Namespace) -> String {
    let class = match g.class {
        ErrorClass::NotAttempted => "not attempted",
        ErrorClass::Transient => "may have been applied",
        ErrorClass::Other => "answered",
    };
    let why = match g.why {
        Why::Exhausted => "retry budget exhausted",
        Why::MustNotRepeat => "not retried",
        Why::ShuttingDown => "holdfast is shutting down",
    };
    format!(
        "{code} {what}: {why} after {} attempt{} in {:.1}s (namespace '{}', backend '{}', last failure {class}: {})",
        g.attempts,
        if g.attempts == 1 { "" } else { "s" },
        g.elapsed.as_secs_f64(),
        namespace.name,
        namespace.backend.name(),
        chain(&g.last)
    )
}

/// An error and its sources on one line (an error reply cannot hold a newline).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let _ = write!(text, ": {e}");
        source = e.source();
    }
    text.replace(['\r', '\n'], " ")
}

/// Compares without an early exit, so timing does not reveal how much of a password matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// `COMMAND`, `COMMAND COUNT|INFO|DOCS|LIST`: enough for redis-cli and client libraries.
fn command_reply(args: &[Bytes]) -> Frame {
    let sub = args
        .get(1)
        .map(|s| s.to_ascii_uppercase())
        .unwrap_or_default();
    let top = || table::all().iter().filter(|s| !s.name.contains('|'));
    match sub.as_slice() {
        b"" => array(top().map(command_info).collect()),
        b"COUNT" => number(top().count() as i64),
        b"LIST" => array(top().map(|s| bulk(s.name.to_ascii_lowercase())).collect()),
        b"INFO" => array(
            args.iter()
                .skip(2)
                .map(|name| match table::lookup(name) {
                    Some(spec) => command_info(spec),
                    None => Frame::Null,
                })
                .collect(),
        ),
        // Documentation is optional for clients; an empty map says "none".
        b"DOCS" => Frame::Map {
            data: Default::default(),
            attributes: None,
        },
        _ => error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            crate::command::echo(args.get(1).map(|b| b.as_ref()).unwrap_or(b""))
        )),
    }
}

fn command_info(spec: &table::Spec) -> Frame {
    let (first, last, step) = match spec.keys {
        table::Keys::Range { first, last, step } => (first as i64, last as i64, step as i64),
        _ => (0, 0, 0),
    };
    let mut flags = Vec::new();
    match spec.class {
        Idempotence::Read => flags.push(simple("readonly")),
        Idempotence::ConnectionBound => flags.push(simple("blocking")),
        _ => flags.push(simple("write")),
    }
    if !matches!(spec.keys, table::Keys::Range { .. } | table::Keys::None) {
        flags.push(simple("movablekeys"));
    }
    array(vec![
        bulk(spec.name.to_ascii_lowercase()),
        number(i64::from(spec.arity)),
        Frame::Set {
            data: flags.into_iter().collect(),
            attributes: None,
        },
        number(first),
        number(last),
        number(step),
        array(Vec::new()),
        array(Vec::new()),
        array(Vec::new()),
        array(Vec::new()),
    ])
}
