//! Removing what a simulation created, whatever ended it, and checking nothing is left.

use std::time::Duration;

use tokio::time::Instant;

use super::{context::RunContext, disruptions, handle::Handle};
use crate::{
    cluster::{ClusterError, namespaces, nodepools, root, seats},
    domain::RootRef,
    mesh::MeshError,
};

/// What the cleanup could not remove. Every step runs whatever the others did, so each
/// problem is reported.
#[derive(Debug, thiserror::Error)]
#[error("cleanup: {}", join(.problems))]
pub struct CleanupError {
    pub problems: Vec<CleanupProblem>,
}

/// One thing the cleanup could not remove, or could not tell it had.
#[derive(Debug, thiserror::Error)]
pub enum CleanupProblem {
    /// Listing or deleting the simulation's namespaces.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("namespaces left behind: {}", .0.join(", "))]
    NamespacesLeft(Vec<String>),
    #[error("Karpenter's nodes left behind: {}", .0.join(", "))]
    NodesLeft(Vec<String>),
    #[error("listing Karpenter's nodes: {0}")]
    Nodes(kube::Error),
    #[error(transparent)]
    Root(#[from] root::CleanupError),
    #[error("deleting node group {name}: {source}")]
    PoolGroup { name: String, source: MeshError },
    #[error("restoring the environment's scheduler and cluster-autoscaler: {0}")]
    Environment(MeshError),
    #[error("bringing back the nodes the run failed: {0}")]
    FailedNodes(String),
    #[error("giving the pool's nodes back their own lease: {0}")]
    NodeLease(MeshError),
}

fn join(problems: &[CleanupProblem]) -> String {
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    problems.join("; ")
}

/// What a run created, recorded as it goes, so the cleanup removes exactly that: a node group
/// that existed before the run is never deleted by it.
#[derive(Debug, Default)]
pub struct Created {
    pub root: Option<RootRef>,
    /// Pool-managed groups; seat Deployments are owned by the root and go with it.
    pub pool_groups: Vec<String>,
    /// Karpenter NodePools: owned by the root too; their nodes are waited for.
    pub nodepools: Vec<String>,
    /// cluster-autoscaler was to resize the autoscaler groups.
    pub autoscaled: bool,
    /// The environment was asked to run the simulation's configuration: restore its own.
    pub configured: bool,
    /// The run's node lifecycle controller ran at its speed and the pool's nodes held leases to
    /// match, for its disruptions: bring back the nodes it failed, and give the nodes the
    /// pool's own lease once the controller runs as the environment's again.
    pub node_lifecycle: bool,
}

/// How long cluster-autoscaler gets to refresh its node groups without the retiring ones: CA's
/// default scan interval is 10 s, and a loop may be under way when the groups retire.
const RELEASE_DEADLINE: Duration = Duration::from_secs(30);

/// Order matters: the autoscaler groups retire first, so that cluster-autoscaler lets go of them
/// before their pods and nodes start to vanish under it; then the simulation's namespaces go,
/// while their pods' nodes still exist (a pod on a vanished node waits for the pod garbage
/// collector, minutes later); then the root takes the rest (seat Deployments, NodePools,
/// cluster-scoped objects), and Karpenter the NodePools' nodes; then the pool's groups.
pub async fn cleanup(
    ctx: &RunContext,
    handle: &Handle,
    created: &Created,
) -> Result<(), CleanupError> {
    let mut problems = Vec::new();
    // First: a failed node's kubelet finishes none of the pods the namespaces' deletion asks
    // it to.
    if created.node_lifecycle
        && let Err(error) = disruptions::recover_all(&ctx.mesh).await
    {
        problems.push(CleanupProblem::FailedNodes(error));
    }
    if created.root.is_some() {
        retire_autoscaler_groups(ctx, &handle.id, created.autoscaled).await;
        if let Err(problem) = delete_namespaces(ctx, &handle.id).await {
            problems.push(problem);
        }
        if let Err(error) =
            root::delete_and_wait(&ctx.client, &handle.id, ctx.settings.cleanup_deadline).await
        {
            problems.push(error.into());
        }
    }
    // The root took the NodePools; Karpenter drains and deletes their nodes after them.
    if let Err(problem) = wait_for_karpenter(ctx, &created.nodepools).await {
        problems.push(problem);
    }
    for name in &created.pool_groups {
        if let Err(source) = ctx.mesh.delete_node_group(name).await {
            problems.push(CleanupProblem::PoolGroup {
                name: name.clone(),
                source,
            });
        }
    }
    // Last: until the groups are gone, the simulation's CA must not be replaced by one that
    // would see them afresh.
    if created.configured
        && let Err(error) = ctx.mesh.restore_defaults().await
    {
        problems.push(CleanupProblem::Environment(error));
    }
    // After the controller's own grace period is back: never shorter than the leases.
    if created.node_lifecycle
        && let Err(error) = ctx.mesh.set_node_lease(None).await
    {
        problems.push(CleanupProblem::NodeLease(error));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CleanupError { problems })
    }
}

