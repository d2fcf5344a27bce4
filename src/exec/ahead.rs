//! Pipelined requests sent ahead: when a client has several requests in its buffer, their
//! first dispatches go to the backend together, written back to back on the client's pinned
//! connection, instead of one round trip each.
//!
//! A run sent together is all reads or all writes. In a mixed run, a read behind a write
//! whose connection dropped could be sent again after a write behind it had reached the
//! backend, and see that later write; a run of writes retried in order ends where the same
//! writes applied once in order end, and a run of reads has no effect to get ahead of.
//!
//! Order still holds. Redis runs a connection's commands in the order written, so the only
//! way a later request can take effect before an earlier one is for the earlier one to fail
//! while the later one succeeds (an error reply such as `READONLY` or `TRYAGAIN` turns one
//! command away and not the next). Then, from the first failure on:
//! - a later read that succeeded is dropped and sent again after the failed request is
//!   settled, so it sees that request's effect;
//! - a later write that succeeded has taken effect and cannot be taken back, so every failed
//!   request before it is answered its failure instead of being retried after it
//!   (`UNAVAILABLE not applied`, or `INDOUBT` when it may have landed). So has a later write
//!   whose reply was lost and that will not be sent again (an `INCR`: it is answered
//!   `INDOUBT`): it may have taken effect, and an earlier write retried now could land after
//!   it (a `SET` of the key it incremented would erase it; simulation seed 27 found this);
//! - the first failed request after the last successful write is retried, going on from its
//!   first dispatch's result (its backoff waits out the outage); the failed ones behind it
//!   are sent again at once when it is settled if their failure allows a retry at all (a
//!   `NotAttempted`, or a lost reply of a command that may be repeated), their first
//!   dispatch still counted (a lost reply may have been applied: a give-up after it is
//!   `INDOUBT`, never "not applied"), and otherwise go on from their own result (an `INCR`
//!   whose reply was lost is answered `INDOUBT`).
//!
//! When the connection dies, every request behind the failure fails too, so in a failover the
//! whole pipeline is held and retried in order, exactly as when requests are sent one by one.

use super::{placement, Dispatch, Session};
use crate::backend::{BackendError, Reply, Request};
use crate::command::table::Idempotence;
use crate::command::Command;
use crate::error::{classify, ErrorClass};
use crate::retry::policy::Policy;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What a request's first dispatch, sent ahead with its neighbours, left for it.
#[derive(Debug)]
pub enum Ahead<T, E> {
    /// Its first dispatch's result: the retry loop goes on from there.
    First(Result<T, E>),
    /// It failed while a later request of the pipeline took effect: retrying it now would
    /// apply it out of order, so the failure is its answer.
    Overtaken(E),
    /// Its first dispatch failed behind the one that waits out the outage: it is sent again
    /// at once when its turn comes, and the failure counts as its first attempt.
    Again(E),
}

/// What may become of a request sent ahead whose first dispatch failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Again {
    /// It may be sent again (a `NotAttempted`, or a lost reply of a command that may be
    /// repeated).
    Yes,
    /// It will not be sent again, and nothing of it was applied (an answer).
    No,
    /// It will not be sent again, and it may have been applied (a lost `INCR`).
    NoButLanded,
}

/// Sorts the results of requests dispatched together, in order, by the rule at the top of
/// this module. `reads[i]` says whether request `i` is a read; `again(e, i)` what may become
/// of request `i`, failed with `e`. `None`: send it again afresh (a read that succeeded too
/// early).
pub fn order<T, E>(
    results: Vec<Result<T, E>>,
    reads: &[bool],
    again: impl Fn(&E, usize) -> Again,
) -> Vec<Option<Ahead<T, E>>> {
    let Some(first_failure) = results.iter().position(Result::is_err) else {
        return results.into_iter().map(|r| Some(Ahead::First(r))).collect();
    };
    // The last write after the first failure that took effect, or may have and will not be
    // sent again: failures before it are final.
    let last_write = results
        .iter()
        .enumerate()
        .skip(first_failure + 1)
        .filter(|(i, r)| {
            !reads.get(*i).copied().unwrap_or(false)
                && match r {
                    Ok(_) => true,
                    Err(e) => again(e, *i) == Again::NoButLanded,
                }
        })
        .map(|(i, _)| i)
        .last();
    // The failure that waits out the outage: the first one after the last such write.
    let waits = match last_write {
        Some(w) => results
            .iter()
            .enumerate()
            .skip(w + 1)
            .find(|(_, r)| r.is_err())
            .map_or(usize::MAX, |(i, _)| i),
        None => first_failure,
    };
    results
        .into_iter()
        .enumerate()
        .map(|(i, result)| {
            let read = reads.get(i).copied().unwrap_or(false);
            match result {
                Ok(value) if i < first_failure || !read => Some(Ahead::First(Ok(value))),
                // A read past a failure: it may not have seen that request's effect.
                Ok(_) => None,
                Err(e) if last_write.is_some_and(|w| i < w) => Some(Ahead::Overtaken(e)),
                // The first failure after the last write waits out the outage; the ones
                // behind it need not wait again.
                Err(e) if i > waits && again(&e, i) == Again::Yes => Some(Ahead::Again(e)),
                Err(e) => Some(Ahead::First(Err(e))),
            }
        })
        .collect()
}

