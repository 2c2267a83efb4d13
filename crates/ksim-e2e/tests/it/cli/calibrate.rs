//! `ksim trace calibrate` as a user runs it: the real binary on trace files written with
//! ksim-trace's writer (nodes, CA's scale-up events and pods with known delays) and on a
//! SimKube trace, which holds no nodes; the model it writes is read back by `Model::parse`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use ksim_proto::ksim::trace::v1 as pb;
use ksim_provisioning::{Delay, Model};
use ksim_trace::TraceWriter;
use serde_json::json;

use super::common;

const T0: i64 = 1_767_225_600_000;
const NODES: i64 = 30;

fn ksim(args: &[&str]) -> Output {
    std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        .output()
        .unwrap()
}

fn gvk(group: &str, version: &str, kind: &str) -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
    }
}

/// CA's event on a pod it scaled group m5 up for, from `from` nodes to one more.
fn scale_up_event(pod: &str, from: i64) -> pb::TraceObject {
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{pod}.17a"), "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": pod},
        "reason": "TriggeredScaleUp",
        "message": format!("pod triggered scale-up: [{{m5 {from}->{} (max: 100)}}]", from + 1),
        "source": {"component": "cluster-autoscaler"}
    });
    pb::TraceObject {
        gvk: Some(gvk("", "v1", "Event")),
        namespace: "shop".into(),
        name: format!("{pod}.17a"),
        object_json: serde_json::to_vec(&event).unwrap(),
    }
}

fn node(name: &str, at: i64, created: i64) -> pb::RecordedNode {
    pb::RecordedNode {
        timestamp_ms: at,
        name: name.into(),
        group: "m5".into(),
        labels: [(
            "node.kubernetes.io/instance-type".to_owned(),
            "m5.large".to_owned(),
        )]
        .into(),
        created_ms: created,
        ..Default::default()
    }
}

