//! Pipelined requests are sent ahead together, and still take effect and answer in the order
//! sent when some of them fail (`src/exec/ahead.rs`).

#[allow(unused_imports)]
use crate::support::*;

use std::time::Duration;
use tokio::time::sleep;

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

fn pipeline(commands: &[&[&str]]) -> Vec<u8> {
    commands.iter().flat_map(|c| encode_str(c)).collect()
}

/// Writes turned away (`READONLY`) in a pipeline, with reads between them that the replica
/// would answer at once: each write is held until the promotion, and each read behind it
/// waits for it and sees it.
#[tokio::test(flavor = "multi_thread")]
async fn reads_behind_a_turned_away_write_see_it() {
    let primary = RedisServer::start();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    for _ in 0..100 {
        if replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    // holdfast talks to the replica; it is promoted a second after the pipeline arrives.
    let proxy = Proxy::start(&one_backend(&replica.url(), "main", "")).await;
    let mut conn = proxy.connect().await;
    conn.send(&pipeline(&[
        &["SET", "k", "a"],
        &["GET", "k"],
        &["SET", "k", "b"],
        &["GET", "k"],
        &["GET", "other"],
    ]))
    .await;
    sleep(Duration::from_secs(1)).await;
    assert_eq!(replica.cmd(&["REPLICAOF", "NO", "ONE"]), "+OK\r\n");
    let replies: Vec<String> = conn.read_replies(5).await.iter().map(|r| text(r)).collect();
    assert_eq!(
        replies,
        [
            "+OK\r\n",
            "$1\r\na\r\n",
            "+OK\r\n",
            "$1\r\nb\r\n",
            "$-1\r\n"
        ]
    );
    proxy.stop().await;
}

/// A request turned away while a later request of the same pipeline took effect is answered
/// its failure at once, not retried after the later one.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_overtaken_by_a_later_write_is_answered_not_retried() {
    // With no replica, Redis turns a write away (NOREPLICAS, NotAttempted) but runs a script
    // that writes nothing, which the command table counts as a write.
    let redis = RedisServer::start_with(&["--min-replicas-to-write", "1"]);
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut conn = proxy.connect().await;
    conn.send(&pipeline(&[&["SET", "k", "v"], &["EVAL", "return 1", "0"]]))
        .await;
    let replies: Vec<String> = conn.read_replies(2).await.iter().map(|r| text(r)).collect();
    assert!(
        replies[0].starts_with("-UNAVAILABLE not applied: not retried, a later pipelined"),
        "{replies:?}"
    );
    assert_eq!(replies[1], ":1\r\n");
    // A client's EVALSHA of a script Redis lacks is answered NOSCRIPT as it is, in a
    // pipeline too, and the command behind it runs.
    let unknown = "0123456789012345678901234567890123456789";
    conn.send(&pipeline(&[
        &["EVALSHA", unknown, "0"],
        &["EVAL", "return 2", "0"],
    ]))
    .await;
    let replies: Vec<String> = conn.read_replies(2).await.iter().map(|r| text(r)).collect();
    assert!(replies[0].starts_with("-NOSCRIPT"), "{replies:?}");
    assert_eq!(replies[1], ":2\r\n");
    proxy.stop().await;
}

/// Sends `commands` as one pipeline through a relay that drops the connection once the chunk
/// holding `needle` has reached Redis (its replies lost), and returns the replies.
async fn through_a_drop(commands: &[Vec<String>], needle: &[u8]) -> Vec<String> {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let proxy = Proxy::start(&one_backend(
        &format!("redis://{}", relay.addr()),
        "main",
        "",
    ))
    .await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    let raw: Vec<u8> = commands
        .iter()
        .flat_map(|c| encode_str(&c.iter().map(String::as_str).collect::<Vec<_>>()))
        .collect();
    relay.drop_after_request_with(needle);
    conn.send(&raw).await;
    let replies = conn.read_replies(commands.len()).await;
    assert!(relay.fired() >= 1, "the relay never dropped the connection");
    proxy.stop().await;
    replies.iter().map(|r| text(r)).collect()
}

fn bulk(value: &str) -> String {
    format!("${}\r\n{value}\r\n", value.len())
}

/// A run of writes sent ahead, the connection lost with part of it applied and its replies
/// in flight: the writes are retried in order, and the reads behind them see every one.
#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_of_writes_through_a_lost_connection_ends_as_sent() {
    let mut commands: Vec<Vec<String>> = Vec::new();
    for i in 0..100 {
        commands.push(vec!["SET".into(), format!("k{i}"), format!("v{i}")]);
    }
    commands.push(vec!["SET".into(), "same".into(), "first".into()]);
    commands.push(vec!["SET".into(), "same".into(), "last".into()]);
    for i in 0..100 {
        commands.push(vec!["GET".into(), format!("k{i}")]);
    }
    commands.push(vec!["GET".into(), "same".into()]);
    let replies = through_a_drop(&commands, b"v57").await;
    for (i, reply) in replies[..102].iter().enumerate() {
        assert_eq!(reply, "+OK\r\n", "SET {i}");
    }
    for i in 0..100 {
        assert_eq!(replies[102 + i], bulk(&format!("v{i}")), "GET k{i}");
    }
    assert_eq!(replies[202], bulk("last"));
}

/// Reads and writes of one key alternating: every read sees the write just before it. (Where
/// the connection drops relative to fred's writes varies, so it is tried several times.)
#[tokio::test(flavor = "multi_thread")]
async fn a_mixed_pipeline_through_a_lost_connection_keeps_its_order() {
    let mut commands: Vec<Vec<String>> = Vec::new();
    for i in 0..100 {
        commands.push(vec!["SET".into(), "k".into(), format!("v{i}")]);
        commands.push(vec!["GET".into(), "k".into()]);
    }
    for round in 0..8 {
        let needle = format!("v{}", 20 + 9 * round);
        let replies = through_a_drop(&commands, needle.as_bytes()).await;
        for i in 0..100 {
            assert_eq!(replies[2 * i], "+OK\r\n", "round {round}: SET {i}");
            assert_eq!(
                replies[2 * i + 1],
                bulk(&format!("v{i}")),
                "round {round}: GET after SET {i}"
            );
        }
    }
}
