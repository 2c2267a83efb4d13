//! Karpenter as a user runs it (issue 37): `ksim up --karpenter` with ksim's own instance types
//! and prices, then `ksim run` of the demo trace with a NodePool of the user's. The real
//! Karpenter launches the nodes, the pool plays their kubelet, every pod runs, and after the
//! run nothing of it is left: no NodePool, NodeClaim or node. A NodePool Karpenter's
//! validation refuses is one line naming the field, and nothing is created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Node};
use ksim_e2e::fixtures::M5_LARGE_SKELETON;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, ListParams},
};
use serde_json::Value;

use super::common::up::{Up, report_dir};

const M5_XLARGE_SKELETON: &str =
    include_str!("../../../../../deploy/vnode/examples/skeleton-m5-xlarge.yaml");

const NODEPOOL: &str = "\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
";

fn karpenter_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// NodePools, NodeClaims and Karpenter's nodes in the cluster.
async fn karpenters(client: &kube::Client) -> (usize, usize, usize) {
    let count = |kind, plural| {
        let api = Api::<DynamicObject>::all_with(client.clone(), &karpenter_resource(kind, plural));
        async move { api.list(&ListParams::default()).await.unwrap().items.len() }
    };
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("karpenter.sh/nodepool"))
        .await
        .unwrap()
        .items
        .len();
    (
        count("NodePool", "nodepools").await,
        count("NodeClaim", "nodeclaims").await,
        nodes,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_trace_runs_on_nodes_karpenter_launches_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let large = write(dir.path(), "m5-large.yaml", M5_LARGE_SKELETON);
    let xlarge = write(dir.path(), "m5-xlarge.yaml", M5_XLARGE_SKELETON);
    let pricing = write(
        dir.path(),
        "pricing.yaml",
        "pricing:\n  instanceTypes: {m5.large: 0.096, m5.xlarge: 0.192}\n",
    );
    let nodepool = write(dir.path(), "nodepool.yaml", NODEPOOL);
    let trace = dir.path().join("demo.ktrace");
    let trace = trace.to_str().unwrap();
    let up = Up::start(&[
        "--karpenter",
        "--instance-type",
        &large,
        "--instance-type",
        &xlarge,
        "--provider-config",
        &pricing,
    ]);
    assert!(up.said().contains("karpenter  v1.14.1"), "{}", up.said());
    up.ksim(&["demo", "--write-trace", trace]);
    let client = up.client().await;

    // Refused by Karpenter's own validation, naming the field, before anything is created.
    let bad = write(
        dir.path(),
        "bad.yaml",
        &NODEPOOL.replace("WhenEmptyOrUnderutilized", "Sometimes"),
    );
    let refused = up.ksim_any(&["run".into(), trace.into(), "--nodepool".into(), bad]);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(
        said.contains("spec.disruption.consolidationPolicy"),
        "{said}"
    );
    assert!(said.contains("Sometimes"), "{said}");
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default().labels("ksim.io/simulation"))
        .await
        .unwrap()
        .items;
    assert!(namespaces.is_empty(), "{namespaces:?}");
    assert_eq!(karpenters(&client).await, (0, 0, 0));

    let run = up.ksim(&["run", trace, "--speed", "10", "--nodepool", &nodepool]);
    let printed = String::from_utf8_lossy(&run.stdout).into_owned();
    let report: Value = serde_json::from_slice(
        &std::fs::read(Path::new(report_dir(&printed)).join("report.json")).unwrap(),
    )
    .unwrap();
    // Every pod ran, on nodes Karpenter launched for the NodePool (its group).
    let last = report["timeline"].as_array().unwrap().last().unwrap();
    assert_eq!(last["pods"]["pending"], 0, "{printed}");
    assert!(last["pods"]["running"].as_u64().unwrap() > 0, "{printed}");
    assert!(
        last["nodes"]["general"]["ready"].as_u64().unwrap() > 0,
        "{printed}"
    );
    let added: Vec<&str> = report["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "added")
        .map(|change| change["node"].as_str().unwrap())
        .collect();
    assert!(!added.is_empty(), "{printed}");
    assert!(
        added.iter().all(|node| node.starts_with("kwok-general-")),
        "{added:?}"
    );
    // And nothing of it is left.
    assert_eq!(karpenters(&client).await, (0, 0, 0), "{printed}");
}
