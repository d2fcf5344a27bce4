//! Whole-collection reads of a client's pipelined run: a run of `HGETALL`s (or `HKEYS`,
//! `HVALS`), or of `SMEMBERS`, is answered by one statement for all its keys instead of a
//! key read and a member read per command. A read changes nothing, so answering the run
//! from one statement changes nothing a client can see but the number of statements; the
//! run is read from one snapshot, as Redis answers a pipeline's reads in order. Each reply
//! is built as the command's own path builds it (field order, a set's intset order,
//! WRONGTYPE, expiry), which the differential tests hold both paths to.
//!
//! Should the backend fail or never answer, every request of the run hears the same error,
//! and a read applied nothing: its class says it can be tried again.

use super::apply::work_error;
use super::reads::{bounded, in_parts, ReadAnswer, STATEMENT_KEYS};
use super::store::{bulk, placeholders, Dialect, Kind, WRONGTYPE};
use super::Inner;
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use redis_protocol::resp3::types::{BytesFrame as Frame, FrameMap};
use std::collections::HashMap;
use std::time::Duration;

/// What a run reads of each of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whole {
    /// `HGETALL`, `HKEYS` or `HVALS`: which halves of each field the reply holds.
    Hash { fields: bool, values: bool },
    /// `SMEMBERS`.
    Set,
}

impl Whole {
    fn of(name: &[u8]) -> Option<Whole> {
        // Compared in place: every pipelined run of reads is looked at here.
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        Some(if is(b"HGETALL") {
            Whole::Hash {
                fields: true,
                values: true,
            }
        } else if is(b"HKEYS") {
            Whole::Hash {
                fields: true,
                values: false,
            }
        } else if is(b"HVALS") {
            Whole::Hash {
                fields: false,
                values: true,
            }
        } else if is(b"SMEMBERS") {
            Whole::Set
        } else {
            return None;
        })
    }

    fn kind(self) -> Kind {
        match self {
            Whole::Hash { .. } => Kind::Hash,
            Whole::Set => Kind::Set,
        }
    }
}

/// The run's reads when every request is the same one of them with exactly one key (a
/// wrong argument count is left to the command's own path, which answers it); None
/// otherwise.
pub fn whole_run<'a>(requests: &[&'a [Bytes]]) -> Option<(Whole, Vec<&'a [u8]>)> {
    let mut whole = None;
    let mut keys = Vec::with_capacity(requests.len());
    for args in requests {
        let [name, key] = args else { return None };
        let this = Whole::of(name)?;
        if *whole.get_or_insert(this) != this {
            return None;
        }
        keys.push(key.as_ref());
    }
    Some((whole?, keys))
}

/// Reads each of `keys` whole, one statement per [`STATEMENT_KEYS`] (several inside one
/// read-only transaction, so one snapshot still); one answer per key, in order.
pub async fn read(
    inner: &Inner,
    whole: Whole,
    keys: &[&[u8]],
    proto: Proto,
    acquire_timeout: Duration,
) -> Vec<ReadAnswer> {
    let dialect = inner.dialect;
    in_parts(
        inner,
        keys,
        STATEMENT_KEYS,
        acquire_timeout,
        move |part, conn, now_ms, limit| {
            Box::pin(statement(part, whole, proto, dialect, now_ms, conn, limit))
        },
    )
    .await
}

/// What one key holds, as a whole read finds it.
enum Found {
    Collection(Vec<(Bytes, Option<Bytes>)>),
    WrongType,
    /// A kind this build does not know (written by a newer one sharing the database): that
    /// key's requests answer an error, the run's others their collections.
    Unknown(i64),
}

