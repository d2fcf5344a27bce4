//! Which of a client's pipelined requests may have their first dispatches sent ahead
//! together: the gate (authenticated, outside MULTI, permitted, routed, fast mode, no replica
//! wait, no mirror to order writes with) and the run (one backend, all reads or all writes). Sending them and keeping the
//! order when one fails is the executor's (`exec::ahead`).

use super::ClientConn;
use crate::backend::{BackendError, Reply};
use crate::command::table::Idempotence;
use crate::command::{Command, CommandError};
use crate::exec::settle::Plan;
use crate::exec::Ahead;
use crate::namespace::Namespace;
use std::sync::Arc;

impl ClientConn {
    /// The namespace a command's first dispatch may be sent ahead to: a plain forwarded
    /// command, answered in fast mode by a backend that pipelines, that changes nothing about
    /// this connection and waits for no replica.
    fn pipelinable(&self, command: &Command) -> Option<Arc<Namespace>> {
        if !self.authed
            || self.multi.is_some()
            || command.local().is_some()
            || command.spec.every_backend
            || command.class == Idempotence::ConnectionBound
            || self.exec.giving_up()
            // A RESP2 subscriber may send only what `handle` answers itself.
            || (self.subscribed() && self.exec.proto == crate::backend::Proto::Resp2)
        {
            return None;
        }
        self.permit(command).ok()?;
        // Walked twice rather than collected: no allocation per request.
        if command.keys().count() > self.state.config.server.max_keys_per_command {
            return None;
        }
        let namespace = self.route(command).ok()?;
        // A mirrored namespace's writes are ordered with its copies (`Mirror::writing`),
        // and a cut-over one's wait for the mirror: neither is sent before its turn.
        let ends = self.state.mirrors.of(namespace);
        if !namespace.backend.pipelines()
            || (ends.mirror.is_some() && command.writes())
            || (ends.cut_over_from.as_ref()).is_some_and(|m| !m.is_ready())
            || (namespace.replicas.is_some() && command.class != Idempotence::Read)
            || !matches!(self.exec.plan(&**namespace, command), Plan::Fast)
        {
            return None;
        }
        Some(namespace.clone())
    }

    /// Sends ahead the first dispatches of the leading run of `items` that may go together
    /// (at least two, on one backend, all reads or all writes), and returns what each of them
    /// left, with the namespace it was routed to, in order; empty when nothing was sent
    /// ahead (or only a leading part of the run, when the backend sent only that).
    pub(super) async fn send_ahead<'c>(
        &self,
        items: impl Iterator<Item = &'c Result<Command, CommandError>>,
    ) -> Vec<Option<(Arc<Namespace>, Ahead<Reply, BackendError>)>> {
        let mut run: Vec<(&Command, Arc<Namespace>)> = Vec::new();
        for item in items {
            let Ok(command) = item else { break };
            let Some(namespace) = self.pipelinable(command) else {
                break;
            };
            if let Some((first_command, first)) = run.first() {
                let read = command.class == Idempotence::Read;
                if !Arc::ptr_eq(&first.backend, &namespace.backend)
                    || read != (first_command.class == Idempotence::Read)
                {
                    break;
                }
            }
            run.push((command, namespace));
        }
        let Some((_, namespace)) = run.first() else {
            return Vec::new();
        };
        let commands: Vec<&Command> = run.iter().map(|(command, _)| *command).collect();
        let left = self
            .exec
            .send_ahead(&*namespace.backend, namespace.acquire_timeout, &commands)
            .await;
        run.into_iter()
            .zip(left)
            .map(|((_, namespace), ahead)| ahead.map(|ahead| (namespace, ahead)))
            .collect()
    }
}
