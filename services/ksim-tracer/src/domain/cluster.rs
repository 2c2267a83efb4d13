//! The recorded cluster's own state, the ground truth a replay is compared with: each node's
//! sanitised record, and samples of Ready nodes per node group and of pods by phase per
//! namespace. Pure: fed node and pod objects and a clock, it says what to record.
//!
//! Memory is bounded by the nodes and the Pending/Running pods that exist now.

use std::collections::{BTreeMap, HashMap, HashSet};

use ksim_nodes::labels::SEAT_HOST_LABEL;
use ksim_proto::ksim::trace::v1 as pb;
use serde_json::Value;

use super::lifecycle::parse_time_ms;

/// Labels that name a node's group, most specific first: ksim's own, then the managed node
/// groups of EKS, GKE, Karpenter and AKS. A node with none of them is grouped by instance type.
pub const GROUP_LABELS: [&str; 6] = [
    "ksim.io/node-group",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/instance-type",
];

/// The taint cluster-autoscaler puts on a node it is about to remove; its value is when, in
/// seconds since the epoch.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Samples are written at most this often, so a burst of pod changes is one record.
pub const SAMPLE_INTERVAL_MS: i64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Running,
}

/// The cluster's state as recorded so far.
#[derive(Debug, Default)]
pub struct ClusterState {
    /// Live nodes by name, as last recorded.
    nodes: BTreeMap<String, pb::RecordedNode>,
    /// Pending and Running pods by (namespace, name); other phases are not counted.
    pods: HashMap<(String, String), Phase>,
    /// The counts of the last sample written, and when.
    last_sample: Option<pb::ClusterSample>,
}

impl ClusterState {
    /// A node exists in this state: its record when it differs from the last one recorded.
    pub fn node_applied(&mut self, node: &Value, now_ms: i64) -> Option<pb::RecordedNode> {
        let mut record = recorded_node(node, now_ms)?;
        // A removal keeps the time it began at; seen beginning, that is now (the taint's value
        // counts only for a node first seen tainted); one undone is forgotten.
        if record.removal_started_ms != 0
            && let Some(last) = self.nodes.get(&record.name)
        {
            record.removal_started_ms = match last.removal_started_ms {
                0 => now_ms,
                began => began,
            };
        }
        let unchanged = self
            .nodes
            .get(&record.name)
            .is_some_and(|last| same_node(last, &record));
        if unchanged {
            return None;
        }
        self.nodes.insert(record.name.clone(), record.clone());
        Some(record)
    }

    /// A node was deleted: its last state, marked deleted, if it was known.
    pub fn node_deleted(&mut self, name: &str, now_ms: i64) -> Option<pb::RecordedNode> {
        let last = self.nodes.remove(name)?;
        Some(pb::RecordedNode {
            timestamp_ms: now_ms,
            deleted_ms: now_ms,
            ..last
        })
    }

    /// A (re)list of nodes finished: the known nodes it did not list are gone.
    pub fn nodes_listed(&mut self, listed: &HashSet<String>, now_ms: i64) -> Vec<pb::RecordedNode> {
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|name| !listed.contains(*name))
            .cloned()
            .collect();
        gone.iter()
            .filter_map(|name| self.node_deleted(name, now_ms))
            .collect()
    }

    /// A pod exists in this state.
    pub fn pod_applied(&mut self, pod: &Value) {
        let Some(key) = pod_key(pod) else {
            return;
        };
        let phase = match pod.pointer("/status/phase").and_then(Value::as_str) {
            // A pod not yet given a phase is waiting like a Pending one.
            Some("Pending") | None => Some(Phase::Pending),
            Some("Running") => Some(Phase::Running),
            _ => None,
        };
        match phase {
            Some(phase) => self.pods.insert(key, phase),
            None => self.pods.remove(&key),
        };
    }

    pub fn pod_deleted(&mut self, pod: &Value) {
        if let Some(key) = pod_key(pod) {
            self.pods.remove(&key);
        }
    }

    /// A (re)list of pods finished: the pods it did not list are gone.
    pub fn pods_listed(&mut self, listed: &HashSet<(String, String)>) {
        self.pods.retain(|key, _| listed.contains(key));
    }

    /// A sample of the state now, when it differs from the last one written and that one is at
    /// least [`SAMPLE_INTERVAL_MS`] old; otherwise `None` (ask again later: nothing is lost,
    /// the next sample carries the counts as they are then).
    pub fn sample(&mut self, now_ms: i64) -> Option<pb::ClusterSample> {
        if let Some(last) = &self.last_sample
            && now_ms < last.timestamp_ms.saturating_add(SAMPLE_INTERVAL_MS)
        {
            return None;
        }
        let mut sample = pb::ClusterSample {
            timestamp_ms: now_ms,
            ..Default::default()
        };
        for node in self.nodes.values().filter(|node| node.ready) {
            *sample.ready_nodes.entry(node.group.clone()).or_default() += 1;
        }
        for ((namespace, _), phase) in &self.pods {
            let counts = sample.pods.entry(namespace.clone()).or_default();
            match phase {
                Phase::Pending => counts.pending += 1,
                Phase::Running => counts.running += 1,
            }
        }
        let unchanged = self
            .last_sample
            .as_ref()
            .is_some_and(|last| last.ready_nodes == sample.ready_nodes && last.pods == sample.pods);
        if unchanged {
            return None;
        }
        self.last_sample = Some(sample.clone());
        Some(sample)
    }

    /// Rebuilds from the log: the newest sample and the live nodes.
    pub fn restore_sample(&mut self, sample: &pb::ClusterSample) {
        self.last_sample = Some(sample.clone());
    }

    pub fn restore_node(&mut self, node: &pb::RecordedNode) {
        if node.deleted_ms == 0 {
            self.nodes.insert(node.name.clone(), node.clone());
        } else {
            self.nodes.remove(&node.name);
        }
    }
}

