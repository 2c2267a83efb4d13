//! The frame: how one record is laid out in a segment or checkpoint.
//!
//! `[u32 LE payload length][u32 LE crc32 of (timestamp bytes + payload)][i64 LE timestamp_ms]`
//! followed by the payload. The checksum covers the timestamp too, so a torn or flipped timestamp
//! is caught like a damaged payload.

use std::fmt;
use std::io::{self, Read};

use prost::Message;

use super::LogError;

/// Bytes before the payload.
pub(crate) const HEADER_LEN: usize = 16;

/// Largest payload the log stores. A length above it in a header can only be damage, and the cap
/// keeps a damaged length from making a reader allocate gigabytes.
pub const MAX_PAYLOAD_BYTES: usize = 64 << 20;

/// Payloads up to this size are read into a pre-sized buffer; larger ones grow as bytes arrive,
/// so a damaged (but plausible) length costs no more memory than the file holds.
const PRESIZE_LIMIT: usize = 1 << 20;

/// Appends one frame holding `msg` to `buf`; returns the frame's length.
pub(crate) fn encode(buf: &mut Vec<u8>, ts: i64, msg: &impl Message) -> Result<usize, LogError> {
    let len = msg.encoded_len();
    let len32 = u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_PAYLOAD_BYTES)
        .ok_or_else(|| {
            LogError::InvalidRecord(format!(
                "record of {len} bytes is larger than the limit of {MAX_PAYLOAD_BYTES} bytes"
            ))
        })?;
    let start = buf.len();
    buf.reserve(HEADER_LEN + len);
    buf.extend_from_slice(&len32.to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&ts.to_le_bytes());
    // A Vec grows as needed, so encoding into it cannot run out of room.
    msg.encode(buf)
        .map_err(|e| LogError::InvalidRecord(format!("cannot encode record: {e}")))?;
    let crc = crc32fast::hash(&buf[start + 8..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(buf.len() - start)
}

/// One intact frame read from a stream.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    /// Offset of the frame's first byte in the stream.
    pub offset: u64,
    pub ts: i64,
    pub payload: &'a [u8],
}

/// Why the frame at `offset` could not be read.
#[derive(Debug)]
pub(crate) struct Fault {
    pub offset: u64,
    pub kind: FaultKind,
}

#[derive(Debug)]
pub(crate) enum FaultKind {
    /// The stream ends inside the frame (a torn write, or a cut-short file).
    Truncated { have: u64, need: u64 },
    /// The header's length is above the cap.
    BadLength(u32),
    /// The checksum does not match.
    BadChecksum { stored: u32, computed: u32 },
    /// Reading failed (for compressed files this includes damaged compressed data).
    Io(io::Error),
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::Truncated { have, need } => {
                write!(f, "frame cut short: {have} of {need} bytes present")
            }
            FaultKind::BadLength(len) => write!(f, "impossible frame length {len}"),
            FaultKind::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            FaultKind::Io(e) => write!(f, "read failed: {e}"),
        }
    }
}

impl Fault {
    pub(crate) fn into_error(self, file: impl Into<std::path::PathBuf>) -> LogError {
        LogError::corrupt(file, self.offset, self.kind.to_string())
    }
}

/// Reads frames one after another from a byte stream.
#[derive(Debug)]
pub(crate) struct FrameReader<R> {
    inner: R,
    /// Offset of the next frame.
    offset: u64,
    payload: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        FrameReader {
            inner,
            offset: 0,
            payload: Vec::new(),
        }
    }

    /// The next frame, `None` at a clean end of stream (between frames).
    pub(crate) fn next_frame(&mut self) -> Result<Option<Frame<'_>>, Fault> {
        let offset = self.offset;
        let fault = |kind| Fault { offset, kind };
        let mut header = [0u8; HEADER_LEN];
        let got = read_full(&mut self.inner, &mut header).map_err(|e| fault(FaultKind::Io(e)))?;
        if got == 0 {
            return Ok(None);
        }
        if got < HEADER_LEN {
            return Err(fault(FaultKind::Truncated {
                have: got as u64,
                need: HEADER_LEN as u64,
            }));
        }
        let [
            l0,
            l1,
            l2,
            l3,
            c0,
            c1,
            c2,
            c3,
            t0,
            t1,
            t2,
            t3,
            t4,
            t5,
            t6,
            t7,
        ] = header;
        let len = u32::from_le_bytes([l0, l1, l2, l3]);
        let stored = u32::from_le_bytes([c0, c1, c2, c3]);
        let ts = i64::from_le_bytes([t0, t1, t2, t3, t4, t5, t6, t7]);
        let len_usize = len as usize;
        if len_usize > MAX_PAYLOAD_BYTES {
            return Err(fault(FaultKind::BadLength(len)));
        }
        self.payload.clear();
        let got = if len_usize <= PRESIZE_LIMIT {
            self.payload.resize(len_usize, 0);
            read_full(&mut self.inner, &mut self.payload)
        } else {
            (&mut self.inner)
                .take(u64::from(len))
                .read_to_end(&mut self.payload)
        }
        .map_err(|e| fault(FaultKind::Io(e)))?;
        if got < len_usize {
            return Err(fault(FaultKind::Truncated {
                have: (HEADER_LEN + got) as u64,
                need: (HEADER_LEN + len_usize) as u64,
            }));
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&header[8..]);
        hasher.update(&self.payload);
        let computed = hasher.finalize();
        if computed != stored {
            return Err(fault(FaultKind::BadChecksum { stored, computed }));
        }
        self.offset += (HEADER_LEN + len_usize) as u64;
        Ok(Some(Frame {
            offset,
            ts,
            payload: &self.payload,
        }))
    }
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use ksim_proto::ksim::trace::v1 as pb;

    fn lifecycle(name: &str) -> pb::TraceRecord {
        pb::TraceRecord {
            record: Some(pb::trace_record::Record::Lifecycle(pb::PodLifecycle {
                pod_name: name.into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn frames_round_trip_and_report_damage() {
        let mut buf = Vec::new();
        let a = encode(&mut buf, 5, &lifecycle("a")).unwrap();
        encode(&mut buf, -7, &lifecycle("bb")).unwrap();

        let mut r = FrameReader::new(&buf[..]);
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!((f.offset, f.ts), (0, 5));
        assert_eq!(pb::TraceRecord::decode(f.payload).unwrap(), lifecycle("a"));
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!((f.offset, f.ts), (a as u64, -7));
        assert!(r.next_frame().unwrap().is_none());

        // A flipped timestamp bit is caught by the checksum.
        let mut bad = buf.clone();
        bad[a + 9] ^= 1;
        let mut r = FrameReader::new(&bad[..]);
        r.next_frame().unwrap();
        let fault = r.next_frame().unwrap_err();
        assert_eq!(fault.offset, a as u64);
        assert!(matches!(fault.kind, FaultKind::BadChecksum { .. }));

        // A cut inside the second frame is reported as truncation at its start.
        let mut r = FrameReader::new(&buf[..buf.len() - 1]);
        r.next_frame().unwrap();
        let fault = r.next_frame().unwrap_err();
        assert!(matches!(fault.kind, FaultKind::Truncated { .. }));

        // A huge length is refused before anything is allocated for it.
        let mut huge = buf[..a].to_vec();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let fault = FrameReader::new(&huge[..]).next_frame().unwrap_err();
        assert!(matches!(fault.kind, FaultKind::BadLength(u32::MAX)));
    }
}
