//! The replay plan: a trace's events as timed steps of rewritten object operations.
//!
//! Pure: the driver executes the plan against the simulated cluster, sleeping until each step's
//! `at`. A recorded object that cannot be replayed becomes [`Op::Invalid`], so one bad object
//! never stops a replay.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ksim_trace::{Trace, pb, time};
use serde_json::Value;

use super::rewrite::Rewriter;
use super::{Gvk, Operation, Target};

/// What the driver does, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Every namespace (prefixed) a valid op touches, including Namespace objects themselves.
    pub namespaces: BTreeSet<String>,
    /// Every kind a valid op uses.
    pub kinds: BTreeSet<Gvk>,
    /// One step per trace event, in order of `at`.
    pub steps: Vec<Step>,
    /// The scaled length of the recorded window; never before the last step.
    pub end: Duration,
    /// Events in the trace.
    pub events_total: u64,
}

/// The operations of one trace event.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When to run, from the replay's start: the event's offset divided by the speed.
    pub at: Duration,
    /// Index of the event in the trace.
    pub event_index: u64,
    /// The event's offset from the recorded window's start, unscaled.
    pub trace_offset: Duration,
    /// Applies first, then deletes, each in file order.
    pub ops: Vec<Op>,
}

/// One operation on the simulated cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Apply {
        target: Target,
        object: Value,
    },
    Delete {
        target: Target,
    },
    /// A recorded operation that cannot be replayed, with why; the driver reports it.
    Invalid {
        target: Target,
        operation: Operation,
        message: String,
    },
}

/// Pod template pointers per kind, as the trace's tracer config lists them.
pub fn template_paths(header: &pb::TraceHeader) -> HashMap<Gvk, Vec<String>> {
    header
        .tracer_config
        .iter()
        .flat_map(|config| &config.tracked_kinds)
        .filter_map(|kind| {
            let gvk = kind.gvk.as_ref()?;
            Some((Gvk::from(gvk), kind.pod_template_paths.clone()))
        })
        .collect()
}

/// Unix ms of the recorded window's start, the replay's time 0: the header's start time, or
/// the first event's when the header has none.
pub fn window_start_ms(trace: &Trace) -> i64 {
    trace
        .header
        .start_time
        .as_ref()
        .map(time::millis)
        .or_else(|| trace.events.first().map(|event| event.timestamp_ms))
        .unwrap_or(0)
}

/// The plan of `trace` replayed at `speed`.
///
/// `speed` must be finite and > 0 (callers validate it); anything else is taken as 1.0. Times
/// are scaled in f64 milliseconds and rounded to the nearest microsecond, so sub-millisecond
/// speeds-ups keep their order without drifting.
pub fn plan(trace: &Trace, rewriter: &Rewriter, speed: f64) -> Plan {
    let speed = if speed.is_finite() && speed > 0.0 {
        speed
    } else {
        1.0
    };
    let header = &trace.header;
    let start_ms = window_start_ms(trace);
    let end_ms = header
        .end_time
        .as_ref()
        .map(time::millis)
        .or_else(|| trace.events.last().map(|event| event.timestamp_ms))
        .unwrap_or(start_ms);

    let mut steps: Vec<Step> = trace
        .events
        .iter()
        .zip(0u64..)
        .map(|(event, event_index)| {
            let offset_ms = offset(start_ms, event.timestamp_ms);
            Step {
                at: scaled(offset_ms, speed),
                event_index,
                trace_offset: Duration::from_millis(offset_ms),
                ops: event_ops(event, rewriter),
            }
        })
        .collect();
    // Readers check the order; a hand-built trace may not be sorted. Stable, so ties keep
    // file order.
    steps.sort_by_key(|step| step.at);

    let mut namespaces = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for op in steps.iter().flat_map(|step| &step.ops) {
        let target = match op {
            Op::Apply { target, .. } | Op::Delete { target } => target,
            Op::Invalid { .. } => continue,
        };
        kinds.insert(target.gvk.clone());
        if let Some(namespace) = &target.namespace {
            namespaces.insert(namespace.clone());
        }
        if target.gvk.group.is_empty() && target.gvk.kind == "Namespace" {
            namespaces.insert(target.name.clone());
        }
    }
    let last = steps.last().map_or(Duration::ZERO, |step| step.at);
    Plan {
        namespaces,
        kinds,
        steps,
        end: scaled(offset(start_ms, end_ms), speed).max(last),
        events_total: u64::try_from(trace.events.len()).unwrap_or(u64::MAX),
    }
}

