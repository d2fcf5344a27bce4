//! The SQL backend's deadline (`response_timeout`): how long any one database operation may
//! take, and what a request that ran into it is told.
//!
//! A database that stops answering without a reset (a frozen server, a partition) would
//! otherwise hold a request for the kernel's TCP timeout. An operation cut short here leaves
//! its connection in doubt, so the connection is closed, never handed back to the pool (a
//! dropped `TxConn` that did not finish its transaction is closed, `mod.rs`). Closing it
//! before COMMIT was sent makes the database roll the transaction back, so the class follows
//! the stage, as for a broken connection (`src/error.rs`, `SqlStage`).

use super::SqlStage;
use crate::backend::BackendError;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How long after its own deadline the task running an operation may take to answer the
/// request that waits for it (its deadline fired, it is dropping the work and replying).
/// Past this the waiter stops waiting and answers for itself.
pub(super) const GRACE: Duration = Duration::from_millis(500);

/// How far a transaction run under a deadline got: whether its COMMIT may have been sent.
/// It lives outside the transaction's future, which the deadline drops.
#[derive(Default)]
pub(super) struct Progress {
    commit_sent: AtomicBool,
}

impl Progress {
    /// Called just before COMMIT is written: from here on the transaction may be applied.
    pub(super) fn committing(&self) {
        self.commit_sent.store(true, Ordering::Release);
    }

    /// The failure of a transaction the deadline cut short now: in doubt once COMMIT may
    /// have been sent, before that nothing (its connection is closed, so it rolls back).
    pub(super) fn cut_short(
        &self,
        waited: Duration,
        source: tokio::time::error::Elapsed,
    ) -> BackendError {
        let stage = if self.commit_sent.load(Ordering::Acquire) {
            SqlStage::Commit
        } else {
            SqlStage::Work
        };
        expired(stage, waited, source)
    }
}

/// A deadline that passed in `stage`.
pub(super) fn expired(
    stage: SqlStage,
    waited: Duration,
    source: tokio::time::error::Elapsed,
) -> BackendError {
    BackendError::SqlTimeout {
        stage,
        waited,
        source,
    }
}

/// Runs `work` (a whole transaction) until `deadline`, set `waited` after it began; past it
/// the work is dropped and the failure carries the stage `progress` had reached.
pub(super) async fn transaction<T>(
    deadline: Instant,
    waited: Duration,
    progress: &Progress,
    work: impl Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout_at(deadline, work).await {
        Ok(result) => result,
        Err(elapsed) => Err(progress.cut_short(waited, elapsed)),
    }
}

/// Runs `work`, which cannot apply anything (a read, a connect, a statement before COMMIT),
/// until `deadline`; past it the failure is in `stage`.
pub(super) async fn within<T>(
    deadline: Instant,
    waited: Duration,
    stage: SqlStage,
    work: impl Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout_at(deadline, work).await {
        Ok(result) => result,
        Err(elapsed) => Err(expired(stage, waited, elapsed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{classify, ErrorClass};

    async fn stuck() -> Result<(), BackendError> {
        std::future::pending().await
    }

    #[tokio::test(start_paused = true)]
    async fn a_transaction_cut_short_is_in_doubt_only_once_commit_was_sent() {
        let limit = Duration::from_secs(1);
        let progress = Progress::default();
        let early = transaction(Instant::now() + limit, limit, &progress, stuck()).await;
        assert_eq!(
            classify(&early.unwrap_err()),
            ErrorClass::NotAttempted,
            "before COMMIT"
        );
        let late = transaction(Instant::now() + limit, limit, &progress, async {
            progress.committing();
            stuck().await
        })
        .await;
        assert_eq!(
            classify(&late.unwrap_err()),
            ErrorClass::Transient,
            "COMMIT sent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_finishes_in_time_keeps_its_own_outcome() {
        let limit = Duration::from_secs(1);
        let done = within(Instant::now() + limit, limit, SqlStage::Work, async {
            tokio::time::sleep(Duration::from_millis(999)).await;
            Ok(7)
        })
        .await;
        assert_eq!(done.unwrap(), 7);
    }
}
