//! Failures of a real Redis under holdfast: killed and restarted, down past the budget, a
//! reply lost after the request was applied (a relay of our own), and a write turned away by
//! a replica until it is promoted.

use crate::support;

use crate::support::*;
use std::time::Duration;
use tokio::time::{sleep, timeout, Instant};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Several connections, each sequential on its own keys, through a SIGKILL of Redis and a
/// restart 3 s later: every idempotent request completes with the right reply, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_and_restarted_is_a_slow_reply_not_an_error() {
    // appendfsync always: what Redis acknowledged survives its SIGKILL, so a wrong reply
    // after the restart can only be holdfast's fault.
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let proxy = Proxy::start(&one_backend(&redis.url(), "killed", "")).await;
    let stop_at = Instant::now() + Duration::from_secs(7);
    let mut clients = Vec::new();
    for client in 0..4 {
        let addr = proxy.addr.clone();
        clients.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let mut done = 0u32;
            while Instant::now() < stop_at {
                let key = format!("k{client}");
                let value = done.to_string();
                // Pipelined: SET then GET; the GET must see this SET, not an older one.
                let mut batch = encode_str(&["SET", &key, &value]);
                batch.extend(encode_str(&["GET", &key]));
                batch.extend(encode_str(&["MGET", &key, "absent"]));
                conn.send(&batch).await;
                let replies = conn.read_replies(3).await;
                assert_eq!(
                    text(&replies[0]),
                    "+OK\r\n",
                    "client {client} request {done}"
                );
                assert_eq!(
                    text(&replies[1]),
                    format!("${}\r\n{value}\r\n", value.len()),
                    "client {client} request {done}"
                );
                assert_eq!(
                    text(&replies[2]),
                    format!("*2\r\n${}\r\n{value}\r\n$-1\r\n", value.len()),
                    "client {client} request {done}"
                );
                done += 1;
            }
            done
        }));
    }
    sleep(Duration::from_secs(1)).await;
    redis.kill();
    sleep(Duration::from_secs(3)).await;
    redis.restart();
    let mut total = 0;
    for client in clients {
        total += timeout(Duration::from_secs(60), client)
            .await
            .expect("clients finish")
            .expect("no client saw a wrong reply");
    }
    assert!(total > 40, "only {total} rounds");
    // The outage was held, not passed through: retries happened and nothing gave up.
    let retries = proxy
        .metric(r#"holdfast_retries_total{holdfast_namespace="killed""#)
        .await;
    assert!(retries >= 4.0, "retries {retries}");
    assert_eq!(
        proxy
            .metric(r#"holdfast_budget_exhaustions_total{holdfast_namespace="killed""#)
            .await,
        0.0
    );
    proxy.stop().await;
}

/// Down for longer than a small budget: a clear UNAVAILABLE error after the budget, not a
/// hang; served again as soon as Redis is back.
#[tokio::test(flavor = "multi_thread")]
async fn an_outage_past_the_budget_fails_cleanly_and_recovers() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(
        &redis.url(),
        "outage",
        "acquire_timeout = \"500ms\"\n[namespaces.retry]\nmax_attempts = 4\nmin_delay = \"100ms\"\nmax_delay = \"200ms\"\njitter = 0.0\n",
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    redis.kill();
    let started = Instant::now();
    let reply = text(&conn.command(&["GET", "k"]).await);
    let took = started.elapsed();
    assert!(reply.starts_with("-UNAVAILABLE not applied"), "{reply}");
    assert!(reply.contains("4 attempts"), "{reply}");
    assert!(reply.contains("namespace 'outage'"), "{reply}");
    // Backoff 100+200+200 ms, plus at most an acquire timeout per attempt.
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    // A non-idempotent command is just as safe to retry when nothing was sent.
    let reply = text(&conn.command(&["INCR", "n"]).await);
    assert!(reply.starts_with("-UNAVAILABLE"), "{reply}");

    redis.restart();
    let back = Instant::now();
    let reply = text(&conn.command(&["SET", "k", "again"]).await);
    assert_eq!(reply, "+OK\r\n");
    assert!(
        back.elapsed() < Duration::from_secs(2),
        "{:?}",
        back.elapsed()
    );
    // The GET and the INCR gave up, nothing sent; by command, in the requests' outcomes.
    assert_eq!(
        proxy
            .metric(r#"holdfast_requests_total{holdfast_namespace="outage",command="GET",outcome="unavailable"}"#)
            .await,
        1.0
    );
    assert_eq!(
        proxy
            .metric(r#"holdfast_budget_exhaustions_total{holdfast_namespace="outage",class="not_attempted"}"#)
            .await,
        2.0
    );
    proxy.stop().await;
}

/// Waits until the pinned backend connection has been re-dialled after a dropped one, so the
/// relay's next one-shot fault hits the test's command and not the dial's handshake.
async fn settle(conn: &mut RawConn) {
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(conn.command(&["EXISTS", "counter"]).await, b":1\r\n");
    sleep(Duration::from_millis(200)).await;
}

/// The relay applies the request and drops the connection before the reply: a Transient
/// failure. INCR must not be sent again (it answers INDOUBT, and counts once); GET and SET
/// are retried and answer correctly.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_reply_is_retried_only_for_idempotent_commands() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let url = format!("redis://{}", relay.addr());
    let proxy = Proxy::start(&one_backend(&url, "lossy", "")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "counter", "10"]).await, b"+OK\r\n");

    // Armed for the command itself: the second pool connection may still be dialling.
    relay.drop_after_request_with(b"INCR");
    let reply = text(&conn.command(&["INCR", "counter"]).await);
    assert_eq!(relay.fired(), 1);
    assert!(
        reply.starts_with("-INDOUBT may have been applied"),
        "{reply}"
    );
    assert!(reply.contains("1 attempt "), "{reply}");
    // Applied exactly once: the relay let it through, holdfast did not repeat it.
    assert_eq!(redis.cmd(&["GET", "counter"]), "$2\r\n11\r\n");

    settle(&mut conn).await;
    relay.drop_after_request_with(b"GET\r\n$7\r\ncounter");
    assert_eq!(conn.command(&["GET", "counter"]).await, b"$2\r\n11\r\n");
    assert_eq!(relay.fired(), 2);

    settle(&mut conn).await;
    relay.drop_after_request_with(b"other");
    assert_eq!(conn.command(&["SET", "other", "x"]).await, b"+OK\r\n");
    assert_eq!(relay.fired(), 3);
    assert_eq!(redis.cmd(&["GET", "other"]), "$1\r\nx\r\n");

    // The GET and the SET were retried; the INCR was not (INDOUBT).
    assert_eq!(
        proxy
            .metric(r#"holdfast_retries_total{holdfast_namespace="lossy",class="transient"}"#)
            .await,
        2.0
    );
    assert_eq!(
        proxy
            .metric(r#"holdfast_requests_total{holdfast_namespace="lossy",command="INCR",outcome="indoubt"}"#)
            .await,
        1.0
    );
    assert_eq!(
        proxy
            .metric(
                r#"holdfast_budget_exhaustions_total{holdfast_namespace="lossy",class="transient"}"#
            )
            .await,
        1.0
    );
    proxy.stop().await;
}

/// A namespace pointed at a replica: INCR is turned away (`READONLY`, nothing executed), held,
/// and applied once when the replica is promoted.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_turned_away_by_a_replica_is_held_until_promotion() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    assert_eq!(master.cmd(&["SET", "c", "5"]), "+OK\r\n");
    let synced = Instant::now();
    while replica.cmd(&["GET", "c"]) != "$1\r\n5\r\n" {
        assert!(
            synced.elapsed() < Duration::from_secs(10),
            "replica never synced"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let proxy = Proxy::start(&one_backend(&replica.url(), "promote", "")).await;
    let addr = proxy.addr.clone();
    let incr = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        conn.command(&["INCR", "c"]).await
    });
    sleep(Duration::from_millis(1500)).await;
    assert!(!incr.is_finished(), "INCR must be held, not answered");
    assert_eq!(
        proxy
            .metric(r#"holdfast_held_requests{holdfast_namespace="promote"}"#)
            .await,
        1.0
    );
    assert_eq!(
        replica.cmd(&["GET", "c"]),
        "$1\r\n5\r\n",
        "nothing applied while held"
    );

    assert_eq!(replica.cmd(&["REPLICAOF", "NO", "ONE"]), "+OK\r\n");
    let reply = timeout(Duration::from_secs(30), incr)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text(&reply), ":6\r\n");
    assert_eq!(replica.cmd(&["GET", "c"]), "$1\r\n6\r\n", "applied once");
    assert_eq!(
        proxy
            .metric(r#"holdfast_held_requests{holdfast_namespace="promote"}"#)
            .await,
        0.0
    );
    let retries = proxy
        .metric(r#"holdfast_retries_total{holdfast_namespace="promote",class="not_attempted"}"#)
        .await;
    assert!(retries >= 1.0, "{retries}");
    proxy.stop().await;
}

/// With nothing failing, the retry metrics stay at zero while the request counters move.
#[tokio::test(flavor = "multi_thread")]
async fn retry_metrics_stay_at_zero_when_nothing_fails() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "calm", "")).await;
    let mut conn = proxy.connect().await;
    for i in 0..50 {
        let key = format!("k{i}");
        assert_eq!(conn.command(&["SET", &key, "v"]).await, b"+OK\r\n");
    }
    assert_eq!(
        proxy
            .metric(
                r#"holdfast_requests_total{holdfast_namespace="calm",command="SET",outcome="ok"}"#
            )
            .await,
        50.0
    );
    assert_eq!(
        proxy
            .metric(r#"holdfast_retries_total{holdfast_namespace="calm""#)
            .await,
        0.0
    );
    assert_eq!(
        proxy
            .metric(r#"holdfast_dispatches_total{holdfast_namespace="calm",class="not_attempted""#)
            .await,
        0.0
    );
    assert_eq!(
        proxy
            .metric(r#"holdfast_budget_exhaustions_total{holdfast_namespace="calm""#)
            .await,
        0.0
    );
    proxy.stop().await;
}

/// Backend connections that dropped while idle are dialled again, not written to: after a
/// restart with no traffic in between, the first request on every pooled connection answers
/// at once.
#[tokio::test(flavor = "multi_thread")]
async fn connections_dropped_while_idle_are_redialled() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "idle", "")).await;
    // Two clients: with pool_size 2 they are pinned to both backend connections.
    let mut a = proxy.connect().await;
    let mut b = proxy.connect().await;
    assert_eq!(a.command(&["PING"]).await, b"+PONG\r\n");
    sleep(Duration::from_millis(300)).await;
    redis.kill();
    redis.restart();
    for conn in [&mut a, &mut b] {
        let started = Instant::now();
        assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        proxy
            .metric(r#"holdfast_retries_total{holdfast_namespace="idle""#)
            .await,
        0.0
    );
    proxy.stop().await;
}

/// A backend that stops answering: a command in flight is answered when its reply timeout is
/// over, not later (the link looks for expired replies by the earliest deadline, and while
/// idle by the reply timeout), and a write that may have gone out is not sent again.
#[tokio::test(flavor = "multi_thread")]
async fn a_reply_that_never_comes_is_answered_when_its_timeout_is_over() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "redis://{}"
pool_size = 1
response_timeout = "400ms"
[[namespaces]]
name = "silent"
backend = "main"
"#,
        relay.addr()
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "counter", "10"]).await, b"+OK\r\n");
    // Idle for more than a timeout first: the link's timer runs on its own schedule then.
    sleep(Duration::from_millis(700)).await;
    relay.blackhole();
    let asked = Instant::now();
    let reply = text(&conn.command(&["INCR", "counter"]).await);
    let took = asked.elapsed();
    assert!(
        reply.starts_with("-INDOUBT may have been applied"),
        "{reply}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(900),
        "answered after {took:?}"
    );
    relay.pass();
}

