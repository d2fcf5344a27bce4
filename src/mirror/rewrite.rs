//! What a namespace's mirror is sent for one request the primary answered: nothing (a read,
//! or a write that changed nothing), the same command where replaying it on a copy of the
//! primary's data gives the same data, or a rewrite where it would not:
//!
//! - a relative time becomes the absolute one the primary applied (`EXPIRE` → `PEXPIREAT`,
//!   `SET … EX` → `PXAT`, `RESTORE` with a TTL → `ABSTTL`): the mirror applies it later;
//! - a value the primary chose becomes the value it chose (`XADD *` → the id it answered,
//!   `SPOP` → `SREM` of what it popped, `INCRBYFLOAT` → `SET … KEEPTTL` of its result, as
//!   Redis itself replicates them);
//! - a blocking pop becomes the pop it ended in (`BLPOP` → `LPOP` of the key it answered
//!   from), and a claim by idle time claims what the primary claimed (`XAUTOCLAIM` → `XCLAIM`
//!   of its ids with no minimum idle time), since the mirror's clock and idle times are its own;
//! - `XREADGROUP … BLOCK` is sent without `BLOCK`: the mirror delivers what the primary did.
//!
//! A write whose effect cannot be known — its reply lost (`INDOUBT`), or a script's error
//! after it may have written — is not replayed: its keys are copied again (`Recopy`). A
//! script refused before it began (`NOSCRIPT`, `BUSY`) changed nothing.
//!
//! Pure: the clock is a parameter, and the table test below pins each rule.

use crate::backend::Reply;
use crate::command::Command;
use crate::exec::Ended;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// What the mirror is sent for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Mirrored {
    /// Nothing: the primary's data did not change.
    Skip,
    /// These commands, in order.
    Send(Vec<Vec<Bytes>>),
    /// The command's keys (every key of the namespace for a command without keys) are
    /// copied again: its effect on the primary is not known.
    Recopy,
}

