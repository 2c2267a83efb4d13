//! The real cluster-autoscaler (CA) on ksim's virtual nodes: scale-up latency, CA's loop time
//! at its published scalability target, and a large scale-down. Prints figures; asserts none.
//!
//!   cargo bench -p ksim-e2e --bench autoscaler -- --help
//!   cargo bench -p ksim-e2e --bench autoscaler                   # all three parts
//!   cargo bench -p ksim-e2e --bench autoscaler -- \
//!       --scale-up 1,10 --nodes 100 --groups 4 --scale-down 10          # a small run
//!
//! Every part gets its own real control plane (tuned for simulation, as in ksim-vnode's
//! scale bench), the virtual node pool and the provider in this process, and CA as a process of its
//! own. The provider (its watches, index and gRPC server) runs on a tokio runtime of its own
//! whose threads are named `ksim-cloudprov`, so its CPU time can be told from the pool's.
//!
//! 1. Scale-up: a group at 0 nodes per N, then a Deployment of N pods that each need a whole
//!    m5.large; per pod, first seen (created) -> its node Ready -> Running, through one watch.
//! 2. Loop time: `--nodes` nodes in `--groups` groups created at size, `--pods-per-node` pods on
//!    each (sized so that exactly that many fit), CA at `--loop-scan-interval` (CA's default
//!    10 s) and CA's default scale-down timings; CA's `function_duration_seconds` histograms
//!    while the pods are placed and over `--loops` loops after, the calls CA made to the
//!    provider, and the CPU each process used.
//! 3. Scale-down: a group of `--scale-down` nodes, one pod each, min size 0; the workload is
//!    deleted and CA removes the nodes; seconds until the group is at 0, and whether the nodes
//!    that went are exactly the nodes CA named in DeleteNodes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail, ensure};
use clap::Parser;
use futures::{Stream, TryStreamExt};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_cloudprov::{
    apiserver::ApiCluster,
    grpc::CloudProviderService,
    index::Index,
    provider::{Provider, ScaleEvent, Settings},
    watches,
};
use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_nodes::{
    labels::{GROUP_LABEL, SEAT_HOST_LABEL, VIRTUAL_TAINT_KEY},
    node::is_ready,
    seats::{SeatDeployment, SkeletonSource},
};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb,
    cloud_provider_server::{CloudProvider, CloudProviderServer},
};
use ksim_testenv::{CloudConfig, ClusterAutoscaler, ControlPlane};
use ksim_vnode::{config::PoolConfig, pool::Pool};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::watcher,
};
use serde_json::json;
use tokio::{sync::broadcast::error::RecvError, task::JoinSet};
use tonic::{Request, Response, Status};

const NAMESPACE: &str = "default";
const POOL_NAME: &str = "bench";
/// An upper bound on every wait, so a broken run ends; not a performance assertion.
const DEADLINE: Duration = Duration::from_secs(1800);
/// Linux reports CPU time in USER_HZ ticks, 100 a second on every mainstream kernel build.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;
/// The provider runtime's thread name (at most 15 bytes: Linux truncates longer ones).
const PROVIDER_THREAD: &str = "ksim-cloudprov";

/// The m5.large of the tests: 1930m CPU allocatable, 29 pods.
const M5_LARGE: &str = include_str!("../tests/it/cloudprov/common/m5-large.yaml");

/// The same m5.large with 110 pods (EKS with prefix delegation), so part 2 can run CA's
/// 30 pods per node.
fn m5_large_110_pods() -> String {
    M5_LARGE.replace("pods: \"29\"", "pods: \"110\"")
}

const ALLOCATABLE_MILLICPU: usize = 1930;
const ALLOCATABLE_MIB: usize = 7 * 1024;

