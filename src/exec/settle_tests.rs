//! The reply arithmetic of each mode, driven directly. Each guard of `settle.rs` has a test
//! here that fails when the guard is removed.

use super::*;
use crate::command::table::Idempotence::*;
use crate::resp::frame::array;

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

fn settled(words: &[&str]) -> Settle {
    match settle(&args(words)) {
        Some(s) => s,
        None => panic!("{words:?} is not settled"),
    }
}

fn bulk(text: &str) -> Frame {
    Frame::BlobString {
        data: Bytes::copy_from_slice(text.as_bytes()),
        attributes: None,
    }
}

fn err(text: &str) -> Frame {
    Frame::SimpleError {
        data: text.to_string().into(),
        attributes: None,
    }
}

#[test]
fn plans_by_mode_class_and_keys() {
    let del = args(&["DEL", "a"]);
    assert_eq!(
        plan(ReplyMode::Fast, &del, IdempotentEffect, true),
        Plan::Fast
    );
    assert!(matches!(
        plan(ReplyMode::Settled, &del, IdempotentEffect, true),
        Plan::Settled(_)
    ));
    assert_eq!(
        plan(ReplyMode::Exact, &del, IdempotentEffect, true),
        Plan::Exact
    );
    // Several keys: exact falls back to settled.
    let del2 = args(&["DEL", "a", "b"]);
    assert!(matches!(
        plan(ReplyMode::Exact, &del2, IdempotentEffect, false),
        Plan::Settled(_)
    ));
    // Nothing to settle for reads and idempotent writes.
    assert_eq!(
        plan(ReplyMode::Exact, &args(&["GET", "a"]), Read, true),
        Plan::Fast
    );
    assert_eq!(
        plan(
            ReplyMode::Settled,
            &args(&["SET", "a", "b"]),
            Idempotent,
            true
        ),
        Plan::Fast
    );
    // EVAL's keys follow a count; it cannot run inside the exact script.
    let eval = args(&["EVAL", "return 1", "1", "k"]);
    assert_eq!(
        plan(ReplyMode::Exact, &eval, NonIdempotent, false),
        Plan::Fast
    );
    // INCR has no settled form; exact covers it.
    let incr = args(&["INCR", "n"]);
    assert_eq!(
        plan(ReplyMode::Settled, &incr, NonIdempotent, true),
        Plan::Fast
    );
    assert_eq!(
        plan(ReplyMode::Exact, &incr, NonIdempotent, true),
        Plan::Exact
    );
}

#[test]
fn options_settled_mode_does_not_know_are_not_settled() {
    assert!(settle(&args(&["ZADD", "z", "CH", "1", "m"])).is_none());
    assert!(settle(&args(&["ZADD", "z", "XX", "1", "m"])).is_none());
    assert!(settle(&args(&["SET", "k", "v", "NX", "GET"])).is_none());
    assert!(settle(&args(&["SET", "k", "v"])).is_none());
    assert!(settle(&args(&["XADD", "s", "*", "f", "v"])).is_none());
    assert!(settle(&args(&["XADD", "s", "5-*", "f", "v"])).is_none());
    assert!(settle(&args(&["ZADD", "z", "NX", "1", "m"])).is_some());
}

#[test]
fn a_removal_that_finds_nothing_is_answered_without_a_dispatch() {
    let del = settled(&["DEL", "a", "b", "a"]);
    assert_eq!(del.pre_read(), Some(args(&["EXISTS", "a", "b"]).as_slice()));
    assert_eq!(
        del.without_dispatch(&Frame::Number {
            data: 0,
            attributes: None
        }),
        Some(int(0))
    );
    assert_eq!(del.without_dispatch(&int(1)), None);
    let srem = settled(&["SREM", "s", "x"]);
    assert_eq!(srem.without_dispatch(&array(vec![int(0)])), Some(int(0)));
    // An addition is dispatched even when everything is there already.
    let sadd = settled(&["SADD", "s", "x"]);
    assert_eq!(sadd.without_dispatch(&array(vec![int(1)])), None);
}

#[test]
fn a_removal_retried_after_it_landed_answers_what_existed() {
    let del = settled(&["DEL", "a", "b", "c"]);
    // Two of three existed; the retry found nothing left and said 0.
    assert_eq!(del.settle(Some(&int(2)), int(0), None), int(2));
    let hdel = settled(&["HDEL", "h", "f", "g"]);
    let pre = array(vec![bulk("1"), Frame::Null]);
    assert_eq!(hdel.settle(Some(&pre), int(0), None), int(1));
    let zrem = settled(&["ZREM", "z", "m", "n"]);
    let pre = array(vec![bulk("1"), bulk("2")]);
    assert_eq!(zrem.settle(Some(&pre), int(0), None), int(2));
}

