//! RESP framing for the client side: requests in (multibulk or inline), replies out in the
//! client's protocol version. Frames are parsed by `redis-protocol`; this module only bounds
//! what a client may make holdfast buffer, and converts RESP3 reply frames to RESP2.

use crate::backend::Proto;
use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// Longest inline command line, as Redis allows.
const MAX_INLINE: usize = 64 * 1024;

/// Input that breaks framing: the connection answers this error and closes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// Not RESP.
    #[error("Protocol error: {0}")]
    Malformed(String),
    /// A request larger than `server.max_request_bytes`.
    #[error("Protocol error: request larger than {0} bytes")]
    TooLarge(usize),
    /// An inline line longer than Redis allows.
    #[error("Protocol error: too big inline request")]
    InlineTooLarge,
}

/// Takes one request from the front of `buf`: `Ok(None)` means "read more".
///
/// An empty multibulk (`*0`) or blank inline line is consumed and skipped, as Redis does.
///
/// # Errors
/// [`ProtocolError`] when framing is lost or the request is over `max_bytes`.
pub fn decode_request(
    buf: &mut BytesMut,
    max_bytes: usize,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    loop {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first != b'*' {
            match decode_inline(buf)? {
                Some(args) if args.is_empty() => continue,
                other => return Ok(other),
            }
        }
        let decoded = redis_protocol::resp2::decode::decode_bytes_mut(buf)
            .map_err(|e| ProtocolError::Malformed(e.details().to_string()))?;
        let Some((frame, _, _)) = decoded else {
            // Incomplete: the buffer only grows up to the limit.
            if buf.len() > max_bytes {
                return Err(ProtocolError::TooLarge(max_bytes));
            }
            return Ok(None);
        };
        match frame {
            Frame2::Array(items) => {
                if items.is_empty() {
                    continue;
                }
                let mut args = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Frame2::BulkString(b) => args.push(b),
                        other => {
                            return Err(ProtocolError::Malformed(format!(
                                "expected '$', got '{}'",
                                kind_char(&other)
                            )))
                        }
                    }
                }
                return Ok(Some(args));
            }
            Frame2::Null => continue,
            other => {
                return Err(ProtocolError::Malformed(format!(
                    "expected '*', got '{}'",
                    kind_char(&other)
                )))
            }
        }
    }
}

fn kind_char(frame: &Frame2) -> char {
    match frame {
        Frame2::SimpleString(_) => '+',
        Frame2::Error(_) => '-',
        Frame2::Integer(_) => ':',
        Frame2::BulkString(_) => '$',
        Frame2::Array(_) => '*',
        Frame2::Null => '$',
    }
}

/// An inline command: one line, split on blanks, with Redis's quoting rules.
fn decode_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(end) = buf.iter().position(|b| *b == b'\n') else {
        if buf.len() > MAX_INLINE {
            return Err(ProtocolError::InlineTooLarge);
        }
        return Ok(None);
    };
    if end > MAX_INLINE {
        return Err(ProtocolError::InlineTooLarge);
    }
    let line = buf.split_to(end + 1);
    let line = line.strip_suffix(b"\n").unwrap_or(&line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    split_args(line)
        .map(Some)
        .ok_or_else(|| ProtocolError::Malformed("unbalanced quotes in request".to_string()))
}

