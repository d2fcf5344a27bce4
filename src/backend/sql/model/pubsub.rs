//! The SQL of Pub/Sub: `PUBLISH` counted against the registry of every holdfast's
//! subscriptions (table `hf_pubsub`) in the command's own transaction, and `PUBSUB` read from
//! it. On PostgreSQL the message is a `NOTIFY` in that transaction; on SQLite a row of
//! `hf_messages` left for the other processes. Delivering to subscribers, keeping the registry
//! and the sessions that listen are the engine's (`engine/broker.rs`, `engine/inbox.rs`).

use super::args::glob;
use super::store::{self, fail, stmt, Ctx, Dialect, Fail, Out, SYNTAX};
use crate::backend::pubsub::SubKind;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::BTreeSet;
use std::time::Duration;

/// The PostgreSQL channel every holdfast of a database listens on.
pub const PG_CHANNEL: &str = "holdfast_pubsub";

/// Most bytes of channel and message together in one `PUBLISH` on PostgreSQL: base64 of
/// both, and their separators, must stay under NOTIFY's 8000 bytes.
pub const MAX_NOTIFY_BYTES: usize = 5_990;
/// How long a heartbeat counts a process's subscribers alive.
pub const HEARTBEAT_ALIVE: Duration = Duration::from_secs(3);

/// `PUBLISH channel message`, answered with the subscribers the registry counts now: on
/// PostgreSQL a `NOTIFY`, sent if the transaction commits ([`publish_postgres`]); on SQLite
/// a row left for the other processes, and delivered to this one's once it has committed
/// ([`publish_sqlite`], and the engine's `Inner::after`).
pub async fn publish(ctx: &mut Ctx<'_>, a: &[Bytes], shard: bool) -> Out {
    let (Some(channel), Some(message)) = (a.get(1), a.get(2)) else {
        return fail(SYNTAX);
    };
    if ctx.dialect == Dialect::Sqlite {
        let (now, origin) = (ctx.now, ctx.origin);
        let count = publish_sqlite(ctx, (now, origin), shard, channel, message).await?;
        return Ok(Frame::Number {
            data: count,
            attributes: None,
        });
    }
    let text = match encode(shard, channel, message) {
        Ok(text) => text,
        Err(reply) => return fail(reply),
    };
    let count = publish_postgres(ctx, shard, channel, &text).await?;
    Ok(Frame::Number {
        data: count,
        attributes: None,
    })
}

/// The subscription kinds a publish reaches, as stored: a shard channel's only, or a
/// channel's and the patterns' (-1: none).
fn kinds(shard: bool) -> (i64, i64) {
    if shard {
        (SubKind::Shard.index() as i64, -1)
    } else {
        (
            SubKind::Channel.index() as i64,
            SubKind::Pattern.index() as i64,
        )
    }
}

/// A `PUBLISH`'s reply on SQLite, in its transaction at `now` (Unix ms) by the backend whose
/// registry id is `origin`: the subscriptions of every live process that a message to
/// `channel` matches (a client matching by two patterns
/// counts twice, as in Redis); the message is left for the other processes when one of
/// theirs matches.
///
/// # Errors
/// The database's.
async fn publish_sqlite(
    ctx: &mut Ctx<'_>,
    (now, origin): (i64, i64),
    shard: bool,
    channel: &[u8],
    payload: &[u8],
) -> Result<i64, Fail> {
    let (kind, patterns) = kinds(shard);
    let rows = ctx
        .all(
            stmt(
                "SELECT listener, kind, name, clients FROM hf_pubsub \
                 WHERE ((kind = ? AND name = ?) OR kind = ?) \
                 AND listener IN (SELECT listener FROM hf_listeners WHERE seen > ?)",
            )
            .bind(kind)
            .bind(channel)
            .bind(patterns)
            .bind(now - HEARTBEAT_ALIVE.as_millis() as i64),
        )
        .await?;
    let (mut total, mut elsewhere) = (0, 0);
    for row in &rows {
        let (listener, k, clients): (i64, i64, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(3)?);
        let name: &[u8] = row.try_get(2)?;
        if k == kind || glob(name, channel) {
            total += clients;
            if listener != origin {
                elsewhere += clients;
            }
        }
    }
    if elsewhere > 0 {
        ctx.run(
            stmt(
                "INSERT INTO hf_messages (origin, shard, channel, payload, at) \
                 VALUES (?, ?, ?, ?, ?)",
            )
            .bind(origin)
            .bind(i64::from(shard))
            .bind(channel)
            .bind(payload)
            .bind(now),
        )
        .await?;
    }
    Ok(total)
}

