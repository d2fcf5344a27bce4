//! The rows of the command table, one per command holdfast serves.
//!
//! Arity and key positions are Redis 7.0's, as `COMMAND INFO` reports them; the idempotence
//! class is what repeating the command does ([`Idempotence`]: docs/failures.md, "What happens when a
//! backend fails", says which failures each class is retried after). To add a command, add
//! one row to its group below:
//! `Spec::new(name, arity, keys, class)` for a forwarded command, `Spec::local` for one the
//! connection answers, `Spec::container` plus `NAME|SUB` rows for a command with subcommands.
//! If some arguments change the class, add `.refine(f)`: `f` reads the arguments (index 0 is
//! the name) and returns the class of that invocation. A refined row's own `class` is the most
//! cautious class its refine function can return, so anything that reads the class without
//! the arguments errs on the safe side. Mark `.null_array()` when Redis answers a RESP2 nil
//! as `*-1` instead of `$-1`. Put a one-line `// why` where a choice is not obvious.
//!
//! Left out on purpose: MOVE, SWAPDB, MIGRATE (they reach past one namespace's database),
//! cluster, replication and administration commands, PFDEBUG and PFSELFTEST
//! (administration commands in the hyperloglog group). `docs/commands.md` is generated
//! from these rows.

use super::table::Idempotence::{
    ConnectionBound, Idempotent, IdempotentEffect, NonIdempotent, Read,
};
use super::table::{
    store_index, Idempotence, Keys, Local, Reach, Spec, StoreOptions, KEY1, KEYS_1_2, KEYS_ALL,
    KEYS_PAIRS, NO_KEYS,
};
use bytes::Bytes;
use std::time::{SystemTime, UNIX_EPOCH};

/// One key at argument 2 (`OBJECT ENCODING key`, `XGROUP CREATE key ...`).
const KEY2: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};
/// Every argument but the last is a key (`BLPOP key ... timeout`).
const KEYS_BUT_LAST: Keys = Keys::Range {
    first: 1,
    last: -2,
    step: 1,
};
/// Every argument from 2 on is a key (`BITOP op dest key ...`).
const KEYS_FROM_2: Keys = Keys::Range {
    first: 2,
    last: -1,
    step: 1,
};
/// `numkeys key ...` at argument 1 (`LMPOP`, `ZUNION`, `SINTERCARD`, ...).
const NUMKEYS_AT_1: Keys = Keys::Numkeys { at: 1, dest: false };
/// `numkeys key ...` at argument 2 (`EVAL script numkeys`, `BLMPOP timeout numkeys`).
const NUMKEYS_AT_2: Keys = Keys::Numkeys { at: 2, dest: false };
/// `dest numkeys key ...` (`ZUNIONSTORE`, `ZINTERSTORE`, `ZDIFFSTORE`).
const DEST_NUMKEYS: Keys = Keys::Numkeys { at: 2, dest: true };

/// A transaction command: answered by the connection, but bound to it.
const fn bound(spec: Spec) -> Spec {
    Spec {
        class: ConnectionBound,
        ..spec
    }
}

