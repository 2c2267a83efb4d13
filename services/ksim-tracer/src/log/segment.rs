//! Segment files: names, the per-segment summary (sidecar) and sealing.
//!
//! Segment `N` is `N.seg` (20-digit zero-padded) while it is active and raw, then `N.seg.zst`
//! (the raw frame stream compressed whole) plus `N.meta.json` once sealed.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use serde::{Deserialize, Serialize};

use super::reader::SegmentReader;
use super::{KindTotals, LogEntry, LogError};

/// Suffix of temporary files, removed on open.
pub(crate) const TMP_SUFFIX: &str = ".tmp";
/// Version of the sidecar format.
const SIDECAR_VERSION: u32 = 1;

pub(crate) fn raw_name(seq: u64) -> String {
    format!("{seq:020}.seg")
}

pub(crate) fn sealed_name(seq: u64) -> String {
    format!("{seq:020}.seg.zst")
}

pub(crate) fn sidecar_name(seq: u64) -> String {
    format!("{seq:020}.meta.json")
}

/// What a file in the log directory is, judged by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileRole {
    Raw(u64),
    Sealed(u64),
    Sidecar(u64),
    Checkpoint,
    Temporary,
}

pub(crate) fn classify(name: &str) -> Option<FileRole> {
    if name.ends_with(TMP_SUFFIX) {
        return Some(FileRole::Temporary);
    }
    if name == super::checkpoint::FILE_NAME {
        return Some(FileRole::Checkpoint);
    }
    let seq = |stem: &str| {
        (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
            .then(|| stem.parse::<u64>().ok())
            .flatten()
    };
    if let Some(stem) = name.strip_suffix(".seg.zst") {
        return seq(stem).map(FileRole::Sealed);
    }
    if let Some(stem) = name.strip_suffix(".seg") {
        return seq(stem).map(FileRole::Raw);
    }
    if let Some(stem) = name.strip_suffix(".meta.json") {
        return seq(stem).map(FileRole::Sidecar);
    }
    None
}

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

/// Fsyncs a directory so renames, creations and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(LogError::io("syncing directory", dir))
}

/// Reads a sidecar; `None` (with the reason) when it is missing, unreadable or does not describe
/// the compressed file as it is now.
pub(crate) fn read_sidecar(dir: &Path, seq: u64) -> Result<SegmentMeta, String> {
    let path = dir.join(sidecar_name(seq));
    let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut meta: SegmentMeta = serde_json::from_slice(&bytes)
        .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
    let sealed = dir.join(sealed_name(seq));
    let size = fs::metadata(&sealed)
        .map_err(|e| format!("cannot stat {}: {e}", sealed.display()))?
        .len();
    if meta.version != SIDECAR_VERSION || meta.seq != seq || meta.sealed_bytes != size {
        return Err(format!(
            "{} does not match {} (version {}, seq {}, size {} vs {size})",
            path.display(),
            sealed.display(),
            meta.version,
            meta.seq,
            meta.sealed_bytes
        ));
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

pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// Result of reading a whole segment to summarise it.
#[derive(Debug)]
pub(crate) struct Scan {
    pub meta: SegmentMeta,
    /// Length of the intact prefix of the frame stream.
    pub valid_len: u64,
    /// The first damage found, if any.
    pub damage: Option<LogError>,
}

/// Summarises a segment by reading every entry; stops at the first damage.
pub(crate) fn scan(seq: u64, mut reader: SegmentReader) -> Scan {
    let mut meta = SegmentMeta::new(seq);
    let mut key = String::new();
    let mut damage = None;
    for entry in reader.by_ref() {
        match entry {
            Ok(entry) => meta.count(&entry, &mut key),
            Err(e) => {
                damage = Some(e);
                break;
            }
        }
    }
    let valid_len = reader.intact_len();
    meta.raw_bytes = valid_len;
    Scan {
        meta,
        valid_len,
        damage,
    }
}

/// Seals raw segment `meta.seq` (already fsynced, exactly `meta.raw_bytes` long): compresses it to
/// a temporary file, fsyncs and renames that into place, writes the sidecar, fsyncs the
/// directory, and only then removes the raw file, so a crash at any step leaves a complete copy.
/// An error means the raw file is still the segment (nothing was renamed into place).
pub(crate) fn seal(dir: &Path, meta: &mut SegmentMeta, level: i32) -> Result<(), LogError> {
    let raw = dir.join(raw_name(meta.seq));
    let sealed = dir.join(sealed_name(meta.seq));
    let tmp = tmp_path(&sealed);
    let result = compress(&raw, &tmp, meta.raw_bytes, level);
    let size = match result {
        Ok(size) => size,
        Err(e) => {
            // Best effort: a leftover is removed on the next open anyway.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Err(e) = fs::rename(&tmp, &sealed) {
        let _ = fs::remove_file(&tmp);
        return Err(LogError::io("renaming into place", &sealed)(e));
    }
    meta.sealed_bytes = size;
    // From here the compressed file is the segment, so nothing below may fail the seal: the
    // caller would keep appending to a raw file that the next open discards as already sealed.
    if let Err(e) = write_sidecar(dir, meta) {
        // Rebuilt by scanning on the next open.
        tracing::warn!("cannot write summary of segment {}: {e}", meta.seq);
    }
    match sync_dir(dir) {
        Ok(()) => {
            if let Err(e) = fs::remove_file(&raw) {
                tracing::warn!("cannot remove {} after sealing it: {e}", raw.display());
            }
        }
        // Until the rename is known durable the raw file is the only sure copy; the next open
        // removes it if the compressed one made it to disk.
        Err(e) => tracing::warn!("{e}; keeping {} until the next open", raw.display()),
    }
    Ok(())
}

fn compress(raw: &Path, tmp: &Path, len: u64, level: i32) -> Result<u64, LogError> {
    let input = File::open(raw).map_err(LogError::io("opening", raw))?;
    let output = File::create(tmp).map_err(LogError::io("creating", tmp))?;
    let write_err = LogError::io("writing", tmp);
    let mut encoder = zstd::Encoder::new(BufWriter::with_capacity(256 << 10, output), level)
        .and_then(|mut e| e.include_checksum(true).map(|()| e))
        .map_err(LogError::io("starting compression of", tmp))?;
    let copied = io::copy(
        &mut BufReader::with_capacity(256 << 10, input).take(len),
        &mut encoder,
    )
    .map_err(LogError::io("compressing", raw))?;
    if copied != len {
        return Err(LogError::corrupt(
            raw,
            copied,
            format!("raw segment is shorter than the {len} bytes recorded"),
        ));
    }
    let file = encoder
        .finish()
        .and_then(|mut w| w.flush().map(|()| w))
        .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
        .map_err(write_err)?;
    file.sync_all().map_err(LogError::io("syncing", tmp))?;
    let size = file.metadata().map_err(LogError::io("stat", tmp))?.len();
    Ok(size)
}
