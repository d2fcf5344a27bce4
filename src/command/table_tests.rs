//! Tests of the command table and its rows. Arity and key positions were checked against
//! `COMMAND INFO` of redis-server 7.0.15.

use super::*;
use crate::command::{all, lookup, lookup_sub};
use bytes::Bytes;
use std::collections::HashSet;

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|word| Bytes::copy_from_slice(word.as_bytes()))
        .collect()
}

fn row(name: &str) -> &'static Spec {
    lookup(name.as_bytes()).unwrap_or_else(|| panic!("no row for {name}"))
}

/// The row of an invocation: `OBJECT ENCODING k` finds `OBJECT|ENCODING`.
fn row_of(words: &[&str]) -> &'static Spec {
    let spec = row(words[0]);
    if spec.container {
        let sub = words.get(1).expect("a container needs a subcommand");
        lookup_sub(spec, sub.as_bytes()).unwrap_or_else(|| panic!("no row for {words:?}"))
    } else {
        spec
    }
}

fn class(words: &[&str]) -> Idempotence {
    row_of(words).class_of(&args(words))
}

fn keys_of(words: &[&str]) -> Vec<usize> {
    key_indices(row_of(words).keys, &args(words)).collect()
}

#[test]
fn names_are_upper_case_and_unique() {
    let mut seen = HashSet::new();
    for spec in all() {
        assert!(!spec.name.is_empty());
        assert!(
            spec.name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_|-".contains(c)),
            "{} is not an upper-case command name",
            spec.name
        );
        assert!(seen.insert(spec.name), "{} has two rows", spec.name);
    }
}

#[test]
fn subcommands_have_their_container_and_containers_have_subcommands() {
    for spec in all() {
        if spec.container {
            assert!(!spec.name.contains('|'), "{}", spec.name);
            assert_eq!(spec.arity, -2, "{}", spec.name);
            assert_eq!(spec.keys, Keys::None, "{}", spec.name);
            let prefix = format!("{}|", spec.name);
            assert!(
                all().iter().any(|sub| sub.name.starts_with(&prefix)),
                "container {} has no subcommand",
                spec.name
            );
        } else if let Some((container, sub)) = spec.name.split_once('|') {
            assert!(!sub.is_empty() && !sub.contains('|'), "{}", spec.name);
            let parent = lookup(container.as_bytes())
                .unwrap_or_else(|| panic!("{} has no container row", spec.name));
            assert!(parent.container, "{container} is not marked a container");
            let found = lookup_sub(parent, sub.to_ascii_lowercase().as_bytes()).unwrap();
            assert_eq!(found.name, spec.name);
        }
    }
}

#[test]
fn lookup_ignores_case() {
    assert_eq!(row("get").name, "GET");
    assert_eq!(row("zUnionStore").name, "ZUNIONSTORE");
    let config = row("config");
    assert!(config.container);
    assert_eq!(lookup_sub(config, b"get").unwrap().name, "CONFIG|GET");
    assert_eq!(lookup_sub(config, b"set").unwrap().name, "CONFIG|SET");
    assert!(lookup(b"NOSUCHCOMMAND").is_none());
}

