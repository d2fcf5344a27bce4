//! Sending a request on a pooled or a client's own connection, and reading its result: on a
//! link ([`on_link`]: a client's `WAIT` kept within bounds, a write for `min_replicas_ack`
//! counted by the `WAIT` after it), on a Cluster ([`on_cluster`]: `ASK` followed, `WAIT` on
//! the target's link), or through exact mode's script ([`exact()`]); where a pipelined run
//! goes ([`run_placement`], [`leading_run`]), and the commands about the whole keyspace a
//! Cluster answers apart.

use super::cluster::{keyslot, Nodes};
use super::exact;
use super::link;
use super::pool::{ensure_connected, Live, PoolConn};
use super::{BackendError, Placement, Proto, RedisBackend, Reply, Request};
use crate::backend::Blocking;
use crate::error::{LinkError, LinkErrorKind};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::time::Duration;

impl Live {
    /// Sends one request, through the exact-mode script when it carries a token.
    pub(super) async fn send(
        &self,
        request: &Request<'_>,
        response_timeout: Duration,
    ) -> Result<Reply, BackendError> {
        // The hot path: a plain command on a link, whose own close fails what is in flight.
        // Everything else is boxed so its (much larger) future is not carried by every
        // request's.
        let result = match (&self.conn, request.token) {
            (PoolConn::Link(link), None) => on_link(link, request, response_timeout).await,
            (PoolConn::Cluster(nodes), None) => {
                Box::pin(on_cluster(
                    nodes,
                    self.redirections,
                    request,
                    response_timeout,
                ))
                .await
            }
            (_, Some(token)) => Box::pin(exact(self, request, token, response_timeout)).await,
        };
        self.after_send(&result);
        result
    }

    /// A reply that did not come in time retires the connection.
    pub(super) fn after_send(&self, result: &Result<Reply, BackendError>) {
        if let Err(BackendError::Sent { source }) = result {
            if source.kind() == LinkErrorKind::Timeout {
                self.retire();
            }
        }
    }
}

impl RedisBackend {
    /// On a Cluster, the commands about the whole keyspace: FLUSHALL/FLUSHDB reach every
    /// primary (a Cluster has only database 0, so both flush it all); KEYS, SCAN, DBSIZE and
    /// RANDOMKEY are refused, since one node's answer would silently be a part of the whole.
    /// None for every other command.
    pub(super) async fn on_every_primary(
        &self,
        request: &Request<'_>,
        acquire_timeout: Duration,
    ) -> Option<Result<Reply, BackendError>> {
        let name = request.args.first()?;
        if !whole_keyspace(request) {
            return None;
        }
        let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
        if is("FLUSHALL") || is("FLUSHDB") {
            let flush = async {
                let slot = self.placed(request).await;
                let live = ensure_connected(slot, acquire_timeout).await?;
                match &live.conn {
                    PoolConn::Cluster(nodes) => {
                        let links = nodes
                            .every_primary()
                            .await
                            .map_err(|source| BackendError::Connect { source })?;
                        let primaries = links.len();
                        for (flushed, link) in links.into_iter().enumerate() {
                            let reply = link_reply(
                                request.proto,
                                link.send(request.args, None, Some(self.response_timeout))
                                    .await,
                            );
                            match reply {
                                Ok(_) => {}
                                Err(e) if flushed == 0 => return Err(e),
                                // Some primaries flushed already: whatever this one says,
                                // the command was applied in part, so it is in doubt, never
                                // "not applied" (it is idempotent: a retry flushes them all).
                                Err(e) => {
                                    return Err(BackendError::Sent {
                                        source: LinkError::new(
                                            LinkErrorKind::Io,
                                            format!(
                                                "flushed {flushed} of {primaries} primaries, \
                                                 then: {e}"
                                            ),
                                        ),
                                    })
                                }
                            }
                        }
                    }
                    PoolConn::Link(_) => {
                        return Err(BackendError::Unsupported {
                            what: "a cluster connection is not a single link".to_string(),
                        })
                    }
                }
                Ok(Reply::from(Frame::SimpleString {
                    data: Bytes::from_static(b"OK"),
                    attributes: None,
                }))
            };
            return Some(flush.await);
        }
        Some(Err(BackendError::Unsupported {
            what: format!(
                "holdfast: {} is not served on a cluster backend (the keys live on several nodes)",
                String::from_utf8_lossy(name).to_ascii_uppercase()
            ),
        }))
    }
}

