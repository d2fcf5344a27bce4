//! What every connection shares: the configuration generation (its namespaces' router and
//! backends), swapped whole on reload; the process-wide retry budget; the connected clients
//! (`CLIENT LIST`, `CLIENT KILL`, `INFO`'s counts); and the shutdown signal that tells held
//! requests to stop waiting.

use crate::backend::{BackendError, Backends};
use crate::config::Config;
use crate::mirror::{CutOverRefused, Mirrors};
use crate::namespace::{BuildError, Router};
use crate::retry::budget::RetryBudget;
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::sync::Notify;
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
    /// Each namespace's mirror, and the mirror it was cut over from.
    pub mirrors: Mirrors,
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
    /// The connected clients, by id.
    pub clients: Arc<Clients>,
    /// Turns true when shutdown's grace period is over: held requests stop waiting.
    give_up: watch::Sender<bool>,
    /// Where the client listener is: [`Serving`] as a number (`/readyz`).
    serving: std::sync::atomic::AtomicU8,
    /// Each backend's health as last logged (kept across reloads).
    pub health: crate::backend::health::Health,
    /// What `MONITOR` clients are fed.
    pub monitor: MonitorFeed,
}

/// Lines a `MONITOR` client may fall behind by before it is closed.
pub const MONITOR_BACKLOG: usize = 4096;

/// The feed every connection writes the commands it receives to while a client monitors, and
/// each `MONITOR` client reads (`connection/monitor.rs` formats and reads it).
pub struct MonitorFeed {
    lines: tokio::sync::broadcast::Sender<Arc<str>>,
    /// Monitors connected: a command is formatted only while there is one.
    watching: AtomicUsize,
}

impl Default for MonitorFeed {
    fn default() -> MonitorFeed {
        MonitorFeed {
            lines: tokio::sync::broadcast::channel(MONITOR_BACKLOG).0,
            watching: AtomicUsize::new(0),
        }
    }
}

impl MonitorFeed {
    /// Whether any client is monitoring.
    pub fn watched(&self) -> bool {
        self.watching.load(Ordering::Relaxed) > 0
    }

    /// Feeds `line` to every monitor.
    pub fn send(&self, line: String) {
        let _ = self.lines.send(line.into());
    }

    /// A new monitor's end of the feed; [`MonitorFeed::left`] when it stops.
    pub fn join(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.watching.fetch_add(1, Ordering::Relaxed);
        self.lines.subscribe()
    }

