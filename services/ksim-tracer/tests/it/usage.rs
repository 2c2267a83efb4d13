//! Usage from the metrics API: a cluster that serves none is recorded as such, a tracer told
//! not to read usage says it did not ask, and one reading the real metrics-server through the
//! aggregation layer records usage, still so once metrics-server is gone.

use std::time::Duration;

use crate::common::{DEADLINE, Tracer};
use ksim_localenv::{ControlPlane, MetricsServer, wait};
use ksim_proto::ksim::trace::v1 as pb;

async fn usage_in_export(tracer: &Tracer) -> (pb::UsageRecording, i64, usize) {
    let trace = tracer.export(pb::ExportRequest::default()).await.unwrap();
    let config = trace.header.tracer_config.unwrap();
    (
        config.usage_recording(),
        config.usage_interval_ms,
        trace.usage.len(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_a_metrics_api_is_recorded_without_usage_and_says_so() {
    let control_plane = ControlPlane::start().await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let reading = Tracer::start(
        control_plane.kubeconfig_path(),
        &data.path().join("reading"),
        None,
        &["--usage-interval=1s"],
    )
    .await;
    let off = Tracer::start(
        control_plane.kubeconfig_path(),
        &data.path().join("off"),
        None,
        &["--usage-interval=0s"],
    )
    .await;

    let answered = wait::until("the tracer to find no metrics API", DEADLINE, || async {
        let usage = usage_in_export(&reading).await;
        (usage.0 == pb::UsageRecording::NoMetricsApi)
            .then_some(usage)
            .ok_or(format!("{usage:?}"))
    })
    .await
    .unwrap();
    assert_eq!(answered, (pb::UsageRecording::NoMetricsApi, 1_000, 0));

    // Several of the reading tracer's intervals later, the other has still not asked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        usage_in_export(&off).await,
        (pb::UsageRecording::Unspecified, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serving_the_metrics_api_is_recorded_with_usage() {
    let control_plane = ControlPlane::builder()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let metrics_server = MetricsServer::builder(&control_plane)
        .start()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let data = tempfile::tempdir().unwrap();
    let tracer = Tracer::start(
        control_plane.kubeconfig_path(),
        &data.path().join("tracer"),
        None,
        &["--usage-interval=1s"],
    )
    .await;
    let answered = wait::until("the tracer to read the metrics API", DEADLINE, || async {
        let usage = usage_in_export(&tracer).await;
        (usage.0 == pb::UsageRecording::Recorded)
            .then_some(usage)
            .ok_or(format!("{usage:?}"))
    })
    .await
    .unwrap();
    // No kubelet reports to metrics-server here, so there is nothing to record yet.
    assert_eq!(answered, (pb::UsageRecording::Recorded, 1_000, 0));

    // metrics-server removed: what was recorded stays recorded.
    metrics_server.stop().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        usage_in_export(&tracer).await.0,
        pb::UsageRecording::Recorded
    );
}
