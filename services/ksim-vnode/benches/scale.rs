//! Scale benchmark: N virtual nodes and M pods from Deployments on the real control plane,
//! for ksim-vnode and, side by side, KWOK. Prints figures; asserts nothing.
//!
//!   cargo bench -p ksim-vnode --bench scale -- --nodes 1000 --pods 10000 --hold-seconds 600
//!
//! With `--prebound` the pods are created already bound (no Deployments, no scheduler), which
//! measures the providers where they, not the scheduler, set the pace.
//!
//! Each provider gets a fresh control plane built from the same binaries with the same
//! flags, and runs as a separate process so its CPU time and peak RSS are its own.
//! `--planes` runs the whole measurement once per control-plane tuning (`stock`,
//! `simulation`, `stock+SETTING`, `simulation-SETTING`; see `ksim_localenv::tuning`), so
//! that each setting's effect is measured side by side with the others in one run; the
//! components' CPU time and peak RSS are reported with the provider's. `--lease-seconds`
//! runs it once per lease the nodes hold instead of the plane's (a run with disruptions at 20x
//! holds a kubelet's 40 s divided: 2 s). Latencies are taken from one watch in this process: the moment a pod
//! is first seen bound to the moment it is first seen Running.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use common::{ProcessGroup, SKELETON, connect, process_usage, spawn, wait_nodes_ready};

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    coordination::v1::Lease,
    core::v1::{Namespace, Node, Pod},
    resource::v1::ResourceSlice,
};
use ksim_localenv::{ControlPlane, Tuning, free_port};
use ksim_nodes::node::is_ready;
use ksim_proto::ksim::vnode::v1::CreateNodeGroupRequest;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

const NAMESPACE: &str = "bench";
const PODS_PER_DEPLOYMENT: usize = 1000;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Seconds to hold the cluster after all pods run, counting NotReady transitions.
    #[arg(long, default_value_t = 600)]
    hold_seconds: u64,
    /// Control-plane tunings to measure, in order; each runs every provider.
    #[arg(long, value_delimiter = ',', default_value = "simulation")]
    planes: Vec<Tuning>,
    /// Node leases to measure, in seconds, each a run of its own; default: the plane's (its
    /// tuning's, else a kubelet's 40 s).
    #[arg(long, value_delimiter = ',')]
    lease_seconds: Vec<u32>,
    /// Providers to measure, in order.
    #[arg(long, value_delimiter = ',', default_value = "ksim,kwok64")]
    providers: Vec<ProviderKind>,
    /// Directory holding the `kwok` binary (deploy/kwok/install.sh prints it).
    #[arg(long, env = "KSIM_KWOK_BIN_DIR")]
    kwok_bin_dir: Option<PathBuf>,
    /// Create the pods already bound, round-robin over the provider's nodes, instead of
    /// through Deployments and the scheduler: the provider's own rate, without the scheduler's
    /// bound on it.
    #[arg(long)]
    prebound: bool,
    /// GPUs per node published by DRA: the skeleton gets a ResourceSlice of that many devices,
    /// which the pool publishes for each node (ksim only); 0: none.
    #[arg(long, default_value_t = 0)]
    devices: usize,
    /// A command to run ksim-vnode under, e.g. `heaptrack` to profile its memory.
    #[arg(long)]
    ksim_wrapper: Option<String>,
    /// `cargo bench` passes this to every benchmark binary.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProviderKind {
    /// ksim-vnode with its default settings.
    Ksim,
    /// KWOK with its default 4 workers per controller.
    Kwok,
    /// KWOK with 64 workers per controller, ksim-vnode's default concurrency.
    Kwok64,
}

