//! `EVAL`, `EVALSHA` and their read-only kin, and `SCRIPT`, on SQL backends.
//!
//! A script runs inside its request's transaction: every `redis.call` is one of the
//! commands of [`super::run`], on the same connection, so what the script writes and its
//! reply commit together or not at all. A script that raises after writing keeps its
//! writes, as in Redis; one stopped at its limit or by `SCRIPT KILL` is rolled back whole,
//! which Redis cannot do. Scripts are kept in `hf_scripts` by digest, so `EVALSHA` finds a
//! script loaded by any holdfast on the same database, before or after a restart.

use super::args;
use super::store::{fail, stmt, Ctx, Fail, Out, ScriptEnv};
use crate::backend::lua::{self, convert::error_frame, Finish, Gate, Invocation, Up};
use crate::backend::Proto;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

/// Which command runs the script.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Eval {
    Text,
    Sha,
    TextRo,
    ShaRo,
}

/// The commands no script may run (Redis's `noscript` flag), besides those the SQL
/// backends do not serve at all.
fn refused_in_scripts(name: &[u8]) -> bool {
    const REFUSED: &[&str] = &[
        "BLMOVE",
        "BLPOP",
        "BRPOP",
        "BRPOPLPUSH",
        "BZPOPMAX",
        "BZPOPMIN",
        "EVAL",
        "EVAL_RO",
        "EVALSHA",
        "EVALSHA_RO",
        "FCALL",
        "FCALL_RO",
        "FUNCTION",
        "SCRIPT",
        "MULTI",
        "EXEC",
        "DISCARD",
        "WATCH",
        "UNWATCH",
        "HF.WATCH",
        "HF.WATCHED",
        "SUBSCRIBE",
        "PSUBSCRIBE",
        "SSUBSCRIBE",
        "UNSUBSCRIBE",
        "PUNSUBSCRIBE",
        "SUNSUBSCRIBE",
        "WAIT",
        "CONFIG",
    ];
    REFUSED
        .iter()
        .any(|r| r.as_bytes().eq_ignore_ascii_case(name))
}

/// Whether `XREAD`/`XREADGROUP` asks to block, read as Redis's parser reads its options up to
/// `STREAMS` (an option it refuses first is left to the command to answer).
fn blocks(args: &[Bytes]) -> bool {
    let name = args.first().map(|n| n.as_ref()).unwrap_or_default();
    let group = name.eq_ignore_ascii_case(b"XREADGROUP");
    if !group && !name.eq_ignore_ascii_case(b"XREAD") {
        return false;
    }
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let option = args[i].to_ascii_uppercase();
        match option.as_slice() {
            b"BLOCK" if more > 0 => return true,
            b"COUNT" if more > 0 => {
                if args::int(&args[i + 1]).is_err() {
                    return false;
                }
                i += 2;
            }
            b"GROUP" if group && more > 1 => i += 3,
            b"NOACK" if group => i += 1,
            _ => return false,
        }
    }
    false
}

