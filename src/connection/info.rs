//! What a client can ask holdfast about itself: CLIENT, INFO and COMMAND.

use super::*;

impl ClientConn {
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
            b"INFO" if args.len() == 2 => bulk(format!("{}\n", self.client_line(&self.client))),
            b"LIST" => self.client_list(args),
            b"KILL" if args.len() >= 3 => self.client_kill(args),
            b"ID" | b"SETNAME" | b"GETNAME" | b"SETINFO" | b"INFO" | b"NO-EVICT" | b"NO-TOUCH"
            | b"KILL" => error(format!(
                "ERR wrong number of arguments for 'client|{}' command",
                String::from_utf8_lossy(&sub).to_ascii_lowercase()
            )),
            _ => error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                crate::command::echo(args.get(1).map(|b| b.as_ref()).unwrap_or(b""))
            )),
        }
    }

    /// One client's `CLIENT LIST` line, with Redis's fields; those holdfast does not track
    /// (buffers, memory, file descriptors) are 0 or -1.
    pub(super) fn client_line(&self, client: &crate::shared::Client) -> String {
        let state = client
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let now = Instant::now();
        let secs = |from: Instant| now.saturating_duration_since(from).as_secs();
        let addr = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
        let name = state
            .name
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let mut cmd = state.cmd.0.to_ascii_lowercase();
        if let Some(sub) = &state.cmd.1 {
            cmd.push('|');
            cmd.push_str(&String::from_utf8_lossy(sub).to_ascii_lowercase());
        }
        if cmd.is_empty() {
            cmd.push_str("NULL");
        }
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub={} \
             multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 \
             tot-mem=0 events=r cmd={} user={} redir=-1 resp={}",
            client.id,
            addr(client.addr),
            addr(client.laddr),
            name,
            secs(client.since),
            state.last.map_or(0, secs),
            // P: a subscriber, as Redis flags one.
            if state.subs.iter().any(|n| *n > 0) { "P" } else { "N" },
            state.subs[0],
            state.subs[1],
            state.subs[2],
            state.multi,
            cmd,
            state.user.as_deref().unwrap_or("default"),
            state.resp
        )
    }

    /// `CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]`: holdfast's own
    /// clients (they are all of type normal).
    fn client_list(&self, args: &[Bytes]) -> Frame {
        let mut ids: Option<Vec<u64>> = None;
        let mut normal = true;
        let mut i = 2;
        while i < args.len() {
            if args[i].eq_ignore_ascii_case(b"TYPE") && i + 1 < args.len() {
                let kind = args[i + 1].to_ascii_lowercase();
                match kind.as_slice() {
                    b"normal" => normal = true,
                    b"master" | b"replica" | b"slave" | b"pubsub" => normal = false,
                    _ => {
                        return error(format!(
                            "ERR Unknown client type '{}'",
                            crate::command::echo(&args[i + 1])
                        ))
                    }
                }
                i += 2;
            } else if args[i].eq_ignore_ascii_case(b"ID") && i + 1 < args.len() {
                let mut wanted = Vec::new();
                for text in &args[i + 1..] {
                    match std::str::from_utf8(text)
                        .ok()
                        .and_then(|t| t.parse::<u64>().ok())
                    {
                        Some(id) if id > 0 => wanted.push(id),
                        _ => return error("ERR Invalid client ID"),
                    }
                }
                ids = Some(wanted);
                i = args.len();
            } else {
                return error("ERR syntax error");
            }
        }
        let mut text = String::new();
        if normal {
            for client in self.shared.clients.all() {
                if ids.as_ref().is_some_and(|ids| !ids.contains(&client.id)) {
                    continue;
                }
                text.push_str(&self.client_line(&client));
                text.push('\n');
            }
        }
        bulk(text)
    }

    /// `CLIENT KILL addr:port` or `CLIENT KILL [ID id] [ADDR addr:port] [LADDR addr:port]
    /// [USER name] [TYPE normal|...] [SKIPME yes|no]`, among holdfast's own clients. Open to
    /// every client without `[[users]]`, to an `admin` user otherwise.
    fn client_kill(&self, args: &[Bytes]) -> Frame {
        if !self.is_admin() {
            return error(super::auth::cannot_run("client|kill"));
        }
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let addr_of = |c: &crate::shared::Client| c.addr.map(|a| a.to_string()).unwrap_or_default();
        if args.len() == 3 {
            // The old form: one address, OK or an error.
            let wanted = text(&args[2]);
            return match self
                .shared
                .clients
                .all()
                .into_iter()
                .find(|c| addr_of(c) == wanted)
            {
                Some(client) => {
                    client.kill();
                    ok()
                }
                None => error("ERR No such client"),
            };
        }
        let (mut id, mut addr, mut laddr, mut user, mut normal, mut skipme) =
            (None, None, None, None, true, true);
        let mut i = 2;
        while i < args.len() {
            let Some(value) = args.get(i + 1) else {
                return error("ERR syntax error");
            };
            let filter = args[i].to_ascii_uppercase();
            match filter.as_slice() {
                b"ID" => match std::str::from_utf8(value)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                {
                    Some(n) if n > 0 => id = Some(n as u64),
                    _ => return error("ERR client-id should be greater than 0"),
                },
                b"ADDR" => addr = Some(text(value)),
                b"LADDR" => laddr = Some(text(value)),
                b"USER" => {
                    let name = text(value);
                    let known =
                        name == "default" || self.state.config.users.iter().any(|u| u.name == name);
                    if !known {
                        return error(format!("ERR No such user '{name}'"));
                    }
                    user = Some(name);
                }
                b"TYPE" => match value.to_ascii_lowercase().as_slice() {
                    b"normal" => normal = true,
                    b"master" | b"replica" | b"slave" | b"pubsub" => normal = false,
                    _ => {
                        return error(format!(
                            "ERR Unknown client type '{}'",
                            crate::command::echo(value)
                        ))
                    }
                },
                b"SKIPME" => match value.to_ascii_lowercase().as_slice() {
                    b"yes" => skipme = true,
                    b"no" => skipme = false,
                    _ => return error("ERR syntax error"),
                },
                _ => return error("ERR syntax error"),
            }
            i += 2;
        }
        let mut killed = 0;
        for client in self.shared.clients.all() {
            let state = client
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let laddr_of = client.laddr.map(|a| a.to_string()).unwrap_or_default();
            let matches = normal
                && id.is_none_or(|id| client.id == id)
                && addr.as_ref().is_none_or(|a| *a == addr_of(&client))
                && laddr.as_ref().is_none_or(|a| *a == laddr_of)
                && user
                    .as_ref()
                    .is_none_or(|u| state.user.as_deref().unwrap_or("default") == u)
                && !(skipme && client.id == self.id);
            if matches && client.kill() {
                killed += 1;
            }
        }
        number(killed)
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
        let clients = &shared.clients;
        if want("clients") {
            let _ = write!(
                text,
                "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:0\r\n\r\n",
                clients.count(),
                state.config.server.max_clients,
                clients.blocked.load(Ordering::Relaxed),
            );
        }
        if want("stats") {
            let _ = write!(
                text,
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\n\r\n",
                clients.received.load(Ordering::Relaxed),
                clients.commands.load(Ordering::Relaxed),
                clients.ops_per_sec(),
            );
        }
        if want("replication") {
            text.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
        }
        if want("cluster") {
            text.push_str("# Cluster\r\ncluster_enabled:0\r\n\r\n");
        }
        if want("keyspace") {
            // Counting keys means asking every backend: `DBSIZE` does, per namespace.
            text.push_str("# Keyspace\r\n\r\n");
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
                    "namespace_{}:backend={},reply_mode={},max_attempts={},acquire_timeout_ms={}\r\n",
                    ns.name,
                    ns.backend.name(),
                    ns.reply_mode.spelling(),
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
    let top = || {
        crate::command::all()
            .iter()
            .filter(|s| !s.name.contains('|'))
    };
    match sub.as_slice() {
        b"" => array(top().map(command_info).collect()),
        b"COUNT" => number(top().count() as i64),
        // Subcommands too, by their full names (`config|get`), as Redis lists them.
        b"LIST" => array(
            crate::command::all()
                .iter()
                .map(|s| bulk(s.name.to_ascii_lowercase()))
                .collect(),
        ),
        b"INFO" => array(
            args.iter()
                .skip(2)
                .map(|name| match crate::command::lookup(name) {
                    Some(spec) => command_info(spec),
                    None => Frame::Null,
                })
                .collect(),
        ),
        // Redis's arity: the command and at least one argument of it.
        b"GETKEYS" | b"GETKEYSANDFLAGS" if args.len() >= 4 => {
            getkeys(args, sub == b"GETKEYSANDFLAGS")
        }
        b"GETKEYS" | b"GETKEYSANDFLAGS" => error(format!(
            "ERR wrong number of arguments for 'command|{}' command",
            String::from_utf8_lossy(&sub).to_ascii_lowercase()
        )),
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

/// `COMMAND GETKEYS command arg ...`: the keys the table finds in the command, as
/// holdfast routes it.
fn getkeys(args: &[Bytes], flags: bool) -> Frame {
    let command = match Command::parse(args[2..].to_vec()) {
        Ok(command) => command,
        Err(CommandError::Arity { .. }) => {
            return error("ERR Invalid number of arguments specified for command")
        }
        Err(_) => return error("ERR Invalid command specified"),
    };
    let keys: Vec<Frame> = command
        .keys()
        .map(|key| {
            if flags {
                array(vec![bulk(key.clone()), array(key_flags(command.spec))])
            } else {
                bulk(key.clone())
            }
        })
        .collect();
    if keys.is_empty() {
        // As Redis words each: a command that never names a key; a script, whose keys may
        // be none; another command whose arguments named none.
        return match command.spec.keys {
            table::Keys::None => error("ERR The command has no key arguments"),
            // Redis's `no_mandatory_keys` commands.
            _ if matches!(
                command.spec.name,
                "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO"
            ) =>
            {
                array(Vec::new())
            }
            _ => error("ERR Invalid arguments specified for command"),
        };
    }
    array(keys)
}

/// A key's flags as Redis's key specs name them: read-only access, or read-write update.
fn key_flags(spec: &table::Spec) -> Vec<Frame> {
    match spec.class {
        Idempotence::Read => vec![simple("RO"), simple("access")],
        _ => vec![simple("RW"), simple("update")],
    }
}

/// The key specs of `COMMAND INFO` for a command whose keys are a range: where the first
/// key is, and how far the range runs (Redis's `begin_search` index / `find_keys` range).
fn key_specs(spec: &table::Spec) -> Vec<Frame> {
    let table::Keys::Range { first, last, step } = spec.keys else {
        return Vec::new();
    };
    let (first, last, step) = (first as i64, last as i64, step as i64);
    let lastkey = if last < 0 { last } else { last - first };
    let map = |pairs: Vec<(&str, Frame)>| Frame::Map {
        data: pairs
            .into_iter()
            .map(|(k, v)| (bulk(k.to_string()), v))
            .collect(),
        attributes: None,
    };
    vec![map(vec![
        ("flags", array(key_flags(spec))),
        (
            "begin_search",
            map(vec![
                ("type", bulk("index")),
                ("spec", map(vec![("index", number(first))])),
            ]),
        ),
        (
            "find_keys",
            map(vec![
                ("type", bulk("range")),
                (
                    "spec",
                    map(vec![
                        ("lastkey", number(lastkey)),
                        ("keystep", number(step)),
                        ("limit", number(0)),
                    ]),
                ),
            ]),
        ),
    ])]
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
    // Clients (redis-py's key finder) read a channel where a Pub/Sub command has a key.
    let pubsub = spec.reach == table::Reach::Channel
        || matches!(
            spec.exec,
            table::Exec::Local(Local::Subscribe | Local::Pubsub)
        )
        || spec.name == "PUBSUB";
    if pubsub {
        flags.push(simple("pubsub"));
    }
    // A container's subcommands, each as a command of its own (`object|encoding`).
    let subcommands: Vec<Frame> = if spec.container {
        let prefix = format!("{}|", spec.name);
        crate::command::all()
            .iter()
            .filter(|s| s.name.starts_with(&prefix))
            .map(command_info)
            .collect()
    } else {
        Vec::new()
    };
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
        array(key_specs(spec)),
        array(subcommands),
    ])
}
