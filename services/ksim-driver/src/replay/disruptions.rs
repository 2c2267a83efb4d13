//! Plays a run's disruptions at their times: a node failure asks the pool to stop the nodes
//! the seed chooses among its group's Ready ones, a stockout marks an autoscaler group out of
//! capacity (the cloud provider then refuses its scale-ups), and a zone outage does both to
//! every group in the zone; each is undone when it ends. What happens next is the real
//! control plane's: the node lifecycle controller, the taint eviction controller, the workload
//! controllers, the scheduler and the autoscalers.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use kube::Client;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::{
    cluster::seats,
    domain::{
        disruptions::{Disruption, Step, choose, schedule},
        report::ObservedDisruption,
    },
    mesh::Mesh,
};

/// The disruptions as played so far, shared with the task that plays them.
#[derive(Debug, Clone)]
pub struct Played(Arc<Mutex<Vec<ObservedDisruption>>>);

impl Played {
    /// Each disruption as played so far, in the spec's order.
    pub fn observed(&self) -> Vec<ObservedDisruption> {
        lock(&self.0).clone()
    }
}

/// What the player acts through.
#[derive(Clone)]
pub struct Player {
    pub mesh: Mesh,
    pub client: Client,
    /// Where the seat Deployments are.
    pub namespace: String,
    pub simulation_id: String,
    pub seed: u64,
}

