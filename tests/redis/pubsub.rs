//! Pub/Sub through holdfast, against real servers: a scripted session answered byte for byte
//! as a real redis-server answers it (RESP2 and RESP3) on every backend kind; channels routed
//! by their namespace's `channels` prefixes and patterns reaching every backend they may;
//! holdfasts sharing a PostgreSQL or a SQLite file hearing each other's `PUBLISH`, counted
//! across them, and closing their subscribers over a gap (PostgreSQL killed under a
//! publisher, a holdfast stopped past its heartbeat); a subscriber kept
//! subscribed through a Redis restart and a Sentinel failover; a subscriber that does not
//! read closed at `max_pubsub_backlog`; a subscription no backend confirms refused within its
//! budget; a limited user kept to its namespaces' channels.

#[allow(unused_imports)]
use crate::support;
use crate::support::sentinel::Sentinel;
use crate::support::*;

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::{sleep, timeout};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Who sends a step of the script.
#[derive(Clone, Copy)]
enum Who {
    Sub,
    Pub,
}

/// The scripted session: (who sends, the command, how many frames the subscriber then reads).
/// Replies to `Pub` are one frame each; a `Sub` command's frames are its confirmations and,
/// after a publish, the messages it delivered. Each message matches one subscription only, so
/// their order is Redis's (channel subscribers before patterns) without relying on how Redis
/// orders patterns among themselves.
fn script() -> Vec<(Who, Vec<&'static str>, usize)> {
    use Who::{Pub, Sub};
    vec![
        (Sub, vec!["SUBSCRIBE", "news", "jobs"], 2),
        (Sub, vec!["SUBSCRIBE", "news", "other", "other"], 3),
        (Sub, vec!["PSUBSCRIBE", "n*", "j?bs"], 2),
        (Pub, vec!["PUBLISH", "news", "hello"], 2),
        (Pub, vec!["PUBLISH", "nobody", "x"], 1),
        (Pub, vec!["PUBLISH", "jobs", ""], 2),
        (Pub, vec!["PUBLISH", "other", "a\r\nb\x00c"], 1),
        (Sub, vec!["PING"], 1),
        (Sub, vec!["PING", "hi"], 1),
        (Sub, vec!["GET", "k"], 1),
        (Pub, vec!["PUBSUB", "NUMSUB", "news", "jobs", "nothing"], 0),
        (Pub, vec!["PUBSUB", "NUMSUB"], 0),
        (Pub, vec!["PUBSUB", "NUMPAT"], 0),
        (Pub, vec!["PUBSUB", "CHANNELS", "n*"], 0),
        (Pub, vec!["PUBSUB", "CHANNELS", "zz*"], 0),
        (Sub, vec!["SSUBSCRIBE", "s1"], 1),
        (Pub, vec!["SPUBLISH", "s1", "m"], 1),
        (Pub, vec!["PUBSUB", "SHARDNUMSUB", "s1", "s2"], 0),
        (Pub, vec!["PUBSUB", "SHARDCHANNELS"], 0),
        (Sub, vec!["SUNSUBSCRIBE"], 1),
        (Sub, vec!["SUNSUBSCRIBE"], 1),
        (Sub, vec!["UNSUBSCRIBE", "news", "nothing"], 2),
        (Sub, vec!["PUNSUBSCRIBE", "n*"], 1),
        (Sub, vec!["UNSUBSCRIBE", "other"], 1),
        (Sub, vec!["PUNSUBSCRIBE"], 1),
        (Pub, vec!["PUBLISH", "news", "gone"], 0),
        (Sub, vec!["UNSUBSCRIBE"], 1),
        (Sub, vec!["UNSUBSCRIBE"], 1),
        (Sub, vec!["PUNSUBSCRIBE"], 1),
        (Sub, vec!["GET", "k"], 1),
        (Sub, vec!["SUBSCRIBE"], 1),
        (Pub, vec!["PUBLISH", "a"], 0),
        (Pub, vec!["PUBSUB", "NOPE"], 0),
        (Sub, vec!["SUBSCRIBE", "z"], 1),
        (Sub, vec!["RESET"], 1),
        (Pub, vec!["PUBLISH", "z", "after reset"], 0),
        (Sub, vec!["PING"], 1),
    ]
}

/// Runs the script against a server at `addr`, the subscriber in `resp` (2 or 3); returns
/// every frame read, in order.
async fn transcript(addr: &str, resp: u8) -> Vec<String> {
    let mut sub = RawConn::connect(addr).await;
    let mut publisher = RawConn::connect(addr).await;
    if resp == 3 {
        // Its reply names the server: not compared.
        sub.command(&["HELLO", "3"]).await;
    }
    let mut frames = Vec::new();
    for (who, command, reads) in script() {
        match who {
            Who::Sub => {
                sub.send(&encode_str(&command)).await;
                for _ in 0..reads {
                    frames.push(format!(
                        "sub {:?}: {}",
                        command,
                        text(&sub.read_reply().await)
                    ));
                }
            }
            Who::Pub => {
                let reply = publisher.command(&command).await;
                frames.push(format!("pub {:?}: {}", command, text(&reply)));
                for _ in 0..reads {
                    frames.push(format!(
                        "sub after {:?}: {}",
                        command,
                        text(&sub.read_reply().await)
                    ));
                }
            }
        }
    }
    // Nothing more was delivered than the script expects.
    let extra = sub.try_read_reply(Duration::from_millis(300)).await;
    assert!(extra.is_err(), "an unexpected frame: {extra:?}");
    frames
}

