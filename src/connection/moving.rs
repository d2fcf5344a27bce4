//! `HOLDFAST COPY | RECOPY | VERIFY | MIRROR namespace …`: moving a namespace to its mirror,
//! a batch per command, driven by `holdfast copy` and `holdfast verify` (`src/mover.rs`)
//! or by hand. Admin-only where `[[users]]` exist: a copy reads and writes every key of the
//! namespace. The work is `mirror::copy`'s; this file reads the arguments and words the
//! replies:
//!
//! - `COPY ns walk [COUNT n]` → `[next walk ("" when over), keys copied]`
//! - `RECOPY ns` → keys copied again (-1: every key is marked; copy the namespace again)
//! - `VERIFY ns walk [COUNT n]` → `[next walk, keys compared, [key, how it differs, …]]`
//! - `MIRROR ns` → `[queued, n, recopy_keys, n (-1: all), primary_keys, n (-1: unknown)]`,
//!   the last the primary database's `DBSIZE` (other namespaces' keys too)

use super::{array, bulk, error, number, ClientConn};
use crate::mirror::copy::Walk;
use crate::mirror::Mirror;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::Arc;

/// Keys a batch walks unless `COUNT` says otherwise.
const BATCH: usize = 500;

impl ClientConn {
    pub(super) async fn holdfast(&mut self, args: &[Bytes]) -> Frame {
        if !self.is_admin() {
            return error(super::auth::cannot_run("holdfast"));
        }
        let sub = args
            .get(1)
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let name = String::from_utf8_lossy(args.get(2).map_or(&b""[..], |a| a)).into_owned();
        let state = self.state.clone();
        let Some(mirror) = state
            .router
            .namespaces()
            .iter()
            .find(|ns| ns.name == name)
            .and_then(|ns| state.mirrors.of(ns).mirror.clone())
        else {
            return error(format!("ERR holdfast: namespace '{name}' has no mirror"));
        };
        let owns = |key: &[u8]| state.router.namespace_of(key).name == name;
        match sub.as_slice() {
            b"COPY" | b"VERIFY" => {
                let Some(walk) = args.get(3).and_then(|w| Walk::parse(w)) else {
                    return error("ERR holdfast: not a walk position (start with 0)");
                };
                let count = match count(&args[4..]) {
                    Ok(count) => count,
                    Err(e) => return error(e),
                };
                if sub.as_slice() == b"COPY" {
                    copy(&mirror, &walk, count, &owns).await
                } else {
                    verify(&mirror, &walk, count, &owns).await
                }
            }
            b"RECOPY" => match mirror.recopy().await {
                Ok(copied) => number(copied.map_or(-1, |n| n as i64)),
                Err(e) => error(format!("ERR holdfast: {e}")),
            },
            _ => {
                let (queued, recopy) = mirror.status();
                let size = mirror.primary_size().await.unwrap_or(-1);
                array(vec![
                    bulk(Bytes::from_static(b"queued")),
                    number(queued as i64),
                    bulk(Bytes::from_static(b"recopy_keys")),
                    number(recopy),
                    bulk(Bytes::from_static(b"primary_keys")),
                    number(size),
                ])
            }
        }
    }
}

/// `[COUNT n]`: n, or the default; Err: the error's text.
fn count(rest: &[Bytes]) -> Result<usize, &'static str> {
    match rest {
        [] => Ok(BATCH),
        [word, n] if word.eq_ignore_ascii_case(b"COUNT") => std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n > 0)
            .ok_or("ERR value is out of range, must be positive"),
        _ => Err("ERR syntax error"),
    }
}

fn next_of(next: Option<Walk>) -> Frame {
    bulk(Bytes::from(next.map(|w| w.text()).unwrap_or_default()))
}

async fn copy(
    mirror: &Arc<Mirror>,
    walk: &Walk,
    count: usize,
    owns: &(dyn Fn(&[u8]) -> bool + Sync),
) -> Frame {
    match mirror.copy_batch(walk, count, owns).await {
        Ok(done) => array(vec![next_of(done.next), number(done.keys as i64)]),
        Err(e) => error(format!("ERR holdfast: {e}")),
    }
}

async fn verify(
    mirror: &Arc<Mirror>,
    walk: &Walk,
    count: usize,
    owns: &(dyn Fn(&[u8]) -> bool + Sync),
) -> Frame {
    match mirror.verify_batch(walk, count, owns).await {
        Ok(done) => {
            let mut found = Vec::with_capacity(done.differences.len() * 2);
            for (key, how) in done.differences {
                found.push(bulk(key));
                found.push(bulk(Bytes::from(how.describe())));
            }
            array(vec![
                next_of(done.next),
                number(done.keys as i64),
                array(found),
            ])
        }
        Err(e) => error(format!("ERR holdfast: {e}")),
    }
}
