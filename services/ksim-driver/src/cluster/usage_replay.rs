//! Replays recorded usage: every read interval of recorded time, each running replayed pod is
//! given what `domain::usage` says it uses at that recorded time, through the pool's
//! `SetPodUsage` (which serves it as the metrics API).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use ksim_proto::ksim::vnode::v1 as pb;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::task::AbortOnDropHandle;

use super::launch_lifetimes::UsageFeed;
use crate::{
    domain::usage::{ContainerUsage, RunningPod, UsagePlan},
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
    /// What containers' limits did, per workload (see [`LimitCounts`]).
    pub limits: Mutex<LimitCounts>,
    /// The last round's totals over the pods the pool took, as set: CPU in millicores and
    /// memory in bytes, for the report's buckets. What was set, not what the pool serves: the
    /// pool caps CPU at limits and its readings are not the driver's to see.
    pub used_cpu_millis: AtomicU64,
    pub used_memory_bytes: AtomicU64,
}

/// What `pods` were set to use in all: CPU in millicores (summed in nanocores first, so that
/// many small figures do not round away), memory in bytes.
fn totals<'a>(pods: impl IntoIterator<Item = &'a pb::PodUsage>) -> (u64, u64) {
    let (nanocores, bytes) = pods.into_iter().flat_map(|pod| &pod.containers).fold(
        (0_u64, 0_u64),
        |(cpu, memory), container| {
            (
                cpu.saturating_add(container.cpu_nanocores),
                memory.saturating_add(container.memory_bytes),
            )
        },
    );
    (nanocores / 1_000_000, bytes)
}

/// OOM kills, throttled CPU and pressure evictions the pool answered `SetPodUsage` with, per
/// recorded owner.
#[derive(Debug, Default)]
pub struct LimitCounts {
    /// By `Kind/namespace/name` as recorded (`Pod/namespace/name` for an unmatched pod).
    by_workload: HashMap<String, Limited>,
}

/// What limits did to one workload's pods; throttled CPU-seconds in wall time.
#[derive(Debug, Default, Clone, Copy)]
struct Limited {
    oom_kills: u64,
    throttled: f64,
    evictions: u64,
}

impl LimitCounts {
    fn add(&mut self, workload: String, oom_kills: u64, throttled_cpu_seconds: f64) {
        let entry = self.by_workload.entry(workload).or_default();
        entry.oom_kills += oom_kills;
        entry.throttled += throttled_cpu_seconds;
    }

    fn evicted(&mut self, workload: String) {
        self.by_workload.entry(workload).or_default().evictions += 1;
    }

    /// Into the report, throttled CPU in recorded time: what a container wanted beyond its
    /// limit over an interval the speed shortened.
    pub fn into_report(&self, speed: f64, used: &mut ksim_report::UsageReplay) {
        let limited = self.by_workload.values();
        used.oom_kills = limited.clone().map(|l| l.oom_kills).sum();
        used.throttled_cpu_seconds = limited.clone().map(|l| l.throttled * speed).sum();
        used.pressure_evictions = limited.map(|l| l.evictions).sum();
        let mut workloads: Vec<ksim_report::WorkloadLimits> = self
            .by_workload
            .iter()
            .map(|(name, limited)| ksim_report::WorkloadLimits {
                name: name.clone(),
                oom_kills: limited.oom_kills,
                throttled_cpu_seconds: limited.throttled * speed,
                pressure_evictions: limited.evictions,
            })
            .collect();
        workloads.sort_by(|a, b| {
            b.oom_kills
                .cmp(&a.oom_kills)
                .then(b.pressure_evictions.cmp(&a.pressure_evictions))
                .then(b.throttled_cpu_seconds.total_cmp(&a.throttled_cpu_seconds))
                .then_with(|| a.name.cmp(&b.name))
        });
        workloads.truncate(ksim_report::MAX_LIMITED_WORKLOADS);
        used.workloads = workloads;
    }
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
            send(&mesh, &plan, &running, &counts).await;
        }
    }))
}

