//! An in-memory Redis for the commands the simulation sends: strings and counters, hashes,
//! sets, sorted sets and streams, with Redis 7.0's replies (RESP2 shapes) and its error
//! replies for a wrong kind or a bad number. `apply` runs one command and says whether it
//! ran (an error reply changes nothing).

use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::{BTreeMap, BTreeSet};

/// A stream entry id.
pub type Id = (u64, u64);

#[derive(Clone, Debug)]
enum Value {
    Str(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
    Set(BTreeSet<Bytes>),
    ZSet(BTreeMap<Bytes, f64>),
    Stream(Vec<(Id, Vec<Bytes>)>),
}

/// The keyspace.
#[derive(Clone, Debug, Default)]
pub struct Store {
    keys: BTreeMap<Bytes, Value>,
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const XADD_LOW: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";

// The replies the store builds, as holdfast builds its own.
pub use holdfast::resp::frame::{array, bulk, error as err, number as int, ok};

fn upper(arg: &[u8]) -> Vec<u8> {
    arg.to_ascii_uppercase()
}

fn number(arg: &[u8]) -> Option<i64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

fn score(arg: &[u8]) -> Option<f64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

fn score_text(score: f64) -> Bytes {
    Bytes::from(format!("{score}"))
}

/// `ms-seq`, `ms` (seq 0), `+` and `-` as range bounds.
fn id(arg: &[u8], low: bool) -> Option<Id> {
    match arg {
        b"-" => Some((0, 0)),
        b"+" => Some((u64::MAX, u64::MAX)),
        _ => {
            let text = std::str::from_utf8(arg).ok()?;
            match text.split_once('-') {
                Some((ms, seq)) => Some((ms.parse().ok()?, seq.parse().ok()?)),
                None => Some((text.parse().ok()?, if low { 0 } else { u64::MAX })),
            }
        }
    }
}

fn entry((ms, seq): Id, fields: &[Bytes]) -> Frame {
    array(vec![
        bulk(format!("{ms}-{seq}")),
        array(fields.iter().cloned().map(bulk).collect()),
    ])
}

/// A comparable picture of `key`'s value (None: absent), for `WATCH`.
impl Store {
    pub fn snapshot(&self, key: &[u8]) -> Option<String> {
        self.keys.get(key).map(|v| format!("{v:?}"))
    }
}

/// A command's reply, and whether it ran (changed the keyspace or read it without an error).
pub struct Applied {
    pub reply: Frame,
    pub ran: bool,
}

impl Store {
    /// Runs `args`; `now_ms` is the clock `XADD *` takes its id from.
    pub fn apply(&mut self, args: &[Bytes], now_ms: u64) -> Applied {
        let reply = self.run(args, now_ms);
        let ran = !matches!(reply, Frame::SimpleError { .. });
        Applied { reply, ran }
    }

    fn run(&mut self, args: &[Bytes], now_ms: u64) -> Frame {
        let name = upper(&args[0]);
        let key = args.get(1).cloned().unwrap_or_default();
        let rest = args.get(2..).unwrap_or_default();
        match name.as_slice() {
            b"GET" => match self.keys.get(&key) {
                None => Frame::Null,
                Some(Value::Str(v)) => bulk(v.clone()),
                Some(_) => err(WRONGTYPE),
            },
            b"MGET" => array(
                args[1..]
                    .iter()
                    .map(|k| match self.keys.get(k) {
                        Some(Value::Str(v)) => bulk(v.clone()),
                        _ => Frame::Null,
                    })
                    .collect(),
            ),
            b"EXISTS" => int(args[1..]
                .iter()
                .filter(|k| self.keys.contains_key(*k))
                .count() as i64),
            b"SET" => {
                let nx = rest.iter().skip(1).any(|o| upper(o) == b"NX");
                if nx && self.keys.contains_key(&key) {
                    return Frame::Null;
                }
                self.keys.insert(key, Value::Str(rest[0].clone()));
                ok()
            }
            b"SETNX" => {
                if self.keys.contains_key(&key) {
                    return int(0);
                }
                self.keys.insert(key, Value::Str(rest[0].clone()));
                int(1)
            }
            b"MSETNX" => {
                if args[1..]
                    .iter()
                    .step_by(2)
                    .any(|k| self.keys.contains_key(k))
                {
                    return int(0);
                }
                for pair in args[1..].chunks(2) {
                    self.keys
                        .insert(pair[0].clone(), Value::Str(pair[1].clone()));
                }
                int(1)
            }
            b"DEL" => {
                let mut n = 0;
                for k in &args[1..] {
                    n += i64::from(self.keys.remove(k).is_some());
                }
                int(n)
            }
            b"INCR" | b"INCRBY" => {
                let by = if name == b"INCR" {
                    Some(1)
                } else {
                    number(&rest[0])
                };
                let Some(by) = by else {
                    return err(NOT_INTEGER);
                };
                let current = match self.keys.get(&key) {
                    None => 0,
                    Some(Value::Str(v)) => match number(v) {
                        Some(n) => n,
                        None => return err(NOT_INTEGER),
                    },
                    Some(_) => return err(WRONGTYPE),
                };
                let Some(next) = current.checked_add(by) else {
                    return err("ERR increment or decrement would overflow");
                };
                self.keys
                    .insert(key, Value::Str(Bytes::from(next.to_string())));
                int(next)
            }
            b"APPEND" => {
                let mut value = match self.keys.get(&key) {
                    None => Vec::new(),
                    Some(Value::Str(v)) => v.to_vec(),
                    Some(_) => return err(WRONGTYPE),
                };
                value.extend_from_slice(&rest[0]);
                let len = value.len() as i64;
                self.keys.insert(key, Value::Str(Bytes::from(value)));
                int(len)
            }
            b"HSET" | b"HSETNX" | b"HDEL" | b"HGET" | b"HMGET" | b"HEXISTS" | b"HINCRBY" => {
                self.hash(&name, key, rest)
            }
            b"SADD" | b"SREM" | b"SMISMEMBER" | b"SMEMBERS" => self.set(&name, key, rest),
            b"ZADD" | b"ZREM" | b"ZMSCORE" | b"ZSCORE" | b"ZINCRBY" | b"BZPOPMIN" => {
                self.zset(&name, key, rest)
            }
            b"XADD" | b"XRANGE" | b"XREVRANGE" => self.stream(&name, key, rest, now_ms),
            _ => err("ERR unknown command in the simulated store"),
        }
    }

