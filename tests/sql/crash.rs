//! holdfast killed (SIGKILL) under a SQLite write load: every write it acknowledged is in
//! the file when it starts again. A reply is sent only after its group's COMMIT returned,
//! and a process's death loses nothing SQLite's WAL was handed (`synchronous = normal`
//! risks only an operating system's crash), so nothing acknowledged may be missing.

use crate::support::resp::{encode_str, RawConn, ReadError};
use crate::support::Spawned;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one writer had acknowledged before the kill.
#[derive(Default)]
struct Acked {
    /// `SET s:W:I vI` (alone and 8 to a pipeline).
    sets: Vec<u64>,
    /// `RPUSH l:W I`, in order.
    pushed: Vec<u64>,
    /// `HSET h:W fI I`.
    fields: Vec<u64>,
    /// The highest `INCR c:W` answered.
    counted: i64,
    /// `XADD x:W * n I`, with the id it answered.
    added: Vec<String>,
}

const WRITERS: usize = 8;

fn config(path: &std::path::Path) -> String {
    format!(
        "[backends.lite]\nkind = \"sqlite\"\npath = \"{}\"\nsynchronous = \"normal\"\n\
         [[namespaces]]\nname = \"all\"\nbackend = \"lite\"\n",
        path.display()
    )
}

/// A reply, or None once the connection went with the process; a reply that never comes
/// while it lives is a hang, not a crash.
fn answered(read: Result<Vec<u8>, ReadError>) -> Option<Vec<u8>> {
    match read {
        Ok(reply) => Some(reply),
        Err(e) => {
            assert!(!e.is_timeout(), "a write went unanswered: {e:?}");
            None
        }
    }
}

/// One writer's load until the connection goes: each reply checked as it comes.
async fn write_until_killed(mut conn: RawConn, w: usize, acked: Arc<Mutex<Acked>>) {
    let limit = Duration::from_secs(10);
    for i in 0u64.. {
        let (s, l, h, c, x) = (
            format!("s:{w}:{i}"),
            format!("l:{w}"),
            format!("h:{w}"),
            format!("c:{w}"),
            format!("x:{w}"),
        );
        let v = format!("v{i}");
        let n = i.to_string();
        let field = format!("f{i}");
        let steps: [Vec<&str>; 5] = [
            vec!["SET", &s, &v],
            vec!["RPUSH", &l, &n],
            vec!["HSET", &h, &field, &n],
            vec!["INCR", &c],
            vec!["XADD", &x, "*", "n", &n],
        ];
        for (step, args) in steps.iter().enumerate() {
            if conn.try_send(&encode_str(args)).await.is_err() {
                return;
            }
            let Some(reply) = answered(conn.try_read_reply(limit).await) else {
                return;
            };
            let text = String::from_utf8_lossy(&reply).to_string();
            assert!(!text.starts_with('-'), "{args:?} answered {text}");
            let mut a = acked.lock().unwrap();
            match step {
                0 => a.sets.push(i),
                1 => a.pushed.push(i),
                2 => a.fields.push(i),
                3 => a.counted = text.trim_start_matches(':').trim().parse().unwrap(),
                _ => a
                    .added
                    .push(text.lines().nth(1).unwrap_or_default().to_string()),
            }
        }
        // Eight SETs in one pipeline: one group-commit entry.
        let mut run = Vec::new();
        let keys: Vec<String> = (0..8).map(|j| format!("p:{w}:{i}:{j}")).collect();
        for key in &keys {
            run.extend(encode_str(&["SET", key, &v]));
        }
        if conn.try_send(&run).await.is_err() {
            return;
        }
        for _ in &keys {
            let Some(reply) = answered(conn.try_read_reply(limit).await) else {
                return;
            };
            assert_eq!(reply, b"+OK\r\n");
        }
        // All eight answered: pipelined SETs are recorded as `p` keys by their `i`.
        acked.lock().unwrap().sets.push(u64::MAX - i);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_holdfast_loses_no_acknowledged_sqlite_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let first = Spawned::start(&config(&path), &[]);
    let ledgers: Vec<Arc<Mutex<Acked>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for (w, acked) in ledgers.iter().enumerate() {
        let conn = first.connect().await;
        tasks.push(tokio::spawn(write_until_killed(conn, w, acked.clone())));
    }
    // Under load for a while, then killed mid-stream.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.signal("-KILL");
    for task in tasks {
        task.await.unwrap();
    }
    drop(first);

    let second = Spawned::start(&config(&path), &[]);
    let mut conn = second.connect().await;
    let mut checked = 0;
    for (w, acked) in ledgers.iter().enumerate() {
        // Every writer stopped with the process: the ledgers are final.
        let a = std::mem::take(&mut *acked.lock().unwrap());
        assert!(a.sets.len() > 10, "writer {w} wrote too little to tell");
        for &i in &a.sets {
            if i > u64::MAX / 2 {
                let i = u64::MAX - i;
                for j in 0..8 {
                    let key = format!("p:{w}:{i}:{j}");
                    let want = format!("${}\r\nv{i}\r\n", format!("v{i}").len());
                    assert_eq!(
                        String::from_utf8_lossy(&conn.command(&["GET", &key]).await),
                        want,
                        "{key}"
                    );
                }
            } else {
                let key = format!("s:{w}:{i}");
                let want = format!("${}\r\nv{i}\r\n", format!("v{i}").len());
                let got = conn.command(&["GET", &key]).await;
                assert_eq!(String::from_utf8_lossy(&got), want, "{key}");
            }
            checked += 1;
        }
        // The list holds every acknowledged push, in order, and at most the one in flight.
        let list = conn
            .command(&["LRANGE", &format!("l:{w}"), "0", "-1"])
            .await;
        let items: Vec<u64> = String::from_utf8_lossy(&list)
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with('$'))
            .map(|l| l.parse().unwrap())
            .collect();
        assert!(
            items.starts_with(&a.pushed) && items.len() <= a.pushed.len() + 1,
            "writer {w}: pushed {:?}, found {items:?}",
            a.pushed
        );
        for &i in &a.fields {
            let got = conn
                .command(&["HGET", &format!("h:{w}"), &format!("f{i}")])
                .await;
            assert_eq!(
                String::from_utf8_lossy(&got),
                format!("${}\r\n{i}\r\n", i.to_string().len())
            );
        }
        let count = conn.command(&["GET", &format!("c:{w}")]).await;
        let count: i64 = String::from_utf8_lossy(&count)
            .lines()
            .nth(1)
            .unwrap_or("0")
            .parse()
            .unwrap();
        assert!(
            count >= a.counted,
            "writer {w}: INCR answered {}, found {count}",
            a.counted
        );
        for id in &a.added {
            let got = conn.command(&["XRANGE", &format!("x:{w}"), id, id]).await;
            assert!(got.starts_with(b"*1\r\n"), "writer {w}: entry {id} missing");
        }
        checked += a.pushed.len() + a.fields.len() + a.added.len();
    }
    assert!(checked > 100, "only {checked} writes checked");
}
