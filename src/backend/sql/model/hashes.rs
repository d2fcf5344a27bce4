//! Hash commands over `hf_hash`. Fields come back in insertion order (by row id), as a small
//! Redis hash keeps them.

use super::args::{self, scan_args};
use super::draws;
use super::store::*;
use super::strings::arg;
use bytes::Bytes;

async fn hash(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Fail> {
    Ok(ctx.typed(key, Kind::Hash).await?.is_some())
}

async fn field(ctx: &mut Ctx<'_>, key: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    let v: Option<Vec<u8>> = ctx
        .scalar_opt(
            stmt("SELECT value FROM hf_hash WHERE key = $1 AND field = $2")
                .bind(key)
                .bind(field),
        )
        .await?;
    Ok(v)
}

/// Sets a field; true when it is new.
async fn put(ctx: &mut Ctx<'_>, key: &[u8], field_name: &[u8], value: &[u8]) -> Result<bool, Fail> {
    let new = field(ctx, key, field_name).await?.is_none();
    if new {
        ctx.execute(
            stmt("INSERT INTO hf_hash (key, field, value) VALUES ($1, $2, $3)")
                .bind(key)
                .bind(field_name)
                .bind(value),
        )
        .await?;
    } else {
        ctx.execute(
            stmt("UPDATE hf_hash SET value = $3 WHERE key = $1 AND field = $2")
                .bind(key)
                .bind(field_name)
                .bind(value),
        )
        .await?;
    }
    Ok(new)
}

/// HSET (number of new fields) and HMSET (`+OK`).
pub async fn hset(ctx: &mut Ctx<'_>, a: &[Bytes], hmset: bool) -> Out {
    if a.len() < 4 || !a.len().is_multiple_of(2) {
        let name = if hmset { "hmset" } else { "hset" };
        return fail(format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    hash(ctx, key).await?;
    ctx.create(key, Kind::Hash, None).await?;
    let mut added = 0;
    for pair in a[2..].chunks(2) {
        if put(ctx, key, arg(pair, 0), arg(pair, 1)).await? {
            added += 1;
        }
    }
    Ok(if hmset { ok() } else { int(added) })
}

/// A run of `HSET key field value...` commands that came one after another in a group, each
/// answered as if it ran alone, in order: the fields it added (a field an earlier command of
/// the run added, or named twice, is new once), or None where the key holds another kind
/// (WRONGTYPE). One statement reads every key's kind, one creates the new hashes, one per
/// [`STATEMENT_ROWS`] fields finds those that exist, and one per [`STATEMENT_ROWS`] writes
/// each field's last value, new fields in the order the run first named them (the order
/// `HGETALL` answers), instead of two statements per field. A key's kind cannot change
/// within the run (only HSETs), so the one read answers every command's check.
pub async fn hset_run(
    ctx: &mut Ctx<'_>,
    run: &[(&[u8], &[Bytes])],
) -> Result<Vec<Option<i64>>, Fail> {
    use std::collections::{HashMap, HashSet};
    let keys: Vec<&[u8]> = run.iter().map(|(key, _)| *key).collect();
    let live = ctx.collections(&keys, Kind::Hash).await?;
    let wrong = |key: &[u8]| live.get(key).is_some_and(|kind| *kind != Kind::Hash);
    // Each field once, where the run first names it, with the last value it is given.
    let mut order: Vec<(&[u8], &[u8])> = Vec::new();
    let mut last: HashMap<(&[u8], &[u8]), &[u8]> = HashMap::new();
    for (key, pairs) in run.iter().filter(|(key, _)| !wrong(key)) {
        for pair in pairs.chunks(2) {
            let (field, value) = (arg(pair, 0), arg(pair, 1));
            if last.insert((*key, field), value).is_none() {
                order.push((*key, field));
            }
        }
    }
    // The fields already there: only a hash that was live can have any.
    let mut existing: HashSet<(Vec<u8>, Vec<u8>)> = HashSet::new();
    let old: Vec<&(&[u8], &[u8])> = order
        .iter()
        .filter(|(key, _)| live.get(*key) == Some(&Kind::Hash))
        .collect();
    for chunk in old.chunks(STATEMENT_ROWS) {
        let Some(&&last_pair) = chunk.last() else {
            continue;
        };
        let padded = chunk.len().next_power_of_two();
        let rows = value_rows(ctx.dialect, padded, 2);
        let sql = format!("SELECT key, field FROM hf_hash WHERE (key, field) IN (VALUES {rows})");
        let mut query = stmt(&sql);
        for (key, field) in chunk
            .iter()
            .copied()
            .chain(std::iter::repeat(&last_pair))
            .take(padded)
        {
            query = query.bind(*key).bind(*field);
        }
        for row in ctx.all(query).await? {
            existing.insert((row.try_get(0)?, row.try_get(1)?));
        }
    }
    // PostgreSQL refuses an upsert that names one row twice: its lists are not padded.
    for chunk in order.chunks(STATEMENT_ROWS) {
        let Some(&last_pair) = chunk.last() else {
            continue;
        };
        let written = match ctx.dialect {
            Dialect::Sqlite => chunk.len().next_power_of_two(),
            Dialect::Postgres => chunk.len(),
        };
        let rows = value_rows(ctx.dialect, written, 3);
        let sql = format!(
            "INSERT INTO hf_hash (key, field, value) VALUES {rows} \
             ON CONFLICT (key, field) DO UPDATE SET value = excluded.value"
        );
        let mut query = stmt(&sql);
        for &(key, field) in chunk
            .iter()
            .chain(std::iter::repeat(&last_pair))
            .take(written)
        {
            let value = last.get(&(key, field)).copied().unwrap_or_default();
            query = query.bind(key).bind(field).bind(value);
        }
        ctx.execute(query).await?;
    }
    Ok(run
        .iter()
        .map(|(key, pairs)| {
            (!wrong(key)).then(|| {
                pairs
                    .chunks(2)
                    .filter(|pair| existing.insert((key.to_vec(), arg(pair, 0).to_vec())))
                    .count() as i64
            })
        })
        .collect())
}

pub async fn hsetnx(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    hash(ctx, key).await?;
    if field(ctx, key, arg(a, 2)).await?.is_some() {
        return Ok(int(0));
    }
    ctx.create(key, Kind::Hash, None).await?;
    put(ctx, key, arg(a, 2), arg(a, 3)).await?;
    Ok(int(1))
}

pub async fn hget(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    if !hash(ctx, key).await? {
        return Ok(null());
    }
    Ok(bulk_or_null(field(ctx, key, arg(a, 2)).await?))
}

pub async fn hmget(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let exists = hash(ctx, key).await?;
    let mut out = Vec::new();
    for f in a.iter().skip(2) {
        let v = if exists {
            field(ctx, key, f).await?
        } else {
            None
        };
        out.push(bulk_or_null(v));
    }
    Ok(array(out))
}

pub async fn hexists(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let found = hash(ctx, key).await? && field(ctx, key, arg(a, 2)).await?.is_some();
    Ok(int(i64::from(found)))
}

pub async fn hstrlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let v = if hash(ctx, key).await? {
        field(ctx, key, arg(a, 2)).await?
    } else {
        None
    };
    Ok(int(v.map_or(0, |v| v.len() as i64)))
}

pub async fn hlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    Ok(int(ctx.len(arg(a, 1), Kind::Hash).await?))
}

/// HGETALL (a map), HKEYS, HVALS.
pub async fn hgetall(ctx: &mut Ctx<'_>, a: &[Bytes], keys: bool, values: bool) -> Out {
    let key = arg(a, 1);
    let exists = hash(ctx, key).await?;
    let rows = if exists {
        ctx.all(stmt("SELECT field, value FROM hf_hash WHERE key = $1 ORDER BY id").bind(key))
            .await?
    } else {
        Vec::new()
    };
    if keys && values {
        let mut map = redis_protocol::resp3::types::FrameMap::default();
        for row in &rows {
            map.insert(bulk(bytes_at(row, 0)?), bulk(bytes_at(row, 1)?));
        }
        return Ok(redis_protocol::resp3::types::BytesFrame::Map {
            data: map,
            attributes: None,
        });
    }
    let column = if keys { 0 } else { 1 };
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push(bulk(bytes_at(row, column)?));
    }
    Ok(array(out))
}

