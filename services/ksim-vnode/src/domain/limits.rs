//! Limits as a kubelet and the kernel enforce them (issue 36), applied to the usage a pod is
//! given (`domain::usage`):
//!
//! - **CPU above the container's limit is throttled**: the container gets its limit (the CFS
//!   quota), and what it wanted beyond it is counted as throttled CPU.
//! - **Memory above the container's limit is an OOM kill**: the kernel kills the container,
//!   which restarts as the pod's restart policy says (`domain::pod::oom_killed_status`).
//! - **A node short of memory evicts** (the kubelet's hard threshold `memory.available<100Mi`):
//!   pods are ranked as the kubelet ranks them (usage above requests first, then lower
//!   priority, then usage above requests, largest first) and evicted until the node is above
//!   the threshold again ([`node_pressure`]; the pool applies it to each node whose pods' usage
//!   a request changed).
//!
//! Not modelled: soft thresholds and grace periods, the node's own use of memory (system and
//! kube reserved are not counted against the capacity), the node's MemoryPressure condition,
//! the container's restart backoff for OOM kills (the pool restarts at once), limits of init
//! and sidecar containers, swap, ephemeral storage and PID pressure.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Container, Pod},
    apimachinery::pkg::api::resource::Quantity,
};
use ksim_nodes::skeleton::quantity_value;

use super::usage::ContainerUsage;

/// The kubelet's default hard eviction threshold for memory: `memory.available<100Mi`.
pub const EVICTION_THRESHOLD_BYTES: u64 = 100 << 20;

/// A container's limits; `None` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerLimits {
    pub name: String,
    pub cpu_nanocores: Option<u64>,
    pub memory_bytes: Option<u64>,
}

/// `spec.restartPolicy`: what becomes of a container that exits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RestartPolicy {
    #[default]
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The apiserver defaults a missing policy to Always and refuses unknown ones.
    fn parse(policy: Option<&str>) -> Self {
        match policy {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }

    /// Whether a container killed by the kernel (exit code 137, a failure) starts again.
    pub fn restarts_after_oom(self) -> bool {
        self != RestartPolicy::Never
    }
}

/// What enforcing limits needs of a pod, kept by the index for each bound pod: a few words,
/// not the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLimits {
    /// The regular containers with a CPU or memory limit; any other has none.
    pub containers: Vec<ContainerLimits>,
    pub restart_policy: RestartPolicy,
    /// `spec.priority`, for ranking evictions.
    pub priority: i32,
    /// The containers' memory requests summed, bytes, for ranking evictions.
    pub memory_requested: u64,
}

impl PodLimits {
    /// The pod's limits; `None` when it has nothing to enforce or rank (the usual pod with no
    /// limits, requests or priority), so such pods cost the index nothing.
    pub fn of(pod: &Pod) -> Option<Box<PodLimits>> {
        let spec = pod.spec.as_ref()?;
        let limits = PodLimits {
            containers: spec
                .containers
                .iter()
                .filter_map(container_limits)
                .collect(),
            restart_policy: RestartPolicy::parse(spec.restart_policy.as_deref()),
            priority: spec.priority.unwrap_or(0),
            memory_requested: spec
                .containers
                .iter()
                .filter_map(|c| quantity(requests(c), "memory", 1.0))
                .fold(0, u64::saturating_add),
        };
        (limits != PodLimits::default()).then(|| Box::new(limits))
    }
}

fn requests(container: &Container) -> Option<&BTreeMap<String, Quantity>> {
    container.resources.as_ref()?.requests.as_ref()
}

fn container_limits(container: &Container) -> Option<ContainerLimits> {
    let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
    let cpu_nanocores = quantity(limits, "cpu", 1e9);
    let memory_bytes = quantity(limits, "memory", 1.0);
    (cpu_nanocores.is_some() || memory_bytes.is_some()).then(|| ContainerLimits {
        name: container.name.clone(),
        cpu_nanocores,
        memory_bytes,
    })
}

/// A quantity of `resources` in `unit`s (nanocores, bytes); one that is missing, unreadable or
/// not positive counts as none (the apiserver refuses those anyway).
fn quantity(resources: Option<&BTreeMap<String, Quantity>>, name: &str, unit: f64) -> Option<u64> {
    let value = quantity_value(&resources?.get(name)?.0)? * unit;
    // `as` saturates at u64::MAX, which is no limit in practice.
    (value.is_finite() && value >= 1.0).then(|| value.round() as u64)
}

/// What the limits make of a pod's usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforced {
    /// The usage as measured: CPU capped at each container's limit.
    pub usage: Vec<ContainerUsage>,
    /// Per throttled container, the CPU it wanted beyond its limit, nanocores.
    pub throttled: Vec<(String, u64)>,
    /// Containers whose memory went over their limit: OOM-killed.
    pub oom_killed: Vec<String>,
}

