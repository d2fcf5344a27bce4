//! Shared support for the integration tests: real `redis-server`s, a fault-injecting relay,
//! raw RESP helpers, and holdfast itself started in-process on `127.0.0.1:0`.
#![allow(dead_code)]

pub mod cluster;
pub mod postgres;
pub mod redis;
pub mod relay;
pub mod resp;
pub mod sentinel;
pub mod tls;

// Each test binary uses its own part of the support code.
#[allow(unused_imports)]
pub use postgres::PgServer;
#[allow(unused_imports)]
pub use redis::RedisServer;
#[allow(unused_imports)]
pub use relay::Relay;
#[allow(unused_imports)]
pub use resp::{encode, encode_str, roundtrip, RawConn};

use holdfast::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A holdfast running in this test process.
pub struct Proxy {
    /// `127.0.0.1:P` of the Redis endpoint.
    pub addr: String,
    /// `127.0.0.1:P` of the metrics port.
    pub metrics_addr: String,
    /// Port of the Redis endpoint.
    pub port: u16,
    /// The running proxy, for reloads.
    pub holdfast: holdfast::Holdfast,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts holdfast on `config` (TOML; its `[server] listen` is replaced by a free port).
    pub async fn start(toml: &str) -> Proxy {
        // HF_TEST_LOG=holdfast=debug,fred=debug shows what the proxy did.
        if let Ok(filter) = std::env::var("HF_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let mut config = Config::from_toml(toml).unwrap_or_else(|e| panic!("bad test config: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics_addr = metrics.local_addr().unwrap();
        config.server.listen = addr;
        config.server.metrics_listen = metrics_addr;
        // The tests read series by command (`command="DEL"`); the label is process-wide, so
        // every in-process proxy sets it alike. The default (by kind) is tested on the binary.
        config.server.metrics_per_command = true;
        let (stop, stopped) = oneshot::channel::<()>();
        let proxy = holdfast::Holdfast::new(config).expect("holdfast builds");
        let serving = proxy.clone();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            serving.serve(listener, Some(metrics), shutdown).await;
        });
        Proxy {
            holdfast: proxy,
            addr: addr.to_string(),
            metrics_addr: metrics_addr.to_string(),
            port: addr.port(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Applies `toml` as a reload (its listeners are kept as they are) and returns the new
    /// generation, or the error that rejected it.
    pub fn reload(&self, toml: &str) -> Result<u64, String> {
        let mut config = Config::from_toml(toml).map_err(|e| e.to_string())?;
        config.server.listen = self.addr.parse().unwrap();
        config.server.metrics_listen = self.metrics_addr.parse().unwrap();
        config.server.metrics_per_command = true;
        self.holdfast.reload(config).map_err(|e| e.to_string())
    }

    /// A raw connection to the proxy.
    pub async fn connect(&self) -> RawConn {
        RawConn::connect(&self.addr).await
    }

    /// GET `path` on the metrics port: (status line, body).
    pub async fn http(&self, path: &str) -> (String, String) {
        Self::http_at(&self.metrics_addr, path).await
    }

    /// GET `path` on a metrics port at `addr`.
    pub async fn http_at(addr: &str, path: &str) -> (String, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or("").to_string();
        (status, body.to_string())
    }

    /// The value of the metric line that starts with `series` (name and labels), 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, body) = self.http("/metrics").await;
        metric_value(&body, series)
    }

    /// Stops the proxy and waits for it to drain.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Finds `series` (e.g. `holdfast_retries_total{holdfast_namespace="x",class="transient"}`)
/// in Prometheus text; labels may come in any order, so each `k="v"` of `series` is matched.
pub fn metric_value(body: &str, series: &str) -> f64 {
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.trim_end_matches('}')),
        None => (series, ""),
    };
    let wanted: Vec<&str> = labels.split(',').filter(|l| !l.is_empty()).collect();
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.split(['{', ' ']).next() == Some(name)
                && wanted.iter().all(|label| line.contains(label))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A config with one Redis backend as the catch-all namespace `ns`; `ns_extra` is appended
/// to the namespace (`acquire_timeout = "1s"`, a `[namespaces.retry]` table, ...).
pub fn one_backend(url: &str, ns: &str, ns_extra: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.main]
kind = "redis"
url = "{url}"
pool_size = 2
[[namespaces]]
name = "{ns}"
backend = "main"
{ns_extra}
"#
    )
}

