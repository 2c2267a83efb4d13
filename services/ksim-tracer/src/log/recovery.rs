//! Opening a log directory: rebuild the index, repair what a crash left behind.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use super::active::Active;
use super::checkpoint::{self, CheckpointInfo};
use super::files::{FileRole, classify, raw_name, sealed_name, sidecar_name};
use super::index::Index;
use super::meta::{SegmentMeta, read_sidecar, write_sidecar};
use super::reader::SegmentReader;
use super::segment;
use super::{LogConfig, LogError, Recovery};

/// What opening found.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub index: Index,
    pub active: Active,
    pub checkpoint: Option<CheckpointInfo>,
    pub report: Recovery,
}

#[derive(Debug, Default)]
struct Files {
    raw: bool,
    sealed: bool,
    sidecar: bool,
}

fn warn(report: &mut Recovery, msg: String) {
    tracing::warn!("{msg}");
    report.warnings.push(msg);
}

fn remove(dir: &Path, name: &str) -> Result<(), LogError> {
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("removing", &path)(e)),
    }
}

pub(crate) fn recover(config: &LogConfig, lagging: bool) -> Result<Recovered, LogError> {
    let dir = config.dir.as_path();
    let mut report = Recovery::default();

    let mut segments: BTreeMap<u64, Files> = BTreeMap::new();
    let mut has_checkpoint = false;
    for entry in fs::read_dir(dir).map_err(LogError::io("listing", dir))? {
        let entry = entry.map_err(LogError::io("listing", dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        match classify(&name) {
            Some(FileRole::Temporary) => {
                remove(dir, &name)?;
                warn(
                    &mut report,
                    format!("removed {name}, left by an interrupted write"),
                );
            }
            Some(FileRole::Checkpoint) => has_checkpoint = true,
            Some(FileRole::Raw(seq)) => segments.entry(seq).or_default().raw = true,
            Some(FileRole::Sealed(seq)) => segments.entry(seq).or_default().sealed = true,
            Some(FileRole::Sidecar(seq)) => segments.entry(seq).or_default().sidecar = true,
            None => {}
        }
    }

    let checkpoint = if has_checkpoint {
        match checkpoint::verify(&dir.join(checkpoint::FILE_NAME)) {
            Ok(info) => Some(info),
            Err(e @ LogError::Corrupt { .. }) => {
                let moved = checkpoint::quarantine(dir)?;
                warn(
                    &mut report,
                    format!(
                        "{e}; moved it to {} and started with an empty base",
                        moved.display()
                    ),
                );
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    // Segments are numbered from 1, so 0 means none was folded.
    let folded = checkpoint.as_ref().map_or(0, |c| c.last_seq);
    let newest = segments
        .iter()
        .filter(|(seq, f)| **seq > folded && (f.raw || f.sealed))
        .map(|(seq, _)| *seq)
        .next_back();

    let mut index = Index::default();
    let mut active = None;
    for (seq, files) in segments {
        if seq <= folded {
            for name in [raw_name(seq), sealed_name(seq), sidecar_name(seq)] {
                remove(dir, &name)?;
            }
            warn(
                &mut report,
                format!(
                    "removed segment {seq}: the checkpoint already holds it (its deletion was interrupted)"
                ),
            );
        } else if files.sealed {
            if files.raw {
                // The compressed copy was fsynced before it was renamed into place, so it is
                // complete; the seal was interrupted before removing the raw file.
                remove(dir, &raw_name(seq))?;
                warn(
                    &mut report,
                    format!(
                        "removed {}: segment {seq} was already sealed",
                        raw_name(seq)
                    ),
                );
            }
            if let Some(meta) = recover_sealed(dir, seq, files.sidecar, &mut report)? {
                index.push(meta);
            }
        } else if files.raw {
            let meta = recover_raw(dir, seq, &mut report)?;
            if Some(seq) == newest {
                active = Some(Active::resume(dir.join(raw_name(seq)), meta, lagging)?);
            } else if meta.entries == 0 {
                remove(dir, &raw_name(seq))?;
            } else {
                // A raw segment that is not the newest: a crash hit between rolling and sealing.
                let mut meta = meta;
                segment::seal(dir, &mut meta, config.compression_level)?;
                warn(
                    &mut report,
                    format!("sealed segment {seq}, left raw by an interrupted roll"),
                );
                index.push(meta);
            }
        } else if files.sidecar {
            remove(dir, &sidecar_name(seq))?;
        }
    }

    let active = match active {
        Some(active) => active,
        None => Active::create(dir, newest.unwrap_or(0).max(folded) + 1, lagging)?,
    };
    report.segments = index.len() + 1;
    report.entries = index.iter().map(|s| s.meta.entries).sum::<u64>() + active.meta.entries;
    Ok(Recovered {
        index,
        active,
        checkpoint,
        report,
    })
}

/// Loads a sealed segment's summary from its sidecar, or rebuilds it by reading the segment.
/// `None` when the segment holds nothing and was removed.
fn recover_sealed(
    dir: &Path,
    seq: u64,
    has_sidecar: bool,
    report: &mut Recovery,
) -> Result<Option<SegmentMeta>, LogError> {
    let reason = match read_sidecar(dir, seq) {
        Ok(meta) => return Ok(Some(meta)),
        Err(reason) => reason,
    };
    if has_sidecar {
        warn(
            report,
            format!("rebuilding summary of segment {seq}: {reason}"),
        );
    }
    let path = dir.join(sealed_name(seq));
    let size = fs::metadata(&path)
        .map_err(LogError::io("stat", &path))?
        .len();
    let scan = segment::scan(seq, SegmentReader::sealed(path.clone(), None)?);
    let mut meta = scan.meta;
    meta.sealed_bytes = size;
    match scan.damage {
        Some(e @ LogError::Corrupt { .. }) => {
            // Kept, so readers get the intact part and an error naming the damage; no sidecar
            // is written, so every open reports it again.
            warn(
                report,
                format!(
                    "{e}; segment {seq} keeps its {} entries before the damage",
                    meta.entries
                ),
            );
        }
        Some(e) => return Err(e),
        None if meta.entries == 0 => {
            remove(dir, &sealed_name(seq))?;
            remove(dir, &sidecar_name(seq))?;
            warn(
                report,
                format!("removed segment {seq}: it holds no entries"),
            );
            return Ok(None);
        }
        None => {
            if let Err(e) = write_sidecar(dir, &mut meta) {
                warn(
                    report,
                    format!("cannot write summary of segment {seq}: {e}"),
                );
            }
        }
    }
    Ok(Some(meta))
}

/// Reads a raw segment, cuts off a torn tail, and fsyncs it so what remains is durable.
fn recover_raw(dir: &Path, seq: u64, report: &mut Recovery) -> Result<SegmentMeta, LogError> {
    let path = dir.join(raw_name(seq));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(LogError::io("opening", &path))?;
    let len = file.metadata().map_err(LogError::io("stat", &path))?.len();
    let file = Arc::new(file);
    let scan = segment::scan(
        seq,
        SegmentReader::raw(path.clone(), Arc::clone(&file), len),
    );
    match scan.damage {
        Some(e @ LogError::Corrupt { .. }) => {
            let cut = len - scan.valid_len;
            file.set_len(scan.valid_len)
                .map_err(LogError::io("truncating", &path))?;
            report.truncated_bytes += cut;
            warn(
                report,
                format!("{e}; cut the last {cut} bytes (a torn write) off segment {seq}"),
            );
        }
        Some(e) => return Err(e),
        None => {}
    }
    file.sync_all().map_err(LogError::io("syncing", &path))?;
    Ok(scan.meta)
}
