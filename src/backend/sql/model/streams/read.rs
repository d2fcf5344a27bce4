//! Streams read: `XRANGE` and `XREVRANGE`, `XREAD` (one attempt; blocking is the client's
//! connection's), `XLEN`, and `HF.XLAST`, the last ids a blocked `XREAD`'s `$` stands for.

use super::super::args::{self, is};
use super::super::store::*;
use super::super::strings::arg;
use super::{col, entry, parse_id, range_end, uncol, Id, INVALID_ID};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

pub async fn xlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    Ok(int(ctx.len(arg(a, 1), Kind::Stream).await?))
}

/// What an `XRANGE` or `XREVRANGE` asks for, its arguments checked (a syntax or id error
/// is answered before the key is looked at, as in Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range<'a> {
    pub key: &'a [u8],
    /// The lowest and highest id taken, both included (`XREVRANGE` names them the other way
    /// round).
    pub lo: Option<Id>,
    pub hi: Option<Id>,
    pub count: Option<i64>,
}

impl Range<'_> {
    /// Whether no entry can be in it (so nothing need be read).
    pub fn empty(&self) -> bool {
        !matches!((self.lo, self.hi), (Some(lo), Some(hi)) if lo <= hi)
    }
}

pub(crate) fn range_args(a: &[Bytes], rev: bool) -> Result<Range<'_>, Fail> {
    let key = arg(a, 1);
    let (lo_text, hi_text) = if rev {
        (arg(a, 3), arg(a, 2))
    } else {
        (arg(a, 2), arg(a, 3))
    };
    let lo = range_end(lo_text, true)?;
    let hi = range_end(hi_text, false)?;
    let mut count = None;
    let mut j = 4;
    while j < a.len() {
        if is(arg(a, j), "COUNT") && j + 1 < a.len() {
            count = Some(args::int(arg(a, j + 1))?.max(0));
            j += 2;
        } else {
            return fail(SYNTAX);
        }
    }
    Ok(Range { key, lo, hi, count })
}

/// XRANGE and XREVRANGE.
pub async fn xrange(ctx: &mut Ctx<'_>, a: &[Bytes], rev: bool) -> Out {
    let range = range_args(a, rev)?;
    let (key, count) = (range.key, range.count);
    if ctx.typed(key, Kind::Stream).await?.is_none() {
        return Ok(array(Vec::new()));
    }
    // Redis answers COUNT 0 with a null array, not an empty one.
    if count == Some(0) {
        return Ok(null());
    }
    let (Some(lo), Some(hi)) = (range.lo, range.hi) else {
        return Ok(array(Vec::new()));
    };
    if range.empty() {
        return Ok(array(Vec::new()));
    }
    let order = if rev { "ms DESC, seq DESC" } else { "ms, seq" };
    let rows = ctx
        .all(
            stmt(format!(
                "SELECT ms, seq, fields FROM hf_stream WHERE key = $1 \
         AND (ms, seq) >= ($2, $3) AND (ms, seq) <= ($4, $5) \
         ORDER BY {order} LIMIT $6"
            ))
            .bind(key)
            .bind(col(lo.ms))
            .bind(col(lo.seq))
            .bind(col(hi.ms))
            .bind(col(hi.seq))
            .bind(count.unwrap_or(i64::MAX)),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let id = Id {
            ms: uncol(row.try_get(0)?),
            seq: uncol(row.try_get(1)?),
        };
        let fields: Vec<u8> = row.try_get(2)?;
        out.push(entry(id, &fields));
    }
    Ok(array(out))
}

