//! The aggregation layer with the real metrics-server (built by deploy/metrics-server/build.sh,
//! which deploy/test.sh runs first): registered as `v1beta1.metrics.k8s.io`, it serves the
//! standard metrics API through the apiserver. Without the binary these tests fail, naming
//! the build script; they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use ksim_localenv::{
    ControlPlane, Error, MetricsServer, MetricsServerBinary, metrics_server::API_SERVICE,
};
use kube::Api;

async fn get_json(client: &kube::Client, path: &str) -> serde_json::Value {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .unwrap_or_else(|error| panic!("GET {path}: {error}"));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("GET {path}: {error}: {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn real_metrics_server_serves_the_metrics_api_through_the_apiserver() {
    // No controller manager or scheduler: the aggregation layer is the apiserver's alone.
    let control_plane = ControlPlane::builder()
        .without_controller_manager()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let metrics_server = MetricsServer::builder(&control_plane)
        .start()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let client = control_plane.client();

    let api_service = Api::<APIService>::all(client.clone())
        .get(API_SERVICE)
        .await
        .unwrap();
    let conditions = api_service.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True"),
        "{conditions:?}"
    );

    let discovery = get_json(&client, "/apis/metrics.k8s.io/v1beta1").await;
    let resources: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{discovery}"))
        .iter()
        .filter_map(|resource| resource["name"].as_str())
        .collect();
    for expected in ["pods", "nodes"] {
        assert!(resources.contains(&expected), "{expected}: {discovery}");
    }

    // No kubelets yet, so no metrics: an empty list, served by metrics-server itself.
    let pods = get_json(&client, "/apis/metrics.k8s.io/v1beta1/pods").await;
    assert_eq!(pods["kind"], "PodMetricsList", "{pods}");
    assert_eq!(pods["apiVersion"], "metrics.k8s.io/v1beta1", "{pods}");
    assert_eq!(pods["items"], serde_json::json!([]), "{pods}");
    let nodes = get_json(&client, "/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!(nodes["kind"], "NodeMetricsList", "{nodes}");

    assert!(
        metrics_server
            .args()
            .iter()
            .any(|arg| arg == "--metric-resolution=15s"),
        "{:?}",
        metrics_server.args()
    );
    metrics_server.stop().await.unwrap();
    let gone = Api::<APIService>::all(client).get_opt(API_SERVICE).await;
    assert!(matches!(gone, Ok(None)), "{gone:?}");
}

/// `false` stands in for metrics-server: it exits at once, which `start` must report as an
/// exit, naming the log file in the control plane's directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_metrics_server_that_exits_is_reported_with_its_log_file() {
    let control_plane = ControlPlane::builder()
        .without_controller_manager()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let err = MetricsServer::builder(&control_plane)
        .binary(MetricsServerBinary::at("/bin/false"))
        .start()
        .await
        .unwrap_err();
    let Error::MetricsServerStart { log, source } = &err else {
        panic!("unexpected error: {err}");
    };
    assert!(matches!(**source, Error::Exited { .. }), "{source}");
    assert_eq!(
        log,
        &control_plane.dir().unwrap().join("metrics-server.log"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&log.display().to_string()),
        "{err}"
    );
}
