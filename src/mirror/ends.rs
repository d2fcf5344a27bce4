//! Which mirrors a configuration generation has: each namespace's own, handed on from the
//! generation before when its configuration and backends stayed, and the mirror a namespace
//! was cut over from, which its requests wait for (`Mirror::ready`).

use super::Mirror;
use crate::backend::Backends;
use crate::config::Config;
use crate::namespace::{Namespace, Router};
use std::sync::Arc;

/// What one namespace of a configuration generation has of mirrors.
#[derive(Default)]
pub struct MirrorEnds {
    /// Where its writes are replayed (`[namespaces.mirror]`).
    pub mirror: Option<Arc<Mirror>>,
    /// The mirror it was cut over from: its requests wait until every write queued there is
    /// applied ([`Mirror::ready`]), so none is answered from a backend that lacks an
    /// acknowledged write.
    pub cut_over_from: Option<Arc<Mirror>>,
}

/// A configuration generation's mirrors, by namespace (`Namespace::index`).
#[derive(Default)]
pub struct Mirrors(Vec<MirrorEnds>);

/// A reload that would cut a namespace over to a mirror that missed writes.
#[derive(Debug, thiserror::Error)]
#[error("namespace `{namespace}` cannot be cut over to `{backend}` yet: its mirror there is behind (it missed writes); run `holdfast copy --namespace {namespace}` first")]
pub struct CutOverRefused {
    /// The namespace.
    pub namespace: String,
    /// The backend it would move to.
    pub backend: String,
}

impl Mirrors {
    /// The mirrors of `config`'s namespaces over `backends` and `router` (built from them).
    /// `previous`, the generation being replaced, hands on each mirror whose configuration
    /// and backends stayed, and the mirror a namespace is cut over from.
    ///
    /// # Errors
    /// [`CutOverRefused`].
    pub fn build(
        config: &Config,
        backends: &Backends,
        router: &Router,
        previous: Option<(&Router, &Mirrors)>,
    ) -> Result<Mirrors, CutOverRefused> {
        let mut all = Vec::with_capacity(config.namespaces.len());
        for (index, (ns, namespace)) in config
            .namespaces
            .iter()
            .zip(router.namespaces())
            .enumerate()
        {
            let before = previous.and_then(|(old_router, old)| {
                let at = old_router
                    .namespaces()
                    .iter()
                    .position(|o| o.name == ns.name)?;
                Some((&old_router.namespaces()[at], old.0.get(at)?))
            });
            let mut ends = MirrorEnds {
                cut_over_from: cut_over(before, &ns.name, &ns.backend)?,
                mirror: None,
            };
            if let Some(wanted) = &ns.mirror {
                let target = backends.get(&wanted.backend);
                let kept = before
                    .and_then(|(_, b)| b.mirror.clone())
                    .filter(|m| {
                        m.is(wanted, &ns.prefixes) && Arc::ptr_eq(&m.primary, &namespace.backend)
                    })
                    .filter(|m| target.is_some_and(|t| Arc::ptr_eq(&m.target, t)));
                ends.mirror = match kept {
                    Some(mirror) => Some(mirror),
                    None => {
                        let on =
                            |name: &str| Router::namespace_on(config, backends, index, name).ok();
                        match (on(&ns.backend), on(&wanted.backend)) {
                            (Some(primary), Some(target)) => {
                                let limit = ns
                                    .script_time_limit
                                    .unwrap_or(crate::config::SCRIPT_TIME_LIMIT);
                                let sides = (primary, target);
                                Some(Mirror::start(
                                    wanted,
                                    &ns.prefixes,
                                    sides,
                                    &config.retry_budget,
                                    limit,
                                ))
                            }
                            // Validation names only backends that exist.
                            _ => None,
                        }
                    }
                };
            }
            all.push(ends);
        }
        Ok(Mirrors(all))
    }

    /// What `namespace` (of this generation) has.
    pub fn of(&self, namespace: &Namespace) -> &MirrorEnds {
        static NONE: MirrorEnds = MirrorEnds {
            mirror: None,
            cut_over_from: None,
        };
        self.0.get(namespace.index).unwrap_or(&NONE)
    }
}

/// The mirror a namespace moving to `backend` is cut over from: the previous generation's
/// namespace of the same name mirrored to it, or was itself still cut over from it.
fn cut_over(
    before: Option<(&Arc<Namespace>, &MirrorEnds)>,
    name: &str,
    backend: &str,
) -> Result<Option<Arc<Mirror>>, CutOverRefused> {
    let Some((namespace, ends)) = before else {
        return Ok(None);
    };
    if namespace.backend.name() == backend {
        return Ok(ends.cut_over_from.clone());
    }
    let Some(mirror) = ends.mirror.as_ref().filter(|m| m.backend == backend) else {
        return Ok(None);
    };
    if mirror.behind() {
        return Err(CutOverRefused {
            namespace: name.to_string(),
            backend: backend.to_string(),
        });
    }
    Ok(Some(mirror.clone()))
}
