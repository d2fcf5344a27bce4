//! Follows Sentinel's view of a backend's primary as it changes, not only when a connection
//! is dialled, and fences the connections to a primary the sentinels gave up on.
//!
//! One task per sentinel subscribes to `+switch-master`, `+odown`, `-odown` and the
//! promotion and abort events of a failover, then asks
//! `SENTINEL GET-MASTER-ADDR-BY-NAME` on a second connection (anything that changed before
//! the subscription took shows in that answer), and re-subscribes, after a pause, when its
//! sentinel goes away. Every event goes through [`View::apply`], a pure function: the view
//! names the primary, and its generation changes when the primary does and when a sentinel
//! declares it objectively down. A connection is dialled for one generation and is live
//! only while that generation stands; the backend closes it the moment the generation
//! moves on, failing what is in flight there (Transient: retried where the command allows).
//!
//! Fencing when a failover begins (`+odown`, or the promotion of a planned one) and not only
//! on `+switch-master` is what keeps a frozen primary (the
//! "zombie": stopped, promoted away from, then woken up) from acknowledging anything: its
//! connections are closed while it is still frozen, so the replies it writes on waking are
//! never read, and no dial reaches it while it is down. A `-odown` without a switch (it
//! came back before a failover) lets dials reach it again.
//!
//! Own code over a client library's Sentinel support: the order (subscribe, then query), the choice of
//! sentinel and the pause between tries are what fencing depends on, and they are a few
//! lines over the link's framing.

use super::codec::{read_frame, write_command};
use super::dial::{self, Addr, Stream, Tls};
use super::BackendError;
use crate::error::{classify, ErrorClass};
use crate::error::{LinkError as Error, LinkErrorKind as ErrorKind};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often the sentinels are asked again while none monitors the configured name.
const MISNAMED_REQUERY: Duration = Duration::from_secs(5);

/// Whether `frame` is an error reply that waiting will not change (not `LOADING`, ...).
fn refused_for_good(frame: &Frame) -> bool {
    matches!(BackendError::check_reply(frame.clone()), Err(e) if classify(&e) == ErrorClass::Other)
}

/// What the sentinels said last, as one backend follows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The primary, once a sentinel named it.
    pub primary: Option<Addr>,
    /// Moves on when the primary changes or is declared down: connections of an earlier
    /// generation are fenced.
    pub generation: u64,
    /// The sentinels (by index) that hold the primary objectively down now.
    pub down: Vec<usize>,
    /// The sentinels (by index) that answered they monitor no master of the configured
    /// name, while none has named one.
    pub unknown: Vec<usize>,
}

/// What a sentinel said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Its answer to `GET-MASTER-ADDR-BY-NAME`.
    Named(Addr),
    /// Its answer to `GET-MASTER-ADDR-BY-NAME` was nil (it monitors no master of that name)
    /// or an error that waiting will not change (it is no sentinel).
    Unknown,
    /// `+switch-master`: the primary moved here.
    Switched(Addr),
    /// `+odown` of the primary at this address.
    Down(Addr),
    /// `-odown` of the primary at this address.
    Up(Addr),
    /// The sentinel's connection was lost: its word on the primary's health no longer counts.
    Lost,
}

impl View {
    /// Whether connections may be dialled, and to where.
    pub fn usable(&self) -> Option<&Addr> {
        self.primary.as_ref().filter(|_| self.down.is_empty())
    }

    /// Whether the configuration cannot work as it stands: a sentinel answered that it
    /// monitors no master of the configured name, and none has named one. A dial then fails
    /// at once (waiting would only hold every request for a server nobody will name).
    pub fn misnamed(&self) -> bool {
        self.primary.is_none() && !self.unknown.is_empty()
    }

