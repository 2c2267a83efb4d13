//! Metrics API benchmark: N virtual nodes with metered running pods, the metrics API served on
//! the real control plane, and what that costs. Prints figures; asserts nothing.
//!
//!   cargo bench -p ksim-vnode --bench metrics_api -- --nodes 1000 --hold-seconds 120
//!
//! Two designs, run one at a time with the same nodes, pods and readers:
//! - `--design a`: the pool serves every node's kubelet resource endpoint and the real
//!   metrics-server scrapes them every `--resolution-seconds` and serves metrics.k8s.io;
//! - `--design b`: the pool serves metrics.k8s.io itself (`--metrics-api-addr`).
//!
//! Phase 1 runs the pool without the metrics API's work (design a: no scrapes; design b: no
//! reads); phase 2 turns it on, with readers as a cluster has them: every resolution interval
//! one list of all pods' and all nodes' metrics (an HPA reads one namespace, `kubectl top` all)
//! through the apiserver. Figures: the pool's CPU and RSS in each phase, its open file
//! descriptors, metrics-server's CPU-seconds per minute and RSS (design a), and freshness: from
//! `SetPodUsage` changing a pod's memory until the metrics API shows it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use common::{ProcessGroup, SKELETON, connect, process_usage, spawn, wait_nodes_ready};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_localenv::{ControlPlane, MetricsServer, free_port, pki::CertificateAuthority};
use ksim_proto::ksim::vnode::v1::{
    ContainerUsage, CreateNodeGroupRequest, PodUsage, SetPodUsageRequest,
    virtual_node_pool_client::VirtualNodePoolClient,
};
use kube::{Api, Client, api::PostParams};
use serde_json::json;

