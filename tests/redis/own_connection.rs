//! A client's own Redis connection (its blocking commands, `WATCH`/`MULTI`/`EXEC`) and
//! Pub/Sub, through holdfast to a real redis-server, in each of the four ways a client may
//! reach it: RESP2 or RESP3, to a backend over TCP or TLS (a CA made by the test). Replies
//! are paired with their commands by order, never by their shape; every wait is bounded;
//! blocked clients are served in the order holdfast received their commands.

use crate::support;

use crate::support::tls::{tls_redis, Certs};
use crate::support::*;
use std::time::{Duration, Instant};

/// How a client reaches Redis through holdfast.
#[derive(Clone, Copy, Debug)]
struct Way {
    resp3: bool,
    tls: bool,
}

const WAYS: [Way; 4] = [
    Way {
        resp3: false,
        tls: false,
    },
    Way {
        resp3: true,
        tls: false,
    },
    Way {
        resp3: false,
        tls: true,
    },
    Way {
        resp3: true,
        tls: true,
    },
];

/// The backend's reply timeout in these tests.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// holdfast in front of `redis` (its TLS port when `way.tls`), `extra` added to the backend
/// table and `ns_extra` to the namespace.
async fn proxy(
    way: Way,
    redis: &RedisServer,
    tls_port: u16,
    certs: &Certs,
    (extra, ns_extra): (&str, &str),
) -> Proxy {
    let url = if way.tls {
        format!(
            "rediss://127.0.0.1:{tls_port}\"\ntls_ca = \"{}",
            certs.path("ca.pem").display()
        )
    } else {
        redis.url()
    };
    Proxy::start(&format!(
        "[defaults]\nreply_mode = \"settled\"\nacquire_timeout = \"1s\"\n[defaults.retry]\nmax_attempts = 4\nmin_delay = \"200ms\"\nmax_delay = \"1s\"\njitter = 0.0\n\
         [backends.main]\nkind = \"redis\"\nurl = \"{url}\"\npool_size = 2\nresponse_timeout = \"2s\"\n{extra}\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"main\"\n{ns_extra}\n"
    ))
    .await
}

