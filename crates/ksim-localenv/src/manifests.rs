//! Applies the project's own YAML manifests to a test cluster, the way `kubectl apply
//! --server-side` would, so tests exercise exactly what `deploy/` ships.

use kube::{
    Api, Client,
    api::{DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::{Scope, pinned_kind},
};

use crate::Error;

const FIELD_MANAGER: &str = "ksim-localenv";

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

/// The RBAC rules in `yaml` that use a wildcard (or leave apiGroups, resources or verbs empty),
/// one description each: least privilege means naming every verb and resource.
pub fn wildcard_rules(yaml: &str) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    let mut rules_seen = 0;
    for object in parse(yaml)? {
        let Some(rules) = object.data.get("rules").and_then(|r| r.as_array()) else {
            continue;
        };
        for rule in rules {
            rules_seen += 1;
            for field in ["apiGroups", "resources", "verbs"] {
                let values = rule[field]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                if values.is_empty() || values.iter().any(|v| v == "*") {
                    found.push(format!("{field} in {rule}"));
                }
            }
        }
    }
    if rules_seen == 0 {
        return Err(Error::Manifest("no RBAC rules found".to_owned()));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_and_empty_lists_are_reported_named_lists_pass() {
        let yaml = "kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: r}\nrules:\n- {apiGroups: [''], resources: [pods], verbs: [get]}\n- {apiGroups: [apps], resources: ['*'], verbs: [list]}\n- {apiGroups: [''], resources: [nodes], verbs: []}\n";
        let found = wildcard_rules(yaml).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("resources"), "{found:?}");
        assert!(found[1].starts_with("verbs"), "{found:?}");
        assert!(
            wildcard_rules("kind: ServiceAccount\napiVersion: v1\nmetadata: {name: a}\n").is_err()
        );
    }
}
