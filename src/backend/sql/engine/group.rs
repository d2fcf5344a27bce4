//! Group commit: writes from every client connection go to a writer task, which runs whatever
//! has queued up meanwhile as one transaction and answers each request only after the COMMIT.
//! One fsync, and one BEGIN/COMMIT round trip, then serve many clients. SQLite has one writer
//! task (it has one writer connection); PostgreSQL has one per two pooled connections, each
//! taking the next group while the others commit theirs.
//!
//! Each client connection waits for its reply before its next command is sent, so its order
//! holds; each reply is its own command's (a request that fails is rolled back to its
//! savepoint and answers its own error). A request that waited in the queue past its acquire
//! timeout is withdrawn before the writer takes it, never after, so "not attempted" stays true.
//!
//! A group's whole transaction (connection, BEGIN, statements, COMMIT) is bounded by the
//! backend's deadline (`deadline`): cut short before COMMIT was sent, its connection is closed
//! and the database rolls it back, so its requests are answered not attempted; once COMMIT may
//! have been sent, in doubt. A request that gave up waiting for a taken job's answer says in
//! doubt too: the writer may still commit it. Once the group holds its key locks, the writer
//! claims each request (`claim`); one whose submitter gave up before that is not applied,
//! so a retry's transaction, which waits for the same locks, is the only one that can apply
//! a request given up on. That is what lets a first dispatch skip exact mode's token read.

use super::apply::{failure, lock_keys, record_reply, recorded_reply, work_error};
use super::conn::{abandon, rollback, Held, TxConn};
use super::deadline::{self, Progress, GRACE};
use super::queue::Queue;
use super::store::Ctx;
use super::{Inner, SqlStage, Work};
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use sqlx::Executor;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most requests in one transaction.
const MAX_BATCH: usize = 256;
/// Requests waiting for the writer; a full queue makes callers wait (within their timeout).
const QUEUE: usize = 4096;

/// An entry's life: queued, then withdrawn by its submitter or taken by a writer; once
/// taken, claimed by the writer under the group's key locks, or given up by its submitter
/// first (`claim`, `give_up`).
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const WITHDRAWN: u8 = 2;
const CLAIMED: u8 = 3;
const GAVE_UP: u8 = 4;

type GroupOutcome = Result<Vec<Frame>, BackendError>;

struct Job {
    commands: Vec<Vec<Bytes>>,
    proto: Proto,
    batch: bool,
    token: Option<Vec<u8>>,
    /// An earlier dispatch of this request was sent: its token may have a reply.
    again: bool,
}

/// One submission: a request, or a client's pipelined run of requests, taken (or withdrawn)
/// whole, so a run commits in one transaction, in its order, even where several writers
/// commit groups side by side (PostgreSQL). Each job has its own outcome.
struct Entry {
    jobs: Vec<Job>,
    state: Arc<AtomicU8>,
    reply: oneshot::Sender<Vec<GroupOutcome>>,
}

/// The handle requests are submitted through.
pub struct GroupWriter {
    queue: mpsc::Sender<Entry>,
    /// The backend's deadline: how long a taken job's transaction may take.
    response_timeout: Duration,
}

impl GroupWriter {
    /// Starts the writer task for `inner`; it ends when the backend is dropped.
    pub fn start(inner: Weak<Inner>, writers: usize, response_timeout: Duration) -> GroupWriter {
        let (queue, jobs) = Queue::new(QUEUE);
        for _ in 0..writers.max(1) {
            tokio::spawn(run(inner.clone(), jobs.clone()));
        }
        GroupWriter {
            queue,
            response_timeout,
        }
    }

    /// Runs `commands` in the next group; waits at most `acquire_timeout` for the writer to
    /// take it, then for its transaction, which the deadline bounds.
    pub async fn submit(
        &self,
        commands: &[&[Bytes]],
        proto: Proto,
        batch: bool,
        token: Option<super::Token<'_>>,
        acquire_timeout: Duration,
    ) -> GroupOutcome {
        let job = Job {
            commands: commands.iter().map(|c| c.to_vec()).collect(),
            proto,
            batch,
            token: token.map(|t| t.id.to_vec()),
            again: token.is_some_and(|t| t.again),
        };
        let mut outcomes = self.enqueue(vec![job], acquire_timeout).await;
        outcomes.pop().unwrap_or_else(|| Err(lost()))
    }

    /// Runs a client's pipelined requests (`requests`, each one command) in one group, in
    /// their order, each with its own outcome.
    pub async fn submit_run(
        &self,
        requests: &[&[Bytes]],
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Vec<GroupOutcome> {
        let jobs = requests
            .iter()
            .map(|args| Job {
                commands: vec![args.to_vec()],
                proto,
                batch: false,
                token: None,
                again: false,
            })
            .collect();
        self.enqueue(jobs, acquire_timeout).await
    }

    /// Queues `jobs` as one entry and waits for their outcomes, one per job.
    async fn enqueue(&self, jobs: Vec<Job>, acquire_timeout: Duration) -> Vec<GroupOutcome> {
        let count = jobs.len();
        let state = Arc::new(AtomicU8::new(QUEUED));
        let (reply, answer) = oneshot::channel();
        let entry = Entry {
            jobs,
            state: state.clone(),
            reply,
        };
        let all = |error: BackendError| -> Vec<GroupOutcome> {
            let shared = Arc::new(error);
            (0..count).map(|_| Err(share(&shared))).collect()
        };
        let timed_out = || BackendError::AcquireTimeout {
            waited: acquire_timeout,
        };
        // However this wait ends (answered, timed out, or dropped: the client went, shutdown
        // abandoned it), a job not yet claimed is never applied after it.
        let _waiting = Waiting(&state);
        let deadline = tokio::time::Instant::now() + acquire_timeout;
        match tokio::time::timeout_at(deadline, self.queue.send(entry)).await {
            Ok(Ok(())) => {}
            // The writer is gone (the backend is being dropped) or the queue stayed full.
            _ => return all(timed_out()),
        }
        let mut answer = answer;
        let outcomes = match tokio::time::timeout_at(deadline, &mut answer).await {
            Ok(outcomes) => outcomes.unwrap_or_else(|_| all(lost())),
            Err(_) => {
                if state
                    .compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return all(timed_out());
                }
                // Taken: its transaction is under way; its outcome is the answer. The writer
                // answers by its own deadline; should it not, the job may still commit after
                // this request gave up, so the answer is in doubt, never "not applied".
                let limit = self.response_timeout;
                match tokio::time::timeout_at(deadline + limit + GRACE, answer).await {
                    Ok(outcomes) => outcomes.unwrap_or_else(|_| all(lost())),
                    Err(elapsed) => all(deadline::expired(SqlStage::Commit, limit, elapsed)),
                }
            }
        };
        debug_assert_eq!(outcomes.len(), count);
        outcomes
    }
}

