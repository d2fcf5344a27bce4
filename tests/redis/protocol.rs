//! The front end against hostile and unusual clients, authentication, namespaces, limits,
//! the metrics port and the command line.

use crate::support;

use crate::support::*;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::{sleep, timeout, Instant};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_framing_closes_that_connection_only() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "framing", "")).await;
    let mut good = proxy.connect().await;
    assert_eq!(good.command(&["SET", "k", "v"]).await, b"+OK\r\n");

    for garbage in [
        &b"*1\r\n:5\r\n"[..],
        b"*x\r\n",
        b"*2\r\n$3\r\nGET\r\n$-5\r\n",
        b"SET k \"unclosed\r\n",
    ] {
        let mut bad = proxy.connect().await;
        bad.send(garbage).await;
        let reply = text(&bad.read_reply().await);
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{garbage:?} → {reply}"
        );
        bad.expect_disconnect(Duration::from_secs(5)).await;
    }
    // Sizes announced over a limit are refused from the header, before anything else arrives.
    for (header, error) in [
        (
            &b"*2\r\n$3\r\nGET\r\n$1099511627776\r\n"[..],
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1099511627776\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
    ] {
        let mut big = proxy.connect().await;
        big.send(header).await;
        assert_eq!(text(&big.read_reply().await), error);
        big.expect_disconnect(Duration::from_secs(5)).await;
    }
    // A request whose arguments are each allowed is still bounded as a whole: holdfast stops
    // reading at 64 MiB (the default) and closes; the error reply may be lost to the reset
    // that unread input causes, the close may not.
    let mut big = proxy.connect().await;
    big.send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$60000000\r\n")
        .await;
    big.send(&vec![b'x'; 60_000_000]).await;
    big.send(b"\r\n*2\r\n$3\r\nGET\r\n$8000000\r\n").await;
    let chunk = vec![b'x'; 1024 * 1024];
    let mut sent = 0;
    while sent < 100 && big.try_send(&chunk).await.is_ok() {
        sent += 1;
    }
    assert!(sent < 100, "holdfast kept reading past its limit");
    match big.try_read_reply(Duration::from_secs(5)).await {
        Ok(reply) => assert_eq!(text(&reply), "+OK\r\n", "the first, allowed request"),
        Err(e) => assert!(e.is_disconnect(), "{e:?}"),
    }

    let reply = good.command(&["GET", "k"]).await;
    assert!(
        reply == b"$1\r\nv\r\n",
        "{}",
        text(&reply[..reply.len().min(64)])
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn inline_commands_and_split_frames_work() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "inline", "")).await;
    let mut conn = proxy.connect().await;
    conn.send(b"SET greeting \"hello world\"\r\nGET greeting\r\n")
        .await;
    assert_eq!(conn.read_reply().await, b"+OK\r\n");
    assert_eq!(conn.read_reply().await, b"$11\r\nhello world\r\n");
    // One byte per packet.
    let request = encode_str(&["GET", "greeting"]);
    for byte in &request {
        conn.stream().write_all(&[*byte]).await.unwrap();
        conn.stream().flush().await.unwrap();
        sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(conn.read_reply().await, b"$11\r\nhello world\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deep_pipeline_is_answered_in_order() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "pipeline", "")).await;
    let mut conn = proxy.connect().await;
    let mut batch = Vec::new();
    for i in 0..2000 {
        batch.extend(encode_str(&["RPUSH", "list", &i.to_string()]));
        batch.extend(encode_str(&["LLEN", "list"]));
    }
    conn.send(&batch).await;
    let replies = conn.read_replies(4000).await;
    for (i, pair) in replies.chunks(2).enumerate() {
        let n = i + 1;
        assert_eq!(text(&pair[0]), format!(":{n}\r\n"));
        assert_eq!(text(&pair[1]), format!(":{n}\r\n"));
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requirepass_is_required_and_compared() {
    let redis = RedisServer::start();
    let config = format!(
        "[server]\nrequirepass = \"s3cret\"\n{}",
        one_backend(&redis.url(), "auth", "")
    );
    let proxy = Proxy::start(&config).await;
    let mut conn = proxy.connect().await;
    assert_eq!(
        text(&conn.command(&["GET", "k"]).await),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        text(&conn.command(&["AUTH", "wrong"]).await),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert!(text(&conn.command(&["HELLO", "3"]).await).starts_with("-NOAUTH HELLO must be called"));
    assert_eq!(conn.command(&["AUTH", "s3cret"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");

    // HELLO with AUTH authenticates and switches to RESP3 in one step.
    let mut fresh = proxy.connect().await;
    let hello = text(
        &fresh
            .command(&["HELLO", "3", "AUTH", "default", "s3cret"])
            .await,
    );
    assert!(hello.starts_with('%'), "{hello}");
    assert_eq!(fresh.command(&["GET", "k"]).await, b"$1\r\nv\r\n");
    assert_eq!(fresh.command(&["GET", "nope"]).await, b"_\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_commands_are_answered_by_holdfast() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "conn", "")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(conn.command(&["PING", "hi"]).await, b"$2\r\nhi\r\n");
    assert_eq!(conn.command(&["ECHO", "x"]).await, b"$1\r\nx\r\n");
    assert_eq!(conn.command(&["SELECT", "0"]).await, b"+OK\r\n");
    assert_eq!(
        text(&conn.command(&["SELECT", "3"]).await),
        "-ERR DB index is out of range\r\n"
    );
    let id = text(&conn.command(&["CLIENT", "ID"]).await);
    assert!(id.starts_with(':'), "{id}");
    assert_eq!(conn.command(&["CLIENT", "GETNAME"]).await, b"$-1\r\n");
    assert_eq!(
        conn.command(&["CLIENT", "SETNAME", "worker-1"]).await,
        b"+OK\r\n"
    );
    assert_eq!(
        conn.command(&["CLIENT", "GETNAME"]).await,
        b"$8\r\nworker-1\r\n"
    );
    assert_eq!(
        conn.command(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"])
            .await,
        b"+OK\r\n"
    );
    let info = text(&conn.command(&["INFO"]).await);
    for section in [
        "# Server",
        "redis_version:",
        "# Replication",
        "role:master",
        "# Holdfast",
        "namespace_conn:backend=main",
    ] {
        assert!(info.contains(section), "{section} missing from {info}");
    }
    let only = text(&conn.command(&["INFO", "replication"]).await);
    assert!(
        only.contains("# Replication") && !only.contains("# Server"),
        "{only}"
    );
    let count = text(&conn.command(&["COMMAND", "COUNT"]).await);
    let count: usize = count.trim_start_matches(':').trim().parse().unwrap();
    assert!(count > 150, "{count}");
    let get = text(&conn.command(&["COMMAND", "INFO", "get"]).await);
    assert!(get.starts_with("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n"), "{get}");
    assert_eq!(conn.command(&["QUIT"]).await, b"+OK\r\n");
    conn.expect_disconnect(Duration::from_secs(5)).await;
    proxy.stop().await;
}

/// Longest prefix wins; a command whose keys span namespaces is refused with nothing applied.
#[tokio::test(flavor = "multi_thread")]
async fn namespaces_route_by_longest_prefix_and_refuse_spanning_commands() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let config = format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.a]
kind = "redis"
url = "{}"
[backends.b]
kind = "redis"
url = "{}"
[[namespaces]]
name = "workers"
prefixes = ["w:"]
backend = "a"
[[namespaces]]
name = "special"
prefixes = ["w:special:"]
backend = "b"
[[namespaces]]
name = "rest"
backend = "b"
"#,
        a.url(),
        b.url()
    );
    let proxy = Proxy::start(&config).await;
    let mut conn = proxy.connect().await;
    for key in ["w:1", "w:special:1", "other"] {
        assert_eq!(conn.command(&["SET", key, key]).await, b"+OK\r\n");
    }
    assert_eq!(a.cmd(&["KEYS", "*"]), "*1\r\n$3\r\nw:1\r\n");
    assert_eq!(b.cmd(&["EXISTS", "w:special:1", "other"]), ":2\r\n");
    assert_eq!(b.cmd(&["EXISTS", "w:1"]), ":0\r\n");

    let refused = text(&conn.command(&["MSET", "w:2", "x", "other2", "y"]).await);
    assert!(refused.starts_with("-CROSSNAMESPACE"), "{refused}");
    assert!(
        refused.contains("'workers'") && refused.contains("'rest'"),
        "{refused}"
    );
    assert_eq!(a.cmd(&["EXISTS", "w:2"]), ":0\r\n");
    assert_eq!(b.cmd(&["EXISTS", "other2"]), ":0\r\n");
    // Two namespaces on one backend are still two namespaces.
    let refused = text(&conn.command(&["DEL", "w:special:1", "other"]).await);
    assert!(refused.starts_with("-CROSSNAMESPACE"), "{refused}");
    assert_eq!(b.cmd(&["EXISTS", "w:special:1", "other"]), ":2\r\n");
    // Keys within one namespace go through together.
    assert_eq!(
        conn.command(&["MGET", "w:1", "w:3"]).await,
        b"*2\r\n$3\r\nw:1\r\n$-1\r\n"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_beyond_the_limit_are_refused() {
    let redis = RedisServer::start();
    let config = format!(
        "[server]\nmax_clients = 2\n{}",
        one_backend(&redis.url(), "limit", "")
    );
    let proxy = Proxy::start(&config).await;
    let mut one = proxy.connect().await;
    let mut two = proxy.connect().await;
    assert_eq!(one.command(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(two.command(&["PING"]).await, b"+PONG\r\n");
    let mut three = proxy.connect().await;
    assert_eq!(
        text(&three.read_reply().await),
        "-ERR max number of clients reached\r\n"
    );
    three.expect_disconnect(Duration::from_secs(5)).await;
    drop(one);
    // The slot frees once the first connection is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = proxy.connect().await;
        again.send(&encode_str(&["PING"])).await;
        if again.read_reply().await == b"+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        sleep(Duration::from_millis(50)).await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_holds_through_a_backend_outage_and_backendz_follows_the_backend() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "ready", "")).await;
    let (status, _) = proxy.http("/healthz").await;
    assert!(status.contains("200"), "{status}");
    let (status, body) = proxy.http("/readyz").await;
    assert!(status.contains("200"), "{status} {body}");
    let (status, body) = proxy.http("/backendz").await;
    assert!(status.contains("200"), "{status} {body}");
    redis.kill();
    // Serving still: requests are held through the outage, so the pod stays in its
    // Services; the backend's health is told apart.
    let (status, body) = proxy.http("/readyz").await;
    assert!(status.contains("200"), "{status} {body}");
    let (status, body) = proxy.http("/backendz").await;
    assert!(status.contains("503"), "{status}");
    assert!(body.contains("main down"), "{body}");
    assert_eq!(
        proxy.metric("holdfast_backend_up{backend=\"main\"}").await,
        0.0
    );
    let (status, _) = proxy.http("/healthz").await;
    assert!(status.contains("200"), "the process is still up: {status}");
    redis.restart();
    let (status, _) = proxy.http("/backendz").await;
    assert!(status.contains("200"), "{status}");
    // A series appears, with its help text, once something is recorded in it.
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    let (_, metrics) = proxy.http("/metrics").await;
    assert!(
        metrics.contains("# HELP holdfast_requests_total"),
        "{metrics}"
    );
    proxy.stop().await;
}

/// Shutdown lets a held request finish, then closes connections between commands.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_waits_for_held_requests() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "drain", "")).await;
    let mut idle = proxy.connect().await;
    assert_eq!(idle.command(&["PING"]).await, b"+PONG\r\n");
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    redis.kill();
    // Let holdfast see its backend connections close first (a command sent in the instant a
    // connection dies may have been written, and is answered INDOUBT rather than held).
    sleep(Duration::from_millis(300)).await;
    conn.send(&encode_str(&["SET", "k", "w"])).await;
    sleep(Duration::from_millis(500)).await;
    let addr = proxy.addr.clone();
    let stopping = tokio::spawn(proxy.stop());
    sleep(Duration::from_millis(500)).await;
    assert!(
        !stopping.is_finished(),
        "shutdown must wait for the held SET"
    );
    // New connections are no longer accepted.
    assert!(RawConn::try_connect(&addr, Duration::from_secs(1))
        .await
        .is_err());
    redis.restart();
    assert_eq!(conn.read_reply().await, b"+OK\r\n");
    timeout(Duration::from_secs(10), stopping)
        .await
        .unwrap()
        .unwrap();
    idle.expect_disconnect(Duration::from_secs(5)).await;
    assert_eq!(redis.cmd(&["GET", "k"]), "$1\r\nw\r\n");
}

#[test]
fn check_config_names_the_bad_key_and_exits_64() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[backends.c]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1\"\n[[namespaces]]\nname = \"d\"\nbackend = \"missing\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("namespaces[0].backend"), "{stderr}");

    std::fs::write(
        &path,
        "[server]\nrequirepass = \"topsecret\"\n[backends.c]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1\"\n[[namespaces]]\nname = \"d\"\nbackend = \"c\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[backends.c]") && !stdout.contains("topsecret"),
        "{stdout}"
    );

    // The binary refuses to start on a bad file, before binding anything.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("--config")
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[tokio::test(flavor = "multi_thread")]
async fn too_many_keys_and_idle_clients_are_stopped() {
    let redis = RedisServer::start();
    let config = format!(
        "[server]\nmax_keys_per_command = 3\nmax_queued_commands = 2\nidle_timeout = \"500ms\"\n{}",
        one_backend(&redis.url(), "limits", "")
    );
    let proxy = Proxy::start(&config).await;
    let mut conn = proxy.connect().await;
    assert_eq!(
        conn.command(&["MSET", "a", "1", "b", "2", "c", "3"]).await,
        b"+OK\r\n"
    );
    let refused = text(&conn.command(&["DEL", "a", "b", "c", "d"]).await);
    assert!(
        refused.starts_with("-ERR holdfast: 4 keys in one command; the limit is 3"),
        "{refused}"
    );
    assert_eq!(
        redis.cmd(&["EXISTS", "a", "b", "c"]),
        ":3\r\n",
        "nothing applied"
    );
    // A MULTI queue is bounded: one command too many discards the transaction.
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "q", "1"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["SET", "q", "2"]).await, b"+QUEUED\r\n");
    let refused = text(&conn.command(&["SET", "q", "3"]).await);
    assert!(
        refused.starts_with("-ERR holdfast: more than 2 commands queued"),
        "{refused}"
    );
    assert!(text(&conn.command(&["EXEC"]).await).starts_with("-EXECABORT"));
    assert_eq!(redis.cmd(&["EXISTS", "q"]), ":0\r\n");
    // Still served after the refusal; then closed once silent for the idle timeout.
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    let silent = Instant::now();
    conn.expect_disconnect(Duration::from_secs(5)).await;
    assert!(
        silent.elapsed() >= Duration::from_millis(450),
        "{:?}",
        silent.elapsed()
    );
    assert_eq!(
        proxy
            .metric(r#"holdfast_limits_total{limit="max_keys_per_command"}"#)
            .await,
        1.0
    );
    assert!(
        proxy
            .metric(r#"holdfast_limits_total{limit="idle_timeout"}"#)
            .await
            >= 1.0
    );
    proxy.stop().await;
}

/// ACL-style users: each authenticates with its own password and is held to its namespaces
/// and, when read-only, to Read commands; refusals are Redis's NOPERM, nothing applied.
#[tokio::test(flavor = "multi_thread")]
async fn users_are_held_to_their_namespaces_and_read_only_flag() {
    let redis = RedisServer::start();
    let config = format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "{}"
[[namespaces]]
name = "workers"
prefixes = ["worker:"]
backend = "main"
[[namespaces]]
name = "rest"
backend = "main"
[[users]]
name = "worker"
password = "w-pass"
namespaces = ["workers"]
[[users]]
name = "reader"
password = 4242
read_only = true
"#,
        redis.url()
    );
    let proxy = Proxy::start(&config).await;
    let mut conn = proxy.connect().await;
    // With users configured, nothing runs unauthenticated, and `default` is off.
    assert_eq!(
        text(&conn.command(&["SET", "worker:1", "x"]).await),
        "-NOAUTH Authentication required.\r\n"
    );
    assert!(text(&conn.command(&["AUTH", "anything"]).await).starts_with("-WRONGPASS"));
    assert!(text(&conn.command(&["AUTH", "worker", "nope"]).await).starts_with("-WRONGPASS"));
    assert_eq!(
        conn.command(&["AUTH", "worker", "w-pass"]).await,
        b"+OK\r\n"
    );
    assert_eq!(conn.command(&["SET", "worker:1", "x"]).await, b"+OK\r\n");
    // A failed AUTH leaves the connection as it was.
    assert!(text(&conn.command(&["AUTH", "worker", "wrong"]).await).starts_with("-WRONGPASS"));
    assert_eq!(conn.command(&["SET", "worker:1", "x"]).await, b"+OK\r\n");
    assert_eq!(
        text(&conn.command(&["SET", "other", "x"]).await),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    assert_eq!(
        text(&conn.command(&["DBSIZE"]).await),
        "-NOPERM this user has no permissions to run the 'dbsize' command\r\n",
        "keyless commands belong to the catch-all namespace"
    );
    // Refused inside MULTI: the transaction is discarded, nothing applied.
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(
        conn.command(&["SET", "worker:2", "y"]).await,
        b"+QUEUED\r\n"
    );
    assert!(text(&conn.command(&["SET", "other", "y"]).await).starts_with("-NOPERM"));
    assert!(text(&conn.command(&["EXEC"]).await).starts_with("-EXECABORT"));
    assert_eq!(redis.cmd(&["EXISTS", "worker:2", "other"]), ":0\r\n");

    let mut reader = proxy.connect().await;
    let hello = text(
        &reader
            .command(&["HELLO", "3", "AUTH", "reader", "4242"])
            .await,
    );
    assert!(hello.starts_with('%'), "{hello}");
    assert_eq!(reader.command(&["GET", "worker:1"]).await, b"$1\r\nx\r\n");
    assert_eq!(
        text(&reader.command(&["DEL", "worker:1"]).await),
        "-NOPERM this user has no permissions to run the 'del' command\r\n"
    );
    assert_eq!(redis.cmd(&["EXISTS", "worker:1"]), ":1\r\n");
    proxy.stop().await;
}

/// holdfast's own connection to a standalone Redis introduces itself as the URL says: its
/// password, its database, and RESP3 (HELLO 3) for a RESP3 client. A refused password is an
/// answer, not a hold.
#[tokio::test(flavor = "multi_thread")]
async fn the_backend_password_database_and_protocol_are_used() {
    let redis = RedisServer::start_with(&["--requirepass", "pw-backend"]);
    let url = format!("redis://:pw-backend@127.0.0.1:{}/3", redis.port());
    let proxy = Proxy::start(&one_backend(&url, "introduced", "")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "in-3"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["HSET", "h", "f", "v"]).await, b":1\r\n");
    // In database 3: database 0 does not have it until the two are swapped.
    assert_eq!(redis.cmd(&["GET", "k"]), "$-1\r\n");
    assert_eq!(redis.cmd(&["SWAPDB", "0", "3"]), "+OK\r\n");
    assert_eq!(redis.cmd(&["GET", "k"]), "$4\r\nin-3\r\n");
    assert_eq!(redis.cmd(&["SWAPDB", "0", "3"]), "+OK\r\n");
    // A RESP3 client's commands go on RESP3 connections: HGETALL answers a map.
    let mut resp3 = proxy.connect().await;
    let hello = text(&resp3.command(&["HELLO", "3"]).await);
    assert!(hello.starts_with('%'), "{hello}");
    assert_eq!(
        resp3.command(&["HGETALL", "h"]).await,
        b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    proxy.stop().await;

    let wrong = format!("redis://:not-it@127.0.0.1:{}/3", redis.port());
    let proxy = Proxy::start(&one_backend(&wrong, "refused", "acquire_timeout = \"1s\"")).await;
    let mut conn = proxy.connect().await;
    let reply = timeout(Duration::from_secs(10), conn.command(&["GET", "k"]))
        .await
        .expect("a refused backend password is answered, not held");
    assert!(text(&reply).starts_with('-'), "{}", text(&reply));
    proxy.stop().await;
}

/// A RESP2 reply shaped like a Pub/Sub message (`["message", x, y]`) is an ordinary reply on
/// a standalone Redis: holdfast's own connection pairs replies with commands by order alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_reply_shaped_like_a_pubsub_message_is_answered() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "shaped", "")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(
        conn.command(&["RPUSH", "l", "message", "chan", "hello"])
            .await,
        b":3\r\n"
    );
    let reply = timeout(
        Duration::from_secs(10),
        conn.command(&["LRANGE", "l", "0", "-1"]),
    )
    .await
    .expect("answered");
    assert_eq!(
        text(&reply),
        "*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$5\r\nhello\r\n"
    );
    proxy.stop().await;
}

/// Large values travel by reference (neither copied into the backend connection's buffer nor
/// into the client's): pipelined SETs and GETs of values around and far above that size,
/// next to small ones, come back byte for byte, in RESP2 and in RESP3, and an MGET of them.
#[tokio::test(flavor = "multi_thread")]
async fn large_values_come_back_byte_for_byte() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "large", "")).await;
    let values: Vec<Vec<u8>> = [0usize, 1, 2047, 2048, 2049, 70_000, 1 << 20]
        .iter()
        .enumerate()
        .map(|(i, len)| (0..*len).map(|j| b'a' + ((i + j) % 26) as u8).collect())
        .collect();
    for hello in [None, Some("3")] {
        let mut conn = proxy.connect().await;
        if let Some(version) = hello {
            let reply = text(&conn.command(&["HELLO", version]).await);
            assert!(reply.starts_with('%'), "{reply}");
        }
        for (i, value) in values.iter().enumerate() {
            // Three at a time: the writes go ahead together, and neither side's buffers fill
            // while the other is not reading.
            let key = format!("big:{i}");
            let mut pipeline = encode(&[b"SET", key.as_bytes(), value]);
            pipeline.extend(encode(&[b"SET", format!("small:{i}").as_bytes(), b"s"]));
            pipeline.extend(encode(&[b"GET", key.as_bytes()]));
            conn.send(&pipeline).await;
            let replies = conn.read_replies(3).await;
            assert_eq!(replies[0], b"+OK\r\n");
            assert_eq!(replies[1], b"+OK\r\n");
            let mut want = format!("${}\r\n", value.len()).into_bytes();
            want.extend_from_slice(value);
            want.extend_from_slice(b"\r\n");
            assert!(replies[2] == want, "GET big:{i} of {} bytes", value.len());
        }
        let keys: Vec<String> = (0..values.len()).map(|i| format!("big:{i}")).collect();
        let mut mget = vec!["MGET"];
        mget.extend(keys.iter().map(String::as_str));
        let reply = conn.command(&mget).await;
        let mut want = format!("*{}\r\n", values.len()).into_bytes();
        for value in &values {
            want.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
            want.extend_from_slice(value);
            want.extend_from_slice(b"\r\n");
        }
        assert!(reply == want, "MGET of every size");
    }
    proxy.stop().await;
}

/// A write that waits for a replica (`min_replicas_ack`) is applied once: holdfast's own
/// connection writes the request as the client sent it, and the `WAIT` after it as `WAIT`,
/// never the client's bytes a second time.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_waited_for_by_a_replica_is_applied_once() {
    let (_master, _replica, proxy) = replicated_proxy().await;
    let mut conn = proxy.connect().await;
    assert_eq!(text(&conn.command(&["INCR", "counter"]).await), ":1\r\n");
    assert_eq!(
        text(&conn.command(&["GET", "counter"]).await),
        "$1\r\n1\r\n"
    );
}

/// A master, its replica, and holdfast on the master with `min_replicas_ack = 1`, once a
/// write through it is confirmed (until the replica has synced, none is).
async fn replicated_proxy() -> (RedisServer, RedisServer, Proxy) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let proxy = Proxy::start(&one_backend(&master.url(), "acked", "min_replicas_ack = 1")).await;
    let mut conn = proxy.connect().await;
    let start = Instant::now();
    loop {
        let reply = conn.command(&["SET", "probe", "1"]).await;
        if reply == b"+OK\r\n" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the replica never confirmed: {}",
            text(&reply)
        );
        sleep(Duration::from_millis(200)).await;
    }
    (master, replica, proxy)
}

