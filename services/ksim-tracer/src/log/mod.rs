//! The segmented, append-only event log: durable, bounded by retention, recoverable after a crash.
//!
//! Layout of the log directory:
//!
//! - `NNNNNNNNNNNNNNNNNNNN.seg`: the active segment, raw frames appended in place. A frame is
//!   `[u32 LE payload length][u32 LE crc32 of timestamp + payload][i64 LE timestamp_ms]` and the
//!   payload, a prost-encoded `TraceRecord`.
//! - `NNNNNNNNNNNNNNNNNNNN.seg.zst`: a sealed segment, the raw frames compressed whole with zstd.
//! - `NNNNNNNNNNNNNNNNNNNN.meta.json`: a sealed segment's summary (timestamps, counts, sizes), so
//!   opening the log decompresses no segment.
//! - `checkpoint.zst`: the state left by segments that retention folded away (see [`Base`]);
//!   read through once on open to check it. A damaged one is renamed `checkpoint.zst.corrupt`.
//! - `LOCK`: held locked by the one writer.
//! - `*.tmp`: files being written; removed on open.
//!
//! Entries are appended to the active segment, which is sealed (compressed) when it grows past
//! `segment_max_bytes` or (in [`Log::maintain`]) when its first entry is older than
//! `segment_max_age`. Retention folds the oldest sealed segments into the checkpoint and deletes
//! them. The in-memory index holds one small summary per segment, never per entry.

mod active;
mod checkpoint;
mod config;
mod error;
mod files;
mod frame;
mod index;
mod meta;
mod reader;
mod recovery;
mod retention;
mod segment;
mod snapshot;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use prost::Message;
use serde::{Deserialize, Serialize};

pub use config::{
    DEFAULT_COMPRESSION_LEVEL, DEFAULT_SEGMENT_MAX_AGE, DEFAULT_SEGMENT_MAX_BYTES, FsyncPolicy,
    LogConfig, Retention,
};
pub use error::LogError;
pub use frame::MAX_PAYLOAD_BYTES;
pub use snapshot::{Entries, LogSnapshot};

use active::Active;
use checkpoint::CheckpointInfo;
use config::duration_ms;
use index::Index;
use retention::Retired;
use snapshot::{SnapSegment, Source};

/// Name of the lock file in the log directory.
const LOCK_FILE: &str = "LOCK";

/// One logged record and when it was observed.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// When the record was observed, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// An event or a lifecycle; headers and trailers belong to trace files, not the log.
    pub record: pb::TraceRecord,
}

/// What opening the log found and repaired.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Segments on disk after recovery, the active one included.
    pub segments: usize,
    /// Entries in them.
    pub entries: u64,
    /// Bytes cut from the end of a raw segment: a write torn by a crash.
    pub truncated_bytes: u64,
    /// Everything unusual, in words; each was also logged.
    pub warnings: Vec<String>,
}

/// What one [`Log::maintain`] call did.
#[derive(Debug, Clone, Default)]
pub struct Maintenance {
    /// Active segments sealed because of their age or size.
    pub sealed: usize,
    /// Sealed segments folded into the checkpoint and deleted.
    pub dropped_segments: usize,
    /// Entries those segments held.
    pub dropped_entries: u64,
    /// Damage met while folding (the damaged rest of a segment is dropped), in words.
    pub warnings: Vec<String>,
}

/// Per-kind counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindTotals {
    /// Objects of this kind applied.
    pub applies: u64,
    /// Objects of this kind deleted.
    pub deletes: u64,
    /// Lifecycles of pods whose owner is of this kind.
    pub lifecycles: u64,
}

