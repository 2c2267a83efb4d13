//! ARCHITECTURE.md's invariants as functions over a workspace's sources: its packages (`cargo
//! metadata`), each crate's module tree (parsed with `syn`), the module cycles, the domain
//! modules' purity, which crates serve gRPC and the generated list of every module.
//!
//! Each check takes the directory it reads, so its unit tests run it on a small tree planted in
//! a temporary directory and see it fail; the test binary `tests/it` runs them on this
//! workspace. It depends on no ksim crate, so `cargo test -p ksim-architecture` builds no
//! service.

use std::path::PathBuf;

pub mod codemap;
pub mod modules;
pub mod purity;
pub mod servers;
pub mod workspace;

/// Why a check could not read what it checks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not Rust that syn parses: {source}", path.display())]
    Parse { path: PathBuf, source: syn::Error },
    #[error("cargo metadata: {0}")]
    Metadata(String),
}

/// `path`'s text; a check reads only the workspace's own sources and manuals.
fn read(path: &std::path::Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Planted trees for the unit tests: `files` (path, text) written under a temporary directory.
#[cfg(test)]
pub(crate) fn plant(files: &[(&str, &str)]) -> tempfile::TempDir {
    #![allow(clippy::unwrap_used)]
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in files {
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}
