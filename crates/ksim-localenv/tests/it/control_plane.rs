//! Proof that the control plane is real: the controller manager, the scheduler and the
//! garbage collector each do their job against the Go-built binaries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::Pod,
};
use ksim_localenv::{ControlPlane, ControlPlaneBinaries, kubernetes_version, wait};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(120);
const APP: &str = "web";

fn deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": APP, "namespace": "default" },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": APP } },
            "template": {
                "metadata": { "labels": { "app": APP } },
                "spec": { "containers": [{
                    "name": "app",
                    "image": "registry.example/web:1",
                    "resources": { "requests": { "cpu": "100m", "memory": "64Mi" } }
                }] }
            }
        }
    }))
    .unwrap()
}

async fn app_pods(client: &Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("app={APP}")))
        .await
        .map(|list| list.items)
        .unwrap_or_default()
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

#[tokio::test(flavor = "multi_thread")]
async fn controller_manager_turns_a_deployment_into_a_replicaset_and_pending_pods() {
    let control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client();

    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, kubernetes_version());

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment(3))
        .await
        .unwrap();

    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let replica_set = wait::until("a ReplicaSet owned by the Deployment", DEADLINE, || async {
        let list = replica_sets
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|rs| {
                rs.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|owner| owner.kind == "Deployment" && owner.name == APP)
            })
            .ok_or_else(|| "no ReplicaSet yet".to_owned())
    })
    .await
    .unwrap();
    assert_eq!(replica_set.spec.as_ref().unwrap().replicas, Some(3));

    let pods = wait::until("3 Pending pods", DEADLINE, || async {
        let pods = app_pods(&client).await;
        let pending = pods
            .iter()
            .filter(|pod| phase(pod) == Some("Pending"))
            .count();
        if pending == 3 {
            Ok(pods)
        } else {
            Err(format!("{pending} Pending of {}", pods.len()))
        }
    })
    .await
    .unwrap();
    let rs_name = replica_set.metadata.name.unwrap();
    for pod in &pods {
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ReplicaSet", rs_name.as_str())
        );
        // No node exists, so the scheduler must not have bound anything.
        assert_eq!(pod.spec.as_ref().unwrap().node_name, None);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduler_binds_pods_to_a_ready_node() {
    let control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client();
    let node_name = "node-a";
    create_ready_node(&client, node_name).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment(3))
        .await
        .unwrap();

    let bound = wait::until("3 pods bound to the node", DEADLINE, || async {
        let nodes: Vec<String> = app_pods(&client)
            .await
            .iter()
            .filter_map(|pod| pod.spec.as_ref()?.node_name.clone())
            .collect();
        if nodes.len() == 3 {
            Ok(nodes)
        } else {
            Err(format!("bound to {nodes:?}"))
        }
    })
    .await
    .unwrap();
    assert!(bound.iter().all(|node| node == node_name), "{bound:?}");
}

/// A pod for the scheduler profile `scheduler`: only a scheduler running that profile binds it.
fn pod_for(name: &str, scheduler: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default" },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{ "name": "app", "image": "registry.example/web:1" }]
        }
    }))
    .unwrap()
}

