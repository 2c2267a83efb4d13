//! The one error type of the crate.

use std::fmt::Write as _;

/// Everything that can go wrong writing, reading or converting a trace. Reading errors say what
/// is wrong and at which byte of the decompressed record stream.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The input is not a ksim trace at all (it is not zstd-compressed).
    #[error("not a ksim trace: {}", describe_prefix(first_bytes))]
    NotATrace {
        /// Up to the first 8 bytes of the input.
        first_bytes: Vec<u8>,
    },

    /// The header names a format version this build does not read.
    #[error("unsupported ksim trace format version {found}: this build reads version {supported}")]
    UnsupportedVersion { found: u32, supported: u32 },

    /// The data ends before the trailer: the file was cut short (or its writer never finished).
    #[error(
        "truncated ksim trace: the data ends at byte {offset} of the record stream, before the trailer"
    )]
    Truncated {
        /// Position in the decompressed record stream where the data ended.
        offset: u64,
    },

    /// The data is damaged or breaks a rule of the format.
    #[error("corrupt ksim trace at byte {offset} of the record stream: {reason}")]
    Corrupt {
        /// Position in the decompressed record stream of the offending record (or byte).
        offset: u64,
        reason: String,
    },

    /// A record given to the writer breaks a rule of the format; nothing was written for it.
    #[error("refusing to write an invalid trace record: {reason}")]
    InvalidRecord { reason: String },

    /// A kind name that is not `group/version.Kind` or `version.Kind`.
    #[error("invalid kind name {text:?}: {reason}")]
    InvalidGvk { text: String, reason: &'static str },

    /// An I/O error of the underlying reader or writer.
    #[error("trace I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// The SimKube input cannot be converted.
    #[error("invalid SimKube trace: {reason}")]
    Simkube { reason: String },

    /// The SimKube input has a format version other than 2.
    #[error("unsupported SimKube trace version {found}: only version 2 can be converted")]
    SimkubeVersion { found: i64 },
}

impl TraceError {
    pub(crate) fn corrupt(offset: u64, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            offset,
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Self::InvalidRecord {
            reason: reason.into(),
        }
    }

    pub(crate) fn simkube(reason: impl Into<String>) -> Self {
        Self::Simkube {
            reason: reason.into(),
        }
    }
}

fn describe_prefix(first_bytes: &[u8]) -> String {
    if first_bytes.is_empty() {
        return "the file is empty".to_owned();
    }
    let mut text = "the file does not start with a zstd frame (first bytes".to_owned();
    for byte in first_bytes {
        // Writing to a String cannot fail.
        let _ = write!(text, " {byte:02x}");
    }
    text.push(')');
    text
}

#[cfg(test)]
mod tests {
    use super::TraceError;

    #[test]
    fn not_a_trace_lists_the_first_bytes_in_hex() {
        let error = TraceError::NotATrace {
            first_bytes: b"{\"a".to_vec(),
        };
        assert_eq!(
            error.to_string(),
            "not a ksim trace: the file does not start with a zstd frame (first bytes 7b 22 61)"
        );
        let empty = TraceError::NotATrace {
            first_bytes: Vec::new(),
        };
        assert_eq!(empty.to_string(), "not a ksim trace: the file is empty");
    }

    #[test]
    fn every_message_is_one_line() {
        let errors = [
            TraceError::UnsupportedVersion {
                found: 2,
                supported: 1,
            },
            TraceError::Truncated { offset: 7 },
            TraceError::corrupt(3, "bad"),
            TraceError::invalid("bad"),
            TraceError::simkube("bad"),
            TraceError::SimkubeVersion { found: 3 },
            TraceError::InvalidGvk {
                text: "x".to_owned(),
                reason: "bad",
            },
        ];
        for error in errors {
            let text = error.to_string();
            assert!(!text.contains('\n'), "{text}");
            assert!(!text.is_empty());
        }
    }
}
