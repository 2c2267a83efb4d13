//! Reports side by side: the figures of what a team pays and waits, each run against the first
//! (the baseline), absolute and relative; what `ksim compare` prints and `ksim experiment`
//! asserts over.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use super::model::Report;
use super::noise::{self, Noise};
use super::percentiles::ms;

/// Runs side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Each run's name (an id or a directory), the baseline first.
    pub runs: Vec<String>,
    pub figures: Vec<ComparedFigure>,
}

/// One figure over the runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComparedFigure {
    /// Its name in `report.json` terms, e.g. `node_hours`, `pending_p99_ms`.
    pub name: String,
    /// Per run; `None` where a run has no value (a cost without a price).
    pub values: Vec<Option<f64>>,
    /// Per run: value minus the baseline's (`None` without both).
    pub deltas: Vec<Option<f64>>,
    /// Per run: the delta over the baseline's value (`None` also when that is 0).
    pub relative: Vec<Option<f64>>,
    /// With repeats (`ksim experiment`): per run, the least and the most over its repeats;
    /// `values` are then the means.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub min: Vec<Option<f64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub max: Vec<Option<f64>>,
    /// With repeats: per run after the baseline, whether its difference from the baseline is
    /// beyond the noise of their repeats ([`crate::noise`]); `None` for the baseline and where
    /// a side has fewer than two values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noise: Vec<Option<Noise>>,
}

/// The figures compared, in the order of the table.
pub const FIGURES: [&str; 30] = [
    "node_hours",
    "cost",
    "peak_nodes",
    "scale_ups",
    "scale_downs",
    "pending_pod_seconds",
    "pending_p50_ms",
    "pending_p99_ms",
    "pods_never_scheduled",
    "pods_evicted",
    "pods_preempted",
    "replica_hours",
    "scale_events",
    "oom_kills",
    "throttled_cpu_seconds",
    "cpu_requested_mean",
    "memory_requested_mean",
    "gpu_node_hours",
    "gpu_cost",
    "gpu_allocated_mean",
    "gpu_fragmented_mean",
    "gpu_pods_never_scheduled",
    "pending_gpu_pods_peak",
    "nodes_within_tolerance",
    "lowest_availability",
    "seconds_below_desired",
    "recovery_seconds",
    "lateness_p99_ms",
    "nodes_agree_with_baseline",
    "pods_running_agree_with_baseline",
];

/// The figures that hold a run against the baseline's (first) report rather than read one
/// report: the share of 5 s buckets of recorded time in which its Ready nodes are within 1
/// of the baseline's, and its Running pods within 5% ([`crate::fidelity`]'s tolerances). For a
/// trace with no recorded cluster, a slow replay as the baseline is the reference.
const AGAINST_BASELINE: [(&str, &str); 2] = [
    ("nodes_agree_with_baseline", "nodes"),
    ("pods_running_agree_with_baseline", "pods_running"),
];

