//! The real Karpenter with its KWOK cloud provider (built by deploy/karpenter/build.sh, which
//! deploy/test.sh runs first) against the real control plane: it takes its CRDs, reads pending
//! pods the real scheduler could not place, and launches for each a NodeClaim of the cheapest
//! instance type that fits it, whose Node it creates. Without the binary these tests fail,
//! naming the build script; they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use ksim_testenv::{ControlPlane, Karpenter, wait};
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

async fn create(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    body: serde_json::Value,
) {
    let (group, version) = api_version.split_once('/').unwrap();
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &resource)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|error| panic!("creating {kind}: {error}"));
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

fn instance_type(object: &DynamicObject) -> String {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get("node.kubernetes.io/instance-type"))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_pods_get_nodeclaims_of_the_cheapest_instance_type_that_fits_each() {
    let control_plane = ControlPlane::builder().start().await.unwrap();
    let karpenter = Karpenter::builder(&control_plane)
        .start()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let client = control_plane.client();

    // One NodePool of on-demand linux/amd64 types from the provider's built-in list.
    create(
        &client,
        "karpenter.kwok.sh/v1alpha1",
        "KWOKNodeClass",
        "kwoknodeclasses",
        json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"}, "spec": {}}),
    )
    .await;
    create(
        &client,
        "karpenter.sh/v1",
        "NodePool",
        "nodepools",
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]}}}}),
    )
    .await;

    // 1500m fits the 2-CPU types: the cheapest is c-2x (2 GiB a CPU). 12Gi fits 16 GiB types
    // only: the cheapest is m-2x (8 GiB a CPU). One after the other, so each has a batch of its
    // own (together they would share one node).
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let mut types = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (count, (name, cpu, memory)) in [("small", "1500m", "1Gi"), ("large", "500m", "12Gi")]
        .into_iter()
        .enumerate()
    {
        pods.create(&PostParams::default(), &pod(name, cpu, memory))
            .await
            .unwrap();
        // The NodeClaim this pod brought is the one not there before it.
        let claims = launched(&client, count + 1).await;
        let new: Vec<&DynamicObject> = claims
            .iter()
            .filter(|claim| !seen.contains(&claim.metadata.name))
            .collect();
        let [claim] = new.as_slice() else {
            panic!("one new NodeClaim for {name}: {new:?}")
        };
        types.push(instance_type(claim));
        seen.insert(claim.metadata.name.clone());
    }
    assert_eq!(
        types,
        ["c-2x-amd64-linux", "m-2x-amd64-linux"],
        "{}",
        karpenter.log_tail()
    );

    // The KWOK provider creates each NodeClaim's Node itself, in the NodePool, with its type.
    let nodes = Api::<Node>::all(client.clone());
    let created = wait::until("a Node per NodeClaim", DEADLINE, || async {
        let listed = nodes
            .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
            .await
            .map_err(|e| e.to_string())?
            .items;
        let total = listed.len();
        (total == 2)
            .then_some(listed)
            .ok_or(format!("{total} nodes"))
    })
    .await
    .unwrap();
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
            node.metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get("node.kubernetes.io/instance-type"))
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    node_types.sort();
    assert_eq!(node_types, ["c-2x-amd64-linux", "m-2x-amd64-linux"]);
}
