//! Imported traces: uploaded files, validated whole before they are kept, stored as ksim
//! trace files under an id derived from their content (importing the same trace twice gives
//! the same id).

use std::{
    fs::{self, File},
    io::{BufReader, Read, Write},
    path::{Path, PathBuf},
};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::{TraceError, detect_format, inspect::Inspection};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use xxhash_rust::xxh3::Xxh3;

#[derive(Debug, Error)]
pub enum ImportError {
    #[error("the trace is larger than the {limit}-byte import limit")]
    TooLarge { limit: u64 },
    #[error("the upload is empty")]
    Empty,
    #[error("the file is neither a ksim trace nor a SimKube trace (it starts with bytes {0})")]
    UnknownFormat(String),
    #[error("the file is not a valid {format} trace: {source}")]
    Invalid {
        format: &'static str,
        source: TraceError,
    },
    #[error("trace id {0:?} is not a trace id (32 lowercase hex digits)")]
    BadId(String),
    #[error("no imported trace has id {0}")]
    NotFound(String),
    #[error("storing the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("the metadata of imported trace {id} is unreadable: {source}")]
    Meta {
        id: String,
        source: serde_json::Error,
    },
}

/// What is kept beside an imported trace.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub display_name: String,
    pub source_format: String,
    pub events: u64,
    pub objects: u64,
    pub lifecycles: u64,
    pub first_event_ms: Option<i64>,
    pub last_event_ms: Option<i64>,
    /// The end of the window the file says it recorded (its header's `end_time`); absent in
    /// the metadata of traces imported before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_end_ms: Option<i64>,
    pub bytes: u64,
}

impl Meta {
    /// Where an export of this trace ends when no end is given (exclusive): where its recording
    /// ended, never before its last event, not the time it is asked (a trace recorded months
    /// ago would replay for months). `None` for a trace without events or a recorded end.
    pub fn default_end_ms(&self) -> Option<i64> {
        let after_last = self.last_event_ms.map(|ms| ms.saturating_add(1));
        after_last.max(self.recorded_end_ms)
    }
}

#[derive(Debug, Clone)]
pub struct Imports {
    dir: PathBuf,
    max_bytes: u64,
    created_by: String,
}

impl Imports {
    pub fn new(dir: PathBuf, max_bytes: u64, created_by: String) -> Result<Self, ImportError> {
        fs::create_dir_all(&dir)?;
        // Uploads interrupted by a crash are never valid traces.
        for entry in fs::read_dir(&dir)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".upload-") {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(Self {
            dir,
            max_bytes,
            created_by,
        })
    }

    pub fn begin(&self) -> Result<Upload, ImportError> {
        let file = tempfile::Builder::new()
            .prefix(".upload-")
            .tempfile_in(&self.dir)?;
        Ok(Upload {
            imports: self.clone(),
            file,
            received: 0,
        })
    }

    pub fn path(&self, id: &str) -> Result<PathBuf, ImportError> {
        // The id becomes a file name: only what an id can look like gets through.
        if id.len() != 32
            || !id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(ImportError::BadId(id.to_owned()));
        }
        let path = self.dir.join(format!("{id}.ktrace"));
        if !path.exists() {
            return Err(ImportError::NotFound(id.to_owned()));
        }
        Ok(path)
    }

    /// What the imported trace's own header says was recorded (kinds, cluster state, usage):
    /// an export of it speaks for that recording, not for this tracer's.
    pub fn tracer_config(&self, id: &str) -> Result<Option<pb::TracerConfig>, ImportError> {
        let file = File::open(self.path(id)?)?;
        let reader = ksim_trace::TraceReader::new(BufReader::new(file)).map_err(|source| {
            ImportError::Invalid {
                format: "ksim",
                source,
            }
        })?;
        Ok(reader.header().tracer_config.clone())
    }

    pub fn meta(&self, id: &str) -> Result<Meta, ImportError> {
        let path = self.path(id)?.with_extension("json");
        let text = fs::read(&path)?;
        serde_json::from_slice(&text).map_err(|source| ImportError::Meta {
            id: id.to_owned(),
            source,
        })
    }
}

/// One trace being received.
#[derive(Debug)]
pub struct Upload {
    imports: Imports,
    file: tempfile::NamedTempFile,
    received: u64,
}

