//! SQL backends under failure and load, with real databases: PostgreSQL stopped with
//! `-m immediate` and started again while clients write; SQLite under many concurrent
//! writers with another process taking its write lock; the embedded default started the way
//! the README says, and its data surviving a restart.

#[allow(unused_imports)]
use crate::support::*;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::sleep;

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Sends `args` and notes the reply in `wrong` unless it is `want`.
async fn expect(conn: &mut RawConn, args: &[&str], want: &str, wrong: &mut Vec<String>) {
    let got = text(&conn.command(args).await);
    if got != want {
        wrong.push(format!("{args:?}: {got:?}, wanted {want:?}"));
    }
}

/// Waits for every client task; none may have noted a wrong reply (the first few are shown).
async fn none_wrong(what: &str, tasks: Vec<tokio::task::JoinHandle<Vec<String>>>) {
    let mut wrong = Vec::new();
    for t in tasks {
        wrong.extend(t.await.unwrap());
    }
    assert!(
        wrong.is_empty(),
        "{what}: {} wrong replies: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// The same outage under pipelines: each client's runs of writes are committed together (one
/// entry of the group commit), then its run of reads; every reply is still what one-by-one
/// requests would have got, the outage a slow reply.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_stopped_and_started_again_holds_pipelined_runs() {
    through_a_postgres_stop(|addr, i, stop| tokio::spawn(pipelined_writer(addr, i, stop))).await;
}

/// Pipelines of 8 SETs (two to one key, so their order shows) and then the 8 GETs.
async fn pipelined_writer(
    addr: String,
    id: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut conn = RawConn::connect(&addr).await;
    let (mut acked, mut errors) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut pipeline = Vec::new();
        let mut sets = Vec::new();
        for i in 0..8 {
            n += 1;
            let key = format!("p{id}:{}", if i == 0 || i == 7 { 0 } else { 1 + n % 40 });
            let value = format!("{n}");
            pipeline.extend_from_slice(&encode_str(&["SET", &key, &value]));
            sets.push((key, value));
        }
        for (key, _) in &sets {
            pipeline.extend_from_slice(&encode_str(&["GET", key]));
        }
        conn.send(&pipeline).await;
        for (key, value) in &sets {
            let reply = text(&conn.read_reply().await);
            if reply == "+OK\r\n" {
                acked.push((key.clone(), value.clone()));
            } else {
                errors.push(format!("SET {key}: {reply}"));
            }
        }
        // Each GET sees the last SET of its key in the pipeline.
        for (key, _) in &sets {
            let last = sets.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v);
            let reply = text(&conn.read_reply().await);
            let want = last.map(|v| format!("${}\r\n{v}\r\n", v.len()));
            if Some(&reply) != want.as_ref() {
                errors.push(format!("GET {key}: {reply}, wanted {want:?}"));
            }
        }
    }
    (acked, errors)
}

/// Each client writes its own keys in sequence and remembers what was acknowledged; every
/// reply that is not the expected one is a client-visible error.
async fn writer(
    addr: String,
    id: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut conn = RawConn::connect(&addr).await;
    let (mut acked, mut errors) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("w{id}:{}", n % 50);
        let value = format!("{n}");
        let reply = text(&conn.command(&["SET", &key, &value]).await);
        if reply == "+OK\r\n" {
            acked.push((key.clone(), value.clone()));
        } else {
            errors.push(format!("SET {key}: {reply}"));
        }
        let reply = text(
            &conn
                .command(&["HSET", &format!("h{id}"), &key, &value])
                .await,
        );
        if !reply.starts_with(':') {
            errors.push(format!("HSET: {reply}"));
        }
        let reply = text(&conn.command(&["GET", &key]).await);
        if reply != format!("${}\r\n{value}\r\n", value.len()) {
            errors.push(format!("GET {key} after SET {value}: {reply}"));
        }
    }
    (acked, errors)
}

