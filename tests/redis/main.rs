//! The integration tests that start real `redis-server`s (and, beside them, a relay that loses
//! replies, a TLS server, a PostgreSQL or SQLite where a test compares backends), gathered in
//! one test binary so CI links the crate once for them. `cargo test --test redis faults::`
//! runs one file's tests.

#[path = "../support/mod.rs"]
mod support;

mod differential;
mod faults;
mod hostile;
mod isolation;
mod logs;
mod monitor;
mod operations;
mod own_connection;
mod pipeline;
mod protocol;
mod pubsub;
mod reply_modes;
mod scrape;
mod server_commands;
mod smoke;
mod tls;
