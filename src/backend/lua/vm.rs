//! One interpreter on a thread of its own: the sandbox built once (`prelude.lua`), scripts
//! compiled once per digest, and a job at a time run to its end. `redis.call` goes back to
//! the task that owns the script's transaction and waits for its reply: the interpreter
//! never touches a database, and the database is never touched off its task.

use super::convert::{error_frame, error_table, from_lua, to_lua};
use super::library::{Library, Loading};
use super::number::{g14 as lua_number, g17};
use super::raise::{first_line, raise, raised, thrown, Raised};
use super::{Entry, Finish, Halt, Job, Up};
use bytes::Bytes;
use mlua::chunk::ChunkMode;
use mlua::{
    Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value, VmState,
};
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Most compiled scripts one interpreter keeps; past it, it forgets them all and compiles
/// again as they come (Redis keeps every one; holdfast bounds what a client can make it hold).
const COMPILED: usize = 1000;
/// How often (in Lua instructions) a running script looks at its deadline and `SCRIPT KILL`.
const CHECK_EVERY: u32 = 1000;

/// What the running script's natives see: set for each job, cleared after.
struct Current {
    up: tokio::sync::mpsc::UnboundedSender<Up>,
    down: std::sync::mpsc::Receiver<Frame>,
    stop: Arc<Halt>,
    deadline: Instant,
    resp3: bool,
}

pub(super) struct Vm {
    pub(super) lua: Lua,
    globals: Table,
    run: Function,
    /// Switches the globals to a function library's load-time ones and back.
    pub(super) loading: Function,
    /// Lua's own `pcall`, which a library's top level runs under.
    pub(super) pcall: Function,
    compiled: HashMap<String, Function>,
    /// Function libraries run, by their code's digest (`library.rs`).
    pub(super) libraries: HashMap<String, super::library::Library>,
    generation: u64,
}

