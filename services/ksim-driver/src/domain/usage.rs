//! Usage replay: what each replayed pod uses at a recorded time (issue 36).
//!
//! The tracer records, per pod, samples of what each container used, and per pod its owner and
//! launch (the lifecycles). At a recorded time `t` a recorded pod *uses* its latest sample at or
//! before `t` while it is alive and that sample is fresh (not older than [`STALE_AFTER`] read
//! intervals: a pod the metrics API stopped reporting uses nothing known).
//!
//! The replayed pods of an owner get the recorded pods' usage:
//! - when as many run as recorded pods of that owner use something at `t`, the n-th to have
//!   started uses what the n-th recorded one (in launch order) used: matched as lifetimes are;
//! - otherwise the owner's recorded total is shared equally among the replicas running, per
//!   container name: the load is conserved, as a load balancer spreading the same traffic over
//!   more or fewer replicas would (an HPA under test, a transform that scales replicas);
//! - a pod whose owner used nothing known at `t` (not recorded, or no usage) uses the stated
//!   default: what its containers request.
//!
//! Times are recorded time, milliseconds since the Unix epoch.

use std::collections::{BTreeMap, HashMap};

use ksim_trace::pb;

use super::lifetimes::Owner;

/// A recorded sample older than this many read intervals no longer counts.
pub const STALE_AFTER: i64 = 3;

/// One container's usage: CPU in nanocores, memory working set in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

#[derive(Debug, Clone)]
struct RecordedPod {
    /// (start_ms, launch_index): launch order within the owner.
    order: (i64, u32),
    start_ms: i64,
    /// `i64::MAX` while it had not ended by the trace's end.
    end_ms: i64,
    /// By time, oldest first.
    samples: Vec<(i64, Vec<ContainerUsage>)>,
}

impl RecordedPod {
    fn usage_at(&self, t: i64, stale_ms: i64) -> Option<&[ContainerUsage]> {
        if t < self.start_ms || t >= self.end_ms {
            return None;
        }
        let after = self.samples.partition_point(|(at, _)| *at <= t);
        let (at, containers) = self.samples.get(after.checked_sub(1)?)?;
        (t - at <= stale_ms).then_some(containers.as_slice())
    }
}

/// The recording's usage by owner, ready to be asked at any recorded time.
#[derive(Debug, Clone, Default)]
pub struct RecordedUsage {
    /// Per owner, its recorded pods that have samples, in launch order.
    owners: HashMap<Owner, Vec<RecordedPod>>,
    stale_ms: i64,
    samples: u64,
    /// Samples of pods the trace holds no lifecycle for: ignored.
    ignored: u64,
}

impl RecordedUsage {
    /// `interval_ms`: how often the tracer read usage (the header's); a sample is fresh for
    /// [`STALE_AFTER`] of them. Samples are taken in any order.
    pub fn new(
        samples: &[pb::UsageSample],
        lifecycles: &[pb::PodLifecycle],
        interval_ms: i64,
    ) -> Self {
        // A recorded pod is known by namespace and name; a name reused by a later pod (a
        // StatefulSet's) belongs to whichever was alive when the sample was taken.
        let mut by_name: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        let mut pods: Vec<(Owner, RecordedPod)> = Vec::new();
        for lifecycle in lifecycles {
            let Some(gvk) = lifecycle.owner_gvk.as_ref() else {
                continue;
            };
            let owner = Owner::new(
                gvk.into(),
                &lifecycle.owner_namespace,
                &lifecycle.owner_name,
            );
            by_name
                .entry((
                    lifecycle.owner_namespace.as_str(),
                    lifecycle.pod_name.as_str(),
                ))
                .or_default()
                .push(pods.len());
            pods.push((
                owner,
                RecordedPod {
                    order: (lifecycle.start_ms, lifecycle.launch_index),
                    start_ms: lifecycle.start_ms,
                    end_ms: if lifecycle.end_ms > 0 {
                        lifecycle.end_ms
                    } else {
                        i64::MAX
                    },
                    samples: Vec::new(),
                },
            ));
        }
        let mut ignored = 0;
        for sample in samples {
            let alive = by_name
                .get(&(sample.namespace.as_str(), sample.pod.as_str()))
                .and_then(|candidates| {
                    candidates.iter().copied().find(|&i| {
                        let pod = &pods[i].1;
                        // Metrics are averaged over the window before the timestamp.
                        sample.timestamp_ms >= pod.start_ms && sample.timestamp_ms <= pod.end_ms
                    })
                });
            let Some(i) = alive else {
                ignored += 1;
                continue;
            };
            let containers = sample
                .containers
                .iter()
                .map(|container| ContainerUsage {
                    name: container.name.clone(),
                    cpu_nanocores: u64::try_from(container.cpu_nanocores).unwrap_or(0),
                    memory_bytes: u64::try_from(container.memory_bytes).unwrap_or(0),
                })
                .collect();
            pods[i].1.samples.push((sample.timestamp_ms, containers));
        }
        let mut owners: HashMap<Owner, Vec<RecordedPod>> = HashMap::new();
        for (owner, mut pod) in pods {
            if pod.samples.is_empty() {
                continue;
            }
            pod.samples.sort_by_key(|(at, _)| *at);
            owners.entry(owner).or_default().push(pod);
        }
        for pods in owners.values_mut() {
            pods.sort_by_key(|pod| pod.order);
        }
        Self {
            owners,
            stale_ms: interval_ms.max(1).saturating_mul(STALE_AFTER),
            samples: samples.len() as u64 - ignored,
            ignored,
        }
    }

