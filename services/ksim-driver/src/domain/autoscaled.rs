//! Who decides the replica counts of workloads a HorizontalPodAutoscaler scales: the recording,
//! or the simulated cluster's own HPAs acting on the replayed usage.
//!
//! Pure: [`resolve`] picks the source for a trace and [`apply`] edits a plan for it.
//!
//! With the recording deciding, HPAs are not applied: a live HPA would fight every replayed
//! `spec.replicas`. With the HPAs deciding, a scaled workload keeps its recorded count when it
//! is created, and that count is then handed to a second field manager
//! ([`REPLICAS_MANAGER`]), so the driver's later applies can leave `spec.replicas` out
//! without the apiserver removing it (server-side apply drops a field its only manager stops
//! applying, and the workload would fall back to one replica).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::Trace;
use serde_json::Value;

use super::hpa::is_hpa;
use super::plan::{Op, Plan};
use super::report::ReplicaPoint;
use super::{Gvk, Target};

/// The field manager that holds a scaled workload's `spec.replicas` once the HPA decides it.
pub const REPLICAS_MANAGER: &str = "ksim-hpa-handover";

/// Who decides replica counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSource {
    Recorded,
    Hpa,
}

impl ReplicaSource {
    /// As reports and the CLI name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Hpa => "hpa",
        }
    }

    pub fn to_proto(self) -> pb::ReplicaSource {
        match self {
            Self::Recorded => pb::ReplicaSource::Recorded,
            Self::Hpa => pb::ReplicaSource::Hpa,
        }
    }
}

/// The source a run uses, and why, in the report's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub source: ReplicaSource,
    pub reason: String,
}

/// The run's source: as given, else the HPAs where they have usage to act on.
pub fn resolve(given: pb::ReplicaSource, trace: &Trace) -> Resolved {
    let resolved = |source, reason: &str| Resolved {
        source,
        reason: reason.to_owned(),
    };
    match given {
        pb::ReplicaSource::Recorded => return resolved(ReplicaSource::Recorded, "given"),
        pb::ReplicaSource::Hpa => return resolved(ReplicaSource::Hpa, "given"),
        pb::ReplicaSource::Unspecified => {}
    }
    let holds_hpas = trace
        .events
        .iter()
        .flat_map(|event| &event.applied)
        .any(|object| {
            object
                .gvk
                .as_ref()
                .is_some_and(|gvk| is_hpa(&Gvk::from(gvk)))
        });
    match (holds_hpas, !trace.usage.is_empty()) {
        (true, true) => resolved(
            ReplicaSource::Hpa,
            "default: the trace holds usage and HPAs",
        ),
        (true, false) => resolved(
            ReplicaSource::Recorded,
            "default: the trace holds HPAs but no usage for them to act on",
        ),
        (false, _) => resolved(ReplicaSource::Recorded, "default: the trace holds no HPA"),
    }
}

/// What [`apply`] changed in a plan, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// HPAs the plan applies (distinct namespace and name).
    pub hpas: u64,
    /// Workloads those HPAs scale.
    pub scaled_workloads: u64,
    /// Recorded `spec.replicas` changes left out (HPA), or HPA operations left out (recorded).
    pub not_replayed: u64,
}

/// A workload an HPA scales: its group, kind, simulated namespace and name.
type Scaled = (String, String, Option<String>, String);

/// The plan's HPAs (namespace and name) and the workloads they scale.
fn hpas_and_scaled(plan: &Plan) -> (HashSet<(Option<String>, String)>, HashSet<Scaled>) {
    let mut hpas = HashSet::new();
    let mut scaled = HashSet::new();
    for op in plan.steps.iter().flat_map(|step| &step.ops) {
        if let Op::Apply { target, object } = op
            && is_hpa(&target.gvk)
        {
            hpas.insert((target.namespace.clone(), target.name.clone()));
            if let Some(workload) = scale_target(target.namespace.as_ref(), object) {
                scaled.insert(workload);
            }
        }
    }
    (hpas, scaled)
}

/// A scaled workload and its recorded `spec.replicas` over the recorded window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedReplicas {
    /// As the plan applies it (namespace prefixed).
    pub target: Target,
    /// Offsets since the window's start (recorded time); deleted is 0. Only changes.
    pub points: Vec<ReplicaPoint>,
}