    /// The view after sentinel `from` said `event`, and whether the primary changed.
    pub fn apply(&self, from: usize, event: Event) -> (View, bool) {
        let mut next = self.clone();
        let mut moved = false;
        match event {
            Event::Named(addr) | Event::Switched(addr) if self.primary.as_ref() != Some(&addr) => {
                moved = self.primary.is_some();
                next.unknown.clear();
                next.primary = Some(addr);
                next.generation += 1;
                // Whatever was down was the old primary.
                next.down.clear();
            }
            // A switch to where we already are (another sentinel's, or after its answer):
            // the failover is over.
            Event::Switched(_) => next.down.clear(),
            Event::Named(_) => {}
            Event::Down(addr) if self.primary.as_ref() == Some(&addr) => {
                if !next.down.contains(&from) {
                    next.down.push(from);
                }
                // The first to say so fences: nothing more is sent until it is back or
                // replaced.
                if self.down.is_empty() {
                    next.generation += 1;
                }
            }
            Event::Up(addr) if self.primary.as_ref() == Some(&addr) => {
                next.down.retain(|s| *s != from);
            }
            // About a primary we no longer follow.
            Event::Down(_) | Event::Up(_) => {}
            Event::Lost => {
                next.down.retain(|s| *s != from);
                next.unknown.retain(|s| *s != from);
            }
            // Once a primary is named, a sentinel that does not know it is one out of step:
            // the view follows the ones that do.
            Event::Unknown if self.primary.is_some() => {}
            Event::Unknown => {
                if !next.unknown.contains(&from) {
                    next.unknown.push(from);
                }
            }
        }
        (next, moved)
    }
}

/// One backend's view of its primary, kept by its sentinels' tasks.
pub struct Watch {
    backend: Arc<str>,
    master: String,
    sentinels: Vec<Addr>,
    connection_timeout: Duration,
    /// TLS to the sentinels, when the backend speaks it.
    tls: Option<Tls>,
    view: watch::Sender<View>,
    /// The view's generation, for the hot path's liveness check.
    generation: AtomicU64,
    /// Asks every sentinel task to query its sentinel again (a dial found a replica).
    requery: Notify,
    /// When the primary last moved, until a request succeeds on the new one.
    switched_at: std::sync::Mutex<Option<Instant>>,
    /// True while `switched_at` waits for that request (the hot path reads only this).
    switching: AtomicBool,
}

impl Watch {
    /// The current generation (cheap: the hot path reads it for every request).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Resolves once the view moved past `generation`.
    pub async fn fenced(&self, generation: u64) {
        let mut view = self.view.subscribe();
        let _ = view.wait_for(|v| v.generation != generation).await;
    }

    /// The primary to dial, and the generation the connection belongs to; waits while the
    /// sentinels have not named one or hold it down, at most the connection timeout.
    ///
    /// # Errors
    /// `IO` (nothing was sent) when no usable primary is known in time; `NotFound` at once
    /// when a sentinel answered it monitors no master of the configured name.
    pub async fn primary(&self) -> Result<(Addr, u64), Error> {
        let within = self.connection_timeout;
        let mut view = self.view.subscribe();
        let usable = view.wait_for(|v| v.usable().is_some() || v.misnamed());
        let found = match tokio::time::timeout(within, usable).await {
            Ok(Ok(v)) => v.usable().map(|addr| (addr.clone(), v.generation)),
            _ => None,
        };
        found.ok_or_else(|| self.no_primary())
    }

    /// The primary connections may be dialled to now, and its generation; None while there
    /// is none (not named yet, or held down).
    pub fn usable_now(&self) -> Option<(Addr, u64)> {
        let view = self.view.borrow();
        view.usable().map(|addr| (addr.clone(), view.generation))
    }

    fn no_primary(&self) -> Error {
        let view = self.view.borrow();
        if view.misnamed() {
            // NotFound: the request is answered with this at once, not held.
            return Error::new(
                ErrorKind::NotFound,
                format!(
                    "no sentinel monitors a master named '{}' (sentinels {:?}: one answered nil, or is no sentinel): check master_name and sentinels",
                    self.master, self.sentinels
                ),
            );
        }
        let why = match (&view.primary, view.down.is_empty()) {
            (None, _) => "no sentinel named it yet",
            (Some(_), false) => "the sentinels hold it objectively down",
            (Some(_), true) => "it changed while dialling",
        };
        Error::new(
            ErrorKind::Io,
            format!(
                "no primary of '{}' to dial: {why} (sentinels {:?})",
                self.master, self.sentinels
            ),
        )
    }

