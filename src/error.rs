//! The three classes of failure, the [`BackendError`] a backend fails with (and the
//! [`SqlStage`] a database failure happened in), and `classify`, the only place that assigns
//! a class.
//!
//! The class decides what the retry policy may do (docs/failures.md, "What happens when a backend
//! fails"): NotAttempted is retried for every command, Transient only for commands that may
//! be repeated, Other never. It is read from typed facts only: which [`BackendError`] variant
//! the adapter returned (it knows whether the request had been handed to a connection),
//! a Redis connection's [`LinkErrorKind`], the first word of a Redis error reply, a PostgreSQL SQLSTATE, a SQLite
//! result code, and the stage of a SQL transaction the failure happened in. Message text is
//! never matched.

use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;
use std::borrow::Cow;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

/// What a failure says about whether the request may have been applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Failed before the backend could apply anything: always safe to retry.
    NotAttempted,
    /// May or may not have been applied: retried only for idempotent effects.
    Transient,
    /// An answer, not an outage: goes to the client as it is.
    Other,
}

impl ErrorClass {
    /// The metric and log label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::NotAttempted => "not_attempted",
            ErrorClass::Transient => "transient",
            ErrorClass::Other => "other",
        }
    }
}

/// What went wrong on one of holdfast's Redis connections, by kind: what `classify` reads
/// (with the [`BackendError`] variant that says whether the request had been sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkErrorKind {
    /// The connection failed: refused, reset, closed, or closed by holdfast.
    Io,
    /// No connection, or no reply, within its deadline.
    Timeout,
    /// The server refused holdfast's credentials (`WRONGPASS`, `NOAUTH`, `NOPERM` at the
    /// handshake): waiting will not heal it.
    Auth,
    /// The server answered something holdfast cannot use: an error reply to the handshake
    /// other than a refused password (`LOADING`, too many clients), or bytes that are no RESP.
    Protocol,
    /// The configuration cannot work as written (an address or a TLS name that does not
    /// parse).
    Config,
    /// The server says what the configuration names is not there: a master name no sentinel
    /// monitors, a `cluster` backend's node without cluster support.
    NotFound,
    /// The configured host name does not resolve. Retried like a refused connect (nothing
    /// was sent; a name may come to resolve, a Service created after its clients), but the
    /// health log reports it as a configuration to check (`backend::health::misconfigured`).
    Unresolved,
    /// The dial was cancelled before it finished.
    Canceled,
    /// An answer of an unexpected shape to a command holdfast sent itself (a `WAIT` that
    /// answered no count).
    Unexpected,
}

/// The error of holdfast's own Redis connections: a kind and what happened, with the I/O
/// error under it when there is one. Cloned when one failure answers many commands (a
/// connection that closes fails all that were in flight).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{what}")]
pub struct LinkError {
    kind: LinkErrorKind,
    what: Cow<'static, str>,
    #[source]
    source: Option<Arc<std::io::Error>>,
}

impl LinkError {
    /// An error of `kind`, saying `what`.
    pub fn new(kind: LinkErrorKind, what: impl Into<Cow<'static, str>>) -> LinkError {
        LinkError {
            kind,
            what: what.into(),
            source: None,
        }
    }

