//! Connections dialled ahead for clients' own connections (a blocking command, `WATCH`).
//!
//! A client's first blocking command that waited for a dial would let a command holdfast
//! received after it from another client (an `LPUSH` on a shared link) reach Redis first: the
//! blocked clients would see the element in another order than the one holdfast received
//! their commands in. With a connection ready, a client's own connection is written to as soon as
//! its command is read, so commands reach Redis in the order holdfast received them, as far
//! as one process can see (two clients whose commands arrive in the same instant are read in
//! an order the scheduler picks).
//!
//! A keeper task per backend holds `warm_connections` links ready for each protocol and each
//! server a client's own connection may go to: the standalone server; the primary the
//! sentinels name now (a link of an earlier generation is never handed out); each primary
//! of a Cluster. A link taken is replaced at once, in the background; the keeper also drops
//! links the server closed while they waited.

use super::dial::{Addr, Server, Target};
use super::link::{Link, Signals};
use super::{Proto, Servers};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How often the keeper looks again without being woken (a dial that failed, a link the
/// server closed, a map or primary that changed).
const KEEP_EVERY: Duration = Duration::from_secs(1);

/// One link dialled ahead.
struct Ready {
    link: Link,
    /// Its task: it ends when the connection does.
    task: JoinHandle<()>,
    server: Server,
    /// Under Sentinel, the generation of the primary it was dialled for.
    generation: Option<u64>,
}

/// What a dedicated connection takes in place of a dial: the link, its task and what the
/// server said of itself.
pub type Taken = (Link, JoinHandle<()>, Server);

/// A backend's links dialled ahead.
pub struct Warm {
    /// The backend's name, for the metric.
    backend: String,
    /// Links kept ready per protocol and server.
    want: usize,
    ready: Mutex<HashMap<(Proto, Addr), Vec<Ready>>>,
    /// Wakes the keeper: a link was taken.
    taken: Arc<Notify>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Warm {
    /// Starts keeping `want` links ready per protocol for `servers`, dialled as `target`
    /// (at each server's address); None when `want` is 0.
    pub fn start(
        backend: &str,
        target: Target,
        servers: Servers,
        want: usize,
    ) -> Option<Arc<Warm>> {
        if want == 0 {
            return None;
        }
        let warm = Arc::new(Warm {
            backend: backend.to_string(),
            want,
            ready: Mutex::new(HashMap::new()),
            taken: Arc::new(Notify::new()),
            keeper: Mutex::new(None),
        });
        let task = tokio::spawn(keep(
            Arc::downgrade(&warm),
            warm.taken.clone(),
            backend.to_string(),
            target,
            servers,
        ));
        *warm.lock_keeper() = Some(task);
        Some(warm)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(Proto, Addr), Vec<Ready>>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_keeper(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.keeper.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A link ready for `target` (its protocol and address) and, under Sentinel, of
    /// `generation`; None when none is (the caller dials).
    pub fn take(&self, target: &Target, generation: Option<u64>) -> Option<Taken> {
        let taken = {
            let mut ready = self.lock();
            let links = ready.get_mut(&(target.proto(), target.addr()))?;
            let mut taken = None;
            while let Some(one) = links.pop() {
                if !one.link.is_closed() && one.generation == generation {
                    taken = Some(one);
                    break;
                }
                one.link.close();
            }
            taken
        };
        let one = taken?;
        self.report();
        self.taken.notify_one();
        Some((one.link, one.task, one.server))
    }

    /// Says how many links are ready (`holdfast_warm_connections`).
    fn report(&self) {
        let ready: usize = self.lock().values().map(Vec::len).sum();
        crate::metrics::warm_connections(&self.backend, ready);
    }

    /// Links ready now for `proto` at `addr`.
    fn count(&self, proto: Proto, addr: &Addr) -> usize {
        self.lock().get(&(proto, addr.clone())).map_or(0, |links| {
            links.iter().filter(|r| !r.link.is_closed()).count()
        })
    }

    /// Closes the links that may no longer be handed out: closed by the server, of an earlier
    /// primary, or to a server no longer among `wanted`.
    fn prune(&self, wanted: &[(Addr, Option<u64>)]) {
        let mut ready = self.lock();
        for ((_, addr), links) in ready.iter_mut() {
            let generation = wanted.iter().find(|(a, _)| a == addr).map(|(_, g)| *g);
            links.retain(|one| {
                let keep = !one.link.is_closed() && generation == Some(one.generation);
                if !keep {
                    one.link.close();
                }
                keep
            });
        }
        ready.retain(|_, links| !links.is_empty());
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        if let Some(task) = self.lock_keeper().take() {
            task.abort();
        }
        for (_, links) in self.lock().drain() {
            for one in links {
                one.link.close();
            }
        }
    }
}

/// The keeper: fills every (protocol, server) up to `want`, then waits for a take or
/// [`KEEP_EVERY`]. Ends with its [`Warm`].
async fn keep(
    warm: Weak<Warm>,
    taken: Arc<Notify>,
    backend: String,
    target: Target,
    servers: Servers,
) {
    let checks_role = servers.check_roles();
    loop {
        let wanted = servers.wanted();
        {
            let Some(warm) = warm.upgrade() else {
                return;
            };
            warm.prune(&wanted);
            warm.report();
        }
        'fill: for proto in [Proto::Resp2, Proto::Resp3] {
            for (addr, generation) in &wanted {
                let target = target.at(addr).with_proto(proto);
                loop {
                    match warm.upgrade() {
                        Some(warm) if warm.count(proto, addr) < warm.want => {}
                        Some(_) => break,
                        None => return,
                    }
                    let dialled = Link::connect(&target, Signals::default()).await;
                    let (link, task, server) = match dialled {
                        Ok(dialled) => dialled,
                        Err(e) => {
                            tracing::debug!(backend = %backend, server = ?addr, error = %e, "a warm connection could not be dialled");
                            break 'fill;
                        }
                    };
                    // A demoted primary is no place for a client's writes: the next look
                    // finds the new one.
                    if checks_role && !server.is_primary() {
                        link.close();
                        break 'fill;
                    }
                    let Some(warm) = warm.upgrade() else {
                        link.close();
                        return;
                    };
                    warm.lock()
                        .entry((proto, addr.clone()))
                        .or_default()
                        .push(Ready {
                            link,
                            task,
                            server,
                            generation: *generation,
                        });
                    warm.report();
                }
            }
        }
        tokio::select! {
            () = taken.notified() => {}
            () = tokio::time::sleep(KEEP_EVERY) => {}
        }
    }
}
