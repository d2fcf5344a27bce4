//! A Redis Cluster on holdfast's own links: the slot map, one link per primary, and the
//! redirections.
//!
//! The slot map comes from `CLUSTER SLOTS`, asked of any node holdfast knows (the configured
//! seeds first), read as Redis documents its endpoints: the first field of a node is its
//! address, unless it is null, empty or `?` (a node that does not know its own address):
//! then it is the address that was asked. It is read again when a node answers `MOVED` (the
//! command ran nowhere, and is sent where the answer says, up to `max_redirections` times),
//! when a link to a node fails, and every [`REFRESH`]. When the map changes, the links to
//! nodes that no longer own a slot are closed at once — fenced: what is in flight there
//! fails as Transient, and nothing more is sent to a demoted primary. `ASK` is followed with
//! `ASKING` and the command, back to back on the target's link, without changing the map.
//!
//! Each pooled connection of a Cluster backend is a [`Nodes`]: its own link to every
//! primary it has sent to, all following one shared [`Topology`].

use super::codec::{read_frame, write_command};
use super::dial::{self, Target};
use super::link::{self, Link};
use super::warm::Warm;
use super::{BackendError, Reply};
use crate::error::{classify, ErrorClass};
use crate::error::{LinkError as Error, LinkErrorKind as ErrorKind};
use bytes::{Bytes, BytesMut};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

use super::dial::Addr;

/// How often the slot map is read again without a reason.
pub const REFRESH: Duration = Duration::from_secs(10);

/// A reply this late is a reason to read the map again (and again each as long): its node
/// may be frozen and replaced, and its links must be closed before it wakes and answers as
/// the primary it no longer is.
pub const STALLED: Duration = Duration::from_secs(1);

/// Slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// The CRC Redis Cluster hashes keys with (CRC16-CCITT, XMODEM).
const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The hash slot of `key`, as Redis Cluster computes it: the CRC of the key, or of its hash
/// tag (what stands between the first `{` and the first `}` after it, when not empty).
pub fn keyslot(key: &[u8]) -> u16 {
    let tagged = memchr::memchr(b'{', key).and_then(|open| {
        let rest = &key[open + 1..];
        let close = memchr::memchr(b'}', rest)?;
        (close > 0).then(|| &rest[..close])
    });
    // Below 16384, so the cast is lossless.
    (CRC16.checksum(tagged.unwrap_or(key)) as usize % SLOTS) as u16
}

/// Which primary owns each slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotMap {
    /// The primaries, each once.
    pub primaries: Vec<Addr>,
    /// For each slot, an index into `primaries` (None: no node serves it).
    owners: Vec<Option<u16>>,
}

impl SlotMap {
    /// The primary that owns `slot`.
    pub fn owner(&self, slot: u16) -> Option<&Addr> {
        let at = (*self.owners.get(usize::from(slot))?)?;
        self.primaries.get(usize::from(at))
    }

    /// Whether no slot has an owner (the map was never read).
    pub fn is_empty(&self) -> bool {
        self.primaries.is_empty()
    }

    /// Reads a `CLUSTER SLOTS` reply from the node at `asked`: each range is `[start, end,
    /// primary, replicas...]`, each node `[host, port, id, ...]`.
    ///
    /// # Errors
    /// When the reply is not shaped so.
    pub fn parse(reply: &Frame, asked: &Addr) -> Result<SlotMap, String> {
        let Frame::Array { data: ranges, .. } = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}"));
        };
        let mut map = SlotMap {
            primaries: Vec::new(),
            owners: vec![None; SLOTS],
        };
        for range in ranges {
            let Frame::Array { data, .. } = range else {
                return Err(format!("a slot range is {range:?}"));
            };
            let (Some(start), Some(end), Some(node)) = (
                data.first().and_then(number),
                data.get(1).and_then(number),
                data.get(2),
            ) else {
                return Err(format!("a slot range is {data:?}"));
            };
            let addr = endpoint(node, asked).ok_or_else(|| format!("a node is {node:?}"))?;
            let at = match map.primaries.iter().position(|p| *p == addr) {
                Some(at) => at,
                None => {
                    map.primaries.push(addr);
                    map.primaries.len() - 1
                }
            };
            let at = u16::try_from(at).map_err(|_| "too many primaries".to_string())?;
            let (start, end) = (usize::try_from(start), usize::try_from(end));
            let (Ok(start), Ok(end)) = (start, end) else {
                return Err("a negative slot".to_string());
            };
            for slot in map
                .owners
                .get_mut(start..=end.min(SLOTS - 1))
                .into_iter()
                .flatten()
            {
                *slot = Some(at);
            }
        }
        Ok(map)
    }
}

