//! The recording rules: which watch observations become log records. Pure: fed objects and a
//! clock, it returns records; the watch adapter and the log are elsewhere.
//!
//! Memory is bounded by what exists in the cluster now (one small entry per live object and per
//! running pod), never by how many changes have passed.

use std::collections::{HashMap, HashSet};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::hash::{pod_spec_hash, stable_hash};
use pb::trace_record::Record;
use serde_json::Value;

use super::{
    cluster::ClusterState,
    key::{ObjectKey, controller_reference},
    kinds::TrackedKind,
    lifecycle::{self, Stage},
    sanitize::{EnvRedaction, sanitize, tombstone},
};

/// One thing a watch saw.
#[derive(Debug, Clone)]
pub enum Observation {
    /// An object exists in this state. `listed` is true while a watch (re)lists, which also
    /// means the change may have happened while the tracer was not watching.
    Applied {
        kind: usize,
        object: Value,
        listed: bool,
    },
    /// An object was deleted; `object` is its last state.
    Deleted { kind: usize, object: Value },
    /// A (re)list of a kind finished: every object of the kind not in `listed` is gone.
    ListDone {
        kind: usize,
        listed: HashSet<ObjectKey>,
    },
    /// A pod's usage in a metrics window the tracer had not recorded yet.
    Usage(pb::UsageSample),
}

/// One record for the log, stamped by the tracer's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub timestamp_ms: i64,
    pub record: Record,
}

#[derive(Debug, Clone)]
struct Known {
    /// Hash of the sanitised object as recorded; `None` for objects known but not recorded
    /// (owned objects of a skip-owned kind), kept for their owner links.
    hash: Option<u64>,
    owner: Option<ObjectKey>,
}

#[derive(Debug)]
pub struct Recorder {
    kinds: Vec<TrackedKind>,
    redaction: EnvRedaction,
    objects: HashMap<ObjectKey, Known>,
    /// Pods that started and have not ended, by (namespace, name).
    open: HashMap<(String, String), pb::PodLifecycle>,
    /// Pods that ended but still exist, so a relist does not record them again.
    ended: HashSet<(String, String)>,
    /// Pods bound to a node and not yet running: when the tracer saw them bound, so a start
    /// delay is timed by one clock in milliseconds (conditions carry whole seconds).
    bound: HashMap<(String, String), i64>,
    /// Nodes and pod phases, when the kinds include Nodes.
    cluster: ClusterState,
    records_cluster: bool,
    last_ms: i64,
}

impl Recorder {
    pub fn new(kinds: Vec<TrackedKind>, redaction: EnvRedaction) -> Self {
        Self {
            records_cluster: kinds.iter().any(TrackedKind::is_node),
            cluster: ClusterState::default(),
            kinds,
            redaction,
            objects: HashMap::new(),
            open: HashMap::new(),
            ended: HashSet::new(),
            bound: HashMap::new(),
            last_ms: 0,
        }
    }

    pub fn kinds(&self) -> &[TrackedKind] {
        &self.kinds
    }

    /// Rebuilds the recorded state from the log (oldest first), so a restarted tracer compares
    /// the relist against what it had recorded and writes only real differences.
    pub fn restore(&mut self, timestamp_ms: i64, record: &Record) {
        self.last_ms = self.last_ms.max(timestamp_ms);
        match record {
            Record::Event(event) => {
                for object in &event.applied {
                    self.restore_object(object);
                }
                for object in &event.deleted {
                    self.objects.remove(&ObjectKey::of(object));
                }
            }
            Record::Lifecycle(lifecycle) => self.restore_lifecycle(lifecycle),
            Record::Sample(sample) => self.cluster.restore_sample(sample),
            Record::Node(node) => self.cluster.restore_node(node),
            // Usage is numbers over time, not state to compare a relist with.
            Record::Usage(_) | Record::Header(_) | Record::Trailer(_) => {}
        }
    }

    pub fn restore_object(&mut self, object: &pb::TraceObject) {
        let Ok(json) = serde_json::from_slice::<Value>(&object.object_json) else {
            return;
        };
        let owner = owner_key(&json, &object.namespace);
        self.objects.insert(
            ObjectKey::of(object),
            Known {
                hash: Some(stable_hash(&json)),
                owner,
            },
        );
    }

    pub fn restore_lifecycle(&mut self, lifecycle: &pb::PodLifecycle) {
        let pod = (
            lifecycle.owner_namespace.clone(),
            lifecycle.pod_name.clone(),
        );
        if lifecycle.end_ms == 0 {
            self.open.insert(pod, lifecycle.clone());
        } else {
            self.open.remove(&pod);
        }
    }