    /// A failure of `kind` while doing `what`, with the I/O error under it.
    pub fn io_of(
        kind: LinkErrorKind,
        what: impl Into<Cow<'static, str>>,
        source: std::io::Error,
    ) -> LinkError {
        LinkError {
            kind,
            what: what.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// An I/O failure while doing `what` (`connecting to 127.0.0.1:6379`).
    pub fn io(what: impl Into<Cow<'static, str>>, source: std::io::Error) -> LinkError {
        let kind = match source.kind() {
            std::io::ErrorKind::TimedOut => LinkErrorKind::Timeout,
            _ => LinkErrorKind::Io,
        };
        LinkError {
            kind,
            what: what.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> LinkErrorKind {
        self.kind
    }
}

impl From<std::io::Error> for LinkError {
    fn from(source: std::io::Error) -> LinkError {
        LinkError::io("the connection failed", source)
    }
}

/// Why a backend did not produce a reply. The variant, not the text, carries the meaning.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// No connected backend connection within the acquire timeout: nothing was sent.
    #[error("no backend connection within {waited:?}")]
    AcquireTimeout {
        /// How long the attempt waited.
        waited: Duration,
    },
    /// Connecting (or the connection handshake) failed: nothing was sent.
    #[error("cannot connect to the backend")]
    Connect {
        /// What the connection met.
        #[source]
        source: LinkError,
    },
    /// The request was handed to a connection and then failed: it may have been applied.
    #[error("the backend connection failed after the request was sent")]
    Sent {
        /// What the connection met.
        #[source]
        source: LinkError,
    },
    /// The backend answered with an error reply.
    #[error("backend replied with an error: {prefix}")]
    Reply {
        /// The first word of the reply (`WRONGTYPE`, `READONLY`, ...).
        prefix: String,
        /// The reply itself, passed to the client unchanged when it is an answer (boxed:
        /// errors travel often and should be small).
        frame: Box<Frame>,
    },
    /// A SQL database failed; the stage says whether COMMIT had been sent.
    #[error("the database failed ({stage:?})")]
    Sql {
        /// Where in the command's transaction it failed.
        stage: SqlStage,
        /// sqlx's error.
        #[source]
        source: sqlx::Error,
    },
    /// A SQLite database failed on a connection holdfast drives itself (`rusqlite`); the
    /// stage says whether COMMIT had been sent.
    #[error("the database failed ({stage:?})")]
    Lite {
        /// Where in the command's transaction it failed.
        stage: SqlStage,
        /// rusqlite's error, with SQLite's extended result code.
        #[source]
        source: rusqlite::Error,
    },
    /// A SQL operation got no answer within the backend's `response_timeout`; its connection
    /// was closed, never reused. The stage says whether COMMIT had been sent.
    #[error("no answer from the database within {waited:?} ({stage:?})")]
    SqlTimeout {
        /// Where in the command's transaction the deadline passed.
        stage: SqlStage,
        /// The deadline.
        waited: Duration,
        /// The timer's error.
        #[source]
        source: tokio::time::error::Elapsed,
    },
    /// The write was applied on the primary, but fewer replicas than required confirmed it
    /// in time: a failover may still lose it.
    #[error("the write reached {got} replicas of the {wanted} required")]
    NotReplicated {
        /// Replicas required (`min_replicas_ack`).
        wanted: u32,
        /// Replicas that confirmed it.
        got: i64,
    },
    /// The write was applied on the primary, and the `WAIT` sent after it to count its
    /// replicas failed: how many have it is unknown, and a failover may still lose it.
    #[error("the write was applied, but waiting for {wanted} replicas failed")]
    WaitFailed {
        /// Replicas required (`min_replicas_ack`).
        wanted: u32,
        /// Why `WAIT` failed.
        #[source]
        source: Box<BackendError>,
    },
    /// A key the client watched changed before its `EXEC` (SQL backends): the transaction
    /// applied nothing, and the client is answered nil, as Redis answers it.
    #[error("a watched key changed: EXEC applied nothing")]
    Watched,
    /// One failure shared by several requests (a group commit that failed as a whole).
    #[error(transparent)]
    Shared(Arc<BackendError>),
    /// The backend cannot serve this command or kind at all.
    #[error("{what}")]
    Unsupported {
        /// What is not supported.
        what: String,
    },
}

impl BackendError {
    /// An error reply with text `text` (without the leading `-`).
    pub fn reply(text: Bytes) -> BackendError {
        let prefix = error_prefix(&text);
        let frame = Frame::SimpleError {
            data: bytes_utils::Str::from_inner(text.clone()).unwrap_or_else(|_| {
                bytes_utils::Str::from(String::from_utf8_lossy(&text).into_owned())
            }),
            attributes: None,
        };
        BackendError::Reply {
            prefix,
            frame: Box::new(frame),
        }
    }

    /// Turns an error reply frame into [`BackendError::Reply`]; other frames pass.
    pub fn check_reply(frame: Frame) -> Result<Frame, BackendError> {
        let text = match &frame {
            Frame::SimpleError { data, .. } => data.as_bytes(),
            Frame::BlobError { data, .. } => data,
            _ => return Ok(frame),
        };
        let prefix = error_prefix(text);
        Err(BackendError::Reply {
            prefix,
            frame: Box::new(frame),
        })
    }
}

/// The first word of an error reply (`WRONGTYPE`, `READONLY`, ...): what `classify` reads.
fn error_prefix(text: &[u8]) -> String {
    let word = text.split(|b| *b == b' ').next().unwrap_or_default();
    String::from_utf8_lossy(word).into_owned()
}

/// Where in a command's transaction a database failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlStage {
    /// Getting a connection (connecting, migrating): nothing was sent.
    Connect,
    /// Inside the transaction, before COMMIT: the transaction is rolled back by the
    /// database if the connection dies, so nothing was applied.
    Work,
    /// COMMIT was sent and its answer did not arrive: it may have been applied.
    Commit,
}

/// Redis error-reply prefixes that mean "turned away, nothing executed".
///
/// `READONLY` is a write that reached a demoted replica; `NOREPLICAS` a write refused because
/// too few replicas are connected; `MISCONF` a write refused while the server cannot persist
/// (it heals when the disk does); the rest are the server not serving yet or right now.
///
/// `NOSCRIPT` is not here: to a client's `EVALSHA` it is an answer its library acts on at once
/// (it sends `EVAL`), and holding it would stall every scripted call after a Redis restart.
/// holdfast's own exact-mode script meets it inside the backend, which sends `EVAL` itself.
const TURNED_AWAY: &[&str] = &[
    // A Cluster node that does not own the slot runs nothing: a redirection the backend did
    // not follow (past `max_redirections`, or in a pipelined run, whose requests are
    // retried one by one, following it) is turned away like the rest.
    "MOVED",
    "ASK",
    "LOADING",
    "MASTERDOWN",
    "READONLY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "BUSY",
    "NOREPLICAS",
    "MISCONF",
];

/// Maps any failure to its class by walking the `source()` chain to the first error holdfast
/// knows; an error it does not know is Other, which is never retried.
pub fn classify(error: &(dyn StdError + 'static)) -> ErrorClass {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(backend) = e.downcast_ref::<BackendError>() {
            return classify_backend(backend);
        }
        current = e.source();
    }
    ErrorClass::Other
}

fn classify_backend(error: &BackendError) -> ErrorClass {
    match error {
        BackendError::AcquireTimeout { .. } => ErrorClass::NotAttempted,
        BackendError::Connect { source } => match source.kind() {
            // A wrong password, address or name will not heal by waiting.
            LinkErrorKind::Auth | LinkErrorKind::Config | LinkErrorKind::NotFound => {
                ErrorClass::Other
            }
            LinkErrorKind::Io
            | LinkErrorKind::Unresolved
            | LinkErrorKind::Timeout
            | LinkErrorKind::Protocol
            | LinkErrorKind::Canceled
            | LinkErrorKind::Unexpected => ErrorClass::NotAttempted,
        },
        BackendError::Sent { source } => sent_kind(source.kind()),
        BackendError::Reply { prefix, .. } => reply_prefix(prefix),
        BackendError::Unsupported { .. } | BackendError::Watched => ErrorClass::Other,
        BackendError::Sql { stage, source } => sql_error(*stage, source),
        BackendError::Lite { stage, source } => lite_error(*stage, source),
        // The connection it was cut short on is closed: before COMMIT was sent the database
        // rolls the transaction back, as for a broken connection.
        BackendError::SqlTimeout { stage, .. } => match stage {
            SqlStage::Commit => ErrorClass::Transient,
            SqlStage::Connect | SqlStage::Work => ErrorClass::NotAttempted,
        },
        BackendError::Shared(inner) => classify_backend(inner),
        // Applied, but not yet safe from a failover: in doubt, like a lost reply.
        BackendError::NotReplicated { .. } => ErrorClass::Transient,
        // Applied, whatever stopped the count: a `WAIT` not sent leaves the write in doubt
        // as much as one whose answer was lost.
        BackendError::WaitFailed { .. } => ErrorClass::Transient,
    }
}

/// An error and its sources on one line, in words (an error reply cannot hold a newline, and
/// a log line reads better without one): what a client and the log are told.
pub fn in_words(error: &(dyn StdError + 'static)) -> String {
    use std::fmt::Write as _;
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let _ = write!(text, ": {e}");
        source = e.source();
    }
    text.replace(['\r', '\n'], " ")
}

/// A database failure. One refinement applies to all of them: before COMMIT was sent, a
/// transaction that failed cannot have been applied (the database rolls back what a dying
/// connection left uncommitted), so what would be Transient there is NotAttempted.
fn sql_error(stage: SqlStage, error: &sqlx::Error) -> ErrorClass {
    let class = match error {
        // No connection was had: nothing was sent. A pool is closed while the backend moves
        // its pools to a promoted standby, and a request that met it is retried on the new.
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => ErrorClass::NotAttempted,
        sqlx::Error::Database(db) => database_code(db.as_ref()),
        // The connection broke: the request may have been sent.
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => ErrorClass::Transient,
        _ => ErrorClass::Other,
    };
    if class == ErrorClass::Transient && stage != SqlStage::Commit {
        ErrorClass::NotAttempted
    } else {
        class
    }
}

/// A SQLite failure on a connection holdfast drives itself: its result code, as through sqlx
/// (and NotAttempted before COMMIT for what would be in doubt at it).
fn lite_error(stage: SqlStage, error: &rusqlite::Error) -> ErrorClass {
    let class = match error {
        rusqlite::Error::SqliteFailure(failure, _) => sqlite_code(i64::from(failure.extended_code)),
        _ => ErrorClass::Other,
    };
    if class == ErrorClass::Transient && stage != SqlStage::Commit {
        ErrorClass::NotAttempted
    } else {
        class
    }
}

/// SQLite result codes (primary, the low byte of an extended code).
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_INTERRUPT: i64 = 9;
const SQLITE_IOERR: i64 = 10;

fn database_code(db: &dyn sqlx::error::DatabaseError) -> ErrorClass {
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return sqlstate(pg.code());
    }
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // sqlx reports SQLite's extended result code, as its decimal number.
        return db
            .code()
            .and_then(|c| c.parse::<i64>().ok())
            .map_or(ErrorClass::Other, sqlite_code);
    }
    ErrorClass::Other
}

