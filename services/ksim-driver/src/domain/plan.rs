//! The replay plan: a trace's events as timed steps of rewritten object operations, and the
//! runs of its CronJobs ([`super::cron`]) as steps of their own.
//!
//! Pure: the driver executes the plan against the simulated cluster, sleeping until each step's
//! `at`. A recorded object that cannot be replayed becomes [`Op::Invalid`], so one bad object
//! never stops a replay.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ksim_trace::{Trace, pb, time};
use serde_json::Value;

use super::cron::{self, CronSpec};
use super::rewrite::Rewriter;
use super::{Gvk, Operation, Target};

/// Most runs one version of a CronJob adds to a plan: a run a minute for ten weeks.
const MAX_RUNS_PER_VERSION: usize = 100_000;

/// What the driver does, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Every namespace (prefixed) a valid op touches, including Namespace objects themselves.
    pub namespaces: BTreeSet<String>,
    /// Every kind a valid op uses.
    pub kinds: BTreeSet<Gvk>,
    /// One step per trace event and per CronJob run, in order of `at`.
    pub steps: Vec<Step>,
    /// The scaled length of the recorded window; never before the last step.
    pub end: Duration,
    /// Events in the trace.
    pub events_total: u64,
    /// CronJob runs the driver plays (steps of kind [`StepKind::CronRun`]).
    pub cron_runs: u64,
    /// Recorded objects of kinds a recording observes ([`ksim_trace::gvk::is_observed_only`]:
    /// Events, Nodes): evidence for the report and calibration, never replayed.
    pub observed_only: u64,
}

/// The operations of one trace event.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When to run, from the replay's start: the event's offset divided by the speed.
    pub at: Duration,
    /// Index of the event in the trace; for a CronJob run, of the event that applied the
    /// CronJob's schedule.
    pub event_index: u64,
    /// The event's (or run's) offset from the recorded window's start, unscaled.
    pub trace_offset: Duration,
    /// Applies first, then deletes, each in file order.
    pub ops: Vec<Op>,
    pub kind: StepKind,
}

/// What a step plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A trace event.
    Event,
    /// A run of a recorded CronJob, at the time its schedule gave in recorded time.
    CronRun,
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
    /// Hand a workload's `spec.replicas` to [`super::autoscaled::REPLICAS_MANAGER`], so that
    /// the driver's later applies may leave it to the workload's HPA.
    HandOver {
        target: Target,
        replicas: i64,
    },
    /// Start the Job a CronJob's schedule calls for, as the cronjob controller would.
    CronRun {
        /// The CronJob.
        target: Target,
        /// The Job's name: the controller's, from the scheduled minute.
        job: String,
        /// The scheduled time, RFC 3339 in the CronJob's time zone.
        scheduled: String,
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

    let observed_only = trace
        .events
        .iter()
        .flat_map(|event| event.applied.iter().chain(&event.deleted))
        .filter(|object| is_observed_only(object))
        .count();
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
                kind: StepKind::Event,
            }
        })
        .collect();
    let runs = cron_steps(trace, rewriter, start_ms, end_ms, speed, &mut steps);
    let cron_runs = u64::try_from(runs.len()).unwrap_or(u64::MAX);
    steps.extend(runs);
    // Readers check the order; a hand-built trace may not be sorted. Stable, so ties keep
    // file order.
    steps.sort_by_key(|step| step.at);

    let mut namespaces = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for op in steps.iter().flat_map(|step| &step.ops) {
        let target = match op {
            Op::Apply { target, .. } | Op::Delete { target } | Op::CronRun { target, .. } => target,
            Op::HandOver { .. } | Op::Invalid { .. } => continue,
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
        cron_runs,
        observed_only: u64::try_from(observed_only).unwrap_or(u64::MAX),
    }
}

