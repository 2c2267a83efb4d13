//! Writing a trace and reading it back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{deployment, event, header, lifecycle};
use ksim_trace::{FORMAT_VERSION, Record, TraceReader, TraceWriter, inspect, pb, read_trace};

#[test]
fn every_record_comes_back_in_order() {
    let records = vec![
        Record::Lifecycle(lifecycle("web", 0, 1_700_000_001_000)),
        Record::Event(event(1_000, vec![deployment("default", "web", 1)])),
        Record::Event(pb::TraceEvent {
            timestamp_ms: 1_000,
            applied: vec![deployment("team-a", "api", 2)],
            deleted: vec![pb::TraceObject {
                object_json: Vec::new(),
                ..deployment("default", "web", 1)
            }],
        }),
        Record::Lifecycle(lifecycle("web", 1, 0)),
        Record::Sample(sample(1_000, 2, 3)),
        Record::Node(node("n1", 0)),
        Record::Sample(sample(2_000, 1, 0)),
        Record::Node(node("n1", 2_000)),
        Record::Usage(usage(1_000, "web-1", 250_000_000, 64 << 20)),
        Record::Usage(usage(16_000, "web-1", 300_000_000, 70 << 20)),
        Record::Event(event(ksim_trace::time::MAX_MS, Vec::new())),
    ];
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    for record in &records {
        writer.write(record).unwrap();
    }
    let (file, trailer) = writer.finish().unwrap();
    assert_eq!(
        trailer,
        pb::TraceTrailer {
            event_count: 3,
            lifecycle_count: 2,
            object_count: 3,
            sample_count: 2,
            node_count: 2,
            usage_count: 2,
        }
    );

    let mut reader = TraceReader::new(file.as_slice()).unwrap();
    assert_eq!(reader.header(), &header());
    assert_eq!(reader.trailer(), None, "no trailer before the end");
    let mut read = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        read.push(record);
    }
    assert_eq!(read, records);
    assert_eq!(reader.trailer(), Some(&trailer));
    // The end stays the end.
    assert_eq!(reader.next_record().unwrap(), None);
    assert_eq!(reader.compressed_bytes(), file.len() as u64);
}

#[test]
fn read_trace_splits_events_and_lifecycles() {
    let (file, trailer) = crate::common::valid_file();
    let trace = read_trace(&file).unwrap();
    assert_eq!(trace.header.format_version, FORMAT_VERSION);
    assert_eq!(trace.header.origin, "https://127.0.0.1:6443");
    assert_eq!(trace.events.len(), 2);
    assert_eq!(trace.events[1].timestamp_ms, 2_000);
    assert_eq!(trace.lifecycles, vec![lifecycle("web", 0, 0)]);
    assert_eq!(trace.trailer, trailer);
}

#[test]
fn a_large_trace_streams_and_compresses() {
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    for index in 0..2_000u32 {
        let name = format!("web-{}", index % 50);
        writer
            .write_event(&event(
                i64::from(index) * 10,
                vec![deployment("default", &name, index)],
            ))
            .unwrap();
    }
    let (file, trailer) = writer.finish().unwrap();
    assert_eq!(trailer.event_count, 2_000);
    let inspection = inspect::inspect(file.as_slice()).unwrap();
    assert_eq!(inspection.events, 2_000);
    assert_eq!(inspection.objects, 50);
    assert_eq!(inspection.applies, 2_000);
    assert_eq!(inspection.last_event_ms, Some(19_990));
    assert!(
        inspection.compressed_bytes * 5 < inspection.uncompressed_bytes,
        "{} compressed from {}",
        inspection.compressed_bytes,
        inspection.uncompressed_bytes
    );
}

