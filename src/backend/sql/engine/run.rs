//! A request's transaction: a connection of the right pool, begun; writes through group
//! commit, point reads through the batched reads, a one-statement read with no transaction,
//! anything else in a transaction of its own under the deadline; then what follows its
//! outcome (publishes delivered, blocked clients woken, a failover looked for).

use super::conn::{at, rollback, Held, TxConn};
use super::{blocking, connect_error, deadline, model, reads};
use super::{Dialect, Fail, Inner, SqlStage, Token, Work};
use crate::backend::lua::Gate;
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::Arc;
use std::time::Duration;

impl Inner {
    /// Commits; `progress` learns first that COMMIT is on its way, so a deadline that cuts
    /// it short reports the transaction in doubt.
    pub(super) async fn commit(
        &self,
        conn: &mut TxConn,
        progress: &deadline::Progress,
    ) -> Result<(), BackendError> {
        progress.committing();
        match conn.exec("COMMIT").await {
            Ok(()) => {
                conn.finish();
                Ok(())
            }
            Err(e) => {
                conn.close_on_drop();
                Err(at(SqlStage::Commit, e))
            }
        }
    }

    /// A connection of the right pool, its first statement (BEGIN, or the read itself)
    /// already answered. A pooled connection that died with its server (a restart) fails
    /// that first statement; nothing of the request has run then, so it is closed. A broken
    /// socket has another one taken, within the acquire timeout; a database error (the
    /// server's last word before it closed the session, `57P01` or `57P05`, or SQLite's
    /// `BUSY`) ends the attempt, NotAttempted, and the retry takes another.
    pub(super) async fn acquire(
        &self,
        write: bool,
        first: Option<&str>,
        acquire_timeout: Duration,
    ) -> Result<TxConn, BackendError> {
        self.acquire_held(&mut Held::default(), write, first, acquire_timeout)
            .await
    }

    /// [`Inner::acquire`], trying the connection `held` keeps first.
    pub(super) async fn acquire_held(
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
                // SQLite's statements stop at the deadline themselves (`lite`).
                conn.bound(self.response_timeout);
                let Some(statement) = first else {
                    // No transaction: a single statement, which its caller finishes once
                    // answered.
                    return Ok(conn);
                };
                match conn.exec(statement).await {
                    Ok(()) => return Ok(conn),
                    // A dead connection: try the next one (a new one once the pool is empty).
                    Err(Fail::Sql(e)) if !matches!(e, sqlx::Error::Database(_)) => {
                        conn.close_on_drop()
                    }
                    Err(e) => {
                        conn.close_on_drop();
                        return Err(connect_error(e));
                    }
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

    pub(super) fn begin_statement(&self, write: bool) -> &'static str {
        match (self.dialect, write) {
            (Dialect::Sqlite, true) => "BEGIN IMMEDIATE",
            (Dialect::Sqlite, false) => "BEGIN",
            (Dialect::Postgres, true) => "BEGIN",
            // One snapshot for every statement of a read.
            (Dialect::Postgres, false) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        }
    }

    /// Runs commands as one transaction: writes through the group-commit writers, reads on a
    /// connection of their own.
    pub(super) async fn run(
        self: &Arc<Self>,
        commands: &[&[Bytes]],
        proto: Proto,
        acquire_timeout: Duration,
        batch: bool,
        token: Option<Token<'_>>,
        script: Option<&dyn Gate>,
    ) -> Result<Vec<Frame>, BackendError> {
        let mut result = self
            .run_once(commands, proto, acquire_timeout, batch, token, script)
            .await;
        self.after(commands, &mut result);
        result
    }

    /// A client's pipelined writes, each one command and its own request, as one entry of
    /// the group-commit queue: one transaction, in their order, each with its own outcome.
    /// Every one of them is a served write (`dispatch_batch` checked). None without a group
    /// writer.
    pub(super) async fn run_writes(
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

    /// [`Inner::run`], before what follows the outcome.
    async fn run_once(
        self: &Arc<Self>,
        commands: &[&[Bytes]],
        proto: Proto,
        acquire_timeout: Duration,
        batch: bool,
        token: Option<Token<'_>>,
        script: Option<&dyn Gate>,
    ) -> Result<Vec<Frame>, BackendError> {
        let mut write = false;
        // A request that may run a script carries its gate (the executor sets it for scripts
        // only): it runs in a transaction of its own, under the script's limit.
        let scripted = script.is_some();
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
        if write && !scripted {
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
                    script: None,
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
        let limit = self.response_timeout + script.map_or(Duration::ZERO, |g| g.limit());
        conn.bound(limit);
        // Outside the group writer every dispatch looks for its token (`apply_exact`).
        let work = Work {
            commands,
            proto,
            batch,
            write,
            token: token.map(|t| t.id),
            script,
        };
        let progress = deadline::Progress::default();
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
