//! Arguments read the way Redis reads them: integers by `string2ll`'s rules, doubles by
//! `strtod`'s, glob patterns by `stringmatchlen`'s. The error wording is Redis's.

use super::store::{fail, Fail, NOT_FLOAT, NOT_INTEGER, SYNTAX};

/// Whether `arg` is the keyword `word` (ASCII case-insensitive).
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// An integer as Redis accepts it: optional `-`, digits, no leading zeros or `+`, in range.
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    if arg.is_empty() || arg.len() > 20 {
        return None;
    }
    if arg == b"0" {
        return Some(0);
    }
    let (negative, digits) = match arg.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, arg),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut value: u64 = 0;
    for d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if value > (i64::MAX as u64) + 1 {
            None
        } else {
            Some((value as i128).wrapping_neg() as i64)
        }
    } else {
        i64::try_from(value).ok()
    }
}

/// An integer argument, or Redis's error.
pub fn int(arg: &[u8]) -> Result<i64, Fail> {
    match parse_i64(arg) {
        Some(n) => Ok(n),
        None => fail(NOT_INTEGER),
    }
}

/// A double as `strtod` reads it (no surrounding space, no NaN); `inf`, `-inf`, `+inf`.
pub fn parse_f64(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    if text.is_empty()
        || text.starts_with(char::is_whitespace)
        || text.ends_with(char::is_whitespace)
    {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    Some(value)
}

/// A double argument, or Redis's error.
pub fn float(arg: &[u8]) -> Result<f64, Fail> {
    match parse_f64(arg) {
        Some(v) => Ok(v),
        None => fail(NOT_FLOAT),
    }
}

/// A double rendered as Redis renders a `long double` result (`INCRBYFLOAT`): plain digits,
/// no exponent, no trailing zeros. holdfast computes in `f64` and prints the shortest digits
/// that read back as the same value, which matches Redis for the values people use.
pub fn human_double(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e17 {
        return format!("{}", value as i64);
    }
    // Rounded to 15 significant digits first: what f64 computes exactly, where Redis's
    // long double is closer to the decimal the user meant (0.1 + 0.2 is 0.3, not
    // 0.30000000000000004). Plain digits, never an exponent, as `%.17Lf` trimmed prints.
    let rounded: f64 = format!("{value:.14e}").parse().unwrap_or(value);
    format!("{rounded}")
}

/// Redis's glob: `*`, `?`, `[...]` with ranges and `^`, `\\` escapes. Matched with one
/// remembered star (greedy, backtracking to the last `*` only), so a pattern of many stars
/// costs at most pattern × text steps, never an exponential search (Redis fixed the same in
/// 7.0.9).
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut s) = (0usize, 0usize);
    // (pattern index after the last star, text index it is matched from)
    let mut star: Option<(usize, usize)> = None;
    while s < text.len() {
        if pattern.get(p) == Some(&b'*') {
            while pattern.get(p) == Some(&b'*') {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, s));
            continue;
        }
        if let Some(next) = one(pattern, p, text[s]) {
            p = next;
            s += 1;
            continue;
        }
        match star {
            Some((after, from)) => {
                p = after;
                s = from + 1;
                star = Some((after, from + 1));
            }
            None => return false,
        }
    }
    while pattern.get(p) == Some(&b'*') {
        p += 1;
    }
    p == pattern.len()
}

/// Whether the single-character token at `p` (`?`, a class, an escape or a byte) matches
/// `ch`; the index after the token when it does.
fn one(pattern: &[u8], p: usize, ch: u8) -> Option<usize> {
    match *pattern.get(p)? {
        b'?' => Some(p + 1),
        b'[' => {
            let mut i = p + 1;
            let not = pattern.get(i) == Some(&b'^');
            if not {
                i += 1;
            }
            let mut matched = false;
            loop {
                match pattern.get(i) {
                    // Unterminated: the class takes the rest of the pattern, as in Redis.
                    None => break,
                    Some(b'\\') if i + 1 < pattern.len() => {
                        i += 1;
                        matched |= pattern[i] == ch;
                    }
                    Some(b']') => break,
                    Some(&lo) if i + 2 < pattern.len() && pattern[i + 1] == b'-' => {
                        let hi = pattern[i + 2];
                        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                        matched |= ch >= lo && ch <= hi;
                        i += 2;
                    }
                    Some(&c) => matched |= c == ch,
                }
                i += 1;
            }
            (matched != not).then_some((i + 1).min(pattern.len()))
        }
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == ch).then_some(p + 2),
        c => (c == ch).then_some(p + 1),
    }
}

