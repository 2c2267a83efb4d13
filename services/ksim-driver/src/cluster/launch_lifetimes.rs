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
//! still loses the marker and keeps its template's lifetime. Pods are matched one at a time, in
//! the order they started, which is the launch order; their patches go out together (at most
//! [`PATCHES_IN_FLIGHT`]): one after another, a day's bursts of hundreds of pods a second
//! queued behind the apiserver's latency, and the pods waiting for their lifetime ran on
//! long past it (a 1,000-node day at 40x filled the cluster with such Job pods).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::{
    api::core::v1::Pod,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use ksim_nodes::{
    labels::{LIFETIME_ANNOTATION, LIFETIME_PENDING_ANNOTATION},
    skeleton::quantity_value,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch},
    discovery::Scope,
};
use serde_json::{Value, json};
use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::task::AbortOnDropHandle;

use super::observer::PodChange;
use crate::domain::{
    Gvk,
    launches::Launches,
    lifetimes::Owner,
    rewrite::Rewriter,
    usage::{ContainerUsage, RecordedUsage, Roster},
};

/// Where started pods go for usage replay: the recording's owners, and the running pods.
#[derive(Debug, Clone)]
pub struct UsageFeed {
    pub recorded: Arc<RecordedUsage>,
    pub roster: Arc<Mutex<Roster>>,
}

impl UsageFeed {
    pub fn roster(&self) -> std::sync::MutexGuard<'_, Roster> {
        // No roster method leaves it half-updated.
        self.roster
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A started pod joins the roster with the topmost owner of `chain` the recording has
    /// usage of; a pod already finished does not.
    fn started(&self, pod: &Pod, chain: &[Owner]) {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Running") {
            return;
        }
        let owner = chain
            .iter()
            .rev()
            .find(|owner| self.recorded.has_owner(owner))
            .cloned();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        self.roster().started(key, owner, requests(pod));
    }
}

/// Each container's requests, the usage of a pod the recording says nothing of.
fn requests(pod: &Pod) -> Vec<ContainerUsage> {
    let containers = pod.spec.iter().flat_map(|spec| &spec.containers);
    containers
        .map(|container| {
            let requests = container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref());
            let amount = |name: &str| {
                requests
                    .and_then(|q| q.get(name))
                    .and_then(|quantity| quantity_value(&quantity.0))
                    .filter(|value| value.is_finite() && *value > 0.0)
                    .unwrap_or(0.0)
            };
            ContainerUsage {
                name: container.name.clone(),
                // Saturating casts: a quantity beyond u64 is refused by the pool anyway.
                cpu_nanocores: (amount("cpu") * 1e9).round() as u64,
                memory_bytes: amount("memory").round() as u64,
            }
        })
        .collect()
}

/// More hops than any real chain of controllers (CronJob -> Job -> Pod is the longest built in);
/// a cycle cannot hold the task.
const MAX_HOPS: usize = 16;

/// Lifetime patches in flight at once: enough to keep up with a burst of starts, few enough
/// not to crowd out the replay's own requests (the driver's default is 128 in flight).
const PATCHES_IN_FLIGHT: usize = 32;

/// Matches started pods until `starts` closes or the returned handle is dropped; with `usage`,
/// also keeps its roster of running pods.
pub fn spawn(
    client: Client,
    rewriter: Rewriter,
    launches: Launches,
    usage: Option<UsageFeed>,
    starts: mpsc::UnboundedReceiver<PodChange>,
) -> AbortOnDropHandle<()> {
    let matcher = Matcher {
        client,
        rewriter,
        launches,
        usage,
        resources: HashMap::new(),
        controllers: HashMap::new(),
    };
    let patches = matcher.client.clone();
    AbortOnDropHandle::new(tokio::spawn(
        matcher.run(starts, move |change| apply(patches.clone(), change)),
    ))
}

