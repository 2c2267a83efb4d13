//! How a resize request becomes changes to a seat Deployment, checked against the group's
//! limits before anything is written, so a refused request changes nothing.

use std::collections::BTreeSet;

use thiserror::Error;

use super::group::{GroupState, Member, NodeState, member_of};

/// The deletion cost marking the seats chosen to go: the ReplicaSet removes the lowest first.
pub const CHOSEN_DELETION_COST: i32 = i32::MIN;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PlanError {
    #[error("delta must be {expected}, got {delta}")]
    BadDelta { delta: i32, expected: &'static str },
    #[error(
        "increasing node group {group} by {delta} to {wanted} exceeds its max size {max} (current target {current})"
    )]
    AboveMax {
        group: String,
        delta: i32,
        wanted: i64,
        max: i32,
        current: i32,
    },
    /// CA's contract: DeleteNodes keeps the group at or above its min size (only its
    /// ForceDeleteNodes may not); CA checks before calling, so this stops other callers.
    #[error(
        "removing {removing} node(s) from node group {group} would leave {left}, below its min \
         size {min}{}",
        if *held { " (held: frozen at its size until its replay starts)" } else { "" }
    )]
    BelowMin {
        group: String,
        removing: i32,
        left: i32,
        min: i32,
        /// The min is the held group's size, as offered to cluster-autoscaler.
        held: bool,
    },
    /// The cloud cannot fill a scale-up now (a run's stockout or zone outage).
    #[error("increasing node group {group}: insufficient capacity ({reason})")]
    Stockout { group: String, reason: String },
    #[error("node {node:?} has provider ID {provider_id:?}, which is not a ksim node")]
    NotKsim { node: String, provider_id: String },
    #[error("node {node:?} belongs to node group {actual}, not {requested}")]
    OtherGroup {
        node: String,
        actual: String,
        requested: String,
    },
    #[error(
        "node {node:?} (provider ID {provider_id:?}) is not a node of node group {group}: the \
         provider knows no seat or node of that name in it"
    )]
    NotAMember {
        node: String,
        provider_id: String,
        group: String,
    },
    #[error(
        "node group {group} has {unregistered} replica(s) without a registered node; cannot decrease its target size by {requested} (delete registered nodes with DeleteNodes)"
    )]
    WouldRemoveRegistered {
        group: String,
        unregistered: i32,
        /// i64: the negation of i32::MIN does not fit an i32.
        requested: i64,
    },
}

/// A node named in a DeleteNodes request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub provider_id: String,
}

/// The writes that remove chosen members from a group, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    /// Seats to mark with [`CHOSEN_DELETION_COST`], then let the ReplicaSet remove.
    pub seats: Vec<String>,
    /// Seats still marked from an earlier, unfinished removal that were not chosen now: unmarked
    /// first, so they do not compete with the chosen ones.
    pub unmark: Vec<String>,
    /// Replicas without a seat pod to drop.
    pub placeholders: i32,
    /// `spec.replicas` afterwards; equal to the current value when nothing is left to remove.
    pub replicas: i32,
    /// Node objects to delete (cluster-autoscaler never deletes them itself).
    pub nodes: Vec<String>,
}

impl Removal {
    pub fn lowers_replicas(&self, state: &GroupState) -> bool {
        self.replicas < state.replicas
    }
}

/// The new target size after growing by `delta`.
pub fn plan_increase(state: &GroupState, delta: i32) -> Result<i32, PlanError> {
    if delta <= 0 {
        return Err(PlanError::BadDelta {
            delta,
            expected: "positive",
        });
    }
    if let Some(reason) = &state.stockout {
        return Err(PlanError::Stockout {
            group: state.id.clone(),
            reason: reason.clone(),
        });
    }
    let wanted = i64::from(state.replicas) + i64::from(delta);
    if wanted > i64::from(state.limits.max) {
        return Err(PlanError::AboveMax {
            group: state.id.clone(),
            delta,
            wanted,
            max: state.limits.max,
            current: state.replicas,
        });
    }
    Ok(state.replicas + delta)
}