pub async fn hdel(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    ctx.remove_named(a, Kind::Hash).await
}

pub async fn hincrby(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let by = args::int(arg(a, 3))?;
    ctx.lock(&[key]).await?;
    hash(ctx, key).await?;
    let current = match field(ctx, key, arg(a, 2)).await? {
        Some(v) => match args::parse_i64(&v) {
            Some(n) => n,
            None => return fail("ERR hash value is not an integer"),
        },
        None => 0,
    };
    let Some(next) = current.checked_add(by) else {
        return fail("ERR increment or decrement would overflow");
    };
    ctx.create(key, Kind::Hash, None).await?;
    put(
        ctx,
        key,
        arg(a, 2),
        itoa::Buffer::new().format(next).as_bytes(),
    )
    .await?;
    Ok(int(next))
}

pub async fn hincrbyfloat(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let by = args::float(arg(a, 3))?;
    // Redis refuses an infinite increment itself, before it looks at the key.
    if !by.is_finite() {
        return fail("ERR value is NaN or Infinity");
    }
    ctx.lock(&[key]).await?;
    hash(ctx, key).await?;
    let current = match field(ctx, key, arg(a, 2)).await? {
        Some(v) => match args::parse_f64(&v) {
            Some(n) => n,
            None => return fail("ERR hash value is not a float"),
        },
        None => 0.0,
    };
    let next = current + by;
    if !next.is_finite() {
        return fail("ERR increment would produce NaN or Infinity");
    }
    let text = args::human_double(next);
    ctx.create(key, Kind::Hash, None).await?;
    put(ctx, key, arg(a, 2), text.as_bytes()).await?;
    Ok(bulk(Bytes::from(text)))
}