fn text(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn is(arg: Option<&Bytes>, word: &str) -> bool {
    arg.is_some_and(|a| a.eq_ignore_ascii_case(word.as_bytes()))
}

fn number(arg: Option<&Bytes>) -> Option<i64> {
    std::str::from_utf8(arg?).ok()?.parse().ok()
}

/// A frame's string, whichever of RESP's string types it came as.
fn string(frame: &Frame) -> Option<Bytes> {
    match frame {
        Frame::BlobString { data, .. }
        | Frame::SimpleString { data, .. }
        | Frame::VerbatimString { data, .. } => Some(data.clone()),
        Frame::Number { data, .. } => Some(text(&data.to_string())),
        _ => None,
    }
}

fn items(frame: &Frame) -> Option<&[Frame]> {
    match frame {
        Frame::Array { data, .. } | Frame::Push { data, .. } => Some(data),
        _ => None,
    }
}

/// Whether a script's error reply says it never began: `NOSCRIPT` (not loaded: a client's
/// EVALSHA before its SCRIPT LOAD) or `BUSY` (another script was running), by Redis's error
/// prefixes. Any other error may come after the script wrote.
fn never_ran(reply: &Frame) -> bool {
    let said: &[u8] = match reply {
        Frame::SimpleError { data, .. } => data.as_bytes(),
        Frame::BlobError { data, .. } => data,
        _ => return false,
    };
    let prefix = said.split(|b| *b == b' ').next().unwrap_or_default();
    matches!(prefix, b"NOSCRIPT" | b"BUSY")
}

/// Whether the mirror is never sent `command`, a write that changes none of the namespace's
/// data: a message (`PUBLISH`: the mirror's subscribers are not the namespace's until it is
/// cut over) or a kill of a running script (the mirror runs none of the client's; sent there,
/// its `NOTBUSY` would mark every key as missed).
pub fn never_sent(command: &Command) -> bool {
    command.spec.reach == crate::command::table::Reach::Channel
        || matches!(command.spec.name, "SCRIPT|KILL" | "FUNCTION|KILL")
}

/// The commands for a request the primary answered `reply` to, ending as `ended`, at
/// `now_ms` (Unix milliseconds) on holdfast's clock.
pub fn mirrored(command: &Command, reply: &Reply, ended: Ended, now_ms: i64) -> Mirrored {
    if !command.writes() || never_sent(command) {
        return Mirrored::Skip;
    }
    match ended {
        Ended::Unavailable => Mirrored::Skip,
        Ended::InDoubt => Mirrored::Recopy,
        Ended::Answer if command.error_may_write() && !never_ran(&reply.clone().into_frame()) => {
            Mirrored::Recopy
        }
        Ended::Answer => Mirrored::Skip,
        Ended::Ok => {
            let args = &command.args;
            let frame = || reply.clone().into_frame();
            match rewrite(command.spec.name, args, frame, now_ms) {
                Some(commands) if commands.is_empty() => Mirrored::Skip,
                Some(commands) => Mirrored::Send(commands),
                None => Mirrored::Send(vec![args.clone()]),
            }
        }
    }
}

/// A rewrite of `args`, or None to send them as they are. An empty list: nothing to send.
fn rewrite(
    name: &str,
    args: &[Bytes],
    reply: impl FnOnce() -> Frame,
    now: i64,
) -> Option<Vec<Vec<Bytes>>> {
    let one = |v: Vec<Bytes>| Some(vec![v]);
    match name {
        "INCRBYFLOAT" => {
            let value = string(&reply())?;
            one(vec![text("SET"), args[1].clone(), value, text("KEEPTTL")])
        }
        "HINCRBYFLOAT" => {
            let value = string(&reply())?;
            one(vec![
                text("HSET"),
                args[1].clone(),
                args.get(2)?.clone(),
                value,
            ])
        }
        "XADD" => xadd(args, reply),
        "SPOP" => {
            let frame = reply();
            let popped: Vec<Bytes> = match items(&frame) {
                Some(items) => items.iter().filter_map(string).collect(),
                None => string(&frame).into_iter().collect(),
            };
            if popped.is_empty() {
                return Some(Vec::new());
            }
            let mut out = vec![text("SREM"), args[1].clone()];
            out.extend(popped);
            one(out)
        }
        "EXPIRE" | "PEXPIRE" | "SETEX" | "PSETEX" | "SET" | "GETEX" | "RESTORE" => {
            timed(name, args, now)
        }
        "BLPOP" | "BRPOP" | "BLMPOP" | "BZPOPMIN" | "BZPOPMAX" | "BZMPOP" | "BRPOPLPUSH"
        | "BLMOVE" => blocking(name, args, reply),
        "XREADGROUP" => {
            // `XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS …`
            let mut out = args.get(..4)?.to_vec();
            let mut i = 4;
            while let Some(arg) = args.get(i) {
                if is(Some(arg), "STREAMS") {
                    out.extend(args[i..].iter().cloned());
                    break;
                }
                if is(Some(arg), "BLOCK") {
                    i += 2;
                    continue;
                }
                out.push(arg.clone());
                i += 1;
            }
            one(out)
        }
        "XCLAIM" => xclaim(args, reply),
        "XAUTOCLAIM" => xautoclaim(args, reply),
        _ => None,
    }
}

/// A relative time made the absolute one the primary applied at `now`.
fn timed(name: &str, args: &[Bytes], now: i64) -> Option<Vec<Vec<Bytes>>> {
    let at = |n: i64, unit: i64| text(&now.saturating_add(n.saturating_mul(unit)).to_string());
    let one = |v: Vec<Bytes>| Some(vec![v]);
    match name {
        "EXPIRE" | "PEXPIRE" => {
            let unit = if name == "EXPIRE" { 1000 } else { 1 };
            let n = number(args.get(2))?;
            let mut out = vec![text("PEXPIREAT"), args[1].clone(), at(n, unit)];
            out.extend(args[3..].iter().cloned());
            one(out)
        }
        "SETEX" | "PSETEX" => {
            let unit = if name == "SETEX" { 1000 } else { 1 };
            let n = number(args.get(2))?;
            let value = args.get(3)?.clone();
            one(vec![
                text("SET"),
                args[1].clone(),
                value,
                text("PXAT"),
                at(n, unit),
            ])
        }
        "SET" | "GETEX" => {
            let first = if name == "SET" { 3 } else { 2 };
            let mut out: Vec<Bytes> = args[..first].to_vec();
            let mut i = first;
            while let Some(arg) = args.get(i) {
                let unit = if is(Some(arg), "EX") {
                    1000
                } else if is(Some(arg), "PX") {
                    1
                } else {
                    out.push(arg.clone());
                    i += 1;
                    continue;
                };
                out.push(text("PXAT"));
                out.push(at(number(args.get(i + 1))?, unit));
                i += 2;
            }
            one(out)
        }
        "RESTORE" => {
            let ttl = number(args.get(2))?;
            let absolute = args[4..].iter().any(|a| is(Some(a), "ABSTTL"));
            if ttl == 0 || absolute {
                return None;
            }
            let mut out = args.to_vec();
            out[2] = at(ttl, 1);
            out.push(text("ABSTTL"));
            one(out)
        }
        _ => None,
    }
}

/// A blocking pop: the pop it ended in, nothing if it timed out.
fn blocking(name: &str, args: &[Bytes], reply: impl FnOnce() -> Frame) -> Option<Vec<Vec<Bytes>>> {
    let one = |v: Vec<Bytes>| Some(vec![v]);
    match name {
        "BLPOP" | "BRPOP" => {
            let frame = reply();
            let key = items(&frame).and_then(|i| string(i.first()?));
            let pop = if name == "BLPOP" { "LPOP" } else { "RPOP" };
            Some(key.map_or_else(Vec::new, |key| vec![vec![text(pop), key]]))
        }
        "BLMPOP" => {
            let frame = reply();
            let Some([key, popped]) = items(&frame) else {
                return Some(Vec::new());
            };
            let n = items(popped).map_or(0, <[Frame]>::len);
            // `BLMPOP timeout numkeys key … LEFT|RIGHT [COUNT n]`
            let keys = usize::try_from(number(args.get(2))?).ok()?;
            let left = is(args.get(3 + keys), "LEFT");
            one(vec![
                text(if left { "LPOP" } else { "RPOP" }),
                string(key)?,
                text(&n.to_string()),
            ])
        }
        "BZPOPMIN" | "BZPOPMAX" => {
            let frame = reply();
            match items(&frame) {
                Some([key, member, ..]) => one(vec![text("ZREM"), string(key)?, string(member)?]),
                _ => Some(Vec::new()),
            }
        }
        "BZMPOP" => {
            let frame = reply();
            let Some([key, popped]) = items(&frame) else {
                return Some(Vec::new());
            };
            let mut out = vec![text("ZREM"), string(key)?];
            // Each popped member is `[member, score]` (a map in RESP3).
            match popped {
                Frame::Map { data, .. } => out.extend(data.keys().filter_map(string)),
                other => out.extend(
                    items(other)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|pair| string(items(pair)?.first()?)),
                ),
            }
            one(out)
        }
        "BRPOPLPUSH" | "BLMOVE" => {
            if matches!(reply(), Frame::Null) {
                return Some(Vec::new());
            }
            let mut out = if name == "BRPOPLPUSH" {
                vec![text("RPOPLPUSH")]
            } else {
                vec![text("LMOVE")]
            };
            // Everything but the timeout, the last argument.
            out.extend(args[1..args.len() - 1].iter().cloned());
            one(out)
        }
        _ => None,
    }
}

