//! A client's own transaction state on a SQL backend: MULTI/EXEC's queue, WATCH's versions,
//! and a blocking command's wait.

use super::{blocking, simple, watch, Inner, SqlBackend, Token};
use crate::backend::{BackendError, Proto, Request};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::{Arc, Mutex};
use std::time::Duration;

impl SqlBackend {
    /// A MULTI/EXEC emulation owned by one client connection.
    pub fn dedicated(&self, proto: Proto, acquire_timeout: Duration) -> SqlDedicated {
        SqlDedicated {
            inner: self.inner.clone(),
            proto,
            acquire_timeout,
            queue: Mutex::new(None),
            watched: Mutex::new(Vec::new()),
        }
    }
}

/// MULTI/EXEC, WATCH and blocking commands for one client: commands are queued here and run
/// at EXEC in one transaction, after the watched keys' versions are checked in it (`watch`);
/// a blocking command waits here (`blocking`).
pub struct SqlDedicated {
    inner: Arc<Inner>,
    proto: Proto,
    acquire_timeout: Duration,
    queue: Mutex<Option<Vec<Vec<Bytes>>>>,
    /// The keys watched, with the version each had (`watch`).
    watched: Mutex<Vec<(Bytes, i64)>>,
}

impl SqlDedicated {
    /// One command on this client's transaction state.
    ///
    /// # Errors
    /// As [`SqlBackend::dispatch`].
    pub async fn send(&self, request: &Request<'_>) -> Result<Frame, BackendError> {
        let name = request
            .args
            .first()
            .map(|n| n.to_ascii_uppercase())
            .unwrap_or_default();
        let queued = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            match (name.as_slice(), queue.as_mut()) {
                (b"MULTI", _) => {
                    *queue = Some(Vec::new());
                    return Ok(simple("OK"));
                }
                (b"DISCARD", _) => {
                    *queue = None;
                    self.unwatch();
                    return Ok(simple("OK"));
                }
                (b"EXEC", _) => queue.take(),
                (b"WATCH", Some(_)) => {
                    return Err(BackendError::reply(Bytes::from_static(
                        b"ERR WATCH inside MULTI is not allowed",
                    )))
                }
                (_, Some(q)) => {
                    q.push(request.args.to_vec());
                    return Ok(simple("QUEUED"));
                }
                (b"UNWATCH", None) => {
                    self.unwatch();
                    return Ok(simple("OK"));
                }
                (_, None) => None,
            }
        };
        match queued {
            Some(commands) => self.exec(commands).await,
            None if name.as_slice() == b"WATCH" => self.watch(request.args).await,
            None if name.as_slice() == b"EXEC" => Err(BackendError::reply(Bytes::from_static(
                b"ERR EXEC without MULTI",
            ))),
            None if blocking::waits(request.args) => {
                self.block(request.args, request.hold, request.token).await
            }
            None => self.once(request.args).await,
        }
    }
}

impl SqlDedicated {
    /// `EXEC`: the queued commands in one transaction, after checking (in it) that no
    /// watched key changed; nil, and nothing applied, if one did.
    async fn exec(&self, mut commands: Vec<Vec<Bytes>>) -> Result<Frame, BackendError> {
        let watched = std::mem::take(&mut *self.watched.lock().unwrap_or_else(|p| p.into_inner()));
        let checked = !watched.is_empty();
        if checked {
            let mut check = vec![Bytes::from_static(watch::CHECK)];
            for (key, version) in watched {
                check.push(key);
                check.push(Bytes::from(version.to_string()));
            }
            commands.insert(0, check);
        }
        let refs: Vec<&[Bytes]> = commands.iter().map(|c| c.as_slice()).collect();
        let mut replies = match self
            .inner
            .run(&refs, self.proto, self.acquire_timeout, true, None, None)
            .await
        {
            Err(BackendError::Watched) => return Ok(Frame::Null),
            other => other?,
        };
        if checked && !replies.is_empty() {
            replies.remove(0);
        }
        Ok(Frame::Array {
            data: replies,
            attributes: None,
        })
    }

    /// `WATCH key ...`: remembers each key's version now.
    async fn watch(&self, args: &[Bytes]) -> Result<Frame, BackendError> {
        let mut register = vec![Bytes::from_static(watch::WATCH)];
        register.extend(args.iter().skip(1).cloned());
        let versions = match self.once(&register).await? {
            Frame::Array { data, .. } => data,
            _ => Vec::new(),
        };
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        for (key, version) in args.iter().skip(1).zip(versions) {
            if let Frame::Number { data, .. } = version {
                watched.push((key.clone(), data));
            }
        }
        Ok(simple("OK"))
    }

