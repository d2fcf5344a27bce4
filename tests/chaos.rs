//! The chaos suite: real backends fail under load, and an oracle checks afterwards that the
//! clients saw latency and nothing else.
//!
//! Several client connections run SET, GET, INCR, SADD, DEL, SETNX and HSET through holdfast,
//! each sequentially on keys of its own, checking every reply against what it knows. A fault
//! is injected after `HF_CHAOS_SECS` seconds of load and the load goes on for as long again
//! after the backend has healed. Then the oracle reads everything back through holdfast:
//! every acknowledged write is present, each counter equals its acknowledged increments (above
//! means applied twice, below means lost), deleted keys are absent. Errors the clients saw are
//! counted, and the longest hold is reported next to the fault's own duration.
//!
//! Faults: a Sentinel-managed master SIGKILLed, one demoted by `SENTINEL FAILOVER`, one
//! frozen 4 s (the "zombie", with and without `min_replicas_ack`), and a switch while the
//! old master stays a master; a Cluster primary frozen 4 s; a
//! Cluster primary SIGKILLed; a PostgreSQL
//! primary killed and its standby promoted; PostgreSQL restarted in place, frozen (SIGSTOP)
//! and blackholed for 5 s; the backend blackholed for 10 s; an outage longer than the failover budget (clean errors during it,
//! service after it).
//!
//! By hand: `tests/chaos/run SECONDS` runs it with that much load around each fault, writes
//! every request's latency to `target/chaos/` and plots them (`tests/chaos/plot.py`).
//! Environment: `HF_CHAOS_SECS` (default 3), `HF_CHAOS_CLIENTS` (default 4), `HF_CHAOS_OUT`
//! (a directory for the samples; none by default).

#[allow(unused_imports)]
mod support;
use support::cluster::Cluster;
use support::sentinel::Sentinel;
use support::*;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

/// The faults run one at a time: each wants the machine's two cores for itself.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(body: impl Future<Output = ()>) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(body);
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The load's client connections.
fn clients() -> usize {
    env_number("HF_CHAOS_CLIENTS", 4) as usize
}

/// Seconds of load before each fault, and again after it has healed.
fn load_secs() -> Duration {
    Duration::from_secs(env_number("HF_CHAOS_SECS", 3))
}

/// The policy every fault runs under, with `extra` added to `[defaults]`: exact mode; a budget
/// of `attempts` attempts with a backoff from 50 ms capped at 1 s, so the hold ends soon after
/// the fault does (100 attempts outlast every fault here); a 1 s wait for a connection. Exact
/// mode's schedule must fit in its token's 15 minutes, attempts' timeouts included (see
/// `check_token_outlives_retries` in src/config/namespaces.rs), so the backends below answer within 2 s
/// (Redis) or 5 s (PostgreSQL statements) rather than the default 10 s.
fn policy(attempts: u32, extra: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "exact"
acquire_timeout = "1s"
{extra}
[defaults.retry]
max_attempts = {attempts}
min_delay = "50ms"
multiplier = 2.0
max_delay = "1s"
jitter = 0.15
"#
    )
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Waits until `replica`'s link to its master is up, or panics after `limit` naming `what`.
async fn synced(replica: &RedisServer, limit: Duration, what: &str) {
    until(limit, what, || async {
        replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
    })
    .await;
}

/// One request as a client saw it.
struct Sample {
    /// Seconds since the load started, when the request was sent.
    at: f64,
    /// Milliseconds until its reply.
    latency: f64,
    op: &'static str,
    ok: bool,
}

/// What one client connection did and what it knows must be stored.
#[derive(Default)]
struct Client {
    id: usize,
    /// String keys whose content is known: `Some(value)` after an acknowledged SET, `None`
    /// after an acknowledged DEL. A key whose last write failed is in `unknown` instead.
    strings: HashMap<String, Option<String>>,
    unknown: HashSet<String>,
    /// Acknowledged INCRs, and INCRs that failed (each may or may not have been applied).
    incr_acked: u64,
    incr_failed: u64,
    /// SADD members and SETNX keys acknowledged as added.
    members: Vec<String>,
    nx: Vec<(String, String)>,
    /// Hash fields whose value is known, and those whose last HSET failed.
    fields: HashMap<String, String>,
    fields_unknown: HashSet<String>,
    /// Error replies and dropped connections, with the time they were answered.
    errors: Vec<(f64, String)>,
    /// Replies that contradict what the client knows (a stale read, a wrong count).
    wrong: Vec<String>,
    samples: Vec<Sample>,
}

impl Client {
    /// One operation, the `seq`th: its command and its name.
    fn next(&self, seq: u64) -> (Vec<String>, &'static str) {
        let i = self.id;
        let string = |n: u64| format!("c{i}:s:{}", n % 8);
        match seq % 7 {
            0 => (vec!["SET".into(), string(seq), format!("v{seq}")], "SET"),
            1 => (vec!["GET".into(), string(seq / 7)], "GET"),
            2 => (vec!["INCR".into(), format!("c{i}:n")], "INCR"),
            3 => (
                vec!["SADD".into(), format!("c{i}:set"), format!("m{seq}")],
                "SADD",
            ),
            4 => (vec!["DEL".into(), string(seq / 7 + 3)], "DEL"),
            5 => (
                vec!["SETNX".into(), format!("c{i}:nx:{seq}"), format!("v{seq}")],
                "SETNX",
            ),
            _ => (
                vec![
                    "HSET".into(),
                    format!("c{i}:h"),
                    format!("f{}", seq % 16),
                    format!("v{seq}"),
                ],
                "HSET",
            ),
        }
    }

