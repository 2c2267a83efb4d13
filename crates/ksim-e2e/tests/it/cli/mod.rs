//! The `ksim` binary as a user runs it, against the real control plane and service binaries.

mod calibrate;
mod cli_env;
mod common;
mod configuration;
mod demo;
mod disruptions;
mod experiment;
mod fan_out;
mod fidelity;
mod gpus;
mod hpa;
mod karpenter;
mod mesh_telemetry;
mod pool_restart;
mod probe;
mod provisioning;
mod readme_walk;
mod refusals;
mod rightsizing;
mod show;
mod trace_cli;
mod transform;
mod usage;
mod validate;
