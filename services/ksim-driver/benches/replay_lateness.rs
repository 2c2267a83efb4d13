//! Replay lateness and apply throughput on the real control plane. A trace of `--rate` due
//! events a second for `--seconds`, replayed at each `--speeds` (at 10x the trace records a
//! tenth of the rate), on a fresh control plane per `--planes` tuning (`ksim_localenv::tuning`).
//!
//! `--workload configmaps`: each event one server-side apply of a ConfigMap, `--objects`
//! ConfigMaps updated round-robin. `--workload mixed`: ConfigMaps, Deployments (0 replicas)
//! and Jobs (suspended), applied and, every fifth round, deleted and made again; the
//! controllers' pods would measure the scheduler, not the replay.
//!
//! The same operations are also run straight from a kube client (no driver),
//! `--ceiling-in-flight` at a time (32; with several values, each, and the fastest counts):
//! the apiserver's ceiling for that trace, in the same run. A second ceiling runs
//! them as the driver sends them (rewritten: pod templates kept on virtual nodes, in a
//! namespace a SimulationRoot owns), a third those in the trace's order
//! (each waits for its object's previous one, as in the driver's queue): plain to as replayed
//! is what the replayed objects cost, as replayed to in trace order what the trace's order
//! costs, and the rest to the replay is the driver. Each phase prints the CPU milliseconds
//! each process (this one, etcd, the apiserver, the controller manager) spent per operation,
//! and the apiserver's requests per operation, everyone's, by verb, resource and code.
//!
//! The ceilings move by 20% and more between phases of one run (the controllers' work after a
//! phase's deletes, a fresh plane's first seconds, etcd's history until the apiserver compacts
//! it), so a run first throws one ceiling away, lets the plane go idle before every phase,
//! and `--repeats N` measures N rounds of ceilings and replays, each round starting one phase
//! later than the last, and ends with the median of each round's ratios. A rate above the
//! ceiling (`--rates 2000`) keeps the replay flat out: its operations a second are then its
//! own ceiling, from the clock's start to the last event's answer.
//!
//! `--profile-dir DIR` writes a CPU profile of kube-apiserver over the first `--seconds` of
//! each ceiling and each replay (`DIR/<plane>-<phase>.pb.gz`), for `go tool pprof -top`: where
//! the apiserver's time goes with the driver in between and without it.
//!
//! `cargo bench -p ksim-driver --bench replay_lateness -- [--workload mixed] [--rates 1000,2000]`
//! with KSIM_CONTROL_PLANE_BIN_DIR set (deploy/control-plane/build.sh prints it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{num::NonZeroUsize, path::PathBuf, time::Duration};

use clap::Parser;
use k8s_openapi::api::{apps::v1::Deployment, batch::v1::Job, core::v1::ConfigMap};
use ksim_driver::{
    config::Settings, driver::Driver, mesh::Mesh, metrics::ReplayMetrics, replay::run::RunContext,
};
use ksim_localenv::{ControlPlane, Tuning};
use ksim_proto::ksim::driver::v1 as pb;
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
    /// The driver's requests in flight; each value is a run of its own.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    max_in_flight: Vec<NonZeroUsize>,
    /// The plain client's requests in flight; with several values each ceiling is measured at
    /// each and the fastest is the round's.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    ceiling_in_flight: Vec<NonZeroUsize>,
    /// Rounds of ceilings and replays, interleaved; the summary takes the median of the rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeats: u64,
    /// Where to write kube-apiserver CPU profiles of each ceiling and replay.
    #[arg(long)]
    profile_dir: Option<PathBuf>,
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
    namespace: String,
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
            Operation {
                kind,
                namespace: NAMESPACE.to_owned(),
                name,
                object,
            }
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

/// In which order a ceiling runs the operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Each object's operations in trace order, objects independent of each other: any object
    /// with an operation left may take a free slot (as the driver's queue lets it). Fixed
    /// workers, each with its share of the objects, would leave slots idle at the end while
    /// the worker with the most objects finishes, and understate the ceiling.
    PerObject,
    /// The trace's own order: an operation starts once its object's previous one is done and
    /// a slot is free, as the driver's queue runs them, all due at once. The objects move
    /// through the trace together (every object's delete of a round, then every object's
    /// create), where under [`Order::PerObject`] each runs through its own operations alone.
    Trace,
}

