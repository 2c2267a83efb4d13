//! `ksim trace validate` and `ksim trace explain` as a user runs them: the real binary on real
//! files, ksim traces and SimKube traces (bare pods, a CronJob, a many-Deployment scaling trace)
//! written here in SimKube's format.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use ksim_proto::ksim::trace::v1 as pb;
use serde_json::{Value, json};

pub fn ksim(args: &[&str]) -> Output {
    std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        // The cluster check runs only when asked for, whatever the environment says.
        .env_remove("KSIM_KUBECONFIG")
        .env_remove("KSIM_CONTEXT")
        .output()
        .unwrap()
}

pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8(output.stdout.clone()).unwrap(),
        String::from_utf8(output.stderr.clone()).unwrap(),
    )
}

/// Runs `ksim trace validate` and returns (exit code, stdout, stderr).
pub fn validate(file: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["trace", "validate", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    let output = ksim(&args);
    let (out, err) = text(&output);
    assert!(!err.contains("panicked"), "{err}");
    (output.status.code().unwrap(), out, err)
}

/// Validates `file` with `--fix`, checks the fixed file validates clean, returns its path and
/// the fix's stdout.
pub fn fix_clean(file: &Path, extra: &[&str]) -> (PathBuf, String) {
    let fixed = file.with_extension("fixed.ktrace");
    let mut args = vec!["--fix", fixed.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, out, err) = validate(file, &args);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("it validates with 0 errors and 0 warnings"),
        "{out}"
    );
    let (code, again, err) = validate(&fixed, extra);
    assert_eq!(code, 0, "{again}\n{err}");
    assert!(again.contains(": 0 errors, 0 warnings"), "{again}");
    (fixed, out)
}

pub const T0_S: i64 = 1_767_225_600;

pub fn simkube_file(path: &Path, tracked: Value, events: Vec<Value>) {
    let trace = json!({
        "version": 2,
        "config": {"trackedObjects": tracked},
        "events": events,
        "index": {},
        "pod_lifecycles": {}
    });
    std::fs::write(path, rmp_serde::to_vec_named(&trace).unwrap()).unwrap();
}

pub fn sk_event(offset_s: i64, applied: Vec<Value>, deleted: Vec<Value>) -> Value {
    json!({"ts": T0_S + offset_s, "applied_objs": applied, "deleted_objs": deleted})
}

pub fn bare_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "batch"},
           "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}})
}

pub fn sk_deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "scale"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "main", "image": "nginx",
                                          "resources": {"requests": {"cpu": "100m"}}}]}}}})
}

pub fn cronjob(env_from_secret: Option<&str>) -> Value {
    let mut container = json!({"name": "job", "image": "busybox"});
    if let Some(secret) = env_from_secret {
        container["envFrom"] = json!([{"secretRef": {"name": secret}}]);
    }
    json!({"apiVersion": "batch/v1", "kind": "CronJob",
           "metadata": {"name": "nightly", "namespace": "batch"},
           "spec": {"schedule": "*/1 * * * *",
                    "jobTemplate": {"spec": {"template": {"spec": {
                        "restartPolicy": "Never", "containers": [container]}}}}}})
}

