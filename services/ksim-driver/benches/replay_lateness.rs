//! Replay lateness and apply throughput on the real control plane. A trace of `--rate` due
//! events a second for `--seconds`, replayed at each `--speeds` (at 10x the trace records a
//! tenth of the rate), on a fresh control plane per `--planes` tuning (`ksim_testenv::tuning`).
//!
//! `--workload configmaps`: each event one server-side apply of a ConfigMap, `--objects`
//! ConfigMaps updated round-robin. `--workload mixed`: ConfigMaps, Deployments (0 replicas)
//! and Jobs (suspended), applied and, every fifth round, deleted and made again; the
//! controllers' pods would measure the scheduler, not the replay.
//!
//! Before and after the replays the same operations are run straight from a kube client
//! (no driver), 32 at a time: the apiserver's ceiling for that trace, in the same run.
//!
//! `cargo bench -p ksim-driver --bench replay_lateness -- [--workload mixed] [--rates 1000,2000]`
//! with KSIM_CONTROL_PLANE_BIN_DIR set (deploy/control-plane/build.sh prints it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    time::Duration,
};

use clap::Parser;
use k8s_openapi::api::{apps::v1::Deployment, batch::v1::Job, core::v1::ConfigMap};
use ksim_driver::{
    config::Settings, driver::Driver, mesh::Mesh, metrics::ReplayMetrics, replay::run::RunContext,
};
use ksim_proto::ksim::driver::v1 as pb;
use ksim_testenv::{ControlPlane, Tuning};
use ksim_trace::pb as trace_pb;
use kube::{
    Api,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};

const NAMESPACE: &str = "bench";

#[derive(Debug, Parser)]
struct Args {
    /// Seconds of replay per run.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Objects the trace updates round-robin.
    #[arg(long, default_value_t = 200)]
    objects: u64,
    /// Due events per second of wall clock.
    #[arg(long, value_delimiter = ',', default_value = "1000,500,200")]
    rates: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_value = "1,10")]
    speeds: Vec<u64>,
    #[arg(long, value_enum, default_value = "configmaps")]
    workload: Workload,
    #[arg(long, value_delimiter = ',', default_value = "simulation")]
    planes: Vec<Tuning>,
    /// The driver's lanes.
    #[arg(long, default_value_t = 128)]
    lanes: usize,
    /// The driver's requests in flight; each value is a run of its own.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    max_in_flight: Vec<usize>,
    /// `cargo bench` passes this to every benchmark binary.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    Configmaps,
    Mixed,
}

/// One operation of the trace, as the plain client runs it too.
#[derive(Debug, Clone)]
struct Operation {
    kind: &'static str,
    name: String,
    /// `None` deletes.
    object: Option<Value>,
}

/// The operations of `events` events, in trace order.
fn operations(workload: Workload, events: u64, objects: u64) -> Vec<Operation> {
    (0..events)
        .map(|i| {
            let o = i % objects;
            let round = i / objects;
            let kind = match (workload, o % 10) {
                (Workload::Configmaps, _) | (Workload::Mixed, 0..=5) => "ConfigMap",
                (Workload::Mixed, 6 | 7) => "Deployment",
                (Workload::Mixed, _) => "Job",
            };
            let name = format!("{}-{o}", kind.to_lowercase());
            let deleted = workload == Workload::Mixed && round % 5 == 4;
            let object = (!deleted).then(|| object(kind, &name, i));
            Operation { kind, name, object }
        })
        .collect()
}

fn object(kind: &str, name: &str, revision: u64) -> Value {
    let metadata = json!({"name": name, "annotations": {"revision": revision.to_string()}});
    let labels = json!({"app": name});
    let restart = if kind == "Job" { "Never" } else { "Always" };
    let template = json!({
        "metadata": {"labels": labels},
        "spec": {"restartPolicy": restart, "containers": [{
            "name": "app", "image": "registry.example/app:1",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
        }]}
    });
    match kind {
        "Deployment" => json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template}
        }),
        "Job" => json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"suspend": true, "template": template}
        }),
        _ => json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {"revision": revision.to_string()}
        }),
    }
}

