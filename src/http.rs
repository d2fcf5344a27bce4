//! The metrics port: `/metrics` (Prometheus text), `/healthz` (the process is up), `/readyz`
//! (holdfast is serving clients within its limits: see [`readiness`]), `/backendz` (every
//! backend answered a PING) and `/config` (the effective configuration, secrets redacted).
//! A deliberately tiny HTTP/1.1 responder: one request per connection, GET only, no body.

use crate::shared::{Serving, Shared};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head read; anything longer is refused.
const MAX_HEAD: usize = 8 * 1024;
/// How long a readiness probe waits for each backend.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves the metrics port until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let handle = crate::metrics::install();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), respond(stream, &shared, handle))
                .await;
        });
    }
}

async fn respond(
    mut stream: TcpStream,
    shared: &Shared,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let (status, body) = if method != b"GET" {
        ("405 Method Not Allowed", "GET only\n".to_string())
    } else {
        match path {
            b"/metrics" => ("200 OK", crate::metrics::render(handle)),
            b"/healthz" => ("200 OK", "ok\n".to_string()),
            b"/readyz" => {
                let server = &shared.current().config.server;
                readiness(shared.serving(), shared.clients.count(), server.max_clients)
            }
            b"/backendz" => backends(shared).await,
            b"/config" => {
                let config = &shared.current().config;
                if config.server.serve_config {
                    ("200 OK", config.to_toml_redacted())
                } else {
                    (
                        "404 Not Found",
                        "not served: set server.serve_config = true\n".to_string(),
                    )
                }
            }
            _ => ("404 Not Found", "not found\n".to_string()),
        }
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// Whether holdfast is ready for clients: accepting them, and below `max_clients`. Backend
/// health is not part of it: holdfast exists to hold requests through a backend's failover,
/// and a sidecar's readiness gates its pod's, so a Redis failover failing it would take every
/// application pod out of its Services at once — the outage holdfast is there to hide.
/// Backend health is `holdfast_backend_up` (and its alert) and `/backendz`.
pub fn readiness(serving: Serving, clients: usize, max_clients: usize) -> (&'static str, String) {
    match serving {
        Serving::NotYet => (
            "503 Service Unavailable",
            "not accepting clients yet\n".into(),
        ),
        Serving::Draining => ("503 Service Unavailable", "shutting down\n".into()),
        Serving::Accepting if clients >= max_clients => (
            "503 Service Unavailable",
            format!("at server.max_clients ({max_clients} clients)\n"),
        ),
        Serving::Accepting => ("200 OK", "serving\n".into()),
    }
}

/// `/backendz`: every backend of the running generation probed now; 503 when one is down.
async fn backends(shared: &Shared) -> (&'static str, String) {
    let mut body = String::new();
    let mut all = true;
    for (name, up) in probe(shared).await {
        all &= up;
        body.push_str(&format!("{name} {}\n", if up { "up" } else { "down" }));
    }
    if all {
        ("200 OK", body)
    } else {
        ("503 Service Unavailable", body)
    }
}

/// Probes every backend of the running generation and records each answer in
/// `holdfast_backend_up` and the health log (`backend::health`).
async fn probe(shared: &Shared) -> Vec<(String, bool)> {
    let state = shared.current();
    let mut results = Vec::new();
    for backend in state.backends.iter() {
        let checked = backend.check(READY_TIMEOUT).await;
        let up = checked.is_ok();
        let address = state
            .config
            .backends
            .get(backend.name())
            .map(crate::config::BackendConfig::address)
            .unwrap_or_default();
        shared.health.observe(backend.name(), &address, &checked);
        crate::metrics::backend_up(backend.name(), up);
        results.push((backend.name().to_string(), up));
    }
    results
}

/// How often backend health is probed for the metrics.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// Keeps `holdfast_backend_up` current: probes every backend each [`HEALTH_INTERVAL`], so the
/// metric tells a backend's health whether or not anyone polls `/backendz`. Also folds
/// the histograms' recorded samples into their buckets: the exporter keeps every sample until
/// then, so without it memory would grow with each request until someone scraped `/metrics`.
pub async fn watch_health(shared: std::sync::Arc<Shared>) {
    let mut every = tokio::time::interval(HEALTH_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        crate::metrics::install().run_upkeep();
        probe(&shared).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_while_accepting_below_the_client_limit_whatever_the_backends() {
        let cases = [
            (Serving::NotYet, 0, 10, "503"),
            (Serving::Accepting, 0, 10, "200"),
            (Serving::Accepting, 9, 10, "200"),
            (Serving::Accepting, 10, 10, "503"),
            (Serving::Accepting, 11, 10, "503"),
            (Serving::Draining, 0, 10, "503"),
        ];
        for (serving, clients, max, want) in cases {
            let (status, body) = readiness(serving, clients, max);
            assert!(
                status.starts_with(want),
                "{serving:?} {clients}/{max}: {status} {body}"
            );
        }
    }
}