#[test]
fn arity_and_keys_match_redis_7() {
    let range = |first, last, step| Keys::Range { first, last, step };
    let cases: &[(&str, i32, Keys)] = &[
        ("GET", 2, KEY1),
        ("SET", -3, KEY1),
        ("MSET", -3, KEYS_PAIRS),
        ("DEL", -2, KEYS_ALL),
        ("ZUNIONSTORE", -4, Keys::Numkeys { at: 2, dest: true }),
        ("EVAL", -3, Keys::Numkeys { at: 2, dest: false }),
        ("XREAD", -4, Keys::Streams),
        ("XREADGROUP", -7, Keys::Streams),
        ("LMPOP", -4, Keys::Numkeys { at: 1, dest: false }),
        ("BLMPOP", -5, Keys::Numkeys { at: 2, dest: false }),
        ("BLPOP", -3, range(1, -2, 1)),
        ("BZPOPMIN", -3, range(1, -2, 1)),
        ("BITOP", -4, range(2, -1, 1)),
        ("OBJECT|ENCODING", 3, range(2, 2, 1)),
        ("XGROUP|CREATE", -5, range(2, 2, 1)),
        ("GEOSEARCHSTORE", -8, KEYS_1_2),
        ("RENAME", 3, KEYS_1_2),
        ("SDIFFSTORE", -3, KEYS_ALL),
        ("XADD", -5, KEY1),
        ("ZADD", -4, KEY1),
        // Redis 7's key specs name the STORE destination too (a keyword spec), beyond the
        // legacy triple (1, 1, 1).
        ("SORT", -2, Keys::Store(StoreOptions::Sort)),
        ("WAIT", 3, NO_KEYS),
        ("KEYS", 2, NO_KEYS),
        ("CONFIG|GET", -3, NO_KEYS),
        ("WATCH", -2, KEYS_ALL),
        ("PING", -1, NO_KEYS),
    ];
    for &(name, arity, keys) in cases {
        let spec = row(name);
        assert_eq!(spec.arity, arity, "arity of {name}");
        assert_eq!(spec.keys, keys, "keys of {name}");
    }
}

#[test]
fn arity_checks() {
    assert!(row("GET").arity_ok(2));
    assert!(!row("GET").arity_ok(3));
    assert!(!row("SET").arity_ok(2));
    assert!(row("SET").arity_ok(3));
    assert!(row("SET").arity_ok(6));
    assert!(row("PING").arity_ok(1));
}

