//! Matching replayed pods to recorded launches, so each pod runs as long as its recorded
//! counterpart did.
//!
//! A recorded lifetime is keyed by owner, pod spec and launch index. A replayed pod's spec is not
//! the recorded one (the replay rewrites templates, and the apiserver defaults fields the
//! recording does not show), so specs are matched by order: the n-th distinct spec among the
//! replayed pods of an owner, in the order their first pod started, is the n-th recorded one.
//! Within a spec, the n-th replayed pod to start is launch n, as the tracer counts.

use std::collections::HashMap;

use super::lifetimes::{Lifetimes, Owner, annotation_value};

#[derive(Debug, Clone)]
pub struct Launches {
    lifetimes: Lifetimes,
    speed: f64,
    /// Per owner: each replayed spec hash's index among the owner's specs and how many of its
    /// pods have started.
    started: HashMap<Owner, HashMap<u64, (usize, u32)>>,
}

impl Launches {
    /// `speed` must be finite and > 0; lifetimes are divided by it.
    pub fn new(lifetimes: Lifetimes, speed: f64) -> Self {
        Self {
            lifetimes,
            speed,
            started: HashMap::new(),
        }
    }

    /// The owner a replayed pod's lifetime is recorded under, given its chain of owners (the pod
    /// itself, its controller, that one's controller, ..., with recorded namespaces): the
    /// topmost the recording has lifetimes for, as the tracer records the topmost tracked owner.
    pub fn owner_of<'a>(&self, chain: &'a [Owner]) -> Option<&'a Owner> {
        chain
            .iter()
            .rev()
            .find(|owner| self.lifetimes.has_owner(owner))
    }

    /// Counts one started pod of `owner` whose spec hashes to `spec_hash` and returns the
    /// `ksim.io/lifetime-ms` value it should carry: its launch's recorded lifetime, or `None`
    /// when that launch did not end on its own (or the replay started more pods than recorded).
    pub fn start(&mut self, owner: &Owner, spec_hash: u64) -> Option<String> {
        let specs = self.started.entry(owner.clone()).or_default();
        let next_spec = specs.len();
        let (spec_index, started) = specs.entry(spec_hash).or_insert((next_spec, 0));
        let launch_index = *started;
        *started = started.saturating_add(1);
        self.lifetimes
            .launch(owner, *spec_index, launch_index)
            .map(|lifetime| annotation_value(lifetime, self.speed))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use ksim_trace::pb;

    use super::*;
    use crate::domain::Gvk;

    fn deployment() -> Gvk {
        Gvk::new("apps", "v1", "Deployment")
    }

    fn web() -> Owner {
        Owner::new(deployment(), "shop", "web")
    }

    fn recorded(
        spec_hash: u64,
        launch_index: u32,
        start_ms: i64,
        lifetime_ms: Option<i64>,
    ) -> pb::PodLifecycle {
        let (end_ms, outcome) = match lifetime_ms {
            Some(lifetime) => (start_ms + lifetime, pb::PodOutcome::Failed),
            None => (0, pb::PodOutcome::Running),
        };
        pb::PodLifecycle {
            owner_gvk: Some(pb::GroupVersionKind::from(&deployment())),
            owner_namespace: "shop".to_owned(),
            owner_name: "web".to_owned(),
            pod_spec_hash: spec_hash,
            launch_index,
            start_ms,
            end_ms,
            outcome: outcome as i32,
            ..Default::default()
        }
    }

    #[test]
    fn launches_are_matched_by_spec_order_then_start_order() {
        // Spec 7 (first started): launch 0 failed after 2 s, launch 1 ran on. Spec 3 (a
        // rollout): launch 0 failed after 5 s.
        let lifetimes = Lifetimes::from_lifecycles(&[
            recorded(7, 0, 0, Some(2_000)),
            recorded(7, 1, 2_000, None),
            recorded(3, 0, 10_000, Some(5_000)),
        ]);
        let mut launches = Launches::new(lifetimes, 2.0);
        // Replayed hashes differ from the recorded ones; their order is what counts.
        assert_eq!(launches.start(&web(), 100), Some("1000".to_owned()));
        assert_eq!(launches.start(&web(), 100), None, "launch 1 ran on");
        assert_eq!(launches.start(&web(), 200), Some("2500".to_owned()));
        assert_eq!(launches.start(&web(), 100), None, "more than recorded");
        assert_eq!(launches.start(&web(), 200), None, "more than recorded");
        assert_eq!(launches.start(&web(), 300), None, "a third spec");
    }

    #[test]
    fn owners_count_their_launches_apart() {
        let other = Owner::new(deployment(), "shop", "api");
        let lifetimes = Lifetimes::from_lifecycles(&[recorded(1, 0, 0, Some(1_000))]);
        let mut launches = Launches::new(lifetimes, 1.0);
        assert_eq!(launches.start(&other, 5), None);
        assert_eq!(launches.start(&web(), 5), Some("1000".to_owned()));
    }

    #[test]
    fn the_topmost_owner_with_lifetimes_is_chosen() {
        let lifetimes = Lifetimes::from_lifecycles(&[recorded(1, 0, 0, Some(1_000))]);
        let launches = Launches::new(lifetimes, 1.0);
        let pod = Owner::new(Gvk::new("", "v1", "Pod"), "shop", "web-abc-x1");
        let replica_set = Owner::new(Gvk::new("apps", "v1", "ReplicaSet"), "shop", "web-abc");
        let chain = [pod.clone(), replica_set.clone(), web()];
        assert_eq!(launches.owner_of(&chain), Some(&web()));
        assert_eq!(launches.owner_of(&[pod, replica_set]), None);
    }
}
