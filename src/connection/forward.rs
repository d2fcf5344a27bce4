//! A command holdfast does not answer itself, on its way to a backend: the per-command key
//! limit, routing to a namespace, `FLUSHDB`/`FLUSHALL`/`SCRIPT` on every backend the client
//! may reach, and the executor's call with its metrics.

use super::{array, error, number, simple, ClientConn};
use crate::backend::{Backend, DoubleStyle, Reply};
use crate::command::table::{Idempotence, Reach};
use crate::command::Command;
use crate::metrics as m;
use crate::namespace::Namespace;
use quanta::Instant;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::Arc;

impl ClientConn {
    /// Sends a command to its namespace's backend through the retry loop.
    pub(super) async fn forward(
        &mut self,
        command: &Command,
        started: Instant,
    ) -> (Reply, DoubleStyle) {
        if let Some((namespace, _)) = &self.ahead {
            // Sent ahead: checked and routed already.
            let namespace = namespace.clone();
            return self.forward_to(namespace, command, started).await;
        }
        // Walked twice rather than collected: no allocation per request.
        let key_count = command.keys().count();
        let max_keys = self.state.config.server.max_keys_per_command;
        if key_count > max_keys {
            m::limit("max_keys_per_command");
            m::request(
                self.catch_all(),
                command.label(),
                "refused",
                started.elapsed(),
            );
            let text = format!(
                "ERR holdfast: {key_count} keys in one command; the limit is {max_keys} (server.max_keys_per_command)"
            );
            return (error(text).into(), DoubleStyle::default());
        }
        if command.spec.every_backend {
            return self.every_backend(command, started).await;
        }
        let namespace = match self.route(command) {
            Ok(ns) => ns.clone(),
            Err(e) => {
                m::request(
                    self.catch_all(),
                    command.label(),
                    "refused",
                    started.elapsed(),
                );
                return (error(e.to_string()).into(), DoubleStyle::default());
            }
        };
        self.forward_to(namespace, command, started).await
    }

    /// The catch-all namespace's name: where a request refused before it was routed is
    /// counted (keyless commands belong there too).
    pub(super) fn catch_all(&self) -> &str {
        &self.state.router.catch_all().name
    }

    /// The namespace a command goes to: a publish's channel's (`channels`), whatever its keys
    /// say; any other's keys'.
    pub(super) fn route(
        &self,
        command: &Command,
    ) -> Result<&Arc<Namespace>, crate::namespace::RouteError> {
        match command.channel() {
            Some(channel) => Ok(self.state.router.namespace_of_channel(channel)),
            None => self.state.router.route(command.keys().map(|k| k.as_ref())),
        }
    }

    /// FLUSHDB, FLUSHALL and SCRIPT: sent once to the backend of each namespace this client
    /// may reach. A backend that also holds a namespace the client may not reach is not its
    /// to empty: NOPERM, and nothing is sent anywhere. `SCRIPT LOAD` and `SCRIPT EXISTS` empty
    /// nothing. SQL backends keep their scripts in the database (`model/scripting.rs`).
    async fn every_backend(&mut self, command: &Command, started: Instant) -> (Reply, DoubleStyle) {
        let harmless = matches!(
            command.spec.name,
            "SCRIPT|LOAD" | "SCRIPT|EXISTS" | "FUNCTION|LIST" | "FUNCTION|STATS" | "FUNCTION|DUMP"
        );
        let reachable = self.reachable();
        let reach = |ns: &Namespace| {
            reachable
                .as_ref()
                .is_none_or(|names| names.contains(&ns.name))
        };
        let all: Vec<Arc<Namespace>> = self.state.router.namespaces().to_vec();
        let mut targets: Vec<Arc<Namespace>> = Vec::new();
        for ns in all.iter().filter(|ns| reach(ns)) {
            let shared_with_others = all
                .iter()
                .any(|other| Arc::ptr_eq(&other.backend, &ns.backend) && !reach(other));
            if shared_with_others && !harmless {
                m::request(
                    self.catch_all(),
                    command.label(),
                    "refused",
                    started.elapsed(),
                );
                let text = super::auth::cannot_run(&command.spec.name.to_ascii_lowercase());
                return (error(text).into(), DoubleStyle::default());
            }
            if !targets.iter().any(|t| Arc::ptr_eq(&t.backend, &ns.backend)) {
                targets.push(ns.clone());
            }
        }
        let mut first: Option<(Reply, DoubleStyle)> = None;
        for ns in targets {
            let (reply, doubles) = self.forward_to(ns, command, started).await;
            if reply.is_error() {
                return (reply, doubles);
            }
            first = Some(match first {
                // A script exists only where every backend has it.
                Some((seen, d)) if command.spec.name == "SCRIPT|EXISTS" => {
                    (both_exist(seen, reply), d)
                }
                Some(seen) => seen,
                None => (reply, doubles),
            });
        }
        match command.spec.name {
            "SCRIPT|LOAD" => {
                if let Some(script) = command.args.get(2) {
                    self.state.backends.scripts().remember(script);
                }
            }
            "SCRIPT|FLUSH" => self.state.backends.scripts().forget_all(),
            "FUNCTION|LOAD" => {
                if let Some(code) = command.args.last() {
                    self.state.backends.scripts().remember_library(code);
                }
            }
            "FUNCTION|DELETE" => self
                .state
                .backends
                .scripts()
                .forget_libraries(command.args.get(2).map(|n| n.as_ref())),
            "FUNCTION|FLUSH" => self.state.backends.scripts().forget_libraries(None),
            // `FLUSH` policy: every library gone but the payload's, which holdfast cannot
            // read, so none is loaded again on its behalf (it would bring back a deleted one).
            "FUNCTION|RESTORE"
                if command
                    .args
                    .get(3)
                    .is_some_and(|p| p.eq_ignore_ascii_case(b"FLUSH")) =>
            {
                self.state.backends.scripts().forget_libraries(None)
            }
            _ => {}
        }
        first.unwrap_or_else(|| (simple("OK").into(), DoubleStyle::default()))
    }

