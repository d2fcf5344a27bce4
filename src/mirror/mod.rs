//! A namespace's mirror (`[namespaces.mirror]`, docs/moving.md): every write its backend
//! (the primary) applied is replayed, in the order the primary answered them, on a second
//! backend, so that the namespace can be copied there, verified and cut over while it
//! serves. The client is answered from the primary alone, before its write reaches the
//! mirror: requests are handed to one worker per mirror through a bounded queue, and a slow
//! or stopped mirror fills the queue rather than holding a client. A write that finds the
//! queue full, or that the mirror refused, or whose effect on the primary is not known
//! (`rewrite::Recopy`), leaves its keys marked to be copied again: the mirror is "behind"
//! until a copy has carried them, and a cut-over is refused meanwhile.
//!
//! With `reads = "compare"` a read is sent to the mirror too, after the client has its reply
//! (`compare.rs` says how replies are compared). A difference is confirmed before it is
//! counted: the primary is read again and must still say what it said (a key written
//! meanwhile proves nothing), and the mirror read again must still differ.

pub mod compare;
pub mod copy;
pub mod diff;
mod ends;
pub mod rewrite;
mod worker;

pub use ends::{CutOverRefused, MirrorEnds, Mirrors};

use crate::backend::{Backend, Reply};
use crate::command::Command;
use crate::config::{BudgetConfig, MirrorConfig, MirrorReads};
use crate::exec::{Ended, Session};
use crate::metrics as m;
use crate::namespace::Namespace;
use crate::resp::Proto;
use crate::retry::budget::RetryBudget;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use rewrite::Mirrored;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedMutexGuard};
use worker::MirrorWorker;

/// Keys remembered to be copied again; past this many, every key of the namespace is.
const RECOPY_KEYS_MAX: usize = 1 << 20;

/// At most one difference logged per this long, per namespace.
const DIFFERENCE_LOG_EVERY: Duration = Duration::from_secs(1);

/// Keys the mirror may not have right, to be copied again.
#[derive(Debug, Default)]
pub struct Recopy {
    /// These keys, each with when it was last marked (`MirrorProgress::seq`).
    pub keys: HashMap<Bytes, u64>,
    /// Every key of the namespace (too many to list, or a write without keys).
    pub all: bool,
}

impl Recopy {
    /// Keys marked, -1 for every key (as `holdfast_mirror_recopy_keys` shows it).
    pub fn count(&self) -> i64 {
        if self.all {
            -1
        } else {
            self.keys.len() as i64
        }
    }

    /// Whether nothing is to be copied again.
    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }
}

/// What the worker is handed.
enum MirrorJob {
    /// Commands to apply, and the request's keys, marked if they fail. A copy's
    /// `RESTORE` heals: once applied, its key's marks from before it was queued (at `heals`)
    /// are gone, since what those writes did is in the copy.
    Apply {
        commands: Vec<Vec<Bytes>>,
        keys: Vec<Bytes>,
        /// It touches keys it does not name (a script): it runs alone.
        alone: bool,
        heals: Option<u64>,
        /// When it was queued (`MirrorProgress::seq`): a failure marks its keys as of then.
        at: u64,
    },
    /// A read to send to the mirror and compare with the primary's reply, in `proto`.
    Compare {
        args: Vec<Bytes>,
        primary: Reply,
        proto: Proto,
    },
    /// A key's value and time to live as the primary held them when this job was queued,
    /// to compare with the mirror's once every write queued before it is applied.
    Check {
        key: Bytes,
        primary: diff::Snapshot,
        done: oneshot::Sender<Option<diff::Difference>>,
    },
}

/// How many locks a namespace's keys are spread over (`Mirror::writing`).
const SHARDS: usize = 256;

/// Jobs on distinct keys a mirror's worker runs at once.
const LANES: usize = 32;

/// Jobs the worker looks over for a round.
const WINDOW: usize = 1024;

/// Jobs one lane runs in a round: a round ends with its longest lane.
const LANE_JOBS: usize = 64;

/// The two ends of a mirror, as namespaces on their backends, and the retry budget their
/// replayed commands and copies share.
pub(crate) struct Sides {
    pub(crate) primary: Namespace,
    pub(crate) target: Namespace,
    pub(crate) budget: RetryBudget,
    script_limit: Duration,
}

