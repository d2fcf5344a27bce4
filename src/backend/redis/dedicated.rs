//! A client's own connection ([`DedicatedRedis`]): its blocking commands and transactions,
//! never re-dialled; and the [`Probe`] that asks, on a shared connection, whether the
//! backend still answers while a blocking command waits.

use super::dial::Addr;
use super::pool::{ensure_connected, Live, PoolSlot};
use super::{BackendError, Proto, RedisBackend, Reply, Request};
use crate::error::{LinkError, LinkErrorKind};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How often a client's own connection blocked on the backend has it probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

impl RedisBackend {
    /// A connection of its own, connected, for connection-bound commands.
    ///
    /// # Errors
    /// [`BackendError::Connect`] or [`BackendError::AcquireTimeout`].
    pub async fn dedicated(
        &self,
        proto: Proto,
        acquire_timeout: Duration,
    ) -> Result<DedicatedRedis, BackendError> {
        // Never re-dialled once it breaks: it carries WATCH or blocking state, which the
        // client must learn is gone, not have silently replaced.
        // Dedicated connections are not pooled: they are not counted in the pool metrics.
        // They follow no redirection: a command inside MULTI redirected to another node
        // would run there at once, outside the transaction.
        let slot = PoolSlot::new(
            self.dialer(proto),
            self.doubles.clone(),
            "".into(),
            (0, self.tokens.clone()),
            self.follow(),
            self.warm.clone(),
        );
        let opened = match tokio::time::timeout(acquire_timeout, slot.open()).await {
            Ok(opened) => opened,
            Err(_) => {
                return Err(BackendError::AcquireTimeout {
                    waited: acquire_timeout,
                })
            }
        };
        opened.map_err(|source| BackendError::Connect { source })?;
        let live = slot.live().ok_or_else(|| BackendError::Connect {
            source: LinkError::new(
                LinkErrorKind::Io,
                "the connection closed as soon as it opened",
            ),
        })?;
        Ok(DedicatedRedis {
            live,
            response_timeout: self.response_timeout,
            probe: self.probe.clone(),
        })
    }
}

/// A connection owned by one client connection (WATCH/MULTI/EXEC, blocking commands).
pub struct DedicatedRedis {
    /// The connection.
    live: Arc<Live>,
    /// Reply timeout for non-blocking commands.
    response_timeout: Duration,
    /// Asks whether the backend still answers while a blocking command waits here.
    probe: Arc<Probe>,
}

impl DedicatedRedis {
    /// Sends one request; a broken connection is not re-dialled. A blocking command waits as
    /// long as it asked, plus `response_timeout`; while it waits, the backend is probed every
    /// [`PROBE_EVERY`], and one that does not answer within `response_timeout` (frozen,
    /// blackholed, gone) ends the wait: the connection is reset, so whatever the command
    /// takes once the backend wakes is never handed to anyone, and the command fails as sent.
    ///
    /// # Errors
    /// [`BackendError`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Reply, BackendError> {
        if !self.live.is_up() {
            return Err(BackendError::Connect {
                source: LinkError::new(LinkErrorKind::Io, "the dedicated connection is closed"),
            });
        }
        let sent = self.live.send(request, self.response_timeout);
        if !request.blocking.blocks() {
            return sent.await;
        }
        tokio::pin!(sent);
        let server = self.live.server_of(request.route);
        let watched = self.probe.until_silent(request.route, server);
        tokio::select! {
            biased;
            result = &mut sent => result,
            () = watched => {
                self.live.retire_because(
                    "the backend stopped answering while the command waited for it",
                );
                // Closing its link fails the command at once.
                sent.await
            }
        }
    }

    /// Closes the connection. A `QUIT` would wait behind a command still blocking there
    /// (`BLPOP … 0` of a client that went away), which would then take the next element for
    /// nobody: the connection is reset instead, so the server forgets the blocked command at
    /// once.
    pub async fn close(self) {
        self.live.retire();
    }
}

/// Whether a backend still answers, for its clients blocked on their own connections: a
/// `PING` on a shared connection, one at a time per server. An answer is good for
/// [`PROBE_EVERY`] to every client that asks; a probe that ends while others wait for it
/// answers them all, so a hundred clients blocked on a frozen server hear of it together,
/// not a probe's wait apart.
#[derive(Default)]
pub(super) struct Probe {
    /// The shared connection it is sent on (the first RESP2 one).
    slot: Option<Arc<PoolSlot>>,
    /// How long a probe may wait for its answer.
    response_timeout: Duration,
    /// Each server's (None: the only one) last probe: when it ended, and whether it was
    /// answered.
    last: std::sync::Mutex<HashMap<Option<Addr>, (Instant, bool)>>,
    /// One probe at a time: the others wait for its answer.
    asking: Mutex<()>,
}

impl Probe {
    pub(super) fn new(slot: Option<Arc<PoolSlot>>, response_timeout: Duration) -> Probe {
        Probe {
            slot,
            response_timeout,
            ..Probe::default()
        }
    }

    /// Resolves once the server of a request routed by `route` (`server` on a Cluster)
    /// stops answering: no connection, or no answer within `response_timeout`.
    async fn until_silent(&self, route: Option<&[u8]>, server: Option<Addr>) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            if !self.answers(route, &server).await {
                return;
            }
        }
    }

    fn last(&self, server: &Option<Addr>) -> Option<(Instant, bool)> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(server).copied()
    }

    async fn answers(&self, route: Option<&[u8]>, server: &Option<Addr>) -> bool {
        let asked = Instant::now();
        if let Some((at, true)) = self.last(server) {
            if at.elapsed() < PROBE_EVERY {
                return true;
            }
        }
        let _asking = self.asking.lock().await;
        // A probe that ended while this one waited answers it.
        if let Some((at, answered)) = self.last(server) {
            if at >= asked {
                return answered;
            }
        }
        let answered = match &self.slot {
            Some(slot) => {
                let args = [Bytes::from_static(b"PING")];
                let ping = Request {
                    route,
                    ..Request::new(&args, Proto::Resp2, 0)
                };
                match ensure_connected(slot, self.response_timeout).await {
                    Ok(live) => live.send(&ping, self.response_timeout).await.is_ok(),
                    Err(_) => false,
                }
            }
            None => false,
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.insert(server.clone(), (Instant::now(), answered));
        answered
    }
}