/// Splits a line like Redis's `sdssplitargs`: blanks separate, `"..."` takes `\n`, `\xHH`
/// and friends, `'...'` takes `\'`. `None` for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Bytes>> {
    let mut args = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(args);
        }
        let mut current = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return None;
                }
                if line[i] == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && line[i + 2].is_ascii_hexdigit()
                    && line[i + 3].is_ascii_hexdigit()
                {
                    let hex = std::str::from_utf8(&line[i + 2..i + 4]).ok()?;
                    current.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 3;
                } else if line[i] == b'\\' && i + 1 < n {
                    i += 1;
                    current.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if line[i] == b'"' {
                    // A closing quote must be followed by a blank or the end.
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    in_dq = false;
                    i += 1;
                    break;
                } else {
                    current.push(line[i]);
                }
            } else if in_sq {
                if i >= n {
                    return None;
                }
                if line[i] == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    i += 1;
                    current.push(b'\'');
                } else if line[i] == b'\'' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    in_sq = false;
                    i += 1;
                    break;
                } else {
                    current.push(line[i]);
                }
            } else {
                if i >= n || line[i].is_ascii_whitespace() {
                    break;
                }
                match line[i] {
                    b'"' if current.is_empty() => in_dq = true,
                    b'\'' if current.is_empty() => in_sq = true,
                    other => current.push(other),
                }
            }
            i += 1;
        }
        debug_assert!(!in_dq && !in_sq);
        args.push(Bytes::from(current));
    }
}

/// Appends `frame` to `out` in the client's protocol. `null_array` says how a RESP2 nil is
/// written for this command (`*-1` instead of `$-1`).
pub fn encode_reply(out: &mut BytesMut, frame: &Frame, proto: Proto, null_array: bool) {
    let result = match proto {
        Proto::Resp3 => {
            redis_protocol::resp3::encode::complete::extend_encode(out, frame, false).map(|_| ())
        }
        Proto::Resp2 if null_array && matches!(frame, Frame::Null) => {
            out.extend_from_slice(NULL_ARRAY);
            Ok(())
        }
        Proto::Resp2 => {
            let frame = to_resp2(frame);
            redis_protocol::resp2::encode::extend_encode(out, &frame, false).map(|_| ())
        }
    };
    if let Err(e) = result {
        // Only a frame holdfast built itself can fail to encode; the client still gets an
        // answer in its place.
        tracing::error!(error = %e, "cannot encode a reply");
        out.extend_from_slice(b"-ERR holdfast: cannot encode the reply\r\n");
    }
}

/// Writes a RESP2 null array (`*-1`), which redis-protocol has no frame for.
const NULL_ARRAY: &[u8] = b"*-1\r\n";

/// Converts a reply to RESP2 the way Redis answers a RESP2 client: maps flatten to arrays,
/// sets become arrays, doubles and big numbers become bulk strings, booleans integers.
/// A top-level nil of a `null_array` command is written by [`encode_reply`] itself, since RESP2
/// frames have no null array.
pub fn to_resp2(frame: &Frame) -> Frame2 {
    match frame {
        Frame::BlobString { data, .. } => Frame2::BulkString(data.clone()),
        Frame::BlobError { data, .. } => Frame2::Error(
            bytes_utils::Str::from_inner(data.clone())
                .unwrap_or_else(|_| String::from_utf8_lossy(data).into_owned().into()),
        ),
        Frame::SimpleString { data, .. } => Frame2::SimpleString(data.clone()),
        Frame::SimpleError { data, .. } => Frame2::Error(data.clone()),
        Frame::Boolean { data, .. } => Frame2::Integer(i64::from(*data)),
        Frame::Null => Frame2::Null,
        Frame::Number { data, .. } => Frame2::Integer(*data),
        Frame::Double { data, .. } => Frame2::BulkString(Bytes::from(format_double(*data))),
        Frame::BigNumber { data, .. } => Frame2::BulkString(data.clone()),
        Frame::VerbatimString { data, .. } => Frame2::BulkString(data.clone()),
        Frame::Array { data, .. } | Frame::Push { data, .. } => {
            Frame2::Array(data.iter().map(to_resp2).collect())
        }
        Frame::Map { data, .. } => Frame2::Array(
            data.iter()
                .flat_map(|(k, v)| [to_resp2(k), to_resp2(v)])
                .collect(),
        ),
        Frame::Set { data, .. } => Frame2::Array(data.iter().map(to_resp2).collect()),
        Frame::Hello { .. } => Frame2::Null,
        Frame::ChunkedString(data) => Frame2::BulkString(data.clone()),
    }
}

/// A double as Redis prints one in RESP2.
fn format_double(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.to_string()
    } else if value.is_nan() {
        "nan".to_string()
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
