//! What a trace's records tell a calibration: its recorded nodes (by name and creation),
//! cluster-autoscaler's scale-ups (its `TriggeredScaleUp` Events, where Events were recorded)
//! and its pods' lifetimes, as [`Observations`]. One pass over the records, in any order;
//! memory follows the nodes and pods, not the events. `ksim trace calibrate` streams a file
//! through it, the driver a trace it holds (the model a replay learns by default).

use std::collections::HashMap;

use ksim_trace::{Record, Trace, pb};

use super::calibrate::{NodeObservation, Observations, PodObservation};

/// The label holding a node's instance type.
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// The reason cluster-autoscaler gives the events of pods a scale-up is for.
const TRIGGERED_SCALE_UP: &str = "TriggeredScaleUp";

/// Takes a trace's records one at a time; [`Observer::finish`] gives what they saw.
#[derive(Debug, Default)]
pub struct Observer {
    observations: Observations,
    nodes: HashMap<(String, i64), NodeObservation>,
    pods: HashMap<(String, String), PodObservation>,
    unnamed: Vec<PodObservation>,
}

impl Observer {
    /// For the trace whose header is `header`: where its recording begins, and whether it
    /// tracked Events (else the scale-ups cannot be known).
    pub fn new(header: &pb::TraceHeader) -> Self {
        let tracked_events = header.tracer_config.as_ref().is_some_and(|config| {
            config
                .tracked_kinds
                .iter()
                .filter_map(|kind| kind.gvk.as_ref())
                .any(ksim_trace::gvk::is_event)
        });
        Self {
            observations: Observations {
                recorded_from_ms: header
                    .start_time
                    .as_ref()
                    .map_or(i64::MIN, ksim_trace::time::millis),
                events_recorded: tracked_events,
                ..Observations::default()
            },
            ..Self::default()
        }
    }

    pub fn record(&mut self, record: &Record) {
        match record {
            Record::Event(event) => self.event(event),
            Record::Node(node) => self.node(node),
            Record::Lifecycle(lifecycle) => self.lifecycle(lifecycle),
            // Provisioning delays are learned from nodes and pods, not from usage.
            Record::Sample(_) | Record::Usage(_) => {}
        }
    }

    fn event(&mut self, event: &pb::TraceEvent) {
        for object in &event.applied {
            if object.gvk.as_ref().is_some_and(ksim_trace::gvk::is_event) {
                self.observations.events_recorded = true;
                if let Some(message) = scale_up_message(&object.object_json) {
                    self.observations
                        .add_scale_up_event(&message, event.timestamp_ms);
                }
            }
        }
    }

    fn node(&mut self, node: &pb::RecordedNode) {
        let key = (node.name.clone(), node.created_ms);
        let seen = self.nodes.entry(key).or_insert_with(|| NodeObservation {
            name: node.name.clone(),
            group: node.group.clone(),
            instance_type: node
                .labels
                .get(INSTANCE_TYPE_LABEL)
                .cloned()
                .unwrap_or_default(),
            created_ms: node.created_ms,
            first_seen_ms: node.timestamp_ms,
            ..NodeObservation::default()
        });
        seen.first_seen_ms = seen.first_seen_ms.min(node.timestamp_ms);
        if node.ready && node.deleted_ms == 0 {
            let first = seen
                .ready_ms
                .map_or(node.timestamp_ms, |at| at.min(node.timestamp_ms));
            seen.ready_ms = Some(first);
        }
        // The removal that ended in the deletion: the latest record's.
        seen.removal_started_ms = (node.removal_started_ms != 0).then_some(node.removal_started_ms);
        if node.deleted_ms != 0 {
            seen.deleted_ms = Some(node.deleted_ms);
        }
    }

    fn lifecycle(&mut self, lifecycle: &pb::PodLifecycle) {
        let pod = pod_of(lifecycle);
        if lifecycle.pod_name.is_empty() {
            self.unnamed.push(pod);
        } else {
            // A pod recorded again (Ready later, or ended) is the same pod.
            self.pods
                .insert((pod.owner.clone(), lifecycle.pod_name.clone()), pod);
        }
    }

    /// What the records saw, nodes in creation order, each matched to its scale-up.
    pub fn finish(self) -> Observations {
        let mut observations = self.observations;
        observations.nodes = self.nodes.into_values().collect();
        observations
            .nodes
            .sort_by(|a, b| (a.created_ms, &a.name).cmp(&(b.created_ms, &b.name)));
        let mut pods: Vec<PodObservation> = self.pods.into_values().collect();
        pods.sort_by(|a, b| (&a.owner, a.started_ms).cmp(&(&b.owner, b.started_ms)));
        observations.pods = pods.into_iter().chain(self.unnamed).collect();
        observations.match_scale_ups();
        observations
    }
}

