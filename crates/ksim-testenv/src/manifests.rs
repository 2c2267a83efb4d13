//! Applies the project's own YAML manifests to a test cluster, the way `kubectl apply
//! --server-side` would, so tests exercise exactly what `deploy/` ships.

use kube::{
    Api, Client,
    api::{DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::{Scope, pinned_kind},
};

use crate::Error;

const FIELD_MANAGER: &str = "ksim-testenv";

/// Parses a multi-document YAML text into objects; empty documents are skipped.
pub fn parse(yaml: &str) -> Result<Vec<DynamicObject>, Error> {
    let documents: Vec<Option<DynamicObject>> =
        serde_saphyr::from_multiple(yaml).map_err(|e| Error::Manifest(e.to_string()))?;
    Ok(documents.into_iter().flatten().collect())
}

/// Server-side applies every object of `yaml`, in order.
pub async fn apply(client: &Client, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
    let mut applied = Vec::new();
    for object in parse(yaml)? {
        let types = object
            .types
            .as_ref()
            .ok_or_else(|| Error::Manifest("an object without apiVersion/kind".to_owned()))?;
        let gvk = GroupVersionKind::try_from(types).map_err(|e| Error::Manifest(e.to_string()))?;
        let (resource, capabilities) = pinned_kind(client, &gvk).await?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> =
            match (capabilities.scope, object.metadata.namespace.as_deref()) {
                (Scope::Namespaced, Some(namespace)) => {
                    Api::namespaced_with(client.clone(), namespace, &resource)
                }
                (Scope::Namespaced, None) => {
                    Api::default_namespaced_with(client.clone(), &resource)
                }
                (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
            };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        applied.push(api.patch(&name, &params, &Patch::Apply(&object)).await?);
    }
    Ok(applied)
}
