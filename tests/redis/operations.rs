//! Operating holdfast: what /metrics shows while a request is held, reloads, /config, and the
//! real binary under SIGTERM, SIGHUP and a second signal.

use crate::support;

use crate::support::*;
use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::{sleep, timeout, Instant};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Parses the exposition with a Prometheus text parser and returns the value of `name` with
/// every label of `labels`, summed over the rest.
fn scrape_value(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(ref buckets) => {
                buckets.last().map(|b| b.count).unwrap_or(0.0)
            }
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_follow_a_held_request() {
    let mut redis = RedisServer::start();
    // Metrics are process-wide: this test's backend has a name no other test uses.
    let config = one_backend(&redis.url(), "watched", "").replace("main", "watched_backend");
    let proxy = Proxy::start(&config).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    redis.kill();
    // Let holdfast see its backend connections close: a command written in the instant a
    // connection dies fails as sent (it may have been applied) instead of being held, and
    // this test is about the metrics of a held request.
    sleep(Duration::from_millis(300)).await;
    conn.send(&encode_str(&["GET", "k"])).await;
    sleep(Duration::from_millis(1500)).await;

    let (_, during) = proxy.http("/metrics").await;
    let ns = [("holdfast_namespace", "watched")];
    assert_eq!(scrape_value(&during, "holdfast_held_requests", &ns), 1.0);
    let retries = scrape_value(
        &during,
        "holdfast_retries_total",
        &[
            ("holdfast_namespace", "watched"),
            ("class", "not_attempted"),
        ],
    );
    assert!(retries >= 2.0, "{retries}");
    assert_eq!(
        scrape_value(&during, "holdfast_requests_in_flight", &ns),
        1.0,
        "the held GET is in flight"
    );
    let backend = [("backend", "watched_backend")];
    assert_eq!(
        scrape_value(&during, "holdfast_pool_connections", &backend),
        0.0
    );
    assert_eq!(
        scrape_value(&during, "holdfast_pool_waiting", &backend),
        0.0
    );
    assert_eq!(
        scrape_value(
            &during,
            "holdfast_requests_total",
            &[("holdfast_namespace", "watched"), ("command", "GET")]
        ),
        0.0,
        "a held request is not finished"
    );

    redis.restart();
    assert_eq!(
        conn.read_reply().await,
        b"$-1\r\n",
        "the restarted Redis is empty"
    );
    let (_, after) = proxy.http("/metrics").await;
    assert_eq!(scrape_value(&after, "holdfast_held_requests", &ns), 0.0);
    assert_eq!(
        scrape_value(&after, "holdfast_requests_in_flight", &ns),
        0.0
    );
    // SET k v and GET k as the client sent them; +OK and the nil as holdfast wrote them.
    let received = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".len();
    assert_eq!(
        scrape_value(&after, "holdfast_client_received_bytes_total", &ns),
        received as f64
    );
    assert_eq!(
        scrape_value(&after, "holdfast_client_sent_bytes_total", &ns),
        b"+OK\r\n$-1\r\n".len() as f64
    );
    assert_eq!(
        scrape_value(
            &after,
            "holdfast_requests_total",
            &[
                ("holdfast_namespace", "watched"),
                ("command", "GET"),
                ("outcome", "ok")
            ]
        ),
        1.0
    );
    assert_eq!(
        scrape_value(&after, "holdfast_hold_duration_seconds", &ns),
        1.0
    );
    assert_eq!(
        scrape_value(&after, "holdfast_budget_exhaustions_total", &ns),
        0.0
    );
    assert!(scrape_value(&after, "holdfast_pool_connections", &backend) >= 1.0);

    // A pipeline, in one write: each reply counts its own bytes, not the ones before it.
    let mut pipeline = encode_str(&["SET", "p", "1"]);
    pipeline.extend_from_slice(&encode_str(&["GET", "p"]));
    conn.send(&pipeline).await;
    assert_eq!(conn.read_reply().await, b"+OK\r\n");
    assert_eq!(conn.read_reply().await, b"$1\r\n1\r\n");
    let (_, piped) = proxy.http("/metrics").await;
    let grew = |name: &str| scrape_value(&piped, name, &ns) - scrape_value(&after, name, &ns);
    assert_eq!(
        grew("holdfast_client_received_bytes_total"),
        pipeline.len() as f64
    );
    assert_eq!(
        grew("holdfast_client_sent_bytes_total"),
        b"+OK\r\n$1\r\n1\r\n".len() as f64
    );
    proxy.stop().await;
}

/// The value of `name` with at least `labels`, or None when no such series is exposed.
fn sample(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let found = scrape
        .samples
        .iter()
        .any(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)));
    found.then(|| scrape_value(body, name, labels))
}

