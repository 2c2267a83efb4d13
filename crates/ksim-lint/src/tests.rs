//! Each rule against a trace made to break it, and against a clean trace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use ksim_trace::{TraceReader, TraceWriter, pb};
use serde_json::{Value, json};

use crate::{Change, Finding, Options, Summary, fix, lint, rules};

const T0: i64 = 1_767_225_600_000;

fn gvk(api_version: &str, kind: &str) -> pb::GroupVersionKind {
    ksim_trace::gvk::from_api_version(api_version, kind)
}

fn object(value: &Value) -> pb::TraceObject {
    let api_version = value["apiVersion"].as_str().unwrap();
    let kind = value["kind"].as_str().unwrap();
    pb::TraceObject {
        gvk: Some(gvk(api_version, kind)),
        namespace: value["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        name: value["metadata"]["name"].as_str().unwrap().to_owned(),
        object_json: serde_json::to_vec(value).unwrap(),
    }
}

fn deployment(name: &str, pod_spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}
    })
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"}})
}

fn container() -> Value {
    json!({"name": "app", "image": "app:1"})
}

fn event(offset_ms: i64, objects: &[Value]) -> pb::TraceEvent {
    pb::TraceEvent {
        timestamp_ms: T0 + offset_ms,
        applied: objects.iter().map(object).collect(),
        deleted: Vec::new(),
    }
}

fn header(window: Option<(i64, i64)>) -> pb::TraceHeader {
    pb::TraceHeader {
        start_time: window.map(|(start, _)| ksim_trace::time::timestamp(T0 + start)),
        end_time: window.map(|(_, end)| ksim_trace::time::timestamp(T0 + end)),
        created_by: "ksim-lint test".into(),
        ..Default::default()
    }
}

fn file(events: &[pb::TraceEvent]) -> Vec<u8> {
    file_with(header(None), events, &[])
}

fn file_with(
    header: pb::TraceHeader,
    events: &[pb::TraceEvent],
    lifecycles: &[pb::PodLifecycle],
) -> Vec<u8> {
    let mut writer = TraceWriter::new(Vec::new(), &header).unwrap().unordered();
    for event in events {
        writer.write_event(event).unwrap();
    }
    for lifecycle in lifecycles {
        writer.write_lifecycle(lifecycle).unwrap();
    }
    writer.finish().unwrap().0
}

fn check(file: &[u8], options: Options) -> (Vec<Finding>, Summary) {
    let reader = TraceReader::new(file).unwrap().unordered();
    let mut findings = Vec::new();
    let summary = lint(reader, options, &mut |f| findings.push(f)).unwrap();
    (findings, summary)
}

fn ids(findings: &[Finding]) -> Vec<&'static str> {
    findings.iter().map(|f| f.rule.id).collect()
}

/// Fixes `file`, checks the result is clean under the same options, and returns it.
fn fixed(file: &[u8], options: &Options) -> (Vec<u8>, Vec<Change>) {
    let (_, summary) = check(file, options.clone());
    let reader = TraceReader::new(file).unwrap().unordered();
    let mut changes = Vec::new();
    let (out, _) = fix(reader, &summary, options, Vec::new(), &mut |c| {
        changes.push(c)
    })
    .unwrap();
    // The fixed file is readable by the strict reader and validates clean.
    ksim_trace::read_trace(&out).unwrap();
    let (findings, _) = check(&out, options.clone());
    assert!(findings.is_empty(), "after --fix: {findings:?}");
    (out, changes)
}

fn applied_json(file: &[u8], event: usize, object: usize) -> Value {
    let trace = ksim_trace::read_trace(file).unwrap();
    serde_json::from_slice(&trace.events[event].applied[object].object_json).unwrap()
}

/// A trace no rule fires on: every reference and owner present, nothing from the server.
fn clean() -> Vec<u8> {
    let spec = json!({
        "serviceAccountName": "builder",
        "containers": [{"name": "app", "image": "app:1",
                        "envFrom": [{"configMapRef": {"name": "settings"}}],
                        "volumeMounts": [{"name": "data", "mountPath": "/d"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "ca", "configMap": {"name": "kube-root-ca.crt"}}]
    });
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder", "namespace": "shop"}});
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "shop"}, "spec": {}});
    let mut owned = config_map("owned");
    owned["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u"}]);
    file_with(
        header(Some((0, 10_000))),
        &[
            event(0, &[sa, pvc, config_map("settings")]),
            event(1_000, &[deployment("web", spec), owned]),
            event(
                2_000,
                &[deployment("web", json!({"containers": [container()]}))],
            ),
        ],
        &[],
    )
}

