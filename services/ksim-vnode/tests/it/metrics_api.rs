//! The pool's own metrics API, read through the real apiserver's aggregation layer as
//! `kubectl top` and the HPA read it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, sync::Arc};

use crate::common::*;
use k8s_openapi::{
    api::core::v1::Pod, kube_aggregator::pkg::apis::apiregistration::v1::APIService,
};
use ksim_kube::aggregation::{advertise_address, available};
use ksim_localenv::wait;
use ksim_vnode::{
    config::MetricsApiConfig,
    domain::usage::ContainerUsage,
    metrics_api::{self, MetricsApiServer},
    pool::{PodUsageUpdate, Pool},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const NAMESPACE: &str = "shop";
const BASE: &str = "/apis/metrics.k8s.io/v1beta1";

/// The metrics API of `pool`, on this machine's own address (the apiserver refuses loopback
/// endpoints), once the aggregator reports its APIService Available.
async fn serve_metrics(client: &Client, pool: &Arc<Pool>) -> MetricsApiServer {
    let ip = advertise_address().expect("a non-loopback IPv4 address for the metrics API");
    let config = MetricsApiConfig {
        addr: Some(SocketAddr::new(ip, 0)),
        ..MetricsApiConfig::default()
    };
    let server =
        metrics_api::start_if_enabled(client.clone(), pool.clone(), "test", "default", &config)
            .await
            .unwrap()
            .expect("an address was given");
    let api_services: Api<APIService> = Api::all(client.clone());
    wait::until(
        "the metrics APIService to be Available",
        DEADLINE,
        || async {
            let api_service = api_services
                .get("v1beta1.metrics.k8s.io")
                .await
                .map_err(|e| e.to_string())?;
            available(&api_service)
        },
    )
    .await
    .unwrap();
    server
}

fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": app } },
        "spec": {
            "tolerations": [virtual_toleration()],
            "nodeSelector": { "ksim.io/node-group": "workers" },
            "containers": [
                { "name": "app", "image": "registry.example/app:1" },
                { "name": "sidecar", "image": "registry.example/sidecar:1" },
            ],
        },
    }))
    .unwrap()
}

fn usage(name: &str, containers: &[(&str, u64, u64)]) -> PodUsageUpdate {
    PodUsageUpdate {
        namespace: NAMESPACE.to_owned(),
        name: name.to_owned(),
        containers: containers
            .iter()
            .map(|(container, cpu_nanocores, memory_bytes)| ContainerUsage {
                name: (*container).to_owned(),
                cpu_nanocores: *cpu_nanocores,
                memory_bytes: *memory_bytes,
            })
            .collect(),
    }
}

async fn get(client: &Client, path: &str) -> Result<Value, kube::Error> {
    client
        .request::<Value>(http::Request::get(path).body(Vec::new()).unwrap())
        .await
}

