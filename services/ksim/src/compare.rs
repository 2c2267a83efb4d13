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

    /// Also write the comparison as one self-contained web page here (the figures against the
    /// baseline, the runs' nodes and pending pods on charts to hover).
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,

    /// Instead of the table: where this pod went in each run and what decided it (runs with
    /// --explain). A pod named anew in another run (a Deployment's) is matched by its place
    /// among its workload's explained pods.
    #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with_all = ["json", "svg", "html", "owner"])]
    pub pod: Option<String>,

    /// The same for every explained pod of a workload: KIND/NAME or NAMESPACE/KIND/NAME.
    #[arg(long, value_name = "KIND/NAME", conflicts_with_all = ["json", "svg", "html"])]
    pub owner: Option<String>,

    #[command(flatten)]
    pub driver: DriverArgs,
}

pub async fn run(args: CompareArgs) -> anyhow::Result<()> {
    let svg_label = |path: &Path| format!("--svg {}", path.display());
    // The chart and the page are renamed over their paths: never over a report being compared.
    let inputs: Vec<PathBuf> = args.reports.iter().filter_map(|r| report_file(r)).collect();
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    if let Some(path) = &args.svg {
        crate::files::check_output_of(&svg_label(path), path, &inputs)?;
    }
    if let Some(path) = &args.html {
        crate::files::check_output_of(&format!("--html {}", path.display()), path, &inputs)?;
    }
    let mut reports = Vec::new();
    for name in &args.reports {
        reports.push((name.clone(), load(name, &args.driver).await?));
    }
    let selector = match (&args.pod, &args.owner) {
        (Some(pod), _) => Some(ksim_report::PodSelector::Pod(pod)),
        (None, Some(owner)) => Some(ksim_report::PodSelector::Owner(owner)),
        (None, None) => None,
    };
    if let Some(selector) = selector {
        let text = ksim_report::compare_explained(&reports, selector)?;
        write!(std::io::stdout().lock(), "{text}")?;
        return Ok(());
    }
    let comparison = ksim_report::compare(&reports);
    if let Some(path) = &args.svg {
        let svg = ksim_report::render_comparison_svg(&reports)?;
        crate::files::write_whole(&svg_label(path), path, svg.as_bytes())?;
    }
    if let Some(path) = &args.html {
        let page = ksim_report::render_comparison_html(
            &comparison,
            &reports,
            &crate::page::chart_library()?,
        )?;
        crate::files::write_whole(&format!("--html {}", path.display()), path, page.as_bytes())?;
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

/// The `report.json` a name read as a report directory stands for; none for a simulation id
/// (or a path that is no directory, which [`load`] refuses).
pub(crate) fn report_file(name: &str) -> Option<PathBuf> {
    let dir = Path::new(name);
    dir.is_dir().then(|| dir.join(ksim_report::JSON_FILE))
}

/// A report directory's `report.json`, else the driver's report of that id. Either is checked
/// ([`ksim_report::check_timeline`]) before anything compares it.
pub(crate) async fn load(name: &str, driver: &DriverArgs) -> anyhow::Result<Report> {
    let dir = Path::new(name);
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => {
            let path = dir.join(ksim_report::JSON_FILE);
            // As large as a report the driver may send.
            let bytes =
                crate::files::read_bounded(&path, crate::driver::MAX_RESPONSE_BYTES, "the report")?;
            let report: Report = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a ksim report", path.display()))?;
            ksim_report::check_timeline(&report)
                .with_context(|| format!("{} is not a report ksim wrote", path.display()))?;
            return Ok(report);
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
    ksim_report::check_timeline(&report)
        .with_context(|| format!("the driver's report of {name}"))?;
    Ok(report)
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

    /// A report directory holding `report`, as `ksim report` writes it.
    fn written(report: &Report) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let json = serde_json::to_vec(report).unwrap();
        std::fs::write(dir.path().join(ksim_report::JSON_FILE), json).unwrap();
        dir
    }

    /// A report of two 1 s buckets, the second at `second_ms`.
    fn two_buckets(second_ms: u64) -> Report {
        let bucket = |offset_ms| ksim_report::TimelineBucket {
            offset: Some(ksim_proto::json::of_millis(offset_ms)),
            ..ksim_report::TimelineBucket::default()
        };
        Report {
            bucket_width: Some(ksim_proto::json::of_millis(1000)),
            timeline: vec![bucket(0), bucket(second_ms)],
            ..Report::default()
        }
    }

    #[test]
    fn a_report_claiming_a_span_its_entries_do_not_have_is_refused_naming_file_and_entry() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let driver = DriverArgs { url: None };
        let good = written(&two_buckets(1000));
        let name = good.path().to_str().unwrap();
        runtime.block_on(load(name, &driver)).unwrap();
        // 2^62 ms once aborted `ksim compare` (an allocation of 738 MB).
        let far = written(&two_buckets(1 << 62));
        let name = far.path().to_str().unwrap();
        let error = runtime.block_on(load(name, &driver)).unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            format!(
                "{}/report.json is not a report ksim wrote: timeline entry 1 is at {} ms, not \
                 1000 ms: a report's entries are one bucket (1000 ms) apart from 0",
                far.path().display(),
                1_u64 << 62
            )
        );
    }

    #[test]
    fn the_chart_is_never_written_over_a_compared_report() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (a, b) = (written(&two_buckets(1000)), written(&two_buckets(1000)));
        let input = b.path().join(ksim_report::JSON_FILE);
        let before = std::fs::read(&input).unwrap();
        // Through a link too: the link is another name of the same file.
        let link = a.path().join("chart.svg");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        for svg in [input.clone(), link] {
            let args = CompareArgs {
                reports: vec![
                    a.path().display().to_string(),
                    b.path().display().to_string(),
                ],
                json: true,
                svg: Some(svg.clone()),
                html: None,
                pod: None,
                owner: None,
                driver: DriverArgs { url: None },
            };
            let error = runtime.block_on(run(args)).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "the output --svg {} is the input {}; write to another file",
                    svg.display(),
                    input.display()
                )
            );
            assert_eq!(std::fs::read(&input).unwrap(), before);
        }
    }
}