/// A node's address as Redis documents `CLUSTER SLOTS` endpoints: its first field, unless
/// that is null, empty or `?` (the node does not know its own address): then the host that
/// was asked, with the node's port.
pub fn endpoint(node: &Frame, asked: &Addr) -> Option<Addr> {
    let Frame::Array { data, .. } = node else {
        return None;
    };
    let port = u16::try_from(data.get(1).and_then(number)?).ok()?;
    let host = match data.first()? {
        Frame::Null => None,
        other => text(other),
    };
    let host = match host {
        Some(host) if !host.is_empty() && host != "?" => host.to_string(),
        _ => asked.0.clone(),
    };
    Some((host, port))
}

fn number(frame: &Frame) -> Option<i64> {
    match frame {
        Frame::Number { data, .. } => Some(*data),
        _ => None,
    }
}

fn text(frame: &Frame) -> Option<&str> {
    match frame {
        Frame::BlobString { data, .. } | Frame::SimpleString { data, .. } => {
            std::str::from_utf8(data).ok()
        }
        _ => None,
    }
}

/// Where a `MOVED` or `ASK` error reply sends a command: `MOVED <slot> <host>:<port>`. An
/// empty host means the node that answered.
pub fn redirection(reply: &str, from: &Addr) -> Option<(bool, Addr)> {
    let mut words = reply.split(' ');
    let moved = match words.next()? {
        "MOVED" => true,
        "ASK" => false,
        _ => return None,
    };
    let _slot = words.next()?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() {
        from.0.clone()
    } else {
        host.to_string()
    };
    Some((moved, (host, port.parse().ok()?)))
}

/// The slot map of one Cluster backend, shared by its connections.
pub struct Topology {
    backend: Arc<str>,
    /// The configured nodes, asked first.
    seeds: Vec<Addr>,
    /// How the map is asked for (RESP2; its address set per node).
    target: Target,
    map: watch::Sender<Arc<SlotMap>>,
    /// A read of the map under way: the others wait for it instead of starting theirs.
    reading: tokio::sync::Mutex<()>,
    /// Reads of the map, for the one under way to tell a reader that came in after it.
    reads: AtomicU64,
    /// Why the last read failed, if it did: what a reader that waited for it is told.
    failed: Mutex<Option<Error>>,
}

