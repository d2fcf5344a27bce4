//! Read batching: plain `GET`s from every client connection are answered by one `SELECT` for
//! all the keys queued meanwhile, as group commit does for writes. A read changes nothing, so
//! answering several from one statement changes nothing a client can see but the number of
//! statements: one per batch instead of one per request. Each reader connection runs one
//! batch at a time, its statement bounded by the backend's deadline (`deadline`). A client's
//! pipelined run of GETs is one submission: one queue entry and one reply for the run.
//! `EXISTS` (and `TOUCH`, which only marks keys used) read the same records and count the
//! keys found: settled mode's read before a `DEL` or `SETNX` is such an `EXISTS`, and as a
//! statement of its own (a pooled connection's acquire and release each) it cost a request
//! about seven times what a batch does on SQLite. The other point reads (`HGET`,
//! `SISMEMBER`, `TTL`…, `point_read`) join the batch too, each run as its own statements
//! after the keys' one, on the reader's held connection and in one read transaction: alone,
//! each took a pooled connection, a `BEGIN`, a `COMMIT` and sqlx's ping on release.

use super::apply::work_error;
use super::conn::{Held, TxConn};
use super::deadline::{self, GRACE};
use super::lite::LiteWorker;
use super::queue::Queue;
use super::store::{placeholders, stmt, Dialect, Fail, Kind, Stmt, WRONGTYPE};
use super::{Inner, SqlStage};
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Keys a reader takes into one statement, by dialect: it takes submissions until it has
/// at least this many (a client's run is never split, so a batch may hold one run more).
/// PostgreSQL's statement costs about the same for a few keys as for many (a small table
/// is scanned whole), so its batches are large. SQLite's are smaller: its two readers work
/// side by side on the other core, and read fewer GETs a second with larger batches.
fn max_batch(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => 256,
        Dialect::Postgres => 1024,
    }
}
/// Most keys in one statement: a run longer than this (`server.max_pipeline` allows 65,536)
/// could pass PostgreSQL's 65,535 parameters, padding included, and would make one large
/// value of SQLite's records; a batch's statements are all in one transaction.
pub(super) const STATEMENT_KEYS: usize = 2048;
/// GETs waiting for a reader; a full queue makes callers wait (within their timeout).
const QUEUE: usize = 4096;

pub(super) type ReadAnswer = Result<Frame, BackendError>;

/// What a request of a submission asks of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// `GET key`: the value, nil, or `WRONGTYPE`.
    Get,
    /// `EXISTS key…` / `TOUCH key…`: how many of its keys are live, of any kind (a key
    /// named twice counts twice, as in Redis).
    Exists,
    /// Any other point read (`point_read`): run as the command's own statements, on the
    /// batch's connection and inside its read transaction.
    Read,
}

/// What the batched reads answer of `args`: `GET key`, `EXISTS` or `TOUCH` of one key or
/// more (with their keys), and the point reads (with the whole command); None for anything
/// else.
pub(super) fn ask(args: &[Bytes]) -> Option<(Ask, &[Bytes])> {
    let (name, keys) = args.split_first()?;
    if name.eq_ignore_ascii_case(b"GET") && keys.len() == 1 {
        Some((Ask::Get, keys))
    } else if (name.eq_ignore_ascii_case(b"EXISTS") || name.eq_ignore_ascii_case(b"TOUCH"))
        && !keys.is_empty()
    {
        Some((Ask::Exists, keys))
    } else if !keys.is_empty() && super::model::point_read(args) {
        Some((Ask::Read, args))
    } else {
        None
    }
}

/// One submission: a GET or EXISTS, or a client's pipelined run of them, answered together (one
/// queue entry and one reply channel for the run, not one per key).
struct Get {
    /// The keys of each `GET` and `EXISTS`, and the whole command of each point read.
    keys: Vec<Bytes>,
    /// Each request's ask and how many of `keys` (in order) are its.
    asks: Vec<(Ask, usize)>,
    /// The client's protocol (a point read's reply may depend on it).
    proto: Proto,
    /// Past this, the requests are answered not attempted instead of being read.
    deadline: Instant,
    /// One answer per request (per entry of `asks`), in order.
    reply: oneshot::Sender<Vec<ReadAnswer>>,
}

/// The handle GETs are submitted through.
pub struct GetBatcher {
    queue: mpsc::Sender<Get>,
    /// The backend's deadline: how long a taken GET's batch may take.
    response_timeout: Duration,
}

