//! The commands a SQL backend serves: which ones write, and which function runs each.
//!
//! A command not listed here is answered with an error naming it, never forwarded anywhere.

pub mod args;
pub mod bits;
pub mod blocking;
pub mod config;
pub mod hashes;
pub mod keys;
pub mod lists;
pub mod pubsub;
pub mod sets;
pub mod sort;
pub mod store;
pub mod stream_groups;
pub mod streams;
pub mod strings;
pub mod unchanged;
pub mod watch;
pub mod zsets;

pub use config::harmless_setting;

use bytes::Bytes;
use sets::Algebra;
use store::{fail, Ctx, Out};
use zsets::{Form, ZAlgebra};

/// A command name in upper case, on the stack: looked up three times per request, so no
/// allocation. A name longer than any served one comes out empty and matches nothing.
struct Upper {
    buf: [u8; 20],
    len: usize,
}

impl Upper {
    fn of(name: &[u8]) -> Upper {
        let mut buf = [0u8; 20];
        let len = if name.len() <= buf.len() {
            name.len()
        } else {
            0
        };
        for (to, from) in buf.iter_mut().zip(&name[..len]) {
            *to = from.to_ascii_uppercase();
        }
        Upper { buf, len }
    }

    fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Whether the command writes (it then runs in a write transaction); None when the SQL
/// backends do not serve it.
pub fn writes(name: &[u8]) -> Option<bool> {
    let upper = Upper::of(name);
    Some(match upper.as_slice() {
        b"GET" | b"MGET" | b"STRLEN" | b"GETRANGE" | b"LCS" | b"RANDOMKEY" | b"EXISTS"
        | b"TOUCH" | b"TYPE" | b"TTL" | b"PTTL" | b"EXPIRETIME" | b"PEXPIRETIME" | b"KEYS"
        | b"SCAN" | b"DBSIZE" | b"HGET" | b"HMGET" | b"HGETALL" | b"HKEYS" | b"HVALS" | b"HLEN"
        | b"HEXISTS" | b"HSTRLEN" | b"HRANDFIELD" | b"HSCAN" | b"SMEMBERS" | b"SISMEMBER"
        | b"SMISMEMBER" | b"SCARD" | b"SINTER" | b"SUNION" | b"SDIFF" | b"SINTERCARD"
        | b"SRANDMEMBER" | b"SSCAN" | b"ZSCORE" | b"ZMSCORE" | b"ZCARD" | b"ZRANK"
        | b"ZREVRANK" | b"ZCOUNT" | b"ZRANGE" | b"ZREVRANGE" | b"ZRANGEBYSCORE"
        | b"ZREVRANGEBYSCORE" | b"ZRANGEBYLEX" | b"ZREVRANGEBYLEX" | b"ZLEXCOUNT"
        | b"ZRANDMEMBER" | b"ZSCAN" | b"ZINTER" | b"ZUNION" | b"ZDIFF" | b"ZINTERCARD"
        | b"LRANGE" | b"LLEN" | b"LINDEX" | b"LPOS" | b"XLEN" | b"XRANGE" | b"XREVRANGE"
        | b"WAIT" | b"HF.WATCHED" | b"TIME" | b"SORT_RO" | b"XREAD" | b"HF.XLAST" | b"XPENDING"
        | b"XINFO" | b"CONFIG" | b"GETBIT" | b"BITCOUNT" | b"BITPOS" | b"PUBSUB" => false,
        // holdfast's own: `WATCH` registers its keys (`watch`).
        b"HF.WATCH" => true,
        b"SET" | b"SETNX" | b"SETEX" | b"PSETEX" | b"GETSET" | b"GETDEL" | b"GETEX" | b"MSET"
        | b"MSETNX" | b"INCR" | b"DECR" | b"INCRBY" | b"DECRBY" | b"INCRBYFLOAT" | b"APPEND"
        | b"SETRANGE" | b"COPY" | b"DEL" | b"UNLINK" | b"RENAME" | b"RENAMENX" | b"EXPIRE"
        | b"PEXPIRE" | b"EXPIREAT" | b"PEXPIREAT" | b"PERSIST" | b"FLUSHDB" | b"FLUSHALL"
        | b"HSET" | b"HMSET" | b"HSETNX" | b"HDEL" | b"HINCRBY" | b"HINCRBYFLOAT" | b"SADD"
        | b"SREM" | b"SINTERSTORE" | b"SUNIONSTORE" | b"SDIFFSTORE" | b"SMOVE" | b"SPOP"
        | b"ZADD" | b"ZINCRBY" | b"ZREM" | b"ZREMRANGEBYSCORE" | b"ZREMRANGEBYLEX"
        | b"ZREMRANGEBYRANK" | b"ZPOPMIN" | b"ZPOPMAX" | b"ZMPOP" | b"ZINTERSTORE"
        | b"ZUNIONSTORE" | b"ZDIFFSTORE" | b"LPUSH" | b"RPUSH" | b"LPUSHX" | b"RPUSHX"
        | b"LPOP" | b"RPOP" | b"LSET" | b"LREM" | b"LTRIM" | b"LINSERT" | b"SORT" | b"XSETID"
        | b"ZRANGESTORE" | b"BLPOP" | b"BRPOP" | b"BLMOVE" | b"BRPOPLPUSH" | b"BLMPOP"
        | b"BZPOPMIN" | b"BZPOPMAX" | b"BZMPOP" | b"LMOVE" | b"RPOPLPUSH" | b"LMPOP" | b"XADD"
        | b"XTRIM" | b"XDEL" | b"XGROUP" | b"XREADGROUP" | b"XACK" | b"XCLAIM" | b"XAUTOCLAIM"
        | b"SETBIT" | b"BITOP" => true,
        // On PostgreSQL a NOTIFY in the transaction; delivered once it commits (`broker`).
        b"PUBLISH" | b"SPUBLISH" => true,
        _ => return None,
    })
}

/// Whether a read runs exactly one statement, so it needs no transaction around it.
pub fn one_statement(args: &[Bytes]) -> bool {
    let name = Upper::of(args.first().map(|n| n.as_ref()).unwrap_or_default());
    match name.as_slice() {
        b"GET" | b"STRLEN" | b"GETRANGE" | b"TYPE" | b"TTL" | b"PTTL" | b"EXPIRETIME"
        | b"PEXPIRETIME" | b"KEYS" | b"SCAN" | b"DBSIZE" | b"WAIT" => true,
        b"EXISTS" | b"TOUCH" => args.len() == 2,
        _ => false,
    }
}

/// Runs one command; `allow_flush` is the backend's setting.
pub async fn run(ctx: &mut Ctx<'_>, a: &[Bytes], allow_flush: bool) -> Out {
    let name = Upper::of(a.first().map(|n| n.as_ref()).unwrap_or_default());
    match name.as_slice() {
        b"GET" => strings::get(ctx, a).await,
        b"SET" => strings::set(ctx, a).await,
        b"SETNX" => strings::setnx(ctx, a).await,
        b"SETEX" => strings::setex(ctx, a, true).await,
        b"PSETEX" => strings::setex(ctx, a, false).await,
        b"GETSET" => strings::getset(ctx, a).await,
        b"GETDEL" => strings::getdel(ctx, a).await,
        b"GETEX" => strings::getex(ctx, a).await,
        b"MGET" => strings::mget(ctx, a).await,
        b"MSET" => strings::mset(ctx, a, false).await,
        b"MSETNX" => strings::mset(ctx, a, true).await,
        b"INCR" => strings::incr_by(ctx, a, 1).await,
        b"DECR" => strings::incr_by(ctx, a, -1).await,
        b"INCRBY" => strings::incr_by_arg(ctx, a, false).await,
        b"DECRBY" => strings::incr_by_arg(ctx, a, true).await,
        b"INCRBYFLOAT" => strings::incrbyfloat(ctx, a).await,
        b"APPEND" => strings::append(ctx, a).await,
        b"STRLEN" => strings::strlen(ctx, a).await,
        b"GETRANGE" => strings::getrange(ctx, a).await,
        b"SETRANGE" => strings::setrange(ctx, a).await,
        b"LCS" => strings::lcs(ctx, a).await,
        b"COPY" => keys::copy(ctx, a).await,
        b"RANDOMKEY" => keys::randomkey(ctx).await,
        b"DEL" | b"UNLINK" => keys::del(ctx, a).await,
        b"EXISTS" | b"TOUCH" => keys::exists(ctx, a).await,
        b"TYPE" => keys::kind(ctx, a).await,
        b"RENAME" => keys::rename(ctx, a, false).await,
        b"RENAMENX" => keys::rename(ctx, a, true).await,
        b"EXPIRE" => keys::expire(ctx, a, true, true).await,
        b"PEXPIRE" => keys::expire(ctx, a, false, true).await,
        b"EXPIREAT" => keys::expire(ctx, a, true, false).await,
        b"PEXPIREAT" => keys::expire(ctx, a, false, false).await,
        b"TTL" => keys::ttl(ctx, a, true, false).await,
        b"PTTL" => keys::ttl(ctx, a, false, false).await,
        b"EXPIRETIME" => keys::ttl(ctx, a, true, true).await,
        b"PEXPIRETIME" => keys::ttl(ctx, a, false, true).await,
        b"PERSIST" => keys::persist(ctx, a).await,
        b"KEYS" => keys::keys(ctx, a).await,
        b"SCAN" => keys::scan(ctx, a).await,
        b"DBSIZE" => keys::dbsize(ctx).await,
        b"FLUSHDB" | b"FLUSHALL" => keys::flush(ctx, a, allow_flush).await,
        // Every acknowledged write is already durable in the database; there are no
        // replicas for WAIT to count.
        b"WAIT" => {
            args::int(strings::arg(a, 1))?;
            args::int(strings::arg(a, 2))?;
            Ok(store::int(0))
        }
        b"HSET" => hashes::hset(ctx, a, false).await,
        b"HMSET" => hashes::hset(ctx, a, true).await,
        b"HSETNX" => hashes::hsetnx(ctx, a).await,
        b"HGET" => hashes::hget(ctx, a).await,
        b"HMGET" => hashes::hmget(ctx, a).await,
        b"HGETALL" => hashes::hgetall(ctx, a, true, true).await,
        b"HKEYS" => hashes::hgetall(ctx, a, true, false).await,
        b"HVALS" => hashes::hgetall(ctx, a, false, true).await,
        b"HLEN" => hashes::hlen(ctx, a).await,
        b"HEXISTS" => hashes::hexists(ctx, a).await,
        b"HSTRLEN" => hashes::hstrlen(ctx, a).await,
        b"HRANDFIELD" => hashes::hrandfield(ctx, a).await,
        b"HSCAN" => hashes::hscan(ctx, a).await,
        b"HDEL" => hashes::hdel(ctx, a).await,
        b"HINCRBY" => hashes::hincrby(ctx, a).await,
        b"HINCRBYFLOAT" => hashes::hincrbyfloat(ctx, a).await,
        b"SADD" => sets::sadd(ctx, a).await,
        b"SREM" => sets::srem(ctx, a).await,
        b"SMEMBERS" => sets::smembers(ctx, a).await,
        b"SISMEMBER" => sets::sismember(ctx, a).await,
        b"SMISMEMBER" => sets::smismember(ctx, a).await,
        b"SCARD" => sets::scard(ctx, a).await,
        b"SINTER" => sets::algebra(ctx, a, Algebra::Inter).await,
        b"SUNION" => sets::algebra(ctx, a, Algebra::Union).await,
        b"SDIFF" => sets::algebra(ctx, a, Algebra::Diff).await,
        b"SINTERSTORE" => sets::algebra_store(ctx, a, Algebra::Inter).await,
        b"SUNIONSTORE" => sets::algebra_store(ctx, a, Algebra::Union).await,
        b"SDIFFSTORE" => sets::algebra_store(ctx, a, Algebra::Diff).await,
        b"SINTERCARD" => sets::sintercard(ctx, a).await,
        b"SMOVE" => sets::smove(ctx, a).await,
        b"SPOP" => sets::spop(ctx, a).await,
        b"SRANDMEMBER" => sets::srandmember(ctx, a).await,
        b"SSCAN" => sets::sscan(ctx, a).await,
        b"ZADD" => zsets::zadd(ctx, a).await,
        b"ZINCRBY" => zsets::zincrby(ctx, a).await,
        b"ZREM" => zsets::zrem(ctx, a).await,
        b"ZSCORE" => zsets::zscore(ctx, a).await,
        b"ZMSCORE" => zsets::zmscore(ctx, a).await,
        b"ZCARD" => zsets::zcard(ctx, a).await,
        b"ZRANK" => zsets::zrank(ctx, a, false).await,
        b"ZREVRANK" => zsets::zrank(ctx, a, true).await,
        b"ZCOUNT" => zsets::zcount(ctx, a).await,
        b"ZRANGE" => zsets::zrange(ctx, a, Form::Range).await,
        b"ZREVRANGE" => zsets::zrange(ctx, a, Form::RevRange).await,
        b"ZRANGEBYSCORE" => zsets::zrange(ctx, a, Form::ByScore).await,
        b"ZREVRANGEBYSCORE" => zsets::zrange(ctx, a, Form::RevByScore).await,
        b"ZREMRANGEBYSCORE" => zsets::zremrangebyscore(ctx, a).await,
        b"ZRANGEBYLEX" => zsets::zrangebylex(ctx, a, false).await,
        b"ZREVRANGEBYLEX" => zsets::zrangebylex(ctx, a, true).await,
        b"ZLEXCOUNT" => zsets::zlexcount(ctx, a).await,
        b"ZREMRANGEBYLEX" => zsets::zremrangebylex(ctx, a).await,
        b"ZREMRANGEBYRANK" => zsets::zremrangebyrank(ctx, a).await,
        b"ZPOPMIN" => zsets::zpop(ctx, a, false).await,
        b"ZPOPMAX" => zsets::zpop(ctx, a, true).await,
        b"ZMPOP" => zsets::zmpop(ctx, a).await,
        b"ZRANDMEMBER" => zsets::zrandmember(ctx, a).await,
        b"ZSCAN" => zsets::zscan(ctx, a).await,
        b"ZINTER" => zsets::zalgebra(ctx, a, ZAlgebra::Inter).await,
        b"ZUNION" => zsets::zalgebra(ctx, a, ZAlgebra::Union).await,
        b"ZDIFF" => zsets::zalgebra(ctx, a, ZAlgebra::Diff).await,
        b"ZINTERSTORE" => zsets::zalgebra_store(ctx, a, ZAlgebra::Inter).await,
        b"ZUNIONSTORE" => zsets::zalgebra_store(ctx, a, ZAlgebra::Union).await,
        b"ZDIFFSTORE" => zsets::zalgebra_store(ctx, a, ZAlgebra::Diff).await,
        b"ZINTERCARD" => zsets::zintercard(ctx, a).await,
        b"LPUSH" => lists::push(ctx, a, true, false).await,
        b"RPUSH" => lists::push(ctx, a, false, false).await,
        b"LPUSHX" => lists::push(ctx, a, true, true).await,
        b"RPUSHX" => lists::push(ctx, a, false, true).await,
        b"LPOP" => lists::pop(ctx, a, true).await,
        b"RPOP" => lists::pop(ctx, a, false).await,
        b"LRANGE" => lists::lrange(ctx, a).await,
        b"LLEN" => lists::llen(ctx, a).await,
        b"LINDEX" => lists::lindex(ctx, a).await,
        b"LSET" => lists::lset(ctx, a).await,
        b"LREM" => lists::lrem(ctx, a).await,
        b"LTRIM" => lists::ltrim(ctx, a).await,
        b"LMOVE" => lists::lmove(ctx, a, true).await,
        b"RPOPLPUSH" => lists::lmove(ctx, a, false).await,
        b"LMPOP" => lists::lmpop(ctx, a).await,
        // One attempt: inside MULTI that is all a blocking command does, as in Redis; outside,
        // the client's connection tries again until its timeout (`blocking`).
        b"BLPOP" | b"BRPOP" | b"BLMOVE" | b"BRPOPLPUSH" | b"BLMPOP" | b"BZPOPMIN" | b"BZPOPMAX"
        | b"BZMPOP" => blocking::attempt(ctx, a).await,
        b"LPOS" => lists::lpos(ctx, a).await,
        b"LINSERT" => lists::linsert(ctx, a).await,
        b"XREAD" => streams::xread(ctx, a).await,
        b"XSETID" => streams::xsetid(ctx, a).await,
        b"HF.XLAST" => streams::xlast(ctx, a).await,
        b"XGROUP" => stream_groups::xgroup(ctx, a).await,
        b"XREADGROUP" => stream_groups::xreadgroup(ctx, a).await,
        b"XACK" => stream_groups::xack(ctx, a).await,
        b"XPENDING" => stream_groups::xpending(ctx, a).await,
        b"XCLAIM" => stream_groups::xclaim(ctx, a).await,
        b"XAUTOCLAIM" => stream_groups::xautoclaim(ctx, a).await,
        b"XINFO" => stream_groups::xinfo(ctx, a).await,
        b"CONFIG" => config::config(a),
        b"SETBIT" => bits::setbit(ctx, a).await,
        b"GETBIT" => bits::getbit(ctx, a).await,
        b"BITCOUNT" => bits::bitcount(ctx, a).await,
        b"BITPOS" => bits::bitpos(ctx, a).await,
        b"BITOP" => bits::bitop(ctx, a).await,
        b"SORT" => sort::sort(ctx, a, false).await,
        b"SORT_RO" => sort::sort(ctx, a, true).await,
        b"ZRANGESTORE" => zsets::zrangestore(ctx, a).await,
        // Every holdfast's subscriptions on the database, from the registry (`broker`).
        b"PUBSUB" => Ok(pubsub::pubsub(ctx, a).await?),
        b"PUBLISH" => pubsub::publish(ctx, a, false).await,
        b"SPUBLISH" => pubsub::publish(ctx, a, true).await,
        // holdfast's clock, which SQL expiry runs on too.
        b"TIME" => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Ok(store::array(vec![
                store::bulk(Bytes::from(now.as_secs().to_string())),
                store::bulk(Bytes::from(now.subsec_micros().to_string())),
            ]))
        }
        b"XADD" => streams::xadd(ctx, a).await,
        b"XTRIM" => streams::xtrim(ctx, a).await,
        b"XLEN" => streams::xlen(ctx, a).await,
        b"XDEL" => streams::xdel(ctx, a).await,
        b"XRANGE" => streams::xrange(ctx, a, false).await,
        b"XREVRANGE" => streams::xrange(ctx, a, true).await,
        b"HF.WATCH" => watch::watch(ctx, a).await,
        b"HF.WATCHED" => watch::check(ctx, a).await,
        _ => fail(unsupported(
            a.first().map(|n| n.as_ref()).unwrap_or_default(),
        )),
    }
}

/// The reply to a command the SQL backends do not serve.
pub fn unsupported(name: &[u8]) -> String {
    format!(
        "ERR holdfast: '{}' is not served by SQL backends",
        String::from_utf8_lossy(name).to_ascii_lowercase()
    )
}
