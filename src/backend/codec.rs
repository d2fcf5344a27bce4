//! RESP as holdfast's Redis connections write and read it: commands encoded (or passed as the
//! client encoded them), replies found in a buffer without decoding them (a scan that skips
//! blob payloads by their length), and decoded where holdfast must look inside one (an
//! error reply, a push, a handshake's answer). Knows nothing of connections.

use super::{Proto, Reply};
use crate::error::{LinkError, LinkErrorKind};
use crate::resp::{Output, Sink};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::BytesFrame as Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// Appends a command: as the client encoded it when that is known, else encoded here.
pub(super) fn put_command(out: &mut Output, args: &[Bytes], raw: Option<&Bytes>) {
    match raw {
        Some(raw) => out.put_bytes(raw),
        None => encode(out, args),
    }
}

/// Appends `args` as a RESP multibulk; large arguments by reference.
pub(super) fn encode(out: &mut Output, args: &[Bytes]) {
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

/// Takes one complete reply off the front of `buf`: as the bytes Redis wrote, or decoded when
/// holdfast must look inside (an error reply, to classify it; a push, dropped: `Some(None)`;
/// a streamed string, which the scan does not follow). RESP3 attributes pass with the reply
/// they annotate. None while the reply is incomplete.
pub(super) fn next_reply(
    buf: &mut BytesMut,
    proto: Proto,
) -> Result<Option<Option<Reply>>, LinkError> {
    // Attributes (RESP3) before a reply belong to it: the kind is the reply's own.
    let kind = match reply_kind(buf) {
        Ok(Some(kind)) => Some(kind),
        Ok(None) => return Ok(None),
        Err(Unscannable) => None,
    };
    if !matches!(kind, Some(b'-' | b'!' | b'>')) {
        match scan(buf) {
            Ok(Some(len)) => {
                let bytes = buf.split_to(len).freeze();
                return Ok(Some(Some(Reply::Raw { bytes, proto })));
            }
            Ok(None) => return Ok(None),
            Err(Unscannable) => {}
        }
    }
    Ok(decode(buf, proto)?.map(|frame| match frame {
        Frame::Push { .. } => None,
        frame => Some(Reply::from(frame)),
    }))
}

/// A reply the scan does not follow; the decoder takes it (and refuses it if malformed).
#[derive(Debug, PartialEq)]
struct Unscannable;

/// The length of the complete reply at the front of `buf`, found without decoding it: blob
/// payloads are skipped by their length. None while incomplete. Not redis-protocol's
/// `decode_range`: that builds a frame of ranges, a vector per array and a hash map per RESP3
/// map, where only the length is wanted; a proptest holds this scan to its decoder.
fn scan(buf: &[u8]) -> Result<Option<usize>, Unscannable> {
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
fn reply_kind(buf: &[u8]) -> Result<Option<u8>, Unscannable> {
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
pub(super) fn decode(buf: &mut BytesMut, proto: Proto) -> Result<Option<Frame>, LinkError> {
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

/// Writes one command on a connection of its own (a sentinel's, a `CLUSTER SLOTS` query's).
pub(super) async fn write_command<S: AsyncWrite + Unpin>(
    stream: &mut S,
    args: &[Bytes],
) -> Result<(), LinkError> {
    let mut out = Output::default();
    encode(&mut out, args);
    out.write_to(stream)
        .await
        .map_err(|e| LinkError::io("writing a command", e))
}

/// Reads one RESP2 reply (or published message) from a connection of its own.
pub(super) async fn read_frame<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<Frame, LinkError> {
    loop {
        if let Some(frame) = decode(buf, Proto::Resp2)? {
            return Ok(frame);
        }
        let read = stream
            .read_buf(buf)
            .await
            .map_err(|e| LinkError::io("reading a reply", e))?;
        if read == 0 {
            return Err(LinkError::new(
                LinkErrorKind::Io,
                "the server closed the connection",
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::BY_REFERENCE;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    struct Trickle(Vec<u8>);

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(7);
            self.0.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn written(commands: &[Vec<Bytes>]) -> Vec<u8> {
        let mut out = Output::default();
        for args in commands {
            encode(&mut out, args);
        }
        let mut sink = Trickle(Vec::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(out.write_to(&mut sink)).expect("written");
        sink.0
    }

    #[test]
    fn commands_are_encoded_as_multibulk() {
        let set = vec![
            Bytes::from_static(b"SET"),
            Bytes::from_static(b"k"),
            Bytes::new(),
        ];
        assert_eq!(written(&[set]), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn a_command_goes_as_the_client_encoded_it_when_known() {
        let args = [Bytes::from_static(b"set"), Bytes::from_static(b"k")];
        // Not what encoding `args` gives, so the test tells the two apart: the bytes given
        // are written as they are.
        let raw = Bytes::from_static(b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n");
        let mut out = Output::default();
        put_command(&mut out, &args, Some(&raw));
        put_command(&mut out, &args[..1], None);
        let mut sink = Trickle(Vec::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(out.write_to(&mut sink)).expect("written");
        assert_eq!(sink.0, b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n*1\r\n$3\r\nset\r\n");
    }

    #[test]
    fn large_arguments_are_written_by_reference_in_order() {
        let big = Bytes::from(vec![b'x'; BY_REFERENCE]);
        let bigger = Bytes::from(vec![b'y'; 3 * BY_REFERENCE + 1]);
        let commands = vec![
            vec![
                Bytes::from_static(b"SET"),
                Bytes::from_static(b"a"),
                big.clone(),
            ],
            vec![Bytes::from_static(b"GET"), Bytes::from_static(b"a")],
            vec![big.clone(), bigger.clone(), Bytes::from_static(b"z")],
        ];
        let mut want = Vec::new();
        for args in &commands {
            want.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for arg in args {
                want.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                want.extend_from_slice(arg);
                want.extend_from_slice(b"\r\n");
            }
        }
        assert_eq!(written(&commands), want);
        let mut out = Output::default();
        encode(&mut out, &commands[2]);
        assert_eq!(
            out.pieces(),
            4,
            "two arguments by reference, and the bytes before each"
        );
    }

    #[test]
    fn resp2_replies_become_resp3_frames() {
        let mut buf = BytesMut::from(&b"*3\r\n:1\r\n$-1\r\n-ERR no\r\n+OK"[..]);
        let frame = decode(&mut buf, Proto::Resp2).ok().flatten();
        let Some(Frame::Array { data, .. }) = frame else {
            panic!("expected an array, got {frame:?}");
        };
        assert!(matches!(data[0], Frame::Number { data: 1, .. }));
        assert!(matches!(data[1], Frame::Null));
        assert!(matches!(&data[2], Frame::SimpleError { data, .. } if &**data == "ERR no"));
        // The incomplete reply stays in the buffer.
        assert!(matches!(decode(&mut buf, Proto::Resp2), Ok(None)));
        assert_eq!(&buf[..], b"+OK");
    }

    fn blob(kind: char, data: &[u8]) -> Vec<u8> {
        let mut out = format!("{kind}{}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn aggregate(kind: char, count: usize, items: Vec<Vec<u8>>) -> Vec<u8> {
        let mut out = format!("{kind}{count}\r\n").into_bytes();
        out.extend(items.into_iter().flatten());
        out
    }

    /// Encoded RESP2 replies, nested.
    fn reply2() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("+{t}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("-ERR {t}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| blob('$', &d)),
            Just(b"$-1\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            proptest::collection::vec(inner, 0..4)
                .prop_map(|items| aggregate('*', items.len(), items))
        })
    }

    /// Encoded RESP3 replies, nested.
    fn reply3() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("+{t}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,8}".prop_map(|t| format!("-ERR {t}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| blob('$', &d)),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|d| blob('!', &d)),
            "[a-z]{0,8}".prop_map(|t| blob('=', format!("txt:{t}").as_bytes())),
            Just(b"_\r\n".to_vec()),
            Just(b"#t\r\n".to_vec()),
            Just(b",1.5\r\n".to_vec()),
            Just(b"(12345678901234567890\r\n".to_vec()),
        ];
        // Set members and map keys are plain values, as from Redis (the decoder cannot hash
        // an aggregate).
        leaf.clone().prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|items| aggregate(
                    '*',
                    items.len(),
                    items
                )),
                proptest::collection::vec(leaf.clone(), 0..4).prop_map(|items| aggregate(
                    '~',
                    items.len(),
                    items
                )),
                proptest::collection::vec((leaf.clone(), inner), 0..3).prop_map(|pairs| {
                    let count = pairs.len();
                    let items = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
                    aggregate('%', count, items)
                }),
            ]
        })
    }

    /// The scan ends a reply where the decoder does, and finds no end in any part of one.
    fn scans_like_the_decoder(reply: &[u8], proto: Proto) -> Result<(), TestCaseError> {
        let mut input = reply.to_vec();
        input.extend_from_slice(b"+NEXT\r\n");
        prop_assert_eq!(scan(&input), Ok(Some(reply.len())));
        let mut buf = BytesMut::from(&input[..]);
        prop_assert!(matches!(decode(&mut buf, proto), Ok(Some(_))));
        prop_assert_eq!(&buf[..], b"+NEXT\r\n");
        for end in 0..reply.len() {
            prop_assert_eq!(
                scan(&reply[..end]),
                Ok(None),
                "{} of {} bytes",
                end,
                reply.len()
            );
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn resp2_replies_are_scanned_to_their_end(reply in reply2()) {
            scans_like_the_decoder(&reply, Proto::Resp2)?;
        }

        #[test]
        fn resp3_replies_are_scanned_to_their_end(reply in reply3()) {
            scans_like_the_decoder(&reply, Proto::Resp3)?;
        }
    }

    #[test]
    fn plain_replies_pass_raw_and_errors_and_pushes_are_decoded() {
        let mut buf = BytesMut::from(
            &b"*2\r\n$1\r\na\r\n$-1\r\n-READONLY no\r\n>2\r\n+p\r\n+q\r\n:7\r\n"[..],
        );
        let next = |buf: &mut BytesMut| next_reply(buf, Proto::Resp2).ok().flatten();
        assert_eq!(
            next(&mut buf),
            Some(Some(Reply::Raw {
                bytes: Bytes::from_static(b"*2\r\n$1\r\na\r\n$-1\r\n"),
                proto: Proto::Resp2
            }))
        );
        let error = next(&mut buf).flatten();
        assert!(
            matches!(&error, Some(Reply::Frame(f)) if matches!(**f, Frame::SimpleError { .. })),
            "{error:?}"
        );
        let mut push = BytesMut::from(&b">2\r\n+p\r\n+q\r\n:7\r\n"[..]);
        assert_eq!(
            next_reply(&mut push, Proto::Resp3).ok().flatten(),
            Some(None)
        );
        assert_eq!(&push[..], b":7\r\n");
    }

    #[test]
    fn shapes_the_scan_does_not_follow_go_to_the_decoder() {
        assert_eq!(scan(b"$?\r\n;1\r\na\r\n;0\r\n"), Err(Unscannable));
        assert_eq!(scan(b"*1\r\n$3\r\nabcd\r\n"), Err(Unscannable));
        assert_eq!(scan(b"+OK\rX"), Err(Unscannable));
        assert_eq!(scan(b"*99999999999999999999\r\n"), Err(Unscannable));
    }

    #[test]
    fn a_raw_reply_decodes_as_the_decoder_reads_it() {
        let map = Bytes::from_static(b"%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n");
        let Frame::Map { data, .. } = decode_raw(map, Proto::Resp3) else {
            panic!("a map");
        };
        let keys: Vec<String> = data.keys().map(|k| format!("{k:?}")).collect();
        assert!(keys[0].contains('a') && keys[1].contains('b'), "{keys:?}");
        let nil = decode_raw(Bytes::from_static(b"$-1\r\n"), Proto::Resp2);
        assert_eq!(nil, Frame::Null);
    }

    /// A RESP3 attribute passes with the reply it annotates, raw; one before an error reply
    /// leaves the error to be decoded and classified.
    #[test]
    fn attributes_pass_with_their_reply() {
        let annotated = b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*2\r\n:1\r\n:2\r\n";
        let mut buf = BytesMut::from(&annotated[..]);
        buf.extend_from_slice(b"+NEXT\r\n");
        assert_eq!(
            next_reply(&mut buf, Proto::Resp3).ok().flatten(),
            Some(Some(Reply::Raw {
                bytes: Bytes::copy_from_slice(annotated),
                proto: Proto::Resp3
            }))
        );
        assert_eq!(&buf[..], b"+NEXT\r\n");
        // Nested: an attribute before an element of an array.
        let nested = b"*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n";
        assert_eq!(scan(nested), Ok(Some(nested.len())));
        for end in 0..nested.len() {
            assert_eq!(scan(&nested[..end]), Ok(None));
        }
        let mut error = BytesMut::from(&b"|1\r\n+a\r\n+b\r\n-ERR no\r\n"[..]);
        let reply = next_reply(&mut error, Proto::Resp3)
            .ok()
            .flatten()
            .flatten();
        assert!(reply.as_ref().is_some_and(Reply::is_error), "{reply:?}");
        assert!(matches!(
            next_reply(&mut BytesMut::from(&b"|1\r\n+a\r\n"[..]), Proto::Resp3),
            Ok(None)
        ));
    }
}
