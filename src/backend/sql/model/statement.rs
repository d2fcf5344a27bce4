//! The one small interface between the data model and a database: a statement with its
//! parameters ([`Stmt`]), and the rows it returns ([`Row`]), in holdfast's own types, so the
//! model's SQL is written once and never names a driver. [`Ctx`](super::store::Ctx) runs a
//! statement on the command's connection, a [`Db`]: sqlx's `Any` driver (PostgreSQL, and
//! SQLite's Pub/Sub poller), or a `rusqlite` connection owned by the caller (the SQLite
//! backend's, `engine/lite.rs`), on which a statement runs synchronously (prepared once and
//! cached by the connection), with no worker thread between.
//! The same model code runs on either: `tests/sql/drivers.rs` runs every command of the
//! differential script through both SQLite drivers and compares the replies.
//!
//! The SQL itself is shared: `$n` placeholders (anonymous `?` on SQLite where a statement's
//! parameters are each bound once, see [`placeholders`]), `ON CONFLICT`, `RETURNING`, row
//! values, byte-wise ordering of BLOB and bytea. What differs by [`Dialect`] in a statement's
//! text (placeholders, the padding of multi-row lists) is built here too.

use bytes::Bytes;
use rusqlite::types::{Value, ValueRef};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::Any;
use std::borrow::Cow;

/// Which database the SQL runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: one writer at a time, in-process.
    Sqlite,
    /// PostgreSQL: concurrent writers, serialised per key by advisory locks.
    Postgres,
}

/// Why a command did not produce its reply: an answer for the client (an error reply, which
/// also rolls the command back), or a database failure for `classify`.
#[derive(Debug)]
pub enum Fail {
    /// An error reply, without the leading `-`.
    Reply(String),
    /// The database failed, through sqlx.
    Sql(sqlx::Error),
    /// The database failed, through a `rusqlite` connection.
    Lite(rusqlite::Error),
    /// A key watched before `EXEC` changed: the transaction applies nothing.
    Watched,
}

impl From<sqlx::Error> for Fail {
    fn from(e: sqlx::Error) -> Fail {
        Fail::Sql(e)
    }
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Fail {
        Fail::Lite(e)
    }
}

/// The connection a command's statements run on.
pub enum Db<'c> {
    /// sqlx's `Any` driver: PostgreSQL, or SQLite through sqlx's worker thread.
    Any(&'c mut sqlx::AnyConnection),
    /// A SQLite connection the calling thread owns: each statement runs in the call. Its
    /// owner sizes its statement cache (`set_prepared_statement_cache_capacity`: rusqlite's
    /// default of 16 is fewer than the model's statements).
    Lite(&'c mut rusqlite::Connection),
}

impl<'c> From<&'c mut sqlx::AnyConnection> for Db<'c> {
    fn from(conn: &'c mut sqlx::AnyConnection) -> Db<'c> {
        Db::Any(conn)
    }
}

impl<'c> From<&'c mut rusqlite::Connection> for Db<'c> {
    fn from(conn: &'c mut rusqlite::Connection) -> Db<'c> {
        Db::Lite(conn)
    }
}

impl Db<'_> {
    /// Runs `sql`, statements without parameters (`BEGIN`, `COMMIT`, a migration's DDL), as
    /// they are: sqlx's simple query protocol, or SQLite's own batch execution.
    ///
    /// # Errors
    /// The driver's error.
    pub async fn batch(&mut self, sql: &str) -> Result<(), Fail> {
        match self {
            Db::Any(conn) => {
                sqlx::Executor::execute(&mut **conn, sql).await?;
                Ok(())
            }
            Db::Lite(conn) => Ok(conn.execute_batch(sql)?),
        }
    }

    /// Runs `statement`; every row it returns.
    pub(super) async fn rows(&mut self, statement: &Stmt<'_>) -> Result<Vec<Row>, Fail> {
        match self {
            Db::Any(conn) => {
                let rows = statement.any().fetch_all(&mut **conn).await?;
                Ok(rows.into_iter().map(Row::Any).collect())
            }
            Db::Lite(conn) => Ok(lite(conn, statement, true)?.0),
        }
    }

    /// Runs `statement` for its changes; the rows it returns are read and dropped.
    pub(super) async fn changes(&mut self, statement: &Stmt<'_>) -> Result<Affected, Fail> {
        match self {
            Db::Any(conn) => {
                let done = statement.any().execute(&mut **conn).await?;
                Ok(Affected(done.rows_affected()))
            }
            Db::Lite(conn) => Ok(Affected(lite(conn, statement, false)?.1)),
        }
    }

    /// The first row `statement` returns, if any.
    pub(super) async fn first(&mut self, statement: &Stmt<'_>) -> Result<Option<Row>, Fail> {
        match self {
            Db::Any(conn) => {
                let row = statement.any().fetch_optional(&mut **conn).await?;
                Ok(row.map(Row::Any))
            }
            Db::Lite(conn) => Ok(lite(conn, statement, true)?.0.into_iter().next()),
        }
    }
}