/// The advisory-lock class of `LISTEN` sessions (`hfPS`): a session holds the lock
/// `(LOCK_CLASS, its key)` for its life, and its registry rows carry the key.
pub const LOCK_CLASS: i32 = 0x6866_5053;

/// Whether the session under the registry row's `listener` is alive, asked of the lock it
/// holds exclusively for its life: a shared try fails while it is held (the one liveness
/// rule: `PUBLISH`, `PUBSUB` and the removal of dead sessions' rows all ask it). One probe of the
/// lock table per row (a scan of `pg_locks` would take every lock partition, under a group
/// commit's many key locks); a try that succeeds, on a dead session's key, holds a shared
/// lock only until this transaction ends.
pub const LIVE: &str = "NOT pg_try_advisory_xact_lock_shared(1751535699, listener::int)";

/// A `PUBLISH` on PostgreSQL: the `NOTIFY` of `text` (made by [`encode`]), sent if the
/// transaction commits, and its reply, counted in the same statement: the subscriptions of
/// every listening session that a message to `channel` matches (a client matching by two
/// patterns counts twice, as in Redis). Pattern subscriptions, when any holdfast has one,
/// are read by a second statement and matched here.
///
/// # Errors
/// The database's.
async fn publish_postgres(
    ctx: &mut Ctx<'_>,
    shard: bool,
    channel: &[u8],
    text: &str,
) -> Result<i64, Fail> {
    let (kind, patterns) = kinds(shard);
    let sql = format!(
        "SELECT (SELECT COALESCE(SUM(clients), 0) FROM hf_pubsub \
                 WHERE kind = $3 AND name = $4 AND {LIVE})::bigint, \
                (SELECT COUNT(*) FROM hf_pubsub WHERE kind = $5)::bigint \
         FROM pg_notify($1, $2)"
    );
    let row = ctx
        .one(
            stmt(sql)
                .bind(PG_CHANNEL)
                .bind(text)
                .bind(kind)
                .bind(channel)
                .bind(patterns),
        )
        .await?;
    let (direct, pattern_rows): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
    if pattern_rows == 0 {
        return Ok(direct);
    }
    let sql = format!("SELECT name, clients FROM hf_pubsub WHERE kind = $1 AND {LIVE}");
    let mut matched = 0;
    for row in &ctx.all(stmt(sql).bind(patterns)).await? {
        let pattern: &[u8] = row.try_get(0)?;
        if glob(pattern, channel) {
            matched += row.try_get::<i64>(1)?;
        }
    }
    Ok(direct + matched)
}

