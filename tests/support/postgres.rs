//! A real PostgreSQL server (its own `initdb`'d cluster) on a free loopback
//! port, for tests.
//!
//! Each server owns one temp dir under `/tmp`, holding the data dir (`data/`),
//! the unix socket (`unix_socket_directories` points there, so nothing is
//! shared with a system cluster) and `postgres.log` with the output of
//! `initdb` and of every postmaster run. It listens on 127.0.0.1 only, trusts
//! every local connection, has a superuser `holdfast` and a database
//! `holdfast`.
//!
//! Durability against *OS* crashes is off on purpose (`fsync=off`,
//! `full_page_writes=off`, `initdb --no-sync`): it makes initdb, commits and
//! crash recovery fast. A committed transaction is still `write()`n to the
//! WAL before the client sees the commit, so it survives `stop_immediate` (a
//! postmaster crash, not a machine crash: the OS page cache keeps it).
//! `synchronous_commit` is deliberately left `on`: with it `off`, commits of
//! the last few hundred ms sit only in postgres' shared memory and are lost
//! by `stop_immediate`, which would make restart tests lose acknowledged
//! writes.
//!
//! `initdb` and `postgres` refuse to run as root, so when the tests run as
//! root (CI) they run as the `postgres` user (`runuser -u postgres --`) and
//! the temp dir is `chown`ed to that user. The postmaster is spawned directly
//! (not daemonized by `pg_ctl start`), so this process, or `runuser` under it,
//! reaps it; its PID is read from `data/postmaster.pid`. It is stopped with
//! `pg_ctl stop -m immediate` on our own data dir, falling back to SIGKILL by
//! that PID. Nothing is ever killed by name.
//!
//! `PgServer::standby_of(&primary)` makes a hot standby streaming from a
//! running server: `pg_basebackup -R -X stream` of the primary (over the
//! `host replication all 127.0.0.1/32 trust` line that `initdb --auth=trust`
//! writes) into the standby's own temp dir, then started exactly like a
//! primary (own port, own socket dir, same flags; `standby.signal` and the
//! `primary_conninfo` in its `postgresql.auto.conf` make it a standby). It
//! is an independent `PgServer`: it is stopped by its own PID/data dir, and
//! the primary can be stopped first; `promote` then turns it into a primary.
//! No replication slot is used: at test scale the primary keeps its WAL
//! around long enough (`max_wal_size` is 1GB) for the standby to catch up.
//!
//! All methods are blocking (std I/O); calling them from a
//! `#[tokio::test(flavor = "multi_thread")]` test is fine.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Directory holding one dir per installed major version (`15/bin/initdb`, ...).
pub const PG_LIB_DIR: &str = "/usr/lib/postgresql";
/// Superuser created by `initdb`, and the database created by `start`.
pub const PG_USER: &str = "holdfast";
pub const PG_DATABASE: &str = "holdfast";
/// OS user that runs `initdb`/`postgres` when the tests run as root.
pub const PG_OS_USER: &str = "postgres";
/// How long `start`/`start_again` wait for the server to accept connections.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stop waits for the postmaster to be gone before SIGKILLing it.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// `connect_timeout` for `psql`/`pg_isready`.
const CONNECT_TIMEOUT_SECS: &str = "10";
/// How long `promote` waits for the standby to leave recovery.
pub const PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts with a fresh port if the picked port was taken before postgres bound it.
const PORT_ATTEMPTS: usize = 5;

pub struct PgServer {
    /// The postmaster itself, or `runuser` running it (when we are root).
    child: Option<Child>,
    /// The postmaster's PID (from `postmaster.pid`), once it was ready.
    postmaster_pid: Option<u32>,
    port: u16,
    bin_dir: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    // Last field: dropped after `Drop::drop` has stopped the server.
    dir: TempDir,
}

enum NotReady {
    Exited(ExitStatus),
    Timeout,
}

/// True if an `initdb` binary was found (see `bin_dir`).
pub fn available() -> bool {
    bin_dir().is_some_and(|d| d.join("initdb").is_file())
}

