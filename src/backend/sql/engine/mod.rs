//! PostgreSQL and SQLite backends: the Redis data model on tables, through sqlx's `Any`
//! driver so one body of SQL serves both.
//!
//! Each command runs in a transaction of its own (a MULTI/EXEC in one transaction, with a
//! savepoint per command, because Redis applies the rest of a transaction when one of its
//! commands answers an error). A command that answers an error reply is rolled back, so an
//! error never leaves a partial write behind. Failures carry the [`SqlStage`] they happened
//! in: before COMMIT is sent, a transaction cannot have been applied.
//!
//! SQLite runs one writer connection (a single writer is what SQLite allows anyway; one
//! connection means no `database is locked` between holdfast's own writers) beside a pool
//! of readers, in WAL mode with a busy timeout. PostgreSQL serialises writers of the same
//! key with transaction-scoped advisory locks.
//!
//! Statements are the cost (each is a round trip to the database's thread or server), so
//! writes from every client are committed in groups (`group`, a run of plain SETs as one
//! statement) and plain GETs are read in batches (`reads`).

pub mod broker;
mod deadline;
mod group;
mod inbox;
mod queue;
mod ranges;
mod reads;
mod schema;
mod waiters;
mod whole;

use super::model::{
    self, args, blocking, hashes, keys, sets, store, streams, strings, unchanged, watch,
};

use crate::backend::{BackendError, Proto, Request};
use crate::config::{PostgresConfig, SqliteConfig, Synchronous};
use arc_swap::ArcSwap;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use sqlx::any::AnyPoolOptions;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Executor};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use store::{simple, Ctx, Dialect, Fail};
use tokio::sync::OnceCell;

pub use crate::config::postgres_hosts;
pub use crate::error::SqlStage;

/// A pooled connection that may be inside a transaction or a statement. Dropped before its
/// user finished it (a COMMIT or ROLLBACK, or a lone statement, that answered) — an acquire
/// timeout during BEGIN, a deadline that fired mid-statement (`deadline`), a request abandoned
/// at shutdown — it is closed, never handed back to the pool mid-transaction.
struct TxConn {
    conn: PoolConnection<Any>,
    open: bool,
    /// The pools it came from: a connection held across a failover is not reused.
    pools: Arc<Pools>,
}

impl TxConn {
    fn new(conn: PoolConnection<Any>, pools: &Arc<Pools>) -> TxConn {
        TxConn {
            conn,
            open: true,
            pools: pools.clone(),
        }
    }

    /// The transaction ended: the connection may go back to the pool.
    fn finish(&mut self) {
        self.open = false;
    }
}

impl std::ops::Deref for TxConn {
    type Target = PoolConnection<Any>;
    fn deref(&self) -> &PoolConnection<Any> {
        &self.conn
    }
}

impl std::ops::DerefMut for TxConn {
    fn deref_mut(&mut self) -> &mut PoolConnection<Any> {
        &mut self.conn
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

/// Most batches in a row a batching task runs on one held connection before it hands the
/// connection back, so that requests waiting for the pool get their turn.
const HOLD_BATCHES: u32 = 16;

/// The connection a batching task (group commit, batched reads) keeps from one batch to the
/// next while batches keep coming. sqlx tests every connection handed back to its pool with a
/// round trip (a ping, with no switch to turn it off); on SQLite that costs as much as the
/// batch's own statement, on PostgreSQL a network round trip. The task hands it back when
/// its queue runs dry, after [`HOLD_BATCHES`], or when the pools changed (a failover).
#[derive(Default)]
pub(super) struct Held {
    conn: Option<TxConn>,
    run: u32,
}

impl Held {
    /// Whether a connection is held.
    pub(super) fn holds(&self) -> bool {
        self.conn.is_some()
    }

    /// Hands the held connection back to its pool.
    pub(super) fn release(&mut self) {
        self.conn = None;
        self.run = 0;
    }

    /// Keeps `conn` for the next batch, if its transaction ended and its turn is not over.
    fn keep(&mut self, conn: TxConn) {
        self.run += 1;
        if conn.open || self.run >= HOLD_BATCHES {
            self.release();
        } else {
            self.conn = Some(conn);
        }
    }

    /// The held connection, if it belongs to the current pools. It is in use again: dropped
    /// before its user finishes it (a deadline that fired mid-statement), it is closed.
    fn take(&mut self, pools: &Arc<Pools>) -> Option<TxConn> {
        let mut conn = self.conn.take().filter(|c| Arc::ptr_eq(&c.pools, pools))?;
        conn.open = true;
        Some(conn)
    }
}

/// What one request asks of a transaction.
#[derive(Clone, Copy)]
struct Work<'a> {
    /// Its commands (more than one: a MULTI).
    commands: &'a [&'a [Bytes]],
    /// The client's protocol.
    proto: Proto,
    /// A MULTI: each command's error takes its place among the replies.
    batch: bool,
    /// Inside a write transaction.
    write: bool,
    /// Exact mode's token.
    token: Option<&'a [u8]>,
}

/// Exact mode's token for a request, and whether an earlier dispatch of the request was
/// sent (`Request::again`): only then may a reply be recorded under it already.
#[derive(Clone, Copy)]
struct Token<'a> {
    id: &'a [u8],
    again: bool,
}

/// A SQL database serving namespaces.
pub struct SqlBackend {
    inner: Arc<Inner>,
}

/// The pools in use: SQLite's for good; PostgreSQL's for the host that accepts writes now.
struct Pools {
    /// Write transactions (SQLite: exactly one connection).
    writer: AnyPool,
    /// Read transactions (PostgreSQL: the same pool as `writer`).
    reader: AnyPool,
}

/// TCP keepalive on the server's end of each PostgreSQL session: a peer silent for 10 s is
/// probed every 5 s and dropped after 3 unanswered probes.
const KEEPALIVE: [&str; 3] = [
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
];

