//! Converting Alibaba's GPU cluster trace v2023 (`cluster-trace-gpu-v2023`: a node list and a
//! pod list, CSV) into a ksim trace file.
//!
//! Each pod becomes a bare `v1/Pod`, applied at its creation and deleted at its deletion, with
//! its CPU, memory and GPUs as requests (`nvidia.com/gpu`, the extended resource, in requests
//! and limits as Kubernetes requires). The extended resource counts whole devices, so a pod that
//! asked for a share of one GPU gets a whole one and says what it asked for
//! (`ksim.io/gpu-milli`), or with [`GpuShares::Refuse`] is an error: sharing a device needs DRA.
//! With [`GpuShares::Dra`] GPUs are claimed by Dynamic Resource Allocation instead: the trace
//! starts with a DeviceClass and one ResourceClaimTemplate per GPU request, a GPU pod claims
//! from one, and a share is exact (consumable capacity); the skeletons give the GPUs as a
//! ResourceSlice after the Node.
//! What production did is kept as recorded state, never replayed: the nodes as
//! [`pb::RecordedNode`]s, the pods pending and running over time as [`pb::ClusterSample`]s, and
//! each scheduled pod's creation and binding as a [`pb::PodLifecycle`], so a report compares the
//! replay's scheduling with production's. Nodes of one shape (CPU, memory, GPUs, GPU model) form
//! a node group, each with a node skeleton a run's `--node-group` takes.
//!
//! Every row is checked: a bad one is an error naming `file:line` and its field, never skipped.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use serde_json::{Value, json};

use crate::{TraceError, TraceWriter, hash, names, pb, time};

/// The node list's header, the only one read.
pub const NODES_HEADER: &str = "sn,cpu_milli,memory_mib,gpu,model";
/// The pod list's header, the only one read.
pub const PODS_HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,\
                               pod_phase,creation_time,deletion_time,scheduled_time";
/// The namespace the pods go in unless the caller names another.
pub const DEFAULT_NAMESPACE: &str = "alibaba";
/// 2023-01-01T00:00:00Z: the trace gives seconds from its start, not dates.
pub const DEFAULT_START_MS: i64 = 1_672_531_200_000;
/// The header's `origin` begins with it.
pub const ORIGIN: &str = "alibaba cluster-trace-gpu-v2023";

/// The extended resource a GPU is, and the key of the taint GPU nodes carry.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The GPU model a node has; pods' `gpu_spec` becomes a required affinity on it.
pub const GPU_MODEL_LABEL: &str = "ksim.io/gpu-model";
/// cluster-autoscaler's GPU label in ksim's cloud provider (`--gpu-label`'s default).
pub const GPU_TYPE_LABEL: &str = "ksim.io/gpu-type";
/// The label NVIDIA's GPU feature discovery sets, for schedulers and tools that look for it.
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// The value of the GPU taint: production taints GPU nodes so CPU pods stay off them.
pub const GPU_TAINT_VALUE: &str = "present";
/// What a pod given a whole GPU for a share of one asked for, in thousandths of a GPU.
pub const GPU_MILLI_ANNOTATION: &str = "ksim.io/gpu-milli";
/// The pod's recorded QoS class as Alibaba names it (LS, BE, Burstable, Guaranteed).
pub const QOS_LABEL: &str = "ksim.io/alibaba-qos";
/// The phase the recorded pod ended in.
pub const PHASE_LABEL: &str = "ksim.io/alibaba-phase";
/// The container image of every pod: the simulated nodes never pull it.
pub const IMAGE: &str = "registry.example/alibaba:1";
/// Pods a node takes: a kubelet's default `--max-pods`.
pub const MAX_PODS_PER_NODE: &str = "110";
/// The longest group name a run's `--node-group` takes: ksim-nodes' `MAX_POOL_GROUP_NAME_LEN`,
/// copied because this crate does not depend on ksim-nodes (the trace format and its fuzz
/// targets stay free of Kubernetes types); a test holds the copies equal.
const MAX_GROUP_NAME_LEN: usize = 40;
/// The label naming a node's group: ksim-nodes' `GROUP_LABEL`, copied (see above).
const GROUP_LABEL: &str = "ksim.io/node-group";

/// At most this many objects in one event: pods created or deleted in the same second share a
/// timestamp, and one record may not exceed [`crate::MAX_RECORD_BYTES`].
const MAX_OBJECTS_PER_EVENT: usize = 1000;
/// Largest request or capacity accepted: what the scheduler's 64-bit counters hold (9.2e18
/// millicores or bytes).
const MAX_CPU_MILLI: u64 = 9_000_000_000_000_000;
const MAX_MEMORY_MIB: u64 = 8_000_000_000_000;
/// The phases a Kubernetes pod can have.
const PHASES: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];

/// The API version of the DRA objects written with [`GpuShares::Dra`] (GA in Kubernetes 1.34).
pub const RESOURCE_API_VERSION: &str = "resource.k8s.io/v1";
/// The DRA driver of the GPUs, and the name of the DeviceClass selecting its devices (as the
/// local environment's fixtures name them).
pub const GPU_DRIVER: &str = "gpu.ksim.io";
/// The name of a GPU pod's claim, of its container's reference to it and of the claim's request.
pub const GPU_CLAIM: &str = "gpu";
/// The consumable capacity of a GPU device: 1 (a whole GPU), of which a share claims `<milli>m`.
pub const SHARE_CAPACITY: &str = "share";
/// The device attribute naming a GPU's model.
pub const MODEL_ATTRIBUTE: &str = "model";
/// The most devices one ResourceSlice may hold (the apiserver's limit; ksim-nodes'
/// `MAX_DEVICES`, copied as `MAX_GROUP_NAME_LEN` is): a skeleton gives one slice.
const MAX_DEVICES_PER_SLICE: u32 = 128;

/// What to do with a pod that asked for a share of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuShares {
    /// Give it a whole GPU and say in `ksim.io/gpu-milli` what it asked for.
    #[default]
    Whole,
    /// Refuse it: an error naming its line.
    Refuse,
    /// GPUs by Dynamic Resource Allocation: every GPU pod claims its GPUs from a
    /// ResourceClaimTemplate, a share exactly (consumable capacity), and nodes publish their
    /// GPUs as devices instead of `nvidia.com/gpu`.
    Dra,
}

/// One input file: its name as errors show it, and its text.
#[derive(Debug, Clone, Copy)]
pub struct Csv<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

/// Why the input cannot be converted.
#[derive(Debug, thiserror::Error)]
pub enum AlibabaError {
    #[error("{file} is empty: expected the header {expected:?}")]
    Empty {
        file: String,
        expected: &'static str,
    },
    #[error("{file}:1: the header is {found:?}, expected {expected:?}")]
    Header {
        file: String,
        found: String,
        expected: &'static str,
    },
    #[error("{file}:{line}: {found} fields, expected {expected} ({header})")]
    FieldCount {
        file: String,
        line: usize,
        found: usize,
        expected: usize,
        header: &'static str,
    },
    #[error("{file}:{line}: field {field} = {value:?}: {problem}")]
    Field {
        file: String,
        line: usize,
        field: &'static str,
        value: String,
        problem: String,
    },
    #[error(
        "{file}:{line}: field gpu_milli = \"{gpu_milli}\": the pod asks for a share of one GPU, \
         which `--gpu-shares refuse` refuses (nvidia.com/gpu counts whole GPUs)"
    )]
    SharedGpu {
        file: String,
        line: usize,
        gpu_milli: u32,
    },
    #[error("namespace {0:?} is not a DNS label (1-63 of a-z, 0-9 and '-')")]
    Namespace(String),
    #[error(
        "node group {name:?} (the nodes of GPU model {model:?}) is longer than the \
         {MAX_GROUP_NAME_LEN} characters a run's --node-group takes: a model name that long \
         cannot name a group"
    )]
    GroupName { name: String, model: String },
    #[error("the start {0} ms is outside the times a trace can hold (1970 to 9999)")]
    Start(i64),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// A node of the node list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub shape: Shape,
    /// Its line in the node list.
    pub line: usize,
}

/// What nodes of one group share.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpus: u32,
    /// The GPU model; `None` for a node without GPUs.
    pub model: Option<String>,
}

/// What a pod asked for of GPUs. Ordered as the claim templates are written: whole GPUs by
/// count, then shares by size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuRequest {
    None,
    /// Whole GPUs.
    Whole(u32),
    /// A share of one GPU, in thousandths (1 to 999).
    Share(u32),
}

impl GpuRequest {
    /// The devices the pod requests of the extended resource: a share takes a whole one.
    pub fn devices(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Whole(gpus) => gpus,
            Self::Share(_) => 1,
        }
    }

    /// The name of the ResourceClaimTemplate a pod claims this from with [`GpuShares::Dra`]:
    /// `gpus-<n>`, `gpu-share-<milli>m`; `None` without GPUs.
    pub fn claim_template(self) -> Option<String> {
        match self {
            Self::None => None,
            Self::Whole(gpus) => Some(format!("gpus-{gpus}")),
            Self::Share(milli) => Some(format!("gpu-share-{milli}m")),
        }
    }
}

/// A pod of the pod list. Times are seconds from the trace's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub gpu: GpuRequest,
    /// The GPU models it may run on; empty: any.
    pub gpu_models: Vec<String>,
    pub qos: String,
    pub phase: String,
    pub created_s: u64,
    /// `None`: not deleted within the trace.
    pub deleted_s: Option<u64>,
    /// `None`: never scheduled.
    pub scheduled_s: Option<u64>,
    /// Its line in the pod list.
    pub line: usize,
}

/// Nodes of one shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    /// A DNS label: `gpu-v100m16-8x-64c`, `cpu-32c-256g`.
    pub name: String,
    pub shape: Shape,
    pub nodes: u32,
}

/// Both files, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// By name.
    pub groups: Vec<NodeGroup>,
    /// The index in `groups` of each node's group.
    node_groups: Vec<usize>,
    /// The files' names, for the header's origin.
    sources: (String, String),
    gpu_shares: GpuShares,
}

/// How to write the trace. Time is passed in: the conversion reads no clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub namespace: String,
    /// The trace's time 0, in ms since the Unix epoch.
    pub start_ms: i64,
    pub created_by: String,
    /// The header's `create_time`.
    pub create_time_ms: i64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            start_ms: DEFAULT_START_MS,
            created_by: String::new(),
            create_time_ms: DEFAULT_START_MS,
        }
    }
}

/// What the recording holds, as the conversion's summary says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub pods: u64,
    pub nodes: u64,
    pub gpu_nodes: u64,
    pub gpus: u64,
    pub groups: u64,
    /// Pods asking for no GPU.
    pub cpu_pods: u64,
    /// Pods asking for whole GPUs.
    pub whole_gpu_pods: u64,
    /// Pods asking for a share of one GPU: given a whole one, or with [`GpuShares::Dra`]
    /// claiming exactly that share.
    pub shared_gpu_pods: u64,
    pub never_scheduled: u64,
    /// How the GPUs are written.
    pub gpu_shares: GpuShares,
    /// With [`GpuShares::Dra`], the pods claiming GPUs (all GPU pods); else 0.
    pub claim_pods: u64,
    /// With [`GpuShares::Dra`], the ResourceClaimTemplates written (one per distinct GPU
    /// request); else 0.
    pub claim_templates: u64,
}