fn all_kinds() -> Options {
    let kinds = [
        ("", "v1", "ServiceAccount"),
        ("", "v1", "PersistentVolumeClaim"),
        ("", "v1", "ConfigMap"),
        ("apps", "v1", "Deployment"),
    ];
    Options {
        cluster_kinds: Some(
            kinds
                .iter()
                .map(|(g, v, k)| (g.to_string(), v.to_string(), k.to_string()))
                .collect(),
        ),
        ..Options::default()
    }
}

#[test]
fn a_clean_trace_has_no_findings_with_or_without_a_cluster() {
    let (findings, summary) = check(&clean(), Options::default());
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!((summary.events, summary.objects), (3, 6));
    let (findings, _) = check(&clean(), all_kinds());
    assert!(findings.is_empty(), "{findings:?}");
}

#[test]
fn missing_references_fire_once_per_object_and_reference() {
    let spec = json!({
        "serviceAccountName": "ghost",
        "containers": [{"name": "app", "image": "app:1",
            "envFrom": [{"secretRef": {"name": "creds"}}, {"configMapRef": {"name": "maybe", "optional": true}}],
            "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "keys", "key": "k"}}}, {"name": "X", "value": "1"}],
            "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "cfg", "mountPath": "/c"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "cfg", "configMap": {"name": "settings"}}]
    });
    let broken = file(&[
        event(0, &[config_map("settings")]),
        event(1_000, &[deployment("web", spec.clone())]),
        // The same object again: no second finding.
        event(2_000, &[deployment("web", spec)]),
    ]);
    let (findings, summary) = check(&broken, Options::default());
    assert_eq!(ids(&findings), ["KS001"; 4], "{findings:#?}");
    let text: Vec<String> = findings.iter().map(ToString::to_string).collect();
    for target in [
        "ServiceAccount shop/ghost",
        "Secret shop/creds",
        "ConfigMap shop/keys",
        "PersistentVolumeClaim shop/data",
    ] {
        assert!(
            text.iter().any(|t| t.contains(target)),
            "{target}: {text:#?}"
        );
    }
    assert!(
        text[0].starts_with("error KS001 missing-reference: event 1 at "),
        "{}",
        text[0]
    );
    assert_eq!(summary.errors, 4);

    let (out, changes) = fixed(&broken, &Options::default());
    assert!(changes.iter().all(|c| c.rule.id == "KS001"));
    // Two events hold the object: each is fixed.
    assert_eq!(changes.len(), 8, "{changes:#?}");
    let pod = &applied_json(&out, 1, 0)["spec"]["template"]["spec"];
    assert!(pod.get("serviceAccountName").is_none());
    assert_eq!(
        pod["volumes"],
        json!([{"name": "cfg", "configMap": {"name": "settings"}}])
    );
    let app = &pod["containers"][0];
    assert_eq!(
        app["volumeMounts"],
        json!([{"name": "cfg", "mountPath": "/c"}])
    );
    assert_eq!(
        app["envFrom"],
        json!([{"configMapRef": {"name": "maybe", "optional": true}}])
    );
    assert_eq!(app["env"], json!([{"name": "X", "value": "1"}]));
}

#[test]
fn references_resolve_against_objects_applied_anywhere_in_the_trace() {
    // The ConfigMap comes after the Deployment: it is in the trace, so no finding.
    let spec = json!({"containers": [{"name": "app", "image": "app:1",
        "envFrom": [{"configMapRef": {"name": "late"}}]}]});
    let (findings, _) = check(
        &file(&[
            event(0, &[deployment("web", spec)]),
            event(1_000, &[config_map("late")]),
        ]),
        Options::default(),
    );
    assert!(findings.is_empty(), "{findings:?}");
}

#[test]
fn cronjob_and_pod_templates_are_checked_where_they_are() {
    let cronjob = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "shop"},
        "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "job", "image": "job:1", "envFrom": [{"secretRef": {"name": "token"}}]}]}}}}}
    });
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"serviceAccount": "robot", "containers": [container()]}});
    let broken = file(&[event(0, &[cronjob, pod])]);
    let (findings, _) = check(&broken, Options::default());
    let text: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(
        text[0].contains("batch/v1.CronJob shop/nightly") && text[0].contains("Secret shop/token")
    );
    assert!(text[0].contains("/spec/jobTemplate/spec/template/spec/containers/0/envFrom/0"));
    assert!(text[1].contains("v1.Pod shop/p") && text[1].contains("ServiceAccount shop/robot"));
    fixed(&broken, &Options::default());
}