/// A client of `addr` speaking RESP3 when `way.resp3`.
async fn client(addr: &str, way: Way) -> RawConn {
    let mut conn = RawConn::connect(addr).await;
    if way.resp3 {
        let hello = conn.command(&["HELLO", "3"]).await;
        assert!(hello.starts_with(b"%"), "{}", text(&hello));
    }
    conn
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// A reply, or a failure if none comes within `limit`.
async fn reply_within(conn: &mut RawConn, limit: Duration, what: &str) -> Vec<u8> {
    match conn.try_read_reply(limit).await {
        Ok(reply) => reply,
        Err(e) => panic!("{what}: no reply within {limit:?}: {e:?}"),
    }
}

/// Item 1 of the issue: a pop from a key named like a Pub/Sub push kind (`message`,
/// `subscribe`, ...) is a reply like any other. Through a library that routes replies by
/// their shape, `[key, member, score]` from `message` was taken for a published message: the
/// member was taken from Redis and no client got it.
#[tokio::test(flavor = "multi_thread")]
async fn a_blocking_pop_is_answered_whatever_its_key_is_named() {
    let certs = Certs::new();
    let (redis, tls_port) = tls_redis(&certs);
    let names = [
        "message",
        "pmessage",
        "smessage",
        "subscribe",
        "psubscribe",
        "unsubscribe",
        "punsubscribe",
    ];
    for way in WAYS {
        let proxy = proxy(way, &redis, tls_port, &certs, ("", "")).await;
        let mut through = client(&proxy.addr, way).await;
        let mut direct = client(&redis.addr(), way).await;
        for key in names {
            // What Redis itself answers, then the same through holdfast.
            let sorted: [&[&str]; 2] = [&["ZADD", key, "1", "job-43"], &["BZPOPMIN", key, "0"]];
            let listed: [&[&str]; 2] = [&["RPUSH", key, "job-44"], &["BLPOP", key, "0"]];
            let moved: [&[&str]; 2] = [
                &["RPUSH", key, "job-45"],
                &["BLMOVE", key, "taken", "LEFT", "RIGHT", "0"],
            ];
            for [put, pop] in [sorted, listed, moved] {
                direct.command(put).await;
                let want = direct.command(pop).await;
                direct.command(put).await;
                through.send(&encode_str(pop)).await;
                let got = reply_within(&mut through, Duration::from_secs(10), key).await;
                assert_eq!(text(&got), text(&want), "{way:?} {pop:?}");
                assert_eq!(redis.cmd(&["EXISTS", key]), ":0\r\n", "{way:?} {pop:?}");
            }
            redis.cmd(&["DEL", "taken"]);
        }
        // Waits that end with nothing: nil, within the command's own timeout and the
        // response timeout (a pop that was never answered waited for ever).
        for key in ["subscribe", "message"] {
            let want = direct.command(&["BZPOPMAX", key, "0.01"]).await;
            let started = Instant::now();
            through.send(&encode_str(&["BZPOPMAX", key, "1"])).await;
            let got = reply_within(&mut through, Duration::from_secs(10), key).await;
            assert_eq!(text(&got), text(&want), "{way:?}");
            assert!(
                started.elapsed() < Duration::from_secs(1) + RESPONSE_TIMEOUT,
                "{way:?}: {:?}",
                started.elapsed()
            );
        }
        proxy.stop().await;
    }
}

/// Item 2: a transaction that ran is answered with what it ran, whatever its replies look
/// like: here arrays that begin `message` and `subscribe`, as a published message and a
/// subscription's confirmation do.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_that_ran_is_answered_with_what_it_ran() {
    let certs = Certs::new();
    let (redis, tls_port) = tls_redis(&certs);
    for way in WAYS {
        let proxy = proxy(way, &redis, tls_port, &certs, ("", "")).await;
        let mut through = client(&proxy.addr, way).await;
        let mut direct = client(&redis.addr(), way).await;
        for (k, v) in [
            ("m1", "message"),
            ("m2", "chan"),
            ("m3", "payload"),
            ("s1", "subscribe"),
        ] {
            redis.cmd(&["SET", k, v]);
        }
        let transactions: [&[&[&str]]; 3] = [
            &[&["GET", "m1"], &["GET", "m2"], &["GET", "m3"]],
            &[&["GET", "s1"], &["GET", "m2"], &["INCR", "n"]],
            &[&["GET", "message"], &["INCR", "n"], &["GET", "message"]],
        ];
        for queue in transactions {
            let mut want = Vec::new();
            let mut got = Vec::new();
            for (conn, out) in [(&mut direct, &mut want), (&mut through, &mut got)] {
                redis.cmd(&["DEL", "n"]);
                assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
                for command in queue {
                    assert_eq!(conn.command(command).await, b"+QUEUED\r\n");
                }
                conn.send(&encode_str(&["EXEC"])).await;
                *out = reply_within(conn, Duration::from_secs(10), "EXEC").await;
            }
            assert_eq!(text(&got), text(&want), "{way:?} {queue:?}");
        }
        assert_eq!(redis.cmd(&["GET", "n"]), "$1\r\n1\r\n", "{way:?}");
        proxy.stop().await;
    }
}

