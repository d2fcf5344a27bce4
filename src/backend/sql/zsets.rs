//! Sorted-set commands over `hf_zset`: ordered by score, then by member bytes, as Redis
//! orders equal scores.

use super::args::{self, is};
use super::store::*;
use super::strings::arg;
use crate::backend::Proto;
use bytes::Bytes;
use sqlx::Row;

async fn zset(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Fail> {
    Ok(ctx.typed(key, Kind::ZSet).await?.is_some())
}

async fn score(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) -> Result<Option<f64>, Fail> {
    let s: Option<f64> =
        sqlx::query_scalar("SELECT score FROM hf_zset WHERE key = $1 AND member = $2")
            .bind(key)
            .bind(member)
            .fetch_optional(&mut *ctx.conn)
            .await?;
    Ok(s)
}

async fn put(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8], s: f64, new: bool) -> Result<(), Fail> {
    let sql = if new {
        "INSERT INTO hf_zset (key, member, score) VALUES ($1, $2, $3)"
    } else {
        "UPDATE hf_zset SET score = $3 WHERE key = $1 AND member = $2"
    };
    ctx.exec(sqlx::query(sql).bind(key).bind(member).bind(s))
        .await?;
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
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    Ok(int(ctx
        .remove(key, Kind::ZSet, a.get(2..).unwrap_or_default())
        .await?))
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
    let key = arg(a, 1);
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    Ok(int(ctx.count(key, Kind::ZSet).await?))
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
    let sql = if rev {
        "SELECT COUNT(*) FROM hf_zset WHERE key = $1 AND (score > $2 OR (score = $2 AND member > $3))"
    } else {
        "SELECT COUNT(*) FROM hf_zset WHERE key = $1 AND (score < $2 OR (score = $2 AND member < $3))"
    };
    let n: i64 = sqlx::query_scalar(sql)
        .bind(key)
        .bind(s)
        .bind(member)
        .fetch_one(&mut *ctx.conn)
        .await?;
    Ok(int(n))
}

/// One end of a score range: `(1.5` is exclusive.
#[derive(Clone, Copy)]
struct Bound {
    value: f64,
    exclusive: bool,
}

fn bound(arg: &[u8]) -> Option<Bound> {
    let (exclusive, text) = match arg.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, arg),
    };
    // strtod's rules, but an empty string is not a number.
    args::parse_f64(text).map(|value| Bound { value, exclusive })
}

fn score_range(min: &[u8], max: &[u8]) -> Result<(Bound, Bound), Fail> {
    match (bound(min), bound(max)) {
        (Some(lo), Some(hi)) => Ok((lo, hi)),
        _ => fail("ERR min or max is not a float"),
    }
}

fn score_where(lo: Bound, hi: Bound) -> String {
    format!(
        "score {} $2 AND score {} $3",
        if lo.exclusive { ">" } else { ">=" },
        if hi.exclusive { "<" } else { "<=" }
    )
}

pub async fn zcount(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (lo, hi) = score_range(arg(a, 2), arg(a, 3))?;
    let key = arg(a, 1);
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM hf_zset WHERE key = $1 AND {}",
        score_where(lo, hi)
    ))
    .bind(key)
    .bind(lo.value)
    .bind(hi.value)
    .fetch_one(&mut *ctx.conn)
    .await?;
    Ok(int(n))
}

/// Which form of ZRANGE is being served.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `ZRANGE key min max [BYSCORE] [REV] [LIMIT o c] [WITHSCORES]`
    Range,
    /// `ZREVRANGE key start stop [WITHSCORES]`
    RevRange,
    /// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT o c]`
    ByScore,
    /// `ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT o c]`
    RevByScore,
}