pub(super) static ROWS: &[Spec] = &[
    // ---- string ----
    Spec::new("APPEND", 3, KEY1, NonIdempotent),
    Spec::new("DECR", 2, KEY1, NonIdempotent),
    Spec::new("DECRBY", 3, KEY1, NonIdempotent),
    Spec::new("GET", 2, KEY1, Read),
    Spec::new("GETDEL", 2, KEY1, NonIdempotent),
    // With an expiry a repeat is not the first call again: after the key expired (`PX 150`
    // outlasts no backoff step) it answers nil for the value the first call returned.
    Spec::new("GETEX", -2, KEY1, NonIdempotent).refine(refine_getex),
    Spec::new("GETRANGE", 4, KEY1, Read),
    // A repeat answers the value the first call wrote, not the one it replaced.
    Spec::new("GETSET", 3, KEY1, NonIdempotent),
    Spec::new("INCR", 2, KEY1, NonIdempotent),
    Spec::new("INCRBY", 3, KEY1, NonIdempotent),
    Spec::new("INCRBYFLOAT", 3, KEY1, NonIdempotent),
    Spec::new("LCS", -3, KEYS_1_2, Read),
    Spec::new("MGET", -2, KEYS_ALL, Read),
    Spec::new("MSET", -3, KEYS_PAIRS, Idempotent),
    Spec::new("MSETNX", -3, KEYS_PAIRS, IdempotentEffect),
    Spec::new("PSETEX", 4, KEY1, Idempotent),
    Spec::new("SET", -3, KEY1, NonIdempotent).refine(refine_set),
    Spec::new("SETEX", 4, KEY1, Idempotent),
    Spec::new("SETNX", 3, KEY1, IdempotentEffect),
    Spec::new("SETRANGE", 4, KEY1, Idempotent),
    Spec::new("STRLEN", 2, KEY1, Read),
    Spec::new("SUBSTR", 4, KEY1, Read),
    // ---- bitmap ----
    Spec::new("BITCOUNT", -2, KEY1, Read),
    Spec::new("BITFIELD", -2, KEY1, NonIdempotent).refine(refine_bitfield),
    Spec::new("BITFIELD_RO", -2, KEY1, Read),
    Spec::new("BITOP", -4, KEYS_FROM_2, NonIdempotent).refine(refine_bitop),
    Spec::new("BITPOS", -3, KEY1, Read),
    Spec::new("GETBIT", 3, KEY1, Read),
    // The reply is the bit before the call: a repeat answers the bit the first call wrote.
    Spec::new("SETBIT", 4, KEY1, IdempotentEffect),
    // ---- hash ----
    Spec::new("HDEL", -3, KEY1, IdempotentEffect),
    Spec::new("HEXISTS", 3, KEY1, Read),
    Spec::new("HGET", 3, KEY1, Read),
    Spec::new("HGETALL", 2, KEY1, Read),
    Spec::new("HINCRBY", 4, KEY1, NonIdempotent),
    Spec::new("HINCRBYFLOAT", 4, KEY1, NonIdempotent),
    Spec::new("HKEYS", 2, KEY1, Read),
    Spec::new("HLEN", 2, KEY1, Read),
    Spec::new("HMGET", -3, KEY1, Read),
    Spec::new("HMSET", -4, KEY1, Idempotent),
    Spec::new("HRANDFIELD", -2, KEY1, Read),
    Spec::new("HSCAN", -3, KEY1, Read),
    // The reply counts the fields this call created.
    Spec::new("HSET", -4, KEY1, IdempotentEffect),
    Spec::new("HSETNX", 4, KEY1, IdempotentEffect),
    Spec::new("HSTRLEN", 3, KEY1, Read),
    Spec::new("HVALS", 2, KEY1, Read),
    // ---- list ----
    // Blocking: a nil reply is a timeout, and Redis 7.0 answers every timeout with `*-1`,
    // BLMOVE and BRPOPLPUSH included (checked against redis-server 7.0.15).
    Spec::new("BLMOVE", 6, KEYS_1_2, ConnectionBound).null_array(),
    Spec::new("BLMPOP", -5, NUMKEYS_AT_2, ConnectionBound).null_array(),
    Spec::new("BLPOP", -3, KEYS_BUT_LAST, ConnectionBound).null_array(),
    Spec::new("BRPOP", -3, KEYS_BUT_LAST, ConnectionBound).null_array(),
    Spec::new("BRPOPLPUSH", 4, KEYS_1_2, ConnectionBound).null_array(),
    Spec::new("LINDEX", 3, KEY1, Read),
    Spec::new("LINSERT", 5, KEY1, NonIdempotent),
    Spec::new("LLEN", 2, KEY1, Read),
    Spec::new("LMOVE", 5, KEYS_1_2, NonIdempotent),
    Spec::new("LMPOP", -4, NUMKEYS_AT_1, NonIdempotent).null_array(),
    // `*-1` only with a count on a missing key; without a count the nil is `$-1`.
    Spec::new("LPOP", -2, KEY1, NonIdempotent).null_array_from(3),
    Spec::new("LPOS", -3, KEY1, Read),
    Spec::new("LPUSH", -3, KEY1, NonIdempotent),
    Spec::new("LPUSHX", -3, KEY1, NonIdempotent),
    Spec::new("LRANGE", 4, KEY1, Read),
    Spec::new("LREM", 4, KEY1, NonIdempotent),
    // Overwrites one position with a given value; the reply is OK either time.
    Spec::new("LSET", 4, KEY1, Idempotent),
    // Indices are relative to the current list: `LTRIM k 1 -1` drops one more head each time.
    Spec::new("LTRIM", 4, KEY1, NonIdempotent),
    // `*-1` only with a count on a missing key; without a count the nil is `$-1`.
    Spec::new("RPOP", -2, KEY1, NonIdempotent).null_array_from(3),
    Spec::new("RPOPLPUSH", 3, KEYS_1_2, NonIdempotent),
    Spec::new("RPUSH", -3, KEY1, NonIdempotent),
    Spec::new("RPUSHX", -3, KEY1, NonIdempotent),
    // ---- set ----
    Spec::new("SADD", -3, KEY1, IdempotentEffect),
    Spec::new("SCARD", 2, KEY1, Read),
    Spec::new("SDIFF", -2, KEYS_ALL, Read),
    Spec::new("SDIFFSTORE", -3, KEYS_ALL, NonIdempotent).refine(refine_store_from_2),
    Spec::new("SINTER", -2, KEYS_ALL, Read),
    Spec::new("SINTERCARD", -3, NUMKEYS_AT_1, Read),
    Spec::new("SINTERSTORE", -3, KEYS_ALL, NonIdempotent).refine(refine_store_from_2),
    Spec::new("SISMEMBER", 3, KEY1, Read),
    Spec::new("SMEMBERS", 2, KEY1, Read),
    Spec::new("SMISMEMBER", -3, KEY1, Read),
    Spec::new("SMOVE", 4, KEYS_1_2, IdempotentEffect),
    Spec::new("SPOP", -2, KEY1, NonIdempotent),
    Spec::new("SRANDMEMBER", -2, KEY1, Read),
    Spec::new("SREM", -3, KEY1, IdempotentEffect),
    Spec::new("SSCAN", -3, KEY1, Read),
    Spec::new("SUNION", -2, KEYS_ALL, Read),
    Spec::new("SUNIONSTORE", -3, KEYS_ALL, NonIdempotent).refine(refine_store_from_2),
    // ---- sorted set ----
    Spec::new("BZMPOP", -5, NUMKEYS_AT_2, ConnectionBound).null_array(),
    Spec::new("BZPOPMAX", -3, KEYS_BUT_LAST, ConnectionBound).null_array(),
    Spec::new("BZPOPMIN", -3, KEYS_BUT_LAST, ConnectionBound).null_array(),
    Spec::new("ZADD", -4, KEY1, NonIdempotent).refine(refine_zadd),
    Spec::new("ZCARD", 2, KEY1, Read),
    Spec::new("ZCOUNT", 4, KEY1, Read),
    Spec::new("ZDIFF", -3, NUMKEYS_AT_1, Read),
    Spec::new("ZDIFFSTORE", -4, DEST_NUMKEYS, NonIdempotent).refine(refine_store_numkeys),
    Spec::new("ZINCRBY", 4, KEY1, NonIdempotent),
    Spec::new("ZINTER", -3, NUMKEYS_AT_1, Read),
    Spec::new("ZINTERCARD", -3, NUMKEYS_AT_1, Read),
    Spec::new("ZINTERSTORE", -4, DEST_NUMKEYS, NonIdempotent).refine(refine_store_numkeys),
    Spec::new("ZLEXCOUNT", 4, KEY1, Read),
    Spec::new("ZMPOP", -4, NUMKEYS_AT_1, NonIdempotent).null_array(),
    Spec::new("ZMSCORE", -3, KEY1, Read),
    Spec::new("ZPOPMAX", -2, KEY1, NonIdempotent),
    Spec::new("ZPOPMIN", -2, KEY1, NonIdempotent),
    Spec::new("ZRANDMEMBER", -2, KEY1, Read),
    Spec::new("ZRANGE", -4, KEY1, Read),
    Spec::new("ZRANGEBYLEX", -4, KEY1, Read),
    Spec::new("ZRANGEBYSCORE", -4, KEY1, Read),
    Spec::new("ZRANGESTORE", -5, KEYS_1_2, NonIdempotent).refine(refine_store_1_2),
    Spec::new("ZRANK", 3, KEY1, Read),
    Spec::new("ZREM", -3, KEY1, IdempotentEffect),
    Spec::new("ZREMRANGEBYLEX", 4, KEY1, IdempotentEffect),
    // Ranks are relative to the current set: a repeat removes the next members.
    Spec::new("ZREMRANGEBYRANK", 4, KEY1, NonIdempotent),
    Spec::new("ZREMRANGEBYSCORE", 4, KEY1, IdempotentEffect),
    Spec::new("ZREVRANGE", -4, KEY1, Read),
    Spec::new("ZREVRANGEBYLEX", -4, KEY1, Read),
    Spec::new("ZREVRANGEBYSCORE", -4, KEY1, Read),
    Spec::new("ZREVRANK", 3, KEY1, Read),
    Spec::new("ZSCAN", -3, KEY1, Read),
    Spec::new("ZSCORE", 3, KEY1, Read),
    Spec::new("ZUNION", -3, NUMKEYS_AT_1, Read),
    Spec::new("ZUNIONSTORE", -4, DEST_NUMKEYS, NonIdempotent).refine(refine_store_numkeys),
    // ---- stream ----
    Spec::new("XACK", -4, KEY1, IdempotentEffect),
    Spec::new("XADD", -5, KEY1, NonIdempotent).refine(refine_xadd),
    // A claimed entry that was deleted meanwhile is `[id, *-1]`.
    Spec::new("XAUTOCLAIM", -6, KEY1, NonIdempotent).nested_nil_array(|p| matches!(p, [1, _, 1])),
    Spec::new("XCLAIM", -6, KEY1, NonIdempotent).nested_nil_array(|p| matches!(p, [_, 1])),
    Spec::new("XDEL", -3, KEY1, IdempotentEffect),
    Spec::container("XGROUP"),
    // A repeat answers BUSYGROUP and changes nothing: the reply says whether this call created
    // the group, as SETNX's does.
    Spec::new("XGROUP|CREATE", -5, KEY2, IdempotentEffect),
    Spec::new("XGROUP|CREATECONSUMER", 5, KEY2, IdempotentEffect),
    // The reply is the number of pending entries the consumer had; a repeat answers 0.
    Spec::new("XGROUP|DELCONSUMER", 5, KEY2, IdempotentEffect),
    Spec::new("XGROUP|DESTROY", 4, KEY2, IdempotentEffect),
    Spec::new("XGROUP|HELP", 2, NO_KEYS, Read),
    Spec::new("XGROUP|SETID", -5, KEY2, Idempotent),
    Spec::container("XINFO"),
    Spec::new("XINFO|CONSUMERS", 4, KEY2, Read),
    Spec::new("XINFO|GROUPS", 3, KEY2, Read),
    Spec::new("XINFO|HELP", 2, NO_KEYS, Read),
    Spec::new("XINFO|STREAM", -3, KEY2, Read),
    Spec::new("XLEN", 2, KEY1, Read),
    // The summary of an empty group ends with a null array of consumers.
    Spec::new("XPENDING", -3, KEY1, Read).nested_nil_array(|p| p == [3]),
    // `COUNT 0` answers a null array.
    Spec::new("XRANGE", -4, KEY1, Read).null_array(),
    // Bound to a connection only while it blocks; it writes nothing either way.
    Spec::new("XREAD", -4, Keys::Streams, ConnectionBound)
        .refine(refine_xread)
        .blocking_read()
        .null_array(),
    // Without BLOCK it still moves the group's last-delivered id and the pending list.
    // A pending entry deleted since it was delivered reads back as `[id, *-1]`.
    Spec::new("XREADGROUP", -7, Keys::Streams, ConnectionBound)
        .refine(refine_xreadgroup)
        .null_array()
        .nested_nil_array(|p| matches!(p, [_, 1, _, 1])),
    Spec::new("XREVRANGE", -4, KEY1, Read).null_array(),
    // Setting the same last id again is accepted and answers OK.
    Spec::new("XSETID", -3, KEY1, Idempotent),
    Spec::new("XTRIM", -4, KEY1, IdempotentEffect),
    // ---- generic: keys and expiry ----
    // With REPLACE a repeat answers 1 again; without, 0: IdempotentEffect covers both.
    // `DB n` copies into a database no namespace routes to (exact mode's tokens live in one).
    Spec::new("COPY", -3, KEYS_1_2, IdempotentEffect).reach(Reach::Database),
    Spec::new("DEL", -2, KEYS_ALL, IdempotentEffect),
    Spec::new("DUMP", 2, KEY1, Read),
    Spec::new("EXISTS", -2, KEYS_ALL, Read),
    // Relative: a repeat moves the deadline, and a TTL <= 0 deletes the key so a repeat
    // answers 0.
    Spec::new("EXPIRE", -3, KEY1, IdempotentEffect),
    Spec::new("EXPIREAT", -3, KEY1, IdempotentEffect).refine(refine_expireat),
    Spec::new("EXPIRETIME", 2, KEY1, Read),
    Spec::new("KEYS", 2, NO_KEYS, Read).reach(Reach::Keyspace),
    Spec::container("OBJECT"),
    Spec::new("OBJECT|ENCODING", 3, KEY2, Read),
    Spec::new("OBJECT|FREQ", 3, KEY2, Read),
    Spec::new("OBJECT|HELP", 2, NO_KEYS, Read),
    Spec::new("OBJECT|IDLETIME", 3, KEY2, Read),
    Spec::new("OBJECT|REFCOUNT", 3, KEY2, Read),
    Spec::new("PERSIST", 2, KEY1, IdempotentEffect),
    Spec::new("PEXPIRE", -3, KEY1, IdempotentEffect),
    Spec::new("PEXPIREAT", -3, KEY1, IdempotentEffect).refine(refine_pexpireat),
    Spec::new("PEXPIRETIME", 2, KEY1, Read),
    Spec::new("PTTL", 2, KEY1, Read),
    Spec::new("RANDOMKEY", 1, NO_KEYS, Read).reach(Reach::Keyspace),
    // A repeat answers an error (no such key) although the state is the one the first call
    // left.
    Spec::new("RENAME", 3, KEYS_1_2, NonIdempotent),
    Spec::new("RENAMENX", 3, KEYS_1_2, NonIdempotent),
    // Without REPLACE a repeat answers BUSYKEY; with REPLACE it answers OK again.
    Spec::new("RESTORE", -4, KEY1, NonIdempotent).refine(refine_restore),
    Spec::new("SCAN", -2, NO_KEYS, Read).reach(Reach::Keyspace),
    // The sorted key and a STORE destination are routed; the keys BY and GET patterns read
    // are checked against a limited user's namespaces (Redis does not declare them).
    Spec::new("SORT", -2, Keys::Store(StoreOptions::Sort), NonIdempotent)
        .refine(refine_sort)
        .reach(Reach::SortPatterns),
    Spec::new("SORT_RO", -2, KEY1, Read).reach(Reach::SortPatterns),
    // Only the access time changes.
    Spec::new("TOUCH", -2, KEYS_ALL, Read),
    Spec::new("TTL", 2, KEY1, Read),
    Spec::new("TYPE", 2, KEY1, Read),
    Spec::new("UNLINK", -2, KEYS_ALL, IdempotentEffect),
    // No effect; it waits for the writes of the backend connection it lands on, which is
    // where the client's last write went.
    Spec::new("WAIT", 3, NO_KEYS, Read).pinned(),
    // ---- hyperloglog ----
    Spec::new("PFADD", -2, KEY1, IdempotentEffect),
    // May rewrite the cached cardinality inside the value, never the cardinality itself.
    Spec::new("PFCOUNT", -2, KEYS_ALL, Read),
    // A merge keeps each register's maximum: merging again, even into a source, changes
    // nothing.
    Spec::new("PFMERGE", -2, KEYS_ALL, Idempotent),
    // ---- geo ----
    // GEOADD has NX, XX and CH but nothing like ZADD's INCR.
    Spec::new("GEOADD", -5, KEY1, IdempotentEffect),
    Spec::new("GEODIST", -4, KEY1, Read),
    Spec::new("GEOHASH", -2, KEY1, Read),
    // A missing member's position is `*-1`.
    Spec::new("GEOPOS", -2, KEY1, Read)
        .nested_nil_array(|p| p.len() == 1)
        .human_doubles(),
    // A STORE / STOREDIST destination is routed, as for SORT.
    // WITHCOORD coordinates are human long doubles.
    Spec::new(
        "GEORADIUS",
        -6,
        Keys::Store(StoreOptions::Georadius(6)),
        NonIdempotent,
    )
    .refine(refine_georadius)
    .human_doubles(),
    Spec::new("GEORADIUS_RO", -6, KEY1, Read).human_doubles(),
    Spec::new(
        "GEORADIUSBYMEMBER",
        -5,
        Keys::Store(StoreOptions::Georadius(5)),
        NonIdempotent,
    )
    .refine(refine_georadiusbymember)
    .human_doubles(),
    Spec::new("GEORADIUSBYMEMBER_RO", -5, KEY1, Read).human_doubles(),
    Spec::new("GEOSEARCH", -7, KEY1, Read).human_doubles(),
    Spec::new("GEOSEARCHSTORE", -8, KEYS_1_2, NonIdempotent).refine(refine_store_1_2),
    // ---- scripting ----
    Spec::new("EVAL", -3, NUMKEYS_AT_2, NonIdempotent)
        .reach(Reach::Scripts)
        .refine(refine_eval),
    Spec::new("EVAL_RO", -3, NUMKEYS_AT_2, Read).reach(Reach::Scripts),
    Spec::new("EVALSHA", -3, NUMKEYS_AT_2, NonIdempotent).reach(Reach::Scripts),
    Spec::new("EVALSHA_RO", -3, NUMKEYS_AT_2, Read).reach(Reach::Scripts),
    Spec::new("FCALL", -3, NUMKEYS_AT_2, NonIdempotent).reach(Reach::Scripts),
    Spec::new("FCALL_RO", -3, NUMKEYS_AT_2, Read).reach(Reach::Scripts),
    // Sent to every Redis backend the client may reach, so a later EVALSHA finds the
    // script wherever its keys route; holdfast keeps the text for EVALSHA's NOSCRIPT.
    Spec::container("SCRIPT"),
    Spec::new("SCRIPT|EXISTS", -3, NO_KEYS, Read).every_backend(),
    Spec::new("SCRIPT|FLUSH", -2, NO_KEYS, Idempotent).every_backend(),
    // SQL backends answer it at once; Redis backends as they do.
    Spec::new("SCRIPT|KILL", 2, NO_KEYS, Idempotent).every_backend(),
    Spec::new("SCRIPT|LOAD", 3, NO_KEYS, Idempotent).every_backend(),
    // Function libraries, like scripts, on every backend the client reaches; FCALL is routed
    // by its keys. A second LOAD or DELETE answers otherwise than the first: not retried.
    Spec::container("FUNCTION"),
    Spec::new("FUNCTION|DELETE", 3, NO_KEYS, NonIdempotent).every_backend(),
    Spec::new("FUNCTION|DUMP", 2, NO_KEYS, Read).every_backend(),
    Spec::new("FUNCTION|FLUSH", -2, NO_KEYS, Idempotent).every_backend(),
    Spec::new("FUNCTION|KILL", 2, NO_KEYS, Idempotent).every_backend(),
    Spec::new("FUNCTION|LIST", -2, NO_KEYS, Read).every_backend(),
    Spec::new("FUNCTION|LOAD", -3, NO_KEYS, NonIdempotent).every_backend(),
    Spec::new("FUNCTION|RESTORE", -3, NO_KEYS, NonIdempotent).every_backend(),
    Spec::new("FUNCTION|STATS", 2, NO_KEYS, Read).every_backend(),
    // ---- server: forwarded to the catch-all backend ----
    Spec::container("CONFIG"),
    Spec::new("CONFIG|GET", -3, NO_KEYS, Read).reach(Reach::ServerConfig),
    // Setting a value twice leaves it set and answers OK again. Only a user with `admin`
    // may send it to a Redis backend (on SQL the encoding thresholds are harmless).
    Spec::new("CONFIG|SET", -4, NO_KEYS, Idempotent).reach(Reach::ServerAdmin),
    Spec::new("DBSIZE", 1, NO_KEYS, Read).reach(Reach::Keyspace),
    Spec::new("FLUSHALL", -1, NO_KEYS, Idempotent).every_backend(),
    Spec::new("FLUSHDB", -1, NO_KEYS, Idempotent).every_backend(),
    Spec::new("LASTSAVE", 1, NO_KEYS, Read),
    Spec::new("TIME", 1, NO_KEYS, Read),
    // ---- publish/subscribe: channels route by the namespaces' `channels` prefixes ----
    // A retried PUBLISH may deliver twice: it is retried only when it was never sent.
    Spec::new("PUBLISH", 3, NO_KEYS, NonIdempotent).reach(Reach::Channel),
    // Redis declares the shard channel a key: a Cluster routes it by its slot.
    Spec::new("SPUBLISH", 3, KEY1, NonIdempotent).reach(Reach::Channel),
    Spec::local("SUBSCRIBE", -2, Local::Subscribe),
    Spec::local("PSUBSCRIBE", -2, Local::Subscribe),
    Spec::local("SSUBSCRIBE", -2, Local::Subscribe),
    Spec::local("UNSUBSCRIBE", -1, Local::Subscribe),
    Spec::local("PUNSUBSCRIBE", -1, Local::Subscribe),
    Spec::local("SUNSUBSCRIBE", -1, Local::Subscribe),
    Spec::container("PUBSUB"),
    Spec::local("PUBSUB|CHANNELS", -2, Local::Pubsub),
    Spec::local("PUBSUB|NUMPAT", 2, Local::Pubsub),
    Spec::local("PUBSUB|NUMSUB", -2, Local::Pubsub),
    Spec::local("PUBSUB|SHARDCHANNELS", -2, Local::Pubsub),
    Spec::local("PUBSUB|SHARDNUMSUB", -2, Local::Pubsub),
    // ---- connection: answered by holdfast ----
    Spec::local("AUTH", -2, Local::Auth),
    // Not a container: the connection reads the subcommand itself.
    Spec::local("CLIENT", -2, Local::Client),
    Spec::local("COMMAND", -1, Local::Command),
    Spec::local("ECHO", 2, Local::Echo),
    Spec::local("HELLO", -1, Local::Hello),
    Spec::local("INFO", -1, Local::Info),
    Spec::local("PING", -1, Local::Ping),
    Spec::local("QUIT", -1, Local::Quit),
    Spec::local("READONLY", 1, Local::ClusterOnly),
    Spec::local("READWRITE", 1, Local::ClusterOnly),
    Spec::local("RESET", 1, Local::Reset),
    Spec::local("MONITOR", 1, Local::Monitor),
    Spec::container("ACL"),
    Spec::local("ACL|WHOAMI", 2, Local::Acl),
    Spec::local("ACL|USERS", 2, Local::Acl),
    Spec::local("ACL|LIST", 2, Local::Acl),
    // holdfast's own: moving a namespace to its mirror (docs/moving.md).
    Spec::container("HOLDFAST"),
    Spec::local("HOLDFAST|COPY", -4, Local::Holdfast),
    Spec::local("HOLDFAST|RECOPY", 3, Local::Holdfast),
    Spec::local("HOLDFAST|VERIFY", -4, Local::Holdfast),
    Spec::local("HOLDFAST|MIRROR", 3, Local::Holdfast),
    Spec::local("SELECT", 2, Local::Select),
    // ---- transactions: answered by holdfast, on a backend connection of their own ----
    bound(Spec::local("DISCARD", 1, Local::Discard)),
    // An EXEC that a WATCH aborted answers `*-1`.
    bound(Spec::local("EXEC", 1, Local::Exec)).null_array(),
    bound(Spec::local("MULTI", 1, Local::Multi)),
    bound(Spec::local("UNWATCH", 1, Local::Unwatch)),
    // The keys route the client's own backend connection.
    Spec {
        keys: KEYS_ALL,
        ..bound(Spec::local("WATCH", -2, Local::Watch))
    },
];

