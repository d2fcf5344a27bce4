use super::*;
use proptest::prelude::*;

fn decode_all(input: &[u8], max: usize) -> (Vec<Vec<Bytes>>, Result<(), ProtocolError>, usize) {
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    loop {
        match decode_request(&mut buf, &Limits::request(max)) {
            Ok(Some(args)) => out.push(args),
            Ok(None) => return (out, Ok(()), buf.len()),
            Err(e) => return (out, Err(e), buf.len()),
        }
    }
}

fn words(args: &[Bytes]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn multibulk_pipelines_and_partial_frames() {
    let input = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET";
    let (requests, result, left) = decode_all(input, 1 << 20);
    assert!(result.is_ok());
    assert_eq!(requests.len(), 2);
    assert_eq!(words(&requests[0]), ["GET", "k"]);
    assert_eq!(words(&requests[1]), ["PING"]);
    // The incomplete third request stays buffered, untouched.
    assert_eq!(left, b"*2\r\n$3\r\nGET".len());
}

#[test]
fn every_split_point_yields_the_same_requests() {
    let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nxy\r\nPING\r\n*1\r\n$4\r\nPING\r\n";
    let (whole, _, _) = decode_all(input, 1 << 20);
    assert_eq!(whole.len(), 3);
    for split in 0..input.len() {
        let mut buf = BytesMut::from(&input[..split]);
        let mut got = Vec::new();
        while let Ok(Some(args)) = decode_request(&mut buf, &Limits::request(1 << 20)) {
            got.push(args);
        }
        buf.extend_from_slice(&input[split..]);
        while let Ok(Some(args)) = decode_request(&mut buf, &Limits::request(1 << 20)) {
            got.push(args);
        }
        assert_eq!(got, whole, "split at {split}");
    }
}

#[test]
fn inline_commands_follow_redis_quoting() {
    let (requests, result, _) = decode_all(
        b"SET k \"a b\\n\\x41\"\r\nGET 'it\\'s'\n\r\n   \r\nPING\r\n",
        1 << 20,
    );
    assert!(result.is_ok());
    assert_eq!(words(&requests[0]), ["SET", "k", "a b\nA"]);
    assert_eq!(words(&requests[1]), ["GET", "it's"]);
    // Blank lines are skipped, as Redis does.
    assert_eq!(words(&requests[2]), ["PING"]);
    assert_eq!(requests.len(), 3);
}

#[test]
fn unbalanced_quotes_lose_framing() {
    let (_, result, _) = decode_all(b"SET k \"oops\r\n", 1 << 20);
    assert!(matches!(result, Err(ProtocolError::Malformed(_))));
}

#[test]
fn empty_multibulk_is_skipped() {
    let (requests, result, _) = decode_all(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", 1 << 20);
    assert!(result.is_ok());
    assert_eq!(requests.len(), 1);
}

#[test]
fn a_non_bulk_element_is_a_protocol_error() {
    let (_, result, _) = decode_all(b"*1\r\n:1\r\n", 1 << 20);
    assert_eq!(
        result,
        Err(ProtocolError::Malformed(
            "expected '$', got ':'".to_string()
        ))
    );
}

#[test]
fn garbage_is_a_protocol_error() {
    let (_, result, _) = decode_all(b"*x\r\n", 1 << 20);
    assert!(matches!(result, Err(ProtocolError::Malformed(_))));
}

#[test]
fn a_request_over_the_limit_is_refused_before_it_is_complete() {
    // A bulk string that announces 2^40 bytes: refused once the buffer passes the limit,
    // without waiting for (or allocating) the rest.
    let mut input = b"*2\r\n$3\r\nSET\r\n$1099511627776\r\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 5000));
    let (_, result, _) = decode_all(&input, 4096);
    assert_eq!(result, Err(ProtocolError::BulkTooLong));
    // A request whose parts are each allowed is still bounded as a whole.
    let mut input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4000\r\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 3000));
    let limits = Limits {
        request_bytes: 2048,
        bulk_bytes: 4096,
        multibulk_len: 8,
    };
    let mut buf = BytesMut::from(&input[..1000]);
    assert_eq!(decode_request(&mut buf, &limits), Ok(None));
    let mut buf = BytesMut::from(&input[..]);
    assert_eq!(
        decode_request(&mut buf, &limits),
        Err(ProtocolError::TooLarge(2048))
    );
}