#[derive(Debug, Default)]
struct Figures {
    nodes_ready_seconds: f64,
    pods_running_seconds: f64,
    /// When the scheduler had bound the last pod: the rate no provider can beat.
    pods_bound_seconds: f64,
    pods_per_second: f64,
    bind_to_running_p50_ms: f64,
    bind_to_running_p99_ms: f64,
    not_ready_transitions: usize,
    /// The longest time between two renewals of one node's Lease seen during the hold: how
    /// close the provider came to the node lifecycle controller's grace period.
    max_renewal_gap_seconds: f64,
    /// Lease renewals seen per second during the hold.
    renewals_per_second: f64,
    cpu_seconds: f64,
    peak_rss_mib: f64,
    /// Resident memory at the end of the hold, after the burst.
    end_rss_mib: f64,
    /// Each control-plane component's CPU seconds and peak RSS (MiB) at the end.
    components: Vec<(&'static str, f64, f64)>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut results = Vec::new();
    let leases: Vec<Option<u32>> = if args.lease_seconds.is_empty() {
        vec![None]
    } else {
        args.lease_seconds.iter().copied().map(Some).collect()
    };
    for plane in &args.planes {
        for lease in &leases {
            let lease = lease.unwrap_or_else(|| lease_seconds(plane));
            for provider in &args.providers {
                println!(
                    "== {provider:?} on a {plane} control plane, {lease} s leases: {} nodes, {} \
                     pods, hold {} s",
                    args.nodes, args.pods, args.hold_seconds
                );
                let figures = run(&args, plane, *provider, lease)
                    .await
                    .with_context(|| format!("{provider:?} on {plane}, {lease} s leases"))?;
                println!("{figures:#?}");
                results.push((plane.clone(), lease, *provider, figures));
            }
        }
    }
    print_table(&args, &results);
    Ok(())
}

async fn run(
    args: &Args,
    plane: &Tuning,
    provider: ProviderKind,
    lease: u32,
) -> anyhow::Result<Figures> {
    let control_plane = ControlPlane::builder()
        .tuning(plane.clone())
        .start()
        .await?;
    let client = control_plane.client();
    create_namespace(&client).await?;
    let running = start_provider(args, provider, &control_plane, lease).await?;
    let pid = running.child.id();

    let started = Instant::now();
    create_nodes(args, &running, &client).await?;
    wait_nodes_ready(&client, running.node_selector, args.nodes).await?;
    let nodes_ready_seconds = started.elapsed().as_secs_f64();
    println!(
        "  {} nodes Ready after {nodes_ready_seconds:.1} s",
        args.nodes
    );
    if args.devices > 0 {
        let slices: Api<ResourceSlice> = Api::all(client.clone());
        loop {
            let published = slices.list_metadata(&Default::default()).await?.items.len();
            if published >= args.nodes {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!(
            "  {} ResourceSlices of {} devices published after {:.1} s",
            args.nodes,
            args.devices,
            started.elapsed().as_secs_f64()
        );
    }

    let PodRun {
        running_seconds: pods_running_seconds,
        bound_seconds: pods_bound_seconds,
        mut latencies,
    } = run_pods(args, &running, &client).await?;
    println!(
        "  {} pods bound after {pods_bound_seconds:.1} s, Running after {pods_running_seconds:.1} s",
        args.pods
    );
    latencies.sort_unstable_by(f64::total_cmp);

    let (not_ready_transitions, max_renewal_gap_seconds, renewals) = hold(
        &client,
        running.node_selector,
        Duration::from_secs(args.hold_seconds),
    )
    .await?;
    let (cpu_seconds, peak_rss_mib, end_rss_mib) = process_usage(pid)?;
    drop(running);
    let mut components = Vec::new();
    for (name, pid) in control_plane.pids() {
        let (cpu, peak, _) = process_usage(pid)?;
        components.push((name, cpu, peak));
    }
    Ok(Figures {
        nodes_ready_seconds,
        pods_running_seconds,
        pods_bound_seconds,
        pods_per_second: args.pods as f64 / pods_running_seconds,
        bind_to_running_p50_ms: percentile(&latencies, 0.50),
        bind_to_running_p99_ms: percentile(&latencies, 0.99),
        not_ready_transitions,
        max_renewal_gap_seconds,
        renewals_per_second: renewals as f64 / args.hold_seconds.max(1) as f64,
        cpu_seconds,
        peak_rss_mib,
        end_rss_mib,
        components,
    })
}

async fn create_namespace(client: &Client) -> anyhow::Result<()> {
    let namespace: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    ksim_localenv::wait::default_service_account(client, NAMESPACE, Duration::from_secs(60))
        .await?;
    Ok(())
}

/// A provider process under measurement. It leads a process group of its own, killed whole
/// on drop: a `--ksim-wrapper` would otherwise leave the pool it started running, and so
/// would an error on the way.
struct Provider {
    kind: ProviderKind,
    child: ProcessGroup,
    node_selector: &'static str,
    /// ksim-vnode's gRPC address; KWOK has no API for nodes.
    grpc_addr: Option<String>,
}

async fn start_provider(
    args: &Args,
    kind: ProviderKind,
    control_plane: &ControlPlane,
    lease: u32,
) -> anyhow::Result<Provider> {
    let log_dir = control_plane.dir().context("control plane directory")?;
    match kind {
        ProviderKind::Ksim => {
            let grpc_addr = format!("127.0.0.1:{}", free_port()?);
            let pool_binary = Path::new(env!("CARGO_BIN_EXE_ksim-vnode"));
            let (binary, mut pool_args) = match &args.ksim_wrapper {
                Some(wrapper) => (
                    Path::new(wrapper.as_str()),
                    vec![pool_binary.display().to_string()],
                ),
                None => (pool_binary, Vec::new()),
            };
            pool_args.extend([
                format!("--grpc-addr={grpc_addr}"),
                format!("--admin-addr=127.0.0.1:{}", free_port()?),
                "--namespace=default".to_owned(),
                "--pool-name=bench".to_owned(),
                "--log-filter=warn".to_owned(),
                format!("--lease-duration-seconds={lease}"),
            ]);
            let child = spawn(
                binary,
                &pool_args,
                control_plane.kubeconfig_path(),
                &log_dir.join("ksim-vnode.log"),
            )?;
            Ok(Provider {
                kind,
                child,
                node_selector: "ksim.io/node-group=bench",
                grpc_addr: Some(grpc_addr),
            })
        }
        ProviderKind::Kwok | ProviderKind::Kwok64 => {
            let dir = args
                .kwok_bin_dir
                .clone()
                .context("--kwok-bin-dir (run deploy/kwok/install.sh)")?;
            let child = spawn(
                &dir.join("kwok"),
                &kwok_args(control_plane, kind == ProviderKind::Kwok64, lease)?,
                control_plane.kubeconfig_path(),
                &log_dir.join("kwok.log"),
            )?;
            Ok(Provider {
                kind,
                child,
                node_selector: "type=kwok",
                grpc_addr: None,
            })
        }
    }
}

/// The lease both providers hold on `plane`: the tuning's, else a kubelet's 40 s.
fn lease_seconds(plane: &Tuning) -> u32 {
    plane.node_lease_seconds().unwrap_or(40)
}

/// The flags deploy/kwok/README.md explains: our stages, leases like the pool's (a kubelet's
/// 40 s unless the plane's tuning says otherwise), a pod CIDR apart from the service range,
/// and a free port for its health server.
fn kwok_args(
    control_plane: &ControlPlane,
    parallel: bool,
    lease_seconds: u32,
) -> anyhow::Result<Vec<String>> {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kwok");
    let mut args = vec![
        format!("--kubeconfig={}", control_plane.kubeconfig_path().display()),
        format!("--config={}", deploy.join("stages.yaml").display()),
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".to_owned(),
        format!("--node-lease-duration-seconds={lease_seconds}"),
        "--cidr=10.128.0.0/9".to_owned(),
        "--node-ip=127.0.0.1".to_owned(),
        format!("--server-address=127.0.0.1:{}", free_port()?),
        "--v=WARN".to_owned(),
    ];
    if parallel {
        args.push(format!(
            "--config={}",
            deploy.join("parallelism-64.yaml").display()
        ));
    }
    Ok(args)
}

/// The bench's node, with `devices` GPUs in a ResourceSlice after it when not 0.
fn skeleton(devices: usize) -> String {
    if devices == 0 {
        return SKELETON.to_owned();
    }
    let devices: String = (0..devices)
        .map(|index| {
            format!(
                "  - name: gpu-{index}\n    attributes: {{ model: {{ string: A100 }} }}\n    \
                 capacity: {{ memory: {{ value: 80Gi }} }}\n"
            )
        })
        .collect();
    format!(
        "{SKELETON}---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nspec:\n  \
         driver: gpu.ksim.io\n  pool: {{ name: bench, resourceSliceCount: 1 }}\n  devices:\n\
         {devices}"
    )
}

async fn create_nodes(args: &Args, provider: &Provider, client: &Client) -> anyhow::Result<()> {
    match provider.kind {
        ProviderKind::Ksim => {
            let mut pool =
                connect(provider.grpc_addr.as_deref().context("no gRPC address")?).await?;
            pool.create_node_group(CreateNodeGroupRequest {
                name: "bench".to_owned(),
                node_skeleton_yaml: skeleton(args.devices),
                count: i32::try_from(args.nodes)?,
                provisioning_json: String::new(),
            })
            .await?;
            Ok(())
        }
        ProviderKind::Kwok | ProviderKind::Kwok64 => {
            let nodes: Api<Node> = Api::all(client.clone());
            stream::iter(0..args.nodes)
                .map(|n| {
                    let nodes = nodes.clone();
                    async move {
                        let name = format!("kwok-{n}");
                        let node: Node = serde_json::from_value(kwok_node(&name))?;
                        nodes.create(&PostParams::default(), &node).await?;
                        let status = json!({ "status": kwok_node(&name)["status"] });
                        nodes
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                            .await?;
                        anyhow::Ok(())
                    }
                })
                .buffer_unordered(64)
                .try_collect::<Vec<()>>()
                .await?;
            Ok(())
        }
    }
}

fn kwok_node(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": { "kwok.x-k8s.io/node": "fake" },
            "labels": { "type": "kwok", "kubernetes.io/hostname": name,
                        "node.kubernetes.io/instance-type": "bench.32xlarge" }
        },
        "spec": { "taints": [{ "key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule" }] },
        "status": {
            "capacity": { "cpu": "32", "memory": "128Gi", "pods": "110" },
            "allocatable": { "cpu": "32", "memory": "128Gi", "pods": "110" }
        }
    })
}

