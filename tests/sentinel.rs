//! A Sentinel-managed Redis: a master, a replica and three sentinels on loopback. The master
//! is SIGKILLed while clients write through holdfast; Sentinel promotes the replica, and
//! holdfast, asking the sentinels again at its next dial, follows it. The clients see slow
//! replies, not errors, and no write is applied twice.

#[allow(unused_imports)]
mod support;
use support::*;

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{sleep, Instant};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// One sentinel, stopped (by its PID) when dropped.
struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Monitors `master` as `mymaster`, quorum 2. `down-after-milliseconds` below ~1500 ms
    /// flaps on a loaded 2-core machine.
    fn start(master_port: u16) -> Sentinel {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        let mut file = std::fs::File::create(&conf).unwrap();
        write!(
            file,
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor mymaster 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds mymaster 1500\n\
             sentinel failover-timeout mymaster 10000\n\
             sentinel parallel-syncs mymaster 1\n",
            dir.path().display()
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("sentinel.log")).unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Sentinel {
            child,
            port,
            _dir: dir,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn query(&self, args: &[&str]) -> Option<String> {
        let mut conn = RawConn::try_connect(&self.addr(), Duration::from_secs(1))
            .await
            .ok()?;
        Some(text(&conn.command(args).await))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `check` holds, or panics after `limit` naming `what`.
async fn until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_failover_is_a_slow_reply() {
    // No delay before a replica's full sync (the default waits 5 s to batch replicas).
    let mut master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&[
        "--repl-diskless-sync-delay",
        "0",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    // The first sync waits out the master's repl-diskless-sync-delay (5 s by default).
    until(
        Duration::from_secs(20),
        "the replica's first sync",
        || async {
            replica
                .cmd(&["INFO", "replication"])
                .contains("master_link_status:up")
        },
    )
    .await;
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port())).collect();
    // Every sentinel knows the replica and the two other sentinels before the master dies.
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
        r#"
[defaults]
reply_mode = "exact"
# Acknowledge a write once a replica has it: the failover cannot lose it.
min_replicas_ack = 1
[backends.ha]
kind = "sentinel"
master_name = "mymaster"
sentinels = [{}]
pool_size = 2
[[namespaces]]
name = "ha"
backend = "ha"
"#,
        addrs.join(", ")
    ))
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|i| {
            let addr = proxy.addr.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut conn = RawConn::connect(&addr).await;
                let (mut acked, mut errors) = (0u64, Vec::new());
                let mut longest = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    // A held request may take longer than RawConn's usual 10 s.
                    let key = format!("count:{i}");
                    let sent = Instant::now();
                    conn.send(&encode_str(&["INCR", &key])).await;
                    let reply = match conn.try_read_reply(Duration::from_secs(90)).await {
                        Ok(reply) => text(&reply),
                        Err(e) => format!("no reply: {e:?}"),
                    };
                    longest = longest.max(sent.elapsed());
                    // Each acknowledged INCR is one increment, whatever number it answered.
                    match reply
                        .strip_prefix(':')
                        .and_then(|r| r.trim_end().parse::<u64>().ok())
                    {
                        Some(_) => acked += 1,
                        None => errors.push(reply),
                    }
                    sleep(Duration::from_millis(5)).await;
                }
                (acked, errors, longest)
            })
        })
        .collect();
    sleep(Duration::from_secs(1)).await;
    master.kill();
    let replica_port = replica.port().to_string();
    until(
        Duration::from_secs(40),
        "the replica's promotion",
        || async {
            sentinels[0]
                .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
                .await
                .is_some_and(|r| r.contains(&replica_port))
        },
    )
    .await;
    // The old master comes back (empty: no persistence) and Sentinel makes it a replica of
    // the new one; until it has synced, writes wait for their replica.
    master.restart();
    sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);

    let mut total_lost = 0;
    for (i, client) in clients.into_iter().enumerate() {
        let (acked, errors, longest) = client.await.unwrap();
        eprintln!("client {i}: {acked} increments, longest hold {longest:?}");
        assert!(errors.is_empty(), "client {i}: {errors:?}");
        let stored: u64 = replica
            .cmd(&["GET", &format!("count:{i}")])
            .lines()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        // Applied twice would show as more than acknowledged.
        assert!(
            stored <= acked,
            "client {i}: {stored} stored, {acked} acknowledged"
        );
        // With min_replicas_ack = 1 nothing acknowledged was only on the dead master.
        total_lost += acked - stored;
        assert!(acked > 0, "client {i} never wrote");
    }
    assert_eq!(total_lost, 0, "acknowledged increments lost");
    proxy.stop().await;
}
