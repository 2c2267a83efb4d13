//! Learning a provisioning [`Model`] from a recording. Pure: the caller reads the trace and
//! hands in what it saw of each node and pod (times in ms since the epoch, on the tracer's
//! clock where it has one); out come the figures per node group and instance type, per pod
//! owner, and the model.
//!
//! Each delay is learned only where the recording saw both of its ends:
//! - registration, a scale-up to the Node object existing: from cluster-autoscaler's
//!   `TriggeredScaleUp` events (where the trace recorded Events) to the node's creation, each
//!   node matched to the latest scale-up of its group before it not yet matched;
//! - ready, the Node existing to Ready: nodes created inside the recording;
//! - termination, the removal beginning (unschedulable, or CA's taint) to the node being gone;
//! - pod start, bound to Running (and to Ready); a first pull, where the owner's first pod on
//!   a node created inside the recording took longer than its later pods on nodes.
//!
//! A delay with enough samples becomes percentiles, with fewer the samples themselves; one
//! never seen is 0 and the notes say so.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use super::{Delay, MAX_DELAY, Model, NodeDelays, NodeDelaysOverride, NodeModel, PodDelays};
use super::{PodModel, delay::MAX_SAMPLES};
use crate::go_duration;

/// From this many samples on, a delay is written as percentiles; below, as its samples.
pub const MIN_PERCENTILE_SAMPLES: usize = 20;
/// From this many samples on, percentiles include p99 (fewer say nothing about a 1% tail).
pub const MIN_P99_SAMPLES: usize = 100;
/// A group (or owner) whose median differs from the default's by more than this share gets
/// its own entry in the model.
const DIFFERS: f64 = 0.2;
/// Events of one scale-up (CA writes one per pod it helps) arrive within this of each other.
pub const SCALE_UP_EVENTS_WITHIN_MS: i64 = 10_000;
/// A node seen this soon after its creationTimestamp (whole seconds) is timed by the tracer's
/// first sight of it instead (milliseconds, the clock its Ready is timed by).
const FIRST_SIGHT_WITHIN_MS: i64 = 2_000;

/// What the recording saw of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeObservation {
    pub name: String,
    pub group: String,
    /// `node.kubernetes.io/instance-type`, or "".
    pub instance_type: String,
    /// The node's creationTimestamp (whole seconds).
    pub created_ms: i64,
    /// When the tracer first recorded it.
    pub first_seen_ms: i64,
    /// When the tracer first recorded it Ready.
    pub ready_ms: Option<i64>,
    /// When its removal began (unschedulable or CA's taint).
    pub removal_started_ms: Option<i64>,
    pub deleted_ms: Option<i64>,
    /// The scale-up it answered, set by [`Observations::match_scale_ups`].
    pub triggered_ms: Option<i64>,
}

impl NodeObservation {
    /// Whether the recording, from `recorded_from_ms` on, saw it created: its creation, as
    /// precisely as known, is not before. (A creationTimestamp has whole seconds: a node
    /// created just after the start can carry a second before it.) A node first recorded at
    /// the start and created before it is the first instant's: an export stamps the nodes that
    /// existed with the window's start, which is no sight of a creation. A creation of 0 is
    /// unknown, not 1970.
    fn seen_coming(&self, recorded_from_ms: i64) -> bool {
        let first_instant =
            self.first_seen_ms <= recorded_from_ms && self.created_ms < recorded_from_ms;
        self.created_ms > 0 && !first_instant && self.created() >= recorded_from_ms
    }

    /// When it was created, as precisely as the recording says.
    fn created(&self) -> i64 {
        let sight = self.first_seen_ms - self.created_ms;
        if (0..FIRST_SIGHT_WITHIN_MS).contains(&sight) {
            self.first_seen_ms
        } else {
            self.created_ms
        }
    }
}

/// One scale-up cluster-autoscaler asked for: `nodes` more in `group` at `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleUp {
    pub group: String,
    pub at_ms: i64,
    pub nodes: u32,
}

