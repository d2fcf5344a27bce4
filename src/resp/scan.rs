//! Replies found in a buffer without decoding them (a scan that skips blob payloads by their
//! length), decoded where holdfast must look inside one (an error reply, a push, a
//! handshake's answer), and commands encoded as multibulks: RESP as holdfast's backend
//! connections write and read it. Knows nothing of connections.

use super::{Output, Proto, Sink};
use crate::error::{LinkError, LinkErrorKind};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// Appends `args` as a RESP multibulk; large arguments by reference.
pub fn encode(out: &mut Output, args: &[Bytes]) {
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b"*");
    out.extend_from_slice(number.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.extend_from_slice(b"$");
        out.extend_from_slice(number.format(arg.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.put_bytes(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A reply the scan does not follow; the decoder takes it (and refuses it if malformed).
#[derive(Debug, PartialEq)]
pub struct Unscannable;

/// The length of the complete reply at the front of `buf`, found without decoding it: blob
/// payloads are skipped by their length. None while incomplete. Not redis-protocol's
/// `decode_range`: that builds a frame of ranges, a vector per array and a hash map per RESP3
/// map, where only the length is wanted; a proptest holds this scan to its decoder.
pub fn scan(buf: &[u8]) -> Result<Option<usize>, Unscannable> {
    scan_from(buf, 0, 1)
}

/// Where `pending` replies starting at `at` in `buf` end; None while incomplete.
fn scan_from(buf: &[u8], mut at: usize, mut pending: usize) -> Result<Option<usize>, Unscannable> {
    // Replies still to be passed over: those asked for, then the items of aggregates.
    while pending > 0 {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some(rest) = buf.get(at + 1..) else {
            return Ok(None);
        };
        let Some(cr) = memchr::memchr(b'\r', rest) else {
            return Ok(None);
        };
        let line = &rest[..cr];
        match rest.get(cr + 1) {
            None => return Ok(None),
            Some(b'\n') => {}
            Some(_) => return Err(Unscannable),
        }
        at += 1 + cr + 2;
        pending -= 1;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                if let Some(len) = length(line)? {
                    let end = at.checked_add(len).ok_or(Unscannable)?;
                    match buf.get(end..end + 2) {
                        None => return Ok(None),
                        Some(b"\r\n") => at = end + 2,
                        Some(_) => return Err(Unscannable),
                    }
                }
            }
            b'*' | b'~' | b'>' => {
                if let Some(n) = length(line)? {
                    pending = pending.checked_add(n).ok_or(Unscannable)?;
                }
            }
            b'%' => {
                if let Some(n) = length(line)? {
                    let items = n.checked_mul(2).ok_or(Unscannable)?;
                    pending = pending.checked_add(items).ok_or(Unscannable)?;
                }
            }
            // An attribute: its pairs, then the value it annotates, which stands where the
            // attribute stood.
            b'|' => {
                let n = length(line)?.ok_or(Unscannable)?;
                let items = n.checked_mul(2).ok_or(Unscannable)?;
                pending = pending
                    .checked_add(items)
                    .and_then(|p| p.checked_add(1))
                    .ok_or(Unscannable)?;
            }
            _ => return Err(Unscannable),
        }
    }
    Ok(Some(at))
}

/// The type byte of the reply at the front of `buf`, past any attributes before it; None
/// while they are incomplete.
pub fn reply_kind(buf: &[u8]) -> Result<Option<u8>, Unscannable> {
    let mut at = 0;
    while buf.get(at) == Some(&b'|') {
        let rest = &buf[at..];
        let Some(cr) = memchr::memchr(b'\r', rest) else {
            return Ok(None);
        };
        let n = length(&rest[1..cr])?.ok_or(Unscannable)?;
        // Past the attribute's line, then its pairs.
        let pairs = n.checked_mul(2).ok_or(Unscannable)?;
        match scan_from(buf, at + cr + 2, pairs)? {
            Some(end) => at = end,
            None => return Ok(None),
        }
    }
    Ok(buf.get(at).copied())
}

/// A blob's length or an aggregate's count; None for RESP2's `-1` (a nil).
fn length(line: &[u8]) -> Result<Option<usize>, Unscannable> {
    if line == b"-1" {
        return Ok(None);
    }
    // 19 digits cannot overflow a usize; `?` (a streamed length) is not a number.
    if line.is_empty() || line.len() > 19 || !line.iter().all(u8::is_ascii_digit) {
        return Err(Unscannable);
    }
    Ok(Some(
        line.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')),
    ))
}

/// A raw reply decoded, for the few that look inside one.
pub fn decode_raw(bytes: Bytes, proto: Proto) -> Frame {
    let mut buf = BytesMut::from(bytes);
    match decode(&mut buf, proto) {
        // Maps only exist in RESP3.
        Ok(Some(frame)) if proto == Proto::Resp3 => restore_map_order(frame),
        Ok(Some(frame)) => frame,
        // The scan found a complete reply the decoder refuses: never seen, but the client
        // gets an error, not a panic.
        Ok(None) | Err(_) => Frame::SimpleError {
            data: "ERR holdfast: the backend's reply could not be decoded".into(),
            attributes: None,
        },
    }
}

/// redis-protocol 6 builds a decoded map by popping pairs off the end, so its entries come out
/// last first; this puts them back in the order Redis sent (HGETALL, CONFIG GET, XINFO).
pub fn restore_map_order(frame: Frame) -> Frame {
    match frame {
        Frame::Map { data, attributes } => Frame::Map {
            data: data
                .into_iter()
                .rev()
                .map(|(k, v)| (restore_map_order(k), restore_map_order(v)))
                .collect(),
            attributes,
        },
        Frame::Array { data, attributes } => Frame::Array {
            data: data.into_iter().map(restore_map_order).collect(),
            attributes,
        },
        Frame::Push { data, attributes } => Frame::Push {
            data: data.into_iter().map(restore_map_order).collect(),
            attributes,
        },
        other => other,
    }
}

/// Takes one complete reply off the front of `buf`, in the connection's protocol, as a RESP3
/// frame (a RESP2 nil as `Null`, an error as a simple error).
pub fn decode(buf: &mut BytesMut, proto: Proto) -> Result<Option<Frame>, LinkError> {
    let protocol = |e: redis_protocol::error::RedisProtocolError| {
        LinkError::new(LinkErrorKind::Protocol, format!("undecodable reply: {e}"))
    };
    match proto {
        Proto::Resp2 => Ok(redis_protocol::resp2::decode::decode_bytes_mut(buf)
            .map_err(protocol)?
            .map(|(frame, _, _)| upgrade(frame))),
        Proto::Resp3 => Ok(
            redis_protocol::resp3::decode::complete::decode_bytes_mut(buf)
                .map_err(protocol)?
                .map(|(frame, _, _)| frame),
        ),
    }
}

/// A RESP2 reply as the RESP3 frame the rest of holdfast handles.
fn upgrade(frame: Frame2) -> Frame {
    match frame {
        Frame2::SimpleString(data) => Frame::SimpleString {
            data,
            attributes: None,
        },
        Frame2::Error(data) => Frame::SimpleError {
            data,
            attributes: None,
        },
        Frame2::Integer(data) => Frame::Number {
            data,
            attributes: None,
        },
        Frame2::BulkString(data) => Frame::BlobString {
            data,
            attributes: None,
        },
        Frame2::Array(items) => Frame::Array {
            data: items.into_iter().map(upgrade).collect(),
            attributes: None,
        },
        Frame2::Null => Frame::Null,
    }
}
