//! Copying a mirrored namespace's keys to its mirror while it serves (`holdfast copy`), and
//! checking them there (`holdfast verify`), a batch at a time: the primary's keys walked by
//! `SCAN` (by each of the namespace's prefixes, or the whole keyspace for the catch-all,
//! keeping only the namespace's own keys), each read with `DUMP` and `PEXPIRETIME` and written to
//! the mirror with `RESTORE … REPLACE` (or `DEL` if it is gone), whatever the two backends
//! are.
//!
//! A key written while it is copied ends with the newer value because the copy goes through
//! the mirror queue, in one order with the writes: the copy holds the key's shard while it
//! reads the key and queues its `RESTORE`, as a write holds its keys' shards from before its
//! dispatch until it is queued (`Mirror::writing`). A write the
//! snapshot includes is queued before the `RESTORE`, which then carries it again; one it does
//! not is queued after. A check queues the primary's snapshot the same way and compares it
//! with the mirror's once the writes before it are applied, so a check under load sees
//! no difference that is only the queue's lag.
//!
//! A walk's position is a text (`Walk::text`) that the caller keeps: `SCAN` cursors stay
//! valid across restarts of holdfast, so a copy resumes where it stopped.

use super::diff::{Difference, Snapshot};
use super::{Mirror, MirrorJob, Sides};
use crate::command::Command;
use crate::exec::{Ended, Session};
use crate::metrics as m;
use crate::namespace::Namespace;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// Keys of a batch copied or checked at once.
const AT_ONCE: usize = 16;

/// Where a walk of a namespace's keys is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// 0: the primary's keys; 1: the mirror's (a verify's second pass, for keys only there).
    pub side: u8,
    /// Which of the namespace's prefixes (the catch-all has one walk, 0).
    pub prefix: usize,
    /// The `SCAN` cursor there.
    pub cursor: Bytes,
}

impl Walk {
    /// The start of a walk.
    pub fn start() -> Walk {
        Walk {
            side: 0,
            prefix: 0,
            cursor: Bytes::from_static(b"0"),
        }
    }

    /// A walk's position as text: `side:prefix:cursor`, or `0` for the start.
    pub fn text(&self) -> String {
        format!(
            "{}:{}:{}",
            self.side,
            self.prefix,
            String::from_utf8_lossy(&self.cursor)
        )
    }

    /// The position [`Walk::text`] wrote; None for text it did not write.
    pub fn parse(text: &[u8]) -> Option<Walk> {
        if text == b"0" {
            return Some(Walk::start());
        }
        let text = std::str::from_utf8(text).ok()?;
        let mut parts = text.splitn(3, ':');
        let side = parts.next()?.parse().ok().filter(|s| *s <= 1)?;
        let prefix = parts.next()?.parse().ok()?;
        let cursor = parts.next()?;
        cursor.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
        Some(Walk {
            side,
            prefix,
            cursor: Bytes::copy_from_slice(cursor.as_bytes()),
        })
    }
}

/// What one batch of a copy did.
#[derive(Debug, Default)]
pub struct Copied {
    /// Where the next batch starts; None: the walk is over.
    pub next: Option<Walk>,
    /// Keys copied.
    pub keys: usize,
}

/// What one batch of a check found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Where the next batch starts; None: the walk is over.
    pub next: Option<Walk>,
    /// Keys compared.
    pub keys: usize,
    /// The keys that differ, and how.
    pub differences: Vec<(Bytes, Difference)>,
}

/// Why a batch stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A backend refused a command or did not answer it.
    #[error("{side} backend: {text}")]
    Backend {
        /// `primary` or `mirror`.
        side: &'static str,
        /// What it answered.
        text: String,
    },
    /// The mirror's worker is gone (its namespace was reconfigured).
    #[error("the mirror was reconfigured; start again")]
    Gone,
}

