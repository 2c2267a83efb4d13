//! ARCHITECTURE.md's codemap and the dependency rules between crates, checked against the
//! workspace as cargo sees it (`cargo metadata`), so the map cannot drift from the code
//! unnoticed.

use std::collections::BTreeSet;

use ksim_architecture::workspace::service_dependencies;

use super::{packages as workspace, root};

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
const ALLOWED: [(&str, &[&str]); 8] = [
    ("ksim-proto", &[]),
    // The runtime knows the generated servers (their message limits), never a service crate.
    ("ksim-grpc", &["ksim-proto"]),
    ("ksim-kube", &["ksim-nodes"]),
    ("ksim-transform", &["ksim-trace", "ksim-nodes"]),
    ("ksim-synth", &["ksim-trace"]),
    ("ksim-lint", &["ksim-trace"]),
    // What the CLI and the runs' pods share; no service, no gRPC.
    ("ksim-fanout", &["ksim-kube"]),
    // Builds in seconds because it builds none of ours.
    ("ksim-architecture", &[]),
];

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
    let services = packages.values().filter(|p| p.is_service()).count();
    assert!(services >= 5, "services found: {services}");
    let found = service_dependencies(&packages);
    assert!(
        found.is_empty(),
        "shared code belongs in crates/; only ksim-e2e starts services (dev-dependencies):\n{}",
        found.join("\n")
    );
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
