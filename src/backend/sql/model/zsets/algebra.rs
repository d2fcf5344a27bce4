//! Sorted-set algebra: `ZINTER`, `ZUNION` and `ZDIFF`, their `STORE` forms, and
//! `ZINTERCARD`; a set among the inputs counts as a sorted set whose members score 1.

use super::super::args::{self, is};
use super::super::store::*;
use super::super::strings::arg;
use super::{by_rank, pairs_reply, replace_with};
use bytes::Bytes;

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
            let rows = ctx
                .all(stmt("SELECT member FROM hf_set WHERE key = $1").bind(key))
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
    replace_with(ctx, dest, &out).await?;
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
