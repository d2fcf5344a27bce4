//! Bitmaps on SQL backends: `SETBIT`, `GETBIT`, `BITCOUNT`, `BITPOS`, `BITOP` over the
//! string values in `hf_keys`, bit 0 being the most significant bit of the first byte, as in
//! Redis. Ranges follow Redis 7.0's rules (negative indexes from the end, `BYTE` or `BIT`
//! units); the range arithmetic is pure ([`range`], [`count`], [`position`]) and tested here.

use super::args;
use super::store::*;
use super::strings::{arg, string};
use bytes::Bytes;

const OFFSET: &str = "ERR bit offset is not an integer or out of range";

/// Redis's largest string: a bit offset's byte must fall inside it.
const MAX_BYTES: u64 = 512 * 1024 * 1024;

fn offset(text: &[u8]) -> Result<u64, Fail> {
    match args::parse_i64(text) {
        Some(n) if n >= 0 && (n as u64 >> 3) < MAX_BYTES => Ok(n as u64),
        _ => fail(OFFSET),
    }
}

fn bit_of(value: &[u8], at: u64) -> bool {
    value
        .get((at >> 3) as usize)
        .is_some_and(|byte| byte & (0x80 >> (at & 7)) != 0)
}

/// `SETBIT key offset 0|1`: the bit's old value; the string grows with zero bytes, and keeps
/// its expiry.
pub async fn setbit(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let key = arg(a, 1);
    let at = offset(arg(a, 2))?;
    let on = match args::parse_i64(arg(a, 3)) {
        Some(0) => false,
        Some(1) => true,
        _ => return fail("ERR bit is not an integer or out of range"),
    };
    ctx.lock(&[key]).await?;
    let m = string(ctx, key).await?;
    let expires = m.as_ref().and_then(|m| m.expires);
    let mut value = m.and_then(|m| m.value).unwrap_or_default();
    let byte = (at >> 3) as usize;
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (at & 7);
    let old = value[byte] & mask != 0;
    if on {
        value[byte] |= mask;
    } else {
        value[byte] &= !mask;
    }
    ctx.put_string(key, &value, expires, None).await?;
    Ok(int(i64::from(old)))
}

/// `GETBIT key offset`: 0 past the end, or for a missing key.
pub async fn getbit(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let at = offset(arg(a, 2))?;
    let value = string(ctx, arg(a, 1))
        .await?
        .and_then(|m| m.value)
        .unwrap_or_default();
    Ok(int(i64::from(bit_of(&value, at))))
}

/// A `start end` range over a string of `len` bytes, in bytes or bits, as Redis reads it:
/// the first and last bit it covers, or None when it is empty.
fn range(len: u64, start: i64, end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits { len << 3 } else { len } as i64;
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let mut start = if start < 0 { total + start } else { start }.max(0);
    let mut end = if end < 0 { total + end } else { end }.max(0);
    end = end.min(total - 1);
    if start > end || total == 0 {
        return None;
    }
    if !in_bits {
        start <<= 3;
        end = (end << 3) + 7;
    }
    Some((start as u64, end as u64))
}

/// Set bits from bit `first` to bit `last`, both included.
fn count(value: &[u8], first: u64, last: u64) -> u64 {
    (first..=last).filter(|at| bit_of(value, *at)).count() as u64
}

/// The first bit equal to `bit` from `first` to `last`; when there is none, -1, or (looking
/// for a 0 with no end given) the first bit past the range's last byte, as Redis answers.
fn position(value: &[u8], bit: bool, first: u64, last: u64, end_given: bool) -> i64 {
    match (first..=last).find(|at| bit_of(value, *at) == bit) {
        Some(at) => at as i64,
        None if !bit && !end_given => (((last >> 3) + 1) << 3) as i64,
        None => -1,
    }
}

/// `BYTE` or `BIT`.
fn unit(text: &[u8]) -> Result<bool, Fail> {
    if args::is(text, "BIT") {
        Ok(true)
    } else if args::is(text, "BYTE") {
        Ok(false)
    } else {
        fail(SYNTAX)
    }
}

/// `BITCOUNT key [start end [BYTE|BIT]]`.
pub async fn bitcount(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let Some(value) = string(ctx, arg(a, 1))
        .await?
        .map(|m| m.value.unwrap_or_default())
    else {
        return Ok(int(0));
    };
    let len = value.len() as u64;
    let bits = match a.len() {
        2 => range(len, 0, -1, false),
        4 | 5 => {
            let start = args::int(arg(a, 2))?;
            let end = args::int(arg(a, 3))?;
            let in_bits = if a.len() == 5 {
                unit(arg(a, 4))?
            } else {
                false
            };
            range(len, start, end, in_bits)
        }
        _ => return fail(SYNTAX),
    };
    Ok(int(bits.map_or(0, |(f, l)| count(&value, f, l)) as i64))
}

