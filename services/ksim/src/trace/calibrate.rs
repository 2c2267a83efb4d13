//! `ksim trace calibrate TRACE [-o MODEL.yaml] [--name NAME]`: learns a provisioning model
//! from what a recording saw of its nodes, CA's scale-ups and its pods
//! (`ksim_provisioning::calibrate`), prints the figures, and writes the model.
//!
//! A trace with no recorded nodes (a SimKube trace, or one recorded without Nodes) has nothing
//! to learn node delays from: that is an error (exit 1) naming the built-in model to use.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use ksim_proto::ksim::trace::v1 as pb;
use ksim_provisioning::{
    calibrate::{Calibration, Observations, calibrate},
    observe::Observer,
};

use super::input::TraceInput;

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// The trace to learn from (a ksim trace the tracer recorded with Nodes).
    trace: PathBuf,
    /// Write the model file here (what `ksim run --provisioning FILE` takes); written whole
    /// or not at all.
    #[arg(long, short = 'o', value_name = "MODEL.yaml")]
    output: Option<PathBuf>,
    /// The model's name in reports (default: the trace file's name without its extension).
    #[arg(long)]
    name: Option<String>,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let label = args
        .output
        .as_ref()
        .map(|output| format!("-o {}", output.display()));
    if let (Some(label), Some(output)) = (&label, &args.output) {
        crate::files::check_output_of(label, output, &[&args.trace])?;
    }
    let input = TraceInput::open(&args.trace)?;
    let seen = observe(&input)?;
    if seen.observations.nodes.is_empty() {
        anyhow::bail!("{}", no_nodes(&args.trace, &seen.header));
    }
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| default_name(&args.trace));
    let source = format!("ksim trace calibrate {}", file_name(&args.trace));
    let calibration = calibrate(&seen.observations, &name, &source);
    // The model must read back as any model file does: a name or source that cannot (a
    // newline, too long) is the user's --name, named here before anything is written.
    calibration
        .model
        .check()
        .context("the learned model cannot be written")?;
    print(&calibration)?;
    if let (Some(label), Some(output)) = (&label, &args.output) {
        crate::files::write_whole(label, output, calibration.model.to_yaml().as_bytes())?;
        eprintln!(
            "wrote {}: model {}",
            output.display(),
            calibration.model.name
        );
    }
    Ok(())
}

fn file_name(trace: &Path) -> String {
    trace.file_name().map_or_else(
        || trace.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

fn print(calibration: &Calibration) -> anyhow::Result<()> {
    std::io::stdout()
        .write_all(calibration.table().as_bytes())
        .context("writing to stdout")
}

/// `prod` for `traces/prod.ktrace`.
fn default_name(trace: &Path) -> String {
    trace
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .filter(|stem| !stem.trim().is_empty())
        .unwrap_or_else(|| "calibrated".to_owned())
}

/// The one line for a trace without nodes: what it is, and what to use instead.
fn no_nodes(trace: &Path, header: &pb::TraceHeader) -> String {
    let why = if header.origin == ksim_trace::simkube::ORIGIN {
        "a SimKube trace carries none"
    } else if header
        .tracer_config
        .as_ref()
        .is_some_and(|config| config.cluster_recorded)
    {
        "the recording saw no node in its window"
    } else {
        "it was recorded without Nodes in trackedKinds"
    };
    format!(
        "{} holds no recorded nodes ({why}), so there are no delays to learn; replay it with \
         `--provisioning published` (published figures, docs/provisioning.md) or \
         `--provisioning instant`, or calibrate a trace the ksim tracer recorded with Nodes",
        trace.display()
    )
}

struct Seen {
    header: pb::TraceHeader,
    observations: Observations,
}

/// Streams the trace once through the calibration's observer.
fn observe(input: &TraceInput) -> anyhow::Result<Seen> {
    let mut reader = input.reader()?;
    let header = reader.header().clone();
    let mut observer = Observer::new(&header);
    while let Some(record) = reader.next_record().with_context(|| input.invalid())? {
        observer.record(&record);
    }
    Ok(Seen {
        header,
        observations: observer.finish(),
    })
}
