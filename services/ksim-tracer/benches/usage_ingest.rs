//! Tracer figures for recording usage (docs/benchmarks.md): what one read of the metrics API
//! costs the tracer (parsing a PodMetricsList and picking the new windows), samples recorded
//! per second through the store, and bytes per usage sample on disk.
//!
//! cargo bench -p ksim-tracer --bench usage_ingest -- --pods 10000 --reads 40
//!
//! Each read is a PodMetricsList as metrics-server answers it (every pod, two containers, a new
//! window at each read), parsed from its bytes as the tracer does. Every read is then repeated
//! unchanged, as a tracer reading faster than metrics-server's resolution sees it: nothing new,
//! nothing recorded. Samples go through the same path the reader feeds (recorder -> log,
//! batches of 1024, fsync every 100 ms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_tracer::{
    domain::{
        export::Window,
        filter::Filter,
        recorder::Observation,
        sanitize::EnvRedaction,
        usage::{PodMetricsList, UsageReader},
    },
    exporter::{Export, Source},
    log::{FsyncPolicy, LogConfig, Retention},
    spill::Spill,
    store::Store,
};
use serde_json::json;

const READ_INTERVAL_MS: i64 = 15_000;

struct Args {
    pods: u64,
    reads: u64,
}

fn args() -> Args {
    let mut parsed = Args {
        pods: 10_000,
        reads: 40,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--pods" => parsed.pods = it.next().unwrap().parse().unwrap(),
            "--reads" => parsed.reads = it.next().unwrap().parse().unwrap(),
            _ => {} // cargo bench passes --bench
        }
    }
    parsed
}

/// A deterministic spread of figures, so compression sees realistic variety.
fn spread(seed: u64) -> u64 {
    seed.wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
        >> 33
}

/// The metrics API's answer at read `read`, as bytes.
fn answer(pods: u64, read: u64) -> Vec<u8> {
    let timestamp = k8s_openapi::jiff::Timestamp::from_millisecond(
        1_795_773_600_000 + read as i64 * READ_INTERVAL_MS,
    )
    .unwrap()
    .to_string();
    let items: Vec<_> = (0..pods)
        .map(|pod| {
            let noise = spread(pod * 1_000 + read);
            json!({
                "metadata": {"name": format!("web-{pod:06}-7d9f8b6c5d-x2k4q"),
                             "namespace": format!("team-{:03}", pod % 100),
                             "creationTimestamp": timestamp, "labels": {"app": "web"}},
                "timestamp": timestamp,
                "window": "15.012s",
                "containers": [
                    {"name": "app", "usage": {"cpu": format!("{}n", 50_000_000 + noise % 400_000_000),
                                              "memory": format!("{}Ki", 100_000 + noise % 300_000)}},
                    {"name": "istio-proxy", "usage": {"cpu": format!("{}n", 2_000_000 + noise % 8_000_000),
                                                      "memory": format!("{}Ki", 40_000 + noise % 5_000)}},
                ],
            })
        })
        .collect();
    serde_json::to_vec(&json!({
        "kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {}, "items": items
    }))
    .unwrap()
}

fn main() {
    let args = args();
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path().join("log"));
    config.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    config.retention = Retention {
        max_age: None,
        max_bytes: None,
    };
    let (store, _) = Store::open(config, Vec::new(), EnvRedaction::default()).unwrap();
    println!(
        "tracer usage recording: {} pods of 2 containers, {} reads {} s apart, each read repeated unchanged",
        args.pods,
        args.reads,
        READ_INTERVAL_MS / 1000
    );
    let mut reader = UsageReader::default();
    let (mut samples, mut answer_bytes) = (0_u64, 0_u64);
    let (mut read_time, mut repeat_time, mut store_time) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut last_sync = Instant::now();
    for read in 0..args.reads {
        let bytes = answer(args.pods, read);
        answer_bytes += bytes.len() as u64;
        let started = Instant::now();
        let list: PodMetricsList = serde_json::from_slice(&bytes).unwrap();
        let new = reader.read(list);
        read_time += started.elapsed();
        assert_eq!(new.samples.len() as u64, args.pods);

        let started = Instant::now();
        let list: PodMetricsList = serde_json::from_slice(&bytes).unwrap();
        assert!(reader.read(list).samples.is_empty());
        repeat_time += started.elapsed();

        let started = Instant::now();
        let now_ms = 1_795_773_600_000 + read as i64 * READ_INTERVAL_MS + 200;
        let mut observations = new.samples.into_iter().map(Observation::Usage).peekable();
        while observations.peek().is_some() {
            let batch: Vec<_> = observations.by_ref().take(1024).collect();
            let entries = store.observe(batch, now_ms).unwrap();
            samples += entries.len() as u64;
            store.append(&entries).unwrap();
            if last_sync.elapsed() >= Duration::from_millis(100) {
                store.sync().unwrap();
                last_sync = Instant::now();
            }
        }
        store_time += started.elapsed();
    }
    store.sync().unwrap();
    store.seal_active().unwrap();
    let stats = store.log_stats().unwrap();
    let reads = args.reads as f64;
    println!(
        "one read: {:.1} MiB answer, parsed and sorted in {:.0} ms ({:.0} ms when nothing is new)",
        answer_bytes as f64 / reads / (1 << 20) as f64,
        read_time.as_secs_f64() * 1000.0 / reads,
        repeat_time.as_secs_f64() * 1000.0 / reads,
    );
    println!(
        "recorded {samples} samples at {:.0} samples/s through the store; on disk after sealing \
         {:.1} bytes/sample ({:.1} MiB, {} segments)",
        samples as f64 / store_time.as_secs_f64(),
        stats.bytes_on_disk as f64 / samples as f64,
        stats.bytes_on_disk as f64 / (1 << 20) as f64,
        stats.segments
    );
    println!(
        "so a day at this read interval: {:.0} MiB on disk",
        stats.bytes_on_disk as f64 / reads * (86_400_000 / READ_INTERVAL_MS) as f64
            / (1 << 20) as f64
    );

    let started = Instant::now();
    let (chunks, mut receiver) =
        tokio::sync::mpsc::channel::<Result<pb::ExportResponse, tonic::Status>>(16);
    let drain = std::thread::spawn(move || {
        let mut bytes = 0_u64;
        while let Some(Ok(chunk)) = receiver.blocking_recv() {
            bytes += chunk.data.len() as u64;
        }
        bytes
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
    export.run(chunks).unwrap();
    let bytes = drain.join().unwrap();
    println!(
        "export of every sample: {:.2} s, {:.1} MiB trace file ({:.1} bytes/sample)",
        started.elapsed().as_secs_f64(),
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / samples as f64
    );
}
