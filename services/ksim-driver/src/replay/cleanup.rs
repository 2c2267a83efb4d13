//! Removing what a simulation created, whatever ended it, and checking nothing is left.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, api::ListParams};
use tokio::time::Instant;

use super::{context::RunContext, handle::Handle};
use crate::{
    cluster::{root, seats},
    domain::{RootRef, SIMULATION_LABEL},
};

/// What a run created, recorded as it goes, so the cleanup removes exactly that: a node group
/// that existed before the run is never deleted by it.
#[derive(Debug, Default)]
pub struct Created {
    pub root: Option<RootRef>,
    /// Pool-managed groups; seat Deployments are owned by the root and go with it.
    pub pool_groups: Vec<String>,
    /// cluster-autoscaler was to resize the seat groups.
    pub autoscaled: bool,
}

/// How long cluster-autoscaler gets to refresh its node groups without the retiring ones: CA's
/// default scan interval is 10 s, and a loop may be under way when the groups retire.
const RELEASE_DEADLINE: Duration = Duration::from_secs(30);

/// Order matters: the seat groups retire first, so that cluster-autoscaler lets go of them
/// before their pods and nodes start to vanish under it; then the simulation's namespaces go,
/// while their pods' nodes still exist (a pod on a vanished node waits for the pod garbage
/// collector, minutes later); then the root takes the rest (seat Deployments, cluster-scoped
/// objects); then the pool's groups.
pub async fn cleanup(ctx: &RunContext, handle: &Handle, created: &Created) -> Result<(), String> {
    let mut problems = Vec::new();
    if created.root.is_some() {
        retire_seat_groups(ctx, &handle.id, created.autoscaled).await;
        if let Err(error) = delete_namespaces(ctx, &handle.id).await {
            problems.push(error);
        }
        if let Err(error) =
            root::delete_and_wait(&ctx.client, &handle.id, ctx.settings.cleanup_deadline).await
        {
            problems.push(error.to_string());
        }
    }
    for name in &created.pool_groups {
        if let Err(error) = ctx.mesh.delete_node_group(name).await {
            problems.push(format!("deleting node group {name}: {error}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("cleanup: {}", problems.join("; ")))
    }
}

/// Retires the simulation's seat groups and, when cluster-autoscaler was acting on them, waits
/// until the cloud provider says CA let go of them. Best effort: a CA that is not running never
/// refreshes, so after [`RELEASE_DEADLINE`] the cleanup goes on, as it would have before.
async fn retire_seat_groups(ctx: &RunContext, id: &str, autoscaled: bool) {
    let (client, namespace) = (&ctx.client, &ctx.settings.namespace);
    if let Err(error) = seats::retire(client, namespace, id).await {
        tracing::warn!(%error, "retiring the seat groups");
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
                    "cluster-autoscaler did not refresh without the retiring seat groups; \
                     deleting them anyway"
                );
                return;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "checking the retiring seat groups");
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn delete_namespaces(ctx: &RunContext, id: &str) -> Result<(), String> {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let started = Instant::now();
    loop {
        let left = leftover_namespaces(&ctx.client, id)
            .await
            .map_err(|e| format!("listing the simulation's namespaces: {e}"))?;
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= ctx.settings.cleanup_deadline {
            return Err(format!("namespaces left behind: {}", left.join(", ")));
        }
        for name in &left {
            match namespaces.delete(name, &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(format!("deleting namespace {name}: {error}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn leftover_namespaces(client: &Client, id: &str) -> Result<Vec<String>, kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let listed = namespaces
        .list_metadata(&ListParams::default().labels(&format!("{SIMULATION_LABEL}={id}")))
        .await?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect())
}
