//! Differential tests: what a client gets from holdfast must equal, byte for byte, what the same
//! client gets from the same redis-server directly (docs/decisions.md, "Decisions where the design is
//! silent": replies pass through unchanged).
//!
//! Method: every test starts its own redis-server (a few milliseconds) and a holdfast in front
//! of it. A script of commands runs first against Redis directly and its raw replies are
//! collected; then `FLUSHALL`; then the same script runs through holdfast and its replies are
//! compared with the direct ones. A server per test keeps tests independent and parallel-safe
//! (a process-wide shared server would never be dropped, so its redis-server would outlive the
//! test binary), and lets each comparison start from an empty keyspace, so replies that name
//! keys (KEYS, SCAN) are compared as they are, without rewriting prefixes.
//!
//! Where Redis itself is not deterministic between two runs of the same script, the comparison
//! says so and is narrowed to exactly that (see [`Cmp`]): hash-table iteration order (KEYS,
//! SCAN, SMEMBERS of a non-integer set) is compared as a sorted multiset, and remaining TTLs in
//! milliseconds within a tolerance. Everything else is compared byte for byte.

// Not every helper of the shared support module is used here.
#[allow(unused_imports)]
use crate::support::resp::frame_len;
use crate::support::*;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Read as _;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, RespVersion};

/// One command: its arguments, binary-safe.
type Cmd = Vec<Vec<u8>>;

/// Builds a [`Cmd`] from anything byte-like (`&str`, `String`, `Vec<u8>`, `b"..."`).
macro_rules! cmd {
    ($($arg:expr),+ $(,)?) => {
        vec![$(AsRef::<[u8]>::as_ref(&$arg).to_vec()),+]
    };
}

/// Bound on every wait in this file that is not already bounded by `RawConn` (10 s per reply).
const LIMIT: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------------------------------
// Scripts and how their replies are compared
// ------------------------------------------------------------------------------------------

/// How a step's two replies are compared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cmp {
    /// Byte for byte.
    Exact,
    /// An aggregate whose element order is hash-table order (KEYS, SMEMBERS of a string set):
    /// same type byte, same count, same elements byte for byte, order ignored.
    Sorted,
    /// A SCAN reply: the cursor byte for byte, the keys as in `Sorted`.
    ScanSorted,
    /// An integer reply that counts down with the clock (TTL, PTTL): both integers, both
    /// negative and equal (no expiry / no key), or both non-negative and at most this far apart.
    IntWithin(i64),
}

/// One command of a script.
struct Step {
    /// Which of the script's connections sends it.
    conn: usize,
    cmd: Cmd,
    cmp: Cmp,
    /// What Redis itself must answer: checks that the script exercises what it means to.
    expect: Option<Vec<u8>>,
}

/// A list of commands, each sent on one of a few connections, one reply read after each.
#[derive(Default)]
struct Script {
    steps: Vec<Step>,
    /// Connection used by the next step.
    conn: usize,
}

impl Script {
    fn new() -> Script {
        Script::default()
    }

    /// The following steps go to connection `conn` (0 is the default).
    fn on(&mut self, conn: usize) -> &mut Script {
        self.conn = conn;
        self
    }

    fn push(&mut self, cmd: Cmd, cmp: Cmp, expect: Option<&[u8]>) -> &mut Script {
        self.steps.push(Step {
            conn: self.conn,
            cmd,
            cmp,
            expect: expect.map(<[u8]>::to_vec),
        });
        self
    }

    /// A step compared byte for byte.
    fn add(&mut self, cmd: Cmd) -> &mut Script {
        self.push(cmd, Cmp::Exact, None)
    }

    /// A step compared byte for byte, where Redis must answer `direct`.
    fn expect(&mut self, cmd: Cmd, direct: &[u8]) -> &mut Script {
        self.push(cmd, Cmp::Exact, Some(direct))
    }

    /// A step compared with `cmp`.
    fn cmp(&mut self, cmd: Cmd, cmp: Cmp) -> &mut Script {
        self.push(cmd, cmp, None)
    }

    fn connections(&self) -> usize {
        self.steps.iter().map(|s| s.conn + 1).max().unwrap_or(1)
    }
}

/// The protocol a script's connections speak.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    Resp2,
    Resp3,
}

// ------------------------------------------------------------------------------------------
// Printing and RESP inspection
// ------------------------------------------------------------------------------------------

/// Bytes as an escaped, bounded string (a 1 MB reply prints its first bytes and its length).
fn show(raw: &[u8]) -> String {
    const MAX: usize = 300;
    let mut s = String::new();
    for &b in raw.iter().take(MAX) {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\x{b:02x}");
            }
        }
    }
    if raw.len() > MAX {
        let _ = write!(s, "... ({} bytes in all)", raw.len());
    }
    format!("\"{s}\"")
}

