//! Recorded against simulated: the trace's samples of the recorded cluster beside the driver's
//! samples of the simulated one, in buckets of recorded time, and how far apart they were.
//!
//! Both sides are step functions (a sample holds until the next), so each bucket compares
//! them as at its end: the last sample of each side at or before it. The last bucket ends
//! where the replay's last sample was taken, so a replay that stopped early is not compared
//! with recorded time it never reached.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ksim_proto::json::of_millis;

use super::attribution::cause_of;
use super::input::{Observations, RecordedState};
use super::model::{
    ClusterState, DelaySamples, DurationPercentiles, Fidelity, FidelityBucket, FidelityPending,
    FidelitySeries, NodeChange, NodeChangeCause, NodeChangeKind, Report,
};
use super::percentiles;
use super::timeline::{millis, offset_ms, recorded};

/// Bucket width of the comparison, recorded time: coarse enough that a node joining a
/// second later in the replay than in the recording does not count as an error.
pub const FIDELITY_BUCKET: Duration = Duration::from_secs(5);

/// Pod series are within tolerance when off by at most this share of the recorded value.
const POD_TOLERANCE: f64 = 0.05;

/// The series name of one group's nodes.
pub fn group_series(group: &str) -> String {
    if group.is_empty() {
        "nodes/(no group)".to_owned()
    } else {
        format!("nodes/{group}")
    }
}

/// The comparison, when the observations carry a recorded cluster and the replay was sampled.
pub(super) fn compare(obs: &Observations) -> Option<Fidelity> {
    let recorded_states = sorted(
        obs.recorded
            .as_deref()?
            .iter()
            .map(|RecordedState { offset, state }| (millis(*offset), state.clone())),
    );
    let simulated_states = sorted(obs.samples.iter().map(|sample| {
        let at = millis(recorded(sample.offset, obs.speed));
        (at, simulated_state(sample))
    }));
    let pending: Vec<Duration> = obs
        .pending_times
        .iter()
        .map(|&wall| recorded(wall, obs.speed))
        .collect();
    between(
        &recorded_states,
        &simulated_states,
        // Already recorded time: the trace's own clock.
        obs.recorded_pending.as_deref().map(percentiles::of),
        percentiles::of(&pending),
    )
}

/// Another replay against a reference replay of the same trace (`ksim compare`'s baseline):
/// their timelines in 5 s buckets of recorded time, the reference as "recorded". For a trace
/// with no recorded cluster, such as a generated one, a slow replay is the reference a faster
/// one is held to.
pub(crate) fn agreement(reference: &Report, other: &Report) -> Option<Fidelity> {
    let states = |report: &Report| {
        sorted(report.timeline.iter().map(|bucket| {
            let pods = bucket.pods.unwrap_or_default();
            let state = ClusterState {
                ready_nodes: bucket
                    .nodes
                    .iter()
                    .map(|count| (count.node_group.clone(), count.ready_nodes))
                    .collect(),
                pods_running: pods.running,
                pods_pending: pods.pending,
            };
            (offset_ms(bucket), state)
        }))
    };
    between(
        &states(reference),
        &states(other),
        reference.pod_pending_time,
        other.pod_pending_time.unwrap_or_default(),
    )
}

/// Both sides in buckets up to the last state of `simulated`, with both sides' pending times.
fn between(
    recorded_states: &[(u64, ClusterState)],
    simulated_states: &[(u64, ClusterState)],
    recorded_pending: Option<DurationPercentiles>,
    simulated_pending: DurationPercentiles,
) -> Option<Fidelity> {
    let &(end, _) = simulated_states.last()?;

    let width = millis(FIDELITY_BUCKET);
    let buckets: Vec<FidelityBucket> = (0..=end / width)
        .filter_map(|index| {
            let offset_ms = index * width;
            // The last millisecond of the bucket, or the replay's last sample.
            let at = (offset_ms + width - 1).min(end);
            Some(FidelityBucket {
                offset: Some(of_millis(offset_ms)),
                recorded: Some(state_at(recorded_states, at)?.clone()),
                simulated: Some(state_at(simulated_states, at)?.clone()),
            })
        })
        .collect();
    let pod_seconds = |simulated: bool| {
        let running = buckets.iter().map(|b| side(b, simulated).pods_running);
        running_pod_seconds(running, width)
    };
    Some(Fidelity {
        bucket_width: Some(of_millis(width)),
        series: series(&buckets),
        pending: Some(FidelityPending {
            recorded: recorded_pending,
            simulated: Some(simulated_pending),
            recorded_running_pod_seconds: pod_seconds(false),
            simulated_running_pod_seconds: pod_seconds(true),
        }),
        buckets,
    })
}

