//! `CONFIG GET` on SQL backends: the parameters a fresh Redis 7.0.15 answers, with its
//! defaults (captured from `redis-server` started without a configuration file; `dir` is
//! holdfast's working directory when asked). Several job libraries ask
//! `maxmemory-policy` before they start; the answer is the one a fresh Redis gives.
//! `CONFIG SET` is accepted only for the encoding thresholds, which have no observable
//! effect on how SQL backends store a value.

use super::args;
use super::store::{bulk, fail, ok, Out};
use bytes::Bytes;

/// (name, default), sorted by name.
const DEFAULTS: &[(&str, &str)] = &[
    ("acl-pubsub-default", "resetchannels"),
    ("aclfile", ""),
    ("acllog-max-len", "128"),
    ("active-defrag-cycle-max", "25"),
    ("active-defrag-cycle-min", "1"),
    ("active-defrag-ignore-bytes", "104857600"),
    ("active-defrag-max-scan-fields", "1000"),
    ("active-defrag-threshold-lower", "10"),
    ("active-defrag-threshold-upper", "100"),
    ("active-expire-effort", "1"),
    ("activedefrag", "no"),
    ("activerehashing", "yes"),
    ("always-show-logo", "no"),
    ("aof-disable-auto-gc", "no"),
    ("aof-load-truncated", "yes"),
    ("aof-rewrite-incremental-fsync", "yes"),
    ("aof-timestamp-enabled", "no"),
    ("aof-use-rdb-preamble", "yes"),
    ("aof_rewrite_cpulist", ""),
    ("appenddirname", "appendonlydir"),
    ("appendfilename", "appendonly.aof"),
    ("appendfsync", "everysec"),
    ("appendonly", "no"),
    ("auto-aof-rewrite-min-size", "67108864"),
    ("auto-aof-rewrite-percentage", "100"),
    ("bgsave_cpulist", ""),
    ("bind", "* -::*"),
    ("bind-source-addr", ""),
    ("bio_cpulist", ""),
    ("busy-reply-threshold", "5000"),
    (
        "client-output-buffer-limit",
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
    ),
    ("client-query-buffer-limit", "1073741824"),
    ("cluster-allow-pubsubshard-when-down", "yes"),
    ("cluster-allow-reads-when-down", "no"),
    ("cluster-allow-replica-migration", "yes"),
    ("cluster-announce-bus-port", "0"),
    ("cluster-announce-hostname", ""),
    ("cluster-announce-ip", ""),
    ("cluster-announce-port", "0"),
    ("cluster-announce-tls-port", "0"),
    ("cluster-config-file", "nodes.conf"),
    ("cluster-enabled", "no"),
    ("cluster-link-sendbuf-limit", "0"),
    ("cluster-migration-barrier", "1"),
    ("cluster-node-timeout", "15000"),
    ("cluster-port", "0"),
    ("cluster-preferred-endpoint-type", "ip"),
    ("cluster-replica-no-failover", "no"),
    ("cluster-replica-validity-factor", "10"),
    ("cluster-require-full-coverage", "yes"),
    ("cluster-slave-no-failover", "no"),
    ("cluster-slave-validity-factor", "10"),
    ("crash-log-enabled", "yes"),
    ("crash-memcheck-enabled", "yes"),
    ("daemonize", "no"),
    ("databases", "16"),
    ("dbfilename", "dump.rdb"),
    ("dir", "/"),
    ("disable-thp", "yes"),
    ("dynamic-hz", "yes"),
    ("enable-debug-command", "no"),
    ("enable-module-command", "no"),
    ("enable-protected-configs", "no"),
    ("hash-max-listpack-entries", "512"),
    ("hash-max-listpack-value", "64"),
    ("hash-max-ziplist-entries", "512"),
    ("hash-max-ziplist-value", "64"),
    ("hll-sparse-max-bytes", "3000"),
    ("hz", "10"),
    ("ignore-warnings", ""),
    ("io-threads", "1"),
    ("io-threads-do-reads", "no"),
    ("jemalloc-bg-thread", "yes"),
    ("latency-monitor-threshold", "0"),
    ("latency-tracking", "yes"),
    ("latency-tracking-info-percentiles", "50 99 99.9"),
    ("lazyfree-lazy-eviction", "no"),
    ("lazyfree-lazy-expire", "no"),
    ("lazyfree-lazy-server-del", "no"),
    ("lazyfree-lazy-user-del", "no"),
    ("lazyfree-lazy-user-flush", "no"),
    ("lfu-decay-time", "1"),
    ("lfu-log-factor", "10"),
    ("list-compress-depth", "0"),
    ("list-max-listpack-size", "-2"),
    ("list-max-ziplist-size", "-2"),
    ("logfile", ""),
    ("loglevel", "notice"),
    ("lua-time-limit", "5000"),
    ("masterauth", ""),
    ("masteruser", ""),
    ("maxclients", "10000"),
    ("maxmemory", "0"),
    ("maxmemory-clients", "0"),
    ("maxmemory-eviction-tenacity", "10"),
    ("maxmemory-policy", "noeviction"),
    ("maxmemory-samples", "5"),
    ("min-replicas-max-lag", "10"),
    ("min-replicas-to-write", "0"),
    ("min-slaves-max-lag", "10"),
    ("min-slaves-to-write", "0"),
    ("no-appendfsync-on-rewrite", "no"),
    ("notify-keyspace-events", ""),
    ("oom-score-adj", "no"),
    ("oom-score-adj-values", "0 200 800"),
    ("pidfile", ""),
    ("port", "6379"),
    ("proc-title-template", "{title} {listen-addr} {server-mode}"),
    ("propagation-error-behavior", "ignore"),
    ("protected-mode", "yes"),
    ("proto-max-bulk-len", "536870912"),
    ("rdb-del-sync-files", "no"),
    ("rdb-save-incremental-fsync", "yes"),
    ("rdbchecksum", "yes"),
    ("rdbcompression", "yes"),
    ("repl-backlog-size", "1048576"),
    ("repl-backlog-ttl", "3600"),
    ("repl-disable-tcp-nodelay", "no"),
    ("repl-diskless-load", "disabled"),
    ("repl-diskless-sync", "yes"),
    ("repl-diskless-sync-delay", "5"),
    ("repl-diskless-sync-max-replicas", "0"),
    ("repl-ping-replica-period", "10"),
    ("repl-ping-slave-period", "10"),
    ("repl-timeout", "60"),
    ("replica-announce-ip", ""),
    ("replica-announce-port", "0"),
    ("replica-announced", "yes"),
    ("replica-ignore-disk-write-errors", "no"),
    ("replica-ignore-maxmemory", "yes"),
    ("replica-lazy-flush", "no"),
    ("replica-priority", "100"),
    ("replica-read-only", "yes"),
    ("replica-serve-stale-data", "yes"),
    ("replicaof", ""),
    ("requirepass", ""),
    ("sanitize-dump-payload", "no"),
    ("save", "3600 1 300 100 60 10000"),
    ("server_cpulist", ""),
    ("set-max-intset-entries", "512"),
    ("set-proc-title", "yes"),
    ("shutdown-on-sigint", "default"),
    ("shutdown-on-sigterm", "default"),
    ("shutdown-timeout", "10"),
    ("slave-announce-ip", ""),
    ("slave-announce-port", "0"),
    ("slave-ignore-maxmemory", "yes"),
    ("slave-lazy-flush", "no"),
    ("slave-priority", "100"),
    ("slave-read-only", "yes"),
    ("slave-serve-stale-data", "yes"),
    ("slaveof", ""),
    ("slowlog-log-slower-than", "10000"),
    ("slowlog-max-len", "128"),
    ("socket-mark-id", "0"),
    ("stop-writes-on-bgsave-error", "yes"),
    ("stream-node-max-bytes", "4096"),
    ("stream-node-max-entries", "100"),
    ("supervised", "no"),
    ("syslog-enabled", "no"),
    ("syslog-facility", "local0"),
    ("syslog-ident", "redis"),
    ("tcp-backlog", "511"),
    ("tcp-keepalive", "300"),
    ("timeout", "0"),
    ("tls-auth-clients", "yes"),
    ("tls-ca-cert-dir", ""),
    ("tls-ca-cert-file", ""),
    ("tls-cert-file", ""),
    ("tls-ciphers", ""),
    ("tls-ciphersuites", ""),
    ("tls-client-cert-file", ""),
    ("tls-client-key-file", ""),
    ("tls-client-key-file-pass", ""),
    ("tls-cluster", "no"),
    ("tls-dh-params-file", ""),
    ("tls-key-file", ""),
    ("tls-key-file-pass", ""),
    ("tls-port", "0"),
    ("tls-prefer-server-ciphers", "no"),
    ("tls-protocols", ""),
    ("tls-replication", "no"),
    ("tls-session-cache-size", "20480"),
    ("tls-session-cache-timeout", "300"),
    ("tls-session-caching", "yes"),
    ("tracking-table-max-keys", "1000000"),
    ("unixsocket", ""),
    ("unixsocketperm", "0"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("zset-max-ziplist-entries", "128"),
    ("zset-max-ziplist-value", "64"),
];

/// Whether `CONFIG SET name` is accepted on SQL backends: an encoding threshold, whose only
/// effect in Redis is on a value's in-memory layout.
pub fn harmless_setting(name: &[u8]) -> bool {
    threshold(&String::from_utf8_lossy(name).to_ascii_lowercase())
}

fn threshold(name: &str) -> bool {
    [
        "-max-listpack-",
        "-max-ziplist-",
        "-max-intset-",
        "stream-node-max-",
    ]
    .iter()
    .any(|part| name.contains(part))
}

/// `CONFIG GET parameter ...`: each a name or a glob, matched without case; each parameter
/// once, in the order first asked. A map (RESP2: names and values alternating).
pub fn get(a: &[Bytes]) -> Out {
    let mut found: Vec<&(&str, &str)> = Vec::new();
    for pattern in a.iter().skip(2) {
        let pattern = pattern.to_ascii_lowercase();
        let glob = pattern.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
        for entry in DEFAULTS {
            let hit = if glob {
                args::glob(&pattern, entry.0.as_bytes())
            } else {
                pattern == entry.0.as_bytes()
            };
            if hit && !found.iter().any(|f| f.0 == entry.0) {
                found.push(entry);
            }
        }
    }
    let mut map = redis_protocol::resp3::types::FrameMap::default();
    for (name, value) in found {
        let value = if *name == "dir" {
            std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        } else {
            value.to_string()
        };
        map.insert(
            bulk(Bytes::from_static(name.as_bytes())),
            bulk(Bytes::from(value)),
        );
    }
    Ok(redis_protocol::resp3::types::BytesFrame::Map {
        data: map,
        attributes: None,
    })
}

/// `CONFIG SET parameter value ...`: accepted, with no effect, for the encoding thresholds
/// only; any other parameter would change nothing here, so it is refused rather than
/// answered OK.
pub fn set(a: &[Bytes]) -> Out {
    let pairs = a.get(2..).unwrap_or_default();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return fail("ERR wrong number of arguments for 'config|set' command");
    }
    for pair in pairs.chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        if !DEFAULTS.iter().any(|(n, _)| *n == name) {
            return fail(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
            ));
        }
        if !threshold(&name) {
            return fail(format!(
                "ERR holdfast: CONFIG SET '{name}' has no effect on SQL backends; only the encoding thresholds are accepted"
            ));
        }
        if args::parse_i64(&pair[1]).is_none() {
            return fail(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer"
            ));
        }
    }
    Ok(ok())
}