/// What the recording saw of one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodObservation {
    /// `Kind/namespace/name`.
    pub owner: String,
    pub bound_ms: Option<i64>,
    pub started_ms: i64,
    pub ready_ms: Option<i64>,
    /// The node it ran on, or "".
    pub node: String,
}

/// Everything a calibration takes.
#[derive(Debug, Clone, Default)]
pub struct Observations {
    /// Where the recording begins: nodes created before it were not seen coming.
    pub recorded_from_ms: i64,
    /// Whether the trace recorded Events at all (else registration cannot be learned).
    pub events_recorded: bool,
    pub nodes: Vec<NodeObservation>,
    pub scale_ups: Vec<ScaleUp>,
    pub pods: Vec<PodObservation>,
}

/// Count and percentiles of one delay's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
}

impl Figures {
    /// `None` without samples.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        let mut sorted = samples.to_vec();
        sorted.sort();
        let at = |q: f64| {
            // Nearest rank: the smallest sample with at least q of them at or below it.
            let rank = (q * sorted.len() as f64).ceil() as usize;
            sorted.get(rank.saturating_sub(1)).copied()
        };
        Some(Self {
            count: sorted.len(),
            p50: at(0.5)?,
            p90: at(0.9)?,
            p99: at(0.99)?,
        })
    }
}

/// Where a group's scale-up-to-Ready starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartedFrom {
    /// CA's `TriggeredScaleUp`: registration and ready both known.
    Trigger,
    /// The node's creation: registration unknown.
    Creation,
    /// `triggered` of the `of` nodes from CA's trigger, the others from their creation (they
    /// came of no recorded scale-up).
    Mixed { triggered: usize, of: usize },
}

/// The figures of one node group and instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFigures {
    pub group: String,
    pub instance_type: String,
    /// Nodes of it the recording saw.
    pub nodes: usize,
    pub registration: Option<Figures>,
    pub ready: Option<Figures>,
    /// From the scale-up (or the creation) to Ready.
    pub to_ready: Option<Figures>,
    pub started_from: StartedFrom,
    pub termination: Option<Figures>,
}

/// The pod start figures of one owner.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerFigures {
    pub owner: String,
    /// Bound to Running.
    pub start: Option<Figures>,
    /// Bound to Ready.
    pub ready: Option<Figures>,
    /// The first pull learned for it (its model entry's, else none).
    pub first_pull: Option<Figures>,
}

/// What a calibration learned.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub groups: Vec<GroupFigures>,
    pub owners: Vec<OwnerFigures>,
    /// What could not be learned and why, one line each.
    pub notes: Vec<String>,
    pub model: Model,
}

/// Samples of one delay, in ms; a negative one (clocks of whole seconds) counts as 0 and one
/// past [`MAX_DELAY`] is a failure, not a delay, and is left out.
#[derive(Debug, Default, Clone)]
struct Samples(Vec<Duration>);

impl Samples {
    fn push(&mut self, from_ms: i64, to_ms: i64) {
        let ms = to_ms.saturating_sub(from_ms).max(0);
        let delay = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        if delay <= MAX_DELAY {
            self.0.push(delay);
        }
    }

    fn extend(&mut self, other: &Samples) {
        self.0.extend_from_slice(&other.0);
    }

    fn figures(&self) -> Option<Figures> {
        Figures::of(&self.0)
    }
}

/// The model's delay for `samples`: percentiles when there are enough of them, else the
/// samples; 0 without any (or when the median is 0 and there are too many to list).
pub fn delay_of(samples: &[Duration]) -> Delay {
    let Some(figures) = Figures::of(samples) else {
        return Delay::default();
    };
    if figures.p99.is_zero() {
        return Delay::default();
    }
    if samples.len() < MIN_PERCENTILE_SAMPLES || figures.p50.is_zero() {
        // A median of 0 has no log-normal through it: the samples say it as it was.
        let mut listed = samples.to_vec();
        listed.sort();
        if listed.len() > MAX_SAMPLES {
            let step = listed.len() as f64 / MAX_SAMPLES as f64;
            listed = (0..MAX_SAMPLES)
                .filter_map(|i| listed.get((i as f64 * step) as usize).copied())
                .collect();
        }
        return Delay::Samples(listed);
    }
    Delay::Percentiles {
        p50: figures.p50,
        p90: Some(figures.p90),
        p99: (samples.len() >= MIN_P99_SAMPLES).then_some(figures.p99),
    }
}

