//! WATCH and MULTI/EXEC: commands are queued by holdfast and sent as one transaction at EXEC
//! on the client's own backend connection, so a transaction that never reaches EXEC applies
//! nothing. What the client hears after a fault there is `exec::own`'s to decide; this file
//! routes the transaction and encodes its reply.

use super::*;

/// What becomes of a command sent inside MULTI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum InMulti {
    /// Queued, and sent with the transaction at EXEC.
    Queue,
    /// Run now: the transaction's own commands (EXEC, DISCARD, WATCH…) and QUIT/RESET.
    Run,
    /// Refused, and the transaction discarded at EXEC (`EXECABORT`), as Redis does with a
    /// command it refuses to queue.
    Refuse,
}

/// Which commands a transaction may hold. Those holdfast answers itself, or sends to every
/// backend, cannot go into a transaction sent verbatim to one backend connection: `SELECT 1`
/// there would run the transaction's writes (and every later one on that connection) in a
/// database no other command reads, `AUTH`/`HELLO`/`CLIENT` would change the connection under
/// holdfast, and `FLUSHALL`/`FLUSHDB` would empty a backend past the checks that guard them
/// outside MULTI (the namespaces a user may reach, `allow_flush`), exact mode's tokens with
/// it. `PING`, `ECHO` and `UNWATCH` mean the same to the backend, so they are queued.
pub(super) fn in_multi(local: Option<Local>, every_backend: bool) -> InMulti {
    match local {
        None if every_backend => InMulti::Refuse,
        None | Some(Local::Ping | Local::Echo | Local::Unwatch) => InMulti::Queue,
        Some(
            Local::Exec | Local::Discard | Local::Multi | Local::Watch | Local::Quit | Local::Reset,
        ) => InMulti::Run,
        Some(
            Local::Hello
            | Local::Auth
            | Local::Select
            | Local::Client
            | Local::Info
            | Local::Command
            | Local::ClusterOnly
            | Local::Subscribe
            | Local::Pubsub
            | Local::Monitor
            | Local::Acl
            | Local::Holdfast,
        ) => InMulti::Refuse,
    }
}

impl ClientConn {
    pub(super) async fn watch(&mut self, command: &Command) -> Frame {
        let keys: Vec<&[u8]> = command.keys().map(|k| k.as_ref()).collect();
        let namespace = match self.state.router.route(keys) {
            Ok(ns) => ns.clone(),
            Err(e) => return error(e.to_string()),
        };
        if self.own.watching() {
            if let Some((backend, _)) = &self.dedicated {
                if !Arc::ptr_eq(backend, &namespace.backend) {
                    return error(
                        "ERR holdfast: WATCH keys of one transaction must live on one backend",
                    );
                }
            }
        }
        self.leave_other_backend(&namespace).await;
        let mut own = std::mem::take(&mut self.own);
        let mut link = OwnConn::to(self, Some(&namespace), super::first_key(command));
        let result = own.watch(&mut link, &command.args).await;
        self.own = own;
        failure_reply(result, &*namespace).0
    }

    pub(super) async fn unwatch(&mut self) {
        let mut own = std::mem::take(&mut self.own);
        own.unwatch(&mut OwnConn::to(self, None, None)).await;
        self.own = own;
    }

    /// Runs the queued commands as one MULTI/EXEC on the client's own backend connection.
    pub(super) async fn exec(&mut self, out: &mut Output) -> Flow {
        let started = Instant::now();
        let Some(multi) = self.multi.take() else {
            self.reply(out, &error("ERR EXEC without MULTI"));
            return Flow::Continue;
        };
        if multi.dirty {
            self.unwatch().await;
            self.reply(
                out,
                &error("EXECABORT Transaction discarded because of previous errors."),
            );
            return Flow::Continue;
        }
        if self.own.watch_lost() {
            // The WATCH went with its connection: whether a watched key changed cannot be
            // known, so the transaction is aborted as if one had (nothing is sent), the answer
            // an optimistic-locking client already handles by trying again.
            return self.aborted(out).await;
        }
        let (keys, routed) = route(&self.state.router, &multi.queue);
        let namespace = match routed {
            Ok(ns) => ns,
            Err(e) => {
                self.unwatch().await;
                self.reply(out, &error(e.to_string()));
                return Flow::Continue;
            }
        };
        // Redis Cluster runs a transaction on one node: keys of several slots are refused
        // before anything is sent, as the Cluster itself refuses them.
        if namespace.backend.spans_slots(&keys) {
            self.unwatch().await;
            self.reply(
                out,
                &error("CROSSSLOT Keys in request don't hash to the same slot"),
            );
            return Flow::Continue;
        }
        if self.own.watching() {
            if let Some((backend, _)) = &self.dedicated {
                if !Arc::ptr_eq(backend, &namespace.backend) {
                    self.unwatch().await;
                    self.reply(
                        out,
                        &error("ERR holdfast: WATCH and EXEC keys must live on one backend"),
                    );
                    return Flow::Continue;
                }
            }
        }
        // On a Cluster the whole transaction goes to the node of its first key (keys in
        // other slots are refused there, as Redis Cluster refuses them).
        let route = multi.queue.iter().find_map(super::first_key);
        let commands: Vec<&Command> = multi.queue.iter().collect();
        let routed = namespace.backend.clone();
        let (namespace, mirror, hold) = match self.mirror_hold(namespace, &commands).await {
            Ok(held) => held,
            Err((_, refused)) => {
                self.unwatch().await;
                self.reply(out, &error(refused));
                return Flow::Continue;
            }
        };
        if self.own.watching() && !Arc::ptr_eq(&routed, &namespace.backend) {
            // Cut over meanwhile (`mirror_hold`): the WATCH is on the old backend, so, as for
            // a WATCH lost, the transaction is aborted and nothing is sent.
            return self.aborted(out).await;
        }
        let replicas = namespace
            .replicas
            .filter(|_| namespace.backend.replicates());
        self.leave_other_backend(&namespace).await;
        let mut own = std::mem::take(&mut self.own);
        let mut link = OwnConn::to(self, Some(&namespace), route);
        let result = own.transaction(&mut link, &multi.queue, replicas).await;
        self.own = own;
        // A WATCH lost meanwhile (checked above, before routing): nil, nothing sent.
        let result = result.map(|frame| frame.unwrap_or(Frame::Null));
        let frame = match result {
            Ok(frame) => {
                if let Some(mirror) = &mirror {
                    mirror.after_transaction(&multi.queue, Ok(&frame), self.exec.proto);
                }
                drop(hold);
                frame
            }
            Err(failure) => {
                let (frame, outcome) = failure_reply(Err(failure), &*namespace);
                if let Some(mirror) = &mirror {
                    mirror.after_transaction(&multi.queue, Err(outcome.ended), self.exec.proto);
                }
                drop(hold);
                m::request(
                    &namespace.name,
                    "EXEC",
                    outcome.ended.label(),
                    started.elapsed(),
                );
                self.reply(out, &frame);
                return Flow::Continue;
            }
        };
        m::request(&namespace.name, "EXEC", "ok", started.elapsed());
        let doubles = namespace.backend.double_style();
        self.write_exec_reply(out, &frame, &multi.queue, doubles);
        Flow::Continue
    }

