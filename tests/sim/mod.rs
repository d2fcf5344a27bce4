//! The simulated world behind the executor's seam: a store and its faults.

pub mod store;
pub mod world;