/// Benchmark of the real cluster-autoscaler on ksim's virtual nodes.
///
/// Part `up`: per N in --scale-up, a group at 0 nodes and a Deployment of N pods that each
/// need a whole m5.large; p50/p99 per pod of (its node Ready - pod created) and (pod Running -
/// pod created), and the wall time until all N run.
///
/// Part `loop`: --nodes virtual nodes in --groups groups, --pods-per-node pods on each, CA at
/// its default --scan-interval=10s; CA's loop time (function_duration_seconds{function="main"})
/// over --loops loops once the cluster has settled, against CA's published target (1,000
/// nodes x 30 pods; its scalability tests measured every loop under 10 s, against a bound of
/// 30 s), and the CPU of CA, the control plane and the provider.
///
/// Part `down`: a group of --scale-down nodes, one pod each; the pods' Deployment is deleted
/// and CA removes the nodes; seconds until the group is at 0, and whether the nodes that went
/// are exactly the ones CA named.
///
/// Needs KSIM_CONTROL_PLANE_BIN_DIR (or ~/.cache/ksim/k8s-<version>/bin) and CA from
/// deploy/cluster-autoscaler/build.sh. KSIM_KEEP_TESTENV=1 keeps the logs.
#[derive(Debug, Parser)]
#[command(
    name = "autoscaler",
    after_help = "Example, a small run:\n  cargo bench -p ksim-e2e --bench autoscaler -- \
                  --scale-up 1,10 --nodes 100 --groups 4 --scale-down 10"
)]
struct Args {
    /// Parts to run, in this order.
    #[arg(long, value_delimiter = ',', default_value = "up,loop,down")]
    parts: Vec<Part>,
    /// Part up: pods (each needing a node of its own) per scale-up run, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    scale_up: Vec<usize>,
    /// Part loop: virtual nodes, created at size through the seat Deployments' replicas.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Part loop: node groups the nodes are split over.
    #[arg(long, default_value_t = 20)]
    groups: usize,
    /// Part loop: pods per node (each asks for 1930m / this CPU, so exactly this many fit).
    #[arg(long, default_value_t = 10)]
    pods_per_node: usize,
    /// Part loop: CA loops to measure once every pod runs.
    #[arg(long, default_value_t = 10)]
    loops: u64,
    /// Part loop: CA's --scan-interval (its own default; its scale-down timings are its
    /// defaults too).
    #[arg(long, default_value = "10s")]
    loop_scan_interval: String,
    /// Part down: nodes in the group whose workload is deleted.
    #[arg(long, default_value_t = 100)]
    scale_down: usize,
    /// Parts up and down: CA's --scan-interval (the tests' 1s; unneeded time 5s).
    #[arg(long, default_value = "1s")]
    scan_interval: String,
    /// `cargo bench` passes this to every benchmark binary.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    Up,
    Loop,
    Down,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        (1..=110).contains(&args.pods_per_node),
        "--pods-per-node must be 1..=110"
    );
    ensure!(
        args.groups >= 1 && args.nodes >= args.groups,
        "--nodes must be at least --groups, and --groups at least 1"
    );
    println!(
        "cluster-autoscaler {} (externalgrpc), control plane {}",
        ksim_testenv::autoscaler::cluster_autoscaler_version(),
        ksim_testenv::kubernetes_version()
    );
    for part in &args.parts {
        match part {
            Part::Up => scale_up(&args).await.context("part up")?,
            Part::Loop => loop_time(&args).await.context("part loop")?,
            Part::Down => scale_down(&args).await.context("part down")?,
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The environment: control plane, pool, provider on its own runtime.

struct Env {
    control_plane: ControlPlane,
    client: Client,
    _pool: Pool,
    provider: Arc<Provider<ApiCluster>>,
    calls: Arc<Calls>,
    address: SocketAddr,
    _watches: JoinSet<()>,
    provider_runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Env {
    fn drop(&mut self) {
        // A runtime cannot be dropped inside another; this one is only let go.
        if let Some(runtime) = self.provider_runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn settings() -> Settings {
    Settings {
        pool_name: POOL_NAME.to_owned(),
        gpu_label: "ksim.io/gpu-type".to_owned(),
        pricing: None,
        group_options: Default::default(),
        settle_timeout: Duration::from_secs(60),
    }
}

async fn start_env() -> anyhow::Result<Env> {
    let control_plane = ControlPlane::start().await?;
    let client = control_plane.client();
    let pool = Pool::start(
        client.clone(),
        PoolConfig {
            pool_name: POOL_NAME.to_owned(),
            namespace: NAMESPACE.to_owned(),
            ..PoolConfig::default()
        },
    )
    .await?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(PROVIDER_THREAD)
        // Threads that exit take their CPU time with them; keep blocking threads around.
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()?;
    let kubeconfig = control_plane.kubeconfig_path().to_owned();
    // Its own client, so even the provider's HTTP connections live on its runtime.
    let calls = Arc::new(Calls::default());
    let counted = calls.clone();
    let (provider, address, watches) = runtime
        .spawn(async move {
            let config = kube::Config::from_custom_kubeconfig(
                Kubeconfig::read_from(&kubeconfig)?,
                &KubeConfigOptions::default(),
            )
            .await?;
            let client = Client::try_from(config)?;
            let index = Index::new(1000);
            let watches = watches::spawn(client.clone(), index.clone());
            let provider = Arc::new(Provider::new(index, ApiCluster::new(client), settings()));
            let bound = GrpcServer::new(ServeArgs::ephemeral())
                .add_service(CloudProviderServer::new(Counted {
                    inner: CloudProviderService::new(provider.clone()),
                    calls: counted,
                }))
                .bind()
                .await?;
            let address = bound.grpc_addr()?;
            tokio::spawn(bound.serve_until(std::future::pending()));
            anyhow::Ok((provider, address, watches))
        })
        .await??;
    Ok(Env {
        control_plane,
        client,
        _pool: pool,
        provider,
        calls,
        address,
        _watches: watches,
        provider_runtime: Some(runtime),
    })
}

/// Calls CA made to the provider, per method: count, total and longest time in the handler.
#[derive(Debug, Default)]
struct Calls(Mutex<BTreeMap<&'static str, CallStats>>);

#[derive(Debug, Default, Clone, Copy)]
struct CallStats {
    count: u64,
    total: Duration,
    max: Duration,
}

impl Calls {
    fn record(&self, method: &'static str, took: Duration) {
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let stats = calls.entry(method).or_default();
        stats.count += 1;
        stats.total += took;
        stats.max = stats.max.max(took);
    }

    /// The counts so far; the max starts afresh for the next snapshot.
    fn snapshot(&self) -> BTreeMap<&'static str, CallStats> {
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = calls.clone();
        for stats in calls.values_mut() {
            stats.max = Duration::ZERO;
        }
        snapshot
    }
}

/// The provider's gRPC service, timing every call in its handler (the server stack around it
/// is the production one).
struct Counted {
    inner: CloudProviderService<ApiCluster>,
    calls: Arc<Calls>,
}

macro_rules! counted {
    ($($method:ident($request:ident) -> $response:ident;)+) => {
        #[tonic::async_trait]
        impl CloudProvider for Counted {
            $(async fn $method(
                &self,
                request: Request<pb::$request>,
            ) -> Result<Response<pb::$response>, Status> {
                let started = Instant::now();
                let result = self.inner.$method(request).await;
                self.calls.record(stringify!($method), started.elapsed());
                result
            })+
        }
    };
}

counted! {
    node_groups(NodeGroupsRequest) -> NodeGroupsResponse;
    node_group_for_node(NodeGroupForNodeRequest) -> NodeGroupForNodeResponse;
    pricing_node_price(PricingNodePriceRequest) -> PricingNodePriceResponse;
    pricing_pod_price(PricingPodPriceRequest) -> PricingPodPriceResponse;
    gpu_label(GpuLabelRequest) -> GpuLabelResponse;
    get_available_gpu_types(GetAvailableGpuTypesRequest) -> GetAvailableGpuTypesResponse;
    cleanup(CleanupRequest) -> CleanupResponse;
    refresh(RefreshRequest) -> RefreshResponse;
    node_group_target_size(NodeGroupTargetSizeRequest) -> NodeGroupTargetSizeResponse;
    node_group_increase_size(NodeGroupIncreaseSizeRequest) -> NodeGroupIncreaseSizeResponse;
    node_group_delete_nodes(NodeGroupDeleteNodesRequest) -> NodeGroupDeleteNodesResponse;
    node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest) -> NodeGroupDecreaseTargetSizeResponse;
    node_group_nodes(NodeGroupNodesRequest) -> NodeGroupNodesResponse;
    node_group_template_node_info(NodeGroupTemplateNodeInfoRequest) -> NodeGroupTemplateNodeInfoResponse;
    node_group_get_options(NodeGroupAutoscalingOptionsRequest) -> NodeGroupAutoscalingOptionsResponse;
}

/// The provider calls between two consecutive snapshots; `per` divides the counts (e.g. by
/// loops).
fn print_calls(
    title: &str,
    before: &BTreeMap<&'static str, CallStats>,
    after: &BTreeMap<&'static str, CallStats>,
    per: Option<(&str, f64)>,
) {
    println!("\n{title} (time in the provider's handler)");
    let per_header = per.map_or(String::new(), |(name, _)| format!(" calls per {name} |"));
    println!("| method | calls |{per_header} mean (ms) | max (ms) |");
    println!(
        "|---|---|{}---|---|",
        if per.is_some() { "---|" } else { "" }
    );
    for (method, end) in after {
        let start = before.get(method).copied().unwrap_or_default();
        let count = end.count - start.count;
        if count == 0 {
            continue;
        }
        let total = end.total.saturating_sub(start.total);
        #[allow(clippy::cast_precision_loss)]
        let mean_ms = total.as_secs_f64() * 1e3 / count as f64;
        #[allow(clippy::cast_precision_loss)]
        let per_cell = per.map_or(String::new(), |(_, n)| {
            format!(" {:.1} |", count as f64 / n)
        });
        println!(
            "| {method} | {count} |{per_cell} {mean_ms:.3} | {:.3} |",
            end.max.as_secs_f64() * 1e3
        );
    }
}

async fn start_ca(env: &Env, flags: &[String]) -> anyhow::Result<ClusterAutoscaler> {
    // The tests' fast flags, as the figures in docs/benchmarks.md were measured with.
    let mut builder = ClusterAutoscaler::builder(
        &env.control_plane,
        CloudConfig::plaintext(env.address.to_string()),
    )
    .fast();
    for flag in flags {
        builder = builder.arg(flag);
    }
    // The error names deploy/cluster-autoscaler/build.sh when the binary is missing.
    builder.start().await.map_err(|e| anyhow!("{e}"))
}

fn seat_deployment(
    group: &str,
    replicas: usize,
    min: usize,
    max: usize,
    skeleton: &str,
) -> Deployment {
    SeatDeployment {
        group: group.to_owned(),
        namespace: NAMESPACE.to_owned(),
        replicas: i32::try_from(replicas).unwrap(),
        skeleton: SkeletonSource::Inline(skeleton.to_owned()),
        min_size: Some(i32::try_from(min).unwrap()),
        max_size: Some(i32::try_from(max).unwrap()),
        provisioning: None,
    }
    .to_deployment()
}

/// `replicas` pods labelled `app=<name>` (and `bench=<part>`) asking for `cpu`/`memory`,
/// tolerating the virtual nodes' taints, on `group`'s nodes.
fn workload(
    name: &str,
    part: &str,
    replicas: usize,
    cpu: &str,
    memory: &str,
    group: &str,
) -> Deployment {
    let labels = json!({ "app": name, "bench": part });
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "nodeSelector": { GROUP_LABEL: group },
                    "tolerations": [
                        { "key": "dedicated", "operator": "Exists", "effect": "NoSchedule" },
                        { "key": VIRTUAL_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule" }
                    ],
                    "containers": [{
                        "name": "work", "image": "registry.example/work:1",
                        "resources": { "requests": { "cpu": cpu, "memory": memory } }
                    }]
                }
            }
        }
    }))
    .unwrap()
}