/// `CONFIG GET|SET` on a SQL backend.
pub fn config(a: &[Bytes]) -> Out {
    match a.get(1).map(|s| s.to_ascii_uppercase()).as_deref() {
        Some(b"GET") => get(a),
        Some(b"SET") => set(a),
        _ => fail(super::unsupported(b"config")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(reply: Out) -> Vec<String> {
        match reply {
            Ok(redis_protocol::resp3::types::BytesFrame::Map { data, .. }) => data
                .keys()
                .map(|k| match k {
                    redis_protocol::resp3::types::BytesFrame::BlobString { data, .. } => {
                        String::from_utf8_lossy(data).into_owned()
                    }
                    _ => String::new(),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn args(text: &str) -> Vec<Bytes> {
        text.split(' ')
            .map(|w| Bytes::from(w.to_string()))
            .collect()
    }

    #[test]
    fn get_matches_names_and_globs_once_each() {
        assert_eq!(
            names(get(&args("CONFIG GET maxmemory-policy"))),
            ["maxmemory-policy"]
        );
        assert_eq!(
            names(get(&args("CONFIG GET MAXMEMORY-POLICY"))),
            ["maxmemory-policy"]
        );
        assert_eq!(
            names(get(&args("CONFIG GET maxmemory maxmemory m?xmemory"))),
            ["maxmemory"]
        );
        assert_eq!(
            names(get(&args("CONFIG GET nothing"))),
            Vec::<String>::new()
        );
        assert_eq!(names(get(&args("CONFIG GET *"))).len(), DEFAULTS.len());
        assert!(names(get(&args("CONFIG GET *max-*-entries")))
            .contains(&"hash-max-listpack-entries".to_string()));
    }

    #[test]
    fn set_takes_only_encoding_thresholds() {
        assert_eq!(
            set(&args("CONFIG SET hash-max-listpack-entries 10")).ok(),
            Some(ok())
        );
        assert!(set(&args("CONFIG SET maxmemory 10")).is_err());
        assert!(set(&args("CONFIG SET nothing 10")).is_err());
        assert!(set(&args("CONFIG SET hash-max-listpack-entries x")).is_err());
        assert!(set(&args("CONFIG SET hash-max-listpack-entries")).is_err());
    }
}
