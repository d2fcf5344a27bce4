//! A backend opened from its configuration: SQLite's writer and reader pools with their
//! pragmas, PostgreSQL's pool (per host, for failover) with its session settings, and the
//! tasks every backend starts (group commit, batched reads, the schema and the reaper).

use super::conn::SqlPool;
use super::failover::{Failover, PoolBuilder};
use super::{broker, group, inbox, lite, reads, waiters};
use super::{postgres_hosts, Dialect, Inner, Pools, SqlBackend};
use crate::backend::BackendError;
use crate::config::{PostgresConfig, SqliteConfig, Synchronous};
use arc_swap::ArcSwap;
use sqlx::any::AnyPoolOptions;
use sqlx::Executor;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// TCP keepalive on the server's end of each PostgreSQL session: a peer silent for 10 s is
/// probed every 5 s and dropped after 3 unanswered probes.
const KEEPALIVE: [&str; 3] = [
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
];

impl SqlBackend {
    /// A SQLite backend; the file and its directory are created on first connect.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when the path cannot be used.
    pub fn sqlite(name: &str, config: &SqliteConfig) -> Result<SqlBackend, BackendError> {
        sqlx::any::install_default_drivers();
        let path = std::path::Path::new(&config.path);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| BackendError::Unsupported {
                what: format!("backends.{name}.path: cannot create {}: {e}", dir.display()),
            })?;
        }
        // Another process's lock is waited for at most the deadline: a statement cannot be
        // dropped half-way as a future can (`lite`).
        let busy = config.busy_timeout.min(config.response_timeout).as_millis();
        let sync = match config.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        let pragmas = [
            format!("PRAGMA busy_timeout = {busy}"),
            "PRAGMA journal_mode = WAL".to_string(),
            format!("PRAGMA synchronous = {sync}"),
            // The WAL copied back into the database every 10,000 pages (about 40 MB) instead
            // of 1,000: a page changed by many groups in between is copied once.
            "PRAGMA wal_autocheckpoint = 10000".to_string(),
        ];
        let opener = |writer: bool| {
            let mut pragmas = pragmas.to_vec();
            if writer {
                // The writer's statement journals (what undoes a multi-row statement that
                // fails half-way) in memory, not a temporary file written through the kernel.
                // A journal holds the pages one statement changed (at most STATEMENT_ROWS
                // rows). Not the readers': a large sort of theirs (KEYS, SCAN) keeps spilling
                // to a file.
                pragmas.push("PRAGMA temp_store = MEMORY".to_string());
            }
            Arc::new(lite::Opener {
                path: path.to_path_buf(),
                pragmas,
            })
        };
        let writer = SqlPool::Lite(Arc::new(lite::LitePool::new(1, opener(true))));
        let reader = SqlPool::Lite(Arc::new(lite::LitePool::new(config.readers, opener(false))));
        // Pub/Sub's own connection (`inbox.rs`), opened at the first subscription, through
        // sqlx: it polls every 20 ms, one statement at a time.
        let url = format!("sqlite://{}?mode=rwc", config.path);
        let messages = AnyPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(config.response_timeout)
            .test_before_acquire(false)
            .after_connect(move |conn, _| {
                let pragmas = pragmas.clone();
                Box::pin(async move {
                    for pragma in &pragmas {
                        conn.execute(pragma.as_str()).await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy(&url)
            .map_err(|e| BackendError::Unsupported {
                what: format!("backends.{name}.path: {e}"),
            })?;
        Ok(SqlBackend::start(
            1,
            name,
            Dialect::Sqlite,
            (writer, reader),
            (
                None,
                broker::Carrier::Table(Box::new(move |broker| {
                    let task = inbox::run(broker, messages.clone());
                    // On a thread of its own: its write transactions await sqlx's worker
                    // between BEGIN and COMMIT, and a statement run in the call on the
                    // runtime (a script's) that waits for SQLite's lock must not be what
                    // keeps them from committing.
                    match lite::LiteWorker::start_with_io("holdfast-sqlite-pubsub") {
                        Some(worker) => tokio::spawn(async move {
                            let _ = worker.run(task).await;
                        }),
                        None => tokio::spawn(task),
                    }
                })),
            ),
            (
                config.allow_flush,
                config.response_timeout,
                config.blocking_poll,
            ),
        ))
    }

    /// A PostgreSQL backend; connections are opened when first needed.
    ///
    /// # Errors
    /// [`BackendError::Unsupported`] when the URL does not parse.
    pub fn postgres(name: &str, config: &PostgresConfig) -> Result<SqlBackend, BackendError> {
        sqlx::any::install_default_drivers();
        let hosts = postgres_hosts(&config.url).map_err(|e| BackendError::Unsupported {
            what: format!("backends.{name}.url: {e}"),
        })?;
        // Into every host's URL, so the pool, the failover probe and the LISTEN connection
        // all log in with it. These URLs are never logged.
        let hosts = match &config.password_file {
            Some(path) => {
                let key = format!("backends.{name}.password_file");
                let password = crate::config::read_secret(&key, path).map_err(|e| {
                    BackendError::Unsupported {
                        what: e.to_string(),
                    }
                })?;
                hosts
                    .iter()
                    .map(|url| crate::config::with_password(url, &password))
                    .collect()
            }
            None => hosts,
        };
        let timeout_ms = config.statement_timeout.as_millis();
        // sqlx retries a refused connect until its pool's acquire timeout: kept short, so a
        // server that is down fails an attempt quickly (NotAttempted, retried with backoff)
        // instead of holding it for the whole connection timeout.
        let connect_timeout = config.connection_timeout.min(Duration::from_secs(1));
        let size = config.pool_size as u32;
        let build: PoolBuilder = Box::new(move |url: &str| {
            AnyPoolOptions::new()
                .max_connections(size)
                .min_connections(0)
                .acquire_timeout(connect_timeout)
                // No ping per request: a connection that died with a restarted server fails
                // its first statement, and `acquire` replaces it then.
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        conn.execute(format!("SET statement_timeout = {timeout_ms}").as_str())
                            .await?;
                        // sqlx 0.8 cannot turn on keepalive on its own socket; the server's
                        // side of it can be, so a holdfast that vanished without a reset
                        // (its host died) does not keep locks for the kernel's TCP timeout.
                        for setting in KEEPALIVE {
                            conn.execute(setting).await?;
                        }
                        Ok(())
                    })
                })
                .connect_lazy(url)
        });
        // The first host is the primary until a failure says otherwise.
        let first = hosts.first().cloned().unwrap_or_default();
        let listen_on = if hosts.is_empty() {
            vec![first.clone()]
        } else {
            hosts.clone()
        };
        let pool = build(&first).map_err(|e| BackendError::Unsupported {
            what: format!("backends.{name}.url: {e}"),
        })?;
        let failover = (hosts.len() > 1).then(|| Failover::new(hosts, build));
        Ok(SqlBackend::start(
            (config.pool_size / 2).max(1),
            name,
            Dialect::Postgres,
            (SqlPool::Any(pool.clone()), SqlPool::Any(pool)),
            (failover, broker::Carrier::Notify(listen_on)),
            (
                config.allow_flush,
                config.response_timeout,
                config.blocking_poll,
            ),
        ))
    }

    fn start(
        writers: usize,
        name: &str,
        dialect: Dialect,
        (writer, reader): (SqlPool, SqlPool),
        (failover, carrier): (Option<Failover>, broker::Carrier),
        (allow_flush, response_timeout, blocking_poll): (bool, Duration, Duration),
    ) -> SqlBackend {
        let readers = reader.size();
        let inner = Arc::new_cyclic(|weak| Inner {
            name: name.to_string(),
            dialect,
            pools: ArcSwap::from_pointee(Pools { writer, reader }),
            failover,
            allow_flush,
            response_timeout,
            migrated: OnceCell::new(),
            group: Some(group::GroupWriter::start(
                weak.clone(),
                writers,
                dialect == Dialect::Sqlite,
                response_timeout,
            )),
            reads: Some(reads::GetBatcher::start(
                weak.clone(),
                dialect,
                readers,
                response_timeout,
            )),
            wakers: Arc::new(waiters::Wakers::new(blocking_poll)),
            broker: broker::Broker::new(name, Some(carrier)),
            lua: crate::backend::lua::Runtime::default(),
            scripts: std::sync::OnceLock::new(),
        });
        // Migrate at start, and reap expired keys, for as long as the backend is in use.
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.ensure_schema().await.is_ok() {
                    if let Err(e) = inner.reap().await {
                        tracing::debug!(backend = %inner.name, error = %e, "reaping expired keys failed");
                    }
                }
            }
        });
        SqlBackend { inner }
    }
}