    /// Asks the sentinels again (a dial reached a server that is not a primary).
    pub fn requery(&self) {
        self.requery.notify_waiters();
    }

    /// A request succeeded on a connection of the current primary: the first after a switch
    /// ends the failover's measure.
    pub fn served(&self) {
        if !self.switching.load(Ordering::Relaxed) || !self.switching.swap(false, Ordering::AcqRel)
        {
            return;
        }
        let since = self.switched_at.lock().ok().and_then(|mut at| at.take());
        if let Some(since) = since {
            crate::metrics::primary_served(&self.backend, since.elapsed());
        }
    }

    fn apply(&self, from: usize, event: Event) {
        let mut moved = false;
        let mut fenced = false;
        self.view.send_if_modified(|view| {
            let (next, m) = view.apply(from, event.clone());
            moved = m;
            fenced = next.generation != view.generation;
            // Before the view is published: a connection of the old generation is never
            // taken once anyone could see the new one.
            self.generation.store(next.generation, Ordering::Release);
            let changed = next != *view;
            *view = next;
            changed
        });
        if event == Event::Unknown && self.view.borrow().misnamed() {
            tracing::error!(
                backend = %self.backend,
                master = %self.master,
                sentinel = ?self.sentinels.get(from),
                "the sentinel monitors no master of this name: requests to the backend are answered with an error at once; check master_name"
            );
        }
        if fenced {
            let view = self.view.borrow().clone();
            tracing::warn!(
                backend = %self.backend,
                ?event,
                primary = ?view.primary,
                down = view.down.len(),
                "the primary changed or is down: connections to it are fenced"
            );
        }
        if moved {
            crate::metrics::primary_changed(&self.backend);
            if let Ok(mut at) = self.switched_at.lock() {
                *at = Some(Instant::now());
            }
            self.switching.store(true, Ordering::Release);
        }
    }

    /// One sentinel: subscribe, query, then follow its events until its connection ends.
    async fn listen(&self, from: usize) -> Result<(), Error> {
        let (host, port) = &self.sentinels[from];
        let mut stream = self.connect(host, *port).await?;
        let channels = [
            "+switch-master",
            "+odown",
            "-odown",
            PROMOTING,
            "-failover-abort-not-elected",
            "-failover-abort-no-good-slave",
            "-failover-abort-slave-timeout",
        ];
        let mut subscribe = vec![Bytes::from_static(b"SUBSCRIBE")];
        subscribe.extend(channels.iter().map(|c| Bytes::from_static(c.as_bytes())));
        write_command(&mut stream, &subscribe).await?;
        let mut buf = BytesMut::with_capacity(4096);
        for _ in channels {
            let confirmed = self.read(&mut stream, &mut buf).await?;
            if let Frame::SimpleError { data, .. } = confirmed {
                return Err(Error::new(ErrorKind::Protocol, data.to_string()));
            }
        }
        // Subscribed: a switch from now on is heard; one before it shows in the answer.
        self.query(from).await?;
        loop {
            tokio::select! {
                frame = read_frame(&mut stream, &mut buf) => {
                    if let Some(event) = self.event(&frame?) {
                        self.apply(from, event);
                    }
                }
                () = self.requery.notified() => self.query(from).await?,
                // A name no sentinel monitors may be added (`SENTINEL MONITOR`) without an
                // event holdfast hears: ask again now and then.
                () = tokio::time::sleep(MISNAMED_REQUERY), if self.view.borrow().misnamed() => {
                    self.query(from).await?;
                }
            }
        }
    }

    async fn connect(&self, host: &str, port: u16) -> Result<Stream, Error> {
        dial::open((host, port), self.tls.as_ref(), self.connection_timeout).await
    }

    async fn read(&self, stream: &mut Stream, buf: &mut BytesMut) -> Result<Frame, Error> {
        tokio::time::timeout(self.connection_timeout, read_frame(stream, buf))
            .await
            .map_err(|_| Error::new(ErrorKind::Timeout, "a sentinel did not answer in time"))?
    }

