//! A mirror's worker: takes the jobs its mirror queued, in queue order, into rounds of lanes
//! ([`MirrorWorker::round`], a pure rule with its table test), and applies, compares and
//! checks them on the mirror's backend.

use super::{
    beyond_its_keys, compare, copy, diff, heal, mark_at, Mirror, MirrorJob, MirrorProgress, Sides,
    DIFFERENCE_LOG_EVERY, LANES, LANE_JOBS, WINDOW,
};
use crate::backend::Reply;
use crate::command::Command;
use crate::exec::{Ended, Session};
use crate::metrics as m;
use crate::namespace::Namespace;
use crate::resp::Proto;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// The worker: applies, compares and checks, each key's jobs in queue order.
pub(super) struct MirrorWorker {
    pub(super) sides: Arc<Sides>,
    pub(super) progress: Arc<MirrorProgress>,
    /// When a difference was last logged.
    pub(super) last_logged: Mutex<Option<tokio::time::Instant>>,
}

impl MirrorJob {
    /// The shards of the keys it touches; None: it touches keys it does not name (a
    /// keyless write, a script), and runs alone.
    fn shards(&self) -> Option<Vec<usize>> {
        let keys: Vec<Bytes> = match self {
            MirrorJob::Apply { alone: true, .. } => return None,
            MirrorJob::Apply { keys, .. } => keys.clone(),
            MirrorJob::Compare { args, .. } => match Command::parse(args.clone()) {
                Ok(c) if beyond_its_keys(&c) => return None,
                Ok(c) => c.keys().cloned().collect(),
                Err(_) => Vec::new(),
            },
            MirrorJob::Check { key, .. } => vec![key.clone()],
        };
        (!keys.is_empty()).then(|| keys.iter().map(|k| Mirror::shard_of(k)).collect())
    }
}

impl MirrorWorker {
    /// Takes jobs in queue order into up to [`LANES`] lanes on distinct shards, each lane's
    /// jobs run one after the other and the lanes at once. A job joins the lane that holds
    /// its shards (a new lane if none does), unless its shards are spread over two lanes or
    /// taken by a job before it that waits for the next round. So each key's jobs run in
    /// queue order, a slow backend (a database committing) applies many keys at a time, and
    /// a hot key's writes queued behind each other are applied in one round, not one a round.
    pub(super) async fn run(self, mut rx: mpsc::Receiver<MirrorJob>) {
        // What is queued is applied while the runtime lasts.
        let mut sessions: Vec<(Session, watch::Sender<bool>)> =
            (0..LANES).map(|_| self.sides.session()).collect();
        let mut waiting: VecDeque<MirrorJob> = VecDeque::new();
        loop {
            if waiting.is_empty() {
                match rx.recv().await {
                    Some(job) => waiting.push_back(job),
                    None => return,
                }
            }
            while waiting.len() < WINDOW {
                let Ok(job) = rx.try_recv() else { break };
                waiting.push_back(job);
            }
            let round = Self::round(&mut waiting);
            m::mirror_queued(&self.sides.primary.name, rx.len() + waiting.len());
            let this = &self;
            let runs =
                round
                    .into_iter()
                    .zip(sessions.iter_mut())
                    .map(|(lane, (session, _))| async move {
                        for job in lane {
                            this.one(session, job).await;
                            this.progress.done_one();
                        }
                    });
            futures_util::future::join_all(runs).await;
        }
    }

    /// The lanes of the next round, their jobs taken out of `waiting`.
    fn round(waiting: &mut VecDeque<MirrorJob>) -> Vec<Vec<MirrorJob>> {
        let mut lanes: Vec<(HashSet<usize>, Vec<MirrorJob>)> = Vec::with_capacity(LANES);
        let mut blocked = HashSet::new();
        let mut left = VecDeque::with_capacity(waiting.len());
        while let Some(job) = waiting.pop_front() {
            let Some(shards) = job.shards() else {
                // A keyless job runs alone, after everything before it.
                if lanes.is_empty() && left.is_empty() {
                    lanes.push((HashSet::new(), vec![job]));
                } else {
                    left.push_back(job);
                }
                break;
            };
            let holding: Vec<usize> = (0..lanes.len())
                .filter(|&l| shards.iter().any(|s| lanes[l].0.contains(s)))
                .collect();
            let lane = match holding[..] {
                _ if shards.iter().any(|s| blocked.contains(s)) => None,
                [] if lanes.len() < LANES => {
                    lanes.push((HashSet::new(), Vec::new()));
                    Some(lanes.len() - 1)
                }
                [l] if lanes[l].1.len() < LANE_JOBS => Some(l),
                _ => None,
            };
            match lane {
                Some(l) => {
                    lanes[l].0.extend(shards);
                    lanes[l].1.push(job);
                }
                None => {
                    blocked.extend(shards);
                    left.push_back(job);
                }
            }
        }
        left.append(waiting);
        *waiting = left;
        lanes.into_iter().map(|(_, jobs)| jobs).collect()
    }

