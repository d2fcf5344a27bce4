//! The request executor: a parsed command, routed to its namespace, in; the reply frame and
//! its [`Outcome`] out. Everything between the two that decides what a client hears after a
//! fault lives here:
//!
//! - the reply mode's plan (`settle.rs`: fast, settled with reads, exact with a token);
//! - the retry loop's attempt (one dispatch through the [`Dispatch`] seam), the retry
//!   budget, and the abandon of a dispatch still in flight when shutdown's grace is over;
//! - pipelined first dispatches sent ahead together and the order rule for their failures
//!   (`ahead.rs`);
//! - a client's requests queued behind one that gave up after its whole schedule: they
//!   waited as long, so they get one attempt more each (`Policy::behind`), not a schedule
//!   each, until the backend answers or the client sends anew;
//! - the text of `UNAVAILABLE` and `INDOUBT` (`reply.rs`) and the per-request metrics hooks
//!   (`hooks.rs`).
//!
//! Backends are reached through [`Dispatch`], statically dispatched: holdfast's own
//! [`Backend`], and in tests a simulated world (`tests/offline/simulation.rs`). Connection-bound
//! commands (a client's own backend connection: blocking commands, `WATCH`, `MULTI`/`EXEC`)
//! are decided in `own.rs`, through its own seam, and answered in the same words
//! ([`failure_reply`]).

pub mod ahead;
mod hooks;
pub mod own;
mod reply;
pub mod settle;

pub use ahead::Ahead;
pub use hooks::RequestHooks;
pub use reply::{chain, failure_reply, shutting_down};

use crate::backend::{Backend, BackendError, Blocking, Placement, Reply, Request};
use crate::command::table::{self, Idempotence, Spec};
use crate::command::Command;
use crate::config::ReplyMode;
use crate::error::{classify, ErrorClass};
use crate::metrics as m;
use crate::namespace::Namespace;
use crate::resp::Proto;
use crate::retry::budget::RetryBudget;
use crate::retry::{self, Done, Failure, GaveUp, Why};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use settle::{Plan, Settle};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the executor needs of a backend: the seam a simulated world stands in for in tests.
/// Statically dispatched: the connection's executor is built for [`Backend`] alone.
pub trait Dispatch: Send + Sync + 'static {
    /// The configured name (error texts, metric labels).
    fn name(&self) -> &str;

    /// Whether a command of `argc` arguments can run in exact mode here; if not, it is
    /// settled instead.
    fn takes_token(&self, argc: usize) -> bool;

    /// Whether the backend runs scripts itself and records a script's reply with its token
    /// in the script's own transaction (SQL), so a script runs in exact mode whatever keys
    /// it declares.
    fn runs_scripts(&self) -> bool {
        false
    }

    /// Whether [`Dispatch::dispatch_batch`] sends requests together.
    fn pipelines(&self) -> bool;

    /// Sends one request; `acquire_timeout` bounds the wait for a connected connection.
    fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> impl Future<Output = Result<Reply, BackendError>> + Send;

    /// First attempts of a client's pipelined requests, sent together in order: all of them,
    /// or a leading part, with one result each; None when nothing was sent together.
    fn dispatch_batch(
        &self,
        requests: &[Request<'_>],
        acquire_timeout: Duration,
    ) -> impl Future<Output = Option<Vec<Result<Reply, BackendError>>>> + Send;
}

impl Dispatch for Backend {
    fn name(&self) -> &str {
        Backend::name(self)
    }

    fn takes_token(&self, argc: usize) -> bool {
        Backend::takes_token(self, argc)
    }

    fn runs_scripts(&self) -> bool {
        matches!(self, Backend::Sql(_))
    }

    fn pipelines(&self) -> bool {
        Backend::pipelines(self)
    }

    fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> impl Future<Output = Result<Reply, BackendError>> + Send {
        Backend::dispatch(self, request, acquire_timeout)
    }

    fn dispatch_batch(
        &self,
        requests: &[Request<'_>],
        acquire_timeout: Duration,
    ) -> impl Future<Output = Option<Vec<Result<Reply, BackendError>>>> + Send {
        Backend::dispatch_batch(self, requests, acquire_timeout)
    }
}

/// How a request ended, as metrics and logs label it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The backend's reply, not an error.
    Ok,
    /// The backend's error reply (or holdfast's, for a command it cannot serve), passed on.
    Answer,
    /// `UNAVAILABLE`: nothing was applied.
    Unavailable,
    /// `INDOUBT`: a dispatch may have been applied.
    InDoubt,
}

