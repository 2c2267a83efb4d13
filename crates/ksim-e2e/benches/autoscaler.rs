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
//! 4. Provisioning (`--parts provisioning`, not in the default run): the same scale-up from 0 to
//!    `--nodes` nodes (one pod each), a hold, and the scale-down, run twice in one bench run:
//!    with no delays (`instant`) and with `--model` at `--speed`; per side the pool's and the
//!    provider's CPU per phase, the pool's lateness against the model's due times, the times to
//!    all Ready / Running / gone, and the provider's handler time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::SocketAddr,
    pin::Pin,
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
use k8s_openapi::jiff::Timestamp;
use ksim_cloudprov::{
    apiserver::ApiCluster,
    grpc::CloudProviderService,
    index::Index,
    provider::{Provider, ScaleEvent, Settings},
    watches,
};
use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_localenv::fixtures::{M5_LARGE_TAINTED_SKELETON, Workload, seat_deployment};
use ksim_localenv::{CloudConfig, ClusterAutoscaler, ControlPlane};
use ksim_nodes::{
    labels::{
        BOOTING_UNTIL_ANNOTATION, GROUP_LABEL, POD_PROVISIONING_ANNOTATION, SEAT_HOST_LABEL,
        TERMINATING_UNTIL_ANNOTATION,
    },
    node::is_ready,
};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb,
    cloud_provider_server::{CloudProvider, CloudProviderServer},
};
use ksim_provisioning::{GroupProvisioning, Model, PodProvisioning};
use ksim_vnode::{
    config::PoolConfig,
    domain::pod_start::{self, PodStarts, StartDelays},
    pool::Pool,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::watcher,
};
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
/// The pool runtime's thread name, so the pool's CPU time is its threads'.
const POOL_THREAD: &str = "ksim-vnode";

/// The cloud provider tests' m5.large with 110 pods (EKS with prefix delegation), so part 2
/// can run CA's 30 pods per node.
fn m5_large_110_pods() -> String {
    M5_LARGE_TAINTED_SKELETON.replace("pods: \"29\"", "pods: \"110\"")
}

