//! Job queues and optimistic locks on SQL backends. Queues as Sidekiq, Celery or RQ run
//! them: producers `LPUSH`,
//! consumers block in `BRPOP` or `BLMOVE`. On SQLite through one holdfast, and on PostgreSQL
//! through two holdfasts sharing the database (a push on one reaches a consumer blocked on
//! the other).
//! Every job is consumed exactly once; the latency from push to pop is printed (p50, p99).

#[allow(unused_imports)]
use crate::support;
use crate::support::*;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PRODUCERS: usize = 10;
const CONSUMERS: usize = 5;
const JOBS_EACH: usize = 100;

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// The job a BRPOP or BLMOVE reply carries, if any.
fn job_of(reply: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(reply);
    text.split("\r\n")
        .find(|l| l.starts_with("job:"))
        .map(str::to_string)
}

/// Runs the queue with producers on `produce` and consumers spread over `consume`; returns
/// the push-to-pop latencies in microseconds.
async fn run_queue(produce: &str, consume: &[String], queue: &str) -> Vec<u128> {
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let addr = produce.to_string();
        let queue = queue.to_string();
        producers.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            for n in 0..JOBS_EACH {
                let job = format!("job:{p}:{n}:{}", micros());
                let reply = conn.command(&["LPUSH", &queue, &job]).await;
                assert!(reply.starts_with(b":"), "LPUSH: {reply:?}");
                // 500 jobs a second in all, below what five consumers take: the latency
                // measured is the wake-up's, not a backlog's. Now and then a pause long
                // enough for every consumer to be blocked when the next job comes.
                let pause = if n % 25 == 24 { 400 } else { 20 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }));
    }
    let mut consumers = Vec::new();
    for c in 0..CONSUMERS {
        let addr = consume[c % consume.len()].clone();
        let queue = queue.to_string();
        consumers.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let mut got = Vec::new();
            let done = format!("{queue}:done:{c}");
            loop {
                // Three consumers pop, two move into a list of their own (RPOPLPUSH's
                // reliable-queue pattern). A timeout long enough never to pass: each ends
                // on a `stop` job.
                let reply = if c < 3 {
                    conn.command(&["BRPOP", &queue, "20"]).await
                } else {
                    conn.command(&["BLMOVE", &queue, &done, "RIGHT", "LEFT", "20"])
                        .await
                };
                let at = micros();
                if String::from_utf8_lossy(&reply).contains("stop") {
                    return got;
                }
                match job_of(&reply) {
                    Some(job) => got.push((job, at)),
                    None => panic!("consumer {c}: {:?}", String::from_utf8_lossy(&reply)),
                }
            }
        }));
    }
    for p in producers {
        p.await.expect("a producer");
    }
    // Once the queue is empty, one `stop` per consumer.
    let mut last = RawConn::connect(produce).await;
    let drained = std::time::Instant::now();
    while last.command(&["LLEN", queue]).await != b":0\r\n" {
        assert!(
            drained.elapsed() < Duration::from_secs(30),
            "the consumers stopped taking jobs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..CONSUMERS {
        last.command(&["LPUSH", queue, "stop"]).await;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut latencies = Vec::new();
    for c in consumers {
        for (job, at) in c.await.expect("a consumer") {
            let pushed: u128 = job
                .rsplit(':')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            latencies.push(at.saturating_sub(pushed));
            *seen.entry(job).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "consumed twice: {twice:?}");
    assert_eq!(
        seen.len(),
        PRODUCERS * JOBS_EACH,
        "jobs consumed (none lost, none twice)"
    );
    latencies.sort_unstable();
    // Every job reached a consumer long before any timeout could have ended a wait: a push
    // wakes a waiter (through the other holdfast, within its poll), it is not found late.
    let worst = latencies.last().copied().unwrap_or(0);
    assert!(
        worst < 2_000_000,
        "a job waited {} ms to be popped",
        worst / 1000
    );
    latencies
}

fn report(what: &str, latencies: &[u128]) {
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{what}: {} jobs, push to pop p50 {:.2} ms, p99 {:.2} ms",
        latencies.len(),
        at(0.5) as f64 / 1000.0,
        at(0.99) as f64 / 1000.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_queue_on_sqlite_consumes_every_job_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("queue.db").display()
    )))
    .await;
    let latencies = run_queue(&proxy.addr, std::slice::from_ref(&proxy.addr), "jobs").await;
    report("SQLite, one holdfast", &latencies);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_queue_on_postgres_across_two_holdfasts_consumes_every_job_once() {
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    let b = Proxy::start(&config).await;
    // Producers on one, consumers on the other: they hear of a push only by trying again
    // (every `blocking_poll`, 100 ms, while first in line), or when a pop of theirs took
    // something (the next in line tries at once).
    let latencies = run_queue(&a.addr, std::slice::from_ref(&b.addr), "jobs").await;
    report("PostgreSQL, two holdfasts", &latencies);
    a.stop().await;
    b.stop().await;
}

