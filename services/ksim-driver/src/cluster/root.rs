//! The simulation root: a cluster-scoped `SimulationRoot` that owns every replayed object and
//! namespace, so one foreground delete garbage-collects the whole simulation.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::ClusterError;
use crate::domain::{FIELD_MANAGER, RootRef, SIMULATION_LABEL};

use ksim_kube::simulation::{
    POOL_GROUPS_ANNOTATION, ROOT_GROUP, ROOT_KIND, ROOT_PLURAL, ROOT_VERSION, pool_groups,
    root_name, root_resource,
};

/// Root annotation: cluster-autoscaler was to resize the simulation's autoscaler groups.
const AUTOSCALED_ANNOTATION: &str = "ksim.io/autoscaled";

/// Installs (or updates) the SimulationRoot CRD and waits until the apiserver serves it.
pub async fn ensure_crd(client: &Client, deadline: Duration) -> Result<(), ClusterError> {
    let failed = |e| ClusterError::new("installing", "the SimulationRoot CRD", e);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{ROOT_PLURAL}.{ROOT_GROUP}") },
        "spec": {
            "group": ROOT_GROUP,
            "scope": "Cluster",
            "names": { "kind": ROOT_KIND, "plural": ROOT_PLURAL, "singular": "simulationroot", "listKind": "SimulationRootList" },
            "versions": [{
                "name": ROOT_VERSION, "served": true, "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "description": "Owns every object of one ksim simulation; deleting it removes them.",
                    "x-kubernetes-preserve-unknown-fields": true
                }}
            }]
        }
    });
    crds.patch(
        &format!("{ROOT_PLURAL}.{ROOT_GROUP}"),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(failed)?;
    let roots: Api<DynamicObject> = Api::all_with(client.clone(), &root_resource());
    let started = tokio::time::Instant::now();
    // A CRD is served a moment after it is accepted; listing is the test that counts.
    loop {
        match roots.list(&Default::default()).await {
            Ok(_) => return Ok(()),
            Err(error) if started.elapsed() >= deadline => return Err(failed(error)),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Creates the root of simulation `id`.
pub async fn create(client: &Client, id: &str) -> Result<RootRef, ClusterError> {
    let roots: Api<DynamicObject> = Api::all_with(client.clone(), &root_resource());
    let mut root = DynamicObject::new(&root_name(id), &root_resource());
    root.metadata.labels = Some([(SIMULATION_LABEL.to_owned(), id.to_owned())].into());
    let created = roots
        .create(&PostParams::default(), &root)
        .await
        .map_err(|e| ClusterError::new("creating", "the simulation root", e))?;
    Ok(RootRef {
        api_version: root_resource().api_version,
        kind: ROOT_KIND.to_owned(),
        name: root_name(id),
        uid: created.metadata.uid.unwrap_or_default(),
    })
}

/// Records on the root of `id` what its cleanup must remove beyond what the root owns.
pub async fn record(
    client: &Client,
    id: &str,
    pool_groups: &[String],
    autoscaled: bool,
) -> Result<(), ClusterError> {
    let roots: Api<DynamicObject> = Api::all_with(client.clone(), &root_resource());
    let patch = json!({ "metadata": { "annotations": {
        POOL_GROUPS_ANNOTATION: pool_groups.join(","),
        AUTOSCALED_ANNOTATION: autoscaled.to_string(),
    } } });
    roots
        .patch(&root_name(id), &super::merge_params(), &Patch::Merge(patch))
        .await
        .map_err(|e| ClusterError::new("recording", "the simulation on its root", e))?;
    Ok(())
}

/// A simulation root found in the cluster, with what its cleanup must remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRoot {
    pub id: String,
    pub root: RootRef,
    pub pool_groups: Vec<String>,
    pub autoscaled: bool,
}

/// Every simulation root in the cluster; none when the CRD is not installed.
pub async fn list(client: &Client) -> Result<Vec<FoundRoot>, kube::Error> {
    let roots: Api<DynamicObject> = Api::all_with(client.clone(), &root_resource());
    let listed = match roots.list(&Default::default()).await {
        Ok(listed) => listed,
        Err(error) if ksim_kube::is_not_found(&error) => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    Ok(listed
        .items
        .into_iter()
        .filter_map(|root| {
            let meta = root.metadata;
            let id = meta.labels.as_ref()?.get(SIMULATION_LABEL)?.clone();
            let annotations = meta.annotations.unwrap_or_default();
            Some(FoundRoot {
                root: RootRef {
                    api_version: root_resource().api_version,
                    kind: ROOT_KIND.to_owned(),
                    name: meta.name.unwrap_or_else(|| root_name(&id)),
                    uid: meta.uid.unwrap_or_default(),
                },
                pool_groups: pool_groups(Some(&annotations)),
                autoscaled: annotations.get(AUTOSCALED_ANNOTATION).map(String::as_str)
                    == Some("true"),
                id,
            })
        })
        .collect())
}

/// Deletes the root in the foreground and waits until it is gone, which the garbage collector
/// allows only once every object it owns (blockOwnerDeletion) is gone too.
pub async fn delete_and_wait(
    client: &Client,
    id: &str,
    deadline: Duration,
) -> Result<(), CleanupError> {
    let roots: Api<DynamicObject> = Api::all_with(client.clone(), &root_resource());
    match roots
        .delete(&root_name(id), &DeleteParams::foreground())
        .await
    {
        Ok(_) => {}
        Err(error) if ksim_kube::is_not_found(&error) => return Ok(()),
        Err(error) => return Err(CleanupError::Delete(error)),
    }
    let started = tokio::time::Instant::now();
    loop {
        match roots.get_opt(&root_name(id)).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) | Err(_) if started.elapsed() >= deadline => {
                return Err(CleanupError::TimedOut(deadline));
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error("deleting the simulation root: {0}")]
    Delete(kube::Error),
    #[error("simulated objects were still being deleted after {0:?}")]
    TimedOut(Duration),
}