impl GetBatcher {
    /// Starts one batching task per reader connection; they end with the backend.
    pub fn start(
        inner: Weak<Inner>,
        dialect: Dialect,
        readers: usize,
        response_timeout: Duration,
    ) -> GetBatcher {
        let (queue, gets) = Queue::new(QUEUE);
        for _ in 0..readers.max(1) {
            // SQLite's readers each with a thread of their own, as its writer (`lite`).
            let worker = (dialect == Dialect::Sqlite)
                .then(|| LiteWorker::start("holdfast-sqlite-reader"))
                .flatten();
            tokio::spawn(run(inner.clone(), gets.clone(), max_batch(dialect), worker));
        }
        GetBatcher {
            queue,
            response_timeout,
        }
    }

    /// Each request (`GET key`, or `EXISTS` of its keys) read in the next batch, all of
    /// them by one statement (so from one snapshot, as Redis answers a pipeline's reads in
    /// order: a later GET never sees an older value than an earlier one); waits at most
    /// `acquire_timeout` for the batch to start, and the deadline (plus [`GRACE`]) for it to
    /// answer. One answer per request, in order. A run is at most `server.max_pipeline`
    /// requests.
    pub async fn read_many(
        &self,
        requests: &[(Ask, &[Bytes])],
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Vec<ReadAnswer> {
        let deadline = Instant::now() + acquire_timeout;
        let count = requests.len();
        let (reply, answer) = oneshot::channel();
        let get = Get {
            keys: requests
                .iter()
                .flat_map(|(_, keys)| keys.iter().cloned())
                .collect(),
            asks: requests
                .iter()
                .map(|(ask, keys)| (*ask, keys.len()))
                .collect(),
            proto,
            deadline,
            reply,
        };
        if !matches!(
            tokio::time::timeout_at(deadline, self.queue.send(get)).await,
            Ok(Ok(()))
        ) {
            let not_attempted = Arc::new(BackendError::AcquireTimeout {
                waited: acquire_timeout,
            });
            return shared(&not_attempted, count);
        }
        // The batch answers every request it takes (a late one: not attempted), within the
        // deadline; should it not, a read has nothing to apply: not attempted either.
        let limit = self.response_timeout;
        match tokio::time::timeout_at(deadline + limit + GRACE, answer).await {
            Ok(Ok(each)) if each.len() == count => each,
            Ok(_) => {
                let crashed = Arc::new(BackendError::Sql {
                    stage: SqlStage::Work,
                    source: sqlx::Error::WorkerCrashed,
                });
                shared(&crashed, count)
            }
            Err(elapsed) => shared(
                &Arc::new(deadline::expired(SqlStage::Work, limit, elapsed)),
                count,
            ),
        }
    }
}

/// One statement of a run's reads (`in_parts`), borrowing its part and connection.
pub(super) type Part<'c> =
    futures_util::future::BoxFuture<'c, Result<Vec<ReadAnswer>, BackendError>>;

/// A client's run of reads (`whole`, `ranges`), `per` items a statement: one statement, or
/// several inside one read-only transaction (one snapshot still), each bounded by the
/// backend's deadline; one answer per item, in order. Should any fail, every item hears
/// the same error, and the connection is closed rather than pooled mid-transaction.
pub(super) async fn in_parts<T: Sync>(
    inner: &Inner,
    items: &[T],
    per: usize,
    acquire_timeout: Duration,
    mut statement: impl for<'c> FnMut(&'c [T], &'c mut TxConn, i64, Duration) -> Part<'c>,
) -> Vec<ReadAnswer> {
    let split = items.len() > per;
    let begin = split.then(|| inner.begin_statement(false));
    let mut conn = match inner.acquire(false, begin, acquire_timeout).await {
        Ok(conn) => conn,
        Err(e) => return shared(&Arc::new(e), items.len()),
    };
    let limit = inner.response_timeout;
    let now_ms = super::now_ms();
    let read = async {
        let mut answers = Vec::with_capacity(items.len());
        for part in items.chunks(per.max(1)) {
            answers.extend(statement(part, &mut conn, now_ms, limit).await?);
        }
        if split {
            bounded(limit, conn.exec("COMMIT")).await?;
        }
        Ok::<_, BackendError>(answers)
    };
    match read.await {
        Ok(answers) => {
            conn.finish();
            answers
        }
        // Unfinished or failed, the connection is closed as it is dropped.
        Err(e) => shared(&Arc::new(e), items.len()),
    }
}

/// `error` for `count` requests: the same one each, and so the same class.
pub(super) fn shared(error: &Arc<BackendError>, count: usize) -> Vec<ReadAnswer> {
    (0..count)
        .map(|_| Err(BackendError::Shared(error.clone())))
        .collect()
}

/// Takes batches from the queue and reads each: on `worker`'s thread when there is one
/// (SQLite), the batch and the connection it holds sent there and back as one message; the
/// answers are sent from here, on the runtime the requests wait on.
async fn run(inner: Weak<Inner>, gets: Arc<Queue<Get>>, max: usize, worker: Option<LiteWorker>) {
    let mut held = Held::default();
    while let Some(batch) = gets
        .next_batch_holding(max, |g| g.keys.len(), &mut held)
        .await
    {
        let Some(inner) = inner.upgrade() else { return };
        let work = read_batch(inner, batch, std::mem::take(&mut held));
        // The thread gone, the batch went with it: its requests hear that (`read_many`).
        let Some((answers, back)) = LiteWorker::run_on(worker.as_ref(), work).await else {
            continue;
        };
        held = back;
        for (reply, each) in answers {
            let _ = reply.send(each);
        }
    }
}

/// Where a request's answers go, and the answers.
type Answered = (oneshot::Sender<Vec<ReadAnswer>>, Vec<ReadAnswer>);

/// Reads every key of `batch` in one statement: each request's answers, and what to hold
/// for the next batch.
async fn read_batch(inner: Arc<Inner>, batch: Vec<Get>, mut held: Held) -> (Vec<Answered>, Held) {
    let mut out = Vec::with_capacity(batch.len());
    read_into(&inner, batch, &mut held, &mut out).await;
    (out, held)
}

/// [`read_batch`], its answers into `out`.
async fn read_into(inner: &Inner, batch: Vec<Get>, held: &mut Held, out: &mut Vec<Answered>) {
    let now = Instant::now();
    let (live, late): (Vec<Get>, Vec<Get>) = batch.into_iter().partition(|g| g.deadline > now);
    for get in late {
        let waited = || BackendError::AcquireTimeout {
            waited: Duration::ZERO,
        };
        out.push((get.reply, get.asks.iter().map(|_| Err(waited())).collect()));
    }
    let Some(latest) = live.iter().map(|g| g.deadline).max() else {
        return;
    };
    // Every GET's and EXISTS's keys, read by one statement; each point read's command, run
    // after it on the same connection.
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut point: Vec<(&[Bytes], Proto)> = Vec::new();
    for get in &live {
        let mut of = get.keys.as_slice();
        for &(ask, n) in &get.asks {
            let (mine, rest) = of.split_at(n.min(of.len()));
            of = rest;
            match ask {
                Ask::Read => point.push((mine, get.proto)),
                Ask::Get | Ask::Exists => keys.extend(mine.iter().map(|k| k.as_ref())),
            }
        }
    }
    let fail = |live: Vec<Get>, e: BackendError, out: &mut Vec<Answered>| {
        let e = Arc::new(e);
        for get in live {
            let each = shared(&e, get.asks.len());
            out.push((get.reply, each));
        }
    };
    // A batch larger than one statement takes (a client's run may be up to
    // `server.max_pipeline` GETs), or one with point reads (a command may be several
    // statements), is read inside one read-only transaction: one snapshot for the batch.
    let split = keys.len() > STATEMENT_KEYS;
    let begun = split || !point.is_empty();
    let begin = begun.then(|| inner.begin_statement(false));
    let mut conn = match inner.acquire_held(held, false, begin, latest - now).await {
        Ok(conn) => conn,
        Err(e) => return fail(live, e, out),
    };
    let limit = inner.response_timeout;
    // One deadline for the batch, its statements and point reads included: what a batch may
    // take is one `response_timeout`, however many statements it holds.
    let until = Instant::now() + limit;
    let read = deadline::within(until, limit, SqlStage::Work, async {
        let mut values = Vec::with_capacity(keys.len());
        for part in keys.chunks(STATEMENT_KEYS) {
            values.extend(match inner.dialect {
                Dialect::Sqlite => one_row(part, &mut conn).await?,
                Dialect::Postgres => row_per_key(part, &mut conn).await?,
            });
        }
        let now_ms = super::now_ms();
        let mut points = Vec::with_capacity(point.len());
        for &(args, proto) in &point {
            let mut ctx = conn.ctx(now_ms, proto, inner.dialect, false);
            points.push(
                match super::model::run(&mut ctx, args, inner.allow_flush).await {
                    Ok(frame) => Ok(frame),
                    // The command's own error (`WRONGTYPE`, a bad argument): its answer alone.
                    Err(Fail::Reply(text)) => Err(BackendError::reply(Bytes::from(text))),
                    // The connection's, or the database's: the batch's.
                    Err(e @ (Fail::Sql(_) | Fail::Lite(_))) => return Err(work_error(e)),
                    Err(Fail::Watched) => Err(BackendError::Watched),
                },
            );
        }
        if begun {
            conn.exec("COMMIT").await.map_err(work_error)?;
        }
        Ok::<_, BackendError>((values, points))
    });
    let (values, points) = match read.await {
        Ok(read) => {
            conn.finish();
            held.keep(conn);
            read
        }
        Err(e) => {
            // Unfinished or failed, the connection is closed as it is dropped.
            conn.close_on_drop();
            return fail(live, e, out);
        }
    };
    let mut values = values.into_iter();
    let mut points = points.into_iter();
    for get in live {
        let answers = get
            .asks
            .iter()
            .map(|&(ask, keys)| match ask {
                Ask::Read => points.next().unwrap_or_else(|| Err(unanswered())),
                Ask::Get | Ask::Exists => answer(ask, values.by_ref().take(keys)),
            })
            .collect();
        out.push((get.reply, answers));
    }
}

/// A request's answer from what its keys hold, in order.
fn answer(ask: Ask, mut values: impl Iterator<Item = Value>) -> ReadAnswer {
    match ask {
        Ask::Get => match values.next() {
            Some(Value::WrongType) => Err(BackendError::reply(Bytes::from_static(
                WRONGTYPE.as_bytes(),
            ))),
            Some(Value::String(value)) => Ok(super::store::bulk(value)),
            Some(Value::Nil) | None => Ok(Frame::Null),
        },
        Ask::Exists => {
            let live = values.filter(|v| !matches!(v, Value::Nil)).count();
            Ok(super::store::int(live as i64))
        }
        // Answered by its own statements (`read_batch`), never from the keys' records.
        Ask::Read => Err(unanswered()),
    }
}

/// A point read that got no answer of its own (never expected): an error, not a guess.
fn unanswered() -> BackendError {
    BackendError::reply(Bytes::from_static(
        b"ERR holdfast: a batched read went unanswered",
    ))
}

/// What `GET` finds under one key.
#[derive(Clone)]
enum Value {
    /// Missing or expired.
    Nil,
    String(Bytes),
    WrongType,
}

/// One read statement, cut short at `limit` (a read applies nothing: either way, not
/// attempted).
pub(super) async fn bounded<T>(
    limit: Duration,
    statement: impl std::future::Future<Output = Result<T, Fail>>,
) -> Result<T, BackendError> {
    let deadline = Instant::now() + limit;
    deadline::within(deadline, limit, SqlStage::Work, async {
        statement.await.map_err(work_error)
    })
    .await
}

/// SQLite: every key's answer in one value of one row, so the batch crosses from the
/// driver's SQLite thread as one row, not one per key: per row the driver sends, wakes and
/// converts (`AnyRow`), a large share of a pipelined GET's CPU. The statement
/// concatenates a record per live key found (`parse_records`); SQLite's `||` and
/// `group_concat` keep a blob's bytes as they are. (Joining the keys with their positions,
/// a `VALUES` list, is planned worse than `IN` by the bundled SQLite: slower than a row per
/// key.) A key or value over [`INLINE`] bytes is not inlined, so the one value stays
/// far under SQLite's limit (1 GB) whatever the batch: such a key comes back as a row of its
/// own: when the first statement says there is one, the whole batch is read again by a
/// statement that answers both (one snapshot for the whole batch: re-reading only the large
/// ones could answer a later GET of a pipeline with an older value than an earlier one; a
/// statement that always did both would cost every batch). The key list is padded
/// to a multiple of [`STEP`] with the last key (a key named twice is one record): a few
/// statement sizes, each prepared once.
async fn one_row(keys: &[&[u8]], conn: &mut TxConn) -> Result<Vec<Value>, BackendError> {
    let Some(&last) = keys.last() else {
        return Ok(Vec::new());
    };
    let size = keys.len().div_ceil(STEP) * STEP;
    fn bound<'q>(sql: &'q str, keys: &[&'q [u8]], last: &'q [u8], size: usize) -> Stmt<'q> {
        let mut query = stmt(sql);
        for key in keys.iter().chain(std::iter::repeat(&last)).take(size) {
            query = query.bind(*key);
        }
        query.bind(super::now_ms())
    }
    let mut ctx = conn.ctx(0, Proto::Resp2, Dialect::Sqlite, false);
    // The usual batch, nothing large: the records alone, one pass.
    let sql = sqlite_statement(size, false);
    let row = ctx
        .one(bound(&sql, keys, last, size))
        .await
        .map_err(work_error)?;
    let any_large: Option<i64> = row.try_get(1).map_err(work_error)?;
    if any_large != Some(1) {
        let mut found = HashMap::with_capacity(keys.len());
        if let Some(records) = row.try_get::<Option<&[u8]>>(0).map_err(work_error)? {
            parse_into(records, &mut found)?;
        }
        return Ok(answers(keys, &found));
    }
    // Something large: the whole batch again, its records and its large rows from one
    // statement (one snapshot), the first one's answers dropped.
    let sql = sqlite_statement(size, true);
    let rows = ctx
        .all(bound(&sql, keys, last, size))
        .await
        .map_err(work_error)?;
    // The aggregate's row holds the records (NULL when none); each large one is a row of
    // its own: key, kind, and the value of a string.
    let mut found: HashMap<&[u8], Value> = HashMap::with_capacity(keys.len());
    for row in &rows {
        if let Some(records) = row.try_get::<Option<&[u8]>>(0).map_err(work_error)? {
            parse_into(records, &mut found)?;
            continue;
        }
        let key: Option<&[u8]> = row.try_get(1).map_err(work_error)?;
        let kind: Option<i64> = row.try_get(2).map_err(work_error)?;
        let value: Option<&[u8]> = row.try_get(3).map_err(work_error)?;
        if let (Some(key), Some(kind)) = (key, kind) {
            let value = match value {
                Some(value) if kind == Kind::String as i64 => {
                    Value::String(Bytes::copy_from_slice(value))
                }
                _ => Value::WrongType,
            };
            found.insert(key, value);
        }
    }
    Ok(answers(keys, &found))
}