/// Redis's order: the client that has waited longest is served first, and a timeout
/// answers nil after about its time.
#[tokio::test(flavor = "multi_thread")]
async fn the_longest_waiting_client_is_served_first_and_timeouts_answer_nil() {
    let dir = tempfile::tempdir().expect("a temp dir");
    // No poll: every wake-up here is a write's (or the previous waiter's) doing.
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"\nblocking_poll = \"1h\"",
        dir.path().join("order.db").display()
    )))
    .await;
    let mut waiting = Vec::new();
    for i in 0..3 {
        let addr = proxy.addr.clone();
        waiting.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let reply = conn.command(&["BLPOP", "q", "other", "5"]).await;
            (i, String::from_utf8_lossy(&reply).into_owned())
        }));
        // Each registers before the next.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut pusher = proxy.connect().await;
    assert_eq!(
        pusher.command(&["RPUSH", "q", "a", "b", "c"]).await,
        b":3\r\n"
    );
    for w in waiting {
        let (i, reply) = w.await.expect("a waiter");
        let want = ["a", "b", "c"][i];
        assert_eq!(
            reply,
            format!("*2\r\n$1\r\nq\r\n$1\r\n{want}\r\n"),
            "waiter {i}"
        );
    }
    let started = std::time::Instant::now();
    assert_eq!(pusher.command(&["BRPOP", "q", "0.3"]).await, b"*-1\r\n");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(
        pusher.command(&["BLPOP", "q", "-1"]).await,
        b"-ERR timeout is negative\r\n"
    );
    // Inside MULTI a blocking command does not block.
    assert_eq!(pusher.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(pusher.command(&["BLPOP", "q", "0"]).await, b"+QUEUED\r\n");
    assert_eq!(pusher.command(&["EXEC"]).await, b"*1\r\n*-1\r\n");
    // XREAD BLOCK on `$`: an entry added before it is not news; one added while it waits
    // wakes it (no poll here).
    assert_eq!(
        pusher.command(&["XADD", "events", "1-1", "f", "old"]).await,
        b"$3\r\n1-1\r\n"
    );
    let addr = proxy.addr.clone();
    let reader = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        conn.command(&["XREAD", "BLOCK", "5000", "STREAMS", "events", "$"])
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        pusher.command(&["XADD", "events", "2-1", "f", "new"]).await,
        b"$3\r\n2-1\r\n"
    );
    let read = String::from_utf8_lossy(&reader.await.expect("the reader")).into_owned();
    assert!(
        read.contains("2-1") && read.contains("new") && !read.contains("old"),
        "{read:?}"
    );
    // TIME is holdfast's clock on SQL backends.
    let time = String::from_utf8_lossy(&pusher.command(&["TIME"]).await).into_owned();
    let secs: u64 = time
        .split("\r\n")
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    assert!(secs.abs_diff(now) <= 2, "TIME: {time:?}");
    // A sorted set's pop.
    assert_eq!(pusher.command(&["ZADD", "z", "1", "m"]).await, b":1\r\n");
    assert_eq!(
        pusher.command(&["BZPOPMIN", "nothing", "z", "0"]).await,
        b"*3\r\n$1\r\nz\r\n$1\r\nm\r\n$1\r\n1\r\n"
    );
    proxy.stop().await;
}