impl Vm {
    pub(super) fn new(memory: usize) -> mlua::Result<Vm> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        let native = natives(&lua)?;
        let globals = lua.create_table()?;
        // `run` calls a script under the real xpcall (the sandbox's passes a stopped
        // script's error on), with the handler that says where in the script it raised.
        let run: Function = lua
            .load(
                "local xpcall, handler, G = ...
                 return function(f, keys, args, eval)
                   if eval then
                     G.KEYS, G.ARGV = keys, args
                     return xpcall(f, handler)
                   end
                   return xpcall(function() return f(keys, args) end, handler)
                 end",
            )
            .set_name("=holdfast")
            .call((
                lua.globals().get::<Function>("xpcall")?,
                lua.create_function(handler)?,
                globals.clone(),
            ))?;
        // The libraries Redis gives scripts, in the table scripts read their globals from (the
        // prelude makes them read-only).
        super::libs::install(&lua, &globals)?;
        let pcall: Function = lua.globals().get("pcall")?;
        let (env, loading): (Table, Function) = lua
            .load(include_str!("prelude.lua"))
            .set_name("=holdfast")
            .call((native, globals.clone()))?;
        lua.set_globals(env)?;
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(CHECK_EVERY),
            |lua, _| match lua.app_data_ref::<Current>() {
                Some(current) if current.stop.stopped() => {
                    Err(mlua::Error::runtime("holdfast: script stopped"))
                }
                Some(current) if Instant::now() >= current.deadline => {
                    current.stop.set(Finish::TimedOut);
                    Err(mlua::Error::runtime("holdfast: script stopped"))
                }
                _ => Ok(VmState::Continue),
            },
        )?;
        lua.set_memory_limit(memory)?;
        Ok(Vm {
            lua,
            globals,
            run,
            loading,
            pcall,
            compiled: HashMap::new(),
            libraries: HashMap::new(),
            generation: 0,
        })
    }

    /// Runs one job to its end and says how it ended.
    pub(super) fn run(&mut self, job: Job) {
        let Job {
            invocation,
            up,
            down,
            stop,
            deadline,
            generation,
        } = job;
        if generation != self.generation {
            self.compiled.clear();
            self.libraries.clear();
            self.generation = generation;
        }
        let reply = up.clone();
        self.lua.set_app_data(Current {
            up,
            down,
            stop: stop.clone(),
            deadline,
            resp3: false,
        });
        let frame = self.call(&invocation);
        self.lua.remove_app_data::<Current>();
        // A collection now and then keeps a long-lived interpreter small (Redis does the same).
        let _ = self.lua.gc_step();
        let ended = match stop.ended() {
            Some(why) => why,
            None => Finish::Reply(frame),
        };
        let _ = reply.send(Up::Done(ended));
    }

    fn call(&mut self, invocation: &super::Invocation) -> Frame {
        match &invocation.entry {
            Entry::Eval => {
                let function = match self.compile(&invocation.sha, &invocation.body) {
                    Ok(f) => f,
                    Err(text) => return error_frame(text.as_bytes()),
                };
                // Redis 7.0 names an EVAL script by its digest in error replies.
                self.invoke(function, invocation, true, &invocation.sha)
            }
            Entry::Function(name) => {
                let found = self
                    .library(&invocation.sha, &invocation.body)
                    .ok()
                    .and_then(|lib| lib.callback(name));
                match found {
                    Some(function) => self.invoke(function, invocation, false, name),
                    None => error_frame(b"ERR Function not found"),
                }
            }
            Entry::Load => match self.library(&invocation.sha, &invocation.body) {
                Ok(library) => library.listing(),
                Err(text) => error_frame(text.as_bytes()),
            },
        }
    }

    /// Calls a script's `function` (with `KEYS` and `ARGV` as globals when `eval`, else as
    /// its two arguments) and converts its end into a reply.
    fn invoke(
        &mut self,
        function: Function,
        invocation: &super::Invocation,
        eval: bool,
        funcname: &str,
    ) -> Frame {
        let array = |items: &[Bytes]| -> mlua::Result<Table> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item)?)?;
            }
            Ok(t)
        };
        let outcome = (|| -> mlua::Result<MultiValue> {
            let keys = array(&invocation.keys)?;
            let args = array(&invocation.argv)?;
            self.run.call::<MultiValue>((function, keys, args, eval))
        })();
        let _ = self.globals.raw_set("KEYS", Value::Nil);
        let _ = self.globals.raw_set("ARGV", Value::Nil);
        let resp3 = self.lua.app_data_ref::<Current>().is_some_and(|c| c.resp3);
        let mut values = match outcome {
            Ok(values) => values.into_iter(),
            Err(e) => {
                return error_frame(
                    format!(
                        "ERR Error running script {funcname}, {}",
                        first_line(&e.to_string())
                    )
                    .as_bytes(),
                )
            }
        };
        let ok = matches!(values.next(), Some(Value::Boolean(true)));
        let value = values.next().unwrap_or(Value::Nil);
        if ok {
            return from_lua(&value, resp3);
        }
        failure(&value, funcname)
    }

    /// The script's function, compiled from `body` the first time its digest is seen.
    fn compile(&mut self, sha: &str, body: &[u8]) -> Result<Function, String> {
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let shebang = super::shebang_len(body);
        // A shebang line is left out, but not its line feed, so line numbers stay the user's.
        let f = compile(&self.lua, &body[shebang..], "@user_script")
            .map_err(|message| format!("ERR Error compiling script (new function): {message}"))?;
        if self.compiled.len() >= COMPILED {
            self.compiled.clear();
        }
        self.compiled.insert(sha.to_string(), f.clone());
        Ok(f)
    }
}

