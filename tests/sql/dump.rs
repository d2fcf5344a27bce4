//! `DUMP` and `RESTORE` on SQL backends against a real `redis-server`: the payloads of values
//! whose Redis encoding depends only on the value are Redis's bytes; payloads Redis wrote
//! restore on SQLite and PostgreSQL, and payloads holdfast writes for larger values (the
//! plain encodings, several list nodes) restore on Redis to the same contents.

use super::differential::{same_as_redis, Cmd};
use holdfast::backend::rdb::{dump, DumpValue};

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
