//! Reply modes with real backends and lost replies: a relay of our own between holdfast and
//! Redis (or PostgreSQL) lets a request through and drops the connection before the reply
//! comes back, so the command is applied and holdfast never hears of it.
//!
//! - settled: the reply is the first application's (DEL answers 1, SETNX 1, XADD its id);
//!   a DEL of nothing dispatches nothing.
//! - exact: INCR, LPUSH, APPEND, HINCRBY through repeated lost replies apply once and
//!   answer the first application's reply.
//! - a dispatch the backend turned away (READONLY) is not counted as possibly applied.
//! - the token mechanism itself on each backend kind, SQLite included (in-process, so no
//!   relay can lose its replies).
//! - exact: blocking pops and group reads on PostgreSQL through lost `COMMIT` replies answer
//!   what they took, and a redis-py reliable queue loses no job to them.

#[allow(unused_imports)]
use crate::support;
use crate::support::*;

use bytes::Bytes;
use holdfast::backend::{Backend, Proto, Reply, Request};
use holdfast::config::{BackendConfig, Config, SqliteConfig};
use std::time::Duration;
use tokio::time::{sleep, timeout, Instant};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// One namespace `ns` in `mode` on `backend`, with a short retry schedule (many quick
/// retries: the tests lose up to ten replies in a row).
fn config(backend: &str, ns: &str, mode: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "{mode}"
acquire_timeout = "1s"
[defaults.retry]
max_attempts = 20
min_delay = "10ms"
max_delay = "100ms"
[backends.main]
{backend}
[[namespaces]]
name = "{ns}"
backend = "main"
"#
    )
}

fn redis_backend(url: &str) -> String {
    format!("kind = \"redis\"\nurl = \"{url}\"\npool_size = 1")
}

fn postgres_backend(addr: &str) -> String {
    format!("kind = \"postgres\"\nurl = \"postgres://holdfast@{addr}/holdfast\"\npool_size = 2")
}

async fn metric(proxy: &Proxy, series: &str) -> f64 {
    proxy.metric(series).await
}

/// Waits until holdfast's backend connection is re-dialled after a dropped one, so the next
/// armed fault meets the test's command and not a handshake.
async fn settle_connection(conn: &mut RawConn) {
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    sleep(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn settled_on_redis_answers_for_the_first_application() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&config(
        &redis_backend(&format!("redis://{}", relay.addr())),
        "settled_redis",
        "settled",
    ))
    .await;
    let mut conn = proxy.connect().await;

    // DEL of an existing key: the lost reply said 1; the retry found nothing and said 0.
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    relay.drop_after_request_with(b"DEL");
    assert_eq!(text(&conn.command(&["DEL", "k"]).await), ":1\r\n");
    assert_eq!(relay.fired(), 1);
    assert_eq!(redis.cmd(&["EXISTS", "k"]), ":0\r\n");

    // DEL of a key that never existed: answered from the read, nothing dispatched.
    let dels = r#"holdfast_dispatches_total{holdfast_namespace="settled_redis",backend="main",command="DEL",class="ok"}"#;
    let before = metric(&proxy, dels).await;
    relay.drop_after_request_with(b"DEL");
    assert_eq!(text(&conn.command(&["DEL", "never"]).await), ":0\r\n");
    assert_eq!(metric(&proxy, dels).await, before, "a DEL was dispatched");
    assert_eq!(relay.fired(), 1, "a DEL reached the backend");
    relay.pass();

    // SETNX: its own write answers 1.
    settle_connection(&mut conn).await;
    relay.drop_after_request_with(b"SETNX");
    assert_eq!(
        text(&conn.command(&["SETNX", "nx", "mine"]).await),
        ":1\r\n"
    );
    assert_eq!(relay.fired(), 2);
    // Another client's value: 0, and found by the read before any dispatch.
    settle_connection(&mut conn).await;
    assert_eq!(redis.cmd(&["SET", "taken", "theirs"]), "+OK\r\n");
    relay.drop_after_request_with(b"SETNX");
    assert_eq!(
        text(&conn.command(&["SETNX", "taken", "mine"]).await),
        ":0\r\n"
    );
    assert_eq!(relay.fired(), 2, "a SETNX of a key already there was sent");
    assert_eq!(redis.cmd(&["GET", "taken"]), "$6\r\ntheirs\r\n");

    // XADD with an explicit id: answers the id, not "equal or smaller".
    settle_connection(&mut conn).await;
    relay.drop_after_request_with(b"XADD");
    assert_eq!(
        text(&conn.command(&["XADD", "s", "5-1", "f", "v"]).await),
        "$3\r\n5-1\r\n"
    );
    assert_eq!(relay.fired(), 3);
    assert_eq!(redis.cmd(&["XLEN", "s"]), ":1\r\n");

    // SADD and HDEL settle per member.
    settle_connection(&mut conn).await;
    assert_eq!(conn.command(&["SADD", "set", "b"]).await, b":1\r\n");
    relay.drop_after_request_with(b"SADD");
    assert_eq!(
        text(&conn.command(&["SADD", "set", "a", "b", "c"]).await),
        ":2\r\n"
    );
    settle_connection(&mut conn).await;
    assert_eq!(
        conn.command(&["HSET", "h", "f", "1", "g", "2"]).await,
        b":2\r\n"
    );
    relay.drop_after_request_with(b"HDEL");
    assert_eq!(
        text(&conn.command(&["HDEL", "h", "f", "g", "nope"]).await),
        ":2\r\n"
    );
    assert_eq!(relay.fired(), 5);
    assert!(
        metric(
            &proxy,
            r#"holdfast_reply_corrections_total{holdfast_namespace="settled_redis",command="DEL",mode="settled"}"#
        )
        .await
            >= 1.0
    );
    proxy.stop().await;
}

