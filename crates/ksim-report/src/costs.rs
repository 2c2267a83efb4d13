//! What a team pays and waits, in recorded time whatever the speed.
//!
//! - Node-hours: each bucket's registered nodes times its width (the timeline is recorded time
//!   already), per group. A node costs from when it registers, ready or not, as in a cloud.
//! - Cost: node-hours times the cloud provider's price for the group's instance type. A group
//!   whose nodes each carry a price of their own (a Karpenter NodePool's, of the instance types
//!   Karpenter chose) costs each bucket's priced nodes at their prices. A group with neither
//!   is listed as unpriced and left out; no price is ever made up.
//! - Pending pod-seconds: every pod's time from first seen until it ran, or until it was
//!   deleted or the replay ended for pods that never ran, times the speed.
//! - Packing: requested over allocatable CPU and memory of the simulation's nodes, per bucket
//!   with nodes; mean and peak.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::input::{Observations, ResourceUsage};
use super::model::{Costs, GroupCost, TimelineBucket, WaitReason};
use super::timeline::{effective_speed, recorded};
use crate::NodeChangeKind;

const MS_PER_HOUR: f64 = 3_600_000.0;

pub(super) fn costs(obs: &Observations, timeline: &[TimelineBucket], bucket_ms: u64) -> Costs {
    let hours_per_bucket = bucket_ms as f64 / MS_PER_HOUR;
    let mut groups: BTreeMap<String, GroupCost> = BTreeMap::new();
    let names: BTreeSet<&String> = timeline
        .iter()
        .flat_map(|bucket| bucket.nodes.iter().map(|count| &count.node_group))
        .chain(obs.prices.keys())
        .chain(obs.scale_events.iter().map(|event| &event.group))
        .collect();
    for name in names {
        let price = obs.prices.get(name);
        groups.insert(
            name.clone(),
            GroupCost {
                group: name.clone(),
                instance_type: price.map(|p| p.instance_type.clone()).unwrap_or_default(),
                price_per_hour: price.and_then(|p| p.per_hour),
                ..GroupCost::default()
            },
        );
    }
    // Per group: the cost of its own-priced nodes, while every node it had carried a price.
    let mut own_priced: BTreeMap<&String, Option<f64>> = BTreeMap::new();
    for bucket in timeline {
        for count in &bucket.nodes {
            let name = &count.node_group;
            if let Some(group) = groups.get_mut(name) {
                group.node_hours += (count.nodes + count.launching_nodes) as f64 * hours_per_bucket;
            }
            let cost = own_priced.entry(name).or_insert(Some(0.0));
            *cost = match *cost {
                Some(sum) if count.priced_nodes == count.nodes => {
                    Some(sum + count.price_micros_per_hour as f64 / 1e6 * hours_per_bucket)
                }
                _ => None,
            };
        }
    }
    for change in &obs.node_changes {
        if change.kind == NodeChangeKind::Added
            && !change.instance_type.is_empty()
            && let Some(group) = groups.get_mut(&change.group)
        {
            *group
                .instance_types
                .entry(change.instance_type.clone())
                .or_default() += 1;
        }
    }
    for event in &obs.scale_events {
        if let Some(group) = groups.get_mut(&event.group) {
            if event.delta >= 0 {
                group.scale_ups += event.delta.unsigned_abs();
            } else {
                group.scale_downs += event.delta.unsigned_abs();
            }
        }
    }
    for group in groups.values_mut() {
        group.cost = match group.price_per_hour {
            Some(price) => Some(price * group.node_hours),
            // Priced per node only where some node had a price.
            None => own_priced.get(&group.group).copied().flatten().filter(|_| {
                timeline.iter().any(|b| {
                    b.nodes
                        .iter()
                        .any(|c| c.node_group == group.group && c.priced_nodes > 0)
                })
            }),
        };
    }
    let groups: Vec<GroupCost> = groups.into_values().collect();
    let priced: Vec<f64> = groups.iter().filter_map(|group| group.cost).collect();

    let speed = effective_speed(obs.speed);
    let waited: Duration = obs
        .pending_times
        .iter()
        .copied()
        .chain(obs.never_ran.iter().map(|pod| pod.waited))
        .sum();
    let (cpu_mean, cpu_peak) = packing(timeline, |usage| {
        (usage.requested_cpu_millis, usage.allocatable_cpu_millis)
    });
    let (memory_mean, memory_peak) = packing(timeline, |usage| {
        (usage.requested_memory_bytes, usage.allocatable_memory_bytes)
    });
    Costs {
        node_hours: groups.iter().map(|group| group.node_hours).sum(),
        cost: (!priced.is_empty()).then(|| priced.iter().sum()),
        unpriced_groups: groups
            .iter()
            .filter(|group| group.cost.is_none())
            .map(|group| group.group.clone())
            .collect(),
        groups,
        pending_pod_seconds: recorded(waited, speed).as_secs_f64(),
        pods_never_scheduled: obs.never_ran.iter().filter(|pod| !pod.bound).count() as u64,
        pods_evicted: obs.pods_evicted,
        pods_preempted: obs.pods_preempted,
        cpu_requested_mean: cpu_mean,
        cpu_requested_peak: cpu_peak,
        memory_requested_mean: memory_mean,
        memory_requested_peak: memory_peak,
    }
}

