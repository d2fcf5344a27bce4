//! The one small interface between the data model and a database: a statement with its
//! parameters ([`Stmt`]), and the rows it returns ([`Row`]), in holdfast's own types, so the
//! model's SQL is written once and never names a driver. [`Ctx`](super::store::Ctx) runs a
//! statement on the command's connection (sqlx's `Any` driver: PostgreSQL, and SQLite).
//!
//! The SQL itself is shared: `$n` placeholders (anonymous `?` on SQLite where a statement's
//! parameters are each bound once, see [`placeholders`]), `ON CONFLICT`, `RETURNING`, row
//! values, byte-wise ordering of BLOB and bytea. What differs by [`Dialect`] in a statement's
//! text (placeholders, the padding of multi-row lists) is built here too.

use bytes::Bytes;
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

impl<'q, const N: usize> Bind<'q> for &'q [u8; N] {
    fn param(self) -> Param<'q> {
        Param::Bytes(Some(Cow::Borrowed(self.as_slice())))
    }
}

/// A row a statement returned.
pub struct Row(AnyRow);

impl Row {
    pub(super) fn any(row: AnyRow) -> Row {
        Row(row)
    }

    /// The column at `index`, as `T`; a database failure (for `classify`) when it is not one.
    ///
    /// # Errors
    /// The driver's decoding error.
    pub fn try_get<'r, T: Column<'r>>(&'r self, index: usize) -> Result<T, sqlx::Error> {
        T::from_any(&self.0, index)
    }
}

/// What a column can be read as.
pub trait Column<'r>: Sized {
    fn from_any(row: &'r AnyRow, index: usize) -> Result<Self, sqlx::Error>;
}

/// Each type the model reads, decoded by sqlx's own `Any` decoding.
macro_rules! column {
    ($($t:ty),*) => {$(
        impl<'r> Column<'r> for $t {
            fn from_any(row: &'r AnyRow, index: usize) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, index)
            }
        }
    )*};
}

column!(
    i64,
    Option<i64>,
    f64,
    Option<f64>,
    Vec<u8>,
    Option<Vec<u8>>,
    &'r [u8],
    Option<&'r [u8]>,
    String,
    bool
);

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
    match dialect {
        // Anonymous: SQLite looks a numbered parameter's name up in a list, and sqlx asks for
        // every parameter's name when it binds, so a statement of n `$i` takes n² steps.
        Dialect::Sqlite => vec!["?"; count].join(", "),
        Dialect::Postgres => (1..=count)
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
