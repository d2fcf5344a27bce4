//! The loop against a scripted fake backend, with paused time: the arithmetic of attempts,
//! classes and give-ups, driven through the real `classify`.

use super::*;
use crate::backend::fake::Script;
use crate::backend::BackendError;
use crate::config::{BudgetConfig, RetryConfig};
use crate::error::classify;
use crate::error::{LinkError, LinkErrorKind};
use crate::retry::backoff::Backoff;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use Idempotence::*;

fn policy(max_attempts: u32) -> Policy {
    Policy::new(
        Backoff::new(&RetryConfig {
            max_attempts,
            jitter: 0.0,
            ..RetryConfig::default()
        })
        .unwrap(),
    )
}

fn budget() -> RetryBudget {
    RetryBudget::new(&BudgetConfig::default())
}

fn pong() -> Result<Frame, BackendError> {
    Ok(Frame::SimpleString {
        data: Bytes::from_static(b"PONG"),
        attributes: None,
    })
}

fn refused() -> Result<Frame, BackendError> {
    Err(BackendError::Connect {
        source: LinkError::new(LinkErrorKind::Io, "refused"),
    })
}

fn reset_after_send() -> Result<Frame, BackendError> {
    Err(BackendError::Sent {
        source: LinkError::new(LinkErrorKind::Io, "reset"),
    })
}

fn reply(text: &'static str) -> Result<Frame, BackendError> {
    Err(BackendError::reply(Bytes::from_static(text.as_bytes())))
}

/// Records what the loop reports.
#[derive(Default)]
struct Recorder {
    failed: Vec<ErrorClass>,
    retries: u32,
    held: Vec<bool>,
    gave_up: u32,
    denied: u32,
}

