//! `kind = "cluster"` against a real six-node Redis Cluster: routing by slot, `MOVED`
//! followed after a slot changes owner, `CROSSSLOT` as the Cluster answers it, transactions on
//! one node, FLUSHALL on every primary, exact mode's token in its key's slot, `ASK` followed
//! with `ASKING` during a slot's migration, and a node without a known address reached where it
//! was asked. (A primary killed or frozen under load is in the chaos suite.)

#[allow(unused_imports)]
mod support;
use std::time::Duration;
use support::cluster::Cluster;
use support::*;

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_backend_routes_by_slot_and_answers_as_the_cluster_does() {
    let cluster = Cluster::start();
    let nodes: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    let proxy = Proxy::start(&format!(
        r#"
[backends.big]
kind = "cluster"
nodes = [{}]
pool_size = 2
[[namespaces]]
name = "exact"
prefixes = ["x:"]
backend = "big"
reply_mode = "exact"
[[namespaces]]
name = "main"
backend = "big"
"#,
        nodes[..2].join(", ")
    ))
    .await;
    let mut conn = proxy.connect().await;

    // Keys spread over every primary, each stored where the cluster says it lives.
    for i in 0..60 {
        let key = format!("k{i}");
        assert_eq!(
            conn.command(&["SET", &key, &format!("v{i}")]).await,
            b"+OK\r\n"
        );
    }
    let mut owners = std::collections::HashSet::new();
    for i in 0..60 {
        let key = format!("k{i}");
        assert_eq!(
            cluster.get(&key),
            format!("${}\r\nv{i}\r\n", 1 + i.to_string().len())
        );
        owners.insert(cluster.primary_of(&key));
        assert_eq!(
            text(&conn.command(&["GET", &key]).await),
            format!("${}\r\nv{i}\r\n", 1 + i.to_string().len())
        );
    }
    assert_eq!(owners.len(), 3, "the keys should cover every primary");

    // Several slots in one command: refused as the Cluster refuses it, nothing applied.
    let cross = text(&conn.command(&["MSET", "k1", "a", "k2", "b"]).await);
    assert!(cross.starts_with("-CROSSSLOT"), "{cross}");
    assert_eq!(cluster.get("k1"), "$2\r\nv1\r\n");
    // One hash tag: one slot.
    assert_eq!(
        conn.command(&["MSET", "{t}a", "1", "{t}b", "2"]).await,
        b"+OK\r\n"
    );
    assert_eq!(
        text(&conn.command(&["MGET", "{t}a", "{t}b"]).await),
        "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );

    // A transaction runs on its keys' node; keys of several slots are refused before
    // anything is sent.
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["INCR", "{t}n"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["INCR", "{t}n"]).await, b"+QUEUED\r\n");
    assert_eq!(text(&conn.command(&["EXEC"]).await), "*2\r\n:1\r\n:2\r\n");
    assert_eq!(conn.command(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", "k1", "x"]).await, b"+QUEUED\r\n");
    assert_eq!(conn.command(&["SET", "k2", "y"]).await, b"+QUEUED\r\n");
    let refused = text(&conn.command(&["EXEC"]).await);
    assert!(refused.starts_with("-CROSSSLOT"), "{refused}");
    assert_eq!(cluster.get("k1"), "$2\r\nv1\r\n");

    // A slot moved to another primary: the old owner answers MOVED, which is followed.
    let key = "moving-key";
    let from = cluster.primary_of(key);
    let to = (0..6)
        .find(|&i| {
            i != from
                && cluster.nodes[i]
                    .cmd(&["INFO", "replication"])
                    .contains("role:master")
        })
        .expect("another primary");
    assert_eq!(conn.command(&["SET", key, "before"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["DEL", key]).await, b":1\r\n");
    let slot = cluster.nodes[0]
        .cmd(&["CLUSTER", "KEYSLOT", key])
        .trim_start_matches(':')
        .trim()
        .to_string();
    let target_id = cluster.nodes[to].cmd(&["CLUSTER", "MYID"]);
    let target_id = target_id.lines().nth(1).expect("an id").to_string();
    // The slot is empty, so it can be reassigned without migrating keys: the new owner
    // first, then the others.
    let is_primary = |i: usize| {
        cluster.nodes[i]
            .cmd(&["INFO", "replication"])
            .contains("role:master")
    };
    let order = std::iter::once(to).chain((0..6).filter(|&i| i != to && is_primary(i)));
    for i in order {
        let reply = cluster.nodes[i].cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        assert_eq!(reply, "+OK\r\n", "node {i}");
    }
    assert_eq!(conn.command(&["SET", key, "after"]).await, b"+OK\r\n");
    assert_eq!(cluster.nodes[to].cmd(&["GET", key]), "$5\r\nafter\r\n");

    // Exact mode: the token lives in the key's slot, so the script runs on one node.
    for want in 1..=3 {
        assert_eq!(
            text(&conn.command(&["INCR", "x:count"]).await),
            format!(":{want}\r\n")
        );
    }
    assert_eq!(cluster.get("x:count"), "$1\r\n3\r\n");

    // Whole-keyspace commands: KEYS would be one node's part, so it is refused; FLUSHALL
    // reaches every primary.
    let keys = text(&conn.command(&["KEYS", "*"]).await);
    assert!(keys.contains("not served on a cluster backend"), "{keys}");
    assert_eq!(conn.command(&["FLUSHALL"]).await, b"+OK\r\n");
    for i in 0..6 {
        if cluster.nodes[i]
            .cmd(&["INFO", "replication"])
            .contains("role:master")
        {
            assert_eq!(cluster.nodes[i].cmd(&["DBSIZE"]), ":0\r\n", "node {i}");
        }
    }
    proxy.stop().await;
}

/// holdfast on `cluster` (seeded with every node), one catch-all namespace in `mode`, one
/// pooled connection.
async fn one_namespace(cluster: &Cluster, mode: &str) -> Proxy {
    let nodes: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    Proxy::start(&format!(
        "[backends.big]\nkind = \"cluster\"\nnodes = [{}]\npool_size = 1\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"big\"\nreply_mode = \"{mode}\"\n",
        nodes.join(", ")
    ))
    .await
}

/// A key whose braces make no hash tag (`a}b`, `{}x`) hashes whole; its
/// token key must land in the same slot, or exact mode's script spans two slots.
#[tokio::test(flavor = "multi_thread")]
async fn exact_mode_on_a_cluster_keeps_a_token_in_the_slot_of_a_key_without_a_hash_tag() {
    let cluster = Cluster::start();
    let proxy = one_namespace(&cluster, "exact").await;
    let mut conn = proxy.connect().await;
    for key in ["a}b", "{}x", "x{}{y}", "}", "{user1}:a", "{{a}}"] {
        assert_eq!(text(&conn.command(&["INCR", key]).await), ":1\r\n", "{key}");
        assert_eq!(cluster.get(key), "$1\r\n1\r\n", "{key}");
    }
    proxy.stop().await;
}

/// Pipelined commands of one client take effect in the order sent on a Cluster too, though
/// their keys live on different nodes. With the first write's node frozen, the second write
/// (to another node) must not land before the first: sent to both nodes at once, it would,
/// and a client that pipelined `SET a`, `SET b` could see `b` without `a`.
#[tokio::test(flavor = "multi_thread")]
async fn pipelined_writes_to_different_nodes_take_effect_in_the_order_sent() {
    let cluster = Cluster::start();
    let proxy = one_namespace(&cluster, "fast").await;
    let first = "first";
    let on_first = cluster.primary_of(first);
    let second = (0..100)
        .map(|i| format!("second{i}"))
        .find(|k| cluster.primary_of(k) != on_first)
        .expect("a key on another primary");
    let on_second = cluster.primary_of(&second);
    let mut conn = proxy.connect().await;
    // Connected to every primary before the freeze.
    assert_eq!(conn.command(&["SET", first, "0"]).await, b"+OK\r\n");
    assert_eq!(conn.command(&["SET", &second, "0"]).await, b"+OK\r\n");

    cluster.nodes[on_first].pause();
    let mut pipeline = encode_str(&["SET", first, "1"]);
    pipeline.extend(encode_str(&["SET", &second, "1"]));
    conn.send(&pipeline).await;
    // Well below cluster-node-timeout, so the frozen primary is not failed over.
    let start = std::time::Instant::now();
    let mut overtook = false;
    while start.elapsed() < std::time::Duration::from_millis(700) && !overtook {
        overtook = cluster.nodes[on_second].cmd(&["GET", &second]) == "$1\r\n1\r\n";
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    cluster.nodes[on_first].resume();
    let replies = conn.read_replies(2).await;
    assert_eq!(replies, [b"+OK\r\n".to_vec(), b"+OK\r\n".to_vec()]);
    assert!(
        !overtook,
        "the second write took effect while the first was held on its frozen node"
    );
    assert_eq!(cluster.get(first), "$1\r\n1\r\n");
    assert_eq!(cluster.get(&second), "$1\r\n1\r\n");

    // A pipeline whose keys live on one node is answered as before.
    let same: Vec<String> = (0..200)
        .map(|i| format!("k{i}"))
        .filter(|k| cluster.primary_of(k) == on_second)
        .take(20)
        .collect();
    let mut pipeline = Vec::new();
    for (i, key) in same.iter().enumerate() {
        pipeline.extend(encode_str(&["SET", key, &i.to_string()]));
    }
    conn.send(&pipeline).await;
    let replies = conn.read_replies(same.len()).await;
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, b"+OK\r\n");
        let want = format!("${}\r\n{i}\r\n", i.to_string().len());
        assert_eq!(cluster.get(&same[i]), want);
    }
    proxy.stop().await;
}

/// A one-node cluster that does not know its own address (no `cluster-announce-ip`) names
/// itself with an empty host in `CLUSTER SLOTS`; Redis documents that a client then uses
/// the address it asked. holdfast does, and serves at once rather than holding every
/// request while it tries to resolve an empty name.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_does_not_know_its_address_is_reached_where_it_was_asked() {
    let bus = free_port().to_string();
    let node = RedisServer::start_with(&["--cluster-enabled", "yes", "--cluster-port", &bus]);
    assert_eq!(
        node.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]),
        "+OK\r\n"
    );
    let start = std::time::Instant::now();
    while !node.cmd(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the node never came up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let slots = node.cmd(&["CLUSTER", "SLOTS"]);
    assert!(
        slots.contains("$0\r\n\r\n"),
        "the case under test: an empty host in {slots:?}"
    );
    let proxy = Proxy::start(&format!(
        "[backends.one]\nkind = \"cluster\"\nnodes = [\"{}\"]\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"one\"\n",
        node.addr()
    ))
    .await;
    let mut conn = proxy.connect().await;
    let asked = std::time::Instant::now();
    assert_eq!(text(&conn.command(&["SET", "k", "v"]).await), "+OK\r\n");
    assert_eq!(text(&conn.command(&["GET", "k"]).await), "$1\r\nv\r\n");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "held {:?}",
        asked.elapsed()
    );
    proxy.stop().await;
}

