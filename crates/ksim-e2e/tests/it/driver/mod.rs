//! The driver with the pool and the tracer (in-process, or its binary for kill -9).

mod bare_pods;
mod common;
mod control;
mod cronjobs;
mod hpa;
mod lifetimes;
mod rbac;
mod repeat;
mod replay;
mod restart;
mod settle;
mod transform;
mod usage;
mod validate;