/// The de-duplication idiom, "process message m1 once": `SETNX seen:m1 1` writes the same
/// value every time, so finding our value after a lost reply proves nothing. What was there
/// before the first dispatch decides, for every write-if-absent and for XADD's explicit id.
#[tokio::test(flavor = "multi_thread")]
async fn settled_never_claims_a_write_that_was_there_before_it() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&config(
        &redis_backend(&format!("redis://{}", relay.addr())),
        "dedup",
        "settled",
    ))
    .await;
    let mut conn = proxy.connect().await;
    for (setup, command, refused) in [
        (
            &["SET", "seen:m1", "1"][..],
            &["SETNX", "seen:m1", "1"][..],
            ":0\r\n",
        ),
        (
            &["SET", "seen:m2", "1"],
            &["SET", "seen:m2", "1", "NX"],
            "$-1\r\n",
        ),
        (
            &["HSET", "seen", "m3", "1"],
            &["HSETNX", "seen", "m3", "1"],
            ":0\r\n",
        ),
        (
            &["SET", "b", "2"],
            &["MSETNX", "a", "1", "b", "2"],
            ":0\r\n",
        ),
    ] {
        settle_connection(&mut conn).await;
        redis.cmd(setup);
        // Were it dispatched, the relay would apply it and lose the reply; the retry's
        // "not set" finds our value either way.
        relay.drop_after_request_with(command[0].as_bytes());
        assert_eq!(text(&conn.command(command).await), refused, "{command:?}");
        relay.pass();
    }
    assert_eq!(redis.cmd(&["EXISTS", "a"]), ":0\r\n", "MSETNX set a");
    // An entry at or above the id: Redis's own refusal, nothing appended.
    settle_connection(&mut conn).await;
    redis.cmd(&["XADD", "log", "7-0", "f", "v"]);
    relay.drop_after_request_with(b"XADD");
    assert_eq!(
        text(&conn.command(&["XADD", "log", "7-0", "f", "v"]).await),
        "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
    );
    relay.pass();
    assert_eq!(redis.cmd(&["XLEN", "log"]), ":1\r\n");
    proxy.stop().await;
}

/// MSETNX settles as SETNX does: its own write, whose reply was lost, answers 1.
#[tokio::test(flavor = "multi_thread")]
async fn settled_msetnx_answers_for_its_own_write_after_a_lost_reply() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&config(
        &redis_backend(&format!("redis://{}", relay.addr())),
        "msetnx",
        "settled",
    ))
    .await;
    let mut conn = proxy.connect().await;
    settle_connection(&mut conn).await;
    relay.drop_after_request_with(b"MSETNX");
    assert_eq!(
        text(&conn.command(&["MSETNX", "x", "1", "y", "2"]).await),
        ":1\r\n"
    );
    assert_eq!(relay.fired(), 1);
    assert_eq!(
        redis.cmd(&["MGET", "x", "y"]),
        "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fast_mode_counts_replies_that_may_under_count() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&config(
        &redis_backend(&format!("redis://{}", relay.addr())),
        "fast_redis",
        "fast",
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    relay.drop_after_request_with(b"DEL");
    // Fast mode answers for the retry: the key it deleted reads as 0.
    assert_eq!(text(&conn.command(&["DEL", "k"]).await), ":0\r\n");
    assert_eq!(
        metric(
            &proxy,
            r#"holdfast_uncertain_replies_total{holdfast_namespace="fast_redis",command="DEL"}"#
        )
        .await,
        1.0
    );
    proxy.stop().await;
}

/// Ten lost replies in a row, then one that arrives: applied once, answered once.
async fn exact_through_lost_replies(
    proxy: &Proxy,
    relay: &Relay,
    needle: &[u8],
    drops: usize,
    command: &[&str],
    want: &str,
) {
    let mut conn = proxy.connect().await;
    settle_connection(&mut conn).await;
    let before = relay.fired();
    relay.drop_requests_with(needle, drops);
    let reply = timeout(Duration::from_secs(30), conn.command(command))
        .await
        .unwrap_or_else(|_| panic!("{command:?} was not answered"));
    assert_eq!(text(&reply), want, "{command:?}");
    assert_eq!(relay.fired() - before, drops, "{command:?}: lost replies");
}

#[tokio::test(flavor = "multi_thread")]
async fn exact_on_redis_applies_once_through_lost_replies() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&config(
        &redis_backend(&format!("redis://{}", relay.addr())),
        "exact_redis",
        "exact",
    ))
    .await;
    exact_through_lost_replies(&proxy, &relay, b"INCR", 10, &["INCR", "n"], ":1\r\n").await;
    assert_eq!(redis.cmd(&["GET", "n"]), "$1\r\n1\r\n", "INCR applied once");
    exact_through_lost_replies(&proxy, &relay, b"LPUSH", 3, &["LPUSH", "l", "a"], ":1\r\n").await;
    assert_eq!(redis.cmd(&["LLEN", "l"]), ":1\r\n", "LPUSH applied once");
    exact_through_lost_replies(
        &proxy,
        &relay,
        b"APPEND",
        3,
        &["APPEND", "a", "xy"],
        ":2\r\n",
    )
    .await;
    assert_eq!(
        redis.cmd(&["GET", "a"]),
        "$2\r\nxy\r\n",
        "APPEND applied once"
    );
    exact_through_lost_replies(
        &proxy,
        &relay,
        b"HINCRBY",
        3,
        &["HINCRBY", "h", "f", "5"],
        ":5\r\n",
    )
    .await;
    assert_eq!(
        redis.cmd(&["HGET", "h", "f"]),
        "$1\r\n5\r\n",
        "HINCRBY applied once"
    );
    // A recorded error is replayed too; a reply of another type keeps its type (RESP2 here).
    exact_through_lost_replies(
        &proxy,
        &relay,
        b"ZINCRBY",
        2,
        &["ZINCRBY", "z", "1.5", "m"],
        "$3\r\n1.5\r\n",
    )
    .await;
    assert!(
        metric(
            &proxy,
            r#"holdfast_reply_corrections_total{holdfast_namespace="exact_redis",command="INCR",mode="exact"}"#
        )
        .await
            >= 1.0
    );
    // A script's keys follow a count: it runs as itself, not inside the exact script.
    let mut conn = proxy.connect().await;
    let eval = conn
        .command(&["EVAL", "return redis.call('INCR', KEYS[1])", "1", "n"])
        .await;
    assert_eq!(text(&eval), ":2\r\n");
    proxy.stop().await;
}

