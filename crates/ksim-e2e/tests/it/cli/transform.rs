//! `ksim trace transform` as a user runs it: the real binary, real files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Output};

use ksim_localenv::fixtures::Workload;
use ksim_proto::ksim::trace::v1 as pb;

const T0: i64 = 1_767_225_600_000;

fn ksim(args: &[&str]) -> Output {
    std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        .output()
        .unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Deployment `name` of `replicas` pods in `shop`, applied.
fn deployment(name: &str, replicas: i32) -> pb::TraceObject {
    super::common::deployment(&Workload::new(name, replicas).namespace("shop").json())
}

/// web at 2, then 20 at 10 s, 5 at 20 s; api at 30 s; the window is 40 s long.
fn write_trace(file: &Path) {
    let header = pb::TraceHeader {
        start_time: Some(ksim_trace::time::timestamp(T0)),
        end_time: Some(ksim_trace::time::timestamp(T0 + 40_000)),
        created_by: "test".into(),
        ..Default::default()
    };
    let mut writer = ksim_trace::TraceWriter::new(Vec::new(), &header).unwrap();
    for (offset, object) in [
        (0, deployment("web", 2)),
        (10_000, deployment("web", 20)),
        (20_000, deployment("web", 5)),
        (30_000, deployment("api", 1)),
    ] {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: T0 + offset,
                applied: vec![object],
                deleted: Vec::new(),
            })
            .unwrap();
    }
    writer
        .write_lifecycle(&pb::PodLifecycle {
            owner_gvk: deployment("web", 0).gvk,
            owner_namespace: "shop".into(),
            owner_name: "web".into(),
            start_ms: T0 + 1_000,
            end_ms: T0 + 12_000,
            ..Default::default()
        })
        .unwrap();
    std::fs::write(file, writer.finish().unwrap().0).unwrap();
}

fn replicas(object: &pb::TraceObject) -> i64 {
    let json: serde_json::Value = serde_json::from_slice(&object.object_json).unwrap();
    json["spec"]["replicas"].as_i64().unwrap()
}

/// Runs `ksim trace transform`, expecting it to fail in one line without writing `out`.
fn fails(input: &Path, out: &Path, rules: &Path) -> String {
    let output = ksim(&[
        "trace",
        "transform",
        path(input),
        path(out),
        "-f",
        path(rules),
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("ksim: error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !out.exists(),
        "a failed transform leaves no {}",
        out.display()
    );
    stderr
}

#[test]
fn transform_doubles_replicas_keeps_a_window_and_records_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ktrace");
    write_trace(&input);
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        r#"rules:
  - name: traffic doubles
    match: 'kind == "Deployment" && object.metadata.namespace == "shop"'
    scaleReplicas: 2
  - keepWindow: { start: 10s, end: 30s }
"#,
    )
    .unwrap();
    let out = dir.path().join("out.ktrace");
    let output = ksim(&[
        "trace",
        "transform",
        path(&input),
        path(&out),
        "-f",
        path(&rules),
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("2 of 4 events, 1 of 1 pod lifecycles"),
        "{stderr}"
    );

    let trace = ksim_trace::read_trace(&std::fs::read(&out).unwrap()).unwrap();
    // Only the window's events, web's replicas doubled.
    let events: Vec<(i64, &str, i64)> = trace
        .events
        .iter()
        .map(|e| {
            (
                e.timestamp_ms - T0,
                e.applied[0].name.as_str(),
                replicas(&e.applied[0]),
            )
        })
        .collect();
    assert_eq!(events, [(10_000, "web", 40), (20_000, "web", 10)]);
    assert_eq!(
        trace.header.start_time,
        Some(ksim_trace::time::timestamp(T0 + 10_000))
    );
    assert_eq!(
        trace.header.end_time,
        Some(ksim_trace::time::timestamp(T0 + 30_000))
    );
    // The lifecycle overlapping the window starts at its start.
    assert_eq!(trace.lifecycles[0].start_ms, T0 + 10_000);
    assert_eq!(
        trace.header.transforms,
        [
            r#"rule 1 (line 2) "traffic doubles": scaleReplicas 2 where kind == "Deployment" && object.metadata.namespace == "shop""#,
            "rule 2 (line 5): keepWindow start=10s end=30s",
        ]
    );
    assert!(trace.header.created_by.starts_with("ksim "));

    // Deterministic: the same input and rules give the same bytes.
    let again = dir.path().join("again.ktrace");
    assert!(
        ksim(&[
            "trace",
            "transform",
            path(&input),
            path(&again),
            "-f",
            path(&rules)
        ])
        .status
        .success()
    );
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());

    // inspect reads the result and shows the rules.
    let inspect = ksim(&["trace", "inspect", path(&out)]);
    assert!(inspect.status.success());
    let table = String::from_utf8(inspect.stdout).unwrap();
    assert!(
        table.contains("transformed     rule 2 (line 5): keepWindow start=10s end=30s"),
        "{table}"
    );
}

