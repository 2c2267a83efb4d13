//! The recorded cluster a trace holds: as the report compares it with the simulated one (Ready
//! nodes per group and pods of the namespaces the trace replays, from the window's start), and
//! how it ran cluster-autoscaler.

use std::collections::BTreeSet;
use std::time::Duration;

use ksim_experiment::autoscaler::recorded::flags_in_deployment;
use ksim_proto::ksim::env::v1 as env;
use ksim_trace::{Trace, pb};

use super::plan::window_start_ms;
use super::report::{ClusterState, RecordedState};

/// The trace's samples of the recorded cluster, offsets from the window start (samples from
/// before it, such as the state an export puts first, count from 0); `None` when the trace
/// has none, e.g. a SimKube trace.
pub fn recorded_states(trace: &Trace) -> Option<Vec<RecordedState>> {
    if trace.samples.is_empty() {
        return None;
    }
    let start_ms = window_start_ms(trace);
    let namespaces = replayed_namespaces(trace);
    Some(
        trace
            .samples
            .iter()
            .map(|sample| RecordedState {
                offset: Duration::from_millis(
                    u64::try_from(sample.timestamp_ms.saturating_sub(start_ms)).unwrap_or(0),
                ),
                state: ClusterState {
                    ready_nodes: sample
                        .ready_nodes
                        .iter()
                        .map(|(group, nodes)| (group.clone(), u64::from(*nodes)))
                        .collect(),
                    pods_running: pods(sample, &namespaces, |counts| counts.running),
                    pods_pending: pods(sample, &namespaces, |counts| counts.pending),
                },
            })
            .collect(),
    )
}

/// Per recorded pod created inside the window: its creation to its first container's start,
/// recorded time, what the report holds the simulated pods' pending time against; `None` when
/// no lifecycle records a creation (a trace recorded before they were kept, or SimKube's). A
/// pod created before the window is left out: its replayed twin is created at the start.
/// Creation times are whole seconds, so one in the window's first second counts from it.
pub fn recorded_pending(trace: &Trace) -> Option<Vec<Duration>> {
    if trace
        .lifecycles
        .iter()
        .all(|lifecycle| lifecycle.created_ms == 0)
    {
        return None;
    }
    let start_ms = window_start_ms(trace);
    let start_ms = start_ms - start_ms.rem_euclid(1000);
    // The tracer records a pod again when it turns Ready: one wait per pod.
    let mut seen = BTreeSet::new();
    Some(
        trace
            .lifecycles
            .iter()
            .filter(|lifecycle| lifecycle.created_ms != 0 && lifecycle.created_ms >= start_ms)
            .filter(|lifecycle| {
                seen.insert((
                    lifecycle.owner_namespace.as_str(),
                    lifecycle.pod_name.as_str(),
                    lifecycle.created_ms,
                ))
            })
            .map(|lifecycle| {
                let waited = lifecycle.start_ms.saturating_sub(lifecycle.created_ms);
                Duration::from_millis(u64::try_from(waited).unwrap_or(0))
            })
            .collect(),
    )
}

/// The namespaces the replay creates objects in, as recorded (before the simulation's
/// prefix): the recorded cluster's other namespaces (kube-system, ...) are not compared.
fn replayed_namespaces(trace: &Trace) -> BTreeSet<&str> {
    let mut namespaces = BTreeSet::new();
    for object in trace
        .events
        .iter()
        .flat_map(|event| event.applied.iter().chain(&event.deleted))
    {
        if !object.namespace.is_empty() {
            namespaces.insert(object.namespace.as_str());
        }
        let is_namespace = object
            .gvk
            .as_ref()
            .is_some_and(|gvk| gvk.group.is_empty() && gvk.kind == "Namespace");
        if is_namespace {
            namespaces.insert(object.name.as_str());
        }
    }
    namespaces
}

fn pods(
    sample: &pb::ClusterSample,
    namespaces: &BTreeSet<&str>,
    count: fn(&pb::RecordedPodCounts) -> u32,
) -> u64 {
    sample
        .pods
        .iter()
        .filter(|(namespace, _)| namespaces.contains(namespace.as_str()))
        .map(|(_, counts)| u64::from(count(counts)))
        .sum()
}

