//! The provisioning model as the pool applies it to a group's nodes: a node registers
//! `registration` after its scale-up, is Ready `ready` after it registered, and when its seat
//! goes (or its pool-managed group shrinks) stays `termination` longer, unschedulable and
//! NotReady, before it is deleted. Every delay is drawn per node from the group's seeded stream
//! (`Draws::new(seed, group)`, in the order the pool creates the group's nodes) and run divided
//! by the speed. Pure: the caller passes the time in.

use std::time::Duration;

use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};
use ksim_nodes::node::Phase;
use ksim_provisioning::{Draws, GroupProvisioning, ModelError};

/// One node's delays in the simulation's time (the model's draws divided by the speed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeDelays {
    pub registration: Duration,
    pub ready: Duration,
    pub termination: Duration,
}

/// A group's model and the stream its nodes' delays come from.
#[derive(Debug, Clone)]
pub struct GroupModel {
    provisioning: GroupProvisioning,
    draws: Draws,
}

impl GroupModel {
    /// The stream starts at its first draw: a model given anew (a changed annotation, a pool
    /// restarted) draws its nodes' delays from the beginning again.
    pub fn new(provisioning: GroupProvisioning, group: &str) -> Self {
        let draws = Draws::new(provisioning.seed, group);
        Self {
            provisioning,
            draws,
        }
    }

    pub fn provisioning(&self) -> &GroupProvisioning {
        &self.provisioning
    }

    /// The next node's delays: registration, ready and termination drawn in that order, so a
    /// node's draws never depend on when its group scales down.
    pub fn next_node(&mut self) -> NodeDelays {
        let nodes = &self.provisioning.nodes;
        let mut draw = |delay| self.provisioning.as_run(self.draws.next(delay));
        NodeDelays {
            registration: draw(&nodes.registration),
            ready: draw(&nodes.ready),
            termination: draw(&nodes.termination),
        }
    }

    /// Whether a removed node of the group can linger at all.
    pub fn lingers(&self) -> bool {
        !self.provisioning.nodes.termination.is_zero()
    }
}

/// A group's model from the text of an annotation or a request field; empty text is none.
pub fn parse(text: &str) -> Result<Option<GroupProvisioning>, ModelError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    GroupProvisioning::from_json(text).map(Some)
}

/// `at` plus `delay`, saturating at the latest time jiff holds.
pub fn after(at: Timestamp, delay: Duration) -> Timestamp {
    if delay.is_zero() {
        return at;
    }
    jiff_duration(delay)
        .and_then(|delay| at.checked_add(delay).ok())
        .unwrap_or(Timestamp::MAX)
}

fn jiff_duration(delay: Duration) -> Option<k8s_openapi::jiff::SignedDuration> {
    k8s_openapi::jiff::SignedDuration::try_from(delay).ok()
}

/// How long from `now` until `at`; zero if it has come.
pub fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// The earliest of `times`, as a wait from `now` (zero for one already due).
pub fn next_wait(now: Timestamp, times: impl IntoIterator<Item = Timestamp>) -> Option<Duration> {
    times.into_iter().min().map(|at| until(now, at))
}

/// When a node is due to register: `registration` after its scale-up.
pub fn register_at(scaled_up: Timestamp, delays: &NodeDelays) -> Timestamp {
    after(scaled_up, delays.registration)
}

/// When a registered node's life changes by its model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTimes {
    /// When the node registered (the Node's creationTimestamp).
    pub created: Timestamp,
    /// When it turns Ready; `None`: Ready from its registration.
    pub ready_at: Option<Timestamp>,
    /// Shutting down since the first time, gone at the second.
    pub terminating: Option<(Timestamp, Timestamp)>,
}

impl NodeTimes {
    /// The node's phase at `now` and since when its Ready condition has said so.
    pub fn phase(&self, now: Timestamp) -> (Phase, Timestamp) {
        match (self.terminating, self.ready_at) {
            (Some((since, _)), _) => (Phase::ShuttingDown, since),
            (None, Some(ready_at)) if now < ready_at => (Phase::Booting, self.created),
            (None, Some(ready_at)) => (Phase::Ready, ready_at),
            (None, None) => (Phase::Ready, self.created),
        }
    }
}

/// An RFC 3339 time as the node annotations hold it.
pub fn format_time(at: Timestamp) -> String {
    at.to_string()
}