    async fn one(&self, session: &mut Session, job: MirrorJob) {
        match job {
            MirrorJob::Apply {
                commands,
                keys,
                heals,
                at,
                ..
            } => {
                let mut all = true;
                for args in commands {
                    if !self.apply(session, args).await {
                        all = false;
                        mark_at(&self.progress, &self.sides.primary.name, &keys, at);
                    }
                }
                if let (true, Some(at)) = (all, heals) {
                    heal(&self.progress, &self.sides.primary.name, &keys, at);
                }
            }
            MirrorJob::Compare {
                args,
                primary,
                proto,
            } => {
                session.proto = proto;
                self.compare(session, args, primary).await;
                session.proto = Proto::Resp2;
            }
            MirrorJob::Check { key, primary, done } => {
                let target = &self.sides.target;
                let found = match copy::snapshot(&self.sides, session, target, &key).await {
                    Ok(mirrored) => diff::diff(&primary, &mirrored),
                    Err(_) => Some(diff::Difference::Unanswered),
                };
                let _ = done.send(found);
            }
        }
    }

    /// Applies one command on the mirror: whether the mirror took it.
    async fn apply(&self, session: &mut Session, args: Vec<Bytes>) -> bool {
        let Ok(command) = Command::parse(args) else {
            m::mirror_applied(&self.sides.primary.name, "error");
            return false;
        };
        let (reply, outcome) = session
            .execute(&self.sides.budget, &self.sides.target, &command, None)
            .await;
        let ok = outcome.ended == Ended::Ok;
        m::mirror_applied(&self.sides.primary.name, if ok { "ok" } else { "error" });
        if !ok {
            let said = reply.into_frame();
            tracing::debug!(
                namespace = self.sides.primary.name.as_str(),
                command = command.spec.name,
                reply = ?said,
                "the mirror did not apply a write; its keys are marked to be copied again"
            );
        }
        ok
    }

    async fn read(
        &self,
        session: &mut Session,
        on: &Namespace,
        command: &Command,
    ) -> Option<Reply> {
        let (reply, outcome) = session.execute(&self.sides.budget, on, command, None).await;
        (outcome.ended == Ended::Ok).then_some(reply)
    }

    /// Whether the mirror answers `command` otherwise than `first`; an answer that agrees,
    /// or none, is counted here.
    async fn mirror_differs(
        &self,
        session: &mut Session,
        command: &Command,
        first: &Frame,
    ) -> bool {
        let Some(mirrored) = self.read(session, &self.sides.target, command).await else {
            m::mirror_compared(&self.sides.primary.name, "unanswered");
            return false;
        };
        if compare::agree(command.spec.name, first, &mirrored.into_frame()) {
            m::mirror_compared(&self.sides.primary.name, "same");
            return false;
        }
        true
    }

