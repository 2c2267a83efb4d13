//! The few lines the CLI prints about a report.

use std::fmt::Write as _;
use std::time::Duration;

use ksim_proto::ksim::{driver::v1 as pb, env::v1 as env};

use super::attribution::cause_of;
use super::timeline::{duration_from_proto, duration_to_proto};
use crate::{Gvk, NodeChangeCause, NodeChangeKind};

/// Object errors listed one by one; the rest are counted.
const LISTED_ERRORS: usize = 3;
/// Longest error message shown, in characters; API server messages can run to pages.
const MESSAGE_CHARS: usize = 160;
/// Node names listed per kind of change; the rest are counted, so a big scale-up stays one line.
const LISTED_NODES: usize = 8;

/// A short multi-line summary for a terminal, ending in a newline. It takes the proto because
/// that is what the CLI receives.
pub fn summary(report: &pb::Report) -> String {
    summary_ended(report, pb::SimulationState::Unspecified)
}

/// [`summary`] of a simulation in `state`: its header says a failed or cancelled run ended so,
/// where the report alone (complete once the replay stopped, however) would say "complete".
pub fn summary_ended(report: &pb::Report, state: pb::SimulationState) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_summary(&mut out, report, state);
    out
}

fn write_summary(
    out: &mut String,
    report: &pb::Report,
    ended: pb::SimulationState,
) -> std::fmt::Result {
    let state = match ended {
        pb::SimulationState::Failed => "failed",
        pb::SimulationState::Cancelled => "cancelled",
        _ if report.complete => "complete",
        _ => "not complete",
    };
    writeln!(out, "Simulation {} ({state})", report.simulation_id)?;
    if report.speed > 0.0 && report.speed != 1.0 {
        writeln!(
            out,
            "  replayed at {}x: times below are recorded time ({} buckets)",
            trimmed(report.speed),
            human(report.bucket_width.as_ref())
        )?;
    }
    // First, so a run whose figures are known to be off says so before them.
    for warning in &report.warnings {
        writeln!(out, "  warning: {warning}")?;
    }
    // Which trace the figures are of: the rules it went through, one a line, aligned like files.
    let mut transforms = report.trace_transforms.iter();
    if let Some(first) = transforms.next() {
        writeln!(out, "  transformed by:    {first}")?;
        for transform in transforms {
            writeln!(out, "                     {transform}")?;
        }
    }
    writeln!(out, "  events applied:    {}", report.events_applied)?;
    writeln!(out, "  peak nodes:        {}", report.peak_nodes)?;

    if let Some(last) = report.timeline.last() {
        let nodes: u64 = last.nodes.iter().map(|group| group.nodes).sum();
        let ready: u64 = last.nodes.iter().map(|group| group.ready_nodes).sum();
        let pods = last.pods.unwrap_or_default();
        writeln!(
            out,
            "  at the end:        {nodes} nodes ({ready} ready) in {} groups; pods {} running, \
             {} pending ({} unscheduled), {} succeeded, {} failed, {} unknown",
            last.nodes.len(),
            pods.running,
            pods.pending,
            last.unscheduled_pods,
            pods.succeeded,
            pods.failed,
            pods.unknown,
        )?;
    }

    let pending = report.pod_pending_time.unwrap_or_default();
    writeln!(
        out,
        "  pod pending time:  p50 {}, p90 {}, p99 {} ({} pods)",
        human(pending.p50.as_ref()),
        human(pending.p90.as_ref()),
        human(pending.p99.as_ref()),
        pending.count
    )?;
    if let Some(line) = pending_split(report) {
        writeln!(out, "  pending, by cause: {line}")?;
    }
    for (label, percentiles, what) in [
        (
            "pod start time:   ",
            report.pod_start_time,
            "pods, bound to Running",
        ),
        (
            "node ready time:  ",
            report.node_ready_time,
            "nodes, registered to Ready",
        ),
    ] {
        let Some(p) = percentiles.filter(|p| p.count > 0) else {
            continue;
        };
        writeln!(
            out,
            "  {label} p50 {}, p90 {}, p99 {} ({} {what})",
            human(p.p50.as_ref()),
            human(p.p90.as_ref()),
            human(p.p99.as_ref()),
            p.count
        )?;
    }
    let lateness = report.lateness.unwrap_or_default();
    writeln!(
        out,
        "  lateness:          p50 {}, p99 {} ({} events)",
        human(lateness.p50.as_ref()),
        human(lateness.p99.as_ref()),
        lateness.count
    )?;

    writeln!(out, "  autoscaler:        {}", autoscaler_nodes(report))?;
    if let Some(line) = autoscaler_outages(report) {
        writeln!(out, "  {line}")?;
    }
    for line in pool_nodes(report) {
        writeln!(out, "  {line}")?;
    }
    if let Some(costs) = &report.costs {
        for line in cost_lines(costs) {
            writeln!(out, "  {line}")?;
        }
    }
    if !report.waits.is_empty() {
        writeln!(out, "  why pods waited:   {}", waits(&report.waits))?;
    }
    if let Some(accelerators) = &report.accelerators {
        for line in gpu_lines(accelerators) {
            writeln!(out, "  {line}")?;
        }
    }
    if !report.node_disruptions.is_empty() {
        writeln!(
            out,
            "  karpenter:         {}",
            waits(&report.node_disruptions)
        )?;
    }
    if let Some(line) = crate::nodes_kept_line(report) {
        writeln!(out, "  why nodes stayed:  {line}")?;
    }
    if let Some(disruptions) = &report.disruptions {
        for line in disruption_lines(disruptions) {
            writeln!(out, "  {line}")?;
        }
    }
    writeln!(out, "  fidelity:          {}", fidelity(report))?;
    writeln!(out, "  provisioning:      {}", provisioning(report))?;
    writeln!(out, "  usage:             {}", usage(report))?;
    if let Some(line) = limits(report) {
        writeln!(out, "  limits:            {line}")?;
    }
    if let Some(line) = utilization(report) {
        writeln!(out, "  utilization:       {line}")?;
    }
    if let Some(line) = rightsizing(report) {
        writeln!(out, "  rightsizing:       {line}")?;
    }
    if let Some(line) = replicas(report) {
        writeln!(out, "  replicas:          {line}")?;
        for line in replica_lines(report) {
            writeln!(out, "    {line}")?;
        }
    }
    if let Some(configuration) = &report.configuration {
        for line in configuration_lines(configuration) {
            writeln!(out, "  {line}")?;
        }
    }

    writeln!(out, "  object errors:     {}", report.object_errors.len())?;
    for error in report.object_errors.iter().take(LISTED_ERRORS) {
        writeln!(out, "    - {}", describe(error))?;
    }
    if let Some(more) = report
        .object_errors
        .len()
        .checked_sub(LISTED_ERRORS)
        .filter(|n| *n > 0)
    {
        writeln!(out, "    ... and {more} more")?;
    }

    if let Some(files) = &report.artifacts {
        let paths = [
            &files.json_path,
            &files.csv_path,
            &files.svg_path,
            &files.fidelity_csv_path,
            &files.fidelity_svg_path,
            &files.replicas_csv_path,
        ];
        let mut paths = paths.into_iter().filter(|path| !path.is_empty());
        if let Some(first) = paths.next() {
            writeln!(out, "  files:             {first}")?;
            for path in paths {
                writeln!(out, "                     {path}")?;
            }
        }
    }
    Ok(())
}

/// Workloads listed under the disruptions, least available first.
const LISTED_WORKLOADS: usize = 5;

/// ", N blocked by a PodDisruptionBudget" when any was.
fn blocked(count: u64) -> String {
    if count == 0 {
        String::new()
    } else {
        format!(", {count} blocked by a PodDisruptionBudget")
    }
}

/// Disruptions listed one a line (a spot rate over a day makes hundreds).
const LISTED_DISRUPTIONS: usize = 10;