/// The submitter stops waiting for its entry: one still queued is withdrawn, one taken but
/// not yet claimed is given up (the writer will not apply it); a claimed one is left to its
/// transaction.
fn give_up(state: &AtomicU8) {
    for (from, to) in [(QUEUED, WITHDRAWN), (TAKEN, GAVE_UP)] {
        if state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
}

/// The writer, holding the group's key locks, claims an entry's jobs: true unless its
/// submitter gave up first. Once claimed, a submitter that stops waiting leaves the job to
/// this transaction, and any retry of it waits for this transaction's locks, then finds its
/// token's reply.
fn claim(state: &AtomicU8) -> bool {
    match state.compare_exchange(TAKEN, CLAIMED, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(now) => now == CLAIMED,
    }
}

/// Gives the entry up when its submitter stops waiting, however that happens.
struct Waiting<'a>(&'a AtomicU8);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        give_up(self.0);
    }
}

/// The writer stopped while holding a request: it may have committed.
fn lost() -> BackendError {
    BackendError::Sql {
        stage: SqlStage::Commit,
        source: sqlx::Error::WorkerCrashed,
    }
}

async fn run(inner: Weak<Inner>, entries: Arc<Queue<Entry>>) {
    let mut held = Held::default();
    let jobs_of = |entry: &Entry| entry.jobs.len();
    while let Some(mut taken) = entries
        .next_batch_holding(MAX_BATCH, jobs_of, &mut held)
        .await
    {
        taken.retain(|entry| {
            entry
                .state
                .compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if taken.is_empty() {
            continue;
        }
        let mut group = Vec::with_capacity(taken.iter().map(jobs_of).sum());
        let mut states = Vec::with_capacity(group.capacity());
        let mut answers = Vec::with_capacity(taken.len());
        for entry in taken {
            answers.push((entry.jobs.len(), entry.reply));
            states.extend(entry.jobs.iter().map(|_| entry.state.clone()));
            group.extend(entry.jobs);
        }
        let Some(inner) = inner.upgrade() else { return };
        crate::metrics::group_commit(&inner.name, group.len());
        let progress = Progress::default();
        let limit = inner.response_timeout;
        let until = tokio::time::Instant::now() + limit;
        let bounded = commit_group(&inner, &group, &states, &mut held, &progress);
        let outcomes = match tokio::time::timeout_at(until, bounded).await {
            Ok(outcomes) => outcomes,
            Err(elapsed) => {
                // Its connection, dropped mid-transaction, is closed (`TxConn`).
                let shared = Arc::new(progress.cut_short(limit, elapsed));
                group.iter().map(|_| Err(share(&shared))).collect()
            }
        };
        let mut outcomes = outcomes.into_iter();
        for (count, reply) in answers {
            let _ = reply.send(outcomes.by_ref().take(count).collect());
        }
    }
}

/// One transaction for the whole group; returns an outcome per job.
///
/// Optimistically first: no savepoints, since a command answers its errors before it
/// changes anything. Should one fail after changing something (or the database fail), the
/// whole transaction is rolled back, uncommitted, and the group runs again with a savepoint
/// per request. `states` are the jobs' entries' (`claim`).
async fn commit_group(
    inner: &Inner,
    group: &[Job],
    states: &[Arc<AtomicU8>],
    held: &mut Held,
    progress: &Progress,
) -> Vec<GroupOutcome> {
    match optimistic(inner, group, states, held, progress).await {
        Some(outcomes) => outcomes,
        None => careful(inner, group, states, progress).await,
    }
}

/// The group's transaction, begun, with every key lock its requests will take.
async fn open(inner: &Inner, group: &[Job], held: &mut Held) -> Result<TxConn, BackendError> {
    // The writer is not bounded by any one request's timeout (a request is only taken when
    // it can still be served) but by the deadline around the whole group (`run`).
    let begin = inner.begin_statement(true);
    let mut conn = inner
        .acquire_held(held, true, Some(begin), inner.response_timeout)
        .await?;
    if let Err(e) = lock_all(inner, &mut conn, group).await {
        rollback(&mut conn).await;
        return Err(e);
    }
    Ok(conn)
}

impl Job {
    /// Runs this request's commands inside the group's transaction.
    async fn apply(&self, inner: &Inner, conn: &mut TxConn, dirty: &mut bool) -> GroupOutcome {
        self.apply_with(inner, conn, self.token.as_deref(), dirty)
            .await
    }

    /// [`Job::apply`], with `token` instead of its own (None: its token, if any, is the
    /// caller's to look up and record).
    async fn apply_with(
        &self,
        inner: &Inner,
        conn: &mut TxConn,
        token: Option<&[u8]>,
        dirty: &mut bool,
    ) -> GroupOutcome {
        let commands: Vec<&[Bytes]> = self.commands.iter().map(|c| c.as_slice()).collect();
        let work = Work {
            commands: &commands,
            proto: self.proto,
            batch: self.batch,
            write: true,
            token,
        };
        inner.apply(conn, work, dirty).await
    }
}

/// Exact mode's tokens for a whole group: the replies recorded under them read with one
/// statement before the group runs, and the new ones written with one statement after,
/// instead of a read and a write per request. A token named twice in the group (a retry
/// queued behind its first attempt) finds the first one's reply. The group's key locks are
/// taken first (`lock_all`), so a concurrent group applying the same request waits, and then
/// sees its token.
#[derive(Default)]
struct Tokens {
    /// Every token of the group known so far, with its recorded reply.
    recorded: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    /// Tokens of requests this group applied, in order: written before COMMIT.
    new: Vec<Vec<u8>>,
}

impl Tokens {
    /// Reads the replies recorded under the group's tokens, those of requests sent before
    /// (`Job::again`). A first dispatch's token is new, and its request claimed (`claim`):
    /// no transaction but this one can have applied it, and none will after it.
    async fn read(inner: &Inner, conn: &mut TxConn, group: &[Job]) -> Result<Tokens, BackendError> {
        let wanted: Vec<&[u8]> = group
            .iter()
            .filter(|j| j.again)
            .filter_map(|j| j.token.as_deref())
            .collect();
        let mut tokens = Tokens::default();
        let Some(last) = wanted.last().copied() else {
            return Ok(tokens);
        };
        let padded = wanted.len().next_power_of_two();
        let list = super::store::placeholders(inner.dialect, padded);
        let now = match inner.dialect {
            super::store::Dialect::Sqlite => "?".to_string(),
            super::store::Dialect::Postgres => format!("${}", padded + 1),
        };
        let sql = format!(
            "SELECT token, reply FROM hf_tokens WHERE token IN ({list}) AND expires_at > {now}"
        );
        let mut query = sqlx::query(&sql);
        for token in wanted.iter().chain(std::iter::repeat(&last)).take(padded) {
            query = query.bind(*token);
        }
        let rows = query
            .bind(super::now_ms())
            .fetch_all(&mut ***conn)
            .await
            .map_err(|e| abandon(conn, e))?;
        for row in rows {
            use sqlx::Row;
            let token: Vec<u8> = row.try_get(0).map_err(|e| abandon(conn, e))?;
            let reply: Vec<u8> = row.try_get(1).map_err(|e| abandon(conn, e))?;
            tokens.recorded.insert(token, reply);
        }
        Ok(tokens)
    }

    /// Runs `job`, a request with `token`: its recorded reply if it has one, else applied now
    /// and its reply recorded.
    async fn run(
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
    fn record(&mut self, job: &Job, token: &[u8], frames: &[Frame]) {
        if let Some(frame) = frames.first() {
            if job
                .single()
                .is_some_and(|args| super::unchanged::changed_nothing(args, frame))
            {
                return;
            }
            self.recorded.insert(token.to_vec(), record_reply(frame));
            self.new.push(token.to_vec());
        }
    }

    /// Records the replies of the requests this group applied, in one statement.
    async fn write(&self, inner: &Inner, conn: &mut TxConn) -> Result<(), BackendError> {
        let Some(last) = self.new.last() else {
            return Ok(());
        };
        let expires = super::now_ms().saturating_add(crate::backend::TOKEN_TTL.as_millis() as i64);
        // SQLite's list is padded (the last row twice writes it twice); PostgreSQL refuses an
        // upsert naming one row twice.
        let rows = match inner.dialect {
            super::store::Dialect::Sqlite => self.new.len().next_power_of_two(),
            super::store::Dialect::Postgres => self.new.len(),
        };
        let values = (0..rows)
            .map(|i| match inner.dialect {
                super::store::Dialect::Sqlite => "(?, ?, ?)".to_string(),
                super::store::Dialect::Postgres => {
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
        let mut query = sqlx::query(&sql);
        for token in self.new.iter().chain(std::iter::repeat(last)).take(rows) {
            let reply = self.recorded.get(token).cloned().unwrap_or_default();
            query = query.bind(token.clone()).bind(reply).bind(expires);
        }
        query
            .execute(&mut ***conn)
            .await
            .map_err(|e| abandon(conn, e))?;
        Ok(())
    }
}

impl Job {
    /// The arguments of a request that is one command on its own, not a MULTI.
    fn single(&self) -> Option<&[Bytes]> {
        match self.commands.as_slice() {
            [args] if !self.batch => Some(args),
            _ => None,
        }
    }

    /// The key and value of a plain `SET key value` (no option, not a MULTI).
    fn plain_set(&self) -> Option<(&[u8], &[u8])> {
        match self.single()? {
            [name, key, value] if name.eq_ignore_ascii_case(b"SET") => Some((key, value)),
            _ => None,
        }
    }

    /// The shape of a command on its own whose runs are written by multi-row statements,
    /// with its arguments after the name; None for any other (or one of the wrong arity,
    /// which answers its error on its own).
    fn shape(&self) -> Option<(Shape, &[Bytes])> {
        let [name, args @ ..] = self.single()? else {
            return None;
        };
        let shape = if name.eq_ignore_ascii_case(b"SADD") && args.len() >= 2 {
            Shape::Sadd
        } else if name.eq_ignore_ascii_case(b"HSET") && args.len() >= 3 && args.len() % 2 == 1 {
            Shape::Hset
        } else if (name.eq_ignore_ascii_case(b"DEL") || name.eq_ignore_ascii_case(b"UNLINK"))
            && !args.is_empty()
        {
            Shape::Del
        } else if self.increment().is_some() {
            Shape::Incr
        } else if name.eq_ignore_ascii_case(b"XADD") && super::streams::plain_add(args).is_some() {
            Shape::Xadd
        } else {
            return None;
        };
        Some((shape, args))
    }

    /// The key and increment of an `INCR`, `DECR`, `INCRBY` or `DECRBY` whose increment
    /// parses; None for any other (an increment that does not parse answers its error on
    /// its own).
    fn increment(&self) -> Option<(&[u8], i64)> {
        let is = |name: &Bytes, word: &[u8]| name.eq_ignore_ascii_case(word);
        match self.single()? {
            [name, key] if is(name, b"INCR") => Some((key, 1)),
            [name, key] if is(name, b"DECR") => Some((key, -1)),
            [name, key, by] if is(name, b"INCRBY") => Some((key, super::args::parse_i64(by)?)),
            [name, key, by] if is(name, b"DECRBY") => {
                Some((key, super::args::parse_i64(by)?.checked_neg()?))
            }
            _ => None,
        }
    }
}

/// The group without savepoints; None when it had to be rolled back. A run of plain SETs is
/// written by one statement, a run of SADDs, HSETs, DELs or increments by a few
/// (`sets::sadd_run`, `hashes::hset_run`, `keys::del_run`, `strings::incr_run`,
/// `streams::xadd_run`). Only a group that committed leaves its connection to `held`: every
/// failure on the way may have put it in doubt.
async fn optimistic(
    inner: &Inner,
    group: &[Job],
    states: &[Arc<AtomicU8>],
    held: &mut Held,
    progress: &Progress,
) -> Option<Vec<GroupOutcome>> {
    let mut conn = open(inner, group, held).await.ok()?;
    // A job given up on before its claim is left out; the careful pass does that.
    if !states.iter().all(|state| claim(state)) {
        rollback(&mut conn).await;
        return None;
    }
    let mut tokens = match Tokens::read(inner, &mut conn, group).await {
        Ok(tokens) => tokens,
        Err(_) => {
            rollback(&mut conn).await;
            return None;
        }
    };
    let mut outcomes: Vec<GroupOutcome> = Vec::with_capacity(group.len());
    let mut changed = Changed::default();
    let mut rest = group;
    while let Some(job) = rest.first() {
        let sets: Vec<(&[u8], &[u8])> = run_of(rest, &tokens, Job::plain_set);
        if sets.len() >= 2 {
            let written = Ctx::new(
                &mut conn,
                super::now_ms(),
                Proto::Resp2,
                inner.dialect,
                true,
            )
            .put_strings(&sets)
            .await;
            if let Err(f) = written {
                // Undone whole; the careful pass runs each on its own and answers its error.
                if let super::store::Fail::Sql(e) = f {
                    let _ = abandon(&mut conn, e);
                }
                rollback(&mut conn).await;
                return None;
            }
            let each = sets.iter().map(|_| Ok(vec![super::store::ok()])).collect();
            let ran = &rest[..sets.len()];
            finish_run(ran, each, &mut tokens, &mut changed, &mut outcomes);
            rest = &rest[sets.len()..];
            continue;
        }
        // Runs of SADDs, HSETs, DELs, increments and XADDs: a few multi-row statements each.
        let shape = job.shape().map(|(shape, _)| shape);
        let run: Vec<&[Bytes]> = run_of(rest, &tokens, |j| {
            j.shape()
                .filter(|(s, _)| Some(*s) == shape)
                .map(|(_, args)| args)
        });
        if let (Some(shape), true) = (shape, run.len() >= 2) {
            let mut ctx = Ctx::new(
                &mut conn,
                super::now_ms(),
                Proto::Resp2,
                inner.dialect,
                true,
            );
            let keyed = || -> Vec<(&[u8], &[Bytes])> {
                // A SADD or HSET of the run has a key (`shape`).
                run.iter()
                    .map(|args| match args.split_first() {
                        Some((key, rest)) => (key.as_ref(), rest),
                        None => (&[][..], *args),
                    })
                    .collect()
            };
            // None from the collection runs: the key holds another kind.
            let wrong = |each: Vec<Option<i64>>| -> Vec<Result<Frame, &'static str>> {
                let wrongtype = super::store::WRONGTYPE;
                let int = super::store::int;
                each.into_iter()
                    .map(|n| n.map(int).ok_or(wrongtype))
                    .collect()
            };
            let applied = match shape {
                Shape::Sadd => super::sets::sadd_run(&mut ctx, &keyed()).await.map(wrong),
                Shape::Hset => super::hashes::hset_run(&mut ctx, &keyed()).await.map(wrong),
                Shape::Del => super::keys::del_run(&mut ctx, &run).await.map(wrong),
                Shape::Incr => {
                    let increments: Vec<(&[u8], i64)> = rest[..run.len()]
                        .iter()
                        .filter_map(Job::increment)
                        .collect();
                    let each = super::strings::incr_run(&mut ctx, &increments).await;
                    each.map(|each| {
                        let int = super::store::int;
                        each.into_iter().map(|n| n.map(int)).collect()
                    })
                }
                Shape::Xadd => {
                    let adds: Vec<_> = run
                        .iter()
                        .filter_map(|args| super::streams::plain_add(args))
                        .collect();
                    super::streams::xadd_run(&mut ctx, &adds).await
                }
            };
            let added = match applied {
                Ok(added) => added,
                Err(f) => {
                    // As for SETs: undone whole, and run again one by one.
                    if let super::store::Fail::Sql(e) = f {
                        let _ = abandon(&mut conn, e);
                    }
                    rollback(&mut conn).await;
                    return None;
                }
            };
            let each = added
                .into_iter()
                .map(|added| match added {
                    Ok(frame) => Ok(vec![frame]),
                    Err(error) => Err(BackendError::reply(Bytes::from_static(error.as_bytes()))),
                })
                .collect();
            finish_run(
                &rest[..run.len()],
                each,
                &mut tokens,
                &mut changed,
                &mut outcomes,
            );
            rest = &rest[run.len()..];
            continue;
        }
        if changed.conflicts(job) {
            outcomes.push(Err(BackendError::Watched));
            rest = &rest[1..];
            continue;
        }
        let mut dirty = false;
        let outcome = match job.token.as_deref() {
            Some(token) if !job.batch && job.commands.len() == 1 => {
                tokens.run(inner, &mut conn, job, token, &mut dirty).await
            }
            _ => job.apply(inner, &mut conn, &mut dirty).await,
        };
        if dirty {
            rollback(&mut conn).await;
            return None;
        }
        changed.note(job, &outcome);
        outcomes.push(outcome);
        rest = &rest[1..];
    }
    if tokens.write(inner, &mut conn).await.is_err() {
        rollback(&mut conn).await;
        return None;
    }
    let outcomes = commit_outcomes(inner, &mut conn, &changed, outcomes, progress).await;
    held.keep(conn);
    Some(outcomes)
}

/// What `shape` takes of the jobs at the start of `rest`, up to the first it refuses or that
/// exact mode must not apply with the others: one whose token has a recorded reply (it
/// answers that reply, applying nothing), or whose token an earlier job of the run has (a
/// retry queued behind its first attempt: it answers the first's reply).
fn run_of<'a, T>(rest: &'a [Job], tokens: &Tokens, shape: impl Fn(&'a Job) -> Option<T>) -> Vec<T> {
    let mut seen = std::collections::HashSet::new();
    rest.iter()
        .map_while(|job| {
            if let Some(token) = job.token.as_deref() {
                if tokens.recorded.contains_key(token) || !seen.insert(token) {
                    return None;
                }
            }
            shape(job)
        })
        .collect()
}

/// The outcomes of a run applied together, one per job of `ran`: each reply recorded under
/// its job's token (exact mode), each change noted for `WATCH`.
fn finish_run(
    ran: &[Job],
    each: Vec<GroupOutcome>,
    tokens: &mut Tokens,
    changed: &mut Changed,
    outcomes: &mut Vec<GroupOutcome>,
) {
    for (job, outcome) in ran.iter().zip(each) {
        if let (Some(token), Ok(frames)) = (job.token.as_deref(), &outcome) {
            tokens.record(job, token, frames);
        }
        changed.note(job, &outcome);
        outcomes.push(outcome);
    }
}

/// The commands whose runs are written by multi-row statements (besides `SET`).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Sadd,
    Hset,
    Del,
    /// `INCR`, `DECR`, `INCRBY`, `DECRBY`.
    Incr,
    /// `XADD` without trimming (`streams::plain_add`).
    Xadd,
}

/// Takes every key lock the group's requests will take (PostgreSQL), all at once and in a
/// fixed order, so two groups over the same keys wait for each other instead of deadlocking.
async fn lock_all(inner: &Inner, conn: &mut TxConn, group: &[Job]) -> Result<(), BackendError> {
    let keys: Vec<&[u8]> = group
        .iter()
        .flat_map(|job| job.commands.iter().flat_map(|c| lock_keys(c)))
        .collect();
    let mut ctx = Ctx::new(&mut *conn, 0, Proto::Resp2, inner.dialect, true);
    ctx.lock(&keys)
        .await
        .map_err(|f| failure(conn, f, true, &mut false))
}

/// Commits, and turns the outcomes of the requests that succeeded into the commit's error
/// when it fails: they may or may not be on disk now; what failed was undone.
async fn commit_outcomes(
    inner: &Inner,
    conn: &mut TxConn,
    changed: &Changed,
    outcomes: Vec<GroupOutcome>,
    progress: &Progress,
) -> Vec<GroupOutcome> {
    if let Err(e) = changed.touch(inner, conn).await {
        let e = match e {
            super::store::Fail::Sql(e) => abandon(conn, e),
            other => work_error(other),
        };
        return rollback_all(conn, outcomes.len(), e).await;
    }
    if let Err(e) = inner.commit(conn, progress).await {
        let shared = Arc::new(e);
        return outcomes
            .into_iter()
            .map(|o| match o {
                Ok(_) => Err(share(&shared)),
                failed => failed,
            })
            .collect();
    }
    outcomes
}

/// The group with a savepoint per request; each looks for its own token (`apply_exact`),
/// and one whose submitter gave up before its claim is not applied. The optimistic pass's
/// rollback released the key locks: a retry of a claimed request may have been applied by
/// another writer since. Looking up every token here, first dispatches' too, under the locks
/// taken again, finds it.
async fn careful(
    inner: &Inner,
    group: &[Job],
    states: &[Arc<AtomicU8>],
    progress: &Progress,
) -> Vec<GroupOutcome> {
    let mut conn = match open(inner, group, &mut Held::default()).await {
        Ok(conn) => conn,
        Err(e) => {
            let shared = Arc::new(e);
            return group.iter().map(|_| Err(share(&shared))).collect();
        }
    };
    let mut outcomes: Vec<GroupOutcome> = Vec::with_capacity(group.len());
    let mut changed = Changed::default();
    for (job, state) in group.iter().zip(states) {
        if !claim(state) {
            // Nobody waits for this answer.
            outcomes.push(Err(lost()));
            continue;
        }
        if changed.conflicts(job) {
            outcomes.push(Err(BackendError::Watched));
            continue;
        }
        if let Err(e) = conn.execute("SAVEPOINT hf_job").await {
            let e = abandon(&mut conn, e);
            return rollback_all(&mut conn, group.len(), e).await;
        }
        let outcome = job.apply(inner, &mut conn, &mut false).await;
        let undo = outcome.is_err();
        if undo {
            if let Err(e) = conn.execute("ROLLBACK TO SAVEPOINT hf_job").await {
                // The connection failed: the group's transaction is lost, not answered.
                let e = abandon(&mut conn, e);
                return rollback_all(&mut conn, group.len(), e).await;
            }
        }
        if let Err(e) = conn.execute("RELEASE SAVEPOINT hf_job").await {
            let e = abandon(&mut conn, e);
            return rollback_all(&mut conn, group.len(), e).await;
        }
        changed.note(job, &outcome);
        outcomes.push(outcome);
    }
    commit_outcomes(inner, &mut conn, &changed, outcomes, progress).await
}

/// The keys the group's applied requests changed so far (`watch`): a later request of the
/// same transaction whose `EXEC` watched one of them is aborted (its check would read the
/// version before the group raises it), and at the end their versions are raised, with one
/// statement.
#[derive(Default)]
struct Changed {
    /// Every key (`FLUSHDB`, `FLUSHALL`).
    all: bool,
    keys: std::collections::HashSet<Vec<u8>>,
}

impl Changed {
    /// Notes what an applied request changed.
    fn note(&mut self, job: &Job, outcome: &GroupOutcome) {
        let Ok(replies) = outcome else { return };
        for (args, reply) in job.commands.iter().zip(replies) {
            let name = args.first().map_or(&[][..], |n| n.as_ref());
            // A blocking pop that found nothing changed nothing.
            if matches!(reply, Frame::Null) && super::blocking::is_blocking(name) {
                continue;
            }
            match super::watch::modified(args) {
                Some(keys) => self.keys.extend(keys.into_iter().map(<[u8]>::to_vec)),
                None => self.all = true,
            }
        }
    }

    /// Whether `job` is an `EXEC` that watched a key changed earlier in the group.
    fn conflicts(&self, job: &Job) -> bool {
        job.commands.iter().any(|args| {
            args.first()
                .is_some_and(|n| n.as_ref() == super::watch::CHECK)
                && args
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .any(|k| self.all || self.keys.contains(k.as_ref()))
        })
    }

    /// Raises the versions of the watched keys among those changed.
    async fn touch(&self, inner: &Inner, conn: &mut TxConn) -> Result<(), super::store::Fail> {
        if !self.all && self.keys.is_empty() {
            return Ok(());
        }
        let mut ctx = Ctx::new(conn, 0, Proto::Resp2, inner.dialect, true);
        if self.all {
            return super::watch::touch(&mut ctx, None).await;
        }
        let mut keys: Vec<&[u8]> = self.keys.iter().map(Vec::as_slice).collect();
        keys.sort_unstable();
        super::watch::touch(&mut ctx, Some(&keys)).await
    }
}

/// The transaction cannot go on: nothing of it is committed, so every job fails with the
/// same error, before COMMIT.
async fn rollback_all(conn: &mut TxConn, jobs: usize, error: BackendError) -> Vec<GroupOutcome> {
    rollback(conn).await;
    let shared = Arc::new(error);
    (0..jobs).map(|_| Err(share(&shared))).collect()
}

/// One failure handed to several requests: each gets the same error, and so the same class.
fn share(error: &Arc<BackendError>) -> BackendError {
    BackendError::Shared(error.clone())
}

#[cfg(test)]
mod tests {
    use super::{claim, give_up, run_of, Job, Shape, Tokens};
    use super::{CLAIMED, GAVE_UP, QUEUED, TAKEN, WITHDRAWN};
    use crate::backend::Proto;
    use bytes::Bytes;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_job_is_claimed_or_given_up_never_both() {
        // (state before, give_up's state after, claim's answer and state after)
        let cases = [
            (QUEUED, WITHDRAWN, (false, QUEUED)),
            (TAKEN, GAVE_UP, (true, CLAIMED)),
            (CLAIMED, CLAIMED, (true, CLAIMED)),
            (GAVE_UP, GAVE_UP, (false, GAVE_UP)),
            (WITHDRAWN, WITHDRAWN, (false, WITHDRAWN)),
        ];
        for (before, given_up, (claimed, after)) in cases {
            let state = AtomicU8::new(before);
            give_up(&state);
            assert_eq!(state.load(Ordering::Acquire), given_up, "give up {before}");
            let state = AtomicU8::new(before);
            assert_eq!(claim(&state), claimed, "claim {before}");
            assert_eq!(state.load(Ordering::Acquire), after, "claim {before}");
            // Whichever comes first, the other does not undo it.
            let state = AtomicU8::new(before);
            let won = claim(&state);
            give_up(&state);
            assert_eq!(won, claim(&state), "a claim stands {before}");
            // A submitter that goes (its future dropped) gives up as one that timed out.
            let state = AtomicU8::new(before);
            drop(super::Waiting(&state));
            assert_eq!(state.load(Ordering::Acquire), given_up, "dropped {before}");
        }
    }

    /// On a real SQLite file: a first dispatch's token is not looked up, a dispatch sent
    /// again finds its reply, and a job given up on before its claim is not applied.
    /// A SQLite backend on a file in `dir`, its schema made.
    async fn sqlite(dir: &tempfile::TempDir) -> super::super::SqlBackend {
        use crate::backend::{Backend, Request};
        let path = dir.path().join("g.db");
        let config = crate::config::SqliteConfig::at(path.to_str().unwrap());
        let Ok(Backend::Sql(backend)) = Backend::build(
            "g",
            &crate::config::BackendConfig::Sqlite(config),
            &Arc::default(),
        ) else {
            panic!("a SQLite backend");
        };
        // The schema is made in the background.
        let ping = [Bytes::from_static(b"GET"), Bytes::from_static(b"n")];
        let started = std::time::Instant::now();
        while backend
            .dispatch(
                &Request::new(&ping, Proto::Resp2, 1),
                std::time::Duration::from_secs(5),
            )
            .await
            .is_err()
        {
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        backend
    }

    /// Each outcome's integer reply; None for an error or another kind of reply.
    fn integers(outcomes: Vec<super::GroupOutcome>) -> Vec<Option<i64>> {
        outcomes
            .into_iter()
            .map(|o| match o.ok()?.first()? {
                redis_protocol::resp3::types::BytesFrame::Number { data, .. } => Some(*data),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_group_applies_what_is_claimed_and_reads_only_tokens_sent_before() {
        use crate::backend::Request;
        let dir = tempfile::tempdir().unwrap();
        let backend = sqlite(&dir).await;
        let get = [Bytes::from_static(b"GET"), Bytes::from_static(b"n")];
        let read = || async {
            let request = Request::new(&get, Proto::Resp2, 1);
            backend
                .dispatch(&request, std::time::Duration::from_secs(5))
                .await
        };
        let incr = |token: &str, again: bool| Job {
            again,
            ..job(&["INCR", "n"], Some(token), false)
        };
        let inner = &backend.inner;
        let run = |jobs: Vec<(Job, u8)>| async move {
            let (group, states): (Vec<Job>, Vec<Arc<AtomicU8>>) = jobs
                .into_iter()
                .map(|(job, s)| (job, Arc::new(AtomicU8::new(s))))
                .unzip();
            let progress = super::Progress::default();
            let mut held = super::Held::default();
            let outcomes = super::commit_group(inner, &group, &states, &mut held, &progress).await;
            let replies = integers(outcomes);
            let value = match read().await.unwrap() {
                redis_protocol::resp3::types::BytesFrame::BlobString { data, .. } => {
                    String::from_utf8_lossy(&data).into_owned()
                }
                other => format!("{other:?}"),
            };
            (replies, value)
        };
        // (what, the group's jobs and their entries' states, each job's reply, n after)
        type Case = (&'static str, Vec<(Job, u8)>, Vec<Option<i64>>, &'static str);
        let cases: Vec<Case> = vec![
            (
                "first dispatch",
                vec![(incr("a", false), TAKEN)],
                vec![Some(1)],
                "1",
            ),
            (
                "sent again",
                vec![(incr("a", true), TAKEN)],
                vec![Some(1)],
                "1",
            ),
            // What a first dispatch skips: the lookup. (The executor never sends a token's
            // first dispatch twice; this shows the read is not made.)
            (
                "not looked up",
                vec![(incr("a", false), TAKEN)],
                vec![Some(2)],
                "2",
            ),
            (
                "given up",
                vec![(incr("b", false), GAVE_UP)],
                vec![None],
                "2",
            ),
            (
                "given up beside a claimed one",
                vec![
                    (incr("c", false), GAVE_UP),
                    (incr("d", false), TAKEN),
                    (incr("c", true), TAKEN),
                ],
                vec![None, Some(3), Some(4)],
                "4",
            ),
            (
                "claimed before",
                vec![(incr("e", false), CLAIMED)],
                vec![Some(5)],
                "5",
            ),
            (
                "and then sent again",
                vec![(incr("e", true), TAKEN)],
                vec![Some(5)],
                "5",
            ),
        ];
        for (what, jobs, replies, value) in cases {
            assert_eq!(run(jobs).await, (replies, value.to_string()), "{what}");
        }
    }

    /// On a real SQLite file, through both passes of a group (one run of multi-row
    /// statements, and a savepoint per request): a reply that proves nothing changed
    /// records no token, so its retry applies afresh; any other reply is recorded, and its
    /// retry answers it whatever the keys hold by then.
    #[tokio::test]
    async fn exact_mode_records_no_token_for_a_write_that_changed_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let backend = sqlite(&dir).await;
        let inner = &backend.inner;
        for careful in [false, true] {
            let pass = if careful { "careful" } else { "optimistic" };
            let run = |jobs: Vec<Job>| async move {
                let states: Vec<Arc<AtomicU8>> = jobs
                    .iter()
                    .map(|_| Arc::new(AtomicU8::new(TAKEN)))
                    .collect();
                let progress = super::Progress::default();
                let outcomes = if careful {
                    super::careful(inner, &jobs, &states, &progress).await
                } else {
                    let mut held = super::Held::default();
                    super::commit_group(inner, &jobs, &states, &mut held, &progress).await
                };
                integers(outcomes)
            };
            let first = |args: &[&str], token: &str| job(args, Some(token), false);
            let again = |args: &[&str], token: &str| Job {
                again: true,
                ..job(args, Some(token), false)
            };
            let t = |name: &str| format!("{pass}-{name}");
            // Keys of each pass's own.
            let (k, j, s) = (
                format!("{pass}:k"),
                format!("{pass}:j"),
                format!("{pass}:s"),
            );
            let (k, j, s) = (k.as_str(), j.as_str(), s.as_str());
            let plain = |args: &[&str]| job(args, None, false);
            // The first case's three requests, sent again with their tokens.
            let retries = || {
                vec![
                    again(&["DEL", k], &t("a")),
                    again(&["DEL", j], &t("b")),
                    again(&["SADD", s, "m"], &t("c")),
                ]
            };
            // (what, the group, each job's reply)
            type Case<'a> = (&'a str, Vec<Job>, Vec<Option<i64>>);
            let cases: Vec<Case> = vec![
                (
                    "DELs of absent keys, and a SADD of a member already there",
                    vec![
                        plain(&["SADD", s, "m"]),
                        first(&["DEL", k], &t("a")),
                        first(&["DEL", j], &t("b")),
                        first(&["SADD", s, "m"], &t("c")),
                    ],
                    vec![Some(1), Some(0), Some(0), Some(0)],
                ),
                (
                    "the keys written by another client",
                    vec![
                        plain(&["SET", k, "1"]),
                        plain(&["SET", j, "1"]),
                        plain(&["SREM", s, "m"]),
                    ],
                    vec![None, None, Some(1)],
                ),
                (
                    "retried: no token, so applied afresh",
                    retries(),
                    vec![Some(1), Some(1), Some(1)],
                ),
                (
                    "retried again: those replies changed something, and were recorded",
                    retries(),
                    vec![Some(1), Some(1), Some(1)],
                ),
            ];
            for (what, jobs, want) in cases {
                assert_eq!(run(jobs).await, want, "{pass}: {what}");
            }
        }
    }

    /// The gap between the passes: the optimistic pass claimed a request and rolled back,
    /// releasing its key locks, and before the careful pass takes them again a retry of the
    /// same request (its token, sent again) is applied by another writer and commits. The
    /// careful pass looks for the token under its locks (`apply_exact`: on PostgreSQL a
    /// statement of its own, after the locks, so it sees that commit) and answers the
    /// retry's reply, applying nothing. In the other order the retry finds the careful
    /// pass's token. Either way the request is applied once.
    #[tokio::test]
    async fn a_retry_applied_between_the_two_passes_is_not_applied_again() {
        let dir = tempfile::tempdir().unwrap();
        let backend = sqlite(&dir).await;
        let inner = &backend.inner;
        let states = |state: u8| vec![Arc::new(AtomicU8::new(state))];
        let progress = super::Progress::default();
        let incr = |key: &str, again: bool| Job {
            again,
            ..job(&["INCR", key], Some(key), false)
        };
        // A group that commits keeps SQLite's one writer connection (`held`); the careful
        // pass opens its own, so none is kept here.
        let group = |jobs: Vec<Job>, state: u8| async move {
            let states: Vec<Arc<AtomicU8>> = jobs
                .iter()
                .map(|_| Arc::new(AtomicU8::new(state)))
                .collect();
            let progress = super::Progress::default();
            integers(
                super::commit_group(
                    inner,
                    &jobs,
                    &states,
                    &mut super::Held::default(),
                    &progress,
                )
                .await,
            )
        };
        // The retry first, then the careful pass of the claimed first dispatch.
        let retry = group(vec![incr("x", true)], TAKEN).await;
        let careful = super::careful(inner, &[incr("x", false)], &states(CLAIMED), &progress).await;
        assert_eq!((retry, integers(careful)), (vec![Some(1)], vec![Some(1)]));
        // The careful pass first, then the retry.
        let careful = super::careful(inner, &[incr("y", false)], &states(CLAIMED), &progress).await;
        let retry = group(vec![incr("y", true)], TAKEN).await;
        assert_eq!((integers(careful), retry), (vec![Some(1)], vec![Some(1)]));
        // Applied once each: a plain INCR after them counts 2.
        let after = group(
            vec![
                job(&["INCR", "x"], None, false),
                job(&["INCR", "y"], None, false),
            ],
            TAKEN,
        )
        .await;
        assert_eq!(after, vec![Some(2), Some(2)]);
    }

    fn job(args: &[&str], token: Option<&str>, batch: bool) -> Job {
        Job {
            commands: vec![args.iter().map(|a| Bytes::from(a.to_string())).collect()],
            proto: Proto::Resp2,
            batch,
            token: token.map(|t| t.as_bytes().to_vec()),
            again: false,
        }
    }

    /// How many jobs from the start of `jobs` go into one run of the first one's shape.
    fn run_length(jobs: &[Job], recorded: &[&str]) -> usize {
        let mut tokens = Tokens::default();
        for t in recorded {
            tokens.recorded.insert(t.as_bytes().to_vec(), Vec::new());
        }
        let shape = jobs[0].shape().map(|(s, _)| s);
        run_of(jobs, &tokens, |j| {
            j.shape().filter(|(s, _)| Some(*s) == shape)
        })
        .len()
    }

    #[test]
    fn a_run_stops_where_exact_mode_must_answer_a_job_on_its_own() {
        let sadd = |t| job(&["SADD", "s", "m"], t, false);
        let cases: &[(&str, Vec<Job>, &[&str], usize)] = &[
            (
                "fast mode",
                vec![sadd(None), sadd(None), sadd(None)],
                &[],
                3,
            ),
            (
                "tokens of their own",
                vec![sadd(Some("a")), sadd(Some("b"))],
                &[],
                2,
            ),
            (
                "a recorded reply answers its job",
                vec![sadd(Some("a")), sadd(Some("b")), sadd(Some("c"))],
                &["b"],
                1,
            ),
            (
                "a retry behind its first attempt",
                vec![sadd(Some("a")), sadd(Some("b")), sadd(Some("a"))],
                &[],
                2,
            ),
            (
                "another shape",
                vec![sadd(None), job(&["HSET", "h", "f", "v"], None, false)],
                &[],
                1,
            ),
            (
                "a MULTI",
                vec![sadd(None), job(&["SADD", "s", "m"], None, true)],
                &[],
                1,
            ),
            (
                "HSET without a value",
                vec![
                    job(&["HSET", "h", "f", "v"], None, false),
                    job(&["HSET", "h", "f"], None, false),
                ],
                &[],
                1,
            ),
            (
                "DEL and UNLINK are one shape",
                vec![
                    job(&["DEL", "a"], None, false),
                    job(&["UNLINK", "b", "c"], None, false),
                ],
                &[],
                2,
            ),
        ];
        for (what, jobs, recorded, want) in cases {
            assert_eq!(run_length(jobs, recorded), *want, "{what}");
        }
        assert!(matches!(
            job(&["DEL", "a"], None, false).shape(),
            Some((Shape::Del, _))
        ));
    }

    #[test]
    fn increments_that_join_a_run_and_those_that_answer_alone() {
        let min = i64::MIN.to_string();
        let max = i64::MAX.to_string();
        let cases: &[(&[&str], Option<i64>)] = &[
            (&["INCR", "k"], Some(1)),
            (&["decr", "k"], Some(-1)),
            (&["INCRBY", "k", "5"], Some(5)),
            (&["INCRBY", "k", "-5"], Some(-5)),
            (&["DECRBY", "k", "5"], Some(-5)),
            (&["DECRBY", "k", &max], Some(-i64::MAX)),
            (&["INCRBY", "k", &min], Some(i64::MIN)),
            // Their errors are answered on their own.
            (&["DECRBY", "k", &min], None),
            (&["INCRBY", "k", "x"], None),
            (&["INCRBY", "k", "1.5"], None),
            (&["INCRBY", "k"], None),
            (&["INCR", "k", "1"], None),
            (&["INCRBYFLOAT", "k", "1"], None),
        ];
        for (args, want) in cases {
            let job = job(args, None, false);
            assert_eq!(job.increment().map(|(_, by)| by), *want, "{args:?}");
            assert_eq!(
                matches!(job.shape(), Some((Shape::Incr, _))),
                want.is_some(),
                "{args:?}"
            );
        }
        assert_eq!(job(&["INCR", "k"], None, true).increment(), None, "a MULTI");
    }
}