#[test]
fn an_endless_inline_line_is_refused() {
    let input = vec![b'a'; MAX_INLINE + 10];
    let (_, result, _) = decode_all(&input, 1 << 30);
    assert_eq!(result, Err(ProtocolError::InlineTooLarge));
}

fn encode2(frame: &Frame, null_array: bool) -> String {
    let mut out = BytesMut::new();
    let nils = Nils {
        top: null_array,
        nested: None,
    };
    encode_reply(&mut out, frame, Proto::Resp2, nils, DoubleStyle::G17);
    String::from_utf8_lossy(&out).into_owned()
}

fn encode3(frame: &Frame, doubles: DoubleStyle) -> String {
    let mut out = BytesMut::new();
    encode_reply(&mut out, frame, Proto::Resp3, Nils::default(), doubles);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn resp3_replies_become_what_redis_sends_a_resp2_client() {
    let map = Frame::Map {
        data: [(
            Frame::BlobString {
                data: "f".into(),
                attributes: None,
            },
            Frame::Double {
                data: 1.5,
                attributes: None,
            },
        )]
        .into_iter()
        .collect(),
        attributes: None,
    };
    assert_eq!(encode2(&map, false), "*2\r\n$1\r\nf\r\n$3\r\n1.5\r\n");
    assert_eq!(encode3(&map, DoubleStyle::G17), "%1\r\n$1\r\nf\r\n,1.5\r\n");
    assert_eq!(
        encode2(
            &Frame::Boolean {
                data: true,
                attributes: None
            },
            false
        ),
        ":1\r\n"
    );
    assert_eq!(encode2(&Frame::Null, false), "$-1\r\n");
    assert_eq!(encode2(&Frame::Null, true), "*-1\r\n");
    assert_eq!(
        encode2(
            &Frame::Double {
                data: f64::INFINITY,
                attributes: None
            },
            false
        ),
        "$3\r\ninf\r\n"
    );
}

proptest! {
    #[test]
    fn arbitrary_input_never_panics_and_never_overreads(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut buf = BytesMut::from(&input[..]);
        for _ in 0..600 {
            let before = buf.len();
            match decode_request(&mut buf, &Limits::request(1024)) {
                Ok(Some(_)) => prop_assert!(buf.len() < before),
                Ok(None) | Err(_) => break,
            }
        }
    }

    #[test]
    fn any_arguments_round_trip(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..8)) {
        let mut wire = format!("*{}\r\n", args.len()).into_bytes();
        for arg in &args {
            wire.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            wire.extend_from_slice(arg);
            wire.extend_from_slice(b"\r\n");
        }
        let mut buf = BytesMut::from(&wire[..]);
        let decoded = decode_request(&mut buf, &Limits::request(1 << 20)).unwrap().unwrap();
        let decoded: Vec<Vec<u8>> = decoded.iter().map(|b| b.to_vec()).collect();
        prop_assert_eq!(decoded, args);
        prop_assert!(buf.is_empty());
    }
}

#[test]
fn a_huge_multibulk_count_allocates_nothing_up_front() {
    let mut input = b"*1099511627776\r\n".to_vec();
    for _ in 0..100 {
        input.extend_from_slice(b"$1\r\na\r\n");
    }
    let (requests, result, _) = decode_all(&input, 1 << 20);
    assert!(requests.is_empty());
    assert_eq!(result, Err(ProtocolError::MultibulkTooLong));
}

