#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;
use crate::domain::kinds::default_kinds;

const DEPLOYMENT: usize = 0;
const REPLICASET: usize = 3;
const POD: usize = 6;

fn recorder() -> Recorder {
    let kinds = default_kinds();
    assert_eq!(kinds[DEPLOYMENT].kind, "Deployment");
    assert_eq!(kinds[REPLICASET].kind, "ReplicaSet");
    assert_eq!(kinds[POD].kind, "Pod");
    Recorder::new(kinds, EnvRedaction::default())
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "resourceVersion": replicas.to_string(), "labels": {"app": name}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "web"}]}}},
        "status": {"replicas": 0}})
}

fn replicaset(name: &str, owner: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "shop",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "controller": true, "uid": "d"}]},
        "spec": {"replicas": 1}})
}

fn pod(name: &str, owner_rs: &str, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner_rs, "controller": true, "uid": "r"}]},
        "spec": {"containers": [{"name": "c", "image": "web"}]},
        "status": status})
}

fn applied(kind: usize, object: Value) -> Observation {
    Observation::Applied {
        kind,
        object,
        listed: false,
    }
}

fn events(records: &[Recorded]) -> Vec<(&'static str, String)> {
    records
        .iter()
        .filter_map(|r| match &r.record {
            Record::Event(e) => Some(if let Some(o) = e.applied.first() {
                ("apply", o.name.clone())
            } else {
                ("delete", e.deleted[0].name.clone())
            }),
            _ => None,
        })
        .collect()
}

fn lifecycles(records: &[Recorded]) -> Vec<pb::PodLifecycle> {
    records
        .iter()
        .filter_map(|r| match &r.record {
            Record::Lifecycle(l) => Some(l.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_apply_is_recorded_only_when_the_sanitised_object_changes() {
    let mut rec = recorder();
    let first = rec.observe(applied(DEPLOYMENT, deployment("web", 2)), 1_000);
    assert_eq!(events(&first), [("apply", "web".to_owned())]);

    // Status and resourceVersion churn is not a change.
    let mut status_only = deployment("web", 2);
    status_only["status"]["replicas"] = json!(2);
    status_only["metadata"]["resourceVersion"] = json!("99");
    assert!(
        rec.observe(applied(DEPLOYMENT, status_only), 2_000)
            .is_empty()
    );

    let scaled = rec.observe(applied(DEPLOYMENT, deployment("web", 5)), 3_000);
    assert_eq!(events(&scaled), [("apply", "web".to_owned())]);
    let Record::Event(event) = &scaled[0].record else {
        panic!()
    };
    assert_eq!(event.timestamp_ms, 3_000);
    let object: Value = serde_json::from_slice(&event.applied[0].object_json).unwrap();
    assert_eq!(object["spec"]["replicas"], 5);
    assert!(object.get("status").is_none());
}

#[test]
fn deletes_are_tombstones_and_timestamps_never_go_back() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 2)), 5_000);
    let deleted = rec.observe(
        Observation::Deleted {
            kind: DEPLOYMENT,
            object: deployment("web", 2),
        },
        4_000,
    );
    assert_eq!(events(&deleted), [("delete", "web".to_owned())]);
    assert_eq!(
        deleted[0].timestamp_ms, 5_000,
        "clock went back; the log must not"
    );
    let Record::Event(event) = &deleted[0].record else {
        panic!()
    };
    let stone: Value = serde_json::from_slice(&event.deleted[0].object_json).unwrap();
    assert!(stone.get("spec").is_none());
    assert_eq!(stone["metadata"]["labels"]["app"], "web");
    // Deleting again (a replayed watch event) records nothing.
    assert!(
        rec.observe(
            Observation::Deleted {
                kind: DEPLOYMENT,
                object: deployment("web", 2)
            },
            6_000
        )
        .is_empty()
    );
}

#[test]
fn an_object_being_deleted_records_only_its_delete() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 2)), 1);
    let mut terminating = deployment("web", 2);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-11-21T08:00:00Z");
    terminating["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
    assert!(
        rec.observe(applied(DEPLOYMENT, terminating.clone()), 2)
            .is_empty()
    );
    let deleted = rec.observe(
        Observation::Deleted {
            kind: DEPLOYMENT,
            object: terminating,
        },
        3,
    );
    assert_eq!(events(&deleted), [("delete", "web".to_owned())]);
}

