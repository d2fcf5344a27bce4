//! A namespace mirrored from a real Redis to SQLite (`[namespaces.mirror]`): the writes a
//! client makes through holdfast reach the mirror as the primary applied them (relative
//! times made absolute, server-chosen ids and random pops carried as chosen, blocking pops
//! as the pop they ended in, transactions command by command); a read compared on the
//! mirror finds a planted difference; a paused mirror never holds a client, and the keys it
//! missed are marked; a cut-over by reload answers from the mirror with every acknowledged
//! write there; a namespace moves from Redis, and from SQLite, to PostgreSQL under load.

use crate::support::*;

use std::time::Duration;

fn config(redis: &str, sqlite: &std::path::Path, mirror_extra: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "{redis}"
[backends.db]
kind = "sqlite"
path = "{}"
[[namespaces]]
name = "all"
backend = "main"
mirror = {{ backend = "db"{mirror_extra} }}
"#,
        sqlite.display()
    )
}

/// A Redis, and a holdfast whose namespace `name` is on it, mirrored (`mirror_extra` added
/// to the mirror's table) to a SQLite file in the returned temp dir.
async fn on_redis_mirrored_to_sqlite(
    name: &str,
    mirror_extra: &str,
) -> (RedisServer, tempfile::TempDir, std::path::PathBuf, Proxy) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mirror.db");
    let toml = config(&redis.url(), &file, mirror_extra)
        .replace("name = \"all\"", &format!("name = \"{name}\""));
    let proxy = Proxy::start(&toml).await;
    (redis, dir, file, proxy)
}

/// holdfast straight on the SQLite file: what the mirror holds.
async fn on_mirror(sqlite: &std::path::Path) -> Proxy {
    Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        sqlite.display()
    )))
    .await
}