/// On SQLite (no relay can lose an in-process answer) settled mode still answers a DEL of
/// nothing from its read, without dispatching it.
#[tokio::test(flavor = "multi_thread")]
async fn settled_on_sqlite_answers_a_del_of_nothing_without_dispatching() {
    let dir = tempfile::tempdir().unwrap();
    let backend = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("settled.db").display()
    );
    let proxy = Proxy::start(&config(&backend, "settled_sqlite", "settled")).await;
    let mut conn = proxy.connect().await;
    let dels = r#"holdfast_dispatches_total{holdfast_namespace="settled_sqlite",backend="main",command="DEL",class="ok"}"#;
    assert_eq!(conn.command(&["DEL", "never"]).await, b":0\r\n");
    assert_eq!(metric(&proxy, dels).await, 0.0);
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["DEL", "k", "never"]).await, b":1\r\n");
    assert_eq!(metric(&proxy, dels).await, 1.0);
    proxy.stop().await;
}

/// A write turned away by a replica (READONLY: nothing executed) is held and applied at
/// promotion, and is not counted as possibly applied: no correction, no uncertain reply.
#[tokio::test(flavor = "multi_thread")]
async fn a_dispatch_turned_away_is_not_counted_as_possibly_applied() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    assert_eq!(master.cmd(&["SET", "sync", "1"]), "+OK\r\n");
    let synced = Instant::now();
    while replica.cmd(&["GET", "sync"]) != "$1\r\n1\r\n" {
        assert!(
            synced.elapsed() < Duration::from_secs(10),
            "replica never synced"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let proxy = Proxy::start(&config(
        &redis_backend(&replica.url()),
        "turned_away",
        "exact",
    ))
    .await;
    let addr = proxy.addr.clone();
    let incr = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        conn.command(&["INCR", "c"]).await
    });
    sleep(Duration::from_millis(300)).await;
    assert_eq!(replica.cmd(&["REPLICAOF", "NO", "ONE"]), "+OK\r\n");
    let reply = timeout(Duration::from_secs(30), incr)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text(&reply), ":1\r\n");
    let turned_away = metric(
        &proxy,
        r#"holdfast_retries_total{holdfast_namespace="turned_away",class="not_attempted"}"#,
    )
    .await;
    assert!(turned_away >= 1.0, "the INCR was never turned away");
    assert_eq!(
        metric(
            &proxy,
            r#"holdfast_reply_corrections_total{holdfast_namespace="turned_away",command="INCR",mode="exact"}"#
        )
        .await,
        0.0
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn settled_and_exact_on_postgres_through_lost_commits() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let settled = Proxy::start(&config(
        &postgres_backend(&relay.addr()),
        "settled_pg",
        "settled",
    ))
    .await;
    let mut conn = settled.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    // The COMMIT goes through and its answer is lost.
    relay.drop_after_request_with(b"COMMIT");
    assert_eq!(text(&conn.command(&["DEL", "k"]).await), ":1\r\n");
    assert_eq!(relay.fired(), 1);
    assert_eq!(conn.command(&["EXISTS", "k"]).await, b":0\r\n");
    relay.drop_after_request_with(b"COMMIT");
    assert_eq!(
        text(&conn.command(&["SETNX", "nx", "mine"]).await),
        ":1\r\n"
    );
    relay.drop_after_request_with(b"COMMIT");
    assert_eq!(
        text(&conn.command(&["XADD", "s", "7-1", "f", "v"]).await),
        "$3\r\n7-1\r\n"
    );
    assert_eq!(relay.fired(), 3);
    settled.stop().await;

    let exact = Proxy::start(&config(
        &postgres_backend(&relay.addr()),
        "exact_pg",
        "exact",
    ))
    .await;
    exact_through_lost_replies(&exact, &relay, b"COMMIT", 10, &["INCR", "n"], ":1\r\n").await;
    exact_through_lost_replies(&exact, &relay, b"COMMIT", 3, &["LPUSH", "l", "a"], ":1\r\n").await;
    exact_through_lost_replies(
        &exact,
        &relay,
        b"COMMIT",
        3,
        &["APPEND", "a", "xy"],
        ":2\r\n",
    )
    .await;
    exact_through_lost_replies(
        &exact,
        &relay,
        b"COMMIT",
        3,
        &["HINCRBY", "h", "f", "5"],
        ":5\r\n",
    )
    .await;
    let mut conn = exact.connect().await;
    assert_eq!(
        conn.command(&["GET", "n"]).await,
        b"$1\r\n1\r\n",
        "INCR applied once"
    );
    assert_eq!(
        conn.command(&["LLEN", "l"]).await,
        b":1\r\n",
        "LPUSH applied once"
    );
    assert_eq!(
        conn.command(&["GET", "a"]).await,
        b"$2\r\nxy\r\n",
        "APPEND applied once"
    );
    assert_eq!(
        conn.command(&["HGET", "h", "f"]).await,
        b"$1\r\n5\r\n",
        "HINCRBY applied once"
    );
    exact.stop().await;
}

