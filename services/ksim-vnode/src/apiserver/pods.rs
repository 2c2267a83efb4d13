//! Pod status writes, deletion, and the events a kubelet would emit.

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::{
    Api, Client, Resource,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::events::{Event, EventType, Recorder},
};
use serde_json::json;

use crate::domain::{labels::FIELD_MANAGER, pod::SANDBOX_FAILED_REASON};
use ksim_kube::{is_conflict, is_not_found};

#[derive(Clone)]
pub struct PodClient {
    client: Client,
    recorder: Recorder,
}

impl std::fmt::Debug for PodClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodClient").finish_non_exhaustive()
    }
}

impl PodClient {
    pub fn new(client: Client, pool: &str) -> Self {
        Self {
            recorder: super::recorder(client.clone(), pool),
            client,
        }
    }

    fn api(&self, pod: &Pod) -> Api<Pod> {
        Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }

    /// The pod as the apiserver has it now; `None` when it is gone.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Pod>, kube::Error> {
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    /// Writes `status` through the status subresource. A strategic merge keeps conditions
    /// and container statuses of other writers, merged by their keys.
    pub async fn write_status(&self, pod: &Pod, status: &PodStatus) -> Result<(), kube::Error> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let patch = json!({ "status": status });
        self.api(pod)
            .patch_status(name, &patch_params(), &Patch::Strategic(patch))
            .await
            .map(drop)
    }

    /// Deletes at once, but only the pod that was looked at: the UID precondition protects a
    /// new pod that took the same name. Gone or replaced counts as done.
    pub async fn delete_now(&self, pod: &Pod) -> Result<(), kube::Error> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api(pod).delete(name, &params).await {
            Err(error) if !is_not_found(&error) && !is_conflict(&error) => Err(error),
            _ => Ok(()),
        }
    }

    /// The pod stays Pending: `status` says why on the pod, and an event says it too, the
    /// way a kubelet reports a sandbox it cannot create.
    pub async fn report_no_ip(
        &self,
        pod: &Pod,
        status: &PodStatus,
        message: &str,
    ) -> Result<(), kube::Error> {
        self.write_status(pod, status).await?;
        let event = Event {
            type_: EventType::Warning,
            reason: SANDBOX_FAILED_REASON.to_owned(),
            note: Some(message.to_owned()),
            action: "CreatePodSandbox".to_owned(),
            secondary: None,
        };
        self.recorder.publish(&event, &pod.object_ref(&())).await
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}