/// Waits until the mirror queue is empty and nothing is on its way.
async fn settled(proxy: &Proxy) {
    let mirror = proxy
        .holdfast
        .mirror("all")
        .expect("the namespace has a mirror");
    assert!(
        mirror.settled(Duration::from_secs(20)).await,
        "the mirror never caught up"
    );
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// A bulk reply's body (`$1\r\nv\r\n` → `v`), as `RedisServer::cmd` hands it raw.
fn body(raw: &str) -> String {
    raw.lines().nth(1).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reach_the_mirror_as_the_primary_applied_them() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mirror.db");
    let proxy = Proxy::start(&config(&redis.url(), &file, "")).await;
    let mut c = proxy.connect().await;
    let writes: &[&[&str]] = &[
        &["SET", "s", "v"],
        &["INCR", "n"],
        &["INCRBY", "n", "41"],
        &["INCRBYFLOAT", "f", "0.1"],
        &["INCRBYFLOAT", "f", "0.2"],
        &["SET", "ttl", "v", "EX", "100"],
        &["EXPIRE", "s", "200"],
        &["HSET", "h", "a", "1", "b", "2"],
        &["HINCRBYFLOAT", "h", "a", "1.5"],
        &["SADD", "set", "a", "b", "c", "d", "e"],
        &["SPOP", "set", "2"],
        &["RPUSH", "list", "a", "b", "c"],
        &["BLPOP", "nothing", "list", "1"],
        &["BLMOVE", "list", "other", "RIGHT", "LEFT", "1"],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["BZPOPMIN", "z", "1"],
        &["XADD", "x", "*", "f", "v"],
        &["XADD", "x", "*", "f", "w"],
        &["XGROUP", "CREATE", "x", "g", "0"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "1",
            "BLOCK",
            "100",
            "STREAMS",
            "x",
            ">",
        ],
        &["MULTI"],
        &["INCR", "n"],
        &["LPUSH", "list", "m"],
        &["EXEC"],
        &["DEL", "other"],
    ];
    for w in writes {
        let reply = c.command(w).await;
        assert!(!reply.starts_with(b"-"), "{w:?}: {}", text(&reply));
    }
    settled(&proxy).await;
    let direct = on_mirror(&file).await;
    let mut m = direct.connect().await;
    let reads: &[&[&str]] = &[
        &["GET", "s"],
        &["GET", "n"],
        &["GET", "f"],
        &["HGETALL", "h"],
        &["SCARD", "set"],
        &["LRANGE", "list", "0", "-1"],
        &["EXISTS", "other"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["XRANGE", "x", "-", "+"],
        &["XPENDING", "x", "g", "-", "+", "10"],
    ];
    for r in reads {
        let want = text(&c.command(r).await);
        let got = text(&m.command(r).await);
        if r[0] == "XPENDING" {
            // Delivery times are each backend's own; ids, consumer and count are not.
            let id_and_owner = |t: &str| t.lines().take(6).collect::<Vec<_>>().join("|");
            assert_eq!(id_and_owner(&got), id_and_owner(&want), "{r:?}");
        } else {
            assert_eq!(got, want, "{r:?}");
        }
    }
    // SPOP's members are those the primary popped.
    let members = |t: String| {
        let mut v: Vec<String> = t
            .lines()
            .filter(|l| !l.starts_with(['*', '$']))
            .map(String::from)
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        members(text(&m.command(&["SMEMBERS", "set"]).await)),
        members(text(&c.command(&["SMEMBERS", "set"]).await))
    );
    // Times to live: the deadline the primary set, within the test's own pace.
    for key in ["s", "ttl"] {
        let a: i64 = text(&c.command(&["PTTL", key]).await)[1..]
            .trim()
            .parse()
            .unwrap();
        let b: i64 = text(&m.command(&["PTTL", key]).await)[1..]
            .trim()
            .parse()
            .unwrap();
        assert!(a > 0 && (a - b).abs() < 2_000, "{key}: {a} {b}");
    }
    // Nothing refused by the mirror, nothing to copy again. (The metrics are the process's,
    // shared with the other tests here: the mirror itself is asked.)
    let mirror = proxy.holdfast.mirror("all").unwrap();
    assert_eq!(mirror.status(), (0, 0));
    direct.stop().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compared_read_finds_a_planted_difference() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mirror.db");
    let proxy = Proxy::start(&config(&redis.url(), &file, ", reads = \"compare\"")).await;
    let mut c = proxy.connect().await;
    for key in ["same", "planted"] {
        c.command(&["SET", key, "primary"]).await;
    }
    settled(&proxy).await;
    // A difference planted on the mirror alone.
    let direct = on_mirror(&file).await;
    direct
        .connect()
        .await
        .command(&["SET", "planted", "mirror"])
        .await;
    for key in ["same", "planted", "same"] {
        assert_eq!(text(&c.command(&["GET", key]).await), "$7\r\nprimary\r\n");
    }
    settled(&proxy).await;
    let difference =
        "holdfast_mirror_differences_total{holdfast_namespace=\"all\",command=\"GET\"}";
    assert_eq!(proxy.metric(difference).await, 1.0);
    assert_eq!(
        proxy
            .metric("holdfast_mirror_compared_total{result=\"same\"}")
            .await,
        2.0
    );
    direct.stop().await;
    proxy.stop().await;
}

/// Two clients' scripts, each naming a key of its own and both appending to a key neither
/// names (as BullMQ's scripts write job hashes built from their arguments), and the two
/// clients' plain appends to one key: the mirror's lists are the primary's, entry for entry,
/// in the primary's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_writing_keys_they_do_not_name_reach_the_mirror_in_the_primary_s_order() {
    let (redis, _dir, file, proxy) = on_redis_mirrored_to_sqlite("scripts", "").await;
    let script = "redis.call('RPUSH', 'log', ARGV[1]) return redis.call('INCR', KEYS[1])";
    let clients: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|own| {
            let addr = proxy.addr.clone();
            tokio::spawn(async move {
                let mut c = RawConn::connect(&addr).await;
                for i in 0..200 {
                    let entry = format!("{own}{i}");
                    let reply = c.command(&["EVAL", script, "1", own, &entry]).await;
                    assert!(reply.starts_with(b":"), "{}", text(&reply));
                    // And a plain write of one key the two clients share.
                    let reply = c.command(&["RPUSH", "plain", &entry]).await;
                    assert!(reply.starts_with(b":"), "{}", text(&reply));
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let mirror = proxy.holdfast.mirror("scripts").expect("mirrored");
    assert!(mirror.settled(Duration::from_secs(20)).await);
    assert_eq!(mirror.status().1, 0, "nothing missed");
    let mut primary = RawConn::connect(&redis.addr()).await;
    let direct = on_mirror(&file).await;
    let mut mirrored = direct.connect().await;
    for list in ["log", "plain"] {
        let on_primary = primary.command(&["LRANGE", list, "0", "-1"]).await;
        let on_mirror = mirrored.command(&["LRANGE", list, "0", "-1"]).await;
        assert!(on_primary.starts_with(b"*400\r\n"), "{}", text(&on_primary));
        assert!(
            on_primary == on_mirror,
            "the mirror's {list} is in another order"
        );
    }
    direct.stop().await;
    proxy.stop().await;
}

/// A script a client loaded before its namespace was mirrored: the mirror, a database that
/// never saw the load, still runs the client's EVALSHA of it (holdfast knows the text), so
/// the mirror misses nothing, and after the cut-over the client's EVALSHA keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_loaded_before_the_mirror_was_added_is_replayed_there() {
    let (redis, _dir, file, proxy) = on_redis_mirrored_to_sqlite("late", "").await;
    let mirrored = config(&redis.url(), &file, "").replace("name = \"all\"", "name = \"late\"");
    let unmirrored = mirrored.replace("mirror = { backend = \"db\" }", "");
    proxy.reload(&unmirrored).expect("the mirror is taken away");
    assert!(proxy.holdfast.mirror("late").is_none());
    let mut c = proxy.connect().await;
    let script = "return redis.call('SET', KEYS[1], ARGV[1])";
    let sha = body(&text(&c.command(&["SCRIPT", "LOAD", script]).await));
    assert_eq!(sha.len(), 40, "{sha}");
    let reply = c.command(&["EVALSHA", &sha, "1", "before", "1"]).await;
    assert_eq!(reply, b"+OK\r\n");
    proxy.reload(&mirrored).expect("the mirror is added");
    for i in 0..20 {
        let reply = c
            .command(&["EVALSHA", &sha, "1", &format!("k{i}"), "v"])
            .await;
        assert_eq!(reply, b"+OK\r\n");
    }
    let mirror = proxy.holdfast.mirror("late").expect("mirrored");
    assert!(mirror.settled(Duration::from_secs(20)).await);
    assert_eq!(
        mirror.status().1,
        0,
        "the mirror missed the script's writes"
    );
    // What `holdfast copy` measures its bar against: the primary's 21 keys.
    let status = text(&c.command(&["HOLDFAST", "MIRROR", "late"]).await);
    assert!(
        status.ends_with("$12\r\nprimary_keys\r\n:21\r\n"),
        "{status}"
    );
    // Cut over: the client's EVALSHA is answered by the database, as by Redis before.
    let cut = mirrored
        .replace("mirror = { backend = \"db\" }", "")
        .replace("backend = \"main\"", "backend = \"db\"");
    proxy.reload(&cut).expect("the cut-over applies");
    let reply = c.command(&["EVALSHA", &sha, "1", "after", "v"]).await;
    assert_eq!(reply, b"+OK\r\n");
    let direct = on_mirror(&file).await;
    let mut on_db = direct.connect().await;
    for key in ["k0", "k19", "after"] {
        assert_eq!(on_db.command(&["GET", key]).await, b"$1\r\nv\r\n", "{key}");
    }
    // Nothing ran the script on Redis after the cut-over.
    assert_eq!(redis.cmd(&["EXISTS", "after"]).trim(), ":0");
    direct.stop().await;
    proxy.stop().await;
}

/// Reads of a key racing writes to it: the mirror, a write ahead of the read the primary
/// answered, says something else, but the primary says something else too when read again;
/// and a write the primary applied before a read is queued before the read's comparison.
/// Not one difference is counted, and the confirmation is seen doing its work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_writes_are_never_counted_as_differences() {
    // Its own namespace name: the metrics of this test binary are one process's.
    let (_redis, _dir, _file, proxy) =
        on_redis_mirrored_to_sqlite("racing", ", reads = \"compare\"").await;
    // Writers pausing between writes (a read then often sees a write applied and not yet
    // queued), and readers reading all the while.
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let addr = proxy.addr.clone();
            tokio::spawn(async move {
                let mut c = RawConn::connect(&addr).await;
                for _ in 0..300 {
                    assert!(c.command(&["INCR", "hot"]).await.starts_with(b":"));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let addr = proxy.addr.clone();
            let done = writers.iter().map(|w| w.abort_handle()).collect::<Vec<_>>();
            tokio::spawn(async move {
                let mut c = RawConn::connect(&addr).await;
                while !done.iter().all(|w| w.is_finished()) {
                    c.command(&["GET", "hot"]).await;
                }
            })
        })
        .collect();
    for task in writers.into_iter().chain(readers) {
        task.await.unwrap();
    }
    let mirror = proxy.holdfast.mirror("racing").expect("mirrored");
    assert!(mirror.settled(Duration::from_secs(20)).await);
    let series = |result: &str| {
        format!(
            "holdfast_mirror_compared_total{{holdfast_namespace=\"racing\",result=\"{result}\"}}"
        )
    };
    let changing = proxy.metric(&series("changing")).await;
    let same = proxy.metric(&series("same")).await;
    let different = proxy.metric(&series("different")).await;
    eprintln!("compared: {same} same, {changing} changing, {different} different");
    assert!(
        changing > 0.0,
        "no read raced a write: the test proves nothing"
    );
    assert_eq!(different, 0.0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_mirror_never_holds_a_client_and_its_missed_keys_are_marked() {
    let redis = RedisServer::start();
    let mirror = RedisServer::start();
    let toml = format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "{}"
[backends.copy]
kind = "redis"
url = "{}"
[[namespaces]]
name = "all"
backend = "main"
mirror = {{ backend = "copy", queue = 50 }}
"#,
        redis.url(),
        mirror.url()
    );
    let proxy = Proxy::start(&toml).await;
    let mut c = proxy.connect().await;
    c.command(&["SET", "warm", "1"]).await;
    settled(&proxy).await;
    mirror.pause();
    // Every write answered while the mirror cannot take any: well past the queue.
    let started = std::time::Instant::now();
    for i in 0..500 {
        let reply = c.command(&["SET", &format!("k{i}"), "v"]).await;
        assert_eq!(reply, b"+OK\r\n");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "500 writes took {took:?}");
    let (_, marked) = proxy.holdfast.mirror("all").unwrap().status();
    assert!(marked >= 400, "{marked} keys marked");
    // A cut-over to a mirror that missed writes is refused; the old configuration stays.
    let cut = toml.replace(
        "backend = \"main\"\nmirror = { backend = \"copy\", queue = 50 }",
        "backend = \"copy\"",
    );
    let refused = proxy
        .reload(&cut)
        .expect_err("a cut-over to a mirror behind is refused");
    assert!(refused.contains("behind"), "{refused}");
    mirror.resume();
    settled(&proxy).await;
    assert_eq!(body(&mirror.cmd(&["GET", "k0"])), "v", "k0 never replayed");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_over_answers_from_the_mirror_with_every_acknowledged_write() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mirror.db");
    let toml = config(&redis.url(), &file, "");
    let proxy = Proxy::start(&toml).await;
    // Writers counting what was acknowledged, through the cut-over.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let addr = proxy.addr.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let mut acked = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let reply = conn.command(&["INCR", &format!("counter:{w}")]).await;
                assert!(reply.starts_with(b":"), "INCR: {}", text(&reply));
                acked += 1;
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cut = toml
        .replace("mirror = { backend = \"db\" }", "")
        .replace("backend = \"main\"", "backend = \"db\"");
    proxy.reload(&cut).expect("the cut-over applies");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut c = proxy.connect().await;
    for (w, writer) in writers.into_iter().enumerate() {
        let acked = writer.await.unwrap();
        let now = text(&c.command(&["GET", &format!("counter:{w}")]).await);
        assert_eq!(
            now,
            format!("${}\r\n{acked}\r\n", acked.to_string().len()),
            "writer {w}"
        );
    }
    // The mirror answers now: Redis stopped getting writes at the cut-over.
    let on_redis: u64 = body(&redis.cmd(&["GET", "counter:0"])).parse().unwrap();
    let on_mirror = text(&c.command(&["GET", "counter:0"]).await);
    assert!(
        !on_mirror.ends_with(&format!("\r\n{on_redis}\r\n")),
        "still on Redis: {on_redis}"
    );
    proxy.stop().await;
}

/// A load of mixed writes through holdfast, each writer's acknowledged writes counted: the
/// oracle of a move. Writer `w` increments `counter:w`, pushes to `list:w`, sets fields of
/// `hash:w`, adds to `set:w` and `z:w`, appends to `stream:w` and reads it as group `g`,
/// and writes a string with a time to live; every reply must be a success.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<(u64, Duration)>>,
}

impl Load {
    fn start(addr: &str, writers: usize) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers = (0..writers)
            .map(|w| {
                let (addr, stop) = (addr.to_string(), stop.clone());
                tokio::spawn(async move {
                    let mut c = RawConn::connect(&addr).await;
                    let (mut acked, mut slowest) = (0u64, Duration::ZERO);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let i = acked.to_string();
                        let (counter, list, hash, set, z, stream, ttl) = (
                            format!("counter:{w}"),
                            format!("list:{w}"),
                            format!("hash:{w}"),
                            format!("set:{w}"),
                            format!("z:{w}"),
                            format!("stream:{w}"),
                            format!("ttl:{w}:{}", acked % 10),
                        );
                        let field = format!("f{}", acked % 50);
                        let member = format!("m{i}");
                        let started = std::time::Instant::now();
                        for cmd in [
                            vec!["INCR", &counter],
                            vec!["RPUSH", &list, &i],
                            vec!["HSET", &hash, &field, &i],
                            vec!["SADD", &set, &i],
                            vec!["ZADD", &z, &i, &member],
                            vec!["XADD", &stream, "*", "n", &i],
                            vec![
                                "XREADGROUP",
                                "GROUP",
                                "g",
                                "c",
                                "COUNT",
                                "1",
                                "STREAMS",
                                &stream,
                                ">",
                            ],
                            vec!["SET", &ttl, &i, "EX", "600"],
                        ] {
                            let reply = c.command(&cmd).await;
                            assert!(!reply.starts_with(b"-"), "{cmd:?}: {}", text(&reply));
                        }
                        slowest = slowest.max(started.elapsed());
                        acked += 1;
                        // A steady load, not a flood: about 150 writes a second a writer.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    (acked, slowest)
                })
            })
            .collect();
        Load { stop, writers }
    }

    /// Stops the writers: each one's acknowledged rounds, and the slowest round.
    async fn stop(self) -> Vec<(u64, Duration)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut out = Vec::new();
        for w in self.writers {
            out.push(w.await.unwrap());
        }
        out
    }
}

/// Every acknowledged write of `rounds[w]` is on whatever backend `c` reaches.
async fn oracle(c: &mut RawConn, rounds: &[(u64, Duration)]) {
    for (w, (acked, _)) in rounds.iter().enumerate() {
        let n = acked.to_string();
        let int = |r: Vec<u8>| text(&r).trim_start_matches(':').trim().to_string();
        assert_eq!(
            text(&c.command(&["GET", &format!("counter:{w}")]).await),
            format!("${}\r\n{n}\r\n", n.len()),
            "counter:{w}"
        );
        assert_eq!(
            int(c.command(&["LLEN", &format!("list:{w}")]).await),
            n,
            "list:{w}"
        );
        assert_eq!(
            int(c.command(&["SCARD", &format!("set:{w}")]).await),
            n,
            "set:{w}"
        );
        assert_eq!(
            int(c.command(&["ZCARD", &format!("z:{w}")]).await),
            n,
            "z:{w}"
        );
        assert_eq!(
            int(c.command(&["XLEN", &format!("stream:{w}")]).await),
            // `seed` put one entry there first.
            (acked + 1).to_string(),
            "stream:{w}"
        );
        assert_eq!(
            int(c.command(&["HLEN", &format!("hash:{w}")]).await),
            (*acked).min(50).to_string(),
            "hash:{w}"
        );
    }
}

/// Keys that were there before mirroring began, of every type, some with a time to live,
/// written over RESP at `addr` (a Redis, or a holdfast on the primary's SQL backend).
async fn seed(addr: &str, keys: usize) {
    let mut c = RawConn::connect(addr).await;
    let mut sent: Vec<Vec<String>> = Vec::new();
    for k in 0..keys {
        let k = k.to_string();
        let key = |kind: &str| format!("old:{kind}:{k}");
        sent.push(vec!["SET".into(), key("s"), k.clone()]);
        sent.push(vec![
            "HSET".into(),
            key("h"),
            "a".into(),
            k.clone(),
            "b".into(),
            "x".into(),
        ]);
        sent.push(vec!["RPUSH".into(), key("l"), "a".into(), k.clone()]);
        sent.push(vec!["SADD".into(), key("set"), "a".into(), k.clone()]);
        sent.push(vec![
            "ZADD".into(),
            key("z"),
            "1".into(),
            "a".into(),
            k.clone(),
            "b".into(),
        ]);
        sent.push(vec![
            "SET".into(),
            key("ttl"),
            k.clone(),
            "EX".into(),
            "900".into(),
        ]);
    }
    for w in 0..4 {
        let stream = format!("stream:{w}");
        sent.push(vec![
            "XADD".into(),
            stream.clone(),
            "1-1".into(),
            "old".into(),
            "entry".into(),
        ]);
        sent.push(vec![
            "XGROUP".into(),
            "CREATE".into(),
            stream,
            "g".into(),
            "0".into(),
        ]);
        sent.push(vec!["SET".into(), format!("counter:{w}"), "0".into()]);
    }
    for args in sent {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = c.command(&args).await;
        assert!(!reply.starts_with(b"-"), "{args:?}: {}", text(&reply));
    }
}

/// `toml` (a namespace on `main` mirrored to `next`) cut over: the namespace on `next`,
/// the mirror line gone.
pub(crate) fn cut_over(toml: &str) -> String {
    toml.replace("mirror = { backend = \"next\" }", "")
        .replace("backend = \"main\"", "backend = \"next\"")
}

/// A namespace on `from`, mirrored to `to` (each a backend's TOML lines).
fn moving_config(from: &str, to: &str, extra: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
{from}
[backends.next]
{to}
[[namespaces]]
name = "all"
backend = "main"
mirror = {{ backend = "next"{extra} }}
"#
    )
}

fn redis_backend(redis: &RedisServer) -> String {
    format!("kind = \"redis\"\nurl = \"{}\"", redis.url())
}

fn pg_backend(pg: &PgServer) -> String {
    format!("kind = \"postgres\"\nurl = \"{}\"", pg.url())
}

fn target(proxy: &Proxy) -> holdfast::cli::MoveTarget {
    holdfast::cli::MoveTarget {
        namespace: "all".into(),
        address: Some(proxy.addr.clone()),
        user: None,
        batch: 200,
    }
}

/// Moves the namespace of `toml` (seeded with 300 keys of each kind before mirroring) to
/// its mirror under 4 writers: copy, verify with zero differences, cut over, and every
/// acknowledged write found on the new backend. The writers' rounds, for the caller's checks
/// of the old backend.
async fn moves_under_load(toml: &str, what: &str) -> Vec<(u64, Duration)> {
    let proxy = Proxy::start(toml).await;
    let load = Load::start(&proxy.addr, 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("copy.state");
    let listen: std::net::SocketAddr = proxy.addr.parse().unwrap();
    let started = std::time::Instant::now();
    let copied = holdfast::mover::copy(&target(&proxy), listen, Some(state.clone()), false)
        .await
        .expect("the copy completes");
    let took = started.elapsed();
    assert!(copied >= 300 * 6, "copied {copied}");
    assert!(!state.exists(), "a finished copy leaves no state");
    eprintln!(
        "{what}: copied {copied} keys in {took:?}: {:.0} keys/s",
        copied as f64 / took.as_secs_f64()
    );
    // Checked under the same load: nothing differs.
    let (keys, differ) = holdfast::mover::verify(&target(&proxy), listen, 20)
        .await
        .expect("the verify completes");
    assert!(keys >= copied, "compared {keys}");
    assert_eq!(differ, 0);
    let cut = cut_over(toml);
    proxy.reload(&cut).expect("the cut-over applies");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rounds = load.stop().await;
    assert!(rounds.iter().all(|(n, _)| *n > 0));
    let mut c = proxy.connect().await;
    oracle(&mut c, &rounds).await;
    // The keys from before mirroring, through the new backend.
    assert_eq!(
        text(&c.command(&["HGET", "old:h:7", "a"]).await),
        "$1\r\n7\r\n"
    );
    assert_eq!(
        text(&c.command(&["LRANGE", "old:l:9", "0", "-1"]).await),
        "*2\r\n$1\r\na\r\n$1\r\n9\r\n"
    );
    let ttl: i64 = text(&c.command(&["TTL", "old:ttl:3"]).await)[1..]
        .trim()
        .parse()
        .unwrap();
    assert!((800..=900).contains(&ttl), "{ttl}");
    proxy.stop().await;
    rounds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_moves_from_redis_to_postgres_under_load() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    seed(&redis.addr(), 300).await;
    let toml = moving_config(&redis_backend(&redis), &pg_backend(&pg), "");
    let rounds = moves_under_load(&toml, "Redis to PostgreSQL").await;
    // Redis stopped getting writes at the cut-over.
    let on_redis: u64 = body(&redis.cmd(&["GET", "counter:0"])).parse().unwrap();
    assert!(on_redis < rounds[0].0, "{on_redis} of {}", rounds[0].0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_moves_from_sqlite_to_postgres_under_load() {
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("outgrown.db");
    let sqlite = format!("kind = \"sqlite\"\npath = \"{}\"", file.display());
    // The keys from before: written by a holdfast on the file alone, stopped before the
    // mirroring one starts.
    let alone = Proxy::start(&sql_namespace(&sqlite)).await;
    seed(&alone.addr, 300).await;
    alone.stop().await;
    let toml = moving_config(&sqlite, &pg_backend(&pg), "");
    let rounds = moves_under_load(&toml, "SQLite to PostgreSQL").await;
    // The file stopped getting writes at the cut-over.
    let alone = Proxy::start(&sql_namespace(&sqlite)).await;
    let mut c = alone.connect().await;
    let on_file = text(&c.command(&["GET", "counter:0"]).await);
    let on_file: u64 = body(&on_file).parse().unwrap();
    assert!(on_file < rounds[0].0, "{on_file} of {}", rounds[0].0);
    alone.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_stopped_during_a_copy_holds_no_client_and_the_copy_completes() {
    let redis = RedisServer::start();
    let next = RedisServer::start();
    seed(&redis.addr(), 300).await;
    let toml = moving_config(
        &redis_backend(&redis),
        &redis_backend(&next),
        ", queue = 200",
    );
    let proxy = Proxy::start(&toml).await;
    let load = Load::start(&proxy.addr, 2);
    let listen: std::net::SocketAddr = proxy.addr.parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Stopped as the copy starts (a copy of 1,800 keys takes a fraction of a second): the
    // copy meets a full queue at once and waits, the writers' writes are marked.
    next.pause();
    let copy = {
        let target = target(&proxy);
        let state = dir.path().join("copy.state");
        tokio::spawn(
            async move { holdfast::mover::copy(&target, listen, Some(state), false).await },
        )
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !copy.is_finished(),
        "the copy ended while its mirror was stopped"
    );
    next.resume();
    let copied = copy
        .await
        .unwrap()
        .expect("the copy completes after the mirror returns");
    assert!(copied >= 300 * 6, "copied {copied}");
    let (_, differ) = holdfast::mover::verify(&target(&proxy), listen, 20)
        .await
        .unwrap();
    let rounds = load.stop().await;
    assert_eq!(differ, 0);
    // No round of writes waited on the stopped mirror.
    for (w, (n, slowest)) in rounds.iter().enumerate() {
        assert!(
            *n > 0 && *slowest < Duration::from_secs(2),
            "writer {w}: {n} rounds, slowest {slowest:?}"
        );
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_over_to_a_stopped_mirror_answers_unavailable_within_the_schedule_then_serves() {
    let redis = RedisServer::start();
    let next = RedisServer::start();
    // A retry schedule of 3 s before jitter (1 + 2), far under the mirror's response timeout:
    // the mirror's stuck write is still on its way, not given up, when a request gives up.
    let schedule = "\nacquire_timeout = \"1s\"\n[defaults.retry]\nmax_attempts = 3\nmin_delay = \"1s\"\nmultiplier = 2.0\n";
    let toml = moving_config(&redis_backend(&redis), &redis_backend(&next), "").replace(
        "reply_mode = \"fast\"",
        &format!("reply_mode = \"fast\"{schedule}"),
    );
    let proxy = Proxy::start(&toml).await;
    let mut c = proxy.connect().await;
    for _ in 0..10 {
        assert!(c.command(&["INCR", "counter"]).await.starts_with(b":"));
    }
    settled(&proxy).await;
    next.pause();
    // Acknowledged by Redis, queued behind a write the stopped mirror holds.
    for _ in 0..5 {
        assert!(c.command(&["INCR", "counter"]).await.starts_with(b":"));
    }
    let cut = cut_over(&toml);
    proxy
        .reload(&cut)
        .expect("nothing was missed: the cut-over applies");
    let asked = std::time::Instant::now();
    let reply = text(&c.command(&["GET", "counter"]).await);
    let took = asked.elapsed();
    assert!(
        reply.starts_with("-UNAVAILABLE not applied") && reply.contains("still applying"),
        "{reply}"
    );
    assert!(
        (Duration::from_millis(2900)..Duration::from_secs(6)).contains(&took),
        "answered after {took:?}"
    );
    // Once the mirror goes on, the namespace answers from it with all 15.
    next.resume();
    let mut reply = String::new();
    for _ in 0..3 {
        reply = text(&c.command(&["GET", "counter"]).await);
        if !reply.starts_with('-') {
            break;
        }
    }
    assert_eq!(reply, "$2\r\n15\r\n");
    assert!(c.command(&["INCR", "counter"]).await.starts_with(b":16"));
    assert_eq!(body(&redis.cmd(&["GET", "counter"])), "15");
    proxy.stop().await;
}

/// A write the mirror refused while catching up after a cut-over (its key held another type
/// there): before the namespace is answered from the new backend, the key is copied from the
/// old one, which still holds it and is no longer written. No client hears UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_mirror_missed_after_the_cut_over_is_copied_from_the_old_backend() {
    let redis = RedisServer::start();
    let next = RedisServer::start();
    let toml = moving_config(&redis_backend(&redis), &redis_backend(&next), "");
    let proxy = Proxy::start(&toml).await;
    let mut c = proxy.connect().await;
    // A difference planted on the mirror: the key is a string there.
    next.cmd(&["SET", "queue", "not a list"]);
    next.pause();
    for i in 0..3 {
        let reply = c.command(&["RPUSH", "queue", &format!("job{i}")]).await;
        assert!(reply.starts_with(b":"), "{}", text(&reply));
    }
    let cut = cut_over(&toml);
    proxy
        .reload(&cut)
        .expect("nothing was missed yet: the cut-over applies");
    next.resume();
    let reply = c.command(&["LRANGE", "queue", "0", "-1"]).await;
    assert_eq!(
        text(&reply),
        "*3\r\n$4\r\njob0\r\n$4\r\njob1\r\n$4\r\njob2\r\n"
    );
    assert_eq!(c.command(&["RPUSH", "queue", "job3"]).await, b":4\r\n");
    assert_eq!(
        next.cmd(&["LLEN", "queue"]).trim(),
        ":4",
        "answered from the new backend"
    );
    assert_eq!(redis.cmd(&["LLEN", "queue"]).trim(), ":3");
    proxy.stop().await;
}
