//! The compressed input as the reader sees it: bytes counted, and errors of the caller's reader
//! marked so they are not mistaken for zstd's own (both arrive as `io::Error`).

use std::error::Error;
use std::fmt;
use std::io::{self, Read};

use crate::TraceError;

/// The magic number that starts every zstd frame.
pub(crate) const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The caller's reader, counting what it yields and marking what it fails with.
#[derive(Debug)]
pub(crate) struct Source<R> {
    inner: R,
    bytes: u64,
}

impl<R: Read> Source<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self { inner, bytes: 0 }
    }

    /// Bytes read from the caller's reader so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Reads up to `max` bytes, fewer only at the end of the input.
    pub(crate) fn read_prefix(&mut self, max: usize) -> io::Result<Vec<u8>> {
        let mut prefix = Vec::with_capacity(max);
        (&mut *self).take(max as u64).read_to_end(&mut prefix)?;
        Ok(prefix)
    }
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.bytes += n as u64;
                Ok(n)
            }
            // The kind is kept so callers still retry Interrupted.
            Err(error) => Err(io::Error::new(error.kind(), SourceError(error))),
        }
    }
}

/// An error of the caller's reader, passed through the decompressor.
#[derive(Debug)]
struct SourceError(io::Error);

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for SourceError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

/// Turns an error met while reading the decompressed stream at `offset` into the trace error
/// it stands for: the caller's reader failing is I/O, zstd running out of input is truncation,
/// anything else zstd reports is corruption.
pub(crate) fn classify(error: io::Error, offset: u64) -> TraceError {
    if error
        .get_ref()
        .is_some_and(|inner| inner.is::<SourceError>())
    {
        let kind = error.kind();
        return match error
            .into_inner()
            .map(|inner| inner.downcast::<SourceError>())
        {
            Some(Ok(source)) => TraceError::Io(source.0),
            // Unreachable after the check above; keep the kind rather than panic.
            _ => TraceError::Io(io::Error::from(kind)),
        };
    }
    match error.kind() {
        io::ErrorKind::UnexpectedEof => TraceError::Truncated { offset },
        _ => TraceError::corrupt(offset, format!("zstd cannot decompress the data: {error}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::{self, Read};

    use super::{Source, classify};
    use crate::TraceError;

    struct Failing;

    impl Read for Failing {
        fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "disk says no",
            ))
        }
    }

    #[test]
    fn errors_of_the_callers_reader_stay_io_errors() {
        let error = Source::new(Failing).read(&mut [0; 4]).unwrap_err();
        match classify(error, 9) {
            TraceError::Io(inner) => {
                assert_eq!(inner.kind(), io::ErrorKind::PermissionDenied);
                assert_eq!(inner.to_string(), "disk says no");
            }
            other => panic!("expected Io, got {other}"),
        }
    }

    #[test]
    fn zstd_errors_become_truncation_or_corruption() {
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "incomplete frame");
        assert!(matches!(
            classify(eof, 5),
            TraceError::Truncated { offset: 5 }
        ));
        let other = io::Error::other("Data corruption detected");
        match classify(other, 6) {
            TraceError::Corrupt { offset, reason } => {
                assert_eq!(offset, 6);
                assert!(reason.contains("Data corruption detected"), "{reason}");
            }
            other => panic!("expected Corrupt, got {other}"),
        }
    }

    #[test]
    fn counts_bytes_and_reads_a_prefix() {
        let mut source = Source::new(&b"abcdefghij"[..]);
        assert_eq!(source.read_prefix(4).unwrap(), b"abcd");
        assert_eq!(source.bytes_read(), 4);
        let mut short = Source::new(&b"ab"[..]);
        assert_eq!(short.read_prefix(8).unwrap(), b"ab");
    }
}