/// Waits until the relay's armed fault has fired.
async fn fired(relay: &Relay) {
    let waited = Instant::now();
    while relay.fired() == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the fault never fired"
        );
        sleep(Duration::from_millis(5)).await;
    }
}

/// A namespace's budget of three attempts `min_delay` apart: room for the test to act
/// between a lost reply and its retry.
fn three_attempts(min_delay: &str) -> String {
    format!("acquire_timeout = \"1s\"\n[namespaces.retry]\nmin_delay = \"{min_delay}\"\nmax_attempts = 3")
}

/// A client's `EVALSHA` of a script Redis does not have is answered `NOSCRIPT` at once: every
/// client library's script helper sends `EVAL` on it. Held, it would stall every scripted
/// call after a Redis restart for the whole retry budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_clients_evalsha_of_a_script_redis_lacks_is_answered_noscript_at_once() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "scripts", "")).await;
    let mut conn = proxy.connect().await;
    let sha = "ffffffffffffffffffffffffffffffffffffffff";
    let reply = timeout(
        Duration::from_secs(2),
        conn.command(&["EVALSHA", sha, "1", "k"]),
    )
    .await
    .expect("EVALSHA of an unknown script was held");
    assert!(text(&reply).starts_with("-NOSCRIPT"), "{}", text(&reply));
    // The library's fallback works, and its EVALSHA afterwards is served.
    let eval = conn.command(&["EVAL", "return 7", "1", "k"]).await;
    assert_eq!(eval, b":7\r\n");
    proxy.stop().await;
}

