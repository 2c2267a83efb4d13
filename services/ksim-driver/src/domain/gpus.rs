//! GPUs on the simulation's nodes, as the report counts them (docs/replaying.md, "GPUs"): per
//! model the GPUs the nodes can allocate (`nvidia.com/gpu`), those the pods bound there request,
//! and the idle ones no pending GPU pod could use (fragmentation). A pod could use a node when
//! the node's free GPUs, CPU and memory hold its requests and its node selector and required
//! node affinity admit the node's labels; taints, spreading and the rest of the scheduler's
//! filters are left out (GPU pods tolerate GPU nodes' taints).

use std::collections::BTreeMap;

use super::report::GpuUsage;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};

/// The extended resource NVIDIA's device plugin advertises whole GPUs as.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Labels a node's GPU model is read from, first found first: GPU feature discovery's, then
/// the one `ksim trace convert --from alibaba-gpu-v2023` and ksim's examples write.
const MODEL_LABELS: &[&str] = &[
    "nvidia.com/gpu.product",
    "ksim.io/gpu-model",
    "ksim.io/gpu-type",
];

/// Whether a node's `labels` name a GPU model.
pub fn names_a_model(labels: &BTreeMap<String, String>) -> bool {
    MODEL_LABELS.iter().any(|label| labels.contains_key(*label))
}

/// A node's model when it has none of [`MODEL_LABELS`].
pub const UNKNOWN_MODEL: &str = "unknown";

/// The GPU model of a node with `labels`.
pub fn model(labels: &BTreeMap<String, String>) -> String {
    MODEL_LABELS
        .iter()
        .find_map(|label| labels.get(*label))
        .cloned()
        .unwrap_or_else(|| UNKNOWN_MODEL.to_owned())
}

/// CPU in millicores, memory in bytes, and whole GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub gpus: u64,
}

impl Amounts {
    fn holds(&self, asked: &Amounts) -> bool {
        self.cpu_millis >= asked.cpu_millis
            && self.memory_bytes >= asked.memory_bytes
            && self.gpus >= asked.gpus
    }
}

/// Where a pod may go: its node selector and its required node affinity's terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    selector: BTreeMap<String, String>,
    /// Any one term admits a node (each term: all its expressions); none: every node.
    terms: Vec<NodeSelectorTerm>,
}

impl Placement {
    pub fn of(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        Self {
            selector: spec
                .and_then(|spec| spec.node_selector.clone())
                .unwrap_or_default(),
            terms: spec
                .and_then(|spec| spec.affinity.as_ref())
                .and_then(|affinity| affinity.node_affinity.as_ref())
                .and_then(|affinity| {
                    affinity
                        .required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|required| required.node_selector_terms.clone())
                .unwrap_or_default(),
        }
    }

    /// Whether a node with `labels` is one the pod may go to.
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && (self.terms.is_empty()
                || self.terms.iter().any(|term| {
                    term.match_expressions
                        .iter()
                        .flatten()
                        .all(|requirement| satisfies(requirement, labels))
                }))
    }
}

fn satisfies(requirement: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&requirement.key);
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |text: &str| text.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|value| values.contains(value)),
        "NotIn" => value.is_none_or(|value| !values.contains(value)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|value| number(value)),
                values.first().and_then(|bound| number(bound)),
            ) else {
                return false;
            };
            if requirement.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// A node's DRA device (from its ResourceSlice): its capacity, and what the claims allocated
/// to it hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Device {
    pub capacity: BTreeMap<String, f64>,
    /// The capacity the claims sharing it consumed.
    pub consumed: BTreeMap<String, f64>,
    /// Claims allocated to it.
    pub holders: u32,
    /// Whether a claim holds it whole (one that asked no capacity).
    pub whole: bool,
}

impl Device {
    /// What a claim allocated to it holds: `consumed` capacity, or all of it (`None`).
    pub fn hold(&mut self, consumed: Option<&BTreeMap<String, f64>>) {
        self.holders += 1;
        match consumed {
            Some(consumed) if !consumed.is_empty() => {
                for (name, amount) in consumed {
                    *self.consumed.entry(name.clone()).or_default() += amount;
                }
            }
            _ => self.whole = true,
        }
    }

    fn takes(&self, ask: &DeviceAsk) -> bool {
        if ask.capacity.is_empty() {
            return self.holders == 0;
        }
        !self.whole
            && ask.capacity.iter().all(|(name, amount)| {
                let left = self.capacity.get(name).copied().unwrap_or(0.0)
                    - self.consumed.get(name).copied().unwrap_or(0.0);
                left >= *amount
            })
    }
}

/// What one request of a pod's claim asks: `count` whole devices, or `capacity` of one; or,
/// `all` (allocation mode `All`), every device of a node, none held (ksim's slices publish a
/// node's GPUs alone, so every device is one the request matches).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceAsk {
    pub count: u64,
    pub all: bool,
    pub capacity: BTreeMap<String, f64>,
}