    /// Checks a reply against what is known and records what it tells.
    fn answered(&mut self, args: &[String], reply: &str) {
        let key = args[1].clone();
        let wrong = |what: &str| format!("client {}: {args:?} answered {reply:?}, {what}", self.id);
        match args[0].as_str() {
            "SET" => {
                if reply == "+OK\r\n" {
                    self.unknown.remove(&key);
                    self.strings.insert(key, Some(args[2].clone()));
                } else {
                    self.wrong.push(wrong("expected +OK"));
                }
            }
            "GET" => {
                if let Some(known) = self.strings.get(&key) {
                    let expected = match known {
                        Some(v) => format!("${}\r\n{v}\r\n", v.len()),
                        None => "$-1\r\n".to_string(),
                    };
                    if reply != expected && !self.unknown.contains(&key) {
                        self.wrong.push(wrong(&format!("expected {expected:?}")));
                    }
                }
            }
            "INCR" => {
                let value: Option<u64> = reply
                    .strip_prefix(':')
                    .and_then(|r| r.trim_end().parse().ok());
                let low = self.incr_acked + 1;
                let high = low + self.incr_failed;
                match value {
                    Some(v) if (low..=high).contains(&v) => self.incr_acked += 1,
                    _ => {
                        self.incr_acked += 1;
                        self.wrong.push(wrong(&format!("expected :{low}..:{high}")));
                    }
                }
            }
            "SADD" => {
                if reply == ":1\r\n" {
                    self.members.push(args[2].clone());
                } else {
                    self.wrong.push(wrong("expected :1 (a new member)"));
                }
            }
            "DEL" => {
                if let (Some(known), false) = (self.strings.get(&key), self.unknown.contains(&key))
                {
                    let expected = if known.is_some() { ":1\r\n" } else { ":0\r\n" };
                    if reply != expected {
                        self.wrong.push(wrong(&format!("expected {expected:?}")));
                    }
                }
                self.unknown.remove(&key);
                self.strings.insert(key, None);
            }
            "SETNX" => {
                if reply == ":1\r\n" {
                    self.nx.push((key, args[2].clone()));
                } else {
                    self.wrong.push(wrong("expected :1 (a fresh key)"));
                }
            }
            _ => {
                let field = args[2].clone();
                if let (false, Some(_)) = (
                    self.fields_unknown.contains(&field),
                    reply.strip_prefix(':'),
                ) {
                    let expected = if self.fields.contains_key(&field) {
                        ":0\r\n"
                    } else {
                        ":1\r\n"
                    };
                    if reply != expected {
                        self.wrong.push(wrong(&format!("expected {expected:?}")));
                    }
                } else if !reply.starts_with(':') {
                    self.wrong.push(wrong("expected an integer"));
                }
                self.fields_unknown.remove(&field);
                self.fields.insert(field, args[3].clone());
            }
        }
    }

    /// A write whose outcome the client cannot know: what it touched becomes unknown.
    fn failed(&mut self, args: &[String]) {
        let key = args[1].clone();
        match args[0].as_str() {
            "SET" | "DEL" => {
                self.unknown.insert(key);
            }
            "INCR" => self.incr_failed += 1,
            "HSET" => {
                self.fields_unknown.insert(args[2].clone());
            }
            // A member or a fresh key that may or may not be there: never asserted.
            _ => {}
        }
    }
}

/// The clients, running until told to stop.
struct Load {
    addr: String,
    started: Instant,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<Client>>,
}

impl Load {
    fn start(addr: &str) -> Load {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..clients())
            .map(|id| {
                let addr = addr.to_string();
                let stop = stop.clone();
                tokio::spawn(async move { client(id, &addr, started, &stop).await })
            })
            .collect();
        Load {
            addr: addr.to_string(),
            started,
            stop,
            clients,
        }
    }

    /// Starts the load and lets it run `HF_CHAOS_SECS` before the fault.
    async fn warmed_up(addr: &str) -> Load {
        let load = Load::start(addr);
        sleep(load_secs()).await;
        load
    }

    /// After the fault (`began`..`healed`, seconds since the start): the load runs as long
    /// again, then everything is read back.
    async fn settled(self, fault: &str, began: f64, healed: f64, detail: String) -> Report {
        sleep(load_secs()).await;
        self.finish(
            fault,
            Span {
                began,
                healed,
                detail,
            },
        )
        .await
    }

    /// Seconds since the load started.
    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Stops the clients, reads everything back and reports.
    async fn finish(self, fault: &str, span: Span) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut clients = Vec::new();
        for handle in self.clients {
            clients.push(handle.await.expect("a client task"));
        }
        let mut conn = RawConn::connect(&self.addr).await;
        let mut report = Report {
            fault: fault.to_string(),
            span,
            ..Report::default()
        };
        for c in &clients {
            oracle(&mut conn, c, &mut report).await;
            report.ops += c.samples.len();
            report.errors.extend(c.errors.iter().cloned());
            report.wrong.extend(c.wrong.iter().cloned());
        }
        let mut latencies: Vec<f64> = clients
            .iter()
            .flat_map(|c| c.samples.iter().map(|s| s.latency))
            .collect();
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * q) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        report.p50 = at(0.5);
        report.p99 = at(0.99);
        report.longest = at(1.0);
        report.ok_after = clients
            .iter()
            .flat_map(|c| &c.samples)
            .filter(|s| s.ok && s.at > report.span.healed)
            .count();
        report.print();
        if let Ok(dir) = std::env::var("HF_CHAOS_OUT") {
            report.save(&dir, &clients);
        }
        report
    }
}