/// A recording of 30 nodes of group m5: node i is asked for by CA at T0 + 10 min x i (two
/// pods' events), created 30 + i seconds later, Ready 5 s after that, and removed 30 s after
/// its removal began; 25 pods of Deployment shop/web, each Running 3 s after it was bound.
fn write_recording(path: &Path) {
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        created_by: "test".into(),
        start_time: Some(ksim_trace::time::timestamp(T0)),
        end_time: Some(ksim_trace::time::timestamp(T0 + 24 * 3_600_000)),
        tracer_config: Some(pb::TracerConfig {
            tracked_kinds: vec![pb::TrackedKindConfig {
                gvk: Some(gvk("", "v1", "Event")),
                plural: "events".into(),
                namespaced: true,
                ..Default::default()
            }],
            cluster_recorded: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut writer = TraceWriter::new(std::fs::File::create(path).unwrap(), &header).unwrap();
    for i in 0..NODES {
        let at = T0 + i * 600_000;
        for pod in ["a", "b"] {
            writer
                .write_event(&pb::TraceEvent {
                    timestamp_ms: at + 10,
                    applied: vec![scale_up_event(&format!("web-{i}-{pod}"), i)],
                    deleted: vec![],
                })
                .unwrap();
        }
    }
    for i in 0..NODES {
        let name = format!("m5-{i}");
        let created = T0 + i * 600_000 + 10 + (30 + i) * 1_000;
        let removal = created + 120_000;
        writer.write_node(&node(&name, created, created)).unwrap();
        writer
            .write_node(&pb::RecordedNode {
                ready: true,
                ..node(&name, created + 5_000, created)
            })
            .unwrap();
        writer
            .write_node(&pb::RecordedNode {
                ready: true,
                removal_started_ms: removal,
                ..node(&name, removal, created)
            })
            .unwrap();
        writer
            .write_node(&pb::RecordedNode {
                ready: true,
                removal_started_ms: removal,
                deleted_ms: removal + 30_000,
                ..node(&name, removal + 30_000, created)
            })
            .unwrap();
    }
    for i in 0..25 {
        let bound = T0 + 60_000 + i * 1_000;
        writer
            .write_lifecycle(&pb::PodLifecycle {
                owner_gvk: Some(gvk("apps", "v1", "Deployment")),
                owner_namespace: "shop".into(),
                owner_name: "web".into(),
                launch_index: u32::try_from(i).unwrap(),
                bound_ms: bound,
                start_ms: bound + 3_000,
                ready_ms: bound + 4_000,
                node_name: "old-node".into(),
                pod_name: format!("web-{i}"),
                ..Default::default()
            })
            .unwrap();
    }
    writer.finish().unwrap();
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn calibrate_learns_the_recorded_delays_and_writes_a_model_that_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("prod.ktrace");
    write_recording(&trace);
    let model_path = dir.path().join("prod.yaml");
    let output = ksim(&[
        "trace",
        "calibrate",
        trace.to_str().unwrap(),
        "-o",
        model_path.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).unwrap();
    let row = table
        .lines()
        .find(|line| line.starts_with("m5 "))
        .unwrap_or_else(|| panic!("no m5 row:\n{table}"));
    // Registration 30..59 s: nearest-rank p50 44 s, p90 56 s, p99 59 s; Ready 5 s after.
    for says in [
        "m5.large",
        "30",
        "CA trigger",
        "30 49s/1m1s/1m4s",
        "30 44s/56s/59s",
        "30 5s/5s/5s",
        "30 30s/30s/30s",
    ] {
        assert!(row.contains(says), "{says:?} missing from {row:?}\n{table}");
    }
    let owner = table
        .lines()
        .find(|line| line.starts_with("Deployment/shop/web"))
        .unwrap_or_else(|| panic!("no owner row:\n{table}"));
    assert!(
        owner.contains("25 3s/3s/3s") && owner.contains("25 4s/4s/4s"),
        "{owner}"
    );

    let model = Model::parse("prod.yaml", &std::fs::read_to_string(&model_path).unwrap()).unwrap();
    assert_eq!(model.name, "prod", "named after the trace");
    assert_eq!(model.source, "ksim trace calibrate prod.ktrace");
    let nodes = &model.nodes.default;
    assert_eq!(
        nodes.registration,
        Delay::Percentiles {
            p50: secs(44),
            p90: Some(secs(56)),
            p99: None
        },
        "30 samples: p50 and p90, no p99"
    );
    assert_eq!(nodes.ready.median(), secs(5));
    assert_eq!(nodes.termination.median(), secs(30));
    assert_eq!(model.pods.default.start.median(), secs(3));
    assert!(model.nodes.groups.is_empty(), "one group: the default");

    // --name names it; an output that is not a regular file is refused before any work.
    let named = dir.path().join("named.yaml");
    let output = ksim(&[
        "trace",
        "calibrate",
        trace.to_str().unwrap(),
        "-o",
        named.to_str().unwrap(),
        "--name",
        "prod-eu-1",
    ]);
    assert!(output.status.success());
    let model = Model::parse("named.yaml", &std::fs::read_to_string(&named).unwrap()).unwrap();
    assert_eq!(model.name, "prod-eu-1");
    let refused = ksim(&[
        "trace",
        "calibrate",
        trace.to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    let message = String::from_utf8(refused.stderr).unwrap();
    assert_eq!(message.lines().count(), 1, "{message}");
}

#[test]
fn without_events_registration_is_unknown_and_the_table_says_where_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("quiet.ktrace");
    // Only nodes: no Events tracked, none recorded.
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        created_by: "test".into(),
        start_time: Some(ksim_trace::time::timestamp(T0)),
        tracer_config: Some(pb::TracerConfig {
            cluster_recorded: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut writer = TraceWriter::new(std::fs::File::create(&trace).unwrap(), &header).unwrap();
    for i in 0..5 {
        let created = T0 + i * 60_000;
        writer
            .write_node(&node(&format!("n{i}"), created, created))
            .unwrap();
        writer
            .write_node(&pb::RecordedNode {
                ready: true,
                ..node(&format!("n{i}"), created + 8_000, created)
            })
            .unwrap();
    }
    writer.finish().unwrap();
    let output = ksim(&["trace", "calibrate", trace.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("node creation"), "{table}");
    assert!(table.contains("recorded no Events"), "{table}");
    assert!(table.contains("5 8s/8s/8s"), "{table}");
}

#[test]
fn a_simkube_trace_holds_no_nodes_and_is_told_what_to_use_instead() {
    let dir = tempfile::tempdir().unwrap();
    let simkube = dir.path().join("day.sktrace");
    common::write_simkube_trace(&simkube);
    let converted = dir.path().join("day.ktrace");
    let output = ksim(&[
        "trace",
        "convert",
        simkube.to_str().unwrap(),
        converted.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let model = dir.path().join("never.yaml");
    for trace in [&simkube, &converted] {
        let output = ksim(&[
            "trace",
            "calibrate",
            trace.to_str().unwrap(),
            "-o",
            model.to_str().unwrap(),
        ]);
        assert_eq!(output.status.code(), Some(1), "documented: exit 1");
        let message = String::from_utf8(output.stderr).unwrap();
        assert_eq!(message.lines().count(), 1, "{message}");
        for says in [
            "holds no recorded nodes",
            "a SimKube trace carries none",
            "--provisioning published",
        ] {
            assert!(message.contains(says), "{says:?} missing: {message}");
        }
        assert!(!model.exists(), "nothing is written");
    }
}
