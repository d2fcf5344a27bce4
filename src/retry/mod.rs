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
use tokio::sync::watch;
use tokio::time::Instant;

/// A request that succeeded, and how many of its earlier dispatches may have been applied
/// (failed Transient, not a read): what the reply modes settle.
#[derive(Debug)]
pub struct Done<T> {
    /// The successful dispatch's result.
    pub value: T,
    /// Earlier dispatches that may have been applied.
    pub maybe_applied: u32,
    /// Attempts made, skipped ones (retry budget empty) included.
    pub attempts: u32,
}

/// How a request that did not succeed ended.
#[derive(Debug)]
pub enum Failure<E> {
    /// The backend's answer (class Other): the client gets it as it is. With it, how many
    /// earlier dispatches may have been applied (an answer to a retry may be about them), and
    /// the attempts made.
    Answer(E, u32, u32),
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
    /// Why it stopped.
    pub why: Why,
    /// Dispatches that may have been applied (0 for an `Unavailable` give-up).
    pub maybe_applied: u32,
}

/// Why the loop gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Every attempt was used.
    Exhausted,
    /// The failure may have applied a command that must not run twice.
    MustNotRepeat,
    /// holdfast is shutting down and its grace period is over.
    ShuttingDown,
    /// A later request of the client's pipeline already took effect, so this one, retried
    /// now, would take effect out of order (set by the caller, not the loop).
    Overtaken,
    /// The reply may be a later dispatch's, and the read that would have rebuilt the first
    /// one's failed (settled mode; set by the caller).
    Unsettled,
    /// It waited behind a request of its client's that gave up after the whole schedule, so
    /// its one more attempt was its last (`Policy::behind`; set by the caller).
    WaitedOut,
}

impl Why {
    /// Its name in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Exhausted => "exhausted",
            Why::MustNotRepeat => "must_not_repeat",
            Why::ShuttingDown => "shutting_down",
            Why::Overtaken => "overtaken",
            Why::Unsettled => "unsettled",
            Why::WaitedOut => "waited_out",
        }
    }
}