async fn same_as_redis(redis: &RedisServer, proxy: &Proxy, what: &str) {
    for resp in [2, 3] {
        let want = transcript(&redis.addr(), resp).await;
        let got = transcript(&proxy.addr, resp).await;
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(g, w, "{what}, RESP{resp}, frame {i}");
        }
        assert_eq!(got.len(), want.len(), "{what}, RESP{resp}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pubsub_answers_as_redis_does_on_redis_and_sqlite() {
    let redis = RedisServer::start();
    let on_redis = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    same_as_redis(&redis, &on_redis, "holdfast on Redis").await;
    on_redis.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("ps.db").display()
    );
    let on_sqlite = Proxy::start(&sql_namespace(&sqlite)).await;
    same_as_redis(&redis, &on_sqlite, "holdfast on SQLite").await;
    on_sqlite.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pubsub_answers_as_redis_does_on_postgres_and_across_two_holdfasts() {
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    same_as_redis(&redis, &a, "holdfast on PostgreSQL").await;

    // Two holdfasts on one database: a PUBLISH through either reaches the subscribers of
    // both, in the order committed, and its reply counts them all, as one Redis would.
    let b = Proxy::start(&config).await;
    let (mut on_a, _on_b, mut publisher) = hear_each_other(&a, &b).await;
    // NOTIFY's payload limit is said before anything is sent.
    let big = "x".repeat(7000);
    let reply = text(&publisher.command(&["PUBLISH", "orders", &big]).await);
    assert!(
        reply.starts_with("-ERR holdfast: a PUBLISH on PostgreSQL carries at most"),
        "{reply}"
    );
    assert!(on_a
        .try_read_reply(Duration::from_millis(300))
        .await
        .is_err());
    // A PUBLISH inside a MULTI that is discarded sends nothing; one that commits, once.
    publisher.command(&["MULTI"]).await;
    publisher.command(&["PUBLISH", "orders", "never"]).await;
    publisher.command(&["DISCARD"]).await;
    publisher.command(&["MULTI"]).await;
    publisher.command(&["PUBLISH", "orders", "in-exec"]).await;
    assert_eq!(text(&publisher.command(&["EXEC"]).await), "*1\r\n:2\r\n");
    assert_eq!(
        text(&on_a.read_reply().await),
        "*3\r\n$7\r\nmessage\r\n$6\r\norders\r\n$7\r\nin-exec\r\n"
    );
    a.stop().await;
    b.stop().await;
}

/// Two Redis backends: channels under `jobs.` are carried by the second, every other by the
/// first (the catch-all); a pattern is subscribed on each backend a matching channel may
/// route to.
#[tokio::test(flavor = "multi_thread")]
async fn channels_route_by_prefix_and_patterns_reach_every_backend_they_may() {
    let first = RedisServer::start();
    let second = RedisServer::start();
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.first]
kind = "redis"
url = "{}"
[backends.second]
kind = "redis"
url = "{}"
[[namespaces]]
name = "jobs"
prefixes = ["job:"]
channels = ["jobs."]
backend = "second"
[[namespaces]]
name = "rest"
backend = "first"
"#,
        first.url(),
        second.url()
    ))
    .await;
    let mut sub = proxy.connect().await;
    sub.send(&encode_str(&["SUBSCRIBE", "jobs.done", "news"]))
        .await;
    sub.read_replies(2).await;
    sub.send(&encode_str(&["PSUBSCRIBE", "jobs.*", "*"])).await;
    sub.read_replies(2).await;
    // Each name where it routes: `jobs.*` only on the second, `*` on both.
    let channels = |server: &RedisServer| server.cmd(&["PUBSUB", "CHANNELS"]);
    assert!(channels(&second).contains("jobs.done") && !channels(&second).contains("news"));
    assert!(channels(&first).contains("news") && !channels(&first).contains("jobs.done"));
    assert_eq!(first.cmd(&["PUBSUB", "NUMPAT"]), ":1\r\n");
    assert_eq!(second.cmd(&["PUBSUB", "NUMPAT"]), ":2\r\n");
    // A publish through holdfast goes where its channel routes.
    let mut publisher = proxy.connect().await;
    // CLIENT LIST shows the subscriber as Redis shows one.
    let list = text(&publisher.command(&["CLIENT", "LIST"]).await);
    assert!(list.contains("flags=P db=0 sub=2 psub=2 ssub=0"), "{list}");
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "jobs.done", "1"]).await),
        ":3\r\n",
        "jobs.done, jobs.* and * on the second backend"
    );
    let got = sub.read_replies(3).await;
    assert!(
        text(&got[0]).contains("message\r\n$9\r\njobs.done"),
        "{got:?}"
    );
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "news", "2"]).await),
        ":2\r\n"
    );
    sub.read_replies(2).await;
    // Pipelined publishes are sent ahead together, each where its channel routes.
    let mut two = encode_str(&["PUBLISH", "jobs.done", "p1"]);
    two.extend(encode_str(&["PUBLISH", "jobs.done", "p2"]));
    publisher.send(&two).await;
    for reply in publisher.read_replies(2).await {
        assert_eq!(text(&reply), ":3\r\n");
    }
    sub.read_replies(6).await;
    // PUBSUB answers for every backend, each channel counted where it routes.
    assert_eq!(
        text(
            &publisher
                .command(&["PUBSUB", "NUMSUB", "jobs.done", "news"])
                .await
        ),
        "*4\r\n$9\r\njobs.done\r\n:1\r\n$4\r\nnews\r\n:1\r\n"
    );
    assert_eq!(
        text(&publisher.command(&["PUBSUB", "NUMPAT"]).await),
        ":3\r\n"
    );
    // A channel published on the first backend directly under `jobs.` is not holdfast's to
    // report: it routes to the second.
    let mut direct = RawConn::connect(&first.addr()).await;
    direct.send(&encode_str(&["SUBSCRIBE", "jobs.stray"])).await;
    direct.read_reply().await;
    let listed = text(&publisher.command(&["PUBSUB", "CHANNELS"]).await);
    assert!(
        !listed.contains("jobs.stray") && listed.contains("news"),
        "{listed}"
    );
    // In a transaction too, a publish goes where its channel routes: with keys of another
    // namespace it is refused and nothing applied; with its own, it runs in the transaction.
    for (key, channel, want) in [
        ("job:1", "news", "-CROSSNAMESPACE"),
        ("job:1", "jobs.done", "*2\r\n+OK\r\n:3\r\n"),
    ] {
        assert_eq!(text(&publisher.command(&["MULTI"]).await), "+OK\r\n");
        publisher.command(&["SET", key, "v"]).await;
        publisher.command(&["PUBLISH", channel, "t"]).await;
        let reply = text(&publisher.command(&["EXEC"]).await);
        assert!(reply.starts_with(want), "{key} {channel}: {reply}");
    }
    assert_eq!(second.cmd(&["GET", "job:1"]), "$1\r\nv\r\n");
    sub.read_replies(3).await;
    // Unsubscribed everywhere: both backends forget the client's connections.
    sub.send(&encode_str(&["UNSUBSCRIBE"])).await;
    sub.read_replies(2).await;
    sub.send(&encode_str(&["PUNSUBSCRIBE"])).await;
    sub.read_replies(2).await;
    until(
        Duration::from_secs(5),
        "the subscriber's lines to close",
        || async {
            second.cmd(&["PUBSUB", "NUMPAT"]) == ":0\r\n"
                && !second.cmd(&["PUBSUB", "CHANNELS"]).contains("jobs.done")
        },
    )
    .await;
    assert!(second
        .cmd(&["CLIENT", "LIST"])
        .lines()
        .all(|l| !l.contains("sub=1")));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_is_subscribed_again_after_its_redis_restarts() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut sub = proxy.connect().await;
    sub.send(&encode_str(&["SUBSCRIBE", "events"])).await;
    sub.read_reply().await;
    sub.send(&encode_str(&["PSUBSCRIBE", "ev*"])).await;
    sub.read_reply().await;
    redis.restart();
    // Subscribed again on the restarted server, the client told nothing.
    until(Duration::from_secs(10), "the resubscription", || async {
        redis
            .cmd(&["PUBSUB", "NUMSUB", "events"])
            .ends_with(":1\r\n")
            && redis.cmd(&["PUBSUB", "NUMPAT"]) == ":1\r\n"
    })
    .await;
    let mut publisher = proxy.connect().await;
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "events", "after"]).await),
        ":2\r\n"
    );
    assert_eq!(
        text(&sub.read_reply().await),
        "*3\r\n$7\r\nmessage\r\n$6\r\nevents\r\n$5\r\nafter\r\n"
    );
    sub.read_reply().await;
    assert!(
        proxy
            .metric("holdfast_pubsub_resubscribes_total{backend=\"main\"}")
            .await
            >= 1.0
    );
    proxy.stop().await;
}

