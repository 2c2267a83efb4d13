//! Converting SimKube traces built here with serde structures that mirror SimKube's format 2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::common::simkube::{
    SkEvent, SkLifecycle, SkTrace, T0, deployment, encode, name_only, pod, sample,
};
use ksim_trace::simkube::{Conversion, convert};
use ksim_trace::{TraceError, detect_format, inspect, pb, read_trace};
use serde::Serialize;
use serde_json::{Value, json};

fn convert_ok(trace: &SkTrace) -> (Vec<u8>, Conversion) {
    convert(&encode(trace), Vec::new(), "ksim-trace tests").unwrap()
}

fn simkube_reason(result: Result<(Vec<u8>, Conversion), TraceError>) -> String {
    match result {
        Err(TraceError::Simkube { reason }) => reason,
        other => panic!("expected a Simkube error, got {other:?}"),
    }
}

#[test]
fn the_test_data_is_encoded_as_simkube_writes_it() {
    // Unit variants as bare strings, others as one-entry maps; map keys as arrays.
    assert_eq!(
        rmp_serde::to_vec_named(&SkLifecycle::Empty).unwrap(),
        b"\xa5Empty"
    );
    let running = rmp_serde::to_vec_named(&SkLifecycle::Running(5)).unwrap();
    assert_eq!(running, b"\x81\xa7Running\x05");
    let bytes = encode(&sample());
    // A two-element array whose first element is an 18-byte string.
    let key = b"\x92\xb2apps/v1.Deployment";
    assert!(
        bytes.windows(key.len()).any(|window| window == key),
        "pod_lifecycles keys are not two-element arrays"
    );
    assert_eq!(detect_format(&bytes), Some(pb::TraceFormat::SimkubeV2));
}