async fn bound_node(pods: &Api<Pod>, name: &str) -> String {
    ksim_localenv::pods::bound_node(pods, name, DEADLINE)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_judges_a_configuration_and_runs_the_one_it_accepts() {
    let mut control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client();
    create_ready_node(&client, "node-a").await;
    let kubeconfig = control_plane
        .scheduler_kubeconfig_path()
        .unwrap()
        .to_owned();
    let rate = control_plane.tuning().client_rate();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, given: &str| {
        let text =
            ksim_experiment::scheduler::for_environment(name, given, &kubeconfig, rate).unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

    // Refused by the scheduler's own decoding and by its plugin's validation, with its reason.
    let unknown_field = write(
        "unknown.yaml",
        &format!("{header}profiles:\n- bogusField: 1\n"),
    );
    let bad_strategy = write(
        "strategy.yaml",
        &format!(
            "{header}profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      \
             scoringStrategy:\n        type: Tightest\n"
        ),
    );
    let binaries = control_plane.binaries().clone();
    for (path, reason) in [
        (&unknown_field, "unknown field \"profiles[0].bogusField\""),
        (&bad_strategy, "Unsupported value: \"Tightest\""),
    ] {
        let error = binaries.check_scheduler_config(path).await.unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, ksim_localenv::Error::SchedulerConfig { .. }) && text.contains(reason),
            "{text}"
        );
    }

    // A second profile: pods asking for it are bound only by a scheduler that runs it.
    let packed = write(
        "packed.yaml",
        &format!(
            "{header}profiles:\n- schedulerName: default-scheduler\n- schedulerName: packed\n  \
             pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        \
             type: MostAllocated\n"
        ),
    );
    let as_run = binaries.check_scheduler_config(&packed).await.unwrap();
    assert!(as_run.contains("schedulerName: packed"), "{as_run}");
    assert!(as_run.contains("type: MostAllocated"), "{as_run}");
    let first = control_plane
        .pids()
        .into_iter()
        .find(|(name, _)| *name == "kube-scheduler")
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    control_plane
        .restart_scheduler(Some(&packed))
        .await
        .unwrap();
    let second = control_plane
        .pids()
        .into_iter()
        .find(|(name, _)| *name == "kube-scheduler")
        .unwrap();
    assert_ne!(first, second);
    pods.create(&PostParams::default(), &pod_for("packed-1", "packed"))
        .await
        .unwrap();
    assert_eq!(bound_node(&pods, "packed-1").await, "node-a");
    let log_dir = control_plane.dir().unwrap();
    assert!(log_dir.join("kube-scheduler.previous.log").is_file());

    // Back to the defaults: the default profile still schedules, and the defaults are what runs.
    control_plane.restart_scheduler(None).await.unwrap();
    pods.create(
        &PostParams::default(),
        &pod_for("default-1", "default-scheduler"),
    )
    .await
    .unwrap();
    assert_eq!(bound_node(&pods, "default-1").await, "node-a");
    let args = std::fs::read(format!(
        "/proc/{}/cmdline",
        control_plane
            .pids()
            .into_iter()
            .find(|(name, _)| *name == "kube-scheduler")
            .unwrap()
            .1
    ))
    .unwrap();
    assert!(!String::from_utf8_lossy(&args).contains("--config"));
}

