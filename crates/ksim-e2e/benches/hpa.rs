//! A replay's lateness with the real HPA controller acting (issue 36): the same trace replayed
//! with the recording deciding replica counts and with the simulated HPAs deciding, side by
//! side on one control plane. Prints figures; asserts none.
//!
//!   cargo bench -p ksim-e2e --bench hpa -- --workloads 50 --speed 10
//!
//! The trace: `--workloads` Deployments of `--pods` pods (100m requested, each using 50m, its
//! HPA's 50% target) for `--minutes` of recorded time, each applied again every minute (a
//! label); halfway, half of them double their load and the recording doubles their replicas,
//! as the recorded HPAs did. Per run: the driver's
//! lateness (when each operation was sent against when it was due), the operations, the HPAs'
//! scale events and the scaled workloads' replica-hours recorded and simulated, and the CPU
//! kube-controller-manager and kube-apiserver spent. kube-controller-manager runs the HPA
//! controller's durations divided by the speed, as `ksim up`'s environment runs them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{num::NonZeroUsize, time::Duration};

use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use ksim_driver::{config::Settings, mesh::Mesh, runtime as driver};
use ksim_grpc::ServeArgs;
use ksim_localenv::ControlPlane;
use ksim_localenv::fixtures::{M5_LARGE_SKELETON, Workload, cpu_hpa};
use ksim_proto::ksim::driver::v1::{self as pb, driver_client::DriverClient};
use ksim_trace::pb as trace;
use ksim_vnode::{config::PoolConfig, runtime as vnode};
use kube::{Api, api::PostParams};
use serde_json::json;

const SEATS: &str = "ksim-system";
const INTERVAL_MS: i64 = 15_000;
const START_MS: i64 = 1_700_000_000_000;

