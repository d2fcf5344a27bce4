//! `DUMP` and `RESTORE` on SQL backends against a real `redis-server`: the payloads of values
//! whose Redis encoding depends only on the value are Redis's bytes; payloads Redis wrote
//! restore on SQLite and PostgreSQL, and payloads holdfast writes for larger values (the
//! plain encodings, several list nodes) restore on Redis to the same contents. Streams: an
//! appended stream's payload is Redis's; one with consumer groups (whose times differ by
//! backend) is carried through `DUMP` and `RESTORE` in a script on each backend and
//! compared by `XINFO STREAM FULL`, and Redis's payload and holdfast's cross over.

use super::differential::{same_as_redis, Cmd};
use holdfast::backend::rdb::{dump, DumpGroup, DumpStream, DumpValue, StreamId};

fn c(args: &[&[u8]]) -> Cmd {
    args.iter().map(|a| a.to_vec()).collect()
}

/// `DUMP` payloads Redis 7.0 wrote: `HSET h f 1`, `RPUSH l a 1 b`, `ZADD z 1 a 2.5 b`.
const REDIS_HASH: &[u8] =
    b"\x10\x0c\x0c\x00\x00\x00\x02\x00\x81f\x02\x01\x01\xff\n\x001\xba\x08\x19I\xa0\xe3\xdd";
const REDIS_LIST: &[u8] = b"\x12\x01\x02\x0f\x0f\x00\x00\x00\x03\x00\x81a\x02\x01\x01\x81b\x02\xff\n\x00\x90C\xa3L\xeb\x8e\x1b\x1c";
const REDIS_ZSET: &[u8] = b"\x11\x14\x14\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x832.5\x04\xff\n\x00\xd4Ln\xa4\xf6D\xd9\xd7";

fn words(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{tag}-{i}").into_bytes()).collect()
}

fn fixed() -> Vec<Cmd> {
    let long = b"holdfast holdfast holdfast holdfast holdfast holdfast holdfast".as_slice();
    let mut cases = vec![
        // Values whose payload is Redis's exactly.
        c(&[b"SET", b"s:int", b"12"]),
        c(&[b"SET", b"s:neg", b"-129"]),
        c(&[b"SET", b"s:big", b"4294967296"]),
        c(&[b"SET", b"s:text", b"hello"]),
        c(&[b"SET", b"s:long", long]),
        c(&[b"SET", b"s:noise", b"q8#Lz!0pW@v4^Rk2&Yx7*Nc1(Tb5)Hm3"]),
        c(&[
            b"RPUSH",
            b"l",
            b"a",
            b"1",
            b"b",
            b"-70000",
            b"9223372036854775807",
        ]),
        c(&[b"SADD", b"si", b"3", b"1", b"2", b"-40000"]),
        c(&[b"HSET", b"h", b"f", b"1", b"g", b"hello", b"n", b"-5000"]),
        c(&[
            b"ZADD", b"z", b"1", b"a", b"2.5", b"b", b"-3", b"c", b"1e100", b"d",
        ]),
    ];
    for key in [
        "s:int", "s:neg", "s:big", "s:text", "s:long", "s:noise", "l", "si", "h", "z",
    ] {
        cases.push(c(&[b"DUMP", key.as_bytes()]));
    }
    cases.extend([
        c(&[b"DUMP", b"missing"]),
        // Redis's payloads restore, with their contents.
        c(&[b"RESTORE", b"r:h", b"0", REDIS_HASH]),
        c(&[b"HGETALL", b"r:h"]),
        c(&[b"RESTORE", b"r:l", b"0", REDIS_LIST]),
        c(&[b"LRANGE", b"r:l", b"0", b"-1"]),
        c(&[b"RESTORE", b"r:z", b"0", REDIS_ZSET, b"ABSTTL"]),
        c(&[b"ZRANGE", b"r:z", b"0", b"-1", b"WITHSCORES"]),
        c(&[b"TTL", b"r:z"]),
        // An existing key, REPLACE, an expiry, options, and what is refused.
        c(&[b"RESTORE", b"r:h", b"0", REDIS_LIST]),
        c(&[
            b"RESTORE",
            b"r:h",
            b"0",
            REDIS_LIST,
            b"REPLACE",
            b"IDLETIME",
            b"10",
        ]),
        c(&[b"TYPE", b"r:h"]),
        c(&[
            b"RESTORE",
            b"r:t",
            b"4102444800000",
            REDIS_HASH,
            b"ABSTTL",
            b"FREQ",
            b"5",
        ]),
        c(&[b"PEXPIRETIME", b"r:t"]),
        c(&[b"RESTORE", b"r:past", b"1000", REDIS_HASH, b"ABSTTL"]),
        c(&[b"EXISTS", b"r:past"]),
        c(&[b"RESTORE", b"r:bad", b"-1", REDIS_HASH]),
        c(&[b"RESTORE", b"r:bad", b"0", b"not a payload"]),
        c(&[
            b"RESTORE",
            b"r:bad",
            b"0",
            &REDIS_HASH[..REDIS_HASH.len() - 1],
        ]),
        c(&[b"RESTORE", b"r:bad", b"0", REDIS_HASH, b"FREQ", b"300"]),
        c(&[b"RESTORE", b"r:bad", b"0", REDIS_HASH, b"WHAT"]),
        c(&[b"EXISTS", b"r:bad"]),
    ]);
    // holdfast's payloads of values Redis keeps in its plain encodings, or in several list
    // nodes: Redis restores them to the same contents as holdfast does.
    let set = dump(&DumpValue::Set(words(600, "m")));
    let ints = dump(&DumpValue::Set(
        (0..700).map(|i| (i * 3).to_string().into_bytes()).collect(),
    ));
    let hash = dump(&DumpValue::Hash(
        words(200, "f").into_iter().zip(words(200, "v")).collect(),
    ));
    let wide = dump(&DumpValue::Hash(vec![(b"f".to_vec(), vec![b'x'; 100])]));
    let zset = dump(&DumpValue::Zset(
        words(300, "z")
            .into_iter()
            .enumerate()
            .map(|(i, m)| (m, i as f64 / 7.0))
            .collect(),
    ));
    let list = dump(&DumpValue::List(words(3000, "item")));
    cases.extend([
        c(&[b"RESTORE", b"b:set", b"0", &set]),
        c(&[b"SCARD", b"b:set"]),
        c(&[b"SORT", b"b:set", b"ALPHA", b"LIMIT", b"590", b"10"]),
        c(&[b"RESTORE", b"b:ints", b"0", &ints]),
        c(&[b"SCARD", b"b:ints"]),
        c(&[b"SISMEMBER", b"b:ints", b"2097"]),
        c(&[b"RESTORE", b"b:hash", b"0", &hash]),
        c(&[b"HLEN", b"b:hash"]),
        c(&[b"HMGET", b"b:hash", b"f-0", b"f-199", b"f-200"]),
        c(&[b"RESTORE", b"b:wide", b"0", &wide]),
        c(&[b"HGETALL", b"b:wide"]),
        c(&[b"RESTORE", b"b:zset", b"0", &zset]),
        c(&[b"ZRANGE", b"b:zset", b"290", b"-1", b"WITHSCORES"]),
        c(&[b"RESTORE", b"b:list", b"0", &list]),
        c(&[b"LLEN", b"b:list"]),
        c(&[b"LRANGE", b"b:list", b"1500", b"1504"]),
        c(&[b"LINDEX", b"b:list", b"-1"]),
    ]);
    cases
}