impl Ended {
    /// The metric label (`holdfast_requests_total{outcome}`).
    pub fn label(self) -> &'static str {
        match self {
            Ended::Ok => "ok",
            Ended::Answer => "error_reply",
            Ended::Unavailable => "unavailable",
            Ended::InDoubt => "indoubt",
        }
    }
}

/// A request's outcome: how it ended, the dispatches it took (skipped ones, the retry budget
/// being empty, included) and how many of them may have been applied without their reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// How it ended.
    pub ended: Ended,
    /// Attempts as the retry schedule counts them: every dispatch of the command, and the
    /// failed ones of a settled request's reads (0: refused at shutdown before any).
    pub attempts: u32,
    /// Dispatches that failed after they may have been applied.
    pub maybe_applied: u32,
}

impl Outcome {
    fn of(ended: Ended) -> Outcome {
        Outcome {
            ended,
            attempts: 0,
            maybe_applied: 0,
        }
    }
}

/// What a request handled by one client connection is doing, as the connection needs to know
/// it to notice a client that closes while its command is held.
#[derive(Default)]
pub struct Activity {
    /// A dispatch has failed: the command may be held for a while.
    pub failed: AtomicBool,
    /// A dispatch is in flight.
    pub in_flight: AtomicBool,
}

/// How long a dispatch in flight when shutdown's grace period ends may still take.
const IN_FLIGHT_AT_SHUTDOWN: Duration = Duration::from_secs(1);

/// A wait that ends [`IN_FLIGHT_AT_SHUTDOWN`] after shutdown's grace period is over.
type Abandon = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

fn abandon_after(mut give_up: watch::Receiver<bool>) -> Abandon {
    Box::pin(async move {
        if give_up.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(IN_FLIGHT_AT_SHUTDOWN).await;
    })
}

/// This process, in exact-mode tokens: random at start, so two holdfasts (or two runs of
/// one) never share a token.
fn instance() -> u64 {
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(rand::random)
}

/// Exact-mode token `n` of process `instance`, for client `id`: tokens sort by `n`.
fn token_of(instance: u64, n: u64, id: u64) -> String {
    format!("{instance:016x}:{n:016x}:{id}")
}

/// A new exact-mode token for client `id`'s request.
pub fn new_token(id: u64) -> String {
    token_of(instance(), next_token(), id)
}

/// The next of this process's exact-mode tokens (with [`instance`], unique).
fn next_token() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Which shared backend connection a request may take: a read any, a write any (and the
/// client's pin goes with it), a command about its connection (`WAIT`) the pinned one.
pub fn placement<'a>(spec: &Spec, class: Idempotence, pin: &'a AtomicU64) -> Placement<'a> {
    if spec.pinned {
        Placement::Pinned
    } else if class == Idempotence::Read {
        Placement::Joins
    } else {
        Placement::Moves(pin)
    }
}

/// One client's executor: what its requests share.
pub struct Session {
    /// The client's id (`CLIENT ID`): part of its exact-mode tokens.
    id: u64,
    /// The client's protocol: replies come back in it.
    pub proto: Proto,
    /// Which of a backend's shared connections this client is pinned to: its id at first,
    /// then wherever its last write went ([`Placement`]).
    pin: AtomicU64,
    /// Turns true when shutdown's grace period is over.
    give_up: watch::Receiver<bool>,
    /// Ends [`IN_FLIGHT_AT_SHUTDOWN`] after `give_up` turns true: what abandons a dispatch in
    /// flight then. Made on the first dispatch and kept for the session, not waited on anew
    /// for each request, which would join the channel on every request.
    abandon: Option<Abandon>,
    /// What the request being executed is doing.
    activity: Arc<Activity>,
    /// Namespaces where a request of this client gave up after its whole retry schedule:
    /// the requests that were queued behind it meanwhile had their wait too, and get one
    /// attempt more each (`Policy::behind`), not a schedule each, until one succeeds or the
    /// client sends anew ([`Session::new_requests`]).
    waited_out: Vec<String>,
    /// Whether the request being executed is one of those.
    behind: bool,
    /// What a script the request runs may call, when its backend runs scripts itself (SQL):
    /// set by the connection for that request.
    pub script: Option<Arc<dyn crate::backend::lua::Gate>>,
}

