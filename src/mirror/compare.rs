//! Whether a read's reply from the mirror says what the primary's said: exactly, but where
//! Redis's reply order is its hash table's (`SMEMBERS`, `HGETALL`, `KEYS`), which two backends
//! need not share, and within a second for a time left to live. Replies that differ by
//! design — random picks, scan cursors, a backend's own figures (`XINFO`, `OBJECT`, `DUMP`'s
//! encoding) — are not compared at all.

use redis_protocol::resp3::types::BytesFrame as Frame;

/// How one command's replies are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compared {
    /// Not at all.
    Never,
    /// Equal frames.
    Exact,
    /// The same elements in any order.
    AnyOrder,
    /// The same field-value pairs in any order (a flat array of pairs, or a map).
    AnyOrderPairs,
    /// Integers this close (a TTL in milliseconds or seconds: -1 and -2 exactly).
    Within(i64),
}

/// How `name`'s (a command table row's) replies are compared.
pub fn compared(name: &str) -> Compared {
    match name {
        "SRANDMEMBER" | "HRANDFIELD" | "ZRANDMEMBER" | "RANDOMKEY" | "SCAN" | "SSCAN" | "HSCAN"
        | "ZSCAN" | "DUMP" | "OBJECT|ENCODING" | "OBJECT|FREQ" | "OBJECT|IDLETIME"
        | "OBJECT|REFCOUNT" | "MEMORY|USAGE" | "XINFO|STREAM" | "XINFO|GROUPS"
        | "XINFO|CONSUMERS" | "XPENDING" | "TIME" | "LASTSAVE" | "DBSIZE" | "KEYS" => {
            Compared::Never
        }
        "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "HKEYS" | "HVALS" => Compared::AnyOrder,
        "HGETALL" => Compared::AnyOrderPairs,
        "TTL" | "EXPIRETIME" => Compared::Within(1),
        "PTTL" | "PEXPIRETIME" => Compared::Within(1_000),
        _ => Compared::Exact,
    }
}

fn elements(frame: &Frame) -> Option<Vec<&Frame>> {
    match frame {
        Frame::Array { data, .. } => Some(data.iter().collect()),
        Frame::Set { data, .. } => Some(data.iter().collect()),
        _ => None,
    }
}

/// Frames as comparable text, for sorting.
fn key(frame: &Frame) -> String {
    format!("{frame:?}")
}

fn pairs(frame: &Frame) -> Option<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = match frame {
        Frame::Map { data, .. } => data.iter().map(|(k, v)| (key(k), key(v))).collect(),
        _ => {
            let items = elements(frame)?;
            if items.len() % 2 != 0 {
                return None;
            }
            items.chunks(2).map(|p| (key(p[0]), key(p[1]))).collect()
        }
    };
    out.sort();
    Some(out)
}

/// Whether the primary's reply `a` and the mirror's `b` to command `name` agree.
pub fn agree(name: &str, a: &Frame, b: &Frame) -> bool {
    match compared(name) {
        Compared::Never => true,
        Compared::Exact => a == b,
        Compared::AnyOrder => match (elements(a), elements(b)) {
            (Some(x), Some(y)) => {
                let mut x: Vec<String> = x.into_iter().map(key).collect();
                let mut y: Vec<String> = y.into_iter().map(key).collect();
                x.sort();
                y.sort();
                x == y
            }
            _ => a == b,
        },
        Compared::AnyOrderPairs => match (pairs(a), pairs(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
        Compared::Within(tolerance) => match (a, b) {
            (Frame::Number { data: x, .. }, Frame::Number { data: y, .. }) => {
                if *x < 0 || *y < 0 {
                    x == y
                } else {
                    (x - y).abs() <= tolerance
                }
            }
            _ => a == b,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn bulk(s: &str) -> Frame {
        Frame::BlobString {
            data: Bytes::copy_from_slice(s.as_bytes()),
            attributes: None,
        }
    }

    fn array(items: &[&str]) -> Frame {
        Frame::Array {
            data: items.iter().map(|s| bulk(s)).collect(),
            attributes: None,
        }
    }

    fn int(n: i64) -> Frame {
        Frame::Number {
            data: n,
            attributes: None,
        }
    }

    #[test]
    fn replies_agree_as_each_command_s_rule_says() {
        let rows: Vec<(&str, Frame, Frame, bool)> = vec![
            ("GET", bulk("a"), bulk("a"), true),
            ("GET", bulk("a"), bulk("b"), false),
            ("GET", bulk("a"), Frame::Null, false),
            ("LRANGE", array(&["a", "b"]), array(&["b", "a"]), false),
            ("SMEMBERS", array(&["a", "b"]), array(&["b", "a"]), true),
            ("SMEMBERS", array(&["a", "b"]), array(&["a", "c"]), false),
            (
                "HGETALL",
                array(&["f", "1", "g", "2"]),
                array(&["g", "2", "f", "1"]),
                true,
            ),
            (
                "HGETALL",
                array(&["f", "1", "g", "2"]),
                array(&["f", "2", "g", "1"]),
                false,
            ),
            ("PTTL", int(5_000), int(4_200), true),
            ("PTTL", int(5_000), int(3_000), false),
            ("TTL", int(-1), int(0), false),
            ("TTL", int(-2), int(-2), true),
            ("SRANDMEMBER", bulk("a"), bulk("b"), true),
            ("XINFO|STREAM", int(1), int(2), true),
        ];
        for (name, a, b, want) in rows {
            assert_eq!(agree(name, &a, &b), want, "{name} {a:?} {b:?}");
        }
    }
}
