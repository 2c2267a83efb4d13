//! The per-segment summary and its sidecar file: what the in-memory index keeps per segment and
//! what the sidecar stores, so opening the log needs no decompression.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use serde::{Deserialize, Serialize};

use super::files::{sealed_name, sidecar_name, tmp_path};
use super::{KindTotals, LogEntry, LogError};

/// Version of the sidecar format.
const SIDECAR_VERSION: u32 = 1;

/// Summary of one segment: what the in-memory index keeps per segment and what the sidecar
/// stores, so opening the log needs no decompression.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SegmentMeta {
    pub version: u32,
    pub seq: u64,
    /// Oldest and newest entry timestamps; `None` when the segment holds no readable entry.
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    pub entries: u64,
    pub events: u64,
    /// Applied plus deleted objects over all events.
    pub objects: u64,
    pub lifecycles: u64,
    pub kinds: BTreeMap<String, KindTotals>,
    /// Length of the raw frame stream.
    pub raw_bytes: u64,
    /// Size of the compressed file; 0 while raw.
    pub sealed_bytes: u64,
    /// Size of the sidecar file; not stored in it, measured when written or read.
    #[serde(skip)]
    pub sidecar_bytes: u64,
}

impl SegmentMeta {
    pub(crate) fn new(seq: u64) -> Self {
        SegmentMeta {
            version: SIDECAR_VERSION,
            seq,
            ..Default::default()
        }
    }

    /// Counts one entry. `key` is scratch space, reused so counting allocates only for new kinds.
    pub(crate) fn count(&mut self, entry: &LogEntry, key: &mut String) {
        let ts = entry.timestamp_ms;
        self.first_ms = Some(self.first_ms.map_or(ts, |f| f.min(ts)));
        self.last_ms = Some(self.last_ms.map_or(ts, |l| l.max(ts)));
        self.entries += 1;
        match &entry.record.record {
            Some(Record::Event(event)) => {
                self.events += 1;
                self.objects += (event.applied.len() + event.deleted.len()) as u64;
                for obj in &event.applied {
                    self.bump(obj.gvk.as_ref(), key, |t| t.applies += 1);
                }
                for obj in &event.deleted {
                    self.bump(obj.gvk.as_ref(), key, |t| t.deletes += 1);
                }
            }
            Some(Record::Lifecycle(lifecycle)) => {
                self.lifecycles += 1;
                self.bump(lifecycle.owner_gvk.as_ref(), key, |t| t.lifecycles += 1);
            }
            // Cluster state and usage are not per kind; the entry count above covers them.
            Some(Record::Sample(_) | Record::Node(_) | Record::Usage(_)) => {}
            // `append` refuses the other kinds and readers reject them as corrupt.
            Some(Record::Header(_) | Record::Trailer(_)) | None => {}
        }
    }

    fn bump(
        &mut self,
        gvk: Option<&pb::GroupVersionKind>,
        key: &mut String,
        f: impl FnOnce(&mut KindTotals),
    ) {
        kind_key(gvk, key);
        match self.kinds.get_mut(key.as_str()) {
            Some(totals) => f(totals),
            None => {
                let mut totals = KindTotals::default();
                f(&mut totals);
                self.kinds.insert(key.clone(), totals);
            }
        }
    }

    /// Bytes this segment takes on disk.
    pub(crate) fn disk_bytes(&self) -> u64 {
        if self.sealed_bytes > 0 {
            self.sealed_bytes + self.sidecar_bytes
        } else {
            self.raw_bytes
        }
    }
}

/// Writes "group/version.Kind" ("version.Kind" for the core group) into `out`.
pub(crate) fn kind_key(gvk: Option<&pb::GroupVersionKind>, out: &mut String) {
    out.clear();
    let Some(gvk) = gvk else { return };
    if !gvk.group.is_empty() {
        out.push_str(&gvk.group);
        out.push('/');
    }
    out.push_str(&gvk.version);
    out.push('.');
    out.push_str(&gvk.kind);
}

/// Why a sidecar cannot be used, so the segment's summary is rebuilt from the segment.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SidecarProblem {
    #[error("cannot read {}: {source}", path.display())]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("cannot parse {}: {source}", path.display())]
    Unparsable {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot stat {}: {source}", path.display())]
    NoSegment { path: PathBuf, source: io::Error },
    #[error(
        "{} does not match {} (version {version}, seq {seq}, size {recorded} vs {actual})",
        sidecar.display(),
        segment.display()
    )]
    Stale {
        sidecar: PathBuf,
        segment: PathBuf,
        version: u32,
        seq: u64,
        recorded: u64,
        actual: u64,
    },
}

/// Reads a sidecar; why not when it is missing, unreadable or does not describe the compressed
/// file as it is now.
pub(crate) fn read_sidecar(dir: &Path, seq: u64) -> Result<SegmentMeta, SidecarProblem> {
    let path = dir.join(sidecar_name(seq));
    let bytes = fs::read(&path).map_err(|source| SidecarProblem::Unreadable {
        path: path.clone(),
        source,
    })?;
    let mut meta: SegmentMeta =
        serde_json::from_slice(&bytes).map_err(|source| SidecarProblem::Unparsable {
            path: path.clone(),
            source,
        })?;
    let sealed = dir.join(sealed_name(seq));
    let size = fs::metadata(&sealed)
        .map_err(|source| SidecarProblem::NoSegment {
            path: sealed.clone(),
            source,
        })?
        .len();
    if meta.version != SIDECAR_VERSION || meta.seq != seq || meta.sealed_bytes != size {
        return Err(SidecarProblem::Stale {
            sidecar: path,
            segment: sealed,
            version: meta.version,
            seq: meta.seq,
            recorded: meta.sealed_bytes,
            actual: size,
        });
    }
    meta.sidecar_bytes = bytes.len() as u64;
    Ok(meta)
}

/// Writes a sidecar (tmp + rename). Not fsynced: it can always be rebuilt from the segment, and
/// a torn one fails to parse and is rebuilt.
pub(crate) fn write_sidecar(dir: &Path, meta: &mut SegmentMeta) -> Result<(), LogError> {
    let path = dir.join(sidecar_name(meta.seq));
    let tmp = tmp_path(&path);
    let bytes = serde_json::to_vec(meta)
        .map_err(|e| LogError::io("encoding", &path)(io::Error::other(e)))?;
    fs::write(&tmp, &bytes).map_err(LogError::io("writing", &tmp))?;
    fs::rename(&tmp, &path).map_err(LogError::io("renaming into place", &path))?;
    meta.sidecar_bytes = bytes.len() as u64;
    Ok(())
}