#[test]
fn a_simkube_trace_is_transformed_too() {
    let dir = tempfile::tempdir().unwrap();
    let simkube = dir.path().join("in.sktrace");
    super::common::write_simkube_trace(&simkube);
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - renameNamespace: { from: n, to: m }\n  - scaleReplicas: 3\n",
    )
    .unwrap();
    let out = dir.path().join("out.ktrace");
    let output = ksim(&[
        "trace",
        "transform",
        path(&simkube),
        path(&out),
        "-f",
        path(&rules),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let trace = ksim_trace::read_trace(&std::fs::read(&out).unwrap()).unwrap();
    let web = &trace.events.last().unwrap().applied[0];
    assert_eq!((web.namespace.as_str(), replicas(web)), ("m", 9));
}

#[test]
fn bad_rules_and_bad_input_fail_in_one_line_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ktrace");
    write_trace(&input);
    let out = dir.path().join("out.ktrace");
    let rules = dir.path().join("rules.yaml");

    // A bad CEL rule: the rule, its line and the position in the expression.
    std::fs::write(
        &rules,
        "rules:\n  - shiftTime: 1s\n  - name: broken\n    match: 'kind == \"Deployment\" &&'\n    drop: true\n",
    )
    .unwrap();
    let message = fails(&input, &out, &rules);
    assert!(
        message.contains("rule 2 (line 3): match is not valid CEL at 1:24 of the expression"),
        "{message}"
    );

    // An unknown key.
    std::fs::write(&rules, "rules:\n  - shiftTime: 1s\n  - scale: 2\n").unwrap();
    let message = fails(&input, &out, &rules);
    assert!(message.contains("rule 2 (line 3)"), "{message}");
    assert!(message.contains("unknown field `scale`"), "{message}");

    // Rules that are not YAML, not rules, or not there.
    for (text, expected) in [
        ("rules: [", "rules.yaml"),
        ("\u{0}\u{1}\u{2}", "rules.yaml"),
        ("rulez: []\n", "rulez"),
    ] {
        std::fs::write(&rules, text).unwrap();
        let message = fails(&input, &out, &rules);
        assert!(message.contains(expected), "{text:?}: {message}");
    }
    let message = fails(&input, &out, &dir.path().join("missing.yaml"));
    assert!(message.contains("cannot read the rules file"), "{message}");

    // Good rules, garbage or missing input.
    std::fs::write(&rules, "rules:\n  - scaleReplicas: 2\n").unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"definitely not a trace").unwrap();
    let message = fails(&garbage, &out, &rules);
    assert!(message.contains("not a ksim trace"), "{message}");
    let message = fails(&dir.path().join("missing.ktrace"), &out, &rules);
    assert!(message.contains("missing.ktrace"), "{message}");
    // A truncated trace.
    let whole = std::fs::read(&input).unwrap();
    let cut = dir.path().join("cut.ktrace");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let message = fails(&cut, &out, &rules);
    assert!(message.contains("cut.ktrace"), "{message}");

    // A JSON Patch that does not apply names the rule and the object.
    std::fs::write(
        &rules,
        "rules:\n  - jsonPatch: [ { op: remove, path: /spec/paused } ]\n",
    )
    .unwrap();
    let message = fails(&input, &out, &rules);
    assert!(
        message.contains("rule 1 (line 2): Deployment shop/web"),
        "{message}"
    );

    // Stored windows are not transformed by run: said before anything is contacted.
    let output = ksim(&["run", "--stored", "--transform", path(&rules)]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--transform applies to a trace file"),
        "{stderr}"
    );
    // A bad rules file stops run before the driver is asked.
    std::fs::write(&rules, "rules:\n  - scale: 2\n").unwrap();
    let output = ksim(&[
        "run",
        path(&input),
        "--transform",
        path(&rules),
        "--driver",
        "http://127.0.0.1:1",
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert!(stderr.contains("rule 1 (line 2)"), "{stderr}");
}

/// Rules whose output a reader could not print or Kubernetes would refuse fail, naming the
/// rule, before anything is written; so does a rules file that does not end.
#[test]
fn rules_that_would_write_times_or_values_out_of_range_fail_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ktrace");
    write_trace(&input);
    let out = dir.path().join("out.ktrace");
    let rules = dir.path().join("rules.yaml");
    for (text, expected) in [
        (
            "rules:\n  - shiftTime: 100000000000h\n",
            "rule 1 (line 2): shiftTime 100000000000h moves the trace's start from 1767225600000 ms to 360001767225600000 ms, outside the times a trace can hold",
        ),
        (
            "rules:\n  - stretchTime: 1e300\n",
            "rule 1 (line 2): stretchTime 1e300 moves the trace's end from 1767225640000 ms to 9223372036854775807 ms",
        ),
        (
            "rules:\n  - scaleReplicas: 1e300\n",
            "rule 1 (line 2): scaleReplicas 1e300 must be at most 2147483647: replicas are an int32",
        ),
        (
            "rules:\n  - scaleReplicas: 1000000000\n",
            "rule 1 (line 2): Deployment shop/web in the event at 1767225610000 ms: scaleReplicas 1000000000 makes spec.replicas 20 into 20000000000, over 2147483647",
        ),
        (
            "rules:\n  - renameNamespace: { from: shop, to: 'Bad_Name!!' }\n",
            "rule 1 (line 2): renameNamespace: to \"Bad_Name!!\" is not a namespace name (an RFC 1123 DNS label",
        ),
    ] {
        std::fs::write(&rules, text).unwrap();
        let message = fails(&input, &out, &rules);
        assert!(message.contains(expected), "{text}: {message}");
    }
    let message = fails(&input, &out, Path::new("/dev/zero"));
    assert!(
        message.contains("/dev/zero: does not end within the 1 MiB limit for the rules file"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_applies_the_rules_before_writing() {
    use ksim_grpc::{GrpcServer, ServeArgs};
    use ksim_tracer::{
        domain::{kinds::default_kinds, sanitize::EnvRedaction},
        grpc::TraceStoreService,
        imports::Imports,
        log::LogConfig,
        store::Store,
    };

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
    let server_flag = format!("--server=http://{}", server.grpc_addr().unwrap());
    tokio::spawn(server.serve_until(std::future::pending()));

    let trace = dir.path().join("t.ktrace");
    write_trace(&trace);
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - match: 'name == \"api\"'\n    drop: true\n  - scaleReplicas: 3\n",
    )
    .unwrap();
    let out = dir.path().join("exported.ktrace");
    let (imported, exported) = tokio::task::spawn_blocking({
        let (out, rules) = (out.clone(), rules.clone());
        move || {
            let imported = ksim(&["trace", "import", &server_flag, path(&trace)]);
            let id = String::from_utf8(imported.stdout.clone()).unwrap();
            let exported = ksim(&[
                "trace",
                "export",
                &server_flag,
                "--trace-id",
                id.trim(),
                "--transform",
                path(&rules),
                "-o",
                path(&out),
            ]);
            (imported, exported)
        }
    })
    .await
    .unwrap();
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    assert!(
        exported.status.success(),
        "{}",
        String::from_utf8_lossy(&exported.stderr)
    );
    let trace = ksim_trace::read_trace(&std::fs::read(&out).unwrap()).unwrap();
    let web: Vec<i64> = trace
        .events
        .iter()
        .flat_map(|e| &e.applied)
        .inspect(|o| assert_eq!(o.name, "web", "api was dropped"))
        .map(replicas)
        .collect();
    assert_eq!(web, [6, 60, 15]);
    assert_eq!(trace.header.transforms.len(), 2);

    // Bad rules stop the export before the tracer is asked.
    std::fs::write(&rules, "rules:\n  - drop: true\n").unwrap();
    let failed = tokio::task::spawn_blocking({
        let out = dir.path().join("never.ktrace");
        move || {
            ksim(&[
                "trace",
                "export",
                "--server=http://127.0.0.1:1",
                "--transform",
                path(&rules),
                "-o",
                path(&out),
            ])
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8(failed.stderr).unwrap();
    assert!(!failed.status.success());
    assert!(
        stderr.contains("rule 1 (line 2): drop needs a match"),
        "{stderr}"
    );
}