/// `EVAL script numkeys key... arg...` and its kin.
pub async fn eval(ctx: &mut Ctx<'_>, a: &[Bytes], how: Eval, allow_flush: bool) -> Out {
    let Some(env) = ctx.script else {
        return fail("ERR holdfast: scripts inside MULTI are not served by SQL backends");
    };
    let numkeys = numkeys(a)?;
    let by_sha = matches!(how, Eval::Sha | Eval::ShaRo);
    let named = a.get(1).cloned().unwrap_or_default();
    let (body, sha) = if by_sha {
        if named.len() != 40 {
            return fail(NOSCRIPT);
        }
        let sha = String::from_utf8_lossy(&named).to_ascii_lowercase();
        match stored(ctx, &sha).await? {
            Some(body) => (body, sha),
            // Loaded through holdfast, not into this database: Redis behind holdfast answers
            // such an EVALSHA too (`backend/scripts.rs`), and so does this, keeping the
            // script as `SCRIPT LOAD` would have.
            None => match env.known.and_then(|known| known.text(sha.as_bytes())) {
                Some(body) => {
                    if ctx.write {
                        keep(ctx, &sha, &body).await?;
                    }
                    (body, sha)
                }
                None => return fail(NOSCRIPT),
            },
        }
    } else {
        let sha = crate::backend::scripts::digest(&named);
        (named, sha)
    };
    let flags = match lua::flags(&body) {
        Ok(flags) => flags,
        Err(text) => return fail(text),
    };
    let ro = matches!(how, Eval::TextRo | Eval::ShaRo);
    if ro && flags.shebang && !flags.no_writes {
        return fail("ERR Can not execute a script with write flag using *_ro command.");
    }
    let keys: Vec<&[u8]> = a[3..3 + numkeys].iter().map(|k| k.as_ref()).collect();
    // PostgreSQL: the declared keys are held first, so two scripts on one key, from any
    // holdfast, run one after the other (each call also locks the keys it names).
    ctx.lock(&keys).await?;
    let invocation = Invocation {
        entry: lua::Entry::Eval,
        body: body.clone(),
        sha: sha.clone(),
        keys: a[3..3 + numkeys].to_vec(),
        argv: a[3 + numkeys..].to_vec(),
    };
    let frame = execute(ctx, env, invocation, ro || flags.no_writes, allow_flush).await?;
    let error = match &frame {
        Frame::SimpleError { data, .. } => Some(data.to_string()),
        _ => None,
    };
    // EVAL keeps its script for EVALSHA, unless it did not compile (Redis keeps those neither).
    let compiled = !error
        .as_deref()
        .is_some_and(|e| e.starts_with("ERR Error compiling script"));
    if !by_sha && ctx.write && compiled {
        keep(ctx, &sha, &body).await?;
    }
    answered(ctx, frame)
}

/// A script's reply as the request's: an error reply after nothing was written rolls
/// nothing back and is answered as any command's error; after a write, it commits with it.
pub(super) fn answered(ctx: &Ctx<'_>, frame: Frame) -> Out {
    match frame {
        Frame::SimpleError { data, .. } if !ctx.wrote => Err(Fail::Reply(data.to_string())),
        frame => Ok(frame),
    }
}

/// Runs `invocation` to its end on one of `env`'s interpreters, answering its calls in
/// `ctx`'s transaction; its reply (an error reply when it raised). Stopped (its limit,
/// `SCRIPT KILL`), it is an error the request answers, and its transaction rolls back.
pub(super) async fn execute<'c>(
    ctx: &mut Ctx<'c>,
    env: ScriptEnv<'c>,
    invocation: Invocation,
    read_only: bool,
    allow_flush: bool,
) -> Result<Frame, Fail> {
    let limit = env.gate.limit();
    let mut running = match env.runtime.start(invocation, limit) {
        Ok(running) => running,
        Err(text) => return fail(text),
    };
    // Inside the script, no script: the gate refuses EVAL, and so does this.
    ctx.script = None;
    let proto = ctx.proto;
    let outcome = drive(ctx, &mut running, env.gate, read_only, allow_flush).await;
    ctx.script = Some(env);
    ctx.proto = proto;
    match outcome? {
        Finish::Reply(frame) => Ok(frame),
        Finish::TimedOut => fail(format!(
            "ERR holdfast: the script ran past its script_time_limit ({}) and was stopped; nothing it wrote was applied",
            humantime_serde::re::humantime::format_duration(limit)
        )),
        Finish::Killed => fail(
            "ERR holdfast: the script was stopped by SCRIPT KILL; nothing it wrote was applied",
        ),
        Finish::Abandoned => {
            fail("ERR holdfast: the script was abandoned; nothing it wrote was applied")
        }
    }
}

/// `numkeys` of `EVAL`/`FCALL name numkeys key... arg...`, checked against the arguments.
pub(super) fn numkeys(a: &[Bytes]) -> Result<usize, Fail> {
    let numkeys = args::int(a.get(2).map(|n| n.as_ref()).unwrap_or_default())?;
    let rest = a.len().saturating_sub(3);
    if numkeys < 0 {
        return fail("ERR Number of keys can't be negative");
    }
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > rest {
        return fail("ERR Number of keys can't be greater than number of args");
    }
    Ok(numkeys)
}

