//! A summary of a trace file, read and validated in one streaming pass.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use crate::{Record, TraceError, TraceReader, gvk, pb};

/// Counts for one kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindCounts {
    /// Distinct objects (namespace/name) of this kind.
    pub objects: u64,
    pub applies: u64,
    pub deletes: u64,
    /// Lifecycles whose owner is of this kind.
    pub lifecycles: u64,
}

/// What a trace file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    pub header: pb::TraceHeader,
    pub events: u64,
    /// Distinct objects (kind, namespace, name).
    pub objects: u64,
    pub applies: u64,
    pub deletes: u64,
    pub lifecycles: u64,
    /// Cluster samples and recorded node records (0 when the cluster was not recorded).
    pub samples: u64,
    pub nodes: u64,
    /// Usage samples, and the distinct pods (namespace, name) they cover.
    pub usage_samples: u64,
    pub usage_pods: u64,
    /// Most Ready nodes at once, over all groups, and most pods Pending and Running at once,
    /// over all namespaces, in the samples.
    pub peak_ready_nodes: u64,
    pub peak_pending_pods: u64,
    pub peak_running_pods: u64,
    pub first_event_ms: Option<i64>,
    pub last_event_ms: Option<i64>,
    /// Per kind, keyed by [`gvk::display`].
    pub kinds: BTreeMap<String, KindCounts>,
    /// Size of the file.
    pub compressed_bytes: u64,
    /// Size of the decompressed record stream.
    pub uncompressed_bytes: u64,
}

/// Reads and validates the whole file from `input`. Records are not kept: memory grows only
/// with the number of distinct objects.
pub fn inspect<R: Read>(input: R) -> Result<Inspection, TraceError> {
    let mut reader = TraceReader::new(input)?;
    let mut inspection = Inspection {
        header: reader.header().clone(),
        events: 0,
        objects: 0,
        applies: 0,
        deletes: 0,
        lifecycles: 0,
        samples: 0,
        nodes: 0,
        usage_samples: 0,
        usage_pods: 0,
        peak_ready_nodes: 0,
        peak_pending_pods: 0,
        peak_running_pods: 0,
        first_event_ms: None,
        last_event_ms: None,
        kinds: BTreeMap::new(),
        compressed_bytes: 0,
        uncompressed_bytes: 0,
    };
    let mut seen = HashSet::new();
    let mut pods_used = HashSet::new();
    while let Some(record) = reader.next_record()? {
        match record {
            Record::Event(event) => inspection.add_event(event, &mut seen),
            Record::Lifecycle(lifecycle) => {
                inspection.lifecycles += 1;
                inspection.kind(lifecycle.owner_gvk.as_ref()).lifecycles += 1;
            }
            Record::Sample(sample) => inspection.add_sample(&sample),
            Record::Node(_) => inspection.nodes += 1,
            Record::Usage(usage) => {
                inspection.usage_samples += 1;
                if pods_used.insert((usage.namespace, usage.pod)) {
                    inspection.usage_pods += 1;
                }
            }
        }
    }
    inspection.compressed_bytes = reader.compressed_bytes();
    inspection.uncompressed_bytes = reader.uncompressed_bytes();
    Ok(inspection)
}

impl Inspection {
    fn add_event(&mut self, event: pb::TraceEvent, seen: &mut HashSet<(String, String, String)>) {
        self.events += 1;
        self.first_event_ms.get_or_insert(event.timestamp_ms);
        self.last_event_ms = Some(event.timestamp_ms);
        let applied = event.applied.into_iter().map(|object| (object, true));
        let deleted = event.deleted.into_iter().map(|object| (object, false));
        for (object, is_apply) in applied.chain(deleted) {
            let kind = kind_name(object.gvk.as_ref());
            let counts = self.kinds.entry(kind.clone()).or_default();
            if is_apply {
                counts.applies += 1;
                self.applies += 1;
            } else {
                counts.deletes += 1;
                self.deletes += 1;
            }
            if seen.insert((kind, object.namespace, object.name)) {
                counts.objects += 1;
                self.objects += 1;
            }
        }
    }

