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
        Record::Event(event(i64::MAX, Vec::new())),
    ];
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    for record in &records {
        match record {
            Record::Event(event) => writer.write_event(event).unwrap(),
            Record::Lifecycle(lifecycle) => writer.write_lifecycle(lifecycle).unwrap(),
        }
    }
    let (file, trailer) = writer.finish().unwrap();
    assert_eq!(
        trailer,
        pb::TraceTrailer {
            event_count: 3,
            lifecycle_count: 2,
            object_count: 3
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
