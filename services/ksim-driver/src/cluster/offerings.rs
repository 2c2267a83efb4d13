//! The Karpenter offerings a simulation has withdrawn (a zone outage, a stockout of a
//! NodePool), as ksim's Karpenter provider reads them (deploy/karpenter/provider): a ConfigMap
//! of the simulation's, labelled [`WITHDRAWN_LABEL`], owned by its root so that it goes with
//! the simulation. Written whole at each change.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::ClusterError;
use crate::domain::{FIELD_MANAGER, RootRef, SIMULATION_LABEL, disruptions::Withdrawal};

/// The label the provider selects its ConfigMaps by, in any namespace.
pub const WITHDRAWN_LABEL: &str = "ksim.io/withdrawn-offerings";
/// The key of the JSON array of withdrawals.
const KEY: &str = "withdrawn";

/// The ConfigMap of simulation `id`.
fn name(id: &str) -> String {
    format!("ksim-withdrawn-offerings-{id}")
}

/// Writes the withdrawals of simulation `id` in effect now (none takes every one back).
pub async fn write(
    client: &Client,
    namespace: &str,
    id: &str,
    root: &RootRef,
    withdrawals: &[Withdrawal],
) -> Result<(), ClusterError> {
    let failed = |e| ClusterError::new("writing", "the withdrawn Karpenter offerings", e);
    let data =
        serde_json::to_string(withdrawals).map_err(|e| failed(kube::Error::SerdeError(e)))?;
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name(id),
            "namespace": namespace,
            "labels": { WITHDRAWN_LABEL: "true", SIMULATION_LABEL: id },
            "ownerReferences": [{
                "apiVersion": root.api_version, "kind": root.kind, "name": root.name,
                "uid": root.uid, "blockOwnerDeletion": true, "controller": false,
            }],
        },
        "data": { KEY: data },
    });
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            &name(id),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(config_map),
        )
        .await
        .map_err(failed)?;
    Ok(())
}
