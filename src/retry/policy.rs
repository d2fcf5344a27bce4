//! The retry policy: given the class of a failure, the command's idempotence and the attempts
//! made so far, retry after a delay or stop. No I/O, no clock: the loop supplies the facts.

use super::backoff::Backoff;
use crate::command::table::Idempotence;
use crate::error::ErrorClass;
use rand::Rng;
use std::time::Duration;

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Try again after this delay.
    Retry(Duration),
    /// Stop and answer.
    Stop(Stop),
}

/// Why the loop stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The failure is an answer (class Other): pass it on.
    Answer,
    /// The failure may have applied a command that must not run twice.
    MustNotRepeat,
    /// Every attempt was used.
    Exhausted,
}

/// One namespace's policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The delay schedule and the attempt cap.
    pub backoff: Backoff,
}

impl Policy {
    /// A policy over `backoff`.
    pub fn new(backoff: Backoff) -> Policy {
        Policy { backoff }
    }

    /// Whether a failure of `class` on a command of `idempotence` may be retried at all.
    pub fn retryable(class: ErrorClass, idempotence: Idempotence) -> Result<(), Stop> {
        match (class, idempotence) {
            (ErrorClass::Other, _) => Err(Stop::Answer),
            // A connection of its own carries state (WATCH, a blocking wait) that a retry on
            // a new connection would not have.
            (_, Idempotence::ConnectionBound) => Err(Stop::MustNotRepeat),
            (ErrorClass::NotAttempted, _) => Ok(()),
            (ErrorClass::Transient, Idempotence::NonIdempotent) => Err(Stop::MustNotRepeat),
            (ErrorClass::Transient, _) => Ok(()),
        }
    }

    /// The policy of a request that waited behind one of its client's that gave up after its
    /// whole schedule: the outage was waited out once for both, so it gets one attempt more
    /// than it has made (`made` in earlier loops, and `prior`, a first dispatch sent ahead
    /// that failed), never more than the schedule's own cap. Without this, a pipeline
    /// queued behind an outage longer than the schedule was answered one whole schedule
    /// per request.
    pub fn behind(&self, made: u32, prior: bool) -> Policy {
        let once_more = made.saturating_add(1 + u32::from(prior));
        let mut backoff = self.backoff.clone();
        backoff.max_attempts = backoff.max_attempts.min(once_more);
        Policy { backoff }
    }

    /// The decision after attempt number `attempts` (1-based) failed with `class`.
    pub fn decide(
        &self,
        class: ErrorClass,
        idempotence: Idempotence,
        attempts: u32,
        rng: &mut impl Rng,
    ) -> Decision {
        if let Err(stop) = Self::retryable(class, idempotence) {
            return Decision::Stop(stop);
        }
        if attempts >= self.backoff.max_attempts {
            return Decision::Stop(Stop::Exhausted);
        }
        Decision::Retry(self.backoff.delay(attempts, rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RetryConfig;
    use rand::{rngs::StdRng, SeedableRng};
    use Idempotence::*;

    fn policy() -> Policy {
        Policy::new(
            Backoff::new(&RetryConfig {
                jitter: 0.0,
                ..RetryConfig::default()
            })
            .unwrap(),
        )
    }

    #[test]
    fn class_times_idempotence() {
        let p = policy();
        let mut rng = StdRng::seed_from_u64(1);
        let retry = Decision::Retry(Duration::from_millis(200));
        let table = [
            (ErrorClass::NotAttempted, Read, retry),
            (ErrorClass::NotAttempted, Idempotent, retry),
            (ErrorClass::NotAttempted, IdempotentEffect, retry),
            (ErrorClass::NotAttempted, NonIdempotent, retry),
            (
                ErrorClass::NotAttempted,
                ConnectionBound,
                Decision::Stop(Stop::MustNotRepeat),
            ),
            (ErrorClass::Transient, Read, retry),
            (ErrorClass::Transient, Idempotent, retry),
            (ErrorClass::Transient, IdempotentEffect, retry),
            (
                ErrorClass::Transient,
                NonIdempotent,
                Decision::Stop(Stop::MustNotRepeat),
            ),
            (
                ErrorClass::Transient,
                ConnectionBound,
                Decision::Stop(Stop::MustNotRepeat),
            ),
            (ErrorClass::Other, Read, Decision::Stop(Stop::Answer)),
            (
                ErrorClass::Other,
                NonIdempotent,
                Decision::Stop(Stop::Answer),
            ),
        ];
        for (class, idem, expected) in table {
            assert_eq!(
                p.decide(class, idem, 1, &mut rng),
                expected,
                "{class:?} {idem:?}"
            );
        }
    }

    #[test]
    fn behind_a_request_that_waited_out_the_schedule_one_attempt_more() {
        let p = policy();
        let mut rng = StdRng::seed_from_u64(1);
        // (attempts made before, a failed first dispatch sent ahead, the cap)
        let table = [
            (0, false, 1),
            (0, true, 2),
            (1, false, 2),
            (2, true, 4),
            // Never past the schedule's own cap.
            (14, false, 15),
            (14, true, 15),
            (40, true, 15),
            (u32::MAX, true, 15),
        ];
        for (made, prior, cap) in table {
            let behind = p.behind(made, prior);
            assert_eq!(behind.backoff.max_attempts, cap, "{made} {prior}");
            let stop = Decision::Stop(Stop::Exhausted);
            assert_eq!(
                behind.decide(ErrorClass::NotAttempted, Read, cap, &mut rng),
                stop
            );
            if cap > 1 {
                // Before the cap the delays are the schedule's own.
                assert_eq!(
                    behind.decide(ErrorClass::NotAttempted, Read, cap - 1, &mut rng),
                    p.decide(ErrorClass::NotAttempted, Read, cap - 1, &mut rng),
                );
            }
        }
        // The classes decide as before: an answer is passed on, a lost INCR not repeated.
        let behind = p.behind(0, true);
        assert_eq!(
            behind.decide(ErrorClass::Other, Read, 1, &mut rng),
            Decision::Stop(Stop::Answer)
        );
        assert_eq!(
            behind.decide(ErrorClass::Transient, NonIdempotent, 1, &mut rng),
            Decision::Stop(Stop::MustNotRepeat)
        );
    }

    #[test]
    fn the_attempt_cap_stops() {
        let p = policy();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            p.decide(ErrorClass::NotAttempted, Read, 14, &mut rng),
            Decision::Retry(Duration::from_secs(10))
        );
        assert_eq!(
            p.decide(ErrorClass::NotAttempted, Read, 15, &mut rng),
            Decision::Stop(Stop::Exhausted)
        );
    }
}
