//! Streams as an append-only log over `hf_stream`. An id's two u64 halves are stored with
//! their top bit flipped, so signed 64-bit columns sort them as unsigned. The stream's
//! [`Head`] lives in its key row (`value`): its last id, kept past deletions as Redis keeps
//! it, the number of entries ever added and the greatest id `XDEL` removed (`XINFO` and the
//! consumer groups' lag read them). Consumer groups are `stream_groups`.
//!
//! Approximate trimming (`~`) trims nothing: Redis trims whole internal nodes only, so "at
//! least N entries" is what both promise, and keeping all of them is the exact-reply choice
//! for the small streams where Redis trims nothing either.

use super::args::is;
use super::store::*;
use super::strings::arg;
use bytes::Bytes;
use sqlx::Row;

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
    pub fn of_row(row: &sqlx::any::AnyRow, at: usize) -> Result<Id, Fail> {
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

    fn stored(self, length: i64) -> [u8; 40] {
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
    let row = sqlx::query(&format!(
        "SELECT ms, seq FROM hf_stream WHERE key = $1 ORDER BY {order} LIMIT 1"
    ))
    .bind(key)
    .fetch_one(&mut *ctx.conn)
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

/// An XADD id: explicit, `ms-*`, or `*` (None, None).
#[derive(Clone, Copy)]
enum AddId {
    Auto,
    AutoSeq(u64),
    Explicit(Id),
}

fn parse_add_id(text: &[u8]) -> Option<AddId> {
    if text == b"*" {
        return Some(AddId::Auto);
    }
    if let Some(ms) = text.strip_suffix(b"-*") {
        return digits(ms).map(AddId::AutoSeq);
    }
    parse_id(text, 0, false).map(AddId::Explicit)
}

#[derive(Clone, Copy)]
enum Trim {
    MaxLen(i64),
    MinId(Id),
}

/// The trimming options shared by XADD and XTRIM; returns where parsing stopped.
fn trim_options(
    a: &[Bytes],
    from: usize,
    xadd: bool,
) -> Result<(Option<Trim>, bool, bool, usize), Fail> {
    let (mut trim, mut approx, mut nomkstream, mut limit) = (None, false, false, false);
    let mut i = from;
    while i < a.len() {
        let more = a.len() - 1 - i;
        let opt = arg(a, i);
        if xadd && opt == b"*" {
            break;
        }
        let maxlen = is(opt, "MAXLEN");
        if (maxlen || is(opt, "MINID")) && more > 0 {
            if trim.is_some() {
                return fail("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
            }
            approx = false;
            let next = arg(a, i + 1);
            if more >= 2 && next == b"~" {
                approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let value = arg(a, i + 1);
            trim = Some(if maxlen {
                let n = super::args::int(value)?;
                if n < 0 {
                    return fail("ERR The MAXLEN argument must be >= 0.");
                }
                Trim::MaxLen(n)
            } else {
                match parse_id(value, 0, false) {
                    Some(id) => Trim::MinId(id),
                    None => return fail(INVALID_ID),
                }
            });
            i += 1;
        } else if is(opt, "LIMIT") && more > 0 {
            match super::args::parse_i64(arg(a, i + 1)) {
                Some(n) if n >= 0 => {}
                _ => return fail("ERR The LIMIT argument must be >= 0."),
            }
            limit = true;
            i += 1;
        } else if xadd && is(opt, "NOMKSTREAM") {
            nomkstream = true;
        } else if xadd {
            break;
        } else {
            return fail(SYNTAX);
        }
        i += 1;
    }
    if limit && trim.is_none() {
        return fail(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        );
    }
    if !xadd && trim.is_none() {
        return fail("ERR syntax error, XTRIM must be called with a trimming strategy");
    }
    if limit && !approx {
        return fail("ERR syntax error, LIMIT cannot be used without the special ~ option");
    }
    Ok((if approx { None } else { trim }, approx, nomkstream, i))
}

fn encode_fields(pairs: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs.iter().map(|p| p.len() + 4).sum());
    for p in pairs {
        out.extend_from_slice(&(p.len() as u32).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

pub(crate) fn decode_fields(mut raw: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    while raw.len() >= 4 {
        let len = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
        let Some(value) = raw.get(4..4 + len) else {
            break;
        };
        out.push(bulk(Bytes::copy_from_slice(value)));
        raw = &raw[4 + len..];
    }
    out
}

use redis_protocol::resp3::types::BytesFrame as Frame;

async fn apply_trim(ctx: &mut Ctx<'_>, key: &[u8], trim: Trim) -> Result<i64, Fail> {
    let done = match trim {
        Trim::MaxLen(max) => {
            let len = ctx.count(key, Kind::Stream).await?;
            if len <= max {
                return Ok(0);
            }
            let cut = sqlx::query(
                "SELECT ms, seq FROM hf_stream WHERE key = $1 ORDER BY ms, seq LIMIT 1 OFFSET $2",
            )
            .bind(key)
            .bind(len - max)
            .fetch_optional(&mut *ctx.conn)
            .await?;
            match cut {
                Some(row) => {
                    let (ms, seq): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                    ctx.exec(sqlx::query("DELETE FROM hf_stream WHERE key = $1 AND (ms < $2 OR (ms = $2 AND seq < $3))")
                        .bind(key)
                        .bind(ms)
                        .bind(seq)
                        )
                        .await?
                }
                None => {
                    ctx.exec(sqlx::query("DELETE FROM hf_stream WHERE key = $1").bind(key))
                        .await?
                }
            }
        }
        Trim::MinId(id) => {
            ctx.exec(
                sqlx::query(
                    "DELETE FROM hf_stream WHERE key = $1 AND (ms < $2 OR (ms = $2 AND seq < $3))",
                )
                .bind(key)
                .bind(col(id.ms))
                .bind(col(id.seq)),
            )
            .await?
        }
    };
    Ok(done.rows_affected() as i64)
}

const EXHAUSTED: &str =
    "ERR The stream has exhausted the last possible ID, unable to add more items";
const TOO_SMALL: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";

/// The id an XADD of `add` gives the next entry of a stream whose last id is `last`, at
/// `now` (milliseconds); the error it answers otherwise. Pure: `xadd` and `xadd_run` both
/// decide by it.
fn next_id(last: Id, add: AddId, now: i64) -> Result<Id, &'static str> {
    if last == Id::MAX {
        return Err(EXHAUSTED);
    }
    match add {
        AddId::Auto => {
            let now = u64::try_from(now).unwrap_or(0);
            if now > last.ms {
                Ok(Id { ms: now, seq: 0 })
            } else {
                last.next().ok_or(TOO_SMALL)
            }
        }
        AddId::AutoSeq(ms) if ms > last.ms => Ok(Id { ms, seq: 0 }),
        AddId::AutoSeq(ms) if ms == last.ms && last.seq < u64::MAX => Ok(Id {
            ms,
            seq: last.seq + 1,
        }),
        AddId::AutoSeq(_) => Err(TOO_SMALL),
        AddId::Explicit(id) if id > last => Ok(id),
        AddId::Explicit(_) => Err(TOO_SMALL),
    }
}

pub async fn xadd(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (trim, _approx, nomkstream, idpos) = trim_options(a, 2, true)?;
    // Options that run to the end leave no id and no fields: Redis says arity first.
    if idpos >= a.len() {
        return fail("ERR wrong number of arguments for 'xadd' command");
    }
    let Some(add) = parse_add_id(arg(a, idpos)) else {
        return fail(INVALID_ID);
    };
    let fields = a.get(idpos + 1..).unwrap_or_default();
    if fields.len() < 2 || fields.len() % 2 != 0 {
        return fail("ERR wrong number of arguments for 'xadd' command");
    }
    if let AddId::Explicit(Id::MIN) = add {
        return fail("ERR The ID specified in XADD must be greater than 0-0");
    }
    ctx.lock(&[key]).await?;
    let meta = ctx.typed(key, Kind::Stream).await?;
    if meta.is_none() && nomkstream {
        return Ok(null());
    }
    let mut head = Head::from_stored(meta.as_ref().and_then(|m| m.value.as_deref()));
    let id = match next_id(head.last, add, ctx.now) {
        Ok(id) => id,
        Err(error) => return fail(error),
    };
    ctx.create(key, Kind::Stream, None).await?;
    ctx.exec(
        sqlx::query("INSERT INTO hf_stream (key, ms, seq, fields) VALUES ($1, $2, $3, $4)")
            .bind(key)
            .bind(col(id.ms))
            .bind(col(id.seq))
            .bind(encode_fields(fields)),
    )
    .await?;
    if head.added.is_none() {
        // A row from before the count: its entries so far (the new one included).
        head.added = Some(head.added(ctx.count(key, Kind::Stream).await? - 1));
    }
    head.added = head.added.map(|n| n.saturating_add(1));
    head.last = id;
    ctx.set_value(key, &head.stored(0)).await?;
    if let Some(trim) = trim {
        apply_trim(ctx, key, trim).await?;
    }
    Ok(bulk(id.text()))
}

/// An `XADD` a run applies with others (`xadd_run`): its arguments after the name parse,
/// and it trims nothing. None for any other, which runs on its own (and answers its own
/// syntax error, in Redis's order).
pub(crate) struct Add<'a> {
    key: &'a [u8],
    id: AddId,
    nomkstream: bool,
    fields: &'a [Bytes],
}

pub(crate) fn plain_add(args: &[Bytes]) -> Option<Add<'_>> {
    let key = args.first()?;
    let (trim, _approx, nomkstream, idpos) = trim_options(args, 1, true).ok()?;
    if trim.is_some() {
        return None;
    }
    let id = parse_add_id(args.get(idpos)?)?;
    let fields = args.get(idpos + 1..)?;
    if fields.len() < 2 || fields.len() % 2 != 0 || matches!(id, AddId::Explicit(Id::MIN)) {
        return None;
    }
    Some(Add {
        key,
        id,
        nomkstream,
        fields,
    })
}

/// A run of `XADD`s (one client's pipeline, or several clients' that queued together), in
/// order, by a few statements: one reads every key's kind and head, one per
/// [`STATEMENT_ROWS`] entries inserts the entries, one per as many streams writes their
/// heads (creating the new streams; an expiry is kept). Each answers what it would have
/// alone: an id after the one an earlier `XADD` of the run gave, `WRONGTYPE` on another
/// kind, nil for `NOMKSTREAM` on a stream no earlier one created, and the id errors, which
/// change nothing.
pub async fn xadd_run(
    ctx: &mut Ctx<'_>,
    run: &[Add<'_>],
) -> Result<Vec<Result<Frame, &'static str>>, Fail> {
    let mut keys: Vec<&[u8]> = run.iter().map(|add| add.key).collect();
    keys.sort_unstable();
    keys.dedup();
    let found = ctx.metas(&keys).await?;
    // Each stream's head as the run has made it so far, and the streams it changed.
    let mut heads: std::collections::HashMap<&[u8], Head> = std::collections::HashMap::new();
    for &key in &keys {
        if let Some(meta) = found.get(key).filter(|m| m.kind == Kind::Stream) {
            let mut head = Head::from_stored(meta.value.as_deref());
            if head.added.is_none() {
                // A row from before the count: its entries so far.
                head.added = Some(head.added(ctx.count(key, Kind::Stream).await?));
            }
            heads.insert(key, head);
        }
    }
    let mut changed: Vec<&[u8]> = Vec::new();
    let mut entries: Vec<(&[u8], Id, Vec<u8>)> = Vec::with_capacity(run.len());
    let mut out = Vec::with_capacity(run.len());
    for add in run {
        if found.get(add.key).is_some_and(|m| m.kind != Kind::Stream) {
            out.push(Err(WRONGTYPE));
            continue;
        }
        let head = match heads.get(add.key) {
            Some(head) => *head,
            None if add.nomkstream => {
                out.push(Ok(null()));
                continue;
            }
            None => Head {
                added: Some(0),
                ..Head::from_stored(None)
            },
        };
        let id = match next_id(head.last, add.id, ctx.now) {
            Ok(id) => id,
            Err(error) => {
                out.push(Err(error));
                continue;
            }
        };
        let next = Head {
            last: id,
            added: head.added.map(|n| n.saturating_add(1)),
            ..head
        };
        heads.insert(add.key, next);
        changed.push(add.key);
        entries.push((add.key, id, encode_fields(add.fields)));
        out.push(Ok(bulk(id.text())));
    }
    for chunk in entries.chunks(STATEMENT_ROWS) {
        let Some(last) = chunk.last() else { continue };
        // SQLite's list is padded with the last entry (skipped as a repeat): a few sizes,
        // each prepared once. Every other row is new (each id is past its stream's last),
        // and one that is not undoes the group, which runs again command by command.
        let written = upsert_rows(ctx.dialect, chunk.len());
        let rows = value_rows(ctx.dialect, written, 4);
        let sql = format!(
            "INSERT INTO hf_stream (key, ms, seq, fields) VALUES {rows} \
             ON CONFLICT (key, ms, seq) DO NOTHING"
        );
        let mut query = sqlx::query(&sql);
        for (key, id, fields) in chunk.iter().chain(std::iter::repeat(last)).take(written) {
            query = query
                .bind(*key)
                .bind(col(id.ms))
                .bind(col(id.seq))
                .bind(fields.as_slice());
        }
        if ctx.exec(query).await?.rows_affected() != chunk.len() as u64 {
            return fail("ERR holdfast: a stream entry of the run exists already");
        }
    }
    changed.sort_unstable();
    changed.dedup();
    let written_heads: Vec<(&[u8], [u8; 40])> = changed
        .iter()
        .filter_map(|key| heads.get(key).map(|head| (*key, head.stored(0))))
        .collect();
    let code = Kind::Stream as i64;
    for chunk in written_heads.chunks(STATEMENT_ROWS) {
        let Some(last) = chunk.last() else { continue };
        let written = upsert_rows(ctx.dialect, chunk.len());
        // A stream's expiry is kept; a key of another kind was answered WRONGTYPE above.
        let rows = value_rows(ctx.dialect, written, 3);
        let sql = format!(
            "INSERT INTO hf_keys (key, kind, value) VALUES {rows} \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE hf_keys.kind = {code}"
        );
        let mut query = sqlx::query(&sql);
        for (key, head) in chunk.iter().chain(std::iter::repeat(last)).take(written) {
            query = query.bind(*key).bind(code).bind(&head[..]);
        }
        if ctx.exec(query).await?.rows_affected() != written as u64 {
            return fail("ERR holdfast: a stream of the run changed kind");
        }
    }
    Ok(out)
}

pub async fn xtrim(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let (trim, _, _, _) = trim_options(a, 2, false)?;
    ctx.lock(&[key]).await?;
    if ctx.typed(key, Kind::Stream).await?.is_none() {
        return Ok(int(0));
    }
    match trim {
        Some(trim) => Ok(int(apply_trim(ctx, key, trim).await?)),
        None => Ok(int(0)),
    }
}

pub async fn xlen(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    if ctx.typed(key, Kind::Stream).await?.is_none() {
        return Ok(int(0));
    }
    Ok(int(ctx.count(key, Kind::Stream).await?))
}

pub async fn xdel(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    ctx.lock(&[key]).await?;
    // Redis looks the key up before it reads the ids.
    let Some(meta) = ctx.typed(key, Kind::Stream).await? else {
        return Ok(int(0));
    };
    let mut head = Head::from_stored(meta.value.as_deref());
    let length = ctx.count(key, Kind::Stream).await?;
    let mut ids = Vec::new();
    for raw in a.iter().skip(2) {
        match parse_id(raw, 0, false) {
            Some(id) => ids.push(id),
            None => return fail(INVALID_ID),
        }
    }
    let mut n = 0;
    for id in ids {
        let done = ctx
            .exec(
                sqlx::query("DELETE FROM hf_stream WHERE key = $1 AND ms = $2 AND seq = $3")
                    .bind(key)
                    .bind(col(id.ms))
                    .bind(col(id.seq)),
            )
            .await?;
        if done.rows_affected() > 0 {
            n += 1;
            head.max_deleted = head.max_deleted.max(id);
        }
    }
    if n > 0 {
        ctx.set_value(key, &head.stored(length)).await?;
    }
    Ok(int(n))
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
            count = Some(super::args::int(arg(a, j + 1))?.max(0));
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
    let rows = sqlx::query(&format!(
        "SELECT ms, seq, fields FROM hf_stream WHERE key = $1 \
         AND (ms > $2 OR (ms = $2 AND seq >= $3)) AND (ms < $4 OR (ms = $4 AND seq <= $5)) \
         ORDER BY {order} LIMIT $6"
    ))
    .bind(key)
    .bind(col(lo.ms))
    .bind(col(lo.seq))
    .bind(col(hi.ms))
    .bind(col(hi.seq))
    .bind(count.unwrap_or(i64::MAX))
    .fetch_all(&mut *ctx.conn)
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
            count = super::args::int(arg(a, i + 1))?.max(0);
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
    let rows = sqlx::query(
        "SELECT ms, seq, fields FROM hf_stream WHERE key = $1 \
         AND (ms > $2 OR (ms = $2 AND seq >= $3)) ORDER BY ms, seq LIMIT $4",
    )
    .bind(key)
    .bind(col(from.ms))
    .bind(col(from.seq))
    .bind(if count > 0 { count } else { i64::MAX })
    .fetch_all(&mut *ctx.conn)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((Id::of_row(row, 0)?, row.try_get(2)?));
    }
    Ok(out)
}

/// One entry as the range commands answer it.
pub(crate) fn entry(id: Id, fields: &[u8]) -> Frame {
    array(vec![bulk(id.text()), array(decode_fields(fields))])
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
    match super::args::parse_i64(text) {
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

/// `XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]`: the id
/// the next `XADD *` must pass, and the two counters `XINFO STREAM` shows.
pub async fn xsetid(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let Some(id) = parse_id(arg(a, 2), 0, false) else {
        return fail(INVALID_ID);
    };
    let (mut added, mut max_deleted) = (None, None);
    let mut i = 3;
    while i < a.len() {
        if is(arg(a, i), "ENTRIESADDED") && i + 1 < a.len() {
            let n = super::args::int(arg(a, i + 1))?;
            if n < 0 {
                return fail("ERR entries_added must be positive");
            }
            added = Some(n);
        } else if is(arg(a, i), "MAXDELETEDID") && i + 1 < a.len() {
            let Some(d) = parse_id(arg(a, i + 1), 0, false) else {
                return fail(INVALID_ID);
            };
            max_deleted = Some(d);
        } else {
            return fail(SYNTAX);
        }
        i += 2;
    }
    if max_deleted.is_some_and(|d| id < d) {
        return fail(
            "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
        );
    }
    ctx.lock(&[key]).await?;
    let Some(meta) = ctx.typed(key, Kind::Stream).await? else {
        return fail("ERR no such key");
    };
    let mut head = Head::from_stored(meta.value.as_deref());
    let len = ctx.count(key, Kind::Stream).await?;
    if added.is_some_and(|n| n < len) {
        return fail(
            "ERR The entries_added specified in XSETID is smaller than the target stream length",
        );
    }
    let top: Option<(i64, i64)> = sqlx::query_as(
        "SELECT ms, seq FROM hf_stream WHERE key = $1 ORDER BY ms DESC, seq DESC LIMIT 1",
    )
    .bind(key)
    .fetch_optional(&mut *ctx.conn)
    .await?;
    if let Some((ms, seq)) = top {
        let top = Id {
            ms: uncol(ms),
            seq: uncol(seq),
        };
        if id < top {
            return fail(
                "ERR The ID specified in XSETID is smaller than the target stream top item",
            );
        }
    }
    head.last = id;
    if let Some(n) = added {
        head.added = Some(n.unsigned_abs());
    }
    if let Some(d) = max_deleted.filter(|d| *d != Id::MIN) {
        head.max_deleted = d;
    }
    ctx.set_value(key, &head.stored(len)).await?;
    Ok(ok())
}