/// Every series whose labels the configuration bounds is exposed at 0 from the start: a
/// counter first seen at 1 has no increase, and an alert on it would miss the first event.
/// No series is labelled `namespace` (a pod scrape would rename it).
#[tokio::test(flavor = "multi_thread")]
async fn bounded_series_are_at_zero_from_the_start() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = format!(
        r#"
[backends.zero_redis]
kind = "redis"
url = "{}"
[backends.zero_sqlite]
kind = "sqlite"
path = "{}"
[[namespaces]]
name = "zero_a"
prefixes = ["a:"]
backend = "zero_redis"
[[namespaces]]
name = "zero_b"
backend = "zero_sqlite"
"#,
        redis.url(),
        dir.path().join("zero.db").display()
    );
    let proxy = Proxy::start(&config).await;
    let (_, body) = proxy.http("/metrics").await;
    let zero = |name: &str, labels: &[(&str, &str)]| {
        assert_eq!(
            sample(&body, name, labels),
            Some(0.0),
            "{name} {labels:?} is not exposed at 0 at start"
        );
    };
    let present = |name: &str, labels: &[(&str, &str)]| {
        assert!(
            sample(&body, name, labels).is_some(),
            "{name} {labels:?} is not exposed at start"
        );
    };
    for ns in ["zero_a", "zero_b"] {
        let ns = ("holdfast_namespace", ns);
        for family in [
            "holdfast_held_requests",
            "holdfast_requests_in_flight",
            "holdfast_client_received_bytes_total",
            "holdfast_client_sent_bytes_total",
            "holdfast_retry_budget_denied_total",
            "holdfast_hold_duration_seconds",
        ] {
            zero(family, &[ns]);
        }
        for class in holdfast::metrics::FAILURE_CLASSES {
            zero("holdfast_retries_total", &[ns, ("class", class)]);
            zero("holdfast_budget_exhaustions_total", &[ns, ("class", class)]);
        }
    }
    let redis_backend = [("backend", "zero_redis")];
    for family in [
        "holdfast_pool_connections",
        "holdfast_pool_waiting",
        "holdfast_connections_fenced_total",
        "holdfast_pubsub_resubscribes_total",
    ] {
        present(family, &redis_backend);
    }
    zero("holdfast_connections_fenced_total", &redis_backend);
    zero(
        "holdfast_group_commit_requests",
        &[("backend", "zero_sqlite")],
    );
    // Process-wide, so other tests of this binary may have counted some already.
    for limit in holdfast::metrics::LIMIT_NAMES {
        present("holdfast_limits_total", &[("limit", limit)]);
    }
    for result in ["applied", "rejected"] {
        present("holdfast_config_reloads_total", &[("result", result)]);
    }
    present("holdfast_client_connections_refused_total", &[]);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        sample(&body, "holdfast_build_info", &[("version", version)]),
        Some(1.0)
    );
    assert!(sample(&body, "process_resident_memory_bytes", &[]).unwrap_or(0.0) > 0.0);
    present("process_cpu_seconds_total", &[]);
    assert!(
        !body
            .lines()
            .any(|l| !l.starts_with('#') && l.contains("{namespace=") || l.contains(",namespace=")),
        "a series is labelled `namespace`:\n{body}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_applies_between_commands() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&a.url(), "moving", "")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "on-a"]).await, b"+OK\r\n");

    assert_eq!(proxy.reload(&one_backend(&b.url(), "moving", "")), Ok(2));
    // The same connection's next command runs under the new generation.
    assert_eq!(conn.command(&["SET", "k", "on-b"]).await, b"+OK\r\n");
    assert_eq!(a.cmd(&["GET", "k"]), "$4\r\non-a\r\n");
    assert_eq!(b.cmd(&["GET", "k"]), "$4\r\non-b\r\n");
    assert_eq!(proxy.metric("holdfast_config_generation").await, 2.0);
    let info = text(&conn.command(&["INFO", "holdfast"]).await);
    assert!(info.contains("namespace_moving:backend=main"), "{info}");

    // A generation that cannot be built is rejected and the running one stays.
    // Here: its password file, read when the configuration was checked, is gone by the
    // time the backend is built.
    let secrets = tempfile::tempdir().unwrap();
    let secret = secrets.path().join("password");
    std::fs::write(&secret, "pw\n").unwrap();
    let unbuildable = format!(
        "[backends.gone]\nkind = \"redis\"\nurl = \"{}\"\npassword_file = \"{}\"\n[[namespaces]]\nname = \"moving\"\nbackend = \"gone\"\n",
        b.url(),
        secret.display()
    );
    let mut config = holdfast::config::Config::from_toml(&unbuildable).unwrap();
    config.server.listen = proxy.addr.parse().unwrap();
    config.server.metrics_listen = proxy.metrics_addr.parse().unwrap();
    std::fs::remove_file(&secret).unwrap();
    let rejected = proxy.holdfast.reload(config).unwrap_err().to_string();
    assert!(rejected.contains("password_file"), "{rejected}");
    assert_eq!(conn.command(&["GET", "k"]).await, b"$4\r\non-b\r\n");
    assert_eq!(proxy.metric("holdfast_config_generation").await, 2.0);
    assert_eq!(
        proxy
            .metric(r#"holdfast_config_reloads_total{result="rejected"}"#)
            .await,
        1.0
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_endpoint_shows_the_effective_configuration_redacted() {
    let redis = RedisServer::start();
    // Not served unless asked for: the port answers without authentication.
    let closed = Proxy::start(&one_backend(&redis.url(), "closed", "")).await;
    let (status, body) = closed.http("/config").await;
    assert!(status.contains("404"), "{status} {body}");
    closed.stop().await;
    let config = format!(
        "[server]\nrequirepass = \"hunter2\"\nserve_config = true\n{}",
        one_backend(&redis.url(), "shown", "")
    );
    let proxy = Proxy::start(&config).await;
    let (status, body) = proxy.http("/config").await;
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("[[namespaces]]") && body.contains("name = \"shown\""),
        "{body}"
    );
    assert!(!body.contains("hunter2"), "{body}");
    assert!(body.contains("<redacted>"), "{body}");
    proxy.stop().await;
}

/// The real binary with a config file on free ports.
struct Binary {
    child: Child,
    addr: String,
    metrics_addr: String,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Binary {
    fn start(body: &str) -> Binary {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holdfast.toml");
        let (port, metrics) = (free_port(), free_port());
        let addr = format!("127.0.0.1:{port}");
        let metrics_addr = format!("127.0.0.1:{metrics}");
        let mut file = std::fs::File::create(&path).unwrap();
        write!(
            file,
            "[server]\nlisten = \"{addr}\"\nmetrics_listen = \"{metrics_addr}\"\n{body}"
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .arg("--config")
            .arg(&path)
            .env("HOLDFAST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Binary {
            child,
            addr,
            metrics_addr,
            _dir: dir,
            path,
        }
    }

    async fn connect(&self) -> RawConn {
        connect_when_listening(&self.addr).await
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit and returns its code and how long that took.
    async fn exit(&mut self, limit: Duration) -> (Option<i32>, Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), started.elapsed());
            }
            assert!(
                started.elapsed() < limit,
                "holdfast did not exit within {limit:?}"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    async fn metrics(&self) -> String {
        let (status, body) = Proxy::http_at(&self.metrics_addr, "/metrics").await;
        assert!(status.contains("200"), "{status}");
        body
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_held_requests_finish_then_exits_0() {
    let mut redis = RedisServer::start();
    let mut proxy = Binary::start(&one_backend(&redis.url(), "term", ""));
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    redis.kill();
    // Let holdfast see its backend connections close first: a command sent in the instant a
    // connection dies may have been written (INDOUBT); this test is about shutdown.
    sleep(Duration::from_millis(300)).await;
    conn.send(&encode_str(&["SET", "k", "w"])).await;
    sleep(Duration::from_millis(300)).await;
    proxy.signal("TERM");
    sleep(Duration::from_millis(500)).await;
    assert!(
        proxy.child.try_wait().unwrap().is_none(),
        "the held SET keeps it alive"
    );
    assert!(
        RawConn::try_connect(&proxy.addr, Duration::from_secs(1))
            .await
            .is_err(),
        "no new clients"
    );
    redis.restart();
    assert_eq!(conn.read_reply().await, b"+OK\r\n");
    let (code, _) = proxy.exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0));
    assert_eq!(redis.cmd(&["GET", "k"]), "$1\r\nw\r\n");
}

/// A client waiting between commands holds nothing up: at SIGTERM its connection is closed
/// at once, and holdfast exits long before the grace period would end.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_closes_idle_clients_at_once() {
    let redis = RedisServer::start();
    let mut proxy = Binary::start(&one_backend(&redis.url(), "idle", ""));
    let mut idle = proxy.connect().await;
    assert_eq!(idle.command(&["PING"]).await, b"+PONG\r\n");
    proxy.signal("TERM");
    let closed = idle.try_read_reply(Duration::from_secs(5)).await;
    assert!(
        matches!(closed, Err(support::resp::ReadError::Eof { .. })),
        "the idle client was not closed: {closed:?}"
    );
    let (code, took) = proxy.exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_grace_period_held_requests_get_a_clear_error() {
    let mut redis = RedisServer::start();
    let mut proxy = Binary::start(&format!(
        "shutdown_grace = \"1s\"\n{}",
        one_backend(&redis.url(), "grace", "")
    ));
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    redis.kill();
    // Let holdfast see its backend connections close first: a command sent in the instant a
    // connection dies may have been written (INDOUBT); this test is about shutdown.
    sleep(Duration::from_millis(300)).await;
    // One write, so both arrive in one read: holdfast closes a connection between reads once
    // it is shutting down, and a GET in a later read would never be taken.
    let mut both = encode_str(&["SET", "k", "w"]);
    both.extend(encode_str(&["GET", "k"]));
    conn.send(&both).await;
    sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    proxy.signal("TERM");
    // The held SET gives up when the grace period is over; the GET pipelined behind it gets
    // one attempt and the same clear answer; then the connection closes between commands.
    for command in ["SET", "GET"] {
        let reply = timeout(Duration::from_secs(10), conn.read_reply())
            .await
            .unwrap();
        let reply = text(&reply);
        assert!(
            reply.starts_with("-UNAVAILABLE not applied: holdfast is shutting down"),
            "{command}: {reply}"
        );
    }
    conn.expect_disconnect(Duration::from_secs(5)).await;
    let (code, _) = proxy.exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0));
    let took = signalled.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_exits_at_once() {
    let mut redis = RedisServer::start();
    let mut proxy = Binary::start(&one_backend(&redis.url(), "twice", ""));
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    redis.kill();
    conn.send(&encode_str(&["GET", "k"])).await;
    sleep(Duration::from_millis(300)).await;
    proxy.signal("TERM");
    sleep(Duration::from_millis(300)).await;
    assert!(proxy.child.try_wait().unwrap().is_none());
    proxy.signal("INT");
    let (code, took) = proxy.exit(Duration::from_secs(5)).await;
    assert_eq!(code, Some(1));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_the_file_and_keeps_it_on_a_bad_one() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    let proxy = Binary::start(&one_backend(&a.url(), "hup", ""));
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "a"]).await, b"+OK\r\n");
    let rewrite = |body: &str| {
        let mut file = std::fs::File::create(&proxy.path).unwrap();
        write!(
            file,
            "[server]\nlisten = \"{}\"\nmetrics_listen = \"{}\"\n{body}",
            proxy.addr, proxy.metrics_addr
        )
        .unwrap();
    };
    rewrite(&one_backend(&b.url(), "hup", ""));
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric_value(&proxy.metrics().await, "holdfast_config_generation") < 2.0 {
        assert!(Instant::now() < deadline, "the reload never applied");
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(conn.command(&["SET", "k", "b"]).await, b"+OK\r\n");
    assert_eq!(b.cmd(&["GET", "k"]), "$1\r\nb\r\n");

    rewrite("[[namespaces]]\nname = \"hup\"\nbackend = \"missing\"\n");
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric_value(
        &proxy.metrics().await,
        r#"holdfast_config_reloads_total{result="rejected"}"#,
    ) < 1.0
    {
        assert!(Instant::now() < deadline, "the bad file was never read");
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metric_value(&proxy.metrics().await, "holdfast_config_generation"),
        2.0
    );
    assert_eq!(conn.command(&["GET", "k"]).await, b"$1\r\nb\r\n");
}

/// A dispatch still in flight when the grace period ends (its backend blackholed) is
/// abandoned a moment later: the client hears it may have been applied, not silence.
#[tokio::test(flavor = "multi_thread")]
async fn a_dispatch_in_flight_at_the_end_of_the_grace_period_answers_indoubt() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let mut proxy = Binary::start(&format!(
        "shutdown_grace = \"1s\"\n{}",
        one_backend(&format!("redis://{}", relay.addr()), "inflight", "")
    ));
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    relay.blackhole();
    conn.send(&encode_str(&["SET", "k", "w"])).await;
    sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    proxy.signal("TERM");
    let reply = timeout(Duration::from_secs(10), conn.read_reply())
        .await
        .unwrap();
    let reply = text(&reply);
    assert!(
        reply.starts_with("-INDOUBT may have been applied: holdfast is shutting down"),
        "{reply}"
    );
    let (code, _) = proxy.exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
}

