//! Key-space commands: existence, type, expiry, renaming, listing and flushing.

use super::args::{self, is};
use super::store::*;
use super::strings::arg;
use bytes::Bytes;

pub async fn del(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let keys: Vec<&[u8]> = a.iter().skip(1).map(|k| k.as_ref()).collect();
    ctx.lock(&keys).await?;
    let mut n = 0;
    for key in keys {
        if ctx.delete(key).await? {
            n += 1;
        }
    }
    Ok(int(n))
}

/// A run of `DEL`/`UNLINK` commands that came one after another in a group, each answered
/// as if it ran alone, in order: the keys it removed (a key an earlier command of the run
/// removed, or named twice, counts once). One statement reads every key's kind, and one per
/// table removes the live keys' rows, instead of a read and a delete per key and table.
pub async fn del_run(ctx: &mut Ctx<'_>, run: &[&[Bytes]]) -> Result<Vec<Option<i64>>, Fail> {
    let mut keys: Vec<&[u8]> = run
        .iter()
        .flat_map(|a| a.iter().map(|k| k.as_ref()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let live = ctx.kinds(&keys).await?;
    let gone: Vec<(&[u8], Kind)> = keys
        .iter()
        .filter_map(|key| live.get(*key).map(|kind| (*key, *kind)))
        .collect();
    ctx.delete_many(&gone).await?;
    let mut present: std::collections::HashSet<&[u8]> = gone.iter().map(|(k, _)| *k).collect();
    Ok(run
        .iter()
        .map(|a| Some(a.iter().filter(|k| present.remove(k.as_ref())).count() as i64))
        .collect())
}

/// EXISTS and TOUCH: a key named twice counts twice.
pub async fn exists(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut n = 0;
    for key in a.iter().skip(1) {
        if ctx.meta(key).await?.is_some() {
            n += 1;
        }
    }
    Ok(int(n))
}

pub async fn kind(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let name = ctx.meta(arg(a, 1)).await?.map_or("none", |m| m.kind.name());
    Ok(simple(name))
}

/// RENAME and RENAMENX.
pub async fn rename(ctx: &mut Ctx<'_>, a: &[Bytes], nx: bool) -> Out {
    let (from, to) = (arg(a, 1), arg(a, 2));
    ctx.lock(&[from, to]).await?;
    let Some(m) = ctx.meta(from).await? else {
        return fail("ERR no such key");
    };
    if from == to {
        return Ok(if nx { int(0) } else { ok() });
    }
    if let Some(old) = ctx.meta(to).await? {
        if nx {
            return Ok(int(0));
        }
        ctx.purge(to, old.kind).await?;
    }
    ctx.execute(
        stmt("UPDATE hf_keys SET key = $2 WHERE key = $1")
            .bind(from)
            .bind(to),
    )
    .await?;
    for table in m.kind.tables() {
        ctx.execute(
            stmt(format!("UPDATE {table} SET key = $2 WHERE key = $1"))
                .bind(from)
                .bind(to),
        )
        .await?;
    }
    Ok(if nx { int(1) } else { ok() })
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT with NX | XX | GT | LT.
pub async fn expire(ctx: &mut Ctx<'_>, a: &[Bytes], seconds: bool, relative: bool) -> Out {
    let key = arg(a, 1);
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in a.iter().skip(3) {
        if is(opt, "NX") {
            nx = true;
        } else if is(opt, "XX") {
            xx = true;
        } else if is(opt, "GT") {
            gt = true;
        } else if is(opt, "LT") {
            lt = true;
        } else {
            return fail(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            ));
        }
    }
    if nx && (xx || gt || lt) {
        return fail("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return fail("ERR GT and LT options at the same time are not compatible");
    }
    // Redis reads the options before the time.
    let when = args::int(arg(a, 2))?;
    let name = match (seconds, relative) {
        (true, true) => "expire",
        (false, true) => "pexpire",
        (true, false) => "expireat",
        (false, false) => "pexpireat",
    };
    let invalid = || Fail::Reply(format!("ERR invalid expire time in '{name}' command"));
    let mut at = when;
    if seconds {
        at = at.checked_mul(1000).ok_or_else(invalid)?;
    }
    if relative {
        at = at.checked_add(ctx.now).ok_or_else(invalid)?;
    }
    ctx.lock(&[key]).await?;
    let Some(m) = ctx.meta(key).await? else {
        return Ok(int(0));
    };
    let refused = match m.expires {
        Some(current) => nx || (gt && at <= current) || (lt && at >= current),
        // No expiry is an infinite one: never "greater", always "less".
        None => xx || gt,
    };
    if refused {
        return Ok(int(0));
    }
    if at <= ctx.now {
        ctx.purge(key, m.kind).await?;
    } else {
        ctx.set_expiry(key, Some(at)).await?;
    }
    Ok(int(1))
}

/// TTL, PTTL, EXPIRETIME, PEXPIRETIME.
pub async fn ttl(ctx: &mut Ctx<'_>, a: &[Bytes], seconds: bool, absolute: bool) -> Out {
    let Some(m) = ctx.meta(arg(a, 1)).await? else {
        return Ok(int(-2));
    };
    let Some(at) = m.expires else {
        return Ok(int(-1));
    };
    Ok(int(match (absolute, seconds) {
        (true, true) => (at + 500) / 1000,
        (true, false) => at,
        (false, true) => ((at - ctx.now).max(0) + 500) / 1000,
        (false, false) => (at - ctx.now).max(0),
    }))
}

pub async fn persist(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    match ctx.meta(key).await? {
        Some(m) if m.expires.is_some() => {
            ctx.set_expiry(key, None).await?;
            Ok(int(1))
        }
        _ => Ok(int(0)),
    }
}

pub async fn keys(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let pattern = arg(a, 1);
    let rows = ctx
        .all(
            stmt("SELECT key FROM hf_keys WHERE expires_at IS NULL OR expires_at > $1 ORDER BY id")
                .bind(ctx.now),
        )
        .await?;
    let mut out = Vec::new();
    for row in &rows {
        let key = bytes_at(row, 0)?;
        if args::glob(pattern, &key) {
            out.push(bulk(key));
        }
    }
    Ok(array(out))
}

/// SCAN: the cursor is the last row id returned, so a key present throughout is returned.
pub async fn scan(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let cursor = match std::str::from_utf8(arg(a, 1))
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(c) => c,
        None => return fail("ERR invalid cursor"),
    };
    let (mut pattern, mut count, mut kind) = (None, 10i64, None);
    let mut j = 2;
    while j < a.len() {
        let opt = arg(a, j);
        let has_next = j + 1 < a.len();
        if is(opt, "MATCH") && has_next {
            pattern = Some(arg(a, j + 1));
        } else if is(opt, "COUNT") && has_next {
            count = args::int(arg(a, j + 1))?;
            if count < 1 {
                return fail(SYNTAX);
            }
        } else if is(opt, "TYPE") && has_next {
            kind = Some(Kind::from_name(arg(a, j + 1)));
        } else {
            return fail(SYNTAX);
        }
        j += 2;
    }
    let after = i64::try_from(cursor).unwrap_or(i64::MAX);
    let rows = ctx
        .all(
            stmt(
                "SELECT id, key, kind, expires_at FROM hf_keys WHERE id > $1 ORDER BY id LIMIT $2",
            )
            .bind(after)
            .bind(count.min(100_000)),
        )
        .await?;
    let mut next = 0i64;
    if rows.len() as i64 == count.min(100_000) {
        if let Some(last) = rows.last() {
            next = last.try_get(0)?;
        }
    }
    let mut out = Vec::new();
    for row in &rows {
        let key = bytes_at(row, 1)?;
        let code: i64 = row.try_get(2)?;
        let expires: Option<i64> = row.try_get(3)?;
        if expires.is_some_and(|at| at <= ctx.now) {
            continue;
        }
        if let Some(want) = kind {
            if want.map(|k| k as i64) != Some(code) {
                continue;
            }
        }
        if pattern.is_some_and(|p| !args::glob(p, &key)) {
            continue;
        }
        out.push(bulk(key));
    }
    Ok(array(vec![bulk(Bytes::from(next.to_string())), array(out)]))
}

pub async fn dbsize(ctx: &mut Ctx<'_>) -> Out {
    let n: i64 = ctx
        .scalar(
            stmt("SELECT COUNT(*) FROM hf_keys WHERE expires_at IS NULL OR expires_at > $1")
                .bind(ctx.now),
        )
        .await?;
    Ok(int(n))
}

/// FLUSHDB and FLUSHALL (`ASYNC`/`SYNC` accepted; both are synchronous here).
pub async fn flush(ctx: &mut Ctx<'_>, a: &[Bytes], allowed: bool) -> Out {
    match a.get(1) {
        None => {}
        Some(opt) if a.len() == 2 && (is(opt, "ASYNC") || is(opt, "SYNC")) => {}
        Some(_) => return fail(SYNTAX),
    }
    if !allowed {
        return fail("ERR holdfast: FLUSHDB and FLUSHALL are disabled for this backend (allow_flush = false)");
    }
    if ctx.dialect == Dialect::Postgres {
        // One statement, under an exclusive lock: no writer commits half-way through.
        ctx.execute(stmt(
            "TRUNCATE hf_keys, hf_hash, hf_set, hf_zset, hf_list, hf_stream, hf_xgroup, \
             hf_xconsumer, hf_xpel",
        ))
        .await?;
        return Ok(ok());
    }
    for table in [
        "hf_keys",
        "hf_hash",
        "hf_set",
        "hf_zset",
        "hf_list",
        "hf_stream",
        "hf_xgroup",
        "hf_xconsumer",
        "hf_xpel",
    ] {
        ctx.execute(stmt(format!("DELETE FROM {table}"))).await?;
    }
    Ok(ok())
}

/// `COPY source destination [REPLACE]` (a `DB` option never gets here: the connection
/// refuses it). The value, the elements in their order, and the expiry are copied.
pub async fn copy(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (from, to) = (arg(a, 1), arg(a, 2));
    let mut replace = false;
    for opt in a.iter().skip(3) {
        if is(opt, "REPLACE") {
            replace = true;
        } else {
            return fail(SYNTAX);
        }
    }
    if from == to {
        return fail("ERR source and destination objects are the same");
    }
    ctx.lock(&[from, to]).await?;
    let Some(m) = ctx.meta(from).await? else {
        return Ok(int(0));
    };
    if let Some(old) = ctx.meta(to).await? {
        if !replace {
            return Ok(int(0));
        }
        ctx.purge(to, old.kind).await?;
    }
    ctx.execute(
        stmt(
            "INSERT INTO hf_keys (key, kind, expires_at, value) \
             SELECT $2, kind, expires_at, value FROM hf_keys WHERE key = $1",
        )
        .bind(from)
        .bind(to),
    )
    .await?;
    let columns = match m.kind {
        Kind::Hash => Some(("hf_hash", "field, value", " ORDER BY id")),
        Kind::Set => Some(("hf_set", "member", " ORDER BY id")),
        Kind::ZSet => Some(("hf_zset", "member, score", "")),
        Kind::List => Some(("hf_list", "pos, value", "")),
        Kind::Stream => Some(("hf_stream", "ms, seq, fields", "")),
        _ => None,
    };
    // A stream's consumer groups are copied with it, as Redis copies them.
    let groups: &[(&str, &str)] = match m.kind {
        Kind::Stream => &[
            ("hf_xgroup", "grp, ms, seq, entries_read"),
            ("hf_xconsumer", "grp, name, seen_at"),
            (
                "hf_xpel",
                "grp, ms, seq, consumer, delivered_at, deliveries",
            ),
        ],
        _ => &[],
    };
    for (table, cols) in groups {
        ctx.execute(
            stmt(format!(
                "INSERT INTO {table} (key, {cols}) SELECT $2, {cols} FROM {table} WHERE key = $1"
            ))
            .bind(from)
            .bind(to),
        )
        .await?;
    }
    if let Some((table, cols, order)) = columns {
        ctx.execute(
            stmt(format!(
                "INSERT INTO {table} (key, {cols}) SELECT $2, {cols} FROM {table} WHERE key = $1{order}"
            ))
            .bind(from)
            .bind(to),
        )
        .await?;
    }
    Ok(int(1))
}

/// `RANDOMKEY`: a live key chosen at random, nil when there is none. An id drawn between
/// the smallest and the largest, and the first live key from there (else the last before
/// it): index probes, not a count and an offset over every key. Keys after a run of deleted
/// ids are drawn more often; Redis's own draw (a random bucket) is not uniform either.
pub async fn randomkey(ctx: &mut Ctx<'_>) -> Out {
    // Two subqueries: SQLite reads one end of an index only for a lone MIN or MAX.
    let row = ctx
        .one(stmt(
            "SELECT (SELECT MIN(id) FROM hf_keys), (SELECT MAX(id) FROM hf_keys)",
        ))
        .await?;
    let (Some(low), Some(high)) = (
        row.try_get::<Option<i64>>(0)?,
        row.try_get::<Option<i64>>(1)?,
    ) else {
        return Ok(null());
    };
    let drawn = {
        use rand::Rng;
        rand::thread_rng().gen_range(low..=high)
    };
    let live = "(expires_at IS NULL OR expires_at > $2)";
    for sql in [
        format!("SELECT key FROM hf_keys WHERE id >= $1 AND {live} ORDER BY id LIMIT 1"),
        format!("SELECT key FROM hf_keys WHERE id < $1 AND {live} ORDER BY id DESC LIMIT 1"),
    ] {
        let key: Option<Vec<u8>> = ctx.scalar_opt(stmt(&sql).bind(drawn).bind(ctx.now)).await?;
        if key.is_some() {
            return Ok(bulk_or_null(key));
        }
    }
    Ok(null())
}
