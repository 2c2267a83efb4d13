//! Opening a trace file of either format, once: the format is told from the first bytes of the
//! handle that goes on being read, so a FIFO or a pipe works ([`Opened`]). [`TraceInput`] is for
//! the tools that read a trace more than once (`validate`, `show`): a ksim file is read from
//! disk each time, a SimKube file is converted once, in memory.

use std::fs::File;
use std::io::{BufReader, Chain, Cursor, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;
use ksim_grpc::files::FileError;
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::TraceReader;

/// How the errors name a SimKube trace that is over its limit.
const SIMKUBE: &str = "a SimKube trace (converted in memory)";

/// A trace file opened once, its first bytes read to tell its format.
#[derive(Debug)]
pub struct Opened {
    path: PathBuf,
    prefix: Vec<u8>,
    file: File,
}

impl Opened {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut prefix = Vec::new();
        (&file)
            .take(16)
            .read_to_end(&mut prefix)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            prefix,
            file,
        })
    }

    pub fn is_simkube(&self) -> bool {
        ksim_trace::detect_format(&self.prefix) == Some(pb::TraceFormat::SimkubeV2)
    }

    /// Whether the path is a regular file, which can be opened again for a second reading.
    fn is_regular(&self) -> bool {
        self.file
            .metadata()
            .is_ok_and(|metadata| metadata.is_file())
    }

    /// The whole file, at most [`ksim_trace::simkube::MAX_INPUT_BYTES`], which keeps the
    /// conversion's memory bounded; the error names the limit.
    pub fn read_whole(self) -> anyhow::Result<Vec<u8>> {
        let limit = ksim_trace::simkube::MAX_INPUT_BYTES;
        let too_large = |size| FileError::TooLarge {
            what: SIMKUBE,
            path: self.path.clone(),
            size,
            limit,
        };
        // A regular file says its size: refused before the rest is read.
        let size = self
            .file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        if size.is_some_and(|size| size > limit as u64) {
            return Err(too_large(size).into());
        }
        let mut bytes = self.prefix.clone();
        let rest = (limit + 1).saturating_sub(bytes.len()) as u64;
        (&self.file)
            .take(rest)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", self.path.display()))?;
        if bytes.len() > limit {
            return Err(too_large(None).into());
        }
        Ok(bytes)
    }

    /// The whole file as a stream, the bytes already read first.
    pub fn into_reader(self) -> BufReader<Chain<Cursor<Vec<u8>>, File>> {
        BufReader::new(Cursor::new(self.prefix).chain(self.file))
    }
}

#[derive(Debug)]
pub enum TraceInput {
    Ksim(PathBuf),
    /// A SimKube trace, converted to a ksim trace; the events the conversion put in order.
    Converted(PathBuf, Vec<u8>, u64),
}