/// The classic optimistic-lock counter: each client loops WATCH, GET, MULTI, SET n+1, EXEC
/// until its EXEC applies; with clients spread over `addrs`, the counter ends at the exact
/// number of increments, and some EXECs were answered nil on the way.
async fn optimistic_counter(addrs: &[String]) -> (u64, u64) {
    const CLIENTS: usize = 6;
    const EACH: u64 = 25;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let addr = addrs[c % addrs.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let mut aborted = 0u64;
            for _ in 0..EACH {
                loop {
                    assert_eq!(conn.command(&["WATCH", "counter"]).await, b"+OK\r\n");
                    let now = String::from_utf8_lossy(&conn.command(&["GET", "counter"]).await)
                        .split("\r\n")
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
                    let next = (now + 1).to_string();
                    assert_eq!(
                        conn.command(&["SET", "counter", &next]).await,
                        b"+QUEUED\r\n"
                    );
                    match conn.command(&["EXEC"]).await.as_slice() {
                        b"*1\r\n+OK\r\n" => break,
                        b"*-1\r\n" => aborted += 1,
                        other => panic!("EXEC: {:?}", String::from_utf8_lossy(other)),
                    }
                }
            }
            aborted
        }));
    }
    let mut aborted = 0;
    for t in tasks {
        aborted += t.await.expect("a client");
    }
    let mut conn = RawConn::connect(&addrs[0]).await;
    let total = String::from_utf8_lossy(&conn.command(&["GET", "counter"]).await)
        .split("\r\n")
        .nth(1)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert_eq!(total, CLIENTS as u64 * EACH, "increments lost or doubled");
    (total, aborted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_keeps_an_optimistic_counter_exact_on_sqlite_and_across_holdfasts_on_postgres() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("watch.db").display()
    )))
    .await;
    let (total, aborted) = optimistic_counter(std::slice::from_ref(&sqlite.addr)).await;
    println!("SQLite: counter {total}, {aborted} EXECs answered nil and retried");
    assert!(
        aborted > 0,
        "no EXEC ever met a concurrent write: the test proves nothing"
    );
    sqlite.stop().await;
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    let b = Proxy::start(&config).await;
    let (total, aborted) = optimistic_counter(&[a.addr.clone(), b.addr.clone()]).await;
    println!(
        "PostgreSQL, two holdfasts: counter {total}, {aborted} EXECs answered nil and retried"
    );
    assert!(
        aborted > 0,
        "no EXEC ever met a concurrent write: the test proves nothing"
    );
    a.stop().await;
    b.stop().await;
}

/// A client that closes while blocked takes nothing: the element pushed afterwards stays for
/// the next consumer (Redis drops a blocked client that disconnects; so must holdfast, on a
/// SQL backend and on Redis alike).
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_that_disconnects_while_blocked_takes_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let redis = RedisServer::start();
    for backend in [
        format!(
            "kind = \"sqlite\"\npath = \"{}\"",
            dir.path().join("gone.db").display()
        ),
        format!("kind = \"redis\"\nurl = \"{}\"", redis.url()),
    ] {
        let proxy = Proxy::start(&sql_namespace(&backend)).await;
        let mut gone = proxy.connect().await;
        gone.send(&encode_str(&["BLPOP", "jobs", "0"])).await;
        // Blocked by now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(gone);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut producer = proxy.connect().await;
        assert_eq!(producer.command(&["RPUSH", "jobs", "j1"]).await, b":1\r\n");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            producer.command(&["LPOP", "jobs"]).await,
            b"$2\r\nj1\r\n",
            "{backend}: the job went to a client that was gone"
        );
        proxy.stop().await;
    }
}

