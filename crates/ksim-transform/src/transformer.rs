//! Applying the rules to one record at a time.
//!
//! Time rules and the trace's window: a rule's offsets count from the trace's start as the rules
//! before it left it (a shift moves the start, a window moves it to the window's start). Shifts
//! and stretches move pod lifecycles' start and end too (an end of 0, "still running", stays
//! 0). A window keeps the events at or after its start and before its end, and the lifecycles
//! that overlap it; a lifecycle that started before the window starts at the window's start
//! (the replayed pod runs for what was left of it), one that ends after it keeps its end.
//! Objects created before the window are not carried into it, and the lifecycles a window
//! keeps keep their launch indices (the driver matches replayed pods to recorded launches by
//! index, so a window that drops an owner's first launches shifts that matching): export the
//! window from the tracer (`ksim trace export --start`), which flattens the state at its start
//! and renumbers launches, when a windowed replay must start from the recorded state.

use ksim_trace::names::MAX_REPLICAS;
use ksim_trace::{pb, time};

use crate::error::TransformError;
use crate::rules::{Bound, Op, Rule, Rules};
use crate::select::{CelObject, NotCel, Outcome, Subject, cel_object};

/// What a transform did, for the summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub events_in: u64,
    pub events_out: u64,
    pub lifecycles_in: u64,
    pub lifecycles_out: u64,
    /// Objects removed by `drop` (events left empty by it are removed too).
    pub objects_dropped: u64,
    /// Objects a patch, a scale or a rename changed.
    pub objects_changed: u64,
    /// Per rule (rule 1 first): records its `match` failed on (counted as not matching).
    pub selector_errors: Vec<u64>,
}

/// Applies [`Rules`] to the records of one trace, in file order. Holds nothing of the records
/// it has seen, so memory does not depend on the trace's length.
#[derive(Debug)]
pub struct Transformer<'r> {
    rules: &'r Rules,
    /// Per rule: the trace's start as the rules before it left it.
    starts: Vec<Option<i64>>,
    /// Per rule: a keepWindow's window, in milliseconds since the epoch.
    windows: Vec<(Option<i64>, Option<i64>)>,
    header: pb::TraceHeader,
    stats: Stats,
}

impl<'r> Transformer<'r> {
    /// A transformer for the trace whose header is `input`. Fails when a time rule needs the
    /// trace's start and the header has none, or a window ends before it starts.
    pub fn new(rules: &'r Rules, input: &pb::TraceHeader) -> Result<Self, TransformError> {
        let mut start = input.start_time.as_ref().map(time::millis);
        let mut end = input.end_time.as_ref().map(time::millis);
        let mut starts = Vec::with_capacity(rules.rules.len());
        let mut windows = Vec::with_capacity(rules.rules.len());
        for rule in &rules.rules {
            starts.push(start);
            let mut window = (None, None);
            let needs_start = || TransformError::Rule {
                index: rule.index,
                line: rule.line,
                message: "needs the trace's start time, and the trace header has none".to_owned(),
            };
            match &rule.op {
                Op::ShiftTime(ms) => {
                    let shift = |what, t: i64| checked(rule, what, t, t.saturating_add(*ms));
                    start = start.map(|t| shift("the trace's start", t)).transpose()?;
                    end = end.map(|t| shift("the trace's end", t)).transpose()?;
                }
                Op::StretchTime(factor) => {
                    let origin = start.ok_or_else(needs_start)?;
                    end = end
                        .map(|t| checked(rule, "the trace's end", t, stretch(t, origin, *factor)))
                        .transpose()?;
                }
                Op::ExtendEnd(ms) => {
                    let origin = end.ok_or_else(|| TransformError::Rule {
                        index: rule.index,
                        line: rule.line,
                        message: "needs the trace's end time, and the trace header has none"
                            .to_owned(),
                    })?;
                    end = Some(checked(
                        rule,
                        "the trace's end",
                        origin,
                        origin.saturating_add(*ms),
                    )?);
                }
                Op::KeepWindow {
                    start: from,
                    end: to,
                } => {
                    let resolve = |bound: &Option<Bound>| match bound {
                        None => Ok(None),
                        Some(Bound::At(ms)) => Ok(Some(*ms)),
                        Some(Bound::Offset(ms)) => start
                            .map(|s| Some(s.saturating_add(*ms)))
                            .ok_or_else(needs_start),
                    };
                    window = (resolve(from)?, resolve(to)?);
                    if let (Some(from), Some(to)) = window
                        && from >= to
                    {
                        return Err(TransformError::Rule {
                            index: rule.index,
                            line: rule.line,
                            message: format!("the window is empty (start {from} ms, end {to} ms)"),
                        });
                    }
                    // A bound past the times a trace can hold is no bound for the header.
                    start = max_option(start, window.0.filter(|t| time::in_range(*t)));
                    end = min_option(end, window.1.filter(|t| time::in_range(*t)));
                }
                _ => {}
            }
            windows.push(window);
        }
        let mut transforms = input.transforms.clone();
        transforms.extend(rules.descriptions());
        let header = pb::TraceHeader {
            start_time: start.map(time::timestamp),
            end_time: end.map(time::timestamp),
            transforms,
            ..input.clone()
        };
        Ok(Self {
            rules,
            starts,
            windows,
            header,
            stats: Stats {
                selector_errors: vec![0; rules.rules.len()],
                ..Stats::default()
            },
        })
    }

