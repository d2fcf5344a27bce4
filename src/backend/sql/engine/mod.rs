//! PostgreSQL and SQLite backends: the Redis data model on tables, one body of SQL for both
//! (`model::statement`), run on PostgreSQL through sqlx and on SQLite through holdfast's own
//! connections (`lite`: `rusqlite`, statements run where the task runs, no worker thread).
//!
//! Each command runs in a transaction of its own (a MULTI/EXEC in one transaction, with a
//! savepoint per command, because Redis applies the rest of a transaction when one of its
//! commands answers an error). A command that answers an error reply is rolled back, so an
//! error never leaves a partial write behind. Failures carry the [`SqlStage`] they happened
//! in: before COMMIT is sent, a transaction cannot have been applied.
//!
//! SQLite runs one writer connection (a single writer is what SQLite allows anyway; one
//! connection means no `database is locked` between holdfast's own writers) beside a pool
//! of readers, in WAL mode with a busy timeout; the group-commit writer and each batched
//! reader run on a thread of their own. PostgreSQL serialises writers of the same
//! key with transaction-scoped advisory locks.
//!
//! Statements are the cost (each is a round trip to the database's thread or server), so
//! writes from every client are committed in groups (`group`, a run of plain SETs as one
//! statement) and plain GETs are read in batches (`reads`).
//!
//! This file is the backend's front: its types and what a namespace calls. Its rooms: `open`
//! (pools from the configuration), `run` (a request's transaction), `apply` (its commands
//! inside it), `conn` (a connection in a transaction, of either driver), `lite` (SQLite's
//! connections and threads), `dedicated` (a client's own MULTI, WATCH and blocking wait),
//! `failover`, `upkeep` (schema and expiry), and the batching ones above.

mod apply;
pub mod broker;
mod conn;
mod deadline;
mod dedicated;
mod failover;
mod group;
mod inbox;
mod lite;
mod open;
mod queue;
mod ranges;
mod reads;
mod run;
mod schema;
mod upkeep;
mod waiters;
mod whole;

use super::model::{
    self, args, blocking, hashes, keys, lists, sets, store, streams, strings, unchanged, watch,
    zsets,
};

use crate::backend::{BackendError, Proto, Request};
use arc_swap::ArcSwap;
use bytes::Bytes;
use conn::TxConn;
use failover::Failover;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use store::{simple, Dialect, Fail};
use tokio::sync::OnceCell;

pub use crate::config::postgres_hosts;
pub use crate::error::SqlStage;
pub use dedicated::SqlDedicated;
pub use schema::migrate;

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
    /// What a script it runs may call.
    script: Option<&'a dyn crate::backend::lua::Gate>,
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
    writer: conn::SqlPool,
    /// Read transactions (PostgreSQL: the same pool as `writer`).
    reader: conn::SqlPool,
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
    /// The Lua interpreters scripts run on.
    lua: crate::backend::lua::Runtime,
    /// The scripts clients loaded through this holdfast (any backend), for an `EVALSHA` of
    /// a script the database does not hold yet (`model/scripting.rs`).
    scripts: std::sync::OnceLock<Arc<crate::backend::scripts::Scripts>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn connect_error(e: impl Into<Fail>) -> BackendError {
    conn::at(SqlStage::Connect, e.into())
}

impl SqlBackend {
    /// Shares holdfast's scripts: an `EVALSHA` of a script loaded through holdfast but not
    /// into this database (a namespace moved here, a mirror added after the load) runs it.
    pub fn with_scripts(self, scripts: &Arc<crate::backend::scripts::Scripts>) -> SqlBackend {
        let _ = self.inner.scripts.set(scripts.clone());
        self
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
        // SCRIPT KILL is answered at once: the script it stops may hold the writer.
        if let [name, sub] = request.args {
            let killer =
                name.eq_ignore_ascii_case(b"SCRIPT") || name.eq_ignore_ascii_case(b"FUNCTION");
            if killer && sub.eq_ignore_ascii_case(b"KILL") {
                return if self.inner.lua.kill() {
                    Ok(simple("OK"))
                } else {
                    Err(BackendError::reply(Bytes::from_static(
                        b"NOTBUSY No scripts in execution right now.",
                    )))
                };
            }
        }
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
                request.script,
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
        // A script runs on its own, in a transaction of its own (`run_once`).
        let script = |r: &Request<'_>| {
            model::is_script(r.args.first().map(|n| n.as_ref()).unwrap_or_default())
        };
        if requests.iter().any(|r| r.token.is_some() || script(r)) {
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

    /// Whether a trivial query is answered within `timeout`, and if not, why.
    ///
    /// # Errors
    /// What the schema check, the connection or the query met.
    pub async fn check(&self, timeout: Duration) -> Result<(), BackendError> {
        let probe = async {
            self.inner.ensure_schema().await?;
            let pools = self.inner.pools.load_full();
            // Closed, not pooled, if the probe is cut short mid-statement.
            let link = pools.reader.acquire().await.map_err(connect_error)?;
            let mut conn = TxConn::new(link, &pools);
            conn.exec("SELECT 1").await.map_err(connect_error)?;
            conn.finish();
            Ok(())
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(result) => result,
            Err(elapsed) => Err(BackendError::SqlTimeout {
                stage: SqlStage::Connect,
                waited: timeout,
                source: elapsed,
            }),
        }
    }
}