/// Applies the containers' limits to what they want to use.
pub fn enforce(wanted: Vec<ContainerUsage>, limits: &[ContainerLimits]) -> Enforced {
    let mut enforced = Enforced::default();
    for mut container in wanted {
        let limit = limits.iter().find(|l| l.name == container.name);
        if let Some(max) = limit.and_then(|l| l.cpu_nanocores)
            && container.cpu_nanocores > max
        {
            enforced
                .throttled
                .push((container.name.clone(), container.cpu_nanocores - max));
            container.cpu_nanocores = max;
        }
        if limit
            .and_then(|l| l.memory_bytes)
            .is_some_and(|max| container.memory_bytes > max)
        {
            enforced.oom_killed.push(container.name.clone());
        }
        enforced.usage.push(container);
    }
    enforced
}

/// A pod on a node, as memory-pressure eviction ranks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMemory<K> {
    pub key: K,
    /// Working set, bytes.
    pub used: u64,
    /// Memory requests, bytes.
    pub requested: u64,
    pub priority: i32,
}

/// The pods a kubelet would evict from a node whose memory is `capacity` bytes, so that what
/// is left stays above [`EVICTION_THRESHOLD_BYTES`] available, in eviction order.
pub fn pressure_evictions<K: Clone>(capacity: u64, pods: &[PodMemory<K>]) -> Vec<K> {
    // What the pods may use and leave the threshold available.
    let allowed = capacity.saturating_sub(EVICTION_THRESHOLD_BYTES);
    let mut used: u64 = pods.iter().map(|pod| pod.used).fold(0, u64::saturating_add);
    if used <= allowed {
        return Vec::new();
    }
    let mut ranked: Vec<&PodMemory<K>> = pods.iter().collect();
    let excess = |pod: &PodMemory<K>| pod.used.saturating_sub(pod.requested);
    ranked.sort_by(|a, b| {
        let over = |pod: &PodMemory<K>| pod.used > pod.requested;
        over(b)
            .cmp(&over(a))
            .then(a.priority.cmp(&b.priority))
            .then(excess(b).cmp(&excess(a)))
    });
    let mut evicted = Vec::new();
    for pod in ranked {
        if used <= allowed {
            break;
        }
        used = used.saturating_sub(pod.used);
        evicted.push(pod.key.clone());
    }
    evicted
}

/// A node short of memory, as its kubelet's eviction manager sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePressure<K> {
    /// Memory available before the evictions: capacity minus the pods' working sets, bytes;
    /// negative when usage was set above the capacity.
    pub available: i64,
    /// The pods to evict, in eviction order.
    pub evicted: Vec<K>,
}

/// The pressure on a node whose memory is `capacity` bytes and whose running pods use what
/// `pods` say; `None` while at least [`EVICTION_THRESHOLD_BYTES`] stay available.
pub fn node_pressure<K: Clone>(capacity: u64, pods: &[PodMemory<K>]) -> Option<NodePressure<K>> {
    let evicted = pressure_evictions(capacity, pods);
    if evicted.is_empty() {
        return None;
    }
    let used: u64 = pods.iter().map(|pod| pod.used).fold(0, u64::saturating_add);
    // Both fit in i128; the clamp only matters for absurd figures.
    let available =
        (i128::from(capacity) - i128::from(used)).clamp(i64::MIN.into(), i64::MAX.into());
    Some(NodePressure {
        available: available as i64,
        evicted,
    })
}