/// Reads and checks both files; with [`GpuShares::Refuse`] a pod asking for a share of a GPU
/// is an error, with [`GpuShares::Dra`] a node with more GPUs than one ResourceSlice holds.
pub fn read(
    nodes: Csv<'_>,
    pods: Csv<'_>,
    gpu_shares: GpuShares,
) -> Result<Recording, AlibabaError> {
    let nodes_read = read_nodes(nodes)?;
    if gpu_shares == GpuShares::Dra
        && let Some(node) = nodes_read
            .iter()
            .find(|node| node.shape.gpus > MAX_DEVICES_PER_SLICE)
    {
        return Err(AlibabaError::Field {
            file: nodes.name.to_owned(),
            line: node.line,
            field: "gpu",
            value: node.shape.gpus.to_string(),
            problem: format!(
                "is more than the {MAX_DEVICES_PER_SLICE} devices a node's one ResourceSlice \
                 holds (--gpu-shares dra)"
            ),
        });
    }
    let pods_read = read_pods(pods, gpu_shares)?;
    let (groups, node_groups) = node_groups(&nodes_read);
    if let Some(long) = groups
        .iter()
        .find(|group| group.name.len() > MAX_GROUP_NAME_LEN)
    {
        return Err(AlibabaError::GroupName {
            name: long.name.clone(),
            model: long.shape.model.clone().unwrap_or_default(),
        });
    }
    Ok(Recording {
        nodes: nodes_read,
        pods: pods_read,
        groups,
        node_groups,
        sources: (nodes.name.to_owned(), pods.name.to_owned()),
        gpu_shares,
    })
}

impl Recording {
    pub fn summary(&self) -> Summary {
        let mut summary = Summary {
            pods: self.pods.len() as u64,
            nodes: self.nodes.len() as u64,
            groups: self.groups.len() as u64,
            ..Summary::default()
        };
        for node in &self.nodes {
            if node.shape.gpus > 0 {
                summary.gpu_nodes += 1;
                summary.gpus += u64::from(node.shape.gpus);
            }
        }
        for pod in &self.pods {
            match pod.gpu {
                GpuRequest::None => summary.cpu_pods += 1,
                GpuRequest::Whole(_) => summary.whole_gpu_pods += 1,
                GpuRequest::Share(_) => summary.shared_gpu_pods += 1,
            }
            if pod.scheduled_s.is_none() {
                summary.never_scheduled += 1;
            }
        }
        summary.gpu_shares = self.gpu_shares;
        if self.gpu_shares == GpuShares::Dra {
            summary.claim_pods = summary.whole_gpu_pods + summary.shared_gpu_pods;
            summary.claim_templates = self.claim_requests().len() as u64;
        }
        summary
    }

    /// How the GPUs are written: what [`read`] was given.
    pub fn gpu_shares(&self) -> GpuShares {
        self.gpu_shares
    }

    /// The distinct GPU requests of the pods, in order: one ResourceClaimTemplate each with
    /// [`GpuShares::Dra`].
    fn claim_requests(&self) -> std::collections::BTreeSet<GpuRequest> {
        self.pods
            .iter()
            .map(|pod| pod.gpu)
            .filter(|gpu| *gpu != GpuRequest::None)
            .collect()
    }

    /// What every pod needs before it is applied, with [`GpuShares::Dra`]: the DeviceClass,
    /// then the ResourceClaimTemplates the pods use. Empty in the other modes.
    fn setup_objects(&self, namespace: &str) -> Vec<pb::TraceObject> {
        if self.gpu_shares != GpuShares::Dra {
            return Vec::new();
        }
        let class = device_class_object();
        let mut objects = vec![trace_object(
            device_class_gvk(),
            GPU_DRIVER,
            "",
            Some(&class),
        )];
        for request in self.claim_requests() {
            if let Some((name, template)) = claim_template_object(request, namespace) {
                objects.push(trace_object(
                    claim_template_gvk(),
                    &name,
                    namespace,
                    Some(&template),
                ));
            }
        }
        objects
    }

    /// Writes the trace to `out`: the nodes, then events and cluster samples in time order, then
    /// the scheduled pods' lifecycles. Returns the output and the trailer.
    pub fn write<W: Write>(
        &self,
        out: W,
        options: &Options,
    ) -> Result<(W, pb::TraceTrailer), AlibabaError> {
        if !names::is_dns_label(&options.namespace) {
            return Err(AlibabaError::Namespace(options.namespace.clone()));
        }
        if !time::in_range(options.start_ms) {
            return Err(AlibabaError::Start(options.start_ms));
        }
        let times = self
            .pods
            .iter()
            .map(|pod| PodTimes::of(pod, &self.sources.1, options.start_ms))
            .collect::<Result<Vec<_>, _>>()?;
        let end_ms = times
            .iter()
            .map(PodTimes::last_ms)
            .max()
            .unwrap_or(options.start_ms);

        let mut writer = TraceWriter::new(out, &self.header(options, end_ms))?;
        for (node, &group) in self.nodes.iter().zip(&self.node_groups) {
            writer.write_node(&recorded_node(node, &self.groups[group], options.start_ms))?;
        }
        // The first event, before any pod: the objects the pods' claims name.
        for chunk in self
            .setup_objects(&options.namespace)
            .chunks(MAX_OBJECTS_PER_EVENT)
        {
            writer.write_event(&pb::TraceEvent {
                timestamp_ms: options.start_ms,
                applied: chunk.to_vec(),
                deleted: Vec::new(),
            })?;
        }

        // Each pod's spec hash, taken as it is applied: its lifecycle, written last, carries it.
        let mut spec_hashes = vec![0u64; self.pods.len()];
        let samples = self.samples(&times, options);
        let mut samples = samples.into_iter().peekable();
        for (timestamp_ms, (applied, deleted)) in events(&times) {
            while let Some(sample) = samples.next_if(|s| s.timestamp_ms < timestamp_ms) {
                writer.write_sample(&sample)?;
            }
            let mut event = empty_event(timestamp_ms);
            for &i in &applied {
                let pod = &self.pods[i];
                let object = pod_object(pod, &options.namespace, self.gpu_shares);
                spec_hashes[i] = hash::pod_spec_hash(&object);
                event.applied.push(trace_object(
                    pod_gvk(),
                    &pod.name,
                    &options.namespace,
                    Some(&object),
                ));
                if event.applied.len() + event.deleted.len() >= MAX_OBJECTS_PER_EVENT {
                    writer.write_event(&event)?;
                    event = empty_event(timestamp_ms);
                }
            }
            // After the applies: a pod created and deleted in one second is created first.
            for &i in &deleted {
                let name = &self.pods[i].name;
                event
                    .deleted
                    .push(trace_object(pod_gvk(), name, &options.namespace, None));
                if event.applied.len() + event.deleted.len() >= MAX_OBJECTS_PER_EVENT {
                    writer.write_event(&event)?;
                    event = empty_event(timestamp_ms);
                }
            }
            if !event.applied.is_empty() || !event.deleted.is_empty() {
                writer.write_event(&event)?;
            }
        }
        for sample in samples {
            writer.write_sample(&sample)?;
        }
        for ((pod, times), &spec_hash) in self.pods.iter().zip(&times).zip(&spec_hashes) {
            if let Some(lifecycle) = lifecycle(pod, times, spec_hash, &options.namespace) {
                writer.write_lifecycle(&lifecycle)?;
            }
        }
        Ok(writer.finish()?)
    }

    fn header(&self, options: &Options, end_ms: i64) -> pb::TraceHeader {
        // Bare pods, as the tracer records them: each owns its own lifetime.
        let mut tracked_kinds = vec![pb::TrackedKindConfig {
            gvk: Some(pod_gvk()),
            plural: "pods".to_owned(),
            namespaced: true,
            pod_template_paths: vec![String::new()],
            track_lifecycles: true,
            skip_owned: true,
        }];
        if self.gpu_shares == GpuShares::Dra {
            // Every kind the events hold; neither has pods of its own.
            for (gvk, plural, namespaced) in [
                (device_class_gvk(), "deviceclasses", false),
                (claim_template_gvk(), "resourceclaimtemplates", true),
            ] {
                tracked_kinds.push(pb::TrackedKindConfig {
                    gvk: Some(gvk),
                    plural: plural.to_owned(),
                    namespaced,
                    pod_template_paths: Vec::new(),
                    track_lifecycles: false,
                    skip_owned: false,
                });
            }
        }
        pb::TraceHeader {
            format_version: crate::FORMAT_VERSION,
            tracer_config: Some(pb::TracerConfig {
                tracked_kinds,
                // The nodes and the pods' phases over time: what a report compares with.
                cluster_recorded: true,
                usage_recording: pb::UsageRecording::Unspecified.into(),
                usage_interval_ms: 0,
            }),
            start_time: Some(time::timestamp(options.start_ms)),
            // The end is exclusive: one millisecond past the last time the pod list gives.
            end_time: Some(time::timestamp(end_ms.saturating_add(1))),
            created_by: options.created_by.clone(),
            create_time: Some(time::timestamp(options.create_time_ms)),
            origin: format!("{ORIGIN} ({}, {})", self.sources.0, self.sources.1),
            transforms: Vec::new(),
        }
    }

    /// The recorded cluster at the start and at every change: all nodes Ready throughout, pods
    /// pending from creation until scheduled (or deleted, if never scheduled) and running from
    /// scheduled until deleted. Changes in one millisecond make one sample, and a time whose
    /// changes cancel out makes none.
    fn samples(&self, times: &[PodTimes], options: &Options) -> Vec<pb::ClusterSample> {
        let mut ready_nodes: BTreeMap<String, u32> = BTreeMap::new();
        for group in &self.groups {
            ready_nodes.insert(group.name.clone(), group.nodes);
        }
        // (pending, running) changes per time.
        let mut changes: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        let mut change = |at: i64, pending: i64, running: i64| {
            let entry = changes.entry(at).or_default();
            entry.0 += pending;
            entry.1 += running;
        };
        for pod in times {
            change(pod.created_ms, 1, 0);
            match (pod.scheduled_ms, pod.deleted_ms) {
                (Some(scheduled), deleted) => {
                    change(scheduled, -1, 1);
                    if let Some(deleted) = deleted {
                        change(deleted, 0, -1);
                    }
                }
                (None, Some(deleted)) => change(deleted, -1, 0),
                (None, None) => {}
            }
        }
        let sample = |timestamp_ms: i64, (pending, running): (i64, i64)| {
            let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
            let mut pods = BTreeMap::new();
            if pending > 0 || running > 0 {
                pods.insert(
                    options.namespace.clone(),
                    pb::RecordedPodCounts {
                        pending: count(pending),
                        running: count(running),
                    },
                );
            }
            pb::ClusterSample {
                timestamp_ms,
                ready_nodes: ready_nodes.clone().into_iter().collect(),
                pods: pods.into_iter().collect(),
            }
        };
        // The state from the start, whatever happens first.
        let mut state = changes.remove(&options.start_ms).unwrap_or_default();
        let mut samples = vec![sample(options.start_ms, state)];
        for (at, (pending, running)) in changes {
            if pending == 0 && running == 0 {
                continue;
            }
            state = (state.0 + pending, state.1 + running);
            samples.push(sample(at, state));
        }
        samples
    }
}