/// What one request's retry loop needs to know about it.
struct Attempted<'a> {
    args: &'a [Bytes],
    /// `args` as the client encoded them.
    raw: Option<&'a Bytes>,
    class: Idempotence,
    spec: &'static Spec,
    token: Option<&'a [u8]>,
    /// Failed attempts the request made already (a settled request's reads).
    made: u32,
}

/// How a retried dispatch ended when it did not succeed.
enum Stopped {
    /// The retry loop's failure.
    Failed(Failure<BackendError>),
    /// Shutdown abandoned it in flight: the reply and how it ended.
    Abandoned(Frame, Ended),
}

impl Session {
    /// The executor of client `id`; `give_up` turns true when shutdown's grace is over.
    pub fn new(id: u64, give_up: watch::Receiver<bool>) -> Session {
        Session {
            id,
            proto: Proto::Resp2,
            pin: AtomicU64::new(id),
            give_up,
            abandon: None,
            activity: Arc::default(),
            waited_out: Vec::new(),
            behind: false,
            script: None,
        }
    }

    /// The connection reads the client's socket for new requests: those were sent after
    /// the replies written so far, and get a whole retry schedule again. (What the client
    /// sent before that and is still buffered, in holdfast or in the kernel, waited with the
    /// request that gave up.)
    pub fn new_requests(&mut self) {
        if !self.waited_out.is_empty() {
            self.waited_out.clear();
        }
    }

    /// Notes how a request on `namespace` ended: a give-up after the whole schedule puts
    /// the requests behind it behind (`waited_out`); a reply from the backend, a success or
    /// an answer, ends that (the outage is over). One that was behind and gave up says why.
    fn ended<B: Dispatch>(
        &mut self,
        namespace: &Namespace<B>,
        result: &mut Result<Done<Reply>, Stopped>,
    ) {
        let behind = std::mem::take(&mut self.behind);
        let failure = match result {
            Ok(_) => {
                if behind {
                    self.waited_out.retain(|name| *name != namespace.name);
                }
                return;
            }
            Err(Stopped::Failed(failure)) => failure,
            Err(Stopped::Abandoned(..)) => return,
        };
        match failure {
            Failure::Unavailable(g) | Failure::InDoubt(g) if g.why == Why::Exhausted => {
                if behind {
                    g.why = Why::WaitedOut;
                } else if !self.waited_out.contains(&namespace.name) {
                    self.waited_out.push(namespace.name.clone());
                }
            }
            // Answered: the backend is back.
            Failure::Answer(..) if behind => {
                self.waited_out.retain(|name| *name != namespace.name);
            }
            _ => {}
        }
    }

    /// What the request being executed is doing, for the connection to watch.
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    /// Whether shutdown's grace period is over: nothing new is sent.
    pub fn giving_up(&self) -> bool {
        *self.give_up.borrow()
    }