/// Removes exactly the named nodes. Members already gone or going are skipped, so a retried
/// request removes nothing twice; a node that is not the group's refuses the whole request.
///
/// Membership is what the provider knows, never the provider ID alone (anyone can write one):
/// a seat of the group, a Node the index holds as the group's (`orphan_nodes`: its seat went
/// first), or a member it saw go, in `departed` (a retry after both went).
pub fn plan_delete_nodes(
    state: &GroupState,
    nodes: &[NodeRef],
    departed: &BTreeSet<String>,
) -> Result<Removal, PlanError> {
    let orphans: BTreeSet<&str> = state.orphan_nodes.iter().map(String::as_str).collect();
    let mut chosen = BTreeSet::new();
    let mut placeholders = 0;
    let mut node_objects = BTreeSet::new();
    for node in nodes {
        let Some((group, member)) = member_of(&node.provider_id) else {
            return Err(PlanError::NotKsim {
                node: node.name.clone(),
                provider_id: node.provider_id.clone(),
            });
        };
        if group != state.id {
            return Err(PlanError::OtherGroup {
                node: node.name.clone(),
                actual: group,
                requested: state.id.clone(),
            });
        }
        match member {
            Member::Placeholder => placeholders += 1,
            Member::Seat(name) => {
                if let Some(seat) = state.seat(&name) {
                    // A seat going already: a retry, or it was removed another way.
                    if !seat.deleting {
                        chosen.insert(name.clone());
                    }
                    if seat.node != NodeState::Absent {
                        node_objects.insert(name);
                    }
                } else if orphans.contains(name.as_str()) {
                    // The seat is gone and its Node, labelled as ours, is still there.
                    node_objects.insert(name);
                } else if !departed.contains(&name) {
                    return Err(PlanError::NotAMember {
                        node: node.name.clone(),
                        provider_id: node.provider_id.clone(),
                        group: state.id.clone(),
                    });
                }
            }
        }
    }
    let placeholders = placeholders.min(state.placeholders());
    removal(
        state,
        chosen.into_iter().collect(),
        placeholders,
        node_objects,
    )
}

/// Shrinks the target by `-delta` members that have no registered node: replicas without a
/// seat first, then seats whose node has not registered.
pub fn plan_decrease(state: &GroupState, delta: i32) -> Result<Removal, PlanError> {
    if delta >= 0 {
        return Err(PlanError::BadDelta {
            delta,
            expected: "negative",
        });
    }
    let requested = -i64::from(delta);
    let unseated = state.placeholders();
    let mut unregistered_seats: Vec<String> = state
        .active_seats()
        .filter(|seat| seat.node == NodeState::Absent)
        .map(|seat| seat.name.clone())
        .collect();
    let unregistered = unseated + i32::try_from(unregistered_seats.len()).unwrap_or(i32::MAX);
    if requested > i64::from(unregistered) {
        return Err(PlanError::WouldRemoveRegistered {
            group: state.id.clone(),
            unregistered,
            requested,
        });
    }
    // requested <= unregistered, an i32, from here on.
    let requested = i32::try_from(requested).unwrap_or(i32::MAX);
    let placeholders = requested.min(unseated);
    // The newest-named seats go first; any order is correct, a fixed one is reproducible.
    unregistered_seats.sort_unstable_by(|a, b| b.cmp(a));
    unregistered_seats.truncate(usize::try_from(requested - placeholders).unwrap_or(0));
    removal(state, unregistered_seats, placeholders, BTreeSet::new())
}

