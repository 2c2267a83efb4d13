//! Waiting for pods, as every test that runs workloads on virtual nodes does.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};

use crate::wait::{self, TimedOut};

/// The pods in `namespace` matching `label_selector` that are in `phase`, once there are
/// exactly `count` of them. Pods in other phases may exist beside them.
pub async fn in_phase(
    client: &Client,
    namespace: &str,
    label_selector: &str,
    phase: &str,
    count: usize,
    deadline: Duration,
) -> Result<Vec<Pod>, TimedOut> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(label_selector);
    wait::until(
        &format!("{count} {phase} pods ({label_selector})"),
        deadline,
        || async {
            let list = pods.list(&params).await.map_err(|e| e.to_string())?;
            let total = list.items.len();
            let matching: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase))
                .collect();
            if matching.len() == count {
                Ok(matching)
            } else {
                Err(format!("{} {phase} of {total}", matching.len()))
            }
        },
    )
    .await
}

/// The node the pod `name` is bound to, once it is.
pub async fn bound_node(
    pods: &Api<Pod>,
    name: &str,
    deadline: Duration,
) -> Result<String, TimedOut> {
    wait::until(&format!("pod {name} bound"), deadline, || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        pod.spec
            .and_then(|spec| spec.node_name)
            .ok_or_else(|| "not bound".to_owned())
    })
    .await
}