/// Item 3: two clients block on one list and a third pushes to it right after them, with no
/// pause between the three: the first is served first, as on Redis directly (its
/// destination holds a string, so it gets `WRONGTYPE` and the element stays for the
/// second). Each client's blocking command is its first: it must not wait for a dial while
/// the push, received after it, reaches Redis first. holdfast runs as its binary, on its
/// default one thread, as a sidecar runs: commands are handled in the order their
/// connections became readable.
#[tokio::test(flavor = "multi_thread")]
async fn blocked_clients_are_served_in_the_order_holdfast_received_them() {
    let certs = Certs::new();
    let (redis, tls_port) = tls_redis(&certs);
    let redis = &redis;
    // What Redis answers when nothing comes between the three.
    let expect = |way: Way| async move {
        redis.cmd(&["DEL", "src", "dst1", "dst2"]);
        redis.cmd(&["SET", "dst1", "nolist"]);
        let mut a = client(&redis.addr(), way).await;
        let mut b = client(&redis.addr(), way).await;
        let mut c = client(&redis.addr(), way).await;
        a.send(&encode_str(&["BRPOPLPUSH", "src", "dst1", "0"]))
            .await;
        b.send(&encode_str(&["BRPOPLPUSH", "src", "dst2", "0"]))
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.command(&["LPUSH", "src", "x"]).await;
        (a.read_reply().await, b.read_reply().await)
    };
    for way in WAYS {
        let (first, second) = expect(way).await;
        assert!(first.starts_with(b"-WRONGTYPE"), "{}", text(&first));
        let url = if way.tls {
            format!(
                "rediss://127.0.0.1:{tls_port}\"\ntls_ca = \"{}",
                certs.path("ca.pem").display()
            )
        } else {
            redis.url()
        };
        let holdfast = Spawned::start(
            &format!(
                "[backends.main]\nkind = \"redis\"\nurl = \"{url}\"\n[[namespaces]]\nname = \"main\"\nbackend = \"main\"\n"
            ),
            &[],
        );
        drop(holdfast.connect().await);
        let warm = || async {
            until(Duration::from_secs(10), "the warm connections", || async {
                holdfast
                    .metric("holdfast_warm_connections{backend=\"main\"}")
                    .await
                    >= 4.0
            })
            .await;
        };
        warm().await;
        let mut monitor = RawConn::connect(&redis.addr()).await;
        monitor.command(&["MONITOR"]).await;
        for round in 0..20 {
            redis.cmd(&["DEL", "src", "dst1", "dst2"]);
            redis.cmd(&["SET", "dst1", "nolist"]);
            let addr = holdfast.addr.clone();
            let [got_a, got_b, got_c] =
                tokio::task::spawn_blocking(move || three_in_a_row(&addr, way))
                    .await
                    .expect("the clients ran");
            let served = match (&got_a, &got_b) {
                (Some(a), Some(b)) => (text(a), text(b)) == (text(&first), text(&second)),
                _ => false,
            };
            if !served {
                let mut seen = Vec::new();
                while let Ok(line) = monitor.try_read_reply(Duration::from_millis(300)).await {
                    let line = text(&line);
                    if line.contains("POP") || line.contains("PUSH") {
                        seen.push(line);
                    }
                }
                panic!("{way:?} round {round}: {got_a:?} {got_b:?}; Redis saw {seen:#?}");
            }
            assert_eq!(got_c.as_deref(), Some(&b":1\r\n"[..]));
            assert_eq!(
                redis.cmd(&["LRANGE", "dst2", "0", "-1"]),
                "*1\r\n$1\r\nx\r\n",
                "{way:?} round {round}"
            );
            // The connections for the next round's first commands are dialled again.
            warm().await;
        }
    }
}