async fn client(id: usize, addr: &str, started: Instant, stop: &AtomicBool) -> Client {
    let mut state = Client {
        id,
        ..Client::default()
    };
    let mut conn = RawConn::connect(addr).await;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let (args, op) = state.next(seq);
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        let sent = Instant::now();
        let at = sent.duration_since(started).as_secs_f64();
        let reply = match conn.try_send(&encode_str(&words)).await {
            Ok(()) => conn
                .try_read_reply(Duration::from_secs(180))
                .await
                .map(|r| text(&r))
                .map_err(|e| format!("no reply: {e:?}")),
            Err(e) => Err(format!("cannot send: {e}")),
        };
        let latency = sent.elapsed().as_secs_f64() * 1000.0;
        let ok = match reply {
            Ok(reply) if !reply.starts_with('-') => {
                state.answered(&args, &reply);
                true
            }
            Ok(error) => {
                state
                    .errors
                    .push((at, format!("{op}: {}", error.trim_end())));
                state.failed(&args);
                false
            }
            Err(why) => {
                state.errors.push((at, format!("{op}: {why}")));
                state.failed(&args);
                conn = RawConn::connect(addr).await;
                false
            }
        };
        state.samples.push(Sample {
            at,
            latency,
            op,
            ok,
        });
        sleep(Duration::from_millis(1)).await;
    }
    state
}

/// Sends `commands` pipelined (one write) and reads their replies in order.
async fn ask(conn: &mut RawConn, commands: Vec<Vec<String>>) -> Vec<String> {
    let mut raw = Vec::new();
    for command in &commands {
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        raw.extend(encode_str(&words));
    }
    conn.send(&raw).await;
    let mut replies = Vec::with_capacity(commands.len());
    for _ in 0..commands.len() {
        let reply = conn
            .try_read_reply(Duration::from_secs(60))
            .await
            .expect("the oracle's read");
        replies.push(text(&reply));
    }
    replies
}

/// Reads back what client `c` knows must be stored, through holdfast, and adds what is
/// missing or doubled to the report.
async fn oracle(conn: &mut RawConn, c: &Client, report: &mut Report) {
    let i = c.id;
    let known: Vec<(&String, &Option<String>)> = c
        .strings
        .iter()
        .filter(|(k, _)| !c.unknown.contains(*k))
        .collect();
    let replies = ask(
        conn,
        known
            .iter()
            .map(|(k, _)| vec!["GET".into(), (*k).clone()])
            .collect(),
    )
    .await;
    for ((key, value), reply) in known.iter().zip(replies) {
        let expected = match value {
            Some(v) => format!("${}\r\n{v}\r\n", v.len()),
            None => "$-1\r\n".to_string(),
        };
        if reply != expected {
            report
                .lost
                .push(format!("{key}: {reply:?}, acknowledged {expected:?}"));
        }
    }
    let counter = ask(conn, vec![vec!["GET".into(), format!("c{i}:n")]]).await;
    let stored: u64 = counter[0]
        .lines()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if stored < c.incr_acked {
        report.lost.push(format!(
            "c{i}:n is {stored}, {} increments acknowledged",
            c.incr_acked
        ));
    }
    if stored > c.incr_acked + c.incr_failed {
        report.doubled.push(format!(
            "c{i}:n is {stored}: {} acknowledged, {} failed",
            c.incr_acked, c.incr_failed
        ));
    }
    report.increments += c.incr_acked;
    let members = ask(conn, vec![vec!["SMEMBERS".into(), format!("c{i}:set")]]).await;
    let missing = c
        .members
        .iter()
        .filter(|m| !members[0].contains(&format!("\r\n{m}\r\n")))
        .count();
    if missing > 0 {
        report
            .lost
            .push(format!("c{i}:set misses {missing} acknowledged members"));
    }
    let replies = ask(
        conn,
        c.nx.iter()
            .map(|(k, _)| vec!["GET".into(), k.clone()])
            .collect(),
    )
    .await;
    for ((key, value), reply) in c.nx.iter().zip(replies) {
        if reply != format!("${}\r\n{value}\r\n", value.len()) {
            report
                .lost
                .push(format!("{key}: {reply:?}, SETNX acknowledged"));
        }
    }
    let fields: Vec<(&String, &String)> = c
        .fields
        .iter()
        .filter(|(f, _)| !c.fields_unknown.contains(*f))
        .collect();
    let replies = ask(
        conn,
        fields
            .iter()
            .map(|(f, _)| vec!["HGET".into(), format!("c{i}:h"), (*f).clone()])
            .collect(),
    )
    .await;
    for ((field, value), reply) in fields.iter().zip(replies) {
        if reply != format!("${}\r\n{value}\r\n", value.len()) {
            report
                .lost
                .push(format!("c{i}:h {field}: {reply:?}, acknowledged {value:?}"));
        }
    }
}

