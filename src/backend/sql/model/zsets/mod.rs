//! Sorted-set commands over `hf_zset`: ordered by score, then by member bytes, as Redis
//! orders equal scores.
//!
//! This file has the commands on members (add, score, rank, remove, pop, draw, scan) and
//! what the others share; `ranges`: ranges by score, by rank and by member (`ZRANGE` and its
//! kin, counts and removals); `algebra`: `ZINTER`, `ZUNION`, `ZDIFF`, their `STORE` forms
//! and `ZINTERCARD`.

pub(super) mod algebra;
pub(super) mod ranges;

use super::args::{self, is};
use super::store::*;
use super::strings::arg;
use crate::backend::Proto;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

pub(crate) async fn zset(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Fail> {
    Ok(ctx.typed(key, Kind::ZSet).await?.is_some())
}

pub(crate) async fn score(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    member: &[u8],
) -> Result<Option<f64>, Fail> {
    let s: Option<f64> = ctx
        .scalar_opt(
            stmt("SELECT score FROM hf_zset WHERE key = $1 AND member = $2")
                .bind(key)
                .bind(member),
        )
        .await?;
    Ok(s)
}

async fn put(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8], s: f64, new: bool) -> Result<(), Fail> {
    let sql = if new {
        "INSERT INTO hf_zset (key, member, score) VALUES ($1, $2, $3)"
    } else {
        "UPDATE hf_zset SET score = $3 WHERE key = $1 AND member = $2"
    };
    ctx.execute(stmt(sql).bind(key).bind(member).bind(s))
        .await?;
    Ok(())
}

/// Replaces whatever `dest` held with a sorted set of `pairs`; none deletes `dest`.
pub(crate) async fn replace_with(
    ctx: &mut Ctx<'_>,
    dest: &[u8],
    pairs: &[(Bytes, f64)],
) -> Result<(), Fail> {
    ctx.delete(dest).await?;
    if !pairs.is_empty() {
        ctx.create(dest, Kind::ZSet, None).await?;
        for (m, s) in pairs {
            put(ctx, dest, m, *s, true).await?;
        }
    }
    Ok(())
}

const NAN_RESULT: &str = "ERR resulting score is not a number (NaN)";

pub async fn zadd(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (mut nx, mut xx, mut ch, mut incr, mut gt, mut lt) =
        (false, false, false, false, false, false);
    let mut at = 2;
    while at < a.len() {
        let opt = arg(a, at);
        if is(opt, "NX") {
            nx = true;
        } else if is(opt, "XX") {
            xx = true;
        } else if is(opt, "CH") {
            ch = true;
        } else if is(opt, "INCR") {
            incr = true;
        } else if is(opt, "GT") {
            gt = true;
        } else if is(opt, "LT") {
            lt = true;
        } else {
            break;
        }
        at += 1;
    }
    let rest = a.get(at..).unwrap_or_default();
    if rest.is_empty() || rest.len() % 2 != 0 {
        return fail(SYNTAX);
    }
    if nx && xx {
        return fail("ERR XX and NX options at the same time are not compatible");
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return fail("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && rest.len() > 2 {
        return fail("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for pair in rest.chunks(2) {
        pairs.push((args::float(arg(pair, 0))?, arg(pair, 1)));
    }
    ctx.lock(&[key]).await?;
    let exists = zset(ctx, key).await?;
    if !exists && xx {
        return Ok(if incr { null() } else { int(0) });
    }
    ctx.create(key, Kind::ZSet, None).await?;
    let (mut added, mut updated, mut processed) = (0, 0, 0);
    let mut last = 0.0;
    for (mut s, member) in pairs {
        match score(ctx, key, member).await? {
            Some(current) => {
                if nx {
                    continue;
                }
                if incr {
                    s += current;
                    if s.is_nan() {
                        return fail(NAN_RESULT);
                    }
                }
                if (lt && s >= current) || (gt && s <= current) {
                    continue;
                }
                last = s;
                processed += 1;
                if s != current {
                    put(ctx, key, member, s, false).await?;
                    updated += 1;
                }
            }
            None if !xx => {
                put(ctx, key, member, s, true).await?;
                added += 1;
                processed += 1;
                last = s;
            }
            None => {}
        }
    }
    if incr {
        return Ok(if processed > 0 { double(last) } else { null() });
    }
    Ok(int(if ch { added + updated } else { added }))
}

pub async fn zincrby(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let by = args::float(arg(a, 2))?;
    let member = arg(a, 3);
    ctx.lock(&[key]).await?;
    zset(ctx, key).await?;
    ctx.create(key, Kind::ZSet, None).await?;
    let current = score(ctx, key, member).await?;
    let next = current.unwrap_or(0.0) + by;
    if next.is_nan() {
        return fail(NAN_RESULT);
    }
    put(ctx, key, member, next, current.is_none()).await?;
    Ok(double(next))
}

pub async fn zrem(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    ctx.remove_named(a, Kind::ZSet).await
}

pub async fn zscore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    if !zset(ctx, key).await? {
        return Ok(null());
    }
    Ok(score(ctx, key, arg(a, 2)).await?.map_or(null(), double))
}

pub async fn zmscore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let exists = zset(ctx, key).await?;
    let mut out = Vec::new();
    for m in a.iter().skip(2) {
        let s = if exists {
            score(ctx, key, m).await?
        } else {
            None
        };
        out.push(s.map_or(null(), double));
    }
    Ok(array(out))
}

