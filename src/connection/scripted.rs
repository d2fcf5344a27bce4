//! What a script run by a SQL backend may call (`backend::lua::Gate`): a command of the
//! table with its arity, on keys the client may reach that route to the script's own
//! backend. Redis's words for each refusal, as its scripting gives them.

use crate::backend::lua::Gate;
use crate::backend::Backend;
use crate::command::{Command, CommandError};
use crate::shared::State;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

pub(super) struct ScriptGate {
    pub(super) state: Arc<State>,
    /// The namespaces the client may reach; None: all.
    pub(super) reach: Option<Vec<String>>,
    /// The backend the script runs on.
    pub(super) backend: Arc<Backend>,
    pub(super) limit: Duration,
}

impl Gate for ScriptGate {
    fn check(&self, args: &[Bytes]) -> Option<String> {
        let command = match Command::parse(args.to_vec()) {
            Ok(command) => command,
            Err(CommandError::Arity { .. }) => {
                return Some("ERR Wrong number of args calling Redis command from script".into())
            }
            Err(_) => return Some("ERR Unknown Redis command called from script".into()),
        };
        let outside = command.keys().any(|key| {
            let ns = self.state.router.namespace_of(key);
            let reached = self
                .reach
                .as_ref()
                .is_none_or(|names| names.contains(&ns.name));
            !reached || !Arc::ptr_eq(&ns.backend, &self.backend)
        });
        outside.then(|| {
            "ERR The user executing the script can't access at least one of the keys mentioned in the command"
                .to_string()
        })
    }

    fn limit(&self) -> Duration {
        self.limit
    }
}