impl Upload {
    pub fn write(&mut self, data: &[u8]) -> Result<(), ImportError> {
        self.received += data.len() as u64;
        if self.received > self.imports.max_bytes {
            return Err(ImportError::TooLarge {
                limit: self.imports.max_bytes,
            });
        }
        self.file.write_all(data)?;
        Ok(())
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// Validates the whole upload and keeps it; on any error nothing is kept. Blocking.
    pub fn finish(
        mut self,
        format: pb::TraceFormat,
        display_name: &str,
    ) -> Result<(String, Meta), ImportError> {
        self.file.flush()?;
        if self.received == 0 {
            return Err(ImportError::Empty);
        }
        // From the uploaded bytes, so the same upload gets the same id even when converted.
        let id = content_id(self.file.path())?;
        let mut prefix = [0_u8; 16];
        let n = read_prefix(self.file.path(), &mut prefix)?;
        let format = match format {
            pb::TraceFormat::Unspecified => detect_format(&prefix[..n])
                .ok_or_else(|| ImportError::UnknownFormat(hex(&prefix[..n])))?,
            given => given,
        };
        let (ksim_file, source_format) = match format {
            pb::TraceFormat::SimkubeV2 => {
                // SimKube traces are one MessagePack document, converted in memory: their own
                // limit (smaller than the import limit) bounds what this read and decode cost.
                let limit = ksim_trace::simkube::MAX_INPUT_BYTES as u64;
                if self.received > limit {
                    return Err(ImportError::TooLarge { limit });
                }
                let bytes = fs::read(self.file.path())?;
                let converted = tempfile::Builder::new()
                    .prefix(".upload-")
                    .tempfile_in(&self.imports.dir)?;
                let (converted, _) =
                    ksim_trace::simkube::convert(&bytes, converted, &self.imports.created_by)
                        .map_err(|source| ImportError::Invalid {
                            format: "SimKube",
                            source,
                        })?;
                (converted, "simkube-v2")
            }
            _ => (self.file, "ksim"),
        };
        let inspection = ksim_trace::inspect::inspect(BufReader::new(File::open(
            ksim_file.path(),
        )?))
        .map_err(|source| ImportError::Invalid {
            format: "ksim",
            source,
        })?;
        let bytes = fs::metadata(ksim_file.path())?.len();
        let meta = meta(display_name, source_format, &inspection, bytes);
        let dir = &self.imports.dir;
        let meta_file = dir.join(format!("{id}.json"));
        fs::write(
            &meta_file,
            serde_json::to_vec_pretty(&meta).map_err(std::io::Error::other)?,
        )?;
        ksim_file
            .persist(dir.join(format!("{id}.ktrace")))
            .map_err(|e| ImportError::Io(e.error))?;
        Ok((id, meta))
    }
}

fn meta(display_name: &str, source_format: &str, inspection: &Inspection, bytes: u64) -> Meta {
    Meta {
        display_name: display_name.to_owned(),
        source_format: source_format.to_owned(),
        events: inspection.events,
        objects: inspection.applies + inspection.deletes,
        lifecycles: inspection.lifecycles,
        first_event_ms: inspection.first_event_ms,
        last_event_ms: inspection.last_event_ms,
        recorded_end_ms: inspection
            .header
            .end_time
            .as_ref()
            .map(ksim_trace::time::millis),
        bytes,
    }
}

fn read_prefix(path: &Path, prefix: &mut [u8]) -> std::io::Result<usize> {
    let mut file = File::open(path)?;
    let mut filled = 0;
    while filled < prefix.len() {
        match file.read(&mut prefix[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn content_id(path: &Path) -> std::io::Result<String> {
    let mut hasher = Xxh3::new();
    let mut file = File::open(path)?;
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        match file.read(&mut buffer)? {
            0 => break,
            n => hasher.update(&buffer[..n]),
        }
    }
    Ok(format!("{:032x}", hasher.digest128()))
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(last_event_ms: Option<i64>, recorded_end_ms: Option<i64>) -> Meta {
        Meta {
            display_name: "t".to_owned(),
            source_format: "ksim".to_owned(),
            events: 0,
            objects: 0,
            lifecycles: 0,
            first_event_ms: last_event_ms,
            last_event_ms,
            recorded_end_ms,
            bytes: 0,
        }
    }

    #[test]
    fn an_imported_trace_ends_where_its_recording_did_never_before_its_last_event() {
        assert_eq!(meta(Some(4_000), None).default_end_ms(), Some(4_001));
        assert_eq!(meta(Some(4_000), Some(9_000)).default_end_ms(), Some(9_000));
        // SimKube's converted header ends at its last event, which must stay in the window.
        assert_eq!(meta(Some(4_000), Some(4_000)).default_end_ms(), Some(4_001));
        assert_eq!(meta(None, None).default_end_ms(), None);
    }

    #[test]
    fn a_simkube_upload_over_its_own_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let imports = Imports::new(dir.path().to_owned(), 4 << 30, "test".to_owned()).unwrap();
        let mut upload = imports.begin().unwrap();
        upload.write(&[0x81, 0xa1, b'x']).unwrap();
        // Under the import limit, over SimKube's: counted as received, not written (no 512 MiB
        // file in a unit test).
        upload.received = ksim_trace::simkube::MAX_INPUT_BYTES as u64 + 1;
        let error = upload
            .finish(pb::TraceFormat::SimkubeV2, "big")
            .unwrap_err();
        assert!(
            matches!(error, ImportError::TooLarge { limit } if limit == 512 << 20),
            "{error:?}"
        );
    }

    #[test]
    fn metadata_written_before_the_recorded_end_was_kept_still_reads() {
        let old = r#"{"displayName":"t","sourceFormat":"ksim","events":1,"objects":1,
            "lifecycles":0,"firstEventMs":5,"lastEventMs":7,"bytes":10}"#;
        let read: Meta = serde_json::from_str(old).unwrap();
        assert_eq!(read.recorded_end_ms, None);
        assert_eq!(read.default_end_ms(), Some(8));
    }
}
