//! Watches what the simulated cluster does: the simulation's pods (by phase, unscheduled, how
//! long each stayed Pending), its virtual nodes per group, and resizes of its seat Deployments
//! (cluster-autoscaler's scale-ups and scale-downs, made through the cloud provider) and the
//! nodes that join and leave the groups once the replay runs (which nodes it added and
//! removed). Pods are also handed over as they start, for matching to their recorded launches.
//! For what the cluster cost and why pods waited it also keeps what the pods request and the
//! nodes allocate (GPUs per model too: `domain::gpus`), the pods that never ran, evictions and
//! preemptions, and the scheduler's and CA's events about the simulation's pods.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Event, Node, Pod},
    resource::v1::{ResourceClaim, ResourceSlice},
};
use ksim_nodes::{
    devices::DEVICES_NOT_PUBLISHED_REASON,
    karpenter::PRICE_LABEL as KARPENTER_PRICE_LABEL,
    labels::{
        GROUP_LABEL, INSTANCE_TYPE_LABEL, KARPENTER_NODEPOOL_LABEL, OWNER_LABEL, OWNER_POOL,
        OWNER_SEATS, TRUE_VALUE, VIRTUAL_LABEL,
    },
    node::{is_shutting_down, takes_pods},
    skeleton::quantity_value,
};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{sync::mpsc, task::JoinSet, time::Instant};

use crate::domain::{
    SIMULATION_LABEL,
    explain::{EXPLANATION_ANNOTATION, MAX_EXPLAINED_PODS},
    gpus::{self, Amounts, Device, DeviceAsk, GPU_RESOURCE, GpuNode, PendingGpuPod, Placement},
    report::{
        GroupOwner, NeverRan, NodeChangeKind, NodeCount, ObservedNodeChange, PodPendingSplit,
        PodPhaseCounts, ResourceUsage, Sample, ScaleEvent, WaitReason,
    },
    waits, warnings,
};

#[derive(Debug)]
pub struct Observer {
    seen: Arc<Mutex<Seen>>,
    watches: JoinSet<()>,
}

#[derive(Debug)]
struct Seen {
    origin: Instant,
    /// Whether [`Observer::set_origin`] was called: nodes that come before are the groups'
    /// initial size, not changes.
    replaying: bool,
    groups: BTreeSet<String>,
    pods: HashMap<String, PodSeen>,
    pending_times: Vec<Duration>,
    /// DRA: per ResourceSlice, its node and devices; per ResourceClaim (by uid), what it asks
    /// and holds. Empty where the cluster has none or serves no resource.k8s.io/v1.
    slices: HashMap<String, SliceSeen>,
    claims: HashMap<String, ClaimSeen>,
    /// The same for the pods that asked for GPUs; how many did, and their owners.
    gpu_pending_times: Vec<Duration>,
    gpu_pods: u64,
    gpu_owners: BTreeSet<String>,
    /// Per pod that ran: where its pending time went.
    pending_splits: Vec<PodPendingSplit>,
    /// Per node that joined during the replay: first seen to Ready.
    node_ready_times: Vec<Duration>,
    /// Per node name: its group, whether it is Ready, and what it can allocate.
    nodes: HashMap<String, NodeSeen>,
    /// Node names listed so far while the node watch (re)lists, if it does.
    relisted_nodes: Option<HashSet<String>>,
    node_changes: Vec<ObservedNodeChange>,
    seat_replicas: HashMap<String, i32>,
    scale_events: Vec<ScaleEvent>,
    /// Where pods go when first seen started, if anyone asked.
    starts: Option<mpsc::UnboundedSender<PodChange>>,
    /// Pods deleted before they ran.
    never_ran: Vec<NeverRan>,
    evicted: HashSet<String>,
    /// Per pod evicted: when, its (simulated) namespace and its owner (see [`waits::owner`]).
    evictions: Vec<(Instant, String, String)>,
    preempted: HashSet<String>,
    /// Per simulation pod uid, also after it is gone: the owner its waits count for.
    owners: HashMap<String, String>,
    /// Per event uid: the count already counted (an event repeats by counting up).
    event_counts: HashMap<String, u64>,
    /// Waits from events about pods not seen yet, per pod uid.
    unclaimed: HashMap<String, Vec<(&'static str, String, u64)>>,
    waits: Vec<WaitReason>,
    /// Why Karpenter disrupted or kept the simulation's nodes, per NodePool.
    node_disruptions: Vec<WaitReason>,
    /// Per group, the nodes whose devices the pool could not publish, and why (as last said);
    /// by node, the same for nodes not seen yet (bounded).
    unpublished: BTreeMap<String, (BTreeSet<String>, String)>,
    unpublished_unseen: HashMap<String, String>,
    /// Per pod uid, also after it is gone: the scheduler's explanation as last written, for
    /// the first [`MAX_EXPLAINED_PODS`] pods explained.
    explained: HashMap<String, Explained>,
}

/// A pod's explanation as the scheduler wrote it (see `domain::explain`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Explained {
    /// The pod's namespace in the simulated cluster, and its name.
    pub namespace: String,
    pub name: String,
    /// Its workload (see [`owner_of`]).
    pub owner: String,
    /// The annotation's value.
    pub text: String,
}

/// Evictions kept with their time and owner: a bound against a cluster evicting for hours.
const MAX_EVICTIONS: usize = 100_000;

/// Pods whose events are kept before the pod itself is seen: enough for a simulation's burst,
/// bounded against a cluster's other pods.
const MAX_UNCLAIMED: usize = 10_000;

/// Nodes whose unpublished devices are kept before the node itself is seen: bounded against a
/// cluster's other nodes.
const MAX_UNSEEN_NODES: usize = 10_000;

#[derive(Debug)]
struct NodeSeen {
    group: String,
    /// Who sizes its group (`ksim.io/group-owner`): the report tells the pool's changes from
    /// the autoscaler's by it.
    owner: Option<GroupOwner>,
    /// Ready with the control plane's not-ready taint lifted: a replay that starts on a node
    /// still tainted would see its first pods crowd onto the nodes that are not.
    ready: bool,
    /// When the observer first saw it, if that was during the replay (a node that joined):
    /// its time to Ready is timed from there, once.
    joined_at: Option<Instant>,
    allocatable: Resources,
    instance_type: String,
    /// Its own price per hour in millionths, when it carries one (Karpenter's nodes).
    price_micros: Option<u64>,
    /// Removed from its group, lingering by the provisioning model until it goes.
    shutting_down: bool,
    /// A GPU node's model and labels (which pending GPU pods' placement reads); `None` for a
    /// node without GPUs, most of them.
    gpu: Option<Box<NodeGpus>>,
}

#[derive(Debug)]
struct NodeGpus {
    model: String,
    labels: BTreeMap<String, String>,
}

/// A node's ResourceSlice: the node, and per device its name, model and capacity.
#[derive(Debug)]
struct SliceSeen {
    node: String,
    devices: Vec<(String, Option<String>, BTreeMap<String, f64>)>,
}

/// A ResourceClaim: the pod it was made for (its owner), what it asks, and the devices
/// allocated to it.
#[derive(Debug)]
struct ClaimSeen {
    pod: Option<String>,
    asks: Vec<DeviceAsk>,
    allocated: Vec<Held>,
}

/// A device a claim holds, by pool and name, and the capacity it consumed (`None`: the whole
/// device).
#[derive(Debug)]
struct Held {
    pool: String,
    device: String,
    consumed: Option<BTreeMap<String, f64>>,
}

/// A quantity map's amounts (cpu-like units: `460m` is 0.46); unreadable ones left out.
fn amounts_of<'a>(
    quantities: impl IntoIterator<
        Item = (
            &'a String,
            &'a k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        ),
    >,
) -> BTreeMap<String, f64> {
    quantities
        .into_iter()
        .filter_map(|(name, quantity)| Some((name.clone(), quantity_value(&quantity.0)?)))
        .collect()
}

