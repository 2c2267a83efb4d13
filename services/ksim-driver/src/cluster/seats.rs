//! Deployment-backed node groups: one seat Deployment per group, which the pool turns into
//! virtual nodes and the cloud provider offers to cluster-autoscaler. The simulation root owns
//! it, so the simulation's cleanup removes the group too, after retiring it (see [`retire`]).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Pod},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use ksim_nodes::{
    labels::{
        DELETION_COST_ANNOTATION, GROUP_LABEL, HELD_ANNOTATION, PROVISIONING_ANNOTATION,
        RELEASED_ANNOTATION, RETIRING_ANNOTATION, STOCKOUT_ANNOTATION,
    },
    seats::{SeatDeployment, SkeletonSource},
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

use super::ClusterError;
use crate::domain::{RootRef, SIMULATION_LABEL};

#[derive(Debug)]
pub struct AutoscalerGroup<'a> {
    pub name: &'a str,
    pub skeleton_yaml: &'a str,
    pub min_size: i32,
    pub max_size: i32,
    pub initial_size: i32,
}

/// Creates the seat Deployment of `group` in `namespace`, held at its size until [`release`];
/// one that exists already (another simulation's, or a real group) is a conflict
/// ([`ClusterError::is_conflict`]), never taken over.
pub async fn create(
    client: &Client,
    namespace: &str,
    group: &AutoscalerGroup<'_>,
    root: &RootRef,
    simulation_id: &str,
) -> Result<Deployment, ClusterError> {
    let mut deployment = SeatDeployment {
        group: group.name.to_owned(),
        namespace: namespace.to_owned(),
        replicas: group.initial_size,
        skeleton: SkeletonSource::Inline(group.skeleton_yaml.to_owned()),
        min_size: Some(group.min_size),
        max_size: Some(group.max_size),
        provisioning: None,
    }
    .to_deployment();
    deployment.metadata.owner_references = Some(vec![OwnerReference {
        api_version: root.api_version.clone(),
        kind: root.kind.clone(),
        name: root.name.clone(),
        uid: root.uid.clone(),
        block_owner_deletion: Some(true),
        controller: Some(false),
    }]);
    deployment
        .metadata
        .labels
        .get_or_insert_default()
        .insert(SIMULATION_LABEL.to_owned(), simulation_id.to_owned());
    deployment
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(HELD_ANNOTATION.to_owned(), "true".to_owned());
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &deployment)
        .await
        .map_err(|e| {
            ClusterError::new(
                "creating",
                format!("the seat Deployment of node group {}", group.name),
                e,
            )
        })
}

/// The simulation's seat Deployments in `namespace`.
async fn of_simulation(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
) -> Result<Vec<Deployment>, kube::Error> {
    let selector = format!("{SIMULATION_LABEL}={simulation_id},{GROUP_LABEL}");
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// Lifts the hold on the simulation's autoscaler groups as the replay's clock starts: until then
/// their nodes wait, empty, for a replay that has not begun, and cluster-autoscaler would
/// count that time as unneeded time and remove them.
///
/// Each group gets its provisioning model here (`provisioning(group)`, the JSON the pool reads,
/// see [`PROVISIONING_ANNOTATION`]): the nodes it starts with are the recording's first
/// instant and came at once; only what CA asks for later boots and lingers by the model.
pub async fn release(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
    provisioning: impl Fn(&str) -> Option<String>,
) -> Result<(), ClusterError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let failed = |e| ClusterError::new("releasing", "the simulation's autoscaler groups", e);
    for deployment in of_simulation(client, namespace, simulation_id)
        .await
        .map_err(failed)?
    {
        let group = deployment
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(GROUP_LABEL))
            .and_then(|group| provisioning(group));
        let patch = json!({ "metadata": { "annotations": {
            HELD_ANNOTATION: null,
            PROVISIONING_ANNOTATION: group,
        } } });
        let name = deployment.metadata.name.unwrap_or_default();
        api.patch(&name, &super::merge_params(), &Patch::Merge(&patch))
            .await
            .map_err(failed)?;
    }
    Ok(())
}

/// Starts (`Some(reason)`) or ends (`None`) a stockout of the simulation's autoscaler group
/// `group`: while its seat Deployment carries [`STOCKOUT_ANNOTATION`], the cloud provider
/// refuses every scale-up of it. Only the simulation's own groups are touched: another's of
/// the same name is not found.
pub async fn set_stockout(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
    group: &str,
    reason: Option<&str>,
) -> Result<(), ClusterError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let what = || format!("the seat Deployment of node group {group}");
    let selector = format!("{SIMULATION_LABEL}={simulation_id},{GROUP_LABEL}={group}");
    let found = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| ClusterError::new("finding", what(), e))?;
    let patch = json!({ "metadata": { "annotations": { STOCKOUT_ANNOTATION: reason } } });
    for deployment in found.items {
        let name = deployment.metadata.name.unwrap_or_default();
        api.patch(&name, &super::merge_params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| ClusterError::new("annotating", what(), e))?;
    }
    Ok(())
}