    fn hash(&mut self, name: &[u8], key: Bytes, rest: &[Bytes]) -> Frame {
        let hash = match self.keys.get_mut(&key) {
            None => None,
            Some(Value::Hash(h)) => Some(h),
            Some(_) => return err(WRONGTYPE),
        };
        match name {
            b"HGET" => hash
                .and_then(|h| h.get(&rest[0]).cloned())
                .map_or(Frame::Null, bulk),
            b"HMGET" => array(
                rest.iter()
                    .map(|f| {
                        hash.as_ref()
                            .and_then(|h| h.get(f).cloned())
                            .map_or(Frame::Null, bulk)
                    })
                    .collect(),
            ),
            b"HEXISTS" => int(i64::from(hash.is_some_and(|h| h.contains_key(&rest[0])))),
            b"HDEL" => {
                let Some(h) = hash else { return int(0) };
                let n = rest.iter().filter(|f| h.remove(*f).is_some()).count() as i64;
                if h.is_empty() {
                    self.keys.remove(&key);
                }
                int(n)
            }
            _ => {
                let h = match hash {
                    Some(h) => h,
                    None => match self
                        .keys
                        .entry(key)
                        .or_insert_with(|| Value::Hash(BTreeMap::new()))
                    {
                        Value::Hash(h) => h,
                        _ => return err(WRONGTYPE),
                    },
                };
                match name {
                    b"HSETNX" => {
                        if h.contains_key(&rest[0]) {
                            return int(0);
                        }
                        h.insert(rest[0].clone(), rest[1].clone());
                        int(1)
                    }
                    b"HINCRBY" => {
                        let Some(by) = number(&rest[1]) else {
                            return err(NOT_INTEGER);
                        };
                        let current = match h.get(&rest[0]) {
                            None => 0,
                            Some(v) => match number(v) {
                                Some(n) => n,
                                None => return err("ERR hash value is not an integer"),
                            },
                        };
                        let next = current.saturating_add(by);
                        h.insert(rest[0].clone(), Bytes::from(next.to_string()));
                        int(next)
                    }
                    _ => {
                        let mut added = 0;
                        for pair in rest.chunks(2) {
                            added +=
                                i64::from(h.insert(pair[0].clone(), pair[1].clone()).is_none());
                        }
                        int(added)
                    }
                }
            }
        }
    }

    fn set(&mut self, name: &[u8], key: Bytes, rest: &[Bytes]) -> Frame {
        let set = match self.keys.get_mut(&key) {
            None => None,
            Some(Value::Set(s)) => Some(s),
            Some(_) => return err(WRONGTYPE),
        };
        match name {
            b"SMISMEMBER" => array(
                rest.iter()
                    .map(|m| int(i64::from(set.as_ref().is_some_and(|s| s.contains(m)))))
                    .collect(),
            ),
            b"SMEMBERS" => array(set.map_or(Vec::new(), |s| s.iter().cloned().map(bulk).collect())),
            b"SREM" => {
                let Some(s) = set else { return int(0) };
                let n = rest.iter().filter(|m| s.remove(*m)).count() as i64;
                if s.is_empty() {
                    self.keys.remove(&key);
                }
                int(n)
            }
            _ => {
                let s = match set {
                    Some(s) => s,
                    None => match self
                        .keys
                        .entry(key)
                        .or_insert_with(|| Value::Set(BTreeSet::new()))
                    {
                        Value::Set(s) => s,
                        _ => return err(WRONGTYPE),
                    },
                };
                int(rest.iter().filter(|m| s.insert((*m).clone())).count() as i64)
            }
        }
    }

