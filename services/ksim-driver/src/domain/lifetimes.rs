//! Recorded pod lifetimes: per owner, per pod spec, per launch.
//!
//! The tracer records each pod's lifetime with its topmost tracked owner, a hash of its spec and
//! its launch index (its place in start order among the owner's pods of that spec). A replay
//! gives pods their lifetime two ways:
//! - the owner's pod template carries one `ksim.io/lifetime-ms`, the lifetime of the owner's
//!   earliest-launched pod that completed on its own ([`Lifetimes::recorded`]), so a pod has a
//!   lifetime from the moment it exists;
//! - when a replayed pod starts, it is matched to its recorded launch ([`super::launches`]) and
//!   its own annotation corrected to that launch's lifetime ([`Lifetimes::launch`]), or removed
//!   when that launch did not end on its own.
//!
//! Pods still running at the trace's end, or deleted by someone else, have no lifetime: their
//! controller, or the replayed deletes, end them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ksim_trace::pb;

use super::Gvk;

/// A recorded owner of pods: kind, namespace as recorded ("" when cluster-scoped), name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub gvk: Gvk,
    pub namespace: String,
    pub name: String,
}

impl Owner {
    pub fn new(gvk: Gvk, namespace: &str, name: &str) -> Self {
        Self {
            gvk,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// What the recording says of the pods of owners some of whose pods completed on their own.
/// Owners none of whose pods completed are left out: their pods never get a lifetime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifetimes {
    by_owner: HashMap<Owner, OwnerLifetimes>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnerLifetimes {
    /// The earliest completed pod's (start_ms, launch_index) and lifetime: the template's.
    template: ((i64, u32), Duration),
    /// The owner's pod specs in the order their first pod started.
    specs: Vec<RecordedSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct RecordedSpec {
    hash: u64,
    first_start_ms: i64,
    /// Lifetimes of the launches that completed on their own, by launch index; a launch not
    /// here ran until deleted or past the trace's end.
    completed: BTreeMap<u32, Duration>,
}

impl Lifetimes {
    pub fn from_lifecycles(lifecycles: &[pb::PodLifecycle]) -> Self {
        let mut specs_by_owner: HashMap<Owner, HashMap<u64, RecordedSpec>> = HashMap::new();
        let mut templates: HashMap<Owner, ((i64, u32), Duration)> = HashMap::new();
        for lifecycle in lifecycles {
            let Some(gvk) = lifecycle.owner_gvk.as_ref() else {
                continue;
            };
            let owner = Owner::new(
                Gvk::from(gvk),
                &lifecycle.owner_namespace,
                &lifecycle.owner_name,
            );
            let spec = specs_by_owner
                .entry(owner.clone())
                .or_default()
                .entry(lifecycle.pod_spec_hash)
                .or_insert_with(|| RecordedSpec {
                    hash: lifecycle.pod_spec_hash,
                    first_start_ms: lifecycle.start_ms,
                    completed: BTreeMap::new(),
                });
            spec.first_start_ms = spec.first_start_ms.min(lifecycle.start_ms);
            let Some(lifetime) = completed_lifetime(lifecycle) else {
                continue;
            };
            spec.completed.insert(lifecycle.launch_index, lifetime);
            let order = (lifecycle.start_ms, lifecycle.launch_index);
            templates
                .entry(owner)
                .and_modify(|current| {
                    if order < current.0 {
                        *current = (order, lifetime);
                    }
                })
                .or_insert((order, lifetime));
        }
        let by_owner = templates
            .into_iter()
            .map(|(owner, template)| {
                let mut specs: Vec<RecordedSpec> = specs_by_owner
                    .remove(&owner)
                    .unwrap_or_default()
                    .into_values()
                    .collect();
                // The hash breaks ties only so that the order does not depend on a HashMap's.
                specs.sort_by_key(|spec| (spec.first_start_ms, spec.hash));
                (owner, OwnerLifetimes { template, specs })
            })
            .collect();
        Self { by_owner }
    }

    /// The lifetime to put on the pod template of `owner` (namespace "" when cluster-scoped),
    /// if any of its pods completed on their own in the recording.
    pub fn recorded(&self, owner: &Gvk, namespace: &str, name: &str) -> Option<Duration> {
        self.by_owner
            .get(&Owner::new(owner.clone(), namespace, name))
            .map(|recorded| recorded.template.1)
    }

    /// Whether no recorded pod completed on its own: then no replayed pod needs matching.
    pub fn is_empty(&self) -> bool {
        self.by_owner.is_empty()
    }

    /// Whether any pod of `owner` completed on its own: only such owners' pods need matching.
    pub fn has_owner(&self, owner: &Owner) -> bool {
        self.by_owner.contains_key(owner)
    }

    /// The lifetime of launch `launch_index` of the `spec_index`-th spec (in first-start order)
    /// of `owner`'s pods; `None` if that launch did not complete on its own or was not recorded.
    pub fn launch(&self, owner: &Owner, spec_index: usize, launch_index: u32) -> Option<Duration> {
        self.by_owner
            .get(owner)?
            .specs
            .get(spec_index)?
            .completed
            .get(&launch_index)
            .copied()
    }
}

/// The `ksim.io/lifetime-ms` value for a recorded `lifetime` replayed at `speed` (> 0).
pub fn annotation_value(lifetime: Duration, speed: f64) -> String {
    format!("{:.0}", (lifetime.as_secs_f64() * 1000.0 / speed).round())
}

/// How long a recorded pod ran, if it ended on its own. A pod that ended in an unknown way
/// (SimKube records when, not how) counts as ended on its own, as SimKube replays it; one that
/// was deleted does not, since the replayed deletes or its controller end it again.
fn completed_lifetime(lifecycle: &pb::PodLifecycle) -> Option<Duration> {
    let completed = match lifecycle.outcome() {
        pb::PodOutcome::Succeeded | pb::PodOutcome::Failed => true,
        pb::PodOutcome::Unspecified => lifecycle.end_ms != 0,
        pb::PodOutcome::Running | pb::PodOutcome::Deleted => false,
    };
    if !completed || lifecycle.end_ms < lifecycle.start_ms {
        return None;
    }
    let lifetime_ms = lifecycle.end_ms.saturating_sub(lifecycle.start_ms);
    Some(Duration::from_millis(
        u64::try_from(lifetime_ms).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn job() -> Gvk {
        Gvk::new("batch", "v1", "Job")
    }

    fn lifecycle(
        name: &str,
        launch_index: u32,
        start_ms: i64,
        end_ms: i64,
        outcome: pb::PodOutcome,
    ) -> pb::PodLifecycle {
        pb::PodLifecycle {
            owner_gvk: Some(pb::GroupVersionKind::from(&job())),
            owner_namespace: "team".to_owned(),
            owner_name: name.to_owned(),
            launch_index,
            start_ms,
            end_ms,
            outcome: outcome as i32,
            pod_name: format!("{name}-{launch_index}"),
            ..Default::default()
        }
    }

    #[test]
    fn earliest_completed_pod_gives_the_owner_its_lifetime() {
        let lifetimes = Lifetimes::from_lifecycles(&[
            lifecycle("a", 2, 5_000, 9_000, pb::PodOutcome::Succeeded),
            lifecycle("a", 1, 1_000, 31_000, pb::PodOutcome::Failed),
            // Same start, higher launch index: not the earliest.
            lifecycle("a", 3, 1_000, 2_000, pb::PodOutcome::Succeeded),
            // Earlier, but it did not complete on its own.
            lifecycle("a", 0, 0, 500, pb::PodOutcome::Deleted),
        ]);
        assert_eq!(
            lifetimes.recorded(&job(), "team", "a"),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn running_deleted_and_backwards_pods_give_no_lifetime() {
        let lifetimes = Lifetimes::from_lifecycles(&[
            lifecycle("running", 0, 0, 10_000, pb::PodOutcome::Running),
            lifecycle("deleted", 0, 0, 10_000, pb::PodOutcome::Deleted),
            lifecycle("not-ended", 0, 5_000, 0, pb::PodOutcome::Unspecified),
            lifecycle("backwards", 0, 10_000, 5_000, pb::PodOutcome::Succeeded),
        ]);
        assert_eq!(lifetimes, Lifetimes::default());
        assert_eq!(lifetimes.recorded(&job(), "team", "running"), None);
    }

    #[test]
    fn pods_that_ended_in_an_unknown_way_complete_as_simkube_replays_them() {
        // What a converted SimKube trace holds for a finished pod.
        let lifetimes = Lifetimes::from_lifecycles(&[lifecycle(
            "imported",
            0,
            2_000,
            9_000,
            pb::PodOutcome::Unspecified,
        )]);
        assert_eq!(
            lifetimes.recorded(&job(), "team", "imported"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            lifetimes.launch(&Owner::new(job(), "team", "imported"), 0, 0),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn owners_are_told_apart_by_kind_namespace_and_name() {
        let lifetimes =
            Lifetimes::from_lifecycles(&[lifecycle("a", 0, 0, 1_000, pb::PodOutcome::Succeeded)]);
        assert_eq!(
            lifetimes.recorded(&job(), "team", "a"),
            Some(Duration::from_secs(1))
        );
        assert_eq!(lifetimes.recorded(&job(), "other", "a"), None);
        assert_eq!(lifetimes.recorded(&job(), "team", "b"), None);
        let deployment = Gvk::new("apps", "v1", "Deployment");
        assert_eq!(lifetimes.recorded(&deployment, "team", "a"), None);
    }

    fn launch_of_spec(
        spec_hash: u64,
        launch_index: u32,
        start_ms: i64,
        end_ms: i64,
        outcome: pb::PodOutcome,
    ) -> pb::PodLifecycle {
        pb::PodLifecycle {
            pod_spec_hash: spec_hash,
            ..lifecycle("a", launch_index, start_ms, end_ms, outcome)
        }
    }

    #[test]
    fn each_launch_of_each_spec_keeps_its_own_lifetime() {
        let owner = Owner::new(job(), "team", "a");
        // Listed out of order: spec 9 was first started after spec 7.
        let lifetimes = Lifetimes::from_lifecycles(&[
            launch_of_spec(9, 1, 9_000, 10_000, pb::PodOutcome::Succeeded),
            launch_of_spec(9, 0, 5_000, 8_000, pb::PodOutcome::Succeeded),
            launch_of_spec(7, 1, 2_100, 0, pb::PodOutcome::Running),
            launch_of_spec(7, 0, 0, 2_000, pb::PodOutcome::Failed),
        ]);
        assert!(lifetimes.has_owner(&owner));
        assert_eq!(lifetimes.launch(&owner, 0, 0), Some(Duration::from_secs(2)));
        assert_eq!(lifetimes.launch(&owner, 0, 1), None, "ran past the trace");
        assert_eq!(lifetimes.launch(&owner, 1, 0), Some(Duration::from_secs(3)));
        assert_eq!(lifetimes.launch(&owner, 1, 1), Some(Duration::from_secs(1)));
        assert_eq!(lifetimes.launch(&owner, 1, 2), None, "not recorded");
        assert_eq!(lifetimes.launch(&owner, 2, 0), None, "no third spec");
        // The template still gets the earliest completed launch's.
        assert_eq!(
            lifetimes.recorded(&job(), "team", "a"),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn owners_whose_pods_never_completed_need_no_matching() {
        let lifetimes = Lifetimes::from_lifecycles(&[
            lifecycle("a", 0, 0, 1_000, pb::PodOutcome::Succeeded),
            lifecycle("b", 0, 0, 0, pb::PodOutcome::Running),
        ]);
        assert!(lifetimes.has_owner(&Owner::new(job(), "team", "a")));
        assert!(!lifetimes.has_owner(&Owner::new(job(), "team", "b")));
        assert_eq!(
            lifetimes.launch(&Owner::new(job(), "team", "b"), 0, 0),
            None
        );
    }

    #[test]
    fn annotation_values_are_whole_milliseconds_divided_by_speed() {
        assert_eq!(annotation_value(Duration::from_secs(30), 10.0), "3000");
        assert_eq!(annotation_value(Duration::from_millis(2), 3.0), "1");
        assert_eq!(annotation_value(Duration::from_millis(1), 3.0), "0");
        assert_eq!(annotation_value(Duration::from_millis(1500), 1.0), "1500");
    }
}
