//! Group commit's unit tests: the claim rules, and groups run on a real SQLite file.

use super::{claim, give_up, run_of, GroupTokens, Job, Shape};
use super::{CLAIMED, GAVE_UP, QUEUED, TAKEN, WITHDRAWN};
use crate::backend::Proto;
use bytes::Bytes;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

#[test]
fn a_job_is_claimed_or_given_up_never_both() {
    // (state before, give_up's state after, claim's answer and state after)
    let cases = [
        (QUEUED, WITHDRAWN, (false, QUEUED)),
        (TAKEN, GAVE_UP, (true, CLAIMED)),
        (CLAIMED, CLAIMED, (true, CLAIMED)),
        (GAVE_UP, GAVE_UP, (false, GAVE_UP)),
        (WITHDRAWN, WITHDRAWN, (false, WITHDRAWN)),
    ];
    for (before, given_up, (claimed, after)) in cases {
        let state = AtomicU8::new(before);
        give_up(&state);
        assert_eq!(state.load(Ordering::Acquire), given_up, "give up {before}");
        let state = AtomicU8::new(before);
        assert_eq!(claim(&state), claimed, "claim {before}");
        assert_eq!(state.load(Ordering::Acquire), after, "claim {before}");
        // Whichever comes first, the other does not undo it.
        let state = AtomicU8::new(before);
        let won = claim(&state);
        give_up(&state);
        assert_eq!(won, claim(&state), "a claim stands {before}");
        // A submitter that goes (its future dropped) gives up as one that timed out.
        let state = AtomicU8::new(before);
        drop(super::Waiting(&state));
        assert_eq!(state.load(Ordering::Acquire), given_up, "dropped {before}");
    }
}