/// The three SimKube traces of the tests: bare pods, a CronJob, 30 Deployments scaling.
pub fn simkube_fixtures(dir: &Path) -> Vec<PathBuf> {
    let pods = dir.join("pods.sktrace");
    simkube_file(
        &pods,
        json!({"v1.Pod": {"podSpecTemplatePaths": [""], "trackLifecycle": true}}),
        vec![
            sk_event(0, vec![], vec![]),
            sk_event(1, vec![bare_pod("a"), bare_pod("b")], vec![]),
            sk_event(
                5,
                vec![bare_pod("c")],
                vec![json!({"metadata": {"name": "a", "namespace": "batch"}})],
            ),
        ],
    );
    let cron = dir.join("cronjob.sktrace");
    simkube_file(
        &cron,
        json!({"batch/v1.CronJob": {"podSpecTemplatePaths": ["/spec/jobTemplate/spec/template"]}}),
        vec![sk_event(0, vec![cronjob(None)], vec![])],
    );
    let scaling = dir.join("scaling.sktrace");
    let names: Vec<String> = (0..30).map(|i| format!("svc-{i:02}")).collect();
    let mut events = vec![sk_event(
        0,
        names.iter().map(|n| sk_deployment(n, 1)).collect(),
        vec![],
    )];
    for step in 1..=10 {
        events.push(sk_event(
            step * 10,
            names.iter().map(|n| sk_deployment(n, 1 + step)).collect(),
            vec![],
        ));
    }
    events.push(sk_event(
        120,
        vec![],
        names[..10]
            .iter()
            .map(|n| json!({"metadata": {"name": n, "namespace": "scale"}}))
            .collect(),
    ));
    simkube_file(
        &scaling,
        json!({"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]}}),
        events,
    );
    vec![pods, cron, scaling]
}

fn object(value: &Value) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(ksim_trace::gvk::from_api_version(
            value["apiVersion"].as_str().unwrap(),
            value["kind"].as_str().unwrap(),
        )),
        namespace: value["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .into(),
        name: value["metadata"]["name"].as_str().unwrap().into(),
        object_json: serde_json::to_vec(value).unwrap(),
    }
}

/// Events of a test trace: (offset in s, applied objects).
pub type Events = Vec<(i64, Vec<Value>)>;

/// A ksim trace of `events`, in the order given (out of order allowed).
pub fn ksim_file(path: &Path, events: Events) {
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        created_by: "ksim-e2e".into(),
        ..Default::default()
    };
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ksim_trace::TraceWriter::new(file, &header)
        .unwrap()
        .unordered();
    for (offset, objects) in events {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: (T0_S + offset) * 1000,
                applied: objects.iter().map(object).collect(),
                deleted: Vec::new(),
            })
            .unwrap();
    }
    writer.finish().unwrap();
}

fn deployment(name: &str, pod_spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "shop"},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}})
}

fn containers() -> Value {
    json!([{"name": "main", "image": "nginx"}])
}

#[test]
fn simkube_traces_of_pods_a_cronjob_and_many_deployments_validate_clean() {
    let dir = tempfile::tempdir().unwrap();
    for file in simkube_fixtures(dir.path()) {
        let (code, out, err) = validate(&file, &[]);
        assert_eq!(code, 0, "{}: {out}\n{err}", file.display());
        assert!(
            out.contains(": 0 errors, 0 warnings"),
            "{}: {out}",
            file.display()
        );
        assert_eq!(out.lines().count(), 1, "{out}");
    }
    let (_, out, _) = validate(&dir.path().join("scaling.sktrace"), &[]);
    assert!(
        out.starts_with("12 events, 340 objects, 0 lifecycles"),
        "{out}"
    );
}