    /// The output's header: the input's, with the window the time rules left and the rules
    /// appended to `transforms`.
    pub fn header(&self) -> &pb::TraceHeader {
        &self.header
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The event as the rules leave it, or `None` when they drop it (outside a window, or
    /// every object dropped).
    pub fn event(
        &mut self,
        event: pb::TraceEvent,
    ) -> Result<Option<pb::TraceEvent>, TransformError> {
        self.stats.events_in += 1;
        let mut time_ms = event.timestamp_ms;
        let mut items: Vec<Item> = event
            .applied
            .into_iter()
            .map(|object| Item::new(object, false))
            .chain(
                event
                    .deleted
                    .into_iter()
                    .map(|object| Item::new(object, true)),
            )
            .collect();
        let had_objects = !items.is_empty();
        for (position, rule) in self.rules.rules.iter().enumerate() {
            match &rule.op {
                Op::ShiftTime(_) | Op::StretchTime(_) => {
                    time_ms = self.moved(position, rule, "an event", time_ms)?;
                }
                Op::KeepWindow { .. } => {
                    if !inside(time_ms, self.windows[position]) {
                        return Ok(None);
                    }
                }
                _ => {
                    for item in items.iter_mut().filter(|item| !item.removed) {
                        self.apply(position, rule, item, time_ms)?;
                    }
                }
            }
        }
        if had_objects && items.iter().all(|item| item.removed) {
            return Ok(None);
        }
        let mut applied = Vec::new();
        let mut deleted = Vec::new();
        for item in items.into_iter().filter(|item| !item.removed) {
            let is_delete = item.deleted;
            let object = item.finish().map_err(|problem| {
                // Serialising a parsed value does not fail in practice; say so if it does.
                TransformError::Rule {
                    index: 0,
                    line: 0,
                    message: problem.to_string(),
                }
            })?;
            if is_delete {
                deleted.push(object);
            } else {
                applied.push(object);
            }
        }
        self.stats.events_out += 1;
        Ok(Some(pb::TraceEvent {
            timestamp_ms: time_ms,
            applied,
            deleted,
        }))
    }

    /// The lifecycle as the rules leave it, or `None` when a window or a drop removes it.
    pub fn lifecycle(
        &mut self,
        mut lifecycle: pb::PodLifecycle,
    ) -> Result<Option<pb::PodLifecycle>, TransformError> {
        self.stats.lifecycles_in += 1;
        for (position, rule) in self.rules.rules.iter().enumerate() {
            match &rule.op {
                Op::ShiftTime(_) | Op::StretchTime(_) => {
                    lifecycle.start_ms = self.moved(
                        position,
                        rule,
                        "a pod lifecycle's start",
                        lifecycle.start_ms,
                    )?;
                    if lifecycle.end_ms != 0 {
                        lifecycle.end_ms =
                            self.moved(position, rule, "a pod lifecycle's end", lifecycle.end_ms)?;
                    }
                    // Created, Bound and Ready move with the start, so its delays stretch
                    // with it.
                    for (what, time) in [
                        ("a pod's creation", &mut lifecycle.created_ms),
                        ("a pod's binding", &mut lifecycle.bound_ms),
                        ("a pod's readiness", &mut lifecycle.ready_ms),
                    ] {
                        if *time != 0 {
                            *time = self.moved(position, rule, what, *time)?;
                        }
                    }
                }
                Op::KeepWindow { .. } => {
                    let (from, to) = self.windows[position];
                    let starts_after = to.is_some_and(|to| lifecycle.start_ms >= to);
                    let ended_before =
                        from.is_some_and(|from| lifecycle.end_ms != 0 && lifecycle.end_ms <= from);
                    if starts_after || ended_before {
                        return Ok(None);
                    }
                    if let Some(from) = from
                        && lifecycle.start_ms < from
                    {
                        // Cut at the window: how this pod came to run is before it, unknown.
                        lifecycle.start_ms = from;
                        lifecycle.created_ms = 0;
                        lifecycle.bound_ms = 0;
                        lifecycle.ready_ms = 0;
                    }
                }
                Op::Drop | Op::RenameNamespace { .. } => {
                    let matched = self.owner_matches(position, rule, &lifecycle)?;
                    match &rule.op {
                        Op::Drop if matched => return Ok(None),
                        Op::RenameNamespace { from, to }
                            if matched && lifecycle.owner_namespace == *from =>
                        {
                            lifecycle.owner_namespace.clone_from(to);
                        }
                        _ => {}
                    }
                }
                // Patches and scaling change objects; a lifecycle has none. Extending the end
                // moves no record.
                Op::MergePatch(_)
                | Op::JsonPatch(_)
                | Op::ScaleReplicas(_)
                | Op::Resources(_)
                | Op::ExtendEnd(_) => {}
            }
        }
        self.stats.lifecycles_out += 1;
        Ok(Some(lifecycle))
    }

    /// A cluster sample (the recorded cluster's state) as the time rules leave it: shifted,
    /// stretched, dropped outside a window; and a namespace renamed by a rule without a selector
    /// counts its pods under the new name. Selectors are about objects; a sample is none.
    pub fn sample(
        &self,
        mut sample: pb::ClusterSample,
    ) -> Result<Option<pb::ClusterSample>, TransformError> {
        for (position, rule) in self.rules.rules.iter().enumerate() {
            sample.timestamp_ms =
                self.moved(position, rule, "a cluster sample", sample.timestamp_ms)?;
            if !self.kept(position, rule, sample.timestamp_ms) {
                return Ok(None);
            }
            if let Op::RenameNamespace { from, to } = &rule.op
                && rule.selector.is_none()
                && let Some(counts) = sample.pods.remove(from)
            {
                let renamed = sample.pods.entry(to.clone()).or_default();
                renamed.pending += counts.pending;
                renamed.running += counts.running;
            }
        }
        Ok(Some(sample))
    }

    /// A usage sample as the time rules leave it: shifted, stretched (its window is a rate's,
    /// and stays), dropped outside a window; a namespace renamed by a rule without a selector
    /// renames its pod's. Selectors are about objects: usage of a pod whose owner a `drop`
    /// removes stays, and no replayed pod uses it.
    pub fn usage(
        &self,
        mut usage: pb::UsageSample,
    ) -> Result<Option<pb::UsageSample>, TransformError> {
        for (position, rule) in self.rules.rules.iter().enumerate() {
            usage.timestamp_ms =
                self.moved(position, rule, "a usage sample", usage.timestamp_ms)?;
            if !self.kept(position, rule, usage.timestamp_ms) {
                return Ok(None);
            }
            if let Op::RenameNamespace { from, to } = &rule.op
                && rule.selector.is_none()
                && usage.namespace == *from
            {
                usage.namespace.clone_from(to);
            }
        }
        Ok(Some(usage))
    }

    /// A recorded node as the time rules leave it (its record's time moved; its creation,
    /// removal and deletion times too).
    pub fn node(
        &self,
        mut node: pb::RecordedNode,
    ) -> Result<Option<pb::RecordedNode>, TransformError> {
        for (position, rule) in self.rules.rules.iter().enumerate() {
            node.timestamp_ms = self.moved(position, rule, "a recorded node", node.timestamp_ms)?;
            if !self.kept(position, rule, node.timestamp_ms) {
                return Ok(None);
            }
            if node.deleted_ms != 0 {
                node.deleted_ms = node.timestamp_ms;
            }
            // Creation and removal move with the record, so a node's delays stay its own. A
            // node created long before the trace may move out of range: its creation is then
            // unknown (0), as it was before it was recorded at all.
            if node.created_ms != 0 {
                node.created_ms = self
                    .moved(position, rule, "a node's creation", node.created_ms)
                    .unwrap_or(0);
            }
            if node.removal_started_ms != 0 {
                node.removal_started_ms =
                    self.moved(position, rule, "a node's removal", node.removal_started_ms)?;
            }
        }
        Ok(Some(node))
    }

    /// `time` (of `what`) after one rule: moved by a shift or a stretch, else unchanged.
    fn moved(
        &self,
        position: usize,
        rule: &Rule,
        what: &str,
        time: i64,
    ) -> Result<i64, TransformError> {
        let moved = match (&rule.op, self.starts[position]) {
            (Op::ShiftTime(ms), _) => time.saturating_add(*ms),
            (Op::StretchTime(factor), Some(origin)) => stretch(time, origin, *factor),
            _ => return Ok(time),
        };
        checked(rule, what, time, moved)
    }

    /// Whether a record at `time` is inside the rule's window (always, for other rules).
    fn kept(&self, position: usize, rule: &Rule, time: i64) -> bool {
        !matches!(rule.op, Op::KeepWindow { .. }) || inside(time, self.windows[position])
    }

    fn owner_matches(
        &mut self,
        position: usize,
        rule: &Rule,
        lifecycle: &pb::PodLifecycle,
    ) -> Result<bool, TransformError> {
        let Some(selector) = &rule.selector else {
            return Ok(true);
        };
        let gvk = lifecycle.owner_gvk.clone().unwrap_or_default();
        let subject = Subject {
            kind: &gvk.kind,
            group: &gvk.group,
            version: &gvk.version,
            namespace: &lifecycle.owner_namespace,
            name: &lifecycle.owner_name,
            op: "lifecycle",
            time_ms: lifecycle.start_ms,
            offset_ms: self.offset(position, lifecycle.start_ms),
        };
        let object = if selector.reads_object() {
            let identity = identity(&gvk, &lifecycle.owner_namespace, &lifecycle.owner_name);
            Some(
                cel_object(&identity).map_err(|problem| TransformError::Rule {
                    index: rule.index,
                    line: rule.line,
                    message: problem.to_string(),
                })?,
            )
        } else {
            None
        };
        match selector.evaluate(&self.rules.env, &subject, object.as_ref()) {
            Outcome::Matched(matched) => Ok(matched),
            Outcome::Failed => {
                self.stats.selector_errors[position] += 1;
                Ok(false)
            }
            Outcome::NotBool(what) => Err(TransformError::Rule {
                index: rule.index,
                line: rule.line,
                message: format!("match must yield a bool, it yielded {what}"),
            }),
        }
    }

    fn offset(&self, position: usize, time_ms: i64) -> i64 {
        self.starts[position].map_or(0, |start| time_ms.saturating_sub(start))
    }

    /// Applies an object rule to one object, if it applies and its `match` holds.
    fn apply(
        &mut self,
        position: usize,
        rule: &Rule,
        item: &mut Item,
        time_ms: i64,
    ) -> Result<(), TransformError> {
        // Patching or scaling what is deleted changes nothing at replay.
        let for_deletes = matches!(rule.op, Op::Drop | Op::RenameNamespace { .. });
        if item.deleted && !for_deletes {
            return Ok(());
        }
        let gvk = item.object.gvk.clone().unwrap_or_default();
        let display_name = item.display_name();
        let fail = |message: String| TransformError::Object {
            index: rule.index,
            line: rule.line,
            kind: gvk.kind.clone(),
            object: display_name.clone(),
            time_ms,
            message,
        };
        if let Op::RenameNamespace { from, .. } = &rule.op {
            let is_namespace = gvk.group.is_empty() && gvk.kind == "Namespace";
            let concerned =
                item.object.namespace == *from || (is_namespace && item.object.name == *from);
            if !concerned {
                return Ok(());
            }
        }
        if let Some(selector) = &rule.selector {
            if selector.reads_object() {
                item.prepare_cel()
                    .map_err(|problem| fail(problem.to_string()))?;
            }
            let object = if selector.reads_object() {
                item.cel.as_ref()
            } else {
                None
            };
            let subject = Subject {
                kind: &gvk.kind,
                group: &gvk.group,
                version: &gvk.version,
                namespace: &item.object.namespace,
                name: &item.object.name,
                op: if item.deleted { "delete" } else { "apply" },
                time_ms,
                offset_ms: self.offset(position, time_ms),
            };
            match selector.evaluate(&self.rules.env, &subject, object) {
                Outcome::Matched(true) => {}
                Outcome::Matched(false) => return Ok(()),
                Outcome::Failed => {
                    self.stats.selector_errors[position] += 1;
                    return Ok(());
                }
                Outcome::NotBool(what) => {
                    return Err(fail(format!("match must yield a bool, it yielded {what}")));
                }
            }
        }
        let changed = match &rule.op {
            Op::Drop => {
                item.removed = true;
                self.stats.objects_dropped += 1;
                return Ok(());
            }
            Op::MergePatch(patch) => {
                json_patch::merge(
                    item.json().map_err(|problem| fail(problem.to_string()))?,
                    patch,
                );
                true
            }
            Op::JsonPatch(patch) => {
                json_patch::patch(
                    item.json().map_err(|problem| fail(problem.to_string()))?,
                    &patch.0,
                )
                .map_err(|error| fail(format!("jsonPatch does not apply: {error}")))?;
                true
            }
            Op::ScaleReplicas(factor) => {
                let json = item.json().map_err(|problem| fail(problem.to_string()))?;
                match json.pointer_mut("/spec/replicas") {
                    Some(replicas) => match replicas.as_i64() {
                        Some(current) => {
                            // Rounded to nearest; f64 holds any replica count exactly.
                            let scaled = (current as f64 * factor).round().max(0.0);
                            if scaled > MAX_REPLICAS as f64 {
                                return Err(fail(format!(
                                    "{} makes spec.replicas {current} into {}, over \
                                     {MAX_REPLICAS} (replicas are an int32)",
                                    rule.op_text,
                                    crate::resources::number(scaled)
                                )));
                            }
                            *replicas = serde_json::Value::from(scaled as i64);
                            true
                        }
                        None => false,
                    },
                    None => false,
                }
            }
            Op::Resources(change) => {
                let json = item.json().map_err(|problem| fail(problem.to_string()))?;
                change
                    .apply(json)
                    .map_err(|problem| fail(format!("{}: {problem}", rule.op_text)))?
            }
            Op::RenameNamespace { from, to } => {
                let json = item.json().map_err(|problem| fail(problem.to_string()))?;
                if let Some(metadata) = json.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                    if metadata.get("namespace").and_then(|n| n.as_str()) == Some(from) {
                        metadata.insert("namespace".to_owned(), to.clone().into());
                    }
                    let is_namespace = gvk.group.is_empty() && gvk.kind == "Namespace";
                    if is_namespace && metadata.get("name").and_then(|n| n.as_str()) == Some(from) {
                        metadata.insert("name".to_owned(), to.clone().into());
                    }
                }
                if item.object.namespace == *from {
                    item.object.namespace.clone_from(to);
                }
                if gvk.group.is_empty() && gvk.kind == "Namespace" && item.object.name == *from {
                    item.object.name.clone_from(to);
                }
                true
            }
            Op::KeepWindow { .. } | Op::ShiftTime(_) | Op::StretchTime(_) | Op::ExtendEnd(_) => {
                false
            }
        };
        if changed {
            item.touched();
            self.stats.objects_changed += 1;
        }
        Ok(())
    }
}

/// One object of an event while the rules run over it.
struct Item {
    object: pb::TraceObject,
    deleted: bool,
    removed: bool,
    /// Parsed on first use.
    json: Option<serde_json::Value>,
    /// The JSON stands in for a delete recorded without the object; never written back.
    synthetic: bool,
    /// A rule changed the JSON: it is written back.
    dirty: bool,
    /// The JSON as CEL sees it, kept while it does not change.
    cel: Option<CelObject>,
}

impl Item {
    fn new(object: pb::TraceObject, deleted: bool) -> Self {
        Self {
            object,
            deleted,
            removed: false,
            json: None,
            synthetic: false,
            dirty: false,
            cel: None,
        }
    }

