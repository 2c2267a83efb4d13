//! The nodes' kubelet resource endpoints, scraped by the real metrics-server, read back through
//! the apiserver's metrics API; and the endpoints' refusals, checked directly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::{IpAddr, Ipv4Addr},
    path::Path,
    sync::Arc,
    time::Duration,
};

use crate::common::*;
use k8s_openapi::{
    api::core::v1::{Node, Pod},
    jiff::Timestamp,
};
use ksim_localenv::{MetricsServer, pki::CertificateAuthority, wait};
use ksim_vnode::{
    config::{KubeletEndpointConfig, PoolConfig},
    domain::{kubelet_endpoint::PortRange, usage::ContainerUsage},
    pool::{PodUsageUpdate, Pool},
};
use kube::{Api, Client, api::PostParams};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NAMESPACE: &str = "usage";
const POD: &str = "web";
const CPU_NANOCORES: u64 = 250_000_000;
const MEMORY_BYTES: u64 = 96 << 20;

/// A pool serving its nodes' endpoints on loopback, in ports of its own, trusting `ca`.
fn endpoint_config(ca: &Path) -> PoolConfig {
    // Below the ephemeral ports, as the pool's default range is: an outgoing connection can
    // hold one of those for the whole test, and the node's listener then never binds.
    let (first, last) = ksim_localenv::free_port_range(16).unwrap();
    PoolConfig {
        kubelet: KubeletEndpointConfig {
            endpoint: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ports: PortRange { first, last },
            client_ca_file: Some(ca.to_owned()),
        },
        ..pool_config()
    }
}

/// The kubelet endpoint a node advertises: its ExternalIP and its status port.
fn advertised(node: &Node) -> (Option<String>, i32) {
    let status = node.status.as_ref().unwrap();
    let external = status
        .addresses
        .as_ref()
        .unwrap()
        .iter()
        .find(|a| a.type_ == "ExternalIP")
        .map(|a| a.address.clone());
    let port = status
        .daemon_endpoints
        .as_ref()
        .unwrap()
        .kubelet_endpoint
        .as_ref()
        .unwrap()
        .port;
    (external, port)
}

/// One Running pod on the group `workers`, metered as set.
async fn metered_pod(client: &Client, pool: &Pool) {
    create_namespace(client, NAMESPACE).await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": POD, "labels": { "app": POD } },
        "spec": {
            "tolerations": [virtual_toleration()],
            "nodeSelector": { "ksim.io/node-group": "workers" },
            "containers": [{ "name": "app", "image": "registry.example/app:1" }],
        },
    }))
    .unwrap();
    Api::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    pods_in_phase(client, NAMESPACE, "app=web", "Running", 1).await;
    let applied = pool
        .set_pod_usage(
            vec![PodUsageUpdate {
                namespace: NAMESPACE.to_owned(),
                name: POD.to_owned(),
                containers: vec![ContainerUsage {
                    name: "app".to_owned(),
                    cpu_nanocores: CPU_NANOCORES,
                    memory_bytes: MEMORY_BYTES,
                }],
            }],
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(applied.applied, 1);
}

