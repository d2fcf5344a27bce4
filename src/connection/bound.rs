//! Connection-bound commands (blocking ones, `WATCH`, transactions) on the client's own
//! backend connection: opened on first use, closed when the client moves to another backend,
//! and lent to `exec::own` as an [`OwnLink`].

use super::ClientConn;
use crate::backend::{BackendError, Blocking, Dedicated, Request};
use crate::command::Command;
use crate::exec::failure_reply;
use crate::exec::own::OwnLink;
use crate::metrics as m;
use crate::namespace::Namespace;
use bytes::Bytes;
use quanta::Instant;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl ClientConn {
    /// A connection-bound command: on this client's own backend connection, never retried.
    /// The reply, and how the request ended.
    pub(super) async fn bound(
        &mut self,
        namespace: &Arc<Namespace>,
        command: &Command,
        started: Instant,
    ) -> (Frame, crate::exec::Ended) {
        // Only blocking commands are forwarded as connection-bound (transactions are local).
        let route = first_key(command);
        // Its client is watched while it blocks: one that closes is gone at once, and its
        // own backend connection is closed with it, so the backend stops waiting on its
        // behalf (Redis drops a blocked client that disconnects; a SQL waiter leaves its
        // line). Left waiting, it would take the next element pushed for a client that can
        // no longer receive it.
        self.exec.activity().failed.store(true, Ordering::Relaxed);
        self.routed = Some(namespace.series);
        let in_flight = namespace.series.in_flight();
        let replicas = namespace
            .replicas
            .filter(|_| namespace.backend.replicates());
        self.leave_other_backend(namespace).await;
        // Exact mode: a pop that may take something carries a token where the backend can
        // record what it took with it (`Backend::blocks_exactly`).
        let token = (namespace.reply_mode == crate::config::ReplyMode::Exact
            && command.writes()
            && namespace.backend.blocks_exactly())
        .then(|| crate::exec::new_token(self.id));
        let mut own = std::mem::take(&mut self.own);
        let mut link = OwnConn::to(self, Some(namespace), route);
        link.token = token.as_deref().map(str::as_bytes);
        let result = own.alone(&mut link, command, replicas).await;
        self.own = own;
        drop(in_flight);
        let (frame, outcome) = failure_reply(result, &**namespace);
        m::request(
            &namespace.name,
            command.label(),
            outcome.ended.label(),
            started.elapsed(),
        );
        (frame, outcome.ended)
    }

    /// Closes the client's own backend connection, if it has one.
    pub(super) async fn close_own(&mut self) {
        if let Some((_, dedicated)) = self.dedicated.take() {
            dedicated.close().await;
        }
    }

    /// Before a command on `namespace`'s backend: the client's own connection to another
    /// backend is closed, and a WATCH that stood on it is lost. Done before `exec::own`'s state
    /// is lent out for the command, so the state sees it.
    pub(super) async fn leave_other_backend(&mut self, namespace: &Arc<Namespace>) {
        let other = matches!(&self.dedicated, Some((backend, _)) if !Arc::ptr_eq(backend, &namespace.backend));
        if other {
            self.close_own().await;
            self.own.connection_lost();
        }
    }

    /// The client's own connection to `namespace`'s backend, opened on first use.
    async fn dedicated_for(
        &mut self,
        namespace: &Arc<Namespace>,
    ) -> Result<&Dedicated, BackendError> {
        let same = matches!(&self.dedicated, Some((backend, _)) if Arc::ptr_eq(backend, &namespace.backend));
        if !same {
            // Callers left another backend's connection first (`leave_other_backend`), while
            // its WATCH state was theirs to update.
            self.close_own().await;
            let fresh = namespace
                .backend
                .dedicated(self.exec.proto, namespace.acquire_timeout)
                .await?;
            self.dedicated = Some((namespace.backend.clone(), fresh));
        }
        match &self.dedicated {
            Some((_, dedicated)) => Ok(dedicated),
            None => Err(BackendError::Unsupported {
                what: "no dedicated connection".to_string(),
            }),
        }
    }

    async fn send_dedicated(
        &mut self,
        namespace: &Arc<Namespace>,
        args: &[Bytes],
        blocking: bool,
        route: Option<&[u8]>,
        token: Option<&[u8]>,
    ) -> Result<Frame, BackendError> {
        let proto = self.exec.proto;
        let pin = self.id;
        let clients = self.shared.clients.clone();
        let dedicated = self.dedicated_for(namespace).await?;
        let request = Request {
            // Inside MULTI, Redis runs a blocking command without blocking.
            blocking: if blocking {
                Blocking::of(args)
            } else {
                Blocking::No
            },
            route,
            hold: namespace.policy.backoff.total_before_jitter(),
            token: token.filter(|_| blocking),
            ..Request::new(args, proto, pin)
        };
        let blocked = &clients.blocked;
        if blocking {
            blocked.fetch_add(1, Ordering::Relaxed);
        }
        // Counted down even when the client goes and this future is dropped.
        let _unblock = blocking.then(|| Unblock(blocked));
        let result = dedicated.send(&request).await;
        drop(_unblock);
        result
    }
}

/// Counts a client out of `INFO`'s `blocked_clients` when its blocking command ends.
struct Unblock<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The client's own connection to a namespace's backend, as `exec::own` sends on it: to
/// `route`'s node on a Cluster. Without a namespace (`UNWATCH`) it is the connection there
/// is, whatever its backend.
pub(super) struct OwnConn<'a> {
    conn: &'a mut ClientConn,
    namespace: Option<&'a Arc<Namespace>>,
    route: Option<&'a [u8]>,
    /// Exact mode's token for the blocking command sent alone on it.
    token: Option<&'a [u8]>,
}

impl<'a> OwnConn<'a> {
    pub(super) fn to(
        conn: &'a mut ClientConn,
        namespace: Option<&'a Arc<Namespace>>,
        route: Option<&'a [u8]>,
    ) -> OwnConn<'a> {
        OwnConn {
            conn,
            namespace,
            route,
            token: None,
        }
    }
}

impl OwnLink for OwnConn<'_> {
    async fn send(&mut self, args: &[Bytes], blocking: bool) -> Result<Frame, BackendError> {
        match self.namespace {
            Some(namespace) => {
                self.conn
                    .send_dedicated(namespace, args, blocking, self.route, self.token)
                    .await
            }
            None => match &self.conn.dedicated {
                Some((_, dedicated)) => {
                    let request = Request::new(args, self.conn.exec.proto, self.conn.id);
                    dedicated.send(&request).await
                }
                None => Err(BackendError::Unsupported {
                    what: "no connection of its own".to_string(),
                }),
            },
        }
    }

    async fn close(&mut self) {
        self.conn.close_own().await;
    }
}

/// A command's first key: on a Cluster, the node a connection-bound command goes to.
pub(super) fn first_key(command: &Command) -> Option<&[u8]> {
    command.keys().next().map(|k| k.as_ref())
}
