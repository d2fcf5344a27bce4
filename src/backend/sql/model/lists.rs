//! List commands over `hf_list`: an element's place is its `pos`, which pushes extend
//! downwards (head) or upwards (tail), so a push touches one row.

use super::args;
use super::store::*;
use super::strings::arg;
use bytes::Bytes;

async fn list(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Fail> {
    Ok(ctx.typed(key, Kind::List).await?.is_some())
}

/// LPUSH, RPUSH, LPUSHX, RPUSHX.
pub async fn push(ctx: &mut Ctx<'_>, a: &[Bytes], head: bool, only_existing: bool) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    let exists = list(ctx, key).await?;
    if only_existing && !exists {
        return Ok(int(0));
    }
    let values = a.get(2..).unwrap_or_default();
    push_values(ctx, key, head, values).await?;
    Ok(int(ctx.count(key, Kind::List).await?))
}

/// Pushes `values` at the head or the tail of the list at `key`, created if absent.
async fn push_values(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    head: bool,
    values: &[Bytes],
) -> Result<(), Fail> {
    ctx.create(key, Kind::List, None).await?;
    let edge: Option<i64> = ctx
        .scalar(
            stmt(if head {
                "SELECT MIN(pos) FROM hf_list WHERE key = $1"
            } else {
                "SELECT MAX(pos) FROM hf_list WHERE key = $1"
            })
            .bind(key),
        )
        .await?;
    let mut pos = edge.unwrap_or(0);
    let mut first = edge.is_none();
    let mut rows = Vec::with_capacity(values.len());
    for value in values {
        if !first {
            pos = if head { pos - 1 } else { pos + 1 };
        }
        first = false;
        rows.push((key, pos, value.as_ref()));
    }
    insert_elements(ctx, &rows).await
}

/// Inserts `(key, pos, value)` rows, many to a statement, in chunks whose sizes are powers
/// of two (a few statements, each prepared once), rather than one statement per value.
async fn insert_elements(ctx: &mut Ctx<'_>, rows: &[(&[u8], i64, &[u8])]) -> Result<(), Fail> {
    let mut rest = rows;
    while !rest.is_empty() {
        let n = rest.len().min(STATEMENT_ROWS);
        let n = 1 << (usize::BITS - 1 - n.leading_zeros());
        let (chunk, tail) = rest.split_at(n);
        let sql = format!(
            "INSERT INTO hf_list (key, pos, value) VALUES {}",
            value_rows(ctx.dialect, n, 3)
        );
        let mut query = stmt(&sql);
        for (key, pos, value) in chunk {
            query = query.bind(*key).bind(*pos).bind(*value);
        }
        ctx.execute(query).await?;
        rest = tail;
    }
    Ok(())
}

/// A push of a run (`push_run`): at the head (`LPUSH`) or the tail (`RPUSH`) of the list at
/// `key`, these values.
pub type Push<'a> = (bool, &'a [u8], &'a [Bytes]);

/// A run of `LPUSH`es and `RPUSH`es (with at least one value each), written by a few
/// statements: every list's kind read once (the missing ones created), each list's two ends
/// and length read once, then every element inserted by multi-row statements, each at the
/// place its push gives it in the run's order. Each push's reply: the list's length after
/// it, or None when its key holds another kind.
pub async fn push_run(ctx: &mut Ctx<'_>, run: &[Push<'_>]) -> Result<Vec<Option<i64>>, Fail> {
    let keys: Vec<&[u8]> = run.iter().map(|(_, key, _)| *key).collect();
    let live = ctx.collections(&keys, Kind::List).await?;
    let wrong = |key: &[u8]| live.get(key).is_some_and(|kind| *kind != Kind::List);
    // Each list's (lowest, highest, length) as the run goes; None for its ends while empty.
    let mut lists: std::collections::HashMap<&[u8], Ends> = Default::default();
    let mut rows = Vec::new();
    let mut replies = Vec::with_capacity(run.len());
    for &(head, key, values) in run {
        if wrong(key) {
            replies.push(None);
            continue;
        }
        if !lists.contains_key(key) {
            let now = ends(ctx, key).await?;
            lists.insert(key, now);
        }
        let Some((span, len)) = lists.get_mut(key) else {
            continue;
        };
        for value in values {
            let pos = match *span {
                None => 0,
                Some((low, high)) => {
                    if head {
                        low - 1
                    } else {
                        high + 1
                    }
                }
            };
            *span = Some(match *span {
                None => (pos, pos),
                Some((low, high)) => (low.min(pos), high.max(pos)),
            });
            *len += 1;
            rows.push((key, pos, value.as_ref()));
        }
        replies.push(Some(*len));
    }
    insert_elements(ctx, &rows).await?;
    Ok(replies)
}

