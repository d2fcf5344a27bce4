//! A scripted backend for unit tests of the retry arithmetic: each dispatch takes the next
//! scripted outcome and is counted. It never stands in for a real server in an integration
//! test.

use super::BackendError;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Outcomes handed out in order; when they run out every dispatch fails as not sent.
#[derive(Default)]
pub struct Script {
    /// What the next dispatches return.
    outcomes: Mutex<VecDeque<Result<Frame, BackendError>>>,
    /// Dispatches made so far.
    dispatches: AtomicUsize,
}

impl Script {
    /// A script of `outcomes`.
    pub fn new(outcomes: Vec<Result<Frame, BackendError>>) -> Script {
        Script {
            outcomes: Mutex::new(outcomes.into()),
            dispatches: AtomicUsize::new(0),
        }
    }

    /// The next outcome.
    ///
    /// # Errors
    /// The scripted error.
    pub async fn dispatch(&self) -> Result<Frame, BackendError> {
        self.dispatches.fetch_add(1, Ordering::SeqCst);
        let next = match self.outcomes.lock() {
            Ok(mut queue) => queue.pop_front(),
            Err(_) => None,
        };
        next.unwrap_or(Err(BackendError::AcquireTimeout {
            waited: std::time::Duration::ZERO,
        }))
    }

    /// Dispatches made so far.
    pub fn dispatches(&self) -> usize {
        self.dispatches.load(Ordering::SeqCst)
    }
}