/// Where requests sent back to back go: all on one connection (Redis runs them in that
/// order), the pinned one when any of them must be (a `WAIT` in a pipeline), else where the
/// first is placed.
pub(super) fn run_placement<'a>(requests: &[Request<'a>]) -> Placement<'a> {
    let pinned = requests
        .iter()
        .any(|r| matches!(r.placement, Placement::Pinned));
    match requests.first() {
        Some(first) if !pinned => first.placement,
        _ => Placement::Pinned,
    }
}

/// The slot a request is routed by on a Cluster: its route key, else its first argument;
/// None for a request without one, which goes to any node.
pub(super) fn request_slot(request: &Request<'_>) -> Option<u16> {
    request
        .route
        .or_else(|| request.args.get(1).map(|key| key.as_ref()))
        .map(keyslot)
}

/// The length of the leading run of equal, known nodes; at least 1 unless empty, since the
/// first request goes anyway (alone, when its node is unknown).
pub(super) fn leading_run<N: PartialEq>(nodes: impl IntoIterator<Item = Option<N>>) -> usize {
    let mut nodes = nodes.into_iter();
    match nodes.next() {
        None => 0,
        Some(None) => 1,
        Some(Some(first)) => 1 + nodes.take_while(|n| n.as_ref() == Some(&first)).count(),
    }
}

/// A command about the whole keyspace, which a Cluster cannot send to one node.
pub(super) fn whole_keyspace(request: &Request<'_>) -> bool {
    let Some(name) = request.args.first() else {
        return false;
    };
    ["FLUSHALL", "FLUSHDB", "KEYS", "SCAN", "DBSIZE", "RANDOMKEY"]
        .iter()
        .any(|word| name.eq_ignore_ascii_case(word.as_bytes()))
}

/// Sends one request on a connection, without exact mode's script.
async fn send(
    live: &Live,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    match &live.conn {
        PoolConn::Link(link) => on_link(link, request, response_timeout).await,
        PoolConn::Cluster(nodes) => {
            on_cluster(nodes, live.redirections, request, response_timeout).await
        }
    }
}

/// Sends one request on a Cluster connection: on the link of its slot's primary, following
/// redirections (`src/backend/redis/cluster.rs`). An `ASK` is followed by `ASKING` and the command
/// back to back on the target's link (then a `WAIT` of its own when the write wants
/// replicas).
async fn on_cluster(
    nodes: &Nodes,
    redirections: u32,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    let slot = request_slot(request);
    nodes
        .send(slot, redirections, |link, asking| async move {
            if !asking {
                return on_link(&link, request, response_timeout).await;
            }
            let asking_args = [Bytes::from_static(b"ASKING")];
            let mut replies = link
                .send_all(
                    [(&asking_args[..], None), (request.args, request.raw)].into_iter(),
                    response_timeout,
                )
                .await;
            let reply = link_reply(
                request.proto,
                replies.pop().unwrap_or_else(|| {
                    Err(link::SendError::NotSent(LinkError::new(
                        LinkErrorKind::Io,
                        "nothing was sent",
                    )))
                }),
            );
            // An error reply applied nothing, unless the command may write before its error.
            let counted = reply.is_ok() || request.error_may_write;
            if let (Some((wanted, wait)), true) = (request.replicas, counted) {
                let args = [
                    Bytes::from_static(b"WAIT"),
                    Bytes::from(wanted.to_string()),
                    Bytes::from(wait.as_millis().to_string()),
                ];
                let count = link.send(&args, None, Some(wait + response_timeout)).await;
                replicated(wanted, link_reply(request.proto, count))?;
            }
            reply
        })
        .await
}