fn pod_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// kubectl from the control plane's binaries, against its admin kubeconfig.
fn kubectl(env: &Env, args: &[&str]) -> String {
    let kubectl = env.control_plane.binaries().kubectl().unwrap();
    let output = std::process::Command::new(&kubectl)
        .arg(format!(
            "--kubeconfig={}",
            env.control_plane.kubeconfig_path().display()
        ))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {args:?} failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_top_and_the_metrics_api_show_the_usage_set_on_the_pool() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    let node = ready_nodes(&env.client, "workers", 1).await;
    let node = node[0].metadata.name.clone().unwrap();
    let server = serve_metrics(&env.client, &pool).await;

    create_namespace(&env.client, NAMESPACE).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    for (name, app) in [("web-1", "web"), ("db-0", "db")] {
        pods.create(&PostParams::default(), &pod(name, app))
            .await
            .unwrap();
    }
    pods_in_phase(&env.client, NAMESPACE, "app in (web,db)", "Running", 2).await;
    let applied = pool
        .set_pod_usage(
            vec![
                usage(
                    "web-1",
                    &[
                        ("app", 250_000_000, 64 << 20),
                        ("sidecar", 5_000_000, 8 << 20),
                    ],
                ),
                usage("db-0", &[("app", 1_500_000_000, 1 << 30)]),
            ],
            k8s_openapi::jiff::Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(applied.applied, 2);

    // Pod metrics, through the apiserver, as metrics-server would print them.
    let list = get(&env.client, &format!("{BASE}/namespaces/{NAMESPACE}/pods"))
        .await
        .unwrap();
    assert_eq!(list["kind"], "PodMetricsList");
    assert_eq!(pod_names(&list), ["db-0", "web-1"]);
    assert_eq!(
        list["items"][1]["containers"],
        json!([
            {"name": "app", "usage": {"cpu": "250m", "memory": "64Mi"}},
            {"name": "sidecar", "usage": {"cpu": "5m", "memory": "8Mi"}},
        ])
    );
    assert_eq!(list["items"][1]["window"], "15s");
    assert_eq!(list["items"][1]["metadata"]["labels"]["app"], "web");

    // The labels come from the pod watch, which may lag the pods' creation by a moment.
    wait::until("a label selector to pick web-1", DEADLINE, || async {
        let web = get(
            &env.client,
            &format!("{BASE}/namespaces/{NAMESPACE}/pods?labelSelector=app%3Dweb"),
        )
        .await
        .map_err(|e| e.to_string())?;
        match pod_names(&web).as_slice() {
            [only] if only == "web-1" => Ok(()),
            other => Err(format!("selected {other:?}")),
        }
    })
    .await
    .unwrap();

    // A node's usage is the sum of its pods'.
    let node_metrics = get(&env.client, &format!("{BASE}/nodes/{node}"))
        .await
        .unwrap();
    assert_eq!(node_metrics["kind"], "NodeMetrics");
    assert_eq!(
        node_metrics["usage"],
        json!({"cpu": "1755m", "memory": "1096Mi"})
    );
    let missing = get(
        &env.client,
        &format!("{BASE}/namespaces/{NAMESPACE}/pods/nope"),
    )
    .await;
    assert_eq!(
        missing.as_ref().err().and_then(ksim_kube::status_code),
        Some(404),
        "{missing:?}"
    );

    // kubectl top, unchanged, reads it through the aggregation layer.
    let top = kubectl(&env, &["top", "pod", "-n", NAMESPACE, "--no-headers"]);
    let rows: Vec<Vec<&str>> = top
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["db-0", "1500m", "1024Mi"],
            vec!["web-1", "255m", "72Mi"]
        ],
        "{top}"
    );
    let top_nodes = kubectl(&env, &["top", "node", &node, "--no-headers"]);
    assert!(
        top_nodes.starts_with(&node) && top_nodes.contains("1755m"),
        "{top_nodes}"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn callers_without_the_front_proxy_certificate_or_rbac_are_refused() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    let server = serve_metrics(&env.client, &pool).await;

    // A user the apiserver authenticates but RBAC does not allow: the pool's
    // SubjectAccessReview says no, and the apiserver passes the 403 on.
    let jane = env
        .control_plane
        .client_as("jane", &["system:authenticated"])
        .await
        .unwrap();
    let denied = get(&jane, &format!("{BASE}/namespaces/default/pods")).await;
    assert_eq!(
        denied.as_ref().err().and_then(ksim_kube::status_code),
        Some(403),
        "{denied:?}"
    );
    let message = match &denied {
        Err(kube::Error::Api(status)) => status.message.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        message.contains("\"jane\"") && message.contains("metrics.k8s.io"),
        "{message}"
    );
    // The admin is allowed the same request.
    get(&env.client, &format!("{BASE}/namespaces/default/pods"))
        .await
        .unwrap();

    // Straight to the pool, with no client certificate: 401, whatever the headers claim.
    let reply = direct_get(&env.client, &server, "/apis/metrics.k8s.io/v1beta1/pods").await;
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
    assert!(reply.contains("\"kind\":\"Status\""), "{reply}");
}

/// A GET sent to the pool itself, trusting its serving CA (the APIService's caBundle) but
/// presenting no client certificate, claiming to be the admin in the front-proxy header.
async fn direct_get(client: &Client, server: &MetricsApiServer, path: &str) -> String {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let api_service = Api::<APIService>::all(client.clone())
        .get("v1beta1.metrics.k8s.io")
        .await
        .unwrap();
    let ca = api_service.spec.unwrap().ca_bundle.unwrap().0;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.advertised_addr())
        .await
        .unwrap();
    let name = ServerName::try_from(server.aggregated_api().service_dns()).unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: pool\r\nX-Remote-User: admin\r\n\
         X-Remote-Group: system:masters\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    tls.read_to_string(&mut reply).await.unwrap();
    reply
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_service_another_component_owns_is_not_taken_over() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    let theirs = json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {
            "group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
            "insecureSkipTLSVerify": true,
        },
    });
    Api::<APIService>::all(env.client.clone())
        .patch(
            "v1beta1.metrics.k8s.io",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
    let ip = advertise_address().expect("a non-loopback IPv4 address");
    let config = MetricsApiConfig {
        addr: Some(SocketAddr::new(ip, 0)),
        ..MetricsApiConfig::default()
    };
    let err = metrics_api::start_if_enabled(env.client.clone(), pool, "test", "default", &config)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("v1beta1.metrics.k8s.io")
            && message.contains("kube-system/metrics-server"),
        "{message}"
    );
    // Nothing of the pool's was registered in its place.
    let api_service = Api::<APIService>::all(env.client.clone())
        .get("v1beta1.metrics.k8s.io")
        .await
        .unwrap();
    assert_eq!(
        api_service.spec.unwrap().service.unwrap().name.as_deref(),
        Some("metrics-server")
    );
}