/// A list's lowest and highest place (None when it has no element), and its length.
type Ends = (Option<(i64, i64)>, i64);

/// The list at `key`'s [`Ends`].
async fn ends(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Ends, Fail> {
    let row = ctx
        .one(
            stmt(
                "SELECT (SELECT MIN(pos) FROM hf_list WHERE key = $1), \
                 (SELECT MAX(pos) FROM hf_list WHERE key = $1), \
                 (SELECT len FROM hf_keys WHERE key = $1)",
            )
            .bind(key),
        )
        .await?;
    let low: Option<i64> = row.try_get(0)?;
    let high: Option<i64> = row.try_get(1)?;
    let len: Option<i64> = row.try_get(2)?;
    Ok((low.zip(high), len.unwrap_or(0)))
}

/// The list's (pos, value) rows in order, from `offset`, at most `limit`.
async fn rows(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    reverse: bool,
    offset: i64,
    limit: i64,
) -> Result<Vec<(i64, Bytes)>, Fail> {
    let order = if reverse { "DESC" } else { "ASC" };
    let rows = ctx
        .all(
            stmt(format!(
        "SELECT pos, value FROM hf_list WHERE key = $1 ORDER BY pos {order} LIMIT $2 OFFSET $3"
    ))
            .bind(key)
            .bind(limit)
            .bind(offset),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((row.try_get(0)?, bytes_at(row, 1)?));
    }
    Ok(out)
}

/// Removes the elements at `positions`, and the list with its last element.
async fn remove_at(ctx: &mut Ctx<'_>, key: &[u8], positions: &[i64]) -> Result<(), Fail> {
    for pos in positions {
        ctx.execute(
            stmt("DELETE FROM hf_list WHERE key = $1 AND pos = $2")
                .bind(key)
                .bind(*pos),
        )
        .await?;
    }
    ctx.drop_if_empty(key, Kind::List).await
}

/// LPOP and RPOP, with or without a count.
pub async fn pop(ctx: &mut Ctx<'_>, a: &[Bytes], head: bool) -> Out {
    let key = arg(a, 1);
    let count = match a.get(2) {
        Some(c) => {
            let n = args::parse_i64(c).filter(|n| *n >= 0);
            match n {
                Some(n) => Some(n),
                None => return fail("ERR value is out of range, must be positive"),
            }
        }
        None => None,
    };
    ctx.lock(&[key]).await?;
    if !list(ctx, key).await? {
        return Ok(null());
    }
    if count == Some(0) {
        return Ok(array(Vec::new()));
    }
    let taken = rows(ctx, key, !head, 0, count.unwrap_or(1)).await?;
    let positions: Vec<i64> = taken.iter().map(|(pos, _)| *pos).collect();
    remove_at(ctx, key, &positions).await?;
    let mut values: Vec<Frame> = taken.into_iter().map(|(_, v)| bulk(v)).collect();
    Ok(match count {
        Some(_) => array(values),
        None => values.pop().unwrap_or(Frame::Null),
    })
}

use redis_protocol::resp3::types::BytesFrame as Frame;

/// Resolves Redis's inclusive, possibly negative, range to (offset, count).
fn span(start: i64, end: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    let end = end.min(len - 1);
    Some((start, end - start + 1))
}

pub async fn lrange(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (start, end) = (args::int(arg(a, 2))?, args::int(arg(a, 3))?);
    if !list(ctx, key).await? {
        return Ok(array(Vec::new()));
    }
    let len = ctx.count(key, Kind::List).await?;
    let Some((offset, count)) = span(start, end, len) else {
        return Ok(array(Vec::new()));
    };
    // From the nearer end: `LRANGE key -10 -1` reads ten rows, however long the list.
    let (from, flip) = nearer_end(offset, offset + count - 1, len);
    let mut got = rows(ctx, key, flip, from, count).await?;
    if flip {
        got.reverse();
    }
    Ok(array(got.into_iter().map(|(_, v)| bulk(v)).collect()))
}

pub async fn llen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    Ok(int(ctx.len(arg(a, 1), Kind::List).await?))
}

/// The row at a Redis index (negative from the tail).
async fn at(ctx: &mut Ctx<'_>, key: &[u8], index: i64) -> Result<Option<(i64, Bytes)>, Fail> {
    let (reverse, offset) = if index < 0 {
        (true, -(index + 1))
    } else {
        (false, index)
    };
    Ok(rows(ctx, key, reverse, offset, 1).await?.pop())
}

