//! `ksim trace ...` as a user runs it: the real binary, real files, and a real tracer store
//! (in this process) for import and export.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common;

use std::{path::Path, process::Output};

use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_localenv::fixtures::Workload;
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

/// Deployment `name` of `replicas` pods in `shop`, labelled `app=<name>` itself: what
/// `ksim trace export -l` selects on.
fn deployment(name: &str, replicas: i32) -> pb::TraceObject {
    let mut object = Workload::new(name, replicas).namespace("shop").json();
    object["metadata"]["labels"] = json!({ "app": name });
    common::deployment(&object)
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

/// A trace whose second event is at the largest time a file can hold, far past year 9999.
fn fails_in_one_line(output: &Output) -> String {
    let message = String::from_utf8(output.stderr.clone()).unwrap();
    assert!(!output.status.success(), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.starts_with("ksim: error: "), "{message}");
    assert!(!message.contains("panicked"), "{message}");
    message
}

/// Issue 53, finding 5: a time past 9999 (here the first second of year 10000) is refused
/// when read, in one line naming it, by every reader; it used to be read, and overflowed later.
#[test]
fn inspect_validate_and_show_refuse_a_time_past_9999_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("far.sktrace");
    common::write_simkube_trace_with(&trace, 253_402_300_800);
    let t = trace.to_str().unwrap();
    for args in [
        vec!["trace", "inspect", t],
        vec!["trace", "validate", t],
        vec!["trace", "show", t],
        vec!["trace", "calibrate", t],
    ] {
        let message = fails_in_one_line(&ksim(&args));
        // The SimKube conversion's words: a ksim trace's reader says the same of its fields.
        assert!(
            message.contains("event 1: timestamp 253402300800 s is out of range (1970 to 9999)"),
            "{args:?}: {message}"
        );
    }
}

#[test]
fn generate_refuses_a_start_or_node_sizes_a_trace_cannot_hold_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("day.ksim");
    let o = out.to_str().unwrap();
    for (args, named) in [
        (
            vec!["--start", "9999-12-31T23:00:00Z"],
            "--start 9999-12-31T23:00:00.000Z: a recording of --length 1day from it ends after",
        ),
        (
            vec!["--node-cpu", "1e18"],
            "'--node-cpu <NODE_CPU>': 1e18 is more CPU than the largest node generated (10000 cores)",
        ),
        (
            vec!["--node-memory", "1E"],
            "'--node-memory <NODE_MEMORY>': 1E is more memory than the largest node generated (64Ti)",
        ),
    ] {
        let failed = ksim(&[&["trace", "generate", o][..], &args].concat());
        let message = fails_in_one_line(&failed);
        assert!(message.contains(named), "{args:?}: {message}");
        assert!(!out.exists(), "nothing is written");
    }
}

/// The output of every command that writes a trace is a regular file or a new path: a device,
/// a directory or a FIFO (or a symlink to one) is refused by name before any work.
#[test]
fn trace_outputs_are_only_regular_files_or_new_paths() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ktrace");
    write_trace(&input);
    let simkube = dir.path().join("in.sktrace");
    common::write_simkube_trace(&simkube);
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, "rules:\n  - scaleReplicas: 2\n").unwrap();
    // A symlink stands for /dev/null: were it replaced, only the link would go.
    let device = dir.path().join("null");
    std::os::unix::fs::symlink("/dev/null", &device).unwrap();
    let directory = dir.path().join("a-directory");
    std::fs::create_dir(&directory).unwrap();
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let link_to_directory = dir.path().join("link-to-directory");
    std::os::unix::fs::symlink(&directory, &link_to_directory).unwrap();
    let (i, sk, r) = (
        input.to_str().unwrap(),
        simkube.to_str().unwrap(),
        rules.to_str().unwrap(),
    );
    for (target, kind) in [
        (&device, "a character device"),
        (&directory, "a directory"),
        (&fifo, "a FIFO"),
        (&link_to_directory, "a directory"),
    ] {
        let t = target.to_str().unwrap();
        let commands: [(Vec<&str>, String); 6] = [
            (
                vec!["trace", "validate", i, "--fix", t],
                format!("--fix {t}"),
            ),
            (vec!["trace", "transform", i, t, "-f", r], t.to_owned()),
            (vec!["trace", "convert", sk, t], t.to_owned()),
            (vec!["trace", "generate", t, "--nodes", "5"], t.to_owned()),
            (
                vec!["trace", "export", "-o", t, "--server", "http://127.0.0.1:1"],
                format!("--output {t}"),
            ),
            (
                vec!["demo", "--write-trace", t],
                format!("--write-trace {t}"),
            ),
        ];
        for (args, label) in commands {
            let message = fails_in_one_line(&ksim(&args));
            assert_eq!(
                message,
                format!(
                    "ksim: error: {label}: not a regular file ({kind}); ksim writes only regular \
                     files or new paths\n"
                ),
                "{args:?}"
            );
        }
        // Still what it was.
        let file_type = std::fs::symlink_metadata(target).unwrap().file_type();
        assert!(!file_type.is_file(), "{t} was replaced");
    }
    assert_eq!(std::fs::read_dir(&directory).unwrap().count(), 0);

    // A regular file is replaced whole; a new path is created.
    let existing = dir.path().join("existing.ktrace");
    std::fs::write(&existing, b"old").unwrap();
    let new = dir.path().join("new.ktrace");
    for out in [&existing, &new] {
        stdout(&ksim(&[
            "trace",
            "transform",
            i,
            out.to_str().unwrap(),
            "-f",
            r,
        ]));
        ksim_trace::read_trace(&std::fs::read(out).unwrap()).unwrap();
    }
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

    // A new path: /dev/null would be refused before the server is asked.
    let unwritten = dir.path().join("unwritten.ktrace");
    let refused = tokio::task::spawn_blocking(move || {
        ksim(&[
            "trace",
            "export",
            "--server=http://127.0.0.1:1",
            "-o",
            unwritten.to_str().unwrap(),
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
