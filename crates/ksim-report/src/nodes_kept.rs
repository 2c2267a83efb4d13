//! Why cluster-autoscaler kept nodes it did not remove: per unremovable reason, the most nodes
//! it counted at once and when it first did, from its gauge
//! `cluster_autoscaler_unremovable_nodes_count{reason}`. The driver folds its samples (see its
//! `domain::nodes_kept`); this is the report's form of the result, both ways, and its line.
//!
//! Peaks, not node-seconds: CA sets the gauge only for the reasons present in a loop and never
//! clears the others, so a reason's value can be stale; a stale value never rises, so the peak
//! is exact. Cluster-wide: the gauge has no node group label.

use serde::{Deserialize, Serialize};

use ksim_proto::ksim::driver::v1 as pb;

use super::proto::{duration_from_proto, duration_to_proto};
use super::timeline::millis;

/// Why cluster-autoscaler kept nodes, as the report holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodesKept {
    /// Where the figures were read: the metric and the CA release.
    pub source: String,
    /// One per reason CA reported during the replay, most nodes first.
    pub reasons: Vec<NodesKeptReason>,
}

/// One of cluster-autoscaler's unremovable reasons during the replay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodesKeptReason {
    /// CA's number for it (`simulator.UnremovableReason`).
    pub code: u32,
    /// CA's name for it; empty for a number the tested releases do not define.
    pub name: String,
    /// Most nodes CA counted with it at once.
    pub peak_nodes: u64,
    /// First sample showing it, since the replay start, recorded time.
    pub first_seen_ms: u64,
}

/// A reason's name, or its number where it has none.
fn label(code: u32, name: &str) -> String {
    if name.is_empty() {
        format!("reason {code}")
    } else {
        name.to_owned()
    }
}

impl NodesKept {
    pub fn to_proto(&self) -> pb::NodesKept {
        pb::NodesKept {
            source: self.source.clone(),
            reasons: self
                .reasons
                .iter()
                .map(|reason| pb::NodesKeptReason {
                    code: reason.code,
                    name: reason.name.clone(),
                    peak_nodes: reason.peak_nodes,
                    first_seen: Some(duration_to_proto(std::time::Duration::from_millis(
                        reason.first_seen_ms,
                    ))),
                })
                .collect(),
        }
    }

    pub fn from_proto(kept: &pb::NodesKept) -> Self {
        Self {
            source: kept.source.clone(),
            reasons: kept
                .reasons
                .iter()
                .map(|reason| NodesKeptReason {
                    code: reason.code,
                    name: reason.name.clone(),
                    peak_nodes: reason.peak_nodes,
                    first_seen_ms: millis(duration_from_proto(reason.first_seen.as_ref())),
                })
                .collect(),
        }
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
                    first_seen_ms: 0,
                },
                NodesKeptReason {
                    code: 99,
                    name: String::new(),
                    peak_nodes: 1,
                    first_seen_ms: 61_500,
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
        assert!(!crate::summary(&report.to_proto()).contains("why nodes stayed"));

        obs.nodes_kept = Some(kept());
        let report = crate::build(&obs);
        assert_eq!(report.nodes_kept, Some(kept()));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["nodes_kept"]["reasons"][1]["first_seen_ms"], 61_500);
        let back: crate::Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, report);
        let proto = report.to_proto();
        assert_eq!(crate::Report::from_proto(&proto), report);
        let summary = crate::summary(&proto);
        let waits = summary.find("why pods waited").unwrap();
        let kept_at = summary
            .find("  why nodes stayed:  NotUnderutilized 12, reason 99 1 (")
            .unwrap();
        assert!(waits < kept_at, "{summary}");
    }

    #[test]
    fn round_trips_through_the_proto() {
        let proto = kept().to_proto();
        assert_eq!(
            proto.reasons[1].first_seen,
            Some(prost_types::Duration {
                seconds: 61,
                nanos: 500_000_000
            })
        );
        assert_eq!(NodesKept::from_proto(&proto), kept());
    }

    #[test]
    fn the_line_names_each_reason_with_its_peak_and_says_none_or_nothing() {
        let mut report = pb::Report::default();
        assert_eq!(nodes_kept_line(&report), None);
        report.nodes_kept = Some(kept().to_proto());
        assert_eq!(
            nodes_kept_line(&report).unwrap(),
            "NotUnderutilized 12, reason 99 1 (cluster-autoscaler's peak per reason, cluster-wide)"
        );
        report.nodes_kept = Some(pb::NodesKept::default());
        assert_eq!(
            nodes_kept_line(&report).unwrap(),
            "cluster-autoscaler reported none"
        );
    }
}
