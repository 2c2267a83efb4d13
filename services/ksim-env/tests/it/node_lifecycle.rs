//! A run that fails nodes has kube-controller-manager's node lifecycle controller run at the
//! replay's speed, over the tuned grace period the environment launched it with.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::core::v1::Node;
use ksim_env::{cluster::Cluster, configuration::Components, grpc::EnvironmentService};
use ksim_localenv::ControlPlane;
use ksim_proto::ksim::env::v1::{self as pb, environment_server::Environment};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use tokio::sync::Mutex;
use tonic::Request;

const KCM: &str = "kube-controller-manager";
const GRACE: &str = "--node-monitor-grace-period=";

/// The running KCM's `--node-monitor-grace-period` values, in the order given.
async fn grace_periods(components: &Mutex<Components>) -> Vec<String> {
    let components = components.lock().await;
    let control_plane = components
        .cluster
        .as_ref()
        .and_then(Cluster::control_plane)
        .unwrap();
    let (_, pid) = control_plane
        .pids()
        .into_iter()
        .find(|(name, _)| *name == KCM)
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    cmdline
        .split(|byte| *byte == 0)
        .filter_map(|arg| std::str::from_utf8(arg).ok()?.strip_prefix(GRACE))
        .map(str::to_owned)
        .collect()
}

fn run(speed: f64) -> Option<pb::Run> {
    Some(pb::Run {
        speed,
        workload_autoscaling: true,
        node_lifecycle: true,
        ..Default::default()
    })
}

fn as_run(applied: &pb::AppliedConfiguration, name: &str) -> Option<String> {
    applied
        .controller_manager_flags
        .iter()
        .find(|flag| flag.name == name)
        .map(|flag| flag.as_run.clone())
}

/// `name` as a node that reported Ready once and holds no lease: found dead one grace period
/// after KCM first sees it. How long that took.
async fn time_to_unknown(nodes: &Api<Node>, name: &str) -> Duration {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let status = serde_json::json!({ "status": { "conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let started = Instant::now();
    // Under the launch flags' 200 s grace (or production's 50 s) it stays Ready past this.
    let deadline = started + Duration::from_secs(40);
    loop {
        let node = nodes.get(name).await.unwrap();
        let ready = node
            .status
            .and_then(|status| status.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|condition| condition.type_ == "Ready")
            .map(|condition| condition.status);
        if ready.as_deref() == Some("Unknown") {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{name} still Ready ({ready:?}) after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn node_failures_run_the_node_lifecycle_controller_at_the_replays_speed() {
    let control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client();
    let dir = tempfile::tempdir().unwrap();
    let components = Arc::new(Mutex::new(Components::new(
        Cluster::Embedded(Box::new(control_plane)),
        "127.0.0.1:1".to_owned(),
        dir.path().join("config"),
    )));
    let service = EnvironmentService::new(Arc::clone(&components));
    // The environment's tuning (`node-leases`).
    assert_eq!(grace_periods(&components).await, ["200s"]);

    let applied = service
        .apply_configuration(Request::new(pb::ApplyConfigurationRequest {
            run: run(10.0),
        }))
        .await
        .unwrap()
        .into_inner()
        .configuration
        .unwrap();
    assert_eq!(
        as_run(&applied, "node-monitor-grace-period").as_deref(),
        Some("5s")
    );
    assert_eq!(as_run(&applied, "node-eviction-rate").as_deref(), Some("1"));
    // Combined with the HPA controller's.
    assert_eq!(
        as_run(&applied, "horizontal-pod-autoscaler-sync-period").as_deref(),
        Some("1.5s")
    );
    // After the launch flags: KCM takes the later.
    assert_eq!(grace_periods(&components).await, ["200s", "5s"]);
    let nodes: Api<Node> = Api::all(client);
    let took = time_to_unknown(&nodes, "fails-at-10x").await;
    assert!(took >= Duration::from_secs(4), "{took:?}");

    // At 1x too: production's 50 s, not the tuned 200 s.
    let applied = service
        .apply_configuration(Request::new(pb::ApplyConfigurationRequest {
            run: run(1.0),
        }))
        .await
        .unwrap()
        .into_inner()
        .configuration
        .unwrap();
    assert_eq!(
        as_run(&applied, "node-monitor-grace-period").as_deref(),
        Some("50s")
    );
    assert_eq!(grace_periods(&components).await, ["200s", "50s"]);

    let restored = service
        .restore_defaults(Request::new(pb::RestoreDefaultsRequest {}))
        .await
        .unwrap()
        .into_inner()
        .configuration
        .unwrap();
    assert!(restored.controller_manager_flags.is_empty(), "{restored:?}");
    assert_eq!(grace_periods(&components).await, ["200s"]);
}