    /// Samples matched to a recorded pod.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Samples of pods the trace does not hold, left out.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Whether the recording holds usage of `owner`'s pods.
    pub fn has_owner(&self, owner: &Owner) -> bool {
        self.owners.contains_key(owner)
    }

    /// What `owner`'s recorded pods used at `t`, in launch order (only those that used
    /// something known).
    fn recorded_at(&self, owner: &Owner, t: i64) -> Vec<&[ContainerUsage]> {
        self.owners.get(owner).map_or_else(Vec::new, |pods| {
            pods.iter()
                .filter_map(|pod| pod.usage_at(t, self.stale_ms))
                .collect()
        })
    }

    /// The usage of every running replayed pod at recorded time `t`. `running` holds them with
    /// their recorded owner (if the replay could tell it) and their containers' requests (the
    /// default), each owner's pods in the order they started.
    pub fn plan<'a, P>(&self, t: i64, running: &'a [RunningPod<P>]) -> UsagePlan<'a, P> {
        let mut by_owner: HashMap<&Owner, Vec<&RunningPod<P>>> = HashMap::new();
        let mut plan = UsagePlan::default();
        for pod in running {
            match pod.owner.as_ref().filter(|owner| self.has_owner(owner)) {
                Some(owner) => by_owner.entry(owner).or_default().push(pod),
                None => plan.defaulted(pod),
            }
        }
        for (owner, pods) in by_owner {
            let recorded = self.recorded_at(owner, t);
            if recorded.is_empty() {
                pods.into_iter().for_each(|pod| plan.defaulted(pod));
            } else if recorded.len() == pods.len() {
                for (pod, used) in pods.into_iter().zip(recorded) {
                    plan.updates.push((&pod.id, used.to_vec()));
                    plan.matched += 1;
                }
            } else {
                let shared = share(&recorded, pods.len());
                for pod in pods {
                    plan.updates.push((&pod.id, shared.clone()));
                    plan.shared += 1;
                }
            }
        }
        plan
    }
}

/// A replayed pod that runs now.
#[derive(Debug, Clone)]
pub struct RunningPod<P> {
    /// Whatever the caller knows the pod by.
    pub id: P,
    /// Its recorded owner, when the replay could tell it.
    pub owner: Option<Owner>,
    /// Its containers' requests: what it uses when the recording says nothing.
    pub requests: Vec<ContainerUsage>,
}

/// The replayed pods running now, in the order they started: what [`RecordedUsage::plan`]
/// shares the recording among.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    by_order: BTreeMap<u64, RunningPod<String>>,
    order_of: HashMap<String, u64>,
    next: u64,
}

