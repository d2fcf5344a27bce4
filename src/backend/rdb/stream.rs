//! A stream as a `DUMP` payload carries it (Redis 7.0's `RDB_TYPE_STREAM_LISTPACKS_2`): its
//! entries in listpacks of up to 100 entries and 4 KB, each led by a master entry whose
//! fields later entries may share, then the stream's length, last id, first id, greatest
//! deleted id and entries ever added, then each consumer group with its last id, entries
//! read, pending entries and consumers.
//!
//! Entries are packed as Redis packs them when they are added in order with its default
//! `stream-node-max-entries` and `stream-node-max-bytes`, so a stream only ever appended to
//! is Redis's payload byte for byte. A payload from a stream Redis deleted from or trimmed
//! carries deleted entries in its listpacks; they are read past. The older
//! `RDB_TYPE_STREAM_LISTPACKS` (Redis 5 and 6) is read too: it lacks the counters, so the
//! stream's entries added is its length and each group's entries read is unknown.

use super::{listpack, put_len, put_raw_string, Reader};

/// A stream id: milliseconds and sequence.
pub type StreamId = (u64, u64);

/// A stream and its consumer groups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpStream {
    /// Entries in id order: the id and the fields and values, alternating.
    pub entries: Vec<(StreamId, Vec<Vec<u8>>)>,
    /// The last id added (or set by `XSETID`).
    pub last: StreamId,
    /// The greatest id deleted, 0-0 when none was.
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub added: u64,
    /// The consumer groups.
    pub groups: Vec<DumpGroup>,
}

/// One consumer group of a [`DumpStream`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpGroup {
    /// Its name.
    pub name: Vec<u8>,
    /// The last id delivered.
    pub last: StreamId,
    /// Entries read, -1 when unknown.
    pub entries_read: i64,
    /// Entries delivered and not acknowledged: id, consumer, delivery time (Unix ms) and
    /// deliveries.
    pub pending: Vec<(StreamId, Vec<u8>, i64, u64)>,
    /// Consumers and the time each was last seen (Unix ms).
    pub consumers: Vec<(Vec<u8>, i64)>,
}

pub(super) const STREAM_LISTPACKS: u8 = 15;
pub(super) const STREAM_LISTPACKS_2: u8 = 19;

/// Redis's `stream-node-max-entries` and `stream-node-max-bytes` defaults.
const NODE_ENTRIES: usize = 100;
const NODE_BYTES: usize = 4096;

const DELETED: i64 = 1;
const SAME_FIELDS: i64 = 2;

fn raw_id(id: StreamId) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&id.0.to_be_bytes());
    out[8..].copy_from_slice(&id.1.to_be_bytes());
    out
}

fn from_raw_id(raw: &[u8]) -> Option<StreamId> {
    let raw: &[u8; 16] = raw.try_into().ok()?;
    let (ms, seq) = raw.split_at(8);
    Some((
        u64::from_be_bytes(ms.try_into().ok()?),
        u64::from_be_bytes(seq.try_into().ok()?),
    ))
}

