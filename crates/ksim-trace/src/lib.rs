//! The ksim trace file format: writing, reading and validating trace files, and converting
//! SimKube traces and Alibaba's GPU cluster trace into them.
//!
//! A trace file is one zstd stream. Decompressed, it is a sequence of [`pb::TraceRecord`]
//! messages, each preceded by its length as a protobuf varint: a header first, then events in
//! non-decreasing timestamp order with pod lifecycles anywhere among them, and a trailer whose
//! totals let a reader tell a complete file from a truncated one. The schema is
//! `proto/ksim/trace/v1/trace_file.proto`.
//!
//! - [`TraceWriter`] writes a file record by record; [`TraceReader`] reads one back, checking
//!   every rule above as it goes; [`read_trace`] reads a whole file held in memory.
//! - [`inspect`] summarises a file without keeping its records.
//! - [`simkube`] converts a SimKube trace (format version 2, MessagePack).
//! - [`alibaba`] converts Alibaba's GPU cluster trace v2023 (a node list and a pod list, CSV).
//! - [`detect_format`] tells the two formats apart from a file's first bytes.
//! - [`time`] converts trace milliseconds to and from protobuf timestamps.
//! - [`gvk`] names kinds as SimKube and kubectl write them ("apps/v1.Deployment").
//! - [`hash`] hashes JSON values stably, and pod specs so that pods of one template match.
//! - [`cel_limits`] the size and nesting a CEL expression may have, checked before it is
//!   parsed (transform rules and experiment assertions both compile CEL).
//! - [`names`] the values the API server refuses that the trace tools check: namespace names,
//!   replicas.
//!
//! Reading never panics and never trusts a length before checking it against
//! [`MAX_RECORD_BYTES`]. `deploy/fuzz.sh` fuzzes the reader and the converter (the cargo-fuzz
//! project in `crates/ksim-trace/fuzz`).

pub mod alibaba;
pub mod cel_limits;
mod detect;
mod error;
mod framing;
pub mod gvk;
pub mod hash;
pub mod inspect;
pub mod names;
mod reader;
pub mod simkube;
mod source;
pub mod time;
mod trace;
mod validate;
mod writer;

pub use detect::detect_format;
pub use error::TraceError;
pub use ksim_proto::ksim::trace::v1 as pb;
pub use reader::{Record, TraceReader};
pub use trace::{Trace, read_trace};
pub use writer::TraceWriter;

/// The trace format version this crate writes, and the only one it reads.
pub const FORMAT_VERSION: u32 = 1;

/// Largest encoded record accepted. A length prefix above it is reported as corruption rather
/// than trusted as an allocation size, and the writer refuses to produce such a record.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// zstd level of written files: the library's default, a good speed/size balance for JSON.
pub const COMPRESSION_LEVEL: i32 = 3;

#[cfg(test)]
mod test_support;
