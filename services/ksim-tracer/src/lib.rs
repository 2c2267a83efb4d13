//! The tracer store: watches a real cluster and keeps a durable, bounded record of its object changes.

pub mod log;