/// A Sentinel failover away from a frozen master: its connections stay open and silent, so
/// only the sentinels' word moves the subscriber. Its line is fenced when they name the new
/// primary and subscribes there at once, long before a ping to the frozen one could time out
/// (2 s of pings plus the 5 s connection timeout).
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_follows_a_sentinel_failover_to_the_new_primary() {
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    until(Duration::from_secs(20), "the replica's sync", || async {
        replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
    })
    .await;
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port())).collect();
    for s in &sentinels {
        until(Duration::from_secs(20), "sentinels to meet", || async {
            let others = s.query(&["SENTINEL", "SENTINELS", "mymaster"]).await;
            let replicas = s.query(&["SENTINEL", "REPLICAS", "mymaster"]).await;
            others.is_some_and(|o| o.starts_with("*2"))
                && replicas.is_some_and(|r| r.starts_with("*1"))
        })
        .await;
    }
    let addrs: Vec<String> = sentinels
        .iter()
        .map(|s| format!("\"{}\"", s.addr()))
        .collect();
    let proxy = Proxy::start(&format!(
        "[defaults]\nreply_mode = \"fast\"\n[backends.ha]\nkind = \"sentinel\"\n\
         master_name = \"mymaster\"\nsentinels = [{}]\npool_size = 2\n\
         connection_timeout = \"5s\"\n\
         [[namespaces]]\nname = \"ha\"\nbackend = \"ha\"\n",
        addrs.join(", ")
    ))
    .await;
    let mut sub = proxy.connect().await;
    sub.send(&encode_str(&["SUBSCRIBE", "events"])).await;
    sub.read_reply().await;
    assert!(master
        .cmd(&["PUBSUB", "NUMSUB", "events"])
        .ends_with(":1\r\n"));
    let began = Instant::now();
    master.pause();
    let replica_port = replica.port();
    until(Duration::from_secs(60), "the replica's promotion", || {
        sentinels[0].names_master(replica_port)
    })
    .await;
    let switched = Instant::now();
    until(
        Duration::from_secs(60),
        "the subscriber on the new primary",
        || async {
            replica
                .cmd(&["PUBSUB", "NUMSUB", "events"])
                .ends_with(":1\r\n")
        },
    )
    .await;
    let after_switch = switched.elapsed();
    eprintln!(
        "promoted {:?} after the freeze; the subscriber on it {after_switch:?} later",
        switched - began
    );
    assert!(
        after_switch < Duration::from_secs(3),
        "not fenced: {after_switch:?}"
    );
    let mut publisher = proxy.connect().await;
    // A publish on the new primary reaches the client; what was published while it moved
    // may have been missed (docs/pubsub.md says so).
    let start = Instant::now();
    while publisher.command(&["PUBLISH", "events", "on-new"]).await != b":1\r\n" {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no publish reached it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut got = text(&sub.read_reply().await);
    while !got.contains("on-new") {
        got = text(&sub.read_reply().await);
    }
    master.resume();
    proxy.stop().await;
    drop(sentinels);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_does_not_read_is_closed_at_max_pubsub_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nmax_pubsub_backlog = 16\n{}",
        sql_namespace(&format!(
            "kind = \"sqlite\"\npath = \"{}\"",
            dir.path().join("b.db").display()
        ))
    );
    let proxy = Proxy::start(&config).await;
    let mut sub = proxy.connect().await;
    sub.command(&["SUBSCRIBE", "flood"]).await;
    let mut publisher = proxy.connect().await;
    let payload = "p".repeat(64 * 1024);
    // The subscriber reads nothing: its socket fills, then its queue, and it is closed
    // instead of holdfast buffering for it without bound.
    // In small batches, so holdfast's write to it blocks on a full socket before the queue
    // fills: the client must be closed while that write waits.
    let mut published = 0;
    let limit = "holdfast_limits_total{limit=\"max_pubsub_backlog\"}";
    while proxy.metric(limit).await < 1.0 {
        for _ in 0..4 {
            publisher.command(&["PUBLISH", "flood", &payload]).await;
            published += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(published < 20_000, "the backlog limit never fired");
    }
    // Closed while it still reads nothing: gone from CLIENT LIST, the publisher alone left.
    let start = Instant::now();
    while text(&publisher.command(&["CLIENT", "LIST"]).await)
        .matches("id=")
        .count()
        > 1
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the slow subscriber was not closed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut stream = sub.into_inner();
    let mut sink = vec![0u8; 1 << 20];
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::AsyncReadExt;
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the slow subscriber was not closed");
    // Everyone else is served.
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "flood", "x"]).await),
        ":0\r\n"
    );
    proxy.stop().await;
}

