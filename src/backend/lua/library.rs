//! Function libraries (`FUNCTION LOAD`, `FCALL`): a library's code runs once per interpreter
//! with only what Redis gives a library's top level, and `redis.register_function` collects
//! its functions, their flags and descriptions. The metadata line (`#!lua name=mylib`) and
//! the flags are read here too, so the backends that store libraries read them alike.

use super::convert::error_frame;
use super::raise::raise;
use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Table, Value};
use redis_protocol::resp3::types::BytesFrame as Frame;

/// The function flags, in the order Redis lists them; a flag's bit is `1 << index`.
pub const FLAGS: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// The `no-writes` bit.
pub const NO_WRITES: i64 = 1;

/// One registered function.
pub struct Registered {
    /// Its name, unique among every library's functions.
    pub name: String,
    callback: Function,
    /// Its flags' bits ([`FLAGS`]).
    pub flags: i64,
    /// Its description, if it was given one.
    pub description: Option<Vec<u8>>,
}

/// A library's functions, in the order they were registered.
#[derive(Default)]
pub struct Library(pub(super) Vec<Registered>);

impl Library {
    pub(super) fn callback(&self, name: &str) -> Option<Function> {
        self.0
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.callback.clone())
    }

    /// What `FUNCTION LOAD` learns: an array of `[name, flags, description or nil]`.
    pub(super) fn listing(&self) -> Frame {
        let bulk = |b: &[u8]| Frame::BlobString {
            data: Bytes::copy_from_slice(b),
            attributes: None,
        };
        Frame::Array {
            data: self
                .0
                .iter()
                .map(|f| Frame::Array {
                    data: vec![
                        bulk(f.name.as_bytes()),
                        Frame::Number {
                            data: f.flags,
                            attributes: None,
                        },
                        f.description.as_deref().map_or(Frame::Null, bulk),
                    ],
                    attributes: None,
                })
                .collect(),
            attributes: None,
        }
    }
}

/// A library's metadata line read as Redis reads it: its engine and its name, or the error.
pub fn metadata(code: &[u8]) -> Result<(String, String), String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|b| *b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let line = String::from_utf8_lossy(&code[..end]);
    let mut parts = line.split_ascii_whitespace();
    let Some(engine) = parts.next() else {
        return Err("ERR Invalid library metadata".into());
    };
    let engine = engine[2..].to_string();
    let mut name = None;
    for part in parts {
        match part.get(..5) {
            Some(key) if key.eq_ignore_ascii_case("name=") => {
                if name.is_some() {
                    return Err(
                        "ERR Invalid metadata value, name argument was given multiple times".into(),
                    );
                }
                name = Some(part[5..].to_string());
            }
            _ => return Err(format!("ERR Invalid metadata value given: {part}")),
        }
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if !valid_name(&name) {
        return Err(NAME_RULE.into());
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    Ok((engine, name))
}

const NAME_RULE: &str = "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// Letters, digits and underscores, at least one.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The flags' bits as Redis lists them.
pub fn flag_names(bits: i64) -> Vec<&'static str> {
    FLAGS
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, f)| *f)
        .collect()
}

/// The registrations of the library loading now.
#[derive(Default)]
pub(super) struct Loading(pub(super) Vec<Registered>);

/// `redis.register_function(name, callback)` or `redis.register_function{function_name=…,
/// callback=…, flags={…}, description=…}`, with Redis's checks and words.
pub(super) fn register_function(lua: &Lua, args: MultiValue) -> mlua::Result<()> {
    if lua.app_data_ref::<Loading>().is_none() {
        return raise("ERR redis.register_function can only be called on FUNCTION LOAD command");
    }
    let function = match args.len() {
        1 => named(&args[0])?,
        2 => positional(&args[0], &args[1])?,
        _ => return raise("ERR wrong number of arguments to redis.register_function"),
    };
    let Some(mut loading) = lua.app_data_mut::<Loading>() else {
        return raise("ERR redis.register_function can only be called on FUNCTION LOAD command");
    };
    if !valid_name(&function.name) {
        return raise(NAME_RULE);
    }
    if loading.0.iter().any(|f| f.name == function.name) {
        return raise("ERR Function already exists in the library");
    }
    loading.0.push(function);
    Ok(())
}