/// The entry ids in a stream reply, in order (values here never look like ids).
fn ids_in(reply: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(reply)
        .split("\r\n")
        .filter(|l| {
            let mut parts = l.splitn(2, '-');
            let ms = parts.next().unwrap_or_default();
            let seq = parts.next().unwrap_or_default();
            !ms.is_empty()
                && !seq.is_empty()
                && ms.bytes().all(|b| b.is_ascii_digit())
                && seq.bytes().all(|b| b.is_ascii_digit())
        })
        .map(str::to_string)
        .collect()
}

/// Acknowledges each id; returns those this call acknowledged (XACK answered 1).
async fn ack(conn: &mut RawConn, ids: &[String]) -> Vec<String> {
    let mut done = Vec::new();
    for id in ids {
        let reply = conn.command(&["XACK", "events", "workers", id]).await;
        match reply.as_slice() {
            b":1\r\n" => done.push(id.clone()),
            b":0\r\n" => {}
            other => panic!("XACK {id}: {}", String::from_utf8_lossy(other)),
        }
    }
    done
}

/// A stream consumed by a group: producers `XADD`, two consumers `XREADGROUP … BLOCK` and
/// `XACK`; one is killed holding entries it read and never acknowledged, and the other
/// takes them over with `XAUTOCLAIM`. Every entry is acknowledged exactly once.
async fn run_group(produce: &str, survivor_at: &str, doomed_at: &str) {
    const PRODUCERS: usize = 3;
    const EACH: usize = 60;
    let mut setup = RawConn::connect(produce).await;
    assert_eq!(
        setup
            .command(&["XGROUP", "CREATE", "events", "workers", "$", "MKSTREAM"])
            .await,
        b"+OK\r\n"
    );
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let addr = produce.to_string();
        producers.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let mut ids = Vec::new();
            for n in 0..EACH {
                let reply = conn
                    .command(&["XADD", "events", "*", "job", &format!("p{p}n{n}")])
                    .await;
                let id = ids_in(&reply);
                assert_eq!(id.len(), 1, "XADD: {}", String::from_utf8_lossy(&reply));
                ids.extend(id);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ids
        }));
    }
    // The doomed consumer acknowledges what it reads, until a batch it keeps: then its
    // connection is dropped, as a crashed worker's would be.
    let addr = doomed_at.to_string();
    let doomed = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        let (mut acked, mut batches) = (Vec::new(), 0);
        loop {
            let reply = conn
                .command(&[
                    "XREADGROUP",
                    "GROUP",
                    "workers",
                    "doomed",
                    "COUNT",
                    "5",
                    "BLOCK",
                    "2000",
                    "STREAMS",
                    "events",
                    ">",
                ])
                .await;
            let ids = ids_in(&reply);
            if ids.is_empty() {
                continue;
            }
            batches += 1;
            if batches == 4 {
                drop(conn);
                return (acked, ids);
            }
            acked.extend(ack(&mut conn, &ids).await);
            // A slow worker: its batches fill up.
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    });
    let total = PRODUCERS * EACH;
    let addr = survivor_at.to_string();
    let survivor = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        let (mut acked, mut claimed) = (Vec::new(), Vec::new());
        let started = std::time::Instant::now();
        let mut reads = 0usize;
        while started.elapsed() < Duration::from_secs(60) {
            let reply = conn
                .command(&[
                    "XREADGROUP",
                    "GROUP",
                    "workers",
                    "survivor",
                    "COUNT",
                    "10",
                    "BLOCK",
                    "200",
                    "STREAMS",
                    "events",
                    ">",
                ])
                .await;
            let ids = ids_in(&reply);
            reads += ids.len();
            acked.extend(ack(&mut conn, &ids).await);
            // Entries another consumer has held for half a second are taken over.
            let reply = conn
                .command(&[
                    "XAUTOCLAIM",
                    "events",
                    "workers",
                    "survivor",
                    "500",
                    "0-0",
                    "COUNT",
                    "100",
                    "JUSTID",
                ])
                .await;
            let mut ids = ids_in(&reply);
            ids.remove(0); // the cursor
            claimed.extend(ids.iter().cloned());
            acked.extend(ack(&mut conn, &ids).await);
            let pending = conn.command(&["XPENDING", "events", "workers"]).await;
            if pending.starts_with(b"*4\r\n:0\r\n") && reads > 0 {
                let len = conn.command(&["XLEN", "events"]).await;
                let info = conn.command(&["XINFO", "GROUPS", "events"]).await;
                let text = String::from_utf8_lossy(&info).to_string();
                if len == format!(":{total}\r\n").as_bytes() && text.contains("lag\r\n:0\r\n") {
                    break;
                }
            }
        }
        (acked, claimed)
    });
    let mut produced = Vec::new();
    for p in producers {
        produced.extend(p.await.expect("a producer"));
    }
    let (doomed_acked, abandoned) = doomed.await.expect("the doomed consumer");
    let (survivor_acked, claimed) = survivor.await.expect("the survivor");
    assert!(!abandoned.is_empty());
    for id in &abandoned {
        assert!(
            claimed.contains(id),
            "{id}, read by the killed consumer, was not claimed"
        );
    }
    let mut once = std::collections::HashSet::new();
    for id in doomed_acked.iter().chain(&survivor_acked) {
        assert!(once.insert(id.clone()), "{id} acknowledged twice");
    }
    let mut produced_sorted = produced.clone();
    produced_sorted.sort();
    let mut acked_sorted: Vec<String> = once.into_iter().collect();
    acked_sorted.sort();
    assert_eq!(
        acked_sorted.len(),
        produced_sorted.len(),
        "every entry acknowledged"
    );
    assert_eq!(acked_sorted, produced_sorted);
    println!(
        "{} entries: {} acknowledged by the killed consumer, {} by the survivor ({} taken over)",
        produced.len(),
        doomed_acked.len(),
        survivor_acked.len(),
        claimed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_group_survives_a_killed_consumer_on_sqlite_and_postgres() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("group.db").display()
    )))
    .await;
    run_group(&proxy.addr, &proxy.addr, &proxy.addr).await;
    proxy.stop().await;
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    let b = Proxy::start(&config).await;
    // Producers and the doomed consumer on one holdfast, the survivor on the other.
    run_group(&a.addr, &b.addr, &a.addr).await;
    a.stop().await;
    b.stop().await;
}

