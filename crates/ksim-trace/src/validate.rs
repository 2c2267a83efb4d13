//! The rules records must keep, shared by the writer (which refuses to break them) and the
//! reader (which reports a file that does), and the running totals the trailer carries.

use crate::pb;

/// What has been written or read so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    events: u64,
    lifecycles: u64,
    objects: u64,
    samples: u64,
    nodes: u64,
    last_event_ms: Option<i64>,
    /// Whether an event older than the one before it is accepted (for tools that repair
    /// traces); the default refuses it.
    pub(crate) unordered: bool,
    last_sample_ms: Option<i64>,
}

impl Totals {
    /// Why `event` may not come next, if it may not.
    pub(crate) fn check_event(&self, event: &pb::TraceEvent) -> Result<(), String> {
        let index = self.events;
        if let Some(previous) = self.last_event_ms
            && !self.unordered
            && event.timestamp_ms < previous
        {
            return Err(format!(
                "event {index} at {} ms is older than the event before it at {previous} ms; \
                 events must be in timestamp order",
                event.timestamp_ms
            ));
        }
        let objects = [("applied", &event.applied), ("deleted", &event.deleted)];
        for (list, objects) in objects {
            for (position, object) in objects.iter().enumerate() {
                check_object(object).map_err(|problem| {
                    format!("{list} object {position} of event {index} {problem}")
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
    pub(crate) fn check_lifecycle(&self, lifecycle: &pb::PodLifecycle) -> Result<(), String> {
        let index = self.lifecycles;
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
            Some(problem) => Err(format!("lifecycle {index} {problem}")),
            None => Ok(()),
        }
    }

    pub(crate) fn count_lifecycle(&mut self) {
        self.lifecycles = self.lifecycles.saturating_add(1);
    }

    /// Why `sample` may not come next: samples, like events, are in timestamp order.
    pub(crate) fn check_sample(&self, sample: &pb::ClusterSample) -> Result<(), String> {
        match self.last_sample_ms {
            Some(previous) if sample.timestamp_ms < previous => Err(format!(
                "cluster sample {} at {} ms is older than the sample before it at {previous} ms; \
                 samples must be in timestamp order",
                self.samples, sample.timestamp_ms
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn count_sample(&mut self, sample: &pb::ClusterSample) {
        self.samples = self.samples.saturating_add(1);
        self.last_sample_ms = Some(sample.timestamp_ms);
    }

    /// Why `node` is not a usable record: it must name its node.
    pub(crate) fn check_node(&self, node: &pb::RecordedNode) -> Result<(), String> {
        if node.name.is_empty() {
            return Err(format!("recorded node {} has no name", self.nodes));
        }
        Ok(())
    }

    pub(crate) fn count_node(&mut self) {
        self.nodes = self.nodes.saturating_add(1);
    }

    /// The trailer that closes what was counted.
    pub(crate) fn trailer(&self) -> pb::TraceTrailer {
        pb::TraceTrailer {
            event_count: self.events,
            lifecycle_count: self.lifecycles,
            object_count: self.objects,
            sample_count: self.samples,
            node_count: self.nodes,
        }
    }

    /// Why `trailer` does not match what was counted, if it does not.
    pub(crate) fn check_trailer(&self, trailer: &pb::TraceTrailer) -> Result<(), String> {
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
        ];
        for (what, claimed, counted) in totals {
            if claimed != counted {
                return Err(format!(
                    "the trailer counts {claimed} {what} but the file holds {counted}"
                ));
            }
        }
        Ok(())
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
        let reason = totals.check_trailer(&wrong).unwrap_err();
        assert_eq!(reason, "the trailer counts 5 objects but the file holds 2");
    }

    #[test]
    fn equal_timestamps_pass_older_ones_do_not() {
        let mut totals = Totals::default();
        totals.count_event(&sample_event(10, "a"));
        totals.check_event(&sample_event(10, "b")).unwrap();
        let reason = totals.check_event(&sample_event(9, "c")).unwrap_err();
        assert!(reason.contains("event 1 at 9 ms"), "{reason}");
        assert!(reason.contains("at 10 ms"), "{reason}");
    }

    #[test]
    fn objects_and_lifecycles_need_kind_and_name() {
        let totals = Totals::default();
        let mut nameless = sample_event(1, "a");
        nameless.applied[0].name.clear();
        let reason = totals.check_event(&nameless).unwrap_err();
        assert_eq!(reason, "applied object 0 of event 0 has no name");

        let mut kindless = sample_event(1, "a");
        kindless.applied[0].gvk = None;
        assert!(
            totals
                .check_event(&kindless)
                .unwrap_err()
                .contains("no kind")
        );

        let mut orphan = sample_lifecycle("web", 0);
        orphan.owner_gvk = None;
        assert_eq!(
            totals.check_lifecycle(&orphan).unwrap_err(),
            "lifecycle 0 has no owner kind"
        );
        let mut odd = sample_lifecycle("web", 0);
        odd.outcome = 42;
        assert!(
            totals
                .check_lifecycle(&odd)
                .unwrap_err()
                .contains("outcome")
        );
    }
}
