//! Redis Sentinel on loopback: one `redis-server --sentinel` child per sentinel, each in its
//! own temp dir, stopped by PID when dropped.
#![allow(dead_code)]

use super::resp::RawConn;
use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One sentinel monitoring `mymaster`, quorum 2.
pub struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Monitors the master on `master_port` as `mymaster`, quorum 2.
    /// `down-after-milliseconds` below ~1500 ms flaps on a loaded 2-core machine.
    pub fn start(master_port: u16) -> Sentinel {
        Sentinel::start_with(master_port, "")
    }

    /// As [`Sentinel::start`], with `extra` lines in its configuration (TLS).
    pub fn start_with(master_port: u16, extra: &str) -> Sentinel {
        let dir = tempfile::tempdir().expect("a temp dir");
        let port = super::free_port();
        let conf = dir.path().join("sentinel.conf");
        let mut file = std::fs::File::create(&conf).expect("sentinel.conf");
        write!(
            file,
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor mymaster 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds mymaster 1500\n\
             sentinel failover-timeout mymaster 10000\n\
             sentinel parallel-syncs mymaster 1\n{extra}",
            dir.path().display()
        )
        .expect("sentinel.conf written");
        let log = std::fs::File::create(dir.path().join("sentinel.log")).expect("a log file");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel starts");
        Sentinel {
            child,
            port,
            _dir: dir,
        }
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// One command's raw reply, or None when the sentinel does not answer (yet).
    pub async fn query(&self, args: &[&str]) -> Option<String> {
        let mut conn = RawConn::try_connect(&self.addr(), Duration::from_secs(1))
            .await
            .ok()?;
        Some(String::from_utf8_lossy(&conn.command(args).await).into_owned())
    }

    /// Whether this sentinel names the master on `port`.
    pub async fn names_master(&self, port: u16) -> bool {
        self.query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
            .await
            .is_some_and(|r| r.contains(&format!("\r\n{port}\r\n")))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