/// A string, or a number as Lua prints it (`lua_tostring`).
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string_lossy()),
        Value::Number(n) => Some(super::number::g14(*n)),
        Value::Integer(n) => Some(super::number::g14(*n as f64)),
        _ => None,
    }
}

fn positional(name: &Value, callback: &Value) -> mlua::Result<Registered> {
    let Some(name) = text_of(name) else {
        return raise("ERR first argument to redis.register_function must be a string");
    };
    let Value::Function(callback) = callback else {
        return raise("ERR second argument to redis.register_function must be a function");
    };
    Ok(Registered {
        name,
        callback: callback.clone(),
        flags: 0,
        description: None,
    })
}

fn named(args: &Value) -> mlua::Result<Registered> {
    let Value::Table(table) = args else {
        return raise("ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
    };
    let (mut name, mut description, mut callback, mut flags) = (None, None, None, 0);
    // In the table's own order, as Redis walks it: the first bad argument is the one named.
    let mut failed: Option<&'static str> = None;
    table.for_each(|key: Value, value: Value| {
        if failed.is_some() {
            return Ok(());
        }
        let Some(key) = text_of(&key) else {
            failed = Some("ERR named argument key given to redis.register_function is not a string");
            return Ok(());
        };
        match key.to_ascii_lowercase().as_str() {
            "function_name" => match text_of(&value) {
                Some(n) => name = Some(n),
                None => failed = Some("ERR function_name argument given to redis.register_function must be a string"),
            },
            "description" => match &value {
                Value::String(s) => description = Some(s.as_bytes().to_vec()),
                other => match text_of(other) {
                    Some(d) => description = Some(d.into_bytes()),
                    None => failed = Some("ERR description argument given to redis.register_function must be a string"),
                },
            },
            "callback" => match value {
                Value::Function(f) => callback = Some(f),
                _ => failed = Some("ERR callback argument given to redis.register_function must be a function"),
            },
            "flags" => match &value {
                Value::Table(list) => match read_flags(list) {
                    Some(bits) => flags = bits,
                    None => failed = Some("ERR unknown flag given"),
                },
                _ => failed = Some("ERR flags argument to redis.register_function must be a table representing function flags"),
            },
            _ => failed = Some("ERR unknown argument given to redis.register_function"),
        }
        Ok(())
    })?;
    if let Some(text) = failed {
        return raise(text);
    }
    let Some(name) = name else {
        return raise("ERR redis.register_function must get a function name argument");
    };
    let Some(callback) = callback else {
        return raise("ERR redis.register_function must get a callback argument");
    };
    Ok(Registered {
        name,
        callback,
        flags,
        description,
    })
}

/// A flags list (`{'no-writes'}`): its bits, or None for an unknown flag or one that is no
/// string.
fn read_flags(list: &Table) -> Option<i64> {
    let mut bits = 0;
    for i in 1.. {
        let value: Value = list.raw_get(i).ok()?;
        let flag = match value {
            Value::Nil => break,
            other => text_of(&other)?,
        };
        let at = FLAGS.iter().position(|f| f.eq_ignore_ascii_case(&flag))?;
        bits |= 1 << at;
    }
    Some(bits)
}

/// An error reply for a library that cannot be listed.
pub fn unreadable() -> Frame {
    error_frame(b"ERR holdfast: a function library's listing could not be read")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_reads_as_redis_reads_it() {
        assert_eq!(
            metadata(b"#!lua name=mylib\nreturn 1"),
            Ok(("lua".to_string(), "mylib".to_string()))
        );
        assert_eq!(
            metadata(b"#!LUA NAME=x_1\n"),
            Ok(("LUA".to_string(), "x_1".to_string()))
        );
        for (code, want) in [
            ("return 1", "ERR Missing library metadata"),
            ("#!lua name=x", "ERR Invalid library metadata"),
            ("#!lua\n", "ERR Library name was not given"),
            (
                "#!lua name=a name=b\n",
                "ERR Invalid metadata value, name argument was given multiple times",
            ),
            (
                "#!lua foo=bar\n",
                "ERR Invalid metadata value given: foo=bar",
            ),
            ("#!lua name=bad-name\n", NAME_RULE),
            ("#!js name=x\n", "ERR Engine 'js' not found"),
        ] {
            assert_eq!(metadata(code.as_bytes()), Err(want.to_string()), "{code}");
        }
        assert_eq!(flag_names(1 | 4), vec!["no-writes", "allow-stale"]);
    }
}
