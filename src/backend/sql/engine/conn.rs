//! A connection in a transaction ([`TxConn`]: closed, never pooled, when dropped before
//! its transaction ended) on either driver ([`SqlLink`]: sqlx's pooled connection for
//! PostgreSQL, holdfast's own for SQLite, `lite`), the one a batching task keeps from batch
//! to batch ([`Held`]), and the two ways a transaction ends without a commit (`rollback`,
//! `abandon`).

use super::lite::{Lease, LitePool};
use super::store::{Ctx, Db, Dialect, Fail};
use super::{Pools, SqlStage};
use crate::backend::{BackendError, Proto};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool};
use std::sync::Arc;
use std::time::Duration;

/// Where a backend's connections come from.
pub(super) enum SqlPool {
    /// sqlx's pool: PostgreSQL.
    Any(AnyPool),
    /// holdfast's own SQLite connections.
    Lite(Arc<LitePool>),
}

impl SqlPool {
    /// A connection, opened if need be.
    pub(super) async fn acquire(&self) -> Result<SqlLink, Fail> {
        match self {
            SqlPool::Any(pool) => Ok(SqlLink::Any(pool.acquire().await?)),
            SqlPool::Lite(pool) => Ok(SqlLink::Lite(pool.acquire().await?)),
        }
    }

    /// How many connections it may hold.
    pub(super) fn size(&self) -> usize {
        match self {
            SqlPool::Any(pool) => pool.options().get_max_connections() as usize,
            SqlPool::Lite(pool) => pool.size(),
        }
    }
}

/// One connection of either kind.
pub(super) enum SqlLink {
    Any(PoolConnection<Any>),
    Lite(Lease),
}

/// A pooled connection that may be inside a transaction or a statement. Dropped before its
/// user finished it (a COMMIT or ROLLBACK, or a lone statement, that answered) — an acquire
/// timeout during BEGIN, a deadline that fired mid-statement (`deadline`), a request abandoned
/// at shutdown — it is closed, never handed back to the pool mid-transaction.
pub(super) struct TxConn {
    link: SqlLink,
    open: bool,
    /// The pools it came from: a connection held across a failover is not reused.
    pools: Arc<Pools>,
}

impl TxConn {
    pub(super) fn new(link: SqlLink, pools: &Arc<Pools>) -> TxConn {
        TxConn {
            link,
            open: true,
            pools: pools.clone(),
        }
    }

    /// The transaction ended: the connection may go back to the pool.
    pub(super) fn finish(&mut self) {
        self.open = false;
    }

    /// The connection, for the data model's statements.
    pub(super) fn db(&mut self) -> Db<'_> {
        match &mut self.link {
            SqlLink::Any(conn) => Db::Any(conn),
            SqlLink::Lite(lease) => Db::Lite(lease.conn()),
        }
    }

    /// A command's context on this connection, nothing written yet.
    pub(super) fn ctx(&mut self, now: i64, proto: Proto, dialect: Dialect, write: bool) -> Ctx<'_> {
        Ctx::on(self.db(), now, proto, dialect, write)
    }

    /// Runs statements without parameters (`BEGIN`, `COMMIT`, `SAVEPOINT`...).
    pub(super) async fn exec(&mut self, sql: &str) -> Result<(), Fail> {
        self.db().batch(sql).await
    }

    /// Statements run on it from now on end within `limit` (SQLite's: interrupted past it;
    /// sqlx's are dropped by the caller's own timeout).
    pub(super) fn bound(&self, limit: Duration) {
        if let SqlLink::Lite(lease) = &self.link {
            lease.bound(limit);
        }
    }

    /// Closed rather than pooled once dropped: its state is in doubt.
    pub(super) fn close_on_drop(&mut self) {
        match &mut self.link {
            SqlLink::Any(conn) => conn.close_on_drop(),
            SqlLink::Lite(lease) => lease.close_on_drop(),
        }
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        if self.open {
            self.close_on_drop();
        }
    }
}

/// A failure of the connection or the database in `stage`, for `classify`.
pub(super) fn at(stage: SqlStage, f: Fail) -> BackendError {
    match f {
        Fail::Sql(source) => BackendError::Sql { stage, source },
        Fail::Lite(source) => BackendError::Lite { stage, source },
        Fail::Reply(text) => BackendError::reply(bytes::Bytes::from(text)),
        Fail::Watched => BackendError::Watched,
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
    pub(super) fn keep(&mut self, conn: TxConn) {
        self.run += 1;
        if conn.open || self.run >= HOLD_BATCHES {
            self.release();
        } else {
            self.conn = Some(conn);
        }
    }

    /// The held connection, if it belongs to the current pools. It is in use again: dropped
    /// before its user finishes it (a deadline that fired mid-statement), it is closed.
    pub(super) fn take(&mut self, pools: &Arc<Pools>) -> Option<TxConn> {
        let mut conn = self.conn.take().filter(|c| Arc::ptr_eq(&c.pools, pools))?;
        conn.open = true;
        Some(conn)
    }
}

/// Ends a transaction that must not commit; a connection whose ROLLBACK fails is closed.
pub(super) async fn rollback(conn: &mut TxConn) {
    match conn.exec("ROLLBACK").await {
        Ok(()) => conn.finish(),
        Err(_) => conn.close_on_drop(),
    }
}

/// A failure inside the transaction: roll back, and never reuse a connection in doubt.
pub(super) fn abandon(conn: &mut TxConn, f: impl Into<Fail>) -> BackendError {
    conn.close_on_drop();
    at(SqlStage::Work, f.into())
}
