//! Read views of the log that stay valid while the writer appends, seals and compacts.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use super::checkpoint;
use super::index::Pin;
use super::reader::{PosReader, SegmentReader};
use super::{Base, LogEntry, LogError};

/// A consistent view of the log's durable data as of when it was taken.
///
/// It holds open handles to the checkpoint and the active segment (so later compaction or
/// sealing, which replace or delete those files, does not disturb it) and pins the sealed
/// segments it lists (retention defers deleting a folded segment's files until no snapshot pins
/// it). Sealed segments are opened only while they are read, so a snapshot costs two file
/// descriptors however many segments the log retains.
#[derive(Debug, Clone)]
pub struct LogSnapshot {
    pub(crate) checkpoint: Option<(PathBuf, Arc<File>)>,
    pub(crate) segments: Vec<SnapSegment>,
    pub(crate) newest_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub(crate) struct SnapSegment {
    pub path: PathBuf,
    pub last_ms: Option<i64>,
    pub source: Source,
}

#[derive(Debug, Clone)]
pub(crate) enum Source {
    Sealed(Pin),
    /// The active segment, readable up to its durable length at snapshot time.
    Raw {
        file: Arc<File>,
        len: u64,
    },
}

impl LogSnapshot {
    /// The compacted state: every object that existed and every lifecycle that was open as of
    /// the newest folded entry; empty if nothing was ever compacted.
    pub fn base(&self) -> Result<Base, LogError> {
        match &self.checkpoint {
            None => Ok(Base::default()),
            Some((path, file)) => checkpoint::read_base(PosReader::new(Arc::clone(file)), path),
        }
    }

    /// Every durable entry in append order, skipping whole segments whose newest entry is older
    /// than `from_ms` (older entries inside a returned segment are still yielded). After an
    /// error the iterator ends.
    pub fn entries(&self, from_ms: i64) -> Result<Entries, LogError> {
        let segments: Vec<SnapSegment> = self
            .segments
            .iter()
            // Unknown range (nothing readable): keep it, so damage is reported rather than hidden.
            .filter(|s| s.last_ms.is_none_or(|last| last >= from_ms))
            .cloned()
            .collect();
        Ok(Entries {
            pending: segments.into_iter(),
            current: None,
            done: false,
        })
    }

    /// Timestamp of the newest durable entry in the segments.
    pub fn newest_ms(&self) -> Option<i64> {
        self.newest_ms
    }
}

/// Iterator over a snapshot's entries; see [`LogSnapshot::entries`].
#[derive(Debug)]
pub struct Entries {
    pending: std::vec::IntoIter<SnapSegment>,
    current: Option<SegmentReader>,
    done: bool,
}

impl Iterator for Entries {
    type Item = Result<LogEntry, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if let Some(reader) = &mut self.current {
                match reader.next() {
                    Some(Ok(entry)) => return Some(Ok(entry)),
                    Some(Err(e)) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                    None => self.current = None,
                }
            }
            let Some(segment) = self.pending.next() else {
                self.done = true;
                break;
            };
            let reader = match segment.source {
                Source::Sealed(pin) => SegmentReader::sealed(segment.path, Some(pin)),
                Source::Raw { file, len } => Ok(SegmentReader::raw(segment.path, file, len)),
            };
            match reader {
                Ok(reader) => self.current = Some(reader),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
