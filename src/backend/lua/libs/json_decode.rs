//! `cjson.decode`: Lua CJSON's tokenizer and parser, with its lenient numbers (whatever
//! `strtod` reads, hex and `inf`/`nan` included, unless `decode_invalid_numbers` is off),
//! its error texts and the character positions they give.

use super::number::strtod;
use super::{num, thrown, Stack, MAX_C_STACK};
use mlua::{LightUserData, Lua, Table, Value};

/// A module table's settings, with the library's defaults.
#[derive(Clone, Copy)]
pub(super) struct JsonSettings {
    pub(super) sparse_convert: i32,
    pub(super) sparse_ratio: i32,
    pub(super) sparse_safe: i32,
    pub(super) encode_max_depth: i32,
    pub(super) decode_max_depth: i32,
    /// 0 refuses NaN and Inf, 1 writes them (`nan`, `inf`), 2 writes `null`.
    pub(super) encode_invalid_numbers: i32,
    pub(super) decode_invalid_numbers: bool,
    pub(super) keep_buffer: i32,
    pub(super) precision: i32,
}

impl Default for JsonSettings {
    fn default() -> Self {
        JsonSettings {
            sparse_convert: 0,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            keep_buffer: 1,
            precision: 14,
        }
    }
}

/// `cjson.null`: a NULL light userdata, as in C.
pub(super) fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TokenKind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    String,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Error,
}

impl TokenKind {
    fn name(self) -> &'static str {
        match self {
            TokenKind::ObjBegin => "T_OBJ_BEGIN",
            TokenKind::ObjEnd => "T_OBJ_END",
            TokenKind::ArrBegin => "T_ARR_BEGIN",
            TokenKind::ArrEnd => "T_ARR_END",
            TokenKind::String => "T_STRING",
            TokenKind::Number => "T_NUMBER",
            TokenKind::Boolean => "T_BOOLEAN",
            TokenKind::Null => "T_NULL",
            TokenKind::Colon => "T_COLON",
            TokenKind::Comma => "T_COMMA",
            TokenKind::End => "T_END",
            TokenKind::Error => "T_ERROR",
        }
    }
}

/// A token; a string token's text is in the parser's `text`.
#[derive(Clone, Copy)]
struct JsonToken {
    kind: TokenKind,
    /// Where it starts (where the error is, for an error token), from 0.
    index: usize,
    /// An error token's description.
    error: &'static str,
    number: f64,
    boolean: bool,
}

/// A container being filled (its table is on the parser's stack of open tables).
enum ParseStep {
    Array { next: f64 },
    Object { key: Vec<u8> },
}

struct Parser<'a> {
    lua: &'a Lua,
    cfg: &'a JsonSettings,
    data: &'a [u8],
    at: usize,
    text: Vec<u8>,
    depth: i32,
    /// The C parser's Lua stack height, for its `lua_checkstack` limit.
    top: usize,
}

pub(super) fn decode(lua: &Lua, cfg: &JsonSettings, data: &[u8]) -> mlua::Result<Value> {
    let mut p = Parser {
        lua,
        cfg,
        data,
        at: 0,
        text: Vec::new(),
        depth: 0,
        top: 1,
    };
    let first = p.next_token();
    let value = p.value(first)?;
    let last = p.next_token();
    if last.kind != TokenKind::End {
        return Err(expected(lua, "the end", &last));
    }
    Ok(value)
}

/// The parse error for `token` where `what` was wanted.
fn expected(lua: &Lua, what: &str, token: &JsonToken) -> mlua::Error {
    let found = if token.kind == TokenKind::Error {
        token.error
    } else {
        token.kind.name()
    };
    // The C code formats size_t positions with %d.
    let at = (token.index as u64).wrapping_add(1) as i32;
    thrown(
        lua,
        format!("Expected {what} but found {found} at character {at}"),
    )
}