/// A pod's times in ms since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PodTimes {
    created_ms: i64,
    scheduled_ms: Option<i64>,
    deleted_ms: Option<i64>,
}

impl PodTimes {
    fn of(pod: &Pod, file: &str, start_ms: i64) -> Result<Self, AlibabaError> {
        let at = |field: &'static str, seconds: u64| {
            i64::try_from(seconds)
                .ok()
                .and_then(|s| s.checked_mul(1000))
                .and_then(|ms| ms.checked_add(start_ms))
                .filter(|&ms| time::in_range(ms))
                .ok_or_else(|| AlibabaError::Field {
                    file: file.to_owned(),
                    line: pod.line,
                    field,
                    value: seconds.to_string(),
                    problem: format!(
                        "is past the end of 9999 from the start ({start_ms} ms since the epoch)"
                    ),
                })
        };
        Ok(Self {
            created_ms: at("creation_time", pod.created_s)?,
            scheduled_ms: pod
                .scheduled_s
                .map(|s| at("scheduled_time", s))
                .transpose()?,
            deleted_ms: pod.deleted_s.map(|s| at("deletion_time", s)).transpose()?,
        })
    }

    fn last_ms(&self) -> i64 {
        self.created_ms
            .max(self.scheduled_ms.unwrap_or(i64::MIN))
            .max(self.deleted_ms.unwrap_or(i64::MIN))
    }
}

/// Per time, in order, the pods created and the pods deleted then (by index, in file order).
fn events(times: &[PodTimes]) -> BTreeMap<i64, (Vec<usize>, Vec<usize>)> {
    let mut events: BTreeMap<i64, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for (i, pod) in times.iter().enumerate() {
        events.entry(pod.created_ms).or_default().0.push(i);
        if let Some(deleted) = pod.deleted_ms {
            events.entry(deleted).or_default().1.push(i);
        }
    }
    events
}

fn empty_event(timestamp_ms: i64) -> pb::TraceEvent {
    pb::TraceEvent {
        timestamp_ms,
        applied: Vec::new(),
        deleted: Vec::new(),
    }
}

fn pod_gvk() -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: String::new(),
        version: "v1".to_owned(),
        kind: "Pod".to_owned(),
    }
}

fn device_class_gvk() -> pb::GroupVersionKind {
    crate::gvk::from_api_version(RESOURCE_API_VERSION, "DeviceClass")
}

fn claim_template_gvk() -> pb::GroupVersionKind {
    crate::gvk::from_api_version(RESOURCE_API_VERSION, "ResourceClaimTemplate")
}

/// The DeviceClass `gpu.ksim.io`: the devices of the driver of that name.
pub fn device_class_object() -> Value {
    json!({
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": { "name": GPU_DRIVER },
        "spec": { "selectors": [{ "cel": {
            "expression": format!("device.driver == '{GPU_DRIVER}'"),
        } }] },
    })
}

/// The ResourceClaimTemplate pods claim `request` from, and its name: `count` whole devices
/// (a request without capacity takes a device whole), or one device's `share` capacity in
/// thousandths. `None` for no GPU.
pub fn claim_template_object(request: GpuRequest, namespace: &str) -> Option<(String, Value)> {
    let name = request.claim_template()?;
    let exactly = match request {
        GpuRequest::None => return None,
        GpuRequest::Whole(gpus) => json!({ "deviceClassName": GPU_DRIVER, "count": gpus }),
        GpuRequest::Share(milli) => json!({
            "deviceClassName": GPU_DRIVER,
            "capacity": { "requests": { SHARE_CAPACITY: format!("{milli}m") } },
        }),
    };
    let template = json!({
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "spec": { "devices": { "requests": [
            { "name": GPU_CLAIM, "exactly": exactly },
        ] } } },
    });
    Some((name, template))
}

/// The pod as the replay creates it: its GPUs as `nvidia.com/gpu`, or with [`GpuShares::Dra`]
/// as a claim from their ResourceClaimTemplate.
pub fn pod_object(pod: &Pod, namespace: &str, gpu_shares: GpuShares) -> Value {
    let dra = gpu_shares == GpuShares::Dra;
    let devices = pod.gpu.devices();
    let mut resources = json!({
        "requests": {
            "cpu": format!("{}m", pod.cpu_milli),
            "memory": format!("{}Mi", pod.memory_mib),
        },
    });
    let mut metadata = json!({
        "name": pod.name,
        "namespace": namespace,
        "labels": { QOS_LABEL: pod.qos, PHASE_LABEL: pod.phase },
    });
    let mut spec = json!({ "schedulerName": "default-scheduler" });
    if devices > 0 {
        if let (true, Some(template)) = (dra, pod.gpu.claim_template()) {
            spec["resourceClaims"] =
                json!([{ "name": GPU_CLAIM, "resourceClaimTemplateName": template }]);
            resources["claims"] = json!([{ "name": GPU_CLAIM }]);
        } else {
            // Kubernetes requires an extended resource's request to equal its limit.
            resources["requests"][GPU_RESOURCE] = json!(devices.to_string());
            resources["limits"] = json!({ GPU_RESOURCE: devices.to_string() });
        }
        // GPU nodes keep their taint with DRA too.
        spec["tolerations"] =
            json!([{ "key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule" }]);
    }
    // With DRA the claim asks the share exactly: nothing to say beside it.
    if let (false, GpuRequest::Share(milli)) = (dra, pod.gpu) {
        metadata["annotations"] = json!({ GPU_MILLI_ANNOTATION: milli.to_string() });
    }
    if !pod.gpu_models.is_empty() {
        spec["affinity"] = json!({
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{
                        "matchExpressions": [{
                            "key": GPU_MODEL_LABEL,
                            "operator": "In",
                            "values": pod.gpu_models,
                        }],
                    }],
                },
            },
        });
    }
    spec["containers"] = json!([{ "name": "main", "image": IMAGE, "resources": resources }]);
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec })
}

/// An object of the trace: whole when applied, its identity alone when deleted.
fn trace_object(
    gvk: pb::GroupVersionKind,
    name: &str,
    namespace: &str,
    object: Option<&Value>,
) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(gvk),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        object_json: object
            .map(|o| o.to_string().into_bytes())
            .unwrap_or_default(),
    }
}

/// A scheduled pod's lifetime: created, bound and started when scheduled (the trace knows no
/// later step), ended by its deletion. `Deleted`, so a replay gives it no lifetime of its own:
/// the replayed delete ends it, as production's did. `None` for a pod never scheduled.
fn lifecycle(
    pod: &Pod,
    times: &PodTimes,
    pod_spec_hash: u64,
    namespace: &str,
) -> Option<pb::PodLifecycle> {
    let scheduled_ms = times.scheduled_ms?;
    let outcome = match times.deleted_ms {
        Some(_) => pb::PodOutcome::Deleted,
        None => pb::PodOutcome::Running,
    };
    Some(pb::PodLifecycle {
        owner_gvk: Some(pod_gvk()),
        owner_namespace: namespace.to_owned(),
        owner_name: pod.name.clone(),
        pod_spec_hash,
        launch_index: 0,
        start_ms: scheduled_ms,
        end_ms: times.deleted_ms.unwrap_or(0),
        outcome: outcome.into(),
        pod_name: pod.name.clone(),
        bound_ms: scheduled_ms,
        ready_ms: 0,
        node_name: String::new(),
        created_ms: times.created_ms,
    })
}

fn recorded_node(node: &Node, group: &NodeGroup, start_ms: i64) -> pb::RecordedNode {
    let mut labels = group.shape.labels();
    labels.insert(GROUP_LABEL.to_owned(), group.name.clone());
    let resources = group.shape.resources();
    pb::RecordedNode {
        timestamp_ms: start_ms,
        name: node.name.clone(),
        group: group.name.clone(),
        labels: labels.into_iter().collect(),
        capacity: resources.clone().into_iter().collect(),
        allocatable: resources.into_iter().collect(),
        ready: true,
        created_ms: start_ms,
        deleted_ms: 0,
        removal_started_ms: 0,
    }
}

impl Shape {
    /// A node's labels: OS and architecture, and the GPU model under the three labels schedulers,
    /// cluster-autoscaler and tools look for.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ]);
        if let Some(model) = &self.model {
            for label in [GPU_MODEL_LABEL, GPU_TYPE_LABEL, GPU_PRODUCT_LABEL] {
                labels.insert(label.to_owned(), model.clone());
            }
        }
        labels
    }

    /// Capacity, all allocatable: the trace gives no reservations.
    pub fn resources(&self) -> BTreeMap<String, String> {
        let mut resources = BTreeMap::from([
            ("cpu".to_owned(), cpu_quantity(self.cpu_milli)),
            ("memory".to_owned(), format!("{}Mi", self.memory_mib)),
            ("pods".to_owned(), MAX_PODS_PER_NODE.to_owned()),
        ]);
        if self.gpus > 0 {
            resources.insert(GPU_RESOURCE.to_owned(), self.gpus.to_string());
        }
        resources
    }

    /// The group's name: `gpu-<model>-<gpus>x-<cpu>`, with `-<memory>` where two shapes would
    /// share it; `cpu-<cpu>-<memory>`.
    fn name(&self, with_memory: bool) -> String {
        let cpu = if self.cpu_milli.is_multiple_of(1000) {
            format!("{}c", self.cpu_milli / 1000)
        } else {
            format!("{}m", self.cpu_milli)
        };
        let memory = if self.memory_mib.is_multiple_of(1024) {
            format!("{}g", self.memory_mib / 1024)
        } else {
            format!("{}mi", self.memory_mib)
        };
        match &self.model {
            Some(model) => {
                // A label value's other characters ('_', '.') are not a DNS label's.
                let model: String = model
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_lowercase()
                        } else {
                            '-'
                        }
                    })
                    .collect();
                let name = format!("gpu-{model}-{}x-{cpu}", self.gpus);
                if with_memory {
                    format!("{name}-{memory}")
                } else {
                    name
                }
            }
            None => format!("cpu-{cpu}-{memory}"),
        }
    }
}

