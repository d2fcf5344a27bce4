//! A key's value as a `DUMP` payload carries it: written in the encoding Redis 7.0 would
//! choose for the same value with its default thresholds (a listpack for a small hash or
//! sorted set, an intset for a small set of integers, a quicklist of 8 KB listpacks for a
//! list, integers and LZF inside strings), so where Redis's own payload depends only on the
//! value, holdfast's is the same bytes; and read in every encoding Redis 7.0 writes.
//! Streams are `stream`'s. The ziplist encodings of Redis before 7.0 are not read.

use super::stream::{self, DumpStream};
use super::{listpack, put_len, put_raw_string, Reader};

/// A value of one of the types a payload carries.
#[derive(Clone, Debug, PartialEq)]
pub enum DumpValue {
    /// A string.
    String(Vec<u8>),
    /// A list, head first.
    List(Vec<Vec<u8>>),
    /// A set's members.
    Set(Vec<Vec<u8>>),
    /// A hash's fields and values.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set's members and scores.
    Zset(Vec<(Vec<u8>, f64)>),
    /// A stream with its consumer groups.
    Stream(Box<DumpStream>),
}

/// Why a payload cannot be restored, worded as Redis words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadPayload {
    /// The trailer's version is newer than Redis 7.0's, or its checksum is wrong.
    #[error("ERR DUMP payload version or checksum are wrong")]
    Trailer,
    /// The body is not a value holdfast can read.
    #[error("ERR Bad data format")]
    Format,
}

const STRING: u8 = 0;
const LIST: u8 = 1;
const SET: u8 = 2;
const ZSET: u8 = 3;
const HASH: u8 = 4;
const ZSET_2: u8 = 5;
const SET_INTSET: u8 = 11;
const HASH_LISTPACK: u8 = 16;
const ZSET_LISTPACK: u8 = 17;
const LIST_QUICKLIST_2: u8 = 18;

/// Redis 7.0's default thresholds for the compact encodings.
const LISTPACK_ENTRIES: usize = 128;
const LISTPACK_VALUE: usize = 64;
const INTSET_ENTRIES: usize = 512;
/// `list-max-listpack-size -2`: a quicklist node's listpack grows to 8 KB.
const LIST_NODE_BYTES: usize = 8192;

/// A score as Redis writes it into a listpack (`d2string`): an integral value as an integer,
/// anything else as `%.17g`.
fn score_text(score: f64) -> Vec<u8> {
    if score.is_nan() {
        return b"nan".to_vec();
    }
    if score.is_infinite() {
        return if score < 0.0 {
            b"-inf".to_vec()
        } else {
            b"inf".to_vec()
        };
    }
    if score == 0.0 {
        return if score.is_sign_negative() {
            b"-0".to_vec()
        } else {
            b"0".to_vec()
        };
    }
    let bound = (i64::MAX / 2) as f64;
    if score.fract() == 0.0 && score >= -bound && score <= bound {
        return (score as i64).to_string().into_bytes();
    }
    crate::backend::lua::number::g17(score).into_bytes()
}