    /// Whether the cluster's state is recorded (the kinds include Nodes): the trace header says
    /// so, and [`Recorder::sample`] writes samples.
    pub fn records_cluster(&self) -> bool {
        self.records_cluster
    }

    /// A sample of the cluster's state, when it changed and the last one is a second old; the
    /// store asks after every batch and once a second.
    pub fn sample(&mut self, now_ms: i64) -> Option<Recorded> {
        if !self.records_cluster {
            return None;
        }
        let now_ms = now_ms.max(self.last_ms);
        let sample = self.cluster.sample(now_ms)?;
        self.last_ms = now_ms;
        Some(Recorded {
            timestamp_ms: now_ms,
            record: Record::Sample(sample),
        })
    }

    /// Number of recorded objects of a kind that exist now.
    pub fn object_count(&self, group: &str, kind: &str) -> u64 {
        self.objects
            .iter()
            .filter(|(key, known)| known.hash.is_some() && key.group == group && key.kind == kind)
            .count() as u64
    }

    pub fn observe(&mut self, observation: Observation, now_ms: i64) -> Vec<Recorded> {
        // Log timestamps never go backwards, even if the wall clock does.
        let now_ms = now_ms.max(self.last_ms);
        self.last_ms = now_ms;
        let mut out = Vec::new();
        match observation {
            Observation::Applied {
                kind,
                object,
                listed,
            } => {
                let Some(tracked) = self.kinds.get(kind).cloned() else {
                    return out;
                };
                if tracked.is_node() {
                    if let Some(node) = self.cluster.node_applied(&object, now_ms) {
                        out.push(Recorded {
                            timestamp_ms: now_ms,
                            record: Record::Node(node),
                        });
                    }
                    return out;
                }
                if tracked.is_pod() {
                    self.cluster.pod_applied(&object);
                    self.observe_pod(&object, listed, now_ms, &mut out);
                }
                self.observe_apply(&tracked, object, now_ms, &mut out);
            }
            Observation::Deleted { kind, object } => {
                let Some(tracked) = self.kinds.get(kind).cloned() else {
                    return out;
                };
                if tracked.is_node() {
                    let name = object.pointer("/metadata/name").and_then(Value::as_str);
                    if let Some(node) = name.and_then(|n| self.cluster.node_deleted(n, now_ms)) {
                        out.push(Recorded {
                            timestamp_ms: now_ms,
                            record: Record::Node(node),
                        });
                    }
                    return out;
                }
                if tracked.is_pod() {
                    self.cluster.pod_deleted(&object);
                    self.observe_pod_gone(&object, now_ms, &mut out);
                }
                if let Some(key) = key_of(&tracked, &object) {
                    self.forget(&tracked, key, Some(&object), now_ms, &mut out);
                }
            }
            Observation::ListDone { kind, listed } => {
                let Some(tracked) = self.kinds.get(kind).cloned() else {
                    return out;
                };
                if tracked.is_node() {
                    let names = listed.into_iter().map(|key| key.name).collect();
                    out.extend(
                        self.cluster
                            .nodes_listed(&names, now_ms)
                            .into_iter()
                            .map(|node| Recorded {
                                timestamp_ms: now_ms,
                                record: Record::Node(node),
                            }),
                    );
                    return out;
                }
                let gone: Vec<ObjectKey> = self
                    .objects
                    .keys()
                    .filter(|k| {
                        k.group == tracked.group() && k.kind == tracked.kind && !listed.contains(*k)
                    })
                    .cloned()
                    .collect();
                for key in gone {
                    self.forget(&tracked, key, None, now_ms, &mut out);
                }
                if tracked.is_pod() {
                    let listed_pods: HashSet<(String, String)> =
                        listed.into_iter().map(|k| (k.namespace, k.name)).collect();
                    self.cluster.pods_listed(&listed_pods);
                    let vanished: Vec<_> = self
                        .open
                        .keys()
                        .filter(|pod| !listed_pods.contains(*pod))
                        .cloned()
                        .collect();
                    for pod in vanished {
                        self.end_lifecycle(&pod, now_ms, pb::PodOutcome::Deleted, &mut out);
                    }
                    self.ended.retain(|pod| listed_pods.contains(pod));
                    self.bound.retain(|pod, _| listed_pods.contains(pod));
                }
            }
            // Stamped with the read time, as every entry is; the sample keeps the metrics' own.
            Observation::Usage(sample) => out.push(Recorded {
                timestamp_ms: now_ms,
                record: Record::Usage(sample),
            }),
        }
        out
    }

