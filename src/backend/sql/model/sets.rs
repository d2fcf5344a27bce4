//! Set commands over `hf_set`. Members of a set of integers come back in numeric order, as
//! Redis's intset keeps them; other sets in insertion order (Redis's own order there is its
//! hash table's, which no client may rely on).

use super::args::is;
use super::draws;
use super::store::*;
use super::strings::arg;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

async fn set(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Fail> {
    Ok(ctx.typed(key, Kind::Set).await?.is_some())
}

async fn has(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) -> Result<bool, Fail> {
    let row = ctx
        .opt(
            stmt("SELECT 1 FROM hf_set WHERE key = $1 AND member = $2")
                .bind(key)
                .bind(member),
        )
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
        let done = ctx.execute(stmt(
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

/// A run of `SADD key member...` commands that came one after another in a group, each
/// answered as if it ran alone, in order: the members it added (a member another command
/// of the run added first, or named twice, counts once), or None where the key holds
/// another kind (WRONGTYPE). One statement reads every key's kind, one creates the new
/// sets, one per [`STATEMENT_ROWS`] members inserts them and returns those it added,
/// instead of three statements or more per command. A key's kind cannot change within the
/// run (only SADDs), so the one read answers every command's check.
pub async fn sadd_run(
    ctx: &mut Ctx<'_>,
    run: &[(&[u8], &[Bytes])],
) -> Result<Vec<Option<i64>>, Fail> {
    let keys: Vec<&[u8]> = run.iter().map(|(key, _)| *key).collect();
    let live = ctx.collections(&keys, Kind::Set).await?;
    let wrong = |key: &[u8]| live.get(key).is_some_and(|kind| *kind != Kind::Set);
    let pairs: Vec<(&[u8], &[u8])> = run
        .iter()
        .filter(|(key, _)| !wrong(key))
        .flat_map(|(key, members)| members.iter().map(move |m| (*key, m.as_ref())))
        .collect();
    let mut added: std::collections::HashSet<(Vec<u8>, Vec<u8>)> =
        std::collections::HashSet::with_capacity(pairs.len());
    for chunk in pairs.chunks(STATEMENT_ROWS) {
        let Some(&last) = chunk.last() else { continue };
        // Padded with the last pair: a repeat conflicts with the first and is skipped, and
        // a statement of each size is prepared once.
        let padded = chunk.len().next_power_of_two();
        let rows = value_rows(ctx.dialect, padded, 2);
        let sql = format!(
            "INSERT INTO hf_set (key, member) VALUES {rows} \
             ON CONFLICT (key, member) DO NOTHING RETURNING key, member"
        );
        let mut query = stmt(&sql);
        for (key, member) in chunk.iter().chain(std::iter::repeat(&last)).take(padded) {
            query = query.bind(*key).bind(*member);
        }
        ctx.wrote = true;
        for row in ctx.all(query).await? {
            added.insert((row.try_get(0)?, row.try_get(1)?));
        }
    }
    // Each added pair is credited to the first command, in order, that named it.
    Ok(run
        .iter()
        .map(|(key, members)| {
            (!wrong(key)).then(|| {
                members
                    .iter()
                    .filter(|m| added.remove(&(key.to_vec(), m.to_vec())))
                    .count() as i64
            })
        })
        .collect())
}

pub async fn srem(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    ctx.remove_named(a, Kind::Set).await
}

pub async fn smembers(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let all = members(ctx, arg(a, 1)).await?;
    Ok(set_reply(ctx, all))
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
    Ok(int(ctx.len(arg(a, 1), Kind::Set).await?))
}

/// The members of the set at `key` (empty when absent), in the order SMEMBERS gives them;
/// WRONGTYPE for another kind.
async fn members(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<Bytes>, Fail> {
    if !set(ctx, key).await? {
        return Ok(Vec::new());
    }
    let rows = ctx
        .all(stmt("SELECT member FROM hf_set WHERE key = $1 ORDER BY id").bind(key))
        .await?;
    rows.iter().map(|row| bytes_at(row, 0)).collect()
}

/// Members as Redis lists a set: numeric order when every one is an integer (an intset),
/// else as found.
fn in_set_order(mut members: Vec<Bytes>) -> Vec<Bytes> {
    let numbers: Option<Vec<i64>> = members.iter().map(|m| super::args::parse_i64(m)).collect();
    if let Some(numbers) = numbers {
        let mut pairs: Vec<(i64, Bytes)> = numbers.into_iter().zip(members).collect();
        pairs.sort_by_key(|(n, _)| *n);
        members = pairs.into_iter().map(|(_, m)| m).collect();
    }
    members
}

/// A set reply: `~` in RESP3, an array in RESP2.
fn set_reply(ctx: &Ctx<'_>, members: Vec<Bytes>) -> Frame {
    set_frame(ctx.proto, members)
}

/// [`set_reply`] in `proto` (a batched read has no command context).
pub(crate) fn set_frame(proto: crate::backend::Proto, members: Vec<Bytes>) -> Frame {
    let items = in_set_order(members).into_iter().map(bulk);
    match proto {
        crate::backend::Proto::Resp3 => Frame::Set {
            data: items.collect(),
            attributes: None,
        },
        crate::backend::Proto::Resp2 => array(items.collect()),
    }
}

/// Set algebra over several keys.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Algebra {
    Inter,
    Union,
    Diff,
}

/// The result of `op` over `keys`, every key's kind checked first (WRONGTYPE wins over an
/// absent key, as in Redis).
async fn combine(ctx: &mut Ctx<'_>, op: Algebra, keys: &[Bytes]) -> Result<Vec<Bytes>, Fail> {
    if let Algebra::Inter = op {
        return intersect(ctx, keys).await;
    }
    let mut sets = Vec::with_capacity(keys.len());
    for key in keys {
        sets.push(members(ctx, key).await?);
    }
    let mut sets = sets.into_iter();
    let mut out = sets.next().unwrap_or_default();
    for other in sets {
        let other: std::collections::HashSet<Bytes> = other.into_iter().collect();
        match op {
            Algebra::Inter => out.retain(|m| other.contains(m)),
            Algebra::Diff => out.retain(|m| !other.contains(m)),
            Algebra::Union => {
                let have: std::collections::HashSet<Bytes> = out.iter().cloned().collect();
                let mut more: Vec<Bytes> =
                    other.into_iter().filter(|m| !have.contains(m)).collect();
                more.sort();
                out.extend(more);
            }
        }
    }
    Ok(out)
}

/// The members common to the sets at `keys`: the smallest read, each other one asked only
/// about those (its `(key, member)` index), so the cost follows the smallest set as in
/// Redis, not the sum of them all. Every key's kind is checked first.
async fn intersect(ctx: &mut Ctx<'_>, keys: &[Bytes]) -> Result<Vec<Bytes>, Fail> {
    let mut lens = Vec::with_capacity(keys.len());
    for key in keys {
        lens.push(ctx.len(key, Kind::Set).await?);
    }
    let Some(smallest) = (0..keys.len()).min_by_key(|&i| lens[i]) else {
        return Ok(Vec::new());
    };
    if lens[smallest] == 0 {
        return Ok(Vec::new());
    }
    let mut out = members(ctx, &keys[smallest]).await?;
    for (i, key) in keys.iter().enumerate() {
        if i == smallest || out.is_empty() {
            continue;
        }
        let mut kept = std::collections::HashSet::with_capacity(out.len());
        for chunk in out.chunks(STATEMENT_ROWS) {
            let Some(last) = chunk.last() else { continue };
            // Padded with the last member: a few sizes, each prepared once.
            let padded = chunk.len().next_power_of_two();
            let first = placeholders_from(ctx.dialect, 1, 1);
            let list = placeholders_from(ctx.dialect, 2, padded);
            let sql =
                format!("SELECT member FROM hf_set WHERE key = {first} AND member IN ({list})");
            let mut query = stmt(&sql).bind(key.as_ref());
            for member in chunk.iter().chain(std::iter::repeat(last)).take(padded) {
                query = query.bind(member.as_ref());
            }
            for row in ctx.all(query).await? {
                kept.insert(bytes_at(&row, 0)?);
            }
        }
        out.retain(|m| kept.contains(m));
    }
    Ok(out)
}

/// Replaces whatever `key` held with a set of `members` (none: the key is deleted).
async fn replace(ctx: &mut Ctx<'_>, key: &[u8], members: &[Bytes]) -> Result<(), Fail> {
    ctx.delete(key).await?;
    if members.is_empty() {
        return Ok(());
    }
    ctx.create(key, Kind::Set, None).await?;
    insert(ctx, key, members).await?;
    Ok(())
}

/// Adds `members` to the set at `key`, whose key row exists; returns how many were new.
async fn insert(ctx: &mut Ctx<'_>, key: &[u8], members: &[Bytes]) -> Result<i64, Fail> {
    let mut n = 0;
    for chunk in members.chunks(500) {
        let rows = (0..chunk.len())
            .map(|i| format!("($1, ${})", i + 2))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO hf_set (key, member) VALUES {rows} ON CONFLICT (key, member) DO NOTHING"
        );
        let mut insert = stmt(&sql).bind(key);
        for m in chunk {
            insert = insert.bind(m.as_ref());
        }
        n += ctx.execute(insert).await?.rows_affected() as i64;
    }
    Ok(n)
}

/// `SINTER` / `SUNION` / `SDIFF key [key ...]`
pub async fn algebra(ctx: &mut Ctx<'_>, a: &[Bytes], op: Algebra) -> Out {
    let out = combine(ctx, op, a.get(1..).unwrap_or_default()).await?;
    Ok(set_reply(ctx, out))
}

/// `SINTERSTORE` / `SUNIONSTORE` / `SDIFFSTORE destination key [key ...]`
pub async fn algebra_store(ctx: &mut Ctx<'_>, a: &[Bytes], op: Algebra) -> Out {
    let keys: Vec<&[u8]> = a.iter().skip(1).map(|k| k.as_ref()).collect();
    ctx.lock(&keys).await?;
    let out = combine(ctx, op, a.get(2..).unwrap_or_default()).await?;
    replace(ctx, arg(a, 1), &out).await?;
    Ok(int(out.len() as i64))
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`
pub async fn sintercard(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let numkeys = match super::args::parse_i64(arg(a, 1)) {
        Some(n) if n > 0 => n as usize,
        Some(_) => return fail("ERR numkeys should be greater than 0"),
        None => return fail("ERR numkeys should be greater than 0"),
    };
    if numkeys > a.len().saturating_sub(2) {
        return fail("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0i64;
    let mut i = 2 + numkeys;
    while i < a.len() {
        if is(arg(a, i), "LIMIT") && i + 1 < a.len() {
            limit = match super::args::parse_i64(arg(a, i + 1)) {
                Some(n) if n >= 0 => n,
                Some(_) => return fail("ERR LIMIT can't be negative"),
                None => return fail("ERR LIMIT can't be negative"),
            };
            i += 2;
        } else {
            return fail(SYNTAX);
        }
    }
    let out = combine(ctx, Algebra::Inter, &a[2..2 + numkeys]).await?;
    let n = out.len() as i64;
    Ok(int(if limit > 0 { n.min(limit) } else { n }))
}

/// `SMOVE source destination member`
pub async fn smove(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (src, dst, member) = (arg(a, 1), arg(a, 2), arg(a, 3));
    ctx.lock(&[src, dst]).await?;
    let Some(from) = ctx.meta(src).await? else {
        return Ok(int(0));
    };
    let to = ctx.meta(dst).await?;
    if from.kind != Kind::Set || to.as_ref().is_some_and(|m| m.kind != Kind::Set) {
        return fail(WRONGTYPE);
    }
    if src == dst {
        return Ok(int(i64::from(has(ctx, src, member).await?)));
    }
    let moved = ctx
        .remove(src, Kind::Set, &[Bytes::copy_from_slice(member)])
        .await?;
    if moved == 0 {
        return Ok(int(0));
    }
    ctx.create(dst, Kind::Set, None).await?;
    insert(ctx, dst, &[Bytes::copy_from_slice(member)]).await?;
    Ok(int(1))
}

/// `SPOP key [count]`: members chosen at random, removed.
pub async fn spop(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let count = match a.get(2) {
        None => None,
        Some(c) => match super::args::parse_i64(c) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return fail("ERR value is out of range, must be positive"),
        },
    };
    if a.len() > 3 {
        return fail(SYNTAX);
    }
    ctx.lock(&[key]).await?;
    if count.is_none() {
        // One member: drawn by index, not by reading the set.
        if !set(ctx, key).await? {
            return Ok(null());
        }
        let chosen = draws::one(ctx, key, Kind::Set).await?;
        if let Some(member) = &chosen {
            ctx.remove(key, Kind::Set, std::slice::from_ref(member))
                .await?;
        }
        return Ok(bulk_or_null(chosen));
    }
    let take = i64::try_from(count.unwrap_or(1)).unwrap_or(i64::MAX);
    let chosen = drawn(ctx, key, take).await?;
    if !chosen.is_empty() {
        ctx.remove(key, Kind::Set, &chosen).await?;
    }
    Ok(match count {
        None => bulk_or_null(chosen.into_iter().next()),
        Some(_) => set_reply(ctx, chosen),
    })
}

/// `SRANDMEMBER key [count]`: distinct members for a positive count, with repeats for a
/// negative one.
pub async fn srandmember(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let count = match a.get(2) {
        None => None,
        Some(c) => Some(super::args::int(c)?),
    };
    if a.len() > 3 {
        return fail(SYNTAX);
    }
    let Some(n) = count else {
        // One member: drawn by index, not by reading the set.
        if !set(ctx, key).await? {
            return Ok(null());
        }
        return Ok(bulk_or_null(draws::one(ctx, key, Kind::Set).await?));
    };
    Ok(array(
        drawn(ctx, key, n).await?.into_iter().map(bulk).collect(),
    ))
}

/// Members of the set at `key` drawn as a count draws them (`draws`): by index probes while
/// the count is small beside the set, else from the whole set.
async fn drawn(ctx: &mut Ctx<'_>, key: &[u8], count: i64) -> Result<Vec<Bytes>, Fail> {
    match draws::counted(ctx, key, Kind::Set, count).await? {
        Some(found) => Ok(found.into_iter().map(|(member, _)| member).collect()),
        None => draws::from_whole(members(ctx, key).await?, count),
    }
}

/// Members past which `SSCAN` answers in pages of `COUNT`; a smaller set comes whole with
/// cursor 0, as Redis answers for a set it keeps compactly.
const SCAN_WHOLE: usize = 512;

/// `SSCAN key cursor [MATCH pattern] [COUNT count]`: past [`SCAN_WHOLE`] members the cursor
/// is the last member's row id, so a member present throughout is returned exactly once.
pub async fn sscan(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (cursor, pattern, count) = super::args::scan_args(a)?;
    if !set(ctx, key).await? {
        return Ok(array(vec![
            bulk(Bytes::from_static(b"0")),
            array(Vec::new()),
        ]));
    }
    let (page, next) =
        if ctx.count(key, Kind::Set).await? <= SCAN_WHOLE as i64 {
            (in_set_order(members(ctx, key).await?), 0)
        } else {
            let after = i64::try_from(cursor).unwrap_or(i64::MAX);
            let limit = i64::try_from(count.min(100_000)).unwrap_or(100_000);
            let rows = ctx.all(stmt(
            "SELECT id, member FROM hf_set WHERE key = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(key)
        .bind(after)
        .bind(limit + 1))
        .await?;
            let more = rows.len() as i64 > limit;
            let mut page = Vec::with_capacity(rows.len());
            let mut last = 0i64;
            for row in rows.iter().take(limit as usize) {
                last = row.try_get(0)?;
                page.push(bytes_at(row, 1)?);
            }
            (page, if more { last } else { 0 })
        };
    let items = page
        .into_iter()
        .filter(|m| pattern.is_none_or(|p| super::args::glob(p, m)))
        .map(bulk)
        .collect();
    Ok(array(vec![
        bulk(Bytes::from(next.to_string())),
        array(items),
    ]))
}