/// A key of `*`'s glob: its special characters escaped.
fn glob_literal(prefix: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(prefix.len() + 1);
    for b in prefix {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out.push(b'*');
    Bytes::from(out)
}

fn text_of(frame: &Frame) -> String {
    match frame {
        Frame::SimpleError { data, .. } => data.to_string(),
        Frame::BlobError { data, .. } => String::from_utf8_lossy(data).into_owned(),
        other => format!("{other:?}"),
    }
}

/// Runs `args` on `on` as the mirror's own request: the reply, or what went wrong.
async fn run(
    sides: &Sides,
    session: &mut Session,
    on: &Namespace,
    args: Vec<Bytes>,
) -> Result<Frame, String> {
    let command = Command::parse(args).map_err(|e| e.reply())?;
    let (reply, outcome) = session.execute(&sides.budget, on, &command, None).await;
    let frame = reply.into_frame();
    match outcome.ended {
        Ended::Ok => Ok(frame),
        _ => Err(text_of(&frame)),
    }
}

fn side_name(sides: &Sides, on: &Namespace) -> &'static str {
    if std::ptr::eq(on, &sides.primary) {
        "primary"
    } else {
        "mirror"
    }
}

/// A key's `DUMP` and `PEXPIRETIME` on `on`: its deadline as the backend holds it, not a
/// time left that would need a clock to carry.
pub(super) async fn snapshot(
    sides: &Sides,
    session: &mut Session,
    on: &Namespace,
    key: &Bytes,
) -> Result<Snapshot, CopyError> {
    let backend = |text| CopyError::Backend {
        side: side_name(sides, on),
        text,
    };
    let dumped = run(
        sides,
        session,
        on,
        vec![Bytes::from_static(b"DUMP"), key.clone()],
    )
    .await
    .map_err(backend)?;
    let payload = match dumped {
        Frame::BlobString { data, .. } => Some(data),
        _ => None,
    };
    let expires = match run(
        sides,
        session,
        on,
        vec![Bytes::from_static(b"PEXPIRETIME"), key.clone()],
    )
    .await
    .map_err(backend)?
    {
        Frame::Number { data, .. } => data,
        _ => -2,
    };
    // Gone between the two reads: gone.
    let payload = if expires == -2 { None } else { payload };
    Ok(Snapshot { payload, expires })
}

/// One `SCAN` on `on`: the next cursor and the keys.
async fn scan(
    sides: &Sides,
    session: &mut Session,
    on: &Namespace,
    cursor: &Bytes,
    pattern: Option<Bytes>,
    count: usize,
) -> Result<(Bytes, Vec<Bytes>), CopyError> {
    let mut args = vec![Bytes::from_static(b"SCAN"), cursor.clone()];
    if let Some(pattern) = pattern {
        args.extend([Bytes::from_static(b"MATCH"), pattern]);
    }
    args.extend([Bytes::from_static(b"COUNT"), Bytes::from(count.to_string())]);
    let side = side_name(sides, on);
    let frame = run(sides, session, on, args)
        .await
        .map_err(|text| CopyError::Backend { side, text })?;
    let strange = || CopyError::Backend {
        side,
        text: format!("SCAN answered {frame:?}"),
    };
    let Frame::Array { data, .. } = &frame else {
        return Err(strange());
    };
    let (Some(Frame::BlobString { data: next, .. }), Some(Frame::Array { data: keys, .. })) =
        (data.first(), data.get(1))
    else {
        return Err(strange());
    };
    let keys = keys
        .iter()
        .filter_map(|k| match k {
            Frame::BlobString { data, .. } => Some(data.clone()),
            _ => None,
        })
        .collect();
    Ok((next.clone(), keys))
}