impl Roster {
    /// A pod (by `namespace/name`) started; one already running keeps its place.
    pub fn started(&mut self, key: String, owner: Option<Owner>, requests: Vec<ContainerUsage>) {
        if self.order_of.contains_key(&key) {
            return;
        }
        self.order_of.insert(key.clone(), self.next);
        self.by_order.insert(
            self.next,
            RunningPod {
                id: key,
                owner,
                requests,
            },
        );
        self.next += 1;
    }

    /// A pod finished or went.
    pub fn gone(&mut self, key: &str) {
        if let Some(order) = self.order_of.remove(key) {
            self.by_order.remove(&order);
        }
    }

    /// The running pods, oldest start first.
    pub fn running(&self) -> Vec<RunningPod<String>> {
        self.by_order.values().cloned().collect()
    }
}

/// What each running replayed pod uses, and how each figure was come by.
#[derive(Debug)]
pub struct UsagePlan<'a, P> {
    pub updates: Vec<(&'a P, Vec<ContainerUsage>)>,
    /// Pods given their matched recorded pod's usage.
    pub matched: u64,
    /// Pods given a share of their owner's recorded total.
    pub shared: u64,
    /// Pods given the default (their requests).
    pub defaulted: u64,
}

impl<P> Default for UsagePlan<'_, P> {
    fn default() -> Self {
        Self {
            updates: Vec::new(),
            matched: 0,
            shared: 0,
            defaulted: 0,
        }
    }
}

impl<'a, P> UsagePlan<'a, P> {
    fn defaulted(&mut self, pod: &'a RunningPod<P>) {
        self.defaulted += 1;
        if !pod.requests.is_empty() {
            self.updates.push((&pod.id, pod.requests.clone()));
        }
    }
}

