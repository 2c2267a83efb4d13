//! ARCHITECTURE.md's invariants checked against this workspace: one binary that builds no
//! service, run first by `deploy/test.sh`.
//! - `workspace`: the codemap names every crate; the dependency rules between crates.
//! - `modules`: no module cycles; domain modules are pure.
//! - `codemap`: "Every module" lists each module with what it is for.
//! - `docs`: every file the manuals name exists; every manual is a chapter of the book.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use ksim_architecture::workspace::Package;

mod codemap;
mod docs;
mod modules;
mod workspace;

/// The workspace root, resolved, so the paths a failure names read `services/...`, not
/// `crates/ksim-architecture/../../services/...`.
fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The workspace's own packages, by name.
fn packages() -> BTreeMap<String, Package> {
    ksim_architecture::workspace::read(&root()).expect("the workspace's packages")
}

/// Each crate's root file (`lib.rs`, `main.rs` or both), with its package's name.
fn crate_roots() -> Vec<(String, PathBuf)> {
    let mut roots = Vec::new();
    for (name, package) in packages() {
        let src = root().join(&package.dir).join("src");
        for file in ["lib.rs", "main.rs"].map(|f| src.join(f)) {
            if file.is_file() {
                roots.push((name.clone(), file));
            }
        }
    }
    roots
}
