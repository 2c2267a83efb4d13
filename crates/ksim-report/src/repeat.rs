//! Several runs of the same trace (`ksim run --repeat N`): how much the figures that matter
//! moved from one run to the next.

use std::fmt::Write as _;

use ksim_proto::ksim::driver::v1 as pb;

use super::summary::autoscaler_totals;
use super::timeline::duration_from_proto;

/// The smallest, mean and largest of one figure over the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no values: there is nothing to spread.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return None;
        }
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Some(Self { min, mean, max })
    }
}

/// One run of a repeat: which simulation, how it ended, and its report if it has one.
#[derive(Debug, Clone)]
pub struct RepeatRun {
    pub simulation_id: String,
    pub state: pb::SimulationState,
    pub report: Option<pb::Report>,
}

/// The spread of each figure over the runs that succeeded; failed and cancelled runs are
/// counted but not averaged in, since their figures stop wherever they stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct RepeatSummary {
    pub runs: usize,
    pub succeeded: usize,
    pub peak_nodes: Option<Spread>,
    /// Pod pending time p99, in milliseconds.
    pub pending_p99_ms: Option<Spread>,
    /// Nodes cluster-autoscaler asked to add, and to remove, per run.
    pub scale_ups: Option<Spread>,
    pub scale_downs: Option<Spread>,
    /// Fidelity: the share of buckets, in percent, whose node count was within +-1 of the
    /// recording; over the successful runs whose report measured it.
    pub nodes_within_pct: Option<Spread>,
}

pub fn repeat_summary(runs: &[RepeatRun]) -> RepeatSummary {
    let reports: Vec<&pb::Report> = runs
        .iter()
        .filter(|run| run.state == pb::SimulationState::Succeeded)
        .filter_map(|run| run.report.as_ref())
        .collect();
    let figure = |f: &dyn Fn(&pb::Report) -> f64| Spread::of(reports.iter().map(|r| f(r)));
    RepeatSummary {
        runs: runs.len(),
        succeeded: reports.len(),
        peak_nodes: figure(&|r| r.peak_nodes as f64),
        pending_p99_ms: figure(&|r| {
            let pending = r.pod_pending_time.unwrap_or_default();
            duration_from_proto(pending.p99.as_ref()).as_secs_f64() * 1000.0
        }),
        scale_ups: figure(&|r| autoscaler_totals(r).0 as f64),
        scale_downs: figure(&|r| autoscaler_totals(r).1 as f64),
        nodes_within_pct: Spread::of(reports.iter().filter_map(|r| {
            let fidelity = r.fidelity.as_ref()?;
            let nodes = fidelity.series.iter().find(|s| s.name == "nodes")?;
            Some(nodes.within_tolerance * 100.0)
        })),
    }
}

impl RepeatSummary {
    /// A few lines for a terminal, ending in a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Repeated {} times: {} succeeded (min / mean / max over those)",
            self.runs, self.succeeded
        );
        let rows: [(&str, Option<Spread>, &str); 5] = [
            ("peak nodes", self.peak_nodes, ""),
            ("pending p99", self.pending_p99_ms, " ms"),
            ("scale-ups", self.scale_ups, ""),
            ("scale-downs", self.scale_downs, ""),
            ("nodes within ±1", self.nodes_within_pct, "% of buckets"),
        ];
        for (name, spread, unit) in rows {
            let missing = if self.succeeded == 0 {
                "no successful run"
            } else {
                "not measured (the trace holds no recorded cluster state)"
            };
            let text = spread.map_or_else(
                || missing.to_owned(),
                |s| format!("{} / {} / {}{unit}", num(s.min), num(s.mean), num(s.max)),
            );
            let _ = writeln!(out, "  {:<18} {text}", format!("{name}:"));
        }
        out
    }
}

/// At most one decimal, none when whole.
fn num(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::super::timeline::duration_to_proto;
    use super::*;

    fn run(id: &str, state: pb::SimulationState, peak: u64, p99_ms: u64, ups: u64) -> RepeatRun {
        let report = pb::Report {
            simulation_id: id.to_owned(),
            peak_nodes: peak,
            pod_pending_time: Some(pb::DurationPercentiles {
                p99: Some(duration_to_proto(std::time::Duration::from_millis(p99_ms))),
                ..Default::default()
            }),
            timeline: vec![pb::TimelineBucket {
                autoscaler_scale_ups: ups,
                autoscaler_scale_downs: 1,
                ..Default::default()
            }],
            fidelity: Some(pb::Fidelity {
                series: vec![pb::FidelitySeries {
                    name: "nodes".to_owned(),
                    within_tolerance: peak as f64 / 10.0,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        RepeatRun {
            simulation_id: id.to_owned(),
            state,
            report: Some(report),
        }
    }

    #[test]
    fn spreads_cover_the_successful_runs_only() {
        use pb::SimulationState::{Failed, Succeeded};
        let runs = [
            run("a", Succeeded, 4, 1000, 2),
            run("b", Succeeded, 6, 3000, 4),
            run("c", Failed, 99, 99_000, 99),
        ];
        let summary = repeat_summary(&runs);
        assert_eq!((summary.runs, summary.succeeded), (3, 2));
        let peak = summary.peak_nodes.unwrap();
        assert_eq!((peak.min, peak.mean, peak.max), (4.0, 5.0, 6.0));
        let p99 = summary.pending_p99_ms.unwrap();
        assert_eq!((p99.min, p99.mean, p99.max), (1000.0, 2000.0, 3000.0));
        assert_eq!(summary.scale_ups.unwrap().mean, 3.0);
        assert_eq!(summary.scale_downs.unwrap().max, 1.0);
        let text = summary.render();
        assert!(text.contains("Repeated 3 times: 2 succeeded"), "{text}");
        assert!(text.contains("peak nodes:        4 / 5 / 6"), "{text}");
        assert!(
            text.contains("pending p99:       1000 / 2000 / 3000 ms"),
            "{text}"
        );
        assert!(
            text.contains("nodes within ±1:   40 / 50 / 60% of buckets"),
            "{text}"
        );
    }

    #[test]
    fn no_successful_run_says_so() {
        let runs = [run("a", pb::SimulationState::Cancelled, 4, 1, 1)];
        let summary = repeat_summary(&runs);
        assert_eq!(summary.peak_nodes, None);
        assert!(
            summary
                .render()
                .contains("peak nodes:        no successful run")
        );
        assert_eq!(Spread::of([]), None);
        assert_eq!(num(2.25), "2.2");
    }
}
