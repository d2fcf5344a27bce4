//! `DUMP` and `RESTORE` on the SQL backends, in Redis's own payload format
//! (`backend::rdb`): a key dumped here restores on Redis, and one dumped on Redis restores
//! here, so a value can be carried between any two backends: strings, lists, sets, sorted
//! sets, hashes, and streams with their consumer groups.

use super::args::{self, is};
use super::store::*;
use super::streams::{col, encode_fields, split_fields, Head, Id};
use super::strings::arg;
use crate::backend::rdb::{self, DumpGroup, DumpStream, DumpValue, StreamId};
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
        Kind::Stream => DumpValue::Stream(Box::new(read_stream(ctx, key, meta.value).await?)),
    };
    Ok(bulk(Bytes::from(rdb::dump(&value))))
}

fn pair(id: Id) -> StreamId {
    (id.ms, id.seq)
}

fn unpair(id: StreamId) -> Id {
    Id {
        ms: id.0,
        seq: id.1,
    }
}

/// A stream's entries, counters and groups, read for its payload.
async fn read_stream(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    stored: Option<Vec<u8>>,
) -> Result<DumpStream, Fail> {
    let head = Head::from_stored(stored.as_deref());
    let rows = ctx
        .all(
            stmt("SELECT ms, seq, fields FROM hf_stream WHERE key = $1 ORDER BY ms, seq").bind(key),
        )
        .await?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let fields: Vec<u8> = row.try_get(2)?;
        let pairs = split_fields(&fields)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        entries.push((pair(Id::of_row(row, 0)?), pairs));
    }
    let length = entries.len() as i64;
    let mut groups = Vec::new();
    let rows = ctx
        .all(stmt("SELECT grp, ms, seq, entries_read FROM hf_xgroup WHERE key = $1").bind(key))
        .await?;
    for row in &rows {
        groups.push(DumpGroup {
            name: row.try_get(0)?,
            last: pair(Id::of_row(row, 1)?),
            entries_read: row.try_get(3)?,
            ..DumpGroup::default()
        });
    }
    let rows = ctx
        .all(stmt("SELECT grp, name, seen_at FROM hf_xconsumer WHERE key = $1").bind(key))
        .await?;
    for row in &rows {
        let grp: Vec<u8> = row.try_get(0)?;
        if let Some(g) = groups.iter_mut().find(|g| g.name == grp) {
            g.consumers.push((row.try_get(1)?, row.try_get(2)?));
        }
    }
    let rows = ctx
        .all(
            stmt("SELECT grp, ms, seq, consumer, delivered_at, deliveries FROM hf_xpel WHERE key = $1")
                .bind(key),
        )
        .await?;
    for row in &rows {
        let grp: Vec<u8> = row.try_get(0)?;
        let deliveries: i64 = row.try_get(5)?;
        if let Some(g) = groups.iter_mut().find(|g| g.name == grp) {
            g.pending.push((
                pair(Id::of_row(row, 1)?),
                row.try_get(3)?,
                row.try_get(4)?,
                u64::try_from(deliveries).unwrap_or(0),
            ));
        }
    }
    Ok(DumpStream {
        entries,
        last: pair(head.last),
        max_deleted: pair(head.max_deleted),
        added: head.added(length),
        groups,
    })
}

/// Writes a restored stream's entries, counters and groups under `key`, created already.
async fn write_stream(ctx: &mut Ctx<'_>, key: &[u8], s: &DumpStream) -> Result<(), Fail> {
    for (id, pairs) in &s.entries {
        ctx.execute(
            stmt("INSERT INTO hf_stream (key, ms, seq, fields) VALUES ($1, $2, $3, $4)")
                .bind(key)
                .bind(col(id.0))
                .bind(col(id.1))
                .bind(encode_fields(pairs)),
        )
        .await?;
    }
    let head = Head {
        last: unpair(s.last),
        added: Some(s.added),
        max_deleted: unpair(s.max_deleted),
    };
    ctx.set_value(key, &head.stored(s.entries.len() as i64))
        .await?;
    for g in &s.groups {
        ctx.execute(
            stmt("INSERT INTO hf_xgroup (key, grp, ms, seq, entries_read) VALUES ($1, $2, $3, $4, $5)")
                .bind(key)
                .bind(g.name.as_slice())
                .bind(col(g.last.0))
                .bind(col(g.last.1))
                .bind(g.entries_read),
        )
        .await?;
        for (name, seen) in &g.consumers {
            ctx.execute(
                stmt("INSERT INTO hf_xconsumer (key, grp, name, seen_at) VALUES ($1, $2, $3, $4)")
                    .bind(key)
                    .bind(g.name.as_slice())
                    .bind(name.as_slice())
                    .bind(*seen),
            )
            .await?;
        }
        for (id, owner, delivered, deliveries) in &g.pending {
            ctx.execute(
                stmt(
                    "INSERT INTO hf_xpel (key, grp, ms, seq, consumer, delivered_at, deliveries) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(key)
                .bind(g.name.as_slice())
                .bind(col(id.0))
                .bind(col(id.1))
                .bind(owner.as_slice())
                .bind(*delivered)
                .bind(i64::try_from(*deliveries).unwrap_or(i64::MAX)),
            )
            .await?;
        }
    }
    Ok(())
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
        DumpValue::Stream(_) => Kind::Stream,
    };
    ctx.create(key, kind, None).await?;
    ctx.set_expiry(key, expires).await?;
    match value {
        DumpValue::String(_) => Ok(()),
        DumpValue::Stream(s) => write_stream(ctx, key, s).await,
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
