//! The retry loop: attempt, classify, ask the policy, wait, attempt again.
//!
//! The loop knows nothing of error kinds: `classify` (passed in) names the class and
//! [`policy::Policy`] decides. It counts whether any dispatch may have been applied, which is
//! what separates an `UNAVAILABLE` give-up (safe for the client to retry) from an `INDOUBT` one.

pub mod backoff;
pub mod budget;
pub mod policy;

use crate::command::table::Idempotence;
use crate::error::ErrorClass;
use budget::RetryBudget;
use policy::{Decision, Policy, Stop};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How a request that did not succeed ended.
#[derive(Debug)]
pub enum Failure<E> {
    /// The backend's answer (class Other): the client gets it as it is.
    Answer(E),
    /// Gave up, and no dispatch may have been applied: safe for the client to retry.
    Unavailable(GaveUp<E>),
    /// Gave up after a dispatch that may have been applied.
    InDoubt(GaveUp<E>),
}

/// The facts of a give-up, for the error reply and the logs.
#[derive(Debug)]
pub struct GaveUp<E> {
    /// The last failure.
    pub last: E,
    /// Its class.
    pub class: ErrorClass,
    /// Attempts made, skipped ones (retry budget empty) included.
    pub attempts: u32,
    /// Time from the first attempt to the give-up.
    pub elapsed: Duration,
    /// Whether the give-up is the attempt cap, rather than a command that must not repeat.
    pub exhausted: bool,
}

/// Observes the loop, for metrics and logs. Every method has a no-op default.
pub trait Hooks {
    /// A dispatch failed with `class`.
    fn failed(&mut self, _class: ErrorClass) {}
    /// Attempt `attempt` failed with `class`; the next comes after `delay`.
    fn retrying(&mut self, _class: ErrorClass, _attempt: u32, _delay: Duration) {}
    /// The process-wide budget was empty: this attempt is skipped.
    fn budget_denied(&mut self) {}
    /// The request starts (true) or stops (false) being held.
    fn held(&mut self, _holding: bool) {}
    /// The loop gave up (attempts used, or a command that must not repeat).
    fn gave_up(
        &mut self,
        _class: ErrorClass,
        _attempts: u32,
        _elapsed: Duration,
        _exhausted: bool,
    ) {
    }
}

/// Hooks that observe nothing.
pub struct NoHooks;
impl Hooks for NoHooks {}

/// Runs `attempt` until it succeeds, its failure is an answer, or the policy stops.
///
/// # Errors
/// [`Failure`], which says whether a dispatch may have been applied.
pub async fn run<T, E, F, Fut, C, H>(
    policy: &Policy,
    budget: &RetryBudget,
    idempotence: Idempotence,
    classify: C,
    hooks: &mut H,
    mut attempt: F,
) -> Result<T, Failure<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Fn(&E) -> ErrorClass,
    H: Hooks,
{
    budget.deposit();
    let start = Instant::now();
    let mut attempts = 0u32;
    let mut maybe_applied = false;
    let mut dispatch = true;
    let mut holding = false;
    let mut last: Option<(E, ErrorClass)> = None;
    loop {
        attempts += 1;
        if dispatch {
            match attempt().await {
                Ok(value) => {
                    if holding {
                        hooks.held(false);
                    }
                    return Ok(value);
                }
                Err(error) => {
                    let class = classify(&error);
                    hooks.failed(class);
                    // A Transient failure is a dispatch that may have landed; NotAttempted
                    // proves this one did not, and is not counted. A read has nothing to
                    // land, so it is never in doubt.
                    maybe_applied |=
                        class == ErrorClass::Transient && idempotence != Idempotence::Read;
                    last = Some((error, class));
                }
            }
        }
        // The first attempt always dispatches, so `last` is set from here on.
        let Some(class) = last.as_ref().map(|(_, class)| *class) else {
            continue;
        };
        let decision = policy.decide(class, idempotence, attempts, &mut rand::thread_rng());
        match decision {
            Decision::Retry(delay) => {
                if !holding {
                    holding = true;
                    hooks.held(true);
                }
                hooks.retrying(class, attempts, delay);
                tokio::time::sleep(delay).await;
                dispatch = budget.withdraw();
                if !dispatch {
                    hooks.budget_denied();
                }
            }
            Decision::Stop(stop) => {
                if holding {
                    hooks.held(false);
                }
                let Some((error, class)) = last.take() else {
                    continue;
                };
                if stop == Stop::Answer {
                    return Err(Failure::Answer(error));
                }
                let elapsed = start.elapsed();
                let exhausted = stop == Stop::Exhausted;
                hooks.gave_up(class, attempts, elapsed, exhausted);
                let gave_up = GaveUp {
                    last: error,
                    class,
                    attempts,
                    elapsed,
                    exhausted,
                };
                return Err(if maybe_applied {
                    Failure::InDoubt(gave_up)
                } else {
                    Failure::Unavailable(gave_up)
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