#[derive(Debug)]
struct PodSeen {
    phase: String,
    /// The node it is bound to.
    node: Option<String>,
    bound_ever: bool,
    first_seen: Instant,
    /// When first seen bound.
    bound_at: Option<Instant>,
    /// When cluster-autoscaler's first TriggeredScaleUp for it was seen: from then it waited
    /// for a node to boot.
    triggered_at: Option<Instant>,
    ran: bool,
    requests: Resources,
    /// Where a GPU pod may go; `None` for a pod that asks for no GPU.
    placement: Option<Box<Placement>>,
    /// The GPUs its claims asked, as of the last one seen: kept on the pod, since the claims
    /// may go (the garbage collector's, another watch) before the pod's deletion is seen.
    claimed_gpus: u64,
}

/// CPU in millicores, memory in bytes, and whole GPUs (`nvidia.com/gpu`).
#[derive(Debug, Clone, Copy, Default)]
struct Resources {
    cpu_millis: u64,
    memory_bytes: u64,
    gpus: u64,
}

impl Resources {
    fn of(
        quantities: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >,
    ) -> Self {
        let amount = |name: &str| {
            quantities
                .and_then(|q| q.get(name))
                .and_then(|quantity| quantity_value(&quantity.0))
                .unwrap_or(0.0)
        };
        Self {
            cpu_millis: (amount("cpu") * 1000.0).round() as u64,
            memory_bytes: amount("memory").round() as u64,
            gpus: amount(GPU_RESOURCE).round() as u64,
        }
    }

    fn add(&mut self, other: Self) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
        self.gpus = self.gpus.saturating_add(other.gpus);
    }

    fn amounts(self) -> Amounts {
        Amounts {
            cpu_millis: self.cpu_millis,
            memory_bytes: self.memory_bytes,
            gpus: self.gpus,
        }
    }
}

/// What a pod requests: the sum over its containers (init containers, which run before them,
/// are left out).
fn pod_requests(pod: &Pod) -> Resources {
    let mut total = Resources::default();
    for container in pod.spec.iter().flat_map(|spec| &spec.containers) {
        let requests = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref());
        total.add(Resources::of(requests));
    }
    total
}

impl Observer {
    /// Starts watching. Offsets in samples, scale events and node changes count from
    /// [`Observer::set_origin`]; node changes are recorded only after it.
    /// Each simulation pod is also sent to `starts`, if given, when first seen started (Running,
    /// or already finished if it ended before the watch saw it run).
    pub fn start(
        client: &Client,
        simulation_id: &str,
        groups: BTreeSet<String>,
        seat_namespace: &str,
        starts: Option<mpsc::UnboundedSender<PodChange>>,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen::new(groups, starts)));
        let mut watches = JoinSet::new();
        let pods: Api<Pod> = Api::all(client.clone());
        let selector = format!("{SIMULATION_LABEL}={simulation_id}");
        watches.spawn(watch(
            pods,
            watcher::Config::default().labels(&selector),
            seen.clone(),
            Seen::pod,
            |_, _| {},
        ));
        // DRA's devices and claims, where the cluster serves them.
        watches.spawn(watch_if_served(
            Api::<ResourceSlice>::all(client.clone()),
            seen.clone(),
            Seen::slice,
        ));
        watches.spawn(watch_if_served(
            Api::<ResourceClaim>::all(client.clone()),
            seen.clone(),
            Seen::claim,
        ));
        let nodes: Api<Node> = Api::all(client.clone());
        watches.spawn(watch(
            nodes,
            watcher::Config::default().labels(&format!("{VIRTUAL_LABEL}={TRUE_VALUE}")),
            seen.clone(),
            Seen::node,
            Seen::nodes_relisted,
        ));
        // Pods' events from the scheduler and CA; those of other pods are dropped on arrival.
        let events: Api<Event> = Api::all(client.clone());
        watches.spawn(watch(
            events,
            watcher::Config::default().fields("involvedObject.kind=Pod"),
            seen.clone(),
            Seen::event,
            |_, _| {},
        ));
        // Karpenter's events on the simulation's nodes and NodePools: why it disrupted or
        // kept them.
        for kind in ["Node", "NodePool"] {
            let events: Api<Event> = Api::all(client.clone());
            watches.spawn(watch(
                events,
                watcher::Config::default().fields(&format!("involvedObject.kind={kind}")),
                seen.clone(),
                Seen::node_event,
                |_, _| {},
            ));
        }
        let seats: Api<Deployment> = Api::namespaced(client.clone(), seat_namespace);
        watches.spawn(watch(
            seats,
            watcher::Config::default().labels(GROUP_LABEL),
            seen.clone(),
            Seen::seat,
            |_, _| {},
        ));
        Self { seen, watches }
    }

    /// Starts the replay's clock; from here on nodes joining or leaving are changes.
    pub fn set_origin(&self, origin: Instant) {
        let mut seen = self.lock();
        seen.origin = origin;
        seen.replaying = true;
    }

    pub fn sample(&self) -> Sample {
        self.lock().sample()
    }

    /// Pods that never ran: those deleted first, and those still waiting now.
    pub fn never_ran(&self) -> Vec<NeverRan> {
        let seen = self.lock();
        let waiting = seen
            .pods
            .values()
            .filter(|pod| !pod.ran)
            .map(|pod| NeverRan {
                waited: pod.first_seen.elapsed(),
                bound: pod.bound_ever,
                gpus: pod.placement.is_some(),
                gpus_asked: Seen::gpus_asked(pod),
            });
        seen.never_ran.iter().copied().chain(waiting).collect()
    }

    /// Pods evicted and pods preempted so far.
    pub fn disruptions(&self) -> (u64, u64) {
        let seen = self.lock();
        (seen.evicted.len() as u64, seen.preempted.len() as u64)
    }

    /// Per pod evicted so far: since the origin, its (simulated) namespace, and its owner
    /// (`Kind/name`).
    pub fn evictions(&self) -> Vec<(Duration, String, String)> {
        let seen = self.lock();
        seen.evictions
            .iter()
            .map(|(at, namespace, owner)| {
                (
                    at.saturating_duration_since(seen.origin),
                    namespace.clone(),
                    owner.clone(),
                )
            })
            .collect()
    }

    pub fn waits(&self) -> Vec<WaitReason> {
        self.lock().waits.clone()
    }

    pub fn node_disruptions(&self) -> Vec<WaitReason> {
        self.lock().node_disruptions.clone()
    }

    /// The report's warnings of groups whose nodes run without their devices.
    /// The explained pods' explanations as last written, by namespace and name.
    pub fn explanations(&self) -> Vec<Explained> {
        let mut explained: Vec<Explained> = self.lock().explained.values().cloned().collect();
        explained.sort();
        explained
    }

    pub fn device_warnings(&self) -> Vec<String> {
        self.lock().device_warnings()
    }

    pub fn pending_times(&self) -> Vec<Duration> {
        self.lock().pending_times.clone()
    }

    /// The GPU pods: each one's time Pending until it ran, how many there were, and their
    /// owners (`Kind/name`).
    pub fn gpu_pods(&self) -> (Vec<Duration>, u64, BTreeSet<String>) {
        let seen = self.lock();
        (
            seen.gpu_pending_times.clone(),
            seen.gpu_pods,
            seen.gpu_owners.clone(),
        )
    }

    pub fn pending_splits(&self) -> Vec<PodPendingSplit> {
        self.lock().pending_splits.clone()
    }

    pub fn node_ready_times(&self) -> Vec<Duration> {
        self.lock().node_ready_times.clone()
    }

    pub fn scale_events(&self) -> Vec<ScaleEvent> {
        self.lock().scale_events.clone()
    }

    pub fn node_changes(&self) -> Vec<ObservedNodeChange> {
        self.lock().node_changes.clone()
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

/// The owner a pod's waits count for (see [`waits::owner`]).
/// Where a pod that runs `now` spent its pending time: up to bound (less the wait for a node
/// cluster-autoscaler asked for), the node booting, and starting once bound.
fn split(pod: &PodSeen, now: Instant) -> PodPendingSplit {
    let bound = pod.bound_at.unwrap_or(now).max(pod.first_seen);
    let node_boot = pod
        .triggered_at
        .filter(|at| *at < bound)
        .map_or(Duration::ZERO, |at| bound - at.max(pod.first_seen));
    PodPendingSplit {
        scheduling: (bound - pod.first_seen).saturating_sub(node_boot),
        node_boot,
        start: now.saturating_duration_since(bound),
    }
}

/// A simulation pod started (first seen Running, or already finished), or one that had started
/// finished or went.
#[derive(Debug, Clone)]
pub enum PodChange {
    Started(Box<Pod>),
    /// By `namespace/name`.
    Ended(String),
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn is_finished(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

pub(crate) fn owner_of(pod: &Pod) -> String {
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| (owner.kind.as_str(), owner.name.as_str()));
    let hash = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get("pod-template-hash"))
        .map(String::as_str);
    waits::owner(
        controller,
        hash,
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A watch listing every object again (at its start, and after an error it could not resume
/// from): between `Started` and `Done` each present object is applied, and one not among
/// them was deleted while the watch was down, without a delete event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relist {
    Started,
    Done,
}

/// Feeds one kind's watch events into `seen` until aborted, through the watch's errors.
async fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    seen: Arc<Mutex<Seen>>,
    apply: fn(&mut Seen, &K, bool),
    relist: fn(&mut Seen, Relist),
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let events = watcher(api, config).default_backoff();
    ksim_kube::watch::follow(&K::kind(&()), events, |event| {
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                apply(&mut seen, &object, true);
            }
            watcher::Event::Delete(object) => apply(&mut seen, &object, false),
            watcher::Event::Init => relist(&mut seen, Relist::Started),
            watcher::Event::InitDone => relist(&mut seen, Relist::Done),
        }
    })
    .await;
}