    fn display_name(&self) -> String {
        if self.object.namespace.is_empty() {
            self.object.name.clone()
        } else {
            format!("{}/{}", self.object.namespace, self.object.name)
        }
    }

    fn json(&mut self) -> Result<&mut serde_json::Value, ObjectProblem> {
        let json = match self.json.take() {
            Some(json) => json,
            None if self.object.object_json.is_empty() => {
                self.synthetic = true;
                identity(
                    &self.object.gvk.clone().unwrap_or_default(),
                    &self.object.namespace,
                    &self.object.name,
                )
            }
            None => serde_json::from_slice(&self.object.object_json)
                .map_err(ObjectProblem::Unparsable)?,
        };
        Ok(self.json.insert(json))
    }

    /// Converts the JSON for CEL, unless it is still converted.
    fn prepare_cel(&mut self) -> Result<(), ObjectProblem> {
        if self.cel.is_none() {
            self.cel = Some(cel_object(self.json()?)?);
        }
        Ok(())
    }

    /// The JSON changed: the CEL view is stale, and the object must be written back. Identity
    /// follows the object's metadata, so a patch that renames keeps the record consistent.
    fn touched(&mut self) {
        self.dirty = true;
        self.cel = None;
        let Some(metadata) = self.json.as_ref().and_then(|json| json.get("metadata")) else {
            return;
        };
        if let Some(name) = metadata.get("name").and_then(|n| n.as_str())
            && !name.is_empty()
        {
            name.clone_into(&mut self.object.name);
        }
        if let Some(namespace) = metadata.get("namespace").and_then(|n| n.as_str()) {
            namespace.clone_into(&mut self.object.namespace);
        }
    }

