//! The C libraries Redis 7.0 gives its scripts, written again in Rust: `cjson`, `cmsgpack`,
//! `bit` and `struct`. Each one answers as Redis's does, byte for byte, errors included: an
//! error is a plain string (a [`Thrown`]) with the text the C library's `luaL_error` or
//! `luaL_argerror` gives. Where the C code leans on x86-64 conversions (a double too large
//! for an integer) or on the Lua C stack's 8000-slot limit, the same outcome is reproduced.
//!
//! Nothing here recurses deeper than a few frames: nested tables are walked with explicit
//! stacks, and past the first levels the tables a walk holds open are kept in a Lua table
//! rather than as mlua references (mlua keeps every live reference on one Lua stack of its
//! own, of about 8000 slots).

mod bit;
mod cjson;
mod cmsgpack;
mod json_decode;
mod number;
mod structs;

use mlua::{Lua, LuaString, MultiValue, Table, Value};

/// An error a library function raises as a plain Lua string error, with the text Redis's
/// library gives: `luaL_error` puts the calling Lua code's position first (`user_script:1: `)
/// when a Lua function called the library function, nothing when pcall or another C
/// function did; Lua's own errors inside a library (`table index is nil`) have none.
#[derive(Debug)]
pub struct Thrown(pub String);

impl std::fmt::Display for Thrown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Thrown {}

/// Adds `cjson`, `cmsgpack`, `bit` and `struct` to `globals`.
pub fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    globals.raw_set("cjson", cjson::module(lua)?)?;
    globals.raw_set("struct", structs::module(lua)?)?;
    globals.raw_set("cmsgpack", cmsgpack::module(lua)?)?;
    globals.raw_set("bit", bit::module(lua)?)?;
    Ok(())
}

/// Slots a C function may use on the Lua stack (Lua 5.1's `LUAI_MAXCSTACK`): the C libraries
/// fail with their own message when a `lua_checkstack` would pass it.
const MAX_C_STACK: usize = 8000;

/// Most values a function hands back at once. Lua allows a C function nearly 8000, but mlua
/// needs a few slots of its own to pass them on; past this a library raises the error it
/// would raise at Lua's limit, rather than failing inside mlua.
const MAX_RESULTS: usize = 7990;

/// The largest string a library builds in Rust before it gives up as Lua does when an
/// allocation fails: these buffers are outside the interpreter's memory limit, and a string
/// this large would not fit inside it anyway.
const MAX_OUTPUT: usize = 256 << 20;

/// The error a library function raises with `luaL_error`: the message after the position
/// of the Lua code that called the function (`luaL_where(L, 1)`), when there is one.
fn thrown(lua: &Lua, message: impl AsRef<str>) -> mlua::Error {
    let at = lua.inspect_stack(1, |debug| match debug.current_line() {
        Some(line) if line > 0 => {
            let source = debug.source();
            let short = source.short_src.as_deref().unwrap_or("?").to_string();
            format!("{short}:{line}: ")
        }
        _ => String::new(),
    });
    bare(format!("{}{}", at.unwrap_or_default(), message.as_ref()))
}

/// An error raised as it is, without a position: what Lua itself raises inside a C
/// function (`luaG_runerror` names no place when the running function is not Lua).
fn bare(message: String) -> mlua::Error {
    mlua::Error::external(Thrown(message))
}

/// The error Lua raises when memory runs out.
fn out_of_memory() -> mlua::Error {
    mlua::Error::MemoryError("not enough memory".to_string())
}

/// Lua's name for a value's type (`lua_typename`); `None` is an argument not given.
fn type_name(value: Option<&Value>) -> &'static str {
    match value {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// A Lua number as a double (mlua hands integral numbers over as integers).
fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => Some(*n),
        Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

/// A double as a Lua number, exactly.
fn num(n: f64) -> Value {
    Value::Number(n)
}

/// C's `(int64_t)d` as x86-64 computes it: out of range (and NaN) gives the smallest integer.
fn i64_of(d: f64) -> i64 {
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d) {
        i64::MIN
    } else {
        d as i64
    }
}

/// C's `(int)d` as x86-64 computes it.
fn i32_of(d: f64) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&d) {
        i32::MIN
    } else {
        d as i32
    }
}

/// C's `(uint64_t)d` as compilers emit it for x86-64: a signed conversion, offset by 2^63
/// for large values.
fn u64_of(d: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if d >= TWO63 {
        (i64_of(d - TWO63) as u64) ^ (1 << 63)
    } else {
        i64_of(d) as u64
    }
}

/// Values a walk over nested tables holds, innermost last. The first few are kept as mlua
/// references; deeper ones go to a Lua table, as mlua keeps every live reference on one Lua
/// stack of about 8000 slots, which deep nesting would otherwise exhaust.
struct Stack<'l> {
    lua: &'l Lua,
    near: Vec<Value>,
    far: Option<Table>,
    len: usize,
}