/// [`watch`] for a kind the cluster may not serve (DRA's before 1.34): one that answers "not
/// found" to a list is not watched.
async fn watch_if_served<K>(api: Api<K>, seen: Arc<Mutex<Seen>>, apply: fn(&mut Seen, &K, bool))
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Err(error) if ksim_kube::is_not_found(&error) => {
            tracing::debug!(kind = %K::kind(&()), "not served: not watched");
        }
        _ => watch(api, watcher::Config::default(), seen, apply, |_, _| {}).await,
    }
}

impl Seen {
    /// The groups' nodes and the simulation's pods now.
    fn sample(&self) -> Sample {
        let mut nodes: BTreeMap<String, NodeCount> = self
            .groups
            .iter()
            .map(|group| (group.clone(), NodeCount::default()))
            .collect();
        let mut usage = ResourceUsage::default();
        let devices = self.devices();
        // Per autoscaler group, its nodes not shutting down: the seats' that registered.
        let mut live: HashMap<&str, i32> = HashMap::new();
        for (name, node) in &self.nodes {
            if let Some(count) = nodes.get_mut(&node.group) {
                if !node.shutting_down {
                    *live.entry(node.group.as_str()).or_default() += 1;
                }
                count.nodes += 1;
                count.ready += u64::from(node.ready);
                if let Some(price) = node.price_micros {
                    count.priced += 1;
                    count.price_micros_per_hour += price;
                }
                if node.allocatable.gpus > 0 || devices.contains_key(name.as_str()) {
                    count.gpu_nodes += 1;
                    count.gpu_price_micros_per_hour += node.price_micros.unwrap_or(0);
                }
                usage.allocatable_cpu_millis += node.allocatable.cpu_millis;
                usage.allocatable_memory_bytes += node.allocatable.memory_bytes;
            }
        }
        for (group, replicas) in &self.seat_replicas {
            if let Some(count) = nodes.get_mut(group) {
                let registered = live.get(group.as_str()).copied().unwrap_or(0);
                count.launching = u64::try_from(replicas - registered).unwrap_or(0);
            }
        }
        let mut pods = PodPhaseCounts::default();
        let mut unscheduled = 0;
        // What the pods on each GPU node request, and the GPU pods waiting for one.
        let mut on_gpu_nodes: HashMap<&str, Resources> = HashMap::new();
        let mut pending_gpu_pods = Vec::new();
        for (uid, pod) in &self.pods {
            let our_node = pod
                .node
                .as_ref()
                .and_then(|name| self.nodes.get_key_value(name))
                .filter(|(_, node)| self.groups.contains(&node.group));
            if let Some((name, node)) = our_node
                && matches!(pod.phase.as_str(), "Pending" | "Running")
            {
                usage.requested_cpu_millis += pod.requests.cpu_millis;
                usage.requested_memory_bytes += pod.requests.memory_bytes;
                if node.gpu.is_some() || devices.contains_key(name.as_str()) {
                    on_gpu_nodes
                        .entry(name.as_str())
                        .or_default()
                        .add(pod.requests);
                }
            }
            if let (None, "Pending", Some(placement)) =
                (&pod.node, pod.phase.as_str(), &pod.placement)
            {
                pending_gpu_pods.push((uid.as_str(), pod.requests.amounts(), &**placement));
            }
            match pod.phase.as_str() {
                "Running" => pods.running += 1,
                "Succeeded" => pods.succeeded += 1,
                "Failed" => pods.failed += 1,
                "Unknown" => pods.unknown += 1,
                _ => {
                    pods.pending += 1;
                    unscheduled += u64::from(pod.node.is_none());
                }
            }
        }
        // What each pending pod's unallocated claims ask.
        let mut asks: HashMap<&str, Vec<DeviceAsk>> = HashMap::new();
        for claim in self
            .claims
            .values()
            .filter(|claim| claim.allocated.is_empty())
        {
            if let Some(pod) = &claim.pod {
                asks.entry(pod.as_str())
                    .or_default()
                    .extend(claim.asks.iter().cloned());
            }
        }
        let pending: Vec<PendingGpuPod> = pending_gpu_pods
            .iter()
            .map(|(uid, requests, placement)| PendingGpuPod {
                requests: *requests,
                asks: asks.get(uid).map_or(&[], Vec::as_slice),
                placement,
            })
            .collect();
        let no_labels = BTreeMap::new();
        let gpu_nodes: Vec<GpuNode> = self
            .nodes
            .iter()
            .filter(|(_, node)| self.groups.contains(&node.group))
            .filter_map(|(name, node)| {
                let dra = devices.get(name.as_str());
                if node.allocatable.gpus == 0 && dra.is_none() {
                    return None;
                }
                let (model, labels) = match (node.gpu.as_deref(), dra) {
                    (Some(gpu), _) => (gpu.model.as_str(), &gpu.labels),
                    (None, Some((_, model))) => (model.unwrap_or(gpus::UNKNOWN_MODEL), &no_labels),
                    (None, None) => (gpus::UNKNOWN_MODEL, &no_labels),
                };
                Some(GpuNode {
                    model,
                    labels,
                    allocatable: node.allocatable.amounts(),
                    requested: on_gpu_nodes
                        .get(name.as_str())
                        .copied()
                        .unwrap_or_default()
                        .amounts(),
                    devices: dra.map_or(&[], |(devices, _)| devices.as_slice()),
                })
            })
            .collect();
        Sample {
            offset: Instant::now().saturating_duration_since(self.origin),
            nodes,
            pods,
            unscheduled,
            usage,
            gpus: gpus::usage(&gpu_nodes, &pending),
            pending_gpu_pods: pending.len() as u64,
        }
    }

    fn new(groups: BTreeSet<String>, starts: Option<mpsc::UnboundedSender<PodChange>>) -> Self {
        Self {
            origin: Instant::now(),
            replaying: false,
            groups,
            pods: HashMap::new(),
            pending_times: Vec::new(),
            slices: HashMap::new(),
            claims: HashMap::new(),
            gpu_pending_times: Vec::new(),
            gpu_pods: 0,
            gpu_owners: BTreeSet::new(),
            pending_splits: Vec::new(),
            node_ready_times: Vec::new(),
            nodes: HashMap::new(),
            relisted_nodes: None,
            node_changes: Vec::new(),
            seat_replicas: HashMap::new(),
            scale_events: Vec::new(),
            starts,
            never_ran: Vec::new(),
            explained: HashMap::new(),
            evicted: HashSet::new(),
            evictions: Vec::new(),
            preempted: HashSet::new(),
            owners: HashMap::new(),
            event_counts: HashMap::new(),
            unclaimed: HashMap::new(),
            waits: Vec::new(),
            node_disruptions: Vec::new(),
            unpublished: BTreeMap::new(),
            unpublished_unseen: HashMap::new(),
        }
    }