/// The scale-ups of one `TriggeredScaleUp` message: `pod triggered scale-up: [{m5 1->2 (max:
/// 10)} {gpu 0->1 (max: 4)}]` gives `[(m5, 1), (gpu, 1)]`. Empty when it says none.
pub fn parse_scale_up(message: &str) -> Vec<(String, u32)> {
    let Some(list) = message.split_once('[').map(|(_, rest)| rest) else {
        return Vec::new();
    };
    list.split('{')
        .filter_map(|item| {
            let mut words = item.split_whitespace();
            let group = words.next()?;
            let (from, to) = words.next()?.split_once("->")?;
            let (from, to) = (from.parse::<u32>().ok()?, to.parse::<u32>().ok()?);
            (to > from).then(|| (group.to_owned(), to - from))
        })
        .collect()
}

impl Observations {
    /// Adds the scale-ups of one `TriggeredScaleUp` event seen at `at_ms`; CA writes one event
    /// per pod a scale-up helps, so the same group's step within
    /// [`SCALE_UP_EVENTS_WITHIN_MS`] of one already added is that one again.
    pub fn add_scale_up_event(&mut self, message: &str, at_ms: i64) {
        for (group, nodes) in parse_scale_up(message) {
            let again = self.scale_ups.iter().any(|known| {
                known.group == group
                    && known.nodes == nodes
                    && (at_ms - known.at_ms).abs() <= SCALE_UP_EVENTS_WITHIN_MS
            });
            if !again {
                self.scale_ups.push(ScaleUp {
                    group,
                    at_ms,
                    nodes,
                });
            }
        }
    }

    /// Gives each node created inside the recording the scale-up it answered: the latest of its
    /// group before its creation that has a node left to give (no longer than a day before).
    pub fn match_scale_ups(&mut self) {
        let mut slots: HashMap<&str, Vec<(i64, u32)>> = HashMap::new();
        for scale_up in &self.scale_ups {
            slots
                .entry(scale_up.group.as_str())
                .or_default()
                .push((scale_up.at_ms, scale_up.nodes));
        }
        for list in slots.values_mut() {
            list.sort();
        }
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by_key(|i| self.nodes.get(*i).map(NodeObservation::created));
        let longest = i64::try_from(MAX_DELAY.as_millis()).unwrap_or(i64::MAX);
        let mut matched: Vec<(usize, i64)> = Vec::new();
        for index in order {
            let Some(node) = self.nodes.get(index) else {
                continue;
            };
            let created = node.created();
            if !node.seen_coming(self.recorded_from_ms) {
                continue;
            }
            let Some(list) = slots.get_mut(node.group.as_str()) else {
                continue;
            };
            let slot = list.iter_mut().rev().find(|(at, left)| {
                *left > 0 && *at <= created && created.saturating_sub(*at) <= longest
            });
            if let Some((at, left)) = slot {
                *left -= 1;
                matched.push((index, *at));
            }
        }
        for (index, at) in matched {
            if let Some(node) = self.nodes.get_mut(index) {
                node.triggered_ms = Some(at);
            }
        }
    }
}

#[derive(Default)]
struct NodeSamples {
    nodes: usize,
    registration: Samples,
    ready: Samples,
    to_ready: Samples,
    termination: Samples,
    triggered: usize,
}

impl NodeSamples {
    fn add(&mut self, other: &NodeSamples) {
        self.nodes += other.nodes;
        self.registration.extend(&other.registration);
        self.ready.extend(&other.ready);
        self.to_ready.extend(&other.to_ready);
        self.termination.extend(&other.termination);
        self.triggered += other.triggered;
    }

    fn delays(&self) -> NodeDelays {
        NodeDelays {
            registration: delay_of(&self.registration.0),
            ready: delay_of(&self.ready.0),
            termination: delay_of(&self.termination.0),
        }
    }
}