#[test]
fn absent_owners_fire_and_present_ones_do_not() {
    let mut orphan = config_map("orphan");
    orphan["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-123", "uid": "u1"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u2"}
    ]);
    let broken = file(&[event(
        0,
        &[
            deployment("web", json!({"containers": [container()]})),
            orphan,
        ],
    )]);
    let (findings, summary) = check(&broken, Options::default());
    assert_eq!(ids(&findings), ["KS002"]);
    assert!(findings[0].to_string().starts_with(
        "warning KS002 absent-owner: event 0 at 1767225600000 ms, v1.ConfigMap shop/orphan: its owner ReplicaSet.apps shop/web-123"
    ), "{}", findings[0]);
    assert_eq!((summary.errors, summary.warnings), (0, 1));
    let (out, changes) = fixed(&broken, &Options::default());
    assert_eq!(changes.len(), 1);
    assert_eq!(
        applied_json(&out, 0, 1)["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u2"}])
    );
}

#[test]
fn server_fields_fire_per_object_and_are_removed() {
    let mut cm = config_map("settings");
    cm["metadata"]["uid"] = json!("u");
    cm["metadata"]["resourceVersion"] = json!("7");
    cm["metadata"]["managedFields"] = json!([]);
    cm["status"] = json!({});
    let broken = file(&[event(0, &[cm.clone()]), event(1_000, &[cm])]);
    let (findings, _) = check(&broken, Options::default());
    assert_eq!(ids(&findings), ["KS003", "KS003"]);
    assert!(
        findings[0]
            .message
            .contains("metadata.uid, metadata.resourceVersion, metadata.managedFields, status")
    );
    let (out, changes) = fixed(&broken, &Options::default());
    assert_eq!(changes.len(), 2);
    assert_eq!(applied_json(&out, 1, 0), config_map("settings"));
}

#[test]
fn replicas_beyond_an_int32_fire_and_are_set_to_the_nearest_valid_value() {
    let with = |replicas: Value| {
        let mut d = deployment("web", json!({"containers": [container()]}));
        d["spec"]["replicas"] = replicas;
        d
    };
    // What `scaleReplicas: 1e300` wrote before it was refused, a negative count, a fraction.
    let broken = file(&[
        event(0, &[with(json!(9_223_372_036_854_775_807_i64))]),
        event(1, &[with(json!(-3))]),
        event(2, &[with(json!(2.5))]),
        event(3, &[with(json!(2_147_483_647))]),
    ]);
    let (findings, summary) = check(&broken, Options::default());
    assert_eq!(ids(&findings), ["KS006"; 3]);
    assert_eq!(summary.errors, 3);
    assert!(
        findings[0].message.contains(
            "spec.replicas 9223372036854775807 is not an integer from 0 to 2147483647 (an int32)"
        ),
        "{}",
        findings[0]
    );
    let (out, changes) = fixed(&broken, &Options::default());
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(
        changes[0]
            .to_string()
            .contains("set spec.replicas from 9223372036854775807 to 2147483647")
    );
    let replicas: Vec<Value> = (0..4)
        .map(|event| applied_json(&out, event, 0)["spec"]["replicas"].clone())
        .collect();
    assert_eq!(
        replicas,
        [
            json!(2_147_483_647),
            json!(0),
            json!(3),
            json!(2_147_483_647)
        ]
    );
}