/// Three clients of `addr`: two `BRPOPLPUSH src dst_i 0`, then `LPUSH src x`, written one
/// after the other from one thread (from an async task, two writes may leave from two CPUs
/// and reach the server in either order); their replies, None when one does not come.
fn three_in_a_row(addr: &str, way: Way) -> [Option<Vec<u8>>; 3] {
    use std::io::{Read, Write};
    let connect = || {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.set_nodelay(true).expect("nodelay");
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        if way.resp3 {
            conn.write_all(&encode_str(&["HELLO", "3"])).expect("HELLO");
            read_one(&mut conn).expect("HELLO's reply");
        }
        conn
    };
    fn read_one(conn: &mut std::net::TcpStream) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(len) = support::resp::frame_len(&buf) {
                buf.truncate(len);
                return Some(buf);
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
    let (mut a, mut b, mut c) = (connect(), connect(), connect());
    // Connected and answered once each, then left idle a moment: three clients holdfast
    // already waits on, as the clients of Redis's own test are. (Right after holdfast wrote
    // to a connection, the kernel may report that connection's next bytes ahead of bytes
    // that reached another one earlier: docs/decisions.md, "Known limits".)
    for conn in [&mut a, &mut b, &mut c] {
        conn.write_all(&encode_str(&["PING"])).expect("PING");
        read_one(conn).expect("PONG");
    }
    std::thread::sleep(Duration::from_millis(20));
    a.write_all(&encode_str(&["BRPOPLPUSH", "src", "dst1", "0"]))
        .expect("a");
    b.write_all(&encode_str(&["BRPOPLPUSH", "src", "dst2", "0"]))
        .expect("b");
    c.write_all(&encode_str(&["LPUSH", "src", "x"])).expect("c");
    [read_one(&mut a), read_one(&mut b), read_one(&mut c)]
}

/// Item 4: Pub/Sub through a backend reached over TLS, in RESP2 and RESP3.
#[tokio::test(flavor = "multi_thread")]
async fn pubsub_is_carried_over_tls() {
    let certs = Certs::new();
    let (redis, tls_port) = tls_redis(&certs);
    for way in WAYS.into_iter().filter(|w| w.tls) {
        let proxy = proxy(way, &redis, tls_port, &certs, ("", "")).await;
        let mut subscriber = client(&proxy.addr, way).await;
        let confirmed = subscriber.command(&["SUBSCRIBE", "news"]).await;
        assert!(
            text(&confirmed).contains("subscribe"),
            "{}",
            text(&confirmed)
        );
        let confirmed = subscriber.command(&["PSUBSCRIBE", "ne*"]).await;
        assert!(
            text(&confirmed).contains("psubscribe"),
            "{}",
            text(&confirmed)
        );
        assert_eq!(redis.cmd(&["PUBLISH", "news", "over-tls"]), ":2\r\n");
        let mut heard = Vec::new();
        for _ in 0..2 {
            heard.push(text(&subscriber.read_reply().await));
        }
        assert!(
            heard
                .iter()
                .any(|m| m.contains("message") && m.contains("over-tls")),
            "{heard:?}"
        );
        assert!(
            heard
                .iter()
                .any(|m| m.contains("pmessage") && m.contains("over-tls")),
            "{heard:?}"
        );
        proxy.stop().await;
    }
}

/// Every wait bounded: a client blocked for ever (or long) on a backend that freezes is
/// answered once the backend stops answering its probe, within the probe's period and the
/// response timeout: `INDOUBT` for a pop (it may have taken something as the backend froze),
/// `UNAVAILABLE` for a read. Its connection is reset, so once the backend wakes nothing is
/// taken for a client that was already told.
#[tokio::test(flavor = "multi_thread")]
async fn a_wait_on_a_frozen_backend_ends_within_its_bound() {
    let certs = Certs::new();
    for way in [WAYS[0], WAYS[3]] {
        let (redis, tls_port) = tls_redis(&certs);
        let proxy = proxy(way, &redis, tls_port, &certs, ("", "")).await;
        let mut pop = client(&proxy.addr, way).await;
        let mut long = client(&proxy.addr, way).await;
        let mut read = client(&proxy.addr, way).await;
        pop.send(&encode_str(&["BLPOP", "jobs", "0"])).await;
        long.send(&encode_str(&["BZPOPMAX", "subscribe", "60"]))
            .await;
        read.send(&encode_str(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]))
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        redis.pause();
        let frozen = Instant::now();
        let bound = Duration::from_secs(2) + RESPONSE_TIMEOUT + Duration::from_secs(3);
        let popped = text(&reply_within(&mut pop, bound, "BLPOP").await);
        let longer = text(&reply_within(&mut long, bound, "BZPOPMAX").await);
        let read_reply = text(&reply_within(&mut read, bound, "XREAD").await);
        let took = frozen.elapsed();
        redis.resume();
        assert!(popped.starts_with("-INDOUBT"), "{way:?}: {popped}");
        assert!(longer.starts_with("-INDOUBT"), "{way:?}: {longer}");
        assert!(
            read_reply.starts_with("-UNAVAILABLE"),
            "{way:?}: {read_reply}"
        );
        assert!(took < bound, "{way:?}: answered after {took:?}");
        // Nothing is left waiting on the backend for a client that was told.
        redis.cmd(&["RPUSH", "jobs", "j1"]);
        redis.cmd(&["ZADD", "subscribe", "1", "m1"]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(redis.cmd(&["LLEN", "jobs"]), ":1\r\n", "{way:?}");
        assert_eq!(redis.cmd(&["ZCARD", "subscribe"]), ":1\r\n", "{way:?}");
        // The clients go on.
        let again = text(&pop.command(&["BLPOP", "jobs", "0"]).await);
        assert!(again.contains("j1"), "{way:?}: {again}");
        proxy.stop().await;
    }
}

/// Item 5, first half: a script that writes and then raises an error is not rolled back by
/// Redis, so under `min_replicas_ack` its error waits for the replicas like a write: with
/// the replica frozen it is `INDOUBT`, never the bare error read as "not applied". Another
/// command's error reply applied nothing and is answered at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_scripts_error_waits_for_its_replicas() {
    let certs = Certs::new();
    let (primary, tls_port) = tls_redis(&certs);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    until(Duration::from_secs(10), "the replica to sync", || async {
        primary
            .cmd(&["INFO", "replication"])
            .contains("state=online")
    })
    .await;
    let script = "redis.call('SET', KEYS[1], 'written'); return redis.error_reply('ERR raised after a write')";
    for way in [WAYS[0], WAYS[3]] {
        let proxy = proxy(
            way,
            &primary,
            tls_port,
            &certs,
            // Wide enough that a replica on a loaded CI machine answers in time.
            ("", "min_replicas_ack = 1\nreplicas_ack_timeout = \"2s\""),
        )
        .await;
        let mut c = client(&proxy.addr, way).await;
        // The replica answers: the script's own error.
        let answered = text(&c.command(&["EVAL", script, "1", "k"]).await);
        assert!(
            answered.starts_with("-ERR raised after a write"),
            "{way:?}: {answered}"
        );
        replica.pause();
        primary.cmd(&["DEL", "k"]);
        let started = Instant::now();
        let doubted = text(&c.command(&["EVAL", script, "1", "k"]).await);
        assert!(doubted.starts_with("-INDOUBT"), "{way:?}: {doubted}");
        assert_eq!(primary.cmd(&["GET", "k"]), "$7\r\nwritten\r\n");
        assert!(
            started.elapsed() >= Duration::from_millis(1900),
            "it waited for the replica"
        );
        // The same inside a transaction, on the client's own connection.
        assert_eq!(c.command(&["MULTI"]).await, b"+OK\r\n");
        assert_eq!(c.command(&["EVAL", script, "1", "k"]).await, b"+QUEUED\r\n");
        let exec = text(&c.command(&["EXEC"]).await);
        assert!(exec.starts_with("-INDOUBT"), "{way:?}: {exec}");
        // An error that applied nothing: at once, as it is.
        primary.cmd(&["HSET", "h", "f", "v"]);
        let started = Instant::now();
        let refused = text(&c.command(&["INCR", "h"]).await);
        assert!(refused.starts_with("-WRONGTYPE"), "{way:?}: {refused}");
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
        replica.resume();
        proxy.stop().await;
    }
}

