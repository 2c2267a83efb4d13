//! Record a live scenario with the tracer store, then replay it through the driver at 1x and
//! 10x on the real control plane and virtual nodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::common::*;
use k8s_openapi::api::{apps::v1::Deployment, batch::v1::Job};
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::time::now_ms;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const RECORDED_PEAK_PODS: u64 = 6;
/// Pods the scenario starts: 6 for the Deployment (2, then 4 more), 2 for the Job.
const RECORDED_PODS: u64 = 8;

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_scenario_replays_at_1x_and_10x_and_leaves_nothing_behind() {
    let mut mesh = start().await;
    let (start_ms, end_ms) = record_scenario(&mesh).await;

    for speed in [1.0, 10.0] {
        let spec = pb::SimulationSpec {
            trace_source: Some(pb::simulation_spec::TraceSource::StoredTrace(
                pb::StoredTrace {
                    start_time: Some(ksim_trace::time::timestamp(start_ms)),
                    end_time: Some(ksim_trace::time::timestamp(end_ms)),
                    ..Default::default()
                },
            )),
            speed,
            node_groups: vec![pool_group("sim", 3)],
            ..Default::default()
        };
        let started = mesh.start_simulation(spec).await.unwrap();
        let id = started.id.clone();
        let ended = mesh.until_done(&id).await;
        assert_eq!(
            ended.state(),
            pb::SimulationState::Succeeded,
            "speed {speed}: {}",
            ended.error_message
        );
        let progress = ended.progress.clone().unwrap();
        eprintln!(
            "speed {speed}: node groups and namespaces ready in {} ms",
            ksim_trace::time::millis(&ended.start_time.unwrap())
                - ksim_trace::time::millis(&ended.create_time.unwrap())
        );
        let report = mesh.report(&id).await;
        assert!(report.complete);
        // At least: the Deployment created, scaled up, scaled down, and the Job created.
        assert!(progress.events_total >= 4, "{progress:?}");
        assert_eq!(
            report.events_applied, progress.events_total,
            "speed {speed}"
        );
        assert!(
            report.object_errors.is_empty(),
            "{:?}",
            report.object_errors
        );

        let lateness = report.lateness.unwrap();
        assert_eq!(lateness.count, report.events_applied);
        assert!(lateness.p99.is_some() && lateness.p50.is_some());

        let pending = report.pod_pending_time.unwrap();
        assert_eq!(
            pending.count,
            RECORDED_PODS,
            "every recorded pod ran once (speed {speed}): {:#?}",
            report.timeline.iter().map(|b| b.pods).collect::<Vec<_>>()
        );
        let peak_running = report
            .timeline
            .iter()
            .map(|b| b.pods.unwrap_or_default().running)
            .max()
            .unwrap();
        assert_eq!(
            peak_running, RECORDED_PEAK_PODS,
            "speed {speed}: {:?}",
            report.timeline
        );
        let last = report.timeline.last().unwrap().pods.unwrap();
        assert_eq!(
            last.succeeded, 2,
            "the Job's pods finished as recorded (speed {speed}): {:?}",
            report.timeline
        );
        assert_eq!(last.running, 3, "the Deployment ended at 3 (speed {speed})");

        assert_eq!(report.peak_nodes, 3);
        for bucket in &report.timeline {
            let sim = bucket.nodes.iter().find(|n| n.node_group == "sim").unwrap();
            assert_eq!(sim.nodes, 3, "{bucket:?}");
        }
        let files = report.artifacts.unwrap();
        for path in [&files.json_path, &files.csv_path, &files.svg_path] {
            assert!(std::fs::metadata(path).unwrap().len() > 0, "{path}");
        }
        // The replay took about the recorded time divided by the speed.
        let replayed = ksim_trace::time::millis(&ended.end_time.unwrap())
            - ksim_trace::time::millis(&ended.start_time.unwrap());
        let recorded = end_ms - start_ms;
        assert!(
            replayed as f64 >= recorded as f64 / speed,
            "speed {speed}: replay {replayed} ms for {recorded} ms recorded"
        );
        mesh.assert_nothing_left(&id, &["sim"]).await;
    }
}

