//! The pod start model (`ksim.io/pod-provisioning`): pods wait from bound to Running by their
//! delays, the first pod of an image on a node pays its pull, and the rest share it. Asserted by
//! order and state; the one duration asserted is a lower bound computed from the seeded stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::*;
use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use ksim_localenv::wait;
use ksim_provisioning::{Delay, Draws, MAX_DELAY, PodDelays, PodProvisioning};
use kube::{Api, api::PostParams};
use serde_json::json;

const SEED: u64 = 34;

fn model(start: Delay, first_pull: Delay, speed: f64) -> PodProvisioning {
    PodProvisioning {
        model: "test".to_owned(),
        seed: SEED,
        speed,
        pods: PodDelays { start, first_pull },
    }
}

fn pod(name: &str, image: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name }, "annotations": annotations },
        "spec": {
            "tolerations": [virtual_toleration()],
            "nodeSelector": { "ksim.io/node-group": "workers" },
            "containers": [{ "name": "app", "image": image,
                             "resources": { "requests": { "cpu": "100m" } } }]
        },
    }))
    .unwrap()
}

fn with_model(provisioning: &PodProvisioning) -> serde_json::Value {
    json!({ "ksim.io/pod-provisioning": provisioning.to_json() })
}

/// Creates the pod and returns once the scheduler has bound it, so pods reach the pool in the
/// order the test creates them.
async fn create_bound(pods: &Api<Pod>, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait::until(&format!("{name} to be bound"), DEADLINE, || async {
        let pod = pods.get(&name).await.map_err(|e| e.to_string())?;
        match pod.spec.and_then(|spec| spec.node_name) {
            Some(_) => Ok(()),
            None => Err("not bound".to_owned()),
        }
    })
    .await
    .unwrap();
}

async fn phase(pods: &Api<Pod>, name: &str) -> String {
    let pod = pods.get(name).await.unwrap();
    pod.status.and_then(|s| s.phase).unwrap_or_default()
}

/// Running time: long enough for a wrongly started pod to show as Running.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

fn scheduled_at(pod: &Pod) -> Timestamp {
    let conditions = pod.status.as_ref().unwrap().conditions.as_ref().unwrap();
    let scheduled = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        .unwrap();
    scheduled.last_transition_time.clone().unwrap().0
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_a_start_delay_waits_while_others_on_its_node_run() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");

    let a_day = model(Delay::Fixed(MAX_DELAY), Delay::default(), 1.0);
    create_bound(&pods, pod("slow", "app:1", with_model(&a_day))).await;
    // Unreadable: reported, and the pod starts at once.
    create_bound(
        &pods,
        pod(
            "bad",
            "app:1",
            json!({ "ksim.io/pod-provisioning": r#"{"model":"m","seed":1,"speed":0,"pods":{}}"# }),
        ),
    )
    .await;
    create_bound(&pods, pod("plain", "app:1", json!({}))).await;

    pods_in_phase(&env.client, "default", "app=plain", "Running", 1).await;
    pods_in_phase(&env.client, "default", "app=bad", "Running", 1).await;
    settle().await;
    let slow = pods.get("slow").await.unwrap();
    let status = slow.status.unwrap_or_default();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.start_time, None, "no clock starts before Running");
    assert_eq!(status.pod_ip, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_pod_of_an_image_on_a_node_pulls_it_and_the_others_share_the_pull() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");

    // A few seconds: a start and a first pull drawn from the pod's stream, at speed 2.
    let quick = model(
        Delay::Percentiles {
            p50: Duration::from_secs(1),
            p90: Some(Duration::from_secs(2)),
            p99: None,
        },
        Delay::Samples(vec![Duration::from_secs(4), Duration::from_secs(6)]),
        2.0,
    );
    let mut first = pod("first", "fast:1", with_model(&quick));
    first
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("ksim.io/lifetime-ms".to_owned(), "1000".to_owned());
    create_bound(&pods, first).await;
    let done = pods_in_phase(&env.client, "default", "app=first", "Succeeded", 1).await;

    let mut draws = Draws::new(SEED, "default/first");
    let start = quick.as_run(draws.next(&quick.pods.start));
    let pull = quick.as_run(draws.next(&quick.pods.first_pull));
    let status = done[0].status.as_ref().unwrap();
    let started = status.start_time.clone().unwrap().0;
    let waited = started.duration_since(scheduled_at(&done[0]));
    // Both times are whole seconds, the bind's rounded down.
    assert!(
        waited.as_secs() >= (start + pull).as_secs() as i64,
        "started {waited:?} after bound, drew {start:?} + {pull:?}"
    );
    // Its lifetime counts from Running.
    let terminated = status.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    let ran = terminated.finished_at.unwrap().0.duration_since(started);
    assert!(ran.as_millis() >= 1000, "ended {ran:?} after its start");

    // The image is on the node now: a pod of it that would pull for a day runs.
    let day_pull = model(Delay::default(), Delay::Fixed(MAX_DELAY), 1.0);
    create_bound(&pods, pod("after", "fast:1", with_model(&day_pull))).await;
    pods_in_phase(&env.client, "default", "app=after", "Running", 1).await;

    // A day-long pull of another image; a pod of it that would pull at once waits for it.
    create_bound(&pods, pod("puller", "slow:1", with_model(&day_pull))).await;
    create_bound(&pods, pod("marker", "slow:1", json!({}))).await;
    pods_in_phase(&env.client, "default", "app=marker", "Running", 1).await;
    let no_pull = model(Delay::default(), Delay::default(), 1.0);
    create_bound(&pods, pod("sharer", "slow:1", with_model(&no_pull))).await;
    // The same model with an image the node has never seen: pulled at once, so it runs.
    create_bound(&pods, pod("own", "other:1", with_model(&no_pull))).await;
    pods_in_phase(&env.client, "default", "app=own", "Running", 1).await;
    settle().await;
    assert_eq!(phase(&pods, "puller").await, "Pending");
    assert_eq!(phase(&pods, "sharer").await, "Pending");
    // fast:1, slow:1 and other:1: one pull each.
    assert_eq!(pool.metrics().image_pulls.get(), 3);
}
