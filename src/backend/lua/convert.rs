//! Replies between RESP and Lua, as Redis 7.0's scripting converts them.
//!
//! Into Lua (a `redis.call` reply): an integer is a number, a bulk string a string, a nil a
//! `false` (RESP2) or `nil` (RESP3), a status `{ok=…}`, an error `{err=…}`, an array a table;
//! under `redis.setresp(3)` a map is `{map={…}}`, a set `{set={member=true}}`, a double
//! `{double=…}`, a boolean a boolean. Out of Lua (the script's reply): a number is an
//! integer, truncated; a string a bulk string; `true` is 1 and `false` nil (RESP2) or a
//! boolean (RESP3); a table `{err=…}`, `{ok=…}`, `{double=…}`, `{map=…}`, `{set=…}`,
//! `{big_number=…}`, `{verbatim_string=…}` the reply it names, and any other table an
//! array of its elements up to the first nil.

use super::number::g17;
use bytes::Bytes;
use mlua::{Lua, Table, Value};
use redis_protocol::resp3::types::{BytesFrame as Frame, VerbatimStringFormat};

/// How deep a reply may nest either way, as Redis's Lua stack allows (the rest is an error).
const DEPTH: usize = 200;

/// The text of an error reply as Redis keeps it in a Lua error table: `-CODE msg` stays,
/// a text without a code gets `ERR`, and trailing line ends go.
pub fn error_text(text: &[u8]) -> Vec<u8> {
    let (code, msg): (&[u8], &[u8]) = match text.iter().position(|b| *b == b' ') {
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (b"ERR", text),
    };
    let mut msg = msg;
    while let [rest @ .., b'\r' | b'\n'] = msg {
        msg = rest;
    }
    let mut out = Vec::with_capacity(code.len() + 1 + msg.len());
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend_from_slice(msg);
    out
}

/// An error table `{err=text}`.
pub fn error_table(lua: &Lua, text: &[u8]) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set("err", lua.create_string(text)?)?;
    Ok(table)
}

/// A `redis.call` reply as a Lua value, and whether it was an error reply. `resp3` is the
/// script's `redis.setresp`.
pub fn to_lua(lua: &Lua, frame: Frame, resp3: bool) -> mlua::Result<(Value, bool)> {
    if let Frame::SimpleError { data, .. } = &frame {
        let text = error_text(data.as_bytes());
        return Ok((Value::Table(error_table(lua, &text)?), true));
    }
    if let Frame::BlobError { data, .. } = &frame {
        let text = error_text(data);
        return Ok((Value::Table(error_table(lua, &text)?), true));
    }
    Ok((value(lua, frame, resp3, 0)?, false))
}

fn single(lua: &Lua, field: &str, value: Value) -> mlua::Result<Value> {
    let table = lua.create_table()?;
    table.raw_set(field, value)?;
    Ok(Value::Table(table))
}

fn value(lua: &Lua, frame: Frame, resp3: bool, depth: usize) -> mlua::Result<Value> {
    if depth > DEPTH {
        return Ok(Value::Boolean(false));
    }
    let string = |bytes: &[u8]| lua.create_string(bytes).map(Value::String);
    Ok(match frame {
        Frame::Number { data, .. } => Value::Number(data as f64),
        Frame::BlobString { data, .. } => string(&data)?,
        Frame::SimpleString { data, .. } => single(lua, "ok", string(&data)?)?,
        Frame::SimpleError { data, .. } => {
            Value::Table(error_table(lua, &error_text(data.as_bytes()))?)
        }
        Frame::BlobError { data, .. } => Value::Table(error_table(lua, &error_text(&data))?),
        Frame::Null if resp3 => Value::Nil,
        Frame::Null => Value::Boolean(false),
        Frame::Boolean { data, .. } if resp3 => Value::Boolean(data),
        Frame::Boolean { data, .. } => Value::Number(if data { 1.0 } else { 0.0 }),
        Frame::Double { data, .. } if resp3 => single(lua, "double", Value::Number(data))?,
        Frame::Double { data, .. } => string(g17(data).as_bytes())?,
        Frame::BigNumber { data, .. } if resp3 => single(lua, "big_number", string(&data)?)?,
        Frame::BigNumber { data, .. } => string(&data)?,
        Frame::VerbatimString { data, format, .. } if resp3 => {
            let inner = lua.create_table()?;
            inner.raw_set("string", string(&data)?)?;
            let format: &[u8] = match format {
                VerbatimStringFormat::Text => b"txt",
                VerbatimStringFormat::Markdown => b"mkd",
            };
            inner.raw_set("format", string(format)?)?;
            single(lua, "verbatim_string", Value::Table(inner))?
        }
        Frame::VerbatimString { data, .. } => string(&data)?,
        Frame::Array { data, .. } | Frame::Push { data, .. } => {
            let table = lua.create_table_with_capacity(data.len(), 0)?;
            for (i, item) in data.into_iter().enumerate() {
                table.raw_set(i + 1, value(lua, item, resp3, depth + 1)?)?;
            }
            Value::Table(table)
        }
        Frame::Map { data, .. } if resp3 => {
            let inner = lua.create_table()?;
            for (k, v) in data {
                let k = value(lua, k, resp3, depth + 1)?;
                let v = value(lua, v, resp3, depth + 1)?;
                inner.raw_set(k, v)?;
            }
            single(lua, "map", Value::Table(inner))?
        }
        Frame::Map { data, .. } => {
            let table = lua.create_table_with_capacity(data.len() * 2, 0)?;
            for (i, (k, v)) in data.into_iter().enumerate() {
                table.raw_set(2 * i + 1, value(lua, k, resp3, depth + 1)?)?;
                table.raw_set(2 * i + 2, value(lua, v, resp3, depth + 1)?)?;
            }
            Value::Table(table)
        }
        Frame::Set { data, .. } if resp3 => {
            let inner = lua.create_table()?;
            for member in data {
                inner.raw_set(value(lua, member, resp3, depth + 1)?, true)?;
            }
            single(lua, "set", Value::Table(inner))?
        }
        Frame::Set { data, .. } => {
            let table = lua.create_table_with_capacity(data.len(), 0)?;
            for (i, member) in data.into_iter().enumerate() {
                table.raw_set(i + 1, value(lua, member, resp3, depth + 1)?)?;
            }
            Value::Table(table)
        }
        Frame::ChunkedString(data) => string(&data)?,
        Frame::Hello { .. } => Value::Boolean(false),
    })
}