/// Every (field, value) of the hash at `key`, in insertion order (empty when absent).
async fn pairs(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Bytes, Bytes)>, Fail> {
    if !hash(ctx, key).await? {
        return Ok(Vec::new());
    }
    let rows = ctx
        .all(stmt("SELECT field, value FROM hf_hash WHERE key = $1 ORDER BY id").bind(key))
        .await?;
    rows.iter()
        .map(|row| Ok((bytes_at(row, 0)?, bytes_at(row, 1)?)))
        .collect()
}

/// `HRANDFIELD key [count [WITHVALUES]]`: distinct fields for a positive count (the whole
/// hash, in its order, when the count reaches its size, as Redis answers), with repeats for
/// a negative one. With values: `[field, value]` pairs in RESP3, flat in RESP2.
pub async fn hrandfield(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (count, with_values) = args::rand_args(a, "WITHVALUES")?;
    let Some(count) = count else {
        // One field: drawn by index, not by reading the hash.
        if !hash(ctx, key).await? {
            return Ok(null());
        }
        return Ok(bulk_or_null(draws::one(ctx, key, Kind::Hash).await?));
    };
    // By index probes while the count is small beside the hash, else from the whole hash.
    let chosen: Vec<(Bytes, Bytes)> = match draws::counted(ctx, key, Kind::Hash, count).await? {
        Some(found) => found
            .into_iter()
            .map(|(field, value)| (field, value.unwrap_or_default()))
            .collect(),
        None => draws::from_whole(pairs(ctx, key).await?, count)?,
    };
    let resp3 = ctx.proto == crate::backend::Proto::Resp3;
    let mut out = Vec::with_capacity(chosen.len() * 2);
    for (field, value) in chosen {
        match (with_values, resp3) {
            (false, _) => out.push(bulk(field)),
            (true, true) => out.push(array(vec![bulk(field), bulk(value)])),
            (true, false) => {
                out.push(bulk(field));
                out.push(bulk(value));
            }
        }
    }
    Ok(array(out))
}

/// Fields past which `HSCAN` answers in pages of `COUNT`; a smaller hash comes whole with
/// cursor 0, in insertion order, as Redis answers for a hash it keeps compactly.
const SCAN_WHOLE: usize = 128;

/// `HSCAN key cursor [MATCH pattern] [COUNT count]`: past [`SCAN_WHOLE`] fields the cursor
/// is the last field's row id, so a field present throughout is returned exactly once.
pub async fn hscan(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (cursor, pattern, count) = scan_args(a)?;
    if !hash(ctx, key).await? {
        return Ok(array(vec![
            bulk(Bytes::from_static(b"0")),
            array(Vec::new()),
        ]));
    }
    let (page, next) = if ctx.count(key, Kind::Hash).await? <= SCAN_WHOLE as i64 {
        (pairs(ctx, key).await?, 0)
    } else {
        let limit = i64::try_from(count.min(100_000)).unwrap_or(100_000);
        let rows = ctx.all(stmt(
            "SELECT id, field, value FROM hf_hash WHERE key = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(key)
        .bind(i64::try_from(cursor).unwrap_or(i64::MAX))
        .bind(limit + 1))
        .await?;
        let more = rows.len() as i64 > limit;
        let mut page = Vec::with_capacity(rows.len());
        let mut last = 0i64;
        for row in rows.iter().take(limit as usize) {
            last = row.try_get(0)?;
            page.push((bytes_at(row, 1)?, bytes_at(row, 2)?));
        }
        (page, if more { last } else { 0 })
    };
    let mut items = Vec::with_capacity(page.len() * 2);
    for (field, value) in page {
        if pattern.is_none_or(|p| args::glob(p, &field)) {
            items.push(bulk(field));
            items.push(bulk(value));
        }
    }
    Ok(array(vec![
        bulk(Bytes::from(next.to_string())),
        array(items),
    ]))
}
