//! Arguments read the way Redis reads them: integers by `string2ll`'s rules, doubles by
//! `strtod`'s, glob patterns by `stringmatchlen`'s. The error wording is Redis's.

use super::store::{fail, Fail, NOT_FLOAT, NOT_INTEGER};

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
    format!("{value}")
}

/// Redis's glob: `*`, `?`, `[...]` with ranges and `^`, `\` escapes.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    glob_at(pattern, text, 0)
}

fn glob_at(mut p: &[u8], mut s: &[u8], depth: usize) -> bool {
    // Redis bounds its recursion the same way against pathological patterns.
    if depth > 1000 {
        return false;
    }
    while let Some(&c) = p.first() {
        match c {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                for i in 0..=s.len() {
                    if glob_at(&p[1..], &s[i..], depth + 1) {
                        return true;
                    }
                }
                return false;
            }
            b'?' => {
                if s.is_empty() {
                    return false;
                }
                s = &s[1..];
                p = &p[1..];
            }
            b'[' => {
                let Some(&ch) = s.first() else { return false };
                p = &p[1..];
                let not = p.first() == Some(&b'^');
                if not {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    match p {
                        [] => break,
                        [b'\\', esc, rest @ ..] => {
                            if *esc == ch {
                                matched = true;
                            }
                            p = rest;
                        }
                        [b']', ..] => break,
                        [lo, b'-', hi, rest @ ..] if *hi != b']' => {
                            let (lo, hi) = if lo <= hi { (*lo, *hi) } else { (*hi, *lo) };
                            if ch >= lo && ch <= hi {
                                matched = true;
                            }
                            p = rest;
                        }
                        [one, rest @ ..] => {
                            if *one == ch {
                                matched = true;
                            }
                            p = rest;
                        }
                    }
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                s = &s[1..];
                // Skip the closing bracket, if any.
                if !p.is_empty() {
                    p = &p[1..];
                }
            }
            b'\\' if p.len() >= 2 => {
                if s.first() != Some(&p[1]) {
                    return false;
                }
                s = &s[1..];
                p = &p[2..];
            }
            _ => {
                if s.first() != Some(&c) {
                    return false;
                }
                s = &s[1..];
                p = &p[1..];
            }
        }
    }
    s.is_empty()
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
    }
}