    /// Compares the mirror's reply to a read with the primary's, confirming a difference.
    async fn compare(&self, session: &mut Session, args: Vec<Bytes>, primary: Reply) {
        let Ok(command) = Command::parse(args) else {
            return;
        };
        let name = command.spec.name;
        let first = primary.into_frame();
        if !self.mirror_differs(session, &command, &first).await {
            return;
        }
        // Confirmed only if the primary still says the same and the mirror still differs.
        let again = self.read(session, &self.sides.primary, &command).await;
        if !again.is_some_and(|r| compare::agree(name, &first, &r.into_frame())) {
            m::mirror_compared(&self.sides.primary.name, "changing");
            return;
        }
        if !self.mirror_differs(session, &command, &first).await {
            return;
        }
        m::mirror_compared(&self.sides.primary.name, "different");
        m::mirror_difference(&self.sides.primary.name, command.label());
        let now = tokio::time::Instant::now();
        let due = {
            let mut last = self.last_logged.lock().unwrap_or_else(|p| p.into_inner());
            let due = last.is_none_or(|at| now.duration_since(at) >= DIFFERENCE_LOG_EVERY);
            if due {
                *last = Some(now);
            }
            due
        };
        if due {
            let key = command
                .keys()
                .next()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .unwrap_or_default();
            tracing::warn!(
                namespace = self.sides.primary.name.as_str(),
                mirror = self.sides.target.backend.name(),
                command = name,
                key = key.as_str(),
                "the mirror answers this read differently from the primary"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(key: &str) -> MirrorJob {
        // "!a": a script naming "a", which may touch keys it does not name.
        let (alone, key) = match key.strip_prefix('!') {
            Some(named) => (true, named),
            None => (false, key),
        };
        MirrorJob::Apply {
            commands: Vec::new(),
            alone,
            heals: None,
            at: 0,
            // "a,b": a job on two keys; "": one without keys.
            keys: key
                .split(',')
                .filter(|k| !k.is_empty())
                .map(|k| Bytes::copy_from_slice(k.as_bytes()))
                .collect(),
        }
    }

    fn keys(jobs: &[MirrorJob]) -> Vec<String> {
        jobs.iter()
            .map(|j| match j {
                MirrorJob::Apply { keys, .. } if keys.is_empty() => "-".into(),
                MirrorJob::Apply {
                    keys, alone: true, ..
                } => format!("!{}", String::from_utf8_lossy(&keys[0])),
                MirrorJob::Apply { keys, .. } => keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect::<Vec<_>>()
                    .join(","),
                _ => "?".into(),
            })
            .collect()
    }

    fn rounds(jobs: &[&str]) -> Vec<Vec<Vec<String>>> {
        let mut waiting: VecDeque<MirrorJob> = jobs.iter().map(|k| job(k)).collect();
        let mut rounds = Vec::new();
        while !waiting.is_empty() {
            let round = MirrorWorker::round(&mut waiting);
            rounds.push(round.iter().map(|lane| keys(lane)).collect());
        }
        rounds
    }

    fn lanes(round: &[&[&str]]) -> Vec<Vec<String>> {
        round
            .iter()
            .map(|lane| lane.iter().map(|k| k.to_string()).collect())
            .collect()
    }

    #[test]
    fn a_round_puts_each_key_s_jobs_in_one_lane_and_stops_at_a_keyless_one() {
        // "a,e" joins the lane of "a" and brings "e" into it; "d" waits behind the keyless job.
        assert_eq!(
            rounds(&["a", "b", "a", "c", "a,e", "e", "", "d"]),
            vec![
                lanes(&[&["a", "a", "a,e", "e"], &["b"], &["c"]]),
                lanes(&[&["-"]]),
                lanes(&[&["d"]]),
            ]
        );
    }

    #[test]
    fn a_job_on_two_lanes_waits_and_so_does_every_later_job_on_its_keys() {
        // "a,b" waits for the next round; the "a" and "b" behind it wait too, "c" does not.
        assert_eq!(
            rounds(&["a", "b", "a,b", "a", "b", "c"]),
            vec![
                lanes(&[&["a"], &["b"], &["c"]]),
                lanes(&[&["a,b", "a", "b"]]),
            ]
        );
    }

    #[test]
    fn a_script_runs_alone_between_the_jobs_before_and_after_it() {
        // A script may write "b" or "c" without naming them: nothing passes it either way.
        assert_eq!(
            rounds(&["a", "b", "!a", "c", "b"]),
            vec![
                lanes(&[&["a"], &["b"]]),
                lanes(&[&["!a"]]),
                lanes(&[&["c"], &["b"]]),
            ]
        );
    }

    #[test]
    fn a_full_lane_ends_its_key_s_share_of_the_round() {
        let mut jobs = vec!["a"; LANE_JOBS + 2];
        jobs.insert(LANE_JOBS + 1, "b");
        let rounds = rounds(&jobs);
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0][0].len(), LANE_JOBS);
        assert_eq!(rounds[0][1], vec!["b".to_string()]);
        assert_eq!(rounds[1], vec![vec!["a".to_string(); 2]]);
    }

    #[test]
    fn at_most_lanes_keys_run_at_once() {
        let names: Vec<String> = (0..LANES + 3).map(|i| format!("k{i}")).collect();
        let jobs: Vec<&str> = names.iter().map(String::as_str).collect();
        let rounds = rounds(&jobs);
        assert_eq!(rounds[0].len(), LANES);
        assert_eq!(rounds[1].len(), 3);
    }
}