/// A SQLite backend on a file in `dir`, its schema made.
async fn sqlite(dir: &tempfile::TempDir) -> super::super::SqlBackend {
    use crate::backend::{Backend, Request};
    let path = dir.path().join("g.db");
    let config = crate::config::SqliteConfig::at(path.to_str().unwrap());
    let Ok(Backend::Sql(backend)) = Backend::build(
        "g",
        &crate::config::BackendConfig::Sqlite(config),
        &Arc::default(),
    ) else {
        panic!("a SQLite backend");
    };
    // The schema is made in the background.
    let ping = [Bytes::from_static(b"GET"), Bytes::from_static(b"n")];
    let started = std::time::Instant::now();
    while backend
        .dispatch(
            &Request::new(&ping, Proto::Resp2, 1),
            std::time::Duration::from_secs(5),
        )
        .await
        .is_err()
    {
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    backend
}

/// Each outcome's integer reply; None for an error or another kind of reply.
fn integers(outcomes: Vec<super::GroupOutcome>) -> Vec<Option<i64>> {
    outcomes
        .into_iter()
        .map(|o| match o.ok()?.first()? {
            redis_protocol::resp3::types::BytesFrame::Number { data, .. } => Some(*data),
            _ => None,
        })
        .collect()
}

/// On a real SQLite file: a first dispatch's token is not looked up, a dispatch sent
/// again finds its reply, and a job given up on before its claim is not applied.
#[tokio::test]
async fn a_group_applies_what_is_claimed_and_reads_only_tokens_sent_before() {
    use crate::backend::Request;
    let dir = tempfile::tempdir().unwrap();
    let backend = sqlite(&dir).await;
    let get = [Bytes::from_static(b"GET"), Bytes::from_static(b"n")];
    let read = || async {
        let request = Request::new(&get, Proto::Resp2, 1);
        backend
            .dispatch(&request, std::time::Duration::from_secs(5))
            .await
    };
    let incr = |token: &str, again: bool| Job {
        again,
        ..job(&["INCR", "n"], Some(token), false)
    };
    let inner = &backend.inner;
    let run = |jobs: Vec<(Job, u8)>| async move {
        let (group, states): (Vec<Job>, Vec<Arc<AtomicU8>>) = jobs
            .into_iter()
            .map(|(job, s)| (job, Arc::new(AtomicU8::new(s))))
            .unzip();
        let progress = super::Progress::default();
        let mut held = super::Held::default();
        let outcomes = super::commit_group(inner, &group, &states, &mut held, &progress).await;
        let replies = integers(outcomes);
        let value = match read().await.unwrap() {
            redis_protocol::resp3::types::BytesFrame::BlobString { data, .. } => {
                String::from_utf8_lossy(&data).into_owned()
            }
            other => format!("{other:?}"),
        };
        (replies, value)
    };
    // (what, the group's jobs and their entries' states, each job's reply, n after)
    type Case = (&'static str, Vec<(Job, u8)>, Vec<Option<i64>>, &'static str);
    let cases: Vec<Case> = vec![
        (
            "first dispatch",
            vec![(incr("a", false), TAKEN)],
            vec![Some(1)],
            "1",
        ),
        (
            "sent again",
            vec![(incr("a", true), TAKEN)],
            vec![Some(1)],
            "1",
        ),
        // What a first dispatch skips: the lookup. (The executor never sends a token's
        // first dispatch twice; this shows the read is not made.)
        (
            "not looked up",
            vec![(incr("a", false), TAKEN)],
            vec![Some(2)],
            "2",
        ),
        (
            "given up",
            vec![(incr("b", false), GAVE_UP)],
            vec![None],
            "2",
        ),
        (
            "given up beside a claimed one",
            vec![
                (incr("c", false), GAVE_UP),
                (incr("d", false), TAKEN),
                (incr("c", true), TAKEN),
            ],
            vec![None, Some(3), Some(4)],
            "4",
        ),
        (
            "claimed before",
            vec![(incr("e", false), CLAIMED)],
            vec![Some(5)],
            "5",
        ),
        (
            "and then sent again",
            vec![(incr("e", true), TAKEN)],
            vec![Some(5)],
            "5",
        ),
    ];
    for (what, jobs, replies, value) in cases {
        assert_eq!(run(jobs).await, (replies, value.to_string()), "{what}");
    }
}

/// On a real SQLite file, through both passes of a group (one run of multi-row
/// statements, and a savepoint per request): a reply that proves nothing changed
/// records no token, so its retry applies afresh; any other reply is recorded, and its
/// retry answers it whatever the keys hold by then.
#[tokio::test]
async fn exact_mode_records_no_token_for_a_write_that_changed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sqlite(&dir).await;
    let inner = &backend.inner;
    for careful in [false, true] {
        let pass = if careful { "careful" } else { "optimistic" };
        let run = |jobs: Vec<Job>| async move {
            let states: Vec<Arc<AtomicU8>> = jobs
                .iter()
                .map(|_| Arc::new(AtomicU8::new(TAKEN)))
                .collect();
            let progress = super::Progress::default();
            let outcomes = if careful {
                super::careful(inner, &jobs, &states, &progress).await
            } else {
                let mut held = super::Held::default();
                super::commit_group(inner, &jobs, &states, &mut held, &progress).await
            };
            integers(outcomes)
        };
        let first = |args: &[&str], token: &str| job(args, Some(token), false);
        let again = |args: &[&str], token: &str| Job {
            again: true,
            ..job(args, Some(token), false)
        };
        let t = |name: &str| format!("{pass}-{name}");
        // Keys of each pass's own.
        let (k, j, s) = (
            format!("{pass}:k"),
            format!("{pass}:j"),
            format!("{pass}:s"),
        );
        let (k, j, s) = (k.as_str(), j.as_str(), s.as_str());
        let plain = |args: &[&str]| job(args, None, false);
        // The first case's three requests, sent again with their tokens.
        let retries = || {
            vec![
                again(&["DEL", k], &t("a")),
                again(&["DEL", j], &t("b")),
                again(&["SADD", s, "m"], &t("c")),
            ]
        };
        // (what, the group, each job's reply)
        type Case<'a> = (&'a str, Vec<Job>, Vec<Option<i64>>);
        let cases: Vec<Case> = vec![
            (
                "DELs of absent keys, and a SADD of a member already there",
                vec![
                    plain(&["SADD", s, "m"]),
                    first(&["DEL", k], &t("a")),
                    first(&["DEL", j], &t("b")),
                    first(&["SADD", s, "m"], &t("c")),
                ],
                vec![Some(1), Some(0), Some(0), Some(0)],
            ),
            (
                "the keys written by another client",
                vec![
                    plain(&["SET", k, "1"]),
                    plain(&["SET", j, "1"]),
                    plain(&["SREM", s, "m"]),
                ],
                vec![None, None, Some(1)],
            ),
            (
                "retried: no token, so applied afresh",
                retries(),
                vec![Some(1), Some(1), Some(1)],
            ),
            (
                "retried again: those replies changed something, and were recorded",
                retries(),
                vec![Some(1), Some(1), Some(1)],
            ),
        ];
        for (what, jobs, want) in cases {
            assert_eq!(run(jobs).await, want, "{pass}: {what}");
        }
    }
}

/// The gap between the passes: the optimistic pass claimed a request and rolled back,
/// releasing its key locks, and before the careful pass takes them again a retry of the
/// same request (its token, sent again) is applied by another writer and commits. The
/// careful pass looks for the token under its locks (`apply_exact`: on PostgreSQL a
/// statement of its own, after the locks, so it sees that commit) and answers the
/// retry's reply, applying nothing. In the other order the retry finds the careful
/// pass's token. Either way the request is applied once.
#[tokio::test]
async fn a_retry_applied_between_the_two_passes_is_not_applied_again() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sqlite(&dir).await;
    let inner = &backend.inner;
    let states = |state: u8| vec![Arc::new(AtomicU8::new(state))];
    let progress = super::Progress::default();
    let incr = |key: &str, again: bool| Job {
        again,
        ..job(&["INCR", key], Some(key), false)
    };
    // A group that commits keeps SQLite's one writer connection (`held`); the careful
    // pass opens its own, so none is kept here.
    let group = |jobs: Vec<Job>, state: u8| async move {
        let states: Vec<Arc<AtomicU8>> = jobs
            .iter()
            .map(|_| Arc::new(AtomicU8::new(state)))
            .collect();
        let progress = super::Progress::default();
        integers(
            super::commit_group(
                inner,
                &jobs,
                &states,
                &mut super::Held::default(),
                &progress,
            )
            .await,
        )
    };
    // The retry first, then the careful pass of the claimed first dispatch.
    let retry = group(vec![incr("x", true)], TAKEN).await;
    let careful = super::careful(inner, &[incr("x", false)], &states(CLAIMED), &progress).await;
    assert_eq!((retry, integers(careful)), (vec![Some(1)], vec![Some(1)]));
    // The careful pass first, then the retry.
    let careful = super::careful(inner, &[incr("y", false)], &states(CLAIMED), &progress).await;
    let retry = group(vec![incr("y", true)], TAKEN).await;
    assert_eq!((integers(careful), retry), (vec![Some(1)], vec![Some(1)]));
    // Applied once each: a plain INCR after them counts 2.
    let after = group(
        vec![
            job(&["INCR", "x"], None, false),
            job(&["INCR", "y"], None, false),
        ],
        TAKEN,
    )
    .await;
    assert_eq!(after, vec![Some(2), Some(2)]);
}

