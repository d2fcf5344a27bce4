//! String commands: values in `hf_keys.value`, with their expiry beside them.

use super::args::{self, is};
use super::store::*;
use bytes::Bytes;

/// The `i`th argument (the table checked the arity; an absent one reads as empty).
pub fn arg(a: &[Bytes], i: usize) -> &[u8] {
    a.get(i).map(|b| b.as_ref()).unwrap_or_default()
}

pub(crate) async fn string(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Meta>, Fail> {
    ctx.typed(key, Kind::String).await
}

pub async fn get(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let m = string(ctx, arg(a, 1)).await?;
    Ok(bulk_or_null(m.and_then(|m| m.value)))
}

pub async fn strlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let m = string(ctx, arg(a, 1)).await?;
    Ok(int(m.and_then(|m| m.value).map_or(0, |v| v.len() as i64)))
}

/// Milliseconds from an expire argument, as Redis checks them for `command`.
fn expire_ms(
    value: &[u8],
    unit_seconds: bool,
    relative: bool,
    now: i64,
    command: &str,
) -> Result<i64, Fail> {
    let n = args::int(value)?;
    let invalid = || Fail::Reply(format!("ERR invalid expire time in '{command}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let ms = if unit_seconds {
        n.checked_mul(1000).ok_or_else(invalid)?
    } else {
        n
    };
    if relative {
        ms.checked_add(now).ok_or_else(invalid)
    } else {
        Ok(ms)
    }
}

#[derive(Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// (value, seconds?, relative?)
    expire: Option<(usize, bool, bool)>,
}

/// SET's and GETEX's option grammar, with Redis's rules for which options combine.
fn set_options(a: &[Bytes], from: usize, getex: bool) -> Result<SetOptions, Fail> {
    let mut o = SetOptions::default();
    let mut j = from;
    while j < a.len() {
        let opt = arg(a, j);
        let has_next = j + 1 < a.len();
        let no_expire = o.expire.is_none();
        if !getex && is(opt, "NX") && !o.xx {
            o.nx = true;
        } else if !getex && is(opt, "XX") && !o.nx {
            o.xx = true;
        } else if !getex && is(opt, "GET") {
            o.get = true;
        } else if !getex && is(opt, "KEEPTTL") && !o.persist && no_expire {
            o.keepttl = true;
        } else if getex && is(opt, "PERSIST") && no_expire && !o.keepttl {
            o.persist = true;
        } else if has_next && !o.keepttl && !o.persist {
            let unit = [
                ("EX", true, true),
                ("PX", false, true),
                ("EXAT", true, false),
                ("PXAT", false, false),
            ]
            .into_iter()
            .find(|(name, _, _)| is(opt, name));
            match unit {
                // The same unit twice is allowed (the last wins); two different ones are not.
                Some((name, seconds, relative))
                    if o.expire.is_none_or(|(at, _, _)| is(arg(a, at - 1), name)) =>
                {
                    o.expire = Some((j + 1, seconds, relative));
                    j += 1;
                }
                _ => return fail(SYNTAX),
            }
        } else {
            return fail(SYNTAX);
        }
        j += 1;
    }
    Ok(o)
}

pub async fn set(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let o = set_options(a, 3, false)?;
    let expires = match o.expire {
        Some((at, seconds, relative)) => {
            Some(expire_ms(arg(a, at), seconds, relative, ctx.now, "set")?)
        }
        None => None,
    };
    ctx.lock(&[key]).await?;
    let old = ctx.meta(key).await?;
    if o.get && old.as_ref().is_some_and(|m| m.kind != Kind::String) {
        return fail(WRONGTYPE);
    }
    let found = old.is_some();
    let old_value = || old.as_ref().and_then(|m| m.value.clone());
    if (o.nx && found) || (o.xx && !found) {
        return Ok(if o.get {
            bulk_or_null(old_value())
        } else {
            null()
        });
    }
    let expires = if o.keepttl {
        old.as_ref().and_then(|m| m.expires)
    } else {
        expires
    };
    ctx.put_string(key, arg(a, 2), expires, old.as_ref().map(|m| m.kind))
        .await?;
    Ok(if o.get {
        bulk_or_null(old_value())
    } else {
        ok()
    })
}

pub async fn setnx(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    if ctx.meta(key).await?.is_some() {
        return Ok(int(0));
    }
    ctx.put_string(key, arg(a, 2), None, None).await?;
    Ok(int(1))
}

