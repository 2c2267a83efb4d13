//! Every kustomization under `deploy/` is accepted by a server-side dry run (admission,
//! validation and defaulting of the real apiserver, nothing stored), and names the images
//! `deploy/images/build.sh` builds. Each service's RBAC is exercised as its ServiceAccount by
//! its own test (`rbac.rs` of the pool, tracer, driver and cloud provider).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use k8s_openapi::api::core::v1::Namespace;
use ksim_localenv::{ControlPlane, ControlPlaneBinaries};
use kube::{Api, api::PostParams};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every directory under `deploy/` with a kustomization.yaml.
fn kustomizations() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        if dir.join("kustomization.yaml").is_file() {
            found.push(dir.to_owned());
        }
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(&deploy_dir(), &mut found);
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn every_kustomization_passes_a_server_side_dry_run() {
    let plane = ControlPlane::start().await.unwrap();
    let kubectl = ControlPlaneBinaries::locate().unwrap().kubectl().unwrap();
    // A dry run stores nothing, so the namespace the kustomizations share must exist already.
    let namespaces: Api<Namespace> = Api::all(plane.client());
    let namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "ksim-system" }
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    // deploy/experiment's namespace, for the same reason.
    let namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "ksim-experiments" }
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();

    let dirs = kustomizations();
    let names: Vec<String> = dirs
        .iter()
        .map(|d| d.strip_prefix(deploy_dir()).unwrap().display().to_string())
        .collect();
    for service in [
        "vnode",
        "tracer",
        "cloudprov",
        "driver",
        "cloudprov/cluster-autoscaler",
        "experiment",
    ] {
        assert!(names.contains(&service.to_owned()), "{names:?}");
    }
    for dir in &dirs {
        let output = Command::new(&kubectl)
            .args(["apply", "--dry-run=server", "-o", "name", "-k"])
            .arg(dir)
            .env("KUBECONFIG", plane.kubeconfig_path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "kubectl apply -k {} --dry-run=server: {}{stdout}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let deployments = stdout
            .lines()
            .filter(|line| line.starts_with("deployment.apps/"))
            .count();
        // A service's kustomization runs it; the experiment's holds accounts and Roles only.
        let expected = usize::from(!dir.ends_with("experiment"));
        assert_eq!(deployments, expected, "{}: {stdout}", dir.display());
    }
}

/// The images build.sh builds, from its `all_images=(...)` line.
fn built_images() -> Vec<String> {
    let script = std::fs::read_to_string(deploy_dir().join("images/build.sh")).unwrap();
    let line = script
        .lines()
        .find_map(|line| line.strip_prefix("all_images=("))
        .unwrap();
    line.trim_end_matches(')')
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_manifests_name_the_images_build_sh_builds() {
    let built = built_images();
    assert_eq!(
        built,
        [
            "ksim-tracer",
            "ksim-vnode",
            "ksim-cloudprov",
            "ksim-driver",
            "ksim",
            "ksim-run"
        ]
    );
    let mut named = Vec::new();
    for dir in kustomizations() {
        let Ok(text) = std::fs::read_to_string(dir.join("deployment.yaml")) else {
            continue;
        };
        for image in text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("image:"))
            .map(str::trim)
        {
            named.push(image.to_owned());
            // Ours, built by the script with its default tag; others are upstream's releases.
            if let Some(name) = image.strip_prefix("ksim/") {
                let (name, tag) = name.split_once(':').unwrap();
                assert!(built.iter().any(|b| b == name), "{image} is not built");
                assert_eq!(tag, "dev", "{image}");
            }
        }
    }
    for service in ["ksim-tracer", "ksim-vnode", "ksim-cloudprov", "ksim-driver"] {
        assert!(
            named.contains(&format!("ksim/{service}:dev")),
            "no manifest runs {service}: {named:?}"
        );
    }
}
