//! Lua 5.1 for the backends that have no scripting of their own (SQL): `EVAL` and its kin run
//! here, sandboxed as Redis 7.0 sandboxes them, and every `redis.call` is handed back to the
//! task that runs the script's transaction.
//!
//! An interpreter lives on a thread of its own (`vm`), taken from a pool for one script at a
//! time. The script's task ([`Running`]) answers its calls and waits for its end; the
//! interpreter waits for each call's reply. A script stops at its deadline or at
//! `SCRIPT KILL`: the interpreter checks both every thousand instructions and lets no
//! `pcall` catch the stop, and the task gives up waiting a moment after the deadline
//! whatever the interpreter does (an interpreter still busy then is left to finish on its
//! own thread and never reused).

pub use crate::command::shebang::{flags, shebang_len, Flags};

pub mod convert;
pub mod library;
mod libs;
pub mod number;
mod raise;
mod vm;

use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Memory one interpreter may hold (scripts, their tables, their strings).
pub const MEMORY: usize = 256 << 20;
/// Idle interpreters kept for the next scripts.
const IDLE: usize = 8;

/// What an invocation runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `EVAL`: the body is the script.
    Eval,
    /// `FCALL`: the body is the library's code, and this its function to call.
    Function(String),
    /// `FUNCTION LOAD`: the body is a library's code, run to register its functions; the
    /// reply lists them (`library::Library::listing`).
    Load,
}

/// One script to run.
pub struct Invocation {
    /// What it runs.
    pub entry: Entry,
    /// The script's text, shebang line included.
    pub body: Bytes,
    /// Its SHA1 digest, lowercase hex.
    pub sha: String,
    /// `KEYS`.
    pub keys: Vec<Bytes>,
    /// `ARGV`.
    pub argv: Vec<Bytes>,
}

/// What a running script sends its task.
pub enum Up {
    /// `redis.call` or `redis.pcall`: run this command, answer its reply (in RESP3 when the
    /// script asked for it with `redis.setresp(3)`).
    Call {
        /// The command, name first.
        args: Vec<Bytes>,
        /// The script asked for RESP3 replies.
        resp3: bool,
    },
    /// `redis.acl_check_cmd`: answer a boolean, or an error for an unknown command.
    Allowed {
        /// The command, name first.
        args: Vec<Bytes>,
    },
    /// The script ended.
    Done(Finish),
}

/// How a script ended.
#[derive(Debug)]
pub enum Finish {
    /// It returned, or raised: its reply (an error reply when it raised).
    Reply(Frame),
    /// It ran past its deadline.
    TimedOut,
    /// `SCRIPT KILL`.
    Killed,
    /// Its task went away while it ran.
    Abandoned,
}

/// A running script's stop switch: 0 while it runs, then why it was stopped.
#[derive(Default)]
pub struct Halt(AtomicU8);

impl Halt {
    fn set(&self, why: Finish) {
        let code = match why {
            Finish::TimedOut => 1,
            Finish::Killed => 2,
            Finish::Abandoned => 3,
            Finish::Reply(_) => return,
        };
        let _ = self
            .0
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
    }

    fn stopped(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }

    fn ended(&self) -> Option<Finish> {
        match self.0.load(Ordering::Acquire) {
            1 => Some(Finish::TimedOut),
            2 => Some(Finish::Killed),
            3 => Some(Finish::Abandoned),
            _ => None,
        }
    }
}

struct Job {
    invocation: Invocation,
    up: tokio::sync::mpsc::UnboundedSender<Up>,
    down: std::sync::mpsc::Receiver<Frame>,
    stop: Arc<Halt>,
    deadline: Instant,
    generation: u64,
}

/// An interpreter's thread, idle in the pool or running one script.
struct Worker {
    jobs: std::sync::mpsc::Sender<Job>,
}

/// The interpreters of one backend.
#[derive(Default)]
pub struct Runtime {
    idle: Mutex<Vec<Worker>>,
    /// Raised by `SCRIPT FLUSH`: an interpreter forgets what it compiled before.
    generation: AtomicU64,
    /// The scripts running now, for `SCRIPT KILL`.
    running: Mutex<Vec<std::sync::Weak<Halt>>>,
}