/// Item 5, second half: a settled `SET … NX PX` whose first dispatch landed with its reply
/// lost, then expired, and was followed by another client's `SET` before the retry: the
/// retry is refused and the value found is another's, but the first write was applied.
/// That is in doubt, not "not set".
#[tokio::test(flavor = "multi_thread")]
async fn an_expiring_set_nx_whose_write_vanished_is_in_doubt() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&format!(
        "[defaults]\nreply_mode = \"settled\"\nacquire_timeout = \"1s\"\n[defaults.retry]\nmax_attempts = 4\nmin_delay = \"1500ms\"\nmax_delay = \"2s\"\njitter = 0.0\n\
         [backends.main]\nkind = \"redis\"\nurl = \"redis://{}\"\npool_size = 1\nresponse_timeout = \"1s\"\nwarm_connections = 0\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"main\"\n",
        relay.addr()
    ))
    .await;
    let mut c = proxy.connect().await;
    assert_eq!(c.command(&["PING"]).await, b"+PONG\r\n");
    relay.drop_after_request_with(b"PX");
    c.send(&encode_str(&["SET", "lock", "mine", "NX", "PX", "200"]))
        .await;
    // Ours lands and expires; another client takes the lock before the retry.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        redis.cmd(&["SET", "lock", "theirs", "NX", "PX", "60000"]),
        "+OK\r\n"
    );
    let reply = text(&reply_within(&mut c, Duration::from_secs(15), "SET NX").await);
    assert_eq!(relay.fired(), 1);
    assert!(reply.starts_with("-INDOUBT"), "{reply}");
    assert_eq!(redis.cmd(&["GET", "lock"]), "$6\r\ntheirs\r\n");
    proxy.stop().await;
}