/// Runs `statement` on a `rusqlite` connection, with the statement prepared once per
/// connection (its cache); the rows when `keep`, and the rows changed.
fn lite(
    conn: &rusqlite::Connection,
    statement: &Stmt<'_>,
    keep: bool,
) -> Result<(Vec<Row>, u64), rusqlite::Error> {
    let mut prepared = conn.prepare_cached(&statement.sql)?;
    // A `$n` or `?n` parameter takes the n-th value wherever it stands (SQLite numbers named
    // parameters in the order they first appear); an anonymous `?`, the next one in order.
    let mut next = 0;
    for index in 1..=prepared.parameter_count() {
        let n = match prepared.parameter_name(index) {
            Some(name) => name
                .get(1..)
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| rusqlite::Error::InvalidParameterName(name.to_string()))?,
            None => {
                next += 1;
                next
            }
        };
        match statement.params.get(n.wrapping_sub(1)) {
            Some(Param::Int(v)) => prepared.raw_bind_parameter(index, v)?,
            Some(Param::Float(v)) => prepared.raw_bind_parameter(index, v)?,
            Some(Param::Bytes(v)) => prepared.raw_bind_parameter(index, v.as_deref())?,
            Some(Param::Text(v)) => prepared.raw_bind_parameter(index, v.as_ref())?,
            // An unbound parameter is NULL, as sqlx leaves it.
            None => prepared.raw_bind_parameter(index, rusqlite::types::Null)?,
        }
    }
    let width = prepared.column_count();
    let mut rows = Vec::new();
    let mut stepping = prepared.raw_query();
    while let Some(row) = stepping.next()? {
        if keep {
            let mut values = Vec::with_capacity(width);
            for i in 0..width {
                values.push(Value::from(row.get_ref(i)?));
            }
            rows.push(Row::Lite(values));
        }
    }
    drop(stepping);
    Ok((rows, conn.changes()))
}

/// What a statement that changes rows reports.
#[derive(Clone, Copy, Debug)]
pub struct Affected(pub(super) u64);

impl Affected {
    /// How many rows it inserted, updated or deleted.
    pub fn rows_affected(self) -> u64 {
        self.0
    }
}

/// A statement and its parameters, bound in order.
pub struct Stmt<'q> {
    sql: Cow<'q, str>,
    params: Vec<Param<'q>>,
}

/// A statement's text, to bind parameters to.
pub fn stmt<'q>(sql: impl Into<Cow<'q, str>>) -> Stmt<'q> {
    Stmt {
        sql: sql.into(),
        params: Vec::new(),
    }
}

