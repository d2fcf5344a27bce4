//! Whether a key is the same on the two ends of a mirror: its value as `DUMP` carries it,
//! read back (`backend::rdb`) so that two backends' encodings of one value compare equal
//! (a hash's fields in any order, a sorted set's members by name, a stream's consumer groups
//! without the delivery and seen times, which are each backend's own clock), and its time
//! to live within [`TTL_TOLERANCE_MS`].

use crate::backend::rdb::{self, DumpValue};
use bytes::Bytes;

/// Two deadlines closer than this are the same: the mirror applied the deadline the primary
/// set (`rewrite.rs`) on holdfast's clock, a moment after the primary.
pub const TTL_TOLERANCE_MS: i64 = 1_000;

/// One key on one end: its `DUMP` payload (None: no such key) and its `PEXPIRETIME` (-1:
/// none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// `DUMP`'s payload; None: no such key.
    pub payload: Option<Bytes>,
    /// `PEXPIRETIME`: the deadline in Unix milliseconds, -1 none, -2 no key.
    pub expires: i64,
}

/// How a key differs between the primary and its mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// On the primary only.
    MissingOnMirror,
    /// On the mirror only.
    OnlyOnMirror,
    /// Of different types.
    Type {
        /// The primary's type.
        primary: &'static str,
        /// The mirror's type.
        mirror: &'static str,
    },
    /// Same type, different contents.
    Value,
    /// Different deadlines, in Unix milliseconds (-1: none).
    Ttl {
        /// The primary's.
        primary: i64,
        /// The mirror's.
        mirror: i64,
    },
    /// A payload that cannot be read back.
    Unreadable,
    /// The mirror did not answer.
    Unanswered,
}

impl Difference {
    /// As a verify report lists it.
    pub fn describe(&self) -> String {
        match self {
            Difference::MissingOnMirror => "missing on the mirror".into(),
            Difference::OnlyOnMirror => "only on the mirror".into(),
            Difference::Type { primary, mirror } => {
                format!("a {primary} on the primary, a {mirror} on the mirror")
            }
            Difference::Value => "different values".into(),
            Difference::Ttl { primary, mirror } => {
                format!("expires at {primary} ms on the primary, {mirror} ms on the mirror")
            }
            Difference::Unreadable => "a payload holdfast cannot read".into(),
            Difference::Unanswered => "the mirror did not answer".into(),
        }
    }
}

fn type_name(value: &DumpValue) -> &'static str {
    match value {
        DumpValue::String(_) => "string",
        DumpValue::List(_) => "list",
        DumpValue::Set(_) => "set",
        DumpValue::Hash(_) => "hash",
        DumpValue::Zset(_) => "zset",
        DumpValue::Stream(_) => "stream",
    }
}

/// `value` in a form two backends' encodings of it share.
fn normal(value: DumpValue) -> DumpValue {
    match value {
        DumpValue::Set(mut members) => {
            members.sort();
            DumpValue::Set(members)
        }
        DumpValue::Hash(mut pairs) => {
            pairs.sort();
            DumpValue::Hash(pairs)
        }
        DumpValue::Zset(mut members) => {
            members.sort_by(|a, b| a.0.cmp(&b.0));
            DumpValue::Zset(members)
        }
        DumpValue::Stream(mut s) => {
            s.groups.sort_by(|a, b| a.name.cmp(&b.name));
            for g in &mut s.groups {
                g.pending.sort_by_key(|p| p.0);
                for p in &mut g.pending {
                    p.2 = 0;
                }
                for c in &mut g.consumers {
                    c.1 = 0;
                }
                g.consumers.sort();
            }
            DumpValue::Stream(s)
        }
        other => other,
    }
}