/// The payload `DUMP` answers for `value`: its type, its body, the RDB version and CRC-64.
pub fn dump(value: &DumpValue) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        DumpValue::String(s) => {
            out.push(STRING);
            put_raw_string(&mut out, s);
        }
        DumpValue::List(items) => {
            out.push(LIST_QUICKLIST_2);
            let nodes = list_nodes(items);
            put_len(&mut out, nodes.len());
            for node in nodes {
                put_len(&mut out, 2); // a packed node: a listpack
                put_raw_string(
                    &mut out,
                    &listpack::encode(node.iter().map(|i| i.as_slice())),
                );
            }
        }
        DumpValue::Set(members) => {
            let ints: Option<Vec<i64>> = members.iter().map(|m| listpack::as_int(m)).collect();
            match ints {
                Some(ints) if ints.len() <= INTSET_ENTRIES => {
                    out.push(SET_INTSET);
                    put_raw_string(&mut out, &intset(ints));
                }
                _ => {
                    out.push(SET);
                    put_len(&mut out, members.len());
                    for m in members {
                        put_raw_string(&mut out, m);
                    }
                }
            }
        }
        DumpValue::Hash(pairs) => {
            let small = pairs.len() <= LISTPACK_ENTRIES
                && pairs
                    .iter()
                    .all(|(f, v)| f.len() <= LISTPACK_VALUE && v.len() <= LISTPACK_VALUE);
            if small {
                out.push(HASH_LISTPACK);
                let elements = pairs.iter().flat_map(|(f, v)| [f.as_slice(), v.as_slice()]);
                put_raw_string(&mut out, &listpack::encode(elements));
            } else {
                out.push(HASH);
                put_len(&mut out, pairs.len());
                for (f, v) in pairs {
                    put_raw_string(&mut out, f);
                    put_raw_string(&mut out, v);
                }
            }
        }
        DumpValue::Zset(members) => {
            let mut sorted = members.clone();
            sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            let small = sorted.len() <= LISTPACK_ENTRIES
                && sorted.iter().all(|(m, _)| m.len() <= LISTPACK_VALUE);
            if small {
                out.push(ZSET_LISTPACK);
                let texts: Vec<Vec<u8>> = sorted.iter().map(|(_, s)| score_text(*s)).collect();
                let elements = sorted
                    .iter()
                    .zip(&texts)
                    .flat_map(|((m, _), s)| [m.as_slice(), s.as_slice()]);
                put_raw_string(&mut out, &listpack::encode(elements));
            } else {
                // From the highest score down, as Redis walks its skiplist from the tail.
                out.push(ZSET_2);
                put_len(&mut out, sorted.len());
                for (m, score) in sorted.iter().rev() {
                    put_raw_string(&mut out, m);
                    out.extend_from_slice(&score.to_le_bytes());
                }
            }
        }
        DumpValue::Stream(s) => {
            out.push(stream::STREAM_LISTPACKS_2);
            stream::put(&mut out, s);
        }
    }
    super::seal(&mut out);
    out
}

/// A list cut into quicklist nodes as pushing it from the head of the payload's order would
/// fill them: a node takes an element while it stays within 8 KB (Redis's estimate: the
/// node's bytes, the element's, and 8 more).
fn list_nodes(items: &[Vec<u8>]) -> Vec<Vec<Vec<u8>>> {
    let mut nodes: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut size = 0usize;
    for item in items {
        let fits = nodes
            .last()
            .is_some_and(|_| size + item.len() + 8 <= LIST_NODE_BYTES);
        if !fits {
            nodes.push(Vec::new());
            size = listpack::encode([]).len();
        }
        if let Some(node) = nodes.last_mut() {
            node.push(item.clone());
            size = listpack::encode(node.iter().map(|i| i.as_slice())).len();
        }
    }
    nodes
}

/// An intset: the narrowest width that holds every value, the count, the sorted values.
fn intset(mut values: Vec<i64>) -> Vec<u8> {
    values.sort_unstable();
    values.dedup();
    let width: usize = if values.iter().all(|v| i16::try_from(*v).is_ok()) {
        2
    } else if values.iter().all(|v| i32::try_from(*v).is_ok()) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(8 + width * values.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    out
}

fn read_intset(blob: &[u8]) -> Option<Vec<Vec<u8>>> {
    let width = u32::from_le_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    let count = u32::from_le_bytes(blob.get(4..8)?.try_into().ok()?) as usize;
    if !matches!(width, 2 | 4 | 8) || blob.len() != 8 + width.checked_mul(count)? {
        return None;
    }
    Some(
        blob[8..]
            .chunks(width)
            .map(|c| {
                let v = match width {
                    2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
                    4 => i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                    _ => i64::from_le_bytes(c.try_into().unwrap_or_default()),
                };
                v.to_string().into_bytes()
            })
            .collect(),
    )
}

/// A score of the old sorted-set encoding: a length byte, then its text (253 NaN, 254
/// +inf, 255 -inf).
fn read_text_score(r: &mut Reader) -> Option<f64> {
    match r.byte()? {
        253 => Some(f64::NAN),
        254 => Some(f64::INFINITY),
        255 => Some(f64::NEG_INFINITY),
        n => std::str::from_utf8(r.take(usize::from(n))?)
            .ok()?
            .parse()
            .ok(),
    }
}

fn parse_score(text: &[u8]) -> Option<f64> {
    match text {
        b"inf" | b"+inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        _ => std::str::from_utf8(text).ok()?.parse().ok(),
    }
}

fn pairs(items: Vec<Vec<u8>>) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if !items.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Some(out)
}