impl Sides {
    /// An executor session for the mirror's own requests: never given up for a shutdown,
    /// scripts replayed as the primary ran them.
    pub(crate) fn session(&self) -> (Session, watch::Sender<bool>) {
        let (keep, give_up) = watch::channel(false);
        let mut session = Session::new(0, give_up);
        let gate: Arc<dyn crate::backend::lua::Gate> = Arc::new(Replayed(self.script_limit));
        session.script = Some(gate);
        (session, keep)
    }
}

/// What the connections and the worker share.
struct MirrorProgress {
    /// Jobs queued or running, and requests that may still queue one ([`MirrorTicket`]s).
    pending: AtomicUsize,
    /// Told each time `pending` falls.
    settled: Notify,
    /// Whether the last write found the queue full (logged once per spell).
    dropping: AtomicBool,
    /// Orders marks and copies: each takes the next.
    seq: std::sync::atomic::AtomicU64,
    /// A request of a namespace cut over to this mirror found it ready: later ones need
    /// not wait.
    ready: AtomicBool,
    /// A namespace cut over to this mirror is about to be answered from it: no request
    /// may take a ticket any more (it would run on the old primary after the cut-over).
    closed: AtomicBool,
    /// Held by the request that checks, for all, whether a namespace cut over to this
    /// mirror may be answered from it (`Mirror::ready`).
    readying: tokio::sync::Mutex<()>,
    recopy: Mutex<Recopy>,
}

impl MirrorProgress {
    fn done_one(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
        self.settled.notify_waiters();
    }
}

/// Why a request of a namespace cut over to a mirror cannot run there yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// Writes queued for the mirror are still being applied.
    Waiting,
    /// The mirror missed writes (their keys are marked to be copied again).
    Behind,
}

/// A request's [`MirrorTicket`] and its keys' shards, held until it is handed to the mirror:
/// what dropping it lets go.
pub struct MirrorHold {
    _ticket: MirrorTicket,
    _shards: Vec<OwnedMutexGuard<()>>,
}

/// A request on its way through the primary: until dropped, the mirror is not settled.
pub struct MirrorTicket(Arc<MirrorProgress>);

impl Drop for MirrorTicket {
    fn drop(&mut self) {
        self.0.done_one();
    }
}

/// One namespace's mirror.
pub struct Mirror {
    /// The mirrored namespace.
    pub namespace: String,
    /// The mirror's backend name.
    pub backend: String,
    /// The namespace's own backend.
    pub primary: Arc<Backend>,
    /// The mirror's backend.
    pub target: Arc<Backend>,
    config: MirrorConfig,
    /// The namespace's key prefixes (none: the catch-all), which a copy walks.
    pub prefixes: Vec<Bytes>,
    tx: mpsc::Sender<MirrorJob>,
    progress: Arc<MirrorProgress>,
    sides: Arc<Sides>,
    /// A write holds its keys' shards from before its dispatch until it is queued, and so
    /// does a copy or a check of a key: a key's writes reach the primary one at a time and
    /// are queued in the order it applied them, and a key's snapshot is in one order with
    /// them (`copy.rs`).
    shards: Vec<Arc<tokio::sync::Mutex<()>>>,
}

/// Lets a replayed script call what it called on the primary, where it was checked.
struct Replayed(Duration);

impl crate::backend::lua::Gate for Replayed {
    fn check(&self, _args: &[Bytes]) -> Option<String> {
        None
    }