#[test]
fn owned_objects_of_skip_owned_kinds_are_not_recorded() {
    let mut rec = recorder();
    assert!(
        rec.observe(applied(REPLICASET, replicaset("web-1", "web")), 1)
            .is_empty()
    );
    assert!(
        rec.observe(
            Observation::Deleted {
                kind: REPLICASET,
                object: replicaset("web-1", "web")
            },
            2
        )
        .is_empty()
    );
    let mut bare = replicaset("solo", "x");
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    assert_eq!(
        events(&rec.observe(applied(REPLICASET, bare), 3)),
        [("apply", "solo".to_owned())]
    );
}

#[test]
fn a_relist_after_restart_records_only_real_differences() {
    let mut before = recorder();
    let mut log = Vec::new();
    for (name, replicas) in [("web", 2), ("api", 1), ("old", 1)] {
        log.extend(before.observe(applied(DEPLOYMENT, deployment(name, replicas)), 1_000));
    }

    let mut after = recorder();
    for entry in &log {
        after.restore(entry.timestamp_ms, &entry.record);
    }
    // While the tracer was down: api scaled, old deleted, new created.
    let mut out = Vec::new();
    let mut listed = HashSet::new();
    for (name, replicas) in [("web", 2), ("api", 3), ("new", 1)] {
        let object = deployment(name, replicas);
        listed.insert(key_of(&after.kinds()[DEPLOYMENT], &object).unwrap());
        out.extend(after.observe(
            Observation::Applied {
                kind: DEPLOYMENT,
                object,
                listed: true,
            },
            9_000,
        ));
    }
    out.extend(after.observe(
        Observation::ListDone {
            kind: DEPLOYMENT,
            listed,
        },
        9_000,
    ));
    assert_eq!(
        events(&out),
        [
            ("apply", "api".to_owned()),
            ("apply", "new".to_owned()),
            ("delete", "old".to_owned())
        ]
    );
}

#[test]
fn a_list_done_for_one_kind_never_deletes_another() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 2)), 1);
    let out = rec.observe(
        Observation::ListDone {
            kind: REPLICASET,
            listed: HashSet::new(),
        },
        2,
    );
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(rec.object_count("apps", "Deployment"), 1);
}

#[test]
fn pod_lifecycles_belong_to_the_topmost_tracked_owner() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 1)), 1_000);
    rec.observe(applied(REPLICASET, replicaset("web-abc", "web")), 1_000);
    assert!(
        rec.observe(
            applied(
                POD,
                pod("web-abc-1", "web-abc", json!({"phase": "Pending"}))
            ),
            1_500
        )
        .is_empty()
    );

    let started = rec.observe(
        applied(
            POD,
            pod("web-abc-1", "web-abc", json!({"phase": "Running"})),
        ),
        2_000,
    );
    let started = lifecycles(&started);
    assert_eq!(started.len(), 1);
    assert_eq!(
        (
            started[0].owner_name.as_str(),
            started[0].start_ms,
            started[0].end_ms
        ),
        ("web", 2_000, 0)
    );
    assert_eq!(started[0].owner_gvk.as_ref().unwrap().kind, "Deployment");
    assert_eq!(started[0].outcome(), pb::PodOutcome::Running);
    // The same state again is not a new start.
    assert!(
        rec.observe(
            applied(
                POD,
                pod("web-abc-1", "web-abc", json!({"phase": "Running"}))
            ),
            2_500
        )
        .is_empty()
    );

    let ended = lifecycles(&rec.observe(
        applied(
            POD,
            pod("web-abc-1", "web-abc", json!({"phase": "Succeeded"})),
        ),
        7_250,
    ));
    assert_eq!((ended[0].start_ms, ended[0].end_ms), (2_000, 7_250));
    assert_eq!(ended[0].outcome(), pb::PodOutcome::Succeeded);
    assert_eq!(ended[0].pod_spec_hash, started[0].pod_spec_hash);
    // Deleting a finished pod does not end it twice.
    assert!(
        lifecycles(&rec.observe(
            Observation::Deleted {
                kind: POD,
                object: pod("web-abc-1", "web-abc", json!({}))
            },
            8_000
        ))
        .is_empty()
    );
}

