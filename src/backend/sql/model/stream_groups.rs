//! Stream consumer groups on SQL backends: `XGROUP`, `XREADGROUP`, `XACK`, `XPENDING`,
//! `XCLAIM`, `XAUTOCLAIM`, and `XINFO`.
//!
//! A group is a row of `hf_xgroup` (its last-delivered id and entries-read counter), its
//! consumers rows of `hf_xconsumer` (the time each was last seen), and its pending entries
//! rows of `hf_xpel` (the owner, the last delivery time and the delivery count). All three
//! belong to the stream's key: they are removed, renamed, copied and flushed with it.
//! Every rule here follows Redis 7.0 (`t_stream.c`), including its order of checks, so the
//! differential test can hold these commands to Redis's bytes; times are holdfast's clock.
//! `XREADGROUP … BLOCK` waits as the other blocking commands do (`blocking`).

use super::args::{self, is};
use super::store::*;
use super::streams::{
    col, entries_after, entry, keyed, parse_id, range_end, Head, Id, Shape, INVALID_ID,
};
use bytes::Bytes;
use redis_protocol::resp3::types::{BytesFrame as Frame, FrameMap};
use sqlx::Row;

/// Redis's counter for "unknown": a group's entries-read that cannot be computed.
const UNKNOWN: i64 = -1;

/// A consumer group's own state.
#[derive(Clone, Copy, Debug)]
struct Group {
    last: Id,
    entries_read: i64,
}

async fn group(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8]) -> Result<Option<Group>, Fail> {
    let row =
        sqlx::query("SELECT ms, seq, entries_read FROM hf_xgroup WHERE key = $1 AND grp = $2")
            .bind(key)
            .bind(name)
            .fetch_optional(&mut *ctx.conn)
            .await?;
    match row {
        Some(row) => Ok(Some(Group {
            last: Id::of_row(&row, 0)?,
            entries_read: row.try_get(2)?,
        })),
        None => Ok(None),
    }
}

async fn save_group(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8], g: Group) -> Result<(), Fail> {
    ctx.exec(
        sqlx::query(
            "UPDATE hf_xgroup SET ms = $3, seq = $4, entries_read = $5 WHERE key = $1 AND grp = $2",
        )
        .bind(key)
        .bind(name)
        .bind(col(g.last.ms))
        .bind(col(g.last.seq))
        .bind(g.entries_read),
    )
    .await?;
    Ok(())
}

/// Marks a consumer seen now, creating it if it is new; true if it was created.
async fn seen(ctx: &mut Ctx<'_>, key: &[u8], grp: &[u8], name: &[u8]) -> Result<bool, Fail> {
    let done = ctx
        .exec(
            sqlx::query(
                "UPDATE hf_xconsumer SET seen_at = $4 WHERE key = $1 AND grp = $2 AND name = $3",
            )
            .bind(key)
            .bind(grp)
            .bind(name)
            .bind(ctx.now),
        )
        .await?;
    if done.rows_affected() > 0 {
        return Ok(false);
    }
    ctx.exec(
        sqlx::query("INSERT INTO hf_xconsumer (key, grp, name, seen_at) VALUES ($1, $2, $3, $4)")
            .bind(key)
            .bind(grp)
            .bind(name)
            .bind(ctx.now),
    )
    .await?;
    Ok(true)
}

/// The stream's head, or None when the key does not exist; WRONGTYPE for another kind.
async fn stream(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Head>, Fail> {
    Ok(ctx
        .typed(key, Kind::Stream)
        .await?
        .map(|m| Head::from_stored(m.value.as_deref())))
}

/// A strict id: `ms[-seq]`, neither `-` nor `+`.
fn strict(text: &[u8]) -> Result<Id, Fail> {
    match parse_id(text, 0, false) {
        Some(id) => Ok(id),
        None => fail(INVALID_ID),
    }
}

fn subcommand_error(a: &[Bytes], command: &str) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(arg(a, 1))
    )
}