#[test]
fn dump_and_restore_answer_as_redis_does_on_sqlite_and_postgres() {
    same_as_redis(&fixed());
}

/// A stream with two consumer groups on Redis 7.0.15 (`XADD s 1-1 f v n 1`, `XADD s 1-2 f w
/// n 2`, `XADD s 2-0 other x`; g1 from 0, alice reading two entries and bob one, carol
/// created; g2 from `$`), then `DUMP s`.
const REDIS_STREAM: &[u8] = b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01@DD\x00\x00\x00\x19\x00\x03\x01\x00\x01\x02\x01\x81f\x02\x81n\x02\x00\x01\x02\x01\x00\x01\x00\x01\x81v\x02\x01\x01\x05\x01\x02\x01\x00\x01\x01\x01\x81w\x02\x02\x01\x05\x01\x00\x01\x01\x01\xdf\xff\x02\x01\x01\x85other\x06\x81x\x02\x06\x01\xff\x03\x02\x00\x01\x01\x00\x00\x03\x02\x02g1\x02\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x03\x05alice\xfa\xb8\x1eH\xa2\x01\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x03bob\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x05carol\xfa\xb8\x1eH\xa2\x01\x00\x00\x00\x02g2\x02\x00\x81\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x0a\x00\x86\xbd\xc6\xa8%\xbe\xb0\x1b";

/// Copies `from` to `to` inside one script: `DUMP` then `RESTORE`, on whichever backend.
fn carry(from: &str, to: &str) -> Cmd {
    c(&[
        b"EVAL",
        b"return redis.call('RESTORE', KEYS[2], 0, redis.call('DUMP', KEYS[1]))",
        b"2",
        from.as_bytes(),
        to.as_bytes(),
    ])
}

fn xadd(key: &str, id: &str, pairs: &[&[u8]]) -> Cmd {
    let mut cmd = c(&[b"XADD", key.as_bytes(), id.as_bytes()]);
    cmd.extend(pairs.iter().map(|p| p.to_vec()));
    cmd
}

