//! An export that spills writes the bytes the in-memory cut wrote before it could spill. The
//! log is recorded through the recorder, as the watches feed it, and part of it is folded into
//! the checkpoint; the export sorts in small runs, so every sort spills and merges in several
//! rounds. No cluster needed.
//!
//! Cluster samples hold hash maps, which encode in a different order each time a sample is
//! decoded from the log, so two exports of the same window never had the same bytes once the
//! cluster was recorded. With the cluster recorded, the test compares records instead.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::{Record as TraceRecord, TraceReader, TraceWriter};
use ksim_tracer::{
    domain::{
        export::Window,
        filter::Filter,
        kinds::TrackedKind,
        recorder::{Observation, Recorder},
        sanitize::EnvRedaction,
    },
    exporter::{Export, Source},
    log::{Log, LogConfig, LogEntry, LogSnapshot, Retention},
    spill::Spill,
};
use pb::trace_record::Record;
use serde_json::{Value, json};

const T0: i64 = 1_700_000_000_000;
const STEP_MS: i64 = 100;
const STEPS: i64 = 3_000;

const DEPLOYMENT: usize = 0;
const REPLICA_SET: usize = 1;
const POD: usize = 2;
const CONFIG_MAP: usize = 3;
const CLUSTER_ROLE: usize = 4;
const NODE: usize = 5;

fn kinds(cluster: bool) -> Vec<TrackedKind> {
    let kind = |api_version: &str, kind: &str, paths: &[&str], track_lifecycles: bool| {
        TrackedKind {
            api_version: api_version.into(),
            kind: kind.into(),
            pod_template_paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            track_lifecycles,
            // Owned objects are recorded too, so the cut has some to leave out.
            skip_owned: false,
        }
    };
    let mut kinds = vec![
        kind("apps/v1", "Deployment", &["/spec/template"], true),
        kind("apps/v1", "ReplicaSet", &["/spec/template"], true),
        kind("v1", "Pod", &[""], true),
        kind("v1", "ConfigMap", &[], false),
        kind("rbac.authorization.k8s.io/v1", "ClusterRole", &[], false),
    ];
    if cluster {
        // Recording nodes records the cluster: node records and samples.
        kinds.push(kind("v1", "Node", &[], false));
    }
    kinds
}

fn owner(api_version: &str, kind: &str, name: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "controller": true}])
}

fn template(version: i64) -> Value {
    json!({"spec": {"containers": [{"name": "app", "image": format!("shop/app:{version}")}]}})
}

fn deployment(namespace: &str, name: &str, version: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"replicas": 3, "template": template(version)}})
}

fn replica_set(namespace: &str, deployment: &str, version: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("{deployment}-v{version}"), "namespace": namespace,
            "ownerReferences": owner("apps/v1", "Deployment", deployment)},
        "spec": {"template": template(version)}})
}