    fn slice(&mut self, slice: &ResourceSlice, present: bool) {
        let Some(name) = slice.metadata.name.clone() else {
            return;
        };
        let node = slice.spec.node_name.clone().filter(|_| present);
        let Some(node) = node else {
            self.slices.remove(&name);
            return;
        };
        let devices = slice
            .spec
            .devices
            .iter()
            .flatten()
            .map(|device| {
                let model = device.attributes.as_ref().and_then(|attributes| {
                    ["model", "productName"]
                        .iter()
                        .find_map(|key| attributes.get(*key)?.string.clone())
                });
                let capacity = device
                    .capacity
                    .iter()
                    .flatten()
                    .map(|(name, capacity)| (name, &capacity.value));
                (device.name.clone(), model, amounts_of(capacity))
            })
            .collect();
        self.slices.insert(name, SliceSeen { node, devices });
    }

    /// A claim made for a pod (its owner) or allocated on a device: kept compact.
    fn claim(&mut self, claim: &ResourceClaim, present: bool) {
        let Some(uid) = claim.metadata.uid.clone() else {
            return;
        };
        if !present {
            self.claims.remove(&uid);
            return;
        }
        let pod = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|owner| owner.kind == "Pod")
            .map(|owner| owner.uid.clone());
        let asks = claim
            .spec
            .devices
            .iter()
            .flat_map(|devices| devices.requests.iter().flatten())
            .filter_map(|request| {
                let exactly = request.exactly.as_ref()?;
                Some(DeviceAsk {
                    count: exactly
                        .count
                        .and_then(|c| u64::try_from(c).ok())
                        .unwrap_or(1),
                    all: exactly.allocation_mode.as_deref() == Some("All"),
                    capacity: exactly
                        .capacity
                        .as_ref()
                        .and_then(|capacity| capacity.requests.as_ref())
                        .map(amounts_of)
                        .unwrap_or_default(),
                })
            })
            .collect();
        let allocated = claim
            .status
            .as_ref()
            .and_then(|status| status.allocation.as_ref())
            .and_then(|allocation| allocation.devices.as_ref())
            .and_then(|devices| devices.results.as_ref())
            .map(|results| {
                results
                    .iter()
                    .map(|result| Held {
                        pool: result.pool.clone(),
                        device: result.device.clone(),
                        consumed: result.consumed_capacity.as_ref().map(amounts_of),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let owner = pod.clone();
        self.claims.insert(
            uid,
            ClaimSeen {
                pod,
                asks,
                allocated,
            },
        );
        if let Some(owner) = owner {
            let asked = self.claims_ask(&owner);
            if let Some(seen) = self.pods.get_mut(&owner) {
                seen.claimed_gpus = asked;
            }
        }
    }

    /// The GPUs a pod asked: its `nvidia.com/gpu`, else what its claims asked.
    fn gpus_asked(pod: &PodSeen) -> u64 {
        if pod.requests.gpus > 0 {
            pod.requests.gpus
        } else {
            pod.claimed_gpus
        }
    }

    /// The devices the claims made for pod `uid` ask, a share one and a request of every
    /// device none.
    fn claims_ask(&self, uid: &str) -> u64 {
        self.claims
            .values()
            .filter(|claim| claim.pod.as_deref() == Some(uid))
            .flat_map(|claim| &claim.asks)
            .map(|ask| match (ask.all, ask.capacity.is_empty()) {
                (true, _) => 0,
                (false, true) => ask.count.max(1),
                (false, false) => 1,
            })
            .sum()
    }

    /// Per node of the groups, its DRA devices as the claims hold them, and the model the
    /// first of them names.
    fn devices(&self) -> HashMap<&str, (Vec<Device>, Option<&str>)> {
        let mut by_node: HashMap<&str, (Vec<Device>, Option<&str>)> = HashMap::new();
        let mut index: HashMap<(&str, &str), (&str, usize)> = HashMap::new();
        for slice in self.slices.values() {
            let ours = self
                .nodes
                .get(&slice.node)
                .is_some_and(|node| self.groups.contains(&node.group));
            if !ours {
                continue;
            }
            let (devices, model) = by_node.entry(slice.node.as_str()).or_default();
            for (name, device_model, capacity) in &slice.devices {
                // Our slices' pool is their node.
                index.insert(
                    (slice.node.as_str(), name.as_str()),
                    (slice.node.as_str(), devices.len()),
                );
                devices.push(Device {
                    capacity: capacity.clone(),
                    ..Device::default()
                });
                if model.is_none() {
                    *model = device_model.as_deref();
                }
            }
        }
        for claim in self.claims.values() {
            for Held {
                pool,
                device,
                consumed,
            } in &claim.allocated
            {
                if let Some((node, at)) = index.get(&(pool.as_str(), device.as_str()))
                    && let Some(device) = by_node
                        .get_mut(node)
                        .and_then(|(devices, _)| devices.get_mut(*at))
                {
                    device.hold(consumed.as_ref());
                }
            }
        }
        by_node
    }

    fn pod(&mut self, pod: &Pod, present: bool) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if !present {
            if let Some(gone) = self.pods.remove(&uid) {
                if !gone.ran {
                    let gpus_asked = Self::gpus_asked(&gone);
                    self.never_ran.push(NeverRan {
                        waited: gone.first_seen.elapsed(),
                        bound: gone.bound_ever,
                        gpus: gone.placement.is_some(),
                        gpus_asked,
                    });
                } else if !is_finished(&gone.phase) {
                    self.send(PodChange::Ended(pod_key(pod)));
                }
            }
            return;
        }
        self.disrupted(&uid, pod);
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".to_owned());
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if !self.owners.contains_key(&uid) {
            let owner = owner_of(pod);
            if let Some(waits) = self.unclaimed.remove(&uid) {
                self.count_waits(&owner, waits);
            }
            self.owners.insert(uid.clone(), owner);
        }
        self.explained(&uid, pod);
        if !self.pods.contains_key(&uid) {
            let requests = pod_requests(pod);
            let claims = pod
                .spec
                .as_ref()
                .is_some_and(|spec| spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()));
            let placement = (requests.gpus > 0 || claims).then(|| Box::new(Placement::of(pod)));
            if placement.is_some() {
                self.gpu_pods += 1;
                if let Some(owner) = self.owners.get(&uid) {
                    self.gpu_owners.insert(owner.clone());
                }
            }
            self.pods.insert(
                uid.clone(),
                PodSeen {
                    phase: String::new(),
                    node: None,
                    bound_ever: false,
                    first_seen: Instant::now(),
                    bound_at: None,
                    triggered_at: None,
                    ran: false,
                    requests,
                    placement,
                    // Claims are made after their pod, but a watch may tell of one first.
                    claimed_gpus: self.claims_ask(&uid),
                },
            );
        }
        let Some(entry) = self.pods.get_mut(&uid) else {
            return;
        };
        entry.bound_ever |= node.is_some();
        if node.is_some() && entry.bound_at.is_none() {
            entry.bound_at = Some(Instant::now());
        }
        entry.node = node;
        let mut changes = Vec::new();
        if !entry.ran && matches!(phase.as_str(), "Running" | "Succeeded" | "Failed") {
            entry.ran = true;
            self.pending_times.push(entry.first_seen.elapsed());
            if entry.placement.is_some() {
                self.gpu_pending_times.push(entry.first_seen.elapsed());
            }
            self.pending_splits.push(split(entry, Instant::now()));
            changes.push(PodChange::Started(Box::new(pod.clone())));
        }
        if entry.ran && is_finished(&phase) && !is_finished(&entry.phase) {
            changes.push(PodChange::Ended(pod_key(pod)));
        }
        entry.phase = phase;
        for change in changes {
            self.send(change);
        }
    }

    /// Keeps the pod's explanation, if the scheduler wrote one.
    fn explained(&mut self, uid: &str, pod: &Pod) {
        let Some(text) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(EXPLANATION_ANNOTATION))
        else {
            return;
        };
        if let Some(kept) = self.explained.get_mut(uid) {
            text.clone_into(&mut kept.text);
        } else if self.explained.len() < MAX_EXPLAINED_PODS {
            self.explained.insert(
                uid.to_owned(),
                Explained {
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    owner: self.owners.get(uid).cloned().unwrap_or_default(),
                    text: text.clone(),
                },
            );
        }
    }

