//! `ksim run`: replay a trace through the driver, follow it, and print its report.

pub mod disruptions;
pub mod groups;
mod progress;
pub mod simulate;
pub mod spec;

use std::{path::PathBuf, time::Duration, time::SystemTime};

use clap::{Args, ValueEnum};
use ksim_proto::ksim::driver::v1::{OnErrorPolicy, ReplicaSource, Report, SimulationState};

use self::groups::{AutoscalerGroupArg, NodeGroupArg};
pub use self::simulate::{run_simulation, state_name};
use crate::driver::DriverArgs;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The trace file to replay (ksim or SimKube), sent with the request.
    #[arg(required_unless_present = "stored", conflicts_with = "stored")]
    pub trace_file: Option<PathBuf>,

    /// Apply the rules of this YAML file to the trace file before it is sent (see
    /// `ksim trace transform`).
    #[arg(long, value_name = "RULES.yaml")]
    pub transform: Option<PathBuf>,

    /// Replay speed relative to the recording: 2 replays twice as fast.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed, allow_negative_numbers = true)]
    pub speed: f64,

    /// Stop the replay after this long (wall clock), e.g. 5m; default: the whole trace.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,

    /// Replayed namespace "ns" becomes "<PREFIX>-ns" (the driver's default: "virtual").
    #[arg(long, value_name = "PREFIX")]
    pub namespace_prefix: Option<String>,

    /// What to do when the cluster refuses a replayed object.
    #[arg(long, value_enum, default_value_t = OnError::Continue)]
    pub on_error: OnError,

    /// A fixed-size node group the pool creates (repeatable). Without any group flag (or
    /// --karpenter): one group "default" of 3 m5.large nodes.
    #[arg(long = "node-group", value_name = "NAME=SKELETON.yaml:COUNT", value_parser = groups::parse_node_group)]
    pub node_groups: Vec<NodeGroupArg>,

    /// A node group cluster-autoscaler may resize (repeatable).
    #[arg(long = "autoscaler-group", value_name = "NAME=SKELETON.yaml:MIN:MAX:INITIAL", value_parser = groups::parse_autoscaler_group)]
    pub autoscaler_groups: Vec<AutoscalerGroupArg>,

    /// Run cluster-autoscaler against the --autoscaler-group groups.
    #[arg(long)]
    pub autoscaler: bool,

    /// Run Karpenter, which launches the nodes for the --nodepool NodePools, or without any
    /// for one NodePool "default" over every instance type the environment offers, with
    /// Karpenter's own disruption defaults (deploy/karpenter/nodepool-default.yaml). The
    /// environment must run Karpenter (`ksim up --karpenter`).
    #[arg(long, conflicts_with = "autoscaler")]
    pub karpenter: bool,

    /// A Karpenter NodePool (karpenter.sh/v1, YAML) the simulation creates and deletes
    /// (repeatable; implies --karpenter). Checked by the apiserver before anything is
    /// created.
    #[arg(long = "nodepool", value_name = "FILE", conflicts_with = "autoscaler")]
    pub nodepools: Vec<PathBuf>,

    /// Run kube-scheduler with this KubeSchedulerConfiguration for the simulation (the
    /// environment restarts it, and with its defaults afterwards). Checked by kube-scheduler
    /// itself before anything is created.
    #[arg(long, value_name = "FILE")]
    pub scheduler_config: Option<PathBuf>,

    /// The cloud provider's pricing and per-group options for the simulation (YAML:
    /// `pricing:`, `nodeGroups:`), instead of those `ksim up` was given. Checked by the provider
    /// itself before anything is created.
    #[arg(long, value_name = "FILE")]
    pub provider_config: Option<PathBuf>,

    /// How long nodes take to boot and go and pods to start, in recorded time: a model file
    /// (`ksim trace calibrate -o`), or a built-in model: `instant` (no delays) or `published`.
    /// Default: the model learned from the trace's recorded nodes, else `published`
    /// (docs/provisioning.md).
    #[arg(long, value_name = "FILE|instant|published")]
    pub provisioning: Option<String>,

    /// A cluster-autoscaler flag for the simulation, over the environment's defaults
    /// (repeatable), durations in recorded time: at --speed S they run divided by S, e.g.
    /// `--autoscaler-arg scale-down-unneeded-time=2m` runs as 12s at 10x.
    #[arg(long = "autoscaler-arg", value_name = "FLAG=VALUE", value_parser = parse_autoscaler_arg)]
    pub autoscaler_args: Vec<String>,

    /// The recorded cluster's cluster-autoscaler flags, one FLAG=VALUE a line ('#' comments),
    /// in place of those of a cluster-autoscaler Deployment the trace holds: they run over
    /// the environment's and under --autoscaler-arg; those a run may not set are not applied,
    /// and the report says so.
    #[arg(long, value_name = "FILE")]
    pub autoscaler_flags_file: Option<PathBuf>,

    /// Recreate a pod the trace holds without an owner when the simulation removes it (a
    /// scale-down, an eviction), as `<name>-clone-<n>`.
    #[arg(long)]
    pub reschedule_bare_pods: bool,

    /// Start from a settled cluster: apply the trace's first instant (what existed when the
    /// recording began), wait until its pods run (or stop changing for 30 s), then start the
    /// clock, with cluster-autoscaler held off the groups until then.
    #[arg(long)]
    pub settle: bool,

    /// Who decides the replica counts of workloads an HPA scales: the recording (its HPAs are
    /// not applied), or the simulated HPAs acting on the replayed usage (their workloads'
    /// recorded count changes are not replayed). Default: hpa for a trace that holds usage
    /// and HPAs, recorded otherwise.
    #[arg(long, value_enum, value_name = "SOURCE")]
    pub replicas: Option<Replicas>,

    /// Fail nodes during the replay (repeatable), in recorded time: GROUP's SHARE of Ready
    /// nodes (default 1, all; chosen by --disruption-seed), or the node NODE of a fixed-size
    /// group (`<group>-<index>`), stop heartbeating AT after the replay's start, for FOR
    /// (default: to the end). The real node lifecycle controller then taints them and the pods
    /// are evicted once their tolerations run out (docs/disruptions.md).
    #[arg(long = "node-failure", value_name = "group=NAME|node=NAME,at=DURATION[,share=S][,for=DURATION]", value_parser = disruptions::parse_node_failure)]
    pub node_failures: Vec<ksim_proto::ksim::driver::v1::Disruption>,

    /// Take a zone away during the replay (repeatable), in recorded time: every node of the
    /// run's groups in ZONE (their skeletons' topology.kubernetes.io/zone, and the NodePools'
    /// nodes there) fails AT after the replay's start, and the autoscaler groups there get no
    /// capacity (Karpenter's offerings there are withdrawn), for FOR (default: to the end);
    /// then the nodes come back.
    #[arg(long = "zone-outage", value_name = "zone=ZONE,at=DURATION[,for=DURATION]", value_parser = disruptions::parse_zone_outage)]
    pub zone_outages: Vec<ksim_proto::ksim::driver::v1::Disruption>,

    /// Refuse every scale-up of an autoscaler group during the replay (repeatable), in
    /// recorded time, as a cloud out of capacity: cluster-autoscaler backs the group off and
    /// falls back to another. Of a NodePool, its offerings (of TYPE only, if given) are
    /// withdrawn: Karpenter launches another.
    #[arg(long = "stockout", value_name = "group=NAME,at=DURATION[,for=DURATION][,instance-type=TYPE]", value_parser = disruptions::parse_stockout)]
    pub stockouts: Vec<ksim_proto::ksim::driver::v1::Disruption>,

    /// Reclaim spot nodes of an autoscaler group (or a NodePool's spot nodes) during the
    /// replay (repeatable), in recorded time: one node AT after the replay's start, or each
    /// Ready node at RATE per hour (from AT, for FOR). Each gets NOTICE (default 2m, as AWS
    /// gives): cordoned and drained through the eviction API, PodDisruptionBudgets respected;
    /// then its instance goes and the group replaces it.
    #[arg(long = "spot-interruption", value_name = "group=NAME,at=DURATION|rate=R[,at=..][,for=..][,notice=DURATION]", value_parser = disruptions::parse_spot_interruption)]
    pub spot_interruptions: Vec<ksim_proto::ksim::driver::v1::Disruption>,

    /// Replace every node of an autoscaler group during the replay, as a managed node group's
    /// surge upgrade does, in recorded time (repeatable, one per group): MAX-SURGE new nodes
    /// first (default 1), never more than MAX-UNAVAILABLE below the group's size (default 0),
    /// each old node drained through the eviction API for at most DRAIN-TIMEOUT (default 1h),
    /// then removed.
    #[arg(long = "node-pool-upgrade", value_name = "group=NAME,at=DURATION[,max-surge=N][,max-unavailable=N][,drain-timeout=DURATION]", value_parser = disruptions::parse_node_pool_upgrade)]
    pub node_pool_upgrades: Vec<ksim_proto::ksim::driver::v1::Disruption>,

    /// Chooses which nodes the disruptions take: the same seed, the same nodes.
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub disruption_seed: u64,

    /// Replay the failures the recording observed: each recorded node that went NotReady
    /// after being Ready, or vanished while Ready, without an autoscaler or a cordon removing
    /// it, fails a Ready node of the run's group of the same name at the same recorded time,
    /// for as long as it stayed down (docs/disruptions.md).
    #[arg(long)]
    pub replay_failures: bool,

    /// Ask the scheduler why each replayed pod went where it did: the nodes each filter ruled
    /// out and why, each score plugin's score of the chosen node and its runners-up; then
    /// `ksim report ID --pod NS/NAME` prints it (docs/explain.md). Needs the environment's
    /// scheduler, ksim-scheduler.
    #[arg(long)]
    pub explain: bool,

    /// With --explain: at most N pods of each workload, the first the scheduler tries (0: every
    /// pod).
    #[arg(long, value_name = "N", default_value_t = 10, requires = "explain")]
    pub explain_per_owner: u32,

    /// With --explain: only pods of this recorded namespace (repeatable; default: all).
    #[arg(long, value_name = "NAMESPACE", requires = "explain")]
    pub explain_namespace: Vec<String>,

    /// Run the simulation N times, one after another (each with its own report), then print
    /// the spread of peak nodes, pending p99 and scale-ups over the runs.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,

    /// Replay a window of the tracer store instead of a trace file.
    #[arg(long)]
    pub stored: bool,

    /// With --stored: an imported trace's id; default: the tracer's own recording.
    #[arg(long, value_name = "ID")]
    pub trace_id: Option<String>,

    /// With --stored: start of the window, RFC 3339 in UTC (2025-01-31T12:00:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = humantime::parse_rfc3339_weak)]
    pub start: Option<SystemTime>,

    /// With --stored: end of the window (exclusive), RFC 3339 in UTC; default: now for the
    /// tracer's recording, where an imported trace's recording ended for --trace-id.
    #[arg(long, value_name = "RFC3339", value_parser = humantime::parse_rfc3339_weak)]
    pub end: Option<SystemTime>,

    #[command(flatten)]
    pub driver: DriverArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Replicas {
    /// Replay the recorded counts.
    Recorded,
    /// The simulated HPAs decide.
    Hpa,
}

