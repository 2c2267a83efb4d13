//! `reschedule_bare_pods`: a pod the trace holds without an owner, removed by the cluster
//! during the replay, comes back as `<name>-clone-1` and runs; the trace's own delete of it
//! later takes the clone too, and nothing is cloned after that. The trace's recorded Events
//! (both API groups) are evidence only: none is applied, and none is an object error.

use super::common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1 as pb;
use kube::{
    Api,
    api::{DeleteParams, ListParams},
};
use serde_json::json;

fn bare_pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "registry.example/solo:1"}]}
    })
}

fn recorded_event(name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "solo"},
        "regarding": {"kind": "Pod", "namespace": "shop", "name": "solo"},
        "reason": "Scheduled", "message": "recorded", "note": "recorded",
        "reportingController": "default-scheduler", "reportingInstance": "recorded",
        "action": "Binding", "eventTime": "2023-11-14T22:13:20.000000Z"
    })
}

/// The names of the namespace's pods that are not being deleted.
async fn live_pods(pods: &Api<Pod>) -> Vec<String> {
    let mut names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| pod.metadata.name)
        .collect();
    names.sort();
    names
}

async fn until_running(pods: &Api<Pod>, name: &str) {
    wait::until(&format!("pod {name} Running"), DEADLINE, || async {
        let pod = pods.get_opt(name).await.map_err(|e| e.to_string())?;
        let phase = pod
            .and_then(|p| p.status)
            .and_then(|s| s.phase)
            .unwrap_or_default();
        (phase == "Running").then_some(()).ok_or(phase)
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_bare_pod_is_cloned_until_the_trace_deletes_it() {
    let mut mesh = start().await;
    let file = trace_file_with_deletes(
        vec![
            (
                0,
                vec![
                    ("v1.Pod", "shop", "solo", bare_pod("solo")),
                    // As the tracer records them with `v1 Event` tracked: in the recorded
                    // namespace, which the simulated one is not, so an apply would be refused.
                    (
                        "v1.Event",
                        "shop",
                        "recorded.scheduled",
                        recorded_event("recorded.scheduled"),
                    ),
                    (
                        "events.k8s.io/v1.Event",
                        "shop",
                        "recorded.noted",
                        recorded_event("recorded.noted"),
                    ),
                ],
                vec![],
            ),
            (40_000, vec![], vec![("v1.Pod", "shop", "solo", json!({}))]),
        ],
        Vec::new(),
        45_000,
    );
    let started = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            node_groups: vec![pool_group("bare", 1)],
            reschedule_bare_pods: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(mesh.client.clone(), "virtual-shop");
    until_running(&pods, "solo").await;

    // The cluster removes it (as a drain would); the driver puts a clone in its place.
    pods.delete("solo", &DeleteParams::default()).await.unwrap();
    until_running(&pods, "solo-clone-1").await;
    assert_eq!(live_pods(&pods).await, ["solo-clone-1"]);

    // The trace's delete of "solo" at 40 s takes the clone, and no second clone follows.
    until_simulation_is(
        &mesh.driver,
        &started.id,
        "applied the trace's delete",
        |s| s.progress.as_ref().map_or(0, |p| p.events_applied) >= 2,
    )
    .await;
    wait::until("the clone to go with its original", DEADLINE, || async {
        let live = live_pods(&pods).await;
        live.is_empty().then_some(()).ok_or(format!("{live:?}"))
    })
    .await
    .unwrap();
    let done = mesh.until_done(&started.id).await;
    assert_eq!(done.state(), pb::SimulationState::Succeeded, "{done:?}");
    let report = mesh.report(&started.id).await;
    assert_eq!(report.events_applied, 2);
    assert!(
        report.object_errors.is_empty(),
        "{:?}",
        report.object_errors
    );
    let events: Api<Event> = Api::namespaced(mesh.client.clone(), "virtual-shop");
    let replayed: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|event| event.metadata.name)
        .filter(|name| name.starts_with("recorded."))
        .collect();
    assert!(
        replayed.is_empty(),
        "recorded Events replayed: {replayed:?}"
    );
    mesh.assert_nothing_left(&started.id, &["bare"]).await;
}