#[derive(Debug, Parser)]
struct Args {
    /// Scaled Deployments, each with its HPA.
    #[arg(long, default_value_t = 50)]
    workloads: usize,
    /// Recorded pods per Deployment before the load doubles.
    #[arg(long, default_value_t = 4)]
    pods: u32,
    /// Recorded minutes.
    #[arg(long, default_value_t = 20)]
    minutes: i64,
    /// Replay speed.
    #[arg(long, default_value_t = 10.0)]
    speed: f64,
    /// Virtual nodes (m5.large).
    #[arg(long, default_value_t = 30)]
    nodes: i32,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The HPA controller's duration flags as the environment runs them at `speed`: KCM's
/// defaults divided, sync-period at least 1 s (docs/local-environment.md).
fn hpa_flags(speed: f64) -> Vec<String> {
    let divided = |seconds: f64, floor: f64| (seconds / speed).max(floor);
    vec![
        format!(
            "--horizontal-pod-autoscaler-sync-period={}ms",
            (divided(15.0, 1.0) * 1000.0) as u64
        ),
        format!(
            "--horizontal-pod-autoscaler-downscale-stabilization={}ms",
            (divided(300.0, 0.001) * 1000.0) as u64
        ),
        format!(
            "--horizontal-pod-autoscaler-initial-readiness-delay={}ms",
            (divided(30.0, 0.001) * 1000.0) as u64
        ),
        format!(
            "--horizontal-pod-autoscaler-cpu-initialization-period={}ms",
            (divided(300.0, 0.001) * 1000.0) as u64
        ),
    ]
}

fn object(kind: &str, name: &str, json: &serde_json::Value) -> trace::TraceObject {
    trace::TraceObject {
        gvk: Some(ksim_trace::gvk::parse(kind).unwrap()),
        namespace: "shop".to_owned(),
        name: name.to_owned(),
        object_json: serde_json::to_vec(json).unwrap(),
    }
}

/// The trace described in the module's comment.
fn trace_file(args: &Args) -> Vec<u8> {
    let end_ms = args.minutes * 60_000;
    let half_ms = end_ms / 2;
    let header = trace::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        start_time: Some(ksim_trace::time::timestamp(START_MS)),
        end_time: Some(ksim_trace::time::timestamp(START_MS + end_ms)),
        created_by: "ksim-e2e hpa bench".to_owned(),
        tracer_config: Some(trace::TracerConfig {
            usage_recording: trace::UsageRecording::Recorded as i32,
            usage_interval_ms: INTERVAL_MS,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut writer = ksim_trace::TraceWriter::new(Vec::new(), &header).unwrap();
    let names: Vec<String> = (0..args.workloads).map(|i| format!("web-{i}")).collect();
    let deployment = |name: &str, replicas: u32| {
        Workload::new(name, replicas as i32)
            .requests("100m", "32Mi")
            .json()
    };
    let mut first = Vec::new();
    for name in &names {
        first.push(object(
            "apps/v1.Deployment",
            name,
            &deployment(name, args.pods),
        ));
        first.push(object(
            "autoscaling/v2.HorizontalPodAutoscaler",
            name,
            &cpu_hpa("shop", name, 50, 40),
        ));
    }
    writer
        .write_event(&trace::TraceEvent {
            timestamp_ms: START_MS,
            applied: first,
            deleted: Vec::new(),
        })
        .unwrap();
    // Every recorded minute each Deployment is applied again (a label, as a deploy tool
    // would), one event each, spread over the minute: what the driver replays on time while
    // the HPAs act. Halfway, the busy half doubles: the recording's HPAs doubled their
    // replicas, and its later applies carry the doubled count.
    let step_ms = 60_000 / i64::try_from(args.workloads.max(1)).unwrap_or(1);
    for minute in 1..args.minutes {
        for (index, name) in names.iter().enumerate() {
            let at_ms = minute * 60_000 + step_ms * i64::try_from(index).unwrap_or(0);
            let busy = index % 2 == 0 && at_ms >= half_ms;
            let replicas = if busy { args.pods * 2 } else { args.pods };
            let mut applied = deployment(name, replicas);
            applied["metadata"]["labels"]["tick"] = json!(minute.to_string());
            writer
                .write_event(&trace::TraceEvent {
                    timestamp_ms: START_MS + at_ms,
                    applied: vec![object("apps/v1.Deployment", name, &applied)],
                    deleted: Vec::new(),
                })
                .unwrap();
        }
    }
    // Each recorded pod at 50m; after halfway the busy half's twice as many pods, still 50m
    // each (so their total doubled).
    let mut lifecycles = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let pods = if index % 2 == 0 {
            args.pods * 2
        } else {
            args.pods
        };
        for pod in 0..pods {
            let start_ms = if pod < args.pods { 0 } else { half_ms };
            lifecycles.push(trace::PodLifecycle {
                owner_gvk: Some(ksim_trace::gvk::parse("apps/v1.Deployment").unwrap()),
                owner_namespace: "shop".to_owned(),
                owner_name: name.clone(),
                pod_spec_hash: 7,
                launch_index: pod,
                start_ms: START_MS + start_ms,
                outcome: trace::PodOutcome::Running as i32,
                pod_name: format!("{name}-{pod}"),
                ..Default::default()
            });
        }
    }
    for lifecycle in &lifecycles {
        writer.write_lifecycle(lifecycle).unwrap();
    }
    for at in (0..end_ms).step_by(INTERVAL_MS as usize) {
        for lifecycle in &lifecycles {
            if lifecycle.start_ms > START_MS + at {
                continue;
            }
            writer
                .write_usage(&trace::UsageSample {
                    timestamp_ms: START_MS + at,
                    window_ms: INTERVAL_MS,
                    namespace: "shop".to_owned(),
                    pod: lifecycle.pod_name.clone(),
                    containers: vec![trace::ContainerUsage {
                        name: "main".to_owned(),
                        cpu_nanocores: 50_000_000,
                        memory_bytes: 16 << 20,
                    }],
                })
                .unwrap();
        }
    }
    writer.finish().unwrap().0
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn millis(duration: Option<&prost_types::Duration>) -> f64 {
    duration.map_or(0.0, |d| {
        d.seconds as f64 * 1000.0 + f64::from(d.nanos) / 1e6
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut builder = ControlPlane::builder();
    for flag in hpa_flags(args.speed) {
        builder = builder.controller_manager_arg(flag);
    }
    let plane = builder.start().await?;
    let client = plane.client();
    let seats = serde_json::from_value(json!({"metadata": {"name": SEATS}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &seats)
        .await?;
    let pool = vnode::start(
        client.clone(),
        PoolConfig {
            namespace: SEATS.to_owned(),
            ..PoolConfig::default()
        },
        ServeArgs::ephemeral(),
    )
    .await?;
    let ip = ksim_kube::aggregation::advertise_address()
        .ok_or_else(|| anyhow::anyhow!("no non-loopback IPv4 address for the metrics API"))?;
    let _metrics_api = ksim_vnode::metrics_api::start_if_enabled(
        client.clone(),
        pool.pool.clone(),
        "bench",
        SEATS,
        &ksim_vnode::config::MetricsApiConfig {
            addr: Some(std::net::SocketAddr::new(ip, 0)),
            ..Default::default()
        },
    )
    .await?;
    let data = tempfile::tempdir()?;
    let service = driver::start(
        // No disruptions: nothing is evicted.
        driver::Clients {
            client: client.clone(),
            evictions: client.clone(),
        },
        Mesh::new(&pool.url(), None, None, None)?,
        Settings {
            namespace: SEATS.to_owned(),
            report_dir: data.path().join("reports"),
            lease_duration: Duration::from_secs(15),
            max_in_flight: NonZeroUsize::new(64).unwrap(),
            keep_finished: 8,
            ready_deadline: Duration::from_secs(300),
            cleanup_deadline: Duration::from_secs(300),
        },
        ServeArgs::ephemeral(),
    )
    .await?;
    let mut driver = DriverClient::connect(service.url()).await?;
    let file = trace_file(&args);
    let pids = plane.pids();
    let pid = |name: &str| {
        pids.iter()
            .find(|(component, _)| *component == name)
            .map_or(0, |(_, pid)| *pid)
    };
    println!(
        "{} workloads x {} pods (half doubling at {} min), {} recorded minutes at {}x, {} nodes",
        args.workloads,
        args.pods,
        args.minutes / 2,
        args.minutes,
        args.speed,
        args.nodes
    );
    println!(
        "{:<9} {:>10} {:>10} {:>10} {:>7} {:>7} {:>13} {:>13} {:>9} {:>9}",
        "replicas",
        "late p50",
        "late p99",
        "late max",
        "ops",
        "scales",
        "rec. rep-h",
        "sim. rep-h",
        "kcm cpu-s",
        "api cpu-s"
    );
    for (label, source) in [
        ("recorded", pb::ReplicaSource::Recorded),
        ("hpa", pb::ReplicaSource::Hpa),
    ] {
        let (kcm, api) = (
            cpu_seconds(pid("kube-controller-manager")),
            cpu_seconds(pid("kube-apiserver")),
        );
        let spec = pb::SimulationSpec {
            trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(file.clone())),
            speed: args.speed,
            namespace_prefix: label.to_owned(),
            node_groups: vec![pb::NodeGroupSpec {
                kind: Some(pb::node_group_spec::Kind::PoolManaged(
                    pb::PoolManagedNodeGroup {
                        name: label.to_owned(),
                        node_skeleton_yaml: M5_LARGE_SKELETON.to_owned(),
                        count: args.nodes,
                    },
                )),
            }],
            provisioning: Some(pb::ProvisioningModel {
                source: "built in".to_owned(),
                yaml: "name: instant\n".to_owned(),
            }),
            replicas: source as i32,
            ..Default::default()
        };
        let id = driver
            .start_simulation(pb::StartSimulationRequest { spec: Some(spec) })
            .await?
            .into_inner()
            .simulation
            .ok_or_else(|| anyhow::anyhow!("no simulation in the answer"))?
            .id;
        let report = loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let simulation = driver
                .get_simulation(pb::GetSimulationRequest { id: id.clone() })
                .await?
                .into_inner()
                .simulation
                .unwrap_or_default();
            if ksim_report::is_terminal(simulation.state()) {
                break driver
                    .get_report(pb::GetReportRequest { id: id.clone() })
                    .await?
                    .into_inner()
                    .report
                    .unwrap_or_default();
            }
        };
        let lateness = report.lateness.unwrap_or_default();
        let scaling = report.workload_scaling.clone().unwrap_or_default();
        let scales: usize = scaling.workloads.iter().map(|w| w.scale_events.len()).sum();
        let hours = |f: fn(&pb::WorkloadReplicas) -> f64| {
            scaling.workloads.iter().map(f).sum::<f64>() / 3600.0
        };
        println!(
            "{:<9} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>7} {:>7} {:>13.2} {:>13.2} {:>9.1} {:>9.1}",
            label,
            millis(lateness.p50.as_ref()),
            millis(lateness.p99.as_ref()),
            millis(lateness.max.as_ref()),
            lateness.count,
            scales,
            hours(|w| w.recorded_replica_seconds),
            hours(|w| w.simulated_replica_seconds),
            cpu_seconds(pid("kube-controller-manager")) - kcm,
            cpu_seconds(pid("kube-apiserver")) - api,
        );
    }
    Ok(())
}
