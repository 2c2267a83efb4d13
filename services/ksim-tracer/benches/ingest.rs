//! Tracer store figures for docs/benchmarks.md: sustained ingest through the store API, bytes
//! per event on disk for a pod-churn workload, export time, and resident memory as events pass.
//!
//! cargo bench -p ksim-tracer --bench ingest -- --events 1000000 --checkpoints 1000000
//!
//! Pod churn: each pod is created (a full object), starts, ends and is deleted (a tombstone),
//! so per pod two object events and two lifetime records. Records go through the same path the
//! watches feed (recorder -> log, batches of 1024, fsync every 100 ms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_tracer::{
    domain::{
        export::Window, filter::Filter, kinds::TrackedKind, recorder::Observation,
        sanitize::EnvRedaction,
    },
    exporter::{Export, Source},
    log::{FsyncPolicy, LogConfig, Retention},
    spill::Spill,
    store::Store,
};
use serde_json::{Value, json};

struct Args {
    events: u64,
    checkpoints: Vec<u64>,
    live_pods: u64,
}

fn args() -> Args {
    let mut parsed = Args {
        events: 1_000_000,
        checkpoints: vec![],
        live_pods: 2_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--events" => parsed.events = it.next().unwrap().parse().unwrap(),
            "--checkpoints" => {
                parsed.checkpoints = it
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|n| n.parse().unwrap())
                    .collect()
            }
            "--live-pods" => parsed.live_pods = it.next().unwrap().parse().unwrap(),
            _ => {} // cargo bench passes --bench
        }
    }
    if parsed.checkpoints.is_empty() {
        parsed.checkpoints = vec![parsed.events];
    }
    parsed
}