impl Runtime {
    /// Starts `invocation` on an interpreter; it stops by itself at `limit`.
    ///
    /// # Errors
    /// The text of an error reply when no interpreter can be started.
    pub fn start(&self, invocation: Invocation, limit: Duration) -> Result<Running<'_>, String> {
        let (up_tx, up_rx) = tokio::sync::mpsc::unbounded_channel();
        let (down_tx, down_rx) = std::sync::mpsc::channel();
        let stop = Arc::new(Halt::default());
        let deadline = Instant::now() + limit;
        let mut job = Job {
            invocation,
            up: up_tx,
            down: down_rx,
            stop: stop.clone(),
            deadline,
            generation: self.generation.load(Ordering::Acquire),
        };
        let worker = loop {
            let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let worker = match idle {
                Some(worker) => worker,
                None => spawn()?,
            };
            match worker.jobs.send(job) {
                Ok(()) => break worker,
                // Its thread ended (it could not build its interpreter): try another.
                Err(std::sync::mpsc::SendError(back)) => job = back,
            }
        };
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            running.retain(|s| s.strong_count() > 0);
            running.push(Arc::downgrade(&stop));
        }
        Ok(Running {
            runtime: self,
            up: up_rx,
            down: down_tx,
            stop,
            deadline: tokio::time::Instant::now() + limit,
            limit,
            worker: Some(worker),
            done: false,
            late: false,
        })
    }

    /// `SCRIPT KILL`: stops every script running now; false when none was.
    pub fn kill(&self) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut any = false;
        for stop in running.iter().filter_map(|s| s.upgrade()) {
            if !stop.stopped() {
                stop.set(Finish::Killed);
                any = true;
            }
        }
        any
    }

    /// `SCRIPT FLUSH`: what the interpreters compiled is forgotten.
    pub fn flush(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

fn spawn() -> Result<Worker, String> {
    let (jobs, queue) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("holdfast-lua".to_string())
        .spawn(move || {
            let mut vm = match vm::Vm::new(MEMORY) {
                Ok(vm) => vm,
                Err(e) => {
                    tracing::error!(error = %e, "a Lua interpreter could not be built");
                    return;
                }
            };
            while let Ok(job) = queue.recv() {
                vm.run(job);
            }
        })
        .map_err(|e| format!("ERR holdfast: no thread for the script: {e}"))?;
    Ok(Worker { jobs })
}

/// A script on its way, seen from its task.
pub struct Running<'r> {
    runtime: &'r Runtime,
    up: tokio::sync::mpsc::UnboundedReceiver<Up>,
    down: std::sync::mpsc::Sender<Frame>,
    stop: Arc<Halt>,
    deadline: tokio::time::Instant,
    limit: Duration,
    worker: Option<Worker>,
    done: bool,
    /// The script's end was not heard from its interpreter in time.
    late: bool,
}

/// How long past its deadline the task still waits for a script's interpreter to notice.
const GRACE: Duration = Duration::from_secs(1);

impl Running<'_> {
    /// The script's next call, or how it ended.
    pub async fn next(&mut self) -> Up {
        if self.done {
            return Up::Done(Finish::Abandoned);
        }
        match tokio::time::timeout_at(self.deadline + GRACE, self.up.recv()).await {
            Ok(Some(Up::Done(ended))) => {
                self.done = true;
                Up::Done(ended)
            }
            Ok(Some(up)) => up,
            Ok(None) => {
                self.done = true;
                Up::Done(Finish::Abandoned)
            }
            Err(_) => {
                // The interpreter did not stop in time (busy inside one long library call):
                // it is left to end on its own thread.
                tracing::warn!(
                    limit = ?self.limit,
                    "a script's interpreter did not stop at its limit; it is left to end alone"
                );
                self.stop.set(Finish::TimedOut);
                self.worker = None;
                self.done = true;
                self.late = true;
                Up::Done(Finish::TimedOut)
            }
        }
    }

    /// Answers the script's pending call.
    pub fn answer(&self, frame: Frame) {
        let _ = self.down.send(frame);
    }

    /// Stops the script (its task failed under it) and waits for its interpreter to notice.
    pub async fn abandon(&mut self) {
        self.stop.set(Finish::Abandoned);
        // The interpreter may be waiting for an answer: none will come.
        let _ = self.down.send(Frame::Null);
        while !self.done {
            if let Up::Done(_) = self.next().await {
                break;
            }
            let _ = self.down.send(Frame::Null);
        }
    }

    /// Whether its interpreter said how it ended (false: it was given up on, still busy).
    pub fn heard_the_end(&self) -> bool {
        self.done && !self.late
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Dropped mid-script (the request was abandoned): it is stopped, and its
            // interpreter ends it on its own thread before taking another.
            self.stop.set(Finish::Abandoned);
            self.worker = None;
            return;
        }
        if let Some(worker) = self.worker.take() {
            let mut idle = self.runtime.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < IDLE {
                idle.push(worker);
            }
        }
    }
}

