//! The first pass: reading a trace's records in order, reporting findings as they are found
//! (per record) or at the end (rules that need the whole trace's set of objects), and keeping
//! what `--fix` needs to know: identities and kinds, never objects.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::io::Read;

use ksim_trace::{Record, TraceReader, pb};
use serde_json::{Map, Value};

use crate::LintError;
use crate::object::{self, ObjectKey, TemplatePaths};
use crate::rules::{self, Rule, Severity};

/// Bounds of a believable usage sample ([`rules::BAD_USAGE`]): above the largest machines
/// clouds sell (under 2,000 vCPUs, 32 TiB), and a window metrics-server's resolution never
/// comes near.
const MAX_CPU_NANOCORES: i64 = 4_096 * 1_000_000_000;
const MAX_MEMORY_BYTES: i64 = 64 << 40;
const MAX_USAGE_WINDOW_MS: i64 = 3_600_000;

/// A kind as discovery lists it: (group, version, kind).
pub type Gvk = (String, String, String);

fn gvk_of(gvk: Option<&pb::GroupVersionKind>) -> Gvk {
    gvk.map(|g| (g.group.clone(), g.version.clone(), g.kind.clone()))
        .unwrap_or_default()
}

fn display_gvk((group, version, kind): &Gvk) -> String {
    if group.is_empty() {
        format!("{version}.{kind}")
    } else {
        format!("{group}/{version}.{kind}")
    }
}

/// Which rules run, and what the target cluster serves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Rules not to run (ids).
    pub disabled: BTreeSet<&'static str>,
    /// The kinds the target cluster serves; `None` (no cluster given) skips
    /// [`rules::UNKNOWN_KIND`].
    pub cluster_kinds: Option<BTreeSet<Gvk>>,
}

impl Options {
    pub fn enabled(&self, rule: &Rule) -> bool {
        !self.disabled.contains(rule.id)
            && (rule.id != rules::UNKNOWN_KIND.id || self.cluster_kinds.is_some())
    }
}

/// Where in the trace a finding or change is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Location {
    /// Position of the event among the file's events, from 0.
    pub event: Option<u64>,
    pub timestamp_ms: Option<i64>,
    /// Position of the lifecycle among the file's lifecycles, from 0.
    pub lifecycle: Option<u64>,
    /// Position of the usage sample among the file's usage samples, from 0.
    pub usage: Option<u64>,
    /// `apps/v1.Deployment shop/web`.
    pub object: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(event) = self.event {
            match self.timestamp_ms {
                Some(ms) => parts.push(format!("event {event} at {ms} ms")),
                None => parts.push(format!("event {event}")),
            }
        }
        if let Some(lifecycle) = self.lifecycle {
            parts.push(format!("lifecycle {lifecycle}"));
        }
        if let Some(usage) = self.usage {
            match self.timestamp_ms {
                Some(ms) => parts.push(format!("usage sample {usage} at {ms} ms")),
                None => parts.push(format!("usage sample {usage}")),
            }
        }
        if let Some(object) = &self.object {
            parts.push(object.clone());
        }
        if parts.is_empty() {
            parts.push("trace".to_owned());
        }
        f.write_str(&parts.join(", "))
    }
}

/// One thing a rule found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub rule: &'static Rule,
    pub location: Location,
    pub message: String,
}

impl fmt::Display for Finding {
    /// `error KS001 missing-reference: event 3 at 1767225600000 ms, apps/v1.Deployment shop/web: ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}: {}",
            self.rule.severity, self.rule, self.location, self.message
        )
    }
}

/// What the first pass learnt, for the summary and for [`crate::fix`].
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub events: u64,
    /// Applied and deleted objects over all events.
    pub objects: u64,
    pub lifecycles: u64,
    pub usage: u64,
    pub errors: u64,
    pub warnings: u64,
    /// Findings per rule id.
    pub by_rule: BTreeMap<&'static str, u64>,
    pub(crate) plan: Plan,
}

impl Summary {
    pub fn findings(&self) -> u64 {
        self.errors + self.warnings
    }
}

/// What [`crate::fix`] needs from the first pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// Objects the trace applies, of kinds the cluster serves.
    pub(crate) present: HashSet<ObjectKey>,
    pub(crate) missing_kinds: BTreeSet<Gvk>,
    /// Some event is older than the one before it.
    pub(crate) unordered: bool,
    /// Earliest and latest event timestamps.
    pub(crate) first_ms: Option<i64>,
    pub(crate) last_ms: Option<i64>,
    /// The usage samples (by position) that --fix removes.
    pub(crate) bad_usage: BTreeSet<u64>,
}

