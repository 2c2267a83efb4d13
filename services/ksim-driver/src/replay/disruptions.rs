//! Plays a run's disruptions at their times: a node failure asks the pool to stop the nodes
//! the seed chooses among its group's Ready ones, a stockout marks an autoscaler group out of
//! capacity (the cloud provider then refuses its scale-ups) or withdraws a NodePool's
//! offerings (ksim's Karpenter provider then leaves them out), and a zone outage does both to
//! every group in the zone; each is undone when it ends. A spot interruption plays on its
//! own: at each of its draws it gives the nodes drawn their notice, drains them through the
//! eviction API meanwhile, then ends their instances. What happens next is the real control
//! plane's: the node lifecycle controller, the taint eviction controller, the workload
//! controllers, the scheduler and the autoscalers.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use kube::Client;
use tokio::{task::JoinSet, time::Instant};
use tokio_util::task::AbortOnDropHandle;

use crate::{
    cluster::{node_drain, offerings, seats},
    domain::{
        RootRef,
        disruptions::{
            Disruption, Draw, Interruptions, SPOT_INTERRUPTION, SpotInterruption, Step, Withdrawal,
            choose, drawn, draws, picked, schedule, tick_probability,
        },
        report::ObservedDisruption,
    },
    mesh::Mesh,
};
use ksim_nodes::karpenter::{CAPACITY_TYPE_LABEL, SPOT, ZONE_LABEL};

mod upgrade;

/// How often a drain asks again for the evictions a PodDisruptionBudget refused, in recorded
/// time: `kubectl drain`'s interval.
const EVICTION_RETRY: Duration = Duration::from_secs(5);

/// What the player saw, shared with its tasks.
#[derive(Debug, Default)]
struct Seen {
    /// Per disruption of the spec, by index; a spot interruption's stays unused (its nodes
    /// are in `interruptions`).
    by_spec: Vec<ObservedDisruption>,
    /// One per node a spot interruption took, in the order they were.
    interruptions: Vec<ObservedDisruption>,
    /// Per pod whose eviction a PodDisruptionBudget refused: when first, its namespace and its
    /// owner (`Kind/name`).
    blocked: Vec<(Duration, String, String)>,
}

/// The disruptions as played so far, shared with the task that plays them.
#[derive(Debug, Clone)]
pub struct Played(Arc<Mutex<Seen>>);

impl Played {
    /// Each disruption as played so far, in time order: one per disruption of the spec, but
    /// one per node a spot interruption took.
    pub fn observed(&self) -> Vec<ObservedDisruption> {
        let seen = lock(&self.0);
        let mut observed: Vec<ObservedDisruption> = seen
            .by_spec
            .iter()
            .filter(|observed| observed.kind != SPOT_INTERRUPTION)
            .cloned()
            .chain(seen.interruptions.iter().cloned())
            .collect();
        observed.sort_by_key(|disruption| disruption.offset);
        observed
    }

    /// Per pod whose eviction a PodDisruptionBudget refused: when first (since the replay
    /// start), its namespace and its owner.
    pub fn blocked(&self) -> Vec<(Duration, String, String)> {
        lock(&self.0).blocked.clone()
    }
}

/// What the player acts through.
#[derive(Clone)]
pub struct Player {
    pub mesh: Mesh,
    pub client: Client,
    /// For the eviction API: answers a PodDisruptionBudget's 429 at once.
    pub evictions: Client,
    /// Where the seat Deployments are, and the withdrawn offerings' ConfigMap.
    pub namespace: String,
    pub simulation_id: String,
    /// The simulation's root, owner of what the player creates.
    pub root: RootRef,
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
    let seen = Arc::new(Mutex::new(Seen {
        by_spec: disruptions
            .iter()
            .zip(&steps_begin(&steps, disruptions.len()))
            .map(|(disruption, at)| ObservedDisruption {
                kind: disruption.kind().to_owned(),
                node_group: disruption.group(),
                zone: disruption.zone().to_owned(),
                recorded_node: disruption.recorded_node().to_owned(),
                offset: *at,
                error: "the run ended before it".to_owned(),
                ..ObservedDisruption::default()
            })
            .collect(),
        ..Seen::default()
    }));
    let task = tokio::spawn(play(
        player,
        disruptions,
        steps,
        speed,
        origin,
        seen.clone(),
    ));
    (AbortOnDropHandle::new(task), Played(seen))
}