    /// What a script this client runs on `namespace`'s SQL backend may call.
    fn script_gate(&self, namespace: &Namespace) -> Arc<super::scripted::ScriptGate> {
        let limit = self
            .state
            .config
            .namespaces
            .iter()
            .find(|c| c.name == namespace.name)
            .and_then(|c| c.script_time_limit)
            .unwrap_or(crate::config::SCRIPT_TIME_LIMIT);
        Arc::new(super::scripted::ScriptGate {
            state: self.state.clone(),
            reach: self.reachable(),
            backend: namespace.backend.clone(),
            limit,
        })
    }

    /// The mirror of `namespace`, once a namespace just cut over may run: its requests wait
    /// (within its retry schedule) until the mirror it was cut over from has every write
    /// queued for it. Err: the refusal's text.
    pub(super) async fn mirror_gate(
        &self,
        namespace: &Namespace,
    ) -> Result<Option<Arc<crate::mirror::Mirror>>, String> {
        let ends = self.state.mirrors.of(namespace);
        if let Some(from) = &ends.cut_over_from {
            let limit = namespace.policy.backoff.total_before_jitter();
            if let Err(why) = from.ready(limit).await {
                return Err(not_ready(namespace, why));
            }
        }
        Ok(ends.mirror.clone())
    }

    /// `namespace`'s mirror once it may run (`mirror_gate`), and what `commands` hold of it
    /// until handed to it. A request that took its generation before a reload cut the
    /// namespace over, and finds the old mirror closed, runs as the current generation's
    /// request of the namespace of that name (`Mirror::ticket`). Err: the namespace and the
    /// refusal's text.
    pub(super) async fn mirror_hold(
        &mut self,
        mut namespace: Arc<Namespace>,
        commands: &[&Command],
    ) -> Result<MirrorHeld, (Arc<Namespace>, String)> {
        // Each pass is a later generation; a namespace is cut over once per reload.
        for _ in 0..4 {
            let mirror = match self.mirror_gate(&namespace).await {
                Ok(Some(mirror)) => mirror,
                Ok(None) => return Ok((namespace, None, None)),
                Err(refused) => return Err((namespace, refused)),
            };
            if let Some(hold) = mirror.hold(commands).await {
                return Ok((namespace, Some(mirror), Some(hold)));
            }
            self.state = self.shared.current();
            let name = namespace.name.clone();
            match self
                .state
                .router
                .namespaces()
                .iter()
                .find(|n| n.name == name)
            {
                Some(current) => namespace = current.clone(),
                None => break,
            }
        }
        let text = format!(
            "UNAVAILABLE not applied: namespace '{}' was reconfigured while this request was on its way; send it again",
            namespace.name
        );
        Err((namespace, text))
    }