/// Milliseconds from `start_ms` to `ms`, 0 when before it.
fn offset(start_ms: i64, ms: i64) -> u64 {
    u64::try_from(ms.saturating_sub(start_ms)).unwrap_or(0)
}

fn scaled(offset_ms: u64, speed: f64) -> Duration {
    // f64 to u64 saturates; precision loss only beyond 2^53 µs (285 years).
    Duration::from_micros((offset_ms as f64 * 1000.0 / speed).round() as u64)
}

fn event_ops(event: &pb::TraceEvent, rewriter: &Rewriter) -> Vec<Op> {
    let applies = event
        .applied
        .iter()
        .map(|object| apply_op(object, rewriter));
    let deletes = event
        .deleted
        .iter()
        .map(|object| delete_op(object, rewriter));
    applies.chain(deletes).collect()
}

fn apply_op(object: &pb::TraceObject, rewriter: &Rewriter) -> Op {
    let gvk = object_gvk(object);
    let invalid = |message: String| Op::Invalid {
        target: rewriter.delete(&gvk, &object.namespace, &object.name),
        operation: Operation::Apply,
        message,
    };
    let Some(kind) = object.gvk.as_ref().map(Gvk::from) else {
        return invalid(format!(
            "{}: the recorded object has no kind",
            describe(object)
        ));
    };
    let value: Value = match serde_json::from_slice(&object.object_json) {
        Ok(value) => value,
        Err(error) => {
            return invalid(format!(
                "{kind} {}: the recorded object is not valid JSON: {error}",
                describe(object)
            ));
        }
    };
    match rewriter.apply(&kind, &object.namespace, &object.name, value) {
        Ok((target, object)) => Op::Apply { target, object },
        Err(error) => invalid(error.to_string()),
    }
}

fn delete_op(object: &pb::TraceObject, rewriter: &Rewriter) -> Op {
    let gvk = object_gvk(object);
    let target = rewriter.delete(&gvk, &object.namespace, &object.name);
    let problem = if object.gvk.is_none() {
        Some("has no kind")
    } else if object.name.is_empty() {
        Some("has no name")
    } else {
        None
    };
    match problem {
        Some(problem) => Op::Invalid {
            target,
            operation: Operation::Delete,
            message: format!("{gvk} {}: the recorded delete {problem}", describe(object)),
        },
        None => Op::Delete { target },
    }
}

fn object_gvk(object: &pb::TraceObject) -> Gvk {
    object
        .gvk
        .as_ref()
        .map_or_else(|| Gvk::new("", "", ""), Gvk::from)
}