/// Each of `keys`' answer among those `found` (a key not found: nil).
fn answers(keys: &[&[u8]], found: &HashMap<&[u8], Value>) -> Vec<Value> {
    keys.iter()
        .map(|key| found.get(key).cloned().unwrap_or(Value::Nil))
        .collect()
}

/// [`parse_records`] into `found`, or the error that says the records did not parse.
fn parse_into<'a>(
    records: &'a [u8],
    found: &mut HashMap<&'a [u8], Value>,
) -> Result<(), BackendError> {
    parse_records(records, |key, record| {
        let value = match record {
            Record::String(bytes) => Value::String(Bytes::copy_from_slice(bytes)),
            Record::Other => Value::WrongType,
        };
        found.insert(key, value);
    })
    .map_err(|()| {
        work_error(sqlx::Error::Protocol(
            "holdfast: a batched GET's records do not parse".into(),
        ))
    })
}

/// Keys per step of [`one_row`]'s statement sizes.
const STEP: usize = 16;
/// Largest key or value [`one_row`] inlines in its records (its statements of at most
/// [`STATEMENT_KEYS`] keys then stay under 70 MB).
const INLINE: usize = 16 * 1024;

/// [`one_row`]'s statements for `size` keys (then now, in milliseconds), built once each:
/// the records of the keys that are not large and whether any is (`large` false), or the
/// records and a row for each large key (`large` true).
fn sqlite_statement(size: usize, large: bool) -> Arc<str> {
    static BUILT: std::sync::Mutex<Vec<(usize, bool, Arc<str>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, _, sql)) = built.iter().find(|(n, l, _)| *n == size && *l == large) {
        return sql.clone();
    }
    let list = placeholders(Dialect::Sqlite, size);
    // `length` of a blob counts bytes (of text, characters: hence the casts).
    let small = format!(
        "length(CAST(key AS BLOB)) <= {INLINE} \
         AND (kind <> 0 OR length(CAST(value AS BLOB)) <= {INLINE})"
    );
    let record = "printf('%d %d %d ', length(CAST(key AS BLOB)), kind, \
            CASE WHEN kind <> 0 THEN -1 ELSE length(CAST(value AS BLOB)) END) \
        || CAST(key AS BLOB) \
        || CASE WHEN kind = 0 THEN CAST(value AS BLOB) ELSE x'' END";
    let live = format!("key IN ({list}) AND (expires_at IS NULL OR expires_at > ?)");
    let sql: Arc<str> = if large {
        // The keys' rows materialized once for both parts, not read twice.
        format!(
            "WITH live AS MATERIALIZED (SELECT key, kind, value FROM hf_keys WHERE {live}) \
             SELECT CAST(group_concat({record}, '') AS BLOB), NULL, NULL, NULL \
             FROM live WHERE {small} \
             UNION ALL \
             SELECT NULL, key, kind, CASE WHEN kind = 0 THEN value END \
             FROM live WHERE NOT ({small})"
        )
    } else {
        format!(
            "SELECT CAST(group_concat(CASE WHEN {small} THEN {record} END, '') AS BLOB), \
                max(CASE WHEN {small} THEN 0 ELSE 1 END) \
             FROM hf_keys WHERE {live}"
        )
    }
    .into();
    built.push((size, large, sql.clone()));
    sql
}

