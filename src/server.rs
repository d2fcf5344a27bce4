//! The accept loop: a connection limit, one task per client, and shutdown that stops
//! accepting, lets connections finish what they are holding, and closes them between commands
//! within the grace period.

use crate::backend::{BackendError, Backends};
use crate::config::Config;
use crate::namespace::{BuildError, Router};
use crate::retry::budget::RetryBudget;
use arc_swap::ArcSwap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What a configuration generation serves: swapped whole on reload, so a command always sees
/// one consistent generation.
pub struct State {
    /// The validated configuration.
    pub config: Config,
    /// Key → namespace.
    pub router: Router,
    /// Every backend in use.
    pub backends: Backends,
    /// 1 at start, one more per applied reload.
    pub generation: u64,
}

/// Everything connections share.
pub struct Shared {
    /// The current generation; connections take it between commands.
    state: ArcSwap<State>,
    /// The process-wide retry budget (kept across reloads).
    pub budget: RetryBudget,
    /// Process start, for `INFO`.
    pub started: Instant,
    /// Source of `CLIENT ID`s.
    next_id: AtomicU64,
    /// Turns true when shutdown's grace period is over: held requests stop waiting.
    give_up: watch::Sender<bool>,
}

/// Holdfast could not be assembled from a configuration.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A backend could not be built.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The namespaces could not be built.
    #[error(transparent)]
    Namespace(#[from] BuildError),
}

impl Shared {
    /// Builds backends and namespaces from a validated `config`. Backend connections open in
    /// the background: holdfast serves (and holds requests) before its backends are up.
    ///
    /// # Errors
    /// [`StartError`].
    pub fn build(config: Config) -> Result<Shared, StartError> {
        let backends = Backends::build(&config, None)?;
        let router = Router::build(&config, &backends)?;
        crate::metrics::config_generation(1);
        Ok(Shared {
            budget: RetryBudget::new(&config.retry_budget),
            state: ArcSwap::from_pointee(State {
                config,
                router,
                backends,
                generation: 1,
            }),
            started: Instant::now(),
            next_id: AtomicU64::new(1),
            give_up: watch::channel(false).0,
        })
    }

    /// The current generation.
    pub fn current(&self) -> Arc<State> {
        self.state.load_full()
    }

    /// Applies a new, validated configuration: namespaces, policies and backends. Backends
    /// whose configuration did not change keep their connections; changed ones are built anew
    /// (requests in flight finish on the old ones). The listeners, `max_clients`, `threads` and the retry
    /// budget need a restart: a change to them is reported and not applied. Reloads come from
    /// one task at a time (the SIGHUP handler).
    ///
    /// # Errors
    /// [`StartError`] when the new generation cannot be built; the old one stays.
    pub fn reload(&self, mut config: Config) -> Result<u64, StartError> {
        let old = self.current();
        let fixed = &old.config.server;
        if config.server.listen != fixed.listen
            || config.server.metrics_listen != fixed.metrics_listen
            || config.server.max_clients != fixed.max_clients
            || config.server.threads != fixed.threads
        {
            tracing::warn!("server.listen, server.metrics_listen, server.max_clients and server.threads need a restart; keeping the running values");
            config.server.threads = fixed.threads;
            config.server.listen = fixed.listen;
            config.server.metrics_listen = fixed.metrics_listen;
            config.server.max_clients = fixed.max_clients;
        }
        let built = Backends::build(&config, Some((&old.config, &old.backends)))
            .map_err(StartError::from)
            .and_then(|backends| {
                let router = Router::build(&config, &backends)?;
                Ok((backends, router))
            });
        let (backends, router) = match built {
            Ok(built) => built,
            Err(e) => {
                crate::metrics::config_reload(false);
                return Err(e);
            }
        };
        let generation = old.generation + 1;
        self.state.store(Arc::new(State {
            config,
            router,
            backends,
            generation,
        }));
        crate::metrics::config_reload(true);
        crate::metrics::config_generation(generation);
        tracing::info!(generation, "configuration reloaded");
        Ok(generation)
    }

    /// A new, unique client id.
    pub fn next_client_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A receiver that turns true when held requests must stop waiting.
    pub fn give_up_signal(&self) -> watch::Receiver<bool> {
        self.give_up.subscribe()
    }
}

/// Longest a client may take to complete its TLS handshake.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// After the grace period, how long held requests get to write their give-up replies.
const SHUTDOWN_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves clients from `listener` until `shutdown` completes, then drains.
pub async fn run(shared: Arc<Shared>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = shared.current().config.server.clone();
    let limit = Arc::new(Semaphore::new(server.max_clients));
    // Validated with the configuration; a file changed since is reported and TLS refused.
    let tls = match &server.tls {
        Some(tls) => match crate::tls::acceptor(&tls.cert, &tls.key) {
            Ok(acceptor) => Some(acceptor),
            Err(e) => {
                tracing::error!(error = %e, "server.tls: cannot load; refusing every client");
                return;
            }
        },
        None => None,
    };
    let mut connections = JoinSet::new();
    let health = tokio::spawn(crate::http::watch_health(shared.clone()));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (mut stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: back off briefly, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    crate::metrics::client_refused();
                    // As Redis does at maxclients (in clear text only: a TLS client would
                    // not read it).
                    if tls.is_none() {
                        let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tracing::trace!(%peer, "client connected");
                let shared = shared.clone();
                let stop = stop_rx.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    crate::metrics::client_connection(true);
                    match tls {
                        None => crate::connection::serve(stream, shared, stop).await,
                        Some(acceptor) => {
                            match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                                Ok(Ok(stream)) => crate::connection::serve(stream, shared, stop).await,
                                _ => crate::metrics::limit("tls_handshake"),
                            }
                        }
                    }
                    crate::metrics::client_connection(false);
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    health.abort();
    let _ = stop_tx.send(true);
    if !drain(&mut connections, server.shutdown_grace).await {
        // Held requests stop waiting and answer UNAVAILABLE/INDOUBT; a dispatch in flight
        // still gets its reply or its timeout. Whatever is left after that is closed.
        tracing::warn!("shutdown grace period over; held requests give up");
        let _ = shared.give_up.send(true);
        if !drain(&mut connections, SHUTDOWN_MARGIN).await {
            tracing::warn!(
                remaining = connections.len(),
                "closing the remaining connections"
            );
            connections.shutdown().await;
        }
    }
}

/// Waits up to `limit` for every connection to finish; true when they all did.
async fn drain(connections: &mut JoinSet<()>, limit: std::time::Duration) -> bool {
    tokio::time::timeout(limit, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_ok()
}