#[derive(Default)]
struct PodSamples {
    /// Bound to Running, of pods whose node's first pull is not in question.
    start: Samples,
    /// Bound to Running, of each owner's first pod on a node created inside the recording.
    first: Samples,
    ready: Samples,
}

impl PodSamples {
    fn add(&mut self, other: &PodSamples) {
        self.start.extend(&other.start);
        self.first.extend(&other.first);
        self.ready.extend(&other.ready);
    }

    /// The start delay and the first pull: the first pods' extra time over the others'
    /// median, when their median is past the others' p90 (else there is no pull to tell from
    /// the spread of starts and every start counts alike).
    fn delays(&self) -> PodDelays {
        let (Some(later), Some(first)) = (self.start.figures(), self.first.figures()) else {
            let mut all = self.start.clone();
            all.extend(&self.first);
            return PodDelays {
                start: delay_of(&all.0),
                first_pull: Delay::default(),
            };
        };
        if first.p50 <= later.p90 {
            let mut all = self.start.clone();
            all.extend(&self.first);
            return PodDelays {
                start: delay_of(&all.0),
                first_pull: Delay::default(),
            };
        }
        let pulls: Vec<Duration> = self
            .first
            .0
            .iter()
            .map(|d| d.saturating_sub(later.p50))
            .collect();
        PodDelays {
            start: delay_of(&self.start.0),
            first_pull: delay_of(&pulls),
        }
    }
}

/// Whether two delays' medians differ by more than [`DIFFERS`] of the larger.
fn differs(a: &Delay, b: &Delay) -> bool {
    let (a, b) = (a.median().as_secs_f64(), b.median().as_secs_f64());
    let larger = a.max(b);
    larger > 0.0 && (a - b).abs() > DIFFERS * larger
}