/// CPU as a node states it: whole cores where they are whole.
fn cpu_quantity(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

impl NodeGroup {
    /// The node skeleton of the group, in the YAML form `kubectl get node -o yaml` prints (and
    /// `ksim run --node-group NAME=SKELETON.yaml:COUNT` reads): labels, the GPU taint on GPU
    /// nodes, capacity and allocatable, with GPUs as `nvidia.com/gpu`.
    pub fn skeleton_yaml(&self) -> String {
        self.skeleton_yaml_for(GpuShares::Whole)
    }

    /// [`NodeGroup::skeleton_yaml`] for GPUs written as `gpu_shares` says: with
    /// [`GpuShares::Dra`] a GPU group's Node has no `nvidia.com/gpu` nor cluster-autoscaler's
    /// GPU label, and a second document, the ResourceSlice of its GPUs, follows it.
    pub fn skeleton_yaml_for(&self, gpu_shares: GpuShares) -> String {
        let dra = gpu_shares == GpuShares::Dra && self.shape.gpus > 0;
        let quote = |text: &str| Value::String(text.to_owned()).to_string();
        let gpus = match &self.shape.model {
            Some(model) if dra => format!(
                ", {} {model} GPUs by DRA: the ResourceSlice after the Node",
                self.shape.gpus
            ),
            Some(model) => format!(", {} {model} GPUs", self.shape.gpus),
            None => String::new(),
        };
        let nodes = match self.nodes {
            1 => "1 node".to_owned(),
            n => format!("{n} nodes"),
        };
        let mut yaml = format!(
            "# Node skeleton of group {}: {nodes} of Alibaba's cluster-trace-gpu-v2023\n\
             # ({} CPU, {}Mi memory{gpus}).\n\
             apiVersion: v1\nkind: Node\nmetadata:\n  labels:\n",
            self.name,
            cpu_quantity(self.shape.cpu_milli),
            self.shape.memory_mib,
        );
        for (key, value) in self.shape.labels() {
            // cluster-autoscaler takes a node with its GPU label and no nvidia.com/gpu for a
            // GPU node not ready yet.
            if dra && key == GPU_TYPE_LABEL {
                continue;
            }
            yaml.push_str(&format!("    {}: {}\n", quote(&key), quote(&value)));
        }
        if self.shape.gpus > 0 {
            // Production practice: CPU pods stay off GPU nodes; GPU pods tolerate it.
            yaml.push_str(&format!(
                "spec:\n  taints:\n    - key: {}\n      value: {}\n      effect: NoSchedule\n",
                quote(GPU_RESOURCE),
                quote(GPU_TAINT_VALUE)
            ));
        }
        yaml.push_str("status:\n");
        let mut resources = self.shape.resources();
        if dra {
            // The GPUs are the slice's devices, not an extended resource.
            resources.remove(GPU_RESOURCE);
        }
        for field in ["capacity", "allocatable"] {
            yaml.push_str(&format!("  {field}:\n"));
            for (resource, quantity) in &resources {
                yaml.push_str(&format!("    {}: {}\n", quote(resource), quote(quantity)));
            }
        }
        if dra {
            yaml.push_str(&self.resource_slice_yaml());
        }
        yaml
    }

    /// `---` and the ResourceSlice of a GPU node's devices: `gpu-0`, `gpu-1`, ..., each of
    /// `share` capacity 1 that claims may divide (`allowMultipleAllocations`, consumable
    /// capacity). The pool replaces its pool name and node per virtual node.
    fn resource_slice_yaml(&self) -> String {
        let quote = |text: &str| Value::String(text.to_owned()).to_string();
        let model = self.shape.model.as_deref().unwrap_or_default();
        let mut yaml = format!(
            "---\napiVersion: {RESOURCE_API_VERSION}\nkind: ResourceSlice\nspec:\n  \
             driver: {}\n  pool:\n    name: {}\n    resourceSliceCount: 1\n  devices:\n",
            quote(GPU_DRIVER),
            quote(&self.name),
        );
        for index in 0..self.shape.gpus {
            yaml.push_str(&format!(
                "    - name: \"gpu-{index}\"\n      allowMultipleAllocations: true\n      \
                 attributes:\n        {}:\n          string: {}\n      capacity:\n        \
                 {}:\n          value: \"1\"\n",
                quote(MODEL_ATTRIBUTE),
                quote(model),
                quote(SHARE_CAPACITY),
            ));
        }
        yaml
    }
}

/// The groups of `nodes` by shape, by name, and each node's group.
fn node_groups(nodes: &[Node]) -> (Vec<NodeGroup>, Vec<usize>) {
    let mut counts: BTreeMap<&Shape, u32> = BTreeMap::new();
    for node in nodes {
        *counts.entry(&node.shape).or_default() += 1;
    }
    let mut groups: Vec<NodeGroup> = counts
        .into_iter()
        .map(|(shape, nodes)| NodeGroup {
            name: shape.name(false),
            shape: shape.clone(),
            nodes,
        })
        .collect();
    let clashing = |groups: &[NodeGroup]| {
        let mut uses: HashMap<String, u32> = HashMap::new();
        for group in groups {
            *uses.entry(group.name.clone()).or_default() += 1;
        }
        uses
    };
    // GPU groups of one model, GPU count and CPU that differ in memory: named with it.
    let uses = clashing(&groups);
    for group in &mut groups {
        if uses.get(&group.name).is_some_and(|&n| n > 1) {
            group.name = group.shape.name(true);
        }
    }
    // Models that differ only in case or punctuation: numbered in shape order.
    let uses = clashing(&groups);
    let mut numbered: HashMap<String, u32> = HashMap::new();
    for group in &mut groups {
        if uses.get(&group.name).is_some_and(|&n| n > 1) {
            let n = numbered.entry(group.name.clone()).or_default();
            *n += 1;
            group.name = format!("{}-{n}", group.name);
        }
    }
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    let index: HashMap<&Shape, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, group)| (&group.shape, i))
        .collect();
    let node_groups = nodes
        .iter()
        .map(|node| index.get(&node.shape).copied().unwrap_or_default())
        .collect();
    (groups, node_groups)
}

fn read_nodes(csv: Csv<'_>) -> Result<Vec<Node>, AlibabaError> {
    let mut nodes = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for row in rows(csv, NODES_HEADER)? {
        let name = row.name(0, &mut seen, "node")?;
        let cpu_milli = row.positive(1, MAX_CPU_MILLI)?;
        let memory_mib = row.positive(2, MAX_MEMORY_MIB)?;
        let gpus = row.count(3)?;
        let model = match (gpus, row.fields[4].is_empty()) {
            (0, true) => None,
            (0, false) => return Err(row.error(4, "names a GPU model, but gpu is 0")),
            (_, true) => {
                return Err(row.error(4, "is empty, but the node has GPUs: name their model"));
            }
            (_, false) => Some(row.label_value(4)?.to_owned()),
        };
        nodes.push(Node {
            name: name.to_owned(),
            shape: Shape {
                cpu_milli,
                memory_mib,
                gpus,
                model,
            },
            line: row.line,
        });
    }
    Ok(nodes)
}

fn read_pods(csv: Csv<'_>, gpu_shares: GpuShares) -> Result<Vec<Pod>, AlibabaError> {
    let mut pods = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for row in rows(csv, PODS_HEADER)? {
        let name = row.name(0, &mut seen, "pod")?;
        let cpu_milli = row.whole(1, MAX_CPU_MILLI)?;
        let memory_mib = row.whole(2, MAX_MEMORY_MIB)?;
        let num_gpu = row.count(3)?;
        let gpu_milli = row.count(4)?;
        let gpu = match (num_gpu, gpu_milli) {
            (0, 0) => GpuRequest::None,
            (0, _) => return Err(row.error(4, "is a share of a GPU, but num_gpu is 0")),
            (1, 1000) => GpuRequest::Whole(1),
            (1, 0) => {
                return Err(row.error(4, "is 0, but num_gpu is 1: expected 1 to 1000 thousandths"));
            }
            (1, milli) if milli < 1000 => match gpu_shares {
                GpuShares::Whole | GpuShares::Dra => GpuRequest::Share(milli),
                GpuShares::Refuse => {
                    return Err(AlibabaError::SharedGpu {
                        file: row.file.to_owned(),
                        line: row.line,
                        gpu_milli: milli,
                    });
                }
            },
            (1, _) => return Err(row.error(4, "is more than 1000 (one whole GPU)")),
            (gpus, 1000) => GpuRequest::Whole(gpus),
            (gpus, _) => {
                return Err(row.error(
                    4,
                    format!("expected 1000 with num_gpu {gpus}: only one GPU can be shared"),
                ));
            }
        };
        let gpu_models = match row.fields[5] {
            "" => Vec::new(),
            _ if gpu == GpuRequest::None => {
                return Err(row.error(5, "names GPU models, but the pod asks for no GPU"));
            }
            spec => spec
                .split('|')
                .map(|model| {
                    check_label_value(model)
                        .map(str::to_owned)
                        .map_err(|problem| row.error(5, format!("model {model:?} {problem}")))
                })
                .collect::<Result<_, _>>()?,
        };
        let qos = row.label_value(6)?.to_owned();
        let phase = row.fields[7];
        if !PHASES.contains(&phase) {
            return Err(row.error(7, format!("is not a pod phase ({})", PHASES.join(", "))));
        }
        let created_s = row.whole(8, u64::MAX)?;
        let deleted_s = row.optional_whole(9)?;
        let scheduled_s = row.optional_whole(10)?;
        if let Some(deleted) = deleted_s
            && deleted < created_s
        {
            return Err(row.error(9, format!("is before creation_time {created_s}")));
        }
        if let Some(scheduled) = scheduled_s {
            if scheduled < created_s {
                return Err(row.error(10, format!("is before creation_time {created_s}")));
            }
            if let Some(deleted) = deleted_s
                && scheduled > deleted
            {
                return Err(row.error(10, format!("is after deletion_time {deleted}")));
            }
        }
        pods.push(Pod {
            name: name.to_owned(),
            cpu_milli,
            memory_mib,
            gpu,
            gpu_models,
            qos,
            phase: phase.to_owned(),
            created_s,
            deleted_s,
            scheduled_s,
            line: row.line,
        });
    }
    Ok(pods)
}

/// One data line of a file, split at its commas (the data quotes no field).
struct Row<'a> {
    file: &'a str,
    /// 1-based; the header is line 1.
    line: usize,
    header: &'static str,
    fields: Vec<&'a str>,
}

/// The data lines of `csv`, after checking its header and each line's field count.
fn rows<'a>(csv: Csv<'a>, header: &'static str) -> Result<Vec<Row<'a>>, AlibabaError> {
    // A byte order mark and Windows line ends are how spreadsheets save CSV.
    let text = csv.text.strip_prefix('\u{feff}').unwrap_or(csv.text);
    let mut lines = text
        .lines()
        .map(|line| line.strip_suffix('\r').unwrap_or(line));
    let Some(first) = lines.next() else {
        return Err(AlibabaError::Empty {
            file: csv.name.to_owned(),
            expected: header,
        });
    };
    if first != header {
        return Err(AlibabaError::Header {
            file: csv.name.to_owned(),
            found: first.chars().take(200).collect(),
            expected: header,
        });
    }
    let expected = header.split(',').count();
    lines
        .enumerate()
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split(',').collect();
            let line = i + 2;
            if fields.len() != expected {
                return Err(AlibabaError::FieldCount {
                    file: csv.name.to_owned(),
                    line,
                    found: fields.len(),
                    expected,
                    header,
                });
            }
            Ok(Row {
                file: csv.name,
                line,
                header,
                fields,
            })
        })
        .collect()
}

impl<'a> Row<'a> {
    fn error(&self, index: usize, problem: impl Into<String>) -> AlibabaError {
        AlibabaError::Field {
            file: self.file.to_owned(),
            line: self.line,
            field: self.header.split(',').nth(index).unwrap_or("?"),
            value: self
                .fields
                .get(index)
                .copied()
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect(),
            problem: problem.into(),
        }
    }