async fn create(client: &Client, deployment: &Deployment) -> anyhow::Result<()> {
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), deployment)
        .await?;
    Ok(())
}

/// Waits until the provider serves every group in `groups`.
async fn served(env: &Env, groups: &[String]) -> anyhow::Result<()> {
    ksim_testenv::wait::until("the provider to serve the groups", DEADLINE, || async {
        let missing: Vec<&String> = groups
            .iter()
            .filter(|g| env.provider.target_size(g).is_err())
            .collect();
        missing
            .is_empty()
            .then_some(())
            .ok_or(format!("not yet served: {missing:?}"))
    })
    .await?;
    Ok(())
}

/// Reads a watch until its initial list is complete.
async fn synced<K>(
    stream: &mut (impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin),
) -> anyhow::Result<()> {
    while let Some(event) = stream.try_next().await? {
        if matches!(event, watcher::Event::InitDone) {
            return Ok(());
        }
    }
    bail!("watch ended before its initial list")
}

fn applied<K>(event: watcher::Event<K>) -> Option<K> {
    match event {
        watcher::Event::Apply(object) | watcher::Event::InitApply(object) => Some(object),
        _ => None,
    }
}

/// Waits until `count` nodes matching `selector` are Ready.
async fn nodes_ready(client: &Client, selector: &str, count: usize) -> anyhow::Result<()> {
    let mut ready: HashSet<String> = HashSet::new();
    let mut events = Box::pin(watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().labels(selector),
    ));
    let deadline = tokio::time::sleep(DEADLINE);
    tokio::pin!(deadline);
    while ready.len() < count {
        tokio::select! {
            () = &mut deadline => bail!("{} of {count} nodes Ready", ready.len()),
            event = events.try_next() => {
                let Some(event) = event? else { bail!("node watch ended") };
                if let Some(node) = applied(event) {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    if is_ready(&node) { ready.insert(name); } else { ready.remove(&name); }
                }
            }
        }
    }
    Ok(())
}

