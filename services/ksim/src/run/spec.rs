//! From `ksim run`'s flags to a `SimulationSpec`: the files are read here, so a missing one is
//! named before the driver is asked anything.

use std::{path::Path, time::SystemTime};

use anyhow::Context;
use ksim_proto::ksim::driver::v1::{
    DeploymentNodeGroup, Explain, KarpenterNodePool, NodeGroupSpec, OnErrorPolicy,
    PoolManagedNodeGroup, ProvisioningModel, ReplicaSource, SimulationSpec, StoredTrace,
    node_group_spec::Kind, simulation_spec::TraceSource,
};
use ksim_proto::ksim::env::v1::{
    Configuration, ProviderConfig, RecordedAutoscalerFlags, SchedulerConfig,
};

use crate::files::{MAX_CONFIG_BYTES, MAX_WHOLE_TRACE_BYTES, read_bounded, read_text_bounded};

use super::{
    RunArgs,
    groups::{AutoscalerGroupArg, NodeGroupArg},
};

/// The skeleton of the default group, so `ksim run trace.ksim` works without a file of its own.
pub const DEFAULT_SKELETON: &str =
    include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml");
pub const DEFAULT_GROUP: &str = "default";
pub const DEFAULT_NODES: i32 = 3;
/// `--karpenter`'s NodePool when no --nodepool is given.
pub const DEFAULT_NODEPOOL: &str =
    include_str!("../../../../deploy/karpenter/nodepool-default.yaml");

pub fn build(args: &RunArgs) -> anyhow::Result<SimulationSpec> {
    // The flag's parser checks it too; an experiment's speeds come from its file.
    super::check_speed(args.speed)
        .map_err(|error| anyhow::anyhow!("speed {}: {error}", args.speed))?;
    // Checked here: clap's `requires` counts a boolean flag's default as given.
    if !args.stored && (args.trace_id.is_some() || args.start.is_some() || args.end.is_some()) {
        anyhow::bail!("--trace-id, --start and --end select a stored trace: add --stored");
    }
    if args.stored && args.transform.is_some() {
        // The driver reads stored windows from the tracer itself; the CLI never sees them.
        anyhow::bail!(
            "--transform applies to a trace file, not to --stored windows: export the window with \
             `ksim trace export --transform RULES.yaml -o FILE` and run FILE"
        );
    }
    let trace_source = if args.stored {
        TraceSource::StoredTrace(StoredTrace {
            trace_id: args.trace_id.clone().unwrap_or_default(),
            start_time: args.start.map(timestamp),
            end_time: args.end.map(timestamp),
            filter: None,
        })
    } else {
        let path = args
            .trace_file
            .as_deref()
            .context("give a TRACE_FILE, or --stored for a trace in the tracer store")?;
        let bytes = match &args.transform {
            Some(rules_path) => transformed(path, rules_path)?,
            None => read_bounded(path, MAX_WHOLE_TRACE_BYTES, "the trace file")?,
        };
        TraceSource::TraceFile(bytes)
    };
    let mut node_groups = Vec::new();
    for group in &args.node_groups {
        node_groups.push(pool_managed(group)?);
    }
    for group in &args.autoscaler_groups {
        node_groups.push(deployment(group)?);
    }
    let mut nodepools = Vec::with_capacity(args.nodepools.len());
    for path in &args.nodepools {
        nodepools.push(read_text_bounded(path, MAX_CONFIG_BYTES, "the NodePool")?);
    }
    if args.karpenter && nodepools.is_empty() {
        nodepools.push(DEFAULT_NODEPOOL.to_owned());
    }
    for yaml in nodepools {
        node_groups.push(NodeGroupSpec {
            kind: Some(Kind::Karpenter(KarpenterNodePool {
                nodepool_yaml: yaml,
            })),
        });
    }
    if node_groups.is_empty() {
        node_groups.push(NodeGroupSpec {
            kind: Some(Kind::PoolManaged(PoolManagedNodeGroup {
                name: DEFAULT_GROUP.to_owned(),
                node_skeleton_yaml: DEFAULT_SKELETON.to_owned(),
                count: DEFAULT_NODES,
            })),
        });
    }
    let duration = args
        .duration
        .map(prost_types::Duration::try_from)
        .transpose()
        .context("--duration is too long")?;
    Ok(SimulationSpec {
        trace_source: Some(trace_source),
        speed: args.speed,
        duration,
        namespace_prefix: args.namespace_prefix.clone().unwrap_or_default(),
        on_error: OnErrorPolicy::from(args.on_error) as i32,
        node_groups,
        enable_autoscaler: args.autoscaler,
        reschedule_bare_pods: args.reschedule_bare_pods,
        settle_start: args.settle,
        replicas: args
            .replicas
            .map_or(ReplicaSource::Unspecified, ReplicaSource::from) as i32,
        configuration: configuration(args)?,
        provisioning: args
            .provisioning
            .as_deref()
            .map(provisioning_model)
            .transpose()?,
        disruptions: args
            .node_failures
            .iter()
            .chain(&args.zone_outages)
            .chain(&args.stockouts)
            .chain(&args.spot_interruptions)
            .chain(&args.node_pool_upgrades)
            .cloned()
            .collect(),
        disruption_seed: args.disruption_seed,
        replay_recorded_failures: args.replay_failures,
        explain: args.explain.then(|| Explain {
            pods_per_owner: args.explain_per_owner,
            namespaces: args.explain_namespace.clone(),
        }),
    })
}