/// A write applied, its reply lost, and the retry answered an error (`OOM`, Redis's "not
/// applied"): the client hears `INDOUBT` naming that error, never the bare error.
#[tokio::test(flavor = "multi_thread")]
async fn an_error_answered_to_a_retry_after_a_lost_reply_is_indoubt() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let url = format!("redis://{}", relay.addr());
    let proxy = Proxy::start(&one_backend(&url, "oom", &three_attempts("700ms"))).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    sleep(Duration::from_millis(200)).await;
    relay.drop_after_request_with(b"ck:k");
    let addr = proxy.addr.clone();
    let set = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        text(&conn.command(&["SET", "ck:k", "v"]).await)
    });
    fired(&relay).await;
    // Before the retry (700 ms later): the server now refuses writes.
    assert_eq!(redis.cmd(&["CONFIG", "SET", "maxmemory", "1"]), "+OK\r\n");
    let reply = set.await.expect("the client task");
    assert!(
        reply.starts_with("-INDOUBT may have been applied"),
        "{reply}"
    );
    assert!(reply.contains("OOM"), "{reply}");
    assert_eq!(redis.cmd(&["CONFIG", "SET", "maxmemory", "0"]), "+OK\r\n");
    assert_eq!(redis.cmd(&["GET", "ck:k"]), "$1\r\nv\r\n");
    proxy.stop().await;
}