impl From<Replicas> for ReplicaSource {
    fn from(replicas: Replicas) -> Self {
        match replicas {
            Replicas::Recorded => Self::Recorded,
            Replicas::Hpa => Self::Hpa,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnError {
    /// Record the error in the report and go on.
    Continue,
    /// Record the error and stop the simulation (it fails).
    Stop,
}

impl From<OnError> for OnErrorPolicy {
    fn from(on_error: OnError) -> Self {
        match on_error {
            OnError::Continue => Self::Continue,
            OnError::Stop => Self::Stop,
        }
    }
}

/// `FLAG=VALUE`, checked as far as it can be without the binary (which judges the name).
fn parse_autoscaler_arg(text: &str) -> Result<String, String> {
    text.parse::<ksim_experiment::AutoscalerFlag>()
        .map(|flag| format!("{}={}", flag.name, flag.value))
        .map_err(|error| error.to_string())
}

fn parse_speed(text: &str) -> Result<f64, String> {
    check_speed(text.parse::<f64>().unwrap_or(f64::NAN))
}

/// The driver's bounds, so a speed it would refuse starts nothing (an experiment's later
/// variant included).
pub fn check_speed(speed: f64) -> Result<f64, String> {
    use ksim_report::{MAX_SPEED, MIN_SPEED};
    if (MIN_SPEED..=MAX_SPEED).contains(&speed) {
        Ok(speed)
    } else {
        Err(format!(
            "expected a number from {MIN_SPEED} to {MAX_SPEED}, e.g. 1 or 2.5"
        ))
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let spec = spec::build(&args)?;
    let driver_url = args.driver.resolve()?;
    if let Some(refusal) = unscaled_groups_refusal(
        &args.autoscaler_groups,
        args.autoscaler,
        environment_runs_autoscaler(&args, &driver_url).await,
    ) {
        anyhow::bail!(refusal);
    }
    let mut out = std::io::stdout();
    if args.repeat > 1 {
        return repeat(&driver_url, spec, args.repeat, args.replicas, &mut out).await;
    }
    let outcome = run_simulation(&driver_url, spec, &mut out, true).await?;
    if let Some(warning) = hpa_mode_warning(args.replicas, &outcome.report) {
        eprintln!("{warning}");
    }
    let simulation = &outcome.simulation;
    match simulation.state() {
        SimulationState::Failed => anyhow::bail!(
            "simulation {} failed: {}",
            simulation.id,
            simulation.error_message
        ),
        // A script must not mistake an interrupted replay for a finished one.
        SimulationState::Cancelled => anyhow::bail!("simulation {} was cancelled", simulation.id),
        _ => Ok(()),
    }
}

/// `--replicas hpa` for a trace without HPAs, or without the usage they act on: the driver
/// replays it all the same, and the run looks like an HPA run that scaled nothing. Judged from
/// the report, which says what the trace held whatever its source (a file of either format, a
/// stored window).
fn hpa_mode_warning(replicas: Option<Replicas>, report: &Report) -> Option<String> {
    if replicas != Some(Replicas::Hpa) {
        return None;
    }
    let hpas = report.workload_scaling.as_ref()?.hpas > 0;
    // The report has a usage replay only when the trace held usage.
    let missing = match (hpas, report.usage.is_some()) {
        (true, true) => return None,
        (false, false) => "neither usage nor HorizontalPodAutoscalers",
        (false, true) => "no HorizontalPodAutoscaler",
        (true, false) => "HorizontalPodAutoscalers but no usage for them to act on",
    };
    Some(format!(
        "ksim: warning: --replicas hpa: the trace holds {missing}, so the HPA mode had nothing \
         to act on"
    ))
}

/// `--autoscaler-group` without `--autoscaler` where the environment runs cluster-autoscaler
/// anyway (a run without it keeps the environment's own): CA would resize the groups and the
/// report would say the run had none. Without a CA there, such a group is an autoscaler group of fixed
/// size, which is fine.
fn unscaled_groups_refusal(
    groups: &[AutoscalerGroupArg],
    autoscaler: bool,
    environment_runs_autoscaler: bool,
) -> Option<String> {
    let first = groups.first()?;
    (!autoscaler && environment_runs_autoscaler).then(|| {
        format!(
            "--autoscaler-group {}: this environment runs cluster-autoscaler, which would resize \
             the group though the run has no --autoscaler: add --autoscaler",
            first.name
        )
    })
}

/// Whether the environment of the driver at `driver_url` would run cluster-autoscaler for a run
/// without it, as its CheckConfiguration answers (nothing is restarted). Only asked when it
/// matters, and only of the environment in the state directory whose driver this is; an
/// environment that cannot be asked counts as running none (the run goes on as before).
async fn environment_runs_autoscaler(args: &RunArgs, driver_url: &str) -> bool {
    use ksim_proto::ksim::env::v1::{
        CheckConfigurationRequest, Run, environment_client::EnvironmentClient,
    };
    if args.autoscaler || args.autoscaler_groups.is_empty() {
        return false;
    }
    use ksim_localenv::environment::state::{EnvState, state_dir};
    let state = state_dir().and_then(|dir| EnvState::read(&dir));
    let Ok(Some(state)) = state else {
        return false;
    };
    if state.urls.driver != driver_url {
        return false;
    }
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(state.urls.environment) else {
        return false;
    };
    let Ok(channel) = endpoint
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
    else {
        return false;
    };
    let run = Run {
        speed: args.speed,
        ..Default::default()
    };
    match EnvironmentClient::new(channel)
        .check_configuration(CheckConfigurationRequest { run: Some(run) })
        .await
    {
        Ok(response) => response
            .into_inner()
            .configuration
            .is_some_and(|configuration| configuration.autoscaler),
        Err(status) => {
            tracing::debug!(%status, "asking the environment whether it runs cluster-autoscaler");
            false
        }
    }
}

/// `--repeat N`: the same spec N times in a row. A failed run is reported and the next one
/// starts; a cancelled one (Ctrl-C) stops the series. The driver ends a run only after its
/// cleanup and lease release, so the next one can start at once.
async fn repeat(
    driver_url: &str,
    spec: ksim_proto::ksim::driver::v1::SimulationSpec,
    times: u32,
    replicas: Option<Replicas>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for round in 1..=times {
        writeln!(out, "ksim: run {round} of {times}")?;
        let outcome = run_simulation(driver_url, spec.clone(), out, true).await?;
        let state = outcome.simulation.state();
        runs.push(ksim_report::RepeatRun {
            simulation_id: outcome.simulation.id.clone(),
            state,
            report: Some(outcome.report),
        });
        if state == SimulationState::Cancelled {
            break;
        }
    }
    write!(out, "{}", ksim_report::repeat_summary(&runs).render())?;
    // Every run replays the same trace: its first report says what it holds.
    if let Some(warning) = runs
        .iter()
        .find_map(|run| hpa_mode_warning(replicas, run.report.as_ref()?))
    {
        eprintln!("{warning}");
    }
    for run in &runs {
        writeln!(out, "  {}  {}", run.simulation_id, state_name(run.state))?;
    }
    let failed = runs
        .iter()
        .filter(|run| run.state == SimulationState::Failed)
        .count();
    if runs.len() < times as usize {
        anyhow::bail!(
            "cancelled after {} of {times} runs ({failed} failed)",
            runs.len()
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {times} simulations failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autoscaler_groups_without_autoscaler_are_refused_where_ca_runs_anyway() {
        let group = |name: &str| AutoscalerGroupArg {
            name: name.to_owned(),
            skeleton: PathBuf::from("m5.yaml"),
            min: 1,
            max: 10,
            initial: 2,
        };
        let groups = [group("m5"), group("c5")];
        let refusal = unscaled_groups_refusal(&groups, false, true).unwrap();
        assert!(
            refusal.starts_with("--autoscaler-group m5:") && refusal.ends_with("add --autoscaler"),
            "{refusal}"
        );
        assert_eq!(refusal.lines().count(), 1);
        // CA runs for the run as asked; no CA to resize them; no groups.
        assert_eq!(unscaled_groups_refusal(&groups, true, true), None);
        assert_eq!(unscaled_groups_refusal(&groups, false, false), None);
        assert_eq!(unscaled_groups_refusal(&[], false, true), None);
    }

    #[test]
    fn hpa_mode_on_a_trace_without_hpas_or_usage_is_warned_once() {
        use ksim_proto::ksim::driver::v1::{UsageReplay, WorkloadScaling};
        let report = |hpas: u64, usage: bool| Report {
            workload_scaling: Some(WorkloadScaling {
                source: ReplicaSource::Hpa as i32,
                hpas,
                ..Default::default()
            }),
            usage: usage.then(UsageReplay::default),
            ..Default::default()
        };
        let hpa = Some(Replicas::Hpa);
        let warning = hpa_mode_warning(hpa, &report(0, false)).unwrap();
        assert!(
            warning.starts_with("ksim: warning: --replicas hpa:")
                && warning.contains("neither usage nor HorizontalPodAutoscalers")
                && warning.contains("nothing to act on"),
            "{warning}"
        );
        assert_eq!(warning.lines().count(), 1);
        assert!(
            hpa_mode_warning(hpa, &report(2, false))
                .unwrap()
                .contains("no usage")
        );
        assert!(
            hpa_mode_warning(hpa, &report(0, true))
                .unwrap()
                .contains("no HorizontalPodAutoscaler")
        );
        // Something to act on; HPA mode not asked for; a report that does not say.
        assert_eq!(hpa_mode_warning(hpa, &report(2, true)), None);
        assert_eq!(hpa_mode_warning(None, &report(0, false)), None);
        assert_eq!(
            hpa_mode_warning(Some(Replicas::Recorded), &report(0, false)),
            None
        );
        assert_eq!(hpa_mode_warning(hpa, &Report::default()), None);
    }

    #[test]
    fn speed_must_be_within_the_drivers_bounds() {
        assert_eq!(parse_speed("2.5"), Ok(2.5));
        assert_eq!(parse_speed("1000"), Ok(1000.0));
        assert_eq!(parse_speed("0.001"), Ok(0.001));
        for bad in ["0", "-1", "inf", "NaN", "fast", "1000.5", "0.0009"] {
            assert!(parse_speed(bad).is_err(), "{bad}");
        }
    }
}
