//! What one scrape of `/metrics` costs a fleet: the series a holdfast exposes stay few as
//! clients use more commands (per-command labels are opt-in, `server.metrics_per_command`),
//! the backend's side of a request's time has a histogram of its own, and a command holdfast
//! does not know is counted under the catch-all namespace. Run on the binary: the label
//! choice is process-wide.

#[allow(unused_imports)]
use crate::support::*;

/// Three namespaces on one Redis: `a:`, `b:` and the catch-all.
fn three_namespaces(redis: &RedisServer, server_extra: &str) -> String {
    format!(
        "{server_extra}\n[defaults]\nreply_mode = \"fast\"\n\
         [backends.main]\nkind = \"redis\"\nurl = \"{}\"\n\
         [[namespaces]]\nname = \"a\"\nprefixes = [\"a:\"]\nbackend = \"main\"\n\
         [[namespaces]]\nname = \"b\"\nprefixes = [\"b:\"]\nbackend = \"main\"\n\
         [[namespaces]]\nname = \"default\"\nbackend = \"main\"\n",
        redis.url()
    )
}

/// Forty distinct commands on keys under `prefix`.
fn forty(prefix: &str) -> Vec<Vec<String>> {
    let k = |name: &str| format!("{prefix}{name}");
    let rows: Vec<Vec<String>> = vec![
        vec!["SET".into(), k("s"), "1".into()],
        vec!["GET".into(), k("s")],
        vec!["APPEND".into(), k("s"), "2".into()],
        vec!["STRLEN".into(), k("s")],
        vec!["GETRANGE".into(), k("s"), "0".into(), "1".into()],
        vec!["INCR".into(), k("n")],
        vec!["INCRBY".into(), k("n"), "2".into()],
        vec!["DECR".into(), k("n")],
        vec!["DECRBY".into(), k("n"), "2".into()],
        vec!["INCRBYFLOAT".into(), k("f"), "1.5".into()],
        vec!["SETNX".into(), k("x"), "1".into()],
        vec!["SETEX".into(), k("e"), "100".into(), "1".into()],
        vec!["PSETEX".into(), k("p"), "100000".into(), "1".into()],
        vec!["MSET".into(), k("m1"), "1".into(), k("m2"), "2".into()],
        vec!["MGET".into(), k("m1"), k("m2")],
        vec!["EXISTS".into(), k("s")],
        vec!["EXPIRE".into(), k("s"), "100".into()],
        vec!["TTL".into(), k("s")],
        vec!["PTTL".into(), k("s")],
        vec!["PERSIST".into(), k("s")],
        vec!["TYPE".into(), k("s")],
        vec!["HSET".into(), k("h"), "f".into(), "1".into()],
        vec!["HGET".into(), k("h"), "f".into()],
        vec!["HLEN".into(), k("h")],
        vec!["HGETALL".into(), k("h")],
        vec!["HINCRBY".into(), k("h"), "g".into(), "1".into()],
        vec!["HDEL".into(), k("h"), "f".into()],
        vec!["LPUSH".into(), k("l"), "1".into()],
        vec!["RPUSH".into(), k("l"), "2".into()],
        vec!["LLEN".into(), k("l")],
        vec!["LRANGE".into(), k("l"), "0".into(), "-1".into()],
        vec!["LPOP".into(), k("l")],
        vec!["RPOP".into(), k("l")],
        vec!["SADD".into(), k("t"), "1".into()],
        vec!["SCARD".into(), k("t")],
        vec!["SMEMBERS".into(), k("t")],
        vec!["SREM".into(), k("t"), "1".into()],
        vec!["ZADD".into(), k("z"), "1".into(), "m".into()],
        vec!["ZSCORE".into(), k("z"), "m".into()],
        vec!["ZCARD".into(), k("z")],
    ];
    assert_eq!(rows.len(), 40);
    rows
}

/// Sends the forty commands in each namespace, and one command holdfast does not know.
async fn use_forty_commands_in_three_namespaces(proxy: &Spawned) {
    let mut conn = proxy.connect().await;
    for prefix in ["a:", "b:", ""] {
        for row in forty(prefix) {
            let args: Vec<&str> = row.iter().map(String::as_str).collect();
            let reply = conn.command(&args).await;
            assert!(
                !reply.starts_with(b"-"),
                "{args:?}: {}",
                String::from_utf8_lossy(&reply)
            );
        }
    }
    let unknown = conn.command(&["NOSUCHCOMMAND", "x"]).await;
    assert!(String::from_utf8_lossy(&unknown).starts_with("-ERR unknown command"));
}

