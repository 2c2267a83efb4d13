//! SimKube's trace format 2 mirrored with serde, to build SimKube traces in tests, and a
//! sample trace.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Value, json};

#[derive(Serialize)]
pub struct SkTrace {
    pub version: i64,
    pub config: SkConfig,
    pub events: Vec<SkEvent>,
    pub index: BTreeMap<String, BTreeMap<String, u64>>,
    pub pod_lifecycles: HashMap<(String, String), HashMap<u64, Vec<SkLifecycle>>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkConfig {
    pub tracked_objects: BTreeMap<String, SkTracked>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkTracked {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_spec_template_paths: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track_lifecycle: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_owned: Option<bool>,
}

#[derive(Serialize)]
pub struct SkEvent {
    pub ts: i64,
    pub applied_objs: Vec<Value>,
    pub deleted_objs: Vec<Value>,
}

#[derive(Serialize)]
pub enum SkLifecycle {
    Empty,
    Running(i64),
    Finished(i64, i64),
}

pub const T0: i64 = 1_700_000_000;

pub fn deployment(name: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    })
}

pub fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {}})
}

pub fn name_only(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"}})
}

/// The trace the tests convert:
/// - event 0 (T0): web (Deployment) and solo (Pod) applied;
/// - event 1 (T0 + 60): old-job deleted by name only, found in the index as a Job;
///   solo deleted by name only, known from event 0; web scaled.
/// - lifecycles of web: hash 42 = Finished, Empty, Running; hash 7 = Running.
pub fn sample() -> SkTrace {
    let mut tracked = BTreeMap::new();
    tracked.insert(
        "apps/v1.Deployment".to_owned(),
        SkTracked {
            pod_spec_template_paths: Some(vec!["/spec/template".to_owned()]),
            track_lifecycle: Some(true),
            skip_owned: None,
        },
    );
    tracked.insert(
        "v1.Pod".to_owned(),
        SkTracked {
            pod_spec_template_paths: Some(vec![String::new()]),
            track_lifecycle: None,
            skip_owned: Some(true),
        },
    );
    tracked.insert(
        "batch/v1.Job".to_owned(),
        SkTracked {
            pod_spec_template_paths: None,
            track_lifecycle: None,
            skip_owned: None,
        },
    );
    let mut index = BTreeMap::new();
    index.insert(
        "apps/v1.Deployment".to_owned(),
        BTreeMap::from([("default/web".to_owned(), 11)]),
    );
    index.insert(
        "batch/v1.Job".to_owned(),
        BTreeMap::from([("default/old-job".to_owned(), 12)]),
    );
    let mut pod_lifecycles = HashMap::new();
    pod_lifecycles.insert(
        ("apps/v1.Deployment".to_owned(), "default/web".to_owned()),
        HashMap::from([
            (
                42u64,
                vec![
                    SkLifecycle::Finished(T0 + 1, T0 + 30),
                    SkLifecycle::Empty,
                    SkLifecycle::Running(T0 + 40),
                ],
            ),
            (7u64, vec![SkLifecycle::Running(T0 + 2)]),
        ]),
    );
    SkTrace {
        version: 2,
        config: SkConfig {
            tracked_objects: tracked,
        },
        events: vec![
            SkEvent {
                ts: T0,
                applied_objs: vec![deployment("web", 1), pod("solo")],
                deleted_objs: Vec::new(),
            },
            SkEvent {
                ts: T0 + 60,
                applied_objs: vec![deployment("web", 3)],
                deleted_objs: vec![name_only("old-job"), name_only("solo")],
            },
        ],
        index,
        pod_lifecycles,
    }
}

pub fn encode(trace: &SkTrace) -> Vec<u8> {
    rmp_serde::to_vec_named(trace).unwrap()
}
