//! The metrics port: `/metrics` (Prometheus text), `/healthz` (the process is up), `/readyz`
//! (holdfast is serving clients within its limits: see [`readiness`]), `/backendz` (every
//! backend answered a PING) and `/config` (the effective configuration, secrets redacted).
//! HTTP/1.1 by `hyper`: `GET` and `HEAD`, a query string ignored (`/metrics?x`), keep-alive,
//! and a body compressed with gzip for a scraper that accepts it (Prometheus does).

use crate::shared::{Serving, Shared};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ACCEPT_ENCODING, ALLOW, CONTENT_ENCODING, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long a readiness probe waits for each backend.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a connection may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bodies smaller than this are sent as they are: gzip would save less than it costs.
const GZIP_FROM: usize = 1024;

/// Serves the metrics port until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let handle = crate::metrics::install();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        let service = hyper::service::service_fn(move |request| {
            let shared = shared.clone();
            async move { Ok::<_, std::convert::Infallible>(respond(request, &shared, handle).await) }
        });
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = connection.await;
        });
    }
}

/// The response to one request.
async fn respond<B>(
    request: Request<B>,
    shared: &Shared,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) -> Response<Full<Bytes>> {
    let head = request.method() == Method::HEAD;
    let (status, body) = if request.method() != Method::GET && !head {
        ("405 Method Not Allowed", "GET or HEAD only\n".to_string())
    } else {
        route(request.uri().path(), shared, handle).await
    };
    let gzip = body.len() >= GZIP_FROM && accepts_gzip(&request);
    let body = if gzip {
        gzipped(body.as_bytes())
    } else {
        Bytes::from(body)
    };
    let status = status
        .get(..3)
        .and_then(|code| StatusCode::from_bytes(code.as_bytes()).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let length = body.len();
    // HEAD: the headers GET would send, its content-length included, and no body.
    let mut response = Response::new(Full::new(if head { Bytes::new() } else { body }));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    if gzip {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    headers.insert(hyper::header::CONTENT_LENGTH, HeaderValue::from(length));
    response
}

/// The status and body of `path` (its query string already left out).
async fn route(
    path: &str,
    shared: &Shared,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) -> (&'static str, String) {
    match path {
        "/metrics" => ("200 OK", crate::metrics::render(handle)),
        "/healthz" => ("200 OK", "ok\n".to_string()),
        "/readyz" => {
            let server = &shared.current().config.server;
            readiness(shared.serving(), shared.clients.count(), server.max_clients)
        }
        "/backendz" => backends(shared).await,
        "/config" => {
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
}

/// Whether the request's `Accept-Encoding` names gzip (with a weight above 0).
fn accepts_gzip<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// `body` compressed with gzip.
fn gzipped(body: &[u8]) -> Bytes {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(body);
    Bytes::from(encoder.finish().unwrap_or_default())
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
    fn gzip_when_the_client_accepts_it() {
        let table = [
            (None, false),
            (Some("gzip"), true),
            (Some("identity, gzip"), true),
            (Some("GZIP;q=0.5"), true),
            (Some("*"), true),
            (Some("gzip;q=0"), false),
            (Some("gzip; q=0.0"), false),
            (Some("deflate, br"), false),
        ];
        for (accept, want) in table {
            let mut request = Request::builder();
            if let Some(accept) = accept {
                request = request.header(ACCEPT_ENCODING, accept);
            }
            let request = request.body(()).unwrap();
            assert_eq!(accepts_gzip(&request), want, "{accept:?}");
        }
        let body = "holdfast_x 1\n".repeat(200);
        let packed = gzipped(body.as_bytes());
        assert!(packed.len() < body.len() / 10);
        let mut unpacked = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(&packed[..]),
            &mut unpacked,
        )
        .unwrap();
        assert_eq!(unpacked, body);
    }

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
