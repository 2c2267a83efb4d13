//! The VirtualNodePool API over a real socket: happy path and InvalidArgument for bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use ksim_grpc::ServeArgs;
use ksim_localenv::wait;
use ksim_proto::ksim::vnode::v1::{self as pb, virtual_node_pool_client::VirtualNodePoolClient};
use ksim_vnode::{
    config::PoolConfig,
    runtime::{self, Service},
};
use kube::Client;
use tonic::{Code, transport::Channel};

/// The pool served as `main` serves it, on a port of its own; stopped when the service drops.
async fn serve(client: &Client, config: PoolConfig) -> (Service, VirtualNodePoolClient<Channel>) {
    init_logs();
    let service = runtime::start(client.clone(), config, ServeArgs::ephemeral())
        .await
        .unwrap();
    let client = VirtualNodePoolClient::connect(service.url()).await.unwrap();
    (service, client)
}

fn create(name: &str, yaml: &str, count: i32) -> pb::CreateNodeGroupRequest {
    pb::CreateNodeGroupRequest {
        name: name.to_owned(),
        node_skeleton_yaml: yaml.to_owned(),
        count,
        provisioning_json: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn groups_are_created_listed_and_scaled_through_grpc() {
    let env = control_plane().await;
    let (_pool, mut client) = serve(&env.client, pool_config()).await;
    let created = client
        .create_node_group(create("api", SKELETON, 2))
        .await
        .unwrap()
        .into_inner();
    let group = created.node_group.unwrap();
    assert_eq!(group.desired_nodes, 2);
    assert_eq!(group.skeleton.unwrap().instance_type, "m5.xlarge");
    ready_nodes(&env.client, "api", 2).await;

    let nodes = wait::until("2 ready nodes in ListNodes", DEADLINE, || {
        let mut client = client.clone();
        async move {
            let request = pb::ListNodesRequest {
                node_group: "api".to_owned(),
                page_size: 1,
                page_token: String::new(),
            };
            let first = client
                .list_nodes(request)
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let request = pb::ListNodesRequest {
                node_group: "api".to_owned(),
                page_size: 1,
                page_token: first.next_page_token.clone(),
            };
            let second = client
                .list_nodes(request)
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let nodes: Vec<pb::Node> = first.nodes.into_iter().chain(second.nodes).collect();
            if nodes.len() == 2
                && nodes.iter().all(|n| n.ready)
                && second.next_page_token.is_empty()
            {
                Ok(nodes)
            } else {
                Err(format!("{nodes:?}"))
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(nodes[0].name, "api-0");
    assert_eq!(nodes[1].provider_id, "ksim://api/api-1");

    let stats = client
        .get_pool_stats(pb::GetPoolStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((stats.nodes_total, stats.node_groups), (2, 1));
    let scaled = client
        .scale_node_group(pb::ScaleNodeGroupRequest {
            name: "api".to_owned(),
            count: 3,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(scaled.node_group.unwrap().desired_nodes, 3);
    ready_nodes(&env.client, "api", 3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_invalid_argument_and_changes_nothing() {
    let env = control_plane().await;
    let config = PoolConfig {
        // Room for four nodes only.
        pod_cidr_pool: "10.200.0.0/22".parse().unwrap(),
        seat_host: false,
        ..pool_config()
    };
    let (_pool, mut client) = serve(&env.client, config).await;

    let cases = [
        (
            "bad YAML",
            create("a", "kind: Node\nstatus: [unclosed", 1),
            "skeleton",
        ),
        (
            "not a node",
            create(
                "a",
                "kind: Pod\nstatus: {capacity: {cpu: '1', memory: 1Gi}}",
                1,
            ),
            "Node",
        ),
        (
            "bad quantity",
            create(
                "a",
                "kind: Node\nstatus: {capacity: {cpu: lots, memory: 1Gi}}",
                1,
            ),
            "cpu",
        ),
        ("negative count", create("a", SKELETON, -1), "-1"),
        (
            "bad name",
            create("Not_A_Label", SKELETON, 1),
            "Not_A_Label",
        ),
        ("CIDR exhausted", create("a", SKELETON, 5), "exhausted"),
        (
            "negative cpu",
            create(
                "a",
                "kind: Node\nstatus: {capacity: {cpu: '-4', memory: 1Gi}}",
                1,
            ),
            "negative",
        ),
        (
            "memory beyond counting",
            create(
                "a",
                "kind: Node\nstatus: {capacity: {cpu: '4', memory: 1e30}}",
                1,
            ),
            "more than",
        ),
        (
            "oversized skeleton",
            create("a", &format!("{SKELETON}\n# {}\n", "x".repeat(300_000)), 1),
            "bytes",
        ),
    ];
    for (case, request, mentions) in cases {
        let status = client.create_node_group(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        assert!(
            status.message().contains(mentions),
            "{case}: {}",
            status.message()
        );
    }
    let unknown = client
        .scale_node_group(pb::ScaleNodeGroupRequest {
            name: "nope".to_owned(),
            count: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    assert!(unknown.message().contains("nope"));
    let garbage_token = client
        .list_nodes(pb::ListNodesRequest {
            node_group: String::new(),
            page_size: 10,
            page_token: "%%garbage%%".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(garbage_token.code(), Code::InvalidArgument);
    assert!(garbage_token.message().contains("page_token"));
    let negative_page = client
        .list_nodes(pb::ListNodesRequest {
            node_group: String::new(),
            page_size: -5,
            page_token: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(negative_page.code(), Code::InvalidArgument);

    // Nothing was half-applied: no group, no stored definition.
    let groups = client
        .list_node_groups(pb::ListNodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(groups.node_groups.is_empty());
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), "default");
    let stored = config_maps
        .list(&kube::api::ListParams::default().labels("ksim.io/pool=test"))
        .await
        .unwrap();
    assert!(stored.items.is_empty());

    // A valid group still fits afterwards; scaling past the pool is refused.
    client
        .create_node_group(create("a", SKELETON, 4))
        .await
        .unwrap();
    let too_many = client
        .scale_node_group(pb::ScaleNodeGroupRequest {
            name: "a".to_owned(),
            count: 5,
        })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
}

fn usage(namespace: &str, name: &str, millicores: u64, mebibytes: u64) -> pb::PodUsage {
    pb::PodUsage {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        containers: vec![pb::ContainerUsage {
            name: "app".to_owned(),
            cpu_nanocores: millicores * 1_000_000,
            memory_bytes: mebibytes << 20,
        }],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_is_set_for_running_pods_only_and_a_bad_request_sets_nothing() {
    let env = control_plane().await;
    let (service, mut client) = serve(&env.client, pool_config()).await;
    client
        .create_node_group(create("workers", SKELETON, 1))
        .await
        .unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), "default");
    let pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web", "labels": { "app": "web" } },
        "spec": {
            "tolerations": [virtual_toleration()],
            "nodeSelector": { "ksim.io/node-group": "workers" },
            "containers": [{ "name": "app", "image": "registry.example/app:1" }],
        },
    }))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    pods_in_phase(&env.client, "default", "app=web", "Running", 1).await;

    let applied = client
        .set_pod_usage(pb::SetPodUsageRequest {
            pods: vec![
                usage("default", "web", 250, 64),
                usage("default", "not-here", 100, 8),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((applied.applied, applied.not_running), (1, 1));
    let readings = service
        .pool
        .pod_readings(k8s_openapi::jiff::Timestamp::now());
    assert_eq!(readings.len(), 1);
    assert_eq!(
        (readings[0].name.as_str(), readings[0].node.as_str()),
        ("web", "workers-0")
    );
    assert_eq!(readings[0].containers[0].cpu_nanocores, 250_000_000);

    // One bad pod refuses the whole request, naming it; the good one in it is not applied.
    let bad = usage("default", "web", 5_000_000, 64);
    let status = client
        .set_pod_usage(pb::SetPodUsageRequest {
            pods: vec![usage("default", "web", 999, 64), bad],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("default/web") && status.message().contains("4,096 cores"),
        "{}",
        status.message()
    );
    let readings = service
        .pool
        .pod_readings(k8s_openapi::jiff::Timestamp::now());
    assert_eq!(readings[0].containers[0].cpu_nanocores, 250_000_000);

    // No containers clears the pod's usage: it is served as not measured yet.
    let cleared = client
        .set_pod_usage(pb::SetPodUsageRequest {
            pods: vec![pb::PodUsage {
                namespace: "default".to_owned(),
                name: "web".to_owned(),
                containers: vec![],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cleared.applied, 1);
    assert!(
        service
            .pool
            .pod_readings(k8s_openapi::jiff::Timestamp::now())
            .is_empty()
    );

    // All of the node's 16 GiB: the node evicts the pod and the response names it.
    let pressed = client
        .set_pod_usage(pb::SetPodUsageRequest {
            pods: vec![usage("default", "web", 100, 16 << 10)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pressed.applied, 1);
    assert_eq!(
        pressed.evicted,
        [pb::PodEviction {
            namespace: "default".to_owned(),
            name: "web".to_owned(),
            node: "workers-0".to_owned(),
            message: "The node was low on resource: memory. Threshold quantity: 100Mi, \
                      available: 0Ki."
                .to_owned(),
        }]
    );
}
