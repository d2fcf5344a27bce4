//! Namespace isolation for users limited to some namespaces, against a real redis-server and a
//! SQLite file: the rows of the issue that found the holes (scripts, `SORT` patterns and
//! destinations, functions), scripts confined by a Redis ACL user when a namespace allows
//! them, and a walk over the whole command table: every key position given a key of another
//! namespace is refused, and every keyless command is refused or allowed for a reason written
//! here.

use crate::support::*;
#[allow(unused_imports)]
use holdfast::command::table::{self, Exec, Keys};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

const NOPERM_CHANNELS: &str =
    "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n";

const NOPERM_KEYS: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

/// `tenant_a` (`a:`), `tenant_b` (`secret:`) and the catch-all on `backend` (TOML body);
/// alice may reach `tenant_a` only, carol `tenant_a` and the catch-all (whose backend also
/// holds `tenant_b`), root everything. `extra` is appended.
fn tenants(backend: &str, extra: &str) -> String {
    format!(
        "[backends.shared]\n{backend}\n\
         [[namespaces]]\nname = \"tenant_a\"\nbackend = \"shared\"\nprefixes = [\"a:\"]\n\
         [[namespaces]]\nname = \"tenant_b\"\nbackend = \"shared\"\nprefixes = [\"secret:\"]\n\
         channels = [\"secret.\"]\n\
         [[namespaces]]\nname = \"default\"\nbackend = \"shared\"\n\
         [[users]]\nname = \"alice\"\npassword = \"pa\"\nnamespaces = [\"tenant_a\"]\n\
         [[users]]\nname = \"carol\"\npassword = \"pc\"\nnamespaces = [\"tenant_a\", \"default\"]\n\
         [[users]]\nname = \"root\"\npassword = \"pr\"\n\
         {extra}"
    )
}

async fn as_user(proxy: &Proxy, user: &str, password: &str) -> RawConn {
    let mut conn = proxy.connect().await;
    assert_eq!(
        text(&conn.command(&["AUTH", user, password]).await),
        "+OK\r\n"
    );
    conn
}

