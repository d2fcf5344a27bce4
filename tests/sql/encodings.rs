//! Commands Redis builds on its string and sorted-set encodings, on SQL backends against a
//! real `redis-server`: `BITFIELD` (integers at any bit offset of a string) and HyperLogLog
//! (`PFADD`, `PFCOUNT`, `PFMERGE`: the bytes `GET` shows after every step), in fixed cases
//! (every subcommand, overflow rule and error) and generated ones.

use super::differential::{assert_none, differences, runtime, Cmd, Targets};
use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, TestCaseError, TestRunner};

fn c(args: &[&str]) -> Cmd {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

fn fixed_bitfields() -> Vec<Cmd> {
    vec![
        c(&["BITFIELD", "b", "SET", "i8", "0", "100", "GET", "i8", "0"]),
        c(&["GET", "b"]),
        c(&[
            "BITFIELD", "b", "INCRBY", "u2", "100", "1", "OVERFLOW", "SAT", "INCRBY", "u2", "102",
            "1",
        ]),
        c(&[
            "BITFIELD", "b", "OVERFLOW", "WRAP", "INCRBY", "u2", "100", "1", "INCRBY", "u2", "100",
            "1", "INCRBY", "u2", "100", "1",
        ]),
        c(&[
            "BITFIELD", "b", "OVERFLOW", "SAT", "INCRBY", "u2", "100", "1", "INCRBY", "u2", "100",
            "1", "INCRBY", "u2", "100", "1",
        ]),
        c(&[
            "BITFIELD", "b", "OVERFLOW", "FAIL", "INCRBY", "u2", "100", "1", "INCRBY", "u2", "100",
            "1",
        ]),
        c(&[
            "BITFIELD", "b", "SET", "i8", "#1", "-128", "INCRBY", "i8", "#1", "-1", "GET", "u8",
            "#1",
        ]),
        c(&[
            "BITFIELD", "b", "OVERFLOW", "SAT", "SET", "i8", "#2", "300", "SET", "u8", "#3", "300",
        ]),
        c(&[
            "BITFIELD", "b", "OVERFLOW", "FAIL", "SET", "i8", "#2", "300", "SET", "u8", "#3", "-1",
        ]),
        c(&[
            "BITFIELD", "b", "SET", "i64", "0", "-1", "GET", "i64", "0", "GET", "u63", "1",
            "INCRBY", "i64", "0", "1",
        ]),
        c(&[
            "BITFIELD",
            "b",
            "OVERFLOW",
            "WRAP",
            "SET",
            "i64",
            "0",
            "9223372036854775807",
            "INCRBY",
            "i64",
            "0",
            "1",
        ]),
        c(&[
            "BITFIELD",
            "b",
            "OVERFLOW",
            "SAT",
            "INCRBY",
            "i64",
            "0",
            "-1",
            "INCRBY",
            "i64",
            "0",
            "-9223372036854775808",
        ]),
        c(&["BITFIELD", "b", "GET", "u8", "1000"]),
        c(&["STRLEN", "b"]),
        c(&["BITFIELD", "b", "SET", "u8", "1000", "1"]),
        c(&["STRLEN", "b"]),
        c(&["BITFIELD", "missing", "GET", "u8", "0"]),
        c(&["EXISTS", "missing"]),
        c(&["BITFIELD", "missing"]),
        c(&["BITFIELD", "new", "OVERFLOW", "FAIL", "SET", "u2", "0", "7"]),
        c(&["GET", "new"]),
        c(&["BITFIELD", "new2", "SET", "u8", "0", "0"]),
        c(&["GET", "new2"]),
        c(&["BITFIELD_RO", "b", "GET", "u8", "0", "GET", "i4", "#3"]),
        c(&["BITFIELD_RO", "b", "SET", "u8", "0", "1"]),
        c(&["BITFIELD_RO", "b", "OVERFLOW", "SAT", "GET", "u8", "0"]),
        // Errors, in Redis's order.
        c(&["BITFIELD", "b", "GET", "u64", "0"]),
        c(&["BITFIELD", "b", "GET", "i65", "0"]),
        c(&["BITFIELD", "b", "GET", "x8", "0"]),
        c(&["BITFIELD", "b", "GET", "i0", "0"]),
        c(&["BITFIELD", "b", "GET", "u8", "-1"]),
        c(&["BITFIELD", "b", "GET", "u8", "4294967296"]),
        c(&["BITFIELD", "b", "GET", "u8", "#536870912"]),
        c(&["BITFIELD", "b", "GET", "u8", "x"]),
        c(&["BITFIELD", "b", "SET", "u8", "0", "x"]),
        c(&["BITFIELD", "b", "OVERFLOW", "BOGUS", "GET", "u8", "0"]),
        c(&["BITFIELD", "b", "GET", "u8"]),
        c(&["BITFIELD", "b", "BOGUS", "u8", "0"]),
        c(&["BITFIELD", "b", "SET", "u8", "0", "1", "GET", "u99", "0"]),
        c(&["GET", "b"]),
        c(&["LPUSH", "l", "x"]),
        c(&["BITFIELD", "l", "GET", "u8", "0"]),
        c(&["BITFIELD", "l", "SET", "u8", "0", "1"]),
        c(&["SET", "t", "abc", "EX", "100"]),
        c(&["BITFIELD", "t", "SET", "u8", "0", "65"]),
        c(&["TTL", "t"]),
        c(&["GET", "t"]),
    ]
}

#[test]
fn bitfields_answer_as_redis_does_on_sqlite_and_postgres() {
    let rt = runtime();
    rt.block_on(async {
        let t = Targets::start().await;
        let cases = fixed_bitfields();
        let mut all = differences(&t, false, &cases).await;
        all.extend(differences(&t, true, &cases).await);
        assert_none(&all);
    });
}

/// One random `BITFIELD` subcommand (or an `OVERFLOW`).
fn op() -> impl Strategy<Value = Vec<String>> {
    let kind = prop_oneof![
        (1u32..=64).prop_map(|b| format!("i{b}")),
        (1u32..=63).prop_map(|b| format!("u{b}")),
    ];
    let offset = prop_oneof![
        (0u32..80).prop_map(|o| o.to_string()),
        (0u32..6).prop_map(|o| format!("#{o}")),
    ];
    let value = prop_oneof![-300i64..300, Just(i64::MAX), Just(i64::MIN), any::<i64>(),];
    prop_oneof![
        (kind.clone(), offset.clone()).prop_map(|(k, o)| vec!["GET".into(), k, o]),
        (kind.clone(), offset.clone(), value.clone()).prop_map(|(k, o, v)| vec![
            "SET".into(),
            k,
            o,
            v.to_string()
        ]),
        (kind, offset, value).prop_map(|(k, o, v)| vec!["INCRBY".into(), k, o, v.to_string()]),
        prop::sample::select(vec!["WRAP", "SAT", "FAIL"])
            .prop_map(|r| vec!["OVERFLOW".into(), r.to_string()]),
    ]
}

#[test]
fn generated_bitfields_answer_as_redis_does() {
    let rt = runtime();
    let targets = rt.block_on(Targets::start());
    let mut runner = TestRunner::new(PropConfig {
        cases: 48,
        failure_persistence: None,
        ..PropConfig::default()
    });
    let strategy = prop::collection::vec(prop::collection::vec(op(), 1..6), 1..12);
    let result = runner.run(&strategy, |commands| {
        let mut cmds: Vec<Cmd> = commands
            .into_iter()
            .map(|ops| {
                let mut cmd = vec![b"BITFIELD".to_vec(), b"f".to_vec()];
                cmd.extend(ops.into_iter().flatten().map(String::into_bytes));
                cmd
            })
            .collect();
        cmds.push(c(&["GET", "f"]));
        let diffs = rt.block_on(differences(&targets, false, &cmds));
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(TestCaseError::fail(diffs.join("\n")))
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// `PFADD key` with `n` elements named `prefix0..`.
fn pfadd(key: &str, prefix: &str, from: usize, n: usize) -> Cmd {
    let mut cmd = c(&["PFADD", key]);
    cmd.extend((from..from + n).map(|i| format!("{prefix}{i}").into_bytes()));
    cmd
}

/// HyperLogLog: the bytes `GET` shows after each step (sparse, promoted to dense past
/// 3,000 bytes, merged), the counts and their cache, and the refusals.
fn fixed_hyperloglogs() -> Vec<Cmd> {
    let mut v = vec![
        c(&["PFADD", "h"]),
        c(&["GET", "h"]),
        c(&["PFADD", "h", "a", "b", "c"]),
        c(&["PFADD", "h", "a"]),
        c(&["GET", "h"]),
        c(&["PFCOUNT", "h"]),
        c(&["GET", "h"]),
        c(&["PFCOUNT", "missing"]),
        c(&["PFCOUNT", "h", "missing"]),
        pfadd("h2", "x", 0, 100),
        c(&["PFCOUNT", "h", "h2"]),
        c(&["PFMERGE", "m", "h", "h2"]),
        c(&["GET", "m"]),
        c(&["PFCOUNT", "m"]),
        c(&["PFMERGE", "empty"]),
        c(&["GET", "empty"]),
    ];
    // Past the sparse limit: promoted to dense.
    for step in 0..20 {
        v.push(pfadd("big", "e", step * 250, 250));
        v.push(c(&["STRLEN", "big"]));
    }
    v.extend([
        c(&["PFCOUNT", "big"]),
        c(&["GET", "big"]),
        c(&["PFMERGE", "m", "big"]),
        c(&["GET", "m"]),
        c(&["PFCOUNT", "m", "h2", "big"]),
        // Refusals.
        c(&["SET", "s", "not an hll"]),
        c(&["PFADD", "s", "a"]),
        c(&["PFCOUNT", "s"]),
        c(&["PFMERGE", "s", "h"]),
        c(&["PFMERGE", "h", "s"]),
        c(&["LPUSH", "l", "x"]),
        c(&["PFADD", "l", "a"]),
        c(&["PFCOUNT", "l"]),
        c(&["PFCOUNT", "h", "l"]),
        c(&["SET", "corrupt", "HYLL\u{1}\0\0\0\0\0\0\0\0\0\0\0"]),
        c(&["PFCOUNT", "corrupt"]),
        c(&["PFADD", "corrupt", "a"]),
        // A copy of an HLL set back as a string is an HLL.
        c(&["SET", "t", "x", "EX", "100"]),
        c(&["PFMERGE", "t"]),
        c(&["TTL", "t"]),
    ]);
    v
}

#[test]
fn hyperloglogs_answer_as_redis_does_on_sqlite_and_postgres() {
    let rt = runtime();
    rt.block_on(async {
        let t = Targets::start().await;
        let cases = fixed_hyperloglogs();
        let mut all = differences(&t, false, &cases).await;
        all.extend(differences(&t, true, &cases).await);
        assert_none(&all);
    });
}

#[test]
fn generated_hyperloglogs_answer_as_redis_does() {
    let rt = runtime();
    let targets = rt.block_on(Targets::start());
    let mut runner = TestRunner::new(PropConfig {
        cases: 24,
        failure_persistence: None,
        ..PropConfig::default()
    });
    let step = prop_oneof![
        4 => (0usize..3, 0usize..5000, 1usize..400).prop_map(|(k, from, n)| pfadd(&format!("p{k}"), "m", from, n)),
        1 => (0usize..3).prop_map(|k| c(&["PFCOUNT", &format!("p{k}")])),
        1 => Just(c(&["PFCOUNT", "p0", "p1", "p2"])),
        1 => (0usize..3).prop_map(|k| c(&["PFMERGE", &format!("p{k}"), "p0", "p1", "p2"])),
        1 => (0usize..3).prop_map(|k| c(&["GET", &format!("p{k}")])),
    ];
    let result = runner.run(&prop::collection::vec(step, 1..30), |mut cmds| {
        cmds.extend((0..3).map(|k| c(&["GET", &format!("p{k}")])));
        let diffs = rt.block_on(differences(&targets, false, &cmds));
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(TestCaseError::fail(diffs.join("\n")))
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
