//! Applies and deletes replayed objects: server-side apply under the driver's field manager,
//! deletes by name with their dependents, "not found" counted as done. Kinds are resolved once,
//! before the replay, so an unknown kind costs no request per object. A cluster-scoped object
//! that exists is changed or deleted only if this run created it
//! ([`crate::domain::ownership`]).

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
        Preconditions,
    },
    discovery::Scope,
};

use super::{ApplyError, ReplayWrites};
use crate::domain::{FIELD_MANAGER, Gvk, Target, autoscaled::REPLICAS_MANAGER, ownership};

#[derive(Clone)]
pub struct Applier {
    client: Client,
    /// The run's id, which its cluster-scoped objects carry as their [`SIMULATION_LABEL`].
    ///
    /// [`SIMULATION_LABEL`]: crate::domain::SIMULATION_LABEL
    simulation: String,
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
    /// with the reason and reported on each object that uses them. `simulation` is the run's
    /// id: the cluster-scoped objects it may change or delete carry it.
    pub async fn discover(client: Client, simulation: &str, kinds: &BTreeSet<Gvk>) -> Self {
        let mut served = HashMap::with_capacity(kinds.len());
        for gvk in kinds {
            let lookup = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
            let resolved = kube::discovery::pinned_kind(&client, &lookup)
                .await
                .map(|(resource, capabilities)| (resource, capabilities.scope))
                .map_err(Arc::new);
            served.insert(gvk.clone(), resolved);
        }
        Self {
            client,
            simulation: simulation.to_owned(),
            served,
        }
    }

    /// The API of `target`'s kind, and whether it is cluster-scoped.
    fn api(&self, target: &Target) -> Result<(Api<DynamicObject>, bool), ApplyError> {
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
            (Scope::Namespaced, Some(namespace)) => Ok((
                Api::namespaced_with(self.client.clone(), namespace, resource),
                false,
            )),
            (Scope::Namespaced, None) => Err(ApplyError::NoNamespace {
                gvk: target.gvk.clone(),
                name: target.name.clone(),
            }),
            (Scope::Cluster, _) => Ok((Api::all_with(self.client.clone(), resource), true)),
        }
    }

    /// The uid of cluster-scoped `target` if it exists and this run created it; `None` if it
    /// does not exist; refused if another made it. One read more per operation, only for
    /// cluster-scoped objects: traces hold few, and namespaced ones need none (they go into
    /// the run's own namespaces).
    async fn own(
        &self,
        api: &Api<DynamicObject>,
        target: &Target,
    ) -> Result<Option<String>, ApplyError> {
        let Some(existing) = api
            .get_metadata_opt(&target.name)
            .await
            .map_err(ApplyError::Request)?
        else {
            return Ok(None);
        };
        let metadata = existing.metadata;
        ownership::may_touch(&self.simulation, metadata.labels.as_ref()).map_err(|reason| {
            ApplyError::NotCreatedHere {
                gvk: target.gvk.clone(),
                name: target.name.clone(),
                reason,
            }
        })?;
        // The apiserver gives every object a uid; were one missing, an empty precondition
        // fails the delete rather than dropping the check.
        Ok(Some(metadata.uid.unwrap_or_default()))
    }
}

impl ReplayWrites for Applier {
    async fn apply(&self, target: &Target, object: &serde_json::Value) -> Result<(), ApplyError> {
        let (api, cluster_scoped) = self.api(target)?;
        if cluster_scoped {
            self.own(&api, target).await?;
        }
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
        // Namespaced workloads only (HPA targets): no ownership to check.
        let (api, _) = self.api(target)?;
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
    /// would keep every deleted Job's pods, which the recorded one did not. A cluster-scoped
    /// object is deleted only if this run created it, and only the one read (its uid as the
    /// precondition), never another that replaced it meanwhile.
    async fn delete(&self, target: &Target) -> Result<(), ApplyError> {
        let (api, cluster_scoped) = self.api(target)?;
        let mut params = DeleteParams::background();
        if cluster_scoped {
            let Some(uid) = self.own(&api, target).await? else {
                return Ok(());
            };
            params = params.preconditions(Preconditions {
                uid: Some(uid),
                resource_version: None,
            });
        }
        match api.delete(&target.name, &params).await {
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
