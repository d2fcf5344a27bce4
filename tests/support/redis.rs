//! A real `redis-server` child process on a free loopback port, for tests.
//!
//! Each server lives in its own temp dir (its `--dir`, plus `redis.log` with
//! its stdout/stderr), runs without persistence and is SIGKILLed by PID when
//! the `RedisServer` is dropped. Nothing is ever killed by name.
//!
//! All methods are blocking (std I/O); calling them from a
//! `#[tokio::test(flavor = "multi_thread")]` test is fine.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The server binary; `HOLDFAST_REDIS_SERVER` overrides it.
pub const REDIS_SERVER_BIN: &str = "/usr/bin/redis-server";
/// How long `start`/`restart` wait for `PING` to answer `+PONG`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout for connecting and reading in `cmd`.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts with a fresh port if the picked port was taken before redis bound it.
const PORT_ATTEMPTS: usize = 5;

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    extra_args: Vec<String>,
    /// From `--requirepass` in the extra args: used by the readiness probe and `cmd`.
    password: Option<String>,
    log_path: PathBuf,
    // Last field: dropped after `Drop::drop` has killed the child.
    dir: TempDir,
}

enum NotReady {
    Exited(ExitStatus),
    Timeout,
}

fn binary() -> String {
    std::env::var("HOLDFAST_REDIS_SERVER").unwrap_or_else(|_| REDIS_SERVER_BIN.to_string())
}