/// [`M5_LARGE_TAINTED_SKELETON`]'s allocatable CPU and memory.
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
    /// Parts loop and provisioning: virtual nodes (part loop creates them at size through the
    /// seat Deployments' replicas; part provisioning has CA scale a group from 0 to this).
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
    /// Part provisioning: the model with delays, run beside `instant` (`published`, or a model
    /// file as `ksim run --provisioning` takes).
    #[arg(long, default_value = "published")]
    model: String,
    /// Part provisioning: the speed that divides the model's delays (recorded time / speed);
    /// 2 puts the published model's scale-up tail near 2 minutes.
    #[arg(long, default_value_t = 2.0)]
    speed: f64,
    /// Part provisioning: CA's --max-scale-down-parallelism. Its default 10 paces the removal
    /// the same on both sides; far more puts DeleteNodes calls, serialised per group, past CA's
    /// 5 s gRPC timeout.
    #[arg(long, default_value_t = 40)]
    down_parallelism: usize,
    /// Part provisioning: seconds to hold the N nodes and pods between scale-up and scale-down.
    #[arg(long, default_value_t = 30)]
    hold_secs: u64,
    /// `cargo bench` passes this to every benchmark binary.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    Up,
    Loop,
    Down,
    Provisioning,
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
        ksim_localenv::autoscaler::cluster_autoscaler_version(),
        ksim_localenv::kubernetes_version()
    );
    for part in &args.parts {
        match part {
            Part::Up => scale_up(&args).await.context("part up")?,
            Part::Loop => loop_time(&args).await.context("part loop")?,
            Part::Down => scale_down(&args).await.context("part down")?,
            Part::Provisioning => provisioning(&args).await.context("part provisioning")?,
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
    pool_runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Env {
    fn drop(&mut self) {
        // A runtime cannot be dropped inside another; these are only let go.
        for runtime in [self.provider_runtime.take(), self.pool_runtime.take()]
            .into_iter()
            .flatten()
        {
            runtime.shutdown_background();
        }
    }
}

/// A 2-worker runtime whose threads carry `name`, so their CPU time can be told apart.
fn named_runtime(name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        // Threads that exit take their CPU time with them; keep blocking threads around.
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()?)
}

/// A client of its own, made on the runtime that calls this, so its connections live there.
async fn own_client(kubeconfig: &std::path::Path) -> anyhow::Result<Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
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
    // The pool on a runtime of its own too, so part provisioning can tell its CPU time.
    let pool_runtime = named_runtime(POOL_THREAD)?;
    let kubeconfig = control_plane.kubeconfig_path().to_owned();
    let pool = pool_runtime
        .spawn(async move {
            let pool = Pool::start(
                own_client(&kubeconfig).await?,
                PoolConfig {
                    pool_name: POOL_NAME.to_owned(),
                    namespace: NAMESPACE.to_owned(),
                    ..PoolConfig::default()
                },
            )
            .await?;
            anyhow::Ok(pool)
        })
        .await??;
    let runtime = named_runtime(PROVIDER_THREAD)?;
    let kubeconfig = control_plane.kubeconfig_path().to_owned();
    // Its own client, so even the provider's HTTP connections live on its runtime.
    let calls = Arc::new(Calls::default());
    let counted = calls.clone();
    let (provider, address, watches) = runtime
        .spawn(async move {
            let client = own_client(&kubeconfig).await?;
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
        pool_runtime: Some(pool_runtime),
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

async fn create(client: &Client, deployment: &Deployment) -> anyhow::Result<()> {
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), deployment)
        .await?;
    Ok(())
}

/// Waits until the provider serves every group in `groups`.
async fn served(env: &Env, groups: &[String]) -> anyhow::Result<()> {
    ksim_localenv::wait::until("the provider to serve the groups", DEADLINE, || async {
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

/// A watch of one kind, boxed so the parts can hold it.
type Watch<K> = Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>;

/// Watches of the pods labelled `app=<app>` and of group `group`'s nodes, past their initial
/// lists, so every later change is seen.
async fn watch_workload(
    env: &Env,
    app: &str,
    group: &str,
) -> anyhow::Result<(Watch<Pod>, Watch<Node>)> {
    let mut pods: Watch<Pod> = Box::pin(watcher(
        Api::<Pod>::namespaced(env.client.clone(), NAMESPACE),
        watcher::Config::default().labels(&format!("app={app}")),
    ));
    let mut nodes: Watch<Node> = Box::pin(watcher(
        Api::<Node>::all(env.client.clone()),
        watcher::Config::default().labels(&format!("{GROUP_LABEL}={group}")),
    ));
    synced(&mut pods).await?;
    synced(&mut nodes).await?;
    Ok((pods, nodes))
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

const PROVIDER_CPU: &str = "provider (its runtime)";
const POOL_CPU: &str = "pool (its runtime)";

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
    let (mut provider, mut pool) = (0.0, 0.0);
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = format!("{}/stat", task.path().display());
            if let Some((name, cpu)) = cpu_seconds(&path) {
                if name.starts_with(PROVIDER_THREAD) {
                    provider += cpu;
                } else if name.starts_with(POOL_THREAD) {
                    pool += cpu;
                }
            }
        }
    }
    out.insert(PROVIDER_CPU.to_owned(), provider);
    out.insert(POOL_CPU.to_owned(), pool);
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
        let seats = seat_deployment(
            group,
            0,
            0,
            i32::try_from(2 * n)?,
            M5_LARGE_TAINTED_SKELETON,
        );
        create(&env.client, &seats.to_deployment()).await?;
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
    let (mut pods, mut nodes) = watch_workload(env, &app, &group).await?;

    let workload = Workload::new(&app, i32::try_from(n)?)
        .requests("1500m", "1Gi")
        .on_group(&group)
        .pod_label("bench", "up")
        .deployment();
    let started = Instant::now();
    create(&env.client, &workload).await?;
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
            &seat_deployment(
                group,
                i32::try_from(size)?,
                0,
                i32::try_from(2 * size)?,
                &m5_large_110_pods(),
            )
            .to_deployment(),
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
            &Workload::new(
                &format!("work-{group}"),
                i32::try_from(size * args.pods_per_node)?,
            )
            .requests(&format!("{millicpu}m"), &format!("{mib}Mi"))
            .on_group(group)
            .pod_label("bench", "loop")
            .deployment(),
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
    let size = i32::try_from(n)?;
    let seats = seat_deployment(group, size, 0, size, M5_LARGE_TAINTED_SKELETON);
    create(&env.client, &seats.to_deployment()).await?;
    nodes_ready(&env.client, &format!("{GROUP_LABEL}={group}"), n).await?;
    create(
        &env.client,
        &Workload::new(app, size)
            .requests("1500m", "1Gi")
            .on_group(group)
            .pod_label("bench", "down")
            .deployment(),
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

// ---------------------------------------------------------------------------------------------
// Part provisioning: what the provisioning model's delays cost the pool and the provider.

const PROVISIONING_GROUP: &str = "prov";

/// One side of part provisioning: the figures of one scale-up, hold and scale-down.
#[derive(Debug)]
struct ProvisioningFigures {
    label: String,
    /// Seconds from the workload's creation.
    all_ready: f64,
    all_running: f64,
    /// Seconds from the workload's deletion.
    all_gone: f64,
    /// Seconds after the due time (negative: before it), per node or pod.
    ready_late: Vec<f64>,
    running_late: Vec<f64>,
    gone_late: Vec<f64>,
    /// Per phase (scale-up, hold, scale-down): wall seconds, pool CPU, provider CPU.
    phases: [(f64, f64, f64); 3],
    calls: (
        BTreeMap<&'static str, CallStats>,
        BTreeMap<&'static str, CallStats>,
    ),
    ca_log: String,
}

async fn provisioning(args: &Args) -> anyhow::Result<()> {
    let n = args.nodes;
    ensure!(
        args.speed.is_finite() && args.speed > 0.0,
        "--speed must be a number > 0"
    );
    let delayed = match Model::builtin(&args.model) {
        Ok(model) => model,
        Err(_) => {
            let yaml = std::fs::read_to_string(&args.model)
                .with_context(|| format!("reading the model file {}", args.model))?;
            Model::parse(&args.model, &yaml)?
        }
    };
    ensure!(
        !delayed.is_instant(),
        "--model {} has no delays: nothing to compare with instant",
        args.model
    );
    println!(
        "\n== part provisioning: a group from 0 to {n} nodes (one pod each), held {} s, back to 0; \
         instant, then {} at speed {} (its delays / {}), CA --scan-interval={}",
        args.hold_secs, delayed.name, args.speed, args.speed, args.scan_interval
    );
    println!("  model: {}", delayed.summary());
    let mut sides = Vec::new();
    for model in [Model::instant(), delayed] {
        let figures = provisioning_side(args, &model)
            .await
            .with_context(|| format!("side {}", model.name))?;
        println!(
            "  {}: all {n} Ready {:.1} s, Running {:.1} s, gone {:.1} s after the scale-down",
            figures.label, figures.all_ready, figures.all_running, figures.all_gone
        );
        sides.push(figures);
    }
    print_provisioning(args, &sides);
    Ok(())
}

/// `model`'s side: a fresh environment, the scale-up, the hold, the scale-down.
async fn provisioning_side(args: &Args, model: &Model) -> anyhow::Result<ProvisioningFigures> {
    let n = args.nodes;
    let group = PROVISIONING_GROUP;
    let app = "work-prov";
    let instant = model.is_instant();
    let label = if instant {
        model.name.clone()
    } else {
        format!("{} at speed {}", model.name, args.speed)
    };
    let env = start_env().await?;
    let mut seats = seat_deployment(group, 0, 0, i32::try_from(n)?, M5_LARGE_TAINTED_SKELETON);
    // The instant side carries nothing, as a group without a model.
    if !instant {
        seats.provisioning = Some(GroupProvisioning::of(model, group, args.speed).to_json());
    }
    create(&env.client, &seats.to_deployment()).await?;
    served(&env, &[group.to_owned()]).await?;
    let ca = start_ca(
        &env,
        &[
            format!("--scan-interval={}", args.scan_interval),
            // A booting node is not a broken one (production's value), and a slow boot is not
            // a failed scale-up.
            "--scale-down-unready-time=20m".to_owned(),
            "--max-node-provision-time=15m".to_owned(),
            format!("--max-scale-down-parallelism={}", args.down_parallelism),
        ],
    )
    .await?;
    after_loops(&ca, 2).await?;

    let (mut pods, mut nodes) = watch_workload(&env, app, group).await?;

    let mut workload = Workload::new(app, i32::try_from(n)?)
        .requests("1500m", "1Gi")
        .on_group(group)
        .pod_label("bench", "provisioning")
        .deployment();
    let owner = format!("Deployment/{NAMESPACE}/{app}");
    if let Some(pod) = PodProvisioning::of(model, &owner, args.speed) {
        workload
            .spec
            .as_mut()
            .context("workload without spec")?
            .template
            .metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default)
            .insert(POD_PROVISIONING_ANNOTATION.to_owned(), pod.to_json());
    }
    let cpu_start = cpu_snapshot(&env, &ca);
    let calls_start = env.calls.snapshot();
    let started = Instant::now();
    create(&env.client, &workload).await?;

    // Each node's Ready due time as first annotated, and when the watch saw it Ready.
    let mut booting_until: HashMap<String, Timestamp> = HashMap::new();
    let mut ready: HashMap<String, Timestamp> = HashMap::new();
    let mut running: HashSet<String> = HashSet::new();
    let mut starts = PodStarts::default();
    let mut running_late = Vec::new();
    let mut all_ready = None;
    let deadline = tokio::time::sleep(DEADLINE);
    tokio::pin!(deadline);
    while running.len() < n || ready.len() < n {
        tokio::select! {
            () = &mut deadline => bail!("{} nodes Ready, {} of {n} pods Running", ready.len(), running.len()),
            event = pods.try_next() => {
                let Some(event) = event? else { bail!("pod watch ended") };
                let now = Timestamp::now();
                let Some(pod) = applied(event) else { continue };
                if phase(&pod) != Some("Running") {
                    continue;
                }
                let key = format!("{NAMESPACE}/{}", pod.metadata.name.as_deref().unwrap_or_default());
                if !running.insert(key.clone()) {
                    continue;
                }
                // The due time as the pool computes it: bound (PodScheduled) plus the drawn
                // start and first pull; a pod without a model is due when bound.
                let delays = match pod_start::provisioning(&pod)? {
                    Some(given) => pod_start::draw(&given, &key, &pod),
                    None => StartDelays { start: Duration::ZERO, pulls: Vec::new() },
                };
                let node = node_of(&pod).context("a Running pod without a node")?;
                let due = starts.due(&key, node, pod_start::scheduled_at(&pod), now, &delays);
                running_late.push(late(now, due.at));
            }
            event = nodes.try_next() => {
                let Some(event) = event? else { bail!("node watch ended") };
                let now = Timestamp::now();
                let Some(node) = applied(event) else { continue };
                let name = node.metadata.name.clone().unwrap_or_default();
                if let Some(at) = annotated(&node, BOOTING_UNTIL_ANNOTATION) {
                    booting_until.entry(name.clone()).or_insert(at);
                }
                if is_ready(&node) {
                    ready.entry(name).or_insert(now);
                    if ready.len() == n && all_ready.is_none() {
                        all_ready = Some(started.elapsed());
                    }
                }
            }
        }
    }
    let all_running = started.elapsed();
    let up_wall = started.elapsed();
    let cpu_up = cpu_snapshot(&env, &ca);
    let ready_late: Vec<f64> = ready
        .iter()
        .filter_map(|(name, &at)| booting_until.get(name).map(|&due| late(at, due)))
        .collect();

    tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    let cpu_held = cpu_snapshot(&env, &ca);

    let down_started = Instant::now();
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .delete(app, &DeleteParams::background())
        .await?;
    let mut terminating_until: HashMap<String, Timestamp> = HashMap::new();
    let mut gone: HashSet<String> = HashSet::new();
    let mut gone_late = Vec::new();
    // A watch that relists would miss deletions; a listing ends the wait as well.
    let mut check = tokio::time::interval(Duration::from_secs(2));
    while gone.len() < n {
        tokio::select! {
            () = &mut deadline => bail!("{} of {n} nodes gone", gone.len()),
            _ = check.tick() => {
                if node_names(&env.client, group).await?.is_empty() {
                    break;
                }
            }
            event = nodes.try_next() => {
                let Some(event) = event? else { bail!("node watch ended") };
                let now = Timestamp::now();
                match event {
                    watcher::Event::Delete(node) => {
                        let name = node.metadata.name.clone().unwrap_or_default();
                        let due = annotated(&node, TERMINATING_UNTIL_ANNOTATION)
                            .or_else(|| terminating_until.get(&name).copied());
                        if gone.insert(name) && let Some(due) = due {
                            gone_late.push(late(now, due));
                        }
                    }
                    watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                        if let Some(at) = annotated(&node, TERMINATING_UNTIL_ANNOTATION) {
                            terminating_until
                                .entry(node.metadata.name.clone().unwrap_or_default())
                                .or_insert(at);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let all_gone = down_started.elapsed();
    let cpu_down = cpu_snapshot(&env, &ca);
    let calls_end = env.calls.snapshot();
    let phase_of = |before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, wall: f64| {
        let used = |name: &str| after.get(name).unwrap_or(&0.0) - before.get(name).unwrap_or(&0.0);
        (wall, used(POOL_CPU), used(PROVIDER_CPU))
    };
    let ca_log = [
        "Error on gRPC call",
        "Failed to scale up",
        "Failed to delete",
        "Cluster is not ready",
    ]
    .into_iter()
    .map(|needle| format!("\"{needle}\": {}", log_count(&ca, needle)))
    .collect::<Vec<_>>()
    .join(", ");
    drop(ca);
    Ok(ProvisioningFigures {
        label,
        all_ready: all_ready.unwrap_or(all_running).as_secs_f64(),
        all_running: all_running.as_secs_f64(),
        all_gone: all_gone.as_secs_f64(),
        ready_late: sorted(ready_late),
        running_late: sorted(running_late),
        gone_late: sorted(gone_late),
        phases: [
            phase_of(&cpu_start, &cpu_up, up_wall.as_secs_f64()),
            phase_of(&cpu_up, &cpu_held, args.hold_secs as f64),
            phase_of(&cpu_held, &cpu_down, all_gone.as_secs_f64()),
        ],
        calls: (calls_start, calls_end),
        ca_log,
    })
}

/// Seconds from `due` to `at` (negative when `at` came first).
fn late(at: Timestamp, due: Timestamp) -> f64 {
    at.duration_since(due).as_secs_f64()
}

fn annotated(node: &Node, key: &str) -> Option<Timestamp> {
    node.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// p50 / p99 / max in milliseconds, or `-` when nothing was due.
fn lateness(values: &[f64]) -> String {
    if values.is_empty() {
        return "- (no due times)".to_owned();
    }
    format!(
        "{:.0} / {:.0} / {:.0} ({})",
        percentile(values, 0.5) * 1e3,
        percentile(values, 0.99) * 1e3,
        values.last().copied().unwrap_or(f64::NAN) * 1e3,
        values.len()
    )
}

fn print_provisioning(args: &Args, sides: &[ProvisioningFigures]) {
    println!(
        "\nprovisioning delays at {} nodes, side by side (one run; CA --scan-interval={}, \
         --max-scale-down-parallelism={}, --scale-down-unready-time=20m)",
        args.nodes, args.scan_interval, args.down_parallelism
    );
    let header: Vec<&str> = sides.iter().map(|s| s.label.as_str()).collect();
    println!("| figure | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(sides.len()));
    let row = |name: &str, cell: &dyn Fn(&ProvisioningFigures) -> String| {
        let cells: Vec<String> = sides.iter().map(cell).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("all nodes Ready (s after the workload)", &|s| {
        format!("{:.1}", s.all_ready)
    });
    row("all pods Running (s after the workload)", &|s| {
        format!("{:.1}", s.all_running)
    });
    row("all nodes gone (s after its deletion)", &|s| {
        format!("{:.1}", s.all_gone)
    });
    for (i, phase) in ["scale-up", "hold", "scale-down"].iter().enumerate() {
        row(&format!("pool CPU, {phase} (s; cores)"), &|s| {
            let (wall, pool, _) = s.phases[i];
            format!("{pool:.1}; {:.2}", pool / wall)
        });
        row(&format!("provider CPU, {phase} (s; cores)"), &|s| {
            let (wall, _, provider) = s.phases[i];
            format!("{provider:.1}; {:.2}", provider / wall)
        });
    }
    row("node Ready late p50 / p99 / max ms (nodes)", &|s| {
        lateness(&s.ready_late)
    });
    row("pod Running late p50 / p99 / max ms (pods)", &|s| {
        lateness(&s.running_late)
    });
    row("node gone late p50 / p99 / max ms (nodes)", &|s| {
        lateness(&s.gone_late)
    });
    row("provider handler: calls, total s, slowest ms", &|s| {
        let (before, after) = &s.calls;
        let (mut count, mut total, mut max) = (0, Duration::ZERO, Duration::ZERO);
        for (method, end) in after {
            let start = before.get(method).copied().unwrap_or_default();
            count += end.count - start.count;
            total += end.total.saturating_sub(start.total);
            max = max.max(end.max);
        }
        format!(
            "{count}, {:.2}, {:.1}",
            total.as_secs_f64(),
            max.as_secs_f64() * 1e3
        )
    });
    row("CA log", &|s| s.ca_log.clone());
    println!(
        "(late: watch-observed time minus the due time: the node's ksim.io/booting-until for \
         Ready, its ksim.io/terminating-until for gone, and for a pod its PodScheduled time, \
         whole seconds, plus its drawn start and first pull, as the pool computes it; the \
         instant side's nodes carry no due times and its pods are due when bound)"
    );
    for side in sides {
        print_calls(
            &format!("provider calls, {}", side.label),
            &side.calls.0,
            &side.calls.1,
            None,
        );
    }
}
