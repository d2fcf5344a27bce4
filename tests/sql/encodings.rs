//! Commands Redis builds on its string and sorted-set encodings, on SQL backends against a
//! real `redis-server`: `BITFIELD` (integers at any bit offset of a string) and HyperLogLog
//! (`PFADD`, `PFCOUNT`, `PFMERGE`: the bytes `GET` shows after every step), in fixed cases
//! (every subcommand, overflow rule and error) and generated ones.

use super::differential::{generated_same_as_redis, same_as_redis, Cmd};
use proptest::prelude::*;

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
    same_as_redis(&fixed_bitfields());
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
    let strategy = prop::collection::vec(prop::collection::vec(op(), 1..6), 1..12);
    generated_same_as_redis(48, strategy, |commands| {
        let mut cmds: Vec<Cmd> = commands
            .into_iter()
            .map(|ops| {
                let mut cmd = vec![b"BITFIELD".to_vec(), b"f".to_vec()];
                cmd.extend(ops.into_iter().flatten().map(String::into_bytes));
                cmd
            })
            .collect();
        cmds.push(c(&["GET", "f"]));
        (cmds, false)
    });
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
    same_as_redis(&fixed_hyperloglogs());
}

#[test]
fn generated_hyperloglogs_answer_as_redis_does() {
    let step = prop_oneof![
        4 => (0usize..3, 0usize..5000, 1usize..400).prop_map(|(k, from, n)| pfadd(&format!("p{k}"), "m", from, n)),
        1 => (0usize..3).prop_map(|k| c(&["PFCOUNT", &format!("p{k}")])),
        1 => Just(c(&["PFCOUNT", "p0", "p1", "p2"])),
        1 => (0usize..3).prop_map(|k| c(&["PFMERGE", &format!("p{k}"), "p0", "p1", "p2"])),
        1 => (0usize..3).prop_map(|k| c(&["GET", &format!("p{k}")])),
    ];
    generated_same_as_redis(24, prop::collection::vec(step, 1..30), |mut cmds| {
        cmds.extend((0..3).map(|k| c(&["GET", &format!("p{k}")])));
        (cmds, false)
    });
}