    fn add_sample(&mut self, sample: &pb::ClusterSample) {
        self.samples += 1;
        let ready: u64 = sample.ready_nodes.values().map(|&n| u64::from(n)).sum();
        let pending: u64 = sample.pods.values().map(|p| u64::from(p.pending)).sum();
        let running: u64 = sample.pods.values().map(|p| u64::from(p.running)).sum();
        self.peak_ready_nodes = self.peak_ready_nodes.max(ready);
        self.peak_pending_pods = self.peak_pending_pods.max(pending);
        self.peak_running_pods = self.peak_running_pods.max(running);
    }

    fn kind(&mut self, gvk: Option<&pb::GroupVersionKind>) -> &mut KindCounts {
        self.kinds.entry(kind_name(gvk)).or_default()
    }
}

/// The reader refuses objects and lifecycles without a kind, so the fallback never shows.
fn kind_name(gvk: Option<&pb::GroupVersionKind>) -> String {
    gvk.map(gvk::display).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::{KindCounts, inspect};
    use crate::test_support::{decompress, object, pod_gvk, sample_file, sample_header};
    use crate::{TraceError, TraceWriter, pb};

    #[test]
    fn counts_the_sample_file() {
        let file = sample_file();
        let inspection = inspect(file.as_slice()).unwrap();
        assert_eq!(inspection.header.origin, "unit test");
        assert_eq!(inspection.events, 3);
        assert_eq!(inspection.objects, 2, "web and api");
        assert_eq!(inspection.applies, 2);
        assert_eq!(inspection.deletes, 1);
        assert_eq!(inspection.lifecycles, 2);
        assert_eq!(inspection.first_event_ms, Some(1_000));
        assert_eq!(inspection.last_event_ms, Some(2_000));
        assert_eq!(inspection.compressed_bytes, file.len() as u64);
        assert_eq!(
            inspection.uncompressed_bytes,
            decompress(&file).len() as u64
        );
        assert_eq!(inspection.kinds.len(), 1);
        assert_eq!(
            inspection.kinds["apps/v1.Deployment"],
            KindCounts {
                objects: 2,
                applies: 2,
                deletes: 1,
                lifecycles: 2
            }
        );
    }

    #[test]
    fn same_name_in_other_kinds_or_namespaces_is_another_object() {
        let mut writer = TraceWriter::new(Vec::new(), &sample_header()).unwrap();
        let event = pb::TraceEvent {
            timestamp_ms: 5,
            applied: vec![
                object(pod_gvk(), "default", "web"),
                object(pod_gvk(), "other", "web"),
                object(crate::test_support::deployment_gvk(), "default", "web"),
                object(pod_gvk(), "default", "web"),
            ],
            deleted: Vec::new(),
        };
        writer.write_event(&event).unwrap();
        let (file, _) = writer.finish().unwrap();
        let inspection = inspect(file.as_slice()).unwrap();
        assert_eq!(inspection.objects, 3);
        assert_eq!(inspection.applies, 4);
        assert_eq!(inspection.kinds["v1.Pod"].objects, 2);
        assert_eq!(inspection.kinds["v1.Pod"].applies, 3);
        assert_eq!(inspection.kinds["apps/v1.Deployment"].objects, 1);
    }

    #[test]
    fn an_empty_trace_has_no_event_times() {
        let (file, _) = TraceWriter::new(Vec::new(), &sample_header())
            .unwrap()
            .finish()
            .unwrap();
        let inspection = inspect(file.as_slice()).unwrap();
        assert_eq!(inspection.events, 0);
        assert_eq!(inspection.first_event_ms, None);
        assert!(inspection.kinds.is_empty());
    }

    #[test]
    fn validates_the_whole_file() {
        let mut file = sample_file();
        file.truncate(file.len() - 1);
        assert!(matches!(
            inspect(file.as_slice()),
            Err(TraceError::Truncated { .. })
        ));
    }
}
