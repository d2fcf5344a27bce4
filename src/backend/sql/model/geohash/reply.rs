//! Text Redis writes into GEO replies: distances, coordinates, geohash
//! strings, and the unit table.

use super::cast::llrint;
use super::cell::{self, LON_SPAN, STD_LAT_SPAN, STEP_MAX};

/// extractUnitOrReply. Redis compares with strcasecmp on the C string, so
/// anything after an embedded NUL byte is ignored.
pub fn unit(name: &[u8]) -> Option<f64> {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let name = &name[..end];
    if name.eq_ignore_ascii_case(b"m") {
        Some(1.0)
    } else if name.eq_ignore_ascii_case(b"km") {
        Some(1000.0)
    } else if name.eq_ignore_ascii_case(b"ft") {
        Some(0.3048)
    } else if name.eq_ignore_ascii_case(b"mi") {
        Some(1609.34)
    } else {
        None
    }
}

/// fixedpoint_d2string with 4 decimals: the value times 10^4 rounded half
/// to even into an integer, printed with a dot before its last 4 digits.
pub fn fixed4(value: f64) -> String {
    if value == 0.0 {
        // Also catches -0.0, which Redis prints without a sign.
        return "0.0000".to_string();
    }
    let scaled = llrint(value * 10000.0);
    let digits = scaled.unsigned_abs().to_string();
    // At least one integer digit before the dot.
    let padded = format!("{digits:0>5}");
    let (int_part, frac_part) = padded.split_at(padded.len() - 4);
    let sign = if scaled < 0 { "-" } else { "" };
    format!("{sign}{int_part}.{frac_part}")
}

/// Distance text: metres converted to the unit, then `fixed4`.
pub fn format_distance(metres: f64, unit: f64) -> String {
    fixed4(metres / unit)
}

/// ld2string in human mode of a double widened to long double.
///
/// Widening a double to the x87 80-bit format is exact, and glibc's
/// `%.17Lf` prints the exact binary value correctly rounded (ties to even)
/// to 17 decimals. Rust's `{:.17}` also rounds the exact value with ties to
/// even, so the digits agree for every double.
#[cfg(test)]
pub fn format_coordinate(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x.is_nan() {
        // glibc prints the sign of a NaN.
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    let mut s = format!("{x:.17}");
    // `{:.17}` always prints a dot here, so trimming stops at it.
    let kept = s.trim_end_matches('0').trim_end_matches('.').len();
    s.truncate(kept);
    if s == "-0" {
        // Redis rewrites a negative value that rounds to zero as "0".
        return "0".to_string();
    }
    s
}

/// The geohash alphabet (base 32 without a, i, l, o).
const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";

/// GEOHASH: decode the score, re-encode with the standard latitude range
/// -90..90, and write 10 base-32 digits of its 52 bits plus a final '0'.
pub fn hash_string(score: f64) -> String {
    let (lon, lat) = cell::decode_score(score);
    // A decoded point is always inside the limits, so encoding succeeds;
    // 0 stands in should it ever fail.
    let bits = cell::encode_in(LON_SPAN, STD_LAT_SPAN, lon, lat, STEP_MAX).map_or(0, |c| c.bits);
    let mut out = String::with_capacity(11);
    for i in 0..10u32 {
        let idx = (bits >> (52 - (i + 1) * 5)) & 0x1f;
        // idx < 32 after the mask.
        out.push(char::from(ALPHABET[idx as usize]));
    }
    out.push('0');
    out
}

/// GEOADD's / FROMLONLAT's range check, with Redis's error text (`%f`).
pub fn check_lon_lat(lon: f64, lat: f64) -> Result<(), String> {
    if lon.is_nan() || lat.is_nan() {
        // Redis's float parser rejects NaN before any range check.
        return Err("ERR value is not a valid float".to_string());
    }
    if cell::in_limits(lon, lat) {
        Ok(())
    } else {
        Err(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        ))
    }
}