/// `XADD` with an id the server picks (`*`, `ms-*`): the id it picked.
fn xadd(args: &[Bytes], reply: impl FnOnce() -> Frame) -> Option<Vec<Vec<Bytes>>> {
    let mut i = 2;
    loop {
        let arg = args.get(i)?;
        if is(Some(arg), "NOMKSTREAM") {
            i += 1;
        } else if is(Some(arg), "MAXLEN") || is(Some(arg), "MINID") {
            i += 1;
            if is(args.get(i), "=") || is(args.get(i), "~") {
                i += 1;
            }
            i += 1;
        } else if is(Some(arg), "LIMIT") {
            i += 2;
        } else if arg[..] == b"*"[..] || arg.ends_with(b"-*") {
            let frame = reply();
            if matches!(frame, Frame::Null) {
                return Some(Vec::new());
            }
            let mut out = args.to_vec();
            out[i] = string(&frame)?;
            return Some(vec![out]);
        } else {
            return None;
        }
    }
}

/// The ids of claimed entries in a reply: `[id, fields]` pairs, or ids (`JUSTID`); a deleted
/// entry's nil is skipped.
fn claimed_ids(frame: &Frame) -> Vec<Bytes> {
    items(frame)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| match items(e) {
            Some(pair) => string(pair.first()?),
            None => string(e),
        })
        .collect()
}

/// `XCLAIM key group consumer min-idle id … [options]`: the ids the primary claimed, with
/// no minimum idle time.
fn xclaim(args: &[Bytes], reply: impl FnOnce() -> Frame) -> Option<Vec<Vec<Bytes>>> {
    let ids = claimed_ids(&reply());
    if ids.is_empty() {
        return Some(Vec::new());
    }
    let options_at = (5..args.len())
        .find(|&i| {
            ["IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID"]
                .iter()
                .any(|w| is(args.get(i), w))
        })
        .unwrap_or(args.len());
    let mut out = args[..4].to_vec();
    out.push(text("0"));
    out.extend(ids);
    out.extend(args[options_at..].iter().cloned());
    Some(vec![out])
}

/// `XAUTOCLAIM key group consumer min-idle start [COUNT n] [JUSTID]`: `XCLAIM` of the ids
/// it claimed and `XACK` of the deleted entries it dropped from the pending list.
fn xautoclaim(args: &[Bytes], reply: impl FnOnce() -> Frame) -> Option<Vec<Vec<Bytes>>> {
    let frame = reply();
    let parts = items(&frame)?;
    let ids = parts.get(1).map(claimed_ids).unwrap_or_default();
    let deleted = parts.get(2).map(claimed_ids).unwrap_or_default();
    let mut out = Vec::new();
    if !ids.is_empty() {
        let mut claim = vec![text("XCLAIM")];
        claim.extend(args[1..4].iter().cloned());
        claim.push(text("0"));
        claim.extend(ids);
        if args.iter().skip(6).any(|a| is(Some(a), "JUSTID")) {
            claim.push(text("JUSTID"));
        }
        out.push(claim);
    }
    if !deleted.is_empty() {
        let mut ack = vec![text("XACK"), args[1].clone(), args[2].clone()];
        ack.extend(deleted);
        out.push(ack);
    }
    Some(out)
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
