//! Blocking commands on SQL backends: `BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`, `BLMPOP`,
//! `BZPOPMIN`, `BZPOPMAX`, `BZMPOP`, and `XREAD`/`XREADGROUP` with `BLOCK`.
//!
//! Each is one attempt of its non-blocking form (`LMPOP`, `LMOVE`, `ZMPOP`, ...) in a write
//! transaction, its reply reshaped; inside `MULTI` that is all it does, as in Redis. Outside,
//! a client whose attempt finds nothing waits ([`Wakers`]) and tries again when a write of
//! this holdfast touches one of its keys, or after the backend's `blocking_poll` (a write by
//! another process sharing the database, which holdfast cannot hear), until its timeout. Waiters on a key are
//! served longest-waiting first: a write wakes the one that has waited longest; when it took
//! something it wakes the next, so a push of three elements serves three clients in order.

use super::args;
use super::store::{array, fail, Ctx, Fail, Out};
use super::{lists, zsets};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::time::Duration;

/// Whether `args` is a command that waits here: a blocking pop, or `XREAD`/`XREADGROUP`
/// with `BLOCK` among its options.
pub fn waits(args: &[Bytes]) -> bool {
    let name = args.first().map(|n| n.as_ref()).unwrap_or_default();
    is_blocking(name) || (is_stream_read(name) && crate::command::wait::block_at(args).is_some())
}

fn is_stream_read(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"XREAD") || name.eq_ignore_ascii_case(b"XREADGROUP")
}

/// A stream read's keys: the first half of what follows `STREAMS`.
pub fn stream_keys(a: &[Bytes]) -> &[Bytes] {
    let from = a
        .iter()
        .position(|x| args::is(x, "STREAMS"))
        .map_or(a.len(), |i| i + 1);
    let rest = a.get(from..).unwrap_or_default();
    &rest[..rest.len() / 2]
}

/// Whether a committed command may have given a waiting client something: a write, but not
/// a blocking pop or `XREADGROUP` that found nothing. Those changed nothing, and waking the
/// others for them would only have them try, find nothing, and wake each other for ever.
pub fn wakes(command: &[Bytes], reply: &Frame) -> bool {
    let name = command.first().map_or(&[][..], |n| n.as_ref());
    let found_nothing = matches!(reply, Frame::Null)
        && (is_blocking(name) || name.eq_ignore_ascii_case(b"XREADGROUP"));
    super::writes(name) == Some(true) && !found_nothing
}

/// Whether `name` is one of the blocking commands this module serves.
pub fn is_blocking(name: &[u8]) -> bool {
    [
        &b"BLPOP"[..],
        b"BRPOP",
        b"BLMOVE",
        b"BRPOPLPUSH",
        b"BLMPOP",
        b"BZPOPMIN",
        b"BZPOPMAX",
        b"BZMPOP",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// A blocking command's timeout argument, as Redis reads it: seconds (a float), 0 for none;
/// `Ok(None)` waits for ever.
///
/// # Errors
/// Redis's error reply for a timeout that is not a float or is negative.
pub fn timeout(a: &[Bytes]) -> Result<Option<Duration>, Fail> {
    match crate::command::wait::wait(a) {
        Some(Ok(wait)) => Ok(wait),
        Some(Err(refused)) => fail(refused.to_string()),
        // A stream read without BLOCK: no wait.
        None => Ok(Some(Duration::ZERO)),
    }
}

/// The keys a blocking command waits on: every list (or sorted set) it may pop from; not
/// `BLMOVE`'s destination.
pub fn keys(a: &[Bytes]) -> Vec<Bytes> {
    let upper = a
        .first()
        .map(|n| n.to_ascii_uppercase())
        .unwrap_or_default();
    match upper.as_slice() {
        b"XREAD" | b"XREADGROUP" => stream_keys(a).to_vec(),
        b"BLMOVE" | b"BRPOPLPUSH" => a.get(1).cloned().into_iter().collect(),
        b"BLMPOP" | b"BZMPOP" => {
            let n = args::parse_i64(arg(a, 2)).unwrap_or(0).max(0) as usize;
            a.iter().skip(3).take(n).cloned().collect()
        }
        _ => a
            .get(1..a.len().saturating_sub(1))
            .unwrap_or_default()
            .to_vec(),
    }
}

fn arg(a: &[Bytes], i: usize) -> &[u8] {
    a.get(i).map(|b| b.as_ref()).unwrap_or_default()
}

/// The command `name` with the arguments `rest`.
fn form(name: &'static [u8], rest: impl IntoIterator<Item = Bytes>) -> Vec<Bytes> {
    std::iter::once(Bytes::from_static(name))
        .chain(rest)
        .collect()
}

/// One attempt of a blocking command: its reply, or nil when there was nothing to take.
pub async fn attempt(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let upper = a
        .first()
        .map(|n| n.to_ascii_uppercase())
        .unwrap_or_default();
    match upper.as_slice() {
        b"BLPOP" | b"BRPOP" | b"BZPOPMIN" | b"BZPOPMAX" => {
            timeout(a)?;
            let keys = &a[1..a.len().saturating_sub(1)];
            let zset = upper.starts_with(b"BZ");
            let end: &'static [u8] = match upper.as_slice() {
                b"BLPOP" => b"LEFT",
                b"BRPOP" => b"RIGHT",
                b"BZPOPMIN" => b"MIN",
                _ => b"MAX",
            };
            let rest = std::iter::once(Bytes::from(keys.len().to_string()))
                .chain(keys.iter().cloned())
                .chain(std::iter::once(Bytes::from_static(end)));
            let reply = if zset {
                zsets::zmpop(ctx, &form(b"ZMPOP", rest)).await?
            } else {
                lists::lmpop(ctx, &form(b"LMPOP", rest)).await?
            };
            Ok(flatten(reply))
        }
        b"BLMPOP" | b"BZMPOP" => {
            timeout(a)?;
            let rest = a.iter().skip(2).cloned();
            if upper.as_slice() == b"BLMPOP" {
                lists::lmpop(ctx, &form(b"LMPOP", rest)).await
            } else {
                zsets::zmpop(ctx, &form(b"ZMPOP", rest)).await
            }
        }
        b"BLMOVE" => {
            for side in [arg(a, 3), arg(a, 4)] {
                if !args::is(side, "LEFT") && !args::is(side, "RIGHT") {
                    return fail(super::store::SYNTAX);
                }
            }
            timeout(a)?;
            let lmove = form(b"LMOVE", a.iter().skip(1).take(4).cloned());
            lists::lmove(ctx, &lmove, true).await
        }
        b"BRPOPLPUSH" => {
            timeout(a)?;
            let rpoplpush = form(b"RPOPLPUSH", a.iter().skip(1).take(2).cloned());
            lists::lmove(ctx, &rpoplpush, false).await
        }
        _ => fail(super::unsupported(arg(a, 0))),
    }
}

/// What a blocking command's wait does when a try failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again after `blocking_poll`: the try took nothing, or exact mode's token will
    /// answer what it took.
    TryAgain,
    /// Answer the failure.
    Answer,
}

