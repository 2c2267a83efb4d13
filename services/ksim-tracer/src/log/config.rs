//! How a log is laid out, synced and trimmed.

use std::path::PathBuf;
use std::time::Duration;

use super::LogError;

/// Default raw size at which the active segment is sealed.
pub const DEFAULT_SEGMENT_MAX_BYTES: u64 = 16 << 20;
/// Default age (of its first entry) at which the active segment is sealed.
pub const DEFAULT_SEGMENT_MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// Default zstd level for sealed segments and the checkpoint.
pub const DEFAULT_COMPRESSION_LEVEL: i32 = 3;

/// Configuration of a [`Log`](super::Log).
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// Directory holding the segments, sidecars and checkpoint; created if missing.
    pub dir: PathBuf,
    /// Raw bytes after which the active segment is sealed.
    pub segment_max_bytes: u64,
    /// Age (now minus its first entry's timestamp) after which `maintain` seals the active
    /// segment, so old data becomes compressed and eligible for retention even when traffic is low.
    pub segment_max_age: Duration,
    /// When appended entries are fsynced.
    pub fsync: FsyncPolicy,
    /// How much history is kept.
    pub retention: Retention,
    /// zstd level used when sealing segments and writing the checkpoint.
    pub compression_level: i32,
}

impl LogConfig {
    /// A configuration with the defaults: 16 MiB / 10 min segments, fsync every second, 7 days /
    /// 10 GiB retention, zstd level 3.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LogConfig {
            dir: dir.into(),
            segment_max_bytes: DEFAULT_SEGMENT_MAX_BYTES,
            segment_max_age: DEFAULT_SEGMENT_MAX_AGE,
            fsync: FsyncPolicy::default(),
            retention: Retention::default(),
            compression_level: DEFAULT_COMPRESSION_LEVEL,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), LogError> {
        if self.segment_max_bytes == 0 {
            return Err(LogError::InvalidConfig(
                "segment_max_bytes must be greater than 0".into(),
            ));
        }
        if self.segment_max_age.is_zero() {
            return Err(LogError::InvalidConfig(
                "segment_max_age must be greater than 0".into(),
            ));
        }
        if let FsyncPolicy::Interval(every) = self.fsync
            && every.is_zero()
        {
            return Err(LogError::InvalidConfig(
                "the fsync interval must be greater than 0 (use FsyncPolicy::Always)".into(),
            ));
        }
        let levels = zstd::compression_level_range();
        if !levels.contains(&self.compression_level) {
            return Err(LogError::InvalidConfig(format!(
                "compression_level {} is outside zstd's range {}..={}",
                self.compression_level,
                levels.start(),
                levels.end()
            )));
        }
        Ok(())
    }
}

/// When appended entries are fsynced, which decides what survives a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Fsync before `append` returns.
    Always,
    /// The caller calls `sync` on a timer; `maintain` also syncs when this much time has passed
    /// since the last sync. Readers see only synced entries.
    Interval(Duration),
    /// Never fsync explicitly (sealing still does); written data survives a process crash
    /// through the page cache, not a power loss.
    Never,
}

impl Default for FsyncPolicy {
    fn default() -> Self {
        FsyncPolicy::Interval(Duration::from_secs(1))
    }
}

/// How much history the log keeps before folding its oldest segments into the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Sealed segments whose newest entry is older than this are folded away.
    pub max_age: Option<Duration>,
    /// The oldest sealed segments are folded away while the log's files (segments, sidecars,
    /// checkpoint) take more than this.
    pub max_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age: Some(Duration::from_secs(7 * 24 * 60 * 60)),
            max_bytes: Some(10 << 30),
        }
    }
}

/// A duration in whole milliseconds, saturating, for arithmetic with entry timestamps.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
