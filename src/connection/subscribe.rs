//! A client's Pub/Sub: `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`, their `UNSUBSCRIBE`s, the
//! confirmations Redis sends for each name (with the client's count of subscriptions), the
//! messages delivered to it, and `PUBSUB`'s questions.
//!
//! Channels are not keys: a channel is carried by the backend of the namespace its longest
//! `channels` prefix picks (the catch-all takes the rest), a pattern by every backend a
//! channel matching it may route to ([`crate::namespace::pattern_reaches`]). The client gets
//! a feed of its own on each such backend (`backend::pubsub`), made at its first
//! subscription there; a client that never subscribes has none, and pays one idle branch of
//! the serve loop's wait.
//!
//! A `SUBSCRIBE` is answered once every backend confirmed its names, so a message published
//! after the client read the confirmation reaches it. One that cannot be confirmed within the
//! namespace's hold budget subscribes nothing and is answered with an error naming why.
//!
//! As in Redis, a RESP2 client with a subscription may send only the subscribe commands,
//! `PING` (answered `["pong", message]`), `QUIT` and `RESET`; a RESP3 client may send any
//! command, its messages arriving as push frames between replies.

use super::{array, bulk, error, number, ClientConn, Flow};
use crate::backend::feed::Feed;
use crate::backend::pubsub::{Delivery, Outbox, SubKind};
use crate::backend::{Backend, BackendError, DoubleStyle, Proto, Reply};
use crate::command::Command;
use crate::error::{classify, ErrorClass};
use crate::metrics as m;
use crate::namespace::Namespace;
use crate::resp::Output;
use bytes::Bytes;
use indexmap::IndexMap;
use quanta::Instant;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::Arc;
use tokio::sync::mpsc;

/// One client's subscriptions and the feeds that carry them.
pub(super) struct Subscriptions {
    /// Where its feeds deliver.
    outbox: Outbox,
    /// What the serve loop sends on to the client.
    pub(super) rx: mpsc::Receiver<Delivery>,
    /// One feed per backend it subscribed on.
    feeds: Vec<(Arc<Backend>, Feed)>,
    /// Its names by kind ([`SubKind::index`]), each with the feeds (indices into `feeds`) carrying it;
    /// in the order subscribed until one is unsubscribed (Redis keeps no order either).
    names: [IndexMap<Bytes, Vec<usize>>; 3],
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        m::pubsub_clients(-1.0);
    }
}

impl Subscriptions {
    /// The count Redis reports in a confirmation of `kind`: channels and patterns together,
    /// shard channels apart.
    fn count(&self, kind: SubKind) -> i64 {
        let n = match kind {
            SubKind::Shard => self.names[2].len(),
            SubKind::Channel | SubKind::Pattern => self.names[0].len() + self.names[1].len(),
        };
        n as i64
    }

    fn is_empty(&self) -> bool {
        self.names.iter().all(IndexMap::is_empty)
    }

    /// Drops `name` of `kind`, once its feeds released it.
    async fn remove(&mut self, kind: SubKind, name: &Bytes) {
        for at in self.names[kind.index()]
            .swap_remove(name)
            .unwrap_or_default()
        {
            if let Some((_, feed)) = self.feeds.get(at) {
                feed.unsubscribe(kind, std::slice::from_ref(name)).await;
            }
        }
    }

    /// Drops every name of `kind`, once its feeds released them (each feed's in one call);
    /// returns them in the order subscribed.
    async fn remove_all(&mut self, kind: SubKind) -> IndexMap<Bytes, Vec<usize>> {
        let all = std::mem::take(&mut self.names[kind.index()]);
        let mut by_feed: Vec<Vec<Bytes>> = vec![Vec::new(); self.feeds.len()];
        for (name, feeds) in &all {
            for at in feeds {
                if let Some(list) = by_feed.get_mut(*at) {
                    list.push(name.clone());
                }
            }
        }
        for ((_, feed), list) in self.feeds.iter().zip(&by_feed) {
            if !list.is_empty() {
                feed.unsubscribe(kind, list).await;
            }
        }
        all
    }
}

/// Which subscribe command, and of what kind.
fn kind_of(name: &str) -> (SubKind, bool) {
    match name {
        "PSUBSCRIBE" => (SubKind::Pattern, true),
        "SSUBSCRIBE" => (SubKind::Shard, true),
        "UNSUBSCRIBE" => (SubKind::Channel, false),
        "PUNSUBSCRIBE" => (SubKind::Pattern, false),
        "SUNSUBSCRIBE" => (SubKind::Shard, false),
        _ => (SubKind::Channel, true),
    }
}