/// A node with GPUs: its model and labels, what it can allocate and what its pods request,
/// and its DRA devices.
#[derive(Debug)]
pub struct GpuNode<'a> {
    pub model: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub allocatable: Amounts,
    pub requested: Amounts,
    pub devices: &'a [Device],
}

impl GpuNode<'_> {
    /// Whether the node's DRA devices hold each of `asks` (each on its own: a pod's several
    /// asks on one node are rare enough to leave their sum out).
    fn takes(&self, asks: &[DeviceAsk]) -> bool {
        asks.iter().all(|ask| {
            if ask.all {
                !self.devices.is_empty() && self.devices.iter().all(|d| d.holders == 0)
            } else if ask.capacity.is_empty() {
                let free = self.devices.iter().filter(|d| d.holders == 0).count() as u64;
                free >= ask.count.max(1)
            } else {
                self.devices.iter().any(|device| device.takes(ask))
            }
        })
    }
}

/// A GPU pod Pending and unbound: what it asks (`nvidia.com/gpu`, DRA devices) and where it
/// may go.
#[derive(Debug)]
pub struct PendingGpuPod<'a> {
    pub requests: Amounts,
    pub asks: &'a [DeviceAsk],
    pub placement: &'a Placement,
}

/// Per model, in model order: the nodes, their allocatable and allocated GPUs, and their idle
/// GPUs on nodes none of `pending` could go to (none fragmented when nothing is pending). A
/// DRA device counts as one GPU, allocated while any claim holds it, idle while none does.
pub fn usage(nodes: &[GpuNode], pending: &[PendingGpuPod]) -> Vec<GpuUsage> {
    let mut models: BTreeMap<&str, GpuUsage> = BTreeMap::new();
    for node in nodes {
        let usage = models.entry(node.model).or_insert_with(|| GpuUsage {
            model: node.model.to_owned(),
            ..GpuUsage::default()
        });
        let held = node.devices.iter().filter(|d| d.holders > 0).count() as u64;
        usage.nodes += 1;
        usage.allocatable += node.allocatable.gpus + node.devices.len() as u64;
        usage.allocated += node.requested.gpus.min(node.allocatable.gpus) + held;
        let free = Amounts {
            cpu_millis: node
                .allocatable
                .cpu_millis
                .saturating_sub(node.requested.cpu_millis),
            memory_bytes: node
                .allocatable
                .memory_bytes
                .saturating_sub(node.requested.memory_bytes),
            gpus: node.allocatable.gpus.saturating_sub(node.requested.gpus),
        };
        let usable = pending.iter().any(|pod| {
            free.holds(&pod.requests) && node.takes(pod.asks) && pod.placement.admits(node.labels)
        });
        let idle = free.gpus + node.devices.len() as u64 - held;
        if idle > 0 && !pending.is_empty() && !usable {
            usage.fragmented += idle;
        }
    }
    models.into_values().collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(model: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("ksim.io/gpu-model".to_owned(), model.to_owned())])
    }

    /// A node's 64 GiB, or what pods on it or waiting ask: 1 GiB.
    fn amounts(cpu_millis: u64, gpus: u64) -> Amounts {
        Amounts {
            cpu_millis,
            memory_bytes: 64 << 30,
            gpus,
        }
    }

    fn asked(cpu_millis: u64, gpus: u64) -> Amounts {
        Amounts {
            memory_bytes: 1 << 30,
            ..amounts(cpu_millis, gpus)
        }
    }

    fn placement(affinity: serde_json::Value) -> Placement {
        let pod: Pod = serde_json::from_value(json!({
            "spec": {"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}
            }}}
        }))
        .unwrap();
        Placement::of(&pod)
    }

    #[test]
    fn the_model_is_read_from_gpu_feature_discoverys_label_first() {
        let mut labels = labels("V100M16");
        assert_eq!(model(&labels), "V100M16");
        labels.insert("nvidia.com/gpu.product".to_owned(), "Tesla-V100".to_owned());
        assert_eq!(model(&labels), "Tesla-V100");
        assert_eq!(model(&BTreeMap::new()), UNKNOWN_MODEL);
    }

    #[test]
    fn required_affinity_admits_by_its_terms() {
        let v100 = labels("V100");
        let a100 = labels("A100");
        let one_of = placement(json!([{"matchExpressions": [
            {"key": "ksim.io/gpu-model", "operator": "In", "values": ["V100", "P100"]}]}]));
        assert!(one_of.admits(&v100) && !one_of.admits(&a100));
        let not = placement(json!([{"matchExpressions": [
            {"key": "ksim.io/gpu-model", "operator": "NotIn", "values": ["V100"]}]}]));
        assert!(!not.admits(&v100) && not.admits(&a100));
        let either = placement(json!([
            {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "ksim.io/gpu-model", "operator": "In", "values": ["A100"]}]}]));
        assert!(either.admits(&a100) && !either.admits(&v100));
        assert!(Placement::default().admits(&v100));
    }

    #[test]
    fn idle_gpus_no_pending_pod_could_use_are_fragmented() {
        let (v100, a100) = (labels("V100"), labels("A100"));
        let anywhere = Placement::default();
        let on_a100 = placement(json!([{"matchExpressions": [
            {"key": "ksim.io/gpu-model", "operator": "In", "values": ["A100"]}]}]));
        let nodes = [
            // 8 GPUs, 5 taken: 3 idle, room for a 2-GPU pod.
            GpuNode {
                model: "V100",
                labels: &v100,
                allocatable: amounts(32_000, 8),
                requested: asked(4_000, 5),
                devices: &[],
            },
            // 1 idle GPU, but no CPU left: nobody fits.
            GpuNode {
                model: "V100",
                labels: &v100,
                allocatable: amounts(8_000, 2),
                requested: asked(8_000, 1),
                devices: &[],
            },
            // 4 idle A100s.
            GpuNode {
                model: "A100",
                labels: &a100,
                allocatable: amounts(32_000, 4),
                requested: asked(0, 0),
                devices: &[],
            },
        ];
        let two_anywhere = PendingGpuPod {
            requests: asked(1_000, 2),
            asks: &[],
            placement: &anywhere,
        };
        let usage = usage(&nodes, &[two_anywhere]);
        assert_eq!(
            usage
                .iter()
                .map(|u| (
                    u.model.as_str(),
                    u.nodes,
                    u.allocatable,
                    u.allocated,
                    u.fragmented
                ))
                .collect::<Vec<_>>(),
            [("A100", 1, 4, 0, 0), ("V100", 2, 10, 6, 1)]
        );
        // A pod that must have A100s: the V100s' idle GPUs are of no use to it.
        let a100_only = PendingGpuPod {
            requests: asked(1_000, 1),
            asks: &[],
            placement: &on_a100,
        };
        let usage = super::usage(&nodes, &[a100_only]);
        assert_eq!((usage[0].fragmented, usage[1].fragmented), (0, 4));
        // Nothing pending: nothing fragmented.
        let usage = super::usage(&nodes, &[]);
        assert!(usage.iter().all(|u| u.fragmented == 0));
    }

    #[test]
    fn dra_devices_count_held_while_claimed_and_shares_fit_what_is_left() {
        let labels = labels("V100");
        let share = |amount: f64| BTreeMap::from([("share".to_owned(), amount)]);
        let device = || Device {
            capacity: share(1.0),
            ..Device::default()
        };
        // One device shared by 0.46 and 0.5, one held whole, one free.
        let mut devices = vec![device(), device(), device()];
        devices[0].hold(Some(&share(0.46)));
        devices[0].hold(Some(&share(0.5)));
        devices[1].hold(None);
        let node = |devices| GpuNode {
            model: "V100",
            labels: &labels,
            allocatable: amounts(32_000, 0),
            requested: asked(0, 0),
            devices,
        };
        let anywhere = Placement::default();
        let pending = |asks| PendingGpuPod {
            requests: asked(1_000, 0),
            asks,
            placement: &anywhere,
        };
        let two_whole = [DeviceAsk {
            count: 2,
            ..DeviceAsk::default()
        }];
        let u = usage(&[node(&devices)], &[pending(&two_whole)]);
        assert_eq!(
            (u[0].allocatable, u[0].allocated, u[0].fragmented),
            (3, 2, 1)
        );
        // A 0.3 share fits the free device: nothing fragmented; the shared one has 0.04 left.
        let small = [DeviceAsk {
            count: 1,
            capacity: share(0.3),
            ..DeviceAsk::default()
        }];
        assert_eq!(
            usage(&[node(&devices)], &[pending(&small)])[0].fragmented,
            0
        );
        assert!(devices[0].takes(&DeviceAsk {
            count: 1,
            capacity: share(0.04),
            ..DeviceAsk::default()
        }));
        assert!(!devices[0].takes(&small[0]));
        assert!(!devices[1].takes(&small[0]));
        // Allocation mode All: the whole node, so only a node none of whose devices is held;
        // one free device is then fragmented for it, and on an idle node none is.
        let all = [DeviceAsk {
            all: true,
            ..DeviceAsk::default()
        }];
        assert_eq!(usage(&[node(&devices)], &[pending(&all)])[0].fragmented, 1);
        let idle = vec![device(), device()];
        assert_eq!(usage(&[node(&idle)], &[pending(&all)])[0].fragmented, 0);
        assert!(!node(&Vec::new()).takes(&all));
    }
}
