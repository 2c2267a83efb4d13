//! The provider's writes against the Kubernetes API.

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, core::v1::Pod};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use ksim_nodes::labels::{DELETION_COST_ANNOTATION, RELEASED_ANNOTATION};

use crate::provider::{ClusterError, ProviderWrites};

/// Field manager of every write, so `kubectl get -o yaml --show-managed-fields` shows who.
pub const FIELD_MANAGER: &str = "ksim-cloudprov";

#[derive(Clone)]
pub struct ApiCluster {
    client: Client,
}

impl std::fmt::Debug for ApiCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiCluster").finish_non_exhaustive()
    }
}

impl ApiCluster {
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl ProviderWrites for ApiCluster {
    async fn set_deletion_cost(
        &self,
        namespace: &str,
        pod: &str,
        cost: Option<i32>,
    ) -> Result<(), ClusterError> {
        let value = cost.map(|c| c.to_string());
        let patch = json!({ "metadata": { "annotations": { DELETION_COST_ANNOTATION: value } } });
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .patch(pod, &params(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| classify(e, format!("seat {namespace}/{pod}")))
    }

    async fn scale(
        &self,
        namespace: &str,
        deployment: &str,
        replicas: i32,
        resource_version: &str,
    ) -> Result<(), ClusterError> {
        // The resourceVersion makes the write conditional: a concurrent change is refused
        // with 409 instead of being overwritten.
        let patch = json!({
            "metadata": { "resourceVersion": resource_version },
            "spec": { "replicas": replicas },
        });
        Api::<Deployment>::namespaced(self.client.clone(), namespace)
            .patch_scale(deployment, &params(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| classify(e, format!("Deployment {namespace}/{deployment}")))
    }

    async fn mark_released(&self, namespace: &str, deployment: &str) -> Result<(), ClusterError> {
        let patch = json!({ "metadata": { "annotations": { RELEASED_ANNOTATION: "true" } } });
        Api::<Deployment>::namespaced(self.client.clone(), namespace)
            .patch(deployment, &params(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| classify(e, format!("Deployment {namespace}/{deployment}")))
    }

    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        match Api::<Node>::all(self.client.clone())
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match classify(e, format!("Node {name}")) {
                ClusterError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

fn classify(error: kube::Error, what: String) -> ClusterError {
    if ksim_kube::is_conflict(&error) {
        ClusterError::Conflict(what)
    } else if ksim_kube::is_not_found(&error) {
        ClusterError::NotFound(what)
    } else {
        ClusterError::Api(format!("{what}: {error}"))
    }
}