fn lock(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
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
    speed: f64,
    origin: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    // Aborted with this task.
    let mut on_their_own = JoinSet::new();
    for (index, disruption) in disruptions.iter().enumerate() {
        match disruption {
            Disruption::SpotInterruption(interruption) => {
                on_their_own.spawn(interrupt(
                    player.clone(),
                    index,
                    interruption.clone(),
                    speed,
                    origin,
                    seen.clone(),
                ));
            }
            Disruption::NodePoolUpgrade(upgrade) => {
                on_their_own.spawn(upgrade::play(
                    player.clone(),
                    index,
                    upgrade.clone(),
                    speed,
                    origin,
                    seen.clone(),
                ));
            }
            _ => {}
        }
    }
    // The NodePool offerings withdrawn, by the disruption that withdrew them.
    let mut withdrawn = BTreeMap::new();
    for (at, index, step) in steps {
        tokio::time::sleep_until(origin + at).await;
        let Some(disruption) = disruptions.get(index) else {
            continue;
        };
        match step {
            Step::Begin => {
                let withdrawals = disruption.withdrawals();
                let mut taken = Ok(Vec::new());
                if !withdrawals.is_empty() {
                    withdrawn.insert(index, withdrawals);
                    taken = withdraw(&player, &withdrawn).await.map(|()| Vec::new());
                }
                if taken.is_ok() {
                    taken = begin(&player, index, disruption).await;
                }
                let mut seen = lock(&seen);
                let Some(observed) = seen.by_spec.get_mut(index) else {
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
                    seen.by_spec
                        .get(index)
                        .map(|o| (o.error.is_empty(), o.nodes.clone()))
                        .unwrap_or_default()
                };
                let mut ended = Ok(());
                if withdrawn.remove(&index).is_some() {
                    ended = withdraw(&player, &withdrawn).await;
                }
                let ended = match (ended, end(&player, disruption, &nodes).await) {
                    (Ok(()), result) => result,
                    (Err(error), _) => Err(error),
                };
                match ended {
                    Ok(()) => {
                        tracing::info!(
                            kind = disruption.kind(),
                            group = disruption.group(),
                            "disruption ended"
                        );
                        if applied && let Some(observed) = lock(&seen).by_spec.get_mut(index) {
                            observed.recovered = Some(origin.elapsed());
                        }
                    }
                    Err(error) => tracing::warn!(%error, "ending a disruption"),
                }
            }
        }
    }
    while on_their_own.join_next().await.is_some() {}
}

/// Writes the offerings withdrawn now, by the disruptions in effect (by index).
async fn withdraw(
    player: &Player,
    withdrawn: &BTreeMap<usize, Vec<Withdrawal>>,
) -> Result<(), String> {
    let all: Vec<Withdrawal> = withdrawn.values().flatten().cloned().collect();
    offerings::write(
        &player.client,
        &player.namespace,
        &player.simulation_id,
        &player.root,
        &all,
    )
    .await
    .map_err(|error| error.to_string())
}

/// Plays a spot interruption: at each draw, the nodes drawn among the group's Ready ones not
/// yet interrupted get their notice.
async fn interrupt(
    player: Player,
    index: usize,
    spot: SpotInterruption,
    speed: f64,
    origin: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    let probability = match &spot.when {
        Interruptions::Rate { per_hour, .. } => tick_probability(*per_hour),
        Interruptions::Times(_) => 0.0,
    };
    let mut interrupted = BTreeSet::new();
    let mut drains = JoinSet::new();
    for (at, draw) in draws(&spot.when) {
        tokio::time::sleep_until(origin + at.div_f64(speed)).await;
        let ready = if spot.node_pool {
            ready_labelled(&player, &spot.group, CAPACITY_TYPE_LABEL, SPOT).await
        } else {
            ready_nodes(&player.mesh, &spot.group).await
        };
        let ready = ready.map(|nodes| {
            nodes
                .into_iter()
                .filter(|node| !interrupted.contains(node))
                .collect::<Vec<_>>()
        });
        let chosen = match (&ready, draw) {
            (Ok(ready), Draw::Time(event)) => picked(player.seed, index, event, ready)
                .into_iter()
                .collect(),
            (Ok(ready), Draw::Tick(tick)) => drawn(player.seed, index, tick, ready, probability),
            (Err(_), _) => Vec::new(),
        };
        // A time that took no node says why; a tick that drew none is the rate at work.
        let missed = match (ready, draw) {
            (Err(error), _) => Some(error),
            (Ok(_), Draw::Time(_)) if chosen.is_empty() => Some(if spot.node_pool {
                format!("NodePool {} had no Ready spot node then", spot.group)
            } else {
                format!("group {} had no Ready node then", spot.group)
            }),
            _ => None,
        };
        let mut seen_now = lock(&seen);
        if let Some(error) = missed {
            tracing::warn!(group = spot.group, %error, "spot interruption took no node");
            seen_now.interruptions.push(ObservedDisruption {
                kind: SPOT_INTERRUPTION.to_owned(),
                node_group: spot.group.clone(),
                offset: origin.elapsed(),
                error,
                ..ObservedDisruption::default()
            });
        }
        for node in chosen {
            tracing::info!(group = spot.group, node, "spot interruption notice");
            interrupted.insert(node.clone());
            let slot = seen_now.interruptions.len();
            seen_now.interruptions.push(ObservedDisruption {
                kind: SPOT_INTERRUPTION.to_owned(),
                node_group: spot.group.clone(),
                offset: origin.elapsed(),
                nodes: vec![node.clone()],
                ..ObservedDisruption::default()
            });
            drains.spawn(reclaim(
                player.clone(),
                Reclaimed {
                    group: spot.group.clone(),
                    node_pool: spot.node_pool,
                },
                node,
                Notice {
                    lasts: spot.notice.div_f64(speed),
                    retry: EVICTION_RETRY
                        .div_f64(speed)
                        .max(Duration::from_millis(100)),
                },
                slot,
                origin,
                seen.clone(),
            ));
        }
    }
    while drains.join_next().await.is_some() {}
}

