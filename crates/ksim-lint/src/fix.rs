//! The second pass: writing a corrected trace, and saying what changed.

use std::fmt;
use std::io::{Read, Write};

use ksim_trace::{Record, TraceReader, TraceWriter, pb};
use serde_json::Value;

use crate::LintError;
use crate::lint::{Gvk, Location, Options, Plan, Summary, parse};
use crate::object::{self, ObjectKey, TemplatePaths};
use crate::rules::{self, Rule};

/// One edit `--fix` made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub rule: &'static Rule,
    /// Where it was in the input.
    pub location: Location,
    pub description: String,
}

impl fmt::Display for Change {
    /// `fixed KS003 server-fields: event 2 at ... ms, v1.Pod shop/a: removed status`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fixed {}: {}: {}",
            self.rule, self.location, self.description
        )
    }
}

/// Writes to `out` the trace `reader` holds (read a second time, from the start) with every
/// finding of the enabled rules corrected, as the rules' explanations say; `summary` is the
/// first pass's over the same input. Deterministic: the same input gives the same output
/// (apart from nothing: the header is kept, with its window widened when events lay outside
/// it). Each change goes to `changes`.
pub fn fix<R: Read, W: Write>(
    mut reader: TraceReader<R>,
    summary: &Summary,
    options: &Options,
    out: W,
    changes: &mut impl FnMut(Change),
) -> Result<(W, pb::TraceTrailer), LintError> {
    let plan = &summary.plan;
    let mut header = reader.header().clone();
    let reorder = options.enabled(&rules::OUT_OF_ORDER);
    if reorder {
        widen_window(&mut header, plan, changes);
    }
    let mut writer = TraceWriter::new(out, &header)?;
    if !reorder {
        writer = writer.unordered();
    }
    let fixer = Fixer {
        plan,
        options,
        templates: TemplatePaths::from_header(&header),
    };
    // Sorting needs the events at hand; without events out of order, everything streams.
    let buffer = reorder && plan.unordered;
    let mut events: Vec<(u64, pb::TraceEvent)> = Vec::new();
    let mut lifecycles = Vec::new();
    // Cluster samples, recorded nodes and usage (but what KS007 removes) pass through.
    let mut others = Vec::new();
    let (mut event_index, mut lifecycle_index, mut usage_index) = (0u64, 0u64, 0u64);
    while let Some(record) = reader.next_record()? {
        match record {
            Record::Event(event) => {
                let index = event_index;
                event_index += 1;
                if let Some(event) = fixer.event(index, event, changes)? {
                    if buffer {
                        events.push((index, event));
                    } else {
                        writer.write_event(&event)?;
                    }
                }
            }
            Record::Lifecycle(lifecycle) => {
                let index = lifecycle_index;
                lifecycle_index += 1;
                if let Some(lifecycle) = fixer.lifecycle(index, lifecycle, changes) {
                    if buffer {
                        lifecycles.push(lifecycle);
                    } else {
                        writer.write_lifecycle(&lifecycle)?;
                    }
                }
            }
            Record::Usage(usage) => {
                let index = usage_index;
                usage_index += 1;
                if options.enabled(&rules::BAD_USAGE) && plan.bad_usage.contains(&index) {
                    changes(Change {
                        rule: &rules::BAD_USAGE,
                        location: Location {
                            usage: Some(index),
                            timestamp_ms: Some(usage.timestamp_ms),
                            object: Some(format!("pod {}/{}", usage.namespace, usage.pod)),
                            ..Location::default()
                        },
                        description: "removed".to_owned(),
                    });
                } else if buffer {
                    others.push(Record::Usage(usage));
                } else {
                    writer.write_usage(&usage)?;
                }
            }
            other @ (Record::Sample(_) | Record::Node(_)) => {
                if buffer {
                    others.push(other);
                } else {
                    writer.write(&other)?;
                }
            }
        }
    }
    if buffer {
        // Stable: events of equal time keep their order.
        let mut previous: Option<i64> = None;
        let mut moved = Vec::new();
        for (index, event) in &events {
            if previous.is_some_and(|p| event.timestamp_ms < p) {
                moved.push(Change {
                    rule: &rules::OUT_OF_ORDER,
                    location: Location {
                        event: Some(*index),
                        timestamp_ms: Some(event.timestamp_ms),
                        ..Location::default()
                    },
                    description: "moved into timestamp order".to_owned(),
                });
            }
            previous = Some(previous.map_or(event.timestamp_ms, |p| p.max(event.timestamp_ms)));
        }
        moved.into_iter().for_each(&mut *changes);
        events.sort_by_key(|(_, event)| event.timestamp_ms);
        for (_, event) in &events {
            writer.write_event(event)?;
        }
        for lifecycle in &lifecycles {
            writer.write_lifecycle(lifecycle)?;
        }
        for other in &others {
            writer.write(other)?;
        }
    }
    Ok(writer.finish()?)
}

fn widen_window(header: &mut pb::TraceHeader, plan: &Plan, changes: &mut impl FnMut(Change)) {
    let (Some(first), Some(last)) = (plan.first_ms, plan.last_ms) else {
        return;
    };
    let mut change = |description: String| {
        changes(Change {
            rule: &rules::OUT_OF_ORDER,
            location: Location::default(),
            description,
        })
    };
    if let Some(start) = &header.start_time {
        let start = ksim_trace::time::millis(start);
        if first < start {
            header.start_time = Some(ksim_trace::time::timestamp(first));
            change(format!(
                "moved the header's start time from {start} ms to {first} ms, the first event"
            ));
        }
    }
    if let Some(end) = &header.end_time {
        let end = ksim_trace::time::millis(end);
        let wanted = last.saturating_add(1);
        if wanted > end {
            header.end_time = Some(ksim_trace::time::timestamp(wanted));
            change(format!(
                "moved the header's end time from {end} ms to {wanted} ms, past the last event"
            ));
        }
    }
}

