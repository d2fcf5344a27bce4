//! Every metric holdfast exports: names, labels and help strings are declared here and only
//! here. Command labels come from the command table (bounded); `unknown` stands for the rest.

use crate::error::ErrorClass;
use crate::retry::Hooks;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::time::Instant;

/// Requests by namespace, command and outcome (`ok`, `error_reply`, `unavailable`,
/// `indoubt`, `refused`).
pub const REQUESTS: &str = "holdfast_requests_total";
/// Dispatches to a backend by namespace, backend, command and result class (`ok` or a class).
pub const DISPATCHES: &str = "holdfast_dispatches_total";
/// Retries scheduled by namespace, command and the class that caused them.
pub const RETRIES: &str = "holdfast_retries_total";
/// Requests that gave up (attempts used, or a dispatch that must not repeat) by namespace,
/// command and class.
pub const EXHAUSTED: &str = "holdfast_budget_exhaustions_total";
/// Retries skipped because the process-wide retry budget was empty, by namespace.
pub const BUDGET_DENIED: &str = "holdfast_retry_budget_denied_total";
/// Requests being held for a retry right now, by namespace.
pub const HELD: &str = "holdfast_held_requests";
/// Time a held request spent held, by namespace.
pub const HOLD_SECONDS: &str = "holdfast_hold_duration_seconds";
/// Time from a request's arrival to its reply, by namespace and command.
pub const REQUEST_SECONDS: &str = "holdfast_request_duration_seconds";
/// Client connections open now.
pub const CLIENTS: &str = "holdfast_client_connections";
/// Client connections accepted since start.
pub const CLIENTS_TOTAL: &str = "holdfast_client_connections_total";
/// Client connections refused at `server.max_clients`.
pub const CLIENTS_REFUSED: &str = "holdfast_client_connections_refused_total";
/// 1 when the backend answered its last readiness probe.
pub const BACKEND_UP: &str = "holdfast_backend_up";

/// Histogram buckets, in seconds, reaching past the default retry budget (~93 s, ~107 s with
/// jitter) so a held request lands in a finite bucket.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .map(|b| b.build_recorder())
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        // Another recorder may already be installed (an embedding application's); holdfast's
        // handle then renders only what it records itself, which is nothing. Say so.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        describe();
        handle
    })
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(REQUESTS, "Requests by namespace, command and outcome.");
    describe_counter!(
        DISPATCHES,
        "Dispatches to a backend by namespace, backend, command and result class."
    );
    describe_counter!(
        RETRIES,
        "Retries scheduled by namespace, command and the failure class that caused them."
    );
    describe_counter!(EXHAUSTED, "Requests that gave up with an UNAVAILABLE or INDOUBT error, by namespace, command and class.");
    describe_counter!(
        BUDGET_DENIED,
        "Retries skipped because the process-wide retry budget was empty."
    );
    describe_gauge!(HELD, "Requests held for a retry right now.");
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "Time a held request spent held."
    );
    describe_histogram!(
        REQUEST_SECONDS,
        Unit::Seconds,
        "Time from a request's arrival to its reply."
    );
    describe_gauge!(CLIENTS, "Client connections open now.");
    describe_counter!(CLIENTS_TOTAL, "Client connections accepted since start.");
    describe_counter!(
        CLIENTS_REFUSED,
        "Client connections refused at server.max_clients."
    );
    describe_gauge!(
        BACKEND_UP,
        "1 when the backend answered its last readiness probe."
    );
}

/// A client connection opened (true) or closed (false).
pub fn client_connection(open: bool) {
    if open {
        counter!(CLIENTS_TOTAL).increment(1);
        gauge!(CLIENTS).increment(1.0);
    } else {
        gauge!(CLIENTS).decrement(1.0);
    }
}

/// A client connection refused at the limit.
pub fn client_refused() {
    counter!(CLIENTS_REFUSED).increment(1);
}

/// A finished request.
pub fn request(namespace: &str, command: &'static str, outcome: &'static str, took: Duration) {
    counter!(REQUESTS, "namespace" => namespace.to_string(), "command" => command, "outcome" => outcome)
        .increment(1);
    histogram!(REQUEST_SECONDS, "namespace" => namespace.to_string(), "command" => command)
        .record(took.as_secs_f64());
}

/// A backend's readiness.
pub fn backend_up(backend: &str, up: bool) {
    gauge!(BACKEND_UP, "backend" => backend.to_string()).set(if up { 1.0 } else { 0.0 });
}

/// Records one request's passage through the retry loop.
pub struct RequestHooks<'a> {
    /// Namespace label.
    namespace: &'a str,
    /// Backend label.
    backend: &'a str,
    /// Command label.
    command: &'static str,
    /// When the request started being held, while it is.
    held_since: Option<Instant>,
}

impl<'a> RequestHooks<'a> {
    /// Hooks for one request.
    pub fn new(namespace: &'a str, backend: &'a str, command: &'static str) -> RequestHooks<'a> {
        RequestHooks {
            namespace,
            backend,
            command,
            held_since: None,
        }
    }

    /// A dispatch succeeded.
    pub fn dispatched_ok(&self) {
        self.dispatch("ok");
    }

    fn dispatch(&self, class: &'static str) {
        counter!(DISPATCHES,
            "namespace" => self.namespace.to_string(),
            "backend" => self.backend.to_string(),
            "command" => self.command,
            "class" => class)
        .increment(1);
    }

    fn release(&mut self) {
        if let Some(since) = self.held_since.take() {
            gauge!(HELD, "namespace" => self.namespace.to_string()).decrement(1.0);
            histogram!(HOLD_SECONDS, "namespace" => self.namespace.to_string())
                .record(since.elapsed().as_secs_f64());
        }
    }
}

impl Hooks for RequestHooks<'_> {
    fn failed(&mut self, class: ErrorClass) {
        self.dispatch(class.as_str());
    }

    fn retrying(&mut self, class: ErrorClass, attempt: u32, delay: Duration) {
        tracing::debug!(
            namespace = self.namespace,
            command = self.command,
            class = class.as_str(),
            attempt,
            delay_ms = delay.as_millis() as u64,
            "retrying"
        );
        counter!(RETRIES,
            "namespace" => self.namespace.to_string(),
            "command" => self.command,
            "class" => class.as_str())
        .increment(1);
    }

    fn budget_denied(&mut self) {
        counter!(BUDGET_DENIED, "namespace" => self.namespace.to_string()).increment(1);
    }

    fn held(&mut self, holding: bool) {
        if holding {
            if self.held_since.is_none() {
                self.held_since = Some(Instant::now());
                gauge!(HELD, "namespace" => self.namespace.to_string()).increment(1.0);
            }
        } else {
            self.release();
        }
    }

    fn gave_up(&mut self, class: ErrorClass, attempts: u32, elapsed: Duration, exhausted: bool) {
        tracing::warn!(
            namespace = self.namespace,
            command = self.command,
            class = class.as_str(),
            attempts,
            elapsed_ms = elapsed.as_millis() as u64,
            exhausted,
            "gave up"
        );
        counter!(EXHAUSTED,
            "namespace" => self.namespace.to_string(),
            "command" => self.command,
            "class" => class.as_str())
        .increment(1);
    }
}

impl Drop for RequestHooks<'_> {
    /// A request dropped while held (its client went away) leaves the gauge.
    fn drop(&mut self) {
        self.release();
    }
}