/// A report's value of one of [`FIGURES`].
pub fn figure(report: &Report, name: &str) -> Option<f64> {
    // A report without costs (none the driver makes) reads as one of zero costs.
    let none = super::model::Costs::default();
    let costs = report.costs.as_ref().unwrap_or(&none);
    let pending = report.pod_pending_time.unwrap_or_default();
    let sum =
        |f: fn(&super::model::GroupCost) -> u64| costs.groups.iter().map(f).sum::<u64>() as f64;
    Some(match name {
        "node_hours" => costs.node_hours,
        "cost" => return costs.cost,
        "peak_nodes" => report.peak_nodes as f64,
        "scale_ups" => sum(|g| g.scale_ups),
        "scale_downs" => sum(|g| g.scale_downs),
        "pending_pod_seconds" => costs.pending_pod_seconds,
        "pending_p50_ms" => ms(pending.p50.as_ref()),
        "pending_p99_ms" => ms(pending.p99.as_ref()),
        "pods_never_scheduled" => costs.pods_never_scheduled as f64,
        "pods_evicted" => costs.pods_evicted as f64,
        "pods_preempted" => costs.pods_preempted as f64,
        // What the workloads HPAs scale ran (simulated), and how often their counts changed;
        // none for a trace without HPAs.
        "replica_hours" => {
            let scaling = report.workload_scaling.as_ref()?;
            scaling
                .workloads
                .iter()
                .map(|w| w.simulated_replica_seconds)
                .sum::<f64>()
                / 3600.0
        }
        "scale_events" => {
            let scaling = report.workload_scaling.as_ref()?;
            scaling
                .workloads
                .iter()
                .map(|w| w.scale_events.len() as u64 + w.scale_events_dropped)
                .sum::<u64>() as f64
        }
        // What limits did to the replayed usage; none for a trace without usage.
        "oom_kills" => report.usage.as_ref()?.oom_kills as f64,
        "throttled_cpu_seconds" => report.usage.as_ref()?.throttled_cpu_seconds,
        "cpu_requested_mean" => costs.cpu_requested_mean,
        "memory_requested_mean" => costs.memory_requested_mean,
        // What the GPUs did; none for a run without GPUs.
        "gpu_node_hours" => report.accelerators.as_ref()?.gpu_node_hours,
        "gpu_cost" => return report.accelerators.as_ref()?.gpu_cost,
        "gpu_allocated_mean" => {
            super::accelerators::overall(&report.timeline, |gpus| gpus.allocated)?
        }
        "gpu_fragmented_mean" => {
            super::accelerators::overall(&report.timeline, |gpus| gpus.fragmented)?
        }
        "gpu_pods_never_scheduled" => report.accelerators.as_ref()?.gpu_pods_never_scheduled as f64,
        "pending_gpu_pods_peak" => report.accelerators.as_ref()?.pending_gpu_pods_peak as f64,
        "nodes_within_tolerance" => {
            let fidelity = report.fidelity.as_ref()?;
            let nodes = fidelity.series.iter().find(|s| s.name == "nodes")?;
            nodes.within_tolerance
        }
        // What the run's disruptions cost; none for a run without.
        "lowest_availability" => {
            let workloads = &report.disruptions.as_ref()?.workloads;
            workloads.iter().map(|w| w.availability).reduce(f64::min)?
        }
        "seconds_below_desired" => report
            .disruptions
            .as_ref()?
            .workloads
            .iter()
            .map(|w| seconds(w.time_below_desired.as_ref()))
            .sum(),
        "recovery_seconds" => report
            .disruptions
            .as_ref()?
            .outcomes
            .iter()
            .filter_map(|o| o.time_to_recovery.as_ref())
            .map(|after| seconds(Some(after)))
            .reduce(f64::max)?,
        "lateness_p99_ms" => ms(report.lateness.unwrap_or_default().p99.as_ref()),
        _ => return None,
    })
}

/// Seconds of a report duration; absent is 0.
fn seconds(duration: Option<&prost_types::Duration>) -> f64 {
    ms(duration) / 1000.0
}

/// Per workload of a run's disruptions, as `namespace/name` (the kind left out: two workloads
/// of one name keep the lower), its availability; empty for a run without disruptions.
pub fn availability(report: &Report) -> BTreeMap<String, f64> {
    let mut by_name: BTreeMap<String, f64> = BTreeMap::new();
    for workload in report.disruptions.iter().flat_map(|d| &d.workloads) {
        let name = workload
            .name
            .split_once('/')
            .map_or(workload.name.as_str(), |(_, rest)| rest);
        by_name
            .entry(name.to_owned())
            .and_modify(|known| *known = known.min(workload.availability))
            .or_insert(workload.availability);
    }
    by_name
}

/// A report's value of one of [`FIGURES`], the baseline's report given for those held against
/// it.
fn figure_against(baseline: Option<&Report>, report: &Report, name: &str) -> Option<f64> {
    match AGAINST_BASELINE.iter().find(|(figure, _)| *figure == name) {
        Some((_, series)) => {
            let agreement = super::fidelity::agreement(baseline?, report)?;
            let series = agreement.series.iter().find(|s| s.name == *series)?;
            Some(series.within_tolerance)
        }
        None => figure(report, name),
    }
}

