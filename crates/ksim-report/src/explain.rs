//! The explained pods of a report, for a terminal: where each went, the runners-up and the
//! plugin scores that separated them, and the filters that ruled the other nodes out, grouped
//! so that a thousand nodes read in a screen.

use std::fmt::Write;

use ksim_proto::ksim::driver::v1 as pb;

use crate::summary::human;

/// Which explained pods to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodSelector<'a> {
    /// One pod: `namespace/name`, the recorded namespace (or the simulated one) and its name.
    Pod(&'a str),
    /// Every explained pod of a workload: `Kind/name` (a Deployment's pods name it), in any
    /// namespace, or `namespace/Kind/name`.
    Owner(&'a str),
}

/// Why no pod could be printed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    #[error("the report explains no pod: run with --explain (docs/explain.md)")]
    NoneExplained,
    #[error("the report explains no pod {selector}; it explains {some}")]
    NotFound { selector: String, some: String },
}

/// The pods `selector` picks among the report's explained ones, by namespace and name.
pub fn select<'a>(
    report: &'a pb::Report,
    selector: PodSelector<'_>,
) -> Result<Vec<&'a pb::PodExplanation>, ExplainError> {
    if report.explanations.is_empty() {
        return Err(ExplainError::NoneExplained);
    }
    let picked: Vec<&pb::PodExplanation> = report
        .explanations
        .iter()
        .filter(|pod| match selector {
            PodSelector::Pod(wanted) => wanted.split_once('/').is_some_and(|(namespace, name)| {
                name == pod.name
                    && (namespace == pod.namespace
                        || namespace.ends_with(&format!("-{}", pod.namespace)))
            }),
            PodSelector::Owner(wanted) => {
                wanted == pod.owner || wanted == format!("{}/{}", pod.namespace, pod.owner)
            }
        })
        .collect();
    if picked.is_empty() {
        let shown: Vec<String> = report
            .explanations
            .iter()
            .take(3)
            .map(|pod| format!("{}/{}", pod.namespace, pod.name))
            .collect();
        let more = report.explanations.len().saturating_sub(shown.len());
        let some = if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        };
        let selector = match selector {
            PodSelector::Pod(pod) => pod.to_owned(),
            PodSelector::Owner(owner) => format!("of {owner}"),
        };
        return Err(ExplainError::NotFound { selector, some });
    }
    Ok(picked)
}

/// The pods' attempts, newest first, as text.
pub fn explanation_text(pods: &[&pb::PodExplanation]) -> String {
    let mut out = String::new();
    for pod in pods {
        // Writing to a String cannot fail.
        let _ = write_pod(&mut out, pod);
    }
    out
}

fn write_pod(out: &mut String, pod: &pb::PodExplanation) -> std::fmt::Result {
    let owner = if pod.owner.is_empty() {
        String::new()
    } else {
        format!(" ({})", pod.owner)
    };
    writeln!(out, "{}/{}{owner}", pod.namespace, pod.name)?;
    for attempt in pod.attempts.iter().rev() {
        write_attempt(out, attempt)?;
    }
    Ok(())
}