    fn finish(mut self) -> Result<pb::TraceObject, ObjectProblem> {
        if self.dirty
            && !self.synthetic
            && let Some(json) = &self.json
        {
            self.object.object_json =
                serde_json::to_vec(json).map_err(ObjectProblem::Unserialisable)?;
        }
        Ok(self.object)
    }
}

/// Why a record's object cannot be worked on.
#[derive(Debug, thiserror::Error)]
enum ObjectProblem {
    #[error("the object's JSON does not parse: {0}")]
    Unparsable(serde_json::Error),
    #[error(transparent)]
    Cel(#[from] NotCel),
    #[error("cannot serialise an object: {0}")]
    Unserialisable(serde_json::Error),
}

/// What a selector sees as `object` when there is none: the identity, as Kubernetes writes it.
fn identity(gvk: &pb::GroupVersionKind, namespace: &str, name: &str) -> serde_json::Value {
    let api_version = if gvk.group.is_empty() {
        gvk.version.clone()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    };
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".to_owned(), name.into());
    if !namespace.is_empty() {
        metadata.insert("namespace".to_owned(), namespace.into());
    }
    serde_json::json!({"apiVersion": api_version, "kind": gvk.kind, "metadata": metadata})
}

/// `moved`, the time a rule took `what` from `time` to, unless that is outside the times a trace
/// can hold: a reader could not print it, and a replay would never reach it.
fn checked(rule: &Rule, what: &str, time: i64, moved: i64) -> Result<i64, TransformError> {
    if time::in_range(moved) || moved == time {
        return Ok(moved);
    }
    Err(TransformError::Rule {
        index: rule.index,
        line: rule.line,
        message: format!(
            "{} moves {what} from {time} ms to {moved} ms, outside the times a trace can hold \
             ({} to {} ms: 1970 to the end of 9999)",
            rule.op_text,
            time::MIN_MS,
            time::MAX_MS
        ),
    })
}

/// `time` stretched by `factor` around `origin`, rounded to the millisecond. Monotonic, so
/// events keep their order.
fn stretch(time: i64, origin: i64, factor: f64) -> i64 {
    let scaled = ((time.saturating_sub(origin)) as f64 * factor).round();
    // `as` saturates at i64's range.
    origin.saturating_add(scaled as i64)
}

fn inside(time: i64, (from, to): (Option<i64>, Option<i64>)) -> bool {
    from.is_none_or(|from| time >= from) && to.is_none_or(|to| time < to)
}

fn max_option(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_option(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use crate::transform_trace;

    const T0: i64 = 1_767_225_600_000;

    fn gvk(group: &str, kind: &str) -> pb::GroupVersionKind {
        pb::GroupVersionKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
        }
    }

    fn object(
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        body: serde_json::Value,
    ) -> pb::TraceObject {
        let mut json = json!({"apiVersion": if group.is_empty() { "v1".to_owned() } else { format!("{group}/v1") },
            "kind": kind, "metadata": {"name": name}});
        if !namespace.is_empty() {
            json["metadata"]["namespace"] = namespace.into();
        }
        json_patch::merge(&mut json, &body);
        pb::TraceObject {
            gvk: Some(gvk(group, kind)),
            namespace: namespace.into(),
            name: name.into(),
            object_json: serde_json::to_vec(&json).unwrap(),
        }
    }

    fn deployment(namespace: &str, name: &str, replicas: i64) -> pb::TraceObject {
        object(
            "apps",
            "Deployment",
            namespace,
            name,
            json!({"spec": {"replicas": replicas}}),
        )
    }

    fn event(offset_ms: i64, applied: Vec<pb::TraceObject>) -> pb::TraceEvent {
        pb::TraceEvent {
            timestamp_ms: T0 + offset_ms,
            applied,
            deleted: Vec::new(),
        }
    }

    fn header() -> pb::TraceHeader {
        pb::TraceHeader {
            start_time: Some(time::timestamp(T0)),
            end_time: Some(time::timestamp(T0 + 100_000)),
            created_by: "unit test".into(),
            ..Default::default()
        }
    }

    fn lifecycle(name: &str, start: i64, end: i64) -> pb::PodLifecycle {
        pb::PodLifecycle {
            owner_gvk: Some(gvk("apps", "Deployment")),
            owner_namespace: "shop".into(),
            owner_name: name.into(),
            start_ms: T0 + start,
            end_ms: if end == 0 { 0 } else { T0 + end },
            outcome: pb::PodOutcome::Succeeded as i32,
            ..Default::default()
        }
    }

    fn rules(yaml: &str) -> Rules {
        Rules::parse(yaml).unwrap()
    }

    fn json_of(object: &pb::TraceObject) -> serde_json::Value {
        serde_json::from_slice(&object.object_json).unwrap()
    }

    #[test]
    fn scales_replicas_of_matching_objects_only() {
        let rules = rules(
            "rules:\n  - match: 'kind == \"Deployment\" && object.metadata.namespace == \"shop\"'\n    scaleReplicas: 2\n",
        );
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let out = transformer
            .event(event(
                0,
                vec![
                    deployment("shop", "web", 3),
                    deployment("other", "web", 3),
                    object("", "ConfigMap", "shop", "cfg", json!({"data": {"a": "b"}})),
                ],
            ))
            .unwrap()
            .unwrap();
        assert_eq!(json_of(&out.applied[0])["spec"]["replicas"], 6);
        assert_eq!(json_of(&out.applied[1])["spec"]["replicas"], 3);
        // Untouched objects are kept byte for byte.
        assert_eq!(out.applied[1], deployment("other", "web", 3));
        assert_eq!(transformer.stats().objects_changed, 1);
        // The ConfigMap has no metadata.namespace? It has: matched on kind first, no error.
        assert_eq!(transformer.stats().selector_errors, [0]);
    }

    #[test]
    fn scaling_rounds_to_the_nearest_replica() {
        let rules = rules("rules:\n  - scaleReplicas: 0.5\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let out = transformer
            .event(event(
                0,
                vec![
                    deployment("a", "x", 3),
                    deployment("a", "y", 4),
                    deployment("a", "z", 0),
                ],
            ))
            .unwrap()
            .unwrap();
        let replicas: Vec<_> = out
            .applied
            .iter()
            .map(|o| json_of(o)["spec"]["replicas"].clone())
            .collect();
        assert_eq!(replicas, [json!(2), json!(2), json!(0)]);
    }

    #[test]
    fn scaling_past_an_int32_is_refused_naming_the_rule_and_the_object() {
        let rules = rules("rules:\n  - scaleReplicas: 1000\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        // 2147483 * 1000 fits; 2147484 * 1000 does not.
        assert!(
            transformer
                .event(event(0, vec![deployment("shop", "web", 2_147_483)]))
                .is_ok()
        );
        let error = transformer
            .event(event(0, vec![deployment("shop", "web", 2_147_484)]))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "rule 1 (line 2): Deployment shop/web in the event at {T0} ms: scaleReplicas 1000 \
                 makes spec.replicas 2147484 into 2147484000, over 2147483647 (replicas are an \
                 int32)"
            )
        );
    }

    #[test]
    fn rightsizing_rules_change_the_matched_workloads_containers() {
        let resize = rules(
            "rules:\n  - match: 'kind == \"Deployment\"'\n    scaleResources: { requests: { cpu: 0.5 } }\n  - match: 'name == \"web\"'\n    setResources: { container: main, limits: { memory: 96Mi } }\n",
        );
        let mut transformer = Transformer::new(&resize, &header()).unwrap();
        let template = |cpu: &str| {
            json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
            ]}}}})
        };
        let out = transformer
            .event(event(
                0,
                vec![
                    object("apps", "Deployment", "shop", "web", template("500m")),
                    object("apps", "Deployment", "shop", "api", template("3")),
                    object("apps", "StatefulSet", "shop", "db", template("1")),
                ],
            ))
            .unwrap()
            .unwrap();
        let resources = |index: usize| {
            json_of(&out.applied[index])["spec"]["template"]["spec"]["containers"][0]["resources"]
                .clone()
        };
        assert_eq!(
            resources(0),
            json!({"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "96Mi"}})
        );
        assert_eq!(
            resources(1),
            json!({"requests": {"cpu": "1500m", "memory": "64Mi"}})
        );
        // Not matched: byte for byte.
        assert_eq!(
            out.applied[2],
            object("apps", "StatefulSet", "shop", "db", template("1"))
        );
        assert_eq!(transformer.stats().objects_changed, 3);

        // A limit below the request is refused, naming the rule, the object and the container.
        let too_low = rules("rules:\n  - setResources: { limits: { memory: 32Mi } }\n");
        let mut transformer = Transformer::new(&too_low, &header()).unwrap();
        let error = transformer
            .event(event(
                0,
                vec![object("apps", "Deployment", "shop", "web", template("1"))],
            ))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "rule 1 (line 2): Deployment shop/web in the event at {T0} ms: setResources \
                 limits.memory=32Mi: container main would request memory 64Mi, above its limit \
                 32Mi; change the request too"
            )
        );
    }

    #[test]
    fn drops_objects_lifecycles_and_emptied_events() {
        let rules = rules("rules:\n  - match: 'name == \"web\"'\n    drop: true\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        assert_eq!(
            transformer
                .event(event(0, vec![deployment("shop", "web", 1)]))
                .unwrap(),
            None
        );
        let kept = transformer
            .event(event(
                1,
                vec![deployment("shop", "web", 1), deployment("shop", "api", 1)],
            ))
            .unwrap()
            .unwrap();
        assert_eq!(kept.applied.len(), 1);
        assert_eq!(kept.applied[0].name, "api");
        // An event recorded empty (a start marker) stays.
        assert!(transformer.event(event(2, Vec::new())).unwrap().is_some());
        assert_eq!(
            transformer.lifecycle(lifecycle("web", 0, 10)).unwrap(),
            None
        );
        assert!(
            transformer
                .lifecycle(lifecycle("api", 0, 10))
                .unwrap()
                .is_some()
        );
        let stats = transformer.stats();
        assert_eq!(
            (stats.events_in, stats.events_out, stats.objects_dropped),
            (3, 2, 2)
        );
        assert_eq!((stats.lifecycles_in, stats.lifecycles_out), (2, 1));
    }

    #[test]
    fn deletes_without_json_are_matched_on_identity() {
        let rules = rules(
            "rules:\n  - match: 'op == \"delete\" && object.metadata.namespace == \"shop\"'\n    drop: true\n",
        );
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let mut tombstone = deployment("shop", "web", 1);
        tombstone.object_json.clear();
        let out = transformer
            .event(pb::TraceEvent {
                timestamp_ms: T0,
                applied: vec![deployment("shop", "api", 1)],
                deleted: vec![tombstone],
            })
            .unwrap()
            .unwrap();
        assert_eq!(out.applied.len(), 1);
        assert!(out.deleted.is_empty());
    }

    #[test]
    fn merge_and_json_patches() {
        let rules = rules(
            "rules:\n  - mergePatch: { metadata: { labels: { sim: 'yes' } }, spec: { paused: null } }\n  - match: 'name == \"web\"'\n    jsonPatch: [ { op: replace, path: /spec/replicas, value: 7 } ]\n",
        );
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let web = object(
            "apps",
            "Deployment",
            "shop",
            "web",
            json!({"spec": {"replicas": 1, "paused": true}}),
        );
        let out = transformer.event(event(0, vec![web])).unwrap().unwrap();
        let json = json_of(&out.applied[0]);
        assert_eq!(json["metadata"]["labels"]["sim"], "yes");
        assert_eq!(json["spec"], json!({"replicas": 7}));

        // A JSON Patch that does not apply names the rule, the object and the event.
        let cm = object("", "ConfigMap", "shop", "web", json!({}));
        let error = transformer.event(event(5, vec![cm])).unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("rule 2 (line 3): ConfigMap shop/web in the event at"),
            "{text}"
        );
        assert!(text.contains("jsonPatch does not apply"), "{text}");
    }

    #[test]
    fn a_patch_that_renames_keeps_the_record_consistent() {
        let rules = rules("rules:\n  - mergePatch: { metadata: { name: web-2 } }\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let out = transformer
            .event(event(0, vec![deployment("shop", "web", 1)]))
            .unwrap()
            .unwrap();
        assert_eq!(out.applied[0].name, "web-2");
    }

    #[test]
    fn renames_namespaces_everywhere() {
        let rules = rules("rules:\n  - renameNamespace: { from: shop, to: canary }\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let namespace = object("", "Namespace", "", "shop", json!({}));
        let mut tombstone = deployment("shop", "old", 1);
        tombstone.object_json.clear();
        let out = transformer
            .event(pb::TraceEvent {
                timestamp_ms: T0,
                applied: vec![
                    namespace,
                    deployment("shop", "web", 1),
                    deployment("other", "web", 1),
                ],
                deleted: vec![tombstone],
            })
            .unwrap()
            .unwrap();
        assert_eq!(out.applied[0].name, "canary");
        assert_eq!(json_of(&out.applied[0])["metadata"]["name"], "canary");
        assert_eq!(out.applied[1].namespace, "canary");
        assert_eq!(json_of(&out.applied[1])["metadata"]["namespace"], "canary");
        assert_eq!(out.applied[2], deployment("other", "web", 1));
        assert_eq!(out.deleted[0].namespace, "canary");
        assert!(
            out.deleted[0].object_json.is_empty(),
            "a tombstone stays identity only"
        );
        let lifecycle = transformer
            .lifecycle(lifecycle("web", 0, 10))
            .unwrap()
            .unwrap();
        assert_eq!(lifecycle.owner_namespace, "canary");
    }

    #[test]
    fn cluster_records_follow_the_time_and_rename_rules() {
        let rules = rules(
            "rules:\n  - shiftTime: 5s\n  - keepWindow: { end: 20s }\n  - renameNamespace: { from: shop, to: canary }\n  - match: 'kind == \"Deployment\"'\n    renameNamespace: { from: canary, to: elsewhere }\n",
        );
        let transformer = Transformer::new(&rules, &header()).unwrap();
        let sample = |offset: i64| pb::ClusterSample {
            timestamp_ms: T0 + offset,
            ready_nodes: [("m5".to_owned(), 2)].into(),
            pods: [
                (
                    "shop".to_owned(),
                    pb::RecordedPodCounts {
                        pending: 1,
                        running: 2,
                    },
                ),
                (
                    "canary".to_owned(),
                    pb::RecordedPodCounts {
                        pending: 0,
                        running: 1,
                    },
                ),
            ]
            .into(),
        };
        let moved = transformer.sample(sample(1_000)).unwrap().unwrap();
        assert_eq!(moved.timestamp_ms, T0 + 6_000);
        assert_eq!(moved.ready_nodes["m5"], 2);
        // Renamed into a namespace that had pods: the counts add up. A rule with a selector
        // renames objects only, so "canary" keeps its pods.
        assert_eq!(moved.pods.len(), 1);
        assert_eq!(
            (moved.pods["canary"].pending, moved.pods["canary"].running),
            (1, 3)
        );
        // The window counts from the start the shift left: it ends at 25 s.
        assert!(transformer.sample(sample(19_000)).unwrap().is_some());
        assert_eq!(
            transformer.sample(sample(21_000)).unwrap(),
            None,
            "shifted past the window end"
        );

        let node = pb::RecordedNode {
            timestamp_ms: T0 + 2_000,
            name: "n1".into(),
            created_ms: T0 - 1_000,
            removal_started_ms: T0 + 1_500,
            deleted_ms: T0 + 2_000,
            ..Default::default()
        };
        let moved = transformer.node(node).unwrap().unwrap();
        assert_eq!(
            (
                moved.created_ms,
                moved.removal_started_ms,
                moved.timestamp_ms,
                moved.deleted_ms
            ),
            (T0 + 4_000, T0 + 6_500, T0 + 7_000, T0 + 7_000)
        );
    }

    #[test]
    fn usage_follows_the_time_and_rename_rules() {
        let rules = rules(
            "rules:\n  - shiftTime: 5s\n  - keepWindow: { end: 20s }\n  - renameNamespace: { from: shop, to: canary }\n  - match: 'kind == \"Deployment\"'\n    renameNamespace: { from: canary, to: elsewhere }\n",
        );
        let transformer = Transformer::new(&rules, &header()).unwrap();
        let usage = |offset: i64, namespace: &str| pb::UsageSample {
            timestamp_ms: T0 + offset,
            window_ms: 15_000,
            namespace: namespace.to_owned(),
            pod: "web-1".to_owned(),
            containers: vec![pb::ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 250_000_000,
                memory_bytes: 1 << 26,
            }],
        };
        let moved = transformer.usage(usage(1_000, "shop")).unwrap().unwrap();
        // Moved by the shift, renamed by the rule without a selector only; amounts and the
        // rate's window unchanged.
        assert_eq!(
            moved,
            pb::UsageSample {
                timestamp_ms: T0 + 6_000,
                namespace: "canary".to_owned(),
                ..usage(1_000, "shop")
            }
        );
        assert_eq!(
            transformer
                .usage(usage(1_000, "other"))
                .unwrap()
                .unwrap()
                .namespace,
            "other"
        );
        assert!(transformer.usage(usage(19_000, "shop")).unwrap().is_some());
        assert_eq!(
            transformer.usage(usage(21_000, "shop")).unwrap(),
            None,
            "shifted past the window end"
        );
    }

    #[test]
    fn a_window_keeps_its_events_and_the_lifecycles_that_overlap_it() {
        let rules = rules("rules:\n  - keepWindow: { start: 10s, end: 20s }\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let header = transformer.header().clone();
        assert_eq!(header.start_time, Some(time::timestamp(T0 + 10_000)));
        assert_eq!(header.end_time, Some(time::timestamp(T0 + 20_000)));
        let kept: Vec<i64> = [0, 9_999, 10_000, 15_000, 19_999, 20_000, 30_000]
            .into_iter()
            .filter_map(|offset| {
                transformer
                    .event(event(offset, vec![deployment("a", "b", 1)]))
                    .unwrap()
            })
            .map(|event| event.timestamp_ms - T0)
            .collect();
        assert_eq!(kept, [10_000, 15_000, 19_999]);
        // Ended before, started after: gone. Overlapping: clipped at the start only.
        assert_eq!(
            transformer.lifecycle(lifecycle("a", 0, 10_000)).unwrap(),
            None
        );
        assert_eq!(
            transformer
                .lifecycle(lifecycle("a", 20_000, 25_000))
                .unwrap(),
            None
        );
        let clipped = transformer
            .lifecycle(pb::PodLifecycle {
                created_ms: T0 + 3_000,
                bound_ms: T0 + 4_000,
                ready_ms: T0 + 6_000,
                ..lifecycle("a", 5_000, 25_000)
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (clipped.start_ms - T0, clipped.end_ms - T0),
            (10_000, 25_000)
        );
        assert_eq!(
            (clipped.created_ms, clipped.bound_ms, clipped.ready_ms),
            (0, 0, 0),
            "cut at the window: how it started is unknown"
        );
        let inside = transformer
            .lifecycle(pb::PodLifecycle {
                bound_ms: T0 + 11_000,
                ready_ms: T0 + 13_000,
                ..lifecycle("a", 12_000, 25_000)
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (inside.bound_ms - T0, inside.ready_ms - T0),
            (11_000, 13_000)
        );
        let running = transformer
            .lifecycle(lifecycle("a", 0, 0))
            .unwrap()
            .unwrap();
        assert_eq!((running.start_ms - T0, running.end_ms), (10_000, 0));
    }

    #[test]
    fn shifts_and_stretches_keep_order_and_move_lifecycles() {
        let rules =
            rules("rules:\n  - shiftTime: 1h\n  - stretchTime: 2\n  - keepWindow: { end: 30s }\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let hour = 3_600_000;
        let header = transformer.header().clone();
        assert_eq!(header.start_time, Some(time::timestamp(T0 + hour)));
        assert_eq!(header.end_time, Some(time::timestamp(T0 + hour + 30_000)));
        let times: Vec<i64> = [0, 1, 1, 5_000, 14_999, 15_000]
            .into_iter()
            .filter_map(|offset| {
                transformer
                    .event(event(offset, vec![deployment("a", "b", 1)]))
                    .unwrap()
            })
            .map(|event| event.timestamp_ms - T0 - hour)
            .collect();
        assert_eq!(times, [0, 2, 2, 10_000, 29_998]);
        let moved = transformer
            .lifecycle(pb::PodLifecycle {
                created_ms: T0 + 250,
                bound_ms: T0 + 500,
                ready_ms: T0 + 1_500,
                ..lifecycle("b", 1_000, 2_000)
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (moved.start_ms - T0 - hour, moved.end_ms - T0 - hour),
            (2_000, 4_000)
        );
        assert_eq!(
            (
                moved.created_ms - T0 - hour,
                moved.bound_ms - T0 - hour,
                moved.ready_ms - T0 - hour
            ),
            (500, 1_000, 3_000),
            "created, bound and ready stretch with the start"
        );
        let running = transformer
            .lifecycle(lifecycle("b", 1_000, 0))
            .unwrap()
            .unwrap();
        assert_eq!(running.end_ms, 0);
    }

    #[test]
    fn a_shift_or_stretch_past_the_times_a_trace_can_hold_is_refused_naming_the_rule() {
        // The header's window is checked first, before any record is read.
        for (yaml, message) in [
            (
                "rules:\n  - shiftTime: 100000000000h\n",
                "rule 1 (line 2): shiftTime 100000000000h moves the trace's start from 1767225600000 ms to 360001767225600000 ms, outside the times a trace can hold (0 to 253402300799999 ms: 1970 to the end of 9999)",
            ),
            (
                "rules:\n  - shiftTime: -1000000h\n",
                "rule 1 (line 2): shiftTime -1000000h moves the trace's start",
            ),
            (
                "rules:\n  - shiftTime: 1s\n  - stretchTime: 1e300\n",
                "rule 2 (line 3): stretchTime 1e300 moves the trace's end from 1767225701000 ms to 9223372036854775807 ms",
            ),
        ] {
            let rules = rules(yaml);
            let error = Transformer::new(&rules, &header()).unwrap_err().to_string();
            assert!(error.starts_with(message), "{yaml}: {error}");
        }
        // Without an end in the header, the records are: the one at the start stays put.
        let rules = rules("rules:\n  - stretchTime: 1e300\n");
        let open = pb::TraceHeader {
            end_time: None,
            ..header()
        };
        let mut transformer = Transformer::new(&rules, &open).unwrap();
        assert!(transformer.event(event(0, vec![])).unwrap().is_some());
        let error = transformer.event(event(1, vec![])).unwrap_err().to_string();
        assert!(
            error.contains("stretchTime 1e300 moves an event from"),
            "{error}"
        );
        let error = transformer
            .lifecycle(lifecycle("a", 0, 5))
            .unwrap_err()
            .to_string();
        assert!(error.contains("moves a pod lifecycle's end"), "{error}");
        let sample = pb::ClusterSample {
            timestamp_ms: T0 + 1,
            ..Default::default()
        };
        let error = transformer.sample(sample).unwrap_err().to_string();
        assert!(error.contains("moves a cluster sample"), "{error}");
        let node = pb::RecordedNode {
            timestamp_ms: T0 + 1,
            ..Default::default()
        };
        let error = transformer.node(node).unwrap_err().to_string();
        assert!(error.contains("moves a recorded node"), "{error}");
    }

    #[test]
    fn a_window_bound_past_the_end_of_time_leaves_the_header_in_range() {
        let rules = rules("rules:\n  - keepWindow: { end: 100000000000h }\n");
        let open = pb::TraceHeader {
            end_time: None,
            ..header()
        };
        let transformer = Transformer::new(&rules, &open).unwrap();
        assert_eq!(transformer.header().end_time, None);
    }

    #[test]
    fn extending_the_end_moves_the_header_and_no_record() {
        // Stretched first (100 s become 50 s), then ten minutes more.
        let rules = rules("rules:\n  - stretchTime: 0.5\n  - extendEnd: 10m\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let header = transformer.header().clone();
        assert_eq!(header.start_time, Some(time::timestamp(T0)));
        assert_eq!(
            header.end_time,
            Some(time::timestamp(T0 + 50_000 + 600_000))
        );
        let moved = transformer
            .event(event(8_000, vec![deployment("a", "b", 1)]))
            .unwrap()
            .unwrap();
        assert_eq!(moved.timestamp_ms - T0, 4_000);
        assert_eq!(
            header.transforms.last().map(String::as_str),
            Some("rule 2 (line 3): extendEnd 10m")
        );
        // Without an end there is nothing to extend.
        let open = pb::TraceHeader {
            end_time: None,
            ..self::header()
        };
        let error = Transformer::new(&rules, &open).unwrap_err();
        assert_eq!(
            error.to_string(),
            "rule 2 (line 3): needs the trace's end time, and the trace header has none"
        );
    }

    #[test]
    fn time_rules_need_a_start_when_they_count_from_it() {
        let rules = rules("rules:\n  - shiftTime: 1s\n  - stretchTime: 2\n");
        let error = Transformer::new(&rules, &pb::TraceHeader::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "rule 2 (line 3): needs the trace's start time, and the trace header has none"
        );
        // Absolute windows do not.
        let rules = self::rules("rules:\n  - keepWindow: { start: 2026-01-01T00:00:00Z }\n");
        Transformer::new(&rules, &pb::TraceHeader::default()).unwrap();
    }

    #[test]
    fn a_selector_that_is_not_a_bool_is_an_error_and_failures_are_counted() {
        let rules = rules(
            "rules:\n  - match: 'name'\n    drop: true\n  - match: 'object.spec.paused'\n    drop: true\n",
        );
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        let error = transformer
            .event(event(0, vec![deployment("a", "b", 1)]))
            .unwrap_err();
        assert!(error.to_string().contains("must yield a bool"), "{error}");
        let rules = self::rules("rules:\n  - match: 'object.spec.paused'\n    drop: true\n");
        let mut transformer = Transformer::new(&rules, &header()).unwrap();
        assert!(
            transformer
                .event(event(0, vec![deployment("a", "b", 1)]))
                .unwrap()
                .is_some()
        );
        assert_eq!(transformer.stats().selector_errors, [1]);
    }

    fn write(events: &[pb::TraceEvent], lifecycles: &[pb::PodLifecycle]) -> Vec<u8> {
        let mut writer = ksim_trace::TraceWriter::new(Vec::new(), &header()).unwrap();
        for event in events {
            writer.write_event(event).unwrap();
        }
        for lifecycle in lifecycles {
            writer.write_lifecycle(lifecycle).unwrap();
        }
        writer.finish().unwrap().0
    }

    #[test]
    fn whole_files_are_deterministic_valid_and_record_the_rules() {
        let input = write(
            &[
                event(
                    0,
                    vec![deployment("shop", "web", 2), deployment("shop", "api", 1)],
                ),
                event(5_000, vec![deployment("shop", "web", 4)]),
                event(50_000, vec![deployment("shop", "web", 1)]),
            ],
            &[lifecycle("web", 100, 4_000)],
        );
        let rules = rules(
            "rules:\n  - match: 'kind == \"Deployment\"'\n    scaleReplicas: 2\n  - keepWindow: { end: 40s }\n  - renameNamespace: { from: shop, to: b }\n",
        );
        let (first, summary) =
            transform_trace(&rules, input.as_slice(), Vec::new(), "ksim test").unwrap();
        let (second, _) =
            transform_trace(&rules, input.as_slice(), Vec::new(), "ksim test").unwrap();
        assert_eq!(first, second, "same input and rules, same bytes");
        assert_eq!(
            (summary.trailer.event_count, summary.trailer.lifecycle_count),
            (2, 1)
        );
        let trace = ksim_trace::read_trace(&first).unwrap();
        assert_eq!(trace.header.created_by, "ksim test");
        assert_eq!(trace.header.transforms, rules.descriptions());
        assert_eq!(trace.header.transforms.len(), 3);
        assert_eq!(json_of(&trace.events[1].applied[0])["spec"]["replicas"], 8);
        assert_eq!(trace.events[1].applied[0].namespace, "b");

        // Transforming again appends to what the header records.
        let again = self::rules("rules:\n  - shiftTime: 1s\n");
        let (twice, _) =
            transform_trace(&again, first.as_slice(), Vec::new(), "ksim test").unwrap();
        let header = ksim_trace::read_trace(&twice).unwrap().header;
        assert_eq!(header.transforms.len(), 4);
        assert_eq!(header.transforms[3], "rule 1 (line 2): shiftTime 1s");
    }

    #[test]
    fn garbage_input_is_a_read_error() {
        let rules = rules("rules:\n  - shiftTime: 1s\n");
        let error = transform_trace(&rules, &b"not a trace"[..], Vec::new(), "t").unwrap_err();
        assert!(matches!(error, TransformError::Read(_)), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with("reading the trace: not a ksim trace"),
            "{error}"
        );
    }
}
