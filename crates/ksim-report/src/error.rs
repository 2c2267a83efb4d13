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
    #[error("drawing the timeline chart: {0}")]
    Chart(String),
}
