//! The report as one self-contained web page (`ksim report --html`): the summary, the timeline
//! and fidelity charts (hover for values), why pods waited and why nodes stayed as tables one
//! sorts by a click, and the explained pods, found by name. Nothing is fetched when it is
//! viewed: the charting library (uPlot, which the caller reads from where
//! deploy/uplot/fetch.sh cached it), the page's own script and the report's figures are inline.

use serde_json::{Value, json};

use ksim_proto::ksim::driver::v1 as pb;

use crate::compare::Comparison;
use crate::explain::outcome;
use crate::model::nodes_total;
use crate::timeline::duration_from_proto;

/// The page's own script (ksim's): builds the page from the view.
const SCRIPT: &str = include_str!("report.js");

/// The charting library a page carries: its script and stylesheet, as the package has them.
#[derive(Debug, Clone)]
pub struct ChartLibrary {
    pub script: String,
    pub style: String,
}

/// Why a page could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HtmlError {
    #[error("the charting library's {0} would end the page's own <script> or <style> early")]
    UnsafeLibrary(&'static str),
}

/// The page of `report`.
pub fn render_html(report: &pb::Report, library: &ChartLibrary) -> Result<String, HtmlError> {
    page(
        &format!("ksim report {}", report.simulation_id),
        "The summary, as ksim report prints it",
        &crate::summary(report),
        &view(report),
        library,
    )
}

/// The page of reports side by side (`ksim compare --html`, an experiment's
/// `comparison.html`): each figure per run with its difference to the baseline and, with
/// repeats, whether it is beyond the noise; and each run's nodes and pending pods on one chart.
/// `runs` are the reports charted (an experiment's: each variant's first run).
pub fn render_comparison_html(
    comparison: &Comparison,
    runs: &[(String, pb::Report)],
    library: &ChartLibrary,
) -> Result<String, HtmlError> {
    page(
        "ksim comparison",
        "The comparison, as ksim compare prints it",
        &comparison.table(),
        &comparison_view(comparison, runs),
        library,
    )
}

