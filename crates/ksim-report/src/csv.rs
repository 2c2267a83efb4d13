//! The timeline as CSV, one row per bucket.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use ksim_proto::json::to_millis;

use super::fidelity::{Measure, running_pod_seconds, side};
use ksim_trace::time::millis;

use super::model::{Fidelity, Report, nodes_total};
use super::timeline::offset_ms;

/// `offset_s,time_ms,nodes_total,nodes_<group>...,pending,running,succeeded,failed,unknown,
/// unscheduled,scale_ups,scale_downs,cpu_requested_m,cpu_allocatable_m,memory_requested_bytes,
/// memory_allocatable_bytes,cpu_used_m,memory_used_bytes,gpus_allocatable,gpus_allocated,
/// gpus_fragmented,pending_gpu_pods`, with one `nodes_<group>` column per group seen anywhere
/// in the timeline (sorted; 0 where a bucket lacks the group). `offset_s` is recorded time
/// (the replay's wall clock times the speed); `time_ms` is the bucket's wall-clock start. The
/// newer columns come last, so readers of the older ones keep their positions; 0 without usage
/// or GPUs (the GPU columns are over all models).
pub fn to_csv(report: &Report) -> String {
    let groups: BTreeSet<&str> = report
        .timeline
        .iter()
        .flat_map(|bucket| bucket.nodes.iter().map(|count| count.node_group.as_str()))
        .collect();

    let mut out = String::from("offset_s,time_ms,nodes_total");
    for group in &groups {
        out.push(',');
        out.push_str(&field(&format!("nodes_{group}")));
    }
    out.push_str(
        ",pending,running,succeeded,failed,unknown,unscheduled,scale_ups,scale_downs,\
         cpu_requested_m,cpu_allocatable_m,memory_requested_bytes,memory_allocatable_bytes,\
         cpu_used_m,memory_used_bytes,gpus_allocatable,gpus_allocated,gpus_fragmented,\
         pending_gpu_pods\n",
    );

    for bucket in &report.timeline {
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "{},{},{}",
            seconds(offset_ms(bucket)),
            bucket.time.as_ref().map_or(0, millis),
            nodes_total(bucket)
        );
        for group in &groups {
            let nodes = bucket
                .nodes
                .iter()
                .find(|count| count.node_group == *group)
                .map_or(0, |count| count.nodes);
            let _ = write!(out, ",{nodes}");
        }
        let (pods, usage) = (
            bucket.pods.unwrap_or_default(),
            bucket.usage.unwrap_or_default(),
        );
        let gpus = |of: fn(&crate::GpuUsage) -> u64| bucket.gpus.iter().map(of).sum::<u64>();
        let _ = writeln!(
            out,
            ",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            pods.pending,
            pods.running,
            pods.succeeded,
            pods.failed,
            pods.unknown,
            bucket.unscheduled_pods,
            bucket.autoscaler_scale_ups,
            bucket.autoscaler_scale_downs,
            usage.requested_cpu_millis,
            usage.allocatable_cpu_millis,
            usage.requested_memory_bytes,
            usage.allocatable_memory_bytes,
            usage.used_cpu_millis,
            usage.used_memory_bytes,
            gpus(|g| g.allocatable),
            gpus(|g| g.allocated),
            gpus(|g| g.fragmented),
            bucket.pending_gpu_pods
        );
    }
    out
}

/// The comparison, one row per bucket: `offset_s`, then `recorded_<series>,simulated_<series>`
/// for each series in the order of [`Fidelity`]'s `series` (`nodes`, `nodes/<group>`...,
/// `pods_running`, `pods_pending`), then `recorded_running_pod_seconds,
/// simulated_running_pod_seconds`: running totals to the bucket's end, the last row's being the
/// report's. `offset_s` is recorded time.
pub fn fidelity_to_csv(fidelity: &Fidelity) -> String {
    let measures = Measure::all(&fidelity.buckets);
    let mut out = String::from("offset_s");
    for measure in &measures {
        let name = measure.name();
        let _ = write!(
            out,
            ",{},{}",
            field(&format!("recorded_{name}")),
            field(&format!("simulated_{name}"))
        );
    }
    out.push_str(",recorded_running_pod_seconds,simulated_running_pod_seconds\n");
    let (mut recorded, mut simulated) = (0, 0);
    let width_ms = to_millis(fidelity.bucket_width.as_ref());
    for bucket in &fidelity.buckets {
        let (recorded_side, simulated_side) = (side(bucket, false), side(bucket, true));
        out.push_str(&seconds(to_millis(bucket.offset.as_ref())));
        for measure in &measures {
            let _ = write!(
                out,
                ",{},{}",
                measure.value(recorded_side),
                measure.value(simulated_side)
            );
        }
        recorded += recorded_side.pods_running;
        simulated += simulated_side.pods_running;
        let pod_seconds = |pods: u64| running_pod_seconds(std::iter::once(pods), width_ms);
        let _ = writeln!(out, ",{},{}", pod_seconds(recorded), pod_seconds(simulated));
    }
    out
}

