//! Running one simulation: load the trace, then the phases in turn (configure, prepare,
//! settle, play, drain), observe, report, and clean up however it ended. Each phase is a
//! module of its own; `run` puts them in order.

pub mod bare_pods;
pub mod cleanup;
pub mod configure;
pub mod context;
pub mod dispatch;
pub mod disruptions;
pub mod drain;
pub mod ending;
pub mod handle;
pub mod live;
pub mod nodes_kept;
pub mod play;
pub mod prepare;
pub mod progress;
pub mod queue;
pub mod run;
pub mod settle;
pub mod source;
#[cfg(test)]
mod test_cluster;