// ---- refine functions ----
//
// Each reads options at the positions Redis parses them from, so a key or a value that happens
// to spell an option (`SET k NX`, where NX is the value) is not taken for one. Malformed
// invocations, which the backend refuses, get the most cautious class of the command.

/// Whether argument `i` exists and equals `word`, ignoring ASCII case.
fn is(args: &[Bytes], i: usize, word: &str) -> bool {
    args.get(i)
        .is_some_and(|arg| arg.eq_ignore_ascii_case(word.as_bytes()))
}

/// Whether `arg` is one of `words`, ignoring ASCII case.
fn one_of(arg: &[u8], words: &[&str]) -> bool {
    words
        .iter()
        .any(|word| arg.eq_ignore_ascii_case(word.as_bytes()))
}

/// An integer argument, as Redis would parse it.
fn int_arg(args: &[Bytes], i: usize) -> Option<i64> {
    std::str::from_utf8(args.get(i)?).ok()?.parse().ok()
}

/// A `*STORE` command overwrites its destination with a function of its sources: a repeat
/// leaves the same value and answers the same count, unless the destination is also a source,
/// in which case the repeat computes from the first call's result (`ZUNIONSTORE d 2 d k` adds
/// the scores again, `SDIFFSTORE d k d` answers `k - (k - d)`). That case is `NonIdempotent`, even
/// for the operations that would repeat to the same result.
fn store_class(dest: Option<&Bytes>, sources: &[Bytes]) -> Idempotence {
    match dest {
        Some(dest) if sources.contains(dest) => NonIdempotent,
        Some(_) => Idempotent,
        None => NonIdempotent,
    }
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT ts | PXAT ts | KEEPTTL]`.
///
/// GET makes it `NonIdempotent` (a repeat answers the value the first call wrote); NX makes it
/// `IdempotentEffect`. XX stays `Idempotent`: a repeat finds the key exactly when the first call
/// did, so it answers the same.
fn refine_set(args: &[Bytes]) -> Idempotence {
    let mut class = Idempotent;
    let mut i = 3;
    while let Some(arg) = args.get(i) {
        if arg.eq_ignore_ascii_case(b"GET") {
            return NonIdempotent;
        } else if arg.eq_ignore_ascii_case(b"NX") {
            class = IdempotentEffect;
        } else if one_of(arg, &["EX", "PX", "EXAT", "PXAT"]) {
            i += 1; // the time
        }
        i += 1;
    }
    class
}

/// `GETEX key [EX s | PX ms | EXAT ts | PXAT ts | PERSIST]`: alone it only reads; `PERSIST`
/// leaves the same state and answer when repeated; an expiry makes it `NonIdempotent`, since a
/// repeat after the key expired answers nil where the first call answered the value (and a
/// relative expiry starts again from the repeat).
fn refine_getex(args: &[Bytes]) -> Idempotence {
    let mut class = Read;
    for arg in args.get(2..).unwrap_or_default() {
        if one_of(arg, &["EX", "PX", "EXAT", "PXAT"]) {
            return NonIdempotent;
        } else if arg.eq_ignore_ascii_case(b"PERSIST") {
            class = Idempotent;
        }
    }
    class
}

/// `BITFIELD key [GET type offset | SET type offset value | INCRBY type offset incr |
/// OVERFLOW mode] ...`: only GETs is a Read. SET answers the old value, so a repeat answers
/// what the first call wrote, as GETSET does; INCRBY adds again.
fn refine_bitfield(args: &[Bytes]) -> Idempotence {
    let mut i = 2;
    while let Some(arg) = args.get(i) {
        if arg.eq_ignore_ascii_case(b"GET") {
            i += 3;
        } else if arg.eq_ignore_ascii_case(b"OVERFLOW") {
            i += 2;
        } else {
            return NonIdempotent; // SET, INCRBY, or something the backend refuses
        }
    }
    Read
}

/// `EVAL script ...`: a script whose shebang declares `no-writes` only reads (its backend
/// refuses a write from it), so it is retried as any read is.
fn refine_eval(args: &[Bytes]) -> Idempotence {
    match args.get(1).map(|body| super::shebang::flags(body)) {
        Some(Ok(flags)) if flags.no_writes => Read,
        _ => NonIdempotent,
    }
}

/// `BITOP op dest key ...`
fn refine_bitop(args: &[Bytes]) -> Idempotence {
    store_class(args.get(2), args.get(3..).unwrap_or_default())
}

/// `SDIFFSTORE | SINTERSTORE | SUNIONSTORE dest key ...`
fn refine_store_from_2(args: &[Bytes]) -> Idempotence {
    store_class(args.get(1), args.get(2..).unwrap_or_default())
}

/// `ZRANGESTORE dst src ...`, `GEOSEARCHSTORE dst src ...`
fn refine_store_1_2(args: &[Bytes]) -> Idempotence {
    store_class(args.get(1), args.get(2..3).unwrap_or_default())
}

/// `ZUNIONSTORE | ZINTERSTORE | ZDIFFSTORE dest numkeys key ... [WEIGHTS ...] [AGGREGATE ...]`
fn refine_store_numkeys(args: &[Bytes]) -> Idempotence {
    let count = int_arg(args, 2)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let end = args.len().min(3usize.saturating_add(count));
    store_class(args.get(1), args.get(3..end).unwrap_or_default())
}

/// `ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member ...`: the options come before the
/// first score, so a member called INCR is a member.
fn refine_zadd(args: &[Bytes]) -> Idempotence {
    for arg in args.iter().skip(2) {
        if arg.eq_ignore_ascii_case(b"INCR") {
            return NonIdempotent;
        }
        if !one_of(arg, &["NX", "XX", "GT", "LT", "CH"]) {
            break;
        }
    }
    IdempotentEffect
}

/// `XADD key [NOMKSTREAM] [MAXLEN | MINID [= | ~] threshold [LIMIT count]] id field value ...`
///
/// An explicit id is `IdempotentEffect` (a repeat answers "equal or smaller" and appends
/// nothing); `*` and `<ms>-*` let the server pick, so a repeat appends a second entry.
fn refine_xadd(args: &[Bytes]) -> Idempotence {
    let mut i = 2;
    loop {
        let Some(arg) = args.get(i) else {
            return NonIdempotent;
        };
        if arg.eq_ignore_ascii_case(b"NOMKSTREAM") {
            i += 1;
        } else if one_of(arg, &["MAXLEN", "MINID"]) {
            i += 1;
            if is(args, i, "=") || is(args, i, "~") {
                i += 1;
            }
            i += 1; // the threshold
        } else if arg.eq_ignore_ascii_case(b"LIMIT") {
            i += 2;
        } else if arg[..] == b"*"[..] || arg.ends_with(b"-*") {
            return NonIdempotent;
        } else {
            return IdempotentEffect;
        }
    }
}

/// Whether an `XREAD` / `XREADGROUP` blocks: BLOCK among the options from `from` up to STREAMS.
fn blocks(args: &[Bytes], from: usize) -> bool {
    let mut i = from;
    while let Some(arg) = args.get(i) {
        if arg.eq_ignore_ascii_case(b"STREAMS") {
            return false;
        } else if arg.eq_ignore_ascii_case(b"BLOCK") {
            return true;
        } else if arg.eq_ignore_ascii_case(b"COUNT") {
            i += 2;
        } else {
            i += 1; // NOACK
        }
    }
    false
}

/// `XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...`
fn refine_xread(args: &[Bytes]) -> Idempotence {
    if blocks(args, 1) {
        ConnectionBound
    } else {
        Read
    }
}

/// `XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key ... id ...`
fn refine_xreadgroup(args: &[Bytes]) -> Idempotence {
    if blocks(args, 4) {
        ConnectionBound
    } else {
        NonIdempotent
    }
}

/// How far ahead of the proxy's clock a deadline must be for `EXPIREAT` / `PEXPIREAT` to count
/// as `Idempotent`: longer than a retry budget (about 93 s by default) plus clock skew.
const DEADLINE_MARGIN_MS: i64 = 10 * 60 * 1000;

/// `EXPIREAT key seconds [NX | XX | GT | LT]`
fn refine_expireat(args: &[Bytes]) -> Idempotence {
    absolute_expiry(args, 1000)
}

/// `PEXPIREAT key milliseconds [NX | XX | GT | LT]`
fn refine_pexpireat(args: &[Bytes]) -> Idempotence {
    absolute_expiry(args, 1)
}

/// An absolute deadline repeats to the same state and the same reply, unless a condition
/// (NX, XX, GT, LT) makes the reply say whether this call set it, or the deadline has passed or
/// may pass before a retry: then the first call deletes the key and a repeat answers 0.
fn absolute_expiry(args: &[Bytes], ms_per_unit: i64) -> Idempotence {
    if args
        .iter()
        .skip(3)
        .any(|arg| one_of(arg, &["NX", "XX", "GT", "LT"]))
    {
        return IdempotentEffect;
    }
    let Some(deadline) = int_arg(args, 2) else {
        return IdempotentEffect;
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(i64::MAX, |d| {
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
        });
    if deadline.saturating_mul(ms_per_unit) > now_ms.saturating_add(DEADLINE_MARGIN_MS) {
        Idempotent
    } else {
        IdempotentEffect
    }
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]`
fn refine_restore(args: &[Bytes]) -> Idempotence {
    if args
        .iter()
        .skip(4)
        .any(|arg| arg.eq_ignore_ascii_case(b"REPLACE"))
    {
        Idempotent
    } else {
        NonIdempotent
    }
}

/// `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC | DESC] [ALPHA]
/// [STORE dest]`: a Read unless it stores.
fn refine_sort(args: &[Bytes]) -> Idempotence {
    stores(args, StoreOptions::Sort)
}

/// A Read unless its options store (then as [`store_class`] says).
fn stores(args: &[Bytes], options: StoreOptions) -> Idempotence {
    match store_index(options, args) {
        Some(at) => store_class(args.get(at), args.get(1..2).unwrap_or_default()),
        None => Read,
    }
}

/// `GEORADIUS key longitude latitude radius unit [options]`
fn refine_georadius(args: &[Bytes]) -> Idempotence {
    stores(args, StoreOptions::Georadius(6))
}

/// `GEORADIUSBYMEMBER key member radius unit [options]`
fn refine_georadiusbymember(args: &[Bytes]) -> Idempotence {
    stores(args, StoreOptions::Georadius(5))
}