/// Observes the loop, for metrics and logs. Every method has a no-op default.
pub trait Hooks {
    /// A dispatch failed with `class`.
    fn failed(&mut self, _class: ErrorClass) {}
    /// Attempt `attempt` failed with `class`, `elapsed` after the first began; the next comes
    /// after `delay`.
    fn retrying(
        &mut self,
        _class: ErrorClass,
        _attempt: u32,
        _delay: Duration,
        _elapsed: Duration,
    ) {
    }
    /// The process-wide budget was empty: this attempt is skipped.
    fn budget_denied(&mut self) {}
    /// The request starts (true) or stops (false) being held.
    fn held(&mut self, _holding: bool) {}
    /// The loop gave up; `last` is the last failure (for the log: the loop itself never
    /// reads it).
    fn gave_up(
        &mut self,
        _class: ErrorClass,
        _attempts: u32,
        _elapsed: Duration,
        _why: Why,
        _last: &(dyn std::error::Error + 'static),
    ) {
    }
}

/// Runs `attempt` until it succeeds, its failure is an answer, or the policy stops. While it
/// waits between attempts it also stops when `stop` turns true (shutdown's grace is over).
///
/// `made` counts attempts the same request made already in earlier loops (a settled
/// request's read before its command): they count toward the policy's cap and its delays,
/// so a request's loops together hold it no longer than one.
///
/// `prior` is the failure of a first dispatch made elsewhere (sent ahead with a client's
/// pipeline): the loop counts it as its first attempt, a dispatch that may have been applied
/// if its class says so, and dispatches again at once, without a backoff step (the request
/// ahead of it in the pipeline has already waited the outage out).
///
/// # Errors
/// [`Failure`], which says whether a dispatch may have been applied.
#[allow(clippy::too_many_arguments)]
pub async fn run<T, E, F, Fut, C, H>(
    policy: &Policy,
    budget: &RetryBudget,
    idempotence: Idempotence,
    classify: C,
    hooks: &mut H,
    stop: &mut watch::Receiver<bool>,
    prior: Option<E>,
    made: u32,
    mut attempt: F,
) -> Result<Done<T>, Failure<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
    C: Fn(&E) -> ErrorClass,
    H: Hooks,
{
    budget.deposit();
    let start = Instant::now();
    let mut attempts = made;
    let mut maybe_applied = 0u32;
    let mut dispatch = true;
    let mut holding = false;
    let mut last: Option<(E, ErrorClass)> = None;
    let mut wait = true;
    if let Some(error) = prior {
        // Recorded as the first attempt's failure (the loop's first pass dispatches nothing).
        let class = classify(&error);
        last = Some(failed(hooks, idempotence, error, class, &mut maybe_applied));
        dispatch = false;
        wait = false;
    }
    loop {
        attempts += 1;
        if dispatch {
            match attempt().await {
                Ok(value) => {
                    if holding {
                        hooks.held(false);
                    }
                    return Ok(Done {
                        value,
                        maybe_applied,
                        attempts,
                    });
                }
                Err(error) => {
                    let class = classify(&error);
                    last = Some(failed(hooks, idempotence, error, class, &mut maybe_applied));
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
                hooks.retrying(class, attempts, delay, start.elapsed());
                if !std::mem::replace(&mut wait, true) {
                    dispatch = withdraw(budget, hooks);
                    continue;
                }
                let stopped = tokio::select! {
                    _ = tokio::time::sleep(delay) => false,
                    // A closed channel never stops the loop.
                    result = stop.wait_for(|stop| *stop) => result.is_ok(),
                };
                if stopped {
                    hooks.held(false);
                    let Some((error, class)) = last.take() else {
                        continue;
                    };
                    return Err(give_up(
                        hooks,
                        error,
                        class,
                        attempts,
                        start,
                        Why::ShuttingDown,
                        maybe_applied,
                    ));
                }
                dispatch = withdraw(budget, hooks);
            }
            Decision::Stop(stop) => {
                if holding {
                    hooks.held(false);
                }
                let Some((error, class)) = last.take() else {
                    continue;
                };
                if stop == Stop::Answer {
                    return Err(Failure::Answer(error, maybe_applied, attempts));
                }
                let why = match stop {
                    Stop::Exhausted => Why::Exhausted,
                    _ => Why::MustNotRepeat,
                };
                return Err(give_up(
                    hooks,
                    error,
                    class,
                    attempts,
                    start,
                    why,
                    maybe_applied,
                ));
            }
        }
    }
}

/// Records a failed dispatch. A Transient failure is a dispatch that may have landed;
/// NotAttempted proves this one did not, and is not counted. A read has nothing to land, so
/// it is never in doubt.
#[inline]
fn failed<E, H: Hooks>(
    hooks: &mut H,
    idempotence: Idempotence,
    error: E,
    class: ErrorClass,
    maybe_applied: &mut u32,
) -> (E, ErrorClass) {
    hooks.failed(class);
    if class == ErrorClass::Transient && idempotence != Idempotence::Read {
        *maybe_applied += 1;
    }
    (error, class)
}

/// Whether the budget allows the next dispatch (counted when it does not).
#[inline]
fn withdraw<H: Hooks>(budget: &RetryBudget, hooks: &mut H) -> bool {
    let allowed = budget.withdraw();
    if !allowed {
        hooks.budget_denied();
    }
    allowed
}

/// The failure a give-up answers with: INDOUBT when a dispatch may have been applied.
fn give_up<E: std::error::Error + 'static, H: Hooks>(
    hooks: &mut H,
    last: E,
    class: ErrorClass,
    attempts: u32,
    start: Instant,
    why: Why,
    maybe_applied: u32,
) -> Failure<E> {
    let elapsed = start.elapsed();
    hooks.gave_up(class, attempts, elapsed, why, &last);
    let gave_up = GaveUp {
        last,
        class,
        attempts,
        elapsed,
        why,
        maybe_applied,
    };
    if maybe_applied > 0 {
        Failure::InDoubt(gave_up)
    } else {
        Failure::Unavailable(gave_up)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