/// A backend that is down: a `SUBSCRIBE` is held through the budget and then refused, with
/// nothing subscribed; a subscriber whose backend stays down past the budget is closed (its
/// library connects and subscribes again).
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_no_backend_confirms_is_refused_within_the_budget() {
    let mut redis = RedisServer::start();
    let budget = "acquire_timeout = \"300ms\"\n[namespaces.retry]\nmax_attempts = 4\nmin_delay = \"100ms\"\nmax_delay = \"400ms\"\n";
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", budget)).await;
    let mut early = proxy.connect().await;
    early.send(&encode_str(&["SUBSCRIBE", "c"])).await;
    early.read_reply().await;
    redis.kill();
    let began = Instant::now();
    let mut late = proxy.connect().await;
    let reply = text(&late.command(&["SUBSCRIBE", "d"]).await);
    let waited = began.elapsed();
    assert!(reply.starts_with("-UNAVAILABLE not subscribed"), "{reply}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Nothing subscribed: the client is not in subscribed mode.
    assert_eq!(text(&late.command(&["PING"]).await), "+PONG\r\n");
    // The early subscriber's line stays down past its hold: it is closed.
    early.expect_disconnect(Duration::from_secs(10)).await;
    assert!(
        proxy
            .metric("holdfast_limits_total{limit=\"pubsub_lost\"}")
            .await
            >= 1.0
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_limited_user_subscribes_and_publishes_only_on_its_namespaces_channels() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.a]
kind = "sqlite"
path = "{}"
[backends.b]
kind = "sqlite"
path = "{}"
[[namespaces]]
name = "mine"
prefixes = ["mine:"]
channels = ["mine."]
backend = "a"
[[namespaces]]
name = "theirs"
backend = "b"
[[users]]
name = "carol"
password = "pw"
namespaces = ["mine"]
"#,
        dir.path().join("a.db").display(),
        dir.path().join("b.db").display()
    ))
    .await;
    let mut carol = proxy.connect().await;
    assert_eq!(
        text(&carol.command(&["AUTH", "carol", "pw"]).await),
        "+OK\r\n"
    );
    let noperm =
        "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n";
    assert_eq!(
        text(&carol.command(&["SUBSCRIBE", "mine.a", "other"]).await),
        noperm
    );
    assert_eq!(text(&carol.command(&["PSUBSCRIBE", "mi*"]).await), noperm);
    assert_eq!(
        text(&carol.command(&["PUBLISH", "other", "x"]).await),
        noperm
    );
    assert_eq!(
        text(&carol.command(&["SPUBLISH", "other", "x"]).await),
        noperm
    );
    assert_eq!(
        text(&carol.command(&["PUBLISH", "mine.a", "x"]).await),
        ":0\r\n"
    );
    // Not inside a transaction: refused, and the transaction discarded.
    assert_eq!(text(&carol.command(&["MULTI"]).await), "+OK\r\n");
    let refused = text(&carol.command(&["SUBSCRIBE", "mine.a"]).await);
    assert!(
        refused.starts_with("-ERR holdfast: SUBSCRIBE inside MULTI"),
        "{refused}"
    );
    assert!(text(&carol.command(&["EXEC"]).await).starts_with("-EXECABORT"));
    assert_eq!(
        text(&carol.command(&["PSUBSCRIBE", "mine.*"]).await),
        "*3\r\n$10\r\npsubscribe\r\n$6\r\nmine.*\r\n:1\r\n"
    );
    proxy.stop().await;
}

