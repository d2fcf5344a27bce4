//! Each backend's health as an operator reads it in the log: one line when a backend goes
//! down (its address and the cause, in words), one when it is back (how long it was down),
//! not one per request. The health probe feeds it (`http::probe`: at start, every 5 s, and at
//! each `/backendz`), one backend at a time, so a burst of failing requests cannot make it
//! flap.
//!
//! A backend that cannot work as configured ([`misconfigured`]: a host that does not
//! resolve, a refused password, a file SQLite cannot open) is logged at ERROR, at start and
//! again whenever its cause changes; one that is merely unreachable (refused, reset, no
//! answer in time) at WARN, once per outage. Back up is INFO.

use crate::error::{BackendError, LinkErrorKind};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// It answered.
    Up,
    /// It did not, for `cause`.
    Down(Down),
}

/// Why a backend is down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    /// True when waiting will not heal it ([`misconfigured`]).
    pub misconfigured: bool,
    /// The failure and its sources, in words.
    pub cause: String,
}

impl Seen {
    /// What a probe's result says.
    pub fn of(result: &Result<(), BackendError>) -> Seen {
        match result {
            Ok(()) => Seen::Up,
            Err(e) => Seen::Down(Down {
                misconfigured: misconfigured(e),
                cause: crate::error::in_words(e),
            }),
        }
    }
}

/// A line to log: what changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// It went down, or its cause changed to one that needs a line of its own.
    Down(Down),
    /// It is back, after `Duration` down.
    Up(Duration),
}

/// What a probe that `seen` this changes, after what the last line said (`was`: down since,
/// and why; None: up, or not probed yet). The rule, as the table test reads it:
///
/// - up, or first probe, and up: nothing (the start-up summary names every backend);
/// - up and down: a down line;
/// - down and up: an up line with how long;
/// - down and down: nothing, unless the cause turned from unreachable to misconfigured or
///   back, or a misconfigured backend's cause changed (each such change is an ERROR line).
pub fn change(was: Option<&(Instant, Down)>, seen: &Seen, now: Instant) -> Option<Change> {
    match (was, seen) {
        (None, Seen::Up) => None,
        (None, Seen::Down(down)) => Some(Change::Down(down.clone())),
        (Some((since, _)), Seen::Up) => Some(Change::Up(now.saturating_duration_since(*since))),
        (Some((_, before)), Seen::Down(down)) => {
            let other_kind = before.misconfigured != down.misconfigured;
            let other_cause = down.misconfigured && before.cause != down.cause;
            (other_kind || other_cause).then(|| Change::Down(down.clone()))
        }
    }
}

/// Whether `error` says the backend cannot work as it is configured, so waiting will not
/// heal it: a host that does not resolve, a refused password, a database that does not exist
/// or a file SQLite cannot open. This log reports these at ERROR,
/// an unreachable backend at WARN. From typed codes, as `error::classify`.
pub fn misconfigured(error: &BackendError) -> bool {
    match error {
        BackendError::Connect { source } => matches!(
            source.kind(),
            LinkErrorKind::Auth
                | LinkErrorKind::Config
                | LinkErrorKind::NotFound
                | LinkErrorKind::Unresolved
        ),
        BackendError::Sql { source, .. } => match source {
            sqlx::Error::Configuration(_) => true,
            sqlx::Error::Database(db) => db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some_and(|pg| pg.code().starts_with("28") || pg.code() == "3D000"),
            _ => false,
        },
        BackendError::Lite {
            source: rusqlite::Error::SqliteFailure(failure, _),
            ..
        } => matches!(
            i64::from(failure.extended_code) & 0xff,
            SQLITE_PERM | SQLITE_READONLY | SQLITE_CANTOPEN | SQLITE_AUTH | SQLITE_NOTADB
        ),
        BackendError::Shared(inner) => misconfigured(inner),
        _ => false,
    }
}

/// SQLite result codes (primary) that say a file cannot be used as configured.
const SQLITE_PERM: i64 = 3;
const SQLITE_READONLY: i64 = 8;
const SQLITE_CANTOPEN: i64 = 14;
const SQLITE_AUTH: i64 = 23;
const SQLITE_NOTADB: i64 = 26;

/// Every backend's last logged state, by name.
#[derive(Default)]
pub struct Health {
    down: Mutex<HashMap<String, (Instant, Down)>>,
}