/// The stream's last id (0-0 when there is no stream); WRONGTYPE for another kind.
async fn last_id(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Id, Fail> {
    let meta = ctx.typed(key, Kind::Stream).await?;
    Ok(Id::from_stored(
        meta.as_ref().and_then(|m| m.value.as_deref()),
    ))
}

/// `XREAD [COUNT count] [BLOCK ms] STREAMS key ... id ...`, one attempt: the entries past
/// each id (`$`: the stream's last id now), nil when there are none. A map in RESP3.
pub async fn xread(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut count = 0i64;
    let mut i = 1;
    let streams = loop {
        let Some(opt) = a.get(i) else {
            return fail(SYNTAX);
        };
        if is(opt, "COUNT") && i + 1 < a.len() {
            count = args::int(arg(a, i + 1))?.max(0);
            i += 2;
        } else if is(opt, "BLOCK") && i + 1 < a.len() {
            block_ms(arg(a, i + 1))?;
            i += 2;
        } else if is(opt, "STREAMS") {
            break i + 1;
        } else {
            return fail(SYNTAX);
        }
    };
    let rest = a.get(streams..).unwrap_or_default();
    if rest.is_empty() || rest.len() % 2 != 0 {
        return fail(
            "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        );
    }
    let (keys, ids) = rest.split_at(rest.len() / 2);
    let mut after = Vec::with_capacity(ids.len());
    for (key, id) in keys.iter().zip(ids) {
        if id.as_ref() == b"$" {
            after.push(last_id(ctx, key).await?);
        } else {
            let Some(id) = parse_id(id, 0, false) else {
                return fail(INVALID_ID);
            };
            ctx.typed(key, Kind::Stream).await?;
            after.push(id);
        }
    }
    let mut found = Vec::new();
    for (key, from) in keys.iter().zip(after) {
        let entries = entries_after(ctx, key, from, count).await?;
        if entries.is_empty() {
            continue;
        }
        let entries = entries
            .iter()
            .map(|(id, fields)| entry(*id, fields))
            .collect();
        found.push((key.clone(), array(entries)));
    }
    if found.is_empty() {
        return Ok(null());
    }
    Ok(keyed(ctx.proto, found))
}

/// Up to `count` (0: all) entries after `after`, in order.
pub(crate) async fn entries_after(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    after: Id,
    count: i64,
) -> Result<Vec<(Id, Vec<u8>)>, Fail> {
    let Some(from) = after.next() else {
        return Ok(Vec::new());
    };
    let rows = ctx
        .all(
            stmt(
                "SELECT ms, seq, fields FROM hf_stream WHERE key = $1 \
         AND (ms, seq) >= ($2, $3) ORDER BY ms, seq LIMIT $4",
            )
            .bind(key)
            .bind(col(from.ms))
            .bind(col(from.seq))
            .bind(if count > 0 { count } else { i64::MAX }),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((Id::of_row(row, 0)?, row.try_get(2)?));
    }
    Ok(out)
}

/// `XREAD`'s and `XREADGROUP`'s reply: the entries of each stream, a map in RESP3.
pub(crate) fn keyed(proto: crate::backend::Proto, found: Vec<(Bytes, Frame)>) -> Frame {
    match proto {
        crate::backend::Proto::Resp3 => {
            let mut map = redis_protocol::resp3::types::FrameMap::default();
            for (key, entries) in found {
                map.insert(bulk(key), entries);
            }
            Frame::Map {
                data: map,
                attributes: None,
            }
        }
        crate::backend::Proto::Resp2 => array(
            found
                .into_iter()
                .map(|(key, entries)| array(vec![bulk(key), entries]))
                .collect(),
        ),
    }
}

/// `XREAD`'s `BLOCK` argument: milliseconds, 0 for ever.
pub fn block_ms(text: &[u8]) -> Result<u64, Fail> {
    match args::parse_i64(text) {
        Some(ms) if ms < 0 => fail("ERR timeout is negative"),
        Some(ms) => Ok(ms.unsigned_abs()),
        None => fail("ERR timeout is not an integer or out of range"),
    }
}

/// `HF.XLAST key ...` (holdfast's own): each stream's last id now, for a blocked `XREAD`
/// whose `$` must not move while it waits.
pub async fn xlast(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut out = Vec::with_capacity(a.len());
    for key in a.iter().skip(1) {
        out.push(bulk(last_id(ctx, key).await?.text()));
    }
    Ok(array(out))
}