fn removal(
    state: &GroupState,
    seats: Vec<String>,
    placeholders: i32,
    nodes: BTreeSet<String>,
) -> Result<Removal, PlanError> {
    let removing = i32::try_from(seats.len()).unwrap_or(i32::MAX) + placeholders;
    let left = state.replicas - removing;
    let min = state.min_size();
    if removing > 0 && left < min {
        return Err(PlanError::BelowMin {
            group: state.id.clone(),
            removing,
            left,
            min,
            held: state.held,
        });
    }
    let unmark = state
        .active_seats()
        .filter(|seat| seat.deletion_cost == CHOSEN_DELETION_COST && !seats.contains(&seat.name))
        .map(|seat| seat.name.clone())
        .collect();
    Ok(Removal {
        seats,
        unmark,
        placeholders,
        replicas: left,
        nodes: nodes.into_iter().collect(),
    })
}

/// Why lowering `replicas` now could remove a seat that was not chosen: the ReplicaSet removes
/// seats that are not ready, and skips creating unseated replicas, before it looks at deletion
/// cost. Empty when the removal is exact.
pub fn removal_hazards(state: &GroupState, removal: &Removal) -> Vec<String> {
    if removal.seats.is_empty() {
        // Only unseated replicas go: nothing the ReplicaSet ranks is at stake.
        return Vec::new();
    }
    let mut hazards: Vec<String> = state
        .active_seats()
        .filter(|seat| !seat.ready && !removal.seats.contains(&seat.name))
        .map(|seat| format!("seat {} is not ready", seat.name))
        .collect();
    let unseated = state.placeholders() - removal.placeholders;
    if unseated > 0 {
        hazards.push(format!("{unseated} replica(s) have no seat pod yet"));
    }
    hazards
}

#[cfg(test)]
mod tests {
    use super::super::group::tests::{group, seat};
    use super::super::limits::SizeLimits;
    use super::*;

    fn node(name: &str) -> NodeRef {
        NodeRef {
            name: name.to_owned(),
            provider_id: format!("ksim://m5/{name}"),
        }
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn three_registered() -> GroupState {
        group(
            3,
            vec![
                seat("a", NodeState::Registered),
                seat("b", NodeState::Registered),
                seat("c", NodeState::Registered),
            ],
        )
    }

    #[test]
    fn increase_respects_max_and_refuses_non_positive_deltas() {
        let state = three_registered();
        assert_eq!(plan_increase(&state, 7), Ok(10));
        assert!(matches!(
            plan_increase(&state, 8),
            Err(PlanError::AboveMax {
                wanted: 11,
                max: 10,
                ..
            })
        ));
        assert!(matches!(
            plan_increase(&state, 0),
            Err(PlanError::BadDelta { .. })
        ));
        assert!(matches!(
            plan_increase(&state, i32::MAX),
            Err(PlanError::AboveMax { .. })
        ));
    }

    #[test]
    fn a_group_out_of_stock_refuses_every_increase_naming_why() {
        let mut state = three_registered();
        state.stockout = Some("zone us-east-1a outage".to_owned());
        let refused = plan_increase(&state, 1).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "increasing node group m5: insufficient capacity (zone us-east-1a outage)"
        );
        state.stockout = None;
        assert_eq!(plan_increase(&state, 1), Ok(4));
    }

    #[test]
    fn delete_removes_exactly_the_named_seats_and_their_nodes() {
        let removal =
            plan_delete_nodes(&three_registered(), &[node("c"), node("a")], &none()).unwrap();
        assert_eq!(removal.seats, vec!["a", "c"]);
        assert_eq!(removal.nodes, vec!["a", "c"]);
        assert_eq!(removal.replicas, 1);
        assert_eq!(removal.placeholders, 0);
    }

