//! RESP framing for the client side: requests in (multibulk or inline), replies out in the
//! client's protocol version. Frames are parsed by `redis-protocol`; this module only bounds
//! what a client may make holdfast buffer, and converts RESP3 reply frames to RESP2.
//! [`Proto`] (the client's protocol version) and [`DoubleStyle`] (how a backend spells a
//! double, which a reply encoded here keeps) are defined here; backends use them too.

use crate::command::table::NilPath;
use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Frame2;
pub use redis_protocol::resp3::types::BytesFrame as Frame;
use redis_protocol::resp3::types::VerbatimStringFormat;

/// The protocol version the client speaks, and so the one its replies must be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// RESP2 (the default until `HELLO 3`).
    Resp2,
    /// RESP3.
    Resp3,
}

/// How the backend spells a RESP3 double, which the decoded value no longer shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DoubleStyle {
    /// `%.17g`, as Redis up to 7.1 writes it: `0.10000000000000001`.
    #[default]
    G17,
    /// The shortest digits that read back as the same double, as Redis 7.2 on writes them.
    Shortest,
    /// Fixed, 17 decimals, trailing zeros dropped: Redis's "human" long double, used for
    /// geo coordinates (`13.36138933897018433`).
    Human,
}

/// Longest inline command line, as Redis allows.
const MAX_INLINE: usize = 64 * 1024;

/// Input that breaks framing: the connection answers this error and closes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// Not RESP.
    #[error("Protocol error: {0}")]
    Malformed(String),
    /// A multibulk header announcing more elements than allowed.
    #[error("Protocol error: invalid multibulk length")]
    MultibulkTooLong,
    /// A bulk header announcing more bytes than allowed.
    #[error("Protocol error: invalid bulk length")]
    BulkTooLong,
    /// A request larger than `server.max_request_bytes`.
    #[error("Protocol error: request larger than {0} bytes")]
    TooLarge(usize),
    /// An inline line longer than Redis allows.
    #[error("Protocol error: too big inline request")]
    InlineTooLarge,
}

impl ProtocolError {
    /// The limit label of `holdfast_limits_total` this error counts under.
    pub fn limit(&self) -> &'static str {
        match self {
            ProtocolError::Malformed(_) => "malformed",
            ProtocolError::MultibulkTooLong => "max_arguments",
            ProtocolError::BulkTooLong => "max_bulk_bytes",
            ProtocolError::TooLarge(_) => "max_request_bytes",
            ProtocolError::InlineTooLarge => "inline",
        }
    }
}

/// What one request may be, checked as its headers arrive, before its body is buffered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The whole request, headers included.
    pub request_bytes: usize,
    /// One bulk string (an argument).
    pub bulk_bytes: usize,
    /// The number of arguments.
    pub multibulk_len: usize,
}

impl Limits {
    /// `request_bytes` for the request, and the same bound for one argument.
    pub fn request(request_bytes: usize) -> Limits {
        Limits {
            request_bytes,
            bulk_bytes: request_bytes,
            multibulk_len: request_bytes,
        }
    }
}