impl std::fmt::Debug for Player {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Player")
            .field("namespace", &self.namespace)
            .field("simulation_id", &self.simulation_id)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// Starts playing the disruptions; dropping the handle stops it (what is failed stays so
/// until the cleanup).
pub fn start(
    player: Player,
    disruptions: Vec<Disruption>,
    speed: f64,
    origin: Instant,
) -> (AbortOnDropHandle<()>, Played) {
    let steps = schedule(&disruptions, speed);
    // Until it begins, a disruption is one the run has not reached.
    let seen = Arc::new(Mutex::new(
        disruptions
            .iter()
            .zip(&steps_begin(&steps, disruptions.len()))
            .map(|(disruption, at)| ObservedDisruption {
                kind: disruption.kind().to_owned(),
                node_group: disruption.group(),
                zone: disruption.zone().to_owned(),
                offset: *at,
                nodes: Vec::new(),
                recovered: None,
                error: "the run ended before it".to_owned(),
            })
            .collect(),
    ));
    let task = tokio::spawn(play(player, disruptions, steps, origin, seen.clone()));
    (AbortOnDropHandle::new(task), Played(seen))
}

fn lock(seen: &Mutex<Vec<ObservedDisruption>>) -> MutexGuard<'_, Vec<ObservedDisruption>> {
    seen.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Each disruption's beginning, by index.
fn steps_begin(steps: &[(Duration, usize, Step)], count: usize) -> Vec<Duration> {
    let mut begins = vec![Duration::ZERO; count];
    for &(at, index, step) in steps {
        if step == Step::Begin
            && let Some(begin) = begins.get_mut(index)
        {
            *begin = at;
        }
    }
    begins
}

async fn play(
    player: Player,
    disruptions: Vec<Disruption>,
    steps: Vec<(Duration, usize, Step)>,
    origin: Instant,
    seen: Arc<Mutex<Vec<ObservedDisruption>>>,
) {
    for (at, index, step) in steps {
        tokio::time::sleep_until(origin + at).await;
        let Some(disruption) = disruptions.get(index) else {
            continue;
        };
        match step {
            Step::Begin => {
                let taken = begin(&player, index, disruption).await;
                let mut seen = lock(&seen);
                let Some(observed) = seen.get_mut(index) else {
                    continue;
                };
                observed.offset = origin.elapsed();
                match taken {
                    Ok(nodes) => {
                        tracing::info!(
                            kind = disruption.kind(),
                            group = disruption.group(),
                            ?nodes,
                            "disruption began"
                        );
                        observed.nodes = nodes;
                        observed.error.clear();
                    }
                    Err(error) => {
                        tracing::warn!(kind = disruption.kind(), group = disruption.group(),
                            %error, "disruption not applied");
                        observed.error = error;
                    }
                }
            }
            Step::End => {
                // Its beginning came first. Undone even when that failed half-way (a zone's
                // groups stocked out, then its nodes could not be failed): ending what was
                // never applied changes nothing.
                let (applied, nodes) = {
                    let seen = lock(&seen);
                    seen.get(index)
                        .map(|o| (o.error.is_empty(), o.nodes.clone()))
                        .unwrap_or_default()
                };
                match end(&player, disruption, &nodes).await {
                    Ok(()) => {
                        tracing::info!(
                            kind = disruption.kind(),
                            group = disruption.group(),
                            "disruption ended"
                        );
                        if applied && let Some(observed) = lock(&seen).get_mut(index) {
                            observed.recovered = Some(origin.elapsed());
                        }
                    }
                    Err(error) => tracing::warn!(%error, "ending a disruption"),
                }
            }
        }
    }
}

/// Applies a disruption: the nodes it took, or why it took none.
async fn begin(
    player: &Player,
    index: usize,
    disruption: &Disruption,
) -> Result<Vec<String>, String> {
    match disruption {
        Disruption::NodeFailure(failure) => {
            let ready = ready_nodes(&player.mesh, &failure.group).await?;
            let chosen = choose(player.seed, index, &ready, failure.share);
            if chosen.is_empty() {
                return Err(format!("group {} had no Ready node then", failure.group));
            }
            fail(&player.mesh, &chosen).await?;
            Ok(chosen)
        }
        Disruption::ZoneOutage(outage) => {
            let reason = format!("zone {} outage", outage.zone);
            for group in &outage.autoscaled {
                stockout(player, group, Some(&reason)).await?;
            }
            let mut taken = Vec::new();
            for group in &outage.groups {
                taken.extend(ready_nodes(&player.mesh, group).await?);
            }
            if !taken.is_empty() {
                // Said as it is: the groups got no capacity for the window all the same.
                fail(&player.mesh, &taken).await.map_err(|error| {
                    format!("its autoscaler groups got no capacity, but {error}")
                })?;
            }
            Ok(taken)
        }
        Disruption::Stockout(out) => {
            stockout(player, &out.group, Some("stockout")).await?;
            Ok(Vec::new())
        }
    }
}

/// Undoes a disruption that took `nodes`.
async fn end(player: &Player, disruption: &Disruption, nodes: &[String]) -> Result<(), String> {
    match disruption {
        Disruption::NodeFailure(failure) => recover(&player.mesh, &[&failure.group], nodes).await,
        Disruption::ZoneOutage(outage) => {
            for group in &outage.autoscaled {
                stockout(player, group, None).await?;
            }
            let groups: Vec<&String> = outage.groups.iter().collect();
            recover(&player.mesh, &groups, nodes).await
        }
        Disruption::Stockout(out) => stockout(player, &out.group, None).await,
    }
}

/// The group's Ready nodes that have not failed, oldest first.
async fn ready_nodes(mesh: &Mesh, group: &str) -> Result<Vec<String>, String> {
    let mut nodes = mesh
        .list_nodes(group)
        .await
        .map_err(|error| format!("listing group {group}'s nodes: {error}"))?;
    nodes.retain(|node| node.ready && !node.failed);
    nodes.sort_by(|a, b| {
        let created = |node: &ksim_proto::ksim::vnode::v1::Node| {
            node.create_time
                .as_ref()
                .map(|t| (t.seconds, t.nanos))
                .unwrap_or_default()
        };
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(nodes.into_iter().map(|node| node.name).collect())
}

async fn fail(mesh: &Mesh, nodes: &[String]) -> Result<(), String> {
    mesh.fail_nodes(nodes.to_vec())
        .await
        .map_err(|error| format!("failing nodes: {error}"))
}

async fn stockout(player: &Player, group: &str, reason: Option<&str>) -> Result<(), String> {
    seats::set_stockout(
        &player.client,
        &player.namespace,
        &player.simulation_id,
        group,
        reason,
    )
    .await
    .map_err(|error| error.to_string())
}

/// Brings back those of `nodes` still in `groups` and failed (the autoscaler may have removed
/// some meanwhile).
async fn recover<S: AsRef<str>>(mesh: &Mesh, groups: &[S], nodes: &[String]) -> Result<(), String> {
    let mut failed = Vec::new();
    for group in groups {
        failed.extend(
            mesh.list_nodes(group.as_ref())
                .await
                .map_err(|error| error.to_string())?
                .into_iter()
                .filter(|node| node.failed && nodes.contains(&node.name))
                .map(|node| node.name),
        );
    }
    if failed.is_empty() {
        return Ok(());
    }
    mesh.recover_nodes(failed)
        .await
        .map_err(|error| error.to_string())
}

/// Brings back every failed node of the pool's: the cleanup's first step, so that the
/// simulation's pods on them can be finished and its namespaces go.
pub async fn recover_all(mesh: &Mesh) -> Result<(), String> {
    let failed: Vec<String> = mesh
        .list_nodes("")
        .await
        .map_err(|error| error.to_string())?
        .into_iter()
        .filter(|node| node.failed)
        .map(|node| node.name)
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    mesh.recover_nodes(failed)
        .await
        .map_err(|error| error.to_string())
}
