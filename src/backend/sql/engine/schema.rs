//! The schema, created and upgraded by numbered migrations when a backend first connects.
//!
//! A handful of statements per dialect do not justify sqlx's migration macros (and the
//! compile time of its macro crate); the runner is a version table and a loop, run in one
//! transaction under a lock, so two holdfast processes starting together migrate once.

use super::store::Dialect;
use super::store::{stmt, Ctx, Db, Fail};
use crate::backend::Proto;

/// Migration `n` is `SQLITE[n - 1]` / `POSTGRES[n - 1]`: 1 the data model, 2 exact mode's
/// recorded replies, 3 the versions of watched keys (`WATCH`), 4 stream consumer groups;
/// 5 the registry of Pub/Sub subscriptions (`broker.rs`), and on SQLite the heartbeats of
/// the processes that hold them and the messages left for them (`inbox.rs`); 6 the scripts
/// loaded by `SCRIPT LOAD` and `EVAL`, by digest (`model/scripting.rs`), and the function
/// libraries and their functions (`model/functions.rs`); 7 every collection's element count
/// in `hf_keys.len`, and the indexes that read a hash's or a set's elements in the order
/// they were added (`HSCAN`'s and `SSCAN`'s cursors, `HGETALL`, `SMEMBERS`) without sorting
/// the collection or reading other keys' rows.
///
/// The counts are kept by triggers on the element tables, so that every statement that adds
/// or removes elements is counted whichever command runs it, in the same transaction; so a
/// length (`LLEN`, a push's reply, `XADD`'s trimming) is one row read, not a scan of the
/// collection. Two rules keep them true: a key's row exists before its elements are
/// inserted (a count for a missing row is lost), and a renamed key's row carries its count
/// (no trigger on `UPDATE`, which only `RENAME` uses to move elements). On PostgreSQL the
/// triggers run once per statement over its transition table, so a many-row insert updates
/// the key's row once.
///
/// Statements are separated by `;` at the end of a line: a trigger's body holds `;` inside
/// a line.
const SQLITE: &[&str] = &[
    "
CREATE TABLE hf_keys (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL UNIQUE,
    kind INTEGER NOT NULL,
    expires_at INTEGER,
    value BLOB
);
CREATE INDEX hf_keys_expiry ON hf_keys (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE hf_hash (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL,
    field BLOB NOT NULL,
    value BLOB NOT NULL,
    UNIQUE (key, field)
);
CREATE TABLE hf_set (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL,
    member BLOB NOT NULL,
    UNIQUE (key, member)
);
CREATE TABLE hf_zset (
    key BLOB NOT NULL,
    member BLOB NOT NULL,
    score REAL NOT NULL,
    PRIMARY KEY (key, member)
);
CREATE INDEX hf_zset_by_score ON hf_zset (key, score, member);
CREATE TABLE hf_list (
    key BLOB NOT NULL,
    pos INTEGER NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (key, pos)
);
CREATE TABLE hf_stream (
    key BLOB NOT NULL,
    ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    fields BLOB NOT NULL,
    PRIMARY KEY (key, ms, seq)
);
",
    "
CREATE TABLE hf_tokens (
    token BLOB PRIMARY KEY,
    reply BLOB NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX hf_tokens_expiry ON hf_tokens (expires_at);
",
    "
CREATE TABLE hf_watch (
    key BLOB PRIMARY KEY,
    version INTEGER NOT NULL
);
",
    "
CREATE TABLE hf_xgroup (
    key BLOB NOT NULL,
    grp BLOB NOT NULL,
    ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    entries_read INTEGER NOT NULL,
    PRIMARY KEY (key, grp)
);
CREATE TABLE hf_xconsumer (
    key BLOB NOT NULL,
    grp BLOB NOT NULL,
    name BLOB NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (key, grp, name)
);
CREATE TABLE hf_xpel (
    key BLOB NOT NULL,
    grp BLOB NOT NULL,
    ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    consumer BLOB NOT NULL,
    delivered_at INTEGER NOT NULL,
    deliveries INTEGER NOT NULL,
    PRIMARY KEY (key, grp, ms, seq)
);
CREATE INDEX hf_xpel_by_consumer ON hf_xpel (key, grp, consumer, ms, seq);
",
    "
CREATE TABLE hf_pubsub (
    listener INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    name BLOB NOT NULL,
    clients INTEGER NOT NULL,
    PRIMARY KEY (listener, kind, name)
);
CREATE INDEX hf_pubsub_by_name ON hf_pubsub (kind, name);
CREATE TABLE hf_listeners (
    listener INTEGER PRIMARY KEY,
    seen INTEGER NOT NULL
);
CREATE TABLE hf_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    origin INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    channel BLOB NOT NULL,
    payload BLOB NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX hf_messages_by_time ON hf_messages (at);
",
    "
CREATE TABLE hf_scripts (
    sha BLOB PRIMARY KEY,
    body BLOB NOT NULL
);
CREATE TABLE hf_libraries (
    name BLOB PRIMARY KEY,
    code BLOB NOT NULL
);
CREATE TABLE hf_functions (
    name BLOB PRIMARY KEY,
    library BLOB NOT NULL,
    flags INTEGER NOT NULL,
    description BLOB
);
",
    "
ALTER TABLE hf_keys ADD COLUMN len INTEGER NOT NULL DEFAULT 0;
UPDATE hf_keys SET len = CASE kind
    WHEN 1 THEN (SELECT COUNT(*) FROM hf_list e WHERE e.key = hf_keys.key)
    WHEN 2 THEN (SELECT COUNT(*) FROM hf_set e WHERE e.key = hf_keys.key)
    WHEN 3 THEN (SELECT COUNT(*) FROM hf_zset e WHERE e.key = hf_keys.key)
    WHEN 4 THEN (SELECT COUNT(*) FROM hf_hash e WHERE e.key = hf_keys.key)
    WHEN 5 THEN (SELECT COUNT(*) FROM hf_stream e WHERE e.key = hf_keys.key)
    ELSE 0 END;
CREATE TRIGGER hf_list_added AFTER INSERT ON hf_list BEGIN UPDATE hf_keys SET len = len + 1 WHERE key = NEW.key; END;
CREATE TRIGGER hf_list_removed AFTER DELETE ON hf_list BEGIN UPDATE hf_keys SET len = len - 1 WHERE key = OLD.key; END;
CREATE TRIGGER hf_set_added AFTER INSERT ON hf_set BEGIN UPDATE hf_keys SET len = len + 1 WHERE key = NEW.key; END;
CREATE TRIGGER hf_set_removed AFTER DELETE ON hf_set BEGIN UPDATE hf_keys SET len = len - 1 WHERE key = OLD.key; END;
CREATE TRIGGER hf_zset_added AFTER INSERT ON hf_zset BEGIN UPDATE hf_keys SET len = len + 1 WHERE key = NEW.key; END;
CREATE TRIGGER hf_zset_removed AFTER DELETE ON hf_zset BEGIN UPDATE hf_keys SET len = len - 1 WHERE key = OLD.key; END;
CREATE TRIGGER hf_hash_added AFTER INSERT ON hf_hash BEGIN UPDATE hf_keys SET len = len + 1 WHERE key = NEW.key; END;
CREATE TRIGGER hf_hash_removed AFTER DELETE ON hf_hash BEGIN UPDATE hf_keys SET len = len - 1 WHERE key = OLD.key; END;
CREATE TRIGGER hf_stream_added AFTER INSERT ON hf_stream BEGIN UPDATE hf_keys SET len = len + 1 WHERE key = NEW.key; END;
CREATE TRIGGER hf_stream_removed AFTER DELETE ON hf_stream BEGIN UPDATE hf_keys SET len = len - 1 WHERE key = OLD.key; END;
CREATE INDEX hf_hash_by_id ON hf_hash (key, id);
CREATE INDEX hf_set_by_id ON hf_set (key, id);
",
];

const POSTGRES: &[&str] = &[
    "
CREATE TABLE hf_keys (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key BYTEA NOT NULL UNIQUE,
    kind BIGINT NOT NULL,
    expires_at BIGINT,
    value BYTEA
);
CREATE INDEX hf_keys_expiry ON hf_keys (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE hf_hash (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key BYTEA NOT NULL,
    field BYTEA NOT NULL,
    value BYTEA NOT NULL,
    UNIQUE (key, field)
);
CREATE TABLE hf_set (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key BYTEA NOT NULL,
    member BYTEA NOT NULL,
    UNIQUE (key, member)
);
CREATE TABLE hf_zset (
    key BYTEA NOT NULL,
    member BYTEA NOT NULL,
    score DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (key, member)
);
CREATE INDEX hf_zset_by_score ON hf_zset (key, score, member);
CREATE TABLE hf_list (
    key BYTEA NOT NULL,
    pos BIGINT NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (key, pos)
);
CREATE TABLE hf_stream (
    key BYTEA NOT NULL,
    ms BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    fields BYTEA NOT NULL,
    PRIMARY KEY (key, ms, seq)
);
",
    "
CREATE TABLE hf_tokens (
    token BYTEA PRIMARY KEY,
    reply BYTEA NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX hf_tokens_expiry ON hf_tokens (expires_at);
",
    "
CREATE TABLE hf_watch (
    key BYTEA PRIMARY KEY,
    version BIGINT NOT NULL
);
",
    "
CREATE TABLE hf_xgroup (
    key BYTEA NOT NULL,
    grp BYTEA NOT NULL,
    ms BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    entries_read BIGINT NOT NULL,
    PRIMARY KEY (key, grp)
);
CREATE TABLE hf_xconsumer (
    key BYTEA NOT NULL,
    grp BYTEA NOT NULL,
    name BYTEA NOT NULL,
    seen_at BIGINT NOT NULL,
    PRIMARY KEY (key, grp, name)
);
CREATE TABLE hf_xpel (
    key BYTEA NOT NULL,
    grp BYTEA NOT NULL,
    ms BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    consumer BYTEA NOT NULL,
    delivered_at BIGINT NOT NULL,
    deliveries BIGINT NOT NULL,
    PRIMARY KEY (key, grp, ms, seq)
);
CREATE INDEX hf_xpel_by_consumer ON hf_xpel (key, grp, consumer, ms, seq);
",
    "
CREATE TABLE hf_pubsub (
    listener BIGINT NOT NULL,
    kind BIGINT NOT NULL,
    name BYTEA NOT NULL,
    clients BIGINT NOT NULL,
    PRIMARY KEY (listener, kind, name)
);
CREATE INDEX hf_pubsub_by_name ON hf_pubsub (kind, name);
",
    "
CREATE TABLE hf_scripts (
    sha BYTEA PRIMARY KEY,
    body BYTEA NOT NULL
);
CREATE TABLE hf_libraries (
    name BYTEA PRIMARY KEY,
    code BYTEA NOT NULL
);
CREATE TABLE hf_functions (
    name BYTEA PRIMARY KEY,
    library BYTEA NOT NULL,
    flags BIGINT NOT NULL,
    description BYTEA
);
",
    "
ALTER TABLE hf_keys ADD COLUMN len BIGINT NOT NULL DEFAULT 0;
UPDATE hf_keys SET len = CASE kind
    WHEN 1 THEN (SELECT COUNT(*) FROM hf_list e WHERE e.key = hf_keys.key)
    WHEN 2 THEN (SELECT COUNT(*) FROM hf_set e WHERE e.key = hf_keys.key)
    WHEN 3 THEN (SELECT COUNT(*) FROM hf_zset e WHERE e.key = hf_keys.key)
    WHEN 4 THEN (SELECT COUNT(*) FROM hf_hash e WHERE e.key = hf_keys.key)
    WHEN 5 THEN (SELECT COUNT(*) FROM hf_stream e WHERE e.key = hf_keys.key)
    ELSE 0 END;
CREATE FUNCTION hf_count_added() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE hf_keys k SET len = k.len + n.c FROM (SELECT key, COUNT(*) AS c FROM added GROUP BY key) n WHERE k.key = n.key; RETURN NULL; END $$;
CREATE FUNCTION hf_count_removed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE hf_keys k SET len = k.len - n.c FROM (SELECT key, COUNT(*) AS c FROM removed GROUP BY key) n WHERE k.key = n.key; RETURN NULL; END $$;
CREATE TRIGGER hf_list_added AFTER INSERT ON hf_list REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION hf_count_added();
CREATE TRIGGER hf_list_removed AFTER DELETE ON hf_list REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION hf_count_removed();
CREATE TRIGGER hf_set_added AFTER INSERT ON hf_set REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION hf_count_added();
CREATE TRIGGER hf_set_removed AFTER DELETE ON hf_set REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION hf_count_removed();
CREATE TRIGGER hf_zset_added AFTER INSERT ON hf_zset REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION hf_count_added();
CREATE TRIGGER hf_zset_removed AFTER DELETE ON hf_zset REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION hf_count_removed();
CREATE TRIGGER hf_hash_added AFTER INSERT ON hf_hash REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION hf_count_added();
CREATE TRIGGER hf_hash_removed AFTER DELETE ON hf_hash REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION hf_count_removed();
CREATE TRIGGER hf_stream_added AFTER INSERT ON hf_stream REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION hf_count_added();
CREATE TRIGGER hf_stream_removed AFTER DELETE ON hf_stream REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION hf_count_removed();
CREATE INDEX hf_hash_by_id ON hf_hash (key, id);
CREATE INDEX hf_set_by_id ON hf_set (key, id);
",
];

/// Brings the schema to the newest version.
///
/// # Errors
/// The database's error, unchanged, for `classify`.
pub async fn migrate(conn: Db<'_>, dialect: Dialect) -> Result<(), Fail> {
    let (begin, steps) = match dialect {
        Dialect::Sqlite => ("BEGIN IMMEDIATE", SQLITE),
        Dialect::Postgres => ("BEGIN", POSTGRES),
    };
    let mut ctx = Ctx::on(conn, 0, Proto::Resp2, dialect, true);
    ctx.conn.batch(begin).await?;
    let result = async {
        if dialect == Dialect::Postgres {
            // Any constant will do: it only has to be the same for every holdfast.
            ctx.conn
                .batch("SELECT pg_advisory_xact_lock(7361626)")
                .await?;
        }
        ctx.conn
            .batch("CREATE TABLE IF NOT EXISTS hf_schema (version BIGINT NOT NULL)")
            .await?;
        let version: Option<i64> = ctx
            .scalar(stmt("SELECT MAX(version) FROM hf_schema"))
            .await?;
        let version = usize::try_from(version.unwrap_or(0)).unwrap_or(0);
        for (index, step) in steps.iter().enumerate().skip(version) {
            // One statement at a time, each ending a line with `;`.
            for statement in step.split(";\n").filter(|s| !s.trim().is_empty()) {
                ctx.conn.batch(statement).await?;
            }
            ctx.execute(
                stmt("INSERT INTO hf_schema (version) VALUES ($1)").bind((index + 1) as i64),
            )
            .await?;
        }
        Ok::<(), Fail>(())
    }
    .await;
    match result {
        Ok(()) => ctx.conn.batch("COMMIT").await,
        Err(e) => {
            let _ = ctx.conn.batch("ROLLBACK").await;
            Err(e)
        }
    }
}
