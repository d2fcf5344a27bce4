//! Replies that prove a write changed nothing: `DEL` of keys that were not there, `SADD` of
//! members already in the set, a refused `SETNX`. Exact mode records no token for such a
//! request (`group.rs`, `apply_exact` in `apply.rs`).
//!
//! Why that keeps exact mode's promise: a token exists so that a retry answers the reply of
//! the one application that took effect. An application that changed nothing took no effect
//! anyone can observe, committed or not, so a retry that finds no token and applies the
//! command is its first application, and its reply is the one the client hears. (If another
//! client wrote the key in between, the retry answers for that: `DEL` then answers 1, which
//! is what a single `DEL` ordered after that write answers.) What it saves is the cost of
//! recording: on SQL the token row turns a transaction that writes nothing into one that
//! writes, and a run of refused writes (cache invalidations, `SETNX` locks held by others,
//! `SADD`s of known members) is most of some workloads.

use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// Whether `reply`, the reply of the single command `args`, proves the command changed
/// nothing. Only replies that say so outright count: `HSET` answering 0 may still have
/// overwritten a field, `ZADD` answering 0 may have moved a score, so neither is here.
pub fn changed_nothing(args: &[Bytes], reply: &Frame) -> bool {
    let Some(name) = args.first() else {
        return false;
    };
    let name = name.to_ascii_uppercase();
    match reply {
        Frame::Number { data: 0, .. } => matches!(
            name.as_slice(),
            b"DEL"
                | b"UNLINK"
                | b"SETNX"
                | b"HSETNX"
                | b"SADD"
                | b"SREM"
                | b"SMOVE"
                | b"HDEL"
                | b"ZREM"
                | b"LREM"
                | b"LPUSHX"
                | b"RPUSHX"
                | b"XDEL"
                | b"EXPIRE"
                | b"PEXPIRE"
                | b"EXPIREAT"
                | b"PEXPIREAT"
                | b"PERSIST"
                | b"RENAMENX"
        ),
        // `SET … NX` or `XX` refused. With `GET` the nil is the old value of a key that was
        // absent, and the write was made.
        // A blocking pop, or a group read, that found nothing took nothing (every try of a
        // blocking command carries its token until one takes something).
        Frame::Null => {
            (name.as_slice() == b"SET"
                && !args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"GET")))
                || super::blocking::is_blocking(&name)
                || name.as_slice() == b"XREADGROUP"
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_replies_that_say_nothing_changed_skip_the_token() {
        let int = |n| Frame::Number {
            data: n,
            attributes: None,
        };
        let bulk = |s: &'static str| Frame::BlobString {
            data: Bytes::from_static(s.as_bytes()),
            attributes: None,
        };
        let ok = Frame::SimpleString {
            data: Bytes::from_static(b"OK"),
            attributes: None,
        };
        let cases: &[(&[&str], Frame, bool)] = &[
            (&["DEL", "k"], int(0), true),
            (&["del", "k", "j"], int(0), true),
            (&["DEL", "k"], int(1), false),
            (&["UNLINK", "k"], int(0), true),
            (&["SETNX", "k", "v"], int(0), true),
            (&["SETNX", "k", "v"], int(1), false),
            (&["SADD", "s", "m"], int(0), true),
            (&["SADD", "s", "m"], int(1), false),
            (&["SREM", "s", "m"], int(0), true),
            (&["HDEL", "h", "f"], int(0), true),
            (&["HSETNX", "h", "f", "v"], int(0), true),
            (&["EXPIRE", "k", "10"], int(0), true),
            (&["EXPIRE", "k", "10"], int(1), false),
            (&["PERSIST", "k"], int(0), true),
            // Zero, and yet a field or a score may have changed.
            (&["HSET", "h", "f", "v"], int(0), false),
            (&["ZADD", "z", "1", "m"], int(0), false),
            // Zero is a value these wrote.
            (&["INCRBY", "n", "0"], int(0), false),
            (&["DECR", "n"], int(0), false),
            (&["APPEND", "k", ""], int(0), false),
            (&["LPUSH", "l", "a"], int(0), false),
            (&["SET", "k", "v", "NX"], Frame::Null, true),
            (&["SET", "k", "v", "XX", "EX", "10"], Frame::Null, true),
            (&["SET", "k", "v", "NX"], ok.clone(), false),
            (&["SET", "k", "v"], ok, false),
            // The old value of an absent key: the write was made.
            (&["SET", "k", "v", "NX", "GET"], Frame::Null, false),
            (&["SET", "k", "v", "get"], Frame::Null, false),
            (&["SET", "k", "v", "NX", "GET"], bulk("old"), false),
            // Only the commands listed: a nil from any other is not taken to say so.
            (&["GETDEL", "k"], Frame::Null, false),
            // A blocking pop or group read that timed out took nothing.
            (
                &["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"],
                Frame::Null,
                true,
            ),
            (&["bzpopmin", "z", "1"], Frame::Null, true),
            (
                &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
                Frame::Null,
                true,
            ),
            (&["BLPOP", "l", "0"], bulk("x"), false),
            (&["LPOP", "l"], Frame::Null, false),
            (&[], int(0), false),
        ];
        for (args, reply, want) in cases {
            let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
            assert_eq!(changed_nothing(&args, reply), *want, "{args:?} {reply:?}");
        }
    }
}