impl Topology {
    /// A topology for `seeds`, read at once in the background and every [`REFRESH`].
    pub fn start(backend: &str, seeds: Vec<Addr>, target: &Target) -> Arc<Topology> {
        let topology = Arc::new(Topology {
            backend: backend.into(),
            seeds,
            target: target.with_proto(crate::resp::Proto::Resp2),
            map: watch::Sender::new(Arc::new(SlotMap::default())),
            reading: tokio::sync::Mutex::new(()),
            reads: AtomicU64::new(0),
            failed: Mutex::new(None),
        });
        let weak = Arc::downgrade(&topology);
        tokio::spawn(async move {
            loop {
                let Some(topology) = weak.upgrade() else {
                    return;
                };
                match topology.read().await {
                    // The first read is at start: a configuration that cannot work is said
                    // there, as an error, and every 10 s after.
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        tracing::error!(backend = %topology.backend, error = %e, "the backend cannot be used as configured: requests to it are answered with this error at once");
                    }
                    Err(e) => {
                        tracing::warn!(backend = %topology.backend, error = %e, "reading the cluster's slot map failed");
                    }
                    Ok(()) => {}
                }
                drop(topology);
                tokio::time::sleep(REFRESH).await;
            }
        });
        topology
    }

    /// The map as it stands.
    pub fn map(&self) -> Arc<SlotMap> {
        self.map.borrow().clone()
    }

    /// Changes of the map, for the links to close those to demoted nodes.
    pub fn changes(&self) -> watch::Receiver<Arc<SlotMap>> {
        self.map.subscribe()
    }

    /// The map, read first when it never was.
    ///
    /// # Errors
    /// `IO` (nothing was sent) when no node answers `CLUSTER SLOTS`.
    pub async fn known(&self) -> Result<Arc<SlotMap>, Error> {
        let map = self.map();
        if !map.is_empty() {
            return Ok(map);
        }
        self.read().await?;
        Ok(self.map())
    }

    /// Reads the map again (or waits for a read that started after the caller's reason).
    ///
    /// # Errors
    /// `IO` when no node answers.
    pub async fn read(&self) -> Result<(), Error> {
        let before = self.reads.load(Ordering::Acquire);
        let _reading = self.reading.lock().await;
        if self.reads.load(Ordering::Acquire) != before {
            // Another read finished while this one waited: it saw what we would.
            return match self.failed.lock().ok().and_then(|f| f.clone()) {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        let known = self.map();
        // The nodes the map names, then the seeds: a seed may be gone for good.
        let mut asked: Vec<Addr> = known.primaries.clone();
        asked.extend(
            self.seeds
                .iter()
                .filter(|s| !known.primaries.contains(s))
                .cloned(),
        );
        let mut last = Error::new(ErrorKind::Io, "no cluster node to ask");
        for node in asked {
            match self.slots_of(&node).await {
                Ok(map) if map.is_empty() => {
                    last = Error::new(ErrorKind::Io, format!("{node:?} serves no slot"));
                }
                Ok(map) => {
                    self.settle(None);
                    self.map.send_if_modified(|current| {
                        if **current == map {
                            return false;
                        }
                        if !current.is_empty() && current.primaries != map.primaries {
                            crate::metrics::primary_changed(&self.backend);
                        }
                        tracing::info!(backend = %self.backend, primaries = ?map.primaries, "the cluster's slot map changed");
                        *current = Arc::new(map);
                        true
                    });
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        self.settle(Some(last.clone()));
        Err(last)
    }

    /// Ends a read: its failure is kept for those that waited on it.
    fn settle(&self, failed: Option<Error>) {
        if let Ok(mut f) = self.failed.lock() {
            *f = failed;
        }
        self.reads.fetch_add(1, Ordering::AcqRel);
    }

    /// `CLUSTER SLOTS` of one node, on a connection of its own.
    async fn slots_of(&self, node: &Addr) -> Result<SlotMap, Error> {
        let target = self.target.at(node);
        let ask = async {
            let (mut stream, _) = dial::connect(&target).await?;
            let slots = [Bytes::from_static(b"CLUSTER"), Bytes::from_static(b"SLOTS")];
            write_command(&mut stream, &slots).await?;
            read_frame(&mut stream, &mut BytesMut::new()).await
        };
        let frame = tokio::time::timeout(target.connection_timeout(), ask)
            .await
            .map_err(|_| Error::new(ErrorKind::Timeout, "CLUSTER SLOTS timed out"))??;
        if let Err(refused) = BackendError::check_reply(frame.clone()) {
            // An error that is not "not now" (LOADING, CLUSTERDOWN, ...) is the node saying
            // it is no Cluster node at all: the configuration is wrong, and waiting will
            // not heal it (NotFound: the request is answered at once, the log says why).
            let kind = match classify(&refused) {
                ErrorClass::NotAttempted => ErrorKind::Io,
                _ => ErrorKind::NotFound,
            };
            let what = format!("{node:?} answered CLUSTER SLOTS with {frame:?}");
            return Err(Error::new(kind, what));
        }
        SlotMap::parse(&frame, node).map_err(|e| Error::new(ErrorKind::Protocol, e))
    }
}

/// One pooled connection of a Cluster backend: a link to each primary it has sent to.
pub struct Nodes {
    topology: Arc<Topology>,
    /// How its links introduce themselves (the pool's protocol), at each node's address.
    target: Target,
    /// The version the last dialled node gave (Redis 7.2 spells doubles differently).
    version: Mutex<Option<(u32, u32)>>,
    links: Mutex<HashMap<Addr, Arc<Link>>>,
    /// What its links tell the pool (commands not yet written, a `WAIT` unanswered).
    signals: link::Signals,
    /// Set when closed: no link is dialled any more.
    closed: AtomicBool,
    /// Links dialled ahead, taken before dialling (a client's own connection).
    warm: Option<Arc<Warm>>,
    /// Stops the task that fences links to demoted nodes.
    fencing: tokio::task::JoinHandle<()>,
}

impl Nodes {
    /// A connection following `topology`; its links are dialled as they are needed (taken
    /// from `warm` when one is ready there).
    pub fn new(
        topology: Arc<Topology>,
        target: Target,
        signals: link::Signals,
        warm: Option<Arc<Warm>>,
    ) -> Arc<Nodes> {
        Arc::new_cyclic(|weak: &std::sync::Weak<Nodes>| {
            let weak = weak.clone();
            let mut changes = topology.changes();
            let fencing = tokio::spawn(async move {
                let mut watchdog = tokio::time::interval(STALLED);
                watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        changed = changes.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            let map = changes.borrow_and_update().clone();
                            let Some(nodes) = weak.upgrade() else {
                                return;
                            };
                            nodes.fence(&map);
                        }
                        _ = watchdog.tick() => {
                            let Some(nodes) = weak.upgrade() else {
                                return;
                            };
                            if nodes.stalled() {
                                let topology = nodes.topology.clone();
                                drop(nodes);
                                if let Err(e) = topology.read().await {
                                    tracing::debug!(error = %e, "reading the slot map after a stall failed");
                                }
                            }
                        }
                    }
                }
            });
            Nodes {
                topology,
                target,
                version: Mutex::new(None),
                links: Mutex::new(HashMap::new()),
                signals,
                closed: AtomicBool::new(false),
                warm,
                fencing,
            }
        })
    }

    /// Whether a link has waited [`STALLED`] or longer for a reply.
    fn stalled(&self) -> bool {
        let Ok(links) = self.links.lock() else {
            return false;
        };
        links.values().any(|link| {
            link.waiting_since()
                .is_some_and(|since| since.elapsed() >= STALLED)
        })
    }

    /// Closes the links to nodes that own no slot in `map` any more.
    fn fence(&self, map: &SlotMap) {
        let fenced: Vec<Arc<Link>> = {
            let Ok(mut links) = self.links.lock() else {
                return;
            };
            let gone: Vec<Addr> = links
                .keys()
                .filter(|addr| !map.primaries.contains(addr))
                .cloned()
                .collect();
            gone.iter().filter_map(|addr| links.remove(addr)).collect()
        };
        for link in fenced {
            link.close();
            crate::metrics::connection_fenced(&self.topology.backend);
        }
    }

    /// The link to `node`, dialled when there is none (or it closed).
    async fn link(&self, node: &Addr) -> Result<Arc<Link>, Error> {
        if let Some(link) = self.live_link(node) {
            return Ok(link);
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Io, "the connection was closed"));
        }
        let target = self.target.at(node);
        let taken = self.warm.as_ref().and_then(|warm| warm.take(&target, None));
        let dialled = match taken {
            Some(taken) => Ok(taken),
            None => Link::connect(&target, self.signals.clone()).await,
        };
        let (link, _task, server) = match dialled {
            Ok(dialled) => dialled,
            Err(e) => {
                // The node may be gone: the map may know better now.
                let topology = self.topology.clone();
                tokio::spawn(async move { topology.read().await });
                return Err(e);
            }
        };
        if !server.is_primary() {
            // The map is stale: this node was demoted.
            link.close();
            let topology = self.topology.clone();
            tokio::spawn(async move { topology.read().await });
            return Err(Error::new(
                ErrorKind::Io,
                format!("{node:?} is no longer a primary"),
            ));
        }
        if let Ok(mut version) = self.version.lock() {
            *version = server.version;
        }
        let link = Arc::new(link);
        let Ok(mut links) = self.links.lock() else {
            return Err(Error::new(ErrorKind::Io, "the connection's state is lost"));
        };
        // Another request may have dialled it meanwhile: keep one.
        let kept = match links.get(node) {
            Some(other) if !other.is_closed() => {
                link.close();
                other.clone()
            }
            _ => {
                links.insert(node.clone(), link.clone());
                link
            }
        };
        Ok(kept)
    }

    /// The version of the server last dialled.
    pub fn version(&self) -> Option<(u32, u32)> {
        self.version.lock().ok().and_then(|v| *v)
    }

    /// Dials the owner of slot 0 (or any primary): a dial proves the map and a node answer.
    ///
    /// # Errors
    /// When the map cannot be read or the node cannot be reached.
    pub async fn dial(&self) -> Result<(), Error> {
        let node = self.node(None).await?;
        self.link(&node).await.map(|_| ())
    }

    fn live_link(&self, node: &Addr) -> Option<Arc<Link>> {
        let links = self.links.lock().ok()?;
        links.get(node).filter(|l| !l.is_closed()).cloned()
    }

    /// The primary for `slot` (any primary for a command without a key).
    async fn node(&self, slot: Option<u16>) -> Result<Addr, Error> {
        let map = self.topology.known().await?;
        let owner = match slot {
            Some(slot) => map.owner(slot),
            None => map.primaries.first(),
        };
        owner.cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("no node of the cluster serves slot {slot:?}"),
            )
        })
    }

    /// The node `slot`'s requests go to now, if the map knows it.
    pub fn owner_now(&self, slot: Option<u16>) -> Option<Addr> {
        let map = self.topology.map();
        match slot {
            Some(slot) => map.owner(slot).cloned(),
            None => map.primaries.first().cloned(),
        }
    }

    /// Sends `command` (of `slot`) with `send` on the link of the node that owns its slot,
    /// following `MOVED` (reading the map again) and `ASK` up to `redirections` times.
    ///
    /// # Errors
    /// [`BackendError::Connect`] when no link could be had (nothing was sent); whatever
    /// `send` answers.
    pub async fn send<F, Fut>(
        &self,
        slot: Option<u16>,
        redirections: u32,
        send: F,
    ) -> Result<Reply, BackendError>
    where
        F: Fn(Arc<Link>, bool) -> Fut,
        Fut: std::future::Future<Output = Result<Reply, BackendError>>,
    {
        let not_sent = |source| BackendError::Connect { source };
        let mut node = self.node(slot).await.map_err(not_sent)?;
        let mut asking = false;
        let mut hops = 0;
        loop {
            let link = self.link(&node).await.map_err(not_sent)?;
            let reply = send(link, asking).await;
            let redirected = match &reply {
                Err(BackendError::Reply { prefix, frame })
                    if prefix == "MOVED" || prefix == "ASK" =>
                {
                    match &**frame {
                        Frame::SimpleError { data, .. } => redirection(data, &node),
                        _ => None,
                    }
                }
                _ => None,
            };
            match redirected {
                Some((moved, to)) if hops < redirections => {
                    hops += 1;
                    if moved {
                        // Ran nowhere. The map is stale: read it again, and go where told.
                        let topology = self.topology.clone();
                        tokio::spawn(async move { topology.read().await });
                    }
                    asking = !moved;
                    node = to;
                }
                _ => {
                    let stale = match &reply {
                        // A demoted primary: fence its link.
                        Err(BackendError::Reply { prefix, .. }) if prefix == "READONLY" => {
                            self.drop_link(&node);
                            true
                        }
                        // The node may be gone.
                        Err(BackendError::Sent { .. }) => true,
                        _ => false,
                    };
                    if stale {
                        let topology = self.topology.clone();
                        tokio::spawn(async move { topology.read().await });
                    }
                    return reply;
                }
            }
        }
    }

    /// The link to `node` for a run of requests sent back to back.
    ///
    /// # Errors
    /// When none could be had (nothing was sent).
    pub async fn link_to(&self, node: &Addr) -> Result<Arc<Link>, Error> {
        self.link(node).await
    }

    fn drop_link(&self, node: &Addr) {
        let link = self.links.lock().ok().and_then(|mut l| l.remove(node));
        if let Some(link) = link {
            link.close();
        }
    }

    /// Every primary's link, for a command that goes to all of them (FLUSHALL).
    ///
    /// # Errors
    /// When the map cannot be read or a primary cannot be reached.
    pub async fn every_primary(&self) -> Result<Vec<Arc<Link>>, Error> {
        let map = self.topology.known().await?;
        let mut links = Vec::new();
        for node in &map.primaries {
            links.push(self.link(node).await?);
        }
        Ok(links)
    }

    /// Closes every link: what is in flight fails as sent.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.fencing.abort();
        if let Ok(mut links) = self.links.lock() {
            for (_, link) in links.drain() {
                link.close();
            }
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.fencing.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(s: &str) -> Frame {
        Frame::BlobString {
            data: Bytes::copy_from_slice(s.as_bytes()),
            attributes: None,
        }
    }

    fn num(n: i64) -> Frame {
        Frame::Number {
            data: n,
            attributes: None,
        }
    }

    fn array(items: Vec<Frame>) -> Frame {
        Frame::Array {
            data: items,
            attributes: None,
        }
    }

    fn node(host: Frame, port: i64) -> Frame {
        array(vec![host, num(port), blob("id")])
    }

    fn at(host: &str, port: u16) -> Addr {
        (host.to_string(), port)
    }

    #[test]
    fn an_endpoint_that_does_not_know_its_address_is_the_one_asked() {
        let asked = at("10.0.0.9", 7000);
        let cases = [
            (node(blob("10.0.0.1"), 7001), Some(at("10.0.0.1", 7001))),
            (
                node(blob("redis-1.example"), 7001),
                Some(at("redis-1.example", 7001)),
            ),
            (node(blob(""), 7002), Some(at("10.0.0.9", 7002))),
            (node(blob("?"), 7003), Some(at("10.0.0.9", 7003))),
            (node(Frame::Null, 7004), Some(at("10.0.0.9", 7004))),
            (node(blob("h"), 70_000), None),
            (blob("not a node"), None),
        ];
        for (frame, want) in cases {
            assert_eq!(endpoint(&frame, &asked), want, "{frame:?}");
        }
    }

    #[test]
    fn a_slot_map_names_each_slots_primary() {
        let asked = at("127.0.0.1", 7000);
        let reply = array(vec![
            array(vec![
                num(0),
                num(5460),
                node(blob(""), 7000),
                node(blob("127.0.0.1"), 7003),
            ]),
            array(vec![num(5461), num(10922), node(blob("127.0.0.1"), 7001)]),
            array(vec![num(10923), num(16383), node(blob("127.0.0.1"), 7002)]),
        ]);
        let map = SlotMap::parse(&reply, &asked).expect("a map");
        assert_eq!(map.owner(0), Some(&at("127.0.0.1", 7000)));
        assert_eq!(map.owner(5460), Some(&at("127.0.0.1", 7000)));
        assert_eq!(map.owner(5461), Some(&at("127.0.0.1", 7001)));
        assert_eq!(map.owner(16383), Some(&at("127.0.0.1", 7002)));
        assert_eq!(map.primaries.len(), 3, "replicas are not primaries");
        let partial = array(vec![array(vec![num(0), num(99), node(blob("a"), 1)])]);
        let map = SlotMap::parse(&partial, &asked).expect("a map");
        assert_eq!(map.owner(100), None, "a slot nobody serves");
        assert!(SlotMap::parse(&blob("x"), &asked).is_err());
        assert!(SlotMap::parse(&array(vec![array(vec![num(0)])]), &asked).is_err());
    }

    /// Slots as Redis computes them: the CRC's check value, a slot from Redis's documentation,
    /// and fred's hashing (a Redis client library's) for keys with and without hash tags.
    #[test]
    fn keys_hash_to_the_slots_redis_gives_them() {
        assert_eq!(keyslot(b"123456789"), 12739);
        assert_eq!(keyslot(b"somekey"), 11058);
        for key in [
            "foo",
            "{user1000}.following",
            "{user1000}.followers",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "foo{bar}{zap}",
            "{",
            "}{",
            "a{b",
            "",
        ] {
            assert_eq!(
                keyslot(key.as_bytes()),
                fred::util::redis_keyslot(key.as_bytes()),
                "{key}"
            );
        }
        assert_eq!(keyslot(b"{user1000}.following"), keyslot(b"user1000"));
    }

    #[test]
    fn redirections_say_where_and_whether_the_map_moved() {
        let from = at("10.0.0.9", 7000);
        let cases = [
            (
                "MOVED 3999 127.0.0.1:6381",
                Some((true, at("127.0.0.1", 6381))),
            ),
            (
                "ASK 3999 127.0.0.1:6381",
                Some((false, at("127.0.0.1", 6381))),
            ),
            ("MOVED 3999 :6381", Some((true, at("10.0.0.9", 6381)))),
            ("MOVED 3999 [::1]:6381", Some((true, at("::1", 6381)))),
            ("ERR wrong", None),
            ("MOVED 3999", None),
        ];
        for (reply, want) in cases {
            assert_eq!(redirection(reply, &from), want, "{reply}");
        }
    }
}