/// A SQLite result code, extended codes masked to their primary code.
fn sqlite_code(code: i64) -> ErrorClass {
    match code & 0xff {
        SQLITE_BUSY | SQLITE_LOCKED => ErrorClass::NotAttempted,
        // The disk failed under a write (`IOERR_WRITE`, `IOERR_FSYNC`...): at COMMIT the
        // WAL may already hold the transaction's commit frame, which the next reader
        // replays, so it may have been applied (before COMMIT, `sql_error` makes it
        // NotAttempted: the transaction was never committed).
        SQLITE_IOERR => ErrorClass::Transient,
        // Past the backend's deadline holdfast interrupts its own statement: the transaction
        // is rolled back, unless it was COMMIT, which may have finished first.
        SQLITE_INTERRUPT => ErrorClass::Transient,
        _ => ErrorClass::Other,
    }
}

/// A PostgreSQL SQLSTATE: five characters, the first two its class.
pub fn sqlstate(code: &str) -> ErrorClass {
    match code {
        // Shutting down, or the connection was lost: the statement may have run. 57P05 and
        // 25P03 are the server ending a session idle past `idle_session_timeout` or
        // `idle_in_transaction_session_timeout`: met on the next statement sent, as a
        // connection lost then (NotAttempted before COMMIT, in doubt at it).
        "57P01" | "57P02" | "57P05" | "25P03" => ErrorClass::Transient,
        // Starting up; a standby refusing a write; too many connections: turned away.
        "57P03" | "25006" | "53300" => ErrorClass::NotAttempted,
        // Serialization failure, deadlock, statement cancelled (statement_timeout, a cancel
        // request): the transaction was rolled back.
        "40001" | "40P01" | "57014" => ErrorClass::NotAttempted,
        _ if code.len() == 5 && code.starts_with("08") => ErrorClass::Transient,
        _ => ErrorClass::Other,
    }
}