/// The confirmation's first element: the command's name in lower case.
fn confirmation(kind: SubKind, subscribe: bool) -> &'static [u8] {
    match (kind, subscribe) {
        (SubKind::Channel, true) => b"subscribe",
        (SubKind::Pattern, true) => b"psubscribe",
        (SubKind::Shard, true) => b"ssubscribe",
        (SubKind::Channel, false) => b"unsubscribe",
        (SubKind::Pattern, false) => b"punsubscribe",
        (SubKind::Shard, false) => b"sunsubscribe",
    }
}

/// A push frame (RESP3), which RESP2 encodes as an array.
fn push(items: Vec<Frame>) -> Frame {
    Frame::Push {
        data: items,
        attributes: None,
    }
}

/// What a delivery is sent to the client as.
pub(super) fn delivery_frame(delivery: Delivery) -> Frame {
    let mut items = Vec::with_capacity(4);
    match delivery.kind {
        SubKind::Channel => items.push(bulk(Bytes::from_static(b"message"))),
        SubKind::Pattern => {
            items.push(bulk(Bytes::from_static(b"pmessage")));
            items.push(bulk(delivery.pattern.unwrap_or_default()));
        }
        SubKind::Shard => items.push(bulk(Bytes::from_static(b"smessage"))),
    }
    items.push(bulk(delivery.channel));
    items.push(bulk(delivery.payload));
    push(items)
}

/// The refusal of a command a RESP2 client in subscribed mode may not send.
pub(super) fn only_subscribe_commands(name: &str) -> Frame {
    error(format!(
        "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
        name.to_ascii_lowercase()
    ))
}

/// Waits for the next delivery of a subscribed client; never, for one without
/// subscriptions.
pub(super) async fn next_delivery(subs: &mut Option<Box<Subscriptions>>) -> Option<Delivery> {
    match subs {
        Some(subs) => subs.rx.recv().await,
        None => std::future::pending().await,
    }
}

impl ClientConn {
    /// Whether the client has a subscription (Redis's subscribed mode).
    pub(super) fn subscribed(&self) -> bool {
        self.subs.is_some()
    }

    /// Writes what was delivered to the client since the last look, `first` among it. A
    /// pattern's message is taken only from the backend its channel routes to: a pattern
    /// subscribed on two backends that are one server (two databases of one Redis, whose
    /// Pub/Sub ignores the database) would otherwise deliver it twice.
    pub(super) fn deliver(&mut self, first: Delivery, out: &mut Output) {
        let mut next = Some(first);
        while let Some(delivery) = next {
            let routed = delivery.kind != SubKind::Pattern
                || self
                    .state
                    .router
                    .namespace_of_channel(&delivery.channel)
                    .backend
                    .name()
                    == &*delivery.backend;
            if routed {
                self.reply(out, &delivery_frame(delivery));
            }
            if out.len() >= super::FLUSH_AT {
                break;
            }
            next = self.subs.as_mut().and_then(|s| s.rx.try_recv().ok());
        }
    }

    /// The subscribed client's `PING`: `["pong", message]` in RESP2, as Redis answers.
    pub(super) fn subscribed_ping(&self, message: Option<&Bytes>) -> Option<Frame> {
        (self.subscribed() && self.exec.proto == Proto::Resp2).then(|| {
            array(vec![
                bulk(Bytes::from_static(b"pong")),
                bulk(message.cloned().unwrap_or_default()),
            ])
        })
    }

    /// Leaves every subscription (`RESET`), as Redis does before it answers.
    pub(super) async fn unsubscribe_all(&mut self) {
        if let Some(mut subs) = self.subs.take() {
            for kind in SubKind::ALL {
                subs.remove_all(kind).await;
            }
        }
        self.show_subscriptions();
    }

    /// The namespaces that carry `name` of `kind`.
    fn carriers(&self, kind: SubKind, name: &[u8]) -> Vec<Arc<Namespace>> {
        let router = &self.state.router;
        match kind {
            SubKind::Pattern => router
                .namespaces_of_pattern(name)
                .into_iter()
                .cloned()
                .collect(),
            SubKind::Channel | SubKind::Shard => vec![router.namespace_of_channel(name).clone()],
        }
    }