/// Each workload the plan's HPAs scale, with its recorded counts, in target order. Read before
/// [`apply`], which takes recorded counts out of the plan.
pub fn recorded_replicas(plan: &Plan) -> Vec<RecordedReplicas> {
    let (_, scaled) = hpas_and_scaled(plan);
    let mut series: BTreeMap<Target, Vec<(Duration, u64)>> = BTreeMap::new();
    for step in &plan.steps {
        for op in &step.ops {
            let (target, replicas) = match op {
                Op::Apply { target, object } => (
                    target,
                    // An apply without it keeps the count (the apiserver defaults it on
                    // creation, so a recorded object holds it).
                    match object.pointer("/spec/replicas").and_then(Value::as_u64) {
                        Some(replicas) => replicas,
                        None => continue,
                    },
                ),
                Op::Delete { target } => (target, 0),
                _ => continue,
            };
            let key = key_of(&target.gvk, target.namespace.as_ref(), &target.name);
            if scaled.contains(&key) {
                series
                    .entry(target.clone())
                    .or_default()
                    .push((step.trace_offset, replicas));
            }
        }
    }
    // A workload the HPAs name but the trace never applies is left out: there is nothing to
    // compare.
    series
        .into_iter()
        .map(|(target, changes)| RecordedReplicas {
            target,
            points: points(&changes),
        })
        .collect()
}

/// A step function from observed values in time order: a value the same as the one before
/// is no change and is left out.
pub fn points(changes: &[(Duration, u64)]) -> Vec<ReplicaPoint> {
    let mut points: Vec<ReplicaPoint> = Vec::new();
    for &(offset, replicas) in changes {
        if points.last().is_some_and(|last| last.replicas == replicas) {
            continue;
        }
        points.push(ReplicaPoint { offset, replicas });
    }
    points
}