/// The last acknowledged value of each key, read back.
async fn check_acknowledged(addr: &str, acked: &[(String, String)]) {
    let mut last = std::collections::BTreeMap::new();
    for (k, v) in acked {
        last.insert(k.clone(), v.clone());
    }
    let mut conn = RawConn::connect(addr).await;
    for (k, v) in &last {
        let reply = text(&conn.command(&["GET", k]).await);
        assert_eq!(
            reply,
            format!("${}\r\n{v}\r\n", v.len()),
            "{k} lost its acknowledged value"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_stopped_and_started_again_is_a_slow_reply() {
    through_a_postgres_stop(|addr, i, stop| tokio::spawn(writer(addr, i, stop))).await;
}

/// Four clients (`spawn`) write through PostgreSQL stopped with `-m immediate` for 5 s and
/// started again: none may hear an error, and every acknowledged value is read back.
async fn through_a_postgres_stop(
    spawn: impl Fn(
        String,
        usize,
        Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<(Vec<(String, String)>, Vec<String>)>,
) {
    let mut pg = PgServer::start();
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"postgres\"\nurl = \"{}\"\npool_size = 4",
        pg.url()
    )))
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|i| spawn(proxy.addr.clone(), i, stop.clone()))
        .collect();
    sleep(Duration::from_millis(800)).await;
    pg.stop_immediate();
    let down = Instant::now();
    sleep(Duration::from_secs(5)).await;
    pg.start_again();
    let outage = down.elapsed();
    sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for c in clients {
        let (a, errors) = c.await.unwrap();
        assert!(
            errors.is_empty(),
            "client errors through a {outage:?} outage: {errors:?}"
        );
        acked.extend(a);
    }
    assert!(acked.len() > 100, "too few writes: {}", acked.len());
    check_acknowledged(&proxy.addr, &acked).await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_under_many_writers_never_answers_locked() {
    use sqlx::{Connection, Executor};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"\nsynchronous = \"normal\"\nbusy_timeout = \"2s\"",
        path.display()
    )))
    .await;
    // The schema exists once holdfast has answered.
    let mut first = proxy.connect().await;
    assert_eq!(first.command(&["SET", "ready", "1"]).await, b"+OK\r\n");

    // Another process's writer takes SQLite's write lock again and again, each time for
    // longer than nothing: holdfast's writer must wait, never fail.
    let stop = Arc::new(AtomicBool::new(false));
    let url = format!("sqlite://{}", path.display());
    let intruder_stop = stop.clone();
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let intruder_taken = taken.clone();
    let intruder = tokio::spawn(async move {
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        conn.execute("PRAGMA busy_timeout = 5000").await.unwrap();
        while !intruder_stop.load(Ordering::Relaxed) {
            conn.execute("BEGIN IMMEDIATE").await.unwrap();
            sleep(Duration::from_millis(30)).await;
            conn.execute("COMMIT").await.unwrap();
            intruder_taken.fetch_add(1, Ordering::Relaxed);
            sleep(Duration::from_millis(5)).await;
        }
        intruder_taken.load(Ordering::Relaxed)
    });

    const CLIENTS: usize = 24;
    // Writers go on for this long, and on until the other writer has taken the lock a few
    // times (a busy machine running other tests beside this one gives it fewer chances), so
    // the two really contend however fast group commit makes holdfast's writer.
    const FOR: Duration = Duration::from_millis(1500);
    const AT_MOST: Duration = Duration::from_secs(15);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let addr = proxy.addr.clone();
            let taken = taken.clone();
            tokio::spawn(async move {
                let mut conn = RawConn::connect(&addr).await;
                let mut errors = Vec::new();
                let started = Instant::now();
                let mut n = 0;
                while started.elapsed() < FOR
                    || (taken.load(Ordering::Relaxed) <= 5 && started.elapsed() < AT_MOST)
                {
                    n += 1;
                    let reply = text(&conn.command(&["INCR", &format!("own:{i}")]).await);
                    if reply != format!(":{n}\r\n") {
                        errors.push(reply);
                    }
                    let reply = text(&conn.command(&["INCR", "shared"]).await);
                    if !reply.starts_with(':') {
                        errors.push(reply);
                    }
                }
                (n, errors)
            })
        })
        .collect();
    let mut errors = Vec::new();
    let mut counts = Vec::new();
    for t in tasks {
        let (n, e) = t.await.unwrap();
        counts.push(n);
        errors.extend(e);
    }
    stop.store(true, Ordering::Relaxed);
    let held = intruder.await.unwrap();
    assert!(
        errors.is_empty(),
        "{} client errors: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert!(held > 5, "the other writer took the lock only {held} times");
    let total: usize = counts.iter().sum();
    assert_eq!(
        text(&first.command(&["GET", "shared"]).await),
        format!("${}\r\n{total}\r\n", total.to_string().len())
    );
    for (i, n) in counts.iter().enumerate() {
        let reply = text(&first.command(&["GET", &format!("own:{i}")]).await);
        assert_eq!(reply, format!("${}\r\n{n}\r\n", n.to_string().len()));
    }
    proxy.stop().await;
}