/// A pod of a ReplicaSet, or a bare one (`owner` None), in a phase.
fn pod(namespace: &str, name: &str, owner_rs: Option<&str>, version: i64, phase: &str) -> Value {
    let mut metadata = json!({"name": name, "namespace": namespace, "labels": {"app": "shop"}});
    if let Some(rs) = owner_rs {
        metadata["ownerReferences"] = owner("apps/v1", "ReplicaSet", rs);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": template(version)["spec"], "status": {"phase": phase}})
}

fn config_map(namespace: &str, name: &str, owners: Option<Value>) -> Value {
    let mut metadata = json!({"name": name, "namespace": namespace, "labels": {"tier": "config"}});
    if let Some(owners) = owners {
        metadata["ownerReferences"] = owners;
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": name}})
}

fn cluster_role(name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": []})
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

fn applied(kind: usize, object: Value) -> Observation {
    Observation::Applied {
        kind,
        object,
        listed: false,
    }
}

fn deleted(kind: usize, object: Value) -> Observation {
    Observation::Deleted { kind, object }
}

/// A pod-churning cluster, step by step: three Deployments rolling out new versions (their
/// ReplicaSets and pods owned in turn), bare pods, pods of an excluded namespace, pod names
/// reused after a delete, ConfigMaps owned by Deployments or by cluster-scoped ClusterRoles,
/// nodes coming and going.
fn observations(step: i64, cluster: bool) -> Vec<Observation> {
    let mut out = Vec::new();
    let namespaces = ["shop", "team-a", "kube-system"];
    let deployments = ["web", "api", "worker"];
    let rollout = |d: i64| (step + d * 70) / 400;
    if step % 200 < 3 {
        let d = step % 200;
        let (namespace, name) = (namespaces[(d % 2) as usize], deployments[d as usize]);
        if step % 1_000 == 600 + d {
            out.push(deleted(DEPLOYMENT, deployment(namespace, name, rollout(d))));
        } else {
            out.push(applied(DEPLOYMENT, deployment(namespace, name, rollout(d))));
            out.push(applied(
                REPLICA_SET,
                replica_set(namespace, name, rollout(d)),
            ));
        }
    }
    // A pod starts every step: made at `i`, running at `i + 3`, ending at `i + 40`,
    // deleted at `i + 45`.
    let pod_at = |i: i64, phase: &str| {
        let d = i % 3;
        let namespace = if i % 11 == 0 {
            "kube-system"
        } else {
            namespaces[(d % 2) as usize]
        };
        let name = if i % 13 == 0 {
            format!("stable-{}", i % 2)
        } else {
            format!("pod-{i}")
        };
        let rs = format!("{}-v{}", deployments[d as usize], rollout(d));
        let owner_rs = (i % 7 != 0).then_some(rs.as_str());
        pod(namespace, &name, owner_rs, rollout(d), phase)
    };
    out.push(applied(POD, pod_at(step, "Pending")));
    if step >= 3 {
        out.push(applied(POD, pod_at(step - 3, "Running")));
    }
    if step >= 40 {
        let phase = if step % 5 == 0 { "Failed" } else { "Succeeded" };
        out.push(applied(POD, pod_at(step - 40, phase)));
    }
    if step >= 45 && step % 4 != 0 {
        out.push(deleted(POD, pod_at(step - 45, "Succeeded")));
    }
    if step % 3 == 0 {
        let i = step / 3;
        let owners = match i % 3 {
            0 => Some(owner(
                "apps/v1",
                "Deployment",
                deployments[(i % 3) as usize],
            )),
            1 => Some(owner(
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                &format!("role-{}", i % 4),
            )),
            _ => None,
        };
        let namespace = namespaces[(i % 3) as usize];
        out.push(applied(
            CONFIG_MAP,
            config_map(namespace, &format!("cm-{}", i % 50), owners.clone()),
        ));
        if i % 5 == 0 {
            out.push(deleted(
                CONFIG_MAP,
                config_map(namespace, &format!("cm-{}", (i + 25) % 50), owners),
            ));
        }
    }
    if step % 150 == 0 {
        let role = format!("role-{}", (step / 150) % 4);
        if step % 600 == 450 {
            out.push(deleted(CLUSTER_ROLE, cluster_role(&role)));
        } else {
            out.push(applied(CLUSTER_ROLE, cluster_role(&role)));
        }
    }
    if cluster && step % 100 == 50 {
        let name = format!("node-{}", (step / 100) % 5);
        if step % 500 == 250 {
            out.push(deleted(NODE, node(&name)));
        } else {
            out.push(applied(NODE, node(&name)));
        }
    }
    out
}

/// Records the workload into a log, then folds its first half into the checkpoint.
fn record(dir: &std::path::Path, cluster: bool) -> Log {
    let mut config = LogConfig::new(dir.join("log"));
    config.segment_max_bytes = 32 * 1024;
    config.retention = Retention {
        max_age: Some(Duration::from_secs(60)),
        max_bytes: None,
    };
    let (mut log, _) = Log::open(config).unwrap();
    let mut recorder = Recorder::new(kinds(cluster), EnvRedaction::default());
    for step in 0..STEPS {
        let now_ms = T0 + step * STEP_MS;
        let mut recorded: Vec<_> = observations(step, cluster)
            .into_iter()
            .flat_map(|o| recorder.observe(o, now_ms))
            .collect();
        recorded.extend(recorder.sample(now_ms));
        let entries: Vec<LogEntry> = recorded
            .into_iter()
            .map(|r| LogEntry {
                timestamp_ms: r.timestamp_ms,
                record: pb::TraceRecord {
                    record: Some(r.record),
                },
            })
            .collect();
        log.append(&entries).unwrap();
    }
    log.sync().unwrap();
    // Sealed segments older than a minute before this are folded away: the first half.
    let folded = log.maintain(T0 + STEPS / 2 * STEP_MS + 60_000).unwrap();
    assert!(folded.dropped_segments > 0, "nothing was folded");
    log
}

fn header() -> pb::TraceHeader {
    pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        created_by: "export test".into(),
        ..Default::default()
    }
}

/// The export as the service runs it, sorting in runs of `run_len` items.
fn spilled_export(
    snapshot: &LogSnapshot,
    window: Window,
    filter: &Filter,
    dir: &std::path::Path,
    run_len: usize,
) -> Vec<u8> {
    let (chunks, mut receiver) =
        tokio::sync::mpsc::channel::<Result<pb::ExportResponse, tonic::Status>>(4);
    let drain = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        while let Some(chunk) = receiver.blocking_recv() {
            bytes.extend(chunk.unwrap().data);
        }
        bytes
    });
    Export {
        source: Source::Log(snapshot.clone()),
        window,
        filter: filter.clone(),
        header: header(),
        chunk_bytes: 4096,
        spill: Spill::new(dir).run_len(run_len),
    }
    .run(chunks)
    .unwrap();
    drain.join().unwrap()
}

