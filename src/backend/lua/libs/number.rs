//! Numbers as the C library writes and reads them: `printf("%.*g")` and `strtod`, both in
//! the C locale, both correctly rounded as glibc's are.

/// `x` as C's `printf("%.{precision}g", x)` writes it.
pub(super) fn fmt_g(x: f64, precision: usize) -> String {
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x.is_nan() {
        return format!("{sign}nan");
    }
    if x.is_infinite() {
        return format!("{sign}inf");
    }
    let p = precision.max(1);
    if x == 0.0 {
        return format!("{sign}0");
    }
    // An integer with fewer digits than the precision prints as itself.
    if x.fract() == 0.0 && x.abs() < 10f64.powi(p.min(15) as i32) {
        return format!("{}", x as i64);
    }
    // Rust's exponent form rounds exactly, ties to even, as glibc does: its digits and
    // exponent are the ones %e would print, and %g picks its form from that exponent.
    let e = format!("{:.*e}", p - 1, x.abs());
    let (mantissa, exponent) = e.split_once('e').unwrap_or((&e, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    if digits.len() != p {
        // Not a form Rust writes; kept only so that no input can index past the digits.
        return format!("{sign}{}", x.abs());
    }
    let mut out = String::with_capacity(p + 8);
    out.push_str(sign);
    if exponent < -4 || exponent >= p as i64 {
        out.push(digits[0] as char);
        push_fraction(&mut out, &digits[1..]);
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        let magnitude = exponent.unsigned_abs();
        if magnitude < 10 {
            out.push('0');
        }
        out.push_str(&magnitude.to_string());
    } else if exponent >= 0 {
        let point = exponent as usize + 1;
        out.extend(digits[..point].iter().map(|&d| d as char));
        push_fraction(&mut out, &digits[point..]);
    } else {
        out.push('0');
        let mut fraction = vec![b'0'; (-exponent - 1) as usize];
        fraction.extend_from_slice(&digits);
        push_fraction(&mut out, &fraction);
    }
    out
}

/// `.digits` without trailing zeros, or nothing when none is left.
fn push_fraction(out: &mut String, digits: &[u8]) {
    let end = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
    if end > 0 {
        out.push('.');
        out.extend(digits[..end].iter().map(|&d| d as char));
    }
}

/// What C's `strtod` reads at the start of `s` (which holds no leading space): the value and
/// the bytes read, none when no number starts there.
pub(super) fn strtod(s: &[u8]) -> (f64, usize) {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let negative = at(0) == b'-';
    let start = usize::from(matches!(at(0), b'-' | b'+'));
    let signed = |v: f64| if negative { -v } else { v };
    let rest = &s[start.min(s.len())..];
    if starts_with_ignore_case(rest, b"inf") {
        let len = if starts_with_ignore_case(rest, b"infinity") {
            8
        } else {
            3
        };
        return (signed(f64::INFINITY), start + len);
    }
    if starts_with_ignore_case(rest, b"nan") {
        let (nan, len) = nan_with_payload(&rest[3..]);
        return (signed(nan), start + 3 + len);
    }
    if at(start) == b'0' && at(start + 1) | 0x20 == b'x' {
        return match hex_float(&s[start + 2..]) {
            Some((v, len)) => (signed(v), start + 2 + len),
            // "0x" with no hex digits after it: only the zero is read.
            None => (signed(0.0), start + 1),
        };
    }
    let mut i = start;
    let int_digits = count(s, i, u8::is_ascii_digit);
    i += int_digits;
    let mut frac_digits = 0;
    if at(i) == b'.' {
        frac_digits = count(s, i + 1, u8::is_ascii_digit);
        if int_digits + frac_digits > 0 {
            i += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return (0.0, 0);
    }
    let mantissa_end = i;
    if at(i) | 0x20 == b'e' {
        let mut j = i + 1;
        if matches!(at(j), b'+' | b'-') {
            j += 1;
        }
        let exp_digits = count(s, j, u8::is_ascii_digit);
        if exp_digits > 0 {
            i = j + exp_digits;
        }
    }
    (
        signed(decimal(&s[start..mantissa_end], &s[mantissa_end..i])),
        i,
    )
}

fn count(s: &[u8], from: usize, pred: fn(&u8) -> bool) -> usize {
    s.get(from..)
        .map_or(0, |t| t.iter().take_while(|b| pred(b)).count())
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// The value of an unsigned decimal mantissa (`12.5`, `.5`, `1.`) and its exponent part
/// (`e-7`, or empty), correctly rounded.
fn decimal(mantissa: &[u8], exponent: &[u8]) -> f64 {
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(p) => (&mantissa[..p], &mantissa[p + 1..]),
        None => (mantissa, &mantissa[..0]),
    };
    // Up to 15 digits and nothing else: exact as an integer.
    if frac.is_empty() && exponent.is_empty() && int.len() <= 15 {
        return int.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')) as f64;
    }
    // Rust's parser is exact too; it is handed a form it always accepts, with the exponent
    // clamped where the value is long past overflow or underflow anyway.
    let mut text = String::with_capacity(mantissa.len() + 24);
    text.push_str(if int.is_empty() {
        "0"
    } else {
        std::str::from_utf8(int).unwrap_or("0")
    });
    text.push('.');
    text.push_str(if frac.is_empty() {
        "0"
    } else {
        std::str::from_utf8(frac).unwrap_or("0")
    });
    if !exponent.is_empty() {
        let negative = exponent.get(1) == Some(&b'-');
        let digits = exponent[1..].iter().skip_while(|b| !b.is_ascii_digit());
        let mut e: i64 = 0;
        for d in digits {
            e = (e * 10 + i64::from(d - b'0')).min(1 << 40);
        }
        text.push('e');
        if negative {
            text.push('-');
        }
        text.push_str(&e.to_string());
    }
    text.parse().unwrap_or(0.0)
}

/// A hexadecimal float after its `0x`: mantissa digits with an optional point, then an
/// optional binary exponent; `None` when no hex digit is there.
fn hex_float(s: &[u8]) -> Option<(f64, usize)> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let int_digits = count(s, 0, u8::is_ascii_hexdigit);
    let mut i = int_digits;
    let mut frac_digits = 0;
    if at(i) == b'.' {
        frac_digits = count(s, i + 1, u8::is_ascii_hexdigit);
        if int_digits + frac_digits > 0 {
            i += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    let digits = s[..int_digits]
        .iter()
        .chain(s[int_digits..i].iter().skip(1))
        .map(|&b| hex_value(b));
    let mut exponent: i64 = 0;
    if at(i) | 0x20 == b'p' {
        let mut j = i + 1;
        let negative = at(j) == b'-';
        if matches!(at(j), b'+' | b'-') {
            j += 1;
        }
        let exp_digits = count(s, j, u8::is_ascii_digit);
        if exp_digits > 0 {
            for &d in &s[j..j + exp_digits] {
                exponent = (exponent * 10 + i64::from(d - b'0')).min(1 << 40);
            }
            if negative {
                exponent = -exponent;
            }
            i = j + exp_digits;
        }
    }
    Some((hex_value_of(digits, frac_digits as i64, exponent), i))
}

fn hex_value(b: u8) -> u64 {
    match b {
        b'0'..=b'9' => u64::from(b - b'0'),
        _ => u64::from((b | 0x20) - b'a' + 10),
    }
}

/// Hex digits (`frac` of them after the point) times 2^`exponent`, rounded to nearest even.
fn hex_value_of(digits: impl Iterator<Item = u64>, frac: i64, exponent: i64) -> f64 {
    // Keep the first 60 significant bits exactly and remember whether any 1 bit fell off.
    let mut mantissa: u64 = 0;
    let mut scale = exponent.saturating_sub(frac.saturating_mul(4));
    let mut sticky = false;
    for d in digits {
        if mantissa >> 56 == 0 {
            mantissa = mantissa << 4 | d;
        } else {
            scale = scale.saturating_add(4);
            sticky |= d != 0;
        }
    }
    if mantissa == 0 {
        return 0.0;
    }
    // Value = (mantissa + sticky) * 2^scale. Normalise so bit 63 is the leading one.
    let lead = mantissa.leading_zeros() as i64;
    mantissa <<= lead;
    scale -= lead;
    // Leading bit's weight is 2^(scale + 63).
    let top = scale.saturating_add(63);
    if top > 1023 {
        return f64::INFINITY;
    }
    // Bits kept: 53 for a normal result, fewer for a subnormal one.
    let keep = (top + 1075).min(53);
    if keep <= 0 {
        // Below half the smallest subnormal, or exactly half of it with nothing after.
        let half = keep == 0 && (mantissa << 1 != 0 || sticky);
        return if half { f64::from_bits(1) } else { 0.0 };
    }
    let drop = 64 - keep as u32;
    let mut kept = mantissa >> drop;
    let rest = mantissa << (64 - drop);
    let half = 1u64 << 63;
    if rest > half || (rest == half && (sticky || kept & 1 == 1)) {
        kept += 1;
    }
    scale_by_power_of_two(kept as f64, top - keep + 1)
}

/// `v * 2^e` without intermediate overflow or underflow (v is an integer below 2^54).
fn scale_by_power_of_two(mut v: f64, mut e: i64) -> f64 {
    while e > 0 {
        let step = e.min(1000);
        v *= 2f64.powi(step as i32);
        e -= step;
    }
    while e < 0 {
        let step = (-e).min(1000);
        v *= 2f64.powi(-(step as i32));
        e += step;
    }
    v
}

/// glibc's NaN after `nan`: an optional `(n-char-sequence)` whose number, when it reads as
/// one, goes into the mantissa. Returns the NaN and the bytes read after `nan`.
fn nan_with_payload(s: &[u8]) -> (f64, usize) {
    const QUIET: u64 = 0x7ff8_0000_0000_0000;
    if s.first() != Some(&b'(') {
        return (f64::from_bits(QUIET), 0);
    }
    let body = count(s, 1, |b| b.is_ascii_alphanumeric() || *b == b'_');
    if s.get(1 + body) != Some(&b')') {
        return (f64::from_bits(QUIET), 0);
    }
    let seq = &s[1..1 + body];
    let payload = parse_c_unsigned(seq).map_or(0, |n| n & 0x0007_ffff_ffff_ffff);
    (f64::from_bits(QUIET | payload), body + 2)
}

/// `strtoull(s, &end, 0)` when it reads all of `s` (wrapping past 64 bits as it saturates
/// there, which leaves the same low bits for a NaN payload only up to overflow).
fn parse_c_unsigned(s: &[u8]) -> Option<u64> {
    let (digits, radix) = if s.len() > 2 && s[0] == b'0' && s[1] | 0x20 == b'x' {
        (&s[2..], 16)
    } else if s.len() > 1 && s[0] == b'0' {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in digits {
        let d = (b as char).to_digit(radix)?;
        n = n
            .checked_mul(u64::from(radix))
            .and_then(|n| n.checked_add(u64::from(d)))
            .unwrap_or(u64::MAX);
    }
    Some(n)
}
