//! Every metric holdfast exports: names, labels and help strings are declared in
//! [`catalogue`] and only there; here they are installed, recorded and rendered. Command
//! labels come from the command table (bounded); `unknown` stands for the rest.

mod catalogue;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use catalogue::*;

/// Histogram buckets, in seconds, reaching past the default retry budget (~93 s, ~107 s with
/// jitter) so a held request lands in a finite bucket. Thirteen, fine below 10 ms where a
/// proxied request's time is and coarse above: each histogram series costs a scrape 16
/// lines, and a fleet of sidecars multiplies them (20 buckets made 23).
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0, 120.0,
];

/// Group sizes: one request up to a full group.
const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(GROUP_COMMIT.name.to_string()),
                    GROUP_BUCKETS,
                )
            })
            .map(|b| b.build_recorder())
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        // Another recorder may already be installed (an embedding application's); holdfast's
        // handle then renders only what it records itself, which is nothing. Say so.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        } else {
            let _ = INSTALLED.set(());
        }
        describe();
        handle
    })
}

/// The families [`render`] writes itself rather than the exporter.
const SELF_RENDERED: &[Def] = &[
    REQUEST_SECONDS,
    BACKEND_SECONDS,
    IN_FLIGHT,
    RECEIVED_BYTES,
    SENT_BYTES,
];

/// The process's CPU, memory, threads and descriptors, read at each scrape.
fn process() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

fn describe() {
    process().describe();
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    for def in CATALOGUE {
        // Rendered by holdfast itself (see `Durations` and `NamespaceSeries`).
        if SELF_RENDERED.iter().any(|own| own.name == def.name) {
            continue;
        }
        match def.kind {
            SeriesKind::Counter => describe_counter!(def.name, def.help),
            SeriesKind::Gauge => describe_gauge!(def.name, def.help),
            SeriesKind::Histogram if def.name == GROUP_COMMIT.name => {
                describe_histogram!(def.name, Unit::Count, def.help)
            }
            SeriesKind::Histogram => describe_histogram!(def.name, Unit::Seconds, def.help),
        }
    }
}

/// A client connection opened (true) or closed (false).
pub fn client_connection(open: bool) {
    if open {
        counter!(CLIENTS_TOTAL.name).increment(1);
        gauge!(CLIENTS.name).increment(1.0);
    } else {
        gauge!(CLIENTS.name).decrement(1.0);
    }
}

/// A client connection refused at the limit.
pub fn client_refused() {
    counter!(CLIENTS_REFUSED.name).increment(1);
}

/// A finished request.
pub fn request(namespace: &str, command: &'static str, outcome: &'static str, took: Duration) {
    let make = || {
        (
            counter!(REQUESTS.name, NAMESPACE => namespace.to_string(), "command" => command, "outcome" => outcome),
            Durations::request(namespace, command),
        )
    };
    cached(
        &REQUEST_HANDLES,
        (command, outcome),
        (namespace, ""),
        make,
        |(requests, seconds)| {
            requests.increment(1);
            seconds.record(took);
        },
    );
}

/// Durations ([`REQUEST_SECONDS`], [`BACKEND_SECONDS`]), counted into [`BUCKETS`] as they
/// happen and rendered by [`render`] beside the exporter's series. The exporter keeps every
/// sample of a histogram until its next upkeep (every 5 s here): under load that holds
/// megabytes, and costs an allocation every 64 requests, to show the same counts per bucket
/// in the end.
struct Durations {
    family: &'static Def,
    /// The series' labels, rendered (`holdfast_namespace="a",command="read"`).
    labels: Box<str>,
    /// Requests per bucket, not cumulative; the last counts those past every bound.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// Every [`Durations`] series, in the order they appeared.
static DURATIONS: Mutex<Vec<Arc<Durations>>> = Mutex::new(Vec::new());

impl Durations {
    /// The request-duration series of `namespace` and `command`, made the first time.
    fn request(namespace: &str, command: &'static str) -> Arc<Durations> {
        let labels = format!(
            "{NAMESPACE}=\"{}\",command=\"{}\"",
            escape(namespace),
            escape(command)
        );
        Durations::of(&REQUEST_SECONDS, labels)
    }

    /// The series of `family` with `labels`, made the first time.
    fn of(family: &'static Def, labels: String) -> Arc<Durations> {
        let mut all = DURATIONS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = all
            .iter()
            .find(|d| d.family.name == family.name && *d.labels == *labels)
        {
            return found.clone();
        }
        let made = Arc::new(Durations {
            family,
            labels: labels.into(),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        });
        all.push(made.clone());
        made
    }

