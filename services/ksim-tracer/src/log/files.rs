//! The log directory's file names, what a name says a file is, and the file-system helpers
//! every part of the log shares (temporary paths, directory fsync).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::LogError;

/// Suffix of temporary files, removed on open.
pub(crate) const TMP_SUFFIX: &str = ".tmp";
/// Name of the checkpoint file.
pub(crate) const CHECKPOINT_FILE: &str = "checkpoint.zst";

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
    if name == CHECKPOINT_FILE {
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

/// Fsyncs a directory so renames, creations and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(LogError::io("syncing directory", dir))
}

pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}