/// The directory with `initdb`, `postgres` and `pg_ctl`: `HF_PG_BINDIR`
/// if set, else the highest `/usr/lib/postgresql/<version>/bin` that has
/// `initdb`, else the real directory behind `/usr/local/bin/initdb`.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HF_PG_BINDIR") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(PG_LIB_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let key: Vec<u32> = name
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((key, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::fs::canonicalize("/usr/local/bin/initdb")
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// Effective UID of this process is 0.
fn running_as_root() -> bool {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
            // "Uid: real effective saved fs"
            return line.split_whitespace().nth(2) == Some("0");
        }
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn runuser_bin() -> &'static str {
    ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("runuser")
}

/// Removes every `PG*` variable (PGHOST, PGPORT, PGDATA, PGOPTIONS, ...) so the
/// environment of the test run cannot redirect or alter our commands.
fn clear_pg_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
}

/// State of a live process from `/proc/PID/stat`: `Some((state, ppid))`, or
/// None if there is no such process.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may contain spaces and parens.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The process exists and is not a zombie.
fn alive(pid: u32) -> bool {
    matches!(proc_stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// The live processes whose parent is `parent`, from `/proc`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(
            |&pid| matches!(proc_stat(pid), Some((state, ppid)) if ppid == parent && state != 'Z'),
        )
        .collect()
}

/// Sends `which` (`-STOP`, `-CONT`) to `pids`, by PID, with the shell's own `kill` (a `kill`
/// binary may not be installed). A process that exited meanwhile is not an error.
fn signal(which: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let _ = Command::new("sh")
        .args([
            "-c",
            &format!("kill {which} {} 2>/dev/null", list.join(" ")),
        ])
        .status();
}

/// The server binaries directory, or a panic explaining that PostgreSQL is
/// not installed.
fn required_bin_dir() -> PathBuf {
    let bin_dir = bin_dir().unwrap_or_else(|| {
        panic!(
            "PgServer: no PostgreSQL server binaries found (looked in \
             {PG_LIB_DIR}/*/bin and /usr/local/bin; set HF_PG_BINDIR); \
             is the postgresql package installed?"
        )
    });
    if !bin_dir.join("initdb").is_file() {
        panic!(
            "PgServer: {} does not exist (is the postgresql package installed?)",
            bin_dir.join("initdb").display()
        );
    }
    bin_dir
}

impl PgServer {
    /// `initdb`s a fresh cluster, starts it on a free port, waits until it
    /// accepts connections and creates the database `holdfast`.
    pub fn start() -> PgServer {
        let mut server = PgServer::new_in_temp_dir(required_bin_dir(), "holdfast-pg-");
        server.initdb();
        server.spawn_on_free_port("start");
        server.psql_db("postgres", &format!("CREATE DATABASE {PG_DATABASE}"));
        server
    }