#[test]
fn nested_nils_follow_the_rule() {
    let reply = Frame::Array {
        data: vec![
            Frame::Null,
            Frame::Array {
                data: vec![Frame::Null],
                attributes: None,
            },
        ],
        attributes: None,
    };
    let mut out = BytesMut::new();
    let nils = Nils {
        top: false,
        nested: Some(|path: &[usize]| path == [0]),
    };
    encode_reply(&mut out, &reply, Proto::Resp2, nils, DoubleStyle::G17);
    assert_eq!(&out[..], b"*2\r\n*-1\r\n*1\r\n$-1\r\n");
}

#[test]
fn error_texts_cannot_break_the_framing() {
    let frame = Frame::SimpleError {
        data: "ERR a\r\nb\nc".into(),
        attributes: None,
    };
    assert_eq!(encode2(&frame, false), "-ERR a  b c\r\n");
    assert_eq!(encode3(&frame, DoubleStyle::G17), "-ERR a  b c\r\n");
}

#[test]
fn doubles_are_spelled_as_the_backend_spells_them() {
    // What Redis 7.0 answers (printf's %.17g), checked against redis-server by the
    // differential tests; these pin the arithmetic.
    let g17 = [
        (0.1, "0.10000000000000001"),
        (1.5, "1.5"),
        (100.0, "100"),
        (1e20, "1e+20"),
        (-1.23e-5, "-1.2300000000000001e-05"),
        (std::f64::consts::PI, "3.1415926535897931"),
        (1e16, "10000000000000000"),
        (1e17, "1e+17"),
        (0.0001, "0.0001"),
        (0.00001, "1.0000000000000001e-05"),
        (-0.0, "-0"),
        (0.0, "0"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
    ];
    for (value, text) in g17 {
        assert_eq!(format_double(value, DoubleStyle::G17), text, "{value:e}");
    }
    assert_eq!(format_double(0.1, DoubleStyle::Shortest), "0.1");
    assert_eq!(format_double(1e20, DoubleStyle::Shortest), "1e+20");
    assert_eq!(format_double(2.5, DoubleStyle::Shortest), "2.5");
    assert_eq!(
        format_double(13.361389338970184, DoubleStyle::Human),
        "13.36138933897018433"
    );
    assert_eq!(format_double(15.0, DoubleStyle::Human), "15");
    assert_eq!(format_double(-0.0, DoubleStyle::Human), "0");
}

proptest! {
    #[test]
    fn a_g17_double_reads_back_as_the_same_value(value in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
        let text = format_double(value, DoubleStyle::G17);
        prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), value.to_bits(), "{}", text);
        let text = format_double(value, DoubleStyle::Shortest);
        prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), value.to_bits(), "{}", text);
    }
}

#[test]
fn announced_sizes_are_refused_from_the_header() {
    let limits = Limits {
        request_bytes: 1 << 30,
        bulk_bytes: 1024,
        multibulk_len: 8,
    };
    let decode = |input: &[u8]| {
        let mut buf = BytesMut::from(input);
        decode_request(&mut buf, &limits)
    };
    // Nothing after the header has arrived, and it is refused already.
    assert_eq!(
        decode(b"*1000000\r\n"),
        Err(ProtocolError::MultibulkTooLong)
    );
    assert_eq!(
        decode(b"*2\r\n$3\r\nSET\r\n$1099511627776\r\n"),
        Err(ProtocolError::BulkTooLong)
    );
    assert_eq!(
        decode(b"*2\r\n$3\r\nSET\r\n$1025\r\n"),
        Err(ProtocolError::BulkTooLong)
    );
    // At the limits, and partial headers, are fine.
    assert_eq!(decode(b"*8\r\n$1024\r\n"), Ok(None));
    assert_eq!(decode(b"*2\r\n$3\r\nSE"), Ok(None));
    assert_eq!(decode(b"*2\r\n$10"), Ok(None));
    assert!(decode(b"*1\r\n$4\r\nPING\r\n").unwrap().is_some());
}

