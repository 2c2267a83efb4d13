//! A node group as the provider sees it at one instant: its Deployment's replicas and limits,
//! its seats and what became of their nodes. Instances are derived from it.

use ksim_nodes::node::{parse_provider_id, provider_id};

use super::limits::SizeLimits;

/// Marks the node name in the provider ID of a replica that has no seat pod yet. `~` never
/// occurs in a pod name, so such IDs cannot collide with a seat's.
const PLACEHOLDER_MARK: char = '~';

/// What became of the node a seat stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Not registered yet.
    Absent,
    Registered,
    /// The Node object has a deletionTimestamp.
    Deleting,
}

/// One seat pod of the group (terminated seats are left out: they hold no replica).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub name: String,
    /// The pod has a deletionTimestamp: the ReplicaSet no longer counts it.
    pub deleting: bool,
    /// Bound, Running and Ready: the ReplicaSet ranks such pods by deletion cost; pods that are
    /// not would be removed before any of them.
    pub ready: bool,
    /// `controller.kubernetes.io/pod-deletion-cost`, 0 when unset.
    pub deletion_cost: i32,
    pub node: NodeState,
    /// The registered node reports Ready=True (false while NotReady or unreachable).
    pub node_ready: bool,
    /// The registered node is NotReady because it is booting by its group's provisioning
    /// model (`ksim_nodes::node::is_booting`): not a problem, what a new instance does.
    pub node_booting: bool,
}

/// A snapshot of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupState {
    pub id: String,
    pub namespace: String,
    pub deployment: String,
    pub limits: SizeLimits,
    /// The Deployment's `spec.replicas`: the target size.
    pub replicas: i32,
    pub seats: Vec<Seat>,
    /// Nodes with this group's provider IDs whose seat is gone (the pool is removing them,
    /// at once or after the termination delay of the group's provisioning model).
    pub orphan_nodes: Vec<String>,
    /// The group's provisioning model keeps removed nodes for a while: the pool deletes them
    /// when their termination delay has passed, so the provider must not delete them itself.
    pub nodes_linger: bool,
    /// Held for a replay that has not started: offered to cluster-autoscaler at min = max =
    /// its size (see [`GroupState::min_size`]).
    pub held: bool,
    /// The cloud has no capacity for the group now, and why: every scale-up is refused.
    pub stockout: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    Running,
    Creating,
    Deleting,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The provider ID the instance's node has or will have.
    pub id: String,
    pub state: InstanceState,
    /// Why a running instance is not healthy: its node is not Ready (the pool that plays its
    /// kubelet stopped, say). CA acts on unready nodes by its own rules; this says it plainly.
    pub problem: Option<String>,
}

/// What a provider ID names within a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// A seat pod, by name (= its node's name).
    Seat(String),
    /// A replica the ReplicaSet has not created a pod for yet.
    Placeholder,
}

impl GroupState {
    /// The fewest nodes a removal may leave: the min offered to cluster-autoscaler, which for a
    /// held group is its size. A retiring group keeps its own min, so a scale-down CA began
    /// before the group retired can finish.
    pub fn min_size(&self) -> i32 {
        if self.held {
            self.limits.min.max(self.replicas)
        } else {
            self.limits.min
        }
    }

    /// Seats the ReplicaSet still counts toward `replicas`.
    pub fn active_seats(&self) -> impl Iterator<Item = &Seat> {
        self.seats.iter().filter(|seat| !seat.deleting)
    }

    /// Replicas without a seat pod yet.
    pub fn placeholders(&self) -> i32 {
        let active = i32::try_from(self.active_seats().count()).unwrap_or(i32::MAX);
        (self.replicas - active).max(0)
    }

    pub fn seat(&self, name: &str) -> Option<&Seat> {
        self.seats.iter().find(|seat| seat.name == name)
    }

    /// One instance per seat, per replica not yet seated, and per node still going away.
    pub fn instances(&self) -> Vec<Instance> {
        let mut instances: Vec<Instance> = self
            .seats
            .iter()
            .map(|seat| {
                let state = match (seat.deleting, seat.node) {
                    (true, _) | (_, NodeState::Deleting) => InstanceState::Deleting,
                    (false, NodeState::Registered) => InstanceState::Running,
                    (false, NodeState::Absent) => InstanceState::Creating,
                };
                Instance {
                    id: provider_id(&self.id, &seat.name),
                    problem: (state == InstanceState::Running
                        && !seat.node_ready
                        && !seat.node_booting)
                        .then(|| {
                        format!(
                            "node {} is not Ready (NotReady or unreachable: is its pool running?)",
                            seat.name
                        )
                    }),
                    state,
                }
            })
            .collect();
        instances.extend((0..self.placeholders()).map(|n| Instance {
            id: self.placeholder_id(n),
            state: InstanceState::Creating,
            problem: None,
        }));
        instances.extend(self.orphan_nodes.iter().map(|node| Instance {
            id: provider_id(&self.id, node),
            state: InstanceState::Deleting,
            problem: None,
        }));
        instances
    }