/// What a script may call, decided above the backend: the command table (arity, commands
/// no script may run) and the client's namespaces (every key it touches must be one the
/// client may reach, on this backend).
pub trait Gate: Send + Sync {
    /// None when `args` may run from the script; else the text of the error it answers.
    fn check(&self, args: &[Bytes]) -> Option<String>;
    /// How long the script may run (its namespace's `script_time_limit`).
    fn limit(&self) -> Duration;
}

impl std::fmt::Debug for dyn Gate + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

/// Whether `body` compiles (`SCRIPT LOAD` answers a syntax error as Redis does); the
/// error reply's text if not.
pub fn compiles(body: &[u8]) -> Result<(), String> {
    flags(body)?;
    let lua = mlua::Lua::new_with(mlua::StdLib::NONE, mlua::LuaOptions::default())
        .map_err(|e| format!("ERR holdfast: {e}"))?;
    vm::compile(&lua, &body[shebang_len(body)..], "@user_script")
        .map(|_| ())
        .map_err(|message| format!("ERR Error compiling script (new function): {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(body: &str) -> Invocation {
        Invocation {
            entry: Entry::Eval,
            body: Bytes::copy_from_slice(body.as_bytes()),
            sha: crate::backend::scripts::digest(body.as_bytes()),
            keys: vec![],
            argv: vec![],
        }
    }

    /// Runs `body` to its end, answering every call with `+OK`.
    async fn run(runtime: &Runtime, body: &str, limit: Duration) -> (Finish, bool) {
        let mut running = runtime.start(invocation(body), limit).expect("starts");
        loop {
            match running.next().await {
                Up::Done(finish) => return (finish, running.heard_the_end()),
                Up::Call { .. } | Up::Allowed { .. } => running.answer(Frame::SimpleString {
                    data: Bytes::from_static(b"OK"),
                    attributes: None,
                }),
            }
        }
    }

    #[tokio::test]
    async fn an_endless_script_stops_itself_however_it_hides() {
        let runtime = Runtime::default();
        for body in [
            "while true do end",
            "while true do pcall(function() while true do end end) end",
            "while true do xpcall(function() while true do end end, function() end) end",
            "local co = coroutine.wrap(function() while true do end end)\nwhile true do pcall(co) end",
            "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
            "while true do pcall(redis.call, 'ping') end",
        ] {
            let started = std::time::Instant::now();
            let (finish, heard) = run(&runtime, body, Duration::from_millis(200)).await;
            assert!(matches!(finish, Finish::TimedOut), "{body}: {finish:?}");
            // Its interpreter ended the script itself, and is free for the next one.
            assert!(heard, "{body}: the interpreter kept running");
            assert!(started.elapsed() < Duration::from_secs(1), "{body}");
        }
        let (finish, _) = run(&runtime, "return 7", Duration::from_secs(1)).await;
        assert!(
            matches!(finish, Finish::Reply(Frame::Number { data: 7, .. })),
            "{finish:?}"
        );
    }

    #[tokio::test]
    async fn script_kill_stops_what_runs_and_only_that() {
        let runtime = std::sync::Arc::new(Runtime::default());
        assert!(!runtime.kill(), "nothing runs yet");
        let running = runtime.clone();
        let task = tokio::spawn(async move {
            run(
                &running,
                "while true do pcall(function() end) end",
                Duration::from_secs(30),
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(runtime.kill());
        let (finish, heard) = task.await.expect("the script's task");
        assert!(matches!(finish, Finish::Killed) && heard, "{finish:?}");
        assert!(!runtime.kill(), "nothing runs any more");
    }
}