    fn limit(&self) -> Duration {
        self.0
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Mirror {
    /// Starts the mirror of `primary` on `target` (a namespace on the mirror's backend, of the
    /// same name and policy), its worker on the current Tokio runtime.
    pub fn start(
        config: &MirrorConfig,
        prefixes: &[String],
        (primary, target): (Namespace, Namespace),
        budget: &BudgetConfig,
        script_limit: Duration,
    ) -> Arc<Mirror> {
        let (tx, rx) = mpsc::channel(config.queue);
        let progress = Arc::new(MirrorProgress {
            pending: AtomicUsize::new(0),
            settled: Notify::new(),
            dropping: AtomicBool::new(false),
            seq: std::sync::atomic::AtomicU64::new(0),
            ready: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            readying: tokio::sync::Mutex::new(()),
            recopy: Mutex::new(Recopy::default()),
        });
        let sides = Arc::new(Sides {
            primary,
            target,
            budget: RetryBudget::new(budget),
            script_limit,
        });
        let mirror = Arc::new(Mirror {
            namespace: sides.primary.name.clone(),
            backend: config.backend.clone(),
            primary: sides.primary.backend.clone(),
            target: sides.target.backend.clone(),
            config: config.clone(),
            prefixes: prefixes
                .iter()
                .map(|p| Bytes::copy_from_slice(p.as_bytes()))
                .collect(),
            tx,
            progress: progress.clone(),
            sides: sides.clone(),
            shards: (0..SHARDS)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
        });
        m::mirror_queued(&mirror.namespace, 0);
        let worker = MirrorWorker {
            sides,
            progress,
            last_logged: Mutex::new(None),
        };
        // Outside a runtime (a configuration checked offline) nothing is started; writes
        // then find the queue full and are marked to be copied again.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(worker.run(rx));
        }
        mirror
    }

    /// Whether `config` and `prefixes` describe this mirror.
    pub fn is(&self, config: &MirrorConfig, prefixes: &[String]) -> bool {
        self.config == *config
            && self.prefixes.len() == prefixes.len()
            && self
                .prefixes
                .iter()
                .zip(prefixes)
                .all(|(a, b)| a[..] == *b.as_bytes())
    }

    fn shard_of(key: &[u8]) -> usize {
        let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
        (hash % SHARDS as u64) as usize
    }

    /// Held by writes from before their dispatch until they are queued for the mirror: the
    /// shards of the keys of those of `commands` that write, taken in one order; every shard
    /// for a write that may touch keys it does not name (`beyond_its_keys`). Two concurrent
    /// writes of one key would otherwise be queued in the order their replies came back,
    /// which need not be the order the primary applied them (two pooled connections).
    pub async fn writing(&self, commands: &[&Command]) -> Vec<OwnedMutexGuard<()>> {
        self.lock_shards(held_shards(commands)).await
    }

    /// Locks `shards` in ascending order, as every holder takes them: no two requests wait
    /// for each other in a circle.
    async fn lock_shards(&self, mut shards: Vec<usize>) -> Vec<OwnedMutexGuard<()>> {
        shards.sort_unstable();
        shards.dedup();
        let mut held = Vec::with_capacity(shards.len());
        for shard in shards {
            held.push(self.shards[shard].clone().lock_owned().await);
        }
        held
    }

    /// Held by a request of the namespace from before its dispatch until [`Mirror::after`]:
    /// the mirror is settled only when no request may still queue a write. None once a
    /// namespace cut over to this mirror is to be answered from it ([`Mirror::ready`]): a
    /// request that took its configuration generation before that reload runs under the
    /// current one instead. (Taken, then checked, against `ready`'s close, then check:
    /// one of the two sees the other.)
    pub fn ticket(&self) -> Option<MirrorTicket> {
        self.progress.pending.fetch_add(1, Ordering::SeqCst);
        let ticket = MirrorTicket(self.progress.clone());
        (!self.progress.closed.load(Ordering::SeqCst)).then_some(ticket)
    }

    /// What a request holds from before its dispatch until it is handed to the mirror
    /// ([`Mirror::after`]): its ticket, and its writes' keys (`writing`). A command that may
    /// block (`BLPOP`, `XREADGROUP … BLOCK`: connection-bound) is held without its keys
    /// and takes them once answered ([`Mirror::answered`]): held while it waits, they would
    /// hold the write it waits for. (Inside a transaction nothing blocks.) None: the
    /// namespace was cut over to this mirror (`ticket`).
    pub async fn hold(&self, commands: &[&Command]) -> Option<MirrorHold> {
        let ticket = self.ticket()?;
        Some(MirrorHold {
            _ticket: ticket,
            _shards: self.writing(commands).await,
        })
    }

    /// For a request answered, before it is handed to the mirror: the shards it must hold
    /// meanwhile that it did not take before its dispatch.
    /// - A command that may block: its keys. The write that woke it held them until it was
    ///   queued, so the pop it ended in is queued after the push it took.
    /// - A read to be compared: its keys (every key, for a script). A write the primary
    ///   applied before this read holds them until it is queued, so the comparison is queued
    ///   after it: without this, a write applied but not yet queued made the mirror look
    ///   behind, the primary said the same when read again, and a difference was counted
    ///   that was none.
    pub async fn answered(&self, command: &Command) -> Vec<OwnedMutexGuard<()>> {
        if command.class == crate::command::table::Idempotence::ConnectionBound {
            self.writing(&[command]).await
        } else if !command.writes() && self.compares(command) {
            self.lock_shards(reach_shards(command)).await
        } else {
            Vec::new()
        }
    }

    /// Whether reads like `command` are compared on the mirror.
    fn compares(&self, command: &Command) -> bool {
        self.config.reads == MirrorReads::Compare
            && compare::compared(command.spec.name) != compare::Compared::Never
    }

    /// Hands the mirror what `command`, answered `reply` by the primary and ending as
    /// `ended`, needs there.
    pub fn after(&self, command: &Command, reply: &Reply, ended: Ended, proto: Proto) {
        if !command.writes() {
            let compare = ended == Ended::Ok && self.compares(command);
            // Comparisons give way to writes: none is queued past half the queue.
            if compare && self.tx.capacity() > self.config.queue / 2 {
                self.push(MirrorJob::Compare {
                    args: command.args.clone(),
                    primary: reply.clone(),
                    proto,
                });
            }
            return;
        }
        if !self.config.writes {
            return;
        }
        match rewrite::mirrored(command, reply, ended, now_ms()) {
            Mirrored::Skip => {}
            Mirrored::Send(commands) => self.push(MirrorJob::Apply {
                commands,
                keys: command.keys().cloned().collect(),
                alone: beyond_its_keys(command),
                heals: None,
                at: 0,
            }),
            Mirrored::Recopy => {
                tracing::debug!(
                    namespace = self.namespace.as_str(),
                    command = command.spec.name,
                    reply = ?reply.clone().into_frame(),
                    "a write's effect on the primary is not known; its keys are marked to be copied again"
                );
                let keys: Vec<Bytes> = command.keys().cloned().collect();
                mark(&self.progress, &self.namespace, &keys);
            }
        }
    }

    /// A transaction's commands, each as if sent alone, in the order it ran them: with its
    /// own element of `EXEC`'s reply, or, for a transaction that failed, ending as that says.
    pub fn after_transaction(
        &self,
        queue: &[Command],
        replies: Result<&Frame, Ended>,
        proto: Proto,
    ) {
        match replies {
            Ok(Frame::Array { data, .. }) => {
                for (item, command) in data.iter().zip(queue) {
                    let failed =
                        matches!(item, Frame::SimpleError { .. } | Frame::BlobError { .. });
                    let ended = if failed { Ended::Answer } else { Ended::Ok };
                    self.after(command, &item.clone().into(), ended, proto);
                }
            }
            // A nil EXEC: a watched key changed, nothing ran.
            Ok(_) => {}
            Err(ended) => {
                for command in queue {
                    self.after(command, &Frame::Null.into(), ended, proto);
                }
            }
        }
    }

    fn push(&self, mut job: MirrorJob) {
        self.progress.pending.fetch_add(1, Ordering::AcqRel);
        if let MirrorJob::Apply { at, .. } = &mut job {
            *at = self.progress.seq.fetch_add(1, Ordering::AcqRel);
        }
        match self.tx.try_send(job) {
            Ok(()) => {
                self.progress.dropping.store(false, Ordering::Relaxed);
                m::mirror_queued(&self.namespace, self.config.queue - self.tx.capacity());
            }
            Err(refused) => {
                self.progress.done_one();
                let job = match refused {
                    mpsc::error::TrySendError::Full(job)
                    | mpsc::error::TrySendError::Closed(job) => job,
                };
                if let MirrorJob::Apply { keys, .. } = job {
                    m::mirror_dropped(&self.namespace);
                    if !self.progress.dropping.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            namespace = self.namespace.as_str(),
                            mirror = self.backend.as_str(),
                            queue = self.config.queue,
                            "mirror queue full: writes are not replayed, their keys are marked to be copied again"
                        );
                    }
                    mark(&self.progress, &self.namespace, &keys);
                }
            }
        }
    }

    /// Requests queued, and keys marked to be copied again (-1: every key).
    pub fn status(&self) -> (usize, i64) {
        let recopy = self.lock();
        let marked = recopy.count();
        (self.config.queue - self.tx.capacity(), marked)
    }

    /// Whether some keys are to be copied again.
    pub fn behind(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The keys to copy again, taken (a copy that fails marks them again).
    pub fn take_recopy(&self) -> Recopy {
        let taken = std::mem::take(&mut *self.lock());
        m::mirror_behind(&self.namespace, 0);
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recopy> {
        self.progress
            .recopy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// For a request of the namespace cut over to this mirror: Ok once every write queued
    /// for it, or on its way, is applied (waiting at most `limit`), and none was missed.
    /// Keys the mirror missed meanwhile (a write it refused while catching up) are copied
    /// from the old primary first, which still holds them and is no longer written; only
    /// a mirror that missed every key (`Recopy::all`), or a copy that fails, leaves it behind.
    /// One request at a time does this; the others wait for it, all within `limit`.
    ///
    /// # Errors
    /// [`NotReady`]: the request is not to run on the mirror's backend.
    pub async fn ready(&self, limit: Duration) -> Result<(), NotReady> {
        if self.is_ready() {
            return Ok(());
        }
        let checked = async {
            let _one = self.progress.readying.lock().await;
            if self.is_ready() {
                return Ok(());
            }
            self.settle_closed().await;
            if self.behind() {
                // The copies are queued as writes are: settled once they are applied.
                let copied = self.recopy().await;
                if !matches!(copied, Ok(Some(_))) {
                    return Err(NotReady::Behind);
                }
                self.settle_closed().await;
                if self.behind() {
                    return Err(NotReady::Behind);
                }
            }
            self.progress.ready.store(true, Ordering::Release);
            Ok(())
        };
        tokio::time::timeout(limit, checked)
            .await
            .unwrap_or(Err(NotReady::Waiting))
    }

    /// Waits until the mirror is settled with no request of an earlier generation able to
    /// start on the old primary any more (one that took its ticket before is waited for).
    async fn settle_closed(&self) {
        self.settle().await;
        self.progress.closed.store(true, Ordering::SeqCst);
        self.settle().await;
    }

    /// Whether a namespace cut over to this mirror found it ready once.
    pub fn is_ready(&self) -> bool {
        self.progress.ready.load(Ordering::Acquire)
    }

    /// Waits until no write is queued, running or on its way (true), or `limit` passes
    /// (false).
    pub async fn settled(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.settle()).await.is_ok()
    }

    /// Waits until no write is queued, running or on its way.
    async fn settle(&self) {
        loop {
            let notified = self.progress.settled.notified();
            if self.progress.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Marks `keys` (every key when there are none) to be copied again, as of now.
fn mark(progress: &MirrorProgress, namespace: &str, keys: &[Bytes]) {
    let at = progress.seq.fetch_add(1, Ordering::AcqRel);
    mark_at(progress, namespace, keys, at);
}

/// Marks `keys` to be copied again as of `at`: a copy queued after `at` heals them.
fn mark_at(progress: &MirrorProgress, namespace: &str, keys: &[Bytes], at: u64) {
    let mut recopy = progress.recopy.lock().unwrap_or_else(|p| p.into_inner());
    if keys.is_empty() || recopy.keys.len() + keys.len() > RECOPY_KEYS_MAX {
        recopy.all = true;
        recopy.keys.clear();
    } else if !recopy.all {
        for key in keys {
            let marked = recopy.keys.entry(key.clone()).or_insert(at);
            *marked = (*marked).max(at);
        }
    }
    let count = recopy.count();
    m::mirror_behind(namespace, count);
}

/// Unmarks `keys` marked before `at`: a copy of them queued at `at` was applied.
fn heal(progress: &MirrorProgress, namespace: &str, keys: &[Bytes], at: u64) {
    let mut recopy = progress.recopy.lock().unwrap_or_else(|p| p.into_inner());
    for key in keys {
        if recopy.keys.get(key).is_some_and(|marked| *marked < at) {
            recopy.keys.remove(key);
        }
    }
    let count = recopy.count();
    m::mirror_behind(namespace, count);
}

/// Whether `command` may touch keys it does not name: a script or a function calls
/// commands on keys built from its arguments (BullMQ's job hashes), `SORT … BY` reads keys
/// its pattern names. Ordered by its named keys alone, it could pass or be passed by a write
/// of one of the others on the mirror, so it runs alone there, and a copy of any key waits
/// for it. So does a write that names no key (`SCRIPT LOAD`, `FUNCTION LOAD`, `FLUSHDB`):
/// what it changes, every later write of any key may depend on.
fn beyond_its_keys(command: &Command) -> bool {
    command.spec.reach != crate::command::table::Reach::Keys || command.keys().next().is_none()
}

/// The shards `commands` (one request, or a transaction's) hold from before their dispatch
/// until they are queued for the mirror: the keys' shards of those that write, every shard
/// if one of them goes `beyond_its_keys`. Without every shard for a `SCRIPT LOAD`, a second
/// client's `EVALSHA`, answered by the primary once the load was applied there, could be
/// queued before the load and meet `NOSCRIPT` on the mirror. What the mirror is never sent
/// (`rewrite::never_sent`: a `SCRIPT KILL`, a `PUBLISH`) holds nothing: a kill must reach the
/// script that holds every shard, and a message is not the namespace's data.
fn held_shards(commands: &[&Command]) -> Vec<usize> {
    commands
        .iter()
        .filter(|c| c.writes() && !rewrite::never_sent(c))
        .flat_map(|c| reach_shards(c))
        .collect()
}

/// The shards of the keys `command` may touch: its keys', or every shard when it goes
/// `beyond_its_keys`. (Unsorted, repeats kept: `lock_shards` sorts and dedups.)
fn reach_shards(command: &Command) -> Vec<usize> {
    if beyond_its_keys(command) {
        (0..SHARDS).collect()
    } else {
        command.keys().map(|k| Mirror::shard_of(k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lines: &[&str]) -> Vec<usize> {
        let commands: Vec<Command> = lines
            .iter()
            .map(|l| {
                let args = l.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes()));
                Command::parse(args.collect()).expect("a command in the table")
            })
            .collect();
        let refs: Vec<&Command> = commands.iter().collect();
        let mut shards = held_shards(&refs);
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    #[test]
    fn a_write_holds_its_keys_a_keyless_write_or_a_script_every_key_a_kill_none() {
        let every: Vec<usize> = (0..SHARDS).collect();
        let of = |keys: &[&str]| {
            let mut shards: Vec<usize> = keys
                .iter()
                .map(|k| Mirror::shard_of(k.as_bytes()))
                .collect();
            shards.sort_unstable();
            shards.dedup();
            shards
        };
        let rows: Vec<(&[&str], Vec<usize>)> = vec![
            (&["GET a"], vec![]),
            (&["SET a 1"], of(&["a"])),
            (&["MSET a 1 b 2"], of(&["a", "b"])),
            (&["SET a 1", "GET b", "DEL c"], of(&["a", "c"])),
            (&["EVALSHA x 1 a"], every.clone()),
            (&["SORT a BY w_* STORE d"], every.clone()),
            // What every later write may depend on.
            (&["SCRIPT LOAD return"], every.clone()),
            (&["FUNCTION LOAD code"], every.clone()),
            (&["FLUSHDB"], every.clone()),
            (&["SET a 1", "SCRIPT FLUSH"], every.clone()),
            // Never sent to the mirror: a kill must reach the script holding every shard.
            (&["SCRIPT KILL"], vec![]),
            (&["FUNCTION KILL"], vec![]),
            (&["PUBLISH c m"], vec![]),
        ];
        for (lines, want) in rows {
            assert_eq!(held(lines), want, "{lines:?}");
        }
    }
}
