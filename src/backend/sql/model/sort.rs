//! `SORT` and `SORT_RO` over lists, sets and sorted sets, with Redis's rules: numeric unless
//! `ALPHA` (an element that is not a number is an error), ties broken by the element's
//! bytes so the order is always the same, `BY` and `GET` patterns read from strings and hash
//! fields (`weight_*`, `data_*->field`) in the same database, `BY nosort` keeping a list's or
//! sorted set's own order, `LIMIT`, `STORE` into a list.

use super::args::{self, is};
use super::store::*;
use super::strings::arg;
use bytes::Bytes;
use std::cmp::Ordering;

/// The options of one `SORT`.
struct Options<'a> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<&'a [u8]>,
    by: Option<&'a [u8]>,
    nosort: bool,
    get: Vec<&'a [u8]>,
}

fn options(a: &[Bytes], read_only: bool) -> Result<Options<'_>, Fail> {
    let mut o = Options {
        desc: false,
        alpha: false,
        limit: None,
        store: None,
        by: None,
        nosort: false,
        get: Vec::new(),
    };
    let mut j = 2;
    while j < a.len() {
        let opt = arg(a, j);
        let left = a.len() - j - 1;
        if is(opt, "ASC") {
            o.desc = false;
        } else if is(opt, "DESC") {
            o.desc = true;
        } else if is(opt, "ALPHA") {
            o.alpha = true;
        } else if is(opt, "LIMIT") && left >= 2 {
            o.limit = Some((args::int(arg(a, j + 1))?, args::int(arg(a, j + 2))?));
            j += 2;
        } else if is(opt, "STORE") && left >= 1 && !read_only {
            o.store = Some(arg(a, j + 1));
            j += 1;
        } else if is(opt, "BY") && left >= 1 {
            let pattern = arg(a, j + 1);
            // A pattern without `*` names no key: the elements keep their order.
            o.nosort = !pattern.contains(&b'*');
            o.by = Some(pattern);
            j += 1;
        } else if is(opt, "GET") && left >= 1 {
            o.get.push(arg(a, j + 1));
            j += 1;
        } else {
            return fail(SYNTAX);
        }
        j += 1;
    }
    Ok(o)
}

/// What a pattern names for `element`: `#` the element itself; else the string at the key
/// the pattern makes (its first `*` replaced), or the field after `->` of the hash there.
async fn lookup(ctx: &mut Ctx<'_>, pattern: &[u8], element: &[u8]) -> Result<Option<Bytes>, Fail> {
    if pattern == b"#" {
        return Ok(Some(Bytes::copy_from_slice(element)));
    }
    let Some(star) = pattern.iter().position(|b| *b == b'*') else {
        return Ok(None);
    };
    let after = &pattern[star + 1..];
    let (suffix, field) = match after.windows(2).position(|w| w == b"->") {
        Some(at) if at + 2 < after.len() => (&after[..at], Some(&after[at + 2..])),
        _ => (after, None),
    };
    let mut key = pattern[..star].to_vec();
    key.extend_from_slice(element);
    key.extend_from_slice(suffix);
    let Some(meta) = ctx.meta(&key).await? else {
        return Ok(None);
    };
    match (meta.kind, field) {
        (Kind::String, None) => Ok(meta.value.map(Bytes::from)),
        (Kind::Hash, Some(field)) => {
            let v: Option<Vec<u8>> = ctx
                .scalar_opt(
                    stmt("SELECT value FROM hf_hash WHERE key = $1 AND field = $2")
                        .bind(&key)
                        .bind(field),
                )
                .await?;
            Ok(v.map(Bytes::from))
        }
        _ => Ok(None),
    }
}

