//! Stream range reads of a client's pipelined run: a run of `XRANGE`s (or of `XREVRANGE`s)
//! is answered by one statement for [`RANGES`] requests, where each was a key read and a
//! range read of its own. The statement reads the keys' rows and, for each request, its
//! range under its `COUNT`, all from one snapshot, as Redis answers a pipeline's reads in
//! order. Each reply is built as the command's own path builds it (`WRONGTYPE` before
//! `COUNT 0`'s null, a missing or expired key's empty array), which the differential tests
//! hold both paths to. A request whose arguments do not parse leaves the run to the
//! command's own path, which answers it.
//!
//! Should the backend fail or never answer, every request of the run hears the same error,
//! and a read applied nothing: its class says it can be tried again.

use super::apply::work_error;
use super::reads::{bounded, in_parts, ReadAnswer};
use super::store::{array, null, placeholders, Dialect, Kind, WRONGTYPE};
use super::streams::read::{range_args, Range};
use super::streams::{col, entry, uncol, Id};
use super::Inner;
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::HashMap;
use std::time::Duration;

/// Requests in one statement: each is a subquery of nine parameters, and the statement's
/// text (one per size, prepared once) grows with them.
const RANGES: usize = 64;

/// The run's ranges, and whether they are `XREVRANGE`s, when every request is the same one
/// of the two and its arguments parse; None otherwise.
pub fn range_run<'a>(requests: &[&'a [Bytes]]) -> Option<(bool, Vec<Range<'a>>)> {
    let mut rev = None;
    let mut ranges = Vec::with_capacity(requests.len());
    for args in requests {
        let name = args.first()?;
        let this = if name.eq_ignore_ascii_case(b"XRANGE") {
            false
        } else if name.eq_ignore_ascii_case(b"XREVRANGE") {
            true
        } else {
            return None;
        };
        if *rev.get_or_insert(this) != this || args.len() < 4 {
            return None;
        }
        ranges.push(range_args(args, this).ok()?);
    }
    Some((rev?, ranges))
}