/// One side of a bucket, the simulated or the recorded; a side a report left out is empty.
pub(crate) fn side(bucket: &FidelityBucket, simulated: bool) -> &ClusterState {
    static EMPTY: ClusterState = ClusterState {
        ready_nodes: BTreeMap::new(),
        pods_running: 0,
        pods_pending: 0,
    };
    let side = if simulated {
        &bucket.simulated
    } else {
        &bucket.recorded
    };
    side.as_ref().unwrap_or(&EMPTY)
}

/// Running pods times seconds, each bucket counting its whole width at its end's count: what
/// the buckets show, so `fidelity.csv`'s running totals end at the report's figure.
pub(crate) fn running_pod_seconds(running: impl Iterator<Item = u64>, width_ms: u64) -> f64 {
    running.map(|pods| pods as f64).sum::<f64>() * width_ms as f64 / 1000.0
}

/// A sampled delay (one given as its recorded samples) the replay drew more often than it has
/// samples: its draws repeat those few, so the figures it drives (pending time above all) follow
/// them rather than the recording's spread. One sentence per such delay, naming both counts.
/// Node delays count each node the autoscaler added or removed; the pod start delay counts
/// each pod seen to start (`pods_started`), which the driver lists only while every pod draws
/// the default's. First pulls are not counted: the report does not see which pod pulled.
pub(crate) fn few_samples_warnings(
    delays: &[DelaySamples],
    node_changes: &[NodeChange],
    pods_started: u64,
) -> Vec<String> {
    let mut draws: BTreeMap<(&str, &str), u64> = Default::default();
    for change in node_changes {
        // The pool draws for nodes the autoscaler asked for, not for ones it re-registers.
        if cause_of(change) != NodeChangeCause::Autoscaler {
            continue;
        }
        let drawn: &[&str] = match change.kind() {
            NodeChangeKind::Added => &["registration", "ready"],
            NodeChangeKind::Removed => &["termination"],
            NodeChangeKind::Unspecified => &[],
        };
        for delay in drawn {
            *draws.entry((change.group.as_str(), delay)).or_default() += 1;
        }
    }
    // Each group's draws count against its own delay, else the default's.
    let mut per_delay: BTreeMap<(String, &str), u64> = Default::default();
    for ((group, delay), count) in draws {
        let own = format!("nodes/{group}");
        let scope = if delays.iter().any(|d| d.scope == own && d.delay == delay) {
            own
        } else {
            "nodes".to_owned()
        };
        *per_delay.entry((scope, delay)).or_default() += count;
    }
    per_delay.insert(("pods".to_owned(), "start"), pods_started);
    per_delay
        .into_iter()
        .filter_map(|((scope, delay), drawn)| {
            let model = delays
                .iter()
                .find(|d| d.scope == scope && d.delay == delay)?;
            (model.samples > 0 && drawn > model.samples).then(|| {
                let which = match scope.strip_prefix("nodes/") {
                    Some(group) => format!("node {delay} delay for group {group}"),
                    None if scope == "pods" => format!("pod {delay} delay"),
                    None => format!("default node {delay} delay"),
                };
                format!(
                    "the provisioning model's {which} holds {} samples and the replay drew it \
                     {drawn} times: its draws repeat those few, so pending times follow them \
                     rather than the recording's spread",
                    model.samples
                )
            })
        })
        .collect()
}

fn simulated_state(sample: &super::input::Sample) -> ClusterState {
    ClusterState {
        ready_nodes: sample
            .nodes
            .iter()
            .map(|(group, count)| (group.clone(), count.ready))
            .collect(),
        pods_running: sample.pods.running,
        pods_pending: sample.pods.pending,
    }
}

