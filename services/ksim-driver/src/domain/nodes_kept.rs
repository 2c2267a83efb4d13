//! Why cluster-autoscaler kept nodes: its gauge `cluster_autoscaler_unremovable_nodes_count`
//! read through the environment during the replay, folded into the report's `NodesKept`.
//!
//! CA sets the gauge once per loop for the reasons present in that loop and never clears a
//! reason no node has any more, so only two figures are exact: per reason the most nodes at
//! once (a stale value never rises) and the first reading showing it. A CA that started before
//! the run may hold values of an earlier one: its readings count a reason only once its value
//! differs from the first reading (a new process starts with an empty gauge).

use std::{collections::BTreeMap, time::Duration};

use ksim_experiment::autoscaler::unremovable::{METRIC, reason_name};
use ksim_proto::ksim::env::v1 as env;
use ksim_trace::time::millis;

use super::report::{self, NodesKept, NodesKeptReason};

/// One reason so far: its peak and the first reading (wall, since the replay start) with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    peak: u64,
    first: Duration,
}

/// The readings of one replay, folded as they come.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodesKeptFold {
    /// When the run had its configuration applied, unix ms: a CA started before may carry an
    /// earlier run's values.
    applied_at_ms: i64,
    reasons: BTreeMap<u32, Seen>,
    /// The CA process of the last reading (its start, unix ms; `None`: it did not say).
    process: Option<Option<i64>>,
    /// The first reading of a CA that may predate the run: its values do not count as they are.
    baseline: Option<BTreeMap<u32, u64>>,
    /// A reading of a CA that may predate the run was taken.
    carried: bool,
    release: String,
    readings: u64,
}

impl NodesKeptFold {
    pub fn new(applied_at_ms: i64) -> Self {
        Self {
            applied_at_ms,
            ..Self::default()
        }
    }

    /// A reading taken `offset` (wall clock) after the replay start.
    pub fn add(&mut self, offset: Duration, reading: &env::GetUnremovableNodesResponse) {
        self.readings += 1;
        self.release.clone_from(&reading.autoscaler_release);
        let process = reading.autoscaler_start_time.as_ref().map(millis);
        let fresh = process.is_some_and(|started| started >= self.applied_at_ms);
        let counts: BTreeMap<u32, u64> = reading
            .counts
            .iter()
            .map(|count| (count.reason, count.nodes))
            .collect();
        if self.process != Some(process) {
            // Another CA process: its gauge is its own.
            self.process = Some(process);
            self.baseline = (!fresh).then(|| counts.clone());
            self.carried |= !fresh;
        }
        for (&reason, &nodes) in &counts {
            let unchanged = self
                .baseline
                .as_ref()
                .is_some_and(|baseline| baseline.get(&reason) == Some(&nodes));
            if nodes == 0 || unchanged {
                continue;
            }
            if let Some(baseline) = self.baseline.as_mut() {
                // Changed since: set by this run's loops from now on.
                baseline.remove(&reason);
            }
            let seen = self.reasons.entry(reason).or_insert(Seen {
                peak: 0,
                first: offset,
            });
            seen.peak = seen.peak.max(nodes);
            seen.first = seen.first.min(offset);
        }
    }

    /// The report's figures, recorded time at `speed`, most nodes first; `None` without a
    /// reading (no autoscaler, or an environment that cannot read it).
    pub fn report(&self, speed: f64) -> Option<NodesKept> {
        if self.readings == 0 {
            return None;
        }
        let mut reasons: Vec<NodesKeptReason> = self
            .reasons
            .iter()
            .map(|(&code, seen)| NodesKeptReason {
                code,
                name: reason_name(code).unwrap_or_default().to_owned(),
                peak_nodes: seen.peak,
                first_seen: Some(ksim_proto::json::of_millis(
                    u64::try_from(report::recorded(seen.first, speed).as_millis())
                        .unwrap_or(u64::MAX),
                )),
            })
            .collect();
        reasons.sort_by(|a, b| b.peak_nodes.cmp(&a.peak_nodes).then(a.code.cmp(&b.code)));
        let carried = if self.carried {
            "; cluster-autoscaler ran from before the run, so a reason counts only once its \
             count changed"
        } else {
            ""
        };
        Some(NodesKept {
            source: format!(
                "{METRIC}{{reason}} of cluster-autoscaler {} (/metrics, {} readings){carried}",
                self.release, self.readings
            ),
            reasons,
        })
    }
}