/// Retires the simulation's autoscaler groups and, when cluster-autoscaler was acting on them, waits
/// until the cloud provider says CA let go of them. Best effort: a CA that is not running never
/// refreshes, so after [`RELEASE_DEADLINE`] the cleanup goes on, as it would have before.
async fn retire_autoscaler_groups(ctx: &RunContext, id: &str, autoscaled: bool) {
    let (client, namespace) = (&ctx.client, &ctx.settings.namespace);
    if let Err(error) = seats::retire(client, namespace, id).await {
        tracing::warn!(%error, "retiring the autoscaler groups");
        return;
    }
    if !autoscaled {
        return;
    }
    let started = Instant::now();
    loop {
        match seats::unreleased(client, namespace, id).await {
            Ok(left) if left.is_empty() => return,
            Ok(left) if started.elapsed() >= RELEASE_DEADLINE => {
                tracing::warn!(
                    ?left,
                    "cluster-autoscaler did not refresh without the retiring autoscaler groups; \
                     deleting them anyway"
                );
                return;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "checking the retiring autoscaler groups");
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until Karpenter has removed the nodes of the simulation's NodePools, failing when
/// none went for `cleanup_deadline`.
async fn wait_for_karpenter(ctx: &RunContext, nodepools: &[String]) -> Result<(), CleanupProblem> {
    let mut last_progress = Instant::now();
    let mut fewest = usize::MAX;
    loop {
        let left = nodepools::nodes_left(&ctx.client, nodepools)
            .await
            .map_err(CleanupProblem::Nodes)?;
        if left.is_empty() {
            return Ok(());
        }
        if left.len() < fewest {
            fewest = left.len();
            last_progress = Instant::now();
        }
        if last_progress.elapsed() >= ctx.settings.cleanup_deadline {
            return Err(CleanupProblem::NodesLeft(left));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes the simulation's namespaces and waits until they are gone. A thousand-node day
/// leaves thousands of pods for the namespace controller and the pool to finish, so the
/// deadline is for a stall: it fails only after `cleanup_deadline` with neither a namespace
/// nor a pod fewer.
async fn delete_namespaces(ctx: &RunContext, id: &str) -> Result<(), CleanupProblem> {
    let mut last_progress = Instant::now();
    // The fewest namespaces and pods seen so far.
    let (mut fewest_spaces, mut fewest_pods) = (usize::MAX, u64::MAX);
    loop {
        let left = namespaces::of_simulation(&ctx.client, id).await?;
        if left.is_empty() {
            return Ok(());
        }
        let pods = namespaces::pods_in(&ctx.client, &left).await?;
        if left.len() < fewest_spaces || pods < fewest_pods {
            last_progress = Instant::now();
            fewest_spaces = fewest_spaces.min(left.len());
            fewest_pods = fewest_pods.min(pods);
        }
        if last_progress.elapsed() >= ctx.settings.cleanup_deadline {
            return Err(CleanupProblem::NamespacesLeft(left));
        }
        for name in &left {
            namespaces::delete(&ctx.client, name).await?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_in_one_message() {
        let error = CleanupError {
            problems: vec![
                CleanupProblem::NamespacesLeft(vec!["a".to_owned(), "b".to_owned()]),
                root::CleanupError::TimedOut(Duration::from_secs(3)).into(),
            ],
        };
        assert_eq!(
            error.to_string(),
            "cleanup: namespaces left behind: a, b; \
             simulated objects were still being deleted after 3s"
        );
    }
}