fn pod(i: u64, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-7d9f8c6b5-{i:08x}"), "namespace": format!("team-{}", i % 20),
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d9f8c6b5"},
            "uid": format!("{i:032x}"), "resourceVersion": i.to_string(), "creationTimestamp": "2026-11-21T08:00:00Z",
        },
        "spec": {
            "containers": [{
                "name": "web", "image": "registry.example.com/shop/web:1.42.7",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "us-east-1"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                "volumeMounts": [{"name": format!("kube-api-access-{:05x}", i % 99_999), "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler", "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "volumes": [{"name": format!("kube-api-access-{:05x}", i % 99_999), "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "nodeName": format!("node-{}", i % 500)
        },
        "status": {"phase": phase}
    })
}

fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// The most the process has been resident, ever: the export's peak, since ingest stays lower.
fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

/// Bytes the process has written with write(2) so far: during the export, its temporary files
/// (the trace itself goes to a channel).
fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                dir_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

fn main() {
    let args = args();
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path().join("log"));
    config.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    // Retention off: bytes per event and export read everything that was written.
    config.retention = Retention {
        max_age: None,
        max_bytes: None,
    };
    let pod_kind = TrackedKind {
        api_version: "v1".into(),
        kind: "Pod".into(),
        pod_template_paths: vec![String::new()],
        track_lifecycles: true,
        skip_owned: false,
    };
    let (store, _) = Store::open(config, vec![pod_kind], EnvRedaction::default()).unwrap();
    println!(
        "tracer store ingest, pod churn: {} live pods, batches of 1024 observations, fsync every 100 ms",
        args.live_pods
    );
    println!(
        "{:>12} {:>14} {:>12} {:>14} {:>10}",
        "events", "events/s", "bytes/event", "disk MiB", "RSS MiB"
    );

    let started = Instant::now();
    let mut last_sync = Instant::now();
    let (mut recorded, mut next_pod, mut step) = (0_u64, 0_u64, 0_u64);
    let mut live: VecDeque<u64> = VecDeque::new();
    let mut batch = Vec::with_capacity(1024);
    let mut now_ms = 1_700_000_000_000_i64;
    let mut checkpoints = args.checkpoints.iter().copied().peekable();
    while recorded < args.events {
        // Keep `live_pods` pods in flight: create one, and once full, end and delete the oldest.
        step += 1;
        now_ms += 1;
        let observation = match step % 4 {
            0 => {
                next_pod += 1;
                live.push_back(next_pod);
                Observation::Applied {
                    kind: 0,
                    object: pod(next_pod, "Pending"),
                    listed: false,
                }
            }
            1 => Observation::Applied {
                kind: 0,
                object: pod(live.back().copied().unwrap_or(0), "Running"),
                listed: false,
            },
            2 if live.len() as u64 >= args.live_pods => Observation::Applied {
                kind: 0,
                object: pod(live.front().copied().unwrap_or(0), "Succeeded"),
                listed: false,
            },
            3 if live.len() as u64 >= args.live_pods => {
                let gone = live.pop_front().unwrap();
                Observation::Deleted {
                    kind: 0,
                    object: pod(gone, "Succeeded"),
                }
            }
            _ => continue,
        };
        batch.push(observation);
        if batch.len() == 1024 {
            let entries = store.observe(std::mem::take(&mut batch), now_ms).unwrap();
            recorded += entries.len() as u64;
            store.append(&entries).unwrap();
            if last_sync.elapsed() >= Duration::from_millis(100) {
                store.sync().unwrap();
                last_sync = Instant::now();
            }
        }
        while checkpoints.peek().is_some_and(|c| recorded >= *c) {
            checkpoints.next();
            store.sync().unwrap();
            let seconds = started.elapsed().as_secs_f64();
            let disk = dir_bytes(dir.path());
            println!(
                "{recorded:>12} {:>14.0} {:>12.1} {:>14.1} {:>10.1}",
                recorded as f64 / seconds,
                disk as f64 / recorded as f64,
                disk as f64 / (1 << 20) as f64,
                rss_mib()
            );
        }
    }
    store.sync().unwrap();
    // Sealed, compressed segments are what stays on disk; seal the active one for the figure.
    store.seal_active().unwrap();

    let stats = store.log_stats().unwrap();
    println!(
        "on disk after sealing: {:.1} bytes/record ({} records, {:.1} MiB, {} segments)",
        stats.bytes_on_disk as f64 / (stats.events + stats.lifecycles) as f64,
        stats.events + stats.lifecycles,
        stats.bytes_on_disk as f64 / (1 << 20) as f64,
        stats.segments
    );

    let export_started = Instant::now();
    let written_before = written_bytes();
    let (chunks, mut receiver) =
        tokio::sync::mpsc::channel::<Result<pb::ExportResponse, tonic::Status>>(16);
    let drain = std::thread::spawn(move || {
        // A digest of the trace file, so runs of two builds can show they export the same bytes.
        let mut digest = xxhash_rust::xxh3::Xxh3::new();
        let mut bytes = 0_u64;
        while let Some(Ok(chunk)) = receiver.blocking_recv() {
            bytes += chunk.data.len() as u64;
            digest.update(&chunk.data);
        }
        (bytes, digest.digest())
    });
    let export = Export {
        source: Source::Log(store.snapshot().unwrap()),
        window: Window::new(i64::MIN / 2, i64::MAX / 2).unwrap(),
        filter: Filter::from_proto(None).unwrap(),
        header: pb::TraceHeader {
            format_version: ksim_trace::FORMAT_VERSION,
            ..Default::default()
        },
        chunk_bytes: 1 << 20,
        spill: Spill::new(dir.path()),
    };
    let summary = export.run(chunks).unwrap();
    let (bytes, digest) = drain.join().unwrap();
    let written = written_bytes() - written_before;
    println!(
        "export of the whole log: {:.2} s for {} events + {} lifecycles, {:.1} MiB trace file, RSS {:.1} MiB after, peak {:.1} MiB",
        export_started.elapsed().as_secs_f64(),
        summary.events,
        summary.lifecycles,
        bytes as f64 / (1 << 20) as f64,
        rss_mib(),
        peak_rss_mib()
    );
    println!(
        "the export wrote {:.1} MiB of temporary files; trace file xxh3 {digest:016x}",
        written as f64 / (1 << 20) as f64
    );
}