/// Exact mode covers blocking commands on SQL: a pop (or group read) whose `COMMIT` went
/// through and whose reply was lost answers, on the retry, what the first take took; the
/// source loses exactly one element, and nothing is delivered twice.
#[tokio::test(flavor = "multi_thread")]
async fn exact_blocking_pops_on_postgres_answer_what_they_took_through_lost_commits() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let exact = Proxy::start(&config(
        &postgres_backend(&relay.addr()),
        "exact_blocking",
        "exact",
    ))
    .await;
    let mut conn = exact.connect().await;
    assert_eq!(
        text(&conn.command(&["RPUSH", "src", "a", "b", "c"]).await),
        ":3\r\n"
    );
    assert_eq!(
        text(&conn.command(&["ZADD", "z", "1", "one", "2", "two"]).await),
        ":2\r\n"
    );
    assert_eq!(
        text(
            &conn
                .command(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"])
                .await
        ),
        "+OK\r\n"
    );
    assert_eq!(
        text(&conn.command(&["XADD", "s", "5-1", "f", "v"]).await),
        "$3\r\n5-1\r\n"
    );
    exact_through_lost_replies(
        &exact,
        &relay,
        b"COMMIT",
        1,
        &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "5"],
        "$1\r\na\r\n",
    )
    .await;
    exact_through_lost_replies(
        &exact,
        &relay,
        b"COMMIT",
        3,
        &["BRPOPLPUSH", "src", "dst", "0"],
        "$1\r\nc\r\n",
    )
    .await;
    exact_through_lost_replies(
        &exact,
        &relay,
        b"COMMIT",
        2,
        &["BZPOPMIN", "z", "5"],
        "*3\r\n$1\r\nz\r\n$3\r\none\r\n$1\r\n1\r\n",
    )
    .await;
    exact_through_lost_replies(
        &exact,
        &relay,
        b"COMMIT",
        2,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "5000",
            "STREAMS",
            "s",
            ">",
        ],
        "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    )
    .await;
    let mut conn = exact.connect().await;
    let range = |key: &'static str| ["LRANGE", key, "0", "-1"];
    assert_eq!(
        text(&conn.command(&range("src")).await),
        "*1\r\n$1\r\nb\r\n",
        "the source lost exactly the two taken"
    );
    assert_eq!(
        text(&conn.command(&range("dst")).await),
        "*2\r\n$1\r\nc\r\n$1\r\na\r\n",
        "BRPOPLPUSH pushes at the head"
    );
    assert_eq!(text(&conn.command(&["ZCARD", "z"]).await), ":1\r\n");
    let pending = text(&conn.command(&["XPENDING", "s", "g"]).await);
    assert!(pending.starts_with("*4\r\n:1\r\n"), "{pending}");
    // Delivered once: nothing new for the group.
    assert_eq!(
        text(
            &conn
                .command(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"])
                .await
        ),
        "*-1\r\n"
    );
    exact.stop().await;
}

/// The token itself, on every backend kind: a second dispatch with the same token answers
/// the first one's reply and applies nothing; another token applies again.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_replays_its_reply_on_every_backend() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.db").display().to_string();
    let toml = format!(
        r#"
[backends.r]
kind = "redis"
url = "{}"
[backends.p]
kind = "postgres"
url = "{}"
[backends.s]
kind = "sqlite"
path = "{path}"
[[namespaces]]
name = "a"
prefixes = ["a:"]
backend = "r"
[[namespaces]]
name = "b"
prefixes = ["b:"]
backend = "p"
[[namespaces]]
name = "c"
backend = "s"
"#,
        redis.url(),
        pg.url()
    );
    let config = Config::from_toml(&toml).unwrap();
    let _ = SqliteConfig::at(&path);
    for name in ["r", "p", "s"] {
        let wanted: &BackendConfig = config.backends.get(name).unwrap();
        let backend = Backend::build(name, wanted, &Default::default()).unwrap();
        // `again`: an earlier dispatch with this token was sent (only then may a SQL backend
        // look for its reply).
        let dispatch = |args: Vec<Bytes>, token: Option<&'static [u8]>, again: bool| {
            let backend = &backend;
            async move {
                // With the client's bytes, as holdfast passes a plain request: a token must
                // still send the script, not these.
                let parts: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
                let raw = Bytes::from(encode(&parts));
                let request = Request {
                    token,
                    again,
                    raw: Some(&raw),
                    ..Request::new(&args, Proto::Resp2, 1)
                };
                // Decoded, so a raw reply (a Redis link's) and a decoded one compare alike.
                backend
                    .dispatch(&request, Duration::from_secs(5))
                    .await
                    .map(Reply::into_frame)
            }
        };
        let incr = || vec![Bytes::from_static(b"INCR"), Bytes::from_static(b"counter")];
        let get = || vec![Bytes::from_static(b"GET"), Bytes::from_static(b"counter")];
        // The first dispatch may have to wait for the backend's connection or schema.
        let start = Instant::now();
        let mut sent = false;
        let first = loop {
            match dispatch(incr(), Some(b"token-1"), std::mem::replace(&mut sent, true)).await {
                Ok(frame) => break frame,
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(10), "{name}: {e}");
                    sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let again = dispatch(incr(), Some(b"token-1"), true).await.unwrap();
        assert_eq!(first, again, "{name}: replayed reply");
        let other = dispatch(incr(), Some(b"token-2"), false).await.unwrap();
        assert_ne!(first, other, "{name}: a new token applies again");
        let value = dispatch(get(), None, false).await.unwrap();
        assert_eq!(
            value,
            redis_protocol::resp3::types::BytesFrame::BlobString {
                data: Bytes::from_static(b"2"),
                attributes: None
            },
            "{name}: two tokens, two increments"
        );
    }
}

