#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::{sorting::InMemory, *};

fn object(kind: &str, namespace: &str, name: &str, json: Value) -> pb::TraceObject {
    let group = if kind == "Pod" || kind == "ConfigMap" {
        ""
    } else {
        "apps"
    };
    pb::TraceObject {
        gvk: Some(pb::GroupVersionKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
        }),
        namespace: namespace.into(),
        name: name.into(),
        object_json: serde_json::to_vec(&json).unwrap(),
    }
}

fn deployment(namespace: &str, name: &str, replicas: i64) -> pb::TraceObject {
    object(
        "Deployment",
        namespace,
        name,
        json!({"metadata": {"name": name, "namespace": namespace, "labels": {"app": name}}, "spec": {"replicas": replicas}}),
    )
}

fn apply(ts: i64, object: pb::TraceObject) -> (i64, Record) {
    (
        ts,
        Record::Event(pb::TraceEvent {
            timestamp_ms: ts,
            applied: vec![object],
            deleted: vec![],
        }),
    )
}

fn delete(ts: i64, object: pb::TraceObject) -> (i64, Record) {
    (
        ts,
        Record::Event(pb::TraceEvent {
            timestamp_ms: ts,
            applied: vec![],
            deleted: vec![object],
        }),
    )
}

fn lifetime(owner: &str, pod: &str, start_ms: i64, end_ms: i64) -> pb::PodLifecycle {
    pb::PodLifecycle {
        owner_gvk: Some(pb::GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        }),
        owner_namespace: "shop".into(),
        owner_name: owner.into(),
        pod_spec_hash: 7,
        start_ms,
        end_ms,
        pod_name: pod.into(),
        ..Default::default()
    }
}

fn cut(
    window: Window,
    filter: Filter,
    log: &[(i64, Record)],
) -> (pb::TraceEvent, Vec<pb::TraceEvent>, Vec<pb::PodLifecycle>) {
    let mut scan = Scan::new(window, filter, InMemory);
    for (ts, record) in log {
        scan.record(*ts, record).unwrap();
    }
    let mut cut = scan.finish().unwrap();
    let first = cut.first_event();
    let events = log
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Event(e) => cut.event(e).unwrap(),
            _ => None,
        })
        .collect();
    let lifecycles = cut.lifecycles().unwrap().map(Result::unwrap).collect();
    (first, events, lifecycles)
}

fn names(objects: &[pb::TraceObject]) -> Vec<&str> {
    objects.iter().map(|o| o.name.as_str()).collect()
}

#[test]
fn objects_before_the_window_are_flattened_into_its_first_event() {
    let log = vec![
        apply(100, deployment("shop", "web", 1)),
        apply(150, deployment("shop", "gone", 1)),
        apply(200, deployment("shop", "web", 3)),
        delete(250, deployment("shop", "gone", 1)),
        apply(1_000, deployment("shop", "api", 1)),
        apply(1_500, deployment("shop", "web", 5)),
        apply(3_000, deployment("shop", "late", 1)),
    ];
    let (first, events, _) = cut(Window::new(500, 2_000).unwrap(), Filter::default(), &log);
    assert_eq!(first.timestamp_ms, 500);
    assert_eq!(names(&first.applied), ["web"]);
    let web: Value = serde_json::from_slice(&first.applied[0].object_json).unwrap();
    assert_eq!(
        web["spec"]["replicas"], 3,
        "the state at the window start, not the first version"
    );
    let in_window: Vec<_> = events
        .iter()
        .map(|e| (e.timestamp_ms, names(&e.applied)[0]))
        .collect();
    assert_eq!(in_window, [(1_000, "api"), (1_500, "web")]);
}

