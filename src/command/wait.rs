//! How long a blocking command may wait, read from its arguments as Redis reads them:
//! seconds as a float (`BLPOP key 1.5`, 0 for ever), or `BLOCK` milliseconds for a stream
//! read (`XREAD BLOCK 5000 STREAMS ...`). One reading for every backend: a Redis backend
//! bounds its wait for the reply by it, a SQL backend waits that long itself.

use bytes::Bytes;
use std::time::Duration;

/// Redis's refusal of a timeout argument, worded as Redis 7.0 words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// A blocking pop's timeout that is no float.
    #[error("ERR timeout is not a float or out of range")]
    NotFloat,
    /// A stream read's `BLOCK` that is no integer.
    #[error("ERR timeout is not an integer or out of range")]
    NotInteger,
    /// A timeout below zero (or too large to count in milliseconds).
    #[error("ERR timeout is negative")]
    Negative,
}

/// The wait `args` (name first) asks for: `Some(Ok(None))` for ever, `Some(Ok(Some(d)))` at
/// most `d`; None when it does not block (`XREAD` without `BLOCK`, or no blocking command).
pub fn wait(args: &[Bytes]) -> Option<Result<Option<Duration>, WaitError>> {
    let name = args.first()?;
    let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    if is("XREAD") || is("XREADGROUP") {
        let ms = args
            .get(block_at(args)? + 1)
            .map_or(&[][..], |t| t.as_ref());
        return Some(match parse_i64(ms) {
            Some(ms) if ms < 0 => Err(WaitError::Negative),
            Some(ms) => Ok((ms > 0).then(|| Duration::from_millis(ms.unsigned_abs()))),
            None => Err(WaitError::NotInteger),
        });
    }
    let at = if is("BLMPOP") || is("BZMPOP") {
        1
    } else if [
        "BLPOP",
        "BRPOP",
        "BZPOPMIN",
        "BZPOPMAX",
        "BLMOVE",
        "BRPOPLPUSH",
    ]
    .iter()
    .any(|n| is(n))
    {
        args.len().saturating_sub(1)
    } else {
        return None;
    };
    let text = args.get(at).map_or(&[][..], |t| t.as_ref());
    let Some(seconds) = parse_f64(text) else {
        return Some(Err(WaitError::NotFloat));
    };
    let ms = (seconds * 1000.0).ceil();
    // Redis converts to a 64-bit integer: what overflows comes out negative.
    if !(0.0..9.2e18).contains(&ms) {
        return Some(Err(WaitError::Negative));
    }
    // In range and not negative: the cast is exact for whole numbers.
    Some(Ok((ms > 0.0).then(|| Duration::from_millis(ms as u64))))
}

/// Where `BLOCK` is among a stream read's options (before `STREAMS`: a key may be named
/// `BLOCK`).
pub fn block_at(args: &[Bytes]) -> Option<usize> {
    let end = args
        .iter()
        .position(|a| a.eq_ignore_ascii_case(b"STREAMS"))
        .unwrap_or(args.len());
    args[..end]
        .iter()
        .position(|a| a.eq_ignore_ascii_case(b"BLOCK"))
}

/// A decimal integer as Redis's `string2ll` reads it: no sign but `-`, no leading zero, no
/// space.
fn parse_i64(text: &[u8]) -> Option<i64> {
    if text == b"0" {
        return Some(0);
    }
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if !matches!(digits.first(), Some(b'1'..=b'9')) || text.len() > 20 {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A float as Redis reads a timeout: no space around it, not NaN.
fn parse_f64(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    text.parse::<f64>().ok().filter(|v| !v.is_nan())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(words: &str) -> Option<Result<Option<Duration>, WaitError>> {
        let args: Vec<Bytes> = words
            .split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        wait(&args)
    }

    #[test]
    fn each_blocking_command_names_its_wait() {
        let ms = |n| Some(Ok(Some(Duration::from_millis(n))));
        let cases = [
            ("BLPOP a b 0", Some(Ok(None))),
            ("blpop a 1.5", ms(1500)),
            ("BRPOP a 0.0001", ms(1)),
            ("BZPOPMIN a 2", ms(2000)),
            ("BZPOPMAX a 2", ms(2000)),
            ("BLMOVE a b LEFT RIGHT 3", ms(3000)),
            ("BRPOPLPUSH a b 0", Some(Ok(None))),
            ("BLMPOP 4 1 a LEFT", ms(4000)),
            ("BZMPOP 0 1 a MIN", Some(Ok(None))),
            ("XREAD BLOCK 5 STREAMS s 0", ms(5)),
            ("XREAD COUNT 1 BLOCK 0 STREAMS s 0", Some(Ok(None))),
            ("XREADGROUP GROUP g c BLOCK 10 STREAMS s >", ms(10)),
            // A key named BLOCK is no option.
            ("XREAD STREAMS BLOCK 5", None),
            ("XREAD STREAMS s 0", None),
            ("GET a", None),
            ("BLPOP a x", Some(Err(WaitError::NotFloat))),
            ("BLPOP a 1x", Some(Err(WaitError::NotFloat))),
            ("BLPOP a nan", Some(Err(WaitError::NotFloat))),
            ("BLPOP a -1", Some(Err(WaitError::Negative))),
            ("BLPOP a 1e300", Some(Err(WaitError::Negative))),
            ("XREAD BLOCK -1 STREAMS s 0", Some(Err(WaitError::Negative))),
            (
                "XREAD BLOCK 1.5 STREAMS s 0",
                Some(Err(WaitError::NotInteger)),
            ),
            (
                "XREAD BLOCK 01 STREAMS s 0",
                Some(Err(WaitError::NotInteger)),
            ),
        ];
        for (words, want) in cases {
            assert_eq!(of(words), want, "{words}");
        }
        let spaced = [
            Bytes::from_static(b"BLPOP"),
            Bytes::from_static(b"a"),
            Bytes::from_static(b" 1"),
        ];
        assert_eq!(wait(&spaced), Some(Err(WaitError::NotFloat)));
    }
}