/// `namespace/name`, or `name` when cluster-scoped.
fn describe(object: &pb::TraceObject) -> String {
    if object.namespace.is_empty() {
        object.name.clone()
    } else {
        format!("{}/{}", object.namespace, object.name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use ksim_trace::time::timestamp;
    use serde_json::json;

    use super::*;
    use crate::domain::RootRef;
    use crate::domain::lifetimes::Lifetimes;
    use crate::domain::rewrite::RewriteOptions;

    const T0: i64 = 1_767_225_600_000;

    fn rewriter() -> Rewriter {
        Rewriter::new(
            RewriteOptions {
                simulation_id: "sim".to_owned(),
                namespace_prefix: "p".to_owned(),
                speed: 2.0,
                root: RootRef {
                    api_version: "v1".to_owned(),
                    kind: "ConfigMap".to_owned(),
                    name: "root".to_owned(),
                    uid: "u".to_owned(),
                },
                template_paths: HashMap::new(),
                node_groups: Vec::new(),
            },
            &Lifetimes::default(),
        )
    }

    fn object(gvk: &Gvk, namespace: &str, name: &str, json: &[u8]) -> pb::TraceObject {
        pb::TraceObject {
            gvk: Some(pb::GroupVersionKind::from(gvk)),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            object_json: json.to_vec(),
        }
    }

    fn deployment(namespace: &str, name: &str) -> pb::TraceObject {
        let json = json!({"metadata": {"name": name}, "spec": {"template": {"spec": {}}}});
        object(
            &Gvk::new("apps", "v1", "Deployment"),
            namespace,
            name,
            json.to_string().as_bytes(),
        )
    }

    fn event(
        offset_ms: i64,
        applied: Vec<pb::TraceObject>,
        deleted: Vec<pb::TraceObject>,
    ) -> pb::TraceEvent {
        pb::TraceEvent {
            timestamp_ms: T0 + offset_ms,
            applied,
            deleted,
        }
    }

    fn trace(header: pb::TraceHeader, events: Vec<pb::TraceEvent>) -> Trace {
        Trace {
            header,
            events,
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            trailer: pb::TraceTrailer::default(),
        }
    }

    fn windowed(end_offset_ms: i64) -> pb::TraceHeader {
        pb::TraceHeader {
            start_time: Some(timestamp(T0)),
            end_time: Some(timestamp(T0 + end_offset_ms)),
            ..Default::default()
        }
    }

    #[test]
    fn offsets_and_end_are_scaled_by_speed() {
        let trace = trace(
            windowed(10_000),
            vec![
                event(0, vec![deployment("a", "x")], vec![]),
                event(1_500, vec![deployment("a", "y")], vec![]),
                event(3_000, vec![], vec![deployment("b", "x")]),
            ],
        );
        let plan = plan(&trace, &rewriter(), 2.0);
        let at: Vec<_> = plan.steps.iter().map(|s| s.at.as_millis()).collect();
        assert_eq!(at, [0, 750, 1_500]);
        let offsets: Vec<_> = plan
            .steps
            .iter()
            .map(|s| s.trace_offset.as_millis())
            .collect();
        assert_eq!(offsets, [0, 1_500, 3_000]);
        let indices: Vec<_> = plan.steps.iter().map(|s| s.event_index).collect();
        assert_eq!(indices, [0, 1, 2]);
        assert_eq!(plan.end, Duration::from_secs(5));
        assert_eq!(plan.events_total, 3);
    }

    #[test]
    fn window_falls_back_to_events_and_bad_speed_to_one() {
        let trace = trace(
            pb::TraceHeader::default(),
            vec![
                event(1_000, vec![deployment("a", "x")], vec![]),
                event(4_001, vec![], vec![]),
            ],
        );
        for speed in [0.0, -3.0, f64::NAN, f64::INFINITY] {
            let plan = plan(&trace, &rewriter(), speed);
            assert_eq!(plan.steps[0].at, Duration::ZERO);
            assert_eq!(plan.steps[1].at, Duration::from_millis(3_001), "{speed}");
            assert_eq!(plan.end, Duration::from_millis(3_001));
        }
        let empty = plan(&trace_of_nothing(), &rewriter(), 1.0);
        assert_eq!((empty.end, empty.events_total), (Duration::ZERO, 0));
        assert!(empty.steps.is_empty());
    }

    fn trace_of_nothing() -> Trace {
        trace(pb::TraceHeader::default(), Vec::new())
    }

    #[test]
    fn applies_come_before_deletes_in_file_order() {
        let trace = trace(
            windowed(1_000),
            vec![event(
                0,
                vec![deployment("a", "1"), deployment("a", "2")],
                vec![deployment("a", "3"), deployment("a", "4")],
            )],
        );
        let plan = plan(&trace, &rewriter(), 1.0);
        let ops: Vec<_> = plan.steps[0]
            .ops
            .iter()
            .map(|op| match op {
                Op::Apply { target, object } => {
                    assert_eq!(object["metadata"]["namespace"], "p-a");
                    format!("apply {}", target.name)
                }
                Op::Delete { target } => format!("delete {}", target.name),
                Op::Invalid { message, .. } => panic!("{message}"),
            })
            .collect();
        assert_eq!(ops, ["apply 1", "apply 2", "delete 3", "delete 4"]);
    }

    #[test]
    fn invalid_json_becomes_an_invalid_op_and_the_plan_goes_on() {
        let job = Gvk::new("batch", "v1", "Job");
        let trace = trace(
            windowed(1_000),
            vec![
                event(
                    0,
                    vec![
                        object(&job, "team", "broken", b"{not json"),
                        deployment("a", "x"),
                    ],
                    vec![],
                ),
                event(500, vec![deployment("a", "y")], vec![]),
            ],
        );
        let plan = plan(&trace, &rewriter(), 1.0);
        let Op::Invalid {
            target,
            operation,
            message,
        } = &plan.steps[0].ops[0]
        else {
            panic!("{:?}", plan.steps[0].ops[0]);
        };
        assert_eq!(*operation, Operation::Apply);
        assert_eq!(target.namespace.as_deref(), Some("p-team"));
        assert!(message.contains("batch/v1.Job team/broken"), "{message}");
        assert!(message.contains("not valid JSON"), "{message}");
        assert!(matches!(plan.steps[0].ops[1], Op::Apply { .. }));
        assert!(matches!(plan.steps[1].ops[0], Op::Apply { .. }));
        // The invalid op's kind is not one the driver needs.
        assert!(!plan.kinds.contains(&job));
    }

    #[test]
    fn namespaces_and_kinds_are_collected() {
        let namespace = Gvk::new("", "v1", "Namespace");
        let class = Gvk::new("storage.k8s.io", "v1", "StorageClass");
        let trace = trace(
            windowed(1_000),
            vec![event(
                0,
                vec![
                    object(&namespace, "", "made", br#"{"metadata": {}}"#),
                    object(&class, "", "fast", br#"{"metadata": {}}"#),
                    deployment("a", "x"),
                ],
                vec![deployment("b", "x")],
            )],
        );
        let plan = plan(&trace, &rewriter(), 1.0);
        let namespaces: Vec<_> = plan.namespaces.iter().map(String::as_str).collect();
        assert_eq!(namespaces, ["p-a", "p-b", "p-made"]);
        let kinds: Vec<_> = plan.kinds.iter().map(Gvk::to_string).collect();
        assert_eq!(
            kinds,
            [
                "v1.Namespace",
                "apps/v1.Deployment",
                "storage.k8s.io/v1.StorageClass",
            ]
        );
    }

    #[test]
    fn template_paths_come_from_the_tracer_config() {
        let header = pb::TraceHeader {
            tracer_config: Some(pb::TracerConfig {
                tracked_kinds: vec![
                    pb::TrackedKindConfig {
                        gvk: Some(pb::GroupVersionKind::from(&Gvk::new(
                            "example.com",
                            "v1",
                            "Runner",
                        ))),
                        pod_template_paths: vec!["/spec/pod".to_owned()],
                        ..Default::default()
                    },
                    pb::TrackedKindConfig::default(),
                ],
                cluster_recorded: false,
            }),
            ..Default::default()
        };
        let paths = template_paths(&header);
        assert_eq!(paths.len(), 1);
        assert_eq!(
            paths[&Gvk::new("example.com", "v1", "Runner")],
            ["/spec/pod"]
        );
        assert!(template_paths(&pb::TraceHeader::default()).is_empty());
    }
}
