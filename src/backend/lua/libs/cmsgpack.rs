//! `cmsgpack` (lua-cmsgpack 0.4.0): MessagePack in and out, with Redis's rules: a table is an
//! array when its keys are exactly 1..n, a number is an integer when it is one that fits 64
//! bits and a float32 when that loses nothing, tables nest 16 deep before they turn to nil.

use super::{
    bare, function, i32_of, i64_of, num, one, out_of_memory, thrown, Args, Stack, MAX_C_STACK,
    MAX_OUTPUT, MAX_RESULTS,
};
use mlua::{Lua, MultiValue, Table, Value};

/// What the decoder raises when its values would pass the Lua stack's limit.
const TOO_MANY: &str =
    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)";

/// Tables nested deeper than this are packed as nil.
const MAX_NESTING: usize = 16;

pub(super) fn module(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", function(lua, pack)?)?;
    t.raw_set(
        "unpack",
        function(lua, |lua, a| unpack(lua, &a, 0, 0, a.top()))?,
    )?;
    t.raw_set("unpack_one", function(lua, unpack_one)?)?;
    t.raw_set("unpack_limit", function(lua, unpack_limit)?)?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

fn pack(lua: &Lua, args: Args<'_>) -> mlua::Result<MultiValue> {
    let n = args.top();
    if n == 0 {
        return Err(args.arg_error(0, "MessagePack pack needs input."));
    }
    // lua_checkstack(L, nargs) with the arguments already on the stack.
    if n + n > MAX_C_STACK {
        return Err(args.arg_error(0, "Too many arguments for MessagePack pack."));
    }
    let mut out = Vec::new();
    for value in &args.values {
        encode(&mut out, value, 0)?;
    }
    one(Value::String(lua.create_string(&out)?))
}

fn encode(out: &mut Vec<u8>, value: &Value, level: usize) -> mlua::Result<()> {
    if out.len() > MAX_OUTPUT {
        return Err(out_of_memory());
    }
    match value {
        Value::String(s) => encode_bytes(out, &s.as_bytes()),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => encode_number(out, *i as f64),
        Value::Number(n) => encode_number(out, *n),
        Value::Table(t) if level < MAX_NESTING => {
            if let Some(len) = array_length(t)? {
                encode_header(out, len as u64, 0x90, 0xdc);
                for i in 1..=len {
                    let item: Value = t.raw_get(i)?;
                    encode(out, &item, level + 1)?;
                }
            } else {
                let mut count: u64 = 0;
                t.for_each(|_: Value, _: Value| {
                    count += 1;
                    Ok(())
                })?;
                encode_header(out, count, 0x80, 0xde);
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    encode(out, &k, level + 1)?;
                    encode(out, &v, level + 1)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// `Some(n)` when the table's keys are exactly 1..n (n may be 0), else `None` (a map).
fn array_length(t: &Table) -> mlua::Result<Option<i64>> {
    let (mut count, mut max): (i64, i32) = (0, 0);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        // The C test: a positive number that an int holds exactly.
        if n <= 0.0 || n.is_infinite() || f64::from(i32_of(n)) != n {
            return Ok(None);
        }
        max = max.max(n as i32);
        count += 1;
    }
    Ok((i64::from(max) == count).then_some(count))
}

fn encode_number(out: &mut Vec<u8>, n: f64) {
    // An integer when the double converts to int64_t and back unchanged (x86 conversion).
    if !n.is_infinite() && i64_of(n) as f64 == n {
        encode_int(out, i64_of(n));
    } else if n == f64::from(n as f32) {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
    } else {
        match n {
            -32..=-1 => out.push(n as i8 as u8),
            -128..=-33 => out.extend_from_slice(&[0xd0, n as u8]),
            -32768..=-129 => {
                out.push(0xd1);
                out.extend_from_slice(&(n as i16).to_be_bytes());
            }
            -2_147_483_648..=-32769 => {
                out.push(0xd2);
                out.extend_from_slice(&(n as i32).to_be_bytes());
            }
            _ => {
                out.push(0xd3);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    }
}

fn encode_bytes(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// An array or map header: `fix` holds up to 15 entries, then 16 and 32 bits.
fn encode_header(out: &mut Vec<u8>, n: u64, fix: u8, sixteen: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(sixteen);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(sixteen + 1);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn unpack_one(lua: &Lua, args: Args<'_>) -> mlua::Result<MultiValue> {
    let offset = args.opt_integer(2, 0)?;
    unpack(lua, &args, 1, offset, 1)
}

fn unpack_limit(lua: &Lua, args: Args<'_>) -> mlua::Result<MultiValue> {
    let limit = args.check_integer(2)?;
    let offset = args.opt_integer(3, 0)?;
    unpack(lua, &args, limit, offset, 1)
}

/// Decodes up to `limit` values from byte `offset` (all of them when both are 0, and then
/// without the next offset first). `top` is the C function's stack height at the start.
fn unpack(
    lua: &Lua,
    args: &Args<'_>,
    limit: i64,
    offset: i64,
    top: usize,
) -> mlua::Result<MultiValue> {
    let s = args.check_string(1)?;
    let s = s.as_bytes();
    let len = s.len();
    if offset < 0 || limit < 0 {
        return Err(thrown(
            lua,
            format!(
                "Invalid request to unpack with offset of {} and limit of {}.",
                offset as i32, len as i32
            ),
        ));
    }
    if offset as u64 > len as u64 {
        return Err(thrown(
            lua,
            format!(
                "Start offset {} greater than input length {}.",
                offset as i32, len as i32
            ),
        ));
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut decoder = MsgpackReader {
        lua,
        data: &s[offset as usize..],
        at: 0,
        top,
        tables: Stack::new(lua),
        keys: Stack::new(lua),
    };
    let mut values = Vec::new();
    let mut count: i64 = 0;
    while decoder.at < decoder.data.len() && count < limit {
        match decoder.value()? {
            Ok(v) => values.push(v),
            Err(Bad::Missing) => return Err(thrown(lua, "Missing bytes in input.")),
            Err(Bad::Format) => return Err(thrown(lua, "Bad data format in input.")),
        }
        count += 1;
    }
    if values.len() + usize::from(!all) > MAX_RESULTS {
        return Err(thrown(lua, TOO_MANY));
    }
    if !all {
        if decoder.top + 1 > MAX_C_STACK {
            return Err(thrown(lua, "stack overflow (in function mp_unpack_full)"));
        }
        let left = decoder.data.len() - decoder.at;
        let next = if left == 0 { -1.0 } else { (len - left) as f64 };
        values.insert(0, num(next));
    }
    Ok(MultiValue::from_vec(values))
}

/// Why decoding stopped.
enum Bad {
    /// The input ended inside a value.
    Missing,
    /// A byte that starts no value this library knows.
    Format,
}

/// What one value's first bytes say.
enum MsgpackHead {
    Scalar(Value),
    Array(usize),
    Map(usize),
}

/// A container being filled (its table is on the decoder's `tables` stack).
enum PackStep {
    Array {
        next: f64,
        left: usize,
    },
    /// `keyed` once the pending key (on the `keys` stack) has been read.
    Map {
        left: usize,
        keyed: bool,
    },
}

struct MsgpackReader<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    at: usize,
    /// The C decoder's Lua stack height, for its `luaL_checkstack` limits.
    top: usize,
    /// Open containers, innermost last.
    tables: Stack<'a>,
    /// Keys read for the open maps, waiting for their values.
    keys: Stack<'a>,
}

impl MsgpackReader<'_> {
    /// One whole value, containers filled in the order the C decoder's recursion fills them.
    fn value(&mut self) -> mlua::Result<Result<Value, Bad>> {
        let mut frames: Vec<PackStep> = Vec::new();
        // The innermost open container.
        let mut current: Option<Table> = None;
        loop {
            let mut v = match self.head()? {
                Err(bad) => return Ok(Err(bad)),
                Ok(MsgpackHead::Scalar(v)) => v,
                Ok(head) => {
                    let t = self.lua.create_table()?;
                    let frame = match head {
                        MsgpackHead::Array(0) | MsgpackHead::Map(0) => None,
                        MsgpackHead::Array(left) => Some(PackStep::Array { next: 1.0, left }),
                        MsgpackHead::Map(left) => Some(PackStep::Map { left, keyed: false }),
                        MsgpackHead::Scalar(_) => None,
                    };
                    match frame {
                        None => Value::Table(t),
                        Some(frame) => {
                            if let PackStep::Array { .. } = frame {
                                self.top += 1; // the index pushed before each item
                            }
                            frames.push(frame);
                            self.tables.push(Value::Table(t.clone()))?;
                            current = Some(t);
                            continue;
                        }
                    }
                }
            };
            // Hand the finished value to the containers it completes.
            loop {
                let (Some(frame), Some(t)) = (frames.last_mut(), current.as_ref()) else {
                    return Ok(Ok(v));
                };
                match frame {
                    PackStep::Array { next, left } => {
                        t.raw_set(*next, v)?;
                        self.top -= 2;
                        *next += 1.0;
                        *left -= 1;
                        if *left > 0 {
                            self.top += 1;
                            break;
                        }
                    }
                    PackStep::Map {
                        keyed: keyed @ false,
                        ..
                    } => {
                        *keyed = true;
                        self.keys.push(v)?;
                        break;
                    }
                    PackStep::Map { keyed, left } => {
                        let k = self.keys.pop()?;
                        match k {
                            Value::Nil => return Err(bare("table index is nil".into())),
                            Value::Number(n) if n.is_nan() => {
                                return Err(bare("table index is NaN".into()))
                            }
                            _ => {}
                        }
                        t.raw_set(k, v)?;
                        self.top -= 2;
                        *keyed = false;
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                    }
                }
                frames.pop();
                self.tables.pop()?;
                v = current.take().map_or(Value::Nil, Value::Table);
                current = self.tables.last_table()?;
            }
        }
    }

    /// The next value's head, scalars read whole; counts it on the emulated stack.
    fn head(&mut self) -> mlua::Result<Result<MsgpackHead, Bad>> {
        if self.at >= self.data.len() {
            return Ok(Err(Bad::Missing));
        }
        if self.top + 1 > MAX_C_STACK {
            return Err(thrown(self.lua, TOO_MANY));
        }
        let head = match self.read()? {
            Ok(head) => head,
            Err(bad) => return Ok(Err(bad)),
        };
        self.top += 1;
        // mp_decode_to_lua_array checks for one more slot once its table is pushed.
        if matches!(head, MsgpackHead::Array(_)) && self.top + 1 > MAX_C_STACK {
            return Err(thrown(
                self.lua,
                "stack overflow (in function mp_decode_to_lua_array)",
            ));
        }
        Ok(Ok(head))
    }

    /// `n` bytes from `from` bytes ahead, or `Missing`.
    fn bytes(&self, from: usize, n: usize) -> Result<&[u8], Bad> {
        let start = self.at + from;
        match start.checked_add(n) {
            Some(end) if end <= self.data.len() => Ok(&self.data[start..end]),
            _ => Err(Bad::Missing),
        }
    }

    /// A big-endian unsigned number of `n` bytes after the type byte.
    fn uint(&self, n: usize) -> Result<u64, Bad> {
        Ok(self
            .bytes(1, n)?
            .iter()
            .fold(0, |acc, &b| acc << 8 | u64::from(b)))
    }

    /// Reads one head at `at` (which is inside the input) and moves past it.
    fn read(&mut self) -> mlua::Result<Result<MsgpackHead, Bad>> {
        let b = self.data[self.at];
        let (head, used) = match b {
            0xc0 => (MsgpackHead::Scalar(Value::Nil), 1),
            0xc2 | 0xc3 => (MsgpackHead::Scalar(Value::Boolean(b == 0xc3)), 1),
            0xcc..=0xd3 => {
                let n = 1 << (b & 3);
                let Ok(u) = self.uint(n) else {
                    return Ok(Err(Bad::Missing));
                };
                let v = match b {
                    0xcf => u as i64 as f64,
                    0xcc..=0xce => u as f64,
                    // Signed: sign-extend from n bytes.
                    _ => ((u << (64 - 8 * n)) as i64 >> (64 - 8 * n)) as f64,
                };
                (MsgpackHead::Scalar(num(v)), 1 + n)
            }
            0xca => match self.uint(4) {
                Ok(u) => (
                    MsgpackHead::Scalar(num(f64::from(f32::from_bits(u as u32)))),
                    5,
                ),
                Err(bad) => return Ok(Err(bad)),
            },
            0xcb => match self.uint(8) {
                Ok(u) => (MsgpackHead::Scalar(num(f64::from_bits(u))), 9),
                Err(bad) => return Ok(Err(bad)),
            },
            0xd9..=0xdb => {
                let n = 1 << (b - 0xd9);
                let Ok(len) = self.uint(n) else {
                    return Ok(Err(Bad::Missing));
                };
                return self.string(1 + n, len as usize);
            }
            0xdc..=0xdf => {
                let n = if b & 1 == 0 { 2 } else { 4 };
                let Ok(len) = self.uint(n) else {
                    return Ok(Err(Bad::Missing));
                };
                let len = len as usize;
                (
                    if b < 0xde {
                        MsgpackHead::Array(len)
                    } else {
                        MsgpackHead::Map(len)
                    },
                    1 + n,
                )
            }
            _ if b & 0x80 == 0 => (MsgpackHead::Scalar(num(f64::from(b))), 1),
            _ if b & 0xe0 == 0xe0 => (MsgpackHead::Scalar(num(f64::from(b as i8))), 1),
            _ if b & 0xe0 == 0xa0 => return self.string(1, usize::from(b & 0x1f)),
            _ if b & 0xf0 == 0x90 => (MsgpackHead::Array(usize::from(b & 0xf)), 1),
            _ if b & 0xf0 == 0x80 => (MsgpackHead::Map(usize::from(b & 0xf)), 1),
            _ => return Ok(Err(Bad::Format)),
        };
        self.at += used;
        Ok(Ok(head))
    }

    /// A string of `len` bytes after a header of `header` bytes.
    fn string(&mut self, header: usize, len: usize) -> mlua::Result<Result<MsgpackHead, Bad>> {
        let Ok(bytes) = self.bytes(header, len) else {
            return Ok(Err(Bad::Missing));
        };
        let s = self.lua.create_string(bytes)?;
        self.at += header + len;
        Ok(Ok(MsgpackHead::Scalar(Value::String(s))))
    }
}