/// The time a node annotation holds (`ksim.io/booting-until`, `ksim.io/terminating-until`);
/// `None` when absent or unreadable (a node nobody should trust for it).
pub fn annotated_time(node: &Node, key: &str) -> Option<Timestamp> {
    node.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ksim_provisioning::{Delay, NodeDelays as ModelDelays};

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn provisioning(registration: Delay, ready: Delay, termination: Delay) -> GroupProvisioning {
        GroupProvisioning {
            model: "m".to_owned(),
            seed: 7,
            speed: 2.0,
            nodes: ModelDelays {
                registration,
                ready,
                termination,
            },
        }
    }

    #[test]
    fn delays_are_divided_by_the_speed() {
        let mut model = GroupModel::new(
            provisioning(
                Delay::fixed_secs(40),
                Delay::fixed_secs(10),
                Delay::fixed_secs(30),
            ),
            "g",
        );
        assert_eq!(
            model.next_node(),
            NodeDelays {
                registration: Duration::from_secs(20),
                ready: Duration::from_secs(5),
                termination: Duration::from_secs(15),
            }
        );
        assert!(model.lingers());
    }

    #[test]
    fn the_same_seed_and_group_draw_the_same_delays_in_order() {
        let spread = Delay::Percentiles {
            p50: Duration::from_secs(40),
            p90: Some(Duration::from_secs(70)),
            p99: None,
        };
        let model = || {
            GroupModel::new(
                provisioning(spread.clone(), spread.clone(), spread.clone()),
                "g",
            )
        };
        let draws = |mut model: GroupModel| (0..5).map(|_| model.next_node()).collect::<Vec<_>>();
        let first = draws(model());
        assert_eq!(first, draws(model()), "seeded: the same delays again");
        assert_ne!(first[0], first[1], "each node draws its own");
        // Another group's stream is another.
        let other = GroupModel::new(provisioning(spread.clone(), spread.clone(), spread), "h");
        assert_ne!(first, draws(other));
        // A node's draws come from the stream in creation order: registration, ready,
        // termination, then the next node's.
        let mut stream = Draws::new(7, "g");
        let spread = Delay::Percentiles {
            p50: Duration::from_secs(40),
            p90: Some(Duration::from_secs(70)),
            p99: None,
        };
        let expected = stream.next(&spread).as_secs_f64() / 2.0;
        assert!((first[0].registration.as_secs_f64() - expected).abs() < 1e-6);
    }

    #[test]
    fn zero_delays_change_nothing() {
        let mut model = GroupModel::new(
            provisioning(Delay::default(), Delay::default(), Delay::default()),
            "g",
        );
        let delays = model.next_node();
        assert_eq!(delays, NodeDelays::default());
        assert!(!model.lingers());
        let now = at("2026-03-01T12:00:00Z");
        // Due at the scale-up itself: registered on the same pass, as without a model.
        assert_eq!(register_at(now, &delays), now);
        let times = NodeTimes {
            created: now,
            ready_at: None,
            terminating: None,
        };
        assert_eq!(times.phase(now), (Phase::Ready, now));
    }

    #[test]
    fn a_node_boots_then_is_ready_then_shuts_down() {
        let created = at("2026-03-01T12:00:00Z");
        let ready_at = at("2026-03-01T12:00:30Z");
        let mut times = NodeTimes {
            created,
            ready_at: Some(ready_at),
            terminating: None,
        };
        assert_eq!(times.phase(created), (Phase::Booting, created));
        assert_eq!(
            times.phase(at("2026-03-01T12:00:29Z")),
            (Phase::Booting, created)
        );
        assert_eq!(times.phase(ready_at), (Phase::Ready, ready_at));
        let since = at("2026-03-01T12:05:00Z");
        times.terminating = Some((since, at("2026-03-01T12:06:00Z")));
        assert_eq!(times.phase(since), (Phase::ShuttingDown, since));
    }

    #[test]
    fn due_times_and_waits() {
        let now = at("2026-03-01T12:00:00Z");
        let delays = NodeDelays {
            registration: Duration::from_secs(90),
            ..NodeDelays::default()
        };
        let scaled_up = at("2026-03-01T11:59:00Z");
        // The scale-up was a minute ago: 30 s to go.
        let due = register_at(scaled_up, &delays);
        assert_eq!(due, at("2026-03-01T12:00:30Z"));
        assert_eq!(
            next_wait(now, [due, at("2026-03-01T12:01:00Z")]),
            Some(Duration::from_secs(30))
        );
        // One already due is waited for not at all.
        assert_eq!(
            next_wait(now, [at("2026-03-01T11:00:00Z"), due]),
            Some(Duration::ZERO)
        );
        assert_eq!(next_wait(now, []), None);
        // A delay past what a timestamp holds saturates instead of failing.
        assert_eq!(after(now, Duration::MAX), Timestamp::MAX);
    }

    #[test]
    fn models_parse_from_json_and_empty_is_none() {
        assert_eq!(parse("").unwrap(), None);
        let given = provisioning(
            Delay::fixed_secs(1),
            Delay::fixed_secs(2),
            Delay::fixed_secs(3),
        );
        assert_eq!(parse(&given.to_json()).unwrap(), Some(given));
        let error = parse("{\"model\":\"m\",\"seed\":1,\"speed\":0,\"nodes\":{}}").unwrap_err();
        assert!(error.to_string().contains("speed"), "{error}");
        assert!(parse("not json").is_err());
    }

    #[test]
    fn annotated_times_read_back() {
        let now = at("2026-03-01T12:00:00.5Z");
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "n", "annotations": {
                "ksim.io/booting-until": format_time(now),
                "ksim.io/terminating-until": "soon",
            } }
        }))
        .unwrap();
        assert_eq!(annotated_time(&node, "ksim.io/booting-until"), Some(now));
        assert_eq!(annotated_time(&node, "ksim.io/terminating-until"), None);
        assert_eq!(annotated_time(&node, "other"), None);
    }
}
