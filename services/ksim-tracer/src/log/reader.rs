//! Reading entries back out of a segment, raw or sealed, without loading it whole.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use ksim_proto::ksim::trace::v1 as pb;
use pb::trace_record::Record;
use prost::Message;

use super::frame::{Fault, FaultKind, FrameReader, HEADER_LEN};
use super::index::Pin;
use super::{LogEntry, LogError};

/// Buffer between the file (or decompressor) and the frame parser.
const READ_BUFFER: usize = 128 << 10;

/// Reads a shared file handle from a position of its own, so several readers (and the writer's
/// appends) can use one file without fighting over a shared offset.
#[derive(Debug)]
pub(crate) struct PosReader {
    file: Arc<File>,
    pos: u64,
}

impl PosReader {
    pub(crate) fn new(file: Arc<File>) -> Self {
        PosReader { file, pos: 0 }
    }
}

impl Read for PosReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Iterates the entries of one segment. After the first error it yields nothing more.
pub(crate) struct SegmentReader {
    path: PathBuf,
    frames: FrameReader<Box<dyn Read + Send>>,
    /// Length of the frame stream read and decoded without fault so far.
    intact: u64,
    done: bool,
    /// Read failures of a compressed stream are damage (zstd reports bad data as read errors);
    /// of a raw one they are plain I/O errors, which must not be mistaken for a torn tail.
    compressed: bool,
    /// Keeps a retired segment's file from being deleted while this reader may still open it.
    _pin: Option<Pin>,
}

impl std::fmt::Debug for SegmentReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentReader")
            .field("path", &self.path)
            .field("intact", &self.intact)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl SegmentReader {
    /// Reads a sealed (`.seg.zst`) segment, streaming it through the decompressor.
    pub(crate) fn sealed(path: PathBuf, pin: Option<Pin>) -> Result<Self, LogError> {
        let file = File::open(&path).map_err(LogError::io("opening", &path))?;
        let decoder = zstd::Decoder::new(file).map_err(LogError::io("decompressing", &path))?;
        Ok(Self::from_stream(
            path,
            Box::new(BufReader::with_capacity(READ_BUFFER, decoder)),
            true,
            pin,
        ))
    }

    /// Reads the first `len` bytes of a raw segment through a shared handle.
    pub(crate) fn raw(path: PathBuf, file: Arc<File>, len: u64) -> Self {
        let stream = BufReader::with_capacity(READ_BUFFER, PosReader::new(file).take(len));
        Self::from_stream(path, Box::new(stream), false, None)
    }

    fn from_stream(
        path: PathBuf,
        stream: Box<dyn Read + Send>,
        compressed: bool,
        pin: Option<Pin>,
    ) -> Self {
        SegmentReader {
            path,
            frames: FrameReader::new(stream),
            intact: 0,
            done: false,
            compressed,
            _pin: pin,
        }
    }

    /// Length of the frame stream read and decoded without fault so far.
    pub(crate) fn intact_len(&self) -> u64 {
        self.intact
    }
}

impl Iterator for SegmentReader {
    type Item = Result<LogEntry, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let result = match self.frames.next_frame() {
            Ok(None) => {
                self.done = true;
                return None;
            }
            Ok(Some(frame)) => decode_entry(frame.ts, frame.payload)
                .map(|entry| {
                    (
                        entry,
                        frame.offset + (HEADER_LEN + frame.payload.len()) as u64,
                    )
                })
                .map_err(|reason| LogError::corrupt(&self.path, frame.offset, reason.to_string())),
            Err(Fault {
                kind: FaultKind::Io(source),
                ..
            }) if !self.compressed => Err(LogError::Io {
                action: "reading",
                path: self.path.clone(),
                source,
            }),
            Err(fault) => Err(fault.into_error(&self.path)),
        };
        match result {
            Ok((entry, end)) => {
                self.intact = end;
                Some(Ok(entry))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Why a frame's payload is not a log entry: the reason a `LogError::Corrupt` gives.
#[derive(Debug, thiserror::Error)]
enum EntryProblem {
    #[error("undecodable record: {0}")]
    Undecodable(#[from] prost::DecodeError),
    #[error("unexpected header record")]
    Header,
    #[error("unexpected trailer record")]
    Trailer,
    #[error("empty record")]
    Empty,
}

/// Decodes a frame's payload as a log entry; a header, trailer or nothing is damage.
fn decode_entry(ts: i64, payload: &[u8]) -> Result<LogEntry, EntryProblem> {
    let record = pb::TraceRecord::decode(payload)?;
    match &record.record {
        Some(Record::Header(_)) => Err(EntryProblem::Header),
        Some(Record::Trailer(_)) => Err(EntryProblem::Trailer),
        None => Err(EntryProblem::Empty),
        Some(_) => Ok(LogEntry {
            timestamp_ms: ts,
            record,
        }),
    }
}