impl Session {
    /// Sends the first dispatches of `run` (at least two requests of this client, all for
    /// `backend`, all reads or all writes, each to be answered in fast mode) together, and
    /// returns what each of them left, in order; empty when nothing was sent together. The
    /// backend may send only the run's leading part (a Cluster cuts it where the node
    /// changes): then only that part is returned, and the rest is handled after it.
    pub async fn send_ahead<B: Dispatch>(
        &self,
        backend: &B,
        acquire_timeout: Duration,
        run: &[&Command],
    ) -> Vec<Option<Ahead<Reply, BackendError>>> {
        if run.len() < 2 {
            return Vec::new();
        }
        let requests: Vec<Request<'_>> = run
            .iter()
            .map(|command| Request {
                raw: command.raw.as_ref(),
                placement: placement(command.spec, command.class, &self.pin),
                // On a Cluster a run goes to the node of each request's first key, not of
                // its first argument (`OBJECT ENCODING k`, `XINFO STREAM k`).
                route: command.keys().next().map(|key| key.as_ref()),
                ..Request::new(&command.args, self.proto, self.pin.load(Ordering::Relaxed))
            })
            .collect();
        let Some(results) = backend.dispatch_batch(&requests, acquire_timeout).await else {
            return Vec::new();
        };
        let reads: Vec<bool> = run
            .iter()
            .map(|command| command.class == Idempotence::Read)
            .collect();
        order(results, &reads, |e, i| {
            let Some(command) = run.get(i) else {
                return Again::No;
            };
            let class = classify(e);
            if Policy::retryable(class, command.class).is_ok() {
                Again::Yes
            } else if class == ErrorClass::Transient && command.class != Idempotence::Read {
                Again::NoButLanded
            } else {
                Again::No
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(out: &[Option<Ahead<u32, &'static str>>]) -> Vec<String> {
        out.iter()
            .map(|a| match a {
                None => "again".to_string(),
                Some(Ahead::First(Ok(v))) => format!("ok {v}"),
                Some(Ahead::First(Err(e))) => format!("retry {e}"),
                Some(Ahead::Overtaken(e)) => format!("final {e}"),
                Some(Ahead::Again(e)) => format!("again after {e}"),
            })
            .collect()
    }

    fn always(_: &&str, _: usize) -> Again {
        Again::Yes
    }

    #[test]
    fn all_succeeded_all_stand() {
        let out = order::<u32, &str>(vec![Ok(1), Ok(2), Ok(3)], &[false, true, false], always);
        assert_eq!(shape(&out), ["ok 1", "ok 2", "ok 3"]);
    }

    #[test]
    fn a_dead_connection_fails_the_rest_and_only_the_first_waits_it_out() {
        let results = vec![Ok(1), Err("io"), Err("io"), Err("io")];
        let out = order::<u32, &str>(results, &[false; 4], always);
        // The failed ones behind the first keep their failure: it counts as their first
        // attempt (a lost reply may have been applied).
        assert_eq!(
            shape(&out),
            ["ok 1", "retry io", "again after io", "again after io"]
        );
        // A failure that must not be repeated (an INCR's lost reply) goes on from its result.
        let results = vec![Err("io"), Err("answer"), Err("io")];
        let out = order::<u32, &str>(results, &[false; 3], |_, i| {
            if i == 1 {
                Again::No
            } else {
                Again::Yes
            }
        });
        assert_eq!(shape(&out), ["retry io", "retry answer", "again after io"]);
    }

    #[test]
    fn a_later_write_that_may_have_landed_and_stays_makes_the_failures_before_it_final() {
        // SET (lost), INCR (lost: may have landed, never sent again), SET (lost). Retrying
        // the first SET would land it after the INCR (seed 27 of tests/offline/simulation.rs).
        let results: Vec<Result<u32, &str>> = vec![Err("io"), Err("io"), Err("io")];
        let out = order::<u32, &str>(results, &[false; 3], |_, i| {
            if i == 1 {
                Again::NoButLanded
            } else {
                Again::Yes
            }
        });
        assert_eq!(shape(&out), ["final io", "retry io", "retry io"]);
    }

    #[test]
    fn reads_past_a_failure_are_sent_again() {
        // SET (READONLY), GET, GET: the reads ran before the write was applied.
        let out = order::<u32, &str>(vec![Err("ro"), Ok(2), Ok(3)], &[false, true, true], always);
        assert_eq!(shape(&out), ["retry ro", "again", "again"]);
    }

    #[test]
    fn a_write_that_took_effect_past_a_failure_makes_the_failure_final() {
        // k fails, k+1 (a write) succeeds: k cannot be applied after it.
        let results = vec![Ok(1), Err("tryagain"), Ok(3), Err("io"), Ok(5), Err("late")];
        let reads = [false, false, false, false, true, false];
        let out = order::<u32, &str>(results, &reads, always);
        assert_eq!(
            shape(&out),
            [
                "ok 1",
                "final tryagain",
                "ok 3",
                "retry io",
                "again",
                "again after late"
            ]
        );
    }
}
