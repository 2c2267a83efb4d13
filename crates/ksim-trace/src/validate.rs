//! The rules records must keep, shared by the writer (which refuses to break them) and the
//! reader (which reports a file that does), and the running totals the trailer carries.

use crate::{pb, time};

/// A record that breaks a rule of the format, naming it by its position in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecordProblem {
    #[error(
        "event {index} at {at_ms} ms is older than the event before it at {previous_ms} ms; \
         events must be in timestamp order"
    )]
    EventOutOfOrder {
        index: u64,
        at_ms: i64,
        previous_ms: i64,
    },
    #[error("{list} object {position} of event {index} {problem}")]
    Object {
        list: &'static str,
        position: usize,
        index: u64,
        problem: &'static str,
    },
    #[error("lifecycle {index} {problem}")]
    Lifecycle { index: u64, problem: &'static str },
    #[error(
        "cluster sample {index} at {at_ms} ms is older than the sample before it at {previous_ms} ms; \
         samples must be in timestamp order"
    )]
    SampleOutOfOrder {
        index: u64,
        at_ms: i64,
        previous_ms: i64,
    },
    #[error("recorded node {index} has no name")]
    NodeWithoutName { index: u64 },
    #[error("usage sample {index} {problem}")]
    Usage { index: u64, problem: &'static str },
    #[error(
        "{record} has {field} {ms} ms, outside the times a trace can hold \
         (1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z)"
    )]
    TimeOutOfRange {
        /// "event 3", "the header", ...
        record: String,
        field: &'static str,
        ms: i64,
    },
    #[error("the trailer counts {claimed} {what} but the file holds {counted}")]
    TrailerCount {
        what: &'static str,
        claimed: u64,
        counted: u64,
    },
}

/// What has been written or read so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    events: u64,
    lifecycles: u64,
    objects: u64,
    samples: u64,
    nodes: u64,
    usage: u64,
    last_event_ms: Option<i64>,
    /// Whether an event older than the one before it is accepted (for tools that repair
    /// traces); the default refuses it.
    pub(crate) unordered: bool,
    last_sample_ms: Option<i64>,
}

impl Totals {
    /// Why `event` may not come next, if it may not.
    pub(crate) fn check_event(&self, event: &pb::TraceEvent) -> Result<(), RecordProblem> {
        let index = self.events;
        check_times(
            || format!("event {index}"),
            &[("timestamp_ms", event.timestamp_ms)],
        )?;
        if let Some(previous) = self.last_event_ms
            && !self.unordered
            && event.timestamp_ms < previous
        {
            return Err(RecordProblem::EventOutOfOrder {
                index,
                at_ms: event.timestamp_ms,
                previous_ms: previous,
            });
        }
        let objects = [("applied", &event.applied), ("deleted", &event.deleted)];
        for (list, objects) in objects {
            for (position, object) in objects.iter().enumerate() {
                check_object(object).map_err(|problem| RecordProblem::Object {
                    list,
                    position,
                    index,
                    problem,
                })?;
            }
        }
        Ok(())
    }

    /// Counts an event that passed [`Totals::check_event`].
    pub(crate) fn count_event(&mut self, event: &pb::TraceEvent) {
        self.events = self.events.saturating_add(1);
        let objects = event.applied.len().saturating_add(event.deleted.len());
        self.objects = self.objects.saturating_add(objects as u64);
        self.last_event_ms = Some(event.timestamp_ms);
    }

    /// Why `lifecycle` is not a usable record, if it is not.
    pub(crate) fn check_lifecycle(
        &self,
        lifecycle: &pb::PodLifecycle,
    ) -> Result<(), RecordProblem> {
        let index = self.lifecycles;
        check_times(
            || format!("lifecycle {index}"),
            &[
                ("start_ms", lifecycle.start_ms),
                ("end_ms", lifecycle.end_ms),
                ("bound_ms", lifecycle.bound_ms),
                ("ready_ms", lifecycle.ready_ms),
                ("created_ms", lifecycle.created_ms),
            ],
        )?;
        let problem = if !has_kind(lifecycle.owner_gvk.as_ref()) {
            Some("has no owner kind")
        } else if lifecycle.owner_name.is_empty() {
            Some("has no owner name")
        } else if pb::PodOutcome::try_from(lifecycle.outcome).is_err() {
            Some("has an unknown outcome")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(RecordProblem::Lifecycle { index, problem }),
            None => Ok(()),
        }
    }