impl Mirror {
    /// One step of `walk`: the keys of the next `SCAN` that `owns` says are the namespace's,
    /// and where the walk goes on (None: over). `both` walks the mirror's keys after the
    /// primary's.
    async fn step(
        &self,
        session: &mut Session,
        walk: &Walk,
        count: usize,
        both: bool,
        owns: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> Result<(Vec<Bytes>, Option<Walk>), CopyError> {
        let on = if walk.side == 0 {
            &self.sides.primary
        } else {
            &self.sides.target
        };
        let pattern = self.prefixes.get(walk.prefix).map(|p| glob_literal(p));
        let (cursor, keys) = scan(&self.sides, session, on, &walk.cursor, pattern, count).await?;
        let keys = keys.into_iter().filter(|k| owns(k)).collect();
        let next = if cursor[..] != b"0"[..] {
            Some(Walk {
                cursor,
                ..walk.clone()
            })
        } else if walk.prefix + 1 < self.prefixes.len() {
            Some(Walk {
                prefix: walk.prefix + 1,
                cursor: Bytes::from_static(b"0"),
                ..walk.clone()
            })
        } else if both && walk.side == 0 {
            Some(Walk {
                side: 1,
                ..Walk::start()
            })
        } else {
            None
        };
        Ok((keys, next))
    }

    /// Reads `key` on the primary with its shard held, and queues `job(snapshot)`
    /// for the mirror before letting its writers go on.
    async fn in_order(
        &self,
        session: &mut Session,
        key: &Bytes,
        job: impl FnOnce(Snapshot, u64) -> MirrorJob,
    ) -> Result<(), CopyError> {
        // Room in the queue first: a full queue must not hold the key's writers.
        let permit = self.tx.reserve().await.map_err(|_| CopyError::Gone)?;
        let _held = self.shards[Self::shard_of(key)].clone().lock_owned().await;
        let snapshot = snapshot(&self.sides, session, &self.sides.primary, key).await?;
        self.progress.pending.fetch_add(1, Ordering::AcqRel);
        let at = self.progress.seq.fetch_add(1, Ordering::AcqRel);
        permit.send(job(snapshot, at));
        Ok(())
    }

    /// Runs `each` on every one of `keys`, [`AT_ONCE`] at a time, each with a session of
    /// its own: a key's snapshot is two round trips to the primary, and one key after
    /// another left a database primary mostly waiting. The first error stops the batch.
    async fn each_key<'k, F>(&self, keys: &'k [Bytes], each: F) -> Result<(), CopyError>
    where
        // Boxed: a future named by a closure's lifetimes is not shown Send to the runtime.
        F: Fn(Session, &'k Bytes) -> BoxFuture<'k, Result<(), CopyError>>,
    {
        use futures_util::StreamExt;
        // Each session's give-up sender, kept: it is never given up.
        let mut keep = Vec::with_capacity(keys.len());
        let mut running = futures_util::stream::FuturesUnordered::new();
        let mut next = keys.iter();
        loop {
            while running.len() < AT_ONCE {
                let Some(key) = next.next() else { break };
                let (session, sender) = self.sides.session();
                keep.push(sender);
                running.push(each(session, key));
            }
            match running.next().await {
                Some(done) => done?,
                None => return Ok(()),
            }
        }
    }

    /// Copies `key` as the primary holds it now.
    async fn copy_key(&self, session: &mut Session, key: &Bytes) -> Result<(), CopyError> {
        self.in_order(session, key, |snapshot, at| {
            let command = match snapshot.payload {
                None => vec![Bytes::from_static(b"DEL"), key.clone()],
                Some(payload) => {
                    let mut c = vec![Bytes::from_static(b"RESTORE"), key.clone()];
                    if snapshot.expires > 0 {
                        c.push(Bytes::from(snapshot.expires.to_string()));
                        c.extend([payload, Bytes::from_static(b"REPLACE")]);
                        c.push(Bytes::from_static(b"ABSTTL"));
                    } else {
                        c.extend([Bytes::from_static(b"0"), payload]);
                        c.push(Bytes::from_static(b"REPLACE"));
                    }
                    c
                }
            };
            MirrorJob::Apply {
                commands: vec![command],
                keys: vec![key.clone()],
                alone: false,
                heals: Some(at),
                at,
            }
        })
        .await?;
        m::mirror_copied(&self.namespace);
        Ok(())
    }

    /// One batch of a copy: up to about `count` keys from `walk`.
    ///
    /// # Errors
    /// [`CopyError`]: the batch stopped; the same walk may be tried again.
    pub async fn copy_batch(
        &self,
        walk: &Walk,
        count: usize,
        owns: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> Result<Copied, CopyError> {
        let (mut session, _keep) = self.sides.session();
        let (keys, next) = self.step(&mut session, walk, count, false, owns).await?;
        self.each_key(&keys, |mut session, key| {
            Box::pin(async move { self.copy_key(&mut session, key).await })
        })
        .await?;
        Ok(Copied {
            next,
            keys: keys.len(),
        })
    }

    /// How many keys the primary's database holds (`DBSIZE`): the most a copy of the
    /// namespace walks (other namespaces of that database count too), for its progress.
    /// None: not answered.
    pub async fn primary_size(&self) -> Option<i64> {
        let (mut session, _keep) = self.sides.session();
        let dbsize = vec![Bytes::from_static(b"DBSIZE")];
        match run(&self.sides, &mut session, &self.sides.primary, dbsize).await {
            Ok(Frame::Number { data, .. }) => Some(data),
            _ => None,
        }
    }

    /// Copies the keys marked to be copied again: how many, or None when every key is
    /// marked (a whole copy is needed; the mark stays).
    ///
    /// # Errors
    /// [`CopyError`]: the keys not copied are marked again.
    pub async fn recopy(&self) -> Result<Option<usize>, CopyError> {
        let marked = self.take_recopy();
        if marked.all {
            super::mark(&self.progress, &self.namespace, &[]);
            return Ok(None);
        }
        let (mut session, _keep) = self.sides.session();
        let keys: Vec<Bytes> = marked.keys.into_keys().collect();
        for (i, key) in keys.iter().enumerate() {
            if let Err(e) = self.copy_key(&mut session, key).await {
                super::mark(&self.progress, &self.namespace, &keys[i..]);
                return Err(e);
            }
        }
        Ok(Some(keys.len()))
    }

    /// One batch of a check: up to about `count` keys from `walk`, the primary's keys and
    /// then the mirror's (where only a key missing on the primary is a difference).
    ///
    /// # Errors
    /// [`CopyError`]: the batch stopped; the same walk may be tried again.
    pub async fn verify_batch(
        &self,
        walk: &Walk,
        count: usize,
        owns: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> Result<Checked, CopyError> {
        let (mut session, _keep) = self.sides.session();
        let (keys, next) = self.step(&mut session, walk, count, true, owns).await?;
        let mut checked = Checked {
            next,
            keys: keys.len(),
            differences: Vec::new(),
        };
        // Every check of the batch queued first, then their answers awaited: each waits for
        // the writes queued before it, not for the checks before it.
        let asked = Mutex::new(Vec::with_capacity(keys.len()));
        self.each_key(&keys, |mut session, key| {
            let asked = &asked;
            Box::pin(async move {
                let (done, found) = oneshot::channel();
                self.in_order(&mut session, key, |primary, _| MirrorJob::Check {
                    key: key.clone(),
                    primary,
                    done,
                })
                .await?;
                asked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((key.clone(), found));
                Ok(())
            })
        })
        .await?;
        let asked = asked.into_inner().unwrap_or_else(|p| p.into_inner());
        for (key, found) in asked {
            let difference = found.await.map_err(|_| CopyError::Gone)?;
            let counted = match (&difference, walk.side) {
                (Some(_), 0) | (Some(Difference::OnlyOnMirror), _) => difference,
                _ => None,
            };
            if let Some(difference) = counted {
                checked.differences.push((key, difference));
            }
        }
        Ok(checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_reads_back_from_its_text_and_nothing_else_does() {
        let walk = Walk {
            side: 1,
            prefix: 2,
            cursor: Bytes::from_static(b"1234"),
        };
        assert_eq!(Walk::parse(walk.text().as_bytes()), Some(walk));
        assert_eq!(Walk::parse(b"0"), Some(Walk::start()));
        for bad in ["", "x", "2:0:0", "0:0:abc", "0:x:0", "0:0"] {
            assert_eq!(Walk::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn a_prefix_is_matched_literally() {
        assert_eq!(&glob_literal(b"job:")[..], b"job:*");
        assert_eq!(&glob_literal(b"a*b?[c]\\")[..], b"a\\*b\\?\\[c\\]\\\\*");
    }
}