/// Edits `plan` so that `source` decides the replica counts of the workloads its HPAs scale.
pub fn apply(plan: &mut Plan, source: ReplicaSource) -> Applied {
    let (hpas, scaled) = hpas_and_scaled(plan);
    let mut applied = Applied {
        hpas: count(hpas.len()),
        scaled_workloads: count(scaled.len()),
        not_replayed: 0,
    };
    match source {
        ReplicaSource::Recorded => {
            for step in &mut plan.steps {
                let before = step.ops.len();
                step.ops.retain(|op| match op {
                    Op::Apply { target, .. } | Op::Delete { target } => !is_hpa(&target.gvk),
                    _ => true,
                });
                applied.not_replayed += count(before - step.ops.len());
            }
        }
        ReplicaSource::Hpa => {
            // The count last applied to each live scaled workload: it is created with its
            // recorded count, and a recorded change after that is the HPA's to make.
            let mut live: HashMap<Scaled, Option<Value>> = HashMap::new();
            for step in &mut plan.steps {
                let mut ops = Vec::with_capacity(step.ops.len());
                for mut op in std::mem::take(&mut step.ops) {
                    let mut hand_over = None;
                    match &mut op {
                        Op::Apply { target, object } => {
                            let key = key_of(&target.gvk, target.namespace.as_ref(), &target.name);
                            if scaled.contains(&key) {
                                match live.get(&key) {
                                    None => {
                                        let replicas = object.pointer("/spec/replicas").cloned();
                                        hand_over = replicas.as_ref().and_then(Value::as_i64).map(
                                            |replicas| Op::HandOver {
                                                target: target.clone(),
                                                replicas,
                                            },
                                        );
                                        live.insert(key, replicas);
                                    }
                                    Some(last) => {
                                        let replicas = object
                                            .pointer_mut("/spec")
                                            .and_then(Value::as_object_mut)
                                            .and_then(|spec| spec.remove("replicas"));
                                        if replicas.is_some() && replicas != *last {
                                            applied.not_replayed += 1;
                                            live.insert(key, replicas);
                                        }
                                    }
                                }
                            }
                        }
                        Op::Delete { target } => {
                            live.remove(&key_of(
                                &target.gvk,
                                target.namespace.as_ref(),
                                &target.name,
                            ));
                        }
                        _ => {}
                    }
                    ops.push(op);
                    ops.extend(hand_over);
                }
                step.ops = ops;
            }
        }
    }
    applied
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn key_of(gvk: &Gvk, namespace: Option<&String>, name: &str) -> Scaled {
    (
        gvk.group.clone(),
        gvk.kind.clone(),
        namespace.cloned(),
        name.to_owned(),
    )
}

/// The workload an HPA object names, in the HPA's namespace.
fn scale_target(namespace: Option<&String>, hpa: &Value) -> Option<Scaled> {
    let reference = hpa.pointer("/spec/scaleTargetRef")?;
    let kind = reference.get("kind")?.as_str()?;
    let name = reference.get("name")?.as_str()?;
    let api_version = reference
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    // "apps/v1" is group "apps"; "v1" is the core group.
    let group = api_version
        .rsplit_once('/')
        .map_or("", |(group, _version)| group);
    Some((
        group.to_owned(),
        kind.to_owned(),
        namespace.cloned(),
        name.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ksim_trace::pb as trace_pb;
    use serde_json::json;

    use super::*;
    use crate::domain::Target;
    use crate::domain::plan::{Step, StepKind};

    fn gvk(api_version: &str, kind: &str) -> Gvk {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Gvk::new(group, version, kind)
    }

    fn target(api_version: &str, kind: &str, name: &str) -> Target {
        Target {
            gvk: gvk(api_version, kind),
            namespace: Some("sim-shop".to_owned()),
            name: name.to_owned(),
        }
    }

    fn deployment(name: &str, replicas: i64) -> Op {
        Op::Apply {
            target: target("apps/v1", "Deployment", name),
            object: json!({"spec": {"replicas": replicas, "template": {}}}),
        }
    }

    fn hpa(name: &str, scales: &str) -> Op {
        Op::Apply {
            target: target("autoscaling/v2", "HorizontalPodAutoscaler", name),
            object: json!({"spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": scales},
                "minReplicas": 1,
                "maxReplicas": 10,
            }}),
        }
    }

    fn delete(name: &str) -> Op {
        Op::Delete {
            target: target("apps/v1", "Deployment", name),
        }
    }

    fn plan_of(steps: Vec<Vec<Op>>) -> Plan {
        Plan {
            namespaces: Default::default(),
            kinds: Default::default(),
            steps: steps
                .into_iter()
                .zip(0u64..)
                .map(|(ops, index)| Step {
                    at: Duration::from_secs(index),
                    event_index: index,
                    trace_offset: Duration::from_secs(index),
                    ops,
                    kind: StepKind::Event,
                })
                .collect(),
            end: Duration::from_secs(60),
            events_total: 0,
            cron_runs: 0,
            observed_only: 0,
        }
    }

    /// Each step's ops as "verb name replicas" lines.
    fn described(plan: &Plan) -> Vec<Vec<String>> {
        plan.steps
            .iter()
            .map(|step| {
                step.ops
                    .iter()
                    .map(|op| match op {
                        Op::Apply { target, object } => format!(
                            "apply {} {}",
                            target.name,
                            object
                                .pointer("/spec/replicas")
                                .map_or("-".to_owned(), Value::to_string)
                        ),
                        Op::HandOver { target, replicas } => {
                            format!("hand over {} {replicas}", target.name)
                        }
                        Op::Delete { target } => format!("delete {}", target.name),
                        other => format!("{other:?}"),
                    })
                    .collect()
            })
            .collect()
    }

    fn scaled_shop() -> Plan {
        plan_of(vec![
            vec![deployment("web", 3), deployment("db", 1), hpa("web", "web")],
            vec![deployment("web", 5), deployment("db", 2)],
            vec![deployment("web", 5)],
            vec![delete("web")],
            vec![deployment("web", 2)],
        ])
    }

    #[test]
    fn recorded_replicas_follow_the_scaled_workloads_changes_only() {
        let recorded = recorded_replicas(&scaled_shop());
        // db has no HPA; web's repeated 5 is no change; its delete is 0.
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].target.name, "web");
        let series: Vec<_> = recorded[0]
            .points
            .iter()
            .map(|point| (point.offset.as_secs(), point.replicas))
            .collect();
        assert_eq!(series, [(0, 3), (1, 5), (3, 0), (4, 2)]);
    }

    #[test]
    fn points_leave_out_values_that_do_not_change() {
        let at = Duration::from_millis;
        let folded = points(&[(at(0), 2), (at(10), 2), (at(20), 4), (at(30), 2)]);
        let offsets: Vec<_> = folded.iter().map(|point| point.offset).collect();
        assert_eq!(offsets, [at(0), at(20), at(30)]);
        assert!(points(&[]).is_empty());
    }

    #[test]
    fn with_hpas_deciding_a_scaled_workload_is_created_as_recorded_then_left_to_them() {
        let mut plan = scaled_shop();
        let applied = apply(&mut plan, ReplicaSource::Hpa);
        assert_eq!(
            described(&plan),
            [
                vec![
                    "apply web 3",
                    "hand over web 3",
                    "apply db 1",
                    "apply web -"
                ],
                vec!["apply web -", "apply db 2"],
                vec!["apply web -"],
                vec!["delete web"],
                vec!["apply web 2", "hand over web 2"],
            ]
        );
        // 3 -> 5 is left to the HPA; 5 again is no change; a re-creation is not a change.
        assert_eq!(
            applied,
            Applied {
                hpas: 1,
                scaled_workloads: 1,
                not_replayed: 1,
            }
        );
    }

    #[test]
    fn with_the_recording_deciding_hpas_are_not_applied_and_counts_replay() {
        let mut plan = scaled_shop();
        let applied = apply(&mut plan, ReplicaSource::Recorded);
        assert_eq!(
            described(&plan),
            [
                vec!["apply web 3", "apply db 1"],
                vec!["apply web 5", "apply db 2"],
                vec!["apply web 5"],
                vec!["delete web"],
                vec!["apply web 2"],
            ]
        );
        assert_eq!(applied.not_replayed, 1);
        assert_eq!((applied.hpas, applied.scaled_workloads), (1, 1));
    }

    #[test]
    fn an_hpa_scales_only_the_kind_and_group_it_names() {
        let statefulset = Op::Apply {
            target: target("apps/v1", "StatefulSet", "web"),
            object: json!({"spec": {"replicas": 4}}),
        };
        let mut plan = plan_of(vec![
            vec![hpa("web", "web"), statefulset.clone()],
            vec![statefulset],
        ]);
        apply(&mut plan, ReplicaSource::Hpa);
        assert_eq!(
            described(&plan),
            [vec!["apply web -", "apply web 4"], vec!["apply web 4"]]
        );
    }

    fn trace(hpas: bool, usage: bool) -> Trace {
        let object = |api_version: &str, kind: &str| {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            trace_pb::TraceObject {
                gvk: Some(trace_pb::GroupVersionKind {
                    group: group.to_owned(),
                    version: version.to_owned(),
                    kind: kind.to_owned(),
                }),
                namespace: "shop".to_owned(),
                name: "web".to_owned(),
                object_json: b"{}".to_vec(),
            }
        };
        let mut applied = vec![object("apps/v1", "Deployment")];
        if hpas {
            applied.push(object("autoscaling/v2", "HorizontalPodAutoscaler"));
        }
        Trace {
            header: Default::default(),
            events: vec![trace_pb::TraceEvent {
                timestamp_ms: 0,
                applied,
                deleted: Vec::new(),
            }],
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            usage: if usage {
                vec![trace_pb::UsageSample::default()]
            } else {
                Vec::new()
            },
            trailer: Default::default(),
        }
    }

    #[test]
    fn the_hpas_decide_by_default_only_where_there_is_usage_for_them() {
        let unspecified = pb::ReplicaSource::Unspecified;
        let cases = [
            (
                true,
                true,
                ReplicaSource::Hpa,
                "default: the trace holds usage and HPAs",
            ),
            (
                true,
                false,
                ReplicaSource::Recorded,
                "default: the trace holds HPAs but no usage for them to act on",
            ),
            (
                false,
                true,
                ReplicaSource::Recorded,
                "default: the trace holds no HPA",
            ),
        ];
        for (hpas, usage, source, reason) in cases {
            assert_eq!(
                resolve(unspecified, &trace(hpas, usage)),
                Resolved {
                    source,
                    reason: reason.to_owned(),
                },
                "hpas {hpas}, usage {usage}"
            );
        }
        let given = resolve(pb::ReplicaSource::Recorded, &trace(true, true));
        assert_eq!(
            (given.source, given.reason.as_str()),
            (ReplicaSource::Recorded, "given")
        );
        let given = resolve(pb::ReplicaSource::Hpa, &trace(false, false));
        assert_eq!(given.source, ReplicaSource::Hpa);
    }
}
