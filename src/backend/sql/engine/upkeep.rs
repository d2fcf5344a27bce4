//! The backend's upkeep: the schema made current once, before the first request, and keys
//! whose expiry passed deleted every second.

use super::apply::work_error;
use super::conn::{abandon, rollback, TxConn};
use super::store::stmt;
use super::{connect_error, deadline, now_ms, schema, Inner, SqlStage};
use crate::backend::{BackendError, Proto};
use std::sync::Arc;

impl Inner {
    /// Brings the schema up to date, once: every later call answers at once.
    pub(super) async fn ensure_schema(&self) -> Result<(), BackendError> {
        self.migrated
            .get_or_try_init(|| async {
                let pools = self.pools.load_full();
                let limit = self.response_timeout;
                let deadline = tokio::time::Instant::now() + limit;
                deadline::within(deadline, limit, SqlStage::Connect, async {
                    let link = pools.writer.acquire().await.map_err(connect_error)?;
                    // Not reused: a migration cut short by a timeout must not leave its
                    // transaction (and its lock) on a pooled connection.
                    let mut conn = TxConn::new(link, &pools);
                    conn.bound(limit);
                    schema::migrate(conn.db(), self.dialect)
                        .await
                        .map_err(connect_error)
                })
                .await
            })
            .await
            .map(|_| ())
    }

    /// Deletes keys whose expiry has passed (readers already skip them), within the deadline:
    /// it holds the writer connection SQLite's group commit waits for. SQLite's runs on its
    /// writer's thread, so a wait for another process's lock holds that thread, not a
    /// runtime's; the connection is taken here first, in turn with the groups, since a
    /// reaper waiting for it on that thread would keep the group that holds it from
    /// running there.
    pub(super) async fn reap(self: &Arc<Self>) -> Result<(), BackendError> {
        let pools = self.pools.load_full();
        let conn = TxConn::new(pools.writer.acquire().await.map_err(connect_error)?, &pools);
        let inner = self.clone();
        let reap = async move {
            let progress = deadline::Progress::default();
            let limit = inner.response_timeout;
            let until = tokio::time::Instant::now() + limit;
            let work = inner.reap_expired(conn, &progress);
            deadline::transaction(until, limit, &progress, work).await
        };
        let worker = self.group.as_ref().and_then(|g| g.worker());
        // The thread is gone: the next tick tries again.
        super::lite::LiteWorker::run_on(worker, reap)
            .await
            .unwrap_or(Ok(()))
    }

    async fn reap_expired(
        &self,
        mut conn: TxConn,
        progress: &deadline::Progress,
    ) -> Result<(), BackendError> {
        conn.bound(self.response_timeout);
        let mut ctx = conn.ctx(now_ms(), Proto::Resp2, self.dialect, true);
        ctx.execute(stmt("DELETE FROM hf_tokens WHERE expires_at <= $1").bind(now_ms()))
            .await
            .map_err(connect_error)?;
        let expired: Vec<Vec<u8>> = ctx
            .scalars(
                stmt("SELECT key FROM hf_keys WHERE expires_at <= $1 LIMIT 1000").bind(now_ms()),
            )
            .await
            .map_err(connect_error)?;
        if expired.is_empty() {
            conn.finish();
            return Ok(());
        }
        let begun = conn.exec(self.begin_statement(true)).await;
        begun.map_err(|e| abandon(&mut conn, e))?;
        let mut ctx = conn.ctx(now_ms(), Proto::Resp2, self.dialect, true);
        let mut purged = Ok(());
        for key in &expired {
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
}
