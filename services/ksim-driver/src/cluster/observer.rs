//! Watches what the simulated cluster does: the simulation's pods (by phase, unscheduled, how
//! long each stayed Pending), its virtual nodes per group, and resizes of its seat Deployments
//! (cluster-autoscaler's scale-ups and scale-downs, made through the cloud provider). Pods
//! are also handed over as they start, for matching to their recorded launches.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use futures::TryStreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_nodes::{
    labels::{GROUP_LABEL, TRUE_VALUE, VIRTUAL_LABEL},
    node::is_ready,
};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{sync::mpsc, task::JoinSet, time::Instant};

use crate::domain::{
    SIMULATION_LABEL,
    report::{NodeCount, PodCounts, Sample, ScaleEvent},
};

#[derive(Debug)]
pub struct Observer {
    seen: Arc<Mutex<Seen>>,
    watches: JoinSet<()>,
}

#[derive(Debug)]
struct Seen {
    origin: Instant,
    groups: BTreeSet<String>,
    pods: HashMap<String, PodSeen>,
    pending_times: Vec<Duration>,
    nodes: HashMap<String, (String, bool)>,
    seat_replicas: HashMap<String, i32>,
    scale_events: Vec<ScaleEvent>,
    /// Where pods go when first seen started, if anyone asked.
    starts: Option<mpsc::UnboundedSender<Pod>>,
}

#[derive(Debug)]
struct PodSeen {
    phase: String,
    bound: bool,
    first_seen: Instant,
    ran: bool,
}

impl Observer {
    /// Starts watching. Offsets in samples and scale events count from [`Observer::set_origin`].
    /// Each simulation pod is also sent to `starts`, if given, when first seen started (Running,
    /// or already finished if it ended before the watch saw it run).
    pub fn start(
        client: &Client,
        simulation_id: &str,
        groups: BTreeSet<String>,
        seat_namespace: &str,
        starts: Option<mpsc::UnboundedSender<Pod>>,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen {
            origin: Instant::now(),
            groups,
            pods: HashMap::new(),
            pending_times: Vec::new(),
            nodes: HashMap::new(),
            seat_replicas: HashMap::new(),
            scale_events: Vec::new(),
            starts,
        }));
        let mut watches = JoinSet::new();
        let pods: Api<Pod> = Api::all(client.clone());
        let selector = format!("{SIMULATION_LABEL}={simulation_id}");
        watches.spawn(watch(
            pods,
            watcher::Config::default().labels(&selector),
            seen.clone(),
            Seen::pod,
        ));
        let nodes: Api<Node> = Api::all(client.clone());
        watches.spawn(watch(
            nodes,
            watcher::Config::default().labels(&format!("{VIRTUAL_LABEL}={TRUE_VALUE}")),
            seen.clone(),
            Seen::node,
        ));
        let seats: Api<Deployment> = Api::namespaced(client.clone(), seat_namespace);
        watches.spawn(watch(
            seats,
            watcher::Config::default().labels(GROUP_LABEL),
            seen.clone(),
            Seen::seat,
        ));
        Self { seen, watches }
    }

    pub fn set_origin(&self, origin: Instant) {
        self.lock().origin = origin;
    }

    pub fn sample(&self) -> Sample {
        let seen = self.lock();
        let mut nodes: BTreeMap<String, NodeCount> = seen
            .groups
            .iter()
            .map(|group| (group.clone(), NodeCount { nodes: 0, ready: 0 }))
            .collect();
        for (group, ready) in seen.nodes.values() {
            if let Some(count) = nodes.get_mut(group) {
                count.nodes += 1;
                count.ready += u64::from(*ready);
            }
        }
        let mut pods = PodCounts::default();
        let mut unscheduled = 0;
        for pod in seen.pods.values() {
            match pod.phase.as_str() {
                "Running" => pods.running += 1,
                "Succeeded" => pods.succeeded += 1,
                "Failed" => pods.failed += 1,
                "Unknown" => pods.unknown += 1,
                _ => {
                    pods.pending += 1;
                    unscheduled += u64::from(!pod.bound);
                }
            }
        }
        Sample {
            offset: Instant::now().saturating_duration_since(seen.origin),
            nodes,
            pods,
            unscheduled,
        }
    }

    pub fn pending_times(&self) -> Vec<Duration> {
        self.lock().pending_times.clone()
    }

    pub fn scale_events(&self) -> Vec<ScaleEvent> {
        self.lock().scale_events.clone()
    }

    pub fn stop(&mut self) {
        self.watches.abort_all();
    }

    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Feeds one kind's watch events into `seen` until aborted; the watcher retries on its own.
async fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    seen: Arc<Mutex<Seen>>,
    apply: fn(&mut Seen, &K, bool),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let events = watcher(api, config).default_backoff();
    let _ = events
        .try_for_each(|event| {
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                    apply(&mut seen, &object, true);
                }
                watcher::Event::Delete(object) => apply(&mut seen, &object, false),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            futures::future::ready(Ok(()))
        })
        .await;
}

impl Seen {
    fn pod(&mut self, pod: &Pod, present: bool) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if !present {
            self.pods.remove(&uid);
            return;
        }
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".to_owned());
        let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let entry = self.pods.entry(uid).or_insert_with(|| PodSeen {
            phase: String::new(),
            bound,
            first_seen: Instant::now(),
            ran: false,
        });
        entry.bound = bound;
        if !entry.ran && matches!(phase.as_str(), "Running" | "Succeeded" | "Failed") {
            entry.ran = true;
            self.pending_times.push(entry.first_seen.elapsed());
            if let Some(starts) = &self.starts {
                // The receiver goes with the simulation; a start after it is of no use.
                let _ = starts.send(pod.clone());
            }
        }
        entry.phase = phase;
    }

    fn node(&mut self, node: &Node, present: bool) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let group = node
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(GROUP_LABEL).cloned());
        match group {
            Some(group) if present => {
                self.nodes.insert(name, (group, is_ready(node)));
            }
            _ => {
                self.nodes.remove(&name);
            }
        }
    }

    fn seat(&mut self, deployment: &Deployment, present: bool) {
        let Some(group) = ksim_nodes::seats::group_of(deployment).map(str::to_owned) else {
            return;
        };
        if !self.groups.contains(&group) {
            return;
        }
        let replicas = if present {
            deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(1)
        } else {
            0
        };
        // The first sighting is the size the driver created; only changes after it are resizes.
        if let Some(previous) = self.seat_replicas.insert(group.clone(), replicas)
            && previous != replicas
            && present
        {
            self.scale_events.push(ScaleEvent {
                offset: Instant::now().saturating_duration_since(self.origin),
                group,
                delta: i64::from(replicas - previous),
            });
        }
    }
}