/// SETEX and PSETEX.
pub async fn setex(ctx: &mut Ctx<'_>, a: &[Bytes], seconds: bool) -> Out {
    let key = arg(a, 1);
    let name = if seconds { "setex" } else { "psetex" };
    let expires = expire_ms(arg(a, 2), seconds, true, ctx.now, name)?;
    ctx.lock(&[key]).await?;
    let old = ctx.meta(key).await?.map(|m| m.kind);
    ctx.put_string(key, arg(a, 3), Some(expires), old).await?;
    Ok(ok())
}

pub async fn getset(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    let old = string(ctx, key).await?;
    ctx.put_string(key, arg(a, 2), None, None).await?;
    Ok(bulk_or_null(old.and_then(|m| m.value)))
}

pub async fn getdel(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    let old = string(ctx, key).await?;
    if old.is_some() {
        ctx.purge(key, Kind::String).await?;
    }
    Ok(bulk_or_null(old.and_then(|m| m.value)))
}

pub async fn getex(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let o = set_options(a, 2, true)?;
    let expires = match o.expire {
        Some((at, seconds, relative)) => {
            Some(expire_ms(arg(a, at), seconds, relative, ctx.now, "getex")?)
        }
        None => None,
    };
    ctx.lock(&[key]).await?;
    let Some(m) = string(ctx, key).await? else {
        return Ok(null());
    };
    if let Some(at) = expires {
        ctx.set_expiry(key, Some(at)).await?;
    } else if o.persist {
        ctx.set_expiry(key, None).await?;
    }
    Ok(bulk_or_null(m.value))
}

pub async fn mget(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut out = Vec::with_capacity(a.len().saturating_sub(1));
    for key in a.iter().skip(1) {
        // MGET answers nil for a key of another kind, never WRONGTYPE.
        let value = match ctx.meta(key).await? {
            Some(m) if m.kind == Kind::String => m.value,
            _ => None,
        };
        out.push(bulk_or_null(value));
    }
    Ok(array(out))
}

