//! The simulated backend: a [`Store`] behind the executor's `Dispatch` seam, with faults
//! drawn from a seeded schedule, and a log of what really happened to every request (which
//! dispatches were applied, which replies were delivered) for the oracle.
//!
//! Each dispatch's fate is drawn when it arrives: delivered; refused before sending; no
//! connection within `acquire_timeout`; turned away (`READONLY`, `LOADING`); applied and its
//! reply lost; lost before it was applied; stalled past `response_timeout` (applied or not);
//! an `OOM` answer to a retry. Outage windows refuse (or stall) everything for a while.
//! A pipelined batch is written in order on one connection: a prefix is answered, the
//! connection may die at any position (what was written before the cut may have been
//! applied), and a request may be turned away on its own.
//!
//! A client's own connection ([`OwnSim`], behind `exec::own`'s seam) has the same faults, and
//! one more consequence: any fault but an error reply closes it, and the server forgets what
//! it held there (a `WATCH`, a `MULTI` begun). `BZPOPMIN` on an empty key waits out its
//! timeout; `EXEC` applies its queue as one application, or nothing when a watched key
//! changed. The world also checks one rule itself: an `EXEC` whose client watched keys is
//! never applied on a connection that does not hold that `WATCH` (a lost `WATCH` must not
//! let the transaction apply unwatched).
//!
//! Exact mode's tokens are kept as Redis keeps them: applied and recorded atomically,
//! forgotten after a TTL (set to what the configuration check allows: the longest a request
//! can be retried). A first dispatch (`Request::again` false) is not looked up, as a SQL
//! backend does not look: an executor that called a retry a first dispatch would have it
//! applied twice.

