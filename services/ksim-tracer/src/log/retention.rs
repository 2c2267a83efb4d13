//! Retention: which sealed segments to fold away, and folding them into the checkpoint.

use std::path::{Path, PathBuf};

use super::LogError;
use super::checkpoint::{self, CheckpointInfo, State};
use super::config::{Retention, duration_ms};
use super::files::{sealed_name, sidecar_name};
use super::index::{Index, Pin};
use super::meta::SegmentMeta;
use super::reader::SegmentReader;

/// How many of the oldest sealed segments the policy drops. `other_bytes` is what the log takes on
/// disk besides the sealed segments (active segment, checkpoint): it counts against the byte
/// budget too, since the budget is about the disk.
pub(crate) fn select(index: &Index, other_bytes: u64, policy: &Retention, now_ms: i64) -> usize {
    let cutoff = policy
        .max_age
        .map(|age| now_ms.saturating_sub(duration_ms(age)));
    let mut total = other_bytes + index.disk_bytes();
    let mut drop = 0;
    for sealed in index.iter() {
        let over_bytes = policy.max_bytes.is_some_and(|max| total > max);
        // A segment without a readable entry has nothing to keep.
        let too_old = cutoff.is_some_and(|c| sealed.meta.last_ms.is_none_or(|last| last < c));
        if !over_bytes && !too_old {
            break;
        }
        total -= sealed.meta.disk_bytes();
        drop += 1;
    }
    drop
}

/// Outcome of folding segments into the checkpoint.
#[derive(Debug)]
pub(crate) struct Folded {
    pub checkpoint: CheckpointInfo,
    pub warnings: Vec<String>,
}

/// Folds `segments` (the oldest, in order) into the checkpoint and writes the new checkpoint
/// atomically. The segments are not deleted here: the caller does that only after this returns,
/// so a crash in between leaves them on disk (and the next open removes them, since the
/// checkpoint names the last segment it holds).
pub(crate) fn fold(
    dir: &Path,
    level: i32,
    current: Option<&CheckpointInfo>,
    segments: &[&SegmentMeta],
) -> Result<Folded, LogError> {
    let mut warnings = Vec::new();
    let mut state = match current {
        None => State::default(),
        Some(_) => match checkpoint::load(&dir.join(checkpoint::FILE_NAME)) {
            Ok(state) => state,
            Err(e @ LogError::Corrupt { .. }) => {
                // Refusing to compact would fill the disk; keep the damaged file for inspection
                // and carry on from what the segments hold.
                let moved = checkpoint::quarantine(dir)?;
                let msg = format!(
                    "{e}; moved it to {} and continued with an empty base",
                    moved.display()
                );
                tracing::error!("{msg}");
                warnings.push(msg);
                State::default()
            }
            Err(e) => return Err(e),
        },
    };
    for meta in segments {
        let path = dir.join(sealed_name(meta.seq));
        for entry in SegmentReader::sealed(path, None)? {
            match entry {
                Ok(entry) => state.apply(entry.record),
                Err(e @ LogError::Corrupt { .. }) => {
                    // The damaged rest is unreadable whatever we do; keep retention moving.
                    let msg =
                        format!("{e}; folded the entries before the damage, dropped the rest");
                    tracing::error!("{msg}");
                    warnings.push(msg);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(last) = meta.last_ms {
            state.as_of_ms = Some(state.as_of_ms.map_or(last, |a| a.max(last)));
        }
        state.last_seq = state.last_seq.max(meta.seq);
    }
    let checkpoint = checkpoint::write(dir, state, level)?;
    Ok(Folded {
        checkpoint,
        warnings,
    })
}

/// A folded segment whose files wait for the last snapshot that lists it to go away.
#[derive(Debug)]
pub(crate) struct Retired {
    pub files: Vec<PathBuf>,
    pub bytes: u64,
    pub pin: Pin,
}

impl Retired {
    pub(crate) fn new(dir: &Path, meta: &SegmentMeta, pin: Pin) -> Self {
        Retired {
            files: vec![
                dir.join(sealed_name(meta.seq)),
                dir.join(sidecar_name(meta.seq)),
            ],
            bytes: meta.disk_bytes(),
            pin,
        }
    }
}

/// Deletes the files of retired segments no snapshot holds any more; keeps the rest for later.
pub(crate) fn reap(retired: &mut Vec<Retired>) {
    retired.retain(|r| {
        if std::sync::Arc::strong_count(&r.pin) > 1 {
            return true;
        }
        for file in &r.files {
            match std::fs::remove_file(file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // The next open removes it (the checkpoint says it was folded in).
                Err(e) => {
                    tracing::warn!("cannot remove folded segment file {}: {e}", file.display())
                }
            }
        }
        false
    });
}