/// A node object's sanitised record: identity, group, labels, size and readiness; never its
/// addresses, images, taints' values aside, or any other status. `None` for the seat host of
/// a ksim pool: plumbing that holds seats, not a node workloads run on, so a replay (which
/// brings its own) is never compared with it.
pub fn recorded_node(node: &Value, now_ms: i64) -> Option<pb::RecordedNode> {
    let name = node.pointer("/metadata/name")?.as_str()?.to_owned();
    let labels = string_map(node.pointer("/metadata/labels"));
    if labels.contains_key(SEAT_HOST_LABEL) {
        return None;
    }
    let group = GROUP_LABELS
        .iter()
        .find_map(|label| labels.get(*label))
        .cloned()
        .unwrap_or_default();
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|condition| {
            condition.get("type").and_then(Value::as_str) == Some("Ready")
                && condition.get("status").and_then(Value::as_str) == Some("True")
        });
    Some(pb::RecordedNode {
        timestamp_ms: now_ms,
        removal_started_ms: removal_since(node, now_ms),
        name,
        group,
        labels: labels.into_iter().collect(),
        capacity: string_map(node.pointer("/status/capacity"))
            .into_iter()
            .collect(),
        allocatable: string_map(node.pointer("/status/allocatable"))
            .into_iter()
            .collect(),
        ready,
        created_ms: node
            .pointer("/metadata/creationTimestamp")
            .and_then(parse_time_ms)
            .unwrap_or(0),
        deleted_ms: 0,
    })
}

/// When the node's removal began, as far as this one object tells: cluster-autoscaler's taint
/// says when it was put (seconds, so only when that is not later than now), a cordon only that
/// it holds now; 0 when neither holds.
fn removal_since(node: &Value, now_ms: i64) -> i64 {
    let taint = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|taint| taint.get("key").and_then(Value::as_str) == Some(TO_BE_DELETED_TAINT));
    if let Some(taint) = taint {
        let put_ms = taint
            .get("value")
            .and_then(Value::as_str)
            .and_then(|value| value.parse::<i64>().ok())
            .and_then(|secs| secs.checked_mul(1_000))
            .filter(|ms| *ms > 0 && *ms <= now_ms);
        return put_ms.unwrap_or(now_ms);
    }
    let cordoned = node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true);
    if cordoned { now_ms } else { 0 }
}

fn same_node(a: &pb::RecordedNode, b: &pb::RecordedNode) -> bool {
    a.removal_started_ms == b.removal_started_ms
        && a.group == b.group
        && a.labels == b.labels
        && a.capacity == b.capacity
        && a.allocatable == b.allocatable
        && a.ready == b.ready
        && a.created_ms == b.created_ms
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
        .collect()
}