/// The simulation's seat Deployment of `group`, by name; `None`: it has none.
async fn seat_deployment(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
    group: &str,
) -> Result<Option<String>, ClusterError> {
    let selector = format!("{SIMULATION_LABEL}={simulation_id},{GROUP_LABEL}={group}");
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| {
            ClusterError::new(
                "finding",
                format!("the seat Deployment of node group {group}"),
                e,
            )
        })?
        .items
        .into_iter()
        .find_map(|deployment| deployment.metadata.name))
}

/// Adds `delta` to the replicas of the simulation's seat Deployment of `group`, read and
/// written with its resourceVersion (a concurrent resize by the cloud provider is read again,
/// never overwritten); the new count, `None` when the simulation has no such group.
pub async fn resize(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
    group: &str,
    delta: i32,
) -> Result<Option<i32>, ClusterError> {
    let Some(name) = seat_deployment(client, namespace, simulation_id, group).await? else {
        return Ok(None);
    };
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let what = || format!("the seat Deployment of node group {group}");
    let mut attempts = 0;
    loop {
        let mut deployment = api
            .get(&name)
            .await
            .map_err(|e| ClusterError::new("reading", what(), e))?;
        let spec = deployment.spec.get_or_insert_default();
        let replicas = spec.replicas.unwrap_or(1).saturating_add(delta).max(0);
        spec.replicas = Some(replicas);
        match api
            .replace(&name, &PostParams::default(), &deployment)
            .await
        {
            Ok(_) => return Ok(Some(replicas)),
            Err(error) if ksim_kube::is_conflict(&error) && attempts < 5 => attempts += 1,
            Err(error) => return Err(ClusterError::new("resizing", what(), error)),
        }
    }
}

/// Marks the seat `seat` of `group` the one its Deployment removes at its next scale-down:
/// the lowest pod-deletion-cost, as the cloud provider marks the seats cluster-autoscaler
/// deletes. A pod of that name that is not a seat of the group is left alone.
///
/// Returns once a watch begun before the mark has delivered it, or the seat is gone: the
/// ReplicaSet controller ranks seats by the cost its informer holds, and a scale-down before
/// its watch delivers the mark could remove another seat (the cloud provider waits on its own
/// informer for the same reason). `Ok(false)`: not delivered within `timeout`.
pub async fn mark_for_removal(
    client: &Client,
    namespace: &str,
    group: &str,
    seat: &str,
    timeout: Duration,
) -> Result<bool, ClusterError> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={seat}"));
    let mut events = std::pin::pin!(watcher(pods.clone(), config).default_backoff());
    let marked = |pod: &Pod| {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(DELETION_COST_ANNOTATION))
            .is_some_and(|cost| *cost == i32::MIN.to_string())
    };
    let deadline = tokio::time::Instant::now() + timeout;
    // The watch's first list, before the mark.
    let mut found = None;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(watcher::Event::InitApply(pod)))) => found = Some(pod),
            Ok(Some(Ok(watcher::Event::InitDone))) => break,
            // Retried by the backoff; the deadline bounds it.
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Ok(false),
        }
    }
    let Some(pod) = found.filter(|pod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(GROUP_LABEL))
            .is_some_and(|of| of == group)
    }) else {
        return Ok(true);
    };
    // Marked already: the watch delivered it, and the same patch again would deliver nothing.
    if marked(&pod) {
        return Ok(true);
    }
    let patch = json!({ "metadata": { "annotations": {
        DELETION_COST_ANNOTATION: i32::MIN.to_string(),
    } } });
    pods.patch(seat, &super::merge_params(), &Patch::Merge(&patch))
        .await
        .map_err(|e| ClusterError::new("marking", format!("seat {seat}"), e))?;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))))
                if marked(&pod) =>
            {
                return Ok(true);
            }
            Ok(Some(Ok(watcher::Event::Delete(_)))) => return Ok(true),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Ok(false),
        }
    }
}

/// Marks the simulation's seat Deployments retiring: the cloud provider stops offering them to
/// cluster-autoscaler, and marks each released once CA has refreshed without it.
pub async fn retire(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
) -> Result<(), kube::Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    // The model goes with the run: the cleanup's scale-down removes nodes at once.
    let patch = json!({ "metadata": { "annotations": {
        RETIRING_ANNOTATION: "true",
        PROVISIONING_ANNOTATION: null,
    } } });
    for deployment in of_simulation(client, namespace, simulation_id).await? {
        let name = deployment.metadata.name.unwrap_or_default();
        match api
            .patch(&name, &super::merge_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(error) if ksim_kube::is_not_found(&error) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// The simulation's seat Deployments the cloud provider has not marked released yet.
pub async fn unreleased(
    client: &Client,
    namespace: &str,
    simulation_id: &str,
) -> Result<Vec<String>, kube::Error> {
    Ok(of_simulation(client, namespace, simulation_id)
        .await?
        .into_iter()
        .filter(|d| {
            !d.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(RELEASED_ANNOTATION))
        })
        .filter_map(|d| d.metadata.name)
        .collect())
}