/// `reports` (name, report) side by side, the first the baseline.
pub fn compare(reports: &[(String, Report)]) -> Comparison {
    let runs: Vec<(String, Vec<&Report>)> = reports
        .iter()
        .map(|(name, report)| (name.clone(), vec![report]))
        .collect();
    let mut comparison = compare_repeated(&runs);
    for figure in &mut comparison.figures {
        figure.min.clear();
        figure.max.clear();
        figure.noise.clear();
    }
    comparison
}

/// A figure's value in each of a run's reports that has it. Figures held against the baseline
/// compare with `baseline`.
fn values_of(baseline: Option<&Report>, reports: &[&Report], name: &str) -> Vec<f64> {
    reports
        .iter()
        .filter_map(|r| figure_against(baseline, r, name))
        .collect()
}

/// Mean, min and max; `None` for no values.
fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((mean, min, max))
}

/// Runs with repeats side by side (name, the reports of its repeats that succeeded): values are
/// means, the deltas between means, and `min`/`max` the spread. The baseline's first report is
/// the reference of the figures held against it.
pub fn compare_repeated(runs: &[(String, Vec<&Report>)]) -> Comparison {
    let baseline = runs
        .first()
        .and_then(|(_, reports)| reports.first().copied());
    let figures = FIGURES
        .iter()
        .map(|name| {
            let samples: Vec<Vec<f64>> = runs
                .iter()
                .map(|(_, reports)| values_of(baseline, reports, name))
                .collect();
            let spreads: Vec<Option<(f64, f64, f64)>> =
                samples.iter().map(|values| spread(values)).collect();
            let noise = samples
                .iter()
                .enumerate()
                .map(|(i, values)| {
                    let base = samples.first().filter(|_| i > 0)?;
                    noise::welch(base, values)
                })
                .collect();
            let values: Vec<Option<f64>> = spreads.iter().map(|s| s.map(|s| s.0)).collect();
            let baseline = values.first().copied().flatten();
            let deltas: Vec<Option<f64>> = values
                .iter()
                .map(|value| Some(value.as_ref()? - baseline?))
                .collect();
            let relative = deltas
                .iter()
                .map(|delta| {
                    let base = baseline.filter(|b| *b != 0.0)?;
                    Some(delta.as_ref()? / base)
                })
                .collect();
            ComparedFigure {
                name: (*name).to_owned(),
                values,
                deltas,
                relative,
                min: spreads.iter().map(|s| s.map(|s| s.1)).collect(),
                max: spreads.iter().map(|s| s.map(|s| s.2)).collect(),
                noise,
            }
        })
        .collect();
    Comparison {
        runs: runs.iter().map(|(name, _)| name.clone()).collect(),
        figures,
    }
}

impl Comparison {
    /// A figure by name.
    pub fn figure(&self, name: &str) -> Option<&ComparedFigure> {
        self.figures.iter().find(|figure| figure.name == name)
    }

