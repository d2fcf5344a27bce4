//! `MONITOR` over holdfast's own traffic, read by redis-py's own `monitor()` (which parses
//! Redis's line format), admin-only where users exist; a monitor that falls past its backlog
//! closed; `ACL WHOAMI`, `USERS` and `LIST` over holdfast's users.

#[allow(unused_imports)]
use crate::support::*;
use std::time::Duration;

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// A SQLite namespace in `dir`, with `extra` after it (users).
fn sqlite_at(dir: &tempfile::TempDir, extra: &str) -> String {
    format!(
        "{}{extra}",
        sql_namespace(&format!(
            "kind = \"sqlite\"\npath = \"{}\"",
            dir.path().join("monitor.db").display()
        ))
    )
}

const MONITOR_PY: &str = r#"
import json, sys, threading, time
import redis

addr = sys.argv[1]
r = redis.Redis.from_url("redis://" + addr)
seen = []
with r.monitor() as m:
    def work():
        time.sleep(0.3)
        w = redis.Redis.from_url("redis://" + addr)
        w.set("greeting", "hello \"world\"")
        w.incr("visits")
        w.get("greeting")
    threading.Thread(target=work).start()
    for command in m.listen():
        seen.append({k: command[k] for k in ("command", "client_address", "db")})
        if command["command"].lower().startswith("get "):
            break
print(json.dumps(seen), flush=True)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn redis_py_monitors_holdfast_s_own_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&sqlite_at(&dir, "")).await;
    let py = redis_py("monitoring.py", MONITOR_PY, &[&proxy.addr]);
    let out = tokio::time::timeout(Duration::from_secs(30), py.child.wait_with_output())
        .await
        .expect("the script ends")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let commands: Vec<&str> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    // redis-py takes the quoted arguments apart and joins them with spaces, its unescaping
    // of `\"` included.
    for want in [
        "SET greeting hello \"world\"",
        "INCRBY visits 1",
        "GET greeting",
    ] {
        assert!(
            commands.iter().any(|c| c.eq_ignore_ascii_case(want)),
            "{want} not in {commands:?}"
        );
    }
    assert!(seen[0]["client_address"] == "127.0.0.1", "{seen}");
    proxy.stop().await;
}

/// With `[[users]]`, MONITOR and ACL USERS/LIST pass the admin rule; ACL WHOAMI is anyone's.
/// A password is never fed. A client in monitor mode may only QUIT or RESET.
#[tokio::test(flavor = "multi_thread")]
async fn monitor_and_acl_follow_the_admin_rule() {
    let dir = tempfile::tempdir().unwrap();
    let users = "[[users]]\nname = \"ops\"\npassword = \"po\"\nadmin = true\n\
                 [[users]]\nname = \"app\"\npassword = \"pa\"\nread_only = true\n";
    let proxy = Proxy::start(&sqlite_at(&dir, users)).await;
    let mut app = proxy.connect().await;
    assert_eq!(text(&app.command(&["AUTH", "app", "pa"]).await), "+OK\r\n");
    assert_eq!(
        text(&app.command(&["ACL", "WHOAMI"]).await),
        "$3\r\napp\r\n"
    );
    for refused in [&["MONITOR"][..], &["ACL", "LIST"], &["ACL", "USERS"]] {
        let reply = text(&app.command(refused).await);
        assert!(reply.starts_with("-NOPERM"), "{refused:?}: {reply}");
    }
    let mut ops = proxy.connect().await;
    assert_eq!(text(&ops.command(&["AUTH", "ops", "po"]).await), "+OK\r\n");
    assert_eq!(
        text(&ops.command(&["ACL", "USERS"]).await),
        "*3\r\n$7\r\ndefault\r\n$3\r\nops\r\n$3\r\napp\r\n"
    );
    let list = text(&ops.command(&["ACL", "LIST"]).await);
    assert!(
        list.contains("user default off nopass ~* &* +@all"),
        "{list}"
    );
    assert!(
        list.contains("user ops on #") && list.contains("+@all\r\n"),
        "{list}"
    );
    assert!(
        list.contains("user app on #") && list.contains("-@all +@read"),
        "{list}"
    );
    assert!(!list.contains("pa\r\n") && !list.contains(" po"), "{list}");

    assert_eq!(text(&ops.command(&["MONITOR"]).await), "+OK\r\n");
    let mut other = proxy.connect().await;
    assert_eq!(
        text(&other.command(&["AUTH", "app", "pa"]).await),
        "+OK\r\n"
    );
    assert_eq!(text(&other.command(&["GET", "k"]).await), "$-1\r\n");
    let auth = text(&ops.read_reply().await);
    assert!(auth.contains("\"AUTH\" \"(redacted)\""), "{auth}");
    assert!(!auth.contains("pa"), "{auth}");
    let get = text(&ops.read_reply().await);
    assert!(
        get.starts_with('+') && get.contains("\"GET\" \"k\""),
        "{get}"
    );
    let refused = text(&ops.command(&["GET", "k"]).await);
    assert!(refused.contains("MONITOR mode"), "{refused}");
    assert_eq!(text(&ops.command(&["RESET"]).await), "+RESET\r\n");
    proxy.stop().await;
}

/// A monitor that stops reading keeps at most the feed's backlog: once it reads again past
/// it, it is closed and counted, as Redis closes a monitor past its output buffer limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_monitor_past_its_backlog_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&sqlite_at(&dir, "")).await;
    let mut monitor = proxy.connect().await;
    assert_eq!(text(&monitor.command(&["MONITOR"]).await), "+OK\r\n");
    let mut busy = proxy.connect().await;
    // More lines than the backlog (4,096) and the socket buffers hold, unread meanwhile.
    let value = "v".repeat(200);
    for _ in 0..60 {
        let mut pipeline = Vec::new();
        for i in 0..500 {
            pipeline.extend(encode_str(&["PING", &format!("{i}{value}")]));
        }
        busy.send(&pipeline).await;
        busy.read_replies(500).await;
    }
    // What was written before it fell behind, then the close.
    let started = std::time::Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(30), "never closed");
        match monitor.try_read_reply(Duration::from_secs(10)).await {
            Ok(line) => assert!(line.starts_with(b"+"), "{}", text(&line)),
            Err(e) if e.is_disconnect() => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(
        proxy
            .metric(r#"holdfast_limits_total{limit="monitor_backlog"}"#)
            .await,
        1.0
    );
    proxy.stop().await;
}
