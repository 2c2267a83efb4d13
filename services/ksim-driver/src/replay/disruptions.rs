//! Plays a run's disruptions at their times: each node failure asks the pool to stop the
//! nodes the seed chooses among its group's Ready ones, and to bring them back when it ends.
//! What happens next is the real control plane's: the node lifecycle controller, the taint
//! eviction controller, the workload controllers, the scheduler and the autoscalers.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::{
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

/// Starts playing the disruptions; dropping the handle stops it (failed nodes stay failed
/// until the cleanup).
pub fn start(
    mesh: Mesh,
    disruptions: Vec<Disruption>,
    seed: u64,
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
                node_group: disruption.group().to_owned(),
                offset: *at,
                nodes: Vec::new(),
                recovered: None,
                error: "the run ended before it".to_owned(),
            })
            .collect(),
    ));
    let task = tokio::spawn(play(mesh, disruptions, seed, steps, origin, seen.clone()));
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
    mesh: Mesh,
    disruptions: Vec<Disruption>,
    seed: u64,
    steps: Vec<(Duration, usize, Step)>,
    origin: Instant,
    seen: Arc<Mutex<Vec<ObservedDisruption>>>,
) {
    for (at, index, step) in steps {
        tokio::time::sleep_until(origin + at).await;
        let Disruption::NodeFailure(failure) = &disruptions[index];
        match step {
            Step::Begin => {
                let taken = fail(&mesh, seed, index, &failure.group, failure.share).await;
                let mut seen = lock(&seen);
                let observed = &mut seen[index];
                observed.offset = origin.elapsed();
                match taken {
                    Ok(nodes) => {
                        tracing::info!(group = failure.group, ?nodes, "nodes failed");
                        observed.nodes = nodes;
                        observed.error.clear();
                    }
                    Err(error) => {
                        tracing::warn!(group = failure.group, %error, "node failure not applied");
                        observed.error = error;
                    }
                }
            }
            Step::End => {
                let nodes = lock(&seen)[index].nodes.clone();
                if nodes.is_empty() {
                    continue;
                }
                match recover(&mesh, &failure.group, &nodes).await {
                    Ok(()) => {
                        tracing::info!(group = failure.group, ?nodes, "nodes recovered");
                        lock(&seen)[index].recovered = Some(origin.elapsed());
                    }
                    Err(error) => tracing::warn!(%error, "recovering failed nodes"),
                }
            }
        }
    }
}

/// Fails the seed's share of the group's Ready nodes, oldest first; the names taken, or why
/// none was.
async fn fail(
    mesh: &Mesh,
    seed: u64,
    index: usize,
    group: &str,
    share: f64,
) -> Result<Vec<String>, String> {
    let mut nodes = mesh
        .list_nodes(group)
        .await
        .map_err(|error| format!("listing the group's nodes: {error}"))?;
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
    let names: Vec<String> = nodes.into_iter().map(|node| node.name).collect();
    let chosen = choose(seed, index, &names, share);
    if chosen.is_empty() {
        return Err(format!("group {group} had no Ready node then"));
    }
    mesh.fail_nodes(chosen.clone())
        .await
        .map_err(|error| format!("failing nodes: {error}"))?;
    Ok(chosen)
}

/// Brings back those of `nodes` still in the group and failed (the autoscaler may have
/// removed some meanwhile).
async fn recover(mesh: &Mesh, group: &str, nodes: &[String]) -> Result<(), String> {
    let failed: Vec<String> = mesh
        .list_nodes(group)
        .await
        .map_err(|error| error.to_string())?
        .into_iter()
        .filter(|node| node.failed && nodes.contains(&node.name))
        .map(|node| node.name)
        .collect();
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