/// The table, row by row, as a curious tenant would try it.
#[tokio::test(flavor = "multi_thread")]
async fn a_limited_user_cannot_reach_another_namespace_through_scripts_or_patterns() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&tenants(
        &format!("kind = \"redis\"\nurl = \"{}\"", redis.url()),
        // A namespace whose prefix extends alice's: `a:*` patterns reach it too.
        "[[namespaces]]\nname = \"inner\"\nbackend = \"shared\"\nprefixes = [\"a:inner:\"]\n",
    ))
    .await;
    assert_eq!(redis.cmd(&["SET", "secret:b", "bob-data"]), "+OK\r\n");
    assert_eq!(
        redis.cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('peek', function(k) return redis.call('GET', 'secret:b') end)"
        ]),
        "$3\r\nlib\r\n"
    );
    let mut alice = as_user(&proxy, "alice", "pa").await;
    assert_eq!(
        text(&alice.command(&["GET", "secret:b"]).await),
        NOPERM_KEYS
    );
    for keyspace in [
        &["KEYS", "*"][..],
        &["SCAN", "0"],
        &["RANDOMKEY"],
        &["DBSIZE"],
    ] {
        assert!(text(&alice.command(keyspace).await).starts_with("-NOPERM"));
    }
    let eval = "return redis.call('GET','secret:b')";
    assert_eq!(
        text(&alice.command(&["EVAL", eval, "1", "a:x"]).await),
        "-NOPERM this user has no permissions to run the 'eval' command\r\n"
    );
    assert_eq!(
        text(&alice.command(&["EVAL_RO", eval, "1", "a:x"]).await),
        "-NOPERM this user has no permissions to run the 'eval_ro' command\r\n"
    );
    assert_eq!(
        text(&alice.command(&["FCALL", "peek", "1", "a:x"]).await),
        "-NOPERM this user has no permissions to run the 'fcall' command\r\n"
    );
    assert_eq!(text(&alice.command(&["RPUSH", "a:l", "b"]).await), ":1\r\n");
    for sort in [
        &["SORT", "a:l", "BY", "nosort", "GET", "secret:*"][..],
        &["SORT", "a:l", "BY", "secret:*"],
        &["SORT_RO", "a:l", "BY", "nosort", "GET", "secret:*"],
        &["SORT", "a:l", "BY", "nosort", "GET", "*"],
        &["SORT", "a:l", "BY", "nosort", "GET", "a:*"],
        &["SORT", "a:l", "BY", "a:inner:*"],
        &["SORT", "a:l", "STORE", "secret:b"],
    ] {
        assert_eq!(text(&alice.command(sort).await), NOPERM_KEYS, "{sort:?}");
    }
    assert_eq!(
        text(
            &alice
                .command(&["GEORADIUS", "a:g", "0", "0", "1", "km", "STORE", "secret:b"])
                .await
        ),
        NOPERM_KEYS
    );
    // Patterns inside alice's own namespace (and none other's) are hers.
    assert_eq!(
        text(&alice.command(&["SET", "a:v_b", "mine"]).await),
        "+OK\r\n"
    );
    assert_eq!(
        text(
            &alice
                .command(&[
                    "SORT", "a:l", "BY", "nosort", "GET", "#", "GET", "a:v_*", "GET", "nostar"
                ])
                .await
        ),
        "*3\r\n$1\r\nb\r\n$4\r\nmine\r\n$-1\r\n"
    );
    assert_eq!(
        text(
            &alice
                .command(&["SORT", "a:l", "ALPHA", "STORE", "a:sorted"])
                .await
        ),
        ":1\r\n"
    );
    // No client copies into another database: exact mode's tokens live in one.
    assert!(
        text(&alice.command(&["COPY", "a:l", "a:m", "DB", "15"]).await)
            .starts_with("-ERR holdfast: COPY with DB")
    );
    // The data is where it was.
    assert_eq!(redis.cmd(&["GET", "secret:b"]), "$8\r\nbob-data\r\n");

    // carol reaches the catch-all, whose backend holds tenant_b too: the keyspace and the
    // server's secrets are not hers.
    let mut carol = as_user(&proxy, "carol", "pc").await;
    for refused in [
        &["KEYS", "*"][..],
        &["SCAN", "0"],
        &["RANDOMKEY"],
        &["DBSIZE"],
        &["FLUSHALL"],
        &["EVAL", "return 1", "0"],
        &["CONFIG", "GET", "*"],
        &["CONFIG", "GET", "REQUIREPASS"],
    ] {
        assert!(
            text(&carol.command(refused).await).starts_with("-NOPERM"),
            "{refused:?}"
        );
    }
    assert_eq!(
        text(&carol.command(&["CONFIG", "GET", "maxmemory-policy"]).await),
        "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n"
    );
    // Without a limit, everything is as Redis answers it.
    let mut root = as_user(&proxy, "root", "pr").await;
    assert_eq!(
        text(&root.command(&["EVAL", eval, "1", "a:x"]).await),
        "$8\r\nbob-data\r\n"
    );
    assert_eq!(
        text(&root.command(&["FCALL", "peek", "1", "a:x"]).await),
        "$8\r\nbob-data\r\n"
    );
    assert!(
        text(&root.command(&["COPY", "a:l", "a:m", "DB", "15"]).await)
            .starts_with("-ERR holdfast: COPY with DB")
    );
    proxy.stop().await;
}

