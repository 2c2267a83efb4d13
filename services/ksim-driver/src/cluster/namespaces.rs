//! Namespaces: the driver's own (seat Deployments and the lease live there) and the
//! simulation's, which carry its label and are owned by its root.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client,
    api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams},
};

use super::ClusterError;
use crate::domain::{FIELD_MANAGER, SIMULATION_LABEL};

/// A namespace found in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    /// The simulation its label says it belongs to; `None` for one that is not a simulation's.
    pub simulation: Option<String>,
}

/// Creates namespace `name` unless it exists; never changes one that does.
pub async fn ensure(client: &Client, name: &str) -> Result<(), ClusterError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let object = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(error) if ksim_kube::is_conflict(&error) => Ok(()),
        Err(error) => Err(ClusterError::new(
            "preparing",
            format!("namespace {name}"),
            error,
        )),
    }
}

/// Namespace `name` if it exists.
pub async fn get(client: &Client, name: &str) -> Result<Option<Existing>, ClusterError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let found = api
        .get_metadata_opt(name)
        .await
        .map_err(|e| ClusterError::new("reading", format!("namespace {name}"), e))?;
    Ok(found.map(|namespace| Existing {
        simulation: namespace
            .metadata
            .labels
            .and_then(|labels| labels.get(SIMULATION_LABEL).cloned()),
    }))
}

/// Server-side applies `object` as namespace `name`, under the driver's field manager.
pub async fn apply(
    client: &Client,
    name: &str,
    object: &serde_json::Value,
) -> Result<(), ClusterError> {
    let api: Api<Namespace> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(drop)
    .map_err(|e| ClusterError::new("creating", format!("namespace {name}"), e))
}

/// The names of the namespaces labelled as simulation `id`'s.
pub async fn of_simulation(client: &Client, id: &str) -> Result<Vec<String>, ClusterError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let listed = api
        .list_metadata(&ListParams::default().labels(&format!("{SIMULATION_LABEL}={id}")))
        .await
        .map_err(|e| ClusterError::new("listing", "the simulation's namespaces", e))?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|namespace| namespace.metadata.name)
        .collect())
}

/// Deletes namespace `name`; one already gone counts as deleted.
pub async fn delete(client: &Client, name: &str) -> Result<(), ClusterError> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(error) if ksim_kube::is_not_found(&error) => Ok(()),
        Err(error) => Err(ClusterError::new(
            "deleting",
            format!("namespace {name}"),
            error,
        )),
    }
}

/// How many pods namespaces `names` still hold, read cheaply: a list of one item per namespace,
/// whose `remainingItemCount` says how many more there are.
pub async fn pods_in(client: &Client, names: &[String]) -> Result<u64, ClusterError> {
    let mut total = 0;
    for name in names {
        let api: Api<Pod> = Api::namespaced(client.clone(), name);
        let page = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|e| {
                ClusterError::new("listing", format!("the pods of namespace {name}"), e)
            })?;
        let remaining = page.metadata.remaining_item_count.unwrap_or(0);
        total += page.items.len() as u64 + u64::try_from(remaining).unwrap_or(0);
    }
    Ok(total)
}