/// The recorded pods' total per container name, divided among `replicas`; containers in the
/// order they first appear.
fn share(recorded: &[&[ContainerUsage]], replicas: usize) -> Vec<ContainerUsage> {
    let mut total: Vec<ContainerUsage> = Vec::new();
    for container in recorded.iter().flat_map(|pod| pod.iter()) {
        match total.iter_mut().find(|t| t.name == container.name) {
            Some(t) => {
                t.cpu_nanocores = t.cpu_nanocores.saturating_add(container.cpu_nanocores);
                t.memory_bytes = t.memory_bytes.saturating_add(container.memory_bytes);
            }
            None => total.push(container.clone()),
        }
    }
    let replicas = replicas.max(1) as u64;
    for t in &mut total {
        t.cpu_nanocores /= replicas;
        t.memory_bytes /= replicas;
    }
    total
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::domain::Gvk;

    const INTERVAL: i64 = 15_000;

    fn web() -> Owner {
        Owner::new(Gvk::new("apps", "v1", "Deployment"), "shop", "web")
    }

    fn lifecycle(pod: &str, launch_index: u32, start_ms: i64, end_ms: i64) -> pb::PodLifecycle {
        pb::PodLifecycle {
            owner_gvk: Some(pb::GroupVersionKind {
                group: "apps".to_owned(),
                version: "v1".to_owned(),
                kind: "Deployment".to_owned(),
            }),
            owner_namespace: "shop".to_owned(),
            owner_name: "web".to_owned(),
            pod_spec_hash: 7,
            launch_index,
            start_ms,
            end_ms,
            pod_name: pod.to_owned(),
            ..Default::default()
        }
    }

    fn sample(pod: &str, at: i64, millicores: i64, mebibytes: i64) -> pb::UsageSample {
        pb::UsageSample {
            timestamp_ms: at,
            window_ms: INTERVAL,
            namespace: "shop".to_owned(),
            pod: pod.to_owned(),
            containers: vec![pb::ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: millicores * 1_000_000,
                memory_bytes: mebibytes << 20,
            }],
        }
    }

    fn running(id: &'static str, owner: Option<Owner>) -> RunningPod<&'static str> {
        RunningPod {
            id,
            owner,
            requests: vec![ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 100_000_000,
                memory_bytes: 32 << 20,
            }],
        }
    }

    fn cpu_millicores(plan: &UsagePlan<'_, &str>, id: &str) -> u64 {
        let (_, containers) = plan.updates.iter().find(|(p, _)| **p == id).unwrap();
        containers[0].cpu_nanocores / 1_000_000
    }

    fn recording() -> RecordedUsage {
        RecordedUsage::new(
            &[
                sample("web-a", 10_000, 200, 64),
                sample("web-b", 12_000, 400, 128),
                sample("web-a", 25_000, 300, 64),
                // A pod the trace holds no lifecycle for.
                sample("stranger", 10_000, 999, 1),
            ],
            &[
                lifecycle("web-a", 0, 1_000, 0),
                lifecycle("web-b", 1, 2_000, 40_000),
            ],
            INTERVAL,
        )
    }

    #[test]
    fn as_many_replicas_as_recorded_use_their_matched_pods_usage_in_launch_order() {
        let usage = recording();
        assert_eq!((usage.samples(), usage.ignored()), (3, 1));
        let pods = [
            running("first", Some(web())),
            running("second", Some(web())),
        ];
        let plan = usage.plan(20_000, &pods);
        assert_eq!((plan.matched, plan.shared, plan.defaulted), (2, 0, 0));
        assert_eq!(cpu_millicores(&plan, "first"), 200);
        assert_eq!(cpu_millicores(&plan, "second"), 400);
        // Later, the first pod's newer sample counts.
        assert_eq!(cpu_millicores(&usage.plan(30_000, &pods), "first"), 300);
    }

    #[test]
    fn other_replica_counts_share_the_recorded_total_so_load_is_conserved() {
        let usage = recording();
        let four: Vec<_> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|id| running(id, Some(web())))
            .collect();
        let plan = usage.plan(20_000, &four);
        assert_eq!((plan.matched, plan.shared), (0, 4));
        // (200 + 400) millicores over four replicas.
        assert!(four.iter().all(|pod| cpu_millicores(&plan, pod.id) == 150));
        let one = [running("only", Some(web()))];
        assert_eq!(cpu_millicores(&usage.plan(20_000, &one), "only"), 600);
    }

    #[test]
    fn stale_ended_and_unknown_pods_fall_back_to_the_default() {
        let usage = recording();
        // web-b ended at 40 s; web-a's last sample (25 s) is stale after 25 + 45 s.
        let pods = [running("first", Some(web())), running("bare", None)];
        let plan = usage.plan(50_000, &pods);
        assert_eq!((plan.matched, plan.defaulted), (1, 1));
        assert_eq!(cpu_millicores(&plan, "first"), 300);
        assert_eq!(cpu_millicores(&plan, "bare"), 100);
        let plan = usage.plan(71_000, &pods[..1]);
        assert_eq!((plan.matched, plan.defaulted), (0, 1));
        assert_eq!(cpu_millicores(&plan, "first"), 100);
        // Before any sample nothing is known either.
        assert_eq!(usage.plan(5_000, &pods[..1]).defaulted, 1);
    }

    #[test]
    fn the_roster_keeps_start_order_and_forgets_pods_that_went() {
        let mut roster = Roster::default();
        roster.started("shop/b".to_owned(), Some(web()), vec![]);
        roster.started("shop/a".to_owned(), Some(web()), vec![]);
        roster.started("shop/b".to_owned(), None, vec![]);
        roster.started("shop/c".to_owned(), None, vec![]);
        roster.gone("shop/a");
        let ids: Vec<String> = roster.running().into_iter().map(|pod| pod.id).collect();
        assert_eq!(ids, ["shop/b", "shop/c"]);
    }

    #[test]
    fn a_reused_pod_name_belongs_to_the_pod_alive_at_the_sample() {
        let usage = RecordedUsage::new(
            &[
                sample("db-0", 5_000, 100, 1),
                sample("db-0", 25_000, 700, 1),
            ],
            &[
                lifecycle("db-0", 0, 1_000, 10_000),
                lifecycle("db-0", 1, 20_000, 0),
            ],
            INTERVAL,
        );
        let pods = [running("db", Some(web()))];
        assert_eq!(cpu_millicores(&usage.plan(8_000, &pods), "db"), 100);
        assert_eq!(cpu_millicores(&usage.plan(30_000, &pods), "db"), 700);
    }
}
