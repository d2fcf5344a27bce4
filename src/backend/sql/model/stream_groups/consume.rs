//! Consumer groups read from: `XREADGROUP` delivers entries (new ones, or a consumer's own
//! pending ones again), `XACK` acknowledges them, `XPENDING` lists what is pending, and
//! `XCLAIM` and `XAUTOCLAIM` hand pending entries to another consumer.

use super::super::args::{self, is};
use super::super::store::*;
use super::super::streams::read::{block_ms, entries_after, keyed};
use super::super::streams::{col, entry, parse_id, range_end, Head, Id, Shape};
use super::{arg, group, lossy, save_group, seen, stream, strict, Group, UNKNOWN};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

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
            block_ms(arg(a, i + 1))?;
            i += 1;
        } else if is(opt, "COUNT") && more > 0 {
            count = args::int(arg(a, i + 1))?.max(0);
            i += 1;
        } else if is(opt, "STREAMS") && more > 0 {
            if !(a.len() - i - 1).is_multiple_of(2) {
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
    let rows = ctx
        .all(
            stmt(
                "SELECT p.ms, p.seq, s.fields FROM hf_xpel p LEFT JOIN hf_stream s \
         ON s.key = p.key AND s.ms = p.ms AND s.seq = p.seq \
         WHERE p.key = $1 AND p.grp = $2 AND p.consumer = $3 \
         AND (p.ms, p.seq) >= ($4, $5) ORDER BY p.ms, p.seq LIMIT $6",
            )
            .bind(key)
            .bind(grp)
            .bind(consumer)
            .bind(col(from.ms))
            .bind(col(from.seq))
            .bind(if count > 0 { count } else { i64::MAX }),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let id = Id::of_row(row, 0)?;
        let fields: Option<Vec<u8>> = row.try_get(2)?;
        match fields {
            Some(fields) => {
                ctx.execute(
                    stmt(
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
            ctx.execute(
                stmt(
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
         WHERE key = $1 AND grp = $2 AND (ms, seq) >= ($3, $4) \
         AND (ms, seq) <= ($5, $6) AND delivered_at <= $7",
    );
    if consumer.is_some() {
        sql.push_str(" AND consumer = $9");
    }
    sql.push_str(" ORDER BY ms, seq LIMIT $8");
    let mut query = stmt(&sql)
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
    let rows = ctx.all(query).await?;
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
    let rows = ctx.all(stmt(
        "SELECT consumer, COUNT(*), MIN(ms), MAX(ms) FROM hf_xpel WHERE key = $1 AND grp = $2 \
         GROUP BY consumer ORDER BY consumer",
    )
    .bind(key)
    .bind(grp))
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
        let row = ctx
            .one(
                stmt(format!(
            "SELECT ms, seq FROM hf_xpel WHERE key = $1 AND grp = $2 ORDER BY {order} LIMIT 1"
        ))
                .bind(key)
                .bind(grp),
            )
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
    let row = ctx
        .opt(
            stmt(
                "SELECT consumer, delivered_at, deliveries FROM hf_xpel \
         WHERE key = $1 AND grp = $2 AND ms = $3 AND seq = $4",
            )
            .bind(key)
            .bind(grp)
            .bind(col(id.ms))
            .bind(col(id.seq)),
        )
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
    ctx.scalar_opt(
        stmt("SELECT fields FROM hf_stream WHERE key = $1 AND ms = $2 AND seq = $3")
            .bind(key)
            .bind(col(id.ms))
            .bind(col(id.seq)),
    )
    .await
}

/// Removes an id from the group's pending entries; true if it was pending.
async fn unpend(ctx: &mut Ctx<'_>, key: &[u8], grp: &[u8], id: Id) -> Result<bool, Fail> {
    let done = ctx
        .execute(
            stmt("DELETE FROM hf_xpel WHERE key = $1 AND grp = $2 AND ms = $3 AND seq = $4")
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
    ctx.execute(
        stmt(
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
    let rows = ctx.all(stmt(
        "SELECT p.ms, p.seq, p.consumer, p.delivered_at, p.deliveries, s.fields FROM hf_xpel p \
         LEFT JOIN hf_stream s ON s.key = p.key AND s.ms = p.ms AND s.seq = p.seq \
         WHERE p.key = $1 AND p.grp = $2 AND (p.ms, p.seq) >= ($3, $4) \
         ORDER BY p.ms, p.seq LIMIT $5",
    )
    .bind(key)
    .bind(grp)
    .bind(col(start.ms))
    .bind(col(start.seq))
    .bind(attempts.saturating_add(1)))
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
