//! Reply modes: what a request's reply is when an earlier dispatch of it may have been
//! applied (docs/failures.md, "Reply modes"). No I/O: the executor runs the reads this module asks
//! for and hands their replies back, and the unit tests drive the same functions.
//!
//! - **fast**: the successful dispatch's reply, as it is. When an earlier dispatch of an
//!   IdempotentEffect command may have been applied, that reply may under-count; the caller
//!   counts it (`holdfast_uncertain_replies_total`).
//! - **settled**: a read before the first dispatch settles what the command will find
//!   (`DEL`: which keys exist; nothing there: answer 0 and dispatch nothing), and when an
//!   earlier dispatch may have been applied the reply is rebuilt from that read: our own
//!   dispatch removed what existed, or added what was absent. `SETNX`/`SET NX`/`HSETNX`/
//!   `MSETNX` and `XADD` with an explicit id are read before the first dispatch too: a key
//!   (field, entry at or above that id) already there answers the refusal without
//!   dispatching. Only when it was absent then may a retried refusal whose stored value
//!   (entry) is ours be called our write: value equality alone proves nothing, since the
//!   de-duplication idiom `SETNX seen:<id> 1` writes the same value every time.
//!
//!   The window this leaves: another client writing the same key between our read and our
//!   dispatch (for `SETNX`, writing our very value after our read found it absent) makes the
//!   rebuilt reply count its change as ours. Redis itself gives no atomic read-then-write
//!   across a lost reply; the window is the time of one round trip plus the retry's hold.
//!   One case needs no such writer and is answered `INDOUBT` instead ([`Settle::unsettled`]):
//!   a `SET … NX` with an expiry whose value is gone or another's at the read after a
//!   refused retry. Our write may have landed, expired, and been followed by another
//!   client's `SET … NX` (two workers taking a lock): "not set" would be untrue.
//! - **exact**: a token travels with every dispatch of the request; the backend applies the
//!   command and records its reply under the token atomically, and a retry that finds the
//!   token answers the recorded reply and applies nothing. Single-key writes only; others
//!   are settled.

use crate::command::table::Idempotence;
use crate::config::ReplyMode;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// How one request is handled.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// As the core retry loop.
    Fast,
    /// With a token: every retry is safe, and the reply is the first application's.
    Exact,
    /// Settled with reads.
    Settled(Box<Settle>),
}

/// What settling one command takes. `read` is the command that reads what settles it;
/// `count` how its reply counts; `items` how many distinct items the command names; `ours`
/// the value the command writes; `set` its reply when it wrote; `id` and `fields` the entry
/// an XADD appends.
#[derive(Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Settle {
    /// The reply counts items that existed and are removed (`DEL`, `UNLINK`, `HDEL`, `SREM`,
    /// `ZREM`); `read` says which exist.
    Removed { read: Vec<Bytes>, count: Count },
    /// The reply counts items that were absent and are added (`SADD`, `HSET`, `ZADD` with no
    /// option but `NX`); `read` says which exist, out of `items`.
    Added {
        read: Vec<Bytes>,
        count: Count,
        items: i64,
    },
    /// A write only when absent (`SETNX`, `SET ... NX`, `HSETNX`, `MSETNX`): `exists`
    /// (`EXISTS`, `HEXISTS`) runs first, and anything there answers `refused` without a
    /// dispatch; a "not set" after a dispatch that may have landed is ours when `exists`
    /// found nothing and `read` finds `ours` (one value per key, in order).
    IfAbsent {
        exists: Vec<Bytes>,
        read: Vec<Bytes>,
        ours: Vec<Bytes>,
        answers: NxAnswers,
        /// It sets an expiry (`EX`, `PX`, `EXAT`, `PXAT`): our write may vanish by itself.
        expires: bool,
    },
    /// `XADD` with an explicit id: `top` (the entries at or above the id) runs first, and
    /// one there answers the refusal without a dispatch; a refusal after a dispatch that may
    /// have landed is ours when `top` found none and `read` finds our entry at that id.
    Append {
        top: Vec<Bytes>,
        read: Vec<Bytes>,
        id: Bytes,
        fields: Vec<Bytes>,
    },
}

