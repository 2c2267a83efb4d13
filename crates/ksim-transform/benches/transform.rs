//! Transform throughput and memory: writes a trace of 100,000 and one of 1,000,000 events (one
//! Deployment apply each, a pod lifecycle every 10 events), transforms each file to a file with
//! a CEL selector that reads the object, a replica scale, a rename and a time shift, and prints
//! events/s and the peak RSS (VmHWM) after each. The peak after the short trace and after the
//! long one are the same when memory does not grow with the trace's length.
//!
//! `cargo bench -p ksim-transform` (figures in docs/benchmarks.md).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufReader, BufWriter};
use std::time::Instant;

use ksim_trace::{TraceWriter, pb, time};
use ksim_transform::{Rules, transform_trace};

const T0: i64 = 1_767_225_600_000;

const RULES: &str = r#"
rules:
  - match: 'kind == "Deployment" && object.metadata.namespace == "shop" && object.spec.replicas > 1'
    scaleReplicas: 2
  - renameNamespace: { from: shop, to: shop-b }
  - shiftTime: 1h
"#;

fn deployment(i: u64) -> pb::TraceObject {
    let name = format!("web-{}", i % 1000);
    let json = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": {"replicas": i % 20, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "app", "image": "registry.example/web:1.2.3",
                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}}
    });
    pb::TraceObject {
        gvk: Some(pb::GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        }),
        namespace: "shop".into(),
        name,
        object_json: serde_json::to_vec(&json).unwrap(),
    }
}

fn write_trace(path: &std::path::Path, events: u64) {
    let header = pb::TraceHeader {
        start_time: Some(time::timestamp(T0)),
        end_time: Some(time::timestamp(T0 + events as i64 * 10 + 1)),
        created_by: "ksim-transform bench".into(),
        ..Default::default()
    };
    let file = BufWriter::new(std::fs::File::create(path).unwrap());
    let mut writer = TraceWriter::new(file, &header).unwrap();
    for i in 0..events {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: T0 + i as i64 * 10,
                applied: vec![deployment(i)],
                deleted: Vec::new(),
            })
            .unwrap();
        if i % 10 == 0 {
            writer
                .write_lifecycle(&pb::PodLifecycle {
                    owner_gvk: deployment(i).gvk,
                    owner_namespace: "shop".into(),
                    owner_name: format!("web-{}", i % 1000),
                    start_ms: T0 + i as i64 * 10,
                    end_ms: T0 + i as i64 * 10 + 5_000,
                    outcome: pb::PodOutcome::Succeeded as i32,
                    ..Default::default()
                })
                .unwrap();
        }
    }
    writer.finish().unwrap();
}

/// Peak resident set size of this process so far, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|arg| arg == "--bench");
    let lengths: &[u64] = if quick {
        &[1_000, 10_000]
    } else {
        &[100_000, 1_000_000]
    };
    let rules = Rules::parse(RULES).unwrap();
    let dir = tempfile::tempdir().unwrap();
    println!(
        "transform: {} rules: CEL selector on the object, scaleReplicas, renameNamespace, shiftTime",
        rules.len()
    );
    for &events in lengths {
        let input = dir.path().join(format!("in-{events}.ktrace"));
        let output = dir.path().join(format!("out-{events}.ktrace"));
        write_trace(&input, events);
        let started = Instant::now();
        let reader = BufReader::new(std::fs::File::open(&input).unwrap());
        let writer = BufWriter::new(std::fs::File::create(&output).unwrap());
        let (_, summary) = transform_trace(&rules, reader, writer, "bench").unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(summary.stats.events_out, events);
        let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        println!(
            "{events:>9} events ({} lifecycles, {} objects changed): {elapsed:.2} s, {:.0} events/s, \
             in {:.1} MB, out {:.1} MB, peak RSS so far {:.1} MiB",
            summary.stats.lifecycles_out,
            summary.stats.objects_changed,
            events as f64 / elapsed,
            size(&input) as f64 / 1e6,
            size(&output) as f64 / 1e6,
            peak_rss_kib() as f64 / 1024.0
        );
    }
}