/// The apiserver's ceiling for these operations: run straight through a kube client,
/// `in_flight` at a time, no driver in between. Operations a second.
async fn ceiling(
    client: &kube::Client,
    operations: &[Operation],
    in_flight: NonZeroUsize,
    order: Order,
) -> f64 {
    use std::{collections::HashMap, sync::Arc};
    use tokio::sync::{Semaphore, oneshot};
    let slots = Arc::new(Semaphore::new(in_flight.get()));
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match order {
        Order::PerObject => {
            let mut objects: Vec<Vec<Operation>> = Vec::new();
            let mut index = HashMap::new();
            for op in operations {
                let at = *index.entry(&op.name).or_insert_with(|| {
                    objects.push(Vec::new());
                    objects.len() - 1
                });
                objects[at].push(op.clone());
            }
            for mine in objects {
                let (client, slots) = (client.clone(), slots.clone());
                tasks.spawn(async move {
                    for op in mine {
                        let _slot = slots.acquire().await.unwrap();
                        run_operation(&client, &op).await;
                    }
                });
            }
        }
        Order::Trace => {
            // Each operation waits for its object's previous one to say it is done.
            let mut previous: HashMap<&str, oneshot::Receiver<()>> = HashMap::new();
            for op in operations {
                let (done, next) = oneshot::channel();
                let before = previous.insert(&op.name, next);
                let (client, slots, op) = (client.clone(), slots.clone(), op.clone());
                tasks.spawn(async move {
                    if let Some(before) = before {
                        let _ = before.await;
                    }
                    let _slot = slots.acquire().await.unwrap();
                    run_operation(&client, &op).await;
                    let _ = done.send(());
                });
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    operations.len() as f64 / started.elapsed().as_secs_f64()
}

/// One operation from a plain client: a forced server-side apply, or a delete with dependents
/// (as the driver deletes).
async fn run_operation(client: &kube::Client, op: &Operation) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &op.namespace, &resource(op.kind));
    match &op.object {
        Some(object) => {
            api.patch(
                &op.name,
                &PatchParams::apply("bench").force(),
                &Patch::Apply(object),
            )
            .await
            .unwrap();
        }
        None => match api.delete(&op.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(error) if ksim_kube::is_not_found(&error) => {}
            Err(error) => panic!("delete {}: {error}", op.name),
        },
    }
}

/// The same operations as the driver sends them: through its rewrite (pod templates kept on
/// virtual nodes), into the namespace it maps the trace's namespace to.
/// A plain client applying these measures what the replayed objects cost the control plane,
/// without the driver's own machinery.
async fn as_replayed(client: &kube::Client, operations: &[Operation]) -> Vec<Operation> {
    use ksim_driver::cluster::root;
    use ksim_driver::domain::{
        Gvk,
        lifetimes::Lifetimes,
        rewrite::{RewriteOptions, Rewriter},
    };
    root::ensure_crd(client, Duration::from_secs(60))
        .await
        .unwrap();
    let rewriter = Rewriter::new(
        RewriteOptions {
            simulation_id: "ceiling".to_owned(),
            namespace_prefix: "ceiling".to_owned(),
            speed: 1.0,
            root: root::create(client, "ceiling").await.unwrap(),
            template_paths: Default::default(),
            node_groups: Vec::new(),
            provisioning: None,
            node_failures: false,
            explain: None,
        },
        &Lifetimes::default(),
    );
    let namespace = rewriter.namespace(NAMESPACE);
    let created = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &created)
        .await
        .unwrap();
    operations
        .iter()
        .map(|op| {
            let gvk = Gvk::from(&ksim_trace::gvk::parse(gvk(op.kind)).unwrap());
            let object = op.object.as_ref().map(|object| {
                let (_, rewritten) = rewriter
                    .apply(&gvk, NAMESPACE, &op.name, object.clone())
                    .unwrap();
                rewritten
            });
            Operation {
                namespace: namespace.clone(),
                object,
                ..op.clone()
            }
        })
        .collect()
}

