//! `min_replicas_ack` on the client's own backend connection. A transaction that wrote, or a
//! blocking pop that took something, is followed by `WAIT` on that connection (it counts that
//! connection's writes) and acknowledged only once enough replicas have it. Neither is ever
//! retried (`transaction.rs`, `Conn::bound`), so short of the replicas the client hears
//! `INDOUBT`: applied on the primary, not yet safe from a failover.
//!
//! What the client hears is decided here without I/O ([`took_effect`],
//! [`transaction_took_effect`], [`acknowledged`]); [`Conn::replicated`] only sends the `WAIT`.

use super::Conn;
use crate::backend::BackendError;
use crate::exec::bound_failure;
use crate::namespace::Namespace;
use crate::retry::Failure;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::Arc;

/// Whether a command that `writes`, answered `reply`, changed something: a nil took nothing
/// (a blocking pop that timed out) and an error reply applied nothing.
pub(super) fn took_effect(writes: bool, reply: &Frame) -> bool {
    writes
        && !matches!(
            reply,
            Frame::Null | Frame::SimpleError { .. } | Frame::BlobError { .. }
        )
}

/// Whether a transaction whose queued commands write as `writes` says, answered `reply` at
/// `EXEC`, changed something. A nil `EXEC` (a WATCHed key changed) ran nothing; a reply of
/// another shape than one element per command is taken to have run them all.
pub(super) fn transaction_took_effect(writes: &[bool], reply: &Frame) -> bool {
    match reply {
        Frame::Array { data, .. } if data.len() == writes.len() => writes
            .iter()
            .zip(data)
            .any(|(writes, item)| took_effect(*writes, item)),
        Frame::Null => false,
        _ => writes.iter().any(|w| *w),
    }
}

/// What the client hears for `reply`, a write that took effect, once `WAIT wanted` answered
/// `waited`: the reply when enough replicas have the write, else `INDOUBT` (the write is
/// never retried, and it was applied on the primary).
pub(super) fn acknowledged(
    reply: Frame,
    wanted: u32,
    waited: Result<Frame, BackendError>,
) -> Result<Frame, Failure<BackendError>> {
    let short = match waited {
        Ok(Frame::Number { data, .. }) if data >= i64::from(wanted) => return Ok(reply),
        Ok(Frame::Number { data, .. }) => BackendError::NotReplicated { wanted, got: data },
        // Not a count: how many replicas have it is unknown.
        Ok(_) => BackendError::NotReplicated { wanted, got: 0 },
        Err(e) => BackendError::WaitFailed {
            wanted,
            source: Box::new(e),
        },
    };
    Err(bound_failure(short, false))
}

impl Conn {
    /// `reply` as the client hears it: when it `took_effect` and the namespace wants its
    /// writes on replicas, only after `WAIT` on the client's own connection (`route`: on a
    /// Cluster, the node that took the write) found enough of them.
    pub(super) async fn replicated(
        &mut self,
        namespace: &Arc<Namespace>,
        route: Option<&[u8]>,
        took_effect: bool,
        reply: Frame,
    ) -> Result<Frame, Failure<BackendError>> {
        let wants = namespace
            .replicas
            .filter(|_| took_effect && namespace.backend.replicates());
        let Some((wanted, timeout)) = wants else {
            return Ok(reply);
        };
        let wait = [
            Bytes::from_static(b"WAIT"),
            Bytes::from(wanted.to_string()),
            Bytes::from(timeout.as_millis().to_string()),
        ];
        let waited = self.send_dedicated(namespace, &wait, false, route).await;
        acknowledged(reply, wanted, waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(text: &str) -> Frame {
        match text {
            "nil" => Frame::Null,
            "err" => Frame::SimpleError {
                data: "WRONGTYPE no".into(),
                attributes: None,
            },
            n if n.parse::<i64>().is_ok() => Frame::Number {
                data: n.parse().unwrap_or_default(),
                attributes: None,
            },
            value => Frame::BlobString {
                data: Bytes::copy_from_slice(value.as_bytes()),
                attributes: None,
            },
        }
    }

    fn array(items: &[&str]) -> Frame {
        Frame::Array {
            data: items.iter().map(|i| frame(i)).collect(),
            attributes: None,
        }
    }

    #[test]
    fn a_write_waits_only_when_it_took_effect() {
        // (writes, reply, waits)
        let cases = [
            (true, frame("v"), true),
            (true, array(&["list", "v"]), true),
            (true, frame("nil"), false),
            (true, frame("err"), false),
            // XREAD … BLOCK: a read, whatever it returns.
            (false, array(&["stream"]), false),
        ];
        for (writes, reply, waits) in cases {
            assert_eq!(took_effect(writes, &reply), waits, "{writes} {reply:?}");
        }
    }

    #[test]
    fn a_transaction_waits_when_one_of_its_writes_took_effect() {
        // (queued commands that write, EXEC's reply, waits)
        let cases: [(&[bool], Frame, bool); 7] = [
            (&[true], array(&["OK"]), true),
            (&[false, true], array(&["v", "1"]), true),
            (&[false, false], array(&["v", "nil"]), false),
            // The write failed at run time (WRONGTYPE), the read ran.
            (&[true, false], array(&["err", "v"]), false),
            (&[true, true], array(&["err", "1"]), true),
            // A WATCHed key changed: nothing ran.
            (&[true], frame("nil"), false),
            // A reply of an unexpected shape: assume everything ran.
            (&[false, true], array(&["v"]), true),
        ];
        for (writes, reply, waits) in cases {
            assert_eq!(
                transaction_took_effect(writes, &reply),
                waits,
                "{writes:?} {reply:?}"
            );
        }
    }

    #[test]
    fn short_of_its_replicas_a_write_is_in_doubt() {
        let heard = |waited: Result<Frame, BackendError>| match acknowledged(frame("OK"), 2, waited)
        {
            Ok(reply) => format!("ok {reply:?}"),
            Err(Failure::InDoubt(g)) => format!("indoubt {}", g.last),
            Err(Failure::Unavailable(g)) => format!("unavailable {}", g.last),
            Err(Failure::Answer(e, ..)) => format!("answer {e}"),
        };
        assert!(heard(Ok(frame("2"))).starts_with("ok "));
        assert!(heard(Ok(frame("3"))).starts_with("ok "));
        assert_eq!(
            heard(Ok(frame("1"))),
            "indoubt the write reached 1 replicas of the 2 required"
        );
        assert_eq!(
            heard(Ok(frame("err"))),
            "indoubt the write reached 0 replicas of the 2 required"
        );
        // WAIT refused or never sent: still applied on the primary, so in doubt, never
        // "not applied" and never the error as if it were the write's answer.
        for failed in [
            BackendError::reply(Bytes::from_static(b"ERR WAIT cannot be used")),
            BackendError::AcquireTimeout {
                waited: std::time::Duration::ZERO,
            },
        ] {
            assert_eq!(
                heard(Err(failed)),
                "indoubt the write was applied, but waiting for 2 replicas failed"
            );
        }
    }
}