/// The rule for a failed try of class `class`, the database failing since `down` ago, the
/// namespace holding requests for `hold`; `exact`: the command carries a token.
///
/// A try not attempted took nothing, so the wait goes on through an outage as any request
/// is held. A try that may have taken something (its `COMMIT`'s reply lost) ends the wait in
/// doubt, unless it carries a token: the pop and the token commit together, so the next try
/// answers what the first took, or, finding no token, takes for the first time. Either way
/// nothing is taken twice.
pub fn after_failure(
    class: crate::error::ErrorClass,
    exact: bool,
    down: Duration,
    hold: Duration,
) -> AfterFailure {
    use crate::error::ErrorClass;
    let held = down < hold;
    match class {
        ErrorClass::NotAttempted if held => AfterFailure::TryAgain,
        ErrorClass::Transient if held && exact => AfterFailure::TryAgain,
        _ => AfterFailure::Answer,
    }
}

/// `[key, [element]]` (what `LMPOP` and `ZMPOP` answer) as `[key, element]` (`BLPOP`) or
/// `[key, member, score]` (`BZPOPMIN`); nil stays nil.
fn flatten(reply: Frame) -> Frame {
    let Frame::Array { data, .. } = reply else {
        return reply;
    };
    let mut out = Vec::with_capacity(3);
    let mut parts = data.into_iter();
    if let Some(key) = parts.next() {
        out.push(key);
    }
    if let Some(Frame::Array { data: taken, .. }) = parts.next() {
        for element in taken {
            match element {
                Frame::Array { data: pair, .. } => out.extend(pair),
                other => out.push(other),
            }
        }
    }
    array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_try_is_tried_again_only_when_that_takes_nothing_twice() {
        use crate::error::ErrorClass::{NotAttempted, Other, Transient};
        use AfterFailure::{Answer, TryAgain};
        let s = Duration::from_secs;
        let cases = [
            (NotAttempted, false, s(1), s(5), TryAgain),
            (NotAttempted, true, s(1), s(5), TryAgain),
            (NotAttempted, false, s(5), s(5), Answer),
            // A lost reply: in doubt, unless the token answers it.
            (Transient, false, s(0), s(5), Answer),
            (Transient, true, s(0), s(5), TryAgain),
            (Transient, true, s(5), s(5), Answer),
            (Other, true, s(0), s(5), Answer),
        ];
        for (class, exact, down, hold, want) in cases {
            assert_eq!(
                after_failure(class, exact, down, hold),
                want,
                "{class:?} exact={exact} down={down:?}"
            );
        }
    }

    #[test]
    fn only_a_write_that_may_have_changed_something_wakes() {
        let command = |text: &str| -> Vec<Bytes> {
            text.split(' ')
                .map(|w| Bytes::from(w.to_string()))
                .collect()
        };
        let some = array(vec![]);
        let cases = [
            ("LPUSH q a", some.clone(), true),
            ("XADD s * f v", some.clone(), true),
            ("BLPOP q 0", some.clone(), true),
            ("BLPOP q 0", Frame::Null, false),
            ("BZPOPMIN z 0", Frame::Null, false),
            ("XREADGROUP GROUP g c STREAMS s >", some.clone(), true),
            ("XREADGROUP GROUP g c STREAMS s >", Frame::Null, false),
            // A nil from another write still changed something (SET ... GET of a new key).
            ("SET k v GET", Frame::Null, true),
            ("GET k", some.clone(), false),
            ("XREAD STREAMS s 0", some, false),
        ];
        for (text, reply, want) in cases {
            assert_eq!(wakes(&command(text), &reply), want, "{text}");
        }
    }
}