impl<'q> Stmt<'q> {
    /// The next parameter.
    #[must_use]
    pub fn bind(mut self, value: impl Bind<'q>) -> Stmt<'q> {
        self.params.push(value.param());
        self
    }

    /// The statement for sqlx's `Any` driver (prepared once per connection: sqlx caches
    /// it by its text).
    pub(super) fn any(&self) -> Query<'_, Any, AnyArguments<'_>> {
        let mut query = sqlx::query(&self.sql);
        for param in &self.params {
            query = match param {
                Param::Int(v) => query.bind(*v),
                Param::Float(v) => query.bind(*v),
                Param::Bytes(v) => query.bind(v.as_deref()),
                Param::Text(v) => query.bind(v.as_ref()),
            };
        }
        query
    }
}

/// One parameter. A null keeps its type: PostgreSQL types every parameter.
pub enum Param<'q> {
    Int(Option<i64>),
    Float(Option<f64>),
    Bytes(Option<Cow<'q, [u8]>>),
    Text(Cow<'q, str>),
}

/// What can be bound as a parameter.
pub trait Bind<'q> {
    fn param(self) -> Param<'q>;
}

impl<'q> Bind<'q> for i64 {
    fn param(self) -> Param<'q> {
        Param::Int(Some(self))
    }
}

impl<'q> Bind<'q> for Option<i64> {
    fn param(self) -> Param<'q> {
        Param::Int(self)
    }
}

impl<'q> Bind<'q> for f64 {
    fn param(self) -> Param<'q> {
        Param::Float(Some(self))
    }
}

impl<'q> Bind<'q> for Option<f64> {
    fn param(self) -> Param<'q> {
        Param::Float(self)
    }
}

impl<'q> Bind<'q> for &'q [u8] {
    fn param(self) -> Param<'q> {
        Param::Bytes(Some(Cow::Borrowed(self)))
    }
}

impl<'q> Bind<'q> for Option<&'q [u8]> {
    fn param(self) -> Param<'q> {
        Param::Bytes(self.map(Cow::Borrowed))
    }
}

impl<'q> Bind<'q> for &'q Vec<u8> {
    fn param(self) -> Param<'q> {
        Param::Bytes(Some(Cow::Borrowed(self.as_slice())))
    }
}

impl<'q> Bind<'q> for Vec<u8> {
    fn param(self) -> Param<'q> {
        Param::Bytes(Some(Cow::Owned(self)))
    }
}

impl<'q> Bind<'q> for Option<Vec<u8>> {
    fn param(self) -> Param<'q> {
        Param::Bytes(self.map(Cow::Owned))
    }
}

impl<'q> Bind<'q> for &'q Bytes {
    fn param(self) -> Param<'q> {
        Param::Bytes(Some(Cow::Borrowed(self.as_ref())))
    }
}

impl<'q> Bind<'q> for &'q str {
    fn param(self) -> Param<'q> {
        Param::Text(Cow::Borrowed(self))
    }
}

impl<'q, const N: usize> Bind<'q> for &'q [u8; N] {
    fn param(self) -> Param<'q> {
        Param::Bytes(Some(Cow::Borrowed(self.as_slice())))
    }
}

/// A row a statement returned: sqlx's, or the values `rusqlite` read.
pub enum Row {
    Any(AnyRow),
    Lite(Vec<Value>),
}

impl Row {
    /// The column at `index`, as `T`; a database failure (for `classify`) when it is not one.
    ///
    /// # Errors
    /// The driver's decoding error.
    pub fn try_get<'r, T: Column<'r>>(&'r self, index: usize) -> Result<T, Fail> {
        match self {
            Row::Any(row) => Ok(T::from_any(row, index)?),
            Row::Lite(values) => {
                let value = values
                    .get(index)
                    .ok_or(rusqlite::Error::InvalidColumnIndex(index))?;
                T::from_lite(ValueRef::from(value)).ok_or(Fail::Lite(
                    rusqlite::Error::InvalidColumnType(
                        index,
                        String::new(),
                        ValueRef::from(value).data_type(),
                    ),
                ))
            }
        }
    }
}

