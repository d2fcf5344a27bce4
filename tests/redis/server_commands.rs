//! The server's own answers, as unmodified clients and monitoring agents read them: `INFO`'s
//! sections, `CLIENT LIST`/`INFO`/`KILL` over every holdfast client, `COMMAND GETKEYS` and
//! key specs, `CONFIG SET` behind an administrative permission (reaching a real Redis for an
//! admin), `CONFIG GET` on SQL as a fresh Redis answers, and `READONLY` as a standalone
//! Redis answers it.

#[allow(unused_imports)]
use crate::support::*;

use std::time::Duration;

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// The value of `field:` in an `INFO` reply.
fn field(info: &str, name: &str) -> Option<String> {
    info.split("\r\n")
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread")]
async fn info_has_the_sections_clients_and_agents_read() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut a = proxy.connect().await;
    let mut b = proxy.connect().await;
    assert_eq!(text(&b.command(&["PING"]).await), "+PONG\r\n");
    let info = text(&a.command(&["INFO"]).await);
    for section in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Replication",
        "# Cluster",
        "# Keyspace",
    ] {
        assert!(info.contains(section), "{section} missing:\n{info}");
    }
    assert_eq!(field(&info, "cluster_enabled").as_deref(), Some("0"));
    assert_eq!(field(&info, "connected_clients").as_deref(), Some("2"));
    assert_eq!(field(&info, "blocked_clients").as_deref(), Some("0"));
    let before: u64 = field(&info, "total_commands_processed")
        .and_then(|v| v.parse().ok())
        .expect("total_commands_processed");
    for _ in 0..10 {
        a.command(&["SET", "k", "v"]).await;
    }
    let info = text(&a.command(&["INFO", "stats"]).await);
    assert!(
        !info.contains("# Server"),
        "only the section asked for:\n{info}"
    );
    let after: u64 = field(&info, "total_commands_processed")
        .and_then(|v| v.parse().ok())
        .expect("total_commands_processed");
    assert_eq!(after, before + 11, "ten SETs and the INFO");
    assert!(field(&info, "instantaneous_ops_per_sec").is_some());
    // A client in a blocking command is counted while it waits.
    b.send(&encode_str(&["BLPOP", "nothing", "2"])).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let info = text(&a.command(&["INFO", "clients"]).await);
    assert_eq!(
        field(&info, "blocked_clients").as_deref(),
        Some("1"),
        "{info}"
    );
    assert_eq!(text(&b.read_reply().await), "*-1\r\n");
    let info = text(&a.command(&["INFO", "clients"]).await);
    assert_eq!(
        field(&info, "blocked_clients").as_deref(),
        Some("0"),
        "{info}"
    );
    // The configuration's spelling, not a Rust name.
    let info = text(&a.command(&["INFO", "holdfast"]).await);
    assert!(info.contains("reply_mode=fast"), "{info}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn client_list_shows_every_client_and_client_kill_closes_one() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut a = proxy.connect().await;
    let mut b = proxy.connect().await;
    assert_eq!(
        text(&b.command(&["CLIENT", "SETNAME", "worker"]).await),
        "+OK\r\n"
    );
    // Listed with its name as soon as SETNAME is answered, not from its next command on
    // (redis-py's `client_kill_filter` tests name two clients, then list them).
    let named = text(&a.command(&["CLIENT", "LIST"]).await);
    assert!(named.contains(" name=worker "), "{named}");
    assert_eq!(
        text(&b.command(&["HELLO", "3"]).await).chars().next(),
        Some('%')
    );
    b.command(&["GET", "k"]).await;
    let b_id = text(&b.command(&["CLIENT", "ID"]).await)
        .trim_start_matches(':')
        .trim()
        .to_string();
    let list = text(&a.command(&["CLIENT", "LIST"]).await);
    let lines: Vec<&str> = list.split('\n').filter(|l| l.contains("id=")).collect();
    assert_eq!(lines.len(), 2, "{list}");
    let port = proxy.addr.rsplit(':').next().unwrap_or_default();
    let worker = lines
        .iter()
        .find(|l| l.contains("name=worker"))
        .expect("the named client is listed");
    for want in [
        format!("id={b_id} "),
        "addr=127.0.0.1:".to_string(),
        format!("laddr=127.0.0.1:{port} "),
        " db=0 ".to_string(),
        " cmd=client|id ".to_string(),
        " user=default ".to_string(),
        " resp=3".to_string(),
        " age=".to_string(),
        " idle=".to_string(),
    ] {
        assert!(worker.contains(&want), "{want:?} not in {worker}");
    }
    let me = lines
        .iter()
        .find(|l| !l.contains("name=worker"))
        .expect("the caller is listed");
    assert!(me.contains(" cmd=client|list "), "{me}");
    let info = text(&a.command(&["CLIENT", "INFO"]).await);
    assert!(
        info.contains(" cmd=client|info ") && !info.contains("worker"),
        "{info}"
    );
    assert_eq!(
        text(&a.command(&["CLIENT", "LIST", "ID", &b_id]).await)
            .matches("id=")
            .count(),
        1
    );
    // Kill by id: the other client's connection closes.
    assert_eq!(
        text(&a.command(&["CLIENT", "KILL", "ID", &b_id]).await),
        ":1\r\n"
    );
    b.expect_disconnect(Duration::from_secs(2)).await;
    assert_eq!(
        text(&a.command(&["CLIENT", "KILL", "ID", &b_id]).await),
        ":0\r\n"
    );
    assert_eq!(
        text(&a.command(&["CLIENT", "KILL", "ID", "0"]).await),
        "-ERR client-id should be greater than 0\r\n"
    );
    assert_eq!(
        text(&a.command(&["CLIENT", "KILL", "127.0.0.1:1"]).await),
        "-ERR No such client\r\n"
    );
    // By address, in the old form; SKIPME keeps the caller.
    let mut c = proxy.connect().await;
    let c_line = text(&c.command(&["CLIENT", "INFO"]).await);
    let c_addr = c_line
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .expect("addr")
        .to_string();
    assert_eq!(
        text(&a.command(&["CLIENT", "KILL", &c_addr]).await),
        "+OK\r\n"
    );
    c.expect_disconnect(Duration::from_secs(2)).await;
    assert_eq!(
        text(&a.command(&["CLIENT", "KILL", "USER", "default"]).await),
        ":0\r\n"
    );
    assert_eq!(text(&a.command(&["PING"]).await), "+PONG\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn command_getkeys_and_key_specs_come_from_the_table() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut c = proxy.connect().await;
    assert_eq!(
        text(&c.command(&["COMMAND", "GETKEYS", "SET", "a", "b"]).await),
        "*1\r\n$1\r\na\r\n"
    );
    assert_eq!(
        text(
            &c.command(&["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"])
                .await
        ),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        text(&c.command(&["COMMAND", "GETKEYS", "MSET", "a"]).await),
        "-ERR Invalid number of arguments specified for command\r\n"
    );
    assert_eq!(
        text(&c.command(&["COMMAND", "GETKEYS", "NOSUCH", "a"]).await),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        text(&c.command(&["COMMAND", "GETKEYS", "PING", "x"]).await),
        "-ERR The command has no key arguments\r\n"
    );
    let info = text(&c.command(&["COMMAND", "INFO", "GET"]).await);
    for want in ["begin_search", "find_keys", "lastkey", "RO"] {
        assert!(info.contains(want), "{want} not in {info}");
    }
    // A script whose keys are none has an empty list of them, as Redis answers.
    let mut direct = RawConn::connect(&redis.addr()).await;
    for ask in [
        &["COMMAND", "GETKEYS", "EVAL", "return 1", "0"][..],
        &["COMMAND", "GETKEYS", "EVAL", "return 1", "1", "k"][..],
        &["COMMAND", "GETKEYS", "PING"][..],
        &["COMMAND", "GETKEYS", "PING", "x"][..],
        &["COMMAND", "GETKEYSANDFLAGS", "GET"][..],
    ] {
        assert_eq!(
            text(&c.command(ask).await),
            text(&direct.command(ask).await),
            "{ask:?}"
        );
    }
    // Subcommands are listed by their full names, and under their container's info.
    let list = text(&c.command(&["COMMAND", "LIST"]).await);
    assert!(list.contains("\r\nconfig|get\r\n"), "{list}");
    let object = text(&c.command(&["COMMAND", "INFO", "OBJECT"]).await);
    assert!(object.contains("object|encoding"), "{object}");

    // redis-py's key finder (what its cluster client routes by) reads all of that.
    let py = redis_py("keys.py", KEYS_PY, &[&proxy.addr]);
    let out = tokio::time::timeout(Duration::from_secs(30), py.child.wait_with_output())
        .await
        .expect("the script ends")
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text(&c.command(&["READONLY"]).await),
        "-ERR This instance has cluster support disabled\r\n"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn config_set_needs_an_admin_where_users_exist_and_reaches_redis() {
    let redis = RedisServer::start();
    let users = "[[users]]\nname = \"ops\"\npassword = \"po\"\nadmin = true\n\
                 [[users]]\nname = \"app\"\npassword = \"pa\"\n";
    // Without [[users]] every client may do what an admin may, as Redis's default user.
    let open = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let mut c = open.connect().await;
    assert_eq!(
        text(
            &c.command(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"])
                .await
        ),
        "+OK\r\n"
    );
    // Not what would lock holdfast out of its backend (redis-py's own suite sets
    // `requirepass` through it and, failing to authenticate as the backend's user, never
    // cleared it: every later dial was refused). The backend keeps no password.
    let locked = text(
        &c.command(&["CONFIG", "SET", "maxmemory", "0", "requirepass", "x"])
            .await,
    );
    assert!(
        locked.starts_with("-ERR holdfast: CONFIG SET requirepass is refused"),
        "{locked}"
    );
    let mut direct = RawConn::connect(&redis.addr()).await;
    assert_eq!(
        text(&direct.command(&["CONFIG", "GET", "requirepass"]).await),
        "*2\r\n$11\r\nrequirepass\r\n$0\r\n\r\n"
    );
    open.stop().await;
    let proxy = Proxy::start(&format!("{}{users}", one_backend(&redis.url(), "main", ""))).await;
    let mut app = proxy.connect().await;
    assert_eq!(text(&app.command(&["AUTH", "app", "pa"]).await), "+OK\r\n");
    let refused = text(
        &app.command(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
            .await,
    );
    assert!(
        refused.starts_with("-NOPERM") && refused.contains("admin"),
        "{refused}"
    );
    assert!(text(&app.command(&["CLIENT", "KILL", "USER", "ops"]).await).starts_with("-NOPERM"));
    let mut ops = proxy.connect().await;
    assert_eq!(text(&ops.command(&["AUTH", "ops", "po"]).await), "+OK\r\n");
    assert_eq!(
        text(
            &ops.command(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
                .await
        ),
        "+OK\r\n"
    );
    assert_eq!(
        text(&direct.command(&["CONFIG", "GET", "maxmemory-policy"]).await),
        "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n"
    );
    assert_eq!(
        text(&ops.command(&["CLIENT", "KILL", "USER", "app"]).await),
        ":1\r\n"
    );
    app.expect_disconnect(Duration::from_secs(2)).await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn config_on_sqlite_answers_as_a_fresh_redis() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let proxy = Proxy::start(&sql_namespace(&format!(
        "kind = \"sqlite\"\npath = \"{}\"",
        dir.path().join("config.db").display()
    )))
    .await;
    let mut c = proxy.connect().await;
    assert_eq!(
        text(&c.command(&["CONFIG", "GET", "maxmemory-policy"]).await),
        "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n"
    );
    let many = text(&c.command(&["CONFIG", "GET", "*max-*-entries"]).await);
    assert!(many.contains("hash-max-listpack-entries"), "{many}");
    assert_eq!(
        text(&c.command(&["CONFIG", "GET", "nothing"]).await),
        "*0\r\n"
    );
    assert_eq!(
        text(
            &c.command(&["CONFIG", "SET", "hash-max-listpack-entries", "64"])
                .await
        ),
        "+OK\r\n"
    );
    // Any other setting would change nothing here: refused, to an admin (any client, with
    // no [[users]]) as to anyone.
    let refused = text(&c.command(&["CONFIG", "SET", "maxmemory", "1"]).await);
    assert!(
        refused.starts_with("-ERR holdfast: CONFIG SET 'maxmemory' has no effect"),
        "{refused}"
    );
    proxy.stop().await;
}

/// Namespace `b` (keys `b:…`) on Redis `two`, everything else on `one`.
fn two_redis_backends(one: &RedisServer, two: &RedisServer) -> String {
    format!(
        "[backends.one]\nkind = \"redis\"\nurl = \"{}\"\n\
         [backends.two]\nkind = \"redis\"\nurl = \"{}\"\n\
         [[namespaces]]\nname = \"b\"\nbackend = \"two\"\nprefixes = [\"b:\"]\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"one\"\n",
        one.url(),
        two.url()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_load_on_every_redis_backend_and_evalsha_outlives_an_empty_cache() {
    let one = RedisServer::start();
    let two = RedisServer::start();
    let proxy = Proxy::start(&two_redis_backends(&one, &two)).await;
    let mut c = proxy.connect().await;
    let script = "return redis.call('INCR', KEYS[1])";
    let sha = text(&c.command(&["SCRIPT", "LOAD", script]).await);
    let sha = sha.split("\r\n").nth(1).expect("a digest").to_string();
    assert_eq!(sha.len(), 40);
    // Wherever the keys route, the script is there.
    for server in [&one, &two] {
        assert_eq!(server.cmd(&["SCRIPT", "EXISTS", &sha]), "*1\r\n:1\r\n");
    }
    assert_eq!(
        text(&c.command(&["EVALSHA", &sha, "1", "b:n"]).await),
        ":1\r\n"
    );
    assert_eq!(
        text(
            &c.command(&[
                "SCRIPT",
                "EXISTS",
                &sha,
                "0000000000000000000000000000000000000000"
            ])
            .await
        ),
        "*2\r\n:1\r\n:0\r\n"
    );
    // One server loses its cache (as after a restart or a failover): EVALSHA still runs it,
    // and the client hears no NOSCRIPT.
    assert_eq!(two.cmd(&["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(
        text(&c.command(&["SCRIPT", "EXISTS", &sha]).await),
        "*1\r\n:0\r\n",
        "exists only where every backend has it"
    );
    assert_eq!(
        text(&c.command(&["EVALSHA", &sha, "1", "b:n"]).await),
        ":2\r\n"
    );
    assert_eq!(two.cmd(&["SCRIPT", "EXISTS", &sha]), "*1\r\n:1\r\n");
    // SCRIPT FLUSH through holdfast forgets it everywhere, holdfast included.
    assert_eq!(text(&c.command(&["SCRIPT", "FLUSH"]).await), "+OK\r\n");
    assert!(text(&c.command(&["EVALSHA", &sha, "1", "n"]).await).starts_with("-NOSCRIPT"));
    proxy.stop().await;
}

/// `FUNCTION LOAD` through holdfast reaches every Redis backend the client may reach; `FCALL`
/// is routed by its keys; a Redis restarted empty has the libraries loaded again at the next
/// `FCALL` (which never sees the missing function); a deleted library stays deleted.
#[tokio::test(flavor = "multi_thread")]
async fn functions_load_on_every_redis_backend_and_outlive_a_restart() {
    let mut one = RedisServer::start();
    let two = RedisServer::start();
    let proxy = Proxy::start(&two_redis_backends(&one, &two)).await;
    let mut c = proxy.connect().await;
    let code = "#!lua name=counter\nredis.register_function('bump', function(keys) return redis.call('INCR', keys[1]) end)";
    assert_eq!(
        text(&c.command(&["FUNCTION", "LOAD", code]).await),
        "$7\r\ncounter\r\n"
    );
    for server in [&one, &two] {
        assert!(server.cmd(&["FUNCTION", "LIST"]).contains("bump"));
    }
    assert_eq!(
        text(&c.command(&["FCALL", "bump", "1", "b:n"]).await),
        ":1\r\n"
    );
    assert_eq!(
        text(&c.command(&["FCALL", "bump", "1", "n"]).await),
        ":1\r\n"
    );
    assert_eq!(two.cmd(&["GET", "b:n"]), "$1\r\n1\r\n");
    one.restart();
    assert_eq!(one.cmd(&["FUNCTION", "LIST"]), "*0\r\n");
    assert_eq!(
        text(&c.command(&["FCALL", "bump", "1", "n"]).await),
        ":1\r\n"
    );
    assert!(one.cmd(&["FUNCTION", "LIST"]).contains("bump"));
    assert_eq!(
        text(&c.command(&["FUNCTION", "DELETE", "counter"]).await),
        "+OK\r\n"
    );
    assert_eq!(
        text(&c.command(&["FCALL", "bump", "1", "n"]).await),
        "-ERR Function not found\r\n"
    );
    assert_eq!(two.cmd(&["FUNCTION", "LIST"]), "*0\r\n");
    // A restore that flushes first leaves only its payload's libraries: one loaded through
    // holdfast before it is not brought back (redis-py's own function test).
    let payload = match c.command(&["FUNCTION", "DUMP"]).await {
        reply if reply.starts_with(b"$") => {
            let start = reply.iter().position(|b| *b == b'\n').unwrap_or(0) + 1;
            reply[start..reply.len() - 2].to_vec()
        }
        other => panic!("{}", text(&other)),
    };
    assert_eq!(
        text(&c.command(&["FUNCTION", "LOAD", code]).await),
        "$7\r\ncounter\r\n"
    );
    let restore: [&[u8]; 4] = [b"FUNCTION", b"RESTORE", &payload, b"FLUSH"];
    assert_eq!(text(&c.command_bytes(&restore).await), "+OK\r\n");
    assert_eq!(
        text(&c.command(&["FCALL", "bump", "1", "n"]).await),
        "-ERR Function not found\r\n"
    );
    proxy.stop().await;
}

/// redis-py's own `Lock` (acquire, extend, release, a blocking acquire), through holdfast on
/// Redis, before and after the backend restarts empty; after the restart its scripts run
/// without redis-py loading them again (holdfast answered the NOSCRIPT itself).
#[tokio::test(flavor = "multi_thread")]
async fn redis_py_lock_works_through_holdfast_after_the_backend_restarted_empty() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "main", "")).await;
    let py = redis_py("lock.py", LOCK_PY, &[&proxy.addr]);
    let mut child = py.child;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut out = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stdin = child.stdin.take().expect("stdin");
    let line = tokio::time::timeout(Duration::from_secs(30), out.next_line()).await;
    if !matches!(&line, Ok(Ok(Some(l))) if l == "phase 1 ok") {
        drop(stdin);
        let status = child.wait_with_output().await.expect("python3 ends");
        panic!("{line:?}: {}", String::from_utf8_lossy(&status.stderr));
    }
    redis.restart();
    assert_eq!(redis.cmd(&["DBSIZE"]), ":0\r\n");
    stdin.write_all(b"go\n").await.expect("stdin");
    let line = tokio::time::timeout(Duration::from_secs(30), out.next_line()).await;
    let status = child.wait_with_output().await.expect("python3 ends");
    assert!(
        matches!(&line, Ok(Ok(Some(l))) if l == "phase 2 ok, script loads 0"),
        "{line:?}: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    proxy.stop().await;
}

/// redis-py's `CommandsParser` finds each command's keys from holdfast's `COMMAND` replies
/// (and `COMMAND GETKEYS` for movable keys), as its own suite checks it against Redis.
const KEYS_PY: &str = r#"
import sys
import redis
from redis._parsers import CommandsParser

r = redis.Redis.from_url("redis://" + sys.argv[1])
p = CommandsParser(r)
cases = [
    (["GET", "foo"], ["foo"]),
    (["OBJECT", "encoding", "foo"], ["foo"]),
    (["MGET", "foo", "bar", "foobar"], ["foo", "bar", "foobar"]),
    (["EVAL", "return 1", 2, "key1", "key2", "a"], ["key1", "key2"]),
    (["EVAL", "return 1", 0, "key1", "key2"], []),
    (["PUBLISH", "foo", "bar"], ["foo"]),
    (["PUBSUB NUMSUB", "foo1", "foo2"], ["foo1", "foo2"]),
]
for args, want in cases:
    got = p.get_keys(r, *args)
    got = [k.decode() if isinstance(k, bytes) else k for k in got] if got is not None else None
    assert got == want, (args, got, want)
print("ok")
"#;

const LOCK_PY: &str = r#"
import sys, threading, time
import redis

addr = sys.argv[1]
r = redis.Redis.from_url("redis://" + addr)
other = redis.Redis.from_url("redis://" + addr)
loads = []
for client in (r, other):
    original = client.script_load
    def counted(script, original=original):
        loads.append(script)
        return original(script)
    client.script_load = counted

def exercise():
    lock = r.lock("resource", timeout=10, blocking_timeout=5, thread_local=False)
    assert lock.acquire(), "acquire"
    assert lock.extend(10), "extend"
    assert r.pttl("resource") > 10000, "extended"
    waiting = other.lock("resource", timeout=10, blocking_timeout=5)
    threading.Timer(0.5, lock.release).start()
    started = time.time()
    assert waiting.acquire(), "blocking acquire"
    assert time.time() - started >= 0.4, "it waited for the release"
    assert waiting.locked()
    waiting.release()
    assert not waiting.locked()

exercise()
print("phase 1 ok", flush=True)
sys.stdin.readline()
before = len(loads)
exercise()
print("phase 2 ok, script loads %d" % (len(loads) - before), flush=True)
"#;