/// A notice's length and its drain's retry interval, in wall-clock time.
#[derive(Debug, Clone, Copy)]
struct Notice {
    lasts: Duration,
    retry: Duration,
}

/// Whose node a spot interruption reclaims.
#[derive(Debug, Clone)]
struct Reclaimed {
    group: String,
    /// A Karpenter NodePool's, else a seat of an autoscaler group.
    node_pool: bool,
}

/// One node's notice: cordoned, its pods evicted (those a PodDisruptionBudget refuses asked
/// again until the notice runs out), then its instance ended: the pods left are lost and its
/// seat goes, which its group replaces (a NodePool's node is deleted: Karpenter launches for
/// the pods).
async fn reclaim(
    player: Player,
    whose: Reclaimed,
    node: String,
    notice: Notice,
    slot: usize,
    origin: Instant,
    seen: Arc<Mutex<Seen>>,
) {
    let deadline = Instant::now() + notice.lasts;
    let drained = drain_until(&player, &node, deadline, notice.retry, origin, &seen).await;
    tokio::time::sleep_until(deadline).await;
    let mut problems = drained.problems;
    let lost = take_pods(&player, &node, &mut problems).await;
    let group = whose.group;
    let ended = if whose.node_pool {
        node_drain::end_karpenter_instance(&player.client, &group, &node).await
    } else {
        node_drain::end_instance(&player.client, &player.namespace, &group, &node).await
    };
    if let Err(error) = ended {
        problems.push(error.to_string());
    }
    // The notice was given and the node is counted as interrupted all the same.
    for problem in &problems {
        tracing::warn!(group, node, %problem, "spot interruption");
    }
    tracing::info!(
        group,
        node,
        lost,
        blocked = drained.blocked,
        "spot instance reclaimed"
    );
    if let Some(observed) = lock(&seen).interruptions.get_mut(slot) {
        observed.recovered = Some(origin.elapsed());
        observed.evictions_blocked = drained.blocked as u64;
        observed.pods_lost = lost as u64;
    }
}

/// What a drain did.
#[derive(Debug, Default)]
struct Drained {
    /// Pods whose eviction a PodDisruptionBudget refused at least once.
    blocked: usize,
    /// Whether every pod went before the deadline.
    empty: bool,
    problems: Vec<String>,
}

/// Cordons `node` and evicts its pods, asking again every `retry` for those a budget refused,
/// until none is left or `deadline`; each refused pod is kept in `seen` once.
async fn drain_until(
    player: &Player,
    node: &str,
    deadline: Instant,
    retry: Duration,
    origin: Instant,
    seen: &Mutex<Seen>,
) -> Drained {
    let mut drained = Drained::default();
    let mut blocked = BTreeSet::new();
    if let Err(error) = node_drain::cordon(&player.client, node).await {
        drained.problems.push(error.to_string());
    }
    loop {
        match node_drain::evict_pods(&player.client, &player.evictions, node).await {
            Ok(pass) => {
                let mut seen = lock(seen);
                for pod in pass.blocked {
                    if blocked.insert((pod.namespace.clone(), pod.name.clone())) {
                        seen.blocked
                            .push((origin.elapsed(), pod.namespace, pod.owner));
                    }
                }
                if pass.left.is_empty() {
                    drained.empty = true;
                    break;
                }
            }
            Err(error) => tracing::warn!(node, %error, "draining a node"),
        }
        if Instant::now() + retry >= deadline {
            break;
        }
        tokio::time::sleep(retry).await;
    }
    drained.blocked = blocked.len();
    drained
}

