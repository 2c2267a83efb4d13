//! Segment files: scanning one to summarise it, and sealing (compressing) it. Their names are
//! in [`super::files`], their summaries in [`super::meta`].
//!
//! Segment `N` is `N.seg` (20-digit zero-padded) while it is active and raw, then `N.seg.zst`
//! (the raw frame stream compressed whole) plus `N.meta.json` once sealed.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::LogError;
use super::files::{raw_name, sealed_name, sync_dir, tmp_path};
use super::meta::{SegmentMeta, write_sidecar};
use super::reader::SegmentReader;

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