/// `--provisioning`: a built-in model's name, else a model file, checked here so a bad one is
/// named before the driver is asked anything (the driver checks its groups).
pub fn provisioning_model(given: &str) -> anyhow::Result<ProvisioningModel> {
    use ksim_provisioning::{INSTANT, Model, PUBLISHED};
    if given == INSTANT || given == PUBLISHED {
        let model = Model::builtin(given)?;
        return Ok(ProvisioningModel {
            source: "built in".to_owned(),
            yaml: model.to_yaml(),
        });
    }
    let path = Path::new(given);
    let yaml = read_text_bounded(path, MAX_CONFIG_BYTES, "the provisioning model")?;
    Model::parse(given, &yaml).map_err(|error| anyhow::anyhow!("--provisioning {error}"))?;
    Ok(ProvisioningModel {
        source: given.to_owned(),
        yaml,
    })
}

/// The configuration under test: the scheduler and provider files' text and the CA flags as
/// given.
fn configuration(args: &RunArgs) -> anyhow::Result<Option<Configuration>> {
    if !args.autoscaler_args.is_empty() && !args.autoscaler {
        anyhow::bail!("--autoscaler-arg configures cluster-autoscaler: add --autoscaler");
    }
    if args.autoscaler_flags_file.is_some() && !args.autoscaler {
        anyhow::bail!("--autoscaler-flags-file configures cluster-autoscaler: add --autoscaler");
    }
    let recorded_autoscaler = match &args.autoscaler_flags_file {
        Some(path) => {
            let text = read_text_bounded(path, MAX_CONFIG_BYTES, "the autoscaler flags file")?;
            let args =
                ksim_experiment::autoscaler::recorded::parse_file(&text).map_err(|error| {
                    anyhow::anyhow!("--autoscaler-flags-file {}: {error}", path.display())
                })?;
            Some(RecordedAutoscalerFlags {
                source: format!("file {}", path.display()),
                args,
            })
        }
        None => None,
    };
    let scheduler = match &args.scheduler_config {
        Some(path) => Some(SchedulerConfig {
            source: path.display().to_string(),
            yaml: read_text_bounded(path, MAX_CONFIG_BYTES, "the scheduler configuration")?,
        }),
        None => None,
    };
    let provider = match &args.provider_config {
        Some(path) => Some(ProviderConfig {
            source: path.display().to_string(),
            yaml: read_text_bounded(path, MAX_CONFIG_BYTES, "the provider configuration")?,
        }),
        None => None,
    };
    if scheduler.is_none()
        && provider.is_none()
        && args.autoscaler_args.is_empty()
        && recorded_autoscaler.is_none()
    {
        return Ok(None);
    }
    Ok(Some(Configuration {
        scheduler,
        autoscaler_args: args.autoscaler_args.clone(),
        provider,
        recorded_autoscaler,
    }))
}