fn job(args: &[&str], token: Option<&str>, batch: bool) -> Job {
    Job {
        commands: vec![args.iter().map(|a| Bytes::from(a.to_string())).collect()],
        proto: Proto::Resp2,
        batch,
        token: token.map(|t| t.as_bytes().to_vec()),
        again: false,
    }
}

/// How many jobs from the start of `jobs` go into one run of the first one's shape.
fn run_length(jobs: &[Job], recorded: &[&str]) -> usize {
    let mut tokens = GroupTokens::default();
    for t in recorded {
        tokens.recorded.insert(t.as_bytes().to_vec(), Vec::new());
    }
    let shape = jobs[0].shape().map(|(s, _)| s);
    run_of(jobs, &tokens, |j| {
        j.shape().filter(|(s, _)| Some(*s) == shape)
    })
    .len()
}

#[test]
fn a_run_stops_where_exact_mode_must_answer_a_job_on_its_own() {
    let sadd = |t| job(&["SADD", "s", "m"], t, false);
    let cases: &[(&str, Vec<Job>, &[&str], usize)] = &[
        (
            "fast mode",
            vec![sadd(None), sadd(None), sadd(None)],
            &[],
            3,
        ),
        (
            "tokens of their own",
            vec![sadd(Some("a")), sadd(Some("b"))],
            &[],
            2,
        ),
        (
            "a recorded reply answers its job",
            vec![sadd(Some("a")), sadd(Some("b")), sadd(Some("c"))],
            &["b"],
            1,
        ),
        (
            "a retry behind its first attempt",
            vec![sadd(Some("a")), sadd(Some("b")), sadd(Some("a"))],
            &[],
            2,
        ),
        (
            "another shape",
            vec![sadd(None), job(&["HSET", "h", "f", "v"], None, false)],
            &[],
            1,
        ),
        (
            "a MULTI",
            vec![sadd(None), job(&["SADD", "s", "m"], None, true)],
            &[],
            1,
        ),
        (
            "HSET without a value",
            vec![
                job(&["HSET", "h", "f", "v"], None, false),
                job(&["HSET", "h", "f"], None, false),
            ],
            &[],
            1,
        ),
        (
            "DEL and UNLINK are one shape",
            vec![
                job(&["DEL", "a"], None, false),
                job(&["UNLINK", "b", "c"], None, false),
            ],
            &[],
            2,
        ),
    ];
    for (what, jobs, recorded, want) in cases {
        assert_eq!(run_length(jobs, recorded), *want, "{what}");
    }
    assert!(matches!(
        job(&["DEL", "a"], None, false).shape(),
        Some((Shape::Del, _))
    ));
}

#[test]
fn increments_that_join_a_run_and_those_that_answer_alone() {
    let min = i64::MIN.to_string();
    let max = i64::MAX.to_string();
    let cases: &[(&[&str], Option<i64>)] = &[
        (&["INCR", "k"], Some(1)),
        (&["decr", "k"], Some(-1)),
        (&["INCRBY", "k", "5"], Some(5)),
        (&["INCRBY", "k", "-5"], Some(-5)),
        (&["DECRBY", "k", "5"], Some(-5)),
        (&["DECRBY", "k", &max], Some(-i64::MAX)),
        (&["INCRBY", "k", &min], Some(i64::MIN)),
        // Their errors are answered on their own.
        (&["DECRBY", "k", &min], None),
        (&["INCRBY", "k", "x"], None),
        (&["INCRBY", "k", "1.5"], None),
        (&["INCRBY", "k"], None),
        (&["INCR", "k", "1"], None),
        (&["INCRBYFLOAT", "k", "1"], None),
    ];
    for (args, want) in cases {
        let job = job(args, None, false);
        assert_eq!(job.increment().map(|(_, by)| by), *want, "{args:?}");
        assert_eq!(
            matches!(job.shape(), Some((Shape::Incr, _))),
            want.is_some(),
            "{args:?}"
        );
    }
    assert_eq!(job(&["INCR", "k"], None, true).increment(), None, "a MULTI");
}