/// One statement for `keys`: each key's row joined to its fields or members, in the order
/// they were added (as the command's own path lists them). The key list is padded to a
/// power of two with the last key (a key named twice is one key): a few statement sizes,
/// each prepared once.
async fn statement(
    keys: &[&[u8]],
    whole: Whole,
    proto: Proto,
    dialect: Dialect,
    now_ms: i64,
    conn: &mut super::conn::TxConn,
    limit: Duration,
) -> Result<Vec<ReadAnswer>, BackendError> {
    let Some(&last) = keys.last() else {
        return Ok(Vec::new());
    };
    let size = keys.len().next_power_of_two();
    let list = placeholders(dialect, size);
    let code = whole.kind() as i64;
    let (table, columns) = match whole {
        Whole::Hash { .. } => ("hf_hash", "field, value"),
        Whole::Set => ("hf_set", "member, NULL AS value"),
    };
    // PostgreSQL joins a young table (not analyzed yet) by scanning all of it, many times
    // slower than a look-up per key on a large set. The lateral subquery (kept apart by
    // its OFFSET) is looked up per key whatever the statistics say. SQLite has no LATERAL,
    // and joins by a look-up per key anyway.
    let joined = match dialect {
        Dialect::Sqlite => format!("{table} c ON c.key = k.key AND k.kind = {code}"),
        Dialect::Postgres => format!(
            "LATERAL (SELECT id, {columns} FROM {table} \
             WHERE key = k.key AND k.kind = {code} OFFSET 0) c ON true"
        ),
    };
    let second = match whole {
        Whole::Hash { .. } => "c.field, c.value",
        Whole::Set => "c.member, NULL",
    };
    let sql = format!(
        "SELECT k.key, k.kind, k.expires_at, {second} FROM hf_keys k LEFT JOIN {joined} \
         WHERE k.key IN ({list}) ORDER BY c.id"
    );
    let mut query = super::store::stmt(sql);
    for key in keys.iter().chain(std::iter::repeat(&last)).take(size) {
        query = query.bind(*key);
    }
    let rows = bounded(limit, conn.ctx(0, Proto::Resp2, dialect, false).all(query)).await?;
    let mut found: HashMap<&[u8], Found> = HashMap::with_capacity(keys.len());
    for row in &rows {
        let key: &[u8] = row.try_get(0).map_err(work_error)?;
        let stored: i64 = row.try_get(1).map_err(work_error)?;
        let expires: Option<i64> = row.try_get(2).map_err(work_error)?;
        // Expired keys and missing ones answer alike: empty.
        if expires.is_some_and(|at| at <= now_ms) {
            continue;
        }
        let Some(kind) = Kind::from_code(stored) else {
            found.insert(key, Found::Unknown(stored));
            continue;
        };
        if kind != whole.kind() {
            found.insert(key, Found::WrongType);
            continue;
        }
        let items = match found
            .entry(key)
            .or_insert_with(|| Found::Collection(Vec::new()))
        {
            Found::Collection(items) => items,
            Found::WrongType | Found::Unknown(_) => continue,
        };
        // A collection with nothing in it joins to one row of NULLs.
        let item: Option<&[u8]> = row.try_get(3).map_err(work_error)?;
        if let Some(item) = item {
            let value: Option<&[u8]> = row.try_get(4).map_err(work_error)?;
            items.push((
                Bytes::copy_from_slice(item),
                value.map(Bytes::copy_from_slice),
            ));
        }
    }
    Ok(keys
        .iter()
        .map(|key| match found.get(key) {
            Some(Found::WrongType) => Err(BackendError::reply(Bytes::from_static(
                WRONGTYPE.as_bytes(),
            ))),
            Some(Found::Collection(items)) => Ok(reply(whole, proto, items)),
            Some(Found::Unknown(stored)) => Err(BackendError::reply(Bytes::from(format!(
                "ERR holdfast: unknown stored kind {stored}"
            )))),
            None => Ok(reply(whole, proto, &[])),
        })
        .collect())
}

/// The reply the command's own path gives for `items`.
fn reply(whole: Whole, proto: Proto, items: &[(Bytes, Option<Bytes>)]) -> Frame {
    match whole {
        Whole::Set => super::sets::set_frame(
            proto,
            items.iter().map(|(member, _)| member.clone()).collect(),
        ),
        Whole::Hash {
            fields: true,
            values: true,
        } => {
            let mut map = FrameMap::default();
            for (field, value) in items {
                map.insert(bulk(field.clone()), bulk(value.clone().unwrap_or_default()));
            }
            Frame::Map {
                data: map,
                attributes: None,
            }
        }
        Whole::Hash { fields, .. } => Frame::Array {
            data: items
                .iter()
                .map(|(field, value)| {
                    bulk(if fields {
                        field.clone()
                    } else {
                        value.clone().unwrap_or_default()
                    })
                })
                .collect(),
            attributes: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{whole_run, Whole};
    use bytes::Bytes;

    #[test]
    fn a_run_is_whole_when_every_request_is_the_same_read_of_one_key() {
        let all = Whole::Hash {
            fields: true,
            values: true,
        };
        let b = |s: &[&str]| -> Vec<Bytes> {
            s.iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect()
        };
        type Want = Option<(Whole, Vec<&'static [u8]>)>;
        let cases: Vec<(Vec<Vec<Bytes>>, Want)> = vec![
            (vec![], None),
            (vec![b(&["HGETALL", "a"])], Some((all, vec![b"a"]))),
            (
                vec![
                    b(&["hgetall", "a"]),
                    b(&["HGetAll", "a"]),
                    b(&["HGETALL", "b"]),
                ],
                Some((all, vec![b"a", b"a", b"b"])),
            ),
            (
                vec![b(&["SMEMBERS", "s"]), b(&["smembers", "t"])],
                Some((Whole::Set, vec![b"s", b"t"])),
            ),
            (
                vec![b(&["HKEYS", "h"])],
                Some((
                    Whole::Hash {
                        fields: true,
                        values: false,
                    },
                    vec![b"h"],
                )),
            ),
            (
                vec![b(&["HVALS", "h"])],
                Some((
                    Whole::Hash {
                        fields: false,
                        values: true,
                    },
                    vec![b"h"],
                )),
            ),
            // Two different reads, a wrong argument count, another command: not whole.
            (vec![b(&["HGETALL", "a"]), b(&["SMEMBERS", "s"])], None),
            (vec![b(&["HGETALL", "a"]), b(&["HKEYS", "a"])], None),
            (vec![b(&["HGETALL"])], None),
            (vec![b(&["HGETALL", "a", "b"])], None),
            (vec![b(&["SMEMBERS", "s"]), b(&["GET", "s"])], None),
            (vec![b(&["HGET", "a"])], None),
        ];
        for (run, want) in cases {
            let args: Vec<&[Bytes]> = run.iter().map(|r| r.as_slice()).collect();
            assert_eq!(whole_run(&args), want, "{run:?}");
        }
    }
}
