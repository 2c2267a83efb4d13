//! The export's sorting on disk (the domain's [`Sorting`]): items are held in memory up to a run
//! length, then sorted and written to a temporary file as one run; reading back merges the runs.
//! Memory stays at one run per sorter however many items pass, so a window of any length
//! exports in the same memory; the disk holds the rest until the export ends.
//!
//! Runs are unnamed temporary files (`tempfile::tempfile_in`): the system removes them when they
//! are closed, and after a crash too.
//!
//! The crates.io external sorters take their input as one iterator; the export's scan feeds
//! several sorters from one pass over the log, hence this small one.

use std::{
    cmp::Ordering,
    collections::BinaryHeap,
    fmt,
    fs::File,
    io::{self, BufReader, BufWriter, Read, Seek, Write},
    marker::PhantomData,
    path::{Path, PathBuf},
    sync::Arc,
};

use thiserror::Error;

use crate::domain::export::sorting::{DecodeError, SortItem, Sorter, Sorting};

/// Items a sorter holds before it writes them out as a run. An exported pod lifetime with its
/// owner takes about 600 bytes in memory, so a full run of those is about 30 MiB.
pub const DEFAULT_RUN_LEN: usize = 50_000;

/// Runs merged at once: each open run costs a file and a read buffer.
const FAN_IN: usize = 32;

const BUFFER_BYTES: usize = 64 * 1024;

#[derive(Debug, Error)]
pub enum SpillError {
    #[error("creating a temporary file in {dir}: {source}")]
    Create { dir: PathBuf, source: io::Error },
    #[error("writing a temporary file: {0}")]
    Write(io::Error),
    #[error("reading a temporary file back: {0}")]
    Read(io::Error),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Sorters that spill to files in `dir`.
#[derive(Debug, Clone)]
pub struct Spill {
    dir: Arc<Path>,
    run_len: usize,
}

impl Spill {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into().into(),
            run_len: DEFAULT_RUN_LEN,
        }
    }

    /// Items per run (at least one); small values make tests spill.
    pub fn run_len(mut self, run_len: usize) -> Self {
        self.run_len = run_len.max(1);
        self
    }
}

impl Sorting for Spill {
    type Error = SpillError;
    type Sorter<T: SortItem> = SpillSorter<T>;

    fn sorter<T: SortItem>(&self) -> SpillSorter<T> {
        SpillSorter {
            spill: self.clone(),
            buffer: Vec::new(),
            runs: Vec::new(),
        }
    }
}

pub struct SpillSorter<T> {
    spill: Spill,
    buffer: Vec<T>,
    runs: Vec<Run<T>>,
}

impl<T> fmt::Debug for SpillSorter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillSorter")
            .field("buffered", &self.buffer.len())
            .field("runs", &self.runs.len())
            .finish()
    }
}

impl<T: SortItem> Sorter<T> for SpillSorter<T> {
    type Error = SpillError;
    type Sorted = Sorted<T>;

    fn push(&mut self, item: T) -> Result<(), SpillError> {
        self.buffer.push(item);
        if self.buffer.len() >= self.spill.run_len {
            self.sort_buffer();
            // Superseded items make room: fill on while that freed at least half the run.
            if self.buffer.len() > self.spill.run_len / 2 {
                self.write_buffer()?;
            }
        }
        Ok(())
    }

    fn sorted(mut self) -> Result<Sorted<T>, SpillError> {
        if self.runs.is_empty() {
            self.sort_buffer();
            return Ok(Sorted::InMemory(self.buffer.into_iter()));
        }
        if !self.buffer.is_empty() {
            self.write_buffer()?;
        }
        let mut runs = self.runs;
        // Merge in levels until one merge can read every run; each level keeps the runs in
        // order, so equal items still come out in the order they were pushed.
        while runs.len() > FAN_IN {
            let mut level = Vec::with_capacity(runs.len().div_ceil(FAN_IN));
            let mut rest = runs.into_iter();
            loop {
                let group: Vec<Run<T>> = rest.by_ref().take(FAN_IN).collect();
                if group.is_empty() {
                    break;
                }
                level.push(Run::write(&self.spill.dir, Merge::new(group)?)?);
            }
            runs = level;
        }
        Ok(Sorted::Merged(Merge::new(runs)?))
    }
}

impl<T: SortItem> SpillSorter<T> {
    /// Sorts the buffer and drops superseded items. Stable, so equal items keep their order;
    /// a buffer sorted before and filled on since sorts in about linear time.
    fn sort_buffer(&mut self) {
        self.buffer.sort();
        self.buffer.dedup_by(|later, earlier| {
            // The one kept is `earlier`'s place, with `later`'s value.
            let superseded = later.supersedes(earlier);
            if superseded {
                std::mem::swap(later, earlier);
            }
            superseded
        });
    }