/// Runs the scenario in namespace `shop` on a group `rec`, then removes both; returns the
/// recorded window in unix ms.
async fn record_scenario(mesh: &TestMesh) -> (i64, i64) {
    let client = mesh.client.clone();
    mesh.pool.create_group("rec", SKELETON, 3).await.unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap(),
        )
        .await
        .unwrap();
    wait::until("the default ServiceAccount of shop", DEADLINE, || async {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), "shop");
        accounts.get("default").await.map_err(|e| e.to_string())
    })
    .await
    .unwrap();
    let start_ms = now_ms();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(web(2)).unwrap(),
        )
        .await
        .unwrap();
    running_pods(mesh, "app=web", 2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    scale(&deployments, 6).await;
    running_pods(mesh, "app=web", 6).await;
    // Held long enough that the 10x replay still shows the peak in whole-second samples.
    tokio::time::sleep(Duration::from_secs(25)).await;
    scale(&deployments, 3).await;
    running_pods(mesh, "app=web", 3).await;

    let jobs: Api<Job> = Api::namespaced(client.clone(), "shop");
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(batch()).unwrap(),
    )
    .await
    .unwrap();
    wait::until("the Job to complete", DEADLINE, || async {
        let job = jobs.get("batch").await.map_err(|e| e.to_string())?;
        let succeeded = job.status.and_then(|s| s.succeeded).unwrap_or(0);
        if succeeded == 2 {
            Ok(())
        } else {
            Err(format!("{succeeded} succeeded"))
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end_ms = now_ms();
    // The tracer records with a small delay; give it a moment before exporting.
    tokio::time::sleep(Duration::from_secs(2)).await;

    namespaces
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    mesh.pool.delete_group("rec").await.unwrap();
    (start_ms, end_ms)
}

async fn scale(deployments: &Api<Deployment>, replicas: i32) {
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

async fn running_pods(mesh: &TestMesh, selector: &str, count: usize) {
    ksim_localenv::pods::in_phase(&mesh.client, "shop", selector, "Running", count, DEADLINE)
        .await
        .unwrap();
}

fn web(replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "tolerations": [{"key": "ksim.io/virtual-node", "operator": "Exists"}],
                    "containers": [{
                        "name": "web", "image": "registry.example/web:1",
                        "ports": [{"containerPort": 8080}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}
                    }]
                }
            }
        }
    })
}

fn batch() -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "batch", "namespace": "shop"},
        "spec": {
            "completions": 2, "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"key": "ksim.io/virtual-node", "operator": "Exists"}],
                    "containers": [{"name": "work", "image": "registry.example/batch:1"}]
                }
            }
        }
    })
}

/// A trace recorded long ago (November 2023), imported into the tracer store and replayed from
/// it without an end: the replay ends where the recording did, after its last event, not now
/// (it would replay for years). Its header ends at the last event, as a converted SimKube
/// trace's does, so the window must still hold that event.
#[tokio::test(flavor = "multi_thread")]
async fn an_imported_trace_replays_its_own_span_when_no_end_is_given() {
    use ksim_proto::ksim::trace::v1::{
        ExportRequest, ImportRequest, trace_store_client::TraceStoreClient,
    };

    let mut mesh = start().await;
    let app = |name: &'static str, replicas| {
        let object = Workload::new(name, replicas).json();
        vec![("apps/v1.Deployment", "shop", name, object)]
    };
    let file = trace_file(
        vec![
            (0, app("web", 1)),
            (2_000, app("web", 2)),
            (4_000, app("api", 1)),
        ],
        4_000,
    );
    let mut tracer = TraceStoreClient::connect(mesh.tracer_url.clone())
        .await
        .unwrap();
    let imported = tracer
        .import(tokio_stream::iter([ImportRequest {
            data: file,
            format: 0,
            display_name: "long ago".to_owned(),
        }]))
        .await
        .unwrap()
        .into_inner();
    let trace_id = imported.trace_id;

    let spec = pb::SimulationSpec {
        trace_source: Some(pb::simulation_spec::TraceSource::StoredTrace(
            pb::StoredTrace {
                trace_id: trace_id.clone(),
                ..Default::default()
            },
        )),
        speed: 10.0,
        node_groups: vec![pool_group("sim", 1)],
        ..Default::default()
    };
    let id = mesh.start_simulation(spec).await.unwrap().id;
    let ended = mesh.until_done(&id).await;
    assert_eq!(
        ended.state(),
        pb::SimulationState::Succeeded,
        "{}",
        ended.error_message
    );
    // Every event of the window given an end well after the last event was replayed: the
    // last event was in the default window too.
    let mut export = tracer
        .export(ExportRequest {
            trace_id: trace_id.clone(),
            end_time: Some(ksim_trace::time::timestamp(1_700_000_000_000 + 3_600_000)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut bytes = Vec::new();
    while let Some(chunk) = export.message().await.unwrap() {
        bytes.extend_from_slice(&chunk.data);
    }
    let whole = ksim_trace::read_trace(&bytes).unwrap().events.len() as u64;
    let progress = ended.progress.unwrap();
    assert_eq!(
        (progress.events_applied, progress.events_total),
        (whole, whole),
        "the last event is in the window"
    );
    mesh.assert_nothing_left(&id, &["sim"]).await;
}