impl Plan {
    /// Whether an owner named by an object in `namespace` is in the trace (namespaced in the
    /// same namespace, or cluster-scoped).
    pub(crate) fn has_owner(&self, owner: &ObjectKey) -> bool {
        self.present.contains(owner)
            || self.present.contains(&ObjectKey {
                namespace: String::new(),
                ..owner.clone()
            })
    }
}

/// A reference or owner reference, checked once the whole trace has been read. Keyed by target
/// and referrer, so an object applied a million times costs one entry.
type Pending = BTreeMap<(ObjectKey, ObjectKey), (Location, String)>;

/// The streaming linter: [`Linter::record`] for each record in file order, then
/// [`Linter::finish`].
#[derive(Debug)]
pub struct Linter {
    options: Options,
    templates: TemplatePaths,
    window: (Option<i64>, Option<i64>),
    summary: Summary,
    /// Every applied object, whatever its kind (the cluster check comes at the end).
    applied: HashSet<ObjectKey>,
    kinds: BTreeMap<Gvk, Location>,
    references: Pending,
    owners: Pending,
    last_ms: Option<i64>,
    /// Invalid namespace names already reported: each is reported once.
    bad_namespaces: BTreeSet<String>,
    /// The latest usage sample's time per pod (namespace, name).
    usage_ms: HashMap<(String, String), i64>,
}

impl Linter {
    pub fn new(header: &pb::TraceHeader, options: Options) -> Self {
        let ms = |t: Option<&prost_types::Timestamp>| t.map(ksim_trace::time::millis);
        Self {
            templates: TemplatePaths::from_header(header),
            window: (ms(header.start_time.as_ref()), ms(header.end_time.as_ref())),
            options,
            summary: Summary::default(),
            applied: HashSet::new(),
            kinds: BTreeMap::new(),
            references: BTreeMap::new(),
            owners: BTreeMap::new(),
            last_ms: None,
            bad_namespaces: BTreeSet::new(),
            usage_ms: HashMap::new(),
        }
    }

    fn emit(&mut self, finding: Finding, sink: &mut impl FnMut(Finding)) {
        match finding.rule.severity {
            Severity::Error => self.summary.errors += 1,
            Severity::Warning => self.summary.warnings += 1,
        }
        *self.summary.by_rule.entry(finding.rule.id).or_default() += 1;
        sink(finding);
    }

    /// Checks one record; findings that need no more of the trace go to `sink` now.
    pub fn record(
        &mut self,
        record: &Record,
        sink: &mut impl FnMut(Finding),
    ) -> Result<(), LintError> {
        match record {
            Record::Event(event) => self.event(event, sink),
            Record::Lifecycle(_) => {
                self.summary.lifecycles += 1;
                Ok(())
            }
            Record::Usage(usage) => {
                self.usage(usage, sink);
                Ok(())
            }
            // The recorded cluster's state is compared with the simulation, never replayed.
            Record::Sample(_) | Record::Node(_) => Ok(()),
        }
    }

    /// [`rules::BAD_USAGE`]: the reader has refused what is negative or unnamed; what is left
    /// to check needs the pod's previous sample, the window or a bound.
    fn usage(&mut self, usage: &pb::UsageSample, sink: &mut impl FnMut(Finding)) {
        let index = self.summary.usage;
        self.summary.usage += 1;
        if !self.options.enabled(&rules::BAD_USAGE) {
            return;
        }
        let ms = usage.timestamp_ms;
        let pod = (usage.namespace.clone(), usage.pod.clone());
        let mut problems = Vec::new();
        if let Some(&previous) = self.usage_ms.get(&pod)
            && ms <= previous
        {
            problems.push(format!(
                "at or before the pod's previous sample, at {previous} ms"
            ));
        }
        let (start, end) = self.window;
        if start.is_some_and(|start| ms < start) || end.is_some_and(|end| ms >= end) {
            problems.push("outside the header's time window".to_owned());
        }
        if usage.window_ms > MAX_USAGE_WINDOW_MS {
            problems.push(format!(
                "a window of {} s, over an hour",
                usage.window_ms / 1000
            ));
        }
        for container in &usage.containers {
            if container.cpu_nanocores > MAX_CPU_NANOCORES {
                problems.push(format!(
                    "container {:?} uses {} cores, more than any machine has",
                    container.name,
                    container.cpu_nanocores / 1_000_000_000
                ));
            }
            if container.memory_bytes > MAX_MEMORY_BYTES {
                problems.push(format!(
                    "container {:?} uses {} GiB, more than any machine has",
                    container.name,
                    container.memory_bytes >> 30
                ));
            }
        }
        if problems.is_empty() {
            // Only a sample --fix keeps moves its pod on.
            self.usage_ms.insert(pod, ms);
            return;
        }
        self.summary.plan.bad_usage.insert(index);
        let location = Location {
            usage: Some(index),
            timestamp_ms: Some(ms),
            object: Some(format!("pod {}/{}", usage.namespace, usage.pod)),
            ..Location::default()
        };
        let message = problems.join("; ");
        self.emit(finding(&rules::BAD_USAGE, location, message), sink);
    }

