//! Writing an export: the domain's window cut run over a source (the log, or an imported
//! trace), written as a ksim trace file in chunks to a channel. Blocking; run it in
//! `spawn_blocking`. Both passes stream, so a long log is never loaded whole, and what the cut
//! sorts spills to temporary files, so a long window is not held whole either.

use std::{fs::File, io::Write, path::PathBuf};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::{
    Record as TraceFileRecord, TraceError, TraceReader, TraceWriter, time::timestamp,
};
use pb::trace_record::Record;
use thiserror::Error;
use tokio::sync::mpsc;

use crate::{
    domain::{
        export::{PassesDisagree, Scan, Window},
        filter::Filter,
    },
    log::{LogError, LogSnapshot},
    spill::{Spill, SpillError},
};

/// Where the exported events come from.
#[derive(Debug)]
pub enum Source {
    Log(LogSnapshot),
    Imported(PathBuf),
}

#[derive(Debug, Error)]
pub enum ExportError {
    #[error("reading the log: {0}")]
    Log(#[from] LogError),
    #[error("reading the imported trace: {0}")]
    Trace(#[from] TraceError),
    #[error("opening the imported trace: {0}")]
    Open(std::io::Error),
    #[error("sorting the window: {0}")]
    Spill(#[from] SpillError),
    #[error(transparent)]
    Passes(#[from] PassesDisagree),
    #[error("the client went away")]
    Disconnected,
}

pub type Chunks = mpsc::Sender<Result<pb::ExportResponse, tonic::Status>>;

#[derive(Debug)]
pub struct Export {
    pub source: Source,
    pub window: Window,
    pub filter: Filter,
    pub header: pb::TraceHeader,
    pub chunk_bytes: usize,
    /// Where the window's sorting spills.
    pub spill: Spill,
}

impl Export {
    pub fn run(self, chunks: Chunks) -> Result<pb::TraceSummary, ExportError> {
        let mut scan = Scan::new(self.window, self.filter, self.spill);
        if let Source::Log(snapshot) = &self.source {
            let base = snapshot.base()?;
            scan.base(base.objects, base.open_lifecycles)?;
            scan.cluster_base(base.sample, base.nodes);
        }
        for_each_record(&self.source, i64::MIN, |ts, record| {
            Ok(scan.record(ts, record)?)
        })?;
        let mut cut = scan.finish()?;

        let mut sink = ChunkSink {
            chunks,
            buffer: Vec::new(),
            chunk_bytes: self.chunk_bytes.max(1),
            offset: 0,
        };
        let mut writer = TraceWriter::new(&mut sink, &self.header).map_err(disconnected_or)?;
        let first = cut.first_event();
        let mut last_event_ms = first.timestamp_ms;
        writer.write_event(&first).map_err(disconnected_or)?;
        let (sample, nodes) = cut.first_cluster_records();
        if let Some(sample) = sample {
            writer.write_sample(&sample).map_err(disconnected_or)?;
        }
        for node in nodes {
            writer.write_node(&node).map_err(disconnected_or)?;
        }
        for_each_record(&self.source, self.window.start_ms, |_, record| {
            let written = match record {
                Record::Event(event) => cut.event(event)?.map(|event| {
                    last_event_ms = event.timestamp_ms;
                    writer.write_event(&event)
                }),
                Record::Sample(sample) => cut.sample(sample).map(|s| writer.write_sample(&s)),
                Record::Node(node) => cut.node(node).map(|n| writer.write_node(&n)),
                Record::Usage(usage) => cut.usage(usage).map(|u| writer.write_usage(&u)),
                _ => None,
            };
            written.transpose().map_err(disconnected_or)?;
            Ok(())
        })?;
        for lifecycle in cut.lifecycles()? {
            writer
                .write_lifecycle(&lifecycle?)
                .map_err(disconnected_or)?;
        }
        let (_, trailer) = writer.finish().map_err(disconnected_or)?;
        let summary = pb::TraceSummary {
            events: trailer.event_count,
            objects: trailer.object_count,
            lifecycles: trailer.lifecycle_count,
            start_time: Some(timestamp(self.window.start_ms)),
            end_time: Some(timestamp(last_event_ms)),
        };
        sink.finish(summary)?;
        Ok(summary)
    }
}

/// Calls `on_record` for every record of the source in order, until it fails. The log's
/// compacted state (its base) is not included.
fn for_each_record(
    source: &Source,
    from_ms: i64,
    mut on_record: impl FnMut(i64, &Record) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    match source {
        Source::Log(snapshot) => {
            for entry in snapshot.entries(from_ms)? {
                let entry = entry?;
                if let Some(record) = &entry.record.record {
                    on_record(entry.timestamp_ms, record)?;
                }
            }
        }
        Source::Imported(path) => {
            let file = File::open(path).map_err(ExportError::Open)?;
            let mut reader = TraceReader::new(std::io::BufReader::new(file))?;
            while let Some(record) = reader.next_record()? {
                match record {
                    TraceFileRecord::Event(event) => {
                        let ts = event.timestamp_ms;
                        on_record(ts, &Record::Event(event))?;
                    }
                    TraceFileRecord::Lifecycle(lifecycle) => {
                        // Stored traces keep lifetimes after the events; order by their end.
                        let ts = if lifecycle.end_ms != 0 {
                            lifecycle.end_ms
                        } else {
                            lifecycle.start_ms
                        };
                        on_record(ts, &Record::Lifecycle(lifecycle))?;
                    }
                    TraceFileRecord::Sample(sample) => {
                        on_record(sample.timestamp_ms, &Record::Sample(sample))?;
                    }
                    TraceFileRecord::Node(node) => {
                        on_record(node.timestamp_ms, &Record::Node(node))?;
                    }
                    TraceFileRecord::Usage(usage) => {
                        on_record(usage.timestamp_ms, &Record::Usage(usage))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// A write to a closed channel surfaces as an I/O error inside the trace writer.
fn disconnected_or(error: TraceError) -> ExportError {
    match &error {
        TraceError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe => {
            ExportError::Disconnected
        }
        _ => ExportError::Trace(error),
    }
}

struct ChunkSink {
    chunks: Chunks,
    buffer: Vec<u8>,
    chunk_bytes: usize,
    offset: u64,
}

impl ChunkSink {
    fn send(&mut self, data: Vec<u8>, summary: Option<pb::TraceSummary>) -> std::io::Result<()> {
        let len = data.len() as u64;
        let chunk = pb::ExportResponse {
            data,
            offset: self.offset,
            summary,
        };
        self.offset += len;
        self.chunks.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "export client went away")
        })
    }

    fn finish(mut self, summary: pb::TraceSummary) -> Result<(), ExportError> {
        let rest = std::mem::take(&mut self.buffer);
        self.send(rest, Some(summary))
            .map_err(|_| ExportError::Disconnected)
    }
}

impl Write for ChunkSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        while self.buffer.len() >= self.chunk_bytes {
            let rest = self.buffer.split_off(self.chunk_bytes);
            let full = std::mem::replace(&mut self.buffer, rest);
            self.send(full, None)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
