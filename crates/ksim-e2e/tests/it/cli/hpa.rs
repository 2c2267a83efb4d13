//! An HPA's target as a what-if, as a user runs it (issue 36): `ksim up` records a Deployment
//! whose pods use half their CPU request under an HPA at 50%, and the experiment manual's
//! section "What-if: an HPA's target" runs on that recording as written. With CA sizing the
//! group, the simulated HPA at 25% runs more replicas on more nodes than the recorded target
//! does, and at 100% fewer on fewer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler, core::v1::Namespace,
};
use ksim_localenv::fixtures::{M5_LARGE_SKELETON, Workload, cpu_hpa};
use ksim_proto::ksim::vnode::v1::{self as vnode, virtual_node_pool_client::VirtualNodePoolClient};
use ksim_trace::time::now_ms;
use kube::{Api, api::PostParams};
use serde_json::{Value, json};

use super::common::{
    manual_what_if, run_what_if,
    up::{Up, fast_autoscaler_args},
};

const DEADLINE: Duration = Duration::from_secs(240);
/// How long the test records: the replay at the manual's 2x lasts half as long, enough for
/// the HPA (its sync at 7.5 s, the pool's metrics window of 15 s) to act and CA to follow.
const RECORDING: Duration = Duration::from_secs(100);
/// Each recorded pod of web uses half of its 800m request: two fit an m5.large (1930m).
const USED_MILLICORES: u64 = 400;

#[tokio::test(flavor = "multi_thread")]
async fn the_manuals_hpa_target_what_if_runs_on_a_recording_of_ksim_up() {
    let (files, args) = manual_what_if("an HPA's target.**");
    assert_eq!(
        files
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        ["lower-target.yaml", "higher-target.yaml", "hpa.yaml"]
    );
    // The tracer reads usage every 2 s (the test's setting; 15 s by default); CA with the
    // tests' fast flags as the environment's own.
    let fast = fast_autoscaler_args();
    let up_args: Vec<&str> = fast.iter().map(String::as_str).collect();
    let up = Up::start_with_env(&up_args, &[("KSIM_TRACER_USAGE_INTERVAL", "2s")]);
    let client = up.client().await;
    let mut pool = VirtualNodePoolClient::connect(up.urls.pool.clone())
        .await
        .unwrap();
    pool.create_node_group(vnode::CreateNodeGroupRequest {
        name: "rec".to_owned(),
        node_skeleton_yaml: M5_LARGE_SKELETON.to_owned(),
        count: 2,
        provisioning_json: String::new(),
    })
    .await
    .unwrap();
    let namespace = serde_json::from_value(json!({ "metadata": { "name": "shop" } })).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();

    // The recorded cluster: web's four pods each use 400m of 800m, at its HPA's 50% target.
    let start_ms = now_ms();
    let web: Deployment = serde_json::from_value(
        Workload::new("web", 4)
            .namespace("shop")
            .requests("800m", "64Mi")
            .on_any_group()
            .json(),
    )
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "shop")
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    // Its scale-down window is 10 s, not the 5 minutes of the controller's default: within the
    // replay's 50 s a raised target can only run fewer replicas if the HPA may scale down.
    let mut hpa = cpu_hpa("shop", "web", 50, 12);
    hpa["spec"]["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": 10}});
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(hpa).unwrap();
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), "shop")
        .create(&PostParams::default(), &hpa)
        .await
        .unwrap();
    let pods = ksim_localenv::pods::in_phase(&client, "shop", "app=web", "Running", 4, DEADLINE)
        .await
        .unwrap();
    let usage = pods
        .iter()
        .filter_map(|pod| pod.metadata.name.clone())
        .map(|name| vnode::PodUsage {
            namespace: "shop".to_owned(),
            name,
            containers: vec![vnode::ContainerUsage {
                name: "main".to_owned(),
                cpu_nanocores: USED_MILLICORES * 1_000_000,
                memory_bytes: 32 << 20,
            }],
        })
        .collect();
    let set = pool
        .set_pod_usage(vnode::SetPodUsageRequest { pods: usage })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.applied, 4);
    tokio::time::sleep(RECORDING).await;
    let end_ms = now_ms();
    let (trace, inspected) = up.export_recording(start_ms, end_ms, "shop");
    assert!(inspected.contains("HorizontalPodAutoscaler"), "{inspected}");

    // The manual's files beside the recording, as its paths say.
    let dir = up.state.path().join("what-if");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&trace, dir.join("shop.ktrace")).unwrap();
    std::fs::write(dir.join("skeleton-m5-large.yaml"), M5_LARGE_SKELETON).unwrap();
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let args: Vec<String> = args
        .into_iter()
        .map(|arg| match arg.as_str() {
            "hpa.yaml" => dir.join("hpa.yaml").display().to_string(),
            _ => arg,
        })
        .collect();
    let printed = run_what_if(&up, args).await;
    for figure in [
        "replica_hours",
        "scale_events",
        "node_hours",
        "cost",
        "pending_p99_ms",
        "oom_kills",
        "throttled_cpu_seconds",
    ] {
        assert!(
            printed.lines().any(|line| line.starts_with(figure)),
            "{figure}: {printed}"
        );
    }

    // The directions: the lower target ran more replicas on more nodes, the higher fewer on no
    // more (the assertion above held node-hours; here the comparison's own figures).
    let comparison: Value = serde_json::from_slice(
        &std::fs::read(dir.join("hpa-results").join("comparison.json")).unwrap(),
    )
    .unwrap();
    let figure = |name: &str| -> Vec<f64> {
        comparison["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|figure| figure["name"] == name)
            .map(|figure| {
                figure["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|value| value.as_f64().unwrap_or(f64::NAN))
                    .collect()
            })
            .unwrap()
    };
    let replica_hours = figure("replica_hours");
    assert!(
        replica_hours[1] > replica_hours[0] && replica_hours[2] < replica_hours[0],
        "{replica_hours:?}"
    );
    // Fewer replicas need no more nodes; whether CA removes the one they leave before the
    // trace ends is timing (a run saw it stay), so only the lower target's is strict.
    let node_hours = figure("node_hours");
    assert!(
        node_hours[1] > node_hours[0] && node_hours[2] <= node_hours[0],
        "{node_hours:?}"
    );
    assert_eq!(figure("oom_kills"), [0.0, 0.0, 0.0]);
    // Each run's report: the HPAs decided; the lower target's simulated web ran more than 4.
    let report: Value = serde_json::from_slice(
        &std::fs::read(dir.join("hpa-results/lower/1/report.json")).unwrap(),
    )
    .unwrap();
    let scaling = &report["workload_scaling"];
    assert_eq!(scaling["source"], "hpa", "{scaling}");
    let simulated = scaling["workloads"][0]["simulated"].as_array().unwrap();
    assert!(
        simulated.iter().any(|count| count.as_u64().unwrap() > 4),
        "{scaling}"
    );
    assert!(
        report["configuration"]["controller_manager_flags"]
            .as_array()
            .is_some_and(|flags| !flags.is_empty()),
        "the report lists the HPA controller's flags: {}",
        report["configuration"]
    );
}