#[test]
fn the_decoder_gives_the_same_requests_without_reparsing_a_large_one() {
    let limits = Limits::request(1 << 24);
    let mut wire = b"*1000\r\n".to_vec();
    for _ in 0..1000 {
        wire.extend_from_slice(b"$1\r\na\r\n");
    }
    wire.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for chunk in wire.chunks(7) {
        buf.extend_from_slice(chunk);
        while let Some(args) = decoder.next(&mut buf, &limits).unwrap() {
            got.push(args.len());
        }
    }
    assert_eq!(got, vec![1000, 1]);
    // About 1,000 reads of 7 bytes; without the hint every one would re-parse the request.
    let parses = decoder.parses();
    assert!(parses < 100, "{parses} parses");
}

/// What redis-protocol makes of the request at the front of `input` (the general path), as
/// arguments and the bytes consumed.
fn general(input: &[u8]) -> Option<(Vec<Bytes>, usize)> {
    let mut buf = BytesMut::from(input);
    let before = buf.len();
    match redis_protocol::resp2::decode::decode_bytes_mut(&mut buf) {
        Ok(Some((Frame2::Array(items), _, _))) => {
            let args = items
                .into_iter()
                .map(|item| match item {
                    Frame2::BulkString(b) => Some(b),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((args, before - buf.len()))
        }
        _ => None,
    }
}

/// Multibulk-shaped input with its headers and terminators sometimes wrong.
fn near_multibulk() -> impl Strategy<Value = Vec<u8>> {
    let arg = proptest::collection::vec(any::<u8>(), 0..12);
    // Mostly well formed, so a damaged part is often the only one.
    let skew = prop_oneof![6 => Just(0i64), 1 => -1i64..3];
    let damage = prop_oneof![4 => Just(0u8), 1 => 1u8..6];
    (
        proptest::collection::vec((arg, skew, damage), 0..5),
        prop_oneof![4 => Just(0i64), 1 => -1i64..2],
        prop_oneof![3 => Just(0usize), 1 => 1usize..3],
    )
        .prop_map(|(args, count_skew, cut)| {
            let count = args.len() as i64 + count_skew;
            let mut wire = format!("*{count}\r\n").into_bytes();
            for (arg, skew, damage) in &args {
                let len = arg.len() as i64 + skew;
                match damage {
                    0 => wire.extend_from_slice(format!("${len}\r\n").as_bytes()),
                    1 => wire.extend_from_slice(format!("+{len}\r\n").as_bytes()),
                    2 => wire.extend_from_slice(format!("${len}\n").as_bytes()),
                    _ => wire.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes()),
                }
                wire.extend_from_slice(arg);
                wire.extend_from_slice(if *damage == 4 { b"\rx" } else { b"\r\n" });
            }
            wire.truncate(wire.len().saturating_sub(cut));
            wire
        })
}

proptest! {
    /// The fast path takes a request only when redis-protocol would take the same one, with
    /// the same arguments and the same length; otherwise it leaves the input untouched.
    #[test]
    fn the_fast_path_agrees_with_the_general_one(input in near_multibulk()) {
        let mut buf = BytesMut::from(&input[..]);
        match multibulk(&mut buf, &Limits::request(1 << 20)) {
            Some((args, raw)) => {
                prop_assert_eq!(&raw[..], &input[..raw.len()]);
                let general = general(&input);
                prop_assert!(general.is_some(), "{:?}", String::from_utf8_lossy(&input));
                let (want, used) = general.unwrap_or_default();
                prop_assert_eq!(args, want);
                prop_assert_eq!(input.len() - buf.len(), used);
                prop_assert_eq!(raw.len(), used);
            }
            None => prop_assert_eq!(&buf[..], &input[..]),
        }
    }
}
