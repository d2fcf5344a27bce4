//! `bit` (LuaBitOp 1.0.2): 32-bit operations on Lua numbers.

use super::{function, num, one, Args};
use mlua::{Lua, MultiValue, Table, Value};

pub(super) fn module(lua: &Lua) -> mlua::Result<Table> {
    // luaL_register sizes the table for its functions: the same size keeps `pairs` order.
    let t = lua.create_table_with_capacity(0, 12)?;
    t.raw_set("tobit", function(lua, |_, a| ret(barg(&a, 1)?))?)?;
    t.raw_set("bnot", function(lua, |_, a| ret(!barg(&a, 1)?))?)?;
    t.raw_set("band", function(lua, |_, a| fold(&a, |x, y| x & y))?)?;
    t.raw_set("bor", function(lua, |_, a| fold(&a, |x, y| x | y))?)?;
    t.raw_set("bxor", function(lua, |_, a| fold(&a, |x, y| x ^ y))?)?;
    t.raw_set("lshift", function(lua, |_, a| shift(&a, |b, n| b << n))?)?;
    t.raw_set("rshift", function(lua, |_, a| shift(&a, |b, n| b >> n))?)?;
    t.raw_set(
        "arshift",
        function(lua, |_, a| shift(&a, |b, n| ((b as i32) >> n) as u32))?,
    )?;
    t.raw_set("rol", function(lua, |_, a| shift(&a, u32::rotate_left))?)?;
    t.raw_set("ror", function(lua, |_, a| shift(&a, u32::rotate_right))?)?;
    t.raw_set(
        "bswap",
        function(lua, |_, a| ret(barg(&a, 1)?.swap_bytes()))?,
    )?;
    t.raw_set("tohex", function(lua, tohex)?)?;
    Ok(t)
}

/// An argument as 32 bits: the number's low bits after adding 2^52+2^51, which rounds it
/// to an integer and wraps it modulo 2^32 as the C library does.
fn barg(args: &Args<'_>, n: usize) -> mlua::Result<u32> {
    let value = args.to_number(n);
    let b = (value.unwrap_or(0.0) + 6_755_399_441_055_744.0).to_bits() as u32;
    if b == 0 && value.is_none() {
        return Err(args.type_error(n, "number"));
    }
    Ok(b)
}

/// A result: the 32 bits as a signed number.
fn ret(b: u32) -> mlua::Result<MultiValue> {
    one(num(f64::from(b as i32)))
}

/// band, bor, bxor: the first argument, then the others from the last one down.
fn fold(args: &Args<'_>, op: fn(u32, u32) -> u32) -> mlua::Result<MultiValue> {
    let mut b = barg(args, 1)?;
    for i in (2..=args.top()).rev() {
        b = op(b, barg(args, i)?);
    }
    ret(b)
}

fn shift(args: &Args<'_>, op: fn(u32, u32) -> u32) -> mlua::Result<MultiValue> {
    let b = barg(args, 1)?;
    let n = barg(args, 2)? & 31;
    ret(op(b, n))
}

fn tohex(lua: &Lua, args: Args<'_>) -> mlua::Result<MultiValue> {
    let mut b = barg(&args, 1)?;
    let mut n = if args.get(2).is_none() {
        8
    } else {
        barg(&args, 2)? as i32
    };
    let mut digits: &[u8; 16] = b"0123456789abcdef";
    if n < 0 {
        n = n.wrapping_neg();
        digits = b"0123456789ABCDEF";
    }
    // -2^31 stays negative after the negation; Redis's build treats it as large (8 digits).
    let n = if n < 0 { 8 } else { n };
    let n = n.min(8) as usize;
    let mut buf = [0u8; 8];
    for slot in buf[..n].iter_mut().rev() {
        *slot = digits[(b & 15) as usize];
        b >>= 4;
    }
    one(Value::String(lua.create_string(&buf[..n])?))
}