    /// `start`, speaking TLS with `cert` and `key` (PEM), with a user `app` that may log in
    /// only over TLS and only with SCRAM-SHA-256 `password`, owning the database `holdfast`
    /// (`PG_USER` keeps trust, for the test's own psql).
    pub fn start_secure(cert: &Path, key: &Path, password: &str) -> PgServer {
        let mut server = PgServer::new_in_temp_dir(required_bin_dir(), "holdfast-pg-tls-");
        server.initdb();
        let (crt, pem) = (
            server.dir.path().join("server.crt"),
            server.dir.path().join("server.key"),
        );
        std::fs::copy(cert, &crt).expect("copy the server certificate");
        std::fs::copy(key, &pem).expect("copy the server key");
        // PostgreSQL refuses a key others may read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if running_as_root() {
            let out = Command::new("chown")
                .arg(format!("{PG_OS_USER}:{PG_OS_USER}"))
                .arg(&crt)
                .arg(&pem)
                .output()
                .expect("run chown");
            assert!(out.status.success(), "chown of the TLS files failed");
        }
        // First match wins: `app` over TLS with a password, never in clear text.
        let hba = server.data_dir.join("pg_hba.conf");
        let old = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        let lines =
            "hostnossl all app 127.0.0.1/32 reject\nhostssl all app 127.0.0.1/32 scram-sha-256\n";
        std::fs::write(&hba, format!("{lines}{old}")).expect("write pg_hba.conf");
        let mut conf = OpenOptions::new()
            .append(true)
            .open(server.data_dir.join("postgresql.conf"))
            .expect("open postgresql.conf");
        writeln!(
            conf,
            "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\npassword_encryption = 'scram-sha-256'",
            crt.display(),
            pem.display()
        )
        .expect("append to postgresql.conf");
        server.spawn_on_free_port("start_secure");
        let quoted = password.replace('\'', "''");
        server.psql_db(
            "postgres",
            &format!("CREATE ROLE app LOGIN PASSWORD '{quoted}'"),
        );
        server.psql_db(
            "postgres",
            &format!("CREATE DATABASE {PG_DATABASE} OWNER app"),
        );
        server
    }

    /// A hot standby of `primary`, streaming from it: `pg_basebackup -R -X
    /// stream` of the primary (which writes `standby.signal` and
    /// `primary_conninfo`) into the data dir of a new temp dir, started like
    /// the primary on its own free 127.0.0.1 port. Waits until it accepts
    /// connections, `pg_is_in_recovery()` is true and its WAL receiver is
    /// streaming from the primary.
    pub fn standby_of(primary: &PgServer) -> PgServer {
        assert!(
            primary.is_running(),
            "PgServer::standby_of: the primary on 127.0.0.1:{} is not running",
            primary.port
        );
        let mut standby =
            PgServer::new_in_temp_dir(primary.bin_dir.clone(), "holdfast-pg-standby-");
        standby.base_backup_from(primary);
        standby.spawn_on_free_port("standby_of");

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            // Both in one query: `status` is NULL until the WAL receiver runs.
            let (ok, row) = standby.try_psql(
                "SELECT pg_is_in_recovery(), \
                 (SELECT status FROM pg_stat_wal_receiver)",
            );
            if ok && row == "t|streaming" {
                return standby;
            }
            if Instant::now() >= deadline {
                let tail = standby.log_tail(30);
                let _ = standby.stop_inner();
                panic!(
                    "PgServer::standby_of on 127.0.0.1:{}: not a streaming standby of \
                     127.0.0.1:{} within {READY_TIMEOUT:?} (last `pg_is_in_recovery|\
                     wal receiver status`: {row:?}); log {}:\n{tail}",
                    standby.port,
                    primary.port,
                    standby.log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Promotes a standby (`pg_ctl promote -w`) and waits until
    /// `pg_is_in_recovery()` is false. Works with the primary gone. Panics
    /// with the log tail if that takes more than PROMOTE_TIMEOUT.
    pub fn promote(&self) {
        let deadline = Instant::now() + PROMOTE_TIMEOUT;
        let pg_ctl = self.tool("pg_ctl");
        let out = self
            .as_pg_user(&pg_ctl)
            .arg("promote")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-w")
            .arg("-t")
            .arg(PROMOTE_TIMEOUT.as_secs().to_string())
            .output();
        let problem = match out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "pg_ctl promote failed ({}): {} {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim(),
                String::from_utf8_lossy(&o.stdout).trim()
            )),
            Err(e) => Some(format!("cannot run {}: {e}", pg_ctl.display())),
        };
        let mut last = String::new();
        if problem.is_none() {
            loop {
                let (ok, row) = self.try_psql("SELECT pg_is_in_recovery()");
                if ok && row == "f" {
                    return;
                }
                last = row;
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let reason = problem.unwrap_or_else(|| {
            format!("still in recovery {PROMOTE_TIMEOUT:?} after pg_ctl promote (last: {last:?})")
        });
        panic!(
            "PgServer::promote on 127.0.0.1:{}: {reason}; log {}:\n{}",
            self.port,
            self.log_path.display(),
            self.log_tail(30)
        );
    }

    /// `SELECT pg_is_in_recovery()`: true on a standby, false on a primary
    /// (or a promoted standby). Panics if the query fails.
    pub fn in_recovery(&self) -> bool {
        match self.psql("SELECT pg_is_in_recovery()").as_str() {
            "t" => true,
            "f" => false,
            other => panic!(
                "PgServer::in_recovery on 127.0.0.1:{}: unexpected answer {other:?}",
                self.port
            ),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"postgres://holdfast@127.0.0.1:PORT/holdfast"` (no password: trust auth).
    pub fn url(&self) -> String {
        format!("postgres://{PG_USER}@127.0.0.1:{}/{PG_DATABASE}", self.port)
    }

    /// The postmaster's PID while it is running (None after a stop, or if it
    /// died on its own).
    pub fn pid(&self) -> Option<u32> {
        self.postmaster_pid.filter(|&pid| alive(pid))
    }

    /// True while the postmaster we started is running.
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// The temp dir (holds `data/`, the unix socket and `postgres.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's data dir.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The log file: `initdb` output and the server's stdout/stderr (all runs).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_since(0);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Crash-like stop: `pg_ctl stop -m immediate` (the postmaster SIGQUITs
    /// its backends and exits without a checkpoint; the next start runs crash
    /// recovery), then waits until the postmaster is gone, so the port is
    /// free. Does nothing if it is not running.
    pub fn stop_immediate(&mut self) {
        if let Err(e) = self.stop_inner() {
            let tail = self.log_tail(30);
            panic!(
                "PgServer::stop_immediate on 127.0.0.1:{}: {e}; log {}:\n{tail}",
                self.port,
                self.log_path.display()
            );
        }
    }

    /// Starts the same data dir on the same port again (stopping it first,
    /// immediately, if it is still running) and waits until it accepts
    /// connections. Panics if the port was taken meanwhile.
    pub fn start_again(&mut self) {
        self.stop_immediate();
        self.spawn();
        if let Err(why) = self.wait_ready() {
            self.fail("start_again", why);
        }
    }

    /// Freezes the server: SIGSTOP to the postmaster, then to every process it forked
    /// (backends, walwriter, ...), found by their parent PID in `/proc`. The postmaster
    /// goes first so it forks nothing new meanwhile. Sockets stay open and the kernel still
    /// accepts connections, but nothing is read, answered or acknowledged until [`thaw`].
    ///
    /// [`thaw`]: PgServer::thaw
    pub fn freeze(&self) {
        let pid = self.pid().expect("PgServer::freeze: the server is running");
        signal("-STOP", &[pid]);
        signal("-STOP", &children(pid));
    }

    /// Lets a frozen server go on (SIGCONT to its children, then to the postmaster).
    pub fn thaw(&self) {
        if let Some(pid) = self.pid() {
            signal("-CONT", &children(pid));
            signal("-CONT", &[pid]);
        }
    }

    /// Kills the server as a crash would: SIGKILL to the postmaster and to every process it
    /// forked, by PID, then waits until they are gone. [`start_again`] brings it back.
    ///
    /// [`start_again`]: PgServer::start_again
    pub fn crash(&mut self) {
        let Some(pid) = self.pid() else {
            return;
        };
        let forked = children(pid);
        signal("-KILL", &[pid]);
        signal("-KILL", &forked);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.postmaster_pid = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while forked
            .iter()
            .any(|&p| matches!(proc_stat(p), Some((state, _)) if state != 'Z'))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `stop_immediate`, sleep `pause` (the outage), `start_again`.
    pub fn restart_after(&mut self, pause: Duration) {
        self.stop_immediate();
        std::thread::sleep(pause);
        self.start_again();
    }

    /// Runs `psql -X -At -v ON_ERROR_STOP=1 -c SQL` against database
    /// `holdfast` and returns its trimmed stdout: unaligned tuples-only rows
    /// (`|`-separated columns, one row a line), or the command tag (e.g.
    /// `INSERT 0 1`) for statements without rows. Panics with stderr on failure.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_db(PG_DATABASE, sql)
    }

    /// `psql` against another database of this server (e.g. `postgres`).
    pub fn psql_db(&self, db: &str, sql: &str) -> String {
        let bin = self.tool("psql");
        let mut cmd = Command::new(&bin);
        clear_pg_env(&mut cmd);
        cmd.env("PGCONNECT_TIMEOUT", CONNECT_TIMEOUT_SECS)
            .arg("-X")
            .arg("-At")
            .arg("-v")
            .arg("ON_ERROR_STOP=1")
            .arg("-h")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-U")
            .arg(PG_USER)
            .arg("-d")
            .arg(db)
            .arg("-c")
            .arg(sql)
            .stdin(Stdio::null());
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("PgServer::psql: cannot run {}: {e}", bin.display()));
        if !out.status.success() {
            panic!(
                "PgServer::psql {sql:?} on db {db:?} at 127.0.0.1:{} failed ({}):\n\
                 stderr: {}\nstdout: {}",
                self.port,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `bin_dir/NAME` if it exists, else `NAME` (looked up on PATH).
    fn tool(&self, name: &str) -> PathBuf {
        let p = self.bin_dir.join(name);
        if p.is_file() {
            p
        } else {
            PathBuf::from(name)
        }
    }

    /// A command running `program` as the postgres OS user if we are root,
    /// else as ourselves, in the temp dir, without PG* variables.
    fn as_pg_user(&self, program: &Path) -> Command {
        let mut cmd = if running_as_root() {
            let mut c = Command::new(runuser_bin());
            c.arg("-u").arg(PG_OS_USER).arg("--").arg(program);
            c
        } else {
            Command::new(program)
        };
        clear_pg_env(&mut cmd);
        cmd.current_dir(self.dir.path()).stdin(Stdio::null());
        cmd
    }

    fn open_log(&self) -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| {
                panic!("PgServer: cannot open log {}: {e}", self.log_path.display())
            })
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// The log from byte `offset` on (lossy UTF-8).
    fn log_since(&self, offset: u64) -> String {
        let bytes = std::fs::read(&self.log_path).unwrap_or_default();
        let start = (offset as usize).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// A server that is not running yet: a new temp dir under `/tmp` (owned by
    /// the postgres user when we are root) with an empty log; the data dir
    /// does not exist yet.
    fn new_in_temp_dir(bin_dir: PathBuf, prefix: &str) -> PgServer {
        // Under /tmp rather than $TMPDIR: every parent must be traversable by
        // the postgres user, and the socket path must stay short (< 108 bytes).
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .unwrap_or_else(|e| panic!("PgServer: cannot create a temp dir in /tmp: {e}"));
        let data_dir = dir.path().join("data");
        let log_path = dir.path().join("postgres.log");
        File::create(&log_path)
            .unwrap_or_else(|e| panic!("PgServer: cannot create {}: {e}", log_path.display()));
        let server = PgServer {
            child: None,
            postmaster_pid: None,
            port: 0,
            bin_dir,
            data_dir,
            log_path,
            dir,
        };
        if running_as_root() {
            let out = Command::new("chown")
                .arg("-R")
                .arg(format!("{PG_OS_USER}:{PG_OS_USER}"))
                .arg(server.dir.path())
                .output()
                .unwrap_or_else(|e| panic!("PgServer: cannot run chown: {e}"));
            if !out.status.success() {
                panic!(
                    "PgServer: chown -R {PG_OS_USER}:{PG_OS_USER} {} failed ({}): {} \
                     (does the `{PG_OS_USER}` user exist?)",
                    server.dir.path().display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        server
    }

    /// Starts the (existing) data dir on a free port and waits until it
    /// accepts connections, retrying with another port if postgres found the
    /// picked one taken. Panics (after stopping it) on failure.
    fn spawn_on_free_port(&mut self, what: &str) {
        let mut tried = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            self.port = super::free_port();
            tried.push(self.port);
            let log_offset = self.log_len();
            self.spawn();
            match self.wait_ready() {
                Ok(()) => return,
                Err(NotReady::Exited(_))
                    if self
                        .log_since(log_offset)
                        .contains("Address already in use") =>
                {
                    // Someone took the port between our probe and postgres' bind: retry.
                    let _ = self.stop_inner();
                    continue;
                }
                Err(why) => self.fail(what, why),
            }
        }
        let tail = self.log_tail(30);
        let _ = self.stop_inner();
        panic!("PgServer: every picked port was already in use ({tried:?}); last log:\n{tail}");
    }

    /// `pg_basebackup` of `primary` into our (not yet existing) data dir, as
    /// the postgres user: `-R` writes `standby.signal` and `primary_conninfo`
    /// (to `postgresql.auto.conf`), `-X stream` includes the WAL needed to
    /// make the copy consistent, `-c fast` does not wait for a spread
    /// checkpoint. Uses the primary's `host replication all 127.0.0.1/32
    /// trust` line, which `initdb --auth=trust` writes.
    fn base_backup_from(&self, primary: &PgServer) {
        let mut log = self.open_log();
        let bin = self.tool("pg_basebackup");
        let _ = writeln!(
            log,
            "=== test support: {} of 127.0.0.1:{} into {} ===",
            bin.display(),
            primary.port,
            self.data_dir.display()
        );
        let log_err = log.try_clone().expect("clone log file handle");
        let status = self
            .as_pg_user(&bin)
            .env("PGCONNECT_TIMEOUT", CONNECT_TIMEOUT_SECS)
            .arg("-h")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(primary.port.to_string())
            .arg("-U")
            .arg(PG_USER)
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-R")
            .arg("-X")
            .arg("stream")
            .arg("-c")
            .arg("fast")
            .arg("--no-sync")
            .arg("--no-password")
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .status()
            .unwrap_or_else(|e| panic!("PgServer: cannot run {}: {e}", bin.display()));
        if !status.success() {
            panic!(
                "PgServer::standby_of: pg_basebackup of 127.0.0.1:{} failed ({status}); \
                 log {}:\n{}\nprimary log {}:\n{}",
                primary.port,
                self.log_path.display(),
                self.log_tail(30),
                primary.log_path.display(),
                primary.log_tail(15)
            );
        }
    }

    /// Like `psql`, but returns `(success, trimmed stdout or stderr)` instead
    /// of panicking.
    fn try_psql(&self, sql: &str) -> (bool, String) {
        let bin = self.tool("psql");
        let mut cmd = Command::new(&bin);
        clear_pg_env(&mut cmd);
        let out = cmd
            .env("PGCONNECT_TIMEOUT", CONNECT_TIMEOUT_SECS)
            .arg("-X")
            .arg("-At")
            .arg("-v")
            .arg("ON_ERROR_STOP=1")
            .arg("-h")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-U")
            .arg(PG_USER)
            .arg("-d")
            .arg(PG_DATABASE)
            .arg("-c")
            .arg(sql)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {
                (true, String::from_utf8_lossy(&o.stdout).trim().to_string())
            }
            Ok(o) => (false, String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => (false, format!("cannot run {}: {e}", bin.display())),
        }
    }

    fn initdb(&self) {
        let mut log = self.open_log();
        let bin = self.tool("initdb");
        let _ = writeln!(
            log,
            "=== test support: {} -D {} ===",
            bin.display(),
            self.data_dir.display()
        );
        let log_err = log.try_clone().expect("clone log file handle");
        let mut cmd = self.as_pg_user(&bin);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("--auth=trust")
            .arg("-U")
            .arg(PG_USER)
            .arg("--no-sync")
            // C collation and UTF8 whatever the test environment's LANG is
            // (initdb fails on a locale that is not installed).
            .arg("--no-locale")
            .arg("--encoding=UTF8")
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("PgServer: cannot run {}: {e}", bin.display()));
        if !status.success() {
            panic!(
                "PgServer: initdb failed ({status}); log {}:\n{}",
                self.log_path.display(),
                self.log_tail(30)
            );
        }
    }

    fn spawn(&mut self) {
        assert!(
            self.child.is_none(),
            "PgServer::spawn with a postmaster still running"
        );
        self.postmaster_pid = None;
        let mut log = self.open_log();
        let bin = self.tool("postgres");
        let _ = writeln!(
            log,
            "=== test support: starting {} -D {} on 127.0.0.1:{} ===",
            bin.display(),
            self.data_dir.display(),
            self.port
        );
        let log_err = log.try_clone().expect("clone log file handle");
        let mut cmd = self.as_pg_user(&bin);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("-c")
            .arg("listen_addresses=127.0.0.1")
            .arg("-c")
            .arg(format!("port={}", self.port))
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            // Speed over OS-crash durability; synchronous_commit stays on so
            // acknowledged commits survive stop_immediate (see the module doc).
            .arg("-c")
            .arg("fsync=off")
            .arg("-c")
            .arg("full_page_writes=off")
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "PgServer: cannot spawn {}: {e} (is the postgresql package installed?)",
                bin.display()
            )
        });
        self.child = Some(child);
    }

    /// The postmaster PID from `postmaster.pid` once that file says it is
    /// ready on our port, and the PID is our child (or `runuser`'s child, when
    /// we are root): a stale file from a killed run is not mistaken for a
    /// live server.
    fn ready_pid_from_file(&self, child_pid: u32) -> Option<u32> {
        let text = std::fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        // 1: pid, 4: port, 8: status ("starting", "ready", "stopping", ...;
        // "standby" on a hot standby accepting connections).
        let pid: u32 = lines.first()?.trim().parse().ok()?;
        let port: u16 = lines.get(3)?.trim().parse().ok()?;
        let status = lines.get(7)?.trim();
        if port != self.port || (status != "ready" && status != "standby") {
            return None;
        }
        let (state, ppid) = proc_stat(pid)?;
        let ours = pid == child_pid || ppid == child_pid;
        (ours && state != 'Z').then_some(pid)
    }

    /// Waits until `postmaster.pid` says our postmaster is ready, a TCP
    /// connect to the port succeeds and `pg_isready` (if installed) agrees;
    /// or the child exits, or READY_TIMEOUT passes.
    fn wait_ready(&mut self) -> Result<(), NotReady> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr: SocketAddr = self.addr().parse().expect("loopback addr parses");
        let pg_isready = self.tool("pg_isready");
        let have_pg_isready = pg_isready.is_file();
        loop {
            let child = self.child.as_mut().expect("wait_ready without a child");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(NotReady::Exited(status));
            }
            let child_pid = child.id();
            if let Some(pid) = self.ready_pid_from_file(child_pid) {
                let tcp_ok = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok();
                let isready_ok = tcp_ok
                    && (!have_pg_isready || {
                        let mut cmd = Command::new(&pg_isready);
                        clear_pg_env(&mut cmd);
                        cmd.arg("-q")
                            .arg("-h")
                            .arg("127.0.0.1")
                            .arg("-p")
                            .arg(self.port.to_string())
                            .arg("-U")
                            .arg(PG_USER)
                            .arg("-d")
                            .arg("postgres")
                            .arg("-t")
                            .arg("2")
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status()
                            .map(|s| s.success())
                            .unwrap_or(false)
                    });
                if isready_ok {
                    self.postmaster_pid = Some(pid);
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(NotReady::Timeout);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the postmaster if running; never panics (used by Drop). Err
    /// describes what went wrong, after the fallback SIGKILL if needed.
    fn stop_inner(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            self.postmaster_pid = None;
            return Ok(());
        };
        let child_pid = child.id();
        // The postmaster: ours from wait_ready, or (if it never got ready)
        // whatever our data dir's postmaster.pid names, if it is our child.
        let pm_pid = self.postmaster_pid.take().or_else(|| {
            let text = std::fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
            let pid: u32 = text.lines().next()?.trim().parse().ok()?;
            let (_, ppid) = proc_stat(pid)?;
            (pid == child_pid || ppid == child_pid).then_some(pid)
        });
        if let Ok(Some(_)) = child.try_wait() {
            return Ok(()); // already exited (and now reaped)
        }

        let mut problem = None;
        let pg_ctl = self.tool("pg_ctl");
        let out: std::io::Result<Output> = self
            .as_pg_user(&pg_ctl)
            .arg("stop")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-m")
            .arg("immediate")
            .arg("-w")
            .arg("-t")
            .arg(STOP_TIMEOUT.as_secs().to_string())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                problem = Some(format!(
                    "pg_ctl stop -m immediate failed ({}): {} {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim(),
                    String::from_utf8_lossy(&o.stdout).trim()
                ))
            }
            Err(e) => problem = Some(format!("cannot run {}: {e}", pg_ctl.display())),
        }

        // pg_ctl -w returns once postmaster.pid is gone; wait for the process
        // itself (and `runuser` above it) to exit too, so the port is free.
        let deadline = Instant::now()
            + if problem.is_some() {
                Duration::from_secs(2)
            } else {
                STOP_TIMEOUT
            };
        let exited = loop {
            match child.try_wait() {
                Ok(Some(_)) => break true,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => break false,
            }
        };
        if exited {
            // Gone, which is what was asked, even if pg_ctl complained (e.g.
            // the postmaster died on its own while pg_ctl ran).
            return Ok(());
        }

        // Fallback: SIGKILL the postmaster by PID (only if it is still our
        // child's process), then our child.
        if let Some(pid) = pm_pid {
            if matches!(proc_stat(pid), Some((_, ppid)) if pid == child_pid || ppid == child_pid) {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(problem.unwrap_or_else(|| {
            format!("postmaster still running {STOP_TIMEOUT:?} after pg_ctl stop")
        }) + "; SIGKILLed it by PID")
    }

    fn fail(&mut self, what: &str, why: NotReady) -> ! {
        let reason = match why {
            NotReady::Exited(status) => format!("postgres exited early ({status})"),
            NotReady::Timeout => {
                format!("server did not accept connections within {READY_TIMEOUT:?}")
            }
        };
        let tail = self.log_tail(30);
        let _ = self.stop_inner();
        panic!(
            "PgServer::{what} on 127.0.0.1:{} failed: {reason}; log {}:\n{tail}",
            self.port,
            self.log_path.display()
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}
