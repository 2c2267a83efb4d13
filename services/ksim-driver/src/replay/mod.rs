//! Running one simulation: load the trace, prepare the cluster, apply events at their time,
//! observe, report, clean up.

pub mod bare_pods;
pub mod cleanup;
pub mod context;
pub mod handle;
pub mod live;
pub mod nodes_kept;
pub mod prepare;
pub mod progress;
pub mod queue;
pub mod run;
pub mod source;