/// An error reply; Redis turns line ends in one into spaces.
pub fn error_frame(text: &[u8]) -> Frame {
    let text: Vec<u8> = text
        .iter()
        .map(|b| if matches!(b, b'\r' | b'\n') { b' ' } else { *b })
        .collect();
    Frame::SimpleError {
        data: String::from_utf8_lossy(&text).into_owned().into(),
        attributes: None,
    }
}

/// The script's returned value as a reply. `resp3` is the script's `redis.setresp`: with
/// RESP2, `true` is 1 and `false` nil.
pub fn from_lua(value: &Value, resp3: bool) -> Frame {
    reply(value, resp3, 0)
}

fn reply(value: &Value, resp3: bool, depth: usize) -> Frame {
    if depth > DEPTH {
        return error_frame(b"ERR reached lua stack limit");
    }
    match value {
        Value::String(s) => Frame::BlobString {
            data: Bytes::copy_from_slice(&s.as_bytes()),
            attributes: None,
        },
        Value::Boolean(true) if !resp3 => Frame::Number {
            data: 1,
            attributes: None,
        },
        Value::Boolean(false) if !resp3 => Frame::Null,
        Value::Boolean(b) => Frame::Boolean {
            data: *b,
            attributes: None,
        },
        Value::Number(n) => Frame::Number {
            data: truncated(*n),
            attributes: None,
        },
        Value::Integer(n) => Frame::Number {
            data: *n,
            attributes: None,
        },
        Value::Table(table) => table_reply(table, resp3, depth),
        _ => Frame::Null,
    }
}

