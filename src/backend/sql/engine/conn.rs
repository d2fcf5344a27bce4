//! A pooled connection in a transaction ([`TxConn`]: closed, never pooled, when dropped before
//! its transaction ended) and the one a batching task keeps from batch to batch ([`Held`]),
//! with the two ways a transaction ends without a commit (`rollback`, `abandon`).

use super::{Pools, SqlStage};
use crate::backend::BackendError;
use sqlx::pool::PoolConnection;
use sqlx::{Any, Executor};
use std::sync::Arc;

/// A pooled connection that may be inside a transaction or a statement. Dropped before its
/// user finished it (a COMMIT or ROLLBACK, or a lone statement, that answered) — an acquire
/// timeout during BEGIN, a deadline that fired mid-statement (`deadline`), a request abandoned
/// at shutdown — it is closed, never handed back to the pool mid-transaction.
pub(super) struct TxConn {
    conn: PoolConnection<Any>,
    open: bool,
    /// The pools it came from: a connection held across a failover is not reused.
    pools: Arc<Pools>,
}

impl TxConn {
    pub(super) fn new(conn: PoolConnection<Any>, pools: &Arc<Pools>) -> TxConn {
        TxConn {
            conn,
            open: true,
            pools: pools.clone(),
        }
    }

    /// The transaction ended: the connection may go back to the pool.
    pub(super) fn finish(&mut self) {
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
    match conn.execute("ROLLBACK").await {
        Ok(_) => conn.finish(),
        Err(_) => conn.close_on_drop(),
    }
}

/// A failure inside the transaction: roll back, and never reuse a connection in doubt.
pub(super) fn abandon(conn: &mut PoolConnection<Any>, e: sqlx::Error) -> BackendError {
    conn.close_on_drop();
    BackendError::Sql {
        stage: SqlStage::Work,
        source: e,
    }
}