#[test]
fn refine_reads_the_right_positions() {
    use Idempotence::*;
    let cases: &[(&[&str], Idempotence)] = &[
        (&["SET", "k", "v"], Idempotent),
        (&["SET", "k", "v", "NX"], IdempotentEffect),
        (&["SET", "k", "NX"], Idempotent),  // the value is "NX"
        (&["SET", "k", "GET"], Idempotent), // the value is "GET"
        (&["SET", "k", "v", "GET"], NonIdempotent),
        (&["SET", "k", "v", "nx", "get"], NonIdempotent),
        (&["SET", "k", "v", "XX"], Idempotent),
        (&["SET", "k", "v", "EX", "10"], Idempotent),
        (&["SET", "k", "v", "PX", "10", "NX"], IdempotentEffect),
        (&["XADD", "s", "*", "f", "v"], NonIdempotent),
        (&["XADD", "s", "1-1", "f", "v"], IdempotentEffect),
        (&["XADD", "s", "1-*", "f", "v"], NonIdempotent),
        (
            &["XADD", "s", "NOMKSTREAM", "MAXLEN", "10", "*", "f", "v"],
            NonIdempotent,
        ),
        (
            &[
                "XADD", "s", "MAXLEN", "~", "10", "LIMIT", "5", "2-1", "f", "v",
            ],
            IdempotentEffect,
        ),
        (
            &["XADD", "s", "MINID", "=", "0-1", "3-1", "f", "*"],
            IdempotentEffect,
        ),
        (&["ZADD", "z", "INCR", "1", "m"], NonIdempotent),
        (&["ZADD", "z", "XX", "CH", "INCR", "1", "m"], NonIdempotent),
        (&["ZADD", "z", "1", "m"], IdempotentEffect),
        (&["ZADD", "z", "1", "INCR"], IdempotentEffect), // the member is "INCR"
        (&["ZADD", "z", "NX", "1", "m", "2", "n"], IdempotentEffect),
        (&["XREAD", "STREAMS", "s", "0"], Read),
        (
            &["XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "$"],
            ConnectionBound,
        ),
        (&["XREAD", "STREAMS", "block", "0"], Read), // the stream is "block"
        (
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
            NonIdempotent,
        ),
        (
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "10",
                "STREAMS",
                "s",
                ">",
            ],
            ConnectionBound,
        ),
        (
            &["XREADGROUP", "GROUP", "g", "block", "STREAMS", "s", ">"],
            NonIdempotent,
        ),
        (&["EXPIREAT", "k", "4102444800"], Idempotent),
        (&["EXPIREAT", "k", "4102444800", "NX"], IdempotentEffect),
        (&["EXPIREAT", "k", "4102444800", "gt"], IdempotentEffect),
        (&["EXPIREAT", "k", "1"], IdempotentEffect), // in the past: deletes the key
        (&["PEXPIREAT", "k", "4102444800000"], Idempotent),
        (&["PEXPIREAT", "k", "4102444800000", "LT"], IdempotentEffect),
        (&["PEXPIREAT", "k", "1"], IdempotentEffect),
        (&["EXPIRE", "k", "10"], IdempotentEffect),
        (&["BITFIELD", "b", "GET", "u8", "0"], Read),
        (
            &["BITFIELD", "b", "OVERFLOW", "SAT", "GET", "u8", "0"],
            Read,
        ),
        (&["BITFIELD", "b", "INCRBY", "u8", "0", "1"], NonIdempotent),
        (
            &["BITFIELD", "b", "GET", "u8", "0", "SET", "u8", "0", "5"],
            NonIdempotent,
        ),
        (&["ZUNIONSTORE", "d", "2", "a", "b"], Idempotent),
        (&["ZUNIONSTORE", "d", "2", "d", "b"], NonIdempotent),
        (
            &["ZINTERSTORE", "d", "1", "a", "AGGREGATE", "MAX"],
            Idempotent,
        ),
        (&["ZDIFFSTORE", "d", "2", "a", "d"], NonIdempotent),
        (&["SDIFFSTORE", "d", "a", "b"], Idempotent),
        (&["SDIFFSTORE", "d", "a", "d"], NonIdempotent),
        (&["SUNIONSTORE", "d", "a"], Idempotent),
        (&["BITOP", "AND", "d", "a", "b"], Idempotent),
        (&["BITOP", "NOT", "d", "d"], NonIdempotent),
        (&["ZRANGESTORE", "d", "s", "0", "1"], Idempotent),
        (&["ZRANGESTORE", "s", "s", "1", "2"], NonIdempotent),
        (
            &[
                "GEOSEARCHSTORE",
                "d",
                "s",
                "FROMMEMBER",
                "m",
                "BYRADIUS",
                "1",
                "km",
            ],
            Idempotent,
        ),
        (
            &[
                "GEOSEARCHSTORE",
                "s",
                "s",
                "FROMMEMBER",
                "m",
                "BYRADIUS",
                "1",
                "km",
            ],
            NonIdempotent,
        ),
        (&["SORT", "k"], Read),
        (&["SORT", "k", "BY", "STORE", "DESC"], Read), // the pattern is "STORE"
        (&["SORT", "k", "LIMIT", "0", "10", "STORE", "d"], Idempotent),
        (&["SORT", "k", "STORE", "k"], NonIdempotent),
        (&["GEORADIUS", "g", "15", "37", "200", "km"], Read),
        (
            &[
                "GEORADIUS",
                "g",
                "15",
                "37",
                "200",
                "km",
                "COUNT",
                "1",
                "STORE",
                "d",
            ],
            Idempotent,
        ),
        (
            &["GEORADIUS", "g", "15", "37", "200", "km", "STORE", "g"],
            NonIdempotent,
        ),
        (
            &["GEORADIUSBYMEMBER", "g", "m", "200", "km", "STOREDIST", "d"],
            Idempotent,
        ),
        (
            &["GEORADIUSBYMEMBER", "g", "m", "200", "km", "WITHDIST"],
            Read,
        ),
        (&["RESTORE", "k", "0", "payload"], NonIdempotent),
        (&["RESTORE", "k", "0", "payload", "REPLACE"], Idempotent),
        (&["RESTORE", "replace", "0", "payload"], NonIdempotent), // the key is "replace"
        (&["PFMERGE", "d", "d", "a"], Idempotent),
        // A repeat after the key expired answers nil for the value the first call returned.
        (&["GETEX", "k", "EX", "10"], NonIdempotent),
        (&["GETEX", "k", "pxat", "10"], NonIdempotent),
        (&["GETEX", "k", "PERSIST"], Idempotent),
        (&["GETEX", "k"], Read),
        (&["GETEX", "persist"], Read), // the key is "persist"
        (&["MSET", "a", "1"], Idempotent),
        (&["HSET", "h", "f", "v"], IdempotentEffect),
        (&["SETNX", "k", "v"], IdempotentEffect),
        (&["DEL", "k"], IdempotentEffect),
        (&["INCR", "k"], NonIdempotent),
        (&["GETSET", "k", "v"], NonIdempotent),
        (&["RENAME", "a", "b"], NonIdempotent),
        (&["EVAL", "return 1", "0"], NonIdempotent),
        (&["EVAL_RO", "return 1", "0"], Read),
        (&["EVAL", "#!lua flags=no-writes\nreturn 1", "0"], Read),
        (&["EVAL", "#!lua\nreturn 1", "0"], NonIdempotent),
        (
            &["EVAL", "#!lua flags=allow-oom\nreturn 1", "0"],
            NonIdempotent,
        ),
        (&["BLPOP", "a", "0"], ConnectionBound),
        (&["GET", "k"], Read),
        (&["XGROUP", "CREATE", "s", "g", "$"], IdempotentEffect),
        (&["XINFO", "STREAM", "s"], Read),
        (&["OBJECT", "ENCODING", "k"], Read),
        (&["FLUSHDB"], Idempotent),
        (&["WATCH", "k"], ConnectionBound),
        (&["EXEC"], ConnectionBound),
    ];
    for &(words, expected) in cases {
        assert_eq!(class(words), expected, "class of {words:?}");
    }
}