/// Lua source (never a binary chunk) compiled as chunk `name`; Lua's own message when it
/// does not compile.
pub(super) fn compile(lua: &Lua, code: &[u8], name: &str) -> Result<Function, String> {
    lua.load(code)
        .set_name(name)
        .set_mode(ChunkMode::Text)
        .into_function()
        .map_err(|e| match e {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
}

/// The reply to a script that raised: its error table's text, and where in the script.
fn failure(value: &Value, funcname: &str) -> Frame {
    let Value::Table(table) = value else {
        let msg = match value {
            Value::String(s) => s.to_string_lossy(),
            _ => "execution failure".to_string(),
        };
        return error_frame(format!("ERR Error running script {funcname}, {msg:.100}").as_bytes());
    };
    let field = |name: &str| -> Option<String> {
        match table.get::<Value>(name).ok()? {
            Value::String(s) => Some(s.to_string_lossy()),
            Value::Number(n) => Some(g17(n)),
            Value::Integer(n) => Some(g17(n as f64)),
            _ => None,
        }
    };
    let msg = field("err").unwrap_or_default();
    let text = match (field("source"), field("line")) {
        (Some(source), Some(line)) => format!("{msg} script: {funcname}, on {source}:{line}."),
        _ => msg,
    };
    error_frame(text.as_bytes())
}

/// xpcall's message handler: the error as a table (`ERR` and the text, for a Lua error),
/// with the script's source and line where it was raised — the first frame of the script's
/// own code, past the C functions and holdfast's sandbox between.
fn handler(lua: &Lua, err: Value) -> mlua::Result<Value> {
    let table = match err {
        Value::Table(t) => t,
        Value::String(s) => {
            let mut text = b"ERR ".to_vec();
            text.extend_from_slice(&s.as_bytes());
            error_table(lua, &text)?
        }
        Value::Number(n) => error_table(lua, format!("ERR {}", lua_number(n)).as_bytes())?,
        Value::Integer(n) => error_table(lua, format!("ERR {}", lua_number(n as f64)).as_bytes())?,
        Value::Error(e) => match (raised(&e), thrown(&e)) {
            (Some(text), _) => error_table(lua, text)?,
            // A library's error is a Lua string error, as its C function's would be.
            (None, Some(text)) => error_table(lua, format!("ERR {text}").as_bytes())?,
            (None, None) => error_table(
                lua,
                format!("ERR {}", first_line(&e.to_string())).as_bytes(),
            )?,
        },
        other => error_table(lua, format!("ERR {}", other.type_name()).as_bytes())?,
    };
    for level in 1..64 {
        let Some(found) = lua.inspect_stack(level, |debug| {
            let source = debug.source().source.map(|s| s.into_owned());
            (source, debug.current_line())
        }) else {
            break;
        };
        if let (Some(source), line) = found {
            if source.starts_with("@user_") {
                table.raw_set("source", source)?;
                if let Some(line) = line {
                    table.raw_set("line", line)?;
                }
                break;
            }
        }
    }
    Ok(Value::Table(table))
}

impl Vm {
    /// The library of `code` (digest `sha`), run the first time this interpreter meets it.
    pub(super) fn library(&mut self, sha: &str, code: &[u8]) -> Result<&Library, String> {
        if !self.libraries.contains_key(sha) {
            let library = self.load(code)?;
            self.libraries.insert(sha.to_string(), library);
        }
        self.libraries
            .get(sha)
            .ok_or_else(|| "ERR Function not found".to_string())
    }

    fn load(&mut self, code: &[u8]) -> Result<Library, String> {
        // The metadata line is left out, but not its line feed, so line numbers stay.
        let at = code.iter().position(|b| *b == b'\n').unwrap_or(code.len());
        let chunk = compile(&self.lua, &code[at..], "@user_function")
            .map_err(|message| format!("ERR Error compiling function: {message}"))?;
        self.lua.set_app_data(Loading::default());
        let ran = (|| -> mlua::Result<MultiValue> {
            self.loading.call::<()>(true)?;
            let ran = self.pcall.call::<MultiValue>(chunk);
            self.loading.call::<()>(false)?;
            ran
        })();
        let registered = self.lua.remove_app_data::<Loading>().unwrap_or_default();
        let mut values = ran
            .map_err(|e| {
                format!(
                    "ERR Error registering functions: {}",
                    first_line(&e.to_string())
                )
            })?
            .into_iter();
        if !matches!(values.next(), Some(Value::Boolean(true))) {
            let msg = match values.next().unwrap_or(Value::Nil) {
                Value::String(s) => format!("ERR {}", s.to_string_lossy()),
                Value::Table(t) => t
                    .raw_get::<mlua::LuaString>("err")
                    .map(|s| s.to_string_lossy())
                    .unwrap_or_default(),
                Value::Error(e) => match (raised(&e), thrown(&e)) {
                    (Some(text), _) => String::from_utf8_lossy(text).into_owned(),
                    (None, Some(text)) => format!("ERR {text}"),
                    (None, None) => format!("ERR {}", first_line(&e.to_string())),
                },
                other => format!("ERR {}", other.type_name()),
            };
            return Err(format!("ERR Error registering functions: {msg}"));
        }
        if registered.0.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(Library(registered.0))
    }
}

/// The functions the prelude builds the `redis` table from. None of them raises: an error is
/// returned as an error table, raised (or not, for `pcall`) by the prelude.
fn natives(lua: &Lua) -> mlua::Result<Table> {
    let native = lua.create_table()?;
    native.raw_set(
        "call",
        lua.create_function(|lua, args: MultiValue| redis_call(lua, args))?,
    )?;
    native.raw_set(
        "raise",
        lua.create_function(|lua, args: MultiValue| {
            let (reply, failed) = redis_call(lua, args)?;
            match (failed, &reply) {
                (true, Value::Table(t)) => {
                    let text: LuaString = t.raw_get("err")?;
                    Err(mlua::Error::external(Raised(text.as_bytes().to_vec())))
                }
                _ => Ok(reply),
            }
        })?,
    )?;
    native.raw_set(
        "unraised",
        lua.create_function(|lua, value: Value| match &value {
            Value::Error(e) => match (raised(e), thrown(e)) {
                (Some(text), _) => Ok(Value::Table(error_table(lua, text)?)),
                (None, Some(text)) => Ok(Value::String(lua.create_string(text)?)),
                (None, None) => Ok(value),
            },
            _ => Ok(value),
        })?,
    )?;
    native.raw_set(
        "stopped",
        lua.create_function(|lua, ()| {
            Ok(lua
                .app_data_ref::<Current>()
                .is_some_and(|c| c.stop.stopped()))
        })?,
    )?;
    api(lua, &native)?;
    native.raw_set(
        "register_function",
        lua.create_function(super::library::register_function)?,
    )?;
    Ok(native)
}

/// A value as `lua_tonumber` reads it: a number, or a string that reads as one; else None.
fn number(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Number(n) => Some(*n),
        Value::Integer(n) => Some(*n as f64),
        Value::String(s) => {
            let text = s.to_string_lossy();
            let text = text.trim();
            match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16).ok().map(|n| n as f64),
                None => text.parse().ok(),
            }
        }
        _ => None,
    }
}

