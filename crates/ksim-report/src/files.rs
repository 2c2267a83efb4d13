//! The report's files: `report.json`, `timeline.csv` and `timeline.svg`, with fidelity
//! `fidelity.csv` and `fidelity.svg`, and with scaled workloads `replicas.csv`.

use std::fs::{self, File};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use ksim_proto::ksim::driver::v1 as pb;

use super::csv::{fidelity_to_csv, replicas_to_csv, to_csv};
pub use super::error::ReportError;
use super::model::Report;
use super::svg::{render_fidelity_svg, render_svg};
use super::timeline::check_timeline;

pub const JSON_FILE: &str = "report.json";
pub const CSV_FILE: &str = "timeline.csv";
pub const SVG_FILE: &str = "timeline.svg";
pub const FIDELITY_CSV_FILE: &str = "fidelity.csv";
pub const FIDELITY_SVG_FILE: &str = "fidelity.svg";
pub const REPLICAS_CSV_FILE: &str = "replicas.csv";
/// How the simulation ended, beside its report: a restarted driver answers for it from these.
pub const OUTCOME_FILE: &str = "outcome.json";

/// How a simulation ended, as [`OUTCOME_FILE`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// The final state's proto name, e.g. `SUCCEEDED`.
    pub state: String,
    #[serde(default)]
    pub error_message: String,
    /// Milliseconds since the Unix epoch.
    pub end_time_ms: i64,
}

/// Where the files were written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    pub json: PathBuf,
    pub csv: PathBuf,
    pub svg: PathBuf,
    /// The comparison's CSV and chart, for a report with fidelity.
    pub fidelity: Option<(PathBuf, PathBuf)>,
    /// Scaled workloads' replicas, for a report with any.
    pub replicas: Option<PathBuf>,
}

impl Artifacts {
    /// The files [`write_files`] writes into `dir` for `report`.
    pub fn of(report: &Report, dir: &Path) -> Self {
        Self {
            json: dir.join(JSON_FILE),
            csv: dir.join(CSV_FILE),
            svg: dir.join(SVG_FILE),
            fidelity: report
                .fidelity
                .as_ref()
                .map(|_| (dir.join(FIDELITY_CSV_FILE), dir.join(FIDELITY_SVG_FILE))),
            replicas: report
                .workload_scaling
                .as_ref()
                .is_some_and(|scaling| !scaling.workloads.is_empty())
                .then(|| dir.join(REPLICAS_CSV_FILE)),
        }
    }

    /// The gRPC form, for the report's `artifacts`.
    pub fn to_proto(&self) -> pb::ReportArtifacts {
        let path = |path: &Path| path.display().to_string();
        let (fidelity_csv_path, fidelity_svg_path) = self
            .fidelity
            .as_ref()
            .map(|(csv, svg)| (path(csv), path(svg)))
            .unwrap_or_default();
        pb::ReportArtifacts {
            json_path: path(&self.json),
            csv_path: path(&self.csv),
            svg_path: path(&self.svg),
            fidelity_csv_path,
            fidelity_svg_path,
            replicas_csv_path: self.replicas.as_deref().map(path).unwrap_or_default(),
        }
    }
}

/// Writes the files into `dir` (three, five with fidelity, one more with scaled workloads),
/// creating it if missing. Each file is written to a temporary sibling and renamed into place,
/// so a reader sees the old file or the whole new one, never a part. Everything is rendered before the first write, so a rendering error
/// leaves the directory untouched.
pub fn write_files(report: &Report, dir: &Path) -> Result<Artifacts, ReportError> {
    let json = serde_json::to_string_pretty(report)? + "\n";
    let csv = to_csv(report);
    let svg = render_svg(report)?;
    let fidelity = match &report.fidelity {
        Some(fidelity) => Some((
            fidelity_to_csv(fidelity),
            render_fidelity_svg(&report.simulation_id, fidelity)?,
        )),
        None => None,
    };
    let replicas = replicas_to_csv(report);

    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let artifacts = Artifacts::of(report, dir);
    write_atomically(&artifacts.json, json.as_bytes())?;
    write_atomically(&artifacts.csv, csv.as_bytes())?;
    write_atomically(&artifacts.svg, svg.as_bytes())?;
    if let (Some((csv, svg)), Some((csv_path, svg_path))) = (fidelity, &artifacts.fidelity) {
        write_atomically(csv_path, csv.as_bytes())?;
        write_atomically(svg_path, svg.as_bytes())?;
    }
    if let (Some(csv), Some(path)) = (replicas, &artifacts.replicas) {
        write_atomically(path, csv.as_bytes())?;
    }
    Ok(artifacts)
}

/// Writes [`OUTCOME_FILE`] into `dir`, creating it if missing.
pub fn write_outcome(outcome: &Outcome, dir: &Path) -> Result<PathBuf, ReportError> {
    let json = serde_json::to_string_pretty(outcome)? + "\n";
    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let path = dir.join(OUTCOME_FILE);
    write_atomically(&path, json.as_bytes())?;
    Ok(path)
}