const NAMESPACE: &str = "bench";
const GROUP: &str = "bench";
const BASE_CPU_NANOCORES: u64 = 100_000_000;
const BASE_MEMORY_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Design {
    /// The pool serves each node's kubelet `/metrics/resource`; the real metrics-server
    /// scrapes them and serves metrics.k8s.io.
    A,
    /// The pool serves metrics.k8s.io itself, behind the aggregation layer.
    B,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Running metered pods; one per node by default.
    #[arg(long)]
    pods: Option<usize>,
    #[arg(long, value_enum, default_value = "a")]
    design: Design,
    /// metrics-server's `--metric-resolution` (the release manifest's 15 s).
    #[arg(long, default_value_t = 15)]
    resolution_seconds: u64,
    /// How long each phase is measured: without the metrics API, then with it.
    #[arg(long, default_value_t = 120)]
    hold_seconds: u64,
    /// Freshness samples, taken one after another during the second phase.
    #[arg(long, default_value_t = 5)]
    freshness_samples: usize,
    /// `cargo bench` passes this to every benchmark binary.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pods = args.pods.unwrap_or(args.nodes);
    println!(
        "== design {:?}: {} nodes, {pods} metered pods, resolution {} s, hold {} s",
        args.design, args.nodes, args.resolution_seconds, args.hold_seconds
    );
    let control_plane = ControlPlane::builder().start().await?;
    let client = control_plane.client();
    let dir = control_plane.dir().context("control plane directory")?;
    let pki = dir.join("kubelet-client-pki");
    std::fs::create_dir_all(&pki)?;
    let ca = CertificateAuthority::create(&pki, "kubelet-client-ca")?;
    let client_cert = ca.client_cert("metrics-server", "system:metrics-server", None)?;

    let grpc_addr = format!("127.0.0.1:{}", free_port()?);
    let pool_process = start_pool(&args, &control_plane, &grpc_addr, ca.cert_file())?;
    let pool_pid = pool_process.id();
    let mut pool = connect(&grpc_addr).await?;
    let started = Instant::now();
    pool.create_node_group(CreateNodeGroupRequest {
        name: GROUP.to_owned(),
        node_skeleton_yaml: SKELETON.to_owned(),
        count: i32::try_from(args.nodes)?,
        provisioning_json: String::new(),
    })
    .await?;
    wait_nodes_ready(&client, &format!("ksim.io/node-group={GROUP}"), args.nodes).await?;
    println!(
        "  {} nodes Ready after {:.1} s",
        args.nodes,
        started.elapsed().as_secs_f64()
    );
    let names = run_pods(&client, pods).await?;
    set_usage(&mut pool, &names, |_| BASE_MEMORY_BYTES).await?;
    println!(
        "  {pods} pods Running and metered after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Phase 1: the pool alone, serving nothing but its endpoints' listeners.
    let hold = Duration::from_secs(args.hold_seconds);
    let (cpu_before, _, _) = process_usage(pool_pid)?;
    tokio::time::sleep(hold).await;
    let (cpu_idle, _, rss_idle) = process_usage(pool_pid)?;
    let fds_idle = open_files(pool_pid)?;
    let pool_idle_cpu_per_minute = (cpu_idle - cpu_before) * 60.0 / hold.as_secs_f64();

    // Phase 2: the metrics API on, and read.
    let metrics = start_metrics(&args, &control_plane, &client_cert).await?;
    let ms_pid = metrics.as_ref().map(MetricsServer::pid);
    let ms_cpu_start = ms_pid
        .map(process_usage)
        .transpose()?
        .map(|(cpu, _, _)| cpu);
    let readers = tokio::spawn(read_all_every(
        client.clone(),
        Duration::from_secs(args.resolution_seconds),
    ));
    let (pool_cpu_start, _, _) = process_usage(pool_pid)?;
    let phase = Instant::now();
    let mut freshness = Vec::new();
    for sample in 0..args.freshness_samples {
        let pod = &names[sample % names.len()];
        // A memory figure no pod had: the API shows it only once it was scraped.
        let memory = BASE_MEMORY_BYTES + ((sample as u64 + 1) << 20);
        freshness.push(measure_freshness(&client, &mut pool, pod, memory).await?);
        println!(
            "  freshness sample {}: {:.1} s",
            sample + 1,
            freshness[sample]
        );
    }
    if let Some(rest) = hold.checked_sub(phase.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let elapsed = phase.elapsed().as_secs_f64();
    readers.abort();
    let ms_end = ms_pid.map(process_usage).transpose()?;
    let (pool_cpu_end, pool_peak, pool_rss) = process_usage(pool_pid)?;
    let fds_scraped = open_files(pool_pid)?;
    let pool_scraped_cpu_per_minute = (pool_cpu_end - pool_cpu_start) * 60.0 / elapsed;

    println!("\nmetrics API, design {:?}", args.design);
    println!("  nodes {} pods {pods}", args.nodes);
    if let (Some(start), Some((end, peak, rss))) = (ms_cpu_start, ms_end) {
        println!(
            "  metrics-server: {:.2} CPU-s/min, RSS {rss:.0} MiB (peak {peak:.0} MiB)",
            (end - start) * 60.0 / elapsed
        );
    }
    println!(
        "  pool: {pool_idle_cpu_per_minute:.2} CPU-s/min without the metrics API's work, \
         {pool_scraped_cpu_per_minute:.2} with (extra {:.2}); RSS {rss_idle:.0} -> {pool_rss:.0} MiB \
         (peak {pool_peak:.0} MiB)",
        pool_scraped_cpu_per_minute - pool_idle_cpu_per_minute
    );
    println!("  pool open files: {fds_idle} without the metrics API's work, {fds_scraped} with");
    freshness.sort_unstable_by(f64::total_cmp);
    if let (Some(first), Some(last)) = (freshness.first(), freshness.last()) {
        println!(
            "  freshness: min {first:.1} s, median {:.1} s, max {last:.1} s ({} samples)",
            freshness[freshness.len() / 2],
            freshness.len()
        );
    }
    drop(metrics);
    drop(pool_process);
    Ok(())
}

fn start_pool(
    args: &Args,
    control_plane: &ControlPlane,
    grpc_addr: &str,
    client_ca: &Path,
) -> anyhow::Result<ProcessGroup> {
    let mut pool_args = vec![
        format!("--grpc-addr={grpc_addr}"),
        format!("--admin-addr=127.0.0.1:{}", free_port()?),
        "--namespace=default".to_owned(),
        format!("--pool-name={GROUP}"),
        "--log-filter=warn".to_owned(),
    ];
    match args.design {
        Design::A => pool_args.extend([
            "--kubelet-endpoint=127.0.0.1".to_owned(),
            format!("--kubelet-client-ca-file={}", client_ca.display()),
        ]),
        // Registered at start; nothing reads it before phase 2.
        Design::B => pool_args.push("--metrics-api-addr=0.0.0.0:0".to_owned()),
    }
    let dir = control_plane.dir().context("control plane directory")?;
    spawn(
        Path::new(env!("CARGO_BIN_EXE_ksim-vnode")),
        &pool_args,
        control_plane.kubeconfig_path(),
        &dir.join("ksim-vnode.log"),
    )
}

/// What serves the metrics API in this design besides the pool (metrics-server in design a),
/// running until dropped.
async fn start_metrics(
    args: &Args,
    control_plane: &ControlPlane,
    client_cert: &ksim_localenv::pki::CertFiles,
) -> anyhow::Result<Option<MetricsServer>> {
    match args.design {
        Design::A => Ok(Some(
            MetricsServer::builder(control_plane)
                .metric_resolution(Duration::from_secs(args.resolution_seconds))
                .kubelet_preferred_address_types(&["ExternalIP", "InternalIP", "Hostname"])
                .kubelet_client_certificate(&client_cert.cert, &client_cert.key)
                .start()
                .await?,
        )),
        Design::B => Ok(None),
    }
}

/// Every `period`, one list of all pods' and all nodes' metrics through the apiserver, as the
/// cluster's readers (HPAs, `kubectl top`) would; until aborted.
async fn read_all_every(client: Client, period: Duration) {
    let mut ticks = tokio::time::interval(period);
    loop {
        ticks.tick().await;
        for path in [
            "/apis/metrics.k8s.io/v1beta1/pods",
            "/apis/metrics.k8s.io/v1beta1/nodes",
        ] {
            let Ok(request) = http::Request::get(path).body(Vec::new()) else {
                continue;
            };
            if let Err(error) = client.request_text(request).await {
                println!("  reader: {path}: {error}");
            }
        }
    }
}

/// A Deployment of `count` pods on the pool's nodes, once all run; their names.
async fn run_pods(client: &Client, count: usize) -> anyhow::Result<Vec<String>> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?,
        )
        .await?;
    ksim_localenv::wait::default_service_account(client, NAMESPACE, Duration::from_secs(60))
        .await?;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "metered" },
        "spec": {
            "replicas": count,
            "selector": { "matchLabels": { "app": "metered" } },
            "template": {
                "metadata": { "labels": { "app": "metered" } },
                "spec": {
                    "tolerations": [{ "key": "ksim.io/virtual-node", "operator": "Exists",
                                      "effect": "NoSchedule" }],
                    "nodeSelector": { "ksim.io/node-group": GROUP },
                    // One per node while there are nodes for them.
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": { "matchLabels": { "app": "metered" } },
                    }],
                    "containers": [{ "name": "app", "image": "registry.example/app:1",
                                     "resources": { "requests": { "cpu": "10m" } } }],
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &deployment)
        .await?;
    let pods = ksim_localenv::pods::in_phase(
        client,
        NAMESPACE,
        "app=metered",
        "Running",
        count,
        Duration::from_secs(1800),
    )
    .await?;
    Ok(pods
        .into_iter()
        .filter_map(|pod: Pod| pod.metadata.name)
        .collect())
}