/// A PUBLISH whose reply is lost may have been delivered: it is answered `INDOUBT`, counted
/// so, and never sent again; a subscriber gets the message once. In exact mode too.
#[tokio::test(flavor = "multi_thread")]
async fn a_publish_whose_reply_is_lost_is_indoubt_and_delivered_once() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let mut direct = RawConn::connect(&redis.addr()).await;
    direct.send(&encode_str(&["SUBSCRIBE", "once"])).await;
    direct.read_reply().await;
    for mode in ["fast", "exact"] {
        let url = format!("redis://{}", relay.addr());
        let proxy = Proxy::start(&one_backend(
            &url,
            mode,
            &format!("reply_mode = \"{mode}\""),
        ))
        .await;
        let mut conn = proxy.connect().await;
        assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
        relay.drop_after_request_with(b"PUBLISH");
        let reply = text(&conn.command(&["PUBLISH", "once", mode]).await);
        assert!(
            reply.starts_with("-INDOUBT may have been applied"),
            "{mode}: {reply}"
        );
        assert_eq!(
            text(&direct.read_reply().await),
            format!(
                "*3\r\n$7\r\nmessage\r\n$4\r\nonce\r\n${}\r\n{mode}\r\n",
                mode.len()
            )
        );
        let extra = direct.try_read_reply(Duration::from_millis(500)).await;
        assert!(extra.is_err(), "{mode}: delivered twice: {extra:?}");
        let series = format!(
            "holdfast_requests_total{{holdfast_namespace=\"{mode}\",command=\"PUBLISH\",outcome=\"indoubt\"}}"
        );
        assert_eq!(proxy.metric(&series).await, 1.0, "{mode}");
        proxy.stop().await;
    }
}

/// Two backends that are one Redis (databases 0 and 1: Pub/Sub ignores the database): a
/// pattern subscribed on both takes each message once, from the backend its channel routes
/// to.
#[tokio::test(flavor = "multi_thread")]
async fn a_pattern_on_two_backends_of_one_server_takes_each_message_once() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&format!(
        "[defaults]\nreply_mode = \"fast\"\n\
         [backends.zero]\nkind = \"redis\"\nurl = \"{0}/0\"\n\
         [backends.one]\nkind = \"redis\"\nurl = \"{0}/1\"\n\
         [[namespaces]]\nname = \"jobs\"\nchannels = [\"jobs.\"]\nprefixes = [\"job:\"]\nbackend = \"one\"\n\
         [[namespaces]]\nname = \"rest\"\nbackend = \"zero\"\n",
        redis.url().trim_end_matches("/0")
    ))
    .await;
    let mut sub = proxy.connect().await;
    sub.command(&["PSUBSCRIBE", "*"]).await;
    let mut publisher = proxy.connect().await;
    for channel in ["jobs.a", "news"] {
        // Two receivers at Redis: the pattern's line of each backend.
        assert_eq!(
            text(&publisher.command(&["PUBLISH", channel, "x"]).await),
            ":2\r\n"
        );
        let got = text(&sub.read_reply().await);
        assert!(got.contains(channel), "{got}");
        let again = sub.try_read_reply(Duration::from_millis(300)).await;
        assert!(again.is_err(), "{channel} delivered twice: {again:?}");
    }
    proxy.stop().await;
}