impl Hooks for Recorder {
    fn failed(&mut self, class: ErrorClass) {
        self.failed.push(class);
    }
    fn retrying(&mut self, _: ErrorClass, _: u32, _: Duration, _: Duration) {
        self.retries += 1;
    }
    fn budget_denied(&mut self) {
        self.denied += 1;
    }
    fn held(&mut self, holding: bool) {
        self.held.push(holding);
    }
    fn gave_up(
        &mut self,
        _: ErrorClass,
        _: u32,
        _: Duration,
        _: Why,
        _: &(dyn std::error::Error + 'static),
    ) {
        self.gave_up += 1;
    }
}

async fn drive(
    script: &Script,
    idempotence: Idempotence,
    max_attempts: u32,
    hooks: &mut Recorder,
) -> Result<Frame, Failure<BackendError>> {
    let (_keep, mut stop) = tokio::sync::watch::channel(false);
    drive_done(script, idempotence, max_attempts, hooks, &mut stop)
        .await
        .map(|done| done.value)
}

async fn drive_done(
    script: &Script,
    idempotence: Idempotence,
    max_attempts: u32,
    hooks: &mut Recorder,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<super::Done<Frame>, Failure<BackendError>> {
    run(
        &policy(max_attempts),
        &budget(),
        idempotence,
        |e: &BackendError| classify(e),
        hooks,
        stop,
        None,
        0,
        || script.dispatch(),
    )
    .await
}

/// What the reply modes settle: the dispatches that may have been applied before the one
/// that succeeded. A Transient failure counts; a NotAttempted one (turned away) does not;
/// a read never does.
#[tokio::test(start_paused = true)]
async fn success_reports_the_dispatches_that_may_have_been_applied() {
    let (_keep, mut stop) = tokio::sync::watch::channel(false);
    let script = Script::new(vec![
        reset_after_send(),
        refused(),
        reply("READONLY You can't write against a read only replica."),
        reset_after_send(),
        pong(),
    ]);
    let mut hooks = Recorder::default();
    let done = drive_done(&script, IdempotentEffect, 15, &mut hooks, &mut stop)
        .await
        .unwrap();
    assert_eq!(done.maybe_applied, 2);
    let script = Script::new(vec![reset_after_send(), pong()]);
    let done = drive_done(&script, Read, 15, &mut hooks, &mut stop)
        .await
        .unwrap();
    assert_eq!(done.maybe_applied, 0);
}

#[tokio::test(start_paused = true)]
async fn success_first_time_neither_retries_nor_holds() {
    let script = Script::new(vec![pong()]);
    let mut hooks = Recorder::default();
    assert!(drive(&script, NonIdempotent, 15, &mut hooks).await.is_ok());
    assert_eq!(script.dispatches(), 1);
    assert_eq!(hooks.retries, 0);
    assert!(hooks.held.is_empty());
}

#[tokio::test(start_paused = true)]
async fn not_attempted_is_retried_for_any_command_and_waits_the_backoff() {
    let script = Script::new(vec![refused(), reply("LOADING loading"), pong()]);
    let mut hooks = Recorder::default();
    let start = Instant::now();
    assert!(drive(&script, NonIdempotent, 15, &mut hooks).await.is_ok());
    assert_eq!(script.dispatches(), 3);
    // 200 ms then 400 ms, no jitter.
    assert_eq!(start.elapsed(), Duration::from_millis(600));
    assert_eq!(hooks.failed, vec![ErrorClass::NotAttempted; 2]);
    assert_eq!(hooks.held, vec![true, false]);
}

#[tokio::test(start_paused = true)]
async fn transient_is_retried_for_idempotent_effects() {
    for idempotence in [Read, Idempotent, IdempotentEffect] {
        let script = Script::new(vec![reset_after_send(), pong()]);
        let mut hooks = Recorder::default();
        assert!(
            drive(&script, idempotence, 15, &mut hooks).await.is_ok(),
            "{idempotence:?}"
        );
        assert_eq!(script.dispatches(), 2, "{idempotence:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn transient_is_never_retried_for_a_non_idempotent_command() {
    let script = Script::new(vec![reset_after_send(), pong()]);
    let mut hooks = Recorder::default();
    match drive(&script, NonIdempotent, 15, &mut hooks).await {
        Err(Failure::InDoubt(g)) => {
            assert_eq!(g.attempts, 1);
            assert_eq!(g.why, Why::MustNotRepeat);
        }
        other => panic!("expected INDOUBT, got {other:?}"),
    }
    assert_eq!(script.dispatches(), 1);
    assert_eq!(hooks.gave_up, 1);
}

#[tokio::test(start_paused = true)]
async fn an_answer_is_passed_on_at_once() {
    let script = Script::new(vec![reply("WRONGTYPE Operation against a key"), pong()]);
    let mut hooks = Recorder::default();
    match drive(&script, Read, 15, &mut hooks).await {
        Err(Failure::Answer(BackendError::Reply { prefix, .. }, ..)) => {
            assert_eq!(prefix, "WRONGTYPE")
        }
        other => panic!("expected the answer, got {other:?}"),
    }
    assert_eq!(script.dispatches(), 1);
    assert_eq!(hooks.gave_up, 0);
}

#[tokio::test(start_paused = true)]
async fn exhaustion_without_a_possible_apply_is_unavailable() {
    let script = Script::new((0..5).map(|_| refused()).collect());
    let mut hooks = Recorder::default();
    let start = Instant::now();
    match drive(&script, NonIdempotent, 5, &mut hooks).await {
        Err(Failure::Unavailable(g)) => {
            assert_eq!(g.attempts, 5);
            assert_eq!(g.why, Why::Exhausted);
            assert_eq!(g.class, ErrorClass::NotAttempted);
        }
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
    assert_eq!(script.dispatches(), 5);
    // 0.2 + 0.4 + 0.8 + 1.6
    assert_eq!(start.elapsed(), Duration::from_millis(3000));
    assert_eq!(hooks.held, vec![true, false]);
}

#[tokio::test(start_paused = true)]
async fn one_transient_dispatch_makes_the_give_up_in_doubt() {
    // The transient dispatch may have applied; later refusals prove nothing about it.
    let script = Script::new(vec![reset_after_send(), refused(), refused()]);
    let mut hooks = Recorder::default();
    match drive(&script, Idempotent, 3, &mut hooks).await {
        Err(Failure::InDoubt(g)) => {
            assert_eq!(g.class, ErrorClass::NotAttempted);
            assert_eq!(g.attempts, 3);
        }
        other => panic!("expected INDOUBT, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn connection_bound_commands_are_never_retried() {
    let script = Script::new(vec![refused(), pong()]);
    let mut hooks = Recorder::default();
    assert!(matches!(
        drive(&script, ConnectionBound, 15, &mut hooks).await,
        Err(Failure::Unavailable(_))
    ));
    assert_eq!(script.dispatches(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_skips_dispatches_but_keeps_the_schedule() {
    // No retries allowed at all: every retry is skipped, the request still ends at its cap.
    let budget = RetryBudget::new(&BudgetConfig {
        min_per_second: 0,
        ratio: 0.0,
        ttl: Duration::from_secs(10),
    });
    let script = Script::new(vec![refused(), pong()]);
    let mut hooks = Recorder::default();
    let (_keep, mut stop) = tokio::sync::watch::channel(false);
    let result = run(
        &policy(4),
        &budget,
        Read,
        |e: &BackendError| classify(e),
        &mut hooks,
        &mut stop,
        None,
        0,
        || script.dispatch(),
    )
    .await;
    assert!(matches!(result, Err(Failure::Unavailable(ref g)) if g.attempts == 4));
    assert_eq!(
        script.dispatches(),
        1,
        "the budget must keep the backend from being hit"
    );
    assert_eq!(hooks.denied, 3);
}

#[tokio::test(start_paused = true)]
async fn a_read_is_never_in_doubt() {
    let script = Script::new(vec![reset_after_send(), refused()]);
    let mut hooks = Recorder::default();
    assert!(matches!(
        drive(&script, Read, 2, &mut hooks).await,
        Err(Failure::Unavailable(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_wait_with_a_clear_failure() {
    let script = Script::new((0..15).map(|_| refused()).collect());
    let mut hooks = Recorder::default();
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _ = stop_tx.send(true);
        stop_tx
    });
    let result = run(
        &policy(15),
        &budget(),
        NonIdempotent,
        |e: &BackendError| classify(e),
        &mut hooks,
        &mut stop,
        None,
        0,
        || script.dispatch(),
    )
    .await;
    match result {
        Err(Failure::Unavailable(g)) => assert_eq!(g.why, Why::ShuttingDown),
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
    // Stopped at the signal, not at the end of the ~93 s schedule.
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(hooks.held, vec![true, false]);
    drop(stopper);
}

/// A first dispatch sent ahead with a pipeline that failed after it was written counts as a
/// dispatch that may have been applied: a give-up after it is INDOUBT, never "not applied",
/// and the next dispatch goes at once (the request ahead already waited the outage out).
#[tokio::test(start_paused = true)]
async fn a_prior_failure_counts_and_the_next_dispatch_does_not_wait() {
    for (prior, idempotence, expect_indoubt) in [
        (reset_after_send(), IdempotentEffect, true),
        (reset_after_send(), Read, false),
        (refused(), IdempotentEffect, false),
    ] {
        let script = Script::new(vec![refused(), refused()]);
        let mut hooks = Recorder::default();
        let (_keep, mut stop) = tokio::sync::watch::channel(false);
        let start = Instant::now();
        let prior = prior.err();
        let result = run(
            &policy(2),
            &budget(),
            idempotence,
            |e: &BackendError| classify(e),
            &mut hooks,
            &mut stop,
            prior,
            0,
            || script.dispatch(),
        )
        .await;
        // Two attempts: the prior one and one dispatch, made without a backoff step.
        assert_eq!(script.dispatches(), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
        match result {
            Err(Failure::InDoubt(g)) if expect_indoubt => assert_eq!(g.attempts, 2),
            Err(Failure::Unavailable(g)) if !expect_indoubt => assert_eq!(g.attempts, 2),
            other => panic!("{idempotence:?}: {other:?}"),
        }
    }
}
