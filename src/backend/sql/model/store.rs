//! The Redis data model on tables: key metadata, expiry and the per-kind tables.
//!
//! Every command runs against a [`Ctx`]: one connection inside one transaction, one clock
//! reading, the client's protocol. The SQL here is shared by both dialects (`$n`
//! placeholders, `ON CONFLICT`, byte-wise ordering of BLOB/bytea); only the schema differs.

pub use super::statement::{
    placeholders, placeholders_from, stmt, string_upsert, upsert_rows, value_rows, Affected, Db,
    Dialect, Fail, Row, Stmt,
};
use crate::backend::Proto;
use bytes::Bytes;
use redis_protocol::resp3::types::BytesFrame as Frame;

/// What a key holds, as stored in `hf_keys.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String = 0,
    List = 1,
    Set = 2,
    ZSet = 3,
    Hash = 4,
    Stream = 5,
}

impl Kind {
    pub fn from_code(code: i64) -> Option<Kind> {
        Some(match code {
            0 => Kind::String,
            1 => Kind::List,
            2 => Kind::Set,
            3 => Kind::ZSet,
            4 => Kind::Hash,
            5 => Kind::Stream,
            _ => return None,
        })
    }

    /// The `TYPE` reply.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::Hash => "hash",
            Kind::Stream => "stream",
        }
    }

    /// The `TYPE` argument of `SCAN`.
    pub fn from_name(name: &[u8]) -> Option<Kind> {
        [
            Kind::String,
            Kind::List,
            Kind::Set,
            Kind::ZSet,
            Kind::Hash,
            Kind::Stream,
        ]
        .into_iter()
        .find(|k| k.name().as_bytes().eq_ignore_ascii_case(name))
    }

    /// Every table holding rows of a key of this kind: its elements, and a stream's
    /// consumer groups.
    pub fn tables(self) -> &'static [&'static str] {
        match self {
            Kind::String => &[],
            Kind::List => &["hf_list"],
            Kind::Set => &["hf_set"],
            Kind::ZSet => &["hf_zset"],
            Kind::Hash => &["hf_hash"],
            Kind::Stream => &["hf_stream", "hf_xgroup", "hf_xconsumer", "hf_xpel"],
        }
    }

    /// The table holding this kind's elements, if it has one.
    pub fn table(self) -> Option<&'static str> {
        match self {
            Kind::String => None,
            Kind::List => Some("hf_list"),
            Kind::Set => Some("hf_set"),
            Kind::ZSet => Some("hf_zset"),
            Kind::Hash => Some("hf_hash"),
            Kind::Stream => Some("hf_stream"),
        }
    }
}

/// A command's result.
pub type Out = Result<Frame, Fail>;

/// Most rows one multi-row statement names (three parameters each at most: 6,144, far below
/// PostgreSQL's 65,535 and SQLite's 32,766).
pub const STATEMENT_ROWS: usize = 2048;
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const SYNTAX: &str = "ERR syntax error";

/// An error reply.
pub fn fail<T>(text: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::Reply(text.into()))
}

/// A key's row in `hf_keys`, live (not expired).
#[derive(Debug)]
pub struct Meta {
    pub kind: Kind,
    /// Unix milliseconds, or none for a key without expiry.
    pub expires: Option<i64>,
    /// A string's value; a stream's last id.
    pub value: Option<Vec<u8>>,
    /// A collection's element count (`hf_keys.len`); 0 for a string.
    pub len: i64,
}

/// What a script's commands need besides the transaction: the interpreters and the gate
/// (`scripting`).
#[derive(Clone, Copy)]
pub struct ScriptEnv<'c> {
    /// The backend's Lua interpreters.
    pub runtime: &'c crate::backend::lua::Runtime,
    /// What the script may call.
    pub gate: &'c dyn crate::backend::lua::Gate,
    /// The scripts clients loaded through this holdfast, on any backend.
    pub known: Option<&'c crate::backend::scripts::Scripts>,
}

/// One command's view of the database.
pub struct Ctx<'c> {
    pub conn: Db<'c>,
    /// Unix milliseconds, read once per command so one command sees one instant.
    pub now: i64,
    pub proto: Proto,
    pub dialect: Dialect,
    /// Expired keys met on the way are purged (only inside a write transaction).
    pub write: bool,
    /// Set by the first statement that may have changed something: a command that answers
    /// an error after that must be undone (group commit checks).
    pub wrote: bool,
    /// The id this backend's Pub/Sub registers under (`Broker::origin`): a SQLite `PUBLISH`
    /// leaves messages under it for the other processes, and reads back none of its own.
    pub origin: i64,
    /// A script's interpreters and gate: set for a request that may run one (none inside a
    /// MULTI, nor inside a script).
    pub script: Option<ScriptEnv<'c>>,
}