/// When the fault began and when the backend had healed, in seconds since the load started;
/// and what the fault's own phases took.
#[derive(Default)]
struct Span {
    began: f64,
    healed: f64,
    detail: String,
}

#[derive(Default)]
struct Report {
    fault: String,
    span: Span,
    ops: usize,
    increments: u64,
    errors: Vec<(f64, String)>,
    wrong: Vec<String>,
    lost: Vec<String>,
    doubled: Vec<String>,
    p50: f64,
    p99: f64,
    longest: f64,
    /// Requests answered after the backend healed.
    ok_after: usize,
}

impl Report {
    fn print(&self) {
        eprintln!(
            "chaos | {} | fault {:.1} s ({}) | longest hold {:.1} s | p50 {:.2} ms | p99 {:.1} ms | \
             {} requests, {} increments | errors {} | wrong replies {} | lost {} | applied twice {}",
            self.fault,
            self.span.healed - self.span.began,
            self.span.detail,
            self.longest / 1000.0,
            self.p50,
            self.p99,
            self.ops,
            self.increments,
            self.errors.len(),
            self.wrong.len(),
            self.lost.len(),
            self.doubled.len()
        );
    }

    /// Every request's latency as CSV, and the summary line, for `tests/chaos/plot.py`.
    fn save(&self, dir: &str, clients: &[Client]) {
        let slug: String = self
            .fault
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        std::fs::create_dir_all(dir).expect("HF_CHAOS_OUT is a directory");
        let mut csv = String::from("at_s,latency_ms,op,ok,client\n");
        for c in clients {
            for s in &c.samples {
                let _ = writeln!(
                    csv,
                    "{:.4},{:.3},{},{},{}",
                    s.at, s.latency, s.op, s.ok, c.id
                );
            }
        }
        std::fs::write(format!("{dir}/{slug}.csv"), csv).expect("samples written");
        let summary = format!(
            "fault\t{}\nbegan_s\t{:.3}\nhealed_s\t{:.3}\ndetail\t{}\nlongest_hold_s\t{:.3}\n\
             p50_ms\t{:.3}\np99_ms\t{:.3}\nrequests\t{}\nerrors\t{}\nwrong\t{}\nlost\t{}\ndoubled\t{}\n",
            self.fault,
            self.span.began,
            self.span.healed,
            self.span.detail,
            self.longest / 1000.0,
            self.p50,
            self.p99,
            self.ops,
            self.errors.len(),
            self.wrong.len(),
            self.lost.len(),
            self.doubled.len()
        );
        std::fs::write(format!("{dir}/{slug}.tsv"), summary).expect("summary written");
    }

    /// Through the fault: no error, no wrong reply, nothing lost, nothing applied twice.
    fn assert_held(&self) {
        self.assert_held_losing_at_most(0);
    }

    /// As `assert_held`, but up to `lost` acknowledged writes may be missing: those Redis's
    /// asynchronous replication had not carried to the replica when its primary stopped
    /// taking them (`min_replicas_ack = 0`).
    fn assert_held_losing_at_most(&self, lost: usize) {
        assert!(
            self.errors.is_empty(),
            "{}: client-visible errors: {:?}",
            self.fault,
            &self.errors[..self.errors.len().min(10)]
        );
        self.assert_consistent_losing_at_most(lost);
    }

    fn assert_consistent(&self) {
        self.assert_consistent_losing_at_most(0);
    }

    fn assert_consistent_losing_at_most(&self, lost: usize) {
        assert!(
            self.wrong.is_empty(),
            "{}: wrong replies: {:?}",
            self.fault,
            &self.wrong[..self.wrong.len().min(10)]
        );
        assert!(
            self.lost.len() <= lost,
            "{}: lost (at most {lost} allowed): {:?}",
            self.fault,
            self.lost
        );
        assert!(
            self.doubled.is_empty(),
            "{}: applied twice: {:?}",
            self.fault,
            self.doubled
        );
        assert!(
            self.ok_after > 0,
            "{}: no request succeeded after the backend healed",
            self.fault
        );
        assert!(
            self.increments > 0,
            "{}: no increment acknowledged",
            self.fault
        );
    }
}

fn quoted(addrs: &[String]) -> String {
    addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A master (started with `master_args` too), its replica and three sentinels that know each
/// other, and holdfast on them with `min_replicas_ack = acks`, a 2 s `response_timeout` and
/// 100 attempts.
async fn sentinel_setup(
    backend: &str,
    acks: u32,
    master_args: &[&str],
) -> (RedisServer, RedisServer, Vec<Sentinel>, Proxy) {
    sentinel_setup_waiting(backend, acks, master_args, (2, 100)).await
}

/// As `sentinel_setup`, with `response_timeout` and the attempts given.
async fn sentinel_setup_waiting(
    backend: &str,
    acks: u32,
    master_args: &[&str],
    (response_secs, attempts): (u64, u32),
) -> (RedisServer, RedisServer, Vec<Sentinel>, Proxy) {
    let mut args = vec!["--repl-diskless-sync-delay", "0"];
    args.extend_from_slice(master_args);
    let master = RedisServer::start_with(&args);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    synced(
        &replica,
        Duration::from_secs(20),
        "the replica's first sync",
    )
    .await;
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port())).collect();
    // Every sentinel knows the replica and the two others before the fault.
    for s in &sentinels {
        until(Duration::from_secs(20), "sentinels to meet", || async {
            let others = s.query(&["SENTINEL", "SENTINELS", "mymaster"]).await;
            let replicas = s.query(&["SENTINEL", "REPLICAS", "mymaster"]).await;
            others.is_some_and(|o| o.starts_with("*2"))
                && replicas.is_some_and(|r| r.starts_with("*1"))
        })
        .await;
    }
    let addrs: Vec<String> = sentinels.iter().map(Sentinel::addr).collect();
    // Redis replicates asynchronously: without min_replicas_ack a write acknowledged just
    // before the master's death can be missing on the promoted replica.
    let proxy = Proxy::start(&format!(
        "{}[backends.{backend}]\nkind = \"sentinel\"\nmaster_name = \"mymaster\"\n\
         sentinels = [{}]\npool_size = 2\nresponse_timeout = \"{response_secs}s\"\n\
         [[namespaces]]\nname = \"{backend}\"\nbackend = \"{backend}\"\n",
        policy(attempts, &format!("min_replicas_ack = {acks}")),
        quoted(&addrs)
    ))
    .await;
    (master, replica, sentinels, proxy)
}