    fn write_buffer(&mut self) -> Result<(), SpillError> {
        self.sort_buffer();
        let run = Run::write(&self.spill.dir, self.buffer.drain(..).map(Ok))?;
        self.runs.push(run);
        Ok(())
    }
}

/// Sorted items: straight from memory if they never filled a run, else merged from the runs.
#[derive(Debug)]
pub enum Sorted<T> {
    InMemory(std::vec::IntoIter<T>),
    Merged(Merge<T>),
}

impl<T: SortItem> Iterator for Sorted<T> {
    type Item = Result<T, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Sorted::InMemory(items) => items.next().map(Ok),
            Sorted::Merged(merge) => merge.next(),
        }
    }
}

/// A temporary file of sorted items, each written as its length (u32, little-endian) and its
/// bytes.
struct Run<T> {
    file: File,
    items: u64,
    item: PhantomData<T>,
}

impl<T: SortItem> Run<T> {
    fn write(
        dir: &Path,
        items: impl Iterator<Item = Result<T, SpillError>>,
    ) -> Result<Self, SpillError> {
        let file = tempfile::tempfile_in(dir).map_err(|source| SpillError::Create {
            dir: dir.to_owned(),
            source,
        })?;
        let mut writer = BufWriter::with_capacity(BUFFER_BYTES, file);
        let mut bytes = Vec::new();
        let mut count = 0;
        for item in items {
            bytes.clear();
            item?.encode(&mut bytes);
            let len = u32::try_from(bytes.len()).map_err(|_| {
                SpillError::Write(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an item is over 4 GiB",
                ))
            })?;
            writer
                .write_all(&len.to_le_bytes())
                .and_then(|()| writer.write_all(&bytes))
                .map_err(SpillError::Write)?;
            count += 1;
        }
        let mut file = writer
            .into_inner()
            .map_err(|error| SpillError::Write(error.into_error()))?;
        file.rewind().map_err(SpillError::Write)?;
        Ok(Self {
            file,
            items: count,
            item: PhantomData,
        })
    }

    fn reader(self) -> RunReader<T> {
        RunReader {
            reader: BufReader::with_capacity(BUFFER_BYTES, self.file),
            left: self.items,
            bytes: Vec::new(),
            item: PhantomData,
        }
    }
}

struct RunReader<T> {
    reader: BufReader<File>,
    /// Items not read yet: the run ends after them.
    left: u64,
    bytes: Vec<u8>,
    item: PhantomData<T>,
}

impl<T: SortItem> RunReader<T> {
    fn next(&mut self) -> Result<Option<T>, SpillError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let mut len = [0; 4];
        self.reader.read_exact(&mut len).map_err(SpillError::Read)?;
        self.bytes.resize(u32::from_le_bytes(len) as usize, 0);
        self.reader
            .read_exact(&mut self.bytes)
            .map_err(SpillError::Read)?;
        Ok(Some(T::decode(&self.bytes)?))
    }
}

/// Merges runs: the smallest head of any run next, the earlier run's on a tie.
pub struct Merge<T> {
    runs: Vec<RunReader<T>>,
    heads: BinaryHeap<Head<T>>,
}

impl<T> fmt::Debug for Merge<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Merge")
            .field("runs", &self.runs.len())
            .finish()
    }
}

impl<T: SortItem> Merge<T> {
    fn new(runs: Vec<Run<T>>) -> Result<Self, SpillError> {
        let mut runs: Vec<RunReader<T>> = runs.into_iter().map(Run::reader).collect();
        let mut heads = BinaryHeap::with_capacity(runs.len());
        for (run, reader) in runs.iter_mut().enumerate() {
            if let Some(item) = reader.next()? {
                heads.push(Head { item, run });
            }
        }
        Ok(Self { runs, heads })
    }
}

impl<T: SortItem> Iterator for Merge<T> {
    type Item = Result<T, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Head { item, run } = self.heads.pop()?;
        match self.runs[run].next() {
            Ok(Some(next)) => self.heads.push(Head { item: next, run }),
            Ok(None) => {}
            Err(error) => {
                // The run cannot go on, so neither can the merge.
                self.heads.clear();
                return Some(Err(error));
            }
        }
        Some(Ok(item))
    }
}

struct Head<T> {
    item: T,
    run: usize,
}

impl<T: Ord> Ord for Head<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap pops the greatest: reversed, it pops the smallest item, earliest run.
        (&other.item, other.run).cmp(&(&self.item, self.run))
    }
}

impl<T: Ord> PartialOrd for Head<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Ord> PartialEq for Head<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T: Ord> Eq for Head<T> {}

#[cfg(test)]
mod tests;