/// The runs of every CronJob in the trace, from each version's apply until the next version,
/// its delete or the window's end. A version whose schedule cannot be read adds an
/// [`Op::Invalid`] to the event that applied it, and no runs. `event_steps` are the events'
/// steps in trace order, not yet sorted: the n-th is event n's.
fn cron_steps(
    trace: &Trace,
    rewriter: &Rewriter,
    start_ms: i64,
    end_ms: i64,
    speed: f64,
    event_steps: &mut [Step],
) -> Vec<Step> {
    struct Version {
        spec: CronSpec,
        since_ms: i64,
        event_index: u64,
        target: Target,
    }
    let play = |version: Version, until_ms: i64, runs: &mut Vec<Step>| {
        for run_ms in cron::runs(
            &version.spec,
            version.since_ms,
            until_ms,
            MAX_RUNS_PER_VERSION,
        ) {
            let offset_ms = offset(start_ms, run_ms);
            runs.push(Step {
                at: scaled(offset_ms, speed),
                event_index: version.event_index,
                trace_offset: Duration::from_millis(offset_ms),
                ops: vec![Op::CronRun {
                    job: cron::job_name(&version.target.name, run_ms),
                    scheduled: version.spec.schedule.timestamp(run_ms),
                    target: version.target.clone(),
                }],
                kind: StepKind::CronRun,
            });
        }
    };

    // In recorded order; ties keep file order, as the plan's steps do.
    let mut order: Vec<usize> = (0..trace.events.len()).collect();
    order.sort_by_key(|&index| trace.events[index].timestamp_ms);
    let mut current: HashMap<(String, String), Version> = HashMap::new();
    let mut runs = Vec::new();
    for index in order {
        let event = &trace.events[index];
        let at_ms = event.timestamp_ms.max(start_ms);
        let event_index = u64::try_from(index).unwrap_or(u64::MAX);
        for object in event.applied.iter().filter(|object| is_cronjob(object)) {
            let key = (object.namespace.clone(), object.name.clone());
            // The old version's runs up to this instant; the new one's after it.
            if let Some(version) = current.remove(&key) {
                play(version, at_ms, &mut runs);
            }
            // Invalid JSON is reported by the apply itself.
            let Ok(recorded) = serde_json::from_slice::<Value>(&object.object_json) else {
                continue;
            };
            let target = rewriter.delete(&object_gvk(object), &object.namespace, &object.name);
            match CronSpec::of(&recorded) {
                Ok(spec) => {
                    current.insert(
                        key,
                        Version {
                            spec,
                            since_ms: at_ms,
                            event_index,
                            target,
                        },
                    );
                }
                Err(error) => {
                    if let Some(step) = event_steps.get_mut(index) {
                        step.ops.push(Op::Invalid {
                            target,
                            operation: Operation::CronRun,
                            message: format!(
                                "CronJob {}: {error}; its runs are not played",
                                describe(object)
                            ),
                        });
                    }
                }
            }
        }
        for object in event.deleted.iter().filter(|object| is_cronjob(object)) {
            let key = (object.namespace.clone(), object.name.clone());
            if let Some(version) = current.remove(&key) {
                play(version, at_ms - 1, &mut runs);
            }
        }
    }
    for version in current.into_values() {
        play(version, end_ms, &mut runs);
    }
    runs
}

fn is_cronjob(object: &pb::TraceObject) -> bool {
    object
        .gvk
        .as_ref()
        .is_some_and(|gvk| gvk.group == "batch" && gvk.kind == "CronJob")
}

/// Milliseconds from `start_ms` to `ms`, 0 when before it.
fn offset(start_ms: i64, ms: i64) -> u64 {
    u64::try_from(ms.saturating_sub(start_ms)).unwrap_or(0)
}

fn scaled(offset_ms: u64, speed: f64) -> Duration {
    // f64 to u64 saturates; precision loss only beyond 2^53 µs (285 years).
    Duration::from_micros((offset_ms as f64 * 1000.0 / speed).round() as u64)
}

fn is_observed_only(object: &pb::TraceObject) -> bool {
    object
        .gvk
        .as_ref()
        .is_some_and(ksim_trace::gvk::is_observed_only)
}

