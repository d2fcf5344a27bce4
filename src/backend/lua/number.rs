//! Numbers as Redis's scripting prints them: C's `%.17g`, the format `redis.call` gives a
//! Lua number argument (so `redis.call('set', k, 0.1)` stores `0.10000000000000001`, as
//! Redis does) and RESP2 gives a double reply.

/// `x` formatted as C's `printf("%.17g", x)`.
pub fn g17(x: f64) -> String {
    g(x, 17)
}

/// `x` as Lua 5.1's `tostring` prints it (`%.14g`).
pub fn g14(x: f64) -> String {
    g(x, 14)
}

/// `x` formatted as C's `printf("%.{precision}g", x)`.
fn g(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Seventeen significant digits, rounded as printf rounds them.
    let scientific = format!("{:.*e}", precision - 1, x);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..precision as i32).contains(&exponent) {
        let mut rest = digits[1..].trim_end_matches('0').to_string();
        if !rest.is_empty() {
            rest.insert(0, '.');
        }
        let (esign, eabs) = if exponent < 0 {
            ('-', -exponent)
        } else {
            ('+', exponent)
        };
        return format!("{sign}{}{rest}e{esign}{eabs:02}", &digits[..1]);
    }
    let point = exponent + 1;
    let text = if point <= 0 {
        format!("0.{}{}", "0".repeat(point.unsigned_abs() as usize), digits)
    } else {
        let point = point as usize;
        format!("{}.{}", &digits[..point], &digits[point..])
    };
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{sign}{text}")
}

#[cfg(test)]
mod tests {
    use super::{g14, g17};

    #[test]
    fn formats_as_printf_does() {
        for (x, want) in [
            (1.0, "1"),
            (-1.0, "-1"),
            (0.1, "0.10000000000000001"),
            (1.5, "1.5"),
            (100.0, "100"),
            (123456789.0, "123456789"),
            (1e17, "1e+17"),
            (1.5e17, "1.5e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (2.71, "2.71"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
            (-f64::INFINITY, "-inf"),
            (9007199254740993.0, "9007199254740992"),
        ] {
            assert_eq!(g17(x), want, "{x}");
        }
        for (x, want) in [
            (1e14, "1e+14"),
            (99999999999999.0, "99999999999999"),
            (0.1, "0.1"),
        ] {
            assert_eq!(g14(x), want, "{x}");
        }
    }
}
