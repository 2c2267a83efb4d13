//! Applies and deletes replayed objects: server-side apply under the driver's field manager,
//! deletes by name with their dependents, "not found" counted as done. Kinds are resolved once,
//! before the replay, so an unknown kind costs no request per object.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::Scope,
};

use super::{ApplyError, Cluster};
use crate::domain::{FIELD_MANAGER, Gvk, Target, autoscaled::REPLICAS_MANAGER};

#[derive(Clone)]
pub struct Applier {
    client: Client,
    served: HashMap<Gvk, Result<(ApiResource, Scope), Arc<kube::Error>>>,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("kinds", &self.served.len())
            .finish_non_exhaustive()
    }
}

impl Applier {
    /// Looks every kind up in the cluster's discovery; kinds it does not serve are remembered
    /// with the reason and reported on each object that uses them.
    pub async fn discover(client: Client, kinds: &BTreeSet<Gvk>) -> Self {
        let mut served = HashMap::with_capacity(kinds.len());
        for gvk in kinds {
            let lookup = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
            let resolved = kube::discovery::pinned_kind(&client, &lookup)
                .await
                .map(|(resource, capabilities)| (resource, capabilities.scope))
                .map_err(Arc::new);
            served.insert(gvk.clone(), resolved);
        }
        Self { client, served }
    }

    fn api(&self, target: &Target) -> Result<Api<DynamicObject>, ApplyError> {
        let (resource, scope) = match self.served.get(&target.gvk) {
            Some(Ok(served)) => served,
            Some(Err(source)) => {
                return Err(ApplyError::Unserved {
                    gvk: target.gvk.clone(),
                    source: source.clone(),
                });
            }
            None => return Err(ApplyError::NotLookedUp(target.gvk.clone())),
        };
        match (scope, &target.namespace) {
            (Scope::Namespaced, Some(namespace)) => Ok(Api::namespaced_with(
                self.client.clone(),
                namespace,
                resource,
            )),
            (Scope::Namespaced, None) => Err(ApplyError::NoNamespace {
                gvk: target.gvk.clone(),
                name: target.name.clone(),
            }),
            (Scope::Cluster, _) => Ok(Api::all_with(self.client.clone(), resource)),
        }
    }
}

impl Cluster for Applier {
    async fn apply(&self, target: &Target, object: &serde_json::Value) -> Result<(), ApplyError> {
        let api = self.api(target)?;
        api.patch(
            &target.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map(drop)
        .map_err(ApplyError::Request)
    }

    async fn hand_over_replicas(&self, target: &Target, replicas: i64) -> Result<(), ApplyError> {
        let api = self.api(target)?;
        let object = serde_json::json!({
            "apiVersion": target.gvk.api_version(),
            "kind": target.gvk.kind,
            "spec": {"replicas": replicas},
        });
        // Not forced: the workload was just created by the driver with this count, so nothing
        // else holds it yet; a conflict would say something else does, and is reported.
        api.patch(
            &target.name,
            &PatchParams::apply(REPLICAS_MANAGER),
            &Patch::Apply(&object),
        )
        .await
        .map(drop)
        .map_err(ApplyError::Request)
    }

    /// Deletes the object and, in the background, what it owns (as `kubectl delete` and the
    /// TTL controller do); one already gone counts as deleted. The server's default would
    /// orphan the pods of a batch/v1 Job or a ReplicationController: the simulated cluster
    /// would keep every deleted Job's pods, which the recorded one did not.
    async fn delete(&self, target: &Target) -> Result<(), ApplyError> {
        let api = self.api(target)?;
        match api.delete(&target.name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(error) if ksim_kube::is_not_found(&error) => Ok(()),
            Err(error) => Err(ApplyError::Request(error)),
        }
    }

    /// As the cronjob controller would ([`super::cron_runs`]).
    async fn cron_run(
        &self,
        cronjob: &Target,
        job: &str,
        scheduled: &str,
    ) -> Result<(), ApplyError> {
        super::cron_runs::run(&self.client, cronjob, job, scheduled).await
    }
}