/// A pipeline whose writes both reached Redis, both replies lost, then connections refused:
/// each write that may have been applied answers `INDOUBT`, the one behind the first too (it
/// was sent again at once, but its first dispatch still counts).
#[tokio::test(flavor = "multi_thread")]
async fn every_pipelined_write_that_may_have_landed_is_indoubt_after_the_budget() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let url = format!("redis://{}", relay.addr());
    let proxy = Proxy::start(&one_backend(&url, "pa", &three_attempts("500ms"))).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    sleep(Duration::from_millis(200)).await;
    relay.drop_after_request_with(b"pa:a");
    let mut pipeline = encode_str(&["SET", "pa:a", "1"]);
    pipeline.extend(encode_str(&["SETNX", "pa:lock", "x"]));
    conn.send(&pipeline).await;
    fired(&relay).await;
    relay.refuse();
    let replies: Vec<String> = conn.read_replies(2).await.iter().map(|r| text(r)).collect();
    relay.pass();
    assert_eq!(
        redis.cmd(&["GET", "pa:lock"]),
        "$1\r\nx\r\n",
        "SETNX reached Redis"
    );
    for reply in &replies {
        assert!(
            reply.starts_with("-INDOUBT may have been applied"),
            "{replies:?}"
        );
    }
    proxy.stop().await;
}