/// One record of [`one_row`]'s result.
#[derive(Debug, PartialEq)]
enum Record<'a> {
    String(&'a [u8]),
    /// Another kind.
    Other,
}

/// Splits [`one_row`]'s records, `KEYLEN KIND LEN ` then the key's bytes and LEN bytes of
/// value each (LEN -1 for another kind), calling `each` with the key and the record.
fn parse_records<'a>(
    mut bytes: &'a [u8],
    mut each: impl FnMut(&'a [u8], Record<'a>),
) -> Result<(), ()> {
    fn number(bytes: &mut &[u8]) -> Result<i64, ()> {
        let end = bytes.iter().position(|&b| b == b' ').ok_or(())?;
        let text = std::str::from_utf8(&bytes[..end]).map_err(|_| ())?;
        *bytes = &bytes[end + 1..];
        text.parse().map_err(|_| ())
    }
    fn take<'a>(bytes: &mut &'a [u8], len: i64) -> Result<&'a [u8], ()> {
        let len = usize::try_from(len).map_err(|_| ())?;
        let (taken, rest) = bytes.split_at_checked(len).ok_or(())?;
        *bytes = rest;
        Ok(taken)
    }
    while !bytes.is_empty() {
        let key_len = number(&mut bytes)?;
        let kind = number(&mut bytes)?;
        let len = number(&mut bytes)?;
        let key = take(&mut bytes, key_len)?;
        let record = match len {
            -1 if kind != Kind::String as i64 => Record::Other,
            len => Record::String(take(&mut bytes, len)?),
        };
        each(key, record);
    }
    Ok(())
}

