//! What an operator reads in holdfast's log, from the binary as it runs: one line when a
//! backend goes down (its name, address and cause, at WARN) and one when it is back (at INFO),
//! not one per request, in both log formats; a backend that cannot work as configured at
//! ERROR within a second of start; the start-up summary; the log's own settings refused when
//! holdfast would not act on them.

#[allow(unused_imports)]
use crate::support::*;
use serde_json::Value as Json;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::sleep;

/// The holdfast binary with its log written to a file.
struct Logged {
    child: Child,
    addr: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Logged {
    fn start(body: &str, format: &str) -> Logged {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holdfast.toml");
        let addr = format!("127.0.0.1:{}", free_port());
        let metrics = format!("127.0.0.1:{}", free_port());
        std::fs::write(
            &path,
            format!("[server]\nlisten = \"{addr}\"\nmetrics_listen = \"{metrics}\"\n{body}"),
        )
        .unwrap();
        let log = dir.path().join("holdfast.log");
        let child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .arg("--config")
            .arg(&path)
            .env("HOLDFAST_LOG", "info")
            .env("HOLDFAST_LOG_FORMAT", format)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Logged {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits up to `limit` for a line holding `text`.
    async fn wait_for(&self, text: &str, limit: Duration) -> Duration {
        let started = Instant::now();
        while !self.lines().iter().any(|l| l.contains(text)) {
            assert!(
                started.elapsed() < limit,
                "no `{text}` within {limit:?}:\n{}",
                self.lines().join("\n")
            );
            sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A line of the JSON format: its level, message and fields.
fn json_lines(lines: &[String]) -> Vec<Json> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// INCRs on one connection, one after another, until `stop`.
fn load(addr: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut conn = connect_when_listening(&addr).await;
        let mut answered = 0;
        while !stop.load(Ordering::Relaxed) {
            conn.send(&encode_str(&["INCR", "load"])).await;
            // Held through the outage: longer than the default read's limit.
            let reply = conn.try_read_reply(Duration::from_secs(60)).await;
            if reply.is_ok_and(|r| r.starts_with(b":")) {
                answered += 1;
            }
        }
        answered
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outage_is_one_down_line_and_one_up_line_in_either_format() {
    let mut redis = RedisServer::start();
    let body = one_backend(&redis.url(), "default", "");
    // The format's name in any case, as the convention for such values is.
    let text = Logged::start(&body, "text");
    let json = Logged::start(&body, "JSON");
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = [&text, &json]
        .iter()
        .flat_map(|p| {
            [
                load(p.addr.clone(), stop.clone()),
                load(p.addr.clone(), stop.clone()),
            ]
        })
        .collect();
    sleep(Duration::from_millis(1500)).await;
    redis.kill();
    sleep(Duration::from_secs(10)).await;
    redis.restart();
    // The probe runs every 5 s: the up line comes within that of the restart.
    for logged in [&text, &json] {
        logged.wait_for("backend up", Duration::from_secs(15)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for load in loads {
        let answered = load.await.unwrap();
        assert!(answered > 0, "a load saw no answer");
    }
    let port = redis.port().to_string();

    let lines = text.lines();
    let down: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("backend down"))
        .collect();
    let up: Vec<&String> = lines.iter().filter(|l| l.contains("backend up")).collect();
    assert_eq!(down.len(), 1, "{}", lines.join("\n"));
    assert_eq!(up.len(), 1, "{}", lines.join("\n"));
    for want in [" WARN ", "backend=\"main\"", &port, "Connection refused"] {
        assert!(down[0].contains(want), "{want} not in {}", down[0]);
    }
    for want in [" INFO ", "backend=\"main\"", "down_for_s="] {
        assert!(up[0].contains(want), "{want} not in {}", up[0]);
    }
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("Os {") || l.contains("kind: ")),
        "debug formatting in the log:\n{}",
        lines.join("\n")
    );

    let lines = json_lines(&json.lines());
    let message = |l: &Json| l["fields"]["message"].as_str().unwrap_or("").to_string();
    let down: Vec<&Json> = lines
        .iter()
        .filter(|l| message(l) == "backend down")
        .collect();
    let up: Vec<&Json> = lines
        .iter()
        .filter(|l| message(l) == "backend up")
        .collect();
    assert_eq!(down.len(), 1, "{lines:?}");
    assert_eq!(up.len(), 1, "{lines:?}");
    assert_eq!(down[0]["level"], "WARN");
    assert_eq!(down[0]["fields"]["backend"], "main");
    assert!(down[0]["fields"]["address"]
        .as_str()
        .unwrap()
        .contains(&port));
    assert!(down[0]["fields"]["cause"]
        .as_str()
        .unwrap()
        .contains("Connection refused"));
    assert_eq!(up[0]["level"], "INFO");
    let down_for = up[0]["fields"]["down_for_s"].as_f64().unwrap();
    assert!((5.0..30.0).contains(&down_for), "{down_for}");
}

/// A backend holdfast cannot work with as configured (here a password the server refuses;
/// a host that does not resolve takes the same path, `LinkErrorKind::Unresolved`) is an
/// ERROR line within a second of start, naming the backend and the cause; the start-up
/// summary names every backend and namespace.
#[tokio::test(flavor = "multi_thread")]
async fn a_backend_that_cannot_work_as_configured_is_an_error_at_start() {
    let redis = RedisServer::start_with(&["--requirepass", "right"]);
    let url = redis.url().replace("redis://", "redis://:wrong@");
    let logged = Logged::start(&one_backend(&url, "default", ""), "text");
    let took = logged
        .wait_for("backend cannot work as configured", Duration::from_secs(5))
        .await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    let lines = logged.lines();
    let error = lines
        .iter()
        .find(|l| l.contains("backend cannot work as configured"))
        .unwrap();
    for want in [" ERROR ", "backend=\"main\"", "WRONGPASS"] {
        assert!(error.contains(want), "{want} not in {error}");
    }
    // The password is redacted from the address.
    assert!(!error.contains("wrong"), "{error}");
    for want in [
        "holdfast serving",
        "kind=\"redis\"",
        "namespace=\"default\"",
        "reply_mode=\"fast\"",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "{want} not in the start-up summary:\n{}",
            lines.join("\n")
        );
    }
}

/// `HOLDFAST_LOG` and `HOLDFAST_LOG_FORMAT` are checked as configuration keys are: a value
/// holdfast would not act on (a level misspelt, which `tracing` would take for a target and
/// so log nothing; a format it does not write) stops it at start with status 64.
#[test]
fn log_settings_holdfast_would_not_act_on_are_refused() {
    for (var, value, want) in [
        ("HOLDFAST_LOG", "verbose", "HOLDFAST_LOG"),
        ("HOLDFAST_LOG_FORMAT", "logfmt", "HOLDFAST_LOG_FORMAT"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(["check-config", "/nonexistent"])
            .env(var, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{var}={value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want) && stderr.contains(value), "{stderr}");
    }
}