    /// A monitor stopped reading.
    pub fn left(&self) {
        self.watching.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where the client listener is, for readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    /// Not accepting clients yet (or never: its TLS configuration could not be loaded).
    NotYet,
    /// Accepting clients.
    Accepting,
    /// Shutting down: no new client is accepted.
    Draining,
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
    /// A namespace would be cut over to a mirror that missed writes.
    #[error(transparent)]
    CutOver(#[from] CutOverRefused),
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
        let mirrors = Mirrors::build(&config, &backends, &router, None)?;
        crate::metrics::register(&config);
        crate::metrics::config_generation(1);
        Ok(Shared {
            budget: RetryBudget::new(&config.retry_budget),
            state: ArcSwap::from_pointee(State {
                config,
                router,
                backends,
                mirrors,
                generation: 1,
            }),
            started: Instant::now(),
            next_id: AtomicU64::new(1),
            clients: Arc::default(),
            give_up: watch::channel(false).0,
            serving: std::sync::atomic::AtomicU8::new(0),
            health: Default::default(),
            monitor: MonitorFeed::default(),
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
                let before = Some((&old.router, &old.mirrors));
                let mirrors = Mirrors::build(&config, &backends, &router, before)?;
                Ok((backends, router, mirrors))
            });
        let (backends, router, mirrors) = match built {
            Ok(built) => built,
            Err(e) => {
                crate::metrics::config_reload(false);
                return Err(e);
            }
        };
        let generation = old.generation + 1;
        crate::metrics::register(&config);
        self.state.store(Arc::new(State {
            config,
            router,
            backends,
            mirrors,
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

    /// Records where the client listener is.
    pub fn set_serving(&self, serving: Serving) {
        let n = match serving {
            Serving::NotYet => 0,
            Serving::Accepting => 1,
            Serving::Draining => 2,
        };
        self.serving.store(n, Ordering::Release);
    }

    /// Where the client listener is.
    pub fn serving(&self) -> Serving {
        match self.serving.load(Ordering::Acquire) {
            1 => Serving::Accepting,
            2 => Serving::Draining,
            _ => Serving::NotYet,
        }
    }
}

/// What `CLIENT LIST` shows of a client that the client itself changes.
#[derive(Clone, Debug, Default)]
pub struct ClientState {
    /// `CLIENT SETNAME`.
    pub name: Option<bytes::Bytes>,
    /// The `[[users]]` name it authenticated as; None: `default`.
    pub user: Option<String>,
    /// 2 or 3.
    pub resp: u8,
    /// Its last command's name in the command table, and its subcommand where the table
    /// has none (`CLIENT LIST`): `CLIENT LIST` shows `get`, `client|list`.
    pub cmd: (&'static str, Option<bytes::Bytes>),
    /// Commands queued in `MULTI`, or -1.
    pub multi: i64,
    /// When its last command came.
    pub last: Option<quanta::Instant>,
    /// Its Pub/Sub subscriptions: channels, patterns, shard channels.
    pub subs: [usize; 3],
}

/// One connected client.
pub struct Client {
    /// `CLIENT ID`.
    pub id: u64,
    /// Its address, and the listener's (None for a stream without one).
    pub addr: Option<SocketAddr>,
    /// The address it connected to.
    pub laddr: Option<SocketAddr>,
    /// When it connected.
    pub since: quanta::Instant,
    /// Updated by its connection, read by others' `CLIENT LIST`.
    pub state: Mutex<ClientState>,
    /// Set by `CLIENT KILL`: the connection closes at its next safe point.
    pub killed: AtomicBool,
    /// Wakes the connection when it is killed.
    pub kill: Notify,
}

impl Client {
    /// Closes the client at its next safe point; true the first time (`CLIENT KILL` counts a client
    /// once: one already killed may still be listed for the moment its connection takes
    /// to close).
    pub fn kill(&self) -> bool {
        let first = !self.killed.swap(true, Ordering::AcqRel);
        self.kill.notify_one();
        first
    }
}

/// The connected clients and the counters `INFO` reports.
#[derive(Default)]
pub struct Clients {
    by_id: Mutex<BTreeMap<u64, Arc<Client>>>,
    /// Connections accepted since start.
    pub received: AtomicU64,
    /// Commands handled since start.
    pub commands: AtomicU64,
    /// Clients waiting in a blocking command now.
    pub blocked: AtomicUsize,
    /// The previous `INFO`'s (time, commands), for `instantaneous_ops_per_sec`.
    sample: Mutex<Option<(Instant, u64)>>,
}

impl Clients {
    /// Registers a client; it leaves when the returned guard drops.
    pub fn join(
        self: &Arc<Self>,
        id: u64,
        addr: Option<SocketAddr>,
        laddr: Option<SocketAddr>,
    ) -> (Arc<Client>, Leave) {
        let client = Arc::new(Client {
            id,
            addr,
            laddr,
            since: quanta::Instant::now(),
            state: Mutex::new(ClientState {
                resp: 2,
                multi: -1,
                ..ClientState::default()
            }),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
        });
        self.received.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, client.clone());
        (
            client,
            Leave {
                clients: self.clone(),
                id,
            },
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Client>>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every connected client, by id.
    pub fn all(&self) -> Vec<Arc<Client>> {
        self.lock().values().cloned().collect()
    }

    /// How many clients are connected.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Commands a second since the previous call at least a second ago (0 on the first).
    pub fn ops_per_sec(&self) -> u64 {
        let now = Instant::now();
        let total = self.commands.load(Ordering::Relaxed);
        let mut sample = self.sample.lock().unwrap_or_else(|p| p.into_inner());
        let rate = match *sample {
            Some((at, before)) => {
                let secs = now.duration_since(at).as_secs_f64();
                if secs > 0.0 {
                    (total.saturating_sub(before) as f64 / secs) as u64
                } else {
                    0
                }
            }
            None => 0,
        };
        if sample.is_none_or(|(at, _)| now.duration_since(at).as_secs() >= 1) {
            *sample = Some((now, total));
        }
        rate
    }
}

/// Removes its client from [`Clients`] when dropped.
pub struct Leave {
    clients: Arc<Clients>,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.clients.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A request that took its generation before a reload cut its namespace over: while it
    /// holds its ticket the cut-over waits for it; once the namespace is answered from the
    /// mirror, such a request takes no ticket on the old primary (it runs under the current
    /// generation instead: `connection/forward.rs`, `mirror_hold`).
    #[tokio::test]
    async fn once_cut_over_the_old_mirror_takes_no_request() {
        let dir = tempfile::tempdir().expect("temp dir");
        let toml = format!(
            "[backends.a]\nkind = \"sqlite\"\npath = \"{}\"\n\
             [backends.b]\nkind = \"sqlite\"\npath = \"{}\"\n\
             [[namespaces]]\nname = \"all\"\nbackend = \"a\"\nmirror = {{ backend = \"b\" }}\n",
            dir.path().join("a.db").display(),
            dir.path().join("b.db").display()
        );
        let shared = Shared::build(Config::from_toml(&toml).expect("config")).expect("built");
        let first = shared.current();
        let ends = first.mirrors.of(&first.router.namespaces()[0]);
        let mirror = ends.mirror.clone().expect("mirrored");
        let early = mirror.ticket().expect("a request before the cut-over");
        let cut = toml
            .replace("mirror = { backend = \"b\" }\n", "")
            .replace("backend = \"a\"", "backend = \"b\"");
        shared
            .reload(Config::from_toml(&cut).expect("config"))
            .expect("cut over");
        let second = shared.current();
        let from = second
            .mirrors
            .of(&second.router.namespaces()[0])
            .cut_over_from
            .clone()
            .expect("cut over from the mirror");
        assert!(Arc::ptr_eq(&from, &mirror));
        let waiting = tokio::spawn(async move { from.ready(Duration::from_secs(10)).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "the cut-over did not wait");
        drop(early);
        assert_eq!(waiting.await.expect("joined"), Ok(()));
        assert!(
            mirror.ticket().is_none(),
            "a request of the old generation would run on the old primary"
        );
    }
}
