//! Records and files shared by the unit tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{TraceWriter, pb};

pub(crate) fn deployment_gvk() -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: "apps".to_owned(),
        version: "v1".to_owned(),
        kind: "Deployment".to_owned(),
    }
}

pub(crate) fn pod_gvk() -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: String::new(),
        version: "v1".to_owned(),
        kind: "Pod".to_owned(),
    }
}

pub(crate) fn sample_header() -> pb::TraceHeader {
    pb::TraceHeader {
        format_version: crate::FORMAT_VERSION,
        tracer_config: Some(pb::TracerConfig {
            tracked_kinds: vec![pb::TrackedKindConfig {
                gvk: Some(deployment_gvk()),
                plural: "deployments".to_owned(),
                namespaced: true,
                pod_template_paths: vec!["/spec/template".to_owned()],
                track_lifecycles: true,
                skip_owned: false,
            }],
            cluster_recorded: false,
            ..Default::default()
        }),
        start_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        end_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_100,
            nanos: 0,
        }),
        created_by: "ksim-trace tests".to_owned(),
        create_time: None,
        origin: "unit test".to_owned(),
        transforms: Vec::new(),
    }
}

pub(crate) fn object(gvk: pb::GroupVersionKind, namespace: &str, name: &str) -> pb::TraceObject {
    let json = format!(
        r#"{{"apiVersion":"apps/v1","kind":"{}","metadata":{{"name":"{name}","namespace":"{namespace}"}}}}"#,
        gvk.kind
    );
    pb::TraceObject {
        gvk: Some(gvk),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        object_json: json.into_bytes(),
    }
}

/// An event applying one Deployment `default/<name>`.
pub(crate) fn sample_event(timestamp_ms: i64, name: &str) -> pb::TraceEvent {
    pb::TraceEvent {
        timestamp_ms,
        applied: vec![object(deployment_gvk(), "default", name)],
        deleted: Vec::new(),
    }
}

pub(crate) fn sample_lifecycle(owner: &str, launch_index: u32) -> pb::PodLifecycle {
    pb::PodLifecycle {
        owner_gvk: Some(deployment_gvk()),
        owner_namespace: "default".to_owned(),
        owner_name: owner.to_owned(),
        pod_spec_hash: 0xfeed,
        launch_index,
        start_ms: 1_700_000_001_000,
        end_ms: 1_700_000_002_000,
        outcome: pb::PodOutcome::Succeeded.into(),
        pod_name: format!("{owner}-{launch_index}"),
        ..Default::default()
    }
}

/// A complete file: three events (web applied, api applied, web deleted), two lifecycles.
pub(crate) fn sample_file() -> Vec<u8> {
    let mut writer = TraceWriter::new(Vec::new(), &sample_header()).unwrap();
    writer.write_event(&sample_event(1_000, "web")).unwrap();
    writer.write_lifecycle(&sample_lifecycle("web", 0)).unwrap();
    writer.write_event(&sample_event(2_000, "api")).unwrap();
    writer
        .write_event(&pb::TraceEvent {
            timestamp_ms: 2_000,
            applied: Vec::new(),
            deleted: vec![object(deployment_gvk(), "default", "web")],
        })
        .unwrap();
    writer.write_lifecycle(&sample_lifecycle("web", 1)).unwrap();
    let (file, _) = writer.finish().unwrap();
    file
}

/// The decompressed record stream of a file.
pub(crate) fn decompress(file: &[u8]) -> Vec<u8> {
    zstd::stream::decode_all(file).unwrap()
}