#[test]
fn a_running_pod_deleted_ends_as_deleted_and_survives_restart() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 1)), 1_000);
    rec.observe(applied(REPLICASET, replicaset("web-abc", "web")), 1_000);
    let log = rec.observe(
        applied(
            POD,
            pod("web-abc-2", "web-abc", json!({"phase": "Running"})),
        ),
        2_000,
    );

    let mut after = recorder();
    after.restore(1_000, &log[0].record);
    let ended = lifecycles(&after.observe(
        Observation::ListDone {
            kind: POD,
            listed: HashSet::new(),
        },
        9_000,
    ));
    assert_eq!(ended.len(), 1, "the pod vanished while the tracer was down");
    assert_eq!((ended[0].start_ms, ended[0].end_ms), (2_000, 9_000));
    assert_eq!(ended[0].outcome(), pb::PodOutcome::Deleted);
}

#[test]
fn a_listed_pod_takes_its_times_from_the_kubelet() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 1)), 1_000);
    rec.observe(applied(REPLICASET, replicaset("web-abc", "web")), 1_000);
    let status = json!({"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {
        "startedAt": "2026-01-01T00:00:02Z", "finishedAt": "2026-01-01T00:00:09Z"}}}]});
    let out = lifecycles(&rec.observe(
        Observation::Applied {
            kind: POD,
            object: pod("web-abc-3", "web-abc", status),
            listed: true,
        },
        99_000_000_000_000,
    ));
    let base = 1_767_225_600_000;
    assert_eq!(
        (out[0].start_ms, out[0].end_ms),
        (base + 2_000, base + 9_000)
    );
}

const NODE: usize = 7;