/// The log's content, counting durable entries of the retained segments only (not the
/// checkpoint's).
#[derive(Debug, Clone, Default)]
pub struct LogStats {
    /// Event entries.
    pub events: u64,
    /// Applied plus deleted objects over all events.
    pub objects: u64,
    /// Lifecycle entries.
    pub lifecycles: u64,
    /// Bytes of segments, sidecars and checkpoint on disk (including folded segments whose
    /// deletion waits for a snapshot).
    pub bytes_on_disk: u64,
    /// Segments on disk, the active one included.
    pub segments: u64,
    /// Oldest and newest entry timestamps.
    pub oldest_ms: Option<i64>,
    pub newest_ms: Option<i64>,
    /// The checkpoint's as-of time: newest entry folded into it.
    pub edge_ms: Option<i64>,
    /// Counts per kind, keyed "group/version.Kind" ("v1.Pod" for the core group).
    pub kinds: BTreeMap<String, KindTotals>,
}

/// The compacted state of the log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Base {
    /// Newest entry folded in; `None` if nothing was ever compacted.
    pub as_of_ms: Option<i64>,
    /// Every object that existed at `as_of_ms`, sorted by (group, kind, namespace, name).
    pub objects: Vec<pb::TraceObject>,
    /// Lifecycles still open (`end_ms == 0`) at `as_of_ms`, sorted by (owner group, owner kind,
    /// owner namespace, owner name, pod name).
    pub open_lifecycles: Vec<pb::PodLifecycle>,
    /// The newest cluster sample folded in: the cluster's state at `as_of_ms`.
    pub sample: Option<pb::ClusterSample>,
    /// Nodes that existed at `as_of_ms`, in their last recorded state, sorted by name.
    pub nodes: Vec<pb::RecordedNode>,
}

/// The log writer. There is one per directory (enforced with a lock file); reads go through
/// [`LogSnapshot`]s.
#[derive(Debug)]
pub struct Log {
    config: LogConfig,
    /// Held for its lock until the log is dropped.
    _lock: File,
    index: Index,
    active: Active,
    checkpoint: Option<CheckpointInfo>,
    /// Newest timestamp written, checked so timestamps never go backwards.
    last_ts: Option<i64>,
    last_sync: Instant,
    /// Folded segments whose files wait for snapshots to let go.
    retired: Vec<Retired>,
    /// Set when the writer cannot safely continue; reopening recovers.
    failed: Option<String>,
}

impl Log {
    /// Opens (creating if needed) the log in `config.dir` and recovers from whatever a crash left:
    /// a torn tail is cut off, interrupted seals and compactions are finished, temporary files
    /// are removed.
    pub fn open(config: LogConfig) -> Result<(Log, Recovery), LogError> {
        config.validate()?;
        let dir = config.dir.clone();
        std::fs::create_dir_all(&dir).map_err(LogError::io("creating directory", &dir))?;
        let lock = lock(&dir)?;
        let lagging = matches!(config.fsync, FsyncPolicy::Interval(_));
        let recovered = recovery::recover(&config, lagging)?;
        let mut last_ts = recovered.checkpoint.as_ref().and_then(|c| c.as_of_ms);
        for meta in recovered
            .index
            .iter()
            .map(|s| &s.meta)
            .chain([&recovered.active.meta])
        {
            last_ts = last_ts.max(meta.last_ms);
        }
        let log = Log {
            config,
            _lock: lock,
            index: recovered.index,
            active: recovered.active,
            checkpoint: recovered.checkpoint,
            last_ts,
            last_sync: Instant::now(),
            retired: Vec::new(),
            failed: None,
        };
        Ok((log, recovered.report))
    }

    /// Appends entries in order. Each must hold an event or a lifecycle, and timestamps must
    /// not decrease (within the call and from the previous call). Nothing is written if any
    /// entry is refused. The call is one write (plus one fsync with [`FsyncPolicy::Always`])
    /// unless the active segment fills and is sealed part way; if a later step then fails, the
    /// entries before it stay written.
    pub fn append(&mut self, entries: &[LogEntry]) -> Result<(), LogError> {
        self.usable()?;
        let mut prev = self.last_ts;
        for entry in entries {
            check_entry(entry, prev)?;
            prev = Some(entry.timestamp_ms);
        }
        let mut start = 0;
        for (i, entry) in entries.iter().enumerate() {
            let has_data = self.active.pending_len() > 0;
            if has_data && self.active.pending_len() >= self.config.segment_max_bytes {
                self.write_batch(&entries[start..i])?;
                start = i;
                self.roll()?;
            }
            self.active.buffer(entry)?;
        }
        self.write_batch(&entries[start..])?;
        if self.config.fsync == FsyncPolicy::Always && !entries.is_empty() {
            self.active.sync()?;
        }
        Ok(())
    }