#[test]
fn simkube_traces_that_break_rules_are_reported_and_fixed() {
    let dir = tempfile::tempdir().unwrap();
    // SimKube keeps status; the CronJob needs a Secret the trace lacks; a pod's owner is absent.
    let mut pod = bare_pod("worker");
    pod["status"] = json!({"phase": "Running"});
    pod["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "uid": "1"}]);
    let file = dir.path().join("broken.sktrace");
    simkube_file(
        &file,
        json!({"v1.Pod": {"podSpecTemplatePaths": [""]},
               "batch/v1.CronJob": {"podSpecTemplatePaths": ["/spec/jobTemplate/spec/template"]}}),
        vec![sk_event(0, vec![pod, cronjob(Some("token"))], vec![])],
    );
    let (code, out, err) = validate(&file, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(
        err.starts_with("ksim: error: ") && err.contains("1 finding of error severity"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("warning KS003 server-fields: event 0 at 1767225600000 ms, v1.Pod batch/worker: carries status")), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("error KS001 missing-reference: event 0 at 1767225600000 ms, batch/v1.CronJob batch/nightly:") && l.contains("Secret batch/token")), "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("warning KS002 absent-owner:")
                && l.contains("Job.batch batch/gone")),
        "{out}"
    );
    assert!(
        out.contains("1 error, 2 warnings (KS001 1, KS002 1, KS003 1)"),
        "{out}"
    );

    // Ignoring a rule silences it; unknown rule keys are a usage error.
    let (code, out, _) = validate(&file, &["--ignore", "KS001,server-fields"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 errors, 1 warning (KS002 1)"), "{out}");

    let (fixed, out) = fix_clean(&file, &[]);
    assert!(out.contains("fixed KS003 server-fields: event 0 at 1767225600000 ms, v1.Pod batch/worker: removed status"), "{out}");
    assert!(
        out.contains("fixed KS001 missing-reference:")
            && out.contains("removed envFrom Secret token"),
        "{out}"
    );
    assert!(out.contains("fixed KS002 absent-owner:"), "{out}");
    // The output is a ksim trace.
    let trace = ksim_trace::read_trace(&std::fs::read(fixed).unwrap()).unwrap();
    assert_eq!(trace.events.len(), 1);
}

#[test]
fn each_rule_fires_on_a_ksim_trace_made_to_break_it() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Events, i32)> = vec![
        (
            "KS001",
            vec![(
                0,
                vec![deployment(
                    "web",
                    json!({"serviceAccountName": "robot", "containers": containers()}),
                )],
            )],
            3,
        ),
        (
            "KS002",
            vec![(
                0,
                vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "shop",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "gone", "uid": "x"}]}})],
            )],
            0,
        ),
        (
            "KS003",
            vec![(
                0,
                vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "shop", "resourceVersion": "5", "creationTimestamp": "2026-01-01T00:00:00Z"}})],
            )],
            0,
        ),
        (
            "KS006",
            vec![(
                0,
                vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"replicas": 9_223_372_036_854_775_807_i64}})],
            )],
            3,
        ),
        (
            "KS005",
            vec![
                (
                    10,
                    vec![deployment("web", json!({"containers": containers()}))],
                ),
                (
                    5,
                    vec![deployment("api", json!({"containers": containers()}))],
                ),
            ],
            3,
        ),
    ];
    for (rule, events, expected_code) in cases {
        let file = dir.path().join(format!("{rule}.ktrace"));
        ksim_file(&file, events);
        let (code, out, err) = validate(&file, &[]);
        assert_eq!(code, expected_code, "{rule}: {out}\n{err}");
        let findings: Vec<&str> = out.lines().filter(|l| !l.contains(" events, ")).collect();
        assert_eq!(findings.len(), 1, "{rule}: {out}");
        assert!(findings[0].contains(&format!(" {rule} ")), "{rule}: {out}");
        let (_, out) = fix_clean(&file, &[]);
        assert!(out.contains(&format!("fixed {rule} ")), "{rule}: {out}");
        if rule == "KS005" {
            assert!(
                out.contains("event 1 at 1767225605000 ms: moved into timestamp order"),
                "{out}"
            );
        }
    }
}

