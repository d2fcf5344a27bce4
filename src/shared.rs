//! What every connection shares: the configuration generation (its namespaces' router and
//! backends), swapped whole on reload; the process-wide retry budget; client ids; and the
//! shutdown signal that tells held requests to stop waiting.

use crate::backend::{BackendError, Backends};
use crate::config::Config;
use crate::namespace::{BuildError, Router};
use crate::retry::budget::RetryBudget;
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;
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

    /// Tells held requests to stop waiting: shutdown's grace period is over.
    pub fn give_up(&self) {
        let _ = self.give_up.send(true);
    }
}