/// Waits until `count` pods matching `selector` are Running.
async fn pods_running(client: &Client, selector: &str, count: usize) -> anyhow::Result<()> {
    let mut running: HashSet<String> = HashSet::new();
    let mut events = Box::pin(watcher(
        Api::<Pod>::namespaced(client.clone(), NAMESPACE),
        watcher::Config::default().labels(selector),
    ));
    let deadline = tokio::time::sleep(DEADLINE);
    tokio::pin!(deadline);
    while running.len() < count {
        tokio::select! {
            () = &mut deadline => bail!("{} of {count} pods Running", running.len()),
            event = events.try_next() => {
                let Some(event) = event? else { bail!("pod watch ended") };
                if let Some(pod) = applied(event) && phase(&pod) == Some("Running") {
                    running.insert(pod.metadata.uid.clone().unwrap_or_default());
                }
            }
        }
    }
    Ok(())
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

async fn node_names(client: &Client, group: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect())
}

/// How many RunOnce loops CA has finished, from its metrics.
async fn loops(ca: &ClusterAutoscaler) -> anyhow::Result<u64> {
    let metrics = ca.metrics().await.map_err(|e| anyhow!("{e}"))?;
    Ok(function_durations(&metrics)
        .get("main")
        .map_or(0, |h| h.count as u64))
}

/// Returns once CA has finished `n` more loops.
async fn after_loops(ca: &ClusterAutoscaler, n: u64) -> anyhow::Result<()> {
    let start = loops(ca).await?;
    let started = Instant::now();
    while loops(ca).await? < start + n {
        ensure!(started.elapsed() < DEADLINE, "CA ran fewer than {n} loops");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// How many lines of CA's log contain `needle`.
fn log_count(ca: &ClusterAutoscaler, needle: &str) -> usize {
    std::fs::read(ca.log_path())
        .map(|bytes| {
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|line| line.contains(needle))
                .count()
        })
        .unwrap_or(0)
}

fn print_ca_log_summary(ca: &ClusterAutoscaler) {
    let counts: Vec<String> = [
        "Error on gRPC call",
        "Failed to scale up",
        "Failed to delete",
        "Function main took",
    ]
    .into_iter()
    .map(|needle| format!("\"{needle}\": {}", log_count(ca, needle)))
    .collect();
    println!(
        "  CA log {}: {}",
        ca.log_path().display(),
        counts.join(", ")
    );
}

// ---------------------------------------------------------------------------------------------
// Figures.

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// One Prometheus histogram: cumulative buckets (upper bound, count), sum and count.
#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    /// What was observed since `earlier`.
    fn since(&self, earlier: Option<&Histogram>) -> Histogram {
        let Some(earlier) = earlier else {
            return self.clone();
        };
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, n)| {
                    let before = earlier
                        .buckets
                        .iter()
                        .find(|(l, _)| *l == le)
                        .map_or(0.0, |b| b.1);
                    (le, n - before)
                })
                .collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        }
    }

    fn mean(&self) -> f64 {
        self.sum / self.count
    }

    /// Prometheus's histogram_quantile: linear within the bucket holding the rank.
    fn quantile(&self, q: f64) -> f64 {
        let rank = q * self.count;
        let mut lower = 0.0;
        let mut below = 0.0;
        for &(le, n) in &self.buckets {
            if n >= rank && n > below {
                if le.is_infinite() {
                    return lower;
                }
                return lower + (le - lower) * (rank - below) / (n - below);
            }
            lower = le;
            below = n;
        }
        f64::NAN
    }

    /// The bounds (lower, upper] of the highest bucket with an observation: where the max is.
    fn max_bucket(&self) -> (f64, f64) {
        let mut lower = 0.0;
        let mut below = 0.0;
        let mut found = (0.0, 0.0);
        for &(le, n) in &self.buckets {
            if n > below {
                found = (lower, le);
            }
            lower = le;
            below = n;
        }
        found
    }
}

