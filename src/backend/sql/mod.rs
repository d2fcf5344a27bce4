//! PostgreSQL and SQLite: the Redis data model on tables (`model`: one command table, a
//! folder of data types, each command's SQL written once for both databases) and the engine
//! that runs it (`engine`: a backend opened from its configuration, a request's transaction
//! and its commands, group commit, batched reads, deadlines, failover, the schema and expiry,
//! blocked clients and Pub/Sub). The model never uses the engine (`tests/offline/layout.rs`).

mod engine;
// Public for `tests/sql/drivers.rs` and `benches/sqlite_drivers.rs`, which run the model on
// both SQLite drivers; not an interface of the crate.
#[doc(hidden)]
pub mod model;

/// The schema's migrations, for a database a benchmark or test prepares itself.
#[doc(hidden)]
pub use engine::migrate;
pub use engine::{broker, postgres_hosts, SqlBackend, SqlDedicated, SqlStage};
pub use model::harmless_setting;
