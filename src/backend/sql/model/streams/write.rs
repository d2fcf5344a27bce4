//! Streams written: `XADD` (one, or a run of them by a few statements), `XTRIM`, `XDEL`
//! and `XSETID`.
//!
//! Approximate trimming (`~`) trims nothing: Redis trims whole internal nodes only, so "at
//! least N entries" is what both promise, and keeping all of them is the exact-reply choice
//! for the small streams where Redis trims nothing either.

use super::super::args::{self, is};
use super::super::store::*;
use super::super::strings::arg;
use super::{col, digits, encode_fields, parse_id, uncol, Head, Id, INVALID_ID};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

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
                let n = args::int(value)?;
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
            match args::parse_i64(arg(a, i + 1)) {
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

async fn apply_trim(ctx: &mut Ctx<'_>, key: &[u8], trim: Trim) -> Result<i64, Fail> {
    let done = match trim {
        Trim::MaxLen(max) => {
            let len = ctx.count(key, Kind::Stream).await?;
            if len <= max {
                return Ok(0);
            }
            let cut = ctx.opt(stmt(
                "SELECT ms, seq FROM hf_stream WHERE key = $1 ORDER BY ms, seq LIMIT 1 OFFSET $2",
            )
            .bind(key)
            .bind(len - max))
            .await?;
            match cut {
                Some(row) => {
                    let (ms, seq): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                    ctx.execute(
                        stmt("DELETE FROM hf_stream WHERE key = $1 AND (ms, seq) < ($2, $3)")
                            .bind(key)
                            .bind(ms)
                            .bind(seq),
                    )
                    .await?
                }
                None => {
                    ctx.execute(stmt("DELETE FROM hf_stream WHERE key = $1").bind(key))
                        .await?
                }
            }
        }
        Trim::MinId(id) => {
            ctx.execute(
                stmt("DELETE FROM hf_stream WHERE key = $1 AND (ms, seq) < ($2, $3)")
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
    ctx.execute(
        stmt("INSERT INTO hf_stream (key, ms, seq, fields) VALUES ($1, $2, $3, $4)")
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
    // The streams' rows first: a new stream's row exists before its entries, which its
    // count (`hf_keys.len`, kept by triggers) needs.
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
        let mut query = stmt(&sql);
        for (key, head) in chunk.iter().chain(std::iter::repeat(last)).take(written) {
            query = query.bind(*key).bind(code).bind(&head[..]);
        }
        if ctx.execute(query).await?.rows_affected() != written as u64 {
            return fail("ERR holdfast: a stream of the run changed kind");
        }
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
        let mut query = stmt(&sql);
        for (key, id, fields) in chunk.iter().chain(std::iter::repeat(last)).take(written) {
            query = query
                .bind(*key)
                .bind(col(id.ms))
                .bind(col(id.seq))
                .bind(fields.as_slice());
        }
        if ctx.execute(query).await?.rows_affected() != chunk.len() as u64 {
            return fail("ERR holdfast: a stream entry of the run exists already");
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
            .execute(
                stmt("DELETE FROM hf_stream WHERE key = $1 AND ms = $2 AND seq = $3")
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
            let n = args::int(arg(a, i + 1))?;
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
    let top = ctx
        .opt(
            stmt("SELECT ms, seq FROM hf_stream WHERE key = $1 ORDER BY ms DESC, seq DESC LIMIT 1")
                .bind(key),
        )
        .await?;
    let top: Option<(i64, i64)> = match top {
        Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
        None => None,
    };
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