    /// Executes `command` on `namespace`'s backend under the namespace's reply mode, going on
    /// from what its first dispatch, sent ahead with its pipeline, left (`sent`). Not for
    /// connection-bound commands, which are the connection's.
    pub async fn execute<B: Dispatch>(
        &mut self,
        budget: &RetryBudget,
        namespace: &Namespace<B>,
        command: &Command,
        sent: Option<Ahead<Reply, BackendError>>,
    ) -> (Reply, Outcome) {
        let label = command.label();
        // Once shutdown's grace period is over, nothing new is sent. A request sent ahead
        // with its pipeline was sent already: it goes on from what that left, and is not
        // sent again (simulation seed 655 found one answered "not applied" after its first
        // dispatch had been).
        let sent = match sent {
            None if self.giving_up() => {
                let frame = shutting_down("UNAVAILABLE not applied", namespace);
                return (frame.into(), Outcome::of(Ended::Unavailable));
            }
            Some(Ahead::Again(prior)) if self.giving_up() => Some(Ahead::First(Err(prior))),
            sent => sent,
        };
        self.behind = self.waited_out.contains(&namespace.name);
        // A request sent ahead was sent in fast mode (only such are): it goes on in fast mode
        // from what that left, even if the namespace's plan for it changed since (exact mode
        // leans on the backend's eviction policy, which a redial may find changed). Planned
        // afresh, its first dispatch would be forgotten: applied again under a new token, or
        // answered "not applied" after it may have been.
        let plan = match sent {
            Some(_) => Plan::Fast,
            None => self.plan(namespace, command),
        };
        let mut result = match plan {
            Plan::Fast => {
                let attempted = Attempted {
                    args: &command.args,
                    raw: command.raw.as_ref(),
                    class: command.class,
                    spec: command.spec,
                    token: None,
                    made: 0,
                };
                let result = match sent {
                    Some(Ahead::Overtaken(e)) => Err(Stopped::Failed(overtaken(
                        e,
                        command.class == Idempotence::Read,
                    ))),
                    Some(Ahead::First(first)) => {
                        self.retried(budget, namespace, attempted, Some(first), None)
                            .await
                    }
                    Some(Ahead::Again(prior)) => {
                        self.retried(budget, namespace, attempted, None, Some(prior))
                            .await
                    }
                    None => self.retried(budget, namespace, attempted, None, None).await,
                };
                if let Ok(done) = &result {
                    if done.maybe_applied > 0 && command.class == Idempotence::IdempotentEffect {
                        m::uncertain_reply(&namespace.name, label);
                    }
                }
                result
            }
            Plan::Exact => {
                // The process's id, then a counter of fixed width: tokens sort in the order
                // they are made, so a SQL backend adds each at the end of its index, not at a
                // random place in it (15 minutes of tokens outgrow SQLite's page cache, and
                // scattered inserts read pages back: exact mode's DEL ran at half fast mode's
                // rate). The client connection's id is there for whoever reads one.
                let token = new_token(self.id);
                // With its token, every dispatch of the request may be repeated: the backend
                // applies it once and answers the first application's reply.
                let attempted = Attempted {
                    args: &command.args,
                    raw: None,
                    class: Idempotence::Idempotent,
                    spec: command.spec,
                    token: Some(token.as_bytes()),
                    made: 0,
                };
                let result = self.retried(budget, namespace, attempted, None, None).await;
                if let Ok(done) = &result {
                    if done.maybe_applied > 0 {
                        m::reply_correction(&namespace.name, label, "exact");
                    }
                }
                result
            }
            Plan::Settled(settle) => {
                self.settled(budget, namespace, command, &settle)
                    .await
                    .map(|done| Done {
                        value: Reply::from(done.value),
                        maybe_applied: done.maybe_applied,
                        attempts: done.attempts,
                    })
            }
        };
        self.ended(namespace, &mut result);
        match result {
            Ok(done) => (
                done.value,
                Outcome {
                    ended: Ended::Ok,
                    attempts: done.attempts,
                    maybe_applied: done.maybe_applied,
                },
            ),
            Err(Stopped::Failed(failure)) => {
                let (frame, outcome) = failure_reply(Err(failure), namespace);
                (frame.into(), outcome)
            }
            Err(Stopped::Abandoned(frame, ended)) => (frame.into(), Outcome::of(ended)),
        }
    }

    /// How a command is answered in its namespace's reply mode.
    pub fn plan<B: Dispatch>(&self, namespace: &Namespace<B>, command: &Command) -> Plan {
        // Exact mode's token goes with one key, the first argument (checked only in that
        // mode: the other modes need no look at the keys here), on a backend that can keep
        // the token for this command (a Redis script takes a bounded number of arguments; an
        // evicting Redis could lose it).
        // A publish is never recorded under a token: a message delivered is not state a
        // retry could find (SPUBLISH names its channel as a key, for a Cluster's slot).
        let script_here =
            command.spec.reach == table::Reach::Scripts && namespace.backend.runs_scripts();
        let single_key = namespace.reply_mode == ReplyMode::Exact
            && command.spec.reach != table::Reach::Channel
            && (script_here
                || matches!(command.spec.keys, table::Keys::Range { first: 1, .. })
                    && command.keys().all(|k| command.args.get(1) == Some(k)))
            && namespace.backend.takes_token(command.args.len());
        settle::plan(
            namespace.reply_mode,
            &command.args,
            command.class,
            single_key,
        )
    }

