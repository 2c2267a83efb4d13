//! Recorded pod lifetimes, per owner, for the `ksim.io/lifetime-ms` annotation.
//!
//! The annotation goes on an owner's pod template, which every pod the owner makes shares, so
//! one lifetime per owner is all the template can carry: the lifetime of the owner's
//! earliest-launched pod that completed on its own. Matching each replayed launch to its
//! recorded pod (by launch index and spec hash) is a known refinement.
//!
//! Pods still running at the trace's end, or deleted by someone else, get no lifetime: their
//! controller, or the replayed deletes, end them.

use std::collections::HashMap;
use std::time::Duration;

use ksim_trace::pb;

use super::Gvk;

/// Owner: kind, namespace ("" when cluster-scoped), name.
type OwnerKey = (Gvk, String, String);

/// One recorded lifetime per owner whose pods completed on their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifetimes {
    /// The chosen pod's (start_ms, launch_index), kept to pick the earliest, and its lifetime.
    by_owner: HashMap<OwnerKey, ((i64, u32), Duration)>,
}

impl Lifetimes {
    pub fn from_lifecycles(lifecycles: &[pb::PodLifecycle]) -> Self {
        let mut by_owner: HashMap<OwnerKey, ((i64, u32), Duration)> = HashMap::new();
        for lifecycle in lifecycles {
            let completed = matches!(
                lifecycle.outcome(),
                pb::PodOutcome::Succeeded | pb::PodOutcome::Failed
            );
            let Some(gvk) = lifecycle.owner_gvk.as_ref() else {
                continue;
            };
            if !completed || lifecycle.end_ms < lifecycle.start_ms {
                continue;
            }
            let lifetime_ms = lifecycle.end_ms.saturating_sub(lifecycle.start_ms);
            let lifetime = Duration::from_millis(u64::try_from(lifetime_ms).unwrap_or(u64::MAX));
            let order = (lifecycle.start_ms, lifecycle.launch_index);
            let key = (
                Gvk::from(gvk),
                lifecycle.owner_namespace.clone(),
                lifecycle.owner_name.clone(),
            );
            by_owner
                .entry(key)
                .and_modify(|current| {
                    if order < current.0 {
                        *current = (order, lifetime);
                    }
                })
                .or_insert((order, lifetime));
        }
        Self { by_owner }
    }

    /// The lifetime to give the pods of `owner` (namespace "" when cluster-scoped), if its pods
    /// completed on their own in the recording.
    pub fn recorded(&self, owner: &Gvk, namespace: &str, name: &str) -> Option<Duration> {
        self.by_owner
            .get(&(owner.clone(), namespace.to_owned(), name.to_owned()))
            .map(|(_, lifetime)| *lifetime)
    }
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
            lifecycle("unknown", 0, 0, 10_000, pb::PodOutcome::Unspecified),
            lifecycle("backwards", 0, 10_000, 5_000, pb::PodOutcome::Succeeded),
        ]);
        assert_eq!(lifetimes, Lifetimes::default());
        assert_eq!(lifetimes.recorded(&job(), "team", "running"), None);
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
}