pub async fn lindex(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    // Redis looks the key up before it reads the index.
    if !list(ctx, key).await? {
        return Ok(null());
    }
    let index = args::int(arg(a, 2))?;
    Ok(at(ctx, key, index).await?.map_or(null(), |(_, v)| bulk(v)))
}

pub async fn lset(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    if !list(ctx, key).await? {
        return fail("ERR no such key");
    }
    let index = args::int(arg(a, 2))?;
    let Some((pos, _)) = at(ctx, key, index).await? else {
        return fail("ERR index out of range");
    };
    ctx.execute(
        stmt("UPDATE hf_list SET value = $3 WHERE key = $1 AND pos = $2")
            .bind(key)
            .bind(pos)
            .bind(arg(a, 3)),
    )
    .await?;
    Ok(ok())
}

pub async fn lrem(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let count = args::int(arg(a, 2))?;
    let value = arg(a, 3);
    ctx.lock(&[key]).await?;
    if !list(ctx, key).await? {
        return Ok(int(0));
    }
    let order = if count < 0 { "DESC" } else { "ASC" };
    let positions: Vec<i64> = ctx
        .scalars(
            stmt(format!(
        "SELECT pos FROM hf_list WHERE key = $1 AND value = $2 ORDER BY pos {order} LIMIT $3"
    ))
            .bind(key)
            .bind(value)
            .bind(if count == 0 {
                i64::MAX
            } else {
                count.saturating_abs()
            }),
        )
        .await?;
    remove_at(ctx, key, &positions).await?;
    Ok(int(positions.len() as i64))
}

pub async fn ltrim(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (start, end) = (args::int(arg(a, 2))?, args::int(arg(a, 3))?);
    ctx.lock(&[key]).await?;
    if !list(ctx, key).await? {
        return Ok(ok());
    }
    let len = ctx.count(key, Kind::List).await?;
    match span(start, end, len) {
        None => {
            ctx.purge(key, Kind::List).await?;
        }
        Some((offset, count)) => {
            // The two bounds, each read from the nearer end, and two range deletes: the cost
            // is the elements removed, as in Redis, not the elements kept.
            let nearer = |index: i64| if index > len / 2 { index - len } else { index };
            let lo = at(ctx, key, nearer(offset)).await?;
            let hi = at(ctx, key, nearer(offset + count - 1)).await?;
            if let (Some((lo, _)), Some((hi, _))) = (lo, hi) {
                for (sql, pos) in [
                    ("DELETE FROM hf_list WHERE key = $1 AND pos < $2", lo),
                    ("DELETE FROM hf_list WHERE key = $1 AND pos > $2", hi),
                ] {
                    ctx.execute(stmt(sql).bind(key).bind(pos)).await?;
                }
            }
        }
    }
    Ok(ok())
}

/// `LEFT` or `RIGHT`: whether it names the head.
fn side(arg: &[u8]) -> Result<bool, Fail> {
    if args::is(arg, "LEFT") {
        Ok(true)
    } else if args::is(arg, "RIGHT") {
        Ok(false)
    } else {
        fail(SYNTAX)
    }
}

/// `LMOVE source destination LEFT|RIGHT LEFT|RIGHT`, and `RPOPLPUSH source destination`
/// (`sides` None: from the tail to the head).
pub async fn lmove(ctx: &mut Ctx<'_>, a: &[Bytes], sides: bool) -> Out {
    let (src, dst) = (arg(a, 1), arg(a, 2));
    let (from_head, to_head) = if sides {
        (side(arg(a, 3))?, side(arg(a, 4))?)
    } else {
        (false, true)
    };
    ctx.lock(&[src, dst]).await?;
    // The source first: absent, it answers nil whatever the destination holds.
    if !list(ctx, src).await? {
        return Ok(null());
    }
    list(ctx, dst).await?;
    let Some((pos, value)) = rows(ctx, src, !from_head, 0, 1).await?.pop() else {
        return Ok(null());
    };
    // Pushed before it is removed: moved onto the list it came from (a rotation), a lone
    // element never leaves the list empty, so the key is not dropped and keeps its expiry,
    // as in Redis.
    push_values(ctx, dst, to_head, std::slice::from_ref(&value)).await?;
    remove_at(ctx, src, &[pos]).await?;
    Ok(bulk(value))
}