    /// Sends a command to `namespace`'s backend: a connection-bound one on this client's own
    /// connection, any other through the executor.
    pub(super) async fn forward_to(
        &mut self,
        namespace: Arc<Namespace>,
        command: &Command,
        started: Instant,
    ) -> (Reply, DoubleStyle) {
        // Until the mirror has what this request does, it is not settled (a cut-over waits),
        // and a copy of its keys waits for it.
        // A command that may block takes its keys once answered (`Mirror::hold`).
        let bound = command.class == Idempotence::ConnectionBound;
        let held: &[&Command] = if bound { &[] } else { &[command] };
        let (namespace, mirror, hold) = match self.mirror_hold(namespace, held).await {
            Ok(held) => held,
            Err((namespace, refused)) => {
                m::request(
                    &namespace.name,
                    command.label(),
                    "unavailable",
                    started.elapsed(),
                );
                return (error(refused).into(), namespace.backend.double_style());
            }
        };
        let doubles = namespace.backend.double_style();
        if bound {
            let (frame, ended) = self.bound(&namespace, command, started).await;
            let reply = Reply::from(frame);
            if let Some(mirror) = &mirror {
                let _keys = mirror.answered(command).await;
                mirror.after(command, &reply, ended, self.exec.proto);
            }
            drop(hold);
            return (reply, doubles);
        }
        let sent = self.ahead.take().map(|(_, ahead)| ahead);
        // A SQL backend runs the script itself: what it may call is decided here.
        let runs_lua = command.spec.reach == Reach::Scripts
            || matches!(command.spec.name, "FUNCTION|LOAD" | "FUNCTION|RESTORE");
        self.exec.script = (runs_lua && matches!(*namespace.backend, Backend::Sql(_)))
            .then(|| self.script_gate(&namespace) as Arc<dyn crate::backend::lua::Gate>);
        self.routed = Some(namespace.series);
        let in_flight = namespace.series.in_flight();
        let (reply, outcome) = self
            .exec
            .execute(&self.shared.budget, &namespace, command, sent)
            .await;
        drop(in_flight);
        if let Some(mirror) = &mirror {
            let _keys = mirror.answered(command).await;
            mirror.after(command, &reply, outcome.ended, self.exec.proto);
        }
        drop(hold);
        m::request(
            &namespace.name,
            command.label(),
            outcome.ended.label(),
            started.elapsed(),
        );
        (reply, doubles)
    }
}

/// A request's namespace (of the generation it runs under), its mirror, and what it holds
/// of that mirror.
pub(super) type MirrorHeld = (
    Arc<Namespace>,
    Option<Arc<crate::mirror::Mirror>>,
    Option<crate::mirror::MirrorHold>,
);

/// Why a request of a namespace just cut over is not run on its new backend.
pub(super) fn not_ready(namespace: &Namespace, why: crate::mirror::NotReady) -> String {
    let (name, backend) = (&namespace.name, namespace.backend.name());
    match why {
        crate::mirror::NotReady::Waiting => format!(
            "UNAVAILABLE not applied: namespace '{name}' was cut over to backend '{backend}', which is still applying the writes queued for it"
        ),
        crate::mirror::NotReady::Behind => format!(
            "UNAVAILABLE not applied: namespace '{name}' was cut over to backend '{backend}', which missed writes it cannot copy from the old backend; reload the configuration before the cut-over, then run `holdfast copy --namespace {name}`"
        ),
    }
}

/// The bytes `command` came in: as sent when it was a plain multibulk, else (an inline
/// command) the multibulk of its arguments.
pub(super) fn wire_len(command: &Command) -> usize {
    if let Some(raw) = &command.raw {
        return raw.len();
    }
    let header = |n: usize| 3 + decimal_digits(n);
    header(command.args.len())
        + command
            .args
            .iter()
            .map(|arg| header(arg.len()) + arg.len() + 2)
            .sum::<usize>()
}

/// How many decimal digits `n` has.
pub(super) fn decimal_digits(n: usize) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Two `SCRIPT EXISTS` answers as one: 1 where both say 1.
fn both_exist(a: Reply, b: Reply) -> Reply {
    match (a.into_frame(), b.into_frame()) {
        (Frame::Array { data: a, .. }, Frame::Array { data: b, .. }) if a.len() == b.len() => {
            array(
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| match (x, y) {
                        (Frame::Number { data: 1, .. }, Frame::Number { data: 1, .. }) => number(1),
                        _ => number(0),
                    })
                    .collect(),
            )
            .into()
        }
        (a, _) => a.into(),
    }
}
