//! Constructors for the replies holdfast builds itself (the connection's own answers, the SQL
//! backends' replies), so each is one call at its site.

use super::Frame;
use bytes::Bytes;

/// `+text`: only ever a fixed word (`OK`, `QUEUED`, `PONG`), so it is never copied.
pub fn simple(text: &'static str) -> Frame {
    Frame::SimpleString {
        data: Bytes::from_static(text.as_bytes()),
        attributes: None,
    }
}

/// `+OK`.
pub fn ok() -> Frame {
    simple("OK")
}

/// `-text`: the error code first (`ERR`, `WRONGTYPE`, ...).
pub fn error(text: impl Into<String>) -> Frame {
    Frame::SimpleError {
        data: bytes_utils::Str::from(text.into()),
        attributes: None,
    }
}

/// A bulk string.
pub fn bulk(data: impl Into<Bytes>) -> Frame {
    Frame::BlobString {
        data: data.into(),
        attributes: None,
    }
}

/// An integer.
pub fn number(n: i64) -> Frame {
    Frame::Number {
        data: n,
        attributes: None,
    }
}

/// A double (RESP3; a bulk string in RESP2).
pub fn double(d: f64) -> Frame {
    Frame::Double {
        data: d,
        attributes: None,
    }
}

/// An array.
pub fn array(items: Vec<Frame>) -> Frame {
    Frame::Array {
        data: items,
        attributes: None,
    }
}