/// A Kubernetes quantity of CPU (in nanocores) or memory (in bytes), as metrics-server writes
/// them: a decimal number with at most one suffix.
fn quantity(text: &str, nano: bool) -> f64 {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().unwrap();
    let scale = match suffix {
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        other => panic!("unexpected quantity suffix {other:?} in {text}"),
    };
    if nano {
        number * scale * 1e9
    } else {
        number * scale
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_server_scrapes_the_usage_set_on_a_pool_pod() {
    let env = control_plane().await;
    let pki = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::create(pki.path(), "kubelet-client-ca").unwrap();
    let client_cert = ca
        .client_cert("metrics-server-client", "system:metrics-server", None)
        .unwrap();
    let config = endpoint_config(ca.cert_file());
    let ports = config.kubelet.ports;
    let pool = start_pool(&env.client, config).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    let nodes = ready_nodes(&env.client, "workers", 1).await;
    let node = nodes[0].metadata.name.clone().unwrap();
    let (external, port) = advertised(&nodes[0]);
    assert_eq!(external.as_deref(), Some("127.0.0.1"));
    assert!(
        (i32::from(ports.first)..=i32::from(ports.last)).contains(&port),
        "{port}"
    );
    metered_pod(&env.client, &pool).await;

    // Scraped at the node's ExternalIP and status port, with the CA's client certificate.
    let metrics_server = MetricsServer::builder(&env.control_plane)
        .metric_resolution(Duration::from_secs(10))
        // It refuses to start with a resolution not above the request timeout (10 s).
        .arg("--kubelet-request-timeout=5s")
        .kubelet_preferred_address_types(&["ExternalIP", "InternalIP", "Hostname"])
        .kubelet_client_certificate(&client_cert.cert, &client_cert.key)
        .start()
        .await
        .unwrap();

    let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods/{POD}");
    let pod_metrics = wait::until("the pod's metrics in the API", DEADLINE, || async {
        let request = http::Request::get(&path).body(Vec::new()).unwrap();
        env.client
            .request::<serde_json::Value>(request)
            .await
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmetrics-server log:\n{}", metrics_server.log_tail()));
    let usage = &pod_metrics["containers"][0]["usage"];
    assert_eq!(pod_metrics["containers"][0]["name"], "app", "{pod_metrics}");
    let cpu = quantity(usage["cpu"].as_str().unwrap(), true);
    let memory = quantity(usage["memory"].as_str().unwrap(), false);
    // metrics-server's rate comes from two cumulative points a scrape apart, each stamped
    // with its own time: exact but for float rounding.
    let expected = CPU_NANOCORES as f64;
    assert!(
        (cpu - expected).abs() <= expected * 0.02,
        "CPU {cpu} nanocores, expected {expected}: {pod_metrics}"
    );
    assert_eq!(memory, MEMORY_BYTES as f64, "{pod_metrics}");

    // The node's figures are its pods' sum.
    let request = http::Request::get(format!("/apis/metrics.k8s.io/v1beta1/nodes/{node}"))
        .body(Vec::new())
        .unwrap();
    let node_metrics: serde_json::Value = env.client.request(request).await.unwrap();
    assert_eq!(
        quantity(node_metrics["usage"]["memory"].as_str().unwrap(), false),
        MEMORY_BYTES as f64,
        "{node_metrics}"
    );
    metrics_server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn endpoints_refuse_callers_without_a_client_certificate_and_follow_restarts() {
    let env = control_plane().await;
    let pki = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::create(pki.path(), "kubelet-client-ca").unwrap();
    let client_cert = ca.client_cert("scraper", "scraper", None).unwrap();
    let other_ca = CertificateAuthority::create_as(pki.path(), "other", "other-ca").unwrap();
    let stranger = other_ca.client_cert("stranger", "stranger", None).unwrap();
    let config = endpoint_config(ca.cert_file());
    let pool = start_pool(&env.client, config.clone()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    let nodes = ready_nodes(&env.client, "workers", 1).await;
    let node = nodes[0].metadata.name.clone().unwrap();
    let (_, port) = advertised(&nodes[0]);
    let port = u16::try_from(port).unwrap();
    metered_pod(&env.client, &pool).await;

    // One listener per node: the worker and the seat host.
    wait::until("a listener per node", DEADLINE, || async {
        match pool.metrics().kubelet_listeners.get() {
            2 => Ok(()),
            n => Err(format!("{n} listeners")),
        }
    })
    .await
    .unwrap();

    let identity = Some((client_cert.cert.as_path(), client_cert.key.as_path()));
    let (status, body) = get(port, "/metrics/resource", identity).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let series = format!(
        r#"container_memory_working_set_bytes{{container="app",namespace="{NAMESPACE}",pod="{POD}"}} {MEMORY_BYTES} "#
    );
    assert!(body.contains(&series), "{body}");
    let (status, _) = get(port, "/stats/summary", identity).await.unwrap();
    assert_eq!(status, 404);
    for (who, identity) in [
        ("no certificate", None),
        (
            "another CA's certificate",
            Some((stranger.cert.as_path(), stranger.key.as_path())),
        ),
    ] {
        let refused = get(port, "/metrics/resource", identity).await;
        assert!(refused.is_err(), "{who} was served: {refused:?}");
    }

    // Restarted without the endpoint: the node advertises a kubelet's default port again.
    drop(pool);
    let plain = PoolConfig {
        kubelet: KubeletEndpointConfig::default(),
        ..config.clone()
    };
    let pool = start_pool(&env.client, plain).await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    assert_eq!(advertised(&nodes.get(&node).await.unwrap()), (None, 10250));
    drop(pool);
    // And with it again: the same port as before, derived from the node's podCIDR.
    let _pool = start_pool(&env.client, config).await;
    assert_eq!(
        advertised(&nodes.get(&node).await.unwrap()),
        (Some("127.0.0.1".to_owned()), i32::from(port))
    );
}

/// One HTTPS GET to 127.0.0.1:`port`, presenting `identity` (certificate, key) if given;
/// the serving certificate is not checked, as metrics-server's `--kubelet-insecure-tls`.
async fn get(
    port: u16,
    path: &str,
    identity: Option<(&Path, &Path)>,
) -> Result<(u16, String), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)));
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(cert).unwrap()],
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|e| e.to_string())?;
    let server = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let mut tls = connector
        .connect(server, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // With TLS 1.3 a refused client certificate shows on the first read.
    tls.read_to_end(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no HTTP response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Accepts any serving certificate, checking only that its signatures are well made.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