fn arg(a: &[Bytes], i: usize) -> &[u8] {
    a.get(i).map(|b| b.as_ref()).unwrap_or_default()
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// `XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER key group ...`.
pub async fn xgroup(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let sub = arg(a, 1).to_ascii_uppercase();
    if sub == b"HELP" {
        return Ok(help(XGROUP_HELP));
    }
    let (key, name) = (arg(a, 2), arg(a, 3));
    let create = sub == b"CREATE";
    let (mut mkstream, mut entries_read) = (false, UNKNOWN);
    if create || sub == b"SETID" {
        let mut i = 5;
        while i < a.len() {
            if create && is(arg(a, i), "MKSTREAM") {
                mkstream = true;
                i += 1;
            } else if is(arg(a, i), "ENTRIESREAD") && i + 1 < a.len() {
                entries_read = args::int(arg(a, i + 1))?;
                if entries_read < 0 && entries_read != UNKNOWN {
                    return fail("ERR value for ENTRIESREAD must be positive or -1");
                }
                i += 2;
            } else {
                return fail(subcommand_error(a, "XGROUP"));
            }
        }
    }
    ctx.lock(&[key]).await?;
    let head = stream(ctx, key).await?;
    let current = match head {
        Some(_) => group(ctx, key, name).await?,
        None => None,
    };
    if !mkstream {
        if head.is_none() {
            return fail(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may \
                 want to use the MKSTREAM option to create an empty stream automatically.",
            );
        }
        if current.is_none()
            && matches!(
                sub.as_slice(),
                b"SETID" | b"CREATECONSUMER" | b"DELCONSUMER"
            )
        {
            return fail(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                lossy(name),
                lossy(key)
            ));
        }
    }
    match sub.as_slice() {
        b"CREATE" if a.len() <= 8 => {
            let id = if arg(a, 4) == b"$" {
                head.map_or(Id::MIN, |h| h.last)
            } else {
                strict(arg(a, 4))?
            };
            if head.is_none() {
                ctx.create(key, Kind::Stream, None).await?;
            }
            if current.is_some() {
                return fail("BUSYGROUP Consumer Group name already exists");
            }
            ctx.exec(
                sqlx::query(
                    "INSERT INTO hf_xgroup (key, grp, ms, seq, entries_read) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(key)
                .bind(name)
                .bind(col(id.ms))
                .bind(col(id.seq))
                .bind(entries_read),
            )
            .await?;
            Ok(ok())
        }
        b"SETID" if a.len() == 5 || a.len() == 7 => {
            let id = if arg(a, 4) == b"$" {
                head.map_or(Id::MIN, |h| h.last)
            } else {
                match parse_id(arg(a, 4), 0, true) {
                    Some(id) => id,
                    None => return fail(INVALID_ID),
                }
            };
            let g = Group {
                last: id,
                entries_read,
            };
            save_group(ctx, key, name, g).await?;
            Ok(ok())
        }
        b"DESTROY" if a.len() == 4 => {
            if current.is_none() {
                return Ok(int(0));
            }
            for table in ["hf_xgroup", "hf_xconsumer", "hf_xpel"] {
                ctx.exec(
                    sqlx::query(&format!("DELETE FROM {table} WHERE key = $1 AND grp = $2"))
                        .bind(key)
                        .bind(name),
                )
                .await?;
            }
            Ok(int(1))
        }
        b"CREATECONSUMER" if a.len() == 5 => {
            let exists: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM hf_xconsumer WHERE key = $1 AND grp = $2 AND name = $3",
            )
            .bind(key)
            .bind(name)
            .bind(arg(a, 4))
            .fetch_optional(&mut *ctx.conn)
            .await?;
            if exists.is_some() {
                return Ok(int(0));
            }
            seen(ctx, key, name, arg(a, 4)).await?;
            Ok(int(1))
        }
        b"DELCONSUMER" if a.len() == 5 => {
            let consumer = arg(a, 4);
            let pending = ctx
                .exec(
                    sqlx::query(
                        "DELETE FROM hf_xpel WHERE key = $1 AND grp = $2 AND consumer = $3",
                    )
                    .bind(key)
                    .bind(name)
                    .bind(consumer),
                )
                .await?
                .rows_affected();
            ctx.exec(
                sqlx::query("DELETE FROM hf_xconsumer WHERE key = $1 AND grp = $2 AND name = $3")
                    .bind(key)
                    .bind(name)
                    .bind(consumer),
            )
            .await?;
            Ok(int(pending as i64))
        }
        _ => fail(subcommand_error(a, "XGROUP")),
    }
}

/// What `XREADGROUP` asks of one stream: new entries (`>`), or the consumer's own pending
/// entries after an id.
#[derive(Clone, Copy)]
enum Want {
    New,
    History(Id),
}

/// `XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key ... id ...`,
/// one attempt: nil when no stream had anything for it.
pub async fn xreadgroup(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (mut count, mut noack, mut names) = (0i64, false, None);
    let mut i = 1;
    let mut streams = None;
    while i < a.len() {
        let more = a.len() - i - 1;
        let opt = arg(a, i);
        if is(opt, "BLOCK") && more > 0 {
            super::streams::block_ms(arg(a, i + 1))?;
            i += 1;
        } else if is(opt, "COUNT") && more > 0 {
            count = args::int(arg(a, i + 1))?.max(0);
            i += 1;
        } else if is(opt, "STREAMS") && more > 0 {
            if (a.len() - i - 1) % 2 != 0 {
                return fail(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                );
            }
            streams = Some(i + 1);
            break;
        } else if is(opt, "GROUP") && more >= 2 {
            names = Some((arg(a, i + 1), arg(a, i + 2)));
            i += 2;
        } else if is(opt, "NOACK") {
            noack = true;
        } else {
            return fail(SYNTAX);
        }
        i += 1;
    }
    let Some(streams) = streams else {
        return fail(SYNTAX);
    };
    let Some((grp, consumer)) = names else {
        return fail("ERR Missing GROUP option for XREADGROUP");
    };
    let rest = &a[streams..];
    let (keys, ids) = rest.split_at(rest.len() / 2);
    let locks: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
    ctx.lock(&locks).await?;
    let mut plan = Vec::with_capacity(keys.len());
    for (key, id) in keys.iter().zip(ids) {
        let head = stream(ctx, key).await?;
        let g = match head {
            Some(_) => group(ctx, key, grp).await?,
            None => None,
        };
        let (Some(head), Some(g)) = (head, g) else {
            return fail(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                lossy(key),
                lossy(grp)
            ));
        };
        let want = match id.as_ref() {
            b"$" => return fail(
                "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the \
                 history of this consumer by specifying a proper ID, or use the > ID to get new \
                 messages. The $ ID would just return an empty result set.",
            ),
            b">" => Want::New,
            text => Want::History(strict(text)?),
        };
        plan.push((key, head, g, want));
    }
    let mut found = Vec::new();
    for (key, head, g, want) in plan {
        let entries = match want {
            Want::History(after) => {
                seen(ctx, key, grp, consumer).await?;
                history(ctx, key, grp, consumer, after, count).await?
            }
            Want::New => {
                let shape = Shape::read(ctx, key, head).await?;
                if shape.length == 0 || shape.top <= g.last {
                    continue;
                }
                seen(ctx, key, grp, consumer).await?;
                deliver(ctx, key, grp, consumer, &shape, g, count, noack).await?
            }
        };
        found.push((key.clone(), array(entries)));
    }
    if found.is_empty() {
        return Ok(null());
    }
    Ok(keyed(ctx.proto, found))
}