    fn observe_apply(
        &mut self,
        tracked: &TrackedKind,
        object: Value,
        now_ms: i64,
        out: &mut Vec<Recorded>,
    ) {
        let Some(key) = key_of(tracked, &object) else {
            return;
        };
        let owner = owner_key(&object, &key.namespace);
        if object.pointer("/metadata/deletionTimestamp").is_some() {
            // Being deleted: what changes now (finalizers, the deletion mark) is the apiserver's
            // doing, not an author's; the delete itself is recorded when it completes.
            return;
        }
        if tracked.skip_owned && controller_reference(&object).is_some() {
            self.objects.insert(key, Known { hash: None, owner });
            return;
        }
        let clean = sanitize(tracked, object, &self.redaction);
        let hash = stable_hash(&clean);
        if self.objects.get(&key).and_then(|k| k.hash) == Some(hash) {
            return;
        }
        self.objects.insert(
            key.clone(),
            Known {
                hash: Some(hash),
                owner,
            },
        );
        out.push(Recorded {
            timestamp_ms: now_ms,
            record: Record::Event(pb::TraceEvent {
                timestamp_ms: now_ms,
                applied: vec![trace_object(tracked, &key, &clean)],
                deleted: Vec::new(),
            }),
        });
    }

    fn forget(
        &mut self,
        tracked: &TrackedKind,
        key: ObjectKey,
        last_state: Option<&Value>,
        now_ms: i64,
        out: &mut Vec<Recorded>,
    ) {
        let Some(known) = self.objects.remove(&key) else {
            return;
        };
        if known.hash.is_none() {
            return;
        }
        let stone = match last_state {
            Some(object) => tombstone(object),
            None => serde_json::json!({
                "apiVersion": tracked.api_version,
                "kind": tracked.kind,
                "metadata": if key.namespace.is_empty() {
                    serde_json::json!({"name": key.name})
                } else {
                    serde_json::json!({"name": key.name, "namespace": key.namespace})
                },
            }),
        };
        out.push(Recorded {
            timestamp_ms: now_ms,
            record: Record::Event(pb::TraceEvent {
                timestamp_ms: now_ms,
                applied: Vec::new(),
                deleted: vec![trace_object(tracked, &key, &stone)],
            }),
        });
    }

    fn observe_pod(&mut self, pod: &Value, listed: bool, now_ms: i64, out: &mut Vec<Recorded>) {
        let Some(id) = pod_id(pod) else {
            return;
        };
        // A live transition is timed by the tracer's clock; one that happened while it was not
        // watching by the condition's own time.
        let seen = |condition: &str| {
            lifecycle::condition_true_ms(pod, condition)
                .map(|at| if listed && at != 0 { at } else { now_ms })
        };
        match lifecycle::stage(pod) {
            Stage::Waiting => {
                if lifecycle::node_name(pod).is_some() && !self.bound.contains_key(&id) {
                    let at = seen("PodScheduled").unwrap_or(now_ms);
                    self.bound.insert(id, at);
                }
            }
            Stage::Running => {
                if self.ended.contains(&id) {
                    return;
                }
                if let Some(open) = self.open.get_mut(&id) {
                    // Ready after it started: the lifetime again, with its ready time (an
                    // export keeps the later record of a pod).
                    if open.ready_ms == 0
                        && let Some(ready_ms) = seen("Ready")
                    {
                        open.ready_ms = ready_ms.max(open.start_ms);
                        out.push(Recorded {
                            timestamp_ms: now_ms,
                            record: Record::Lifecycle(open.clone()),
                        });
                    }
                    return;
                }
                let Some(mut record) = self.lifecycle_owner(pod) else {
                    return;
                };
                record.start_ms = if listed {
                    lifecycle::reported_start_ms(pod).unwrap_or(now_ms)
                } else {
                    now_ms
                };
                self.placement(&id, pod, &mut record);
                if let Some(ready_ms) = seen("Ready") {
                    record.ready_ms = ready_ms.max(record.start_ms);
                }
                record.outcome = pb::PodOutcome::Running.into();
                self.open.insert(id, record.clone());
                out.push(Recorded {
                    timestamp_ms: now_ms,
                    record: Record::Lifecycle(record),
                });
            }
            Stage::Ended(outcome) => {
                if self.ended.contains(&id) {
                    return;
                }
                if !self.open.contains_key(&id) {
                    // Started and ended between two observations (or while not watching).
                    let Some(mut record) = self.lifecycle_owner(pod) else {
                        return;
                    };
                    record.start_ms = lifecycle::reported_start_ms(pod).unwrap_or(now_ms);
                    self.placement(&id, pod, &mut record);
                    self.open.insert(id.clone(), record);
                }
                let end_ms = if listed {
                    lifecycle::reported_end_ms(pod).unwrap_or(now_ms)
                } else {
                    now_ms
                };
                self.end_lifecycle(&id, end_ms, outcome, out);
                self.ended.insert(id);
            }
        }
    }

