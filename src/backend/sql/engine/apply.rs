//! A request's commands applied inside a transaction its caller opened: each on its own, or a
//! MULTI's with a savepoint each; exact mode's recorded replies; the keys a request locks; and
//! a command's failure as its transaction's.

use super::conn::{abandon, TxConn};
use super::{blocking, model, now_ms, unchanged, watch, Fail, Inner, SqlStage, Work};
use crate::backend::{BackendError, Proto};
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

impl Inner {
    /// Runs a job's commands on `conn`, inside a transaction the caller opened. Alone
    /// (`batch` false), an error reply is returned as [`BackendError::Reply`] and the caller
    /// rolls back; in a MULTI each command has a savepoint and its error reply takes its
    /// place among the replies, as Redis applies the rest of a transaction. `dirty` is set
    /// when a failure may have left changes behind that only a rollback undoes.
    pub(super) async fn apply(
        &self,
        conn: &mut TxConn,
        work: Work<'_>,
        dirty: &mut bool,
    ) -> Result<Vec<Frame>, BackendError> {
        let Work {
            commands,
            proto,
            batch,
            write,
            token,
            script,
        } = work;
        let script = script.map(|gate| model::store::ScriptEnv {
            runtime: &self.lua,
            gate,
            known: self.scripts.get().map(|s| &**s),
        });
        let mut replies = Vec::with_capacity(commands.len());
        let now = now_ms();
        if let (Some(token), [args]) = (token, commands) {
            let exact = Exact {
                proto,
                token,
                now,
                script,
            };
            return self.apply_exact(conn, args, exact, dirty).await;
        }
        if batch && write {
            // A MULTI locks every key it names first (PostgreSQL), in a fixed order, so its
            // reads see no other writer's commits half-way.
            let keys: Vec<&[u8]> = commands.iter().flat_map(|c| lock_keys(c)).collect();
            let mut ctx = conn.ctx(now, proto, self.dialect, write);
            if let Err(f) = ctx.lock(&keys).await {
                return Err(failure(conn, f, true, dirty));
            }
        }
        for args in commands {
            if batch {
                conn.exec("SAVEPOINT hf_cmd").await.map_err(|e| {
                    *dirty = true;
                    abandon(conn, e)
                })?;
            }
            let mut ctx = conn.ctx(now, proto, self.dialect, write);
            ctx.origin = self.broker.origin();
            ctx.script = script;
            match model::run(&mut ctx, args, self.allow_flush).await {
                Ok(frame) => {
                    if batch {
                        conn.exec("RELEASE SAVEPOINT hf_cmd").await.map_err(|e| {
                            *dirty = true;
                            abandon(conn, e)
                        })?;
                    }
                    replies.push(frame);
                }
                Err(Fail::Reply(text)) if batch => {
                    conn.exec("ROLLBACK TO SAVEPOINT hf_cmd")
                        .await
                        .map_err(|e| {
                            *dirty = true;
                            abandon(conn, e)
                        })?;
                    conn.exec("RELEASE SAVEPOINT hf_cmd").await.map_err(|e| {
                        *dirty = true;
                        abandon(conn, e)
                    })?;
                    replies.push(error_frame(text));
                }
                Err(f) => {
                    let wrote = ctx.wrote;
                    return Err(failure(conn, f, wrote, dirty));
                }
            }
        }
        Ok(replies)
    }

    /// Exact mode: in the command's own transaction, answer the reply recorded under
    /// `token` if there is one (applying nothing), else apply the command and record its
    /// reply. On PostgreSQL the key's lock comes first, so a dispatch still running on a
    /// connection the client lost finishes before the retry looks for the token.
    async fn apply_exact(
        &self,
        conn: &mut TxConn,
        args: &[Bytes],
        exact: Exact<'_>,
        dirty: &mut bool,
    ) -> Result<Vec<Frame>, BackendError> {
        let Exact {
            proto,
            token,
            now,
            script,
        } = exact;
        let mut ctx = conn.ctx(now, proto, self.dialect, true);
        ctx.origin = self.broker.origin();
        ctx.script = script;
        let keys = lock_keys(args);
        let recorded = async {
            ctx.lock(&keys).await?;
            let found: Option<Vec<u8>> = ctx
                .scalar_opt(
                    model::store::stmt(
                        "SELECT reply FROM hf_tokens WHERE token = $1 AND expires_at > $2",
                    )
                    .bind(token)
                    .bind(now),
                )
                .await?;
            Ok::<_, Fail>(found)
        }
        .await;
        let recorded = match recorded {
            Ok(found) => found,
            Err(f) => return Err(failure(conn, f, false, dirty)),
        };
        if let Some(raw) = recorded {
            return recorded_reply(raw);
        }
        let frame = match model::run(&mut ctx, args, self.allow_flush).await {
            Ok(frame) => frame,
            Err(f) => {
                let wrote = ctx.wrote;
                return Err(failure(conn, f, wrote, dirty));
            }
        };
        // A reply that proves nothing changed needs no token (`unchanged`).
        if unchanged::changed_nothing(args, &frame) {
            return Ok(vec![frame]);
        }
        let encoded = record_reply(&frame);
        let expires = now.saturating_add(crate::backend::TOKEN_TTL.as_millis() as i64);
        let stored = ctx
            .execute(
                model::store::stmt(
                    "INSERT INTO hf_tokens (token, reply, expires_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (token) DO UPDATE SET reply = excluded.reply, \
                     expires_at = excluded.expires_at",
                )
                .bind(token)
                .bind(encoded)
                .bind(expires),
            )
            .await;
        match stored {
            Ok(_) => Ok(vec![frame]),
            Err(f) => Err(failure(conn, f, true, dirty)),
        }
    }
}