/// `BITPOS key bit [start [end [BYTE|BIT]]]`: a missing key is endless zeros.
pub async fn bitpos(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let bit = match args::int(arg(a, 2))? {
        0 => false,
        1 => true,
        _ => return fail("ERR The bit argument must be 1 or 0."),
    };
    let Some(value) = string(ctx, arg(a, 1))
        .await?
        .map(|m| m.value.unwrap_or_default())
    else {
        return Ok(int(if bit { -1 } else { 0 }));
    };
    let len = value.len() as u64;
    let (bits, end_given) = match a.len() {
        3 => (range(len, 0, -1, false), false),
        4..=6 => {
            let start = args::int(arg(a, 3))?;
            let in_bits = if a.len() == 6 {
                unit(arg(a, 5))?
            } else {
                false
            };
            let end = if a.len() >= 5 {
                args::int(arg(a, 4))?
            } else {
                -1
            };
            (range(len, start, end, in_bits), a.len() >= 5)
        }
        _ => return fail(SYNTAX),
    };
    Ok(int(match bits {
        Some((first, last)) => position(&value, bit, first, last, end_given),
        None => -1,
    }))
}

/// `BITOP AND|OR|XOR|NOT destkey key ...`: the result's length; an empty result deletes
/// the destination, any other replaces it (without expiry).
pub async fn bitop(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let op = arg(a, 1).to_ascii_uppercase();
    if !matches!(op.as_slice(), b"AND" | b"OR" | b"XOR" | b"NOT") {
        return fail(SYNTAX);
    }
    if op == b"NOT" && a.len() != 4 {
        return fail("ERR BITOP NOT must be called with a single source key.");
    }
    let dest = arg(a, 2);
    let mut locks: Vec<&[u8]> = a.iter().skip(2).map(|k| k.as_ref()).collect();
    locks.sort_unstable();
    locks.dedup();
    ctx.lock(&locks).await?;
    let mut sources = Vec::with_capacity(a.len() - 3);
    for key in a.iter().skip(3) {
        sources.push(
            string(ctx, key)
                .await?
                .and_then(|m| m.value)
                .unwrap_or_default(),
        );
    }
    let width = sources.iter().map(Vec::len).max().unwrap_or(0);
    let byte = |s: &Vec<u8>, i: usize| s.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..width)
        .map(|i| {
            let mut out = byte(&sources[0], i);
            for s in &sources[1..] {
                match op.as_slice() {
                    b"AND" => out &= byte(s, i),
                    b"OR" => out |= byte(s, i),
                    _ => out ^= byte(s, i),
                }
            }
            if op == b"NOT" {
                out = !out;
            }
            out
        })
        .collect();
    if result.is_empty() {
        ctx.delete(dest).await?;
    } else {
        let old = ctx.meta(dest).await?.map(|m| m.kind);
        ctx.put_string(dest, &result, None, old).await?;
    }
    Ok(int(result.len() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_redis() {
        // Bytes: 0..=-1 of 3 bytes is every bit.
        assert_eq!(range(3, 0, -1, false), Some((0, 23)));
        assert_eq!(range(3, 1, 1, false), Some((8, 15)));
        assert_eq!(range(3, -2, -1, false), Some((8, 23)));
        assert_eq!(range(3, 5, 10, false), None);
        assert_eq!(range(3, -1, -2, false), None);
        assert_eq!(range(3, -100, 0, false), Some((0, 7)));
        // Bits.
        assert_eq!(range(3, 5, 9, true), Some((5, 9)));
        assert_eq!(range(3, -3, -1, true), Some((21, 23)));
        assert_eq!(range(0, 0, -1, false), None);
    }

    #[test]
    fn counts_and_positions() {
        let v = [0b1111_0000u8, 0x00, 0xff];
        assert_eq!(count(&v, 0, 23), 12);
        assert_eq!(count(&v, 2, 5), 2);
        assert_eq!(position(&v, true, 0, 23, false), 0);
        assert_eq!(position(&v, false, 0, 23, false), 4);
        assert_eq!(position(&v, true, 4, 15, true), -1);
        // No clear bit: past the end without an end given, -1 with one.
        assert_eq!(position(&[0xff], false, 0, 7, false), 8);
        assert_eq!(position(&[0xff], false, 0, 7, true), -1);
        assert_eq!(position(&[0xff, 0xff], false, 3, 5, false), 8);
    }
}