/// holdfast run as its binary with `envs` (the system trust store is read from the
/// environment: `SSL_CERT_FILE`), `body` its configuration below `[server]`; killed on drop.
pub struct Spawned {
    child: std::process::Child,
    /// `127.0.0.1:P` of its Redis endpoint.
    pub addr: String,
    /// `127.0.0.1:P` of its metrics port.
    pub metrics_addr: String,
    _dir: tempfile::TempDir,
}

impl Spawned {
    pub fn start(body: &str, envs: &[(&str, &std::path::Path)]) -> Spawned {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holdfast.toml");
        let addr = format!("127.0.0.1:{}", free_port());
        let metrics = format!("127.0.0.1:{}", free_port());
        let text = format!("[server]\nlisten = \"{addr}\"\nmetrics_listen = \"{metrics}\"\n{body}");
        std::fs::write(&path, text).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"));
        command
            .arg("--config")
            .arg(&path)
            .env("HOLDFAST_LOG", "warn")
            // Only the test's own store: no directory, nor libpq's variables, may add to it.
            .env_remove("SSL_CERT_DIR")
            .env_remove("PGSSLROOTCERT")
            .env_remove("PGSSLMODE")
            .env_remove("PGPASSWORD")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        for (name, value) in envs {
            command.env(name, value);
        }
        let child = command.spawn().unwrap();
        Spawned {
            child,
            addr,
            metrics_addr: metrics,
            _dir: dir,
        }
    }

    pub async fn connect(&self) -> RawConn {
        connect_when_listening(&self.addr).await
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the process, by its PID.
    pub fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .arg(signal)
            .arg(self.child.id().to_string())
            .status();
    }

    /// The value of the metric line that starts with `series`, 0 if absent or not served.
    pub async fn metric(&self, series: &str) -> f64 {
        let Ok(Ok(mut stream)) = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            TcpStream::connect(&self.metrics_addr),
        )
        .await
        else {
            return 0.0;
        };
        let asked = stream
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await;
        let mut text = String::new();
        if asked.is_err() || stream.read_to_string(&mut text).await.is_err() {
            return 0.0;
        }
        metric_value(&text, series)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Python script written with redis-py, running: its stdin, stdout and stderr piped,
/// killed on drop (its directory goes with it).
pub struct RedisPy {
    pub child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

/// Runs `script` as `name` (not a standard library module's: `queue.py` would shadow the
/// one redis-py imports) with `args`. Panics when redis-py is missing: `tests/run` installs
/// it.
pub fn redis_py(name: &str, script: &str, args: &[&str]) -> RedisPy {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "redis-py is not installed: tests/run installs it");
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, script).expect("the script");
    let child = tokio::process::Command::new("python3")
        .arg(&path)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    RedisPy { child, _dir: dir }
}

/// Waits until `check` holds, or panics after `limit` naming `what`.
pub async fn until<F, Fut>(limit: std::time::Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Picks a free loopback port by binding port 0 and dropping the listener. A port is never
/// handed out twice in one test process: the kernel may give the same free port to two
/// calls in a row, and a server given it twice (a cluster node's bus and its TLS port, in
/// one CI run) cannot start.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to pick a port: {e}"))
            .local_addr()
            .expect("local_addr of a bound listener")
            .port();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Connects to a holdfast started as a process, waiting up to 10 s for it to listen.
pub async fn connect_when_listening(addr: &str) -> RawConn {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Ok(conn) = RawConn::try_connect(addr, std::time::Duration::from_secs(1)).await {
            return conn;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "holdfast never listened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// One catch-all namespace on the SQL backend `db` (`backend`: its TOML body), in fast mode.
pub fn sql_namespace(backend: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "fast"
[backends.db]
{backend}
[[namespaces]]
name = "all"
backend = "db"
"#
    )
}
