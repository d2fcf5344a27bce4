//! Sorted-set commands over `hf_zset`: ordered by score, then by member bytes, as Redis
//! orders equal scores.

use super::args::{self, is};
use super::store::*;
use super::strings::arg;
use crate::backend::Proto;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
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
    let (mut withscores, mut limit, mut by_lex) = (false, None, false);
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
            by_lex = true;
        } else if form == Form::Range && is(opt, "REV") {
            rev = true;
        } else {
            return fail(SYNTAX);
        }
        j += 1;
    }
    if by_score && by_lex {
        return fail(SYNTAX);
    }
    if by_lex && withscores {
        return fail("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    if by_lex {
        let (first, second) = if rev {
            (arg(a, 3), arg(a, 2))
        } else {
            (arg(a, 2), arg(a, 3))
        };
        return lex_range(ctx, key, first, second, rev, limit).await;
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

/// One end of a lexicographic range: `-`, `+`, `[a` (inclusive), `(a` (exclusive).
#[derive(Clone, Debug, PartialEq)]
enum Lex<'a> {
    Min,
    Max,
    At(&'a [u8], bool),
}

fn lex(arg: &[u8]) -> Option<Lex<'_>> {
    match arg.split_first() {
        Some((b'-', [])) => Some(Lex::Min),
        Some((b'+', [])) => Some(Lex::Max),
        Some((b'[', rest)) => Some(Lex::At(rest, true)),
        Some((b'(', rest)) => Some(Lex::At(rest, false)),
        _ => None,
    }
}

/// The bounds, or Redis's error; None inside when the range is empty whatever the set holds.
fn lex_range_of<'a>(min: &'a [u8], max: &'a [u8]) -> Result<Option<(Lex<'a>, Lex<'a>)>, Fail> {
    match (lex(min), lex(max)) {
        (Some(Lex::Max), Some(_)) | (Some(_), Some(Lex::Min)) => Ok(None),
        (Some(lo), Some(hi)) => Ok(Some((lo, hi))),
        _ => fail("ERR min or max not valid string range item"),
    }
}

/// `member` conditions for a lexicographic range, with the values to bind from `$2` on.
fn lex_where<'a>(lo: &Lex<'a>, hi: &Lex<'a>) -> (String, Vec<&'a [u8]>) {
    let mut clause = String::new();
    let mut binds = Vec::new();
    for (bound, above) in [(lo, true), (hi, false)] {
        if let Lex::At(value, inclusive) = bound {
            binds.push(*value);
            let op = match (above, inclusive) {
                (true, true) => ">=",
                (true, false) => ">",
                (false, true) => "<=",
                (false, false) => "<",
            };
            clause.push_str(&format!(" AND member {op} ${}", binds.len() + 1));
        }
    }
    (clause, binds)
}

