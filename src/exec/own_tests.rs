//! The rules of `own.rs` as tables, and its transaction and `WATCH` against a scripted
//! connection.

use super::*;
use crate::error::{LinkError, LinkErrorKind};
use std::collections::VecDeque;

fn frame(text: &str) -> Frame {
    match text {
        "nil" => Frame::Null,
        "err" => Frame::SimpleError {
            data: "WRONGTYPE no".into(),
            attributes: None,
        },
        n if n.parse::<i64>().is_ok() => Frame::Number {
            data: n.parse().unwrap_or_default(),
            attributes: None,
        },
        value => Frame::BlobString {
            data: Bytes::copy_from_slice(value.as_bytes()),
            attributes: None,
        },
    }
}

fn array(items: &[&str]) -> Frame {
    Frame::Array {
        data: items.iter().map(|i| frame(i)).collect(),
        attributes: None,
    }
}

#[test]
fn a_write_waits_only_when_it_took_effect() {
    use Effect::*;
    // (effect, reply, waits)
    let cases = [
        (Takes, frame("v"), true),
        (Takes, array(&["list", "v"]), true),
        // A blocking pop that timed out took nothing; one refused applied nothing.
        (Takes, frame("nil"), false),
        (Takes, frame("err"), false),
        (Writes, frame("OK"), true),
        // `SET k v GET` on an absent key wrote, and answers nil.
        (Writes, frame("nil"), true),
        (Writes, frame("err"), false),
        // A script may have written before it raised.
        (Scripted, frame("err"), true),
        (Scripted, frame("nil"), true),
        // XREAD … BLOCK: a read, whatever it returns.
        (Nothing, array(&["stream"]), false),
    ];
    for (effect, reply, waits) in cases {
        assert_eq!(took_effect(effect, &reply), waits, "{effect:?} {reply:?}");
    }
}

#[test]
fn a_transaction_waits_when_one_of_its_writes_took_effect() {
    use Effect::*;
    // (queued commands' effects, EXEC's reply, waits)
    let cases: [(&[Effect], Frame, bool); 9] = [
        (&[Writes], array(&["OK"]), true),
        (&[Nothing, Writes], array(&["v", "1"]), true),
        (&[Nothing, Nothing], array(&["v", "nil"]), false),
        // The write failed at run time (WRONGTYPE), the read ran.
        (&[Writes, Nothing], array(&["err", "v"]), false),
        (&[Writes, Writes], array(&["err", "1"]), true),
        // A script that raised may have written.
        (&[Scripted, Nothing], array(&["err", "v"]), true),
        (&[Writes], array(&["nil"]), true),
        // A WATCHed key changed: nothing ran.
        (&[Writes], frame("nil"), false),
        // A reply of an unexpected shape: assume everything ran.
        (&[Nothing, Writes], array(&["v"]), true),
    ];
    for (effects, reply, waits) in cases {
        assert_eq!(
            transaction_took_effect(effects, &reply),
            waits,
            "{effects:?} {reply:?}"
        );
    }
}

#[test]
fn short_of_its_replicas_a_write_is_in_doubt() {
    let heard = |waited: Result<Frame, BackendError>| match acknowledged(frame("OK"), 2, waited) {
        Ok(reply) => format!("ok {reply:?}"),
        Err(Failure::InDoubt(g)) => format!("indoubt {}", g.last),
        Err(Failure::Unavailable(g)) => format!("unavailable {}", g.last),
        Err(Failure::Answer(e, ..)) => format!("answer {e}"),
    };
    assert!(heard(Ok(frame("2"))).starts_with("ok "));
    assert!(heard(Ok(frame("3"))).starts_with("ok "));
    assert_eq!(
        heard(Ok(frame("1"))),
        "indoubt the write reached 1 replicas of the 2 required"
    );
    assert_eq!(
        heard(Ok(frame("err"))),
        "indoubt the write reached 0 replicas of the 2 required"
    );
    // WAIT refused or never sent: still applied on the primary, so in doubt, never
    // "not applied" and never the error as if it were the write's answer.
    for failed in [
        BackendError::reply(Bytes::from_static(b"ERR WAIT cannot be used")),
        BackendError::AcquireTimeout {
            waited: std::time::Duration::ZERO,
        },
    ] {
        assert_eq!(
            heard(Err(failed)),
            "indoubt the write was applied, but waiting for 2 replicas failed"
        );
    }
}

/// What a scripted connection answers, in order.
type Answers = Vec<Result<Frame, BackendError>>;

/// A connection that answers from a script and records what was sent.
#[derive(Default)]
struct Scripted {
    answers: VecDeque<Result<Frame, BackendError>>,
    sent: Vec<String>,
    closed: u32,
}

impl Scripted {
    fn answering(answers: Answers) -> Scripted {
        Scripted {
            answers: answers.into(),
            ..Scripted::default()
        }
    }
}

impl OwnLink for Scripted {
    async fn send(&mut self, args: &[Bytes], _blocking: bool) -> Result<Frame, BackendError> {
        let words: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        self.sent.push(words.join(" "));
        self.answers.pop_front().unwrap_or_else(|| Ok(frame("OK")))
    }

    async fn close(&mut self) {
        self.closed += 1;
    }
}

fn lost() -> BackendError {
    BackendError::Sent {
        source: LinkError::new(LinkErrorKind::Io, "reset"),
    }
}

fn refused() -> BackendError {
    BackendError::Connect {
        source: LinkError::new(LinkErrorKind::Io, "refused"),
    }
}

