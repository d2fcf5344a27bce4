//! SQLite driven by holdfast itself: `rusqlite` connections, each held by one task at a time
//! (a pool of slots), every statement run in the call with no worker thread between, and
//! the threads the tasks that use them most run on.
//!
//! sqlx drives SQLite through a worker thread per connection: a statement is a message to
//! it and a wake-up back, and that hop costs more than the statement. Here the group-commit
//! writer and the batched readers each hand a whole group (or batch) to a thread of their own
//! ([`LiteWorker`]) as one message: its statements run one after the other, prepared once per
//! connection (its cache), and the replies go back to the runtime once per group.
//!
//! A statement cannot be dropped half-way as an `await` can, so the backend's deadline is
//! the connection's own: a progress handler interrupts a statement past it (`SQLITE_INTERRUPT`,
//! classified by its stage like any other failure), and a lock held by another process is
//! waited for at most `busy_timeout`, itself no longer than the deadline.

use super::store::Fail;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

/// Statements each connection keeps prepared: every shape the model and the engine run,
/// with the few padded sizes of their multi-row forms.
const STATEMENT_CACHE: usize = 512;
/// Virtual-machine steps between two looks at the deadline (a few microseconds).
const STEPS_PER_CHECK: i32 = 1000;

/// How a connection is opened: the file, and the pragmas each new connection runs.
pub(super) struct Opener {
    pub(super) path: PathBuf,
    pub(super) pragmas: Vec<String>,
}

/// A connection and the deadline its statements run under.
pub(super) struct LiteConn {
    conn: rusqlite::Connection,
    /// Nanoseconds after [`epoch`] past which a statement is interrupted; 0: none.
    deadline: Arc<AtomicU64>,
    /// Left in doubt by its last user: replaced by a new connection before the next.
    broken: bool,
}

/// The instant deadlines count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

impl Opener {
    fn open(&self) -> Result<LiteConn, rusqlite::Error> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = rusqlite::Connection::open_with_flags(&self.path, flags)?;
        for pragma in &self.pragmas {
            // Some pragmas answer a row (`journal_mode`): a batch reads and drops it.
            conn.execute_batch(pragma)?;
        }
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let deadline = Arc::new(AtomicU64::new(0));
        let watched = deadline.clone();
        conn.progress_handler(
            STEPS_PER_CHECK,
            Some(move || {
                let until = watched.load(Ordering::Relaxed);
                until != 0 && nanos_since_epoch(Instant::now()) > until
            }),
        );
        Ok(LiteConn {
            conn,
            deadline,
            broken: false,
        })
    }
}

/// A fixed number of connections to one file, each opened when first needed and again
/// after one was closed (a transaction in doubt is never reused).
pub(super) struct LitePool {
    slots: Vec<Arc<Mutex<Option<LiteConn>>>>,
    opener: Arc<Opener>,
    next: AtomicUsize,
}

impl LitePool {
    pub(super) fn new(size: usize, opener: Arc<Opener>) -> LitePool {
        LitePool {
            slots: (0..size.max(1))
                .map(|_| Arc::new(Mutex::new(None)))
                .collect(),
            opener,
            next: AtomicUsize::new(0),
        }
    }

    /// How many connections it holds.
    pub(super) fn size(&self) -> usize {
        self.slots.len()
    }

    /// A free connection if there is one, else the next in turn once its user is done.
    ///
    /// # Errors
    /// SQLite's, when a connection cannot be opened.
    pub(super) async fn acquire(&self) -> Result<Lease, Fail> {
        let count = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % count;
        let turn = (0..count).map(|i| &self.slots[(start + i) % count]);
        let free = turn
            .clone()
            .find_map(|slot| slot.clone().try_lock_owned().ok());
        let mut guard = match free {
            Some(guard) => guard,
            None => self.slots[start].clone().lock_owned().await,
        };
        if guard.as_ref().is_none_or(|c| c.broken) {
            // The old one (if any) is closed first: closing rolls back what it left open.
            *guard = None;
            *guard = Some(self.opener.open()?);
        }
        match OwnedMutexGuard::try_map(guard, Option::as_mut) {
            Ok(conn) => Ok(Lease { conn }),
            // Filled just above.
            Err(_) => Err(Fail::Lite(rusqlite::Error::InvalidQuery)),
        }
    }
}

/// A connection taken from its pool; replaced before its next use when told
/// (`close_on_drop`).
pub(super) struct Lease {
    conn: OwnedMappedMutexGuard<Option<LiteConn>, LiteConn>,
}

impl Lease {
    pub(super) fn conn(&mut self) -> &mut rusqlite::Connection {
        &mut self.conn.conn
    }