/// A request that was handed to a connection and failed there.
fn sent_kind(kind: LinkErrorKind) -> ErrorClass {
    match kind {
        LinkErrorKind::Io
        | LinkErrorKind::Unresolved
        | LinkErrorKind::Timeout
        | LinkErrorKind::Canceled
        | LinkErrorKind::Unexpected => ErrorClass::Transient,
        LinkErrorKind::Auth
        | LinkErrorKind::Protocol
        | LinkErrorKind::Config
        | LinkErrorKind::NotFound => ErrorClass::Other,
    }
}

/// The class of a Redis error reply, from its first word.
pub fn reply_prefix(prefix: &str) -> ErrorClass {
    if TURNED_AWAY.contains(&prefix) {
        ErrorClass::NotAttempted
    } else {
        ErrorClass::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn link(kind: LinkErrorKind) -> LinkError {
        LinkError::new(kind, "x")
    }

    fn reply(text: &str) -> BackendError {
        BackendError::reply(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn table() {
        let cases: Vec<(BackendError, ErrorClass)> = vec![
            (
                BackendError::AcquireTimeout {
                    waited: Duration::from_secs(5),
                },
                ErrorClass::NotAttempted,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::Io),
                },
                ErrorClass::NotAttempted,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::Timeout),
                },
                ErrorClass::NotAttempted,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::Canceled),
                },
                ErrorClass::NotAttempted,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::Auth),
                },
                ErrorClass::Other,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::Config),
                },
                ErrorClass::Other,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::NotFound),
                },
                ErrorClass::Other,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Io),
                },
                ErrorClass::Transient,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Timeout),
                },
                ErrorClass::Transient,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Canceled),
                },
                ErrorClass::Transient,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Unexpected),
                },
                ErrorClass::Transient,
            ),
            (
                BackendError::Connect {
                    source: link(LinkErrorKind::Protocol),
                },
                ErrorClass::NotAttempted,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::NotFound),
                },
                ErrorClass::Other,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Protocol),
                },
                ErrorClass::Other,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Config),
                },
                ErrorClass::Other,
            ),
            (
                BackendError::Sent {
                    source: link(LinkErrorKind::Auth),
                },
                ErrorClass::Other,
            ),
            (
                reply("LOADING Redis is loading the dataset in memory"),
                ErrorClass::NotAttempted,
            ),
            (
                reply("MASTERDOWN Link with MASTER is down"),
                ErrorClass::NotAttempted,
            ),
            (
                reply("READONLY You can't write against a read only replica."),
                ErrorClass::NotAttempted,
            ),
            (
                reply("TRYAGAIN Multiple keys request during rehashing of slot"),
                ErrorClass::NotAttempted,
            ),
            (
                reply("CLUSTERDOWN The cluster is down"),
                ErrorClass::NotAttempted,
            ),
            (
                reply("MOVED 3999 127.0.0.1:6381"),
                ErrorClass::NotAttempted,
            ),
            (reply("ASK 3999 127.0.0.1:6381"), ErrorClass::NotAttempted),
            (reply("ASKING"), ErrorClass::Other),
            (reply("MOVEDX 3999 127.0.0.1:6381"), ErrorClass::Other),
            (
                reply("BUSY Redis is busy running a script."),
                ErrorClass::NotAttempted,
            ),
            // A client's EVALSHA of a script the server lacks: its library sends EVAL.
            (reply("NOSCRIPT No matching script."), ErrorClass::Other),
            (
                reply("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."),
                ErrorClass::NotAttempted,
            ),
            (
                reply("NOREPLICAS Not enough good replicas to write."),
                ErrorClass::NotAttempted,
            ),
            // Prefixes that merely start like a turned-away one are answers.
            (
                reply("BUSYKEY Target key name already exists."),
                ErrorClass::Other,
            ),
            (
                reply("BUSYGROUP Consumer Group name already exists"),
                ErrorClass::Other,
            ),
            (
                reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
                ErrorClass::Other,
            ),
            (reply("ERR syntax error"), ErrorClass::Other),
            (
                reply("OOM command not allowed when used memory > 'maxmemory'."),
                ErrorClass::Other,
            ),
            (reply("NOAUTH Authentication required."), ErrorClass::Other),
            // The text after the prefix does not matter, only the prefix.
            (reply("ERR LOADING is in this message"), ErrorClass::Other),
            (reply(""), ErrorClass::Other),
        ];
        for (error, class) in cases {
            assert_eq!(classify(&error), class, "{error:?}");
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapper(#[source] BackendError);

    #[derive(Debug, thiserror::Error)]
    #[error("unrelated")]
    struct Unrelated;

    #[test]
    fn the_source_chain_is_walked() {
        let inner = BackendError::Sent {
            source: link(LinkErrorKind::Io),
        };
        let wrapped = Wrapper(inner);
        // The wrapper itself is not a BackendError; the class comes from its source.
        assert!((&wrapped as &dyn StdError)
            .downcast_ref::<BackendError>()
            .is_none());
        assert_eq!(classify(&wrapped), ErrorClass::Transient);
        assert_eq!(classify(&Unrelated), ErrorClass::Other);
    }

    fn sql(stage: SqlStage, source: sqlx::Error) -> ErrorClass {
        classify(&BackendError::Sql { stage, source })
    }

    fn io() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    }

    #[test]
    fn sqlite_codes_classify_alike_through_either_driver() {
        let lite = |stage, code: i32| {
            classify(&BackendError::Lite {
                stage,
                source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
            })
        };
        // BUSY, LOCKED (and their extended codes): turned away, whatever the stage.
        assert_eq!(lite(SqlStage::Work, 5), ErrorClass::NotAttempted);
        assert_eq!(
            lite(SqlStage::Commit, 5 | (2 << 8)),
            ErrorClass::NotAttempted
        );
        assert_eq!(lite(SqlStage::Work, 6), ErrorClass::NotAttempted);
        // IOERR_FSYNC: in doubt at COMMIT, never applied before it.
        assert_eq!(lite(SqlStage::Commit, 10 | (4 << 8)), ErrorClass::Transient);
        assert_eq!(
            lite(SqlStage::Work, 10 | (4 << 8)),
            ErrorClass::NotAttempted
        );
        // INTERRUPT (the deadline): rolled back before COMMIT, in doubt at it.
        assert_eq!(lite(SqlStage::Work, 9), ErrorClass::NotAttempted);
        assert_eq!(lite(SqlStage::Commit, 9), ErrorClass::Transient);
        // A constraint, or anything but a result code: Other.
        assert_eq!(lite(SqlStage::Work, 19), ErrorClass::Other);
        assert_eq!(
            classify(&BackendError::Lite {
                stage: SqlStage::Work,
                source: rusqlite::Error::QueryReturnedNoRows,
            }),
            ErrorClass::Other
        );
    }

    #[test]
    fn a_broken_connection_is_in_doubt_only_once_commit_was_sent() {
        assert_eq!(sql(SqlStage::Connect, io()), ErrorClass::NotAttempted);
        assert_eq!(sql(SqlStage::Work, io()), ErrorClass::NotAttempted);
        assert_eq!(sql(SqlStage::Commit, io()), ErrorClass::Transient);
        assert_eq!(
            sql(SqlStage::Connect, sqlx::Error::PoolTimedOut),
            ErrorClass::NotAttempted
        );
        assert_eq!(
            sql(SqlStage::Work, sqlx::Error::RowNotFound),
            ErrorClass::Other
        );
        // A pool closed while the backend moves to a promoted standby: nothing was sent.
        for stage in [SqlStage::Connect, SqlStage::Work, SqlStage::Commit] {
            assert_eq!(
                sql(stage, sqlx::Error::PoolClosed),
                ErrorClass::NotAttempted
            );
        }
    }

    /// A tokio timer's `Elapsed`, which only a timeout that fired can make.
    async fn elapsed() -> tokio::time::error::Elapsed {
        tokio::time::timeout(Duration::ZERO, std::future::pending::<()>())
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn a_database_deadline_is_in_doubt_only_once_commit_was_sent() {
        for (stage, class) in [
            (SqlStage::Connect, ErrorClass::NotAttempted),
            (SqlStage::Work, ErrorClass::NotAttempted),
            (SqlStage::Commit, ErrorClass::Transient),
        ] {
            let timeout = BackendError::SqlTimeout {
                stage,
                waited: Duration::from_secs(1),
                source: elapsed().await,
            };
            assert_eq!(classify(&timeout), class, "{stage:?}");
            // Shared by a group, the class is the same.
            let shared = BackendError::Shared(std::sync::Arc::new(timeout));
            assert_eq!(classify(&shared), class, "{stage:?}, shared");
        }
    }

    #[test]
    fn a_write_short_of_its_replicas_is_in_doubt() {
        let short = BackendError::NotReplicated { wanted: 1, got: 0 };
        assert_eq!(classify(&short), ErrorClass::Transient);
        // A WAIT that was never sent (its connection had closed) counts nothing, but the
        // write before it was applied all the same.
        let unsent = BackendError::WaitFailed {
            wanted: 1,
            source: Box::new(BackendError::AcquireTimeout {
                waited: std::time::Duration::ZERO,
            }),
        };
        assert_eq!(classify(&unsent), ErrorClass::Transient);
    }

    #[test]
    fn sqlstates_by_their_five_characters() {
        for (code, class) in [
            ("08006", ErrorClass::Transient),
            ("08001", ErrorClass::Transient),
            ("57P01", ErrorClass::Transient),
            ("57P02", ErrorClass::Transient),
            ("57P05", ErrorClass::Transient),
            ("25P03", ErrorClass::Transient),
            ("57P04", ErrorClass::Other),
            ("25P02", ErrorClass::Other),
            ("57P03", ErrorClass::NotAttempted),
            ("40001", ErrorClass::NotAttempted),
            ("40P01", ErrorClass::NotAttempted),
            ("57014", ErrorClass::NotAttempted),
            ("25006", ErrorClass::NotAttempted),
            ("23505", ErrorClass::Other),
            ("42P01", ErrorClass::Other),
            ("08", ErrorClass::Other),
            ("080000", ErrorClass::Other),
        ] {
            assert_eq!(sqlstate(code), class, "{code}");
        }
    }

    #[test]
    fn sqlite_codes_masked_to_their_primary_code() {
        for (code, class) in [
            (5, ErrorClass::NotAttempted),   // BUSY
            (517, ErrorClass::NotAttempted), // BUSY_SNAPSHOT
            (6, ErrorClass::NotAttempted),   // LOCKED
            (262, ErrorClass::NotAttempted), // LOCKED_SHAREDCACHE
            (10, ErrorClass::Transient),     // IOERR
            (778, ErrorClass::Transient),    // IOERR_WRITE
            (1034, ErrorClass::Transient),   // IOERR_FSYNC
            (9, ErrorClass::Transient),      // INTERRUPT
            (13, ErrorClass::Other),         // FULL
            (19, ErrorClass::Other),         // CONSTRAINT
            (2067, ErrorClass::Other),       // CONSTRAINT_UNIQUE
            (1, ErrorClass::Other),          // ERROR
            (11, ErrorClass::Other),         // CORRUPT
        ] {
            assert_eq!(sqlite_code(code), class, "{code}");
        }
    }

    /// Real SQLite errors: a busy database (extended code masked to BUSY) is turned away; a
    /// constraint violation is an answer.
    #[test]
    fn sqlite_result_codes_from_a_real_database() {
        use sqlx::{Connection, Executor};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
            let mut a = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let mut b = sqlx::SqliteConnection::connect(&url).await.unwrap();
            a.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
                .await
                .unwrap();
            b.execute("PRAGMA busy_timeout = 0").await.unwrap();
            a.execute("BEGIN IMMEDIATE").await.unwrap();
            let busy = b.execute("BEGIN IMMEDIATE").await.unwrap_err();
            assert_eq!(sql(SqlStage::Work, busy), ErrorClass::NotAttempted);
            a.execute("INSERT INTO t VALUES (1)").await.unwrap();
            let duplicate = a.execute("INSERT INTO t VALUES (1)").await.unwrap_err();
            assert_eq!(sql(SqlStage::Work, duplicate), ErrorClass::Other);
        });
    }
}
