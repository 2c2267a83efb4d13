//! Who made each node change. The observer sees every Node that joins or leaves a group, but
//! only some are cluster-autoscaler's: a fixed-size group's nodes are the pool's, and a node
//! that leaves and comes back under the same name was registered again (a restarted pool
//! deletes the nodes of autoscaler groups it has not read yet, then registers them again), not
//! removed and added: a seat's node is named after the seat, and a seat CA removes never
//! comes back.

use std::collections::HashMap;

use super::input::{GroupOwner, ObservedNodeChange};
use crate::{NodeChange, NodeChangeCause, NodeChangeKind};

/// Who made a reported change. Unspecified, in reports written before it was kept, counted
/// every change as the autoscaler's.
pub fn cause_of(change: &NodeChange) -> NodeChangeCause {
    match change.cause() {
        NodeChangeCause::Unspecified => NodeChangeCause::Autoscaler,
        cause => cause,
    }
}

/// The cause of each of `changes`, which are in time order.
pub fn causes(changes: &[&ObservedNodeChange]) -> Vec<NodeChangeCause> {
    let mut causes: Vec<NodeChangeCause> = changes
        .iter()
        .map(|change| match change.owner {
            Some(GroupOwner::Pool) => NodeChangeCause::Pool,
            // Seats, Karpenter's, or a node without the label: the autoscaler's, as reports
            // always said.
            Some(GroupOwner::Seats | GroupOwner::Karpenter) | None => NodeChangeCause::Autoscaler,
        })
        .collect();
    // Per node: where it was last removed, until it comes back.
    let mut removed: HashMap<(&str, &str), usize> = HashMap::new();
    for (index, change) in changes.iter().enumerate() {
        let key = (change.group.as_str(), change.node.as_str());
        match change.kind {
            NodeChangeKind::Removed => {
                removed.insert(key, index);
            }
            NodeChangeKind::Added => {
                if let Some(gone) = removed.remove(&key) {
                    causes[gone] = NodeChangeCause::Reregistration;
                    causes[index] = NodeChangeCause::Reregistration;
                }
            }
            // The observer sees a Node added or deleted, never neither.
            NodeChangeKind::Unspecified => {}
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn change(
        secs: u64,
        node: &str,
        kind: NodeChangeKind,
        owner: Option<GroupOwner>,
    ) -> ObservedNodeChange {
        ObservedNodeChange {
            offset: Duration::from_secs(secs),
            group: "m5".to_owned(),
            node: node.to_owned(),
            kind,
            instance_type: String::new(),
            owner,
        }
    }

    #[test]
    fn a_pool_restart_is_neither_a_scale_up_nor_a_scale_down() {
        use NodeChangeCause::{Autoscaler, Pool, Reregistration};
        use NodeChangeKind::{Added, Removed};
        let seats = Some(GroupOwner::Seats);
        let changes = [
            // CA adds a node, later removes it: both the autoscaler's.
            change(1, "seats-m5-a", Added, seats),
            // The pool restarts: a seat's node leaves and comes back under its name.
            change(2, "seats-m5-b", Removed, seats),
            change(3, "seats-m5-a", Removed, seats),
            change(4, "seats-m5-b", Added, seats),
            // A fixed group's node: the pool's, whoever asks.
            change(5, "fixed-0", Removed, Some(GroupOwner::Pool)),
            change(6, "fixed-0", Added, Some(GroupOwner::Pool)),
            change(7, "fixed-1", Removed, Some(GroupOwner::Pool)),
            // A node without the label counts as the autoscaler's, as before.
            change(8, "old", Added, None),
        ];
        let refs: Vec<&ObservedNodeChange> = changes.iter().collect();
        assert_eq!(
            causes(&refs),
            [
                Autoscaler,
                Reregistration,
                Autoscaler,
                Reregistration,
                Reregistration,
                Reregistration,
                Pool,
                Autoscaler
            ]
        );
    }

    #[test]
    fn a_node_added_then_removed_is_not_a_reregistration() {
        use NodeChangeKind::{Added, Removed};
        let seats = Some(GroupOwner::Seats);
        let changes = [
            change(1, "seats-m5-a", Added, seats),
            change(2, "seats-m5-a", Removed, seats),
        ];
        let refs: Vec<&ObservedNodeChange> = changes.iter().collect();
        assert_eq!(causes(&refs), [NodeChangeCause::Autoscaler; 2]);
    }
}