/// Learns the figures and the model `name` from `observations`; `source` says where they came
/// from (the model's `source`: `ksim trace calibrate prod.ktrace`).
pub fn calibrate(observations: &Observations, name: &str, source: &str) -> Calibration {
    let mut notes = Vec::new();
    // Nodes created inside the recording: their pods' first pulls can be told.
    let mut fresh: HashSet<&str> = HashSet::new();
    let mut by_type: BTreeMap<(String, String), NodeSamples> = BTreeMap::new();
    for node in &observations.nodes {
        let samples = by_type
            .entry((node.group.clone(), node.instance_type.clone()))
            .or_default();
        samples.nodes += 1;
        let created = node.created();
        // A creation of 0 is unknown, not 1970.
        if node.seen_coming(observations.recorded_from_ms) {
            fresh.insert(node.name.as_str());
            if let Some(ready) = node.ready_ms {
                samples.ready.push(created, ready);
                samples
                    .to_ready
                    .push(node.triggered_ms.unwrap_or(created), ready);
            }
            if let Some(triggered) = node.triggered_ms {
                samples.registration.push(triggered, created);
                samples.triggered += 1;
            }
        }
        if let (Some(began), Some(deleted)) = (node.removal_started_ms, node.deleted_ms) {
            samples.termination.push(began, deleted);
        }
    }
    let groups: Vec<GroupFigures> = by_type
        .iter()
        .map(|((group, instance_type), s)| GroupFigures {
            group: group.clone(),
            instance_type: instance_type.clone(),
            nodes: s.nodes,
            registration: s.registration.figures(),
            ready: s.ready.figures(),
            to_ready: s.to_ready.figures(),
            // Mixed within a group only when some nodes came of no recorded scale-up.
            started_from: match (s.triggered, s.to_ready.0.len()) {
                (0, _) => StartedFrom::Creation,
                (triggered, of) if triggered >= of => StartedFrom::Trigger,
                (triggered, of) => StartedFrom::Mixed { triggered, of },
            },
            termination: s.termination.figures(),
        })
        .collect();

    let mut by_group: BTreeMap<&str, NodeSamples> = BTreeMap::new();
    let mut all_nodes = NodeSamples::default();
    for ((group, _), samples) in &by_type {
        by_group.entry(group.as_str()).or_default().add(samples);
        all_nodes.add(samples);
    }
    let default = all_nodes.delays();
    let mut node_groups = BTreeMap::new();
    for (group, samples) in &by_group {
        if group.is_empty() {
            continue;
        }
        let own = samples.delays();
        let pick = |mine: &Delay, theirs: &Delay| {
            (!mine.is_zero() && differs(mine, theirs)).then(|| mine.clone())
        };
        let over = NodeDelaysOverride {
            registration: pick(&own.registration, &default.registration),
            ready: pick(&own.ready, &default.ready),
            termination: pick(&own.termination, &default.termination),
        };
        if over != NodeDelaysOverride::default() {
            node_groups.insert((*group).to_owned(), over);
        }
    }

    if observations.nodes.is_empty() {
        notes.push("the trace holds no recorded nodes: no node delay could be learned".to_owned());
    } else {
        if !observations.events_recorded {
            notes.push(
                "the trace recorded no Events: registration (scale-up to the Node) is unknown, \
                 left at 0, and scale-up-to-Ready starts at the node's creation"
                    .to_owned(),
            );
        } else if all_nodes.registration.0.is_empty() {
            notes.push(
                "no node matched a cluster-autoscaler TriggeredScaleUp of its group: \
                 registration is unknown, left at 0"
                    .to_owned(),
            );
        }
        let groups: HashSet<&str> = by_group.keys().copied().collect();
        let mut strangers: Vec<&str> = observations
            .scale_ups
            .iter()
            .map(|s| s.group.as_str())
            .filter(|g| !groups.contains(g))
            .collect();
        strangers.sort_unstable();
        strangers.dedup();
        if !strangers.is_empty() {
            notes.push(format!(
                "cluster-autoscaler scaled up group(s) no recorded node belongs to: {}",
                strangers.join(", ")
            ));
        }
        if all_nodes.ready.0.is_empty() {
            notes.push(
                "no node was created inside the recording: ready is unknown, left at 0".to_owned(),
            );
        }
        if all_nodes.termination.0.is_empty() {
            notes.push(
                "no node was seen from its removal to its deletion: termination is unknown, \
                 left at 0"
                    .to_owned(),
            );
        }
    }

    // Pods: each owner's first pod on each node created inside the recording is a first.
    let mut pods: Vec<&PodObservation> = observations.pods.iter().collect();
    pods.sort_by_key(|pod| (pod.bound_ms.unwrap_or(pod.started_ms), pod.started_ms));
    let mut placed: HashSet<(&str, &str)> = HashSet::new();
    let mut by_owner: BTreeMap<&str, PodSamples> = BTreeMap::new();
    let mut unbound = 0usize;
    for pod in pods {
        let samples = by_owner.entry(pod.owner.as_str()).or_default();
        let Some(bound) = pod.bound_ms else {
            unbound += 1;
            continue;
        };
        if let Some(ready) = pod.ready_ms {
            samples.ready.push(bound, ready);
        }
        let first = fresh.contains(pod.node.as_str())
            && placed.insert((pod.owner.as_str(), pod.node.as_str()));
        if first {
            samples.first.push(bound, pod.started_ms);
        } else {
            samples.start.push(bound, pod.started_ms);
        }
    }
    if unbound > 0 {
        notes.push(format!(
            "{unbound} pod(s) have no recorded binding (a trace from before the tracer recorded \
             it): their start is unknown"
        ));
    }
    let mut all_pods = PodSamples::default();
    for samples in by_owner.values() {
        all_pods.add(samples);
    }
    let pod_default = all_pods.delays();
    if observations.pods.is_empty() {
        notes.push("the trace holds no pod lifetimes: no pod start could be learned".to_owned());
    } else if all_pods.first.0.is_empty() {
        notes.push(
            "no pod ran on a node created inside the recording: no first pull can be told, \
             first pull left at 0"
                .to_owned(),
        );
    } else if pod_default.first_pull.is_zero() {
        notes.push(
            "no first pull could be told apart (an owner's first pods on new nodes started no \
             later than its others): first pull left at 0"
                .to_owned(),
        );
    }
    let mut owners = Vec::new();
    let mut pod_owners = BTreeMap::new();
    for (owner, samples) in &by_owner {
        let own = samples.delays();
        let mut all = samples.start.clone();
        all.extend(&samples.first);
        owners.push(OwnerFigures {
            owner: (*owner).to_owned(),
            start: all.figures(),
            ready: samples.ready.figures(),
            first_pull: match &own.first_pull {
                Delay::Percentiles { p50, p90, p99 } => Some(Figures {
                    count: samples.first.0.len(),
                    p50: *p50,
                    p90: p90.unwrap_or(*p50),
                    p99: p99.or(*p90).unwrap_or(*p50),
                }),
                Delay::Samples(list) => Figures::of(list),
                Delay::Fixed(_) => None,
            },
        });
        let enough = all.0.len() >= MIN_PERCENTILE_SAMPLES;
        let own_entry = enough
            && (differs(&own.start, &pod_default.start)
                || differs(&own.first_pull, &pod_default.first_pull));
        // An owner is `Kind/namespace/name`; anything else cannot be a model's key.
        let keyed = owner.split('/').count() == 3 && !owner.split('/').any(str::is_empty);
        if own_entry && keyed {
            pod_owners.insert((*owner).to_owned(), own);
        }
    }

    let model = Model {
        name: name.to_owned(),
        source: source.to_owned(),
        seed: 0,
        nodes: NodeModel {
            default,
            groups: node_groups,
        },
        pods: PodModel {
            default: pod_default,
            owners: pod_owners,
        },
    };
    Calibration {
        groups,
        owners,
        notes,
        model,
    }
}

