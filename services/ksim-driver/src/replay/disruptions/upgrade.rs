//! A node-pool upgrade as a managed node group's surge upgrade plays it (docs/disruptions.md):
//! the group grows by `max_surge`, then its nodes of the start go in batches of
//! `max_surge + max_unavailable`, each batch once the group's Ready nodes allow it, each node
//! cordoned and drained through the eviction API for at most the drain timeout (a stuck drain
//! then loses its pods, as GKE forces them after its hour), then removed: replaced by its
//! seat Deployment, but the last `max_surge` retired, so the group ends at its size.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::join_all;
use tokio::time::Instant;

use super::{EVICTION_RETRY, Player, Seen, drain_until, lock, ready_nodes, take_pods};
use crate::{
    cluster::{node_drain, seats},
    domain::disruptions::{NodePoolUpgrade, ready_needed, retires},
};

/// How long a seat's removal mark may take to reach a watch (wall clock): past it the upgrade
/// fails rather than resize a group whose controller might remove another seat.
const MARK_TIMEOUT: Duration = Duration::from_secs(30);

/// Plays `upgrade`, the spec's `index`-th disruption, from its time on; what it did goes in
/// `seen.by_spec[index]`.
pub(super) async fn play(
    player: Player,
    index: usize,
    upgrade: NodePoolUpgrade,
    speed: f64,
    origin: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    tokio::time::sleep_until(origin + upgrade.at.div_f64(speed)).await;
    let group = upgrade.group.as_str();
    let old = match nodes_of(&player, group).await {
        Ok(old) if !old.is_empty() => old,
        Ok(_) => {
            return refused(
                &seen,
                index,
                origin,
                format!("group {group} had no node then"),
            );
        }
        Err(error) => return refused(&seen, index, origin, error),
    };
    if let Some(observed) = lock(&seen).by_spec.get_mut(index) {
        observed.offset = origin.elapsed();
        observed.nodes.clone_from(&old);
        observed.error.clear();
    }
    tracing::info!(group, nodes = ?old, "node-pool upgrade began");
    let retry = EVICTION_RETRY
        .div_f64(speed)
        .max(Duration::from_millis(100));
    let drain_timeout = upgrade.drain_timeout.div_f64(speed);
    let mut problems = Vec::new();
    if upgrade.max_surge > 0
        && let Err(error) = resize(&player, group, upgrade.max_surge.cast_signed()).await
    {
        problems.push(error);
    }
    let (mut blocked, mut lost, mut stuck) = (0, 0, Vec::new());
    let batch = (upgrade.max_surge + upgrade.max_unavailable) as usize;
    let mut removed = 0;
    for nodes in old.chunks(batch) {
        // Only once the group has the Ready nodes to spare: a batch that waits for capacity
        // that never comes is an upgrade not over within the run.
        let needed = ready_needed(old.len(), nodes.len(), upgrade.max_unavailable);
        while ready_nodes(&player.mesh, group)
            .await
            .map_or(0, |ready| ready.len())
            < needed
        {
            tokio::time::sleep(retry).await;
        }
        let drains = nodes.iter().map(|node| {
            let deadline = Instant::now() + drain_timeout;
            drain_until(&player, node, deadline, retry, origin, &seen)
        });
        for (node, drained) in nodes.iter().zip(join_all(drains).await) {
            blocked += drained.blocked;
            problems.extend(drained.problems);
            if !drained.empty {
                tracing::warn!(group, node, "drain ran out of its timeout");
                stuck.push(node.clone());
            }
            lost += take_pods(&player, node, &mut problems).await;
            let removal = if retires(removed, old.len(), upgrade.max_surge) {
                retire(&player, group, node).await
            } else {
                node_drain::end_instance(&player.client, &player.namespace, group, node)
                    .await
                    .map_err(|error| error.to_string())
            };
            if let Err(error) = removal {
                problems.push(error);
            }
            removed += 1;
        }
    }
    for problem in &problems {
        tracing::warn!(group, %problem, "node-pool upgrade");
    }
    tracing::info!(
        group,
        replaced = old.len(),
        ?stuck,
        blocked,
        lost,
        "node-pool upgrade over"
    );
    if let Some(observed) = lock(&seen).by_spec.get_mut(index) {
        observed.recovered = Some(origin.elapsed());
        observed.evictions_blocked = blocked as u64;
        observed.pods_lost = lost as u64;
        observed.stuck_drains = stuck;
    }
}

/// Why the upgrade replaced nothing.
fn refused(seen: &Mutex<Seen>, index: usize, origin: Instant, error: String) {
    tracing::warn!(%error, "node-pool upgrade not applied");
    if let Some(observed) = lock(seen).by_spec.get_mut(index) {
        observed.offset = origin.elapsed();
        observed.error = error;
    }
}

/// Every node of the group, oldest first.
async fn nodes_of(player: &Player, group: &str) -> Result<Vec<String>, String> {
    let mut nodes = player
        .mesh
        .list_nodes(group)
        .await
        .map_err(|error| format!("listing group {group}'s nodes: {error}"))?;
    nodes.sort_by_key(|node| {
        (
            node.create_time
                .as_ref()
                .map(|t| (t.seconds, t.nanos))
                .unwrap_or_default(),
            node.name.clone(),
        )
    });
    Ok(nodes.into_iter().map(|node| node.name).collect())
}

async fn resize(player: &Player, group: &str, delta: i32) -> Result<(), String> {
    match seats::resize(
        &player.client,
        &player.namespace,
        &player.simulation_id,
        group,
        delta,
    )
    .await
    {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!("group {group} has no seat Deployment")),
        Err(error) => Err(error.to_string()),
    }
}

/// Removes `node`'s seat and the place with it: marked the one to go, then the group one
/// smaller.
async fn retire(player: &Player, group: &str, node: &str) -> Result<(), String> {
    let seen =
        seats::mark_for_removal(&player.client, &player.namespace, group, node, MARK_TIMEOUT)
            .await
            .map_err(|error| error.to_string())?;
    if !seen {
        return Err(format!(
            "the removal mark of seat {node} did not reach a watch within {MARK_TIMEOUT:?}"
        ));
    }
    resize(player, group, -1).await
}