/// The consumer's pending entries after `after`, each delivered once more; a deleted entry
/// reads `[id, nil]`.
async fn history(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    grp: &[u8],
    consumer: &[u8],
    after: Id,
    count: i64,
) -> Result<Vec<Frame>, Fail> {
    let Some(from) = after.next() else {
        return Ok(Vec::new());
    };
    let rows = sqlx::query(
        "SELECT p.ms, p.seq, s.fields FROM hf_xpel p LEFT JOIN hf_stream s \
         ON s.key = p.key AND s.ms = p.ms AND s.seq = p.seq \
         WHERE p.key = $1 AND p.grp = $2 AND p.consumer = $3 \
         AND (p.ms > $4 OR (p.ms = $4 AND p.seq >= $5)) ORDER BY p.ms, p.seq LIMIT $6",
    )
    .bind(key)
    .bind(grp)
    .bind(consumer)
    .bind(col(from.ms))
    .bind(col(from.seq))
    .bind(if count > 0 { count } else { i64::MAX })
    .fetch_all(&mut *ctx.conn)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let id = Id::of_row(row, 0)?;
        let fields: Option<Vec<u8>> = row.try_get(2)?;
        match fields {
            Some(fields) => {
                ctx.exec(
                    sqlx::query(
                        "UPDATE hf_xpel SET delivered_at = $5, deliveries = deliveries + 1 \
                         WHERE key = $1 AND grp = $2 AND ms = $3 AND seq = $4",
                    )
                    .bind(key)
                    .bind(grp)
                    .bind(col(id.ms))
                    .bind(col(id.seq))
                    .bind(ctx.now),
                )
                .await?;
                out.push(entry(id, &fields));
            }
            None => out.push(array(vec![bulk(id.text()), null()])),
        }
    }
    Ok(out)
}

/// The entries after the group's last-delivered id, now delivered to `consumer` (pending
/// for it unless `noack`), moving the group's id and its entries-read counter as Redis does.
#[allow(clippy::too_many_arguments)]
async fn deliver(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    grp: &[u8],
    consumer: &[u8],
    shape: &Shape,
    mut g: Group,
    count: i64,
    noack: bool,
) -> Result<Vec<Frame>, Fail> {
    let rows = entries_after(ctx, key, g.last, count).await?;
    let mut out = Vec::with_capacity(rows.len());
    for (id, fields) in rows {
        if id > g.last {
            if g.entries_read != UNKNOWN && !shape.tombstones_after(id) {
                g.entries_read += 1;
            } else if shape.added() > 0 {
                g.entries_read = shape.entries_before(id);
            }
            g.last = id;
        }
        out.push(entry(id, &fields));
        if !noack {
            // An entry pending for another consumer (the group's id was set back) moves here,
            // delivered once.
            unpend(ctx, key, grp, id).await?;
            ctx.exec(
                sqlx::query(
                    "INSERT INTO hf_xpel (key, grp, ms, seq, consumer, delivered_at, deliveries) \
                     VALUES ($1, $2, $3, $4, $5, $6, 1)",
                )
                .bind(key)
                .bind(grp)
                .bind(col(id.ms))
                .bind(col(id.seq))
                .bind(consumer)
                .bind(ctx.now),
            )
            .await?;
        }
    }
    save_group(ctx, key, grp, g).await?;
    Ok(out)
}

/// `XACK key group id ...`: how many of the ids were pending, now no longer.
pub async fn xack(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (key, grp) = (arg(a, 1), arg(a, 2));
    ctx.lock(&[key]).await?;
    if stream(ctx, key).await?.is_none() || group(ctx, key, grp).await?.is_none() {
        return Ok(int(0));
    }
    let mut ids = Vec::with_capacity(a.len().saturating_sub(3));
    for text in a.iter().skip(3) {
        ids.push(strict(text)?);
    }
    let mut acked = 0;
    for id in ids {
        acked += i64::from(unpend(ctx, key, grp, id).await?);
    }
    Ok(int(acked))
}

fn no_group(key: &[u8], grp: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        lossy(key),
        lossy(grp)
    )
}