impl Health {
    /// Records what a probe of backend `name` (at `address`) found, and logs a change.
    pub fn observe(&self, name: &str, address: &str, result: &Result<(), BackendError>) {
        let seen = Seen::of(result);
        let now = Instant::now();
        let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        let Some(changed) = change(down.get(name), &seen, now) else {
            return;
        };
        match changed {
            Change::Up(after) => {
                down.remove(name);
                tracing::info!(
                    backend = name,
                    address,
                    down_for_s = (after.as_secs_f64() * 10.0).round() / 10.0,
                    "backend up"
                );
            }
            Change::Down(why) => {
                if why.misconfigured {
                    tracing::error!(
                        backend = name,
                        address,
                        cause = why.cause.as_str(),
                        "backend cannot work as configured"
                    );
                } else {
                    tracing::warn!(
                        backend = name,
                        address,
                        cause = why.cause.as_str(),
                        "backend down"
                    );
                }
                // Down since the first line of the outage: a change of cause keeps it.
                let since = down.get(name).map_or(now, |(since, _)| *since);
                down.insert(name.to_string(), (since, why));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down(misconfigured: bool, cause: &str) -> Seen {
        Seen::Down(Down {
            misconfigured,
            cause: cause.to_string(),
        })
    }

    #[test]
    fn one_line_per_change_of_state() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(10);
        let refused = Down {
            misconfigured: false,
            cause: "refused".to_string(),
        };
        let unknown_host = Down {
            misconfigured: true,
            cause: "no such host".to_string(),
        };
        let was_refused = Some((t0, refused.clone()));
        let was_unknown = Some((t0, unknown_host.clone()));
        type Row = (Option<(Instant, Down)>, Seen, Option<Change>);
        let table: Vec<Row> = vec![
            // Up stays quiet; the first failure is a line.
            (None, Seen::Up, None),
            (
                None,
                down(false, "refused"),
                Some(Change::Down(refused.clone())),
            ),
            (
                None,
                down(true, "no such host"),
                Some(Change::Down(unknown_host.clone())),
            ),
            // Down, then up: how long it was down.
            (
                was_refused.clone(),
                Seen::Up,
                Some(Change::Up(Duration::from_secs(10))),
            ),
            // Still down for the same reason, or another unreachable one: quiet.
            (was_refused.clone(), down(false, "refused"), None),
            (was_refused.clone(), down(false, "reset"), None),
            // Unreachable turned misconfigured, and back: a line each.
            (
                was_refused,
                down(true, "no such host"),
                Some(Change::Down(unknown_host)),
            ),
            (
                was_unknown.clone(),
                down(false, "refused"),
                Some(Change::Down(refused)),
            ),
            // A misconfigured backend whose cause changed: a line; the same cause: quiet.
            (was_unknown.clone(), down(true, "no such host"), None),
            (
                was_unknown,
                down(true, "bad password"),
                Some(Change::Down(Down {
                    misconfigured: true,
                    cause: "bad password".to_string(),
                })),
            ),
        ];
        for (was, seen, want) in table {
            assert_eq!(
                change(was.as_ref(), &seen, later),
                want,
                "{was:?} then {seen:?}"
            );
        }
    }

    #[test]
    fn an_outage_keeps_its_start_through_a_change_of_cause() {
        let health = Health::default();
        let refused = Err(BackendError::Unsupported {
            what: "refused".to_string(),
        });
        health.observe("db", "here", &refused);
        let first = health.down.lock().unwrap().get("db").map(|(t, _)| *t);
        health.observe("db", "here", &refused);
        assert_eq!(
            health.down.lock().unwrap().get("db").map(|(t, _)| *t),
            first
        );
        let cause = |h: &Health| {
            h.down
                .lock()
                .unwrap()
                .get("db")
                .map(|(_, d)| d.cause.clone())
        };
        assert_eq!(cause(&health).as_deref(), Some("refused"));
        health.observe("db", "here", &Ok(()));
        assert_eq!(cause(&health), None);
    }

    /// What the health log calls a configuration to check (ERROR) rather than an outage
    /// (WARN); an unresolved host is both retried and reported as one.
    #[test]
    fn misconfigured_is_what_waiting_will_not_heal() {
        let connect = |kind| BackendError::Connect {
            source: crate::error::LinkError::new(kind, "x"),
        };
        for kind in [
            LinkErrorKind::Auth,
            LinkErrorKind::Config,
            LinkErrorKind::NotFound,
            LinkErrorKind::Unresolved,
        ] {
            assert!(misconfigured(&connect(kind)), "{kind:?}");
        }
        for kind in [
            LinkErrorKind::Io,
            LinkErrorKind::Timeout,
            LinkErrorKind::Protocol,
        ] {
            assert!(!misconfigured(&connect(kind)), "{kind:?}");
        }
        assert_eq!(
            crate::error::classify(&connect(LinkErrorKind::Unresolved)),
            crate::error::ErrorClass::NotAttempted
        );
        assert!(!misconfigured(&BackendError::reply(
            bytes::Bytes::from_static(b"LOADING loading")
        )));
        let cantopen = BackendError::Lite {
            stage: crate::error::SqlStage::Connect,
            source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(14), None),
        };
        assert!(misconfigured(&cantopen));
        let busy = BackendError::Lite {
            stage: crate::error::SqlStage::Work,
            source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(5), None),
        };
        assert!(!misconfigured(&busy));
    }
}