    /// Settled mode: a read before the first dispatch, and the reply rebuilt from it (and
    /// from a read after) when an earlier dispatch may have been applied.
    async fn settled<B: Dispatch>(
        &mut self,
        budget: &RetryBudget,
        namespace: &Namespace<B>,
        command: &Command,
        settle: &Settle,
    ) -> Result<Done<Frame>, Stopped> {
        let started = tokio::time::Instant::now();
        // The reads and the command share the request's retries: a failed attempt of one
        // counts for the others, so that together they hold it no longer than one retry
        // schedule and an attempt's wait for each read (simulation seed 8168 found a settled
        // `SADD` answered past three schedules). The attempt that succeeds is not counted:
        // with `max_attempts = 1` the command is still sent once after its read.
        let (pre, made) = match settle.pre_read() {
            // Nothing there to settle with: the command runs as in fast mode.
            Some(read) => self.settling_read(budget, namespace, read, 0).await?,
            None => (None, 0),
        };
        if let Some(answer) = pre.as_ref().and_then(|p| settle.without_dispatch(p)) {
            // The refusal of an XADD below the stream's top is an error reply, and answered
            // as one.
            return match BackendError::check_reply(answer) {
                Ok(value) => Ok(Done {
                    value,
                    maybe_applied: 0,
                    attempts: made,
                }),
                Err(error) => Err(Stopped::Failed(Failure::Answer(error, 0, made))),
            };
        }
        // An error reply to a retry may be about an earlier dispatch (XADD's "equal or
        // smaller" for the entry it appended itself): it is settled like any reply.
        let attempted = Attempted {
            args: &command.args,
            raw: None,
            class: command.class,
            spec: command.spec,
            token: None,
            made,
        };
        let (reply, maybe_applied, attempts) =
            match self.retried(budget, namespace, attempted, None, None).await {
                Ok(done) if done.maybe_applied == 0 => {
                    return Ok(Done {
                        value: done.value.into_frame(),
                        maybe_applied: 0,
                        attempts: done.attempts,
                    })
                }
                Ok(done) => (done.value.into_frame(), done.maybe_applied, done.attempts),
                Err(Stopped::Failed(Failure::Answer(
                    BackendError::Reply { frame, .. },
                    n,
                    attempts,
                ))) if n > 0 => (*frame, n, attempts),
                Err(other) => return Err(other),
            };
        let post = match settle.post_read(&reply) {
            // The read that would settle it failed, or found another kind there: the reply
            // may be the second application's, and the first's is unknown, so the client
            // hears that it may have been applied (simulation seed 274 found the second
            // application's "not set" answered for an `MSETNX` that had set its keys).
            Some(read) => match self
                .settling_read(budget, namespace, read, attempts.saturating_sub(1))
                .await
            {
                Ok((Some(found), _)) => Some(found),
                Ok((None, _)) => {
                    let last = BackendError::Unsupported {
                        what: "the read found another kind of value".to_string(),
                    };
                    return Err(unsettled(last, maybe_applied, attempts, started));
                }
                Err(Stopped::Failed(failure)) => {
                    let last = match failure {
                        Failure::Answer(e, ..) => e,
                        Failure::Unavailable(g) | Failure::InDoubt(g) => g.last,
                    };
                    return Err(unsettled(last, maybe_applied, attempts, started));
                }
                // Shutdown abandoned the read: the command before it may have been applied
                // (simulation seed 1843103 found it answered "not applied", as a read is).
                Err(Stopped::Abandoned(..)) => {
                    let frame = shutting_down("INDOUBT may have been applied", namespace);
                    return Err(Stopped::Abandoned(frame, Ended::InDoubt));
                }
            },
            None => None,
        };
        if let Some(why) = settle.unsettled(pre.as_ref(), &reply, post.as_ref()) {
            let last = BackendError::Unsupported {
                what: why.to_string(),
            };
            return Err(unsettled(last, maybe_applied, attempts, started));
        }
        let settled = settle.settle(pre.as_ref(), reply.clone(), post.as_ref());
        if settled != reply {
            m::reply_correction(&namespace.name, command.label(), "settled");
        }
        match BackendError::check_reply(settled) {
            Ok(value) => Ok(Done {
                value,
                maybe_applied,
                attempts,
            }),
            Err(error) => Err(Stopped::Failed(Failure::Answer(
                error,
                maybe_applied,
                attempts,
            ))),
        }
    }

