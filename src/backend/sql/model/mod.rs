//! The commands a SQL backend serves: which ones write, and which function runs each.
//!
//! A command not listed here is answered with an error naming it, never forwarded anywhere.

pub mod args;
pub mod bitfield;
pub mod bits;
pub mod blocking;
pub mod config;
pub mod draws;
pub mod dump;
pub mod functions;
pub mod geo;
pub mod geohash;
pub mod hashes;
pub mod hll;
pub mod hyperloglog;
pub mod keys;
pub mod lists;
pub mod pubsub;
pub mod scripting;
pub mod sets;
pub mod sort;
pub mod statement;
pub mod store;
pub mod stream_groups;
pub mod streams;
pub mod strings;
pub mod unchanged;
pub mod watch;
pub mod zsets;

pub use config::harmless_setting;

use bytes::Bytes;
use geo::Search;
use redis_protocol::resp3::types::BytesFrame as Frame;
use scripting::Eval;
use sets::Algebra;
use store::{fail, Ctx, Out};
use zsets::algebra::ZAlgebra;
use zsets::ranges::Form;

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

/// How a command touches the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A read, in a read transaction.
    Read,
    /// A read of exactly one statement, which needs no transaction around it.
    One,
    /// A read of one statement per key it names (`EXISTS`, `TOUCH`): one statement, with
    /// no transaction, when it names one key.
    OnePerKey,
    /// A write, in a write transaction.
    Write,
}

/// Whether a read may join a batch of reads on a reader's connection (`engine/reads.rs`):
/// only those whose cost is bounded by what they name (a field, a member, a key's type or
/// expiry, a few fields or keys), so one never holds the batch behind it for long, nor fails
/// it. Reads whose cost grows with the collection (a whole collection, a range, a count,
/// `LINDEX`'s walk) stay alone, on connections of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Joins {
    /// Never batched.
    Alone,
    /// A point read.
    Point,
    /// A point read of several names after the first `n` arguments (`HMGET key f…`: 2),
    /// batched while it names at most [`POINT_NAMES`].
    Names(usize),
}

/// Most fields, members or keys a multi-name point read may name and still join a batch.
pub const POINT_NAMES: usize = 16;

/// The one table of the commands SQL backends serve: each row is a name (or names that run
/// alike), how it touches the database, whether it joins a read batch, and what runs it (`ctx`, `a` the whole command,
/// `allow_flush` the backend's setting). A command not in the table is answered with an
/// error naming it, never forwarded anywhere. The table is a macro so that one list makes
/// [`access`], [`joins`] and [`run`] (each a `match` on the upper-cased name, no allocation).
macro_rules! commands {
    (($ctx:ident, $a:ident, $flush:ident) $( $($name:literal)|+ => $access:ident, $joins:expr, $run:expr; )*) => {
        /// How the command touches the database; None when SQL backends do not serve it.
        pub fn access(name: &[u8]) -> Option<Access> {
            Some(match Upper::of(name).as_slice() {
                $( $($name)|+ => Access::$access, )*
                _ => return None,
            })
        }

        /// Whether a read may join a batch of reads on a reader's connection.
        pub fn joins(name: &[u8]) -> Joins {
            #[allow(unused_imports)]
            use Joins::*;
            match Upper::of(name).as_slice() {
                $( $($name)|+ => $joins, )*
                _ => Joins::Alone,
            }
        }

        /// Runs one command.
        pub async fn run($ctx: &mut Ctx<'_>, $a: &[Bytes], $flush: bool) -> Out {
            let name = Upper::of($a.first().map(|n| n.as_ref()).unwrap_or_default());
            match name.as_slice() {
                $( $($name)|+ => $run, )*
                _ => fail(unsupported($a.first().map(|n| n.as_ref()).unwrap_or_default())),
            }
        }
    };
}