/// The message a kubelet writes on a pod it evicted for memory pressure (its `status.message`
/// and the DisruptionTarget condition's): the threshold and what was available, in Ki.
pub fn eviction_message(available: i64) -> String {
    format!(
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: {}Ki.",
        available.div_euclid(1024)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: u64 = 1 << 20;

    fn wanted(name: &str, millicores: u64, mebibytes: u64) -> ContainerUsage {
        ContainerUsage {
            name: name.to_owned(),
            cpu_nanocores: millicores * 1_000_000,
            memory_bytes: mebibytes * MI,
        }
    }

    fn limits(name: &str, millicores: Option<u64>, mebibytes: Option<u64>) -> ContainerLimits {
        ContainerLimits {
            name: name.to_owned(),
            cpu_nanocores: millicores.map(|m| m * 1_000_000),
            memory_bytes: mebibytes.map(|m| m * MI),
        }
    }

    #[test]
    fn cpu_over_the_limit_is_throttled_to_it_and_memory_over_it_is_an_oom_kill() {
        let enforced = enforce(
            vec![
                wanted("app", 1_500, 600),
                wanted("log", 50, 10),
                wanted("free", 9_000, 9_000),
            ],
            &[
                limits("app", Some(1_000), Some(512)),
                limits("log", Some(100), Some(64)),
            ],
        );
        assert_eq!(
            enforced.usage,
            [
                wanted("app", 1_000, 600),
                wanted("log", 50, 10),
                wanted("free", 9_000, 9_000)
            ]
        );
        assert_eq!(enforced.throttled, [("app".to_owned(), 500_000_000)]);
        assert_eq!(enforced.oom_killed, ["app"]);
    }

    #[test]
    fn usage_at_the_limit_is_neither_throttled_nor_killed() {
        let enforced = enforce(
            vec![wanted("app", 1_000, 512)],
            &[limits("app", Some(1_000), Some(512))],
        );
        assert!(enforced.throttled.is_empty() && enforced.oom_killed.is_empty());
    }

    fn pod_of(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": spec,
        }))
        .expect("a pod")
    }

    #[test]
    fn a_pods_limits_requests_priority_and_policy_are_read_from_its_spec() {
        let pod = pod_of(serde_json::json!({
            "restartPolicy": "Never",
            "priority": 1000,
            "containers": [
                {"name": "app", "resources": {
                    "limits": {"cpu": "200m", "memory": "64Mi"},
                    "requests": {"cpu": "100m", "memory": "32Mi"}}},
                {"name": "log", "resources": {"limits": {"cpu": "1.5"}, "requests": {"memory": "1Gi"}}},
                {"name": "free"},
            ],
            "initContainers": [{"name": "init", "resources": {"limits": {"memory": "1Mi"}}}],
        }));
        let limits_of = PodLimits::of(&pod).expect("limits");
        assert_eq!(
            *limits_of,
            PodLimits {
                containers: vec![
                    limits("app", Some(200), Some(64)),
                    limits("log", Some(1_500), None)
                ],
                restart_policy: RestartPolicy::Never,
                priority: 1_000,
                memory_requested: (32 + 1_024) * MI,
            }
        );
        assert!(!limits_of.restart_policy.restarts_after_oom());
        assert!(RestartPolicy::OnFailure.restarts_after_oom());
    }

    #[test]
    fn a_pod_with_nothing_to_enforce_keeps_nothing() {
        let pod = pod_of(serde_json::json!({"containers": [{"name": "app"}]}));
        assert_eq!(PodLimits::of(&pod), None);
        let bad = pod_of(serde_json::json!({"containers": [
            {"name": "app", "resources": {"limits": {"cpu": "lots", "memory": "0"}}}]}));
        assert_eq!(PodLimits::of(&bad), None, "unreadable or zero is no limit");
    }

    fn pod(key: &'static str, used: u64, requested: u64, priority: i32) -> PodMemory<&'static str> {
        PodMemory {
            key,
            used: used * MI,
            requested: requested * MI,
            priority,
        }
    }

    #[test]
    fn a_node_with_memory_to_spare_evicts_nothing() {
        let pods = [pod("a", 500, 500, 0), pod("b", 400, 100, 0)];
        assert!(pressure_evictions(1_024 * MI, &pods).is_empty());
    }

    #[test]
    fn pressure_evicts_pods_over_their_requests_first_then_low_priority_then_the_largest_excess() {
        let pods = [
            pod("within-requests", 300, 400, 0),
            pod("over-small", 200, 100, 0),
            pod("over-large", 350, 50, 0),
            pod("over-important", 150, 0, 1_000),
        ];
        // 1,000 MiB used of 1,024: 24 available, under the 100 MiB threshold. Evicting the
        // largest excess among the lowest priority pods over their requests frees enough.
        assert_eq!(pressure_evictions(1_024 * MI, &pods), ["over-large"]);
        // With less memory, more go, in rank order.
        assert_eq!(
            pressure_evictions(500 * MI, &pods),
            ["over-large", "over-small", "over-important"]
        );
    }

    #[test]
    fn a_node_under_pressure_reports_what_was_available_and_whom_to_evict() {
        let pods = [pod("a", 600, 600, 0), pod("b", 400, 100, 0)];
        assert_eq!(node_pressure(1_024 * MI, &pods[..1]), None);
        let pressure = node_pressure(1_024 * MI, &pods).expect("pressure");
        assert_eq!(pressure.available, 24 * MI as i64);
        assert_eq!(pressure.evicted, ["b"]);
        // Usage set above the capacity leaves a negative availability, as a kubelet computes it.
        let over = node_pressure(900 * MI, &pods).expect("pressure");
        assert_eq!(over.available, -100 * MI as i64);
        assert_eq!(
            eviction_message(over.available),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: -102400Ki."
        );
    }
}