/// A job queue through holdfast on its RESP2 default, written with redis-py: ten consumers
/// take jobs with `BZPOPMIN` and `BLMOVE` from keys named `message`, `subscribe` and
/// `pmessage` while Redis is restarted (its AOF keeps the jobs) and then frozen under them.
/// Every job is delivered exactly once, or a consumer was told `INDOUBT` for the pop that may
/// have taken it; no job is delivered twice; no consumer waits past its bound.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_queue_delivers_every_job_once_or_says_it_is_in_doubt() {
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let proxy = Proxy::start(&format!(
        "[defaults]\nreply_mode = \"settled\"\nacquire_timeout = \"2s\"\n\
         [backends.main]\nkind = \"redis\"\nurl = \"{}\"\npool_size = 2\nresponse_timeout = \"2s\"\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"main\"\n",
        redis.url()
    ))
    .await;
    let py = redis_py("jobs.py", QUEUE_PY, &[&proxy.addr]);
    let mut child = py.child;
    let mut stdin = child.stdin.take().expect("stdin");
    // Jobs in three batches: before the restart, between it and the freeze, after.
    let mut produced = 0;
    let mut produce = |redis: &RedisServer, n: usize| {
        for _ in 0..n {
            let job = format!("job-{produced}");
            match produced % 3 {
                0 => redis.cmd(&["ZADD", "message", &produced.to_string(), &job]),
                1 => redis.cmd(&["ZADD", "subscribe", &produced.to_string(), &job]),
                _ => redis.cmd(&["RPUSH", "pmessage", &job]),
            };
            produced += 1;
        }
    };
    produce(&redis, 150);
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart();
    produce(&redis, 150);
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.pause();
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.resume();
    produce(&redis, 150);
    // Until the queues are empty, or long enough that they would be.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let left = redis.cmd(&["ZCARD", "message"])
            + &redis.cmd(&["ZCARD", "subscribe"])
            + &redis.cmd(&["LLEN", "pmessage"]);
        if left == ":0\r\n:0\r\n:0\r\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"stop\n").await.expect("stdin");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the consumers stop")
        .expect("python3 ends");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let mut delivered = std::collections::BTreeMap::<String, u32>::new();
    let (mut indoubt, mut longest) = (0, 0.0f64);
    let mut other = Vec::new();
    for line in stdout.lines() {
        let mut words = line.splitn(3, ' ');
        let (kind, took, what) = (words.next(), words.next(), words.next().unwrap_or(""));
        longest = longest.max(took.and_then(|t| t.parse().ok()).unwrap_or(0.0));
        match kind {
            Some("job") => *delivered.entry(what.to_string()).or_default() += 1,
            Some("nil") => {}
            Some("error") if what.starts_with("INDOUBT") => indoubt += 1,
            Some("error") if what.starts_with("UNAVAILABLE") => {}
            _ => other.push(line.to_string()),
        }
    }
    assert!(other.is_empty(), "unexpected: {other:?}");
    let twice: Vec<_> = delivered.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let mut left = 0;
    for reply in [
        redis.cmd(&["ZCARD", "message"]),
        redis.cmd(&["ZCARD", "subscribe"]),
        redis.cmd(&["LLEN", "pmessage"]),
    ] {
        left += reply
            .trim_start_matches(':')
            .trim()
            .parse::<usize>()
            .unwrap_or(0);
    }
    let missing = produced - delivered.len() - left;
    eprintln!("{produced} jobs: {} delivered, {left} left, {missing} missing, {indoubt} pops in doubt, longest wait {longest:.2}s", delivered.len());
    assert!(
        missing <= indoubt,
        "{missing} jobs neither delivered nor in doubt ({indoubt} pops in doubt)"
    );
    // A pop waits 1 s; its reply is due within that and the response timeout, or the probe's
    // period and the response timeout once the backend stops answering.
    assert!(
        longest < 1.0 + 2.0 + 2.0 + 1.0,
        "a consumer waited {longest:.2}s"
    );
    proxy.stop().await;
}