    /// A whole number from 0 to `max`, written in digits only.
    fn whole(&self, index: usize, max: u64) -> Result<u64, AlibabaError> {
        let text = self.fields[index];
        if text.is_empty() {
            return Err(self.error(index, "is empty: expected a whole number"));
        }
        if let Some(digits) = text.strip_prefix('-')
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(self.error(index, "is negative"));
        }
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(index, "is not a whole number"));
        }
        match text.parse::<u64>() {
            Ok(value) if value <= max => Ok(value),
            _ => Err(self.error(index, format!("is more than {max}"))),
        }
    }

    /// [`Row::whole`], or `None` when empty.
    fn optional_whole(&self, index: usize) -> Result<Option<u64>, AlibabaError> {
        if self.fields[index].is_empty() {
            return Ok(None);
        }
        self.whole(index, u64::MAX).map(Some)
    }

    /// [`Row::whole`], above 0: a node without CPU or memory could run no pod.
    fn positive(&self, index: usize, max: u64) -> Result<u64, AlibabaError> {
        match self.whole(index, max)? {
            0 => Err(self.error(index, "is 0: a node without it could run no pod")),
            value => Ok(value),
        }
    }

    fn count(&self, index: usize) -> Result<u32, AlibabaError> {
        let value = self.whole(index, u64::from(u32::MAX))?;
        u32::try_from(value).map_err(|_| self.error(index, "is out of range"))
    }

    /// An object name (a DNS subdomain, as Kubernetes requires of pods and nodes) used once.
    fn name(
        &self,
        index: usize,
        seen: &mut HashMap<&'a str, usize>,
        what: &str,
    ) -> Result<&'a str, AlibabaError> {
        let name = self.fields[index];
        let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let bytes = name.as_bytes();
        let valid = (1..=253).contains(&bytes.len())
            && bytes
                .iter()
                .all(|b| alphanumeric(b) || *b == b'-' || *b == b'.')
            && bytes.first().is_some_and(alphanumeric)
            && bytes.last().is_some_and(alphanumeric);
        if !valid {
            return Err(self.error(
                index,
                "is not a Kubernetes object name (1-253 of a-z, 0-9, '-' and '.', \
                 starting and ending with a letter or digit)",
            ));
        }
        if let Some(first) = seen.insert(name, self.line) {
            return Err(self.error(index, format!("names the {what} of line {first} again")));
        }
        Ok(name)
    }

    /// A non-empty label value: it goes in a label or a node selector.
    fn label_value(&self, index: usize) -> Result<&'a str, AlibabaError> {
        check_label_value(self.fields[index]).map_err(|problem| self.error(index, problem))
    }
}

