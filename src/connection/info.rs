//! What a client can ask holdfast about itself: CLIENT, INFO and COMMAND.

use super::*;

impl Conn {
    pub(super) fn client(&mut self, args: &[Bytes]) -> Frame {
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

    pub(super) fn client_line(&self) -> String {
        let name = self
            .name
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let resp = match self.exec.proto {
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

    pub(super) fn info(&self, args: &[Bytes]) -> String {
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
}

/// `COMMAND`, `COMMAND COUNT|INFO|DOCS|LIST`: enough for redis-cli and client libraries.
pub(super) fn command_reply(args: &[Bytes]) -> Frame {
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

pub(super) fn command_info(spec: &table::Spec) -> Frame {
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