    fn placeholder_id(&self, n: i32) -> String {
        provider_id(
            &self.id,
            &format!("{PLACEHOLDER_MARK}{}-{n}", self.deployment),
        )
    }
}

/// The group and member a provider ID names; `None` if it is not a `ksim://` ID.
pub fn member_of(id: &str) -> Option<(String, Member)> {
    let (group, node) = parse_provider_id(id)?;
    let member = if node.starts_with(PLACEHOLDER_MARK) {
        Member::Placeholder
    } else {
        Member::Seat(node)
    };
    Some((group, member))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn seat(name: &str, node: NodeState) -> Seat {
        Seat {
            name: name.to_owned(),
            deleting: false,
            ready: true,
            deletion_cost: 0,
            node,
            node_ready: true,
            node_booting: false,
        }
    }

    pub(crate) fn group(replicas: i32, seats: Vec<Seat>) -> GroupState {
        GroupState {
            id: "m5".to_owned(),
            namespace: "ksim-system".to_owned(),
            deployment: "seats-m5".to_owned(),
            limits: SizeLimits { min: 1, max: 10 },
            replicas,
            seats,
            orphan_nodes: Vec::new(),
            nodes_linger: false,
            held: false,
            stockout: None,
        }
    }

    #[test]
    fn instance_states_follow_seats_and_nodes() {
        let mut going = seat("c", NodeState::Registered);
        going.deleting = true;
        let mut state = group(
            4,
            vec![
                seat("a", NodeState::Registered),
                seat("b", NodeState::Absent),
                going,
                seat("d", NodeState::Deleting),
            ],
        );
        state.orphan_nodes.push("e".to_owned());
        let states: Vec<(String, InstanceState)> = state
            .instances()
            .into_iter()
            .map(|i| (i.id, i.state))
            .collect();
        assert_eq!(
            states,
            vec![
                ("ksim://m5/a".to_owned(), InstanceState::Running),
                ("ksim://m5/b".to_owned(), InstanceState::Creating),
                ("ksim://m5/c".to_owned(), InstanceState::Deleting),
                ("ksim://m5/d".to_owned(), InstanceState::Deleting),
                // 4 replicas, 3 active seats: one replica is not seated yet.
                ("ksim://m5/~seats-m5-0".to_owned(), InstanceState::Creating),
                ("ksim://m5/e".to_owned(), InstanceState::Deleting),
            ]
        );
    }

    #[test]
    fn instance_ids_resolve_back_to_their_member() {
        let state = group(2, vec![seat("a", NodeState::Registered)]);
        let members: Vec<_> = state.instances().iter().map(|i| member_of(&i.id)).collect();
        assert_eq!(
            members,
            vec![
                Some(("m5".to_owned(), Member::Seat("a".to_owned()))),
                Some(("m5".to_owned(), Member::Placeholder)),
            ]
        );
        assert_eq!(member_of("aws:///us-east-1a/i-0123"), None);
        assert_eq!(member_of(""), None);
    }

    #[test]
    fn more_seats_than_replicas_means_no_placeholders() {
        let state = group(
            1,
            vec![
                seat("a", NodeState::Registered),
                seat("b", NodeState::Absent),
            ],
        );
        assert_eq!(state.placeholders(), 0);
        assert_eq!(state.instances().len(), 2);
    }

    #[test]
    fn a_running_instance_whose_node_is_not_ready_says_so() {
        let mut unready = seat("b", NodeState::Registered);
        unready.node_ready = false;
        let state = group(2, vec![seat("a", NodeState::Registered), unready]);
        let problems: Vec<(InstanceState, Option<String>)> = state
            .instances()
            .into_iter()
            .map(|i| (i.state, i.problem))
            .collect();
        assert_eq!(problems[0], (InstanceState::Running, None));
        assert_eq!(problems[1].0, InstanceState::Running);
        assert!(
            problems[1]
                .1
                .as_deref()
                .is_some_and(|p| p.contains("node b is not Ready")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_node_booting_by_its_model_is_no_problem() {
        let mut booting = seat("b", NodeState::Registered);
        booting.node_ready = false;
        booting.node_booting = true;
        let state = group(1, vec![booting]);
        let instances = state.instances();
        assert_eq!(instances[0].state, InstanceState::Running);
        assert_eq!(instances[0].problem, None);
    }
}