/// Ten consumers, as a job queue library would have them: each pops with a 1 s timeout and
/// prints `job <secs> <member>`, `nil <secs>`, or `error <secs> <text>` per call, until told
/// to stop on its input.
const QUEUE_PY: &str = r#"
import sys, threading, time
import redis

host, port = sys.argv[1].rsplit(":", 1)
stop = threading.Event()
lines = []
lock = threading.Lock()

def say(line):
    with lock:
        lines.append(line)

def consume(i):
    r = redis.Redis(host=host, port=int(port), socket_timeout=None, retry_on_timeout=False)
    while not stop.is_set():
        started = time.time()
        try:
            if i % 3 == 0:
                got = r.bzpopmin("message", timeout=1)
                job = got and got[1]
            elif i % 3 == 1:
                got = r.bzpopmin("subscribe", timeout=1)
                job = got and got[1]
            else:
                job = r.blmove("pmessage", "processing:%d" % i, 1, "LEFT", "RIGHT")
            took = time.time() - started
            if job:
                say("job %.3f %s" % (took, job.decode()))
            else:
                say("nil %.3f" % took)
        except redis.exceptions.ResponseError as e:
            say("error %.3f %s" % (time.time() - started, str(e).split("\n")[0]))
        except redis.exceptions.ConnectionError as e:
            say("connection %.3f %s" % (time.time() - started, e))
            time.sleep(0.1)

threads = [threading.Thread(target=consume, args=(i,)) for i in range(10)]
for t in threads:
    t.start()
sys.stdin.readline()
stop.set()
for t in threads:
    t.join()
print("\n".join(lines), flush=True)
"#;

