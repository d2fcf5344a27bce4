//! `BITFIELD` and `BITFIELD_RO` on SQL backends: integers of 1 to 64 bits at any bit offset
//! of a string value, read, set or incremented with Redis's overflow rules (`WRAP`, `SAT`,
//! `FAIL`). The parsing and the arithmetic are pure ([`parse`], [`apply`]) and tested here
//! against the cases Redis's own tests and documentation give.

use super::args;
use super::store::*;
use super::strings::{arg, string};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

const TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
const OFFSET: &str = "ERR bit offset is not an integer or out of range";
/// Redis's largest string, in bytes: no offset may reach past it.
const MAX_BYTES: i64 = 512 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Set(i64),
    Incr(i64),
}

/// One operation: what, on which bits, with the overflow rule in force when it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    op: Op,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

fn kind(text: &[u8]) -> Result<(bool, u32), Fail> {
    let signed = match text.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return fail(TYPE),
    };
    match args::parse_i64(&text[1..]) {
        Some(n) if n >= 1 && n <= if signed { 64 } else { 63 } => Ok((signed, n as u32)),
        _ => fail(TYPE),
    }
}

fn offset(text: &[u8], bits: u32) -> Result<u64, Fail> {
    let hashed = text.first() == Some(&b'#');
    let n = args::parse_i64(if hashed { &text[1..] } else { text });
    let Some(mut n) = n else { return fail(OFFSET) };
    if hashed {
        n = n.wrapping_mul(i64::from(bits));
    }
    if n < 0 || (n >> 3) >= MAX_BYTES {
        return fail(OFFSET);
    }
    Ok(n as u64)
}

/// The operations of `BITFIELD key op...`, checked as Redis checks them (in order, the
/// first bad one answering).
fn parse(a: &[Bytes]) -> Result<Vec<Field>, Fail> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < a.len() {
        let rest = a.len() - j - 1;
        let sub = a[j].to_ascii_uppercase();
        let wants = match sub.as_slice() {
            b"GET" if rest >= 2 => 2,
            b"SET" | b"INCRBY" if rest >= 3 => 3,
            b"OVERFLOW" if rest >= 1 => {
                overflow = match a[j + 1].to_ascii_uppercase().as_slice() {
                    b"WRAP" => Overflow::Wrap,
                    b"SAT" => Overflow::Sat,
                    b"FAIL" => Overflow::Fail,
                    _ => return fail("ERR Invalid OVERFLOW type specified"),
                };
                j += 2;
                continue;
            }
            _ => return fail(SYNTAX),
        };
        let (signed, bits) = kind(&a[j + 1])?;
        let offset = offset(&a[j + 2], bits)?;
        let op = match sub.as_slice() {
            b"GET" => Op::Get,
            b"SET" => Op::Set(args::int(&a[j + 3])?),
            _ => Op::Incr(args::int(&a[j + 3])?),
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        j += 1 + wants;
    }
    Ok(fields)
}

fn read(value: &[u8], offset: u64, bits: u32) -> u64 {
    let mut out = 0u64;
    for i in 0..u64::from(bits) {
        let at = offset + i;
        let bit = value
            .get((at >> 3) as usize)
            .is_some_and(|b| b & (0x80 >> (at & 7)) != 0);
        out = (out << 1) | u64::from(bit);
    }
    out
}

fn write(value: &mut [u8], offset: u64, bits: u32, v: u64) {
    for i in 0..u64::from(bits) {
        let at = offset + i;
        let bit = (v >> (u64::from(bits) - 1 - i)) & 1 == 1;
        if let Some(byte) = value.get_mut((at >> 3) as usize) {
            let mask = 0x80u8 >> (at & 7);
            if bit {
                *byte |= mask;
            } else {
                *byte &= !mask;
            }
        }
    }
}

fn signed_of(raw: u64, bits: u32) -> i64 {
    if bits == 64 {
        raw as i64
    } else {
        ((raw << (64 - bits)) as i64) >> (64 - bits)
    }
}

/// `value + incr` in `bits` unsigned bits: the result, or None when it overflows under
/// `FAIL`. As Redis: a value already past the width counts as an overflow.
fn unsigned_add(value: u64, incr: i64, bits: u32, rule: Overflow) -> Option<u64> {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let high = value > max || (incr > 0 && incr > max_incr);
    let low = !high && incr < 0 && incr < min_incr;
    if !high && !low {
        return Some(value.wrapping_add(incr as u64));
    }
    match rule {
        Overflow::Wrap => Some(value.wrapping_add(incr as u64) & max),
        Overflow::Sat => Some(if high { max } else { 0 }),
        Overflow::Fail => None,
    }
}

/// `value + incr` in `bits` signed bits, as [`unsigned_add`].
fn signed_add(value: i64, incr: i64, bits: u32, rule: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let high = value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr);
    let low = !high
        && (value < min
            || (bits != 64 && incr < min_incr)
            || (value < 0 && incr < 0 && incr < min_incr));
    if !high && !low {
        return Some(value.wrapping_add(incr));
    }
    match rule {
        Overflow::Wrap => {
            let sum = (value as u64).wrapping_add(incr as u64);
            Some(signed_of(
                sum & if bits == 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                },
                bits,
            ))
        }
        Overflow::Sat => Some(if high { max } else { min }),
        Overflow::Fail => None,
    }
}