/// The binary as the README runs it: no arguments, the built-in default (SQLite in
/// `data/holdfast.db` below the working directory); only the ports are moved, by environment.
struct Default {
    child: Child,
    addr: String,
}

impl Default {
    fn start(cwd: &std::path::Path) -> Default {
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .current_dir(cwd)
            .env("HOLDFAST_SERVER__LISTEN", &addr)
            .env(
                "HOLDFAST_SERVER__METRICS_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("HOLDFAST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Default { child, addr }
    }

    async fn connect(&self) -> RawConn {
        connect_when_listening(&self.addr).await
    }

    async fn stop(mut self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0));
                return;
            }
            assert!(Instant::now() < deadline, "holdfast did not exit");
            sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Default {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_runs_on_sqlite_and_keeps_data_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = Default::start(dir.path());
    let mut conn = first.connect().await;
    assert_eq!(conn.command(&["SET", "a", "b"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["GET", "a"]).await, b"$1\r\nb\r\n");
    assert_eq!(conn.command(&["HSET", "h", "f", "v"]).await, b":1\r\n");
    assert_eq!(
        conn.command(&["XADD", "s", "1-1", "f", "v"]).await,
        b"$3\r\n1-1\r\n"
    );
    drop(conn);
    first.stop().await;
    assert!(dir.path().join("data/holdfast.db").exists());

    let second = Default::start(dir.path());
    let mut conn = second.connect().await;
    assert_eq!(conn.command(&["GET", "a"]).await, b"$1\r\nb\r\n");
    assert_eq!(conn.command(&["HGET", "h", "f"]).await, b"$1\r\nv\r\n");
    assert_eq!(conn.command(&["XLEN", "s"]).await, b":1\r\n");
    drop(conn);
    second.stop().await;
}

/// Group commit: many clients' writes share transactions, and each still gets its own
/// reply: a command that answers an error in the middle of a group undoes only itself.
#[tokio::test(flavor = "multi_thread")]
async fn group_commit_shares_transactions_but_not_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.grouped]
kind = "sqlite"
path = "{}"
synchronous = "full"
[[namespaces]]
name = "all"
backend = "grouped"
"#,
        dir.path().join("group.db").display()
    ))
    .await;
    const CLIENTS: usize = 32;
    const EACH: usize = 40;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let addr = proxy.addr.clone();
            tokio::spawn(async move {
                let mut conn = RawConn::connect(&addr).await;
                let mut wrong = Vec::new();
                let (text_key, count_key) = (format!("text:{i}"), format!("count:{i}"));
                for n in 1..=EACH {
                    let word = format!("w{i}-{n}");
                    let checks: [(Vec<&str>, String); 4] = [
                        (vec!["SET", "word", &word], "+OK\r\n".into()),
                        // Not a number: an error, and nothing of it applied.
                        (
                            vec!["INCR", &text_key],
                            if n == 1 {
                                ":1\r\n".into()
                            } else {
                                "-ERR value is not an integer or out of range\r\n".into()
                            },
                        ),
                        (vec!["APPEND", &text_key, "x"], format!(":{}\r\n", n + 1)),
                        (vec!["INCR", &count_key], format!(":{n}\r\n")),
                    ];
                    for (args, want) in checks {
                        expect(&mut conn, &args, &want, &mut wrong).await;
                    }
                }
                wrong
            })
        })
        .collect();
    none_wrong("group commit", tasks).await;
    let sum = proxy
        .metric(r#"holdfast_group_commit_requests_sum{backend="grouped"}"#)
        .await;
    let count = proxy
        .metric(r#"holdfast_group_commit_requests_count{backend="grouped"}"#)
        .await;
    // Every write went through a group; with 32 writers, groups hold more than one.
    assert_eq!(sum as usize, CLIENTS * EACH * 4);
    assert!(sum / count > 1.5, "{sum} requests in {count} transactions");
    proxy.stop().await;
}

/// How many of one key per namespace exist (one EXISTS each: they live in three).
async fn present(c: &mut RawConn) -> usize {
    let mut n = 0;
    for key in ["w:1", "j:1", "other"] {
        if c.command(&["EXISTS", key]).await == b":1\r\n" {
            n += 1;
        }
    }
    n
}

/// FLUSHALL empties every namespace the client may reach, on every backend, once per
/// backend; a user may not empty a backend that also holds a namespace it may not reach;
/// `allow_flush = false` refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn flushall_reaches_every_namespace_the_client_may_reach() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let db = |name: &str| dir.path().join(name).display().to_string();
    let config = |flush: bool| {
        format!(
            r#"
[defaults]
reply_mode = "fast"
[backends.cache]
kind = "redis"
url = "{}"
[backends.local]
kind = "sqlite"
path = "{}"
allow_flush = {flush}
[[namespaces]]
name = "workers"
prefixes = ["w:"]
backend = "cache"
[[namespaces]]
name = "jobs"
prefixes = ["j:"]
backend = "local"
[[namespaces]]
name = "rest"
backend = "local"
[[users]]
name = "admin"
password = "a"
[[users]]
name = "worker"
password = "w"
namespaces = ["workers"]
[[users]]
name = "jobs"
password = "j"
namespaces = ["jobs"]
"#,
            redis.url(),
            db(if flush { "flush.db" } else { "noflush.db" })
        )
    };
    let proxy = Proxy::start(&config(true)).await;
    let mut admin = proxy.connect().await;
    assert_eq!(admin.command(&["AUTH", "admin", "a"]).await, b"+OK\r\n");
    for key in ["w:1", "j:1", "other"] {
        assert_eq!(admin.command(&["SET", key, "v"]).await, b"+OK\r\n");
    }
    // A user whose namespace shares its backend with others may not empty it.
    let mut jobs = proxy.connect().await;
    assert_eq!(jobs.command(&["AUTH", "jobs", "j"]).await, b"+OK\r\n");
    assert_eq!(
        text(&jobs.command(&["FLUSHALL"]).await),
        "-NOPERM this user has no permissions to run the 'flushall' command\r\n"
    );
    assert_eq!(present(&mut admin).await, 3);
    // A user alone on its backend empties that backend only.
    let mut worker = proxy.connect().await;
    assert_eq!(worker.command(&["AUTH", "worker", "w"]).await, b"+OK\r\n");
    assert_eq!(worker.command(&["FLUSHDB"]).await, b"+OK\r\n");
    assert_eq!(present(&mut admin).await, 2);
    assert_eq!(redis.cmd(&["DBSIZE"]), ":0\r\n");
    // Whoever may reach everything empties everything.
    assert_eq!(admin.command(&["SET", "w:1", "v"]).await, b"+OK\r\n");
    assert_eq!(admin.command(&["FLUSHALL"]).await, b"+OK\r\n");
    assert_eq!(present(&mut admin).await, 0);
    proxy.stop().await;

    let refusing = Proxy::start(&config(false)).await;
    let mut admin = refusing.connect().await;
    assert_eq!(admin.command(&["AUTH", "admin", "a"]).await, b"+OK\r\n");
    assert_eq!(admin.command(&["SET", "other", "v"]).await, b"+OK\r\n");
    let reply = text(&admin.command(&["FLUSHALL"]).await);
    assert!(reply.contains("allow_flush = false"), "{reply}");
    assert_eq!(admin.command(&["EXISTS", "other"]).await, b":1\r\n");
    refusing.stop().await;
}