/// Each disruption as it happened, then what it cost the least available workloads.
fn disruption_lines(disruptions: &pb::Disruptions) -> Vec<String> {
    let mut lines = Vec::new();
    for (index, outcome) in disruptions
        .outcomes
        .iter()
        .enumerate()
        .take(LISTED_DISRUPTIONS)
    {
        let label = if index == 0 {
            "disruptions:      "
        } else {
            "                  "
        };
        let target = if !outcome.zone.is_empty() {
            format!("{} ({})", outcome.zone, outcome.node_group)
        } else if !outcome.recorded_node.is_empty() {
            format!(
                "{} (recorded {})",
                outcome.node_group, outcome.recorded_node
            )
        } else {
            outcome.node_group.clone()
        };
        let what = format!(
            "{} of {target} at {}",
            outcome.kind,
            human(outcome.offset.as_ref())
        );
        let line = if outcome.error.is_empty() {
            let back = outcome.recovered_offset.as_ref().map_or_else(
                || "not over within the run".to_owned(),
                |at| format!("over at {}", human(Some(at))),
            );
            let recovery = match (&outcome.time_to_recovery, outcome.recovered) {
                (Some(after), _) => format!("workloads whole again after {}", human(Some(after))),
                (None, true) => "no workload dropped".to_owned(),
                (None, false) => "workloads not whole again by the end".to_owned(),
            };
            let nodes = if outcome.kind == "stockout" {
                "scale-ups refused".to_owned()
            } else {
                format!(
                    "{} node(s) ({})",
                    outcome.nodes.len(),
                    outcome.nodes.join(", ")
                )
            };
            let drained = match outcome.kind.as_str() {
                "spot-interruption" => format!(
                    " ({} eviction(s) blocked, {} pod(s) lost)",
                    outcome.evictions_blocked, outcome.pods_lost
                ),
                "node-pool-upgrade" => format!(
                    " ({} stuck drain(s){}, {} eviction(s) blocked, {} pod(s) lost)",
                    outcome.stuck_drains.len(),
                    if outcome.stuck_drains.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", outcome.stuck_drains.join(", "))
                    },
                    outcome.evictions_blocked,
                    outcome.pods_lost
                ),
                _ => String::new(),
            };
            let added = match outcome.nodes_added {
                0 => String::new(),
                added => format!("; {added} node(s) added meanwhile"),
            };
            format!("{what}: {nodes}, {back}{drained}; {recovery}{added}")
        } else {
            format!("{what}: not applied: {}", outcome.error)
        };
        lines.push(format!("{label} {line}"));
    }
    if let Some(more) = disruptions
        .outcomes
        .len()
        .checked_sub(LISTED_DISRUPTIONS)
        .filter(|more| *more > 0)
    {
        lines.push(format!(
            "                   ... and {more} more (report.json's disruptions.outcomes)"
        ));
    }
    let mut workloads: Vec<&pb::WorkloadAvailability> = disruptions.workloads.iter().collect();
    workloads.sort_by(|a, b| {
        a.availability
            .total_cmp(&b.availability)
            .then(a.name.cmp(&b.name))
    });
    let below: Vec<String> = workloads
        .iter()
        .filter(|w| w.availability < 1.0)
        .take(LISTED_WORKLOADS)
        .map(|w| {
            format!(
                "{} {:.1}% ({} below {} desired ready, lowest {}, {} evicted{})",
                w.name,
                w.availability * 100.0,
                human(w.time_below_desired.as_ref()),
                w.desired,
                w.lowest_ready,
                w.pods_evicted,
                blocked(w.evictions_blocked)
            )
        })
        .collect();
    let whole = workloads.iter().filter(|w| w.availability >= 1.0).count();
    lines.push(format!(
        "availability:      {} workload(s) always at desired ready, {} below at times; {} \
         evicted{} (seed {})",
        whole,
        workloads.len() - whole,
        disruptions.pods_evicted,
        blocked(disruptions.evictions_blocked),
        disruptions.seed
    ));
    lines.extend(below.into_iter().map(|line| format!("  {line}")));
    lines
}

fn describe(error: &pb::ObjectError) -> String {
    let operation = match pb::ObjectOperation::try_from(error.operation) {
        Ok(pb::ObjectOperation::Apply) => "apply",
        Ok(pb::ObjectOperation::Delete) => "delete",
        Ok(pb::ObjectOperation::CronRun) => "cron run",
        Ok(pb::ObjectOperation::Unspecified) | Err(_) => "?",
    };
    let kind = error
        .gvk
        .as_ref()
        .map(|gvk| Gvk::from(gvk).to_string())
        .unwrap_or_default();
    let object = if error.namespace.is_empty() {
        error.name.clone()
    } else {
        format!("{}/{}", error.namespace, error.name)
    };
    let first_line = error.message.lines().next().unwrap_or_default();
    let mut message: String = first_line.chars().take(MESSAGE_CHARS).collect();
    if message.len() < error.message.len() {
        message.push_str(" ...");
    }
    format!(
        "{operation} {kind} {object} (event {} at {}): {message}",
        error.event_index,
        human(error.trace_offset.as_ref())
    )
}

/// `0.25ms`, `12.345ms`, `61.5s`, `2m05s`, `1h02m05s`: precise when short, readable when long.
pub(crate) fn human(duration: Option<&prost_types::Duration>) -> String {
    let duration = duration_from_proto(duration);
    if duration < Duration::from_secs(1) {
        format!("{}ms", trimmed(duration.as_nanos() as f64 / 1e6))
    } else if duration < Duration::from_secs(60) {
        format!("{}s", trimmed(duration.as_secs_f64()))
    } else {
        let secs = duration.as_secs();
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            format!("{h}h{m:02}m{s:02}s")
        } else {
            format!("{m}m{s:02}s")
        }
    }
}