#[test]
fn an_addition_retried_after_it_landed_answers_what_was_absent() {
    let sadd = settled(&["SADD", "s", "a", "b", "c", "a"]);
    // b was there; a and c were added by the dispatch whose reply was lost.
    let pre = array(vec![int(0), int(1), int(0)]);
    assert_eq!(sadd.settle(Some(&pre), int(0), None), int(2));
    let hset = settled(&["HSET", "h", "f", "1", "g", "2"]);
    let pre = array(vec![Frame::Null, Frame::Null]);
    assert_eq!(hset.settle(Some(&pre), int(0), None), int(2));
    let zadd = settled(&["ZADD", "z", "1", "m"]);
    assert_eq!(
        zadd.settle(Some(&array(vec![Frame::Null])), int(0), None),
        int(1)
    );
}

#[test]
fn a_retried_not_set_is_ours_when_the_stored_value_is_ours() {
    let setnx = settled(&["SETNX", "k", "mine"]);
    assert_eq!(
        setnx.post_read(&int(0)),
        Some(args(&["GET", "k"]).as_slice())
    );
    assert_eq!(setnx.post_read(&int(1)), None);
    let absent = int(0);
    assert_eq!(
        setnx.settle(Some(&absent), int(0), Some(&bulk("mine"))),
        int(1)
    );
    let set_nx = settled(&["SET", "k", "mine", "NX", "EX", "10"]);
    assert_eq!(
        set_nx.post_read(&Frame::Null),
        Some(args(&["GET", "k"]).as_slice())
    );
    assert_eq!(
        set_nx.settle(Some(&absent), Frame::Null, Some(&bulk("mine"))),
        Frame::SimpleString {
            data: Bytes::from_static(b"OK"),
            attributes: None
        }
    );
    let hsetnx = settled(&["HSETNX", "h", "f", "mine"]);
    assert_eq!(
        hsetnx.settle(Some(&absent), int(0), Some(&bulk("mine"))),
        int(1)
    );
    let msetnx = settled(&["MSETNX", "a", "1", "b", "2"]);
    assert_eq!(
        msetnx.post_read(&int(0)),
        Some(args(&["MGET", "a", "b"]).as_slice())
    );
    let both = array(vec![bulk("1"), bulk("2")]);
    assert_eq!(msetnx.settle(Some(&absent), int(0), Some(&both)), int(1));
    let one = array(vec![bulk("1"), bulk("other")]);
    assert_eq!(msetnx.settle(Some(&absent), int(0), Some(&one)), int(0));
}

/// The de-duplication idiom: `SETNX seen:m1 1` writes the same value every time, so a value
/// equal to ours proves nothing unless the key was absent before our first dispatch.
#[test]
fn a_value_stored_before_our_first_dispatch_is_not_ours() {
    for (words, exists, refused) in [
        (&["SETNX", "seen:m1", "1"][..], "EXISTS seen:m1", int(0)),
        (
            &["SET", "seen:m1", "1", "NX"][..],
            "EXISTS seen:m1",
            Frame::Null,
        ),
        (&["HSETNX", "h", "m1", "1"][..], "HEXISTS h m1", int(0)),
        (&["MSETNX", "a", "1", "b", "1"][..], "EXISTS a b", int(0)),
    ] {
        let s = settled(words);
        let exists: Vec<&str> = exists.split(' ').collect();
        assert_eq!(s.pre_read(), Some(args(&exists).as_slice()), "{words:?}");
        // Already there: the refusal, with nothing dispatched.
        assert_eq!(
            s.without_dispatch(&int(1)),
            Some(refused.clone()),
            "{words:?}"
        );
        assert_eq!(s.without_dispatch(&int(0)), None, "{words:?}");
        // Had the read not seen it (or not answered), a retried refusal finding our value
        // stays a refusal.
        let same = if words[0] == "MSETNX" {
            array(vec![bulk("1"), bulk("1")])
        } else {
            bulk("1")
        };
        assert_eq!(
            s.settle(Some(&int(1)), refused.clone(), Some(&same)),
            refused
        );
        assert_eq!(s.settle(None, refused.clone(), Some(&same)), refused);
    }
    // A key named twice in MSETNX: not settled.
    assert!(settle(&args(&["MSETNX", "a", "1", "a", "2"])).is_none());
}

