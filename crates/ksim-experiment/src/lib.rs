//! The configuration under test in a what-if simulation. Pure: no process, no clock.
//!
//! - [`autoscaler`]: cluster-autoscaler flags as the user gives them (`FLAG=VALUE`, durations in
//!   recorded time) and as CA must run them at a replay speed (durations divided by it).
//! - [`scheduler`]: a `KubeSchedulerConfiguration` as the environment runs it (connected to
//!   the simulated cluster, leader election off); the real kube-scheduler judges the rest.
//! - [`experiment`]: an experiment file (a trace, its speed and repeats, the variants).
//! - [`assertions`]: `--assert` CEL expressions over the variants' figures.
//!
//! How long nodes take to come and go and pods to start is the provisioning model's, in its own
//! crate (`ksim-provisioning`), as is the duration syntax Go's flags take.

pub mod assertions;
pub mod autoscaler;
pub mod experiment;
pub mod scheduler;

pub use autoscaler::{AutoscalerFlag, AutoscalerFlags, FlagError, FlagSource};
pub use scheduler::SchedulerConfigError;