/// `GETEX … PX n` retried after its key expired answers nil for a value the first dispatch
/// returned: it is not repeated after a lost reply (`INDOUBT`), except in exact mode, whose
/// token answers the first application's reply.
#[tokio::test(flavor = "multi_thread")]
async fn getex_with_an_expiry_is_not_repeated_after_a_lost_reply() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let url = format!("redis://{}", relay.addr());
    for (mode, want) in [("fast", "-INDOUBT"), ("exact", "$1\r\nv\r\n")] {
        let config = one_backend(&url, "getex", "").replace("\"fast\"", &format!("\"{mode}\""));
        let proxy = Proxy::start(&config).await;
        let mut conn = proxy.connect().await;
        assert_eq!(conn.command(&["SET", "ek:k", "v"]).await, b"+OK\r\n");
        sleep(Duration::from_millis(200)).await;
        relay.drop_after_request_with(b"GETEX");
        let reply = text(&conn.command(&["GETEX", "ek:k", "PX", "150"]).await);
        assert!(relay.fired() >= 1, "{mode}: the fault never fired");
        assert!(reply.starts_with(want), "{mode}: {reply}");
        relay.pass();
        proxy.stop().await;
    }
}

/// A backend that turns holdfast's connection away at accept (`-ERR max number of clients
/// reached`, read as the answer to `AUTH`) is an outage, not a wrong password: the request is
/// held until a connection is free, then served.
#[tokio::test(flavor = "multi_thread")]
async fn a_backend_at_its_client_limit_holds_the_request_until_a_connection_is_free() {
    let redis = RedisServer::start_with(&["--maxclients", "1", "--requirepass", "pw"]);
    // The only client slot, taken before holdfast dials. The harness's readiness probe has
    // closed its connection, but Redis may not have seen the close yet: until it has, the
    // occupant is the one turned away, so it tries again.
    let waited = Instant::now();
    let occupant = loop {
        let mut occupant = RawConn::connect(&redis.addr()).await;
        occupant.send(&encode_str(&["AUTH", "pw"])).await;
        if occupant.read_reply().await == b"+OK\r\n" {
            break occupant;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the probe's slot was never freed"
        );
        sleep(Duration::from_millis(20)).await;
    };
    let url = format!("redis://:pw@{}", redis.addr());
    let extra = "acquire_timeout = \"1s\"\n[namespaces.retry]\nmin_delay = \"100ms\"\nmax_delay = \"300ms\"";
    let proxy = Proxy::start(&one_backend(&url, "full", extra)).await;
    let mut conn = proxy.connect().await;
    let freed = tokio::spawn(async move {
        sleep(Duration::from_millis(1500)).await;
        drop(occupant);
    });
    let started = Instant::now();
    let reply = text(&conn.command(&["GET", "nothing"]).await);
    assert_eq!(reply, "$-1\r\n");
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "it was never held"
    );
    freed.await.expect("the occupant task");
    proxy.stop().await;
}

/// A client that closes while its command is held gets nothing more: the command stops
/// (nothing more is dispatched for it), it leaves the held gauge and its connection slot, and
/// shutdown does not wait for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_request_does_not_outlive_its_client() {
    // Nothing listens there: every dial is refused, and the request is held.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let proxy = Proxy::start(&one_backend(&url, "gone", "")).await;
    let held = r#"holdfast_held_requests{holdfast_namespace="gone"}"#;
    let mut conn = proxy.connect().await;
    conn.send(&encode_str(&["GET", "k"])).await;
    let waited = Instant::now();
    while proxy.metric(held).await < 1.0 {
        assert!(waited.elapsed() < Duration::from_secs(5), "GET never held");
        sleep(Duration::from_millis(20)).await;
    }
    drop(conn);
    // This proxy's own client list, not the process-wide connections gauge: other tests in
    // this binary have clients of their own.
    let mut probe = proxy.connect().await;
    let waited = Instant::now();
    while proxy.metric(held).await > 0.0
        || text(&probe.command(&["CLIENT", "LIST"]).await)
            .lines()
            .filter(|line| line.starts_with("id="))
            .count()
            > 1
    {
        assert!(
            waited.elapsed() < Duration::from_secs(2),
            "the request outlived its client"
        );
        sleep(Duration::from_millis(20)).await;
    }
    drop(probe);
    // Nothing left to drain: shutdown ends at once, not after the grace period (30 s).
    timeout(Duration::from_secs(3), proxy.stop())
        .await
        .expect("shutdown waited for a client that was gone");
}

