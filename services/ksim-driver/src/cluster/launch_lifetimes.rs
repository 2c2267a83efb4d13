//! Gives each replayed pod, as it starts, the lifetime of the recorded launch it replays.
//!
//! The observer hands over every simulation pod as it first sees it started. This task finds the
//! pod's recorded owner by walking its controller references (a Deployment's pod is owned by a
//! ReplicaSet the replay never applied, so each hop above the pod is read from the apiserver,
//! once), counts the launch ([`Launches`]) and patches the pod's `ksim.io/lifetime-ms` (copied
//! from its template) to that launch's, removing `ksim.io/lifetime-pending` in the same patch.
//! The pool starts no lifetime clock while that marker is on a pod, so a pod never ends on its
//! template's lifetime however late the patch lands, and it completes at its start time plus
//! the annotation, so a late patch does not lengthen it either. A pod that cannot be matched
//! still loses the marker and keeps its template's lifetime. Pods are taken one at a time, in
//! the order they started, which is the launch order.

use std::collections::HashMap;

use k8s_openapi::{
    api::core::v1::Pod,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use ksim_nodes::labels::{LIFETIME_ANNOTATION, LIFETIME_PENDING_ANNOTATION};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    discovery::Scope,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::domain::{Gvk, launches::Launches, lifetimes::Owner, rewrite::Rewriter};

/// More hops than any real chain of controllers (CronJob -> Job -> Pod is the longest built in);
/// a cycle cannot hold the task.
const MAX_HOPS: usize = 16;

/// Matches started pods until `starts` closes or the returned handle is dropped.
pub fn spawn(
    client: Client,
    rewriter: Rewriter,
    launches: Launches,
    starts: mpsc::UnboundedReceiver<Pod>,
) -> AbortOnDropHandle<()> {
    let matcher = Matcher {
        client,
        rewriter,
        launches,
        resources: HashMap::new(),
        controllers: HashMap::new(),
    };
    AbortOnDropHandle::new(tokio::spawn(matcher.run(starts)))
}

struct Matcher {
    client: Client,
    rewriter: Rewriter,
    launches: Launches,
    resources: HashMap<Gvk, (ApiResource, Scope)>,
    /// The controller of each owner read so far, by kind, simulated namespace and name.
    controllers: HashMap<(Gvk, String, String), Option<OwnerReference>>,
}

impl Matcher {
    async fn run(mut self, mut starts: mpsc::UnboundedReceiver<Pod>) {
        while let Some(pod) = starts.recv().await {
            if let Err(error) = self.started(&pod).await {
                tracing::warn!(
                    pod = pod.metadata.name.as_deref().unwrap_or_default(),
                    %error,
                    "giving a replayed pod its recorded lifetime; it keeps its template's"
                );
                // Without the marker the pool runs the template's lifetime, not forever.
                if pending(&pod)
                    && let Err(error) = self.patch(&pod, None).await
                {
                    tracing::warn!(
                        pod = pod.metadata.name.as_deref().unwrap_or_default(),
                        %error,
                        "the pod runs until deleted"
                    );
                }
            }
        }
    }

    /// Removes the pending marker, and sets the lifetime to `lifetime` when it is `Some`
    /// (`Some(None)` removes the template's: the launch did not end on its own).
    async fn patch(&self, pod: &Pod, lifetime: Option<Option<String>>) -> Result<(), kube::Error> {
        let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return Ok(());
        };
        let mut annotations = serde_json::Map::new();
        annotations.insert(LIFETIME_PENDING_ANNOTATION.to_owned(), Value::Null);
        if let Some(lifetime) = lifetime {
            annotations.insert(LIFETIME_ANNOTATION.to_owned(), json!(lifetime));
        }
        let patch = json!({ "metadata": { "annotations": annotations } });
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(error) if ksim_kube::is_not_found(&error) => Ok(()),
            other => other.map(drop),
        }
    }

    async fn started(&mut self, pod: &Pod) -> Result<(), kube::Error> {
        let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return Ok(());
        };
        let Some(recorded_namespace) = self.rewriter.recorded_namespace(namespace) else {
            return self.release(pod).await;
        };
        let mut chain = vec![Owner::new(
            Gvk::new("", "v1", "Pod"),
            recorded_namespace,
            name,
        )];
        let mut next = controller(&pod.metadata);
        for _ in 0..MAX_HOPS {
            let Some(reference) = next else { break };
            let gvk = Gvk::from(&ksim_trace::gvk::from_api_version(
                &reference.api_version,
                &reference.kind,
            ));
            chain.push(Owner::new(gvk.clone(), recorded_namespace, &reference.name));
            next = self.controller_of(gvk, namespace, &reference.name).await?;
        }
        let Some(owner) = self.launches.owner_of(&chain).cloned() else {
            return self.release(pod).await;
        };
        let spec = serde_json::to_value(&pod.spec).unwrap_or_default();
        let spec_hash = ksim_trace::hash::pod_spec_hash(&json!({ "spec": spec }));
        let wanted = self.launches.start(&owner, spec_hash);
        // A pod that ended before it was seen running still counts as a launch, but is done.
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return Ok(());
        }
        let current = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(LIFETIME_ANNOTATION));
        if wanted.as_ref() == current && !pending(pod) {
            return Ok(());
        }
        // None removes the template's value: this launch did not end on its own.
        self.patch(pod, Some(wanted)).await
    }

    /// A pod no recorded launch is matched to keeps its template's lifetime.
    async fn release(&self, pod: &Pod) -> Result<(), kube::Error> {
        if pending(pod) {
            self.patch(pod, None).await
        } else {
            Ok(())
        }
    }

    /// The controller of an owner in `namespace`; `None` if it has none or is gone.
    async fn controller_of(
        &mut self,
        gvk: Gvk,
        namespace: &str,
        name: &str,
    ) -> Result<Option<OwnerReference>, kube::Error> {
        let key = (gvk, namespace.to_owned(), name.to_owned());
        if let Some(known) = self.controllers.get(&key) {
            return Ok(known.clone());
        }
        let api = self.api(&key.0, namespace).await?;
        let found = match api.get_opt(name).await? {
            Some(object) => controller(&object.metadata),
            None => None,
        };
        self.controllers.insert(key, found.clone());
        Ok(found)
    }

    async fn api(&mut self, gvk: &Gvk, namespace: &str) -> Result<Api<DynamicObject>, kube::Error> {
        let (resource, scope) = match self.resources.get(gvk) {
            Some(known) => known.clone(),
            None => {
                let lookup = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
                let (resource, capabilities) =
                    kube::discovery::pinned_kind(&self.client, &lookup).await?;
                let known = (resource, capabilities.scope);
                self.resources.insert(gvk.clone(), known.clone());
                known
            }
        };
        Ok(match scope {
            Scope::Namespaced => Api::namespaced_with(self.client.clone(), namespace, &resource),
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
        })
    }
}

/// Whether the pool waits for this pod's own lifetime.
fn pending(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(LIFETIME_PENDING_ANNOTATION))
}

fn controller(metadata: &ObjectMeta) -> Option<OwnerReference> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|reference| reference.controller == Some(true))
        .cloned()
}
