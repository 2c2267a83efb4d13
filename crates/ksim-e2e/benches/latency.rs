//! Latency benchmark of the calls cluster-autoscaler makes most, and of scale-up end to end.
//! Prints figures; asserts nothing.
//!
//!   cargo bench -p ksim-e2e --bench latency -- --groups 100 --nodes 5000 --calls 20000
//!
//! Part 1: TargetSize, NodeGroupForNode and NodeGroupNodes over a real (loopback) socket,
//! against an index holding `groups` seat Deployments with `nodes` seats and registered nodes
//! in all, applied directly as the watches would. Calls are sequential, one at a time.
//! Part 2: on the real control plane with the real pool, seconds from IncreaseSize returning
//! to all new nodes Ready (polled every 50 ms), for growing deltas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_cloudprov::{
    apiserver::ApiCluster,
    index::{Index, Skeleton, Source},
    provider::{Provider, Settings},
    runtime, watches,
};
use ksim_grpc::{Running, ServeArgs};
use ksim_localenv::ControlPlane;
use ksim_localenv::fixtures::{M5_LARGE_SKELETON, seat_deployment};
use ksim_nodes::node::is_ready;
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb, cloud_provider_client::CloudProviderClient,
};
use ksim_vnode::{config::PoolConfig, pool::Pool};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use serde_json::json;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 100)]
    groups: usize,
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// IncreaseSize deltas for part 2, applied one after another.
    #[arg(long, value_delimiter = ',', default_value = "1,10,50")]
    deltas: Vec<i32>,
    #[arg(long, hide = true)]
    bench: bool,
}

fn settings() -> Settings {
    Settings {
        pool_name: "bench".to_owned(),
        gpu_label: "ksim.io/gpu-type".to_owned(),
        pricing: None,
        group_options: Default::default(),
        settle_timeout: Duration::from_secs(60),
    }
}

/// The provider served as `ksim-cloudprov` serves it; the server stops when the handle drops.
async fn serve(provider: Arc<Provider<ApiCluster>>) -> (Running, CloudProviderClient<Channel>) {
    let server = runtime::spawn(provider, ServeArgs::ephemeral())
        .await
        .unwrap();
    let client = CloudProviderClient::connect(server.grpc_url())
        .await
        .unwrap();
    (server, client)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

async fn measure<F, Fut>(name: &str, calls: usize, mut call: F)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut latencies = Vec::with_capacity(calls);
    for n in 0..calls {
        let started = Instant::now();
        call(n).await;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "{name:<18} calls {calls:>6}  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3,
    );
}

async fn rpc_latency(client: Client, args: &Args) {
    let index = Index::new(1000);
    let skeleton = Skeleton::Parsed(Arc::new(
        ksim_nodes::skeleton::NodeSkeleton::from_yaml(M5_LARGE_SKELETON).unwrap(),
    ));
    let per_group = args.nodes / args.groups;
    let mut provider_ids = Vec::with_capacity(args.nodes);
    for g in 0..args.groups {
        let group = format!("g{g:03}");
        let replicas = i32::try_from(per_group).unwrap();
        index
            .apply_deployment(
                &seat_deployment(&group, replicas, 0, 1000, M5_LARGE_SKELETON).to_deployment(),
                skeleton.clone(),
            )
            .unwrap();
        for s in 0..per_group {
            let name = format!("seats-{group}-{s:05}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": { "name": name, "namespace": "default",
                              "labels": { "ksim.io/node-group": group } },
                "spec": { "nodeName": "bench-seat-host-0", "containers": [] },
                "status": { "phase": "Running",
                            "conditions": [{ "type": "Ready", "status": "True" }] }
            }))
            .unwrap();
            index.apply_pod(&pod);
            let provider_id = format!("ksim://{group}/{name}");
            let node: Node = serde_json::from_value(json!({
                "metadata": { "name": name },
                "spec": { "providerID": provider_id }
            }))
            .unwrap();
            index.apply_node(&node);
            provider_ids.push((name, provider_id));
        }
    }
    for source in [Source::Deployments, Source::Seats, Source::Nodes] {
        index.mark_synced(source);
    }
    let provider = Arc::new(Provider::new(index, ApiCluster::new(client), settings()));
    let (_server, ca) = serve(provider).await;
    println!(
        "part 1: {} groups, {} nodes, sequential calls over loopback",
        args.groups,
        per_group * args.groups
    );
    let group = |n: usize| format!("g{:03}", n % args.groups);
    measure("TargetSize", args.calls, |n| {
        let mut ca = ca.clone();
        let id = group(n);
        async move {
            ca.node_group_target_size(pb::NodeGroupTargetSizeRequest { id })
                .await
                .unwrap();
        }
    })
    .await;
    measure("NodeGroupForNode", args.calls, |n| {
        let mut ca = ca.clone();
        let (name, provider_id) = provider_ids[n % provider_ids.len()].clone();
        async move {
            let node = pb::ExternalGrpcNode {
                provider_id,
                name,
                ..Default::default()
            };
            ca.node_group_for_node(pb::NodeGroupForNodeRequest { node: Some(node) })
                .await
                .unwrap();
        }
    })
    .await;
    measure("NodeGroupNodes", args.calls, |n| {
        let mut ca = ca.clone();
        let id = group(n);
        async move {
            let instances = ca
                .node_group_nodes(pb::NodeGroupNodesRequest { id })
                .await
                .unwrap()
                .into_inner()
                .instances;
            assert_eq!(instances.len(), per_group);
        }
    })
    .await;
}

async fn ready_count(client: &Client) -> usize {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("ksim.io/node-group=m5"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|n| is_ready(n))
        .count()
}

async fn scale_up(control_plane: &ControlPlane, args: &Args) {
    let client = control_plane.client();
    let _pool = Pool::start(
        client.clone(),
        PoolConfig {
            pool_name: "bench".to_owned(),
            namespace: "default".to_owned(),
            ..PoolConfig::default()
        },
    )
    .await
    .unwrap();
    let index = Index::new(1000);
    let _watches = watches::spawn(client.clone(), index.clone());
    let provider = Arc::new(Provider::new(
        index.clone(),
        ApiCluster::new(client.clone()),
        settings(),
    ));
    let deployment = seat_deployment("m5", 0, 0, 1000, M5_LARGE_SKELETON).to_deployment();
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    index
        .wait_until(Duration::from_secs(60), |i| i.target_size("m5").is_some())
        .await;
    let (_server, mut ca) = serve(provider).await;
    println!("part 2: IncreaseSize -> new nodes Ready (real control plane and pool)");
    let mut figures = BTreeMap::new();
    let mut expected = 0;
    for &delta in &args.deltas {
        expected += usize::try_from(delta).unwrap();
        let started = Instant::now();
        ca.node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
            id: "m5".to_owned(),
            delta,
        })
        .await
        .unwrap();
        let returned = started.elapsed();
        while ready_count(&client).await < expected {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ready = started.elapsed();
        println!(
            "delta {delta:>4}: IncreaseSize returned in {:>7.3} s, all Ready after {:>7.3} s",
            returned.as_secs_f64(),
            ready.as_secs_f64()
        );
        figures.insert(delta, ready);
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let control_plane = ControlPlane::start().await.unwrap();
    rpc_latency(control_plane.client(), &args).await;
    scale_up(&control_plane, &args).await;
}
