//! Getting the cluster ready for a replay: the simulation's namespaces, its node groups (pool
//! groups through the pool's API, seat Deployments for cluster-autoscaler), and waiting until
//! the nodes are Ready and the cloud provider offers the autoscaled groups.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use tokio::time::Instant;

use super::{context::RunContext, handle::Handle};
use crate::{
    cluster::{observer::Observer, root, seats},
    domain::{
        FIELD_MANAGER, RootRef, SIMULATION_LABEL,
        plan::Plan,
        rewrite::Rewriter,
        spec::{NodeGroup, SimulationSpec},
    },
};

/// Creates the simulation's namespaces. One that exists and is not this simulation's (another
/// simulation's, still in the cluster, or not a simulation's at all) fails the run before
/// anything is applied: taking it over would let this run's cleanup delete it.
pub async fn create_namespaces(
    client: &Client,
    id: &str,
    rewriter: &Rewriter,
    plan: &Plan,
) -> Result<(), String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in &plan.namespaces {
        let existing = namespaces
            .get_metadata_opt(name)
            .await
            .map_err(|e| format!("reading namespace {name}: {e}"))?;
        if let Some(existing) = existing {
            let owner = existing
                .metadata
                .labels
                .and_then(|labels| labels.get(SIMULATION_LABEL).cloned());
            if owner.as_deref() != Some(id) {
                let whose = owner.map_or_else(
                    || "is not a simulation's".to_owned(),
                    |other| format!("belongs to simulation {other}, still in the cluster"),
                );
                return Err(format!(
                    "namespace {name} {whose}; choose another namespace prefix or delete it"
                ));
            }
        }
        namespaces
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(rewriter.namespace_object(name)),
            )
            .await
            .map_err(|e| format!("creating namespace {name}: {e}"))?;
    }
    Ok(())
}

/// Creates the spec's node groups. Pool groups it created are added to `created` one by one,
/// so a failure half-way leaves the cleanup a list of exactly what is this run's; a group that
/// already exists fails the run and is left alone.
pub async fn create_node_groups(
    ctx: &RunContext,
    handle: &Handle,
    spec: &SimulationSpec,
    root: &RootRef,
    created: &mut Vec<String>,
) -> Result<(), String> {
    for group in &spec.node_groups {
        match group {
            NodeGroup::PoolManaged {
                name,
                skeleton_yaml,
                count,
            } => {
                ctx.mesh
                    .create_node_group(name, skeleton_yaml, *count)
                    .await
                    .map_err(|e| format!("creating node group {name}: {e}"))?;
                created.push(name.clone());
                // On the root too, for a driver restarted after this one died.
                root::record(&ctx.client, &handle.id, created, spec.enable_autoscaler)
                    .await
                    .map_err(|e| {
                        format!("recording node group {name} on the simulation root: {e}")
                    })?;
            }
            NodeGroup::Deployment {
                name,
                skeleton_yaml,
                min_size,
                max_size,
                initial_size,
            } => {
                let seat = seats::SeatGroup {
                    name,
                    skeleton_yaml,
                    min_size: *min_size,
                    max_size: *max_size,
                    initial_size: *initial_size,
                };
                seats::create(
                    &ctx.client,
                    &ctx.settings.namespace,
                    &seat,
                    root,
                    &handle.id,
                )
                .await
                .map_err(|e| match e {
                    kube::Error::Api(status) if status.code == 409 => format!(
                        "node group {name} already exists (its seat Deployment is in namespace {}); \
                         choose another name",
                        ctx.settings.namespace
                    ),
                    e => format!("creating the seat Deployment of node group {name}: {e}"),
                })?;
            }
        }
    }
    if spec.enable_autoscaler {
        wait_for_autoscaler_groups(ctx, spec).await?;
    }
    Ok(())
}

/// cluster-autoscaler sees a group only through the cloud provider; a group it cannot see would
/// make an autoscaling simulation silently static.
async fn wait_for_autoscaler_groups(ctx: &RunContext, spec: &SimulationSpec) -> Result<(), String> {
    let wanted: BTreeSet<&str> = spec
        .node_groups
        .iter()
        .filter(|g| matches!(g, NodeGroup::Deployment { .. }))
        .map(NodeGroup::name)
        .collect();
    let started = Instant::now();
    loop {
        let offered = ctx
            .mesh
            .autoscaler_groups()
            .await
            .map_err(|e| format!("asking the cloud provider for its node groups: {e}"))?
            .ok_or("enable_autoscaler needs the driver's --cloudprov-url")?;
        let missing: Vec<&&str> = wanted
            .iter()
            .filter(|name| !offered.iter().any(|id| id == **name))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= ctx.settings.ready_deadline {
            return Err(format!(
                "the cloud provider does not offer node groups {missing:?} to cluster-autoscaler"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn wait_for_nodes(
    ctx: &RunContext,
    handle: &Handle,
    spec: &SimulationSpec,
    observer: &Observer,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let sample = observer.sample();
        let short: Vec<String> = spec
            .node_groups
            .iter()
            .filter_map(|group| {
                let ready = sample.nodes.get(group.name()).map_or(0, |c| c.ready);
                let wanted = u64::try_from(group.initial_nodes()).unwrap_or(0);
                (ready < wanted).then(|| format!("{} ({ready}/{wanted} Ready)", group.name()))
            })
            .collect();
        if short.is_empty() || handle.cancel.is_cancelled() {
            return Ok(());
        }
        if started.elapsed() >= ctx.settings.ready_deadline {
            return Err(format!(
                "node groups were not Ready after {:?}: {}",
                ctx.settings.ready_deadline,
                short.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
