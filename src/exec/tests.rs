//! The executor's unit tests.

use super::*;
use crate::resp::frame::number;
use crate::resp::Proto;

/// A never-retried dispatch that failed: in doubt only when it may have applied
/// something, which a read (`XREAD … BLOCK`, `WATCH`, a transaction of reads) cannot.
#[test]
fn a_bound_read_is_never_in_doubt() {
    let lost = || BackendError::Sent {
        source: crate::error::LinkError::new(crate::error::LinkErrorKind::Io, "reset"),
    };
    let refused = || BackendError::AcquireTimeout {
        waited: Duration::ZERO,
    };
    let answer = || BackendError::reply(bytes::Bytes::from_static(b"WRONGTYPE x"));
    let shape = |f: Failure<BackendError>| match f {
        Failure::Answer(..) => "answer",
        Failure::Unavailable(_) => "unavailable",
        Failure::InDoubt(_) => "indoubt",
    };
    let cases = [
        (lost(), false, "indoubt"),
        (lost(), true, "unavailable"),
        (refused(), false, "unavailable"),
        (refused(), true, "unavailable"),
        (answer(), false, "answer"),
        (answer(), true, "answer"),
    ];
    for (error, read, want) in cases {
        let what = format!("{error} read={read}");
        assert_eq!(shape(bound_failure(error, read)), want, "{what}");
    }
}

/// Tokens sort in the order they are made, whatever the client (a SQL backend's index
/// then grows at its end), across digit-count boundaries where decimal would not.
#[test]
fn tokens_sort_in_the_order_they_are_made() {
    let made = [
        (9, 3),
        (10, 200),
        (15, 1),
        (16, 7),
        (255, 42),
        (256, 0),
        (u64::MAX, 9),
    ];
    let tokens: Vec<String> = made
        .iter()
        .map(|&(n, id)| token_of(0xfeed, n, id))
        .collect();
    let mut sorted = tokens.clone();
    sorted.sort();
    assert_eq!(tokens, sorted);
    assert_eq!(
        token_of(0xfeed, 10, 200),
        "000000000000feed:000000000000000a:200"
    );
}

fn spec(name: &str) -> &'static Spec {
    crate::command::lookup(name.as_bytes()).expect("a row of the table")
}

/// The executor takes a settling read's row from the table (its metrics label and where
/// it may go) and settles nothing without one.
#[test]
fn every_settling_read_is_a_row_of_the_table() {
    let commands: [&[&str]; 12] = [
        &["DEL", "k"],
        &["HDEL", "k", "f"],
        &["SREM", "k", "m"],
        &["ZREM", "k", "m"],
        &["SADD", "k", "m"],
        &["HSET", "k", "f", "v"],
        &["ZADD", "k", "1", "m"],
        &["SETNX", "k", "v"],
        &["HSETNX", "k", "f", "v"],
        &["SET", "k", "v", "NX"],
        &["XADD", "k", "1-1", "f", "v"],
        &["MSETNX", "a", "1", "b", "2"],
    ];
    let replies = [
        Frame::Null,
        number(0),
        Frame::SimpleError {
            data: "ERR The ID specified in XADD is equal or smaller".into(),
            attributes: None,
        },
    ];
    let mut reads = 0;
    for command in commands {
        let args: Vec<Bytes> = command.iter().map(|a| Bytes::from(*a)).collect();
        let class = spec(command[0]).class_of(&args);
        let Plan::Settled(settle) = settle::plan(ReplyMode::Settled, &args, class, true) else {
            panic!("{command:?} is settled");
        };
        let post = replies.iter().filter_map(|reply| settle.post_read(reply));
        for read in settle.pre_read().into_iter().chain(post) {
            let name = read.first().map(|n| n.as_ref()).unwrap_or_default();
            assert!(
                crate::command::lookup(name).is_some(),
                "{command:?} reads {read:?}"
            );
            reads += 1;
        }
    }
    assert!(reads >= commands.len(), "{reads} reads");
}

#[test]
fn wait_stays_pinned_reads_join_and_writes_take_the_pin_along() {
    let pin = AtomicU64::new(7);
    let wait = placement(spec("WAIT"), spec("WAIT").class, &pin);
    assert!(matches!(wait, Placement::Pinned), "{wait:?}");
    let get = placement(spec("GET"), Idempotence::Read, &pin);
    assert!(matches!(get, Placement::Joins), "{get:?}");
    for class in [
        Idempotence::Idempotent,
        Idempotence::IdempotentEffect,
        Idempotence::NonIdempotent,
    ] {
        let write = placement(spec("SET"), class, &pin);
        assert!(matches!(write, Placement::Moves(_)), "{write:?}");
    }
    let _ = Proto::Resp3;
}
