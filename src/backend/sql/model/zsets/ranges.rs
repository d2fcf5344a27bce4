//! Sorted-set ranges: by score (`ZCOUNT`, `ZRANGEBYSCORE`, `ZREMRANGEBYSCORE`), by rank
//! (`ZRANGE`, `ZREVRANGE`, `ZREMRANGEBYRANK`), by member (`ZRANGEBYLEX`, `ZLEXCOUNT`,
//! `ZREMRANGEBYLEX`), and `ZRANGESTORE`.

use super::super::args::{self, is};
use super::super::store::*;
use super::super::strings::arg;
use super::{by_rank, replace_with, score, zset};
use crate::backend::Proto;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

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
    let n: i64 = ctx
        .scalar(
            stmt(format!(
                "SELECT COUNT(*) FROM hf_zset WHERE key = $1 AND {}",
                score_where(lo, hi)
            ))
            .bind(key)
            .bind(lo.value)
            .bind(hi.value),
        )
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
    let rows = if by_score {
        let order = if rev { super::DESC } else { super::ASC };
        score_rows(ctx, key, (first, second), order, limit).await?
    } else {
        rank_rows(ctx, key, (first, second), rev).await?
    };
    let Some(rows) = rows else {
        return Ok(array(Vec::new()));
    };
    let mut out = Vec::with_capacity(rows.len() * if withscores { 2 } else { 1 });
    for (member, s) in rows {
        let member = bulk(member);
        if !withscores {
            out.push(member);
            continue;
        }
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

/// `ZRANGE … BYSCORE`'s rows between the scores `first` and `second` (low, then high), in
/// `order`, from `limit`'s offset; None when the answer is empty whatever the set holds (no
/// set, a negative offset).
async fn score_rows(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    (first, second): (&[u8], &[u8]),
    order: &str,
    limit: Option<(i64, i64)>,
) -> Result<Option<Vec<(Bytes, f64)>>, Fail> {
    let (lo, hi) = score_range(first, second)?;
    if !zset(ctx, key).await? {
        return Ok(None);
    }
    let (offset, count) = limit.unwrap_or((0, -1));
    if offset < 0 {
        return Ok(None);
    }
    let count = if count < 0 { i64::MAX } else { count };
    let rows = ctx.all(stmt(format!(
        "SELECT member, score FROM hf_zset WHERE key = $1 AND {} ORDER BY {order} LIMIT $4 OFFSET $5",
        score_where(lo, hi)
    ))
    .bind(key)
    .bind(lo.value)
    .bind(hi.value)
    .bind(count)
    .bind(offset))
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((bytes_at(row, 0)?, row.try_get(1)?));
    }
    Ok(Some(out))
}

/// `ZRANGE`'s (member, score) pairs of the ranks `first` to `second` (Redis's negative
/// indices), from the top when `rev`; None when there is no set.
async fn rank_rows(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    (first, second): (&[u8], &[u8]),
    rev: bool,
) -> Result<Option<Vec<(Bytes, f64)>>, Fail> {
    let (start, end) = (args::int(first)?, args::int(second)?);
    if !zset(ctx, key).await? {
        return Ok(None);
    }
    Ok(Some(by_rank(ctx, key, start, end, rev).await?))
}

pub async fn zremrangebyscore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (lo, hi) = score_range(arg(a, 2), arg(a, 3))?;
    ctx.lock(&[key]).await?;
    if !zset(ctx, key).await? {
        return Ok(int(0));
    }
    let done = ctx
        .execute(
            stmt(format!(
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
    let mut query = stmt(&sql).bind(key);
    for b in binds {
        query = query.bind(b);
    }
    let rows = ctx.all(query.bind(count).bind(offset)).await?;
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
    let mut query = stmt(&sql).bind(key);
    for b in binds {
        query = query.bind(b);
    }
    let n: i64 = ctx.scalar(query).await?;
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
    let mut query = stmt(&sql).bind(key);
    for b in binds {
        query = query.bind(b);
    }
    let done = ctx.execute(query).await?;
    ctx.drop_if_empty(key, Kind::ZSet).await?;
    Ok(int(done.rows_affected() as i64))
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
    replace_with(ctx, dst, &stored).await?;
    Ok(int(stored.len() as i64))
}
