//! `ksim report <ID>`: a simulation's report, summarised or as JSON, or why its explained pods
//! went where they did.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use ksim_proto::ksim::driver::v1::{GetSimulationRequest, SimulationState};

use crate::driver::{DriverArgs, connect, get_report};
use crate::files::read_text_bounded;

/// What `ksim report` prints.
#[derive(Debug, Clone, Copy)]
pub enum Show<'a> {
    Summary,
    Json,
    Explained(ksim_report::PodSelector<'a>),
    /// The page, written to this file.
    Html(&'a Path),
}

/// The pinned charting library of the page (deploy/uplot/versions.env).
const UPLOT_VERSIONS: &str = include_str!("../../../deploy/uplot/versions.env");
/// The most the library's files may weigh (its script is about 50 KB).
const MAX_LIBRARY_BYTES: usize = 1 << 20;

/// The charting library the page carries: `KSIM_UPLOT_DIR`, else where deploy/uplot/fetch.sh
/// caches it.
pub fn chart_library() -> anyhow::Result<ksim_report::ChartLibrary> {
    let version = UPLOT_VERSIONS
        .lines()
        .find_map(|line| line.trim().strip_prefix("UPLOT_VERSION="))
        .unwrap_or("unknown");
    let dir = match std::env::var_os("KSIM_UPLOT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => ksim_localenv::cache_root()?
            .join(format!("uplot-{version}"))
            .join("dist"),
    };
    let read = |name: &str| {
        read_text_bounded(&dir.join(name), MAX_LIBRARY_BYTES, "the charting library").with_context(
            || {
                format!(
                    "the page's charting library (uPlot {version}) is not in {}: run \
                     deploy/uplot/fetch.sh (or set KSIM_UPLOT_DIR)",
                    dir.display()
                )
            },
        )
    };
    Ok(ksim_report::ChartLibrary {
        script: read("uPlot.iife.min.js")?,
        style: read("uPlot.min.css")?,
    })
}

/// Writes `report`'s page to `path`.
pub fn write_html(report: &ksim_report::Report, path: &Path) -> anyhow::Result<()> {
    let label = format!("--html {}", path.display());
    crate::files::check_output_of(&label, path, &[])?;
    let page = ksim_report::render_html(report, &chart_library()?)?;
    crate::files::write_whole(&label, path, page.as_bytes())
}

pub async fn run(id: &str, driver: &DriverArgs, show: Show<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if let Show::Html(path) = show {
        let report = crate::compare::load(id, driver).await?;
        write_html(&report, path)?;
        writeln!(out, "{}", path.display())?;
        return Ok(());
    }
    if let Show::Explained(selector) = show {
        // A report directory (the driver may be gone, as after `ksim demo`) or a simulation id.
        let report = crate::compare::load(id, driver).await?;
        let pods = ksim_report::select(&report, selector)?;
        write!(out, "{}", ksim_report::explanation_text(&pods))?;
        return Ok(());
    }
    let mut client = connect(&driver.resolve()?).await?;
    let report = get_report(&mut client, id).await?;
    if matches!(show, Show::Json) {
        // report.json's form, not the proto's canonical JSON.
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        // Its header says how the run ended; a driver that cannot say leaves it to the report.
        let state = client
            .get_simulation(GetSimulationRequest { id: id.to_owned() })
            .await
            .ok()
            .and_then(|answer| answer.into_inner().simulation)
            .map_or(SimulationState::Unspecified, |simulation| {
                simulation.state()
            });
        write!(out, "{}", ksim_report::summary_ended(&report, state))?;
    }
    Ok(())
}