fn write_attempt(out: &mut String, attempt: &pb::SchedulingAttempt) -> std::fmt::Result {
    let at = human(attempt.offset.as_ref());
    if attempt.node.is_empty() {
        writeln!(out, "  at {at}: no node: {}", attempt.message)?;
    } else {
        writeln!(
            out,
            "  at {at}: on {} ({} of {} nodes feasible)",
            attempt.node, attempt.feasible, attempt.nodes
        )?;
        if !attempt.message.is_empty() {
            writeln!(out, "    {}", attempt.message)?;
        }
    }
    if let Some((chosen, runners_up)) = attempt.scores.split_first() {
        writeln!(
            out,
            "    scores (normalized x weight): {} {} = {}",
            chosen.node,
            chosen.total,
            plugin_list(chosen.plugins.iter().filter(|p| p.score != 0).map(|p| (
                p.plugin.as_str(),
                p.score,
                None
            )))
        )?;
        for node in runners_up {
            // Only the plugins that scored it apart from the chosen node.
            let apart = node.plugins.iter().filter_map(|p| {
                let chosen = chosen
                    .plugins
                    .iter()
                    .find(|c| c.plugin == p.plugin)
                    .map_or(0, |c| c.score);
                (chosen != p.score).then_some((p.plugin.as_str(), p.score, Some(chosen)))
            });
            // Equal totals: the scheduler picked one of them at random.
            let apart = if node.total == chosen.total {
                format!("tied, chosen between at random; {}", plugin_list(apart))
            } else {
                format!("{:+}: {}", node.total - chosen.total, plugin_list(apart))
            };
            writeln!(
                out,
                "      runner-up {} {} ({apart})",
                node.node, node.total
            )?;
        }
    }
    let rejected: u32 = attempt.rejected.iter().map(|group| group.nodes).sum();
    for group in &attempt.rejected {
        writeln!(
            out,
            "    {} {}: {}: {} (e.g. {})",
            group.nodes,
            plural(group.nodes, "node", "nodes"),
            group.plugin,
            group.reason,
            group.examples.join(", ")
        )?;
    }
    let unevaluated = attempt
        .nodes
        .saturating_sub(attempt.feasible)
        .saturating_sub(rejected);
    if unevaluated > 0 && !attempt.node.is_empty() {
        writeln!(
            out,
            "    {unevaluated} {} not evaluated (the scheduler had found enough feasible nodes)",
            plural(unevaluated, "node", "nodes")
        )?;
    }
    Ok(())
}

/// Where one pod went, in a line: the node and what decided it over the runner-up.
pub(crate) fn outcome(pod: &pb::PodExplanation) -> String {
    let Some(last) = pod.attempts.last() else {
        return "no attempt".to_owned();
    };
    if last.node.is_empty() {
        return format!("no node: {}", last.message);
    }
    let decided = match last.scores.as_slice() {
        [] | [_] if last.feasible <= 1 => "the only feasible node".to_owned(),
        [] | [_] => "no scores kept".to_owned(),
        [chosen, runner_up, ..] if chosen.total == runner_up.total => {
            format!("tied with {} at {}", runner_up.node, chosen.total)
        }
        [chosen, runner_up, ..] => match decisive(chosen, runner_up) {
            Some((plugin, ours, theirs)) => {
                format!("{plugin} {ours} vs {theirs} on {}", runner_up.node)
            }
            None => format!(
                "{} vs {} on {}",
                chosen.total, runner_up.total, runner_up.node
            ),
        },
    };
    format!("on {} ({decided})", last.node)
}

/// The plugin that scored `chosen` furthest above `runner_up`: its score of each.
fn decisive<'a>(
    chosen: &'a pb::NodeScore,
    runner_up: &pb::NodeScore,
) -> Option<(&'a str, i64, i64)> {
    chosen
        .plugins
        .iter()
        .map(|p| {
            let theirs = runner_up
                .plugins
                .iter()
                .find(|r| r.plugin == p.plugin)
                .map_or(0, |r| r.score);
            (p.plugin.as_str(), p.score, theirs)
        })
        .filter(|(_, ours, theirs)| ours > theirs)
        .max_by_key(|(plugin, ours, theirs)| (ours - theirs, std::cmp::Reverse(*plugin)))
}

/// The explained pods of one workload, oldest first attempt first: a pod's place among them
/// is how two runs' pods, named anew in each, are matched.
fn of_owner<'a>(
    report: &'a pb::Report,
    namespace: &str,
    owner: &str,
) -> Vec<&'a pb::PodExplanation> {
    let mut pods: Vec<&pb::PodExplanation> = report
        .explanations
        .iter()
        .filter(|pod| pod.namespace == namespace && pod.owner == owner)
        .collect();
    pods.sort_by_key(|pod| {
        pod.attempts
            .first()
            .map(|a| crate::timeline::duration_from_proto(a.offset.as_ref()))
    });
    pods
}

