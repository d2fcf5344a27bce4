//! Float-to-integer conversions as the x86-64 Redis binary performs them.
//!
//! Rust's `as` saturates and maps NaN to 0; the C casts compile to
//! `cvttsd2si`, which yields 0x8000_0000_0000_0000 for anything that does
//! not fit. The scores handed to these functions are ordinary sorted-set
//! scores, so a client may have stored any value there with ZADD.

const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// `cvttsd2si` into 64 bits: truncate, or i64::MIN when out of range / NaN.
pub fn cvtt_i64(x: f64) -> i64 {
    if x.is_nan() || x >= TWO_POW_63 || x < -TWO_POW_63 {
        i64::MIN
    } else {
        x as i64
    }
}

/// `(long long)x`.
pub fn c_double_to_i64(x: f64) -> i64 {
    cvtt_i64(x)
}

/// `(uint64_t)x`: values below 2^63 (and NaN) go through the signed
/// conversion; larger ones are shifted down by 2^63 first and the top bit
/// is flipped back afterwards.
pub fn c_double_to_u64(x: f64) -> u64 {
    // `!(x >= 2^63)` rather than `x < 2^63`: a NaN takes the first branch.
    if !(x >= TWO_POW_63) {
        cvtt_i64(x) as u64
    } else {
        (cvtt_i64(x - TWO_POW_63) as u64) ^ (1u64 << 63)
    }
}

/// `(uint32_t)x`: a 64-bit truncation keeping the low 32 bits.
pub fn c_double_to_u32(x: f64) -> u32 {
    cvtt_i64(x) as u32
}

/// `llrint(x)`: round half to even, i64::MIN when out of range / NaN.
pub fn llrint(x: f64) -> i64 {
    cvtt_i64(x.round_ties_even())
}