pub async fn zcard(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    Ok(int(ctx.len(arg(a, 1), Kind::ZSet).await?))
}

/// ZRANK and ZREVRANK.
pub async fn zrank(ctx: &mut Ctx<'_>, a: &[Bytes], rev: bool) -> Out {
    let (key, member) = (arg(a, 1), arg(a, 2));
    if !zset(ctx, key).await? {
        return Ok(null());
    }
    let Some(s) = score(ctx, key, member).await? else {
        return Ok(null());
    };
    // The members before it in the score index, counted: O(rank) where Redis's is O(log N),
    // as neither database's B-trees keep subtree counts (docs/sql.md, "At any size").
    let sql = if rev {
        "SELECT COUNT(*) FROM hf_zset WHERE key = $1 AND (score, member) > ($2, $3)"
    } else {
        "SELECT COUNT(*) FROM hf_zset WHERE key = $1 AND (score, member) < ($2, $3)"
    };
    let n: i64 = ctx.scalar(stmt(sql).bind(key).bind(s).bind(member)).await?;
    Ok(int(n))
}

/// The (member, score) rows of ranks `start..=end` (Redis's negative indices), in order.
async fn by_rank(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    start: i64,
    end: i64,
    rev: bool,
) -> Result<Vec<(Bytes, f64)>, Fail> {
    let len = ctx.count(key, Kind::ZSet).await?;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let end = if end < 0 { end + len } else { end };
    if start > end || start >= len {
        return Ok(Vec::new());
    }
    let end = end.min(len - 1);
    let (offset, flip) = nearer_end(start, end, len);
    let order = if rev != flip { DESC } else { ASC };
    let mut rows = ctx
        .all(
            stmt(format!(
        "SELECT member, score FROM hf_zset WHERE key = $1 ORDER BY {order} LIMIT $2 OFFSET $3"
    ))
            .bind(key)
            .bind(end - start + 1)
            .bind(offset),
        )
        .await?;
    if flip {
        rows.reverse();
    }
    rows.iter()
        .map(|row| Ok((bytes_at(row, 0)?, row.try_get(1)?)))
        .collect()
}

/// A sorted set's order in the score index, and its reverse.
pub(super) const ASC: &str = "score, member";
pub(super) const DESC: &str = "score DESC, member DESC";

/// Removes and returns up to `count` members from the low (or high) end.
async fn pop_end(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    max: bool,
    count: i64,
) -> Result<Vec<(Bytes, f64)>, Fail> {
    if count <= 0 {
        return Ok(Vec::new());
    }
    let taken = by_rank(ctx, key, 0, count.saturating_sub(1), max).await?;
    let members: Vec<Bytes> = taken.iter().map(|(m, _)| m.clone()).collect();
    if !members.is_empty() {
        ctx.remove(key, Kind::ZSet, &members).await?;
    }
    Ok(taken)
}

/// (member, score) pairs as `[m, s]` arrays (RESP3, or always when `nested`), else flat.
fn pairs_reply(ctx: &Ctx<'_>, pairs: Vec<(Bytes, f64)>, nested: bool) -> Frame {
    let nested = nested || ctx.proto == Proto::Resp3;
    let mut out = Vec::with_capacity(pairs.len() * 2);
    for (m, s) in pairs {
        if nested {
            out.push(array(vec![bulk(m), double(s)]));
        } else {
            out.push(bulk(m));
            out.push(double(s));
        }
    }
    array(out)
}

