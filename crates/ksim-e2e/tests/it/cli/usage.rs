//! Usage end to end, as a user gets it (issue 36): `ksim up` serves the metrics API (the pool's),
//! pods there use what this test sets, the tracer records it, `ksim trace export` keeps it, and
//! in `ksim run` of that recording `kubectl top` shows the replayed pods using what the
//! recorded ones did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{process::Command, time::Duration};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Namespace};
use ksim_localenv::fixtures::{M5_LARGE_SKELETON, Workload};
use ksim_localenv::wait;
use ksim_proto::ksim::vnode::v1::{self as vnode, virtual_node_pool_client::VirtualNodePoolClient};
use ksim_trace::time::now_ms;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use serde_json::json;

use super::common::up::{Up, ksim_in};

const DEADLINE: Duration = Duration::from_secs(240);
/// The recorded pods' CPU, millicores, in the order the pods are listed by name.
const CPU: [u64; 2] = [200, 300];

/// `kubectl top pod -n NAMESPACE`: CPU millicores per pod whose name starts with `prefix`.
fn top(up: &Up, namespace: &str, prefix: &str) -> Result<Vec<u64>, String> {
    let kubectl = ksim_localenv::ControlPlaneBinaries::locate()
        .and_then(|binaries| binaries.kubectl())
        .map_err(|error| error.to_string())?;
    let output = Command::new(kubectl)
        .args(["--kubeconfig", up.kubeconfig().to_str().unwrap()])
        .args(["top", "pod", "-n", namespace, "--no-headers"])
        .output()
        .map_err(|error| error.to_string())?;
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "{printed}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let mut cpu: Vec<u64> = printed
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter_map(|cpu| cpu.strip_suffix('m')?.parse().ok())
        .collect();
    cpu.sort_unstable();
    Ok(cpu)
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_top_in_a_replay_shows_what_the_recorded_pods_used() {
    // The tracer reads usage every 2 s (the test's setting; 15 s by default).
    let up = Up::start_with_env(&[], &[("KSIM_TRACER_USAGE_INTERVAL", "2s")]);
    let client = up.client().await;
    let mut pool = VirtualNodePoolClient::connect(up.urls.pool.clone())
        .await
        .unwrap();
    pool.create_node_group(vnode::CreateNodeGroupRequest {
        name: "rec".to_owned(),
        node_skeleton_yaml: M5_LARGE_SKELETON.to_owned(),
        count: 1,
        provisioning_json: String::new(),
    })
    .await
    .unwrap();
    let namespace = serde_json::from_value(json!({ "metadata": { "name": "shop" } })).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let start_ms = now_ms();
    let web: Deployment = serde_json::from_value(
        Workload::new("web", 2)
            .namespace("shop")
            .on_any_group()
            .json(),
    )
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "shop")
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let pods = ksim_localenv::pods::in_phase(&client, "shop", "app=web", "Running", 2, DEADLINE)
        .await
        .unwrap();
    let mut names: Vec<String> = pods
        .iter()
        .filter_map(|pod| pod.metadata.name.clone())
        .collect();
    names.sort();

    // The recorded cluster's load: what the pool's kubelets say these pods use.
    let usage = names
        .iter()
        .zip(CPU)
        .map(|(name, millicores)| vnode::PodUsage {
            namespace: "shop".to_owned(),
            name: name.clone(),
            containers: vec![vnode::ContainerUsage {
                name: "main".to_owned(),
                cpu_nanocores: millicores * 1_000_000,
                memory_bytes: 64 << 20,
            }],
        })
        .collect();
    let set = pool
        .set_pod_usage(vnode::SetPodUsageRequest { pods: usage })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.applied, 2);
    // The metrics API of the environment serves it, as metrics-server would.
    wait::until(
        "kubectl top to show the recorded load",
        DEADLINE,
        || async {
            match top(&up, "shop", "web-")? {
                cpu if cpu == CPU => Ok(()),
                cpu => Err(format!("{cpu:?}")),
            }
        },
    )
    .await
    .unwrap();
    // A few of the tracer's reads.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let end_ms = now_ms();

    let (trace, inspected) = up.export_recording(start_ms, end_ms, "shop");
    assert!(
        inspected.contains("samples of 2 pods, read every 2s"),
        "{inspected}"
    );
    let shown = up.ksim(&["trace", "show", trace.to_str().unwrap(), "--usage"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(" 200.0 ") && shown.contains(" 300.0 "),
        "{shown}"
    );

    // The replay: its pods use what the recorded ones did, as `kubectl top` reads it.
    let skeleton = up.state.path().join("m5.yaml");
    std::fs::write(&skeleton, M5_LARGE_SKELETON).unwrap();
    let args: Vec<String> = [
        "run",
        trace.to_str().unwrap(),
        "--driver",
        &up.urls.driver,
        "--speed",
        "1",
        "--namespace-prefix",
        "replay",
        "--node-group",
        &format!("sim={}:1", skeleton.display()),
    ]
    .map(str::to_owned)
    .to_vec();
    let state = up.state.path().to_owned();
    let run = tokio::task::spawn_blocking(move || ksim_in(&state, &args));
    let seen = wait::until("kubectl top of the replay", DEADLINE, || async {
        match top(&up, "replay-shop", "web-")? {
            cpu if cpu == CPU => Ok(cpu),
            cpu => Err(format!("{cpu:?}")),
        }
    })
    .await;
    let run = run.await.unwrap();
    let printed = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(seen.unwrap(), CPU);
    assert!(
        printed.contains("usage:             replayed every 2s from"),
        "{printed}"
    );
    let left = Api::<Deployment>::namespaced(client.clone(), "replay-shop")
        .list(&ListParams::default())
        .await
        .map(|list| list.items.len())
        .unwrap_or(0);
    assert_eq!(left, 0, "the replay cleaned up");
}