fn filter(exclude_namespace: &str) -> Filter {
    Filter::from_proto(Some(&pb::TraceFilter {
        exclude_namespaces: vec![exclude_namespace.into()],
        ..Default::default()
    }))
    .unwrap()
}

#[test]
fn a_spilling_export_writes_the_bytes_of_the_in_memory_cut() {
    check_exports(false, |got, expected| {
        (got != expected).then(|| first_difference(got, expected))
    });
}

#[test]
fn with_the_cluster_recorded_a_spilling_export_has_the_records_of_the_in_memory_cut() {
    check_exports(true, |got, expected| {
        (records(got) != records(expected)).then(|| first_difference(got, expected))
    });
}

/// Exports windows of the workload's log both ways; `differ` says how the outputs differ, if
/// they do.
fn check_exports(cluster: bool, differ: impl Fn(&[u8], &[u8]) -> Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = record(dir.path(), cluster);
    let snapshot = log.snapshot().unwrap();
    let spill_dir = dir.path().join("spill");
    std::fs::create_dir(&spill_dir).unwrap();
    let cases = [
        (
            "the whole log",
            // As wide as a trace can hold: the format refuses times before 1970 and after 9999.
            Window::new(0, ksim_trace::time::MAX_MS).unwrap(),
            Filter::default(),
        ),
        (
            "a window that starts before the fold",
            Window::new(T0 + 50_000, T0 + 250_000).unwrap(),
            filter("kube-system"),
        ),
        (
            "a window after it",
            Window::new(T0 + 200_000, T0 + 260_000).unwrap(),
            filter("team-a"),
        ),
    ];
    for (case, window, filter) in cases {
        let (expected, exercised) = reference::export(&snapshot, window, &filter, &header());
        assert!(
            exercised.lifetimes > 100
                && exercised.merged_lifetimes > 0
                && exercised.owned_in_window > 0
                && exercised.owned_deletes > 0
                && exercised.owned_at_start > 0,
            "{case}: the workload does not reach every rule: {exercised:?}"
        );
        // Runs of 3 make many runs and merge rounds; in runs of 256 a pod's lifetime records
        // often meet in one run, where the later replaces the earlier.
        for run_len in [3, 256] {
            let got = spilled_export(&snapshot, window, &filter, &spill_dir, run_len);
            if let Some(difference) = differ(&got, &expected) {
                panic!("{case}, runs of {run_len}: {difference}");
            }
            assert_eq!(
                std::fs::read_dir(&spill_dir).unwrap().count(),
                0,
                "{case}: nothing is left in the spill directory"
            );
        }
    }
}

fn records(trace: &[u8]) -> (Vec<TraceRecord>, Option<pb::TraceTrailer>) {
    let mut reader = TraceReader::new(trace).unwrap();
    let mut records = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        records.push(record);
    }
    (records, reader.trailer().cloned())
}

