//! Consumer groups made, changed and shown: `XGROUP` (`CREATE`, `SETID`, `DESTROY`,
//! `CREATECONSUMER`, `DELCONSUMER`, `HELP`) and `XINFO` (`STREAM`, `GROUPS`, `CONSUMERS`,
//! `HELP`).

use super::super::args::{self, is};
use super::super::store::*;
use super::super::streams::{col, entry, parse_id, Head, Id, Shape, INVALID_ID};
use super::{arg, group, lossy, save_group, seen, stream, strict, Group, UNKNOWN};
use bytes::Bytes;
use redis_protocol::resp3::types::{BytesFrame as Frame, FrameMap};

fn subcommand_error(a: &[Bytes], command: &str) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(arg(a, 1))
    )
}

/// `XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER key group ...`.
pub async fn xgroup(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let sub = arg(a, 1).to_ascii_uppercase();
    if sub == b"HELP" {
        return Ok(help(XGROUP_HELP));
    }
    let (key, name) = (arg(a, 2), arg(a, 3));
    let create = sub == b"CREATE";
    let (mkstream, entries_read) = if create || sub == b"SETID" {
        options(a, create)?
    } else {
        (false, UNKNOWN)
    };
    ctx.lock(&[key]).await?;
    let head = stream(ctx, key).await?;
    let current = match head {
        Some(_) => group(ctx, key, name).await?,
        None => None,
    };
    if !mkstream {
        if head.is_none() {
            return fail(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may \
                 want to use the MKSTREAM option to create an empty stream automatically.",
            );
        }
        if current.is_none()
            && matches!(
                sub.as_slice(),
                b"SETID" | b"CREATECONSUMER" | b"DELCONSUMER"
            )
        {
            return fail(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                lossy(name),
                lossy(key)
            ));
        }
    }
    match sub.as_slice() {
        b"CREATE" if a.len() <= 8 => {
            let exists = current.is_some();
            create_group(ctx, key, name, arg(a, 4), head, exists, entries_read).await
        }
        b"SETID" if a.len() == 5 || a.len() == 7 => {
            let id = if arg(a, 4) == b"$" {
                head.map_or(Id::MIN, |h| h.last)
            } else {
                match parse_id(arg(a, 4), 0, true) {
                    Some(id) => id,
                    None => return fail(INVALID_ID),
                }
            };
            let g = Group {
                last: id,
                entries_read,
            };
            save_group(ctx, key, name, g).await?;
            Ok(ok())
        }
        b"DESTROY" if a.len() == 4 => {
            if current.is_none() {
                return Ok(int(0));
            }
            destroy_group(ctx, key, name).await
        }
        b"CREATECONSUMER" if a.len() == 5 => create_consumer(ctx, key, name, arg(a, 4)).await,
        b"DELCONSUMER" if a.len() == 5 => del_consumer(ctx, key, name, arg(a, 4)).await,
        _ => fail(subcommand_error(a, "XGROUP")),
    }
}

/// `XGROUP CREATE`'s and `SETID`'s options after the id: `MKSTREAM` (`CREATE` only) and
/// `ENTRIESREAD n`, with their defaults (no, and unknown).
fn options(a: &[Bytes], create: bool) -> Result<(bool, i64), Fail> {
    let (mut mkstream, mut entries_read) = (false, UNKNOWN);
    let mut i = 5;
    while i < a.len() {
        if create && is(arg(a, i), "MKSTREAM") {
            mkstream = true;
            i += 1;
        } else if is(arg(a, i), "ENTRIESREAD") && i + 1 < a.len() {
            entries_read = args::int(arg(a, i + 1))?;
            if entries_read < 0 && entries_read != UNKNOWN {
                return fail("ERR value for ENTRIESREAD must be positive or -1");
            }
            i += 2;
        } else {
            return fail(subcommand_error(a, "XGROUP"));
        }
    }
    Ok((mkstream, entries_read))
}

/// `XGROUP CREATE key group id|$`: the group at `id`, the stream made first when there is
/// none (`MKSTREAM`); `exists` when the group is there already.
async fn create_group(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    name: &[u8],
    id: &[u8],
    head: Option<Head>,
    exists: bool,
    entries_read: i64,
) -> Out {
    let id = if id == b"$" {
        head.map_or(Id::MIN, |h| h.last)
    } else {
        strict(id)?
    };
    if head.is_none() {
        ctx.create(key, Kind::Stream, None).await?;
    }
    if exists {
        return fail("BUSYGROUP Consumer Group name already exists");
    }
    ctx.execute(
        stmt("INSERT INTO hf_xgroup (key, grp, ms, seq, entries_read) VALUES ($1, $2, $3, $4, $5)")
            .bind(key)
            .bind(name)
            .bind(col(id.ms))
            .bind(col(id.seq))
            .bind(entries_read),
    )
    .await?;
    Ok(ok())
}