    #[test]
    fn delete_below_min_is_refused_whole() {
        let err = plan_delete_nodes(
            &three_registered(),
            &[node("a"), node("b"), node("c")],
            &none(),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            PlanError::BelowMin {
                removing: 3,
                left: 0,
                min: 1,
                ..
            }
        ));
    }

    /// Issue 53, finding 1: a held group is offered at min = its size; a DeleteNodes from a
    /// caller other than CA took one at 1 to 0 by its own min annotation (0).
    #[test]
    fn a_held_group_refuses_any_removal_below_its_size() {
        let mut state = group(1, vec![seat("a", NodeState::Registered)]);
        state.limits.min = 0;
        assert_eq!(state.min_size(), 0);
        assert!(plan_delete_nodes(&state, &[node("a")], &none()).is_ok());
        state.held = true;
        assert_eq!(state.min_size(), 1);
        let err = plan_delete_nodes(&state, &[node("a")], &none()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "removing 1 node(s) from node group m5 would leave 0, below its min size 1 (held: \
             frozen at its size until its replay starts)"
        );
        assert!(matches!(
            plan_decrease(&group(2, vec![]), -1).map(|_| ()),
            Ok(())
        ));
        let mut unseated = group(2, vec![]);
        unseated.limits.min = 0;
        unseated.held = true;
        assert!(matches!(
            plan_decrease(&unseated, -1),
            Err(PlanError::BelowMin {
                min: 2,
                left: 1,
                held: true,
                ..
            })
        ));
    }

    #[test]
    fn delete_refuses_foreign_and_other_group_nodes() {
        let state = three_registered();
        let foreign = NodeRef {
            name: "real-1".to_owned(),
            provider_id: "aws:///us-east-1a/i-1".to_owned(),
        };
        assert!(matches!(
            plan_delete_nodes(&state, &[node("a"), foreign], &none()),
            Err(PlanError::NotKsim { .. })
        ));
        let other = NodeRef {
            name: "x".to_owned(),
            provider_id: "ksim://c5/x".to_owned(),
        };
        let err = plan_delete_nodes(&state, &[other], &none()).unwrap_err();
        assert!(
            err.to_string().contains("belongs to node group c5, not m5"),
            "{err}"
        );
    }

    #[test]
    fn a_retried_delete_removes_nothing_twice() {
        let mut state = three_registered();
        state.replicas = 2;
        state.seats[0].deleting = true;
        let removal = plan_delete_nodes(&state, &[node("a")], &none()).unwrap();
        assert!(removal.seats.is_empty());
        assert_eq!(removal.replicas, 2);
        assert!(!removal.lowers_replicas(&state));
        // Its Node object may still be there: deleting it again is harmless.
        assert_eq!(removal.nodes, vec!["a"]);
        // Duplicates within one request count once.
        let removal = plan_delete_nodes(&state, &[node("b"), node("b")], &none()).unwrap();
        assert_eq!(removal.seats, vec!["b"]);
        assert_eq!(removal.replicas, 1);
    }

    /// Issue 39, finding 1: a provider ID naming this group and a node the group does not
    /// have (a pool-managed group's node, say) counted as "gone already", and the Node was
    /// deleted.
    #[test]
    fn a_node_the_group_does_not_have_refuses_the_whole_request() {
        let state = three_registered();
        let forged = NodeRef {
            name: "fixed-0".to_owned(),
            provider_id: "ksim://m5/fixed-0".to_owned(),
        };
        let err = plan_delete_nodes(&state, &[node("a"), forged.clone()], &none()).unwrap_err();
        assert_eq!(
            err,
            PlanError::NotAMember {
                node: "fixed-0".to_owned(),
                provider_id: "ksim://m5/fixed-0".to_owned(),
                group: "m5".to_owned(),
            }
        );
        assert!(err.to_string().contains("\"fixed-0\""), "{err}");
        // What went from another group is no member of this one either.
        let elsewhere: BTreeSet<String> = ["other".to_owned()].into();
        assert!(plan_delete_nodes(&state, &[forged], &elsewhere).is_err());
    }

    #[test]
    fn a_member_seen_going_is_cleaned_up_or_skipped_on_a_retry() {
        // The seat went before its Node: the Node, the group's by its labels, is deleted.
        let mut state = group(2, vec![seat("b", NodeState::Registered)]);
        state.orphan_nodes.push("a".to_owned());
        let removal = plan_delete_nodes(&state, &[node("a")], &none()).unwrap();
        assert!(removal.seats.is_empty());
        assert_eq!(removal.nodes, vec!["a"]);
        assert!(!removal.lowers_replicas(&state));
        // Both went: a retry is answered with nothing to do.
        state.orphan_nodes.clear();
        let departed: BTreeSet<String> = ["a".to_owned()].into();
        let removal = plan_delete_nodes(&state, &[node("a")], &departed).unwrap();
        assert_eq!(
            removal,
            Removal {
                replicas: 2,
                ..Removal::default()
            }
        );
    }

    #[test]
    fn placeholder_nodes_drop_unseated_replicas() {
        let state = group(3, vec![seat("a", NodeState::Registered)]);
        let placeholder = state.instances()[1].id.clone();
        let request = NodeRef {
            name: placeholder.clone(),
            provider_id: placeholder,
        };
        let removal = plan_delete_nodes(&state, &[request], &none()).unwrap();
        assert_eq!(removal.placeholders, 1);
        assert!(removal.seats.is_empty() && removal.nodes.is_empty());
        assert_eq!(removal.replicas, 2);
    }

    #[test]
    fn a_seat_without_a_node_is_removed_without_a_node_delete() {
        let state = group(
            2,
            vec![
                seat("a", NodeState::Registered),
                seat("b", NodeState::Absent),
            ],
        );
        let removal = plan_delete_nodes(&state, &[node("b")], &none()).unwrap();
        assert_eq!(removal.seats, vec!["b"]);
        assert!(removal.nodes.is_empty());
    }

    #[test]
    fn stale_marks_on_unchosen_seats_are_cleared() {
        let mut state = three_registered();
        state.seats[1].deletion_cost = CHOSEN_DELETION_COST;
        let removal = plan_delete_nodes(&state, &[node("a")], &none()).unwrap();
        assert_eq!(removal.unmark, vec!["b"]);
    }

    #[test]
    fn decrease_takes_unseated_replicas_then_unregistered_seats() {
        let mut state = group(
            5,
            vec![
                seat("a", NodeState::Registered),
                seat("b", NodeState::Absent),
                seat("c", NodeState::Absent),
            ],
        );
        state.limits = SizeLimits { min: 0, max: 10 };
        let removal = plan_decrease(&state, -3).unwrap();
        assert_eq!(removal.placeholders, 2);
        assert_eq!(removal.seats, vec!["c"]);
        assert_eq!(removal.replicas, 2);
        let err = plan_decrease(&state, -5).unwrap_err();
        assert_eq!(
            err,
            PlanError::WouldRemoveRegistered {
                group: "m5".to_owned(),
                unregistered: 4,
                requested: 5
            }
        );
        assert!(matches!(
            plan_decrease(&state, 1),
            Err(PlanError::BadDelta { .. })
        ));
        let error = plan_decrease(&state, i32::MIN).unwrap_err();
        assert!(
            matches!(
                error,
                PlanError::WouldRemoveRegistered {
                    requested: 2_147_483_648,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("by 2147483648"), "{error}");
    }

    #[test]
    fn decrease_respects_min() {
        let state = group(1, vec![seat("a", NodeState::Absent)]);
        assert!(matches!(
            plan_decrease(&state, -1),
            Err(PlanError::BelowMin { .. })
        ));
    }

    #[test]
    fn hazards_name_unready_seats_and_unseated_replicas() {
        let mut state = group(
            4,
            vec![
                seat("a", NodeState::Registered),
                seat("b", NodeState::Registered),
                seat("c", NodeState::Registered),
            ],
        );
        state.seats[1].ready = false;
        let removal = plan_delete_nodes(&state, &[node("a")], &none()).unwrap();
        let hazards = removal_hazards(&state, &removal);
        assert_eq!(
            hazards,
            vec![
                "seat b is not ready".to_owned(),
                "1 replica(s) have no seat pod yet".to_owned()
            ]
        );
        state.seats[1].ready = true;
        state.replicas = 3;
        let removal = plan_delete_nodes(&state, &[node("a")], &none()).unwrap();
        assert!(removal_hazards(&state, &removal).is_empty());
    }
}