impl RedisServer {
    /// Starts a server with the default arguments and waits for `PING`.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with `extra_args` appended after the defaults (so they
    /// can override them), e.g. `&["--maxmemory", "10mb"]`. With
    /// `--requirepass PW` among them, readiness checks and `cmd` send
    /// `AUTH PW` first (use `cmd_noauth` to see `-NOAUTH`).
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("holdfast-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("RedisServer: cannot create a temp dir: {e}"));
        let log_path = dir.path().join("redis.log");
        let password = extra_args
            .windows(2)
            .rev()
            .find(|w| w[0] == "--requirepass")
            .map(|w| w[1].to_string());
        let mut server = RedisServer {
            child: None,
            port: 0,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            password,
            log_path,
            dir,
        };
        let mut tried = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            server.port = super::free_port();
            tried.push(server.port);
            server.spawn(true);
            match server.wait_ready() {
                Ok(()) => return server,
                Err(NotReady::Exited(_))
                    if server.log_tail(50).contains("Address already in use") =>
                {
                    // Someone took the port between our probe and redis' bind: retry.
                    server.kill();
                    continue;
                }
                Err(why) => server.fail("start", why),
            }
        }
        let tail = server.log_tail(30);
        server.kill();
        panic!("RedisServer: every picked port was already in use ({tried:?}); last log:\n{tail}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"redis://127.0.0.1:PORT"`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// PID of the running child, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// True while the child has been started and has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The server's temp dir (its `--dir`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log file holding the server's stdout and stderr (all runs).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log_path) {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILLs the child (by its PID, via `Child::kill`) and reaps it.
    /// Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Err here means it had already exited; wait() reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP, by its PID): its connections stay open, and it reads,
    /// answers and acknowledges nothing until [`RedisServer::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let pid = self.pid().expect("the server is running");
        // The shell's own `kill`: a `kill` binary (procps) may not be installed.
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("kill {which} {pid}")])
            .status()
            .expect("sh runs");
        assert!(status.success(), "kill {which} {pid}");
    }

    /// Starts the server again on the same port and dir (killing the current
    /// child first if it is still running) and waits for `PING`.
    /// Data is not kept: persistence is off unless extra args turned it on.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn(false);
        if let Err(why) = self.wait_ready() {
            self.fail("restart", why);
        }
    }

    /// Runs one command over a fresh raw connection and returns the raw reply
    /// (e.g. `"+OK\r\n"`, `"$-1\r\n"`, `"-ERR ...\r\n"`) as a lossy String.
    /// Sends `AUTH` first (reply not returned) if started with `--requirepass`.
    pub fn cmd(&self, args: &[&str]) -> String {
        self.cmd_inner(args, self.password.as_deref())
    }

    /// `cmd` without the automatic `AUTH`.
    pub fn cmd_noauth(&self, args: &[&str]) -> String {
        self.cmd_inner(args, None)
    }

    fn cmd_inner(&self, args: &[&str], password: Option<&str>) -> String {
        let addr: SocketAddr = self.addr().parse().expect("loopback addr parses");
        let mut s = TcpStream::connect_timeout(&addr, CMD_TIMEOUT)
            .unwrap_or_else(|e| panic!("RedisServer::cmd {args:?}: connect to {addr} failed: {e}"));
        let _ = s.set_nodelay(true);
        s.set_read_timeout(Some(CMD_TIMEOUT))
            .expect("set_read_timeout");
        s.set_write_timeout(Some(CMD_TIMEOUT))
            .expect("set_write_timeout");
        let mut out = Vec::new();
        if let Some(pw) = password {
            out.extend_from_slice(&encode(&["AUTH", pw]));
        }
        let skip = usize::from(password.is_some());
        out.extend_from_slice(&encode(args));
        s.write_all(&out)
            .unwrap_or_else(|e| panic!("RedisServer::cmd {args:?}: write to {addr} failed: {e}"));
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let first = if skip == 1 {
                reply_len(&buf, 0)
            } else {
                Some(0)
            };
            if let Some(start) = first {
                if let Some(end) = reply_len(&buf, start) {
                    return String::from_utf8_lossy(&buf[start..end]).into_owned();
                }
            }
            match s.read(&mut chunk) {
                Ok(0) => panic!(
                    "RedisServer::cmd {args:?}: {addr} closed the connection after {:?}",
                    String::from_utf8_lossy(&buf)
                ),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!(
                    "RedisServer::cmd {args:?}: read from {addr} failed: {e} (got so far: {:?})",
                    String::from_utf8_lossy(&buf)
                ),
            }
        }
    }

    fn spawn(&mut self, truncate_log: bool) {
        assert!(
            self.child.is_none(),
            "RedisServer::spawn with a child still running"
        );
        let mut log = if truncate_log {
            File::create(&self.log_path)
        } else {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log_path)
        }
        .unwrap_or_else(|e| {
            panic!(
                "RedisServer: cannot open log {}: {e}",
                self.log_path.display()
            )
        });
        let bin = binary();
        let _ = writeln!(
            log,
            "=== test support: starting {bin} on 127.0.0.1:{} (extra args {:?}) ===",
            self.port, self.extra_args
        );
        let log_err = log.try_clone().expect("clone log file handle");
        let mut cmd = Command::new(&bin);
        cmd.arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--daemonize")
            .arg("no")
            .args(&self.extra_args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("RedisServer: cannot spawn {bin}: {e} (is the redis-server package installed?)")
        });
        self.child = Some(child);
    }

    /// Waits until PING answers +PONG *from our child* (checked by PID, so a
    /// server from another test that grabbed the port first is not mistaken
    /// for ours), the child exits, or READY_TIMEOUT passes.
    fn wait_ready(&mut self) -> Result<(), NotReady> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr: SocketAddr = self.addr().parse().expect("loopback addr parses");
        loop {
            let child = self.child.as_mut().expect("wait_ready without a child");
            if let Ok(Some(status)) = child.try_wait() {
                return Err(NotReady::Exited(status));
            }
            let pid = child.id();
            if probe(&addr, pid, self.password.as_deref()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(NotReady::Timeout);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn fail(&mut self, what: &str, why: NotReady) -> ! {
        let reason = match why {
            NotReady::Exited(status) => format!("redis-server exited early ({status})"),
            NotReady::Timeout => format!("PING did not answer +PONG within {READY_TIMEOUT:?}"),
        };
        let tail = self.log_tail(30);
        self.kill();
        panic!(
            "RedisServer::{what} on 127.0.0.1:{} failed: {reason}; log {}:\n{tail}",
            self.port,
            self.log_path.display()
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// PING, then `INFO server` to check `process_id` is our child's PID
/// (after `AUTH` when a password is set).
fn probe(addr: &SocketAddr, pid: u32, password: Option<&str>) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut out = Vec::new();
    if let Some(pw) = password {
        out.extend_from_slice(&encode(&["AUTH", pw]));
    }
    out.extend_from_slice(&encode(&["PING"]));
    out.extend_from_slice(&encode(&["INFO", "server"]));
    if s.write_all(&out).is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        // Skip the AUTH reply, if any; then PING's reply, then INFO's.
        let pong_at = if password.is_some() {
            reply_len(&buf, 0)
        } else {
            Some(0)
        };
        let info_at = pong_at.and_then(|p| reply_len(&buf, p));
        if let (Some(pong_at), Some(info_at)) = (pong_at, info_at) {
            if !buf[pong_at..].starts_with(b"+PONG\r\n") {
                return false; // e.g. -LOADING, or a wrong password
            }
            if let Some(end) = reply_len(&buf, info_at) {
                let info = String::from_utf8_lossy(&buf[info_at..end]);
                return info
                    .lines()
                    .any(|l| l.trim() == format!("process_id:{pid}"));
            }
        }
        if Instant::now() >= deadline {
            return false;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// RESP array of bulk strings.
fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// End offset of the complete reply starting at `pos`, or None if incomplete.
/// RESP2, plus the RESP3 types in case a test switched with `HELLO 3`.
fn reply_len(buf: &[u8], pos: usize) -> Option<usize> {
    let ty = *buf.get(pos)?;
    let eol = pos + 1 + buf.get(pos + 1..)?.windows(2).position(|w| w == b"\r\n")?;
    let after = eol + 2;
    let num = || -> i64 {
        std::str::from_utf8(&buf[pos + 1..eol])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "RedisServer: bad RESP header {:?}",
                    String::from_utf8_lossy(&buf[pos..eol])
                )
            })
    };
    match ty {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
        b'$' | b'!' | b'=' => {
            let n = num();
            if n < 0 {
                return Some(after);
            }
            let end = after + n as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = num();
            if n < 0 {
                return Some(after);
            }
            let elems = if ty == b'%' || ty == b'|' { 2 * n } else { n };
            let mut p = after;
            for _ in 0..elems {
                p = reply_len(buf, p)?;
            }
            if ty == b'|' {
                reply_len(buf, p)
            } else {
                Some(p)
            }
        }
        other => panic!(
            "RedisServer: unexpected RESP type byte {:?} in {:?}",
            other as char,
            String::from_utf8_lossy(&buf[..buf.len().min(512)])
        ),
    }
}
