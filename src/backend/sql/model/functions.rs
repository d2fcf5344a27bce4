//! `FUNCTION` and `FCALL` on SQL backends. A library's code is kept in `hf_libraries` and
//! its functions (name, flags, description) in `hf_functions`, so every holdfast on the
//! database calls them, before and after a restart. `FUNCTION LOAD` runs the library once on
//! an interpreter to learn its functions; `FCALL` runs it on whichever interpreter takes the
//! call (once per interpreter) and calls the function there, in the request's transaction
//! as a script is (`scripting`).

use super::scripting::{answered, execute};
use super::store::{fail, stmt, Ctx, Fail, Out};
use crate::backend::lua::library::{self, flag_names, NO_WRITES};
use crate::backend::lua::{Entry, Invocation};
use crate::backend::rdb;
use bytes::Bytes;
use redis_protocol::resp3::types::{BytesFrame as Frame, FrameMap, FrameSet};

fn bulk(b: &[u8]) -> Frame {
    Frame::BlobString {
        data: Bytes::copy_from_slice(b),
        attributes: None,
    }
}

fn int(n: i64) -> Frame {
    Frame::Number {
        data: n,
        attributes: None,
    }
}

fn map(pairs: Vec<(Frame, Frame)>) -> Frame {
    Frame::Map {
        data: pairs.into_iter().collect::<FrameMap<_, _>>(),
        attributes: None,
    }
}

/// `FCALL name numkeys key... arg...` and `FCALL_RO`.
pub async fn fcall(ctx: &mut Ctx<'_>, a: &[Bytes], ro: bool, allow_flush: bool) -> Out {
    let Some(env) = ctx.script else {
        return fail("ERR holdfast: scripts inside MULTI are not served by SQL backends");
    };
    let name = a.get(1).cloned().unwrap_or_default();
    let row = ctx.opt(stmt(
        "SELECT l.code, f.flags FROM hf_functions f JOIN hf_libraries l ON l.name = f.library \
         WHERE f.name = $1",
    )
    .bind(name.as_ref()))
    .await?;
    let Some(row) = row else {
        return fail("ERR Function not found");
    };
    let code: Vec<u8> = row.try_get(0)?;
    let flags: i64 = row.try_get(1)?;
    let numkeys = match super::args::int(a.get(2).map(|n| n.as_ref()).unwrap_or_default()) {
        Ok(n) => n,
        Err(_) => return fail("ERR Bad number of keys provided"),
    };
    if numkeys > a.len().saturating_sub(3) as i64 {
        return fail("ERR Number of keys can't be greater than number of args");
    }
    if numkeys < 0 {
        return fail("ERR Number of keys can't be negative");
    }
    let numkeys = numkeys as usize;
    let no_writes = flags & NO_WRITES != 0;
    if ro && !no_writes {
        return fail("ERR Can not execute a script with write flag using *_ro command.");
    }
    let keys: Vec<&[u8]> = a[3..3 + numkeys].iter().map(|k| k.as_ref()).collect();
    ctx.lock(&keys).await?;
    let sha = crate::backend::scripts::digest(&code);
    let invocation = Invocation {
        entry: Entry::Function(String::from_utf8_lossy(&name).into_owned()),
        body: Bytes::from(code),
        sha,
        keys: a[3..3 + numkeys].to_vec(),
        argv: a[3 + numkeys..].to_vec(),
    };
    let frame = execute(ctx, env, invocation, ro || no_writes, allow_flush).await?;
    answered(ctx, frame)
}

/// `FUNCTION LOAD|LIST|DELETE|FLUSH|DUMP|RESTORE|STATS` (`KILL` is answered before any
/// transaction, as `SCRIPT KILL` is).
pub async fn function(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let sub = a.get(1).map(|s| s.to_ascii_uppercase()).unwrap_or_default();
    match sub.as_slice() {
        b"LOAD" => load(ctx, a).await,
        b"LIST" => list(ctx, a).await,
        b"DUMP" if a.len() == 2 => dump(ctx).await,
        b"RESTORE" if a.len() >= 3 => restore(ctx, a).await,
        b"DELETE" if a.len() == 3 => {
            let name = &a[2];
            let gone = ctx
                .execute(stmt("DELETE FROM hf_libraries WHERE name = $1").bind(name.as_ref()))
                .await?;
            if gone.rows_affected() == 0 {
                return fail("ERR Library not found");
            }
            ctx.execute(stmt("DELETE FROM hf_functions WHERE library = $1").bind(name.as_ref()))
                .await?;
            Ok(super::store::ok())
        }
        b"FLUSH"
            if a.len() == 2
                || (a.len() == 3
                    && (a[2].eq_ignore_ascii_case(b"SYNC")
                        || a[2].eq_ignore_ascii_case(b"ASYNC"))) =>
        {
            ctx.execute(stmt("DELETE FROM hf_libraries")).await?;
            ctx.execute(stmt("DELETE FROM hf_functions")).await?;
            Ok(super::store::ok())
        }
        b"FLUSH" => fail("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
        b"STATS" if a.len() == 2 => {
            let libraries: i64 = ctx
                .scalar(stmt("SELECT COUNT(*) FROM hf_libraries"))
                .await?;
            let functions: i64 = ctx
                .scalar(stmt("SELECT COUNT(*) FROM hf_functions"))
                .await?;
            Ok(map(vec![
                (bulk(b"running_script"), Frame::Null),
                (
                    bulk(b"engines"),
                    map(vec![(
                        bulk(b"LUA"),
                        map(vec![
                            (bulk(b"libraries_count"), int(libraries)),
                            (bulk(b"functions_count"), int(functions)),
                        ]),
                    )]),
                ),
            ]))
        }
        _ => fail(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(a.get(1).map(|s| s.as_ref()).unwrap_or_default())
        )),
    }
}