/// Writes that wait for a replica share their `WAIT`s: the shared connection follows each
/// write it makes with one `WAIT` for every such write in it, so fifty concurrent writers send
/// far fewer `WAIT`s than writes, and each write is still applied once and acknowledged only
/// once the replica has it.
#[tokio::test(flavor = "multi_thread")]
async fn writes_waiting_for_a_replica_share_one_wait_per_batch() {
    let (master, replica, proxy) = replicated_proxy().await;
    let calls = |server: &RedisServer, name: &str| -> u64 {
        server
            .cmd(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    let waits_before = calls(&master, "wait");
    let (writers, each) = (50, 40);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let addr = proxy.addr.clone();
            tokio::spawn(async move {
                let mut conn = connect_when_listening(&addr).await;
                for i in 0..each {
                    let reply = conn.command(&["INCR", &format!("w{w}")]).await;
                    assert_eq!(text(&reply), format!(":{}\r\n", i + 1), "writer {w}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a writer");
    }
    let waits = calls(&master, "wait") - waits_before;
    let writes = writers * each;
    assert!(
        waits * 4 < writes,
        "{waits} WAITs for {writes} writes: not batched"
    );
    // Every acknowledged write is on the replica.
    for w in 0..writers {
        assert_eq!(
            replica.cmd(&["GET", &format!("w{w}")]),
            format!("$2\r\n{each}\r\n"),
            "writer {w} on the replica"
        );
    }
    proxy.stop().await;
}

/// A client's `WAIT` is sent on the shared backend connection that carried its last write,
/// though its writes join whichever connection is gathering other clients' commands. With the
/// replica frozen, each writer's `WAIT` after its own write finds no acknowledgement (0).
/// Sent on a connection with no write since the freeze (the writer's first pin, when its
/// write joined a connection a reader's command opened), it would count the replica's older
/// acknowledgement and answer 1. Readers on every connection of a large pool keep writes
/// starting everywhere, and few writers leave most connections without a write after the
/// freeze. (Whether `WAIT` itself is kept off the gathering connections is decided by the
/// command table, `connection::placement`, and checked there.)
#[tokio::test(flavor = "multi_thread")]
async fn a_clients_wait_counts_its_own_write_on_the_shared_connections() {
    const POOL: usize = 32;
    const WRITERS: usize = 4;
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let toml = one_backend(&master.url(), "waits", "")
        .replace("pool_size = 2", &format!("pool_size = {POOL}"));
    let proxy = Proxy::start(&toml).await;
    let mut probe = proxy.connect().await;
    let start = Instant::now();
    loop {
        assert_eq!(probe.command(&["SET", "probe", "1"]).await, b"+OK\r\n");
        if probe.command(&["WAIT", "1", "1000"]).await == b":1\r\n" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the replica never synced"
        );
    }
    replica.pause();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Readers keep the connections busy, each starting writes on its own pin (client ids
    // are consecutive, so theirs cover the pool).
    let mut readers = Vec::new();
    for i in 0..POOL {
        let mut conn = proxy.connect().await;
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let key = format!("r{i}");
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(conn.command(&["GET", &key]).await, b"$-1\r\n");
            }
        }));
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
    let mut writers = Vec::new();
    for i in 0..WRITERS {
        let mut conn = proxy.connect().await;
        let barrier = barrier.clone();
        writers.push(tokio::spawn(async move {
            barrier.wait().await;
            let key = format!("w{i}");
            assert_eq!(conn.command(&["SET", &key, "v"]).await, b"+OK\r\n");
            conn.command(&["WAIT", "1", "20"]).await
        }));
    }
    let mut answers = Vec::new();
    for writer in writers {
        answers.push(text(&writer.await.unwrap()));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
    replica.resume();
    assert!(
        answers.iter().all(|a| a == ":0\r\n"),
        "every WAIT must count its own client's write: {answers:?}"
    );
    proxy.stop().await;
}

/// `min_replicas_ack` holds for writes made on a client's own backend connection too: a
/// `MULTI … EXEC` with a write, and a blocking pop that removed something, are followed by
/// `WAIT` on that connection. They are never retried, so with the replica frozen the client
/// hears `INDOUBT` (applied on the primary, not yet on a replica), never a plain success; with
/// the replica live they answer as Redis does. A transaction of reads and a pop that found
/// nothing wrote nothing, and answer at once.
#[tokio::test(flavor = "multi_thread")]
async fn writes_on_a_clients_own_connection_wait_for_the_replicas_too() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let proxy = Proxy::start(&one_backend(
        &master.url(),
        "acked",
        "min_replicas_ack = 1\nreplicas_ack_timeout = \"200ms\"",
    ))
    .await;
    let mut conn = proxy.connect().await;
    let start = Instant::now();
    while conn.command(&["SET", "probe", "1"]).await != b"+OK\r\n" {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the replica never synced"
        );
        sleep(Duration::from_millis(200)).await;
    }
    // Live replica: answered as Redis answers.
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "t", "1"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["INCR", "n"]).await, b"+QUEUED\r\n");
    assert_eq!(text(&conn.command(&["EXEC"]).await), "*2\r\n+OK\r\n:1\r\n");
    assert_eq!(conn.command(&["RPUSH", "l", "a", "b"]).await, b":2\r\n");
    assert_eq!(
        text(
            &conn
                .command(&["BLMOVE", "l", "m", "LEFT", "RIGHT", "1"])
                .await
        ),
        "$1\r\na\r\n"
    );

    replica.pause();
    let frozen = async {
        // A plain write is held (retried until a replica has it): not answered meanwhile.
        let mut plain = proxy.connect().await;
        assert!(
            timeout(
                Duration::from_millis(500),
                plain.command(&["SET", "held", "1"])
            )
            .await
            .is_err(),
            "a plain SET was acknowledged with the replica frozen"
        );
        assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
        assert_eq!(conn.command(&["SET", "t", "2"]).await, b"+QUEUED\r\n");
        let exec = text(&conn.command(&["EXEC"]).await);
        let bl = text(
            &conn
                .command(&["BLMOVE", "l", "m", "LEFT", "RIGHT", "1"])
                .await,
        );
        let pop = text(&conn.command(&["BLPOP", "m", "1"]).await);
        // Nothing written, nothing to wait for.
        assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
        assert_eq!(conn.command(&["GET", "t"]).await, b"+QUEUED\r\n");
        let reads = text(&conn.command(&["EXEC"]).await);
        let empty = text(&conn.command(&["BLPOP", "nothing", "0.1"]).await);
        (exec, bl, pop, reads, empty)
    };
    let answers = timeout(Duration::from_secs(20), frozen).await;
    replica.resume();
    let (exec, bl, pop, reads, empty) = answers.expect("answered with the replica frozen");
    for (what, answer) in [("EXEC", &exec), ("BLMOVE", &bl), ("BLPOP", &pop)] {
        assert!(
            answer.starts_with("-INDOUBT ") && answer.contains("replicas"),
            "{what} with the replica frozen: {answer}"
        );
    }
    assert_eq!(
        reads, "*1\r\n$1\r\n2\r\n",
        "the transaction's write was applied"
    );
    assert_eq!(empty, "*-1\r\n");
    // Applied on the primary all the same; and once the replica is back, answered normally.
    assert_eq!(master.cmd(&["LRANGE", "m", "0", "-1"]), "*1\r\n$1\r\nb\r\n");
    let start = Instant::now();
    loop {
        assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
        assert_eq!(conn.command(&["SET", "t", "3"]).await, b"+QUEUED\r\n");
        let exec = text(&conn.command(&["EXEC"]).await);
        if exec == "*1\r\n+OK\r\n" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "with the replica back: {exec}"
        );
        sleep(Duration::from_millis(200)).await;
    }
    proxy.stop().await;
}