    fn event(
        &mut self,
        event: &pb::TraceEvent,
        sink: &mut impl FnMut(Finding),
    ) -> Result<(), LintError> {
        let index = self.summary.events;
        self.summary.events += 1;
        self.summary.objects += (event.applied.len() + event.deleted.len()) as u64;
        let ms = event.timestamp_ms;
        let at = Location {
            event: Some(index),
            timestamp_ms: Some(ms),
            ..Location::default()
        };
        let plan = &mut self.summary.plan;
        plan.first_ms = Some(plan.first_ms.map_or(ms, |first| first.min(ms)));
        plan.last_ms = Some(plan.last_ms.map_or(ms, |last| last.max(ms)));
        if self.options.enabled(&rules::OUT_OF_ORDER) {
            if let Some(previous) = self.last_ms
                && ms < previous
            {
                self.summary.plan.unordered = true;
                let message = format!("older than the event before it, at {previous} ms");
                self.emit(finding(&rules::OUT_OF_ORDER, at.clone(), message), sink);
            }
            let (start, end) = self.window;
            if let Some(start) = start
                && ms < start
            {
                let message = format!("before the header's start time ({start} ms)");
                self.emit(finding(&rules::OUT_OF_ORDER, at.clone(), message), sink);
            }
            if let Some(end) = end
                && ms >= end
            {
                let message = format!("at or after the header's end time ({end} ms, exclusive)");
                self.emit(finding(&rules::OUT_OF_ORDER, at.clone(), message), sink);
            }
        }
        self.last_ms = Some(self.last_ms.map_or(ms, |last| last.max(ms)));

        for object in event.applied.iter().chain(&event.deleted) {
            self.kinds
                .entry(gvk_of(object.gvk.as_ref()))
                .or_insert_with(|| Location {
                    object: Some(object::describe(object)),
                    ..at.clone()
                });
            if self.options.enabled(&rules::INVALID_VALUE) {
                self.namespace_names(object, &at, sink);
            }
        }
        for object in &event.applied {
            let key = ObjectKey::of(object);
            let location = Location {
                object: Some(object::describe(object)),
                ..at.clone()
            };
            if object.object_json.is_empty() {
                self.applied.insert(key);
                continue;
            }
            let value = parse(&object.object_json, &location)?;
            if self.options.enabled(&rules::INVALID_VALUE)
                && let Some(replicas) = object::invalid_replicas(&value)
            {
                let message = format!(
                    "spec.replicas {replicas} is not an integer from 0 to {} (an int32)",
                    ksim_trace::names::MAX_REPLICAS
                );
                self.emit(
                    finding(&rules::INVALID_VALUE, location.clone(), message),
                    sink,
                );
            }
            if self.options.enabled(&rules::SERVER_FIELDS) {
                let fields = object::server_fields(&value);
                if !fields.is_empty() {
                    let message = format!("carries {}", fields.join(", "));
                    self.emit(
                        finding(&rules::SERVER_FIELDS, location.clone(), message),
                        sink,
                    );
                }
            }
            if self.options.enabled(&rules::ABSENT_OWNER) {
                for owner in object::owner_references(&value, &object.namespace) {
                    let entry = (owner, key.clone());
                    self.owners
                        .entry(entry)
                        .or_insert_with(|| (location.clone(), String::new()));
                }
            }
            if self.options.enabled(&rules::MISSING_REFERENCE) {
                let value = Value::Object(value);
                let (group, kind) = (key.group.as_str(), key.kind.as_str());
                for template in self.templates.of(group, kind) {
                    let spec_path = object::pod_spec_path(&template);
                    let Some(spec) = value.pointer(&spec_path) else {
                        continue;
                    };
                    for reference in object::references(spec, &spec_path) {
                        let target =
                            ObjectKey::core(reference.kind, &object.namespace, &reference.name);
                        let entry = (target, key.clone());
                        self.references
                            .entry(entry)
                            .or_insert_with(|| (location.clone(), reference.at));
                    }
                }
            }
            self.applied.insert(key);
        }
        Ok(())
    }

