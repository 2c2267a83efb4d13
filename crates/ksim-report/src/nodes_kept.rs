//! Why cluster-autoscaler kept nodes it did not remove: per unremovable reason, the most nodes
//! it counted at once and when it first did, from its gauge
//! `cluster_autoscaler_unremovable_nodes_count{reason}`. The driver folds its samples (see its
//! `domain::nodes_kept`); the report holds the proto's messages as they are; this is their line.
//!
//! Peaks, not node-seconds: CA sets the gauge only for the reasons present in a loop and never
//! clears the others, so a reason's value can be stale; a stale value never rises, so the peak
//! is exact. Cluster-wide: the gauge has no node group label.

use ksim_proto::ksim::driver::v1 as pb;
pub use pb::{NodesKept, NodesKeptReason};

/// A reason's name, or its number where it has none.
fn label(code: u32, name: &str) -> String {
    if name.is_empty() {
        format!("reason {code}")
    } else {
        name.to_owned()
    }
}

/// The summary's line: `BlockedByPod 1, NotUnneededLongEnough 2 (peak per reason,
/// cluster-wide)`, or that CA reported none. Nothing when the run had no autoscaler to read.
pub fn nodes_kept_line(report: &pb::Report) -> Option<String> {
    let kept = report.nodes_kept.as_ref()?;
    if kept.reasons.is_empty() {
        return Some("cluster-autoscaler reported none".to_owned());
    }
    let listed: Vec<String> = kept
        .reasons
        .iter()
        .map(|reason| format!("{} {}", label(reason.code, &reason.name), reason.peak_nodes))
        .collect();
    Some(format!(
        "{} (cluster-autoscaler's peak per reason, cluster-wide)",
        listed.join(", ")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn kept() -> NodesKept {
        NodesKept {
            source: "cluster_autoscaler_unremovable_nodes_count{reason}, cluster-autoscaler 1.35.2"
                .into(),
            reasons: vec![
                NodesKeptReason {
                    code: 11,
                    name: "NotUnderutilized".into(),
                    peak_nodes: 12,
                    first_seen: Some(ksim_proto::json::of_millis(0)),
                },
                NodesKeptReason {
                    code: 99,
                    name: String::new(),
                    peak_nodes: 1,
                    first_seen: Some(ksim_proto::json::of_millis(61_500)),
                },
            ],
        }
    }

    #[test]
    fn the_report_carries_it_into_its_json_proto_and_summary_and_absent_stays_absent() {
        let mut obs = crate::fixtures::observations();
        let report = crate::build(&obs);
        assert_eq!(report.nodes_kept, None);
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("nodes_kept").is_none(), "{json}");
        assert!(!crate::summary(&report).contains("why nodes stayed"));

        obs.nodes_kept = Some(kept());
        let report = crate::build(&obs);
        assert_eq!(report.nodes_kept, Some(kept()));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["nodes_kept"]["reasons"][1]["first_seen_ms"], 61_500);
        let back: crate::Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, report);
        let summary = crate::summary(&report);
        let waits = summary.find("why pods waited").unwrap();
        let kept_at = summary
            .find("  why nodes stayed:  NotUnderutilized 12, reason 99 1 (")
            .unwrap();
        assert!(waits < kept_at, "{summary}");
    }

    #[test]
    fn the_line_names_each_reason_with_its_peak_and_says_none_or_nothing() {
        let mut report = pb::Report::default();
        assert_eq!(nodes_kept_line(&report), None);
        report.nodes_kept = Some(kept());
        assert_eq!(
            nodes_kept_line(&report).unwrap(),
            "NotUnderutilized 12, reason 99 1 (cluster-autoscaler's peak per reason, cluster-wide)"
        );
        report.nodes_kept = Some(NodesKept::default());
        assert_eq!(
            nodes_kept_line(&report).unwrap(),
            "cluster-autoscaler reported none"
        );
    }
}
