//! `ksim trace calibrate TRACE [-o MODEL.yaml] [--name NAME]`: learns a provisioning model
//! from what a recording saw of its nodes, CA's scale-ups and its pods
//! (`ksim_experiment::provisioning::calibrate`), prints the figures, and writes the model.
//!
//! A trace with no recorded nodes (a SimKube trace, or one recorded without Nodes) has nothing
//! to learn node delays from: that is an error (exit 1) naming the built-in model to use.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use ksim_experiment::provisioning::calibrate::{
    Calibration, NodeObservation, Observations, PodObservation, calibrate,
};
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::Record;

use super::input::TraceInput;

/// The label holding a node's instance type.
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// The reason cluster-autoscaler gives the events of pods a scale-up is for.
const TRIGGERED_SCALE_UP: &str = "TriggeredScaleUp";

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
        crate::files::check_output(label, output)?;
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

/// The model learned from `trace` as `ksim trace calibrate` would write it, or `None` when the
/// trace holds no recorded nodes (for a replay's default model).
#[allow(dead_code)] // for `ksim run`'s default model
pub fn learn(trace: &Path) -> anyhow::Result<Option<ksim_experiment::provisioning::Model>> {
    let seen = observe(&TraceInput::open(trace)?)?;
    if seen.observations.nodes.is_empty() {
        return Ok(None);
    }
    let source = format!("ksim trace calibrate {}", file_name(trace));
    Ok(Some(
        calibrate(&seen.observations, &default_name(trace), &source).model,
    ))
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

/// Streams the trace once: nodes by (name, creation), CA's scale-ups, the latest lifetime of
/// each pod. Memory follows the nodes and pods, not the events.
fn observe(input: &TraceInput) -> anyhow::Result<Seen> {
    let mut reader = input.reader()?;
    let header = reader.header().clone();
    let tracked_events = header.tracer_config.as_ref().is_some_and(|config| {
        config
            .tracked_kinds
            .iter()
            .filter_map(|kind| kind.gvk.as_ref())
            .any(is_event_kind)
    });
    let mut observations = Observations {
        recorded_from_ms: header
            .start_time
            .as_ref()
            .map_or(i64::MIN, ksim_trace::time::millis),
        events_recorded: tracked_events,
        ..Default::default()
    };
    let mut nodes: HashMap<(String, i64), NodeObservation> = HashMap::new();
    let mut pods: HashMap<(String, String), PodObservation> = HashMap::new();
    let mut unnamed: Vec<PodObservation> = Vec::new();
    while let Some(record) = reader.next_record().with_context(|| input.invalid())? {
        match record {
            Record::Event(event) => {
                for object in &event.applied {
                    if object.gvk.as_ref().is_some_and(is_event_kind) {
                        observations.events_recorded = true;
                        if let Some(message) = scale_up_message(&object.object_json) {
                            observations.add_scale_up_event(&message, event.timestamp_ms);
                        }
                    }
                }
            }
            Record::Node(node) => {
                let key = (node.name.clone(), node.created_ms);
                let seen = nodes.entry(key).or_insert_with(|| NodeObservation {
                    name: node.name.clone(),
                    group: node.group.clone(),
                    instance_type: node
                        .labels
                        .get(INSTANCE_TYPE_LABEL)
                        .cloned()
                        .unwrap_or_default(),
                    created_ms: node.created_ms,
                    first_seen_ms: node.timestamp_ms,
                    ..Default::default()
                });
                seen.first_seen_ms = seen.first_seen_ms.min(node.timestamp_ms);
                if node.ready && node.deleted_ms == 0 {
                    let first = seen
                        .ready_ms
                        .map_or(node.timestamp_ms, |at| at.min(node.timestamp_ms));
                    seen.ready_ms = Some(first);
                }
                // The removal that ended in the deletion: the latest record's.
                seen.removal_started_ms =
                    (node.removal_started_ms != 0).then_some(node.removal_started_ms);
                if node.deleted_ms != 0 {
                    seen.deleted_ms = Some(node.deleted_ms);
                }
            }
            Record::Lifecycle(lifecycle) => {
                let pod = pod_of(&lifecycle);
                if lifecycle.pod_name.is_empty() {
                    unnamed.push(pod);
                } else {
                    // A pod recorded again (Ready later, or ended) is the same pod.
                    pods.insert((pod.owner.clone(), lifecycle.pod_name.clone()), pod);
                }
            }
            Record::Sample(_) => {}
        }
    }
    observations.nodes = nodes.into_values().collect();
    observations
        .nodes
        .sort_by(|a, b| (a.created_ms, &a.name).cmp(&(b.created_ms, &b.name)));
    observations.pods = pods.into_values().chain(unnamed).collect();
    observations.match_scale_ups();
    Ok(Seen {
        header,
        observations,
    })
}

fn is_event_kind(gvk: &pb::GroupVersionKind) -> bool {
    gvk.kind == "Event" && (gvk.group.is_empty() || gvk.group == "events.k8s.io")
}

/// The message of a `TriggeredScaleUp` Event (core `message`, events.k8s.io `note`).
fn scale_up_message(json: &[u8]) -> Option<String> {
    let event: serde_json::Value = serde_json::from_slice(json).ok()?;
    if event.get("reason").and_then(serde_json::Value::as_str) != Some(TRIGGERED_SCALE_UP) {
        return None;
    }
    event
        .get("message")
        .or_else(|| event.get("note"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

fn pod_of(lifecycle: &pb::PodLifecycle) -> PodObservation {
    let kind = lifecycle
        .owner_gvk
        .as_ref()
        .map_or("", |gvk| gvk.kind.as_str());
    let known = |ms: i64| (ms != 0).then_some(ms);
    PodObservation {
        owner: format!(
            "{kind}/{}/{}",
            lifecycle.owner_namespace, lifecycle.owner_name
        ),
        bound_ms: known(lifecycle.bound_ms),
        started_ms: lifecycle.start_ms,
        ready_ms: known(lifecycle.ready_ms),
        node: lifecycle.node_name.clone(),
    }
}
