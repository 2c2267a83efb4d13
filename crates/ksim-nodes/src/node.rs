//! Virtual Node objects as a kubelet would register and report them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use crate::labels::{
    ARCH_LABEL, BETA_ARCH_LABEL, BETA_OS_LABEL, GROUP_LABEL, HOSTNAME_LABEL, KUBELET_PORT,
    NO_SCHEDULE, OS_LABEL, OWNER_LABEL, OWNER_SEATS, POOL_LABEL, PROVIDER_ID_SCHEME,
    SEAT_HOST_LABEL, TRUE_VALUE, VIRTUAL_LABEL, VIRTUAL_TAINT_KEY,
};
use crate::skeleton::{NodeSkeleton, with_node_info_defaults};

/// What makes one node of a group distinct from its siblings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    pub name: String,
    pub group: String,
    pub pool: String,
    /// [`OWNER_POOL`] or [`OWNER_SEATS`]: who sizes the node's group.
    pub owner: &'static str,
    pub pod_cidr: Ipv4Net,
    pub internal_ip: Ipv4Addr,
}

/// `ksim://<group>/<node>`: the node lifecycle controller and cluster-autoscaler key on it.
pub fn provider_id(group: &str, node: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}://{group}/{node}")
}

/// The (group, node) of a provider ID written by [`provider_id`]; `None` for other schemes or
/// malformed IDs.
pub fn parse_provider_id(id: &str) -> Option<(String, String)> {
    let rest = id.strip_prefix(PROVIDER_ID_SCHEME)?.strip_prefix("://")?;
    let (group, node) = rest.split_once('/')?;
    if group.is_empty() || node.is_empty() || node.contains('/') {
        return None;
    }
    Some((group.to_owned(), node.to_owned()))
}

/// Whether a node reports condition Ready=True, as the scheduler and kubectl read it.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// The reason of the node's Ready condition, if it has one.
fn ready_reason(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .reason
        .as_deref()
}

/// Whether the node is NotReady because it is booting by its group's provisioning model (and
/// its pool is still posting that: a pool gone quiet lets the lifecycle controller turn the
/// condition Unknown, with its own reason).
pub fn is_booting(node: &Node) -> bool {
    !is_ready(node) && ready_reason(node) == Some(BOOTING_REASON)
}

/// Whether the node is shutting down by its group's provisioning model.
pub fn is_shutting_down(node: &Node) -> bool {
    !is_ready(node) && ready_reason(node) == Some(SHUTTING_DOWN_REASON)
}

/// What the node lifecycle controller does to a node whose pool stopped posting its status:
/// Ready turns Unknown, with the controller's own reason. For the tests of what reads nodes.
#[cfg(any(test, feature = "testing"))]
pub fn lose_contact(node: &mut Node) {
    let conditions = node
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let unknown = NodeCondition {
        type_: "Ready".to_owned(),
        status: "Unknown".to_owned(),
        reason: Some("NodeStatusUnknown".to_owned()),
        ..Default::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(ready) => {
            ready.status = unknown.status;
            ready.reason = unknown.reason;
        }
        None => conditions.push(unknown),
    }
}

/// Taints the control plane keeps on a node until it has seen the node Ready: the
/// TaintNodesByCondition admission plugin puts not-ready on every new node, and the node
/// lifecycle controller lifts it some time after the kubelet reports Ready.
const CONDITION_TAINT_KEYS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// Whether the scheduler would place pods on the node for its readiness: Ready=True and none
/// of the control plane's condition taints left. A node just registered is Ready a moment
/// before it takes pods, so waits before a replay or a test's pods use this, not
/// [`is_ready`].
pub fn takes_pods(node: &Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|taint| CONDITION_TAINT_KEYS.contains(&taint.key.as_str()))
        });
    is_ready(node) && !tainted
}

/// The taint keeping real workloads off virtual nodes.
pub fn virtual_taint() -> Taint {
    Taint {
        key: VIRTUAL_TAINT_KEY.to_owned(),
        value: Some(TRUE_VALUE.to_owned()),
        effect: NO_SCHEDULE.to_owned(),
        time_added: None,
    }
}

