//! The real Karpenter with its KWOK cloud provider (built by deploy/karpenter/build.sh, which
//! deploy/test.sh runs first) against the real control plane: it takes its CRDs, reads pending
//! pods the real scheduler could not place, and launches for each a NodeClaim of the cheapest
//! instance type that fits it, whose Node it creates, from its built-in list or from ksim's
//! node skeletons and prices. Without the binary these tests fail, naming the build script;
//! they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::api::core::v1::{Node, Pod};
use ksim_localenv::{ControlPlane, Karpenter, KarpenterBinary, manifests, wait};
use ksim_nodes::{karpenter::PRICE_LABEL, pricing::Pricing, skeleton::NodeSkeleton};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, ListParams, PostParams},
};
use serde_json::json;

/// Karpenter batches pending pods (1 s idle, 10 s at most) before it launches.
const DEADLINE: Duration = Duration::from_secs(120);

fn nodeclaims() -> ApiResource {
    ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: "NodeClaim".into(),
        plural: "nodeclaims".into(),
    }
}

fn pod(name: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    }))
    .unwrap()
}

/// The NodeClaims, once there are `count` and Karpenter has launched each.
async fn launched(client: &kube::Client, count: usize) -> Vec<DynamicObject> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &nodeclaims());
    wait::until(
        &format!("{count} NodeClaims launched"),
        DEADLINE,
        || async {
            let claims = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let launched = claims
                .iter()
                .filter(|claim| {
                    claim.data["status"]["conditions"]
                        .as_array()
                        .is_some_and(|conditions| {
                            conditions
                                .iter()
                                .any(|c| c["type"] == "Launched" && c["status"] == "True")
                        })
                })
                .count();
            let total = claims.len();
            (launched == count && total == count)
                .then_some(claims)
                .ok_or(format!("{launched} of {total} launched"))
        },
    )
    .await
    .unwrap()
}

fn label(labels: Option<&BTreeMap<String, String>>, key: &str) -> String {
    labels
        .and_then(|labels| labels.get(key))
        .cloned()
        .unwrap_or_default()
}

fn instance_type(object: &DynamicObject) -> String {
    label(
        object.metadata.labels.as_ref(),
        "node.kubernetes.io/instance-type",
    )
}

/// The NodePool `ksim run --karpenter` creates when given none.
const DEFAULT_NODEPOOL: &str = include_str!("../../../../deploy/karpenter/nodepool-default.yaml");

/// The KWOKNodeClass every NodePool names.
async fn create_node_class(client: &kube::Client) {
    manifests::apply(
        client,
        &json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"}, "spec": {}})
        .to_string(),
    )
    .await
    .unwrap();
}

/// The node class and one NodePool of on-demand linux/amd64 types: the provider's built-in
/// list also has windows and arm64 ones.
async fn create_node_pool(client: &kube::Client) {
    create_node_class(client).await;
    manifests::apply(client, &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]}}}}).to_string())
    .await
    .unwrap();
}

/// Creates each pod (name, cpu, memory) in turn and returns the NodeClaim it brought, the one
/// not there before it. One after the other, so each has a batch of its own (together they
/// would share one node).
async fn claim_per_pod(client: &kube::Client, specs: &[(&str, &str, &str)]) -> Vec<DynamicObject> {
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let mut seen = BTreeSet::new();
    let mut brought = Vec::new();
    for (count, (name, cpu, memory)) in specs.iter().enumerate() {
        pods.create(&PostParams::default(), &pod(name, cpu, memory))
            .await
            .unwrap();
        let claims = launched(client, count + 1).await;
        let new: Vec<&DynamicObject> = claims
            .iter()
            .filter(|claim| !seen.contains(&claim.metadata.name))
            .collect();
        let [claim] = new.as_slice() else {
            panic!("one new NodeClaim for {name}: {new:?}")
        };
        seen.insert(claim.metadata.name.clone());
        brought.push((*claim).clone());
    }
    brought
}

