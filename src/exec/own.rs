//! A client's own backend connection: what the client hears for the commands that go there
//! (a blocking command, `WATCH`, a `MULTI`/`EXEC` transaction), and the `WATCH` that stands
//! on it. Nothing here is ever retried: the connection carries state (a `WATCH`, a blocked
//! command) that a retry on another connection would not have.
//!
//! - A command sent alone (`BLPOP`, `XREAD … BLOCK`) is sent once: a failure after it was
//!   handed over leaves a pop in doubt, a read not applied ([`bound_failure`]).
//!   In exact mode a SQL backend's pop carries a token, and the backend's own wait tries
//!   again after a lost reply and answers what was taken (`Backend::blocks_exactly`); what
//!   reaches here is its failure once that is no longer possible.
//! - `WATCH` applies nothing: its failure is never in doubt. A connection that fails (any
//!   failure but the server's own error reply leaves its state unknown) is closed, and a
//!   `WATCH` that stood on it is lost: the next `EXEC` answers nil and sends nothing, the
//!   answer an optimistic-locking client already handles by trying again, rather than
//!   applying unwatched.
//! - A transaction is sent `MULTI`, its commands, `EXEC`, each awaited: a failure before
//!   `EXEC` was sent applied nothing ([`not_applied`]); `EXEC`'s own failure leaves a
//!   transaction that writes in doubt.
//! - `min_replicas_ack`: a pop that took something, or a transaction that wrote, waits for
//!   `WAIT` on the same connection (it counts that connection's writes); short of the
//!   replicas the client hears `INDOUBT` ([`acknowledged`]).
//!
//! The sends go through [`OwnLink`]: the client connection's own backend connection, or a
//! simulated one (`tests/offline/simulation.rs`), so both run this code.

use super::bound_failure;
use crate::backend::BackendError;
use crate::command::Command;
use crate::error::{classify, ErrorClass};
use crate::retry::{Failure, GaveUp, Why};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::future::Future;
use std::time::Duration;

/// The client's own connection to one backend, as the executor uses it.
pub trait OwnLink {
    /// Sends `args` on it (dialled first when there is none); `blocking`: the command may
    /// wait as long as its arguments ask. Never retried.
    fn send(
        &mut self,
        args: &[Bytes],
        blocking: bool,
    ) -> impl Future<Output = Result<Frame, BackendError>>;

    /// Closes it: a `WATCH` or a blocked command on it goes with it.
    fn close(&mut self) -> impl Future<Output = ()>;
}

/// What the executor keeps of a client's own connection: whether a `WATCH` stands on it, or
/// stood on one that was lost.
#[derive(Debug, Default)]
pub struct Own {
    watching: bool,
    watch_lost: bool,
}

impl Own {
    /// Whether a `WATCH` stands on the connection.
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// The connection is gone (closed after a failure, or left for another backend's): a
    /// `WATCH` on it is lost, and the next `EXEC` must not apply unwatched.
    pub fn connection_lost(&mut self) {
        self.watch_lost |= self.watching;
        self.watching = false;
    }

    /// Nothing is watched any more (`UNWATCH`, `EXEC`, `DISCARD`, `RESET`).
    pub fn forget(&mut self) {
        self.watching = false;
        self.watch_lost = false;
    }

    /// Sends on `link`, closing it when the failure leaves its state unknown: anything but
    /// the server's own error reply (a lost reply, a refused redirection inside MULTI).
    async fn send<L: OwnLink>(
        &mut self,
        link: &mut L,
        args: &[Bytes],
        blocking: bool,
    ) -> Result<Frame, BackendError> {
        let result = link.send(args, blocking).await;
        if matches!(&result, Err(e) if !matches!(e, BackendError::Reply { .. })) {
            link.close().await;
            self.connection_lost();
        }
        result
    }

    /// A connection-bound command sent alone (a blocking one): once; then, when it took
    /// something and `replicas` wants it, `WAIT`.
    ///
    /// # Errors
    /// What the client hears instead of a reply.
    pub async fn alone<L: OwnLink>(
        &mut self,
        link: &mut L,
        command: &Command,
        replicas: Option<(u32, Duration)>,
    ) -> Result<Frame, Failure<BackendError>> {
        let frame = self
            .send(link, &command.args, true)
            .await
            .map_err(|e| bound_failure(e, !command.writes()))?;
        let took = took_effect(Effect::alone(command), &frame);
        self.replicated(link, replicas, took, frame).await
    }

    /// `WATCH`: on success the keys are watched on this connection.
    ///
    /// # Errors
    /// What the client hears instead of a reply (never in doubt: it applies nothing).
    pub async fn watch<L: OwnLink>(
        &mut self,
        link: &mut L,
        args: &[Bytes],
    ) -> Result<Frame, Failure<BackendError>> {
        let result = self.send(link, args, false).await;
        if result.is_ok() {
            self.watching = true;
        }
        result.map_err(|e| bound_failure(e, true))
    }

    /// `UNWATCH` on the connection when a `WATCH` stands there; nothing is watched after.
    pub async fn unwatch<L: OwnLink>(&mut self, link: &mut L) {
        if self.watching {
            let _ = self
                .send(link, &[Bytes::from_static(b"UNWATCH")], false)
                .await;
        }
        self.forget();
    }

    /// Whether the next `EXEC` must answer nil without sending anything: its `WATCH` went
    /// with its connection, so whether a watched key changed cannot be known.
    pub fn watch_lost(&self) -> bool {
        self.watch_lost
    }

