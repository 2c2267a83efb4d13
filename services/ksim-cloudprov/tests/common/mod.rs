//! A real control plane, a real virtual node pool and the cloud provider over a real socket,
//! for the provider's end-to-end tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_cloudprov::{
    apiserver::ApiCluster,
    grpc::CloudProviderService,
    index::Index,
    provider::{Provider, Settings},
    watches,
};
use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_nodes::{
    labels::GROUP_LABEL,
    seats::{SeatDeployment, SkeletonSource},
};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb, cloud_provider_client::CloudProviderClient,
};
use ksim_testenv::{ControlPlane, wait};
use ksim_vnode::{config::PoolConfig, pool::Pool};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use tokio::task::JoinSet;
use tonic::transport::Channel;

pub const DEADLINE: Duration = Duration::from_secs(120);
pub const NAMESPACE: &str = "default";

pub const SKELETON: &str = r#"
apiVersion: v1
kind: Node
metadata:
  labels:
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
spec:
  taints:
  - { key: dedicated, value: sim, effect: NoSchedule }
status:
  capacity: { cpu: "2", memory: 8Gi, pods: "29" }
  allocatable: { cpu: 1930m, memory: 7Gi, pods: "29" }
"#;

pub struct Env {
    pub control_plane: ControlPlane,
    pub client: Client,
    pub pool: Arc<Pool>,
    pub watches: JoinSet<()>,
    pub provider: Arc<Provider<ApiCluster>>,
}

pub async fn start() -> Env {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let control_plane = ControlPlane::builder()
        .controller_manager_arg("--node-monitor-period=1s")
        .controller_manager_arg("--node-monitor-grace-period=6s")
        .start()
        .await
        .unwrap();
    let client = control_plane.client();
    let pool = Arc::new(
        Pool::start(
            client.clone(),
            PoolConfig {
                pool_name: "test".to_owned(),
                namespace: NAMESPACE.to_owned(),
                lease_duration_seconds: 4,
                ..PoolConfig::default()
            },
        )
        .await
        .unwrap(),
    );
    let index = Index::new(100);
    let watches = watches::spawn(client.clone(), index.clone());
    let provider = Arc::new(Provider::new(
        index,
        ApiCluster::new(client.clone()),
        settings(),
    ));
    Env {
        control_plane,
        client,
        pool,
        watches,
        provider,
    }
}

pub fn settings() -> Settings {
    Settings {
        pool_name: "test".to_owned(),
        gpu_label: "ksim.io/gpu-type".to_owned(),
        pricing: None,
        group_options: Default::default(),
        settle_timeout: Duration::from_secs(60),
    }
}

/// Serves the provider on an ephemeral port with `args`; returns its address.
pub async fn serve(provider: Arc<Provider<ApiCluster>>, args: ServeArgs) -> std::net::SocketAddr {
    let bound = GrpcServer::new(args)
        .add_service(CloudProviderService::new(provider).into_server())
        .bind()
        .await
        .unwrap();
    let addr = bound.grpc_addr().unwrap();
    tokio::spawn(bound.serve_until(std::future::pending()));
    addr
}

pub async fn plaintext_client(env: &Env) -> CloudProviderClient<Channel> {
    let addr = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// Refresh succeeds once the provider has listed everything; CA calls it first each loop.
pub async fn refreshed(client: &CloudProviderClient<Channel>) {
    wait::until("Refresh to succeed", DEADLINE, || {
        let mut client = client.clone();
        async move {
            client
                .refresh(pb::RefreshRequest {})
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await
    .unwrap();
}

/// Waits until the provider serves `group` (its watch has seen the Deployment).
pub async fn served(client: &CloudProviderClient<Channel>, group: &str) {
    wait::until(&format!("{group} to be served"), DEADLINE, || {
        let mut client = client.clone();
        let id = group.to_owned();
        async move {
            client
                .node_group_target_size(pb::NodeGroupTargetSizeRequest { id })
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await
    .unwrap();
}

pub fn seat_deployment(group: &str, replicas: i32, min: i32, max: i32) -> Deployment {
    seat_deployment_with(
        group,
        replicas,
        min,
        max,
        SkeletonSource::Inline(SKELETON.to_owned()),
    )
}

pub fn seat_deployment_with(
    group: &str,
    replicas: i32,
    min: i32,
    max: i32,
    skeleton: SkeletonSource,
) -> Deployment {
    SeatDeployment {
        group: group.to_owned(),
        namespace: NAMESPACE.to_owned(),
        replicas,
        skeleton,
        min_size: Some(min),
        max_size: Some(max),
    }
    .to_deployment()
}

pub async fn create_deployment(client: &Client, deployment: &Deployment) {
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), deployment)
        .await
        .unwrap();
}

/// The group's nodes, once exactly `count` exist and all are Ready.
pub async fn ready_nodes(client: &Client, group: &str, count: usize) -> Vec<Node> {
    ksim_testenv::nodes::ready_nodes(client, &format!("{GROUP_LABEL}={group}"), count, DEADLINE)
        .await
        .unwrap()
}

pub async fn node_names(client: &Client, group: &str) -> BTreeSet<String> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect()
}

/// Seat pods not being deleted.
pub async fn live_seats(client: &Client, group: &str) -> BTreeSet<String> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

pub fn grpc_node(node: &Node) -> pb::ExternalGrpcNode {
    pb::ExternalGrpcNode {
        provider_id: node.spec.as_ref().unwrap().provider_id.clone().unwrap(),
        name: node.metadata.name.clone().unwrap(),
        labels: node
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        annotations: Default::default(),
    }
}

/// What CA builds for an instance without a Kubernetes node: name and providerID are the id.
pub fn placeholder_node(instance_id: &str) -> pb::ExternalGrpcNode {
    pb::ExternalGrpcNode {
        provider_id: instance_id.to_owned(),
        name: instance_id.to_owned(),
        labels: Default::default(),
        annotations: [(
            "k8s.io/cluster-autoscaler/fake-node-reason".to_owned(),
            "upcoming".to_owned(),
        )]
        .into_iter()
        .collect(),
    }
}
