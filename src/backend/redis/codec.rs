//! RESP on holdfast's Redis connections: a command written as the client encoded it (or
//! encoded here), one reply taken off a connection's buffer as the bytes Redis wrote or, where
//! holdfast must look inside, decoded (`crate::resp::scan`). Knows nothing of connections.

use super::{Proto, Reply};
use crate::error::{LinkError, LinkErrorKind};
pub(super) use crate::resp::scan::{decode, encode};
use crate::resp::scan::{reply_kind, scan, Unscannable};
use crate::resp::{Output, Sink};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// Appends a command: as the client encoded it when that is known, else encoded here.
pub(super) fn put_command(out: &mut Output, args: &[Bytes], raw: Option<&Bytes>) {
    match raw {
        Some(raw) => out.put_bytes(raw),
        None => encode(out, args),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::decode_raw;
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
