//! The client-side RESP decoder on arbitrary bytes: it never panics, never takes more than it
//! was given, decodes the same requests however the bytes are split between reads, and every
//! request it yields goes through the command table and its error replies stay one frame.
#![no_main]

use bytes::BytesMut;
use holdfast::backend::{DoubleStyle, Proto};
use holdfast::command::Command;
use holdfast::resp::{decode_request, encode_reply, Decoder, Limits, Nils, ProtocolError};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    request_bytes: 1 << 16,
    bulk_bytes: 1 << 12,
    multibulk_len: 1 << 10,
};

type Decoded = (Vec<Vec<bytes::Bytes>>, Option<ProtocolError>);

/// Feeds `chunks` one after the other, decoding all it can after each.
fn decode(chunks: &[&[u8]]) -> Decoded {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match decode_request(&mut buf, &LIMITS) {
                Ok(Some(args)) => {
                    assert!(buf.len() < before, "a request must consume input");
                    out.push(args);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// The connection's decoder, fed `step` bytes at a time: it skips parses while a request
/// cannot be complete, and must find exactly the same requests.
fn decode_stepwise(data: &[u8], step: usize) -> Decoded {
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in data.chunks(step.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.next(&mut buf, &LIMITS) {
                Ok(Some(args)) => out.push(args),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let (whole, error) = decode(&[data]);
    if let Some(&first) = data.first() {
        let (stepwise, step_error) = decode_stepwise(data, usize::from(first % 16) + 1);
        if error.is_none() && step_error.is_none() {
            assert_eq!(whole, stepwise, "the decoder's skipping changed what was decoded");
        }
    }
    // Split anywhere: the requests decoded before an error are the same.
    if data.len() > 1 {
        let split = usize::from(data[0]) % data.len();
        let (parts, part_error) = decode(&[&data[..split], &data[split..]]);
        if error.is_none() && part_error.is_none() {
            assert_eq!(whole, parts, "split at {split}");
        }
    }
    for args in whole {
        match Command::parse(args) {
            Ok(command) => {
                let _ = command.keys().count();
                let _ = command.spec.class_of(&command.args);
            }
            Err(e) => {
                let frame = redis_frame(e.reply());
                for proto in [Proto::Resp2, Proto::Resp3] {
                    let mut out = BytesMut::new();
                    encode_reply(&mut out, &frame, proto, Nils::default(), DoubleStyle::default());
                    let crlf = out.windows(2).filter(|w| w == b"\r\n").count();
                    assert_eq!(crlf, 1, "an error reply is one line: {out:?}");
                }
            }
        }
    }
});

fn redis_frame(text: String) -> holdfast::resp::Frame {
    holdfast::resp::Frame::SimpleError {
        data: text.into(),
        attributes: None,
    }
}