/// Concurrent plain SETs are written by one statement per group, and concurrent GETs read by
/// one per batch: a SET still replaces what the key held before (a hash's or a list's elements
/// do not come back with the next HSET or RPUSH), two SETs of one key in a group leave one of
/// them, and a batched GET still answers WRONGTYPE, nil for a missing key and nil for an
/// expired one. On SQLite and on PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn sets_and_gets_served_together_answer_as_alone() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("together.db").display()
    );
    together(&sqlite, "together_sqlite").await;
    let pg = PgServer::start();
    let postgres = format!("kind = \"postgres\"\nurl = \"{}\"\npool_size = 4", pg.url());
    together(&postgres, "together_pg").await;
}

async fn together(backend: &str, name: &str) {
    let proxy = Proxy::start(&format!(
        "[defaults]\nreply_mode = \"fast\"\n[backends.{name}]\n{backend}\n\
         [[namespaces]]\nname = \"{name}\"\nbackend = \"{name}\"\n"
    ))
    .await;
    const CLIENTS: usize = 32;
    let mut setup = proxy.connect().await;
    for i in 0..CLIENTS {
        let key = format!("k:{i}");
        let reply = if i % 2 == 0 {
            setup.command(&["HSET", &key, "old", "v"]).await
        } else {
            setup.command(&["RPUSH", &key, "old"]).await
        };
        assert_eq!(reply, b":1\r\n", "{key}");
    }
    assert_eq!(
        setup.command(&["HSET", "a-hash", "f", "v"]).await,
        b":1\r\n"
    );
    assert_eq!(
        setup.command(&["SET", "brief", "v", "PX", "1"]).await,
        b"+OK\r\n"
    );
    sleep(Duration::from_millis(20)).await;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let addr = proxy.addr.clone();
            tokio::spawn(async move {
                let mut conn = RawConn::connect(&addr).await;
                let mut wrong = Vec::new();
                let key = format!("k:{i}");
                let value = format!("s{i}");
                let mine = format!("${}\r\n{value}\r\n", value.len());
                let checks: [(Vec<&str>, &str); 6] = [
                    (vec!["SET", &key, &value], "+OK\r\n"),
                    (vec!["SET", "shared", &value], "+OK\r\n"),
                    (vec!["GET", &key], &mine),
                    (
                        vec!["GET", "a-hash"],
                        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
                    ),
                    (vec!["GET", "missing"], "$-1\r\n"),
                    (vec!["GET", "brief"], "$-1\r\n"),
                ];
                for _ in 0..20 {
                    for (args, want) in &checks {
                        expect(&mut conn, args, want, &mut wrong).await;
                    }
                }
                wrong
            })
        })
        .collect();
    none_wrong(name, tasks).await;
    let shared = text(&setup.command(&["GET", "shared"]).await);
    assert!(
        shared.starts_with("$2\r\ns") || shared.starts_with("$3\r\ns"),
        "{shared}"
    );
    for i in 0..CLIENTS {
        let key = format!("k:{i}");
        assert_eq!(setup.command(&["TYPE", &key]).await, b"+string\r\n");
        assert_eq!(setup.command(&["DEL", &key]).await, b":1\r\n");
        // Whatever the key held before the SET is gone with it.
        let (again, read, want) = if i % 2 == 0 {
            (
                vec!["HSET", &key, "new", "v"],
                vec!["HGETALL", &key],
                "*2\r\n$3\r\nnew\r\n$1\r\nv\r\n",
            )
        } else {
            (
                vec!["RPUSH", &key, "new"],
                vec!["LRANGE", &key, "0", "-1"],
                "*1\r\n$3\r\nnew\r\n",
            )
        };
        assert_eq!(setup.command(&again).await, b":1\r\n");
        assert_eq!(text(&setup.command(&read).await), want, "{name} {key}");
    }
    let sum = proxy
        .metric(&format!(
            "holdfast_group_commit_requests_sum{{backend=\"{name}\"}}"
        ))
        .await;
    let count = proxy
        .metric(&format!(
            "holdfast_group_commit_requests_count{{backend=\"{name}\"}}"
        ))
        .await;
    assert!(
        sum / count > 1.5,
        "{name}: {sum} requests in {count} transactions"
    );
    proxy.stop().await;
}