/// `ZPOPMIN` / `ZPOPMAX key [count]`
pub async fn zpop(ctx: &mut Ctx<'_>, a: &[Bytes], max: bool) -> Out {
    let key = arg(a, 1);
    let count = match a.get(2) {
        None => None,
        Some(c) => match args::parse_i64(c) {
            Some(n) if n >= 0 => Some(n),
            _ => return fail("ERR value is out of range, must be positive"),
        },
    };
    if a.len() > 3 {
        return fail(SYNTAX);
    }
    ctx.lock(&[key]).await?;
    if !zset(ctx, key).await? {
        return Ok(array(Vec::new()));
    }
    let taken = pop_end(ctx, key, max, count.unwrap_or(1)).await?;
    Ok(match count {
        // One pair, flat, in either protocol.
        None => {
            let mut out = Vec::with_capacity(2);
            for (m, s) in taken {
                out.push(bulk(m));
                out.push(double(s));
            }
            array(out)
        }
        Some(_) => pairs_reply(ctx, taken, false),
    })
}

/// `ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]`: from the first sorted set that is
/// not empty, `[key, [[member, score], ...]]`; nil when every one is.
pub async fn zmpop(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (keys, max, count) = args::mpop_args(a, ["MIN", "MAX"])?;
    let all: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
    ctx.lock(&all).await?;
    for key in keys {
        if !zset(ctx, key).await? {
            continue;
        }
        let taken = pop_end(ctx, key, max, count.unwrap_or(1)).await?;
        return Ok(array(vec![
            bulk(key.clone()),
            pairs_reply(ctx, taken, true),
        ]));
    }
    Ok(null())
}

/// The score-member pairs of a plain `ZADD` (its arguments after the key: no option, every
/// score a number); None for any other, which answers on its own (an option, an odd count,
/// a score that does not parse).
pub fn plain_zadd(rest: &[Bytes]) -> Option<Vec<(f64, &[u8])>> {
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return None;
    }
    rest.chunks(2)
        .map(|pair| Some((args::parse_f64(pair.first()?)?, pair.get(1)?.as_ref())))
        .collect()
}

/// A run of plain `ZADD`s (`plain_zadd`; key, then the arguments after it), written by a few
/// multi-row statements per [`STATEMENT_ROWS`] members instead of a score read and an upsert
/// per member: the members new to their sorted set inserted (and counted), then the others'
/// scores moved, each member to the last score the run gives it. Each command's reply: the
/// members it added (one named by two commands is the first's), or None when its key holds
/// another kind.
pub async fn zadd_run(
    ctx: &mut Ctx<'_>,
    run: &[(&[u8], &[Bytes])],
) -> Result<Vec<Option<i64>>, Fail> {
    let keys: Vec<&[u8]> = run.iter().map(|(key, _)| *key).collect();
    let live = ctx.collections(&keys, Kind::ZSet).await?;
    let wrong = |key: &[u8]| live.get(key).is_some_and(|kind| *kind != Kind::ZSet);
    // Each member once, with its last score, in the order first named.
    let mut order: Vec<(&[u8], &[u8])> = Vec::new();
    let mut last: std::collections::HashMap<(&[u8], &[u8]), f64> = Default::default();
    for (key, rest) in run.iter().filter(|(key, _)| !wrong(key)) {
        for (score, member) in plain_zadd(rest).unwrap_or_default() {
            if last.insert((*key, member), score).is_none() {
                order.push((*key, member));
            }
        }
    }
    let mut added: std::collections::HashSet<(Vec<u8>, Vec<u8>)> = Default::default();
    for chunk in order.chunks(STATEMENT_ROWS) {
        ctx.wrote = true;
        let dialect = ctx.dialect;
        let inserted = member_rows(dialect, chunk, &last, "DO NOTHING RETURNING key, member");
        for row in ctx.all(inserted).await? {
            added.insert((row.try_get(0)?, row.try_get(1)?));
        }
        let known: Vec<(&[u8], &[u8])> = chunk
            .iter()
            .copied()
            .filter(|(key, member)| !added.contains(&(key.to_vec(), member.to_vec())))
            .collect();
        if !known.is_empty() {
            let moved = member_rows(
                dialect,
                &known,
                &last,
                "DO UPDATE SET score = excluded.score WHERE hf_zset.score <> excluded.score",
            );
            ctx.execute(moved).await?;
        }
    }
    Ok(run
        .iter()
        .map(|(key, rest)| {
            (!wrong(key)).then(|| {
                rest.chunks(2)
                    .filter_map(|pair| pair.get(1))
                    .filter(|m| added.remove(&(key.to_vec(), m.to_vec())))
                    .count() as i64
            })
        })
        .collect())
}