#[test]
fn namespaces_that_are_not_dns_labels_fire_once_each() {
    let mut bad = config_map("a");
    bad["metadata"]["namespace"] = json!("Bad_Name!!");
    let mut also_bad = config_map("b");
    also_bad["metadata"]["namespace"] = json!("Bad_Name!!");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "-x"}});
    let broken = file(&[
        event(0, &[bad, config_map("fine")]),
        event(1, &[also_bad, namespace]),
    ]);
    let (findings, _) = check(&broken, Options::default());
    assert_eq!(ids(&findings), ["KS006", "KS006"], "{findings:?}");
    assert!(
        findings[0]
            .to_string()
            .starts_with("error KS006 invalid-value: event 0 at 1767225600000 ms, v1.ConfigMap Bad_Name!!/a: namespace \"Bad_Name!!\" is not a DNS label"),
        "{}",
        findings[0]
    );
    assert!(
        findings[1].message.contains("namespace \"-x\""),
        "{}",
        findings[1]
    );
    // --fix does not choose names: the findings remain.
    let (_, summary) = check(&broken, Options::default());
    let reader = TraceReader::new(broken.as_slice()).unwrap().unordered();
    let (out, _) = fix(
        reader,
        &summary,
        &Options::default(),
        Vec::new(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(ids(&check(&out, Options::default()).0), ["KS006", "KS006"]);
}

#[test]
fn unknown_kinds_fire_only_with_a_cluster_and_their_objects_go() {
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "shop"}});
    let broken = file_with(
        header(None),
        &[
            event(0, &[config_map("settings"), widget.clone()]),
            event(1_000, &[widget]),
        ],
        &[pb::PodLifecycle {
            owner_gvk: Some(gvk("example.com/v1", "Widget")),
            owner_namespace: "shop".into(),
            owner_name: "w".into(),
            start_ms: T0,
            ..Default::default()
        }],
    );
    let (findings, _) = check(&broken, Options::default());
    assert!(findings.is_empty(), "no cluster, no check: {findings:?}");
    let (findings, _) = check(&broken, all_kinds());
    assert_eq!(ids(&findings), ["KS004"]);
    assert!(
        findings[0].message.contains("example.com/v1.Widget"),
        "{}",
        findings[0]
    );
    let (out, changes) = fixed(&broken, &all_kinds());
    // Two objects, the event left empty, the lifecycle.
    assert_eq!(changes.len(), 4, "{changes:#?}");
    let trace = ksim_trace::read_trace(&out).unwrap();
    assert_eq!(trace.events.len(), 1);
    assert!(trace.lifecycles.is_empty());
}

#[test]
fn events_out_of_order_or_outside_the_window_fire_and_are_sorted_stably() {
    let broken = file_with(
        header(Some((1_000, 2_000))),
        &[
            event(1_500, &[config_map("a")]),
            event(500, &[config_map("b")]),
            event(1_500, &[config_map("c")]),
            event(500, &[config_map("d")]),
        ],
        &[],
    );
    assert!(ksim_trace::read_trace(&broken).is_err());
    let (findings, _) = check(&broken, Options::default());
    let text: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert_eq!(ids(&findings), ["KS005"; 4], "{text:#?}");
    assert!(text[0].contains("event 1 at 1767225600500 ms: older than the event before it"));
    let (out, changes) = fixed(&broken, &Options::default());
    let trace = ksim_trace::read_trace(&out).unwrap();
    let names: Vec<&str> = trace
        .events
        .iter()
        .map(|e| e.applied[0].name.as_str())
        .collect();
    assert_eq!(names, ["b", "d", "a", "c"]);
    assert_eq!(
        trace.header.start_time,
        Some(ksim_trace::time::timestamp(T0 + 500))
    );
    assert_eq!(changes.len(), 3, "{changes:#?}");
}

#[test]
fn disabled_rules_neither_fire_nor_fix() {
    let mut cm = config_map("settings");
    cm["status"] = json!({});
    let broken = file(&[event(0, &[cm])]);
    let options = Options {
        disabled: BTreeSet::from(["KS003"]),
        ..Options::default()
    };
    let (findings, _) = check(&broken, options.clone());
    assert!(findings.is_empty());
    let (out, changes) = fixed(&broken, &options);
    assert!(changes.is_empty());
    assert!(applied_json(&out, 0, 0).get("status").is_some());
    let (findings, _) = check(&broken, Options::default());
    assert_eq!(ids(&findings), [rules::SERVER_FIELDS.id]);
}

#[test]
fn fixing_a_clean_trace_changes_nothing() {
    let (out, changes) = fixed(&clean(), &all_kinds());
    assert!(changes.is_empty(), "{changes:?}");
    let before = ksim_trace::read_trace(&clean()).unwrap();
    let after = ksim_trace::read_trace(&out).unwrap();
    assert_eq!(before.events, after.events);
}

#[test]
fn an_object_that_is_not_json_is_an_error_naming_it() {
    let mut bad = object(&config_map("x"));
    bad.object_json = b"{not json".to_vec();
    let file = file(&[pb::TraceEvent {
        timestamp_ms: T0,
        applied: vec![bad],
        deleted: Vec::new(),
    }]);
    let reader = TraceReader::new(file.as_slice()).unwrap().unordered();
    let error = lint(reader, Options::default(), &mut |_| {}).unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(
            "event 0 at 1767225600000 ms, v1.ConfigMap shop/x: the object is not valid JSON"
        ),
        "{text}"
    );
    assert!(!text.contains('\n'));
}