    fn observe_pod_gone(&mut self, pod: &Value, now_ms: i64, out: &mut Vec<Recorded>) {
        let Some(id) = pod_id(pod) else {
            return;
        };
        self.ended.remove(&id);
        self.bound.remove(&id);
        self.end_lifecycle(&id, now_ms, pb::PodOutcome::Deleted, out);
    }

    /// Where and when a starting pod was bound: the node, and the bind time seen while it
    /// waited, else its PodScheduled condition's (never after it started); and when it was
    /// created.
    fn placement(&mut self, id: &(String, String), pod: &Value, record: &mut pb::PodLifecycle) {
        let seen = self.bound.remove(id);
        record.node_name = lifecycle::node_name(pod).unwrap_or_default().to_owned();
        let bound_ms = seen.or_else(|| lifecycle::condition_true_ms(pod, "PodScheduled"));
        record.bound_ms = bound_ms.map_or(0, |at| at.min(record.start_ms));
        // Whole seconds against a kubelet's clock: never after the start it precedes.
        record.created_ms = lifecycle::created_ms(pod).map_or(0, |at| at.min(record.start_ms));
    }

    fn end_lifecycle(
        &mut self,
        id: &(String, String),
        end_ms: i64,
        outcome: pb::PodOutcome,
        out: &mut Vec<Recorded>,
    ) {
        let Some(mut record) = self.open.remove(id) else {
            return;
        };
        record.end_ms = end_ms.max(record.start_ms).max(1);
        record.outcome = outcome.into();
        out.push(Recorded {
            timestamp_ms: self.last_ms,
            record: Record::Lifecycle(record),
        });
    }

    /// The lifecycle record skeleton for a pod: its owner is the topmost known ancestor whose
    /// kind tracks lifecycles (a Deployment rather than its ReplicaSet), since that is the object
    /// a replay recreates; a pod without such an ancestor owns its own lifetime if pods track them.
    fn lifecycle_owner(&self, pod: &Value) -> Option<pb::PodLifecycle> {
        let (namespace, name) = pod_id(pod)?;
        let mut chosen: Option<ObjectKey> = None;
        let mut next = owner_key(pod, &namespace);
        let mut hops = 0;
        while let Some(key) = next {
            if self.tracks_lifecycles(&key) {
                chosen = Some(key.clone());
            }
            next = self.objects.get(&key).and_then(|k| k.owner.clone());
            hops += 1;
            if hops > 16 {
                break; // an owner cycle; the apiserver prevents them, a restored log might not
            }
        }
        let owner = match chosen {
            Some(owner) => owner,
            None => {
                let pod_key = ObjectKey {
                    group: String::new(),
                    kind: "Pod".into(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                if !self.tracks_lifecycles(&pod_key) {
                    return None;
                }
                pod_key
            }
        };
        let tracked = self.kind_of(&owner)?;
        Some(pb::PodLifecycle {
            owner_gvk: Some(tracked.gvk()),
            owner_namespace: owner.namespace,
            owner_name: owner.name,
            pod_spec_hash: pod_spec_hash(pod),
            launch_index: 0,
            start_ms: 0,
            end_ms: 0,
            outcome: pb::PodOutcome::Unspecified.into(),
            pod_name: name,
            ..Default::default()
        })
    }

    fn kind_of(&self, key: &ObjectKey) -> Option<&TrackedKind> {
        self.kinds
            .iter()
            .find(|k| k.group() == key.group && k.kind == key.kind)
    }

    fn tracks_lifecycles(&self, key: &ObjectKey) -> bool {
        self.kind_of(key).is_some_and(|k| k.track_lifecycles)
    }
}

/// The identity of an object of a tracked kind, if it has a name.
pub fn key_of(tracked: &TrackedKind, object: &Value) -> Option<ObjectKey> {
    Some(ObjectKey {
        group: tracked.group().to_owned(),
        kind: tracked.kind.clone(),
        namespace: object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        name: object.pointer("/metadata/name")?.as_str()?.to_owned(),
    })
}

fn pod_id(pod: &Value) -> Option<(String, String)> {
    Some((
        pod.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        pod.pointer("/metadata/name")?.as_str()?.to_owned(),
    ))
}

fn owner_key(object: &Value, namespace: &str) -> Option<ObjectKey> {
    controller_reference(object).and_then(|r| ObjectKey::owner(r, namespace))
}

fn trace_object(tracked: &TrackedKind, key: &ObjectKey, object: &Value) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(tracked.gvk()),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        // Serialising a Value cannot fail: its keys are strings.
        object_json: serde_json::to_vec(object).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests;
