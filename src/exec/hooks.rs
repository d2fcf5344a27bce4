//! The retry loop's observer for one request: dispatches, retries, holds and give-ups, as
//! metrics (`src/metrics/catalogue.rs` declares them) and logs.

use crate::error::ErrorClass;
use crate::metrics as m;
use crate::retry::{Hooks, Why};
use std::time::Duration;
use tokio::time::Instant;

/// Records one request's passage through the retry loop.
pub struct RequestHooks<'a> {
    /// Namespace label.
    namespace: &'a str,
    /// Backend label.
    backend: &'a str,
    /// Command label.
    command: &'static str,
    /// When the request started being held, while it is.
    held_since: Option<Instant>,
}

impl<'a> RequestHooks<'a> {
    /// Hooks for one request.
    pub fn new(namespace: &'a str, backend: &'a str, command: &'static str) -> RequestHooks<'a> {
        RequestHooks {
            namespace,
            backend,
            command,
            held_since: None,
        }
    }

    /// A dispatch succeeded.
    pub fn dispatched_ok(&self) {
        m::dispatch(self.namespace, self.backend, self.command, "ok");
    }

    fn release(&mut self) {
        if let Some(since) = self.held_since.take() {
            m::hold_ended(self.namespace, since.elapsed());
        }
    }
}

impl Hooks for RequestHooks<'_> {
    fn failed(&mut self, class: ErrorClass) {
        m::dispatch(self.namespace, self.backend, self.command, class.as_str());
    }

    fn retrying(&mut self, class: ErrorClass, attempt: u32, delay: Duration, elapsed: Duration) {
        tracing::debug!(
            namespace = self.namespace,
            command = self.command,
            class = class.as_str(),
            attempt,
            elapsed_ms = elapsed.as_millis() as u64,
            delay_ms = delay.as_millis() as u64,
            "retrying"
        );
        m::retry(self.namespace, class.as_str());
    }

    fn budget_denied(&mut self) {
        m::budget_denied(self.namespace);
    }

    fn held(&mut self, holding: bool) {
        if holding {
            if self.held_since.is_none() {
                self.held_since = Some(Instant::now());
                m::hold_started(self.namespace);
            }
        } else {
            self.release();
        }
    }

    fn gave_up(
        &mut self,
        class: ErrorClass,
        attempts: u32,
        elapsed: Duration,
        why: Why,
        last: &(dyn std::error::Error + 'static),
    ) {
        tracing::warn!(
            namespace = self.namespace,
            backend = self.backend,
            command = self.command,
            class = class.as_str(),
            attempts,
            elapsed_ms = elapsed.as_millis() as u64,
            why = why.as_str(),
            cause = crate::error::in_words(last).as_str(),
            "gave up"
        );
        m::gave_up(self.namespace, class.as_str());
    }
}

impl Drop for RequestHooks<'_> {
    /// A request dropped while held (its client went away) leaves the gauge.
    fn drop(&mut self) {
        self.release();
    }
}
