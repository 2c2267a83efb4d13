//! The active segment: the raw file appends go to.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::files::{raw_name, sync_dir};
use super::meta::SegmentMeta;
use super::{LogEntry, LogError, frame};

#[derive(Debug)]
pub(crate) struct Active {
    pub path: PathBuf,
    /// Opened for appending: every write lands at the current end of the file.
    file: File,
    /// Everything written to the file.
    pub meta: SegmentMeta,
    /// What the last fsync covered, when durability lags writes (interval policy); `None` when
    /// everything written counts as durable.
    durable: Option<SegmentMeta>,
    /// Frames encoded but not yet written, so one append call is one write.
    buf: Vec<u8>,
    /// Scratch for kind keys.
    key: String,
    /// Set when a failed write or fsync left the file in an unknown state.
    pub poisoned: Option<String>,
}

impl Active {
    /// Creates a new empty segment file and makes its name durable.
    pub(crate) fn create(dir: &Path, seq: u64, lagging: bool) -> Result<Self, LogError> {
        let path = dir.join(raw_name(seq));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(LogError::io("creating", &path))?;
        sync_dir(dir)?;
        let len = file.metadata().map_err(LogError::io("stat", &path))?.len();
        if len != 0 {
            return Err(LogError::corrupt(
                &path,
                0,
                "a new segment's file already holds data",
            ));
        }
        Ok(Self::with_file(path, file, SegmentMeta::new(seq), lagging))
    }

    /// Continues an existing segment whose intact, fsynced content `meta` describes.
    pub(crate) fn resume(
        path: PathBuf,
        meta: SegmentMeta,
        lagging: bool,
    ) -> Result<Self, LogError> {
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(LogError::io("opening", &path))?;
        Ok(Self::with_file(path, file, meta, lagging))
    }

    fn with_file(path: PathBuf, file: File, meta: SegmentMeta, lagging: bool) -> Self {
        Active {
            path,
            file,
            durable: lagging.then(|| meta.clone()),
            meta,
            buf: Vec::with_capacity(64 << 10),
            key: String::new(),
            poisoned: None,
        }
    }

    /// What readers may see of this segment.
    pub(crate) fn durable(&self) -> &SegmentMeta {
        self.durable.as_ref().unwrap_or(&self.meta)
    }

    /// Bytes written plus bytes buffered.
    pub(crate) fn pending_len(&self) -> u64 {
        self.meta.raw_bytes + self.buf.len() as u64
    }

    pub(crate) fn has_unsynced(&self) -> bool {
        self.durable
            .as_ref()
            .is_some_and(|d| d.raw_bytes != self.meta.raw_bytes)
    }

    /// Encodes an entry into the write buffer.
    pub(crate) fn buffer(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        let mark = self.buf.len();
        frame::encode(&mut self.buf, entry.timestamp_ms, &entry.record).inspect_err(|_| {
            self.buf.truncate(mark);
        })?;
        Ok(())
    }

    /// Writes the buffer (holding exactly `batch`) in one write and counts the batch.
    pub(crate) fn write_buffered(&mut self, batch: &[LogEntry]) -> Result<(), LogError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let result = self.file.write_all(&self.buf);
        let written = self.buf.len() as u64;
        self.buf.clear();
        if let Err(source) = result {
            // Cut off whatever part of the batch got in, so the file ends on a frame boundary
            // and the next write continues it cleanly.
            if let Err(e) = self.file.set_len(self.meta.raw_bytes) {
                self.poisoned = Some(format!(
                    "writing {} failed ({source}) and cutting off the partial write failed too ({e})",
                    self.path.display()
                ));
            }
            return Err(LogError::Io {
                action: "appending to",
                path: self.path.clone(),
                source,
            });
        }
        self.meta.raw_bytes += written;
        for entry in batch {
            self.meta.count(entry, &mut self.key);
        }
        Ok(())
    }

    /// Fsyncs the file; everything written before is durable after.
    pub(crate) fn sync(&mut self) -> Result<(), LogError> {
        if let Err(source) = self.file.sync_data() {
            // After a failed fsync the kernel may have dropped the dirty pages and cleared the
            // error, so a retry could report success without the data: stop writing.
            self.poisoned = Some(format!("fsync of {} failed: {source}", self.path.display()));
            return Err(LogError::Io {
                action: "syncing",
                path: self.path.clone(),
                source,
            });
        }
        if let Some(durable) = &mut self.durable {
            durable.clone_from(&self.meta);
        }
        Ok(())
    }
}