/// The series of one scrape (lines that are neither comments nor blank).
async fn scrape(proxy: &Spawned) -> Vec<String> {
    let (status, body) = Proxy::http_at(&proxy.metrics_addr, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn forty_commands_in_three_namespaces_make_fewer_than_300_series() {
    let redis = RedisServer::start();
    let proxy = Spawned::start(&three_namespaces(&redis, ""), &[]);
    use_forty_commands_in_three_namespaces(&proxy).await;
    let series = scrape(&proxy).await;
    assert!(
        series.len() < 300,
        "{} series:\n{}",
        series.len(),
        series.join("\n")
    );
    // By kind, not by name.
    assert!(
        !series.iter().any(|s| s.contains("command=\"HSET\"")),
        "a per-command series by default"
    );
    // 23 of the forty write, 17 read.
    let writes = r#"holdfast_requests_total{holdfast_namespace="a",command="write",outcome="ok"}"#;
    assert_eq!(proxy.metric(writes).await, 23.0);
    let reads = r#"holdfast_requests_total{holdfast_namespace="a",command="read",outcome="ok"}"#;
    assert_eq!(proxy.metric(reads).await, 17.0);
    // The backend's side of the time, per backend.
    let dispatched = proxy
        .metric(r#"holdfast_backend_duration_seconds_count{backend="main"}"#)
        .await;
    assert!(dispatched >= 120.0, "{dispatched}");
    // An unknown command under the catch-all namespace, not an empty one.
    assert_eq!(
        proxy
            .metric(r#"holdfast_requests_total{holdfast_namespace="default",command="unknown",outcome="refused"}"#)
            .await,
        1.0
    );
    assert!(!series.iter().any(|s| s.contains("holdfast_namespace=\"\"")));
    println!("{} series after 40 commands in 3 namespaces", series.len());
    every_family_is_in_the_docs(&proxy).await;
}

/// Every family a live scrape declares (`# TYPE name kind`) has its entry in docs/metrics.md:
/// a metric exported without one fails here.
async fn every_family_is_in_the_docs(proxy: &Spawned) {
    let (_, body) = Proxy::http_at(&proxy.metrics_addr, "/metrics").await;
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() > 20, "{body}");
    let missing: Vec<&&str> = families
        .iter()
        .filter(|f| !docs.contains(&format!("`{f}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn per_command_series_are_there_when_asked_for() {
    let redis = RedisServer::start();
    let proxy = Spawned::start(&three_namespaces(&redis, "metrics_per_command = true"), &[]);
    use_forty_commands_in_three_namespaces(&proxy).await;
    assert_eq!(
        proxy
            .metric(
                r#"holdfast_requests_total{holdfast_namespace="b",command="HSET",outcome="ok"}"#
            )
            .await,
        1.0
    );
    let series = scrape(&proxy).await;
    assert!(series.iter().any(|s| s.starts_with(
        "holdfast_request_duration_seconds_count{holdfast_namespace=\"a\",command=\"ZCARD\"}"
    )));
    println!("{} series with per-command labels", series.len());
}

/// One raw HTTP/1.1 exchange with the metrics port: (head, body).
async fn exchange(addr: &str, request: &str) -> (String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    (head, raw[split + 4..].to_vec())
}

/// The metrics port is an HTTP server a scraper and a probe can rely on: a query string is
/// ignored, `HEAD` answers `GET`'s headers and no body, another method is 405 with `Allow`,
/// and a scraper that accepts gzip gets the body compressed.
#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_port_speaks_http_as_scrapers_expect() {
    let redis = RedisServer::start();
    let proxy = Spawned::start(&three_namespaces(&redis, ""), &[]);
    let _ = proxy.connect().await;
    let addr = &proxy.metrics_addr;
    let close = "host: x\r\nconnection: close\r\n\r\n";
    let (head, body) = exchange(addr, &format!("GET /metrics?x=1 HTTP/1.1\r\n{close}")).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let plain = String::from_utf8(body).unwrap();
    assert!(plain.contains("holdfast_build_info"), "{plain}");

    let (head, body) = exchange(addr, &format!("HEAD /healthz HTTP/1.1\r\n{close}")).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-length: 3"), "{head}");
    assert!(body.is_empty());

    let (head, _) = exchange(
        addr,
        &format!("POST /metrics HTTP/1.1\r\ncontent-length: 0\r\n{close}"),
    )
    .await;
    assert!(head.starts_with("http/1.1 405"), "{head}");
    assert!(head.contains("allow: get, head"), "{head}");

    let (head, body) = exchange(
        addr,
        &format!("GET /metrics HTTP/1.1\r\naccept-encoding: gzip\r\n{close}"),
    )
    .await;
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut unpacked = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut unpacked)
        .unwrap();
    assert!(unpacked.contains("holdfast_build_info"));
    assert!(
        body.len() * 3 < unpacked.len(),
        "{} of {}",
        body.len(),
        unpacked.len()
    );
}

/// A connection to the metrics port that sends nothing, or nothing more after a request kept
/// alive, is closed after the head timeout (10 s): idle scrapers and probes hold nothing for
/// long.
#[tokio::test(flavor = "multi_thread")]
async fn silent_and_idle_metrics_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let redis = RedisServer::start();
    let proxy = Spawned::start(&three_namespaces(&redis, ""), &[]);
    let _ = proxy.connect().await;
    let closed_within = |mut stream: tokio::net::TcpStream| async move {
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            stream.read_to_end(&mut rest),
        )
        .await;
        assert!(read.is_ok(), "still open after 20 s");
        started.elapsed()
    };
    let silent = tokio::net::TcpStream::connect(&proxy.metrics_addr)
        .await
        .unwrap();
    let mut idle = tokio::net::TcpStream::connect(&proxy.metrics_addr)
        .await
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (silent, idle) = tokio::join!(closed_within(silent), closed_within(idle));
    for took in [silent, idle] {
        assert!(took < std::time::Duration::from_secs(15), "{took:?}");
    }
}
