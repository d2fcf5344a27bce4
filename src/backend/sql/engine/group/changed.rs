//! The keys a group's applied requests changed (`watch`): what aborts a later `EXEC` of the
//! same group that watched one of them, and whose versions the group raises before COMMIT.

use super::super::conn::TxConn;
use super::super::{blocking, store, watch, Inner};
use super::{GroupOutcome, Job};
use crate::backend::Proto;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// The keys the group's applied requests changed so far (`watch`): a later request of the
/// same transaction whose `EXEC` watched one of them is aborted (its check would read the
/// version before the group raises it), and at the end their versions are raised, with one
/// statement.
#[derive(Default)]
pub(super) struct Changed {
    /// Every key (`FLUSHDB`, `FLUSHALL`).
    all: bool,
    keys: std::collections::HashSet<Vec<u8>>,
}

impl Changed {
    /// Notes what an applied request changed.
    pub(super) fn note(&mut self, job: &Job, outcome: &GroupOutcome) {
        let Ok(replies) = outcome else { return };
        for (args, reply) in job.commands.iter().zip(replies) {
            let name = args.first().map_or(&[][..], |n| n.as_ref());
            // A blocking pop that found nothing changed nothing.
            if matches!(reply, Frame::Null) && blocking::is_blocking(name) {
                continue;
            }
            match watch::modified(args) {
                Some(keys) => self.keys.extend(keys.into_iter().map(<[u8]>::to_vec)),
                None => self.all = true,
            }
        }
    }

    /// Whether `job` is an `EXEC` that watched a key changed earlier in the group.
    pub(super) fn conflicts(&self, job: &Job) -> bool {
        job.commands.iter().any(|args| {
            args.first().is_some_and(|n| n.as_ref() == watch::CHECK)
                && args
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .any(|k| self.all || self.keys.contains(k.as_ref()))
        })
    }

    /// Raises the versions of the watched keys among those changed.
    pub(super) async fn touch(&self, inner: &Inner, conn: &mut TxConn) -> Result<(), store::Fail> {
        if !self.all && self.keys.is_empty() {
            return Ok(());
        }
        let mut ctx = conn.ctx(0, Proto::Resp2, inner.dialect, true);
        if self.all {
            return watch::touch(&mut ctx, None).await;
        }
        let mut keys: Vec<&[u8]> = self.keys.iter().map(Vec::as_slice).collect();
        keys.sort_unstable();
        watch::touch(&mut ctx, Some(&keys)).await
    }
}