    /// Counts `times` samples of `took`.
    fn record_n(&self, took: Duration, times: u64) {
        let seconds = took.as_secs_f64();
        // Most requests land in the first bucket or two: a scan from the start ends soonest.
        let at = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[at].fetch_add(times, Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos
            .fetch_add(nanos.saturating_mul(times), Relaxed);
    }

    fn record(&self, took: Duration) {
        self.record_n(took, 1);
    }

    /// This series in Prometheus's text format: cumulative buckets, `+Inf`, sum and count.
    fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let name = self.family.name;
        let labels = &self.labels;
        let mut total = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            total += bucket.load(Relaxed);
            let le = BUCKETS.get(i).map_or("+Inf".to_string(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {total}");
        }
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
    }
}

thread_local! {
    /// Each backend's [`BACKEND_SECONDS`] series, by name, kept per thread: a few, found by
    /// comparing in place (`same`), not hashed, as the request path's other handles.
    static BACKEND_DURATIONS: RefCell<Vec<(Box<str>, Arc<Durations>)>> =
        const { RefCell::new(Vec::new()) };
}

/// `requests` requests took `took` at backend `backend`, from the dispatch to its result
/// (together: a pipelined run or a group-commit batch is one wait for each of them).
pub fn backend_dispatched(backend: &str, requests: usize, took: Duration) {
    BACKEND_DURATIONS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, series)) = cache.iter().find(|(name, _)| same(name, backend)) {
            return series.record_n(took, requests as u64);
        }
        let series = Durations::of(&BACKEND_SECONDS, format!("backend=\"{}\"", escape(backend)));
        series.record_n(took, requests as u64);
        cache.push((backend.into(), series));
    });
}

/// Whether the per-request series are labelled by command name (`server.metrics_per_command`).
static PER_COMMAND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The `command` label of a request of command `name`, a read or not: its name with
/// `server.metrics_per_command`, else its kind, `read` or `write`.
pub fn command_label(name: &'static str, read: bool) -> &'static str {
    if PER_COMMAND.load(Relaxed) {
        name
    } else if read {
        "read"
    } else {
        "write"
    }
}

/// The `command` label of a request refused before it was parsed whole (an unknown
/// subcommand, a wrong arity): its name with `server.metrics_per_command`, else `invalid`.
pub fn refused_label(name: &'static str) -> &'static str {
    if PER_COMMAND.load(Relaxed) {
        name
    } else {
        "invalid"
    }
}

/// A label value as Prometheus's text format quotes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Everything `/metrics` shows: the process's series, the exporter's, then the series holdfast
/// renders itself (request durations, per-namespace traffic).
pub fn render(handle: &PrometheusHandle) -> String {
    if INSTALLED.get().is_some() {
        process().collect();
    }
    let mut out = handle.render();
    use std::fmt::Write;
    let namespaces: Vec<&'static NamespaceSeries> =
        NAMESPACES.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let families: [(&Def, Reading); 3] = [
        (&IN_FLIGHT, |s| s.in_flight.load(Relaxed)),
        (&RECEIVED_BYTES, |s| s.received.load(Relaxed) as i64),
        (&SENT_BYTES, |s| s.sent.load(Relaxed) as i64),
    ];
    if !namespaces.is_empty() {
        for (def, value) in families {
            let kind = if def.kind == SeriesKind::Gauge {
                "gauge"
            } else {
                "counter"
            };
            let _ = writeln!(out, "# HELP {} {}", def.name, def.help);
            let _ = writeln!(out, "# TYPE {} {kind}", def.name);
            for series in &namespaces {
                let name = escape(&series.name);
                let _ = writeln!(
                    out,
                    "{}{{{NAMESPACE}=\"{name}\"}} {}",
                    def.name,
                    value(series)
                );
            }
        }
    }
    let all: Vec<Arc<Durations>> = DURATIONS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for family in [&REQUEST_SECONDS, &BACKEND_SECONDS] {
        let mut series = all
            .iter()
            .filter(|d| d.family.name == family.name)
            .peekable();
        if series.peek().is_none() {
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} histogram", family.name);
        for durations in series {
            durations.render(&mut out);
        }
    }
    out
}

/// Reads one value of a [`NamespaceSeries`].
type Reading = fn(&NamespaceSeries) -> i64;

/// A namespace's series that holdfast counts itself, with no registry lookup on the request
/// path: requests in flight, bytes received and sent. One per namespace name, made when a
/// configuration first names it and kept for the process's life (a reload keeps counting;
/// the names ever configured bound them).
#[derive(Debug)]
pub struct NamespaceSeries {
    name: Box<str>,
    in_flight: AtomicI64,
    received: AtomicU64,
    sent: AtomicU64,
}

/// Every [`NamespaceSeries`], in the order they were made.
static NAMESPACES: Mutex<Vec<&'static NamespaceSeries>> = Mutex::new(Vec::new());

/// The series of namespace `name`, made the first time (at 0).
pub fn namespace_series(name: &str) -> &'static NamespaceSeries {
    let mut all = NAMESPACES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = all.iter().find(|s| &*s.name == name) {
        return found;
    }
    let made: &'static NamespaceSeries = Box::leak(Box::new(NamespaceSeries {
        name: name.into(),
        in_flight: AtomicI64::new(0),
        received: AtomicU64::new(0),
        sent: AtomicU64::new(0),
    }));
    all.push(made);
    made
}

