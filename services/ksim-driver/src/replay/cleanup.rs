//! Removing what a simulation created, whatever ended it, and checking nothing is left.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, api::ListParams};
use tokio::time::Instant;

use super::{handle::Handle, run::RunContext};
use crate::{
    cluster::root,
    domain::{RootRef, SIMULATION_LABEL},
};

/// What a run created, recorded as it goes, so the cleanup removes exactly that: a node group
/// that existed before the run is never deleted by it.
#[derive(Debug, Default)]
pub struct Created {
    pub root: Option<RootRef>,
    /// Pool-managed groups; seat Deployments are owned by the root and go with it.
    pub pool_groups: Vec<String>,
}

/// Order matters: the simulation's namespaces go first, while their pods' nodes still exist
/// (a pod on a vanished node waits for the pod garbage collector, minutes later); then the root
/// takes the rest (seat Deployments, cluster-scoped objects); then the pool's groups.
pub async fn cleanup(ctx: &RunContext, handle: &Handle, created: &Created) -> Result<(), String> {
    let mut problems = Vec::new();
    if created.root.is_some() {
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
