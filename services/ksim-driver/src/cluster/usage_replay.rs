//! Replays recorded usage: every read interval of recorded time, each running replayed pod is
//! given what `domain::usage` says it uses at that recorded time, through the pool's
//! `SetPodUsage` (which serves it as the metrics API).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use ksim_proto::ksim::vnode::v1 as pb;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::task::AbortOnDropHandle;

use super::launch_lifetimes::UsageFeed;
use crate::{
    domain::usage::{ContainerUsage, UsagePlan},
    mesh::Mesh,
};

/// The pool takes at most this many pods per request.
const PODS_PER_REQUEST: usize = 10_000;

/// When the recording says nothing of how often usage was read: metrics-server's resolution in
/// its release manifest, the tracer's default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);

/// What the usage replay did, for the report.
#[derive(Debug, Default)]
pub struct UsageCounts {
    /// Pod updates from the matched recorded pod's usage.
    pub matched: AtomicU64,
    /// Pod updates from a share of the owner's recorded total.
    pub shared: AtomicU64,
    /// Pod updates from the default (the pod's requests).
    pub defaulted: AtomicU64,
    /// Updates the pool had no running pod for (finished meanwhile).
    pub not_running: AtomicU64,
    /// Requests the pool refused or did not answer.
    pub failed: AtomicU64,
}

/// The replay's clock in recorded time: `origin` is `start_ms`, and each real second `speed`.
#[derive(Debug, Clone, Copy)]
pub struct RecordedClock {
    pub origin: Instant,
    pub start_ms: i64,
    pub speed: f64,
}

impl RecordedClock {
    fn now_ms(&self) -> i64 {
        let elapsed_ms = self.origin.elapsed().as_secs_f64() * 1000.0 * self.speed;
        self.start_ms.saturating_add(elapsed_ms as i64)
    }
}

/// Sets usage every `interval` of recorded time (divided by the speed) until dropped.
pub fn spawn(
    mesh: Mesh,
    feed: UsageFeed,
    clock: RecordedClock,
    interval: Duration,
    counts: Arc<UsageCounts>,
) -> AbortOnDropHandle<()> {
    let period = interval
        .div_f64(clock.speed)
        .max(Duration::from_millis(100));
    AbortOnDropHandle::new(tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(clock.origin, period);
        // A slow pool delays the next update rather than bunching them up.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let running = feed.roster().running();
            let plan = feed.recorded.plan(clock.now_ms(), &running);
            send(&mesh, &plan, &counts).await;
        }
    }))
}

async fn send(mesh: &Mesh, plan: &UsagePlan<'_, String>, counts: &UsageCounts) {
    counts.matched.fetch_add(plan.matched, Ordering::Relaxed);
    counts.shared.fetch_add(plan.shared, Ordering::Relaxed);
    counts
        .defaulted
        .fetch_add(plan.defaulted, Ordering::Relaxed);
    let pods: Vec<pb::PodUsage> = plan
        .updates
        .iter()
        .filter_map(|(key, containers)| message(key, containers))
        .collect();
    for chunk in pods.chunks(PODS_PER_REQUEST) {
        match mesh.set_pod_usage(chunk.to_vec()).await {
            Ok(answer) => {
                counts
                    .not_running
                    .fetch_add(answer.not_running.into(), Ordering::Relaxed);
            }
            Err(error) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, pods = chunk.len(), "replaying usage");
            }
        }
    }
}

fn message(key: &str, containers: &[ContainerUsage]) -> Option<pb::PodUsage> {
    let (namespace, name) = key.split_once('/')?;
    Some(pb::PodUsage {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        containers: containers
            .iter()
            .map(|container| pb::ContainerUsage {
                name: container.name.clone(),
                cpu_nanocores: container.cpu_nanocores,
                memory_bytes: container.memory_bytes,
            })
            .collect(),
    })
}
