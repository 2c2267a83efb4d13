//! Cutting a trace out of the log: a time window and a filter. Objects that existed before the
//! window are flattened into its first event; objects whose owner is exported too are left out,
//! because the owner makes them again at replay.
//!
//! Two passes over the log, both streaming: [`Scan`] learns the state at the window start, the
//! exported objects and the pod lifetimes; [`Cut`] then rewrites the window's events one by one.
//! Memory is bounded by the objects and pods of the window, not by the events in it.
//!
//! The cluster's recorded state goes with it: the sample in effect at the window start and the
//! nodes that existed then, stamped at the start, then the window's own samples and node
//! records; samples count only the pods of the namespaces the filter keeps.

pub mod sorting;

use std::collections::{BTreeMap, HashMap, HashSet};

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use serde_json::Value;

use super::{
    filter::Filter,
    key::{ObjectKey, owner_references},
};

/// `[start_ms, end_ms)`, in ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl Window {
    pub fn new(start_ms: i64, end_ms: i64) -> Result<Self, String> {
        if start_ms >= end_ms {
            // RFC 3339, as the times were given; epoch milliseconds meant nothing to a reader.
            return Err(format!(
                "the window is empty: start {} is not before end {}",
                ksim_trace::time::timestamp(start_ms),
                ksim_trace::time::timestamp(end_ms)
            ));
        }
        Ok(Self { start_ms, end_ms })
    }
}

/// Identity of one recorded pod lifetime: the same pod can be recorded twice (start, then end;
/// or again after a tracer restart), the latest record wins.
type LifetimeKey = (ObjectKey, String);

#[derive(Debug)]
pub struct Scan {
    window: Window,
    filter: Filter,
    state: BTreeMap<ObjectKey, pb::TraceObject>,
    exported: HashSet<ObjectKey>,
    lifetimes: HashMap<LifetimeKey, pb::PodLifecycle>,
    sample: Option<pb::ClusterSample>,
    nodes: BTreeMap<String, pb::RecordedNode>,
}

impl Scan {
    pub fn new(window: Window, filter: Filter) -> Self {
        Self {
            window,
            filter,
            state: BTreeMap::new(),
            exported: HashSet::new(),
            lifetimes: HashMap::new(),
            sample: None,
            nodes: BTreeMap::new(),
        }
    }

    /// The cluster's compacted state (the log's base): the newest sample and the live nodes.
    pub fn cluster_base(
        &mut self,
        sample: Option<pb::ClusterSample>,
        nodes: Vec<pb::RecordedNode>,
    ) {
        self.sample = sample;
        self.nodes = nodes.into_iter().map(|n| (n.name.clone(), n)).collect();
    }

    /// The compacted state of the log (objects and open lifetimes as of its retention edge).
    pub fn base(&mut self, objects: Vec<pb::TraceObject>, open_lifecycles: Vec<pb::PodLifecycle>) {
        for object in objects {
            self.state.insert(ObjectKey::of(&object), object);
        }
        for lifecycle in open_lifecycles {
            self.lifecycle(lifecycle);
        }
    }

    /// One record of the log, in log order.
    pub fn record(&mut self, timestamp_ms: i64, record: &Record) {
        match record {
            Record::Event(event) if event.timestamp_ms < self.window.start_ms => {
                for object in &event.applied {
                    self.state.insert(ObjectKey::of(object), object.clone());
                }
                for object in &event.deleted {
                    self.state.remove(&ObjectKey::of(object));
                }
            }
            Record::Event(event) if event.timestamp_ms < self.window.end_ms => {
                for object in event.applied.iter().chain(&event.deleted) {
                    if self.filter.keeps(object) {
                        self.exported.insert(ObjectKey::of(object));
                    }
                }
            }
            Record::Lifecycle(lifecycle) if timestamp_ms < self.window.end_ms => {
                self.lifecycle(lifecycle.clone());
            }
            Record::Sample(sample) if sample.timestamp_ms < self.window.start_ms => {
                self.sample = Some(sample.clone());
            }
            Record::Node(node) if node.timestamp_ms < self.window.start_ms => {
                if node.deleted_ms == 0 {
                    self.nodes.insert(node.name.clone(), node.clone());
                } else {
                    self.nodes.remove(&node.name);
                }
            }
            _ => {}
        }
    }

    fn lifecycle(&mut self, lifecycle: pb::PodLifecycle) {
        let owner = ObjectKey {
            group: lifecycle
                .owner_gvk
                .as_ref()
                .map(|g| g.group.clone())
                .unwrap_or_default(),
            kind: lifecycle
                .owner_gvk
                .as_ref()
                .map(|g| g.kind.clone())
                .unwrap_or_default(),
            namespace: lifecycle.owner_namespace.clone(),
            name: lifecycle.owner_name.clone(),
        };
        self.lifetimes
            .insert((owner, lifecycle.pod_name.clone()), lifecycle);
    }

