//! What a run's GPUs did, in recorded time, from the timeline's per-model samples:
//!
//! - Allocation: per model, GPUs requested by the pods bound to the simulation's nodes over the
//!   GPUs those nodes can allocate (`nvidia.com/gpu`), mean over the buckets with GPUs of the
//!   model, and peak.
//! - Fragmentation: idle GPUs on nodes that could take none of the GPU pods then pending (by
//!   their GPU, CPU and memory requests and required placement), over the allocatable ones.
//!   After "Beware of Fragmentation" (Weng et al., USENIX ATC '23), which counts a node's idle
//!   GPUs as fragmented when the workload's tasks cannot use them; here the workload is the GPU
//!   pods actually waiting, so with none waiting nothing is fragmented.
//! - GPU node-hours and cost: registered GPU nodes times the bucket width, at the group's price
//!   or each node's own (Karpenter's), as [`crate::costs`] prices all nodes.
//! - The GPU pods: how many, how long they waited, why (the waits of their owners).

use std::collections::BTreeMap;

use super::costs;
use super::input::Observations;
use super::model::{Accelerators, Costs, GpuModelSummary, GpuPodCount, GpuUsage, TimelineBucket};
use super::percentiles;
use super::timeline::recorded;

const MS_PER_HOUR: f64 = 3_600_000.0;

/// `None` when no node had GPUs and no pod asked for any.
pub(super) fn accelerators(
    obs: &Observations,
    timeline: &[TimelineBucket],
    costs: &Costs,
    bucket_ms: u64,
) -> Option<Accelerators> {
    let any_gpus = timeline.iter().any(|bucket| !bucket.gpus.is_empty());
    if !any_gpus && obs.gpu_pods == 0 {
        return None;
    }
    let hours_per_bucket = bucket_ms as f64 / MS_PER_HOUR;
    let mut gpu_node_hours = 0.0;
    let mut own_priced = 0.0;
    let mut group_hours: BTreeMap<&str, f64> = BTreeMap::new();
    for bucket in timeline {
        for count in &bucket.nodes {
            let hours = count.gpu_nodes as f64 * hours_per_bucket;
            gpu_node_hours += hours;
            *group_hours.entry(count.node_group.as_str()).or_default() += hours;
            own_priced += count.gpu_price_micros_per_hour as f64 / 1e6 * hours_per_bucket;
        }
    }
    // A group's price covers all its GPU nodes; without one, the nodes' own prices count.
    let mut priced = own_priced > 0.0;
    let mut gpu_cost = 0.0;
    for group in &costs.groups {
        let hours = group_hours
            .get(group.group.as_str())
            .copied()
            .unwrap_or(0.0);
        if let (Some(price), true) = (group.price_per_hour, hours > 0.0) {
            gpu_cost += price * hours;
            priced = true;
        }
    }
    let pending: Vec<_> = obs
        .gpu_pending_times
        .iter()
        .map(|&wall| recorded(wall, obs.speed))
        .collect();
    let gpu_waits: Vec<_> = obs
        .waits
        .iter()
        .filter(|wait| obs.gpu_owners.contains(&wait.owner))
        .cloned()
        .collect();
    Some(Accelerators {
        models: models(timeline),
        gpu_node_hours,
        gpu_cost: priced.then_some(gpu_cost + own_priced),
        gpu_pods: obs.gpu_pods,
        gpu_pods_never_scheduled: obs
            .never_ran
            .iter()
            .filter(|pod| pod.gpus && !pod.bound)
            .count() as u64,
        never_scheduled_by_gpus: by_gpus(obs),
        gpu_pod_pending_time: Some(percentiles::of(&pending)),
        waits: costs::waits(&gpu_waits),
        pending_gpu_pods_peak: timeline
            .iter()
            .map(|bucket| bucket.pending_gpu_pods)
            .max()
            .unwrap_or(0),
    })
}