#[test]
fn a_namespace_that_is_not_a_dns_label_is_an_error_that_fix_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("renamed.ktrace");
    ksim_file(
        &file,
        vec![(
            0,
            vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "Bad_Name!!"}})],
        )],
    );
    let (code, out, err) = validate(&file, &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(
        out.contains(
            "error KS006 invalid-value: event 0 at 1767225600000 ms, v1.ConfigMap Bad_Name!!/c: namespace \"Bad_Name!!\" is not a DNS label"
        ),
        "{out}"
    );
    let fixed = dir.path().join("fixed.ktrace");
    let (code, out, _) = validate(&file, &["--fix", fixed.to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("0 changes; it validates with 1 error"),
        "{out}"
    );
}

#[test]
fn a_clean_ksim_trace_has_no_findings_and_fix_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clean.ktrace");
    ksim_file(
        &file,
        vec![
            (
                0,
                vec![
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "shop"}}),
                ],
            ),
            (
                1,
                vec![deployment(
                    "web",
                    json!({"containers": [{"name": "main", "image": "nginx",
                "envFrom": [{"configMapRef": {"name": "settings"}}]}]}),
                )],
            ),
        ],
    );
    let (code, out, _) = validate(&file, &[]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "2 events, 2 objects, 0 lifecycles: 0 errors, 0 warnings\n"
    );
    let (_, out) = fix_clean(&file, &[]);
    assert!(out.contains(": 0 changes;"), "{out}");
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.ktrace");
    std::fs::write(&garbage, b"this is not a trace\n").unwrap();
    let empty = dir.path().join("empty.ktrace");
    std::fs::write(&empty, b"").unwrap();
    let good = dir.path().join("good.ktrace");
    ksim_file(
        &good,
        vec![(
            0,
            vec![deployment("web", json!({"containers": containers()}))],
        )],
    );
    let bytes = std::fs::read(&good).unwrap();
    let truncated = dir.path().join("truncated.ktrace");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let not_json = dir.path().join("notjson.ktrace");
    {
        let header = pb::TraceHeader::default();
        let mut writer =
            ksim_trace::TraceWriter::new(std::fs::File::create(&not_json).unwrap(), &header)
                .unwrap();
        let mut bad = object(&deployment("web", json!({})));
        bad.object_json = b"{oops".to_vec();
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: 1,
                applied: vec![bad],
                deleted: vec![],
            })
            .unwrap();
        writer.finish().unwrap();
    }
    let bad_simkube = dir.path().join("v9.sktrace");
    std::fs::write(
        &bad_simkube,
        rmp_serde::to_vec_named(&json!({"version": 9})).unwrap(),
    )
    .unwrap();
    let missing = dir.path().join("missing.ktrace");
    let g = garbage.to_str().unwrap();
    let out_path = dir.path().join("out.ktrace");
    let runs: Vec<(Vec<&str>, &str, i32)> = vec![
        (
            vec!["trace", "validate", g],
            "is not a valid trace: not a ksim trace",
            1,
        ),
        (
            vec!["trace", "validate", empty.to_str().unwrap()],
            "the file is empty",
            1,
        ),
        (
            vec!["trace", "validate", truncated.to_str().unwrap()],
            "truncated",
            1,
        ),
        (
            vec!["trace", "validate", not_json.to_str().unwrap()],
            "apps/v1.Deployment shop/web: the object is not valid JSON",
            1,
        ),
        (
            vec!["trace", "validate", bad_simkube.to_str().unwrap()],
            "unsupported SimKube trace version 9",
            1,
        ),
        (
            vec!["trace", "validate", missing.to_str().unwrap()],
            "No such file",
            1,
        ),
        (
            vec!["trace", "validate", g, "--fix", out_path.to_str().unwrap()],
            "not a ksim trace",
            1,
        ),
        (
            vec![
                "trace",
                "validate",
                good.to_str().unwrap(),
                "--ignore",
                "KS042",
            ],
            "invalid value 'KS042' for '--ignore <RULE>': unknown rule",
            2,
        ),
        (
            vec!["trace", "validate", good.to_str().unwrap(), "--ignore", ""],
            "unknown rule",
            2,
        ),
        (
            vec!["trace", "explain", "no-such-rule"],
            "invalid value 'no-such-rule' for '<RULE>': unknown rule; the rules are KS001 (missing-reference)",
            2,
        ),
        (vec!["trace", "explain"], "required", 2),
    ];
    for (args, message, expected) in runs {
        let output = ksim(&args);
        let (out, err) = text(&output);
        assert_eq!(output.status.code(), Some(expected), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("ksim: error: ") && err.contains(message),
            "{args:?}: {err}"
        );
    }
    assert!(!out_path.exists(), "nothing is written for bad input");
}