impl Calibration {
    /// The figures as the terminal shows them: a table per node group and instance type, one
    /// per owner, then the notes.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let cell = |figures: &Option<Figures>| match figures {
            Some(f) => format!(
                "{} {}/{}/{}",
                f.count,
                go_duration::format(f.p50),
                go_duration::format(f.p90),
                go_duration::format(f.p99)
            ),
            None => "-".to_owned(),
        };
        let mut rows = vec![[
            "group".to_owned(),
            "instance type".to_owned(),
            "nodes".to_owned(),
            "scale-up->Ready from".to_owned(),
            "scale-up->Ready n p50/p90/p99".to_owned(),
            "registration".to_owned(),
            "created->Ready".to_owned(),
            "termination".to_owned(),
        ]];
        for g in &self.groups {
            rows.push([
                if g.group.is_empty() {
                    "(none)".to_owned()
                } else {
                    g.group.clone()
                },
                if g.instance_type.is_empty() {
                    "-".to_owned()
                } else {
                    g.instance_type.clone()
                },
                g.nodes.to_string(),
                match g.started_from {
                    StartedFrom::Trigger => "CA trigger".to_owned(),
                    StartedFrom::Creation => "node creation".to_owned(),
                    StartedFrom::Mixed { triggered, of } => {
                        format!("CA trigger ({triggered} of {of})")
                    }
                },
                cell(&g.to_ready),
                cell(&g.registration),
                cell(&g.ready),
                cell(&g.termination),
            ]);
        }
        if self.groups.is_empty() {
            out.push_str("nodes: none recorded\n");
        } else {
            write_rows(&mut out, &rows);
        }
        let mut rows = vec![[
            "owner".to_owned(),
            "pod start n p50/p90/p99".to_owned(),
            "bound->Ready".to_owned(),
            "first pull".to_owned(),
        ]];
        for o in &self.owners {
            rows.push([
                o.owner.clone(),
                cell(&o.start),
                cell(&o.ready),
                cell(&o.first_pull),
            ]);
        }
        out.push('\n');
        if self.owners.is_empty() {
            out.push_str("pods: no lifetimes recorded\n");
        } else {
            write_rows(&mut out, &rows);
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        let _ = writeln!(out, "model: {}", self.model.summary());
        out
    }
}

fn write_rows<const N: usize>(out: &mut String, rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, text) in widths.iter_mut().zip(row) {
            *width = (*width).max(text.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, (width, text)) in widths.iter().zip(row).enumerate() {
            if i + 1 == N {
                line.push_str(text);
            } else {
                let _ = write!(line, "{text:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