/// Mean and peak of requested over allocatable across the buckets that have allocatable.
fn packing(timeline: &[TimelineBucket], of: impl Fn(&ResourceUsage) -> (u64, u64)) -> (f64, f64) {
    let ratios: Vec<f64> = timeline
        .iter()
        .filter_map(|bucket| bucket.usage.as_ref())
        .map(&of)
        .filter(|(_, allocatable)| *allocatable > 0)
        .map(|(requested, allocatable)| requested as f64 / allocatable as f64)
        .collect();
    if ratios.is_empty() {
        return (0.0, 0.0);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    (mean, ratios.iter().copied().fold(0.0, f64::max))
}

/// The same reason for the same owner from several events as one, most frequent first.
pub(super) fn waits(reasons: &[WaitReason]) -> Vec<WaitReason> {
    let mut counts: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for wait in reasons {
        *counts
            .entry((wait.source.clone(), wait.reason.clone(), wait.owner.clone()))
            .or_default() += wait.count;
    }
    let mut waits: Vec<WaitReason> = counts
        .into_iter()
        .map(|((source, reason, owner), count)| WaitReason {
            source,
            reason,
            owner,
            count,
        })
        .collect();
    // Stable: equal counts keep source, reason, owner order.
    waits.sort_by_key(|wait| std::cmp::Reverse(wait.count));
    waits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeGroupCount;
    use crate::input::{GroupPrice, NeverRan, ScaleEvent};

    fn bucket(nodes: &[(&str, u64)], usage: ResourceUsage) -> TimelineBucket {
        TimelineBucket {
            nodes: nodes
                .iter()
                .map(|(g, n)| NodeGroupCount {
                    node_group: (*g).to_owned(),
                    nodes: *n,
                    ready_nodes: *n,
                    ..NodeGroupCount::default()
                })
                .collect(),
            usage: Some(usage),
            ..TimelineBucket::default()
        }
    }

    #[test]
    fn node_hours_and_cost_come_from_recorded_buckets_and_known_prices() {
        let cpu = |requested, allocatable| ResourceUsage {
            requested_cpu_millis: requested,
            allocatable_cpu_millis: allocatable,
            ..ResourceUsage::default()
        };
        // One hour of 2 m5 nodes then 1, in 30 min buckets; c5 one node throughout.
        let timeline = [
            bucket(&[("m5", 2), ("c5", 1)], cpu(1500, 6000)),
            bucket(&[("m5", 1), ("c5", 1)], cpu(3000, 4000)),
        ];
        let obs = Observations {
            speed: 10.0,
            prices: BTreeMap::from([
                (
                    "m5".to_owned(),
                    GroupPrice {
                        instance_type: "m5.large".into(),
                        per_hour: Some(0.096),
                    },
                ),
                (
                    "c5".to_owned(),
                    GroupPrice {
                        instance_type: "c5.large".into(),
                        per_hour: None,
                    },
                ),
            ]),
            scale_events: vec![ScaleEvent {
                offset: Duration::from_secs(1),
                group: "m5".into(),
                delta: -1,
            }],
            // Wall clock: 2 s + 1 s that ran, 0.5 s of one that never did; at 10x.
            pending_times: vec![Duration::from_secs(2), Duration::from_secs(1)],
            never_ran: vec![NeverRan {
                waited: Duration::from_millis(500),
                bound: false,
                gpus: false,
                gpus_asked: 0,
            }],
            ..Observations::default()
        };
        let costs = costs(&obs, &timeline, 1_800_000);
        let m5 = &costs.groups[1];
        assert_eq!(m5.group, "m5");
        assert!((m5.node_hours - 1.5).abs() < 1e-9, "{m5:?}");
        assert!((m5.cost.unwrap() - 0.144).abs() < 1e-9, "{m5:?}");
        assert_eq!((m5.scale_ups, m5.scale_downs), (0, 1));
        let c5 = &costs.groups[0];
        assert_eq!((c5.instance_type.as_str(), c5.cost), ("c5.large", None));
        assert!((costs.node_hours - 2.5).abs() < 1e-9);
        // Only the priced group is in the cost; the other is named, not guessed.
        assert!((costs.cost.unwrap() - 0.144).abs() < 1e-9);
        assert_eq!(costs.unpriced_groups, ["c5"]);
        assert!((costs.pending_pod_seconds - 35.0).abs() < 1e-9);
        assert_eq!(costs.pods_never_scheduled, 1);
        assert!((costs.cpu_requested_mean - 0.5).abs() < 1e-9);
        assert!((costs.cpu_requested_peak - 0.75).abs() < 1e-9);
        assert_eq!(costs.memory_requested_peak, 0.0);

        // A seat CA asked for is billed while its node boots: one more m5 in the first bucket.
        let mut booting = timeline.clone();
        if let Some(m5) = booting[0].nodes.iter_mut().find(|c| c.node_group == "m5") {
            m5.launching_nodes = 1;
        }
        let costs = super::costs(&obs, &booting, 1_800_000);
        assert!((costs.groups[1].node_hours - 2.0).abs() < 1e-9, "{costs:?}");
        assert!((costs.groups[1].cost.unwrap() - 0.192).abs() < 1e-9);
    }

    #[test]
    fn a_nodepool_costs_each_node_at_its_own_price_and_names_the_types_chosen() {
        let priced = |nodes, micros| TimelineBucket {
            nodes: vec![NodeGroupCount {
                node_group: "general".to_owned(),
                nodes,
                ready_nodes: nodes,
                priced_nodes: nodes,
                price_micros_per_hour: micros,
                ..NodeGroupCount::default()
            }],
            ..TimelineBucket::default()
        };
        // Half an hour of an m5.large (0.096), then half an hour of it and an m5.xlarge (0.192).
        let timeline = [priced(1, 96_000), priced(2, 288_000)];
        let change = |node: &str, instance_type: &str| crate::input::ObservedNodeChange {
            offset: Duration::ZERO,
            group: "general".into(),
            node: node.into(),
            kind: NodeChangeKind::Added,
            instance_type: instance_type.into(),
            owner: None,
        };
        let obs = Observations {
            node_changes: vec![change("a", "m5.large"), change("b", "m5.xlarge")],
            ..Observations::default()
        };
        let costs = costs(&obs, &timeline, 1_800_000);
        let general = &costs.groups[0];
        assert!((general.node_hours - 1.5).abs() < 1e-9, "{general:?}");
        assert!((general.cost.unwrap() - 0.192).abs() < 1e-9, "{general:?}");
        assert_eq!(general.price_per_hour, None, "no one price for the group");
        assert_eq!(
            general.instance_types,
            BTreeMap::from([("m5.large".to_owned(), 1), ("m5.xlarge".to_owned(), 1)])
        );
        assert!(costs.unpriced_groups.is_empty());

        // A node without a price of its own in any bucket leaves the group unpriced.
        let mut partly = priced(2, 96_000);
        partly.nodes[0].priced_nodes = 1;
        let costs = super::costs(&obs, &[priced(1, 96_000), partly], 1_800_000);
        assert_eq!(costs.groups[0].cost, None);
        assert_eq!(costs.unpriced_groups, ["general"]);
    }

    #[test]
    fn no_price_at_all_is_no_cost() {
        let timeline = [bucket(&[("m5", 1)], ResourceUsage::default())];
        let costs = costs(&Observations::default(), &timeline, 1000);
        assert_eq!(costs.cost, None);
        assert_eq!(costs.unpriced_groups, ["m5"]);
    }

    #[test]
    fn waits_are_summed_per_reason_and_owner_most_frequent_first() {
        let wait = |reason: &str, owner: &str, count| WaitReason {
            source: "scheduler".into(),
            reason: reason.into(),
            owner: owner.into(),
            count,
        };
        let summed = waits(&[
            wait("Insufficient cpu", "Deployment/web", 2),
            wait("untolerated taint", "Deployment/web", 1),
            wait("Insufficient cpu", "Deployment/web", 3),
            wait("Insufficient cpu", "Deployment/db", 1),
        ]);
        assert_eq!(
            summed,
            [
                wait("Insufficient cpu", "Deployment/web", 5),
                wait("Insufficient cpu", "Deployment/db", 1),
                wait("untolerated taint", "Deployment/web", 1),
            ]
        );
    }
}