/// Stable, so of two samples at one millisecond the later one stays last.
fn sorted(states: impl Iterator<Item = (u64, ClusterState)>) -> Vec<(u64, ClusterState)> {
    let mut states: Vec<_> = states.collect();
    states.sort_by_key(|(at, _)| *at);
    states
}

/// The last state at or before `at`; none before the first.
fn state_at(states: &[(u64, ClusterState)], at: u64) -> Option<&ClusterState> {
    let after = states.partition_point(|(offset, _)| *offset <= at);
    after.checked_sub(1).map(|last| &states[last].1)
}

/// One compared series: what it reads of a cluster state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Measure {
    /// Ready nodes over all groups.
    Nodes,
    /// Ready nodes of one group.
    Group(String),
    PodsRunning,
    PodsPending,
}

impl Measure {
    /// `Nodes`, a `Group` per group seen on either side of any bucket, then the pods.
    pub(crate) fn all(buckets: &[FidelityBucket]) -> Vec<Self> {
        let groups: BTreeSet<&String> = buckets
            .iter()
            .flat_map(|b| {
                side(b, false)
                    .ready_nodes
                    .keys()
                    .chain(side(b, true).ready_nodes.keys())
            })
            .collect();
        std::iter::once(Self::Nodes)
            .chain(groups.into_iter().map(|group| Self::Group(group.clone())))
            .chain([Self::PodsRunning, Self::PodsPending])
            .collect()
    }

    pub(crate) fn name(&self) -> String {
        match self {
            Self::Nodes => "nodes".to_owned(),
            Self::Group(group) => group_series(group),
            Self::PodsRunning => "pods_running".to_owned(),
            Self::PodsPending => "pods_pending".to_owned(),
        }
    }

    pub(crate) fn value(&self, state: &ClusterState) -> u64 {
        match self {
            Self::Nodes => state.ready_nodes.values().sum(),
            Self::Group(group) => state.ready_nodes.get(group).copied().unwrap_or(0),
            Self::PodsRunning => state.pods_running,
            Self::PodsPending => state.pods_pending,
        }
    }

    /// +-1 node; 5% of the recorded pods.
    fn within(&self, recorded: u64, simulated: u64) -> bool {
        let error = recorded.abs_diff(simulated);
        match self {
            Self::Nodes | Self::Group(_) => error <= 1,
            Self::PodsRunning | Self::PodsPending => {
                error as f64 <= recorded as f64 * POD_TOLERANCE
            }
        }
    }
}

fn series(buckets: &[FidelityBucket]) -> Vec<FidelitySeries> {
    Measure::all(buckets)
        .iter()
        .map(|measure| compared(measure, buckets))
        .collect()
}