/// A client's `WAIT numreplicas timeout`: its timeout (0: for ever). None for any other
/// command, or a `WAIT` whose timeout is not a number (Redis answers its error at once).
pub(super) fn client_wait(args: &[Bytes]) -> Option<Duration> {
    match args {
        [name, _, timeout] if name.eq_ignore_ascii_case(b"WAIT") => std::str::from_utf8(timeout)
            .ok()?
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis),
        _ => None,
    }
}

/// How long a request on a link may wait for its reply before the link is given up as dead
/// (its other commands failing as sent): `response_timeout`; a blocking command its own
/// timeout plus `response_timeout` (Redis answers it when the timeout passes), and one that
/// waits for ever no longer than the backend answers its probes
/// ([`super::DedicatedRedis::send`]); a client's `WAIT` likewise its own timeout plus
/// `response_timeout`. A `WAIT` cut short at `response_timeout` would take every other
/// client's command on its link with it.
fn reply_deadline(
    args: &[Bytes],
    blocking: Blocking,
    response_timeout: Duration,
) -> Option<Duration> {
    match (blocking, client_wait(args)) {
        (Blocking::Forever, _) => None,
        (Blocking::For(wait), _) | (Blocking::No, Some(wait)) => {
            Some(wait.saturating_add(response_timeout))
        }
        (Blocking::No, None) => Some(response_timeout),
    }
}

/// A client's `WAIT n 0` (for ever) as it is sent on a shared link: `WAIT n
/// response_timeout`. For ever, it would hold every other client's command queued behind it
/// on that connection for ever; it answers the count reached by then, which a client reads
/// as it reads any `WAIT` that timed out: not yet on `n` replicas. None for any other command.
fn bounded_wait(args: &[Bytes], response_timeout: Duration) -> Option<[Bytes; 3]> {
    match (client_wait(args), args) {
        (Some(Duration::ZERO), [name, replicas, _]) => Some([
            name.clone(),
            replicas.clone(),
            Bytes::from(response_timeout.as_millis().max(1).to_string()),
        ]),
        _ => None,
    }
}

/// Sends one request on a link.
async fn on_link(
    link: &link::Link,
    request: &Request<'_>,
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    if let (Some(replicas), false) = (request.replicas, request.blocking.blocks()) {
        let acked = link
            .send_acked(
                (request.args, request.raw),
                response_timeout,
                replicas,
                request.error_may_write,
            )
            .await;
        return acked_reply(request.proto, replicas.0, acked);
    }
    let bounded = bounded_wait(request.args, response_timeout);
    let (args, raw) = match &bounded {
        // Rewritten: the client's bytes no longer describe it.
        Some(args) => (&args[..], None),
        None => (request.args, request.raw),
    };
    let timeout = reply_deadline(args, request.blocking, response_timeout);
    link_reply(request.proto, link.send(args, raw, timeout).await)
}

/// A write's answer on a link with the count of the `WAIT` after it: acknowledged once
/// `wanted` replicas have it; short of them, or when the count failed, applied but not safe.
fn acked_reply(proto: Proto, wanted: u32, acked: link::Acked) -> Result<Reply, BackendError> {
    match acked {
        // The link was closed before the write was queued: nothing was written.
        Err(link::SendError::NotSent(source)) => Err(BackendError::Connect { source }),
        Err(link::SendError::Sent(source)) => Err(BackendError::Sent { source }),
        // An error reply that applied nothing: nothing to count.
        Ok((reply, Ok(None))) => link_reply(proto, Ok(reply)),
        Ok((reply, Ok(Some(got)))) if got >= i64::from(wanted) => link_reply(proto, Ok(reply)),
        Ok((_, Ok(Some(got)))) => Err(BackendError::NotReplicated { wanted, got }),
        Ok((_, Err(source))) => Err(BackendError::WaitFailed {
            wanted,
            source: Box::new(BackendError::Sent { source }),
        }),
    }
}

