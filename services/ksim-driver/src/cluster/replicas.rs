//! Watches the simulated `spec.replicas` of the workloads HPAs scale, for the report's
//! recorded-against-simulated replicas: one watch per scaled kind, filtered to the scaled
//! workloads themselves.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex, PoisonError},
};

use futures::StreamExt;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    runtime::{WatchStreamExt, watcher},
};
use tokio::{task::JoinSet, time::Instant};

use crate::domain::{
    Target,
    autoscaled::{RecordedReplicas, points},
    report::ObservedReplicas,
};

/// Changes kept per workload: an HPA changes a count at most every few seconds, so this is a
/// bound against a runaway, not a limit a replay meets.
const MAX_CHANGES: usize = 100_000;

#[derive(Debug)]
pub struct ReplicaWatch {
    seen: Arc<Mutex<Seen>>,
    /// Aborted on drop.
    _watches: JoinSet<()>,
}

#[derive(Debug)]
struct Seen {
    origin: Option<Instant>,
    /// Per scaled workload: its recorded name and series, and what was seen of it.
    workloads: BTreeMap<Target, Workload>,
}

/// A scaled workload's recorded name and series, and its counts seen, in order.
type Workload = (String, RecordedReplicas, Vec<(Instant, u64)>);

impl ReplicaWatch {
    /// Starts watching each of `scaled` (each named as recorded, `Kind/namespace/name`).
    pub fn start(client: &Client, scaled: Vec<(String, RecordedReplicas)>) -> Self {
        let kinds: BTreeSet<_> = scaled
            .iter()
            .map(|(_, recorded)| recorded.target.gvk.clone())
            .collect();
        let seen = Arc::new(Mutex::new(Seen {
            origin: None,
            workloads: scaled
                .into_iter()
                .map(|(name, recorded)| (recorded.target.clone(), (name, recorded, Vec::new())))
                .collect(),
        }));
        let mut watches = JoinSet::new();
        for gvk in kinds {
            // The plural as kube guesses it: right for the built-in workload kinds.
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind));
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            watches.spawn(watch(api, gvk, seen.clone()));
        }
        Self {
            seen,
            _watches: watches,
        }
    }

    /// Starts the replay's clock: what was seen before counts from 0.
    pub fn set_origin(&self, origin: Instant) {
        self.lock().origin = Some(origin);
    }

    /// What was recorded and seen so far, per workload.
    pub fn observed(&self) -> Vec<ObservedReplicas> {
        let seen = self.lock();
        let origin = seen.origin;
        seen.workloads
            .values()
            .map(|(name, recorded, changes)| {
                let offsets: Vec<_> = changes
                    .iter()
                    .map(|&(at, replicas)| {
                        let offset = origin.map_or(Default::default(), |origin| {
                            at.saturating_duration_since(origin)
                        });
                        (offset, replicas)
                    })
                    .collect();
                ObservedReplicas {
                    workload: name.clone(),
                    recorded: recorded.points.clone(),
                    simulated: points(&offsets),
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Seen {
    fn saw(&mut self, target: &Target, replicas: u64) {
        let Some((_, _, changes)) = self.workloads.get_mut(target) else {
            return;
        };
        // Relists repeat what is current; only changes are kept.
        if changes.last().is_some_and(|&(_, last)| last == replicas) || changes.len() >= MAX_CHANGES
        {
            return;
        }
        changes.push((Instant::now(), replicas));
    }
}

async fn watch(api: Api<DynamicObject>, gvk: crate::domain::Gvk, seen: Arc<Mutex<Seen>>) {
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let (object, deleted) = match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                (object, false)
            }
            Ok(watcher::Event::Delete(object)) => (object, true),
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            Err(error) => {
                tracing::debug!(kind = %gvk.kind, %error, "replica watch failed; retrying");
                continue;
            }
        };
        let target = Target {
            gvk: gvk.clone(),
            namespace: object.metadata.namespace.clone(),
            name: object.metadata.name.clone().unwrap_or_default(),
        };
        let replicas = if deleted {
            0
        } else {
            match object
                .data
                .pointer("/spec/replicas")
                .and_then(|v| v.as_u64())
            {
                Some(replicas) => replicas,
                None => continue,
            }
        };
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .saw(&target, replicas);
    }
}