#[test]
fn refined_rows_default_to_their_most_cautious_class() {
    use Idempotence::*;
    let rank = |class: Idempotence| match class {
        Read => 0,
        Idempotent => 1,
        IdempotentEffect => 2,
        NonIdempotent => 3,
        ConnectionBound => 4,
    };
    let samples: &[&[&str]] = &[
        &["SET", "k", "v", "GET"],
        &["XADD", "s", "*", "f", "v"],
        &["ZADD", "z", "INCR", "1", "m"],
        &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        &["SORT", "k", "STORE", "k"],
        &["BITFIELD", "b", "INCRBY", "u8", "0", "1"],
    ];
    for words in samples {
        let spec = row(words[0]);
        assert!(spec.refine.is_some());
        assert_eq!(spec.class, class(words), "default class of {}", spec.name);
    }
    for spec in all().iter().filter(|spec| spec.refine.is_some()) {
        for words in [
            &["x"][..],
            &["x", "k", "v", "NX"],
            &["x", "k", "STORE", "k"],
        ] {
            let mut words = words.to_vec();
            words[0] = spec.name;
            let refined = spec.class_of(&args(&words));
            assert!(rank(refined) <= rank(spec.class), "{words:?}");
        }
    }
}

#[test]
fn refine_never_panics() {
    let words = [
        "*",
        "1-*",
        "0",
        "-1",
        "99999999999999999999",
        "NX",
        "GET",
        "SET",
        "INCRBY",
        "OVERFLOW",
        "STORE",
        "STOREDIST",
        "COUNT",
        "BLOCK",
        "STREAMS",
        "MAXLEN",
        "~",
        "LIMIT",
        "BY",
        "REPLACE",
        "INCR",
        "",
    ];
    for spec in all() {
        for len in 0..14 {
            for start in 0..words.len() {
                let mut invocation = vec![Bytes::from_static(spec.name.as_bytes())];
                invocation.extend(
                    (0..len).map(|i| {
                        Bytes::from_static(words[(start + i * 7) % words.len()].as_bytes())
                    }),
                );
                let _ = spec.class_of(&invocation);
                let _ = spec.class_of(&invocation[..0]);
                let _ = key_indices(spec.keys, &invocation);
            }
        }
    }
}

