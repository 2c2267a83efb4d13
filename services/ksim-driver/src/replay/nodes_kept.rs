//! Reads cluster-autoscaler's unremovable counts through the environment while a replay runs,
//! for the report's why-nodes-stayed (`domain::nodes_kept` folds them).

use std::{sync::Arc, time::Duration};

use ksim_trace::time::now_ms;

use super::{context::RunContext, live::Live};

/// Wall clock between reads: CA changes the gauge once per loop, at most every 100 ms at high
/// speeds, but a peak held by nodes for a loop is held for many; a second is plenty.
const EVERY: Duration = Duration::from_secs(1);
/// How long one read may take before it is skipped.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Reads until aborted. An environment without CA (or older than the call) ends the reading:
/// the report then has no figures. A failed read (CA restarting, say) is skipped.
pub async fn read_every_second(ctx: RunContext, live: Arc<Live>) {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match tokio::time::timeout(TIMEOUT, ctx.mesh.unremovable_nodes()).await {
            Ok(Ok(Some(reading))) => live.add_nodes_kept(now_ms(), &reading),
            Ok(Ok(None)) => {
                tracing::info!("no cluster-autoscaler to read why nodes stayed from");
                return;
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "reading cluster-autoscaler's unremovable nodes")
            }
            Err(_) => tracing::debug!("cluster-autoscaler's unremovable nodes: no answer in time"),
        }
    }
}