impl<'c> Ctx<'c> {
    /// A command's context on an sqlx connection, nothing written yet.
    pub fn new(
        conn: &'c mut sqlx::AnyConnection,
        now: i64,
        proto: Proto,
        dialect: Dialect,
        write: bool,
    ) -> Ctx<'c> {
        Ctx::on(Db::Any(conn), now, proto, dialect, write)
    }

    /// A command's context on `conn`, nothing written yet.
    pub fn on(conn: Db<'c>, now: i64, proto: Proto, dialect: Dialect, write: bool) -> Ctx<'c> {
        Ctx {
            conn,
            now,
            proto,
            dialect,
            write,
            wrote: false,
            origin: 0,
            script: None,
        }
    }

    /// Runs a statement that may change rows (an answer given after it must be undone).
    pub async fn execute(&mut self, statement: Stmt<'_>) -> Result<Affected, Fail> {
        self.wrote = true;
        self.run(statement).await
    }

    /// Runs a statement that changes nothing the command answers from (a lock).
    pub async fn run(&mut self, statement: Stmt<'_>) -> Result<Affected, Fail> {
        self.conn.changes(&statement).await
    }

    /// Every row a statement returns.
    pub async fn all(&mut self, statement: Stmt<'_>) -> Result<Vec<Row>, Fail> {
        self.conn.rows(&statement).await
    }

    /// The first row a statement returns, if any.
    pub async fn opt(&mut self, statement: Stmt<'_>) -> Result<Option<Row>, Fail> {
        self.conn.first(&statement).await
    }

    /// The row a statement returns; a database failure when it returns none.
    pub async fn one(&mut self, statement: Stmt<'_>) -> Result<Row, Fail> {
        match self.conn.first(&statement).await? {
            Some(row) => Ok(row),
            None => Err(Fail::Sql(sqlx::Error::RowNotFound)),
        }
    }

    /// The first column of the row a statement returns.
    pub async fn scalar<T>(&mut self, statement: Stmt<'_>) -> Result<T, Fail>
    where
        T: for<'r> super::statement::Column<'r>,
    {
        self.one(statement).await?.try_get(0)
    }

    /// The first column of the first row a statement returns, if any.
    pub async fn scalar_opt<T>(&mut self, statement: Stmt<'_>) -> Result<Option<T>, Fail>
    where
        T: for<'r> super::statement::Column<'r>,
    {
        match self.opt(statement).await? {
            Some(row) => Ok(Some(row.try_get(0)?)),
            None => Ok(None),
        }
    }

    /// The first column of every row a statement returns.
    pub async fn scalars<T>(&mut self, statement: Stmt<'_>) -> Result<Vec<T>, Fail>
    where
        T: for<'r> super::statement::Column<'r>,
    {
        let rows = self.all(statement).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push(row.try_get(0)?);
        }
        Ok(out)
    }

    /// The key's live metadata; an expired key is absent (and purged when writing).
    pub async fn meta(&mut self, key: &[u8]) -> Result<Option<Meta>, Fail> {
        let row = self
            .opt(stmt("SELECT kind, expires_at, value, len FROM hf_keys WHERE key = $1").bind(key))
            .await?;
        let Some(row) = row else { return Ok(None) };
        let code: i64 = row.try_get(0)?;
        let Some(kind) = Kind::from_code(code) else {
            return fail(format!("ERR holdfast: unknown stored kind {code}"));
        };
        let expires: Option<i64> = row.try_get(1)?;
        if expires.is_some_and(|at| at <= self.now) {
            if self.write {
                self.purge_expired(key, kind).await?;
            }
            return Ok(None);
        }
        Ok(Some(Meta {
            kind,
            expires,
            value: row.try_get(2)?,
            len: row.try_get(3)?,
        }))
    }

    /// The key's metadata when it is absent or of kind `want`; WRONGTYPE otherwise.
    pub async fn typed(&mut self, key: &[u8], want: Kind) -> Result<Option<Meta>, Fail> {
        match self.meta(key).await? {
            Some(m) if m.kind != want => fail(WRONGTYPE),
            other => Ok(other),
        }
    }

    /// The element count of the collection at `key` (0 when missing): one row read, with
    /// the kind check (WRONGTYPE for another kind).
    pub async fn len(&mut self, key: &[u8], want: Kind) -> Result<i64, Fail> {
        Ok(self.typed(key, want).await?.map_or(0, |m| m.len))
    }

    /// The live kind of each of `keys` that exists, read by one statement per
    /// [`STATEMENT_ROWS`] keys; expired keys are absent (and purged when writing), as in
    /// [`Ctx::meta`]. For a run of commands that check their keys' kinds one by one.
    pub async fn kinds(
        &mut self,
        keys: &[&[u8]],
    ) -> Result<std::collections::HashMap<Vec<u8>, Kind>, Fail> {
        let metas = self.live(keys, false).await?;
        Ok(metas.into_iter().map(|(key, m)| (key, m.kind)).collect())
    }

    /// [`Ctx::meta`] of each of `keys` that exists and is live, read as [`Ctx::kinds`] reads.
    pub async fn metas(
        &mut self,
        keys: &[&[u8]],
    ) -> Result<std::collections::HashMap<Vec<u8>, Meta>, Fail> {
        self.live(keys, true).await
    }

    /// The live keys of `keys` with their metadata, values only `with_values` (a run that
    /// only checks kinds does not read what may be large values).
    async fn live(
        &mut self,
        keys: &[&[u8]],
        with_values: bool,
    ) -> Result<std::collections::HashMap<Vec<u8>, Meta>, Fail> {
        let mut live = std::collections::HashMap::with_capacity(keys.len());
        let mut expired = Vec::new();
        let value = if with_values { ", len, value" } else { "" };
        for chunk in keys.chunks(STATEMENT_ROWS) {
            let Some(&last) = chunk.last() else { continue };
            // Padded with the last key (named twice, one row): a few sizes, each prepared once.
            let padded = chunk.len().next_power_of_two();
            let list = placeholders(self.dialect, padded);
            let sql =
                format!("SELECT key, kind, expires_at{value} FROM hf_keys WHERE key IN ({list})");
            let mut query = stmt(&sql);
            for key in chunk.iter().chain(std::iter::repeat(&last)).take(padded) {
                query = query.bind(*key);
            }
            for row in self.all(query).await? {
                let key: Vec<u8> = row.try_get(0)?;
                let code: i64 = row.try_get(1)?;
                let Some(kind) = Kind::from_code(code) else {
                    return fail(format!("ERR holdfast: unknown stored kind {code}"));
                };
                let expires: Option<i64> = row.try_get(2)?;
                if expires.is_some_and(|at| at <= self.now) {
                    expired.push((key, kind));
                } else {
                    let (len, value) = if with_values {
                        (row.try_get(3)?, row.try_get(4)?)
                    } else {
                        (0, None)
                    };
                    live.insert(
                        key,
                        Meta {
                            kind,
                            expires,
                            value,
                            len,
                        },
                    );
                }
            }
        }
        if self.write {
            for (key, kind) in expired {
                self.purge_expired(&key, kind).await?;
            }
        }
        Ok(live)
    }

    /// For a run of commands writing collections of `kind` to `keys`: every key's live kind
    /// (read once), the missing ones created as `kind`. A key holding another kind is left
    /// as it is (its commands answer WRONGTYPE).
    pub async fn collections(
        &mut self,
        keys: &[&[u8]],
        kind: Kind,
    ) -> Result<std::collections::HashMap<Vec<u8>, Kind>, Fail> {
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let live = self.kinds(&keys).await?;
        let new: Vec<&[u8]> = keys
            .iter()
            .copied()
            .filter(|key| !live.contains_key(*key))
            .collect();
        self.create_many(&new, kind).await?;
        Ok(live)
    }

    /// Creates the key rows of `keys`, collections of `kind`, where none exists (one
    /// statement per [`STATEMENT_ROWS`] keys).
    pub async fn create_many(&mut self, keys: &[&[u8]], kind: Kind) -> Result<(), Fail> {
        for chunk in keys.chunks(STATEMENT_ROWS) {
            let Some(&last) = chunk.last() else { continue };
            // Padded with the last key: a repeat conflicts with the first and is skipped.
            let padded = chunk.len().next_power_of_two();
            let code = kind as i64;
            let rows = (0..padded)
                .map(|i| match self.dialect {
                    Dialect::Sqlite => format!("(?, {code}, NULL, NULL)"),
                    Dialect::Postgres => format!("(${}, {code}, NULL, NULL)", i + 1),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "INSERT INTO hf_keys (key, kind, expires_at, value) VALUES {rows} \
                 ON CONFLICT (key) DO NOTHING"
            );
            let mut query = stmt(&sql);
            for key in chunk.iter().chain(std::iter::repeat(&last)).take(padded) {
                query = query.bind(*key);
            }
            self.execute(query).await?;
        }
        Ok(())
    }

    /// Removes a key found expired, only if it still is: a writer that refreshed it in the
    /// meantime (PostgreSQL, READ COMMITTED) keeps it.
    async fn purge_expired(&mut self, key: &[u8], kind: Kind) -> Result<(), Fail> {
        let done = self
            .execute(
                stmt("DELETE FROM hf_keys WHERE key = $1 AND expires_at <= $2")
                    .bind(key)
                    .bind(self.now),
            )
            .await?;
        if done.rows_affected() > 0 {
            for table in kind.tables() {
                self.execute(stmt(format!("DELETE FROM {table} WHERE key = $1")).bind(key))
                    .await?;
            }
        }
        Ok(())
    }

    /// Removes a key of any kind, with its elements.
    pub async fn purge(&mut self, key: &[u8], kind: Kind) -> Result<(), Fail> {
        self.execute(stmt("DELETE FROM hf_keys WHERE key = $1").bind(key))
            .await?;
        for table in kind.tables() {
            self.execute(stmt(format!("DELETE FROM {table} WHERE key = $1")).bind(key))
                .await?;
        }
        Ok(())
    }

    /// Removes `keys`, each of the kind given, with their elements: one statement per table
    /// and [`STATEMENT_ROWS`] keys.
    pub async fn delete_many(&mut self, keys: &[(&[u8], Kind)]) -> Result<(), Fail> {
        let all: Vec<&[u8]> = keys.iter().map(|(key, _)| *key).collect();
        self.delete_in("hf_keys", &all).await?;
        let mut tables: Vec<&'static str> = keys
            .iter()
            .flat_map(|(_, kind)| kind.tables())
            .copied()
            .collect();
        tables.sort_unstable();
        tables.dedup();
        for table in tables {
            let of: Vec<&[u8]> = keys
                .iter()
                .filter(|(_, kind)| kind.tables().contains(&table))
                .map(|(key, _)| *key)
                .collect();
            self.delete_in(table, &of).await?;
        }
        Ok(())
    }

    /// `DELETE FROM table WHERE key IN keys`, [`STATEMENT_ROWS`] keys at a time.
    async fn delete_in(&mut self, table: &str, keys: &[&[u8]]) -> Result<(), Fail> {
        for chunk in keys.chunks(STATEMENT_ROWS) {
            let Some(&last) = chunk.last() else { continue };
            // Padded with the last key: a few sizes, each prepared once.
            let padded = chunk.len().next_power_of_two();
            let list = placeholders(self.dialect, padded);
            let sql = format!("DELETE FROM {table} WHERE key IN ({list})");
            let mut query = stmt(&sql);
            for key in chunk.iter().chain(std::iter::repeat(&last)).take(padded) {
                query = query.bind(*key);
            }
            self.execute(query).await?;
        }
        Ok(())
    }

    /// Deletes the key if it is live; true if it was.
    pub async fn delete(&mut self, key: &[u8]) -> Result<bool, Fail> {
        match self.meta(key).await? {
            Some(m) => {
                self.purge(key, m.kind).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Writes a string, replacing whatever the key held.
    pub async fn put_string(
        &mut self,
        key: &[u8],
        value: &[u8],
        expires: Option<i64>,
        old: Option<Kind>,
    ) -> Result<(), Fail> {
        if let Some(kind) = old.filter(|k| *k != Kind::String) {
            self.purge(key, kind).await?;
        }
        self.execute(
            stmt(
                "INSERT INTO hf_keys (key, kind, expires_at, value) VALUES ($1, 0, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET kind = 0, expires_at = excluded.expires_at, \
             value = excluded.value",
            )
            .bind(key)
            .bind(expires)
            .bind(value),
        )
        .await?;
        Ok(())
    }

    /// Plain `SET key value` for many keys at once, the later of two for one key winning:
    /// one statement finds the keys that held another kind (their elements are purged), one
    /// writes every string. Group commit's lever: two statements for a run of SETs instead of
    /// two each.
    pub async fn put_strings(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<(), Fail> {
        let mut seen = std::collections::HashSet::with_capacity(pairs.len());
        let mut latest: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .rev()
            .filter(|(key, _)| seen.insert(*key))
            .copied()
            .collect();
        latest.reverse();
        // Each statement's list padded to a power of two by repeating its last entry (a key
        // named twice in the SELECT is one row; written twice by SQLite's upsert, the same
        // value twice): a few sizes, each prepared once and then found in the connection's
        // statement cache. Not split into several statements instead: each statement is a
        // round trip to the driver's SQLite thread, whose wake-up cost more than a prepare.
        let padded = latest.len().next_power_of_two();
        let Some(last) = latest.last().copied() else {
            return Ok(());
        };
        let written = upsert_rows(self.dialect, latest.len());
        // Strings and new keys first: a key of another kind is left as it is, and counted
        // out. Every row written (each repeat of the padding too) is one row affected, so a
        // full count means no key held another kind, and no check is needed: the usual case
        // costs one statement instead of a check and a write.
        let upsert = self.upsert_strings(&latest, last, written).await?;
        if upsert.rows_affected() == written as u64 {
            return Ok(());
        }
        let list = placeholders(self.dialect, padded);
        let sql = format!("SELECT key, kind FROM hf_keys WHERE kind <> 0 AND key IN ({list})");
        let mut others = stmt(&sql);
        for (key, _) in latest.iter().chain(std::iter::repeat(&last)).take(padded) {
            others = others.bind(*key);
        }
        for row in self.all(others).await? {
            let key: Vec<u8> = row.try_get(0)?;
            let code: i64 = row.try_get(1)?;
            let Some(kind) = Kind::from_code(code) else {
                return fail(format!("ERR holdfast: unknown stored kind {code}"));
            };
            self.purge(&key, kind).await?;
        }
        // The purged keys are new now; the strings are written again, to the same values.
        self.upsert_strings(&latest, last, written).await?;
        Ok(())
    }

    /// `pairs` (padded with `last` to `written` rows) written as strings, but over no key of
    /// another kind.
    async fn upsert_strings(
        &mut self,
        pairs: &[(&[u8], &[u8])],
        last: (&[u8], &[u8]),
        written: usize,
    ) -> Result<Affected, Fail> {
        let sql = string_upsert(self.dialect, written, false);
        let mut write = stmt(&sql);
        for (key, value) in pairs.iter().chain(std::iter::repeat(&last)).take(written) {
            write = write.bind(*key).bind(*value);
        }
        self.execute(write).await
    }

    /// Creates the key row of a collection unless it exists.
    pub async fn create(
        &mut self,
        key: &[u8],
        kind: Kind,
        value: Option<&[u8]>,
    ) -> Result<(), Fail> {
        self.execute(
            stmt(
                "INSERT INTO hf_keys (key, kind, expires_at, value) VALUES ($1, $2, NULL, $3) \
             ON CONFLICT (key) DO NOTHING",
            )
            .bind(key)
            .bind(kind as i64)
            .bind(value),
        )
        .await?;
        Ok(())
    }

    /// Sets a key's expiry (none: persistent).
    pub async fn set_expiry(&mut self, key: &[u8], expires: Option<i64>) -> Result<(), Fail> {
        self.execute(
            stmt("UPDATE hf_keys SET expires_at = $2 WHERE key = $1")
                .bind(key)
                .bind(expires),
        )
        .await?;
        Ok(())
    }

    /// Sets a key's stored value (a stream's last id).
    pub async fn set_value(&mut self, key: &[u8], value: &[u8]) -> Result<(), Fail> {
        self.execute(
            stmt("UPDATE hf_keys SET value = $2 WHERE key = $1")
                .bind(key)
                .bind(value),
        )
        .await?;
        Ok(())
    }

    /// Elements of a collection (0 for a missing key, or one of another `kind`): its
    /// count as the element tables' triggers keep it (schema migration 7), one row read
    /// however long the collection.
    pub async fn count(&mut self, key: &[u8], kind: Kind) -> Result<i64, Fail> {
        let n: Option<i64> = self
            .scalar_opt(
                stmt("SELECT len FROM hf_keys WHERE key = $1 AND kind = $2")
                    .bind(key)
                    .bind(kind as i64),
            )
            .await?;
        Ok(n.unwrap_or(0))
    }

    /// HDEL, SREM and ZREM: the names after the key taken out of the `kind` at the key, under
    /// its lock; 0 when the key is missing.
    pub async fn remove_named(&mut self, a: &[Bytes], kind: Kind) -> Out {
        let key = a.get(1).map(|b| b.as_ref()).unwrap_or_default();
        self.lock(&[key]).await?;
        if self.typed(key, kind).await?.is_none() {
            return Ok(int(0));
        }
        Ok(int(self
            .remove(key, kind, a.get(2..).unwrap_or_default())
            .await?))
    }

    /// Removes elements of a hash, set or sorted set by their name (field or member), and
    /// the key with its last element; returns how many were there.
    pub async fn remove(&mut self, key: &[u8], kind: Kind, names: &[Bytes]) -> Result<i64, Fail> {
        let (table, column) = match kind {
            Kind::Hash => ("hf_hash", "field"),
            Kind::Set => ("hf_set", "member"),
            Kind::ZSet => ("hf_zset", "member"),
            _ => return Ok(0),
        };
        let sql = format!("DELETE FROM {table} WHERE key = $1 AND {column} = $2");
        let mut n = 0;
        for name in names {
            let done = self
                .execute(stmt(&sql).bind(key).bind(name.as_ref()))
                .await?;
            n += done.rows_affected() as i64;
        }
        self.drop_if_empty(key, kind).await?;
        Ok(n)
    }

    /// Redis deletes a collection when its last element goes (streams excepted).
    pub async fn drop_if_empty(&mut self, key: &[u8], kind: Kind) -> Result<(), Fail> {
        let Some(table) = kind.table() else {
            return Ok(());
        };
        let any = self
            .opt(stmt(format!("SELECT 1 FROM {table} WHERE key = $1 LIMIT 1")).bind(key))
            .await?;
        if any.is_none() {
            self.execute(stmt("DELETE FROM hf_keys WHERE key = $1").bind(key))
                .await?;
        }
        Ok(())
    }

    /// Serialises writers of the same keys on PostgreSQL for the rest of the transaction
    /// (SQLite has one writer). Locks are taken in a fixed order, so two commands over the
    /// same keys cannot deadlock.
    pub async fn lock(&mut self, keys: &[&[u8]]) -> Result<(), Fail> {
        if self.dialect != Dialect::Postgres || !self.write {
            return Ok(());
        }
        let mut ids: Vec<i64> = keys.iter().map(|k| lock_id(k)).collect();
        ids.sort_unstable();
        ids.dedup();
        // One statement per thousand locks rather than one per lock: PostgreSQL evaluates a
        // select list left to right, so they are still taken in ascending order.
        for chunk in ids.chunks(1000) {
            let calls = (1..=chunk.len())
                .map(|i| format!("pg_advisory_xact_lock(${i})"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!("SELECT {calls}");
            let mut lock = stmt(&sql);
            for id in chunk {
                lock = lock.bind(*id);
            }
            self.run(lock).await?;
        }
        Ok(())
    }
}

/// Where to read the ranks `start..=end` (both within `0..len`) of a collection from: the
/// offset from the nearer end, and whether that is the far end (read in the other order,
/// then reversed). An offset is walked, so `ZRANGE key -10 -1` on a million members costs
/// ten rows, not a million.
pub fn nearer_end(start: i64, end: i64, len: i64) -> (i64, bool) {
    let from_tail = len - 1 - end;
    if from_tail < start {
        (from_tail, true)
    } else {
        (start, false)
    }
}

/// A stable 64-bit id for a key's advisory lock (FNV-1a): collisions only serialise two
/// unrelated keys.
fn lock_id(key: &[u8]) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// A column as bytes.
pub fn bytes_at(row: &Row, index: usize) -> Result<Bytes, Fail> {
    let v: Vec<u8> = row.try_get(index)?;
    Ok(Bytes::from(v))
}

// The replies the model builds, as the rest of holdfast builds its own.
pub use crate::resp::frame::{array, bulk, double, number as int, ok, simple};

/// A nil.
pub fn null() -> Frame {
    Frame::Null
}

pub fn bulk_or_null(value: Option<impl Into<Bytes>>) -> Frame {
    value.map(bulk).unwrap_or(Frame::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_read_from_the_nearer_end() {
        // (start, end, len) -> (offset, from the far end)
        for (start, end, len, want) in [
            (0, 9, 1000, (0, false)),
            (990, 999, 1000, (0, true)),
            (500, 509, 1000, (490, true)),
            (400, 409, 1000, (400, false)),
            (0, 999, 1000, (0, false)),
            (0, 0, 1, (0, false)),
            (5, 5, 10, (4, true)),
        ] {
            assert_eq!(
                nearer_end(start, end, len),
                want,
                "{start}..={end} of {len}"
            );
        }
    }
}