    /// Asks sentinel `from` where the primary is, on a connection of its own.
    async fn query(&self, from: usize) -> Result<(), Error> {
        let (host, port) = &self.sentinels[from];
        let mut stream = self.connect(host, *port).await?;
        let ask = [
            Bytes::from_static(b"SENTINEL"),
            Bytes::from_static(b"GET-MASTER-ADDR-BY-NAME"),
            Bytes::from(self.master.clone()),
        ];
        write_command(&mut stream, &ask).await?;
        let answer = self.read(&mut stream, &mut BytesMut::new()).await?;
        match answer {
            Frame::Array { data, .. } => {
                if let Some(addr) = address(&data) {
                    self.apply(from, Event::Named(addr));
                }
                Ok(())
            }
            // This sentinel monitors no master of that name.
            Frame::Null => {
                self.apply(from, Event::Unknown);
                Ok(())
            }
            // Refused for good (not LOADING or the like): the server is no sentinel.
            ref refused if refused_for_good(refused) => {
                self.apply(from, Event::Unknown);
                Ok(())
            }
            other => Err(Error::new(
                ErrorKind::Protocol,
                format!("unexpected answer to GET-MASTER-ADDR-BY-NAME: {other:?}"),
            )),
        }
    }

    /// A published message as an event about our master, if it is one.
    fn event(&self, frame: &Frame) -> Option<Event> {
        let Frame::Array { data, .. } = frame else {
            return None;
        };
        let [kind, channel, payload] = data.as_slice() else {
            return None;
        };
        if text(kind)? != "message" {
            return None;
        }
        parse_event(&self.master, text(channel)?, text(payload)?)
    }
}

/// Published by the sentinel leading a failover as it sends `REPLICAOF NO ONE` to the
/// replica it promotes: from then on a write to the old primary may never reach the new one.
const PROMOTING: &str = "+failover-state-send-slaveof-noone";

/// The event a Sentinel message on `channel` carries about `master`, if it is about it.
/// `+switch-master`: `<name> <old-ip> <old-port> <new-ip> <new-port>`; `+odown`/`-odown` and
/// the `-failover-abort-*` events: `master <name> <ip> <port> ...` (other instance types are
/// replicas or sentinels); the promotion: `slave <ip:port> <ip> <port> @ <name> <master-ip>
/// <master-port>`. A promotion holds the primary down like `+odown` (a planned
/// `SENTINEL FAILOVER` declares nothing down), until the switch or the failover's abort.
pub fn parse_event(master: &str, channel: &str, payload: &str) -> Option<Event> {
    let words: Vec<&str> = payload.split(' ').collect();
    let addr = |host: &str, port: &str| Some((host.to_string(), port.parse().ok()?));
    match (channel, words.as_slice()) {
        (PROMOTING, ["slave", _, _, _, "@", name, host, port, ..]) if *name == master => {
            Some(Event::Down(addr(host, port)?))
        }
        (abort, ["master", name, host, port, ..])
            if abort.starts_with("-failover-abort") && *name == master =>
        {
            Some(Event::Up(addr(host, port)?))
        }
        ("+switch-master", [name, _, _, host, port, ..]) if *name == master => {
            Some(Event::Switched(addr(host, port)?))
        }
        ("+odown", ["master", name, host, port, ..]) if *name == master => {
            Some(Event::Down(addr(host, port)?))
        }
        ("-odown", ["master", name, host, port, ..]) if *name == master => {
            Some(Event::Up(addr(host, port)?))
        }
        _ => None,
    }
}

/// `[host, port]` as an address.
fn address(items: &[Frame]) -> Option<Addr> {
    let [host, port] = items else {
        return None;
    };
    Some((text(host)?.to_string(), text(port)?.parse().ok()?))
}

fn text(frame: &Frame) -> Option<&str> {
    match frame {
        Frame::BlobString { data, .. } | Frame::SimpleString { data, .. } => {
            std::str::from_utf8(data).ok()
        }
        _ => None,
    }
}