fn command_line(control_plane: &ControlPlane, component: &str) -> (u32, Vec<String>) {
    let pid = control_plane
        .pids()
        .into_iter()
        .find(|(name, _)| *name == component)
        .unwrap()
        .1;
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args = bytes
        .split(|byte| *byte == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    (pid, args)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_manager_restarts_with_extra_flags_over_its_own() {
    const KCM: &str = "kube-controller-manager";
    const SYNC: &str = "--horizontal-pod-autoscaler-sync-period=3s";
    let mut control_plane = ControlPlane::start().await.unwrap();
    let (first_pid, first_args) = command_line(&control_plane, KCM);

    // A value KCM refuses: the error is its own words, and no KCM runs.
    let error = control_plane
        .restart_controller_manager(&["--horizontal-pod-autoscaler-sync-period=soon".into()])
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, ksim_localenv::Error::Exited { .. }) && text.contains("\"soon\""),
        "{text}"
    );
    assert!(!process_exists(first_pid));
    assert!(control_plane.pids().iter().all(|(name, _)| *name != KCM));

    control_plane
        .restart_controller_manager(&[SYNC.to_owned()])
        .await
        .unwrap();
    let (pid, args) = command_line(&control_plane, KCM);
    assert_ne!(pid, first_pid);
    assert!(args.iter().any(|arg| arg == SYNC), "{args:?}");
    // Its launch flags are kept (the secure port aside: each start takes a free one).
    let launch = |args: &[String]| -> Vec<String> {
        args.iter()
            .skip(1)
            .filter(|arg| !arg.starts_with("--secure-port=") && arg.as_str() != SYNC)
            .cloned()
            .collect()
    };
    assert_eq!(launch(&args), launch(&first_args));
    assert!(
        args.iter()
            .any(|arg| arg == "--node-monitor-grace-period=200s"),
        "{args:?}"
    );
    assert!(
        control_plane
            .dir()
            .unwrap()
            .join("kube-controller-manager.previous.log")
            .is_file()
    );
    assert!(control_plane.get(KCM, "/healthz").await.unwrap() == "ok");

    // It still runs the controllers: a Deployment gets its ReplicaSet.
    let client = control_plane.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment(1))
        .await
        .unwrap();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    wait::until("a ReplicaSet", DEADLINE, || async {
        let count = replica_sets
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if count == 1 {
            Ok(())
        } else {
            Err(format!("{count} ReplicaSets"))
        }
    })
    .await
    .unwrap();

    // Extra flags replace the previous restart's rather than add to them.
    control_plane.restart_controller_manager(&[]).await.unwrap();
    let (_, args) = command_line(&control_plane, KCM);
    assert_eq!(launch(&args), launch(&first_args));
    assert!(args.iter().all(|arg| arg != SYNC), "{args:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_deployment_garbage_collects_its_replicaset_and_pods() {
    let control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment(3))
        .await
        .unwrap();
    wait::until("3 pods", DEADLINE, || async {
        let count = app_pods(&client).await.len();
        if count == 3 {
            Ok(())
        } else {
            Err(format!("{count} pods"))
        }
    })
    .await
    .unwrap();

    // Background propagation: the Deployment goes at once and the garbage collector, not the
    // client, removes what it owned.
    deployments
        .delete(APP, &DeleteParams::background())
        .await
        .unwrap();
    wait::until(
        "the ReplicaSet and pods to be collected",
        DEADLINE,
        || async {
            let sets = replica_sets
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let pods = app_pods(&client).await.len();
            if sets.items.is_empty() && pods == 0 {
                Ok(())
            } else {
                Err(format!("{} ReplicaSets, {pods} pods", sets.items.len()))
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_control_plane_kills_exactly_its_processes() {
    let control_plane = ControlPlane::builder()
        .without_scheduler()
        .without_controller_manager()
        .start()
        .await
        .unwrap();
    let pids = control_plane.pids();
    let names: Vec<&str> = pids.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["etcd", "kube-apiserver"]);
    assert!(pids.iter().all(|(_, pid)| process_exists(*pid)));

    drop(control_plane);
    for (name, pid) in pids {
        assert!(!process_exists(pid), "{name} (pid {pid}) still running");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_component_that_fails_to_start_is_reported_with_its_log() {
    let err = ControlPlane::builder()
        .without_scheduler()
        .without_controller_manager()
        .apiserver_arg("--no-such-flag=1")
        .start()
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("kube-apiserver exited"), "{message}");
    assert!(message.contains("no-such-flag"), "{message}");
    if let ksim_localenv::Error::Start { dir, .. } = err {
        assert!(dir.join("kube-apiserver.log").is_file());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn missing_binaries_are_reported_with_the_build_command() {
    let dir = tempfile::tempdir().unwrap();
    let err = ControlPlaneBinaries::in_dir(dir.path().to_owned()).unwrap_err();
    assert!(
        err.to_string().contains("deploy/control-plane/build.sh"),
        "{err}"
    );
}

fn process_exists(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still have one.
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

async fn create_ready_node(client: &Client, name: &str) {
    let capacity = [("cpu", "8"), ("memory", "32Gi"), ("pods", "110")];
    ksim_localenv::nodes::create_ready_node(client, name, &capacity, None)
        .await
        .unwrap();
}
