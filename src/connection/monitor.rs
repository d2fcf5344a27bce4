//! `MONITOR` over holdfast's own traffic: every command a client sends, as holdfast received
//! it, in Redis's format (`+1733400000.123456 [0 127.0.0.1:52000] "set" "k" "v"`), to each
//! client that asked. Admin-only where `[[users]]` exist (the admin rule, `auth.rs`). The
//! feed is a broadcast channel of bounded size (`shared::MonitorFeed`): a monitor that does
//! not read keeps up to `shared::MONITOR_BACKLOG` lines, then is closed (counted as the `monitor_backlog` limit), as Redis closes
//! one past its output buffer limit. Passwords are not shown: `AUTH` and `HELLO … AUTH` are
//! fed as `(redacted)`, as Redis does.
//!
//! In monitor mode a client may send `QUIT` and `RESET` (which leaves it); anything else is
//! refused.

use super::{simple, ClientConn};
use crate::command::Command;
use crate::resp::{Output, Sink};
use bytes::Bytes;
use std::fmt::Write as _;
use std::sync::Arc;
use tokio::sync::broadcast;

/// A client's monitor mode: its receiver, owned (the feed lives in `Shared`, which it holds).
pub struct Monitoring {
    lines: broadcast::Receiver<Arc<str>>,
    shared: Arc<crate::shared::Shared>,
}

impl Drop for Monitoring {
    fn drop(&mut self) {
        self.shared.monitor.left();
    }
}

/// One line of the feed: when, the database, the client's address, and each argument as the
/// client sent it, quoted as Redis quotes it.
pub fn line(unix_micros: u128, addr: &str, args: &[Bytes]) -> String {
    let mut out = format!(
        "{}.{:06} [0 {addr}]",
        unix_micros / 1_000_000,
        unix_micros % 1_000_000
    );
    let redacted = args.first().is_some_and(|name| {
        name.eq_ignore_ascii_case(b"AUTH")
            || (name.eq_ignore_ascii_case(b"HELLO")
                && args.iter().any(|a| a.eq_ignore_ascii_case(b"AUTH")))
    });
    for (i, arg) in args.iter().enumerate() {
        out.push(' ');
        if i > 0 && redacted {
            out.push_str("\"(redacted)\"");
            break;
        } else {
            quote(&mut out, arg);
        }
    }
    out
}

/// `bytes` in double quotes, as Redis's `sdscatrepr`: `\\`, `\"`, `\n`, `\r`, `\t`, `\a`,
/// `\b` escaped, other unprintable bytes as `\xhh`.
fn quote(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

/// What is pushed to a client without its asking: a delivery of its subscriptions, or a line
/// of the MONITOR feed.
pub(super) enum Pushed {
    /// A message for its subscriptions (None: their channel closed).
    Delivery(Option<crate::backend::pubsub::Delivery>),
    /// A line of the feed; `Err` when it fell past the backlog (or the feed is gone).
    Line(Result<Arc<str>, ()>),
}

/// The next push for a client; never ready for one that neither subscribes nor monitors.
pub(super) async fn next_push(
    subs: &mut Option<Box<super::subscribe::Subscriptions>>,
    monitoring: &mut Option<Box<Monitoring>>,
) -> Pushed {
    let line = async {
        match monitoring {
            Some(m) => m.lines.recv().await.map_err(|_| ()),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        delivery = super::subscribe::next_delivery(subs) => Pushed::Delivery(delivery),
        line = line => Pushed::Line(line),
    }
}

impl ClientConn {
    /// Feeds `command`, as this client sent it, to the monitors, if any.
    pub(super) fn feed_monitors(&self, command: &Command) {
        let feed = &self.shared.monitor;
        // A monitor's own commands (its QUIT, RESET, a refused one) are not fed.
        if !feed.watched() || self.monitoring.is_some() {
            return;
        }
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        let addr = self.client.addr.map(|a| a.to_string()).unwrap_or_default();
        feed.send(line(micros, &addr, &command.args));
    }

    /// `MONITOR`: this client becomes one of the feed's readers.
    pub(super) fn start_monitoring(&mut self) -> redis_protocol::resp3::types::BytesFrame {
        if self.monitoring.is_none() {
            self.monitoring = Some(Box::new(Monitoring {
                lines: self.shared.monitor.join(),
                shared: self.shared.clone(),
            }));
        }
        simple("OK")
    }

    /// Writes what was pushed; false when the client is to be closed (a monitor past its
    /// backlog, counted as the `monitor_backlog` limit).
    pub(super) fn push(&mut self, pushed: Pushed, out: &mut Output) -> bool {
        match pushed {
            Pushed::Delivery(Some(delivery)) => self.deliver(delivery, out),
            Pushed::Delivery(None) => {}
            Pushed::Line(Ok(line)) => {
                out.extend_from_slice(b"+");
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Pushed::Line(Err(())) => {
                crate::metrics::limit("monitor_backlog");
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&[u8]]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
    }

    #[test]
    fn lines_as_redis_writes_them() {
        let table: &[(&[&[u8]], &str)] = &[
            (
                &[b"SET", b"k", b"v"],
                "1733400000.000042 [0 127.0.0.1:5000] \"SET\" \"k\" \"v\"",
            ),
            (
                &[b"set", b"a\"b\\c", b"line\r\n\t\x07\x08\x00\xff"],
                "1733400000.000042 [0 127.0.0.1:5000] \"set\" \"a\\\"b\\\\c\" \"line\\r\\n\\t\\a\\b\\x00\\xff\"",
            ),
            (
                &[b"AUTH", b"user", b"secret"],
                "1733400000.000042 [0 127.0.0.1:5000] \"AUTH\" \"(redacted)\"",
            ),
            (
                &[b"HELLO", b"3", b"AUTH", b"u", b"p"],
                "1733400000.000042 [0 127.0.0.1:5000] \"HELLO\" \"(redacted)\"",
            ),
            (
                &[b"HELLO", b"3"],
                "1733400000.000042 [0 127.0.0.1:5000] \"HELLO\" \"3\"",
            ),
        ];
        for (words, want) in table {
            assert_eq!(
                line(1_733_400_000_000_042, "127.0.0.1:5000", &args(words)),
                *want
            );
        }
    }
}