/// The value a `RESTORE` payload carries.
///
/// # Errors
/// [`BadPayload`] as Redis would answer it.
pub fn restore(payload: &[u8]) -> Result<DumpValue, BadPayload> {
    let body = super::unseal(payload).ok_or(BadPayload::Trailer)?;
    let mut r = Reader::new(body);
    let value = read_value(&mut r).ok_or(BadPayload::Format)?;
    let empty = match &value {
        DumpValue::String(_) => false,
        DumpValue::List(v) | DumpValue::Set(v) => v.is_empty(),
        DumpValue::Hash(v) => v.is_empty(),
        DumpValue::Zset(v) => v.is_empty(),
        // A stream may be empty: its groups and counters are its value.
        DumpValue::Stream(_) => false,
    };
    if !r.done() || empty {
        return Err(BadPayload::Format);
    }
    Ok(value)
}

fn read_value(r: &mut Reader) -> Option<DumpValue> {
    let strings =
        |r: &mut Reader, n: usize| -> Option<Vec<Vec<u8>>> { (0..n).map(|_| r.string()).collect() };
    let kind = r.byte()?;
    Some(match kind {
        STRING => DumpValue::String(r.string()?),
        LIST => {
            let n = r.length()?;
            DumpValue::List(strings(r, n)?)
        }
        SET => {
            let n = r.length()?;
            DumpValue::Set(strings(r, n)?)
        }
        SET_INTSET => DumpValue::Set(read_intset(&r.string()?)?),
        HASH => {
            let n = r.length()?.checked_mul(2)?;
            DumpValue::Hash(pairs(strings(r, n)?)?)
        }
        HASH_LISTPACK => DumpValue::Hash(pairs(listpack::decode(&r.string()?)?)?),
        ZSET | ZSET_2 => {
            let old = kind == ZSET;
            let n = r.length()?;
            let mut members = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                let member = r.string()?;
                let score = if old {
                    read_text_score(r)?
                } else {
                    f64::from_le_bytes(r.take(8)?.try_into().ok()?)
                };
                members.push((member, score));
            }
            members.reverse();
            DumpValue::Zset(members)
        }
        ZSET_LISTPACK => {
            let items = pairs(listpack::decode(&r.string()?)?)?;
            let members: Option<Vec<(Vec<u8>, f64)>> = items
                .into_iter()
                .map(|(m, s)| Some((m, parse_score(&s)?)))
                .collect();
            DumpValue::Zset(members?)
        }
        LIST_QUICKLIST_2 => {
            let nodes = r.length()?;
            let mut items = Vec::new();
            for _ in 0..nodes {
                match r.length()? {
                    1 => items.push(r.string()?),
                    2 => items.extend(listpack::decode(&r.string()?)?),
                    _ => return None,
                }
            }
            DumpValue::List(items)
        }
        stream::STREAM_LISTPACKS | stream::STREAM_LISTPACKS_2 => {
            DumpValue::Stream(Box::new(stream::read(r, kind)?))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `DUMP` payloads of Redis 7.0.15, and the values they carry.
    fn redis_payloads() -> Vec<(&'static [u8], DumpValue)> {
        let s = |x: &str| x.as_bytes().to_vec();
        vec![
            (
                b"\x00\xc0\x0c\n\x00<*\xf8Q\\\x04\xbc\xd5",
                DumpValue::String(s("12")),
            ),
            (
                b"\x00\xc1\x7f\xff\n\x00\x17`\x82(T\x80\x84\x80",
                DumpValue::String(s("-129")),
            ),
            (
                b"\x00\x05hello\n\x00cr\xdfve4 \n",
                DumpValue::String(s("hello")),
            ),
            (
                b"\x00\xc3\t2\x01aa\xe0%\x00\x01aa\n\x00\t\xacH\xb9\xab\x15\xfb\xc9",
                DumpValue::String(vec![b'a'; 50]),
            ),
            (
                b"\x12\x01\x02\x0f\x0f\x00\x00\x00\x03\x00\x81a\x02\x01\x01\x81b\x02\xff\n\x00\x90C\xa3L\xeb\x8e\x1b\x1c",
                DumpValue::List(vec![s("a"), s("1"), s("b")]),
            ),
            (
                b"\x0b\x0e\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00\x03\x00\n\x00\xa5\x02\\\xe2mnM\x1b",
                DumpValue::Set(vec![s("1"), s("2"), s("3")]),
            ),
            (
                b"\x02\x01\x01a\n\x00b\x96\xe9~D\xd2\x1am",
                DumpValue::Set(vec![s("a")]),
            ),
            (
                b"\x11\x14\x14\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x832.5\x04\xff\n\x00\xd4Ln\xa4\xf6D\xd9\xd7",
                DumpValue::Zset(vec![(s("a"), 1.0), (s("b"), 2.5)]),
            ),
            (
                b"\x10\x0c\x0c\x00\x00\x00\x02\x00\x81f\x02\x01\x01\xff\n\x001\xba\x08\x19I\xa0\xe3\xdd",
                DumpValue::Hash(vec![(s("f"), s("1"))]),
            ),
        ]
    }

    #[test]
    fn redis_s_payloads_restore_and_dump_to_the_same_bytes() {
        for (payload, value) in redis_payloads() {
            assert_eq!(restore(payload), Ok(value.clone()), "{payload:?}");
            assert_eq!(dump(&value), payload, "{value:?}");
        }
    }

    #[test]
    fn large_values_take_the_plain_encodings_and_read_back() {
        let big = |n: usize| {
            (0..n)
                .map(|i| format!("member-{i}").into_bytes())
                .collect::<Vec<_>>()
        };
        let values = [
            DumpValue::Set(big(600)),
            DumpValue::Set((0..600).map(|i| i.to_string().into_bytes()).collect()),
            DumpValue::Hash(big(200).into_iter().map(|m| (m.clone(), m)).collect()),
            DumpValue::Hash(vec![(b"f".to_vec(), vec![b'x'; 100])]),
            DumpValue::Zset(
                big(200)
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| (m, i as f64 / 3.0))
                    .collect(),
            ),
            DumpValue::List(big(5000)),
        ];
        for value in values {
            let payload = dump(&value);
            let back = restore(&payload).expect("restores");
            match (&value, &back) {
                (DumpValue::Set(a), DumpValue::Set(b)) => {
                    let (mut a, mut b) = (a.clone(), b.clone());
                    a.sort();
                    b.sort();
                    assert_eq!(a, b);
                }
                _ => assert_eq!(back, value),
            }
        }
    }

    #[test]
    fn a_damaged_payload_is_refused_as_redis_words_it() {
        let mut payload = dump(&DumpValue::String(b"x".to_vec()));
        let last = payload.len() - 1;
        payload[last] ^= 1;
        assert_eq!(restore(&payload), Err(BadPayload::Trailer));
        let mut body = vec![STRING, 0x05, b'a'];
        super::super::seal(&mut body);
        assert_eq!(restore(&body), Err(BadPayload::Format));
        let mut empty = vec![SET, 0x00];
        super::super::seal(&mut empty);
        assert_eq!(restore(&empty), Err(BadPayload::Format));
    }
}
