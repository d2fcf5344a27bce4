//! `struct` (Roberto Ierusalimschy's library, as Redis ships it): binary packing with
//! format strings, sizes as on x86-64 Linux (`h` 2, `i` 4, `l` and `T` 8, alignment up to 8).

use super::{
    c_str, function, i64_of, num, one, out_of_memory, thrown, to_number, u64_of, Args, MAX_C_STACK,
    MAX_OUTPUT, MAX_RESULTS,
};
use mlua::{Lua, MultiValue, Table, Value};

/// Largest size of an `i`/`I` integer.
const MAX_INT_SIZE: i32 = 32;
/// Alignment `!` gives without a number.
const MAX_ALIGN: i32 = 8;

pub(super) fn module(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 3)?;
    t.raw_set("pack", function(lua, pack)?)?;
    t.raw_set("unpack", function(lua, unpack)?)?;
    t.raw_set("size", function(lua, size)?)?;
    Ok(t)
}

/// Byte order and alignment, as the format's control options set them.
struct Header {
    little: bool,
    align: i32,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            little: true,
            align: 1,
        }
    }
}

/// A format string being read, an option at a time.
struct Format<'l> {
    lua: &'l Lua,
    bytes: Vec<u8>,
    at: usize,
}

impl<'l> Format<'l> {
    fn new(args: &Args<'l>) -> mlua::Result<Self> {
        let fmt = args.check_string(1)?;
        Ok(Format {
            lua: args.lua,
            bytes: c_str(&fmt.as_bytes()).to_vec(),
            at: 0,
        })
    }

    fn next(&mut self) -> Option<u8> {
        let opt = self.bytes.get(self.at).copied();
        self.at += 1;
        opt
    }

    /// A decimal count after an option, or `default` when none is there.
    fn number(&mut self, default: i32) -> mlua::Result<i32> {
        let mut a: i32 = 0;
        let mut any = false;
        while let Some(d) = self.bytes.get(self.at).filter(|d| d.is_ascii_digit()) {
            let d = i32::from(d - b'0');
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err(thrown(self.lua, "integral size overflow"));
            }
            a = a * 10 + d;
            self.at += 1;
            any = true;
        }
        Ok(if any { a } else { default })
    }

    /// The size of option `opt` (reading its count), 0 for options that take no room.
    fn size(&mut self, opt: u8) -> mlua::Result<usize> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)? as usize,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > MAX_INT_SIZE {
                    return Err(thrown(
                        self.lua,
                        format!("integral size {size} is larger than limit of {MAX_INT_SIZE}"),
                    ));
                }
                size as usize
            }
            _ => 0,
        })
    }

    /// Endianness and alignment options; anything else is not an option.
    fn control(&mut self, args: &Args<'_>, opt: u8, h: &mut Header) -> mlua::Result<()> {
        match opt {
            b' ' => {}
            b'>' => h.little = false,
            b'<' => h.little = true,
            b'!' => {
                let a = self.number(MAX_ALIGN)?;
                if !(a > 0 && a & (a - 1) == 0) {
                    return Err(thrown(
                        self.lua,
                        format!("alignment {a} is not a power of 2"),
                    ));
                }
                h.align = a;
            }
            _ => {
                let opt = String::from_utf8_lossy(&[opt]).into_owned();
                return Err(args.arg_error(1, &format!("invalid format option '{opt}'")));
            }
        }
        Ok(())
    }
}

/// Padding before an item of `size` bytes at offset `len` (the C arithmetic, sizes that are
/// not powers of two included).
fn to_align(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align as usize);
    (size.wrapping_sub(len & (size - 1))) & (size - 1)
}

fn pack(lua: &Lua, mut args: Args<'_>) -> mlua::Result<MultiValue> {
    let mut fmt = Format::new(&args)?;
    // The C code pushes a nil after the arguments: a missing one reads as nil.
    args.values.push(Value::Nil);
    let mut h = Header::default();
    let mut arg = 2;
    let mut out: Vec<u8> = Vec::new();
    let mut total: usize = 0;
    while let Some(opt) = fmt.next() {
        let mut size = fmt.size(opt)?;
        let pad = to_align(total, &h, opt, size);
        total = total.wrapping_add(pad);
        out.resize(out.len() + pad, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = args.check_number(arg)?;
                arg += 1;
                let mut value = if n < 0.0 { i64_of(n) as u64 } else { u64_of(n) };
                let mut bytes = vec![0u8; size];
                for b in bytes.iter_mut() {
                    *b = value as u8;
                    value >>= 8;
                }
                if !h.little {
                    bytes.reverse();
                }
                out.extend_from_slice(&bytes);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = args.check_number(arg)? as f32;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    f.to_le_bytes()
                } else {
                    f.to_be_bytes()
                });
            }
            b'd' => {
                let d = args.check_number(arg)?;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    d.to_le_bytes()
                } else {
                    d.to_be_bytes()
                });
            }
            b'c' | b's' => {
                let s = args.check_string(arg)?;
                let s = s.as_bytes();
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // The C code checks after moving past the string: it names the next one.
                    return Err(args.arg_error(arg as i64, "string too short"));
                }
                if out.len().saturating_add(size) > MAX_OUTPUT {
                    return Err(out_of_memory());
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                    size += 1;
                }
            }
            _ => fmt.control(&args, opt, &mut h)?,
        }
        total = total.wrapping_add(size);
    }
    one(Value::String(lua.create_string(&out)?))
}

