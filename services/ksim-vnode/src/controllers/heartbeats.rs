//! Keeps every registered node alive the way a kubelet does: lease renewals every quarter of
//! the lease duration (jittered and spread by node), and a status refresh now and then. A
//! failed node gets neither.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;

use super::Context;
use crate::{
    apiserver::Renewal,
    domain::node::Phase,
    domain::{
        heartbeat::{initial_offset, jittered, lease_seconds, renew_interval},
        node::phase_conditions,
    },
    index::NodeState,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beat {
    Renew,
    Status,
}

/// The lease every node holds: the pool's own (its flag) until `SetNodeLease` sets another.
#[derive(Debug)]
pub struct NodeLease {
    own: Duration,
    /// Nanoseconds of the lease set; 0: none, the pool's own holds.
    set: AtomicU64,
}

impl NodeLease {
    pub fn new(own: Duration) -> Self {
        Self {
            own,
            set: AtomicU64::new(0),
        }
    }

    /// The lease in force.
    pub fn get(&self) -> Duration {
        match self.set.load(Ordering::Relaxed) {
            0 => self.own,
            nanos => Duration::from_nanos(nanos),
        }
    }

    /// Sets the lease (`None`: the pool's own again) and returns the one in force. The
    /// heartbeats pick it up on their next tick.
    pub fn set(&self, lease: Option<Duration>) -> Duration {
        // A lease is at most an hour (checked by the caller), which fits in u64 nanoseconds.
        let nanos = lease.map_or(0, |lease| {
            u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX)
        });
        self.set.store(nanos, Ordering::Relaxed);
        self.get()
    }
}

/// How often the heartbeats look for due nodes: a quarter of the renewal interval, so a renewal
/// is at most that late, but no busier than every 10 ms (a 100 ms lease is renewed every 25 ms)
/// nor lazier than every second.
fn tick_for(interval: Duration) -> tokio::time::Interval {
    let tick = (interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

pub async fn run(ctx: Context) {
    let mut lease = ctx.lease.get();
    let mut interval = renew_interval(lease);
    let mut ticker = tick_for(interval);
    loop {
        ticker.tick().await;
        let now_in_force = ctx.lease.get();
        if now_in_force != lease {
            lease = now_in_force;
            interval = renew_interval(lease);
            ticker = tick_for(interval);
            // Renewals planned at the old interval would keep a shortened lease waiting.
            ctx.index().respread_renewals(interval, Instant::now());
            tracing::info!(?lease, "node lease changed");
        }
        beat_due_nodes(&ctx, interval, lease_seconds(lease)).await;
    }
}

async fn beat_due_nodes(ctx: &Context, interval: Duration, lease_seconds: i32) {
    let now = Instant::now();
    let status_period = ctx.config.node_status_period();
    let due: Vec<(String, Beat)> = {
        let mut index = ctx.index();
        let mut due = Vec::new();
        let mut failed: i64 = 0;
        for node in index.nodes_mut() {
            if node.failed {
                // Powered off: nothing renewed or written until it recovers, which makes both
                // due at once.
                failed += 1;
                continue;
            }
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
        ctx.metrics.failed_nodes.set(failed);
        due
    };
    stream::iter(due)
        .map(|(name, beat)| beat_one(ctx, name, beat, lease_seconds))
        .buffer_unordered(usize::from(ctx.config.api_concurrency))
        .collect::<Vec<()>>()
        .await;
}

async fn beat_one(ctx: &Context, name: String, beat: Beat, lease_seconds: i32) {
    let now = Timestamp::now();
    let result = match beat {
        Beat::Renew => ctx.nodes.renew_lease(&name, lease_seconds).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_set_holds_until_unset_restores_the_pools_own() {
        let lease = NodeLease::new(Duration::from_secs(40));
        assert_eq!(lease.get(), Duration::from_secs(40));
        assert_eq!(
            lease.set(Some(Duration::from_millis(2500))),
            Duration::from_millis(2500)
        );
        assert_eq!(lease.get(), Duration::from_millis(2500));
        assert_eq!(lease.set(None), Duration::from_secs(40));
    }
}
