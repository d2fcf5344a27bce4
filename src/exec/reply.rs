//! What a client reads when its request did not simply succeed: the text of `UNAVAILABLE`
//! and `INDOUBT`, an answer that may be about an earlier dispatch, a request cut short by
//! shutdown. Error replies hold one line: every text here is flattened to one.

use super::{Dispatch, Ended, Outcome};
use crate::backend::BackendError;
use crate::error::ErrorClass;
use crate::namespace::Namespace;
use crate::retry::{Failure, GaveUp, Why};
use redis_protocol::resp3::types::BytesFrame as Frame;

fn error(text: String) -> Frame {
    Frame::SimpleError {
        data: bytes_utils::Str::from(text),
        attributes: None,
    }
}

/// The answer to a command cut short by the end of shutdown's grace period.
pub fn shutting_down<B: Dispatch>(code: &str, namespace: &Namespace<B>) -> Frame {
    error(format!(
        "{code}: holdfast is shutting down (namespace '{}', backend '{}')",
        namespace.name,
        namespace.backend.name()
    ))
}

/// The reply and the outcome of a request's result.
pub fn failure_reply<B: Dispatch>(
    result: Result<Frame, Failure<BackendError>>,
    namespace: &Namespace<B>,
) -> (Frame, Outcome) {
    let outcome = |ended, attempts, maybe_applied| Outcome {
        ended,
        attempts,
        maybe_applied,
    };
    match result {
        Ok(frame) => (frame, outcome(Ended::Ok, 1, 0)),
        // An error answered to a retry after a dispatch that may have been applied: the
        // bare error would read "not applied" (an `OOM` set between the two, a pool closed
        // under a move to a standby).
        Err(Failure::Answer(answer, maybe_applied, attempts)) if maybe_applied > 0 => (
            error(format!(
                "INDOUBT may have been applied: a retry was answered with an error after a dispatch that may have been applied (namespace '{}', backend '{}', answer: {})",
                namespace.name,
                namespace.backend.name(),
                answer_text(&answer)
            )),
            outcome(Ended::InDoubt, attempts, maybe_applied),
        ),
        Err(Failure::Answer(BackendError::Reply { frame, .. }, _, attempts)) => {
            (*frame, outcome(Ended::Answer, attempts, 0))
        }
        Err(Failure::Answer(other, _, attempts)) => (
            error(format!("ERR holdfast: {}", chain(&other))),
            outcome(Ended::Answer, attempts, 0),
        ),
        Err(Failure::Unavailable(g)) => {
            let o = outcome(Ended::Unavailable, g.attempts, 0);
            (
                error(gave_up_text("UNAVAILABLE", "not applied", &g, namespace)),
                o,
            )
        }
        Err(Failure::InDoubt(g)) => {
            let o = outcome(Ended::InDoubt, g.attempts, g.maybe_applied);
            (
                error(gave_up_text(
                    "INDOUBT",
                    "may have been applied",
                    &g,
                    namespace,
                )),
                o,
            )
        }
    }
}

fn gave_up_text<B: Dispatch>(
    code: &str,
    what: &str,
    g: &GaveUp<BackendError>,
    namespace: &Namespace<B>,
) -> String {
    let class = match g.class {
        ErrorClass::NotAttempted => "not attempted",
        ErrorClass::Transient => "may have been applied",
        ErrorClass::Other => "answered",
    };
    let why = match g.why {
        Why::Exhausted => "retry budget exhausted",
        Why::MustNotRepeat => "not retried",
        Why::ShuttingDown => "holdfast is shutting down",
        Why::Overtaken => "not retried, a later pipelined command having taken effect,",
        Why::Unsettled => "the read that would settle its reply failed",
        Why::WaitedOut => {
            "not held again, a command ahead of it on this connection having waited out the retry budget,"
        }
    };
    format!(
        "{code} {what}: {why} after {} attempt{} in {:.1}s (namespace '{}', backend '{}', last failure {class}: {})",
        g.attempts,
        if g.attempts == 1 { "" } else { "s" },
        g.elapsed.as_secs_f64(),
        namespace.name,
        namespace.backend.name(),
        chain(&g.last)
    )
}

/// The text of a backend's answer: an error reply as the backend wrote it, any other error
/// with its sources.
fn answer_text(answer: &BackendError) -> String {
    match answer {
        BackendError::Reply { frame, .. } => match &**frame {
            Frame::SimpleError { data, .. } => data.to_string(),
            Frame::BlobError { data, .. } => String::from_utf8_lossy(data).into_owned(),
            _ => chain(answer),
        },
        other => chain(other),
    }
    .replace(['\r', '\n'], " ")
}

/// An error and its sources on one line (an error reply cannot hold a newline).
pub use crate::error::in_words as chain;