/// Checks the headers of the multibulk request at the front of `buf`, as far as they have
/// arrived: a count or a length over its limit is refused at once, from the header, so a
/// client cannot make holdfast buffer what it announces.
///
/// # Returns
/// The least length `buf` must reach before the request can be complete (0 when unknown):
/// the end of the first element still arriving, plus the smallest encoding of every element
/// after it. Waiting for that much saves re-parsing a large request on every read.
fn check_headers(buf: &[u8], limits: &Limits) -> Result<usize, ProtocolError> {
    /// Reads the decimal at `pos` (after the type byte) up to CRLF: `None` if incomplete.
    fn header(buf: &[u8], pos: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
        let rest = buf.get(pos + 1..).unwrap_or_default();
        let Some(end) = rest.iter().position(|b| *b == b'\r') else {
            if rest.len() > 20 {
                return Err(ProtocolError::Malformed("invalid length header".into()));
            }
            return Ok(None);
        };
        let text = std::str::from_utf8(&rest[..end]).ok();
        // Malformed numbers are left to the decoder, which words the error.
        match text.and_then(|t| t.parse::<i64>().ok()) {
            Some(n) => Ok(Some((n, pos + 1 + end + 2))),
            None => Ok(None),
        }
    }
    /// `$0\r\n\r\n`: the smallest element.
    const SMALLEST: usize = 6;
    let Some((count, mut pos)) = header(buf, 0)? else {
        return Ok(0);
    };
    if count > 0 && count as u64 > limits.multibulk_len as u64 {
        return Err(ProtocolError::MultibulkTooLong);
    }
    let count = count.max(0) as usize;
    for seen in 0..count {
        let after = (count - seen - 1).saturating_mul(SMALLEST);
        if buf.get(pos) != Some(&b'$') {
            return Ok(pos.saturating_add(SMALLEST).saturating_add(after));
        }
        let Some((len, start)) = header(buf, pos)? else {
            return Ok(pos.saturating_add(SMALLEST).saturating_add(after));
        };
        if len > 0 && len as u64 > limits.bulk_bytes as u64 {
            return Err(ProtocolError::BulkTooLong);
        }
        pos = start.saturating_add(len.max(0) as usize).saturating_add(2);
        if pos > buf.len() {
            return Ok(pos.saturating_add(after));
        }
    }
    Ok(pos)
}

/// Decodes a connection's requests, remembering how much input the request at the front
/// still needs so a large request is not re-parsed on every read (which would cost time
/// quadratic in its size).
#[derive(Debug, Default)]
pub struct Decoder {
    /// The input length below which the front request cannot be complete.
    need: usize,
    /// Parses made, for tests of the skipping.
    parses: usize,
}

impl Decoder {
    /// How many times this decoder has parsed its input.
    pub fn parses(&self) -> usize {
        self.parses
    }

    /// Like [`decode_request`], skipping the parse while `buf` is shorter than the front
    /// request needs.
    ///
    /// # Errors
    /// [`ProtocolError`] when framing is lost or the request is over a limit.
    pub fn next(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        Ok(self.next_request(buf, limits)?.map(|decoded| decoded.args))
    }

