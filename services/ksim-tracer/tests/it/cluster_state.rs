//! The recorded cluster's own state on a real control plane: a node (created through the API,
//! as a kubelet would register it) and a pod that waits on it show up in the export as a
//! recorded node and samples of Ready nodes per group and pods by phase; the node's deletion
//! too. Nothing of it is replayable: no Node object is in the trace's events.

use crate::common::{DEADLINE, Tracer};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use ksim_proto::ksim::trace::v1 as pb;
use ksim_testenv::{ControlPlane, wait};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// The samples' Ready nodes of group `m5` and pending pods of `shop`, in order, repeats removed.
fn curve(trace: &ksim_trace::Trace) -> Vec<(u32, u32)> {
    let mut points: Vec<(u32, u32)> = Vec::new();
    for sample in &trace.samples {
        let point = (
            sample.ready_nodes.get("m5").copied().unwrap_or(0),
            sample.pods.get("shop").map_or(0, |p| p.pending),
        );
        if points.last() != Some(&point) {
            points.push(point);
        }
    }
    points
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_pod_phases_are_recorded_as_cluster_state() {
    let control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client();
    let data = tempfile::tempdir().unwrap();
    // The default kinds: workloads, pods and nodes.
    let tracer = Tracer::start(
        control_plane.kubeconfig_path(),
        &data.path().join("tracer"),
        None,
        &["--fsync=always"],
    )
    .await;
    tracer.wait_watching(&["Deployment", "Pod", "Node"]).await;

    // A node that says it is Ready, in group m5, with no room for the pod below.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"ksim.io/node-group": "m5",
            "node.kubernetes.io/instance-type": "m5.large"}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"cpu": "1", "memory": "1Gi", "pods": "10"},
                "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"},
                "addresses": [{"type": "InternalIP", "address": "10.9.8.7"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": now, "lastTransitionTime": now}]
            }})),
        )
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {"containers": [{"name": "c", "image": "big:1",
            "resources": {"requests": {"cpu": "4"}}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let seen = |want: (u32, u32)| {
        let tracer = &tracer;
        async move {
            wait::until(
                &format!("the latest sample to be {want:?}"),
                DEADLINE,
                || async {
                    let trace = tracer
                        .export(pb::ExportRequest::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    let points = curve(&trace);
                    (points.last() == Some(&want))
                        .then_some(trace)
                        .ok_or(format!("{points:?}"))
                },
            )
            .await
            .unwrap()
        }
    };
    let trace = seen((1, 1)).await;
    let header = trace.header.tracer_config.as_ref().unwrap();
    assert!(header.cluster_recorded);
    assert!(
        header
            .tracked_kinds
            .iter()
            .all(|k| k.gvk.as_ref().unwrap().kind != "Node"),
        "nodes are not a replayed kind"
    );
    assert!(
        trace
            .events
            .iter()
            .flat_map(|e| &e.applied)
            .all(|o| o.gvk.as_ref().unwrap().kind != "Node"),
        "a node became a replayable object"
    );
    let recorded = trace.nodes.iter().rfind(|n| n.name == "n1").unwrap();
    assert_eq!(recorded.group, "m5");
    assert_eq!(
        recorded.labels["node.kubernetes.io/instance-type"],
        "m5.large"
    );
    assert_eq!(recorded.allocatable["cpu"], "1");
    assert!(recorded.ready);
    assert!(
        !format!("{recorded:?}").contains("10.9.8.7"),
        "an address was recorded"
    );
    assert_eq!(trace.trailer.sample_count, trace.samples.len() as u64);

    // The node goes, then the pod: the samples follow, the node's record says when it went.
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let trace = seen((0, 1)).await;
    let deleted = trace.nodes.iter().rfind(|n| n.name == "n1").unwrap();
    assert!(deleted.deleted_ms > 0, "{deleted:?}");
    pods.delete("big", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let trace = seen((0, 0)).await;
    let points = curve(&trace);
    assert_eq!(
        points[points.len() - 3..],
        [(1, 1), (0, 1), (0, 0)],
        "{points:?}"
    );
}