#[test]
fn filters_apply_to_flattened_and_window_objects_alike() {
    let log = vec![
        apply(100, deployment("shop", "web", 1)),
        apply(100, deployment("kube-system", "dns", 1)),
        apply(600, deployment("kube-system", "dns", 2)),
        apply(700, deployment("shop", "api", 2)),
    ];
    let filter = Filter::from_proto(Some(&pb::TraceFilter {
        exclude_namespaces: vec!["kube-system".into()],
        exclude_label_selectors: vec!["app=api".into()],
        ..Default::default()
    }))
    .unwrap();
    let (first, events, _) = cut(Window::new(500, 2_000).unwrap(), filter, &log);
    assert_eq!(names(&first.applied), ["web"]);
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn objects_owned_by_an_exported_owner_are_dropped_with_their_deletes() {
    let owned = |name: &str| {
        object(
            "ConfigMap",
            "shop",
            name,
            json!({"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "controller": true}]}}),
        )
    };
    let orphan_owner = object(
        "ConfigMap",
        "shop",
        "c3",
        json!({"metadata": {"name": "c3", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "elsewhere"}]}}),
    );
    let log = vec![
        apply(100, owned("c1")),
        apply(100, deployment("shop", "web", 1)),
        apply(600, owned("c2")),
        apply(650, orphan_owner),
        delete(700, owned("c2")),
    ];
    let (first, events, _) = cut(Window::new(500, 2_000).unwrap(), Filter::default(), &log);
    assert_eq!(names(&first.applied), ["web"]);
    let kept: Vec<_> = events.iter().flat_map(|e| names(&e.applied)).collect();
    assert_eq!(kept, ["c3"]);
    assert!(
        events.iter().all(|e| e.deleted.is_empty()),
        "c2's delete goes with its apply"
    );
}

fn owned_by_web(name: &str) -> pb::TraceObject {
    object(
        "ConfigMap",
        "shop",
        name,
        json!({"metadata": {"name": name, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "controller": true}]}}),
    )
}

#[test]
fn a_delete_goes_only_with_an_apply_left_out_before_it() {
    let log = vec![
        apply(100, deployment("shop", "web", 1)),
        delete(600, owned_by_web("c1")),
        apply(700, owned_by_web("c1")),
        delete(800, owned_by_web("c1")),
    ];
    let (_, events, _) = cut(Window::new(500, 2_000).unwrap(), Filter::default(), &log);
    let deletes: Vec<_> = events
        .iter()
        .map(|e| (e.timestamp_ms, names(&e.deleted)))
        .collect();
    assert_eq!(deletes, [(600, vec!["c1"])]);
}

#[test]
fn a_cut_that_met_other_window_objects_than_the_scan_numbers_no_lifetime() {
    let log = vec![
        apply(100, deployment("shop", "web", 1)),
        apply(600, deployment("shop", "api", 1)),
    ];
    let mut scan = Scan::new(
        Window::new(500, 2_000).unwrap(),
        Filter::default(),
        InMemory,
    );
    for (ts, record) in &log {
        scan.record(*ts, record).unwrap();
    }
    // The cut is not shown the event at 600: its positions would name other objects.
    let error = scan.finish().unwrap().lifecycles().unwrap_err();
    assert!(
        error.to_string().contains("the scan met 1, the cut 0"),
        "{error}"
    );
}

#[test]
fn lifetimes_are_merged_clipped_and_numbered() {
    let mut log = vec![
        apply(100, deployment("shop", "web", 2)),
        apply(100, deployment("shop", "other", 1)),
    ];
    for l in [
        lifetime("web", "p-old", 10, 400),   // ended before the window
        lifetime("web", "p1", 600, 0),       // started, then
        lifetime("web", "p1", 600, 900),     // ended: merged
        lifetime("web", "p2", 450, 0),       // still running
        lifetime("web", "p3", 1_800, 0),     // started in the window,
        lifetime("web", "p3", 1_800, 2_500), // ended after it
        lifetime("web", "p4", 2_100, 0),     // starts after the window
    ] {
        log.push((l.start_ms.max(l.end_ms), Record::Lifecycle(l)));
    }
    let filter = Filter::from_proto(Some(&pb::TraceFilter {
        include_label_selectors: vec!["app=web".into()],
        ..Default::default()
    }))
    .unwrap();
    let mut other = lifetime("other", "q1", 600, 700);
    other.owner_name = "other".into();
    log.push((700, Record::Lifecycle(other)));

    let (_, _, lifecycles) = cut(Window::new(500, 2_000).unwrap(), filter, &log);
    let got: Vec<_> = lifecycles
        .iter()
        .map(|l| (l.pod_name.as_str(), l.launch_index, l.start_ms, l.end_ms))
        .collect();
    assert_eq!(
        got,
        [("p2", 0, 450, 0), ("p1", 1, 600, 900), ("p3", 2, 1_800, 0)]
    );
    assert_eq!(lifecycles[2].outcome(), pb::PodOutcome::Running);
}

#[test]
fn an_empty_window_is_refused() {
    assert_eq!(
        Window::new(5, 5),
        Err(EmptyWindow {
            start_ms: 5,
            end_ms: 5
        })
    );
}

#[test]
fn an_empty_window_names_its_times_in_rfc_3339() {
    let error = Window::new(1_767_225_600_000, 1_767_225_600_000).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the window is empty: start 2026-01-01T00:00:00Z is not before end 2026-01-01T00:00:00Z"
    );
}

