//! `settle_start`: the trace's first instant is applied, and its pods run, before the replay's
//! clock starts, as they ran when the recording began.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::*;
use ksim_proto::ksim::driver::v1 as pb;

#[tokio::test(flavor = "multi_thread")]
async fn the_first_instant_runs_before_the_clock_starts() {
    let mut mesh = start().await;
    let file = trace_file(
        vec![
            (
                0,
                vec![(
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 6).json(),
                )],
            ),
            (
                2_000,
                vec![(
                    "apps/v1.Deployment",
                    "shop",
                    "late",
                    Workload::new("late", 1).json(),
                )],
            ),
        ],
        4_000,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "settle".to_owned(),
            node_groups: vec![pool_group("settle", 2)],
            settle_start: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let ended = mesh.until_done(&simulation.id).await;
    assert_eq!(
        ended.state(),
        pb::SimulationState::Succeeded,
        "{}",
        ended.error_message
    );
    let report = mesh.report(&simulation.id).await;

    // The first sample is taken as the clock starts: the six pods already run.
    let first = report.timeline.first().unwrap().pods.unwrap();
    assert_eq!((first.running, first.pending), (6, 0), "{first:?}");
    // The later event still waits for its time, and arrives.
    let last = report.timeline.last().unwrap().pods.unwrap();
    assert_eq!(last.running, 7, "{:?}", report.timeline);
    // Every event counts as applied; those before the clock were never late.
    assert_eq!(report.events_applied, ended.progress.unwrap().events_total);
    let lateness = report.lateness.unwrap();
    assert_eq!(lateness.count, report.events_applied);
    mesh.assert_nothing_left(&simulation.id, &["settle"]).await;
}

/// A start that cannot settle (a pod no node can hold) is cancelled while the driver waits on
/// it: nothing is played, and nothing is left, not even by the bare-pod rescheduler.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_that_cannot_settle_can_be_cancelled() {
    let mut mesh = start().await;
    let huge = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "huge"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1",
                                 "resources": {"requests": {"cpu": "64"}}}]}
    });
    let file = trace_file(
        vec![
            (0, vec![("v1.Pod", "shop", "huge", huge)]),
            (
                1_000,
                vec![(
                    "apps/v1.Deployment",
                    "shop",
                    "late",
                    Workload::new("late", 1).json(),
                )],
            ),
        ],
        60_000,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "unsettled".to_owned(),
            node_groups: vec![pool_group("unsettled", 1)],
            settle_start: true,
            reschedule_bare_pods: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(mesh.client.clone(), "unsettled-shop");
    ksim_localenv::wait::until("the huge pod to wait", DEADLINE, || async {
        match pods.get_opt("huge").await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
    .unwrap();

    // Every state the simulation shows from here to its end, sampled at the finest interval
    // the driver gives (100 ms); the cleanup takes seconds. Each change once.
    let mut stream = mesh
        .driver
        .watch_simulation(pb::WatchSimulationRequest {
            id: simulation.id.clone(),
            interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 100_000_000,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let states = tokio::spawn(async move {
        let mut states = Vec::new();
        while let Some(message) = stream.message().await.unwrap() {
            let state = message.progress.unwrap().state();
            if states.last() != Some(&state) {
                states.push(state);
            }
        }
        states
    });
    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(
        cancelled.state(),
        pb::SimulationState::Cancelled,
        "{}",
        cancelled.error_message
    );
    // Nothing was replayed, so it never ran: Pending through the cleanup, then Cancelled.
    let states = tokio::time::timeout(DEADLINE, states)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(states.last(), Some(&pb::SimulationState::Cancelled));
    assert!(
        states.iter().all(|s| matches!(
            s,
            pb::SimulationState::Pending | pb::SimulationState::Cancelled
        )),
        "{states:?}"
    );
    let report = mesh.report(&simulation.id).await;
    // The first instant was applied; the Deployment due a second after the clock never was.
    assert_eq!(report.events_applied, 1, "{report:?}");
    mesh.assert_nothing_left(&simulation.id, &["unsettled"])
        .await;
}
