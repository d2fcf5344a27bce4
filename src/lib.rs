//! holdfast: a sidecar that speaks the Redis protocol, forwards each command to the backend of
//! its key's namespace, and decides per command and per failure whether a failed request can
//! be tried again without changing what the client sees.
//!
//! # Layout
//!
//! A request flows down this list; no module uses one above it, and within a module no two
//! of its rooms use each other in a circle. No type name is declared twice, no file is over
//! 900 lines (`connection/mod.rs`: 600) and no function over 120, tests aside
//! (`tests/offline/layout.rs` checks them).
//!
//! - [`server`]: accept loop, connection limit, one task per client, graceful drain.
//! - [`http`]: the metrics port (`/metrics`, `/healthz`, `/readyz`, `/backendz`, `/config`) and the
//!   background probe that keeps `holdfast_backend_up` current.
//! - [`connection`]: one client: framing, in-order execution and reply encoding (`mod.rs`),
//!   what holdfast answers itself (`local`: HELLO, AUTH, CLIENT, MULTI, ...), forwarding to a
//!   backend (`forward`), its own backend connection for blocking commands and transactions
//!   (`bound`, `transaction`), a held command raced against its client (`held`), its Pub/Sub
//!   subscriptions and what they deliver (`subscribe`).
//! - [`mover`]: `holdfast copy` and `holdfast verify`, a client of the running holdfast.
//! - [`shared`]: what every connection shares: the configuration generation (router,
//!   backends and mirrors, swapped whole on reload), the retry budget, client ids and the
//!   give-up signal.
//! - [`mirror`]: a namespace's writes replayed on a second backend in the order its own
//!   backend applied them (`rewrite`: what the mirror is sent for each), its reads compared
//!   there (`compare`), its keys copied and checked in one order with the writes (`copy`,
//!   `diff`), and a cut-over's wait for the mirror queue.
//! - [`exec`]: the request executor: a routed command in, its reply and outcome out; reply
//!   modes (`exec::settle`), retries through `retry`, pipelined first dispatches, the
//!   backend seam ([`exec::Dispatch`]); a client's own connection (`exec::own`: blocking
//!   commands, `WATCH`, transactions).
//! - [`namespace`]: key prefix → namespace → backend and retry policy.
//! - [`retry`]: the retry loop, its policy (no I/O), backoff and the process-wide budget.
//! - [`backend`]: the seam (`Backend`, `Backends`, `Request`, `Reply`, `Placement`) and its
//!   rooms. `backend::redis`: every connection holdfast's own (`link`: replies paired by
//!   order; `dial`: TCP or TLS and the handshake; `codec`), pooled and placed (`pool`), a
//!   request sent on one and its result read (`send`), to a standalone server, the primary
//!   Sentinel names (`sentinel`) or a Cluster's nodes (`cluster`), as configured (`servers`);
//!   a client's own connection (`dedicated`), dialled ahead (`warm`); exact mode's script and
//!   token keys (`exact`); a subscriber's own connections (`feed`). `backend::sql`: the Redis
//!   data model on tables (`model`: one command table, a file or folder per data type) and
//!   the engine that runs it (`engine`: a backend opened, a request's transaction and its
//!   commands, group commit, batched reads, deadlines, failover, schema and expiry, waiters,
//!   Pub/Sub's broker); the model never uses the engine, and the Redis and SQL rooms
//!   never use each other. `backend::pubsub`: what a subscriber is sent; `backend::feed`: its
//!   subscriptions on one backend. `backend::lua`: Lua 5.1 for scripts and functions on SQL
//!   (interpreters on threads of their own, the sandbox, conversions, the libraries Redis
//!   ships); `backend::rdb`: the RDB pieces of a `DUMP` payload. A scripted fake for unit
//!   tests.
//! - [`resp`]: request decoding with limits, reply encoding in RESP2 or RESP3, the client's
//!   protocol version and a backend's spelling of doubles; a reply found in a buffer without
//!   decoding it (`resp::scan`); the replies holdfast builds itself (`resp::frame`).
//! - [`command`]: the command table (name, arity, keys, idempotence) and parsing against it.
//! - [`metrics`]: every metric declared in one place (`metrics::catalogue`), recorded and
//!   rendered.
//! - [`error`]: the three failure classes, `BackendError` and `classify`, the only place that
//!   assigns a class.
//! - [`config`]: figment layers and validation, a file per section (server, backends,
//!   namespaces, users, retry, secrets) each checking its own keys, with what validation
//!   reads: the retry schedule, exact mode's token lifetime, backend addresses.
//! - [`tls`]: the client listener's acceptor and backend trust roots (off by default).
//! - [`logging`]: `HOLDFAST_LOG` and `HOLDFAST_LOG_FORMAT`, checked, and the log started.
//! - [`cli`]: the command line, its help (environment, ports, signals, exit codes) and the
//!   man page rendered from it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod cli;
pub mod command;
pub mod config;
pub mod connection;
pub mod error;
pub mod exec;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod mirror;
pub mod mover;
pub mod namespace;
pub mod resp;
pub mod retry;
pub mod server;
pub mod shared;
pub mod tls;

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The Redis version holdfast reports in HELLO and INFO: the command set it serves.
pub const REDIS_VERSION: &str = "7.0.0";

/// A running configuration of holdfast: build it, serve it, reload it.
#[derive(Clone)]
pub struct Holdfast {
    /// What connections share.
    shared: Arc<shared::Shared>,
}

impl Holdfast {
    /// Builds backends and namespaces from a validated configuration. Needs a tokio runtime:
    /// backend connections are dialled in the background.
    ///
    /// # Errors
    /// [`shared::StartError`] when backends or namespaces cannot be built.
    pub fn new(config: config::Config) -> Result<Holdfast, shared::StartError> {
        metrics::install();
        Ok(Holdfast {
            shared: Arc::new(shared::Shared::build(config)?),
        })
    }

    /// Applies a new, validated configuration between commands (see
    /// [`shared::Shared::reload`]) and returns the new generation.
    ///
    /// # Errors
    /// [`shared::StartError`]; the running configuration stays.
    pub fn reload(&self, config: config::Config) -> Result<u64, shared::StartError> {
        self.shared.reload(config)
    }

    /// The mirror of namespace `name` in the running configuration, if it has one.
    pub fn mirror(&self, name: &str) -> Option<Arc<mirror::Mirror>> {
        let state = self.shared.current();
        let namespace = state
            .router
            .namespaces()
            .iter()
            .find(|ns| ns.name == name)?;
        state.mirrors.of(namespace).mirror.clone()
    }

    /// Serves clients on already bound listeners until `shutdown` completes, then drains.
    /// Tests bind `127.0.0.1:0` and pass the listeners in.
    pub async fn serve(
        &self,
        listener: TcpListener,
        metrics_listener: Option<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) {
        let http = metrics_listener.map(|l| tokio::spawn(http::serve(l, self.shared.clone())));
        server::run(self.shared.clone(), listener, shutdown).await;
        if let Some(http) = http {
            http.abort();
        }
    }
}

/// Builds and serves one configuration until `shutdown` completes.
///
/// # Errors
/// [`shared::StartError`] when backends or namespaces cannot be built.
pub async fn run(
    config: config::Config,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), shared::StartError> {
    Holdfast::new(config)?
        .serve(listener, metrics_listener, shutdown)
        .await;
    Ok(())
}
