//! Exact mode's tokens for a whole group: the replies recorded under them read with one
//! statement before the group runs, and the replies of the requests it applied written with
//! one statement before its COMMIT.

use super::super::apply::{record_reply, recorded_reply};
use super::super::conn::{abandon, TxConn};
use super::super::{now_ms, store, unchanged, Inner};
use super::{GroupOutcome, Job};
use crate::backend::{BackendError, Proto};
use redis_protocol::resp3::types::BytesFrame as Frame;

/// Exact mode's tokens for a whole group: the replies recorded under them read with one
/// statement before the group runs, and the new ones written with one statement after,
/// instead of a read and a write per request. A token named twice in the group (a retry
/// queued behind its first attempt) finds the first one's reply. The group's key locks are
/// taken first (`lock_all`), so a concurrent group applying the same request waits, and then
/// sees its token.
#[derive(Default)]
pub(super) struct GroupTokens {
    /// Every token of the group known so far, with its recorded reply.
    pub(super) recorded: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    /// Tokens of requests this group applied, in order: written before COMMIT.
    new: Vec<Vec<u8>>,
}

impl GroupTokens {
    /// Reads the replies recorded under the group's tokens, those of requests sent before
    /// (`Job::again`). A first dispatch's token is new, and its request claimed (`claim`):
    /// no transaction but this one can have applied it, and none will after it.
    pub(super) async fn read(
        inner: &Inner,
        conn: &mut TxConn,
        group: &[Job],
    ) -> Result<GroupTokens, BackendError> {
        let wanted: Vec<&[u8]> = group
            .iter()
            .filter(|j| j.again)
            .filter_map(|j| j.token.as_deref())
            .collect();
        let mut tokens = GroupTokens::default();
        let Some(last) = wanted.last().copied() else {
            return Ok(tokens);
        };
        let padded = wanted.len().next_power_of_two();
        let list = store::placeholders(inner.dialect, padded);
        let now = match inner.dialect {
            store::Dialect::Sqlite => "?".to_string(),
            store::Dialect::Postgres => format!("${}", padded + 1),
        };
        let sql = format!(
            "SELECT token, reply FROM hf_tokens WHERE token IN ({list}) AND expires_at > {now}"
        );
        let mut query = store::stmt(sql);
        for token in wanted.iter().chain(std::iter::repeat(&last)).take(padded) {
            query = query.bind(*token);
        }
        let rows = conn
            .ctx(0, Proto::Resp2, inner.dialect, false)
            .all(query.bind(now_ms()))
            .await;
        let rows = rows.map_err(|e| abandon(conn, e))?;
        for row in rows {
            let token: Vec<u8> = row.try_get(0).map_err(|e| abandon(conn, e))?;
            let reply: Vec<u8> = row.try_get(1).map_err(|e| abandon(conn, e))?;
            tokens.recorded.insert(token, reply);
        }
        Ok(tokens)
    }

    /// Runs `job`, a request with `token`: its recorded reply if it has one, else applied now
    /// and its reply recorded.
    pub(super) async fn run(
        &mut self,
        inner: &Inner,
        conn: &mut TxConn,
        job: &Job,
        token: &[u8],
        dirty: &mut bool,
    ) -> GroupOutcome {
        if let Some(raw) = self.recorded.get(token) {
            return recorded_reply(raw.clone());
        }
        let outcome = job.apply_with(inner, conn, None, dirty).await;
        if let Ok(frames) = &outcome {
            self.record(job, token, frames);
        }
        outcome
    }

    /// Records the reply of a request this group applied under its token, unless the reply
    /// proves the request changed nothing (`unchanged`): then a retry applies it afresh.
    pub(super) fn record(&mut self, job: &Job, token: &[u8], frames: &[Frame]) {
        if let Some(frame) = frames.first() {
            if job
                .single()
                .is_some_and(|args| unchanged::changed_nothing(args, frame))
            {
                return;
            }
            self.recorded.insert(token.to_vec(), record_reply(frame));
            self.new.push(token.to_vec());
        }
    }

    /// Records the replies of the requests this group applied, in one statement.
    pub(super) async fn write(&self, inner: &Inner, conn: &mut TxConn) -> Result<(), BackendError> {
        let Some(last) = self.new.last() else {
            return Ok(());
        };
        let expires = now_ms().saturating_add(crate::backend::TOKEN_TTL.as_millis() as i64);
        // SQLite's list is padded (the last row twice writes it twice); PostgreSQL refuses an
        // upsert naming one row twice.
        let rows = match inner.dialect {
            store::Dialect::Sqlite => self.new.len().next_power_of_two(),
            store::Dialect::Postgres => self.new.len(),
        };
        let values = (0..rows)
            .map(|i| match inner.dialect {
                store::Dialect::Sqlite => "(?, ?, ?)".to_string(),
                store::Dialect::Postgres => {
                    format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO hf_tokens (token, reply, expires_at) VALUES {values} \
             ON CONFLICT (token) DO UPDATE SET reply = excluded.reply, \
             expires_at = excluded.expires_at"
        );
        let mut query = store::stmt(sql);
        for token in self.new.iter().chain(std::iter::repeat(last)).take(rows) {
            let reply = self.recorded.get(token).cloned().unwrap_or_default();
            query = query.bind(token).bind(reply).bind(expires);
        }
        let written = conn
            .ctx(0, Proto::Resp2, inner.dialect, true)
            .execute(query)
            .await;
        written.map_err(|e| abandon(conn, e))?;
        Ok(())
    }
}
