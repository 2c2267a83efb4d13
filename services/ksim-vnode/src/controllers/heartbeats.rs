//! Keeps every registered node alive the way a kubelet does: lease renewals every quarter of
//! the lease duration (jittered and spread by node), and a status refresh now and then.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;

use super::Context;
use crate::{
    apiserver::Renewal,
    domain::node::Phase,
    domain::{
        heartbeat::{initial_offset, jittered, renew_interval},
        node::phase_conditions,
    },
    index::NodeState,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beat {
    Renew,
    Status,
}

pub async fn run(ctx: Context) {
    let interval = renew_interval(ctx.config.lease_duration());
    let tick = (interval / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        beat_due_nodes(&ctx, interval).await;
    }
}

async fn beat_due_nodes(ctx: &Context, interval: Duration) {
    let now = Instant::now();
    let status_period = ctx.config.node_status_period();
    let due: Vec<(String, Beat)> = {
        let mut index = ctx.index();
        let mut due = Vec::new();
        for node in index.nodes_mut() {
            if node.state != NodeState::Registered {
                continue;
            }
            if node.next_renewal.is_some_and(|at| at <= now) {
                // The first renewal after registration lands at a spread offset, the next
                // ones every (jittered) interval after it.
                node.next_renewal = Some(match node.last_heartbeat {
                    None => now + initial_offset(&node.name, interval),
                    Some(_) => now + jittered(interval, fastrand::f64()),
                });
                due.push((node.name.clone(), Beat::Renew));
            }
            // A status write already in flight (a booting node turning Ready) goes first;
            // this one comes on a later tick.
            if node.next_status.is_some_and(|at| at <= now) && !node.status_busy {
                node.next_status = Some(now + jittered(status_period, fastrand::f64()));
                node.status_busy = true;
                due.push((node.name.clone(), Beat::Status));
            }
        }
        due
    };
    stream::iter(due)
        .map(|(name, beat)| beat_one(ctx, name, beat))
        .buffer_unordered(usize::from(ctx.config.api_concurrency))
        .collect::<Vec<()>>()
        .await;
}

async fn beat_one(ctx: &Context, name: String, beat: Beat) {
    let now = Timestamp::now();
    let result = match beat {
        Beat::Renew => ctx.nodes.renew_lease(&name).await,
        Beat::Status => {
            // The phase the node's model gives now (Ready since registration without one):
            // the transition time stays put across refreshes.
            let phase = ctx.index().node(&name).map(|node| node.phase(now));
            let (phase, since) = phase.unwrap_or((Phase::Ready, now));
            let written = ctx
                .nodes
                .refresh_conditions(&name, &phase_conditions(phase, now, since))
                .await
                .map(|()| Renewal::Renewed);
            let mut index = ctx.index();
            if let Some(node) = index.node_mut(&name) {
                node.status_busy = false;
                if written.is_ok() && phase == Phase::Ready {
                    // Its Ready write is done.
                    node.booting = false;
                }
                if written.is_ok() && node.phase(Timestamp::now()).0 != phase {
                    // The node changed phase (shutting down) while this write was under way
                    // and may have landed after that change's: written again on the next tick.
                    node.next_status = Some(Instant::now());
                }
                if node.booting {
                    // Its Ready write may have waited for this one.
                    ctx.reconcile_nodes.notify_one();
                }
            }
            drop(index);
            written
        }
    };
    match result {
        Ok(Renewal::Renewed) => {
            if beat == Beat::Renew {
                ctx.metrics.renewed();
            }
            if let Some(node) = ctx.index().node_mut(&name) {
                node.last_heartbeat = Some(now);
            }
        }
        Ok(Renewal::LeaseMissing) => {
            // The lease goes with its node: someone deleted the node. Forget it; if its group
            // still wants it, the node controller registers it again.
            tracing::info!(
                node = name,
                "lease gone, re-registering the node if still wanted"
            );
            ctx.index().remove_node(&name);
            ctx.reconcile_nodes.notify_one();
        }
        Err(error) if ksim_kube::is_not_found(&error) => {
            ctx.index().remove_node(&name);
            ctx.reconcile_nodes.notify_one();
        }
        Err(error) => ctx.metrics.api_error("node heartbeat", &error),
    }
}
