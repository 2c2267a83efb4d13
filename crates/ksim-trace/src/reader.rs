//! Reading a trace file record by record, checking the format's rules as it goes.

use std::fmt;
use std::io::{BufRead, BufReader, Chain, Cursor, Read};

use zstd::stream::read::Decoder;

use crate::framing::{Frame, RecordStream};
use crate::source::{Source, ZSTD_MAGIC, classify};
use crate::validate::{RecordProblem, Totals, check_header};
use crate::{FORMAT_VERSION, TraceError, pb};

use pb::trace_record::Record as Oneof;

/// A record after the header: what a reader yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Event(pb::TraceEvent),
    Lifecycle(pb::PodLifecycle),
    /// The recorded cluster's state; never replayed, compared with the simulation.
    Sample(pb::ClusterSample),
    /// A recorded node's state or deletion; never replayed.
    Node(pb::RecordedNode),
    /// What a recorded pod used at one time.
    Usage(pb::UsageSample),
}

/// How many leading bytes [`TraceError::NotATrace`] shows.
const SHOWN_PREFIX_BYTES: usize = 8;

/// The compressed input: the bytes sniffed for the magic number, then the rest.
type Compressed<R> = BufReader<Chain<Cursor<Vec<u8>>, Source<R>>>;
type Decompressed<R> = BufReader<Decoder<'static, Compressed<R>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    /// A valid trailer was read; nothing follows.
    Finished,
    /// An error was returned; the position in the stream is no longer meaningful.
    Failed,
}

/// Reads a trace file. [`TraceReader::new`] reads and checks the header; each
/// [`TraceReader::next_record`] yields one event, lifecycle, sample, node or usage sample, and `Ok(None)` only once a
/// trailer whose totals match has closed the file with nothing after it.
pub struct TraceReader<R: Read> {
    stream: RecordStream<Decompressed<R>>,
    header: pb::TraceHeader,
    totals: Totals,
    trailer: Option<pb::TraceTrailer>,
    state: State,
}

impl<R: Read> TraceReader<R> {
    /// Starts reading `input`, a whole trace file; reads its header and refuses a file that is
    /// not a ksim trace, has a format version other than [`FORMAT_VERSION`] or a time outside
    /// 1970 to the end of 9999 (so does every record after it).
    pub fn new(input: R) -> Result<Self, TraceError> {
        let mut source = Source::new(input);
        let prefix = source
            .read_prefix(SHOWN_PREFIX_BYTES)
            .map_err(|error| classify(error, 0))?;
        if !prefix.starts_with(&ZSTD_MAGIC) {
            // A few bytes of the magic and then nothing is a file cut short, not another format.
            if !prefix.is_empty() && ZSTD_MAGIC.starts_with(&prefix) {
                return Err(TraceError::Truncated { offset: 0 });
            }
            return Err(TraceError::NotATrace {
                first_bytes: prefix,
            });
        }
        let compressed = BufReader::new(Cursor::new(prefix).chain(source));
        // One frame: anything after it is reported, rather than decoded as another frame.
        let decoder = Decoder::with_buffer(compressed)?.single_frame();
        let mut stream = RecordStream::new(BufReader::new(decoder));

        let Some(Frame { offset, record }) = stream.next_frame()? else {
            return Err(TraceError::Truncated {
                offset: stream.offset(),
            });
        };
        let header = match record {
            Oneof::Header(header) => header,
            other => {
                return Err(TraceError::corrupt(
                    offset,
                    format!("the first record is {}, not the header", describe(&other)),
                ));
            }
        };
        if header.format_version != FORMAT_VERSION {
            return Err(TraceError::UnsupportedVersion {
                found: header.format_version,
                supported: FORMAT_VERSION,
            });
        }
        check_header(&header)
            .map_err(|problem| TraceError::corrupt(offset, problem.to_string()))?;
        Ok(Self {
            stream,
            header,
            totals: Totals::default(),
            trailer: None,
            state: State::Reading,
        })
    }

    /// Accepts events older than the event before them instead of reporting the file as
    /// corrupt: for tools that find and repair such files (`ksim trace validate`). Every other
    /// rule is still checked.
    pub fn unordered(mut self) -> Self {
        self.totals.unordered = true;
        self
    }