    /// `(P|S)SUBSCRIBE` and `(P|S)UNSUBSCRIBE`: a confirmation for each name.
    pub(super) async fn subscription(&mut self, command: &Command, out: &mut Output) -> Flow {
        let (kind, subscribe) = kind_of(command.spec.name);
        let names: Vec<Bytes> = command.args.iter().skip(1).cloned().collect();
        let frames = if subscribe {
            match self.subscribe(kind, &names).await {
                Ok(frames) => frames,
                Err(refusal) => vec![refusal],
            }
        } else {
            self.unsubscribe(kind, &names, out).await
        };
        for frame in &frames {
            self.reply(out, frame);
        }
        if self.subs.as_ref().is_some_and(|s| s.is_empty()) {
            self.subs = None;
        }
        self.show_subscriptions();
        Flow::Continue
    }

    /// Shows the client's subscription counts to `CLIENT LIST`.
    pub(super) fn show_subscriptions(&self) {
        let counts = self.subs.as_ref().map_or([0; 3], |s| {
            [s.names[0].len(), s.names[1].len(), s.names[2].len()]
        });
        let mut state = self.client.state.lock().unwrap_or_else(|p| p.into_inner());
        state.subs = counts;
    }

    async fn subscribe(&mut self, kind: SubKind, names: &[Bytes]) -> Result<Vec<Frame>, Frame> {
        // Every name's carriers first: a name the user may not reach refuses the command
        // whole, as Redis's ACL refuses a channel, and nothing is subscribed.
        let reachable = self.reachable();
        let mut plan: Vec<(Bytes, Vec<Arc<Namespace>>)> = Vec::new();
        for name in names {
            let carriers = self.carriers(kind, name);
            if let Some(allowed) = &reachable {
                if carriers.iter().any(|ns| !allowed.contains(&ns.name)) {
                    return Err(error(
                        "NOPERM this user has no permissions to access one of the channels used as arguments",
                    ));
                }
            }
            plan.push((name.clone(), carriers));
        }
        let mut subs = match self.subs.take() {
            Some(subs) => subs,
            None => {
                let client = self.client.clone();
                let backlog = self.state.config.server.max_pubsub_backlog;
                let (outbox, rx) = Outbox::new(
                    backlog,
                    Arc::new(move |why: &'static str| {
                        m::limit(why);
                        client.kill();
                    }),
                );
                m::pubsub_clients(1.0);
                Box::new(Subscriptions {
                    outbox,
                    rx,
                    feeds: Vec::new(),
                    names: Default::default(),
                })
            }
        };
        // Counted one by one, as Redis confirms them: a name already subscribed (or named
        // twice) leaves the count as it was.
        let mut count = subs.count(kind);
        let mut fresh: Vec<bool> = Vec::with_capacity(plan.len());
        let mut named = std::collections::HashSet::new();
        for (name, _) in &plan {
            fresh.push(!subs.names[kind.index()].contains_key(name) && named.insert(name.clone()));
        }
        let result = subscribe_on(&mut subs, kind, &plan).await;
        let frames = result.map(|()| {
            plan.iter()
                .zip(fresh)
                .map(|((name, _), fresh)| {
                    count += i64::from(fresh);
                    push(vec![
                        bulk(Bytes::from_static(confirmation(kind, true))),
                        bulk(name.clone()),
                        number(count),
                    ])
                })
                .collect()
        });
        self.subs = Some(subs);
        frames
    }

    /// `(P|S)UNSUBSCRIBE`. What was delivered before it is written first, as Redis sends a
    /// message before the confirmation of an unsubscribe it processed after; the feeds drop
    /// what comes for a name once it is no longer wanted, so nothing for it follows.
    async fn unsubscribe(
        &mut self,
        kind: SubKind,
        names: &[Bytes],
        out: &mut Output,
    ) -> Vec<Frame> {
        if let Some(first) = self.subs.as_mut().and_then(|s| s.rx.try_recv().ok()) {
            self.deliver(first, out);
        }
        let Some(subs) = self.subs.as_mut() else {
            let named: Vec<Option<Bytes>> = if names.is_empty() {
                vec![None]
            } else {
                names.iter().cloned().map(Some).collect()
            };
            return named
                .into_iter()
                .map(|name| unsubscribed(kind, name, 0))
                .collect();
        };
        if names.is_empty() {
            // Every name of the kind, in the order subscribed, counted down.
            if subs.names[kind.index()].is_empty() {
                return vec![unsubscribed(kind, None, subs.count(kind))];
            }
            let all = subs.remove_all(kind).await;
            let mut left = subs.count(kind) + all.len() as i64;
            return all
                .into_keys()
                .map(|name| {
                    left -= 1;
                    unsubscribed(kind, Some(name), left)
                })
                .collect();
        }
        let mut frames = Vec::with_capacity(names.len());
        for name in names {
            subs.remove(kind, name).await;
            frames.push(unsubscribed(kind, Some(name.clone()), subs.count(kind)));
        }
        frames
    }

    /// `PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB`, answered for the
    /// backends of the namespaces the client may reach. A channel is counted only where it
    /// routes, so a Redis shared by several namespaces (or with subscribers of its own, not
    /// holdfast's) does not show one namespace's channels as another's.
    pub(super) async fn pubsub_query(
        &mut self,
        command: &Command,
        started: Instant,
    ) -> (Reply, DoubleStyle) {
        let reachable = self.reachable();
        let reaches = |ns: &Namespace| {
            reachable
                .as_ref()
                .is_none_or(|names| names.contains(&ns.name))
        };
        let mut targets: Vec<Arc<Namespace>> = Vec::new();
        for ns in self
            .state
            .router
            .namespaces()
            .iter()
            .filter(|ns| reaches(ns))
        {
            if !targets.iter().any(|t| Arc::ptr_eq(&t.backend, &ns.backend)) {
                targets.push(ns.clone());
            }
        }
        let sub = command.spec.name;
        let state = self.state.clone();
        let router = &state.router;
        let routes_to = |name: &[u8], backend: &Arc<Backend>| {
            let ns = router.namespace_of_channel(name);
            reaches(ns) && Arc::ptr_eq(&ns.backend, backend)
        };
        match sub {
            "PUBSUB|NUMSUB" | "PUBSUB|SHARDNUMSUB" => {
                let mut counts = vec![0i64; command.args.len().saturating_sub(2)];
                for ns in &targets {
                    let reply = match self.ask(ns, command, started).await {
                        Ok(frame) => frame,
                        Err(reply) => return (reply, DoubleStyle::default()),
                    };
                    let items = items(reply);
                    for (i, pair) in items.chunks(2).enumerate() {
                        if let ([name, count], Some(slot)) = (pair, counts.get_mut(i)) {
                            if text(name).is_some_and(|n| routes_to(&n, &ns.backend)) {
                                *slot += integer(count);
                            }
                        }
                    }
                }
                let mut reply = Vec::new();
                for (name, count) in command.args.iter().skip(2).zip(counts) {
                    reply.push(bulk(name.clone()));
                    reply.push(number(count));
                }
                (array(reply).into(), DoubleStyle::default())
            }
            "PUBSUB|NUMPAT" => {
                let mut total = 0;
                for ns in &targets {
                    match self.ask(ns, command, started).await {
                        Ok(frame) => total += integer(&frame),
                        Err(reply) => return (reply, DoubleStyle::default()),
                    }
                }
                (number(total).into(), DoubleStyle::default())
            }
            _ => {
                let mut seen: IndexMap<Bytes, ()> = IndexMap::new();
                for ns in &targets {
                    let reply = match self.ask(ns, command, started).await {
                        Ok(frame) => frame,
                        Err(reply) => return (reply, DoubleStyle::default()),
                    };
                    for name in items(reply).iter().filter_map(text) {
                        if routes_to(&name, &ns.backend) {
                            seen.insert(name, ());
                        }
                    }
                }
                let names = seen.into_keys().map(bulk).collect();
                (array(names).into(), DoubleStyle::default())
            }
        }
    }

    /// One backend's answer to a `PUBSUB` question, asked through the executor (a read:
    /// held through a failover). A SQL backend answers from its registry of every holdfast's
    /// subscriptions (`sql/broker.rs`).
    async fn ask(
        &mut self,
        namespace: &Arc<Namespace>,
        command: &Command,
        started: Instant,
    ) -> Result<Frame, Reply> {
        let (reply, _) = self.forward_to(namespace.clone(), command, started).await;
        if reply.is_error() {
            return Err(reply);
        }
        Ok(reply.into_frame())
    }
}