/// The GPU pods never scheduled, by the GPUs each asked, fewest first.
fn by_gpus(obs: &Observations) -> Vec<GpuPodCount> {
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for pod in obs.never_ran.iter().filter(|pod| pod.gpus && !pod.bound) {
        *counts.entry(pod.gpus_asked).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(gpus, pods)| GpuPodCount { gpus, pods })
        .collect()
}

/// Over all models, `of` (allocated or fragmented GPUs) over the allocatable ones, mean over
/// the buckets with GPUs; `None` when none had any.
pub(super) fn overall(timeline: &[TimelineBucket], of: fn(&GpuUsage) -> u64) -> Option<f64> {
    let ratios: Vec<f64> = timeline
        .iter()
        .filter_map(|bucket| {
            let allocatable: u64 = bucket.gpus.iter().map(|gpus| gpus.allocatable).sum();
            let part: u64 = bucket.gpus.iter().map(of).sum();
            (allocatable > 0).then(|| part as f64 / allocatable as f64)
        })
        .collect();
    (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
}

fn models(timeline: &[TimelineBucket]) -> Vec<GpuModelSummary> {
    #[derive(Default)]
    struct Sums {
        allocatable_peak: u64,
        buckets: u64,
        allocated: f64,
        allocated_peak: f64,
        fragmented: f64,
        fragmented_peak: u64,
    }
    let mut models: BTreeMap<&str, Sums> = BTreeMap::new();
    for usage in timeline.iter().flat_map(|bucket| &bucket.gpus) {
        let sums = models.entry(usage.model.as_str()).or_default();
        sums.allocatable_peak = sums.allocatable_peak.max(usage.allocatable);
        sums.fragmented_peak = sums.fragmented_peak.max(usage.fragmented);
        if usage.allocatable == 0 {
            continue;
        }
        let allocated = usage.allocated as f64 / usage.allocatable as f64;
        sums.buckets += 1;
        sums.allocated += allocated;
        sums.allocated_peak = sums.allocated_peak.max(allocated);
        sums.fragmented += usage.fragmented as f64 / usage.allocatable as f64;
    }
    models
        .into_iter()
        .map(|(model, sums)| {
            let mean = |sum: f64| {
                if sums.buckets == 0 {
                    0.0
                } else {
                    sum / sums.buckets as f64
                }
            };
            GpuModelSummary {
                model: model.to_owned(),
                allocatable_peak: sums.allocatable_peak,
                allocated_mean: mean(sums.allocated),
                allocated_peak: sums.allocated_peak,
                fragmented_mean: mean(sums.fragmented),
                fragmented_peak: sums.fragmented_peak,
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::input::NeverRan;
    use crate::model::{GroupCost, NodeGroupCount, WaitReason};

    fn bucket(gpus: &[(&str, u64, u64, u64)], gpu_nodes: u64, pending: u64) -> TimelineBucket {
        TimelineBucket {
            nodes: vec![NodeGroupCount {
                node_group: "p3".to_owned(),
                nodes: gpu_nodes + 1,
                gpu_nodes,
                ..NodeGroupCount::default()
            }],
            gpus: gpus
                .iter()
                .map(|&(model, allocatable, allocated, fragmented)| GpuUsage {
                    model: model.to_owned(),
                    nodes: gpu_nodes,
                    allocatable,
                    allocated,
                    fragmented,
                })
                .collect(),
            pending_gpu_pods: pending,
            ..TimelineBucket::default()
        }
    }

    fn wait(owner: &str, reason: &str) -> WaitReason {
        WaitReason {
            source: "scheduler".to_owned(),
            reason: reason.to_owned(),
            owner: owner.to_owned(),
            count: 1,
        }
    }

    #[test]
    fn a_run_without_gpus_has_no_accelerators() {
        let obs = Observations::default();
        assert_eq!(
            accelerators(&obs, &[bucket(&[], 0, 0)], &Costs::default(), 1000),
            None
        );
    }

    #[test]
    fn allocation_fragmentation_hours_cost_and_waits_of_the_gpu_pods() {
        // Two 1-hour buckets: 8 V100s half then fully allocated, 2 of them fragmented
        // while a GPU pod waited; one A100 node idle.
        let timeline = vec![
            bucket(&[("A100", 8, 0, 0), ("V100", 8, 4, 2)], 2, 1),
            bucket(&[("A100", 8, 0, 0), ("V100", 8, 8, 0)], 2, 0),
        ];
        let obs = Observations {
            speed: 2.0,
            gpu_pods: 3,
            gpu_pending_times: vec![Duration::from_secs(10); 2],
            gpu_owners: ["Deployment/train".to_owned()].into(),
            never_ran: vec![
                NeverRan {
                    waited: Duration::from_secs(5),
                    bound: false,
                    gpus: true,
                    gpus_asked: 8,
                },
                NeverRan {
                    waited: Duration::from_secs(5),
                    bound: false,
                    gpus: false,
                    gpus_asked: 0,
                },
                // Bound, so scheduled: not counted.
                NeverRan {
                    waited: Duration::from_secs(5),
                    bound: true,
                    gpus: true,
                    gpus_asked: 1,
                },
            ],
            waits: vec![
                wait("Deployment/train", "Insufficient nvidia.com/gpu"),
                wait("Deployment/web", "Insufficient cpu"),
            ],
            ..Observations::default()
        };
        let costs = Costs {
            groups: vec![GroupCost {
                group: "p3".to_owned(),
                price_per_hour: Some(3.06),
                ..GroupCost::default()
            }],
            ..Costs::default()
        };
        let gpus = accelerators(&obs, &timeline, &costs, 3_600_000).unwrap();
        let v100 = &gpus.models[1];
        assert_eq!(
            (
                v100.model.as_str(),
                v100.allocatable_peak,
                v100.fragmented_peak
            ),
            ("V100", 8, 2)
        );
        assert!((v100.allocated_mean - 0.75).abs() < 1e-9, "{v100:?}");
        assert!((v100.allocated_peak - 1.0).abs() < 1e-9);
        assert!((v100.fragmented_mean - 0.125).abs() < 1e-9);
        assert_eq!(gpus.models[0].allocated_mean, 0.0);
        assert!((gpus.gpu_node_hours - 4.0).abs() < 1e-9);
        assert!((gpus.gpu_cost.unwrap() - 4.0 * 3.06).abs() < 1e-9);
        assert_eq!((gpus.gpu_pods, gpus.gpu_pods_never_scheduled), (3, 1));
        assert_eq!(
            gpus.never_scheduled_by_gpus,
            vec![GpuPodCount { gpus: 8, pods: 1 }]
        );
        // Recorded time: 10 s at 2x.
        let pending = gpus.gpu_pod_pending_time.unwrap();
        assert_eq!(pending.count, 2);
        assert_eq!(pending.p50, Some(ksim_proto::json::of_millis(20_000)));
        assert_eq!(gpus.waits.len(), 1);
        assert_eq!(gpus.waits[0].reason, "Insufficient nvidia.com/gpu");
        assert_eq!(gpus.pending_gpu_pods_peak, 1);
        // Over both models: 4 of 16, then 8 of 16 allocated; 2 of 16, then none fragmented.
        assert_eq!(overall(&timeline, |g| g.allocated), Some(0.375));
        assert_eq!(overall(&timeline, |g| g.fragmented), Some(0.0625));
        assert_eq!(overall(&[bucket(&[], 0, 0)], |g| g.allocated), None);
    }

    #[test]
    fn gpu_nodes_without_any_price_cost_nothing_said() {
        let timeline = vec![bucket(&[("V100", 1, 1, 0)], 1, 0)];
        let obs = Observations {
            gpu_pods: 1,
            ..Observations::default()
        };
        let gpus = accelerators(&obs, &timeline, &Costs::default(), 1000).unwrap();
        assert_eq!(gpus.gpu_cost, None);
    }
}