/// Reads each of `ranges`, one statement per [`RANGES`] (several inside one read-only
/// transaction, so one snapshot still); one answer per request, in order.
pub async fn read(
    inner: &Inner,
    rev: bool,
    ranges: &[Range<'_>],
    acquire_timeout: Duration,
) -> Vec<ReadAnswer> {
    let dialect = inner.dialect;
    in_parts(
        inner,
        ranges,
        RANGES,
        acquire_timeout,
        move |part, conn, now_ms, limit| {
            Box::pin(statement(part, rev, dialect, now_ms, conn, limit))
        },
    )
    .await
}

/// The statement for `n` requests: the keys' rows (`i` -1), then each request's entries
/// (`i` its place), in order.
fn sql(n: usize, rev: bool, dialect: Dialect) -> String {
    let mut next = n;
    let mut param = || {
        next += 1;
        match dialect {
            Dialect::Sqlite => "?".to_string(),
            Dialect::Postgres => format!("${next}"),
        }
    };
    let order = if rev { "DESC" } else { "ASC" };
    let mut sql = format!(
        "SELECT CAST(-1 AS BIGINT), key, kind, expires_at, NULL, NULL, NULL FROM hf_keys \
         WHERE key IN ({})",
        placeholders(dialect, n)
    );
    for i in 0..n {
        let (key, lo_ms, lo_seq) = (param(), param(), param());
        let (hi_ms, hi_seq, count) = (param(), param(), param());
        sql.push_str(&format!(
            " UNION ALL SELECT CAST({i} AS BIGINT), NULL, NULL, NULL, ms, seq, fields FROM \
             (SELECT ms, seq, fields FROM hf_stream WHERE key = {key} \
             AND (ms, seq) >= ({lo_ms}, {lo_seq}) AND (ms, seq) <= ({hi_ms}, {hi_seq}) \
             ORDER BY ms {order}, seq {order} LIMIT {count}) r{i}"
        ));
    }
    sql.push_str(&format!(" ORDER BY 1, 5 {order}, 6 {order}"));
    sql
}

/// One statement for `ranges`.
async fn statement(
    ranges: &[Range<'_>],
    rev: bool,
    dialect: Dialect,
    now_ms: i64,
    conn: &mut super::conn::TxConn,
    limit: Duration,
) -> Result<Vec<ReadAnswer>, BackendError> {
    if ranges.is_empty() {
        return Ok(Vec::new());
    }
    let text = sql(ranges.len(), rev, dialect);
    let mut query = super::store::stmt(text);
    for range in ranges {
        query = query.bind(range.key);
    }
    for range in ranges {
        // A range that can hold nothing is read with LIMIT 0: the statement's shape stays.
        let (lo, hi, count) = match (range.lo, range.hi) {
            (Some(lo), Some(hi)) if !range.empty() => {
                (lo, hi, range.count.unwrap_or(i64::MAX).max(0))
            }
            _ => (Id::MIN, Id::MIN, 0),
        };
        query = query
            .bind(range.key)
            .bind(col(lo.ms))
            .bind(col(lo.seq))
            .bind(col(hi.ms))
            .bind(col(hi.seq))
            .bind(count);
    }
    let rows = bounded(limit, conn.ctx(0, Proto::Resp2, dialect, false).all(query)).await?;
    // Each key's kind when it is live; each request's entries.
    let mut kinds: HashMap<&[u8], i64> = HashMap::with_capacity(ranges.len());
    let mut entries: Vec<Vec<Frame>> = vec![Vec::new(); ranges.len()];
    for row in &rows {
        let i: i64 = row.try_get(0).map_err(work_error)?;
        let Ok(at) = usize::try_from(i) else {
            let key: &[u8] = row.try_get(1).map_err(work_error)?;
            let stored: i64 = row.try_get(2).map_err(work_error)?;
            let expires: Option<i64> = row.try_get(3).map_err(work_error)?;
            // Expired keys and missing ones answer alike: empty.
            if expires.is_none_or(|at| at > now_ms) {
                kinds.insert(key, stored);
            }
            continue;
        };
        let id = Id {
            ms: uncol(row.try_get(4).map_err(work_error)?),
            seq: uncol(row.try_get(5).map_err(work_error)?),
        };
        let fields: &[u8] = row.try_get(6).map_err(work_error)?;
        if let Some(out) = entries.get_mut(at) {
            out.push(entry(id, fields));
        }
    }
    let mut answers = Vec::with_capacity(ranges.len());
    for (range, found) in ranges.iter().zip(entries) {
        let Some(&code) = kinds.get(range.key) else {
            answers.push(Ok(array(Vec::new())));
            continue;
        };
        answers.push(match Kind::from_code(code) {
            // Redis answers COUNT 0 with a null array, not an empty one.
            Some(Kind::Stream) if range.count == Some(0) => Ok(null()),
            Some(Kind::Stream) => Ok(array(found)),
            Some(_) => Err(BackendError::reply(Bytes::from_static(
                WRONGTYPE.as_bytes(),
            ))),
            None => Err(BackendError::reply(Bytes::from(format!(
                "ERR holdfast: unknown stored kind {code}"
            )))),
        });
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::range_run;
    use bytes::Bytes;

    #[test]
    fn a_run_of_ranges_is_one_command_with_arguments_that_parse() {
        let b = |s: &[&str]| -> Vec<Bytes> {
            s.iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect()
        };
        // (the run, whether it goes together, as XREVRANGEs)
        let cases: Vec<(Vec<Vec<Bytes>>, Option<bool>)> = vec![
            (vec![], None),
            (vec![b(&["XRANGE", "s", "-", "+"])], Some(false)),
            (
                vec![
                    b(&["xrange", "s", "-", "+", "COUNT", "2"]),
                    b(&["XRANGE", "t", "1-1", "(5"]),
                ],
                Some(false),
            ),
            (vec![b(&["XREVRANGE", "s", "+", "-"])], Some(true)),
            // Mixed, too few arguments, one that does not parse, another command.
            (
                vec![
                    b(&["XRANGE", "s", "-", "+"]),
                    b(&["XREVRANGE", "s", "+", "-"]),
                ],
                None,
            ),
            (vec![b(&["XRANGE", "s", "-"])], None),
            (vec![b(&["XRANGE", "s", "x", "+"])], None),
            (vec![b(&["XRANGE", "s", "-", "+", "COUNT"])], None),
            (vec![b(&["XRANGE", "s", "-", "+", "COUNT", "x"])], None),
            (vec![b(&["XRANGE", "s", "(+", "+"])], None),
            (vec![b(&["XRANGE", "s", "-", "+"]), b(&["GET", "s"])], None),
        ];
        for (run, want) in cases {
            let args: Vec<&[Bytes]> = run.iter().map(|r| r.as_slice()).collect();
            assert_eq!(range_run(&args).map(|(rev, _)| rev), want, "{run:?}");
        }
        // The ranges are the command's own (an exclusive end moved by one).
        let run = [b(&["XRANGE", "s", "(1-1", "5", "COUNT", "3"])];
        let args: Vec<&[Bytes]> = run.iter().map(|r| r.as_slice()).collect();
        let (_, ranges) = range_run(&args).unwrap();
        let r = ranges[0];
        assert_eq!(r.key, b"s");
        assert_eq!(
            (r.lo.map(|i| (i.ms, i.seq)), r.count),
            (Some((1, 2)), Some(3))
        );
        assert_eq!(r.hi.map(|i| (i.ms, i.seq)), Some((5, u64::MAX)));
    }
}
