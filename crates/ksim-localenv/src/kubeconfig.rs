//! Kubeconfig files that point a client identity at the local apiserver.

use std::path::Path;

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

use crate::{Error, pki::CertFiles};

pub const CONTEXT: &str = "ksim-local";

/// A kubeconfig for `identity` (client certificate) against `server`, trusting `ca`.
pub fn kubeconfig(server: &str, ca: &Path, identity: &CertFiles, user: &str) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: CONTEXT.to_owned(),
            cluster: Some(Cluster {
                server: Some(server.to_owned()),
                certificate_authority: Some(ca.display().to_string()),
                ..Cluster::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.to_owned(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(identity.cert.display().to_string()),
                client_key: Some(identity.key.display().to_string()),
                ..AuthInfo::default()
            }),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: CONTEXT.to_owned(),
            context: Some(Context {
                cluster: CONTEXT.to_owned(),
                user: Some(user.to_owned()),
                ..Context::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(CONTEXT.to_owned()),
        kind: Some("Config".to_owned()),
        api_version: Some("v1".to_owned()),
        ..Kubeconfig::default()
    }
}

pub fn write(config: &Kubeconfig, path: &Path) -> Result<(), Error> {
    let yaml = serde_saphyr::to_string(config).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    std::fs::write(path, yaml).map_err(Error::io("cannot write", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn written_kubeconfig_reads_back_with_the_same_server_and_identity() {
        let dir = tempfile::tempdir().unwrap();
        let identity = CertFiles {
            cert: PathBuf::from("/pki/admin.crt"),
            key: PathBuf::from("/pki/admin.key"),
        };
        let path = dir.path().join("kubeconfig");
        let config = kubeconfig(
            "https://127.0.0.1:6443",
            Path::new("/pki/ca.crt"),
            &identity,
            "admin",
        );
        write(&config, &path).unwrap();

        let read = Kubeconfig::read_from(&path).unwrap();
        assert_eq!(read.current_context.as_deref(), Some(CONTEXT));
        let cluster = read.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/pki/ca.crt")
        );
        let auth = read.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(auth.client_key.as_deref(), Some("/pki/admin.key"));
    }
}
