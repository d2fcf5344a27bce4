//! Pub/Sub between holdfast processes sharing one SQLite file, which has no `NOTIFY`.
//!
//! Each process with a subscriber runs one task ([`run`]) per SQLite backend, with a
//! connection of its own. It keeps the registry (`hf_pubsub`: one row per name its
//! subscribers hold, and how many hold it, under the backend's id, `Broker::origin`) and a
//! heartbeat (`hf_listeners.seen`, every [`HEARTBEAT`]), and reads the messages other
//! processes left for it in `hf_messages` every [`POLL`], delivering them to its
//! subscribers.
//!
//! A `PUBLISH` (`model::pubsub::publish`) counts, in its own transaction, the registry rows of processes
//! whose heartbeat is younger than [`ALIVE`], this one's included; when another process's
//! subscriber matches, it leaves the message in `hf_messages`, in the same transaction, so
//! it is read only if it commits. This process's own subscribers get it when it commits
//! (`Broker::published`). A process registers its names and reads from the last message
//! committed before, in one transaction: a message counted for it is one it reads.
//!
//! A process that could not write its heartbeat for [`GAP`] (a disk that hung, a process
//! stopped) may have been counted dead meanwhile, and messages for it were then not left:
//! it closes its subscribers, as holdfast does when a PostgreSQL `LISTEN` session ends, and
//! registers again. Messages are kept [`RETAIN`]; a process that reads at least every
//! [`GAP`] never misses one. Messages from one process reach another in the order they
//! were committed; beside a process's own (delivered at once), they arrive up to a [`POLL`]
//! later.

use super::broker::{self, Broker, Name};
use super::model::pubsub::HEARTBEAT_ALIVE as ALIVE;
use crate::metrics as m;
use bytes::Bytes;
use sqlx::{AnyConnection, AnyPool, Executor};
use std::sync::Weak;
use std::time::Duration;
use tokio::time::Instant;