/// What exact mode's one command runs with besides its arguments.
struct Exact<'a> {
    proto: Proto,
    token: &'a [u8],
    now: i64,
    script: Option<model::store::ScriptEnv<'a>>,
}

/// The keys a request of a transaction locks (PostgreSQL): its first key, every key of a
/// `DEL` or `UNLINK` (a run of them, `keys::del_run`, removes them all without locking each
/// on the way, so a concurrent group's `SADD` cannot add to a set being deleted), every key of
/// `EXEC`'s watch check, so no writer of a watched key commits between the check and the
/// commit, and every key `WATCH` registers, so a writer's group either commits before the
/// key's row is there or finds it and raises its version.
pub(super) fn lock_keys(args: &[Bytes]) -> Vec<&[u8]> {
    let name = args.first().map_or(&[][..], |n| n.as_ref());
    if name == watch::CHECK {
        return args.iter().skip(1).step_by(2).map(|k| k.as_ref()).collect();
    }
    if name == watch::WATCH {
        return args.iter().skip(1).map(|k| k.as_ref()).collect();
    }
    if name.eq_ignore_ascii_case(b"DEL") || name.eq_ignore_ascii_case(b"UNLINK") {
        return args.iter().skip(1).map(|k| k.as_ref()).collect();
    }
    if name.eq_ignore_ascii_case(b"BITOP") {
        return args.iter().skip(2).map(|k| k.as_ref()).collect();
    }
    if name.eq_ignore_ascii_case(b"XGROUP") {
        return args.get(2).map(|k| k.as_ref()).into_iter().collect();
    }
    if model::is_script(name) {
        // A script's declared keys, so two scripts on one key, from any holdfast, run one
        // after the other.
        let count = args
            .get(2)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        return args
            .iter()
            .skip(3)
            .take(count)
            .map(|k| k.as_ref())
            .collect();
    }
    if name.eq_ignore_ascii_case(b"XREADGROUP") {
        return blocking::stream_keys(args)
            .iter()
            .map(|k| k.as_ref())
            .collect();
    }
    args.get(1).map(|k| k.as_ref()).into_iter().collect()
}

/// A command's failure as its transaction's: a database error abandons the connection and
/// the transaction; an error reply needs a rollback only when something was written first.
pub(super) fn failure(conn: &mut TxConn, f: Fail, wrote: bool, dirty: &mut bool) -> BackendError {
    match f {
        Fail::Sql(_) | Fail::Lite(_) => {
            *dirty = true;
            abandon(conn, f)
        }
        Fail::Reply(text) => {
            *dirty |= wrote;
            BackendError::reply(Bytes::from(text))
        }
        Fail::Watched => {
            *dirty = true;
            BackendError::Watched
        }
    }
}

/// A request's reply as exact mode records it with its token (RESP3, doubles shortest).
pub(super) fn record_reply(frame: &Frame) -> Vec<u8> {
    let mut encoded = bytes::BytesMut::new();
    crate::resp::encode_reply(
        &mut encoded,
        frame,
        Proto::Resp3,
        crate::resp::Nils {
            top: false,
            nested: None,
        },
        crate::backend::DoubleStyle::Shortest,
    );
    encoded.to_vec()
}

/// The reply recorded under a token, read back. One that does not read back is never a
/// reason to apply the request again.
pub(super) fn recorded_reply(raw: Vec<u8>) -> Result<Vec<Frame>, BackendError> {
    match redis_protocol::resp3::decode::complete::decode_bytes(&Bytes::from(raw)) {
        Ok(Some((frame, _))) => Ok(vec![frame]),
        _ => Err(BackendError::reply(Bytes::from_static(
            b"ERR holdfast: the recorded reply of this request cannot be read",
        ))),
    }
}

/// A failure in a transaction's work, before `COMMIT` was sent.
pub(super) fn work_error(f: impl Into<Fail>) -> BackendError {
    super::conn::at(SqlStage::Work, f.into())
}

fn error_frame(text: String) -> Frame {
    Frame::SimpleError {
        data: text.into(),
        attributes: None,
    }
}

#[cfg(test)]
mod tests {
    use super::lock_keys;
    use bytes::Bytes;

    #[test]
    fn lock_keys_name_every_key_a_request_must_hold() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["SET", "k", "v"], &["k"]),
            (&["DEL", "a", "b"], &["a", "b"]),
            (&["unlink", "a", "b", "c"], &["a", "b", "c"]),
            (&["HF.WATCHED", "a", "1", "b", "2"], &["a", "b"]),
            // Every key WATCH registers, not only the first.
            (&["HF.WATCH", "a", "b", "c"], &["a", "b", "c"]),
            (&["BITOP", "AND", "d", "s1", "s2"], &["d", "s1", "s2"]),
            (&["XGROUP", "CREATE", "s", "g", "$"], &["s"]),
            (&["PING"], &[]),
            (&["EVAL", "return 1", "2", "a", "b", "arg"], &["a", "b"]),
            (&["EVALSHA", "abc", "0", "arg"], &[]),
        ];
        for (args, want) in cases {
            let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
            let got: Vec<&[u8]> = lock_keys(&args);
            let want: Vec<&[u8]> = want.iter().map(|w| w.as_bytes()).collect();
            assert_eq!(got, want, "{args:?}");
        }
    }
}
