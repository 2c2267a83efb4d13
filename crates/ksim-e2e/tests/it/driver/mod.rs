//! The driver with the pool and the tracer (in-process, or its binary for kill -9).

mod common;
mod control;
mod lifetimes;
mod rbac;
mod replay;
mod restart;
mod transform;
