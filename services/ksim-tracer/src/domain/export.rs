//! Cutting a trace out of the log: a time window and a filter. Objects that existed before the
//! window are flattened into its first event; objects whose owner is exported too are left out,
//! because the owner makes them again at replay.
//!
//! Two passes over the log, both streaming: [`Scan`] learns the state at the window start and
//! sorts what the window says about each object key (exported or not, the pod lifetimes it
//! owns, the objects that name it as owner); [`Scan::finish`] joins those facts by key into the
//! positions of the objects to leave out and the lifetimes to export, sorted again; [`Cut`]
//! then rewrites the window's events one by one, in step with those positions. The sorting is
//! the caller's ([`Sorting`]), so a long window can spill to disk: memory is bounded by the
//! objects at the window start, not by what happens in the window.
//!
//! The cluster's recorded state goes with it: the sample in effect at the window start and the
//! nodes that existed then, stamped at the start, then the window's own samples and node
//! records; samples count only the pods of the namespaces the filter keeps.

mod facts;
pub mod sorting;

use std::collections::BTreeMap;

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use serde_json::Value;
use thiserror::Error;

use self::{
    facts::{About, At, Fact, Launch, Occurred, Occurrence, lifetime_owner},
    sorting::{Sorted, Sorter, Sorting},
};
use super::{
    filter::Filter,
    key::{ObjectKey, owner_references},
};

/// An export window whose start is not before its end. Shown in RFC 3339, as the times were
/// given: epoch milliseconds mean nothing to a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the window is empty: start {} is not before end {}",
    ksim_trace::time::timestamp(*.start_ms),
    ksim_trace::time::timestamp(*.end_ms)
)]
pub struct EmptyWindow {
    pub start_ms: i64,
    pub end_ms: i64,
}

/// `[start_ms, end_ms)`, in ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl Window {
    pub fn new(start_ms: i64, end_ms: i64) -> Result<Self, EmptyWindow> {
        if start_ms >= end_ms {
            return Err(EmptyWindow { start_ms, end_ms });
        }
        Ok(Self { start_ms, end_ms })
    }

    fn contains(&self, timestamp_ms: i64) -> bool {
        timestamp_ms >= self.start_ms && timestamp_ms < self.end_ms
    }

    /// A pod lifetime as the window sees it: `None` if they do not overlap; one that had not
    /// ended by the window end is still running.
    fn clip(&self, mut lifecycle: pb::PodLifecycle) -> Option<pb::PodLifecycle> {
        let overlaps = lifecycle.start_ms < self.end_ms
            && (lifecycle.end_ms == 0 || lifecycle.end_ms >= self.start_ms);
        if !overlaps {
            return None;
        }
        if lifecycle.end_ms == 0 || lifecycle.end_ms >= self.end_ms {
            lifecycle.end_ms = 0;
            lifecycle.outcome = pb::PodOutcome::Running.into();
        }
        Some(lifecycle)
    }
}

#[derive(Debug)]
pub struct Scan<S: Sorting> {
    window: Window,
    filter: Filter,
    sorting: S,
    state: BTreeMap<ObjectKey, pb::TraceObject>,
    facts: S::Sorter<Fact>,
    /// The window's deletes by key; the applies left out join them in [`Scan::finish`].
    occurrences: S::Sorter<Occurrence>,
    /// Window positions handed out so far (see [`At::Window`]).
    positions: u64,
    /// Lifetime records met so far: of two records of the same pod, the later wins.
    lifetime_records: u64,
    sample: Option<pb::ClusterSample>,
    nodes: BTreeMap<String, pb::RecordedNode>,
}