/// The trace file transformed by the rules file, through a temporary file so memory holds
/// only the result that is sent.
fn transformed(trace: &Path, rules_path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::{Read, Seek};

    let rules = crate::trace::transform::load_rules(rules_path)?;
    let file = tempfile::tempfile().context("creating a temporary file")?;
    let (mut file, summary) = crate::trace::transform::transform_to(trace, file, &rules)?;
    eprintln!(
        "ksim: transformed {} with {} rules: {} of {} events, {} of {} pod lifecycles",
        trace.display(),
        rules.len(),
        summary.stats.events_out,
        summary.stats.events_in,
        summary.stats.lifecycles_out,
        summary.stats.lifecycles_in
    );
    let mut bytes = Vec::new();
    file.rewind()
        .and_then(|()| {
            (&mut file)
                .take(MAX_WHOLE_TRACE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
        })
        .context("reading the transformed trace")?;
    anyhow::ensure!(
        bytes.len() <= MAX_WHOLE_TRACE_BYTES,
        "{} transformed by {} is over the {} limit for a trace sent to the driver",
        trace.display(),
        rules_path.display(),
        ksim_grpc::files::describe_bytes(MAX_WHOLE_TRACE_BYTES)
    );
    Ok(bytes)
}

fn pool_managed(group: &NodeGroupArg) -> anyhow::Result<NodeGroupSpec> {
    Ok(NodeGroupSpec {
        kind: Some(Kind::PoolManaged(PoolManagedNodeGroup {
            name: group.name.clone(),
            node_skeleton_yaml: skeleton("--node-group", &group.name, &group.skeleton)?,
            count: group.count,
        })),
    })
}

fn deployment(group: &AutoscalerGroupArg) -> anyhow::Result<NodeGroupSpec> {
    Ok(NodeGroupSpec {
        kind: Some(Kind::Deployment(DeploymentNodeGroup {
            name: group.name.clone(),
            node_skeleton_yaml: skeleton("--autoscaler-group", &group.name, &group.skeleton)?,
            min_size: group.min,
            max_size: group.max,
            initial_size: group.initial,
        })),
    })
}

/// The skeleton's text, refused here when it is over the limit the pool and the provider
/// hold skeletons to, so the error names the file rather than the transport.
fn skeleton(flag: &str, group: &str, path: &Path) -> anyhow::Result<String> {
    read_text_bounded(
        path,
        ksim_nodes::skeleton::MAX_SKELETON_BYTES,
        "the node skeleton",
    )
    .with_context(|| format!("{flag} {group}"))
}

fn timestamp(time: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(time)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::run::OnError;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(argv: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("ksim").chain(argv.iter().copied()))
            .unwrap()
            .run
    }

    #[test]
    fn repeat_counts_from_one() {
        assert_eq!(args(&["t.ktrace"]).repeat, 1);
        assert_eq!(args(&["t.ktrace", "--repeat", "3"]).repeat, 3);
        let zero = Cli::try_parse_from(["ksim", "t.ktrace", "--repeat", "0"]).unwrap_err();
        assert!(zero.to_string().contains("--repeat"), "{zero}");
    }

    #[test]
    fn a_trace_file_alone_gets_the_default_group_and_policy() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.ksim");
        std::fs::write(&trace, b"trace bytes").unwrap();
        let spec = build(&args(&[trace.to_str().unwrap()])).unwrap();
        assert_eq!(
            spec.trace_source,
            Some(TraceSource::TraceFile(b"trace bytes".to_vec()))
        );
        assert_eq!(spec.speed, 1.0);
        assert_eq!(spec.duration, None);
        assert_eq!(spec.on_error, OnErrorPolicy::Continue as i32);
        assert!(!spec.enable_autoscaler);
        let [group] = spec.node_groups.as_slice() else {
            panic!("{:?}", spec.node_groups)
        };
        let Some(Kind::PoolManaged(group)) = &group.kind else {
            panic!("{group:?}")
        };
        assert_eq!((group.name.as_str(), group.count), ("default", 3));
        assert!(group.node_skeleton_yaml.contains("kind: Node"));
    }

    #[test]
    fn karpenter_alone_runs_the_default_nodepool_and_a_given_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.ksim");
        std::fs::write(&trace, b"trace bytes").unwrap();
        let trace = trace.to_str().unwrap();
        let nodepools = |spec: &SimulationSpec| -> Vec<String> {
            spec.node_groups
                .iter()
                .map(|group| match &group.kind {
                    Some(Kind::Karpenter(pool)) => pool.nodepool_yaml.clone(),
                    other => panic!("{other:?}"),
                })
                .collect()
        };

        let spec = build(&args(&[trace, "--karpenter"])).unwrap();
        assert_eq!(nodepools(&spec), [DEFAULT_NODEPOOL]);
        assert!(!spec.enable_autoscaler);
        let default: serde_json::Value = serde_saphyr::from_str(DEFAULT_NODEPOOL).unwrap();
        assert_eq!(default["kind"], "NodePool");
        assert_eq!(default["metadata"]["name"], DEFAULT_GROUP);
        // Karpenter's own disruption defaults: the file sets none.
        assert_eq!(default["spec"].get("disruption"), None);

        let mine = dir.path().join("mine.yaml");
        std::fs::write(&mine, "kind: NodePool\n").unwrap();
        let mine = mine.to_str().unwrap();
        for argv in [
            vec![trace, "--nodepool", mine],
            vec![trace, "--karpenter", "--nodepool", mine],
        ] {
            assert_eq!(
                nodepools(&build(&args(&argv)).unwrap()),
                ["kind: NodePool\n"]
            );
        }
        let both = Cli::try_parse_from(["ksim", trace, "--karpenter", "--autoscaler"]).unwrap_err();
        assert!(both.to_string().contains("--autoscaler"), "{both}");
    }

    #[test]
    fn every_flag_reaches_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let skeleton = dir.path().join("s.yaml");
        std::fs::write(&skeleton, "kind: Node\n").unwrap();
        let skeleton = skeleton.to_str().unwrap();
        let node_group = format!("small={skeleton}:2");
        let autoscaler_group = format!("big={skeleton}:0:5:1");
        let run = args(&[
            "--stored",
            "--trace-id",
            "imp-1",
            "--start",
            "2025-01-01T00:00:00Z",
            "--speed",
            "2.5",
            "--duration",
            "5m",
            "--namespace-prefix",
            "sim",
            "--on-error",
            "stop",
            "--node-group",
            &node_group,
            "--autoscaler-group",
            &autoscaler_group,
            "--autoscaler",
        ]);
        assert_eq!(run.on_error, OnError::Stop);
        assert_eq!(run.duration, Some(Duration::from_secs(300)));
        let spec = build(&run).unwrap();
        let Some(TraceSource::StoredTrace(stored)) = &spec.trace_source else {
            panic!("{:?}", spec.trace_source)
        };
        assert_eq!(stored.trace_id, "imp-1");
        assert_eq!(stored.start_time.unwrap().seconds, 1_735_689_600);
        assert_eq!(stored.end_time, None);
        assert_eq!(spec.speed, 2.5);
        assert_eq!(spec.duration.unwrap().seconds, 300);
        assert_eq!(spec.namespace_prefix, "sim");
        assert_eq!(spec.on_error, OnErrorPolicy::Stop as i32);
        assert!(spec.enable_autoscaler);
        assert_eq!(spec.node_groups.len(), 2);
        let Some(Kind::Deployment(big)) = &spec.node_groups[1].kind else {
            panic!("{:?}", spec.node_groups)
        };
        assert_eq!((big.min_size, big.max_size, big.initial_size), (0, 5, 1));
        assert_eq!(big.node_skeleton_yaml, "kind: Node\n");
    }

    #[test]
    fn transform_rewrites_the_trace_file_before_it_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.ksim");
        let header = ksim_trace::pb::TraceHeader {
            start_time: Some(ksim_trace::time::timestamp(1_000)),
            ..Default::default()
        };
        let (bytes, _) = ksim_trace::TraceWriter::new(Vec::new(), &header)
            .unwrap()
            .finish()
            .unwrap();
        std::fs::write(&trace, bytes).unwrap();
        let rules = dir.path().join("rules.yaml");
        std::fs::write(&rules, "rules:\n  - shiftTime: 1s\n").unwrap();
        let (trace, rules) = (trace.to_str().unwrap(), rules.to_str().unwrap());
        let spec = build(&args(&[trace, "--transform", rules])).unwrap();
        let Some(TraceSource::TraceFile(sent)) = spec.trace_source else {
            panic!("{:?}", spec.trace_source)
        };
        let header = ksim_trace::read_trace(&sent).unwrap().header;
        assert_eq!(header.transforms, ["rule 1 (line 2): shiftTime 1s"]);
        assert_eq!(header.start_time, Some(ksim_trace::time::timestamp(2_000)));

        let error = build(&args(&["--stored", "--transform", rules])).unwrap_err();
        assert!(
            error.to_string().contains("not to --stored windows"),
            "{error}"
        );
    }

    #[test]
    fn a_speed_the_driver_would_refuse_is_refused_here() {
        // An experiment file's speed reaches `build` without the flag's parser.
        let mut run = args(&["--stored"]);
        run.speed = 5000.0;
        let error = build(&run).unwrap_err().to_string();
        assert!(
            error.contains("speed 5000") && error.contains("1000"),
            "{error}"
        );
    }

    #[test]
    fn a_window_without_stored_is_refused() {
        let error = build(&args(&["t", "--start", "2025-01-01T00:00:00Z"])).unwrap_err();
        assert!(error.to_string().contains("add --stored"), "{error}");
    }

    #[test]
    fn unreadable_files_are_named() {
        let error = build(&args(&["/nonexistent/t.ksim"])).unwrap_err();
        assert!(
            format!("{error:#}").contains("cannot read the trace file /nonexistent/t.ksim"),
            "{error:#}"
        );
        let error = build(&args(&[
            "--stored",
            "--node-group",
            "g=/nonexistent/s.yaml:1",
        ]))
        .unwrap_err();
        assert!(
            format!("{error:#}")
                .contains("--node-group g: cannot read the node skeleton /nonexistent/s.yaml: "),
            "{error:#}"
        );
    }

    #[test]
    fn files_over_their_limit_are_refused_naming_the_file_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("m5.yaml");
        let padding = "#".repeat(ksim_nodes::skeleton::MAX_SKELETON_BYTES);
        std::fs::write(&big, format!("kind: Node\n{padding}")).unwrap();
        let big_group = format!("m5={}:3", big.display());
        for (argv, message) in [
            (
                vec!["--stored", "--node-group", "m5=/dev/zero:3"],
                "--node-group m5: /dev/zero: does not end within the 256 KiB limit for the node \
                 skeleton"
                    .to_owned(),
            ),
            (
                vec!["--stored", "--node-group", &big_group],
                format!(
                    "--node-group m5: {}: 262155 bytes is over the 256 KiB limit for the node \
                     skeleton",
                    big.display()
                ),
            ),
            (
                vec!["--stored", "--scheduler-config", "/dev/zero"],
                "/dev/zero: does not end within the 1 MiB limit for the scheduler configuration"
                    .to_owned(),
            ),
        ] {
            let error = build(&args(&argv)).unwrap_err();
            assert_eq!(format!("{error:#}"), message, "{argv:?}");
        }
    }

    #[test]
    fn a_recorded_flags_file_reaches_the_configuration_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.flags");
        std::fs::write(
            &file,
            "# production\n--scale-down-unneeded-time=3m\ncloud-provider=aws\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let given = configuration(&args(&[
            "t.ksim",
            "--autoscaler",
            "--autoscaler-flags-file",
            &path,
        ]))
        .unwrap()
        .unwrap();
        let recorded = given.recorded_autoscaler.unwrap();
        assert_eq!(recorded.source, format!("file {path}"));
        assert_eq!(
            recorded.args,
            ["scale-down-unneeded-time=3m", "cloud-provider=aws"]
        );
        std::fs::write(&file, "expander price\n").unwrap();
        let error = configuration(&args(&[
            "t",
            "--autoscaler",
            "--autoscaler-flags-file",
            &path,
        ]))
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "--autoscaler-flags-file {path}: line 1: \"expander price\" is not FLAG=VALUE \
                 (e.g. scale-down-unneeded-time=10m)"
            )
        );
        let error = configuration(&args(&["t", "--autoscaler-flags-file", &path])).unwrap_err();
        assert!(error.to_string().contains("add --autoscaler"), "{error}");
    }

    #[test]
    fn bad_flags_are_refused_naming_the_flag() {
        for (argv, flag) in [
            (&["t", "--duration", "soon"][..], "--duration"),
            (&["t", "--on-error", "ignore"], "--on-error"),
            (&["t", "--node-group", "nonsense"], "--node-group"),
            (&["t", "--speed", "-1"], "--speed"),
            (&["t", "--stored"], "--stored"),
        ] {
            let error = Cli::try_parse_from(std::iter::once("ksim").chain(argv.iter().copied()))
                .unwrap_err();
            assert!(error.to_string().contains(flag), "{argv:?}: {error}");
        }
    }
}