/// An `UNSUBSCRIBE` is answered once Redis released the name (a `PUBLISH` after it does not
/// count the client, as with Redis itself), and a client that subscribes again right after
/// keeps its connection and its messages: Redis is made to sleep while the `UNSUBSCRIBE` is
/// written to it.
#[tokio::test(flavor = "multi_thread")]
async fn unsubscribing_and_subscribing_again_at_once_keeps_the_line() {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let proxy = Proxy::start(&format!(
        "[backends.flip]\nkind = \"redis\"\nurl = \"{}\"\n\
         [[namespaces]]\nname = \"flip\"\nbackend = \"flip\"\n",
        redis.url()
    ))
    .await;
    let mut sub = proxy.connect().await;
    sub.send(&encode_str(&["SUBSCRIBE", "a", "b"])).await;
    sub.read_replies(2).await;
    let mut sleeper = RawConn::connect(&redis.addr()).await;
    for round in 0..3 {
        sleeper.send(&encode_str(&["DEBUG", "SLEEP", "0.3"])).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Written to the sleeping Redis, and answered once it wakes and answers.
        let asked = Instant::now();
        sub.command(&["UNSUBSCRIBE", "b"]).await;
        let waited = asked.elapsed();
        assert!(
            waited >= Duration::from_millis(150),
            "round {round}: {waited:?}"
        );
        assert!(redis.cmd(&["PUBSUB", "NUMSUB", "b"]).ends_with(":0\r\n"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let reply = text(&sub.command(&["SUBSCRIBE", "b"]).await);
        assert_eq!(
            reply, "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
            "round {round}"
        );
        assert_eq!(text(&sleeper.read_reply().await), "+OK\r\n");
    }
    let mut publisher = proxy.connect().await;
    for channel in ["a", "b"] {
        assert_eq!(
            text(&publisher.command(&["PUBLISH", channel, "m"]).await),
            ":1\r\n"
        );
        let got = text(&sub.read_reply().await);
        assert!(
            got.contains(&format!("${}\r\n{channel}\r\n", channel.len())),
            "{got}"
        );
    }
    assert_eq!(
        proxy
            .metric("holdfast_pubsub_resubscribes_total{backend=\"flip\"}")
            .await,
        0.0,
        "the line was dialled again"
    );
    proxy.stop().await;
}

/// The backend's own refusal of a channel (an ACL user without it) is the answer, at once,
/// and the client's other subscriptions go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_channel_the_backends_acl_refuses_is_answered_with_its_refusal() {
    let redis = RedisServer::start();
    assert_eq!(
        redis.cmd(&[
            "ACL",
            "SETUSER",
            "sub",
            "on",
            ">pw",
            "~*",
            "+@all",
            "resetchannels",
            "&ok.*"
        ]),
        "+OK\r\n"
    );
    let url = format!("redis://sub:pw@{}", redis.addr());
    let proxy = Proxy::start(&one_backend(&url, "acl", "")).await;
    let mut sub = proxy.connect().await;
    sub.command(&["SUBSCRIBE", "ok.1"]).await;
    let began = Instant::now();
    let reply = text(&sub.command(&["SUBSCRIBE", "secret"]).await);
    assert!(reply.starts_with("-NOPERM"), "{reply}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let mut publisher = proxy.connect().await;
    let start = Instant::now();
    while publisher.command(&["PUBLISH", "ok.1", "m"]).await != b":1\r\n" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "ok.1 not subscribed again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = text(&sub.read_reply().await);
    assert!(got.contains("ok.1"), "{got}");
    proxy.stop().await;
}

/// A subscriber's view of one round: the messages it got, and whether its connection was
/// closed (it may then have missed some, and knows it).
struct Heard {
    payloads: std::collections::HashSet<String>,
    closed: bool,
}

/// Reads what `conn` was sent until it is quiet for `quiet` or closed.
async fn hear(conn: &mut RawConn, quiet: Duration) -> Heard {
    let mut heard = Heard {
        payloads: Default::default(),
        closed: false,
    };
    loop {
        match conn.try_read_reply(quiet).await {
            Ok(frame) => {
                let frame = text(&frame);
                // `*3 $7 message $2 ch $N payload`: the payload is the seventh line.
                if let Some(payload) = frame.split("\r\n").nth(6) {
                    heard.payloads.insert(payload.to_string());
                }
            }
            Err(support::resp::ReadError::Timeout { .. }) => return heard,
            Err(_) => {
                heard.closed = true;
                return heard;
            }
        }
    }
}

/// PostgreSQL killed (SIGKILL to the postmaster and its children) and started again a second
/// later, under a publisher on holdfast A sending every 10 ms, with a subscriber on A and one
/// on B, over and over. A message answered 1 or more that a subscriber whose connection
/// stayed open never got is a lie of the count; any acknowledged message such a subscriber
/// missed is a gap it was not told of. Neither may happen: the count comes from the
/// sessions listening now, and a subscriber whose session ended is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_crash_never_leaves_a_subscriber_open_over_a_gap() {
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let rounds: usize = std::env::var("HF_PUBSUB_CRASHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    let mut pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    let b = Proxy::start(&config).await;
    let mut subscribers: Vec<Option<RawConn>> = vec![None, None];
    let (mut wrong, mut closed, mut answered) = (Vec::new(), 0, [0usize; 3]);
    for round in 0..rounds {
        for (at, proxy) in [&a, &b].into_iter().enumerate() {
            if subscribers[at].is_none() {
                let mut conn = proxy.connect().await;
                let reply = timeout(Duration::from_secs(30), conn.command(&["SUBSCRIBE", "ch"]))
                    .await
                    .expect("subscribed within 30 s");
                assert_eq!(text(&reply), "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
                subscribers[at] = Some(conn);
            }
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let publisher = {
            let (addr, stop) = (a.addr.clone(), stop.clone());
            tokio::spawn(async move {
                let mut conn = RawConn::connect(&addr).await;
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let payload = format!("r{round}:{i}");
                    let reply = text(&conn.command(&["PUBLISH", "ch", &payload]).await);
                    if let Some(n) = reply
                        .strip_prefix(':')
                        .and_then(|r| r.trim().parse::<usize>().ok())
                    {
                        acked.push((payload, n));
                    }
                    i += 1;
                    sleep(Duration::from_millis(10)).await;
                }
                acked
            })
        };
        sleep(Duration::from_millis(300)).await;
        tokio::task::block_in_place(|| {
            pg.crash();
            std::thread::sleep(Duration::from_secs(1));
            pg.start_again();
        });
        sleep(Duration::from_secs(1)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked = publisher.await.unwrap();
        for (at, slot) in subscribers.iter_mut().enumerate() {
            let Some(conn) = slot.as_mut() else { continue };
            let heard = hear(conn, Duration::from_millis(700)).await;
            if heard.closed {
                closed += 1;
                *slot = None;
                continue;
            }
            for (payload, n) in &acked {
                if !heard.payloads.contains(payload) {
                    wrong.push(format!(
                        "round {round}: {payload} answered {n}, missed by the open subscriber on {}",
                        ["a", "b"][at]
                    ));
                }
            }
        }
        for (_, n) in &acked {
            answered[(*n).min(2)] += 1;
        }
    }
    eprintln!(
        "{rounds} crashes: PUBLISHes answered 0/1/2: {answered:?}; subscribers closed over a gap: {closed}"
    );
    assert!(
        wrong.is_empty(),
        "{} messages missed silently:\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    a.stop().await;
    b.stop().await;
}

/// The count is of subscribers that can hear: a holdfast process killed (SIGKILL, no goodbye)
/// leaves its registry rows behind, and they stop counting once its `LISTEN` session is gone
/// (its lock released), while a live holdfast's count is kept across processes.
#[tokio::test(flavor = "multi_thread")]
async fn a_publish_counts_only_subscribers_of_holdfasts_still_listening() {
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    let other = Spawned::start(&config, &[]);
    let mut far = other.connect().await;
    assert_eq!(
        text(&far.command(&["SUBSCRIBE", "gone"]).await),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\ngone\r\n:1\r\n"
    );
    let mut publisher = a.connect().await;
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "gone", "hello"]).await),
        ":1\r\n",
        "the other process's subscriber"
    );
    drop(other);
    let rows = pg.psql("SELECT count(*) FROM hf_pubsub");
    assert_eq!(rows, "1", "the killed holdfast's row is left behind");
    let since = Instant::now();
    loop {
        let reply = text(&publisher.command(&["PUBLISH", "gone", "anyone?"]).await);
        if reply == ":0\r\n" {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "the killed holdfast's subscriber still counts: {reply}"
        );
        sleep(Duration::from_millis(100)).await;
    }
    a.stop().await;
}

/// Holdfasts sharing one SQLite file hear each other: a `PUBLISH` through either reaches the
/// subscribers of both, in the order published, and counts them all. A holdfast process
/// stopped past its heartbeat closes its subscribers when it runs again (it may have been
/// taken for dead, and messages for it not left), and one killed stops counting once its
/// heartbeat is stale.
#[tokio::test(flavor = "multi_thread")]
async fn holdfasts_on_one_sqlite_file_hear_each_other_and_count_every_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let config = sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("shared.db").display()
    ));
    let a = Proxy::start(&config).await;
    let b = Proxy::start(&config).await;
    let (mut on_a, _on_b, mut publisher) = hear_each_other(&a, &b).await;
    on_a.command(&["UNSUBSCRIBE", "orders"]).await;
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "orders", "one"]).await),
        ":1\r\n"
    );

    // A third holdfast, a process of its own, stopped for longer than its heartbeat counts.
    let other = Spawned::start(&config, &[]);
    let mut far = other.connect().await;
    assert_eq!(
        text(&far.command(&["SUBSCRIBE", "far"]).await),
        "*3\r\n$9\r\nsubscribe\r\n$3\r\nfar\r\n:1\r\n"
    );
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "far", "before"]).await),
        ":1\r\n"
    );
    assert_eq!(
        text(&far.read_reply().await),
        "*3\r\n$7\r\nmessage\r\n$3\r\nfar\r\n$6\r\nbefore\r\n"
    );
    other.signal("-STOP");
    let stopped = Instant::now();
    let mut answered = Vec::new();
    while stopped.elapsed() < Duration::from_secs(4) {
        answered.push(text(
            &publisher.command(&["PUBLISH", "far", "meanwhile"]).await,
        ));
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        answered.last().map(String::as_str),
        Some(":0\r\n"),
        "taken for dead"
    );
    other.signal("-CONT");
    // Told of the gap: its connection is closed, after whatever was left for it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match far.try_read_reply(Duration::from_secs(5)).await {
            Ok(_) => assert!(Instant::now() < deadline, "never closed"),
            Err(support::resp::ReadError::Timeout { .. }) => panic!("left open over a gap"),
            Err(_) => break,
        }
    }
    // Subscribed again there, then killed: it stops counting once its heartbeat is stale.
    let mut again = other.connect().await;
    again.command(&["SUBSCRIBE", "far"]).await;
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "far", "again"]).await),
        ":1\r\n"
    );
    drop(other);
    let killed = Instant::now();
    loop {
        let reply = text(&publisher.command(&["PUBLISH", "far", "anyone?"]).await);
        if reply == ":0\r\n" {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the killed holdfast's subscriber still counts: {reply}"
        );
        sleep(Duration::from_millis(100)).await;
    }
    a.stop().await;
    b.stop().await;
}