impl<S: Sorting> Scan<S> {
    pub fn new(window: Window, filter: Filter, sorting: S) -> Self {
        Self {
            window,
            filter,
            facts: sorting.sorter(),
            occurrences: sorting.sorter(),
            sorting,
            state: BTreeMap::new(),
            positions: 0,
            lifetime_records: 0,
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
    pub fn base(
        &mut self,
        objects: Vec<pb::TraceObject>,
        open_lifecycles: Vec<pb::PodLifecycle>,
    ) -> Result<(), S::Error> {
        for object in objects {
            self.state.insert(ObjectKey::of(&object), object);
        }
        for lifecycle in open_lifecycles {
            self.lifecycle(lifecycle)?;
        }
        Ok(())
    }

    /// One record of the log, in log order.
    pub fn record(&mut self, timestamp_ms: i64, record: &Record) -> Result<(), S::Error> {
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
                for object in &event.applied {
                    let at = At::Window(self.next_position());
                    if self.filter.keeps(object) {
                        let key = ObjectKey::of(object);
                        self.owners(object, &key, at)?;
                        self.exported(key)?;
                    }
                }
                for object in &event.deleted {
                    let position = self.next_position();
                    if self.filter.keeps(object) {
                        let key = ObjectKey::of(object);
                        self.occurrences.push(Occurrence::new(
                            key.clone(),
                            position,
                            Occurred::Deleted,
                        ))?;
                        self.exported(key)?;
                    }
                }
            }
            Record::Lifecycle(lifecycle) if timestamp_ms < self.window.end_ms => {
                self.lifecycle(lifecycle.clone())?;
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
        Ok(())
    }

    fn next_position(&mut self) -> u64 {
        self.positions += 1;
        self.positions - 1
    }

    fn exported(&mut self, key: ObjectKey) -> Result<(), S::Error> {
        self.facts.push(Fact::new(key, About::Exported))
    }

    /// Asks, for each owner `object` names, whether that owner is exported.
    fn owners(
        &mut self,
        object: &pb::TraceObject,
        key: &ObjectKey,
        at: At,
    ) -> Result<(), S::Error> {
        for owner in owner_keys(object) {
            let about = About::OwnerOf {
                at,
                object: key.clone(),
            };
            self.facts.push(Fact::new(owner, about))?;
        }
        Ok(())
    }

    /// The objects at the window start that the filter keeps, in key order; they are exported
    /// too, and their owners asked about.
    fn objects_at_start(&mut self) -> Result<Vec<pb::TraceObject>, S::Error> {
        let filter = &self.filter;
        self.state.retain(|_, object| filter.keeps(object));
        let objects: Vec<pb::TraceObject> = std::mem::take(&mut self.state).into_values().collect();
        for (index, object) in (0..).zip(&objects) {
            let key = ObjectKey::of(object);
            self.owners(object, &key, At::Start(index))?;
            self.exported(key)?;
        }
        Ok(objects)
    }

    fn lifecycle(&mut self, lifecycle: pb::PodLifecycle) -> Result<(), S::Error> {
        let seq = self.lifetime_records;
        self.lifetime_records += 1;
        let owner = lifetime_owner(&lifecycle);
        self.facts
            .push(Fact::new(owner, About::Lifetime { seq, lifecycle }))
    }

    /// Joins what the window said about each key: which objects are left out (by position)
    /// and which lifetimes are exported (in launch order).
    pub fn finish(mut self) -> Result<Cut<S>, S::Error> {
        let at_start = self.objects_at_start()?;
        let mut left_out_at_start = vec![false; at_start.len()];
        let mut left_out = self.sorting.sorter::<u64>();
        let mut launches = self.sorting.sorter::<Launch>();
        let mut occurrences = self.occurrences;
        // A key's facts come together, its `Exported` first: the key is exported if the last
        // `Exported` met was its own.
        let mut exported: Option<ObjectKey> = None;
        let mut facts = self.facts.sorted()?.peekable();
        while let Some(fact) = facts.next() {
            let Fact { key, about, .. } = fact?;
            let is_exported = exported.as_ref() == Some(&key);
            match about {
                About::Exported => exported = Some(key),
                About::Lifetime { lifecycle, .. } => {
                    // A pod's records are adjacent, oldest first: only the latest counts.
                    let superseded = matches!(
                        facts.peek(),
                        Some(Ok(Fact { key: next_key, about: About::Lifetime { lifecycle: next, .. }, .. }))
                            if *next_key == key && next.pod_name == lifecycle.pod_name
                    );
                    if is_exported
                        && !superseded
                        && let Some(lifecycle) = self.window.clip(lifecycle)
                    {
                        launches.push(Launch {
                            owner: key,
                            lifecycle,
                        })?;
                    }
                }
                About::OwnerOf { at, object } if is_exported => match at {
                    At::Start(index) => {
                        if let Some(out) = usize::try_from(index)
                            .ok()
                            .and_then(|i| left_out_at_start.get_mut(i))
                        {
                            *out = true;
                        }
                    }
                    At::Window(position) => {
                        left_out.push(position)?;
                        occurrences.push(Occurrence::new(
                            object,
                            position,
                            Occurred::DroppedApply,
                        ))?;
                    }
                },
                About::OwnerOf { .. } => {}
            }
        }

        deletes_follow_applies::<S>(occurrences.sorted()?, &mut left_out)?;

        let initial = at_start
            .into_iter()
            .zip(left_out_at_start)
            .filter_map(|(object, out)| (!out).then_some(object))
            .collect();
        Ok(Cut {
            window: self.window,
            filter: self.filter,
            initial,
            left_out: LeftOut::new(left_out.sorted()?)?,
            launches: launches.sorted()?,
            positions: 0,
            scanned_positions: self.positions,
            initial_sample: self.sample,
            initial_nodes: self.nodes.into_values().collect(),
        })
    }
}

/// A delete goes with its apply: left out if an earlier apply of the same key was. Sorted by key
/// and position, such an apply comes before the delete among the key's occurrences.
fn deletes_follow_applies<S: Sorting>(
    occurrences: Sorted<S, Occurrence>,
    left_out: &mut S::Sorter<u64>,
) -> Result<(), S::Error> {
    let mut dropped: Option<ObjectKey> = None;
    for occurrence in occurrences {
        let Occurrence {
            key,
            position,
            what,
            ..
        } = occurrence?;
        match what {
            Occurred::DroppedApply => dropped = Some(key),
            Occurred::Deleted if dropped.as_ref() == Some(&key) => left_out.push(position)?,
            Occurred::Deleted => {}
        }
    }
    Ok(())
}

/// The keys an object's owner references may name: each owner in the object's namespace, and
/// cluster-scoped, since a reference does not say which.
fn owner_keys(object: &pb::TraceObject) -> Vec<ObjectKey> {
    let Ok(json) = serde_json::from_slice::<Value>(&object.object_json) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for owner in owner_references(&json)
        .iter()
        .filter_map(|reference| ObjectKey::owner(reference, &object.namespace))
    {
        let cluster_scoped = owner.clone().cluster_scoped();
        if cluster_scoped != owner {
            keys.push(cluster_scoped);
        }
        keys.push(owner);
    }
    keys
}

#[derive(Debug)]
pub struct Cut<S: Sorting> {
    window: Window,
    filter: Filter,
    initial: Vec<pb::TraceObject>,
    /// Window positions of the objects left out because their owner is exported, and of
    /// their deletes.
    left_out: LeftOut<Sorted<S, u64>>,
    launches: Sorted<S, Launch>,
    /// Window positions met so far; the scan met `scanned_positions`.
    positions: u64,
    scanned_positions: u64,
    initial_sample: Option<pb::ClusterSample>,
    initial_nodes: Vec<pb::RecordedNode>,
}

impl<S: Sorting> Cut<S> {
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
        self.window
            .contains(sample.timestamp_ms)
            .then(|| self.filtered(sample.clone()))
    }

    /// One node record of the log for the export, or `None` outside the window.
    pub fn node(&self, node: &pb::RecordedNode) -> Option<pb::RecordedNode> {
        self.window
            .contains(node.timestamp_ms)
            .then(|| node.clone())
    }

    /// One usage sample of the log for the export: `None` outside the window or of a namespace
    /// the filter leaves out.
    pub fn usage(&self, usage: &pb::UsageSample) -> Option<pb::UsageSample> {
        (self.window.contains(usage.timestamp_ms) && self.filter.keeps_namespace(&usage.namespace))
            .then(|| usage.clone())
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
    /// The window's events must come in the order the scan met them.
    pub fn event(&mut self, event: &pb::TraceEvent) -> Result<Option<pb::TraceEvent>, S::Error> {
        if !self.window.contains(event.timestamp_ms) {
            return Ok(None);
        }
        let applied = self.kept(&event.applied)?;
        let deleted = self.kept(&event.deleted)?;
        Ok(
            (!applied.is_empty() || !deleted.is_empty()).then_some(pb::TraceEvent {
                timestamp_ms: event.timestamp_ms,
                applied,
                deleted,
            }),
        )
    }

    fn kept(&mut self, objects: &[pb::TraceObject]) -> Result<Vec<pb::TraceObject>, S::Error> {
        let mut kept = Vec::new();
        for object in objects {
            let position = self.positions;
            self.positions += 1;
            if self.filter.keeps(object) && !self.left_out.contains(position)? {
                kept.push(object.clone());
            }
        }
        Ok(kept)
    }

    /// The window's pod lifetimes, launch indexes assigned; after the last event, whose
    /// positions must have been the scan's.
    pub fn lifecycles(self) -> Result<Lifecycles<Sorted<S, Launch>>, PassesDisagree> {
        if self.positions != self.scanned_positions {
            return Err(PassesDisagree {
                scanned: self.scanned_positions,
                cut: self.positions,
            });
        }
        Ok(Lifecycles {
            launches: self.launches,
            group: None,
            next_index: 0,
        })
    }
}

/// The cut met other window objects than the scan did, so its positions name other objects.
#[derive(Debug, Error)]
#[error(
    "the export's passes over the log disagree on the window's objects: the scan met {scanned}, the cut {cut}"
)]
pub struct PassesDisagree {
    scanned: u64,
    cut: u64,
}