struct PodRun {
    /// Seconds from creating the Deployments until every pod ran.
    running_seconds: f64,
    /// Seconds from creating the Deployments until the scheduler had bound every pod.
    bound_seconds: f64,
    /// Each pod's bind-to-Running latency in milliseconds.
    latencies: Vec<f64>,
}

async fn run_pods(args: &Args, provider: &Provider, client: &Client) -> anyhow::Result<PodRun> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut events = Box::pin(
        watcher(
            pods.clone(),
            watcher::Config::default().labels("bench=scale"),
        )
        .applied_objects(),
    );
    let nodes = if args.prebound {
        node_names(client, provider.node_selector).await?
    } else {
        Vec::new()
    };
    let started = Instant::now();
    // Aborted when dropped: a failed watch stops the creates too.
    let mut creating = tokio::task::JoinSet::new();
    if args.prebound {
        creating.spawn(create_bound_pods(pods, nodes, args.pods, provider.kind));
    } else {
        create_deployments(client, args.pods, provider.kind).await?;
    }
    let mut bound_at: HashMap<String, Instant> = HashMap::new();
    let mut last_bound = started;
    let mut latencies: BTreeMap<String, f64> = BTreeMap::new();
    while let Some(pod) = events.try_next().await? {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let now = Instant::now();
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
        {
            bound_at.entry(uid.clone()).or_insert_with(|| {
                last_bound = now;
                now
            });
        }
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if let Some(Ok(Err(error))) = creating.try_join_next() {
            return Err(error.context("creating pods"));
        }
        if running && !latencies.contains_key(&uid) {
            let bound = bound_at.get(&uid).copied().unwrap_or(now);
            latencies.insert(uid, now.duration_since(bound).as_secs_f64() * 1000.0);
            if latencies.len() == args.pods {
                return Ok(PodRun {
                    running_seconds: started.elapsed().as_secs_f64(),
                    bound_seconds: last_bound.duration_since(started).as_secs_f64(),
                    latencies: latencies.into_values().collect(),
                });
            }
        }
    }
    bail!("pod watch ended")
}

