//! The web pages of reports and comparisons (`--html`): the charting library they carry, read
//! from where deploy/uplot/fetch.sh caches it, and a report's page written whole.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::files::read_text_bounded;

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

/// Writes `report`'s page to `path`, which must not be one of `inputs` (the report's own
/// file, through any path or link).
pub fn write_html(
    report: &ksim_report::Report,
    path: &Path,
    inputs: &[&Path],
) -> anyhow::Result<()> {
    let label = format!("--html {}", path.display());
    crate::files::check_output_of(&label, path, inputs)?;
    let page = ksim_report::render_html(report, &chart_library()?)?;
    crate::files::write_whole(&label, path, page.as_bytes())
}