/// The group of `key` named `grp`, or Redis's NOGROUP error; WRONGTYPE for another kind.
async fn required(ctx: &mut Ctx<'_>, key: &[u8], grp: &[u8]) -> Result<(Head, Group), Fail> {
    let head = stream(ctx, key).await?;
    let g = match head {
        Some(_) => group(ctx, key, grp).await?,
        None => None,
    };
    match (head, g) {
        (Some(head), Some(g)) => Ok((head, g)),
        _ => fail(no_group(key, grp)),
    }
}

/// `XPENDING key group [[IDLE min-idle-time] start end count [consumer]]`.
pub async fn xpending(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (key, grp) = (arg(a, 1), arg(a, 2));
    if a.len() != 3 && !(6..=9).contains(&a.len()) {
        return fail(SYNTAX);
    }
    let mut range = None;
    if a.len() >= 6 {
        let (mut at, mut min_idle) = (3, 0);
        if is(arg(a, 3), "IDLE") {
            min_idle = args::int(arg(a, 4))?;
            if a.len() < 8 {
                return fail(SYNTAX);
            }
            at += 2;
        }
        let count = args::int(arg(a, at + 2))?.max(0);
        let start = range_end(arg(a, at), true)?;
        let end = range_end(arg(a, at + 1), false)?;
        let consumer = a.get(at + 3).map(|c| c.as_ref());
        range = Some((start, end, count, min_idle, consumer));
    }
    required(ctx, key, grp).await?;
    let Some((start, end, count, min_idle, consumer)) = range else {
        return summary(ctx, key, grp).await;
    };
    let (Some(start), Some(end)) = (start, end) else {
        return Ok(array(Vec::new()));
    };
    let mut sql = String::from(
        "SELECT ms, seq, consumer, delivered_at, deliveries FROM hf_xpel \
         WHERE key = $1 AND grp = $2 AND (ms > $3 OR (ms = $3 AND seq >= $4)) \
         AND (ms < $5 OR (ms = $5 AND seq <= $6)) AND delivered_at <= $7",
    );
    if consumer.is_some() {
        sql.push_str(" AND consumer = $9");
    }
    sql.push_str(" ORDER BY ms, seq LIMIT $8");
    let mut query = sqlx::query(&sql)
        .bind(key)
        .bind(grp)
        .bind(col(start.ms))
        .bind(col(start.seq))
        .bind(col(end.ms))
        .bind(col(end.seq))
        .bind(if min_idle > 0 {
            ctx.now.saturating_sub(min_idle)
        } else {
            i64::MAX
        })
        .bind(count);
    if let Some(consumer) = consumer {
        query = query.bind(consumer);
    }
    let rows = query.fetch_all(&mut *ctx.conn).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let delivered: i64 = row.try_get(3)?;
        out.push(array(vec![
            bulk(Id::of_row(row, 0)?.text()),
            bulk(bytes_at(row, 2)?),
            int(ctx.now.saturating_sub(delivered).max(0)),
            int(row.try_get(4)?),
        ]));
    }
    Ok(array(out))
}

/// `XPENDING key group`: the count, the first and last pending ids, and each consumer's count.
async fn summary(ctx: &mut Ctx<'_>, key: &[u8], grp: &[u8]) -> Out {
    let rows = sqlx::query(
        "SELECT consumer, COUNT(*), MIN(ms), MAX(ms) FROM hf_xpel WHERE key = $1 AND grp = $2 \
         GROUP BY consumer ORDER BY consumer",
    )
    .bind(key)
    .bind(grp)
    .fetch_all(&mut *ctx.conn)
    .await?;
    if rows.is_empty() {
        return Ok(array(vec![int(0), null(), null(), null()]));
    }
    let mut total = 0;
    let mut consumers = Vec::with_capacity(rows.len());
    for row in &rows {
        let n: i64 = row.try_get(1)?;
        total += n;
        consumers.push(array(vec![
            bulk(bytes_at(row, 0)?),
            bulk(Bytes::from(n.to_string())),
        ]));
    }
    let mut edges = Vec::with_capacity(2);
    for order in ["ms, seq", "ms DESC, seq DESC"] {
        let row = sqlx::query(&format!(
            "SELECT ms, seq FROM hf_xpel WHERE key = $1 AND grp = $2 ORDER BY {order} LIMIT 1"
        ))
        .bind(key)
        .bind(grp)
        .fetch_one(&mut *ctx.conn)
        .await?;
        edges.push(bulk(Id::of_row(&row, 0)?.text()));
    }
    let mut out = vec![int(total)];
    out.extend(edges);
    out.push(array(consumers));
    Ok(array(out))
}

/// A pending entry as `XCLAIM` and `XAUTOCLAIM` find it.
struct Pending {
    id: Id,
    consumer: Option<Vec<u8>>,
    delivered_at: i64,
    deliveries: i64,
}

async fn pending(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    grp: &[u8],
    id: Id,
) -> Result<Option<Pending>, Fail> {
    let row = sqlx::query(
        "SELECT consumer, delivered_at, deliveries FROM hf_xpel \
         WHERE key = $1 AND grp = $2 AND ms = $3 AND seq = $4",
    )
    .bind(key)
    .bind(grp)
    .bind(col(id.ms))
    .bind(col(id.seq))
    .fetch_optional(&mut *ctx.conn)
    .await?;
    match row {
        Some(row) => Ok(Some(Pending {
            id,
            consumer: Some(row.try_get(0)?),
            delivered_at: row.try_get(1)?,
            deliveries: row.try_get(2)?,
        })),
        None => Ok(None),
    }
}