/// Batched GETs keep their reader connection from one batch to the next (handing it back to
/// sqlx's pool costs a round trip each time), but not for ever: under a flood of GETs that
/// never lets up, a read of another kind still gets the one reader connection in its turn.
#[tokio::test(flavor = "multi_thread")]
async fn other_reads_get_a_turn_under_a_flood_of_gets() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"\nreaders = 1",
        dir.path().join("flood.db").display()
    )))
    .await;
    let mut other = proxy.connect().await;
    assert_eq!(other.command(&["HSET", "h", "f", "v"]).await, b":1\r\n");
    assert_eq!(other.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    // The flood ends by itself, so a starved read is seen waiting, not hung.
    const FLOOD: Duration = Duration::from_secs(6);
    let floods: Vec<_> = (0..16)
        .map(|_| {
            let addr = proxy.addr.clone();
            tokio::spawn(async move {
                let mut conn = RawConn::connect(&addr).await;
                let started = Instant::now();
                let mut wrong = Vec::new();
                while started.elapsed() < FLOOD {
                    expect(&mut conn, &["GET", "k"], "$1\r\nv\r\n", &mut wrong).await;
                }
                wrong
            })
        })
        .collect();
    sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        let asked = Instant::now();
        let reply = other.command(&["HGETALL", "h"]).await;
        let waited = asked.elapsed();
        assert_eq!(text(&reply), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert!(waited < Duration::from_secs(2), "HGETALL waited {waited:?}");
    }
    none_wrong("flood", floods).await;
    proxy.stop().await;
}