/// A backend's [`Watch`] and its sentinels' tasks, stopped when dropped.
pub struct Follower {
    watch: Arc<Watch>,
    tasks: Vec<JoinHandle<()>>,
}

impl Follower {
    /// Starts following `master` through `sentinels`.
    pub fn start(
        backend: &str,
        master: &str,
        sentinels: Vec<Addr>,
        connection_timeout: Duration,
        tls: Option<Tls>,
    ) -> Follower {
        let watch = Arc::new(Watch {
            backend: backend.into(),
            master: master.to_string(),
            sentinels,
            connection_timeout,
            tls,
            view: watch::Sender::new(View::default()),
            generation: AtomicU64::new(0),
            requery: Notify::new(),
            switched_at: std::sync::Mutex::new(None),
            switching: AtomicBool::new(false),
        });
        let tasks = (0..watch.sentinels.len())
            .map(|from| {
                let watch = watch.clone();
                tokio::spawn(async move {
                    loop {
                        if let Err(e) = watch.listen(from).await {
                            tracing::debug!(
                                backend = %watch.backend,
                                sentinel = ?watch.sentinels[from],
                                error = %e,
                                "sentinel connection lost"
                            );
                        }
                        watch.apply(from, Event::Lost);
                        // A sentinel that is down is tried again, not hammered.
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                })
            })
            .collect();
        Follower { watch, tasks }
    }

    /// The view the backend's connections follow.
    pub fn watch(&self) -> &Arc<Watch> {
        &self.watch
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> Addr {
        ("127.0.0.1".to_string(), port)
    }

    fn view(primary: Option<u16>, generation: u64, down: &[usize]) -> View {
        View {
            primary: primary.map(at),
            generation,
            down: down.to_vec(),
            unknown: Vec::new(),
        }
    }

    /// `view(None, 0, &[])` that sentinels `from` said they do not know.
    fn misnamed(from: &[usize]) -> View {
        View {
            unknown: from.to_vec(),
            ..View::default()
        }
    }

    #[test]
    fn every_rule_of_the_view() {
        use Event::*;
        // (before, from, event, after, moved)
        let cases = [
            // The first answer names the primary: a generation to dial for, no move.
            (
                view(None, 0, &[]),
                0,
                Named(at(1)),
                view(Some(1), 1, &[]),
                false,
            ),
            // Another sentinel's same answer changes nothing.
            (
                view(Some(1), 1, &[]),
                1,
                Named(at(1)),
                view(Some(1), 1, &[]),
                false,
            ),
            // A switch moves the primary and fences the old one's connections.
            (
                view(Some(1), 1, &[]),
                0,
                Switched(at(2)),
                view(Some(2), 2, &[]),
                true,
            ),
            // The same switch heard from another sentinel: nothing more.
            (
                view(Some(2), 2, &[]),
                1,
                Switched(at(2)),
                view(Some(2), 2, &[]),
                false,
            ),
            // An answer naming another primary is a switch we did not hear.
            (
                view(Some(1), 1, &[]),
                2,
                Named(at(2)),
                view(Some(2), 2, &[]),
                true,
            ),
            // Declared down: fenced at once, dials wait.
            (
                view(Some(1), 1, &[]),
                0,
                Down(at(1)),
                view(Some(1), 2, &[0]),
                false,
            ),
            // A second sentinel agreeing does not fence again.
            (
                view(Some(1), 2, &[0]),
                1,
                Down(at(1)),
                view(Some(1), 2, &[0, 1]),
                false,
            ),
            // Back up for one sentinel, still down for another.
            (
                view(Some(1), 2, &[0, 1]),
                0,
                Up(at(1)),
                view(Some(1), 2, &[1]),
                false,
            ),
            // Back up for all: dials reach it again, in the same generation.
            (
                view(Some(1), 2, &[1]),
                1,
                Up(at(1)),
                view(Some(1), 2, &[]),
                false,
            ),
            // A sentinel lost: its word on the primary's health no longer counts.
            (
                view(Some(1), 2, &[1]),
                1,
                Lost,
                view(Some(1), 2, &[]),
                false,
            ),
            // Down, then replaced: the new primary is usable at once.
            (
                view(Some(1), 2, &[0, 1]),
                2,
                Switched(at(2)),
                view(Some(2), 3, &[]),
                true,
            ),
            // Down for the old primary is no news about the new one.
            (
                view(Some(2), 3, &[]),
                0,
                Down(at(1)),
                view(Some(2), 3, &[]),
                false,
            ),
            (
                view(Some(2), 3, &[]),
                0,
                Up(at(1)),
                view(Some(2), 3, &[]),
                false,
            ),
            // A switch back to where we are clears a down the sentinels no longer hold.
            (
                view(Some(2), 4, &[0]),
                0,
                Switched(at(2)),
                view(Some(2), 4, &[]),
                false,
            ),
            // A sentinel that monitors no such master: the configuration cannot work...
            (view(None, 0, &[]), 0, Unknown, misnamed(&[0]), false),
            (misnamed(&[0]), 1, Unknown, misnamed(&[0, 1]), false),
            // ...until one names it (a sentinel told to monitor it since).
            (
                misnamed(&[0, 1]),
                2,
                Named(at(1)),
                view(Some(1), 1, &[]),
                false,
            ),
            // Lost, its word no longer counts.
            (misnamed(&[0, 1]), 1, Lost, misnamed(&[0]), false),
            // Once one named it, another that does not know it is out of step: ignored.
            (
                view(Some(1), 1, &[]),
                2,
                Unknown,
                view(Some(1), 1, &[]),
                false,
            ),
        ];
        for (i, (before, from, event, after, moved)) in cases.into_iter().enumerate() {
            let (next, m) = before.apply(from, event.clone());
            assert_eq!(
                (&next, m),
                (&after, moved),
                "case {i}: {event:?} on {before:?}"
            );
        }
    }

    #[test]
    fn only_a_named_primary_that_is_not_down_is_dialled() {
        assert_eq!(view(None, 0, &[]).usable(), None);
        assert_eq!(view(Some(1), 2, &[0]).usable(), None);
        assert_eq!(view(Some(1), 2, &[]).usable(), Some(&at(1)));
        assert!(misnamed(&[0]).misnamed() && misnamed(&[0]).usable().is_none());
        assert!(!view(None, 0, &[]).misnamed());
    }

    #[test]
    fn sentinel_messages_about_our_master_and_only_ours() {
        let cases = [
            (
                "+switch-master",
                "mymaster 127.0.0.1 6379 127.0.0.1 6380",
                Some(Event::Switched(at(6380))),
            ),
            (
                "+switch-master",
                "other 127.0.0.1 6379 127.0.0.1 6380",
                None,
            ),
            (
                "+odown",
                "master mymaster 127.0.0.1 6379 #quorum 2/2",
                Some(Event::Down(at(6379))),
            ),
            (
                "-odown",
                "master mymaster 127.0.0.1 6379",
                Some(Event::Up(at(6379))),
            ),
            // A replica's or another master's health is not the primary's.
            (
                "+odown",
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379",
                None,
            ),
            ("+odown", "master other 127.0.0.1 6379 #quorum 2/2", None),
            (
                "+switch-master",
                "mymaster 127.0.0.1 6379 127.0.0.1 notaport",
                None,
            ),
            ("+switch-master", "mymaster", None),
            // A promotion under way holds the old primary down until the switch or an abort.
            (
                PROMOTING,
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379",
                Some(Event::Down(at(6379))),
            ),
            (
                PROMOTING,
                "slave 127.0.0.1:6380 127.0.0.1 6380 @ other 127.0.0.1 6379",
                None,
            ),
            (
                "-failover-abort-no-good-slave",
                "master mymaster 127.0.0.1 6379",
                Some(Event::Up(at(6379))),
            ),
        ];
        for (channel, payload, want) in cases {
            assert_eq!(
                parse_event("mymaster", channel, payload),
                want,
                "{channel} {payload}"
            );
        }
    }
}