/// The same pod, or the pods of a workload, in two or more reports (the first the baseline),
/// side by side: where each went and what decided it. Pods are named anew in each run (a
/// Deployment's pods have random names), so a pod absent from a report is matched by its place
/// among its workload's explained pods there.
pub fn compare_explained(
    reports: &[(String, pb::Report)],
    selector: PodSelector<'_>,
) -> Result<String, ExplainError> {
    let Some((_, baseline)) = reports.first() else {
        return Ok(String::new());
    };
    let mut picked = select(baseline, selector)?;
    // A workload's pods in the order the scheduler first tried them.
    picked.sort_by_key(|pod| {
        pod.attempts
            .first()
            .map(|a| crate::timeline::duration_from_proto(a.offset.as_ref()))
    });
    let mut out = String::new();
    for pod in picked {
        let in_baseline = of_owner(baseline, &pod.namespace, &pod.owner);
        let place = in_baseline
            .iter()
            .position(|p| p.name == pod.name)
            .unwrap_or_default();
        let owner = if pod.owner.is_empty() {
            "a bare pod"
        } else {
            &pod.owner
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{}/{} ({owner}, its pod {} of those explained)",
            pod.namespace,
            pod.name,
            place + 1
        );
        for (name, report) in reports {
            let same = report
                .explanations
                .iter()
                .find(|p| p.namespace == pod.namespace && p.name == pod.name)
                .map(|p| (p, ""))
                .or_else(|| {
                    of_owner(report, &pod.namespace, &pod.owner)
                        .get(place)
                        .map(|p| (*p, " (same place)"))
                });
            let line = match same {
                Some((p, how)) => format!("{}{how} {}", p.name, outcome(p)),
                None => "not explained".to_owned(),
            };
            let _ = writeln!(out, "  {name}: {line}");
        }
    }
    Ok(out)
}

/// `NodeResourcesFit 88, BalancedAllocation 92`; against the chosen node's, `41 vs 88`.
fn plugin_list<'a>(plugins: impl Iterator<Item = (&'a str, i64, Option<i64>)>) -> String {
    let listed: Vec<String> = plugins
        .map(|(plugin, score, chosen)| match chosen {
            Some(chosen) => format!("{plugin} {score} vs {chosen}"),
            None => format!("{plugin} {score}"),
        })
        .collect();
    if listed.is_empty() {
        "every plugin alike".to_owned()
    } else {
        listed.join(", ")
    }
}

