//! The integration tests of the SQL backends: PostgreSQL started with `initdb` into a temp
//! directory and SQLite files, against a real `redis-server` where a test compares replies.
//! One test binary; `cargo test --test sql queues::` runs one file's tests.

#[path = "../support/mod.rs"]
mod support;

mod crash;
mod differential;
mod drivers;
mod dump;
mod encodings;
mod faults;
mod mirror;
mod queues;
mod scripts;
