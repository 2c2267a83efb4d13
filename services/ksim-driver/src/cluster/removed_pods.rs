//! Which of a simulation's pods the cluster removes while the replay runs, for the bare-pod
//! rescheduling (`domain::bare_pods`).

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{sync::mpsc, task::JoinHandle};

use crate::domain::{Gvk, SIMULATION_LABEL, Target};

/// Sends each pod of the simulation that is deleted, until the handle is aborted. A delete
/// missed while the watch was down is not sent: the pod stays gone, as without rescheduling.
pub fn watch(
    client: &Client,
    simulation_id: &str,
) -> (mpsc::UnboundedReceiver<Target>, JoinHandle<()>) {
    let (removed, receiver) = mpsc::unbounded_channel();
    let pods: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&format!("{SIMULATION_LABEL}={simulation_id}"));
    let task = tokio::spawn(async move {
        let events = watcher(pods, config).default_backoff();
        ksim_kube::watch::follow("the simulation's pods", events, |event| {
            if let watcher::Event::Delete(pod) = event {
                let _ = removed.send(Target {
                    gvk: Gvk::new("", "v1", "Pod"),
                    namespace: pod.namespace(),
                    name: pod.name_any(),
                });
            }
        })
        .await;
    });
    (receiver, task)
}