/// `value` if it is a non-empty Kubernetes label value: at most 63 letters, digits, '-', '_'
/// and '.', starting and ending with a letter or digit.
fn check_label_value(value: &str) -> Result<&str, &'static str> {
    let bytes = value.as_bytes();
    let valid = (1..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if valid {
        Ok(value)
    } else {
        Err(
            "is not a label value (1-63 of letters, digits, '-', '_' and '.', starting and \
             ending with a letter or digit)",
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use super::*;
    use crate::{Trace, read_trace};

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
n-0,32000,262144,0,
n-1,96000,393216,8,G2
n-2,96000,393216,8,G2
n-3,8000,32768,1,V100M16
";

    fn pods(rows: &[&str]) -> String {
        rows.iter()
            .fold(format!("{PODS_HEADER}\n"), |text, row| text + row + "\n")
    }

    fn csv<'a>(name: &'a str, text: &'a str) -> Csv<'a> {
        Csv { name, text }
    }

    fn recording(nodes: &str, pods: &str) -> Recording {
        read(
            csv("nodes.csv", nodes),
            csv("pods.csv", pods),
            GpuShares::Whole,
        )
        .unwrap()
    }

    fn convert(recording: &Recording, options: &Options) -> Trace {
        let (bytes, _) = recording.write(Vec::new(), options).unwrap();
        read_trace(&bytes).unwrap()
    }

    /// The applied pods of the trace by name, with their event's time.
    fn applied(trace: &Trace) -> BTreeMap<String, (i64, Value)> {
        trace
            .events
            .iter()
            .flat_map(|event| {
                event.applied.iter().map(|object| {
                    let pod: Value = serde_json::from_slice(&object.object_json).unwrap();
                    (object.name.clone(), (event.timestamp_ms, pod))
                })
            })
            .collect()
    }

    /// The deleted pods by name, with their event's time.
    fn deleted(trace: &Trace) -> BTreeMap<String, i64> {
        trace
            .events
            .iter()
            .flat_map(|event| {
                event
                    .deleted
                    .iter()
                    .map(|object| (object.name.clone(), event.timestamp_ms))
            })
            .collect()
    }

    fn error(nodes: &str, pods: &str) -> String {
        read(
            csv("nodes.csv", nodes),
            csv("pods.csv", pods),
            GpuShares::Whole,
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn requests_cpu_memory_and_whole_gpus_and_a_share_as_a_whole_gpu_annotated() {
        let recording = recording(
            NODES,
            &pods(&[
                "cpu,4000,8192,0,0,,BE,Succeeded,0,60,0",
                "two,12000,16384,2,1000,,LS,Running,0,60,0",
                "share,6000,12288,1,460,,LS,Running,0,60,0",
                "one,1500,100,1,1000,,Burstable,Failed,0,60,0",
            ]),
        );
        let trace = convert(&recording, &Options::default());
        let pods = applied(&trace);
        let spec = |name: &str| pods[name].1["spec"].clone();
        let resources = |name: &str| spec(name)["containers"][0]["resources"].clone();

        assert_eq!(
            resources("cpu"),
            json!({ "requests": { "cpu": "4000m", "memory": "8192Mi" } })
        );
        assert_eq!(spec("cpu").get("tolerations"), None);
        assert_eq!(spec("cpu")["schedulerName"], "default-scheduler");
        assert_eq!(spec("cpu")["containers"][0]["image"], IMAGE);
        assert_eq!(
            resources("two"),
            json!({
                "requests": { "cpu": "12000m", "memory": "16384Mi", "nvidia.com/gpu": "2" },
                "limits": { "nvidia.com/gpu": "2" },
            })
        );
        assert_eq!(
            spec("two")["tolerations"],
            json!([{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }])
        );
        assert_eq!(resources("share")["limits"]["nvidia.com/gpu"], "1");
        assert_eq!(
            pods["share"].1["metadata"]["annotations"],
            json!({ "ksim.io/gpu-milli": "460" })
        );
        assert_eq!(pods["one"].1["metadata"].get("annotations"), None);
        assert_eq!(resources("one")["requests"]["nvidia.com/gpu"], "1");
        assert_eq!(
            pods["cpu"].1["metadata"]["labels"],
            json!({ "ksim.io/alibaba-qos": "BE", "ksim.io/alibaba-phase": "Succeeded" })
        );
        assert_eq!(pods["cpu"].1["metadata"]["namespace"], "alibaba");
        assert_eq!(spec("cpu").get("affinity"), None);

        let summary = recording.summary();
        assert_eq!(
            (
                summary.pods,
                summary.cpu_pods,
                summary.whole_gpu_pods,
                summary.shared_gpu_pods
            ),
            (4, 1, 2, 1)
        );
        assert_eq!((summary.nodes, summary.gpu_nodes, summary.gpus), (4, 3, 17));
    }

    #[test]
    fn gpu_spec_is_a_required_affinity_on_the_gpu_model() {
        let recording = recording(
            NODES,
            &pods(&["p,1000,1024,1,1000,V100M16|P100,LS,Running,0,60,0"]),
        );
        let pods = applied(&convert(&recording, &Options::default()));
        assert_eq!(
            pods["p"].1["spec"]["affinity"],
            json!({ "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{ "matchExpressions": [{
                    "key": "ksim.io/gpu-model", "operator": "In", "values": ["V100M16", "P100"],
                }] }],
            } } })
        );
    }

    #[test]
    fn times_are_seconds_from_the_start_and_scheduled_pods_have_lifecycles() {
        let recording = recording(
            NODES,
            &pods(&[
                "a,1000,1024,0,0,,LS,Running,0,100,3",
                "b,1000,1024,0,0,,LS,Running,5,,5",
                "never,1000,1024,0,0,,LS,Pending,7,9,",
            ]),
        );
        let start_ms = 1_700_000_000_000;
        let options = Options {
            namespace: "prod".to_owned(),
            start_ms,
            created_by: "unit test".to_owned(),
            create_time_ms: 1_800_000_000_000,
        };
        let trace = convert(&recording, &options);
        let applied = applied(&trace);
        let at = |s: i64| start_ms + s * 1000;
        assert_eq!(applied["a"].0, at(0));
        assert_eq!(applied["b"].0, at(5));
        assert_eq!(applied["never"].0, at(7));
        assert_eq!(applied["a"].1["metadata"]["namespace"], "prod");
        let deleted = deleted(&trace);
        assert_eq!(
            deleted,
            BTreeMap::from([("a".into(), at(100)), ("never".into(), at(9))])
        );
        assert!(
            trace
                .events
                .iter()
                .all(|e| e.deleted.iter().all(|o| o.object_json.is_empty()))
        );

        let header = &trace.header;
        assert_eq!(time::millis(header.start_time.as_ref().unwrap()), start_ms);
        assert_eq!(time::millis(header.end_time.as_ref().unwrap()), at(100) + 1);
        assert_eq!(
            time::millis(header.create_time.as_ref().unwrap()),
            1_800_000_000_000
        );
        assert_eq!(header.created_by, "unit test");
        assert_eq!(
            header.origin,
            "alibaba cluster-trace-gpu-v2023 (nodes.csv, pods.csv)"
        );
        let config = header.tracer_config.as_ref().unwrap();
        assert!(config.cluster_recorded);
        assert_eq!(config.tracked_kinds[0].pod_template_paths, [""]);

        assert_eq!(
            trace.lifecycles.len(),
            2,
            "a never-scheduled pod has no lifecycle"
        );
        let a = &trace.lifecycles[0];
        assert_eq!(
            (
                a.owner_name.as_str(),
                a.owner_namespace.as_str(),
                a.created_ms,
                a.bound_ms,
                a.start_ms,
                a.end_ms
            ),
            ("a", "prod", at(0), at(3), at(3), at(100))
        );
        assert_eq!(a.outcome(), pb::PodOutcome::Deleted);
        assert_eq!(a.pod_spec_hash, hash::pod_spec_hash(&applied["a"].1));
        let b = &trace.lifecycles[1];
        assert_eq!((b.end_ms, b.outcome()), (0, pb::PodOutcome::Running));
        assert_eq!(recording.summary().never_scheduled, 1);
    }

    #[test]
    fn a_model_too_long_to_name_a_group_is_refused_naming_it() {
        let model = "V100-SXM2-32GB-EXTRA-LONG-NAME";
        let nodes = format!("{NODES}n-4,96000,786432,8,{model}\n");
        let read = read(
            Csv {
                name: "nodes.csv",
                text: &nodes,
            },
            Csv {
                name: "pods.csv",
                text: &pods(&[]),
            },
            GpuShares::Whole,
        );
        let Err(error) = read else {
            panic!("a 40-character group name was taken")
        };
        let message = error.to_string();
        assert!(
            message.contains(model) && message.contains("40 characters"),
            "{message}"
        );
    }

    #[test]
    fn nodes_are_grouped_by_shape_with_skeletons_and_recorded_ready() {
        let nodes = format!(
            "{NODES}n-4,96000,786432,8,G2\nn-5,96000,786432,8,G2\nn-6,96000,786432,8,g2\nn-7,8500,1000,0,\n"
        );
        let recording = recording(&nodes, &pods(&[]));
        let groups: Vec<(&str, u32)> = recording
            .groups
            .iter()
            .map(|group| (group.name.as_str(), group.nodes))
            .collect();
        assert_eq!(
            groups,
            [
                ("cpu-32c-256g", 1),
                ("cpu-8500m-1000mi", 1),
                // Memory tells two G2 shapes apart; case alone does not, so they are numbered.
                ("gpu-g2-8x-96c-384g", 2),
                ("gpu-g2-8x-96c-768g-1", 2),
                ("gpu-g2-8x-96c-768g-2", 1),
                ("gpu-v100m16-1x-8c", 1),
            ]
        );
        assert!(
            recording
                .groups
                .iter()
                .all(|g| names::is_dns_label(&g.name))
        );

        let gpu = &recording.groups[2];
        assert_eq!(
            gpu.skeleton_yaml(),
            "# Node skeleton of group gpu-g2-8x-96c-384g: 2 nodes of Alibaba's cluster-trace-gpu-v2023
# (96 CPU, 393216Mi memory, 8 G2 GPUs).
apiVersion: v1
kind: Node
metadata:
  labels:
    \"ksim.io/gpu-model\": \"G2\"
    \"ksim.io/gpu-type\": \"G2\"
    \"kubernetes.io/arch\": \"amd64\"
    \"kubernetes.io/os\": \"linux\"
    \"nvidia.com/gpu.product\": \"G2\"
spec:
  taints:
    - key: \"nvidia.com/gpu\"
      value: \"present\"
      effect: NoSchedule
status:
  capacity:
    \"cpu\": \"96\"
    \"memory\": \"393216Mi\"
    \"nvidia.com/gpu\": \"8\"
    \"pods\": \"110\"
  allocatable:
    \"cpu\": \"96\"
    \"memory\": \"393216Mi\"
    \"nvidia.com/gpu\": \"8\"
    \"pods\": \"110\"
"
        );
        let cpu = recording.groups[1].skeleton_yaml();
        assert!(
            !cpu.contains("taints") && !cpu.contains("nvidia.com"),
            "{cpu}"
        );
        assert!(cpu.contains("group cpu-8500m-1000mi: 1 node of"), "{cpu}");
        assert!(cpu.contains("\"cpu\": \"8500m\""), "{cpu}");

        let trace = convert(&recording, &Options::default());
        assert_eq!(trace.nodes.len(), 8);
        let node = trace.nodes.iter().find(|n| n.name == "n-1").unwrap();
        assert_eq!(node.group, "gpu-g2-8x-96c-384g");
        assert!(node.ready);
        assert_eq!((node.created_ms, node.deleted_ms), (DEFAULT_START_MS, 0));
        assert_eq!(node.labels["ksim.io/gpu-model"], "G2");
        assert_eq!(node.labels["ksim.io/node-group"], "gpu-g2-8x-96c-384g");
        assert_eq!(node.capacity["nvidia.com/gpu"], "8");
        assert_eq!(node.allocatable["cpu"], "96");
        let cpu_node = trace.nodes.iter().find(|n| n.name == "n-0").unwrap();
        assert!(!cpu_node.capacity.contains_key("nvidia.com/gpu"));
        assert!(!cpu_node.labels.contains_key("ksim.io/gpu-model"));
    }

    #[test]
    fn samples_count_pending_and_running_pods_at_each_change() {
        let recording = recording(
            NODES,
            &pods(&[
                "a,1000,1024,0,0,,LS,Running,0,10,0",
                "b,1000,1024,0,0,,LS,Running,5,20,7",
                "c,1000,1024,0,0,,LS,Pending,5,8,",
                // Created and scheduled as a is deleted: no change, no sample.
                "d,1000,1024,0,0,,LS,Running,10,,10",
            ]),
        );
        let trace = convert(&recording, &Options::default());
        let samples: Vec<(i64, u32, u32)> = trace
            .samples
            .iter()
            .map(|sample| {
                let counts = sample.pods.get("alibaba").cloned().unwrap_or_default();
                (
                    (sample.timestamp_ms - DEFAULT_START_MS) / 1000,
                    counts.pending,
                    counts.running,
                )
            })
            .collect();
        assert_eq!(
            samples,
            [(0, 0, 1), (5, 2, 1), (7, 1, 2), (8, 0, 2), (20, 0, 1)]
        );
        for sample in &trace.samples {
            assert_eq!(sample.ready_nodes["gpu-g2-8x-96c"], 2);
            assert_eq!(sample.ready_nodes["cpu-32c-256g"], 1);
        }
    }

    #[test]
    fn the_start_has_a_sample_when_nothing_happens_then() {
        let recording = recording(NODES, &pods(&["a,1000,1024,0,0,,LS,Pending,30,40,"]));
        let trace = convert(&recording, &Options::default());
        let times: Vec<i64> = trace.samples.iter().map(|s| s.timestamp_ms).collect();
        let at = |s: i64| DEFAULT_START_MS + s * 1000;
        assert_eq!(times, [at(0), at(30), at(40)]);
        assert!(trace.samples[0].pods.is_empty() && trace.samples[2].pods.is_empty());
    }

    #[test]
    fn many_pods_at_one_time_are_split_into_events_of_a_bounded_size() {
        let rows: Vec<String> = (0..2500)
            .map(|i| format!("p-{i},1000,1024,0,0,,LS,Running,0,1,0"))
            .collect();
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let trace = convert(&recording(NODES, &pods(&rows)), &Options::default());
        let sizes: Vec<(usize, usize)> = trace
            .events
            .iter()
            .map(|e| (e.applied.len(), e.deleted.len()))
            .collect();
        assert_eq!(
            sizes,
            [
                (1000, 0),
                (1000, 0),
                (500, 0),
                (0, 1000),
                (0, 1000),
                (0, 500)
            ]
        );
    }

    #[test]
    fn gpu_shares_refuse_names_the_pod_line() {
        let pods = pods(&[
            "whole,1000,1024,1,1000,,LS,Running,0,1,0",
            "share,1000,1024,1,250,,LS,Running,0,1,0",
        ]);
        let error = read(
            csv("nodes.csv", NODES),
            csv("pods.csv", &pods),
            GpuShares::Refuse,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("pods.csv:3: field gpu_milli = \"250\""),
            "{error}"
        );
        assert!(error.contains("--gpu-shares refuse"), "{error}");
    }

    #[test]
    fn a_bad_row_is_named_by_file_line_and_field() {
        let pod = |row: &str| error(NODES, &pods(&["ok,1000,1024,0,0,,LS,Running,0,1,0", row]));
        let cases = [
            (
                pod("p,1000,1024,0,0,,LS,Running,0,1"),
                "pods.csv:3: 10 fields, expected 11",
            ),
            (
                pod("p,lots,1024,0,0,,LS,Running,0,1,0"),
                "pods.csv:3: field cpu_milli = \"lots\": is not a whole number",
            ),
            (
                pod("p,1000,-5,0,0,,LS,Running,0,1,0"),
                "pods.csv:3: field memory_mib = \"-5\": is negative",
            ),
            (
                pod("p,1000,1024,1,,,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_milli = \"\": is empty",
            ),
            (
                pod("p,1000,1024,1,0,,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_milli = \"0\": is 0, but num_gpu is 1",
            ),
            (
                pod("p,1000,1024,2,500,,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_milli = \"500\": expected 1000 with num_gpu 2",
            ),
            (
                pod("p,1000,1024,0,300,,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_milli = \"300\": is a share of a GPU, but num_gpu is 0",
            ),
            (
                pod("p,1000,1024,1,1200,,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_milli = \"1200\": is more than 1000",
            ),
            (
                pod("p,1000,1024,0,0,T4,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_spec = \"T4\": names GPU models, but the pod asks for no GPU",
            ),
            (
                pod("p,1000,1024,1,1000,T4||A10,LS,Running,0,1,0"),
                "pods.csv:3: field gpu_spec = \"T4||A10\": model \"\" is not a label value",
            ),
            (
                pod("p,1000,1024,0,0,,,Running,0,1,0"),
                "pods.csv:3: field qos = \"\": is not a label value",
            ),
            (
                pod("p,1000,1024,0,0,,LS,Done,0,1,0"),
                "pods.csv:3: field pod_phase = \"Done\": is not a pod phase",
            ),
            (
                pod("p,1000,1024,0,0,,LS,Running,10,5,"),
                "pods.csv:3: field deletion_time = \"5\": is before creation_time 10",
            ),
            (
                pod("p,1000,1024,0,0,,LS,Running,10,20,5"),
                "pods.csv:3: field scheduled_time = \"5\": is before creation_time 10",
            ),
            (
                pod("p,1000,1024,0,0,,LS,Running,10,20,25"),
                "pods.csv:3: field scheduled_time = \"25\": is after deletion_time 20",
            ),
            (
                pod("p,1000,1024,0,0,,LS,Running,1.5,20,"),
                "pods.csv:3: field creation_time = \"1.5\": is not a whole number",
            ),
            (
                pod("ok,1000,1024,0,0,,LS,Running,0,1,0"),
                "pods.csv:3: field name = \"ok\": names the pod of line 2 again",
            ),
            (
                pod("Big_Name,1000,1024,0,0,,LS,Running,0,1,0"),
                "pods.csv:3: field name = \"Big_Name\": is not a Kubernetes object name",
            ),
            (pod(""), "pods.csv:3: 1 fields, expected 11"),
            (
                error(NODES, "name,cpu\n"),
                "pods.csv:1: the header is \"name,cpu\"",
            ),
            (error(NODES, ""), "pods.csv is empty"),
            (
                error(
                    "sn,cpu_milli,memory_mib,gpu,model\nn,8000,1024,2,\n",
                    &pods(&[]),
                ),
                "nodes.csv:2: field model = \"\": is empty, but the node has GPUs",
            ),
            (
                error(
                    "sn,cpu_milli,memory_mib,gpu,model\nn,8000,1024,0,T4\n",
                    &pods(&[]),
                ),
                "nodes.csv:2: field model = \"T4\": names a GPU model, but gpu is 0",
            ),
            (
                error(
                    "sn,cpu_milli,memory_mib,gpu,model\nn,0,1024,0,\n",
                    &pods(&[]),
                ),
                "nodes.csv:2: field cpu_milli = \"0\": is 0",
            ),
            (
                error(
                    "sn,cpu_milli,memory_mib,gpu,model\nn,8000,1024,x,\n",
                    &pods(&[]),
                ),
                "nodes.csv:2: field gpu = \"x\": is not a whole number",
            ),
            (
                error(
                    "sn,cpu_milli,memory_mib,gpu,model\nn,8000,1024,99999999999,A\n",
                    &pods(&[]),
                ),
                "nodes.csv:2: field gpu = \"99999999999\": is more than 4294967295",
            ),
            (
                error(
                    "sn,cpu_milli,memory_mib,gpu,model\nn,8000,1024,1,A 10\n",
                    &pods(&[]),
                ),
                "nodes.csv:2: field model = \"A 10\": is not a label value",
            ),
        ];
        for (error, expected) in cases {
            assert!(
                error.starts_with(expected),
                "{error:?} does not start with {expected:?}"
            );
        }
    }

    #[test]
    fn windows_line_ends_and_a_byte_order_mark_are_read() {
        let nodes = "\u{feff}sn,cpu_milli,memory_mib,gpu,model\r\nn,8000,1024,0,\r\n";
        let pods = format!("{PODS_HEADER}\r\np,1000,1024,0,0,,LS,Pending,0,,\r\n");
        let recording = recording(nodes, &pods);
        assert_eq!(recording.nodes[0].name, "n");
        assert_eq!(recording.pods[0].deleted_s, None);
    }

    #[test]
    fn the_options_are_checked() {
        let recording = recording(NODES, &pods(&["p,1000,1024,0,0,,LS,Running,0,1,0"]));
        let write = |options: Options| {
            recording
                .write(Vec::new(), &options)
                .unwrap_err()
                .to_string()
        };
        let namespace = Options {
            namespace: "Prod".to_owned(),
            ..Options::default()
        };
        assert!(write(namespace).starts_with("namespace \"Prod\" is not a DNS label"));
        let start = Options {
            start_ms: -1,
            ..Options::default()
        };
        assert!(write(start).starts_with("the start -1 ms is outside"));
        let late = Options {
            start_ms: time::MAX_MS,
            ..Options::default()
        };
        assert!(
            write(late)
                .starts_with("pods.csv:2: field deletion_time = \"1\": is past the end of 9999"),
        );
    }

    /// The shipped CSV pair (not in the repository: see docs/tracer.md).
    fn shipped() -> (String, String) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/third_party/alibaba-gpu-v2023");
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).unwrap_or_else(|error| {
                panic!(
                    "the Alibaba GPU trace v2023 is missing: cannot read {} ({error}); put \
                     cluster-trace-gpu-v2023/csv/{name} of github.com/alibaba/clusterdata there",
                    path.display()
                )
            })
        };
        (
            read("openb_node_list_all_node.csv"),
            read("openb_pod_list_default.csv"),
        )
    }

    #[test]
    fn the_shipped_trace_converts_whole() {
        let (nodes, pods) = shipped();
        let recording = read(
            csv("openb_node_list_all_node.csv", &nodes),
            csv("openb_pod_list_default.csv", &pods),
            GpuShares::Whole,
        )
        .unwrap();
        let summary = recording.summary();
        assert_eq!(
            (summary.pods, summary.nodes, summary.gpu_nodes, summary.gpus),
            (8152, 1523, 1213, 6212)
        );
        assert_eq!(
            (
                summary.whole_gpu_pods,
                summary.shared_gpu_pods,
                summary.cpu_pods
            ),
            (3986, 3078, 1088)
        );
        assert_eq!(summary.never_scheduled, 897);
        let trace = convert(&recording, &Options::default());
        assert_eq!(trace.nodes.len(), 1523);
        assert_eq!(trace.lifecycles.len(), 8152 - 897);
        let ready: u32 = trace.samples[0].ready_nodes.values().sum();
        assert_eq!(ready, 1523);
        let last = trace.samples.last().unwrap();
        assert!(
            last.pods.is_empty(),
            "every pod is deleted by the end: {last:?}"
        );

        let applied = applied(&trace);
        let deleted = deleted(&trace);
        assert_eq!(applied.len(), 8152);
        let lines: Vec<&str> = pods.lines().collect();
        for line in [2, 1000, 8153] {
            let fields: Vec<&str> = lines[line - 1].split(',').collect();
            let (created_ms, pod) = &applied[fields[0]];
            let requests = &pod["spec"]["containers"][0]["resources"]["requests"];
            assert_eq!(requests["cpu"], format!("{}m", fields[1]), "line {line}");
            assert_eq!(
                requests["memory"],
                format!("{}Mi", fields[2]),
                "line {line}"
            );
            let gpus = requests.get("nvidia.com/gpu").and_then(Value::as_str);
            assert_eq!(gpus, (fields[3] != "0").then_some(fields[3]), "line {line}");
            let milli: u32 = fields[4].parse().unwrap();
            let annotation = &pod["metadata"]["annotations"]["ksim.io/gpu-milli"];
            if fields[3] == "1" && milli < 1000 {
                assert_eq!(annotation, &json!(fields[4]), "line {line}");
            } else {
                assert!(annotation.is_null(), "line {line}");
            }
            let at = |s: &str| DEFAULT_START_MS + s.parse::<i64>().unwrap() * 1000;
            assert_eq!(*created_ms, at(fields[8]), "line {line}");
            assert_eq!(deleted[fields[0]], at(fields[9]), "line {line}");
        }
    }

    /// The converter's driver is the one ksim's DRA example skeleton publishes, whose
    /// DeviceClass the local environment's fixtures write: a converted trace's claims select
    /// the devices of either.
    #[test]
    fn the_gpu_driver_is_the_example_skeletons() {
        let yaml = include_str!("../../../deploy/vnode/examples/skeleton-p3-2xlarge-dra.yaml");
        let skeleton = ksim_nodes::skeleton::NodeSkeleton::from_yaml(yaml).unwrap();
        assert_eq!(skeleton.devices.unwrap().driver, GPU_DRIVER);
    }

    fn dra_recording(nodes: &str, pods: &str) -> Recording {
        read(
            csv("nodes.csv", nodes),
            csv("pods.csv", pods),
            GpuShares::Dra,
        )
        .unwrap()
    }

    /// Every skeleton of `recording`'s groups as ksim-nodes reads it, checked against its group:
    /// the Node without nvidia.com/gpu nor CA's GPU label, and for a GPU group the slice of one
    /// shareable device per GPU. Returns the GPU groups.
    fn check_dra_skeletons(recording: &Recording) -> usize {
        let mut gpu_groups = 0;
        for group in &recording.groups {
            let yaml = group.skeleton_yaml_for(GpuShares::Dra);
            let skeleton = ksim_nodes::skeleton::NodeSkeleton::from_yaml(&yaml)
                .unwrap_or_else(|error| panic!("{}: {error}\n{yaml}", group.name));
            assert!(!skeleton.capacity.contains_key(GPU_RESOURCE), "{yaml}");
            assert!(!skeleton.allocatable.contains_key(GPU_RESOURCE), "{yaml}");
            assert!(!skeleton.labels.contains_key(GPU_TYPE_LABEL), "{yaml}");
            let Some(model) = &group.shape.model else {
                assert_eq!(skeleton.devices, None, "{yaml}");
                assert!(!yaml.contains("---"), "a CPU group is one document: {yaml}");
                continue;
            };
            gpu_groups += 1;
            assert_eq!(&skeleton.labels[GPU_MODEL_LABEL], model);
            assert_eq!(&skeleton.labels[GPU_PRODUCT_LABEL], model);
            assert_eq!(skeleton.taints.len(), 1, "{yaml}");
            let devices = skeleton.devices.expect("a GPU group's slice");
            assert_eq!(devices.driver, GPU_DRIVER);
            assert!(devices.shares_devices());
            assert_eq!(devices.devices.len(), group.shape.gpus as usize, "{yaml}");
            for (index, device) in devices.devices.iter().enumerate() {
                assert_eq!(device.name, format!("gpu-{index}"));
                assert_eq!(device.allow_multiple_allocations, Some(true));
                let attributes = device.attributes.as_ref().unwrap();
                assert_eq!(attributes["model"].string.as_ref(), Some(model));
                let capacity = device.capacity.as_ref().unwrap();
                assert_eq!(capacity["share"].value.0, "1");
            }
        }
        gpu_groups
    }

    #[test]
    fn dra_pods_claim_their_gpus_from_templates_written_first() {
        let recording = dra_recording(
            NODES,
            &pods(&[
                "cpu,4000,8192,0,0,,BE,Succeeded,0,60,0",
                "two,12000,16384,2,1000,G2,LS,Running,0,60,0",
                "share,6000,12288,1,460,V100M16,LS,Running,5,60,5",
                "again,6000,12288,1,460,,LS,Running,6,60,6",
                "one,1500,100,1,1000,,Burstable,Failed,7,60,7",
            ]),
        );
        let options = Options::default();
        let trace = convert(&recording, &options);

        // The first event, at the start and before any pod: the DeviceClass, then exactly the
        // templates the pods use, in order.
        let first = &trace.events[0];
        assert_eq!(first.timestamp_ms, DEFAULT_START_MS);
        assert!(first.deleted.is_empty());
        let setup: Vec<(String, &str, &str)> = first
            .applied
            .iter()
            .map(|o| {
                let gvk = o.gvk.as_ref().unwrap();
                (
                    crate::gvk::display(gvk),
                    o.namespace.as_str(),
                    o.name.as_str(),
                )
            })
            .collect();
        let template = "resource.k8s.io/v1.ResourceClaimTemplate".to_owned();
        assert_eq!(
            setup,
            [
                (
                    "resource.k8s.io/v1.DeviceClass".to_owned(),
                    "",
                    "gpu.ksim.io"
                ),
                (template.clone(), "alibaba", "gpus-1"),
                (template.clone(), "alibaba", "gpus-2"),
                (template, "alibaba", "gpu-share-460m"),
            ]
        );
        let objects: Vec<Value> = first
            .applied
            .iter()
            .map(|o| serde_json::from_slice(&o.object_json).unwrap())
            .collect();
        let class: k8s_openapi::api::resource::v1::DeviceClass =
            serde_json::from_value(objects[0].clone()).unwrap();
        assert_eq!(class.metadata.name.as_deref(), Some("gpu.ksim.io"));
        let selectors = class.spec.selectors.unwrap();
        assert_eq!(
            selectors[0].cel.as_ref().unwrap().expression,
            "device.driver == 'gpu.ksim.io'"
        );
        let templates: Vec<k8s_openapi::api::resource::v1::ResourceClaimTemplate> = objects[1..]
            .iter()
            .map(|o| serde_json::from_value(o.clone()).unwrap())
            .collect();
        let exactly = |i: usize| {
            let template = &templates[i];
            assert_eq!(template.metadata.namespace.as_deref(), Some("alibaba"));
            let requests = template
                .spec
                .spec
                .devices
                .as_ref()
                .unwrap()
                .requests
                .clone();
            let requests = requests.unwrap();
            assert_eq!(requests.len(), 1);
            assert_eq!(requests[0].name, "gpu");
            requests[0].exactly.clone().unwrap()
        };
        let two = exactly(1);
        assert_eq!(
            (two.device_class_name.as_str(), two.count),
            ("gpu.ksim.io", Some(2))
        );
        assert_eq!(two.capacity, None, "whole GPUs take whole devices");
        let share = exactly(2);
        assert_eq!(share.device_class_name, "gpu.ksim.io");
        assert_eq!(share.count, None);
        let requests = share.capacity.unwrap().requests.unwrap();
        assert_eq!(requests["share"].0, "460m");
        assert_eq!(
            objects[3],
            json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": { "name": "gpu-share-460m", "namespace": "alibaba" },
                "spec": { "spec": { "devices": { "requests": [{ "name": "gpu", "exactly": {
                    "deviceClassName": "gpu.ksim.io",
                    "capacity": { "requests": { "share": "460m" } },
                } }] } } },
            })
        );

        // The pods: a claim from their template instead of nvidia.com/gpu.
        let pods: BTreeMap<String, (i64, Value)> = applied(&trace)
            .into_iter()
            .filter(|(_, (_, object))| object["kind"] == "Pod")
            .collect();
        assert_eq!(pods.len(), 5);
        assert!(
            trace.events[1..]
                .iter()
                .flat_map(|e| &e.applied)
                .all(|o| o.gvk.as_ref().unwrap().kind == "Pod")
        );
        let spec = |name: &str| pods[name].1["spec"].clone();
        let resources = |name: &str| spec(name)["containers"][0]["resources"].clone();
        assert_eq!(
            spec("share")["resourceClaims"],
            json!([{ "name": "gpu", "resourceClaimTemplateName": "gpu-share-460m" }])
        );
        assert_eq!(
            resources("share"),
            json!({
                "requests": { "cpu": "6000m", "memory": "12288Mi" },
                "claims": [{ "name": "gpu" }],
            })
        );
        assert_eq!(pods["share"].1["metadata"].get("annotations"), None);
        assert_eq!(
            spec("share")["tolerations"],
            json!([{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }])
        );
        let models = &spec("share")["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0];
        assert_eq!(models["key"], "ksim.io/gpu-model");
        assert_eq!(models["values"], json!(["V100M16"]));
        assert_eq!(
            spec("again")["resourceClaims"][0]["resourceClaimTemplateName"],
            "gpu-share-460m"
        );
        assert_eq!(
            spec("two")["resourceClaims"],
            json!([{ "name": "gpu", "resourceClaimTemplateName": "gpus-2" }])
        );
        assert_eq!(resources("two")["claims"], json!([{ "name": "gpu" }]));
        assert_eq!(resources("two").get("limits"), None);
        assert_eq!(
            spec("one")["resourceClaims"][0]["resourceClaimTemplateName"],
            "gpus-1"
        );
        assert_eq!(spec("cpu").get("resourceClaims"), None);
        assert_eq!(spec("cpu").get("tolerations"), None);
        assert_eq!(
            resources("cpu"),
            json!({ "requests": { "cpu": "4000m", "memory": "8192Mi" } })
        );
        // Each pod deserializes as Kubernetes reads it.
        for (name, (_, pod)) in &pods {
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod.clone())
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            let claims = pod.spec.unwrap().resource_claims.unwrap_or_default();
            assert_eq!(claims.len(), usize::from(name != "cpu"), "{name}");
        }
        // The lifecycles hash the pods as applied, claims and all.
        let share_lifecycle = trace
            .lifecycles
            .iter()
            .find(|l| l.pod_name == "share")
            .unwrap();
        assert_eq!(
            share_lifecycle.pod_spec_hash,
            hash::pod_spec_hash(&pods["share"].1)
        );

        let kinds: Vec<String> = trace
            .header
            .tracer_config
            .as_ref()
            .unwrap()
            .tracked_kinds
            .iter()
            .map(|k| crate::gvk::display(k.gvk.as_ref().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            [
                "v1.Pod",
                "resource.k8s.io/v1.DeviceClass",
                "resource.k8s.io/v1.ResourceClaimTemplate"
            ]
        );
        let summary = recording.summary();
        assert_eq!(summary.gpu_shares, GpuShares::Dra);
        assert_eq!(
            (
                summary.claim_pods,
                summary.claim_templates,
                summary.whole_gpu_pods,
                summary.shared_gpu_pods,
                summary.cpu_pods
            ),
            (4, 3, 2, 2, 1)
        );
        // The recorded nodes stay production's, nvidia.com/gpu and all.
        let node = trace.nodes.iter().find(|n| n.name == "n-1").unwrap();
        assert_eq!(node.capacity["nvidia.com/gpu"], "8");
    }

    #[test]
    fn the_other_modes_write_no_dra_objects() {
        let rows = pods(&["share,6000,12288,1,460,,LS,Running,0,60,0"]);
        let trace = convert(&recording(NODES, &rows), &Options::default());
        assert_eq!(trace.events.len(), 2);
        let kinds: Vec<&str> = trace
            .events
            .iter()
            .flat_map(|e| e.applied.iter().chain(&e.deleted))
            .map(|o| o.gvk.as_ref().unwrap().kind.as_str())
            .collect();
        assert_eq!(kinds, ["Pod", "Pod"]);
        let summary = recording(NODES, &rows).summary();
        assert_eq!((summary.claim_pods, summary.claim_templates), (0, 0));
        assert_eq!(summary.gpu_shares, GpuShares::Whole);
        // Without GPU pods, dra mode starts with the DeviceClass alone.
        let cpu = dra_recording(NODES, &pods(&["cpu,1000,1024,0,0,,LS,Running,3,60,3"]));
        let trace = convert(&cpu, &Options::default());
        assert_eq!(trace.events[0].applied.len(), 1);
        assert_eq!(trace.events[0].applied[0].name, "gpu.ksim.io");
        assert_eq!(cpu.summary().claim_templates, 0);
    }

    #[test]
    fn the_limits_copied_from_ksim_nodes_are_its_own() {
        assert_eq!(
            MAX_GROUP_NAME_LEN,
            ksim_nodes::limits::MAX_POOL_GROUP_NAME_LEN
        );
        assert_eq!(GROUP_LABEL, ksim_nodes::labels::GROUP_LABEL);
        assert_eq!(
            usize::try_from(MAX_DEVICES_PER_SLICE).ok(),
            Some(ksim_nodes::devices::MAX_DEVICES)
        );
    }

    #[test]
    fn dra_skeletons_give_the_gpus_as_a_resource_slice_ksim_nodes_reads() {
        let nodes = format!("{NODES}n-4,8500,1000,0,\n");
        let recording = dra_recording(&nodes, &pods(&[]));
        assert_eq!(check_dra_skeletons(&recording), 2);
        let v100 = recording
            .groups
            .iter()
            .find(|g| g.name == "gpu-v100m16-1x-8c")
            .unwrap();
        assert_eq!(
            v100.skeleton_yaml_for(GpuShares::Dra),
            "# Node skeleton of group gpu-v100m16-1x-8c: 1 node of Alibaba's cluster-trace-gpu-v2023
# (8 CPU, 32768Mi memory, 1 V100M16 GPUs by DRA: the ResourceSlice after the Node).
apiVersion: v1
kind: Node
metadata:
  labels:
    \"ksim.io/gpu-model\": \"V100M16\"
    \"kubernetes.io/arch\": \"amd64\"
    \"kubernetes.io/os\": \"linux\"
    \"nvidia.com/gpu.product\": \"V100M16\"
spec:
  taints:
    - key: \"nvidia.com/gpu\"
      value: \"present\"
      effect: NoSchedule
status:
  capacity:
    \"cpu\": \"8\"
    \"memory\": \"32768Mi\"
    \"pods\": \"110\"
  allocatable:
    \"cpu\": \"8\"
    \"memory\": \"32768Mi\"
    \"pods\": \"110\"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
spec:
  driver: \"gpu.ksim.io\"
  pool:
    name: \"gpu-v100m16-1x-8c\"
    resourceSliceCount: 1
  devices:
    - name: \"gpu-0\"
      allowMultipleAllocations: true
      attributes:
        \"model\":
          string: \"V100M16\"
      capacity:
        \"share\":
          value: \"1\"
"
        );
        // The other modes' skeletons stay one document, read the same way.
        for group in &recording.groups {
            let yaml = group.skeleton_yaml();
            assert_eq!(yaml, group.skeleton_yaml_for(GpuShares::Refuse));
            let skeleton = ksim_nodes::skeleton::NodeSkeleton::from_yaml(&yaml).unwrap();
            assert_eq!(skeleton.devices, None);
            let gpus = skeleton.capacity.get(GPU_RESOURCE).map(|q| q.0.clone());
            assert_eq!(
                gpus,
                group
                    .shape
                    .model
                    .as_ref()
                    .map(|_| group.shape.gpus.to_string())
            );
        }
    }

    #[test]
    fn dra_refuses_a_node_with_more_gpus_than_one_slice_holds() {
        let nodes = format!("{NODES}big,96000,393216,129,G2\n");
        let error = read(
            csv("nodes.csv", &nodes),
            csv("pods.csv", &pods(&[])),
            GpuShares::Dra,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("nodes.csv:6: field gpu = \"129\": is more than the 128 devices"),
            "{error}"
        );
        // 128 is one slice; the other modes take any count.
        let nodes = format!("{NODES}big,96000,393216,128,G2\n");
        check_dra_skeletons(&dra_recording(&nodes, &pods(&[])));
        let nodes = format!("{NODES}big,96000,393216,129,G2\n");
        recording(&nodes, &pods(&[]));
    }

    #[test]
    fn the_shipped_trace_converts_with_dra() {
        let (nodes, pods) = shipped();
        let recording = read(
            csv("openb_node_list_all_node.csv", &nodes),
            csv("openb_pod_list_default.csv", &pods),
            GpuShares::Dra,
        )
        .unwrap();
        let summary = recording.summary();
        let trace = convert(&recording, &Options::default());
        let first = &trace.events[0];
        let gpu_groups = check_dra_skeletons(&recording);
        eprintln!(
            "shipped pair, --gpu-shares dra: {} pods claim GPUs, {} ResourceClaimTemplates \
             ({} objects in the first event), {} of {} node groups with GPUs, {} events",
            summary.claim_pods,
            summary.claim_templates,
            first.applied.len(),
            gpu_groups,
            summary.groups,
            trace.events.len()
        );
        // Every pod asking for GPUs: 8,152 less the 1,088 without.
        assert_eq!((summary.claim_pods, summary.claim_templates), (7064, 24));
        assert_eq!(first.applied.len(), 1 + 24);
        assert!(first.applied[1..].iter().all(|o| o.namespace == "alibaba"));
        let used: std::collections::BTreeSet<String> = applied(&trace)
            .values()
            .filter_map(|(_, object)| {
                object["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        let written: std::collections::BTreeSet<String> =
            first.applied[1..].iter().map(|o| o.name.clone()).collect();
        assert_eq!(used, written, "exactly the templates used");
        let pods_applied = trace
            .events
            .iter()
            .flat_map(|e| &e.applied)
            .filter(|o| o.gvk.as_ref().unwrap().kind == "Pod")
            .count();
        assert_eq!(pods_applied, 8152);
        assert!(
            !trace
                .events
                .iter()
                .flat_map(|e| &e.applied)
                .any(|o| String::from_utf8_lossy(&o.object_json).contains("nvidia.com/gpu\":\""))
        );
        assert_eq!((gpu_groups, summary.groups), (15, 27));
    }
}