// Where exact mode's tokens live, and what its script carries.

/// KEYS through holdfast, sorted, as text.
async fn keys(conn: &mut RawConn) -> Vec<String> {
    let reply = text(&conn.command(&["KEYS", "*"]).await);
    let mut keys: Vec<String> = reply
        .split("\r\n")
        .skip(1)
        .filter(|line| !line.starts_with('$') && !line.is_empty())
        .map(str::to_string)
        .collect();
    keys.sort();
    keys
}

/// The number of keys in database `db` of `redis`, asked directly.
async fn dbsize_of(redis: &RedisServer, db: &str) -> String {
    let mut direct = RawConn::connect(&redis.addr()).await;
    assert_eq!(direct.command(&["SELECT", db]).await, b"+OK\r\n");
    text(&direct.command(&["DBSIZE"]).await)
}

/// Item 7: a client's KEYS, SCAN and DBSIZE show its own keys only, never exact mode's
/// tokens (on a standalone Redis they live in a database of their own).
#[tokio::test(flavor = "multi_thread")]
async fn exact_tokens_stay_out_of_a_clients_keys_scan_and_dbsize_on_redis() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&config(&redis_backend(&redis.url()), "hidden", "exact")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["INCR", "n"]).await, b":1\r\n");
    assert_eq!(conn.command(&["SADD", "s", "a", "b"]).await, b":2\r\n");
    assert_eq!(keys(&mut conn).await, ["n", "s"]);
    assert_eq!(conn.command(&["DBSIZE"]).await, b":2\r\n");
    let scan = text(&conn.command(&["SCAN", "0", "COUNT", "1000"]).await);
    assert!(!scan.contains("hf:tok"), "{scan}");
    assert_eq!(dbsize_of(&redis, "0").await, ":2\r\n");
    // The tokens are there, in their own database, as many as the writes.
    assert_eq!(dbsize_of(&redis, "15").await, ":2\r\n");
    proxy.stop().await;
}

/// Item 7: on a Redis whose maxmemory policy may evict keys, a token could be evicted and a
/// retry apply the command twice; holdfast then settles instead and writes no token.
#[tokio::test(flavor = "multi_thread")]
async fn exact_mode_on_an_evicting_redis_settles_instead_of_writing_tokens() {
    let redis =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    let proxy = Proxy::start(&config(&redis_backend(&redis.url()), "evicting", "exact")).await;
    let mut conn = proxy.connect().await;
    // A read first: the backend connection, and what it learnt of the policy, is there.
    assert_eq!(conn.command(&["GET", "nothing"]).await, b"$-1\r\n");
    assert_eq!(conn.command(&["INCR", "n"]).await, b":1\r\n");
    assert_eq!(conn.command(&["SADD", "s", "a"]).await, b":1\r\n");
    let keyspace = redis.cmd(&["INFO", "keyspace"]);
    assert!(keyspace.contains("db0:keys=2,"), "{keyspace}");
    assert!(
        !keyspace.contains("db15"),
        "a token was written: {keyspace}"
    );
    // The same server under noeviction keeps exact mode (after a re-dial).
    assert_eq!(
        redis.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
        "+OK\r\n"
    );
    proxy.stop().await;
    let proxy = Proxy::start(&config(&redis_backend(&redis.url()), "evicting", "exact")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["GET", "nothing"]).await, b"$-1\r\n");
    assert_eq!(conn.command(&["INCR", "n"]).await, b":2\r\n");
    assert_eq!(dbsize_of(&redis, "15").await, ":1\r\n");
    proxy.stop().await;
}