/// A link's answer as the backend's result: raw replies pass, decoded ones are checked for
/// an error reply.
pub(super) fn link_reply(
    proto: Proto,
    reply: Result<Reply, link::SendError>,
) -> Result<Reply, BackendError> {
    match reply {
        Ok(Reply::Frame(frame)) if proto == Proto::Resp3 => {
            BackendError::check_reply(crate::resp::restore_map_order(*frame)).map(Reply::from)
        }
        Ok(Reply::Frame(frame)) => BackendError::check_reply(*frame).map(Reply::from),
        Ok(raw) => Ok(raw),
        Err(link::SendError::NotSent(source)) => Err(BackendError::Connect { source }),
        Err(link::SendError::Sent(source)) => Err(BackendError::Sent { source }),
    }
}

/// Exact mode: the command inside the script of `src/backend/redis/exact.rs`, by its SHA and, when
/// the server does not have it cached, by its text.
async fn exact(
    live: &Live,
    request: &Request<'_>,
    token: &[u8],
    response_timeout: Duration,
) -> Result<Reply, BackendError> {
    let (mut args, tok) = exact::evalsha(request.args, request.proto, token, live.tokens);
    // The token key shares the command key's slot; the script runs on its node.
    let by_sha = Request {
        route: Some(&tok),
        ..request.with_args(&args)
    };
    let reply = match send(live, &by_sha, response_timeout).await {
        // Not in this server's script cache (a restart, a failover): nothing ran. EVAL runs
        // the script and caches it.
        Err(BackendError::Reply { prefix, .. }) if prefix == "NOSCRIPT" => {
            if let Some(first) = args.get_mut(0) {
                *first = Bytes::from_static(b"EVAL");
            }
            if let Some(second) = args.get_mut(1) {
                *second = Bytes::from_static(exact::SCRIPT.as_bytes());
            }
            let by_text = Request {
                route: Some(&tok),
                ..request.with_args(&args)
            };
            send(live, &by_text, response_timeout).await
        }
        other => other,
    };
    reply.map(exact::repair)
}

