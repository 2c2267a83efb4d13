//! Validate throughput and peak memory on generated traces of 100,000 and 1,000,000 events over
//! the same 1,000 Deployments (plus their ConfigMaps and ServiceAccounts): events/s and peak
//! RSS (`VmHWM`, reset before each pass through /proc/self/clear_refs), for the streaming
//! validation and for a --fix pass. Memory should follow the distinct objects, not the events.
//!
//! `cargo bench -p ksim-lint --bench validate` (release); `-- --events N` for one length only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::time::Instant;

use ksim_lint::{Options, fix, lint};
use ksim_trace::{TraceReader, TraceWriter, pb};
use serde_json::json;

const OBJECTS: usize = 1_000;
const T0: i64 = 1_767_225_600_000;

fn object(value: &serde_json::Value, namespace: &str, name: &str) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(ksim_trace::gvk::from_api_version(
            value["apiVersion"].as_str().unwrap(),
            value["kind"].as_str().unwrap(),
        )),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        object_json: serde_json::to_vec(value).unwrap(),
    }
}

fn deployment(index: usize, replicas: usize) -> pb::TraceObject {
    let name = format!("svc-{index:04}");
    let namespace = format!("team-{}", index % 20);
    let value = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app": name, "tier": "backend", "team": namespace}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, "tier": "backend"}},
                              "spec": {"serviceAccountName": "runner",
                                       "containers": [{"name": "main", "image": "registry.example/app:1.2.3",
                                           "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                                           "envFrom": [{"configMapRef": {"name": "settings"}}],
                                           "env": [{"name": "MODE", "value": "bench"}]}]}}}
    });
    object(&value, &namespace, &name)
}

/// A trace of `events` events: the ConfigMaps and ServiceAccounts first, then Deployments
/// scaling, one applied object per event, 10 ms apart.
fn generate(path: &Path, events: usize) {
    let header = pb::TraceHeader {
        created_by: "ksim-lint bench".into(),
        ..Default::default()
    };
    let out = BufWriter::new(File::create(path).unwrap());
    let mut writer = TraceWriter::new(out, &header).unwrap();
    let mut setup = Vec::new();
    for team in 0..20 {
        let namespace = format!("team-{team}");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "settings", "namespace": namespace}, "data": {"k": "v"}});
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "runner", "namespace": namespace}});
        setup.push(object(&cm, &namespace, "settings"));
        setup.push(object(&sa, &namespace, "runner"));
    }
    writer
        .write_event(&pb::TraceEvent {
            timestamp_ms: T0,
            applied: setup,
            deleted: Vec::new(),
        })
        .unwrap();
    for i in 1..events {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: T0 + i as i64 * 10,
                applied: vec![deployment(i % OBJECTS, 1 + i % 7)],
                deleted: Vec::new(),
            })
            .unwrap();
    }
    writer.finish().unwrap();
}

fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn reader(path: &Path) -> TraceReader<BufReader<File>> {
    TraceReader::new(BufReader::new(File::open(path).unwrap()))
        .unwrap()
        .unordered()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(i) = args.iter().position(|a| a == "--events") else {
        // Each length in a process of its own, so one's peak cannot hide in the other's.
        println!(
            "| events | file | validate events/s | validate peak RSS | fix events/s | fix peak RSS |"
        );
        println!("|---:|---:|---:|---:|---:|---:|");
        for events in ["100000", "1000000"] {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--events", events])
                .status()
                .unwrap();
            assert!(status.success());
        }
        return;
    };
    let lengths: Vec<usize> = vec![args[i + 1].parse().unwrap()];
    let dir = tempfile::tempdir().unwrap();
    for events in lengths {
        let path = dir.path().join(format!("{events}.ktrace"));
        let started = Instant::now();
        generate(&path, events);
        let size = std::fs::metadata(&path).unwrap().len();
        eprintln!(
            "generated {events} events ({size} bytes) in {:.1?}",
            started.elapsed()
        );

        let resettable = reset_peak();
        let started = Instant::now();
        let mut findings = 0u64;
        let summary = lint(reader(&path), Options::default(), &mut |_| findings += 1).unwrap();
        let validate_secs = started.elapsed().as_secs_f64();
        let validate_rss = peak_rss_mib();
        assert_eq!(summary.events as usize, events);
        assert_eq!(findings, 0, "the generated trace is clean");

        reset_peak();
        let started = Instant::now();
        let out = BufWriter::new(File::create(dir.path().join("fixed.ktrace")).unwrap());
        fix(
            reader(&path),
            &summary,
            &Options::default(),
            out,
            &mut |_| {},
        )
        .unwrap();
        let fix_secs = started.elapsed().as_secs_f64();
        let fix_rss = peak_rss_mib();
        println!(
            "| {events} | {:.1} MiB | {:.0} | {validate_rss:.1} MiB | {:.0} | {fix_rss:.1} MiB |",
            size as f64 / (1 << 20) as f64,
            events as f64 / validate_secs,
            events as f64 / fix_secs,
        );
        if !resettable {
            eprintln!("(/proc/self/clear_refs not writable: peak RSS is the process's so far)");
        }
    }
}