/// Item 12: a bulk SADD beyond what the script can unpack is still answered (settled
/// instead); one at the limit still goes through the script.
#[tokio::test(flavor = "multi_thread")]
async fn exact_mode_answers_a_bulk_sadd_beyond_the_scripts_argument_limit() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&config(&redis_backend(&redis.url()), "bulk", "exact")).await;
    let mut conn = proxy.connect().await;
    for (key, members) in [("big", 10_000usize), ("limit", 6_998)] {
        let mut args = vec!["SADD".to_string(), key.to_string()];
        args.extend((0..members).map(|i| format!("m{i}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = timeout(Duration::from_secs(30), conn.command(&args))
            .await
            .unwrap();
        assert_eq!(text(&reply), format!(":{members}\r\n"), "{key}");
        assert_eq!(
            redis.cmd(&["SCARD", key]),
            format!(":{members}\r\n"),
            "{key}"
        );
    }
    // 7,000 arguments went through the script (one token); 10,002 did not.
    assert_eq!(dbsize_of(&redis, "15").await, ":1\r\n");
    proxy.stop().await;
}

/// Item 12: through exact mode's script a reply is byte for byte what Redis answers
/// directly, nils included: `LPOP key 5` of nothing is `*-1` in RESP2, BITFIELD's failed
/// overflow is a null inside its array in RESP3.
#[tokio::test(flavor = "multi_thread")]
async fn exact_replies_are_byte_equal_to_redis_nils_included() {
    let direct = RedisServer::start();
    let behind = RedisServer::start();
    let proxy = Proxy::start(&config(&redis_backend(&behind.url()), "equal", "exact")).await;
    let script: &[&[&str]] = &[
        &["LPOP", "nolist", "5"],
        &["RPOP", "nolist", "2"],
        &["LPOP", "nolist"],
        &["RPUSH", "l", "a", "b", "c"],
        &["LPOP", "l", "2"],
        &["RPOP", "l", "5"],
        &["SET", "k", "v", "GET"],
        &["SET", "k", "w", "GET"],
        &[
            "BITFIELD", "bf", "OVERFLOW", "FAIL", "INCRBY", "u2", "0", "5", "GET", "u2", "0",
        ],
        &[
            "BITFIELD", "bf", "INCRBY", "u2", "0", "1", "OVERFLOW", "FAIL", "INCRBY", "u2", "0",
            "9",
        ],
        &["INCR", "n"],
        &["ZINCRBY", "z", "1.5", "m"],
        &["ZADD", "z", "NX", "INCR", "1", "m"],
        &["ZADD", "z", "INCR", "2", "m"],
        &["HSET", "h", "f", "v", "g", "w"],
        &["HINCRBYFLOAT", "h", "x", "0.1"],
        &["LPUSH", "k", "x"],
        &["SPOP", "nosuchset"],
        &["SPOP", "nosuchset", "3"],
        &["GETDEL", "k"],
        &["GETDEL", "k"],
    ];
    let mut differ = Vec::new();
    for hello in [false, true] {
        let mut a = RawConn::connect(&direct.addr()).await;
        let mut b = proxy.connect().await;
        if hello {
            a.command(&["HELLO", "3"]).await;
            b.command(&["HELLO", "3"]).await;
        }
        for command in script {
            let want = a.command(command).await;
            let got = b.command(command).await;
            if got != want {
                differ.push(format!(
                    "{command:?} in RESP{}: holdfast {:?}, Redis {:?}",
                    if hello { 3 } else { 2 },
                    text(&got),
                    text(&want)
                ));
            }
        }
        assert_eq!(a.command(&["FLUSHALL"]).await, b"+OK\r\n");
        assert_eq!(b.command(&["FLUSHALL"]).await, b"+OK\r\n");
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    proxy.stop().await;
}

/// Item 7 on SQL backends: tokens live in `hf_tokens`, never among a client's keys.
#[tokio::test(flavor = "multi_thread")]
async fn exact_tokens_stay_out_of_a_clients_keys_scan_and_dbsize_on_sql() {
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("hidden.db").display()
    );
    for backend in [sqlite, postgres_backend(&pg.addr())] {
        let proxy = Proxy::start(&config(&backend, "hidden_sql", "exact")).await;
        let mut conn = proxy.connect().await;
        assert_eq!(conn.command(&["INCR", "n"]).await, b":1\r\n");
        assert_eq!(conn.command(&["SADD", "s", "a", "b"]).await, b":2\r\n");
        assert_eq!(keys(&mut conn).await, ["n", "s"], "{backend}");
        assert_eq!(conn.command(&["DBSIZE"]).await, b":2\r\n", "{backend}");
        let scan = text(&conn.command(&["SCAN", "0", "COUNT", "1000"]).await);
        assert!(
            !scan.contains("hf:tok") && !scan.contains("tok"),
            "{backend}: {scan}"
        );
        assert_eq!(conn.command(&["FLUSHALL"]).await, b"+OK\r\n");
        proxy.stop().await;
    }
}

/// Item 7 under Sentinel (fred's connections, not holdfast's own): the tokens live in
/// `token_db`, and a primary whose policy can evict gets none.
#[tokio::test(flavor = "multi_thread")]
async fn exact_tokens_under_sentinel_stay_out_of_the_keyspace_and_away_from_eviction() {
    let master = RedisServer::start();
    let sentinel = support::sentinel::Sentinel::start(master.port());
    let found = Instant::now();
    while !sentinel.names_master(master.port()).await {
        assert!(found.elapsed() < Duration::from_secs(10), "no sentinel");
        sleep(Duration::from_millis(50)).await;
    }
    let backend = format!(
        "kind = \"sentinel\"\nmaster_name = \"mymaster\"\nsentinels = [\"{}\"]\npool_size = 1",
        sentinel.addr()
    );
    let proxy = Proxy::start(&config(&backend, "sentinel_hidden", "exact")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["INCR", "n"]).await, b":1\r\n");
    assert_eq!(keys(&mut conn).await, ["n"]);
    assert_eq!(conn.command(&["DBSIZE"]).await, b":1\r\n");
    assert_eq!(dbsize_of(&master, "15").await, ":1\r\n");
    proxy.stop().await;

    assert_eq!(
        master.cmd(&["CONFIG", "SET", "maxmemory", "100mb"]),
        "+OK\r\n"
    );
    assert_eq!(
        master.cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]),
        "+OK\r\n"
    );
    let proxy = Proxy::start(&config(&backend, "sentinel_hidden", "exact")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["GET", "nothing"]).await, b"$-1\r\n");
    assert_eq!(conn.command(&["INCR", "n"]).await, b":2\r\n");
    assert_eq!(
        dbsize_of(&master, "15").await,
        ":1\r\n",
        "a token was written"
    );
    proxy.stop().await;
}