/// The `redis` functions that check their arguments and raise, as Redis's C ones do.
fn api(lua: &Lua, native: &Table) -> mlua::Result<()> {
    native.raw_set(
        "setresp",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return raise("ERR redis.setresp() requires one argument.");
            }
            let n = number(args.front()).unwrap_or(0.0).trunc();
            if n != 2.0 && n != 3.0 {
                return raise("ERR RESP version must be 2 or 3.");
            }
            if let Some(mut current) = lua.app_data_mut::<Current>() {
                current.resp3 = n == 3.0;
            }
            Ok(())
        })?,
    )?;
    native.raw_set(
        "sha1hex",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return raise("ERR wrong number of arguments");
            }
            let text = match args.front() {
                Some(Value::String(s)) => s.as_bytes().to_vec(),
                Some(Value::Number(n)) => lua_number(*n).into_bytes(),
                Some(Value::Integer(n)) => lua_number(*n as f64).into_bytes(),
                _ => Vec::new(),
            };
            Ok(crate::backend::scripts::digest(&text))
        })?,
    )?;
    native.raw_set(
        "log",
        lua.create_function(|_, args: MultiValue| {
            if args.len() < 2 {
                return raise("ERR redis.log() requires two arguments or more.");
            }
            let Some(level) = number(args.front()) else {
                return raise("ERR First argument must be a number (log level).");
            };
            let level = level.trunc();
            if !(0.0..=3.0).contains(&level) {
                return raise("ERR Invalid debug level.");
            }
            let parts: Vec<String> = args
                .iter()
                .skip(1)
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.to_string_lossy()),
                    Value::Number(n) => Some(lua_number(*n)),
                    Value::Integer(n) => Some(lua_number(*n as f64)),
                    _ => None,
                })
                .collect();
            let text = parts.join(" ");
            match level as i64 {
                3 => tracing::warn!(target: "holdfast::script", "{text}"),
                2 => tracing::info!(target: "holdfast::script", "{text}"),
                _ => tracing::debug!(target: "holdfast::script", "{text}"),
            }
            Ok(())
        })?,
    )?;
    native.raw_set(
        "set_repl",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return raise("ERR redis.set_repl() requires two arguments.");
            }
            let flags = number(args.front()).unwrap_or(0.0).trunc();
            if !(0.0..=3.0).contains(&flags) {
                return raise(
                    "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                );
            }
            Ok(())
        })?,
    )?;
    native.raw_set(
        "acl_check_cmd",
        lua.create_function(|lua, args: MultiValue| {
            let args = match arguments(&args) {
                Ok(args) => args,
                Err(text) => return raise(text),
            };
            match ask(lua, Up::Allowed { args }) {
                Some(Frame::Boolean { data, .. }) => Ok(data),
                _ => raise("ERR Invalid command passed to redis.acl_check_cmd()"),
            }
        })?,
    )?;
    Ok(())
}

