//! A real Redis Cluster on loopback: three primaries and three replicas, each a
//! `redis-server` child in its own temp dir (its `nodes.conf` there too), joined by
//! `redis-cli --cluster create`. Nodes are stopped by PID when dropped.
#![allow(dead_code)]

use super::redis::RedisServer;
use std::process::Command;
use std::time::{Duration, Instant};

/// `cluster-node-timeout`: how long a primary must be unreachable before its replica is
/// promoted. Much lower flaps on a loaded 2-core machine.
pub const NODE_TIMEOUT_MS: u64 = 2000;

pub struct Cluster {
    /// Primaries first (as `--cluster create` assigns them), then replicas.
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Starts six nodes, creates the cluster and waits until every node says `cluster_state:ok`
    /// and every replica has synced.
    pub fn start() -> Cluster {
        Cluster::start_with(Vec::new)
    }

    /// As [`Cluster::start`], each node started with the arguments `extra` makes for it.
    pub fn start_with(extra: impl Fn() -> Vec<String>) -> Cluster {
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| {
                // The cluster bus gets a free port of its own (port + 10000 may be taken).
                let bus = super::free_port().to_string();
                let timeout = NODE_TIMEOUT_MS.to_string();
                let extra = extra();
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    &timeout,
                    "--repl-diskless-sync-delay",
                    "0",
                    // A replica serves reads at once after a failover, and a restarted node
                    // that lost its data takes part again.
                    "--cluster-replica-validity-factor",
                    "0",
                ];
                args.extend(extra.iter().map(String::as_str));
                RedisServer::start_with(&args)
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
    }

    /// `host:port` of every node, for holdfast's `nodes`.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr()).collect()
    }

    /// Waits until every running node reports `cluster_state:ok` and every replica's link
    /// to its primary is up; panics after `limit`.
    pub fn wait_healthy(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            let healthy = self.running().all(|n| {
                let info = n.cmd(&["CLUSTER", "INFO"]);
                let repl = n.cmd(&["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            });
            if healthy {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "the cluster did not become healthy within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The index of the running primary that serves `key`'s slot: the one that answers a
    /// read of it without `MOVED`.
    pub fn primary_of(&self, key: &str) -> usize {
        for (i, node) in self.nodes.iter().enumerate() {
            if !is_up(node) || !node.cmd(&["INFO", "replication"]).contains("role:master") {
                continue;
            }
            if !node.cmd(&["EXISTS", key]).starts_with("-MOVED") {
                return i;
            }
        }
        panic!("no primary serves {key}");
    }

    /// `GET key` answered by whichever primary owns it (following one MOVED).
    pub fn get(&self, key: &str) -> String {
        let first = self.running().next().expect("a running node");
        let reply = first.cmd(&["GET", key]);
        match moved_to(&reply) {
            Some(addr) => self.node_at(&addr).cmd(&["GET", key]),
            None => reply,
        }
    }

    fn running(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| is_up(n))
    }

    fn node_at(&self, addr: &str) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.addr() == addr)
            .unwrap_or_else(|| panic!("MOVED to {addr}, not one of ours"))
    }
}

/// The address in a `-MOVED slot host:port` reply.
fn moved_to(reply: &str) -> Option<String> {
    let rest = reply.strip_prefix("-MOVED ")?;
    rest.split_whitespace().nth(1).map(str::to_string)
}

/// Whether the node accepts connections.
fn is_up(node: &RedisServer) -> bool {
    std::net::TcpStream::connect_timeout(
        &node.addr().parse().expect("loopback address"),
        Duration::from_millis(200),
    )
    .is_ok()
}