async fn fields_of(ctx: &mut Ctx<'_>, key: &[u8], id: Id) -> Result<Option<Vec<u8>>, Fail> {
    Ok(
        sqlx::query_scalar("SELECT fields FROM hf_stream WHERE key = $1 AND ms = $2 AND seq = $3")
            .bind(key)
            .bind(col(id.ms))
            .bind(col(id.seq))
            .fetch_optional(&mut *ctx.conn)
            .await?,
    )
}

/// Removes an id from the group's pending entries; true if it was pending.
async fn unpend(ctx: &mut Ctx<'_>, key: &[u8], grp: &[u8], id: Id) -> Result<bool, Fail> {
    let done = ctx
        .exec(
            sqlx::query("DELETE FROM hf_xpel WHERE key = $1 AND grp = $2 AND ms = $3 AND seq = $4")
                .bind(key)
                .bind(grp)
                .bind(col(id.ms))
                .bind(col(id.seq)),
        )
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Gives a pending entry to `consumer` with this delivery time and count.
async fn hand_over(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    grp: &[u8],
    consumer: &[u8],
    p: &Pending,
) -> Result<(), Fail> {
    unpend(ctx, key, grp, p.id).await?;
    ctx.exec(
        sqlx::query(
            "INSERT INTO hf_xpel (key, grp, ms, seq, consumer, delivered_at, deliveries) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(key)
        .bind(grp)
        .bind(col(p.id.ms))
        .bind(col(p.id.seq))
        .bind(consumer)
        .bind(p.delivered_at)
        .bind(p.deliveries),
    )
    .await?;
    Ok(())
}

/// `XCLAIM key group consumer min-idle-time id ... [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]`.
pub async fn xclaim(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (key, grp, consumer) = (arg(a, 1), arg(a, 2), arg(a, 3));
    ctx.lock(&[key]).await?;
    let (_, mut g) = required(ctx, key, grp).await?;
    let Some(min_idle) = args::parse_i64(arg(a, 4)) else {
        return fail("ERR Invalid min-idle-time argument for XCLAIM");
    };
    let min_idle = min_idle.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while let Some(id) = a.get(j).and_then(|t| parse_id(t, 0, false)) {
        ids.push(id);
        j += 1;
    }
    let now = ctx.now;
    let (mut force, mut justid, mut retry, mut delivery, mut last) =
        (false, false, None, None, Id::MIN);
    while j < a.len() {
        let more = a.len() - 1 - j;
        let opt = arg(a, j);
        let number = |what: &str| match args::parse_i64(arg(a, j + 1)) {
            Some(n) => Ok(n),
            None => fail(format!("ERR Invalid {what} option argument for XCLAIM")),
        };
        if is(opt, "FORCE") {
            force = true;
        } else if is(opt, "JUSTID") {
            justid = true;
        } else if is(opt, "IDLE") && more > 0 {
            delivery = Some(now - number("IDLE")?);
            j += 1;
        } else if is(opt, "TIME") && more > 0 {
            delivery = Some(number("TIME")?);
            j += 1;
        } else if is(opt, "RETRYCOUNT") && more > 0 {
            retry = Some(number("RETRYCOUNT")?);
            j += 1;
        } else if is(opt, "LASTID") && more > 0 {
            last = strict(arg(a, j + 1))?;
            j += 1;
        } else {
            return fail(format!("ERR Unrecognized XCLAIM option '{}'", lossy(opt)));
        }
        j += 1;
    }
    if last > g.last {
        g.last = last;
        save_group(ctx, key, grp, g).await?;
    }
    // A time in the future or before the epoch is taken as now, as Redis does.
    let delivery = match delivery {
        Some(t) if (0..=now).contains(&t) => t,
        _ => now,
    };
    let mut out = Vec::new();
    let mut known = false;
    for id in ids {
        let found = pending(ctx, key, grp, id).await?;
        let Some(fields) = fields_of(ctx, key, id).await? else {
            // Pending for an entry deleted since: no longer pending.
            if found.is_some() {
                unpend(ctx, key, grp, id).await?;
            }
            continue;
        };
        let mut p = match found {
            Some(p) => p,
            None if force => Pending {
                id,
                consumer: None,
                delivered_at: now,
                deliveries: 1,
            },
            None => continue,
        };
        if p.consumer.is_some() && min_idle > 0 && now - p.delivered_at < min_idle {
            continue;
        }
        if !known {
            seen(ctx, key, grp, consumer).await?;
            known = true;
        }
        p.delivered_at = delivery;
        match retry {
            Some(n) => p.deliveries = n,
            None if !justid => p.deliveries += 1,
            None => {}
        }
        hand_over(ctx, key, grp, consumer, &p).await?;
        out.push(if justid {
            bulk(id.text())
        } else {
            entry(id, &fields)
        });
    }
    Ok(array(out))
}

/// `XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]`: the cursor,
/// the claimed entries, and the pending ids whose entries were deleted (no longer pending).
pub async fn xautoclaim(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (key, grp, consumer) = (arg(a, 1), arg(a, 2), arg(a, 3));
    let Some(min_idle) = args::parse_i64(arg(a, 4)) else {
        return fail("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let min_idle = min_idle.max(0);
    let Some(start) = range_end(arg(a, 5), true)? else {
        return fail("ERR invalid start ID for the interval");
    };
    let (mut count, mut justid) = (100i64, false);
    let mut j = 6;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if is(arg(a, j), "COUNT") && more > 0 {
            // Redis's bound: the attempts (ten per entry) must fit in a long.
            match args::parse_i64(arg(a, j + 1)) {
                Some(n) if (1..=i64::MAX / 16).contains(&n) => count = n,
                _ => return fail("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if is(arg(a, j), "JUSTID") {
            justid = true;
        } else {
            return fail(SYNTAX);
        }
        j += 1;
    }
    ctx.lock(&[key]).await?;
    required(ctx, key, grp).await?;
    let mut attempts = count.saturating_mul(10);
    // Every row the loop may look at, and the next one: the cursor.
    let rows = sqlx::query(
        "SELECT p.ms, p.seq, p.consumer, p.delivered_at, p.deliveries, s.fields FROM hf_xpel p \
         LEFT JOIN hf_stream s ON s.key = p.key AND s.ms = p.ms AND s.seq = p.seq \
         WHERE p.key = $1 AND p.grp = $2 AND (p.ms > $3 OR (p.ms = $3 AND p.seq >= $4)) \
         ORDER BY p.ms, p.seq LIMIT $5",
    )
    .bind(key)
    .bind(grp)
    .bind(col(start.ms))
    .bind(col(start.seq))
    .bind(attempts.saturating_add(1))
    .fetch_all(&mut *ctx.conn)
    .await?;
    let now = ctx.now;
    let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
    let mut at = 0;
    let mut known = false;
    while attempts > 0 && count > 0 && at < rows.len() {
        attempts -= 1;
        let row = &rows[at];
        at += 1;
        let mut p = Pending {
            id: Id::of_row(row, 0)?,
            consumer: Some(row.try_get(2)?),
            delivered_at: row.try_get(3)?,
            deliveries: row.try_get(4)?,
        };
        let fields: Option<Vec<u8>> = row.try_get(5)?;
        let Some(fields) = fields else {
            unpend(ctx, key, grp, p.id).await?;
            deleted.push(bulk(p.id.text()));
            count -= 1;
            continue;
        };
        if min_idle > 0 && now - p.delivered_at < min_idle {
            continue;
        }
        if !known {
            seen(ctx, key, grp, consumer).await?;
            known = true;
        }
        p.delivered_at = now;
        if !justid {
            p.deliveries += 1;
        }
        hand_over(ctx, key, grp, consumer, &p).await?;
        claimed.push(if justid {
            bulk(p.id.text())
        } else {
            entry(p.id, &fields)
        });
        count -= 1;
    }
    let cursor = match rows.get(at) {
        Some(row) => Id::of_row(row, 0)?,
        None => Id::MIN,
    };
    Ok(array(vec![
        bulk(cursor.text()),
        array(claimed),
        array(deleted),
    ]))
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// A `HELP` subcommand's reply, Redis's text.
fn help(lines: &[&'static str]) -> Frame {
    array(
        lines
            .iter()
            .map(|line| Frame::SimpleString {
                data: Bytes::from_static(line.as_bytes()),
                attributes: None,
            })
            .collect(),
    )
}

/// A reply of named fields: a map in RESP3, alternating names and values in RESP2.
fn record(fields: Vec<(&'static str, Frame)>) -> Frame {
    let mut map = FrameMap::default();
    for (name, value) in fields {
        map.insert(bulk(Bytes::from_static(name.as_bytes())), value);
    }
    Frame::Map {
        data: map,
        attributes: None,
    }
}

/// A group's lag: entries added and not yet read by it, where that can be known (Redis's
/// `streamReplyWithCGLag`); nil where it cannot.
fn lag(shape: &Shape, g: Group) -> Frame {
    let added = i64::try_from(shape.added()).unwrap_or(i64::MAX);
    if added == 0 {
        return int(0);
    }
    if g.entries_read != UNKNOWN && !shape.tombstones_after(g.last) {
        return int(added - g.entries_read);
    }
    match shape.entries_before(g.last) {
        UNKNOWN => null(),
        read => int(added - read),
    }
}

fn entries_read(g: Group) -> Frame {
    if g.entries_read == UNKNOWN {
        null()
    } else {
        int(g.entries_read)
    }
}

/// `XINFO STREAM key [FULL [COUNT n]]`, `XINFO GROUPS key`, `XINFO CONSUMERS key group`.
pub async fn xinfo(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let sub = arg(a, 1).to_ascii_uppercase();
    if sub == b"HELP" {
        return Ok(help(XINFO_HELP));
    }
    let key = arg(a, 2);
    let Some(head) = stream(ctx, key).await? else {
        return fail("ERR no such key");
    };
    let (mut full, mut count) = (false, 10);
    if sub == b"STREAM" {
        let mut i = 3;
        while i < a.len() {
            if is(arg(a, i), "FULL") {
                full = true;
                i += 1;
            } else if is(arg(a, i), "COUNT") && full && i + 1 < a.len() {
                count = args::int(arg(a, i + 1))?.max(0);
                i += 2;
            } else {
                return fail(subcommand_error(a, "XINFO"));
            }
        }
    }
    match sub.as_slice() {
        b"CONSUMERS" => {
            let grp = arg(a, 3);
            if group(ctx, key, grp).await?.is_none() {
                return fail(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    lossy(grp),
                    lossy(key)
                ));
            }
            let rows = sqlx::query(
                "SELECT c.name, c.seen_at, (SELECT COUNT(*) FROM hf_xpel p WHERE p.key = c.key \
                 AND p.grp = c.grp AND p.consumer = c.name) FROM hf_xconsumer c \
                 WHERE c.key = $1 AND c.grp = $2 ORDER BY c.name",
            )
            .bind(key)
            .bind(grp)
            .fetch_all(&mut *ctx.conn)
            .await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let seen_at: i64 = row.try_get(1)?;
                out.push(record(vec![
                    ("name", bulk(bytes_at(row, 0)?)),
                    ("pending", int(row.try_get(2)?)),
                    ("idle", int(ctx.now.saturating_sub(seen_at).max(0))),
                ]));
            }
            Ok(array(out))
        }
        b"GROUPS" => {
            let shape = Shape::read(ctx, key, head).await?;
            let mut out = Vec::new();
            for (name, g) in groups(ctx, key).await? {
                let counts = sqlx::query(
                    "SELECT (SELECT COUNT(*) FROM hf_xconsumer WHERE key = $1 AND grp = $2), \
                     (SELECT COUNT(*) FROM hf_xpel WHERE key = $1 AND grp = $2)",
                )
                .bind(key)
                .bind(name.as_ref())
                .fetch_one(&mut *ctx.conn)
                .await?;
                out.push(record(vec![
                    ("name", bulk(name)),
                    ("consumers", int(counts.try_get(0)?)),
                    ("pending", int(counts.try_get(1)?)),
                    ("last-delivered-id", bulk(g.last.text())),
                    ("entries-read", entries_read(g)),
                    ("lag", lag(&shape, g)),
                ]));
            }
            Ok(array(out))
        }
        b"STREAM" => {
            let shape = Shape::read(ctx, key, head).await?;
            stream_info(ctx, key, &shape, full.then_some(count)).await
        }
        _ => fail(subcommand_error(a, "XINFO")),
    }
}

async fn groups(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Bytes, Group)>, Fail> {
    let rows =
        sqlx::query("SELECT grp, ms, seq, entries_read FROM hf_xgroup WHERE key = $1 ORDER BY grp")
            .bind(key)
            .fetch_all(&mut *ctx.conn)
            .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((
            bytes_at(row, 0)?,
            Group {
                last: Id::of_row(row, 1)?,
                entries_read: row.try_get(3)?,
            },
        ));
    }
    Ok(out)
}

/// Up to `limit` (0: all) entries from the start of the stream, or from its end.
async fn edge_entries(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    limit: i64,
    last: bool,
) -> Result<Vec<Frame>, Fail> {
    let order = if last { "ms DESC, seq DESC" } else { "ms, seq" };
    let rows = sqlx::query(&format!(
        "SELECT ms, seq, fields FROM hf_stream WHERE key = $1 ORDER BY {order} LIMIT $2"
    ))
    .bind(key)
    .bind(if limit > 0 { limit } else { i64::MAX })
    .fetch_all(&mut *ctx.conn)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let fields: Vec<u8> = row.try_get(2)?;
        out.push(entry(Id::of_row(row, 0)?, &fields));
    }
    Ok(out)
}

/// `XINFO STREAM`, with `FULL [COUNT n]` when `full` is `Some(n)`. The two radix-tree
/// figures describe Redis's memory layout, which has no counterpart here: they are those
/// of Redis's nodes of 100 entries.
async fn stream_info(ctx: &mut Ctx<'_>, key: &[u8], shape: &Shape, full: Option<i64>) -> Out {
    let nodes = (shape.length + 99) / 100;
    let head = shape.head;
    let mut fields = vec![
        ("length", int(shape.length)),
        ("radix-tree-keys", int(nodes)),
        ("radix-tree-nodes", int(nodes + 1)),
        ("last-generated-id", bulk(head.last.text())),
        ("max-deleted-entry-id", bulk(head.max_deleted.text())),
        (
            "entries-added",
            int(i64::try_from(shape.added()).unwrap_or(i64::MAX)),
        ),
        ("recorded-first-entry-id", bulk(shape.first.text())),
    ];
    let Some(count) = full else {
        let n = sqlx::query_scalar("SELECT COUNT(*) FROM hf_xgroup WHERE key = $1")
            .bind(key)
            .fetch_one(&mut *ctx.conn)
            .await?;
        fields.push(("groups", int(n)));
        let first = edge_entries(ctx, key, 1, false).await?.pop();
        let last = edge_entries(ctx, key, 1, true).await?.pop();
        fields.push(("first-entry", first.unwrap_or_else(null)));
        fields.push(("last-entry", last.unwrap_or_else(null)));
        return Ok(record(fields));
    };
    fields.push((
        "entries",
        array(edge_entries(ctx, key, count, false).await?),
    ));
    let limit = if count > 0 { count } else { i64::MAX };
    let mut out = Vec::new();
    for (name, g) in groups(ctx, key).await? {
        let rows = sqlx::query(
            "SELECT ms, seq, consumer, delivered_at, deliveries FROM hf_xpel \
             WHERE key = $1 AND grp = $2 ORDER BY ms, seq",
        )
        .bind(key)
        .bind(name.as_ref())
        .fetch_all(&mut *ctx.conn)
        .await?;
        let mut pel = Vec::new();
        let mut by_consumer: std::collections::HashMap<Vec<u8>, Vec<Frame>> = Default::default();
        let mut counts: std::collections::HashMap<Vec<u8>, i64> = Default::default();
        for row in &rows {
            let id = Id::of_row(row, 0)?;
            let owner: Vec<u8> = row.try_get(2)?;
            let (at, times): (i64, i64) = (row.try_get(3)?, row.try_get(4)?);
            if (pel.len() as i64) < limit {
                pel.push(array(vec![
                    bulk(id.text()),
                    bulk(Bytes::from(owner.clone())),
                    int(at),
                    int(times),
                ]));
            }
            *counts.entry(owner.clone()).or_default() += 1;
            let own = by_consumer.entry(owner).or_default();
            if (own.len() as i64) < limit {
                own.push(array(vec![bulk(id.text()), int(at), int(times)]));
            }
        }
        let members = sqlx::query(
            "SELECT name, seen_at FROM hf_xconsumer WHERE key = $1 AND grp = $2 ORDER BY name",
        )
        .bind(key)
        .bind(name.as_ref())
        .fetch_all(&mut *ctx.conn)
        .await?;
        let mut consumers = Vec::with_capacity(members.len());
        for row in &members {
            let member: Vec<u8> = row.try_get(0)?;
            consumers.push(record(vec![
                ("name", bulk(Bytes::from(member.clone()))),
                ("seen-time", int(row.try_get(1)?)),
                ("pel-count", int(counts.get(&member).copied().unwrap_or(0))),
                (
                    "pending",
                    array(by_consumer.remove(&member).unwrap_or_default()),
                ),
            ]));
        }
        out.push(record(vec![
            ("name", bulk(name)),
            ("last-delivered-id", bulk(g.last.text())),
            ("entries-read", entries_read(g)),
            ("lag", lag(shape, g)),
            ("pel-count", int(rows.len() as i64)),
            ("pending", array(pel)),
            ("consumers", array(consumers)),
        ]));
    }
    fields.push(("groups", array(out)));
    Ok(record(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(
        length: i64,
        added: u64,
        first: (u64, u64),
        last: (u64, u64),
        deleted: (u64, u64),
    ) -> Shape {
        let id = |(ms, seq)| Id { ms, seq };
        Shape {
            head: Head {
                last: id(last),
                added: Some(added),
                max_deleted: id(deleted),
            },
            length,
            first: id(first),
            top: id(last),
        }
    }

    /// Redis's lag rules, case by case (`streamReplyWithCGLag` and the distance estimate).
    #[test]
    fn lag_follows_redis() {
        let g = |last: (u64, u64), read: i64| Group {
            last: Id {
                ms: last.0,
                seq: last.1,
            },
            entries_read: read,
        };
        let cases: &[(Shape, Group, Frame)] = &[
            // A stream nothing was ever added to: 0.
            (
                shape(0, 0, (0, 0), (0, 0), (0, 0)),
                g((0, 0), UNKNOWN),
                int(0),
            ),
            // A valid counter and no tombstone ahead: added - read.
            (shape(5, 5, (1, 0), (5, 0), (0, 0)), g((3, 0), 3), int(2)),
            // A counter past what was added (ENTRIESREAD): negative, as Redis answers.
            (shape(1, 1, (1, 1), (1, 1), (0, 0)), g((0, 0), 5), int(-4)),
            // No counter, at the last id: 0.
            (
                shape(1, 1, (5, 0), (5, 0), (0, 0)),
                g((5, 0), UNKNOWN),
                int(0),
            ),
            // No counter, before the first entry and no tombstones: all of them.
            (
                shape(3, 3, (1, 0), (3, 0), (0, 0)),
                g((0, 0), UNKNOWN),
                int(3),
            ),
            // No counter, at the first entry: the rest.
            (
                shape(3, 3, (1, 0), (3, 0), (0, 0)),
                g((1, 0), UNKNOWN),
                int(2),
            ),
            // No counter, a tombstone among the entries: unknown.
            (
                shape(3, 4, (1, 0), (4, 0), (2, 0)),
                g((1, 0), UNKNOWN),
                null(),
            ),
            // A counter with a tombstone ahead: estimated, here unknown.
            (shape(3, 4, (1, 0), (4, 0), (3, 0)), g((2, 0), 2), null()),
            // A tombstone before the first entry does not count.
            (shape(2, 4, (3, 0), (4, 0), (2, 0)), g((3, 0), 3), int(1)),
            // A future id: unknown.
            (
                shape(2, 2, (1, 0), (2, 0), (0, 0)),
                g((9, 0), UNKNOWN),
                null(),
            ),
        ];
        for (i, (s, group, want)) in cases.iter().enumerate() {
            assert_eq!(&lag(s, *group), want, "case {i}");
        }
    }
}