/// `LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]`: from the first list that is not
/// empty, `[key, [elements]]`; nil when every one is.
pub async fn lmpop(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (keys, tail, count) = args::mpop_args(a, ["LEFT", "RIGHT"])?;
    let head = !tail;
    let all: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
    ctx.lock(&all).await?;
    for key in keys {
        if !list(ctx, key).await? {
            continue;
        }
        let taken = rows(ctx, key, !head, 0, count.unwrap_or(1)).await?;
        let positions: Vec<i64> = taken.iter().map(|(pos, _)| *pos).collect();
        remove_at(ctx, key, &positions).await?;
        let values = taken.into_iter().map(|(_, v)| bulk(v)).collect();
        return Ok(array(vec![bulk(key.clone()), array(values)]));
    }
    Ok(null())
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`: indices from the head,
/// the matches counted from the tail for a negative rank. Options may repeat (the last
/// counts), as in Redis.
pub async fn lpos(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (key, element) = (arg(a, 1), arg(a, 2));
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut i = 3;
    while i < a.len() {
        let (opt, value) = (arg(a, i), a.get(i + 1));
        match value {
            Some(v) if args::is(opt, "RANK") => {
                rank = args::int(v)?;
                if rank == 0 {
                    return fail(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                         second ... or use negative to start from the end of the list",
                    );
                }
            }
            // Not a number reads as negative, as Redis words it.
            Some(v) if args::is(opt, "COUNT") => match args::parse_i64(v) {
                Some(n) if n >= 0 => count = Some(n),
                _ => return fail("ERR COUNT can't be negative"),
            },
            Some(v) if args::is(opt, "MAXLEN") => match args::parse_i64(v) {
                Some(n) if n >= 0 => maxlen = n,
                _ => return fail("ERR MAXLEN can't be negative"),
            },
            _ => return fail(SYNTAX),
        }
        i += 2;
    }
    let none = || match count {
        Some(_) => array(Vec::new()),
        None => null(),
    };
    if !list(ctx, key).await? {
        return Ok(none());
    }
    let from_tail = rank < 0;
    let len = ctx.count(key, Kind::List).await?;
    let scanned = if maxlen == 0 { len } else { maxlen.min(len) };
    let values = rows(ctx, key, from_tail, 0, scanned).await?;
    let skip = rank.unsigned_abs().saturating_sub(1);
    let want = match count {
        Some(0) | None if count.is_some() => u64::MAX,
        None => 1,
        Some(n) => n.unsigned_abs(),
    };
    let mut seen = 0u64;
    let mut found = Vec::new();
    for (i, (_, value)) in values.iter().enumerate() {
        if value.as_ref() != element {
            continue;
        }
        seen += 1;
        if seen <= skip {
            continue;
        }
        let index = if from_tail {
            len - 1 - i as i64
        } else {
            i as i64
        };
        found.push(index);
        if found.len() as u64 >= want {
            break;
        }
    }
    Ok(match count {
        Some(_) => array(found.into_iter().map(int).collect()),
        None => found.first().map_or(null(), |at| int(*at)),
    })
}

/// Positions shifted out of the way before an insertion are first moved this far, so the
/// shift never meets a position still taken (a list's positions stay far inside it: one
/// per push).
const SHIFT: i64 = 1 << 40;

/// `LINSERT key BEFORE|AFTER pivot element`: the new length, -1 without the pivot, 0
/// without the list. The elements on the tail side of the new one move one place.
pub async fn linsert(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let before = if args::is(arg(a, 2), "BEFORE") {
        true
    } else if args::is(arg(a, 2), "AFTER") {
        false
    } else {
        return fail(SYNTAX);
    };
    ctx.lock(&[key]).await?;
    if !list(ctx, key).await? {
        return Ok(int(0));
    }
    let pivot: Option<i64> = ctx
        .scalar_opt(
            stmt("SELECT pos FROM hf_list WHERE key = $1 AND value = $2 ORDER BY pos LIMIT 1")
                .bind(key)
                .bind(arg(a, 3)),
        )
        .await?;
    let Some(pivot) = pivot else {
        return Ok(int(-1));
    };
    // The new element takes the first place past the pivot's side; what was there and
    // after moves one up (through a far position, so no two rows ever share one).
    let at = if before { pivot } else { pivot + 1 };
    ctx.execute(
        stmt("UPDATE hf_list SET pos = pos + $3 WHERE key = $1 AND pos >= $2")
            .bind(key)
            .bind(at)
            .bind(SHIFT),
    )
    .await?;
    ctx.execute(
        stmt("UPDATE hf_list SET pos = pos - $3 + 1 WHERE key = $1 AND pos >= $2")
            .bind(key)
            .bind(at + SHIFT)
            .bind(SHIFT),
    )
    .await?;
    ctx.execute(
        stmt("INSERT INTO hf_list (key, pos, value) VALUES ($1, $2, $3)")
            .bind(key)
            .bind(at)
            .bind(arg(a, 4)),
    )
    .await?;
    Ok(int(ctx.count(key, Kind::List).await?))
}