/// GEO: Redis's own examples (Palermo, Catania), every option of every command, and the
/// refusals, answered as Redis answers them (coordinates as its human long doubles,
/// distances to four decimals).
fn fixed_geo() -> Vec<Cmd> {
    vec![
        c(&[
            "GEOADD",
            "Sicily",
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
        ]),
        c(&["GEODIST", "Sicily", "Palermo", "Catania"]),
        c(&["GEODIST", "Sicily", "Palermo", "Catania", "km"]),
        c(&["GEODIST", "Sicily", "Palermo", "Catania", "MI"]),
        c(&["GEODIST", "Sicily", "Palermo", "Catania", "ft"]),
        c(&["GEODIST", "Sicily", "Palermo", "Nowhere"]),
        c(&["GEODIST", "missing", "a", "b"]),
        c(&["GEODIST", "Sicily", "Palermo", "Catania", "parsecs"]),
        c(&["GEODIST", "Sicily", "Palermo", "Catania", "km", "extra"]),
        c(&["GEOPOS", "Sicily", "Palermo", "Catania", "NonExisting"]),
        c(&["GEOPOS", "missing", "a"]),
        c(&["GEOHASH", "Sicily", "Palermo", "Catania", "NonExisting"]),
        c(&["GEOHASH", "missing", "a"]),
        c(&["ZSCORE", "Sicily", "Palermo"]),
        c(&["GEOADD", "Sicily", "13.583333", "37.316667", "Agrigento"]),
        c(&[
            "GEOADD",
            "Sicily",
            "NX",
            "13.5",
            "37.3",
            "Agrigento",
            "12.758489",
            "38.788135",
            "edge1",
        ]),
        c(&[
            "GEOADD",
            "Sicily",
            "XX",
            "CH",
            "13.5",
            "37.3",
            "Agrigento",
            "1",
            "1",
            "new",
        ]),
        c(&["GEOADD", "Sicily", "NX", "XX", "1", "1", "x"]),
        c(&["GEOADD", "Sicily", "1", "1"]),
        c(&["GEOADD", "Sicily", "200", "100", "bad"]),
        c(&["GEOADD", "Sicily", "x", "1", "bad"]),
        c(&["GEOADD", "Sicily", "1", "86", "bad"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHCOORD"]),
        c(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "WITHDIST",
            "WITHCOORD",
            "WITHHASH",
        ]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "ASC"]),
        c(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "DESC",
            "COUNT",
            "2",
        ]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "1"]),
        c(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "COUNT",
            "1",
            "ANY",
        ]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "ANY"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "COUNT", "0"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "-1", "km"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "x", "km"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "lightyears"]),
        c(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "BOGUS"]),
        c(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "near",
        ]),
        c(&["ZRANGE", "near", "0", "-1", "WITHSCORES"]),
        c(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STOREDIST",
            "neardist",
        ]),
        c(&["ZRANGE", "neardist", "0", "-1", "WITHSCORES"]),
        c(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "near",
            "WITHDIST",
        ]),
        c(&["GEORADIUS", "Sicily", "15", "37", "1", "m", "STORE", "near"]),
        c(&["EXISTS", "near"]),
        c(&["GEORADIUS", "missing", "15", "37", "200", "km"]),
        c(&[
            "GEORADIUS",
            "missing",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "neardist",
        ]),
        c(&["EXISTS", "neardist"]),
        c(&[
            "GEORADIUS_RO",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "WITHDIST",
            "ASC",
        ]),
        c(&[
            "GEORADIUS_RO",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "x",
        ]),
        c(&["GEORADIUSBYMEMBER", "Sicily", "Agrigento", "100", "km"]),
        c(&[
            "GEORADIUSBYMEMBER",
            "Sicily",
            "Agrigento",
            "100",
            "km",
            "WITHDIST",
            "ASC",
        ]),
        c(&["GEORADIUSBYMEMBER", "Sicily", "Nowhere", "100", "km"]),
        c(&["GEORADIUSBYMEMBER", "missing", "Nowhere", "100", "km"]),
        c(&[
            "GEORADIUSBYMEMBER_RO",
            "Sicily",
            "Palermo",
            "300",
            "km",
            "COUNT",
            "2",
            "DESC",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "200",
            "km",
            "ASC",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "400",
            "400",
            "km",
            "ASC",
            "WITHCOORD",
            "WITHDIST",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMMEMBER",
            "Palermo",
            "BYBOX",
            "400",
            "400",
            "km",
            "DESC",
            "WITHHASH",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMMEMBER",
            "Nowhere",
            "BYRADIUS",
            "4",
            "km",
        ]),
        c(&[
            "GEOSEARCH",
            "missing",
            "FROMMEMBER",
            "Nowhere",
            "BYRADIUS",
            "4",
            "km",
        ]),
        c(&["GEOSEARCH", "Sicily", "BYRADIUS", "4", "km"]),
        c(&["GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37"]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "FROMMEMBER",
            "Palermo",
            "BYRADIUS",
            "4",
            "km",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "4",
            "km",
            "BYBOX",
            "1",
            "1",
            "km",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "-1",
            "1",
            "km",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "x",
            "1",
            "km",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "1",
            "y",
            "km",
        ]),
        c(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "200",
            "km",
            "STORE",
            "x",
        ]),
        c(&[
            "GEOSEARCHSTORE",
            "dest",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "400",
            "400",
            "km",
            "ASC",
            "COUNT",
            "3",
        ]),
        c(&["ZRANGE", "dest", "0", "-1", "WITHSCORES"]),
        c(&[
            "GEOSEARCHSTORE",
            "dest",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "400",
            "400",
            "km",
            "ASC",
            "COUNT",
            "3",
            "STOREDIST",
        ]),
        c(&["ZRANGE", "dest", "0", "-1", "WITHSCORES"]),
        c(&[
            "GEOSEARCHSTORE",
            "dest",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "1",
            "km",
            "WITHDIST",
        ]),
        c(&[
            "GEOSEARCHSTORE",
            "dest",
            "missing",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "1",
            "km",
        ]),
        c(&["EXISTS", "dest"]),
        c(&["SET", "str", "x"]),
        c(&["GEOADD", "str", "1", "1", "a"]),
        c(&["GEOPOS", "str", "a"]),
        c(&[
            "GEOSEARCH",
            "str",
            "FROMLONLAT",
            "1",
            "1",
            "BYRADIUS",
            "1",
            "km",
        ]),
        c(&["ZADD", "odd", "-1", "neg", "inf", "infinite", "3.7", "frac"]),
        c(&["GEOPOS", "odd", "neg", "infinite", "frac"]),
        c(&["GEOHASH", "odd", "neg", "infinite", "frac"]),
        c(&["GEODIST", "odd", "neg", "frac"]),
    ]
}

#[test]
fn geo_answers_as_redis_does_on_sqlite_and_postgres() {
    same_as_redis(&fixed_geo());
}