#[test]
fn sentinel_master_sigkilled() {
    run(async {
        let (mut master, replica, sentinels, proxy) = sentinel_setup("ha", 1, &[]).await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        master.kill();
        let replica_port = replica.port();
        until(Duration::from_secs(60), "the replica's promotion", || {
            sentinels[0].names_master(replica_port)
        })
        .await;
        let promoted = load.now();
        // The old master comes back empty and Sentinel makes it a replica of the new one;
        // writes wait for a replica (min_replicas_ack) until it has synced.
        master.restart();
        synced(&master, Duration::from_secs(60), "the old master to resync").await;
        let healed = load.now();
        let detail = format!(
            "promoted after {:.1} s, a replica again after {:.1} s",
            promoted - began,
            healed - began
        );
        let report = load
            .settled("sentinel master SIGKILL", began, healed, detail)
            .await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// A failover ordered by Sentinel: the master is demoted to a replica, not killed. Sentinel
/// closes the clients of the instances it reconfigures; a write that reaches the demoted
/// master before that is answered `READONLY` (NotAttempted), and holdfast drops such a
/// connection and asks the sentinels again.
#[test]
fn sentinel_failover_demotes_the_master() {
    run(async {
        let (master, replica, sentinels, proxy) = sentinel_setup("demoted", 1, &[]).await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        let ordered = sentinels[0]
            .query(&["SENTINEL", "FAILOVER", "mymaster"])
            .await;
        assert_eq!(ordered.as_deref(), Some("+OK\r\n"));
        let replica_port = replica.port();
        until(Duration::from_secs(60), "the replica's promotion", || {
            sentinels[0].names_master(replica_port)
        })
        .await;
        synced(
            &master,
            Duration::from_secs(60),
            "the old master to follow it",
        )
        .await;
        let healed = load.now();
        let detail = "SENTINEL FAILOVER".into();
        let report = load
            .settled("sentinel failover, master demoted", began, healed, detail)
            .await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// The "zombie": the master frozen (SIGSTOP) long enough for Sentinel to promote its replica,
/// then woken. Without `min_replicas_ack`, whatever the woken master acknowledges before
/// Sentinel demotes it is erased by its resync. holdfast closes its connections to it when a
/// sentinel declares it objectively down (or announces the switch), while it is still frozen,
/// so no reply it writes on waking is read, and dials wait for the new primary. The reply
/// timeout (8 s) outlasts the freeze, as the default (10 s) does: with a shorter one the
/// requests in flight would time out before the master wakes, hiding the zombie.
#[test]
fn sentinel_master_frozen() {
    run(async {
        let (report, proxy) =
            frozen_master("zombie", 0, "sentinel master frozen 4 s (zombie)").await;
        // Each sequential client may have had one write acknowledged in the instant before
        // the freeze, not yet on the replica: the number is in the report.
        report.assert_held_losing_at_most(clients());
        proxy.stop().await;
    });
}

/// The zombie again, with `min_replicas_ack = 1`: nothing acknowledged is lost even in the
/// instant before the freeze, and writes are held until the old master has resynced as a
/// replica of the new one (the new primary has no other replica to confirm them).
#[test]
fn sentinel_master_frozen_with_replica_acks() {
    run(async {
        let fault = "sentinel master frozen 4 s, min_replicas_ack 1";
        let (report, proxy) = frozen_master("zombie_acked", 1, fault).await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// Load on a Sentinel-managed master with `min_replicas_ack = acks` and an 8 s reply
/// timeout; the master frozen until its replica is promoted and 4 s have passed, then woken
/// and left to resync. The report, and the proxy to stop.
async fn frozen_master(backend: &str, acks: u32, fault: &str) -> (Report, Proxy) {
    let (master, replica, sentinels, proxy) =
        sentinel_setup_waiting(backend, acks, &[], (8, 30)).await;
    let load = Load::warmed_up(&proxy.addr).await;

    let began = load.now();
    master.pause();
    let replica_port = replica.port();
    until(Duration::from_secs(60), "the replica's promotion", || {
        sentinels[0].names_master(replica_port)
    })
    .await;
    let promoted = load.now();
    // Frozen 4 s in all (longer when the promotion took longer).
    sleep(Duration::from_secs_f64((4.0 - (promoted - began)).max(0.0))).await;
    master.resume();
    let woke = load.now();
    synced(&master, Duration::from_secs(60), "the old master to resync").await;
    let healed = load.now();
    let detail = format!(
        "promoted after {:.1} s, woken after {:.1} s, a replica again after {:.1} s",
        promoted - began,
        woke - began,
        healed - began
    );
    (load.settled(fault, began, healed, detail).await, proxy)
}

/// The load's commands a server ran, from its `INFO commandstats` (Sentinel sends none of
/// these).
fn data_commands_on(server: &RedisServer) -> u64 {
    let stats = server.cmd(&["INFO", "commandstats"]);
    let load = [
        "set", "incr", "incrby", "sadd", "del", "setnx", "hset", "evalsha", "eval", "get",
    ];
    stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            if !load.contains(&name) {
                return None;
            }
            rest.split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .and_then(|calls| calls.parse::<u64>().ok())
        })
        .sum()
}

/// The sentinels move the primary while the old one is alive and cannot be demoted (its
/// `REPLICAOF` renamed away: a split brain, the worst case). holdfast fences its
/// connections to the old primary when the switch is heard: from then on nothing reaches it,
/// and everything acknowledged is on the new one.
#[test]
fn nothing_reaches_the_old_primary_after_the_switch_is_heard() {
    run(async {
        let no_demotion = [
            "--rename-command",
            "SLAVEOF",
            "",
            "--rename-command",
            "REPLICAOF",
            "",
        ];
        let (master, _replica, sentinels, proxy) = sentinel_setup("split", 0, &no_demotion).await;
        let load = Load::warmed_up(&proxy.addr).await;
        let before = data_commands_on(&master);
        assert!(before > 0, "the load reached the first primary");

        let began = load.now();
        let ordered = sentinels[0]
            .query(&["SENTINEL", "FAILOVER", "mymaster"])
            .await;
        assert_eq!(ordered.as_deref(), Some("+OK\r\n"));
        until(
            Duration::from_secs(60),
            "holdfast to hear the switch",
            || async {
                proxy
                    .metric("holdfast_primary_changes_total{backend=\"split\"}")
                    .await
                    >= 1.0
            },
        )
        .await;
        let heard = load.now();
        // What was in flight when it was heard has reached the old primary by now.
        sleep(Duration::from_millis(200)).await;
        let at_switch = data_commands_on(&master);
        sleep(load_secs()).await;
        let after = data_commands_on(&master);
        assert!(
            master.cmd(&["ROLE"]).contains("master"),
            "the old primary is still a primary (it cannot be demoted)"
        );
        assert_eq!(
            after, at_switch,
            "data commands reached the old primary after the switch was heard"
        );
        let healed = load.now();
        let detail = format!("switch heard after {:.1} s", heard - began);
        let report = load
            .settled("sentinel switch, old primary alive", began, healed, detail)
            .await;
        // Fenced when the promotion began; what the old primary acknowledged between the
        // replica's promotion and that moment is not on the new one (in the report).
        report.assert_held_losing_at_most(clients());
        proxy.stop().await;
    });
}

/// The primary of one client's counter, and its replica: its clients are held, the others'
/// requests fail over only when their connection to it ends.
fn victim_and_heir(cluster: &Cluster) -> (usize, usize) {
    let victim = cluster.primary_of("c0:n");
    let link = format!("master_port:{}", cluster.nodes[victim].port());
    let heir = (0..6)
        .find(|&i| {
            i != victim
                && cluster.nodes[i]
                    .cmd(&["INFO", "replication"])
                    .contains(&link)
        })
        .expect("the primary's replica");
    (victim, heir)
}

/// Waits until the replica `heir` says it is a primary.
async fn until_promoted(cluster: &Cluster, heir: usize) {
    until(Duration::from_secs(60), "the replica's promotion", || {
        let promoted = cluster.nodes[heir]
            .cmd(&["INFO", "replication"])
            .contains("role:master");
        async move { promoted }
    })
    .await;
}

#[test]
fn cluster_primary_sigkilled() {
    run(async {
        let mut cluster = Cluster::start();
        let proxy = Proxy::start(&format!(
            "{}[backends.big]\nkind = \"cluster\"\nnodes = [{}]\npool_size = 2\n\
             response_timeout = \"2s\"\n\
             [[namespaces]]\nname = \"big\"\nbackend = \"big\"\n",
            policy(100, "min_replicas_ack = 1"),
            quoted(&cluster.addrs())
        ))
        .await;
        let load = Load::warmed_up(&proxy.addr).await;

        let (victim, heir) = victim_and_heir(&cluster);
        let began = load.now();
        cluster.nodes[victim].kill();
        until_promoted(&cluster, heir).await;
        // Only a promoted replica makes the cluster whole again with a primary dead.
        let promoted = load.now();
        cluster.nodes[victim].restart();
        cluster.wait_healthy(Duration::from_secs(60));
        let healed = load.now();
        let detail = format!(
            "cluster ok after {:.1} s, replica again after {:.1} s",
            promoted - began,
            healed - began
        );
        let report = load
            .settled("cluster primary SIGKILL", began, healed, detail)
            .await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// The zombie on a Cluster: a primary frozen (SIGSTOP) for 4 s (and at least 1.5 s past its
/// replica's promotion), then woken; no `min_replicas_ack`, and a reply timeout (8 s) that
/// outlasts the freeze. What the woken primary would acknowledge before it learns it was
/// replaced is erased when it rejoins as a replica. holdfast reads the slot map again every
/// second while a request waits on a link for more than a second, and closes the links to a
/// node that no longer owns a slot, so the woken primary's replies are never read.
#[test]
fn cluster_primary_frozen() {
    run(async {
        let cluster = Cluster::start();
        let proxy = Proxy::start(&format!(
            "{}[backends.big]\nkind = \"cluster\"\nnodes = [{}]\npool_size = 2\n\
             response_timeout = \"8s\"\n\
             [[namespaces]]\nname = \"big\"\nbackend = \"big\"\n",
            policy(30, "min_replicas_ack = 0"),
            quoted(&cluster.addrs())
        ))
        .await;
        let load = Load::warmed_up(&proxy.addr).await;

        let (victim, heir) = victim_and_heir(&cluster);
        let began = load.now();
        cluster.nodes[victim].pause();
        until_promoted(&cluster, heir).await;
        let promoted = load.now();
        // Frozen 4 s, and 1.5 s past the promotion at least: holdfast reads the map within a
        // second or so of a stall (STALLED in src/backend/redis/cluster.rs), so this is the margin
        // it is held to, not a race with the wake-up.
        let frozen = (4.0 - (promoted - began)).max(1.5);
        sleep(Duration::from_secs_f64(frozen)).await;
        cluster.nodes[victim].resume();
        let woke = load.now();
        cluster.wait_healthy(Duration::from_secs(60));
        let healed = load.now();
        let detail = format!(
            "promoted after {:.1} s, woken after {:.1} s, healthy after {:.1} s",
            promoted - began,
            woke - began,
            healed - began
        );
        let report = load
            .settled("cluster primary frozen 4 s (zombie)", began, healed, detail)
            .await;
        report.assert_held_losing_at_most(clients());
        proxy.stop().await;
    });
}

/// A PostgreSQL primary and its synchronous standby (an acknowledged commit is on both).
fn pg_pair() -> (PgServer, PgServer) {
    let primary = PgServer::start();
    let standby = PgServer::standby_of(&primary);
    primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary.psql("SELECT pg_reload_conf()");
    (primary, standby)
}

#[test]
fn postgres_primary_killed_and_standby_promoted() {
    if !postgres::available() {
        eprintln!("skipped: PostgreSQL is not installed (tests/run installs it)");
        return;
    }
    run(async {
        let (mut primary, standby) = pg_pair();
        let url = format!(
            "postgres://holdfast@{},{}/holdfast",
            primary.addr(),
            standby.addr()
        );
        let proxy = Proxy::start(&format!(
            "{}[backends.pg]\nkind = \"postgres\"\nurl = \"{url}\"\npool_size = 4\n\
             statement_timeout = \"5s\"\nresponse_timeout = \"5s\"\n\
             [[namespaces]]\nname = \"pg\"\nbackend = \"pg\"\n",
            policy(100, "")
        ))
        .await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        primary.stop_immediate();
        // The promoted standby has no standby of its own: it must not wait for one.
        standby.promote();
        standby.psql("ALTER SYSTEM SET synchronous_standby_names = ''");
        standby.psql("SELECT pg_reload_conf()");
        let healed = load.now();
        let detail = "kill, then pg_ctl promote".into();
        let report = load
            .settled(
                "postgres primary killed, standby promoted",
                began,
                healed,
                detail,
            )
            .await;
        report.assert_held();
        proxy.stop().await;
    });
}

#[test]
fn postgres_restarted_in_place() {
    if !postgres::available() {
        eprintln!("skipped: PostgreSQL is not installed (tests/run installs it)");
        return;
    }
    run(async {
        let mut pg = PgServer::start();
        let proxy = Proxy::start(&format!(
            "{}[backends.pg]\nkind = \"postgres\"\nurl = \"{}\"\npool_size = 4\n\
             statement_timeout = \"5s\"\nresponse_timeout = \"5s\"\n\
             [[namespaces]]\nname = \"pg\"\nbackend = \"pg\"\n",
            policy(100, ""),
            pg.url()
        ))
        .await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        pg.stop_immediate();
        sleep(Duration::from_secs(3)).await;
        pg.start_again();
        let healed = load.now();
        let detail = "immediate stop, 3 s down".into();
        let report = load
            .settled("postgres restarted in place", began, healed, detail)
            .await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// How long PostgreSQL stays frozen or blackholed: 20 s, longer than any one deadline
/// (`response_timeout`, `acquire_timeout`) many times over, so requests meet it
/// mid-statement, mid-commit and while connecting, and are held through all three.
const PG_FAULT: Duration = Duration::from_secs(20);

/// holdfast on one PostgreSQL at `addr`, with a 1 s deadline on every database operation, so
/// a request caught by a silent server is given up on and retried well within the fault.
async fn pg_proxy(addr: &str) -> Proxy {
    Proxy::start(&format!(
        "{}[backends.pg]\nkind = \"postgres\"\nurl = \"postgres://holdfast@{addr}/holdfast\"\n\
         pool_size = 4\nresponse_timeout = \"1s\"\n\
         [[namespaces]]\nname = \"pg\"\nbackend = \"pg\"\n",
        policy(100, "")
    ))
    .await
}

/// SIGSTOP to the postmaster and every backend: connections stay open, nothing is answered
/// and nothing is reset, the way a host that hangs looks from outside.
#[test]
fn postgres_frozen() {
    if !postgres::available() {
        eprintln!("skipped: PostgreSQL is not installed (tests/run installs it)");
        return;
    }
    run(async {
        let pg = PgServer::start();
        let proxy = pg_proxy(&pg.addr()).await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        pg.freeze();
        sleep(PG_FAULT).await;
        pg.thaw();
        let healed = load.now();
        let detail = "SIGSTOP of the postmaster and its children".into();
        let report = load.settled("postgres frozen", began, healed, detail).await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// PostgreSQL behind the relay, which forwards nothing and closes nothing for the fault.
#[test]
fn postgres_blackholed() {
    if !postgres::available() {
        eprintln!("skipped: PostgreSQL is not installed (tests/run installs it)");
        return;
    }
    run(async {
        let pg = PgServer::start();
        let relay = Relay::start(&pg.addr()).await;
        let proxy = pg_proxy(&relay.addr()).await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        relay.blackhole();
        sleep(PG_FAULT).await;
        relay.pass();
        let healed = load.now();
        let detail = "nothing forwarded, nothing closed".into();
        let report = load
            .settled("postgres blackholed", began, healed, detail)
            .await;
        report.assert_held();
        proxy.stop().await;
    });
}

/// A Redis behind the relay, with a short response timeout: a blackholed request is given
/// up on after 1 s (Transient) and replayed by its token.
/// `name` names both the backend and the namespace (metrics are per test binary).
async fn behind_relay(redis: &RedisServer, policy: &str, name: &str) -> (Relay, Proxy) {
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&format!(
        "{policy}[backends.{name}]\nkind = \"redis\"\nurl = \"redis://{}\"\npool_size = 2\n\
         connection_timeout = \"1s\"\nresponse_timeout = \"1s\"\n\
         [[namespaces]]\nname = \"{name}\"\nbackend = \"{name}\"\n",
        relay.addr()
    ))
    .await;
    (relay, proxy)
}

#[test]
fn backend_blackholed_for_ten_seconds() {
    run(async {
        let redis = RedisServer::start();
        let (relay, proxy) = behind_relay(&redis, &policy(100, ""), "bh").await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        relay.blackhole();
        // Meanwhile the metrics show requests held and the backend down (its health probe
        // runs every 5 s).
        let (mut saw_held, mut saw_down) = (false, false);
        let blackholed = Instant::now();
        while blackholed.elapsed() < Duration::from_secs(10) {
            saw_held |= proxy
                .metric("holdfast_held_requests{holdfast_namespace=\"bh\"}")
                .await
                > 0.0;
            saw_down |= proxy.metric("holdfast_backend_up{backend=\"bh\"}").await == 0.0
                && blackholed.elapsed() > Duration::from_secs(1);
            sleep(Duration::from_millis(200)).await;
        }
        relay.pass();
        let healed = load.now();
        assert!(
            saw_held,
            "holdfast_held_requests never showed a held request"
        );
        assert!(
            saw_down,
            "holdfast_backend_up never showed the backend down"
        );
        until(
            Duration::from_secs(10),
            "the backend to be up again",
            || async { proxy.metric("holdfast_backend_up{backend=\"bh\"}").await == 1.0 },
        )
        .await;
        let detail = "nothing forwarded, nothing closed".to_string();
        let report = load
            .settled("backend blackholed", began, healed, detail)
            .await;
        report.assert_held();
        // A connection given up on is closed, not left open beside its replacement: the
        // relay holds one connection per pooled one (2), however many were retired, and the
        // 2 per protocol kept warm for clients' own connections.
        let open = relay.open_connections();
        eprintln!("relay connections open after the blackhole: {open}");
        assert!(
            open <= 2 + 4,
            "{open} backend connections open, the pool holds 2 and 4 are kept warm"
        );
        let holds = proxy
            .metric("holdfast_hold_duration_seconds_count{holdfast_namespace=\"bh\"}")
            .await;
        assert!(
            holds > 0.0,
            "no hold recorded in holdfast_hold_duration_seconds"
        );
        proxy.stop().await;
    });
}

#[test]
fn an_outage_longer_than_the_budget() {
    run(async {
        let redis = RedisServer::start();
        // A budget of about 3 s: 8 attempts, backoff 50 ms doubling, capped at 1 s.
        let (relay, proxy) = behind_relay(&redis, &policy(8, ""), "out").await;
        let load = Load::warmed_up(&proxy.addr).await;

        let began = load.now();
        relay.refuse();
        sleep(Duration::from_secs(8)).await;
        relay.pass();
        let healed = load.now();
        let detail = "connections refused for 8 s, budget about 3 s".into();
        let report = load
            .settled("outage longer than the budget", began, healed, detail)
            .await;
        // Clean errors, only during the outage (plus one budget), each saying whether the
        // request may have been applied; then service again, with nothing lost or doubled.
        assert!(
            !report.errors.is_empty(),
            "an 8 s outage should outlast a 3 s budget"
        );
        for (at, error) in &report.errors {
            assert!(
                error.contains("UNAVAILABLE") || error.contains("INDOUBT"),
                "not a clean error: {error}"
            );
            assert!(
                *at >= began - 0.5 && *at <= healed + 0.5,
                "an error at {at:.1} s, outside the outage ({began:.1}..{healed:.1} s): {error}"
            );
        }
        report.assert_consistent();
        proxy.stop().await;
    });
}