/// `… cursor [MATCH pattern] [COUNT count]` of `HSCAN`/`SSCAN`/`ZSCAN` (cursor at argument
/// 2): (cursor, pattern, count), or Redis's error.
pub fn scan_args(a: &[bytes::Bytes]) -> Result<(u64, Option<&[u8]>, usize), Fail> {
    let arg = |i: usize| a.get(i).map(|b| b.as_ref()).unwrap_or_default();
    let Some(cursor) = std::str::from_utf8(arg(2))
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return fail("ERR invalid cursor");
    };
    let (mut pattern, mut count) = (None, 10usize);
    let mut j = 3;
    while j < a.len() {
        let has_next = j + 1 < a.len();
        if is(arg(j), "MATCH") && has_next {
            pattern = Some(arg(j + 1));
        } else if is(arg(j), "COUNT") && has_next {
            count = match parse_i64(arg(j + 1)) {
                Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
                Some(_) => return fail(SYNTAX),
                None => return fail(NOT_INTEGER),
            };
        } else {
            return fail(SYNTAX);
        }
        j += 2;
    }
    Ok((cursor, pattern, count))
}

/// `numkeys key ... SIDE [COUNT count]` of `LMPOP` and `ZMPOP` (numkeys at argument 1):
/// the keys, whether the side is `sides[1]`, and the count.
pub fn mpop_args<'a>(
    a: &'a [bytes::Bytes],
    sides: [&str; 2],
) -> Result<(&'a [bytes::Bytes], bool, Option<i64>), Fail> {
    let arg = |i: usize| a.get(i).map(|b| b.as_ref()).unwrap_or_default();
    let numkeys = match parse_i64(arg(1)) {
        Some(n) if n > 0 => n as usize,
        _ => return fail("ERR numkeys should be greater than 0"),
    };
    // The side's place must exist (Redis's own check, with its syntax error).
    if numkeys > a.len().saturating_sub(3) {
        return fail(SYNTAX);
    }
    let side = arg(2 + numkeys);
    let second = if is(side, sides[0]) {
        false
    } else if is(side, sides[1]) {
        true
    } else {
        return fail(SYNTAX);
    };
    let mut count = None;
    let mut i = 3 + numkeys;
    while i < a.len() {
        if is(arg(i), "COUNT") && i + 1 < a.len() && count.is_none() {
            count = match parse_i64(arg(i + 1)) {
                Some(n) if n > 0 => Some(n),
                _ => return fail("ERR count should be greater than 0"),
            };
            i += 2;
        } else {
            return fail(SYNTAX);
        }
    }
    Ok((&a[2..2 + numkeys], second, count))
}

/// `key [count [WORD]]` of `HRANDFIELD` (`WITHVALUES`) and `ZRANDMEMBER` (`WITHSCORES`):
/// the count, and whether the word was given.
pub fn rand_args(a: &[bytes::Bytes], word: &str) -> Result<(Option<i64>, bool), Fail> {
    let count = match a.get(2) {
        None => None,
        Some(c) => match int(c)? {
            i64::MIN => {
                return fail(
                    "ERR value is out of range, value must between -9223372036854775807 and \
                     9223372036854775807",
                )
            }
            n => Some(n),
        },
    };
    let with = match a.get(3) {
        None => false,
        Some(w) if is(w, word) && a.len() == 4 => true,
        Some(_) => return fail(SYNTAX),
    };
    Ok((count, with))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"01"[..],
            b"+1",
            b"",
            b"-",
            b"1 ",
            b" 1",
            b"9223372036854775808",
            b"-0",
            b"1.0",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn doubles_as_strtod_reads_them() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"abc"), None);
    }

    #[test]
    fn globs() {
        assert!(glob(b"*", b""));
        assert!(glob(b"h?llo", b"hello"));
        assert!(glob(b"h*llo", b"heeeello"));
        assert!(glob(b"h[ae]llo", b"hallo"));
        assert!(!glob(b"h[^e]llo", b"hello"));
        assert!(glob(b"h[a-b]llo", b"hbllo"));
        assert!(glob(b"h\\*", b"h*"));
        assert!(!glob(b"h\\*", b"hx"));
        assert!(!glob(b"a*b", b"ac"));
        assert!(glob(b"*a*b", b"xxaxxb"));
        assert!(glob(b"a*", b"a"));
        assert!(!glob(b"a?", b"a"));
        // As in Redis, `-]` makes a range ending at `]`, and the class then runs on.
        assert!(glob(b"[a-]", b"]"));
        assert!(!glob(b"[a-]x", b"]x"));
        assert!(
            glob(b"h[ello", b"hl"),
            "an unterminated class takes the rest"
        );
    }

    /// Many stars against a long text that does not match: an exponential matcher would
    /// not finish this (the test would hang); the single-star backtracking answers at once.
    #[test]
    fn a_pattern_of_many_stars_ends() {
        let pattern = b"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        let text = vec![b'a'; 4000];
        assert!(!glob(pattern, &text));
    }
}