/// Random points (spread, and clustered around a few centres) and random searches of every
/// shape, unit, order and option.
#[test]
fn generated_geo_answers_as_redis_does() {
    let point = (-179.9f64..179.9, -85.0f64..85.0);
    let near = (0usize..3, -0.5f64..0.5, -0.5f64..0.5);
    let unit = prop::sample::select(vec!["m", "km", "ft", "mi"]);
    let search = (
        0usize..3,
        prop_oneof![
            (1.0f64..500_000.0).prop_map(|r| vec![format!("BYRADIUS"), format!("{r}")]),
            (1.0f64..500_000.0, 1.0f64..500_000.0).prop_map(|(w, h)| vec![
                "BYBOX".to_string(),
                format!("{w}"),
                format!("{h}")
            ])
        ],
        unit,
        prop::sample::select(vec!["", "ASC", "DESC"]),
        prop::sample::select(vec!["", "COUNT 3", "COUNT 5 ANY", "COUNT 1"]),
        any::<bool>(),
    );
    let strategy = (
        prop::collection::vec(point, 0..60),
        prop::collection::vec(near, 0..60),
        prop::collection::vec(search, 1..12),
        any::<bool>(),
    );
    let centres = [(13.36, 38.11), (-73.98, 40.75), (179.5, -20.0)];
    generated_same_as_redis(16, strategy, |(spread, clustered, searches, resp3)| {
        let mut cmds = Vec::new();
        let mut add = vec!["GEOADD".to_string(), "g".to_string()];
        for (i, (lon, lat)) in spread.iter().enumerate() {
            add.extend([format!("{lon}"), format!("{lat}"), format!("s{i}")]);
        }
        for (i, (c, dx, dy)) in clustered.iter().enumerate() {
            let (lon, lat) = centres[*c];
            add.extend([
                format!("{}", lon + dx),
                format!("{}", lat + dy),
                format!("c{i}"),
            ]);
        }
        if add.len() > 2 {
            cmds.push(add.iter().map(|a| a.as_bytes().to_vec()).collect());
        }
        for (c, shape, unit, order, count, with) in searches {
            let (lon, lat) = centres[c];
            let mut s = vec![
                "GEOSEARCH".to_string(),
                "g".to_string(),
                "FROMLONLAT".to_string(),
                format!("{lon}"),
                format!("{lat}"),
            ];
            s.extend(shape);
            s.push(unit.to_string());
            s.extend(order.split_whitespace().map(str::to_string));
            s.extend(count.split_whitespace().map(str::to_string));
            if with {
                s.extend(["WITHDIST", "WITHCOORD", "WITHHASH"].map(str::to_string));
            }
            cmds.push(s.iter().map(|a| a.as_bytes().to_vec()).collect());
        }
        (cmds, resp3)
    });
}

/// redis-py's own helpers for these commands on holdfast's SQL backends: `geoadd`,
/// `geosearch` (with distances and coordinates, parsed by redis-py), `geodist`, `geohash`,
/// `pfadd`/`pfcount`/`pfmerge` over 5,000 elements, and `bitfield` through its builder.
const CLIENT_PY: &str = r##"
import sys
import redis

r = redis.Redis.from_url("redis://" + sys.argv[1])
r.flushall()
r.geoadd("Sicily", [13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania"])
assert round(r.geodist("Sicily", "Palermo", "Catania", unit="km"), 1) == 166.3
assert r.geohash("Sicily", "Palermo") == ["sqc8b49rny0"]
near = r.geosearch("Sicily", longitude=15, latitude=37, radius=200, unit="km",
                   withdist=True, withcoord=True, sort="ASC")
assert [m[0] for m in near] == [b"Catania", b"Palermo"], near
assert abs(near[0][2][0] - 15.087269) < 1e-5
assert r.geosearchstore("near", "Sicily", longitude=15, latitude=37, radius=100, unit="km") == 1
assert r.pfadd("visits", *[f"user{i}" for i in range(5000)]) == 1
assert r.pfadd("visits", "user1") == 0
assert abs(r.pfcount("visits") - 5000) < 100
r.pfadd("other", *[f"user{i}" for i in range(4000, 6000)])
r.pfmerge("all", "visits", "other")
assert abs(r.pfcount("all") - 6000) < 120
bf = r.bitfield("counters")
assert bf.incrby("u8", "#0", 250).incrby("u8", "#0", 10).execute() == [250, 4]
bf = r.bitfield("counters", default_overflow="SAT")
assert bf.incrby("u8", "#1", 300).get("u8", "#1").execute() == [255, 255]
assert r.bitfield_ro("counters", "u8", 0, items=[("u8", 8)]) == [4, 255]
print("ok", flush=True)
"##;

async fn redis_py_exercises(addr: &str) {
    let py = crate::support::redis_py("encodings.py", CLIENT_PY, &[addr]);
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        py.child.wait_with_output(),
    )
    .await
    .expect("redis-py ends")
    .expect("python3 ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_py_uses_geo_hyperloglog_and_bitfield_on_sqlite_and_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = crate::support::Proxy::start(&crate::support::sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("holdfast.db").display()
    )))
    .await;
    redis_py_exercises(&sqlite.addr).await;
    let pg = crate::support::PgServer::start();
    let postgres = crate::support::Proxy::start(&crate::support::sql_namespace(&format!(
        "kind = \"postgres\"\nurl = \"{}\"",
        pg.url()
    )))
    .await;
    redis_py_exercises(&postgres.addr).await;
}