    pub(crate) fn count_lifecycle(&mut self) {
        self.lifecycles = self.lifecycles.saturating_add(1);
    }

    /// Why `sample` may not come next: samples, like events, are in timestamp order.
    pub(crate) fn check_sample(&self, sample: &pb::ClusterSample) -> Result<(), RecordProblem> {
        check_times(
            || format!("cluster sample {}", self.samples),
            &[("timestamp_ms", sample.timestamp_ms)],
        )?;
        match self.last_sample_ms {
            Some(previous) if sample.timestamp_ms < previous => {
                Err(RecordProblem::SampleOutOfOrder {
                    index: self.samples,
                    at_ms: sample.timestamp_ms,
                    previous_ms: previous,
                })
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn count_sample(&mut self, sample: &pb::ClusterSample) {
        self.samples = self.samples.saturating_add(1);
        self.last_sample_ms = Some(sample.timestamp_ms);
    }

    /// Why `node` is not a usable record: it must name its node, at times a trace can hold.
    pub(crate) fn check_node(&self, node: &pb::RecordedNode) -> Result<(), RecordProblem> {
        check_times(
            || format!("recorded node {}", self.nodes),
            &[
                ("timestamp_ms", node.timestamp_ms),
                ("created_ms", node.created_ms),
                ("deleted_ms", node.deleted_ms),
                ("removal_started_ms", node.removal_started_ms),
            ],
        )?;
        if node.name.is_empty() {
            return Err(RecordProblem::NodeWithoutName { index: self.nodes });
        }
        Ok(())
    }

    pub(crate) fn count_node(&mut self) {
        self.nodes = self.nodes.saturating_add(1);
    }

    /// Why `usage` is not a usable record: it must name its pod, and give each container a
    /// name and no negative amount. Its time need not follow the previous sample's (pods are
    /// measured at different times and read together), which also keeps a reader's memory
    /// flat.
    pub(crate) fn check_usage(&self, usage: &pb::UsageSample) -> Result<(), RecordProblem> {
        let index = self.usage;
        check_times(
            || format!("usage sample {index}"),
            &[("timestamp_ms", usage.timestamp_ms)],
        )?;
        let problem = if usage.pod.is_empty() {
            Some("has no pod name")
        } else if usage.window_ms < 0 {
            Some("has a negative window")
        } else if usage.containers.iter().any(|c| c.name.is_empty()) {
            Some("has a container without a name")
        } else if usage
            .containers
            .iter()
            .any(|c| c.cpu_nanocores < 0 || c.memory_bytes < 0)
        {
            Some("has a negative amount")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(RecordProblem::Usage { index, problem }),
            None => Ok(()),
        }
    }

    pub(crate) fn count_usage(&mut self) {
        self.usage = self.usage.saturating_add(1);
    }

    /// The trailer that closes what was counted.
    pub(crate) fn trailer(&self) -> pb::TraceTrailer {
        pb::TraceTrailer {
            event_count: self.events,
            lifecycle_count: self.lifecycles,
            object_count: self.objects,
            sample_count: self.samples,
            node_count: self.nodes,
            usage_count: self.usage,
        }
    }

    /// Why `trailer` does not match what was counted, if it does not.
    pub(crate) fn check_trailer(&self, trailer: &pb::TraceTrailer) -> Result<(), RecordProblem> {
        let expected = self.trailer();
        let totals = [
            ("events", trailer.event_count, expected.event_count),
            (
                "lifecycles",
                trailer.lifecycle_count,
                expected.lifecycle_count,
            ),
            ("objects", trailer.object_count, expected.object_count),
            (
                "cluster samples",
                trailer.sample_count,
                expected.sample_count,
            ),
            ("recorded nodes", trailer.node_count, expected.node_count),
            ("usage samples", trailer.usage_count, expected.usage_count),
        ];
        for (what, claimed, counted) in totals {
            if claimed != counted {
                return Err(RecordProblem::TrailerCount {
                    what,
                    claimed,
                    counted,
                });
            }
        }
        Ok(())
    }
}

/// Why `header`'s times are not ones a trace can hold, if they are not.
pub(crate) fn check_header(header: &pb::TraceHeader) -> Result<(), RecordProblem> {
    let times = [
        ("start_time", &header.start_time),
        ("end_time", &header.end_time),
        ("create_time", &header.create_time),
    ];
    for (field, timestamp) in times {
        if let Some(timestamp) = timestamp {
            check_times(
                || "the header".to_owned(),
                &[(field, time::millis(timestamp))],
            )?;
        }
    }
    Ok(())
}

/// Every time of a record lies in 1970..=9999: readers subtract and add them (offsets, spans,
/// delays) and must not overflow, nor replay for millennia. 0, the "not known" of optional
/// times, is the epoch and passes.
fn check_times(
    record: impl FnOnce() -> String,
    times: &[(&'static str, i64)],
) -> Result<(), RecordProblem> {
    match times.iter().find(|(_, ms)| !time::in_range(*ms)) {
        Some(&(field, ms)) => Err(RecordProblem::TimeOutOfRange {
            record: record(),
            field,
            ms,
        }),
        None => Ok(()),
    }
}

/// A replay needs every object's kind and name; the namespace is empty for cluster-scoped kinds.
fn check_object(object: &pb::TraceObject) -> Result<(), &'static str> {
    if !has_kind(object.gvk.as_ref()) {
        Err("has no kind (version and kind must be set)")
    } else if object.name.is_empty() {
        Err("has no name")
    } else {
        Ok(())
    }
}

fn has_kind(gvk: Option<&pb::GroupVersionKind>) -> bool {
    gvk.is_some_and(|gvk| !gvk.version.is_empty() && !gvk.kind.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::Totals;
    use crate::pb;
    use crate::test_support::{sample_event, sample_lifecycle};

    #[test]
    fn counts_events_objects_and_lifecycles() {
        let mut totals = Totals::default();
        let mut event = sample_event(10, "a");
        event.deleted.push(event.applied[0].clone());
        totals.check_event(&event).unwrap();
        totals.count_event(&event);
        totals.count_lifecycle();
        let trailer = totals.trailer();
        assert_eq!(
            trailer,
            pb::TraceTrailer {
                event_count: 1,
                lifecycle_count: 1,
                object_count: 2,
                ..Default::default()
            }
        );
        totals.check_trailer(&trailer).unwrap();
        let wrong = pb::TraceTrailer {
            object_count: 5,
            ..trailer
        };
        let reason = totals.check_trailer(&wrong).unwrap_err().to_string();
        assert_eq!(reason, "the trailer counts 5 objects but the file holds 2");
    }

    #[test]
    fn equal_timestamps_pass_older_ones_do_not() {
        let mut totals = Totals::default();
        totals.count_event(&sample_event(10, "a"));
        totals.check_event(&sample_event(10, "b")).unwrap();
        let reason = totals
            .check_event(&sample_event(9, "c"))
            .unwrap_err()
            .to_string();
        assert!(reason.contains("event 1 at 9 ms"), "{reason}");
        assert!(reason.contains("at 10 ms"), "{reason}");
    }

    #[test]
    fn objects_and_lifecycles_need_kind_and_name() {
        let totals = Totals::default();
        let mut nameless = sample_event(1, "a");
        nameless.applied[0].name.clear();
        let reason = totals.check_event(&nameless).unwrap_err().to_string();
        assert_eq!(reason, "applied object 0 of event 0 has no name");

        let mut kindless = sample_event(1, "a");
        kindless.applied[0].gvk = None;
        assert!(
            totals
                .check_event(&kindless)
                .unwrap_err()
                .to_string()
                .contains("no kind")
        );

        let mut orphan = sample_lifecycle("web", 0);
        orphan.owner_gvk = None;
        assert_eq!(
            totals.check_lifecycle(&orphan).unwrap_err().to_string(),
            "lifecycle 0 has no owner kind"
        );
        let mut odd = sample_lifecycle("web", 0);
        odd.outcome = 42;
        assert!(
            totals
                .check_lifecycle(&odd)
                .unwrap_err()
                .to_string()
                .contains("outcome")
        );
    }
}