fn compared(measure: &Measure, buckets: &[FidelityBucket]) -> FidelitySeries {
    let pairs: Vec<(u64, u64)> = buckets
        .iter()
        .map(|b| (measure.value(side(b, false)), measure.value(side(b, true))))
        .collect();
    let count = pairs.len() as f64;
    let share = |n: usize| {
        if pairs.is_empty() {
            0.0
        } else {
            n as f64 / count
        }
    };
    let errors = pairs.iter().map(|(r, s)| r.abs_diff(*s));
    FidelitySeries {
        name: measure.name(),
        buckets: pairs.len() as u64,
        mean_abs_error: if pairs.is_empty() {
            0.0
        } else {
            errors.clone().sum::<u64>() as f64 / count
        },
        max_abs_error: errors.max().unwrap_or(0),
        within_tolerance: share(pairs.iter().filter(|(r, s)| measure.within(*r, *s)).count()),
        recorded_peak: pairs.iter().map(|(r, _)| *r).max().unwrap_or(0),
        simulated_peak: pairs.iter().map(|(_, s)| *s).max().unwrap_or(0),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::input::{NodeCount, PodPhaseCounts, ResourceUsage, Sample};
    use super::super::percentiles::ms;
    use super::*;
    use ksim_proto::json::to_millis;

    fn offset_ms(bucket: &FidelityBucket) -> u64 {
        to_millis(bucket.offset.as_ref())
    }

    fn nodes(bucket: &FidelityBucket, simulated: bool) -> u64 {
        Measure::Nodes.value(side(bucket, simulated))
    }

    fn series<'a>(fidelity: &'a Fidelity, name: &str) -> Option<&'a FidelitySeries> {
        fidelity.series.iter().find(|series| series.name == name)
    }

    fn state(group_nodes: &[(&str, u64)], running: u64, pending: u64) -> ClusterState {
        ClusterState {
            ready_nodes: group_nodes
                .iter()
                .map(|(group, nodes)| ((*group).to_owned(), *nodes))
                .collect(),
            pods_running: running,
            pods_pending: pending,
        }
    }

    fn recorded_at(secs: u64, state: ClusterState) -> RecordedState {
        RecordedState {
            offset: Duration::from_secs(secs),
            state,
        }
    }

    /// A simulated sample at `wall_ms` of the replay's wall clock.
    fn sample(wall_ms: u64, ready: u64, running: u64, pending: u64) -> Sample {
        Sample {
            offset: Duration::from_millis(wall_ms),
            nodes: BTreeMap::from([(
                "m5".to_owned(),
                NodeCount {
                    nodes: ready + 1,
                    ready,
                    ..NodeCount::default()
                },
            )]),
            pods: PodPhaseCounts {
                running,
                pending,
                ..PodPhaseCounts::default()
            },
            unscheduled: 0,
            usage: ResourceUsage::default(),
            gpus: Vec::new(),
            pending_gpu_pods: 0,
        }
    }

    #[test]
    fn no_recorded_cluster_means_no_fidelity() {
        let obs = Observations {
            samples: vec![sample(0, 1, 0, 0)],
            ..Observations::default()
        };
        assert_eq!(compare(&obs), None);
    }

    #[test]
    fn buckets_compare_both_clusters_as_at_their_end() {
        // Recorded: 2 nodes, 4 nodes from 7 s, back to 2 from 16 s.
        // Simulated (1x): 2 nodes, 4 from 9 s (2 s late), 2 from 21 s (5 s late).
        let obs = Observations {
            speed: 1.0,
            recorded: Some(vec![
                recorded_at(0, state(&[("m5", 2)], 0, 10)),
                recorded_at(7, state(&[("m5", 4)], 10, 0)),
                recorded_at(16, state(&[("m5", 2)], 10, 0)),
            ]),
            samples: (0..=22)
                .map(|s| {
                    let (ready, running, pending) = match s {
                        0..9 => (2, 0, 10),
                        9..21 => (4, 10, 0),
                        _ => (2, 10, 0),
                    };
                    sample(s * 1000, ready, running, pending)
                })
                .collect(),
            ..Observations::default()
        };
        let fidelity = compare(&obs).unwrap();
        assert_eq!(to_millis(fidelity.bucket_width.as_ref()), 5000);
        let offsets: Vec<u64> = fidelity.buckets.iter().map(offset_ms).collect();
        // The last bucket (20-25 s) ends at the last sample, 22 s.
        assert_eq!(offsets, [0, 5000, 10_000, 15_000, 20_000]);
        let nodes: Vec<(u64, u64)> = fidelity
            .buckets
            .iter()
            .map(|b| (nodes(b, false), nodes(b, true)))
            .collect();
        // At 4.999 s, 9.999 s, 14.999 s, 19.999 s and 22 s.
        assert_eq!(nodes, [(2, 2), (4, 4), (4, 4), (2, 4), (2, 2)]);

        let total = series(&fidelity, "nodes").unwrap();
        assert_eq!(total.buckets, 5);
        assert_eq!(total.max_abs_error, 2);
        assert!((total.mean_abs_error - 0.4).abs() < 1e-9, "{total:?}");
        assert!((total.within_tolerance - 0.8).abs() < 1e-9, "{total:?}");
        assert_eq!((total.recorded_peak, total.simulated_peak), (4, 4));
        assert_eq!(
            series(&fidelity, "nodes/m5").unwrap(),
            &FidelitySeries {
                name: "nodes/m5".into(),
                ..total.clone()
            }
        );
        // Pods: recorded 10 running from 7 s; simulated from 9 s: both at 9.999 s.
        let running = series(&fidelity, "pods_running").unwrap();
        assert_eq!(running.max_abs_error, 0);
        assert_eq!(running.within_tolerance, 1.0);
        let names: Vec<&str> = fidelity.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["nodes", "nodes/m5", "pods_running", "pods_pending"]);
    }

    #[test]
    fn a_fast_replay_is_compared_in_recorded_time() {
        // At 10x, wall 1.2 s is recorded 12 s: the 10-15 s bucket sees the simulated 4 nodes.
        let obs = Observations {
            speed: 10.0,
            recorded: Some(vec![
                recorded_at(0, state(&[("m5", 2)], 0, 0)),
                recorded_at(11, state(&[("m5", 4)], 0, 0)),
            ]),
            samples: vec![
                sample(0, 2, 0, 0),
                sample(1200, 4, 0, 0),
                sample(1500, 4, 0, 0),
            ],
            ..Observations::default()
        };
        let fidelity = compare(&obs).unwrap();
        let nodes: Vec<(u64, u64, u64)> = fidelity
            .buckets
            .iter()
            .map(|b| (offset_ms(b), nodes(b, false), nodes(b, true)))
            .collect();
        assert_eq!(
            nodes,
            [(0, 2, 2), (5000, 2, 2), (10_000, 4, 4), (15_000, 4, 4)]
        );
        assert_eq!(series(&fidelity, "nodes").unwrap().within_tolerance, 1.0);
    }

    #[test]
    fn pods_are_within_tolerance_at_five_percent_and_groups_of_either_side_count() {
        let obs = Observations {
            recorded: Some(vec![recorded_at(0, state(&[("", 1), ("c5", 3)], 100, 0))]),
            samples: vec![sample(0, 2, 95, 1), sample(5000, 2, 94, 0)],
            ..Observations::default()
        };
        let fidelity = compare(&obs).unwrap();
        let running = series(&fidelity, "pods_running").unwrap();
        // 95 of 100 is within 5%, 94 is not.
        assert_eq!(running.within_tolerance, 0.5);
        assert_eq!(running.max_abs_error, 6);
        // One pending pod against none recorded: 5% of 0 is 0.
        assert_eq!(
            series(&fidelity, "pods_pending").unwrap().within_tolerance,
            0.5
        );
        // Groups only recorded, and only simulated, are compared against 0.
        let c5 = series(&fidelity, "nodes/c5").unwrap();
        assert_eq!((c5.recorded_peak, c5.simulated_peak), (3, 0));
        let m5 = series(&fidelity, "nodes/m5").unwrap();
        assert_eq!((m5.recorded_peak, m5.simulated_peak), (0, 2));
        assert!(series(&fidelity, "nodes/(no group)").is_some());
        // Recorded 4 in all, simulated 2.
        assert_eq!(series(&fidelity, "nodes").unwrap().max_abs_error, 2);
    }

    #[test]
    fn pending_time_and_pod_seconds_are_compared_in_recorded_time() {
        // At 2x: a simulated pod pending 3 s of wall clock waited 6 s of recorded time.
        let obs = Observations {
            speed: 2.0,
            recorded: Some(vec![
                recorded_at(0, state(&[("m5", 1)], 0, 2)),
                recorded_at(5, state(&[("m5", 1)], 4, 0)),
            ]),
            samples: vec![
                sample(0, 1, 0, 2),
                sample(2500, 1, 2, 0),
                sample(5000, 1, 2, 0),
            ],
            pending_times: vec![Duration::from_secs(3), Duration::from_secs(1)],
            recorded_pending: Some(vec![Duration::from_secs(4), Duration::from_secs(8)]),
            ..Observations::default()
        };
        let pending = compare(&obs).unwrap().pending.unwrap();
        let simulated = pending.simulated.unwrap();
        assert_eq!(
            (
                simulated.count,
                ms(simulated.p50.as_ref()),
                ms(simulated.p90.as_ref())
            ),
            (2, 2000.0, 6000.0)
        );
        let recorded = pending.recorded.unwrap();
        assert_eq!(
            (
                recorded.count,
                ms(recorded.p50.as_ref()),
                ms(recorded.p90.as_ref())
            ),
            (2, 4000.0, 8000.0)
        );
        // Buckets at 0, 5 and 10 s (the last sample, wall 5 s, is recorded 10 s), compared at
        // 4.999 s, 9.999 s and 10 s: recorded 0, 4, 4 running; simulated 0 (its 2 running
        // came at recorded 5 s), 2, 2; each bucket 5 s.
        assert_eq!(pending.recorded_running_pod_seconds, 40.0);
        assert_eq!(pending.simulated_running_pod_seconds, 20.0);

        let unknown = Observations {
            recorded_pending: None,
            ..obs
        };
        assert_eq!(compare(&unknown).unwrap().pending.unwrap().recorded, None);
    }

    fn added(group: &str, kind: NodeChangeKind, cause: NodeChangeCause) -> NodeChange {
        NodeChange {
            group: group.to_owned(),
            node: "n".to_owned(),
            kind: kind.into(),
            cause: cause.into(),
            ..NodeChange::default()
        }
    }

    fn delay(scope: &str, delay: &str, samples: u64) -> DelaySamples {
        DelaySamples {
            scope: scope.to_owned(),
            delay: delay.to_owned(),
            samples,
        }
    }

    #[test]
    fn a_sampled_delay_drawn_more_often_than_its_samples_is_warned_of() {
        use NodeChangeCause::{Autoscaler, Reregistration};
        let delays = [
            delay("nodes", "registration", 6),
            delay("nodes", "ready", 0),
            delay("nodes", "termination", 3),
            delay("nodes/gpu", "registration", 2),
        ];
        let mut changes: Vec<NodeChange> = (0..7)
            .map(|_| added("m5", NodeChangeKind::Added, Autoscaler))
            .collect();
        changes.extend((0..3).map(|_| added("m5", NodeChangeKind::Removed, Autoscaler)));
        changes.push(added("gpu", NodeChangeKind::Added, Autoscaler));
        // The pool putting a node back draws nothing.
        changes.push(added("gpu", NodeChangeKind::Added, Reregistration));
        let warnings = few_samples_warnings(&delays, &changes, 0);
        assert_eq!(
            warnings,
            [
                "the provisioning model's default node registration delay holds 6 samples and the \
              replay drew it 7 times: its draws repeat those few, so pending times follow them \
              rather than the recording's spread"
            ],
            "ready is percentiles, termination drawn 3 of 3, gpu's own 1 of 2"
        );
        changes.push(added("gpu", NodeChangeKind::Added, Autoscaler));
        changes.push(added("gpu", NodeChangeKind::Added, Autoscaler));
        let warnings = few_samples_warnings(&delays, &changes, 0);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[1].starts_with(
                "the provisioning model's node registration delay for group gpu holds 2 \
                 samples and the replay drew it 3 times"
            ),
            "{warnings:?}"
        );
        // Each pod that started drew the pod start delay once.
        let pods = [delay("pods", "start", 4)];
        assert!(few_samples_warnings(&pods, &[], 4).is_empty());
        assert_eq!(
            few_samples_warnings(&pods, &[], 9),
            [
                "the provisioning model's pod start delay holds 4 samples and the replay drew it \
                 9 times: its draws repeat those few, so pending times follow them rather than \
                 the recording's spread"
            ]
        );
    }

    #[test]
    fn buckets_before_the_recording_began_are_left_out() {
        let obs = Observations {
            recorded: Some(vec![recorded_at(6, state(&[("m5", 1)], 0, 0))]),
            samples: vec![sample(0, 1, 0, 0), sample(12_000, 1, 0, 0)],
            ..Observations::default()
        };
        let fidelity = compare(&obs).unwrap();
        let offsets: Vec<u64> = fidelity.buckets.iter().map(offset_ms).collect();
        assert_eq!(offsets, [5000, 10_000]);
        assert_eq!(series(&fidelity, "nodes").unwrap().buckets, 2);
    }
}