fn sample(ts: i64, nodes: u32, shop_pending: u32) -> (i64, Record) {
    let pods = [
        (
            "shop",
            pb::RecordedPodCounts {
                pending: shop_pending,
                running: 1,
            },
        ),
        (
            "kube-system",
            pb::RecordedPodCounts {
                pending: 0,
                running: 9,
            },
        ),
    ];
    (
        ts,
        Record::Sample(pb::ClusterSample {
            timestamp_ms: ts,
            ready_nodes: [("m5".to_owned(), nodes)].into(),
            pods: pods.into_iter().map(|(ns, c)| (ns.to_owned(), c)).collect(),
        }),
    )
}

/// The export of `log` from 1 s to 2 s, leaving namespace kube-system out.
fn cut_1_to_2_s_without_kube_system(log: &[(i64, Record)]) -> Cut<InMemory> {
    let filter = Filter::from_proto(Some(&pb::TraceFilter {
        exclude_namespaces: vec!["kube-system".into()],
        ..Default::default()
    }))
    .unwrap();
    let mut scan = Scan::new(Window::new(1_000, 2_000).unwrap(), filter, InMemory);
    for (ts, record) in log {
        scan.record(*ts, record).unwrap();
    }
    scan.finish().unwrap()
}

fn node(ts: i64, name: &str, deleted: bool) -> (i64, Record) {
    (
        ts,
        Record::Node(pb::RecordedNode {
            timestamp_ms: ts,
            name: name.into(),
            group: "m5".into(),
            ready: true,
            deleted_ms: if deleted { ts } else { 0 },
            ..Default::default()
        }),
    )
}

#[test]
fn the_cluster_state_at_the_window_start_is_stamped_at_the_start_and_filtered() {
    let log = vec![
        node(100, "gone", false),
        node(200, "kept", false),
        sample(300, 2, 4),
        node(400, "gone", true),
        sample(500, 1, 3),
        // In the window.
        sample(1_500, 3, 0),
        node(1_600, "new", false),
        // After it.
        sample(2_500, 9, 9),
        node(2_600, "late", false),
    ];
    let mut cut = cut_1_to_2_s_without_kube_system(&log);
    let (first, nodes) = cut.first_cluster_records();
    let first = first.unwrap();
    assert_eq!(
        first.timestamp_ms, 1_000,
        "the state in effect, at the window start"
    );
    assert_eq!(first.ready_nodes["m5"], 1);
    assert_eq!(first.pods["shop"].pending, 3);
    assert!(
        !first.pods.contains_key("kube-system"),
        "excluded namespace counted"
    );
    let names: Vec<(&str, i64)> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.timestamp_ms))
        .collect();
    assert_eq!(
        names,
        [("kept", 1_000)],
        "nodes deleted before the start are left out"
    );

    let in_window: Vec<i64> = log
        .iter()
        .filter_map(|(_, record)| match record {
            Record::Sample(s) => cut.sample(s).map(|s| s.timestamp_ms),
            Record::Node(n) => cut.node(n).map(|n| n.timestamp_ms),
            _ => None,
        })
        .collect();
    assert_eq!(in_window, [1_500, 1_600]);
}

fn usage(ts: i64, namespace: &str) -> (i64, Record) {
    (
        ts,
        Record::Usage(pb::UsageSample {
            timestamp_ms: ts,
            window_ms: 15_000,
            namespace: namespace.into(),
            pod: "web-1".into(),
            containers: vec![pb::ContainerUsage {
                name: "app".into(),
                cpu_nanocores: 1_000_000,
                memory_bytes: 1 << 20,
            }],
        }),
    )
}

#[test]
fn usage_in_the_window_is_exported_for_the_namespaces_the_filter_keeps() {
    let log = vec![
        usage(500, "shop"),
        usage(1_200, "shop"),
        usage(1_300, "kube-system"),
        usage(1_900, "shop"),
        usage(2_100, "shop"),
    ];
    let cut = cut_1_to_2_s_without_kube_system(&log);
    let exported: Vec<(i64, String)> = log
        .iter()
        .filter_map(|(_, record)| match record {
            Record::Usage(u) => cut.usage(u).map(|u| (u.timestamp_ms, u.namespace)),
            _ => None,
        })
        .collect();
    assert_eq!(
        exported,
        [(1_200, "shop".to_owned()), (1_900, "shop".to_owned())]
    );
}