    /// Statements run from now on are interrupted past `limit` from now.
    pub(super) fn bound(&self, limit: Duration) {
        let until = nanos_since_epoch(Instant::now() + limit).max(1);
        self.conn.deadline.store(until, Ordering::Relaxed);
    }

    /// Not reused: its transaction is in doubt. Whatever it left open is rolled back as it is
    /// dropped, so the lock it may hold is not kept until the next user replaces it.
    pub(super) fn close_on_drop(&mut self) {
        self.conn.broken = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.conn.deadline.store(0, Ordering::Relaxed);
        if self.conn.broken && !self.conn.conn.is_autocommit() {
            let _ = self.conn.conn.execute_batch("ROLLBACK");
        }
    }
}

/// A thread of its own, with a runtime of its own, that runs the work it is sent: a whole
/// group commit, or a whole batch of reads, per message. The SQLite statements
/// of a piece run there, not on the runtime's workers, and its answer goes back once. The
/// batch itself is gathered on the runtime, as the requests arrive, while the previous one
/// runs here.
pub(super) struct LiteWorker {
    tasks: mpsc::UnboundedSender<Task>,
}

type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl LiteWorker {
    /// Starts the thread; None when it cannot be (never expected: the work then runs where
    /// it is asked for).
    pub(super) fn start(name: &str) -> Option<LiteWorker> {
        // Timers only (the deadline): no I/O driver, so an idle worker parks on a condition
        // variable, cheaper to wake than a poller.
        let mut builder = tokio::runtime::Builder::new_current_thread();
        LiteWorker::on(name, builder.enable_time())
    }

    /// [`LiteWorker::start`], with every driver (for sqlx's pool, which may want them).
    pub(super) fn start_with_io(name: &str) -> Option<LiteWorker> {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        LiteWorker::on(name, builder.enable_all())
    }

    fn on(name: &str, builder: &mut tokio::runtime::Builder) -> Option<LiteWorker> {
        let runtime = builder.build();
        let runtime = match runtime {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(error = %e, "cannot start a SQLite worker's runtime");
                return None;
            }
        };
        let (tasks, mut queue) = mpsc::unbounded_channel::<Task>();
        let started = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                runtime.block_on(async move {
                    // Each piece a task of its own, side by side: one waiting for the
                    // connection another holds (the reaper's, a group's) must not keep that
                    // other from running here. Statements never yield, so two transactions
                    // do not interleave on one connection. Ends once every sender is gone
                    // (the backend was dropped).
                    while let Some(task) = queue.recv().await {
                        tokio::spawn(task);
                    }
                });
            });
        match started {
            Ok(_) => Some(LiteWorker { tasks }),
            Err(e) => {
                tracing::error!(error = %e, "cannot start a SQLite worker thread");
                None
            }
        }
    }

    /// Runs `work` on `worker`'s thread when there is one, else where it is awaited (no
    /// worker: PostgreSQL's, whose statements await the server); None when the thread is
    /// gone.
    pub(super) async fn run_on<T: Send + 'static>(
        worker: Option<&LiteWorker>,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        match worker {
            Some(worker) => worker.run(work).await,
            None => Some(work.await),
        }
    }

    /// Runs `work` on the thread; None when the thread is gone.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (done, answer) = oneshot::channel();
        let task: Task = Box::pin(async move {
            let _ = done.send(work.await);
        });
        self.tasks.send(task).ok()?;
        answer.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;
    use crate::error::{classify, ErrorClass, SqlStage};

    /// The deadline stops a statement that would run far past it (a count of a hundred
    /// million rows), as an interrupt classified by its stage: nothing applied before
    /// `COMMIT`. The connection serves the next statement.
    #[tokio::test]
    async fn a_statement_past_its_deadline_is_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let opener = Opener {
            path: dir.path().join("deadline.db"),
            pragmas: Vec::new(),
        };
        let pool = LitePool::new(1, Arc::new(opener));
        let mut lease = pool.acquire().await.unwrap();
        lease.bound(Duration::from_millis(50));
        let long = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                    WHERE x < 100000000) SELECT count(*) FROM c";
        let started = Instant::now();
        let cut = lease
            .conn()
            .query_row(long, [], |row| row.get::<_, i64>(0))
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            cut.sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        let failure = BackendError::Lite {
            stage: SqlStage::Work,
            source: cut,
        };
        assert_eq!(classify(&failure), ErrorClass::NotAttempted);
        drop(lease);
        // Handed back with no deadline: the next user's statement runs to its end.
        let mut again = pool.acquire().await.unwrap();
        let short = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                     WHERE x < 1000) SELECT count(*) FROM c";
        let n: i64 = again.conn().query_row(short, [], |row| row.get(0)).unwrap();
        assert_eq!(n, 1000);
    }
}