    /// `queue` as one transaction: `MULTI`, each command, `EXEC`; then, when it wrote and
    /// `replicas` wants it, `WAIT`. None when its `WATCH` was lost ([`Own::watch_lost`]):
    /// nothing was sent, and the client hears nil. Nothing is watched after.
    ///
    /// # Errors
    /// What the client hears instead of `EXEC`'s reply.
    pub async fn transaction<L: OwnLink>(
        &mut self,
        link: &mut L,
        queue: &[Command],
        replicas: Option<(u32, Duration)>,
    ) -> Result<Option<Frame>, Failure<BackendError>> {
        if self.watch_lost {
            self.unwatch(link).await;
            return Ok(None);
        }
        let result = self.run(link, queue).await;
        self.forget();
        let frame = result?;
        let effects: Vec<Effect> = queue.iter().map(Effect::queued).collect();
        let took = transaction_took_effect(&effects, &frame);
        self.replicated(link, replicas, took, frame).await.map(Some)
    }

    async fn run<L: OwnLink>(
        &mut self,
        link: &mut L,
        queue: &[Command],
    ) -> Result<Frame, Failure<BackendError>> {
        // Nothing is applied before EXEC is sent: a failure up to there is not in doubt.
        self.send(link, &[Bytes::from_static(b"MULTI")], false)
            .await
            .map_err(not_applied)?;
        for command in queue {
            match self.send(link, &command.args, false).await {
                Ok(_) => {}
                // The server refused to queue it; EXEC will say EXECABORT.
                Err(BackendError::Reply { .. }) => {}
                Err(e) => return Err(not_applied(e)),
            }
        }
        // A transaction of reads applies nothing: a lost EXEC reply is not in doubt.
        let reads = !queue.iter().any(Command::writes);
        self.send(link, &[Bytes::from_static(b"EXEC")], false)
            .await
            .map_err(|e| bound_failure(e, reads))
    }

    /// `reply` as the client hears it: when it `took` effect and `replicas` wants its writes
    /// on replicas, only after `WAIT` on the same connection found enough of them.
    async fn replicated<L: OwnLink>(
        &mut self,
        link: &mut L,
        replicas: Option<(u32, Duration)>,
        took: bool,
        reply: Frame,
    ) -> Result<Frame, Failure<BackendError>> {
        let Some((wanted, timeout)) = replicas.filter(|_| took) else {
            return Ok(reply);
        };
        let wait = [
            Bytes::from_static(b"WAIT"),
            Bytes::from(wanted.to_string()),
            Bytes::from(timeout.as_millis().to_string()),
        ];
        let waited = self.send(link, &wait, false).await;
        acknowledged(reply, wanted, waited)
    }
}

/// A failure before `EXEC` was sent: a transaction that never reached `EXEC` applied nothing.
pub fn not_applied(error: BackendError) -> Failure<BackendError> {
    match classify(&error) {
        ErrorClass::Other => Failure::Answer(error, 0, 1),
        class => Failure::Unavailable(GaveUp {
            last: error,
            class,
            attempts: 1,
            elapsed: Duration::ZERO,
            why: Why::MustNotRepeat,
            maybe_applied: 0,
        }),
    }
}

/// What a command may change, as far as its reply can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing: a read (`XREAD … BLOCK`).
    Nothing,
    /// Something when it answers more than nil: a blocking pop (a nil timed out).
    Takes,
    /// Something unless it answers an error (which applied nothing).
    Writes,
    /// Maybe something whatever it answers: a script, which Redis does not roll back when
    /// it raises after `redis.call` wrote.
    Scripted,
}

impl Effect {
    /// A connection-bound command sent alone (a blocking command).
    pub fn alone(command: &Command) -> Effect {
        if command.writes() {
            Effect::Takes
        } else {
            Effect::Nothing
        }
    }

    /// A command queued in a transaction: a nil from a write there may still have written
    /// (`SET k v GET` on an absent key).
    pub fn queued(command: &Command) -> Effect {
        match (command.writes(), command.error_may_write()) {
            (false, _) => Effect::Nothing,
            (true, false) => Effect::Writes,
            (true, true) => Effect::Scripted,
        }
    }
}

/// Whether a command of `effect`, answered `reply`, changed something.
pub fn took_effect(effect: Effect, reply: &Frame) -> bool {
    let error = matches!(reply, Frame::SimpleError { .. } | Frame::BlobError { .. });
    match effect {
        Effect::Nothing => false,
        Effect::Takes => !error && !matches!(reply, Frame::Null),
        Effect::Writes => !error,
        Effect::Scripted => true,
    }
}

/// Whether a transaction whose queued commands have `effects` says, answered `reply` at
/// `EXEC`, changed something. A nil `EXEC` (a WATCHed key changed) ran nothing; a reply of
/// another shape than one element per command is taken to have run them all.
pub fn transaction_took_effect(effects: &[Effect], reply: &Frame) -> bool {
    match reply {
        Frame::Array { data, .. } if data.len() == effects.len() => effects
            .iter()
            .zip(data)
            .any(|(effect, item)| took_effect(*effect, item)),
        Frame::Null => false,
        _ => effects.iter().any(|e| *e != Effect::Nothing),
    }
}

/// What the client hears for `reply`, a write that took effect, once `WAIT wanted` answered
/// `waited`: the reply when enough replicas have the write, else `INDOUBT` (the write is
/// never retried, and it was applied on the primary).
pub fn acknowledged(
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

#[cfg(test)]
#[path = "own_tests.rs"]
mod tests;
