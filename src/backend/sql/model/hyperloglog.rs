//! `PFADD`, `PFCOUNT` and `PFMERGE` on SQL backends: a HyperLogLog is a string value in
//! Redis's own layout (`hll`), so `GET` returns the bytes Redis would, and a value set by a
//! client is used as Redis would use it. Non-HLL strings answer Redis's `WRONGTYPE`, corrupt
//! ones `INVALIDOBJ`.

use super::hll::{self, HllError};
use super::store::*;
use super::strings::{arg, string};
use bytes::Bytes;

fn refused<T>(e: HllError) -> Result<T, Fail> {
    match e {
        HllError::NotHll => fail("WRONGTYPE Key is not a valid HyperLogLog string value."),
        HllError::Corrupt => fail("INVALIDOBJ Corrupted HLL object detected"),
    }
}

/// `PFADD key [element ...]`: 1 when a register changed (or the key was made), else 0.
pub async fn pfadd(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    let m = string(ctx, key).await?;
    let expires = m.as_ref().and_then(|m| m.expires);
    let current = m.and_then(|m| m.value);
    let elements: Vec<&[u8]> = a.iter().skip(2).map(|e| e.as_ref()).collect();
    let (stored, changed) = match hll::pfadd(current.as_deref(), &elements) {
        Ok(done) => done,
        Err(e) => return refused(e),
    };
    if let Some(value) = stored {
        ctx.put_string(key, &value, expires, None).await?;
    }
    Ok(int(i64::from(changed)))
}

/// `PFCOUNT key [key ...]`: one key's estimate (its cached value written back, as Redis
/// does), or the union's of several.
pub async fn pfcount(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let keys: Vec<&[u8]> = a.iter().skip(1).map(|k| k.as_ref()).collect();
    if let [key] = keys.as_slice() {
        ctx.lock(&[key]).await?;
        let Some(m) = string(ctx, key).await? else {
            return Ok(int(0));
        };
        let value = m.value.clone().unwrap_or_default();
        let (count, back) = match hll::pfcount_one(&value) {
            Ok(done) => done,
            Err(e) => return refused(e),
        };
        if let (Some(back), true) = (back, ctx.write) {
            ctx.put_string(key, &back, m.expires, None).await?;
        }
        // Redis replies the count as a signed integer, whatever it is.
        return Ok(int(count as i64));
    }
    let mut values = Vec::with_capacity(keys.len());
    for key in &keys {
        values.push(string(ctx, key).await?.map(|m| m.value.unwrap_or_default()));
    }
    let refs: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
    match hll::pfcount_many(&refs) {
        Ok(count) => Ok(int(count as i64)),
        Err(e) => refused(e),
    }
}

/// `PFMERGE dest [source ...]`: the union stored at `dest` (its expiry kept).
pub async fn pfmerge(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let keys: Vec<&[u8]> = a.iter().skip(1).map(|k| k.as_ref()).collect();
    ctx.lock(&keys).await?;
    let dest = arg(a, 1);
    let m = string(ctx, dest).await?;
    let expires = m.as_ref().and_then(|m| m.expires);
    let current = m.map(|m| m.value.unwrap_or_default());
    let mut sources = Vec::with_capacity(keys.len().saturating_sub(1));
    for key in keys.iter().skip(1) {
        sources.push(string(ctx, key).await?.map(|m| m.value.unwrap_or_default()));
    }
    let refs: Vec<Option<&[u8]>> = sources.iter().map(|v| v.as_deref()).collect();
    let merged = match hll::pfmerge(current.as_deref(), &refs) {
        Ok(merged) => merged,
        Err(e) => return refused(e),
    };
    ctx.put_string(dest, &merged, expires, None).await?;
    Ok(ok())
}
