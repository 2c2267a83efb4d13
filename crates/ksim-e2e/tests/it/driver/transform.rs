//! A transformed trace replays as its rules say: doubling replicas doubles the replayed peak.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::*;
use ksim_proto::ksim::driver::v1 as pb;

const RULES: &str = r#"
rules:
  - name: traffic doubles
    match: 'kind == "Deployment" && ns == "shop"'
    scaleReplicas: 2
"#;

#[tokio::test(flavor = "multi_thread")]
async fn doubling_replicas_doubles_the_replayed_peak_pods() {
    let mut mesh = start().await;
    // 3 pods, then 2: the peak is the first 3, held long enough to be sampled.
    let recorded = trace_file(
        vec![
            (
                0,
                vec![(
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 3).json(),
                )],
            ),
            (
                15_000,
                vec![(
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 2).json(),
                )],
            ),
        ],
        25_000,
    );
    let rules = ksim_transform::Rules::parse(RULES).unwrap();
    let (doubled, summary) =
        ksim_transform::transform_trace(&rules, recorded.as_slice(), Vec::new(), "test").unwrap();
    assert_eq!(summary.stats.objects_changed, 2);
    let header = ksim_trace::read_trace(&doubled).unwrap().header;
    assert_eq!(header.transforms.len(), 1, "{header:?}");

    let mut peaks = Vec::new();
    for file in [recorded, doubled] {
        let simulation = mesh
            .start_simulation(pb::SimulationSpec {
                trace_source: uploaded(file),
                speed: 1.0,
                node_groups: vec![pool_group("sim", 3)],
                ..Default::default()
            })
            .await
            .unwrap();
        let ended = mesh.until_done(&simulation.id).await;
        assert_eq!(
            ended.state(),
            pb::SimulationState::Succeeded,
            "{}",
            ended.error_message
        );
        let report = mesh.report(&simulation.id).await;
        let peak = report
            .timeline
            .iter()
            .map(|bucket| bucket.pods.unwrap_or_default().running)
            .max()
            .unwrap();
        let last = report.timeline.last().unwrap().pods.unwrap_or_default();
        peaks.push((peak, last.running));
        mesh.assert_nothing_left(&simulation.id, &["sim"]).await;
    }
    assert_eq!(
        peaks,
        [(3, 2), (6, 4)],
        "(peak, last) running pods: recorded, doubled"
    );
}