async fn send(
    mesh: &Mesh,
    plan: &UsagePlan<'_, String>,
    running: &[RunningPod<String>],
    counts: &UsageCounts,
) {
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
    let mut set: Vec<&[pb::PodUsage]> = Vec::new();
    for chunk in pods.chunks(PODS_PER_REQUEST) {
        match mesh.set_pod_usage(chunk.to_vec()).await {
            Ok(answer) => {
                set.push(chunk);
                counts
                    .not_running
                    .fetch_add(answer.not_running.into(), Ordering::Relaxed);
                if !answer.oom_kills.is_empty()
                    || !answer.throttled.is_empty()
                    || !answer.evicted.is_empty()
                {
                    // Looked up per kill, throttling and eviction: by key, not by scanning.
                    let owners: HashMap<&str, &RunningPod<String>> =
                        running.iter().map(|pod| (pod.id.as_str(), pod)).collect();
                    let mut limits = counts.limits.lock().unwrap_or_else(PoisonError::into_inner);
                    for kill in &answer.oom_kills {
                        limits.add(workload_of(&owners, &kill.namespace, &kill.name), 1, 0.0);
                    }
                    for evicted in &answer.evicted {
                        limits.evicted(workload_of(&owners, &evicted.namespace, &evicted.name));
                    }
                    for throttled in &answer.throttled {
                        limits.add(
                            workload_of(&owners, &throttled.namespace, &throttled.name),
                            0,
                            throttled.cpu_seconds,
                        );
                    }
                }
            }
            Err(error) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, pods = chunk.len(), "replaying usage");
            }
        }
    }
    // Pods the pool no longer ran are in these totals; the answer only counts them.
    let (cpu_millis, memory_bytes) = totals(set.into_iter().flatten());
    counts.used_cpu_millis.store(cpu_millis, Ordering::Relaxed);
    counts
        .used_memory_bytes
        .store(memory_bytes, Ordering::Relaxed);
}

/// The recorded owner of the replayed pod `namespace/name`, as the report names workloads.
fn workload_of(
    running: &HashMap<&str, &RunningPod<String>>,
    namespace: &str,
    name: &str,
) -> String {
    let key = format!("{namespace}/{name}");
    running
        .get(key.as_str())
        .and_then(|pod| pod.owner.as_ref())
        .map_or_else(
            || format!("Pod/{key}"),
            |owner| format!("{}/{}/{}", owner.gvk.kind, owner.namespace, owner.name),
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Gvk, lifetimes::Owner};

    fn pod(key: &str, owner: Option<&str>) -> RunningPod<String> {
        RunningPod {
            id: key.to_owned(),
            owner: owner.map(|name| Owner::new(Gvk::new("apps", "v1", "Deployment"), "shop", name)),
            requests: Vec::new(),
        }
    }

    #[test]
    fn totals_sum_every_container_of_every_pod_in_millicores_and_bytes() {
        let usage = |name: &str, cpu_nanocores, memory_bytes| pb::ContainerUsage {
            name: name.to_owned(),
            cpu_nanocores,
            memory_bytes,
        };
        let pods = [
            message(
                "shop/web-1",
                &[ContainerUsage {
                    name: "app".into(),
                    cpu_nanocores: 250_600_000,
                    memory_bytes: 100 << 20,
                }],
            )
            .unwrap(),
            pb::PodUsage {
                namespace: "shop".into(),
                name: "web-2".into(),
                containers: vec![usage("app", 250_600_000, 100 << 20), usage("proxy", 1, 5)],
            },
        ];
        // 501.2 millicores: summed before rounding down, not 250 + 250.
        assert_eq!(totals(&pods), (501, (200 << 20) + 5));
        assert_eq!(totals(&[]), (0, 0));
    }

    #[test]
    fn limits_are_counted_per_recorded_owner_in_recorded_time_most_kills_first() {
        let pods = [
            pod("use-shop/web-1", Some("web")),
            pod("use-shop/api-1", Some("api")),
            pod("use-shop/lone", None),
        ];
        let running: HashMap<&str, &RunningPod<String>> =
            pods.iter().map(|pod| (pod.id.as_str(), pod)).collect();
        let mut limits = LimitCounts::default();
        limits.add(workload_of(&running, "use-shop", "api-1"), 0, 1.5);
        limits.add(workload_of(&running, "use-shop", "web-1"), 1, 0.0);
        limits.add(workload_of(&running, "use-shop", "web-1"), 1, 0.25);
        limits.add(workload_of(&running, "use-shop", "lone"), 1, 0.0);
        // A pod that finished since: named by itself.
        limits.add(workload_of(&running, "use-shop", "gone"), 0, 0.5);
        limits.evicted(workload_of(&running, "use-shop", "api-1"));

        let mut used = ksim_report::UsageReplay::default();
        limits.into_report(4.0, &mut used);
        assert_eq!(used.oom_kills, 3);
        assert_eq!(used.throttled_cpu_seconds, 9.0);
        assert_eq!(used.pressure_evictions, 1);
        let named: Vec<(&str, u64, u64, f64)> = used
            .workloads
            .iter()
            .map(|w| {
                (
                    w.name.as_str(),
                    w.oom_kills,
                    w.pressure_evictions,
                    w.throttled_cpu_seconds,
                )
            })
            .collect();
        assert_eq!(
            named,
            [
                ("Deployment/shop/web", 2, 0, 1.0),
                ("Pod/use-shop/lone", 1, 0, 0.0),
                ("Deployment/shop/api", 0, 1, 6.0),
                ("Pod/use-shop/gone", 0, 0, 2.0),
            ]
        );
    }
}