/// An integer of `bytes.len()` bytes, as the C code reads it into 64 bits (wider ones keep
/// their low 64 bits; the sign mask's shift wraps as x86 shifts do).
fn get_integer(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut push = |b: &u8| l = l << 8 | u64::from(*b);
    if little {
        bytes.iter().rev().for_each(&mut push);
    } else {
        bytes.iter().for_each(&mut push);
    }
    if !signed {
        return l as f64;
    }
    let shift = ((bytes.len() as i32).wrapping_mul(8).wrapping_sub(1) & 63) as u32;
    let mask = u64::MAX << shift;
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn unpack(lua: &Lua, args: Args<'_>) -> mlua::Result<MultiValue> {
    let mut fmt = Format::new(&args)?;
    let data = args.check_string(2)?;
    let data = data.as_bytes();
    let ld = data.len();
    let mut pos = args.opt_integer(3, 1)? as usize;
    if pos == 0 {
        return Err(args.arg_error(3, "offset must be 1 or greater"));
    }
    pos -= 1;
    let mut h = Header::default();
    let mut out: Vec<Value> = Vec::new();
    let fits = |pos: usize, size: usize| size <= ld && pos <= ld - size;
    while let Some(opt) = fmt.next() {
        let mut size = fmt.size(opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if !fits(pos, size) {
            return Err(args.arg_error(2, "data string too short"));
        }
        if args.top() + out.len() + 2 > MAX_C_STACK {
            return Err(thrown(lua, "stack overflow (too many results)"));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = opt.is_ascii_lowercase();
                out.push(num(get_integer(&data[pos..pos + size], h.little, signed)));
            }
            b'x' => {}
            b'f' => {
                let mut b = [0u8; 4];
                b.copy_from_slice(&data[pos..pos + 4]);
                let f = if h.little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                out.push(num(f64::from(f)));
            }
            b'd' => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[pos..pos + 8]);
                out.push(num(if h.little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                }));
            }
            b'c' => {
                if size == 0 {
                    // `c0`: the length is the result just read, which is dropped.
                    let previous = out.last().and_then(|v| to_number(lua, v));
                    let Some(n) = previous else {
                        return Err(thrown(lua, "format 'c0' needs a previous size"));
                    };
                    size = u64_of(n) as usize;
                    out.pop();
                    if !fits(pos, size) {
                        return Err(args.arg_error(2, "data string too short"));
                    }
                }
                out.push(Value::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(thrown(lua, "unfinished string in data"));
                };
                size = len + 1;
                out.push(Value::String(lua.create_string(&data[pos..pos + len])?));
            }
            _ => fmt.control(&args, opt, &mut h)?,
        }
        pos = pos.wrapping_add(size);
    }
    if out.len() + 1 > MAX_RESULTS {
        return Err(thrown(lua, "stack overflow (too many results)"));
    }
    out.push(num(pos.wrapping_add(1) as i64 as f64));
    Ok(MultiValue::from_vec(out))
}

fn size(_: &Lua, args: Args<'_>) -> mlua::Result<MultiValue> {
    let mut fmt = Format::new(&args)?;
    let mut h = Header::default();
    let mut pos: usize = 0;
    while let Some(opt) = fmt.next() {
        let size = fmt.size(opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if opt == b's' {
            return Err(args.arg_error(1, "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(args.arg_error(1, "option 'c0' has no fixed size"));
        }
        // Letters and digits that are no option are skipped here, unlike in pack.
        if !opt.is_ascii_alphanumeric() {
            fmt.control(&args, opt, &mut h)?;
        }
        pos = pos.wrapping_add(size);
    }
    one(num(pos as i64 as f64))
}