impl<'l> Stack<'l> {
    const NEAR: usize = 32;

    fn new(lua: &'l Lua) -> Self {
        Stack {
            lua,
            near: Vec::new(),
            far: None,
            len: 0,
        }
    }

    fn far(&mut self) -> mlua::Result<&Table> {
        if self.far.is_none() {
            self.far = Some(self.lua.create_table()?);
        }
        self.far.as_ref().ok_or_else(out_of_memory)
    }

    fn push(&mut self, value: Value) -> mlua::Result<()> {
        if self.len < Self::NEAR {
            self.near.push(value);
        } else {
            let slot = self.len - Self::NEAR + 1;
            self.far()?.raw_set(slot, value)?;
        }
        self.len += 1;
        Ok(())
    }

    fn pop(&mut self) -> mlua::Result<Value> {
        if self.len == 0 {
            return Ok(Value::Nil);
        }
        self.len -= 1;
        if self.len < Self::NEAR {
            return Ok(self.near.pop().unwrap_or(Value::Nil));
        }
        let slot = self.len - Self::NEAR + 1;
        let far = self.far()?;
        let value = far.raw_get(slot)?;
        far.raw_set(slot, Value::Nil)?;
        Ok(value)
    }

    /// The innermost table, if the innermost value is one.
    fn last_table(&mut self) -> mlua::Result<Option<Table>> {
        let value = match self.len {
            0 => Value::Nil,
            n if n <= Self::NEAR => self.near.last().cloned().unwrap_or(Value::Nil),
            n => self.far()?.raw_get(n - Self::NEAR)?,
        };
        Ok(match value {
            Value::Table(t) => Some(t),
            _ => None,
        })
    }
}

/// A library function's arguments, read as the Lua C API reads its stack.
struct Args<'l> {
    lua: &'l Lua,
    values: Vec<Value>,
}

impl<'l> Args<'l> {
    fn new(lua: &'l Lua, args: MultiValue) -> Self {
        Args {
            lua,
            values: args.into_vec(),
        }
    }

    /// `lua_gettop`.
    fn top(&self) -> usize {
        self.values.len()
    }

    /// Argument `n` (from 1), `None` past the last.
    fn get(&self, n: usize) -> Option<&Value> {
        n.checked_sub(1).and_then(|i| self.values.get(i))
    }

    /// `lua_isnoneornil`.
    fn is_none_or_nil(&self, n: usize) -> bool {
        matches!(self.get(n), None | Some(Value::Nil))
    }

    /// `luaL_argerror`: names the running function as the caller's code calls it.
    fn arg_error(&self, narg: i64, extra: &str) -> mlua::Error {
        arg_error(self.lua, narg, extra)
    }

    /// `luaL_typerror`.
    fn type_error(&self, narg: usize, expected: &str) -> mlua::Error {
        let got = type_name(self.get(narg));
        self.arg_error(narg as i64, &format!("{expected} expected, got {got}"))
    }

    /// `lua_tonumber`: numbers, and strings that read as numbers.
    fn to_number(&self, n: usize) -> Option<f64> {
        self.get(n).and_then(|v| to_number(self.lua, v))
    }

    /// `luaL_checknumber`.
    fn check_number(&self, n: usize) -> mlua::Result<f64> {
        self.to_number(n)
            .ok_or_else(|| self.type_error(n, "number"))
    }

    /// `luaL_checkinteger`: the number cut to an integer as C casts it.
    fn check_integer(&self, n: usize) -> mlua::Result<i64> {
        self.check_number(n).map(i64_of)
    }

    /// `luaL_optinteger`.
    fn opt_integer(&self, n: usize, default: i64) -> mlua::Result<i64> {
        if self.is_none_or_nil(n) {
            Ok(default)
        } else {
            self.check_integer(n)
        }
    }

    /// `luaL_checklstring`: strings, and numbers written as Lua writes them.
    fn check_string(&self, n: usize) -> mlua::Result<LuaString> {
        match self.get(n) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v @ (Value::Integer(_) | Value::Number(_))) => self
                .lua
                .coerce_string(v.clone())?
                .ok_or_else(|| self.type_error(n, "string")),
            _ => Err(self.type_error(n, "string")),
        }
    }
}

/// `lua_tonumber` of one value.
fn to_number(lua: &Lua, value: &Value) -> Option<f64> {
    match value {
        Value::String(_) => lua.coerce_number(value.clone()).ok().flatten(),
        v => number_of(v),
    }
}

