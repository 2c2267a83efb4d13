//! Compiles every `.proto` file under the workspace's `proto/` directory with
//! protox, a protobuf compiler written in Rust, so building needs no `protoc`.
//! Writes the encoded descriptor set (for server reflection) and the prost
//! messages plus, with the `grpc` feature, tonic clients and servers into `OUT_DIR`.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest_dir.join("../../proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    // Cargo scans a directory given here recursively, so adding, removing or
    // editing any .proto file reruns this script.
    println!("cargo:rerun-if-changed={}", proto_dir.display());

    let mut files = Vec::new();
    collect_protos(&proto_dir, &proto_dir, &mut files)?;
    // Sorted so the descriptor set and the generated code are reproducible.
    files.sort();
    if files.is_empty() {
        return Err(format!("no .proto files found under {}", proto_dir.display()).into());
    }

    let mut compiler = protox::Compiler::new([&proto_dir])?;
    // Source info keeps the proto comments, so reflection clients (grpcurl
    // describe) and the generated Rust docs show them; imports make the set
    // self-contained (the well-known types are in it), as reflection requires.
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(&files)?;

    fs::write(
        out_dir.join("ksim_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    // The clients and servers only with the `grpc` feature; the messages always.
    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    let mut builder = tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        // Maps as BTreeMap: a HashMap encodes in an order that changes from one process to
        // the next, and a trace exported twice must be the same bytes.
        .btree_map(".");
    for message in REPORT_JSON_MESSAGES {
        builder = builder.type_attribute(message, REPORT_JSON_DERIVE);
    }
    for enumeration in REPORT_JSON_ENUMS {
        builder = builder.enum_attribute(enumeration, REPORT_JSON_ENUM_DERIVE);
    }
    for (field, attribute) in REPORT_JSON_FIELDS {
        builder = builder.field_attribute(field, attribute);
    }
    builder
        .out_dir(&out_dir)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}

/// The report's messages that `report.json` holds as they are (ksim-report re-exports them):
/// the report is one model, not the proto and a hand-written copy. A field missing from an
/// older report.json reads as its default.
const REPORT_JSON_MESSAGES: &[&str] = &[
    ".ksim.driver.v1.Accelerators",
    ".ksim.driver.v1.AutoscalerOutage",
    ".ksim.driver.v1.ClusterState",
    ".ksim.driver.v1.Costs",
    ".ksim.driver.v1.DelaySamples",
    ".ksim.driver.v1.DisruptionOutcome",
    ".ksim.driver.v1.Disruptions",
    ".ksim.driver.v1.DurationPercentiles",
    ".ksim.driver.v1.Fidelity",
    ".ksim.driver.v1.FidelityBucket",
    ".ksim.driver.v1.FidelityPending",
    ".ksim.driver.v1.FidelitySeries",
    ".ksim.driver.v1.FilterRejection",
    ".ksim.driver.v1.GpuModelSummary",
    ".ksim.driver.v1.GpuPodCount",
    ".ksim.driver.v1.GpuUsage",
    ".ksim.driver.v1.GroupCost",
    ".ksim.driver.v1.NodeChange",
    ".ksim.driver.v1.NodeScore",
    ".ksim.driver.v1.NodesKept",
    ".ksim.driver.v1.NodesKeptReason",
    ".ksim.driver.v1.ObjectError",
    ".ksim.driver.v1.PendingSplit",
    ".ksim.driver.v1.PluginScore",
    ".ksim.driver.v1.PodExplanation",
    ".ksim.driver.v1.PodPhaseCounts",
    ".ksim.driver.v1.Provisioning",
    ".ksim.driver.v1.ReplicaChange",
    ".ksim.driver.v1.Report",
    ".ksim.driver.v1.SchedulingAttempt",
    ".ksim.driver.v1.ResourceUsage",
    ".ksim.driver.v1.TimelineBucket",
    ".ksim.driver.v1.UsageReplay",
    ".ksim.driver.v1.WaitReason",
    ".ksim.driver.v1.WorkloadAvailability",
    ".ksim.driver.v1.WorkloadLimits",
    ".ksim.driver.v1.WorkloadReplicas",
    ".ksim.driver.v1.WorkloadScaling",
    ".ksim.driver.v1.WorkloadUsage",
    ".ksim.env.v1.AppliedConfiguration",
    ".ksim.env.v1.AutoscalerFlag",
    ".ksim.env.v1.AutoscalerFlagNotApplied",
    ".ksim.env.v1.AutoscalerSimulationFlag",
    ".ksim.env.v1.ControllerManagerFlag",
    ".ksim.env.v1.KarpenterRun",
    ".ksim.env.v1.ProviderConfig",
    ".ksim.env.v1.SchedulerConfig",
    ".ksim.trace.v1.GroupVersionKind",
];
const REPORT_JSON_DERIVE: &str =
    "#[derive(serde::Serialize, serde::Deserialize)]\n#[serde(default)]";
/// Enums that are values of their own outside a message (a message's enum field is an `i32`,
/// written by `ksim_proto::json`'s enum words): the driver's observations hold a node change's
/// kind, as `"added"` or `"removed"`.
const REPORT_JSON_ENUMS: &[&str] = &[".ksim.driver.v1.NodeChangeKind"];
const REPORT_JSON_ENUM_DERIVE: &str =
    "#[derive(serde::Serialize, serde::Deserialize)]\n#[serde(rename_all = \"lowercase\")]";
/// Fields report.json names or writes its own way, as it always has: durations as whole
/// milliseconds under a `_ms` name (`ksim_proto::json`), distributions' in fractional ones, and
/// empty lists and maps left out.
const REPORT_JSON_FIELDS: &[(&str, &str)] = &[
    (
        ".ksim.driver.v1.AutoscalerOutage.offset",
        "#[serde(rename = \"offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.AutoscalerOutage.duration",
        "#[serde(rename = \"duration_ms\", with = \"crate::json::millis\")]",
    ),
    // Reports from before the speed and the bucket width were kept ran at 1x in 1 s buckets.
    (
        ".ksim.driver.v1.Report.speed",
        "#[serde(default = \"crate::json::one\")]",
    ),
    (
        ".ksim.driver.v1.Report.bucket_width",
        "#[serde(rename = \"bucket_ms\", with = \"crate::json::millis\", default = \"crate::json::a_second\")]",
    ),
    // Where the files are is the caller's to say, not the file's.
    (".ksim.driver.v1.Report.artifacts", "#[serde(skip)]"),
    (
        ".ksim.driver.v1.Report.autoscaler_outages",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\", with = \"crate::json::autoscaler_outages\")]",
    ),
    (
        ".ksim.driver.v1.Report.node_disruptions",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.Report.warnings",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.Report.trace_transforms",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.Report.fidelity",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.configuration",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.provisioning",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.usage",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.workload_scaling",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.nodes_kept",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.disruptions",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.Report.accelerators",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.gpus",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.pending_gpu_pods",
        "#[serde(skip_serializing_if = \"crate::json::is_zero\")]",
    ),
    (
        ".ksim.driver.v1.Report.explanations",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.SchedulingAttempt.offset",
        "#[serde(rename = \"offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.offset",
        "#[serde(rename = \"offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.recovered_offset",
        "#[serde(rename = \"recovered_offset_ms\", with = \"crate::json::optional_millis\")]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.time_to_recovery",
        "#[serde(rename = \"time_to_recovery_ms\", with = \"crate::json::optional_millis\")]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.zone",
        "#[serde(skip_serializing_if = \"::std::string::String::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.error",
        "#[serde(skip_serializing_if = \"::std::string::String::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.stuck_drains",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\", default)]",
    ),
    (
        ".ksim.driver.v1.DisruptionOutcome.recorded_node",
        "#[serde(skip_serializing_if = \"::std::string::String::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.WorkloadAvailability.time_below_desired",
        "#[serde(rename = \"time_below_desired_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.offset",
        "#[serde(rename = \"offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.time",
        "#[serde(rename = \"time_ms\", with = \"crate::json::unix_millis\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.nodes",
        "#[serde(with = \"crate::json::node_group_counts\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.unscheduled_pods",
        "#[serde(rename = \"unscheduled\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.autoscaler_scale_ups",
        "#[serde(rename = \"scale_ups\")]",
    ),
    (
        ".ksim.driver.v1.TimelineBucket.autoscaler_scale_downs",
        "#[serde(rename = \"scale_downs\")]",
    ),
    (
        ".ksim.driver.v1.Fidelity.bucket_width",
        "#[serde(rename = \"bucket_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.FidelityBucket.offset",
        "#[serde(rename = \"offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.NodeChange.offset",
        "#[serde(rename = \"offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.NodeChange.kind",
        "#[serde(with = \"crate::json::node_change_kind\")]",
    ),
    (
        ".ksim.driver.v1.NodeChange.cause",
        "#[serde(with = \"crate::json::node_change_cause\")]",
    ),
    (
        ".ksim.driver.v1.ObjectError.operation",
        "#[serde(with = \"crate::json::object_operation\")]",
    ),
    (
        ".ksim.driver.v1.ObjectError.trace_offset",
        "#[serde(rename = \"trace_offset_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.PendingSplit.scheduling_pod_seconds",
        "#[serde(rename = \"scheduling\")]",
    ),
    (
        ".ksim.driver.v1.PendingSplit.node_boot_pod_seconds",
        "#[serde(rename = \"node_boot\")]",
    ),
    (
        ".ksim.driver.v1.PendingSplit.start_pod_seconds",
        "#[serde(rename = \"start\")]",
    ),
    (
        ".ksim.driver.v1.DurationPercentiles.p50",
        "#[serde(rename = \"p50_ms\", with = \"crate::json::fractional_millis\")]",
    ),
    (
        ".ksim.driver.v1.DurationPercentiles.p90",
        "#[serde(rename = \"p90_ms\", with = \"crate::json::fractional_millis\")]",
    ),
    (
        ".ksim.driver.v1.DurationPercentiles.p99",
        "#[serde(rename = \"p99_ms\", with = \"crate::json::fractional_millis\")]",
    ),
    (
        ".ksim.driver.v1.DurationPercentiles.max",
        "#[serde(rename = \"max_ms\", with = \"crate::json::fractional_millis\")]",
    ),
    (
        ".ksim.driver.v1.NodesKeptReason.first_seen",
        "#[serde(rename = \"first_seen_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.UsageReplay.interval",
        "#[serde(rename = \"interval_ms\", with = \"crate::json::millis\")]",
    ),
    (
        ".ksim.driver.v1.UsageReplay.workloads",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.UsageReplay.usage_vs_requests",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.GroupCost.instance_types",
        "#[serde(skip_serializing_if = \"::std::collections::BTreeMap::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.Provisioning.delays",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.WorkloadScaling.source",
        "#[serde(with = \"crate::json::replica_source\")]",
    ),
    (
        ".ksim.driver.v1.WorkloadScaling.workloads",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.driver.v1.WorkloadReplicas.scale_events",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    // Reports from before the scheduler's two fields named them `scheduler` and `given_yaml`.
    (
        ".ksim.env.v1.AppliedConfiguration.scheduler_given",
        "#[serde(alias = \"scheduler\")]",
    ),
    (
        ".ksim.env.v1.SchedulerConfig.yaml",
        "#[serde(alias = \"given_yaml\")]",
    ),
    (
        ".ksim.env.v1.AppliedConfiguration.autoscaler_recorded_source",
        "#[serde(skip_serializing_if = \"::std::string::String::is_empty\")]",
    ),
    (
        ".ksim.env.v1.AppliedConfiguration.autoscaler_not_applied",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.env.v1.AppliedConfiguration.autoscaler_simulation_flags",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.env.v1.AppliedConfiguration.controller_manager_flags",
        "#[serde(skip_serializing_if = \"::std::vec::Vec::is_empty\")]",
    ),
    (
        ".ksim.env.v1.AppliedConfiguration.karpenter",
        "#[serde(skip_serializing_if = \"::std::option::Option::is_none\", with = \"crate::json::karpenter_run\")]",
    ),
    (
        ".ksim.env.v1.AutoscalerFlag.source",
        "#[serde(skip_serializing_if = \"crate::json::is_unspecified\", with = \"crate::json::autoscaler_flag_source\")]",
    ),
];

/// Appends the paths of all `.proto` files below `dir`, relative to `root`
/// (protox names files by their path relative to an include directory).
fn collect_protos(root: &Path, dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), Box<dyn Error>> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(root, &path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            files.push(path.strip_prefix(root)?.to_path_buf());
        }
    }
    Ok(())
}