/// At `max_clients` holdfast takes no new client: not ready until one leaves.
#[tokio::test(flavor = "multi_thread")]
async fn not_ready_at_max_clients() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&format!(
        "[server]\nmax_clients = 1\n{}",
        one_backend(&redis.url(), "full", "")
    ))
    .await;
    let (status, _) = proxy.http("/readyz").await;
    assert!(status.contains("200"), "{status}");
    let mut only = proxy.connect().await;
    assert_eq!(only.command(&["PING"]).await, b"+PONG\r\n");
    let (status, body) = proxy.http("/readyz").await;
    assert!(
        status.contains("503") && body.contains("max_clients"),
        "{status} {body}"
    );
    drop(only);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !proxy.http("/readyz").await.0.contains("200") {
        assert!(
            Instant::now() < deadline,
            "ready again once the client left"
        );
        sleep(Duration::from_millis(50)).await;
    }
    proxy.stop().await;
}

/// Inside MULTI, the commands holdfast answers itself or sends to every backend are refused
/// and the transaction discarded, as Redis discards one with a command it would not queue:
/// `SELECT 1` sent with the transaction would have run its writes in a database nothing else
/// reads, and `FLUSHALL` would have passed the checks that guard it outside MULTI.
#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_holds_only_what_one_backend_connection_may_run() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut conn = proxy.connect().await;
    for refused in [
        &["SELECT", "1"][..],
        &["FLUSHALL"],
        &["CLIENT", "SETNAME", "x"],
    ] {
        assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
        assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+QUEUED\r\n");
        let reply = text(&conn.command(refused).await);
        assert!(
            reply.starts_with("-ERR holdfast:") && reply.contains("inside MULTI is not served"),
            "{refused:?}: {reply}"
        );
        let exec = text(&conn.command(&["EXEC"]).await);
        assert!(exec.starts_with("-EXECABORT"), "{refused:?}: {exec}");
        assert_eq!(redis.cmd(&["EXISTS", "k"]), ":0\r\n", "{refused:?}");
        let keyspace = redis.cmd(&["INFO", "keyspace"]);
        assert!(!keyspace.contains("db1:"), "{refused:?}: {keyspace}");
    }
    // What means the same to the backend is queued as before.
    assert_eq!(conn.command(&["SET", "kept", "1"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["PING"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+QUEUED\r\n");
    assert_eq!(
        text(&conn.command(&["EXEC"]).await),
        "*2\r\n+PONG\r\n+OK\r\n"
    );
    assert_eq!(redis.cmd(&["GET", "kept"]), "$1\r\n1\r\n");
    assert_eq!(redis.cmd(&["GET", "k"]), "$1\r\nv\r\n");
    proxy.stop().await;
}

/// A WATCH that went with its connection (closed when a blocking command took the client to
/// another backend) makes the next EXEC abort (nil, nothing applied), not apply unwatched.
#[tokio::test(flavor = "multi_thread")]
async fn an_exec_after_its_watch_was_lost_applies_nothing() {
    let x = RedisServer::start();
    let y = RedisServer::start();
    let proxy = Proxy::start(&format!(
        "[backends.x]\nkind = \"redis\"\nurl = \"{}\"\n[backends.y]\nkind = \"redis\"\nurl = \"{}\"\n\
         [[namespaces]]\nname = \"y\"\nprefixes = [\"y:\"]\nbackend = \"y\"\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"x\"\n",
        x.url(),
        y.url()
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "a", "0"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["WATCH", "a"]).await, b"+OK\r\n");
    // A blocking pop on the other backend: the client's own connection moves there.
    assert_eq!(conn.command(&["BLPOP", "y:list", "0.1"]).await, b"*-1\r\n");
    // Another client changes the watched key.
    assert_eq!(x.cmd(&["SET", "a", "theirs"]), "+OK\r\n");
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "a", "mine"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["EXEC"]).await, b"*-1\r\n");
    assert_eq!(x.cmd(&["GET", "a"]), "$6\r\ntheirs\r\n");
    // Aborted once; the next transaction, with no WATCH, applies.
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "a", "mine"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["EXEC"]).await, b"*1\r\n+OK\r\n");
    assert_eq!(x.cmd(&["GET", "a"]), "$4\r\nmine\r\n");
    proxy.stop().await;
}