commands! {
    (ctx, a, allow_flush)
    // name(s)                 access     joins a read batch  run
    b"GET"                   => One,       Alone,              strings::get(ctx, a).await;
    b"SET"                   => Write,     Alone,              strings::set(ctx, a).await;
    b"SETNX"                 => Write,     Alone,              strings::setnx(ctx, a).await;
    b"SETEX"                 => Write,     Alone,              strings::setex(ctx, a, true).await;
    b"PSETEX"                => Write,     Alone,              strings::setex(ctx, a, false).await;
    b"GETSET"                => Write,     Alone,              strings::getset(ctx, a).await;
    b"GETDEL"                => Write,     Alone,              strings::getdel(ctx, a).await;
    b"GETEX"                 => Write,     Alone,              strings::getex(ctx, a).await;
    b"MGET"                  => Read,      Names(1),           strings::mget(ctx, a).await;
    b"MSET"                  => Write,     Alone,              strings::mset(ctx, a, false).await;
    b"MSETNX"                => Write,     Alone,              strings::mset(ctx, a, true).await;
    b"INCR"                  => Write,     Alone,              strings::incr_by(ctx, a, 1).await;
    b"DECR"                  => Write,     Alone,              strings::incr_by(ctx, a, -1).await;
    b"INCRBY"                => Write,     Alone,              strings::incr_by_arg(ctx, a, false).await;
    b"DECRBY"                => Write,     Alone,              strings::incr_by_arg(ctx, a, true).await;
    b"INCRBYFLOAT"           => Write,     Alone,              strings::incrbyfloat(ctx, a).await;
    b"APPEND"                => Write,     Alone,              strings::append(ctx, a).await;
    b"STRLEN"                => One,       Point,              strings::strlen(ctx, a).await;
    b"GETRANGE"              => One,       Alone,              strings::getrange(ctx, a).await;
    b"SETRANGE"              => Write,     Alone,              strings::setrange(ctx, a).await;
    b"LCS"                   => Read,      Alone,              strings::lcs(ctx, a).await;
    b"COPY"                  => Write,     Alone,              keys::copy(ctx, a).await;
    b"DUMP"                  => Read,      Alone,              dump::dump(ctx, a).await;
    b"RESTORE"               => Write,     Alone,              dump::restore(ctx, a).await;
    b"RANDOMKEY"             => Read,      Alone,              keys::randomkey(ctx).await;
    b"DEL" | b"UNLINK"       => Write,     Alone,              keys::del(ctx, a).await;
    b"EXISTS" | b"TOUCH"     => OnePerKey, Alone,              keys::exists(ctx, a).await;
    b"TYPE"                  => One,       Point,              keys::kind(ctx, a).await;
    b"RENAME"                => Write,     Alone,              keys::rename(ctx, a, false).await;
    b"RENAMENX"              => Write,     Alone,              keys::rename(ctx, a, true).await;
    b"EXPIRE"                => Write,     Alone,              keys::expire(ctx, a, true, true).await;
    b"PEXPIRE"               => Write,     Alone,              keys::expire(ctx, a, false, true).await;
    b"EXPIREAT"              => Write,     Alone,              keys::expire(ctx, a, true, false).await;
    b"PEXPIREAT"             => Write,     Alone,              keys::expire(ctx, a, false, false).await;
    b"TTL"                   => One,       Point,              keys::ttl(ctx, a, true, false).await;
    b"PTTL"                  => One,       Point,              keys::ttl(ctx, a, false, false).await;
    b"EXPIRETIME"            => One,       Point,              keys::ttl(ctx, a, true, true).await;
    b"PEXPIRETIME"           => One,       Point,              keys::ttl(ctx, a, false, true).await;
    b"PERSIST"               => Write,     Alone,              keys::persist(ctx, a).await;
    b"KEYS"                  => One,       Alone,              keys::keys(ctx, a).await;
    b"SCAN"                  => One,       Alone,              keys::scan(ctx, a).await;
    b"DBSIZE"                => One,       Alone,              keys::dbsize(ctx).await;
    b"FLUSHDB" | b"FLUSHALL" => Write,     Alone,              keys::flush(ctx, a, allow_flush).await;
    b"WAIT"                  => One,       Alone,              wait(a);
    b"HSET"                  => Write,     Alone,              hashes::hset(ctx, a, false).await;
    b"HMSET"                 => Write,     Alone,              hashes::hset(ctx, a, true).await;
    b"HSETNX"                => Write,     Alone,              hashes::hsetnx(ctx, a).await;
    b"HGET"                  => Read,      Point,              hashes::hget(ctx, a).await;
    b"HMGET"                 => Read,      Names(2),           hashes::hmget(ctx, a).await;
    b"HGETALL"               => Read,      Alone,              hashes::hgetall(ctx, a, true, true).await;
    b"HKEYS"                 => Read,      Alone,              hashes::hgetall(ctx, a, true, false).await;
    b"HVALS"                 => Read,      Alone,              hashes::hgetall(ctx, a, false, true).await;
    b"HLEN"                  => Read,      Alone,              hashes::hlen(ctx, a).await;
    b"HEXISTS"               => Read,      Point,              hashes::hexists(ctx, a).await;
    b"HSTRLEN"               => Read,      Point,              hashes::hstrlen(ctx, a).await;
    b"HRANDFIELD"            => Read,      Alone,              hashes::hrandfield(ctx, a).await;
    b"HSCAN"                 => Read,      Alone,              hashes::hscan(ctx, a).await;
    b"HDEL"                  => Write,     Alone,              hashes::hdel(ctx, a).await;
    b"HINCRBY"               => Write,     Alone,              hashes::hincrby(ctx, a).await;
    b"HINCRBYFLOAT"          => Write,     Alone,              hashes::hincrbyfloat(ctx, a).await;
    b"SADD"                  => Write,     Alone,              sets::sadd(ctx, a).await;
    b"SREM"                  => Write,     Alone,              sets::srem(ctx, a).await;
    b"SMEMBERS"              => Read,      Alone,              sets::smembers(ctx, a).await;
    b"SISMEMBER"             => Read,      Point,              sets::sismember(ctx, a).await;
    b"SMISMEMBER"            => Read,      Names(2),           sets::smismember(ctx, a).await;
    b"SCARD"                 => Read,      Alone,              sets::scard(ctx, a).await;
    b"SINTER"                => Read,      Alone,              sets::algebra(ctx, a, Algebra::Inter).await;
    b"SUNION"                => Read,      Alone,              sets::algebra(ctx, a, Algebra::Union).await;
    b"SDIFF"                 => Read,      Alone,              sets::algebra(ctx, a, Algebra::Diff).await;
    b"SINTERSTORE"           => Write,     Alone,              sets::algebra_store(ctx, a, Algebra::Inter).await;
    b"SUNIONSTORE"           => Write,     Alone,              sets::algebra_store(ctx, a, Algebra::Union).await;
    b"SDIFFSTORE"            => Write,     Alone,              sets::algebra_store(ctx, a, Algebra::Diff).await;
    b"SINTERCARD"            => Read,      Alone,              sets::sintercard(ctx, a).await;
    b"SMOVE"                 => Write,     Alone,              sets::smove(ctx, a).await;
    b"SPOP"                  => Write,     Alone,              sets::spop(ctx, a).await;
    b"SRANDMEMBER"           => Read,      Alone,              sets::srandmember(ctx, a).await;
    b"SSCAN"                 => Read,      Alone,              sets::sscan(ctx, a).await;
    b"ZADD"                  => Write,     Alone,              zsets::zadd(ctx, a).await;
    b"ZINCRBY"               => Write,     Alone,              zsets::zincrby(ctx, a).await;
    b"ZREM"                  => Write,     Alone,              zsets::zrem(ctx, a).await;
    b"ZSCORE"                => Read,      Point,              zsets::zscore(ctx, a).await;
    b"ZMSCORE"               => Read,      Names(2),           zsets::zmscore(ctx, a).await;
    b"ZCARD"                 => Read,      Alone,              zsets::zcard(ctx, a).await;
    b"ZRANK"                 => Read,      Alone,              zsets::zrank(ctx, a, false).await;
    b"ZREVRANK"              => Read,      Alone,              zsets::zrank(ctx, a, true).await;
    b"ZCOUNT"                => Read,      Alone,              zsets::ranges::zcount(ctx, a).await;
    b"ZRANGE"                => Read,      Alone,              zsets::ranges::zrange(ctx, a, Form::Range).await;
    b"ZREVRANGE"             => Read,      Alone,              zsets::ranges::zrange(ctx, a, Form::RevRange).await;
    b"ZRANGEBYSCORE"         => Read,      Alone,              zsets::ranges::zrange(ctx, a, Form::ByScore).await;
    b"ZREVRANGEBYSCORE"      => Read,      Alone,              zsets::ranges::zrange(ctx, a, Form::RevByScore).await;
    b"ZREMRANGEBYSCORE"      => Write,     Alone,              zsets::ranges::zremrangebyscore(ctx, a).await;
    b"ZRANGEBYLEX"           => Read,      Alone,              zsets::ranges::zrangebylex(ctx, a, false).await;
    b"ZREVRANGEBYLEX"        => Read,      Alone,              zsets::ranges::zrangebylex(ctx, a, true).await;
    b"ZLEXCOUNT"             => Read,      Alone,              zsets::ranges::zlexcount(ctx, a).await;
    b"ZREMRANGEBYLEX"        => Write,     Alone,              zsets::ranges::zremrangebylex(ctx, a).await;
    b"ZREMRANGEBYRANK"       => Write,     Alone,              zsets::ranges::zremrangebyrank(ctx, a).await;
    b"ZPOPMIN"               => Write,     Alone,              zsets::zpop(ctx, a, false).await;
    b"ZPOPMAX"               => Write,     Alone,              zsets::zpop(ctx, a, true).await;
    b"ZMPOP"                 => Write,     Alone,              zsets::zmpop(ctx, a).await;
    b"ZRANDMEMBER"           => Read,      Alone,              zsets::zrandmember(ctx, a).await;
    b"ZSCAN"                 => Read,      Alone,              zsets::zscan(ctx, a).await;
    b"ZINTER"                => Read,      Alone,              zsets::algebra::zalgebra(ctx, a, ZAlgebra::Inter).await;
    b"ZUNION"                => Read,      Alone,              zsets::algebra::zalgebra(ctx, a, ZAlgebra::Union).await;
    b"ZDIFF"                 => Read,      Alone,              zsets::algebra::zalgebra(ctx, a, ZAlgebra::Diff).await;
    b"ZINTERSTORE"           => Write,     Alone,              zsets::algebra::zalgebra_store(ctx, a, ZAlgebra::Inter).await;
    b"ZUNIONSTORE"           => Write,     Alone,              zsets::algebra::zalgebra_store(ctx, a, ZAlgebra::Union).await;
    b"ZDIFFSTORE"            => Write,     Alone,              zsets::algebra::zalgebra_store(ctx, a, ZAlgebra::Diff).await;
    b"ZINTERCARD"            => Read,      Alone,              zsets::algebra::zintercard(ctx, a).await;
    b"LPUSH"                 => Write,     Alone,              lists::push(ctx, a, true, false).await;
    b"RPUSH"                 => Write,     Alone,              lists::push(ctx, a, false, false).await;
    b"LPUSHX"                => Write,     Alone,              lists::push(ctx, a, true, true).await;
    b"RPUSHX"                => Write,     Alone,              lists::push(ctx, a, false, true).await;
    b"LPOP"                  => Write,     Alone,              lists::pop(ctx, a, true).await;
    b"RPOP"                  => Write,     Alone,              lists::pop(ctx, a, false).await;
    b"LRANGE"                => Read,      Alone,              lists::lrange(ctx, a).await;
    b"LLEN"                  => Read,      Alone,              lists::llen(ctx, a).await;
    b"LINDEX"                => Read,      Alone,              lists::lindex(ctx, a).await;
    b"LSET"                  => Write,     Alone,              lists::lset(ctx, a).await;
    b"LREM"                  => Write,     Alone,              lists::lrem(ctx, a).await;
    b"LTRIM"                 => Write,     Alone,              lists::ltrim(ctx, a).await;
    b"LMOVE"                 => Write,     Alone,              lists::lmove(ctx, a, true).await;
    b"RPOPLPUSH"             => Write,     Alone,              lists::lmove(ctx, a, false).await;
    b"LMPOP"                 => Write,     Alone,              lists::lmpop(ctx, a).await;
    // One attempt: inside MULTI that is all a blocking command does, as in Redis; outside,
    // the client's connection tries again until its timeout (`blocking`).
    b"BLPOP" | b"BRPOP" | b"BLMOVE" | b"BRPOPLPUSH" | b"BLMPOP" | b"BZPOPMIN" | b"BZPOPMAX"
    | b"BZMPOP"              => Write,     Alone,              blocking::attempt(ctx, a).await;
    b"LPOS"                  => Read,      Alone,              lists::lpos(ctx, a).await;
    b"LINSERT"               => Write,     Alone,              lists::linsert(ctx, a).await;
    b"XREAD"                 => Read,      Alone,              streams::read::xread(ctx, a).await;
    b"XSETID"                => Write,     Alone,              streams::write::xsetid(ctx, a).await;
    b"HF.XLAST"              => Read,      Alone,              streams::read::xlast(ctx, a).await;
    b"XGROUP"                => Write,     Alone,              stream_groups::manage::xgroup(ctx, a).await;
    b"XREADGROUP"            => Write,     Alone,              stream_groups::consume::xreadgroup(ctx, a).await;
    b"XACK"                  => Write,     Alone,              stream_groups::consume::xack(ctx, a).await;
    b"XPENDING"              => Read,      Alone,              stream_groups::consume::xpending(ctx, a).await;
    b"XCLAIM"                => Write,     Alone,              stream_groups::consume::xclaim(ctx, a).await;
    b"XAUTOCLAIM"            => Write,     Alone,              stream_groups::consume::xautoclaim(ctx, a).await;
    b"XINFO"                 => Read,      Alone,              stream_groups::manage::xinfo(ctx, a).await;
    b"CONFIG"                => Read,      Alone,              config::config(a);
    b"SETBIT"                => Write,     Alone,              bits::setbit(ctx, a).await;
    b"GETBIT"                => Read,      Alone,              bits::getbit(ctx, a).await;
    b"BITCOUNT"              => Read,      Alone,              bits::bitcount(ctx, a).await;
    b"BITPOS"                => Read,      Alone,              bits::bitpos(ctx, a).await;
    b"BITOP"                 => Write,     Alone,              bits::bitop(ctx, a).await;
    b"GEOADD"                => Write,     Alone,              geo::geoadd(ctx, a).await;
    b"GEOPOS"                => Read,      Alone,              geo::geopos(ctx, a).await;
    b"GEOHASH"               => Read,      Alone,              geo::geohash_cmd(ctx, a).await;
    b"GEODIST"               => Read,      Alone,              geo::geodist(ctx, a).await;
    b"GEORADIUS"             => Write,     Alone,              geo::search(ctx, a, Search::Radius).await;
    b"GEORADIUS_RO"          => Read,      Alone,              geo::search(ctx, a, Search::RadiusRo).await;
    b"GEORADIUSBYMEMBER"     => Write,     Alone,              geo::search(ctx, a, Search::ByMember).await;
    b"GEORADIUSBYMEMBER_RO"  => Read,      Alone,              geo::search(ctx, a, Search::ByMemberRo).await;
    b"GEOSEARCH"             => Read,      Alone,              geo::search(ctx, a, Search::Plain).await;
    b"GEOSEARCHSTORE"        => Write,     Alone,              geo::search(ctx, a, Search::Store).await;
    // PFCOUNT of one key writes its cached estimate back, as Redis does.
    b"PFADD"                 => Write,     Alone,              hyperloglog::pfadd(ctx, a).await;
    b"PFCOUNT"               => Write,     Alone,              hyperloglog::pfcount(ctx, a).await;
    b"PFMERGE"               => Write,     Alone,              hyperloglog::pfmerge(ctx, a).await;
    b"BITFIELD"              => Write,     Alone,              bitfield::bitfield(ctx, a, false).await;
    b"BITFIELD_RO"           => Read,      Alone,              bitfield::bitfield(ctx, a, true).await;
    b"SORT"                  => Write,     Alone,              sort::sort(ctx, a, false).await;
    b"SORT_RO"               => Read,      Alone,              sort::sort(ctx, a, true).await;
    b"ZRANGESTORE"           => Write,     Alone,              zsets::ranges::zrangestore(ctx, a).await;
    // Every holdfast's subscriptions on the database, from the registry (`broker`).
    b"PUBSUB"                => Read,      Alone,              Ok(pubsub::pubsub(ctx, a).await?);
    b"PUBLISH"               => Write,     Alone,              pubsub::publish(ctx, a, false).await;
    b"SPUBLISH"              => Write,     Alone,              pubsub::publish(ctx, a, true).await;
    b"TIME"                  => Read,      Alone,              Ok(time());
    b"XADD"                  => Write,     Alone,              streams::write::xadd(ctx, a).await;
    b"XTRIM"                 => Write,     Alone,              streams::write::xtrim(ctx, a).await;
    b"XLEN"                  => Read,      Alone,              streams::read::xlen(ctx, a).await;
    b"XDEL"                  => Write,     Alone,              streams::write::xdel(ctx, a).await;
    b"XRANGE"                => Read,      Alone,              streams::read::xrange(ctx, a, false).await;
    b"XREVRANGE"             => Read,      Alone,              streams::read::xrange(ctx, a, true).await;
    b"HF.WATCH"              => Write,     Alone,              watch::watch(ctx, a).await;
    b"HF.WATCHED"            => Read,      Alone,              watch::check(ctx, a).await;
    // A script's calls run in its transaction (`scripting`); one declared read-only runs
    // in a read transaction.
    b"EVAL"                  => Write,     Alone,              scripting::eval(ctx, a, Eval::Text, allow_flush).await;
    b"EVALSHA"               => Write,     Alone,              scripting::eval(ctx, a, Eval::Sha, allow_flush).await;
    b"EVAL_RO"               => Read,      Alone,              scripting::eval(ctx, a, Eval::TextRo, allow_flush).await;
    b"EVALSHA_RO"            => Read,      Alone,              scripting::eval(ctx, a, Eval::ShaRo, allow_flush).await;
    b"SCRIPT"                => Write,     Alone,              scripting::script(ctx, a).await;
    b"FCALL"                 => Write,     Alone,              functions::fcall(ctx, a, false, allow_flush).await;
    b"FCALL_RO"              => Read,      Alone,              functions::fcall(ctx, a, true, allow_flush).await;
    b"FUNCTION"              => Write,     Alone,              functions::function(ctx, a).await;
}