/// PostgreSQL cancels a statement past `statement_timeout` and rolls its transaction back
/// (SQLSTATE 57014): nothing was applied, so it is retried like any turned-away request, and
/// a write behind a lock held longer than the timeout is answered once the lock goes, as
/// Redis would answer it, not with the cancellation.
#[tokio::test(flavor = "multi_thread")]
async fn a_statement_cancelled_by_its_timeout_is_retried_until_the_lock_goes() {
    let pg = PgServer::start();
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"postgres\"\nurl = \"{}\"\npool_size = 2\nstatement_timeout = \"300ms\"",
        pg.url()
    )))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "0"]).await, b"+OK\r\n");
    // The lock is held by a session of the test's own (the server stays with the test, so a
    // failed assertion still stops it), released 1.5 s later.
    use sqlx::{Connection, Executor};
    let mut session = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
    session.execute("BEGIN").await.unwrap();
    session
        .execute("LOCK TABLE hf_keys IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let locker = tokio::spawn(async move {
        sleep(Duration::from_millis(1500)).await;
        session.execute("COMMIT").await.unwrap();
    });
    let started = Instant::now();
    assert_eq!(text(&conn.command(&["SET", "k", "1"]).await), "+OK\r\n");
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "the SET did not wait for the lock"
    );
    locker.await.expect("the locking session");
    assert_eq!(
        pg.psql("SELECT count(*) FROM hf_keys WHERE key = 'k'::bytea"),
        "1"
    );
    assert_eq!(text(&conn.command(&["GET", "k"]).await), "$1\r\n1\r\n");
    proxy.stop().await;
}

/// Thaws a frozen PostgreSQL when dropped, so a failing assertion never leaves it stopped.
struct Frozen<'a>(&'a PgServer);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

/// Sends `args` on a fresh connection and returns the reply and how long it took, or None
/// when no reply came within `limit` (the hang this test is about).
async fn timed(addr: &str, args: &[&str], limit: Duration) -> (Option<String>, Duration) {
    let mut conn = RawConn::connect(addr).await;
    let sent = Instant::now();
    conn.try_send(&encode_str(args)).await.unwrap();
    let reply = conn.try_read_reply(limit).await.ok().map(|r| text(&r));
    (reply, sent.elapsed())
}

/// Sends `runs` pipelined in one write on a fresh connection and returns every reply, or
/// None when they did not all come within `limit`.
async fn timed_run(addr: &str, runs: &[&[&str]], limit: Duration) -> Option<Vec<String>> {
    let mut conn = RawConn::connect(addr).await;
    let mut bytes = Vec::new();
    for args in runs {
        bytes.extend_from_slice(&encode_str(args));
    }
    conn.try_send(&bytes).await.ok()?;
    let mut replies = Vec::new();
    for _ in runs {
        replies.push(text(&conn.try_read_reply(limit).await.ok()?));
    }
    Some(replies)
}

/// A frozen PostgreSQL (SIGSTOP to the postmaster and every backend: sockets open, nothing
/// answered, not even a reset) must not hold a request past its budget: every statement,
/// the group commit's transaction and the wait for a queued request are bounded by the SQL
/// backend's `response_timeout`, so each request ends in a clean UNAVAILABLE (or INDOUBT
/// where COMMIT may have been sent), and service comes back when the server does.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_postgres_answers_within_the_budget() {
    let pg = PgServer::start();
    let frozen = Frozen(&pg);
    within_the_budget_while(&pg.url(), "frozen", || pg.freeze(), || drop(frozen)).await;
}

/// The same with PostgreSQL blackholed by a relay of our own (a partition: connections
/// accepted and kept open, nothing forwarded either way, nothing reset).
#[tokio::test(flavor = "multi_thread")]
async fn a_blackholed_postgres_answers_within_the_budget() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let url = pg.url().replace(&pg.addr(), &relay.addr());
    within_the_budget_while(&url, "blackholed", || relay.blackhole(), || relay.pass()).await;
}