impl TraceInput {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let opened = Opened::open(path)?;
        if opened.is_simkube() {
            let bytes = opened.read_whole()?;
            let (converted, conversion) = ksim_trace::simkube::convert(&bytes, Vec::new(), "ksim")
                .with_context(|| format!("{} is not a valid SimKube trace", path.display()))?;
            return Ok(Self::Converted(
                path.to_owned(),
                converted,
                conversion.reordered_events,
            ));
        }
        // Read again for each pass: a FIFO or a pipe would be empty the second time.
        anyhow::ensure!(
            opened.is_regular(),
            "{}: not a regular file; a ksim trace is read more than once here, so it must be a file",
            path.display()
        );
        Ok(Self::Ksim(path.to_owned()))
    }

    pub fn path(&self) -> &Path {
        match self {
            Self::Ksim(path) | Self::Converted(path, _, _) => path,
        }
    }

    /// A reader from the first record, accepting events out of order (the rules report them).
    pub fn reader(&self) -> anyhow::Result<TraceReader<Box<dyn Read + '_>>> {
        let input: Box<dyn Read + '_> = match self {
            Self::Ksim(path) => Box::new(BufReader::new(
                File::open(path).with_context(|| format!("opening {}", path.display()))?,
            )),
            Self::Converted(_, bytes, _) => Box::new(bytes.as_slice()),
        };
        let reader = TraceReader::new(input).with_context(|| self.invalid())?;
        Ok(reader.unordered())
    }

    /// SimKube events older than an event before them: the conversion sorts them, so the
    /// records never show them.
    pub fn reordered_events(&self) -> u64 {
        match self {
            Self::Ksim(_) => 0,
            Self::Converted(_, _, reordered) => *reordered,
        }
    }

    /// "FILE is not a valid trace", the context of every read error.
    pub fn invalid(&self) -> String {
        format!("{} is not a valid trace", self.path().display())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A SimKube trace with no events: a map of `version: 2` and `events: []`.
    const EMPTY_SIMKUBE: &[u8] = b"\x82\xa7version\x02\xa6events\x90";

    fn ksim_trace_bytes() -> Vec<u8> {
        let header = pb::TraceHeader {
            format_version: ksim_trace::FORMAT_VERSION,
            ..Default::default()
        };
        let mut writer = ksim_trace::TraceWriter::new(Vec::new(), &header).unwrap();
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: 1_000,
                ..Default::default()
            })
            .unwrap();
        writer.finish().unwrap().0
    }

    /// `verb` run on a FIFO that a writer thread fills with `bytes`. The timeout only turns a
    /// hang (a second open of the FIFO waits for a writer that never comes) into a failure.
    fn through_fifo<T: Send + 'static>(
        bytes: Vec<u8>,
        verb: impl FnOnce(&Path) -> T + Send + 'static,
    ) -> T {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("trace.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo {}", fifo.display());
        let writer_path = fifo.clone();
        // Not joined: once the reader is gone its writes fail, which is all it needs to end.
        std::thread::spawn(move || {
            if let Ok(mut file) = std::fs::OpenOptions::new().write(true).open(writer_path) {
                let _ = file.write_all(&bytes);
            }
        });
        let (done, result) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(verb(&fifo));
        });
        let outcome = result
            .recv_timeout(Duration::from_secs(120))
            .expect("the verb hung on a FIFO");
        drop(dir);
        outcome
    }

    #[test]
    fn a_fifo_is_read_once_and_a_second_reading_is_refused() {
        let ksim = ksim_trace_bytes();
        let expected = ksim_trace::inspect::inspect(ksim.as_slice()).unwrap();
        let inspected = through_fifo(ksim.clone(), |path| {
            super::super::inspect::inspect_file(path).map_err(|e| format!("{e:#}"))
        })
        .unwrap();
        assert_eq!(inspected.events, expected.events);
        assert_eq!(inspected.header.created_by, expected.header.created_by);

        let simkube = through_fifo(EMPTY_SIMKUBE.to_vec(), |path| {
            super::super::inspect::inspect_file(path).map_err(|e| format!("{e:#}"))
        })
        .unwrap();
        assert_eq!(simkube.header.origin, ksim_trace::simkube::ORIGIN);

        let rules = ksim_transform::Rules::parse("rules: []").unwrap();
        let (transformed, _) = through_fifo(ksim.clone(), move |path| {
            super::super::transform::transform_to(path, Vec::new(), &rules)
                .map_err(|e| format!("{e:#}"))
        })
        .unwrap();
        let after = ksim_trace::inspect::inspect(transformed.as_slice()).unwrap();
        assert_eq!(after.events, expected.events);

        // validate and show read a ksim trace twice: refused, in one line, not hung.
        let error = through_fifo(ksim, |path| {
            TraceInput::open(path)
                .map(|_| ())
                .map_err(|e| format!("{e:#}"))
        })
        .unwrap_err();
        assert!(
            error.ends_with(
                "not a regular file; a ksim trace is read more than once here, so it must be a file"
            ),
            "{error}"
        );
        assert!(!error.contains('\n'), "{error}");
        // A SimKube trace is read once, whole, so a FIFO is fine.
        let converted = through_fifo(EMPTY_SIMKUBE.to_vec(), |path| {
            TraceInput::open(path).map_err(|e| format!("{e:#}"))
        })
        .unwrap();
        assert!(matches!(converted, TraceInput::Converted(..)));
    }

    #[test]
    fn a_simkube_trace_over_its_limit_is_refused_naming_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.sktrace");
        let file = File::create(&path).unwrap();
        (&file).write_all(EMPTY_SIMKUBE).unwrap();
        // Sparse: refused by its size, before a byte past the format's is read.
        let size = ksim_trace::simkube::MAX_INPUT_BYTES as u64 + 1;
        file.set_len(size).unwrap();
        let error = format!(
            "{:#}",
            super::super::inspect::inspect_file(&path).unwrap_err()
        );
        assert_eq!(
            error,
            format!(
                "{}: {size} bytes is over the {} limit for a SimKube trace (converted in memory)",
                path.display(),
                ksim_grpc::files::describe_bytes(ksim_trace::simkube::MAX_INPUT_BYTES)
            )
        );
    }
}