    /// [`Decoder::next`], with the bytes the request came in.
    ///
    /// # Errors
    /// [`ProtocolError`] when framing is lost or the request is over a limit.
    pub fn next_request(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Decoded>, ProtocolError> {
        if buf.len() < self.need {
            if buf.len() > limits.request_bytes {
                return Err(ProtocolError::TooLarge(limits.request_bytes));
            }
            return Ok(None);
        }
        self.parses += 1;
        let decoded = take_request(buf, limits)?;
        self.need = match decoded {
            Some(_) => 0,
            None if buf.first() == Some(&b'*') => check_headers(buf, limits)?,
            None => 0,
        };
        Ok(decoded)
    }
}

/// A request taken off the input.
#[derive(Debug)]
pub struct Decoded {
    /// Its arguments, the name first.
    pub args: Vec<Bytes>,
    /// The bytes it came in, when it was a plain multibulk of bulk strings: a backend
    /// connection writes them as they are instead of encoding the arguments again.
    pub raw: Option<Bytes>,
}

/// Takes one request from the front of `buf`: `Ok(None)` means "read more".
///
/// An empty multibulk (`*0`) or blank inline line is consumed and skipped, as Redis does.
///
/// # Errors
/// [`ProtocolError`] when framing is lost or the request is over a limit.
pub fn decode_request(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    Ok(take_request(buf, limits)?.map(|decoded| decoded.args))
}

/// [`decode_request`], with the bytes of a plain multibulk.
fn take_request(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Decoded>, ProtocolError> {
    let plain = |args| Some(Decoded { args, raw: None });
    let max_bytes = limits.request_bytes;
    loop {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first != b'*' {
            match decode_inline(buf)? {
                Some(args) if args.is_empty() => continue,
                Some(args) => return Ok(plain(args)),
                None => return Ok(None),
            }
        }
        if let Some((args, raw)) = multibulk(buf, limits) {
            return Ok(Some(Decoded {
                args,
                raw: Some(raw),
            }));
        }
        check_headers(buf, limits)?;
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
                return Ok(plain(args));
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

/// The common case, without building frames: a complete multibulk of one or more bulk
/// strings, each length within the limits and each followed by CRLF, taken off `buf` and
/// sliced into its arguments (no copy), returned with the whole request. Anything else
/// (incomplete, over a limit, malformed, a nil or an empty multibulk) is None and left to the
/// general path, which words the errors (and, like Redis, does not check the CRLF after a
/// bulk string). A proptest holds the two paths to the same arguments.
fn multibulk(buf: &mut BytesMut, limits: &Limits) -> Option<(Vec<Bytes>, Bytes)> {
    /// A decimal header's value and the position after its CRLF.
    fn header(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
        let mut n: usize = 0;
        let mut at = pos;
        loop {
            match *buf.get(at)? {
                b'\r' if at > pos => break,
                digit @ b'0'..=b'9' => {
                    n = n.checked_mul(10)?.checked_add(usize::from(digit - b'0'))?;
                    at += 1;
                }
                _ => return None,
            }
        }
        (buf.get(at + 1) == Some(&b'\n')).then_some((n, at + 2))
    }
    let bytes = &buf[..];
    if bytes.first() != Some(&b'*') {
        return None;
    }
    let (count, mut pos) = header(bytes, 1)?;
    if count == 0 || count > limits.multibulk_len {
        return None;
    }
    // Checked whole first, its length found, before anything is allocated; then sliced in a
    // second walk (cheaper than keeping the spans in a vector of their own).
    let first = pos;
    for _ in 0..count {
        if bytes.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, start) = header(bytes, pos + 1)?;
        if len > limits.bulk_bytes {
            return None;
        }
        let end = start.checked_add(len)?;
        if bytes.get(end..end.checked_add(2)?)? != b"\r\n" {
            return None;
        }
        pos = end + 2;
    }
    if pos > limits.request_bytes {
        return None;
    }
    let request = buf.split_to(pos).freeze();
    let mut args = Vec::with_capacity(count);
    let mut at = first;
    for _ in 0..count {
        let (len, start) = header(&request, at + 1)?;
        args.push(request.slice(start..start + len));
        at = start + len + 2;
    }
    Some((args, request))
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

/// Where a reply's nils are RESP2 null arrays (`*-1`) rather than null bulk strings (`$-1`):
/// redis-protocol's frames cannot say, so the command table does.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nils {
    /// A nil reply itself is `*-1`.
    pub top: bool,
    /// Nested nils at the paths this accepts are `*-1`.
    pub nested: Option<NilPath>,
}

/// Where replies are encoded: a plain buffer, or an [`Output`] that keeps large values by
/// reference instead of copying them.
pub trait Sink {
    /// Appends a copy of `bytes`.
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// Appends `bytes`, by reference where the sink can.
    fn put_bytes(&mut self, bytes: &Bytes) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for BytesMut {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        BytesMut::extend_from_slice(self, bytes);
    }
}

/// A value at least this long is written from the buffer it arrived in (a reference, not a
/// copy); shorter ones are copied, which costs less than one more piece to write.
pub const BY_REFERENCE: usize = 2048;

/// Bytes waiting to be written: pieces kept by reference (large values, as they arrived),
/// then what was copied after them. Used for the replies to a client and for the commands
/// queued on a backend link.
#[derive(Debug, Default)]
pub struct Output {
    pieces: Vec<Bytes>,
    tail: BytesMut,
    /// Bytes in `pieces`.
    held: usize,
}

impl Sink for Output {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
    }

    fn put_bytes(&mut self, bytes: &Bytes) {
        if bytes.len() < BY_REFERENCE {
            return self.tail.extend_from_slice(bytes);
        }
        if !self.tail.is_empty() {
            let copied = self.tail.split().freeze();
            self.held += copied.len();
            self.pieces.push(copied);
        }
        self.held += bytes.len();
        self.pieces.push(bytes.clone());
    }
}

impl Output {
    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.held + self.tail.len()
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops everything waiting (the copy buffer is kept).
    pub fn clear(&mut self) {
        self.pieces.clear();
        self.held = 0;
        self.tail.clear();
    }

    /// How many pieces are kept by reference.
    pub fn pieces(&self) -> usize {
        self.pieces.len()
    }

    /// Writes everything, in order, with as few system calls as the pieces allow, and
    /// empties the output.
    ///
    /// # Errors
    /// The writer's.
    pub async fn write_to<W: tokio::io::AsyncWrite + Unpin>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        use bytes::Buf;
        use tokio::io::AsyncWriteExt;
        if self.pieces.is_empty() {
            writer.write_all(&self.tail).await?;
            self.clear();
            return Ok(());
        }
        if !self.tail.is_empty() {
            self.pieces.push(self.tail.split().freeze());
        }
        let mut first = 0;
        while first < self.pieces.len() {
            let slices: Vec<std::io::IoSlice<'_>> = self.pieces[first..]
                .iter()
                .take(512)
                .map(|piece| std::io::IoSlice::new(piece))
                .collect();
            let mut written = writer.write_vectored(&slices).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while let Some(piece) = self.pieces.get_mut(first) {
                if written < piece.len() {
                    piece.advance(written);
                    break;
                }
                written -= piece.len();
                first += 1;
            }
        }
        self.clear();
        Ok(())
    }
}

/// Appends `frame` to `out` in the client's protocol.
///
/// Written here rather than with redis-protocol's encoder because that encoder can express
/// neither a RESP2 null array nor the backend's spelling of a double. Error texts never carry
/// CR or LF (they are written as spaces, as Redis does), so no reply can break the framing.
pub fn encode_reply(
    out: &mut impl Sink,
    frame: &Frame,
    proto: Proto,
    nils: Nils,
    doubles: DoubleStyle,
) {
    match proto {
        Proto::Resp2 => encode2(out, frame, &mut Vec::new(), nils, doubles),
        Proto::Resp3 => encode3(out, frame, doubles),
    }
}

fn header(out: &mut impl Sink, kind: u8, len: usize) {
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut impl Sink, kind: u8, text: &[u8]) {
    out.extend_from_slice(&[kind]);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

fn blob(out: &mut impl Sink, kind: u8, data: &[u8]) {
    header(out, kind, data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// [`blob`] of a value the sink may keep by reference.
fn blob_bytes(out: &mut impl Sink, kind: u8, data: &Bytes) {
    header(out, kind, data.len());
    out.put_bytes(data);
    out.extend_from_slice(b"\r\n");
}

fn error_line(out: &mut impl Sink, text: &[u8]) {
    out.extend_from_slice(b"-");
    if text.iter().any(|b| matches!(b, b'\r' | b'\n')) {
        let flat: Vec<u8> = text
            .iter()
            .map(|b| match b {
                b'\r' | b'\n' => b' ',
                other => *other,
            })
            .collect();
        out.extend_from_slice(&flat);
    } else {
        out.extend_from_slice(text);
    }
    out.extend_from_slice(b"\r\n");
}

fn number(out: &mut impl Sink, n: i64) {
    line(out, b':', itoa::Buffer::new().format(n).as_bytes());
}

fn encode2(
    out: &mut impl Sink,
    frame: &Frame,
    path: &mut Vec<usize>,
    nils: Nils,
    doubles: DoubleStyle,
) {
    match frame {
        Frame::BlobString { data, .. }
        | Frame::BigNumber { data, .. }
        | Frame::VerbatimString { data, .. }
        | Frame::ChunkedString(data) => blob_bytes(out, b'$', data),
        Frame::SimpleString { data, .. } => line(out, b'+', data),
        Frame::SimpleError { data, .. } => error_line(out, data.as_bytes()),
        Frame::BlobError { data, .. } => error_line(out, data),
        Frame::Number { data, .. } => number(out, *data),
        Frame::Boolean { data, .. } => number(out, i64::from(*data)),
        Frame::Double { data, .. } => blob(out, b'$', format_double(*data, doubles).as_bytes()),
        Frame::Null => {
            let array = if path.is_empty() {
                nils.top
            } else {
                nils.nested.is_some_and(|rule| rule(path))
            };
            out.extend_from_slice(if array { b"*-1\r\n" } else { b"$-1\r\n" });
        }
        Frame::Array { data, .. } | Frame::Push { data, .. } => {
            encode2_items(out, data.len(), data.iter(), path, nils, doubles)
        }
        Frame::Set { data, .. } => encode2_items(out, data.len(), data.iter(), path, nils, doubles),
        // A map is a flat array of its keys and values in RESP2.
        Frame::Map { data, .. } => {
            let flat = data.iter().flat_map(|(key, value)| [key, value]);
            encode2_items(out, data.len() * 2, flat, path, nils, doubles)
        }
        // Only ever a request, never a reply.
        Frame::Hello { .. } => out.extend_from_slice(b"$-1\r\n"),
    }
}

/// An aggregate of `len` items, each at its index in `path`.
fn encode2_items<'a>(
    out: &mut impl Sink,
    len: usize,
    items: impl Iterator<Item = &'a Frame>,
    path: &mut Vec<usize>,
    nils: Nils,
    doubles: DoubleStyle,
) {
    header(out, b'*', len);
    for (i, item) in items.enumerate() {
        path.push(i);
        encode2(out, item, path, nils, doubles);
        path.pop();
    }
}

fn encode3(out: &mut impl Sink, frame: &Frame, doubles: DoubleStyle) {
    match frame {
        Frame::BlobString { data, .. } | Frame::ChunkedString(data) => blob_bytes(out, b'$', data),
        Frame::BlobError { data, .. } => blob(out, b'!', data),
        Frame::SimpleString { data, .. } => line(out, b'+', data),
        Frame::SimpleError { data, .. } => error_line(out, data.as_bytes()),
        Frame::Boolean { data, .. } => line(out, b'#', if *data { b"t" } else { b"f" }),
        Frame::Null => out.extend_from_slice(b"_\r\n"),
        Frame::Number { data, .. } => number(out, *data),
        Frame::Double { data, .. } => line(out, b',', format_double(*data, doubles).as_bytes()),
        Frame::BigNumber { data, .. } => line(out, b'(', data),
        Frame::VerbatimString { data, format, .. } => {
            let prefix: &[u8] = match format {
                VerbatimStringFormat::Text => b"txt:",
                VerbatimStringFormat::Markdown => b"mkd:",
            };
            header(out, b'=', data.len() + prefix.len());
            out.extend_from_slice(prefix);
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Array { data, .. } | Frame::Push { data, .. } => {
            let kind = if matches!(frame, Frame::Push { .. }) {
                b'>'
            } else {
                b'*'
            };
            header(out, kind, data.len());
            for item in data {
                encode3(out, item, doubles);
            }
        }
        Frame::Set { data, .. } => {
            header(out, b'~', data.len());
            for item in data {
                encode3(out, item, doubles);
            }
        }
        Frame::Map { data, .. } => {
            header(out, b'%', data.len());
            for (key, value) in data {
                encode3(out, key, doubles);
                encode3(out, value, doubles);
            }
        }
        Frame::Hello { .. } => out.extend_from_slice(b"_\r\n"),
    }
}

/// A double as the backend spells it.
pub fn format_double(value: f64, style: DoubleStyle) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if style == DoubleStyle::Human {
        let fixed = format!("{value:.17}");
        let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
        return if trimmed == "-0" { "0" } else { trimmed }.to_string();
    }
    // Scientific form, mantissa digits and exponent: `{:.16e}` gives the 17 significant
    // digits of %.17g, `{:e}` the shortest that round-trip.
    let scientific = match style {
        DoubleStyle::G17 => format!("{value:.16e}"),
        DoubleStyle::Shortest | DoubleStyle::Human => format!("{value:e}"),
    };
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    // %g: scientific when the exponent is below -4 or at least the precision (17).
    if !(-4..17).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{first}{dot}{rest}e{esign}{:02}",
            exponent.unsigned_abs()
        )
    } else if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else {
        let int_len = exponent as usize + 1;
        if digits.len() <= int_len {
            format!("{sign}{digits}{}", "0".repeat(int_len - digits.len()))
        } else {
            let (int, frac) = digits.split_at(int_len);
            format!("{sign}{int}.{frac}")
        }
    }
}

pub mod frame;
pub mod scan;
pub use scan::{decode_raw, restore_map_order};

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
