//! Streams as an append-only log over `hf_stream`. An id's two u64 halves are stored with
//! their top bit flipped, so signed 64-bit columns sort them as unsigned. The stream's
//! [`Head`] lives in its key row (`value`): its last id, kept past deletions as Redis keeps
//! it, the number of entries ever added and the greatest id `XDEL` removed (`XINFO` and the
//! consumer groups' lag read them). Consumer groups are `stream_groups`.
//!
//! This file is the log's representation: ids, the head, a stream's shape, field encoding,
//! and an entry as the commands answer it. `read`: `XRANGE`, `XREVRANGE`, `XREAD`, `XLEN`
//! and `HF.XLAST`; `write`: `XADD` (one, or a run of them), `XTRIM`, `XDEL` and `XSETID`.

pub(crate) mod read;
pub(crate) mod write;

use super::store::*;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

pub(crate) const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Id {
    pub ms: u64,
    pub seq: u64,
}

impl Id {
    pub const MIN: Id = Id { ms: 0, seq: 0 };
    pub const MAX: Id = Id {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub fn text(self) -> Bytes {
        Bytes::from(format!("{}-{}", self.ms, self.seq))
    }

    fn stored(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    fn from_stored(raw: Option<&[u8]>) -> Id {
        let half = |r: Option<&[u8]>| {
            r.and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes)
        };
        Id {
            ms: half(raw.and_then(|r| r.get(..8))),
            seq: half(raw.and_then(|r| r.get(8..16))),
        }
    }

    /// The id of a row's `ms, seq` columns at `at`, `at + 1`.
    pub fn of_row(row: &Row, at: usize) -> Result<Id, Fail> {
        Ok(Id {
            ms: uncol(row.try_get(at)?),
            seq: uncol(row.try_get(at + 1)?),
        })
    }

    pub fn next(self) -> Option<Id> {
        if self.seq < u64::MAX {
            Some(Id {
                ms: self.ms,
                seq: self.seq + 1,
            })
        } else if self.ms < u64::MAX {
            Some(Id {
                ms: self.ms + 1,
                seq: 0,
            })
        } else {
            None
        }
    }

    pub fn prev(self) -> Option<Id> {
        if self.seq > 0 {
            Some(Id {
                ms: self.ms,
                seq: self.seq - 1,
            })
        } else if self.ms > 0 {
            Some(Id {
                ms: self.ms - 1,
                seq: u64::MAX,
            })
        } else {
            None
        }
    }
}

/// What a stream's key row keeps beside its entries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head {
    /// The last id added (or set by `XSETID`).
    pub last: Id,
    /// Entries ever added; None in a row written before holdfast counted them (read as the
    /// length then).
    pub added: Option<u64>,
    /// The greatest id `XDEL` removed (0-0: none).
    pub max_deleted: Id,
}

impl Head {
    pub fn from_stored(raw: Option<&[u8]>) -> Head {
        let raw = raw.unwrap_or_default();
        let added = raw
            .get(16..24)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes);
        Head {
            last: Id::from_stored(raw.get(..16)),
            added,
            max_deleted: Id::from_stored(raw.get(24..40)),
        }
    }

    pub(crate) fn stored(self, length: i64) -> [u8; 40] {
        let mut out = [0u8; 40];
        out[..16].copy_from_slice(&self.last.stored());
        out[16..24].copy_from_slice(&self.added(length).to_be_bytes());
        out[24..].copy_from_slice(&self.max_deleted.stored());
        out
    }

    /// Entries ever added, for a stream of `length` entries now.
    pub fn added(self, length: i64) -> u64 {
        self.added.unwrap_or(u64::try_from(length).unwrap_or(0))
    }
}

/// A stream's head and its entries now: what `XINFO` shows and the lag is computed from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub head: Head,
    pub length: i64,
    /// The first entry's id, 0-0 when there is none.
    pub first: Id,
    /// The last entry's id, 0-0 when there is none.
    pub top: Id,
}

impl Shape {
    pub async fn read(ctx: &mut Ctx<'_>, key: &[u8], head: Head) -> Result<Shape, Fail> {
        let length = ctx.count(key, Kind::Stream).await?;
        let (mut first, mut top) = (Id::MIN, Id::MIN);
        if length > 0 {
            first = edge(ctx, key, "ms, seq").await?;
            top = edge(ctx, key, "ms DESC, seq DESC").await?;
        }
        Ok(Shape {
            head,
            length,
            first,
            top,
        })
    }