    /// A transaction aborted as if a watched key had changed: nil, nothing sent.
    async fn aborted(&mut self, out: &mut Output) -> Flow {
        self.unwatch().await;
        encode_reply(
            out,
            &Frame::Null,
            self.exec.proto,
            Nils {
                top: true,
                nested: None,
            },
            DoubleStyle::default(),
        );
        Flow::Continue
    }

    /// EXEC's reply: each element encoded as its own command's reply would be.
    fn write_exec_reply(
        &self,
        out: &mut Output,
        frame: &Frame,
        queue: &[Command],
        doubles: DoubleStyle,
    ) {
        match frame {
            // Each element is its own command's reply, nils and all.
            Frame::Array { data, .. } if data.len() == queue.len() => {
                let _ = write!(ErrSink(out), "*{}\r\n", data.len());
                for (item, command) in data.iter().zip(queue) {
                    self.encode_for(out, item, command, doubles);
                }
            }
            // A nil EXEC (a WATCHed key changed) is a null array.
            _ => encode_reply(
                out,
                frame,
                self.exec.proto,
                Nils {
                    top: true,
                    nested: None,
                },
                doubles,
            ),
        }
    }
}

/// The namespace of a transaction's commands and their keys. A publish goes where its channel
/// routes, not by its keys (SPUBLISH's channel is one): every channel and every key must fall
/// in one namespace.
fn route<'q>(
    router: &crate::namespace::Router,
    queue: &'q [Command],
) -> (
    Vec<&'q [u8]>,
    Result<Arc<crate::namespace::Namespace>, crate::namespace::RouteError>,
) {
    let keys: Vec<&[u8]> = queue
        .iter()
        .filter(|c| c.channel().is_none())
        .flat_map(|c| c.keys())
        .map(|k| k.as_ref())
        .collect();
    let channels: Vec<&Arc<crate::namespace::Namespace>> = queue
        .iter()
        .filter_map(|c| c.channel())
        .map(|c| router.namespace_of_channel(c))
        .collect();
    let routed = match (channels.first(), keys.is_empty()) {
        (Some(ns), true) => Ok(Arc::clone(ns)),
        _ => router.route(keys.iter().copied()).map(Arc::clone),
    };
    let routed = routed.and_then(|ns| match channels.iter().find(|c| c.name != ns.name) {
        Some(other) => Err(crate::namespace::RouteError::CrossNamespace {
            first: ns.name.clone(),
            second: other.name.clone(),
        }),
        None => Ok(ns),
    });
    (keys, routed)
}

#[cfg(test)]
mod tests {
    use super::{in_multi, InMulti};
    use crate::command::table::Local;

    #[test]
    fn what_a_transaction_may_hold() {
        use InMulti::*;
        let cases = [
            (None, false, Queue),
            (None, true, Refuse),
            (Some(Local::Ping), false, Queue),
            (Some(Local::Echo), false, Queue),
            (Some(Local::Unwatch), false, Queue),
            (Some(Local::Exec), false, Run),
            (Some(Local::Discard), false, Run),
            (Some(Local::Multi), false, Run),
            (Some(Local::Watch), false, Run),
            (Some(Local::Quit), false, Run),
            (Some(Local::Reset), false, Run),
            (Some(Local::Select), false, Refuse),
            (Some(Local::Auth), false, Refuse),
            (Some(Local::Hello), false, Refuse),
            (Some(Local::Client), false, Refuse),
            (Some(Local::Info), false, Refuse),
            (Some(Local::Command), false, Refuse),
            (Some(Local::ClusterOnly), false, Refuse),
            (Some(Local::Subscribe), false, Refuse),
            (Some(Local::Pubsub), false, Refuse),
            (Some(Local::Monitor), false, Refuse),
            (Some(Local::Acl), false, Refuse),
        ];
        for (local, every_backend, want) in cases {
            assert_eq!(
                in_multi(local, every_backend),
                want,
                "{local:?} {every_backend}"
            );
        }
    }
}