/// `FUNCTION LOAD [REPLACE] code`.
async fn load(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let mut replace = false;
    let mut at = 2;
    while at < a.len().saturating_sub(1) {
        if a[at].eq_ignore_ascii_case(b"REPLACE") {
            replace = true;
            at += 1;
        } else {
            return fail(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(&a[at])
            ));
        }
    }
    let Some(code) = a.get(at) else {
        return fail("ERR Function code is missing");
    };
    let name = match library::metadata(code) {
        Ok((_, name)) => name,
        Err(text) => return fail(text),
    };
    let exists = format!("ERR Library '{name}' already exists");
    install(ctx, &name, code, replace, &exists).await?;
    Ok(bulk(name.as_bytes()))
}

/// `FUNCTION DUMP`: every library, in Redis's payload format (strings written plain).
async fn dump(ctx: &mut Ctx<'_>) -> Out {
    let codes: Vec<Vec<u8>> = ctx
        .scalars(stmt("SELECT code FROM hf_libraries ORDER BY name"))
        .await?;
    let mut out = Vec::new();
    for code in codes {
        out.push(FUNCTION2);
        rdb::put_string(&mut out, &code);
    }
    rdb::seal(&mut out);
    Ok(bulk(&out))
}

/// RDB's type byte of a function library.
const FUNCTION2: u8 = 245;

/// `FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]`: all of the payload's libraries, or
/// none (an error rolls the request's transaction back).
async fn restore(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    if a.len() > 4 {
        return fail(
            "ERR unknown subcommand or wrong number of arguments for 'RESTORE'. Try FUNCTION HELP.",
        );
    }
    let policy = a.get(3).map(|p| p.to_ascii_uppercase());
    let (flush, replace) =
        match policy.as_deref() {
            None | Some(b"APPEND") => (false, false),
            Some(b"REPLACE") => (false, true),
            Some(b"FLUSH") => (true, false),
            Some(_) => return fail(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ),
        };
    let Some(body) = rdb::unseal(&a[2]) else {
        return fail("ERR DUMP payload version or checksum are wrong");
    };
    let mut reader = rdb::Reader::new(body);
    let mut codes = Vec::new();
    while !reader.done() {
        match reader.byte() {
            Some(FUNCTION2) => {}
            Some(_) => return fail("ERR given type is not a function"),
            None => return fail("ERR can not read data type"),
        }
        let Some(code) = reader.string() else {
            return fail("ERR Failed loading library payload");
        };
        codes.push(Bytes::from(code));
    }
    if flush {
        ctx.execute(stmt("DELETE FROM hf_libraries")).await?;
        ctx.execute(stmt("DELETE FROM hf_functions")).await?;
    }
    for code in &codes {
        let name = match library::metadata(code) {
            Ok((_, name)) => name,
            Err(text) => return fail(text),
        };
        let exists = format!("ERR Library {name} already exists");
        install(ctx, &name, code, replace, &exists).await?;
    }
    Ok(super::store::ok())
}

