//! Records and raw files shared by the integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use ksim_trace::{FORMAT_VERSION, TraceWriter, pb};
use prost::Message;

use pb::trace_record::Record as Oneof;

pub fn gvk(group: &str, version: &str, kind: &str) -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
    }
}

pub fn header() -> pb::TraceHeader {
    pb::TraceHeader {
        format_version: FORMAT_VERSION,
        tracer_config: Some(pb::TracerConfig {
            tracked_kinds: vec![pb::TrackedKindConfig {
                gvk: Some(gvk("apps", "v1", "Deployment")),
                plural: "deployments".to_owned(),
                namespaced: true,
                pod_template_paths: vec!["/spec/template".to_owned()],
                track_lifecycles: true,
                skip_owned: false,
            }],
            cluster_recorded: true,
            usage_recording: pb::UsageRecording::Recorded.into(),
            usage_interval_ms: 15_000,
        }),
        start_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        end_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_100,
            nanos: 5,
        }),
        created_by: "ksim-trace integration tests".to_owned(),
        create_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_200,
            nanos: 0,
        }),
        origin: "https://127.0.0.1:6443".to_owned(),
        transforms: Vec::new(),
    }
}

pub fn deployment(namespace: &str, name: &str, replicas: u32) -> pb::TraceObject {
    let json = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas},
    });
    pb::TraceObject {
        gvk: Some(gvk("apps", "v1", "Deployment")),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        object_json: serde_json::to_vec(&json).unwrap(),
    }
}

pub fn event(timestamp_ms: i64, applied: Vec<pb::TraceObject>) -> pb::TraceEvent {
    pb::TraceEvent {
        timestamp_ms,
        applied,
        deleted: Vec::new(),
    }
}

pub fn lifecycle(owner: &str, launch_index: u32, end_ms: i64) -> pb::PodLifecycle {
    pb::PodLifecycle {
        owner_gvk: Some(gvk("apps", "v1", "Deployment")),
        owner_namespace: "default".to_owned(),
        owner_name: owner.to_owned(),
        pod_spec_hash: u64::MAX,
        launch_index,
        start_ms: 1_700_000_000_500,
        end_ms,
        outcome: if end_ms == 0 {
            pb::PodOutcome::Running.into()
        } else {
            pb::PodOutcome::Failed.into()
        },
        pod_name: format!("{owner}-abc{launch_index}"),
        ..Default::default()
    }
}

/// A complete, valid file and its trailer.
pub fn valid_file() -> (Vec<u8>, pb::TraceTrailer) {
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    writer
        .write_event(&event(1_000, vec![deployment("default", "web", 1)]))
        .unwrap();
    writer.write_lifecycle(&lifecycle("web", 0, 0)).unwrap();
    writer
        .write_event(&event(2_000, vec![deployment("default", "web", 3)]))
        .unwrap();
    writer.finish().unwrap()
}

/// A record stream framed as the format does, before compression.
pub fn framed(records: &[Oneof]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        pb::TraceRecord {
            record: Some(record.clone()),
        }
        .encode_length_delimited(&mut out)
        .unwrap();
    }
    out
}

/// Offsets at which each framed record starts.
pub fn record_offsets(records: &[Oneof]) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut offset = 0;
    for record in records {
        offsets.push(offset);
        offset += framed(std::slice::from_ref(record)).len() as u64;
    }
    offsets
}

pub fn compress(stream: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(stream, 3).unwrap()
}

/// Header, two events and a matching trailer, as records.
pub fn valid_records() -> Vec<Oneof> {
    vec![
        Oneof::Header(header()),
        Oneof::Event(event(1_000, vec![deployment("default", "web", 1)])),
        Oneof::Event(event(1_000, vec![deployment("default", "api", 1)])),
        Oneof::Trailer(pb::TraceTrailer {
            event_count: 2,
            lifecycle_count: 0,
            object_count: 2,
            ..Default::default()
        }),
    ]
}
pub mod simkube;