fn gvk(kind: &str) -> &'static str {
    match kind {
        "Deployment" => "apps/v1.Deployment",
        "Job" => "batch/v1.Job",
        _ => "v1.ConfigMap",
    }
}

fn trace(args: &Args, rate: u64, speed: u64) -> Vec<u8> {
    let start = 1_700_000_000_000_i64;
    let events = args.seconds * rate;
    // Recorded spacing (µs) so that, replayed at `speed`, `rate` events a second are due.
    let spacing_us = (1_000_000 * speed / rate) as i64;
    let header = trace_pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        start_time: Some(ksim_trace::time::timestamp(start)),
        end_time: Some(ksim_trace::time::timestamp(
            start + events as i64 * spacing_us / 1000,
        )),
        created_by: "replay_lateness bench".to_owned(),
        ..Default::default()
    };
    let mut writer = ksim_trace::TraceWriter::new(Vec::new(), &header).unwrap();
    for (i, op) in operations(args.workload, events, args.objects)
        .into_iter()
        .enumerate()
    {
        let traced = |json: &Value| trace_pb::TraceObject {
            gvk: Some(ksim_trace::gvk::parse(gvk(op.kind)).unwrap()),
            namespace: NAMESPACE.to_owned(),
            name: op.name.clone(),
            object_json: serde_json::to_vec(json).unwrap(),
        };
        let (applied, deleted) = match &op.object {
            Some(object) => (vec![traced(object)], vec![]),
            None => (vec![], vec![traced(&object(op.kind, &op.name, 0))]),
        };
        writer
            .write_event(&trace_pb::TraceEvent {
                timestamp_ms: start + i as i64 * spacing_us / 1000,
                applied,
                deleted,
            })
            .unwrap();
    }
    writer.finish().unwrap().0
}

/// The apiserver's ceiling for these operations: run straight through a kube client, 32 at
/// a time, each object's operations in trace order on one worker (as the driver's lanes
/// keep them), no driver in between. Operations a second.
async fn ceiling(client: &kube::Client, operations: &[Operation]) -> f64 {
    const CONCURRENCY: u64 = 32;
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY {
        let client = client.clone();
        let mine: Vec<Operation> = operations
            .iter()
            .filter(|op| hash(&op.name) % CONCURRENCY == worker)
            .cloned()
            .collect();
        tasks.spawn(async move {
            for op in mine {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), NAMESPACE, &resource(op.kind));
                match op.object {
                    Some(object) => {
                        api.patch(
                            &op.name,
                            &PatchParams::apply("bench").force(),
                            &Patch::Apply(object),
                        )
                        .await
                        .unwrap();
                    }
                    None => match api.delete(&op.name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(error) if ksim_kube::is_not_found(&error) => {}
                        Err(error) => panic!("delete {}: {error}", op.name),
                    },
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    operations.len() as f64 / started.elapsed().as_secs_f64()
}

fn hash(name: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}

fn resource(kind: &str) -> ApiResource {
    match kind {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "Job" => ApiResource::erase::<Job>(&()),
        _ => ApiResource::erase::<ConfigMap>(&()),
    }
}

/// Clears what a ceiling or a replay left, so the next starts from the same empty namespace.
async fn clear(client: &kube::Client) {
    use kube::api::ListParams;
    for kind in ["ConfigMap", "Deployment", "Job"] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NAMESPACE, &resource(kind));
        let params = DeleteParams::background();
        api.delete_collection(&params, &ListParams::default())
            .await
            .unwrap();
    }
}

/// CPU seconds this process (the driver's side) has used, from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat; 11 and 12 after the ")" split; 100 ticks/s.
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    for plane in &args.planes {
        run_plane(&args, plane).await;
    }
}