    /// Reports the object's namespace, or a Namespace's own name, when it is not a DNS label
    /// and was not reported before.
    fn namespace_names(
        &mut self,
        object: &pb::TraceObject,
        at: &Location,
        sink: &mut impl FnMut(Finding),
    ) {
        let is_namespace = object
            .gvk
            .as_ref()
            .is_some_and(|gvk| gvk.group.is_empty() && gvk.kind == "Namespace");
        let names = [
            Some(&object.namespace).filter(|namespace| !namespace.is_empty()),
            Some(&object.name).filter(|_| is_namespace),
        ];
        for name in names.into_iter().flatten() {
            if ksim_trace::names::is_dns_label(name) || self.bad_namespaces.contains(name) {
                continue;
            }
            self.bad_namespaces.insert(name.clone());
            let location = Location {
                object: Some(object::describe(object)),
                ..at.clone()
            };
            let message = format!(
                "namespace {name:?} is not a DNS label (at most 63 lowercase letters, digits and \
                 '-', starting and ending with a letter or digit)"
            );
            self.emit(finding(&rules::INVALID_VALUE, location, message), sink);
        }
    }

    /// Reports what needed the whole trace (missing references, absent owners, unknown kinds),
    /// sorted by position, and returns the summary.
    pub fn finish(mut self, sink: &mut impl FnMut(Finding)) -> Summary {
        let mut late = Vec::new();
        let missing_kinds: BTreeSet<Gvk> = match &self.options.cluster_kinds {
            Some(served) if self.options.enabled(&rules::UNKNOWN_KIND) => self
                .kinds
                .keys()
                .filter(|gvk| !served.contains(*gvk))
                .cloned()
                .collect(),
            _ => BTreeSet::new(),
        };
        for gvk in &missing_kinds {
            if let Some(location) = self.kinds.get(gvk) {
                let message = format!(
                    "the cluster does not serve {} (first seen here)",
                    display_gvk(gvk)
                );
                late.push(finding(&rules::UNKNOWN_KIND, location.clone(), message));
            }
        }
        let missing_groups_kinds: HashSet<(String, String)> = missing_kinds
            .iter()
            .map(|(group, _, kind)| (group.clone(), kind.clone()))
            .collect();
        let applied = std::mem::take(&mut self.applied);
        self.summary.plan.present = applied
            .into_iter()
            .filter(|key| !missing_groups_kinds.contains(&(key.group.clone(), key.kind.clone())))
            .collect();
        self.summary.plan.missing_kinds = missing_kinds;

        for ((target, _), (location, at)) in std::mem::take(&mut self.references) {
            if !self.summary.plan.present.contains(&target) {
                let message =
                    format!("its pod template ({at}) references {target}, absent from the trace",);
                late.push(finding(&rules::MISSING_REFERENCE, location, message));
            }
        }
        for ((owner, _), (location, _)) in std::mem::take(&mut self.owners) {
            if !self.summary.plan.has_owner(&owner) {
                let message = format!("its owner {owner} is absent from the trace");
                late.push(finding(&rules::ABSENT_OWNER, location, message));
            }
        }
        late.sort_by(|a, b| {
            (&a.location, a.rule.id, &a.message).cmp(&(&b.location, b.rule.id, &b.message))
        });
        for finding in late {
            self.emit(finding, sink);
        }
        self.summary
    }
}

fn finding(rule: &'static Rule, location: Location, message: String) -> Finding {
    Finding {
        rule,
        location,
        message,
    }
}

pub(crate) fn parse(json: &[u8], location: &Location) -> Result<Map<String, Value>, LintError> {
    match serde_json::from_slice::<Value>(json) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(LintError::BadObject {
            location: location.to_string(),
            reason: "not a JSON object".to_owned(),
        }),
        Err(error) => Err(LintError::BadObject {
            location: location.to_string(),
            reason: error.to_string(),
        }),
    }
}

/// Reads every record of `reader` (which should be [`TraceReader::unordered`], so events out of
/// order are findings rather than a read error), sending findings to `sink`.
pub fn lint<R: Read>(
    mut reader: TraceReader<R>,
    options: Options,
    sink: &mut impl FnMut(Finding),
) -> Result<Summary, LintError> {
    let mut linter = Linter::new(reader.header(), options);
    while let Some(record) = reader.next_record()? {
        linter.record(&record, sink)?;
    }
    Ok(linter.finish(sink))
}
