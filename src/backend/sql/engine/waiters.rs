//! The clients of a SQL backend waiting in a blocking command, by key: a write of this
//! holdfast wakes the longest-waiting client on a key it touched; a client that took
//! something wakes the next, so a push of three elements serves three clients in order.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// The waiters on one key, longest waiting first: (registration order, its wake-up).
type WaitLine = Vec<(u64, Arc<Notify>)>;

/// The clients of one backend waiting in a blocking command, by key.
pub struct Wakers {
    /// How often the first in line tries again unwoken.
    poll: Duration,
    /// Waiters registered now: a write looks no further when there are none.
    waiting: AtomicUsize,
    /// Registration order: the smaller waited longer.
    next: AtomicU64,
    by_key: Mutex<HashMap<Bytes, WaitLine>>,
}

impl Wakers {
    /// No waiter yet; the first in line for a key tries again every `poll`.
    pub fn new(poll: Duration) -> Wakers {
        Wakers {
            poll,
            waiting: AtomicUsize::new(0),
            next: AtomicU64::new(0),
            by_key: Mutex::default(),
        }
    }

    /// Registers a waiter on `keys`; it leaves when dropped.
    pub fn wait_on(self: &Arc<Self>, keys: Vec<Bytes>) -> Waiter {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        for key in &keys {
            by_key
                .entry(key.clone())
                .or_default()
                .push((seq, notify.clone()));
        }
        self.waiting.fetch_add(1, Ordering::Release);
        Waiter {
            wakers: self.clone(),
            seq,
            keys,
            notify,
        }
    }

    /// How often the first in line tries again unwoken.
    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// Whether any client waits now (a commit looks no further when none does).
    pub fn any(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// A write touched `keys`: the longest waiter of each tries again.
    pub fn touched<'a>(&self, keys: impl IntoIterator<Item = &'a Bytes>) {
        if !self.any() {
            return;
        }
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            if let Some((_, first)) = by_key.get(key).and_then(|w| w.first()) {
                first.notify_one();
            }
        }
    }

    /// Whether waiter `seq` is first in line for one of `keys`.
    fn first_for(&self, seq: u64, keys: &[Bytes]) -> bool {
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter().any(|k| {
            by_key
                .get(k)
                .and_then(|w| w.first())
                .is_some_and(|(s, _)| *s == seq)
        })
    }
}

/// One client waiting in a blocking command.
pub struct Waiter {
    wakers: Arc<Wakers>,
    seq: u64,
    keys: Vec<Bytes>,
    notify: Arc<Notify>,
}

impl Waiter {
    /// Until woken, or the poll interval passed while first in line for a key; false once
    /// `until`.
    pub async fn wait(&self, until: Option<tokio::time::Instant>) -> bool {
        let deadline = async {
            match until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let poll = async {
            loop {
                tokio::time::sleep(self.wakers.poll).await;
                if self.wakers.first_for(self.seq, &self.keys) {
                    return;
                }
            }
        };
        tokio::select! {
            () = self.notify.notified() => true,
            () = poll => true,
            () = deadline => false,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut by_key = self.wakers.by_key.lock().unwrap_or_else(|p| p.into_inner());
        for key in &self.keys {
            if let Some(list) = by_key.get_mut(key) {
                list.retain(|(s, _)| *s != self.seq);
                // Whatever woke this waiter may be there for the next one.
                if let Some((_, next)) = list.first() {
                    next.notify_one();
                }
                if list.is_empty() {
                    by_key.remove(key);
                }
            }
        }
        self.wakers.waiting.fetch_sub(1, Ordering::Release);
    }
}
