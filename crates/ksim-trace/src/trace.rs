//! A whole trace held in memory.

use crate::{Record, TraceError, TraceReader, pb};

/// Every record of a trace file, in file order within each list.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub header: pb::TraceHeader,
    pub events: Vec<pb::TraceEvent>,
    pub lifecycles: Vec<pb::PodLifecycle>,
    /// The recorded cluster's state over time (see `TracerConfig.cluster_recorded`).
    pub samples: Vec<pb::ClusterSample>,
    pub nodes: Vec<pb::RecordedNode>,
    /// What the recorded pods used (`TracerConfig.usage_recording`).
    pub usage: Vec<pb::UsageSample>,
    pub trailer: pb::TraceTrailer,
}

/// Reads and validates a whole ksim trace file held in memory.
pub fn read_trace(bytes: &[u8]) -> Result<Trace, TraceError> {
    let mut reader = TraceReader::new(bytes)?;
    let mut events = Vec::new();
    let mut lifecycles = Vec::new();
    let mut samples = Vec::new();
    let mut nodes = Vec::new();
    let mut usage = Vec::new();
    while let Some(record) = reader.next_record()? {
        match record {
            Record::Event(event) => events.push(event),
            Record::Lifecycle(lifecycle) => lifecycles.push(lifecycle),
            Record::Sample(sample) => samples.push(sample),
            Record::Node(node) => nodes.push(node),
            Record::Usage(sample) => usage.push(sample),
        }
    }
    let trailer = reader.trailer().cloned().unwrap_or_default();
    Ok(Trace {
        header: reader.header().clone(),
        events,
        lifecycles,
        samples,
        nodes,
        usage,
        trailer,
    })
}