/// Logs to a pipe (a container runtime, a log shipper) carry no colour codes.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("holdfast.toml");
    let (port, metrics) = (free_port(), free_port());
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\n\
             [backends.local]\nkind = \"sqlite\"\npath = \"{}\"\n\
             [[namespaces]]\nname = \"default\"\nbackend = \"local\"\n",
            dir.path().join("db.sqlite").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("--config")
        .arg(&path)
        .env("HOLDFAST_LOG", "info")
        .env_remove("HOLDFAST_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let serving = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.contains("holdfast serving"));
    let _ = child.kill();
    let _ = child.wait();
    let line = serving.expect("the start is logged");
    assert!(
        !line.contains('\u{1b}'),
        "colour codes in a piped log: {line:?}"
    );
}

/// `check-config` of a configuration holding every kind of secret prints none of them.
#[test]
fn check_config_prints_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("pg-password");
    std::fs::write(&secret_file, "from-a-file\n").unwrap();
    let path = dir.path().join("holdfast.toml");
    let secrets = [
        "s3cret-requirepass",
        "s3cret-user",
        "p@ss-redis",
        "s3cret-query",
        "s3cret-multi",
        "s3cret-ssl",
        "from-a-file",
    ];
    std::fs::write(
        &path,
        format!(
            r#"
[server]
requirepass = "s3cret-requirepass"
[backends.cache]
kind = "redis"
url = "redis://u:p@ss-redis@127.0.0.1:6379/0"
[backends.pg]
kind = "postgres"
url = "postgres://u@127.0.0.1:5432/db?password=s3cret-query"
[backends.ha_pg]
kind = "postgres"
url = "postgres://u:s3cret-multi@127.0.0.1:5432,127.0.0.1:5433/db?sslmode=disable&sslpassword=s3cret-ssl"
[[namespaces]]
name = "default"
backend = "cache"
[[namespaces]]
name = "p"
prefixes = ["p:"]
backend = "pg"
[[namespaces]]
name = "h"
prefixes = ["h:"]
backend = "ha_pg"
[[users]]
name = "app"
password = "s3cret-user"
[[users]]
name = "ops"
password_file = "{}"
"#,
            secret_file.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    let logged = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{logged}");
    eprintln!("{printed}");
    for secret in secrets {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
        // Nor logged (a driver's warning about a parameter it ignores, with its value).
        assert!(!logged.contains(secret), "{secret} logged:\n{logged}");
        // Nor a part of it long enough to mean something.
        assert!(
            !printed.contains(&secret[..6]),
            "{secret} partly printed:\n{printed}"
        );
    }
    assert!(
        printed.contains("redis://u:<redacted>@127.0.0.1:6379/0"),
        "{printed}"
    );
    assert!(
        printed.contains(&secret_file.display().to_string()),
        "{printed}"
    );
}

/// A pipelined write sent ahead, whose reply was lost, is not refused by a reload that
/// narrowed its user's namespaces while a request before it was held: its first dispatch
/// went under the configuration that admitted it and may have applied it, and a refusal
/// reads as "not applied". It goes on (and here is applied once).
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_does_not_refuse_a_write_already_sent_ahead() {
    let redis = RedisServer::start();
    let relay = Relay::start(&redis.addr()).await;
    let config = |namespaces: &str| {
        format!(
            r#"
[defaults]
reply_mode = "fast"
acquire_timeout = "1s"
[defaults.retry]
min_delay = "1s"
max_attempts = 3
[backends.main]
kind = "redis"
url = "redis://{}"
pool_size = 1
[[namespaces]]
name = "a"
prefixes = ["a:"]
backend = "main"
[[namespaces]]
name = "b"
prefixes = ["b:"]
backend = "main"
[[namespaces]]
name = "rest"
backend = "main"
[[users]]
name = "app"
password = "pw"
namespaces = [{namespaces}]
"#,
            relay.addr()
        )
    };
    let proxy = Proxy::start(&config(r#""a", "b""#)).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["AUTH", "app", "pw"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "a:warm", "1"]).await, b"+OK\r\n");
    // Both written in one write; the connection drops before their replies.
    relay.drop_after_request_with(b"b:key");
    let mut run = support::resp::encode_str(&["SET", "a:key", "1"]);
    run.extend_from_slice(&support::resp::encode_str(&["SET", "b:key", "2"]));
    conn.send(&run).await;
    // While `SET a:key` waits out its backoff, the user loses namespace b.
    sleep(Duration::from_millis(300)).await;
    assert!(proxy.reload(&config(r#""a""#)).is_ok());
    let replies = conn.read_replies(2).await;
    let replies: Vec<String> = replies.iter().map(|r| text(r)).collect();
    assert_eq!(replies, ["+OK\r\n", "+OK\r\n"]);
    assert_eq!(redis.cmd(&["GET", "b:key"]), "$1\r\n2\r\n");
    // A new command to b is refused under the new configuration.
    let refused = text(&conn.command(&["SET", "b:other", "3"]).await);
    assert!(refused.starts_with("-NOPERM"), "{refused}");
    proxy.stop().await;
}