/// One statement, a row per key found; PostgreSQL's batches, and SQLite's large values. On
/// PostgreSQL rows cost little: they are read
/// from the socket on this thread. The list is padded to a power of two with the last key
/// (a key named twice is one row).
async fn row_per_key(keys: &[&[u8]], conn: &mut TxConn) -> Result<Vec<Value>, BackendError> {
    let Some(&last) = keys.last() else {
        return Ok(Vec::new());
    };
    let size = keys.len().next_power_of_two();
    let list = placeholders(Dialect::Postgres, size);
    let sql = format!("SELECT key, kind, expires_at, value FROM hf_keys WHERE key IN ({list})");
    let mut query = stmt(sql);
    for key in keys.iter().chain(std::iter::repeat(&last)).take(size) {
        query = query.bind(*key);
    }
    let rows = conn
        .ctx(0, Proto::Resp2, Dialect::Postgres, false)
        .all(query)
        .await
        .map_err(work_error)?;
    // Each key's row: its value, or None when it holds another kind. Expired keys and
    // missing ones answer nil alike.
    let now_ms = super::now_ms();
    let mut found: HashMap<&[u8], Option<&[u8]>> = HashMap::with_capacity(rows.len());
    for row in &rows {
        let key: &[u8] = row.try_get(0).map_err(work_error)?;
        let kind: i64 = row.try_get(1).map_err(work_error)?;
        let expires: Option<i64> = row.try_get(2).map_err(work_error)?;
        let value: Option<&[u8]> = row.try_get(3).map_err(work_error)?;
        if expires.is_none_or(|at| at > now_ms) {
            found.insert(
                key,
                (kind == Kind::String as i64).then_some(value.unwrap_or_default()),
            );
        }
    }
    Ok(keys
        .iter()
        .map(|key| match found.get(key) {
            Some(None) => Value::WrongType,
            Some(Some(value)) => Value::String(Bytes::copy_from_slice(value)),
            None => Value::Nil,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{ask, parse_records, Ask, Record};
    use bytes::Bytes;

    #[test]
    fn which_reads_join_a_batch() {
        let names = |n: usize| {
            (0..n)
                .map(|i| format!("f{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let cases: &[(String, Option<Ask>)] = &[
            ("GET k".into(), Some(Ask::Get)),
            ("get k".into(), Some(Ask::Get)),
            ("GET k x".into(), None),
            ("GET".into(), None),
            ("EXISTS a b a".into(), Some(Ask::Exists)),
            ("TOUCH a".into(), Some(Ask::Exists)),
            ("EXISTS".into(), None),
            ("HGET h f".into(), Some(Ask::Read)),
            ("hget h f".into(), Some(Ask::Read)),
            ("SISMEMBER s m".into(), Some(Ask::Read)),
            ("ZSCORE z m".into(), Some(Ask::Read)),
            ("TTL k".into(), Some(Ask::Read)),
            ("TYPE k".into(), Some(Ask::Read)),
            ("HGET".into(), None),
            // A few names: one statement each, bounded.
            (format!("HMGET h {}", names(16)), Some(Ask::Read)),
            (format!("SMISMEMBER s {}", names(16)), Some(Ask::Read)),
            (format!("ZMSCORE z {}", names(16)), Some(Ask::Read)),
            (format!("MGET {}", names(16)), Some(Ask::Read)),
            // More: on a connection of their own, so they never hold or fail a batch.
            (format!("HMGET h {}", names(17)), None),
            (format!("SMISMEMBER s {}", names(17)), None),
            (format!("ZMSCORE z {}", names(17)), None),
            (format!("MGET {}", names(17)), None),
            // Their cost grows with the collection.
            ("HLEN h".into(), None),
            ("SCARD s".into(), None),
            ("ZCARD z".into(), None),
            ("LLEN l".into(), None),
            ("XLEN x".into(), None),
            ("LINDEX l 100000".into(), None),
            ("HGETALL h".into(), None),
            ("SET k v".into(), None),
        ];
        for (command, want) in cases {
            let args: Vec<Bytes> = command
                .split(' ')
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect();
            assert_eq!(ask(&args).map(|(a, _)| a), *want, "{command}");
        }
    }

    fn parse(bytes: &[u8]) -> Result<Vec<(&[u8], Record<'_>)>, ()> {
        let mut out = Vec::new();
        parse_records(bytes, |key, r| out.push((key, r)))?;
        Ok(out)
    }

    #[test]
    fn records_split_by_their_lengths() {
        type Parsed<'a> = Result<Vec<(&'a [u8], Record<'a>)>, ()>;
        let cases: &[(&[u8], Parsed)] = &[
            (b"", Ok(vec![])),
            (b"1 0 3 kabc", Ok(vec![(b"k", Record::String(b"abc"))])),
            // Keys and values holding the separator, digits, and bytes that are not UTF-8.
            (
                b"3 0 5 k 11 2 \xff0 0 0 ",
                Ok(vec![
                    (b"k 1", Record::String(b"1 2 \xff")),
                    (b"", Record::String(b"")),
                ]),
            ),
            (
                b"1 2 -1 a2 0 2 bbcc",
                Ok(vec![(b"a", Record::Other), (b"bb", Record::String(b"cc"))]),
            ),
            (b"1 0 -2 k", Err(())),
            // Cut short, or not numbers: refused, not guessed.
            (b"1 0 4 kabc", Err(())),
            (b"2 0 0 k", Err(())),
            (b"1 0 3", Err(())),
            (b"x 0 3 kabc", Err(())),
            (b"-1 0 3 kabc", Err(())),
            (b"1 0 -1 k", Err(())),
        ];
        for (bytes, want) in cases {
            assert_eq!(&parse(bytes), want, "{:?}", String::from_utf8_lossy(bytes));
        }
    }
}