/// What a started pod needs: the pending marker removed, and its lifetime set to `lifetime`
/// when that is `Some` (`Some(None)` removes the template's: the launch did not end on its own).
#[derive(Debug, Clone, PartialEq)]
struct Change {
    namespace: String,
    name: String,
    lifetime: Option<Option<String>>,
}

impl Change {
    fn of(pod: &Pod, lifetime: Option<Option<String>>) -> Option<Self> {
        Some(Self {
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            lifetime,
        })
    }
}

/// Patches the pod; a pod already gone needs nothing. If the patch fails, a second one only
/// removes the marker, so the pod ends on its template's lifetime rather than never (as a pod
/// whose match failed does).
async fn apply(client: Client, change: Change) {
    let pods: Api<Pod> = Api::namespaced(client, &change.namespace);
    let Err(error) = patch(&pods, &change.name, change.lifetime.as_ref()).await else {
        return;
    };
    tracing::warn!(
        pod = change.name,
        %error,
        "giving a replayed pod its recorded lifetime; it keeps its template's"
    );
    if change.lifetime.is_some()
        && let Err(error) = patch(&pods, &change.name, None).await
    {
        tracing::warn!(pod = change.name, %error, "the pod runs until deleted");
    }
}

/// Removes the pending marker and, when `lifetime` is `Some`, sets the lifetime to it.
async fn patch(
    pods: &Api<Pod>,
    name: &str,
    lifetime: Option<&Option<String>>,
) -> Result<(), kube::Error> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(LIFETIME_PENDING_ANNOTATION.to_owned(), Value::Null);
    if let Some(lifetime) = lifetime {
        annotations.insert(LIFETIME_ANNOTATION.to_owned(), json!(lifetime));
    }
    let patch = json!({ "metadata": { "annotations": annotations } });
    match pods
        .patch(name, &super::merge_params(), &Patch::Merge(&patch))
        .await
    {
        Err(error) if ksim_kube::is_not_found(&error) => Ok(()),
        other => other.map(drop),
    }
}

struct Matcher {
    client: Client,
    rewriter: Rewriter,
    launches: Launches,
    usage: Option<UsageFeed>,
    resources: HashMap<Gvk, (ApiResource, Scope)>,
    /// The controller of each owner read so far, by kind, simulated namespace and name.
    controllers: HashMap<(Gvk, String, String), Option<OwnerReference>>,
}

impl Matcher {
    /// Matches each started pod in turn and hands its change to `apply`, with at most
    /// [`PATCHES_IN_FLIGHT`] applying at once.
    async fn run<A, F>(mut self, mut starts: mpsc::UnboundedReceiver<PodChange>, apply: A)
    where
        A: Fn(Change) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let mut in_flight = JoinSet::new();
        while let Some(change) = starts.recv().await {
            let pod = match change {
                PodChange::Started(pod) => pod,
                PodChange::Ended(key) => {
                    if let Some(usage) = &self.usage {
                        usage.roster().gone(&key);
                    }
                    continue;
                }
            };
            let change = match self.started(&pod).await {
                Ok(change) => change,
                Err(error) => {
                    tracing::warn!(
                        pod = pod.metadata.name.as_deref().unwrap_or_default(),
                        %error,
                        "giving a replayed pod its recorded lifetime; it keeps its template's"
                    );
                    // Its owner unknown, it still runs: it uses the default.
                    if let Some(usage) = &self.usage {
                        usage.started(&pod, &[]);
                    }
                    // Without the marker the pool runs the template's lifetime, not forever.
                    release(&pod)
                }
            };
            let Some(change) = change else { continue };
            while in_flight.try_join_next().is_some() {}
            if in_flight.len() >= PATCHES_IN_FLIGHT {
                in_flight.join_next().await;
            }
            in_flight.spawn(apply(change));
        }
        while in_flight.join_next().await.is_some() {}
    }

    /// The change a started pod needs, if any.
    async fn started(&mut self, pod: &Pod) -> Result<Option<Change>, kube::Error> {
        let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return Ok(None);
        };
        let Some(recorded_namespace) = self.rewriter.recorded_namespace(namespace) else {
            if let Some(usage) = &self.usage {
                usage.started(pod, &[]);
            }
            return Ok(release(pod));
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
        if let Some(usage) = &self.usage {
            usage.started(pod, &chain);
        }
        let Some(owner) = self.launches.owner_of(&chain).cloned() else {
            return Ok(release(pod));
        };
        let spec = serde_json::to_value(&pod.spec).unwrap_or_default();
        let spec_hash = ksim_trace::hash::pod_spec_hash(&json!({ "spec": spec }));
        let wanted = self.launches.start(&owner, spec_hash);
        // A pod that ended before it was seen running still counts as a launch, but is done.
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return Ok(None);
        }
        let current = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(LIFETIME_ANNOTATION));
        if wanted.as_ref() == current && !pending(pod) {
            return Ok(None);
        }
        // None removes the template's value: this launch did not end on its own.
        Ok(Change::of(pod, Some(wanted)))
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