/// The taint keeping everything but seats off the seat host node.
pub fn seat_host_taint() -> Taint {
    Taint {
        key: SEAT_HOST_LABEL.to_owned(),
        value: Some(TRUE_VALUE.to_owned()),
        effect: NO_SCHEDULE.to_owned(),
        time_added: None,
    }
}

/// The Node a virtual node registers: the skeleton's shape plus this node's identity.
pub fn virtual_node(skeleton: &NodeSkeleton, id: &NodeIdentity, now: Timestamp) -> Node {
    let pod_cidr = id.pod_cidr.trunc().to_string();
    Node {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            labels: Some(node_labels(
                skeleton, &id.name, &id.group, &id.pool, id.owner,
            )),
            annotations: (!skeleton.annotations.is_empty()).then(|| skeleton.annotations.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id(&id.group, &id.name)),
            pod_cidr: Some(pod_cidr.clone()),
            pod_cidrs: Some(vec![pod_cidr]),
            taints: Some(node_taints(skeleton)),
            ..NodeSpec::default()
        }),
        status: Some(node_status(skeleton, id, now)),
    }
}

/// What a group's next node will look like before it exists, for cluster-autoscaler's
/// scale-from-zero: the labels, taints, capacity and allocatable the registered node will have.
pub fn template_node(skeleton: &NodeSkeleton, group: &str, pool: &str, now: Timestamp) -> Node {
    let name = format!("template-node-for-{group}");
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(node_labels(skeleton, &name, group, pool, OWNER_SEATS)),
            annotations: (!skeleton.annotations.is_empty()).then(|| skeleton.annotations.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id(group, &name)),
            taints: Some(node_taints(skeleton)),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(skeleton.capacity.clone()),
            allocatable: Some(skeleton.allocatable.clone()),
            conditions: Some(node_conditions(now, now)),
            node_info: Some(node_info_for(&skeleton.node_info, &name)),
            phase: Some("Running".to_owned()),
            ..NodeStatus::default()
        }),
    }
}

/// The skeleton's labels plus the ones a kubelet and the pool add for this node.
pub fn node_labels(
    skeleton: &NodeSkeleton,
    name: &str,
    group: &str,
    pool: &str,
    owner: &str,
) -> BTreeMap<String, String> {
    let mut labels = skeleton.labels.clone();
    // A kubelet always labels its OS and architecture; the scheduler's nodeSelectors rely on it.
    labels
        .entry(OS_LABEL.to_owned())
        .or_insert_with(|| skeleton.node_info.operating_system.clone());
    labels
        .entry(ARCH_LABEL.to_owned())
        .or_insert_with(|| skeleton.node_info.architecture.clone());
    // The node lifecycle controller would patch these onto every node; writing them at
    // registration saves a write per node and keeps the template equal to the node.
    for (beta, current) in [(BETA_OS_LABEL, OS_LABEL), (BETA_ARCH_LABEL, ARCH_LABEL)] {
        if let Some(value) = labels.get(current).cloned() {
            labels.entry(beta.to_owned()).or_insert(value);
        }
    }
    for (key, value) in [
        (HOSTNAME_LABEL, name),
        (GROUP_LABEL, group),
        (VIRTUAL_LABEL, TRUE_VALUE),
        (POOL_LABEL, pool),
        (OWNER_LABEL, owner),
    ] {
        labels.insert(key.to_owned(), value.to_owned());
    }
    labels
}

/// The skeleton's taints plus the virtual-node taint, once.
pub fn node_taints(skeleton: &NodeSkeleton) -> Vec<Taint> {
    let virtual_taint = virtual_taint();
    let mut taints: Vec<Taint> = skeleton
        .taints
        .iter()
        .filter(|taint| !(taint.key == virtual_taint.key && taint.effect == virtual_taint.effect))
        .cloned()
        .collect();
    taints.push(virtual_taint);
    taints
}

/// The status a kubelet reports for a healthy node of this shape.
pub fn node_status(skeleton: &NodeSkeleton, id: &NodeIdentity, now: Timestamp) -> NodeStatus {
    NodeStatus {
        capacity: Some(skeleton.capacity.clone()),
        allocatable: Some(skeleton.allocatable.clone()),
        // A skeleton's system info has its defaults already; filling them again changes nothing.
        ..kubelet_status(&skeleton.node_info, id, node_conditions(now, now))
    }
}

