//! Namespaces: a key's longest matching prefix names its namespace, which names a backend and
//! the retry policy its commands run under. A multi-key command whose keys fall in different
//! namespaces is refused before anything is sent.

use crate::backend::{Backend, Backends};
use crate::config::{Config, ReplyMode};
use crate::retry::backoff::Backoff;
use crate::retry::policy::Policy;
use std::sync::Arc;
use std::time::Duration;

/// One namespace, ready to serve. `B` is what its commands are dispatched to: holdfast's
/// [`Backend`], or a simulated one in tests.
pub struct Namespace<B = Backend> {
    /// Its configured name (a metric label).
    pub name: String,
    /// Where its commands go.
    pub backend: Arc<B>,
    /// Its retry policy.
    pub policy: Policy,
    /// Per-attempt wait for a backend connection.
    pub acquire_timeout: Duration,
    /// How IdempotentEffect and NonIdempotent replies are settled.
    pub reply_mode: ReplyMode,
    /// Replicas a write must reach before it is acknowledged (Redis `WAIT`).
    pub replicas: Option<(u32, Duration)>,
}

/// A request that cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Keys of one command fall in two namespaces.
    #[error("CROSSNAMESPACE keys of one command fall in namespaces '{first}' and '{second}'; nothing was applied")]
    CrossNamespace {
        /// The first key's namespace.
        first: String,
        /// The first other namespace found.
        second: String,
    },
}

/// Prefix → namespace.
pub struct Router {
    /// Every namespace, in configuration order.
    namespaces: Vec<Arc<Namespace>>,
    /// (prefix, index into `namespaces`), longest prefix first.
    prefixes: Vec<(Vec<u8>, usize)>,
    /// The namespace without prefixes.
    catch_all: usize,
}

/// A namespace's configuration referred to something that was not built.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(String);

impl Router {
    /// Builds the namespaces of a validated `config` over `backends`.
    ///
    /// # Errors
    /// [`BuildError`] when a backend or policy is missing (validation prevents it).
    pub fn build(config: &Config, backends: &Backends) -> Result<Router, BuildError> {
        let mut namespaces = Vec::new();
        let mut prefixes = Vec::new();
        let mut catch_all = None;
        for (index, ns) in config.namespaces.iter().enumerate() {
            let policy = ns.effective(&config.defaults);
            let backend = backends
                .get(&ns.backend)
                .ok_or_else(|| BuildError(format!("no backend `{}`", ns.backend)))?
                .clone();
            let backoff = Backoff::new(&policy.retry)
                .map_err(|e| BuildError(format!("namespaces[{index}].retry: {e}")))?;
            namespaces.push(Arc::new(Namespace {
                name: ns.name.clone(),
                backend,
                policy: Policy::new(backoff),
                acquire_timeout: policy.acquire_timeout,
                reply_mode: policy.reply_mode,
                replicas: policy.replicas,
            }));
            if ns.prefixes.is_empty() {
                catch_all = Some(index);
            }
            for prefix in &ns.prefixes {
                prefixes.push((prefix.as_bytes().to_vec(), index));
            }
        }
        prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        let catch_all = catch_all.ok_or_else(|| BuildError("no catch-all namespace".into()))?;
        Ok(Router {
            namespaces,
            prefixes,
            catch_all,
        })
    }

    fn index_of(&self, key: &[u8]) -> usize {
        self.prefixes
            .iter()
            .find(|(prefix, _)| key.starts_with(prefix))
            .map(|(_, index)| *index)
            .unwrap_or(self.catch_all)
    }

    /// The namespace of `key`.
    pub fn namespace_of(&self, key: &[u8]) -> &Arc<Namespace> {
        &self.namespaces[self.index_of(key)]
    }

    /// The namespaces a key beginning with `head` may fall in: `head`'s own, and each whose
    /// prefix extends `head` (`a:secret:` extends `a:`). A key pattern's literal head names
    /// them all.
    pub fn namespaces_under<'a>(
        &'a self,
        head: &'a [u8],
    ) -> impl Iterator<Item = &'a Arc<Namespace>> + 'a {
        let longer = self
            .prefixes
            .iter()
            .filter(move |(prefix, _)| prefix.len() > head.len() && prefix.starts_with(head))
            .map(|(_, index)| &self.namespaces[*index]);
        std::iter::once(self.namespace_of(head)).chain(longer)
    }

    /// The catch-all namespace, which takes keyless commands.
    pub fn catch_all(&self) -> &Arc<Namespace> {
        &self.namespaces[self.catch_all]
    }

    /// The one namespace of all `keys`, or the catch-all when there are none.
    ///
    /// # Errors
    /// [`RouteError::CrossNamespace`] when they fall in two.
    pub fn route<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<&Arc<Namespace>, RouteError> {
        let mut chosen: Option<usize> = None;
        for key in keys {
            let index = self.index_of(key);
            match chosen {
                None => chosen = Some(index),
                Some(first) if first != index => {
                    return Err(RouteError::CrossNamespace {
                        first: self.namespaces[first].name.clone(),
                        second: self.namespaces[index].name.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(&self.namespaces[chosen.unwrap_or(self.catch_all)])
    }

    /// Every namespace.
    pub fn namespaces(&self) -> &[Arc<Namespace>] {
        &self.namespaces
    }
}
