//! String commands: values in `hf_keys.value`, with their expiry beside them.

use super::args::{self, is};
use super::store::*;
use bytes::Bytes;

/// The `i`th argument (the table checked the arity; an absent one reads as empty).
pub fn arg(a: &[Bytes], i: usize) -> &[u8] {
    a.get(i).map(|b| b.as_ref()).unwrap_or_default()
}

async fn string(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Meta>, Fail> {
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
                    if o.expire.map_or(true, |(at, _, _)| is(arg(a, at - 1), name)) =>
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
    if a.len() < 3 || a.len() % 2 == 0 {
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
        return fail("ERR increment or decrement would overflow");
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
    let by = args::float(arg(a, 2))?;
    ctx.lock(&[key]).await?;
    let m = string(ctx, key).await?;
    let current = match m.as_ref().and_then(|m| m.value.as_deref()) {
        Some(v) => match args::parse_f64(v) {
            Some(n) => n,
            None => return fail(NOT_FLOAT),
        },
        None => 0.0,
    };
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