/// How a write-if-absent answers whether it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NxAnswers {
    /// `1` or `0` (`SETNX`, `HSETNX`, `MSETNX`).
    Integer,
    /// `OK` or nil (`SET … NX`).
    OkOrNil,
}

impl NxAnswers {
    fn set(self) -> Frame {
        match self {
            NxAnswers::Integer => int(1),
            NxAnswers::OkOrNil => Frame::SimpleString {
                data: b("OK"),
                attributes: None,
            },
        }
    }

    fn refused(self) -> Frame {
        match self {
            NxAnswers::Integer => int(0),
            NxAnswers::OkOrNil => Frame::Null,
        }
    }

    fn is_refusal(self, reply: &Frame) -> bool {
        match self {
            NxAnswers::Integer => matches!(reply, Frame::Number { data: 0, .. }),
            NxAnswers::OkOrNil => matches!(reply, Frame::Null),
        }
    }
}

/// How a pre-read's reply counts the items that exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// An integer (`EXISTS k1 k2`).
    Integer,
    /// An array where a non-nil element exists (`HMGET`, `ZMSCORE`).
    NonNil,
    /// An array of 0/1 (`SMISMEMBER`).
    Ones,
}

fn b(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Arguments in order, each once.
fn distinct(args: &[Bytes]) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = Vec::with_capacity(args.len());
    for a in args {
        if !out.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

fn read(name: &'static str, key: &Bytes, rest: Vec<Bytes>) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(rest.len() + 2);
    out.push(b(name));
    out.push(key.clone());
    out.extend(rest);
    out
}

/// The plan for `args` (name first) under `mode`. `single_key`: the command's one key is its
/// first argument (exact mode's token goes with it; EVAL, FCALL and the like, whose keys
/// follow a count, cannot run inside exact mode's script). `class` is the command's
/// idempotence after its arguments refined it.
pub fn plan(mode: ReplyMode, args: &[Bytes], class: Idempotence, single_key: bool) -> Plan {
    if matches!(
        class,
        Idempotence::Read | Idempotence::Idempotent | Idempotence::ConnectionBound
    ) {
        return Plan::Fast;
    }
    match mode {
        ReplyMode::Fast => Plan::Fast,
        ReplyMode::Exact if single_key => Plan::Exact,
        ReplyMode::Exact | ReplyMode::Settled => {
            settle(args).map_or(Plan::Fast, |s| Plan::Settled(Box::new(s)))
        }
    }
}

/// How `args` is settled, if it is one of the commands settled mode knows.
pub fn settle(args: &[Bytes]) -> Option<Settle> {
    let name = args.first()?.to_ascii_uppercase();
    let key = args.get(1)?;
    let rest = args.get(2..).unwrap_or_default();
    Some(match name.as_slice() {
        b"DEL" | b"UNLINK" => Settle::Removed {
            read: {
                let mut r = vec![b("EXISTS")];
                r.extend(distinct(args.get(1..).unwrap_or_default()));
                r
            },
            count: Count::Integer,
        },
        b"HDEL" => Settle::Removed {
            read: read("HMGET", key, distinct(rest)),
            count: Count::NonNil,
        },
        b"SREM" => Settle::Removed {
            read: read("SMISMEMBER", key, distinct(rest)),
            count: Count::Ones,
        },
        b"ZREM" => Settle::Removed {
            read: read("ZMSCORE", key, distinct(rest)),
            count: Count::NonNil,
        },
        b"SADD" => {
            let members = distinct(rest);
            Settle::Added {
                items: members.len() as i64,
                read: read("SMISMEMBER", key, members),
                count: Count::Ones,
            }
        }
        b"HSET" => {
            let fields = distinct(&rest.iter().step_by(2).cloned().collect::<Vec<_>>());
            Settle::Added {
                items: fields.len() as i64,
                read: read("HMGET", key, fields),
                count: Count::NonNil,
            }
        }
        b"ZADD" => zadd(key, rest)?,
        b"SETNX" => Settle::IfAbsent {
            exists: vec![b("EXISTS"), key.clone()],
            read: vec![b("GET"), key.clone()],
            ours: vec![rest.first()?.clone()],
            answers: NxAnswers::Integer,
            expires: false,
        },
        b"HSETNX" => {
            let field = rest.first()?;
            Settle::IfAbsent {
                exists: read("HEXISTS", key, vec![field.clone()]),
                read: read("HGET", key, vec![field.clone()]),
                ours: vec![rest.get(1)?.clone()],
                answers: NxAnswers::Integer,
                expires: false,
            }
        }
        b"MSETNX" => {
            let pairs = args.get(1..)?;
            if pairs.len() % 2 != 0 {
                return None;
            }
            let keys: Vec<Bytes> = pairs.iter().step_by(2).cloned().collect();
            if distinct(&keys).len() != keys.len() {
                return None; // a key named twice: which value is ours is Redis's to pick
            }
            let mut exists = vec![b("EXISTS")];
            exists.extend(keys.iter().cloned());
            let mut mget = vec![b("MGET")];
            mget.extend(keys);
            Settle::IfAbsent {
                exists,
                read: mget,
                ours: pairs.iter().skip(1).step_by(2).cloned().collect(),
                answers: NxAnswers::Integer,
                expires: false,
            }
        }
        b"SET" => {
            let options = rest.get(1..).unwrap_or_default();
            let nx = options.iter().any(|o| is(o, "NX"));
            let other = options
                .iter()
                .any(|o| is(o, "GET") || is(o, "XX") || is(o, "KEEPTTL"));
            if !nx || other {
                return None;
            }
            let expires = options
                .iter()
                .any(|o| is(o, "EX") || is(o, "PX") || is(o, "EXAT") || is(o, "PXAT"));
            Settle::IfAbsent {
                exists: vec![b("EXISTS"), key.clone()],
                read: vec![b("GET"), key.clone()],
                ours: vec![rest.first()?.clone()],
                answers: NxAnswers::OkOrNil,
                expires,
            }
        }
        b"XADD" => xadd(args, key)?,
        _ => return None,
    })
}

/// Plain ZADD and ZADD NX count what was absent; any other option is not settled.
fn zadd(key: &Bytes, rest: &[Bytes]) -> Option<Settle> {
    let mut at = 0;
    while rest.get(at).is_some_and(|a| is(a, "NX")) {
        at += 1;
    }
    let pairs = rest.get(at..).unwrap_or_default();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return None;
    }
    let first_score = pairs.first()?;
    if std::str::from_utf8(first_score)
        .ok()?
        .parse::<f64>()
        .is_err()
    {
        return None; // an option settled mode does not know (CH, XX, GT, LT, INCR)
    }
    let members = distinct(&pairs.iter().skip(1).step_by(2).cloned().collect::<Vec<_>>());
    Some(Settle::Added {
        items: members.len() as i64,
        read: read("ZMSCORE", key, members),
        count: Count::NonNil,
    })
}

/// XADD with an id of its own, read back at that id; one the server picks (`*`) is not settled.
fn xadd(args: &[Bytes], key: &Bytes) -> Option<Settle> {
    let at = xadd_id_at(args)?;
    let id = args.get(at)?;
    if id.as_ref() == b"*" || id.ends_with(b"-*") {
        return None;
    }
    // As XRANGE will spell it: `5` is `5-0`, `05-01` is `5-1`.
    let text = std::str::from_utf8(id).ok()?;
    let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
    let (ms, seq) = (ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?);
    if (ms, seq) == (0, 0) {
        return None; // refused whatever the stream holds, with its own error
    }
    let id = Bytes::from(format!("{ms}-{seq}"));
    Some(Settle::Append {
        top: vec![
            b("XREVRANGE"),
            key.clone(),
            b("+"),
            id.clone(),
            b("COUNT"),
            b("1"),
        ],
        read: vec![b("XRANGE"), key.clone(), id.clone(), id.clone()],
        id,
        fields: args.get(at + 1..)?.to_vec(),
    })
}

/// Where XADD's id is: after NOMKSTREAM and the trimming options.
fn xadd_id_at(args: &[Bytes]) -> Option<usize> {
    let mut at = 2;
    loop {
        let arg = args.get(at)?;
        if is(arg, "NOMKSTREAM") {
            at += 1;
        } else if is(arg, "MAXLEN") || is(arg, "MINID") {
            at += 1;
            if args
                .get(at)
                .is_some_and(|a| a.as_ref() == b"=" || a.as_ref() == b"~")
            {
                at += 1;
            }
            at += 1;
        } else if is(arg, "LIMIT") {
            at += 2;
        } else {
            return Some(at);
        }
    }
}

fn existing(count: Count, reply: &Frame) -> Option<i64> {
    match (count, reply) {
        (Count::Integer, Frame::Number { data, .. }) => Some(*data),
        (Count::NonNil, Frame::Array { data, .. }) => {
            Some(data.iter().filter(|f| !matches!(f, Frame::Null)).count() as i64)
        }
        (Count::Ones, Frame::Array { data, .. }) => Some(
            data.iter()
                .filter(|f| matches!(f, Frame::Number { data: 1, .. }))
                .count() as i64,
        ),
        _ => None,
    }
}

fn int(n: i64) -> Frame {
    Frame::Number {
        data: n,
        attributes: None,
    }
}

fn bulk_is(frame: &Frame, value: &[u8]) -> bool {
    matches!(frame, Frame::BlobString { data, .. } if data.as_ref() == value)
}

/// Whether a read of our keys (fields) finds exactly our values: one bulk string, or an
/// array of them (`MGET`) in our order.
fn found_ours(found: &Frame, ours: &[Bytes]) -> bool {
    match (found, ours) {
        (Frame::Array { data, .. }, _) => {
            data.len() == ours.len() && data.iter().zip(ours).all(|(f, v)| bulk_is(f, v))
        }
        (_, [one]) => bulk_is(found, one),
        _ => false,
    }
}

/// Redis 7.0's refusal of an explicit XADD id at or below the stream's top entry.
pub const XADD_NOT_ABOVE_TOP: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";

/// Whether an `XREVRANGE key + id COUNT 1` reply holds an entry (at or above the id); None
/// when it is no such reply.
fn any_entry(reply: &Frame) -> Option<bool> {
    match reply {
        Frame::Array { data, .. } => Some(!data.is_empty()),
        _ => None,
    }
}

fn is_error(frame: &Frame) -> bool {
    matches!(frame, Frame::SimpleError { .. } | Frame::BlobError { .. })
}

impl Settle {
    /// The read to run before the first dispatch, if any.
    pub fn pre_read(&self) -> Option<&[Bytes]> {
        match self {
            Settle::Removed { read, .. } | Settle::Added { read, .. } => Some(read),
            Settle::IfAbsent { exists, .. } => Some(exists),
            Settle::Append { top, .. } => Some(top),
        }
    }

    /// The answer without dispatching at all: a removal that finds nothing to remove, a
    /// write-if-absent that finds something there, an append below what is there.
    pub fn without_dispatch(&self, pre: &Frame) -> Option<Frame> {
        match self {
            Settle::Removed { count, .. } if existing(*count, pre) == Some(0) => Some(int(0)),
            Settle::IfAbsent { answers, .. }
                if existing(Count::Integer, pre).is_some_and(|n| n > 0) =>
            {
                Some(answers.refused())
            }
            Settle::Append { .. } if any_entry(pre) == Some(true) => Some(Frame::SimpleError {
                data: XADD_NOT_ABOVE_TOP.into(),
                attributes: None,
            }),
            _ => None,
        }
    }

    /// The read to run after the successful dispatch, when an earlier one may have been
    /// applied and `reply` may be the second application's.
    pub fn post_read(&self, reply: &Frame) -> Option<&[Bytes]> {
        match self {
            Settle::IfAbsent { read, answers, .. } => {
                answers.is_refusal(reply).then_some(read.as_slice())
            }
            Settle::Append { read, .. } => is_error(reply).then_some(read.as_slice()),
            Settle::Removed { .. } | Settle::Added { .. } => None,
        }
    }

    /// Why the first application's reply cannot be told from these reads, if it cannot: a
    /// write-if-absent with an expiry, refused on a retry after a dispatch that may have
    /// landed, whose read finds no value of ours where nothing was before: ours may have
    /// expired and another taken its place, or another was there first. Only called, like
    /// [`Settle::settle`], when an earlier dispatch may have been applied.
    pub fn unsettled(
        &self,
        pre: Option<&Frame>,
        reply: &Frame,
        post: Option<&Frame>,
    ) -> Option<&'static str> {
        match self {
            Settle::IfAbsent {
                ours,
                answers,
                expires: true,
                ..
            } if answers.is_refusal(reply)
                && pre.is_some_and(|p| existing(Count::Integer, p) == Some(0))
                && post.is_some_and(|found| !found_ours(found, ours)) =>
            {
                Some("refused on a retry, with no value of ours found: our write may have landed and expired before another took its place")
            }
            _ => None,
        }
    }

    /// The reply for the first application, given the pre-read's reply, the successful
    /// dispatch's reply and the post-read's. Only called when an earlier dispatch may have
    /// been applied; a reply that is an error, or reads that failed, leave `reply` as it is.
    pub fn settle(&self, pre: Option<&Frame>, reply: Frame, post: Option<&Frame>) -> Frame {
        if is_error(&reply) && !matches!(self, Settle::Append { .. }) {
            return reply;
        }
        match self {
            Settle::Removed { count, .. } => match pre.and_then(|p| existing(*count, p)) {
                Some(existed) => int(existed),
                None => reply,
            },
            Settle::Added { count, items, .. } => match pre.and_then(|p| existing(*count, p)) {
                Some(present) => int(items - present),
                None => reply,
            },
            // Ours only if nothing was there before our first dispatch: a value equal to
            // ours that was already stored is somebody else's write (or an earlier request's).
            Settle::IfAbsent { ours, answers, .. } => match (pre, post) {
                (Some(pre), Some(found))
                    if existing(Count::Integer, pre) == Some(0) && found_ours(found, ours) =>
                {
                    answers.set()
                }
                _ => reply,
            },
            Settle::Append { id, fields, .. } => match (pre.and_then(any_entry), post) {
                (Some(false), Some(Frame::Array { data, .. })) if ours_at(data, id, fields) => {
                    Frame::BlobString {
                        data: id.clone(),
                        attributes: None,
                    }
                }
                _ => reply,
            },
        }
    }
}

/// Whether an XRANGE reply is exactly our entry.
fn ours_at(entries: &[Frame], id: &Bytes, fields: &[Bytes]) -> bool {
    let [Frame::Array { data: entry, .. }] = entries else {
        return false;
    };
    let [found_id, Frame::Array { data: found, .. }] = entry.as_slice() else {
        return false;
    };
    bulk_is(found_id, id)
        && found.len() == fields.len()
        && found.iter().zip(fields).all(|(f, ours)| bulk_is(f, ours))
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
