//! The recorded cluster's own state on a real control plane: a node (created through the API,
//! as a kubelet would register it) and a pod that waits on it show up in the export as a
//! recorded node and samples of Ready nodes per group and pods by phase; the node's deletion
//! too. Nothing of it is replayable: no Node object is in the trace's events.

use crate::common::{DEADLINE, Recorded, create_namespace};
use k8s_openapi::api::core::v1::{Node, Pod};
use ksim_localenv::wait;
use ksim_proto::ksim::trace::v1 as pb;
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
    // The default kinds: workloads, pods and nodes.
    let Recorded {
        control_plane,
        tracer,
        ..
    } = &Recorded::start(None).await;
    let client = control_plane.client();
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
    create_namespace(&client, "shop").await;
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

/// The latest record of `pod`'s lifetime in an export, if it has one that `done` accepts.
fn lifetime<'a>(
    trace: &'a ksim_trace::Trace,
    pod: &str,
    done: impl Fn(&pb::PodLifecycle) -> bool,
) -> Option<&'a pb::PodLifecycle> {
    trace
        .lifecycles
        .iter()
        .rfind(|l| l.pod_name == pod)
        .filter(|l| done(l))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_removal_and_a_pods_binding_readiness_and_node_are_recorded() {
    let Recorded {
        control_plane,
        tracer,
        ..
    } = &Recorded::start(None).await;
    let client = control_plane.client();
    tracer.wait_watching(&["Pod", "Node"]).await;
    let export = || async {
        tracer
            .export(pb::ExportRequest::default())
            .await
            .map_err(|e| e.to_string())
    };

    // A node CA is about to remove: its taint is when its removal began.
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["n1", "n2"] {
        let node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"ksim.io/node-group": "m5"}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler",
                "value": now.as_second().to_string(), "effect": "NoSchedule"}]}}),
            ),
        )
        .await
        .unwrap();
    let trace = wait::until("n1's removal to be recorded", DEADLINE, || async {
        let trace = export().await?;
        let removal = trace
            .nodes
            .iter()
            .rfind(|n| n.name == "n1")
            .map_or(0, |n| n.removal_started_ms);
        (removal > 0).then_some(trace).ok_or(format!("{removal}"))
    })
    .await
    .unwrap();
    let tainted = trace.nodes.iter().rfind(|n| n.name == "n1").unwrap();
    assert!(
        tainted.removal_started_ms >= tainted.created_ms,
        "{tainted:?}"
    );
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let trace = wait::until("n1's deletion", DEADLINE, || async {
        let trace = export().await?;
        let gone = trace.nodes.iter().rfind(|n| n.name == "n1").cloned();
        gone.clone()
            .filter(|n| n.deleted_ms > 0)
            .ok_or_else(|| format!("{gone:?}"))
    })
    .await
    .unwrap();
    assert!(
        trace.deleted_ms >= trace.removal_started_ms && trace.removal_started_ms > 0,
        "termination = deleted - removal began: {trace:?}"
    );
    // A cordon is a removal beginning too.
    nodes
        .patch(
            "n2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    wait::until("n2's cordon to be recorded", DEADLINE, || async {
        let trace = export().await?;
        let cordoned = trace.nodes.iter().rfind(|n| n.name == "n2").cloned();
        cordoned
            .clone()
            .filter(|n| n.removal_started_ms > 0)
            .ok_or_else(|| format!("{cordoned:?}"))
    })
    .await
    .unwrap();

    // A pod bound as a scheduler binds it (the binding subresource), then Running, then Ready,
    // as a kubelet reports them.
    create_namespace(&client, "shop").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        // No scheduler takes it: the test binds it.
        "spec": {"schedulerName": "by-the-test", "containers": [{"name": "c", "image": "web:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n2"}});
    let _: serde_json::Value = pods
        .create_subresource("binding", "web", &PostParams::default(), &binding)
        .await
        .unwrap();
    // Seen bound before it runs, so the bind is timed by the tracer's clock.
    wait::until("the pod to be seen bound", DEADLINE, || async {
        let pod = pods.get("web").await.map_err(|e| e.to_string())?;
        pod.spec
            .and_then(|s| s.node_name)
            .ok_or_else(|| "unbound".to_owned())
    })
    .await
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"phase": "Running",
            "containerStatuses": [{"name": "c", "image": "web:1", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"running": {"startedAt": started}}}]}})),
    )
    .await
    .unwrap();
    let running = wait::until("the pod's start", DEADLINE, || async {
        let trace = export().await?;
        lifetime(&trace, "web", |l| l.start_ms > 0)
            .cloned()
            .ok_or_else(|| "not started".to_owned())
    })
    .await
    .unwrap();
    assert_eq!(running.node_name, "n2");
    assert!(
        running.bound_ms > 0 && running.bound_ms < running.start_ms,
        "bound before it started: {running:?}"
    );
    assert_eq!(running.ready_ms, 0, "not Ready yet");
    let ready_at = k8s_openapi::jiff::Timestamp::now().to_string();
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}})),
    )
    .await
    .unwrap();
    let ready = wait::until("the pod's readiness", DEADLINE, || async {
        let trace = export().await?;
        lifetime(&trace, "web", |l| l.ready_ms > 0)
            .cloned()
            .ok_or_else(|| "not Ready".to_owned())
    })
    .await
    .unwrap();
    assert_eq!(
        (ready.bound_ms, ready.start_ms, ready.node_name.as_str()),
        (running.bound_ms, running.start_ms, "n2"),
        "the same lifetime, Ready now"
    );
    assert!(ready.ready_ms >= ready.start_ms, "{ready:?}");
}