/// A blocking pop, a transaction and a subscription through a backend whose servers speak
/// TLS only to holdfast, in RESP2 and RESP3; `direct` runs a command on the server that holds
/// the key `{m}`.
async fn own_connection_over(backend: &str, direct: impl Fn(&[&str]) -> String) {
    let config = format!("{backend}\n[[namespaces]]\nname = \"main\"\nbackend = \"main\"\n");
    let proxy = Proxy::start(&config).await;
    for way in [WAYS[2], WAYS[3]] {
        let mut c = client(&proxy.addr, way).await;
        direct(&["ZADD", "{m}message", "1", "job-1"]);
        let popped = text(&reply_within_cmd(&mut c, &["BZPOPMIN", "{m}message", "0"]).await);
        assert!(popped.contains("job-1"), "{way:?}: {popped}");
        direct(&["SET", "{m}a", "message"]);
        assert_eq!(c.command(&["MULTI"]).await, b"+OK\r\n");
        assert_eq!(c.command(&["GET", "{m}a"]).await, b"+QUEUED\r\n");
        assert_eq!(c.command(&["INCR", "{m}n"]).await, b"+QUEUED\r\n");
        let exec = text(&reply_within_cmd(&mut c, &["EXEC"]).await);
        assert!(
            exec.starts_with("*2\r\n$7\r\nmessage\r\n:"),
            "{way:?}: {exec}"
        );
        let mut subscriber = client(&proxy.addr, way).await;
        let confirmed = text(&subscriber.command(&["SUBSCRIBE", "news"]).await);
        assert!(confirmed.contains("subscribe"), "{confirmed}");
        // Subscribed once confirmed: a cluster node delivers what another published.
        direct(&["PUBLISH", "news", "over-tls"]);
        let message = text(&reply_within(&mut subscriber, Duration::from_secs(10), "news").await);
        assert!(message.contains("over-tls"), "{way:?}: {message}");
    }
    proxy.stop().await;
}

async fn reply_within_cmd(conn: &mut RawConn, args: &[&str]) -> Vec<u8> {
    conn.send(&encode_str(args)).await;
    reply_within(conn, Duration::from_secs(10), args[0]).await
}

/// A client's own connection and Pub/Sub over TLS through Sentinel (to the sentinels and the
/// primary they name) and through a Cluster (to each node, slot map included).
#[tokio::test(flavor = "multi_thread")]
async fn sentinel_and_cluster_backends_speak_tls() {
    use crate::support::cluster::Cluster;
    use crate::support::sentinel::Sentinel;
    use crate::support::tls::{tls_args, tls_conf, tls_redis_with};
    let certs = Certs::new();
    let ca = certs.path("ca.pem").display().to_string();

    let (primary, primary_tls) = tls_redis_with(&certs, &["--tls-replication", "yes"]);
    let sentinel_tls = free_port();
    let sentinel = Sentinel::start_with(primary_tls, &tls_conf(&certs, sentinel_tls));
    until(
        Duration::from_secs(15),
        "the sentinel to name the primary",
        || sentinel.names_master(primary_tls),
    )
    .await;
    let backend = format!(
        "[backends.main]\nkind = \"sentinel\"\nmaster_name = \"mymaster\"\nsentinels = [\"127.0.0.1:{sentinel_tls}\"]\ntls_ca = \"{ca}\"\nresponse_timeout = \"2s\"\n"
    );
    own_connection_over(&backend, |args| primary.cmd(args)).await;

    let tls_ports = std::sync::Mutex::new(Vec::new());
    let cluster = Cluster::start_with(|| {
        let port = free_port();
        tls_ports.lock().unwrap().push(port);
        let mut args = tls_args(&certs, port);
        args.extend(["--tls-cluster".to_string(), "yes".to_string()]);
        args
    });
    let seed = tls_ports.lock().unwrap()[0];
    let backend = format!(
        "[backends.main]\nkind = \"cluster\"\nnodes = [\"127.0.0.1:{seed}\"]\ntls = true\ntls_ca = \"{ca}\"\nresponse_timeout = \"2s\"\n"
    );
    let owner = cluster.primary_of("{m}");
    own_connection_over(&backend, |args| cluster.nodes[owner].cmd(args)).await;
}