    fn send(&self, change: PodChange) {
        if let Some(starts) = &self.starts {
            // The receiver goes with the simulation; a change after it is of no use.
            let _ = starts.send(change);
        }
    }

    /// A pod the API, a taint or the kubelet evicts, or the scheduler preempts, says so in its
    /// DisruptionTarget condition (an eviction of old also in its status reason).
    fn disrupted(&mut self, uid: &str, pod: &Pod) {
        let Some(status) = &pod.status else {
            return;
        };
        let disruption = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DisruptionTarget" && c.status == "True");
        match disruption.and_then(|c| c.reason.as_deref()) {
            Some("PreemptionByScheduler") => {
                self.preempted.insert(uid.to_owned());
            }
            Some(_) => self.evicted(uid, pod),
            None if status.reason.as_deref() == Some("Evicted") => self.evicted(uid, pod),
            None => {}
        }
    }

    fn evicted(&mut self, uid: &str, pod: &Pod) {
        if self.evicted.insert(uid.to_owned()) && self.evictions.len() < MAX_EVICTIONS {
            self.evictions.push((
                Instant::now(),
                pod.metadata.namespace.clone().unwrap_or_default(),
                owner_of(pod),
            ));
        }
    }

    /// The scheduler's, CA's and Karpenter's events about a simulation pod, each repeat counted
    /// once.
    fn event(&mut self, event: &Event, present: bool) {
        let reason = event.reason.as_deref().unwrap_or_default();
        let (source, reasons) =
            waits::reasons(reason, event.message.as_deref().unwrap_or_default());
        if !present || reasons.is_empty() {
            return;
        }
        let pod_uid = event.involved_object.uid.as_deref().unwrap_or_default();
        if waits::asks_for_a_node(reason)
            && let Some(pod) = self.pods.get_mut(pod_uid)
        {
            pod.triggered_at.get_or_insert_with(Instant::now);
        }
        let new = self.new_repeats(event);
        if new == 0 {
            return;
        }
        let waits = reasons.into_iter().map(|reason| (source, reason, new));
        match self.owners.get(pod_uid).cloned() {
            Some(owner) => self.count_waits(&owner, waits),
            // The pod watch may not have told of the pod yet: kept until it does (another
            // pod's events, never claimed, are bounded).
            None if self.unclaimed.len() < MAX_UNCLAIMED => self
                .unclaimed
                .entry(pod_uid.to_owned())
                .or_default()
                .extend(waits),
            None => {}
        }
    }

    /// Karpenter's event about one of the simulation's nodes or NodePools during the replay,
    /// each repeat counted once, for the node's group or the NodePool.
    fn node_event(&mut self, event: &Event, present: bool) {
        if present
            && event.reason.as_deref() == Some(DEVICES_NOT_PUBLISHED_REASON)
            && event.involved_object.kind.as_deref() == Some("Node")
        {
            let node = event.involved_object.name.clone().unwrap_or_default();
            let why = event.message.clone().unwrap_or_default();
            match self.nodes.get(&node).map(|seen| seen.group.clone()) {
                Some(group) => self.devices_unpublished(group, node, why),
                None if self.unpublished_unseen.len() < MAX_UNSEEN_NODES => {
                    self.unpublished_unseen.insert(node, why);
                }
                None => {}
            }
            return;
        }
        if !present || !self.replaying {
            return;
        }
        let reason = event.reason.as_deref().unwrap_or_default();
        let message = event.message.as_deref().unwrap_or_default();
        let Some((source, why)) = waits::disruption(reason, message) else {
            return;
        };
        let object = event.involved_object.name.as_deref().unwrap_or_default();
        let group = match event.involved_object.kind.as_deref() {
            Some("Node") => self.nodes.get(object).map(|node| node.group.clone()),
            Some("NodePool") => Some(object.to_owned()),
            _ => None,
        };
        let Some(group) = group.filter(|group| self.groups.contains(group)) else {
            return;
        };
        let new = self.new_repeats(event);
        if new > 0 {
            self.node_disruptions.push(WaitReason {
                source: source.to_owned(),
                reason: why,
                owner: group,
                count: new,
            });
        }
    }

    /// A node of `group` runs without its devices, for `why`; kept for the simulation's groups.
    fn devices_unpublished(&mut self, group: String, node: String, why: String) {
        if self.groups.contains(&group) {
            let (nodes, said) = self.unpublished.entry(group).or_default();
            nodes.insert(node);
            *said = why;
        }
    }

    fn device_warnings(&self) -> Vec<String> {
        self.unpublished
            .iter()
            .map(|(group, (nodes, why))| warnings::devices_not_published(group, nodes.len(), why))
            .collect()
    }

    /// The repeats of `event` not counted before (an event repeats by counting up, as
    /// `count` or its series' count); 0 for an event without a uid.
    fn new_repeats(&mut self, event: &Event) -> u64 {
        let Some(event_uid) = event.metadata.uid.clone() else {
            return 0;
        };
        let count = event
            .count
            .into_iter()
            .chain(event.series.as_ref().and_then(|s| s.count))
            .max()
            .unwrap_or(1)
            .max(1);
        let count = u64::try_from(count).unwrap_or(1);
        let counted = self.event_counts.insert(event_uid, count).unwrap_or(0);
        count.saturating_sub(counted)
    }