/// Builds PostgreSQL's pool for one host's URL.
type PoolBuilder = Box<dyn Fn(&str) -> Result<AnyPool, sqlx::Error> + Send + Sync>;

/// PostgreSQL with several hosts (libpq's multi-host URL, primary first): after a failure,
/// the host that accepts writes (`pg_is_in_recovery()` false) is looked for again, and the
/// pools move to it. A promoted standby is found this way within the retry budget.
struct Failover {
    hosts: Vec<String>,
    build: PoolBuilder,
    /// Index of the host the pools point at.
    current: std::sync::atomic::AtomicUsize,
    /// One search at a time.
    searching: tokio::sync::Mutex<()>,
}

struct Inner {
    name: String,
    dialect: Dialect,
    pools: ArcSwap<Pools>,
    failover: Option<Failover>,
    allow_flush: bool,
    /// The deadline of any one database operation (`deadline`).
    response_timeout: Duration,
    /// Set once the schema is current.
    migrated: OnceCell<()>,
    /// Writes go through group commit.
    group: Option<group::GroupWriter>,
    /// Plain GETs, read together (None: one statement each).
    reads: Option<reads::GetBatcher>,
    /// Clients waiting in a blocking command, woken by the writes of this process.
    wakers: Arc<waiters::Wakers>,
    /// Pub/Sub subscribers of this process (`broker.rs`).
    broker: Arc<broker::Broker>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn connect_error(e: sqlx::Error) -> BackendError {
    BackendError::Sql {
        stage: SqlStage::Connect,
        source: e,
    }
}

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
        let url = format!("sqlite://{}?mode=rwc", config.path);
        let busy = config.busy_timeout.as_millis();
        let sync = match config.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        let pragmas = [
            format!("PRAGMA busy_timeout = {busy}"),
            "PRAGMA journal_mode = WAL".to_string(),
            format!("PRAGMA synchronous = {sync}"),
            // The WAL copied back into the database every 10,000 pages (about 40 MB) instead
            // of 1,000: a page changed by many groups in between is copied once. Pipelined
            // SADDs over many keys 1.21-1.35x, reads and unpipelined SETs unchanged.
            "PRAGMA wal_autocheckpoint = 10000".to_string(),
        ];
        let pool = |size: usize, writer: bool| -> Result<AnyPool, BackendError> {
            let mut pragmas = pragmas.to_vec();
            if writer {
                // The writer's statement journals (what undoes a multi-row statement that
                // fails half-way) in memory, not a temporary file: written through the kernel,
                // they were a sixth of SQLite's time under pipelined SADDs. A journal holds the
                // pages one statement changed (at most STATEMENT_ROWS rows). Not the readers':
                // a large sort of theirs (KEYS, SCAN) keeps spilling to a file.
                pragmas.push("PRAGMA temp_store = MEMORY".to_string());
            }
            AnyPoolOptions::new()
                .max_connections(size as u32)
                .min_connections(0)
                // Bounds the connect (a file on a hung disk), and the wait for the writer
                // connection another bounded transaction holds.
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
                })
        };
        let writer = pool(1, true)?;
        let reader = pool(config.readers, false)?;
        // Pub/Sub's own connection (`inbox.rs`), opened at the first subscription.
        let messages = pool(1, true)?;
        Ok(SqlBackend::start(
            1,
            name,
            Dialect::Sqlite,
            (writer, reader),
            (
                None,
                broker::Carrier::Table(Box::new(move |broker| {
                    tokio::spawn(inbox::run(broker, messages.clone()))
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
        let failover = (hosts.len() > 1).then(|| Failover {
            hosts,
            build,
            current: std::sync::atomic::AtomicUsize::new(0),
            searching: tokio::sync::Mutex::new(()),
        });
        Ok(SqlBackend::start(
            (config.pool_size / 2).max(1),
            name,
            Dialect::Postgres,
            (pool.clone(), pool),
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
        (writer, reader): (AnyPool, AnyPool),
        (failover, carrier): (Option<Failover>, broker::Carrier),
        (allow_flush, response_timeout, blocking_poll): (bool, Duration, Duration),
    ) -> SqlBackend {
        let readers = reader.options().get_max_connections() as usize;
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

    /// The `[backends]` key.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Runs one command.
    ///
    /// # Errors
    /// [`BackendError::Sql`] with the stage it failed in, or [`BackendError::Reply`].
    pub async fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Result<Frame, BackendError> {
        let mut replies = self
            .inner
            .run(
                &[request.args],
                request.proto,
                acquire_timeout,
                false,
                request.token.map(|id| Token {
                    id,
                    again: request.again,
                }),
            )
            .await?;
        let frame = replies.pop().unwrap_or(Frame::Null);
        BackendError::check_reply(frame)
    }

    /// A client's pipelined run, first dispatches together (`exec::ahead`): writes as one
    /// entry of the group-commit queue, so they commit in one transaction in their order
    /// (each with its own outcome: one that fails is rolled back to its savepoint, the rest
    /// stand); reads side by side (their GETs join the batched reads; a run of one
    /// whole-collection read is one statement, `whole`, and so is a run of stream ranges,
    /// `ranges`). None when the run
    /// cannot go together; its requests are then sent one by one.
    pub async fn dispatch_batch(
        &self,
        requests: &[Request<'_>],
        acquire_timeout: Duration,
    ) -> Option<Vec<Result<Frame, BackendError>>> {
        if requests.iter().any(|r| r.token.is_some()) {
            return None;
        }
        let proto = requests.first()?.proto;
        let writes: Vec<Option<bool>> = requests
            .iter()
            .map(|r| model::writes(r.args.first().map(|n| n.as_ref()).unwrap_or_default()))
            .collect();
        if writes.iter().all(|w| *w == Some(false)) {
            // Plain GETs, EXISTSes and point reads straight into the batched reads; other reads each on
            // their own, boxed (a SQL command's future is large, and joining moves it).
            let asks: Option<Vec<_>> = requests.iter().map(|r| reads::ask(r.args)).collect();
            if let (Some(asks), Some(batcher)) = (asks, &self.inner.reads) {
                let answers = batcher.read_many(&asks, proto, acquire_timeout).await;
                return Some(self.answered(answers));
            }
            // A run of one whole-collection read: one statement for all its keys.
            let args: Vec<&[Bytes]> = requests.iter().map(|r| r.args).collect();
            if let Some((whole, keys)) = whole::whole_run(&args) {
                let answers = whole::read(&self.inner, whole, &keys, proto, acquire_timeout).await;
                return Some(self.answered(answers));
            }
            // A run of XRANGEs (or XREVRANGEs): one statement for their ranges.
            if let Some((rev, ranges)) = ranges::range_run(&args) {
                let answers = ranges::read(&self.inner, rev, &ranges, acquire_timeout).await;
                return Some(self.answered(answers));
            }
            let each = requests
                .iter()
                .map(|r| Box::pin(self.dispatch(r, acquire_timeout)));
            return Some(futures_util::future::join_all(each).await);
        }
        // A mixed run, or one holding a command SQL backends do not serve (sent on its own,
        // it is answered why), goes one by one.
        if !writes.iter().all(|w| *w == Some(true)) {
            return None;
        }
        let args: Vec<&[Bytes]> = requests.iter().map(|r| r.args).collect();
        let outcomes = self.inner.run_writes(&args, proto, acquire_timeout).await?;
        Some(
            outcomes
                .into_iter()
                .map(|outcome| {
                    let mut replies = outcome?;
                    BackendError::check_reply(replies.pop().unwrap_or(Frame::Null))
                })
                .collect(),
        )
    }

    /// A batched read's answers as the run's outcomes; a failure may mean the primary
    /// moved, as it may for one command.
    fn answered(
        &self,
        answers: Vec<Result<Frame, BackendError>>,
    ) -> Vec<Result<Frame, BackendError>> {
        answers
            .into_iter()
            .map(|answer| {
                if let Err(e) = &answer {
                    self.inner.suspect(e);
                }
                BackendError::check_reply(answer?)
            })
            .collect()
    }

    /// A subscribed client's registration with this backend's broker.
    pub fn feed(&self, outbox: crate::backend::pubsub::Outbox) -> broker::Ticket {
        self.inner.broker.join(outbox)
    }

    /// A MULTI/EXEC emulation owned by one client connection.
    pub fn dedicated(&self, proto: Proto, acquire_timeout: Duration) -> SqlDedicated {
        SqlDedicated {
            inner: self.inner.clone(),
            proto,
            acquire_timeout,
            queue: Mutex::new(None),
            watched: Mutex::new(Vec::new()),
        }
    }

    /// Whether a trivial query is answered within `timeout`.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let probe = async {
            self.inner.ensure_schema().await.ok()?;
            let pools = self.inner.pools.load_full();
            // Closed, not pooled, if the probe is cut short mid-statement.
            let mut conn = TxConn::new(pools.reader.acquire().await.ok()?, &pools);
            conn.execute("SELECT 1").await.ok()?;
            conn.finish();
            Some(())
        };
        matches!(tokio::time::timeout(timeout, probe).await, Ok(Some(_)))
    }
}

impl Inner {
    async fn ensure_schema(&self) -> Result<(), BackendError> {
        self.migrated
            .get_or_try_init(|| async {
                let pools = self.pools.load_full();
                let limit = self.response_timeout;
                let deadline = tokio::time::Instant::now() + limit;
                deadline::within(deadline, limit, SqlStage::Connect, async {
                    let mut conn = pools.writer.acquire().await.map_err(connect_error)?;
                    // Not reused: a migration cut short by a timeout must not leave its
                    // transaction (and its lock) on a pooled connection.
                    conn.close_on_drop();
                    schema::migrate(&mut conn, self.dialect)
                        .await
                        .map_err(connect_error)
                })
                .await
            })
            .await
            .map(|_| ())
    }

    /// Deletes keys whose expiry has passed (readers already skip them), within the deadline:
    /// it holds the writer connection SQLite's group commit waits for.
    async fn reap(&self) -> Result<(), BackendError> {
        let progress = deadline::Progress::default();
        let limit = self.response_timeout;
        let until = tokio::time::Instant::now() + limit;
        deadline::transaction(until, limit, &progress, self.reap_expired(&progress)).await
    }

    async fn reap_expired(&self, progress: &deadline::Progress) -> Result<(), BackendError> {
        let pools = self.pools.load_full();
        let mut conn = TxConn::new(pools.writer.acquire().await.map_err(connect_error)?, &pools);
        sqlx::query("DELETE FROM hf_tokens WHERE expires_at <= $1")
            .bind(now_ms())
            .execute(&mut **conn)
            .await
            .map_err(connect_error)?;
        let expired: Vec<(Vec<u8>, i64)> =
            sqlx::query_as("SELECT key, kind FROM hf_keys WHERE expires_at <= $1 LIMIT 1000")
                .bind(now_ms())
                .fetch_all(&mut **conn)
                .await
                .map_err(connect_error)?;
        if expired.is_empty() {
            conn.finish();
            return Ok(());
        }
        conn.execute(self.begin_statement(true))
            .await
            .map_err(|e| abandon(&mut conn, e))?;
        let mut ctx = Ctx::new(&mut conn, now_ms(), Proto::Resp2, self.dialect, true);
        let mut purged = Ok(());
        for (key, _) in &expired {
            // `meta` purges a key it finds expired.
            purged = ctx.lock(&[key]).await;
            if purged.is_ok() {
                purged = ctx.meta(key).await.map(|_| ());
            }
            if purged.is_err() {
                break;
            }
        }
        if let Err(e) = purged {
            rollback(&mut conn).await;
            return Err(work_error(e));
        }
        self.commit(&mut conn, progress).await
    }

    /// Commits; `progress` learns first that COMMIT is on its way, so a deadline that cuts
    /// it short reports the transaction in doubt.
    async fn commit(
        &self,
        conn: &mut TxConn,
        progress: &deadline::Progress,
    ) -> Result<(), BackendError> {
        progress.committing();
        match conn.execute("COMMIT").await {
            Ok(_) => {
                conn.finish();
                Ok(())
            }
            Err(e) => {
                conn.close_on_drop();
                Err(BackendError::Sql {
                    stage: SqlStage::Commit,
                    source: e,
                })
            }
        }
    }

    /// A connection of the right pool, its first statement (BEGIN, or the read itself)
    /// already answered. A pooled connection that died with its server (a restart) fails
    /// that first statement; nothing of the request has run then, so it is closed. A broken
    /// socket has another one taken, within the acquire timeout; a database error (the
    /// server's last word before it closed the session, `57P01` or `57P05`, or SQLite's
    /// `BUSY`) ends the attempt, NotAttempted, and the retry takes another.
    async fn acquire(
        &self,
        write: bool,
        first: Option<&str>,
        acquire_timeout: Duration,
    ) -> Result<TxConn, BackendError> {
        self.acquire_held(&mut Held::default(), write, first, acquire_timeout)
            .await
    }

    /// [`Inner::acquire`], trying the connection `held` keeps first.
    async fn acquire_held(
        &self,
        held: &mut Held,
        write: bool,
        first: Option<&str>,
        acquire_timeout: Duration,
    ) -> Result<TxConn, BackendError> {
        let attempt = async {
            self.ensure_schema().await?;
            let pools = self.pools.load_full();
            let pool = if write { &pools.writer } else { &pools.reader };
            let mut next = held.take(&pools);
            loop {
                let mut conn = match next.take() {
                    Some(conn) => conn,
                    None => TxConn::new(pool.acquire().await.map_err(connect_error)?, &pools),
                };
                let Some(statement) = first else {
                    // No transaction: a single statement, which its caller finishes once
                    // answered.
                    return Ok(conn);
                };
                match conn.execute(statement).await {
                    Ok(_) => return Ok(conn),
                    Err(e @ sqlx::Error::Database(_)) => {
                        conn.close_on_drop();
                        return Err(connect_error(e));
                    }
                    // A dead connection: try the next one (a new one once the pool is empty).
                    Err(_) => conn.close_on_drop(),
                }
            }
        };
        match tokio::time::timeout(acquire_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(BackendError::AcquireTimeout {
                waited: acquire_timeout,
            }),
        }
    }

    fn begin_statement(&self, write: bool) -> &'static str {
        match (self.dialect, write) {
            (Dialect::Sqlite, true) => "BEGIN IMMEDIATE",
            (Dialect::Sqlite, false) => "BEGIN",
            (Dialect::Postgres, true) => "BEGIN",
            // One snapshot for every statement of a read.
            (Dialect::Postgres, false) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        }
    }

    /// Runs a job's commands on `conn`, inside a transaction the caller opened. Alone
    /// (`batch` false), an error reply is returned as [`BackendError::Reply`] and the caller
    /// rolls back; in a MULTI each command has a savepoint and its error reply takes its
    /// place among the replies, as Redis applies the rest of a transaction. `dirty` is set
    /// when a failure may have left changes behind that only a rollback undoes.
    async fn apply(
        &self,
        conn: &mut PoolConnection<Any>,
        work: Work<'_>,
        dirty: &mut bool,
    ) -> Result<Vec<Frame>, BackendError> {
        let Work {
            commands,
            proto,
            batch,
            write,
            token,
        } = work;
        let mut replies = Vec::with_capacity(commands.len());
        let now = now_ms();
        if let (Some(token), [args]) = (token, commands) {
            return self.apply_exact(conn, args, proto, token, now, dirty).await;
        }
        if batch && write {
            // A MULTI locks every key it names first (PostgreSQL), in a fixed order, so its
            // reads see no other writer's commits half-way.
            let keys: Vec<&[u8]> = commands.iter().flat_map(|c| lock_keys(c)).collect();
            let mut ctx = Ctx::new(&mut *conn, now, proto, self.dialect, write);
            if let Err(f) = ctx.lock(&keys).await {
                return Err(failure(conn, f, true, dirty));
            }
        }
        for args in commands {
            if batch {
                conn.execute("SAVEPOINT hf_cmd").await.map_err(|e| {
                    *dirty = true;
                    abandon(conn, e)
                })?;
            }
            let mut ctx = Ctx::new(&mut *conn, now, proto, self.dialect, write);
            ctx.origin = self.broker.origin();
            match model::run(&mut ctx, args, self.allow_flush).await {
                Ok(frame) => {
                    if batch {
                        conn.execute("RELEASE SAVEPOINT hf_cmd")
                            .await
                            .map_err(|e| {
                                *dirty = true;
                                abandon(conn, e)
                            })?;
                    }
                    replies.push(frame);
                }
                Err(Fail::Reply(text)) if batch => {
                    conn.execute("ROLLBACK TO SAVEPOINT hf_cmd")
                        .await
                        .map_err(|e| {
                            *dirty = true;
                            abandon(conn, e)
                        })?;
                    conn.execute("RELEASE SAVEPOINT hf_cmd")
                        .await
                        .map_err(|e| {
                            *dirty = true;
                            abandon(conn, e)
                        })?;
                    replies.push(error_frame(text));
                }
                Err(f) => {
                    let wrote = ctx.wrote;
                    return Err(failure(conn, f, wrote, dirty));
                }
            }
        }
        Ok(replies)
    }

    /// Exact mode: in the command's own transaction, answer the reply recorded under
    /// `token` if there is one (applying nothing), else apply the command and record its
    /// reply. On PostgreSQL the key's lock comes first, so a dispatch still running on a
    /// connection the client lost finishes before the retry looks for the token.
    async fn apply_exact(
        &self,
        conn: &mut PoolConnection<Any>,
        args: &[Bytes],
        proto: Proto,
        token: &[u8],
        now: i64,
        dirty: &mut bool,
    ) -> Result<Vec<Frame>, BackendError> {
        let mut ctx = Ctx::new(&mut *conn, now, proto, self.dialect, true);
        ctx.origin = self.broker.origin();
        let key = args.get(1).map(|k| k.as_ref()).unwrap_or_default();
        let recorded = async {
            ctx.lock(&[key]).await?;
            let found: Option<Vec<u8>> = sqlx::query_scalar(
                "SELECT reply FROM hf_tokens WHERE token = $1 AND expires_at > $2",
            )
            .bind(token)
            .bind(now)
            .fetch_optional(&mut *ctx.conn)
            .await?;
            Ok::<_, Fail>(found)
        }
        .await;
        let recorded = match recorded {
            Ok(found) => found,
            Err(f) => return Err(failure(conn, f, false, dirty)),
        };
        if let Some(raw) = recorded {
            return recorded_reply(raw);
        }
        let frame = match model::run(&mut ctx, args, self.allow_flush).await {
            Ok(frame) => frame,
            Err(f) => {
                let wrote = ctx.wrote;
                return Err(failure(conn, f, wrote, dirty));
            }
        };
        // A reply that proves nothing changed needs no token (`unchanged`).
        if unchanged::changed_nothing(args, &frame) {
            return Ok(vec![frame]);
        }
        let encoded = record_reply(&frame);
        let expires = now.saturating_add(crate::backend::TOKEN_TTL.as_millis() as i64);
        let stored = ctx
            .exec(
                sqlx::query(
                    "INSERT INTO hf_tokens (token, reply, expires_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (token) DO UPDATE SET reply = excluded.reply, \
                     expires_at = excluded.expires_at",
                )
                .bind(token)
                .bind(encoded)
                .bind(expires),
            )
            .await;
        match stored {
            Ok(_) => Ok(vec![frame]),
            Err(f) => Err(failure(conn, f, true, dirty)),
        }
    }

    /// Runs commands as one transaction: writes through the group-commit writers, reads on a
    /// connection of their own.
    async fn run(
        self: &Arc<Self>,
        commands: &[&[Bytes]],
        proto: Proto,
        acquire_timeout: Duration,
        batch: bool,
        token: Option<Token<'_>>,
    ) -> Result<Vec<Frame>, BackendError> {
        let mut result = self
            .run_once(commands, proto, acquire_timeout, batch, token)
            .await;
        self.after(commands, &mut result);
        result
    }

    /// A client's pipelined writes, each one command and its own request, as one entry of
    /// the group-commit queue: one transaction, in their order, each with its own outcome.
    /// Every one of them is a served write (`dispatch_batch` checked). None without a group
    /// writer.
    async fn run_writes(
        self: &Arc<Self>,
        requests: &[&[Bytes]],
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Option<Vec<Result<Vec<Frame>, BackendError>>> {
        let writer = self.group.as_ref()?;
        let mut outcomes = writer.submit_run(requests, proto, acquire_timeout).await;
        for (args, outcome) in requests.iter().zip(outcomes.iter_mut()) {
            self.after(std::slice::from_ref(args), outcome);
        }
        Some(outcomes)
    }

    /// What follows a transaction's outcome: committed, its publishes are delivered and the
    /// clients blocked on its keys woken; failed, the primary may have moved.
    fn after(
        self: &Arc<Self>,
        commands: &[&[Bytes]],
        result: &mut Result<Vec<Frame>, BackendError>,
    ) {
        if let Ok(replies) = result {
            // Committed: a PUBLISH among them is delivered now (SQLite; PostgreSQL's comes
            // through LISTEN) and answered with the subscribers it reaches.
            for (command, reply) in commands.iter().zip(replies.iter_mut()) {
                if let Some(count) = self.broker.published(command, reply) {
                    *reply = Frame::Number {
                        data: count,
                        attributes: None,
                    };
                }
            }
        }
        if let (Ok(replies), true) = (&*result, self.wakers.any()) {
            // Committed: a client blocked on one of these keys may find something now
            // (every argument is offered as a key: a spurious wake-up only tries again). A
            // blocking pop that found nothing changed nothing, and wakes nobody.
            for (command, reply) in commands.iter().zip(replies) {
                if blocking::wakes(command, reply) {
                    self.wakers.touched(command.iter().skip(1));
                }
            }
        }
        if let Err(e) = &*result {
            self.suspect(e);
        }
    }

    /// Anything but an answer may mean the primary moved: look for it again.
    fn suspect(self: &Arc<Self>, e: &BackendError) {
        if self.failover.is_some() && crate::error::classify(e) != crate::error::ErrorClass::Other {
            let inner = self.clone();
            tokio::spawn(async move { inner.find_primary().await });
        }
    }

    /// Probes every host and moves the pools to the one that accepts writes.
    async fn find_primary(&self) {
        let Some(failover) = &self.failover else {
            return;
        };
        let Ok(_searching) = failover.searching.try_lock() else {
            return;
        };
        for (index, url) in failover.hosts.iter().enumerate() {
            let probe = async {
                let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(url).await?;
                let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                    .fetch_one(&mut conn)
                    .await?;
                let _ = sqlx::Connection::close(conn).await;
                Ok::<bool, sqlx::Error>(standby)
            };
            let Ok(Ok(false)) = tokio::time::timeout(Duration::from_secs(2), probe).await else {
                continue;
            };
            if failover.current.load(Ordering::Acquire) == index {
                return;
            }
            let Ok(pool) = (failover.build)(url) else {
                return;
            };
            let old = self.pools.swap(Arc::new(Pools {
                writer: pool.clone(),
                reader: pool,
            }));
            failover.current.store(index, Ordering::Release);
            tracing::warn!(backend = %self.name, host = index, "the primary moved; following it");
            tokio::spawn(async move { old.writer.close().await });
            return;
        }
    }

    async fn run_once(
        self: &Arc<Self>,
        commands: &[&[Bytes]],
        proto: Proto,
        acquire_timeout: Duration,
        batch: bool,
        token: Option<Token<'_>>,
    ) -> Result<Vec<Frame>, BackendError> {
        let mut write = false;
        for args in commands {
            let name = args.first().map(|n| n.as_ref()).unwrap_or_default();
            match model::writes(name) {
                Some(w) => write |= w,
                None if !batch => {
                    return Err(BackendError::reply(Bytes::from(model::unsupported(name))));
                }
                None => {}
            }
        }
        if write {
            if let Some(writer) = &self.group {
                return writer
                    .submit(commands, proto, batch, token, acquire_timeout)
                    .await;
            }
        }
        if let (false, false, None, Some(reads), [args]) =
            (write, batch, token, &self.reads, commands)
        {
            if let Some(ask) = reads::ask(args) {
                let mut answers = reads.read_many(&[ask], proto, acquire_timeout).await;
                // One answer per request; should none come, the read was not attempted.
                let answer = answers.pop().unwrap_or(Err(BackendError::AcquireTimeout {
                    waited: acquire_timeout,
                }));
                return answer.map(|f| vec![f]);
            }
        }
        // A read of one statement is atomic without a transaction around it.
        let single = !write
            && !batch
            && commands.len() == 1
            && commands
                .first()
                .is_some_and(|args| model::one_statement(args));
        if single {
            // A pooled connection that died with its server fails the read itself; a read
            // can be repeated, on another connection, within the acquire timeout.
            let deadline = tokio::time::Instant::now() + acquire_timeout;
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let mut conn = self.acquire(false, None, left).await?;
                let limit = self.response_timeout;
                let until = tokio::time::Instant::now() + limit;
                let work = Work {
                    commands,
                    proto,
                    batch: false,
                    write: false,
                    token: None,
                };
                let answered = deadline::within(
                    until,
                    limit,
                    SqlStage::Work,
                    self.apply(&mut conn, work, &mut false),
                )
                .await;
                // Cut short mid-statement, it stays open and is closed when dropped.
                if !matches!(answered, Err(BackendError::SqlTimeout { .. })) {
                    conn.finish();
                }
                match answered {
                    Err(BackendError::Sql { source, .. })
                        if !matches!(source, sqlx::Error::Database(_))
                            && tokio::time::Instant::now() < deadline => {}
                    other => return other,
                }
            }
        }
        let begin = self.begin_statement(write);
        let mut conn = self.acquire(write, Some(begin), acquire_timeout).await?;
        // Outside the group writer every dispatch looks for its token (`apply_exact`).
        let work = Work {
            commands,
            proto,
            batch,
            write,
            token: token.map(|t| t.id),
        };
        let progress = deadline::Progress::default();
        let limit = self.response_timeout;
        let until = tokio::time::Instant::now() + limit;
        deadline::transaction(until, limit, &progress, async {
            match self.apply(&mut conn, work, &mut false).await {
                Ok(replies) => {
                    self.commit(&mut conn, &progress).await?;
                    Ok(replies)
                }
                Err(e) => {
                    rollback(&mut conn).await;
                    Err(e)
                }
            }
        })
        .await
    }
}

/// The keys a request of a transaction locks (PostgreSQL): its first key, every key of a
/// `DEL` or `UNLINK` (a run of them, `keys::del_run`, removes them all without locking each
/// on the way, so a concurrent group's `SADD` cannot add to a set being deleted), every key of
/// `EXEC`'s watch check, so no writer of a watched key commits between the check and the
/// commit, and every key `WATCH` registers, so a writer's group either commits before the
/// key's row is there or finds it and raises its version.
fn lock_keys(args: &[Bytes]) -> Vec<&[u8]> {
    let name = args.first().map_or(&[][..], |n| n.as_ref());
    if name == watch::CHECK {
        return args.iter().skip(1).step_by(2).map(|k| k.as_ref()).collect();
    }
    if name == watch::WATCH {
        return args.iter().skip(1).map(|k| k.as_ref()).collect();
    }
    if name.eq_ignore_ascii_case(b"DEL") || name.eq_ignore_ascii_case(b"UNLINK") {
        return args.iter().skip(1).map(|k| k.as_ref()).collect();
    }
    if name.eq_ignore_ascii_case(b"BITOP") {
        return args.iter().skip(2).map(|k| k.as_ref()).collect();
    }
    if name.eq_ignore_ascii_case(b"XGROUP") {
        return args.get(2).map(|k| k.as_ref()).into_iter().collect();
    }
    if name.eq_ignore_ascii_case(b"XREADGROUP") {
        return blocking::stream_keys(args)
            .iter()
            .map(|k| k.as_ref())
            .collect();
    }
    args.get(1).map(|k| k.as_ref()).into_iter().collect()
}

/// Ends a transaction that must not commit; a connection whose ROLLBACK fails is closed.
async fn rollback(conn: &mut TxConn) {
    match conn.execute("ROLLBACK").await {
        Ok(_) => conn.finish(),
        Err(_) => conn.close_on_drop(),
    }
}

/// A command's failure as its transaction's: a database error abandons the connection and
/// the transaction; an error reply needs a rollback only when something was written first.
fn failure(conn: &mut PoolConnection<Any>, f: Fail, wrote: bool, dirty: &mut bool) -> BackendError {
    match f {
        Fail::Sql(e) => {
            *dirty = true;
            abandon(conn, e)
        }
        Fail::Reply(text) => {
            *dirty |= wrote;
            BackendError::reply(Bytes::from(text))
        }
        Fail::Watched => {
            *dirty = true;
            BackendError::Watched
        }
    }
}

/// A request's reply as exact mode records it with its token (RESP3, doubles shortest).
fn record_reply(frame: &Frame) -> Vec<u8> {
    let mut encoded = bytes::BytesMut::new();
    crate::resp::encode_reply(
        &mut encoded,
        frame,
        Proto::Resp3,
        crate::resp::Nils {
            top: false,
            nested: None,
        },
        crate::backend::DoubleStyle::Shortest,
    );
    encoded.to_vec()
}

/// The reply recorded under a token, read back. One that does not read back is never a
/// reason to apply the request again.
fn recorded_reply(raw: Vec<u8>) -> Result<Vec<Frame>, BackendError> {
    match redis_protocol::resp3::decode::complete::decode_bytes(&Bytes::from(raw)) {
        Ok(Some((frame, _))) => Ok(vec![frame]),
        _ => Err(BackendError::reply(Bytes::from_static(
            b"ERR holdfast: the recorded reply of this request cannot be read",
        ))),
    }
}

/// A failure inside the transaction: roll back, and never reuse a connection in doubt.
fn abandon(conn: &mut PoolConnection<Any>, e: sqlx::Error) -> BackendError {
    conn.close_on_drop();
    BackendError::Sql {
        stage: SqlStage::Work,
        source: e,
    }
}

fn work_error(f: Fail) -> BackendError {
    match f {
        Fail::Sql(e) => BackendError::Sql {
            stage: SqlStage::Work,
            source: e,
        },
        Fail::Reply(text) => BackendError::reply(Bytes::from(text)),
        Fail::Watched => BackendError::Watched,
    }
}

fn error_frame(text: String) -> Frame {
    Frame::SimpleError {
        data: text.into(),
        attributes: None,
    }
}

/// MULTI/EXEC, WATCH and blocking commands for one client: commands are queued here and run
/// at EXEC in one transaction, after the watched keys' versions are checked in it (`watch`);
/// a blocking command waits here (`blocking`).
pub struct SqlDedicated {
    inner: Arc<Inner>,
    proto: Proto,
    acquire_timeout: Duration,
    queue: Mutex<Option<Vec<Vec<Bytes>>>>,
    /// The keys watched, with the version each had (`watch`).
    watched: Mutex<Vec<(Bytes, i64)>>,
}

impl SqlDedicated {
    /// One command on this client's transaction state.
    ///
    /// # Errors
    /// As [`SqlBackend::dispatch`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Frame, BackendError> {
        let name = request
            .args
            .first()
            .map(|n| n.to_ascii_uppercase())
            .unwrap_or_default();
        let queued = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            match (name.as_slice(), queue.as_mut()) {
                (b"MULTI", _) => {
                    *queue = Some(Vec::new());
                    return Ok(simple("OK"));
                }
                (b"DISCARD", _) => {
                    *queue = None;
                    self.unwatch();
                    return Ok(simple("OK"));
                }
                (b"EXEC", _) => queue.take(),
                (b"WATCH", Some(_)) => {
                    return Err(BackendError::reply(Bytes::from_static(
                        b"ERR WATCH inside MULTI is not allowed",
                    )))
                }
                (_, Some(q)) => {
                    q.push(request.args.to_vec());
                    return Ok(simple("QUEUED"));
                }
                (b"UNWATCH", None) => {
                    self.unwatch();
                    return Ok(simple("OK"));
                }
                (_, None) => None,
            }
        };
        match queued {
            Some(commands) => self.exec(commands).await,
            None if name.as_slice() == b"WATCH" => self.watch(request.args).await,
            None if name.as_slice() == b"EXEC" => Err(BackendError::reply(Bytes::from_static(
                b"ERR EXEC without MULTI",
            ))),
            None if blocking::waits(request.args) => {
                self.block(request.args, request.hold, request.token).await
            }
            None => self.once(request.args).await,
        }
    }
}

impl SqlDedicated {
    /// `EXEC`: the queued commands in one transaction, after checking (in it) that no
    /// watched key changed; nil, and nothing applied, if one did.
    async fn exec(&self, mut commands: Vec<Vec<Bytes>>) -> Result<Frame, BackendError> {
        let watched = std::mem::take(&mut *self.watched.lock().unwrap_or_else(|p| p.into_inner()));
        let checked = !watched.is_empty();
        if checked {
            let mut check = vec![Bytes::from_static(watch::CHECK)];
            for (key, version) in watched {
                check.push(key);
                check.push(Bytes::from(version.to_string()));
            }
            commands.insert(0, check);
        }
        let refs: Vec<&[Bytes]> = commands.iter().map(|c| c.as_slice()).collect();
        let mut replies = match self
            .inner
            .run(&refs, self.proto, self.acquire_timeout, true, None)
            .await
        {
            Err(BackendError::Watched) => return Ok(Frame::Null),
            other => other?,
        };
        if checked && !replies.is_empty() {
            replies.remove(0);
        }
        Ok(Frame::Array {
            data: replies,
            attributes: None,
        })
    }

    /// `WATCH key ...`: remembers each key's version now.
    async fn watch(&self, args: &[Bytes]) -> Result<Frame, BackendError> {
        let mut register = vec![Bytes::from_static(watch::WATCH)];
        register.extend(args.iter().skip(1).cloned());
        let versions = match self.once(&register).await? {
            Frame::Array { data, .. } => data,
            _ => Vec::new(),
        };
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        for (key, version) in args.iter().skip(1).zip(versions) {
            if let Frame::Number { data, .. } = version {
                watched.push((key.clone(), data));
            }
        }
        Ok(simple("OK"))
    }

    fn unwatch(&self) {
        self.watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// `XREAD … STREAMS key … $ …` with each `$` replaced by that stream's last id now;
    /// None for anything else.
    async fn resolve_last_ids(&self, args: &[Bytes]) -> Result<Option<Vec<Bytes>>, BackendError> {
        let is_xread = args
            .first()
            .is_some_and(|n| n.eq_ignore_ascii_case(b"XREAD"));
        let Some(streams) = args.iter().position(|x| x.eq_ignore_ascii_case(b"STREAMS")) else {
            return Ok(None);
        };
        let rest = args.len() - streams - 1;
        if !is_xread
            || rest == 0
            || rest % 2 != 0
            || !args[streams + 1..].iter().any(|x| x.as_ref() == b"$")
        {
            return Ok(None);
        }
        let keys = &args[streams + 1..streams + 1 + rest / 2];
        let mut ask = vec![Bytes::from_static(b"HF.XLAST")];
        ask.extend(keys.iter().cloned());
        let Frame::Array { data: last, .. } = self.once(&ask).await? else {
            return Ok(None);
        };
        let mut out = args.to_vec();
        for (i, id) in last.into_iter().enumerate() {
            let at = streams + 1 + rest / 2 + i;
            if let (Some(slot), Frame::BlobString { data, .. }) = (out.get_mut(at), id) {
                if slot.as_ref() == b"$" {
                    *slot = data;
                }
            }
        }
        Ok(Some(out))
    }

    /// One command, outside a transaction.
    async fn once(&self, args: &[Bytes]) -> Result<Frame, BackendError> {
        let mut replies = self
            .inner
            .run(&[args], self.proto, self.acquire_timeout, false, None)
            .await?;
        BackendError::check_reply(replies.pop().unwrap_or(Frame::Null))
    }

    /// A blocking command: tried, and tried again whenever one of its keys may have
    /// something, until it takes something or its timeout passes (then nil, as Redis).
    /// A failed try is tried again or answered by [`blocking::after_failure`]: through an
    /// outage for up to `hold`; after a lost reply only with exact mode's `token`, which
    /// every try carries (recorded only by the one that takes something), so the try after
    /// it answers what was taken, even past the command's own timeout.
    async fn block(
        &self,
        args: &[Bytes],
        hold: Duration,
        token: Option<&[u8]>,
    ) -> Result<Frame, BackendError> {
        let until = match blocking::timeout(args) {
            Ok(limit) => limit.map(|d| tokio::time::Instant::now() + d),
            // One attempt answers the error Redis answers first (BLMOVE's sides come
            // before its timeout).
            Err(_) => return self.once(args).await,
        };
        // `XREAD`'s `$` is the last id when the command came, not when a retry runs.
        let resolved;
        let args = match self.resolve_last_ids(args).await? {
            Some(with_ids) => {
                resolved = with_ids;
                resolved.as_slice()
            }
            None => args,
        };
        // Registered before the first try: a write between the try and the wait still
        // wakes it.
        let waiter = self.inner.wakers.wait_on(blocking::keys(args));
        let mut down_since = None;
        // The failure of a try that may have taken something: the next try must look for
        // its token, and must come; none that follows can make it less in doubt.
        let mut owed: Option<BackendError> = None;
        loop {
            let tried = self
                .inner
                .run(
                    &[args],
                    self.proto,
                    self.acquire_timeout,
                    false,
                    token.map(|id| Token {
                        id,
                        again: owed.is_some(),
                    }),
                )
                .await
                .and_then(|mut replies| {
                    BackendError::check_reply(replies.pop().unwrap_or(Frame::Null))
                });
            let e = match tried {
                // Found nothing: neither now nor under its token.
                Ok(Frame::Null) => {
                    down_since = None;
                    owed = None;
                    if !waiter.wait(until).await {
                        return Ok(Frame::Null);
                    }
                    continue;
                }
                Ok(reply) => return Ok(reply),
                Err(e) => e,
            };
            let class = crate::error::classify(&e);
            let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
            let next = blocking::after_failure(class, token.is_some(), since.elapsed(), hold);
            match (class, next) {
                (crate::error::ErrorClass::Transient, blocking::AfterFailure::TryAgain) => {
                    owed = Some(e)
                }
                (_, blocking::AfterFailure::TryAgain) => {}
                // Not attempted: an earlier try's doubt stands. An error reply: the try ran,
                // looked for the token and found none, so it is the answer.
                (crate::error::ErrorClass::NotAttempted, _) => return Err(owed.unwrap_or(e)),
                _ => return Err(e),
            }
            let next = tokio::time::Instant::now() + self.inner.wakers.poll();
            match until {
                Some(until) if until <= next && owed.is_none() => {
                    tokio::time::sleep_until(until).await;
                    return Ok(Frame::Null);
                }
                _ => tokio::time::sleep_until(next).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lock_keys;
    use bytes::Bytes;

    #[test]
    fn lock_keys_name_every_key_a_request_must_hold() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["SET", "k", "v"], &["k"]),
            (&["DEL", "a", "b"], &["a", "b"]),
            (&["unlink", "a", "b", "c"], &["a", "b", "c"]),
            (&["HF.WATCHED", "a", "1", "b", "2"], &["a", "b"]),
            // Every key WATCH registers, not only the first.
            (&["HF.WATCH", "a", "b", "c"], &["a", "b", "c"]),
            (&["BITOP", "AND", "d", "s1", "s2"], &["d", "s1", "s2"]),
            (&["XGROUP", "CREATE", "s", "g", "$"], &["s"]),
            (&["PING"], &[]),
        ];
        for (args, want) in cases {
            let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
            let got: Vec<&[u8]> = lock_keys(&args);
            let want: Vec<&[u8]> = want.iter().map(|w| w.as_bytes()).collect();
            assert_eq!(got, want, "{args:?}");
        }
    }
}
