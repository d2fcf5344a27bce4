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
//!
//! Exact mode's tokens for a group are `tokens`; the keys it changed, for `WATCH`, `changed`.

mod changed;
#[cfg(test)]
mod tests;
mod tokens;

use super::apply::{failure, lock_keys, work_error};
use super::conn::{abandon, rollback, Held, TxConn};
use super::deadline::{self, Progress, GRACE};
use super::lite::LiteWorker;
use super::queue::Queue;
use super::{Inner, SqlStage, Work};
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use changed::Changed;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokens::GroupTokens;
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
    /// SQLite's writer thread (the groups', and the reaper's).
    worker: Option<Arc<LiteWorker>>,
    /// The backend's deadline: how long a taken job's transaction may take.
    response_timeout: Duration,
}

impl GroupWriter {
    /// Starts the writer tasks for `inner` (SQLite's one on a thread of its own, `lite`);
    /// they end when the backend is dropped.
    pub fn start(
        inner: Weak<Inner>,
        writers: usize,
        lite: bool,
        response_timeout: Duration,
    ) -> GroupWriter {
        let (queue, jobs) = Queue::new(QUEUE);
        // SQLite has one writer (`writers` is 1), on a thread of its own.
        let worker = lite
            .then(|| LiteWorker::start("holdfast-sqlite-writer"))
            .flatten()
            .map(Arc::new);
        for _ in 0..writers.max(1) {
            tokio::spawn(run(inner.clone(), jobs.clone(), worker.clone()));
        }
        GroupWriter {
            queue,
            worker,
            response_timeout,
        }
    }

