//! `ksim trace ...` as a user runs it: the real binary, real files, and a real tracer store
//! (in this process) for import and export.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common;

use std::{path::Path, process::Output};

use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_proto::ksim::trace::v1 as pb;
use ksim_tracer::{
    domain::{kinds::default_kinds, sanitize::EnvRedaction},
    grpc::TraceStoreService,
    imports::Imports,
    log::LogConfig,
    store::Store,
};
use serde_json::json;

fn ksim(args: &[&str]) -> Output {
    std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "ksim failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn deployment(name: &str, replicas: i64) -> pb::TraceObject {
    common::deployment(&json!({
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": {"replicas": replicas}
    }))
}

fn write_trace(path: &Path) {
    common::write_trace(
        path,
        [
            (1_767_225_600_000, deployment("web", 2)),
            (1_767_225_601_000, deployment("web", 20)),
            (1_767_225_602_000, deployment("api", 1)),
        ],
        &[pb::PodLifecycle {
            owner_gvk: deployment("web", 0).gvk,
            owner_namespace: "shop".into(),
            owner_name: "web".into(),
            start_ms: 1_767_225_600_500,
            end_ms: 1_767_225_601_500,
            pod_name: "web-1".into(),
            ..Default::default()
        }],
    );
}

#[test]
fn inspect_summarises_a_trace_and_refuses_garbage_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.ktrace");
    write_trace(&trace);
    let table = stdout(&ksim(&["trace", "inspect", trace.to_str().unwrap()]));
    assert!(
        table.contains("2026-01-01T00:00:00.000Z .. 2026-01-01T00:00:02.000Z"),
        "{table}"
    );
    assert!(
        table.contains("3 events, 2 objects, 3 applies, 0 deletes, 1 pod lifecycles"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("apps/v1.Deployment"))
        .unwrap();
    assert_eq!(
        row.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["2", "3", "0", "1"],
        "{table}"
    );
    assert!(
        table.contains("cluster state   not recorded (recorded without Nodes in trackedKinds)"),
        "{table}"
    );

    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"definitely not a trace").unwrap();
    let failed = ksim(&["trace", "inspect", garbage.to_str().unwrap()]);
    assert!(!failed.status.success());
    let message = String::from_utf8(failed.stderr).unwrap();
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.starts_with("ksim: error: ") && message.contains("not a valid trace"),
        "{message}"
    );
}

#[test]
fn generate_writes_a_day_that_inspects_and_validates_and_names_a_bad_flag() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("day.ksim");
    let path = trace.to_str().unwrap();
    let flags = [
        "--nodes",
        "50",
        "--node-cpu",
        "8",
        "--node-memory",
        "32Gi",
        "--length",
        "6h",
        "--start",
        "2026-03-02T00:00:00Z",
        "--seed",
        "7",
    ];
    let generate = |path: &str| ksim(&[&["trace", "generate", path][..], &flags].concat());
    let written = generate(path);
    let said = String::from_utf8(written.stderr.clone()).unwrap();
    assert!(written.status.success(), "{said}");
    assert!(said.contains("10 services (Deployments)"), "{said}");
    let table = stdout(&ksim(&["trace", "inspect", path]));
    // The first events (the services) at the start; the last before the six hours end.
    assert!(
        table.contains("2026-03-02T00:00:00.000Z .. 2026-03-02T05:"),
        "{table}"
    );
    assert!(table.contains("apps/v1.Deployment"), "{table}");
    assert!(table.contains("batch/v1.Job"), "{table}");
    let validated = ksim(&["trace", "validate", path]);
    assert!(
        validated.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
    // The same flags, the same bytes.
    let again = dir.path().join("again.ksim");
    stdout(&generate(again.to_str().unwrap()));
    assert!(std::fs::read(&trace).unwrap() == std::fs::read(&again).unwrap());

    for (flag, value, named) in [
        (
            "--node-cpu",
            "four",
            "\"four\" is not a positive CPU quantity",
        ),
        ("--nodes", "0", "nodes is 0: expected 1 to 100000"),
        (
            "--length",
            "1s",
            "length is 1000 ms: expected 1 minute to 31 days",
        ),
    ] {
        let refused = dir.path().join("refused.ksim");
        let failed = ksim(&["trace", "generate", refused.to_str().unwrap(), flag, value]);
        assert!(!failed.status.success());
        let message = String::from_utf8(failed.stderr).unwrap();
        assert!(message.contains(named), "{message}");
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(!refused.exists(), "nothing is written");
    }
}