impl Parser<'_> {
    /// The byte at `i`; the C parser reads a NUL at the end of the string.
    fn byte(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn token(&self, kind: TokenKind, index: usize) -> JsonToken {
        JsonToken {
            kind,
            index,
            error: "",
            number: 0.0,
            boolean: false,
        }
    }

    fn error(&self, what: &'static str) -> JsonToken {
        JsonToken {
            error: what,
            ..self.token(TokenKind::Error, self.at)
        }
    }

    fn next_token(&mut self) -> JsonToken {
        while matches!(self.byte(self.at), b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
        let start = self.at;
        let single = match self.byte(start) {
            b'{' => Some(TokenKind::ObjBegin),
            b'}' => Some(TokenKind::ObjEnd),
            b'[' => Some(TokenKind::ArrBegin),
            b']' => Some(TokenKind::ArrEnd),
            b',' => Some(TokenKind::Comma),
            b':' => Some(TokenKind::Colon),
            0 => return self.token(TokenKind::End, start),
            b'"' => return self.string_token(),
            b'-' | b'0'..=b'9' => {
                if !self.cfg.decode_invalid_numbers && self.invalid_number() {
                    return self.error("invalid number");
                }
                return self.number_token();
            }
            b't' | b'f' | b'n' | b'i' | b'I' | b'N' | b'+' => None,
            _ => return self.error("invalid token"),
        };
        if let Some(kind) = single {
            self.at += 1;
            return self.token(kind, start);
        }
        let rest = &self.data[start..];
        for (word, kind, boolean) in [
            (&b"true"[..], TokenKind::Boolean, true),
            (b"false", TokenKind::Boolean, false),
            (b"null", TokenKind::Null, false),
        ] {
            if rest.starts_with(word) {
                self.at += word.len();
                return JsonToken {
                    boolean,
                    ..self.token(kind, start)
                };
            }
        }
        if self.cfg.decode_invalid_numbers && self.invalid_number() {
            return self.number_token();
        }
        self.error("invalid token")
    }

    /// Whether the number here is one strict JSON refuses: a leading `+` or zero, hex,
    /// `inf` or `nan`.
    fn invalid_number(&self) -> bool {
        let mut p = self.at;
        if self.byte(p) == b'+' {
            return true;
        }
        if self.byte(p) == b'-' {
            p += 1;
        }
        let c = self.byte(p);
        if c == b'0' {
            let c2 = self.byte(p + 1);
            return c2 | 0x20 == b'x' || c2.is_ascii_digit();
        }
        // A C char: bytes from 0x80 are negative, so below '9' too.
        if c <= b'9' || c >= 0x80 {
            return false;
        }
        let rest = &self.data[p..];
        let prefix = |w: &[u8]| rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(w);
        prefix(b"inf") || prefix(b"nan")
    }

    fn number_token(&mut self) -> JsonToken {
        let (number, used) = strtod(&self.data[self.at..]);
        if used == 0 {
            return self.error("invalid number");
        }
        let token = JsonToken {
            number,
            ..self.token(TokenKind::Number, self.at)
        };
        self.at += used;
        token
    }

    fn string_token(&mut self) -> JsonToken {
        let start = self.at;
        self.at += 1;
        self.text.clear();
        loop {
            let ch = self.byte(self.at);
            match ch {
                b'"' => break,
                0 => return self.error("unexpected end of string"),
                b'\\' => {
                    let unescaped = match self.byte(self.at + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => 0x0c,
                        b'r' => b'\r',
                        b'u' => {
                            if self.unicode_escape() {
                                continue;
                            }
                            return self.error("invalid unicode escape code");
                        }
                        _ => return self.error("invalid escape code"),
                    };
                    self.text.push(unescaped);
                    self.at += 2;
                }
                _ => {
                    self.text.push(ch);
                    self.at += 1;
                }
            }
        }
        self.at += 1;
        self.token(TokenKind::String, start)
    }

    /// Four hex digits at `i`, or None.
    fn hex4(&self, i: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |acc, k| {
            let d = (self.byte(i + k) as char).to_digit(16)?;
            Some(acc << 4 | d)
        })
    }

    /// `\uXXXX` (or a surrogate pair of them) at `at`, appended as UTF-8.
    fn unicode_escape(&mut self) -> bool {
        let Some(mut code) = self.hex4(self.at + 2) else {
            return false;
        };
        let mut len = 6;
        if code & 0xF800 == 0xD800 {
            // A high surrogate, then a \u low one.
            if code & 0x400 != 0
                || self.byte(self.at + 6) != b'\\'
                || self.byte(self.at + 7) != b'u'
            {
                return false;
            }
            let Some(low) = self.hex4(self.at + 8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            code = (((code & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        let n = match code {
            0..=0x7F => 1,
            0x80..=0x7FF => 2,
            0x800..=0xFFFF => 3,
            _ => 4,
        };
        // Lead byte marker and payload, then six bits per continuation byte.
        let lead = [0x00, 0xC0, 0xE0, 0xF0][n - 1];
        let mut buf = [0u8; 4];
        buf[0] = lead | (code >> (6 * (n - 1))) as u8;
        for (k, b) in buf[1..n].iter_mut().enumerate() {
            *b = 0x80 | ((code >> (6 * (n - 2 - k))) & 0x3F) as u8;
        }
        let utf8 = &buf[..n];
        self.text.extend_from_slice(utf8);
        self.at += len;
        true
    }

    /// Enters a container that needs `slots` stack slots, as the C parser checks it.
    fn descend(&mut self, slots: usize) -> mlua::Result<()> {
        self.depth += 1;
        if self.depth <= self.cfg.decode_max_depth && self.top + slots <= MAX_C_STACK {
            return Ok(());
        }
        Err(thrown(
            self.lua,
            format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.at as i32
            ),
        ))
    }

    /// After a key's string token: the key is kept, the colon read, and the value's first
    /// token returned.
    fn key(&mut self, token: JsonToken, frame: &mut ParseStep) -> mlua::Result<JsonToken> {
        if token.kind != TokenKind::String {
            return Err(expected(self.lua, "object key string", &token));
        }
        if let ParseStep::Object { key } = frame {
            key.clear();
            key.extend_from_slice(&self.text);
        }
        self.top += 1;
        let colon = self.next_token();
        if colon.kind != TokenKind::Colon {
            return Err(expected(self.lua, "colon", &colon));
        }
        Ok(self.next_token())
    }

    /// The value that starts with `token`, nested containers filled depth first as the C
    /// parser's recursion fills them.
    fn value(&mut self, first: JsonToken) -> mlua::Result<Value> {
        let mut open = Stack::new(self.lua);
        let mut frames: Vec<ParseStep> = Vec::new();
        let mut current: Option<Table> = None;
        let mut token = first;
        loop {
            let mut value = match token.kind {
                TokenKind::String => Value::String(self.lua.create_string(&self.text)?),
                TokenKind::Number => num(token.number),
                TokenKind::Boolean => Value::Boolean(token.boolean),
                TokenKind::Null => null(),
                TokenKind::ObjBegin | TokenKind::ArrBegin => {
                    let object = token.kind == TokenKind::ObjBegin;
                    self.descend(if object { 3 } else { 2 })?;
                    let t = self.lua.create_table()?;
                    self.top += 1;
                    token = self.next_token();
                    if token.kind
                        == if object {
                            TokenKind::ObjEnd
                        } else {
                            TokenKind::ArrEnd
                        }
                    {
                        self.depth -= 1;
                        Value::Table(t)
                    } else {
                        let mut frame = if object {
                            ParseStep::Object { key: Vec::new() }
                        } else {
                            ParseStep::Array { next: 1.0 }
                        };
                        if object {
                            token = self.key(token, &mut frame)?;
                        }
                        frames.push(frame);
                        open.push(Value::Table(t.clone()))?;
                        current = Some(t);
                        continue;
                    }
                }
                _ => return Err(expected(self.lua, "value", &token)),
            };
            // Hand the finished value to the containers it completes.
            loop {
                let (Some(frame), Some(t)) = (frames.last_mut(), current.as_ref()) else {
                    return Ok(value);
                };
                if let Value::Table(_) = value {
                    self.top -= 1;
                }
                let close = match frame {
                    ParseStep::Array { next } => {
                        t.raw_set(*next, value)?;
                        *next += 1.0;
                        TokenKind::ArrEnd
                    }
                    ParseStep::Object { key } => {
                        t.raw_set(self.lua.create_string(&key)?, value)?;
                        self.top -= 1;
                        TokenKind::ObjEnd
                    }
                };
                token = self.next_token();
                if token.kind != close {
                    if token.kind != TokenKind::Comma {
                        let what = if close == TokenKind::ArrEnd {
                            "comma or array end"
                        } else {
                            "comma or object end"
                        };
                        return Err(expected(self.lua, what, &token));
                    }
                    token = self.next_token();
                    if close == TokenKind::ObjEnd {
                        token = self.key(token, frame)?;
                    }
                    break;
                }
                self.depth -= 1;
                frames.pop();
                open.pop()?;
                value = current.take().map_or(Value::Nil, Value::Table);
                current = open.last_table()?;
            }
        }
    }
}
