//! The local environment as a service: `ksim-env` starts a cluster (the embedded control plane
//! or an existing one), the namespace `ksim-system`, the four ksim services as child processes
//! on fixed loopback ports, and optionally cluster-autoscaler or Karpenter; it supervises them
//! and serves `ksim.env.v1.Environment`, through which the driver runs the scheduler and the
//! node autoscaler with a simulation's configuration. `ksim up` runs it in the foreground;
//! `ksim demo` and an experiment's runs start it as a child
//! (`ksim_localenv::environment::EnvironmentProcess`).
//!
//! - [`environment`]: [`environment::LocalEnv`], the environment and its start, supervision
//!   and stop.
//! - [`configuration`]: the configuration under test (scheduler, cluster-autoscaler, the cloud
//!   provider's file, Karpenter) and how it is checked and applied; [`grpc`] serves it.
//! - [`services`], [`cluster`], [`karpenter`]: the processes it runs; [`args`] their flags.
//! - [`runtime`]: the flags and the one way to start the service (`main` is one call).

pub mod args;
pub mod backoff;
pub mod cluster;
pub mod configuration;
pub mod environment;
pub mod grpc;
pub mod karpenter;
pub mod runtime;
pub mod services;

/// Where the driver keeps its Lease and seat Deployments; the pool and the cloud provider
/// must watch the same one.
pub const NAMESPACE: &str = "ksim-system";