/// `XGROUP DESTROY key group` of a group that exists: it, its consumers and its pending
/// entries.
async fn destroy_group(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8]) -> Out {
    for table in ["hf_xgroup", "hf_xconsumer", "hf_xpel"] {
        ctx.execute(
            stmt(format!("DELETE FROM {table} WHERE key = $1 AND grp = $2"))
                .bind(key)
                .bind(name),
        )
        .await?;
    }
    Ok(int(1))
}

/// `XGROUP CREATECONSUMER key group consumer`: 1 if the consumer is new.
async fn create_consumer(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8], consumer: &[u8]) -> Out {
    let exists: Option<i64> = ctx
        .scalar_opt(
            stmt("SELECT 1 FROM hf_xconsumer WHERE key = $1 AND grp = $2 AND name = $3")
                .bind(key)
                .bind(name)
                .bind(consumer),
        )
        .await?;
    if exists.is_some() {
        return Ok(int(0));
    }
    seen(ctx, key, name, consumer).await?;
    Ok(int(1))
}

/// `XGROUP DELCONSUMER key group consumer`: the consumer and its pending entries; how many
/// those were.
async fn del_consumer(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8], consumer: &[u8]) -> Out {
    let pending = ctx
        .execute(
            stmt("DELETE FROM hf_xpel WHERE key = $1 AND grp = $2 AND consumer = $3")
                .bind(key)
                .bind(name)
                .bind(consumer),
        )
        .await?
        .rows_affected();
    ctx.execute(
        stmt("DELETE FROM hf_xconsumer WHERE key = $1 AND grp = $2 AND name = $3")
            .bind(key)
            .bind(name)
            .bind(consumer),
    )
    .await?;
    Ok(int(pending as i64))
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// A `HELP` subcommand's reply, Redis's text.
fn help(lines: &[&'static str]) -> Frame {
    array(
        lines
            .iter()
            .map(|line| Frame::SimpleString {
                data: Bytes::from_static(line.as_bytes()),
                attributes: None,
            })
            .collect(),
    )
}

/// A reply of named fields: a map in RESP3, alternating names and values in RESP2.
fn record(fields: Vec<(&'static str, Frame)>) -> Frame {
    let mut map = FrameMap::default();
    for (name, value) in fields {
        map.insert(bulk(Bytes::from_static(name.as_bytes())), value);
    }
    Frame::Map {
        data: map,
        attributes: None,
    }
}

/// A group's lag: entries added and not yet read by it, where that can be known (Redis's
/// `streamReplyWithCGLag`); nil where it cannot.
fn lag(shape: &Shape, g: Group) -> Frame {
    let added = i64::try_from(shape.added()).unwrap_or(i64::MAX);
    if added == 0 {
        return int(0);
    }
    if g.entries_read != UNKNOWN && !shape.tombstones_after(g.last) {
        return int(added - g.entries_read);
    }
    match shape.entries_before(g.last) {
        UNKNOWN => null(),
        read => int(added - read),
    }
}

fn entries_read(g: Group) -> Frame {
    if g.entries_read == UNKNOWN {
        null()
    } else {
        int(g.entries_read)
    }
}

/// `XINFO STREAM key [FULL [COUNT n]]`, `XINFO GROUPS key`, `XINFO CONSUMERS key group`.
pub async fn xinfo(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let sub = arg(a, 1).to_ascii_uppercase();
    if sub == b"HELP" {
        return Ok(help(XINFO_HELP));
    }
    let key = arg(a, 2);
    let Some(head) = stream(ctx, key).await? else {
        return fail("ERR no such key");
    };
    let (mut full, mut count) = (false, 10);
    if sub == b"STREAM" {
        let mut i = 3;
        while i < a.len() {
            if is(arg(a, i), "FULL") {
                full = true;
                i += 1;
            } else if is(arg(a, i), "COUNT") && full && i + 1 < a.len() {
                count = args::int(arg(a, i + 1))?.max(0);
                i += 2;
            } else {
                return fail(subcommand_error(a, "XINFO"));
            }
        }
    }
    match sub.as_slice() {
        b"CONSUMERS" => {
            let grp = arg(a, 3);
            if group(ctx, key, grp).await?.is_none() {
                return fail(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    lossy(grp),
                    lossy(key)
                ));
            }
            let rows = ctx.all(stmt(
                "SELECT c.name, c.seen_at, (SELECT COUNT(*) FROM hf_xpel p WHERE p.key = c.key \
                 AND p.grp = c.grp AND p.consumer = c.name) FROM hf_xconsumer c \
                 WHERE c.key = $1 AND c.grp = $2 ORDER BY c.name",
            )
            .bind(key)
            .bind(grp))
            .await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let seen_at: i64 = row.try_get(1)?;
                out.push(record(vec![
                    ("name", bulk(bytes_at(row, 0)?)),
                    ("pending", int(row.try_get(2)?)),
                    ("idle", int(ctx.now.saturating_sub(seen_at).max(0))),
                ]));
            }
            Ok(array(out))
        }
        b"GROUPS" => {
            let shape = Shape::read(ctx, key, head).await?;
            let mut out = Vec::new();
            for (name, g) in groups(ctx, key).await? {
                let counts = ctx.one(stmt(
                    "SELECT (SELECT COUNT(*) FROM hf_xconsumer WHERE key = $1 AND grp = $2), \
                     (SELECT COUNT(*) FROM hf_xpel WHERE key = $1 AND grp = $2)",
                )
                .bind(key)
                .bind(name.as_ref()))
                .await?;
                out.push(record(vec![
                    ("name", bulk(name)),
                    ("consumers", int(counts.try_get(0)?)),
                    ("pending", int(counts.try_get(1)?)),
                    ("last-delivered-id", bulk(g.last.text())),
                    ("entries-read", entries_read(g)),
                    ("lag", lag(&shape, g)),
                ]));
            }
            Ok(array(out))
        }
        b"STREAM" => {
            let shape = Shape::read(ctx, key, head).await?;
            stream_info(ctx, key, &shape, full.then_some(count)).await
        }
        _ => fail(subcommand_error(a, "XINFO")),
    }
}

async fn groups(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Bytes, Group)>, Fail> {
    let rows = ctx
        .all(
            stmt("SELECT grp, ms, seq, entries_read FROM hf_xgroup WHERE key = $1 ORDER BY grp")
                .bind(key),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((
            bytes_at(row, 0)?,
            Group {
                last: Id::of_row(row, 1)?,
                entries_read: row.try_get(3)?,
            },
        ));
    }
    Ok(out)
}

/// Up to `limit` (0: all) entries from the start of the stream, or from its end.
async fn edge_entries(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    limit: i64,
    last: bool,
) -> Result<Vec<Frame>, Fail> {
    let order = if last { "ms DESC, seq DESC" } else { "ms, seq" };
    let rows = ctx
        .all(
            stmt(format!(
                "SELECT ms, seq, fields FROM hf_stream WHERE key = $1 ORDER BY {order} LIMIT $2"
            ))
            .bind(key)
            .bind(if limit > 0 { limit } else { i64::MAX }),
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let fields: Vec<u8> = row.try_get(2)?;
        out.push(entry(Id::of_row(row, 0)?, &fields));
    }
    Ok(out)
}

/// `XINFO STREAM`, with `FULL [COUNT n]` when `full` is `Some(n)`. The two radix-tree
/// figures describe Redis's memory layout, which has no counterpart here: they are those
/// of Redis's nodes of 100 entries.
async fn stream_info(ctx: &mut Ctx<'_>, key: &[u8], shape: &Shape, full: Option<i64>) -> Out {
    let nodes = (shape.length + 99) / 100;
    let head = shape.head;
    let mut fields = vec![
        ("length", int(shape.length)),
        ("radix-tree-keys", int(nodes)),
        ("radix-tree-nodes", int(nodes + 1)),
        ("last-generated-id", bulk(head.last.text())),
        ("max-deleted-entry-id", bulk(head.max_deleted.text())),
        (
            "entries-added",
            int(i64::try_from(shape.added()).unwrap_or(i64::MAX)),
        ),
        ("recorded-first-entry-id", bulk(shape.first.text())),
    ];
    let Some(count) = full else {
        let n = ctx
            .scalar(stmt("SELECT COUNT(*) FROM hf_xgroup WHERE key = $1").bind(key))
            .await?;
        fields.push(("groups", int(n)));
        let first = edge_entries(ctx, key, 1, false).await?.pop();
        let last = edge_entries(ctx, key, 1, true).await?.pop();
        fields.push(("first-entry", first.unwrap_or_else(null)));
        fields.push(("last-entry", last.unwrap_or_else(null)));
        return Ok(record(fields));
    };
    fields.push((
        "entries",
        array(edge_entries(ctx, key, count, false).await?),
    ));
    let limit = if count > 0 { count } else { i64::MAX };
    let mut out = Vec::new();
    for (name, g) in groups(ctx, key).await? {
        let rows = ctx
            .all(
                stmt(
                    "SELECT ms, seq, consumer, delivered_at, deliveries FROM hf_xpel \
             WHERE key = $1 AND grp = $2 ORDER BY ms, seq",
                )
                .bind(key)
                .bind(name.as_ref()),
            )
            .await?;
        let mut pel = Vec::new();
        let mut by_consumer: std::collections::HashMap<Vec<u8>, Vec<Frame>> = Default::default();
        let mut counts: std::collections::HashMap<Vec<u8>, i64> = Default::default();
        for row in &rows {
            let id = Id::of_row(row, 0)?;
            let owner: Vec<u8> = row.try_get(2)?;
            let (at, times): (i64, i64) = (row.try_get(3)?, row.try_get(4)?);
            if (pel.len() as i64) < limit {
                pel.push(array(vec![
                    bulk(id.text()),
                    bulk(Bytes::from(owner.clone())),
                    int(at),
                    int(times),
                ]));
            }
            *counts.entry(owner.clone()).or_default() += 1;
            let own = by_consumer.entry(owner).or_default();
            if (own.len() as i64) < limit {
                own.push(array(vec![bulk(id.text()), int(at), int(times)]));
            }
        }
        let members = ctx.all(stmt(
            "SELECT name, seen_at FROM hf_xconsumer WHERE key = $1 AND grp = $2 ORDER BY name",
        )
        .bind(key)
        .bind(name.as_ref()))
        .await?;
        let mut consumers = Vec::with_capacity(members.len());
        for row in &members {
            let member: Vec<u8> = row.try_get(0)?;
            consumers.push(record(vec![
                ("name", bulk(Bytes::from(member.clone()))),
                ("seen-time", int(row.try_get(1)?)),
                ("pel-count", int(counts.get(&member).copied().unwrap_or(0))),
                (
                    "pending",
                    array(by_consumer.remove(&member).unwrap_or_default()),
                ),
            ]));
        }
        out.push(record(vec![
            ("name", bulk(name)),
            ("last-delivered-id", bulk(g.last.text())),
            ("entries-read", entries_read(g)),
            ("lag", lag(shape, g)),
            ("pel-count", int(rows.len() as i64)),
            ("pending", array(pel)),
            ("consumers", array(consumers)),
        ]));
    }
    fields.push(("groups", array(out)));
    Ok(record(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(
        length: i64,
        added: u64,
        first: (u64, u64),
        last: (u64, u64),
        deleted: (u64, u64),
    ) -> Shape {
        let id = |(ms, seq)| Id { ms, seq };
        Shape {
            head: Head {
                last: id(last),
                added: Some(added),
                max_deleted: id(deleted),
            },
            length,
            first: id(first),
            top: id(last),
        }
    }

    /// Redis's lag rules, case by case (`streamReplyWithCGLag` and the distance estimate).
    #[test]
    fn lag_follows_redis() {
        let g = |last: (u64, u64), read: i64| Group {
            last: Id {
                ms: last.0,
                seq: last.1,
            },
            entries_read: read,
        };
        let cases: &[(Shape, Group, Frame)] = &[
            // A stream nothing was ever added to: 0.
            (
                shape(0, 0, (0, 0), (0, 0), (0, 0)),
                g((0, 0), UNKNOWN),
                int(0),
            ),
            // A valid counter and no tombstone ahead: added - read.
            (shape(5, 5, (1, 0), (5, 0), (0, 0)), g((3, 0), 3), int(2)),
            // A counter past what was added (ENTRIESREAD): negative, as Redis answers.
            (shape(1, 1, (1, 1), (1, 1), (0, 0)), g((0, 0), 5), int(-4)),
            // No counter, at the last id: 0.
            (
                shape(1, 1, (5, 0), (5, 0), (0, 0)),
                g((5, 0), UNKNOWN),
                int(0),
            ),
            // No counter, before the first entry and no tombstones: all of them.
            (
                shape(3, 3, (1, 0), (3, 0), (0, 0)),
                g((0, 0), UNKNOWN),
                int(3),
            ),
            // No counter, at the first entry: the rest.
            (
                shape(3, 3, (1, 0), (3, 0), (0, 0)),
                g((1, 0), UNKNOWN),
                int(2),
            ),
            // No counter, a tombstone among the entries: unknown.
            (
                shape(3, 4, (1, 0), (4, 0), (2, 0)),
                g((1, 0), UNKNOWN),
                null(),
            ),
            // A counter with a tombstone ahead: estimated, here unknown.
            (shape(3, 4, (1, 0), (4, 0), (3, 0)), g((2, 0), 2), null()),
            // A tombstone before the first entry does not count.
            (shape(2, 4, (3, 0), (4, 0), (2, 0)), g((3, 0), 3), int(1)),
            // A future id: unknown.
            (
                shape(2, 2, (1, 0), (2, 0), (0, 0)),
                g((9, 0), UNKNOWN),
                null(),
            ),
        ];
        for (i, (s, group, want)) in cases.iter().enumerate() {
            assert_eq!(&lag(s, *group), want, "case {i}");
        }
    }
}