    /// Fsyncs the active segment: everything appended before is durable (and visible to
    /// snapshots) after.
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.usable()?;
        self.active.sync()?;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Periodic upkeep, called with the current time: fsyncs if the interval policy is due,
    /// seals the active segment if it is too old or too big, and enforces retention by folding
    /// the oldest sealed segments into the checkpoint and deleting them.
    pub fn maintain(&mut self, now_ms: i64) -> Result<Maintenance, LogError> {
        self.usable()?;
        let mut report = Maintenance::default();
        retention::reap(&mut self.retired);
        if let FsyncPolicy::Interval(every) = self.config.fsync
            && self.last_sync.elapsed() >= every
        {
            if self.active.has_unsynced() {
                self.sync()?;
            } else {
                self.last_sync = Instant::now();
            }
        }
        let active = &self.active.meta;
        let too_old = active.first_ms.is_some_and(|first| {
            first <= now_ms.saturating_sub(duration_ms(self.config.segment_max_age))
        });
        if active.entries > 0 && (too_old || active.raw_bytes >= self.config.segment_max_bytes) {
            self.roll()?;
            report.sealed += 1;
        }
        let other_bytes =
            self.active.meta.raw_bytes + self.checkpoint.as_ref().map_or(0, |c| c.bytes);
        let drop = retention::select(&self.index, other_bytes, &self.config.retention, now_ms);
        if drop > 0 {
            let metas: Vec<_> = self.index.iter().take(drop).map(|s| &s.meta).collect();
            let folded = match retention::fold(
                &self.config.dir,
                self.config.compression_level,
                self.checkpoint.as_ref(),
                &metas,
            ) {
                Ok(folded) => folded,
                Err(e) => {
                    // A damaged checkpoint may have been moved aside before the failure.
                    if !self.config.dir.join(checkpoint::FILE_NAME).exists() {
                        self.checkpoint = None;
                    }
                    return Err(e);
                }
            };
            self.checkpoint = Some(folded.checkpoint);
            report.warnings = folded.warnings;
            for sealed in self.index.pop_oldest(drop) {
                report.dropped_segments += 1;
                report.dropped_entries += sealed.meta.entries;
                self.retired
                    .push(Retired::new(&self.config.dir, &sealed.meta, sealed.pin));
            }
            retention::reap(&mut self.retired);
        }
        Ok(report)
    }

    /// Seals the active segment now if it holds anything (compressed, as retention keeps it).
    pub fn seal(&mut self) -> Result<bool, LogError> {
        self.usable()?;
        if self.active.meta.entries == 0 {
            return Ok(false);
        }
        self.roll()?;
        Ok(true)
    }

    /// A consistent read view of the durable data.
    pub fn snapshot(&self) -> Result<LogSnapshot, LogError> {
        let dir = &self.config.dir;
        let checkpoint = match &self.checkpoint {
            None => None,
            Some(_) => {
                let path = dir.join(checkpoint::FILE_NAME);
                let file = File::open(&path).map_err(LogError::io("opening", &path))?;
                Some((path, Arc::new(file)))
            }
        };
        let mut segments: Vec<SnapSegment> = self
            .index
            .iter()
            .map(|s| SnapSegment {
                path: dir.join(files::sealed_name(s.meta.seq)),
                last_ms: s.meta.last_ms,
                source: Source::Sealed(Arc::clone(&s.pin)),
            })
            .collect();
        let durable = self.active.durable();
        if durable.raw_bytes > 0 {
            let file = File::open(&self.active.path)
                .map_err(LogError::io("opening", &self.active.path))?;
            segments.push(SnapSegment {
                path: self.active.path.clone(),
                last_ms: durable.last_ms,
                source: Source::Raw {
                    file: Arc::new(file),
                    len: durable.raw_bytes,
                },
            });
        }
        Ok(LogSnapshot {
            checkpoint,
            segments,
            newest_ms: self.durable_metas().filter_map(|m| m.last_ms).max(),
        })
    }