#[test]
fn converts_events_and_resolves_name_only_deletes() {
    let (file, conversion) = convert_ok(&sample());
    assert_eq!(
        conversion,
        Conversion {
            events: 2,
            objects: 5,
            lifecycles: 3,
            skipped_lifecycles: 1,
            reordered_events: 0,
        }
    );
    assert_eq!(detect_format(&file), Some(pb::TraceFormat::Ksim));
    let trace = read_trace(&file).unwrap();
    assert_eq!(trace.events.len(), 2);

    let first = &trace.events[0];
    assert_eq!(first.timestamp_ms, T0 * 1000);
    let kinds: Vec<_> = first
        .applied
        .iter()
        .map(|object| ksim_trace::gvk::display(object.gvk.as_ref().unwrap()))
        .collect();
    assert_eq!(kinds, ["apps/v1.Deployment", "v1.Pod"]);
    assert_eq!(first.applied[0].namespace, "default");
    assert_eq!(first.applied[0].name, "web");
    let json: Value = serde_json::from_slice(&first.applied[0].object_json).unwrap();
    assert_eq!(json, deployment("web", 1));

    let second = &trace.events[1];
    assert_eq!(second.timestamp_ms, (T0 + 60) * 1000);
    let deleted: Vec<_> = second
        .deleted
        .iter()
        .map(|object| {
            (
                ksim_trace::gvk::display(object.gvk.as_ref().unwrap()),
                object.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        deleted,
        [
            ("batch/v1.Job".to_owned(), "old-job"),
            ("v1.Pod".to_owned(), "solo")
        ]
    );
    let json: Value = serde_json::from_slice(&second.deleted[0].object_json).unwrap();
    assert_eq!(json, name_only("old-job"));
}

#[test]
fn converts_the_header() {
    let (file, _) = convert_ok(&sample());
    let header = read_trace(&file).unwrap().header;
    assert_eq!(header.format_version, ksim_trace::FORMAT_VERSION);
    assert_eq!(header.origin, "simkube trace v2");
    assert_eq!(header.created_by, "ksim-trace tests");
    assert!(header.create_time.unwrap().seconds > T0);
    let start = header.start_time.unwrap();
    assert_eq!((start.seconds, start.nanos), (T0, 0));
    let end = header.end_time.unwrap();
    assert_eq!(
        (end.seconds, end.nanos),
        (T0 + 60, 1_000_000),
        "last event + 1 ms"
    );

    let kinds = header.tracer_config.unwrap().tracked_kinds;
    let by_name: BTreeMap<_, _> = kinds
        .iter()
        .map(|kind| (ksim_trace::gvk::display(kind.gvk.as_ref().unwrap()), kind))
        .collect();
    assert_eq!(by_name.len(), 3);
    let deployments = by_name["apps/v1.Deployment"];
    assert_eq!(deployments.plural, "deployments");
    assert!(deployments.namespaced && deployments.track_lifecycles && !deployments.skip_owned);
    assert_eq!(deployments.pod_template_paths, ["/spec/template"]);
    let pods = by_name["v1.Pod"];
    assert_eq!(pods.plural, "pods");
    assert!(pods.skip_owned && !pods.track_lifecycles);
    assert_eq!(pods.pod_template_paths, [""]);
    assert!(by_name["batch/v1.Job"].pod_template_paths.is_empty());
}

#[test]
fn converts_lifecycles_keeping_launch_positions() {
    let (file, _) = convert_ok(&sample());
    let trace = read_trace(&file).unwrap();
    let mut lifecycles: Vec<_> = trace
        .lifecycles
        .iter()
        .map(|l| {
            (
                l.pod_spec_hash,
                l.launch_index,
                l.start_ms,
                l.end_ms,
                pb::PodOutcome::try_from(l.outcome).unwrap(),
            )
        })
        .collect();
    lifecycles.sort();
    assert_eq!(
        lifecycles,
        [
            (7, 0, (T0 + 2) * 1000, 0, pb::PodOutcome::Running),
            (
                42,
                0,
                (T0 + 1) * 1000,
                (T0 + 30) * 1000,
                pb::PodOutcome::Unspecified
            ),
            // Position 1 was Empty: skipped, but the third pod is still the third.
            (42, 2, (T0 + 40) * 1000, 0, pb::PodOutcome::Running),
        ]
    );
    for lifecycle in &trace.lifecycles {
        assert_eq!(lifecycle.owner_namespace, "default");
        assert_eq!(lifecycle.owner_name, "web");
        assert_eq!(lifecycle.owner_gvk.as_ref().unwrap().kind, "Deployment");
    }
    let inspection = inspect::inspect(file.as_slice()).unwrap();
    assert_eq!(inspection.kinds["apps/v1.Deployment"].lifecycles, 3);
    assert_eq!(inspection.objects, 3, "web, solo and old-job");
}

#[test]
fn events_out_of_order_are_sorted_stably() {
    let mut trace = sample();
    trace.events.insert(
        0,
        SkEvent {
            ts: T0 + 60,
            applied_objs: vec![pod("late")],
            deleted_objs: Vec::new(),
        },
    );
    let (file, conversion) = convert_ok(&trace);
    // The T0 event came after a T0 + 60 one.
    assert_eq!(conversion.reordered_events, 1);
    let events = read_trace(&file).unwrap().events;
    let order: Vec<_> = events
        .iter()
        .map(|event| {
            (
                event.timestamp_ms / 1000 - T0,
                event.applied[0].name.as_str(),
            )
        })
        .collect();
    // "late" came first among the T0 + 60 events in SimKube's list, and stays first.
    assert_eq!(order, [(0, "web"), (60, "late"), (60, "web")]);
}

#[test]
fn an_unresolvable_delete_names_the_event_and_object() {
    let mut trace = sample();
    trace.events[1].deleted_objs.push(name_only("ghost"));
    let reason = simkube_reason(convert(&encode(&trace), Vec::new(), "t"));
    assert!(
        reason.contains("event 1 (ts 1700000060): deleted object 2 (default/ghost)"),
        "{reason}"
    );
    assert!(reason.contains("not in the trace's index"), "{reason}");
}

#[test]
fn an_ambiguous_index_entry_falls_back_to_the_applied_object_or_fails() {
    let mut trace = sample();
    // Both a Service and the Deployment are named web; the Deployment was applied earlier.
    trace.index.insert(
        "v1.Service".to_owned(),
        BTreeMap::from([
            ("default/web".to_owned(), 1),
            ("default/both".to_owned(), 2),
        ]),
    );
    trace
        .index
        .get_mut("apps/v1.Deployment")
        .unwrap()
        .insert("default/both".to_owned(), 3);
    trace.events[1].deleted_objs.push(name_only("web"));
    let (file, _) = convert_ok(&trace);
    let events = read_trace(&file).unwrap().events;
    assert_eq!(
        events[1].deleted[2].gvk.as_ref().unwrap().kind,
        "Deployment"
    );

    trace.events[1].deleted_objs.push(name_only("both"));
    let reason = simkube_reason(convert(&encode(&trace), Vec::new(), "t"));
    assert!(reason.contains("several kinds"), "{reason}");
    assert!(reason.contains("v1.Service"), "{reason}");
}

#[test]
fn an_object_without_a_name_names_the_event() {
    let mut trace = sample();
    trace.events[1]
        .applied_objs
        .push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}));
    let reason = simkube_reason(convert(&encode(&trace), Vec::new(), "t"));
    assert!(
        reason.contains("event 1 (ts 1700000060): applied object 1 has no metadata.name"),
        "{reason}"
    );
}