    fn unwatch(&self) {
        self.watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// `XREAD … STREAMS key … $ …` with each `$` replaced by that stream's last id now;
    /// None for anything else.
    async fn resolve_last_ids(&self, args: &[Bytes]) -> Result<Option<Vec<Bytes>>, BackendError> {
        let is_xread = args
            .first()
            .is_some_and(|n| n.eq_ignore_ascii_case(b"XREAD"));
        let Some(streams) = args.iter().position(|x| x.eq_ignore_ascii_case(b"STREAMS")) else {
            return Ok(None);
        };
        let rest = args.len() - streams - 1;
        if !is_xread
            || rest == 0
            || !rest.is_multiple_of(2)
            || !args[streams + 1..].iter().any(|x| x.as_ref() == b"$")
        {
            return Ok(None);
        }
        let keys = &args[streams + 1..streams + 1 + rest / 2];
        let mut ask = vec![Bytes::from_static(b"HF.XLAST")];
        ask.extend(keys.iter().cloned());
        let Frame::Array { data: last, .. } = self.once(&ask).await? else {
            return Ok(None);
        };
        let mut out = args.to_vec();
        for (i, id) in last.into_iter().enumerate() {
            let at = streams + 1 + rest / 2 + i;
            if let (Some(slot), Frame::BlobString { data, .. }) = (out.get_mut(at), id) {
                if slot.as_ref() == b"$" {
                    *slot = data;
                }
            }
        }
        Ok(Some(out))
    }

    /// One command, outside a transaction.
    async fn once(&self, args: &[Bytes]) -> Result<Frame, BackendError> {
        let mut replies = self
            .inner
            .run(&[args], self.proto, self.acquire_timeout, false, None, None)
            .await?;
        BackendError::check_reply(replies.pop().unwrap_or(Frame::Null))
    }

    /// A blocking command: tried, and tried again whenever one of its keys may have
    /// something, until it takes something or its timeout passes (then nil, as Redis).
    /// A failed try is tried again or answered by [`blocking::after_failure`]: through an
    /// outage for up to `hold`; after a lost reply only with exact mode's `token`, which
    /// every try carries (recorded only by the one that takes something), so the try after
    /// it answers what was taken, even past the command's own timeout.
    async fn block(
        &self,
        args: &[Bytes],
        hold: Duration,
        token: Option<&[u8]>,
    ) -> Result<Frame, BackendError> {
        let until = match blocking::timeout(args) {
            Ok(limit) => limit.map(|d| tokio::time::Instant::now() + d),
            // One attempt answers the error Redis answers first (BLMOVE's sides come
            // before its timeout).
            Err(_) => return self.once(args).await,
        };
        // `XREAD`'s `$` is the last id when the command came, not when a retry runs.
        let resolved;
        let args = match self.resolve_last_ids(args).await? {
            Some(with_ids) => {
                resolved = with_ids;
                resolved.as_slice()
            }
            None => args,
        };
        // Registered before the first try: a write between the try and the wait still
        // wakes it.
        let waiter = self.inner.wakers.wait_on(blocking::keys(args));
        let mut down_since = None;
        // The failure of a try that may have taken something: the next try must look for
        // its token, and must come; none that follows can make it less in doubt.
        let mut owed: Option<BackendError> = None;
        loop {
            let tried = self
                .inner
                .run(
                    &[args],
                    self.proto,
                    self.acquire_timeout,
                    false,
                    token.map(|id| Token {
                        id,
                        again: owed.is_some(),
                    }),
                    None,
                )
                .await
                .and_then(|mut replies| {
                    BackendError::check_reply(replies.pop().unwrap_or(Frame::Null))
                });
            let e = match tried {
                // Found nothing: neither now nor under its token.
                Ok(Frame::Null) => {
                    down_since = None;
                    owed = None;
                    if !waiter.wait(until).await {
                        return Ok(Frame::Null);
                    }
                    continue;
                }
                Ok(reply) => return Ok(reply),
                Err(e) => e,
            };
            let class = crate::error::classify(&e);
            let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
            let next = blocking::after_failure(class, token.is_some(), since.elapsed(), hold);
            match (class, next) {
                (crate::error::ErrorClass::Transient, blocking::AfterFailure::TryAgain) => {
                    owed = Some(e)
                }
                (_, blocking::AfterFailure::TryAgain) => {}
                // Not attempted: an earlier try's doubt stands. An error reply: the try ran,
                // looked for the token and found none, so it is the answer.
                (crate::error::ErrorClass::NotAttempted, _) => return Err(owed.unwrap_or(e)),
                _ => return Err(e),
            }
            let next = tokio::time::Instant::now() + self.inner.wakers.poll();
            match until {
                Some(until) if until <= next && owed.is_none() => {
                    tokio::time::sleep_until(until).await;
                    return Ok(Frame::Null);
                }
                _ => tokio::time::sleep_until(next).await,
            }
        }
    }
}
