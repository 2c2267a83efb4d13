//! Watches the simulation's Deployments and StatefulSets for their desired (`spec.replicas`)
//! and ready (`status.readyReplicas`) replicas, for what a run's disruptions cost them. Only
//! a run with disruptions starts it.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{task::JoinSet, time::Instant};

use crate::domain::report::{ObservedAvailability, ReadyPoint};

/// Changes kept per workload: a bound against a flapping workload, not a limit a replay meets.
const MAX_POINTS: usize = 100_000;

#[derive(Debug)]
pub struct AvailabilityWatch {
    seen: Arc<Mutex<Seen>>,
    /// Aborted on drop.
    _watches: JoinSet<()>,
}

#[derive(Debug)]
struct Seen {
    origin: Instant,
    /// Replayed namespaces are `<prefix>-<recorded>`.
    prefix: String,
    /// Per workload as recorded (`Kind/namespace/name`): (when, desired, ready), changes only.
    workloads: BTreeMap<String, Vec<(Instant, u64, u64)>>,
}

impl AvailabilityWatch {
    /// Watches the workloads in namespaces `<prefix>-*`; offsets count from `origin`.
    pub fn start(client: &Client, prefix: &str, origin: Instant) -> Self {
        let seen = Arc::new(Mutex::new(Seen {
            origin,
            prefix: format!("{prefix}-"),
            workloads: BTreeMap::new(),
        }));
        let mut watches = JoinSet::new();
        watches.spawn(watch(
            Api::<Deployment>::all(client.clone()),
            seen.clone(),
            |d| {
                let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
                (desired, ready.unwrap_or(0))
            },
        ));
        watches.spawn(watch(
            Api::<StatefulSet>::all(client.clone()),
            seen.clone(),
            |s| {
                let desired = s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let ready = s.status.as_ref().and_then(|s| s.ready_replicas);
                (desired, ready.unwrap_or(0))
            },
        ));
        Self {
            seen,
            _watches: watches,
        }
    }

    /// `<prefix>-`, which the replayed namespaces it watches begin with.
    pub fn namespace_prefix(&self) -> String {
        self.lock().prefix.clone()
    }

    /// What was seen so far, per workload; a change before the origin counts from 0.
    pub fn observed(&self) -> Vec<ObservedAvailability> {
        let seen = self.lock();
        seen.workloads
            .iter()
            .map(|(workload, changes)| ObservedAvailability {
                workload: workload.clone(),
                points: changes
                    .iter()
                    .map(|&(at, desired, ready)| ReadyPoint {
                        offset: at.saturating_duration_since(seen.origin),
                        desired,
                        ready,
                    })
                    .collect(),
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Seen {
    fn saw(&mut self, kind: &str, namespace: &str, name: &str, desired: u64, ready: u64) {
        let Some(recorded) = namespace.strip_prefix(&self.prefix) else {
            return;
        };
        let changes = self
            .workloads
            .entry(format!("{kind}/{recorded}/{name}"))
            .or_default();
        // Relists repeat what is current; only changes are kept.
        if changes
            .last()
            .is_some_and(|&(_, d, r)| (d, r) == (desired, ready))
            || changes.len() >= MAX_POINTS
        {
            return;
        }
        changes.push((Instant::now(), desired, ready));
    }
}

async fn watch<K>(api: Api<K>, seen: Arc<Mutex<Seen>>, replicas: fn(&K) -> (i32, i32))
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    K: Send + Sync + 'static,
{
    let kind = K::kind(&()).into_owned();
    let count = |n: i32| u64::try_from(n).unwrap_or(0);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    ksim_kube::watch::follow(&kind, events, |event| {
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let (desired, ready) = replicas(&object);
                let namespace = object.namespace().unwrap_or_default();
                seen.saw(
                    &kind,
                    &namespace,
                    &object.name_any(),
                    count(desired),
                    count(ready),
                );
            }
            // Gone: it wants nothing any more.
            watcher::Event::Delete(object) => {
                let namespace = object.namespace().unwrap_or_default();
                seen.saw(&kind, &namespace, &object.name_any(), 0, 0);
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    })
    .await;
}