/// `allow_scripts` on a namespace whose backend connects as a Redis ACL user confined to the
/// namespace's prefix: alice's scripts run, and Redis refuses the key outside.
#[tokio::test(flavor = "multi_thread")]
async fn scripts_allowed_on_a_namespace_run_confined_by_its_redis_user() {
    let redis = RedisServer::start();
    assert_eq!(redis.cmd(&["SET", "secret:b", "bob-data"]), "+OK\r\n");
    // What docs/operating.md tells an operator to create for a namespace `a:`.
    assert_eq!(
        redis.cmd(&[
            "ACL",
            "SETUSER",
            "tenant_a",
            "on",
            ">pw-a",
            "resetkeys",
            "~a:*",
            "~{*}hf:tok:*",
            "+@all",
            "-@admin",
            "-keys",
            "-scan",
            "-randomkey",
            "-dbsize",
            "-flushall",
            "-flushdb",
            "-swapdb",
            "-move",
            "-migrate",
            "-function",
            "-script|flush",
        ]),
        "+OK\r\n"
    );
    let confined = format!("redis://tenant_a:pw-a@{}", redis.addr());
    for mode in ["fast", "exact"] {
        let proxy = Proxy::start(&format!(
            "[backends.shared]\nkind = \"redis\"\nurl = \"{url}\"\n\
             [backends.as_a]\nkind = \"redis\"\nurl = \"{confined}\"\n\
             [[namespaces]]\nname = \"tenant_a\"\nbackend = \"as_a\"\nprefixes = [\"a:\"]\n\
             allow_scripts = true\nreply_mode = \"{mode}\"\n\
             [[namespaces]]\nname = \"tenant_b\"\nbackend = \"shared\"\nprefixes = [\"secret:\"]\n\
             [[namespaces]]\nname = \"default\"\nbackend = \"shared\"\n\
             [[users]]\nname = \"alice\"\npassword = \"pa\"\nnamespaces = [\"tenant_a\"]\n",
            url = redis.url(),
        ))
        .await;
        let mut alice = as_user(&proxy, "alice", "pa").await;
        assert_eq!(
            text(
                &alice
                    .command(&["EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "a:x"])
                    .await
            ),
            "+OK\r\n",
            "{mode}"
        );
        let outside = text(
            &alice
                .command(&["EVAL", "return redis.call('GET','secret:b')", "1", "a:x"])
                .await,
        );
        // Redis 7.0's own refusal inside a script.
        assert!(
            outside.starts_with("-ERR The user executing the script can't access")
                && !outside.contains("bob"),
            "{mode}: {outside}"
        );
        // Writes still go through exact mode's tokens under the confined user.
        let counter = format!("a:n:{mode}");
        assert_eq!(
            text(&alice.command(&["INCR", &counter]).await),
            ":1\r\n",
            "{mode}"
        );
        proxy.stop().await;
    }
    assert_eq!(redis.cmd(&["GET", "a:x"]), "$1\r\nv\r\n");
}

/// The arguments a walk sends for `spec`: its name (and subcommand), then filler up to its
/// arity and two more, key counts set to 2, and the keys where the table finds them.
fn sample(spec: &table::Spec) -> Vec<String> {
    let mut args: Vec<String> = spec.name.split('|').map(str::to_string).collect();
    let special: Option<&[&str]> = match spec.name {
        "XREAD" => Some(&["STREAMS", "K", "K", "0", "0"]),
        "XREADGROUP" => Some(&["GROUP", "g", "c", "STREAMS", "K", "K", ">", ">"]),
        "SORT" => Some(&["K", "STORE", "K"]),
        "GEORADIUS" => Some(&["K", "0", "0", "1", "km", "STORE", "K"]),
        "GEORADIUSBYMEMBER" => Some(&["K", "m", "1", "km", "STOREDIST", "K"]),
        _ => None,
    };
    if let Some(rest) = special {
        args.extend(rest.iter().map(|s| s.to_string()));
        return args;
    }
    let want = spec.arity.unsigned_abs() as usize + if spec.arity < 0 { 2 } else { 0 };
    while args.len() < want {
        args.push("x".to_string());
    }
    if let Keys::Numkeys { at, .. } = spec.keys {
        while args.len() < at + 3 {
            args.push("x".to_string());
        }
        args[at] = "2".to_string();
    }
    args
}

/// Keyless commands a limited user may run, and why each is harmless to other namespaces.
const KEYLESS_ALLOWED: &[(&str, &str)] = &[
    ("TIME", "the server's clock"),
    ("LASTSAVE", "when the server last saved: no data"),
    (
        "WAIT",
        "waits for this client's own writes to reach replicas",
    ),
    ("OBJECT|HELP", "help text"),
    ("XINFO|HELP", "help text"),
    ("XGROUP|HELP", "help text"),
    (
        "CONFIG|GET",
        "a named, non-secret parameter (globs and passwords are refused)",
    ),
    (
        "SCRIPT|LOAD",
        "caches a script, which runs only through EVALSHA, itself checked",
    ),
    ("SCRIPT|EXISTS", "whether scripts are cached: no data"),
    (
        "FUNCTION|LIST",
        "the libraries loaded: code, no data (as SCRIPT EXISTS, for functions)",
    ),
    (
        "FUNCTION|STATS",
        "how many libraries and functions: no data",
    ),
    (
        "FUNCTION|DUMP",
        "the libraries' code, as FUNCTION LIST WITHCODE shows it: no data",
    ),
];

/// Keyless commands refused to a user limited to some namespaces whose catch-all shares its
/// backend with one the user may not reach.
/// `CONFIG SET` is refused to every user but an admin.
const KEYLESS_REFUSED: &[&str] = &[
    "KEYS",
    "SCAN",
    "RANDOMKEY",
    "DBSIZE",
    "FLUSHALL",
    "FLUSHDB",
    "SCRIPT|FLUSH",
    "SCRIPT|KILL",
    "FUNCTION|LOAD",
    "FUNCTION|DELETE",
    "FUNCTION|FLUSH",
    "FUNCTION|RESTORE",
    "FUNCTION|KILL",
    "CONFIG|SET",
];

/// Walks the whole table as carol on `backend`; returns (checked, refused, allowed).
async fn walk(backend: &str) -> (usize, usize, usize) {
    let proxy = Proxy::start(&tenants(backend, "")).await;
    let mut carol = as_user(&proxy, "carol", "pc").await;
    let (mut checked, mut refused, mut allowed) = (0, 0, 0);
    let mut seen_keyless = Vec::new();
    for spec in holdfast::command::all().iter().filter(|s| !s.container) {
        if let Exec::Local(_) = spec.exec {
            if spec.name != "WATCH" {
                // About this connection only (PING, AUTH, CLIENT, MULTI, ...); holdfast
                // answers them itself and reaches no backend.
                allowed += 1;
                continue;
            }
        }
        checked += 1;
        let args = sample(spec);
        if spec.reach == table::Reach::Channel {
            // Routed by its channel, whatever its keys: another namespace's is refused,
            // the user's own served.
            let mut args = args.clone();
            args[1] = "secret.c".to_string();
            let sent: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply = text(&carol.command(&sent).await);
            assert_eq!(reply, NOPERM_CHANNELS, "{sent:?}");
            args[1] = "secret:k".to_string();
            let sent: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply = text(&carol.command(&sent).await);
            assert!(reply.starts_with(':'), "{sent:?}: {reply}");
            refused += 1;
            continue;
        }
        let raw: Vec<bytes::Bytes> = args.iter().map(|a| bytes::Bytes::from(a.clone())).collect();
        let keys: Vec<usize> = table::key_indices(spec.keys, &raw).collect();
        if keys.is_empty() {
            let reply = text(
                &carol
                    .command(&args.iter().map(String::as_str).collect::<Vec<_>>())
                    .await,
            );
            let name = spec.name;
            seen_keyless.push(name);
            if KEYLESS_REFUSED.contains(&name) {
                assert!(reply.starts_with("-NOPERM"), "{name}: {reply}");
                refused += 1;
            } else {
                assert!(
                    KEYLESS_ALLOWED.iter().any(|(n, _)| *n == name),
                    "{name} is keyless and allowed ({reply}): refuse it, or say why it is harmless"
                );
                assert!(!reply.starts_with("-NOPERM"), "{name}: {reply}");
                allowed += 1;
            }
            continue;
        }
        // Each key position in turn holds another namespace's key, the others alice's.
        for outside in &keys {
            let mut args = args.clone();
            for at in &keys {
                args[*at] = if at == outside { "secret:k" } else { "a:k" }.to_string();
            }
            let sent: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply = text(&carol.command(&sent).await);
            assert_eq!(reply, NOPERM_KEYS, "{sent:?}");
        }
        refused += 1;
    }
    for (name, _) in KEYLESS_ALLOWED {
        assert!(
            seen_keyless.contains(name),
            "{name} is no keyless row any more"
        );
    }
    proxy.stop().await;
    (checked, refused, allowed)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_whole_table_walked_as_a_limited_user_on_redis() {
    let redis = RedisServer::start();
    let counts = walk(&format!("kind = \"redis\"\nurl = \"{}\"", redis.url())).await;
    println!("table walk on Redis: (checked, refused, allowed) = {counts:?}");
    assert_eq!(
        redis.cmd(&["DBSIZE"]),
        ":0\r\n",
        "a refused command applied"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_whole_table_walked_as_a_limited_user_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("walk.db");
    let counts = walk(&format!("kind = \"sqlite\"\npath = \"{}\"", db.display())).await;
    println!("table walk on SQLite: (checked, refused, allowed) = {counts:?}");
}