/// A page: `title`, the view the script builds it from, the text behind a fold, the library.
fn page(
    title: &str,
    text_label: &str,
    text: &str,
    view: &Value,
    library: &ChartLibrary,
) -> Result<String, HtmlError> {
    if library.script.to_ascii_lowercase().contains("</script") {
        return Err(HtmlError::UnsafeLibrary("script"));
    }
    if library.style.to_ascii_lowercase().contains("</style") {
        return Err(HtmlError::UnsafeLibrary("stylesheet"));
    }
    // Inside <script type="application/json">: "</" would end it, "<!--" would open a comment.
    let view = view
        .to_string()
        .replace("</", "<\\/")
        .replace("<!--", "<\\!--");
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n<style>{library_style}</style>\n</head>\n\
         <body>\n<h1>{title}</h1>\n<div id=\"figures\"></div>\n<div id=\"charts\"></div>\n\
         <div id=\"tables\"></div>\n<div id=\"explained\"></div>\n\
         <details><summary>{text_label}</summary>\n\
         <pre id=\"summary\">{text}</pre></details>\n\
         <script type=\"application/json\" id=\"ksim-view\">{view}</script>\n\
         <script>{library_script}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        title = escape(title),
        library_style = library.style,
        text = escape(text),
        library_script = library.script,
    ))
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:20px;color:#222}\
#figures{display:flex;flex-wrap:wrap;gap:12px}\
.figure{border:1px solid #ccc;border-radius:6px;padding:8px 12px;min-width:120px}\
.figure .value{display:block;font-size:1.4em;font-weight:600}.figure .label{color:#555}\
table{border-collapse:collapse}th{cursor:pointer;background:#eee}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto}";

/// What the page's script builds the page from: headline figures, chart series, tables and
/// explanations, in recorded time.
fn view(report: &pb::Report) -> Value {
    let costs = report.costs.clone().unwrap_or_default();
    let pending = report.pod_pending_time.unwrap_or_default();
    let seconds = |d: Option<&prost_types::Duration>| duration_from_proto(d).as_secs_f64();
    let figures = json!([
        ["peak_nodes", "peak nodes", report.peak_nodes],
        ["node_hours", "node-hours", costs.node_hours],
        ["cost", "cost", costs.cost],
        [
            "pending_p99_s",
            "pod pending p99 (s)",
            seconds(pending.p99.as_ref())
        ],
        [
            "pods_never_scheduled",
            "pods never scheduled",
            costs.pods_never_scheduled
        ],
        ["events_applied", "events applied", report.events_applied],
    ]);
    let x: Vec<f64> = report
        .timeline
        .iter()
        .map(|bucket| seconds(bucket.offset.as_ref()))
        .collect();
    let series = |label: &str, values: Vec<u64>| json!({ "label": label, "values": values });
    let pods = |f: fn(&pb::PodPhaseCounts) -> u64| -> Vec<u64> {
        report
            .timeline
            .iter()
            .map(|bucket| bucket.pods.as_ref().map_or(0, f))
            .collect()
    };
    let mut charts = vec![json!({
        "name": "timeline",
        "title": "Nodes and pods",
        "x": x,
        "series": [
            series("nodes", report.timeline.iter().map(nodes_total).collect()),
            series(
                "ready nodes",
                report
                    .timeline
                    .iter()
                    .map(|b| b.nodes.iter().map(|g| g.ready_nodes).sum())
                    .collect()
            ),
            series("pods running", pods(|p| p.running)),
            series("pods pending", pods(|p| p.pending)),
            series(
                "unscheduled",
                report.timeline.iter().map(|b| b.unscheduled_pods).collect()
            ),
        ],
    })];
    if let Some(fidelity) = report.fidelity.as_ref().filter(|f| !f.buckets.is_empty()) {
        let state =
            |bucket: &pb::FidelityBucket, simulated: bool, f: fn(&pb::ClusterState) -> u64| {
                let state = if simulated {
                    &bucket.simulated
                } else {
                    &bucket.recorded
                };
                state.as_ref().map_or(0, f)
            };
        let ready = |state: &pb::ClusterState| state.ready_nodes.values().sum();
        let line = |label: &str, simulated: bool, f: fn(&pb::ClusterState) -> u64| {
            json!({
                "label": label,
                "dashed": !simulated,
                "values": fidelity
                    .buckets
                    .iter()
                    .map(|b| state(b, simulated, f))
                    .collect::<Vec<u64>>(),
            })
        };
        charts.push(json!({
            "name": "fidelity",
            "title": "Recorded (dashed) and simulated",
            "x": fidelity
                .buckets
                .iter()
                .map(|b| seconds(b.offset.as_ref()))
                .collect::<Vec<f64>>(),
            "series": [
                line("recorded ready nodes", false, ready),
                line("simulated ready nodes", true, ready),
                line("recorded pods pending", false, |s| s.pods_pending),
                line("simulated pods pending", true, |s| s.pods_pending),
            ],
        }));
    }
    let mut tables = vec![json!({
        "name": "waits",
        "title": "Why pods waited",
        "columns": ["source", "reason", "workload", "times"],
        "rows": report
            .waits
            .iter()
            .map(|w| json!([w.source, w.reason, w.owner, w.count]))
            .collect::<Vec<_>>(),
    })];
    if let Some(kept) = &report.nodes_kept {
        tables.push(json!({
            "name": "nodes_kept",
            "title": "Why nodes stayed",
            "columns": ["reason", "peak nodes", "first seen (s)"],
            "rows": kept
                .reasons
                .iter()
                .map(|r| json!([r.name, r.peak_nodes, seconds(r.first_seen.as_ref())]))
                .collect::<Vec<_>>(),
        }));
    }
    if let Some(costs) = &report.costs {
        tables.push(json!({
            "name": "groups",
            "title": "Node groups",
            "columns": ["group", "instance type", "node-hours", "cost"],
            "rows": costs
                .groups
                .iter()
                .map(|g| json!([g.group, g.instance_type, g.node_hours, g.cost]))
                .collect::<Vec<_>>(),
        }));
    }
    // Pending pod-seconds by cause: waiting for the scheduler, for a node to boot, for the
    // pod to start.
    if let Some(split) = &report.pending_split {
        tables.push(json!({
            "name": "pending_split",
            "title": "Pending, by cause",
            "columns": ["cause", "pod-seconds"],
            "rows": [
                ["scheduling", split.scheduling_pod_seconds],
                ["node boot", split.node_boot_pod_seconds],
                ["start", split.start_pod_seconds],
            ],
        }));
    }
    tables.extend(workload_tables(report));
    let explanations: Vec<Value> = report
        .explanations
        .iter()
        .map(|pod| {
            json!({
                "pod": format!("{}/{}", pod.namespace, pod.name),
                "owner": pod.owner,
                "outcome": outcome(pod),
                "text": crate::explain::explanation_text(&[pod]),
            })
        })
        .collect();
    json!({ "figures": figures, "charts": charts, "tables": tables, "explanations": explanations })
}

/// The per-workload tables a report has: usage against requests, what limits did, replicas
/// recorded against simulated, availability over the disruptions.
fn workload_tables(report: &pb::Report) -> Vec<Value> {
    let mut tables = Vec::new();
    let mut table = |name: &str, title: &str, columns: &[&str], rows: Vec<Value>| {
        if !rows.is_empty() {
            tables.push(json!({ "name": name, "title": title, "columns": columns, "rows": rows }));
        }
    };
    if let Some(usage) = &report.usage {
        table(
            "usage",
            "Workloads: p95 usage against requests",
            &[
                "workload",
                "samples",
                "p95 CPU (m)",
                "CPU requested (m)",
                "p95 memory (B)",
                "memory requested (B)",
            ],
            usage
                .usage_vs_requests
                .iter()
                .map(|w| {
                    json!([
                        w.name,
                        w.samples,
                        w.p95_cpu_millis,
                        w.requested_cpu_millis,
                        w.p95_memory_bytes,
                        w.requested_memory_bytes
                    ])
                })
                .collect(),
        );
        table(
            "limits",
            "Workloads: what their limits did",
            &[
                "workload",
                "OOM kills",
                "throttled CPU-s",
                "pressure evictions",
            ],
            usage
                .workloads
                .iter()
                .map(|w| {
                    json!([
                        w.name,
                        w.oom_kills,
                        w.throttled_cpu_seconds,
                        w.pressure_evictions
                    ])
                })
                .collect(),
        );
    }
    if let Some(scaling) = &report.workload_scaling {
        table(
            "replicas",
            "Workloads: replicas, recorded and simulated",
            &[
                "workload",
                "recorded replica-s",
                "simulated replica-s",
                "scale events",
            ],
            scaling
                .workloads
                .iter()
                .map(|w| {
                    json!([
                        w.name,
                        w.recorded_replica_seconds,
                        w.simulated_replica_seconds,
                        w.scale_events.len()
                    ])
                })
                .collect(),
        );
    }
    if let Some(disruptions) = &report.disruptions {
        table(
            "availability",
            "Workloads: availability over the disruptions",
            &[
                "workload",
                "desired",
                "lowest ready",
                "availability",
                "pods evicted",
                "evictions blocked",
            ],
            disruptions
                .workloads
                .iter()
                .map(|w| {
                    json!([
                        w.name,
                        w.desired,
                        w.lowest_ready,
                        w.availability,
                        w.pods_evicted,
                        w.evictions_blocked
                    ])
                })
                .collect(),
        );
    }
    tables
}

/// The comparison's view: a table of the figures (each run's value; after the baseline, its
/// difference, relative difference and noise verdict), and the runs' nodes and pending pods
/// over recorded time, each run a series (null where a run has no bucket at that time).
fn comparison_view(comparison: &Comparison, runs: &[(String, pb::Report)]) -> Value {
    let mut columns = vec!["figure".to_owned()];
    for (i, run) in comparison.runs.iter().enumerate() {
        columns.push(match i {
            0 if run != "baseline" => format!("{run} (baseline)"),
            _ => run.clone(),
        });
        if i > 0 {
            columns.push(format!("{run}: difference"));
            columns.push(format!("{run}: noise"));
        }
    }
    let rows: Vec<Value> = comparison
        .figures
        .iter()
        .map(|figure| {
            let mut row = vec![json!(figure.name)];
            for i in 0..comparison.runs.len() {
                row.push(json!(figure.values.get(i).copied().flatten()));
                if i > 0 {
                    let delta = figure.deltas.get(i).copied().flatten();
                    let relative = figure.relative.get(i).copied().flatten();
                    row.push(json!(match (delta, relative) {
                        (Some(d), Some(r)) => format!("{d:+.4} ({:+.1}%)", r * 100.0),
                        (Some(d), None) => format!("{d:+.4}"),
                        _ => String::new(),
                    }));
                    row.push(json!(match figure.noise.get(i).cloned().flatten() {
                        Some(n) if n.beyond_noise => format!("beyond noise (p {:.3})", n.p_value),
                        Some(n) => format!("within noise (p {:.3})", n.p_value),
                        None => String::new(),
                    }));
                }
            }
            Value::Array(row)
        })
        .collect();
    let mut x: Vec<f64> = runs
        .iter()
        .flat_map(|(_, report)| report.timeline.iter())
        .map(|bucket| duration_from_proto(bucket.offset.as_ref()).as_secs_f64())
        .collect();
    x.sort_by(f64::total_cmp);
    x.dedup();
    let series = |what: &str, f: fn(&pb::TimelineBucket) -> u64| -> Vec<Value> {
        runs.iter()
            .map(|(name, report)| {
                let at: std::collections::HashMap<u64, u64> = report
                    .timeline
                    .iter()
                    .map(|b| {
                        (
                            duration_from_proto(b.offset.as_ref()).as_millis() as u64,
                            f(b),
                        )
                    })
                    .collect();
                let values: Vec<Option<u64>> = x
                    .iter()
                    .map(|seconds| at.get(&((seconds * 1000.0).round() as u64)).copied())
                    .collect();
                json!({ "label": format!("{name} {what}"), "values": values })
            })
            .collect()
    };
    json!({
        "figures": [],
        "charts": [
            { "name": "nodes", "title": "Nodes, per run", "x": x, "series": series("nodes", nodes_total) },
            {
                "name": "pending",
                "title": "Pods pending, per run",
                "x": x,
                "series": series("pending", |b| b.pods.as_ref().map_or(0, |p| p.pending)),
            },
        ],
        "tables": [{
            "name": "figures",
            "title": "Figures, each against the baseline",
            "columns": columns,
            "rows": rows,
        }],
        "explanations": [],
    })
}

/// Text for HTML: `&`, `<`, `>` and quotes escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;

    fn library() -> ChartLibrary {
        ChartLibrary {
            script: "var uPlot = function () {};".to_owned(),
            style: ".uplot{}".to_owned(),
        }
    }

    #[test]
    fn the_page_carries_the_reports_view_the_library_and_nothing_that_ends_its_scripts() {
        let mut report = fixtures::report();
        report.simulation_id = "sim-</script><b>".to_owned();
        report.explanations = vec![pb::PodExplanation {
            namespace: "shop".into(),
            name: "web-1".into(),
            owner: "Deployment/web".into(),
            attempts: vec![pb::SchedulingAttempt {
                node: "node-1".into(),
                nodes: 1,
                feasible: 1,
                ..Default::default()
            }],
        }];
        let page = render_html(&report, &library()).unwrap();
        // The id is text wherever it shows: never markup, never the end of a script.
        assert_eq!(page.matches("</script>").count(), 3, "{page}");
        assert!(page.contains("<title>ksim report sim-&lt;/script&gt;&lt;b&gt;</title>"));
        assert!(page.contains("var uPlot = function () {};"));
        let start = page.find("id=\"ksim-view\">").unwrap() + "id=\"ksim-view\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        let view: Value = serde_json::from_str(&page[start..end].replace("<\\/", "</")).unwrap();
        assert_eq!(
            view["figures"][0],
            json!(["peak_nodes", "peak nodes", report.peak_nodes])
        );
        let timeline = &view["charts"][0];
        assert_eq!(
            timeline["x"].as_array().unwrap().len(),
            report.timeline.len()
        );
        assert_eq!(
            timeline["series"][0]["values"],
            json!(report.timeline.iter().map(nodes_total).collect::<Vec<_>>())
        );
        let tables: Vec<&str> = view["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            tables.contains(&"waits") && tables.contains(&"pending_split"),
            "{tables:?}"
        );
        assert_eq!(view["explanations"][0]["pod"], "shop/web-1");
        assert_eq!(
            view["explanations"][0]["outcome"],
            "on node-1 (the only feasible node)"
        );
    }

    #[test]
    fn a_comparison_page_has_each_figure_per_run_and_each_runs_nodes() {
        let baseline = fixtures::report();
        let mut other = fixtures::report();
        other.peak_nodes += 2;
        let runs = vec![("a".to_owned(), baseline), ("b".to_owned(), other)];
        let comparison = crate::compare(&runs);
        let page = render_comparison_html(&comparison, &runs, &library()).unwrap();
        let start = page.find("id=\"ksim-view\">").unwrap() + "id=\"ksim-view\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        let view: Value = serde_json::from_str(&page[start..end]).unwrap();
        let table = &view["tables"][0];
        assert_eq!(
            table["columns"],
            json!(["figure", "a (baseline)", "b", "b: difference", "b: noise"])
        );
        let peak = table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row[0] == "peak_nodes")
            .unwrap();
        assert_eq!(peak[3], json!("+2.0000 (+66.7%)"), "{peak}");
        let nodes = &view["charts"][0]["series"];
        assert_eq!(nodes[0]["label"], "a nodes");
        assert_eq!(
            nodes[1]["values"].as_array().unwrap().len(),
            view["charts"][0]["x"].as_array().unwrap().len()
        );
    }

    #[test]
    fn a_library_that_would_end_the_page_early_is_refused() {
        let script = ChartLibrary {
            script: "x = '</SCRIPT>'".to_owned(),
            ..library()
        };
        assert_eq!(
            render_html(&fixtures::report(), &script),
            Err(HtmlError::UnsafeLibrary("script"))
        );
    }
}