/// Two holdfasts on one database: a subscriber to `orders` on `a`, one to `ord*` on `b`. A
/// `PUBLISH` through `b` reaches both, in the order published, and counts both, as one Redis
/// would; so does `PUBSUB`. Returns the two subscribers and the publisher.
async fn hear_each_other(a: &Proxy, b: &Proxy) -> (RawConn, RawConn, RawConn) {
    let mut on_a = a.connect().await;
    let mut on_b = b.connect().await;
    on_a.command(&["SUBSCRIBE", "orders"]).await;
    on_b.command(&["PSUBSCRIBE", "ord*"]).await;
    let mut publisher = b.connect().await;
    assert_eq!(
        text(&publisher.command(&["PUBSUB", "NUMSUB", "orders"]).await),
        "*2\r\n$6\r\norders\r\n:1\r\n"
    );
    assert_eq!(
        text(&publisher.command(&["PUBSUB", "NUMPAT"]).await),
        ":1\r\n"
    );
    for i in 0..20 {
        let reply = publisher
            .command(&["PUBLISH", "orders", &format!("m{i}")])
            .await;
        assert_eq!(text(&reply), ":2\r\n", "a's subscriber and b's");
    }
    for i in 0..20 {
        let m = format!("m{i}");
        assert_eq!(
            text(&on_a.read_reply().await),
            format!(
                "*3\r\n$7\r\nmessage\r\n$6\r\norders\r\n${}\r\n{m}\r\n",
                m.len()
            )
        );
        assert_eq!(
            text(&on_b.read_reply().await),
            format!(
                "*4\r\n$8\r\npmessage\r\n$4\r\nord*\r\n$6\r\norders\r\n${}\r\n{m}\r\n",
                m.len()
            )
        );
    }
    (on_a, on_b, publisher)
}

