//! What can go wrong writing or reading a report's files.

use std::{io, path::PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("writing {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("encoding the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("reading {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{} is not a report ksim wrote: {source}", path.display())]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} is larger than a report ksim writes ({limit} bytes at most)", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{} is not a report ksim wrote: {source}", path.display())]
    NotWritten {
        path: PathBuf,
        source: Box<ReportError>,
    },
    #[error("drawing the timeline chart: {0}")]
    Chart(String),
    #[error("bucket_ms {bucket_ms} is not a bucket width ksim makes ({min_ms} to {max_ms} ms)")]
    BucketWidth {
        bucket_ms: u64,
        min_ms: u64,
        max_ms: u64,
    },
    #[error(
        "timeline entry {index} is at {offset_ms} ms, not {expected_ms} ms: a report's entries \
         are one bucket ({bucket_ms} ms) apart from 0"
    )]
    TimelineEntry {
        index: usize,
        offset_ms: u64,
        expected_ms: u64,
        bucket_ms: u64,
    },
}