fn int(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// One listpack of a stream being packed: its master id and fields, its elements (the
/// entry count first), and their bytes but the count's.
struct Node {
    master: StreamId,
    fields: Vec<Vec<u8>>,
    elements: Vec<Vec<u8>>,
    entries: usize,
    bytes: usize,
}

impl Node {
    fn start(id: StreamId, pairs: &[Vec<u8>]) -> Node {
        let fields: Vec<Vec<u8>> = pairs.iter().step_by(2).cloned().collect();
        let mut elements = vec![int(0), int(0), int(fields.len() as i64)];
        elements.extend(fields.iter().cloned());
        elements.push(int(0));
        let bytes = elements[1..]
            .iter()
            .map(|e| listpack::element_size(e))
            .sum();
        Node {
            master: id,
            fields,
            elements,
            entries: 0,
            bytes,
        }
    }

    /// The listpack's bytes as Redis measures them before an append.
    fn size(&self) -> usize {
        listpack::EMPTY_SIZE + listpack::element_size(&int(self.entries as i64)) + self.bytes
    }

    fn push(&mut self, id: StreamId, pairs: &[Vec<u8>]) {
        let same =
            pairs.len() / 2 == self.fields.len() && pairs.iter().step_by(2).eq(self.fields.iter());
        // The differences wrap as Redis's unsigned subtraction stored in a signed integer.
        let ms = id.0.wrapping_sub(self.master.0) as i64;
        let seq = id.1.wrapping_sub(self.master.1) as i64;
        let n = (pairs.len() / 2) as i64;
        let mut added = vec![int(if same { SAME_FIELDS } else { 0 }), int(ms), int(seq)];
        if same {
            added.extend(pairs.iter().skip(1).step_by(2).cloned());
        } else {
            added.push(int(n));
            added.extend(pairs.iter().cloned());
        }
        let pieces = if same { n + 3 } else { 2 * n + 4 };
        added.push(int(pieces));
        self.bytes += added
            .iter()
            .map(|e| listpack::element_size(e))
            .sum::<usize>();
        self.elements.extend(added);
        self.entries += 1;
    }

    fn finish(mut self) -> ([u8; 16], Vec<u8>) {
        self.elements[0] = int(self.entries as i64);
        let blob = listpack::encode(self.elements.iter().map(Vec::as_slice));
        (raw_id(self.master), blob)
    }
}

/// The entries packed into listpacks as appending them one by one would pack them.
fn pack(entries: &[(StreamId, Vec<Vec<u8>>)]) -> Vec<([u8; 16], Vec<u8>)> {
    let mut done = Vec::new();
    let mut tail: Option<Node> = None;
    for (id, pairs) in entries {
        let value_bytes: usize = pairs.iter().map(Vec::len).sum();
        if let Some(node) = tail.take() {
            if node.size() + value_bytes >= NODE_BYTES || node.entries >= NODE_ENTRIES {
                done.push(node.finish());
            } else {
                tail = Some(node);
            }
        }
        tail.get_or_insert_with(|| Node::start(*id, pairs))
            .push(*id, pairs);
    }
    done.extend(tail.map(Node::finish));
    done
}

/// Appends a stream's body (after its type byte).
pub(super) fn put(out: &mut Vec<u8>, s: &DumpStream) {
    let nodes = pack(&s.entries);
    put_len(out, nodes.len());
    for (key, blob) in &nodes {
        put_raw_string(out, key);
        put_raw_string(out, blob);
    }
    let first = s.entries.first().map_or((0, 0), |(id, _)| *id);
    put_len(out, s.entries.len());
    for id in [s.last, first, s.max_deleted] {
        put_len(out, id.0 as usize);
        put_len(out, id.1 as usize);
    }
    put_len(out, s.added as usize);
    let mut groups: Vec<&DumpGroup> = s.groups.iter().collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    put_len(out, groups.len());
    for g in groups {
        put_group(out, g);
    }
}

fn put_group(out: &mut Vec<u8>, g: &DumpGroup) {
    put_raw_string(out, &g.name);
    put_len(out, g.last.0 as usize);
    put_len(out, g.last.1 as usize);
    // -1 (unknown) is written as Redis writes it: the length 2^64 - 1.
    put_len(out, g.entries_read as u64 as usize);
    let mut pending: Vec<&(StreamId, Vec<u8>, i64, u64)> = g.pending.iter().collect();
    pending.sort_by_key(|p| p.0);
    put_len(out, pending.len());
    for (id, _, delivered, count) in &pending {
        out.extend_from_slice(&raw_id(*id));
        out.extend_from_slice(&delivered.to_le_bytes());
        put_len(out, *count as usize);
    }
    // Every owner of a pending entry is a consumer, listed or not.
    let mut consumers: Vec<(&[u8], i64)> = g
        .consumers
        .iter()
        .map(|(n, t)| (n.as_slice(), *t))
        .collect();
    for (_, owner, _, _) in &pending {
        if !consumers.iter().any(|(n, _)| n == owner) {
            consumers.push((owner, 0));
        }
    }
    consumers.sort();
    put_len(out, consumers.len());
    for (name, seen) in consumers {
        put_raw_string(out, name);
        out.extend_from_slice(&seen.to_le_bytes());
        let owned: Vec<&&(StreamId, Vec<u8>, i64, u64)> =
            pending.iter().filter(|p| p.1 == name).collect();
        put_len(out, owned.len());
        for p in owned {
            out.extend_from_slice(&raw_id(p.0));
        }
    }
}

fn id_of(r: &mut Reader) -> Option<StreamId> {
    Some((r.length()? as u64, r.length()? as u64))
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// The live entries of one listpack whose master id is `master`.
fn unpack(master: StreamId, blob: &[u8], out: &mut Vec<(StreamId, Vec<Vec<u8>>)>) -> Option<()> {
    let elements = listpack::decode(blob)?;
    let mut it = elements.iter();
    let mut next = || it.next().map(Vec::as_slice);
    let _count = number(next()?)?;
    let _deleted = number(next()?)?;
    let n = usize::try_from(number(next()?)?).ok()?;
    let fields: Vec<&[u8]> = (0..n).map(|_| next()).collect::<Option<_>>()?;
    if number(next()?)? != 0 {
        return None;
    }
    while let Some(flags) = next() {
        let flags = number(flags)?;
        let ms = master.0.wrapping_add(number(next()?)? as u64);
        let seq = master.1.wrapping_add(number(next()?)? as u64);
        let mut pairs = Vec::new();
        if flags & SAME_FIELDS != 0 {
            for field in &fields {
                pairs.push(field.to_vec());
                pairs.push(next()?.to_vec());
            }
        } else {
            let n = usize::try_from(number(next()?)?).ok()?;
            for _ in 0..2 * n {
                pairs.push(next()?.to_vec());
            }
        }
        let _pieces = next()?;
        if pairs.is_empty() {
            return None;
        }
        if flags & DELETED == 0 {
            out.push(((ms, seq), pairs));
        }
    }
    Some(())
}

/// Reads a stream's body of payload type `kind`; None when it is malformed.
pub(super) fn read(r: &mut Reader, kind: u8) -> Option<DumpStream> {
    let nodes = r.length()?;
    let mut s = DumpStream::default();
    for _ in 0..nodes {
        let master = from_raw_id(&r.string()?)?;
        unpack(master, &r.string()?, &mut s.entries)?;
    }
    let ascending = s.entries.windows(2).all(|w| w[0].0 < w[1].0);
    let length = r.length()?;
    s.last = id_of(r)?;
    if kind == STREAM_LISTPACKS_2 {
        let _first = id_of(r)?;
        s.max_deleted = id_of(r)?;
        s.added = r.length()? as u64;
    } else {
        s.added = length as u64;
    }
    let last_ok = s.entries.last().is_none_or(|(id, _)| *id <= s.last);
    if !ascending || !last_ok || length != s.entries.len() {
        return None;
    }
    for _ in 0..r.length()? {
        let g = read_group(r, kind)?;
        if s.groups.iter().any(|o| o.name == g.name) {
            return None;
        }
        s.groups.push(g);
    }
    Some(s)
}

fn read_group(r: &mut Reader, kind: u8) -> Option<DumpGroup> {
    let mut g = DumpGroup {
        name: r.string()?,
        last: id_of(r)?,
        entries_read: -1,
        ..DumpGroup::default()
    };
    if kind == STREAM_LISTPACKS_2 {
        g.entries_read = r.length()? as u64 as i64;
    }
    // The group's pending entries, their owners read with the consumers below.
    let mut pending: Vec<(StreamId, Option<Vec<u8>>, i64, u64)> = Vec::new();
    for _ in 0..r.length()? {
        let id = from_raw_id(r.take(16)?)?;
        let delivered = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let count = r.length()? as u64;
        pending.push((id, None, delivered, count));
    }
    pending.sort_by_key(|p| p.0);
    if pending.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    for _ in 0..r.length()? {
        let name = r.string()?;
        let seen = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
        if g.consumers.iter().any(|(n, _)| *n == name) {
            return None;
        }
        for _ in 0..r.length()? {
            let id = from_raw_id(r.take(16)?)?;
            let at = pending.binary_search_by_key(&id, |p| p.0).ok()?;
            pending[at].1 = Some(name.clone());
        }
        g.consumers.push((name, seen));
    }
    // A pending entry no consumer owns is a damaged payload.
    g.pending = pending
        .into_iter()
        .map(|(id, owner, at, n)| Some((id, owner?, at, n)))
        .collect::<Option<_>>()?;
    Some(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::rdb::{dump, restore, DumpValue};

    fn pairs(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    /// `XADD s 1-1 f v n 1`, `XADD s 1-2 f w n 2`, `XADD s 2-0 other x`, two groups (g1
    /// from 0 with alice's two entries and bob's one read, and carol created; g2 from `$`),
    /// then `DUMP s` on Redis 7.0.15.
    const REDIS_STREAM: &[u8] = b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01@DD\x00\x00\x00\x19\x00\x03\x01\x00\x01\x02\x01\x81f\x02\x81n\x02\x00\x01\x02\x01\x00\x01\x00\x01\x81v\x02\x01\x01\x05\x01\x02\x01\x00\x01\x01\x01\x81w\x02\x02\x01\x05\x01\x00\x01\x01\x01\xdf\xff\x02\x01\x01\x85other\x06\x81x\x02\x06\x01\xff\x03\x02\x00\x01\x01\x00\x00\x03\x02\x02g1\x02\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x03\x05alice\xfa\xb8\x1eH\xa2\x01\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x03bob\xfa\xb8\x1eH\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x05carol\xfa\xb8\x1eH\xa2\x01\x00\x00\x00\x02g2\x02\x00\x81\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x0a\x00\x86\xbd\xc6\xa8%\xbe\xb0\x1b";

    #[test]
    fn redis_s_stream_payload_reads_and_writes_back_to_the_same_bytes() {
        let Ok(DumpValue::Stream(s)) = restore(REDIS_STREAM) else {
            panic!("not read");
        };
        assert_eq!(
            s.entries,
            vec![
                ((1, 1), pairs(&["f", "v", "n", "1"])),
                ((1, 2), pairs(&["f", "w", "n", "2"])),
                ((2, 0), pairs(&["other", "x"])),
            ]
        );
        assert_eq!((s.last, s.added, s.max_deleted), ((2, 0), 3, (0, 0)));
        let g1 = &s.groups[0];
        assert_eq!(
            (g1.name.as_slice(), g1.last, g1.entries_read),
            (&b"g1"[..], (2, 0), 3)
        );
        let owners: Vec<&[u8]> = g1.pending.iter().map(|p| p.1.as_slice()).collect();
        assert_eq!(owners, [&b"alice"[..], b"alice", b"bob"]);
        assert_eq!(g1.consumers.len(), 3);
        assert_eq!(s.groups[1].entries_read, -1);
        assert_eq!(dump(&DumpValue::Stream(s)), REDIS_STREAM);
    }

    #[test]
    fn entries_fill_listpacks_as_redis_s_appends_do() {
        // 100 entries to a node (201: three nodes); a new node when the bytes would pass 4 KB: two entries of
        // 1,500 bytes to a node.
        let entries: Vec<(StreamId, Vec<Vec<u8>>)> =
            (0..201u64).map(|i| ((i, 0), pairs(&["f", "v"]))).collect();
        assert_eq!(pack(&entries).len(), 3);
        let wide: Vec<(StreamId, Vec<Vec<u8>>)> = (0..10u64)
            .map(|i| ((1, i), vec![b"f".to_vec(), vec![b'x'; 1500]]))
            .collect();
        assert_eq!(pack(&wide).len(), 5);
        let s = DumpStream {
            entries: wide.clone(),
            last: (1, 9),
            added: 10,
            ..DumpStream::default()
        };
        let Ok(DumpValue::Stream(back)) = restore(&dump(&DumpValue::Stream(Box::new(s)))) else {
            panic!("not read");
        };
        assert_eq!(back.entries, wide);
    }

    #[test]
    fn a_pending_entry_without_an_owner_is_refused() {
        let s = DumpStream {
            entries: vec![((1, 0), pairs(&["f", "v"]))],
            last: (1, 0),
            added: 1,
            groups: vec![DumpGroup {
                name: b"g".to_vec(),
                last: (1, 0),
                entries_read: 1,
                pending: vec![((1, 0), b"c".to_vec(), 5, 1)],
                consumers: vec![(b"c".to_vec(), 5)],
            }],
            ..DumpStream::default()
        };
        let good = dump(&DumpValue::Stream(Box::new(s)));
        assert!(restore(&good).is_ok());
        // The consumer's own list emptied: its one entry now has no owner. The consumer's
        // name, seen time and pending count sit just before the trailer's 10 bytes and the
        // entry's 16-byte id.
        let mut body = good[..good.len() - 10 - 16].to_vec();
        let count = body.len() - 1;
        assert_eq!(body[count], 1);
        body[count] = 0;
        crate::backend::rdb::seal(&mut body);
        assert_eq!(restore(&body), Err(crate::backend::rdb::BadPayload::Format));
    }
}
