//! Every rule of `rewrite.rs`, one row each: a command, the primary's reply and how it
//! ended, and what the mirror is sent.

use super::*;

const NOW: i64 = 1_000_000;

fn words(s: &str) -> Vec<Bytes> {
    s.split(' ').map(text).collect()
}

fn bulk(s: &str) -> Frame {
    Frame::BlobString {
        data: text(s),
        attributes: None,
    }
}

fn array(items: Vec<Frame>) -> Frame {
    Frame::Array {
        data: items,
        attributes: None,
    }
}

fn ok() -> Frame {
    Frame::SimpleString {
        data: text("OK"),
        attributes: None,
    }
}

fn error(s: &str) -> Frame {
    Frame::SimpleError {
        data: s.into(),
        attributes: None,
    }
}

fn int(n: i64) -> Frame {
    Frame::Number {
        data: n,
        attributes: None,
    }
}

fn run(command: &str, reply: Frame, ended: Ended) -> Mirrored {
    let command = Command::parse(words(command)).expect("a command in the table");
    mirrored(&command, &Reply::Frame(Box::new(reply)), ended, NOW)
}

fn sends(lines: &[&str]) -> Mirrored {
    Mirrored::Send(lines.iter().map(|l| words(l)).collect())
}

#[test]
fn each_command_is_mirrored_as_its_rule_says() {
    let entry = |id: &str| array(vec![bulk(id), array(vec![bulk("f"), bulk("v")])]);
    let rows: Vec<(&str, Frame, Ended, Mirrored)> = vec![
        // Reads, and writes that changed nothing or whose effect is unknown.
        ("GET k", bulk("v"), Ended::Ok, Mirrored::Skip),
        (
            "XREAD BLOCK 10 STREAMS s $",
            Frame::Null,
            Ended::Ok,
            Mirrored::Skip,
        ),
        ("INCR k", int(0), Ended::Unavailable, Mirrored::Skip),
        ("INCR k", int(0), Ended::Answer, Mirrored::Skip),
        ("INCR k", int(0), Ended::InDoubt, Mirrored::Recopy),
        ("EVAL x 1 k", int(0), Ended::Answer, Mirrored::Recopy),
        (
            "EVALSHA x 1 k",
            error("ERR user_script:1: Script attempted to access nonexistent global variable"),
            Ended::Answer,
            Mirrored::Recopy,
        ),
        // Refused before the script began: nothing to replay, nothing to copy.
        (
            "EVALSHA x 1 k",
            error("NOSCRIPT No matching script. Please use EVAL."),
            Ended::Answer,
            Mirrored::Skip,
        ),
        (
            "FCALL f 1 k",
            error("BUSY Redis is busy running a script."),
            Ended::Answer,
            Mirrored::Skip,
        ),
        // Writes that change no data: a message, a kill of the primary's own script.
        ("PUBLISH c m", int(1), Ended::Ok, Mirrored::Skip),
        ("SPUBLISH c m", int(1), Ended::Ok, Mirrored::Skip),
        ("SCRIPT KILL", ok(), Ended::Ok, Mirrored::Skip),
        ("FUNCTION KILL", ok(), Ended::Ok, Mirrored::Skip),
        // As they are.
        ("INCR k", int(3), Ended::Ok, sends(&["INCR k"])),
        (
            "SCRIPT LOAD x",
            bulk("sha"),
            Ended::Ok,
            sends(&["SCRIPT LOAD x"]),
        ),
        ("SET k v NX", Frame::Null, Ended::Ok, sends(&["SET k v NX"])),
        (
            "XADD s 5-1 f v",
            bulk("5-1"),
            Ended::Ok,
            sends(&["XADD s 5-1 f v"]),
        ),
        ("RESTORE k 0 p", ok(), Ended::Ok, sends(&["RESTORE k 0 p"])),
        (
            "RESTORE k 9 p ABSTTL",
            ok(),
            Ended::Ok,
            sends(&["RESTORE k 9 p ABSTTL"]),
        ),
        ("EVAL x 1 k", int(1), Ended::Ok, sends(&["EVAL x 1 k"])),
        // Relative times made absolute.
        (
            "EXPIRE k 10 NX",
            int(1),
            Ended::Ok,
            sends(&["PEXPIREAT k 1010000 NX"]),
        ),
        (
            "PEXPIRE k 10",
            int(1),
            Ended::Ok,
            sends(&["PEXPIREAT k 1000010"]),
        ),
        (
            "SETEX k 2 v",
            ok(),
            Ended::Ok,
            sends(&["SET k v PXAT 1002000"]),
        ),
        (
            "PSETEX k 2 v",
            ok(),
            Ended::Ok,
            sends(&["SET k v PXAT 1000002"]),
        ),
        (
            "SET k v XX EX 3 GET",
            bulk("o"),
            Ended::Ok,
            sends(&["SET k v XX PXAT 1003000 GET"]),
        ),
        (
            "SET k v px 7",
            ok(),
            Ended::Ok,
            sends(&["SET k v PXAT 1000007"]),
        ),
        (
            "SET k v EXAT 9",
            ok(),
            Ended::Ok,
            sends(&["SET k v EXAT 9"]),
        ),
        (
            "GETEX k EX 1",
            bulk("v"),
            Ended::Ok,
            sends(&["GETEX k PXAT 1001000"]),
        ),
        (
            "RESTORE k 5 p REPLACE",
            ok(),
            Ended::Ok,
            sends(&["RESTORE k 1000005 p REPLACE ABSTTL"]),
        ),
        // Values the primary chose.
        (
            "XADD s MAXLEN ~ 10 * f v",
            bulk("7-0"),
            Ended::Ok,
            sends(&["XADD s MAXLEN ~ 10 7-0 f v"]),
        ),
        (
            "XADD s 7-* f v",
            bulk("7-3"),
            Ended::Ok,
            sends(&["XADD s 7-3 f v"]),
        ),
        (
            "XADD s NOMKSTREAM * f v",
            Frame::Null,
            Ended::Ok,
            Mirrored::Skip,
        ),
        ("SPOP k", bulk("a"), Ended::Ok, sends(&["SREM k a"])),
        (
            "SPOP k 2",
            array(vec![bulk("a"), bulk("b")]),
            Ended::Ok,
            sends(&["SREM k a b"]),
        ),
        ("SPOP k 2", array(vec![]), Ended::Ok, Mirrored::Skip),
        ("SPOP k", Frame::Null, Ended::Ok, Mirrored::Skip),
        (
            "INCRBYFLOAT k 0.1",
            bulk("1.1"),
            Ended::Ok,
            sends(&["SET k 1.1 KEEPTTL"]),
        ),
        (
            "HINCRBYFLOAT h f 2",
            bulk("3"),
            Ended::Ok,
            sends(&["HSET h f 3"]),
        ),
        // Blocking pops: the pop they ended in.
        (
            "BLPOP a b 0",
            array(vec![bulk("b"), bulk("x")]),
            Ended::Ok,
            sends(&["LPOP b"]),
        ),
        (
            "BRPOP a 0",
            array(vec![bulk("a"), bulk("x")]),
            Ended::Ok,
            sends(&["RPOP a"]),
        ),
        ("BLPOP a 1", Frame::Null, Ended::Ok, Mirrored::Skip),
        (
            "BLMPOP 0 2 left right RIGHT COUNT 5",
            array(vec![bulk("right"), array(vec![bulk("x"), bulk("y")])]),
            Ended::Ok,
            sends(&["RPOP right 2"]),
        ),
        ("BLMPOP 0 1 l LEFT", Frame::Null, Ended::Ok, Mirrored::Skip),
        (
            "BZPOPMIN z 0",
            array(vec![bulk("z"), bulk("m"), bulk("1")]),
            Ended::Ok,
            sends(&["ZREM z m"]),
        ),
        (
            "BZMPOP 0 1 z MAX COUNT 2",
            array(vec![
                bulk("z"),
                array(vec![
                    array(vec![bulk("m"), bulk("2")]),
                    array(vec![bulk("n"), bulk("1")]),
                ]),
            ]),
            Ended::Ok,
            sends(&["ZREM z m n"]),
        ),
        (
            "BRPOPLPUSH a b 0",
            bulk("x"),
            Ended::Ok,
            sends(&["RPOPLPUSH a b"]),
        ),
        (
            "BLMOVE a b LEFT RIGHT 0",
            bulk("x"),
            Ended::Ok,
            sends(&["LMOVE a b LEFT RIGHT"]),
        ),
        (
            "BLMOVE a b LEFT RIGHT 1",
            Frame::Null,
            Ended::Ok,
            Mirrored::Skip,
        ),
        // Consumer groups: what the primary delivered and claimed.
        (
            "XREADGROUP GROUP g c COUNT 2 BLOCK 100 NOACK STREAMS s >",
            Frame::Null,
            Ended::Ok,
            sends(&["XREADGROUP GROUP g c COUNT 2 NOACK STREAMS s >"]),
        ),
        (
            "XREADGROUP GROUP block block STREAMS block >",
            Frame::Null,
            Ended::Ok,
            sends(&["XREADGROUP GROUP block block STREAMS block >"]),
        ),
        (
            "XCLAIM s g c 5000 1-0 2-0 3-0 RETRYCOUNT 4",
            array(vec![entry("1-0"), entry("3-0")]),
            Ended::Ok,
            sends(&["XCLAIM s g c 0 1-0 3-0 RETRYCOUNT 4"]),
        ),
        (
            "XCLAIM s g c 5000 1-0 JUSTID",
            array(vec![bulk("1-0")]),
            Ended::Ok,
            sends(&["XCLAIM s g c 0 1-0 JUSTID"]),
        ),
        (
            "XCLAIM s g c 5000 1-0",
            array(vec![]),
            Ended::Ok,
            Mirrored::Skip,
        ),
        (
            "XAUTOCLAIM s g c 5000 0 COUNT 10",
            array(vec![
                bulk("0-0"),
                array(vec![entry("1-0")]),
                array(vec![bulk("2-0")]),
            ]),
            Ended::Ok,
            sends(&["XCLAIM s g c 0 1-0", "XACK s g 2-0"]),
        ),
        (
            "XAUTOCLAIM s g justid 5000 0 JUSTID",
            array(vec![bulk("0-0"), array(vec![bulk("1-0")]), array(vec![])]),
            Ended::Ok,
            sends(&["XCLAIM s g justid 0 1-0 JUSTID"]),
        ),
        (
            "XAUTOCLAIM s g c 5000 0",
            array(vec![bulk("0-0"), array(vec![]), array(vec![])]),
            Ended::Ok,
            Mirrored::Skip,
        ),
    ];
    for (command, reply, ended, want) in rows {
        assert_eq!(run(command, reply, ended), want, "{command}");
    }
}