/// What a column can be read as: by sqlx's own `Any` decoding, or from a SQLite value (an
/// integer read as a float where a float is asked for, text as bytes where bytes are, as
/// SQLite's own conversions do).
pub trait Column<'r>: Sized {
    fn from_any(row: &'r AnyRow, index: usize) -> Result<Self, sqlx::Error>;
    fn from_lite(value: ValueRef<'r>) -> Option<Self>;
}

/// The non-null form of each type, and its `Option`.
macro_rules! column {
    ($($t:ty => |$v:ident| $lite:expr;)*) => {$(
        impl<'r> Column<'r> for $t {
            fn from_any(row: &'r AnyRow, index: usize) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }
            fn from_lite($v: ValueRef<'r>) -> Option<Self> {
                $lite
            }
        }
        impl<'r> Column<'r> for Option<$t> {
            fn from_any(row: &'r AnyRow, index: usize) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }
            fn from_lite($v: ValueRef<'r>) -> Option<Self> {
                match $v {
                    ValueRef::Null => Some(None),
                    _ => $lite.map(Some),
                }
            }
        }
    )*};
}

column! {
    i64 => |v| match v {
        ValueRef::Integer(n) => Some(n),
        _ => None,
    };
    f64 => |v| match v {
        ValueRef::Real(x) => Some(x),
        ValueRef::Integer(n) => Some(n as f64),
        _ => None,
    };
    Vec<u8> => |v| match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => Some(b.to_vec()),
        _ => None,
    };
    &'r [u8] => |v| match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => Some(b),
        _ => None,
    };
    String => |v| match v {
        ValueRef::Text(b) | ValueRef::Blob(b) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    };
    bool => |v| match v {
        ValueRef::Integer(n) => Some(n != 0),
        _ => None,
    };
}

/// `rows` parenthesised rows of `width` parameters each, numbered in order: a multi-row
/// `VALUES` list.
/// How many rows an upsert of `len` distinct keys lists: SQLite's list is padded to a power
/// of two with its last row (written twice, to the same value: a few sizes, each prepared
/// once); PostgreSQL refuses an upsert that names one row twice, so its list is not.
pub fn upsert_rows(dialect: Dialect, len: usize) -> usize {
    match dialect {
        Dialect::Sqlite => len.next_power_of_two(),
        Dialect::Postgres => len,
    }
}

/// The statement writing `rows` strings (key, then `expires_at` when `expiry`, then value,
/// bound in that order; no expiry otherwise), over no key of another kind.
pub fn string_upsert(dialect: Dialect, rows: usize, expiry: bool) -> String {
    let width = if expiry { 3 } else { 2 };
    let values = (0..rows)
        .map(|i| {
            let p = |j: usize| match dialect {
                Dialect::Sqlite => "?".to_string(),
                Dialect::Postgres => format!("${}", i * width + j),
            };
            let expires = if expiry { p(2) } else { "NULL".to_string() };
            format!("({}, 0, {expires}, {})", p(1), p(width))
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO hf_keys (key, kind, expires_at, value) VALUES {values} \
         ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at, \
         value = excluded.value WHERE hf_keys.kind = 0"
    )
}

pub fn value_rows(dialect: Dialect, rows: usize, width: usize) -> String {
    (0..rows)
        .map(|i| {
            let params: Vec<String> = (1..=width)
                .map(|j| match dialect {
                    Dialect::Sqlite => "?".to_string(),
                    Dialect::Postgres => format!("${}", i * width + j),
                })
                .collect();
            format!("({})", params.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `count` parameters, each bound once, in order: a statement's only ones.
pub fn placeholders(dialect: Dialect, count: usize) -> String {
    placeholders_from(dialect, 1, count)
}

/// `count` parameters numbered from `first`, after `first - 1` others, each bound once, in
/// order. Anonymous on SQLite like every other parameter of the statement: sqlx binds a `?`
/// that follows a `$1` to the first argument again.
pub fn placeholders_from(dialect: Dialect, first: usize, count: usize) -> String {
    match dialect {
        // Anonymous: SQLite looks a numbered parameter's name up in a list, and sqlx asks for
        // every parameter's name when it binds, so a statement of n `$i` takes n² steps.
        Dialect::Sqlite => vec!["?"; count].join(", "),
        Dialect::Postgres => (first..first + count)
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_anonymous_on_sqlite() {
        assert_eq!(placeholders(Dialect::Sqlite, 3), "?, ?, ?");
        assert_eq!(placeholders(Dialect::Postgres, 3), "$1, $2, $3");
    }
}
