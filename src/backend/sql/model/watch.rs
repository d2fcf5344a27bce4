//! `WATCH` on SQL backends: optimistic locking that holds across holdfasts sharing one
//! database.
//!
//! `WATCH key` makes sure `key` has a row in `hf_watch` and remembers its version. Every group
//! commit raises the version of the watched keys its writes changed, in the same transaction
//! (one statement per group, and only a probe while nothing is watched). `EXEC` compares the
//! versions it remembered inside its own transaction, after taking the keys' locks
//! (PostgreSQL): a key changed since its `WATCH`, by any client of any holdfast, makes
//! `EXEC` apply nothing and answer nil. A row is never removed: one per key ever watched.
//! Decided where Redis differs: a watched key that only expires does not count as changed.

use super::args;
use super::store::{array, fail, int, stmt, Ctx, Fail, Out};
use bytes::Bytes;

/// The internal command that registers keys and answers their versions.
pub const WATCH: &[u8] = b"HF.WATCH";
/// The internal command, first in `EXEC`'s transaction, that checks the versions.
pub const CHECK: &[u8] = b"HF.WATCHED";

/// The keys a write command may change: None for every key (`FLUSHDB`, `FLUSHALL`). What it
/// only reads (the sources of `SINTERSTORE`) is not among them.
pub fn modified(a: &[Bytes]) -> Option<Vec<&[u8]>> {
    let name = a
        .first()
        .map(|n| n.to_ascii_uppercase())
        .unwrap_or_default();
    let at = |i: usize| a.get(i).map(|k| k.as_ref());
    let from = |i: usize| a.iter().skip(i).map(|k| k.as_ref()).collect::<Vec<_>>();
    let counted = |numkeys: usize| {
        let n = args::parse_i64(at(numkeys).unwrap_or_default())
            .unwrap_or(0)
            .max(0) as usize;
        a.iter()
            .skip(numkeys + 1)
            .take(n)
            .map(|k| k.as_ref())
            .collect::<Vec<_>>()
    };
    Some(match name.as_slice() {
        b"FLUSHDB" | b"FLUSHALL" => return None,
        b"HF.WATCH" | b"HF.WATCHED" => Vec::new(),
        b"MSET" | b"MSETNX" => a.iter().skip(1).step_by(2).map(|k| k.as_ref()).collect(),
        b"DEL" | b"UNLINK" => from(1),
        b"RENAME" | b"RENAMENX" | b"SMOVE" | b"LMOVE" | b"RPOPLPUSH" | b"BLMOVE"
        | b"BRPOPLPUSH" => [at(1), at(2)].into_iter().flatten().collect(),
        b"COPY" => at(2).into_iter().collect(),
        b"BITOP" => at(2).into_iter().collect(),
        // As in Redis, a consumer group's bookkeeping is not a change of its stream;
        // `XGROUP CREATE` may create the stream (`MKSTREAM`).
        b"XREADGROUP" | b"XACK" | b"XCLAIM" | b"XAUTOCLAIM" => Vec::new(),
        b"XGROUP" if at(1).is_some_and(|s| s.eq_ignore_ascii_case(b"CREATE")) => {
            at(2).into_iter().collect()
        }
        b"XGROUP" => Vec::new(),
        // Only its STORE destination, if any.
        b"SORT" => a
            .iter()
            .position(|x| x.eq_ignore_ascii_case(b"STORE"))
            .and_then(|i| at(i + 1))
            .into_iter()
            .collect(),
        b"LMPOP" | b"ZMPOP" => counted(1),
        b"BLMPOP" | b"BZMPOP" => counted(2),
        b"BLPOP" | b"BRPOP" | b"BZPOPMIN" | b"BZPOPMAX" => a
            .get(1..a.len().saturating_sub(1))
            .unwrap_or_default()
            .iter()
            .map(|k| k.as_ref())
            .collect(),
        _ => at(1).into_iter().collect(),
    })
}

/// Raises the version of every watched key among `keys` (None: of every watched key).
pub async fn touch(ctx: &mut Ctx<'_>, keys: Option<&[&[u8]]>) -> Result<(), Fail> {
    let Some(keys) = keys else {
        ctx.execute(stmt("UPDATE hf_watch SET version = version + 1"))
            .await?;
        return Ok(());
    };
    // Nothing watched yet, the usual case: one probe instead of a lookup per key (a group's
    // keys, bound and searched, cost more than its upsert). The group holds its keys' locks
    // (PostgreSQL) or the database's write lock (SQLite), and `WATCH` writes its row under
    // the same, so a row the probe misses cannot be for one of these keys.
    let watched: Option<i64> = ctx
        .scalar_opt(stmt("SELECT 1 FROM hf_watch LIMIT 1"))
        .await?;
    if watched.is_none() {
        return Ok(());
    }
    for chunk in keys.chunks(512) {
        // Padded to a power of two with its last key (a few statement sizes, each prepared
        // once; a key named twice is raised once).
        let Some(last) = chunk.last() else { continue };
        let padded = chunk.len().next_power_of_two();
        let list = super::store::placeholders(ctx.dialect, padded);
        let sql = format!("UPDATE hf_watch SET version = version + 1 WHERE key IN ({list})");
        let mut update = stmt(&sql);
        for key in chunk.iter().chain(std::iter::repeat(last)).take(padded) {
            update = update.bind(*key);
        }
        ctx.execute(update).await?;
    }
    Ok(())
}

async fn version(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<i64>, Fail> {
    let v: Option<i64> = ctx
        .scalar_opt(stmt("SELECT version FROM hf_watch WHERE key = $1").bind(key))
        .await?;
    Ok(v)
}

/// `HF.WATCH key ...`: each key's version, its row created at 0 if it had none.
pub async fn watch(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut out = Vec::with_capacity(a.len().saturating_sub(1));
    for key in a.iter().skip(1) {
        ctx.execute(
            stmt("INSERT INTO hf_watch (key, version) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING")
                .bind(key.as_ref()),
        )
        .await?;
        out.push(int(version(ctx, key).await?.unwrap_or(0)));
    }
    Ok(array(out))
}

/// `HF.WATCHED key version ...`: fails with [`Fail::Watched`] when a key's version moved.
pub async fn check(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    for pair in a.get(1..).unwrap_or_default().chunks(2) {
        let [key, seen] = pair else {
            return fail("ERR holdfast: a malformed watch check");
        };
        let seen = args::parse_i64(seen);
        if version(ctx, key).await? != seen {
            return Err(Fail::Watched);
        }
    }
    Ok(super::store::ok())
}