/// Subscribes each name of `plan` on its carriers' feeds (made where missing), a backend's
/// names in one call. On a failure nothing of this command stays subscribed.
async fn subscribe_on(
    subs: &mut Subscriptions,
    kind: SubKind,
    plan: &[(Bytes, Vec<Arc<Namespace>>)],
) -> Result<(), Frame> {
    // By backend: (feed index, the namespace it was reached through, its new names); and
    // each new name with the feeds that will carry it.
    let mut batches: Vec<(usize, Arc<Namespace>, Vec<Bytes>)> = Vec::new();
    let mut fresh: IndexMap<Bytes, Vec<usize>> = IndexMap::new();
    for (name, carriers) in plan {
        if subs.names[kind.index()].contains_key(name) || fresh.contains_key(name) {
            continue;
        }
        let mut carried = Vec::with_capacity(carriers.len());
        for ns in carriers {
            let at = match subs
                .feeds
                .iter()
                .position(|(b, _)| Arc::ptr_eq(b, &ns.backend))
            {
                Some(at) => at,
                None => {
                    let hold = ns.policy.backoff.total_before_jitter();
                    let feed = ns.backend.feed(subs.outbox.clone(), hold);
                    subs.feeds.push((ns.backend.clone(), feed));
                    subs.feeds.len() - 1
                }
            };
            match batches.iter_mut().find(|(i, _, _)| *i == at) {
                Some((_, _, names)) => names.push(name.clone()),
                None => batches.push((at, ns.clone(), vec![name.clone()])),
            }
            carried.push(at);
        }
        fresh.insert(name.clone(), carried);
    }
    for (batch, (at, ns, names)) in batches.iter().enumerate() {
        let Some((_, feed)) = subs.feeds.get(*at) else {
            continue;
        };
        let hold = ns.policy.backoff.total_before_jitter();
        let Err(e) = feed.subscribe(kind, names, hold).await else {
            continue;
        };
        // Nothing of this command stays subscribed: the failed batch (a SQL backend keeps
        // what it was given) and those before it.
        for (at, _, names) in &batches[..=batch] {
            if let Some((_, feed)) = subs.feeds.get(*at) {
                feed.unsubscribe(kind, names).await;
            }
        }
        let answer = match e {
            // The backend's own refusal (`-NOPERM` of its ACL), as it answered.
            BackendError::Reply { frame, .. } => *frame,
            e if classify(&e) == ErrorClass::Other => error(format!("ERR holdfast: {e}")),
            e => error(format!(
                "UNAVAILABLE not subscribed: backend '{}' of namespace '{}' did not confirm the subscription within {:?} ({})",
                ns.backend.name(),
                ns.name,
                hold,
                crate::exec::chain(&e)
            )),
        };
        return Err(answer);
    }
    for (name, feeds) in fresh {
        subs.names[kind.index()].insert(name, feeds);
    }
    Ok(())
}