/// How `mirror` differs from `primary`, if it does.
pub fn diff(primary: &Snapshot, mirror: &Snapshot) -> Option<Difference> {
    let (a, b) = match (&primary.payload, &mirror.payload) {
        (None, None) => return None,
        (Some(_), None) => return Some(Difference::MissingOnMirror),
        (None, Some(_)) => return Some(Difference::OnlyOnMirror),
        (Some(a), Some(b)) => (a, b),
    };
    if a != b {
        let (Ok(a), Ok(b)) = (rdb::restore(a), rdb::restore(b)) else {
            return Some(Difference::Unreadable);
        };
        if type_name(&a) != type_name(&b) {
            return Some(Difference::Type {
                primary: type_name(&a),
                mirror: type_name(&b),
            });
        }
        if normal(a) != normal(b) {
            return Some(Difference::Value);
        }
    }
    let (x, y) = (primary.expires, mirror.expires);
    let same_ttl = if x < 0 || y < 0 {
        x == y
    } else {
        (x - y).abs() <= TTL_TOLERANCE_MS
    };
    (!same_ttl).then_some(Difference::Ttl {
        primary: x,
        mirror: y,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::rdb::dump;

    fn snap(value: Option<DumpValue>, expires: i64) -> Snapshot {
        Snapshot {
            payload: value.map(|v| Bytes::from(dump(&v))),
            expires,
        }
    }

    fn s(text: &str) -> Vec<u8> {
        text.as_bytes().to_vec()
    }

    #[test]
    fn keys_differ_as_the_rules_say() {
        let hash = |pairs: &[(&str, &str)]| {
            Some(DumpValue::Hash(
                pairs.iter().map(|(f, v)| (s(f), s(v))).collect(),
            ))
        };
        let rows: Vec<(Snapshot, Snapshot, Option<Difference>)> = vec![
            (snap(None, -2), snap(None, -2), None),
            (
                snap(Some(DumpValue::String(s("a"))), -1),
                snap(None, -2),
                Some(Difference::MissingOnMirror),
            ),
            (
                snap(None, -2),
                snap(Some(DumpValue::String(s("a"))), -1),
                Some(Difference::OnlyOnMirror),
            ),
            (
                snap(Some(DumpValue::String(s("a"))), -1),
                snap(Some(DumpValue::List(vec![s("a")])), -1),
                Some(Difference::Type {
                    primary: "string",
                    mirror: "list",
                }),
            ),
            (
                snap(Some(DumpValue::String(s("a"))), -1),
                snap(Some(DumpValue::String(s("b"))), -1),
                Some(Difference::Value),
            ),
            // One hash in two field orders is one value.
            (
                snap(hash(&[("f", "1"), ("g", "2")]), -1),
                snap(hash(&[("g", "2"), ("f", "1")]), -1),
                None,
            ),
            (
                snap(hash(&[("f", "1")]), -1),
                snap(hash(&[("f", "2")]), -1),
                Some(Difference::Value),
            ),
            (
                snap(Some(DumpValue::String(s("a"))), 5_000),
                snap(Some(DumpValue::String(s("a"))), 4_500),
                None,
            ),
            (
                snap(Some(DumpValue::String(s("a"))), 5_000),
                snap(Some(DumpValue::String(s("a"))), -1),
                Some(Difference::Ttl {
                    primary: 5_000,
                    mirror: -1,
                }),
            ),
            (
                snap(Some(DumpValue::String(s("a"))), -1),
                Snapshot {
                    payload: Some(Bytes::from_static(b"junk")),
                    expires: -1,
                },
                Some(Difference::Unreadable),
            ),
        ];
        for (i, (a, b, want)) in rows.into_iter().enumerate() {
            assert_eq!(diff(&a, &b), want, "row {i}");
        }
    }

    #[test]
    fn a_stream_s_delivery_and_seen_times_are_each_backend_s_own() {
        use crate::backend::rdb::{DumpGroup, DumpStream};
        let stream = |delivered: i64, seen: i64, owner: &str| {
            Some(DumpValue::Stream(Box::new(DumpStream {
                entries: vec![((1, 0), vec![s("f"), s("v")])],
                last: (1, 0),
                added: 1,
                groups: vec![DumpGroup {
                    name: s("g"),
                    last: (1, 0),
                    entries_read: 1,
                    pending: vec![((1, 0), s(owner), delivered, 1)],
                    consumers: vec![(s(owner), seen)],
                }],
                ..DumpStream::default()
            })))
        };
        assert_eq!(
            diff(&snap(stream(5, 6, "c"), -1), &snap(stream(7, 8, "c"), -1)),
            None
        );
        assert_eq!(
            diff(&snap(stream(5, 6, "c"), -1), &snap(stream(5, 6, "d"), -1)),
            Some(Difference::Value)
        );
    }
}