pub async fn zrange(ctx: &mut Ctx<'_>, a: &[Bytes], form: Form) -> Out {
    let key = arg(a, 1);
    let mut by_score = matches!(form, Form::ByScore | Form::RevByScore);
    let mut rev = matches!(form, Form::RevRange | Form::RevByScore);
    let (mut withscores, mut limit) = (false, None);
    let mut j = 4;
    while j < a.len() {
        let opt = arg(a, j);
        let left = a.len() - j - 1;
        if is(opt, "WITHSCORES") {
            withscores = true;
        } else if is(opt, "LIMIT") && left >= 2 {
            let offset = args::int(arg(a, j + 1))?;
            let count = args::int(arg(a, j + 2))?;
            limit = Some((offset, count));
            j += 2;
        } else if form == Form::Range && is(opt, "BYSCORE") {
            by_score = true;
        } else if form == Form::Range && is(opt, "BYLEX") {
            return fail("ERR holdfast: ZRANGE BYLEX is not served by SQL backends");
        } else if form == Form::Range && is(opt, "REV") {
            rev = true;
        } else {
            return fail(SYNTAX);
        }
        j += 1;
    }
    // LIMIT 0 -1 is no limit at all, which Redis accepts with a rank range too.
    if limit.is_some_and(|l| l != (0, -1)) && !by_score {
        return fail(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    // The reversed forms name the range from its top.
    let (first, second) = if rev && by_score {
        (arg(a, 3), arg(a, 2))
    } else {
        (arg(a, 2), arg(a, 3))
    };
    let order = if rev {
        "score DESC, member DESC"
    } else {
        "score, member"
    };
    let rows = if by_score {
        let (lo, hi) = score_range(first, second)?;
        if !zset(ctx, key).await? {
            return Ok(array(Vec::new()));
        }
        let (offset, count) = limit.unwrap_or((0, -1));
        if offset < 0 {
            return Ok(array(Vec::new()));
        }
        let count = if count < 0 { i64::MAX } else { count };
        sqlx::query(&format!(
            "SELECT member, score FROM hf_zset WHERE key = $1 AND {} ORDER BY {order} LIMIT $4 OFFSET $5",
            score_where(lo, hi)
        ))
        .bind(key)
        .bind(lo.value)
        .bind(hi.value)
        .bind(count)
        .bind(offset)
        .fetch_all(&mut *ctx.conn)
        .await?
    } else {
        let (mut start, mut end) = (args::int(first)?, args::int(second)?);
        if !zset(ctx, key).await? {
            return Ok(array(Vec::new()));
        }
        let len = ctx.count(key, Kind::ZSet).await?;
        if start < 0 {
            start += len;
        }
        if end < 0 {
            end += len;
        }
        start = start.max(0);
        if start > end || start >= len {
            return Ok(array(Vec::new()));
        }
        end = end.min(len - 1);
        sqlx::query(&format!(
            "SELECT member, score FROM hf_zset WHERE key = $1 ORDER BY {order} LIMIT $2 OFFSET $3"
        ))
        .bind(key)
        .bind(end - start + 1)
        .bind(start)
        .fetch_all(&mut *ctx.conn)
        .await?
    };
    let mut out = Vec::with_capacity(rows.len() * if withscores { 2 } else { 1 });
    for row in &rows {
        let member = bulk(bytes_at(row, 0)?);
        if !withscores {
            out.push(member);
            continue;
        }
        let s: f64 = row.try_get(1)?;
        match ctx.proto {
            Proto::Resp2 => {
                out.push(member);
                out.push(double(s));
            }
            Proto::Resp3 => out.push(array(vec![member, double(s)])),
        }
    }
    Ok(array(out))
}

pub async fn zremrangebyscore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (lo, hi) = score_range(arg(a, 2), arg(a, 3))?;
    ctx.lock(&[key]).await?;
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    let done = ctx
        .exec(
            sqlx::query(&format!(
                "DELETE FROM hf_zset WHERE key = $1 AND {}",
                score_where(lo, hi)
            ))
            .bind(key)
            .bind(lo.value)
            .bind(hi.value),
        )
        .await?;
    ctx.drop_if_empty(key, Kind::ZSet).await?;
    Ok(int(done.rows_affected() as i64))
}