/// Requests through a short budget while `hang` has the database hang, until `heal`: each
/// is answered UNAVAILABLE or INDOUBT within budget + attempts × (acquire_timeout +
/// response_timeout), and service comes back once healed.
async fn within_the_budget_while(url: &str, what: &str, hang: impl FnOnce(), heal: impl FnOnce()) {
    let (acquire, response) = (Duration::from_secs(1), Duration::from_secs(1));
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
acquire_timeout = "1s"
[defaults.retry]
max_attempts = 3
min_delay = "500ms"
multiplier = 2.0
max_delay = "500ms"
jitter = 0.15
[backends.db]
kind = "postgres"
url = "{}"
pool_size = 4
response_timeout = "1s"
[[namespaces]]
name = "all"
backend = "db"
"#,
        url
    ))
    .await;
    // Pooled connections exist before the freeze, so requests are sent on them and wait
    // for an answer, besides the connects that cannot finish.
    let mut warm = proxy.connect().await;
    for i in 0..20 {
        let k = format!("warm{i}");
        assert_eq!(text(&warm.command(&["SET", &k, "v"]).await), "+OK\r\n");
        assert_eq!(text(&warm.command(&["GET", &k]).await), "$1\r\nv\r\n");
    }
    // Three attempts, each at most a connection wait plus a response wait, and the backoff
    // between them (500 ms twice, 15 % jitter), plus slack for a loaded machine.
    let budget = Duration::from_millis(1150);
    let limit = budget + 3 * (acquire + response) + Duration::from_secs(2);
    hang();
    let get = tokio::spawn({
        let addr = proxy.addr.clone();
        async move { timed(&addr, &["GET", "k"], limit).await }
    });
    let set = tokio::spawn({
        let addr = proxy.addr.clone();
        async move { timed(&addr, &["SET", "k2", "v"], limit).await }
    });
    // A lone point read, which the batched reads run as its own statements.
    let hget = tokio::spawn({
        let addr = proxy.addr.clone();
        async move { timed(&addr, &["HGET", "h", "f"], limit).await }
    });
    // A client's pipelined runs of whole-collection reads and of stream ranges (one
    // statement each), of EXISTS and HGET (the batched reads), and a run of SETs: the
    // first request waits the outage out; the ones queued behind it waited as
    // long, so each gets one attempt more, not a budget of its own. The whole run is
    // answered within one budget and an attempt per request behind.
    let behind = u32::try_from(7).unwrap_or(u32::MAX);
    let run_limit = limit + (acquire + response) * behind;
    let runs = ["HGETALL", "SMEMBERS", "XRANGE", "EXISTS", "HGET", "SET"].map(|name| {
        let addr = proxy.addr.clone();
        tokio::spawn(async move {
            let keys = ["a", "b", "a", "c", "d", "e", "f", "g"];
            let run: Vec<Vec<&str>> = keys
                .iter()
                .map(|k| match name {
                    "SET" => vec![name, *k, "v"],
                    "XRANGE" => vec![name, *k, "-", "+"],
                    "HGET" => vec![name, *k, "f"],
                    _ => vec![name, *k],
                })
                .collect();
            let run: Vec<&[&str]> = run.iter().map(|r| r.as_slice()).collect();
            let sent = Instant::now();
            // Replies are written when the run is done: each waits as long as the run.
            (
                name,
                timed_run(&addr, &run, run_limit).await,
                sent.elapsed(),
            )
        })
    });
    for run in runs {
        let (name, replies, took) = run.await.unwrap();
        let replies = replies.unwrap_or_else(|| {
            panic!("a run of {name}: no answers within {run_limit:?} from a {what} PostgreSQL")
        });
        eprintln!("{what}: a run of {name} answered after {took:?}: {replies:?}");
        assert!(
            took <= run_limit,
            "a run of {name} answered after {took:?}, beyond {run_limit:?}: {replies:?}"
        );
        let (first, rest) = replies.split_first().unwrap();
        // A read is never in doubt; a SET may be, where a COMMIT may have been sent.
        let failed = |r: &str| r.starts_with("-UNAVAILABLE") || r.starts_with("-INDOUBT");
        assert!(
            failed(first) && first.contains("retry budget exhausted after 3 attempts"),
            "a run of {name}: the first answered {first:?}"
        );
        for reply in rest {
            assert!(
                failed(reply) && reply.contains("not held again"),
                "a run of {name}: one behind the first answered {reply:?}"
            );
            if name != "SET" {
                assert!(reply.starts_with("-UNAVAILABLE"), "{reply:?}");
            }
        }
    }
    let (get, get_took) = get.await.unwrap();
    let (set, set_took) = set.await.unwrap();
    let get =
        get.unwrap_or_else(|| panic!("GET k: no answer within {limit:?} from a {what} PostgreSQL"));
    let set = set
        .unwrap_or_else(|| panic!("SET k2 v: no answer within {limit:?} from a {what} PostgreSQL"));
    eprintln!("{what}: GET k {get:?} after {get_took:?}; SET k2 v {set:?} after {set_took:?}");
    // A read has nothing to apply: never in doubt.
    assert!(
        get.starts_with("-UNAVAILABLE"),
        "GET k answered {get:?} after {get_took:?}"
    );
    let (hget, hget_took) = hget.await.unwrap();
    let hget = hget
        .unwrap_or_else(|| panic!("HGET h f: no answer within {limit:?} from a {what} PostgreSQL"));
    assert!(
        hget.starts_with("-UNAVAILABLE") && hget.contains("retry budget exhausted"),
        "HGET h f answered {hget:?} after {hget_took:?}"
    );
    assert!(
        set.starts_with("-UNAVAILABLE") || set.starts_with("-INDOUBT"),
        "SET k2 v answered {set:?} after {set_took:?}"
    );
    heal();
    // Service comes back with the server, on fresh connections.
    let back = Instant::now();
    loop {
        let (reply, _) = timed(&proxy.addr, &["SET", "k3", "v3"], limit).await;
        if reply.as_deref() == Some("+OK\r\n") {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "no service after the {what} server healed: {reply:?}"
        );
        sleep(Duration::from_millis(200)).await;
    }
    eprintln!("{what}: service back {:?} after it healed", back.elapsed());
    let mut conn = proxy.connect().await;
    assert_eq!(text(&conn.command(&["GET", "k3"]).await), "$2\r\nv3\r\n");
    // "Not applied" stays true once the server has caught up with what it was sent.
    sleep(Duration::from_millis(500)).await;
    if set.starts_with("-UNAVAILABLE") {
        assert_eq!(
            text(&conn.command(&["GET", "k2"]).await),
            "$-1\r\n",
            "SET k2 answered {set:?} but was applied"
        );
    }
    proxy.stop().await;
}