    pub fn finish(mut self) -> Cut {
        self.state.retain(|_, object| self.filter.keeps(object));
        self.exported.extend(self.state.keys().cloned());
        let window = self.window;
        let exported = self.exported;
        let mut lifetimes: Vec<(ObjectKey, pb::PodLifecycle)> = self
            .lifetimes
            .into_iter()
            .filter(|((owner, _), l)| {
                exported.contains(owner)
                    && l.start_ms < window.end_ms
                    && (l.end_ms == 0 || l.end_ms >= window.start_ms)
            })
            .map(|((owner, _), mut l)| {
                if l.end_ms == 0 || l.end_ms >= window.end_ms {
                    // It had not ended by the end of the window.
                    l.end_ms = 0;
                    l.outcome = pb::PodOutcome::Running.into();
                }
                (owner, l)
            })
            .collect();
        // Replay matches new pods to lifetimes by owner, spec hash and start order.
        lifetimes.sort_by(|(oa, a), (ob, b)| {
            (oa, a.pod_spec_hash, a.start_ms, &a.pod_name).cmp(&(
                ob,
                b.pod_spec_hash,
                b.start_ms,
                &b.pod_name,
            ))
        });
        let mut launch: HashMap<(ObjectKey, u64), u32> = HashMap::new();
        let lifecycles = lifetimes
            .into_iter()
            .map(|(owner, mut l)| {
                let next = launch.entry((owner, l.pod_spec_hash)).or_default();
                l.launch_index = *next;
                *next += 1;
                l
            })
            .collect();
        let mut cut = Cut {
            window,
            filter: self.filter,
            exported,
            dropped: HashSet::new(),
            initial: Vec::new(),
            lifecycles,
            initial_sample: self.sample,
            initial_nodes: self.nodes.into_values().collect(),
        };
        let initial: Vec<pb::TraceObject> = self
            .state
            .into_values()
            .filter(|o| !cut.owned_by_exported(o))
            .collect();
        cut.initial = initial;
        cut
    }
}

#[derive(Debug)]
pub struct Cut {
    window: Window,
    filter: Filter,
    exported: HashSet<ObjectKey>,
    /// Objects left out because their owner is exported; their deletes go too.
    dropped: HashSet<ObjectKey>,
    initial: Vec<pb::TraceObject>,
    lifecycles: Vec<pb::PodLifecycle>,
    initial_sample: Option<pb::ClusterSample>,
    initial_nodes: Vec<pb::RecordedNode>,
}

impl Cut {
    /// The cluster as it was at the window start, stamped at the start: the sample then in
    /// effect and the nodes that existed.
    pub fn first_cluster_records(&mut self) -> (Option<pb::ClusterSample>, Vec<pb::RecordedNode>) {
        let start = self.window.start_ms;
        let sample = self.initial_sample.take().map(|sample| pb::ClusterSample {
            timestamp_ms: start,
            ..self.filtered(sample)
        });
        let nodes = std::mem::take(&mut self.initial_nodes)
            .into_iter()
            .map(|node| pb::RecordedNode {
                timestamp_ms: start,
                ..node
            })
            .collect();
        (sample, nodes)
    }

    /// One sample of the log for the export, or `None` outside the window.
    pub fn sample(&self, sample: &pb::ClusterSample) -> Option<pb::ClusterSample> {
        self.in_window(sample.timestamp_ms)
            .then(|| self.filtered(sample.clone()))
    }

    /// One node record of the log for the export, or `None` outside the window.
    pub fn node(&self, node: &pb::RecordedNode) -> Option<pb::RecordedNode> {
        self.in_window(node.timestamp_ms).then(|| node.clone())
    }

    fn in_window(&self, timestamp_ms: i64) -> bool {
        timestamp_ms >= self.window.start_ms && timestamp_ms < self.window.end_ms
    }

    fn filtered(&self, mut sample: pb::ClusterSample) -> pb::ClusterSample {
        sample
            .pods
            .retain(|namespace, _| self.filter.keeps_namespace(namespace));
        sample
    }

    /// The first event: every object that existed at the window start, at the start.
    pub fn first_event(&mut self) -> pb::TraceEvent {
        pb::TraceEvent {
            timestamp_ms: self.window.start_ms,
            applied: std::mem::take(&mut self.initial),
            deleted: Vec::new(),
        }
    }

    /// One event of the log rewritten for the export, or `None` if nothing of it is exported.
    pub fn event(&mut self, event: &pb::TraceEvent) -> Option<pb::TraceEvent> {
        if event.timestamp_ms < self.window.start_ms || event.timestamp_ms >= self.window.end_ms {
            return None;
        }
        let applied: Vec<_> = event
            .applied
            .iter()
            .filter(|o| self.keeps(o))
            .cloned()
            .collect();
        let deleted: Vec<_> = event
            .deleted
            .iter()
            .filter(|o| self.filter.keeps(o) && !self.dropped.contains(&ObjectKey::of(o)))
            .cloned()
            .collect();
        (!applied.is_empty() || !deleted.is_empty()).then_some(pb::TraceEvent {
            timestamp_ms: event.timestamp_ms,
            applied,
            deleted,
        })
    }

    /// The window's pod lifetimes, launch indexes assigned.
    pub fn lifecycles(&self) -> &[pb::PodLifecycle] {
        &self.lifecycles
    }

    fn keeps(&mut self, object: &pb::TraceObject) -> bool {
        if !self.filter.keeps(object) {
            return false;
        }
        if self.owned_by_exported(object) {
            self.dropped.insert(ObjectKey::of(object));
            return false;
        }
        true
    }

    fn owned_by_exported(&self, object: &pb::TraceObject) -> bool {
        let Ok(json) = serde_json::from_slice::<Value>(&object.object_json) else {
            return false;
        };
        owner_references(&json).iter().any(|reference| {
            ObjectKey::owner(reference, &object.namespace).is_some_and(|owner| {
                self.exported.contains(&owner) || self.exported.contains(&owner.cluster_scoped())
            })
        })
    }
}

#[cfg(test)]
mod tests;