#[test]
fn convert_turns_a_simkube_trace_into_a_ksim_trace() {
    let dir = tempfile::tempdir().unwrap();
    let simkube = dir.path().join("in.sktrace");
    common::write_simkube_trace(&simkube);
    let out = dir.path().join("out.ktrace");
    stdout(&ksim(&[
        "trace",
        "convert",
        simkube.to_str().unwrap(),
        out.to_str().unwrap(),
    ]));
    let trace = ksim_trace::read_trace(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(trace.events.last().unwrap().timestamp_ms, 1_767_225_610_000);
    assert_eq!(trace.events.last().unwrap().applied[0].name, "web");
    // SimKube records no cluster state, and inspect says so rather than showing zeros.
    assert!(trace.samples.is_empty() && trace.nodes.is_empty());
    let table = stdout(&ksim(&["trace", "inspect", simkube.to_str().unwrap()]));
    assert!(
        table.contains("cluster state   not recorded (SimKube traces carry none)"),
        "{table}"
    );

    let bad = dir.path().join("v9.sktrace");
    std::fs::write(
        &bad,
        rmp_serde::to_vec_named(&json!({"version": 9})).unwrap(),
    )
    .unwrap();
    let failed = ksim(&[
        "trace",
        "convert",
        bad.to_str().unwrap(),
        dir.path().join("x").to_str().unwrap(),
    ]);
    assert!(!failed.status.success());
    assert!(String::from_utf8(failed.stderr).unwrap().contains('9'));
    assert!(
        !dir.path().join("x").exists(),
        "a failed conversion leaves no file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_then_export_round_trips_through_a_tracer_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(
        LogConfig::new(dir.path().join("log")),
        default_kinds(),
        EnvRedaction::default(),
    )
    .unwrap();
    let imports = Imports::new(dir.path().join("imports"), 1 << 20, "test".into()).unwrap();
    let server = GrpcServer::new(ServeArgs::ephemeral())
        .add_service(TraceStoreService::new(store, imports, "test".into()).into_server())
        .bind()
        .await
        .unwrap();
    let address = format!("http://{}", server.grpc_addr().unwrap());
    tokio::spawn(server.serve_until(std::future::pending()));

    let trace = dir.path().join("t.ktrace");
    write_trace(&trace);
    let server_flag = format!("--server={address}");
    let imported = tokio::task::spawn_blocking({
        let (trace, server_flag) = (trace.clone(), server_flag.clone());
        move || ksim(&["trace", "import", &server_flag, trace.to_str().unwrap()])
    })
    .await
    .unwrap();
    let id = stdout(&imported).trim().to_owned();
    assert_eq!(id.len(), 32, "the trace id alone on stdout: {id:?}");
    // Counted as inspect counts them: 3 applies and 0 deletes are 3 object changes.
    let said = String::from_utf8_lossy(&imported.stderr);
    assert!(said.contains("3 events, 3 object changes"), "{said}");

    let out = dir.path().join("exported.ktrace");
    let exported = tokio::task::spawn_blocking({
        let out = out.clone();
        move || {
            ksim(&[
                "trace",
                "export",
                &server_flag,
                "--trace-id",
                &id,
                "--start",
                "2026-01-01T00:00:00.500Z",
                "-l",
                "app=web",
                "-o",
                out.to_str().unwrap(),
            ])
        }
    })
    .await
    .unwrap();
    stdout(&exported);
    let trace = ksim_trace::read_trace(&std::fs::read(&out).unwrap()).unwrap();
    let events: Vec<_> = trace
        .events
        .iter()
        .map(|e| {
            (
                e.timestamp_ms,
                e.applied.iter().map(|o| o.name.clone()).collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (1_767_225_600_500, vec!["web".to_owned()]),
            (1_767_225_601_000, vec!["web".to_owned()])
        ]
    );
    assert_eq!(trace.lifecycles.len(), 1);

    let refused = tokio::task::spawn_blocking(move || {
        ksim(&[
            "trace",
            "export",
            "--server=http://127.0.0.1:1",
            "-o",
            "/dev/null",
        ])
    })
    .await
    .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8(refused.stderr)
            .unwrap()
            .contains("connecting to the tracer store")
    );
}