/// A `redis.call` argument list as the command's arguments: strings as they are, numbers
/// as `%.17g`; anything else refused as Redis refuses it.
fn arguments(args: &MultiValue) -> Result<Vec<Bytes>, &'static [u8]> {
    if args.is_empty() {
        return Err(b"ERR Please specify at least one argument for this redis lib call");
    }
    args.iter()
        .map(|arg| match arg {
            Value::String(s) => Ok(Bytes::copy_from_slice(&s.as_bytes())),
            Value::Number(n) => Ok(Bytes::from(g17(*n))),
            Value::Integer(n) => Ok(Bytes::from(g17(*n as f64))),
            _ => Err(&b"ERR Lua redis lib command arguments must be strings or integers"[..]),
        })
        .collect()
}

/// Sends `up` to the script's task and waits for its answer; None when the task is gone.
fn ask(lua: &Lua, up: Up) -> Option<Frame> {
    let current = lua.app_data_ref::<Current>()?;
    current.up.send(up).ok()?;
    current.down.recv().ok()
}

fn redis_call(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    let args = match arguments(&args) {
        Ok(args) => args,
        Err(text) => return Ok((Value::Table(error_table(lua, text)?), true)),
    };
    let resp3 = lua.app_data_ref::<Current>().is_some_and(|c| c.resp3);
    match ask(lua, Up::Call { args, resp3 }) {
        Some(frame) => to_lua(lua, frame, resp3),
        None => {
            if let Some(current) = lua.app_data_ref::<Current>() {
                current.stop.set(Finish::Abandoned);
            }
            Ok((
                Value::Table(error_table(
                    lua,
                    b"ERR holdfast: the script's transaction ended",
                )?),
                true,
            ))
        }
    }
}
