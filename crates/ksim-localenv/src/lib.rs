//! The local environment's parts: a real local Kubernetes control plane for tests and for
//! `ksim-env`, and (in [`environment`]) how clients start, find and stop an environment.
//!
//! The binaries are built from Go modules by `deploy/control-plane/build.sh` and cached
//! outside the repository; [`ControlPlane::start`] runs them on free loopback ports:
//!
//! ```no_run
//! # async fn example() -> Result<(), ksim_localenv::Error> {
//! let control_plane = ksim_localenv::ControlPlane::start().await?;
//! let client = control_plane.client();
//! # Ok(()) }
//! ```
//!
//! Several control planes can run at once. Dropping one kills the processes it started;
//! if the thread is panicking (a failed test) or `KSIM_KEEP_TESTENV` is set, its directory
//! with the component logs is kept and its path printed.
//!
//! [`ClusterAutoscaler`] runs the real cluster-autoscaler, built by
//! `deploy/cluster-autoscaler/build.sh`, against a control plane and an externalgrpc provider.
//! [`MetricsServer`] runs the real metrics-server, built by `deploy/metrics-server/build.sh`,
//! behind the control plane's aggregation layer.

pub mod autoscaler;
mod binaries;
mod control_plane;
pub mod environment;
mod error;
pub mod fixtures;
pub mod karpenter;
mod kubeconfig;
pub mod manifests;
pub mod metrics_server;
pub mod nodes;
pub mod pki;
pub mod pods;
mod ports;
mod process;
pub mod tuning;
pub mod wait;

pub use autoscaler::{
    ClientTls, CloudConfig, ClusterAutoscaler, ClusterAutoscalerBinary, ClusterAutoscalerBuilder,
};
pub use binaries::{ControlPlaneBinaries, cache_root, kubernetes_version};
pub use control_plane::{ControlPlane, ControlPlaneBuilder};
pub use error::Error;
pub use karpenter::{Karpenter, KarpenterBinary, KarpenterBuilder};
pub use metrics_server::{MetricsServer, MetricsServerBinary, MetricsServerBuilder};
pub use ports::{free_port, free_port_range};
pub use tuning::{Setting, Tuning};