/// `ZRANGE … BYLEX`, `ZRANGEBYLEX`, `ZREVRANGEBYLEX` once the options are read.
async fn lex_range(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    min: &[u8],
    max: &[u8],
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Out {
    let Some((lo, hi)) = lex_range_of(min, max)? else {
        zset(ctx, key).await?;
        return Ok(array(Vec::new()));
    };
    if !zset(ctx, key).await? {
        return Ok(array(Vec::new()));
    }
    let (offset, count) = limit.unwrap_or((0, -1));
    if offset < 0 {
        return Ok(array(Vec::new()));
    }
    let count = if count < 0 { i64::MAX } else { count };
    let (clause, binds) = lex_where(&lo, &hi);
    let order = if rev {
        "score DESC, member DESC"
    } else {
        "score, member"
    };
    let n = binds.len();
    let sql = format!(
        "SELECT member FROM hf_zset WHERE key = $1{clause} ORDER BY {order} LIMIT ${} OFFSET ${}",
        n + 2,
        n + 3
    );
    let mut query = sqlx::query(&sql).bind(key);
    for b in binds {
        query = query.bind(b);
    }
    let rows = query
        .bind(count)
        .bind(offset)
        .fetch_all(&mut *ctx.conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push(bulk(bytes_at(row, 0)?));
    }
    Ok(array(out))
}

/// `ZRANGEBYLEX key min max [LIMIT offset count]` and `ZREVRANGEBYLEX key max min [LIMIT …]`.
pub async fn zrangebylex(ctx: &mut Ctx<'_>, a: &[Bytes], rev: bool) -> Out {
    let key = arg(a, 1);
    let mut limit = None;
    let mut j = 4;
    while j < a.len() {
        if is(arg(a, j), "LIMIT") && a.len() - j > 2 {
            limit = Some((args::int(arg(a, j + 1))?, args::int(arg(a, j + 2))?));
            j += 3;
        } else if is(arg(a, j), "WITHSCORES") {
            return fail("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
        } else {
            return fail(SYNTAX);
        }
    }
    let (min, max) = if rev {
        (arg(a, 3), arg(a, 2))
    } else {
        (arg(a, 2), arg(a, 3))
    };
    lex_range(ctx, key, min, max, rev, limit).await
}

/// `ZLEXCOUNT key min max`
pub async fn zlexcount(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let Some((lo, hi)) = lex_range_of(arg(a, 2), arg(a, 3))? else {
        zset(ctx, key).await?;
        return Ok(int(0));
    };
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    let (clause, binds) = lex_where(&lo, &hi);
    let sql = format!("SELECT COUNT(*) FROM hf_zset WHERE key = $1{clause}");
    let mut query = sqlx::query_scalar(&sql).bind(key);
    for b in binds {
        query = query.bind(b);
    }
    let n: i64 = query.fetch_one(&mut *ctx.conn).await?;
    Ok(int(n))
}

/// `ZREMRANGEBYLEX key min max`
pub async fn zremrangebylex(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let range = lex_range_of(arg(a, 2), arg(a, 3))?;
    ctx.lock(&[key]).await?;
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    let Some((lo, hi)) = range else {
        return Ok(int(0));
    };
    let (clause, binds) = lex_where(&lo, &hi);
    let sql = format!("DELETE FROM hf_zset WHERE key = $1{clause}");
    let mut query = sqlx::query(&sql).bind(key);
    for b in binds {
        query = query.bind(b);
    }
    let done = ctx.exec(query).await?;
    ctx.drop_if_empty(key, Kind::ZSet).await?;
    Ok(int(done.rows_affected() as i64))
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
    let order = if rev {
        "score DESC, member DESC"
    } else {
        "score, member"
    };
    let rows = sqlx::query(&format!(
        "SELECT member, score FROM hf_zset WHERE key = $1 ORDER BY {order} LIMIT $2 OFFSET $3"
    ))
    .bind(key)
    .bind(end - start + 1)
    .bind(start)
    .fetch_all(&mut *ctx.conn)
    .await?;
    rows.iter()
        .map(|row| Ok((bytes_at(row, 0)?, row.try_get(1)?)))
        .collect()
}

/// `ZREMRANGEBYRANK key start stop`
pub async fn zremrangebyrank(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (start, end) = (args::int(arg(a, 2))?, args::int(arg(a, 3))?);
    ctx.lock(&[key]).await?;
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    let gone: Vec<Bytes> = by_rank(ctx, key, start, end, false)
        .await?
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    Ok(int(ctx.remove(key, Kind::ZSet, &gone).await?))
}

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
    let chosen = draw(all, count)?;
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
        if pattern.map_or(true, |p| args::glob(p, &m)) {
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

/// How `ZUNION`/`ZINTER` combine the scores of a member found in several inputs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Sorted-set algebra.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ZAlgebra {
    Inter,
    Union,
    Diff,
}

/// An input of the algebra: a sorted set, or a set (every member scores 1); WRONGTYPE
/// otherwise, empty when absent.
async fn input(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Bytes, f64)>, Fail> {
    match ctx.meta(key).await?.map(|m| m.kind) {
        None => Ok(Vec::new()),
        Some(Kind::ZSet) => by_rank(ctx, key, 0, -1, false).await,
        Some(Kind::Set) => {
            let rows = sqlx::query("SELECT member FROM hf_set WHERE key = $1")
                .bind(key)
                .fetch_all(&mut *ctx.conn)
                .await?;
            rows.iter()
                .map(|row| Ok((bytes_at(row, 0)?, 1.0)))
                .collect()
        }
        Some(_) => fail(WRONGTYPE),
    }
}

/// What follows `numkeys key ...` in the algebra's commands.
struct AlgebraArgs {
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
    limit: i64,
}

/// Reads `numkeys key ... [WEIGHTS …] [AGGREGATE …] [WITHSCORES] [LIMIT n]` from `at` (the
/// numkeys), as Redis does for `command`: the keys' kinds are checked before the options.
async fn algebra_args(
    ctx: &mut Ctx<'_>,
    a: &[Bytes],
    at: usize,
    op: ZAlgebra,
    command: &str,
    store: bool,
    card: bool,
) -> Result<(AlgebraArgs, Vec<Vec<(Bytes, f64)>>), Fail> {
    let n = args::int(arg(a, at))?;
    if n < 1 {
        return fail(format!(
            "ERR at least 1 input key is needed for '{command}' command"
        ));
    }
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n > a.len() - at - 1 {
        return fail(SYNTAX);
    }
    let mut inputs = Vec::with_capacity(n);
    for key in &a[at + 1..at + 1 + n] {
        inputs.push(input(ctx, key).await?);
    }
    let mut parsed = AlgebraArgs {
        weights: vec![1.0; n],
        aggregate: Aggregate::Sum,
        withscores: false,
        limit: 0,
    };
    let mut j = at + 1 + n;
    while j < a.len() {
        let remaining = a.len() - j;
        let opt = arg(a, j);
        if op != ZAlgebra::Diff && !card && remaining > n && is(opt, "WEIGHTS") {
            for i in 0..n {
                parsed.weights[i] = match args::parse_f64(arg(a, j + 1 + i)) {
                    Some(w) => w,
                    None => return fail("ERR weight value is not a float"),
                };
            }
            j += 1 + n;
        } else if op != ZAlgebra::Diff && !card && remaining >= 2 && is(opt, "AGGREGATE") {
            let how = arg(a, j + 1);
            parsed.aggregate = if is(how, "SUM") {
                Aggregate::Sum
            } else if is(how, "MIN") {
                Aggregate::Min
            } else if is(how, "MAX") {
                Aggregate::Max
            } else {
                return fail(SYNTAX);
            };
            j += 2;
        } else if !store && !card && is(opt, "WITHSCORES") {
            parsed.withscores = true;
            j += 1;
        } else if card && remaining >= 2 && is(opt, "LIMIT") {
            parsed.limit = match args::int(arg(a, j + 1))? {
                l if l < 0 => return fail("ERR LIMIT can't be negative"),
                l => l,
            };
            j += 2;
        } else {
            return fail(SYNTAX);
        }
    }
    Ok((parsed, inputs))
}

/// The algebra's result, in (score, member) order.
fn combine(
    op: ZAlgebra,
    inputs: Vec<Vec<(Bytes, f64)>>,
    weights: &[f64],
    aggregate: Aggregate,
) -> Vec<(Bytes, f64)> {
    use std::collections::HashMap;
    let weigh = |s: f64, w: f64| {
        let v = s * w;
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let fold = |acc: f64, v: f64| {
        let r = match aggregate {
            Aggregate::Sum => acc + v,
            Aggregate::Min => acc.min(v),
            Aggregate::Max => acc.max(v),
        };
        // inf + -inf: Redis keeps 0.
        if r.is_nan() {
            0.0
        } else {
            r
        }
    };
    let mut inputs = inputs.into_iter().zip(weights.iter().copied());
    let Some((first, w0)) = inputs.next() else {
        return Vec::new();
    };
    let mut acc: HashMap<Bytes, f64> = first
        .into_iter()
        .map(|(m, s)| {
            let v = if op == ZAlgebra::Diff {
                s
            } else {
                weigh(s, w0)
            };
            (m, v)
        })
        .collect();
    for (other, w) in inputs {
        let other: HashMap<Bytes, f64> = other.into_iter().collect();
        match op {
            ZAlgebra::Diff => acc.retain(|m, _| !other.contains_key(m)),
            ZAlgebra::Inter => {
                acc.retain(|m, _| other.contains_key(m));
                for (m, v) in acc.iter_mut() {
                    if let Some(s) = other.get(m) {
                        *v = fold(*v, weigh(*s, w));
                    }
                }
            }
            ZAlgebra::Union => {
                for (m, s) in other {
                    let v = weigh(s, w);
                    acc.entry(m).and_modify(|a| *a = fold(*a, v)).or_insert(v);
                }
            }
        }
    }
    // -0 is stored as 0 (SQLite does so itself; PostgreSQL would keep the sign).
    let mut out: Vec<(Bytes, f64)> = acc.into_iter().map(|(m, s)| (m, s + 0.0)).collect();
    out.sort_by(|(ma, sa), (mb, sb)| sa.total_cmp(sb).then_with(|| ma.cmp(mb)));
    out
}

/// `ZINTER` / `ZUNION` / `ZDIFF numkeys key ... [WEIGHTS …] [AGGREGATE …] [WITHSCORES]`
pub async fn zalgebra(ctx: &mut Ctx<'_>, a: &[Bytes], op: ZAlgebra) -> Out {
    let command = String::from_utf8_lossy(arg(a, 0)).to_ascii_lowercase();
    let (parsed, inputs) = algebra_args(ctx, a, 1, op, &command, false, false).await?;
    let out = combine(op, inputs, &parsed.weights, parsed.aggregate);
    if parsed.withscores {
        return Ok(pairs_reply(ctx, out, false));
    }
    Ok(array(out.into_iter().map(|(m, _)| bulk(m)).collect()))
}

/// `ZINTERSTORE` / `ZUNIONSTORE` / `ZDIFFSTORE destination numkeys key ...`: the result
/// replaces whatever the destination held (an empty one deletes it).
pub async fn zalgebra_store(ctx: &mut Ctx<'_>, a: &[Bytes], op: ZAlgebra) -> Out {
    let command = String::from_utf8_lossy(arg(a, 0)).to_ascii_lowercase();
    let dest = arg(a, 1);
    let mut locked: Vec<&[u8]> = vec![dest];
    let n = args::parse_i64(arg(a, 2)).unwrap_or(0).max(0) as usize;
    locked.extend(a.iter().skip(3).take(n).map(|k| k.as_ref()));
    ctx.lock(&locked).await?;
    let (parsed, inputs) = algebra_args(ctx, a, 2, op, &command, true, false).await?;
    let out = combine(op, inputs, &parsed.weights, parsed.aggregate);
    ctx.delete(dest).await?;
    if !out.is_empty() {
        ctx.create(dest, Kind::ZSet, None).await?;
        for (m, s) in &out {
            put(ctx, dest, m, *s, true).await?;
        }
    }
    Ok(int(out.len() as i64))
}

/// `ZINTERCARD numkeys key ... [LIMIT limit]`
pub async fn zintercard(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (parsed, inputs) =
        algebra_args(ctx, a, 1, ZAlgebra::Inter, "zintercard", false, true).await?;
    let n = combine(ZAlgebra::Inter, inputs, &parsed.weights, Aggregate::Sum).len() as i64;
    Ok(int(if parsed.limit > 0 {
        n.min(parsed.limit)
    } else {
        n
    }))
}

/// `ZRANGESTORE dst src min max [BYSCORE | BYLEX] [REV] [LIMIT offset count]`: the range
/// `ZRANGE` would answer, stored with its scores in `dst` (whatever `dst` held; an empty
/// range deletes it).
pub async fn zrangestore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (dst, src) = (arg(a, 1), arg(a, 2));
    if a.iter().skip(5).any(|x| is(x, "WITHSCORES")) {
        return fail(SYNTAX);
    }
    ctx.lock(&[dst, src]).await?;
    let mut range = vec![Bytes::from_static(b"ZRANGE")];
    range.extend(a.iter().skip(2).cloned());
    let members = match zrange(ctx, &range, Form::Range).await? {
        Frame::Array { data, .. } => data,
        _ => Vec::new(),
    };
    let mut stored = Vec::with_capacity(members.len());
    for member in members {
        if let Frame::BlobString { data, .. } = member {
            let s = score(ctx, src, &data).await?.unwrap_or(0.0);
            stored.push((data, s));
        }
    }
    ctx.delete(dst).await?;
    if !stored.is_empty() {
        ctx.create(dst, Kind::ZSet, None).await?;
        for (m, s) in &stored {
            put(ctx, dst, m, *s, true).await?;
        }
    }
    Ok(int(stored.len() as i64))
}
