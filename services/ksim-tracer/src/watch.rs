//! The Kubernetes adapter: one watch per tracked kind, turned into [`Observation`]s for the
//! recorder. A kind whose CRD is missing, or whose watch is refused, is reported in its status
//! and retried; it never holds up the other kinds.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use futures::StreamExt;
use ksim_proto::ksim::trace::v1 as pb;
use kube::{
    Api, Client,
    api::DynamicObject,
    core::GroupVersionKind,
    discovery::{self, Scope},
    runtime::{
        WatchStreamExt,
        watcher::{self, Event},
    },
};
use serde_json::Value;
use tokio::{sync::mpsc, task::JoinSet};

use crate::domain::{
    kinds::TrackedKind,
    recorder::{Observation, key_of},
};

/// What ListTrackedKinds reports about one kind.
#[derive(Debug, Clone)]
pub struct KindStatus {
    pub state: pb::TrackedKindState,
    pub message: String,
    pub since: SystemTime,
    /// From discovery; empty until the kind was found.
    pub plural: String,
    pub namespaced: bool,
}

/// The status of every configured kind, in configuration order.
#[derive(Debug, Clone)]
pub struct Statuses(Arc<Mutex<Vec<KindStatus>>>);

impl Statuses {
    pub fn new(kinds: usize) -> Self {
        let initial = KindStatus {
            state: pb::TrackedKindState::Syncing,
            message: "starting".to_owned(),
            since: SystemTime::now(),
            plural: String::new(),
            namespaced: true,
        };
        Self(Arc::new(Mutex::new(vec![initial; kinds])))
    }

    pub fn get(&self) -> Vec<KindStatus> {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn set(&self, kind: usize, state: pb::TrackedKindState, message: impl Into<String>) {
        let message = message.into();
        if let Ok(mut statuses) = self.0.lock()
            && let Some(status) = statuses.get_mut(kind)
            && (status.state != state || status.message != message)
        {
            if status.state != state {
                status.since = SystemTime::now();
            }
            status.state = state;
            status.message = message;
        }
    }

    fn discovered(&self, kind: usize, plural: &str, namespaced: bool) {
        if let Ok(mut statuses) = self.0.lock()
            && let Some(status) = statuses.get_mut(kind)
        {
            plural.clone_into(&mut status.plural);
            status.namespaced = namespaced;
        }
    }

    /// True once every kind but pods has listed, or is known to be unavailable.
    fn settled_except_pods(&self, kinds: &[TrackedKind]) -> bool {
        self.get()
            .iter()
            .zip(kinds)
            .all(|(status, kind)| kind.is_pod() || status.state != pb::TrackedKindState::Syncing)
    }
}

/// Starts the watches. Pods start last: a pod's lifetime is attributed to its owner's owner
/// (a Deployment, not its ReplicaSet), which must be known when the pod is first seen.
pub fn spawn(
    client: Client,
    kinds: Vec<TrackedKind>,
    observations: mpsc::Sender<Observation>,
    statuses: Statuses,
    retry_interval: Duration,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let kinds = Arc::new(kinds);
    for (index, kind) in kinds.iter().enumerate().filter(|(_, k)| !k.is_pod()) {
        tasks.spawn(watch_kind(
            client.clone(),
            index,
            kind.clone(),
            observations.clone(),
            statuses.clone(),
            retry_interval,
        ));
    }
    let pods: Vec<(usize, TrackedKind)> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| k.is_pod())
        .map(|(i, k)| (i, k.clone()))
        .collect();
    tasks.spawn(async move {
        // Bounded: a kind that keeps syncing must not stop lifetimes from being recorded.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !statuses.settled_except_pods(&kinds) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut pod_tasks = JoinSet::new();
        for (index, kind) in pods {
            pod_tasks.spawn(watch_kind(
                client.clone(),
                index,
                kind,
                observations.clone(),
                statuses.clone(),
                retry_interval,
            ));
        }
        pod_tasks.join_all().await;
    });
    tasks
}

async fn watch_kind(
    client: Client,
    index: usize,
    kind: TrackedKind,
    observations: mpsc::Sender<Observation>,
    statuses: Statuses,
    retry_interval: Duration,
) {
    let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), &kind.kind);
    loop {
        let resource = match discovery::pinned_kind(&client, &gvk).await {
            Ok(found) => found,
            Err(error) => {
                let (state, message) = if is_missing(&error) {
                    (
                        pb::TrackedKindState::WaitingForCrd,
                        format!(
                            "the API has no {}/{}: is its CRD installed? ({error})",
                            kind.api_version, kind.kind
                        ),
                    )
                } else {
                    (
                        pb::TrackedKindState::Failing,
                        format!("discovery failed: {error}"),
                    )
                };
                tracing::warn!(kind = %kind.kind, %message, "tracked kind unavailable; retrying");
                statuses.set(index, state, message);
                tokio::time::sleep(retry_interval).await;
                continue;
            }
        };
        let (api_resource, capabilities) = resource;
        statuses.discovered(
            index,
            &api_resource.plural,
            capabilities.scope == Scope::Namespaced,
        );
        statuses.set(index, pb::TrackedKindState::Syncing, "listing");
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource);
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut listed = HashSet::new();
        let mut gone = false;
        while let Some(event) = stream.next().await {
            let observation = match event {
                Ok(Event::Init) => {
                    listed.clear();
                    statuses.set(index, pb::TrackedKindState::Syncing, "listing");
                    continue;
                }
                Ok(Event::InitApply(object)) => {
                    let object = to_value(object, &kind);
                    if let Some(key) = key_of(&kind, &object) {
                        listed.insert(key);
                    }
                    Observation::Applied {
                        kind: index,
                        object,
                        listed: true,
                    }
                }
                Ok(Event::InitDone) => {
                    statuses.set(index, pb::TrackedKindState::Watching, "watching");
                    Observation::ListDone {
                        kind: index,
                        listed: std::mem::take(&mut listed),
                    }
                }
                Ok(Event::Apply(object)) => Observation::Applied {
                    kind: index,
                    object: to_value(object, &kind),
                    listed: false,
                },
                Ok(Event::Delete(object)) => Observation::Deleted {
                    kind: index,
                    object: to_value(object, &kind),
                },
                Err(error) => {
                    // The watcher retries with back-off by itself; a vanished resource means
                    // the CRD went away, so discovery starts over.
                    gone = is_gone(&error);
                    tracing::warn!(kind = %kind.kind, %error, "watch failed");
                    statuses.set(index, pb::TrackedKindState::Failing, error.to_string());
                    if gone {
                        break;
                    }
                    continue;
                }
            };
            if observations.send(observation).await.is_err() {
                return; // the recorder stopped: shutting down
            }
        }
        if !gone {
            tokio::time::sleep(retry_interval).await;
        }
    }
}

/// The object as JSON, with the apiVersion and kind that list items come without.
fn to_value(object: DynamicObject, kind: &TrackedKind) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(kind.api_version.clone()),
        );
        map.insert("kind".to_owned(), Value::String(kind.kind.clone()));
    }
    value
}

fn is_missing(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Discovery(_)) || ksim_kube::is_not_found(error)
}

fn is_gone(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => ksim_kube::is_not_found(e),
        watcher::Error::WatchError(status) => status.code == 404,
        watcher::Error::NoResourceVersion => false,
    }
}