/// Runs `code` to learn its functions, and stores the library (replacing one of its name
/// when `replace`). Errors as Redis words them.
async fn install(
    ctx: &mut Ctx<'_>,
    name: &str,
    code: &Bytes,
    replace: bool,
    exists_text: &str,
) -> Result<(), Fail> {
    let Some(env) = ctx.script else {
        return fail("ERR holdfast: FUNCTION LOAD inside MULTI is not served by SQL backends");
    };
    let exists: Option<i64> = ctx
        .scalar_opt(stmt("SELECT 1 FROM hf_libraries WHERE name = $1").bind(name.as_bytes()))
        .await?;
    if exists.is_some() && !replace {
        return fail(exists_text);
    }
    let invocation = Invocation {
        entry: Entry::Load,
        body: code.clone(),
        sha: crate::backend::scripts::digest(code),
        keys: vec![],
        argv: vec![],
    };
    let listing = execute(ctx, env, invocation, true, false).await?;
    let functions = match listing {
        Frame::Array { data, .. } => data,
        Frame::SimpleError { data, .. } => return fail(data.to_string()),
        _ => {
            return Err(Fail::Reply(String::from(
                "ERR holdfast: FUNCTION LOAD learnt nothing",
            )))
        }
    };
    let mut rows = Vec::with_capacity(functions.len());
    for f in functions {
        let Frame::Array { data, .. } = f else {
            continue;
        };
        let mut parts = data.into_iter();
        let (Some(Frame::BlobString { data: fname, .. }), Some(Frame::Number { data: flags, .. })) =
            (parts.next(), parts.next())
        else {
            continue;
        };
        let description = match parts.next() {
            Some(Frame::BlobString { data, .. }) => Some(data.to_vec()),
            _ => None,
        };
        rows.push((fname, flags, description));
    }
    for (fname, _, _) in &rows {
        let owner: Option<Vec<u8>> = ctx
            .scalar_opt(
                stmt("SELECT library FROM hf_functions WHERE name = $1").bind(fname.as_ref()),
            )
            .await?;
        if owner.is_some_and(|o| o != name.as_bytes()) {
            return fail(format!(
                "ERR Function {} already exists",
                String::from_utf8_lossy(fname)
            ));
        }
    }
    ctx.execute(stmt("DELETE FROM hf_functions WHERE library = $1").bind(name.as_bytes()))
        .await?;
    ctx.execute(
        stmt(
            "INSERT INTO hf_libraries (name, code) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET code = excluded.code",
        )
        .bind(name.as_bytes())
        .bind(code.as_ref()),
    )
    .await?;
    for (fname, flags, description) in rows {
        ctx.execute(
            stmt(
                "INSERT INTO hf_functions (name, library, flags, description) VALUES ($1, $2, $3, $4)",
            )
            .bind(fname.to_vec())
            .bind(name.as_bytes())
            .bind(flags)
            .bind(description),
        )
        .await?;
    }
    Ok(())
}

/// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`.
async fn list(ctx: &mut Ctx<'_>, a: &[Bytes]) -> Out {
    let (mut with_code, mut pattern) = (false, None);
    let mut i = 2;
    while i < a.len() {
        if !with_code && a[i].eq_ignore_ascii_case(b"WITHCODE") {
            with_code = true;
        } else if pattern.is_none() && a[i].eq_ignore_ascii_case(b"LIBRARYNAME") {
            if i + 1 >= a.len() {
                return fail("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(a[i].clone());
        } else {
            return fail(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(&a[i])
            ));
        }
        i += 1;
    }
    let libraries = ctx
        .all(stmt("SELECT name, code FROM hf_libraries ORDER BY name"))
        .await?;
    let functions = ctx
        .all(stmt(
            "SELECT library, name, flags, description FROM hf_functions ORDER BY library, name",
        ))
        .await?;
    let mut out = Vec::new();
    for row in libraries {
        let name: Vec<u8> = row.try_get(0)?;
        let code: Vec<u8> = row.try_get(1)?;
        if pattern
            .as_ref()
            .is_some_and(|p| !super::args::glob(p, &name))
        {
            continue;
        }
        let mut listed = Vec::new();
        for f in &functions {
            let library: Vec<u8> = f.try_get(0)?;
            if library != name {
                continue;
            }
            let fname: Vec<u8> = f.try_get(1)?;
            let flags: i64 = f.try_get(2)?;
            let description: Option<Vec<u8>> = f.try_get(3)?;
            let flags = flag_names(flags)
                .into_iter()
                .map(|f| Frame::SimpleString {
                    data: Bytes::from_static(f.as_bytes()),
                    attributes: None,
                })
                .collect::<FrameSet<Frame>>();
            listed.push(map(vec![
                (bulk(b"name"), bulk(&fname)),
                (
                    bulk(b"description"),
                    description.as_deref().map_or(Frame::Null, bulk),
                ),
                (
                    bulk(b"flags"),
                    Frame::Set {
                        data: flags,
                        attributes: None,
                    },
                ),
            ]));
        }
        let mut pairs = vec![
            (bulk(b"library_name"), bulk(&name)),
            (bulk(b"engine"), bulk(b"LUA")),
            (
                bulk(b"functions"),
                Frame::Array {
                    data: listed,
                    attributes: None,
                },
            ),
        ];
        if with_code {
            pairs.push((bulk(b"library_code"), bulk(&code)));
        }
        out.push(map(pairs));
    }
    Ok(Frame::Array {
        data: out,
        attributes: None,
    })
}