    /// A read for settled mode, held like any read, after `made` failed attempts of its
    /// request; with the failed attempts so far. An error reply (the key holds another kind)
    /// is no answer to settle with: None.
    async fn settling_read<B: Dispatch>(
        &mut self,
        budget: &RetryBudget,
        namespace: &Namespace<B>,
        args: &[Bytes],
        made: u32,
    ) -> Result<(Option<Frame>, u32), Stopped> {
        let name = args.first().map(|n| n.as_ref()).unwrap_or_default();
        // The settling reads are holdfast's own, all in the table.
        let Some(spec) = crate::command::lookup(name) else {
            return Ok((None, made));
        };
        let attempted = Attempted {
            args,
            raw: None,
            class: Idempotence::Read,
            spec,
            token: None,
            made,
        };
        match self.retried(budget, namespace, attempted, None, None).await {
            Ok(done) => Ok((
                Some(done.value.into_frame()),
                done.attempts.saturating_sub(1),
            )),
            Err(Stopped::Failed(Failure::Answer(_, _, attempts))) => {
                Ok((None, attempts.saturating_sub(1)))
            }
            Err(other) => Err(other),
        }
    }

    /// What each dispatch of `attempted` sends (a dispatch after the first is marked `again`):
    /// placed by the session's `pin`, which it borrows.
    fn request_for<'a, B: Dispatch>(
        proto: Proto,
        pin: &'a AtomicU64,
        script: Option<&'a dyn crate::backend::lua::Gate>,
        namespace: &Namespace<B>,
        attempted: &Attempted<'a>,
    ) -> Request<'a> {
        let class = attempted.class;
        Request {
            args: attempted.args,
            proto,
            pin: pin.load(Ordering::Relaxed),
            placement: placement(attempted.spec, class, pin),
            blocking: Blocking::No,
            hold: Duration::ZERO,
            token: attempted.token,
            again: false,
            // A read has nothing to replicate.
            replicas: if class == Idempotence::Read {
                None
            } else {
                namespace.replicas
            },
            // A script's error reply may follow its writes (Redis does not roll it back).
            error_may_write: attempted.spec.error_may_write(class),
            script,
            // Routed by its first argument; a MOVED where that was not a key is followed.
            route: None,
            raw: attempted.raw,
        }
    }

    /// One request through the retry loop, abandoned when shutdown's grace is over. `first`
    /// is its first dispatch's result when that was sent ahead with the client's pipeline;
    /// `prior` a first dispatch sent ahead that failed behind another request that waited
    /// the outage out (counted as the first attempt, and dispatched again at once).
    async fn retried<B: Dispatch>(
        &mut self,
        budget: &RetryBudget,
        namespace: &Namespace<B>,
        attempted: Attempted<'_>,
        mut first: Option<Result<Reply, BackendError>>,
        prior: Option<BackendError>,
    ) -> Result<Done<Reply>, Stopped> {
        if prior.is_some() {
            self.activity.failed.store(true, Ordering::Relaxed);
        }
        let script = self.script.as_deref();
        let request = Self::request_for(self.proto, &self.pin, script, namespace, &attempted);
        let Attempted {
            class, spec, made, ..
        } = attempted;
        let label = m::command_label(spec.name, class == Idempotence::Read);
        let mut hooks = RequestHooks::new(&namespace.name, namespace.backend.name(), label);
        if let Some(Ok(_)) = &first {
            // Sent ahead and answered: what the loop does with a first dispatch that
            // succeeds, without building it.
            if let Some(Ok(value)) = first.take() {
                budget.deposit();
                hooks.dispatched_ok();
                return Ok(Done {
                    value,
                    maybe_applied: 0,
                    attempts: made + 1,
                });
            }
        }
        // The session's wait serves while the grace is not over; once it is, a request
        // started after that gets its own, so it too has the whole moment.
        let mut own;
        let abandon = if self.giving_up() {
            own = abandon_after(self.give_up.clone());
            own.as_mut()
        } else {
            let give_up = &self.give_up;
            self.abandon
                .get_or_insert_with(|| abandon_after(give_up.clone()))
                .as_mut()
        };
        let activity = &*self.activity;
        // Every dispatch after the first is sent again: exact mode's token may have a reply
        // by then. A first dispatch sent ahead (answered in `first`, or failed in `prior`)
        // was one.
        let mut sent = prior.is_some();
        let behind;
        let policy = if self.behind {
            behind = namespace.policy.behind(made, prior.is_some());
            &behind
        } else {
            &namespace.policy
        };
        let retried = retry::run(
            policy,
            budget,
            class,
            |e: &BackendError| classify(e),
            &mut hooks,
            &mut self.give_up,
            prior,
            made,
            || {
                let first = first.take();
                let request = Request {
                    again: std::mem::replace(&mut sent, true),
                    ..request
                };
                let backend = &namespace.backend;
                async move {
                    let result = match first {
                        Some(result) => result,
                        None => {
                            activity.in_flight.store(true, Ordering::Relaxed);
                            let result =
                                backend.dispatch(&request, namespace.acquire_timeout).await;
                            activity.in_flight.store(false, Ordering::Relaxed);
                            result
                        }
                    };
                    if result.is_err() {
                        activity.failed.store(true, Ordering::Relaxed);
                    }
                    result
                }
            },
        );
        // The loop stops by itself when shutdown's grace is over while it waits between
        // attempts; a dispatch still in flight a moment later is abandoned, and the client
        // told it may have been applied (a read: that it was not).
        let result = tokio::select! {
            // The reply first: it is what is almost always ready.
            biased;
            result = retried => result,
            () = abandon => {
                drop(hooks);
                let (code, ended) = if class == Idempotence::Read {
                    ("UNAVAILABLE not applied", Ended::Unavailable)
                } else {
                    ("INDOUBT may have been applied", Ended::InDoubt)
                };
                return Err(Stopped::Abandoned(shutting_down(code, namespace), ended));
            }
        };
        if result.is_ok() {
            hooks.dispatched_ok();
        }
        result.map_err(Stopped::Failed)
    }
}