/// How often a process with subscribers reads the messages left for it.
pub const POLL: Duration = Duration::from_millis(20);
/// How often it writes its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// How long a process may go without a heartbeat or a read before it closes its subscribers.
pub const GAP: Duration = Duration::from_secs(2);
/// How long a message is kept for the processes that read it.
pub const RETAIN: Duration = Duration::from_secs(30);

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// Runs `work` in one write transaction on a connection of `pool`, within [`GAP`].
async fn transaction<T>(
    pool: &AnyPool,
    work: impl for<'c> FnOnce(
        &'c mut AnyConnection,
    ) -> futures_util::future::BoxFuture<'c, Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    let run = async {
        let mut conn = pool.acquire().await?;
        conn.execute("BEGIN IMMEDIATE").await?;
        match work(&mut conn).await {
            Ok(done) => {
                conn.execute("COMMIT").await?;
                Ok(done)
            }
            Err(e) => {
                if conn.execute("ROLLBACK").await.is_err() {
                    conn.close_on_drop();
                }
                Err(e)
            }
        }
    };
    match tokio::time::timeout(GAP, run).await {
        Ok(result) => result,
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

/// Writes `rows` (a name and how many subscribers hold it; 0: none any more) under `me`.
async fn write(conn: &mut AnyConnection, me: i64, rows: &[(Name, i64)]) -> Result<(), sqlx::Error> {
    for ((kind, name), total) in rows {
        if *total > 0 {
            sqlx::query(
                "INSERT INTO hf_pubsub (listener, kind, name, clients) VALUES (?, ?, ?, ?) \
                 ON CONFLICT (listener, kind, name) DO UPDATE SET clients = excluded.clients",
            )
            .bind(me)
            .bind(kind.index() as i64)
            .bind(name.to_vec())
            .bind(*total)
            .execute(&mut *conn)
            .await?;
        } else {
            sqlx::query("DELETE FROM hf_pubsub WHERE listener = ? AND kind = ? AND name = ?")
                .bind(me)
                .bind(kind.index() as i64)
                .bind(name.to_vec())
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

/// Registers this process afresh: its heartbeat, every name, and the last message committed
/// before (it reads those after); processes whose heartbeat stopped are removed. Returns
/// that message's number.
async fn register(broker: &Weak<Broker>, pool: &AnyPool, me: i64) -> Result<i64, sqlx::Error> {
    let Some(b) = broker.upgrade() else {
        return Err(sqlx::Error::PoolClosed);
    };
    let (change, rows) = b.changes(true);
    drop(b);
    let now = super::now_ms();
    let last = transaction(pool, |conn| {
        Box::pin(async move {
            let dead = now - ms(ALIVE);
            sqlx::query(
                "DELETE FROM hf_pubsub WHERE listener = ? OR listener NOT IN \
                 (SELECT listener FROM hf_listeners WHERE seen > ?)",
            )
            .bind(me)
            .bind(dead)
            .execute(&mut *conn)
            .await?;
            sqlx::query("DELETE FROM hf_listeners WHERE seen <= ?")
                .bind(dead)
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "INSERT INTO hf_listeners (listener, seen) VALUES (?, ?) \
                 ON CONFLICT (listener) DO UPDATE SET seen = excluded.seen",
            )
            .bind(me)
            .bind(now)
            .execute(&mut *conn)
            .await?;
            write(conn, me, &rows).await?;
            sqlx::query_scalar::<_, i64>("SELECT COALESCE(MAX(seq), 0) FROM hf_messages")
                .fetch_one(&mut *conn)
                .await
        })
    })
    .await?;
    if let Some(b) = broker.upgrade() {
        b.synced(change);
    }
    Ok(last)
}

/// Writes the names changed since the last write (`every` name: one failed since).
async fn sync(
    broker: &Weak<Broker>,
    pool: &AnyPool,
    me: i64,
    every: bool,
) -> Result<(), sqlx::Error> {
    let Some(b) = broker.upgrade() else {
        return Err(sqlx::Error::PoolClosed);
    };
    let (change, rows) = b.changes(every);
    drop(b);
    if every || !rows.is_empty() {
        transaction(pool, |conn| {
            Box::pin(async move {
                // Every name: what a failed write should have removed goes too.
                if every {
                    sqlx::query("DELETE FROM hf_pubsub WHERE listener = ?")
                        .bind(me)
                        .execute(&mut *conn)
                        .await?;
                }
                write(conn, me, &rows).await
            })
        })
        .await?;
    }
    if let Some(b) = broker.upgrade() {
        b.synced(change);
    }
    Ok(())
}

/// The heartbeat, and messages past [`RETAIN`] removed. False when this process was taken
/// for dead and removed meanwhile.
async fn heartbeat(pool: &AnyPool, me: i64) -> Result<bool, sqlx::Error> {
    let now = super::now_ms();
    transaction(pool, |conn| {
        Box::pin(async move {
            let beat = sqlx::query("UPDATE hf_listeners SET seen = ? WHERE listener = ?")
                .bind(now)
                .bind(me)
                .execute(&mut *conn)
                .await?;
            sqlx::query("DELETE FROM hf_messages WHERE at < ?")
                .bind(now - ms(RETAIN))
                .execute(&mut *conn)
                .await?;
            Ok(beat.rows_affected() == 1)
        })
    })
    .await
}

/// One message left in `hf_messages`.
type StoredMessage = (i64, i64, i64, Vec<u8>, Vec<u8>);

/// The messages committed after `last`, oldest first.
async fn read(pool: &AnyPool, last: i64) -> Result<Vec<StoredMessage>, sqlx::Error> {
    let fetch = sqlx::query_as(
        "SELECT seq, origin, shard, channel, payload FROM hf_messages \
         WHERE seq > ? ORDER BY seq LIMIT 1000",
    )
    .bind(last)
    .fetch_all(pool);
    match tokio::time::timeout(GAP, fetch).await {
        Ok(result) => result,
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

/// This process leaves: its rows go with it.
async fn goodbye(pool: &AnyPool, me: i64) {
    let _ = transaction(pool, |conn| {
        Box::pin(async move {
            sqlx::query("DELETE FROM hf_pubsub WHERE listener = ?")
                .bind(me)
                .execute(&mut *conn)
                .await?;
            sqlx::query("DELETE FROM hf_listeners WHERE listener = ?")
                .bind(me)
                .execute(&mut *conn)
                .await
                .map(|_| ())
        })
    })
    .await;
}

/// Keeps this process registered and delivers what other processes leave for it, for as
/// long as it has a subscriber; closes its subscribers after a [`GAP`] and registers again.
pub async fn run(broker: Weak<Broker>, pool: AnyPool) {
    let Some((me, name)) = broker.upgrade().map(|b| (b.origin(), b.name())) else {
        return;
    };
    loop {
        if broker::idle(&broker) {
            goodbye(&pool, me).await;
            return;
        }
        let Some(changed) = broker.upgrade().and_then(|b| b.changed()) else {
            return;
        };
        let mut last = match register(&broker, &pool, me).await {
            Ok(last) => last,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (mut beat, mut heard) = (Instant::now(), Instant::now());
        // A write of changed names that failed: the next writes every name.
        let mut behind = false;
        loop {
            tokio::select! {
                biased;
                () = changed.notified() => {}
                () = tokio::time::sleep(POLL) => {}
            }
            if broker::idle(&broker) {
                goodbye(&pool, me).await;
                return;
            }
            // Checked before the next heartbeat: a process that stalled past it may have
            // been taken for dead meanwhile, whatever it writes now.
            if beat.elapsed() >= GAP || heard.elapsed() >= GAP {
                break;
            }
            behind = sync(&broker, &pool, me, behind).await.is_err();
            if beat.elapsed() >= HEARTBEAT {
                match heartbeat(&pool, me).await {
                    Ok(true) => beat = Instant::now(),
                    // Taken for dead: messages for it may not have been left.
                    Ok(false) => break,
                    Err(_) => {}
                }
            }
            if let Ok(messages) = read(&pool, last).await {
                heard = Instant::now();
                let Some(b) = broker.upgrade() else { return };
                for (seq, from, shard, channel, payload) in messages {
                    last = seq;
                    if from != me {
                        b.deliver(shard != 0, &Bytes::from(channel), &Bytes::from(payload));
                    }
                }
            }
        }
        tracing::warn!(backend = %name, "Pub/Sub on SQLite missed its heartbeat or its reads: its subscribers are closed, and it registers again");
        m::pubsub_resubscribe(&name);
        if let Some(b) = broker.upgrade() {
            b.gap();
        }
    }
}