/// A slot being migrated: the source node answers `ASK` for a key it no longer has, and
/// holdfast sends `ASKING` and the command back to back to the target node, where the key
/// then lives; the client hears the command's own reply, never the redirection.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_a_slot_being_migrated_is_followed_with_asking() {
    let cluster = Cluster::start();
    let proxy = one_namespace(&cluster, "fast").await;
    let key = "asked";
    let from = cluster.primary_of(key);
    let to = (0..6)
        .find(|&i| {
            i != from
                && cluster.nodes[i]
                    .cmd(&["INFO", "replication"])
                    .contains("role:master")
        })
        .expect("another primary");
    let id = |i: usize| {
        let reply = cluster.nodes[i].cmd(&["CLUSTER", "MYID"]);
        reply.lines().nth(1).expect("a node id").to_string()
    };
    let slot = cluster.nodes[from].cmd(&["CLUSTER", "KEYSLOT", key]);
    let slot = slot.trim().trim_start_matches(':').to_string();
    let (from_id, to_id) = (id(from), id(to));
    assert_eq!(
        cluster.nodes[to].cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
        "+OK\r\n"
    );
    assert_eq!(
        cluster.nodes[from].cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
        "+OK\r\n"
    );
    assert!(
        cluster.nodes[from].cmd(&["GET", key]).starts_with("-ASK"),
        "the case under test: the source node answers ASK"
    );

    let mut conn = proxy.connect().await;
    assert_eq!(text(&conn.command(&["SET", key, "v"]).await), "+OK\r\n");
    assert_eq!(text(&conn.command(&["GET", key]).await), "$1\r\nv\r\n");
    let mut target = RawConn::connect(&cluster.nodes[to].addr()).await;
    assert_eq!(text(&target.command(&["ASKING"]).await), "+OK\r\n");
    assert_eq!(
        text(&target.command(&["GET", key]).await),
        "$1\r\nv\r\n",
        "written on the target node"
    );
    proxy.stop().await;
}