/// A client's `WAIT` longer than the reply timeout waits as asked: cut short, it would take
/// the shared connection, and every other client's command on it, down with it (an `INCR`
/// behind it answered `INDOUBT`).
#[tokio::test(flavor = "multi_thread")]
async fn a_clients_long_wait_leaves_the_shared_connection_alone() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&format!(
        "[backends.r]\nkind = \"redis\"\nurl = \"{}\"\npool_size = 1\nresponse_timeout = \"500ms\"\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"r\"\nreply_mode = \"fast\"\n",
        redis.url()
    ))
    .await;
    let mut waiter = proxy.connect().await;
    let mut other = proxy.connect().await;
    let started = Instant::now();
    waiter
        .send(&support::resp::encode_str(&["WAIT", "1", "1500"]))
        .await;
    sleep(Duration::from_millis(100)).await;
    // Queued behind the WAIT on the one shared connection: answered once it returns.
    assert_eq!(text(&other.command(&["INCR", "n"]).await), ":1\r\n");
    assert_eq!(text(&waiter.read_reply().await), ":0\r\n");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert_eq!(redis.cmd(&["GET", "n"]), "$1\r\n1\r\n");
    // `WAIT 1 0` (for ever) is bounded by the reply timeout on a shared connection: it
    // answers the count reached then, and the command behind it is answered.
    let started = Instant::now();
    waiter
        .send(&support::resp::encode_str(&["WAIT", "1", "0"]))
        .await;
    sleep(Duration::from_millis(100)).await;
    assert_eq!(text(&other.command(&["INCR", "n"]).await), ":2\r\n");
    assert_eq!(text(&waiter.read_reply().await), ":0\r\n");
    assert!(started.elapsed() >= Duration::from_millis(450));
    proxy.stop().await;
}