/// Ascending window positions, asked about in ascending order.
#[derive(Debug)]
struct LeftOut<I> {
    rest: I,
    next: Option<u64>,
}

impl<I: Iterator<Item = Result<u64, E>>, E> LeftOut<I> {
    fn new(mut rest: I) -> Result<Self, E> {
        let next = rest.next().transpose()?;
        Ok(Self { rest, next })
    }

    fn contains(&mut self, position: u64) -> Result<bool, E> {
        // Passed positions are done with; a position may be listed more than once.
        while self.next.is_some_and(|next| next < position) {
            self.next = self.rest.next().transpose()?;
        }
        Ok(self.next == Some(position))
    }
}

/// The exported lifetimes in launch order, each numbered among those of its owner and spec
/// hash: replay matches new pods to lifetimes by owner, spec hash and start order.
#[derive(Debug)]
pub struct Lifecycles<I> {
    launches: I,
    group: Option<(ObjectKey, u64)>,
    next_index: u32,
}

impl<I: Iterator<Item = Result<Launch, E>>, E> Iterator for Lifecycles<I> {
    type Item = Result<pb::PodLifecycle, E>;

    fn next(&mut self) -> Option<Self::Item> {
        let Launch {
            owner,
            mut lifecycle,
        } = match self.launches.next()? {
            Ok(launch) => launch,
            Err(error) => return Some(Err(error)),
        };
        let group = (owner, lifecycle.pod_spec_hash);
        if self.group.as_ref() != Some(&group) {
            self.group = Some(group);
            self.next_index = 0;
        }
        lifecycle.launch_index = self.next_index;
        self.next_index += 1;
        Some(Ok(lifecycle))
    }
}

#[cfg(test)]
mod tests;
