//! The simulation tuning is in force on the local control plane, and the stock plane runs
//! without it: each setting is checked where the component shows it (its metrics, health
//! checks, admission decisions, data directory), on both planes, so that every check could
//! fail. What the settings buy is measured in benchmarks (docs/benchmarks.md), not here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, time::Duration};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use ksim_localenv::{ControlPlane, Setting, Tuning, wait};
use kube::{Api, api::PostParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);

/// What one control plane shows of each setting.
#[derive(Debug, PartialEq)]
struct Shown {
    etcd_fsyncs: bool,
    etcd_on_tmpfs: bool,
    etcd_quota_bytes: f64,
    apiserver_seats: f64,
    privileged_pod_admitted_under_restricted: bool,
    ttl_controller_runs: bool,
    garbage_collector_runs: bool,
    client_qps: Vec<(&'static str, bool)>,
    /// The node lifecycle controller's grace period, from the controller manager's flags.
    node_monitor_grace_seconds: Option<u32>,
}

#[tokio::test(flavor = "multi_thread")]
async fn the_simulation_tuning_is_in_force_and_the_stock_plane_has_none_of_it() {
    let simulation = ControlPlane::start().await.unwrap();
    assert_eq!(simulation.tuning(), &Tuning::simulation());
    let tuned = shown(&simulation).await;
    drop(simulation);
    let stock = ControlPlane::builder()
        .tuning(Tuning::stock())
        .start()
        .await
        .unwrap();
    let plain = shown(&stock).await;

    // etcd: no fsync, data in memory, an 8 GiB quota (the stock one is 2 GiB).
    assert!(
        !tuned.etcd_fsyncs && plain.etcd_fsyncs,
        "{tuned:?} / {plain:?}"
    );
    assert!(tuned.etcd_on_tmpfs && !plain.etcd_on_tmpfs);
    assert_eq!(tuned.etcd_quota_bytes, 8.0 * 1024.0 * 1024.0 * 1024.0);
    assert_eq!(plain.etcd_quota_bytes, 2.0 * 1024.0 * 1024.0 * 1024.0);
    // kube-apiserver: API Priority and Fairness shares out 3,000 + 1,000 seats, not 400 + 200
    // (each priority level's share is rounded up, hence at least).
    assert!(tuned.apiserver_seats >= 4000.0, "{}", tuned.apiserver_seats);
    assert!(plain.apiserver_seats < 1000.0, "{}", plain.apiserver_seats);
    // PodSecurity is off: a privileged pod in a namespace that enforces "restricted" is taken.
    assert!(tuned.privileged_pod_admitted_under_restricted);
    assert!(!plain.privileged_pod_admitted_under_restricted);
    // Controllers: the ttl controller is off, the garbage collector on.
    assert!(!tuned.ttl_controller_runs && plain.ttl_controller_runs);
    assert!(tuned.garbage_collector_runs && plain.garbage_collector_runs);
    // Client QPS: the controller manager's and the scheduler's clients are not throttled.
    assert_eq!(
        tuned.client_qps,
        [("kube-controller-manager", true), ("kube-scheduler", true)]
    );
    assert_eq!(
        plain.client_qps,
        [
            ("kube-controller-manager", false),
            ("kube-scheduler", false)
        ]
    );
    // Node leases: the grace period matches the pools' longer leases; stock keeps its default.
    assert_eq!(
        tuned.node_monitor_grace_seconds,
        Some(ksim_localenv::tuning::NODE_MONITOR_GRACE_SECONDS)
    );
    assert_eq!(plain.node_monitor_grace_seconds, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_setting_can_be_left_out() {
    let control_plane = ControlPlane::builder()
        .tuning(Tuning::simulation().without(Setting::ApiserverAdmission))
        .start()
        .await
        .unwrap();
    let shown = shown(&control_plane).await;
    assert!(!shown.privileged_pod_admitted_under_restricted);
    assert!(
        !shown.etcd_fsyncs && !shown.ttl_controller_runs,
        "{shown:?}"
    );
}

async fn shown(control_plane: &ControlPlane) -> Shown {
    let etcd = control_plane.get("etcd", "/metrics").await.unwrap();
    // A write makes etcd append to its WAL, which it fsyncs unless told not to.
    put_configmap(control_plane).await;
    let etcd_after = control_plane.get("etcd", "/metrics").await.unwrap();
    let fsyncs = |text: &str| metric(text, "etcd_disk_wal_fsync_duration_seconds_count");
    let apiserver = control_plane
        .get("kube-apiserver", "/metrics")
        .await
        .unwrap();
    let health = control_plane
        .get("kube-controller-manager", "/healthz?verbose")
        .await
        .unwrap();
    let mut client_qps = Vec::new();
    let mut node_monitor_grace_seconds = None;
    for (name, pid) in control_plane.pids() {
        if matches!(name, "kube-controller-manager" | "kube-scheduler") {
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
            client_qps.push((
                name,
                cmdline.split('\0').any(|a| a == "--kube-api-qps=5000"),
            ));
            if name == "kube-controller-manager" {
                node_monitor_grace_seconds = cmdline.split('\0').find_map(|arg| {
                    arg.strip_prefix("--node-monitor-grace-period=")?
                        .strip_suffix('s')?
                        .parse()
                        .ok()
                });
            }
        }
    }
    Shown {
        etcd_fsyncs: fsyncs(&etcd_after) > fsyncs(&etcd),
        etcd_on_tmpfs: on_tmpfs(&control_plane.etcd_data_dir().unwrap()),
        etcd_quota_bytes: metric(&etcd, "etcd_server_quota_backend_bytes"),
        apiserver_seats: metric(&apiserver, "apiserver_flowcontrol_nominal_limit_seats"),
        privileged_pod_admitted_under_restricted: privileged_pod_admitted(control_plane).await,
        ttl_controller_runs: health.contains("[+]ttl-controller ok"),
        garbage_collector_runs: health.contains("[+]garbage-collector-controller ok"),
        client_qps,
        node_monitor_grace_seconds,
    }
}

/// The sum of every sample of `name` in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether the longest mount point above `path` is a tmpfs.
fn on_tmpfs(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let point = fields.nth(1)?;
            let kind = fields.next()?;
            path.starts_with(point)
                .then_some((point.len(), kind == "tmpfs"))
        })
        .max()
        .is_some_and(|(_, tmpfs)| tmpfs)
}

async fn put_configmap(control_plane: &ControlPlane) {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(control_plane.client(), "default");
    let name = format!("write-{}", std::process::id());
    let object = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

async fn privileged_pod_admitted(control_plane: &ControlPlane) -> bool {
    let client = control_plane.client();
    let namespace = "restricted";
    let object: Namespace = serde_json::from_value(json!({"metadata": {
        "name": namespace,
        "labels": {"pod-security.kubernetes.io/enforce": "restricted"}
    }}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    // The ServiceAccount admission plugin (kept) refuses pods before their namespace's
    // default ServiceAccount exists.
    wait::default_service_account(&client, namespace, DEADLINE)
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "privileged"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                                 "securityContext": {"privileged": true}}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    // Dry run: admission runs in full and nothing is stored.
    match pods
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.message.contains("violates PodSecurity") => false,
        Err(other) => panic!("the pod was refused for another reason: {other}"),
    }
}
