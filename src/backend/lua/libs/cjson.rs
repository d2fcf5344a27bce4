//! `cjson` (Lua CJSON 2.1.0): the module table, its settings, and encoding. Each module
//! table (`cjson` and each `cjson.new()`) has settings of its own that its functions share.

use super::json_decode::{decode, null, JsonSettings};
use super::number::fmt_g;
use super::{
    c_str, function, i32_of, num, number_of, one, out_of_memory, thrown, type_name, Args, Stack,
    MAX_C_STACK, MAX_OUTPUT,
};
use mlua::{Lua, MultiValue, Table, Value};
use std::cell::Cell;
use std::rc::Rc;

type SharedSettings = Rc<Cell<JsonSettings>>;

/// A new module table with default settings.
pub(super) fn module(lua: &Lua) -> mlua::Result<Table> {
    let cfg: SharedSettings = Rc::new(Cell::new(JsonSettings::default()));
    let t = lua.create_table()?;
    let with = |f: fn(&Lua, &Cell<JsonSettings>, Args<'_>) -> mlua::Result<MultiValue>| {
        let cfg = cfg.clone();
        function(lua, move |lua, args| f(lua, &cfg, args))
    };
    // Set in the C library's order, which `pairs` over the table shows.
    t.raw_set("encode", with(encode)?)?;
    t.raw_set("decode", with(decode_fn)?)?;
    t.raw_set("encode_sparse_array", with(encode_sparse_array)?)?;
    t.raw_set(
        "encode_max_depth",
        with(|_, c, a| int_setting(c, a, 1, i32::MAX, |c| &mut c.encode_max_depth))?,
    )?;
    t.raw_set(
        "decode_max_depth",
        with(|_, c, a| int_setting(c, a, 1, i32::MAX, |c| &mut c.decode_max_depth))?,
    )?;
    t.raw_set(
        "encode_number_precision",
        with(|_, c, a| int_setting(c, a, 1, 14, |c| &mut c.precision))?,
    )?;
    t.raw_set(
        "encode_keep_buffer",
        with(|_, c, a| switch(c, a, |c| &mut c.keep_buffer))?,
    )?;
    t.raw_set("encode_invalid_numbers", with(encode_invalid_numbers)?)?;
    t.raw_set("decode_invalid_numbers", with(decode_invalid_numbers)?)?;
    t.raw_set(
        "new",
        function(lua, |lua, _| one(Value::Table(module(lua)?)))?,
    )?;
    t.raw_set("null", null())?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// A setting function's argument count check (`json_arg_init`).
fn at_most(args: &Args<'_>, n: usize) -> mlua::Result<()> {
    if args.top() > n {
        return Err(args.arg_error(n as i64 + 1, "found too many arguments"));
    }
    Ok(())
}

/// An integer setting from argument `index`, kept when nil; answers the value in force.
fn integer_option(
    args: &Args<'_>,
    index: usize,
    setting: &mut i32,
    min: i32,
    max: i32,
) -> mlua::Result<Value> {
    if !args.is_none_or_nil(index) {
        // luaL_checkinteger's result stored in a C int.
        let value = args.check_integer(index)? as i32;
        if !(min <= value && value <= max) {
            // The C library always names argument 1 here.
            return Err(args.arg_error(1, &format!("expected integer between {min} and {max}")));
        }
        *setting = value;
    }
    Ok(num(f64::from(*setting)))
}

/// An on/off (or named) setting from argument `index`; answers a boolean for off and on,
/// else the option's name.
fn enum_option(
    args: &Args<'_>,
    index: usize,
    setting: &mut i32,
    options: &[&str],
) -> mlua::Result<Value> {
    if !args.is_none_or_nil(index) {
        if let Some(Value::Boolean(b)) = args.get(index) {
            *setting = i32::from(*b);
        } else {
            let name = args.check_string(index)?;
            let name = c_str(&name.as_bytes()).to_vec();
            match options.iter().position(|o| o.as_bytes() == name.as_slice()) {
                Some(i) => *setting = i as i32,
                None => {
                    let name = String::from_utf8_lossy(&name);
                    return Err(args.arg_error(index as i64, &format!("invalid option '{name}'")));
                }
            }
        }
    }
    Ok(match *setting {
        0 | 1 => Value::Boolean(*setting == 1),
        s => Value::String(
            args.lua
                .create_string(options.get(s as usize).copied().unwrap_or(""))?,
        ),
    })
}

const OFF_ON: &[&str] = &["off", "on"];

fn int_setting(
    cfg: &Cell<JsonSettings>,
    args: Args<'_>,
    min: i32,
    max: i32,
    field: fn(&mut JsonSettings) -> &mut i32,
) -> mlua::Result<MultiValue> {
    at_most(&args, 1)?;
    let mut c = cfg.get();
    let answer = integer_option(&args, 1, field(&mut c), min, max)?;
    cfg.set(c);
    one(answer)
}

fn switch(
    cfg: &Cell<JsonSettings>,
    args: Args<'_>,
    field: fn(&mut JsonSettings) -> &mut i32,
) -> mlua::Result<MultiValue> {
    at_most(&args, 1)?;
    let mut c = cfg.get();
    let answer = enum_option(&args, 1, field(&mut c), OFF_ON)?;
    cfg.set(c);
    one(answer)
}

fn encode_sparse_array(
    _: &Lua,
    cfg: &Cell<JsonSettings>,
    args: Args<'_>,
) -> mlua::Result<MultiValue> {
    at_most(&args, 3)?;
    // Each setting is kept as soon as it is read, as in C, even when a later one fails.
    let mut c = cfg.get();
    let convert = enum_option(&args, 1, &mut c.sparse_convert, OFF_ON)?;
    cfg.set(c);
    let ratio = integer_option(&args, 2, &mut c.sparse_ratio, 0, i32::MAX)?;
    cfg.set(c);
    let safe = integer_option(&args, 3, &mut c.sparse_safe, 0, i32::MAX)?;
    cfg.set(c);
    Ok(MultiValue::from_vec(vec![convert, ratio, safe]))
}

fn encode_invalid_numbers(
    _: &Lua,
    cfg: &Cell<JsonSettings>,
    args: Args<'_>,
) -> mlua::Result<MultiValue> {
    at_most(&args, 1)?;
    let mut c = cfg.get();
    let answer = enum_option(
        &args,
        1,
        &mut c.encode_invalid_numbers,
        &["off", "on", "null"],
    )?;
    cfg.set(c);
    one(answer)
}

fn decode_invalid_numbers(
    _: &Lua,
    cfg: &Cell<JsonSettings>,
    args: Args<'_>,
) -> mlua::Result<MultiValue> {
    at_most(&args, 1)?;
    let mut c = cfg.get();
    let mut setting = i32::from(c.decode_invalid_numbers);
    let answer = enum_option(&args, 1, &mut setting, OFF_ON)?;
    c.decode_invalid_numbers = setting != 0;
    cfg.set(c);
    one(answer)
}

fn decode_fn(lua: &Lua, cfg: &Cell<JsonSettings>, args: Args<'_>) -> mlua::Result<MultiValue> {
    if args.top() != 1 {
        return Err(args.arg_error(1, "expected 1 argument"));
    }
    let json = args.check_string(1)?;
    let json = json.as_bytes();
    if json.len() >= 2 && (json[0] == 0 || json[1] == 0) {
        return Err(thrown(lua, "JSON parser does not support UTF-16 or UTF-32"));
    }
    one(decode(lua, &cfg.get(), &json)?)
}

fn encode(lua: &Lua, cfg: &Cell<JsonSettings>, args: Args<'_>) -> mlua::Result<MultiValue> {
    if args.top() != 1 {
        return Err(args.arg_error(1, "expected 1 argument"));
    }
    let value = args.get(1).cloned().unwrap_or(Value::Nil);
    let out = Encoder {
        lua,
        cfg: cfg.get(),
        out: Vec::new(),
    }
    .run(value)?;
    one(Value::String(lua.create_string(&out)?))
}

/// An object key as read before its table is written.
enum Key {
    Number(f64),
    String(Vec<u8>),
    /// A key of this type, which fails the encoding when its turn comes.
    Bad(&'static str),
}

/// A table being written (the table itself is on the encoder's stack of open tables).
enum EncodeStep {
    Array {
        len: i32,
        next: i32,
        top: usize,
    },
    Object {
        keys: Vec<Key>,
        next: usize,
        top: usize,
    },
}

struct Encoder<'l> {
    lua: &'l Lua,
    cfg: JsonSettings,
    out: Vec<u8>,
}

impl Encoder<'_> {
    /// Writes `value`, nested tables depth first, as the C library's recursion does.
    fn run(mut self, value: Value) -> mlua::Result<Vec<u8>> {
        let mut open = Stack::new(self.lua);
        let mut frames: Vec<EncodeStep> = Vec::new();
        let mut current: Option<Table> = None;
        let mut value = value;
        // The C stack height with the value being written on top.
        let mut top = 1;
        loop {
            match value {
                Value::Table(t) => {
                    let depth = frames.len() + 1;
                    if depth > self.cfg.encode_max_depth as usize || top + 3 > MAX_C_STACK {
                        return Err(thrown(
                            self.lua,
                            format!("Cannot serialise, excessive nesting ({depth})"),
                        ));
                    }
                    let len = self.array_length(&t)?;
                    if len > 0 {
                        self.out.push(b'[');
                        frames.push(EncodeStep::Array { len, next: 1, top });
                    } else {
                        self.out.push(b'{');
                        frames.push(EncodeStep::Object {
                            keys: object_keys(&t)?,
                            next: 0,
                            top,
                        });
                    }
                    open.push(Value::Table(t.clone()))?;
                    current = Some(t);
                }
                other => self.scalar(&other)?,
            }
            if self.out.len() > MAX_OUTPUT {
                return Err(out_of_memory());
            }
            // Find the next value to write, closing the tables that are done.
            loop {
                let (Some(frame), Some(t)) = (frames.last_mut(), current.as_ref()) else {
                    return Ok(self.out);
                };
                match frame {
                    EncodeStep::Array { len, next, top: at } if *next <= *len => {
                        if *next > 1 {
                            self.out.push(b',');
                        }
                        value = t.raw_get(*next)?;
                        *next += 1;
                        top = *at + 1;
                        break;
                    }
                    EncodeStep::Object {
                        keys,
                        next,
                        top: at,
                    } if *next < keys.len() => {
                        if *next > 0 {
                            self.out.push(b',');
                        }
                        let key = match &keys[*next] {
                            Key::Number(n) => {
                                self.out.push(b'"');
                                self.number(*n)?;
                                self.out.extend_from_slice(b"\":");
                                num(*n)
                            }
                            Key::String(s) => {
                                self.string(s)?;
                                self.out.push(b':');
                                Value::String(self.lua.create_string(s)?)
                            }
                            Key::Bad(type_name) => {
                                return Err(thrown(
                                    self.lua,
                                    format!(
                                    "Cannot serialise {type_name}: table key must be a number or string"
                                )));
                            }
                        };
                        value = t.raw_get(key)?;
                        *next += 1;
                        top = *at + 2;
                        break;
                    }
                    EncodeStep::Array { .. } => self.out.push(b']'),
                    EncodeStep::Object { .. } => self.out.push(b'}'),
                }
                frames.pop();
                open.pop()?;
                current = open.last_table()?;
            }
        }
    }

    /// The array length the C library sees: the largest key when all keys are integers of
    /// at least 1 (and the array is not too sparse), else -1 (or 0 for an empty table): an
    /// object. The largest key is held in a C int, with x86's conversion.
    fn array_length(&self, t: &Table) -> mlua::Result<i32> {
        let (mut max, mut items): (i32, i32) = (0, 0);
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            match number_of(&k) {
                Some(k) if k != 0.0 && k.floor() == k && k >= 1.0 => {
                    if k > f64::from(max) {
                        max = i32_of(k);
                    }
                    items = items.wrapping_add(1);
                }
                _ => return Ok(-1),
            }
        }
        let cfg = &self.cfg;
        if cfg.sparse_ratio > 0
            && max > items.wrapping_mul(cfg.sparse_ratio)
            && max > cfg.sparse_safe
        {
            if cfg.sparse_convert == 0 {
                return Err(thrown(
                    self.lua,
                    "Cannot serialise table: excessively sparse array",
                ));
            }
            return Ok(-1);
        }
        Ok(max)
    }

    fn scalar(&mut self, value: &Value) -> mlua::Result<()> {
        match value {
            Value::String(s) => self.string(&s.as_bytes())?,
            Value::Integer(_) | Value::Number(_) => self.number(number_of(value).unwrap_or(0.0))?,
            Value::Boolean(true) => self.out.extend_from_slice(b"true"),
            Value::Boolean(false) => self.out.extend_from_slice(b"false"),
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
            other => {
                let name = type_name(Some(other));
                return Err(thrown(
                    self.lua,
                    format!("Cannot serialise {name}: type not supported"),
                ));
            }
        }
        Ok(())
    }

    fn number(&mut self, n: f64) -> mlua::Result<()> {
        match self.cfg.encode_invalid_numbers {
            0 if !n.is_finite() => {
                return Err(thrown(
                    self.lua,
                    "Cannot serialise number: must not be NaN or Inf",
                ));
            }
            1 if n.is_nan() => {
                self.out.extend_from_slice(b"nan");
                return Ok(());
            }
            2 if !n.is_finite() => {
                self.out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
        let text = fmt_g(n, self.cfg.precision as usize);
        self.out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    fn string(&mut self, s: &[u8]) -> mlua::Result<()> {
        if self.out.len().saturating_add(s.len()) > MAX_OUTPUT {
            return Err(out_of_memory());
        }
        self.out.push(b'"');
        for &b in s {
            match b {
                b'"' => self.out.extend_from_slice(b"\\\""),
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'/' => self.out.extend_from_slice(b"\\/"),
                0x08 => self.out.extend_from_slice(b"\\b"),
                b'\t' => self.out.extend_from_slice(b"\\t"),
                b'\n' => self.out.extend_from_slice(b"\\n"),
                0x0c => self.out.extend_from_slice(b"\\f"),
                b'\r' => self.out.extend_from_slice(b"\\r"),
                0..=0x1f | 0x7f => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    self.out.extend_from_slice(b"\\u00");
                    self.out.push(HEX[usize::from(b >> 4)]);
                    self.out.push(HEX[usize::from(b & 15)]);
                }
                _ => self.out.push(b),
            }
        }
        self.out.push(b'"');
        Ok(())
    }
}

/// A table's keys in `next` order, up to the first one JSON cannot take.
fn object_keys(t: &Table) -> mlua::Result<Vec<Key>> {
    let mut keys = Vec::new();
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let key = match &k {
            Value::String(s) => Key::String(s.as_bytes().to_vec()),
            k => match number_of(k) {
                Some(n) => Key::Number(n),
                None => Key::Bad(type_name(Some(k))),
            },
        };
        let bad = matches!(key, Key::Bad(_));
        keys.push(key);
        if bad {
            break;
        }
    }
    Ok(keys)
}
