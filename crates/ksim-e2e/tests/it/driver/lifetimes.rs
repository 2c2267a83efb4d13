//! Each replayed pod runs as long as the recorded launch it replays, and no longer than its
//! Job, on the real control plane (the Job and ReplicaSet controllers make the pods, the
//! garbage collector deletes them) and virtual nodes (which complete them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::common::*;
use k8s_openapi::{
    api::core::v1::Pod,
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::{SignedDuration, Timestamp},
};
use ksim_localenv::wait;
use ksim_nodes::labels::{LIFETIME_ANNOTATION, LIFETIME_PENDING_ANNOTATION};
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::pb as trace;
use kube::{Api, api::ListParams};
use serde_json::json;

const NAMESPACE: &str = "life-shop";

#[tokio::test(flavor = "multi_thread")]
async fn each_replayed_pod_runs_as_long_as_its_recorded_launch() {
    let mut mesh = start().await;
    let file = trace_file_with_lifecycles(
        vec![(
            0,
            vec![
                ("batch/v1.Job", "shop", "batch", sequential_job()),
                (
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 1).json(),
                ),
            ],
        )],
        vec![
            // The Job's three pods, one after another: 1 ms, 5 s, 2 s. The template carries the
            // first launch's 1 ms, the driver patches the second's 5 s in once it sees the pod
            // start. No patch lands within a millisecond of a start: the second pod runs its
            // 5 s only because the pool waits for the driver's word before its clock runs.
            recorded(job(), "batch", 0, 0, 1),
            recorded(job(), "batch", 1, 100, 5_100),
            recorded(job(), "batch", 2, 5_200, 7_200),
            // The Deployment's first pod ended after 2 s; its replacement ran to the end.
            recorded(web(), "web", 0, 0, 2_000),
            ran_on(recorded(web(), "web", 1, 2_100, 0)),
        ],
        120_000,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "life".to_owned(),
            node_groups: vec![pool_group("life", 2)],
            ..Default::default()
        })
        .await
        .unwrap();
    let id = simulation.id;
    let pods: Api<Pod> = Api::namespaced(mesh.client.clone(), NAMESPACE);

    // The Job: every launch got its own lifetime, in launch order.
    let job_pods = until_pods(&pods, "job-name=batch", |pods| {
        pods.len() == 3 && pods.iter().all(|pod| phase(pod) == "Succeeded")
    })
    .await;
    let lifetime_of = |value: &str| {
        job_pods
            .iter()
            .find(|pod| annotation(pod) == Some(value))
            .unwrap_or_else(|| panic!("no Job pod with lifetime {value}: {job_pods:#?}"))
    };
    let (first, second, third) = (lifetime_of("1"), lifetime_of("5000"), lifetime_of("2000"));
    assert!(
        job_pods.iter().all(|pod| !pending(pod)),
        "every pod got its lifetime: {job_pods:#?}"
    );
    assert!(started(first) <= started(second), "launch 0 started first");
    assert!(started(second) < started(third), "launch 1 before launch 2");
    let ran = finished(second).duration_since(started(second));
    assert!(
        ran >= SignedDuration::from_secs(4),
        "the 5 s launch ran {ran} (the template's 1 ms would end it at once)"
    );

    // The Deployment: its first pod ended after 2 s, its replacement runs on.
    let web_pods = until_pods(&pods, "app=web", |pods| {
        pods.iter().any(|pod| phase(pod) == "Succeeded")
            && pods.iter().any(|pod| phase(pod) == "Running")
    })
    .await;
    let ended: Vec<&Pod> = web_pods
        .iter()
        .filter(|p| phase(p) == "Succeeded")
        .collect();
    assert_eq!(ended.len(), 1, "{web_pods:#?}");
    assert_eq!(annotation(ended[0]), Some("2000"));
    let replacement = web_pods.iter().find(|p| phase(p) == "Running").unwrap();
    wait::until("the replacement to lose its lifetime", DEADLINE, || async {
        let pod = pods
            .get(&name(replacement))
            .await
            .map_err(|e| e.to_string())?;
        match annotation(&pod) {
            None => Ok(()),
            Some(value) => Err(format!("still {value}")),
        }
    })
    .await
    .unwrap();
    // Twice the template's lifetime past its start, the replacement still runs.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let now = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    let finished_count = now.items.iter().filter(|p| phase(p) == "Succeeded").count();
    assert_eq!(
        finished_count, 1,
        "only the first launch ended: {:#?}",
        now.items
    );
    let still = pods.get(&name(replacement)).await.unwrap();
    assert_eq!(phase(&still), "Running");

    let cancelled = mesh.cancel(&id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    mesh.assert_nothing_left(&id, &["life"]).await;
}

