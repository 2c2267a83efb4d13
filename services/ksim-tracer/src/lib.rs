//! The tracer store: watches a real cluster and keeps a durable, bounded record of its object changes.
//!
//! - [`domain`]: recording rules, sanitising, hashing, export cutting; pure and unit-tested.
//! - [`log`]: the durable, bounded, segmented log on disk.

pub mod domain;
pub mod log;