fn stream_cases() -> Vec<Cmd> {
    let mut cases = vec![
        xadd("st", "1-1", &[b"f", b"v", b"n", b"1"]),
        xadd("st", "1-2", &[b"f", b"w", b"n", b"2"]),
        xadd("st", "2-0", &[b"other", b"x"]),
        xadd(
            "st",
            "2-1",
            &[b"f", b"-70000", b"n", b"9223372036854775807"],
        ),
    ];
    // Enough entries for several listpacks, by count and by size, and a moved last id.
    for i in 0..230 {
        cases.push(xadd(
            "many",
            &format!("{}-{}", 5 + i / 7, i % 7),
            &[b"k", b"v", b"i", format!("{i}").as_bytes()],
        ));
    }
    let wide = vec![b'x'; 1500];
    for i in 0..9 {
        cases.push(xadd("wide", &format!("7-{i}"), &[b"f", &wide]));
    }
    cases.extend([
        c(&[b"XSETID", b"wide", b"9-9"]),
        c(&[b"XGROUP", b"CREATE", b"empty", b"g", b"$", b"MKSTREAM"]),
        c(&[
            b"XGROUP",
            b"CREATE",
            b"empty",
            b"h",
            b"0",
            b"ENTRIESREAD",
            b"0",
        ]),
    ]);
    for key in ["st", "many", "wide", "empty"] {
        cases.push(c(&[b"DUMP", key.as_bytes()]));
    }
    // Groups, pending entries, consumers and counters, carried on each backend.
    cases.extend([
        c(&[b"XGROUP", b"CREATE", b"st", b"g1", b"0"]),
        c(&[b"XGROUP", b"CREATE", b"st", b"g2", b"$"]),
        c(&[
            b"XREADGROUP",
            b"GROUP",
            b"g1",
            b"alice",
            b"COUNT",
            b"2",
            b"STREAMS",
            b"st",
            b">",
        ]),
        c(&[
            b"XREADGROUP",
            b"GROUP",
            b"g1",
            b"bob",
            b"COUNT",
            b"1",
            b"STREAMS",
            b"st",
            b">",
        ]),
        c(&[b"XGROUP", b"CREATECONSUMER", b"st", b"g1", b"carol"]),
        c(&[b"XDEL", b"st", b"2-1"]),
        carry("st", "st:copy"),
        c(&[b"XINFO", b"STREAM", b"st:copy", b"FULL"]),
        c(&[b"XPENDING", b"st:copy", b"g1", b"-", b"+", b"10"]),
        c(&[
            b"XREADGROUP",
            b"GROUP",
            b"g1",
            b"carol",
            b"STREAMS",
            b"st:copy",
            b"0",
        ]),
        c(&[b"XADD", b"st:copy", b"3-0", b"after", b"restore"]),
        c(&[b"XLEN", b"st:copy"]),
        carry("many", "many:copy"),
        c(&[b"XLEN", b"many:copy"]),
        c(&[b"XRANGE", b"many:copy", b"20-0", b"+", b"COUNT", b"5"]),
        carry("empty", "empty:copy"),
        c(&[b"XINFO", b"GROUPS", b"empty:copy"]),
        // Redis's payload on every backend.
        c(&[b"RESTORE", b"r:st", b"0", REDIS_STREAM]),
        c(&[b"XINFO", b"STREAM", b"r:st", b"FULL"]),
        c(&[b"XACK", b"r:st", b"g1", b"1-1"]),
        c(&[b"XPENDING", b"r:st", b"g1"]),
        c(&[b"DUMP", b"r:st"]),
    ]);
    // holdfast's payload of a larger stream with groups, on every backend: Redis reads it.
    let entries: Vec<(StreamId, Vec<Vec<u8>>)> = (0..400u64)
        .map(|i| {
            let pairs = if i % 50 == 0 {
                vec![b"odd".to_vec(), i.to_string().into_bytes()]
            } else {
                vec![
                    b"a".to_vec(),
                    b"1".to_vec(),
                    b"b".to_vec(),
                    i.to_string().into_bytes(),
                ]
            };
            ((1_000 + i / 3, i % 3), pairs)
        })
        .collect();
    let group = DumpGroup {
        name: b"workers".to_vec(),
        last: (1_050, 0),
        entries_read: 151,
        pending: vec![
            ((1_000, 1), b"w1".to_vec(), 1_796_000_000_000, 3),
            ((1_010, 2), b"w2".to_vec(), 1_796_000_000_500, 1),
        ],
        consumers: vec![
            (b"w1".to_vec(), 1_796_000_000_000),
            (b"w2".to_vec(), 1_796_000_000_500),
        ],
    };
    let ours = dump(&DumpValue::Stream(Box::new(DumpStream {
        last: entries.last().map_or((0, 0), |e| e.0),
        entries,
        max_deleted: (0, 0),
        added: 400,
        groups: vec![group],
    })));
    cases.extend([
        c(&[b"RESTORE", b"h:st", b"0", &ours]),
        c(&[b"XINFO", b"GROUPS", b"h:st"]),
        c(&[b"XINFO", b"CONSUMERS", b"h:st", b"workers"]),
        c(&[b"XLEN", b"h:st"]),
        c(&[b"XRANGE", b"h:st", b"1100", b"1101"]),
        c(&[b"XPENDING", b"h:st", b"workers", b"-", b"+", b"5", b"w2"]),
        c(&[b"DUMP", b"h:st"]),
    ]);
    cases
}

#[test]
fn streams_dump_and_restore_as_redis_s_do_on_sqlite_and_postgres() {
    same_as_redis(&stream_cases());
}
