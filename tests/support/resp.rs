//! Raw RESP helpers for integration tests: a request encoder, a RESP2/RESP3
//! frame-length parser and a tiny raw connection type.
//!
//! Everything here talks plain TCP with 10 s timeouts and panics with a useful
//! message on failure (this is test support, not library code).
#![allow(dead_code)]

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};

/// Default timeout for connecting and for reading one reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Encodes a command as a RESP array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// `encode` for string arguments.
pub fn encode_str(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    encode(&args)
}

/// Length in bytes of the complete RESP2/RESP3 frame at the start of `buf`,
/// or `None` if `buf` does not yet hold a complete frame.
///
/// Handles `+ - : $ * _ , # ! = ( % ~ > |`, RESP2 nulls (`$-1`, `*-1`) and
/// RESP3 streamed strings/aggregates (`$?` with `;` chunks, `*?`/`~?`/`%?`/`>?`
/// ended by `.`). An attribute frame (`|`) is counted together with the frame
/// that follows it, so "one reply" = attribute + the value it annotates.
///
/// Panics on bytes that cannot be RESP (unknown type byte, bad length).
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    parse_frame(buf, 0, 0)
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    if from >= buf.len() {
        return None;
    }
    buf[from..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_int(buf: &[u8], start: usize, end: usize) -> i64 {
    std::str::from_utf8(&buf[start..end])
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            panic!(
                "invalid RESP length/count {:?} at offset {} in {:?}",
                String::from_utf8_lossy(&buf[start..end]),
                start,
                String::from_utf8_lossy(&buf[..buf.len().min(512)])
            )
        })
}

/// Returns the end offset (exclusive) of the frame starting at `pos`.
fn parse_frame(buf: &[u8], pos: usize, depth: usize) -> Option<usize> {
    assert!(depth < 1000, "RESP frame nested deeper than 1000 levels");
    let ty = *buf.get(pos)?;
    let eol = find_crlf(buf, pos + 1)?;
    let after = eol + 2;
    let header = &buf[pos + 1..eol];
    match ty {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
        b'$' | b'!' | b'=' => {
            if ty == b'$' && header == b"?" {
                // Streamed string: `;N\r\n<N bytes>\r\n` chunks, ended by `;0\r\n`.
                let mut p = after;
                loop {
                    let t = *buf.get(p)?;
                    assert!(
                        t == b';',
                        "expected ';' chunk in streamed string at offset {p}, found {:?}",
                        t as char
                    );
                    let e = find_crlf(buf, p + 1)?;
                    let n = parse_int(buf, p + 1, e);
                    assert!(n >= 0, "negative streamed-string chunk length {n}");
                    if n == 0 {
                        return Some(e + 2);
                    }
                    let end = e + 2 + n as usize + 2;
                    if buf.len() < end {
                        return None;
                    }
                    p = end;
                }
            }
            let n = parse_int(buf, pos + 1, eol);
            if n < 0 {
                return Some(after); // RESP2 null bulk string
            }
            let end = after + n as usize + 2;
            if buf.len() < end {
                return None;
            }
            assert!(
                &buf[end - 2..end] == b"\r\n",
                "bulk payload of length {n} at offset {pos} not followed by CRLF"
            );
            Some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            if header == b"?" {
                // Streamed aggregate: frames until `.\r\n`.
                let mut p = after;
                loop {
                    if *buf.get(p)? == b'.' {
                        let e = find_crlf(buf, p + 1)?;
                        return Some(e + 2);
                    }
                    p = parse_frame(buf, p, depth + 1)?;
                }
            }
            let n = parse_int(buf, pos + 1, eol);
            if n < 0 {
                return Some(after); // RESP2 null array
            }
            let elems = if ty == b'%' || ty == b'|' { 2 * n } else { n };
            let mut p = after;
            for _ in 0..elems {
                p = parse_frame(buf, p, depth + 1)?;
            }
            if ty == b'|' {
                // Attributes annotate the next frame; count them together.
                parse_frame(buf, p, depth + 1)
            } else {
                Some(p)
            }
        }
        other => panic!(
            "invalid RESP type byte {:?} (0x{:02x}) at offset {} in {:?}",
            other as char,
            other,
            pos,
            String::from_utf8_lossy(&buf[..buf.len().min(512)])
        ),
    }
}

/// Connects to `addr`, sends `raw` and returns one complete RESP2/RESP3 reply
/// (10 s timeout; panics on timeout, EOF or I/O error).
pub async fn roundtrip(addr: &str, raw: &[u8]) -> Vec<u8> {
    let mut conn = RawConn::connect(addr).await;
    conn.send(raw).await;
    conn.read_reply().await
}