fn show_cmd(cmd: &Cmd) -> String {
    cmd.iter()
        .map(|a| {
            if a.len() > 60 {
                format!("<{} bytes>", a.len())
            } else {
                show(a)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The header line (with its CRLF) of an aggregate reply and its element frames. A map's
/// keys and values come as alternating elements; a null aggregate has none.
fn elements(raw: &[u8]) -> (&[u8], Vec<&[u8]>) {
    let eol = raw
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or_else(|| panic!("no CRLF in reply {}", show(raw)));
    let header = &raw[..eol + 2];
    assert!(
        matches!(raw[0], b'*' | b'~' | b'%' | b'>'),
        "not an aggregate reply: {}",
        show(raw)
    );
    let n: i64 = std::str::from_utf8(&raw[1..eol])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad aggregate header {}", show(header)));
    let count = if n < 0 {
        0
    } else if raw[0] == b'%' {
        2 * n as usize
    } else {
        n as usize
    };
    let mut items = Vec::with_capacity(count);
    let mut at = eol + 2;
    for _ in 0..count {
        let len =
            frame_len(&raw[at..]).unwrap_or_else(|| panic!("incomplete element in {}", show(raw)));
        items.push(&raw[at..at + len]);
        at += len;
    }
    assert_eq!(at, raw.len(), "trailing bytes after {}", show(raw));
    (header, items)
}

fn sorted_form(raw: &[u8]) -> Vec<u8> {
    if !matches!(raw.first(), Some(b'*' | b'~')) {
        return raw.to_vec();
    }
    let (header, mut items) = elements(raw);
    items.sort();
    let mut out = header.to_vec();
    for item in items {
        out.extend_from_slice(item);
    }
    out
}

fn scan_form(raw: &[u8]) -> Vec<u8> {
    if raw.first() != Some(&b'*') {
        return raw.to_vec();
    }
    let (header, items) = elements(raw);
    let mut out = header.to_vec();
    for (i, item) in items.iter().enumerate() {
        if i == 1 {
            out.extend_from_slice(&sorted_form(item));
        } else {
            out.extend_from_slice(item);
        }
    }
    out
}

fn int_reply(raw: &[u8]) -> Option<i64> {
    let text = raw.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Whether two replies to a step agree under its comparison.
fn agree(cmp: Cmp, direct: &[u8], proxied: &[u8]) -> bool {
    match cmp {
        Cmp::Exact => direct == proxied,
        Cmp::Sorted => sorted_form(direct) == sorted_form(proxied),
        Cmp::ScanSorted => scan_form(direct) == scan_form(proxied),
        Cmp::IntWithin(tolerance) => match (int_reply(direct), int_reply(proxied)) {
            (Some(a), Some(b)) if a < 0 || b < 0 => a == b,
            (Some(a), Some(b)) => (a - b).abs() <= tolerance,
            _ => false,
        },
    }
}

/// Compares two runs of `script`; panics listing every step that differs.
fn assert_same(what: &str, script: &Script, direct: &[Vec<u8>], proxied: &[Vec<u8>]) {
    assert_eq!(direct.len(), script.steps.len(), "{what}: direct run");
    assert_eq!(proxied.len(), script.steps.len(), "{what}: proxied run");
    let mut bad_script = Vec::new();
    let mut differ = Vec::new();
    for (i, step) in script.steps.iter().enumerate() {
        if let Some(expected) = &step.expect {
            if &direct[i] != expected {
                bad_script.push(format!(
                    "  #{i} conn {} {}\n     redis answered {}\n     the script expects {}",
                    step.conn,
                    show_cmd(&step.cmd),
                    show(&direct[i]),
                    show(expected)
                ));
            }
        }
        if !agree(step.cmp, &direct[i], &proxied[i]) {
            differ.push(format!(
                "  #{i} conn {} {} (compared {:?})\n     redis:    {}\n     holdfast: {}",
                step.conn,
                show_cmd(&step.cmd),
                step.cmp,
                show(&direct[i]),
                show(&proxied[i])
            ));
        }
    }
    assert!(
        bad_script.is_empty(),
        "{what}: the script's assumptions about redis-server do not hold:\n{}",
        bad_script.join("\n")
    );
    assert!(
        differ.is_empty(),
        "{what}: {} of {} replies differ between redis-server and holdfast:\n{}",
        differ.len(),
        script.steps.len(),
        differ.join("\n")
    );
}

// ------------------------------------------------------------------------------------------
// The servers and running scripts
// ------------------------------------------------------------------------------------------

/// A redis-server and a holdfast in front of it.
struct Env {
    // Declared first so it is dropped (aborted) before the redis-server is killed.
    proxy: Proxy,
    redis: RedisServer,
}

impl Env {
    async fn start() -> Env {
        let redis = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("starting redis-server");
        let proxy = Proxy::start(&one_backend(&redis.url(), "ns", "")).await;
        Env { proxy, redis }
    }

    fn direct(&self) -> String {
        self.redis.addr()
    }

    fn proxied(&self) -> String {
        self.proxy.addr.clone()
    }

    async fn flushall(&self) {
        let mut c = RawConn::connect(&self.direct()).await;
        assert_eq!(c.command(&["FLUSHALL"]).await, b"+OK\r\n");
    }

    /// Runs `script` against Redis, flushes, runs it through holdfast, flushes, and compares.
    /// The script's expectations are written for RESP2; in RESP3 they are translated.
    async fn differential(&self, what: &str, proto: Proto, script: &Script) {
        let translated;
        let script = if proto == Proto::Resp3 {
            translated = resp3_expectations(script);
            &translated
        } else {
            script
        };
        let direct = run(&self.direct(), proto, script, false).await;
        self.flushall().await;
        let proxied = run(&self.proxied(), proto, script, true).await;
        self.flushall().await;
        assert_same(what, script, &direct, &proxied);
    }

    /// Waits until Redis reports `n` clients blocked in a blocking command.
    async fn wait_blocked(&self, n: usize) {
        let deadline = Instant::now() + LIMIT;
        let mut c = RawConn::connect(&self.direct()).await;
        let want = format!("blocked_clients:{n}\r\n");
        loop {
            let info = c.command(&["INFO", "clients"]).await;
            if String::from_utf8_lossy(&info).contains(&want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis never reported {want:?}: {}",
                show(&info)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// `script` with its RESP2 expectations of Redis rewritten for RESP3: nulls are `_`, and a
/// SMEMBERS reply is a set.
fn resp3_expectations(script: &Script) -> Script {
    let steps = script
        .steps
        .iter()
        .map(|step| {
            let expect = step.expect.as_ref().map(|e| match e.as_slice() {
                b"*-1\r\n" | b"$-1\r\n" => b"_\r\n".to_vec(),
                [b'*', rest @ ..] if step.cmd[0].eq_ignore_ascii_case(b"SMEMBERS") => {
                    [b"~", rest].concat()
                }
                // A flat array of 2n field/value pairs becomes a map of n.
                [b'*', ..] if step.cmd[0].eq_ignore_ascii_case(b"HGETALL") => {
                    let (_, items) = elements(e);
                    let mut map = format!("%{}\r\n", items.len() / 2).into_bytes();
                    map.extend(items.concat());
                    map
                }
                other => other.to_vec(),
            });
            Step {
                conn: step.conn,
                cmd: step.cmd.clone(),
                cmp: step.cmp,
                expect,
            }
        })
        .collect();
    Script { steps, conn: 0 }
}

fn encode_cmd(cmd: &Cmd) -> Vec<u8> {
    let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
    encode(&args)
}

/// Switches `c` to RESP3. Holdfast answers HELLO itself, so its reply is not compared with
/// Redis's byte for byte; `check_hello3` checks its shape instead.
async fn hello3(c: &mut RawConn, is_holdfast: bool) {
    let reply = c.command(&["HELLO", "3"]).await;
    if is_holdfast {
        check_hello3(&reply);
    } else {
        assert!(reply.starts_with(b"%"), "redis HELLO 3: {}", show(&reply));
    }
}

/// Holdfast's `HELLO 3` reply is a RESP3 map with Redis's keys, in Redis's order, and says
/// `server` redis, a `version` 7.x and `proto` 3.
fn check_hello3(reply: &[u8]) {
    assert!(
        reply.starts_with(b"%"),
        "holdfast HELLO 3 is not a map: {}",
        show(reply)
    );
    let (_, items) = elements(reply);
    let pairs: Vec<(&[u8], &[u8])> = items.chunks(2).map(|p| (p[0], p[1])).collect();
    let keys: Vec<&[u8]> = pairs.iter().map(|p| p.0).collect();
    let redis_keys: Vec<Vec<u8>> = [
        "server", "version", "proto", "id", "mode", "role", "modules",
    ]
    .iter()
    .map(|k| format!("${}\r\n{k}\r\n", k.len()).into_bytes())
    .collect();
    assert_eq!(
        keys,
        redis_keys.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        "holdfast HELLO 3 keys: {}",
        show(reply)
    );
    let value = |k: &str| {
        pairs[keys
            .iter()
            .position(|x| x.ends_with(format!("{k}\r\n").as_bytes()))
            .unwrap()]
        .1
    };
    assert_eq!(value("server"), b"$5\r\nredis\r\n", "{}", show(reply));
    assert!(
        value("version").starts_with(b"$") && value("version").windows(3).any(|w| w == b"\n7."),
        "holdfast HELLO 3 version: {}",
        show(reply)
    );
    assert_eq!(value("proto"), b":3\r\n", "{}", show(reply));
}

/// Runs `script` against `addr`: one reply read after each command.
async fn run(addr: &str, proto: Proto, script: &Script, is_holdfast: bool) -> Vec<Vec<u8>> {
    let mut conns = Vec::new();
    for _ in 0..script.connections() {
        let mut c = RawConn::connect(addr).await;
        if proto == Proto::Resp3 {
            hello3(&mut c, is_holdfast).await;
        }
        conns.push(c);
    }
    let mut replies = Vec::with_capacity(script.steps.len());
    for step in &script.steps {
        let c = &mut conns[step.conn];
        c.send(&encode_cmd(&step.cmd)).await;
        replies.push(c.read_reply().await);
    }
    replies
}

// ------------------------------------------------------------------------------------------
// The scripts
// ------------------------------------------------------------------------------------------

/// Every byte value once.
fn all_bytes() -> Vec<u8> {
    (0..=255u8).collect()
}

/// 1 MB of varied bytes (CRLFs included).
fn one_mb() -> Vec<u8> {
    (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// The core data commands (strings, hashes, sets, sorted sets, streams as an append-only log,
/// `WAIT`) plus the usual string, list and key commands, their error replies and binary-safe
/// values.
fn core_script() -> Script {
    let mut s = Script::new();
    let mut crlf_value = b"a\r\nb\r\n$3\r\n*1\r\n".to_vec();
    crlf_value.extend_from_slice(b"\r\n");
    let binary_key = b"k:bin\x00\xff\r\nkey".to_vec();
    let big = one_mb();

    // ---- strings ----
    s.expect(cmd!["GET", "k:s"], b"$-1\r\n")
        .expect(cmd!["SET", "k:s", "v1"], b"+OK\r\n")
        .expect(cmd!["GET", "k:s"], b"$2\r\nv1\r\n")
        .expect(cmd!["SET", "k:s", "v2", "NX"], b"$-1\r\n")
        .add(cmd!["SET", "k:nx", "v", "NX"])
        .add(cmd!["SET", "k:s", "v3", "XX", "GET"])
        .add(cmd!["SET", "k:xx", "v", "XX"])
        .add(cmd!["SET", "k:ex", "v", "EX", "100"])
        .cmp(cmd!["TTL", "k:ex"], Cmp::IntWithin(1))
        .cmp(cmd!["PTTL", "k:ex"], Cmp::IntWithin(2000))
        .add(cmd!["SET", "k:px", "v", "PX", "100000"])
        .cmp(cmd!["PTTL", "k:px"], Cmp::IntWithin(2000))
        .add(cmd!["SET", "k:nxex", "v", "NX", "EX", "50"])
        .add(cmd!["SET", "k:nxex", "w", "NX", "PX", "50000"])
        .add(cmd!["GET", "k:nxex"])
        .add(cmd!["SET", "k:s", "v", "EX", "0"])
        .add(cmd!["SET", "k:s", "v", "EX", "abc"])
        .add(cmd!["SET", "k:s", "v", "PX", "-5"])
        .expect(
            cmd!["SET", "k:s", "v", "NX", "XX"],
            b"-ERR syntax error\r\n",
        )
        .add(cmd!["SET", "k:s", "v", "EX", "10", "PX", "10"])
        .add(cmd!["SET", "k:s", "v", "BOGUS"])
        .add(cmd!["SET", "k:s"])
        .add(cmd!["get", "k:s"])
        .add(cmd!["sEt", "k:case", "x"])
        .expect(
            cmd!["MSET", "k:m1", "a", "k:m2", "b", "k:m3", "c"],
            b"+OK\r\n",
        )
        .add(cmd!["MGET", "k:m1", "k:missing", "k:m3"])
        .add(cmd!["MGET", "k:missing"])
        .add(cmd!["MSET", "k:m1", "a", "k:m2"])
        .add(cmd!["MSET", "k:m1"])
        .expect(
            cmd!["EXISTS", "k:m1", "k:m2", "k:missing", "k:m1"],
            b":3\r\n",
        )
        .add(cmd!["EXISTS", "k:missing"])
        .expect(cmd!["DEL", "k:m1", "k:missing"], b":1\r\n")
        .add(cmd!["DEL", "k:m1"])
        .add(cmd!["DEL", "k:m2", "k:m3", "k:m2"])
        .add(cmd!["MSET", "k:m1", "1", "k:m2", "2", "k:other", "3"])
        .cmp(cmd!["KEYS", "k:m*"], Cmp::Sorted)
        .cmp(cmd!["KEYS", "*"], Cmp::Sorted)
        .add(cmd!["KEYS", "nomatch*"])
        .cmp(
            cmd!["SCAN", "0", "MATCH", "k:m*", "COUNT", "1000"],
            Cmp::ScanSorted,
        )
        .cmp(cmd!["SCAN", "0", "COUNT", "1000"], Cmp::ScanSorted)
        .cmp(
            cmd!["SCAN", "0", "MATCH", "k:*", "COUNT", "1000", "TYPE", "string"],
            Cmp::ScanSorted,
        )
        .add(cmd!["SCAN", "0", "MATCH", "nomatch*", "COUNT", "1000"])
        .add(cmd!["SCAN", "notacursor"])
        .add(cmd!["SCAN", "0", "COUNT", "0"])
        .add(cmd!["SCAN", "0", "BOGUS", "1"]);

    // ---- counters, append ----
    s.expect(cmd!["INCR", "k:n"], b":1\r\n")
        .expect(cmd!["INCRBY", "k:n", "41"], b":42\r\n")
        .add(cmd!["INCRBY", "k:n", "-50"])
        .add(cmd!["DECR", "k:n"])
        .add(cmd!["INCR", "k:s"])
        .add(cmd!["INCRBY", "k:n", "abc"])
        .add(cmd!["SET", "k:max", "9223372036854775807"])
        .add(cmd!["INCR", "k:max"])
        .add(cmd!["INCRBYFLOAT", "k:f", "0.1"])
        .add(cmd!["INCRBYFLOAT", "k:f", "1e3"])
        .expect(cmd!["APPEND", "k:a", "hello"], b":5\r\n")
        .add(cmd!["APPEND", "k:a", " world"])
        .add(cmd!["GET", "k:a"])
        .add(cmd!["STRLEN", "k:a"])
        .add(cmd!["GETRANGE", "k:a", "0", "4"]);

    // ---- empty, binary, CRLF and 1 MB values ----
    s.add(cmd!["SET", "k:e", ""])
        .expect(cmd!["GET", "k:e"], b"$0\r\n\r\n")
        .add(cmd!["STRLEN", "k:e"])
        .add(cmd!["APPEND", "k:e", ""])
        .add(cmd!["EXISTS", "k:e"])
        .add(cmd!["SET", "", "empty key"])
        .add(cmd!["GET", ""])
        .add(cmd!["SET", "k:bytes", all_bytes()])
        .add(cmd!["GET", "k:bytes"])
        .add(cmd!["STRLEN", "k:bytes"])
        .add(cmd!["SET", "k:crlf", crlf_value])
        .add(cmd!["GET", "k:crlf"])
        .add(cmd!["SET", binary_key, all_bytes()])
        .add(cmd!["GET", binary_key])
        .cmp(cmd!["KEYS", "k:bin*"], Cmp::Sorted)
        .add(cmd!["MGET", "k:bytes", binary_key, "k:crlf", "k:e"])
        .expect(cmd!["SET", "k:big", big], b"+OK\r\n")
        .add(cmd!["GET", "k:big"])
        .add(cmd!["STRLEN", "k:big"])
        .add(cmd!["APPEND", "k:big", "tail"])
        .add(cmd!["GETRANGE", "k:big", "-10", "-1"])
        .add(cmd!["HSET", "k:bighash", "f", big])
        .add(cmd!["HGET", "k:bighash", "f"])
        .add(cmd!["DEL", "k:big", "k:bighash"]);

    // ---- hashes ----
    s.expect(cmd!["HSET", "k:h", "f1", "v1", "f2", "v2"], b":2\r\n")
        .expect(cmd!["HSET", "k:h", "f1", "v1b"], b":0\r\n")
        .add(cmd!["HMSET", "k:h", "f3", "v3", "f4", "v4"])
        .add(cmd!["HSETNX", "k:h", "f1", "x"])
        .add(cmd!["HSETNX", "k:h", "f5", "v5"])
        .add(cmd!["HSET", "k:h", "", ""])
        .add(cmd!["HSET", "k:h", "bin", all_bytes()])
        .add(cmd!["HGET", "k:h", "f1"])
        .add(cmd!["HGET", "k:h", "nope"])
        .add(cmd!["HGET", "k:nohash", "f"])
        .add(cmd!["HMGET", "k:h", "f1", "nope", "f3", "bin"])
        .add(cmd!["HMGET", "k:nohash", "a", "b"])
        .add(cmd!["HGETALL", "k:h"])
        .add(cmd!["HKEYS", "k:h"])
        .add(cmd!["HVALS", "k:h"])
        .add(cmd!["HLEN", "k:h"])
        .expect(cmd!["HEXISTS", "k:h", "f1"], b":1\r\n")
        .add(cmd!["HEXISTS", "k:h", "nope"])
        .add(cmd!["HEXISTS", "k:nohash", "f1"])
        .expect(cmd!["HDEL", "k:h", "f1", "nope", "f2"], b":2\r\n")
        .add(cmd!["HDEL", "k:nohash", "f1"])
        .add(cmd!["HGETALL", "k:h"])
        .add(cmd!["HGETALL", "k:nohash"])
        .add(cmd!["HKEYS", "k:nohash"])
        .add(cmd!["HINCRBY", "k:h", "cnt", "5"])
        .add(cmd!["HSET", "k:h", "f"])
        .add(cmd!["HSET", "k:h", "f", "v", "dangling"])
        .add(cmd!["HMSET", "k:h", "f"])
        .add(cmd!["HSETNX", "k:h", "f"])
        .add(cmd!["HGETALL"]);

    // ---- sets ----
    s.expect(cmd!["SADD", "k:is", "3", "1", "2"], b":3\r\n")
        .add(cmd!["SADD", "k:is", "2", "10"])
        // A set of small integers is an intset: SMEMBERS answers in numeric order.
        .expect(
            cmd!["SMEMBERS", "k:is"],
            b"*4\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$2\r\n10\r\n",
        )
        .add(cmd!["SREM", "k:is", "1", "99"])
        .add(cmd!["SMEMBERS", "k:is"])
        .add(cmd!["SISMEMBER", "k:is", "2"])
        .add(cmd!["SCARD", "k:is"])
        .add(cmd!["SADD", "k:ss", "b", "a", "c", ""])
        .cmp(cmd!["SMEMBERS", "k:ss"], Cmp::Sorted)
        .add(cmd!["SREM", "k:ss", "a", "b", "c", ""])
        .add(cmd!["EXISTS", "k:ss"])
        .add(cmd!["SMEMBERS", "k:missing"])
        .add(cmd!["SREM", "k:missing", "a"])
        .add(cmd!["SADD", "k:is"]);

    // ---- sorted sets ----
    s.expect(
        cmd!["ZADD", "k:z", "1", "a", "2", "b", "2.5", "c"],
        b":3\r\n",
    )
    .add(cmd!["ZADD", "k:z", "NX", "5", "a"])
    .add(cmd!["ZADD", "k:z", "XX", "CH", "3", "a"])
    .add(cmd!["ZADD", "k:z", "INCR", "1", "a"])
    .add(cmd![
        "ZADD", "k:z", "-1.5", "neg", "0.1", "tenth", "1e3", "k"
    ])
    .add(cmd!["ZADD", "k:z", "notafloat", "x"])
    .add(cmd!["ZADD", "k:z", "1"])
    .add(cmd!["ZADD", "k:z", "NX", "XX", "1", "x"])
    .add(cmd!["ZRANGE", "k:z", "0", "-1"])
    .add(cmd!["ZRANGE", "k:z", "0", "-1", "WITHSCORES"])
    .add(cmd!["ZRANGE", "k:z", "0", "1", "REV", "WITHSCORES"])
    .add(cmd!["ZRANGEBYSCORE", "k:z", "-inf", "+inf", "WITHSCORES"])
    .add(cmd![
        "ZRANGEBYSCORE",
        "k:z",
        "(1",
        "3",
        "WITHSCORES",
        "LIMIT",
        "0",
        "2"
    ])
    .add(cmd!["ZRANGEBYSCORE", "k:z", "-inf", "+inf"])
    .add(cmd!["ZRANGEBYSCORE", "k:z", "5", "1"])
    .add(cmd!["ZRANGEBYSCORE", "k:z", "nope", "+inf"])
    .add(cmd!["ZSCORE", "k:z", "b"])
    .add(cmd!["ZSCORE", "k:z", "tenth"])
    .add(cmd!["ZSCORE", "k:z", "nope"])
    .add(cmd!["ZSCORE", "k:missing", "a"])
    .expect(cmd!["ZREM", "k:z", "a", "nope"], b":1\r\n")
    .add(cmd!["ZREM", "k:missing", "a"])
    .add(cmd!["ZCARD", "k:z"])
    .add(cmd!["ZRANGE", "k:missing", "0", "-1", "WITHSCORES"])
    .add(cmd![
        "ZRANGEBYSCORE",
        "k:missing",
        "-inf",
        "+inf",
        "WITHSCORES"
    ])
    .add(cmd![
        "ZADD", "k:zinf", "-inf", "lo", "+inf", "hi", "0", "zero"
    ])
    .add(cmd!["ZRANGE", "k:zinf", "0", "-1", "WITHSCORES"])
    .add(cmd![
        "ZRANGEBYSCORE",
        "k:zinf",
        "-inf",
        "+inf",
        "WITHSCORES"
    ]);

    // ---- streams used as an append-only log ----
    s.expect(cmd!["XADD", "k:x", "1-1", "f", "v"], b"$3\r\n1-1\r\n")
        .add(cmd!["XADD", "k:x", "2-0", "f2", "v2", "g", all_bytes()])
        .add(cmd!["XADD", "k:x", "3", "f", "v3"])
        .add(cmd!["XADD", "k:x", "4-0", "f", ""])
        .add(cmd!["XADD", "k:x", "2-0", "f", "again"])
        .add(cmd!["XADD", "k:x", "0-0", "f", "v"])
        .add(cmd!["XADD", "k:x", "bad", "f", "v"])
        .add(cmd!["XADD", "k:x", "5-0", "f"])
        .add(cmd!["XADD", "k:fresh", "NOMKSTREAM", "1-0", "f", "v"])
        .add(cmd!["EXISTS", "k:fresh"])
        .expect(cmd!["XLEN", "k:x"], b":4\r\n")
        .add(cmd!["XLEN", "k:missing"])
        .add(cmd!["XRANGE", "k:x", "-", "+"])
        .add(cmd!["XRANGE", "k:x", "-", "+", "COUNT", "2"])
        .add(cmd!["XRANGE", "k:x", "(1-1", "+", "COUNT", "1"])
        // `COUNT 0`: `resp2_xrange_count_0_answers_a_null_array`.
        .add(cmd!["XREVRANGE", "k:x", "+", "-", "COUNT", "1"])
        .add(cmd!["XREVRANGE", "k:x", "+", "-", "COUNT", "3"])
        .add(cmd!["XRANGE", "k:missing", "-", "+"])
        .add(cmd!["XRANGE", "k:x", "-", "+", "COUNT"])
        .add(cmd!["XRANGE", "k:x", "bad", "+"])
        .expect(cmd!["XTRIM", "k:x", "MINID", "=", "2"], b":1\r\n")
        .add(cmd!["XTRIM", "k:x", "MINID", "=", "2"])
        .add(cmd!["XTRIM", "k:x", "MINID", "=", "3-0"])
        .add(cmd!["XTRIM", "k:missing", "MINID", "=", "2"])
        .add(cmd!["XTRIM", "k:x", "MINID", "=", "bad"])
        .add(cmd!["XLEN", "k:x"])
        .add(cmd!["XRANGE", "k:x", "-", "+"]);

    // ---- WAIT ----
    s.expect(cmd!["WAIT", "0", "0"], b":0\r\n");

    // ---- lists ----
    s.expect(cmd!["LPUSH", "k:l", "a", "b", "c"], b":3\r\n")
        .add(cmd!["RPUSH", "k:l", "d", "e", ""])
        .add(cmd!["LRANGE", "k:l", "0", "-1"])
        .add(cmd!["LRANGE", "k:l", "1", "2"])
        .add(cmd!["LRANGE", "k:missing", "0", "-1"])
        .add(cmd!["LPOP", "k:l"])
        .add(cmd!["RPOP", "k:l"])
        .add(cmd!["LPOP", "k:l", "2"])
        .add(cmd!["RPOP", "k:l", "1"])
        .add(cmd!["LPOP", "k:l", "0"])
        .add(cmd!["LPOP", "k:l", "100"])
        .add(cmd!["EXISTS", "k:l"])
        .expect(cmd!["LPOP", "k:missing", "2"], b"*-1\r\n")
        .expect(cmd!["LPOP", "k:missing"], b"$-1\r\n")
        .expect(cmd!["RPOP", "k:missing", "2"], b"*-1\r\n")
        .expect(cmd!["RPOP", "k:missing"], b"$-1\r\n")
        .add(cmd!["LPOP", "k:missing", "0"])
        .add(cmd!["LPOP", "k:l", "-1"])
        .add(cmd!["LPOP", "k:l", "x"])
        .add(cmd!["LPUSH", "k:l"]);

    // ---- expiry ----
    s.add(cmd!["SET", "k:t", "v"])
        .expect(cmd!["TTL", "k:t"], b":-1\r\n")
        .expect(cmd!["PTTL", "k:t"], b":-1\r\n")
        .expect(cmd!["TTL", "k:missing"], b":-2\r\n")
        .expect(cmd!["PTTL", "k:missing"], b":-2\r\n")
        .expect(cmd!["EXPIRE", "k:t", "100"], b":1\r\n")
        .cmp(cmd!["TTL", "k:t"], Cmp::IntWithin(1))
        .cmp(cmd!["PTTL", "k:t"], Cmp::IntWithin(2000))
        .add(cmd!["EXPIRE", "k:t", "200", "NX"])
        .add(cmd!["EXPIRE", "k:t", "200", "GT"])
        .cmp(cmd!["TTL", "k:t"], Cmp::IntWithin(1))
        .expect(cmd!["PERSIST", "k:t"], b":1\r\n")
        .add(cmd!["PERSIST", "k:t"])
        .add(cmd!["PERSIST", "k:missing"])
        .add(cmd!["TTL", "k:t"])
        .add(cmd!["EXPIRE", "k:missing", "10"])
        .add(cmd!["EXPIRE", "k:t", "abc"])
        .add(cmd!["EXPIRE", "k:t", "10", "BOGUS"])
        .add(cmd!["SET", "k:gone", "v"])
        .add(cmd!["EXPIRE", "k:gone", "0"])
        .add(cmd!["EXISTS", "k:gone"]);

    // ---- TYPE ----
    s.add(cmd!["SET", "k:s", "v"]);
    for key in ["k:s", "k:h", "k:l2", "k:is", "k:z", "k:x", "k:missing"] {
        s.add(cmd!["TYPE", key]);
    }
    s.add(cmd!["RPUSH", "k:l2", "x"]).add(cmd!["TYPE", "k:l2"]);

    // ---- wrong types ----
    s.add(cmd!["HGET", "k:s", "f"])
        .add(cmd!["GET", "k:h"])
        .add(cmd!["LPUSH", "k:h", "x"])
        .add(cmd!["SADD", "k:z", "x"])
        .add(cmd!["SMEMBERS", "k:s"])
        .add(cmd!["ZADD", "k:s", "1", "a"])
        .add(cmd!["ZRANGE", "k:h", "0", "-1", "WITHSCORES"])
        .add(cmd!["XADD", "k:s", "9-9", "f", "v"])
        .add(cmd!["XLEN", "k:h"])
        .add(cmd!["XRANGE", "k:s", "-", "+"])
        .add(cmd!["HGETALL", "k:s"])
        .add(cmd!["HSET", "k:z", "f", "v"])
        .add(cmd!["LPOP", "k:s", "2"])
        .add(cmd!["INCR", "k:h"])
        .add(cmd!["APPEND", "k:l2", "x"]);

    // ---- unknown commands and subcommands, arity ----
    s.expect(
        cmd!["FOO", "bar"],
        b"-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n",
    )
    .add(cmd!["FOO"])
    .add(cmd!["foo", "a b", "c"])
    // Echoed arguments with NUL, CR/LF or over 128 bytes: `errors_echo_arguments_like_redis`.
    .add(cmd!["GETX", "k:s"])
    .expect(
        cmd!["GET"],
        b"-ERR wrong number of arguments for 'get' command\r\n",
    )
    .add(cmd!["GET", "a", "b"])
    .add(cmd!["HGET", "k:h"])
    .add(cmd!["XLEN"])
    .add(cmd!["WAIT", "0"])
    .add(cmd!["WAIT", "x", "0"])
    .add(cmd!["CONFIG", "FOO"])
    .add(cmd!["config", "foo", "bar"])
    .add(cmd!["CONFIG"]);
    s
}

/// Replies that hold RESP3 doubles with several spellings: Redis 7.0 prints `%.17g`.
fn doubles_script() -> Script {
    let mut s = Script::new();
    s.add(cmd![
        "ZADD",
        "d:z",
        "1",
        "one",
        "2.5",
        "two-and-a-half",
        "0.1",
        "tenth",
        "1e20",
        "big",
        "-0.0000123",
        "tiny",
        "3.141592653589793",
        "pi",
        "inf",
        "top",
        "-inf",
        "bottom"
    ]);
    for member in [
        "one",
        "two-and-a-half",
        "tenth",
        "big",
        "tiny",
        "pi",
        "top",
        "bottom",
    ] {
        s.add(cmd!["ZSCORE", "d:z", member]);
    }
    s.add(cmd!["ZRANGE", "d:z", "0", "-1", "WITHSCORES"])
        .add(cmd!["ZRANGEBYSCORE", "d:z", "-inf", "+inf", "WITHSCORES"])
        .add(cmd!["ZMSCORE", "d:z", "tenth", "nope", "big"])
        .add(cmd!["ZINCRBY", "d:z", "0.2", "tenth"])
        .add(cmd!["ZADD", "d:z", "INCR", "0.1", "tenth"])
        .add(cmd!["ZPOPMIN", "d:z", "2"]);
    s
}

/// Commands beyond `core_script`'s whose replies have shapes that are easy to get wrong:
/// nulls nested in arrays, maps, doubles from Lua and geo commands.
fn extras_script() -> Script {
    let mut s = Script::new();
    s.add(cmd![
        "GEOADD",
        "e:g",
        "13.361389",
        "38.115556",
        "palermo",
        "15.087269",
        "37.502669",
        "catania"
    ])
    .add(cmd!["GEODIST", "e:g", "palermo", "catania"])
    .add(cmd!["GEODIST", "e:g", "palermo", "nope"])
    .add(cmd!["GEOHASH", "e:g", "palermo", "nope"])
    .add(cmd![
        "GEOSEARCH",
        "e:g",
        "FROMLONLAT",
        "15",
        "37",
        "BYRADIUS",
        "200",
        "km",
        "ASC",
        "WITHCOORD",
        "WITHDIST"
    ])
    .add(cmd!["XADD", "e:x", "1-0", "f", "v"])
    .add(cmd!["XADD", "e:x", "2-0", "f", "w"])
    .add(cmd!["XGROUP", "CREATE", "e:x", "grp", "0"])
    .add(cmd![
        "XREADGROUP",
        "GROUP",
        "grp",
        "c",
        "COUNT",
        "10",
        "STREAMS",
        "e:x",
        ">"
    ])
    .add(cmd![
        "XREADGROUP",
        "GROUP",
        "grp",
        "c",
        "STREAMS",
        "e:x",
        "0"
    ])
    .add(cmd!["XDEL", "e:x", "1-0"])
    .add(cmd!["XPENDING", "e:x", "grp"])
    .add(cmd!["XAUTOCLAIM", "e:x", "grp", "c2", "0", "0-0"])
    .add(cmd!["XREAD", "COUNT", "1", "STREAMS", "e:missing", "0"])
    .add(cmd!["XREAD", "COUNT", "10", "STREAMS", "e:x", "0"])
    .add(cmd!["XINFO", "STREAM", "e:x"])
    .add(cmd!["CONFIG", "GET", "maxmemory-policy"])
    .add(cmd!["OBJECT", "ENCODING", "e:missing"])
    .add(cmd!["OBJECT", "ENCODING", "e:x"])
    .add(cmd!["SRANDMEMBER", "e:missing", "2"])
    .add(cmd!["ZRANDMEMBER", "e:missing", "2"])
    .add(cmd!["HRANDFIELD", "e:missing", "2"])
    .add(cmd!["RPUSH", "e:l", "a", "b"])
    .add(cmd!["LPOS", "e:l", "x"])
    .add(cmd!["LPOS", "e:l", "x", "COUNT", "0"])
    .add(cmd!["LMPOP", "1", "e:missing", "LEFT"])
    .add(cmd!["ZMPOP", "1", "e:missing", "MIN"])
    .add(cmd!["SORT", "e:l", "ALPHA", "GET", "nokey*"])
    .add(cmd!["ZADD", "e:z", "XX", "INCR", "1", "m"])
    .add(cmd!["ZADD", "e:z", "1", "a", "2", "b"])
    .add(cmd!["ZRANK", "e:z", "nope"])
    .add(cmd!["ZUNION", "2", "e:z", "e:z", "WITHSCORES"])
    .add(cmd!["HSET", "e:h", "a", "1", "b", "2", "c", "3"])
    .add(cmd![
        "BITFIELD", "e:bf", "OVERFLOW", "FAIL", "INCRBY", "u2", "0", "5", "GET", "u4", "0"
    ])
    .add(cmd!["EVAL", "return nil", "0"])
    .add(cmd![
        "EVAL",
        "return {1, 'two', {3, 'four'}, redis.status_reply('OK'), redis.error_reply('ERR inner')}",
        "0"
    ])
    .add(cmd![
        "EVAL",
        "return redis.call('LPOP', KEYS[1], '2')",
        "1",
        "e:missing"
    ])
    .add(cmd!["EVAL", "return {double=0.1}", "0"])
    .add(cmd![
        "EVAL",
        "redis.setresp(3); return redis.call('HGETALL', KEYS[1])",
        "1",
        "e:h"
    ])
    .add(cmd![
        "EVAL",
        "redis.setresp(3); return redis.call('ZSCORE', KEYS[1], 'a')",
        "1",
        "e:z"
    ])
    .add(cmd!["EVAL", "return false", "0"])
    .add(cmd!["EVAL", "return true", "0"])
    .add(cmd![
        "EVAL",
        "return {big_number='123456789012345678901234567890'}",
        "0"
    ])
    .add(cmd!["EVAL", "return {map={a=1}}", "0"])
    .add(cmd!["EVAL", "return {set={a=true}}", "0"])
    .add(cmd![
        "EVAL",
        "return {verbatim_string={format='txt', string='hello'}}",
        "0"
    ])
    .add(cmd!["EVAL", "return redis.call('NOPE')", "0"])
    .add(cmd!["EVAL", "syntax error here", "0"])
    .add(cmd!["DBSIZE"]);
    s
}

// ------------------------------------------------------------------------------------------
// 1. RESP2 raw
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn resp2_core_commands_match_redis() {
    let env = Env::start().await;
    env.differential("RESP2 core", Proto::Resp2, &core_script())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_doubles_match_redis() {
    let env = Env::start().await;
    env.differential("RESP2 doubles", Proto::Resp2, &doubles_script())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_extras_match_redis() {
    let env = Env::start().await;
    env.differential("RESP2 extras", Proto::Resp2, &extras_script())
        .await;
}

/// Redis 7.0 answers a RESP2 null array for a stream range with `COUNT 0`.
#[tokio::test(flavor = "multi_thread")]
async fn resp2_xrange_count_0_answers_a_null_array() {
    let env = Env::start().await;
    let mut s = Script::new();
    s.add(cmd!["XADD", "n:x", "1-1", "f", "v"])
        .expect(cmd!["XRANGE", "n:x", "-", "+", "COUNT", "0"], b"*-1\r\n")
        .expect(cmd!["XREVRANGE", "n:x", "+", "-", "COUNT", "0"], b"*-1\r\n");
    env.differential("RESP2 XRANGE COUNT 0", Proto::Resp2, &s)
        .await;
}

/// A null array inside a RESP2 reply stays `*-1`.
#[tokio::test(flavor = "multi_thread")]
async fn resp2_nested_null_arrays_are_kept() {
    let env = Env::start().await;
    let mut s = Script::new();
    s.add(cmd!["GEOADD", "n:g", "13.361389", "38.115556", "palermo"])
        .expect(cmd!["GEOPOS", "n:missing", "a"], b"*1\r\n*-1\r\n")
        .add(cmd!["GEOPOS", "n:g", "palermo", "nope"])
        .add(cmd!["XADD", "n:x", "1-0", "f", "v"])
        .add(cmd!["XADD", "n:x", "2-0", "f", "w"])
        .add(cmd!["XGROUP", "CREATE", "n:x", "grp", "0"])
        // An empty pending list: `*4 :0 $-1 $-1 *-1`.
        .expect(
            cmd!["XPENDING", "n:x", "grp"],
            b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n",
        )
        .add(cmd![
            "XREADGROUP",
            "GROUP",
            "grp",
            "c",
            "STREAMS",
            "n:x",
            ">"
        ])
        .add(cmd!["XDEL", "n:x", "1-0"])
        // A pending entry that was deleted reads as `[id, *-1]`.
        .add(cmd![
            "XREADGROUP",
            "GROUP",
            "grp",
            "c",
            "STREAMS",
            "n:x",
            "0"
        ])
        // The same inside a transaction.
        .add(cmd!["MULTI"])
        .add(cmd!["GEOPOS", "n:missing", "a"])
        .add(cmd!["EXEC"]);
    env.differential("RESP2 nested null arrays", Proto::Resp2, &s)
        .await;
}

/// Error replies that echo what the client sent: Redis cuts each echoed argument at its first
/// NUL byte and the whole list at 128 bytes, and turns CR and LF into spaces, so the error
/// stays one line. Each command gets a connection of its own, so a broken frame on one cannot
/// shift the replies of the next.
#[tokio::test(flavor = "multi_thread")]
async fn errors_echo_arguments_like_redis() {
    let env = Env::start().await;
    let long = "x".repeat(300);
    let mut s = Script::new();
    let cmds = [
        cmd!["FOO", b"\x00abc"],
        cmd!["FOO", all_bytes()],
        cmd!["FOO", long],
        cmd!["FOO", "a", "b", long],
        cmd![long],
        cmd!["FOO", "a\r\nb"],
        cmd!["FOO", "a\nb"],
        cmd!["CONFIG", "a\r\nb"],
        cmd!["CONFIG", b"a\x00b"],
        cmd!["CLIENT", "a\r\nb"],
        cmd!["OBJECT", "a\r\nb"],
    ];
    for (i, cmd) in cmds.into_iter().enumerate() {
        s.on(i).add(cmd);
    }
    env.differential("RESP2 echoed arguments", Proto::Resp2, &s)
        .await;
}

/// SCAN walked with a small COUNT until the cursor comes back to 0 finds the same keys.
#[tokio::test(flavor = "multi_thread")]
async fn scan_iteration_finds_the_same_keys() {
    let env = Env::start().await;
    let mut found = Vec::new();
    for (i, addr) in [env.direct(), env.proxied()].iter().enumerate() {
        let mut c = RawConn::connect(addr).await;
        for n in 0..100 {
            let key = format!("scan:{n}");
            assert_eq!(c.command(&["SET", &key, "v"]).await, b"+OK\r\n");
        }
        assert_eq!(c.command(&["SET", "other", "v"]).await, b"+OK\r\n");
        let mut keys = Vec::new();
        let mut cursor = b"0".to_vec();
        let mut rounds = 0;
        loop {
            let scan: [&[u8]; 6] = [b"SCAN", &cursor, b"MATCH", b"scan:*", b"COUNT", b"7"];
            let reply = send_and_read(&mut c, &encode(&scan)).await;
            let (_, items) = elements(&reply);
            assert_eq!(items.len(), 2, "SCAN reply {}", show(&reply));
            cursor = bulk_value(items[0]);
            let (_, batch) = elements(items[1]);
            keys.extend(batch.iter().map(|k| bulk_value(k)));
            rounds += 1;
            assert!(rounds < 1000, "SCAN does not end");
            if cursor == b"0" {
                break;
            }
        }
        assert!(rounds > 1, "COUNT 7 over 100 keys takes several rounds");
        keys.sort();
        keys.dedup();
        found.push(keys);
        if i == 0 {
            env.flushall().await;
        }
    }
    assert_eq!(found[0].len(), 100);
    assert_eq!(found[0], found[1], "keys found by SCAN: redis vs holdfast");
}

async fn send_and_read(c: &mut RawConn, raw: &[u8]) -> Vec<u8> {
    c.send(raw).await;
    c.read_reply().await
}

/// The payload of a bulk string frame.
fn bulk_value(frame: &[u8]) -> Vec<u8> {
    assert_eq!(
        frame.first(),
        Some(&b'$'),
        "not a bulk string: {}",
        show(frame)
    );
    let eol = frame.windows(2).position(|w| w == b"\r\n").unwrap();
    frame[eol + 2..frame.len() - 2].to_vec()
}

// ------------------------------------------------------------------------------------------
// 2. RESP3
// ------------------------------------------------------------------------------------------

// RESP3 replies are compared byte for byte too, doubles and maps included. A RESP3 double
// must be spelled as Redis spells it, not merely have the same value: Redis 7.0 writes
// `%.17g` (`,0.10000000000000001`, `,1e+20`), and geo coordinates as "human" long doubles,
// 17 decimals with trailing zeros dropped (`,13.36138933897018433`). A RESP3 map's pairs
// must come in Redis's order. `resp3_doubles_match_redis` and `resp3_maps_keep_redis_order`
// gather those cases; the other RESP3 scripts hold more of them.

#[tokio::test(flavor = "multi_thread")]
async fn resp3_core_commands_match_redis() {
    let env = Env::start().await;
    env.differential("RESP3 core", Proto::Resp3, &core_script())
        .await;
}

/// RESP3 doubles byte for byte: `%.17g` from sorted sets (`,0.10000000000000001`, `,1e+20`,
/// `,3.1415926535897931`, `,inf`) and Lua, and GEOPOS coordinates as 17-decimal "human"
/// long doubles (`,13.36138933897018433`).
#[tokio::test(flavor = "multi_thread")]
async fn resp3_doubles_match_redis() {
    let env = Env::start().await;
    let mut s = doubles_script();
    s.add(cmd!["GEOADD", "d:g", "13.361389", "38.115556", "palermo"])
        .add(cmd!["GEOPOS", "d:g", "palermo"])
        .add(cmd!["EVAL", "return {double=0.1}", "0"]);
    env.differential("RESP3 doubles", Proto::Resp3, &s).await;
}

/// Maps small enough to be listpacks, so Redis answers their pairs in insertion order.
fn maps_script() -> Script {
    let mut s = Script::new();
    s.add(cmd![
        "HSET", "m:h", "first", "1", "second", "2", "third", "3"
    ])
    .expect(
        cmd!["HGETALL", "m:h"],
        b"*6\r\n$5\r\nfirst\r\n$1\r\n1\r\n$6\r\nsecond\r\n$1\r\n2\r\n$5\r\nthird\r\n$1\r\n3\r\n",
    )
    .add(cmd!["XADD", "m:x", "1-1", "f", "v"])
    .add(cmd!["XINFO", "STREAM", "m:x"])
    .add(cmd!["CONFIG", "GET", "maxmemory-policy", "appendonly"])
    .add(cmd!["XREAD", "COUNT", "1", "STREAMS", "m:x", "0"])
    .add(cmd!["MULTI"])
    .add(cmd!["HGETALL", "m:h"])
    .add(cmd!["EXEC"]);
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_maps_match_redis() {
    let env = Env::start().await;
    env.differential("RESP2 maps", Proto::Resp2, &maps_script())
        .await;
}

/// RESP3 map pairs in Redis's order: `HGETALL` of `first second third` answers
/// `%3 first 1 second 2 third 3`, through holdfast as directly; likewise the maps of
/// XINFO STREAM, CONFIG GET, XREAD, and HGETALL inside EXEC.
#[tokio::test(flavor = "multi_thread")]
async fn resp3_maps_keep_redis_order() {
    let env = Env::start().await;
    env.differential("RESP3 map order", Proto::Resp3, &maps_script())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp3_extras_match_redis() {
    let env = Env::start().await;
    env.differential("RESP3 extras", Proto::Resp3, &extras_script())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hello_3_answers_a_resp3_map() {
    let env = Env::start().await;
    let mut replies = Vec::new();
    for addr in [env.direct(), env.proxied()] {
        let mut c = RawConn::connect(&addr).await;
        let hello = c.command(&["HELLO", "3"]).await;
        let get3 = c.command(&["GET", "nope"]).await;
        let hello2 = c.command(&["HELLO", "2"]).await;
        let get2 = c.command(&["GET", "nope"]).await;
        replies.push((hello, get3, hello2, get2));
    }
    let (direct, proxied) = (&replies[0], &replies[1]);
    // `check_hello3` also runs on every RESP3 connection of the scripts.
    check_hello3(&proxied.0);
    // Holdfast answers HELLO itself: `version` and `id` are its own, the rest is Redis's.
    let fields = |reply: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
        let (_, items) = elements(reply);
        items
            .chunks(2)
            .map(|p| {
                let value = if p[0] == b"$7\r\nversion\r\n" || p[0] == b"$2\r\nid\r\n" {
                    p[1][..1].to_vec()
                } else {
                    p[1].to_vec()
                };
                (p[0].to_vec(), value)
            })
            .collect()
    };
    assert_eq!(
        fields(&direct.0),
        fields(&proxied.0),
        "HELLO 3: redis vs holdfast"
    );
    assert_eq!(
        fields(&direct.2),
        fields(&proxied.2),
        "HELLO 2: redis vs holdfast"
    );
    assert!(
        proxied.2.starts_with(b"*14\r\n"),
        "HELLO 2: {}",
        show(&proxied.2)
    );
    assert_eq!((&direct.1, &direct.3), (&proxied.1, &proxied.3));
    assert_eq!(proxied.1, b"_\r\n");
    assert_eq!(proxied.3, b"$-1\r\n");
}

// ------------------------------------------------------------------------------------------
// 3. Pipelining
// ------------------------------------------------------------------------------------------

/// 200 mixed commands: forwarded ones, ones holdfast answers itself (PING, ECHO, errors),
/// a transaction and a blocking pop that times out, so replies from different paths interleave.
fn pipeline_cmds() -> Vec<Cmd> {
    (0..200)
        .map(|i| {
            let key = format!("p:{}", i % 7);
            match i % 20 {
                0 => cmd!["SET", key, i.to_string()],
                1 => cmd!["GET", key],
                2 => cmd!["INCR", "p:ctr"],
                3 => cmd!["PING"],
                4 => cmd!["ECHO", format!("echo {i}")],
                5 => cmd!["HSET", "p:h", format!("f{i}"), i.to_string()],
                6 => cmd!["HGET", "p:h", format!("f{}", i - 1)],
                7 => cmd!["RPUSH", "p:l", i.to_string()],
                8 => cmd!["LRANGE", "p:l", "0", "-1"],
                9 => cmd!["ZADD", "p:z", i.to_string(), format!("m{i}")],
                10 => cmd!["ZRANGE", "p:z", "0", "-1", "WITHSCORES"],
                11 => cmd!["FOO", key],
                12 if i == 112 => cmd!["BLPOP", "p:empty", "0.05"],
                12 => cmd!["GET"],
                13 => cmd!["MULTI"],
                14 => cmd!["INCR", "p:ctr"],
                15 => cmd!["EXEC"],
                16 => cmd!["DEL", key],
                17 => cmd!["LPOP", "p:missing", "2"],
                18 => cmd!["XADD", "p:x", format!("{}-1", i + 1), "f", i.to_string()],
                _ => cmd!["MGET", "p:0", "p:1", "p:missing"],
            }
        })
        .collect()
}

/// Sends `hello` (if any) and `cmds` in one write and reads every reply.
async fn pipeline(addr: &str, hello: bool, cmds: &[Cmd]) -> (Option<Vec<u8>>, Vec<Vec<u8>>) {
    let mut c = RawConn::connect(addr).await;
    let mut raw = Vec::new();
    if hello {
        raw.extend_from_slice(&encode_str(&["HELLO", "3"]));
    }
    for cmd in cmds {
        raw.extend_from_slice(&encode_cmd(cmd));
    }
    c.send(&raw).await;
    let hello_reply = if hello {
        Some(c.read_reply().await)
    } else {
        None
    };
    (hello_reply, c.read_replies(cmds.len()).await)
}

async fn pipeline_differential(proto: Proto) {
    let env = Env::start().await;
    let cmds = pipeline_cmds();
    let hello = proto == Proto::Resp3;
    let (_, direct) = pipeline(&env.direct(), hello, &cmds).await;
    env.flushall().await;
    let (hello_reply, proxied) = pipeline(&env.proxied(), hello, &cmds).await;
    if let Some(reply) = hello_reply {
        check_hello3(&reply);
    }
    let mut script = Script::new();
    for cmd in cmds {
        script.add(cmd);
    }
    // Replies come back in order: the ECHOs carry their index, so a reordering would differ.
    assert_same(&format!("{proto:?} pipeline"), &script, &direct, &proxied);
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_pipeline_of_200_matches_redis() {
    pipeline_differential(Proto::Resp2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp3_pipeline_of_200_after_hello_in_the_same_write_matches_redis() {
    pipeline_differential(Proto::Resp3).await;
}

// ------------------------------------------------------------------------------------------
// 4. MULTI/EXEC/DISCARD and WATCH
// ------------------------------------------------------------------------------------------

fn transaction_script() -> Script {
    let mut s = Script::new();
    s.add(cmd!["SET", "t:str", "notanumber"])
        // A plain transaction, with a RESP2 null array and a nil bulk inside.
        .expect(cmd!["MULTI"], b"+OK\r\n")
        .expect(cmd!["SET", "t:a", "1"], b"+QUEUED\r\n")
        .add(cmd!["INCR", "t:a"])
        .add(cmd!["LPOP", "t:missing", "2"])
        .add(cmd!["LPOP", "t:missing"])
        .add(cmd!["GET", "t:a"])
        .add(cmd!["HSET", "t:h", "f", "v", "g", "w"])
        .add(cmd!["HGETALL", "t:h"])
        .add(cmd!["ZADD", "t:z", "1.5", "m", "0.1", "n"])
        .add(cmd!["ZRANGE", "t:z", "0", "-1", "WITHSCORES"])
        .add(cmd!["BLPOP", "t:empty", "1"])
        .add(cmd!["PING"])
        .add(cmd!["ECHO", "in a transaction"])
        .add(cmd!["EXEC"])
        // Empty transaction.
        .add(cmd!["MULTI"])
        .expect(cmd!["EXEC"], b"*0\r\n")
        // A runtime error inside EXEC does not abort the others.
        .add(cmd!["MULTI"])
        .add(cmd!["INCR", "t:str"])
        .add(cmd!["INCR", "t:a"])
        .add(cmd!["EXEC"])
        // Nested MULTI is an error that leaves the transaction open.
        .add(cmd!["MULTI"])
        .expect(cmd!["MULTI"], b"-ERR MULTI calls can not be nested\r\n")
        .add(cmd!["SET", "t:b", "1"])
        .add(cmd!["EXEC"])
        // EXEC and DISCARD without MULTI.
        .expect(cmd!["EXEC"], b"-ERR EXEC without MULTI\r\n")
        .expect(cmd!["DISCARD"], b"-ERR DISCARD without MULTI\r\n")
        // DISCARD drops the queue.
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:a", "discarded"])
        .expect(cmd!["DISCARD"], b"+OK\r\n")
        .add(cmd!["GET", "t:a"])
        // A wrong-arity command queued: EXECABORT, nothing applied.
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:c", "1"])
        .add(cmd!["GET"])
        .add(cmd!["SET", "t:d", "1"])
        .expect(
            cmd!["EXEC"],
            b"-EXECABORT Transaction discarded because of previous errors.\r\n",
        )
        .add(cmd!["EXISTS", "t:c", "t:d"])
        // An unknown command queued: EXECABORT.
        .add(cmd!["MULTI"])
        .add(cmd!["FOO", "bar"])
        .add(cmd!["EXEC"])
        // WATCH inside MULTI.
        .add(cmd!["MULTI"])
        .add(cmd!["WATCH", "t:a"])
        .add(cmd!["SET", "t:e", "1"])
        .add(cmd!["EXEC"])
        // WATCH, untouched: EXEC runs.
        .add(cmd!["WATCH", "t:w1"])
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:w1", "mine"])
        .add(cmd!["EXEC"])
        // WATCH, then another connection changes the key: EXEC answers a null.
        .expect(cmd!["WATCH", "t:w2"], b"+OK\r\n")
        .add(cmd!["GET", "t:w2"])
        .on(1)
        .expect(cmd!["SET", "t:w2", "theirs"], b"+OK\r\n")
        .on(0)
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:w2", "mine"])
        .expect(cmd!["EXEC"], b"*-1\r\n")
        .add(cmd!["GET", "t:w2"])
        // WATCH, then the same connection changes the key before MULTI: EXEC answers a null.
        .add(cmd!["WATCH", "t:w3"])
        .add(cmd!["SET", "t:w3", "self"])
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:w3", "mine"])
        .add(cmd!["EXEC"])
        .add(cmd!["GET", "t:w3"])
        // UNWATCH forgets the watch.
        .add(cmd!["WATCH", "t:w4"])
        .on(1)
        .add(cmd!["SET", "t:w4", "theirs"])
        .on(0)
        .add(cmd!["UNWATCH"])
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:w4", "mine"])
        .add(cmd!["EXEC"])
        .add(cmd!["GET", "t:w4"])
        // DISCARD forgets the watch too.
        .add(cmd!["WATCH", "t:w5"])
        .on(1)
        .add(cmd!["SET", "t:w5", "theirs"])
        .on(0)
        .add(cmd!["MULTI"])
        .add(cmd!["DISCARD"])
        .add(cmd!["MULTI"])
        .add(cmd!["SET", "t:w5", "mine"])
        .add(cmd!["EXEC"])
        .add(cmd!["GET", "t:w5"]);
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_transactions_match_redis() {
    let env = Env::start().await;
    env.differential("RESP2 transactions", Proto::Resp2, &transaction_script())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp3_transactions_match_redis() {
    let env = Env::start().await;
    // The EXEC reply holds a map (HGETALL) and doubles (ZRANGE WITHSCORES), compared byte for
    // byte as in section 2.
    env.differential("RESP3 transactions", Proto::Resp3, &transaction_script())
        .await;
}

// ------------------------------------------------------------------------------------------
// 5. Blocking commands
// ------------------------------------------------------------------------------------------

fn blocking_timeouts_script() -> Script {
    let mut s = Script::new();
    s.expect(cmd!["BLPOP", "b:empty", "0.2"], b"*-1\r\n")
        .add(cmd!["BRPOP", "b:empty", "b:empty2", "0.1"])
        .add(cmd!["BLMOVE", "b:empty", "b:dst", "LEFT", "RIGHT", "0.1"])
        .add(cmd!["BRPOPLPUSH", "b:empty", "b:dst", "0.1"])
        .add(cmd!["BLMPOP", "0.1", "1", "b:empty", "LEFT"])
        .add(cmd!["BZPOPMIN", "b:emptyz", "0.1"])
        .add(cmd!["BZPOPMAX", "b:emptyz", "0.1"])
        .add(cmd!["BZMPOP", "0.1", "1", "b:emptyz", "MIN"])
        .add(cmd!["XREAD", "BLOCK", "100", "STREAMS", "b:emptyx", "$"])
        .add(cmd!["BLPOP", "b:empty", "notanumber"])
        .add(cmd!["BLPOP", "b:empty", "-1"])
        .add(cmd!["BLPOP", "b:empty"])
        // Served at once: the list has an element.
        .add(cmd!["RPUSH", "b:full", "x", "y"])
        .add(cmd!["BLPOP", "b:empty", "b:full", "1"])
        .add(cmd!["BRPOP", "b:full", "1"])
        .add(cmd!["ZADD", "b:z", "1.5", "m"])
        .add(cmd!["BZPOPMIN", "b:z", "1"])
        .add(cmd!["SET", "b:str", "v"])
        .add(cmd!["BLPOP", "b:str", "0.1"])
        // The connection still works after a timed-out pop.
        .add(cmd!["PING"])
        .add(cmd!["GET", "b:str"]);
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_blocking_timeouts_match_redis() {
    let env = Env::start().await;
    env.differential(
        "RESP2 blocking timeouts",
        Proto::Resp2,
        &blocking_timeouts_script(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp3_blocking_timeouts_match_redis() {
    let env = Env::start().await;
    env.differential(
        "RESP3 blocking timeouts",
        Proto::Resp3,
        &blocking_timeouts_script(),
    )
    .await;
}

/// A BLPOP blocked on one connection is served by an RPUSH from another.
async fn served_blpop(env: &Env, addr: &str, proto: Proto, is_holdfast: bool) -> Vec<Vec<u8>> {
    let mut waiter = RawConn::connect(addr).await;
    let mut pusher = RawConn::connect(addr).await;
    if proto == Proto::Resp3 {
        hello3(&mut waiter, is_holdfast).await;
        hello3(&mut pusher, is_holdfast).await;
    }
    waiter
        .send(&encode_str(&["BLPOP", "b:q1", "b:q2", "5"]))
        .await;
    env.wait_blocked(1).await;
    let pushed = pusher.command(&["RPUSH", "b:q2", "first", "second"]).await;
    let popped = waiter.read_reply().await;
    let left = pusher.command(&["LRANGE", "b:q2", "0", "-1"]).await;
    // Served again on the same connection, blocking a second time.
    waiter.send(&encode_str(&["BRPOP", "b:q3", "5"])).await;
    env.wait_blocked(1).await;
    let pushed2 = pusher.command(&["LPUSH", "b:q3", "third"]).await;
    let popped2 = waiter.read_reply().await;
    let after = waiter.command(&["PING"]).await;
    vec![pushed, popped, left, pushed2, popped2, after]
}

async fn served_differential(proto: Proto) {
    let env = Env::start().await;
    let direct = served_blpop(&env, &env.direct(), proto, false).await;
    env.flushall().await;
    let proxied = served_blpop(&env, &env.proxied(), proto, true).await;
    let mut script = Script::new();
    script
        .add(cmd!["RPUSH", "b:q2", "first", "second"])
        .add(cmd!["BLPOP", "b:q1", "b:q2", "5"])
        .add(cmd!["LRANGE", "b:q2", "0", "-1"])
        .add(cmd!["LPUSH", "b:q3", "third"])
        .add(cmd!["BRPOP", "b:q3", "5"])
        .add(cmd!["PING"]);
    // An array in both protocols.
    assert_eq!(
        direct[1], b"*2\r\n$4\r\nb:q2\r\n$5\r\nfirst\r\n",
        "redis: the blocked BLPOP is served"
    );
    assert_same(
        &format!("{proto:?} BLPOP served by another connection"),
        &script,
        &direct,
        &proxied,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn resp2_blpop_served_by_another_connection_matches_redis() {
    served_differential(Proto::Resp2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resp3_blpop_served_by_another_connection_matches_redis() {
    served_differential(Proto::Resp3).await;
}

// ------------------------------------------------------------------------------------------
// 6. redis-cli
// ------------------------------------------------------------------------------------------

/// What one redis-cli run printed.
#[derive(Debug, PartialEq)]
struct CliRun {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `redis-cli -h 127.0.0.1 -p PORT FLAGS... ARGS...` (blocking; 10 s at most).
fn redis_cli(port: u16, flags: &[&str], args: &[&str]) -> CliRun {
    let mut child = Process::new("redis-cli")
        .arg("-h")
        .arg("127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        .args(flags)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli runs (is redis-tools installed?)");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout.read_to_end(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        text
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for redis-cli") {
            break status;
        }
        if Instant::now() >= deadline {
            // Only this child, by its handle.
            let _ = child.kill();
            let _ = child.wait();
            panic!("redis-cli {flags:?} {args:?} on port {port} ran over {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    CliRun {
        status: status.code(),
        stdout: String::from_utf8_lossy(&out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
    }
}

/// How a redis-cli run's output is compared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CliCmp {
    /// Byte for byte.
    Exact,
    /// Lines in any order (KEYS: hash-table order).
    Lines,
}

/// The redis-cli script: arguments and how their output is compared.
fn cli_script() -> Vec<(Vec<&'static str>, CliCmp)> {
    let plain = |args: &[&'static str]| (args.to_vec(), CliCmp::Exact);
    vec![
        plain(&["PING"]),
        plain(&["SET", "c:s", "hello world"]),
        plain(&["GET", "c:s"]),
        plain(&["GET", "c:missing"]),
        plain(&["SET", "c:nx", "v", "NX", "EX", "100"]),
        plain(&["SET", "c:nx", "v", "NX"]),
        plain(&["INCR", "c:n"]),
        plain(&["MSET", "c:a", "1", "c:b", "2"]),
        plain(&["MGET", "c:a", "c:missing", "c:b"]),
        plain(&["HSET", "c:h", "f1", "v1", "f2", "line\nbreak"]),
        plain(&["HGETALL", "c:h"]),
        plain(&["HGET", "c:h", "f1"]),
        plain(&["HMGET", "c:h", "f1", "nope"]),
        plain(&["SADD", "c:set", "3", "1", "2"]),
        plain(&["SMEMBERS", "c:set"]),
        plain(&["ZADD", "c:z", "1", "a", "2.5", "b", "-3", "c"]),
        plain(&["ZRANGE", "c:z", "0", "-1", "WITHSCORES"]),
        plain(&["ZRANGEBYSCORE", "c:z", "-inf", "+inf", "WITHSCORES"]),
        plain(&["ZSCORE", "c:z", "b"]),
        plain(&["RPUSH", "c:l", "a", "b", "c"]),
        plain(&["LRANGE", "c:l", "0", "-1"]),
        plain(&["LPOP", "c:missing", "2"]),
        plain(&["LPOP", "c:missing"]),
        plain(&["XADD", "c:x", "1-1", "f", "v"]),
        plain(&["XRANGE", "c:x", "-", "+"]),
        plain(&["TYPE", "c:h"]),
        plain(&["TTL", "c:s"]),
        (vec!["KEYS", "c:*"], CliCmp::Lines),
        plain(&["EXISTS", "c:s", "c:missing"]),
        plain(&["DEL", "c:a", "c:b"]),
        plain(&["GET"]),
        plain(&["FOO", "bar"]),
        plain(&["HGET", "c:s", "f"]),
        plain(&["ECHO", "a b"]),
        plain(&["WAIT", "0", "0"]),
    ]
}

/// Output lines in sorted order.
/// The lines in any order. `--no-raw` numbers them (` 1) "c:z"`); the numbers follow the
/// order, so they are dropped: Redis's own KEYS order can differ between two runs.
fn sorted_lines(text: &str) -> String {
    let mut lines: Vec<&str> = text
        .lines()
        .map(|line| match line.trim_start().split_once(") ") {
            Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
            _ => line,
        })
        .collect();
    lines.sort_unstable();
    lines.join("\n")
}

fn cli_run_all(port: u16, flags: &[&str], script: &[(Vec<&'static str>, CliCmp)]) -> Vec<CliRun> {
    script
        .iter()
        .map(|(args, cmp)| {
            let mut run = redis_cli(port, flags, args);
            if *cmp == CliCmp::Lines {
                run.stdout = sorted_lines(&run.stdout);
            }
            run
        })
        .collect()
}

/// Runs `script` with redis-cli against Redis and holdfast under each set of `flags` and
/// returns every difference.
async fn cli_differences(
    env: &Env,
    script: fn() -> Vec<(Vec<&'static str>, CliCmp)>,
    check: impl Fn(&[&str], &[CliRun]),
) -> Vec<String> {
    let mut differ = Vec::new();
    for flags in [
        &[][..],
        &["--no-raw"][..],
        &["-3"][..],
        &["-3", "--no-raw"][..],
    ] {
        let mut runs = Vec::new();
        for port in [env.redis.port(), env.proxy.port] {
            let flags = flags.to_vec();
            runs.push(
                tokio::task::spawn_blocking(move || cli_run_all(port, &flags, &script()))
                    .await
                    .unwrap(),
            );
            env.flushall().await;
        }
        check(flags, &runs[0]);
        for ((args, _), (d, p)) in script().iter().zip(runs[0].iter().zip(&runs[1])) {
            if d != p {
                differ.push(format!(
                    "  redis-cli {flags:?} {args:?}\n     redis:    {d:?}\n     holdfast: {p:?}"
                ));
            }
        }
    }
    differ
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_cli_output_matches_redis() {
    let env = Env::start().await;
    let differ = cli_differences(&env, cli_script, |flags, direct| {
        // The script must have talked to Redis for real.
        assert_eq!(direct[0].stdout, "PONG\n", "redis-cli {flags:?} PING");
        assert!(
            direct[10].stdout.contains("f1") && direct[10].stdout.contains("v1"),
            "redis-cli {flags:?} HGETALL: {:?}",
            direct[10]
        );
        assert!(
            direct[31].stdout.contains("ERR unknown command"),
            "redis-cli {flags:?} FOO bar: {:?}",
            direct[31]
        );
    })
    .await;
    assert!(
        differ.is_empty(),
        "{} redis-cli runs differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// RESP3 doubles and a map, as redis-cli prints them.
fn cli_doubles_and_maps_script() -> Vec<(Vec<&'static str>, CliCmp)> {
    let plain = |args: &[&'static str]| (args.to_vec(), CliCmp::Exact);
    vec![
        plain(&["HSET", "c:h", "f1", "v1", "f2", "v2"]),
        plain(&["HGETALL", "c:h"]),
        plain(&["ZADD", "c:z", "0.1", "a", "1e20", "b"]),
        plain(&["ZRANGE", "c:z", "0", "-1", "WITHSCORES"]),
        plain(&["ZSCORE", "c:z", "a"]),
    ]
}

/// What redis-cli shows of RESP3 doubles and maps, in every mode: with `-3`, doubles as Redis
/// spells them (`(double) 0.10000000000000001`, not `(double) 0.1`) and HGETALL's fields in
/// Redis's order.
#[tokio::test(flavor = "multi_thread")]
async fn redis_cli_doubles_and_maps_match_redis() {
    let env = Env::start().await;
    let differ = cli_differences(&env, cli_doubles_and_maps_script, |flags, direct| {
        assert!(direct[1].stdout.contains("v2"), "redis-cli {flags:?}");
    })
    .await;
    assert!(
        differ.is_empty(),
        "{} redis-cli runs differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

// ------------------------------------------------------------------------------------------
// 7. fred, as an application uses it
// ------------------------------------------------------------------------------------------

async fn fred_client(port: u16, version: RespVersion) -> Client {
    let mut config = Config::from_url(&format!("redis://127.0.0.1:{port}/0")).unwrap();
    config.version = version;
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = LIMIT)
        .with_connection_config(|c| {
            c.connection_timeout = LIMIT;
            // The handshake then also sends CLIENT SETNAME (besides HELLO or PING, SELECT,
            // CLIENT ID and INFO).
            c.auto_client_setname = true;
        })
        .build()
        .unwrap();
    let _task = client.init().await.unwrap_or_else(|e| {
        panic!("fred connects to 127.0.0.1:{port}: {e:?}");
    });
    client
}

fn sorted_map<V>(map: HashMap<String, V>) -> BTreeMap<String, V> {
    map.into_iter().collect()
}

fn sorted<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items
}

/// Typed calls an application makes, each result as text (errors included). Hash maps are
/// turned into sorted maps first, so that the text does not depend on `HashMap` order.
async fn fred_ops(client: &Client) -> Vec<(&'static str, String)> {
    type Entries = Vec<(String, HashMap<String, String>)>;
    let mut out: Vec<(&'static str, String)> = Vec::new();
    macro_rules! rec {
        ($label:expr, $result:expr) => {{
            let result = $result;
            out.push(($label, format!("{result:?}")));
        }};
    }
    let entries = |r: Result<Entries, Error>| {
        r.map(|v| {
            v.into_iter()
                .map(|(id, fields)| (id, sorted_map(fields)))
                .collect::<Vec<_>>()
        })
    };
    rec!("ping", client.ping::<String>(None).await);
    rec!(
        "set",
        client
            .set::<(), _, _>("f:s", "value", None, None, false)
            .await
    );
    rec!(
        "set nx ex",
        client
            .set::<Option<String>, _, _>(
                "f:nx",
                "v",
                Some(Expiration::EX(100)),
                Some(SetOptions::NX),
                false,
            )
            .await
    );
    rec!(
        "set nx again",
        client
            .set::<Option<String>, _, _>("f:nx", "w", None, Some(SetOptions::NX), false)
            .await
    );
    rec!(
        "set px",
        client
            .set::<(), _, _>("f:px", "v", Some(Expiration::PX(100_000)), None, false)
            .await
    );
    rec!("get", client.get::<Option<String>, _>("f:s").await);
    rec!(
        "get missing",
        client.get::<Option<String>, _>("f:missing").await
    );
    rec!("get bytes", client.get::<Option<Vec<u8>>, _>("f:s").await);
    rec!("ttl", client.ttl::<i64, _>("f:s").await);
    rec!(
        "hset",
        client
            .hset::<i64, _, _>("f:h", vec![("a", "1"), ("b", "2"), ("c", "3")])
            .await
    );
    rec!(
        "hgetall",
        client
            .hgetall::<HashMap<String, String>, _>("f:h")
            .await
            .map(sorted_map)
    );
    rec!(
        "hgetall missing",
        client
            .hgetall::<HashMap<String, String>, _>("f:missing")
            .await
            .map(sorted_map)
    );
    rec!(
        "hget",
        client.hget::<Option<String>, _, _>("f:h", "a").await
    );
    rec!(
        "hmget",
        client
            .hmget::<Vec<Option<String>>, _, _>("f:h", vec!["a", "nope", "c"])
            .await
    );
    rec!("hexists", client.hexists::<bool, _, _>("f:h", "b").await);
    rec!(
        "hdel",
        client.hdel::<i64, _, _>("f:h", vec!["b", "nope"]).await
    );
    // fred sends HSET's fields from a HashMap, so their order (and HKEYS's) varies per run.
    rec!(
        "hkeys",
        client.hkeys::<Vec<String>, _>("f:h").await.map(sorted)
    );
    rec!("incr", client.incr::<i64, _>("f:n").await);
    rec!("incr_by", client.incr_by::<i64, _>("f:n", 41).await);
    rec!("incr wrongtype", client.incr::<i64, _>("f:h").await);
    rec!(
        "sadd",
        client.sadd::<i64, _, _>("f:set", vec!["3", "1", "2"]).await
    );
    rec!(
        "smembers",
        client.smembers::<Vec<i64>, _>("f:set").await.map(sorted)
    );
    rec!(
        "zadd",
        client
            .zadd::<i64, _, _>(
                "f:z",
                None,
                None,
                false,
                false,
                vec![(1.0, "a"), (2.5, "b"), (0.1, "c")],
            )
            .await
    );
    rec!(
        "zrange withscores",
        client
            .zrange::<Vec<(String, f64)>, _, _, _>("f:z", 0, -1, None, false, None, true)
            .await
    );
    rec!(
        "zrangebyscore withscores",
        client
            .zrangebyscore::<Vec<(String, f64)>, _, _, _>("f:z", "-inf", "+inf", true, None)
            .await
    );
    rec!(
        "zscore",
        client.zscore::<Option<f64>, _, _>("f:z", "c").await
    );
    rec!("zrem", client.zrem::<i64, _, _>("f:z", "a").await);
    rec!(
        "xadd",
        client
            .xadd::<String, _, _, _, _>("f:x", false, None, "1-1", vec![("f", "v")])
            .await
    );
    rec!(
        "xadd 2",
        client
            .xadd::<String, _, _, _, _>("f:x", false, None, "2-1", vec![("f", "w"), ("g", "z")])
            .await
    );
    rec!(
        "xadd smaller id",
        client
            .xadd::<String, _, _, _, _>("f:x", false, None, "1-0", vec![("f", "v")])
            .await
    );
    rec!("xlen", client.xlen::<i64, _>("f:x").await);
    rec!(
        "xrange",
        entries(
            client
                .xrange::<Entries, _, _, _>("f:x", "-", "+", None)
                .await
        )
    );
    rec!(
        "xrevrange count",
        entries(
            client
                .xrevrange::<Entries, _, _, _>("f:x", "+", "-", Some(1))
                .await
        )
    );
    rec!(
        "mget",
        client
            .mget::<Vec<Option<String>>, _>(vec!["f:s", "f:missing", "f:n"])
            .await
    );
    rec!(
        "lpush",
        client.lpush::<i64, _, _>("f:l", vec!["a", "b", "c"]).await
    );
    rec!(
        "lrange",
        client.lrange::<Vec<String>, _>("f:l", 0, -1).await
    );
    rec!(
        "lpop count missing",
        client
            .lpop::<Option<Vec<String>>, _>("f:missing", Some(2))
            .await
    );
    rec!(
        "lpop missing",
        client.lpop::<Option<String>, _>("f:missing", None).await
    );
    rec!(
        "scan",
        client
            .custom::<(String, Vec<String>), _>(
                CustomCommand::new_static("SCAN", ClusterHash::Random, false),
                vec!["0", "MATCH", "f:*", "COUNT", "1000"],
            )
            .await
            .map(|(cursor, keys)| (cursor, sorted(keys)))
    );
    rec!(
        "exists",
        client
            .exists::<i64, _>(vec!["f:s", "f:missing", "f:h"])
            .await
    );
    rec!(
        "del",
        client.del::<i64, _>(vec!["f:s", "f:missing", "f:nx"]).await
    );
    rec!("exists after del", client.exists::<i64, _>("f:s").await);
    rec!("expire", client.expire::<bool, _>("f:h", 100, None).await);
    rec!("persist", client.persist::<bool, _>("f:h").await);
    rec!(
        "type",
        client
            .custom::<String, _>(
                CustomCommand::new_static("TYPE", ClusterHash::FirstKey, false),
                vec!["f:z"],
            )
            .await
    );
    rec!(
        "wait",
        client
            .custom::<i64, _>(
                CustomCommand::new_static("WAIT", ClusterHash::Random, false),
                vec![0, 0],
            )
            .await
    );
    rec!(
        "unknown command",
        client
            .custom::<String, _>(
                CustomCommand::new_static("FOO", ClusterHash::Random, false),
                vec!["bar"],
            )
            .await
    );
    rec!(
        "transaction",
        async {
            let trx = client.multi();
            trx.incr::<(), _>("f:n").await?;
            trx.get::<(), _>("f:n").await?;
            trx.hgetall::<(), _>("f:h").await?;
            trx.exec::<(i64, String, HashMap<String, String>)>(true)
                .await
        }
        .await
        .map(|(n, text, fields)| (n, text, sorted_map(fields)))
    );
    out
}

/// The INFO fields an application reads, and the major.minor of `redis_version`.
fn info_fields(info: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for line in info.lines() {
        if let Some((k, v)) = line.trim_end().split_once(':') {
            match k {
                "redis_mode" | "role" => {
                    fields.insert(k.to_string(), v.to_string());
                }
                "redis_version" => {
                    let major_minor: Vec<&str> = v.split('.').take(2).collect();
                    fields.insert(k.to_string(), major_minor.join("."));
                }
                _ => {}
            }
        }
    }
    if info.contains("# Server") {
        fields.insert("# Server".to_string(), "present".to_string());
    }
    fields
}

async fn fred_differential(version: RespVersion) {
    let env = Env::start().await;
    let mut results = Vec::new();
    for (i, port) in [env.redis.port(), env.proxy.port].into_iter().enumerate() {
        let client = fred_client(port, version.clone()).await;
        let ops = tokio::time::timeout(Duration::from_secs(60), fred_ops(&client))
            .await
            .expect("fred ops finish");
        let info = client.info::<String>(None).await.expect("INFO");
        let id = client
            .custom::<i64, _>(
                CustomCommand::new_static("CLIENT", ClusterHash::Random, false),
                vec!["ID"],
            )
            .await
            .expect("CLIENT ID");
        assert!(id > 0, "CLIENT ID {id}");
        // The name the handshake set is the name the connection has.
        let name = client
            .custom::<Option<String>, _>(
                CustomCommand::new_static("CLIENT", ClusterHash::Random, false),
                vec!["GETNAME"],
            )
            .await
            .expect("CLIENT GETNAME");
        assert_eq!(
            name.as_deref(),
            Some(client.id()),
            "CLIENT GETNAME on port {port}"
        );
        let _ = client.quit().await;
        results.push((ops, info_fields(&info)));
        if i == 0 {
            env.flushall().await;
        }
    }
    let (direct_ops, direct_info) = &results[0];
    let (proxied_ops, proxied_info) = &results[1];
    assert_eq!(
        direct_info.len(),
        4,
        "redis INFO has the fields an application reads: {direct_info:?}"
    );
    assert_eq!(
        direct_info, proxied_info,
        "{version:?} INFO: redis vs holdfast"
    );
    let mut differ = Vec::new();
    for ((label, d), (_, p)) in direct_ops.iter().zip(proxied_ops) {
        if d != p {
            differ.push(format!("  {label}\n     redis:    {d}\n     holdfast: {p}"));
        }
    }
    assert_eq!(direct_ops.len(), proxied_ops.len());
    // The script ran against Redis for real.
    assert!(
        direct_ops
            .iter()
            .any(|(l, r)| *l == "incr_by" && r == "Ok(42)"),
        "{direct_ops:?}"
    );
    assert!(
        differ.is_empty(),
        "{version:?}: {} fred results differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn fred_resp2_application_matches_redis() {
    fred_differential(RespVersion::RESP2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fred_resp3_application_matches_redis() {
    fred_differential(RespVersion::RESP3).await;
}

// ------------------------------------------------------------------------------------------
// The comparisons themselves
// ------------------------------------------------------------------------------------------

/// Every comparison used above can fail: each accepts what it is meant to accept and nothing
/// more.
#[test]
fn comparisons_reject_real_differences() {
    let exact = |a: &[u8], b: &[u8]| agree(Cmp::Exact, a, b);
    assert!(exact(b"$1\r\na\r\n", b"$1\r\na\r\n"));
    assert!(!exact(b"*-1\r\n", b"$-1\r\n"));
    // A RESP3 double of the same value spelled otherwise, or a map with its pairs in another
    // order, differs.
    assert!(!exact(b",0.10000000000000001\r\n", b",0.1\r\n"));
    assert!(!exact(
        b"%2\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\ng\r\n$1\r\nw\r\n",
        b"%2\r\n$1\r\ng\r\n$1\r\nw\r\n$1\r\nf\r\n$1\r\nv\r\n"
    ));

    let set_ab = b"*2\r\n$1\r\na\r\n$1\r\nb\r\n";
    let set_ba = b"*2\r\n$1\r\nb\r\n$1\r\na\r\n";
    let set_ac = b"*2\r\n$1\r\na\r\n$1\r\nc\r\n";
    assert!(agree(Cmp::Sorted, set_ab, set_ba));
    assert!(!agree(Cmp::Sorted, set_ab, set_ac));
    assert!(!agree(Cmp::Sorted, set_ab, b"~2\r\n$1\r\na\r\n$1\r\nb\r\n"));

    let scan =
        |cursor: &str, keys: &[u8]| [format!("*2\r\n$1\r\n{cursor}\r\n").as_bytes(), keys].concat();
    assert!(agree(
        Cmp::ScanSorted,
        &scan("0", set_ab),
        &scan("0", set_ba)
    ));
    assert!(!agree(
        Cmp::ScanSorted,
        &scan("0", set_ab),
        &scan("5", set_ba)
    ));
    assert!(!agree(
        Cmp::ScanSorted,
        &scan("0", set_ab),
        &scan("0", set_ac)
    ));

    assert!(agree(Cmp::IntWithin(2), b":100\r\n", b":98\r\n"));
    assert!(!agree(Cmp::IntWithin(2), b":100\r\n", b":97\r\n"));
    assert!(!agree(Cmp::IntWithin(2), b":-1\r\n", b":-2\r\n"));
    assert!(!agree(Cmp::IntWithin(2), b":-1\r\n", b":1\r\n"));
    assert!(!agree(Cmp::IntWithin(2), b":1\r\n", b"$1\r\n1\r\n"));

    assert_eq!(sorted_lines("b\na"), sorted_lines("a\nb"));
    assert_eq!(
        sorted_lines(" 1) \"b\"\n 2) \"a\""),
        sorted_lines(" 1) \"a\"\n 2) \"b\"")
    );
    assert_ne!(sorted_lines(" 1) \"b\""), sorted_lines(" 1) \"a\""));
    assert_ne!(sorted_lines("a\nb"), sorted_lines("a\nc"));
}