impl NamespaceSeries {
    /// A request is forwarded: in flight until the returned guard is dropped (answered, or
    /// its client gone while it was held).
    pub fn in_flight(&'static self) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self)
    }

    /// A forwarded request of `received` bytes was answered with `sent` bytes.
    pub fn exchanged(&self, received: usize, sent: usize) {
        self.received.fetch_add(received as u64, Relaxed);
        self.sent.fetch_add(sent as u64, Relaxed);
    }
}

/// A request in flight; see [`NamespaceSeries::in_flight`].
#[derive(Debug)]
pub struct InFlight(&'static NamespaceSeries);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Registers at 0 every series whose labels the configuration bounds (namespaces, backends,
/// classes, limits, reload results), at start and at each reload: a counter first seen at 1
/// has no increase to alert on. Series labelled by command appear with the command's first
/// request; registering every command of the table would put thousands of series in every
/// scrape, and no alert reads them.
pub fn register(config: &crate::config::Config) {
    use crate::config::BackendConfig;
    PER_COMMAND.store(config.server.metrics_per_command, Relaxed);
    gauge!(BUILD_INFO.name, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let _ = counter!(CLIENTS_TOTAL.name);
    let _ = counter!(CLIENTS_REFUSED.name);
    let _ = gauge!(CLIENTS.name);
    let _ = gauge!(PUBSUB_CLIENTS.name);
    for result in RELOAD_RESULTS {
        let _ = counter!(CONFIG_RELOADS.name, "result" => *result);
    }
    for limit in LIMIT_NAMES {
        let _ = counter!(LIMITS.name, "limit" => *limit);
    }
    for ns in &config.namespaces {
        let name = &ns.name;
        namespace_series(name);
        let _ = gauge!(HELD.name, NAMESPACE => name.clone());
        let _ = histogram!(HOLD_SECONDS.name, NAMESPACE => name.clone());
        let _ = counter!(BUDGET_DENIED.name, NAMESPACE => name.clone());
        for class in FAILURE_CLASSES {
            let _ = counter!(RETRIES.name, NAMESPACE => name.clone(), "class" => *class);
            let _ = counter!(EXHAUSTED.name, NAMESPACE => name.clone(), "class" => *class);
        }
    }
    for (name, backend) in &config.backends {
        let redis = matches!(
            backend,
            BackendConfig::Redis(_) | BackendConfig::Sentinel(_) | BackendConfig::Cluster(_)
        );
        if redis {
            let _ = gauge!(POOL_CONNECTED.name, "backend" => name.clone());
            let _ = gauge!(POOL_WAITING.name, "backend" => name.clone());
            let _ = gauge!(WARM.name, "backend" => name.clone());
            let _ = counter!(FENCED.name, "backend" => name.clone());
            let _ = counter!(PUBSUB_RESUBSCRIBES.name, "backend" => name.clone());
        }
        if matches!(
            backend,
            BackendConfig::Sentinel(_) | BackendConfig::Cluster(_)
        ) {
            let _ = counter!(PRIMARY_CHANGES.name, "backend" => name.clone());
        }
        if matches!(backend, BackendConfig::Sentinel(_)) {
            let _ = histogram!(FAILOVER_SECONDS.name, "backend" => name.clone());
        }
        if matches!(backend, BackendConfig::Postgres(_)) {
            let _ = counter!(PUBSUB_RESUBSCRIBES.name, "backend" => name.clone());
        }
        if !redis {
            let _ = histogram!(GROUP_COMMIT.name, "backend" => name.clone());
        }
    }
}

/// Handles of the per-request series, kept per thread: looking a series up in the registry
/// builds its labels and hashes them, which cost as much as the rest of a pipelined request.
/// Keyed by the static labels, then the namespace and backend, compared in place (a few).
/// The static labels are told apart by address (the same text at two addresses only makes
/// two entries for one series), hashed by [`Addresses`].
type HandleCache<H> = RefCell<HashMap<(usize, usize), Vec<(Box<str>, Box<str>, H)>, Addresses>>;

/// Hashes a pair of addresses with one multiply each (FxHash's step): SipHash over two words
/// cost more than the lookup it guards.
#[derive(Clone, Copy, Default)]
struct Addresses;

impl std::hash::BuildHasher for Addresses {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

thread_local! {
    static REQUEST_HANDLES: HandleCache<(metrics::Counter, Arc<Durations>)> =
        RefCell::new(HashMap::default());
    static DISPATCH_HANDLES: HandleCache<metrics::Counter> = RefCell::new(HashMap::default());
}

/// Runs `record` on the cached handles of `key` and the (namespace, backend) `labels`, made by
/// `make` the first time (and every time until holdfast's recorder is installed, so no
/// handle of a no-op recorder is kept). The handles are used in place, not cloned: each clone
/// and drop is an atomic count.
fn cached<H>(
    cache: &'static std::thread::LocalKey<HandleCache<H>>,
    key: (&'static str, &'static str),
    (namespace, backend): (&str, &str),
    make: impl FnOnce() -> H,
    record: impl FnOnce(&H),
) {
    cache.with(|cache| {
        let mut cache = cache.borrow_mut();
        let address = (key.0.as_ptr() as usize, key.1.as_ptr() as usize);
        let entries = cache.entry(address).or_default();
        if let Some((_, _, handles)) = entries
            .iter()
            .find(|(ns, be, _)| same(ns, namespace) && same(be, backend))
        {
            return record(handles);
        }
        let handles = make();
        record(&handles);
        if INSTALLED.get().is_some() {
            entries.push((namespace.into(), backend.into(), handles));
        }
    })
}

/// Whether two labels are equal, compared in line: `==` calls `memcmp`, a call too dear for
/// two short labels on every request.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}

/// Set once holdfast's recorder is installed.
static INSTALLED: OnceLock<()> = OnceLock::new();

/// A backend's readiness.
pub fn backend_up(backend: &str, up: bool) {
    gauge!(BACKEND_UP.name, "backend" => backend.to_string()).set(if up { 1.0 } else { 0.0 });
}

/// One dispatch of a request ended: `class` is `ok` or the failure's class.
pub fn dispatch(namespace: &str, backend: &str, command: &'static str, class: &'static str) {
    let make = || {
        counter!(DISPATCHES.name,
            NAMESPACE => namespace.to_string(),
            "backend" => backend.to_string(),
            "command" => command,
            "class" => class)
    };
    cached(
        &DISPATCH_HANDLES,
        (command, class),
        (namespace, backend),
        make,
        |dispatches| dispatches.increment(1),
    );
}

/// A request is retried after a failure of `class`.
pub fn retry(namespace: &str, class: &'static str) {
    counter!(RETRIES.name, NAMESPACE => namespace.to_string(), "class" => class).increment(1);
}

/// A held request skipped a dispatch: the process-wide retry budget was empty.
pub fn budget_denied(namespace: &str) {
    counter!(BUDGET_DENIED.name, NAMESPACE => namespace.to_string()).increment(1);
}

/// A request starts being held.
pub fn hold_started(namespace: &str) {
    gauge!(HELD.name, NAMESPACE => namespace.to_string()).increment(1.0);
}

/// A request stops being held after `held`.
pub fn hold_ended(namespace: &str, held: Duration) {
    gauge!(HELD.name, NAMESPACE => namespace.to_string()).decrement(1.0);
    histogram!(HOLD_SECONDS.name, NAMESPACE => namespace.to_string()).record(held.as_secs_f64());
}

/// A request gave up after a failure of `class`.
pub fn gave_up(namespace: &str, class: &'static str) {
    counter!(EXHAUSTED.name, NAMESPACE => namespace.to_string(), "class" => class).increment(1);
}

/// A reply given for the request's first application in `mode` (settled, exact).
pub fn reply_correction(namespace: &str, command: &'static str, mode: &'static str) {
    counter!(CORRECTIONS.name, NAMESPACE => namespace.to_string(), "command" => command, "mode" => mode)
        .increment(1);
}

/// Requests waiting in `namespace`'s mirror queue.
pub fn mirror_queued(namespace: &str, queued: usize) {
    gauge!(MIRROR_QUEUED.name, NAMESPACE => namespace.to_string()).set(queued as f64);
}

/// A command replayed on `namespace`'s mirror, `ok` or `error`.
pub fn mirror_applied(namespace: &str, result: &'static str) {
    counter!(MIRROR_APPLIED.name, NAMESPACE => namespace.to_string(), "result" => result)
        .increment(1);
}

/// A write not replayed: the mirror queue was full.
pub fn mirror_dropped(namespace: &str) {
    counter!(MIRROR_DROPPED.name, NAMESPACE => namespace.to_string()).increment(1);
}

/// A key copied to `namespace`'s mirror.
pub fn mirror_copied(namespace: &str) {
    counter!(MIRROR_COPIED.name, NAMESPACE => namespace.to_string()).increment(1);
}

/// Keys marked to be copied again (-1: all).
pub fn mirror_behind(namespace: &str, keys: i64) {
    gauge!(MIRROR_BEHIND.name, NAMESPACE => namespace.to_string()).set(keys as f64);
}

/// A read compared on the mirror.
pub fn mirror_compared(namespace: &str, result: &'static str) {
    counter!(MIRROR_COMPARED.name, NAMESPACE => namespace.to_string(), "result" => result)
        .increment(1);
}

/// A confirmed difference of a read's replies.
pub fn mirror_difference(namespace: &str, command: &'static str) {
    counter!(MIRROR_DIFFERENCES.name, NAMESPACE => namespace.to_string(), "command" => command)
        .increment(1);
}

/// A fast-mode reply that may under-count.
pub fn uncertain_reply(namespace: &str, command: &'static str) {
    counter!(UNCERTAIN.name, NAMESPACE => namespace.to_string(), "command" => command).increment(1);
}

/// One group-commit transaction of `requests` requests.
pub fn group_commit(backend: &str, requests: usize) {
    histogram!(GROUP_COMMIT.name, "backend" => backend.to_string()).record(requests as f64);
}

/// A pooled backend connection came up (true) or went down (false).
pub fn pool_connected(backend: &str, up: bool) {
    let g = gauge!(POOL_CONNECTED.name, "backend" => backend.to_string());
    if up {
        g.increment(1.0);
    } else {
        g.decrement(1.0);
    }
}

/// `ready` links are dialled ahead for the backend's clients' own connections now.
pub fn warm_connections(backend: &str, ready: usize) {
    gauge!(WARM.name, "backend" => backend.to_string()).set(ready as f64);
}

/// A Sentinel backend's primary moved.
pub fn primary_changed(backend: &str) {
    counter!(PRIMARY_CHANGES.name, "backend" => backend.to_string()).increment(1);
}

/// A backend connection was fenced (its primary moved or is down).
pub fn connection_fenced(backend: &str) {
    if !backend.is_empty() {
        counter!(FENCED.name, "backend" => backend.to_string()).increment(1);
    }
}

/// The new primary served its first request, `took` after the move was heard.
pub fn primary_served(backend: &str, took: Duration) {
    histogram!(FAILOVER_SECONDS.name, "backend" => backend.to_string()).record(took.as_secs_f64());
}

/// An attempt starts (true) or stops (false) waiting for a dial.
pub fn pool_waiting(backend: &str, waiting: bool) {
    let g = gauge!(POOL_WAITING.name, "backend" => backend.to_string());
    if waiting {
        g.increment(1.0);
    } else {
        g.decrement(1.0);
    }
}

/// A request or connection was stopped at `limit`.
pub fn limit(limit: &'static str) {
    debug_assert!(
        LIMIT_NAMES.contains(&limit),
        "limit {limit} is not in LIMIT_NAMES"
    );
    counter!(LIMITS.name, "limit" => limit).increment(1);
}

/// Pub/Sub subscriptions were restored on `backend` after its connection ended.
pub fn pubsub_resubscribe(backend: &str) {
    counter!(PUBSUB_RESUBSCRIBES.name, "backend" => backend.to_string()).increment(1);
}

/// A client began (+1) or stopped (-1) having subscriptions.
pub fn pubsub_clients(delta: f64) {
    gauge!(PUBSUB_CLIENTS.name).increment(delta);
}

/// A configuration generation was applied.
pub fn config_generation(generation: u64) {
    gauge!(CONFIG_GENERATION.name).set(generation as f64);
}

/// A reload was applied (true) or rejected (false).
pub fn config_reload(applied: bool) {
    counter!(CONFIG_RELOADS.name, "result" => if applied { "applied" } else { "rejected" })
        .increment(1);
}

#[cfg(test)]
mod tests;