/// How the recorded cluster ran cluster-autoscaler: the flags of the first cluster-autoscaler
/// Deployment the trace holds, as first recorded (the replay starts CA once, so a later
/// change of them cannot apply); `None` when it holds none (a SimKube trace, a namespace
/// filter without kube-system).
pub fn recorded_autoscaler(trace: &Trace) -> Option<env::RecordedAutoscalerFlags> {
    trace
        .events
        .iter()
        .flat_map(|event| &event.applied)
        .filter(|object| {
            object
                .gvk
                .as_ref()
                .is_some_and(|gvk| gvk.kind == "Deployment")
        })
        .find_map(|object| {
            let args = flags_in_deployment(&object.object_json)?;
            Some(env::RecordedAutoscalerFlags {
                source: format!(
                    "Deployment {}/{} in the trace",
                    object.namespace, object.name
                ),
                args,
            })
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;

    fn trace(samples: Vec<pb::ClusterSample>) -> Trace {
        let deployment = pb::TraceObject {
            gvk: Some(pb::GroupVersionKind {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
            }),
            namespace: "shop".into(),
            name: "web".into(),
            ..Default::default()
        };
        let namespace = pb::TraceObject {
            gvk: Some(pb::GroupVersionKind {
                group: String::new(),
                version: "v1".into(),
                kind: "Namespace".into(),
            }),
            name: "batch".into(),
            ..Default::default()
        };
        Trace {
            header: pb::TraceHeader {
                start_time: Some(ksim_trace::time::timestamp(100_000)),
                ..Default::default()
            },
            events: vec![pb::TraceEvent {
                timestamp_ms: 101_000,
                applied: vec![deployment, namespace],
                ..Default::default()
            }],
            lifecycles: Vec::new(),
            samples,
            nodes: Vec::new(),
            usage: Vec::new(),
            trailer: Default::default(),
        }
    }

    fn sample(ms: i64, nodes: u32, pods: &[(&str, u32, u32)]) -> pb::ClusterSample {
        pb::ClusterSample {
            timestamp_ms: ms,
            ready_nodes: [("m5".to_owned(), nodes)].into(),
            pods: pods
                .iter()
                .map(|(namespace, pending, running)| {
                    (
                        (*namespace).to_owned(),
                        pb::RecordedPodCounts {
                            pending: *pending,
                            running: *running,
                        },
                    )
                })
                .collect(),
        }
    }

    fn started(pod: &str, created_ms: i64, start_ms: i64) -> pb::PodLifecycle {
        pb::PodLifecycle {
            owner_namespace: "shop".into(),
            pod_name: pod.into(),
            created_ms,
            start_ms,
            ..Default::default()
        }
    }

    #[test]
    fn recorded_pending_is_creation_to_start_of_pods_created_in_the_window() {
        let mut recorded = trace(Vec::new());
        recorded.lifecycles = vec![started("a", 0, 101_000)];
        assert_eq!(recorded_pending(&recorded), None, "no creation times");
        // The window starts at 100.3 s.
        recorded.header.start_time = Some(ksim_trace::time::timestamp(100_300));
        recorded.lifecycles = vec![
            started("a", 101_000, 103_500),
            // Recorded again when it turned Ready: one wait.
            started("a", 101_000, 103_500),
            started("b", 102_000, 172_000),
            // Created before the window: left out.
            started("c", 99_000, 100_500),
            // Created in its first second, stamped in whole seconds: counts.
            started("e", 100_000, 101_000),
            started("d", 0, 101_000),
        ];
        assert_eq!(
            recorded_pending(&recorded).unwrap(),
            [
                Duration::from_millis(2_500),
                Duration::from_secs(70),
                Duration::from_secs(1)
            ]
        );
    }

    #[test]
    fn a_trace_without_samples_has_no_recorded_cluster() {
        assert_eq!(recorded_states(&trace(Vec::new())), None);
    }

    #[test]
    fn pods_count_in_replayed_namespaces_only_and_offsets_start_at_the_window() {
        let states = recorded_states(&trace(vec![
            sample(99_000, 2, &[("shop", 1, 3), ("kube-system", 0, 9)]),
            sample(104_500, 3, &[("shop", 0, 4), ("batch", 2, 0)]),
        ]))
        .unwrap();
        assert_eq!(states.len(), 2);
        // Before the window: from 0.
        assert_eq!(states[0].offset, Duration::ZERO);
        assert_eq!(
            (states[0].state.pods_pending, states[0].state.pods_running),
            (1, 3),
            "kube-system is not replayed"
        );
        assert_eq!(states[1].offset, Duration::from_millis(4_500));
        assert_eq!(
            (states[1].state.pods_pending, states[1].state.pods_running),
            (2, 4),
            "a Namespace object's pods count"
        );
        assert_eq!(states[1].state.ready_nodes["m5"], 3);
    }

    /// A Deployment in kube-system whose one container runs `command`, as a trace holds it.
    pub(crate) fn kube_system_deployment(name: &str, command: &[&str]) -> pb::TraceObject {
        pb::TraceObject {
            gvk: Some(pb::GroupVersionKind {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
            }),
            namespace: "kube-system".into(),
            name: name.into(),
            object_json: serde_json::to_vec(&serde_json::json!({
                "kind": "Deployment",
                "spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "x", "command": command}
                ]}}}
            }))
            .unwrap(),
        }
    }

    /// A trace that applies `objects` at its first instant and holds nothing else.
    pub(crate) fn trace_applying(objects: Vec<pb::TraceObject>) -> Trace {
        Trace {
            header: Default::default(),
            events: vec![pb::TraceEvent {
                timestamp_ms: 1,
                applied: objects,
                deleted: Vec::new(),
            }],
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            usage: Vec::new(),
            trailer: Default::default(),
        }
    }

    #[test]
    fn the_first_recorded_ca_deployment_gives_the_recorded_flags() {
        let deployment = kube_system_deployment;
        let mut trace = trace_applying(vec![deployment("coredns", &["/coredns", "-conf=/c"])]);
        assert_eq!(recorded_autoscaler(&trace), None);
        for unneeded in ["3m", "1m"] {
            trace.events.push(pb::TraceEvent {
                timestamp_ms: 2,
                applied: vec![deployment(
                    "cluster-autoscaler",
                    &[
                        "./cluster-autoscaler",
                        &format!("--scale-down-unneeded-time={unneeded}"),
                    ],
                )],
                deleted: Vec::new(),
            });
        }
        let recorded = recorded_autoscaler(&trace).unwrap();
        assert_eq!(
            recorded.source,
            "Deployment kube-system/cluster-autoscaler in the trace"
        );
        assert_eq!(recorded.args, ["scale-down-unneeded-time=3m"]);
    }
}