/// Deletes the pods still on `node` at once, as pods whose node is gone; how many of them
/// were lost: not evicted (one evicted and still terminating is counted as evicted only).
async fn take_pods(player: &Player, node: &str, problems: &mut Vec<String>) -> usize {
    let pods = match node_drain::pods_on(&player.client, node).await {
        Ok(pods) => pods,
        Err(error) => {
            problems.push(error.to_string());
            return 0;
        }
    };
    let lost = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .count();
    let left: Vec<_> = pods.iter().map(node_drain::drained).collect();
    if let Err(error) = node_drain::delete_at_once(&player.client, &left).await {
        problems.push(error.to_string());
    }
    lost
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
            if let Some(node) = &failure.node {
                if !ready.contains(node) {
                    return Err(format!("node {node} was not Ready then"));
                }
                fail(&player.mesh, std::slice::from_ref(node)).await?;
                return Ok(vec![node.clone()]);
            }
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
            for node_pool in &outage.node_pools {
                taken.extend(ready_labelled(player, node_pool, ZONE_LABEL, &outage.zone).await?);
            }
            if !taken.is_empty() {
                // Said as it is: the groups got no capacity for the window all the same.
                fail(&player.mesh, &taken).await.map_err(|error| {
                    format!("its autoscaler groups got no capacity, but {error}")
                })?;
            }
            Ok(taken)
        }
        // A NodePool's offerings are withdrawn by the player.
        Disruption::Stockout(out) if out.node_pool => Ok(Vec::new()),
        Disruption::Stockout(out) => {
            stockout(player, &out.group, Some("stockout")).await?;
            Ok(Vec::new())
        }
        // Played on their own, never steps.
        Disruption::SpotInterruption(_) | Disruption::NodePoolUpgrade(_) => Ok(Vec::new()),
        // One Ready node of the group, as the seed picks, stands for the recorded one.
        Disruption::Recorded(failure) => {
            let ready = ready_nodes(&player.mesh, &failure.group).await?;
            let Some(node) = picked(player.seed, index, 0, &ready) else {
                return Err(format!("group {} had no Ready node then", failure.group));
            };
            fail(&player.mesh, std::slice::from_ref(&node)).await?;
            Ok(vec![node])
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
            let groups: Vec<&String> = outage.groups.iter().chain(&outage.node_pools).collect();
            recover(&player.mesh, &groups, nodes).await
        }
        Disruption::Stockout(out) if out.node_pool => Ok(()),
        Disruption::Stockout(out) => stockout(player, &out.group, None).await,
        Disruption::SpotInterruption(_) | Disruption::NodePoolUpgrade(_) => Ok(()),
        Disruption::Recorded(failure) => recover(&player.mesh, &[&failure.group], nodes).await,
    }
}

/// NodePool `node_pool`'s Ready nodes that have not failed and carry `label`=`value`, oldest
/// first.
async fn ready_labelled(
    player: &Player,
    node_pool: &str,
    label: &str,
    value: &str,
) -> Result<Vec<String>, String> {
    let labelled = node_drain::karpenter_nodes_labelled(&player.client, node_pool, label, value)
        .await
        .map_err(|error| error.to_string())?;
    let mut ready = ready_nodes(&player.mesh, node_pool).await?;
    ready.retain(|node| labelled.contains(node));
    Ok(ready)
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
        failed.extend(failed_nodes(mesh, group.as_ref()).await?);
    }
    failed.retain(|node| nodes.contains(node));
    recover_nodes(mesh, failed).await
}

/// Brings back every failed node of the pool's: the cleanup's first step, so that the
/// simulation's pods on them can be finished and its namespaces go.
pub async fn recover_all(mesh: &Mesh) -> Result<(), String> {
    let failed = failed_nodes(mesh, "").await?;
    recover_nodes(mesh, failed).await
}

/// The failed nodes of `group` (every group's for "").
async fn failed_nodes(mesh: &Mesh, group: &str) -> Result<Vec<String>, String> {
    Ok(mesh
        .list_nodes(group)
        .await
        .map_err(|error| error.to_string())?
        .into_iter()
        .filter(|node| node.failed)
        .map(|node| node.name)
        .collect())
}

async fn recover_nodes(mesh: &Mesh, failed: Vec<String>) -> Result<(), String> {
    if failed.is_empty() {
        return Ok(());
    }
    mesh.recover_nodes(failed)
        .await
        .map_err(|error| error.to_string())
}