/// The event's operations; what the recording only observed is left out.
fn event_ops(event: &pb::TraceEvent, rewriter: &Rewriter) -> Vec<Op> {
    let applies = event
        .applied
        .iter()
        .filter(|object| !is_observed_only(object))
        .map(|object| apply_op(object, rewriter));
    let deletes = event
        .deleted
        .iter()
        .filter(|object| !is_observed_only(object))
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
    use crate::domain::lifetimes::Lifetimes;
    use crate::domain::rewrite::RewriteOptions;

    const T0: i64 = 1_767_225_600_000;

    fn rewriter() -> Rewriter {
        Rewriter::new(RewriteOptions::for_tests("p", 2.0), &Lifetimes::default())
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
            usage: Vec::new(),
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
                Op::CronRun { job, .. } => panic!("no CronJob, yet a run of {job}"),
                Op::HandOver { target, .. } => panic!("no HPA, yet a handover of {}", target.name),
                Op::Invalid { message, .. } => panic!("{message}"),
            })
            .collect();
        assert_eq!(ops, ["apply 1", "apply 2", "delete 3", "delete 4"]);
    }

    #[test]
    fn recorded_events_and_nodes_are_evidence_not_replayed() {
        let core_event = object(
            &Gvk::new("", "v1", "Event"),
            "a",
            "web-1.17f",
            br#"{"metadata":{"name":"web-1.17f"},"involvedObject":{"namespace":"a"},"reason":"Scheduled"}"#,
        );
        let events_api = object(
            &Gvk::new("events.k8s.io", "v1", "Event"),
            "a",
            "web-1.180",
            br#"{"metadata":{"name":"web-1.180"},"regarding":{"namespace":"a"},"reason":"Pulled"}"#,
        );
        let node = object(
            &Gvk::new("", "v1", "Node"),
            "",
            "ip-10-0-0-1",
            br#"{"metadata":{"name":"ip-10-0-0-1"}}"#,
        );
        let trace = trace(
            windowed(1_000),
            vec![
                event(
                    0,
                    vec![deployment("a", "web"), core_event.clone(), node],
                    vec![],
                ),
                event(500, vec![events_api], vec![core_event]),
            ],
        );
        let plan = plan(&trace, &rewriter(), 1.0);
        let ops: Vec<_> = plan.steps.iter().map(|step| step.ops.len()).collect();
        // The Deployment alone; the second event keeps its step, with nothing to do.
        assert_eq!(ops, [1, 0]);
        assert_eq!(plan.observed_only, 4);
        assert_eq!(plan.events_total, 2);
        let kinds: Vec<_> = plan.kinds.iter().map(|gvk| gvk.kind.as_str()).collect();
        assert_eq!(kinds, ["Deployment"]);
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
                ..Default::default()
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

    fn cronjob(name: &str, spec: Value) -> pb::TraceObject {
        let json = json!({"metadata": {"name": name}, "spec": spec});
        object(
            &Gvk::new("batch", "v1", "CronJob"),
            "batch",
            name,
            json.to_string().as_bytes(),
        )
    }

    const MINUTE: i64 = 60_000;

    #[test]
    fn cronjob_runs_follow_each_recorded_version_until_the_delete() {
        // Every 10 minutes from 00:00; from 00:25, every 15; deleted at 00:50. T0 is midnight.
        let trace = trace(
            windowed(60 * MINUTE),
            vec![
                event(
                    0,
                    vec![cronjob("nightly", json!({"schedule": "*/10 * * * *"}))],
                    vec![],
                ),
                event(
                    25 * MINUTE,
                    vec![cronjob("nightly", json!({"schedule": "*/15 * * * *"}))],
                    vec![],
                ),
                event(50 * MINUTE, vec![], vec![cronjob("nightly", json!({}))]),
                // Suspended as recorded: no runs at all.
                event(
                    MINUTE,
                    vec![cronjob(
                        "paused",
                        json!({"schedule": "* * * * *", "suspend": true}),
                    )],
                    vec![],
                ),
            ],
        );
        let plan = plan(&trace, &rewriter(), 2.0);
        assert_eq!(plan.events_total, 4);
        assert_eq!(plan.cron_runs, 4);
        let runs: Vec<(Duration, u64, String, String)> = plan
            .steps
            .iter()
            .filter(|step| step.kind == StepKind::CronRun)
            .map(|step| match &step.ops[..] {
                [Op::CronRun { target, job, .. }] => {
                    assert_eq!(target.namespace.as_deref(), Some("p-batch"));
                    assert_eq!(step.at * 2, step.trace_offset);
                    (
                        step.trace_offset,
                        step.event_index,
                        target.name.clone(),
                        job.clone(),
                    )
                }
                other => panic!("{other:?}"),
            })
            .collect();
        let minute = |m: i64| Duration::from_millis((m * MINUTE) as u64);
        let job = |m: i64| format!("nightly-{}", (T0 + m * MINUTE) / MINUTE);
        assert_eq!(
            runs,
            [
                (minute(10), 0, "nightly".to_owned(), job(10)),
                (minute(20), 0, "nightly".to_owned(), job(20)),
                (minute(30), 1, "nightly".to_owned(), job(30)),
                (minute(45), 1, "nightly".to_owned(), job(45)),
            ]
        );
        // The steps stay in time order, events and runs together.
        assert!(plan.steps.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn a_schedule_the_driver_cannot_play_is_an_error_of_its_apply() {
        let trace = trace(
            windowed(10 * MINUTE),
            vec![event(
                0,
                vec![cronjob("odd", json!({"schedule": "0 0 * *"}))],
                vec![],
            )],
        );
        let plan = plan(&trace, &rewriter(), 1.0);
        assert_eq!(plan.cron_runs, 0);
        match &plan.steps[0].ops[..] {
            [
                Op::Apply { object, .. },
                Op::Invalid {
                    operation, message, ..
                },
            ] => {
                assert_eq!(object["spec"]["suspend"], true);
                assert_eq!(*operation, Operation::CronRun);
                assert!(message.contains("CronJob batch/odd"), "{message}");
                assert!(message.contains("expected 5 fields"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
