//! The TraceStore API's answers to bad input, and imports (ksim and SimKube) exported back.
//! The tracer points at a cluster that is not there: the API must work regardless, and say
//! that its watches are failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crate::common::{Tracer, changes};
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::TraceWriter;
use ksim_trace::time::timestamp;
use prost::Message;
use serde_json::json;
use tonic::Code;

fn unreachable_cluster(dir: &Path) -> std::path::PathBuf {
    let port = ksim_localenv::free_port().unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    path
}

async fn tracer(dir: &Path) -> Tracer {
    Tracer::start(
        &unreachable_cluster(dir),
        &dir.join("tracer"),
        None,
        &["--max-import-bytes=64Ki"],
    )
    .await
}

fn object(name: &str, replicas: i64) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(pb::GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        }),
        namespace: "shop".into(),
        name: name.into(),
        object_json: serde_json::to_vec(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "shop"}, "spec": {"replicas": replicas}}))
        .unwrap(),
    }
}

/// What the imported trace's header says was recorded: not what this tracer records.
fn imported_config() -> pb::TracerConfig {
    pb::TracerConfig {
        usage_recording: pb::UsageRecording::NoMetricsApi.into(),
        usage_interval_ms: 30_000,
        ..Default::default()
    }
}

fn ksim_trace_file() -> Vec<u8> {
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        tracer_config: Some(imported_config()),
        ..Default::default()
    };
    let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
    for (ts, name, replicas) in [(1_000, "web", 1), (2_000, "web", 4), (3_000, "api", 1)] {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: ts,
                applied: vec![object(name, replicas)],
                deleted: vec![],
            })
            .unwrap();
    }
    writer
        .write_event(&pb::TraceEvent {
            timestamp_ms: 4_000,
            applied: vec![],
            deleted: vec![object("api", 1)],
        })
        .unwrap();
    writer.finish().unwrap().0
}

async fn import(
    tracer: &Tracer,
    data: Vec<u8>,
    chunk: usize,
) -> Result<pb::ImportResponse, tonic::Status> {
    let messages: Vec<pb::ImportRequest> = data
        .chunks(chunk.max(1))
        .enumerate()
        .map(|(i, part)| pb::ImportRequest {
            data: part.to_vec(),
            format: 0,
            display_name: if i == 0 { "test".into() } else { String::new() },
        })
        .collect();
    tracer
        .client()
        .await
        .import(tokio_stream::iter(messages))
        .await
        .map(tonic::Response::into_inner)
}

fn assert_invalid(result: Result<impl std::fmt::Debug, tonic::Status>, fragment: &str) {
    let status = result.expect_err("bad input must be refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains(fragment),
        "message {:?} should mention {fragment:?}",
        status.message()
    );
}

#[tokio::test]
async fn imported_traces_are_validated_whole_and_export_back() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = tracer(dir.path()).await;

    let file = ksim_trace_file();
    let imported = import(&tracer, file.clone(), 7).await.unwrap();
    assert_eq!(imported.bytes_received, file.len() as u64);
    let summary = imported.summary.unwrap();
    assert_eq!((summary.events, summary.objects), (4, 4));
    assert_eq!(
        import(&tracer, file.clone(), 1024).await.unwrap().trace_id,
        imported.trace_id,
        "same content, same id"
    );

    let whole = tracer
        .export(pb::ExportRequest {
            trace_id: imported.trace_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    // The export speaks for the imported recording, not for the live tracer's.
    assert_eq!(whole.header.tracer_config, Some(imported_config()));
    let got: Vec<_> = changes(&whole)
        .into_iter()
        .map(|c| (c.0, c.1, c.3))
        .collect();
    assert_eq!(
        got,
        [
            (1_000, "apply", "shop/web"),
            (2_000, "apply", "shop/web"),
            (3_000, "apply", "shop/api"),
            (4_000, "delete", "shop/api")
        ]
        .map(|(t, v, n)| (t, v, n.to_owned()))
    );
    let window = tracer
        .export(pb::ExportRequest {
            trace_id: imported.trace_id.clone(),
            start_time: Some(timestamp(2_500)),
            end_time: Some(timestamp(3_500)),
            chunk_size_bytes: 16,
            ..Default::default()
        })
        .await
        .unwrap();
    let got: Vec<_> = changes(&window)
        .into_iter()
        .map(|c| (c.0, c.1, c.3))
        .collect();
    assert_eq!(
        got,
        [(2_500, "apply", "shop/web"), (3_000, "apply", "shop/api")].map(|(t, v, n)| (
            t,
            v,
            n.to_owned()
        ))
    );

    let stats = tracer
        .client()
        .await
        .stats(pb::StatsRequest {
            trace_id: imported.trace_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.events, 4);
    assert_eq!(stats.kinds[0].applies, 3);

    // SimKube, format version 2 (MessagePack), converted on import.
    let simkube = rmp_serde::to_vec_named(&json!({
        "version": 2,
        "config": {"trackedObjects": {"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"], "trackLifecycle": false}}},
        "events": [
            {"ts": 1_700_000_000, "applied_objs": [], "deleted_objs": []},
            {"ts": 1_700_000_005, "applied_objs": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "sk", "namespace": "n"}, "spec": {"replicas": 2}}], "deleted_objs": []}
        ],
        "index": {},
        "pod_lifecycles": {}
    }))
    .unwrap();
    let converted = import(&tracer, simkube, 10).await.unwrap();
    let trace = tracer
        .export(pb::ExportRequest {
            trace_id: converted.trace_id,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        changes(&trace)
            .into_iter()
            .map(|c| (c.0, c.3))
            .collect::<Vec<_>>(),
        [(1_700_000_005_000, "n/sk".to_owned())]
    );
    // SimKube's tracked kinds, not the live tracer's, and no usage.
    let config = trace.header.tracer_config.unwrap();
    let kinds: Vec<&str> = config
        .tracked_kinds
        .iter()
        .map(|k| k.gvk.as_ref().unwrap().kind.as_str())
        .collect();
    assert_eq!(kinds, ["Deployment"]);
    assert_eq!(config.usage_recording(), pb::UsageRecording::Unspecified);
}