/// CA's `cluster_autoscaler_function_duration_seconds` histograms by function.
fn function_durations(metrics: &str) -> BTreeMap<String, Histogram> {
    const NAME: &str = "cluster_autoscaler_function_duration_seconds";
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(NAME) else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels: HashMap<&str, &str> = labels
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .collect();
        let Some(function) = labels.get("function") else {
            continue;
        };
        let histogram = out.entry((*function).to_owned()).or_default();
        match kind {
            "_bucket" => {
                let le = match labels.get("le") {
                    Some(&"+Inf") => f64::INFINITY,
                    Some(le) => le.parse().unwrap_or(f64::NAN),
                    None => continue,
                };
                histogram.buckets.push((le, value));
            }
            "_sum" => histogram.sum = value,
            "_count" => histogram.count = value,
            _ => {}
        }
    }
    for histogram in out.values_mut() {
        histogram.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

async fn ca_histograms(ca: &ClusterAutoscaler) -> anyhow::Result<BTreeMap<String, Histogram>> {
    Ok(function_durations(
        &ca.metrics().await.map_err(|e| anyhow!("{e}"))?,
    ))
}

/// CPU seconds (user + system) of a process or thread from its `stat` file.
fn cpu_seconds(stat_path: &str) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    let (head, after_name) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((name, ticks / CLOCK_TICKS_PER_SECOND))
}

/// CPU seconds so far of CA, each control plane process, the provider's runtime threads and
/// this whole process.
fn cpu_snapshot(env: &Env, ca: &ClusterAutoscaler) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if let Some((_, cpu)) = cpu_seconds(&format!("/proc/{}/stat", ca.pid())) {
        out.insert("cluster-autoscaler".to_owned(), cpu);
    }
    for (component, pid) in env.control_plane.pids() {
        if let Some((_, cpu)) = cpu_seconds(&format!("/proc/{pid}/stat")) {
            out.insert(component.to_owned(), cpu);
        }
    }
    let mut provider = 0.0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = format!("{}/stat", task.path().display());
            if let Some((name, cpu)) = cpu_seconds(&path)
                && name.starts_with(PROVIDER_THREAD)
            {
                provider += cpu;
            }
        }
    }
    out.insert("provider (its runtime)".to_owned(), provider);
    if let Some((_, cpu)) = cpu_seconds("/proc/self/stat") {
        out.insert("bench process (pool + provider + watches)".to_owned(), cpu);
    }
    out
}

fn print_cpu(
    title: &str,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    wall: Duration,
) {
    println!("\n{title} ({:.1} s wall)", wall.as_secs_f64());
    println!("| process | CPU (s) | cores |");
    println!("|---|---|---|");
    for (name, end) in after {
        let used = end - before.get(name).copied().unwrap_or(0.0);
        println!("| {name} | {used:.1} | {:.2} |", used / wall.as_secs_f64());
    }
}

// ---------------------------------------------------------------------------------------------
// Part up: scale-up latency.

#[derive(Debug)]
struct UpFigures {
    n: usize,
    increase_calls: usize,
    nodes_added: i32,
    first_increase: f64,
    last_increase: f64,
    unschedulable: Vec<f64>,
    node_ready: Vec<f64>,
    running: Vec<f64>,
    all_running: f64,
}

async fn scale_up(args: &Args) -> anyhow::Result<()> {
    println!("\n== part up: scale-up latency (groups at 0 nodes, one m5.large per pod)");
    let env = start_env().await?;
    let groups: Vec<String> = args.scale_up.iter().map(|n| format!("up{n}")).collect();
    for (&n, group) in args.scale_up.iter().zip(&groups) {
        create(&env.client, &seat_deployment(group, 0, 0, 2 * n, M5_LARGE)).await?;
    }
    served(&env, &groups).await?;
    let ca = start_ca(&env, &[format!("--scan-interval={}", args.scan_interval)]).await?;
    after_loops(&ca, 2).await?;
    let calls_start = env.calls.snapshot();
    let mut results = Vec::new();
    for &n in &args.scale_up {
        let figures = scale_up_once(&env, n).await?;
        println!(
            "  N={n}: all Running after {:.2} s; CA called IncreaseSize {} times for {} nodes",
            figures.all_running, figures.increase_calls, figures.nodes_added
        );
        results.push(figures);
    }
    print_ca_log_summary(&ca);
    println!(
        "\nscale-up, CA --scan-interval={} (seconds from the pod's creation, first seen by a watch)",
        args.scan_interval
    );
    println!(
        "| N | IncreaseSize calls (nodes) | first / last IncreaseSize | pod Unschedulable p50 / p99 | node Ready p50 / p99 | pod Running p50 / p99 | all N Running |"
    );
    println!("|---|---|---|---|---|---|---|");
    for f in &results {
        println!(
            "| {} | {} ({}) | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} |",
            f.n,
            f.increase_calls,
            f.nodes_added,
            f.first_increase,
            f.last_increase,
            percentile(&f.unschedulable, 0.5),
            percentile(&f.unschedulable, 0.99),
            percentile(&f.node_ready, 0.5),
            percentile(&f.node_ready, 0.99),
            percentile(&f.running, 0.5),
            percentile(&f.running, 0.99),
            f.all_running,
        );
    }
    println!(
        "(IncreaseSize times are seconds after the Deployment was created; \"all N Running\" too.)"
    );
    print_calls(
        "provider calls during the scale-ups",
        &calls_start,
        &env.calls.snapshot(),
        None,
    );
    drop(ca);
    Ok(())
}