#[cfg(test)]
mod tests {
    use ksim_proto::json::to_millis;
    use ksim_trace::time::timestamp;

    use super::*;

    const APPLIED: i64 = 1_767_225_600_000;

    fn reading(started: Option<i64>, counts: &[(u32, u64)]) -> env::GetUnremovableNodesResponse {
        env::GetUnremovableNodesResponse {
            counts: counts
                .iter()
                .map(|&(reason, nodes)| env::UnremovableCount { reason, nodes })
                .collect(),
            autoscaler_release: "1.35.2".into(),
            autoscaler_start_time: started.map(timestamp),
        }
    }

    fn figures(kept: &NodesKept) -> Vec<(u32, &str, u64, u64)> {
        kept.reasons
            .iter()
            .map(|r| {
                (
                    r.code,
                    r.name.as_str(),
                    r.peak_nodes,
                    to_millis(r.first_seen.as_ref()),
                )
            })
            .collect()
    }

    #[test]
    fn peaks_and_first_readings_in_recorded_time_most_nodes_first() {
        let mut fold = NodesKeptFold::new(APPLIED);
        let fresh = Some(APPLIED + 500);
        let s = Duration::from_secs;
        fold.add(s(0), &reading(fresh, &[]));
        fold.add(s(1), &reading(fresh, &[(4, 2)]));
        fold.add(s(2), &reading(fresh, &[(4, 3), (15, 1)]));
        // 4 is stale at 3 now, then set lower: neither raises its peak.
        fold.add(s(3), &reading(fresh, &[(4, 1), (15, 1), (99, 5)]));
        let kept = fold.report(60.0).unwrap();
        assert_eq!(
            figures(&kept),
            [
                (99, "", 5, 180_000),
                (4, "NotUnneededLongEnough", 3, 60_000),
                (15, "BlockedByPod", 1, 120_000)
            ]
        );
        assert!(
            kept.source.starts_with(
                "cluster_autoscaler_unremovable_nodes_count{reason} of cluster-autoscaler 1.35.2"
            ),
            "{}",
            kept.source
        );
        assert!(!kept.source.contains("before the run"), "{}", kept.source);
    }

    #[test]
    fn no_reading_is_no_figures_and_readings_without_reasons_are_none_kept() {
        let mut fold = NodesKeptFold::new(APPLIED);
        assert_eq!(fold.report(1.0), None);
        fold.add(Duration::ZERO, &reading(Some(APPLIED), &[(6, 0)]));
        assert_eq!(fold.report(1.0).unwrap().reasons, []);
    }

    #[test]
    fn a_ca_from_before_the_run_counts_a_reason_once_it_changes_until_a_new_one_starts() {
        let mut fold = NodesKeptFold::new(APPLIED);
        let old = Some(APPLIED - 60_000);
        let s = Duration::from_secs;
        // An earlier run's 15=3 and 11=2 stand in the gauge.
        fold.add(s(0), &reading(old, &[(15, 3), (11, 2)]));
        fold.add(s(1), &reading(old, &[(15, 3), (11, 2), (4, 1)]));
        fold.add(s(2), &reading(old, &[(15, 3), (11, 1), (4, 1)]));
        // Once changed, back to its old value still counts.
        fold.add(s(3), &reading(old, &[(15, 3), (11, 2), (4, 1)]));
        let kept = fold.report(1.0).unwrap();
        assert_eq!(
            figures(&kept),
            [
                (11, "NotUnderutilized", 2, 2_000),
                (4, "NotUnneededLongEnough", 1, 1_000)
            ]
        );
        assert!(kept.source.contains("before the run"), "{}", kept.source);
        // Restarted during the run: the new process's gauge counts from its first reading.
        fold.add(s(4), &reading(Some(APPLIED + 4_000), &[(15, 3)]));
        let kept = fold.report(1.0).unwrap();
        assert_eq!(kept.reasons[0].code, 15);
        assert_eq!(to_millis(kept.reasons[0].first_seen.as_ref()), 4_000);
        // A start time it does not say is taken as possibly before the run.
        let mut unknown = NodesKeptFold::new(APPLIED);
        unknown.add(s(0), &reading(None, &[(15, 3)]));
        assert_eq!(unknown.report(1.0).unwrap().reasons, []);
    }
}
