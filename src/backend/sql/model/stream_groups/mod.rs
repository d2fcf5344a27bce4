//! Stream consumer groups on SQL backends: `XGROUP`, `XREADGROUP`, `XACK`, `XPENDING`,
//! `XCLAIM`, `XAUTOCLAIM`, and `XINFO`.
//!
//! A group is a row of `hf_xgroup` (its last-delivered id and entries-read counter), its
//! consumers rows of `hf_xconsumer` (the time each was last seen), and its pending entries
//! rows of `hf_xpel` (the owner, the last delivery time and the delivery count). All three
//! belong to the stream's key: they are removed, renamed, copied and flushed with it.
//! Every rule here follows Redis 7.0 (`t_stream.c`), including its order of checks, so the
//! differential test can hold these commands to Redis's bytes; times are holdfast's clock.
//! `XREADGROUP … BLOCK` waits as the other blocking commands do (`blocking`).
//!
//! This file holds what both rooms share: a group's row, its consumers' last-seen times, and
//! the stream's head. `manage`: `XGROUP` and `XINFO`; `consume`: `XREADGROUP`, `XACK`,
//! `XPENDING`, `XCLAIM` and `XAUTOCLAIM`.

pub(super) mod consume;
pub(super) mod manage;

use super::store::*;
use super::streams::{col, parse_id, Head, Id, INVALID_ID};
use bytes::Bytes;

/// Redis's counter for "unknown": a group's entries-read that cannot be computed.
const UNKNOWN: i64 = -1;

/// A consumer group's own state.
#[derive(Clone, Copy, Debug)]
struct Group {
    last: Id,
    entries_read: i64,
}

async fn group(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8]) -> Result<Option<Group>, Fail> {
    let row = ctx
        .opt(
            stmt("SELECT ms, seq, entries_read FROM hf_xgroup WHERE key = $1 AND grp = $2")
                .bind(key)
                .bind(name),
        )
        .await?;
    match row {
        Some(row) => Ok(Some(Group {
            last: Id::of_row(&row, 0)?,
            entries_read: row.try_get(2)?,
        })),
        None => Ok(None),
    }
}

async fn save_group(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8], g: Group) -> Result<(), Fail> {
    ctx.execute(
        stmt(
            "UPDATE hf_xgroup SET ms = $3, seq = $4, entries_read = $5 WHERE key = $1 AND grp = $2",
        )
        .bind(key)
        .bind(name)
        .bind(col(g.last.ms))
        .bind(col(g.last.seq))
        .bind(g.entries_read),
    )
    .await?;
    Ok(())
}

/// Marks a consumer seen now, creating it if it is new; true if it was created.
async fn seen(ctx: &mut Ctx<'_>, key: &[u8], grp: &[u8], name: &[u8]) -> Result<bool, Fail> {
    let done = ctx
        .execute(
            stmt("UPDATE hf_xconsumer SET seen_at = $4 WHERE key = $1 AND grp = $2 AND name = $3")
                .bind(key)
                .bind(grp)
                .bind(name)
                .bind(ctx.now),
        )
        .await?;
    if done.rows_affected() > 0 {
        return Ok(false);
    }
    ctx.execute(
        stmt("INSERT INTO hf_xconsumer (key, grp, name, seen_at) VALUES ($1, $2, $3, $4)")
            .bind(key)
            .bind(grp)
            .bind(name)
            .bind(ctx.now),
    )
    .await?;
    Ok(true)
}

/// The stream's head, or None when the key does not exist; WRONGTYPE for another kind.
async fn stream(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Head>, Fail> {
    Ok(ctx
        .typed(key, Kind::Stream)
        .await?
        .map(|m| Head::from_stored(m.value.as_deref())))
}

/// A strict id: `ms[-seq]`, neither `-` nor `+`.
fn strict(text: &[u8]) -> Result<Id, Fail> {
    match parse_id(text, 0, false) {
        Some(id) => Ok(id),
        None => fail(INVALID_ID),
    }
}

fn arg(a: &[Bytes], i: usize) -> &[u8] {
    a.get(i).map(|b| b.as_ref()).unwrap_or_default()
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}
