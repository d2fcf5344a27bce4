//! `DUMP` and `RESTORE` on the SQL backends, in Redis's own payload format
//! (`backend::rdb`): a key dumped here restores on Redis, and one dumped on Redis restores
//! here, so a value can be carried between any two backends. Strings, lists, sets, sorted
//! sets and hashes; a stream is refused with an error saying so.

use super::args::{self, is};
use super::store::*;
use super::strings::arg;
use crate::backend::rdb::{self, DumpValue};
use bytes::Bytes;

/// `DUMP key`: the payload, or nil for a missing key.
pub async fn dump(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let Some(meta) = ctx.meta(key).await? else {
        return Ok(null());
    };
    let value = match meta.kind {
        Kind::String => DumpValue::String(meta.value.unwrap_or_default()),
        Kind::List => DumpValue::List(
            column(
                ctx,
                "SELECT value FROM hf_list WHERE key = $1 ORDER BY pos",
                key,
            )
            .await?,
        ),
        Kind::Set => DumpValue::Set(
            column(
                ctx,
                "SELECT member FROM hf_set WHERE key = $1 ORDER BY id",
                key,
            )
            .await?,
        ),
        Kind::Hash => {
            let rows = ctx
                .all(stmt("SELECT field, value FROM hf_hash WHERE key = $1 ORDER BY id").bind(key))
                .await?;
            let mut pairs = Vec::with_capacity(rows.len());
            for row in &rows {
                pairs.push((row.try_get(0)?, row.try_get(1)?));
            }
            DumpValue::Hash(pairs)
        }
        Kind::ZSet => {
            let rows = ctx
                .all(stmt("SELECT member, score FROM hf_zset WHERE key = $1").bind(key))
                .await?;
            let mut pairs = Vec::with_capacity(rows.len());
            for row in &rows {
                pairs.push((row.try_get(0)?, row.try_get(1)?));
            }
            DumpValue::Zset(pairs)
        }
        Kind::Stream => {
            return fail("ERR holdfast: DUMP of a stream is not served by SQL backends yet")
        }
    };
    Ok(bulk(Bytes::from(rdb::dump(&value))))
}

async fn column(ctx: &mut Ctx<'_>, sql: &str, key: &[u8]) -> Result<Vec<Vec<u8>>, Fail> {
    let rows = ctx.all(stmt(sql).bind(key)).await?;
    rows.iter().map(|row| row.try_get(0)).collect()
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`: the key
/// created from the payload, with `ttl` milliseconds to live (0: none; with `ABSTTL`, a
/// Unix time in milliseconds, and one already past creates nothing, as Redis). `IDLETIME`
/// and `FREQ` are checked and ignored: SQL backends evict nothing.
pub async fn restore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    // Checked in Redis's order: the options, an existing key, the TTL, the payload.
    let (mut replace, mut absolute) = (false, false);
    let mut i = 4;
    while i < a.len() {
        let opt = &a[i];
        if is(opt, "REPLACE") {
            replace = true;
        } else if is(opt, "ABSTTL") {
            absolute = true;
        } else if (is(opt, "IDLETIME") || is(opt, "FREQ")) && i + 1 < a.len() {
            let n = args::int(&a[i + 1])?;
            if n < 0 || (is(opt, "FREQ") && n > 255) {
                return fail(if is(opt, "FREQ") {
                    "ERR Invalid FREQ value, must be >= 0 and <= 255"
                } else {
                    "ERR Invalid IDLETIME value, must be >= 0"
                });
            }
            i += 1;
        } else {
            return fail(SYNTAX);
        }
        i += 1;
    }
    ctx.lock(&[key]).await?;
    let old = ctx.meta(key).await?;
    if old.is_some() && !replace {
        return fail("BUSYKEY Target key name already exists.");
    }
    let ttl = args::int(arg(a, 2))?;
    if ttl < 0 {
        return fail("ERR Invalid TTL value, must be >= 0");
    }
    let value = match rdb::restore(arg(a, 3)) {
        Ok(value) => value,
        Err(bad) => return fail(bad.to_string()),
    };
    if let Some(old) = old {
        ctx.purge(key, old.kind).await?;
    }
    let expires = match (ttl, absolute) {
        (0, _) => None,
        (at, true) => Some(at),
        (ms, false) => Some(ctx.now.saturating_add(ms)),
    };
    if expires.is_some_and(|at| at <= ctx.now) {
        return Ok(ok());
    }
    write(ctx, key, &value, expires).await?;
    Ok(ok())
}

/// Creates `key` holding `value`, expiring at `expires`.
async fn write(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    value: &DumpValue,
    expires: Option<i64>,
) -> Result<(), Fail> {
    let kind = match value {
        DumpValue::String(s) => return ctx.put_string(key, s, expires, None).await,
        DumpValue::List(_) => Kind::List,
        DumpValue::Set(_) => Kind::Set,
        DumpValue::Hash(_) => Kind::Hash,
        DumpValue::Zset(_) => Kind::ZSet,
    };
    ctx.create(key, kind, None).await?;
    ctx.set_expiry(key, expires).await?;
    match value {
        DumpValue::String(_) => Ok(()),
        DumpValue::List(items) => {
            for (pos, item) in items.iter().enumerate() {
                ctx.execute(
                    stmt("INSERT INTO hf_list (key, pos, value) VALUES ($1, $2, $3)")
                        .bind(key)
                        .bind(pos as i64)
                        .bind(item.as_slice()),
                )
                .await?;
            }
            Ok(())
        }
        DumpValue::Set(members) => {
            for m in members {
                ctx.execute(
                    stmt("INSERT INTO hf_set (key, member) VALUES ($1, $2) ON CONFLICT (key, member) DO NOTHING")
                        .bind(key)
                        .bind(m.as_slice()),
                )
                .await?;
            }
            Ok(())
        }
        DumpValue::Hash(pairs) => {
            for (f, v) in pairs {
                ctx.execute(
                    stmt("INSERT INTO hf_hash (key, field, value) VALUES ($1, $2, $3) ON CONFLICT (key, field) DO UPDATE SET value = excluded.value")
                        .bind(key)
                        .bind(f.as_slice())
                        .bind(v.as_slice()),
                )
                .await?;
            }
            Ok(())
        }
        DumpValue::Zset(members) => {
            for (m, score) in members {
                if score.is_nan() {
                    return fail(rdb::BadPayload::Format.to_string());
                }
                ctx.execute(
                    stmt("INSERT INTO hf_zset (key, member, score) VALUES ($1, $2, $3) ON CONFLICT (key, member) DO UPDATE SET score = excluded.score")
                        .bind(key)
                        .bind(m.as_slice())
                        .bind(*score),
                )
                .await?;
            }
            Ok(())
        }
    }
}