    fn count_waits(
        &mut self,
        owner: &str,
        waits: impl IntoIterator<Item = (&'static str, String, u64)>,
    ) {
        for (source, reason, count) in waits {
            self.waits.push(WaitReason {
                source: source.to_owned(),
                reason,
                owner: owner.to_owned(),
                count,
            });
        }
    }

    fn node(&mut self, node: &Node, present: bool) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        if present && let Some(listed) = &mut self.relisted_nodes {
            listed.insert(name.clone());
        }
        let labels = node.metadata.labels.as_ref();
        let group = labels.and_then(|labels| labels.get(GROUP_LABEL).cloned());
        let owner = match labels
            .and_then(|labels| labels.get(OWNER_LABEL))
            .map(String::as_str)
        {
            Some(OWNER_POOL) => Some(GroupOwner::Pool),
            Some(OWNER_SEATS) => Some(GroupOwner::Seats),
            _ if labels.is_some_and(|labels| labels.contains_key(KARPENTER_NODEPOOL_LABEL)) => {
                Some(GroupOwner::Karpenter)
            }
            _ => None,
        };
        if let (Some(group), true) = (&group, present)
            && let Some(why) = self.unpublished_unseen.remove(&name)
        {
            self.devices_unpublished(group.clone(), name.clone(), why);
        }
        match group {
            Some(group) if present => {
                let instance_type = labels
                    .and_then(|labels| labels.get(INSTANCE_TYPE_LABEL))
                    .cloned()
                    .unwrap_or_default();
                if !self.nodes.contains_key(&name) {
                    self.node_changed(&name, &group, owner, &instance_type, NodeChangeKind::Added);
                }
                let price_micros = labels
                    .and_then(|labels| labels.get(KARPENTER_PRICE_LABEL))
                    .and_then(|price| price.parse::<f64>().ok())
                    .filter(|price| price.is_finite() && *price >= 0.0)
                    .map(|price| (price * 1e6).round() as u64);
                let allocatable =
                    Resources::of(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
                let ready = takes_pods(node);
                let joined_at = match self.nodes.get(&name) {
                    Some(known) => known.joined_at,
                    None => self.replaying.then(Instant::now),
                };
                // Timed once: the first time a node that joined is seen Ready.
                let joined_at = match joined_at {
                    Some(at) if ready => {
                        self.node_ready_times.push(at.elapsed());
                        None
                    }
                    other => other,
                };
                // Kept for GPU nodes and nodes that name a GPU model (a DRA node's devices
                // come in its slices): the model, and the labels pending pods' placement reads.
                let gpu =
                    (allocatable.gpus > 0 || labels.is_some_and(gpus::names_a_model)).then(|| {
                        let labels = labels.cloned().unwrap_or_default();
                        Box::new(NodeGpus {
                            model: gpus::model(&labels),
                            labels,
                        })
                    });
                let seen = NodeSeen {
                    group,
                    owner,
                    ready,
                    allocatable,
                    joined_at,
                    instance_type,
                    price_micros,
                    shutting_down: is_shutting_down(node),
                    gpu,
                };
                self.nodes.insert(name, seen);
            }
            _ => {
                if let Some(gone) = self.nodes.remove(&name) {
                    self.node_changed(
                        &name,
                        &gone.group,
                        gone.owner,
                        &gone.instance_type,
                        NodeChangeKind::Removed,
                    );
                }
            }
        }
    }

    /// After a relist, nodes it did not list are gone; their departure is dated to the relist,
    /// the first the driver can know of it.
    fn nodes_relisted(&mut self, relist: Relist) {
        match relist {
            Relist::Started => self.relisted_nodes = Some(HashSet::new()),
            Relist::Done => {
                let Some(listed) = self.relisted_nodes.take() else {
                    return;
                };
                let gone: Vec<String> = self
                    .nodes
                    .keys()
                    .filter(|name| !listed.contains(*name))
                    .cloned()
                    .collect();
                for name in gone {
                    if let Some(node) = self.nodes.remove(&name) {
                        self.node_changed(
                            &name,
                            &node.group,
                            node.owner,
                            &node.instance_type,
                            NodeChangeKind::Removed,
                        );
                    }
                }
            }
        }
    }

    /// Records a node joining or leaving one of the simulation's groups once the replay runs.
    fn node_changed(
        &mut self,
        node: &str,
        group: &str,
        owner: Option<GroupOwner>,
        instance_type: &str,
        kind: NodeChangeKind,
    ) {
        if !self.replaying || !self.groups.contains(group) {
            return;
        }
        let offset = Instant::now().saturating_duration_since(self.origin);
        // Each node Karpenter launches or removes is one of its decisions, as a seat
        // Deployment's resize is one of CA's: the two compare side by side.
        if owner == Some(GroupOwner::Karpenter) {
            self.scale_events.push(ScaleEvent {
                offset,
                group: group.to_owned(),
                delta: match kind {
                    NodeChangeKind::Added => 1,
                    NodeChangeKind::Removed => -1,
                    // Not passed here: the watch says added or deleted.
                    NodeChangeKind::Unspecified => 0,
                },
            });
        }
        self.node_changes.push(ObservedNodeChange {
            offset,
            group: group.to_owned(),
            node: node.to_owned(),
            kind,
            instance_type: instance_type.to_owned(),
            owner,
        });
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn node(name: &str, group: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some([(GROUP_LABEL.to_owned(), group.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn seen(groups: &[&str]) -> Seen {
        Seen::new(groups.iter().map(|g| (*g).to_owned()).collect(), None)
    }

    fn changes(seen: &Seen) -> Vec<(&str, &str, NodeChangeKind)> {
        seen.node_changes
            .iter()
            .map(|c| (c.group.as_str(), c.node.as_str(), c.kind))
            .collect()
    }

    #[test]
    fn nodes_whose_devices_were_not_published_are_warned_of_by_group() {
        let mut seen = seen(&["p3"]);
        let event = |uid: &str, node: &str| -> Event {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "default", "uid": uid},
                "involvedObject": {"kind": "Node", "name": node},
                "reason": DEVICES_NOT_PUBLISHED_REASON, "type": "Warning",
                "message": "no DRAConsumableCapacity",
            }))
            .unwrap()
        };
        seen.node(&node("p3-a", "p3"), true);
        seen.node(&node("other-a", "other"), true);
        seen.node_event(&event("e-1", "p3-a"), true);
        // Before its node is seen; and another group's, not the simulation's.
        seen.node_event(&event("e-2", "p3-b"), true);
        seen.node_event(&event("e-3", "other-a"), true);
        assert_eq!(
            seen.device_warnings(),
            vec![warnings::devices_not_published(
                "p3",
                1,
                "no DRAConsumableCapacity"
            )]
        );
        seen.node(&node("p3-b", "p3"), true);
        // Said again (a restarted pool): one node still.
        seen.node_event(&event("e-4", "p3-a"), true);
        let said = seen.device_warnings();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("the devices of 2 node(s) of group p3 were not published")
                && said[0].ends_with(": no DRAConsumableCapacity"),
            "{said:?}"
        );
    }

    #[test]
    fn only_nodes_of_the_groups_joining_or_leaving_after_the_origin_are_changes() {
        let mut seen = seen(&["m5"]);
        // The initial size: registered, updated and even replaced before the replay starts.
        seen.node(&node("m5-a", "m5"), true);
        seen.node(&node("m5-b", "m5"), true);
        seen.node(&node("m5-b", "m5"), false);
        seen.node(&node("m5-c", "m5"), true);
        assert!(seen.node_changes.is_empty());

        seen.origin = Instant::now() - Duration::from_secs(5);
        seen.replaying = true;
        // Status updates of a known node are not joins.
        seen.node(&node("m5-a", "m5"), true);
        seen.node(&node("m5-d", "m5"), true);
        // Another group's nodes (not this simulation's) are not its changes.
        seen.node(&node("other-a", "other"), true);
        seen.node(&node("other-a", "other"), false);
        seen.node(&node("m5-a", "m5"), false);
        // A delete of a node never seen is nothing to report.
        seen.node(&node("m5-z", "m5"), false);

        assert_eq!(
            changes(&seen),
            [
                ("m5", "m5-d", NodeChangeKind::Added),
                ("m5", "m5-a", NodeChangeKind::Removed),
            ]
        );
        let offset = seen.node_changes[0].offset;
        assert!(
            offset >= Duration::from_secs(5) && offset < Duration::from_secs(60),
            "counted from the origin: {offset:?}"
        );
        // The counts the samples take agree: m5-c and m5-d are left.
        let mut left: Vec<&String> = seen.nodes.keys().collect();
        left.sort();
        assert_eq!(left, ["m5-c", "m5-d"]);
    }

    #[test]
    fn a_change_carries_its_groups_owner_also_when_the_node_is_gone() {
        let owned = |name: &str, owner: &str| {
            let mut node = node(name, "m5");
            if let Some(labels) = node.metadata.labels.as_mut() {
                labels.insert(OWNER_LABEL.to_owned(), owner.to_owned());
            }
            node
        };
        let mut seen = seen(&["m5"]);
        seen.node(&owned("seats-m5-a", OWNER_SEATS), true);
        seen.replaying = true;
        seen.node(&owned("m5-0", OWNER_POOL), true);
        seen.node(&node("unlabelled", "m5"), true);
        // A delete carries the last state the watch had; the relist's none at all.
        seen.node(&node("m5-0", "m5"), false);
        seen.nodes_relisted(Relist::Started);
        seen.node(&owned("m5-0", OWNER_POOL), true);
        seen.node(&node("unlabelled", "m5"), true);
        seen.nodes_relisted(Relist::Done);
        let owners: Vec<(&str, NodeChangeKind, Option<GroupOwner>)> = seen
            .node_changes
            .iter()
            .map(|c| (c.node.as_str(), c.kind, c.owner))
            .collect();
        assert_eq!(
            owners,
            [
                ("m5-0", NodeChangeKind::Added, Some(GroupOwner::Pool)),
                ("unlabelled", NodeChangeKind::Added, None),
                ("m5-0", NodeChangeKind::Removed, Some(GroupOwner::Pool)),
                ("m5-0", NodeChangeKind::Added, Some(GroupOwner::Pool)),
                (
                    "seats-m5-a",
                    NodeChangeKind::Removed,
                    Some(GroupOwner::Seats)
                ),
            ]
        );
    }

    #[test]
    fn seats_whose_nodes_have_not_registered_are_launching_and_shutting_down_nodes_are_not_seats() {
        use k8s_openapi::api::{
            apps::v1::{Deployment, DeploymentSpec},
            core::v1::{NodeCondition, NodeStatus},
        };
        let seats = |replicas| Deployment {
            metadata: ObjectMeta {
                labels: Some([(GROUP_LABEL.to_owned(), "m5".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        };
        let mut seen = seen(&["m5", "fixed"]);
        seen.seat(&seats(2), true);
        seen.node(&node("m5-a", "m5"), true);
        seen.node(&node("m5-b", "m5"), true);
        seen.node(&node("fixed-0", "fixed"), true);
        seen.replaying = true;
        let launching = |seen: &Seen| {
            let sample = seen.sample();
            (
                sample.nodes["m5"].launching,
                sample.nodes["fixed"].launching,
            )
        };
        assert_eq!(launching(&seen), (0, 0));
        // CA asks for two more seats; their nodes are booting, not registered.
        seen.seat(&seats(4), true);
        assert_eq!(launching(&seen), (2, 0));
        // One registers; then CA removes a seat whose node lingers shutting down.
        seen.node(&node("m5-c", "m5"), true);
        assert_eq!(launching(&seen), (1, 0));
        let mut lingering = node("m5-a", "m5");
        lingering.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: Some(ksim_nodes::node::SHUTTING_DOWN_REASON.into()),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        seen.seat(&seats(3), true);
        seen.node(&lingering, true);
        let sample = seen.sample();
        assert_eq!(
            (sample.nodes["m5"].nodes, sample.nodes["m5"].launching),
            (3, 1)
        );
    }

    #[test]
    fn each_node_karpenter_launches_or_removes_is_a_scale_event_of_its_nodepool() {
        let launched = |name: &str| {
            let mut node = node(name, "general");
            if let Some(labels) = node.metadata.labels.as_mut() {
                labels.insert(KARPENTER_NODEPOOL_LABEL.to_owned(), "general".to_owned());
            }
            node
        };
        let mut seen = seen(&["general"]);
        seen.replaying = true;
        seen.node(&launched("kwok-general-a"), true);
        seen.node(&launched("kwok-general-b"), true);
        seen.node(&launched("kwok-general-a"), false);
        let deltas: Vec<(&str, i64)> = seen
            .scale_events
            .iter()
            .map(|event| (event.group.as_str(), event.delta))
            .collect();
        assert_eq!(deltas, [("general", 1), ("general", 1), ("general", -1)]);
        assert!(
            seen.node_changes
                .iter()
                .all(|change| change.owner == Some(GroupOwner::Karpenter))
        );
    }

    #[test]
    fn a_relist_reports_nodes_deleted_while_the_watch_was_down() {
        let mut seen = seen(&["m5"]);
        seen.nodes_relisted(Relist::Started);
        seen.node(&node("m5-a", "m5"), true);
        seen.node(&node("m5-b", "m5"), true);
        seen.nodes_relisted(Relist::Done);
        seen.replaying = true;

        // The watch broke; meanwhile m5-a left and m5-c joined.
        seen.nodes_relisted(Relist::Started);
        seen.node(&node("m5-b", "m5"), true);
        seen.node(&node("m5-c", "m5"), true);
        seen.nodes_relisted(Relist::Done);

        assert_eq!(
            changes(&seen),
            [
                ("m5", "m5-c", NodeChangeKind::Added),
                ("m5", "m5-a", NodeChangeKind::Removed),
            ]
        );
        assert!(!seen.nodes.contains_key("m5-a"));
        // A stray end of a relist that never started changes nothing.
        seen.nodes_relisted(Relist::Done);
        assert_eq!(seen.nodes.len(), 2);
    }
    fn pod(uid: &str, node: Option<&str>, phase: &str, disruption: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": uid, "uid": uid, "labels": {"pod-template-hash": "abc"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-abc", "uid": "rs", "controller": true}]
            },
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}]},
            "status": {"phase": phase, "conditions": disruption.map_or_else(Vec::new, |reason| vec![
                serde_json::json!({"type": "DisruptionTarget", "status": "True", "reason": reason})
            ])}
        }))
        .unwrap()
    }

    #[test]
    fn started_pods_are_handed_over_and_so_is_their_end_once() {
        let (sender, mut received) = mpsc::unbounded_channel();
        let mut seen = Seen::new(BTreeSet::new(), Some(sender));
        seen.pod(&pod("a", None, "Pending", None), true);
        seen.pod(&pod("a", Some("n"), "Running", None), true);
        seen.pod(&pod("a", Some("n"), "Running", None), true);
        seen.pod(&pod("a", Some("n"), "Succeeded", None), true);
        seen.pod(&pod("a", Some("n"), "Succeeded", None), false);
        seen.pod(&pod("b", Some("n"), "Running", None), true);
        seen.pod(&pod("b", Some("n"), "Running", None), false);
        // One that never ran neither starts nor ends.
        seen.pod(&pod("c", None, "Pending", None), true);
        seen.pod(&pod("c", None, "Pending", None), false);
        drop(seen);
        let mut changes = Vec::new();
        while let Ok(change) = received.try_recv() {
            changes.push(match change {
                PodChange::Started(pod) => format!("started {}", pod.metadata.name.unwrap()),
                PodChange::Ended(key) => format!("ended {key}"),
            });
        }
        assert_eq!(changes, ["started a", "ended /a", "started b", "ended /b"]);
    }

    #[test]
    fn a_sample_counts_gpus_per_model_and_the_gpu_pods_waiting() {
        let mut seen = seen(&["p3"]);
        let gpu_node = |name: &str, gpus: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {
                    GROUP_LABEL: "p3", "nvidia.com/gpu.product": "Tesla-V100"}},
                "status": {"allocatable": {"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": gpus}},
            }))
            .unwrap()
        };
        let gpu_pod = |uid: &str, node: Option<&str>, phase: &str, gpus: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "ml", "uid": uid},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "1", "nvidia.com/gpu": gpus},
                    "limits": {"nvidia.com/gpu": gpus}}}]},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        seen.node(&gpu_node("p3-a", "4"), true);
        seen.node(&gpu_node("p3-b", "1"), true);
        seen.node(&node("m5-a", "p3"), true);
        seen.pod(&gpu_pod("train-1", Some("p3-a"), "Running", "3"), true);
        seen.pod(&gpu_pod("train-2", None, "Pending", "2"), true);
        let sample = seen.sample();
        assert_eq!(sample.nodes["p3"].gpu_nodes, 2);
        assert_eq!(sample.pending_gpu_pods, 1);
        assert_eq!(sample.gpus.len(), 1);
        let v100 = &sample.gpus[0];
        // 5 GPUs, 3 taken; the 2-GPU pod fits neither the 1 left on p3-a nor the 1 on p3-b.
        assert_eq!(
            (
                v100.model.as_str(),
                v100.nodes,
                v100.allocatable,
                v100.allocated,
                v100.fragmented
            ),
            ("Tesla-V100", 2, 5, 3, 2)
        );
        // It ran: its pending time counts as a GPU pod's; nothing waits, nothing is fragmented.
        seen.pod(&gpu_pod("train-2", Some("p3-b"), "Running", "2"), true);
        assert_eq!(seen.gpu_pending_times.len(), 2);
        assert_eq!((seen.gpu_pods, seen.sample().gpus[0].fragmented), (2, 0));
    }

    #[test]
    fn dra_devices_count_as_gpus_held_by_their_claims_and_waiting_claims_ask() {
        let mut seen = seen(&["p3"]);
        let dra_node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p3-a", "labels": {GROUP_LABEL: "p3"}},
            "status": {"allocatable": {"cpu": "8", "memory": "60Gi"}},
        }))
        .unwrap();
        seen.node(&dra_node, true);
        let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p3-a-gpu-ksim-io"},
            "spec": {"driver": "gpu.ksim.io", "nodeName": "p3-a",
                "pool": {"name": "p3-a", "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"model": {"string": "V100M16"}},
                        "capacity": {"share": {"value": "1"}}},
                    {"name": "gpu-1", "capacity": {"share": {"value": "1"}}}]},
        }))
        .unwrap();
        seen.slice(&slice, true);
        let claim = |uid: &str,
                     pod: &str,
                     request: serde_json::Value,
                     device: Option<(&str, serde_json::Value)>|
         -> ResourceClaim {
            let mut claim = serde_json::json!({
                "metadata": {"name": uid, "namespace": "ml", "uid": uid,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod}]},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
            });
            if let Some((device, consumed)) = device {
                claim["status"] = serde_json::json!({"allocation": {"devices": {"results": [{
                    "request": "gpu", "driver": "gpu.ksim.io", "pool": "p3-a",
                    "device": device, "consumedCapacity": consumed}]}}});
            }
            serde_json::from_value(claim).unwrap()
        };
        let pod = |uid: &str, node: Option<&str>, phase: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "ml", "uid": uid},
                "spec": {"nodeName": node, "resourceClaims": [{"name": "gpu"}],
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        let share = |amount: &str| {
            serde_json::json!({"deviceClassName": "gpu.ksim.io",
            "capacity": {"requests": {"share": amount}}})
        };
        // A 0.6 share on gpu-0; a 0.5 share waiting: it fits gpu-1, nothing fragmented.
        seen.pod(&pod("a", Some("p3-a"), "Running"), true);
        seen.claim(
            &claim(
                "c-a",
                "a",
                share("600m"),
                Some(("gpu-0", serde_json::json!({"share": "600m"}))),
            ),
            true,
        );
        seen.pod(&pod("b", None, "Pending"), true);
        seen.claim(&claim("c-b", "b", share("500m"), None), true);
        let sample = seen.sample();
        assert_eq!(sample.nodes["p3"].gpu_nodes, 1);
        let gpus = &sample.gpus[0];
        assert_eq!(
            (
                gpus.model.as_str(),
                gpus.allocatable,
                gpus.allocated,
                gpus.fragmented
            ),
            ("V100M16", 2, 1, 0)
        );
        assert_eq!(sample.pending_gpu_pods, 1);
        // gpu-1 held whole: b's 0.5 fits neither device, and no device is idle.
        seen.claim(
            &claim(
                "c-c",
                "c",
                serde_json::json!({"deviceClassName": "gpu.ksim.io"}),
                Some(("gpu-1", serde_json::Value::Null)),
            ),
            true,
        );
        let gpus = &seen.sample().gpus[0];
        assert_eq!((gpus.allocated, gpus.fragmented), (2, 0));
        // gpu-1 free again, b asking two whole devices: gpu-1 alone cannot take it.
        seen.claim(&claim("c-c", "c", serde_json::json!({}), None), false);
        seen.claim(
            &claim(
                "c-b",
                "b",
                serde_json::json!({"deviceClassName": "gpu.ksim.io", "count": 2}),
                None,
            ),
            true,
        );
        let gpus = &seen.sample().gpus[0];
        assert_eq!((gpus.allocated, gpus.fragmented), (1, 1));
        assert_eq!(seen.gpu_pods, 2);
        // What b asked, by its claim: two devices; a share, one; every device, unknown.
        assert_eq!(Seen::gpus_asked(&seen.pods["b"]), 2);
        seen.claim(&claim("c-b", "b", share("500m"), None), true);
        assert_eq!(Seen::gpus_asked(&seen.pods["b"]), 1);
        seen.claim(
            &claim(
                "c-b",
                "b",
                serde_json::json!({"deviceClassName": "gpu.ksim.io", "allocationMode": "All"}),
                None,
            ),
            true,
        );
        assert_eq!(Seen::gpus_asked(&seen.pods["b"]), 0);
        // Deleted before it ran: never scheduled, with what its claim asked, also when the
        // claim's deletion is seen first.
        seen.claim(&claim("c-b", "b", share("500m"), None), true);
        seen.claim(&claim("c-b", "b", share("500m"), None), false);
        seen.pod(&pod("b", None, "Pending"), false);
        let gone = seen.never_ran.last().unwrap();
        assert_eq!((gone.gpus, gone.bound, gone.gpus_asked), (true, false, 1));
    }

    #[test]
    fn a_pods_pending_time_splits_into_scheduling_node_boot_and_start() {
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        let mut pod = PodSeen {
            phase: "Pending".to_owned(),
            node: None,
            bound_ever: true,
            first_seen: t0,
            bound_at: Some(t0 + secs(70)),
            triggered_at: Some(t0 + secs(10)),
            ran: false,
            requests: Resources::default(),
            placement: None,
            claimed_gpus: 0,
        };
        assert_eq!(
            split(&pod, t0 + secs(73)),
            PodPendingSplit {
                scheduling: secs(10),
                node_boot: secs(60),
                start: secs(3),
            }
        );
        // Without CA's help all of it before the binding is scheduling.
        pod.triggered_at = None;
        assert_eq!(split(&pod, t0 + secs(73)).scheduling, secs(70));
        // Bound and running at once: nothing to start.
        pod.bound_at = None;
        assert_eq!(
            split(&pod, t0 + secs(5)),
            PodPendingSplit {
                scheduling: secs(5),
                node_boot: Duration::ZERO,
                start: Duration::ZERO,
            }
        );
    }

    #[test]
    fn a_node_that_joins_is_timed_to_ready_once_and_initial_ones_not_at_all() {
        let mut seen = seen(&["m5"]);
        seen.node(&ready_node("m5-a", "m5", true), true);
        seen.replaying = true;
        seen.node(&ready_node("m5-b", "m5", false), true);
        assert!(seen.node_ready_times.is_empty());
        seen.node(&ready_node("m5-b", "m5", true), true);
        seen.node(&ready_node("m5-b", "m5", true), true);
        seen.node(&ready_node("m5-a", "m5", true), true);
        assert_eq!(seen.node_ready_times.len(), 1);
    }

    fn ready_node(name: &str, group: &str, ready: bool) -> Node {
        let mut node = node(name, group);
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".to_owned(),
                status: if ready { "True" } else { "False" }.to_owned(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        node
    }

    #[test]
    fn pods_that_never_ran_evictions_preemptions_and_waits_are_kept() {
        let mut seen = seen(&["m5"]);
        seen.pod(&pod("a", None, "Pending", None), true);
        seen.pod(
            &pod("b", Some("m5-a"), "Running", Some("EvictionByEvictionAPI")),
            true,
        );
        seen.pod(
            &pod("c", Some("m5-a"), "Running", Some("PreemptionByScheduler")),
            true,
        );
        // The same pod seen again is counted once.
        seen.pod(
            &pod("c", Some("m5-a"), "Running", Some("PreemptionByScheduler")),
            true,
        );
        assert_eq!((seen.evicted.len(), seen.preempted.len()), (1, 1));
        // A pod deleted before it ran is kept with how long it waited.
        seen.pod(&pod("a", None, "Pending", None), false);
        assert_eq!(seen.never_ran.len(), 1);
        assert!(!seen.never_ran[0].bound);
        assert_eq!(seen.pods["b"].requests.cpu_millis, 250);
        assert_eq!(seen.pods["b"].requests.memory_bytes, 1 << 30);

        // The scheduler's event about b, counted per repeat, for the Deployment; another
        // pod's event is not the simulation's.
        let event = |uid: &str, count: i32| -> Event {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "e", "uid": "event-1"},
                "involvedObject": {"kind": "Pod", "uid": uid},
                "reason": "FailedScheduling",
                "message": "0/2 nodes are available: 2 Insufficient cpu. preemption: none.",
                "count": count
            }))
            .unwrap()
        };
        seen.event(&event("b", 1), true);
        seen.event(&event("b", 3), true);
        seen.event(&event("b", 3), true);
        seen.event(&event("stranger", 5), true);
        // An event may come before its pod: it counts once the pod is seen.
        let early = |count: i32| -> Event {
            let mut event = event("d", count);
            event.metadata.uid = Some("event-2".into());
            event
        };
        seen.event(&early(1), true);
        assert_eq!(seen.waits.len(), 2);
        seen.pod(&pod("d", None, "Pending", None), true);
        let waits: Vec<(&str, &str, u64)> = seen
            .waits
            .iter()
            .map(|w| (w.reason.as_str(), w.owner.as_str(), w.count))
            .collect();
        assert_eq!(
            waits,
            [
                ("Insufficient cpu", "Deployment/web", 1),
                ("Insufficient cpu", "Deployment/web", 2),
                ("Insufficient cpu", "Deployment/web", 1)
            ]
        );
    }
}
