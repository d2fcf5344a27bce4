//! Exact reply mode on Redis, without I/O: the script that applies a command and records its
//! reply under the request's token in one atomic step, the token's key and database, the
//! commands the script cannot carry, and the repair its replies need. `exact` in
//! `src/backend/redis/send.rs` sends it.

use super::{Proto, Reply};
use bytes::Bytes;

/// The script. KEYS: the token's key, the command's key. ARGV: the token's lifetime in ms,
/// the protocol the command is called in (`3`: the reply keeps its RESP3 type), the token's
/// database and the data's (both empty: the token lives beside the data, on a Cluster), then
/// the command. A retry that finds the token answers the recorded reply (msgpack) and applies
/// nothing. SELECT inside a script does not change the caller's database (Redis 2.8.12 on).
/// (Lua numbers are doubles: an integer reply beyond 2^53 would lose precision.)
pub const SCRIPT: &str = r#"
local tokens, data = ARGV[3], ARGV[4]
if tokens ~= '' then redis.call('SELECT', tokens) end
local done = redis.call('GET', KEYS[1])
if done then return cmsgpack.unpack(done) end
if tokens ~= '' then redis.call('SELECT', data) end
if ARGV[2] == '3' then redis.setresp(3) end
local reply = redis.pcall(unpack(ARGV, 5))
if tokens ~= '' then redis.call('SELECT', tokens) end
redis.call('SET', KEYS[1], cmsgpack.pack(reply), 'PX', ARGV[1])
return reply
"#;

/// Most arguments (the command's name included) a command may have to run inside the
/// script. Lua's `unpack` and the call it feeds put every argument on the C stack, whose
/// limit (`LUAI_MAXCSTACK`, 8000 in the Lua Redis embeds) fails the script past 7,996
/// arguments on Redis 7.0; a margin below that keeps room for the script's own slots. A
/// longer command is not run in exact mode (docs/failures.md, "Reply modes").
pub const MAX_ARGS: usize = 7_000;

/// The script's SHA1, for EVALSHA.
pub fn sha() -> &'static str {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHA.get_or_init(|| sha1_smol::Sha1::from(SCRIPT).digest().to_string())
}

/// Where tokens live on a standalone or Sentinel-managed Redis: a database of their own, so
/// a client's `KEYS`, `SCAN` and `DBSIZE` (holdfast's clients see only the data's database)
/// never show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenDb {
    /// The tokens' database.
    pub tokens: u8,
    /// The data's database (the URL's).
    pub data: u8,
}

/// The part of `key` Redis hashes to its slot: the hash tag (what lies between the first `{`
/// and the first `}` after it, when that is not empty), else the whole key.
pub fn hashed_part(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|b| *b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|b| *b == b'}') {
        Some(close) if close > 0 => &rest[..close],
        _ => key,
    }
}

/// The token's key, in the command key's hash slot so the script touches one slot on a
/// Cluster. `{part}` has `part` for its tag when `part` is not empty and holds no `}`: then
/// it is the key's own hashed part. Otherwise (a key like `a}b` or `{}x`, or the empty key)
/// the tag is a number that hashes to the key's slot.
pub fn token_key(key: &[u8], token: &[u8]) -> Bytes {
    let part = hashed_part(key);
    let number;
    let tag = if !part.is_empty() && !part.contains(&b'}') {
        part
    } else {
        number = slot_tag(crate::backend::redis::cluster::keyslot(key)).to_string();
        number.as_bytes()
    };
    let mut out = Vec::with_capacity(tag.len() + token.len() + 10);
    out.push(b'{');
    out.extend_from_slice(tag);
    out.extend_from_slice(b"}hf:tok:");
    out.extend_from_slice(token);
    Bytes::from(out)
}

/// The smallest number whose decimal digits hash to `slot`, from a table of all 16,384
/// built once (about 170,000 CRC16s of a few bytes).
fn slot_tag(slot: u16) -> u32 {
    static TAGS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; 16_384];
        let mut left = tags.len();
        let mut n = 0u32;
        while left > 0 && n < u32::MAX {
            let at = usize::from(crate::backend::redis::cluster::keyslot(
                n.to_string().as_bytes(),
            ));
            if let Some(tag) = tags.get_mut(at).filter(|tag| **tag == u32::MAX) {
                *tag = n;
                left -= 1;
            }
            n += 1;
        }
        tags
    });
    tags.get(usize::from(slot)).copied().unwrap_or_default()
}

/// The protocol the script calls the command in. Lua turns a RESP3 null into `nil`, which
/// cannot sit inside a Lua array (the array ends there), so a command whose reply may hold a
/// null inside an array is called in RESP2, where a null is `false` and keeps its place;
/// its RESP3 reply has no other RESP3-only type (a map, a double, a set) to lose.
fn call_proto(args: &[Bytes], proto: Proto) -> &'static str {
    let nulls_inside = args.first().is_some_and(|name| {
        [&b"BITFIELD"[..], b"SORT", b"XCLAIM", b"XAUTOCLAIM"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
    });
    if proto == Proto::Resp3 && !nulls_inside {
        "3"
    } else {
        "2"
    }
}