/// A pod no recorded launch is matched to keeps its template's lifetime.
fn release(pod: &Pod) -> Option<Change> {
    pending(pod).then(|| Change::of(pod, None)).flatten()
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

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeMap,
        sync::{
            Arc, Mutex,
            atomic::{AtomicUsize, Ordering},
        },
        time::Duration,
    };

    use super::*;
    use crate::domain::{
        lifetimes::Lifetimes,
        rewrite::{RewriteOptions, Rewriter},
    };

    /// For paths that must not reach the apiserver: every request fails.
    fn unreachable_client() -> Client {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other(
                "no apiserver in a unit test",
            ))
        });
        Client::new(service, "default")
    }

    fn matcher() -> Matcher {
        let options = RewriteOptions::for_tests("ksim-sim-1", 1.0);
        Matcher {
            client: unreachable_client(),
            rewriter: Rewriter::new(options, &Lifetimes::default()),
            launches: Launches::new(Lifetimes::default(), 1.0),
            usage: None,
            resources: HashMap::new(),
            controllers: HashMap::new(),
        }
    }

    /// A started pod in a namespace no run owns: it only needs its marker removed, so the
    /// matcher asks the apiserver nothing.
    fn pod(name: &str, marked: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("elsewhere".to_owned());
        pod.metadata.name = Some(name.to_owned());
        if marked {
            pod.metadata.annotations = Some(BTreeMap::from([(
                LIFETIME_PENDING_ANNOTATION.to_owned(),
                "true".to_owned(),
            )]));
        }
        pod
    }

    /// f3162f9's fallback, and whose patches they are: the apiserver refuses the lifetime
    /// patch, then takes the one that only removes the marker.
    #[tokio::test]
    async fn a_refused_lifetime_patch_falls_back_to_removing_only_the_marker() {
        let requests = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let service = {
            let requests = requests.clone();
            tower::service_fn(move |request: http::Request<kube::client::Body>| {
                let requests = requests.clone();
                async move {
                    let uri = request.uri().to_string();
                    let body = request.into_body().collect_bytes().await?;
                    let first = {
                        let mut requests = requests.lock().unwrap();
                        requests.push((uri, String::from_utf8_lossy(&body).into_owned()));
                        requests.len() == 1
                    };
                    let (status, body) = if first {
                        (
                            500,
                            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd is away","code":500}"#,
                        )
                    } else {
                        (
                            200,
                            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}"#,
                        )
                    };
                    let response = http::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.as_bytes().to_vec()))
                        .unwrap();
                    Ok::<_, kube::Error>(response)
                }
            })
        };
        let change = Change {
            namespace: "ns".to_owned(),
            name: "p".to_owned(),
            lifetime: Some(Some("65521".to_owned())),
        };
        apply(Client::new(service, "default"), change).await;

        let requests = requests.lock().unwrap();
        assert_eq!(requests.len(), 2, "{requests:?}");
        for (uri, _) in requests.iter() {
            assert!(uri.contains("fieldManager=ksim-driver"), "{uri}");
        }
        assert!(
            requests[0].1.contains(LIFETIME_ANNOTATION),
            "{}",
            requests[0].1
        );
        assert!(
            !requests[1].1.contains(LIFETIME_ANNOTATION),
            "{}",
            requests[1].1
        );
        assert!(
            requests[1].1.contains(LIFETIME_PENDING_ANNOTATION),
            "{}",
            requests[1].1
        );
    }

    #[tokio::test]
    async fn a_burst_of_starts_is_patched_together_and_never_more_at_once_than_the_bound() {
        let (starts, received) = mpsc::unbounded_channel();
        let total = PATCHES_IN_FLIGHT * 3;
        for i in 0..total {
            starts
                .send(PodChange::Started(Box::new(pod(&format!("pod-{i}"), true))))
                .unwrap();
        }
        // Not marked: nothing to patch.
        starts
            .send(PodChange::Started(Box::new(pod("unmarked", false))))
            .unwrap();
        drop(starts);

        // A patch is answered only once PATCHES_IN_FLIGHT of them are waiting: sent one after
        // another, the first would wait for ever.
        let answers = Arc::new(tokio::sync::Barrier::new(PATCHES_IN_FLIGHT));
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let applied = Arc::new(Mutex::new(Vec::new()));
        let apply = {
            let (most, applied) = (most.clone(), applied.clone());
            move |change: Change| {
                let (answers, now, most, applied) =
                    (answers.clone(), now.clone(), most.clone(), applied.clone());
                async move {
                    most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    answers.wait().await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    applied.lock().unwrap().push(change);
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), matcher().run(received, apply))
            .await
            .expect("the patches went out one after another");

        let applied = applied.lock().unwrap();
        assert_eq!(applied.len(), total);
        assert!(
            applied
                .iter()
                .all(|change| change.namespace == "elsewhere" && change.lifetime.is_none()),
            "{applied:?}"
        );
        assert_eq!(most.load(Ordering::SeqCst), PATCHES_IN_FLIGHT);
    }

    #[tokio::test]
    async fn running_pods_join_the_usage_roster_with_their_requests_and_leave_when_they_end() {
        let feed = UsageFeed {
            recorded: Arc::new(RecordedUsage::default()),
            roster: Arc::new(Mutex::new(Roster::default())),
        };
        let mut matcher = matcher();
        matcher.usage = Some(feed.clone());
        let running = |name: &str, cpu: &str| {
            let mut pod = pod(name, false);
            pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".to_owned()),
                ..Default::default()
            });
            pod.spec = Some(serde_json::from_value(json!({
                "containers": [{ "name": "app",
                                 "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }]
            })).unwrap());
            pod
        };
        let mut finished = running("done", "1");
        finished.status.as_mut().unwrap().phase = Some("Succeeded".to_owned());
        let (starts, received) = mpsc::unbounded_channel();
        for change in [
            PodChange::Started(Box::new(running("web-1", "250m"))),
            PodChange::Started(Box::new(running("web-2", "1"))),
            PodChange::Started(Box::new(finished)),
            PodChange::Ended("elsewhere/web-1".to_owned()),
        ] {
            starts.send(change).unwrap();
        }
        drop(starts);
        matcher.run(received, |_| async {}).await;
        let running = feed.roster().running();
        assert_eq!(running.len(), 1, "{running:?}");
        assert_eq!(running[0].id, "elsewhere/web-2");
        assert_eq!(running[0].owner, None);
        assert_eq!(
            running[0].requests,
            [ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 1_000_000_000,
                memory_bytes: 64 << 20,
            }]
        );
    }
}