/// A Lua number as Redis's `(long long)` cast gives it on x86-64: truncated toward zero, and
/// the one "indefinite" value for a NaN or anything out of range.
fn truncated(n: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if !(-LIMIT..LIMIT).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

fn raw(table: &Table, field: &str) -> Value {
    table.raw_get::<Value>(field).unwrap_or(Value::Nil)
}

fn table_reply(table: &Table, resp3: bool, depth: usize) -> Frame {
    if let Value::String(err) = raw(table, "err") {
        return error_frame(&err.as_bytes());
    }
    if let Value::String(ok) = raw(table, "ok") {
        let text: Vec<u8> = ok
            .as_bytes()
            .iter()
            .map(|b| if matches!(b, b'\r' | b'\n') { b' ' } else { *b })
            .collect();
        return Frame::SimpleString {
            data: Bytes::from(text),
            attributes: None,
        };
    }
    // mlua gives an integral number as an integer.
    match raw(table, "double") {
        Value::Number(d) => {
            return Frame::Double {
                data: d,
                attributes: None,
            }
        }
        Value::Integer(d) => {
            return Frame::Double {
                data: d as f64,
                attributes: None,
            }
        }
        _ => {}
    }
    if let Value::String(n) = raw(table, "big_number") {
        let text: Vec<u8> = n
            .as_bytes()
            .iter()
            .map(|b| if matches!(b, b'\r' | b'\n') { b' ' } else { *b })
            .collect();
        return Frame::BigNumber {
            data: Bytes::from(text),
            attributes: None,
        };
    }
    if let Value::Table(v) = raw(table, "verbatim_string") {
        if let (Value::String(format), Value::String(s)) = (raw(&v, "format"), raw(&v, "string")) {
            let format = if &*format.as_bytes() == b"mkd" {
                VerbatimStringFormat::Markdown
            } else {
                VerbatimStringFormat::Text
            };
            return Frame::VerbatimString {
                data: Bytes::copy_from_slice(&s.as_bytes()),
                format,
                attributes: None,
            };
        }
    }
    if let Value::Table(map) = raw(table, "map") {
        let mut data = redis_protocol::resp3::types::FrameMap::default();
        let _ = map.for_each(|k: Value, v: Value| {
            data.insert(reply(&k, resp3, depth + 1), reply(&v, resp3, depth + 1));
            Ok(())
        });
        return Frame::Map {
            data,
            attributes: None,
        };
    }
    if let Value::Table(set) = raw(table, "set") {
        let mut data = redis_protocol::resp3::types::FrameSet::default();
        let _ = set.for_each(|k: Value, _: Value| {
            data.insert(reply(&k, resp3, depth + 1));
            Ok(())
        });
        return Frame::Set {
            data,
            attributes: None,
        };
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(reply(&item, resp3, depth + 1)),
        }
    }
    Frame::Array {
        data: items,
        attributes: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::BlobString {
            data: Bytes::copy_from_slice(s.as_bytes()),
            attributes: None,
        }
    }

    #[test]
    fn error_texts_keep_their_code_or_get_err() {
        for (text, want) in [
            ("ERR value is not an integer", "ERR value is not an integer"),
            ("WRONGTYPE Operation", "WRONGTYPE Operation"),
            ("boom", "ERR boom"),
            ("My Error\r\n", "My Error"),
        ] {
            assert_eq!(error_text(text.as_bytes()), want.as_bytes(), "{text}");
        }
    }

    #[test]
    fn lua_values_become_replies_as_in_redis() {
        let lua = Lua::new();
        let eval = |code: &str, resp3: bool| -> Frame {
            let v: Value = lua.load(code).eval().expect("valid Lua");
            from_lua(&v, resp3)
        };
        let num = |n| Frame::Number {
            data: n,
            attributes: None,
        };
        assert_eq!(eval("return 3.99", false), num(3));
        assert_eq!(eval("return -3.99", false), num(-3));
        assert_eq!(eval("return 1e20", false), num(i64::MIN));
        assert_eq!(eval("return 0/0", false), num(i64::MIN));
        assert_eq!(eval("return 'x'", false), bulk("x"));
        assert_eq!(eval("return true", false), num(1));
        assert_eq!(eval("return false", false), Frame::Null);
        assert_eq!(eval("return nil", false), Frame::Null);
        assert_eq!(
            eval("return true", true),
            Frame::Boolean {
                data: true,
                attributes: None
            }
        );
        // An array stops at its first nil.
        assert_eq!(
            eval("return {1, 'a', nil, 3}", false),
            Frame::Array {
                data: vec![num(1), bulk("a")],
                attributes: None
            }
        );
        assert_eq!(
            eval("return {err='My Error'}", false),
            error_frame(b"My Error")
        );
        assert_eq!(
            eval("return {ok='fine\\r\\nyes'}", false),
            Frame::SimpleString {
                data: Bytes::from_static(b"fine  yes"),
                attributes: None
            }
        );
        assert_eq!(
            eval("return {double=1.5}", false),
            Frame::Double {
                data: 1.5,
                attributes: None
            }
        );
        // A table with the fields of none of those is an (empty) array.
        assert_eq!(
            eval("return {a=1}", false),
            Frame::Array {
                data: vec![],
                attributes: None
            }
        );
    }

    #[test]
    fn replies_become_lua_values_as_in_redis() {
        let lua = Lua::new();
        let check = |frame: Frame, resp3: bool, code: &str| {
            let (v, _) = to_lua(&lua, frame, resp3).expect("converts");
            let f: mlua::Function = lua.load(code).eval().expect("valid Lua");
            assert!(f.call::<bool>(v).expect("runs"), "{code}");
        };
        check(
            Frame::Null,
            false,
            "return function(v) return v == false end",
        );
        check(Frame::Null, true, "return function(v) return v == nil end");
        check(
            Frame::SimpleString {
                data: Bytes::from_static(b"OK"),
                attributes: None,
            },
            false,
            "return function(v) return v.ok == 'OK' end",
        );
        check(
            Frame::Double {
                data: 0.1,
                attributes: None,
            },
            false,
            "return function(v) return v == '0.10000000000000001' end",
        );
        check(
            Frame::Double {
                data: 0.1,
                attributes: None,
            },
            true,
            "return function(v) return v.double == 0.1 end",
        );
        let (v, failed) = to_lua(
            &lua,
            Frame::SimpleError {
                data: "WRONGTYPE Operation".into(),
                attributes: None,
            },
            false,
        )
        .expect("converts");
        assert!(failed);
        let Value::Table(t) = v else {
            panic!("an error is a table")
        };
        assert_eq!(
            t.raw_get::<String>("err").expect("err"),
            "WRONGTYPE Operation"
        );
    }
}
