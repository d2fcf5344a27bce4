//! Hostile clients, each on its own connection, while well-behaved clients keep working:
//! every hostile one gets its error or its close, the others see no error, and holdfast's
//! memory stays bounded.

use crate::support::*;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::{sleep, timeout, Instant};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(&reply[..reply.len().min(200)]).into_owned()
}

/// This process's resident memory (holdfast runs in it), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_get_their_error_and_others_keep_working() {
    let redis = RedisServer::start();
    let config = format!(
        r#"
[server]
idle_timeout = "3s"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "{}"
pool_size = 2
[[namespaces]]
name = "mine"
prefixes = ["mine:"]
backend = "main"
[[namespaces]]
name = "rest"
backend = "main"
[[users]]
name = "app"
password = "app-pass"
namespaces = ["mine"]
"#,
        redis.url()
    );
    let proxy = Proxy::start(&config).await;
    let rss_before = rss_kib();

    // Well-behaved clients, running throughout.
    let stop_at = Instant::now() + Duration::from_secs(8);
    let mut good = Vec::new();
    for client in 0..3 {
        let addr = proxy.addr.clone();
        good.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            assert_eq!(conn.command(&["AUTH", "app", "app-pass"]).await, b"+OK\r\n");
            let (mut n, mut slowest) = (0u32, Duration::ZERO);
            while Instant::now() < stop_at {
                let key = format!("mine:{client}");
                let started = Instant::now();
                assert_eq!(
                    conn.command(&["SET", &key, &n.to_string()]).await,
                    b"+OK\r\n"
                );
                let got = conn.command(&["GET", &key]).await;
                assert_eq!(text(&got), format!("${}\r\n{n}\r\n", n.to_string().len()));
                slowest = slowest.max(started.elapsed());
                n += 1;
            }
            (n, slowest)
        }));
    }
    sleep(Duration::from_millis(200)).await;

    let addr = proxy.addr.clone();
    let hostile = async {
        // Garbage bytes.
        let mut c = RawConn::connect(&addr).await;
        c.send(b"\x00\xff\x13garbage\r\n*zz\r\n").await;
        let reply = text(&c.read_reply().await);
        assert!(
            reply.starts_with("-NOAUTH") || reply.starts_with("-ERR"),
            "{reply}"
        );

        // A bulk length of 2^40: refused from the header.
        let mut c = RawConn::connect(&addr).await;
        c.send(b"*2\r\n$3\r\nGET\r\n$1099511627776\r\n").await;
        assert_eq!(
            text(&c.read_reply().await),
            "-ERR Protocol error: invalid bulk length\r\n"
        );
        c.expect_disconnect(Duration::from_secs(5)).await;

        // A multibulk of a million elements: within the argument limit, so it is read (about
        // 7 MB, without re-parsing it on every read) and answered as Redis answers it: the
        // unknown command first, with its echo cut at 128 bytes.
        let mut c = RawConn::connect(&addr).await;
        let mut request = b"*1000000\r\n".to_vec();
        for _ in 0..1_000_000 {
            request.extend_from_slice(b"$1\r\na\r\n");
        }
        c.send(&request).await;
        let reply = timeout(Duration::from_secs(20), c.read_reply())
            .await
            .expect("answered");
        let reply = text(&reply);
        assert!(
            reply.starts_with("-ERR unknown command 'a', with args beginning with: 'a' 'a'"),
            "{reply}"
        );
        assert!(reply.len() < 200, "{reply}");

        // A truncated frame, then silence: closed at the idle timeout.
        let mut c = RawConn::connect(&addr).await;
        c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk").await;
        c.expect_disconnect(Duration::from_secs(10)).await;

        // A frame split one byte per packet.
        let mut c = RawConn::connect(&addr).await;
        for byte in encode_str(&["AUTH", "app", "app-pass"]) {
            c.stream().write_all(&[byte]).await.unwrap();
            c.stream().flush().await.unwrap();
            sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(c.read_reply().await, b"+OK\r\n");

        // 10,000 pipelined commands without reading the replies, then reading them all.
        let mut batch = Vec::new();
        for i in 0..10_000 {
            batch.extend(encode_str(&["SET", "mine:pipe", &i.to_string()]));
        }
        c.send(&batch).await;
        sleep(Duration::from_millis(500)).await;
        let replies = c.read_replies(10_000).await;
        assert!(replies.iter().all(|r| r == b"+OK\r\n"));

        // An unauthenticated write, and a write outside the user's namespaces.
        let mut c = RawConn::connect(&addr).await;
        assert_eq!(
            text(&c.command(&["SET", "mine:x", "1"]).await),
            "-NOAUTH Authentication required.\r\n"
        );
        assert_eq!(c.command(&["AUTH", "app", "app-pass"]).await, b"+OK\r\n");
        assert!(text(&c.command(&["SET", "elsewhere", "1"]).await).starts_with("-NOPERM"));
        assert_eq!(redis.cmd(&["EXISTS", "mine:x", "elsewhere"]), ":0\r\n");
    };
    timeout(Duration::from_secs(60), hostile)
        .await
        .expect("hostile clients handled");

    let mut rounds = 0;
    for client in good {
        let (n, slowest) = client.await.expect("well-behaved clients saw no error");
        // Generous: this catches starvation, not speed (that is the benchmarks' job).
        assert!(
            slowest < Duration::from_secs(2),
            "a well-behaved client waited {slowest:?}"
        );
        rounds += n;
    }
    assert!(rounds > 100, "{rounds}");
    let grown = rss_kib().saturating_sub(rss_before);
    eprintln!("hostile clients: RSS grew by {grown} KiB; well-behaved rounds: {rounds}");
    assert!(grown < 256 * 1024, "RSS grew by {grown} KiB");
    proxy.stop().await;
}