    pub fn header(&self) -> &pb::TraceHeader {
        &self.header
    }

    /// The next record; `Ok(None)` once the file has ended properly. After an
    /// error every further call fails too.
    pub fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        match self.state {
            State::Reading => {}
            State::Finished => return Ok(None),
            State::Failed => {
                return Err(TraceError::corrupt(
                    self.stream.offset(),
                    "reading stopped at an earlier error",
                ));
            }
        }
        let result = self.read_record();
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    /// The trailer, once [`TraceReader::next_record`] has returned `Ok(None)`.
    pub fn trailer(&self) -> Option<&pb::TraceTrailer> {
        self.trailer.as_ref()
    }

    /// Bytes of the decompressed record stream read so far.
    pub fn uncompressed_bytes(&self) -> u64 {
        self.stream.offset()
    }

    /// Bytes of the file read so far (the decompressor reads ahead, so at most a buffer more
    /// than the records returned need; at the end, the file's size).
    pub fn compressed_bytes(&self) -> u64 {
        self.stream
            .get_ref()
            .get_ref()
            .get_ref()
            .get_ref()
            .get_ref()
            .1
            .bytes_read()
    }

    fn read_record(&mut self) -> Result<Option<Record>, TraceError> {
        let Some(Frame { offset, record }) = self.stream.next_frame()? else {
            return Err(TraceError::Truncated {
                offset: self.stream.offset(),
            });
        };
        let corrupt = |reason: RecordProblem| TraceError::corrupt(offset, reason.to_string());
        match record {
            Oneof::Event(event) => {
                self.totals.check_event(&event).map_err(corrupt)?;
                self.totals.count_event(&event);
                Ok(Some(Record::Event(event)))
            }
            Oneof::Lifecycle(lifecycle) => {
                self.totals.check_lifecycle(&lifecycle).map_err(corrupt)?;
                self.totals.count_lifecycle();
                Ok(Some(Record::Lifecycle(lifecycle)))
            }
            Oneof::Sample(sample) => {
                self.totals.check_sample(&sample).map_err(corrupt)?;
                self.totals.count_sample(&sample);
                Ok(Some(Record::Sample(sample)))
            }
            Oneof::Node(node) => {
                self.totals.check_node(&node).map_err(corrupt)?;
                self.totals.count_node();
                Ok(Some(Record::Node(node)))
            }
            Oneof::Usage(usage) => {
                self.totals.check_usage(&usage).map_err(corrupt)?;
                self.totals.count_usage();
                Ok(Some(Record::Usage(usage)))
            }
            Oneof::Trailer(trailer) => {
                self.totals.check_trailer(&trailer).map_err(corrupt)?;
                self.check_end()?;
                self.trailer = Some(trailer);
                self.state = State::Finished;
                Ok(None)
            }
            Oneof::Header(_) => Err(TraceError::corrupt(offset, "a second header")),
        }
    }

    /// Nothing may follow the trailer: neither records in the frame nor bytes after it.
    fn check_end(&mut self) -> Result<(), TraceError> {
        let offset = self.stream.offset();
        // Reading on also makes zstd finish the frame, which verifies its checksum.
        if !self.stream.at_end()? {
            return Err(TraceError::corrupt(offset, "data after the trailer"));
        }
        let compressed = self.stream.get_mut().get_mut().get_mut();
        let after_frame = loop {
            match compressed.fill_buf() {
                Ok(rest) => break rest.len(),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(classify(error, offset)),
            }
        };
        if after_frame > 0 {
            return Err(TraceError::corrupt(
                offset,
                "data after the end of the zstd frame that holds the trace",
            ));
        }
        Ok(())
    }
}

impl<R: Read> fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("offset", &self.stream.offset())
            .field("totals", &self.totals)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// "an event", "a lifecycle", ... for error messages.
fn describe(record: &Oneof) -> &'static str {
    match record {
        Oneof::Header(_) => "a header",
        Oneof::Event(_) => "an event",
        Oneof::Lifecycle(_) => "a lifecycle",
        Oneof::Trailer(_) => "a trailer",
        Oneof::Sample(_) => "a cluster sample",
        Oneof::Node(_) => "a recorded node",
        Oneof::Usage(_) => "a usage sample",
    }
}