/// Runs [`ceiling`] and prints it with the CPU each process spent per operation; clears its
/// objects after.
async fn measure_ceiling(
    args: &Args,
    env: &ControlPlane,
    name: String,
    operations: &[Operation],
    in_flight: NonZeroUsize,
    order: Order,
) -> f64 {
    let client = env.client();
    quiesce(env).await;
    let profiling = profile(args, &client, name.clone());
    let (usage, requests) = (Usage::now(env), Requests::now(&client).await);
    let rate = ceiling(&client, operations, in_flight, order).await;
    let used = Usage::now(env).per_operation(&usage, operations.len() as u64);
    let asked = Requests::now(&client)
        .await
        .per_operation(&requests, operations.len() as u64);
    profiled(profiling).await;
    if let Some(op) = operations.first() {
        clear(&client, &op.namespace).await;
    }
    let order = match order {
        Order::PerObject => "",
        Order::Trace => ", in trace order",
    };
    println!("{name}: {rate:.0} operations/s ({in_flight} in flight{order}, no driver)");
    println!("  CPU ms per operation: {used}");
    println!("  apiserver requests per operation: {asked}");
    rate
}

fn resource(kind: &str) -> ApiResource {
    match kind {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "Job" => ApiResource::erase::<Job>(&()),
        _ => ApiResource::erase::<ConfigMap>(&()),
    }
}

/// Clears what a ceiling or a replay left, so the next starts from the same empty namespace.
async fn clear(client: &kube::Client, namespace: &str) {
    use kube::api::ListParams;
    for kind in ["ConfigMap", "Deployment", "Job"] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource(kind));
        let params = DeleteParams::background();
        api.delete_collection(&params, &ListParams::default())
            .await
            .unwrap();
    }
}

/// Starts a CPU profile of kube-apiserver over the next `seconds`, written to
/// `<--profile-dir>/<name>.pb.gz` when it ends; nothing without `--profile-dir`.
fn profile(
    args: &Args,
    client: &kube::Client,
    name: String,
) -> Option<tokio::task::JoinHandle<()>> {
    use futures::AsyncReadExt;
    let path = args.profile_dir.as_ref()?.join(format!("{name}.pb.gz"));
    let request = http::Request::get(format!("/debug/pprof/profile?seconds={}", args.seconds))
        .body(Vec::new())
        .unwrap();
    let client = client.clone();
    Some(tokio::spawn(async move {
        let mut body = client.request_stream(request).await.unwrap();
        let mut bytes = Vec::new();
        body.read_to_end(&mut bytes).await.unwrap();
        std::fs::write(&path, bytes).unwrap();
        println!("apiserver profile: {}", path.display());
    }))
}

/// Waits for a profile [`profile`] started.
async fn profiled(profile: Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = profile {
        task.await.unwrap();
    }
}

/// Waits, up to a minute, for the control plane to go idle (under a tenth of a core over a
/// second): the garbage collector and the namespace controller finish the last phase's
/// deletes before the next phase is measured, not during it.
async fn quiesce(env: &ControlPlane) {
    let busy = || -> f64 {
        env.pids()
            .iter()
            .map(|(_, pid)| cpu_seconds(&pid.to_string()))
            .sum()
    };
    for _ in 0..60 {
        let before = busy();
        tokio::time::sleep(Duration::from_secs(1)).await;
        if busy() - before < 0.1 {
            return;
        }
    }
    println!("  (the control plane did not go idle within a minute)");
}

/// CPU seconds a process has used, from /proc/PID/stat (`self` for this one).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
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

