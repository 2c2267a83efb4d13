//! The log's error type.

use std::io;
use std::path::PathBuf;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, for example "writing".
        action: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },

    /// Bytes on disk are damaged. `offset` is the byte offset of the bad frame in the file's frame
    /// stream (for a compressed file, in its decompressed content).
    #[error("corrupt log file {} at offset {offset}: {reason}", file.display())]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Where in the (decompressed) frame stream the damage starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// An entry handed to `append` cannot be stored.
    #[error("invalid log record: {0}")]
    InvalidRecord(String),

    /// The configuration cannot work.
    #[error("invalid log configuration: {0}")]
    InvalidConfig(String),

    /// Another process (or another `Log` in this one) has the directory open for writing.
    #[error("log directory {} is already in use by another writer", dir.display())]
    Locked {
        /// The log directory.
        dir: PathBuf,
    },

    /// An earlier write or fsync failed in a way that leaves the file's state unknown, so the
    /// writer refuses further writes; reopening the log recovers from what is on disk.
    #[error("log writer is unusable after an earlier failure: {0}")]
    Poisoned(String),
}

impl LogError {
    /// Wraps an I/O error with what was being done to which path.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| LogError::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        LogError::Corrupt {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}