/// Pub/Sub on a Cluster: channels and patterns on one primary (a Cluster delivers a
/// `PUBLISH` on every node), shard channels at their slot's owner, one connection per slot.
#[tokio::test(flavor = "multi_thread")]
async fn pubsub_on_a_cluster_delivers_channels_everywhere_and_shard_channels_by_slot() {
    let cluster = Cluster::start();
    let proxy = one_namespace(&cluster, "fast").await;
    let mut sub = proxy.connect().await;
    sub.send(&encode_str(&["SUBSCRIBE", "news"])).await;
    sub.read_reply().await;
    // Two slots (on two primaries, as `--cluster create` splits them): one call, two lines.
    let a = "{user1}:events".to_string();
    let b = (2..100)
        .map(|i| format!("{{user{i}}}:events"))
        .find(|b| cluster.primary_of(b) != cluster.primary_of(&a))
        .expect("a channel on another primary");
    let (a, b) = (a.as_str(), b.as_str());
    sub.send(&encode_str(&["SSUBSCRIBE", a, b])).await;
    assert_eq!(
        sub.read_replies(2)
            .await
            .iter()
            .map(|r| text(r))
            .collect::<Vec<_>>(),
        vec![
            format!("*3\r\n$10\r\nssubscribe\r\n${}\r\n{a}\r\n:1\r\n", a.len()),
            format!("*3\r\n$10\r\nssubscribe\r\n${}\r\n{b}\r\n:2\r\n", b.len()),
        ]
    );
    for channel in [a, b] {
        let owner = &cluster.nodes[cluster.primary_of(channel)];
        assert!(
            owner.cmd(&["PUBSUB", "SHARDCHANNELS"]).contains(channel),
            "{channel} not at its slot's owner"
        );
    }
    let mut publisher = proxy.connect().await;
    for channel in [a, b] {
        // At the slot's owner, where the subscription is: counted there.
        let reply = publisher.command(&["SPUBLISH", channel, "s"]).await;
        assert_eq!(text(&reply), ":1\r\n", "{channel}");
        assert_eq!(
            text(&sub.read_reply().await),
            format!(
                "*3\r\n$8\r\nsmessage\r\n${}\r\n{channel}\r\n$1\r\ns\r\n",
                channel.len()
            )
        );
    }
    // One connection per slot: a client's shard channels span at most 64 slots.
    let mut wide = proxy.connect().await;
    let mut slots = std::collections::HashSet::new();
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("wide{i}");
        if slots.insert(cluster_slot(&name)) {
            names.push(name);
        }
        if names.len() == 65 {
            break;
        }
    }
    for name in &names[..64] {
        wide.command(&["SSUBSCRIBE", name]).await;
    }
    let refused = text(&wide.command(&["SSUBSCRIBE", &names[64]]).await);
    assert!(refused.contains("at most 64 hash slots"), "{refused}");
    drop(wide);
    // Whatever node a PUBLISH reaches, the Cluster delivers it to the subscriber's.
    publisher.command(&["PUBLISH", "news", "n"]).await;
    assert_eq!(
        text(&sub.read_reply().await),
        "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\nn\r\n"
    );
    proxy.stop().await;
}