/// Whether the command runs a script (it then runs in a transaction of its own, never in a
/// group commit: a script may take up to its limit, and is rolled back alone when stopped).
pub fn is_script(name: &[u8]) -> bool {
    [
        &b"EVAL"[..],
        b"EVALSHA",
        b"EVAL_RO",
        b"EVALSHA_RO",
        b"FCALL",
        b"FUNCTION",
        b"FCALL_RO",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

/// Whether the command writes (it then runs in a write transaction); None when the SQL
/// backends do not serve it.
pub fn writes(name: &[u8]) -> Option<bool> {
    access(name).map(|access| access == Access::Write)
}

/// Whether a read joins a read batch: a point read, or one naming at most [`POINT_NAMES`].
pub fn point_read(args: &[Bytes]) -> bool {
    match joins(args.first().map(|n| n.as_ref()).unwrap_or_default()) {
        Joins::Alone => false,
        Joins::Point => true,
        Joins::Names(before) => args.len().saturating_sub(before) <= POINT_NAMES,
    }
}

/// Whether a read runs exactly one statement, so it needs no transaction around it.
pub fn one_statement(args: &[Bytes]) -> bool {
    match access(args.first().map(|n| n.as_ref()).unwrap_or_default()) {
        Some(Access::One) => true,
        Some(Access::OnePerKey) => args.len() == 2,
        _ => false,
    }
}

/// `WAIT`: every acknowledged write is already durable in the database; there are no
/// replicas to count.
fn wait(a: &[Bytes]) -> Out {
    args::int(strings::arg(a, 1))?;
    args::int(strings::arg(a, 2))?;
    Ok(store::int(0))
}

/// `TIME`: holdfast's clock, which SQL expiry runs on too.
fn time() -> Frame {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    store::array(vec![
        store::bulk(Bytes::from(now.as_secs().to_string())),
        store::bulk(Bytes::from(now.subsec_micros().to_string())),
    ])
}

/// The reply to a command the SQL backends do not serve.
pub fn unsupported(name: &[u8]) -> String {
    format!(
        "ERR holdfast: '{}' is not served by SQL backends",
        String::from_utf8_lossy(name).to_ascii_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_table_says_what_writes_what_needs_no_transaction_and_what_joins_a_batch() {
        let b = |parts: &[&str]| -> Vec<Bytes> {
            parts
                .iter()
                .map(|p| Bytes::copy_from_slice(p.as_bytes()))
                .collect()
        };
        for (name, writes_) in [
            ("get", Some(false)),
            ("SET", Some(true)),
            ("publish", Some(true)),
            ("BLPOP", Some(true)),
            ("XREADGROUP", Some(true)),
            ("HF.WATCH", Some(true)),
            ("PUBSUB", Some(false)),
            ("EVAL", Some(true)),
            ("EVAL_RO", Some(false)),
            ("FCALL", Some(true)),
            ("FCALL_RO", Some(false)),
            ("AVERYLONGNAMETHATNOCOMMANDHAS", None),
        ] {
            assert_eq!(writes(name.as_bytes()), writes_, "{name}");
        }
        assert!(one_statement(&b(&["GET", "k"])));
        assert!(one_statement(&b(&["exists", "k"])));
        assert!(!one_statement(&b(&["EXISTS", "k", "j"])));
        assert!(!one_statement(&b(&["HGET", "k", "f"])));
        assert!(!one_statement(&b(&[])));
        assert!(point_read(&b(&["HGET", "k", "f"])));
        assert!(!point_read(&b(&["HGETALL", "k"])));
        assert!(!point_read(&b(&["LINDEX", "k", "0"])));
        let mut hmget = vec!["HMGET", "k"];
        hmget.extend(std::iter::repeat_n("f", POINT_NAMES));
        assert!(point_read(&b(&hmget)));
        hmget.push("f");
        assert!(!point_read(&b(&hmget)));
        let mut mget = vec!["MGET"];
        mget.extend(std::iter::repeat_n("k", POINT_NAMES));
        assert!(point_read(&b(&mget)));
    }
}