async fn scale_up_once(env: &Env, n: usize) -> anyhow::Result<UpFigures> {
    let group = format!("up{n}");
    let app = format!("work-{group}");
    let mut scale_events = env.provider.subscribe();
    let mut pods = Box::pin(watcher(
        Api::<Pod>::namespaced(env.client.clone(), NAMESPACE),
        watcher::Config::default().labels(&format!("app={app}")),
    ));
    let mut nodes = Box::pin(watcher(
        Api::<Node>::all(env.client.clone()),
        watcher::Config::default().labels(&format!("{GROUP_LABEL}={group}")),
    ));
    synced(&mut pods).await?;
    synced(&mut nodes).await?;

    let started = Instant::now();
    create(
        &env.client,
        &workload(&app, "up", n, "1500m", "1Gi", &group),
    )
    .await?;
    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut placed: HashMap<String, String> = HashMap::new();
    let mut marked: HashMap<String, Instant> = HashMap::new();
    let mut running: HashMap<String, Instant> = HashMap::new();
    let mut ready: HashMap<String, Instant> = HashMap::new();
    let mut increases: Vec<(Instant, i32)> = Vec::new();
    let deadline = tokio::time::sleep(DEADLINE);
    tokio::pin!(deadline);
    while running.len() < n {
        tokio::select! {
            () = &mut deadline => bail!("{} of {n} pods Running", running.len()),
            event = pods.try_next() => {
                let Some(event) = event? else { bail!("pod watch ended") };
                let Some(pod) = applied(event) else { continue };
                let now = Instant::now();
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                created.entry(uid.clone()).or_insert(now);
                if unschedulable(&pod) {
                    marked.entry(uid.clone()).or_insert(now);
                }
                if let Some(node) = node_of(&pod) {
                    placed.insert(uid.clone(), node.to_owned());
                }
                if phase(&pod) == Some("Running") {
                    running.entry(uid).or_insert(now);
                }
            }
            event = nodes.try_next() => {
                let Some(event) = event? else { bail!("node watch ended") };
                if let Some(node) = applied(event) && is_ready(&node) {
                    ready.entry(node.metadata.name.clone().unwrap_or_default())
                        .or_insert_with(Instant::now);
                }
            }
            event = scale_events.recv() => match event {
                Ok(ScaleEvent::Increased { group: g, delta }) if g == group => {
                    increases.push((Instant::now(), delta));
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => bail!("the provider's events ended"),
            },
        }
    }
    let all_running = started.elapsed().as_secs_f64();
    let since = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
    let mut node_ready = Vec::new();
    let mut pod_running = Vec::new();
    let mut pod_marked = Vec::new();
    for (uid, &at) in &running {
        let created = created[uid];
        pod_running.push(since(created, at));
        if let Some(&m) = marked.get(uid) {
            pod_marked.push(since(created, m));
        }
        // A node Ready before the pod existed (not the case from 0 nodes) counts as 0.
        let node = placed.get(uid).context("a Running pod without a node")?;
        let node_at = ready.get(node).copied().unwrap_or(at);
        node_ready.push(since(created, node_at));
    }
    Ok(UpFigures {
        n,
        increase_calls: increases.len(),
        nodes_added: increases.iter().map(|i| i.1).sum(),
        first_increase: increases.first().map_or(f64::NAN, |i| since(started, i.0)),
        last_increase: increases.last().map_or(f64::NAN, |i| since(started, i.0)),
        unschedulable: sorted(pod_marked),
        node_ready: sorted(node_ready),
        running: sorted(pod_running),
        all_running,
    })
}

// ---------------------------------------------------------------------------------------------
// Part loop: CA's loop time at its scalability target.

async fn loop_time(args: &Args) -> anyhow::Result<()> {
    let pods_total = args.nodes * args.pods_per_node;
    println!(
        "\n== part loop: {} nodes in {} groups, {} pods ({} per node), CA --scan-interval={}",
        args.nodes, args.groups, pods_total, args.pods_per_node, args.loop_scan_interval
    );
    let env = start_env().await?;
    let sizes: Vec<usize> = (0..args.groups)
        .map(|g| args.nodes / args.groups + usize::from(g < args.nodes % args.groups))
        .collect();
    let groups: Vec<String> = (0..args.groups).map(|g| format!("g{g:02}")).collect();
    let started = Instant::now();
    for (group, &size) in groups.iter().zip(&sizes) {
        create(
            &env.client,
            &seat_deployment(group, size, 0, 2 * size, &m5_large_110_pods()),
        )
        .await?;
    }
    // Every group's nodes, not the pool's seat host.
    let virtual_nodes = format!("{GROUP_LABEL},!{SEAT_HOST_LABEL}");
    nodes_ready(&env.client, &virtual_nodes, args.nodes).await?;
    served(&env, &groups).await?;
    println!(
        "  {} nodes Ready after {:.1} s",
        args.nodes,
        started.elapsed().as_secs_f64()
    );

    let mut scale_events = env.provider.subscribe();
    // CA's own defaults for its timings: the tests' 5 s unneeded time would remove nodes the
    // scheduler has not filled yet.
    let ca = start_ca(
        &env,
        &[
            format!("--scan-interval={}", args.loop_scan_interval),
            "--scale-down-unneeded-time=10m".to_owned(),
            "--scale-down-delay-after-add=10m".to_owned(),
            "--scale-down-delay-after-failure=3m".to_owned(),
            "--scale-down-unready-time=20m".to_owned(),
            "--max-node-provision-time=15m".to_owned(),
        ],
    )
    .await?;
    let ca_started = Instant::now();
    let cpu_start = cpu_snapshot(&env, &ca);
    let hist_start = ca_histograms(&ca).await?;
    let calls_start = env.calls.snapshot();

    // Exactly pods_per_node fit a node: the cluster fills without pending pods or spare room.
    let millicpu = ALLOCATABLE_MILLICPU / args.pods_per_node;
    let mib = ALLOCATABLE_MIB / args.pods_per_node / 2;
    for (group, &size) in groups.iter().zip(&sizes) {
        create(
            &env.client,
            &workload(
                &format!("work-{group}"),
                "loop",
                size * args.pods_per_node,
                &format!("{millicpu}m"),
                &format!("{mib}Mi"),
                group,
            ),
        )
        .await?;
    }
    pods_running(&env.client, "bench=loop", pods_total).await?;
    let filled = ca_started.elapsed();
    println!(
        "  {pods_total} pods ({millicpu}m CPU, {mib}Mi each) Running {:.1} s after CA started",
        filled.as_secs_f64()
    );
    let cpu_filled = cpu_snapshot(&env, &ca);
    let hist_filled = ca_histograms(&ca).await?;
    let calls_filled = env.calls.snapshot();
    let settled_at = Instant::now();
    after_loops(&ca, args.loops).await?;
    let settled = settled_at.elapsed();
    let cpu_end = cpu_snapshot(&env, &ca);
    let hist_end = ca_histograms(&ca).await?;
    let calls_end = env.calls.snapshot();
    let mut resizes = 0;
    loop {
        match scale_events.try_recv() {
            Ok(event) => {
                resizes += 1;
                println!("  resize during part loop: {event:?}");
            }
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(n)) => resizes += n,
            Err(_) => break,
        }
    }
    print_ca_log_summary(&ca);

    let window = |end: &BTreeMap<String, Histogram>, start: &BTreeMap<String, Histogram>| {
        end.get("main")
            .map(|h| h.since(start.get("main")))
            .unwrap_or_default()
    };
    let fill = window(&hist_filled, &hist_start);
    let steady = window(&hist_end, &hist_filled);
    println!(
        "\nCA loop time (function_duration_seconds{{function=\"main\"}}), {} nodes / {} groups / {} pods, CA's default timings",
        args.nodes, args.groups, pods_total
    );
    println!("| loops | count | mean (s) | p50 (s) | p99 (s) | max in bucket (s) |");
    println!("|---|---|---|---|---|---|");
    for (name, h) in [("while the pods were placed", &fill), ("settled", &steady)] {
        if h.count == 0.0 {
            println!("| {name} | 0 | - | - | - | - |");
            continue;
        }
        let (low, high) = h.max_bucket();
        println!(
            "| {name} | {:.0} | {:.3} | {:.3} | {:.3} | {low:.3} - {high:.3} |",
            h.count,
            h.mean(),
            h.quantile(0.5),
            h.quantile(0.99),
        );
    }
    println!(
        "CA's published target: 1,000 nodes x 30 pods, every loop under 30 s; its tests measured every loop under 10 s (proposals/scalability_tests.md)."
    );
    println!("resizes by CA during the part: {resizes}");

    println!("\nwhere a settled loop goes (mean per call, seconds; CA's own breakdown)");
    println!("| function | calls | mean (s) | max in bucket (s) |");
    println!("|---|---|---|---|");
    for (function, end) in &hist_end {
        let h = end.since(hist_filled.get(function));
        if h.count > 0.0 {
            let (low, high) = h.max_bucket();
            println!(
                "| {function} | {:.0} | {:.4} | {low:.3} - {high:.3} |",
                h.count,
                h.mean()
            );
        }
    }
    print_calls(
        "provider calls while the pods were placed",
        &calls_start,
        &calls_filled,
        Some(("loop", fill.count.max(1.0))),
    );
    print_calls(
        "provider calls while settled",
        &calls_filled,
        &calls_end,
        Some(("loop", steady.count.max(1.0))),
    );
    print_cpu(
        "CPU while the pods were placed (from CA's start)",
        &cpu_start,
        &cpu_filled,
        filled,
    );
    print_cpu("CPU while settled", &cpu_filled, &cpu_end, settled);
    drop(ca);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Part down: removing many nodes.

async fn scale_down(args: &Args) -> anyhow::Result<()> {
    let n = args.scale_down;
    println!("\n== part down: {n} nodes, one pod each, whose workload is deleted");
    let env = start_env().await?;
    let group = "down";
    let app = "work-down";
    create(&env.client, &seat_deployment(group, n, 0, n, M5_LARGE)).await?;
    nodes_ready(&env.client, &format!("{GROUP_LABEL}={group}"), n).await?;
    create(
        &env.client,
        &workload(app, "down", n, "1500m", "1Gi", group),
    )
    .await?;
    pods_running(&env.client, &format!("app={app}"), n).await?;
    let ca = start_ca(&env, &[format!("--scan-interval={}", args.scan_interval)]).await?;
    after_loops(&ca, 3).await?;
    let before = node_names(&env.client, group).await?;
    let expected = 0;
    let mut scale_events = env.provider.subscribe();
    let cpu_start = cpu_snapshot(&env, &ca);
    let calls_start = env.calls.snapshot();

    let started = Instant::now();
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .delete(app, &DeleteParams::background())
        .await?;
    let seats: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut deletions: Vec<(f64, usize)> = Vec::new();
    let mut decreases = 0;
    let mut pods_gone: Option<f64> = None;
    let mut progress: Vec<(f64, usize)> = Vec::new();
    let mut last_nodes = before.len();
    let at_size = loop {
        loop {
            match scale_events.try_recv() {
                Ok(ScaleEvent::NodesDeleted { group: g, nodes }) if g == group => {
                    deletions.push((started.elapsed().as_secs_f64(), nodes.len()));
                    named.extend(nodes);
                }
                Ok(ScaleEvent::TargetDecreased { group: g, .. }) if g == group => decreases += 1,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                Err(e) => bail!("the provider's events: {e}"),
            }
        }
        let nodes = node_names(&env.client, group).await?;
        let live_seats = seats
            .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count();
        let target = env.provider.target_size(group).ok();
        if pods_gone.is_none() {
            let left = seats
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await?
                .items
                .len();
            if left == 0 {
                pods_gone = Some(started.elapsed().as_secs_f64());
            }
        }
        if nodes.len() != last_nodes {
            last_nodes = nodes.len();
            progress.push((started.elapsed().as_secs_f64(), nodes.len()));
        }
        if nodes.len() == expected
            && live_seats == expected
            && target == Some(i32::try_from(expected).unwrap())
        {
            break started.elapsed();
        }
        ensure!(
            started.elapsed() < DEADLINE,
            "group at {} nodes, {live_seats} seats, target {target:?} after {DEADLINE:?}",
            nodes.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // DeleteNodes events may trail the last node's removal by a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    while let Ok(event) = scale_events.try_recv() {
        if let ScaleEvent::NodesDeleted { group: g, nodes } = event
            && g == group
        {
            deletions.push((started.elapsed().as_secs_f64(), nodes.len()));
            named.extend(nodes);
        }
    }
    let cpu_end = cpu_snapshot(&env, &ca);
    let cpu_wall = started.elapsed();
    let calls_end = env.calls.snapshot();
    let after = node_names(&env.client, group).await?;
    let gone: BTreeSet<String> = before.difference(&after).cloned().collect();
    print_ca_log_summary(&ca);
    println!(
        "\nscale-down of {n} nodes, CA --scan-interval={} --scale-down-unneeded-time=5s (the tests')",
        args.scan_interval
    );
    println!(
        "| nodes | workload pods gone | first DeleteNodes | last DeleteNodes | group at {expected} | DeleteNodes calls | DecreaseTargetSize calls |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {n} | {:.1} s | {:.1} s | {:.1} s | {:.1} s | {} | {decreases} |",
        pods_gone.unwrap_or(f64::NAN),
        deletions.first().map_or(f64::NAN, |d| d.0),
        deletions.last().map_or(f64::NAN, |d| d.0),
        at_size.as_secs_f64(),
        deletions.len(),
    );
    let quartiles: Vec<String> = [0.25, 0.5, 0.75, 1.0]
        .into_iter()
        .filter_map(|q| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let left = n - (n as f64 * q).round() as usize;
            progress
                .iter()
                .find(|(_, count)| *count <= left)
                .map(|(t, _)| format!("{:.0}% gone at {t:.1} s", q * 100.0))
        })
        .collect();
    println!("progress: {}", quartiles.join(", "));
    let sizes: Vec<usize> = deletions.iter().map(|d| d.1).collect();
    println!("nodes per DeleteNodes call: {sizes:?}");
    println!(
        "nodes gone {}, nodes CA named {}, gone but not named {:?}, named but not gone {:?}",
        gone.len(),
        named.len(),
        gone.difference(&named).collect::<Vec<_>>(),
        named.difference(&gone).collect::<Vec<_>>()
    );
    print_calls(
        "provider calls during the scale-down",
        &calls_start,
        &calls_end,
        None,
    );
    print_cpu("CPU during the scale-down", &cpu_start, &cpu_end, cpu_wall);
    drop(ca);
    Ok(())
}