    /// The writer's own thread, where SQLite's other writes (the reaper's) run too.
    pub(super) fn worker(&self) -> Option<&LiteWorker> {
        self.worker.as_deref()
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

/// Takes groups from the queue and commits each: on `worker`'s thread when there is one
/// (SQLite), the group and the connection it holds sent there and back as one message.
async fn run(inner: Weak<Inner>, entries: Arc<Queue<Entry>>, worker: Option<Arc<LiteWorker>>) {
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
        let jobs = group.len();
        let work = bounded_group(inner, group, states, std::mem::take(&mut held));
        let outcomes = match LiteWorker::run_on(worker.as_deref(), work).await {
            Some((outcomes, back)) => {
                held = back;
                outcomes
            }
            // The thread is gone, and the group with it: it may have committed.
            None => (0..jobs).map(|_| Err(lost())).collect(),
        };
        let mut outcomes = outcomes.into_iter();
        for (count, reply) in answers {
            let _ = reply.send(outcomes.by_ref().take(count).collect());
        }
    }
}

/// The group's transaction under the backend's deadline, on the connection `held` keeps (if
/// any): an outcome per job, and what to hold for the next group.
async fn bounded_group(
    inner: Arc<Inner>,
    group: Vec<Job>,
    states: Vec<Arc<AtomicU8>>,
    mut held: Held,
) -> (Vec<GroupOutcome>, Held) {
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
    (outcomes, held)
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
            script: None,
        };
        inner.apply(conn, work, dirty).await
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
        } else if self.push().is_some() {
            Shape::Push
        } else if name.eq_ignore_ascii_case(b"XADD")
            && super::streams::write::plain_add(args).is_some()
        {
            Shape::Xadd
        } else if name.eq_ignore_ascii_case(b"ZADD")
            && args.get(1..).and_then(super::zsets::plain_zadd).is_some()
        {
            Shape::Zadd
        } else {
            return None;
        };
        Some((shape, args))
    }

    /// An `LPUSH` or `RPUSH` with at least one value: at the head, its key, its values.
    fn push(&self) -> Option<super::lists::Push<'_>> {
        match self.single()? {
            [name, key, values @ ..] if !values.is_empty() => {
                if name.eq_ignore_ascii_case(b"LPUSH") {
                    Some((true, key, values))
                } else if name.eq_ignore_ascii_case(b"RPUSH") {
                    Some((false, key, values))
                } else {
                    None
                }
            }
            _ => None,
        }
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
/// (`sets::sadd_run`, `hashes::hset_run`, `zsets::zadd_run`, `lists::push_run`, `keys::del_run`,
/// `strings::incr_run`,
/// `streams::write::xadd_run`). Only a group that committed leaves its connection to `held`: every
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
    let mut tokens = match GroupTokens::read(inner, &mut conn, group).await {
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
            let each = write_sets(inner, &mut conn, &sets).await?;
            let ran = &rest[..sets.len()];
            finish_run(ran, each, &mut tokens, &mut changed, &mut outcomes);
            rest = &rest[sets.len()..];
            continue;
        }
        // Runs of SADDs, HSETs, ZADDs, pushes, DELs, increments and XADDs: a few multi-row
        // statements each.
        let shape = job.shape().map(|(shape, _)| shape);
        let run: Vec<&[Bytes]> = run_of(rest, &tokens, |j| {
            j.shape()
                .filter(|(s, _)| Some(*s) == shape)
                .map(|(_, args)| args)
        });
        if let (Some(shape), true) = (shape, run.len() >= 2) {
            let each = write_run(inner, &mut conn, shape, &rest[..run.len()], &run).await?;
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

/// A run of plain SETs, written by one statement: each answers OK. None when it failed, and
/// the group's transaction was rolled back.
async fn write_sets(
    inner: &Inner,
    conn: &mut TxConn,
    sets: &[(&[u8], &[u8])],
) -> Option<Vec<GroupOutcome>> {
    let written = conn
        .ctx(super::now_ms(), Proto::Resp2, inner.dialect, true)
        .put_strings(sets)
        .await;
    if let Err(f) = written {
        // Undone whole; the careful pass runs each on its own and answers its error.
        undo_run(conn, f).await;
        return None;
    }
    Some(sets.iter().map(|_| Ok(vec![super::store::ok()])).collect())
}

/// A run of one `shape`, the jobs `ran` with their arguments after the name `run`, written by
/// a few multi-row statements: each job's own outcome. None when it failed, and the group's
/// transaction was rolled back.
async fn write_run(
    inner: &Inner,
    conn: &mut TxConn,
    shape: Shape,
    ran: &[Job],
    run: &[&[Bytes]],
) -> Option<Vec<GroupOutcome>> {
    let mut ctx = conn.ctx(super::now_ms(), Proto::Resp2, inner.dialect, true);
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
        Shape::Zadd => super::zsets::zadd_run(&mut ctx, &keyed()).await.map(wrong),
        Shape::Push => {
            let pushes: Vec<_> = ran.iter().filter_map(Job::push).collect();
            super::lists::push_run(&mut ctx, &pushes).await.map(wrong)
        }
        Shape::Del => super::keys::del_run(&mut ctx, run).await.map(wrong),
        Shape::Incr => {
            let increments: Vec<(&[u8], i64)> = ran.iter().filter_map(Job::increment).collect();
            let each = super::strings::incr_run(&mut ctx, &increments).await;
            each.map(|each| {
                let int = super::store::int;
                each.into_iter().map(|n| n.map(int)).collect()
            })
        }
        Shape::Xadd => {
            let adds: Vec<_> = run
                .iter()
                .filter_map(|args| super::streams::write::plain_add(args))
                .collect();
            super::streams::write::xadd_run(&mut ctx, &adds).await
        }
    };
    let added = match applied {
        Ok(added) => added,
        Err(f) => {
            // As for SETs: undone whole, and run again one by one.
            undo_run(conn, f).await;
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
    Some(each)
}

/// A run whose statements failed: its connection abandoned on a database error, and the
/// group's transaction rolled back.
async fn undo_run(conn: &mut TxConn, f: super::store::Fail) {
    if let super::store::Fail::Sql(_) | super::store::Fail::Lite(_) = f {
        let _ = abandon(conn, f);
    }
    rollback(conn).await;
}

/// What `shape` takes of the jobs at the start of `rest`, up to the first it refuses or that
/// exact mode must not apply with the others: one whose token has a recorded reply (it
/// answers that reply, applying nothing), or whose token an earlier job of the run has (a
/// retry queued behind its first attempt: it answers the first's reply).
fn run_of<'a, T>(
    rest: &'a [Job],
    tokens: &GroupTokens,
    shape: impl Fn(&'a Job) -> Option<T>,
) -> Vec<T> {
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
    tokens: &mut GroupTokens,
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
    /// `XADD` without trimming (`streams::write::plain_add`).
    Xadd,
    /// `ZADD` without options (`zsets::plain_zadd`).
    Zadd,
    /// `LPUSH` and `RPUSH`, mixed (`Job::push`).
    Push,
}

/// Takes every key lock the group's requests will take (PostgreSQL), all at once and in a
/// fixed order, so two groups over the same keys wait for each other instead of deadlocking.
async fn lock_all(inner: &Inner, conn: &mut TxConn, group: &[Job]) -> Result<(), BackendError> {
    let keys: Vec<&[u8]> = group
        .iter()
        .flat_map(|job| job.commands.iter().flat_map(|c| lock_keys(c)))
        .collect();
    let mut ctx = conn.ctx(0, Proto::Resp2, inner.dialect, true);
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
            super::store::Fail::Sql(_) | super::store::Fail::Lite(_) => abandon(conn, e),
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
        if let Err(e) = conn.exec("SAVEPOINT hf_job").await {
            let e = abandon(&mut conn, e);
            return rollback_all(&mut conn, group.len(), e).await;
        }
        let outcome = job.apply(inner, &mut conn, &mut false).await;
        let undo = outcome.is_err();
        if undo {
            if let Err(e) = conn.exec("ROLLBACK TO SAVEPOINT hf_job").await {
                // The connection failed: the group's transaction is lost, not answered.
                let e = abandon(&mut conn, e);
                return rollback_all(&mut conn, group.len(), e).await;
            }
        }
        if let Err(e) = conn.exec("RELEASE SAVEPOINT hf_job").await {
            let e = abandon(&mut conn, e);
            return rollback_all(&mut conn, group.len(), e).await;
        }
        changed.note(job, &outcome);
        outcomes.push(outcome);
    }
    commit_outcomes(inner, &mut conn, &changed, outcomes, progress).await
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
