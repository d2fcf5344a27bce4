//! Redis's listpack: the compact list of strings and integers that a small hash, sorted set
//! or list node is serialised as. Written as Redis 7.0 writes it (an element that reads as
//! an integer is stored as one, in the narrowest width), so a payload holdfast writes is
//! byte for byte Redis's where Redis's is; read in every form Redis writes.

/// The terminator after the last element.
const EOF: u8 = 0xFF;

/// The integer a listpack stores for `s`: a canonical decimal of at most 20 characters
/// ("12", "-5"; not "012", "+1", "-0" or " 1"), as Redis's `lpStringToInt64` decides.
pub fn as_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let text = std::str::from_utf8(s).ok()?;
    let value: i64 = text.parse().ok()?;
    (value.to_string().as_bytes() == s).then_some(value)
}

/// Appends one element's encoding and data (without its back-length).
fn put_element(out: &mut Vec<u8>, s: &[u8]) {
    if let Some(v) = as_int(s) {
        // Negative values are stored as their two's complement in the field's width.
        if (0..=127).contains(&v) {
            out.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = if v < 0 { (1 << 13) + v } else { v } as u16;
            out.push((u >> 8) as u8 | 0xC0);
            out.push(u as u8);
        } else if (-32768..=32767).contains(&v) {
            out.push(0xF1);
            out.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-8_388_608..=8_388_607).contains(&v) {
            out.push(0xF2);
            out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if i32::try_from(v).is_ok() {
            out.push(0xF3);
            out.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            out.push(0xF4);
            out.extend_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let len = s.len();
    if len < 64 {
        out.push(0x80 | len as u8);
    } else if len < 4096 {
        out.push(0xE0 | (len >> 8) as u8);
        out.push(len as u8);
    } else {
        out.push(0xF0);
        out.extend_from_slice(&(len as u32).to_le_bytes());
    }
    out.extend_from_slice(s);
}

/// Appends the back-length of an element whose encoding and data took `len` bytes: read
/// from its end, 7 bits a byte, the last byte first.
fn put_backlen(out: &mut Vec<u8>, len: usize) {
    let len = len as u64;
    let bytes: &[u64] = if len <= 127 {
        &[len]
    } else if len < 16_383 {
        &[len >> 7, (len & 127) | 128]
    } else if len < 2_097_151 {
        &[len >> 14, ((len >> 7) & 127) | 128, (len & 127) | 128]
    } else if len < 268_435_455 {
        &[
            len >> 21,
            ((len >> 14) & 127) | 128,
            ((len >> 7) & 127) | 128,
            (len & 127) | 128,
        ]
    } else {
        &[
            len >> 28,
            ((len >> 21) & 127) | 128,
            ((len >> 14) & 127) | 128,
            ((len >> 7) & 127) | 128,
            (len & 127) | 128,
        ]
    };
    out.extend(bytes.iter().map(|b| *b as u8));
}

/// The bytes one element takes in a listpack, its back-length included: what
/// [`encode`] writes for it.
pub fn element_size(s: &[u8]) -> usize {
    let len = match as_int(s) {
        Some(v) if (0..=127).contains(&v) => 1,
        Some(v) if (-4096..=4095).contains(&v) => 2,
        Some(v) if (-32768..=32767).contains(&v) => 3,
        Some(v) if (-8_388_608..=8_388_607).contains(&v) => 4,
        Some(v) if i32::try_from(v).is_ok() => 5,
        Some(_) => 9,
        None if s.len() < 64 => 1 + s.len(),
        None if s.len() < 4096 => 2 + s.len(),
        None => 5 + s.len(),
    };
    let backlen = match len {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    };
    len + backlen
}

/// The bytes of an empty listpack: its header and terminator.
pub const EMPTY_SIZE: usize = 7;

/// The listpack of `elements`, in order.
pub fn encode<'a>(elements: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![0; 6];
    let mut count = 0usize;
    for element in elements {
        let start = out.len();
        put_element(&mut out, element);
        let len = out.len() - start;
        put_backlen(&mut out, len);
        count += 1;
    }
    out.push(EOF);
    let total = out.len() as u32;
    out[..4].copy_from_slice(&total.to_le_bytes());
    // Past 65,534 the count is not kept: a reader walks the elements instead.
    let count = u16::try_from(count).unwrap_or(u16::MAX);
    out[4..6].copy_from_slice(&count.to_le_bytes());
    out
}

/// The elements of a listpack, integers as their decimal text; None when it is malformed.
pub fn decode(blob: &[u8]) -> Option<Vec<Vec<u8>>> {
    let total = u32::from_le_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    if total != blob.len() || blob.last() != Some(&EOF) {
        return None;
    }
    let mut at = 6;
    let mut out = Vec::new();
    while *blob.get(at)? != EOF {
        let start = at;
        let first = blob[at];
        let take = |from: usize, n: usize| blob.get(from..from.checked_add(n)?);
        let int = |v: i64| Some(v.to_string().into_bytes());
        let (element, len) = if first & 0x80 == 0 {
            (int(i64::from(first))?, 1)
        } else if first & 0xC0 == 0x80 {
            let n = usize::from(first & 0x3F);
            (take(at + 1, n)?.to_vec(), 1 + n)
        } else if first & 0xE0 == 0xC0 {
            let u = (i64::from(first & 0x1F) << 8) | i64::from(*blob.get(at + 1)?);
            let v = if u >= 1 << 12 { u - (1 << 13) } else { u };
            (int(v)?, 2)
        } else if first & 0xF0 == 0xE0 {
            let n = (usize::from(first & 0x0F) << 8) | usize::from(*blob.get(at + 1)?);
            (take(at + 2, n)?.to_vec(), 2 + n)
        } else {
            match first {
                0xF0 => {
                    let n = u32::from_le_bytes(take(at + 1, 4)?.try_into().ok()?) as usize;
                    (take(at + 5, n)?.to_vec(), 5 + n)
                }
                0xF1 => (
                    int(i64::from(i16::from_le_bytes(
                        take(at + 1, 2)?.try_into().ok()?,
                    )))?,
                    3,
                ),
                0xF2 => {
                    let b = take(at + 1, 3)?;
                    // Sign-extend the 24-bit value.
                    let v = i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8;
                    (int(i64::from(v))?, 4)
                }
                0xF3 => (
                    int(i64::from(i32::from_le_bytes(
                        take(at + 1, 4)?.try_into().ok()?,
                    )))?,
                    5,
                ),
                0xF4 => (
                    int(i64::from_le_bytes(take(at + 1, 8)?.try_into().ok()?))?,
                    9,
                ),
                _ => return None,
            }
        };
        at = start + len;
        // Skip the back-length: its bytes but the last have the high bit set.
        let mut backlen = Vec::new();
        put_backlen(&mut backlen, len);
        if blob.get(at..at + backlen.len())? != backlen.as_slice() {
            return None;
        }
        at += backlen.len();
        out.push(element);
    }
    (at + 1 == blob.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_stored_in_the_narrowest_width_and_read_back_as_text() {
        for (text, encoding) in [
            ("0", 0x00u8),
            ("127", 0x7F),
            ("128", 0xC0),
            ("-1", 0xDF),
            ("-4096", 0xD0),
            ("4096", 0xF1),
            ("-32768", 0xF1),
            ("32768", 0xF2),
            ("-8388608", 0xF2),
            ("8388608", 0xF3),
            ("2147483648", 0xF4),
            ("-9223372036854775808", 0xF4),
        ] {
            let blob = encode([text.as_bytes()]);
            assert_eq!(blob[6], encoding, "{text}");
            assert_eq!(
                decode(&blob),
                Some(vec![text.as_bytes().to_vec()]),
                "{text}"
            );
        }
    }

    #[test]
    fn what_is_not_a_canonical_integer_is_a_string() {
        for text in [
            "012",
            "+1",
            "-0",
            " 1",
            "1.5",
            "",
            "99999999999999999999",
            "abc",
        ] {
            assert_eq!(as_int(text.as_bytes()), None, "{text}");
            let blob = encode([text.as_bytes()]);
            assert_eq!(
                decode(&blob),
                Some(vec![text.as_bytes().to_vec()]),
                "{text}"
            );
        }
        for len in [63, 64, 4095, 4096, 20_000] {
            let s = vec![b'x'; len];
            assert_eq!(decode(&encode([s.as_slice()])), Some(vec![s]), "{len}");
        }
    }

    #[test]
    fn an_element_s_size_is_what_encode_writes_for_it() {
        let texts: Vec<Vec<u8>> = [
            "0",
            "127",
            "128",
            "-1",
            "-4097",
            "40000",
            "-8388609",
            "2147483648",
            "x",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .chain([62, 63, 64, 127, 128, 4094, 4095, 4096, 16_400, 20_000].map(|n| vec![b'y'; n]))
        .collect();
        for t in &texts {
            assert_eq!(
                element_size(t) + EMPTY_SIZE,
                encode([t.as_slice()]).len(),
                "{}",
                t.len()
            );
        }
    }

    #[test]
    fn a_known_listpack_is_redis_s_bytes() {
        // HSET h f v, then DUMP on Redis 7.0: the listpack inside the payload.
        let blob = encode([&b"f"[..], b"v"]);
        assert_eq!(
            blob,
            [0x0D, 0, 0, 0, 0x02, 0, 0x81, b'f', 0x02, 0x81, b'v', 0x02, 0xFF]
        );
        assert!(decode(&blob[..blob.len() - 1]).is_none());
    }
}
