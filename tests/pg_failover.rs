//! PostgreSQL with a standby: the URL lists both hosts (libpq's multi-host form, primary
//! first); the primary is killed and the standby promoted while clients write. holdfast
//! finds the promoted standby within the retry budget, and the clients see slow replies,
//! not errors.

#[allow(unused_imports)]
mod support;
use support::*;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::sleep;

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_standby_is_found_and_writes_go_on() {
    let mut primary = PgServer::start();
    let standby = PgServer::standby_of(&primary);
    // Synchronous replication: a commit acknowledged by the primary is on the standby, so an
    // acknowledged write survives the primary's death (asynchronous replication would lose
    // the last ones, whatever holdfast does).
    primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary.psql("SELECT pg_reload_conf()");
    let url = format!(
        "postgres://holdfast@{},{}/holdfast",
        primary.addr(),
        standby.addr()
    );
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "exact"
[backends.pg]
kind = "postgres"
url = "{url}"
pool_size = 4
[[namespaces]]
name = "failover"
backend = "pg"
"#
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
                while !stop.load(Ordering::Relaxed) {
                    let reply = text(&conn.command(&["INCR", &format!("count:{i}")]).await);
                    if reply == format!(":{}\r\n", acked + 1) {
                        acked += 1;
                    } else {
                        errors.push(reply);
                    }
                    let value = acked.to_string();
                    let reply = text(&conn.command(&["SET", &format!("last:{i}"), &value]).await);
                    if reply != "+OK\r\n" {
                        errors.push(reply);
                    }
                }
                (acked, errors)
            })
        })
        .collect();
    sleep(Duration::from_millis(800)).await;
    primary.stop_immediate();
    sleep(Duration::from_secs(2)).await;
    standby.promote();
    sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);

    let mut conn = proxy.connect().await;
    for (i, client) in clients.into_iter().enumerate() {
        let (acked, errors) = client.await.unwrap();
        assert!(errors.is_empty(), "client {i}: {errors:?}");
        assert!(acked > 0, "client {i} wrote nothing");
        // Every acknowledged increment counted once: none lost, none applied twice.
        let count = text(&conn.command(&["GET", &format!("count:{i}")]).await);
        assert_eq!(
            count,
            format!("${}\r\n{acked}\r\n", acked.to_string().len()),
            "client {i}"
        );
    }
    assert!(!standby.in_recovery());
    proxy.stop().await;
}
