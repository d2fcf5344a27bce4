//! Set commands over `hf_set`. Members of a set of integers come back in numeric order, as
//! Redis's intset keeps them; other sets in insertion order (Redis's own order there is its
//! hash table's, which no client may rely on).

use super::store::*;
use super::strings::arg;
use bytes::Bytes;

async fn set(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Fail> {
    Ok(ctx.typed(key, Kind::Set).await?.is_some())
}

async fn has(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) -> Result<bool, Fail> {
    let row = sqlx::query("SELECT 1 FROM hf_set WHERE key = $1 AND member = $2")
        .bind(key)
        .bind(member)
        .fetch_optional(&mut *ctx.conn)
        .await?;
    Ok(row.is_some())
}

pub async fn sadd(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    set(ctx, key).await?;
    ctx.create(key, Kind::Set, None).await?;
    let mut n = 0;
    for m in a.iter().skip(2) {
        let done = ctx.exec(sqlx::query(
            "INSERT INTO hf_set (key, member) VALUES ($1, $2) ON CONFLICT (key, member) DO NOTHING",
        )
        .bind(key)
        .bind(m.as_ref())
        )
        .await?;
        n += done.rows_affected() as i64;
    }
    Ok(int(n))
}

pub async fn srem(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    if !set(ctx, key).await? {
        return Ok(int(0));
    }
    Ok(int(ctx
        .remove(key, Kind::Set, a.get(2..).unwrap_or_default())
        .await?))
}

pub async fn smembers(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let rows = if set(ctx, key).await? {
        sqlx::query("SELECT member FROM hf_set WHERE key = $1 ORDER BY id")
            .bind(key)
            .fetch_all(&mut *ctx.conn)
            .await?
    } else {
        Vec::new()
    };
    let mut members = Vec::with_capacity(rows.len());
    for row in &rows {
        members.push(bytes_at(row, 0)?);
    }
    let numbers: Option<Vec<i64>> = members.iter().map(|m| super::args::parse_i64(m)).collect();
    if let Some(numbers) = numbers {
        let mut pairs: Vec<(i64, Bytes)> = numbers.into_iter().zip(members).collect();
        pairs.sort_by_key(|(n, _)| *n);
        members = pairs.into_iter().map(|(_, m)| m).collect();
    }
    let items = members.into_iter().map(bulk).collect();
    Ok(match ctx.proto {
        crate::backend::Proto::Resp3 => redis_protocol::resp3::types::BytesFrame::Set {
            data: items,
            attributes: None,
        },
        crate::backend::Proto::Resp2 => array(items.into_iter().collect()),
    })
}

pub async fn sismember(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let found = set(ctx, key).await? && has(ctx, key, arg(a, 2)).await?;
    Ok(int(i64::from(found)))
}

pub async fn smismember(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let exists = set(ctx, key).await?;
    let mut out = Vec::new();
    for m in a.iter().skip(2) {
        let found = exists && has(ctx, key, m).await?;
        out.push(int(i64::from(found)));
    }
    Ok(array(out))
}

pub async fn scard(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    if !set(ctx, key).await? {
        return Ok(int(0));
    }
    Ok(int(ctx.count(key, Kind::Set).await?))
}