fn pod_key(pod: &Value) -> Option<(String, String)> {
    Some((
        pod.pointer("/metadata/namespace")?.as_str()?.to_owned(),
        pod.pointer("/metadata/name")?.as_str()?.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, ready: bool, labels: Value) -> Value {
        json!({
            "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc"},
            "status": {
                "capacity": {"cpu": "2", "memory": "8Gi"},
                "allocatable": {"cpu": "1930m", "memory": "7Gi"},
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
                "images": [{"names": ["registry.example/secret:1"]}],
                "nodeInfo": {"kubeletVersion": "v1.35.0"}
            }
        })
    }

    fn pod(namespace: &str, name: &str, phase: &str) -> Value {
        json!({"metadata": {"namespace": namespace, "name": name}, "status": {"phase": phase}})
    }

    #[test]
    fn a_node_is_recorded_sanitised_and_only_when_it_changes() {
        let mut state = ClusterState::default();
        let labels = json!({"eks.amazonaws.com/nodegroup": "web", "node.kubernetes.io/instance-type": "m5.large"});
        let first = state
            .node_applied(&node("n1", false, labels.clone()), 1_000)
            .unwrap();
        assert_eq!(
            first.group, "web",
            "the managed node group wins over the instance type"
        );
        assert_eq!(first.capacity["cpu"], "2");
        assert_eq!(first.allocatable["memory"], "7Gi");
        assert_eq!(first.created_ms, 1_767_225_600_000);
        assert!(!first.ready);
        let text = format!("{first:?}");
        for secret in [
            "10.0.0.7",
            "registry.example",
            "providerID",
            "kubeletVersion",
        ] {
            assert!(!text.contains(secret), "{secret} recorded: {text}");
        }
        // The same state again (a resync) records nothing; turning Ready does.
        assert_eq!(
            state.node_applied(&node("n1", false, labels.clone()), 2_000),
            None
        );
        assert!(
            state
                .node_applied(&node("n1", true, labels), 3_000)
                .unwrap()
                .ready
        );

        let deleted = state.node_deleted("n1", 4_000).unwrap();
        assert_eq!((deleted.deleted_ms, deleted.timestamp_ms), (4_000, 4_000));
        assert!(deleted.ready, "a deleted node carries its last state");
        assert_eq!(state.node_deleted("n1", 5_000), None);

        let plain = state
            .node_applied(&node("n2", true, json!({})), 6_000)
            .unwrap();
        assert_eq!(plain.group, "", "no group label: no group");
        let seat_host = json!({SEAT_HOST_LABEL: "true", "ksim.io/virtual-node": "true"});
        assert_eq!(
            state.node_applied(&node("ksim-seat-host", true, seat_host), 6_500),
            None,
            "a pool's seat host is not a node of the cluster"
        );
        let gone = state.nodes_listed(&HashSet::new(), 7_000);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].name, "n2");
    }

    #[test]
    fn a_node_records_when_its_removal_began() {
        let mut state = ClusterState::default();
        let mut n = node("n1", true, json!({"ksim.io/node-group": "m5"}));
        assert_eq!(state.node_applied(&n, 1_000).unwrap().removal_started_ms, 0);
        n["spec"]["taints"] =
            json!([{"key": TO_BE_DELETED_TAINT, "value": "1", "effect": "NoSchedule"}]);
        let tainted = state.node_applied(&n, 2_500).unwrap();
        assert_eq!(
            tainted.removal_started_ms, 2_500,
            "seen tainted: the tracer's time"
        );
        n["spec"]["unschedulable"] = json!(true);
        assert_eq!(state.node_applied(&n, 3_000), None, "a removal begins once");
        assert_eq!(
            state.node_deleted("n1", 9_000).unwrap().removal_started_ms,
            2_500
        );

        // First seen tainted: the taint's own time (seconds); first seen cordoned: now.
        let mut late = node("n2", true, json!({}));
        late["spec"]["taints"] =
            json!([{"key": TO_BE_DELETED_TAINT, "value": "5", "effect": "NoSchedule"}]);
        assert_eq!(
            state.node_applied(&late, 7_000).unwrap().removal_started_ms,
            5_000
        );
        let mut cordoned = node("n3", true, json!({}));
        cordoned["spec"]["unschedulable"] = json!(true);
        assert_eq!(
            state
                .node_applied(&cordoned, 7_000)
                .unwrap()
                .removal_started_ms,
            7_000
        );
        // Uncordoned: the removal is undone.
        cordoned["spec"]["unschedulable"] = json!(false);
        assert_eq!(
            state
                .node_applied(&cordoned, 8_000)
                .unwrap()
                .removal_started_ms,
            0
        );
    }

    #[test]
    fn samples_count_ready_nodes_and_pods_and_come_at_most_once_a_second() {
        let mut state = ClusterState::default();
        let group = json!({"ksim.io/node-group": "m5"});
        state.node_applied(&node("a", true, group.clone()), 0);
        state.node_applied(&node("b", false, group), 0);
        state.pod_applied(&pod("shop", "p1", "Pending"));
        state.pod_applied(&pod("shop", "p2", "Running"));
        state.pod_applied(&pod("shop", "p3", "Succeeded"));
        state.pod_applied(&pod("jobs", "p4", "Running"));

        let first = state.sample(10_000).unwrap();
        assert_eq!(first.timestamp_ms, 10_000);
        assert_eq!(first.ready_nodes, [("m5".to_owned(), 1)].into());
        assert_eq!(
            (first.pods["shop"].pending, first.pods["shop"].running),
            (1, 1)
        );
        assert_eq!(first.pods["jobs"].running, 1);
        assert_eq!(state.sample(12_000), None, "nothing changed");

        state.pod_applied(&pod("shop", "p1", "Running"));
        assert_eq!(
            state.sample(10_500),
            None,
            "less than a second after the last one"
        );
        let second = state.sample(11_000).unwrap();
        assert_eq!(second.pods["shop"].running, 2);

        state.pod_deleted(&pod("shop", "p2", "Running"));
        state.pods_listed(&[("shop".to_owned(), "p1".to_owned())].into());
        let third = state.sample(12_000).unwrap();
        assert_eq!(third.pods["shop"].running, 1);
        assert!(
            !third.pods.contains_key("jobs"),
            "an empty namespace is left out"
        );

        // Restored from the log, the last sample still suppresses an unchanged one.
        let mut restored = ClusterState::default();
        restored.restore_sample(&third);
        restored.pod_applied(&pod("shop", "p1", "Running"));
        restored.node_applied(&node("a", true, json!({"ksim.io/node-group": "m5"})), 0);
        assert_eq!(restored.sample(20_000), None);
    }
}