/// Where two traces part, record by record, for the failure message.
fn first_difference(got: &[u8], expected: &[u8]) -> String {
    let shown = |trace| -> Vec<String> {
        let (records, trailer) = records(trace);
        records
            .iter()
            .map(|r| format!("{r:?}"))
            .chain([format!("{trailer:?}")])
            .collect()
    };
    let (got, expected) = (shown(got), shown(expected));
    let at = got
        .iter()
        .zip(&expected)
        .position(|(g, e)| g != e)
        .unwrap_or(got.len().min(expected.len()));
    format!(
        "{} records, expected {}; record {at} is\n{:.2000}\nexpected\n{:.2000}",
        got.len(),
        expected.len(),
        got.get(at).map_or("(none)", String::as_str),
        expected.get(at).map_or("(none)", String::as_str),
    )
}

/// The window cut as it was before it could spill: everything held in memory, in hash maps.
/// Kept here as the expected output, written independently of the domain's cut.
mod reference {
    use ksim_tracer::domain::key::{ObjectKey, owner_references};

    use super::*;

    /// How many times the cut applied its rules, so the test knows the workload reaches them.
    #[derive(Debug, Default)]
    pub struct Exercised {
        pub lifetimes: usize,
        /// Lifetime records replaced by a later record of the same pod.
        pub merged_lifetimes: usize,
        pub owned_at_start: usize,
        pub owned_in_window: usize,
        pub owned_deletes: usize,
    }

    fn lifetime_owner(l: &pb::PodLifecycle) -> ObjectKey {
        let gvk = l.owner_gvk.clone().unwrap_or_default();
        ObjectKey {
            group: gvk.group,
            kind: gvk.kind,
            namespace: l.owner_namespace.clone(),
            name: l.owner_name.clone(),
        }
    }

    fn owned_by(exported: &HashSet<ObjectKey>, object: &pb::TraceObject) -> bool {
        let Ok(json) = serde_json::from_slice::<Value>(&object.object_json) else {
            return false;
        };
        owner_references(&json).iter().any(|reference| {
            ObjectKey::owner(reference, &object.namespace).is_some_and(|owner| {
                exported.contains(&owner) || exported.contains(&owner.cluster_scoped())
            })
        })
    }