#[test]
fn key_indices_of_samples() {
    let cases: &[(&[&str], &[usize])] = &[
        (&["GET", "k"], &[1]),
        (&["SET", "k", "v", "NX"], &[1]),
        (&["MSET", "a", "1", "b", "2"], &[1, 3]),
        (&["DEL", "a", "b", "c"], &[1, 2, 3]),
        (
            &["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"],
            &[1, 3, 4],
        ),
        (&["ZDIFFSTORE", "d", "1", "a"], &[1, 3]),
        (&["EVAL", "return 1", "2", "a", "b", "arg"], &[3, 4]),
        (&["EVAL", "return 1", "0", "arg"], &[]),
        (&["FCALL", "f", "1", "a"], &[3]),
        (
            &["XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "0"],
            &[4, 5],
        ),
        (
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "s",
                ">",
            ],
            &[7],
        ),
        (&["LMPOP", "2", "a", "b", "LEFT", "COUNT", "2"], &[2, 3]),
        (&["BLMPOP", "0", "2", "a", "b", "LEFT"], &[3, 4]),
        (&["SINTERCARD", "2", "a", "b", "LIMIT", "1"], &[2, 3]),
        (&["BLPOP", "a", "b", "0"], &[1, 2]),
        (&["BITOP", "AND", "d", "a", "b"], &[2, 3, 4]),
        (&["OBJECT", "ENCODING", "k"], &[2]),
        (&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"], &[2]),
        (
            &[
                "GEOSEARCHSTORE",
                "d",
                "s",
                "FROMMEMBER",
                "m",
                "BYRADIUS",
                "1",
                "km",
            ],
            &[1, 2],
        ),
        (&["SORT", "k", "STORE", "d"], &[1, 3]),
        (&["LMOVE", "a", "b", "LEFT", "RIGHT"], &[1, 2]),
        (&["WATCH", "a", "b"], &[1, 2]),
        (&["SCAN", "0", "MATCH", "x*"], &[]),
        (&["PING"], &[]),
    ];
    for &(words, expected) in cases {
        assert_eq!(keys_of(words), expected, "keys of {words:?}");
    }
}

/// A group or consumer named `streams` must not be taken for the STREAMS token: Redis starts
/// the search after `GROUP g c`.
#[test]
fn xreadgroup_consumer_named_streams() {
    assert_eq!(
        keys_of(&["XREADGROUP", "GROUP", "g", "STREAMS", "STREAMS", "s", "0"]),
        [5]
    );
}

#[test]
fn null_array_rows() {
    let mut marked: Vec<&str> = all()
        .iter()
        .filter(|spec| spec.null_array_from != 0)
        .map(|spec| spec.name)
        .collect();
    marked.sort_unstable();
    let mut expected = vec![
        "BLMOVE",
        "BLMPOP",
        "BLPOP",
        "BRPOP",
        "BRPOPLPUSH",
        "BZMPOP",
        "BZPOPMAX",
        "BZPOPMIN",
        "EXEC",
        "LMPOP",
        "LPOP",
        "RPOP",
        "XRANGE",
        "XREAD",
        "XREADGROUP",
        "XREVRANGE",
        "ZMPOP",
    ];
    expected.sort_unstable();
    assert_eq!(marked, expected);
    // LPOP without a count answers `$-1`; with one, `*-1`.
    let lpop = lookup(b"LPOP").unwrap();
    assert!(!lpop.nil_is_array(2));
    assert!(lpop.nil_is_array(3));
}

#[test]
fn local_rows() {
    let cases = [
        ("PING", Local::Ping),
        ("ECHO", Local::Echo),
        ("HELLO", Local::Hello),
        ("AUTH", Local::Auth),
        ("SELECT", Local::Select),
        ("CLIENT", Local::Client),
        ("INFO", Local::Info),
        ("COMMAND", Local::Command),
        ("QUIT", Local::Quit),
        ("RESET", Local::Reset),
        ("MULTI", Local::Multi),
        ("EXEC", Local::Exec),
        ("DISCARD", Local::Discard),
        ("WATCH", Local::Watch),
        ("UNWATCH", Local::Unwatch),
        ("READONLY", Local::ClusterOnly),
        ("READWRITE", Local::ClusterOnly),
        ("SUBSCRIBE", Local::Subscribe),
        ("PSUBSCRIBE", Local::Subscribe),
        ("SSUBSCRIBE", Local::Subscribe),
        ("UNSUBSCRIBE", Local::Subscribe),
        ("PUNSUBSCRIBE", Local::Subscribe),
        ("SUNSUBSCRIBE", Local::Subscribe),
        ("PUBSUB|CHANNELS", Local::Pubsub),
        ("PUBSUB|NUMPAT", Local::Pubsub),
        ("PUBSUB|NUMSUB", Local::Pubsub),
        ("PUBSUB|SHARDCHANNELS", Local::Pubsub),
        ("PUBSUB|SHARDNUMSUB", Local::Pubsub),
        ("MONITOR", Local::Monitor),
        ("ACL|WHOAMI", Local::Acl),
        ("ACL|USERS", Local::Acl),
        ("ACL|LIST", Local::Acl),
        ("HOLDFAST|COPY", Local::Holdfast),
        ("HOLDFAST|RECOPY", Local::Holdfast),
        ("HOLDFAST|VERIFY", Local::Holdfast),
        ("HOLDFAST|MIRROR", Local::Holdfast),
    ];
    for (name, local) in cases {
        let spec = row(name);
        assert_eq!(spec.exec, Exec::Local(local), "{name}");
        assert!(!spec.container, "{name}");
        if name != "WATCH" {
            assert_eq!(spec.keys, Keys::None, "{name}");
        }
    }
    let locals = all()
        .iter()
        .filter(|spec| matches!(spec.exec, Exec::Local(_)))
        .count();
    assert_eq!(locals, cases.len());
}

#[test]
fn left_out_commands_have_no_row() {
    for name in [
        "MOVE",
        "SWAPDB",
        "MIGRATE",
        "SHUTDOWN",
        "DEBUG",
        "REPLICAOF",
        "SLAVEOF",
        "SAVE",
        "BGSAVE",
        "CLUSTER",
        "PFDEBUG",
        "PFSELFTEST",
    ] {
        assert!(
            lookup(name.as_bytes()).is_none(),
            "{name} should have no row"
        );
    }
}

#[test]
fn keyless_forwarded_commands_go_to_the_catch_all() {
    for name in [
        "FLUSHDB",
        "FLUSHALL",
        "DBSIZE",
        "TIME",
        "LASTSAVE",
        "RANDOMKEY",
        "KEYS",
        "SCAN",
    ] {
        let spec = row(name);
        assert_eq!(spec.exec, Exec::Forward, "{name}");
        assert_eq!(spec.keys, Keys::None, "{name}");
    }
}

#[test]
fn a_store_destination_is_a_key_and_patterns_are_found() {
    let cases: &[(&[&str], &[usize])] = &[
        (&["SORT", "k"], &[1]),
        (&["SORT", "k", "STORE", "d"], &[1, 3]),
        (
            &["SORT", "k", "BY", "store", "GET", "store", "STORE", "d"],
            &[1, 7],
        ),
        (&["SORT", "k", "LIMIT", "0", "1", "store", "d"], &[1, 6]),
        // STORE as the last argument: no destination to route (Redis answers the error).
        (&["SORT", "k", "STORE"], &[1]),
        (&["SORT_RO", "k", "GET", "x"], &[1]),
        (
            &[
                "GEORADIUS",
                "k",
                "0",
                "0",
                "1",
                "km",
                "COUNT",
                "1",
                "ANY",
                "STORE",
                "d",
            ],
            &[1, 10],
        ),
        (
            &["GEORADIUS", "k", "0", "0", "1", "km", "STOREDIST", "d"],
            &[1, 7],
        ),
        (
            &["GEORADIUS", "k", "0", "0", "1", "km", "COUNT", "store"],
            &[1],
        ),
        (
            &["GEORADIUSBYMEMBER", "k", "m", "1", "km", "STORE", "d"],
            &[1, 6],
        ),
    ];
    for (words, want) in cases {
        assert_eq!(keys_of(words), *want, "{words:?}");
    }
    let patterns: &[(&[&str], &[usize])] = &[
        (&["SORT", "k"], &[]),
        (
            &["SORT", "k", "BY", "w_*", "GET", "#", "GET", "h_*->f"],
            &[3, 5, 7],
        ),
        (&["SORT", "k", "LIMIT", "0", "1", "GET", "x"], &[6]),
        (&["SORT", "k", "GET"], &[]),
    ];
    for (words, want) in patterns {
        assert_eq!(sort_patterns(&args(words)), *want, "{words:?}");
    }
}