    pub fn added(&self) -> u64 {
        self.head.added(self.length)
    }

    /// Whether an entry at or after `from` was deleted (Redis's `streamRangeHasTombstones`).
    pub fn tombstones_after(&self, from: Id) -> bool {
        let deleted = self.head.max_deleted;
        self.length > 0 && deleted != Id::MIN && self.first <= deleted && from <= deleted
    }

    /// How many entries were added up to `id`, where that can be known (Redis's
    /// `streamEstimateDistanceFromFirstEverEntry`); -1 where it cannot.
    pub fn entries_before(&self, id: Id) -> i64 {
        let added = i64::try_from(self.added()).unwrap_or(i64::MAX);
        if added == 0 {
            return 0;
        }
        if self.length == 0 && id <= self.head.last {
            return added;
        }
        if id == self.head.last {
            return added;
        }
        if id > self.head.last {
            return -1;
        }
        let deleted = self.head.max_deleted;
        if deleted == Id::MIN || deleted < self.first {
            if id < self.first {
                return added - self.length;
            }
            if id == self.first {
                return added - self.length + 1;
            }
        }
        -1
    }
}

async fn edge(ctx: &mut Ctx<'_>, key: &[u8], order: &str) -> Result<Id, Fail> {
    let row = ctx
        .one(
            stmt(format!(
                "SELECT ms, seq FROM hf_stream WHERE key = $1 ORDER BY {order} LIMIT 1"
            ))
            .bind(key),
        )
        .await?;
    Id::of_row(&row, 0)
}

/// A u64 as a column value that sorts like it.
pub(crate) fn col(v: u64) -> i64 {
    i64::from_ne_bytes((v ^ (1 << 63)).to_ne_bytes())
}

pub(crate) fn uncol(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes()) ^ (1 << 63)
}

fn digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// `ms[-seq]` with a default for a missing seq; `-`/`+` only when `specials`.
pub(crate) fn parse_id(text: &[u8], missing_seq: u64, specials: bool) -> Option<Id> {
    if specials && text == b"-" {
        return Some(Id::MIN);
    }
    if specials && text == b"+" {
        return Some(Id::MAX);
    }
    match text.iter().position(|b| *b == b'-') {
        Some(dash) => Some(Id {
            ms: digits(text.get(..dash)?)?,
            seq: digits(text.get(dash + 1..)?)?,
        }),
        None => Some(Id {
            ms: digits(text)?,
            seq: missing_seq,
        }),
    }
}

pub(crate) fn encode_fields<T: AsRef<[u8]>>(pairs: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs.iter().map(|p| p.as_ref().len() + 4).sum());
    for p in pairs {
        let p = p.as_ref();
        out.extend_from_slice(&(p.len() as u32).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// An entry's stored fields and values, in order.
pub(crate) fn split_fields(mut raw: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while raw.len() >= 4 {
        let len = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
        let Some(value) = raw.get(4..4 + len) else {
            break;
        };
        out.push(value);
        raw = &raw[4 + len..];
    }
    out
}

pub(crate) fn decode_fields(raw: &[u8]) -> Vec<Frame> {
    split_fields(raw)
        .into_iter()
        .map(|v| bulk(Bytes::copy_from_slice(v)))
        .collect()
}

/// One end of an XRANGE interval; `(` makes it exclusive.
pub(crate) fn range_end(text: &[u8], start: bool) -> Result<Option<Id>, Fail> {
    let (exclusive, text) = match text.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, text),
    };
    if exclusive && (text == b"-" || text == b"+") {
        return fail(INVALID_ID);
    }
    let missing = if start { 0 } else { u64::MAX };
    let Some(id) = parse_id(text, missing, true) else {
        return fail(INVALID_ID);
    };
    if !exclusive {
        return Ok(Some(id));
    }
    let moved = if start { id.next() } else { id.prev() };
    match moved {
        Some(id) => Ok(Some(id)),
        None => fail(if start {
            "ERR invalid start ID for the interval"
        } else {
            "ERR invalid end ID for the interval"
        }),
    }
}

/// One entry as the range commands answer it.
pub(crate) fn entry(id: Id, fields: &[u8]) -> Frame {
    array(vec![bulk(id.text()), array(decode_fields(fields))])
}