/// The NodePool's Nodes, once there are `count`: the KWOK provider creates each NodeClaim's
/// Node itself.
async fn nodes_of_pool(client: &kube::Client, count: usize) -> Vec<Node> {
    let nodes = Api::<Node>::all(client.clone());
    wait::until(&format!("{count} Nodes"), DEADLINE, || async {
        let listed = nodes
            .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
            .await
            .map_err(|e| e.to_string())?
            .items;
        let total = listed.len();
        (total == count)
            .then_some(listed)
            .ok_or(format!("{total} nodes"))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_pods_get_nodeclaims_of_the_cheapest_instance_type_that_fits_each() {
    // On every tested release (docs/compatibility.md), pinned first.
    let versions = ksim_localenv::karpenter::tested_karpenter_versions();
    assert!(versions.len() >= 2, "{versions:?}");
    for version in versions {
        cheapest_types_on(version).await;
    }
}

async fn cheapest_types_on(version: &str) {
    let control_plane = ControlPlane::builder().start().await.unwrap();
    let binary = KarpenterBinary::locate_release(version).unwrap_or_else(|error| panic!("{error}"));
    let karpenter = Karpenter::builder(&control_plane)
        .binary(binary)
        .start()
        .await
        .unwrap_or_else(|error| panic!("Karpenter {version}: {error}"));
    let client = control_plane.client();
    create_node_pool(&client).await;

    // From the provider's built-in list: 1500m fits the 2-CPU types, the cheapest is c-2x (2 GiB
    // a CPU). 12Gi fits 16 GiB types only: the cheapest is m-2x (8 GiB a CPU).
    let claims = claim_per_pod(
        &client,
        &[("small", "1500m", "1Gi"), ("large", "500m", "12Gi")],
    )
    .await;
    let types: Vec<String> = claims.iter().map(instance_type).collect();
    assert_eq!(
        types,
        ["c-2x-amd64-linux", "m-2x-amd64-linux"],
        "Karpenter {version}: {}",
        karpenter.log_tail()
    );

    // The KWOK provider creates each NodeClaim's Node itself, in the NodePool, with its type.
    let created = nodes_of_pool(&client, 2).await;
    let mut node_types: Vec<String> = created
        .iter()
        .map(|node| {
            let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
            assert!(
                provider_id
                    .as_deref()
                    .is_some_and(|id| id.starts_with("kwok://")),
                "{provider_id:?}"
            );
            label(
                node.metadata.labels.as_ref(),
                "node.kubernetes.io/instance-type",
            )
        })
        .collect();
    node_types.sort();
    assert_eq!(
        node_types,
        ["c-2x-amd64-linux", "m-2x-amd64-linux"],
        "Karpenter {version}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn instance_types_and_prices_come_from_ksims_skeletons_and_pricing() {
    // Two of ksim's example skeletons, priced as the cloud provider's config prices them
    // (pricing.instanceTypes): m5.large (2 CPU, 7910Mi) and m5.xlarge (4 CPU, 15546Mi).
    // And the GPU example, p3.2xlarge (8 CPU, one nvidia.com/gpu).
    let skeletons = [
        include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml"),
        include_str!("../../../../deploy/vnode/examples/skeleton-m5-xlarge.yaml"),
        include_str!("../../../../deploy/vnode/examples/skeleton-p3-2xlarge.yaml"),
    ]
    .map(|yaml| NodeSkeleton::from_yaml(yaml).unwrap());
    let pricing = Pricing {
        instance_types: BTreeMap::from([
            ("m5.large".to_owned(), 0.096),
            ("m5.xlarge".to_owned(), 0.192),
            ("p3.2xlarge".to_owned(), 3.06),
        ]),
        ..Pricing::default()
    };
    let types = ksim_nodes::karpenter::instance_types(&skeletons, &pricing).unwrap();

    let control_plane = ControlPlane::builder().start().await.unwrap();
    let karpenter = Karpenter::builder(&control_plane)
        .instance_types(types)
        .start()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let client = control_plane.client();
    // The default NodePool of `ksim run --karpenter`: its CRD takes it, and it offers every
    // type of ksim's.
    create_node_class(&client).await;
    manifests::apply(&client, DEFAULT_NODEPOOL).await.unwrap();

    // 1 CPU fits both, m5.large is the cheaper; 12Gi fits m5.xlarge only. Neither is in the
    // built-in list, so a NodeClaim of either means the file was read.
    let claims = claim_per_pod(&client, &[("small", "1", "1Gi"), ("large", "500m", "12Gi")]).await;
    let types: Vec<String> = claims.iter().map(instance_type).collect();
    assert_eq!(types, ["m5.large", "m5.xlarge"], "{}", karpenter.log_tail());

    // Each Node carries the price it was launched at (Go's %f) and its skeleton's zone.
    let mut seen: Vec<(String, String, String)> = nodes_of_pool(&client, 2)
        .await
        .iter()
        .map(|node| {
            let labels = node.metadata.labels.as_ref();
            (
                label(labels, "node.kubernetes.io/instance-type"),
                label(labels, PRICE_LABEL),
                label(labels, "topology.kubernetes.io/zone"),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("m5.large".into(), "0.096000".into(), "us-east-1a".into()),
            ("m5.xlarge".into(), "0.192000".into(), "us-east-1a".into()),
        ],
        "{}",
        karpenter.log_tail()
    );

    // A pod asking for a GPU (the device plugin's extended resource) fits only the type whose
    // skeleton has one, however dear.
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &gpu_pod("train"))
        .await
        .unwrap();
    let all = launched(&client, 3).await;
    let gpu: Vec<String> = all
        .iter()
        .filter(|claim| {
            !claims
                .iter()
                .any(|old| old.metadata.name == claim.metadata.name)
        })
        .map(instance_type)
        .collect();
    assert_eq!(gpu, ["p3.2xlarge"], "{}", karpenter.log_tail());
}

/// A bare pod asking for one whole GPU (`nvidia.com/gpu`, requests and limits alike).
fn gpu_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                          "limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap()
}
