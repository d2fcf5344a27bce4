//! The accept loop: a connection limit, one task per client, and shutdown that stops
//! accepting, lets connections finish what they are holding, and closes them between commands
//! within the grace period.

use crate::backend::{BackendError, Backends};
use crate::config::Config;
use crate::namespace::{BuildError, Router};
use crate::retry::budget::RetryBudget;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Everything connections share.
pub struct Shared {
    /// The validated configuration.
    pub config: Config,
    /// Key → namespace.
    pub router: Router,
    /// Every backend in use.
    pub backends: Backends,
    /// The process-wide retry budget.
    pub budget: RetryBudget,
    /// Process start, for `INFO`.
    pub started: Instant,
    /// Source of `CLIENT ID`s.
    next_id: AtomicU64,
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
        let backends = Backends::build(&config)?;
        let router = Router::build(&config, &backends)?;
        for ns in router.namespaces() {
            if ns.reply_mode != crate::config::ReplyMode::Fast {
                // Settled and exact replies are not built yet; say so rather than pretend.
                tracing::warn!(
                    namespace = ns.name,
                    mode = ?ns.reply_mode,
                    "reply mode not implemented yet; this namespace answers as in `fast` mode"
                );
            }
        }
        Ok(Shared {
            budget: RetryBudget::new(&config.retry_budget),
            config,
            router,
            backends,
            started: Instant::now(),
            next_id: AtomicU64::new(1),
        })
    }

    /// A new, unique client id.
    pub fn next_client_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Serves clients from `listener` until `shutdown` completes, then drains.
pub async fn run(shared: Arc<Shared>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let limit = Arc::new(Semaphore::new(shared.config.server.max_clients));
    let mut connections = JoinSet::new();
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
                    // As Redis does at maxclients.
                    let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tracing::trace!(%peer, "client connected");
                let shared = shared.clone();
                let stop = stop_rx.clone();
                connections.spawn(async move {
                    crate::metrics::client_connection(true);
                    crate::connection::serve(stream, shared, stop).await;
                    crate::metrics::client_connection(false);
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let grace = shared.config.server.shutdown_grace;
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = connections.len(),
            "shutdown grace period over; closing the remaining connections"
        );
        connections.shutdown().await;
    }
}