/// Sets every named pod's usage, `memory(name)` bytes and the base CPU, in requests of at
/// most 10,000 pods.
async fn set_usage(
    pool: &mut VirtualNodePoolClient<tonic::transport::Channel>,
    names: &[String],
    memory: impl Fn(&str) -> u64,
) -> anyhow::Result<()> {
    for chunk in names.chunks(10_000) {
        let pods = chunk
            .iter()
            .map(|name| PodUsage {
                namespace: NAMESPACE.to_owned(),
                name: name.clone(),
                containers: vec![ContainerUsage {
                    name: "app".to_owned(),
                    cpu_nanocores: BASE_CPU_NANOCORES,
                    memory_bytes: memory(name),
                }],
            })
            .collect();
        let applied = pool
            .set_pod_usage(SetPodUsageRequest { pods })
            .await?
            .into_inner();
        if applied.not_running > 0 {
            bail!("{} pods not running", applied.not_running);
        }
    }
    Ok(())
}

/// Seconds from setting `pod`'s memory to `memory` until the metrics API shows it.
async fn measure_freshness(
    client: &Client,
    pool: &mut VirtualNodePoolClient<tonic::transport::Channel>,
    pod: &str,
    memory: u64,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    set_usage(pool, &[pod.to_owned()], |_| memory).await?;
    let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods/{pod}");
    let deadline = Duration::from_secs(300);
    while started.elapsed() < deadline {
        let request = http::Request::get(&path).body(Vec::new())?;
        if let Ok(metrics) = client.request::<serde_json::Value>(request).await
            && metrics["containers"][0]["usage"]["memory"]
                .as_str()
                .and_then(memory_bytes)
                == Some(memory)
        {
            return Ok(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{pod}'s new usage did not show in {} s", deadline.as_secs())
}

/// Bytes of a memory quantity as metrics-server writes it (binary suffixes or none).
fn memory_bytes(quantity: &str) -> Option<u64> {
    let split = quantity
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let shift = match suffix {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return None,
    };
    number.parse::<u64>().ok().map(|n| n << shift)
}

/// Open file descriptors of a process: its listeners and connections among them.
fn open_files(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}