/// A `SET … NX` with an expiry refused on a retry, whose read finds no value of ours where
/// nothing was before, may have landed and expired before another client's took its place:
/// in doubt, never "not set". Without an expiry, or where the key was there before, or our
/// value is found, the reply settles as ever.
#[test]
fn an_expiring_set_nx_refused_without_our_value_is_in_doubt() {
    let absent = int(0);
    let present = int(1);
    let mine = bulk("mine");
    let theirs = bulk("theirs");
    for (words, pre, post, doubt) in [
        (
            &["SET", "k", "mine", "NX", "PX", "100"][..],
            &absent,
            Some(&theirs),
            true,
        ),
        (
            &["SET", "k", "mine", "PX", "100", "NX"][..],
            &absent,
            Some(&theirs),
            true,
        ),
        (
            &["set", "k", "mine", "nx", "ex", "1"][..],
            &absent,
            Some(&theirs),
            true,
        ),
        (
            &["SET", "k", "mine", "NX", "EXAT", "9"][..],
            &absent,
            Some(&theirs),
            true,
        ),
        (
            &["SET", "k", "mine", "NX", "PXAT", "9"][..],
            &absent,
            Some(&Frame::Null),
            true,
        ),
        // Ours found: our write, settled.
        (
            &["SET", "k", "mine", "NX", "PX", "100"][..],
            &absent,
            Some(&mine),
            false,
        ),
        // There before our first dispatch: another's, a refusal.
        (
            &["SET", "k", "mine", "NX", "PX", "100"][..],
            &present,
            Some(&theirs),
            false,
        ),
        // No expiry: our write cannot vanish by itself.
        (
            &["SET", "k", "mine", "NX"][..],
            &absent,
            Some(&theirs),
            false,
        ),
        (&["SETNX", "k", "mine"][..], &absent, Some(&theirs), false),
        // The read did not answer: left to the executor's own rule.
        (
            &["SET", "k", "mine", "NX", "PX", "100"][..],
            &absent,
            None,
            false,
        ),
    ] {
        let s = settled(words);
        let refused = if words[0] == "SETNX" {
            int(0)
        } else {
            Frame::Null
        };
        assert_eq!(
            s.unsettled(Some(pre), &refused, post).is_some(),
            doubt,
            "{words:?} {pre:?} {post:?}"
        );
    }
    // A reply that set it is settled by the reply itself.
    let s = settled(&["SET", "k", "mine", "NX", "PX", "100"]);
    let ok = Frame::SimpleString {
        data: Bytes::from_static(b"OK"),
        attributes: None,
    };
    assert_eq!(s.unsettled(Some(&absent), &ok, Some(&theirs)), None);
}

#[test]
fn another_clients_value_is_not_ours() {
    let setnx = settled(&["SETNX", "k", "mine"]);
    let absent = int(0);
    assert_eq!(
        setnx.settle(Some(&absent), int(0), Some(&bulk("theirs"))),
        int(0)
    );
    assert_eq!(setnx.settle(Some(&absent), int(0), None), int(0));
}

#[test]
fn a_retried_xadd_refusal_is_ours_when_the_entry_is_ours() {
    let padded = settled(&["XADD", "s", "05-01", "f", "v"]);
    assert_eq!(
        padded.post_read(&err("ERR")),
        Some(args(&["XRANGE", "s", "5-1", "5-1"]).as_slice())
    );
    let xadd = settled(&["XADD", "s", "MAXLEN", "~", "100", "5", "f", "v"]);
    assert_eq!(xadd.post_read(&bulk("5-0")), None);
    let refused =
        err("ERR The ID specified in XADD is equal or smaller than the target stream top item");
    assert_eq!(
        xadd.post_read(&refused),
        Some(args(&["XRANGE", "s", "5-0", "5-0"]).as_slice())
    );
    let ours = array(vec![array(vec![
        bulk("5-0"),
        array(vec![bulk("f"), bulk("v")]),
    ])]);
    let none_above = array(vec![]);
    assert_eq!(
        xadd.settle(Some(&none_above), refused.clone(), Some(&ours)),
        bulk("5-0")
    );
    // An entry at or above the id before our first dispatch: the refusal is not ours to
    // rewrite, and it is answered without a dispatch.
    assert_eq!(
        xadd.settle(Some(&ours), refused.clone(), Some(&ours)),
        refused
    );
    assert_eq!(xadd.settle(None, refused.clone(), Some(&ours)), refused);
    assert_eq!(
        xadd.pre_read(),
        Some(args(&["XREVRANGE", "s", "+", "5-0", "COUNT", "1"]).as_slice())
    );
    assert_eq!(xadd.without_dispatch(&ours), Some(refused.clone()));
    assert_eq!(xadd.without_dispatch(&none_above), None);
    assert!(settle(&args(&["XADD", "s", "0-0", "f", "v"])).is_none());
    let theirs = array(vec![array(vec![
        bulk("5-0"),
        array(vec![bulk("f"), bulk("other")]),
    ])]);
    assert_eq!(
        xadd.settle(Some(&none_above), refused.clone(), Some(&theirs)),
        refused
    );
    assert_eq!(
        xadd.settle(Some(&none_above), refused.clone(), Some(&array(vec![]))),
        refused
    );
}

#[test]
fn an_error_reply_is_never_rewritten() {
    let del = settled(&["HDEL", "h", "f"]);
    let wrongtype = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(
        del.settle(Some(&array(vec![bulk("1")])), wrongtype.clone(), None),
        wrongtype
    );
}