    /// Counts over the durable entries of the retained segments.
    pub fn stats(&self) -> LogStats {
        let mut stats = LogStats::default();
        for meta in self.durable_metas() {
            index::add_to_stats(&mut stats, meta);
        }
        stats.bytes_on_disk = self.index.disk_bytes()
            + self.active.durable().raw_bytes
            + self.checkpoint.as_ref().map_or(0, |c| c.bytes)
            + self.retired.iter().map(|r| r.bytes).sum::<u64>();
        stats.segments = self.index.len() as u64 + 1;
        stats.edge_ms = self.checkpoint.as_ref().and_then(|c| c.as_of_ms);
        stats
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// Number of per-segment summaries held in memory.
    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    fn durable_metas(&self) -> impl Iterator<Item = &meta::SegmentMeta> {
        self.index
            .iter()
            .map(|s| &s.meta)
            .chain([self.active.durable()])
    }

    fn usable(&self) -> Result<(), LogError> {
        match self.failed.as_ref().or(self.active.poisoned.as_ref()) {
            Some(why) => Err(LogError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn write_batch(&mut self, batch: &[LogEntry]) -> Result<(), LogError> {
        self.active.write_buffered(batch)?;
        if let Some(last) = batch.last() {
            self.last_ts = Some(last.timestamp_ms);
        }
        Ok(())
    }

    /// Seals the active segment and starts the next one.
    fn roll(&mut self) -> Result<(), LogError> {
        self.active.sync()?;
        self.last_sync = Instant::now();
        let mut meta = self.active.meta.clone();
        // On failure the raw file is still the segment and appending to it continues.
        segment::seal(&self.config.dir, &mut meta, self.config.compression_level)?;
        let next_seq = meta.seq + 1;
        self.index.push(meta);
        let lagging = matches!(self.config.fsync, FsyncPolicy::Interval(_));
        match Active::create(&self.config.dir, next_seq, lagging) {
            Ok(next) => {
                self.active = next;
                Ok(())
            }
            Err(e) => {
                // The old active segment is sealed and its raw file gone: nothing to append to.
                self.failed = Some(format!("cannot start segment {next_seq}: {e}"));
                Err(e)
            }
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // Delete what retention folded away, unless a snapshot still reads it (the next open
        // removes those: the checkpoint names them).
        retention::reap(&mut self.retired);
    }
}

/// Takes the directory's writer lock.
fn lock(dir: &Path) -> Result<File, LogError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(LogError::io("opening", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(LogError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(LogError::io("locking", &path)(e)),
    }
}

/// Refuses records the log cannot hold and timestamps that go backwards.
fn check_entry(entry: &LogEntry, prev: Option<i64>) -> Result<(), LogError> {
    // Every record kind but a file's header and trailer is loggable, so a new kind needs no
    // change here (nor in `reader::decode_entry`).
    match &entry.record.record {
        Some(Record::Header(_)) => {
            return Err(LogError::InvalidRecord(
                "a header record cannot be logged".into(),
            ));
        }
        Some(Record::Trailer(_)) => {
            return Err(LogError::InvalidRecord(
                "a trailer record cannot be logged".into(),
            ));
        }
        None => return Err(LogError::InvalidRecord("the record is empty".into())),
        Some(_) => {}
    }
    if let Some(prev) = prev
        && entry.timestamp_ms < prev
    {
        return Err(LogError::InvalidRecord(format!(
            "timestamp {} is older than the previous entry's {prev}",
            entry.timestamp_ms
        )));
    }
    let len = entry.record.encoded_len();
    if len > MAX_PAYLOAD_BYTES {
        return Err(LogError::InvalidRecord(format!(
            "record of {len} bytes is larger than the limit of {MAX_PAYLOAD_BYTES} bytes"
        )));
    }
    Ok(())
}