/// Scaled workloads' replicas, one row per timeline bucket per workload: `bucket` (its index),
/// `offset_ms` (recorded time), `workload` (`Kind/namespace/name` as recorded), `recorded`
/// and `simulated` (the count at the bucket's end). `None` when the report has no scaled
/// workload.
pub fn replicas_to_csv(report: &Report) -> Option<String> {
    let workloads = &report.workload_scaling.as_ref()?.workloads;
    if workloads.is_empty() {
        return None;
    }
    let mut out = String::from("bucket,offset_ms,workload,recorded,simulated\n");
    for (index, bucket) in report.timeline.iter().enumerate() {
        for workload in workloads {
            let _ = writeln!(
                out,
                "{index},{},{},{},{}",
                offset_ms(bucket),
                field(&workload.name),
                workload.recorded.get(index).copied().unwrap_or(0),
                workload.simulated.get(index).copied().unwrap_or(0),
            );
        }
    }
    Some(out)
}

/// Whole seconds as an integer; a bucket from a foreign proto may not start on one.
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{}.{:03}", ms / 1000, ms % 1000)
    }
}

/// RFC 4180 quoting; group names are Kubernetes names and should never need it.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;

    #[test]
    fn header_and_rows_for_two_groups() {
        let csv = to_csv(&fixtures::report());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "offset_s,time_ms,nodes_total,nodes_group-a,nodes_group-b,pending,running,succeeded,\
             failed,unknown,unscheduled,scale_ups,scale_downs,cpu_requested_m,cpu_allocatable_m,\
             memory_requested_bytes,memory_allocatable_bytes,cpu_used_m,memory_used_bytes,\
             gpus_allocatable,gpus_allocated,gpus_fragmented,pending_gpu_pods"
        );
        // Requested, allocatable, then used: 900 m and 2 GiB; no GPUs.
        let usage = ",1500,3860,3221225472,15032385536,900,2147483648,0,0,0,0";
        assert_eq!(lines.len(), 1 + 4);
        assert_eq!(
            lines[1],
            format!("0,1767225600000,1,1,0,5,0,0,0,0,5,0,0{usage}")
        );
        assert_eq!(
            lines[2],
            format!("1,1767225601000,3,1,2,3,2,0,0,0,3,2,0{usage}")
        );
        // Second 2 has no sample: carried forward; its scale-down is its own.
        assert_eq!(
            lines[3],
            format!("2,1767225602000,3,1,2,3,2,0,0,0,3,0,1{usage}")
        );
        assert_eq!(
            lines[4],
            format!("3,1767225603000,2,1,1,0,4,1,1,0,0,0,0{usage}")
        );
    }

    #[test]
    fn fidelity_has_a_recorded_and_a_simulated_column_per_series() {
        let report = fixtures::report();
        let csv = fidelity_to_csv(report.fidelity.as_ref().unwrap());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "offset_s,recorded_nodes,simulated_nodes,recorded_nodes/group-a,\
             simulated_nodes/group-a,recorded_nodes/group-b,simulated_nodes/group-b,\
             recorded_pods_running,simulated_pods_running,recorded_pods_pending,\
             simulated_pods_pending,recorded_running_pod_seconds,simulated_running_pod_seconds"
        );
        // One 5 s bucket, compared at the replay's last sample (3 s): recorded 1 + 2 nodes,
        // 2 running; simulated 1 + 1, 4 running; the bucket's 5 s of 2 and 4 running pods.
        assert_eq!(lines[1..], ["0,3,2,1,1,2,1,2,4,0,0,10,20"]);
    }

    #[test]
    fn replicas_have_a_row_per_bucket_and_workload() {
        let mut report = fixtures::report();
        assert_eq!(replicas_to_csv(&report), None);
        report.workload_scaling = Some(fixtures::workload_scaling());
        let csv = replicas_to_csv(&report).unwrap();
        let lines: Vec<_> = csv.lines().collect();
        assert_eq!(lines[0], "bucket,offset_ms,workload,recorded,simulated");
        assert_eq!(lines[2], "1,1000,Deployment/shop/web,4,3");
        assert_eq!(lines[3], "2,2000,Deployment/shop/web,4,8");
        // Buckets past the series (the fixture's has three) read 0.
        assert_eq!(lines[4], "3,3000,Deployment/shop/web,0,0");
        assert_eq!(lines.len(), 1 + report.timeline.len());
    }

    #[test]
    fn empty_timeline_is_just_the_header() {
        let csv = to_csv(&Report::default());
        assert_eq!(
            csv,
            "offset_s,time_ms,nodes_total,pending,running,succeeded,failed,unknown,unscheduled,\
             scale_ups,scale_downs,cpu_requested_m,cpu_allocatable_m,memory_requested_bytes,\
             memory_allocatable_bytes,cpu_used_m,memory_used_bytes,gpus_allocatable,\
             gpus_allocated,gpus_fragmented,pending_gpu_pods\n"
        );
    }

    #[test]
    fn gpu_columns_add_up_the_models() {
        let mut report = fixtures::report();
        report.timeline[1].gpus = ["A100", "V100"]
            .iter()
            .map(|model| crate::GpuUsage {
                model: (*model).to_owned(),
                nodes: 1,
                allocatable: 8,
                allocated: 3,
                fragmented: 1,
            })
            .collect();
        report.timeline[1].pending_gpu_pods = 2;
        let csv = to_csv(&report);
        assert!(csv.lines().nth(2).unwrap().ends_with(",16,6,2,2"), "{csv}");
    }

    #[test]
    fn odd_values_are_quoted_and_fractional_offsets_kept() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("x\"y"), "\"x\"\"y\"");
        assert_eq!(seconds(1500), "1.500");
        assert_eq!(seconds(3000), "3");
    }
}