/// Answers the script's calls until it ends. A database failure under it ends the script
/// and the request (the transaction is gone).
async fn drive(
    ctx: &mut Ctx<'_>,
    running: &mut lua::Running<'_>,
    gate: &dyn Gate,
    read_only: bool,
    allow_flush: bool,
) -> Result<Finish, Fail> {
    loop {
        match running.next().await {
            Up::Done(ended) => return Ok(ended),
            Up::Allowed { args } => {
                let answer = match gate.check(&args) {
                    Some(text) if text.starts_with("ERR Unknown Redis command") => {
                        error_frame(b"ERR Invalid command passed to redis.acl_check_cmd()")
                    }
                    other => Frame::Boolean {
                        data: other.is_none(),
                        attributes: None,
                    },
                };
                running.answer(answer);
            }
            Up::Call { args, resp3 } => {
                let name = args.first().map(|n| n.as_ref()).unwrap_or_default();
                let refusal = gate.check(&args).or_else(|| {
                    if refused_in_scripts(name) {
                        Some("ERR This Redis command is not allowed from script".to_string())
                    } else if blocks(&args) {
                        Some(format!(
                            "ERR {} command is not allowed with BLOCK option from scripts",
                            String::from_utf8_lossy(name)
                        ))
                    } else if read_only && super::writes(name) == Some(true) {
                        Some(
                            "ERR Write commands are not allowed from read-only scripts."
                                .to_string(),
                        )
                    } else {
                        None
                    }
                });
                let reply = match refusal {
                    Some(text) => error_frame(text.as_bytes()),
                    None => {
                        ctx.proto = if resp3 { Proto::Resp3 } else { Proto::Resp2 };
                        match Box::pin(super::run(ctx, &args, allow_flush)).await {
                            Ok(frame) => frame,
                            Err(Fail::Reply(text)) => error_frame(text.as_bytes()),
                            Err(other) => {
                                running.abandon().await;
                                return Err(other);
                            }
                        }
                    }
                };
                running.answer(reply);
            }
        }
    }
}

/// A script's text by digest.
async fn stored(ctx: &mut Ctx<'_>, sha: &str) -> Result<Option<Bytes>, Fail> {
    let body: Option<Vec<u8>> = ctx
        .scalar_opt(stmt("SELECT body FROM hf_scripts WHERE sha = $1").bind(sha.as_bytes()))
        .await?;
    Ok(body.map(Bytes::from))
}

/// Keeps a script under its digest (not a change to the data: `wrote` stays as it is).
async fn keep(ctx: &mut Ctx<'_>, sha: &str, body: &[u8]) -> Result<(), Fail> {
    ctx.run(
        stmt("INSERT INTO hf_scripts (sha, body) VALUES ($1, $2) ON CONFLICT (sha) DO NOTHING")
            .bind(sha.as_bytes())
            .bind(body),
    )
    .await?;
    Ok(())
}

/// `SCRIPT LOAD|EXISTS|FLUSH` (`KILL` is answered before any transaction: `SqlBackend`).
pub async fn script(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let sub = a.get(1).map(|s| s.to_ascii_uppercase()).unwrap_or_default();
    match sub.as_slice() {
        b"LOAD" if a.len() == 3 => {
            let body = &a[2];
            if let Err(text) = lua::flags(body) {
                return fail(text);
            }
            let sha = crate::backend::scripts::digest(body);
            if let Err(text) = lua::compiles(body) {
                return fail(text);
            }
            keep(ctx, &sha, body).await?;
            Ok(Frame::BlobString {
                data: Bytes::from(sha),
                attributes: None,
            })
        }
        b"EXISTS" if a.len() >= 3 => {
            let mut found = Vec::with_capacity(a.len() - 2);
            for sha in &a[2..] {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                let here = stored(ctx, &sha).await?.is_some();
                found.push(Frame::Number {
                    data: i64::from(here),
                    attributes: None,
                });
            }
            Ok(Frame::Array {
                data: found,
                attributes: None,
            })
        }
        b"FLUSH"
            if a.len() == 2
                || (a.len() == 3
                    && (a[2].eq_ignore_ascii_case(b"SYNC")
                        || a[2].eq_ignore_ascii_case(b"ASYNC"))) =>
        {
            ctx.execute(stmt("DELETE FROM hf_scripts")).await?;
            if let Some(env) = ctx.script {
                env.runtime.flush();
            }
            Ok(super::store::simple("OK"))
        }
        b"FLUSH" => fail("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        _ => fail(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(a.get(1).map(|s| s.as_ref()).unwrap_or_default())
        )),
    }
}
