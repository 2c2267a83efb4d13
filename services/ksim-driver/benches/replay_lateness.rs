//! Replay lateness and apply throughput on the real control plane: traces of ConfigMap
//! updates, each event one server-side apply (`LANES` sets the driver's lanes), replayed at 1x and 10x so that `rate` events a
//! second are due (at 10x the trace records a tenth of the rate). The rates default to 1000
//! (the figure), 500 and 200, which separates the driver's own lateness from the
//! apiserver's capacity on this machine.
//!
//! `cargo bench -p ksim-driver --bench replay_lateness [-- <seconds> <objects> <rate>...]`
//! with KSIM_CONTROL_PLANE_BIN_DIR set (deploy/control-plane/build.sh prints it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use ksim_driver::{
    config::Settings, driver::Driver, mesh::Mesh, metrics::ReplayMetrics, replay::run::RunContext,
};
use ksim_proto::ksim::driver::v1 as pb;
use ksim_testenv::ControlPlane;
use ksim_trace::pb as trace_pb;
use serde_json::json;

fn trace(seconds: u64, objects: u64, rate: u64, speed: u64) -> Vec<u8> {
    let start = 1_700_000_000_000_i64;
    let events = seconds * rate;
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
    for i in 0..events {
        let name = format!("cm-{}", i % objects);
        let object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"revision": i.to_string()}
        });
        writer
            .write_event(&trace_pb::TraceEvent {
                timestamp_ms: start + i as i64 * spacing_us / 1000,
                applied: vec![trace_pb::TraceObject {
                    gvk: Some(ksim_trace::gvk::parse("v1.ConfigMap").unwrap()),
                    namespace: "bench".to_owned(),
                    name,
                    object_json: serde_json::to_vec(&object).unwrap(),
                }],
                deleted: vec![],
            })
            .unwrap();
    }
    writer.finish().unwrap().0
}

/// How the ceiling's applies are made, to split the gap between it and the replay.
#[derive(Debug, Clone, Copy)]
struct CeilingShape {
    concurrency: u64,
    /// Carry an owner reference and a label, as replayed objects do (the simulation root's).
    owned: bool,
}

/// The apiserver's own ceiling: `count` server-side applies straight through a kube client,
/// no driver in between.
async fn apiserver_ceiling(
    client: &kube::Client,
    count: u64,
    objects: u64,
    shape: CeilingShape,
) -> f64 {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = api
        .patch(
            "ceiling-owner",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ceiling-owner"}})),
        )
        .await
        .unwrap();
    let metadata = |name: &str| {
        if shape.owned {
            json!({
                "name": name,
                "labels": {"ksim.io/simulation": "ceiling"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "ceiling-owner",
                                     "uid": owner.metadata.uid.clone().unwrap()}],
            })
        } else {
            json!({ "name": name })
        }
    };
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..shape.concurrency {
        let api = api.clone();
        let prefix = if shape.owned { "owned" } else { "ceiling" };
        let objects: Vec<(String, serde_json::Value)> = (0..objects)
            .map(|o| {
                let name = format!("{prefix}-{o}");
                let meta = metadata(&name);
                (name, meta)
            })
            .collect();
        tasks.spawn(async move {
            for i in (lane..count).step_by(shape.concurrency as usize) {
                let (name, metadata) = &objects[(i % objects.len() as u64) as usize];
                let object = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": metadata, "data": {"revision": i.to_string()}
                });
                api.patch(
                    name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(object),
                )
                .await
                .unwrap();
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    count as f64 / started.elapsed().as_secs_f64()
}

/// The ceiling as the driver's replay would see it, and two shapes that each add one of the
/// replay's differences: owned objects (the garbage collector tracks each update's owners)
/// and the driver's lane count as concurrency.
async fn print_ceilings(client: &kube::Client, objects: u64, when: &str) {
    let plain = CeilingShape {
        concurrency: 32,
        owned: false,
    };
    let shapes = [
        ("32 concurrent, plain", plain),
        (
            "32 concurrent, owned + labelled",
            CeilingShape {
                owned: true,
                ..plain
            },
        ),
        (
            "lanes concurrent, owned + labelled",
            CeilingShape {
                concurrency: settings_lanes() as u64,
                owned: true,
            },
        ),
    ];
    for (label, shape) in shapes {
        let ceiling = apiserver_ceiling(client, 10_000, objects, shape).await;
        println!(
            "apiserver ceiling {when}, {label}: {ceiling:.0} server-side applies/s (no driver)"
        );
    }
}

/// Lanes of the driver: `LANES` in the environment, else the driver's default (128).
fn settings_lanes() -> usize {
    std::env::var("LANES")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(128)
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
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let seconds: u64 = args.next().map_or(20, |s| s.parse().unwrap());
    let objects: u64 = args.next().map_or(200, |s| s.parse().unwrap());
    let mut rates: Vec<u64> = args.map(|s| s.parse().unwrap()).collect();
    if rates.is_empty() {
        rates = vec![1000, 500, 200];
    }
    let env = ControlPlane::builder()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let reports = tempfile::tempdir().unwrap();
    let driver = Driver::new(RunContext {
        client: env.client(),
        // No node groups: the pool is never called.
        mesh: Mesh::new("http://127.0.0.1:9", None, None, None).unwrap(),
        settings: Settings {
            namespace: "ksim-system".to_owned(),
            report_dir: reports.path().to_owned(),
            lease_duration: Duration::from_secs(15),
            lanes: settings_lanes(),
            keep_finished: 32,
            ready_deadline: Duration::from_secs(120),
            cleanup_deadline: Duration::from_secs(300),
        },
        metrics: ReplayMetrics::default(),
    });
    print_ceilings(&env.client(), objects, "before the runs").await;
    println!(
        "replay lateness: {seconds} s of replay per run, {objects} ConfigMaps, {} lanes",
        settings_lanes()
    );
    println!(
        "due/s speed  events  applied/s  lateness p50      p90        p99        max      state"
    );
    for (rate, speed) in rates.iter().flat_map(|&rate| [(rate, 1_u64), (rate, 10)]) {
        let spec = pb::SimulationSpec {
            trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(trace(
                seconds, objects, rate, speed,
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
        let busy_seconds = seconds as f64 + ms(lateness.max) / 1e3;
        println!(
            "{rate:>5} {speed:>4}x {:>7} {:>9.0}  {:>9.2} ms {:>8.2} ms {:>8.2} ms {:>8.2} ms  {:?}, driver CPU {driver_cpu:.1} s",
            report.events_applied,
            report.events_applied as f64 / busy_seconds,
            ms(lateness.p50),
            ms(lateness.p90),
            ms(lateness.p99),
            ms(lateness.max),
            ended.state(),
        );
    }
    print_ceilings(&env.client(), objects, "after the runs").await;
}