/// A pipelined run on PostgreSQL, committed as one transaction whose COMMIT's answer is lost
/// (fast mode): every reply is the first application's or `INDOUBT`, and nothing is applied
/// twice (the INCRs, not to be repeated, are not sent again).
#[tokio::test(flavor = "multi_thread")]
async fn a_pipelined_run_through_a_lost_commit_applies_nothing_twice() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let proxy = Proxy::start(&config(
        &postgres_backend(&relay.addr()),
        "pipelined_pg",
        "fast",
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "warm", "1"]).await, b"+OK\r\n");
    relay.drop_after_request_with(b"COMMIT");
    let mut pipeline = Vec::new();
    // Two INCRs side by side are one run (`strings::incr_run`).
    for args in [
        &["SET", "a", "1"][..],
        &["INCR", "n"],
        &["INCR", "n"],
        &["SET", "b", "2"],
        &["INCR", "n"],
    ] {
        pipeline.extend_from_slice(&encode_str(args));
    }
    conn.send(&pipeline).await;
    let mut replies = Vec::new();
    for _ in 0..5 {
        replies.push(text(&conn.read_reply().await));
    }
    assert_eq!(relay.fired(), 1, "{replies:?}");
    for (i, reply) in replies.iter().enumerate() {
        let first = ["+OK\r\n", ":1\r\n", ":2\r\n", "+OK\r\n", ":3\r\n"][i];
        assert!(
            reply == first || reply.starts_with("-INDOUBT"),
            "reply {i}: {reply:?} ({replies:?})"
        );
    }
    // The COMMIT went through: the INCRs applied once, never again.
    assert_eq!(
        conn.command(&["GET", "n"]).await,
        b"$1\r\n3\r\n",
        "{replies:?}"
    );
    assert_eq!(conn.command(&["GET", "b"]).await, b"$1\r\n2\r\n");
    proxy.stop().await;
}

/// The same lost COMMIT in exact mode, where SQL backends write runs of requests from
/// several clients (SETs, SADDs, DELs, HSETs, increments, XADDs, each with its own token) by multi-row
/// statements: each request, retried with its token, finds the reply its first attempt
/// recorded and answers it — never `INDOUBT`, never applied twice (a SADD or DEL applied
/// again would answer 0, an HSET 0, an INCR 2). Those whose first attempt changed nothing
/// recorded no reply (`src/backend/sql/model/unchanged.rs`), and their retries answer 0 again. The clients' requests are gathered into one group by
/// holding the writer on a blackholed connection while they queue. No two clients' requests
/// depend on each other's order: retried apart, they may apply in any.
#[tokio::test(flavor = "multi_thread")]
async fn runs_from_many_clients_in_exact_mode_answer_their_first_application_through_a_lost_commit()
{
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let backend = format!(
        "{}\nresponse_timeout = \"500ms\"",
        postgres_backend(&relay.addr())
    );
    let proxy = Proxy::start(&config(&backend, "exact_runs_pg", "exact")).await;
    let mut setup = proxy.connect().await;
    assert_eq!(setup.command(&["SET", "d1", "1"]).await, b"+OK\r\n");
    assert_eq!(setup.command(&["SET", "d2", "1"]).await, b"+OK\r\n");
    assert_eq!(setup.command(&["SET", "held", "theirs"]).await, b"+OK\r\n");
    assert_eq!(setup.command(&["SADD", "known", "m"]).await, b":1\r\n");
    settle_connection(&mut setup).await;
    let script: &[(&[&str], &str)] = &[
        // Writes that change nothing record no token: each retry applies afresh, and
        // changes nothing again.
        (&["DEL", "absent"], ":0\r\n"),
        (&["SETNX", "held", "mine"], ":0\r\n"),
        (&["SADD", "known", "m"], ":0\r\n"),
        (&["SADD", "s", "x"], ":1\r\n"),
        (&["SADD", "s", "y"], ":1\r\n"),
        (&["SADD", "s", "z", "w"], ":2\r\n"),
        (&["DEL", "d1", "nothing"], ":1\r\n"),
        (&["UNLINK", "d2"], ":1\r\n"),
        (&["HSET", "h", "f", "v"], ":1\r\n"),
        (&["HSET", "h", "g", "w", "e", "u"], ":2\r\n"),
        (&["SET", "a", "1"], "+OK\r\n"),
        (&["SET", "b", "2"], "+OK\r\n"),
        (&["INCR", "n1"], ":1\r\n"),
        (&["INCRBY", "n2", "5"], ":5\r\n"),
        (&["DECR", "n3"], ":-1\r\n"),
        (&["XADD", "x", "5-*", "f", "v"], "$3\r\n5-0\r\n"),
        (&["XADD", "x", "5-*", "g", "w"], "$3\r\n5-1\r\n"),
    ];
    let mut conns = Vec::new();
    for _ in script {
        let mut conn = proxy.connect().await;
        assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
        conns.push(conn);
    }
    // The writer takes the first request alone and waits on the blackhole (until the
    // backend's 500 ms deadline) while the others queue behind it, in this order.
    relay.blackhole();
    setup.send(&encode_str(&["SET", "first", "1"])).await;
    sleep(Duration::from_millis(100)).await;
    for (conn, (args, _)) in conns.iter_mut().zip(script) {
        conn.send(&encode_str(args)).await;
        sleep(Duration::from_millis(10)).await;
    }
    relay.pass();
    relay.drop_after_request_with(b"COMMIT");
    let mut replies = Vec::new();
    for conn in &mut conns {
        replies.push(text(&conn.read_reply().await));
    }
    assert_eq!(text(&setup.read_reply().await), "+OK\r\n");
    assert_eq!(relay.fired(), 1, "{replies:?}");
    for ((args, want), got) in script.iter().zip(&replies) {
        assert_eq!(got, want, "{args:?} ({replies:?})");
    }
    assert_eq!(setup.command(&["SCARD", "s"]).await, b":4\r\n");
    assert_eq!(setup.command(&["GET", "held"]).await, b"$6\r\ntheirs\r\n");
    assert_eq!(setup.command(&["EXISTS", "d1", "d2"]).await, b":0\r\n");
    assert_eq!(setup.command(&["HLEN", "h"]).await, b":3\r\n");
    // An XADD applied again would have answered 5-2 and left three entries.
    assert_eq!(setup.command(&["XLEN", "x"]).await, b":2\r\n");
    assert_eq!(
        text(&setup.command(&["MGET", "n1", "n2", "n3"]).await),
        "*3\r\n$1\r\n1\r\n$1\r\n5\r\n$2\r\n-1\r\n"
    );
    proxy.stop().await;
}