    fn zset(&mut self, name: &[u8], key: Bytes, rest: &[Bytes]) -> Frame {
        let zset = match self.keys.get_mut(&key) {
            None => None,
            Some(Value::ZSet(z)) => Some(z),
            Some(_) => return err(WRONGTYPE),
        };
        match name {
            b"ZSCORE" => zset
                .and_then(|z| z.get(&rest[0]).copied())
                .map_or(Frame::Null, |s| bulk(score_text(s))),
            b"ZMSCORE" => array(
                rest.iter()
                    .map(|m| {
                        zset.as_ref()
                            .and_then(|z| z.get(m).copied())
                            .map_or(Frame::Null, |s| bulk(score_text(s)))
                    })
                    .collect(),
            ),
            // One key, as the simulation sends it: the lowest member (ties by name), or nil
            // (the wait for one is the world's).
            b"BZPOPMIN" => {
                let Some(z) = zset else {
                    return Frame::Null;
                };
                let lowest = z
                    .iter()
                    .min_by(|a, b| a.1.total_cmp(b.1).then_with(|| a.0.cmp(b.0)))
                    .map(|(m, s)| (m.clone(), *s));
                let Some((member, score)) = lowest else {
                    return Frame::Null;
                };
                z.remove(&member);
                if z.is_empty() {
                    self.keys.remove(&key);
                }
                array(vec![bulk(key), bulk(member), bulk(score_text(score))])
            }
            b"ZREM" => {
                let Some(z) = zset else { return int(0) };
                let n = rest.iter().filter(|m| z.remove(*m).is_some()).count() as i64;
                if z.is_empty() {
                    self.keys.remove(&key);
                }
                int(n)
            }
            _ => {
                let incr = name == b"ZINCRBY";
                let pairs: Vec<(f64, Bytes)> = match rest
                    .chunks(2)
                    .map(|p| Some((score(&p[0])?, p.get(1)?.clone())))
                    .collect::<Option<Vec<_>>>()
                {
                    Some(pairs) => pairs,
                    None => return err("ERR value is not a valid float"),
                };
                let z = match zset {
                    Some(z) => z,
                    None => match self
                        .keys
                        .entry(key)
                        .or_insert_with(|| Value::ZSet(BTreeMap::new()))
                    {
                        Value::ZSet(z) => z,
                        _ => return err(WRONGTYPE),
                    },
                };
                if incr {
                    let (by, member) = &pairs[0];
                    let next = z.get(member).copied().unwrap_or(0.0) + by;
                    z.insert(member.clone(), next);
                    return bulk(score_text(next));
                }
                int(pairs
                    .into_iter()
                    .filter(|(s, m)| z.insert(m.clone(), *s).is_none())
                    .count() as i64)
            }
        }
    }

    fn stream(&mut self, name: &[u8], key: Bytes, rest: &[Bytes], now_ms: u64) -> Frame {
        let stream = match self.keys.get_mut(&key) {
            None => None,
            Some(Value::Stream(s)) => Some(s),
            Some(_) => return err(WRONGTYPE),
        };
        match name {
            b"XRANGE" | b"XREVRANGE" => {
                let rev = name == b"XREVRANGE";
                let (a, b) = (&rest[0], &rest[1]);
                let (low, high) = if rev { (b, a) } else { (a, b) };
                let (Some(low), Some(high)) = (id(low, true), id(high, false)) else {
                    return err("ERR Invalid stream ID specified as stream command argument");
                };
                let count = match rest.get(2..) {
                    Some([word, n]) if upper(word) == b"COUNT" => {
                        number(n).map(|n| n.max(0) as usize)
                    }
                    _ => None,
                }
                .unwrap_or(usize::MAX);
                let Some(s) = stream else {
                    return array(Vec::new());
                };
                let inside = s.iter().filter(|(i, _)| *i >= low && *i <= high);
                let found: Vec<Frame> = if rev {
                    inside
                        .rev()
                        .take(count)
                        .map(|(i, f)| entry(*i, f))
                        .collect()
                } else {
                    inside.take(count).map(|(i, f)| entry(*i, f)).collect()
                };
                array(found)
            }
            _ => {
                let top = stream.as_ref().and_then(|s| s.last()).map(|(i, _)| *i);
                let new_id = if rest[0].as_ref() == b"*" {
                    match top {
                        Some((ms, seq)) if ms >= now_ms => (ms, seq + 1),
                        _ => (now_ms, 0),
                    }
                } else {
                    let Some(given) = id(&rest[0], true) else {
                        return err("ERR Invalid stream ID specified as stream command argument");
                    };
                    if given == (0, 0) {
                        return err("ERR The ID specified in XADD must be greater than 0-0");
                    }
                    if top.is_some_and(|t| given <= t) {
                        return err(XADD_LOW);
                    }
                    given
                };
                let fields = rest[1..].to_vec();
                match stream {
                    Some(s) => s.push((new_id, fields)),
                    None => {
                        self.keys.insert(key, Value::Stream(vec![(new_id, fields)]));
                    }
                }
                bulk(format!("{}-{}", new_id.0, new_id.1))
            }
        }
    }
}