/// Why `RawConn::try_read_reply` returned no frame.
#[derive(Debug)]
pub enum ReadError {
    /// No complete frame within the timeout; `partial` holds what had arrived.
    Timeout { partial: Vec<u8> },
    /// The peer closed the connection (EOF) before a complete frame arrived.
    Eof { partial: Vec<u8> },
    /// The connection was reset/aborted before a complete frame arrived.
    Reset { partial: Vec<u8>, error: io::Error },
    /// Any other I/O error.
    Io(io::Error),
}

impl ReadError {
    /// True for EOF or a connection reset: the peer (or a relay) hung up.
    pub fn is_disconnect(&self) -> bool {
        matches!(self, ReadError::Eof { .. } | ReadError::Reset { .. })
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, ReadError::Timeout { .. })
    }
}

/// A raw client connection that sends bytes and reads whole RESP frames.
pub struct RawConn {
    stream: TcpStream,
    buf: BytesMut,
    peer: String,
}

impl RawConn {
    /// Connects to `addr` (10 s timeout; panics on failure).
    pub async fn connect(addr: &str) -> RawConn {
        match Self::try_connect(addr, REPLY_TIMEOUT).await {
            Ok(c) => c,
            Err(e) => panic!("RawConn: connect to {addr} failed: {e}"),
        }
    }

    /// Connects to `addr`, returning the error instead of panicking.
    pub async fn try_connect(addr: &str, limit: Duration) -> io::Result<RawConn> {
        let stream = match timeout(limit, TcpStream::connect(addr)).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect to {addr} timed out after {limit:?}"),
                ))
            }
        };
        let _ = stream.set_nodelay(true);
        Ok(RawConn::from_stream(stream))
    }

    pub fn from_stream(stream: TcpStream) -> RawConn {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "<unknown peer>".into());
        RawConn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            peer,
        }
    }

    /// Writes `raw` in full (panics on error or after 10 s).
    pub async fn send(&mut self, raw: &[u8]) {
        match timeout(REPLY_TIMEOUT, self.stream.write_all(raw)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!(
                "RawConn: write of {} bytes to {} failed: {e}",
                raw.len(),
                self.peer
            ),
            Err(_) => panic!(
                "RawConn: write of {} bytes to {} timed out",
                raw.len(),
                self.peer
            ),
        }
    }

    /// Writes `raw`, returning the error instead of panicking.
    pub async fn try_send(&mut self, raw: &[u8]) -> io::Result<()> {
        self.stream.write_all(raw).await
    }

    /// Reads one complete frame (10 s timeout; panics on timeout/EOF/error).
    pub async fn read_reply(&mut self) -> Vec<u8> {
        match self.try_read_reply(REPLY_TIMEOUT).await {
            Ok(frame) => frame,
            Err(e) => panic!("RawConn: reading a reply from {} failed: {e:?}", self.peer),
        }
    }

    /// Reads one complete frame within `limit`, or says why not.
    /// Bytes past the frame are kept for the next read.
    pub async fn try_read_reply(&mut self, limit: Duration) -> Result<Vec<u8>, ReadError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(n) = frame_len(&self.buf) {
                return Ok(self.buf.split_to(n).to_vec());
            }
            self.buf.reserve(16 * 1024);
            match timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => {
                    return Err(ReadError::Timeout {
                        partial: self.buf.to_vec(),
                    })
                }
                Ok(Ok(0)) => {
                    return Err(ReadError::Eof {
                        partial: self.buf.to_vec(),
                    })
                }
                Ok(Ok(_)) => {}
                Ok(Err(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return Err(ReadError::Reset {
                        partial: self.buf.to_vec(),
                        error: e,
                    })
                }
                Ok(Err(e)) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// Reads `n` complete frames (10 s timeout each).
    pub async fn read_replies(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.read_reply().await);
        }
        out
    }

    /// Sends one command of binary arguments and reads its reply.
    pub async fn command_bytes(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(&encode(args)).await;
        self.read_reply().await
    }

    /// Sends one command (as a RESP array of bulk strings) and reads its reply.
    pub async fn command(&mut self, args: &[&str]) -> Vec<u8> {
        self.send(&encode_str(args)).await;
        self.read_reply().await
    }

    /// Asserts that the peer hangs up (EOF or reset) within `limit` without
    /// sending a complete frame first. Panics otherwise.
    pub async fn expect_disconnect(&mut self, limit: Duration) {
        match self.try_read_reply(limit).await {
            Err(e) if e.is_disconnect() => {}
            Ok(frame) => panic!(
                "RawConn: expected {} to hang up, got a frame {:?}",
                self.peer,
                String::from_utf8_lossy(&frame)
            ),
            Err(e) => panic!("RawConn: expected {} to hang up, got {e:?}", self.peer),
        }
    }

    /// Bytes received but not yet returned as a frame.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn into_inner(self) -> TcpStream {
        self.stream
    }
}
