//! `ksim compare REPORT...`: reports side by side, the first the baseline.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use clap::Args;
use ksim_report::Report;

use crate::driver::{DriverArgs, connect, get_report};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Two or more reports, the baseline first: a report directory (holding `report.json`) or a
    /// simulation id the driver knows.
    #[arg(required = true, num_args = 2.., value_name = "REPORT")]
    pub reports: Vec<String>,

    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Also write the chart of the runs' nodes and pending pods here (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,

    #[command(flatten)]
    pub driver: DriverArgs,
}

pub async fn run(args: CompareArgs) -> anyhow::Result<()> {
    let svg_label = |path: &Path| format!("--svg {}", path.display());
    if let Some(path) = &args.svg {
        crate::files::check_output(&svg_label(path), path)?;
    }
    let mut reports = Vec::new();
    for name in &args.reports {
        reports.push((name.clone(), load(name, &args.driver).await?));
    }
    let comparison = ksim_report::compare(&reports);
    if let Some(path) = &args.svg {
        let svg = ksim_report::render_comparison_svg(&reports)?;
        crate::files::write_whole(&svg_label(path), path, svg.as_bytes())?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &comparison)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", comparison.table())?;
    }
    Ok(())
}

/// A report directory's `report.json`, else the driver's report of that id.
async fn load(name: &str, driver: &DriverArgs) -> anyhow::Result<Report> {
    let dir = Path::new(name);
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => {
            let path = dir.join("report.json");
            // As large as a report the driver may send.
            let bytes =
                crate::files::read_bounded(&path, crate::driver::MAX_RESPONSE_BYTES, "the report")?;
            return serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a ksim report", path.display()));
        }
        Ok(_) => {
            anyhow::bail!("{name} is a file: give the report directory that holds its report.json")
        }
        // A simulation id has neither '/' nor '.': this was meant as a path, so it is named,
        // not looked up on a driver.
        Err(error) if error.kind() != std::io::ErrorKind::NotFound || is_path(name) => {
            return Err(error).with_context(|| format!("cannot read report directory {name}"));
        }
        Err(_) => {}
    }
    let mut client = connect(&driver.resolve()?).await.with_context(|| {
        format!("{name}: no such report directory; looked up as a simulation id")
    })?;
    let report = get_report(&mut client, name)
        .await
        .with_context(|| format!("{name} is neither a report directory nor a simulation id"))?;
    Ok(Report::from_proto(&report))
}

/// Whether `name` can only be a path: simulation ids (`<hex>-<hex>`) have no '/' or '.'.
fn is_path(name: &str) -> bool {
    name.contains(['/', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_named_and_no_driver_is_asked() {
        // Port 9 (discard) on loopback: nothing answers, and it is never asked.
        let driver = DriverArgs {
            url: Some("http://127.0.0.1:9".to_owned()),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let error = runtime
            .block_on(load("/nonexistent/report", &driver))
            .unwrap_err();
        let said = format!("{error:#}");
        assert!(
            said.starts_with("cannot read report directory /nonexistent/report: "),
            "{said}"
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        let name = file.path().to_str().unwrap();
        let error = runtime.block_on(load(name, &driver)).unwrap_err();
        assert!(error.to_string().contains("is a file"), "{error}");
        assert!(is_path("./r") && !is_path("reports") && !is_path("19a2b3c4d5e-00ff"));
    }
}