/// A client's pipelined run of SADDs, HSETs and DELs, which PostgreSQL writes as a few
/// multi-row statements, through a lost COMMIT in fast mode: every reply answers for the
/// retry, as Redis would for a second application (0 each: all of them were applied), and
/// each is counted as uncertain; nothing is applied twice, and nothing is lost. (Settled
/// mode sends a client's pipelined writes one at a time, each after its own read, so they
/// form runs only with other clients' requests; each reply is settled by its own read.)
#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_sadds_hsets_and_dels_through_a_lost_commit_answers_for_the_retry_in_fast_mode() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let run: &[&[&str]] = &[
        &["SADD", "s", "x"],
        &["SADD", "s", "y", "z"],
        &["HSET", "h", "f", "v"],
        &["HSET", "h", "g", "w"],
        &["DEL", "d1"],
        &["DEL", "d2", "none"],
    ];
    let proxy = Proxy::start(&config(
        &postgres_backend(&relay.addr()),
        "runs_fast",
        "fast",
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "d1", "1"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "d2", "1"]).await, b"+OK\r\n");
    settle_connection(&mut conn).await;
    relay.drop_after_request_with(b"COMMIT");
    let mut pipeline = Vec::new();
    for args in run {
        pipeline.extend_from_slice(&encode_str(args));
    }
    conn.send(&pipeline).await;
    let mut replies = Vec::new();
    for _ in run {
        replies.push(text(&conn.read_reply().await));
    }
    assert_eq!(relay.fired(), 1, "{replies:?}");
    assert!(replies.iter().all(|r| r == ":0\r\n"), "{replies:?}");
    let mut uncertain = 0.0;
    for command in ["SADD", "HSET", "DEL"] {
        let series = format!(
            r#"holdfast_uncertain_replies_total{{holdfast_namespace="runs_fast",command="{command}"}}"#
        );
        uncertain += metric(&proxy, &series).await;
    }
    assert_eq!(uncertain, run.len() as f64, "{replies:?}");
    assert_eq!(conn.command(&["SCARD", "s"]).await, b":3\r\n");
    assert_eq!(conn.command(&["HLEN", "h"]).await, b":2\r\n");
    assert_eq!(conn.command(&["EXISTS", "d1", "d2"]).await, b":0\r\n");
    proxy.stop().await;
}

/// Consumers of a reliable queue written with redis-py (`BLMOVE jobs done`), on PostgreSQL
/// in exact mode, while a relay loses the reply to `COMMIT` every 50 ms: each job reaches
/// exactly one consumer, none is answered in doubt, and the queue ends empty with every job
/// in `done` once.
const QUEUE_PY: &str = r#"
import sys, threading, time, redis
host, port = sys.argv[1].rsplit(":", 1)
stop = threading.Event()
out = threading.Lock()
def say(line):
    with out:
        print(line, flush=True)
def consume():
    r = redis.Redis(host=host, port=int(port), socket_timeout=30)
    while not stop.is_set():
        try:
            job = r.blmove("jobs", "done", 1, "LEFT", "RIGHT")
        except redis.ResponseError as e:
            say(f"error {e}")
            continue
        except redis.RedisError as e:
            say(f"failed {e}")
            time.sleep(0.05)
            continue
        if job is not None:
            say(f"job {job.decode()}")
threads = [threading.Thread(target=consume) for _ in range(int(sys.argv[2]))]
for t in threads:
    t.start()
sys.stdin.readline()
stop.set()
for t in threads:
    t.join()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_py_queue_in_exact_mode_on_postgres_loses_no_job_to_a_lost_reply() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let proxy = Proxy::start(&config(&postgres_backend(&relay.addr()), "queue", "exact")).await;
    let mut conn = proxy.connect().await;
    const JOBS: usize = 200;
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(50) {
        let mut push = vec!["RPUSH".to_string(), "jobs".to_string()];
        push.extend(chunk.iter().map(|i| format!("job-{i}")));
        let push: Vec<&str> = push.iter().map(String::as_str).collect();
        assert!(text(&conn.command(&push).await).starts_with(':'));
    }
    let py = redis_py("consumers.py", QUEUE_PY, &[&proxy.addr, "4"]);
    let mut child = py.child;
    let mut stdin = child.stdin.take().expect("stdin");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        relay.drop_after_request_with(b"COMMIT");
        sleep(Duration::from_millis(50)).await;
        let left = text(&conn.command(&["LLEN", "jobs"]).await);
        if left == ":0\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the queue never emptied: {left} left, {} replies lost",
            relay.fired()
        );
    }
    relay.pass();
    sleep(Duration::from_millis(1500)).await;
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"stop\n").await.expect("stdin");
    drop(stdin);
    let out = timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the consumers stop")
        .expect("python3 ends");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let mut delivered = std::collections::BTreeMap::<String, u32>::new();
    let mut other = Vec::new();
    for line in stdout.lines() {
        match line.split_once(' ') {
            Some(("job", job)) => *delivered.entry(job.to_string()).or_default() += 1,
            _ => other.push(line.to_string()),
        }
    }
    eprintln!(
        "{JOBS} jobs, {} COMMIT replies lost, {} delivered, {} other answers",
        relay.fired(),
        delivered.len(),
        other.len()
    );
    assert!(other.is_empty(), "answers other than a job: {other:?}");
    assert!(
        relay.fired() >= 5,
        "too few replies lost: {}",
        relay.fired()
    );
    let twice: Vec<_> = delivered.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(delivered.len(), JOBS, "every job reached a consumer");
    assert_eq!(
        text(&conn.command(&["LLEN", "done"]).await),
        format!(":{JOBS}\r\n")
    );
    proxy.stop().await;
}
