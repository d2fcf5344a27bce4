//! The accept loop: a connection limit, one task per client, and shutdown that stops
//! accepting, lets connections finish what they are holding, and closes them between commands
//! within the grace period.

use std::future::Future;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

pub use crate::shared::{Shared, StartError, State};

/// Longest a client may take to complete its TLS handshake.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// After the grace period, how long held requests get to write their give-up replies.
const SHUTDOWN_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves clients from `listener` until `shutdown` completes, then drains.
pub async fn run(shared: Arc<Shared>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = shared.current().config.server.clone();
    let limit = Arc::new(Semaphore::new(server.max_clients));
    // Validated with the configuration; a file changed since is reported and TLS refused.
    let tls = match &server.tls {
        Some(tls) => match crate::tls::acceptor(&tls.cert, &tls.key) {
            Ok(acceptor) => Some(acceptor),
            Err(e) => {
                tracing::error!(error = %e, "server.tls: cannot load; refusing every client");
                return;
            }
        },
        None => None,
    };
    let mut connections = JoinSet::new();
    let health = tokio::spawn(crate::http::watch_health(shared.clone()));
    shared.set_serving(crate::shared::Serving::Accepting);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (mut stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: back off briefly, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    crate::metrics::client_refused();
                    // As Redis does at maxclients (in clear text only: a TLS client would
                    // not read it).
                    if tls.is_none() {
                        let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tracing::trace!(%peer, "client connected");
                let shared = shared.clone();
                let stop = stop_rx.clone();
                let tls = tls.clone();
                let addrs = (Some(peer), stream.local_addr().ok());
                connections.spawn(async move {
                    crate::metrics::client_connection(true);
                    match tls {
                        None => crate::connection::serve(stream, shared, stop, addrs).await,
                        Some(acceptor) => {
                            match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                                Ok(Ok(stream)) => crate::connection::serve(stream, shared, stop, addrs).await,
                                _ => crate::metrics::limit("tls_handshake"),
                            }
                        }
                    }
                    crate::metrics::client_connection(false);
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    shared.set_serving(crate::shared::Serving::Draining);
    health.abort();
    let _ = stop_tx.send(true);
    if !drain(&mut connections, server.shutdown_grace).await {
        // Held requests stop waiting and answer UNAVAILABLE/INDOUBT; a dispatch in flight
        // still gets its reply or its timeout. Whatever is left after that is closed.
        tracing::warn!("shutdown grace period over; held requests give up");
        shared.give_up();
        if !drain(&mut connections, SHUTDOWN_MARGIN).await {
            tracing::warn!(
                remaining = connections.len(),
                "closing the remaining connections"
            );
            connections.shutdown().await;
        }
    }
}

/// Waits up to `limit` for every connection to finish; true when they all did.
async fn drain(connections: &mut JoinSet<()>, limit: std::time::Duration) -> bool {
    tokio::time::timeout(limit, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_ok()
}