async fn create_deployments(
    client: &Client,
    pods: usize,
    provider: ProviderKind,
) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let mut remaining = pods;
    let mut index = 0;
    while remaining > 0 {
        let replicas = remaining.min(PODS_PER_DEPLOYMENT);
        deployments
            .create(
                &PostParams::default(),
                &deployment(index, replicas, provider)?,
            )
            .await?;
        remaining -= replicas;
        index += 1;
    }
    Ok(())
}

async fn node_names(client: &Client, selector: &str) -> anyhow::Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&kube::api::ListParams::default().labels(selector))
        .await?;
    let names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .collect();
    if names.is_empty() {
        bail!("no nodes match {selector}");
    }
    Ok(names)
}

/// `count` pods created with their node already set, 64 at a time, as the scheduler would
/// leave them.
async fn create_bound_pods(
    pods: Api<Pod>,
    nodes: Vec<String>,
    count: usize,
    provider: ProviderKind,
) -> anyhow::Result<()> {
    stream::iter(0..count)
        .map(|n| {
            let pods = pods.clone();
            let node = nodes[n % nodes.len()].clone();
            async move {
                let mut spec = pod_spec(provider);
                spec["nodeName"] = json!(node);
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": { "name": format!("bound-{n}"), "labels": { "bench": "scale" } },
                    "spec": spec,
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn deployment(index: usize, replicas: usize, provider: ProviderKind) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": format!("scale-{index}") },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "bench": "scale", "set": index.to_string() } },
            "template": {
                "metadata": { "labels": { "bench": "scale", "set": index.to_string() } },
                "spec": pod_spec(provider),
            }
        }
    }))?)
}