    /// The table: a row per figure, a column per run; after the baseline, each value with its
    /// delta and relative delta.
    pub fn table(&self) -> String {
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut header = vec!["figure".to_owned()];
        header.extend(self.runs.iter().enumerate().map(|(i, run)| {
            if i == 0 {
                format!("{run} (baseline)")
            } else {
                run.clone()
            }
        }));
        rows.push(header);
        for figure in &self.figures {
            let mut row = vec![figure.name.clone()];
            for (i, value) in figure.values.iter().enumerate() {
                // The spread over repeats, where there is one.
                let range = match (
                    figure.min.get(i).copied().flatten(),
                    figure.max.get(i).copied().flatten(),
                ) {
                    (Some(min), Some(max)) if min != max => {
                        format!(" [{}..{}]", number(min), number(max))
                    }
                    _ => String::new(),
                };
                let cell = match value {
                    None => "-".to_owned(),
                    Some(value) if i == 0 => format!("{}{range}", number(*value)),
                    Some(value) => {
                        let delta = figure.deltas[i].map_or_else(String::new, |d| {
                            let relative = figure.relative[i]
                                .map_or_else(String::new, |r| format!(", {:+.1}%", r * 100.0));
                            format!(" ({}{relative})", signed(d))
                        });
                        let noise = figure.noise.get(i).copied().flatten().map_or_else(
                            String::new,
                            |noise| {
                                let mark = if noise.beyond_noise { '*' } else { '~' };
                                let needed = noise
                                    .repeats_needed
                                    .map_or_else(String::new, |n| format!(", {n} repeats"));
                                format!(" {mark}p={}{needed}", p_value(noise.p_value))
                            },
                        );
                        format!("{}{range}{delta}{noise}", number(*value))
                    }
                };
                row.push(cell);
            }
            rows.push(row);
        }
        let tested = self
            .figures
            .iter()
            .any(|figure| figure.noise.iter().any(Option::is_some));
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|column| {
                rows.iter()
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        if tested {
            let _ = writeln!(
                out,
                "* beyond the noise of the repeats, ~ within it: Welch's t-test against the \
                 baseline at {:.0}% confidence; p is the chance that noise alone makes a \
                 difference this large, and N repeats a side would tell one of this size",
                noise::CONFIDENCE * 100.0
            );
        }
        out
    }
}

/// Three decimals, or `<0.001`.
fn p_value(p: f64) -> String {
    if p < 0.001 {
        "<0.001".to_owned()
    } else {
        format!("{p:.3}")
    }
}

/// At most 4 decimals, no trailing zeros.
fn number(value: f64) -> String {
    let text = format!("{value:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

fn signed(value: f64) -> String {
    if value >= 0.0 {
        format!("+{}", number(value))
    } else {
        number(value)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    #[test]
    fn scaled_replicas_and_limits_are_figures_only_where_the_run_had_them() {
        let mut report = crate::fixtures::report();
        report.workload_scaling = None;
        report.usage = None;
        for name in [
            "replica_hours",
            "scale_events",
            "oom_kills",
            "throttled_cpu_seconds",
        ] {
            assert_eq!(figure(&report, name), None, "{name}");
        }
        report.workload_scaling = Some(crate::fixtures::workload_scaling());
        report.usage = Some(crate::UsageReplay {
            oom_kills: 3,
            throttled_cpu_seconds: 7.5,
            ..Default::default()
        });
        assert_eq!(figure(&report, "replica_hours"), Some(13.0 / 3600.0));
        // Two kept and five counted past the bound.
        assert_eq!(figure(&report, "scale_events"), Some(7.0));
        assert_eq!(figure(&report, "oom_kills"), Some(3.0));
        assert_eq!(figure(&report, "throttled_cpu_seconds"), Some(7.5));
    }

    #[test]
    fn gpu_figures_are_figures_only_where_the_run_had_gpus() {
        let mut report = crate::fixtures::report();
        for name in FIGURES.iter().filter(|name| name.contains("gpu")) {
            assert_eq!(figure(&report, name), None, "{name}");
        }
        report.timeline[1].gpus = vec![crate::GpuUsage {
            model: "V100".to_owned(),
            nodes: 2,
            allocatable: 4,
            allocated: 3,
            fragmented: 1,
        }];
        report.accelerators = Some(crate::Accelerators {
            gpu_node_hours: 2.5,
            gpu_cost: Some(7.65),
            gpu_pods_never_scheduled: 1,
            pending_gpu_pods_peak: 2,
            ..Default::default()
        });
        assert_eq!(figure(&report, "gpu_node_hours"), Some(2.5));
        assert_eq!(figure(&report, "gpu_cost"), Some(7.65));
        // The one bucket with GPUs.
        assert_eq!(figure(&report, "gpu_allocated_mean"), Some(0.75));
        assert_eq!(figure(&report, "gpu_fragmented_mean"), Some(0.25));
        assert_eq!(figure(&report, "gpu_pods_never_scheduled"), Some(1.0));
        assert_eq!(figure(&report, "pending_gpu_pods_peak"), Some(2.0));
    }

    use super::*;
    use crate::model::{Costs, DurationPercentiles, GroupCost, NodeGroupCount, TimelineBucket};
    use crate::percentiles;

    fn report(node_hours: f64, cost: Option<f64>, p99_ms: f64) -> Report {
        Report {
            peak_nodes: 3,
            pod_pending_time: Some(DurationPercentiles {
                p99: Some(ksim_proto::json::of_fractional_millis(p99_ms)),
                ..percentiles::of(&[])
            }),
            costs: Some(Costs {
                node_hours,
                cost,
                groups: vec![GroupCost {
                    scale_ups: 2,
                    ..GroupCost::default()
                }],
                ..Costs::default()
            }),
            ..Report::default()
        }
    }

    #[test]
    fn each_run_is_measured_against_the_first() {
        let comparison = compare(&[
            ("spread".to_owned(), report(2.0, Some(0.192), 100.0)),
            ("packed".to_owned(), report(1.5, Some(0.144), 110.0)),
            ("unpriced".to_owned(), report(1.0, None, 0.0)),
        ]);
        let hours = comparison.figure("node_hours").unwrap();
        assert_eq!(hours.values, [Some(2.0), Some(1.5), Some(1.0)]);
        assert_eq!(hours.deltas, [Some(0.0), Some(-0.5), Some(-1.0)]);
        assert_eq!(hours.relative, [Some(0.0), Some(-0.25), Some(-0.5)]);
        let cost = comparison.figure("cost").unwrap();
        assert_eq!(cost.values[2], None);
        assert_eq!(cost.deltas[2], None);
        let p99 = comparison.figure("pending_p99_ms").unwrap();
        assert!((p99.relative[1].unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(comparison.figure("scale_ups").unwrap().values[0], Some(2.0));
        // No fidelity in these reports: nothing to compare, not a zero.
        assert_eq!(
            comparison.figure("nodes_within_tolerance").unwrap().values,
            [None, None, None]
        );

        let table = comparison.table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("figure"), "{table}");
        assert!(lines[0].contains("spread (baseline)"), "{table}");
        let row = lines.iter().find(|l| l.starts_with("node_hours")).unwrap();
        assert!(row.contains("1.5 (-0.5, -25.0%)"), "{table}");
        let row = lines.iter().find(|l| l.starts_with("cost")).unwrap();
        assert!(row.contains("0.144 (-0.048, -25.0%)"), "{row}");
        assert!(row.trim_end().ends_with('-'), "{row}");
    }

    #[test]
    fn a_zero_baseline_has_deltas_but_no_relative_ones() {
        let comparison = compare(&[
            ("a".to_owned(), report(0.0, Some(0.0), 0.0)),
            ("b".to_owned(), report(1.0, Some(0.1), 5.0)),
        ]);
        let hours = comparison.figure("node_hours").unwrap();
        assert_eq!(hours.deltas[1], Some(1.0));
        assert_eq!(hours.relative[1], None);
    }

    #[test]
    fn repeats_are_compared_by_their_means_and_keep_their_spread() {
        let (a1, a2) = (report(2.0, None, 0.0), report(4.0, None, 0.0));
        let b = report(1.5, None, 0.0);
        let comparison =
            compare_repeated(&[("a".to_owned(), vec![&a1, &a2]), ("b".to_owned(), vec![&b])]);
        let hours = comparison.figure("node_hours").unwrap();
        assert_eq!(hours.values, [Some(3.0), Some(1.5)]);
        assert_eq!(hours.min, [Some(2.0), Some(1.5)]);
        assert_eq!(hours.max, [Some(4.0), Some(1.5)]);
        assert_eq!(hours.deltas[1], Some(-1.5));
        let table = comparison.table();
        assert!(table.contains("3 [2..4]"), "{table}");
        assert!(table.contains("1.5 (-1.5, -50.0%)"), "{table}");
        // One run of b says nothing of its noise.
        assert_eq!(hours.noise, [None, None]);
        assert!(!table.contains("Welch"), "{table}");
    }

    #[test]
    fn with_repeats_each_figure_says_whether_its_difference_is_beyond_noise() {
        let reports = |hours: &[f64], p99: &[f64]| -> Vec<Report> {
            hours
                .iter()
                .zip(p99)
                .map(|(h, p)| report(*h, None, *p))
                .collect()
        };
        let base = reports(&[10.0, 10.4, 9.6], &[100.0, 140.0, 60.0]);
        let same = reports(&[10.2, 9.8, 10.1], &[90.0, 130.0, 110.0]);
        let packed = reports(&[7.0, 7.2, 6.9], &[120.0, 80.0, 100.0]);
        let comparison = compare_repeated(&[
            ("baseline".to_owned(), base.iter().collect()),
            ("same".to_owned(), same.iter().collect()),
            ("packed".to_owned(), packed.iter().collect()),
        ]);
        let hours = comparison.figure("node_hours").unwrap();
        assert_eq!(hours.noise[0], None);
        let (same_hours, packed_hours) = (hours.noise[1].unwrap(), hours.noise[2].unwrap());
        assert!(!same_hours.beyond_noise, "{same_hours:?}");
        assert!(packed_hours.beyond_noise, "{packed_hours:?}");
        assert!(packed_hours.p_value < 0.01, "{packed_hours:?}");
        let p99 = comparison.figure("pending_p99_ms").unwrap();
        assert!(!p99.noise[2].unwrap().beyond_noise);
        // Every repeat had 3 peak nodes: no difference, nothing to tell.
        let peak = comparison.figure("peak_nodes").unwrap().noise[2].unwrap();
        assert_eq!((peak.beyond_noise, peak.repeats_needed), (false, None));

        let table = comparison.table();
        let row = table.lines().find(|l| l.starts_with("node_hours")).unwrap();
        assert!(row.contains(" *p=0.003"), "{row}");
        assert!(row.contains("~p="), "{row}");
        assert!(table.contains("Welch's t-test against the baseline at 95% confidence"));
        // And in the JSON.
        let json = serde_json::to_value(&comparison).unwrap();
        assert_eq!(json["figures"][0]["noise"][2]["beyond_noise"], true);
    }

    /// A report whose timeline has 1 s buckets of these Ready nodes, and ten times as many
    /// Running pods.
    fn timeline(nodes: &[u64]) -> Report {
        use crate::input::PodPhaseCounts;
        Report {
            timeline: (0u64..)
                .zip(nodes)
                .map(|(second, &ready)| TimelineBucket {
                    offset: Some(ksim_proto::json::of_millis(second * 1000)),
                    nodes: vec![NodeGroupCount {
                        node_group: "m5".to_owned(),
                        nodes: ready,
                        ready_nodes: ready,
                        ..NodeGroupCount::default()
                    }],
                    pods: Some(PodPhaseCounts {
                        running: ready * 10,
                        ..PodPhaseCounts::default()
                    }),
                    ..TimelineBucket::default()
                })
                .collect(),
            ..Report::default()
        }
    }

    #[test]
    fn runs_are_held_to_the_baselines_timeline_bucket_by_bucket() {
        // Four 5 s buckets; the second run is 2 nodes off at the end of the third.
        let reference = timeline(&[3; 20]);
        let mut off: Vec<u64> = vec![3; 20];
        off[14] = 5;
        let comparison = compare(&[
            ("slow".to_owned(), reference.clone()),
            ("same".to_owned(), timeline(&[3; 20])),
            ("off".to_owned(), timeline(&off)),
            ("near".to_owned(), timeline(&[4; 20])),
        ]);
        let nodes = comparison.figure("nodes_agree_with_baseline").unwrap();
        assert_eq!(nodes.values, [Some(1.0), Some(1.0), Some(0.75), Some(1.0)]);
        let pods = comparison
            .figure("pods_running_agree_with_baseline")
            .unwrap();
        // 40 Running against 30 is a third off: outside 5% in every bucket.
        assert_eq!(pods.values[3], Some(0.0));
        assert_eq!(pods.values[2], Some(0.75));
        // A run with no timeline has nothing to hold: no value, not a zero.
        let empty = compare(&[
            ("slow".to_owned(), reference),
            ("none".to_owned(), Report::default()),
        ]);
        assert_eq!(
            empty.figure("nodes_agree_with_baseline").unwrap().values[1],
            None
        );
    }
}