/// `zadd_run`'s statement over `pairs`, each with its score in `scores`, `conflict` its
/// `ON CONFLICT` action. SQLite's list is padded with its last row (a few sizes, each
/// prepared once); PostgreSQL's is not (an upsert may not name a row twice).
fn member_rows<'q>(
    dialect: Dialect,
    pairs: &[(&'q [u8], &'q [u8])],
    scores: &std::collections::HashMap<(&[u8], &[u8]), f64>,
    conflict: &str,
) -> Stmt<'q> {
    let len = upsert_rows(dialect, pairs.len());
    let sql = format!(
        "INSERT INTO hf_zset (key, member, score) VALUES {} ON CONFLICT (key, member) {conflict}",
        value_rows(dialect, len, 3)
    );
    let mut query = stmt(sql);
    if let Some(&end) = pairs.last() {
        for &(key, member) in pairs.iter().chain(std::iter::repeat(&end)).take(len) {
            let score = scores.get(&(key, member)).copied().unwrap_or_default();
            query = query.bind(key).bind(member).bind(score);
        }
    }
    query
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`: distinct members for a positive count (all of
/// them when it reaches the size), with repeats for a negative one.
pub async fn zrandmember(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    use rand::seq::SliceRandom;
    let key = arg(a, 1);
    let (count, withscores) = args::rand_args(a, "WITHSCORES")?;
    let all = if zset(ctx, key).await? {
        by_rank(ctx, key, 0, -1, false).await?
    } else {
        Vec::new()
    };
    let mut rng = rand::thread_rng();
    let Some(count) = count else {
        return Ok(bulk_or_null(all.choose(&mut rng).map(|(m, _)| m.clone())));
    };
    let chosen = super::draws::from_whole(all, count)?;
    if withscores {
        return Ok(pairs_reply(ctx, chosen, false));
    }
    Ok(array(chosen.into_iter().map(|(m, _)| bulk(m)).collect()))
}

/// Members past which `ZSCAN` answers in pages; a smaller sorted set comes whole, in score
/// order, with cursor 0, as Redis answers for one it keeps compactly.
const SCAN_WHOLE: usize = 128;

/// `ZSCAN key cursor [MATCH pattern] [COUNT count]`: past [`SCAN_WHOLE`] members the cursor
/// is an offset in (score, member) order, so a member that moves may be seen twice or not at
/// all, as Redis allows for elements changed during a scan.
pub async fn zscan(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (cursor, pattern, count) = args::scan_args(a)?;
    if !zset(ctx, key).await? {
        return Ok(array(vec![
            bulk(Bytes::from_static(b"0")),
            array(Vec::new()),
        ]));
    }
    let len = ctx.count(key, Kind::ZSet).await?;
    let (page, next) = if len <= SCAN_WHOLE as i64 {
        (by_rank(ctx, key, 0, -1, false).await?, 0)
    } else {
        let start = i64::try_from(cursor).unwrap_or(i64::MAX);
        let step = i64::try_from(count.min(100_000)).unwrap_or(100_000);
        let page = by_rank(ctx, key, start, start.saturating_add(step - 1), false).await?;
        let end = start.saturating_add(step);
        (page, if end < len { end } else { 0 })
    };
    let mut items = Vec::with_capacity(page.len() * 2);
    for (m, s) in page {
        if pattern.is_none_or(|p| args::glob(p, &m)) {
            items.push(bulk(m));
            items.push(bulk(Bytes::from(crate::resp::format_double(
                s,
                crate::resp::DoubleStyle::G17,
            ))));
        }
    }
    Ok(array(vec![
        bulk(Bytes::from(next.to_string())),
        array(items),
    ]))
}