/// A trace recorded long ago (its events in 1970) exported without an end ends where its
/// recording ended, not now: replayed, it would otherwise run for decades.
#[tokio::test]
async fn an_imported_trace_exported_without_an_end_ends_where_its_recording_ended() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = tracer(dir.path()).await;
    let end_of = |trace: &ksim_trace::Trace| {
        let header = &trace.header;
        (
            header.start_time.as_ref().map(ksim_trace::time::millis),
            header.end_time.as_ref().map(ksim_trace::time::millis),
        )
    };

    // No recorded end in its header: just after its last event (at 4 s).
    let plain = import(&tracer, ksim_trace_file(), 1024).await.unwrap();
    let whole = tracer
        .export(pb::ExportRequest {
            trace_id: plain.trace_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(end_of(&whole), (Some(1_000), Some(4_001)));
    assert_eq!(changes(&whole).len(), 4, "the last event is in the window");

    // A header that says the recording went on to 10 s: there.
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        start_time: Some(timestamp(1_000)),
        end_time: Some(timestamp(10_000)),
        ..Default::default()
    };
    let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
    writer
        .write_event(&pb::TraceEvent {
            timestamp_ms: 2_000,
            applied: vec![object("web", 1)],
            deleted: vec![],
        })
        .unwrap();
    let longer = import(&tracer, writer.finish().unwrap().0, 1024)
        .await
        .unwrap();
    let windowed = tracer
        .export(pb::ExportRequest {
            trace_id: longer.trace_id,
            start_time: Some(timestamp(1_500)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(end_of(&windowed), (Some(1_500), Some(10_000)));
}

#[tokio::test]
async fn bad_files_and_requests_get_clear_errors_and_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = tracer(dir.path()).await;

    assert_invalid(
        import(&tracer, b"{\"not\": \"a trace\"}".to_vec(), 4).await,
        "neither a ksim trace nor a SimKube trace",
    );
    assert_invalid(import(&tracer, Vec::new(), 4).await, "empty");
    let file = ksim_trace_file();
    assert_invalid(
        import(&tracer, file[..file.len() / 2].to_vec(), 100).await,
        "truncated",
    );
    let mut flipped = file.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0xff;
    assert!(import(&tracer, flipped, 100).await.unwrap_err().code() == Code::InvalidArgument);
    assert_invalid(
        import(&tracer, vec![0_u8; 70 * 1024], 8 * 1024).await,
        "import limit",
    );

    // A file from a future format version names both versions.
    let mut future = Vec::new();
    pb::TraceRecord {
        record: Some(pb::trace_record::Record::Header(pb::TraceHeader {
            format_version: 99,
            ..Default::default()
        })),
    }
    .encode_length_delimited(&mut future)
    .unwrap();
    let future = zstd::encode_all(future.as_slice(), 3).unwrap();
    assert_invalid(import(&tracer, future, 100).await, "99");
    let simkube_v3 = rmp_serde::to_vec_named(&json!({"version": 3, "events": []})).unwrap();
    assert_invalid(import(&tracer, simkube_v3, 100).await, "3");

    let imports = dir.path().join("tracer/imports");
    let kept: Vec<_> = std::fs::read_dir(&imports)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        kept.is_empty(),
        "refused uploads leave nothing behind: {kept:?}"
    );

    let export = |request: pb::ExportRequest| tracer.export_bytes(request);
    assert_invalid(
        export(pb::ExportRequest {
            start_time: Some(timestamp(5_000)),
            end_time: Some(timestamp(5_000)),
            ..Default::default()
        })
        .await,
        "window is empty",
    );
    // Before 1970: refused up front, not by the writer after the stream began.
    assert_invalid(
        export(pb::ExportRequest {
            start_time: Some(timestamp(-60_000)),
            ..Default::default()
        })
        .await,
        "start_time: -60000 ms is outside the times a trace can hold",
    );
    assert_invalid(
        export(pb::ExportRequest {
            filter: Some(pb::TraceFilter {
                include_label_selectors: vec!["app in web".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await,
        "filter.include_label_selectors",
    );
    assert_invalid(
        export(pb::ExportRequest {
            trace_id: "../../etc/passwd".into(),
            ..Default::default()
        })
        .await,
        "not a trace id",
    );
    let missing = export(pb::ExportRequest {
        trace_id: "0".repeat(32),
        ..Default::default()
    })
    .await
    .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");

    // The watches fail (no cluster), and say so; the API still answers.
    let kinds = tracer.tracked_kinds().await;
    assert_eq!(kinds.len(), 9, "the default kinds, nodes and HPAs included");
    assert!(
        kinds
            .iter()
            .all(|k| k.state() != pb::TrackedKindState::Watching),
        "{kinds:?}"
    );
}