/// `luaL_argerror` for the running function.
fn arg_error(lua: &Lua, narg: i64, extra: &str) -> mlua::Error {
    let names = lua.inspect_stack(0, |debug| {
        let names = debug.names();
        (names.name.map(|n| n.into_owned()), names.name_what)
    });
    let Some((name, what)) = names else {
        return thrown(lua, format!("bad argument #{narg} ({extra})"));
    };
    let mut narg = narg;
    if what == Some("method") {
        narg -= 1;
        if narg == 0 {
            let name = name.as_deref().unwrap_or("(null)");
            return thrown(lua, format!("calling '{name}' on bad self ({extra})"));
        }
    }
    let name = name.as_deref().unwrap_or("?");
    thrown(lua, format!("bad argument #{narg} to '{name}' ({extra})"))
}

/// Bytes up to the first NUL: what C sees of a string through `const char *`.
fn c_str(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => &bytes[..end],
        None => bytes,
    }
}

/// A function of the library table, taking its arguments as they come.
fn function<F>(lua: &Lua, f: F) -> mlua::Result<mlua::Function>
where
    F: Fn(&Lua, Args<'_>) -> mlua::Result<MultiValue> + 'static,
{
    lua.create_function(move |lua, args: MultiValue| f(lua, Args::new(lua, args)))
}

/// One value as a function's results.
fn one(value: Value) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![value]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_as_x86_does() {
        assert_eq!(i64_of(f64::NAN), i64::MIN);
        assert_eq!(i64_of(1e19), i64::MIN);
        assert_eq!(i64_of(-1.5), -1);
        assert_eq!(i32_of(2147483648.0), i32::MIN);
        assert_eq!(u64_of(1.8446744073709552e19), 0);
        assert_eq!(u64_of(9.3e18), 9_300_000_000_000_000_000);
        assert_eq!(u64_of(f64::NAN), 1 << 63);
        assert_eq!(u64_of(-1.0), u64::MAX);
    }

    /// The text a script's chunk returns, or the text of the library error it raised.
    fn run(lua: &Lua, code: &str) -> String {
        fn text(e: &mlua::Error) -> String {
            match e {
                mlua::Error::ExternalError(inner) => match inner.downcast_ref::<Thrown>() {
                    Some(t) => t.0.clone(),
                    None => inner.to_string(),
                },
                mlua::Error::CallbackError { cause, .. } => text(cause),
                other => other.to_string(),
            }
        }
        match lua.load(code).set_name("@user_script").eval::<LuaString>() {
            Ok(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            Err(e) => text(&e),
        }
    }

    // Each answer is what Redis 7.0.15 gives for the same script.
    #[test]
    fn answers_as_redis_does() {
        let lua = Lua::new();
        install(&lua, &lua.globals()).unwrap();
        for (code, want) in [
            ("return cjson.encode({1, 'a/b', {x = true}})", r#"[1,"a\/b",{"x":true}]"#),
            ("return cjson.encode({0.1, 1/3, -0.0, 1e100})", "[0.1,0.33333333333333,-0,1e+100]"),
            ("return cjson.encode({[1] = 1, [20] = 2})", "user_script:1: Cannot serialise table: excessively sparse array"),
            ("return cjson.encode(function() end)", "user_script:1: Cannot serialise function: type not supported"),
            ("return cjson.decode('[1,')", "user_script:1: Expected value but found T_END at character 4"),
            ("return cjson.decode('\"\\\\u00e9\"')", "\u{e9}"),
            ("return tostring(cjson.decode('[null]')[1] == cjson.null)", "true"),
            ("local f = cjson.decode return f()", "user_script:1: bad argument #1 to 'f' (expected 1 argument)"),
            ("return (string.gsub(cmsgpack.pack(0.1, -1099511627776), '.', function(c) return string.format('%02x', c:byte()) end))", "cb3fb999999999999ad3ffffff0000000000"),
            ("return select(2, cmsgpack.unpack_one(cmsgpack.pack(1, 2), 0)) .. ''", "1"),
            ("return cmsgpack.unpack('\\146\\1')", "user_script:1: Missing bytes in input."),
            ("return bit.tohex(-1) .. bit.tohex(255, -4) .. bit.band(7, 12)", "ffffffff00FF4"),
            ("return bit.lshift()", "user_script:1: bad argument #1 to 'lshift' (number expected, got no value)"),
            ("return struct.pack('>I2s', 258, 'ab')", "\u{1}\u{2}ab\u{0}"),
            ("return struct.pack('b')", "user_script:1: bad argument #2 to 'pack' (number expected, got nil)"),
            ("return table.concat({struct.unpack('<h!4i', '\\255\\255\\0\\0\\1\\0\\0\\0')}, ' ')", "-1 1 9"),
        ] {
            assert_eq!(run(&lua, code), want, "{code}");
        }
    }
}