struct Fixer<'a> {
    plan: &'a Plan,
    options: &'a Options,
    templates: TemplatePaths,
}

impl Fixer<'_> {
    fn kind_missing(&self, gvk: Option<&pb::GroupVersionKind>) -> bool {
        let gvk: Gvk = gvk
            .map(|g| (g.group.clone(), g.version.clone(), g.kind.clone()))
            .unwrap_or_default();
        self.options.enabled(&rules::UNKNOWN_KIND) && self.plan.missing_kinds.contains(&gvk)
    }

    /// The fixed event; `None` when every object of it was removed.
    fn event(
        &self,
        index: u64,
        mut event: pb::TraceEvent,
        changes: &mut impl FnMut(Change),
    ) -> Result<Option<pb::TraceEvent>, LintError> {
        let at = Location {
            event: Some(index),
            timestamp_ms: Some(event.timestamp_ms),
            ..Location::default()
        };
        let had_objects = !(event.applied.is_empty() && event.deleted.is_empty());
        for list in [&mut event.applied, &mut event.deleted] {
            list.retain(|object| {
                if self.kind_missing(object.gvk.as_ref()) {
                    changes(Change {
                        rule: &rules::UNKNOWN_KIND,
                        location: Location {
                            object: Some(object::describe(object)),
                            ..at.clone()
                        },
                        description: "removed the object: the cluster does not serve its kind"
                            .to_owned(),
                    });
                    false
                } else {
                    true
                }
            });
        }
        for object in &mut event.applied {
            self.object(object, &at, changes)?;
        }
        if had_objects && event.applied.is_empty() && event.deleted.is_empty() {
            changes(Change {
                rule: &rules::UNKNOWN_KIND,
                location: at,
                description: "removed the event, left without objects".to_owned(),
            });
            return Ok(None);
        }
        Ok(Some(event))
    }

    fn object(
        &self,
        object: &mut pb::TraceObject,
        at: &Location,
        changes: &mut impl FnMut(Change),
    ) -> Result<(), LintError> {
        if object.object_json.is_empty() {
            return Ok(());
        }
        let location = Location {
            object: Some(object::describe(object)),
            ..at.clone()
        };
        let mut whole = Value::Object(parse(&object.object_json, &location)?);
        let mut changed = false;
        let mut change = |rule: &'static Rule, description: String| {
            changed = true;
            changes(Change {
                rule,
                location: location.clone(),
                description,
            });
        };
        let fields = self.options.enabled(&rules::SERVER_FIELDS);
        if fields && let Some(value) = whole.as_object_mut() {
            let removed = object::remove_server_fields(value);
            if !removed.is_empty() {
                change(
                    &rules::SERVER_FIELDS,
                    format!("removed {}", removed.join(", ")),
                );
            }
        }
        let values = self.options.enabled(&rules::INVALID_VALUE);
        if values
            && let Some(value) = whole.as_object_mut()
            && let Some((was, now)) = object::clamp_replicas(value)
        {
            change(
                &rules::INVALID_VALUE,
                format!("set spec.replicas from {was} to {now}"),
            );
        }
        let owners = self.options.enabled(&rules::ABSENT_OWNER);
        if owners && let Some(value) = whole.as_object_mut() {
            let removed = object::remove_owner_references(value, &object.namespace, |owner| {
                !self.plan.has_owner(owner)
            });
            for owner in removed {
                change(
                    &rules::ABSENT_OWNER,
                    format!("removed the owner reference to {owner}"),
                );
            }
        }
        if self.options.enabled(&rules::MISSING_REFERENCE) {
            let key = ObjectKey::of(object);
            for template in self.templates.of(&key.group, &key.kind) {
                let Some(spec) = whole.pointer_mut(&object::pod_spec_path(&template)) else {
                    continue;
                };
                let removed = object::remove_references(spec, |kind, name| {
                    !self
                        .plan
                        .present
                        .contains(&ObjectKey::core(kind, &object.namespace, name))
                });
                for description in removed {
                    change(&rules::MISSING_REFERENCE, description);
                }
            }
        }
        if changed {
            object.object_json =
                serde_json::to_vec(&whole).map_err(|error| LintError::BadObject {
                    location: location.to_string(),
                    reason: error.to_string(),
                })?;
        }
        Ok(())
    }

    fn lifecycle(
        &self,
        index: u64,
        lifecycle: pb::PodLifecycle,
        changes: &mut impl FnMut(Change),
    ) -> Option<pb::PodLifecycle> {
        if self.kind_missing(lifecycle.owner_gvk.as_ref()) {
            let owner = format!(
                "{} {}/{}",
                lifecycle
                    .owner_gvk
                    .as_ref()
                    .map(ksim_trace::gvk::display)
                    .unwrap_or_default(),
                lifecycle.owner_namespace,
                lifecycle.owner_name
            );
            changes(Change {
                rule: &rules::UNKNOWN_KIND,
                location: Location {
                    lifecycle: Some(index),
                    object: Some(owner),
                    ..Location::default()
                },
                description: "removed the lifecycle: the cluster does not serve its owner's kind"
                    .to_owned(),
            });
            return None;
        }
        Some(lifecycle)
    }
}