pub async fn mset(ctx: &mut Ctx<'_>, a: &[Bytes], nx: bool) -> Out {
    if a.len() < 3 || a.len().is_multiple_of(2) {
        let name = if nx { "msetnx" } else { "mset" };
        return fail(format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    let keys: Vec<&[u8]> = a.iter().skip(1).step_by(2).map(|k| k.as_ref()).collect();
    ctx.lock(&keys).await?;
    if nx {
        for key in &keys {
            if ctx.meta(key).await?.is_some() {
                return Ok(int(0));
            }
        }
    }
    for pair in a[1..].chunks(2) {
        let (key, value) = (arg(pair, 0), arg(pair, 1));
        let old = ctx.meta(key).await?.map(|m| m.kind);
        ctx.put_string(key, value, None, old).await?;
    }
    Ok(if nx { int(1) } else { ok() })
}

/// INCR's answer to an increment past the range of a 64-bit integer.
const OVERFLOW: &str = "ERR increment or decrement would overflow";

/// INCR, DECR, INCRBY, DECRBY: `by` is the parsed increment (already negated for DECR*).
pub async fn incr_by(ctx: &mut Ctx<'_>, a: &[Bytes], by: i64) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    let m = string(ctx, key).await?;
    let current = match m.as_ref().and_then(|m| m.value.as_deref()) {
        Some(v) => match args::parse_i64(v) {
            Some(n) => n,
            None => return fail(NOT_INTEGER),
        },
        None => 0,
    };
    let Some(next) = current.checked_add(by) else {
        return fail(OVERFLOW);
    };
    let expires = m.as_ref().and_then(|m| m.expires);
    ctx.put_string(
        key,
        itoa::Buffer::new().format(next).as_bytes(),
        expires,
        None,
    )
    .await?;
    Ok(int(next))
}

/// A run of `INCR`, `DECR`, `INCRBY` and `DECRBY` commands (`key`, increment) that came one
/// after another in a group, each answered as if it ran alone, in order: the value it made,
/// or the error it would have met (WRONGTYPE, not an integer, an overflow), which changes
/// nothing. One statement reads every key's value, and one per [`STATEMENT_ROWS`] keys
/// writes each changed key's last value, keeping its expiry as `INCR` does, instead of a
/// read and an upsert per command.
pub async fn incr_run(
    ctx: &mut Ctx<'_>,
    run: &[(&[u8], i64)],
) -> Result<Vec<Result<i64, &'static str>>, Fail> {
    let mut keys: Vec<&[u8]> = run.iter().map(|(key, _)| *key).collect();
    keys.sort_unstable();
    keys.dedup();
    let found = ctx.metas(&keys).await?;
    // Each key's value as the run has made it so far, and the order keys were first changed.
    let mut now: std::collections::HashMap<&[u8], i64> = std::collections::HashMap::new();
    let mut changed: Vec<&[u8]> = Vec::new();
    let mut out = Vec::with_capacity(run.len());
    for &(key, by) in run {
        let meta = found.get(key);
        if meta.is_some_and(|m| m.kind != Kind::String) {
            out.push(Err(WRONGTYPE));
            continue;
        }
        let current = match (now.get(key), meta.and_then(|m| m.value.as_deref())) {
            (Some(n), _) => *n,
            (None, Some(v)) => match args::parse_i64(v) {
                Some(n) => n,
                None => {
                    out.push(Err(NOT_INTEGER));
                    continue;
                }
            },
            (None, None) => 0,
        };
        let Some(next) = current.checked_add(by) else {
            out.push(Err(OVERFLOW));
            continue;
        };
        if now.insert(key, next).is_none() {
            changed.push(key);
        }
        out.push(Ok(next));
    }
    let rows: Vec<(&[u8], String, Option<i64>)> = changed
        .iter()
        .map(|key| {
            let value = itoa::Buffer::new().format(now[key]).to_string();
            (*key, value, found.get(*key).and_then(|m| m.expires))
        })
        .collect();
    for chunk in rows.chunks(STATEMENT_ROWS) {
        let Some(last) = chunk.last() else { continue };
        let written = upsert_rows(ctx.dialect, chunk.len());
        let sql = string_upsert(ctx.dialect, written, true);
        let mut query = stmt(&sql);
        for (key, value, expires) in chunk.iter().chain(std::iter::repeat(last)).take(written) {
            query = query.bind(*key).bind(*expires).bind(value.as_bytes());
        }
        ctx.execute(query).await?;
    }
    Ok(out)
}

pub async fn incr_by_arg(ctx: &mut Ctx<'_>, a: &[Bytes], negate: bool) -> Out {
    let by = args::int(arg(a, 2))?;
    let by = if negate {
        match by.checked_neg() {
            Some(n) => n,
            None => return fail("ERR decrement would overflow"),
        }
    } else {
        by
    };
    incr_by(ctx, a, by).await
}

pub async fn incrbyfloat(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    // Redis's order: the key's kind, its value, then the increment.
    let m = string(ctx, key).await?;
    let current = match m.as_ref().and_then(|m| m.value.as_deref()) {
        Some(v) => match args::parse_f64(v) {
            Some(n) => n,
            None => return fail(NOT_FLOAT),
        },
        None => 0.0,
    };
    let by = args::float(arg(a, 2))?;
    let next = current + by;
    if !next.is_finite() {
        return fail("ERR increment would produce NaN or Infinity");
    }
    let text = args::human_double(next);
    let expires = m.as_ref().and_then(|m| m.expires);
    ctx.put_string(key, text.as_bytes(), expires, None).await?;
    Ok(bulk(Bytes::from(text)))
}

pub async fn append(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    let m = string(ctx, key).await?;
    let expires = m.as_ref().and_then(|m| m.expires);
    let mut value = m.and_then(|m| m.value).unwrap_or_default();
    value.extend_from_slice(arg(a, 2));
    ctx.put_string(key, &value, expires, None).await?;
    Ok(int(value.len() as i64))
}

pub async fn getrange(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (start, end) = (args::int(arg(a, 2))?, args::int(arg(a, 3))?);
    let value = string(ctx, arg(a, 1))
        .await?
        .and_then(|m| m.value)
        .unwrap_or_default();
    let len = value.len() as i64;
    // Redis: both negative and start > end is empty; indices clamp to the string.
    if start < 0 && end < 0 && start > end {
        return Ok(bulk(Bytes::new()));
    }
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 { (len + end).max(0) } else { end };
    let end = end.min(len - 1);
    if len == 0 || start > end {
        return Ok(bulk(Bytes::new()));
    }
    Ok(bulk(Bytes::copy_from_slice(
        value.get(start as usize..=end as usize).unwrap_or_default(),
    )))
}

/// Redis's largest string (`proto-max-bulk-len`'s default): 512 MB.
const MAX_STRING: i64 = 512 * 1024 * 1024;

/// `SETRANGE key offset value`: zero bytes pad up to the offset; an empty value changes
/// nothing (and creates no key).
pub async fn setrange(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let offset = args::int(arg(a, 2))?;
    if offset < 0 {
        return fail("ERR offset is out of range");
    }
    let piece = arg(a, 3);
    ctx.lock(&[key]).await?;
    let m = string(ctx, key).await?;
    let expires = m.as_ref().and_then(|m| m.expires);
    let exists = m.is_some();
    let mut value = m.and_then(|m| m.value).unwrap_or_default();
    if piece.is_empty() {
        return Ok(int(value.len() as i64));
    }
    if offset.saturating_add(piece.len() as i64) > MAX_STRING {
        return fail("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    let at = offset as usize;
    if value.len() < at + piece.len() {
        value.resize(at + piece.len(), 0);
    }
    value[at..at + piece.len()].copy_from_slice(piece);
    ctx.put_string(key, &value, if exists { expires } else { None }, None)
        .await?;
    Ok(int(value.len() as i64))
}

/// Cells of LCS's table holdfast computes at most (Redis bounds it by `proto-max-bulk-len`;
/// this keeps one command's memory to 256 MB).
const LCS_CELLS: u64 = 64 * 1024 * 1024;

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`, by Redis's algorithm: the
/// matches are walked from the ends of both strings, so they come last first.
pub async fn lcs(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    // The keys' kinds are checked before the options are read, as in Redis.
    let mut values = Vec::with_capacity(2);
    for key in [arg(a, 1), arg(a, 2)] {
        match ctx.meta(key).await? {
            None => values.push(Vec::new()),
            Some(m) if m.kind == Kind::String => values.push(m.value.unwrap_or_default()),
            Some(_) => return fail("ERR The specified keys must contain string values"),
        }
    }
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 3;
    while i < a.len() {
        let opt = arg(a, i);
        if is(opt, "IDX") {
            idx = true;
        } else if is(opt, "LEN") {
            len_only = true;
        } else if is(opt, "WITHMATCHLEN") {
            with_len = true;
        } else if is(opt, "MINMATCHLEN") && i + 1 < a.len() {
            min_len = args::int(arg(a, i + 1))?.max(0);
            i += 1;
        } else {
            return fail(SYNTAX);
        }
        i += 1;
    }
    if len_only && idx {
        return fail("ERR If you want both the length and indexes, please just use IDX.");
    }
    let (x, y) = (&values[0], &values[1]);
    let (xl, yl) = (x.len(), y.len());
    if (xl as u64 + 1).saturating_mul(yl as u64 + 1) > LCS_CELLS {
        return fail(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let w = yl + 1;
    let mut dp = vec![0u32; (xl + 1) * w];
    for i in 1..=xl {
        for j in 1..=yl {
            dp[i * w + j] = if x[i - 1] == y[j - 1] {
                dp[(i - 1) * w + j - 1] + 1
            } else {
                dp[(i - 1) * w + j].max(dp[i * w + j - 1])
            };
        }
    }
    let total = dp[xl * w + yl];
    if len_only {
        return Ok(int(i64::from(total)));
    }
    let mut common = vec![0u8; total as usize];
    let mut matches = Vec::new();
    let (mut i, mut j, mut left) = (xl, yl, total as usize);
    // The open range: (a start, a end, b start, b end), None when none is open.
    let mut range: Option<(usize, usize, usize, usize)> = None;
    while i > 0 && j > 0 {
        let mut emit = false;
        if x[i - 1] == y[j - 1] {
            common[left - 1] = x[i - 1];
            range = Some(match range {
                None => (i - 1, i - 1, j - 1, j - 1),
                Some((_, ae, _, be)) => (i - 1, ae, j - 1, be),
            });
            if i - 1 == 0 || j - 1 == 0 {
                emit = true;
            }
            left -= 1;
            i -= 1;
            j -= 1;
        } else {
            if dp[(i - 1) * w + j] > dp[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = range.is_some();
        }
        if emit {
            if let Some((as_, ae, bs, be)) = range.take() {
                let length = (ae - as_ + 1) as i64;
                if min_len == 0 || length >= min_len {
                    let mut m = vec![
                        array(vec![int(as_ as i64), int(ae as i64)]),
                        array(vec![int(bs as i64), int(be as i64)]),
                    ];
                    if with_len {
                        m.push(int(length));
                    }
                    matches.push(array(m));
                }
            }
        }
    }
    if !idx {
        return Ok(bulk(Bytes::from(common)));
    }
    let mut map = redis_protocol::resp3::types::FrameMap::default();
    map.insert(bulk(Bytes::from_static(b"matches")), array(matches));
    map.insert(bulk(Bytes::from_static(b"len")), int(i64::from(total)));
    Ok(redis_protocol::resp3::types::BytesFrame::Map {
        data: map,
        attributes: None,
    })
}