/// CPU seconds used so far by this process (the plain client, or the driver) and by each
/// control-plane component: the difference over a phase, per operation, says where the
/// driver's operations cost more than the plain client's.
#[derive(Debug, Clone)]
struct Usage(Vec<(&'static str, f64)>);

impl Usage {
    fn now(env: &ControlPlane) -> Self {
        let mut usage = vec![("bench", cpu_seconds("self"))];
        for (name, pid) in env.pids() {
            let short = match name {
                "kube-apiserver" => "apiserver",
                "kube-controller-manager" => "kcm",
                other => other,
            };
            usage.push((short, cpu_seconds(&pid.to_string())));
        }
        Self(usage)
    }

    /// CPU milliseconds per operation since `before`, per process.
    fn per_operation(&self, before: &Usage, operations: u64) -> String {
        self.0
            .iter()
            .zip(&before.0)
            .map(|((name, now), (_, then))| {
                format!(
                    "{name} {:.2}",
                    (now - then) * 1e3 / operations.max(1) as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// kube-apiserver's count of the requests it served (`apiserver_request_total`), everyone's,
/// the controllers' included, by verb, resource and response code: the difference over a
/// phase says what else an operation made the control plane ask for.
#[derive(Debug, Clone)]
struct Requests(std::collections::HashMap<String, f64>);

impl Requests {
    async fn now(client: &kube::Client) -> Self {
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(request).await.unwrap();
        let mut counts = std::collections::HashMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let labels: std::collections::HashMap<&str, &str> = labels
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .map(|(name, value)| (name, value.trim_matches('"')))
                .collect();
            let label = |name: &str| labels.get(name).copied().unwrap_or_default();
            let resource = match label("subresource") {
                "" => label("resource").to_owned(),
                sub => format!("{}/{sub}", label("resource")),
            };
            let key = format!("{} {resource} {}", label("verb"), label("code"));
            *counts.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0);
        }
        Self(counts)
    }

    /// Requests per operation since `before`, in all and the most frequent kinds.
    fn per_operation(&self, before: &Requests, operations: u64) -> String {
        let per = |count: f64| count / operations.max(1) as f64;
        let mut grown: Vec<(&String, f64)> = self
            .0
            .iter()
            .map(|(key, now)| (key, now - before.0.get(key).copied().unwrap_or(0.0)))
            .filter(|(_, grown)| *grown > 0.0)
            .collect();
        grown.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let total: f64 = grown.iter().map(|(_, grown)| grown).sum();
        let top: Vec<String> = grown
            .iter()
            .take(10)
            .map(|(key, grown)| format!("{key} {:.3}", per(*grown)))
            .collect();
        format!("{:.2} ({})", per(total), top.join(", "))
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Some(dir) = &args.profile_dir {
        std::fs::create_dir_all(dir).unwrap();
    }
    for plane in &args.planes {
        run_plane(&args, plane).await;
    }
}

async fn run_plane(args: &Args, plane: &Tuning) {
    let mut builder = ControlPlane::builder()
        .tuning(plane.clone())
        .without_scheduler();
    if args.profile_dir.is_some() {
        // The test environment switches profiling off; the flag given last wins.
        builder = builder.apiserver_arg("--profiling=true");
    }
    let env = builder.start().await.unwrap();
    let client = env.client();
    let namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();
    // The ceiling's trace: the replays' longest, so that it runs long enough to measure.
    let rate = args.rates.iter().copied().max().unwrap_or(1000);
    let ceiling_ops = operations(args.workload, args.seconds * rate, args.objects);
    println!(
        "== {plane} control plane, {:?} workload, {} objects",
        args.workload, args.objects
    );
    let replayed_ops = as_replayed(&client, &ceiling_ops).await;
    // A fresh plane's first phase is unlike the rest (an empty etcd, cold caches, the
    // controllers' first syncs): thrown away.
    measure_ceiling(
        args,
        &env,
        format!("{plane}-warm-up"),
        &ceiling_ops,
        args.ceiling_in_flight[0],
        Order::PerObject,
    )
    .await;
    let reports = tempfile::tempdir().unwrap();
    let mut phases = Vec::new();
    for &in_flight in &args.ceiling_in_flight {
        for kind in [
            Ceiling::Plain,
            Ceiling::AsReplayed,
            Ceiling::AsReplayedInOrder,
        ] {
            phases.push(Phase::Ceiling(kind, in_flight));
        }
    }
    for &max_in_flight in &args.max_in_flight {
        for &rate in &args.rates {
            for &speed in &args.speeds {
                phases.push(Phase::Replay((max_in_flight, rate, speed)));
            }
        }
    }
    let mut runs: Vec<Run> = Vec::new();
    for round in 1..=args.repeats {
        let suffix = if args.repeats > 1 {
            format!("-{round}")
        } else {
            String::new()
        };
        println!("-- round {round} of {}", args.repeats);
        let mut ceilings = Ceilings::default();
        let mut replays = Vec::new();
        // Each round starts one phase later: a plane that drifts through a round (etcd's
        // history until the apiserver compacts it, the controllers' backlog) favours no phase.
        let mut order = phases.clone();
        order.rotate_left((round as usize - 1) % phases.len());
        for phase in order {
            match phase {
                Phase::Ceiling(kind, in_flight) => {
                    let what = kind.name();
                    let name = match args.ceiling_in_flight.len() {
                        1 => format!("{plane}-{what}{suffix}"),
                        _ => format!("{plane}-{what}-{in_flight}{suffix}"),
                    };
                    let (operations, order) = match kind {
                        Ceiling::Plain => (&ceiling_ops, Order::PerObject),
                        Ceiling::AsReplayed => (&replayed_ops, Order::PerObject),
                        Ceiling::AsReplayedInOrder => (&replayed_ops, Order::Trace),
                    };
                    let rate =
                        measure_ceiling(args, &env, name, operations, in_flight, order).await;
                    let best = match kind {
                        Ceiling::Plain => &mut ceilings.plain,
                        Ceiling::AsReplayed => &mut ceilings.replayed,
                        Ceiling::AsReplayedInOrder => &mut ceilings.in_order,
                    };
                    *best = best.max(rate);
                }
                Phase::Replay(config) => {
                    let driver = Driver::new(RunContext {
                        client: client.clone(),
                        // No disruptions: nothing is evicted.
                        evictions: client.clone(),
                        // No node groups: the pool is never called.
                        mesh: Mesh::new("http://127.0.0.1:9", None, None, None).unwrap(),
                        settings: Settings {
                            namespace: "ksim-system".to_owned(),
                            report_dir: reports.path().to_owned(),
                            lease_duration: Duration::from_secs(15),
                            max_in_flight: config.0,
                            keep_finished: 32,
                            ready_deadline: Duration::from_secs(120),
                            cleanup_deadline: Duration::from_secs(300),
                        },
                        metrics: ReplayMetrics::default(),
                    });
                    let (applied, p99) = replay(args, plane, &driver, &env, config, round).await;
                    replays.push((config, applied, p99));
                }
            }
        }
        println!(
            "round {round}: ceilings {:.0} plain, {:.0} as replayed, {:.0} as replayed in trace order (operations/s)",
            ceilings.plain, ceilings.replayed, ceilings.in_order
        );
        for (config, applied, p99) in replays {
            let run = Run {
                config,
                of_ceiling: applied / ceilings.plain,
                of_replayed: applied / ceilings.replayed,
                of_in_order: applied / ceilings.in_order,
                p99,
            };
            let (max_in_flight, rate, speed) = config;
            println!(
                "  replay {max_in_flight} in flight, {rate}/s, {speed}x: {applied:.0}/s, {:.0}% of plain, {:.0}% of as replayed, {:.0}% of in trace order",
                100.0 * run.of_ceiling,
                100.0 * run.of_replayed,
                100.0 * run.of_in_order,
            );
            runs.push(run);
        }
    }
    if args.repeats > 1 {
        summarize(plane, &runs);
    }
}

/// One measurement of a round.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// A plain client's ceiling, with how many requests in flight.
    Ceiling(Ceiling, NonZeroUsize),
    /// A replay through the driver.
    Replay(ReplayConfig),
}

/// Which of a plain client's ceilings a phase measures.
#[derive(Debug, Clone, Copy)]
enum Ceiling {
    /// The trace's operations as recorded, each object's in order.
    Plain,
    /// As the driver rewrites them, each object's in order.
    AsReplayed,
    /// As the driver rewrites them, in the trace's order ([`Order::Trace`]).
    AsReplayedInOrder,
}

impl Ceiling {
    fn name(self) -> &'static str {
        match self {
            Ceiling::Plain => "ceiling",
            Ceiling::AsReplayed => "ceiling-as-replayed",
            Ceiling::AsReplayedInOrder => "ceiling-as-replayed-in-order",
        }
    }
}

/// A round's ceilings, operations a second: the fastest of each over `--ceiling-in-flight`.
#[derive(Debug, Clone, Copy, Default)]
struct Ceilings {
    plain: f64,
    /// The driver's rewritten objects.
    replayed: f64,
    /// The rewritten objects in the trace's order.
    in_order: f64,
}

/// A replay's requests in flight, due events a second and speed.
type ReplayConfig = (NonZeroUsize, u64, u64);

/// One replay's result against the ceilings of its round.
struct Run {
    config: ReplayConfig,
    of_ceiling: f64,
    of_replayed: f64,
    of_in_order: f64,
    /// Lateness p99, ms.
    p99: f64,
}

/// The median over the rounds of each configuration's share of its round's ceilings, with
/// the lowest and highest: how far one round is from the next is the figure's uncertainty.
fn summarize(plane: &Tuning, runs: &[Run]) {
    /// Median, lowest and highest; `values` is never empty (one per round).
    fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
        values.sort_by(f64::total_cmp);
        let middle = values.len() / 2;
        let median = match values.len() % 2 {
            0 => (values[middle - 1] + values[middle]) / 2.0,
            _ => values[middle],
        };
        (median, values[0], values[values.len() - 1])
    }
    let percent = |values: Vec<f64>| {
        let (median, low, high) = spread(values);
        format!(
            "{:>4.0}% ({:.0}-{:.0}%)",
            100.0 * median,
            100.0 * low,
            100.0 * high
        )
    };
    println!("== {plane}: median over the rounds (lowest-highest)");
    println!(
        "in flight  due/s speed  of ceiling         of as replayed     of in trace order  lateness p99 (ms)"
    );
    let mut configs: Vec<ReplayConfig> = runs.iter().map(|r| r.config).collect();
    configs.sort_unstable();
    configs.dedup();
    for config in configs {
        let mine: Vec<&Run> = runs.iter().filter(|r| r.config == config).collect();
        let (max_in_flight, rate, speed) = config;
        let (p99, p99_low, p99_high) = spread(mine.iter().map(|r| r.p99).collect());
        println!(
            "{max_in_flight:>9} {rate:>6} {speed:>4}x  {}  {}  {}  {p99:>8.0} ({p99_low:.0}-{p99_high:.0})",
            percent(mine.iter().map(|r| r.of_ceiling).collect()),
            percent(mine.iter().map(|r| r.of_replayed).collect()),
            percent(mine.iter().map(|r| r.of_in_order).collect()),
        );
    }
}

async fn replay(
    args: &Args,
    plane: &Tuning,
    driver: &Driver,
    env: &ControlPlane,
    (max_in_flight, rate, speed): ReplayConfig,
    round: u64,
) -> (f64, f64) {
    let spec = pb::SimulationSpec {
        trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(trace(
            args, rate, speed,
        ))),
        speed: speed as f64,
        // Namespaces of their own: the apiserver looks a namespace deleted in the last 30 s up
        // again for every request into it (NamespaceLifecycle), which the last replay's
        // cleanup would cost this one.
        namespace_prefix: format!("r{round}-{max_in_flight}-{rate}-{speed}"),
        // The driver's own lateness is measured, not the pods' start: they start at once.
        provisioning: Some(pb::ProvisioningModel {
            source: "built in".to_owned(),
            yaml: "name: instant\n".to_owned(),
        }),
        ..Default::default()
    };
    let suffix = match args.repeats {
        1 => String::new(),
        _ => format!("-{round}"),
    };
    let client = &env.client();
    quiesce(env).await;
    let simulation = driver.start(Some(spec)).await.unwrap();
    let handle = driver.get(&simulation.id).unwrap();
    let mut changes = handle.subscribe();
    changes
        .wait_for(|s| s.state() == pb::SimulationState::Running)
        .await
        .unwrap();
    // From the clock's start to the last event's last answer: the simulation's preparation
    // and cleanup (namespaces made, then deleted with all they hold) are not the replay's.
    let started = std::time::Instant::now();
    let (usage, requests) = (Usage::now(env), Requests::now(client).await);
    let profiling = profile(
        args,
        client,
        format!("{plane}-replay-{max_in_flight}-{rate}-{speed}x{suffix}"),
    );
    let live = handle.live().unwrap();
    while live.progress.snapshot().events_applied < live.events_total
        && !ksim_driver::replay::handle::is_terminal(handle.state())
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let busy_seconds = started.elapsed().as_secs_f64();
    let operations = live.progress.snapshot().events_applied;
    let replay_usage = Usage::now(env).per_operation(&usage, operations);
    let asked = Requests::now(client)
        .await
        .per_operation(&requests, operations);
    changes
        .wait_for(|s| ksim_driver::replay::handle::is_terminal(s.state()))
        .await
        .unwrap();
    let report = driver.report(&simulation.id).unwrap();
    let ended = handle.simulation();
    let lateness = report.lateness.unwrap();
    let ms = |d: Option<prost_types::Duration>| {
        d.map_or(0.0, |d| d.seconds as f64 * 1e3 + f64::from(d.nanos) / 1e6)
    };
    let applied = report.events_applied as f64 / busy_seconds;
    println!(
        "{plane}-replay-{max_in_flight}-{rate}-{speed}x{suffix}: {} events, {applied:.0}/s, lateness p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {:?}",
        report.events_applied,
        ms(lateness.p50),
        ms(lateness.p90),
        ms(lateness.p99),
        ms(lateness.max),
        ended.state(),
    );
    println!("  CPU ms per operation: {replay_usage}");
    println!("  apiserver requests per operation: {asked}");
    profiled(profiling).await;
    // The simulation's cleanup removed its objects; whatever it left goes too, so that the
    // next phase starts from an empty namespace.
    clear(client, NAMESPACE).await;
    (applied, ms(lateness.p99))
}