#[test]
fn files_can_be_written_to_disk_and_read_back() {
    // No tempfile crate: one file named after this process, removed at the end.
    let path =
        std::env::temp_dir().join(format!("ksim-trace-test-{}.ksimtrace", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = TraceWriter::new(std::io::BufWriter::new(file), &header()).unwrap();
    writer
        .write_event(&event(7, vec![deployment("default", "web", 1)]))
        .unwrap();
    writer.finish().unwrap();
    let inspection = inspect::inspect(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(inspection.events, 1);
    assert_eq!(
        inspection.compressed_bytes,
        std::fs::metadata(&path).unwrap().len()
    );
    std::fs::remove_file(&path).unwrap();
}

fn sample(timestamp_ms: i64, nodes: u32, pending: u32) -> pb::ClusterSample {
    pb::ClusterSample {
        timestamp_ms,
        ready_nodes: [("m5".to_owned(), nodes)].into(),
        pods: [(
            "shop".to_owned(),
            pb::RecordedPodCounts {
                pending,
                running: 1,
            },
        )]
        .into(),
    }
}

fn node(name: &str, deleted_ms: i64) -> pb::RecordedNode {
    pb::RecordedNode {
        timestamp_ms: 500,
        name: name.to_owned(),
        group: "m5".to_owned(),
        labels: [(
            "node.kubernetes.io/instance-type".to_owned(),
            "m5.large".to_owned(),
        )]
        .into(),
        capacity: [("cpu".to_owned(), "2".to_owned())].into(),
        allocatable: [("cpu".to_owned(), "1930m".to_owned())].into(),
        ready: true,
        created_ms: 100,
        deleted_ms,
        ..Default::default()
    }
}

#[test]
fn cluster_records_are_checked_and_counted() {
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    writer.write_sample(&sample(2_000, 1, 0)).unwrap();
    let older = writer.write_sample(&sample(1_000, 1, 0)).unwrap_err();
    assert!(
        older
            .to_string()
            .contains("samples must be in timestamp order"),
        "{older}"
    );
    let nameless = writer.write_node(&node("", 0)).unwrap_err();
    assert!(nameless.to_string().contains("has no name"), "{nameless}");
    writer.write_node(&node("n1", 0)).unwrap();
    let (file, _) = writer.finish().unwrap();

    let summary = inspect::inspect(file.as_slice()).unwrap();
    assert_eq!((summary.samples, summary.nodes), (1, 1));
    assert_eq!(summary.peak_ready_nodes, 1);
    assert_eq!(summary.peak_running_pods, 1);
    let trace = read_trace(&file).unwrap();
    assert_eq!(trace.samples, [sample(2_000, 1, 0)]);
    assert_eq!(trace.nodes, [node("n1", 0)]);
    assert!(trace.header.tracer_config.unwrap().cluster_recorded);
}

fn usage(timestamp_ms: i64, pod: &str, cpu_nanocores: i64, memory_bytes: i64) -> pb::UsageSample {
    pb::UsageSample {
        timestamp_ms,
        window_ms: 15_000,
        namespace: "shop".to_owned(),
        pod: pod.to_owned(),
        containers: vec![pb::ContainerUsage {
            name: "app".to_owned(),
            cpu_nanocores,
            memory_bytes,
        }],
    }
}

#[test]
fn usage_samples_are_checked_counted_and_summarised() {
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    writer.write_usage(&usage(2_000, "web-1", 1, 1)).unwrap();
    let refused = [
        (usage(3_000, "", 1, 1), "usage sample 1 has no pod name"),
        (
            usage(3_000, "web-2", -1, 1),
            "usage sample 1 has a negative amount",
        ),
        (
            usage(3_000, "web-2", 1, -1),
            "usage sample 1 has a negative amount",
        ),
        (
            pb::UsageSample {
                window_ms: -1,
                ..usage(3_000, "web-2", 1, 1)
            },
            "usage sample 1 has a negative window",
        ),
        (
            pb::UsageSample {
                containers: vec![pb::ContainerUsage::default()],
                ..usage(3_000, "web-2", 1, 1)
            },
            "usage sample 1 has a container without a name",
        ),
    ];
    for (sample, message) in refused {
        let error = writer.write_usage(&sample).unwrap_err();
        assert!(error.to_string().contains(message), "{error}");
    }
    // Read together, measured apart: an earlier time after a later one is kept as read.
    writer.write_usage(&usage(1_000, "web-2", 2, 2)).unwrap();
    writer.write_usage(&usage(4_000, "web-1", 3, 3)).unwrap();
    let (file, trailer) = writer.finish().unwrap();
    assert_eq!(trailer.usage_count, 3);

    let summary = inspect::inspect(file.as_slice()).unwrap();
    assert_eq!((summary.usage_samples, summary.usage_pods), (3, 2));
    let trace = read_trace(&file).unwrap();
    assert_eq!(
        trace.usage,
        [
            usage(2_000, "web-1", 1, 1),
            usage(1_000, "web-2", 2, 2),
            usage(4_000, "web-1", 3, 3)
        ]
    );
}
