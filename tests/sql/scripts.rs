//! Scripts on SQL backends against the real thing: `EVAL` and its kin sent to a real
//! `redis-server` and to holdfast on SQLite and on PostgreSQL get byte-identical replies, in
//! RESP2 and RESP3 — conversions both ways, errors and where they were raised, `pcall`, the
//! sandbox's refusals, shebang flags, the script cache — in fixed cases and in generated
//! ones (every command of the differential test's families, called from a script). Then
//! what only holdfast promises: a script is atomic against other clients and other
//! holdfasts, is stopped at its limit with nothing applied, and real libraries built on
//! scripts work unchanged.

use super::differential::{
    assert_none, differences, differences_as, generated_same_as_redis, pipelined_differences,
    runtime, same_as_redis, sequence, show, Cmd, Targets,
};
use crate::support::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, TestCaseError, TestRunner};

/// `EVAL script numkeys keys... args...`.
fn ev(script: &str, keys: &[&str], args: &[&str]) -> Cmd {
    let mut c = vec![
        b"EVAL".to_vec(),
        script.as_bytes().to_vec(),
        keys.len().to_string().into_bytes(),
    ];
    c.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
    c.extend(args.iter().map(|a| a.as_bytes().to_vec()));
    c
}

fn c(args: &[&str]) -> Cmd {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// Every behaviour of Redis's pages on `EVAL`, the Lua API and scripting that a SQL backend
/// serves, each a case; what is refused instead is in docs/sql.md ("Scripts on SQL").
fn fixed_scripts() -> Vec<Cmd> {
    let sha = |s: &str| {
        let mut h = sha1_smol::Sha1::new();
        h.update(s.as_bytes());
        h.digest().to_string()
    };
    let loaded = "return {KEYS[1], ARGV[1]}";
    let mut v = vec![
        // Conversions, Lua to RESP.
        ev("return 1", &[], &[]),
        ev("return 3.99", &[], &[]),
        ev("return -3.99", &[], &[]),
        ev("return 1e20", &[], &[]),
        ev("return 'x'", &[], &[]),
        ev("return ''", &[], &[]),
        ev("return true", &[], &[]),
        ev("return false", &[], &[]),
        ev("return nil", &[], &[]),
        ev("return {}", &[], &[]),
        ev("return {1, 2, 3, 'x', nil, 5}", &[], &[]),
        ev("return {1, {2, {3, 'deep'}}, false, true}", &[], &[]),
        ev("return {ok='fine'}", &[], &[]),
        ev("return {ok='two\\r\\nlines'}", &[], &[]),
        ev("return {err='My Error'}", &[], &[]),
        ev("return {err='ERR line\\nbreak'}", &[], &[]),
        ev("return {double=3.5}", &[], &[]),
        ev("return {double=0.1}", &[], &[]),
        ev("return {big_number='1234567890123456789012'}", &[], &[]),
        ev("return {map={a=1}}", &[], &[]),
        ev("return {set={a=true}}", &[], &[]),
        ev("return {verbatim_string={format='txt', string='hello'}}", &[], &[]),
        ev("return {a=1, b=2}", &[], &[]),
        ev("return {1, ok='x'}", &[], &[]),
        ev("redis.setresp(3); return true", &[], &[]),
        ev("redis.setresp(3); return false", &[], &[]),
        ev("redis.setresp(3); return nil", &[], &[]),
        ev("return redis.status_reply('PONG')", &[], &[]),
        ev("return redis.error_reply('My Error')", &[], &[]),
        ev("return redis.error_reply('-WRONGTYPE custom')", &[], &[]),
        ev("return redis.error_reply('boom')", &[], &[]),
        ev("return redis.error_reply(1)", &[], &[]),
        ev("return redis.status_reply()", &[], &[]),
        // KEYS and ARGV; numbers given to redis.call.
        ev("return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV}", &["a", "b"], &["x", "y"]),
        ev("redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])", &["k"], &["v1"]),
        ev("redis.call('set', 'n', 0.1); return redis.call('get', 'n')", &[], &[]),
        ev("redis.call('set', 'n', 42); return redis.call('incrby', 'n', 3.0)", &[], &[]),
        ev("redis.call('set', 'n', 1e20); return redis.call('get', 'n')", &[], &[]),
        // Conversions, RESP to Lua (and back).
        ev("redis.call('rpush', 'l', 'a', 'b'); return redis.call('lrange', 'l', 0, -1)", &[], &[]),
        ev("return redis.call('get', 'missing')", &[], &[]),
        ev("return type(redis.call('get', 'missing'))", &[], &[]),
        ev("return redis.call('set', 'k', 'v')", &[], &[]),
        ev("return type(redis.call('set', 'k', 'v'))", &[], &[]),
        ev("return redis.call('set', 'k', 'v').ok", &[], &[]),
        ev("redis.call('hset', 'h', 'f', 'v', 'g', 'w'); return redis.call('hgetall', 'h')", &[], &[]),
        ev("redis.setresp(3); redis.call('hset', 'h', 'f', 'v'); return redis.call('hgetall', 'h')", &[], &[]),
        ev("redis.setresp(3); return type(redis.call('hgetall', 'h').map)", &[], &[]),
        ev("redis.setresp(3); return redis.call('get', 'missing')", &[], &[]),
        ev("redis.setresp(3); return type(redis.call('get', 'missing'))", &[], &[]),
        ev("redis.call('zadd', 'z', 1.5, 'm'); return redis.call('zscore', 'z', 'm')", &[], &[]),
        ev("redis.setresp(3); redis.call('zadd', 'z', 1.5, 'm'); return redis.call('zscore', 'z', 'm')", &[], &[]),
        ev("redis.setresp(3); return redis.call('zscore', 'z', 'm').double", &[], &[]),
        ev("redis.call('sadd', 's', 'one'); redis.setresp(3); return redis.call('smembers', 's')", &[], &[]),
        ev("redis.setresp(3); return redis.call('exists', 'k')", &[], &[]),
        ev("return redis.call('exists', 'k', 'missing')", &[], &[]),
        // Errors: from redis.call, from Lua, where.
        ev("redis.call('set', 'str', 'x'); return redis.call('incr', 'str')", &[], &[]),
        ev("redis.call('set', 'str', 'x')\nlocal a = 1\nreturn redis.call('incr', 'str')", &[], &[]),
        ev("return redis.pcall('incr', 'str')", &[], &[]),
        ev("local r = redis.pcall('incr', 'str'); return type(r)", &[], &[]),
        ev("local r = redis.pcall('incr', 'str'); return r.err", &[], &[]),
        ev("return redis.call('lpush', 'str', 'x')", &[], &[]),
        ev("return redis.call('nosuchcommand')", &[], &[]),
        ev("return redis.call('set', 'onlykey')", &[], &[]),
        ev("return redis.call()", &[], &[]),
        ev("return redis.pcall()", &[], &[]),
        ev("return redis.call('set', 'k', {})", &[], &[]),
        ev("return redis.pcall('set', 'k', nil)", &[], &[]),
        ev("error('boom')", &[], &[]),
        ev("error({err='TABLE err'})", &[], &[]),
        ev("error()", &[], &[]),
        ev("error(42)", &[], &[]),
        ev("local t = nil; return t.x", &[], &[]),
        ev("return 'x' .. nil", &[], &[]),
        ev("\n\nerror('on line three')", &[], &[]),
        ev("return {pcall(function() redis.call('incr', 'str') end)}", &[], &[]),
        ev("return {pcall(function() error('e') end)}", &[], &[]),
        ev("return {pcall(function() error({err='T e'}) end)}", &[], &[]),
        ev("return {pcall(error)}", &[], &[]),
        ev("return {xpcall(function() error('x') end, function(e) return 'handled ' .. tostring(e) end)}", &[], &[]),
        ev("return (", &[], &[]),
        ev("return 1 +", &[], &[]),
        // The sandbox.
        ev("return x", &[], &[]),
        ev("x = 1", &[], &[]),
        ev("_G.x = 1", &[], &[]),
        ev("rawset(_G, 'x', 1)", &[], &[]),
        ev("redis.call = nil", &[], &[]),
        ev("string.len = nil", &[], &[]),
        ev("math.x = 1", &[], &[]),
        ev("setmetatable(_G, {})", &[], &[]),
        ev("return os", &[], &[]),
        ev("return io", &[], &[]),
        ev("return loadfile", &[], &[]),
        ev("return dofile", &[], &[]),
        ev("return print", &[], &[]),
        ev("return require", &[], &[]),
        ev("return debug", &[], &[]),
        ev("return package", &[], &[]),
        ev("return module", &[], &[]),
        ev("return type(loadstring)", &[], &[]),
        ev("return loadstring('return 7')()", &[], &[]),
        ev("return type(_G)", &[], &[]),
        ev("return _VERSION", &[], &[]),
        ev("local x = 5; return x * 2", &[], &[]),
        ev("return string.format('%d-%s', 7, 'x')", &[], &[]),
        ev("return ('abc'):upper()", &[], &[]),
        ev("return table.concat({1, 2, 3}, ',')", &[], &[]),
        ev("local t = {3, 1, 2}; table.sort(t); return t", &[], &[]),
        ev("return math.floor(3.7)", &[], &[]),
        ev("return tostring(1/0)", &[], &[]),
        ev("return tostring(0.1)", &[], &[]),
        ev("return tonumber('0x10')", &[], &[]),
        ev("return select('#', 1, 2, 3)", &[], &[]),
        ev("return {unpack({1, 2, 3})}", &[], &[]),
        ev("local co = coroutine.create(function(a) coroutine.yield(a + 1); return 'done' end); local _, x = coroutine.resume(co, 1); local _, y = coroutine.resume(co); return {x, y}", &[], &[]),
        // The libraries Redis ships: cjson, cmsgpack, bit, struct.
        ev("return cjson.encode({1, 2, 'three', {a=1}, true, false})", &[], &[]),
        ev("return cjson.encode({name='x', list={1.5, -2, 1e300}, empty={}, slash='a/b'})", &[], &[]),
        ev("return cjson.encode(cjson.decode('{\"a\":[1,2,{\"b\":null}],\"c\":\"\\u00e9\"}'))", &[], &[]),
        ev("local t = cjson.decode('[1,2,3]'); return {#t, t[1] + t[3]}", &[], &[]),
        ev("return cjson.decode('{\"x\": 0.1}').x * 10", &[], &[]),
        ev("return cjson.decode('bad')", &[], &[]),
        ev("return {pcall(cjson.decode, '[1,')}", &[], &[]),
        ev("return cjson.encode(function() end)", &[], &[]),
        ev("return cjson.encode({[1]=1, [3]=3})", &[], &[]),
        ev("return cjson.encode({[1]=1, [100]=3})", &[], &[]),
        ev("return tostring(cjson.decode('null') == cjson.null)", &[], &[]),
        ev("cjson.encode = nil", &[], &[]),
        ev("return cmsgpack.unpack(cmsgpack.pack({1, 2, 'x', {a=true}}))", &[], &[]),
        ev("return cmsgpack.pack(1, -1, 127, 128, 65536, 2^32, -2^31, 1.5, 'abc', {}, {1}, {k='v'})", &[], &[]),
        ev("return {cmsgpack.unpack(cmsgpack.pack(1, 'two', 3.5))}", &[], &[]),
        ev("return cmsgpack.unpack('\\xc1')", &[], &[]),
        ev("cmsgpack.pack = nil", &[], &[]),
        ev("return {bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1), bit.lshift(1, 10), bit.rshift(-1, 28), bit.arshift(-16, 2), bit.tohex(255), bit.tohex(-1, -4), bit.bnot(0), bit.tobit(2^32 + 5), bit.bswap(0x12345678), bit.rol(1, 33), bit.ror(1, 1)}", &[], &[]),
        ev("return bit.tohex()", &[], &[]),
        ev("bit.band = nil", &[], &[]),
        ev("return struct.pack('>i2<I4s', 258, 1, 'hi')", &[], &[]),
        ev("return {struct.unpack('>i2<I4', struct.pack('>i2<I4', -2, 70000))}", &[], &[]),
        ev("return {struct.size('i4d'), struct.size('!8bd')}", &[], &[]),
        ev("return struct.pack('q', 1)", &[], &[]),
        ev("struct.pack = nil", &[], &[]),
        // The redis API.
        ev("return redis.sha1hex('')", &[], &[]),
        ev("return redis.sha1hex('Pizza & Mandolino')", &[], &[]),
        ev("return redis.sha1hex()", &[], &[]),
        ev("redis.log(redis.LOG_WARNING, 'from a script'); return 1", &[], &[]),
        ev("redis.log(redis.LOG_DEBUG)", &[], &[]),
        ev("redis.log('x', 'y')", &[], &[]),
        ev("redis.log(9, 'y')", &[], &[]),
        ev("return redis.replicate_commands()", &[], &[]),
        ev("redis.set_repl(redis.REPL_ALL); return 1", &[], &[]),
        ev("redis.set_repl(99)", &[], &[]),
        ev("redis.set_repl()", &[], &[]),
        ev("redis.setresp(4)", &[], &[]),
        ev("redis.setresp()", &[], &[]),
        ev("return {redis.REPL_NONE, redis.REPL_AOF, redis.REPL_REPLICA, redis.REPL_SLAVE, redis.REPL_ALL}", &[], &[]),
        ev("return {redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING}", &[], &[]),
        ev("return redis.breakpoint()", &[], &[]),
        ev("return redis.debug('x')", &[], &[]),
        ev("return redis.acl_check_cmd('set', 'k', 'v')", &[], &[]),
        ev("return redis.acl_check_cmd('nosuch')", &[], &[]),
        // Commands no script may run.
        ev("return redis.call('blpop', 'l', 0)", &[], &[]),
        ev("return redis.pcall('multi')", &[], &[]),
        ev("return redis.pcall('eval', 'return 1', 0)", &[], &[]),
        ev("return redis.pcall('watch', 'k')", &[], &[]),
        ev("return redis.pcall('subscribe', 'c')", &[], &[]),
        ev("return redis.pcall('script', 'load', 'return 1')", &[], &[]),
        // Shebang flags.
        ev("#!lua\nreturn 1", &[], &[]),
        ev("#!lua flags=no-writes\nreturn redis.call('get', 'k')", &[], &[]),
        ev("#!lua flags=no-writes\nreturn redis.call('set', 'k', 'v')", &[], &[]),
        ev("#!lua flags=no-writes,allow-oom,allow-stale,no-cluster,allow-cross-slot-keys\nreturn 2", &[], &[]),
        ev("#!lua flags=bogus\nreturn 1", &[], &[]),
        ev("#!lua name=x\nreturn 1", &[], &[]),
        ev("#!python\nreturn 1", &[], &[]),
        ev("#!lua", &[], &[]),
        ev("#!lua\nerror('line 2')", &[], &[]),
        c(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"]),
        c(&["EVAL_RO", "return redis.call('set', KEYS[1], 'v')", "1", "k"]),
        c(&["EVAL_RO", "#!lua\nreturn 1", "0"]),
        c(&["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"]),
        // Arguments.
        c(&["EVAL", "return 1", "-1"]),
        c(&["EVAL", "return 1", "2", "onlyone"]),
        c(&["EVAL", "return 1", "x"]),
        c(&["EVAL", "return 1"]),
        // The script cache.
        c(&["SCRIPT", "LOAD", loaded]),
        c(&["EVALSHA", &sha(loaded), "1", "key", "arg"]),
        c(&["EVALSHA", &sha(loaded).to_uppercase(), "1", "key", "arg"]),
        c(&["EVALSHA_RO", &sha(loaded), "1", "key", "arg"]),
        c(&["EVALSHA", "ffd632c7d33e571e9f24556ebed26c3479a87130", "0"]),
        c(&["EVALSHA", "short", "0"]),
        c(&["SCRIPT", "EXISTS", &sha(loaded), "ffd632c7d33e571e9f24556ebed26c3479a87130"]),
        c(&["SCRIPT", "LOAD", "return ("]),
        c(&["SCRIPT", "LOAD", "#!lua flags=bogus\nreturn 1"]),
        ev("return 'cached by eval'", &[], &[]),
        c(&["EVALSHA", &sha("return 'cached by eval'"), "0"]),
        c(&["SCRIPT", "EXISTS", &sha("return (")]),
        c(&["SCRIPT", "FLUSH", "BOGUS"]),
        c(&["SCRIPT", "FLUSH"]),
        c(&["SCRIPT", "EXISTS", &sha(loaded)]),
        c(&["EVALSHA", &sha(loaded), "1", "key", "arg"]),
        c(&["SCRIPT", "KILL"]),
        // A script raising after a write keeps the write.
        ev("redis.call('set', 'kept', '1'); error('after the write')", &[], &[]),
        c(&["GET", "kept"]),
        ev("redis.call('set', 'kept2', '1'); return redis.call('incr', 'str')", &[], &[]),
        c(&["GET", "kept2"]),
    ];
    v.push(c(&["DBSIZE"]));
    v
}

#[test]
fn fixed_scripts_answer_as_redis_does_on_sqlite_and_postgres() {
    let rt = runtime();
    rt.block_on(async {
        let t = Targets::start().await;
        let script = fixed_scripts();
        let mut all = differences(&t, false, &script).await;
        all.extend(differences(&t, true, &script).await);
        all.extend(pipelined_differences(&t, false, 8, &script).await);
        assert_none(&all);
    });
}

/// The differential test's generated commands, each called from a script: every reply
/// kind converted into Lua and back, RESP2 (`redis.call`'s default) or RESP3
/// (`redis.setresp(3)`), and every error as `pcall` returns it.
#[test]
fn generated_commands_called_from_scripts_answer_as_redis_does() {
    let rt = runtime();
    let targets = rt.block_on(Targets::start());
    let cases = std::env::var("HF_SQL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let mut runner = TestRunner::new(PropConfig {
        cases,
        failure_persistence: None,
        ..PropConfig::default()
    });
    let strategy = (sequence(), any::<bool>(), any::<bool>());
    let result = runner.run(&strategy, |(cmds, resp3, script_resp3)| {
        let wrap = if script_resp3 {
            "redis.setresp(3); return redis.pcall(unpack(ARGV))"
        } else {
            "return redis.pcall(unpack(ARGV))"
        };
        let wrapped: Vec<Cmd> = cmds
            .iter()
            .map(|inner| {
                let mut w = vec![b"EVAL".to_vec(), wrap.as_bytes().to_vec(), b"0".to_vec()];
                w.extend(inner.iter().cloned());
                w
            })
            .collect();
        let diffs = rt.block_on(differences_as(&targets, resp3, 1, &wrapped, &cmds));
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

/// Lua values of every shape, returned by a script: numbers (integers, fractions,
/// negatives, huge), strings, booleans, nil holes, nested tables and the reply tables.
fn lua_value(depth: u32) -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        (-1_000_000i64..1_000_000).prop_map(|n| n.to_string()),
        (-1e6f64..1e6).prop_map(|f| format!("{f:?}")),
        prop::sample::select(vec![
            "1e300",
            "-0.5",
            "0.5",
            "2^53",
            "-2^63",
            "1/0",
            "'x'",
            "''",
            "'a b'",
            "true",
            "false",
            "nil",
            "{ok='S'}",
            "{err='E x'}",
            "{double=2.5}",
            "{}",
        ])
        .prop_map(str::to_string),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        3 => leaf,
        1 => prop::collection::vec(lua_value(depth - 1), 0..5)
            .prop_map(|items| format!("{{{}}}", items.join(", "))),
    ]
    .boxed()
}

#[test]
fn generated_return_values_answer_as_redis_does() {
    let strategy = (
        prop::collection::vec((lua_value(3), any::<bool>()), 1..20),
        any::<bool>(),
    );
    generated_same_as_redis(32, strategy, |(values, resp3)| {
        let cmds = values
            .iter()
            .map(|(v, setresp)| {
                let body = if *setresp {
                    format!("redis.setresp(3); return {v}")
                } else {
                    format!("return {v}")
                };
                ev(&body, &[], &[])
            })
            .collect();
        (cmds, resp3)
    });
}

/// The same values through the libraries (`cjson.encode` and a round trip through it,
/// `cmsgpack.pack` and back), and returned by a function a library registered.
#[test]
fn generated_values_through_the_libraries_and_functions_answer_as_redis_does() {
    let strategy = (prop::collection::vec(lua_value(3), 1..12), any::<bool>());
    generated_same_as_redis(32, strategy, |(values, resp3)| {
        let mut cmds = vec![c(&["FUNCTION", "FLUSH"])];
        for v in &values {
            cmds.push(ev(&format!("return cjson.encode({v})"), &[], &[]));
            cmds.push(ev(
                &format!("return cjson.decode(cjson.encode({v}))"),
                &[],
                &[],
            ));
            cmds.push(ev(&format!("return cmsgpack.pack({v})"), &[], &[]));
            cmds.push(ev(
                &format!("return cmsgpack.unpack(cmsgpack.pack({v}))"),
                &[],
                &[],
            ));
            let code = format!(
                "#!lua name=gen\nredis.register_function('gen', function(keys, args) return {v} end)"
            );
            cmds.push(c(&["FUNCTION", "LOAD", "REPLACE", &code]));
            cmds.push(c(&["FCALL", "gen", "0"]));
        }
        (cmds, resp3)
    });
}

/// A SQL backend's namespace with `script_time_limit` and `reply_mode` set.
fn scripted(backend: &str, limit: &str, mode: &str) -> String {
    format!(
        r#"
[defaults]
reply_mode = "{mode}"
acquire_timeout = "2s"
[defaults.retry]
max_attempts = 20
min_delay = "50ms"
max_delay = "500ms"
[backends.db]
{backend}
[[namespaces]]
name = "all"
backend = "db"
script_time_limit = "{limit}"
"#
    )
}

fn sqlite_at(dir: &tempfile::TempDir) -> String {
    format!(
        "kind = \"sqlite\"\npath = \"{}\"\nsynchronous = \"normal\"",
        dir.path().join("holdfast.db").display()
    )
}

fn text(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

/// The read-check-write every client runs: not atomic, it would lose increments.
const READ_CHECK_WRITE: &str = "local v = tonumber(redis.call('get', KEYS[1]) or '0')\n\
     redis.call('set', KEYS[1], v + 1)\n\
     return v + 1";

/// 20 clients run the script 1,000 times each on one key, spread over `addrs`; the count
/// must come out exact.
async fn twenty_clients_count_exactly(addrs: &[String]) {
    const CLIENTS: usize = 20;
    const EACH: usize = 1000;
    let mut load = RawConn::connect(&addrs[0]).await;
    let sha = text(&load.command(&["SCRIPT", "LOAD", READ_CHECK_WRITE]).await);
    let sha = sha
        .lines()
        .nth(1)
        .expect("SCRIPT LOAD answers the digest")
        .to_string();
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let addr = addrs[i % addrs.len()].clone();
        let sha = sha.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            for _ in 0..EACH {
                let reply = conn.command(&["EVALSHA", &sha, "1", "counter"]).await;
                assert!(reply.starts_with(b":"), "{}", text(&reply));
            }
        }));
    }
    for task in tasks {
        task.await.expect("a client");
    }
    let total = text(&load.command(&["GET", "counter"]).await);
    eprintln!(
        "{} script runs on {} holdfast(s) in {:?}",
        CLIENTS * EACH,
        addrs.len(),
        started.elapsed()
    );
    assert_eq!(total, format!("$5\r\n{}\r\n", CLIENTS * EACH));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_check_write_script_is_atomic_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start(&scripted(&sqlite_at(&dir), "5s", "fast")).await;
    twenty_clients_count_exactly(std::slice::from_ref(&proxy.addr)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_check_write_script_is_atomic_across_two_holdfasts_on_postgres() {
    let pg = PgServer::start();
    let backend = format!("kind = \"postgres\"\nurl = \"{}\"", pg.url());
    let one = Proxy::start(&scripted(&backend, "5s", "fast")).await;
    let two = Proxy::start(&scripted(&backend, "5s", "fast")).await;
    twenty_clients_count_exactly(&[one.addr.clone(), two.addr.clone()]).await;
}

/// A script that never ends is stopped at its limit with nothing it wrote applied, however
/// it hides (a `pcall` around the loop, a coroutine); meanwhile other clients are served.
async fn endless_scripts_stop_at_their_limit(addr: &str) {
    let mut other = RawConn::connect(addr).await;
    assert_eq!(other.command(&["SET", "before", "1"]).await, b"+OK\r\n");
    for endless in [
        "redis.call('set', 'looped', '1')\nwhile true do end",
        "redis.call('set', 'looped', '1')\nwhile true do pcall(function() while true do end end) end",
        "redis.call('set', 'looped', '1')\nlocal co = coroutine.wrap(function() while true do end end)\nwhile true do pcall(co) end",
    ] {
        let addr = addr.to_string();
        let endless = endless.to_string();
        let started = std::time::Instant::now();
        let looping = tokio::spawn(async move {
            let mut conn = RawConn::connect(&addr).await;
            let reply = conn.command(&["EVAL", &endless, "0"]).await;
            (text(&reply), started.elapsed())
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        // A read is served while the script runs; a write waits for it, within its limit.
        let read_at = std::time::Instant::now();
        assert_eq!(other.command(&["GET", "before"]).await, b"$1\r\n1\r\n");
        assert!(
            read_at.elapsed() < std::time::Duration::from_millis(500),
            "a read waited {:?} behind a running script",
            read_at.elapsed()
        );
        assert_eq!(other.command(&["SET", "during", "1"]).await, b"+OK\r\n");
        let (reply, took) = looping.await.expect("the script's client");
        assert!(
            reply.starts_with("-ERR holdfast: the script ran past its script_time_limit (1s)"),
            "{reply}"
        );
        assert!(
            took < std::time::Duration::from_secs(3),
            "stopped after {took:?}"
        );
        assert_eq!(other.command(&["GET", "looped"]).await, b"$-1\r\n");
        assert_eq!(other.command(&["GET", "during"]).await, b"$1\r\n1\r\n");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_script_stops_at_its_limit_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start(&scripted(&sqlite_at(&dir), "1s", "fast")).await;
    endless_scripts_stop_at_their_limit(&proxy.addr).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_script_stops_at_its_limit_on_postgres() {
    let pg = PgServer::start();
    let backend = format!("kind = \"postgres\"\nurl = \"{}\"", pg.url());
    let proxy = Proxy::start(&scripted(&backend, "1s", "fast")).await;
    endless_scripts_stop_at_their_limit(&proxy.addr).await;
}

/// `SCRIPT KILL` stops a running script at once, rolled back; with none running it answers
/// `NOTBUSY`. A script that asks for more memory than an interpreter may hold is refused.
#[tokio::test(flavor = "multi_thread")]
async fn script_kill_stops_a_running_script_and_rolls_it_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start(&scripted(&sqlite_at(&dir), "30s", "fast")).await;
    let mut admin = proxy.connect().await;
    assert_eq!(
        text(&admin.command(&["SCRIPT", "KILL"]).await),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    let addr = proxy.addr.clone();
    let started = std::time::Instant::now();
    let looping = tokio::spawn(async move {
        let mut conn = RawConn::connect(&addr).await;
        let reply = conn
            .command(&[
                "EVAL",
                "redis.call('set', 'k', 'v')\nwhile true do end",
                "0",
            ])
            .await;
        (text(&reply), started.elapsed())
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(admin.command(&["SCRIPT", "KILL"]).await, b"+OK\r\n");
    let (reply, took) = looping.await.expect("the script's client");
    assert!(reply.contains("stopped by SCRIPT KILL"), "{reply}");
    assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    assert_eq!(admin.command(&["GET", "k"]).await, b"$-1\r\n");
    let big = text(
        &admin
            .command(&["EVAL", "return #string.rep('x', 2^30)", "0"])
            .await,
    );
    assert!(big.contains("not enough memory"), "{big}");
    assert_eq!(admin.command(&["EVAL", "return 1", "0"]).await, b":1\r\n");
}

/// Exact mode: a script's reply is recorded in its own transaction, so a retry after a
/// lost `COMMIT` reply answers the first application and never runs it twice.
#[tokio::test(flavor = "multi_thread")]
async fn an_exact_mode_script_whose_commit_reply_was_lost_ran_once() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let backend = format!(
        "kind = \"postgres\"\nurl = \"postgres://holdfast@{}/holdfast\"\npool_size = 2",
        relay.addr()
    );
    let proxy = Proxy::start(&scripted(&backend, "5s", "exact")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    for i in 1..=10 {
        relay.drop_after_request_with(b"COMMIT");
        let reply = conn
            .command(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "counter"])
            .await;
        assert_eq!(text(&reply), format!(":{i}\r\n"), "run {i}");
        relay.pass();
        assert_eq!(conn.command(&["PING"]).await, b"+PONG\r\n");
    }
    assert!(relay.fired() >= 10, "{} replies lost", relay.fired());
    assert_eq!(conn.command(&["GET", "counter"]).await, b"$2\r\n10\r\n");
}

/// redis-py's own `Lock` (acquire, extend, release, a blocking acquire across two clients)
/// on holdfast's SQL backends: first through one holdfast, then across two sharing the
/// database, where the scripts the first one ran are already there (no `SCRIPT LOAD`).
const LOCK_PY: &str = r#"
import sys, threading, time
import redis

first, second = sys.argv[1], sys.argv[2]
loads = []
def client(addr):
    c = redis.Redis.from_url("redis://" + addr)
    original = c.script_load
    def counted(script, original=original):
        loads.append(script)
        return original(script)
    c.script_load = counted
    return c

def exercise(r, other):
    lock = r.lock("resource", timeout=10, blocking_timeout=5, thread_local=False)
    assert lock.acquire(), "acquire"
    assert lock.extend(10), "extend"
    assert r.pttl("resource") > 10000, "extended"
    assert not other.lock("resource", timeout=10, blocking_timeout=0.2).acquire(), "held"
    waiting = other.lock("resource", timeout=10, blocking_timeout=5)
    threading.Timer(0.5, lock.release).start()
    started = time.time()
    assert waiting.acquire(), "blocking acquire"
    assert time.time() - started >= 0.4, "it waited for the release"
    assert waiting.locked()
    waiting.release()
    assert not waiting.locked()
    stolen = r.lock("resource2", timeout=10)
    assert stolen.acquire(), "acquire another"
    other.set("resource2", "someone else")
    try:
        stolen.release()
        raise AssertionError("released a lock someone else holds")
    except redis.exceptions.LockNotOwnedError:
        pass
    assert other.get("resource2") == b"someone else"
    other.delete("resource2")

exercise(client(first), client(first))
print("one holdfast ok", flush=True)
before = len(loads)
exercise(client(second), client(first))
print("two holdfasts ok, script loads %d" % (len(loads) - before), flush=True)
"#;

async fn redis_py_lock(first: &str, second: &str) {
    let py = redis_py("lock.py", LOCK_PY, &[first, second]);
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        py.child.wait_with_output(),
    )
    .await
    .expect("redis-py's Lock ends")
    .expect("python3 ends");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("one holdfast ok")
            && stdout.contains("two holdfasts ok, script loads 0"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_py_lock_works_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let one = Proxy::start(&scripted(&sqlite_at(&dir), "5s", "fast")).await;
    let two = Proxy::start(&scripted(&sqlite_at(&dir), "5s", "fast")).await;
    redis_py_lock(&one.addr, &two.addr).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_py_lock_works_across_two_holdfasts_on_postgres() {
    let pg = PgServer::start();
    let backend = format!("kind = \"postgres\"\nurl = \"{}\"", pg.url());
    let one = Proxy::start(&scripted(&backend, "5s", "fast")).await;
    let two = Proxy::start(&scripted(&backend, "5s", "fast")).await;
    redis_py_lock(&one.addr, &two.addr).await;
}

/// `FUNCTION` and `FCALL`, each behaviour of Redis's pages a case. Libraries of one function
/// where `FUNCTION LIST` shows them: Redis lists a library's functions in its hash table's
/// order, seeded at random per process, holdfast by name.
fn fixed_functions() -> Vec<Cmd> {
    let lib = |name: &str, body: &str| format!("#!lua name={name}\n{body}");
    let load = |code: &str| c(&["FUNCTION", "LOAD", code]);
    vec![
        c(&["FUNCTION", "FLUSH"]),
        c(&["FUNCTION", "LIST"]),
        load(&lib("pos", "redis.register_function('echo', function(keys, args) return {keys[1], args[1], #keys, #args} end)")),
        c(&["FCALL", "echo", "1", "k", "a"]),
        c(&["FCALL", "echo", "0"]),
        c(&["FCALL", "echo", "0", "a", "b"]),
        c(&["FCALL_RO", "echo", "0"]),
        load(&lib("named", "redis.register_function{function_name='reader', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads a key'}")),
        c(&["SET", "k", "v"]),
        c(&["FCALL", "reader", "1", "k"]),
        c(&["FCALL_RO", "reader", "1", "k"]),
        load(&lib("writer", "redis.register_function{function_name='writes', callback=function(keys) return redis.call('set', keys[1], 'w') end, flags={'no-writes'}}")),
        c(&["FCALL", "writes", "1", "k"]),
        load(&lib("flagged", "redis.register_function{function_name='allflags', callback=function() return 1 end, flags={'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}}")),
        c(&["FCALL", "allflags", "0"]),
        c(&["FUNCTION", "LIST", "LIBRARYNAME", "named"]),
        c(&["FUNCTION", "LIST", "LIBRARYNAME", "flag*"]),
        c(&["FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "pos"]),
        c(&["FUNCTION", "LIST", "LIBRARYNAME", "nomatch*"]),
        c(&["FUNCTION", "LIST", "LIBRARYNAME"]),
        c(&["FUNCTION", "LIST", "BOGUS"]),
        c(&["FUNCTION", "STATS"]),
        // Errors of calls.
        c(&["FCALL", "nosuch", "0"]),
        c(&["FCALL", "echo", "x"]),
        c(&["FCALL", "echo", "3", "a"]),
        c(&["FCALL", "echo", "-1"]),
        load(&lib("raising", "redis.register_function('boom', function()\n  error('bad')\nend)\nredis.register_function('wrote', function(keys)\n  redis.call('set', keys[1], 'kept')\n  return redis.call('incr', keys[1])\nend)\nredis.register_function('globals', function() return KEYS end)")),
        c(&["FCALL", "boom", "0"]),
        c(&["FCALL", "wrote", "1", "kept"]),
        c(&["GET", "kept"]),
        c(&["FCALL", "globals", "0"]),
        // Errors of loads.
        load(&lib("pos", "redis.register_function('x', function() return 1 end)")),
        load("return 1"),
        load("#!lua name=nolf"),
        load("#!lua\nreturn 1"),
        load("#!lua name=a name=b\nreturn 1"),
        load("#!lua foo=bar\nreturn 1"),
        load("#!lua name=bad-name\nreturn 1"),
        load("#!js name=x\nreturn 1"),
        load(&lib("none", "return 1")),
        load(&lib("dup", "redis.register_function('echo', function() return 1 end)")),
        load(&lib("twice", "redis.register_function('f', function() end)\nredis.register_function('f', function() end)")),
        load(&lib("badf", "redis.register_function('bad-name', function() return 1 end)")),
        load(&lib("badflag", "redis.register_function{function_name='f', callback=function() end, flags={'bogus'}}")),
        load(&lib("nocb", "redis.register_function{function_name='f'}")),
        load(&lib("noname", "redis.register_function{callback=function() end}")),
        load(&lib("unknownarg", "redis.register_function{function_name='f', callback=function() end, color='red'}")),
        load(&lib("notfn", "redis.register_function('f', 'g')")),
        load(&lib("notname", "redis.register_function({}, function() end)")),
        load(&lib("three", "redis.register_function('f', function() end, 3)")),
        load(&lib("notable", "redis.register_function(function() end)")),
        load(&lib("calls", "redis.call('set', 'x', 'y')")),
        load(&lib("raises", "error('at load')")),
        load(&lib("strings", "local x = string.len('a')")),
        load(&lib("syntax", "return (")),
        load(&lib("logs", "redis.log(redis.LOG_NOTICE, 'loading'); redis.register_function('logged', function() return redis.REDIS_VERSION_NUM end)")),
        c(&["FCALL", "logged", "0"]),
        // Replace, delete, flush.
        c(&["FUNCTION", "LOAD", "REPLACE", &lib("pos", "redis.register_function('echo', function() return 'replaced' end)")]),
        c(&["FCALL", "echo", "0"]),
        c(&["FUNCTION", "LOAD", "BOGUS", &lib("pos", "redis.register_function('echo', function() end)")]),
        c(&["FUNCTION", "LOAD"]),
        c(&["FUNCTION", "DELETE", "pos"]),
        c(&["FUNCTION", "DELETE", "pos"]),
        c(&["FCALL", "echo", "0"]),
        c(&["FUNCTION", "FLUSH", "BOGUS"]),
        c(&["FUNCTION", "FLUSH", "SYNC"]),
        c(&["FUNCTION", "STATS"]),
        c(&["FCALL", "reader", "1", "k"]),
        c(&["FUNCTION", "KILL"]),
        // RESTORE, with payloads as holdfast writes them (plain strings; Redis reads them).
        c(&["FUNCTION", "FLUSH"]),
        restore(&[&lib("restored", "redis.register_function('r1', function() return 'r1' end)")], &[]),
        c(&["FCALL", "r1", "0"]),
        restore(&[&lib("restored", "redis.register_function('r1', function() return 'r1' end)")], &[]),
        restore(&[&lib("restored", "redis.register_function('r1', function() return 'again' end)")], &["APPEND"]),
        restore(&[&lib("restored", "redis.register_function('r1', function() return 'again' end)")], &["REPLACE"]),
        c(&["FCALL", "r1", "0"]),
        restore(&[&lib("clash", "redis.register_function('r1', function() end)")], &[]),
        restore(&[&lib("one", "redis.register_function('o1', function() return 1 end)"), &lib("two", "redis.register_function('t2', function() return 2 end)")], &["FLUSH"]),
        c(&["FCALL", "r1", "0"]),
        c(&["FCALL", "t2", "0"]),
        c(&["FUNCTION", "STATS"]),
        restore(&[&lib("x", "return 1")], &["BOGUS"]),
        c(&["FUNCTION", "RESTORE", "garbage"]),
        restore(&[&lib("broken", "return (")], &[]),
        restore(&[&lib("x", "redis.register_function('x', function() end)")], &["FLUSH", "extra"]),
        c(&["FCALL", "o1", "0"]),
    ]
}

/// `FUNCTION RESTORE` of a payload of `libraries` as holdfast writes one, and `more`.
fn restore(libraries: &[&str], more: &[&str]) -> Cmd {
    let mut payload = Vec::new();
    for code in libraries {
        payload.push(245);
        holdfast::backend::rdb::put_string(&mut payload, code.as_bytes());
    }
    holdfast::backend::rdb::seal(&mut payload);
    let mut cmd = vec![b"FUNCTION".to_vec(), b"RESTORE".to_vec(), payload];
    cmd.extend(more.iter().map(|m| m.as_bytes().to_vec()));
    cmd
}

#[test]
fn fixed_functions_answer_as_redis_does_on_sqlite_and_postgres() {
    same_as_redis(&fixed_functions());
}

/// A library dumped by Redis (its strings LZF-compressed) restores on holdfast's SQL
/// backends, and one dumped by holdfast restores on Redis: `FUNCTION DUMP` carries libraries
/// between any two backends.
#[test]
fn function_dumps_carry_libraries_between_redis_and_sql() {
    let rt = runtime();
    rt.block_on(async {
        let t = Targets::start().await;
        let code = "#!lua name=carried\n\
                    redis.register_function('carry', function(keys, args) return 'carried ' .. args[1] end)\n\
                    redis.register_function{function_name='carry_ro', callback=function() return 1 end, flags={'no-writes'}}";
        let [(_, redis_addr), (_, sqlite), (_, postgres)] = t.addrs();
        let mut redis = RawConn::connect(&redis_addr).await;
        assert_eq!(redis.command(&["FUNCTION", "FLUSH"]).await, b"+OK\r\n");
        assert!(redis.command(&["FUNCTION", "LOAD", code]).await.starts_with(b"$7"));
        let dumped = redis.command(&["FUNCTION", "DUMP"]).await;
        let from_redis = bulk_body(&dumped);
        // Redis compressed the library's code (LZF: the string's first byte is 0xc3).
        assert_eq!(from_redis.get(..2), Some(&[245u8, 0xc3][..]), "{}", show(&dumped));
        for addr in [&sqlite, &postgres] {
            let mut sql = RawConn::connect(addr).await;
            assert_eq!(sql.command(&["FUNCTION", "FLUSH"]).await, b"+OK\r\n");
            let restored = sql
                .command_bytes(&[b"FUNCTION", b"RESTORE", &from_redis])
                .await;
            assert_eq!(text(&restored), "+OK\r\n", "{addr}");
            assert_eq!(
                text(&sql.command(&["FCALL", "carry", "0", "x"]).await),
                "$9\r\ncarried x\r\n"
            );
            assert_eq!(text(&sql.command(&["FCALL_RO", "carry_ro", "0"]).await), ":1\r\n");
            let from_sql = bulk_body(&sql.command(&["FUNCTION", "DUMP"]).await);
            assert_eq!(redis.command(&["FUNCTION", "FLUSH"]).await, b"+OK\r\n");
            let back = redis
                .command_bytes(&[b"FUNCTION", b"RESTORE", &from_sql])
                .await;
            assert_eq!(text(&back), "+OK\r\n", "{addr}");
            assert_eq!(
                text(&redis.command(&["FCALL", "carry", "0", "y"]).await),
                "$9\r\ncarried y\r\n"
            );
        }
    });
}

/// The body of a bulk string reply.
fn bulk_body(raw: &[u8]) -> Vec<u8> {
    let header = raw.iter().position(|b| *b == b'\n').expect("a bulk reply") + 1;
    raw[header..raw.len() - 2].to_vec()
}

/// Every key a script's `redis.call` names is checked against the client's namespaces and
/// must route to the script's backend: a user limited to one namespace (with
/// `allow_scripts`) cannot reach another's keys from a script, and no script reaches a key
/// of another backend; both answer the error Redis's ACL gives inside a script.
#[tokio::test(flavor = "multi_thread")]
async fn a_script_reaches_only_the_clients_namespaces_on_its_own_backend() {
    let dir = tempfile::tempdir().expect("temp dir");
    let other = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start(&format!(
        r#"
[backends.db]
{}
[backends.elsewhere]
{}
[[namespaces]]
name = "app"
backend = "db"
prefixes = ["app:"]
allow_scripts = true
[[namespaces]]
name = "shared"
backend = "db"
prefixes = ["shared:"]
[[namespaces]]
name = "far"
backend = "elsewhere"
prefixes = ["far:"]
[[namespaces]]
name = "main"
backend = "db"
[[users]]
name = "limited"
password = "pw"
namespaces = ["app"]
[[users]]
name = "all"
password = "pw"
"#,
        sqlite_at(&dir),
        sqlite_at(&other)
    ))
    .await;
    let denied = "-ERR The user executing the script can't access at least one of the keys mentioned in the command script: ";
    let mut all = proxy.connect().await;
    assert_eq!(all.command(&["AUTH", "all", "pw"]).await, b"+OK\r\n");
    assert_eq!(all.command(&["SET", "shared:x", "1"]).await, b"+OK\r\n");
    let reply = text(
        &all.command(&["EVAL", "return redis.call('get', 'shared:x')", "1", "app:k"])
            .await,
    );
    assert_eq!(reply, "$1\r\n1\r\n");
    // Another backend's key, even for a user who may reach it.
    let reply = text(
        &all.command(&["EVAL", "return redis.call('get', 'far:x')", "1", "app:k"])
            .await,
    );
    assert!(reply.starts_with(denied), "{reply}");
    let mut limited = proxy.connect().await;
    assert_eq!(
        limited.command(&["AUTH", "limited", "pw"]).await,
        b"+OK\r\n"
    );
    let reply = text(
        &limited
            .command(&[
                "EVAL",
                "redis.call('set', KEYS[1], 'v'); return redis.call('get', KEYS[1])",
                "1",
                "app:k",
            ])
            .await,
    );
    assert_eq!(reply, "$1\r\nv\r\n");
    let reply = text(
        &limited
            .command(&["EVAL", "return redis.call('get', 'shared:x')", "1", "app:k"])
            .await,
    );
    assert!(reply.starts_with(denied), "{reply}");
    let reply = text(
        &limited
            .command(&[
                "EVAL",
                "return redis.pcall('set', 'shared:x', 'stolen')",
                "1",
                "app:k",
            ])
            .await,
    );
    assert!(
        reply.starts_with("-ERR The user executing the script"),
        "{reply}"
    );
    assert_eq!(all.command(&["GET", "shared:x"]).await, b"$1\r\n1\r\n");
    // A script declaring a key outside its namespaces is refused before it runs.
    let reply = text(
        &limited
            .command(&["EVAL", "return 1", "1", "shared:x"])
            .await,
    );
    assert!(reply.starts_with("-NOPERM"), "{reply}");
}

/// A script inside `MULTI` on a SQL backend is refused, as docs/sql.md says: `EXEC` answers
/// the refusal in the script's place and applies the rest.
#[tokio::test(flavor = "multi_thread")]
async fn a_script_inside_multi_is_refused_and_the_rest_applies() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start(&scripted(&sqlite_at(&dir), "5s", "fast")).await;
    let mut conn = proxy.connect().await;
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "a", "1"]).await, b"+QUEUED\r\n");
    assert_eq!(
        conn.command(&["EVAL", "return redis.call('set', 'b', '1')", "0"])
            .await,
        b"+QUEUED\r\n"
    );
    let exec = text(&conn.command(&["EXEC"]).await);
    assert_eq!(
        exec,
        "*2\r\n+OK\r\n-ERR holdfast: scripts inside MULTI are not served by SQL backends\r\n"
    );
    assert_eq!(conn.command(&["GET", "a"]).await, b"$1\r\n1\r\n");
    assert_eq!(conn.command(&["GET", "b"]).await, b"$-1\r\n");
}

/// BullMQ for Python, whose every queue operation is a Lua script (cjson and cmsgpack among
/// them): a producer adds 1,000 jobs, one in ten delayed, one in seven failing its first
/// attempt and retried; two workers take them. Every job completes exactly once, nothing is
/// left failed, waiting or delayed.
const BULLMQ_PY: &str = r#"
import asyncio, json, sys, time
from bullmq import Queue, Worker

producer, workers_at = sys.argv[1], sys.argv[2:]
N = 1000

async def main():
    queue = Queue("jobs", {"connection": "redis://" + producer})
    for i in range(N):
        opts = {"attempts": 3, "backoff": {"type": "fixed", "delay": 50}}
        if i % 10 == 0:
            opts["delay"] = 300
        await queue.add("job", {"i": i, "fail": i % 7 == 0}, opts)
    completed, failed_once = {}, set()

    async def process(job, token):
        i = job.data["i"]
        if job.data["fail"] and i not in failed_once:
            failed_once.add(i)
            raise Exception("planned failure")
        completed[i] = completed.get(i, 0) + 1
        return i

    workers = [Worker("jobs", process, {"connection": "redis://" + at, "concurrency": 4})
               for at in workers_at]
    deadline, said = time.time() + 150, time.time()
    while len(completed) < N and time.time() < deadline:
        await asyncio.sleep(0.2)
        if time.time() - said > 10:
            said = time.time()
            print(f"{time.strftime('%T')} {len(completed)} completed", file=sys.stderr, flush=True)
    await asyncio.sleep(1)
    for w in workers:
        await w.close()
    counts = await queue.getJobCounts("completed", "failed", "delayed", "wait", "active")
    await queue.close()
    print(json.dumps({
        "completed": len(completed),
        "twice": sorted(i for i, n in completed.items() if n > 1),
        "retried": len(failed_once),
        "counts": counts,
    }, sort_keys=True), flush=True)

asyncio.run(main())
"#;

/// One BullMQ run at a time in this test binary: each keeps both cores busy for half a
/// minute, and two at once on a loaded machine ran one past its time (CI, once).
static BULLMQ_RUNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn bullmq(producer: &str, workers: &[&str]) {
    let _one = BULLMQ_RUNS.lock().await;
    let mut args = vec![producer];
    args.extend_from_slice(workers);
    let mut py = redis_py("bullmq_jobs.py", BULLMQ_PY, &args);
    // Read as it comes, so that a run that does not end still shows how far it got.
    let read = |pipe: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>| {
        tokio::spawn(async move {
            let mut said = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = tokio::io::AsyncReadExt::read_to_end(&mut pipe, &mut said).await;
            }
            said
        })
    };
    let stdout = read(py.child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(py.child.stderr.take().map(|p| Box::new(p) as _));
    let ended = tokio::time::timeout(std::time::Duration::from_secs(200), py.child.wait()).await;
    if ended.is_err() {
        let _ = py.child.kill().await;
    }
    let (stdout, stderr) = (
        stdout.await.unwrap_or_default(),
        stderr.await.unwrap_or_default(),
    );
    let (stdout, stderr) = (text(&stdout), text(&stderr));
    let status = match ended {
        Ok(status) => status.expect("python3 ends"),
        Err(_) => panic!("the BullMQ run did not end in 200 s:\n{stdout}\n{stderr}"),
    };
    let line = stdout.lines().last().unwrap_or_default();
    eprintln!("bullmq: {line}");
    let want = r#"{"completed": 1000, "counts": {"active": 0, "completed": 1000, "delayed": 0, "failed": 0, "wait": 0}, "retried": 143, "twice": []}"#;
    assert!(
        status.success() && line.contains(want),
        "{stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bullmq_completes_every_job_once_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start(&scripted(&sqlite_at(&dir), "5s", "fast")).await;
    bullmq(&proxy.addr, &[&proxy.addr, &proxy.addr]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bullmq_completes_every_job_once_across_two_holdfasts_on_postgres() {
    let pg = PgServer::start();
    let backend = format!("kind = \"postgres\"\nurl = \"{}\"", pg.url());
    let one = Proxy::start(&scripted(&backend, "5s", "fast")).await;
    let two = Proxy::start(&scripted(&backend, "5s", "fast")).await;
    bullmq(&one.addr, &[&one.addr, &two.addr]).await;
}

/// What a client hears when PostgreSQL fails under a script, pinned:
/// - the connection dies mid-script (after the script's first write, before `COMMIT`): the
///   transaction never commits, the script is run again, and its first application answers;
/// - the server freezes: the script is answered `UNAVAILABLE` (nothing applied) within the
///   budget and the deadlines, and nothing it wrote is there once the server is back.
#[tokio::test(flavor = "multi_thread")]
async fn a_script_under_a_failing_postgres_is_applied_once_or_not_at_all() {
    let pg = PgServer::start();
    let relay = Relay::start(&pg.addr()).await;
    let proxy = Proxy::start(&format!(
        r#"
[defaults]
reply_mode = "fast"
acquire_timeout = "1s"
[defaults.retry]
max_attempts = 5
min_delay = "300ms"
max_delay = "1s"
[backends.db]
kind = "postgres"
url = "postgres://holdfast@{}/holdfast"
pool_size = 2
response_timeout = "1s"
[[namespaces]]
name = "all"
backend = "db"
script_time_limit = "1s"
"#,
        relay.addr()
    ))
    .await;
    let mut conn = proxy.connect().await;
    let script = "redis.call('incr', KEYS[1]); redis.call('hset', 'marker', 'f', 'v'); \
                  return redis.call('get', KEYS[1])";
    for i in 1..=3 {
        // Cut where the script's second write goes out (its key, in the statement's
        // parameters, however the statement was prepared): its first is in the transaction.
        let before = relay.fired();
        relay.drop_after_request_with(b"marker");
        let reply = text(&conn.command(&["EVAL", script, "1", "counter"]).await);
        assert_eq!(
            reply,
            format!("${}\r\n{i}\r\n", i.to_string().len()),
            "run {i}"
        );
        assert_eq!(relay.fired() - before, 1, "run {i} was not cut");
        relay.pass();
    }
    assert_eq!(conn.command(&["GET", "counter"]).await, b"$1\r\n3\r\n");
    pg.freeze();
    let started = std::time::Instant::now();
    let reply = text(&conn.command(&["EVAL", script, "1", "counter"]).await);
    let took = started.elapsed();
    pg.thaw();
    assert!(reply.starts_with("-UNAVAILABLE"), "{reply}");
    assert!(
        took < std::time::Duration::from_secs(15),
        "answered after {took:?}"
    );
    until(
        std::time::Duration::from_secs(20),
        "PostgreSQL back",
        || async {
            let mut c = proxy.connect().await;
            c.command(&["GET", "counter"]).await == b"$1\r\n3\r\n"
        },
    )
    .await;
}

/// BullMQ moved while it runs: its namespace on `old` (a `[backends]` table's body),
/// mirrored to PostgreSQL; 200 jobs in, with the rest waiting, delayed and active, the
/// namespace is cut over by a reload, and the same producer and workers go on against
/// PostgreSQL without knowing. Every job completes exactly once, as on one backend: what
/// BullMQ's scripts wrote on `old` reached the mirror before the namespace answered from it.
/// Answers how many jobs the old backend completed, read through `old`'s holdfast.
async fn bullmq_through_a_cut_over_to_postgres(old: &str, pg: &PgServer) -> u64 {
    let toml = format!(
        r#"
[defaults]
reply_mode = "fast"
acquire_timeout = "2s"
[defaults.retry]
max_attempts = 20
min_delay = "50ms"
max_delay = "500ms"
[backends.main]
{old}
[backends.next]
kind = "postgres"
url = "{}"
[[namespaces]]
name = "all"
backend = "main"
script_time_limit = "5s"
mirror = {{ backend = "next" }}
"#,
        pg.url()
    );
    let proxy = Proxy::start(&toml).await;
    let addr = proxy.addr.clone();
    let run = tokio::spawn(async move { bullmq(&addr, &[&addr, &addr]).await });
    // Cut over with a fifth of the jobs done, the rest waiting, delayed or active.
    let mut watch = proxy.connect().await;
    while completed(&mut watch).await < 200 {
        assert!(!run.is_finished(), "BullMQ's run ended before the cut-over");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mirror = proxy.holdfast.mirror("all").expect("mirrored");
    let (queued, marked) = mirror.status();
    if marked != 0 {
        let recopy = mirror.take_recopy();
        panic!(
            "the mirror missed writes ({queued} queued): {:?}",
            recopy.keys.keys().collect::<Vec<_>>()
        );
    }
    let cut = super::mirror::cut_over(&toml);
    proxy.reload(&cut).expect("the cut-over applies");
    run.await.expect("BullMQ's run ends as on one backend");
    // The run ended on PostgreSQL: all 1,000 completed there, fewer on the old backend.
    let on_pg = Proxy::start(&sql_namespace(&format!(
        "kind = \"postgres\"\nurl = \"{}\"",
        pg.url()
    )))
    .await;
    assert_eq!(completed(&mut on_pg.connect().await).await, 1000);
    on_pg.stop().await;
    proxy.stop().await;
    let on_old = Proxy::start(&sql_namespace(old)).await;
    let left = completed(&mut on_old.connect().await).await;
    on_old.stop().await;
    left
}

/// BullMQ's count of completed jobs, as the connection's holdfast answers it.
async fn completed(c: &mut RawConn) -> u64 {
    let said = c.command(&["ZCARD", "bull:jobs:completed"]).await;
    text(&said)
        .trim()
        .trim_start_matches(':')
        .parse::<u64>()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn bullmq_completes_every_job_once_through_a_cut_over_from_redis_to_postgres() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let old = format!("kind = \"redis\"\nurl = \"{}\"", redis.url());
    let on_redis = bullmq_through_a_cut_over_to_postgres(&old, &pg).await;
    assert!(on_redis < 1000, "{on_redis} completed on Redis");
}

#[tokio::test(flavor = "multi_thread")]
async fn bullmq_completes_every_job_once_through_a_cut_over_from_sqlite_to_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pg = PgServer::start();
    let on_sqlite = bullmq_through_a_cut_over_to_postgres(&sqlite_at(&dir), &pg).await;
    assert!(on_sqlite < 1000, "{on_sqlite} completed on SQLite");
}