use super::store::{err, Store};
use bytes::Bytes;
use holdfast::backend::{BackendError, Reply, Request};
use holdfast::error::{LinkError, LinkErrorKind};
use holdfast::exec::own::OwnLink;
use holdfast::exec::Dispatch;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A request: (client, its index in the client's sequence).
pub type Rid = (u64, usize);

/// How likely each fault is, per dispatch, in one seed's world.
#[derive(Clone, Debug)]
pub struct Faults {
    pub refused: f64,
    pub blackholed: f64,
    pub turned_away: f64,
    pub applied_lost: f64,
    pub lost_unapplied: f64,
    pub stalled: f64,
    pub oom_on_retry: f64,
    /// Chance a batch's connection dies somewhere in it.
    pub batch_cut: f64,
    /// Windows of virtual time (from the start) in which every dispatch is refused, or
    /// stalls when the flag says so.
    pub outages: Vec<(Duration, Duration, bool)>,
}

impl Faults {
    /// Whether this world injects nothing at all: then every request must get its answer.
    pub fn calm(&self) -> bool {
        self.outages.is_empty()
            && [
                self.refused,
                self.blackholed,
                self.turned_away,
                self.applied_lost,
                self.lost_unapplied,
                self.stalled,
                self.oom_on_retry,
                self.batch_cut,
            ]
            .iter()
            .all(|p| *p == 0.0)
    }
}

impl Faults {
    pub fn draw(rng: &mut StdRng, horizon: Duration) -> Faults {
        // Calm worlds, stormy worlds, and everything between.
        let storm = match rng.gen_range(0..4) {
            0 => 0.0,
            1 => 0.05,
            2 => 0.2,
            _ => 0.45,
        };
        let mut p = || rng.gen_range(0.0..=storm) / 4.0;
        let mut faults = Faults {
            refused: p(),
            blackholed: p() / 2.0,
            turned_away: p(),
            applied_lost: p(),
            lost_unapplied: p(),
            stalled: p() / 2.0,
            oom_on_retry: p(),
            batch_cut: p() * 2.0,
            outages: Vec::new(),
        };
        for _ in 0..rng.gen_range(0..3) {
            let start = horizon.mul_f64(rng.gen_range(0.0..1.0));
            let length = Duration::from_millis(rng.gen_range(100..8_000));
            faults
                .outages
                .push((start, start + length, rng.gen_bool(0.2)));
        }
        faults
    }
}

/// What happened to one request, as the world saw it.
#[derive(Clone, Debug, Default)]
pub struct Fate {
    /// Replies of the applications of the command (ran without an error reply), in order.
    pub applied: Vec<Frame>,
    /// When each application happened (virtual time).
    pub applied_at: Vec<Instant>,
    /// Dispatches whose fate the sender could not know: lost, stalled, or dropped in flight.
    pub ambiguous: u32,
    /// Dispatches still in flight (a dispatch dropped in flight never leaves this).
    pub in_flight: u32,
    /// The last reply delivered for the command itself (not a settling read).
    pub delivered: Option<Frame>,
    /// Dispatches of the command itself.
    pub dispatches: u32,
}

/// One write application, for the order check.
#[derive(Clone, Debug)]
pub struct Write {
    pub rid: Rid,
}

struct Inner {
    rng: StdRng,
    store: Store,
    tokens: BTreeMap<Bytes, (Frame, Instant)>,
    fates: BTreeMap<Rid, Fate>,
    writes: Vec<Write>,
    /// The request each client is executing now, and the command's own arguments (so a
    /// settling read is told apart from the command).
    current: BTreeMap<u64, (usize, Vec<Bytes>)>,
    /// Each client's own connection, as the server holds it.
    own: BTreeMap<u64, OwnState>,
    /// Each client's coming `EXEC`: whether the client watched keys for it.
    watched: BTreeMap<u64, bool>,
    /// Rules the world saw broken itself.
    violations: Vec<String>,
}

/// What the server holds of a client's own connection.
#[derive(Default)]
struct OwnState {
    /// The connection's number: a new one after each close.
    epoch: u64,
    /// A `MULTI` begun: the queued commands, and whether one was refused (`EXECABORT`).
    multi: Option<(Vec<Vec<Bytes>>, bool)>,
    /// The watched keys, with what each held when watched.
    watched: Vec<(Bytes, Option<String>)>,
}

impl OwnState {
    /// The connection closed: the server forgets what it held there.
    fn close(&mut self) {
        self.epoch += 1;
        self.multi = None;
        self.watched.clear();
    }
}

/// The simulated backend.
pub struct World {
    inner: Mutex<Inner>,
    faults: Faults,
    pub response_timeout: Duration,
    pub token_ttl: Duration,
    pipelines: bool,
    start: Instant,
}

/// The drawn fate of one dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Draw {
    Deliver,
    Refused,
    Blackholed,
    TurnedAway(&'static str),
    AppliedLost,
    LostUnapplied,
    Stalled { applied: bool },
    Oom,
}

fn link(kind: LinkErrorKind) -> LinkError {
    LinkError::new(kind, "simulated")
}

impl World {
    pub fn new(
        seed: u64,
        faults: Faults,
        response_timeout: Duration,
        token_ttl: Duration,
        pipelines: bool,
    ) -> World {
        World {
            inner: Mutex::new(Inner {
                rng: StdRng::seed_from_u64(seed ^ 0x005e_ed0f_0a11),
                store: Store::default(),
                tokens: BTreeMap::new(),
                fates: BTreeMap::new(),
                writes: Vec::new(),
                current: BTreeMap::new(),
                own: BTreeMap::new(),
                watched: BTreeMap::new(),
                violations: Vec::new(),
            }),
            faults,
            response_timeout,
            token_ttl,
            pipelines,
            start: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(inner) => inner,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Client `client` starts executing its request `index`, `args`.
    pub fn begin(&self, client: u64, index: usize, args: &[Bytes]) {
        self.lock().current.insert(client, (index, args.to_vec()));
    }

    /// Client `client`'s coming `EXEC` follows a `WATCH` of its own (or not).
    pub fn expect_watch(&self, client: u64, watched: bool) {
        self.lock().watched.insert(client, watched);
    }

    /// Rules the world saw broken.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// What happened to every request.
    pub fn fates(&self) -> BTreeMap<Rid, Fate> {
        self.lock().fates.clone()
    }

    /// Every write application, in the order applied.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// What `args` would answer if applied now (the keyspace is left as it is).
    pub fn dry_run(&self, args: &[Bytes]) -> Frame {
        let inner = self.lock();
        let mut copy = inner.store.clone();
        let now = self.now_ms();
        copy.apply(args, now).reply
    }

    fn now_ms(&self) -> u64 {
        // Virtual milliseconds, offset so an XADD * id never collides with the explicit ids
        // the clients pick (small numbers).
        1_000_000_000 + self.start.elapsed().as_millis() as u64
    }

    fn in_outage(&self) -> Option<bool> {
        let now = self.start.elapsed();
        self.faults
            .outages
            .iter()
            .find(|(from, to, _)| now >= *from && now < *to)
            .map(|(_, _, stall)| *stall)
    }

    fn draw(&self, inner: &mut Inner, rid: Rid, own: bool, write: bool) -> Draw {
        if let Some(stall) = self.in_outage() {
            return if stall {
                Draw::Stalled { applied: false }
            } else {
                Draw::Refused
            };
        }
        let f = &self.faults;
        let retry = own
            && inner
                .fates
                .get(&rid)
                .is_some_and(|fate| fate.dispatches > 1);
        let roll: f64 = inner.rng.gen();
        let mut at = 0.0;
        let mut next = |p: f64| {
            at += p;
            roll < at
        };
        if next(f.refused) {
            Draw::Refused
        } else if next(f.blackholed) {
            Draw::Blackholed
        } else if next(f.turned_away) {
            Draw::TurnedAway(if inner.rng.gen_bool(0.5) {
                "READONLY You can't write against a read only replica."
            } else {
                "LOADING Redis is loading the dataset in memory"
            })
        } else if next(f.applied_lost) {
            Draw::AppliedLost
        } else if next(f.lost_unapplied) {
            Draw::LostUnapplied
        } else if next(f.stalled) {
            Draw::Stalled {
                applied: inner.rng.gen_bool(0.5),
            }
        } else if retry && write && next(f.oom_on_retry) {
            Draw::Oom
        } else {
            Draw::Deliver
        }
    }

    /// Which request a dispatch from `client` belongs to (`offset` into a batch), and
    /// whether it is the command itself rather than a settling read.
    fn identify(inner: &Inner, client: u64, offset: usize, args: &[Bytes]) -> (Rid, bool) {
        match inner.current.get(&client) {
            Some((index, own)) if offset == 0 => ((client, *index), own.as_slice() == args),
            Some((index, _)) => ((client, index + offset), true),
            None => ((client, usize::MAX), false),
        }
    }

    /// Runs `args` on the store (through its token in exact mode) and records it.
    fn apply(&self, inner: &mut Inner, rid: Rid, own: bool, request: &Request<'_>) -> Frame {
        let now = Instant::now();
        if let Some(token) = request.token {
            let token = Bytes::copy_from_slice(token);
            let ttl = self.token_ttl;
            inner
                .tokens
                .retain(|_, (_, at)| now.duration_since(*at) < ttl);
            if let (true, Some((reply, _))) = (request.again, inner.tokens.get(&token)) {
                return reply.clone();
            }
            let reply = self.run(inner, rid, own, request.args, now);
            inner.tokens.insert(token, (reply.clone(), now));
            return reply;
        }
        self.run(inner, rid, own, request.args, now)
    }

    fn run(&self, inner: &mut Inner, rid: Rid, own: bool, args: &[Bytes], now: Instant) -> Frame {
        let applied = inner.store.apply(args, self.now_ms());
        if own && applied.ran {
            let fate = inner.fates.entry(rid).or_default();
            fate.applied.push(applied.reply.clone());
            fate.applied_at.push(now);
            if is_write(args) {
                inner.writes.push(Write { rid });
            }
        }
        applied.reply
    }

    /// Runs `args` on client `client`'s own connection: `WATCH`, `MULTI`, a command queued
    /// after it, `EXEC`, or a command run at once.
    fn own_apply(
        &self,
        inner: &mut Inner,
        client: u64,
        rid: Rid,
        own: bool,
        args: &[Bytes],
    ) -> Frame {
        let now = Instant::now();
        let name = args[0].to_ascii_uppercase();
        let mut state = inner.own.remove(&client).unwrap_or_default();
        let reply = match name.as_slice() {
            b"WATCH" => {
                for key in &args[1..] {
                    let held = inner.store.snapshot(key);
                    state.watched.push((key.clone(), held));
                }
                super::store::ok()
            }
            b"UNWATCH" => {
                state.watched.clear();
                super::store::ok()
            }
            b"MULTI" => {
                state.multi = Some((Vec::new(), false));
                super::store::ok()
            }
            b"EXEC" => {
                let watched = std::mem::take(&mut state.watched);
                match state.multi.take() {
                    None => err("ERR EXEC without MULTI"),
                    Some((_, true)) => {
                        err("EXECABORT Transaction discarded because of previous errors.")
                    }
                    Some((queue, false)) => {
                        if inner.watched.remove(&client) == Some(true) && watched.is_empty() {
                            inner.violations.push(format!(
                                "client {client}: EXEC of request {} applied on a connection that holds none of its WATCH",
                                rid.1
                            ));
                        }
                        let changed = watched
                            .iter()
                            .any(|(key, held)| inner.store.snapshot(key) != *held);
                        if changed {
                            Frame::Null
                        } else {
                            let now_ms = self.now_ms();
                            let replies: Vec<Frame> = queue
                                .iter()
                                .map(|q| inner.store.apply(q, now_ms).reply)
                                .collect();
                            let reply = Frame::Array {
                                data: replies,
                                attributes: None,
                            };
                            if own {
                                let fate = inner.fates.entry(rid).or_default();
                                fate.applied.push(reply.clone());
                                fate.applied_at.push(now);
                                inner.writes.push(Write { rid });
                            }
                            reply
                        }
                    }
                }
            }
            _ => match &mut state.multi {
                Some((queue, _)) => {
                    queue.push(args.to_vec());
                    Frame::SimpleString {
                        data: Bytes::from_static(b"QUEUED"),
                        attributes: None,
                    }
                }
                None => self.run(inner, rid, own, args, now),
            },
        };
        inner.own.insert(client, state);
        reply
    }

    /// One dispatch whose fate was drawn: applied (or not) now, then the reply, an error,
    /// or a wait first.
    fn settle_draw(
        &self,
        inner: &mut Inner,
        rid: Rid,
        own: bool,
        request: &Request<'_>,
        draw: Draw,
    ) -> Outcome {
        if own {
            let fate = inner.fates.entry(rid).or_default();
            if matches!(
                draw,
                Draw::AppliedLost | Draw::LostUnapplied | Draw::Stalled { .. }
            ) {
                fate.ambiguous += 1;
            }
        }
        match draw {
            Draw::Deliver => {
                let reply = self.apply(inner, rid, own, request);
                if own {
                    inner.fates.entry(rid).or_default().delivered = Some(reply.clone());
                }
                Outcome::Now(match BackendError::check_reply(reply) {
                    Ok(frame) => Ok(Reply::from(frame)),
                    Err(e) => Err(e),
                })
            }
            Draw::Refused => Outcome::Now(Err(BackendError::Connect {
                source: link(LinkErrorKind::Io),
            })),
            Draw::Blackholed => Outcome::Blackholed,
            Draw::TurnedAway(text) => Outcome::Now(Err(BackendError::reply(Bytes::from(text)))),
            Draw::Oom => Outcome::Now(Err(BackendError::reply(Bytes::from_static(
                b"OOM command not allowed when used memory > 'maxmemory'.",
            )))),
            Draw::AppliedLost => {
                self.apply(inner, rid, own, request);
                Outcome::Now(Err(BackendError::Sent {
                    source: link(LinkErrorKind::Io),
                }))
            }
            Draw::LostUnapplied => Outcome::Now(Err(BackendError::Sent {
                source: link(LinkErrorKind::Io),
            })),
            Draw::Stalled { applied } => {
                if applied {
                    self.apply(inner, rid, own, request);
                }
                Outcome::Stalled
            }
        }
    }
}

enum Outcome {
    Now(Result<Reply, BackendError>),
    Blackholed,
    Stalled,
}

/// Whether a command changes data: what the order check follows.
fn is_write(args: &[Bytes]) -> bool {
    let name = args[0].to_ascii_uppercase();
    !matches!(
        name.as_slice(),
        b"WATCH"
            | b"UNWATCH"
            | b"MULTI"
            | b"GET"
            | b"MGET"
            | b"EXISTS"
            | b"HGET"
            | b"HMGET"
            | b"HEXISTS"
            | b"SMISMEMBER"
            | b"SMEMBERS"
            | b"ZSCORE"
            | b"ZMSCORE"
            | b"XRANGE"
            | b"XREVRANGE"
    )
}

/// Marks a dispatch in flight until it is done; one dropped in flight stays ambiguous.
struct InFlight<'a> {
    world: &'a World,
    rid: Rid,
    own: bool,
    done: bool,
}

impl<'a> InFlight<'a> {
    fn start(world: &'a World, rid: Rid, own: bool) -> InFlight<'a> {
        if own {
            let mut inner = world.lock();
            let fate = inner.fates.entry(rid).or_default();
            fate.in_flight += 1;
            fate.dispatches += 1;
        }
        InFlight {
            world,
            rid,
            own,
            done: false,
        }
    }

    fn finish(mut self) {
        self.done = true;
        if self.own {
            let mut inner = self.world.lock();
            inner.fates.entry(self.rid).or_default().in_flight -= 1;
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done && self.own {
            // Dropped in flight (shutdown abandoned it): the sender cannot know its fate.
            let mut inner = self.world.lock();
            inner.fates.entry(self.rid).or_default().ambiguous += 1;
        }
    }
}

impl Dispatch for World {
    fn name(&self) -> &str {
        "sim"
    }

    fn takes_token(&self, _argc: usize) -> bool {
        true
    }

    fn pipelines(&self) -> bool {
        self.pipelines
    }

    async fn dispatch(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        {
            let (rid, own, outcome, flight) = {
                let (rid, own) = {
                    let inner = self.lock();
                    Self::identify(&inner, request.pin, 0, request.args)
                };
                let flight = InFlight::start(self, rid, own);
                let mut inner = self.lock();
                let draw = self.draw(&mut inner, rid, own, is_write(request.args));
                let outcome = self.settle_draw(&mut inner, rid, own, request, draw);
                (rid, own, outcome, flight)
            };
            let _ = (rid, own);
            let result = match outcome {
                Outcome::Now(result) => result,
                Outcome::Blackholed => {
                    tokio::time::sleep(acquire_timeout).await;
                    Err(BackendError::AcquireTimeout {
                        waited: acquire_timeout,
                    })
                }
                Outcome::Stalled => {
                    tokio::time::sleep(self.response_timeout).await;
                    Err(BackendError::Sent {
                        source: link(LinkErrorKind::Timeout),
                    })
                }
            };
            flight.finish();
            result
        }
    }

    async fn dispatch_batch(
        &self,
        requests: &[Request<'_>],
        _acquire_timeout: Duration,
    ) -> Option<Vec<Result<Reply, BackendError>>> {
        {
            if !self.pipelines {
                return None;
            }
            let mut results = Vec::with_capacity(requests.len());
            let mut flights = Vec::with_capacity(requests.len());
            let mut stall = false;
            {
                let mut inner = self.lock();
                // Where the connection dies, if it does: requests before `applied_to` were
                // applied, those from `cut` on never arrived, the ones between were applied
                // with their replies lost.
                let n = requests.len();
                let dies = self.in_outage().is_none()
                    && inner.rng.gen_bool(self.faults.batch_cut.min(1.0));
                let (applied_to, cut) = if dies {
                    let a = inner.rng.gen_range(0..n);
                    let b = inner.rng.gen_range(a..=n);
                    (a, b)
                } else {
                    (n, n)
                };
                for (offset, request) in requests.iter().enumerate() {
                    let client = request.pin;
                    let (rid, own) = Self::identify(&inner, client, offset, request.args);
                    drop(inner);
                    flights.push(InFlight::start(self, rid, own));
                    inner = self.lock();
                    let draw = if offset >= applied_to {
                        if offset < cut {
                            Draw::AppliedLost
                        } else {
                            Draw::LostUnapplied
                        }
                    } else {
                        let draw = self.draw(&mut inner, rid, own, is_write(request.args));
                        // A blackholed or stalled connection holds the whole batch: every
                        // request on it waits, and the ones not yet answered time out.
                        match draw {
                            Draw::Blackholed => {
                                stall = true;
                                Draw::Stalled { applied: false }
                            }
                            Draw::Stalled { .. } => {
                                stall = true;
                                draw
                            }
                            _ if stall => Draw::Stalled { applied: false },
                            other => other,
                        }
                    };
                    let outcome = self.settle_draw(&mut inner, rid, own, request, draw);
                    results.push(outcome);
                }
            }
            if stall {
                tokio::time::sleep(self.response_timeout).await;
            }
            let out = results
                .into_iter()
                .map(|outcome| match outcome {
                    Outcome::Now(result) => result,
                    Outcome::Blackholed | Outcome::Stalled => Err(BackendError::Sent {
                        source: link(LinkErrorKind::Timeout),
                    }),
                })
                .collect();
            for flight in flights {
                flight.finish();
            }
            Some(out)
        }
    }
}

/// A client's own connection in the world, behind `exec::own`'s seam.
pub struct OwnSim {
    pub world: Arc<World>,
    pub client: u64,
    pub acquire_timeout: Duration,
}

impl OwnLink for OwnSim {
    async fn send(&mut self, args: &[Bytes], blocking: bool) -> Result<Frame, BackendError> {
        let world = &*self.world;
        let client = self.client;
        // A blocking command's own wait: its last argument, in seconds.
        let wait = if blocking {
            args.last()
                .and_then(|t| std::str::from_utf8(t).ok())
                .and_then(|t| t.parse::<f64>().ok())
                .map_or(Duration::ZERO, Duration::from_secs_f64)
        } else {
            Duration::ZERO
        };
        let (rid, own) = {
            let inner = world.lock();
            World::identify(&inner, client, 0, args)
        };
        let flight = InFlight::start(world, rid, own);
        let (draw, reply) = {
            let mut inner = world.lock();
            let draw = world.draw(&mut inner, rid, own, is_write(args));
            if own
                && matches!(
                    draw,
                    Draw::AppliedLost | Draw::LostUnapplied | Draw::Stalled { .. }
                )
            {
                inner.fates.entry(rid).or_default().ambiguous += 1;
            }
            let reply = match draw {
                Draw::Deliver | Draw::AppliedLost | Draw::Stalled { applied: true } => {
                    Some(world.own_apply(&mut inner, client, rid, own, args))
                }
                // Turned away: the server refuses it (inside MULTI, the transaction with it).
                Draw::TurnedAway(_) | Draw::Oom => {
                    if let Some(state) = inner.own.get_mut(&client) {
                        match &mut state.multi {
                            Some((_, dirty)) if !args[0].eq_ignore_ascii_case(b"EXEC") => {
                                *dirty = true
                            }
                            _ => state.multi = None,
                        }
                    }
                    None
                }
                _ => None,
            };
            // Any other fault ends the connection; the server forgets what it held there.
            if !matches!(draw, Draw::Deliver | Draw::TurnedAway(_) | Draw::Oom) {
                inner.own.entry(client).or_default().close();
            }
            if let (true, Draw::Deliver, Some(reply)) = (own, draw, &reply) {
                inner.fates.entry(rid).or_default().delivered = Some(reply.clone());
            }
            (draw, reply)
        };
        let result = match (draw, reply) {
            (Draw::Deliver, Some(reply)) => {
                if blocking && matches!(reply, Frame::Null) {
                    tokio::time::sleep(wait).await;
                }
                BackendError::check_reply(reply)
            }
            (Draw::Refused, _) => Err(BackendError::Connect {
                source: link(LinkErrorKind::Io),
            }),
            (Draw::Blackholed, _) => {
                tokio::time::sleep(self.acquire_timeout).await;
                Err(BackendError::AcquireTimeout {
                    waited: self.acquire_timeout,
                })
            }
            (Draw::TurnedAway(text), _) => Err(BackendError::reply(Bytes::from(text))),
            (Draw::Oom, _) => Err(BackendError::reply(Bytes::from_static(b"OOM no memory"))),
            (Draw::Stalled { .. }, _) => {
                tokio::time::sleep(world.response_timeout + wait).await;
                Err(BackendError::Sent {
                    source: link(LinkErrorKind::Timeout),
                })
            }
            _ => Err(BackendError::Sent {
                source: link(LinkErrorKind::Io),
            }),
        };
        flight.finish();
        result
    }

    async fn close(&mut self) {
        self.world
            .lock()
            .own
            .entry(self.client)
            .or_default()
            .close();
    }
}

/// An error reply frame as the world writes it (for the oracle's comparisons).
pub fn error_text(frame: &Frame) -> Option<String> {
    match frame {
        Frame::SimpleError { data, .. } => Some(data.to_string()),
        Frame::BlobError { data, .. } => Some(String::from_utf8_lossy(data).into_owned()),
        _ => None,
    }
}

#[allow(dead_code)]
pub fn oom() -> Frame {
    err("OOM")
}
