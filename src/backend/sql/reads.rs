//! Read batching: plain `GET`s from every client connection are answered by one `SELECT` for
//! all the keys queued meanwhile, as group commit does for writes. A read changes nothing, so
//! answering several from one statement changes nothing a client can see but the number of
//! statements: one per batch instead of one per request. Each reader connection runs one
//! batch at a time, its statement bounded by the backend's deadline (`deadline`).

use super::deadline::{self, GRACE};
use super::queue::Queue;
use super::store::{placeholders, Kind, WRONGTYPE};
use super::{Held, Inner, SqlStage};
use crate::backend::BackendError;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use sqlx::Row;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Most keys in one statement (well under either database's parameter limit).
const MAX_BATCH: usize = 256;
/// GETs waiting for a reader; a full queue makes callers wait (within their timeout).
const QUEUE: usize = 4096;

type Answer = Result<Frame, BackendError>;

struct Get {
    key: Bytes,
    /// Past this, the request is answered not attempted instead of being read.
    deadline: Instant,
    reply: oneshot::Sender<Answer>,
}

/// The handle GETs are submitted through.
pub struct GetBatcher {
    queue: mpsc::Sender<Get>,
    /// The backend's deadline: how long a taken GET's batch may take.
    response_timeout: Duration,
}

impl GetBatcher {
    /// Starts one batching task per reader connection; they end with the backend.
    pub fn start(inner: Weak<Inner>, readers: usize, response_timeout: Duration) -> GetBatcher {
        let (queue, gets) = Queue::new(QUEUE);
        for _ in 0..readers.max(1) {
            tokio::spawn(run(inner.clone(), gets.clone()));
        }
        GetBatcher {
            queue,
            response_timeout,
        }
    }

    /// `GET key`, read in the next batch; waits at most `acquire_timeout` for it to start,
    /// and the deadline (plus [`GRACE`]) for its batch to answer.
    pub async fn get(&self, key: &Bytes, acquire_timeout: Duration) -> Answer {
        let deadline = Instant::now() + acquire_timeout;
        let (reply, answer) = oneshot::channel();
        let get = Get {
            key: key.clone(),
            deadline,
            reply,
        };
        let not_attempted = BackendError::AcquireTimeout {
            waited: acquire_timeout,
        };
        match tokio::time::timeout_at(deadline, self.queue.send(get)).await {
            Ok(Ok(())) => {}
            _ => return Err(not_attempted),
        }
        // The batch answers every request it takes (a late one: not attempted), within the
        // deadline; should it not, a read has nothing to apply: not attempted either.
        let limit = self.response_timeout;
        match tokio::time::timeout_at(deadline + limit + GRACE, answer).await {
            Ok(answered) => answered.unwrap_or_else(|_| {
                Err(BackendError::Sql {
                    stage: SqlStage::Work,
                    source: sqlx::Error::WorkerCrashed,
                })
            }),
            Err(elapsed) => Err(deadline::expired(SqlStage::Work, limit, elapsed)),
        }
    }
}

async fn run(inner: Weak<Inner>, gets: Arc<Queue<Get>>) {
    let mut held = Held::default();
    while let Some(batch) = gets.next_batch_holding(MAX_BATCH, |_| 1, &mut held).await {
        let Some(inner) = inner.upgrade() else { return };
        read_batch(&inner, batch, &mut held).await;
    }
}

/// Reads every key of `batch` in one statement and answers each request.
async fn read_batch(inner: &Inner, batch: Vec<Get>, held: &mut Held) {
    let now = Instant::now();
    let (live, late): (Vec<Get>, Vec<Get>) = batch.into_iter().partition(|g| g.deadline > now);
    for get in late {
        let _ = get.reply.send(Err(BackendError::AcquireTimeout {
            waited: Duration::ZERO,
        }));
    }
    let Some(latest) = live.iter().map(|g| g.deadline).max() else {
        return;
    };
    let rows = async {
        let mut conn = inner.acquire_held(held, false, None, latest - now).await?;
        // A list of a power-of-two length, the last key repeated (a key named twice is one
        // row): a few statement sizes, each prepared once and then found in the connection's
        // statement cache, instead of one of a new size per batch.
        let size = live.len().next_power_of_two();
        let list = placeholders(inner.dialect, size);
        let sql = format!("SELECT key, kind, expires_at, value FROM hf_keys WHERE key IN ({list})");
        let mut query = sqlx::query(&sql);
        for get in &live {
            query = query.bind(get.key.as_ref());
        }
        if let Some(last) = live.last() {
            for _ in live.len()..size {
                query = query.bind(last.key.as_ref());
            }
        }
        let limit = inner.response_timeout;
        match tokio::time::timeout(limit, query.fetch_all(&mut **conn)).await {
            Ok(Ok(rows)) => {
                conn.finish();
                held.keep(conn);
                Ok(rows)
            }
            Ok(Err(e)) => {
                conn.close_on_drop();
                Err(BackendError::Sql {
                    stage: SqlStage::Work,
                    source: e,
                })
            }
            // Unfinished, the connection is closed as it is dropped.
            Err(elapsed) => Err(deadline::expired(SqlStage::Work, limit, elapsed)),
        }
    };
    let rows = match rows.await {
        Ok(rows) => rows,
        Err(e) => {
            let shared = Arc::new(e);
            for get in live {
                let _ = get.reply.send(Err(BackendError::Shared(shared.clone())));
            }
            return;
        }
    };
    let now_ms = super::now_ms();
    let decoded: Result<Vec<_>, sqlx::Error> = rows
        .iter()
        .map(|row| {
            let key: Vec<u8> = row.try_get(0)?;
            let kind: i64 = row.try_get(1)?;
            let expires: Option<i64> = row.try_get(2)?;
            let value: Option<Vec<u8>> = row.try_get(3)?;
            Ok((key, kind, expires, value))
        })
        .collect();
    let decoded = match decoded {
        Ok(decoded) => decoded,
        Err(e) => {
            let shared = Arc::new(BackendError::Sql {
                stage: super::SqlStage::Work,
                source: e,
            });
            for get in live {
                let _ = get.reply.send(Err(BackendError::Shared(shared.clone())));
            }
            return;
        }
    };
    // Each live key's row: its value, or None when it holds another kind. Expired keys and
    // missing ones answer nil alike.
    let found: HashMap<Vec<u8>, Option<Option<Vec<u8>>>> = decoded
        .into_iter()
        .filter(|(_, _, expires, _)| !expires.is_some_and(|at| at <= now_ms))
        .map(|(key, kind, _, value)| (key, (kind == Kind::String as i64).then_some(value)))
        .collect();
    for get in live {
        let answer = match found.get(get.key.as_ref()) {
            Some(None) => Err(BackendError::reply(Bytes::from_static(
                WRONGTYPE.as_bytes(),
            ))),
            Some(Some(Some(value))) => Ok(super::store::bulk(value.clone())),
            Some(Some(None)) | None => Ok(Frame::Null),
        };
        let _ = get.reply.send(answer);
    }
}