/// A backend that can never work as configured is answered at once with an error that says
/// why, not held for the whole retry budget: a `cluster` backend on a Redis without cluster
/// support, a `sentinel` backend whose master name the sentinel does not monitor, and one
/// whose "sentinel" is a plain Redis. The same Redis through a `redis` backend is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_backend_that_cannot_work_as_configured_is_answered_at_once() {
    let redis = RedisServer::start();
    let sentinel = support::sentinel::Sentinel::start(redis.port());
    let found = Instant::now();
    while !sentinel.names_master(redis.port()).await {
        assert!(found.elapsed() < Duration::from_secs(10), "no sentinel");
        sleep(Duration::from_millis(50)).await;
    }
    let proxy = Proxy::start(&format!(
        "[backends.plain]\nkind = \"redis\"\nurl = \"{url}\"\n\
         [backends.notcluster]\nkind = \"cluster\"\nnodes = [\"{addr}\"]\n\
         [backends.misnamed]\nkind = \"sentinel\"\nmaster_name = \"nosuch\"\nsentinels = [\"{sentinel}\"]\n\
         [backends.nosentinel]\nkind = \"sentinel\"\nmaster_name = \"mymaster\"\nsentinels = [\"{addr}\"]\n\
         [[namespaces]]\nname = \"c\"\nbackend = \"notcluster\"\nprefixes = [\"c:\"]\n\
         [[namespaces]]\nname = \"m\"\nbackend = \"misnamed\"\nprefixes = [\"m:\"]\n\
         [[namespaces]]\nname = \"n\"\nbackend = \"nosentinel\"\nprefixes = [\"n:\"]\n\
         [[namespaces]]\nname = \"default\"\nbackend = \"plain\"\n",
        url = redis.url(),
        addr = redis.addr(),
        sentinel = sentinel.addr(),
    ))
    .await;
    let mut conn = proxy.connect().await;
    // The backends' first look at their servers, as at any start.
    sleep(Duration::from_millis(500)).await;
    for (key, why) in [
        ("c:k", "CLUSTER SLOTS"),
        ("m:k", "no sentinel monitors a master named 'nosuch'"),
        ("n:k", "no sentinel monitors a master named 'mymaster'"),
    ] {
        let asked = Instant::now();
        let reply = text(&conn.command(&["GET", key]).await);
        assert!(
            reply.starts_with("-ERR ") && reply.contains(why),
            "{key}: {reply}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{key}: held {:?}",
            asked.elapsed()
        );
    }
    assert_eq!(text(&conn.command(&["SET", "k", "v"]).await), "+OK\r\n");
    assert_eq!(redis.cmd(&["GET", "k"]), "$1\r\nv\r\n");
    proxy.stop().await;
}

/// A write given up on while Redis had stopped reading (frozen, its socket buffers full) never
/// reaches it later: the link is reset, so what the kernel still held unsent is dropped with
/// it, and nothing of it lands after what the client sends next.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_given_up_on_never_lands_when_the_server_wakes() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "{}"
pool_size = 1
response_timeout = "500ms"
[[namespaces]]
name = "frozen"
backend = "main"
"#,
        redis.url()
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "x"]).await, b"+OK\r\n");
    redis.pause();
    // Far more than the loopback socket buffers hold: the link's write blocks mid-command.
    let big = "a".repeat(48 << 20);
    conn.send(&support::resp::encode_str(&["APPEND", "k", &big]))
        .await;
    let reply = text(
        &timeout(Duration::from_secs(20), conn.read_reply())
            .await
            .expect("answered"),
    );
    assert!(
        reply.starts_with("-INDOUBT"),
        "{}",
        &reply[..reply.len().min(300)]
    );
    redis.resume();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(redis.cmd(&["STRLEN", "k"]), ":1\r\n");
    assert_eq!(text(&conn.command(&["GET", "k"]).await), "$1\r\nx\r\n");
    proxy.stop().await;
}