/// The arguments of EVALSHA (the caller swaps in EVAL and the script after `NOSCRIPT`) for
/// `args` under `token`, and the token's key, which routes it on a Cluster.
pub fn evalsha(
    args: &[Bytes],
    proto: Proto,
    token: &[u8],
    db: Option<TokenDb>,
) -> (Vec<Bytes>, Bytes) {
    let key = args.get(1).cloned().unwrap_or_default();
    let tok = token_key(&key, token);
    let ttl = crate::backend::TOKEN_TTL.as_millis().to_string();
    let (tokens, data) = match db {
        Some(db) => (
            Bytes::from(db.tokens.to_string()),
            Bytes::from(db.data.to_string()),
        ),
        None => (Bytes::new(), Bytes::new()),
    };
    let mut out: Vec<Bytes> = Vec::with_capacity(args.len() + 9);
    out.push(Bytes::from_static(b"EVALSHA"));
    out.push(Bytes::from(sha()));
    out.push(Bytes::from_static(b"2"));
    out.push(tok.clone());
    out.push(key);
    out.push(Bytes::from(ttl));
    out.push(Bytes::from_static(call_proto(args, proto).as_bytes()));
    out.push(tokens);
    out.push(data);
    out.extend(args.iter().cloned());
    (out, tok)
}

/// The script's reply as the client must see it. A script answers a RESP2 nil as `$-1`
/// wherever the command itself would answer `*-1` (`LPOP key 5` on a missing key; Lua has one
/// nil), so a RESP2 reply is handed on decoded: the connection writes a decoded reply's
/// nils as the command's row says (`null_array_from`, `nested_nil_array` in
/// `src/command/rows.rs`). A RESP3 reply passes as Redis wrote it.
pub fn repair(reply: Reply) -> Reply {
    match reply {
        Reply::Raw {
            bytes,
            proto: Proto::Resp2,
        } => Reply::from(crate::resp::decode_raw(bytes, Proto::Resp2)),
        other => other,
    }
}

/// The server's `maxmemory-policy`, from an `INFO` reply holding its memory section, when it
/// may evict a token: Redis offers no way to exempt a key, and every policy but
/// `noeviction` evicts under `maxmemory` (the `volatile-*` ones choose among keys with a
/// TTL, which every token has). Without a `maxmemory` (0) nothing is evicted.
pub fn evicting_policy(info: &str) -> Option<&str> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let limited = field("maxmemory").is_some_and(|bytes| bytes != "0");
    let policy = field("maxmemory_policy")?;
    (limited && policy != "noeviction").then_some(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token's key must hash to its key's slot whatever the key, or
    /// the script would touch two slots on a Cluster (CROSSSLOT) and route to the wrong node.
    #[test]
    fn a_token_key_lands_in_the_slot_of_its_key() {
        let keys: &[&[u8]] = &[
            b"plain",
            b"{user1}:a",
            b"a}b",
            b"{}x",
            b"x{}{y}",
            b"{{a}}",
            b"{a",
            b"}",
            b"{",
            b"{}",
            b"",
            b"a{b}c}d",
            b"}{x}",
            b"{{}",
        ];
        for key in keys {
            let token = token_key(key, b"i:1:2");
            assert_eq!(
                crate::backend::redis::cluster::keyslot(&token),
                crate::backend::redis::cluster::keyslot(key),
                "key {:?}, token key {:?}",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&token)
            );
        }
    }

    #[test]
    fn the_hashed_part_follows_redis_rule() {
        assert_eq!(hashed_part(b"{user1}:a"), b"user1");
        assert_eq!(hashed_part(b"a}b"), b"a}b");
        assert_eq!(hashed_part(b"{}x"), b"{}x");
        assert_eq!(hashed_part(b"x{}{y}"), b"x{}{y}");
        assert_eq!(hashed_part(b"{{a}}"), b"{a");
        assert_eq!(hashed_part(b"a{b}c}d"), b"b");
    }

    #[test]
    fn only_a_policy_that_can_evict_under_a_limit_counts() {
        let info = |limit: &str, policy: &str| {
            format!("# Memory\r\nused_memory:1\r\nmaxmemory:{limit}\r\nmaxmemory_human:x\r\nmaxmemory_policy:{policy}\r\n")
        };
        assert_eq!(
            evicting_policy(&info("104857600", "allkeys-lru")),
            Some("allkeys-lru")
        );
        assert_eq!(
            evicting_policy(&info("1", "volatile-ttl")),
            Some("volatile-ttl")
        );
        assert_eq!(evicting_policy(&info("104857600", "noeviction")), None);
        assert_eq!(evicting_policy(&info("0", "allkeys-lru")), None);
        assert_eq!(
            evicting_policy("# Server\r\nredis_version:7.0.15\r\n"),
            None
        );
    }

    #[test]
    fn every_slot_has_a_number_for_a_tag() {
        for slot in [0u16, 1, 8_000, 16_383] {
            let tag = slot_tag(slot);
            assert_eq!(
                crate::backend::redis::cluster::keyslot(tag.to_string().as_bytes()),
                slot
            );
        }
    }

    #[test]
    fn a_resp2_reply_is_decoded_so_its_nils_follow_the_command_row() {
        let reply = repair(Reply::Raw {
            bytes: Bytes::from_static(b"$-1\r\n"),
            proto: Proto::Resp2,
        });
        assert!(matches!(
            reply.into_frame(),
            redis_protocol::resp3::types::BytesFrame::Null
        ));
        let raw3 = Reply::Raw {
            bytes: Bytes::from_static(b"_\r\n"),
            proto: Proto::Resp3,
        };
        assert_eq!(repair(raw3.clone()), raw3);
    }
}
