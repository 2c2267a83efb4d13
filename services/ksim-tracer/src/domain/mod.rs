//! The tracer's rules, free of Kubernetes clients and files: what is recorded, how objects are
//! sanitised and hashed, and how an export is cut from the log.

pub mod cluster;
pub mod export;
pub mod filter;
pub mod key;
pub mod kinds;
pub mod lifecycle;
pub mod recorder;
pub mod sanitize;
pub mod selector;
pub mod usage;
