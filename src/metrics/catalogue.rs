//! The catalogue: every metric's name, kind, labels and help, and the label values they
//! take. Dashboards, alert rules and tests check their queries against it.

/// What kind of series a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A histogram, in seconds.
    Histogram,
}

/// One metric of the catalogue.
#[derive(Clone, Copy, Debug)]
pub struct Def {
    /// The series name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: SeriesKind,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// The help text.
    pub help: &'static str,
}

const fn def(
    name: &'static str,
    kind: SeriesKind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Def {
    Def {
        name,
        kind,
        labels,
        help,
    }
}

use SeriesKind::{Counter, Gauge, Histogram};

/// The label naming a holdfast namespace. Not `namespace`: a Kubernetes pod scrape attaches
/// the pod's namespace under that name and renames holdfast's to `exported_namespace`.
pub const NAMESPACE: &str = "holdfast_namespace";

/// The classes a failure may have, as the `class` label spells them.
pub const FAILURE_CLASSES: &[&str] = &["not_attempted", "transient", "other"];

/// Every `limit` label value of [`LIMITS`].
pub const LIMIT_NAMES: &[&str] = &[
    "max_request_bytes",
    "max_bulk_bytes",
    "max_arguments",
    "max_keys_per_command",
    "max_queued_commands",
    "max_pubsub_backlog",
    "monitor_backlog",
    "pubsub_lost",
    "pubsub_gap",
    "idle_timeout",
    "tls_handshake",
    "inline",
    "malformed",
];

/// The `result` label values of [`CONFIG_RELOADS`].
pub const RELOAD_RESULTS: &[&str] = &["applied", "rejected"];

/// Requests by outcome: `ok`, `error_reply`, `unavailable`, `indoubt`, `refused`.
pub const REQUESTS: Def = def(
    "holdfast_requests_total",
    Counter,
    &[NAMESPACE, "command", "outcome"],
    "Requests by namespace, command and outcome (ok, error_reply, unavailable, indoubt, refused).",
);
/// Attempts at a backend by result class: `ok`, `not_attempted`, `transient`, `other`.
pub const DISPATCHES: Def = def(
    "holdfast_dispatches_total",
    Counter,
    &[NAMESPACE, "backend", "command", "class"],
    "Attempts at a backend by namespace, backend, command and result class (ok, not_attempted, transient, other).",
);
/// Retries scheduled, by the class of the failure that caused them.
pub const RETRIES: Def = def(
    "holdfast_retries_total",
    Counter,
    &[NAMESPACE, "class"],
    "Retries scheduled by namespace and the class of the failure that caused them.",
);
/// Requests that gave up with UNAVAILABLE or INDOUBT.
pub const EXHAUSTED: Def = def(
    "holdfast_budget_exhaustions_total",
    Counter,
    &[NAMESPACE, "class"],
    "Requests that gave up with an UNAVAILABLE or INDOUBT error, by namespace and class of the last failure (by command: holdfast_requests_total's outcome).",
);
/// Retries skipped because the process-wide retry budget was empty.
pub const BUDGET_DENIED: Def = def(
    "holdfast_retry_budget_denied_total",
    Counter,
    &[NAMESPACE],
    "Retries skipped because the process-wide retry budget was empty.",
);
/// Requests being held for a retry right now.
pub const HELD: Def = def(
    "holdfast_held_requests",
    Gauge,
    &[NAMESPACE],
    "Requests held for a retry right now.",
);
/// Time a held request spent held.
pub const HOLD_SECONDS: Def = def(
    "holdfast_hold_duration_seconds",
    Histogram,
    &[NAMESPACE],
    "Time a held request spent held, in seconds.",
);
/// Time from a request's arrival to its reply.
pub const REQUEST_SECONDS: Def = def(
    "holdfast_request_duration_seconds",
    Histogram,
    &[NAMESPACE, "command"],
    "Time from a request's arrival to its reply, in seconds; command is the command's name with server.metrics_per_command, else its kind (read, write).",
);
/// Time a backend took to answer a dispatch.
pub const BACKEND_SECONDS: Def = def(
    "holdfast_backend_duration_seconds",
    Histogram,
    &["backend"],
    "Time from a dispatch to a backend to its result, in seconds: the backend's side of a request's time, without holdfast's queueing and retries (a pipelined run or a group-commit batch counts once per request it carried).",
);
/// Client connections open now.
pub const CLIENTS: Def = def(
    "holdfast_client_connections",
    Gauge,
    &[],
    "Client connections open now.",
);
/// Client connections accepted since start.
pub const CLIENTS_TOTAL: Def = def(
    "holdfast_client_connections_total",
    Counter,
    &[],
    "Client connections accepted since start.",
);
/// Client connections refused at `server.max_clients`.
pub const CLIENTS_REFUSED: Def = def(
    "holdfast_client_connections_refused_total",
    Counter,
    &[],
    "Client connections refused at server.max_clients.",
);
/// 1 when the backend answered its last readiness probe.
pub const BACKEND_UP: Def = def(
    "holdfast_backend_up",
    Gauge,
    &["backend"],
    "1 when the backend answered its last health probe (every 5 s, and at each /backendz), 0 when it did not.",
);
/// Pooled backend connections that are connected now.
pub const POOL_CONNECTED: Def = def(
    "holdfast_pool_connections",
    Gauge,
    &["backend"],
    "Pooled backend connections connected now.",
);
/// Attempts waiting for a pooled backend connection to be dialled.
pub const POOL_WAITING: Def = def(
    "holdfast_pool_waiting",
    Gauge,
    &["backend"],
    "Attempts waiting for a pooled backend connection to be dialled.",
);
/// Links dialled ahead for clients' own connections, ready now.
pub const WARM: Def = def(
    "holdfast_warm_connections",
    Gauge,
    &["backend"],
    "Backend connections dialled ahead for clients' own connections (blocking commands, WATCH), ready now.",
);
/// Primaries a Sentinel or Cluster backend followed to a new address.
pub const PRIMARY_CHANGES: Def = def(
    "holdfast_primary_changes_total",
    Counter,
    &["backend"],
    "Times a backend's primary moved: a Sentinel switch (or a sentinel naming another), or a Cluster's set of primaries changing.",
);
/// Connections closed because their primary moved or was declared down.
pub const FENCED: Def = def(
    "holdfast_connections_fenced_total",
    Counter,
    &["backend"],
    "Backend connections closed because their primary moved or was held down (Sentinel), or no longer owns a slot (Cluster).",
);
/// From a primary's move being heard to the first request the new one served.
pub const FAILOVER_SECONDS: Def = def(
    "holdfast_failover_seconds",
    Histogram,
    &["backend"],
    "From hearing that a Sentinel backend's primary moved to the first request served by the new one.",
);
/// The configuration generation: 1 at start, one more per applied reload.
pub const CONFIG_GENERATION: Def = def(
    "holdfast_config_generation",
    Gauge,
    &[],
    "The configuration generation: 1 at start, one more per applied reload (SIGHUP).",
);
/// Configuration reloads by result: `applied`, `rejected`.
pub const CONFIG_RELOADS: Def = def(
    "holdfast_config_reloads_total",
    Counter,
    &["result"],
    "Configuration reloads by result (applied, rejected).",
);

/// Requests or connections stopped at a limit.
pub const LIMITS: Def = def(
    "holdfast_limits_total",
    Counter,
    &["limit"],
    "Requests or connections stopped at a limit, or closed for a cause of their own (the limit label: max_request_bytes, max_bulk_bytes, max_arguments, max_keys_per_command, max_queued_commands, max_pubsub_backlog, monitor_backlog, pubsub_lost, pubsub_gap, idle_timeout, tls_handshake, inline, malformed).",
);

/// Pub/Sub subscriptions restored on a backend after its connection ended.
pub const PUBSUB_RESUBSCRIBES: Def = def(
    "holdfast_pubsub_resubscribes_total",
    Counter,
    &["backend"],
    "Pub/Sub subscriptions restored after a backend connection ended (a failover, a restart): messages published meanwhile were not delivered.",
);

/// Subscribed clients now.
pub const PUBSUB_CLIENTS: Def = def(
    "holdfast_pubsub_clients",
    Gauge,
    &[],
    "Clients with at least one Pub/Sub subscription.",
);

/// Replies settled or exact after a dispatch that may have been applied.
pub const CORRECTIONS: Def = def(
    "holdfast_reply_corrections_total",
    Counter,
    &[NAMESPACE, "command", "mode"],
    "Replies given for the first application of a request whose earlier dispatch may have been applied: rebuilt from reads (settled) or recorded under its token (exact).",
);
/// Fast-mode replies that may under-count: a retried IdempotentEffect after a dispatch that
/// may have been applied.
pub const UNCERTAIN: Def = def(
    "holdfast_uncertain_replies_total",
    Counter,
    &[NAMESPACE, "command"],
    "Fast-mode replies of IdempotentEffect commands retried after a dispatch that may have been applied: the reply may under-count.",
);
/// Writes waiting for a namespace's mirror.
pub const MIRROR_QUEUED: Def = def(
    "holdfast_mirror_queued",
    Gauge,
    &[NAMESPACE],
    "Requests waiting in the namespace's mirror queue (docs/moving.md).",
);
/// Commands replayed on a namespace's mirror.
pub const MIRROR_APPLIED: Def = def(
    "holdfast_mirror_applied_total",
    Counter,
    &[NAMESPACE, "result"],
    "Commands replayed on the namespace's mirror: result ok, or error (the mirror refused it or did not answer; its keys are marked to be copied again).",
);
/// Writes not replayed: the queue was full.
pub const MIRROR_DROPPED: Def = def(
    "holdfast_mirror_dropped_total",
    Counter,
    &[NAMESPACE],
    "Writes not replayed on the mirror because its queue was full; their keys are marked to be copied again.",
);
/// Keys copied to a mirror.
pub const MIRROR_COPIED: Def = def(
    "holdfast_mirror_copied_keys_total",
    Counter,
    &[NAMESPACE],
    "Keys copied to the namespace's mirror by `holdfast copy` (docs/moving.md).",
);
/// Keys marked to be copied again.
pub const MIRROR_BEHIND: Def = def(
    "holdfast_mirror_recopy_keys",
    Gauge,
    &[NAMESPACE],
    "Keys the mirror may not have right, to be copied again (-1: every key of the namespace); 0 when the mirror has every write.",
);
/// Reads compared on a mirror, by result.
pub const MIRROR_COMPARED: Def = def(
    "holdfast_mirror_compared_total",
    Counter,
    &[NAMESPACE, "result"],
    "Reads sent to the mirror too (reads = compare), by result: same, different (confirmed), changing (the primary's reply changed meanwhile), unanswered.",
);
/// Confirmed differences, by command.
pub const MIRROR_DIFFERENCES: Def = def(
    "holdfast_mirror_differences_total",
    Counter,
    &[NAMESPACE, "command"],
    "Reads the mirror answered differently from the primary, confirmed by reading both again.",
);
/// Requests committed together by one group-commit transaction.
pub const GROUP_COMMIT: Def = def(
    "holdfast_group_commit_requests",
    Histogram,
    &["backend"],
    "Requests committed together by one group-commit transaction (SQL backends), by backend.",
);

/// 1, labelled with the running version.
pub const BUILD_INFO: Def = def(
    "holdfast_build_info",
    Gauge,
    &["version"],
    "1, labelled with the version of the running holdfast.",
);

/// Requests forwarded to a namespace and not yet answered (held ones included).
pub const IN_FLIGHT: Def = def(
    "holdfast_requests_in_flight",
    Gauge,
    &[NAMESPACE],
    "Requests forwarded to a namespace's backend and not answered yet, held ones included.",
);

/// Bytes of the requests forwarded to a namespace.
pub const RECEIVED_BYTES: Def = def(
    "holdfast_client_received_bytes_total",
    Counter,
    &[NAMESPACE],
    "Bytes of client requests forwarded to a namespace, as RESP (what holdfast answers itself is not counted).",
);

/// Bytes of the replies to those requests.
pub const SENT_BYTES: Def = def(
    "holdfast_client_sent_bytes_total",
    Counter,
    &[NAMESPACE],
    "Bytes of the replies to client requests forwarded to a namespace, as written to the client.",
);

/// Every metric holdfast exports. Dashboards, alerts and tests check their queries against
/// this list.
pub const CATALOGUE: &[Def] = &[
    REQUESTS,
    DISPATCHES,
    RETRIES,
    EXHAUSTED,
    BUDGET_DENIED,
    HELD,
    HOLD_SECONDS,
    REQUEST_SECONDS,
    BACKEND_SECONDS,
    CLIENTS,
    CLIENTS_TOTAL,
    CLIENTS_REFUSED,
    BACKEND_UP,
    POOL_CONNECTED,
    POOL_WAITING,
    WARM,
    PRIMARY_CHANGES,
    FENCED,
    FAILOVER_SECONDS,
    CONFIG_GENERATION,
    CONFIG_RELOADS,
    LIMITS,
    PUBSUB_RESUBSCRIBES,
    PUBSUB_CLIENTS,
    GROUP_COMMIT,
    CORRECTIONS,
    UNCERTAIN,
    MIRROR_QUEUED,
    MIRROR_APPLIED,
    MIRROR_DROPPED,
    MIRROR_COPIED,
    MIRROR_BEHIND,
    MIRROR_COMPARED,
    MIRROR_DIFFERENCES,
    BUILD_INFO,
    IN_FLIGHT,
    RECEIVED_BYTES,
    SENT_BYTES,
];

/// The process's own series, in Prometheus's standard names (from `metrics-process`), beside
/// the catalogue's.
pub const PROCESS: &[&str] = &[
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_threads",
];