/// The largest report file read: as large as a report the CLI takes from a driver.
const MAX_REPORT_BYTES: u64 = 256 << 20;

/// The report and outcome kept in `dir`; `None` where a file does not exist. Each is read up
/// to [`MAX_REPORT_BYTES`], and the report's timeline checked ([`check_timeline`]).
pub fn read_files(dir: &Path) -> Result<(Option<Report>, Option<Outcome>), ReportError> {
    let path = dir.join(JSON_FILE);
    let report: Option<Report> = read_json(&path, MAX_REPORT_BYTES)?;
    if let Some(report) = &report {
        check_timeline(report).map_err(|source| ReportError::NotWritten {
            path,
            source: Box::new(source),
        })?;
    }
    Ok((
        report,
        read_json(&dir.join(OUTCOME_FILE), MAX_REPORT_BYTES)?,
    ))
}

/// `path` parsed, read up to `limit` bytes; `None` if it does not exist.
fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    limit: u64,
) -> Result<Option<T>, ReportError> {
    let read_error = |source| ReportError::Read {
        path: path.to_owned(),
        source,
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(read_error(source)),
    };
    let mut bytes = Vec::new();
    // One byte past the limit tells a file at it from a larger one.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(ReportError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| ReportError::Malformed {
            path: path.to_owned(),
            source,
        })
}

fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), ReportError> {
    // Same directory, so the rename cannot cross filesystems; the pid keeps two processes
    // writing one report directory from sharing a temporary file.
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(path.file_name().unwrap_or_default());
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = path.with_file_name(temp_name);

    let written = File::create(&temp)
        .and_then(|mut file| {
            file.write_all(contents)?;
            file.sync_all()
        })
        .map_err(|source| ReportError::Io {
            path: temp.clone(),
            source,
        });
    let result = written.and_then(|()| {
        fs::rename(&temp, path).map_err(|source| ReportError::Io {
            path: path.to_owned(),
            source,
        })
    });
    if result.is_err() {
        // Best effort: the error to report is the one above.
        let _ = fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;

    #[test]
    fn report_and_outcome_read_back_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sim-7");
        assert_eq!(read_files(&dir).unwrap(), (None, None));
        let report = fixtures::report();
        write_files(&report, &dir).unwrap();
        let outcome = Outcome {
            state: "FAILED".to_owned(),
            error_message: "the driver stopped".to_owned(),
            end_time_ms: 1_700_000_000_000,
        };
        write_outcome(&outcome, &dir).unwrap();
        assert_eq!(read_files(&dir).unwrap(), (Some(report), Some(outcome)));

        fs::write(dir.join(OUTCOME_FILE), "{ not json").unwrap();
        let error = read_files(&dir).unwrap_err();
        assert!(error.to_string().contains(OUTCOME_FILE), "{error}");
    }

    #[test]
    fn a_larger_file_or_a_timeline_ksim_does_not_make_is_refused_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let outcome = Outcome {
            state: "SUCCEEDED".to_owned(),
            error_message: String::new(),
            end_time_ms: 0,
        };
        let path = write_outcome(&outcome, tmp.path()).unwrap();
        let size = fs::metadata(&path).unwrap().len();
        let at_limit: Option<Outcome> = read_json(&path, size).unwrap();
        assert_eq!(at_limit, Some(outcome));
        let error = read_json::<Outcome>(&path, size - 1).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{} is larger than a report ksim writes ({} bytes at most)",
                path.display(),
                size - 1
            )
        );

        let mut report = fixtures::report();
        report.timeline[1].offset = Some(ksim_proto::json::of_millis(1 << 62));
        let json = serde_json::to_vec(&report).unwrap();
        fs::write(tmp.path().join(JSON_FILE), json).unwrap();
        let error = read_files(tmp.path()).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!(
                "{} is not a report ksim wrote: timeline entry 1 is at",
                tmp.path().join(JSON_FILE).display()
            )),
            "{error}"
        );
    }

    #[test]
    fn writes_three_files_into_a_new_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("reports").join("sim-42");
        let report = Report {
            fidelity: None,
            ..fixtures::report()
        };
        let artifacts = write_files(&report, &dir).unwrap();

        assert_eq!(artifacts.json, dir.join("report.json"));
        let json = fs::read_to_string(&artifacts.json).unwrap();
        assert!(
            json.contains("\n  \"simulation_id\": \"sim-42\""),
            "pretty: {json}"
        );
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);

        assert_eq!(fs::read_to_string(&artifacts.csv).unwrap(), to_csv(&report));
        assert!(
            fs::read_to_string(&artifacts.svg)
                .unwrap()
                .starts_with("<svg")
        );

        // Only the three files: no temporaries left behind.
        let mut names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["report.json", "timeline.csv", "timeline.svg"]);

        let proto = artifacts.to_proto();
        assert_eq!(
            proto.svg_path,
            dir.join("timeline.svg").display().to_string()
        );
        assert_eq!(proto.fidelity_svg_path, "");

        // Rewriting replaces the files.
        let shorter = Report {
            timeline: Vec::new(),
            ..report
        };
        write_files(&shorter, &dir).unwrap();
        let back: Report =
            serde_json::from_str(&fs::read_to_string(&artifacts.json).unwrap()).unwrap();
        assert!(back.timeline.is_empty());
    }

    #[test]
    fn a_report_with_scaled_workloads_writes_replicas_csv() {
        let tmp = tempfile::tempdir().unwrap();
        let mut report = fixtures::report();
        assert_eq!(Artifacts::of(&report, tmp.path()).replicas, None);
        report.workload_scaling = Some(fixtures::workload_scaling());
        let artifacts = write_files(&report, tmp.path()).unwrap();
        let path = artifacts.replicas.clone().unwrap();
        assert_eq!(path, tmp.path().join("replicas.csv"));
        let csv = fs::read_to_string(&path).unwrap();
        assert!(csv.starts_with("bucket,offset_ms,workload,recorded,simulated\n0,0,"));
        // The API names it too.
        assert_eq!(
            artifacts.to_proto().replicas_csv_path,
            path.display().to_string()
        );
    }

    #[test]
    fn a_report_with_fidelity_writes_its_csv_and_chart_too() {
        let tmp = tempfile::tempdir().unwrap();
        let report = fixtures::report();
        let fidelity = report.fidelity.as_ref().unwrap();
        let artifacts = write_files(&report, tmp.path()).unwrap();
        let (csv, svg) = artifacts.fidelity.clone().unwrap();
        assert_eq!(fs::read_to_string(&csv).unwrap(), fidelity_to_csv(fidelity));
        assert!(fs::read_to_string(&svg).unwrap().starts_with("<svg"));
        assert_eq!(artifacts, Artifacts::of(&report, tmp.path()));
        let proto = artifacts.to_proto();
        assert_eq!(proto.fidelity_csv_path, csv.display().to_string());
        let mut names: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "fidelity.csv",
                "fidelity.svg",
                "report.json",
                "timeline.csv",
                "timeline.svg"
            ]
        );
    }

    #[test]
    fn json_uses_milliseconds_and_fractional_percentiles() {
        let json = serde_json::to_value(fixtures::report()).unwrap();
        assert_eq!(json["timeline"][1]["offset_ms"], 1000);
        assert_eq!(json["timeline"][1]["time_ms"], 1_767_225_601_000_i64);
        assert_eq!(json["lateness"]["p99_ms"], 12.345);
        assert_eq!(json["object_errors"][0]["trace_offset_ms"], 61_500);
        assert_eq!(json["object_errors"][0]["operation"], "apply");
        assert_eq!(json["node_changes"][0]["offset_ms"], 1_150);
        assert_eq!(json["node_changes"][0]["node"], "group-b-x");
        assert_eq!(json["node_changes"][0]["kind"], "added");
        assert_eq!(json["node_changes"][2]["kind"], "removed");
    }

    #[test]
    fn a_report_json_from_before_node_changes_still_reads() {
        let mut json = serde_json::to_value(fixtures::report()).unwrap();
        json.as_object_mut().unwrap().remove("node_changes");
        let back: Report = serde_json::from_value(json).unwrap();
        assert!(back.node_changes.is_empty());
        assert_eq!(back.timeline, fixtures::report().timeline);
    }

    #[test]
    fn a_report_json_from_before_used_usage_reads_it_as_zero() {
        let mut json = serde_json::to_value(fixtures::report()).unwrap();
        assert_eq!(json["timeline"][0]["usage"]["used_cpu_millis"], 900);
        for bucket in json["timeline"].as_array_mut().unwrap() {
            let usage = bucket["usage"].as_object_mut().unwrap();
            usage.remove("used_cpu_millis");
            usage.remove("used_memory_bytes");
        }
        let back: Report = serde_json::from_value(json).unwrap();
        let usage = back.timeline[0].usage.unwrap();
        assert_eq!(usage.used_cpu_millis, 0);
        assert_eq!(usage.used_memory_bytes, 0);
        assert_eq!(usage.requested_cpu_millis, 1500);
    }

    #[test]
    fn io_errors_name_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let blocker = tmp.path().join("file");
        fs::write(&blocker, "not a directory").unwrap();
        let dir = blocker.join("sub");
        let error = write_files(&fixtures::report(), &dir).unwrap_err();
        assert!(
            matches!(error, ReportError::Io { ref path, .. } if *path == dir),
            "{error:?}"
        );
        assert!(error.to_string().contains(&dir.display().to_string()));
    }
}
