//! Opening a trace file of either format for the tools that read it more than once (`validate`,
//! `show`): a ksim file is read from disk each time, a SimKube file is converted once, in memory.

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::TraceReader;

#[derive(Debug)]
pub enum TraceInput {
    Ksim(PathBuf),
    /// A SimKube trace, converted to a ksim trace; the events the conversion put in order.
    Converted(PathBuf, Vec<u8>, u64),
}

impl TraceInput {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let mut prefix = Vec::new();
        std::fs::File::open(path)
            .with_context(|| format!("opening {}", path.display()))?
            .take(16)
            .read_to_end(&mut prefix)
            .with_context(|| format!("reading {}", path.display()))?;
        if ksim_trace::detect_format(&prefix) == Some(pb::TraceFormat::SimkubeV2) {
            let bytes = crate::files::read_bounded(
                path,
                crate::files::MAX_WHOLE_TRACE_BYTES,
                "a SimKube trace",
            )?;
            let (converted, conversion) = ksim_trace::simkube::convert(&bytes, Vec::new(), "ksim")
                .with_context(|| format!("{} is not a valid SimKube trace", path.display()))?;
            return Ok(Self::Converted(
                path.to_owned(),
                converted,
                conversion.reordered_events,
            ));
        }
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
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
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
