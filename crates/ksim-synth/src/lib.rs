//! Synthetic traces: workloads generated from a seed rather than recorded, for trying a
//! replay before a recording exists and for benchmarks that need a realistic shape at a size
//! no test cluster has.
//!
//! - [`day`] writes a cluster's day: services whose Deployments follow the clock as their
//!   autoscalers would scale them, and batch Jobs that arrive mostly at night, with the
//!   lifetimes of their pods.
//!
//! Generation is pure and deterministic: the same parameters write the same bytes, so a
//! benchmark names its trace by its parameters.

pub mod day;
mod error;

pub use error::SynthError;