/// A key's hash slot (CRC16/XMODEM of the key, mod 16384; these names have no hash tag).
fn cluster_slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for byte in key.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A client's pipelined run on a Cluster goes by each request's first key, and a redirection
/// met by a run is followed, not handed to the client; a FLUSHALL that flushed some primaries
/// before one refused it is in doubt, not an error that reads as "not applied".
#[tokio::test(flavor = "multi_thread")]
async fn pipelined_runs_follow_their_keys_and_redirections() {
    let cluster = Cluster::start();
    let nodes: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    let proxy = Proxy::start(&format!(
        "[backends.big]\nkind = \"cluster\"\nnodes = [{}]\npool_size = 1\n\
         [[namespaces]]\nname = \"main\"\nbackend = \"big\"\nreply_mode = \"fast\"\n\
         acquire_timeout = \"1s\"\n[namespaces.retry]\nmax_attempts = 5\nmin_delay = \"100ms\"\nmax_delay = \"1s\"\n",
        nodes.join(", ")
    ))
    .await;
    let mut conn = proxy.connect().await;
    let is_primary = |i: usize| {
        cluster.nodes[i]
            .cmd(&["INFO", "replication"])
            .contains("role:master")
    };

    // `OBJECT ENCODING k` routed by its key, not by the word ENCODING: no redirection met.
    let word = cluster.primary_of("ENCODING");
    let key = (0..100)
        .map(|i| format!("enc{i}"))
        .find(|k| cluster.primary_of(k) != word)
        .expect("a key on another primary");
    assert_eq!(conn.command(&["SET", &key, "v"]).await, b"+OK\r\n");
    let not_attempted = r#"holdfast_dispatches_total{class="not_attempted"}"#;
    let before = proxy.metric(not_attempted).await;
    let object = support::resp::encode_str(&["OBJECT", "ENCODING", &key]);
    conn.send(&[object.clone(), object].concat()).await;
    for reply in conn.read_replies(2).await {
        assert_eq!(text(&reply), "$6\r\nembstr\r\n");
    }
    assert_eq!(
        proxy.metric(not_attempted).await,
        before,
        "a redirection met"
    );

    // A slot moved to another primary while holdfast's map still names the old one: a
    // pipelined run of writes meets MOVED, and is retried one by one, following it.
    let moving = "moving-run";
    let from = cluster.primary_of(moving);
    let to = (0..6)
        .find(|&i| i != from && is_primary(i))
        .expect("another primary");
    let slot = cluster_slot(moving).to_string();
    let target_id = cluster.nodes[to].cmd(&["CLUSTER", "MYID"]);
    let target_id = target_id.lines().nth(1).expect("an id").to_string();
    for i in std::iter::once(to).chain((0..6).filter(|&i| i != to && is_primary(i))) {
        let reply = cluster.nodes[i].cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        assert_eq!(reply, "+OK\r\n", "node {i}");
    }
    let mut run = Vec::new();
    for value in ["a", "b", "c"] {
        run.extend_from_slice(&support::resp::encode_str(&["SET", moving, value]));
    }
    conn.send(&run).await;
    for reply in conn.read_replies(3).await {
        assert_eq!(text(&reply), "+OK\r\n");
    }
    assert_eq!(cluster.nodes[to].cmd(&["GET", moving]), "$1\r\nc\r\n");

    // FLUSHALL refused by the last primary in slot order, after the others flushed: in doubt.
    let last = (0..10_000)
        .map(|i| format!("high{i}"))
        .find(|k| cluster_slot(k) == 16383 || cluster_slot(k) > 16000)
        .map(|k| cluster.primary_of(&k))
        .expect("a key in the last slots");
    for i in 0..100 {
        assert_eq!(
            conn.command(&["SET", &format!("f{i}"), "v"]).await,
            b"+OK\r\n"
        );
    }
    assert_eq!(
        cluster.nodes[last].cmd(&["ACL", "SETUSER", "default", "-flushall"]),
        "+OK\r\n"
    );
    let flushed = text(&conn.command(&["FLUSHALL"]).await);
    assert!(flushed.starts_with("-INDOUBT"), "{flushed}");
    assert!(flushed.contains("NOPERM"), "{flushed}");
    for i in (0..6).filter(|&i| is_primary(i)) {
        let size = cluster.nodes[i].cmd(&["DBSIZE"]);
        assert_eq!(size == ":0\r\n", i != last, "node {i}: {size}");
    }
    proxy.stop().await;
}