#[test]
fn explain_prints_each_rule_by_id_or_name() {
    for (key, first_line, severity) in [
        (
            "KS001",
            "KS001 missing-reference: a pod template references",
            "severity: error",
        ),
        ("absent-owner", "KS002 absent-owner: ", "severity: warning"),
        ("ks003", "KS003 server-fields: ", "severity: warning"),
        ("unknown-kind", "KS004 unknown-kind: ", "severity: error"),
        ("KS005", "KS005 out-of-order: ", "severity: error"),
    ] {
        let output = ksim(&["trace", "explain", key]);
        assert!(output.status.success());
        let (out, _) = text(&output);
        assert!(out.starts_with(first_line), "{out}");
        assert!(out.lines().nth(1).unwrap().starts_with(severity), "{out}");
        assert!(out.contains("--fix "), "{out}");
    }
    let help = text(&ksim(&["trace", "validate", "--help"])).0;
    assert!(
        help.contains("Exit status:") && help.contains("3  findings of error severity remain"),
        "{help}"
    );
}

#[test]
fn simkube_events_out_of_order_are_reported_and_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("unordered.sktrace");
    simkube_file(
        &file,
        json!({"v1.Pod": {"podSpecTemplatePaths": [""]}}),
        vec![
            sk_event(10, vec![bare_pod("late")], vec![]),
            sk_event(0, vec![bare_pod("early")], vec![]),
            sk_event(20, vec![bare_pod("last")], vec![]),
        ],
    );
    let (code, out, _) = validate(&file, &[]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.starts_with(
            "error KS005 out-of-order: trace: 1 SimKube event older than an event before it"
        ),
        "{out}"
    );
    assert!(out.contains("1 error, 0 warnings (KS005 1)"), "{out}");
    let (fixed, out) = fix_clean(&file, &[]);
    assert!(
        out.contains("fixed KS005 out-of-order: trace: 1 SimKube event put into timestamp order"),
        "{out}"
    );
    let trace = ksim_trace::read_trace(&std::fs::read(fixed).unwrap()).unwrap();
    let names: Vec<&str> = trace
        .events
        .iter()
        .map(|e| e.applied[0].name.as_str())
        .collect();
    assert_eq!(names, ["early", "late", "last"]);
}

#[test]
fn usage_out_of_order_for_its_pod_is_an_error_that_fix_removes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("usage.ktrace");
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        ..Default::default()
    };
    let sample = |offset_s: i64| pb::UsageSample {
        timestamp_ms: (T0_S + offset_s) * 1000,
        window_ms: 15_000,
        namespace: "shop".into(),
        pod: "web-1".into(),
        containers: vec![pb::ContainerUsage {
            name: "app".into(),
            cpu_nanocores: 250_000_000,
            memory_bytes: 64 << 20,
        }],
    };
    let mut writer =
        ksim_trace::TraceWriter::new(std::fs::File::create(&file).unwrap(), &header).unwrap();
    for offset in [15, 30, 20, 45] {
        writer.write_usage(&sample(offset)).unwrap();
    }
    writer.finish().unwrap();

    let (code, out, err) = validate(&file, &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(
        out.contains(
            "error KS007 bad-usage: usage sample 2 at 1767225620000 ms, pod shop/web-1: \
             at or before the pod's previous sample, at 1767225630000 ms"
        ),
        "{out}"
    );
    assert!(
        out.contains("0 events, 0 objects, 0 lifecycles, 4 usage samples: 1 error"),
        "{out}"
    );
    let (fixed, out) = fix_clean(&file, &[]);
    assert!(
        out.contains("fixed KS007 bad-usage: usage sample 2"),
        "{out}"
    );
    let kept: Vec<i64> = ksim_trace::read_trace(&std::fs::read(fixed).unwrap())
        .unwrap()
        .usage
        .iter()
        .map(|u| u.timestamp_ms / 1000 - T0_S)
        .collect();
    assert_eq!(kept, [15, 30, 45]);
}
