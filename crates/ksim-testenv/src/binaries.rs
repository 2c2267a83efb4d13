//! Finds the Go-built control-plane binaries that deploy/control-plane/build.sh caches.

use std::path::{Path, PathBuf};

use crate::Error;

const VERSIONS_ENV: &str = include_str!("../../../deploy/control-plane/versions.env");

/// The Kubernetes version pinned in deploy/control-plane/versions.env, e.g. `v1.35.4`.
pub fn kubernetes_version() -> &'static str {
    VERSIONS_ENV
        .lines()
        .find_map(|line| line.trim().strip_prefix("KUBERNETES_VERSION="))
        .map(str::trim)
        .unwrap_or("unknown")
}

/// Directory holding etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
#[derive(Debug, Clone)]
pub struct ControlPlaneBinaries {
    dir: PathBuf,
}

impl ControlPlaneBinaries {
    pub const NAMES: [&'static str; 4] = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ];

    /// `KSIM_CONTROL_PLANE_BIN_DIR` if set (binaries a user already has), otherwise the cache
    /// that build.sh fills for the pinned version.
    pub fn locate() -> Result<Self, Error> {
        let dir = match std::env::var_os("KSIM_CONTROL_PLANE_BIN_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => cache_root()?
                .join(format!("k8s-{}", kubernetes_version()))
                .join("bin"),
        };
        Self::in_dir(dir)
    }

    pub fn in_dir(dir: PathBuf) -> Result<Self, Error> {
        for binary in Self::NAMES {
            if !dir.join(binary).is_file() {
                return Err(Error::MissingBinary { binary, dir });
            }
        }
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, binary: &str) -> PathBuf {
        self.dir.join(binary)
    }
}

/// The same cache root build.sh uses.
pub fn cache_root() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("KSIM_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").ok_or(Error::NoCacheDir)?).join(".cache"),
    };
    Ok(base.join("ksim"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minor(version: &str) -> Option<u32> {
        version.strip_prefix("v1.")?.split('.').next()?.parse().ok()
    }

    #[test]
    fn the_pinned_version_is_a_kubernetes_release() {
        assert!(
            minor(kubernetes_version()).is_some(),
            "{}",
            kubernetes_version()
        );
    }

    #[test]
    // Exactly one of the macros expands, which clippy cannot see.
    #[allow(clippy::vec_init_then_push)]
    fn k8s_openapi_feature_matches_the_pinned_minor() {
        let mut enabled = Vec::new();
        k8s_openapi::k8s_if_1_33! { enabled.push(33); }
        k8s_openapi::k8s_if_1_34! { enabled.push(34); }
        k8s_openapi::k8s_if_1_35! { enabled.push(35); }
        k8s_openapi::k8s_if_1_36! { enabled.push(36); }
        k8s_openapi::k8s_if_1_37! { enabled.push(37); }
        assert_eq!(
            enabled,
            minor(kubernetes_version()).into_iter().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_directory_without_binaries_names_the_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let err = ControlPlaneBinaries::in_dir(dir.path().to_owned()).unwrap_err();
        assert!(err.to_string().contains("binary etcd not found"), "{err}");
    }
}
