//! The cluster-autoscaler helper: the command line it really passes, and (with the binary from
//! deploy/cluster-autoscaler/build.sh) a real CA that starts with no provider listening.
//!
//! Tests that need the real binary are `#[ignore]`d and named `real_ca_*`: deploy/test.sh runs
//! them with `--ignored real_ca_` when the binary could be built.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ksim_testenv::{
    CloudConfig, ClusterAutoscaler, ClusterAutoscalerBinary, ClusterAutoscalerBuilder,
    ControlPlane, Error, free_port, wait,
};

const DEADLINE: Duration = Duration::from_secs(120);

/// `echo` stands in for CA: it prints the arguments it was given and exits, which `start` must
/// report as an exit, with the log (the command line) in the error.
#[tokio::test]
async fn start_passes_defaults_overrides_and_files_and_reports_an_early_exit() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let err = ClusterAutoscalerBuilder::new(&kubeconfig, CloudConfig::plaintext("127.0.0.1:1"))
        .binary(ClusterAutoscalerBinary::at("/bin/echo"))
        .arg("--scan-interval=3s")
        .ready_timeout(DEADLINE)
        .start()
        .await
        .unwrap_err();

    let Error::AutoscalerStart { dir: kept, source } = &err else {
        panic!("unexpected error: {err}");
    };
    assert!(matches!(**source, Error::Exited { .. }), "{source}");
    // A failed start keeps its directory for the post-mortem: the log and the cloud-config.
    let log = std::fs::read_to_string(kept.join("cluster-autoscaler.log")).unwrap();
    let cloud_config = kept.join("cloud-config.yaml");
    for expected in [
        "--cloud-provider=externalgrpc".to_owned(),
        format!("--cloud-config={}", cloud_config.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--scan-interval=3s".to_owned(),
        "--leader-elect=false".to_owned(),
    ] {
        assert!(log.contains(&expected), "{expected} missing from: {log}");
    }
    assert!(
        !log.contains("--scan-interval=1s"),
        "default not replaced: {log}"
    );
    assert_eq!(
        std::fs::read_to_string(&cloud_config).unwrap(),
        "address: \"127.0.0.1:1\"\ngrpc_timeout: \"5s\"\n"
    );
    std::fs::remove_dir_all(kept).unwrap();
}

/// CA dials its provider without blocking, so it starts with nothing listening there, fails its
/// loops on the provider calls, and keeps serving its diagnostics.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the cluster-autoscaler binary: deploy/test.sh runs it when deploy/cluster-autoscaler/build.sh built one"]
async fn real_ca_starts_without_a_provider_and_keeps_serving_diagnostics() {
    // Before the control plane, so a missing binary fails at once and names the build script.
    let binary = ClusterAutoscalerBinary::locate().unwrap_or_else(|e| panic!("{e}"));
    let control_plane = ControlPlane::start().await.unwrap();
    let nowhere = format!("127.0.0.1:{}", free_port().unwrap());
    let cloud_config = CloudConfig::plaintext(nowhere);
    let mut ca = ClusterAutoscaler::builder(&control_plane, cloud_config.clone())
        .binary(binary)
        .start()
        .await
        .unwrap();

    assert_eq!(
        std::fs::read_to_string(ca.cloud_config_path()).unwrap(),
        cloud_config.to_yaml()
    );
    // CA logs each failed call to the provider; seeing one proves it read the cloud-config and
    // runs its loop.
    wait::until("a failed provider call in CA's log", DEADLINE, || {
        let seen = ca.log_contains("Error on gRPC call");
        let tail = ca.log_tail();
        async move { if seen { Ok(()) } else { Err(tail) } }
    })
    .await
    .unwrap();

    ca.check_running()
        .unwrap_or_else(|e| panic!("CA exited after failing provider calls: {e}"));
    let (status, body) = ca.get("/health-check").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let metrics = ca.metrics().await.unwrap();
    assert!(
        metrics.contains("cluster_autoscaler_"),
        "no CA metrics at {}",
        ca.metrics_url()
    );
}
