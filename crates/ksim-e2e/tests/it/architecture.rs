//! ARCHITECTURE.md's codemap and dependency invariants, checked against the workspace as cargo
//! sees it (`cargo metadata`), so the map cannot drift from the code unnoticed.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

mod codemap;
mod docs;
mod modules;

/// The libraries ARCHITECTURE.md calls pure: no Kubernetes client, no gRPC, no async runtime.
const PURE: [&str; 7] = [
    "ksim-nodes",
    "ksim-trace",
    "ksim-lint",
    "ksim-transform",
    "ksim-synth",
    "ksim-report",
    "ksim-experiment",
];

/// Crates whose codemap entry says which of ours they may depend on, and those.
const ALLOWED: [(&str, &[&str]); 6] = [
    ("ksim-proto", &[]),
    // The runtime knows the generated servers (their message limits), never a service crate.
    ("ksim-grpc", &["ksim-proto"]),
    ("ksim-kube", &["ksim-nodes"]),
    ("ksim-transform", &["ksim-trace", "ksim-nodes"]),
    ("ksim-synth", &["ksim-trace"]),
    ("ksim-lint", &["ksim-trace"]),
];

struct Package {
    /// `crates/<name>` or `services/<name>`.
    dir: String,
    /// Workspace packages it depends on, by kind (`normal`, `dev`, `build`).
    ours: BTreeSet<(String, String)>,
    /// Every dependency it has as a normal one.
    normal: BTreeSet<String>,
    /// Its test targets.
    tests: BTreeSet<String>,
}

/// The workspace root, resolved, so the paths a failure names read `services/...`, not
/// `crates/ksim-e2e/../../services/...`.
fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The workspace's own packages, by name.
fn workspace() -> BTreeMap<String, Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    let root = Path::new(metadata["workspace_root"].as_str().expect("workspace_root"));
    let packages = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest
                .parent()
                .and_then(|d| d.strip_prefix(root).ok())
                .expect("a member below the workspace root")
                .to_string_lossy()
                .into_owned();
            let deps = p["dependencies"].as_array().expect("dependencies");
            let kind = |d: &Value| d["kind"].as_str().unwrap_or("normal").to_owned();
            let ours = deps
                .iter()
                .filter(|d| names.contains(d["name"].as_str().unwrap_or_default()))
                .map(|d| (d["name"].as_str().unwrap_or_default().to_owned(), kind(d)))
                .collect();
            let normal = deps
                .iter()
                .filter(|d| kind(d) == "normal")
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            let tests = p["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .filter(|t| {
                    t["kind"]
                        .as_array()
                        .is_some_and(|k| k.contains(&"test".into()))
                })
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
            let name = p["name"].as_str().expect("name").to_owned();
            (
                name,
                Package {
                    dir,
                    ours,
                    normal,
                    tests,
                },
            )
        })
        .collect()
}

fn is_service(package: &Package) -> bool {
    package.dir.starts_with("services/")
}

#[test]
fn the_codemap_names_every_crate_and_no_other() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    // Each codemap entry opens a paragraph with the crate's directory in bold code.
    let named: BTreeSet<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("**`"))
        .filter_map(|rest| rest.split_once("`**").map(|(dir, _)| dir.to_owned()))
        .filter(|dir| dir.starts_with("crates/") || dir.starts_with("services/"))
        .collect();
    let members: BTreeSet<String> = workspace().into_values().map(|p| p.dir).collect();
    assert_eq!(
        named, members,
        "ARCHITECTURE.md's codemap and the workspace members differ"
    );
    for dir in &members {
        assert!(
            dir.starts_with("crates/") || dir.starts_with("services/"),
            "{dir}: members live in crates/ or services/"
        );
    }
}

#[test]
fn no_service_depends_on_another_and_only_the_e2e_crate_on_services() {
    let packages = workspace();
    let services: BTreeSet<&str> = packages
        .iter()
        .filter(|(_, p)| is_service(p))
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(services.len() >= 5, "services found: {services:?}");
    for (name, package) in &packages {
        let on_services: Vec<&(String, String)> = package
            .ours
            .iter()
            .filter(|(dep, _)| services.contains(dep.as_str()))
            .collect();
        if name == "ksim-e2e" {
            // It starts the services in-process, as dev-dependencies only.
            assert!(
                on_services.iter().all(|(_, kind)| kind == "dev"),
                "{name}: {on_services:?}"
            );
        } else {
            assert!(
                on_services.is_empty(),
                "{name} depends on service crates {on_services:?}; shared code belongs in crates/"
            );
        }
    }
}

#[test]
fn the_codemaps_stated_dependencies_hold() {
    let packages = workspace();
    for name in PURE {
        let package = &packages[name];
        let impure: Vec<&str> = ["kube", "tonic", "tokio"]
            .into_iter()
            .filter(|dep| package.normal.contains(*dep))
            .collect();
        assert!(
            impure.is_empty(),
            "{name} is pure but depends on {impure:?}"
        );
    }
    for (name, allowed) in ALLOWED {
        let ours: BTreeSet<&str> = packages[name]
            .ours
            .iter()
            .filter(|(_, kind)| kind == "normal")
            .map(|(dep, _)| dep.as_str())
            .collect();
        assert!(
            ours.iter().all(|dep| allowed.contains(dep)),
            "{name} depends on {ours:?}; ARCHITECTURE.md allows {allowed:?}"
        );
    }
}

#[test]
fn a_crates_integration_tests_are_one_binary_named_it() {
    for (name, package) in workspace() {
        assert!(
            package.tests.iter().all(|t| t == "it"),
            "{name} has test binaries {:?}: one, tests/it/main.rs, with a module per area",
            package.tests
        );
    }
}