/// The elements to sort, in the collection's own order (a set's: insertion order).
async fn elements(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<(Kind, Vec<Bytes>)>, Fail> {
    let Some(meta) = ctx.meta(key).await? else {
        return Ok(None);
    };
    let sql = match meta.kind {
        Kind::List => "SELECT value FROM hf_list WHERE key = $1 ORDER BY pos",
        Kind::Set => "SELECT member FROM hf_set WHERE key = $1 ORDER BY id",
        Kind::ZSet => "SELECT member FROM hf_zset WHERE key = $1 ORDER BY score, member",
        _ => return fail(WRONGTYPE),
    };
    let rows = ctx.all(stmt(sql).bind(key)).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push(bytes_at(row, 0)?);
    }
    Ok(Some((meta.kind, out)))
}

/// `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// [STORE destination]`, and `SORT_RO` (no `STORE`).
pub async fn sort(ctx: &mut Ctx<'_>, a: &[Bytes], read_only: bool) -> Out {
    let key = arg(a, 1);
    let mut o = options(a, read_only)?;
    if let Some(dest) = o.store {
        ctx.lock(&[key, dest]).await?;
    }
    let (kind, mut items) = match elements(ctx, key).await? {
        Some(found) => found,
        None => (Kind::List, Vec::new()),
    };
    // A set has no order of its own that Redis promises: sorted when stored, so what is
    // written does not depend on it.
    if o.nosort && kind == Kind::Set && o.store.is_some() {
        o.nosort = false;
        o.alpha = true;
        o.by = None;
    }
    if o.nosort {
        if o.desc {
            items.reverse();
        }
    } else {
        let mut keyed = Vec::with_capacity(items.len());
        for item in items {
            let weight = match o.by {
                Some(pattern) => lookup(ctx, pattern, &item).await?,
                None => Some(item.clone()),
            };
            let weight = if o.alpha {
                Weight::Text(weight)
            } else {
                match weight {
                    None => Weight::Number(0.0),
                    Some(w) => match args::parse_f64(&w) {
                        Some(n) => Weight::Number(n),
                        None => {
                            return fail("ERR One or more scores can't be converted into double")
                        }
                    },
                }
            };
            keyed.push((weight, item));
        }
        keyed.sort_by(|(wa, ea), (wb, eb)| {
            let cmp = wa.compare(wb).then_with(|| ea.cmp(eb));
            if o.desc {
                cmp.reverse()
            } else {
                cmp
            }
        });
        items = keyed.into_iter().map(|(_, item)| item).collect();
    }
    let len = items.len() as i64;
    let (start, count) = o.limit.unwrap_or((0, -1));
    let start = start.max(0).min(len);
    let end = if count < 0 {
        len
    } else {
        start.saturating_add(count).min(len)
    };
    let items = &items[start as usize..end as usize];
    let mut values: Vec<Option<Bytes>> = Vec::new();
    if o.get.is_empty() {
        values.extend(items.iter().cloned().map(Some));
    } else {
        for item in items {
            for pattern in &o.get {
                values.push(lookup(ctx, pattern, item).await?);
            }
        }
    }
    let Some(dest) = o.store else {
        return Ok(array(values.into_iter().map(bulk_or_null).collect()));
    };
    ctx.delete(dest).await?;
    if !values.is_empty() {
        ctx.create(dest, Kind::List, None).await?;
        for (pos, value) in values.iter().enumerate() {
            ctx.execute(
                stmt("INSERT INTO hf_list (key, pos, value) VALUES ($1, $2, $3)")
                    .bind(dest)
                    .bind(pos as i64)
                    .bind(value.as_deref().unwrap_or_default()),
            )
            .await?;
        }
    }
    Ok(int(values.len() as i64))
}

/// What an element is sorted by.
enum Weight {
    Number(f64),
    /// `ALPHA`: a missing weight sorts first.
    Text(Option<Bytes>),
}

impl Weight {
    fn compare(&self, other: &Weight) -> Ordering {
        match (self, other) {
            (Weight::Number(x), Weight::Number(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
            (Weight::Text(x), Weight::Text(y)) => x.cmp(y),
            _ => Ordering::Equal,
        }
    }
}