async fn run_plane(args: &Args, plane: &Tuning) {
    let env = ControlPlane::builder()
        .tuning(plane.clone())
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let client = env.client();
    let namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();
    // The ceiling's trace: the replays' longest, so that it runs long enough to measure.
    let rate = args.rates.iter().copied().max().unwrap_or(1000);
    let ceiling_ops = operations(args.workload, args.seconds * rate, args.objects);
    let before = ceiling(&client, &ceiling_ops).await;
    clear(&client).await;
    println!(
        "== {plane} control plane, {:?} workload, {} objects, {} lanes",
        args.workload, args.objects, args.lanes
    );
    println!(
        "apiserver ceiling before the runs: {before:.0} operations/s (32 concurrent, no driver)"
    );
    println!(
        "in flight  due/s speed  events  applied/s  of ceiling  lateness p50      p90        p99        max      state"
    );
    let reports = tempfile::tempdir().unwrap();
    for &max_in_flight in &args.max_in_flight {
        let driver = Driver::new(RunContext {
            client: client.clone(),
            // No node groups: the pool is never called.
            mesh: Mesh::new("http://127.0.0.1:9", None, None, None).unwrap(),
            settings: Settings {
                namespace: "ksim-system".to_owned(),
                report_dir: reports.path().to_owned(),
                lease_duration: Duration::from_secs(15),
                lanes: args.lanes,
                max_in_flight,
                keep_finished: 32,
                ready_deadline: Duration::from_secs(120),
                cleanup_deadline: Duration::from_secs(300),
            },
            metrics: ReplayMetrics::default(),
        });
        for &rate in &args.rates {
            for &speed in &args.speeds {
                replay(args, &driver, &client, (max_in_flight, rate, speed), before).await;
            }
        }
    }
    let after = ceiling(&client, &ceiling_ops).await;
    println!("apiserver ceiling after the runs: {after:.0} operations/s");
}

async fn replay(
    args: &Args,
    driver: &Driver,
    client: &kube::Client,
    (max_in_flight, rate, speed): (usize, u64, u64),
    ceiling: f64,
) {
    let spec = pb::SimulationSpec {
        trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(trace(
            args, rate, speed,
        ))),
        speed: speed as f64,
        ..Default::default()
    };
    let cpu_before = cpu_seconds();
    let simulation = driver.start(Some(spec)).await.unwrap();
    let handle = driver.get(&simulation.id).unwrap();
    let mut changes = handle.subscribe();
    changes
        .wait_for(|s| s.state() == pb::SimulationState::Running)
        .await
        .unwrap();
    changes
        .wait_for(|s| ksim_driver::replay::handle::is_terminal(s.state()))
        .await
        .unwrap();
    let report = driver.report(&simulation.id).unwrap();
    let ended = handle.simulation();
    let driver_cpu = cpu_seconds() - cpu_before;
    let lateness = report.lateness.unwrap();
    let ms = |d: Option<prost_types::Duration>| {
        d.map_or(0.0, |d| d.seconds as f64 * 1e3 + f64::from(d.nanos) / 1e6)
    };
    // Every event is applied by the replay's end plus the last event's lateness.
    let busy_seconds = args.seconds as f64 + ms(lateness.max) / 1e3;
    let applied = report.events_applied as f64 / busy_seconds;
    println!(
        "{max_in_flight:>9} {rate:>6} {speed:>4}x {:>7} {applied:>9.0}  {:>9.0}%  {:>9.2} ms {:>8.2} ms {:>8.2} ms {:>8.2} ms  {:?}, driver CPU {driver_cpu:.1} s",
        report.events_applied,
        100.0 * applied / ceiling,
        ms(lateness.p50),
        ms(lateness.p90),
        ms(lateness.p99),
        ms(lateness.max),
        ended.state(),
    );
    // The simulation's cleanup removed its objects; what it orphaned (Jobs) goes too.
    clear(client).await;
}