fn plural<'a>(n: u32, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use ksim_proto::json::of_millis;

    fn score(plugin: &str, score: i64) -> pb::PluginScore {
        pb::PluginScore {
            plugin: plugin.to_owned(),
            score,
        }
    }

    fn report() -> pb::Report {
        let waited = pb::SchedulingAttempt {
            offset: Some(of_millis(40_000)),
            nodes: 1000,
            message: "0/1000 nodes are available".to_owned(),
            rejected: vec![
                pb::FilterRejection {
                    plugin: "NodeResourcesFit".to_owned(),
                    reason: "Insufficient nvidia.com/gpu".to_owned(),
                    nodes: 997,
                    examples: vec!["cpu-1".to_owned(), "cpu-2".to_owned(), "cpu-3".to_owned()],
                },
                pb::FilterRejection {
                    plugin: "TaintToleration".to_owned(),
                    reason: "node(s) had untolerated taint(s)".to_owned(),
                    nodes: 3,
                    examples: vec!["a100-1".to_owned()],
                },
            ],
            ..Default::default()
        };
        let placed = pb::SchedulingAttempt {
            offset: Some(of_millis(72_000)),
            node: "gpu-2".to_owned(),
            nodes: 1001,
            feasible: 2,
            rejected: vec![pb::FilterRejection {
                plugin: "NodeResourcesFit".to_owned(),
                reason: "Insufficient nvidia.com/gpu".to_owned(),
                nodes: 996,
                examples: vec!["cpu-1".to_owned()],
            }],
            scores: vec![
                pb::NodeScore {
                    node: "gpu-2".to_owned(),
                    total: 180,
                    plugins: vec![
                        score("BalancedAllocation", 92),
                        score("NodeResourcesFit", 88),
                    ],
                },
                pb::NodeScore {
                    node: "gpu-3".to_owned(),
                    total: 180,
                    plugins: vec![
                        score("BalancedAllocation", 92),
                        score("NodeResourcesFit", 88),
                    ],
                },
                pb::NodeScore {
                    node: "gpu-1".to_owned(),
                    total: 133,
                    plugins: vec![
                        score("BalancedAllocation", 92),
                        score("NodeResourcesFit", 41),
                    ],
                },
            ],
            ..Default::default()
        };
        pb::Report {
            explanations: vec![pb::PodExplanation {
                namespace: "ml".to_owned(),
                name: "train-7".to_owned(),
                owner: "Job/train".to_owned(),
                attempts: vec![waited, placed],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_reads_newest_attempt_first_with_what_separated_the_runner_up() {
        let report = report();
        let pods = select(&report, PodSelector::Pod("ml/train-7")).unwrap();
        let text = explanation_text(&pods);
        assert_eq!(
            text,
            "ml/train-7 (Job/train)\n\
             \x20 at 1m12s: on gpu-2 (2 of 1001 nodes feasible)\n\
             \x20   scores (normalized x weight): gpu-2 180 = BalancedAllocation 92, NodeResourcesFit 88\n\
             \x20     runner-up gpu-3 180 (tied, chosen between at random; every plugin alike)\n\
             \x20     runner-up gpu-1 133 (-47: NodeResourcesFit 41 vs 88)\n\
             \x20   996 nodes: NodeResourcesFit: Insufficient nvidia.com/gpu (e.g. cpu-1)\n\
             \x20   3 nodes not evaluated (the scheduler had found enough feasible nodes)\n\
             \x20 at 40s: no node: 0/1000 nodes are available\n\
             \x20   997 nodes: NodeResourcesFit: Insufficient nvidia.com/gpu (e.g. cpu-1, cpu-2, cpu-3)\n\
             \x20   3 nodes: TaintToleration: node(s) had untolerated taint(s) (e.g. a100-1)\n"
        );
    }

    #[test]
    fn two_runs_pods_are_matched_by_name_or_place_and_what_decided_each_is_named() {
        let baseline = report();
        let mut packing = report();
        // Named anew in the other run; placed on the other node, decided by NodeResourcesFit.
        let pod = &mut packing.explanations[0];
        pod.name = "train-9".to_owned();
        let placed = pod.attempts.last_mut().unwrap();
        placed.node = "gpu-1".to_owned();
        placed.scores = vec![
            pb::NodeScore {
                node: "gpu-1".to_owned(),
                total: 190,
                plugins: vec![
                    score("BalancedAllocation", 90),
                    score("NodeResourcesFit", 100),
                ],
            },
            pb::NodeScore {
                node: "gpu-2".to_owned(),
                total: 150,
                plugins: vec![
                    score("BalancedAllocation", 92),
                    score("NodeResourcesFit", 58),
                ],
            },
        ];
        let reports = vec![
            ("spread".to_owned(), baseline),
            ("packing".to_owned(), packing),
        ];
        let text = compare_explained(&reports, PodSelector::Pod("ml/train-7")).unwrap();
        assert_eq!(
            text,
            "ml/train-7 (Job/train, its pod 1 of those explained)\n\
             \x20 spread: train-7 on gpu-2 (tied with gpu-3 at 180)\n\
             \x20 packing: train-9 (same place) on gpu-1 (NodeResourcesFit 100 vs 58 on gpu-2)\n"
        );
    }

    #[test]
    fn pods_are_found_by_namespace_and_name_or_by_workload_and_a_miss_names_some() {
        let report = report();
        // The simulated namespace finds it too.
        assert_eq!(
            select(&report, PodSelector::Pod("ksim-sim-1-ml/train-7"))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            select(&report, PodSelector::Owner("Job/train"))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            select(&report, PodSelector::Owner("ml/Job/train"))
                .unwrap()
                .len(),
            1
        );
        let miss = select(&report, PodSelector::Pod("ml/train-8")).unwrap_err();
        assert_eq!(
            miss.to_string(),
            "the report explains no pod ml/train-8; it explains ml/train-7"
        );
        assert_eq!(
            select(&pb::Report::default(), PodSelector::Pod("ml/train-7")),
            Err(ExplainError::NoneExplained)
        );
    }
}