/// The pods' spec: on the provider's nodes, one small container.
fn pod_spec(provider: ProviderKind) -> serde_json::Value {
    let (selector, toleration) = match provider {
        ProviderKind::Ksim => (
            json!({ "ksim.io/node-group": "bench" }),
            json!({ "key": "ksim.io/virtual-node", "operator": "Exists" }),
        ),
        ProviderKind::Kwok | ProviderKind::Kwok64 => (
            json!({ "type": "kwok" }),
            json!({ "key": "kwok.x-k8s.io/node", "operator": "Exists" }),
        ),
    };
    json!({
        "nodeSelector": selector,
        "tolerations": [toleration],
        "containers": [{ "name": "app", "image": "registry.example/app:1",
                         "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } } }]
    })
}

/// Watches the nodes for `duration`: every move of a node's Ready condition away from True,
/// and the longest gap between two renewals of one node's Lease (every Lease of the cluster is
/// a provider's node's).
/// Also how many renewals it saw.
async fn hold(
    client: &Client,
    selector: &str,
    duration: Duration,
) -> anyhow::Result<(usize, f64, u64)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut ready: HashMap<String, bool> = HashMap::new();
    let mut renewed: HashMap<String, k8s_openapi::jiff::Timestamp> = HashMap::new();
    let mut transitions = 0;
    let mut renewals_seen = 0_u64;
    let mut max_gap = Duration::ZERO;
    let events = watcher(nodes, watcher::Config::default().labels(selector)).applied_objects();
    let renewals = watcher(leases, watcher::Config::default()).applied_objects();
    let deadline = tokio::time::sleep(duration);
    tokio::pin!(deadline);
    let mut events = Box::pin(events);
    let mut renewals = Box::pin(renewals);
    loop {
        tokio::select! {
            () = &mut deadline => {
                return Ok((transitions, max_gap.as_secs_f64(), renewals_seen));
            }
            lease = renewals.try_next() => {
                let Some(lease) = lease? else { bail!("lease watch ended") };
                let Some(at) = lease.spec.and_then(|spec| spec.renew_time) else { continue };
                let name = lease.metadata.name.unwrap_or_default();
                if let Some(before) = renewed.insert(name, at.0)
                    && let Ok(gap) = Duration::try_from(at.0.duration_since(before))
                {
                    if at.0 != before {
                        renewals_seen += 1;
                    }
                    max_gap = max_gap.max(gap);
                }
            }
            node = events.try_next() => {
                let Some(node) = node? else { bail!("node watch ended") };
                let now_ready = is_ready(&node);
                let name = node.metadata.name.unwrap_or_default();
                if ready.insert(name.clone(), now_ready) == Some(true) && !now_ready {
                    transitions += 1;
                    println!("  NotReady: {name}");
                }
            }
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn print_table(args: &Args, results: &[(Tuning, u32, ProviderKind, Figures)]) {
    println!(
        "\n{} nodes, {} pods, hold {} s",
        args.nodes, args.pods, args.hold_seconds
    );
    println!(
        "| plane | lease (s) | provider | nodes Ready (s) | pods bound (s) | pods Running (s) | pods/s | bind->Running p50 (ms) | p99 (ms) | NotReady | longest renewal gap (s) | renewals/s | CPU (s) | peak RSS (MiB) | end RSS (MiB) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (plane, lease, provider, f) in results {
        println!(
            "| {plane} | {lease} | {provider:?} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} |",
            f.nodes_ready_seconds,
            f.pods_bound_seconds,
            f.pods_running_seconds,
            f.pods_per_second,
            f.bind_to_running_p50_ms,
            f.bind_to_running_p99_ms,
            f.not_ready_transitions,
            f.max_renewal_gap_seconds,
            f.renewals_per_second,
            f.cpu_seconds,
            f.peak_rss_mib,
            f.end_rss_mib
        );
    }
    println!("\ncontrol plane, CPU seconds / peak RSS (MiB) per component:");
    println!(
        "| plane | lease (s) | provider | etcd | kube-apiserver | kube-controller-manager | kube-scheduler |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (plane, lease, provider, f) in results {
        let cells: Vec<String> = [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ]
        .iter()
        .map(|name| {
            f.components
                .iter()
                .find(|(component, _, _)| component == name)
                .map_or("-".to_owned(), |(_, cpu, peak)| {
                    format!("{cpu:.1} / {peak:.0}")
                })
        })
        .collect();
        println!(
            "| {plane} | {lease} | {provider:?} | {} |",
            cells.join(" | ")
        );
    }
    // Side by side: ksim against each peer of the same plane and lease.
    for (plane, lease, _, ksim) in results
        .iter()
        .filter(|(_, _, kind, _)| *kind == ProviderKind::Ksim)
    {
        for (_, _, kind, peer) in results
            .iter()
            .filter(|(p, l, kind, _)| p == plane && l == lease && *kind != ProviderKind::Ksim)
        {
            println!(
                "{plane}, {lease} s leases: ksim/{kind:?}: throughput {:.2}x, bind->Running p99 {:.2}x, CPU {:.2}x, peak RSS {:.2}x",
                ksim.pods_per_second / peer.pods_per_second,
                ksim.bind_to_running_p99_ms / peer.bind_to_running_p99_ms,
                ksim.cpu_seconds / peer.cpu_seconds,
                ksim.peak_rss_mib / peer.peak_rss_mib
            );
        }
    }
}