/// What `WAIT`'s answer says of the write before it: acknowledged once `wanted` replicas
/// have it, else applied but not safe.
fn replicated(wanted: u32, count: Result<Reply, BackendError>) -> Result<(), BackendError> {
    match count.map(Reply::into_frame) {
        Ok(Frame::Number { data, .. }) if data >= i64::from(wanted) => Ok(()),
        Ok(Frame::Number { data, .. }) => Err(BackendError::NotReplicated { wanted, got: data }),
        // WAIT itself failed: the write's fate on the replicas is unknown.
        Ok(_) => Err(BackendError::NotReplicated { wanted, got: 0 }),
        // Whatever it was (a connection closed before WAIT went out is "not sent"), it is
        // WAIT's failure: the write before it was applied, and is in doubt, never retried
        // as if nothing had run.
        Err(e) => Err(BackendError::WaitFailed {
            wanted,
            source: Box::new(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_due_within_its_own_wait_and_the_response_timeout() {
        let second = Duration::from_secs(1);
        let ms = Duration::from_millis;
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        for (words, want) in [
            (&["GET", "k"][..], Some(second)),
            // For ever: bounded by the probe instead.
            (&["BLPOP", "k", "0"][..], None),
            (&["BLPOP", "k", "1.5"][..], Some(ms(2500))),
            (&["BZPOPMIN", "k", "30"][..], Some(ms(31000))),
            (
                &["BLMOVE", "a", "b", "LEFT", "RIGHT", "2"][..],
                Some(ms(3000)),
            ),
            (&["BLMPOP", "2", "1", "k", "LEFT"][..], Some(ms(3000))),
            (
                &["XREAD", "BLOCK", "500", "STREAMS", "s", "$"][..],
                Some(ms(1500)),
            ),
            (&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"][..], None),
            // Refused at once by Redis: an ordinary reply.
            (&["BLPOP", "k", "x"][..], Some(second)),
            (&["WAIT", "1", "1500"][..], Some(ms(2500))),
            (&["wait", "1", "1500"][..], Some(ms(2500))),
            (&["WAIT", "1", "0"][..], Some(second)),
            (&["WAIT", "1", "x"][..], Some(second)),
            (&["WAIT", "1"][..], Some(second)),
        ] {
            let args = args(words);
            assert_eq!(
                reply_deadline(&args, Blocking::of(&args), second),
                want,
                "{words:?}"
            );
        }
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        let sent = |words: &[&str]| {
            bounded_wait(&args(words), second).map(|a| {
                a.iter()
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            sent(&["WAIT", "2", "0"]),
            Some(vec!["WAIT".into(), "2".into(), "1000".into()])
        );
        assert_eq!(sent(&["WAIT", "2", "10"]), None);
        assert_eq!(sent(&["GET", "0"]), None);
    }

    /// A write for `min_replicas_ack` that a closed link never queued was not sent: retried
    /// for every command. One queued and then lost may have been applied.
    #[test]
    fn an_acked_write_not_queued_is_not_attempted() {
        use crate::error::{classify, ErrorClass};
        let io = || LinkError::new(LinkErrorKind::Io, "closed");
        let not_sent = acked_reply(Proto::Resp2, 1, Err(link::SendError::NotSent(io())));
        let sent = acked_reply(Proto::Resp2, 1, Err(link::SendError::Sent(io())));
        assert_eq!(
            not_sent.map_err(|e| classify(&e)).err(),
            Some(ErrorClass::NotAttempted)
        );
        assert_eq!(
            sent.map_err(|e| classify(&e)).err(),
            Some(ErrorClass::Transient)
        );
    }

    #[test]
    fn a_run_sent_back_to_back_is_pinned_when_one_of_it_must_be() {
        let args = [Bytes::from_static(b"GET"), Bytes::from_static(b"k")];
        let read = Request {
            placement: Placement::Joins,
            ..Request::new(&args, Proto::Resp2, 1)
        };
        let wait = Request::new(&args, Proto::Resp2, 1);
        assert!(matches!(run_placement(&[read, read]), Placement::Joins));
        assert!(matches!(
            run_placement(&[read, wait, read]),
            Placement::Pinned
        ));
        assert!(matches!(run_placement(&[]), Placement::Pinned));
    }

    #[test]
    fn a_cluster_run_goes_together_only_while_it_stays_on_the_first_ones_node() {
        let cases: [(&[Option<u8>], usize); 7] = [
            (&[], 0),
            (&[Some(1)], 1),
            (&[Some(1), Some(1), Some(1)], 3),
            (&[Some(1), Some(2), Some(1)], 1),
            (&[Some(1), Some(1), Some(2), Some(1)], 2),
            // A request whose node is unknown goes alone, and ends the run before it.
            (&[None, Some(1)], 1),
            (&[Some(1), None, Some(1)], 1),
        ];
        for (nodes, want) in cases {
            assert_eq!(leading_run(nodes.iter().copied()), want, "{nodes:?}");
        }
        let args = [Bytes::from_static(b"SET"), Bytes::from_static(b"{t}a")];
        let routed = Request {
            route: Some(b"elsewhere"),
            ..Request::new(&args, Proto::Resp2, 1)
        };
        assert_eq!(
            request_slot(&routed),
            Some(keyslot(b"elsewhere")),
            "the route key"
        );
        let keyless = [Bytes::from_static(b"TIME")];
        assert_eq!(request_slot(&Request::new(&keyless, Proto::Resp2, 1)), None);
    }
}