/// A settled request whose reply may be a later application's, and whose read to settle it
/// failed: in doubt, with the read's failure as the last.
fn unsettled(
    last: BackendError,
    maybe_applied: u32,
    attempts: u32,
    started: tokio::time::Instant,
) -> Stopped {
    Stopped::Failed(Failure::InDoubt(GaveUp {
        class: classify(&last),
        last,
        attempts,
        elapsed: started.elapsed(),
        why: Why::Unsettled,
        maybe_applied,
    }))
}

/// The failure of a request sent ahead that a later request of its pipeline overtook: it is
/// not retried (see `ahead.rs`).
fn overtaken(error: BackendError, read: bool) -> Failure<BackendError> {
    match bound_failure(error, read) {
        Failure::Unavailable(g) => Failure::Unavailable(GaveUp {
            why: Why::Overtaken,
            ..g
        }),
        Failure::InDoubt(g) => Failure::InDoubt(GaveUp {
            why: Why::Overtaken,
            ..g
        }),
        answer => answer,
    }
}

/// The failure of a single, never-retried dispatch (a client's own connection, a request
/// overtaken in its pipeline). `read`: the request applies nothing (`XREAD … BLOCK`,
/// `WATCH`, a transaction of reads), so a lost reply leaves nothing in doubt.
pub fn bound_failure(error: BackendError, read: bool) -> Failure<BackendError> {
    let class = classify(&error);
    let maybe = class == ErrorClass::Transient && !read;
    let gave_up = |last| GaveUp {
        last,
        class,
        attempts: 1,
        elapsed: Duration::ZERO,
        why: Why::MustNotRepeat,
        maybe_applied: u32::from(maybe),
    };
    match class {
        ErrorClass::Other => Failure::Answer(error, 0, 1),
        _ if maybe => Failure::InDoubt(gave_up(error)),
        ErrorClass::NotAttempted | ErrorClass::Transient => Failure::Unavailable(gave_up(error)),
    }
}

#[cfg(test)]
mod tests;