/// `PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB` (arity was checked)
/// over every holdfast's subscriptions on the database: the registry's rows of the sessions
/// alive now, as a `PUBLISH` counts them.
///
/// # Errors
/// The database's.
pub async fn pubsub(ctx: &mut store::Ctx<'_>, args: &[Bytes]) -> Result<Frame, Fail> {
    let found = match ctx.dialect {
        store::Dialect::Postgres => {
            ctx.all(stmt(format!(
                "SELECT kind, name, SUM(clients)::bigint FROM hf_pubsub \
                 WHERE {LIVE} GROUP BY kind, name"
            )))
            .await?
        }
        store::Dialect::Sqlite => {
            let alive = ctx.now - HEARTBEAT_ALIVE.as_millis() as i64;
            ctx.all(
                stmt(
                    "SELECT kind, name, SUM(clients) FROM hf_pubsub WHERE listener IN \
                     (SELECT listener FROM hf_listeners WHERE seen > ?) GROUP BY kind, name",
                )
                .bind(alive),
            )
            .await?
        }
    };
    let mut rows: Vec<(i64, Vec<u8>, i64)> = Vec::with_capacity(found.len());
    for row in &found {
        rows.push((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
    }
    let kind = |k: i64| {
        SubKind::ALL
            .into_iter()
            .find(|kind| kind.index() as i64 == k)
    };
    Ok(answer(
        args,
        rows.into_iter()
            .filter_map(|(k, name, n)| Some((kind(k)?, Bytes::from(name), n))),
    ))
}

/// The answer to `PUBSUB …` (`args`, the whole command) over `totals`: each name subscribed,
/// and by how many clients.
pub fn answer(args: &[Bytes], totals: impl Iterator<Item = (SubKind, Bytes, i64)>) -> Frame {
    let sub = args
        .get(1)
        .map(|s| s.to_ascii_uppercase())
        .unwrap_or_default();
    let totals: Vec<(SubKind, Bytes, i64)> = totals.filter(|(_, _, n)| *n > 0).collect();
    let bulk = |data: Bytes| Frame::BlobString {
        data,
        attributes: None,
    };
    let number = |data: i64| Frame::Number {
        data,
        attributes: None,
    };
    let array = |data: Vec<Frame>| Frame::Array {
        data,
        attributes: None,
    };
    let of = |kind: SubKind| -> BTreeSet<Bytes> {
        totals
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, name, _)| name.clone())
            .collect()
    };
    let subscribers = |kind: SubKind, name: &Bytes| -> i64 {
        totals
            .iter()
            .filter(|(k, n, _)| *k == kind && n == name)
            .map(|(_, _, count)| count)
            .sum()
    };
    match sub.as_slice() {
        b"CHANNELS" | b"SHARDCHANNELS" => {
            let kind = if sub.as_slice() == b"CHANNELS" {
                SubKind::Channel
            } else {
                SubKind::Shard
            };
            let pattern = args.get(2);
            array(
                of(kind)
                    .into_iter()
                    .filter(|c| pattern.is_none_or(|p| glob(p, c)))
                    .map(bulk)
                    .collect(),
            )
        }
        b"NUMSUB" | b"SHARDNUMSUB" => {
            let kind = if sub.as_slice() == b"NUMSUB" {
                SubKind::Channel
            } else {
                SubKind::Shard
            };
            let mut items = Vec::new();
            for name in args.get(2..).unwrap_or_default() {
                items.push(bulk(name.clone()));
                items.push(number(subscribers(kind, name)));
            }
            array(items)
        }
        _ => number(of(SubKind::Pattern).len() as i64),
    }
}

/// `NOTIFY`'s payload for a message: `m` or `s` (shard), the channel and the message, each
/// base64 (NOTIFY carries text, and a Redis message is any bytes).
///
/// # Errors
/// The error reply for a message over [`MAX_NOTIFY_BYTES`].
pub fn encode(shard: bool, channel: &[u8], payload: &[u8]) -> Result<String, String> {
    if channel.len() + payload.len() > MAX_NOTIFY_BYTES {
        return Err(format!(
            "ERR holdfast: a PUBLISH on PostgreSQL carries at most {MAX_NOTIFY_BYTES} bytes of channel and message (NOTIFY's limit); this one has {}",
            channel.len() + payload.len()
        ));
    }
    let kind = if shard { 's' } else { 'm' };
    Ok(format!(
        "{kind}{}:{}",
        B64.encode(channel),
        B64.encode(payload)
    ))
}

/// The message of a `NOTIFY` payload made by [`encode`]; None for anything else.
pub fn decode(text: &str) -> Option<(bool, Bytes, Bytes)> {
    let shard = match text.as_bytes().first()? {
        b'm' => false,
        b's' => true,
        _ => return None,
    };
    let (channel, payload) = text.get(1..)?.split_once(':')?;
    Some((
        shard,
        Bytes::from(B64.decode(channel).ok()?),
        Bytes::from(B64.decode(payload).ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notify_payload_carries_any_bytes_and_refuses_what_does_not_fit() {
        for (shard, channel, payload) in [
            (false, &b"news"[..], &b"hello"[..]),
            (true, b"a:b", b"\x00\xff:\r\n"),
            (false, b"", b""),
        ] {
            let text = encode(shard, channel, payload).expect("fits");
            assert!(text.len() < 8000);
            assert_eq!(
                decode(&text),
                Some((
                    shard,
                    Bytes::copy_from_slice(channel),
                    Bytes::copy_from_slice(payload)
                ))
            );
        }
        let most = vec![b'x'; MAX_NOTIFY_BYTES - 1];
        assert!(encode(true, b"c", &most).expect("fits").len() < 8000);
        assert!(encode(true, b"cc", &most).is_err());
        assert_eq!(decode("x"), None);
        assert_eq!(decode("mnot base64:"), None);
    }

    #[test]
    fn the_liveness_queries_name_the_lock_class_sessions_hold() {
        let class = LOCK_CLASS.to_string();
        assert_eq!(class, "1751535699");
        assert!(LIVE.contains(&class));
    }
}