fn unsubscribed(kind: SubKind, name: Option<Bytes>, count: i64) -> Frame {
    push(vec![
        bulk(Bytes::from_static(confirmation(kind, false))),
        name.map_or(Frame::Null, bulk),
        number(count),
    ])
}

fn items(frame: Frame) -> Vec<Frame> {
    match frame {
        Frame::Array { data, .. } => data,
        _ => Vec::new(),
    }
}

fn text(frame: &Frame) -> Option<Bytes> {
    match frame {
        Frame::BlobString { data, .. } | Frame::SimpleString { data, .. } => Some(data.clone()),
        _ => None,
    }
}

fn integer(frame: &Frame) -> i64 {
    match frame {
        Frame::Number { data, .. } => *data,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_take_redis_shapes() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let shape = |f: Frame| match f {
            Frame::Push { data, .. } => data.into_iter().filter_map(|x| text(&x)).collect(),
            _ => Vec::new(),
        };
        let d = |kind, pattern: Option<&str>| Delivery {
            backend: "b".into(),
            kind,
            pattern: pattern.map(b),
            channel: b("ch"),
            payload: b("hi"),
        };
        assert_eq!(
            shape(delivery_frame(d(SubKind::Channel, None))),
            vec![b("message"), b("ch"), b("hi")]
        );
        assert_eq!(
            shape(delivery_frame(d(SubKind::Pattern, Some("c*")))),
            vec![b("pmessage"), b("c*"), b("ch"), b("hi")]
        );
        assert_eq!(
            shape(delivery_frame(d(SubKind::Shard, None))),
            vec![b("smessage"), b("ch"), b("hi")]
        );
    }
}