/// Many pods start at once, each of them a launch whose lifetime the driver must give it while
/// the template's (the first launch's, 1 ms) would end it at once: none ends early, on a run
/// where the driver's patches queue behind each other and the Job controller's writes.
#[tokio::test(flavor = "multi_thread")]
async fn no_replayed_pod_ends_on_its_templates_lifetime_under_load() {
    const PODS: u32 = 16;
    let mut mesh = start().await;
    let mut job = sequential_job();
    job["spec"]["completions"] = json!(PODS);
    job["spec"]["parallelism"] = json!(PODS);
    let mut launches = vec![recorded(self::job(), "batch", 0, 0, 1)];
    launches.extend((1..PODS).map(|launch| recorded(self::job(), "batch", launch, 0, 3_000)));
    let file = trace_file_with_lifecycles(
        vec![(0, vec![("batch/v1.Job", "shop", "batch", job)])],
        launches,
        120_000,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "load".to_owned(),
            node_groups: vec![pool_group("load", 2)],
            ..Default::default()
        })
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(mesh.client.clone(), "load-shop");
    let done = until_pods(&pods, "job-name=batch", |pods| {
        pods.len() == PODS as usize && pods.iter().all(|pod| phase(pod) == "Succeeded")
    })
    .await;
    let mut lifetimes: Vec<&str> = done.iter().filter_map(annotation).collect();
    lifetimes.sort_unstable();
    let mut expected = vec!["1"];
    expected.extend(std::iter::repeat_n("3000", PODS as usize - 1));
    expected.sort_unstable();
    assert_eq!(lifetimes, expected, "one launch each: {done:#?}");
    for pod in done.iter().filter(|pod| annotation(pod) == Some("3000")) {
        // Times are whole seconds: a 3 s run shows as 2 s at the least, a 1 ms one as 0 or 1.
        let ran = finished(pod).duration_since(started(pod));
        assert!(
            ran >= SignedDuration::from_secs(2),
            "{} ran {ran}, not its launch's 3 s",
            name(pod)
        );
    }

    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    mesh.assert_nothing_left(&simulation.id, &["load"]).await;
}

/// A Job the trace deletes takes its pods with it, as `kubectl delete` and the TTL controller
/// do in the recorded cluster; the server's default for batch/v1 would orphan them, running.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_job_takes_its_pods() {
    let mut mesh = start().await;
    let batch = ("batch/v1.Job", "shop", "batch", sequential_job());
    let file = trace_file_with_deletes(
        vec![
            (0, vec![batch.clone()], Vec::new()),
            // Late enough for the pod to be seen running first on a loaded machine.
            (20_000, Vec::new(), vec![batch]),
        ],
        // Its first launch was still running when the Job went.
        vec![ran_on(recorded(job(), "batch", 0, 0, 0))],
        120_000,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "gone".to_owned(),
            node_groups: vec![pool_group("gone", 1)],
            ..Default::default()
        })
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(mesh.client.clone(), "gone-shop");
    until_pods(&pods, "job-name=batch", |pods| {
        pods.len() == 1 && phase(&pods[0]) == "Running"
    })
    .await;
    until_pods(&pods, "job-name=batch", <[Pod]>::is_empty).await;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(mesh.client.clone(), "gone-shop");
    assert!(jobs.get_opt("batch").await.unwrap().is_none());

    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    mesh.assert_nothing_left(&simulation.id, &["gone"]).await;
}

fn job() -> trace::GroupVersionKind {
    ksim_trace::gvk::parse("batch/v1.Job").unwrap()
}

fn web() -> trace::GroupVersionKind {
    ksim_trace::gvk::parse("apps/v1.Deployment").unwrap()
}

/// A recorded launch that completed on its own between the offsets given.
fn recorded(
    owner: trace::GroupVersionKind,
    name: &str,
    launch_index: u32,
    start_ms: i64,
    end_ms: i64,
) -> trace::PodLifecycle {
    trace::PodLifecycle {
        owner_gvk: Some(owner),
        owner_namespace: "shop".to_owned(),
        owner_name: name.to_owned(),
        pod_spec_hash: 7,
        launch_index,
        start_ms,
        end_ms,
        outcome: trace::PodOutcome::Succeeded as i32,
        pod_name: format!("{name}-{launch_index}"),
        ..Default::default()
    }
}

/// The same launch, still running when the recording ended.
fn ran_on(lifecycle: trace::PodLifecycle) -> trace::PodLifecycle {
    trace::PodLifecycle {
        outcome: trace::PodOutcome::Running as i32,
        ..lifecycle
    }
}

fn sequential_job() -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "batch"},
        "spec": {
            "completions": 3, "parallelism": 1,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": "registry.example/batch:1"}]
            }}
        }
    })
}

async fn until_pods(pods: &Api<Pod>, selector: &str, done: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
    wait::until(&format!("pods {selector}"), DEADLINE, || async {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| e.to_string())?;
        if done(&list.items) {
            Ok(list.items)
        } else {
            let phases: Vec<String> = list.items.iter().map(|p| phase(p).to_owned()).collect();
            Err(format!("{phases:?}"))
        }
    })
    .await
    .unwrap()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn annotation(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(LIFETIME_ANNOTATION)
        .map(String::as_str)
}

fn pending(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(LIFETIME_PENDING_ANNOTATION))
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap()
}

fn started(pod: &Pod) -> Timestamp {
    let Time(at) = pod.status.as_ref().unwrap().start_time.clone().unwrap();
    at
}

/// When the pod's container finished, as the virtual node wrote it.
fn finished(pod: &Pod) -> Timestamp {
    let statuses = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap();
    let terminated = statuses[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    let Time(at) = terminated.finished_at.clone().unwrap();
    at
}