/// An `UNSUBSCRIBE` is answered once the registry no longer counts the client, as Redis
/// answers it once a `PUBLISH` would not reach it: with the registry's writes held up by
/// another session's lock (reads still go through), the reply waits for the write, and a
/// `PUBLISH` after it counts nobody.
#[tokio::test(flavor = "multi_thread")]
async fn an_unsubscribe_is_answered_once_the_registry_stops_counting_it() {
    use sqlx::Connection;
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let pg = PgServer::start();
    let config = sql_namespace(&format!("kind = \"postgres\"\nurl = \"{}\"", pg.url()));
    let a = Proxy::start(&config).await;
    let mut sub = a.connect().await;
    let mut publisher = a.connect().await;
    sub.command(&["SUBSCRIBE", "u"]).await;
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "u", "x"]).await),
        ":1\r\n"
    );
    sub.read_reply().await;
    let mut other = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
    sqlx::Executor::execute(&mut other, "BEGIN").await.unwrap();
    sqlx::Executor::execute(&mut other, "LOCK TABLE hf_pubsub IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        sleep(Duration::from_millis(700)).await;
        sqlx::Executor::execute(&mut other, "COMMIT").await.unwrap();
    });
    let asked = Instant::now();
    assert_eq!(
        text(&sub.command(&["UNSUBSCRIBE", "u"]).await),
        "*3\r\n$11\r\nunsubscribe\r\n$1\r\nu\r\n:0\r\n"
    );
    let waited = asked.elapsed();
    assert_eq!(
        text(&publisher.command(&["PUBLISH", "u", "y"]).await),
        ":0\r\n",
        "counted after its UNSUBSCRIBE was answered (answered after {waited:?})"
    );
    release.await.unwrap();
    a.stop().await;
}

/// PostgreSQL stopped: a subscriber it served is closed (its `LISTEN` session ended), and a
/// `SUBSCRIBE` that no session can confirm is refused within the namespace's budget, with
/// nothing subscribed; once the server is back, subscribing works again.
#[tokio::test(flavor = "multi_thread")]
async fn a_sql_subscription_no_session_confirms_is_refused_within_the_budget() {
    if !support::postgres::available() {
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let mut pg = PgServer::start();
    let proxy = Proxy::start(&format!(
        "[defaults]\nacquire_timeout = \"300ms\"\n[defaults.retry]\nmax_attempts = 4\n\
         min_delay = \"100ms\"\nmax_delay = \"400ms\"\n[backends.db]\nkind = \"postgres\"\n\
         url = \"{}\"\n[[namespaces]]\nname = \"all\"\nbackend = \"db\"\n",
        pg.url()
    ))
    .await;
    let mut early = proxy.connect().await;
    early.command(&["SUBSCRIBE", "c"]).await;
    tokio::task::block_in_place(|| pg.stop_immediate());
    early.expect_disconnect(Duration::from_secs(10)).await;
    let began = Instant::now();
    let mut late = proxy.connect().await;
    let reply = text(&late.command(&["SUBSCRIBE", "d"]).await);
    let waited = began.elapsed();
    assert!(reply.starts_with("-UNAVAILABLE not subscribed"), "{reply}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(text(&late.command(&["PING"]).await), "+PONG\r\n");
    assert!(
        proxy
            .metric("holdfast_limits_total{limit=\"pubsub_gap\"}")
            .await
            >= 1.0
    );
    tokio::task::block_in_place(|| pg.start_again());
    let mut again = proxy.connect().await;
    let reply = timeout(Duration::from_secs(30), again.command(&["SUBSCRIBE", "d"]))
        .await
        .expect("subscribed once the server is back");
    assert_eq!(text(&reply), "*3\r\n$9\r\nsubscribe\r\n$1\r\nd\r\n:1\r\n");
    proxy.stop().await;
}