/// A client blocked in `BLPOP` while PostgreSQL goes down keeps waiting through the outage
/// (its tries reach no database, so they took nothing) and gets the job pushed once the
/// database is back; past the namespace's failover budget it gets the error instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_pop_waits_through_an_outage_within_the_budget() {
    let mut pg = PgServer::start();
    let backend = format!("kind = \"postgres\"\nurl = \"{}\"", pg.url());
    let patient = Proxy::start(&sql_namespace(&backend)).await;
    let short = Proxy::start(&format!(
        "{}acquire_timeout = \"200ms\"\n[namespaces.retry]\nmax_attempts = 3\nmin_delay = \"100ms\"\n\
         max_delay = \"200ms\"\njitter = 0.0\n",
        sql_namespace(&backend)
    ))
    .await;
    let blpop = |addr: String| {
        tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let started = Instant::now();
            let reply = conn.command(&["BLPOP", "q", "30"]).await;
            (text(&reply), started.elapsed())
        })
    };
    let waiting = blpop(patient.addr.clone());
    let giving_up = blpop(short.addr.clone());
    sleep(Duration::from_millis(500)).await;
    pg.stop_immediate();
    let (reply, waited) = giving_up.await.expect("the short-budget client");
    assert!(reply.starts_with('-'), "past its budget: {reply:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    sleep(Duration::from_secs(2)).await;
    pg.start_again();
    let mut producer = patient.connect().await;
    assert_eq!(
        text(&producer.command(&["RPUSH", "q", "job"]).await),
        ":1\r\n"
    );
    let (reply, _) = waiting.await.expect("the patient client");
    assert_eq!(reply, "*2\r\n$1\r\nq\r\n$3\r\njob\r\n");
    patient.stop().await;
    short.stop().await;
}