#[test]
fn other_simkube_versions_are_refused_by_number() {
    for version in [1, 3] {
        let mut trace = sample();
        trace.version = version;
        let error = convert(&encode(&trace), Vec::new(), "t").unwrap_err();
        assert!(
            matches!(error, TraceError::SimkubeVersion { found } if found == version),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(&format!("version {version}")), "{message}");
        assert!(message.contains("only version 2"), "{message}");
    }
    // A future layout that would not decode as version 2 is still refused by its version.
    #[derive(Serialize)]
    struct Future {
        version: i64,
        events: String,
    }
    let future = rmp_serde::to_vec_named(&Future {
        version: 3,
        events: "elsewhere".to_owned(),
    })
    .unwrap();
    assert!(matches!(
        convert(&future, Vec::new(), "t"),
        Err(TraceError::SimkubeVersion { found: 3 })
    ));
}

#[test]
fn garbage_is_refused() {
    let valid = encode(&sample());
    let mut trailing = valid.clone();
    trailing.push(0xc0);
    let cases: [(&str, &[u8], &str); 6] = [
        ("empty", b"", "does not decode"),
        ("reserved marker", b"\xc1\xc1\xc1", "does not decode"),
        ("JSON", br#"{"version": 2}"#, "does not decode"),
        ("no version", b"\x81\xa6events\x90", "no version"),
        ("cut short", &valid[..valid.len() / 2], "does not decode"),
        ("trailing bytes", &trailing, "1 bytes follow the trace"),
    ];
    for (what, input, expected) in cases {
        let reason = simkube_reason(convert(input, Vec::new(), "t"));
        assert!(reason.contains(expected), "{what}: {reason}");
    }
}

#[test]
fn a_timestamp_out_of_range_is_refused_not_overflowed() {
    let mut trace = sample();
    trace.events[1].ts = i64::MAX;
    let reason = simkube_reason(convert(&encode(&trace), Vec::new(), "t"));
    assert!(reason.contains("out of range"), "{reason}");
    // Past 9999 without overflowing: still more than a trace can hold, so printed nowhere.
    let mut trace = sample();
    trace.events[1].ts = 253_402_300_800;
    let reason = simkube_reason(convert(&encode(&trace), Vec::new(), "t"));
    assert!(
        reason.contains("timestamp 253402300800 s is out of range (1970 to 9999)"),
        "{reason}"
    );
}

#[test]
fn secret_data_is_dropped_as_the_tracer_drops_it() {
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "namespace": "default",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration":
                    "{\"stringData\":{\"password\":\"hunter2\"}}",
                "team": "shop",
            },
        },
        "type": "Opaque",
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"password": "hunter2"},
    });
    // A kind of another group that happens to be named Secret is not a Secret.
    let other = json!({
        "apiVersion": "example.com/v1",
        "kind": "Secret",
        "metadata": {"name": "x", "namespace": "default"},
        "data": {"kept": "yes"},
    });
    let mut trace = sample();
    trace.events[0].applied_objs.push(secret.clone());
    trace.events[0].applied_objs.push(other.clone());
    trace.events[1].deleted_objs.push(secret);
    let (file, _) = convert_ok(&trace);
    let trace = read_trace(&file).unwrap();
    let applied = &trace.events[0].applied;
    let deleted = &trace.events[1].deleted;
    let json = |object: &pb::TraceObject| -> Value {
        serde_json::from_slice(&object.object_json).unwrap()
    };
    for converted in [json(&applied[2]), json(&deleted[2])] {
        assert_eq!(
            converted,
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db", "namespace": "default", "annotations": {"team": "shop"}},
                "type": "Opaque",
            })
        );
    }
    assert_eq!(json(&applied[3]), other);
    for event in &trace.events {
        for object in event.applied.iter().chain(&event.deleted) {
            let text = String::from_utf8_lossy(&object.object_json);
            assert!(
                !text.contains("hunter2") && !text.contains("aHVudGVyMg=="),
                "{text}"
            );
        }
    }
}