/// The labels the pool adds to a node someone else created (Karpenter's) when it takes the
/// node's kubelet part: the node keeps its own labels, these only say whose it now is.
pub fn adopted_labels(group: &str, pool: &str, owner: &str) -> BTreeMap<String, String> {
    [
        (GROUP_LABEL, group),
        (VIRTUAL_LABEL, TRUE_VALUE),
        (POOL_LABEL, pool),
        (OWNER_LABEL, owner),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect()
}

/// What a kubelet writes into the status of a node someone else created: addresses, daemon
/// endpoints, system info and conditions. Capacity and allocatable are left out (`None`), so
/// a merge patch of this status keeps the creator's.
pub fn kubelet_status(
    info: &NodeSystemInfo,
    id: &NodeIdentity,
    conditions: Vec<NodeCondition>,
) -> NodeStatus {
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_owned(),
                address: id.internal_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".to_owned(),
                address: id.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: KUBELET_PORT }),
        }),
        node_info: Some(node_info_for(
            &with_node_info_defaults(info.clone()),
            &id.name,
        )),
        conditions: Some(conditions),
        phase: Some("Running".to_owned()),
        ..NodeStatus::default()
    }
}

/// Reason of the Ready=False condition of a node booting by its group's provisioning model:
/// the cloud provider reports no problem for it (a NotReady node whose reason is anything else,
/// say the lifecycle controller's once its pool stopped, is one).
pub const BOOTING_REASON: &str = "KsimNodeBooting";

/// Reason of the Ready=False condition of a node shutting down by its group's provisioning
/// model: its seat is gone, it is unschedulable and goes when its termination delay has passed.
pub const SHUTTING_DOWN_REASON: &str = "KsimNodeShuttingDown";

/// Where a virtual node is in its life, as its Ready condition tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Registered, not Ready yet ([`BOOTING_REASON`]).
    Booting,
    Ready,
    /// Going away ([`SHUTTING_DOWN_REASON`]).
    ShuttingDown,
}

/// The conditions of a healthy kubelet, as of `heartbeat`, unchanged since `transition`.
pub fn node_conditions(heartbeat: Timestamp, transition: Timestamp) -> Vec<NodeCondition> {
    phase_conditions(Phase::Ready, heartbeat, transition)
}

/// The conditions a node in `phase` reports, as of `heartbeat`, its Ready condition unchanged
/// since `transition`; the other conditions are a healthy kubelet's in every phase.
pub fn phase_conditions(
    phase: Phase,
    heartbeat: Timestamp,
    transition: Timestamp,
) -> Vec<NodeCondition> {
    let ready = match phase {
        Phase::Ready => (
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
        Phase::Booting => (
            "Ready",
            "False",
            BOOTING_REASON,
            "virtual node is booting: Ready when its group's provisioning model says",
        ),
        Phase::ShuttingDown => (
            "Ready",
            "False",
            SHUTTING_DOWN_REASON,
            "virtual node is shutting down: gone when its group's provisioning model says",
        ),
    };
    [
        (
            "NetworkUnavailable",
            "False",
            "RouteCreated",
            "node network is configured",
        ),
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        ready,
    ]
    .into_iter()
    .map(|(type_, status, reason, message)| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(Time(heartbeat)),
        last_transition_time: Some(Time(transition)),
    })
    .collect()
}

/// Skeleton of the node hosting seat pods: large enough never to be the limit, and closed to
/// everything but seats.
pub fn seat_host_skeleton() -> NodeSkeleton {
    let resources: BTreeMap<String, Quantity> =
        [("cpu", "1000"), ("memory", "4Ti"), ("pods", "100000")]
            .into_iter()
            .map(|(name, value)| (name.to_owned(), Quantity(value.to_owned())))
            .collect();
    NodeSkeleton {
        labels: BTreeMap::from([(SEAT_HOST_LABEL.to_owned(), TRUE_VALUE.to_owned())]),
        annotations: BTreeMap::new(),
        taints: vec![seat_host_taint()],
        capacity: resources.clone(),
        allocatable: resources,
        node_info: with_node_info_defaults(NodeSystemInfo::default()),
        devices: None,
    }
}

