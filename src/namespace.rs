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
    /// Its requests in flight and bytes, counted without a registry lookup.
    pub series: &'static crate::metrics::NamespaceSeries,
    /// Its place in the configuration's `[[namespaces]]`: what its generation keeps beside
    /// it is found by it (`mirror::Mirrors`).
    pub index: usize,
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
    /// Pub/Sub: (channel prefix, index into `namespaces`), longest prefix first.
    channels: Vec<(Vec<u8>, usize)>,
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
        let mut channels = Vec::new();
        for (index, ns) in config.namespaces.iter().enumerate() {
            let namespace = Self::namespace_on(config, backends, index, &ns.backend)?;
            namespaces.push(Arc::new(namespace));
            if ns.prefixes.is_empty() {
                catch_all = Some(index);
            }
            for prefix in &ns.prefixes {
                prefixes.push((prefix.as_bytes().to_vec(), index));
            }
            for prefix in &ns.channels {
                channels.push((prefix.as_bytes().to_vec(), index));
            }
        }
        prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        channels.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        let catch_all = catch_all.ok_or_else(|| BuildError("no catch-all namespace".into()))?;
        Ok(Router {
            namespaces,
            prefixes,
            catch_all,
            channels,
        })
    }

    /// The `index`th namespace of `config` on backend `on`: its own, or its mirror's.
    ///
    /// # Errors
    /// [`BuildError`] when the backend or the policy is missing.
    pub fn namespace_on(
        config: &Config,
        backends: &Backends,
        index: usize,
        on: &str,
    ) -> Result<Namespace, BuildError> {
        let ns = config
            .namespaces
            .get(index)
            .ok_or_else(|| BuildError(format!("no namespace {index}")))?;
        let policy = ns.effective(&config.defaults);
        let backend = backends
            .get(on)
            .ok_or_else(|| BuildError(format!("no backend `{on}`")))?
            .clone();
        let backoff = Backoff::new(&policy.retry)
            .map_err(|e| BuildError(format!("namespaces[{index}].retry: {e}")))?;
        Ok(Namespace {
            name: ns.name.clone(),
            backend,
            policy: Policy::new(backoff),
            acquire_timeout: policy.acquire_timeout,
            reply_mode: policy.reply_mode,
            replicas: policy.replicas,
            series: crate::metrics::namespace_series(&ns.name),
            index,
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

    /// The namespace whose backend carries Pub/Sub `channel`: its longest matching
    /// `channels` prefix, else the catch-all.
    pub fn namespace_of_channel(&self, channel: &[u8]) -> &Arc<Namespace> {
        &self.namespaces[self.channel_index(channel)]
    }

    fn channel_index(&self, channel: &[u8]) -> usize {
        self.channels
            .iter()
            .find(|(prefix, _)| channel.starts_with(prefix))
            .map_or(self.catch_all, |(_, index)| *index)
    }

    /// The namespaces a channel matching `pattern` (a Redis glob) may fall in, each once, in
    /// configuration order: see [`pattern_reaches`].
    pub fn namespaces_of_pattern(&self, pattern: &[u8]) -> Vec<&Arc<Namespace>> {
        let prefixes: Vec<(&[u8], usize)> = self
            .channels
            .iter()
            .map(|(prefix, index)| (prefix.as_slice(), *index))
            .collect();
        pattern_reaches(pattern, &prefixes, self.catch_all)
            .into_iter()
            .map(|index| &self.namespaces[index])
            .collect()
    }
}

/// The literal start of a Redis glob: everything before its first `*`, `?`, `[` or `\`.
pub fn literal_head(pattern: &[u8]) -> &[u8] {
    let end = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..end]
}

/// Which namespaces (indices, sorted, each once) a channel matching `pattern` may route to,
/// given the channel prefixes and the catch-all. A channel matching the pattern begins with
/// its literal head `h`, so it routes to the longest prefix that `h` begins with (the
/// catch-all when none does: a shorter one is shadowed by it), or to a longer prefix that
/// begins with `h` (unless the pattern is all literal: one channel, routed by `h` alone). A
/// pattern without a literal head (`*`) reaches every namespace with channels and the
/// catch-all. It may name a namespace no matching channel reaches (`news.s*` and a prefix
/// `news.x`): subscribing there too delivers nothing extra.
pub fn pattern_reaches(
    pattern: &[u8],
    prefixes: &[(&[u8], usize)],
    catch_all: usize,
) -> Vec<usize> {
    let head = literal_head(pattern);
    let whole = head.len() == pattern.len();
    let longest = prefixes
        .iter()
        .filter(|(prefix, _)| head.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(catch_all, |(_, index)| *index);
    let mut reached = vec![longest];
    if !whole {
        reached.extend(
            prefixes
                .iter()
                .filter(|(prefix, _)| prefix.starts_with(head))
                .map(|(_, index)| *index),
        );
    }
    reached.sort_unstable();
    reached.dedup();
    reached
}

#[cfg(test)]
mod tests {
    use super::pattern_reaches;

    #[test]
    fn a_pattern_reaches_every_namespace_its_channels_may_route_to() {
        // Namespaces: 0 catch-all, 1 `news.`, 2 `news.sport.`, 3 `jobs.`.
        let prefixes: [(&[u8], usize); 3] = [(b"news.sport.", 2), (b"news.", 1), (b"jobs.", 3)];
        let cases: [(&[u8], &[usize]); 9] = [
            (b"*", &[0, 1, 2, 3]),
            (b"news.*", &[1, 2]),
            (b"news.sport.*", &[2]),
            (b"news.s*", &[1, 2]),
            (b"ne*", &[0, 1, 2]),
            (b"jobs.[ab]", &[3]),
            (b"other.*", &[0]),
            (b"news.sport.x", &[2]),
            (b"plain", &[0]),
        ];
        for (pattern, want) in cases {
            assert_eq!(
                pattern_reaches(pattern, &prefixes, 0),
                want,
                "{}",
                String::from_utf8_lossy(pattern)
            );
        }
    }
}
