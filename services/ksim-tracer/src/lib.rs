//! The tracer store: watches a real cluster and keeps a durable, bounded record of its object changes.
//!
//! - [`domain`]: recording rules, sanitising, hashing, export cutting; pure and unit-tested.
//! - [`log`]: the durable, bounded, segmented log on disk.
//! - [`store`]: the log plus the recorder's in-memory view; [`exporter`] and [`imports`] read
//!   and write trace files; [`spill`] is where an export sorts what does not fit in memory.
//! - [`watch`]: the Kubernetes adapter (connecting is `ksim_kube::connect`); [`usage`] reads
//!   the metrics API.
//! - [`grpc`]: the `TraceStore` service and its error mapping.
//! - [`runtime`]: the flags and the one way to start the service (`main` is one call).

pub mod config;
pub mod domain;
pub mod exporter;
pub mod grpc;
pub mod imports;
pub mod log;
pub mod runtime;
pub mod spill;
pub mod store;
pub mod usage;
pub mod watch;