#[test]
fn cluster_samples_and_recorded_nodes_pass_through_a_fix() {
    let mut writer = TraceWriter::new(Vec::new(), &header(None))
        .unwrap()
        .unordered();
    writer
        .write_event(&event(2_000, &[config_map("a")]))
        .unwrap();
    writer
        .write_sample(&pb::ClusterSample {
            timestamp_ms: T0 + 1_500,
            ..Default::default()
        })
        .unwrap();
    writer
        .write_node(&pb::RecordedNode {
            name: "node-1".into(),
            ..Default::default()
        })
        .unwrap();
    writer
        .write_event(&event(1_000, &[config_map("b")]))
        .unwrap();
    let broken = writer.finish().unwrap().0;
    let (findings, _) = check(&broken, Options::default());
    assert_eq!(ids(&findings), ["KS005"]);
    // Sorting buffers the records: the sample and the node still come through.
    let (out, _) = fixed(&broken, &Options::default());
    let trace = ksim_trace::read_trace(&out).unwrap();
    assert_eq!(trace.samples.len(), 1);
    assert_eq!(trace.nodes.len(), 1);
    assert_eq!(trace.events.len(), 2);
}

fn usage(offset_ms: i64, pod: &str, cores: i64, memory_bytes: i64) -> pb::UsageSample {
    pb::UsageSample {
        timestamp_ms: T0 + offset_ms,
        window_ms: 15_000,
        namespace: "shop".into(),
        pod: pod.into(),
        containers: vec![pb::ContainerUsage {
            name: "app".into(),
            cpu_nanocores: cores * 1_000_000_000,
            memory_bytes,
        }],
    }
}

fn file_with_usage(samples: &[pb::UsageSample]) -> Vec<u8> {
    let mut writer = TraceWriter::new(Vec::new(), &header(Some((0, 60_000))))
        .unwrap()
        .unordered();
    writer.write_event(&event(0, &[config_map("a")])).unwrap();
    for sample in samples {
        writer.write_usage(sample).unwrap();
    }
    writer.finish().unwrap().0
}

#[test]
fn usage_out_of_order_for_its_pod_outside_the_window_or_beyond_any_machine_is_found_and_removed() {
    let mut long_window = usage(40_000, "web-2", 1, 1 << 20);
    long_window.window_ms = 2 * 3_600_000;
    let broken = file_with_usage(&[
        usage(15_000, "web-1", 1, 1 << 20),
        // Another pod's earlier sample is fine: pods are read together, not in time order.
        usage(10_000, "web-2", 1, 1 << 20),
        usage(15_000, "web-1", 1, 1 << 20),
        usage(5_000, "web-1", 1, 1 << 20),
        usage(30_000, "web-1", 5_000, 1 << 20),
        usage(45_000, "web-1", 1, 100 << 40),
        usage(60_000, "web-1", 1, 1 << 20),
        long_window,
        usage(50_000, "web-1", 2, 1 << 20),
    ]);
    let (findings, summary) = check(&broken, Options::default());
    assert_eq!(summary.usage, 9);
    let found: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert_eq!(
        found,
        [
            "error KS007 bad-usage: usage sample 2 at 1767225615000 ms, pod shop/web-1: \
             at or before the pod's previous sample, at 1767225615000 ms",
            "error KS007 bad-usage: usage sample 3 at 1767225605000 ms, pod shop/web-1: \
             at or before the pod's previous sample, at 1767225615000 ms",
            "error KS007 bad-usage: usage sample 4 at 1767225630000 ms, pod shop/web-1: \
             container \"app\" uses 5000 cores, more than any machine has",
            "error KS007 bad-usage: usage sample 5 at 1767225645000 ms, pod shop/web-1: \
             container \"app\" uses 102400 GiB, more than any machine has",
            "error KS007 bad-usage: usage sample 6 at 1767225660000 ms, pod shop/web-1: \
             outside the header's time window",
            "error KS007 bad-usage: usage sample 7 at 1767225640000 ms, pod shop/web-2: \
             a window of 7200 s, over an hour",
        ]
    );

    let (out, changes) = fixed(&broken, &Options::default());
    assert_eq!(changes.len(), 6, "{changes:?}");
    assert!(changes.iter().all(|c| c.description == "removed"));
    let kept: Vec<(String, i64)> = ksim_trace::read_trace(&out)
        .unwrap()
        .usage
        .iter()
        .map(|u| (u.pod.clone(), u.timestamp_ms - T0))
        .collect();
    assert_eq!(
        kept,
        [
            ("web-1".to_owned(), 15_000),
            ("web-2".to_owned(), 10_000),
            ("web-1".to_owned(), 50_000),
        ]
    );

    // Ignored, nothing is found or removed.
    let options = Options {
        disabled: BTreeSet::from(["KS007"]),
        ..Options::default()
    };
    let (findings, _) = check(&broken, options);
    assert!(findings.is_empty(), "{findings:?}");
}
