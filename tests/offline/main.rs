//! The tests that start no server: the code's layout, the deploy kit and the image checked
//! with their own tools, and the simulation of the executor. One test binary;
//! `cargo test --test offline simulation` runs the simulation alone.

#[path = "../sim/mod.rs"]
mod sim;

mod deploy;
mod docs;
mod image;
mod layout;
mod simulation;
