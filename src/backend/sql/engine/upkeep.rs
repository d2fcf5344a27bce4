//! The backend's upkeep: the schema made current once, before the first request, and keys
//! whose expiry passed deleted every second.

use super::apply::work_error;
use super::conn::{abandon, rollback, TxConn};
use super::store::stmt;
use super::{connect_error, deadline, now_ms, schema, Inner, SqlStage};
use crate::backend::{BackendError, Proto};

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
    /// it holds the writer connection SQLite's group commit waits for.
    pub(super) async fn reap(&self) -> Result<(), BackendError> {
        let progress = deadline::Progress::default();
        let limit = self.response_timeout;
        let until = tokio::time::Instant::now() + limit;
        deadline::transaction(until, limit, &progress, self.reap_expired(&progress)).await
    }

    async fn reap_expired(&self, progress: &deadline::Progress) -> Result<(), BackendError> {
        let pools = self.pools.load_full();
        let mut conn = TxConn::new(pools.writer.acquire().await.map_err(connect_error)?, &pools);
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
