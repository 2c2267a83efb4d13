//! The cluster-autoscaler helper: the command line it really passes, and a real CA (built by
//! deploy/cluster-autoscaler/build.sh, which deploy/test.sh runs first) that starts with no
//! provider listening. Tests that need the real binary are named `real_ca_*`; without the
//! binary they fail, naming the build script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ksim_localenv::{
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
        .fast()
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

/// Every flag ksim divides by the replay speed exists in the releases it is tested with (bar
/// one that 1.34.5 does not have yet), so none is dilated by a name CA never reads; the
/// binary's own flag list is what a user's unknown flag is judged by.
#[test]
fn real_ca_knows_every_flag_ksim_dilates() {
    let versions = ksim_localenv::autoscaler::tested_cluster_autoscaler_versions();
    assert!(versions.contains(&"1.35.2"), "{versions:?}");
    for version in versions {
        let binary =
            ClusterAutoscalerBinary::locate_release(version).unwrap_or_else(|e| panic!("{e}"));
        let known = binary.flags().unwrap();
        assert!(known.contains("expander"), "{version}: {known:?}");
        assert!(!known.contains("expandr"));
        for flag in ksim_experiment::autoscaler::dilated_flags() {
            if version == "1.34.5" && flag == "max-node-startup-time" {
                assert!(
                    !known.contains(flag),
                    "1.34.5 gained {flag}: drop the exception"
                );
                continue;
            }
            assert!(known.contains(flag), "CA {version} has no --{flag}");
        }
    }
}

/// Every flag of every tested release is a reviewed choice: allowed for a run (it changes CA's
/// decisions) or refused with a reason (where CA writes, whom it talks to, who it is). A flag a
/// new release adds fails here until it is put in one of the two lists of
/// `ksim_experiment::autoscaler::policy`, and a listed flag no tested release knows is stale.
#[test]
fn real_ca_flags_are_each_allowed_or_refused() {
    use ksim_experiment::autoscaler::policy::{ALLOWED, REFUSED, REFUSED_PREFIXES};

    let mut known_anywhere = std::collections::BTreeSet::new();
    let mut unreviewed = Vec::new();
    for version in ksim_localenv::autoscaler::tested_cluster_autoscaler_versions() {
        let binary =
            ClusterAutoscalerBinary::locate_release(version).unwrap_or_else(|e| panic!("{e}"));
        for flag in binary.flags().unwrap() {
            let listed = ALLOWED.contains(&flag.as_str())
                || REFUSED
                    .iter()
                    .any(|(_, names)| names.contains(&flag.as_str()))
                || REFUSED_PREFIXES
                    .iter()
                    .any(|(_, prefix)| flag.starts_with(prefix));
            if !listed {
                unreviewed.push(format!("{version}: --{flag}"));
            }
            known_anywhere.insert(flag);
        }
    }
    assert!(
        unreviewed.is_empty(),
        "flags in neither ALLOWED nor REFUSED (decide, in \
         crates/ksim-experiment/src/autoscaler/policy.rs): {unreviewed:#?}"
    );
    let mut stale: Vec<&str> = ALLOWED
        .iter()
        .chain(REFUSED.iter().flat_map(|(_, names)| names.iter()))
        .copied()
        .filter(|flag| !known_anywhere.contains(*flag))
        .collect();
    stale.extend(
        REFUSED_PREFIXES
            .iter()
            .map(|(_, prefix)| *prefix)
            .filter(|prefix| !known_anywhere.iter().any(|flag| flag.starts_with(prefix))),
    );
    assert!(
        stale.is_empty(),
        "listed, but no tested release has them: {stale:?}"
    );
}

/// CA dials its provider without blocking, so it starts with nothing listening there, fails its
/// loops on the provider calls, and keeps serving its diagnostics.
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_starts_without_a_provider_and_keeps_serving_diagnostics() {
    // Before the control plane, so a missing binary fails at once and names the build script.
    let binary = ClusterAutoscalerBinary::locate().unwrap_or_else(|e| panic!("{e}"));
    let control_plane = ControlPlane::start().await.unwrap();
    let nowhere = format!("127.0.0.1:{}", free_port().unwrap());
    let cloud_config = CloudConfig::plaintext(nowhere);
    let mut ca = ClusterAutoscaler::builder(&control_plane, cloud_config.clone())
        .fast()
        .binary(binary)
        .arg("--scale-down-unneeded-time=2m")
        .speed(10.0)
        .start()
        .await
        .unwrap();
    // At 10x, the given 2 minutes of recorded time run as 12 s.
    assert!(
        ca.args()
            .iter()
            .any(|arg| arg == "--scale-down-unneeded-time=12s"),
        "{:?}",
        ca.args()
    );

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

/// deploy/cluster-autoscaler/build.sh with `source` as KSIM_CLUSTER_AUTOSCALER_SOURCE and an
/// empty cache: its exit status and stderr.
fn build_script(source: &std::path::Path) -> (Option<i32>, String) {
    let cache = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/cluster-autoscaler/build.sh");
    let output = std::process::Command::new(script)
        .env("KSIM_CACHE_DIR", cache.path())
        .env("KSIM_CLUSTER_AUTOSCALER_SOURCE", source)
        .env_remove("KSIM_CLUSTER_AUTOSCALER_BIN_DIR")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The pinned sums, as build.sh reads them from versions.env.
fn pinned_sum(fact: &str) -> String {
    let version = ksim_localenv::autoscaler::cluster_autoscaler_version().replace('.', "_");
    let key = format!("CLUSTER_AUTOSCALER_{version}_{fact}=");
    include_str!("../../../../deploy/cluster-autoscaler/versions.env")
        .lines()
        .find_map(|line| line.strip_prefix(&key))
        .unwrap()
        .to_owned()
}

#[test]
fn the_build_refuses_a_source_archive_or_tree_whose_checksum_differs() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("tampered.tar.gz");
    std::fs::write(&archive, b"not the release").unwrap();
    let (status, stderr) = build_script(&archive);
    assert_eq!(status, Some(1), "{stderr}");
    // Both sums are named: the archive's and the pinned one.
    assert!(
        stderr.contains("has SHA-256 ") && stderr.contains(&pinned_sum("ARCHIVE_SHA256")),
        "{stderr}"
    );

    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(
        tree.join("go.mod"),
        "module k8s.io/autoscaler/cluster-autoscaler\n",
    )
    .unwrap();
    let (status, stderr) = build_script(&tree);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("(as a tree) has SHA-256 ") && stderr.contains(&pinned_sum("TREE_SHA256")),
        "{stderr}"
    );
}