fn command(text: &str) -> Command {
    let args = text
        .split(' ')
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    Command::parse(args).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

fn heard(result: &Result<impl std::fmt::Debug, Failure<BackendError>>) -> &'static str {
    match result {
        Ok(_) => "reply",
        Err(Failure::Answer(..)) => "answer",
        Err(Failure::Unavailable(_)) => "unavailable",
        Err(Failure::InDoubt(_)) => "indoubt",
    }
}

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// A WATCH whose connection failed is lost: the EXEC after it answers nil and sends nothing;
/// one whose connection stood sends the transaction.
#[test]
fn an_exec_after_its_watch_was_lost_sends_nothing() {
    run(async {
        let mut own = Own::default();
        let mut link = Scripted::default();
        assert_eq!(
            heard(&own.watch(&mut link, &command("WATCH k").args).await),
            "reply"
        );
        assert!(own.watching());
        // A blocking command's reply lost on the same connection: closed, the WATCH with it.
        link.answers.push_back(Err(lost()));
        let pop = own.alone(&mut link, &command("BLPOP l 0"), None).await;
        assert_eq!(heard(&pop), "indoubt");
        assert_eq!(link.closed, 1);
        assert!(own.watch_lost() && !own.watching());
        let sent = link.sent.len();
        let exec = own.transaction(&mut link, &[command("INCR n")], None).await;
        assert!(matches!(exec, Ok(None)), "{exec:?}");
        assert_eq!(link.sent.len(), sent, "nothing sent: {:?}", link.sent);
        assert!(
            !own.watch_lost(),
            "forgotten after the EXEC that answered it"
        );

        // A server's error reply leaves the connection, and the WATCH, standing.
        let mut link = Scripted::default();
        own.watch(&mut link, &command("WATCH k").args).await.ok();
        link.answers
            .push_back(Err(BackendError::reply(Bytes::from_static(b"WRONGTYPE x"))));
        let pop = own.alone(&mut link, &command("BLPOP l 0"), None).await;
        assert_eq!(heard(&pop), "answer");
        assert_eq!(link.closed, 0);
        link.answers
            .extend([Ok(frame("OK")), Ok(frame("QUEUED")), Ok(array(&["1"]))]);
        let exec = own.transaction(&mut link, &[command("INCR n")], None).await;
        assert!(matches!(exec, Ok(Some(_))), "{exec:?}");
        assert_eq!(
            link.sent,
            ["WATCH k", "BLPOP l 0", "MULTI", "INCR n", "EXEC"]
        );
    });
}

/// Where a transaction fails says what the client hears: before EXEC was sent nothing was
/// applied; at EXEC a transaction that writes may have been, one of reads not.
#[test]
fn a_transaction_is_in_doubt_only_once_its_exec_was_sent() {
    run(async {
        let writes = [command("INCR n")];
        let reads = [command("GET n")];
        let cases: Vec<(Answers, &[Command], &str)> = vec![
            (vec![Err(refused())], &writes, "unavailable"),
            (vec![Err(lost())], &writes, "unavailable"),
            (vec![Ok(frame("OK")), Err(lost())], &writes, "unavailable"),
            (
                vec![Ok(frame("OK")), Ok(frame("QUEUED")), Err(lost())],
                &writes,
                "indoubt",
            ),
            (
                vec![Ok(frame("OK")), Ok(frame("QUEUED")), Err(lost())],
                &reads,
                "unavailable",
            ),
            (
                vec![Ok(frame("OK")), Ok(frame("QUEUED")), Err(refused())],
                &writes,
                "unavailable",
            ),
            // Refused at queueing: EXEC answers EXECABORT, an answer.
            (
                vec![
                    Ok(frame("OK")),
                    Err(BackendError::reply(Bytes::from_static(b"ERR wrong"))),
                    Err(BackendError::reply(Bytes::from_static(b"EXECABORT x"))),
                ],
                &writes,
                "answer",
            ),
            (
                vec![Ok(frame("OK")), Ok(frame("QUEUED")), Ok(array(&["1"]))],
                &writes,
                "reply",
            ),
        ];
        for (answers, queue, want) in cases {
            let shown = format!("{answers:?}");
            let mut own = Own::default();
            let mut link = Scripted::answering(answers);
            let result = own.transaction(&mut link, queue, None).await;
            assert_eq!(heard(&result), want, "{shown}");
        }
    });
}

/// A pop that took something waits for its replicas on the same connection; short of them
/// it is in doubt; one that took nothing, or a read, sends no WAIT.
#[test]
fn a_pop_that_took_something_waits_for_its_replicas() {
    run(async {
        let replicas = Some((1, Duration::from_millis(100)));
        for (command_text, reply, wait, want) in [
            ("BLPOP l 0", array(&["l", "v"]), Some(frame("1")), "reply"),
            ("BLPOP l 0", array(&["l", "v"]), Some(frame("0")), "indoubt"),
            ("BLPOP l 1", frame("nil"), None, "reply"),
            ("XREAD BLOCK 0 STREAMS s $", array(&["s"]), None, "reply"),
        ] {
            let mut own = Own::default();
            let mut answers = vec![Ok(reply)];
            answers.extend(wait.clone().map(Ok));
            let mut link = Scripted::answering(answers);
            let result = own.alone(&mut link, &command(command_text), replicas).await;
            assert_eq!(heard(&result), want, "{command_text}");
            assert_eq!(
                link.sent.iter().any(|s| s.starts_with("WAIT")),
                wait.is_some(),
                "{command_text}: {:?}",
                link.sent
            );
        }
    });
}