fn node(name: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"ksim.io/node-group": "m5"}},
        "status": {"allocatable": {"cpu": "2"},
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

#[test]
fn nodes_are_recorded_as_cluster_state_never_as_replayable_objects() {
    let mut recorder = recorder();
    assert_eq!(default_kinds()[NODE].kind, "Node");
    assert!(recorder.records_cluster());
    let out = recorder.observe(applied(NODE, node("n1", true)), 1_000);
    let [
        Recorded {
            record: Record::Node(recorded),
            ..
        },
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        (recorded.name.as_str(), recorded.group.as_str()),
        ("n1", "m5")
    );
    assert!(recorded.ready);
    assert_eq!(
        recorder.object_count("", "Node"),
        0,
        "not an object of the trace"
    );

    // A pending pod of the workload: the sample after the batch counts it and the node.
    recorder.observe(
        applied(POD, pod("web-1", "web-rs", json!({"phase": "Pending"}))),
        1_100,
    );
    let Some(Recorded {
        record: Record::Sample(sample),
        timestamp_ms,
    }) = recorder.sample(1_100)
    else {
        panic!("no sample")
    };
    assert_eq!(timestamp_ms, 1_100);
    assert_eq!(sample.ready_nodes["m5"], 1);
    assert_eq!(sample.pods["shop"].pending, 1);

    // The node goes NotReady, then vanishes in a relist.
    let out = recorder.observe(applied(NODE, node("n1", false)), 2_000);
    assert!(matches!(&out[..], [Recorded { record: Record::Node(n), .. }] if !n.ready));
    let out = recorder.observe(
        Observation::ListDone {
            kind: NODE,
            listed: HashSet::new(),
        },
        3_000,
    );
    assert!(
        matches!(&out[..], [Recorded { record: Record::Node(n), .. }] if n.deleted_ms == 3_000)
    );
}

#[test]
fn without_nodes_in_the_kinds_no_cluster_state_is_recorded() {
    let kinds: Vec<_> = default_kinds()
        .into_iter()
        .filter(|k| !k.is_node())
        .collect();
    let mut recorder = Recorder::new(kinds, EnvRedaction::default());
    assert!(!recorder.records_cluster());
    recorder.observe(
        applied(POD, pod("web-1", "web-rs", json!({"phase": "Pending"}))),
        1_000,
    );
    assert_eq!(recorder.sample(5_000), None);
}

fn bound_pod(name: &str, node: &str, status: Value) -> Value {
    let mut pod = pod(name, "web-abc", status);
    pod["spec"]["nodeName"] = json!(node);
    pod
}

#[test]
fn a_lifetime_says_when_its_pod_was_bound_and_ready_and_where_it_ran() {
    let mut rec = recorder();
    rec.observe(applied(DEPLOYMENT, deployment("web", 1)), 1_000);
    rec.observe(applied(REPLICASET, replicaset("web-abc", "web")), 1_000);
    let scheduled = json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    assert!(
        rec.observe(
            applied(
                POD,
                bound_pod(
                    "p1",
                    "n1",
                    json!({"phase": "Pending", "conditions": scheduled})
                )
            ),
            2_250
        )
        .is_empty()
    );
    let started = lifecycles(&rec.observe(
        applied(
            POD,
            bound_pod(
                "p1",
                "n1",
                json!({"phase": "Running", "conditions": scheduled}),
            ),
        ),
        5_500,
    ));
    assert_eq!(
        (
            started[0].bound_ms,
            started[0].start_ms,
            started[0].ready_ms,
            started[0].node_name.as_str()
        ),
        (2_250, 5_500, 0, "n1"),
        "bound when the tracer saw it bound, in milliseconds"
    );
    let ready =
        json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:07Z"}]);
    let became_ready = lifecycles(&rec.observe(
        applied(
            POD,
            bound_pod("p1", "n1", json!({"phase": "Running", "conditions": ready})),
        ),
        7_125,
    ));
    assert_eq!(
        became_ready.len(),
        1,
        "turning Ready records the lifetime again"
    );
    assert_eq!(
        (became_ready[0].bound_ms, became_ready[0].ready_ms),
        (2_250, 7_125)
    );
    assert!(
        rec.observe(
            applied(
                POD,
                bound_pod("p1", "n1", json!({"phase": "Running", "conditions": ready}))
            ),
            8_000
        )
        .is_empty(),
        "still Ready is nothing new"
    );
    let ended = lifecycles(&rec.observe(
        Observation::Deleted {
            kind: POD,
            object: bound_pod("p1", "n1", json!({})),
        },
        9_000,
    ));
    assert_eq!(
        (ended[0].bound_ms, ended[0].ready_ms, ended[0].end_ms),
        (2_250, 7_125, 9_000)
    );

    // Seen first running (a relist): the conditions' own times.
    let base = 1_767_225_600_000;
    let status = json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:04Z"}],
        "containerStatuses": [{"state": {"running": {"startedAt": "2026-01-01T00:00:03Z"}}}]});
    let mut p2 = bound_pod("p2", "n2", status);
    p2["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let listed = lifecycles(&rec.observe(
        Observation::Applied {
            kind: POD,
            object: p2,
            listed: true,
        },
        base + 60_000,
    ));
    assert_eq!(
        (
            listed[0].created_ms - base,
            listed[0].bound_ms - base,
            listed[0].start_ms - base,
            listed[0].ready_ms - base
        ),
        (0, 1_000, 3_000, 4_000),
        "created at its creationTimestamp: recorded pending time is start minus it"
    );
    assert_eq!(started[0].created_ms, 0, "no creationTimestamp: not known");
    assert_eq!(listed[0].node_name, "n2");
}

#[test]
fn a_usage_sample_is_logged_at_the_read_time_and_keeps_the_metrics_time() {
    let mut recorder = recorder();
    recorder.observe(applied(0, deployment("web", 1)), 5_000);
    let sample = pb::UsageSample {
        timestamp_ms: 3_500,
        window_ms: 15_000,
        namespace: "shop".into(),
        pod: "web-1".into(),
        containers: Vec::new(),
    };
    // The wall clock went back: the entry still does not.
    let out = recorder.observe(Observation::Usage(sample.clone()), 4_000);
    assert_eq!(
        out,
        vec![Recorded {
            timestamp_ms: 5_000,
            record: Record::Usage(sample),
        }]
    );
}