/// Three decimals at most, without trailing zeros.
fn trimmed(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Where the pending pod-seconds of the pods that ran went: `12s scheduling, 5m40s node boot,
/// 45s pod start (pod-seconds of the 9 pods that ran)`; nothing when no pod ran.
pub fn pending_split(report: &pb::Report) -> Option<String> {
    let split = report
        .pending_split
        .as_ref()
        .filter(|split| split.pods > 0)?;
    let seconds = |value: f64| {
        human(Some(&duration_to_proto(
            Duration::try_from_secs_f64(value).unwrap_or_default(),
        )))
    };
    Some(format!(
        "{} scheduling, {} node boot, {} pod start (pod-seconds of the {} pods that ran)",
        seconds(split.scheduling_pod_seconds),
        seconds(split.node_boot_pod_seconds),
        seconds(split.start_pod_seconds),
        split.pods
    ))
}

/// Which provisioning model produced the node and pod start times, how the run got it and
/// its default delays; reports from before models say they had none.
pub fn provisioning(report: &pb::Report) -> String {
    match &report.provisioning {
        Some(used) => format!("{} [{}]", used.summary, used.origin),
        None => "none recorded (a report from before provisioning models: nodes and pods came \
                 at once)"
            .to_owned(),
    }
}

/// How the replay gave its pods usage: how often, and how many updates came from the matched
/// recorded pod, a share of the owner's total, or the default.
pub fn usage(report: &pb::Report) -> String {
    let Some(usage) = &report.usage else {
        return "none: the trace holds no usage, so pods used nothing the metrics API served"
            .to_owned();
    };
    let interval = usage
        .interval
        .as_ref()
        .map(|d| human(Some(d)))
        .unwrap_or_else(|| "?".to_owned());
    let mut line = format!(
        "replayed every {interval} from {} samples: pod updates {} matched to their recorded \
         pod, {} shared (another replica count), {} defaulted to requests",
        usage.samples, usage.matched, usage.shared, usage.defaulted
    );
    if usage.ignored_samples > 0 {
        line.push_str(&format!(
            "; {} samples of pods not in the trace ignored",
            usage.ignored_samples
        ));
    }
    line
}

/// What containers' limits did to the replayed usage: OOM kills and throttled CPU, in all and
/// for the workloads most affected (at most three named). Nothing without usage.
pub fn limits(report: &pb::Report) -> Option<String> {
    let usage = report.usage.as_ref()?;
    let mut line = format!(
        "{} OOM kills, {:.1} CPU-seconds throttled, {} pressure evictions",
        usage.oom_kills, usage.throttled_cpu_seconds, usage.pressure_evictions
    );
    let named: Vec<String> = usage
        .workloads
        .iter()
        .take(3)
        .map(|workload| {
            format!(
                "{} {} OOM kills, {:.1} s throttled",
                workload.name, workload.oom_kills, workload.throttled_cpu_seconds
            )
        })
        .collect();
    if !named.is_empty() {
        line.push_str(&format!(" ({}", named.join("; ")));
        if usage.workloads.len() > named.len() {
            line.push_str(&format!(
                "; and {} more",
                usage.workloads.len() - named.len()
            ));
        }
        line.push(')');
    }
    Some(line)
}

/// What the replayed pods used against what the nodes allocate and what the pods request, mean
/// over the timeline's buckets (each ratio over the buckets whose denominator is not 0). Nothing
/// without usage: the used figures would all be 0.
pub fn utilization(report: &pb::Report) -> Option<String> {
    report.usage.as_ref()?;
    let usages: Vec<pb::ResourceUsage> = report
        .timeline
        .iter()
        .map(|bucket| bucket.usage.unwrap_or_default())
        .collect();
    let mean = |ratio: fn(&pb::ResourceUsage) -> (u64, u64)| {
        let ratios: Vec<f64> = usages
            .iter()
            .map(ratio)
            .filter(|(_, of)| *of > 0)
            .map(|(used, of)| used as f64 / of as f64)
            .collect();
        if ratios.is_empty() {
            "?".to_owned()
        } else {
            format!(
                "{:.0}%",
                ratios.iter().sum::<f64>() / ratios.len() as f64 * 100.0
            )
        }
    };
    Some(format!(
        "CPU used {} of allocatable, {} of requested; memory used {} of allocatable, {} of \
         requested",
        mean(|u| (u.used_cpu_millis, u.allocatable_cpu_millis)),
        mean(|u| (u.used_cpu_millis, u.requested_cpu_millis)),
        mean(|u| (u.used_memory_bytes, u.allocatable_memory_bytes)),
        mean(|u| (u.used_memory_bytes, u.requested_memory_bytes)),
    ))
}

/// The (at most three) recorded workloads whose p95 use per pod is furthest over or under
/// their requests, as a factor either way; workloads requesting nothing are not compared.
/// Nothing without usage or without such workloads.
pub fn rightsizing(report: &pb::Report) -> Option<String> {
    let usage = report.usage.as_ref()?;
    let ratio = |used: u64, requested: u64| (requested > 0).then(|| used as f64 / requested as f64);
    let mut scored: Vec<(f64, &pb::WorkloadUsage)> = usage
        .usage_vs_requests
        .iter()
        .filter_map(|workload| {
            let ratios = [
                ratio(workload.p95_cpu_millis, workload.requested_cpu_millis),
                ratio(workload.p95_memory_bytes, workload.requested_memory_bytes),
            ];
            // Far off either way counts alike, 4x over as 4x under; using nothing as 1%.
            let score = ratios
                .iter()
                .flatten()
                .map(|r| r.max(0.01).ln().abs())
                .reduce(f64::max)?;
            Some((score, workload))
        })
        .collect();
    if scored.is_empty() {
        return None;
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let versus = |used: String, shown: String, ratio: Option<f64>| match ratio {
        Some(ratio) => format!("{used} of {shown} requested ({ratio:.2}x)"),
        None => format!("{used}, none requested"),
    };
    let mebibytes = |bytes: u64| format!("{:.0}Mi", bytes as f64 / f64::from(1 << 20));
    let named: Vec<String> = scored
        .iter()
        .take(3)
        .map(|(_, w)| {
            format!(
                "{} CPU p95 {}, memory p95 {}",
                w.name,
                versus(
                    format!("{}m", w.p95_cpu_millis),
                    format!("{}m", w.requested_cpu_millis),
                    ratio(w.p95_cpu_millis, w.requested_cpu_millis),
                ),
                versus(
                    mebibytes(w.p95_memory_bytes),
                    mebibytes(w.requested_memory_bytes),
                    ratio(w.p95_memory_bytes, w.requested_memory_bytes),
                ),
            )
        })
        .collect();
    Some(named.join("; "))
}

/// Who decided the replica counts of workloads HPAs scale, and what was left out for it;
/// nothing when the trace held no HPA.
pub fn replicas(report: &pb::Report) -> Option<String> {
    let scaling = report.workload_scaling.as_ref()?;
    let source = scaling.source();
    let mut line = format!(
        "{} ({}): {} HPAs scale {} workloads",
        crate::replicas::replica_source_name(source),
        scaling.reason,
        scaling.hpas,
        scaling.scaled_workloads
    );
    match source {
        pb::ReplicaSource::Hpa => line.push_str(&format!(
            "; {} recorded replica changes left to the HPAs",
            scaling.not_replayed
        )),
        pb::ReplicaSource::Recorded => line.push_str(&format!(
            "; the HPAs were not applied ({} recorded operations on them)",
            scaling.not_replayed
        )),
        pb::ReplicaSource::Unspecified => {}
    }
    Some(line)
}

/// Scaled workloads listed in the summary; the rest are counted.
const MAX_WORKLOAD_LINES: usize = 10;

/// Per scaled workload, its mean replicas recorded and simulated over the timeline's buckets
/// and how often the HPA changed it; at most [`MAX_WORKLOAD_LINES`], then how many more.
pub fn replica_lines(report: &pb::Report) -> Vec<String> {
    let Some(scaling) = &report.workload_scaling else {
        return Vec::new();
    };
    let mean = |values: &[u64]| {
        if values.is_empty() {
            0.0
        } else {
            values.iter().sum::<u64>() as f64 / values.len() as f64
        }
    };
    let mut lines: Vec<String> = scaling
        .workloads
        .iter()
        .take(MAX_WORKLOAD_LINES)
        .map(|workload| {
            let events = workload.scale_events.len() as u64 + workload.scale_events_dropped;
            format!(
                "{}: replicas recorded mean {:.1}, simulated mean {:.1} (max {}); {events} scale event{}",
                workload.name,
                mean(&workload.recorded),
                mean(&workload.simulated),
                workload.simulated.iter().max().copied().unwrap_or(0),
                if events == 1 { "" } else { "s" },
            )
        })
        .collect();
    let more = scaling.workloads.len().saturating_sub(MAX_WORKLOAD_LINES);
    if more > 0 {
        lines.push(format!("and {more} more"));
    }
    lines
}

/// One line when cluster-autoscaler was down during the replay: how often and how long in all.
/// Nothing when it never was, or when that is unknown.
pub fn autoscaler_outages(report: &pb::Report) -> Option<String> {
    let outages = &report.autoscaler_outages.as_ref()?.outages;
    if outages.is_empty() {
        return None;
    }
    let total: Duration = outages
        .iter()
        .map(|outage| duration_from_proto(outage.duration.as_ref()))
        .sum();
    let times = if outages.len() == 1 { "time" } else { "times" };
    let ongoing = if outages.iter().any(|outage| outage.ongoing) {
        ", still down at the end"
    } else {
        ""
    };
    Some(format!(
        "cluster-autoscaler: down {} {times}, {} in all (recorded time){ongoing}; its decisions \
         in those spans are missing",
        outages.len(),
        human(Some(&duration_to_proto(total))),
    ))
}

/// The nodes the autoscaler added to and removed from the groups during the replay, by name:
/// `2 nodes added (a, b), 1 removed (a)`. Where the timeline's resizes count differently
/// (nodes asked for but not registered by the end, or a report from before nodes were
/// named), that is said too: `...; resizes asked for 3 and 1`. The pool's changes are not
/// among them (see [`pool_nodes`]).
pub fn autoscaler_nodes(report: &pb::Report) -> String {
    let (added, removed) = (
        changed_nodes(report, NodeChangeCause::Autoscaler, NodeChangeKind::Added),
        changed_nodes(report, NodeChangeCause::Autoscaler, NodeChangeKind::Removed),
    );
    let plural = if added.len() == 1 { "node" } else { "nodes" };
    let mut text = format!(
        "{} {plural} added{}, {} removed{}",
        added.len(),
        listed(&added),
        removed.len(),
        listed(&removed)
    );
    let (ups, downs) = autoscaler_totals(report);
    if (ups, downs) != (added.len() as u64, removed.len() as u64) {
        let _ = write!(text, "; resizes asked for {ups} and {downs}");
    }
    text
}

/// What the pool, not the autoscaler, did to the nodes during the replay, when it did
/// anything: `node re-registrations (pool restart): 2 (a, b)` for nodes that left and came
/// back under their names, and `pool nodes: 1 added (c), 0 removed` for a fixed-size group's.
pub fn pool_nodes(report: &pb::Report) -> Vec<String> {
    let mut lines = Vec::new();
    let back = changed_nodes(
        report,
        NodeChangeCause::Reregistration,
        NodeChangeKind::Added,
    );
    let gone = changed_nodes(
        report,
        NodeChangeCause::Reregistration,
        NodeChangeKind::Removed,
    );
    if !gone.is_empty() {
        lines.push(format!(
            "node re-registrations (pool restart): {}{}",
            back.len(),
            listed(&back)
        ));
    }
    let added = changed_nodes(report, NodeChangeCause::Pool, NodeChangeKind::Added);
    let removed = changed_nodes(report, NodeChangeCause::Pool, NodeChangeKind::Removed);
    if !added.is_empty() || !removed.is_empty() {
        lines.push(format!(
            "pool nodes:        {} added{}, {} removed{}",
            added.len(),
            listed(&added),
            removed.len(),
            listed(&removed)
        ));
    }
    lines
}

/// The names of the nodes `cause` added or removed, in time order.
fn changed_nodes(report: &pb::Report, cause: NodeChangeCause, kind: NodeChangeKind) -> Vec<&str> {
    report
        .node_changes
        .iter()
        .filter(|change| change.kind() == kind)
        .filter(|change| cause_of(change) == cause)
        .map(|change| change.node.as_str())
        .collect()
}

/// ` (a, b, c)`, at most [`LISTED_NODES`] names then `and N more`; empty for no names.
fn listed(names: &[&str]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = names.iter().take(LISTED_NODES).copied().collect();
    let mut text = format!(" ({}", shown.join(", "));
    if names.len() > shown.len() {
        let _ = write!(text, " and {} more", names.len() - shown.len());
    }
    text.push(')');
    text
}

/// How close the replay came to the recording, in one line: nodes (over all groups) and pods
/// running and pending, each as the share of buckets within tolerance and the mean error.
/// Reasons listed in the summary; `report.json` has them all.
const LISTED_WAITS: usize = 3;

/// `2 m5.large, 1 m5.xlarge`, or `nodes priced each` without any type.
fn instance_types(types: &std::collections::BTreeMap<String, u64>) -> String {
    if types.is_empty() {
        return "nodes priced each".to_owned();
    }
    types
        .iter()
        .map(|(name, count)| format!("{count} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Node-hours and cost per group, pending time, and how tightly pods were packed.
pub fn cost_lines(costs: &pb::Costs) -> Vec<String> {
    let groups: Vec<String> = costs
        .groups
        .iter()
        .map(|group| match (group.price_per_hour, group.cost) {
            (Some(price), Some(cost)) => format!(
                "{} {:.3} at {price}/h = {cost:.4}",
                group.group, group.node_hours
            ),
            // Each node at its own price: a NodePool of the types Karpenter chose.
            (None, Some(cost)) => format!(
                "{} {:.3} of {} = {cost:.4}",
                group.group,
                group.node_hours,
                instance_types(&group.instance_types)
            ),
            _ => format!("{} {:.3}, no price", group.group, group.node_hours),
        })
        .collect();
    let cost = match costs.cost {
        Some(cost) if costs.unpriced_groups.is_empty() => format!("cost {cost:.4}"),
        Some(cost) => format!(
            "cost {cost:.4} without {} (no price)",
            costs.unpriced_groups.join(", ")
        ),
        None => "cost: no price".to_owned(),
    };
    let percent = |ratio: f64| format!("{:.0}%", ratio * 100.0);
    vec![
        format!(
            "node-hours:        {:.3} ({}); {cost}",
            costs.node_hours,
            groups.join("; ")
        ),
        format!(
            "pods waited:       {:.1} pod-seconds pending; {} never scheduled, {} evicted, {} preempted",
            costs.pending_pod_seconds,
            costs.pods_never_scheduled,
            costs.pods_evicted,
            costs.pods_preempted
        ),
        format!(
            "packing:           requested/allocatable cpu {} (peak {}), memory {} (peak {})",
            percent(costs.cpu_requested_mean),
            percent(costs.cpu_requested_peak),
            percent(costs.memory_requested_mean),
            percent(costs.memory_requested_peak)
        ),
    ]
}

/// The most frequent reasons pods waited, with their owners.
pub fn waits(waits: &[pb::WaitReason]) -> String {
    let mut listed: Vec<String> = waits
        .iter()
        .take(LISTED_WAITS)
        .map(|wait| {
            format!(
                "{} x{} ({}, {})",
                wait.reason, wait.count, wait.owner, wait.source
            )
        })
        .collect();
    if waits.len() > LISTED_WAITS {
        listed.push(format!(
            "... {} more in report.json",
            waits.len() - LISTED_WAITS
        ));
    }
    listed.join("; ")
}

/// The run's GPUs: per model allocation and fragmentation, GPU node-hours and cost, and the GPU
/// pods' waits.
pub fn gpu_lines(gpus: &pb::Accelerators) -> Vec<String> {
    let percent = |ratio: f64| format!("{:.0}%", ratio * 100.0);
    let mut lines: Vec<String> = gpus
        .models
        .iter()
        .enumerate()
        .map(|(index, model)| {
            let label = if index == 0 { "gpus:" } else { "" };
            format!(
                "{label:19}{}: {} allocatable at most, {} allocated (mean, peak {}), {} fragmented (mean, at most {} GPU(s))",
                model.model,
                model.allocatable_peak,
                percent(model.allocated_mean),
                percent(model.allocated_peak),
                percent(model.fragmented_mean),
                model.fragmented_peak
            )
        })
        .collect();
    let cost = gpus
        .gpu_cost
        .map_or_else(|| "no price".to_owned(), |cost| format!("cost {cost:.4}"));
    let pending = gpus.gpu_pod_pending_time.unwrap_or_default();
    lines.push(format!(
        "gpu pods:          {} ({} never scheduled, at most {} waiting at once), pending p50 {}, p99 {}; GPU node-hours {:.3}, {cost}",
        gpus.gpu_pods,
        gpus.gpu_pods_never_scheduled,
        gpus.pending_gpu_pods_peak,
        human(pending.p50.as_ref()),
        human(pending.p99.as_ref()),
        gpus.gpu_node_hours
    ));
    if !gpus.never_scheduled_by_gpus.is_empty() {
        let counts: Vec<String> = gpus
            .never_scheduled_by_gpus
            .iter()
            .map(|count| match count.gpus {
                0 => format!("unknown x{}", count.pods),
                gpus => format!("{gpus} x{}", count.pods),
            })
            .collect();
        lines.push(format!(
            "never scheduled:   by GPUs asked {}",
            counts.join(", ")
        ));
    }
    if !gpus.waits.is_empty() {
        lines.push(format!("gpu pods waited:   {}", waits(&gpus.waits)));
    }
    lines
}

/// The summary's label of the kube-controller-manager controller a flag of it belongs to.
fn controller_of(flag: &str) -> &'static str {
    const NODE_LIFECYCLE: [&str; 5] = [
        "node-monitor-grace-period",
        "node-monitor-period",
        "node-startup-grace-period",
        "node-eviction-rate",
        "secondary-node-eviction-rate",
    ];
    if flag.starts_with("horizontal-pod-autoscaler-") {
        "HPA controller:"
    } else if NODE_LIFECYCLE.contains(&flag) {
        "node lifecycle:"
    } else {
        // A flag of a newer environment's.
        "KCM flags:"
    }
}

/// The configuration under test: the scheduler file, and CA's flags as given and as run, by
/// where each came from (the run's, the recording's, the environment's; CA's own defaults only
/// where the speed changed them), the recorded flags not applied, and what ksim set otherwise
/// than production.
pub fn configuration_lines(configuration: &env::AppliedConfiguration) -> Vec<String> {
    let scheduler = match &configuration.scheduler_given {
        Some(given) => format!("scheduler:         {}", given.source),
        None => "scheduler:         its defaults".to_owned(),
    };
    let mut lines = vec![scheduler];
    if let Some(provider) = &configuration.provider {
        lines.push(format!("provider config:   {}", provider.source));
    }
    // KCM's controllers run whether or not CA does; one flag a line, their names are long, each
    // controller's label on its first.
    let mut previous = None;
    for flag in &configuration.controller_manager_flags {
        let controller = controller_of(&flag.name);
        let label = if previous == Some(controller) {
            ""
        } else {
            controller
        };
        previous = Some(controller);
        let value = if flag.given == flag.as_run {
            flag.given.clone()
        } else {
            format!("{} (runs {})", flag.given, flag.as_run)
        };
        lines.push(format!("{label:19}{}={value}", flag.name));
    }
    if let Some(karpenter) = &configuration.karpenter {
        lines.push(format!(
            "node autoscaler:   Karpenter {} (its own defaults, the run's NodePools)",
            karpenter.version
        ));
    }
    if !configuration.autoscaler {
        return lines;
    }
    let speed = configuration.speed;
    let as_run = |flag: &env::AutoscalerFlag| {
        if flag.given == flag.as_run {
            format!("{}={}", flag.name, flag.given)
        } else {
            format!(
                "{}={} (runs {}{})",
                flag.name,
                flag.given,
                flag.as_run,
                if flag.floored { ", CA's floor" } else { "" }
            )
        }
    };
    // Reports from before `source` say only whether the run gave the flag.
    let source = |flag: &env::AutoscalerFlag| match flag.source() {
        env::AutoscalerFlagSource::Unspecified if flag.from_defaults => {
            env::AutoscalerFlagSource::Environment
        }
        env::AutoscalerFlagSource::Unspecified => env::AutoscalerFlagSource::Run,
        known => known,
    };
    let mut chosen = Vec::new();
    for (wanted, label) in [
        (env::AutoscalerFlagSource::Run, "run"),
        (env::AutoscalerFlagSource::Recording, "recording"),
        (env::AutoscalerFlagSource::Environment, "environment"),
    ] {
        let flags: Vec<String> = configuration
            .autoscaler_flags
            .iter()
            .filter(|flag| source(flag) == wanted)
            .map(as_run)
            .collect();
        if !flags.is_empty() {
            chosen.push(format!("{label}: {}", flags.join(", ")));
        }
    }
    if chosen.is_empty() {
        chosen.push("CA's own defaults".to_owned());
    }
    let mut chosen = chosen.into_iter();
    if let Some(first) = chosen.next() {
        lines.push(format!("autoscaler flags:  {first}"));
    }
    lines.extend(chosen.map(|line| format!("{:19}{line}", "")));
    let dilated: Vec<String> = configuration
        .autoscaler_flags
        .iter()
        .filter(|flag| {
            source(flag) == env::AutoscalerFlagSource::CaDefault && flag.given != flag.as_run
        })
        .map(as_run)
        .collect();
    if !dilated.is_empty() {
        lines.push(format!(
            "{:19}CA's defaults at {}x: {}",
            "",
            speed_text(speed),
            dilated.join(", ")
        ));
    }
    if !configuration.autoscaler_recorded_source.is_empty() {
        lines.push(format!(
            "recorded CA:       {}",
            configuration.autoscaler_recorded_source
        ));
        for not_applied in &configuration.autoscaler_not_applied {
            lines.push(format!(
                "{:19}not applied: {}: {}",
                "", not_applied.flag, not_applied.reason
            ));
        }
    }
    for flag in &configuration.autoscaler_simulation_flags {
        lines.push(format!(
            "ksim sets:         {}={} (production differs): {}",
            flag.name, flag.value, flag.reason
        ));
    }
    lines
}

fn speed_text(speed: f64) -> String {
    let text = format!("{speed:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

pub fn fidelity(report: &pb::Report) -> String {
    let Some(fidelity) = &report.fidelity else {
        return "not measured: the trace holds no recorded cluster state (SimKube traces and \
                ksim traces recorded without it have none)"
            .to_owned();
    };
    let series = |name: &str| fidelity.series.iter().find(|series| series.name == name);
    let Some(nodes) = series("nodes").filter(|nodes| nodes.buckets > 0) else {
        return "not measured: the replay and the recording have no bucket in common".to_owned();
    };
    let percent = |share: f64| format!("{:.0}%", share * 100.0);
    let mut text = format!(
        "nodes within ±1 in {} of {} {} buckets (mean error {}, max {}; peak {} vs {} recorded)",
        percent(nodes.within_tolerance),
        nodes.buckets,
        human(fidelity.bucket_width.as_ref()),
        trimmed_to(nodes.mean_abs_error, 2),
        nodes.max_abs_error,
        nodes.simulated_peak,
        nodes.recorded_peak,
    );
    for (name, label) in [
        ("pods_running", "pods running"),
        ("pods_pending", "pending"),
    ] {
        if let Some(pods) = series(name) {
            let _ = write!(
                text,
                "; {label} within 5% in {} (mean error {})",
                percent(pods.within_tolerance),
                trimmed_to(pods.mean_abs_error, 1)
            );
        }
    }
    // Reports from before pending was compared have none: nothing to say.
    if let Some(pending) = &fidelity.pending {
        text.push_str(&pending_fidelity(pending));
    }
    text
}

/// Pending p50 and p90 and running pod-seconds, simulated against recorded.
fn pending_fidelity(pending: &pb::FidelityPending) -> String {
    let simulated = pending.simulated.unwrap_or_default();
    let mut text = match &pending.recorded {
        Some(recorded) => format!(
            "; pending time p50 {} vs {} recorded, p90 {} vs {} recorded ({} pods, {} recorded)",
            human(simulated.p50.as_ref()),
            human(recorded.p50.as_ref()),
            human(simulated.p90.as_ref()),
            human(recorded.p90.as_ref()),
            simulated.count,
            recorded.count,
        ),
        None => format!(
            "; pending time p50 {}, p90 {} (none recorded: the trace holds no pod creation \
             times)",
            human(simulated.p50.as_ref()),
            human(simulated.p90.as_ref()),
        ),
    };
    let _ = write!(
        text,
        "; running pod-seconds {:.0} vs {:.0} recorded",
        pending.simulated_running_pod_seconds, pending.recorded_running_pod_seconds
    );
    text
}

/// At most `decimals` decimals, without trailing zeros.
fn trimmed_to(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Nodes cluster-autoscaler asked to add and remove over the whole timeline.
pub fn autoscaler_totals(report: &pb::Report) -> (u64, u64) {
    report.timeline.iter().fold((0, 0), |(ups, downs), bucket| {
        (
            ups + bucket.autoscaler_scale_ups,
            downs + bucket.autoscaler_scale_downs,
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;

    #[test]
    fn each_scaled_workload_has_a_line_up_to_ten() {
        let mut report = fixtures::report();
        let mut scaling = fixtures::workload_scaling();
        report.workload_scaling = Some(scaling.clone());
        let text = summary(&report);
        assert!(
            text.contains(
                "\n    Deployment/shop/web: replicas recorded mean 3.3, simulated mean 4.3 \
                 (max 8); 7 scale events\n"
            ),
            "{text}"
        );
        let web = scaling.workloads[0].clone();
        scaling.workloads = (0..12)
            .map(|i| crate::WorkloadReplicas {
                name: format!("Deployment/shop/web-{i}"),
                ..web.clone()
            })
            .collect();
        report.workload_scaling = Some(scaling);
        let lines = replica_lines(&report);
        assert_eq!(lines.len(), 11);
        assert!(lines[9].starts_with("Deployment/shop/web-9: "));
        assert_eq!(lines[10], "and 2 more");
    }

    #[test]
    fn disruptions_say_what_failed_when_and_what_it_cost() {
        let mut report = fixtures::report();
        assert!(!summary(&report).contains("disruptions:"), "none, no lines");
        let millis = ksim_proto::json::of_millis;
        report.disruptions = Some(pb::Disruptions {
            seed: 7,
            outcomes: vec![
                pb::DisruptionOutcome {
                    kind: "node-failure".into(),
                    node_group: "m5".into(),
                    offset: Some(millis(60_000)),
                    nodes: vec!["m5-a".into()],
                    recovered_offset: None,
                    time_to_recovery: Some(millis(95_000)),
                    recovered: true,
                    error: String::new(),
                    zone: String::new(),
                    evictions_blocked: 0,
                    pods_lost: 0,
                    recorded_node: String::new(),
                    stuck_drains: Vec::new(),
                    nodes_added: 0,
                },
                pb::DisruptionOutcome {
                    kind: "node-failure".into(),
                    node_group: "m5".into(),
                    offset: Some(millis(900_000)),
                    error: "the run ended before it".into(),
                    ..Default::default()
                },
                pb::DisruptionOutcome {
                    kind: "zone-outage".into(),
                    node_group: "east,m5".into(),
                    zone: "us-east-1a".into(),
                    offset: Some(millis(120_000)),
                    nodes: vec!["east-1".into(), "m5-b".into()],
                    recovered_offset: Some(millis(720_000)),
                    recovered: true,
                    nodes_added: 2,
                    ..Default::default()
                },
                pb::DisruptionOutcome {
                    kind: "stockout".into(),
                    node_group: "west".into(),
                    offset: Some(millis(0)),
                    recovered: true,
                    ..Default::default()
                },
                pb::DisruptionOutcome {
                    kind: "recorded-failure".into(),
                    node_group: "m5".into(),
                    recorded_node: "ip-10-0-1-7".into(),
                    offset: Some(millis(600_000)),
                    nodes: vec!["m5-c".into()],
                    recovered_offset: Some(millis(660_000)),
                    recovered: true,
                    ..Default::default()
                },
                pb::DisruptionOutcome {
                    kind: "spot-interruption".into(),
                    node_group: "west".into(),
                    offset: Some(millis(300_000)),
                    nodes: vec!["west-1".into()],
                    recovered_offset: Some(millis(420_000)),
                    recovered: true,
                    evictions_blocked: 1,
                    pods_lost: 1,
                    ..Default::default()
                },
            ],
            workloads: vec![
                pb::WorkloadAvailability {
                    name: "Deployment/shop/db".into(),
                    desired: 1,
                    lowest_ready: 1,
                    time_below_desired: Some(millis(0)),
                    availability: 1.0,
                    pods_evicted: 0,
                    evictions_blocked: 0,
                },
                pb::WorkloadAvailability {
                    name: "Deployment/shop/web".into(),
                    desired: 2,
                    lowest_ready: 1,
                    time_below_desired: Some(millis(80_000)),
                    availability: 0.75,
                    pods_evicted: 1,
                    evictions_blocked: 1,
                },
            ],
            pods_evicted: 1,
            evictions_blocked: 1,
        });
        let text = summary(&report);
        for line in [
            "  disruptions:       node-failure of m5 at 1m00s: 1 node(s) (m5-a), not over within \
             the run; workloads whole again after 1m35s\n",
            "                     node-failure of m5 at 15m00s: not applied: the run ended before it\n",
            "                     zone-outage of us-east-1a (east,m5) at 2m00s: 2 node(s) (east-1, \
             m5-b), over at 12m00s; no workload dropped; 2 node(s) added meanwhile\n",
            "                     stockout of west at 0ms: scale-ups refused, not over within the run; \
             no workload dropped\n",
            "                     recorded-failure of m5 (recorded ip-10-0-1-7) at 10m00s: 1 \
             node(s) (m5-c), over at 11m00s; no workload dropped\n",
            "                     spot-interruption of west at 5m00s: 1 node(s) (west-1), over at \
             7m00s (1 eviction(s) blocked, 1 pod(s) lost); no workload dropped\n",
            "  availability:      1 workload(s) always at desired ready, 1 below at times; 1 \
             evicted, 1 blocked by a PodDisruptionBudget (seed 7)\n",
            "    Deployment/shop/web 75.0% (1m20s below 2 desired ready, lowest 1, 1 evicted, 1 \
             blocked by a PodDisruptionBudget)\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        // Hundreds of interruptions: ten lines, then how many more.
        if let Some(disruptions) = &mut report.disruptions {
            let spot = disruptions.outcomes[5].clone();
            disruptions.outcomes = vec![spot; 13];
        }
        let lines = disruption_lines(report.disruptions.as_ref().unwrap());
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("spot-interruption"))
                .count(),
            10
        );
        assert!(
            lines[10].ends_with("... and 3 more (report.json's disruptions.outcomes)"),
            "{lines:?}"
        );
    }

    #[test]
    fn gpus_say_allocation_fragmentation_hours_and_why_gpu_pods_waited() {
        let mut report = fixtures::report();
        assert!(!summary(&report).contains("gpus:"));
        report.accelerators = Some(pb::Accelerators {
            models: vec![pb::GpuModelSummary {
                model: "V100".to_owned(),
                allocatable_peak: 8,
                allocated_mean: 0.75,
                allocated_peak: 1.0,
                fragmented_mean: 0.15,
                fragmented_peak: 2,
            }],
            gpu_node_hours: 4.0,
            gpu_cost: Some(12.24),
            gpu_pods: 3,
            gpu_pods_never_scheduled: 3,
            never_scheduled_by_gpus: vec![
                pb::GpuPodCount { gpus: 0, pods: 1 },
                pb::GpuPodCount { gpus: 8, pods: 2 },
            ],
            pending_gpu_pods_peak: 2,
            waits: vec![pb::WaitReason {
                source: "scheduler".to_owned(),
                reason: "Insufficient nvidia.com/gpu".to_owned(),
                owner: "Pod/big".to_owned(),
                count: 4,
            }],
            ..pb::Accelerators::default()
        });
        let text = summary(&report);
        assert!(
            text.contains("gpus:              V100: 8 allocatable at most, 75% allocated (mean, peak 100%), 15% fragmented (mean, at most 2 GPU(s))"),
            "{text}"
        );
        assert!(
            text.contains("gpu pods:          3 (3 never scheduled, at most 2 waiting at once)"),
            "{text}"
        );
        assert!(
            text.contains("  never scheduled:   by GPUs asked unknown x1, 8 x2\n"),
            "{text}"
        );
        assert!(
            text.contains("GPU node-hours 4.000, cost 12.2400"),
            "{text}"
        );
        assert!(
            text.contains("gpu pods waited:   Insufficient nvidia.com/gpu x4 (Pod/big, scheduler)"),
            "{text}"
        );
    }

    #[test]
    fn a_fast_replay_says_its_times_are_recorded_time() {
        let mut report = fixtures::report();
        assert!(
            !summary(&report).contains("recorded time"),
            "1x says nothing"
        );
        report.speed = 10.0;
        report.bucket_width = Some(duration_to_proto(Duration::from_secs(1)));
        assert!(
            summary(&report)
                .contains("replayed at 10x: times below are recorded time (1s buckets)"),
            "{}",
            summary(&report)
        );
    }

    #[test]
    fn mentions_the_key_numbers() {
        let mut report = fixtures::report();
        report.artifacts = Some(pb::ReportArtifacts {
            json_path: "/r/report.json".into(),
            csv_path: "/r/timeline.csv".into(),
            svg_path: "/r/timeline.svg".into(),
            fidelity_csv_path: "/r/fidelity.csv".into(),
            fidelity_svg_path: "/r/fidelity.svg".into(),
            replicas_csv_path: "/r/replicas.csv".into(),
        });
        let text = summary(&report);
        for expected in [
            "Simulation sim-42 (complete)",
            "events applied:    1234",
            "peak nodes:        3",
            "2 nodes (2 ready) in 2 groups; pods 4 running, 0 pending (0 unscheduled), 1 succeeded, 1 failed",
            "pod pending time:  p50 50ms, p90 90ms, p99 99ms (100 pods)",
            "lateness:          p50 1.5ms, p99 12.345ms (3 events)",
            "autoscaler:        2 nodes added (group-b-x, group-b-y), 1 removed (group-b-x)\n",
            "object errors:     4",
            "- apply v1.Pod sim-42-default/web-0 (event 7 at 1m01s): admission webhook denied it ...",
            "- delete rbac.authorization.k8s.io/v1.ClusterRole reader (event 9 at 0ms): forbidden",
            "... and 1 more",
            "fidelity:          nodes within ±1 in 100% of 1 5s buckets (mean error 1, max 1; \
             peak 2 vs 3 recorded); pods running within 5% in 0% (mean error 2); pending within \
             5% in 100% (mean error 0); pending time p50 50ms vs 100ms recorded, p90 90ms vs \
             180ms recorded (100 pods, 10 recorded); running pod-seconds 20 vs 10 recorded\n",
            "files:             /r/report.json",
            "/r/timeline.svg",
            "/r/fidelity.svg",
            "                     /r/replicas.csv\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        assert!(
            !text.contains("fourth"),
            "only the first errors are listed:\n{text}"
        );
        assert!(
            !text.contains("asked for"),
            "the fixture's resizes match its nodes:\n{text}"
        );
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn a_failed_or_cancelled_run_says_so_in_its_header() {
        // The driver marks a failed run's report complete: the replay stopped.
        let report = fixtures::report();
        assert!(report.complete);
        for (state, header) in [
            (pb::SimulationState::Failed, "Simulation sim-42 (failed)\n"),
            (
                pb::SimulationState::Cancelled,
                "Simulation sim-42 (cancelled)\n",
            ),
            (
                pb::SimulationState::Succeeded,
                "Simulation sim-42 (complete)\n",
            ),
        ] {
            let text = summary_ended(&report, state);
            assert!(text.starts_with(header), "{state:?}: {text}");
        }
    }

    #[test]
    fn the_fidelity_line_says_when_recorded_pending_time_is_not_recorded() {
        let mut report = fixtures::report();
        let fidelity = report.fidelity.as_mut().unwrap();
        fidelity.pending.as_mut().unwrap().recorded = None;
        let line = super::fidelity(&report);
        assert!(
            line.ends_with(
                "; pending time p50 50ms, p90 90ms (none recorded: the trace holds no pod \
                 creation times); running pod-seconds 20 vs 10 recorded"
            ),
            "{line}"
        );
        // A report from before pending was compared says nothing of it.
        let mut old = report.clone();
        old.fidelity.as_mut().unwrap().pending = None;
        assert!(!super::fidelity(&old).contains("pending time"));
    }

    #[test]
    fn each_warning_has_its_own_line() {
        let text = summary(&pb::Report {
            simulation_id: "s".into(),
            warnings: vec!["first thing".into(), "second thing".into()],
            ..pb::Report::default()
        });
        assert!(text.contains("\n  warning: first thing\n"), "{text}");
        assert!(text.contains("\n  warning: second thing\n"), "{text}");
        let none = summary(&pb::Report::default());
        assert!(!none.contains("warning"), "{none}");
    }

    #[test]
    fn the_transforms_follow_the_warnings_one_a_line_aligned() {
        let text = summary(&pb::Report {
            simulation_id: "s".into(),
            warnings: vec!["a thing".into()],
            trace_transforms: vec![
                r#"rule 1 (line 2) "web at half": scaleResources requests.cpu x0.5"#.into(),
                "rule 2 (line 5): scaleReplicas 2".into(),
            ],
            ..pb::Report::default()
        });
        let expected = [
            "  warning: a thing",
            r#"  transformed by:    rule 1 (line 2) "web at half": scaleResources requests.cpu x0.5"#,
            "                     rule 2 (line 5): scaleReplicas 2",
            "  events applied:    0",
        ]
        .join("\n");
        assert!(text.contains(&expected), "{text}");
        let none = summary(&pb::Report::default());
        assert!(!none.contains("transformed"), "{none}");
    }

    #[test]
    fn empty_report_has_zeros_and_no_files() {
        let text = summary(&pb::Report {
            simulation_id: "s".into(),
            ..pb::Report::default()
        });
        assert!(text.contains("Simulation s (not complete)"), "{text}");
        assert!(
            text.contains("p50 0ms, p90 0ms, p99 0ms (0 pods)"),
            "{text}"
        );
        assert!(text.contains("object errors:     0"), "{text}");
        assert!(
            text.contains("fidelity:          not measured: the trace holds no recorded"),
            "{text}"
        );
        assert!(!text.contains("at the end"), "{text}");
        assert!(!text.contains("files"), "{text}");
    }

    fn change(node: &str, kind: NodeChangeKind) -> pb::NodeChange {
        pb::NodeChange {
            offset: None,
            group: "m5".into(),
            node: node.into(),
            kind: kind.into(),
            cause: NodeChangeCause::Unspecified.into(),
        }
    }

    fn caused(node: &str, kind: NodeChangeKind, cause: NodeChangeCause) -> pb::NodeChange {
        pb::NodeChange {
            cause: cause.into(),
            ..change(node, kind)
        }
    }

    #[test]
    fn the_pools_changes_are_not_the_autoscalers() {
        use crate::{NodeChangeCause as Cause, NodeChangeKind as Kind};
        let changes = vec![
            caused("seats-a", Kind::Added, Cause::Autoscaler),
            caused("seats-b", Kind::Removed, Cause::Reregistration),
            caused("seats-b", Kind::Added, Cause::Reregistration),
            caused("fixed-0", Kind::Removed, Cause::Pool),
        ];
        let report = scaled(1, 0, changes);
        assert_eq!(
            autoscaler_nodes(&report),
            "1 node added (seats-a), 0 removed"
        );
        assert_eq!(
            pool_nodes(&report),
            [
                "node re-registrations (pool restart): 1 (seats-b)",
                "pool nodes:        0 added, 1 removed (fixed-0)"
            ]
        );
        let text = summary(&report);
        assert!(
            text.contains("\n  node re-registrations (pool restart): 1 (seats-b)\n"),
            "{text}"
        );
        assert!(pool_nodes(&scaled(0, 0, Vec::new())).is_empty());
    }

    /// A report whose timeline asked for `ups` and `downs` nodes and saw `changes`.
    fn scaled(ups: u64, downs: u64, changes: Vec<pb::NodeChange>) -> pb::Report {
        pb::Report {
            timeline: vec![pb::TimelineBucket {
                autoscaler_scale_ups: ups,
                autoscaler_scale_downs: downs,
                ..pb::TimelineBucket::default()
            }],
            node_changes: changes,
            ..pb::Report::default()
        }
    }

    #[test]
    fn autoscaler_nodes_lists_eight_names_then_counts_the_rest() {
        let added: Vec<_> = (0..11)
            .map(|i| change(&format!("m5-{i}"), NodeChangeKind::Added))
            .collect();
        assert_eq!(
            autoscaler_nodes(&scaled(11, 0, added)),
            "11 nodes added (m5-0, m5-1, m5-2, m5-3, m5-4, m5-5, m5-6, m5-7 and 3 more), 0 removed"
        );
        let eight: Vec<_> = (0..8)
            .map(|i| change(&format!("m5-{i}"), NodeChangeKind::Removed))
            .collect();
        let text = autoscaler_nodes(&scaled(0, 8, eight));
        assert!(text.ends_with("m5-6, m5-7)"), "eight fit: {text}");
        assert!(!text.contains("more"), "{text}");
    }

    #[test]
    fn autoscaler_nodes_says_one_node_and_skips_unknown_kinds() {
        let changes = vec![
            change("m5-a", NodeChangeKind::Added),
            change("m5-b", NodeChangeKind::Unspecified),
            change("m5-a", NodeChangeKind::Removed),
        ];
        assert_eq!(
            autoscaler_nodes(&scaled(1, 1, changes)),
            "1 node added (m5-a), 1 removed (m5-a)"
        );
        assert_eq!(
            autoscaler_nodes(&pb::Report::default()),
            "0 nodes added, 0 removed"
        );
    }

    #[test]
    fn autoscaler_nodes_says_when_resizes_count_differently() {
        // A scale-up whose third node had not registered by the end.
        let changes = vec![
            change("m5-a", NodeChangeKind::Added),
            change("m5-b", NodeChangeKind::Added),
        ];
        assert_eq!(
            autoscaler_nodes(&scaled(3, 0, changes)),
            "2 nodes added (m5-a, m5-b), 0 removed; resizes asked for 3 and 0"
        );
        // A report from before nodes were named still shows its resizes.
        let text = summary(&scaled(2, 1, Vec::new()));
        assert!(
            text.contains(
                "autoscaler:        0 nodes added, 0 removed; resizes asked for 2 and 1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn autoscaler_outages_are_one_line_and_none_or_unknown_are_silent() {
        let outage = |secs, ongoing| pb::AutoscalerOutage {
            offset: None,
            duration: Some(prost_types::Duration {
                seconds: secs,
                nanos: 0,
            }),
            ongoing,
        };
        let mut report = pb::Report::default();
        assert!(!summary(&report).contains("cluster-autoscaler"), "unknown");
        report.autoscaler_outages = Some(pb::AutoscalerOutages::default());
        assert!(!summary(&report).contains("cluster-autoscaler"), "none");
        report.autoscaler_outages = Some(pb::AutoscalerOutages {
            outages: vec![outage(30, false), outage(7, false)],
        });
        assert!(summary(&report).contains(
            "  cluster-autoscaler: down 2 times, 37s in all (recorded time); its decisions in \
             those spans are missing\n"
        ));
        report.autoscaler_outages = Some(pb::AutoscalerOutages {
            outages: vec![outage(75, true)],
        });
        assert_eq!(
            autoscaler_outages(&report).unwrap(),
            "cluster-autoscaler: down 1 time, 1m15s in all (recorded time), still down at the \
             end; its decisions in those spans are missing"
        );
    }

    #[test]
    fn pending_time_is_split_by_cause_and_start_and_ready_times_are_shown() {
        let mut report = pb::Report::default();
        assert!(!summary(&report).contains("by cause"), "no pods ran");
        report.pending_split = Some(pb::PendingSplit {
            pods: 9,
            scheduling_pod_seconds: 12.0,
            node_boot_pod_seconds: 340.0,
            start_pod_seconds: 45.5,
        });
        report.pod_start_time = Some(pb::DurationPercentiles {
            count: 9,
            p50: Some(duration_to_proto(Duration::from_secs(3))),
            ..pb::DurationPercentiles::default()
        });
        let text = summary(&report);
        assert!(
            text.contains(
                "  pending, by cause: 12s scheduling, 5m40s node boot, 45.5s pod start \
                 (pod-seconds of the 9 pods that ran)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  pod start time:    p50 3s, p90 0ms, p99 0ms (9 pods, bound to Running)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("node ready time"), "{text}");
    }

    #[test]
    fn the_summary_says_how_usage_was_replayed_or_that_there_was_none() {
        let mut report = pb::Report::default();
        assert!(summary(&report).contains("  usage:             none: the trace holds no usage"));
        report.usage = Some(pb::UsageReplay {
            samples: 40,
            ignored_samples: 3,
            interval: Some(prost_types::Duration {
                seconds: 15,
                nanos: 0,
            }),
            matched: 10,
            shared: 6,
            defaulted: 2,
            ..Default::default()
        });
        assert_eq!(
            usage(&report),
            "replayed every 15s from 40 samples: pod updates 10 matched to their recorded pod, \
             6 shared (another replica count), 2 defaulted to requests; 3 samples of pods not \
             in the trace ignored"
        );
    }

    #[test]
    fn the_summary_says_what_limits_did_naming_the_workloads_most_affected() {
        let mut report = pb::Report::default();
        assert_eq!(limits(&report), None, "no usage, no limits line");
        let workload = |name: &str, oom_kills, throttled_cpu_seconds| pb::WorkloadLimits {
            name: name.to_owned(),
            oom_kills,
            throttled_cpu_seconds,
            pressure_evictions: 0,
        };
        report.usage = Some(pb::UsageReplay {
            oom_kills: 7,
            throttled_cpu_seconds: 12.25,
            workloads: vec![
                workload("Deployment/shop/web", 6, 0.0),
                workload("Deployment/shop/db", 1, 2.0),
                workload("Deployment/shop/api", 0, 10.25),
                workload("Job/shop/batch", 0, 0.0),
            ],
            ..Default::default()
        });
        assert_eq!(
            limits(&report).unwrap(),
            "7 OOM kills, 12.2 CPU-seconds throttled, 0 pressure evictions (Deployment/shop/web 6 OOM kills, 0.0 s \
             throttled; Deployment/shop/db 1 OOM kills, 2.0 s throttled; Deployment/shop/api 0 \
             OOM kills, 10.2 s throttled; and 1 more)"
        );
        assert!(summary(&report).contains("\n  limits:            7 OOM kills"));
    }

    #[test]
    fn utilization_is_the_mean_over_buckets_of_used_against_allocatable_and_requested() {
        let mut report = pb::Report::default();
        let bucket =
            |used_cpu_millis, requested_cpu_millis, used_memory_bytes| pb::TimelineBucket {
                usage: Some(pb::ResourceUsage {
                    used_cpu_millis,
                    requested_cpu_millis,
                    allocatable_cpu_millis: 4000,
                    used_memory_bytes,
                    requested_memory_bytes: 1000,
                    allocatable_memory_bytes: 2000,
                }),
                ..Default::default()
            };
        // CPU: 1000/4000 and 2000/4000 of allocatable; 1000/2000 of requested, the bucket
        // requesting nothing left out. Memory: 400 and 800 of 2000, and of 1000.
        report.timeline = vec![bucket(1000, 2000, 400), bucket(2000, 0, 800)];
        assert_eq!(utilization(&report), None, "no usage, no utilization line");
        report.usage = Some(pb::UsageReplay::default());
        assert_eq!(
            utilization(&report).unwrap(),
            "CPU used 38% of allocatable, 50% of requested; memory used 30% of allocatable, 60% \
             of requested"
        );
        assert!(summary(&report).contains("\n  utilization:       CPU used 38% of allocatable"));
        report.timeline.clear();
        assert_eq!(
            utilization(&report).unwrap(),
            "CPU used ? of allocatable, ? of requested; memory used ? of allocatable, ? of \
             requested"
        );
    }

    #[test]
    fn rightsizing_names_the_three_workloads_furthest_from_their_requests_either_way() {
        let mut report = pb::Report::default();
        assert_eq!(rightsizing(&report), None, "no usage, no rightsizing line");
        let workload = |name: &str, cpu: (u64, u64), memory: (u64, u64)| pb::WorkloadUsage {
            name: name.to_owned(),
            samples: 10,
            p95_cpu_millis: cpu.0,
            requested_cpu_millis: cpu.1,
            p95_memory_bytes: memory.0,
            requested_memory_bytes: memory.1,
        };
        report.usage = Some(pb::UsageReplay {
            usage_vs_requests: vec![
                // 2x over on CPU.
                workload("Deployment/shop/web", (1000, 500), (64 << 20, 64 << 20)),
                // Requests nothing: not compared.
                workload("Deployment/shop/free", (5000, 0), (1 << 30, 0)),
                // 10x under on memory (0.1x), CPU unrequested.
                workload("Deployment/shop/cache", (100, 0), (100 << 20, 1000 << 20)),
                // Just right: last, and beyond three.
                workload("Deployment/shop/api", (100, 100), (32 << 20, 32 << 20)),
                // 4x over on memory.
                workload("Job/shop/batch", (100, 100), (128 << 20, 32 << 20)),
            ],
            ..Default::default()
        });
        assert_eq!(
            rightsizing(&report).unwrap(),
            "Deployment/shop/cache CPU p95 100m, none requested, memory p95 100Mi of 1000Mi \
             requested (0.10x); Job/shop/batch CPU p95 100m of 100m requested (1.00x), memory \
             p95 128Mi of 32Mi requested (4.00x); Deployment/shop/web CPU p95 1000m of 500m \
             requested (2.00x), memory p95 64Mi of 64Mi requested (1.00x)"
        );
        assert!(summary(&report).contains("\n  rightsizing:       Deployment/shop/cache"));
        report.usage.as_mut().unwrap().usage_vs_requests.truncate(0);
        assert_eq!(rightsizing(&report), None, "nothing to compare");
    }

    #[test]
    fn the_summary_names_the_provisioning_model_and_how_the_run_got_it() {
        let mut report = pb::Report::default();
        assert!(summary(&report).contains("  provisioning:      none recorded"));
        report.provisioning = Some(pb::Provisioning {
            name: "published".into(),
            summary: "published (built in): node registration p50 1m".into(),
            origin: "default".into(),
            ..pb::Provisioning::default()
        });
        assert!(
            summary(&report).contains(
                "  provisioning:      published (built in): node registration p50 1m [default]\n"
            ),
            "{}",
            summary(&report)
        );
    }

    #[test]
    fn durations_read_well_at_every_scale() {
        let h = |d: Duration| human(Some(&duration_to_proto(d)));
        assert_eq!(h(Duration::from_micros(250)), "0.25ms");
        assert_eq!(h(Duration::from_micros(12_345)), "12.345ms");
        assert_eq!(h(Duration::from_millis(61_500)), "1m01s");
        assert_eq!(h(Duration::from_millis(1_500)), "1.5s");
        assert_eq!(h(Duration::from_secs(3_725)), "1h02m05s");
        assert_eq!(human(None), "0ms");
    }
    #[test]
    fn the_configuration_says_what_was_given_and_how_it_ran() {
        use env::AutoscalerFlagSource as Source;
        let flag = |name: &str, given: &str, as_run: &str, source: Source| env::AutoscalerFlag {
            name: name.into(),
            given: given.into(),
            as_run: as_run.into(),
            from_defaults: source != Source::Run,
            floored: name == "scan-interval",
            source: source.into(),
        };
        let configuration = env::AppliedConfiguration {
            scheduler_given: Some(env::SchedulerConfig {
                source: "packed.yaml".into(),
                yaml: "kind: KubeSchedulerConfiguration".into(),
            }),
            scheduler_as_run_yaml: "...".into(),
            autoscaler: true,
            speed: 10.0,
            autoscaler_flags: vec![
                flag("v", "4", "4", Source::Environment),
                flag("scan-interval", "30s", "3s", Source::Recording),
                flag("scale-down-unneeded-time", "2m", "12s", Source::Run),
                flag("expander", "price", "price", Source::Run),
                flag(
                    "max-node-provision-time",
                    "15m0s",
                    "1m30s",
                    Source::CaDefault,
                ),
                flag(
                    "skip-nodes-with-system-pods",
                    "true",
                    "true",
                    Source::CaDefault,
                ),
            ],
            provider: Some(env::ProviderConfig {
                source: "prices.yaml".into(),
                yaml: String::new(),
            }),
            autoscaler_recorded_source: "Deployment kube-system/cluster-autoscaler in the trace"
                .into(),
            autoscaler_not_applied: vec![env::AutoscalerFlagNotApplied {
                flag: "--cloud-provider=aws".into(),
                reason: "not a flag a run may set (provider)".into(),
            }],
            autoscaler_simulation_flags: vec![env::AutoscalerSimulationFlag {
                name: "leader-elect".into(),
                value: "false".into(),
                reason: "one CA runs".into(),
            }],
            controller_manager_flags: vec![
                env::ControllerManagerFlag {
                    name: "horizontal-pod-autoscaler-sync-period".into(),
                    given: "15s".into(),
                    as_run: "1.5s".into(),
                },
                env::ControllerManagerFlag {
                    name: "horizontal-pod-autoscaler-downscale-stabilization".into(),
                    given: "5m".into(),
                    as_run: "30s".into(),
                },
            ],
            karpenter: None,
        };
        assert_eq!(
            configuration_lines(&configuration),
            [
                "scheduler:         packed.yaml",
                "provider config:   prices.yaml",
                "HPA controller:    horizontal-pod-autoscaler-sync-period=15s (runs 1.5s)",
                "                   horizontal-pod-autoscaler-downscale-stabilization=5m (runs 30s)",
                "autoscaler flags:  run: scale-down-unneeded-time=2m (runs 12s), expander=price",
                "                   recording: scan-interval=30s (runs 3s, CA's floor)",
                "                   environment: v=4",
                "                   CA's defaults at 10x: max-node-provision-time=15m0s (runs 1m30s)",
                "recorded CA:       Deployment kube-system/cluster-autoscaler in the trace",
                "                   not applied: --cloud-provider=aws: not a flag a run may set (provider)",
                "ksim sets:         leader-elect=false (production differs): one CA runs",
            ]
        );
        // A report from before `source`: the run's flags and the environment's.
        let old = env::AppliedConfiguration {
            autoscaler: true,
            speed: 1.0,
            autoscaler_flags: vec![
                flag("scan-interval", "1s", "1s", Source::Unspecified),
                flag("expander", "price", "price", Source::Unspecified),
            ],
            ..Default::default()
        };
        let mut old = old;
        old.autoscaler_flags[1].from_defaults = false;
        assert_eq!(
            configuration_lines(&old),
            [
                "scheduler:         its defaults",
                "autoscaler flags:  run: expander=price",
                "                   environment: scan-interval=1s",
            ]
        );
        let defaults = env::AppliedConfiguration {
            autoscaler: false,
            ..Default::default()
        };
        assert_eq!(
            configuration_lines(&defaults),
            ["scheduler:         its defaults"]
        );
        let karpenter = env::AppliedConfiguration {
            karpenter: Some(env::KarpenterRun {
                version: "v1.14.1".into(),
            }),
            ..Default::default()
        };
        assert_eq!(
            configuration_lines(&karpenter),
            [
                "scheduler:         its defaults",
                "node autoscaler:   Karpenter v1.14.1 (its own defaults, the run's NodePools)",
            ]
        );
        // Workload autoscaling without CA, at 1x: the HPA flags all the same.
        let hpa_only = env::AppliedConfiguration {
            autoscaler: false,
            controller_manager_flags: vec![env::ControllerManagerFlag {
                name: "horizontal-pod-autoscaler-sync-period".into(),
                given: "15s".into(),
                as_run: "15s".into(),
            }],
            ..Default::default()
        };
        assert_eq!(
            configuration_lines(&hpa_only),
            [
                "scheduler:         its defaults",
                "HPA controller:    horizontal-pod-autoscaler-sync-period=15s",
            ]
        );
        // Node failures with workload autoscaling: each controller under its own label.
        let kcm_flag = |name: &str, given: &str, as_run: &str| env::ControllerManagerFlag {
            name: name.into(),
            given: given.into(),
            as_run: as_run.into(),
        };
        let node_lifecycle = env::AppliedConfiguration {
            controller_manager_flags: vec![
                kcm_flag("horizontal-pod-autoscaler-sync-period", "15s", "1.5s"),
                kcm_flag("node-monitor-grace-period", "50s", "5s"),
                kcm_flag("node-eviction-rate", "0.1", "1"),
                kcm_flag("some-newer-flag", "1s", "1s"),
            ],
            ..Default::default()
        };
        assert_eq!(
            configuration_lines(&node_lifecycle),
            [
                "scheduler:         its defaults",
                "HPA controller:    horizontal-pod-autoscaler-sync-period=15s (runs 1.5s)",
                "node lifecycle:    node-monitor-grace-period=50s (runs 5s)",
                "                   node-eviction-rate=0.1 (runs 1)",
                "KCM flags:         some-newer-flag=1s",
            ]
        );
    }
    #[test]
    fn costs_name_the_unpriced_and_waits_the_most_frequent() {
        let report = fixtures::report();
        let lines = cost_lines(report.costs.as_ref().unwrap());
        assert_eq!(
            lines,
            [
                "node-hours:        0.003 (group-a 0.001 at 0.096/h = 0.0001; group-b 0.001, no price); \
                 cost 0.0001 without group-b (no price)",
                "pods waited:       5.8 pod-seconds pending; 1 never scheduled, 1 evicted, 0 preempted",
                "packing:           requested/allocatable cpu 39% (peak 39%), memory 21% (peak 21%)",
            ]
        );
        let wait = |reason: &str, count| pb::WaitReason {
            source: "scheduler".into(),
            reason: reason.into(),
            owner: "Deployment/web".into(),
            count,
        };
        let many = [wait("a", 4), wait("b", 3), wait("c", 2), wait("d", 1)];
        assert_eq!(
            waits(&many),
            "a x4 (Deployment/web, scheduler); b x3 (Deployment/web, scheduler); \
             c x2 (Deployment/web, scheduler); ... 1 more in report.json"
        );
    }
}
