//! PostgreSQL with several hosts: after a failure that may mean the primary moved, every host
//! is probed and the pools move to the one that accepts writes.

use super::conn::SqlPool;
use super::{Inner, Pools};
use crate::backend::BackendError;
use sqlx::AnyPool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Builds PostgreSQL's pool for one host's URL.
pub(super) type PoolBuilder = Box<dyn Fn(&str) -> Result<AnyPool, sqlx::Error> + Send + Sync>;

/// PostgreSQL with several hosts (libpq's multi-host URL, primary first): after a failure,
/// the host that accepts writes (`pg_is_in_recovery()` false) is looked for again, and the
/// pools move to it. A promoted standby is found this way within the retry budget.
pub(super) struct Failover {
    hosts: Vec<String>,
    build: PoolBuilder,
    /// Index of the host the pools point at.
    current: std::sync::atomic::AtomicUsize,
    /// One search at a time.
    searching: tokio::sync::Mutex<()>,
}

impl Failover {
    /// Pools on `hosts[0]` first.
    pub(super) fn new(hosts: Vec<String>, build: PoolBuilder) -> Failover {
        Failover {
            hosts,
            build,
            current: std::sync::atomic::AtomicUsize::new(0),
            searching: tokio::sync::Mutex::new(()),
        }
    }
}

impl Inner {
    /// Anything but an answer may mean the primary moved: look for it again.
    pub(super) fn suspect(self: &Arc<Self>, e: &BackendError) {
        if self.failover.is_some() && crate::error::classify(e) != crate::error::ErrorClass::Other {
            let inner = self.clone();
            tokio::spawn(async move { inner.find_primary().await });
        }
    }

    /// Probes every host and moves the pools to the one that accepts writes.
    async fn find_primary(&self) {
        let Some(failover) = &self.failover else {
            return;
        };
        let Ok(_searching) = failover.searching.try_lock() else {
            return;
        };
        for (index, url) in failover.hosts.iter().enumerate() {
            let probe = async {
                let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(url).await?;
                let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                    .fetch_one(&mut conn)
                    .await?;
                let _ = sqlx::Connection::close(conn).await;
                Ok::<bool, sqlx::Error>(standby)
            };
            let Ok(Ok(false)) = tokio::time::timeout(Duration::from_secs(2), probe).await else {
                continue;
            };
            if failover.current.load(Ordering::Acquire) == index {
                return;
            }
            let Ok(pool) = (failover.build)(url) else {
                return;
            };
            let old = self.pools.swap(Arc::new(Pools {
                writer: SqlPool::Any(pool.clone()),
                reader: SqlPool::Any(pool),
            }));
            failover.current.store(index, Ordering::Release);
            tracing::warn!(backend = %self.name, host = index, "the primary moved; following it");
            if let SqlPool::Any(old) = &old.writer {
                let old = old.clone();
                tokio::spawn(async move { old.close().await });
            }
            return;
        }
    }
}