/// Runs `fields` on `value` (grown as writes need it): each one's reply (None: a `FAIL`
/// overflow, nil), and whether anything changed.
fn apply(value: &mut [u8], fields: &[Field]) -> (Vec<Option<i64>>, bool) {
    let mut changed = false;
    let mut replies = Vec::with_capacity(fields.len());
    for f in fields {
        let old = read(value, f.offset, f.bits);
        let (reply, new) = match (f.op, f.signed) {
            (Op::Get, true) => (Some(signed_of(old, f.bits)), None),
            (Op::Get, false) => (Some(old as i64), None),
            (Op::Set(v), true) => match signed_add(v, 0, f.bits, f.overflow) {
                Some(n) => (Some(signed_of(old, f.bits)), Some(n as u64)),
                None => (None, None),
            },
            (Op::Set(v), false) => match unsigned_add(v as u64, 0, f.bits, f.overflow) {
                Some(n) => (Some(old as i64), Some(n)),
                None => (None, None),
            },
            (Op::Incr(by), true) => {
                match signed_add(signed_of(old, f.bits), by, f.bits, f.overflow) {
                    Some(n) => (Some(n), Some(n as u64)),
                    None => (None, None),
                }
            }
            (Op::Incr(by), false) => match unsigned_add(old, by, f.bits, f.overflow) {
                Some(n) => (Some(n as i64), Some(n)),
                None => (None, None),
            },
        };
        if let Some(new) = new {
            let masked = if f.bits == 64 {
                new
            } else {
                new & ((1u64 << f.bits) - 1)
            };
            changed |= masked != old;
            write(value, f.offset, f.bits, masked);
        }
        replies.push(reply);
    }
    (replies, changed)
}

/// `BITFIELD key op...` (and `BITFIELD_RO key GET ...`, `read_only`).
pub async fn bitfield(ctx: &mut Ctx<'_>, a: &[Bytes], read_only: bool) -> Out {
    let key = arg(a, 1);
    let fields = parse(a)?;
    let writes = fields.iter().any(|f| f.op != Op::Get);
    if writes && read_only {
        return fail("ERR BITFIELD_RO only supports the GET subcommand");
    }
    if writes {
        ctx.lock(&[key]).await?;
    }
    let m = string(ctx, key).await?;
    let expires = m.as_ref().and_then(|m| m.expires);
    let mut value = m.and_then(|m| m.value).unwrap_or_default();
    let mut grown = false;
    if let Some(highest) = fields
        .iter()
        .filter(|f| f.op != Op::Get)
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max()
    {
        let need = (highest >> 3) as usize + 1;
        // A missing key's value is empty: it grows too, and is made.
        if value.len() < need {
            grown = true;
            value.resize(need.max(value.len()), 0);
        }
    }
    let (replies, changed) = apply(&mut value, &fields);
    if grown || changed {
        ctx.put_string(key, &value, expires, None).await?;
    }
    Ok(array(
        replies
            .into_iter()
            .map(|r| r.map_or(Frame::Null, int))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(op: Op, signed: bool, bits: u32, offset: u64, overflow: Overflow) -> Field {
        Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        }
    }

    #[test]
    fn overflow_rules_follow_redis() {
        use Overflow::*;
        // Redis's documentation: u2 INCRBY 1 four times, wrapping, saturating, failing.
        let mut seen = Vec::new();
        for rule in [Wrap, Sat, Fail] {
            let mut v = vec![0u8];
            let mut got = Vec::new();
            for _ in 0..4 {
                let (r, _) = apply(&mut v, &[f(Op::Incr(1), false, 2, 100 % 8, rule)]);
                got.push(r[0]);
            }
            seen.push(got);
        }
        assert_eq!(seen[0], vec![Some(1), Some(2), Some(3), Some(0)]);
        assert_eq!(seen[1], vec![Some(1), Some(2), Some(3), Some(3)]);
        assert_eq!(seen[2], vec![Some(1), Some(2), Some(3), None]);
        // i8: 127 + 1 wraps to -128, saturates at 127.
        assert_eq!(signed_add(127, 1, 8, Wrap), Some(-128));
        assert_eq!(signed_add(127, 1, 8, Sat), Some(127));
        assert_eq!(signed_add(-128, -1, 8, Sat), Some(-128));
        assert_eq!(signed_add(i64::MAX, 1, 64, Wrap), Some(i64::MIN));
        assert_eq!(unsigned_add(0, -1, 8, Wrap), Some(255));
        assert_eq!(unsigned_add(0, -1, 8, Sat), Some(0));
        // SET of a value past the width: wrapped, saturated, or refused.
        assert_eq!(unsigned_add(300, 0, 8, Wrap), Some(44));
        assert_eq!(unsigned_add(300, 0, 8, Sat), Some(255));
        assert_eq!(signed_add(200, 0, 8, Wrap), Some(-56));
    }

    #[test]
    fn fields_read_and_write_big_endian_bits() {
        let mut v = vec![0u8; 2];
        let (r, changed) = apply(&mut v, &[f(Op::Set(255), false, 8, 4, Overflow::Wrap)]);
        assert_eq!((r, changed), (vec![Some(0)], true));
        assert_eq!(v, vec![0x0f, 0xf0]);
        let (r, _) = apply(
            &mut v,
            &[
                f(Op::Get, false, 8, 4, Overflow::Wrap),
                f(Op::Get, true, 4, 4, Overflow::Wrap),
            ],
        );
        assert_eq!(r, vec![Some(255), Some(-1)]);
    }
}