/// `XREADGROUP … BLOCK` waits for an entry added while it waits (woken by the write, with no
/// poll), and answers nil after its timeout.
#[tokio::test(flavor = "multi_thread")]
async fn xreadgroup_blocks_until_an_entry_comes_or_its_timeout() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"\nblocking_poll = \"1h\"",
        dir.path().join("xgroup.db").display()
    )))
    .await;
    let mut writer = proxy.connect().await;
    assert_eq!(
        writer
            .command(&["XGROUP", "CREATE", "ev", "g", "$", "MKSTREAM"])
            .await,
        b"+OK\r\n"
    );
    let addr = proxy.addr.clone();
    let reader = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        let started = std::time::Instant::now();
        let reply = conn
            .command(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "5000",
                "STREAMS",
                "ev",
                ">",
            ])
            .await;
        (reply, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        writer.command(&["XADD", "ev", "1-1", "f", "v"]).await,
        b"$3\r\n1-1\r\n"
    );
    let (reply, waited) = reader.await.expect("the reader");
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "*1\r\n*2\r\n$2\r\nev\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    let started = std::time::Instant::now();
    assert_eq!(
        writer
            .command(&[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "300",
                "STREAMS",
                "ev",
                ">",
            ])
            .await,
        b"*-1\r\n"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    // The entry it read is pending for it.
    let pending = writer.command(&["XPENDING", "ev", "g"]).await;
    assert!(pending.starts_with(b"*4\r\n:1\r\n"), "{pending:?}");
    proxy.stop().await;
}