    pub fn export(
        snapshot: &LogSnapshot,
        window: Window,
        filter: &Filter,
        header: &pb::TraceHeader,
    ) -> (Vec<u8>, Exercised) {
        let mut exercised = Exercised::default();
        let in_window = |ts: i64| ts >= window.start_ms && ts < window.end_ms;

        // The scan: the state at the window start, what the window exports, the lifetimes.
        let base = snapshot.base().unwrap();
        let mut state: BTreeMap<ObjectKey, pb::TraceObject> = base
            .objects
            .into_iter()
            .map(|o| (ObjectKey::of(&o), o))
            .collect();
        let mut exported = HashSet::new();
        let mut lifetimes: HashMap<(ObjectKey, String), pb::PodLifecycle> = HashMap::new();
        let mut add_lifetime = |l: pb::PodLifecycle, exercised: &mut Exercised| {
            if lifetimes
                .insert((lifetime_owner(&l), l.pod_name.clone()), l)
                .is_some()
            {
                exercised.merged_lifetimes += 1;
            }
        };
        for l in base.open_lifecycles {
            add_lifetime(l, &mut exercised);
        }
        let mut sample = base.sample;
        let mut nodes: BTreeMap<String, pb::RecordedNode> = base
            .nodes
            .into_iter()
            .map(|n| (n.name.clone(), n))
            .collect();
        for entry in snapshot.entries(i64::MIN).unwrap() {
            let entry = entry.unwrap();
            match entry.record.record.unwrap() {
                Record::Event(e) if e.timestamp_ms < window.start_ms => {
                    for o in e.applied {
                        state.insert(ObjectKey::of(&o), o);
                    }
                    for o in e.deleted {
                        state.remove(&ObjectKey::of(&o));
                    }
                }
                Record::Event(e) if e.timestamp_ms < window.end_ms => {
                    for o in e.applied.iter().chain(&e.deleted) {
                        if filter.keeps(o) {
                            exported.insert(ObjectKey::of(o));
                        }
                    }
                }
                Record::Lifecycle(l) if entry.timestamp_ms < window.end_ms => {
                    add_lifetime(l, &mut exercised)
                }
                Record::Sample(s) if s.timestamp_ms < window.start_ms => sample = Some(s),
                Record::Node(n) if n.timestamp_ms < window.start_ms => {
                    if n.deleted_ms == 0 {
                        nodes.insert(n.name.clone(), n);
                    } else {
                        nodes.remove(&n.name);
                    }
                }
                _ => {}
            }
        }
        state.retain(|_, o| filter.keeps(o));
        exported.extend(state.keys().cloned());

        let mut kept: Vec<(ObjectKey, pb::PodLifecycle)> = lifetimes
            .into_iter()
            .filter(|((owner, _), l)| {
                exported.contains(owner)
                    && l.start_ms < window.end_ms
                    && (l.end_ms == 0 || l.end_ms >= window.start_ms)
            })
            .map(|((owner, _), mut l)| {
                if l.end_ms == 0 || l.end_ms >= window.end_ms {
                    l.end_ms = 0;
                    l.outcome = pb::PodOutcome::Running.into();
                }
                (owner, l)
            })
            .collect();
        kept.sort_by(|(oa, a), (ob, b)| {
            (oa, a.pod_spec_hash, a.start_ms, &a.pod_name).cmp(&(
                ob,
                b.pod_spec_hash,
                b.start_ms,
                &b.pod_name,
            ))
        });
        let mut launch: HashMap<(ObjectKey, u64), u32> = HashMap::new();
        let lifecycles: Vec<pb::PodLifecycle> = kept
            .into_iter()
            .map(|(owner, mut l)| {
                let next = launch.entry((owner, l.pod_spec_hash)).or_default();
                l.launch_index = *next;
                *next += 1;
                l
            })
            .collect();
        exercised.lifetimes = lifecycles.len();

        let initial: Vec<pb::TraceObject> = state
            .into_values()
            .filter(|o| {
                let owned = owned_by(&exported, o);
                exercised.owned_at_start += usize::from(owned);
                !owned
            })
            .collect();

        // The cut, written as the exporter writes it.
        let mut out = Vec::new();
        let mut writer = TraceWriter::new(&mut out, header).unwrap();
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: window.start_ms,
                applied: initial,
                deleted: Vec::new(),
            })
            .unwrap();
        if let Some(mut s) = sample {
            s.timestamp_ms = window.start_ms;
            s.pods
                .retain(|namespace, _| filter.keeps_namespace(namespace));
            writer.write_sample(&s).unwrap();
        }
        for mut n in nodes.into_values() {
            n.timestamp_ms = window.start_ms;
            writer.write_node(&n).unwrap();
        }
        let mut dropped = HashSet::new();
        for entry in snapshot.entries(window.start_ms).unwrap() {
            match entry.unwrap().record.record.unwrap() {
                Record::Event(e) if in_window(e.timestamp_ms) => {
                    let mut applied = Vec::new();
                    for o in e.applied {
                        if !filter.keeps(&o) {
                            continue;
                        }
                        if owned_by(&exported, &o) {
                            exercised.owned_in_window += 1;
                            dropped.insert(ObjectKey::of(&o));
                        } else {
                            applied.push(o);
                        }
                    }
                    let deleted: Vec<_> = e
                        .deleted
                        .into_iter()
                        .filter(|o| {
                            let gone_with_apply = dropped.contains(&ObjectKey::of(o));
                            exercised.owned_deletes +=
                                usize::from(filter.keeps(o) && gone_with_apply);
                            filter.keeps(o) && !gone_with_apply
                        })
                        .collect();
                    if !applied.is_empty() || !deleted.is_empty() {
                        writer
                            .write_event(&pb::TraceEvent {
                                timestamp_ms: e.timestamp_ms,
                                applied,
                                deleted,
                            })
                            .unwrap();
                    }
                }
                Record::Sample(mut s) if in_window(s.timestamp_ms) => {
                    s.pods
                        .retain(|namespace, _| filter.keeps_namespace(namespace));
                    writer.write_sample(&s).unwrap();
                }
                Record::Node(n) if in_window(n.timestamp_ms) => writer.write_node(&n).unwrap(),
                _ => {}
            }
        }
        for l in &lifecycles {
            writer.write_lifecycle(l).unwrap();
        }
        writer.finish().unwrap();
        (out, exercised)
    }
}