/// What a whole trace in memory saw.
pub fn observe(trace: &Trace) -> Observations {
    let mut observer = Observer::new(&trace.header);
    let records = trace
        .events
        .iter()
        .cloned()
        .map(Record::Event)
        .chain(trace.nodes.iter().cloned().map(Record::Node))
        .chain(trace.lifecycles.iter().cloned().map(Record::Lifecycle));
    for record in records {
        observer.record(&record);
    }
    observer.finish()
}

/// The message of a `TriggeredScaleUp` Event (core `message`, events.k8s.io `note`).
fn scale_up_message(json: &[u8]) -> Option<String> {
    let event: serde_json::Value = serde_json::from_slice(json).ok()?;
    if event.get("reason").and_then(serde_json::Value::as_str) != Some(TRIGGERED_SCALE_UP) {
        return None;
    }
    event
        .get("message")
        .or_else(|| event.get("note"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

fn pod_of(lifecycle: &pb::PodLifecycle) -> PodObservation {
    let kind = lifecycle
        .owner_gvk
        .as_ref()
        .map_or("", |gvk| gvk.kind.as_str());
    let known = |ms: i64| (ms != 0).then_some(ms);
    PodObservation {
        owner: format!(
            "{kind}/{}/{}",
            lifecycle.owner_namespace, lifecycle.owner_name
        ),
        bound_ms: known(lifecycle.bound_ms),
        started_ms: lifecycle.start_ms,
        ready_ms: known(lifecycle.ready_ms),
        node: lifecycle.node_name.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(name: &str, at: i64, ready: bool, deleted: i64) -> pb::RecordedNode {
        pb::RecordedNode {
            timestamp_ms: at,
            name: name.into(),
            group: "m5".into(),
            labels: [(INSTANCE_TYPE_LABEL.to_owned(), "m5.large".to_owned())].into(),
            ready,
            created_ms: 1_000,
            deleted_ms: deleted,
            removal_started_ms: if deleted != 0 { 50_000 } else { 0 },
            ..pb::RecordedNode::default()
        }
    }

    fn scale_up_event(at: i64) -> pb::TraceEvent {
        let event = serde_json::json!({"reason": TRIGGERED_SCALE_UP,
            "message": "pod triggered scale-up: [{m5 0->1 (max: 4)}]"});
        pb::TraceEvent {
            timestamp_ms: at,
            applied: vec![pb::TraceObject {
                gvk: Some(pb::GroupVersionKind {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "Event".into(),
                }),
                namespace: "shop".into(),
                name: "web.1".into(),
                object_json: serde_json::to_vec(&event).unwrap(),
            }],
            deleted: vec![],
        }
    }

    #[test]
    fn a_nodes_records_make_one_observation_matched_to_its_scale_up() {
        let trace = Trace {
            header: pb::TraceHeader::default(),
            events: vec![scale_up_event(500)],
            lifecycles: vec![pb::PodLifecycle {
                owner_gvk: Some(pb::GroupVersionKind {
                    group: "apps".into(),
                    version: "v1".into(),
                    kind: "Deployment".into(),
                }),
                owner_namespace: "shop".into(),
                owner_name: "web".into(),
                pod_name: "web-1".into(),
                bound_ms: 40_000,
                start_ms: 43_000,
                node_name: "m5-a".into(),
                ..pb::PodLifecycle::default()
            }],
            samples: vec![],
            // Seen at creation, Ready at 31 s, its removal from 50 s, gone at 80 s.
            nodes: vec![
                node("m5-a", 1_200, false, 0),
                node("m5-a", 31_000, true, 0),
                node("m5-a", 80_000, false, 80_000),
            ],
            usage: vec![],
            trailer: pb::TraceTrailer::default(),
        };
        let seen = observe(&trace);
        assert!(seen.events_recorded);
        assert_eq!(seen.nodes.len(), 1);
        let node = &seen.nodes[0];
        assert_eq!(node.instance_type, "m5.large");
        assert_eq!(
            (
                node.first_seen_ms,
                node.ready_ms,
                node.removal_started_ms,
                node.deleted_ms
            ),
            (1_200, Some(31_000), Some(50_000), Some(80_000))
        );
        assert_eq!(node.triggered_ms, Some(500));
        assert_eq!(seen.pods.len(), 1);
        assert_eq!(seen.pods[0].owner, "Deployment/shop/web");
        assert_eq!(seen.pods[0].bound_ms, Some(40_000));
    }
}
