//! `ksim demo`: the local environment, a bundled trace replayed through the driver, and its
//! report. Cluster-autoscaler resizes the node group; only when its binary could not be built
//! does the group have a fixed size, and the report shows the pods that did not fit.

mod example;

use std::{
    io::{IsTerminal, Write},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use ksim_localenv::{
    autoscaler::{ClusterAutoscalerBinary, FAST_FLAGS},
    environment::{EnvironmentOptions, EnvironmentProcess},
};
use ksim_proto::ksim::driver::v1::{
    DeploymentNodeGroup, Explain, NodeGroupSpec, OnErrorPolicy, PoolManagedNodeGroup,
    ProvisioningModel, Report, SimulationSpec, SimulationState, node_group_spec::Kind,
    simulation_spec::TraceSource,
};

use crate::run::{run_simulation, simulate::state_name};

const GROUP: &str = "m5-large";
const SKELETON: &str = include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml");
/// The fixed group without cluster-autoscaler: too small for 20 web pods on purpose.
const FIXED_NODES: i32 = 4;
/// The group cluster-autoscaler resizes.
const AUTOSCALED: (i32, i32, i32) = (1, 10, 2);
/// Set (by deploy/demo.sh) to why cluster-autoscaler could not be built: the demo then runs on
/// the fixed-size group and says so.
const NO_AUTOSCALER_ENV: &str = "KSIM_DEMO_NO_AUTOSCALER";

/// `ksim demo --write-trace FILE`: the bundled trace, for `ksim run` or an experiment.
pub fn write_trace(path: &Path) -> anyhow::Result<()> {
    let label = format!("--write-trace {}", path.display());
    let trace = example::example_trace().context("writing the demo trace")?;
    crate::files::write_whole(&label, path, &trace)
}

/// The demo's provisioning model: nodes boot in tens of seconds (recorded time), a fraction of
/// a real cloud's minutes so the demo stays short, and linger briefly when removed.
const DEMO_PROVISIONING: &str = "\
name: demo
source: ksim demo (short cloud delays, docs/provisioning.md)
seed: 1
nodes:
  default:
    registration: {p50: 20s, p90: 35s}
    ready: 5s
    termination: 10s
";

fn demo_provisioning() -> ProvisioningModel {
    ProvisioningModel {
        source: "ksim demo".to_owned(),
        yaml: DEMO_PROVISIONING.to_owned(),
    }
}

pub async fn run(speed: f64) -> anyhow::Result<()> {
    // Checked before anything starts: the driver would refuse it only after a minute of set-up.
    anyhow::ensure!(
        speed.is_finite() && speed > 0.0,
        "--speed must be a positive number, got {speed}"
    );
    let mut out = std::io::stdout();
    let started = Instant::now();
    // Checked here so the demo can say up front what it will and will not show.
    let without_autoscaler = match std::env::var(NO_AUTOSCALER_ENV) {
        Ok(reason) if !reason.is_empty() => Some(reason),
        _ => ClusterAutoscalerBinary::locate()
            .err()
            .map(|e| e.to_string()),
    };
    let autoscaler = without_autoscaler.is_none();
    writeln!(
        out,
        "ksim demo: replays a recorded scenario of namespace `{}` on virtual nodes and reports on it",
        example::NAMESPACE
    )?;
    if let Some(reason) = &without_autoscaler {
        writeln!(
            out,
            "ksim demo: runs without cluster-autoscaler, so node group {GROUP} keeps {FIXED_NODES} \
             nodes: {reason}"
        )?;
    }
    writeln!(
        out,
        "ksim demo: starting the local environment (control plane {}, tracer, pool, cloud provider, driver) ...",
        ksim_localenv::kubernetes_version()
    )?;
    let options = EnvironmentOptions {
        autoscaler,
        // A demo of minutes shows CA's decisions in seconds, set here, not CA's defaults.
        autoscaler_flags: FAST_FLAGS.iter().map(|&flag| flag.to_owned()).collect(),
        ..Default::default()
    };
    // Before the replay installs its own handler, Ctrl-C would kill ksim and leave the
    // environment (in a process group of its own) running; dropping the start stops it.
    let env = tokio::select! {
        env = EnvironmentProcess::start(&options) => env.context("starting the local environment")?,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted while starting the local environment"),
    };
    writeln!(
        out,
        "  up after {}; logs in {}",
        seconds(started.elapsed()),
        env.state_dir().join("logs").display()
    )?;

    let result = replay(&env, autoscaler, speed, &mut out).await;
    // A closed stdout must not skip the orderly shutdown.
    let _ = writeln!(out, "ksim demo: stopping the local environment ...");
    env.shutdown().await;
    result?;
    writeln!(out, "ksim demo: done in {}", seconds(started.elapsed()))?;
    Ok(())
}

async fn replay(
    env: &EnvironmentProcess,
    autoscaler: bool,
    speed: f64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let trace = example::example_trace().context("writing the demo trace")?;
    let length = Duration::from_millis(u64::try_from(example::LENGTH_MS).unwrap_or_default());
    writeln!(
        out,
        "ksim demo: the trace: {}s recorded; Deployment {} ({} CPU, {} memory per pod) has 2 pods, \
         20 from 20s, 5 from 80s; Job {} runs 3 pods of 15s at 100s",
        length.as_secs(),
        example::DEPLOYMENT,
        example::WEB_CPU,
        example::WEB_MEMORY,
        example::JOB,
    )?;
    let (min, max, initial) = AUTOSCALED;
    let group = if autoscaler {
        writeln!(
            out,
            "ksim demo: node group {GROUP}: {initial} nodes, cluster-autoscaler may resize it to {min}..{max}"
        )?;
        Kind::Deployment(DeploymentNodeGroup {
            name: GROUP.to_owned(),
            node_skeleton_yaml: SKELETON.to_owned(),
            min_size: min,
            max_size: max,
            initial_size: initial,
        })
    } else {
        writeln!(
            out,
            "ksim demo: node group {GROUP}: {FIXED_NODES} nodes, fixed size"
        )?;
        Kind::PoolManaged(PoolManagedNodeGroup {
            name: GROUP.to_owned(),
            node_skeleton_yaml: SKELETON.to_owned(),
            count: FIXED_NODES,
        })
    };
    writeln!(
        out,
        "ksim demo: replaying at {speed}x (about {}) ...",
        seconds(length.div_f64(speed))
    )?;
    let spec = SimulationSpec {
        trace_source: Some(TraceSource::TraceFile(trace)),
        speed,
        duration: None,
        // The driver's default prefix.
        namespace_prefix: String::new(),
        on_error: OnErrorPolicy::Continue as i32,
        node_groups: vec![NodeGroupSpec { kind: Some(group) }],
        enable_autoscaler: autoscaler,
        // The demo trace has no bare pods.
        reschedule_bare_pods: false,
        // The demo's first instant is one small Deployment: nothing to settle.
        settle_start: false,
        // The demo trace holds no HPA.
        replicas: 0,
        // Nodes that take a while to boot, as in a cloud, set here like the demo's other fast
        // settings: the summary names the model.
        provisioning: Some(demo_provisioning()),
        // The environment's own (the fast flags); CA's durations are still divided by the speed.
        configuration: None,
        // The demo's cloud is healthy.
        disruptions: Vec::new(),
        disruption_seed: 0,
        replay_recorded_failures: false,
        // Two pods of each workload explained, so that the demo shows where to ask why.
        explain: Some(Explain {
            pods_per_owner: 2,
            namespaces: Vec::new(),
        }),
    };
    let show_progress = std::io::stdout().is_terminal();
    let outcome = run_simulation(&env.state().urls.driver, spec, out, show_progress).await?;

    explain(&outcome.report, autoscaler, out)?;
    let simulation = &outcome.simulation;
    if simulation.state() != SimulationState::Succeeded {
        anyhow::bail!(
            "simulation {} {}{}",
            simulation.id,
            state_name(simulation.state()),
            if simulation.error_message.is_empty() {
                String::new()
            } else {
                format!(": {}", simulation.error_message)
            }
        );
    }
    Ok(())
}

/// What the report shows about capacity, and where its files are.
fn explain(report: &Report, autoscaler: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let pods = |f: fn(&ksim_proto::ksim::driver::v1::TimelineBucket) -> u64| {
        report.timeline.iter().map(f).max().unwrap_or_default()
    };
    let most_running = pods(|bucket| bucket.pods.map_or(0, |pods| pods.running));
    let most_unscheduled = pods(|bucket| bucket.unscheduled_pods);
    if autoscaler {
        writeln!(
            out,
            "ksim demo: cluster-autoscaler: {}; at most {} nodes, {most_running} pods running and \
             {most_unscheduled} waiting for a node",
            ksim_report::autoscaler_nodes(report),
            report.peak_nodes
        )?;
    } else {
        writeln!(
            out,
            "ksim demo: without cluster-autoscaler the {FIXED_NODES} nodes fit {most_running} pods; \
             the rest stay Pending (at most {most_unscheduled} at once)"
        )?;
    }
    if let Some(files) = &report.artifacts {
        for (what, path) in [
            ("chart (SVG)", &files.svg_path),
            ("timeline (CSV)", &files.csv_path),
            ("report (JSON)", &files.json_path),
        ] {
            if !path.is_empty() {
                writeln!(out, "  {what:<15} {path}")?;
            }
        }
        // The report as a web page beside them, when the charting library is there.
        if let Some(dir) = Path::new(&files.json_path).parent() {
            let page = dir.join("report.html");
            match crate::page::write_html(report, &page, &[Path::new(&files.json_path)]) {
                Ok(()) => writeln!(out, "  {:<15} {}", "web page", page.display())?,
                Err(error) => writeln!(out, "  {:<15} not written: {error:#}", "web page")?,
            }
        }
    }
    // The pod with the most attempts: the one most likely to have waited. Asked of the report
    // directory: the demo's driver stops with it.
    let dir = report
        .artifacts
        .as_ref()
        .and_then(|files| Path::new(&files.json_path).parent());
    let explained = report
        .explanations
        .iter()
        .max_by_key(|pod| pod.attempts.len());
    if let (Some(dir), Some(pod)) = (dir, explained) {
        writeln!(
            out,
            "ksim demo: why a pod went where it did: ksim report {} --pod {}/{}",
            dir.display(),
            pod.namespace,
            pod.name
        )?;
    }
    Ok(())
}

fn seconds(duration: Duration) -> String {
    format!("{:.0}s", duration.as_secs_f64())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use ksim_proto::ksim::driver::v1::{NodeChange, NodeChangeKind, TimelineBucket};

    use super::*;

    #[test]
    fn the_demo_model_is_a_valid_model_with_node_delays() {
        let model = ksim_provisioning::Model::parse("demo", DEMO_PROVISIONING).unwrap();
        assert_eq!(model.name, "demo");
        assert!(!model.nodes.default.is_zero());
    }

    #[test]
    fn explain_names_the_nodes_cluster_autoscaler_added_and_removed() {
        let change = |node: &str, kind: NodeChangeKind| NodeChange {
            offset: None,
            group: GROUP.to_owned(),
            node: node.to_owned(),
            kind: kind.into(),
            ..NodeChange::default()
        };
        let report = Report {
            peak_nodes: 4,
            timeline: vec![TimelineBucket {
                autoscaler_scale_ups: 2,
                autoscaler_scale_downs: 1,
                ..TimelineBucket::default()
            }],
            node_changes: vec![
                change("m5-large-x", NodeChangeKind::Added),
                change("m5-large-y", NodeChangeKind::Added),
                change("m5-large-x", NodeChangeKind::Removed),
            ],
            ..Report::default()
        };
        let mut out = Vec::new();
        explain(&report, true, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "ksim demo: cluster-autoscaler: 2 nodes added (m5-large-x, m5-large-y), \
                 1 removed (m5-large-x); at most 4 nodes"
            ),
            "{text}"
        );
    }
}