/// System info with machine identifiers derived from the node name: distinct per node, and the
/// same after a pool restart so re-registration changes nothing.
fn node_info_for(info: &NodeSystemInfo, node_name: &str) -> NodeSystemInfo {
    NodeSystemInfo {
        machine_id: stable_hex(&["machine-id", node_name], 32),
        system_uuid: uuid_format(&stable_hex(&["system-uuid", node_name], 32)),
        boot_id: uuid_format(&stable_hex(&["boot-id", node_name], 32)),
        ..info.clone()
    }
}

/// A 64-bit hash of `parts` that is the same on every build and platform (unlike std's
/// `DefaultHasher`): FNV-1a with a separator byte between parts, then a final mix so the low bits
/// are usable for modulo.
pub fn stable_hash(parts: &[&str]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    // 0xff never occurs in UTF-8, so ["ab", "c"] and ["a", "bc"] hash differently.
    const SEPARATOR: u8 = 0xff;
    let mut hash = OFFSET_BASIS;
    for part in parts {
        for &byte in part.as_bytes().iter().chain(std::iter::once(&SEPARATOR)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    // splitmix64 finaliser.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// `len` lowercase hex digits derived from `parts`.
pub fn stable_hex(parts: &[&str], len: usize) -> String {
    let mut hex = String::with_capacity(len + 16);
    let mut block = 0u32;
    while hex.len() < len {
        let block_text = block.to_string();
        let mut block_parts = parts.to_vec();
        block_parts.push(&block_text);
        hex.push_str(&format!("{:016x}", stable_hash(&block_parts)));
        block += 1;
    }
    hex.truncate(len);
    hex
}

/// 32 hex digits as 8-4-4-4-12.
fn uuid_format(hex: &str) -> String {
    let groups = [0..8, 8..12, 12..16, 16..20, 20..32];
    groups
        .into_iter()
        .filter_map(|range| hex.get(range))
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-03-01T12:00:00Z".parse().unwrap()
    }

    fn identity() -> NodeIdentity {
        NodeIdentity {
            name: "m5-large-3".to_owned(),
            group: "m5-large".to_owned(),
            pool: "default".to_owned(),
            owner: OWNER_SEATS,
            pod_cidr: "10.244.3.0/24".parse().unwrap(),
            internal_ip: "10.244.3.1".parse().unwrap(),
        }
    }

    fn skeleton() -> NodeSkeleton {
        NodeSkeleton::from_yaml(
            r#"
metadata:
  labels:
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: eu-west-1a
    ksim.io/node-group: stale-group
    ksim.io/pool: stale-pool
  annotations:
    team.example.com/owner: platform
spec:
  taints:
  - key: dedicated
    value: batch
    effect: NoSchedule
status:
  capacity:
    cpu: "2"
    memory: 7910360Ki
    pods: "29"
  allocatable:
    cpu: 1930m
    memory: 7220184Ki
    pods: "29"
  nodeInfo:
    architecture: arm64
    kubeletVersion: v1.35.1
"#,
        )
        .unwrap()
    }

    fn pairs(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn provider_ids_round_trip() {
        let id = provider_id("m5-large", "m5-large-3");
        assert_eq!(id, "ksim://m5-large/m5-large-3");
        assert_eq!(
            parse_provider_id(&id),
            Some(("m5-large".to_owned(), "m5-large-3".to_owned()))
        );
    }

    #[test]
    fn foreign_or_malformed_provider_ids_do_not_parse() {
        for id in [
            "aws:///eu-west-1a/i-0a1b2c3d",
            "kwok://g/n",
            "ksim:/g/n",
            "ksim://g",
            "ksim://g/",
            "ksim:///n",
            "ksim://g/n/extra",
            "ksimx://g/n",
            "",
        ] {
            assert_eq!(parse_provider_id(id), None, "{id}");
        }
    }

    #[test]
    fn virtual_node_labels_are_skeleton_plus_ours() {
        let node = virtual_node(&skeleton(), &identity(), now());
        assert_eq!(node.metadata.name.as_deref(), Some("m5-large-3"));
        assert_eq!(
            node.metadata.labels.unwrap(),
            pairs(&[
                ("node.kubernetes.io/instance-type", "m5.large"),
                ("topology.kubernetes.io/zone", "eu-west-1a"),
                ("kubernetes.io/os", "linux"),
                ("kubernetes.io/arch", "arm64"),
                ("beta.kubernetes.io/os", "linux"),
                ("beta.kubernetes.io/arch", "arm64"),
                ("kubernetes.io/hostname", "m5-large-3"),
                ("ksim.io/node-group", "m5-large"),
                ("ksim.io/virtual-node", "true"),
                ("ksim.io/pool", "default"),
                ("ksim.io/group-owner", "seats"),
            ])
        );
        assert_eq!(
            node.metadata.annotations.unwrap(),
            pairs(&[("team.example.com/owner", "platform")])
        );
    }

    #[test]
    fn skeleton_os_and_arch_labels_are_kept() {
        let mut skeleton = skeleton();
        skeleton
            .labels
            .insert("kubernetes.io/arch".to_owned(), "amd64".to_owned());
        let labels = virtual_node(&skeleton, &identity(), now())
            .metadata
            .labels
            .unwrap();
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
    }

    #[test]
    fn virtual_node_spec_has_provider_id_cidr_and_taints() {
        let spec = virtual_node(&skeleton(), &identity(), now()).spec.unwrap();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("ksim://m5-large/m5-large-3")
        );
        assert_eq!(spec.pod_cidr.as_deref(), Some("10.244.3.0/24"));
        assert_eq!(spec.pod_cidrs, Some(vec!["10.244.3.0/24".to_owned()]));
        assert_eq!(spec.unschedulable, None);
        let taints = spec.taints.unwrap();
        let described: Vec<(&str, Option<&str>, &str)> = taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
            .collect();
        assert_eq!(
            described,
            [
                ("dedicated", Some("batch"), "NoSchedule"),
                ("ksim.io/virtual-node", Some("true"), "NoSchedule"),
            ]
        );
    }

    #[test]
    fn a_registered_node_is_ready_until_its_ready_condition_is_not_true() {
        let mut node = virtual_node(&skeleton(), &identity(), now());
        assert!(is_ready(&node));
        lose_contact(&mut node);
        assert!(!is_ready(&node));
        node.status = None;
        assert!(!is_ready(&node));
    }

    #[test]
    fn a_ready_node_takes_pods_once_the_not_ready_taint_is_lifted() {
        let mut node = virtual_node(&skeleton(), &identity(), now());
        assert!(takes_pods(&node), "the skeleton's own taints do not count");
        let taints = node.spec.as_mut().unwrap().taints.as_mut().unwrap();
        // As the admission plugin leaves a new node.
        taints.push(Taint {
            key: "node.kubernetes.io/not-ready".to_owned(),
            value: None,
            effect: NO_SCHEDULE.to_owned(),
            time_added: None,
        });
        assert!(is_ready(&node));
        assert!(!takes_pods(&node));
        node.spec.as_mut().unwrap().taints.as_mut().unwrap()[2].key =
            "node.kubernetes.io/unreachable".to_owned();
        assert!(!takes_pods(&node));
        node.spec.as_mut().unwrap().taints.as_mut().unwrap().pop();
        assert!(takes_pods(&node));
        node.status = None;
        assert!(!takes_pods(&node), "not Ready");
    }

    #[test]
    fn template_node_has_what_the_registered_node_will_have() {
        let skeleton = skeleton();
        let registered = virtual_node(&skeleton, &identity(), now());
        let template = template_node(&skeleton, "m5-large", "default", now());
        let without_hostname = |node: &Node| {
            let mut labels = node.metadata.labels.clone().unwrap_or_default();
            labels.remove(HOSTNAME_LABEL);
            labels
        };
        assert_eq!(without_hostname(&template), without_hostname(&registered));
        assert_eq!(
            registered
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNER_LABEL)),
            Some(&OWNER_SEATS.to_owned()),
            "the provider serves an autoscaler group's nodes by this label"
        );
        let spec = |node: &Node| node.spec.clone().unwrap_or_default();
        assert_eq!(spec(&template).taints, spec(&registered).taints);
        let status = |node: &Node| node.status.clone().unwrap_or_default();
        assert_eq!(status(&template).capacity, status(&registered).capacity);
        assert_eq!(
            status(&template).allocatable,
            status(&registered).allocatable
        );
        assert_eq!(
            parse_provider_id(&spec(&template).provider_id.unwrap_or_default()),
            Some((
                "m5-large".to_owned(),
                "template-node-for-m5-large".to_owned()
            ))
        );
    }

    #[test]
    fn virtual_taint_is_not_duplicated() {
        let mut skeleton = skeleton();
        skeleton.taints.push(Taint {
            value: Some("yes".to_owned()),
            ..virtual_taint()
        });
        let taints = virtual_node(&skeleton, &identity(), now())
            .spec
            .unwrap()
            .taints
            .unwrap();
        let virtual_taints: Vec<&Taint> = taints
            .iter()
            .filter(|t| t.key == VIRTUAL_TAINT_KEY)
            .collect();
        assert_eq!(virtual_taints, [&virtual_taint()]);
        assert_eq!(taints.len(), 2);
    }

    #[test]
    fn non_canonical_pod_cidr_is_written_as_its_network() {
        let mut id = identity();
        id.pod_cidr = "10.244.3.9/24".parse().unwrap();
        let spec = virtual_node(&skeleton(), &id, now()).spec.unwrap();
        assert_eq!(spec.pod_cidr.as_deref(), Some("10.244.3.0/24"));
    }

    #[test]
    fn status_reports_resources_addresses_and_endpoint() {
        let status = node_status(&skeleton(), &identity(), now());
        assert_eq!(status.capacity.unwrap()["cpu"], Quantity("2".to_owned()));
        assert_eq!(
            status.allocatable.unwrap()["cpu"],
            Quantity("1930m".to_owned())
        );
        let addresses: Vec<(String, String)> = status
            .addresses
            .unwrap()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        assert_eq!(
            addresses,
            [
                ("InternalIP".to_owned(), "10.244.3.1".to_owned()),
                ("Hostname".to_owned(), "m5-large-3".to_owned()),
            ]
        );
        assert_eq!(
            status
                .daemon_endpoints
                .unwrap()
                .kubelet_endpoint
                .unwrap()
                .port,
            10250
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.conditions.unwrap().len(), 5);
    }

    #[test]
    fn node_info_identifiers_are_stable_and_distinct_per_node() {
        let first = node_status(&skeleton(), &identity(), now())
            .node_info
            .unwrap();
        let again = node_status(&skeleton(), &identity(), now())
            .node_info
            .unwrap();
        assert_eq!(first, again);
        assert_eq!(first.kubelet_version, "v1.35.1");
        assert_eq!(first.architecture, "arm64");
        assert_eq!(first.machine_id.len(), 32);
        assert!(first.machine_id.chars().all(|c| c.is_ascii_hexdigit()));
        let uuid_shape: Vec<usize> = first.system_uuid.split('-').map(str::len).collect();
        assert_eq!(uuid_shape, [8, 4, 4, 4, 12]);
        assert_eq!(first.boot_id.len(), 36);
        assert_ne!(first.system_uuid, first.boot_id);

        let mut other = identity();
        other.name = "m5-large-4".to_owned();
        let second = node_status(&skeleton(), &other, now()).node_info.unwrap();
        assert_ne!(first.machine_id, second.machine_id);
        assert_ne!(first.system_uuid, second.system_uuid);
        assert_ne!(first.boot_id, second.boot_id);
    }

    #[test]
    fn conditions_are_a_healthy_kubelets() {
        let heartbeat = now();
        let transition: Timestamp = "2026-03-01T11:00:00Z".parse().unwrap();
        let conditions = node_conditions(heartbeat, transition);
        let summary: BTreeMap<String, (String, String)> = conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    (c.status.clone(), c.reason.clone().unwrap_or_default()),
                )
            })
            .collect();
        let expected: BTreeMap<String, (String, String)> = [
            ("Ready", "True", "KubeletReady"),
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("NetworkUnavailable", "False", "RouteCreated"),
        ]
        .into_iter()
        .map(|(t, s, r)| (t.to_owned(), (s.to_owned(), r.to_owned())))
        .collect();
        assert_eq!(summary, expected);
        for condition in &conditions {
            assert_eq!(condition.last_heartbeat_time, Some(Time(heartbeat)));
            assert_eq!(condition.last_transition_time, Some(Time(transition)));
            assert!(condition.message.as_deref().is_some_and(|m| !m.is_empty()));
        }
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            ready.message.as_deref(),
            Some("kubelet is posting ready status")
        );
    }

    #[test]
    fn booting_and_shutting_down_nodes_say_so_in_their_ready_condition() {
        let mut node = virtual_node(&skeleton(), &identity(), now());
        assert!(is_ready(&node) && !is_booting(&node) && !is_shutting_down(&node));
        for (phase, booting, shutting_down) in [
            (Phase::Booting, true, false),
            (Phase::ShuttingDown, false, true),
        ] {
            let conditions = phase_conditions(phase, now(), now());
            node.status.as_mut().unwrap().conditions = Some(conditions.clone());
            assert!(!is_ready(&node), "{phase:?}");
            assert_eq!(is_booting(&node), booting, "{phase:?}");
            assert_eq!(is_shutting_down(&node), shutting_down, "{phase:?}");
            // Only Ready changes: the other conditions stay a healthy kubelet's.
            let others = |c: &[NodeCondition]| -> Vec<NodeCondition> {
                c.iter().filter(|c| c.type_ != "Ready").cloned().collect()
            };
            assert_eq!(others(&conditions), others(&node_conditions(now(), now())));
        }
        // NotReady for any other reason (the lifecycle controller's Unknown) is neither.
        lose_contact(&mut node);
        assert!(!is_booting(&node) && !is_shutting_down(&node));
    }

    #[test]
    fn seat_host_skeleton_is_big_and_closed() {
        let skeleton = seat_host_skeleton();
        assert_eq!(skeleton.capacity["cpu"], Quantity("1000".to_owned()));
        assert_eq!(skeleton.capacity["memory"], Quantity("4Ti".to_owned()));
        assert_eq!(skeleton.capacity["pods"], Quantity("100000".to_owned()));
        assert_eq!(skeleton.allocatable, skeleton.capacity);
        assert_eq!(skeleton.labels, pairs(&[("ksim.io/seat-host", "true")]));
        assert_eq!(skeleton.taints, [seat_host_taint()]);
        assert_eq!(skeleton.node_info.operating_system, "linux");
        let mut id = identity();
        id.name = "ksim-seat-host".to_owned();
        let node = virtual_node(&skeleton, &id, now());
        let taint_keys: Vec<String> = node
            .spec
            .unwrap()
            .taints
            .unwrap()
            .into_iter()
            .map(|t| t.key)
            .collect();
        assert_eq!(taint_keys, ["ksim.io/seat-host", "ksim.io/virtual-node"]);
    }

    #[test]
    fn stable_hash_separates_parts_and_is_fixed() {
        assert_ne!(stable_hash(&["ab", "c"]), stable_hash(&["a", "bc"]));
        assert_ne!(stable_hash(&["a"]), stable_hash(&["a", ""]));
        // Pinned: a change would give restarted nodes new machine IDs and lease phases.
        assert_eq!(stable_hash(&["machine-id", "n"]), 0x3a64_2ae5_dd19_46cb);
        assert_eq!(stable_hex(&["x"], 20), "f5e276c0401e6489929b");
        assert_eq!(stable_hex(&["x"], 40).len(), 40);
        assert!(stable_hex(&["x"], 40).starts_with(&stable_hex(&["x"], 16)));
    }

    #[test]
    fn a_taken_node_gets_a_kubelets_status_without_its_creators_resources() {
        let status = kubelet_status(
            &NodeSystemInfo::default(),
            &identity(),
            phase_conditions(Phase::Booting, now(), now()),
        );
        // Capacity and allocatable stay the creator's: a merge patch leaves out what is None.
        assert!(status.capacity.is_none() && status.allocatable.is_none());
        let addresses = status.addresses.unwrap();
        assert_eq!(addresses[0].type_, "InternalIP");
        assert_eq!(addresses[0].address, identity().internal_ip.to_string());
        let info = status.node_info.unwrap();
        assert!(!info.kubelet_version.is_empty() && !info.machine_id.is_empty());
        let labels = adopted_labels("default", "p1", "karpenter");
        assert_eq!(
            labels.get(OWNER_LABEL).map(String::as_str),
            Some("karpenter")
        );
        assert_eq!(labels.get(GROUP_LABEL).map(String::as_str), Some("default"));
        assert_eq!(labels.len(), 4, "only whose the node now is: {labels:?}");
    }
}
