//! The pool's in-memory index: node groups, the nodes they should have, the nodes that
//! exist, and the pod IPs handed out. Controllers and the gRPC adapter share it behind a
//! mutex that is never held across an await.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::Ipv4Addr,
    sync::Arc,
    time::Instant,
};

use ipnet::Ipv4Net;
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};

use crate::domain::{
    cidr::{CidrError, NodeIpam, PodCidrPool},
    groups::scale_plan,
    labels::{GROUP_LABEL, OWNER_POOL, OWNER_SEATS, POOL_LABEL},
    node::NodeIdentity,
    pod::PodPhase,
    skeleton::NodeSkeleton,
};

/// Where a group's nodes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSource {
    /// Created through the gRPC API; the pool keeps `desired` nodes.
    PoolManaged { desired: u32 },
    /// One node per seat pod of a Deployment labelled with the group.
    Deployment {
        namespace: String,
        name: String,
        seats: BTreeSet<String>,
    },
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub skeleton: Arc<NodeSkeleton>,
    pub source: GroupSource,
    pub created: Timestamp,
}

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// A podCIDR is reserved and the Node object is being created.
    Creating,
    Registered,
    Deleting,
}

#[derive(Debug)]
pub struct NodeEntry {
    pub name: String,
    pub group: String,
    pub pod_cidr: Ipv4Net,
    pub ipam: NodeIpam,
    pub state: NodeState,
    pub uid: Option<String>,
    pub created: Timestamp,
    pub last_heartbeat: Option<Timestamp>,
    pub next_renewal: Option<Instant>,
    pub next_status: Option<Instant>,
}

impl NodeEntry {
    pub fn internal_ip(&self) -> Ipv4Addr {
        self.ipam.node_ip()
    }

    pub fn is_ready(&self) -> bool {
        self.state == NodeState::Registered && self.last_heartbeat.is_some()
    }
}

/// `namespace/name` of a pod.
pub type PodKey = String;

#[derive(Debug, Clone)]
struct PodEntry {
    node: String,
    uid: String,
    /// An address taken from the node's IPAM (host-network pods take none).
    ip: Option<Ipv4Addr>,
    phase: PodPhase,
}

/// Pod counts by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseCounts {
    pub pending: u64,
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub unknown: u64,
}

impl PhaseCounts {
    fn add(&mut self, phase: PodPhase) {
        match phase {
            PodPhase::Pending => self.pending += 1,
            PodPhase::Running => self.running += 1,
            PodPhase::Succeeded => self.succeeded += 1,
            PodPhase::Failed => self.failed += 1,
            PodPhase::Unknown => self.unknown += 1,
        }
    }
}

/// Nodes to create and delete to reach the groups' desired state.
#[derive(Debug, Default)]
pub struct NodeChanges {
    pub create: Vec<(NodeIdentity, Arc<NodeSkeleton>)>,
    pub delete: Vec<String>,
    /// Nodes that could not get a podCIDR.
    pub exhausted: Vec<(String, CidrError)>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("node {0} has no pool labels")]
    NotOurs(String),
    #[error("node {node} has no usable podCIDR: {reason}")]
    BadCidr { node: String, reason: String },
}

#[derive(Debug)]
pub struct PoolIndex {
    pool: String,
    groups: BTreeMap<String, Group>,
    nodes: BTreeMap<String, NodeEntry>,
    cidrs: PodCidrPool,
    pods: HashMap<PodKey, PodEntry>,
    /// Groups the API does not list: the seat host.
    internal_groups: BTreeSet<String>,
    /// Nodes whose pods all take the node's own IP (the seat host).
    host_network_nodes: BTreeSet<String>,
}

impl PoolIndex {
    pub fn new(pool: impl Into<String>, cidrs: PodCidrPool) -> Self {
        Self {
            pool: pool.into(),
            groups: BTreeMap::new(),
            nodes: BTreeMap::new(),
            cidrs,
            pods: HashMap::new(),
            internal_groups: BTreeSet::new(),
            host_network_nodes: BTreeSet::new(),
        }
    }

    pub fn pool(&self) -> &str {
        &self.pool
    }

    // ---- groups ----

    pub fn upsert_group(&mut self, group: Group) {
        self.groups.insert(group.name.clone(), group);
    }

    /// An internal group: its nodes are managed like any other but it is not listed, and
    /// every pod on them uses the node's own IP.
    pub fn upsert_internal_group(&mut self, group: Group) {
        self.internal_groups.insert(group.name.clone());
        self.upsert_group(group);
    }

    pub fn remove_group(&mut self, name: &str) -> Option<Group> {
        self.groups.remove(name)
    }

    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.get(name)
    }

    pub fn group_mut(&mut self, name: &str) -> Option<&mut Group> {
        self.groups.get_mut(name)
    }

    /// Groups users see: all but internal ones.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups
            .values()
            .filter(|group| !self.internal_groups.contains(&group.name))
    }

    pub fn is_internal_group(&self, name: &str) -> bool {
        self.internal_groups.contains(name)
    }

    // ---- nodes ----

    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.get(name)
    }

    pub fn node_mut(&mut self, name: &str) -> Option<&mut NodeEntry> {
        self.nodes.get_mut(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &NodeEntry> {
        self.nodes.values()
    }

    pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut NodeEntry> {
        self.nodes.values_mut()
    }

    pub fn nodes_of<'a>(&'a self, group: &'a str) -> impl Iterator<Item = &'a NodeEntry> + 'a {
        self.nodes.values().filter(move |node| node.group == group)
    }

    pub fn free_cidrs(&self) -> usize {
        self.cidrs.available()
    }

    pub fn is_ours(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    /// Takes over a node this pool registered before a restart: its podCIDR is claimed so
    /// it is never handed out twice.
    pub fn adopt_node(&mut self, node: &Node) -> Result<(), AdoptError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let (Some(group), Some(pool)) = (labels.get(GROUP_LABEL), labels.get(POOL_LABEL)) else {
            return Err(AdoptError::NotOurs(name));
        };
        if pool != &self.pool {
            return Err(AdoptError::NotOurs(name));
        }
        let bad_cidr = |reason: String| AdoptError::BadCidr {
            node: name.clone(),
            reason,
        };
        let cidr: Ipv4Net = node
            .spec
            .as_ref()
            .and_then(|spec| spec.pod_cidr.as_deref())
            .ok_or_else(|| bad_cidr("no spec.podCIDR".to_owned()))?
            .parse()
            .map_err(|e| bad_cidr(format!("{e}")))?;
        if self.nodes.contains_key(&name) {
            return Ok(());
        }
        self.cidrs
            .claim(cidr)
            .map_err(|e| bad_cidr(e.to_string()))?;
        let created = node
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(Timestamp::now, |time| time.0);
        self.nodes.insert(
            name.clone(),
            NodeEntry {
                name,
                group: group.clone(),
                pod_cidr: cidr,
                ipam: NodeIpam::new(cidr),
                state: NodeState::Registered,
                uid: node.metadata.uid.clone(),
                created,
                // Renew at once: the previous process may have been gone a while.
                last_heartbeat: None,
                next_renewal: Some(Instant::now()),
                next_status: Some(Instant::now()),
            },
        );
        Ok(())
    }

    /// What to create and delete so every group has exactly its desired nodes. Nodes to
    /// create get their podCIDR reserved here, so concurrent plans never collide.
    pub fn plan_node_changes(&mut self) -> NodeChanges {
        let mut changes = NodeChanges::default();
        let mut desired: BTreeMap<String, String> = BTreeMap::new();
        for group in self.groups.values() {
            let existing: BTreeSet<String> = self
                .nodes_of(&group.name)
                .filter(|node| node.state != NodeState::Deleting)
                .map(|node| node.name.clone())
                .collect();
            let names: BTreeSet<String> = match &group.source {
                GroupSource::PoolManaged { desired } => {
                    let plan = scale_plan(&group.name, *desired, &existing);
                    let deleting: BTreeSet<&String> = plan.delete.iter().collect();
                    existing
                        .iter()
                        .filter(|name| !deleting.contains(name))
                        .cloned()
                        .chain(plan.create)
                        .collect()
                }
                GroupSource::Deployment { seats, .. } => seats.clone(),
            };
            for name in names {
                desired.insert(name, group.name.clone());
            }
        }
        for node in self.nodes.values() {
            let wanted = desired.get(&node.name) == Some(&node.group);
            if !wanted && node.state == NodeState::Registered {
                changes.delete.push(node.name.clone());
            }
        }
        for name in &changes.delete {
            if let Some(node) = self.nodes.get_mut(name) {
                node.state = NodeState::Deleting;
            }
        }
        for (name, group) in desired {
            if self.nodes.contains_key(&name) {
                continue;
            }
            let Some((skeleton, owner)) = self.groups.get(&group).map(|g| {
                let owner = match g.source {
                    GroupSource::PoolManaged { .. } => OWNER_POOL,
                    GroupSource::Deployment { .. } => OWNER_SEATS,
                };
                (g.skeleton.clone(), owner)
            }) else {
                continue;
            };
            match self.cidrs.allocate() {
                Ok(cidr) => {
                    let ipam = NodeIpam::new(cidr);
                    let identity = NodeIdentity {
                        name: name.clone(),
                        group: group.clone(),
                        pool: self.pool.clone(),
                        owner,
                        pod_cidr: cidr,
                        internal_ip: ipam.node_ip(),
                    };
                    self.nodes.insert(
                        name.clone(),
                        NodeEntry {
                            name,
                            group,
                            pod_cidr: cidr,
                            ipam,
                            state: NodeState::Creating,
                            uid: None,
                            created: Timestamp::now(),
                            last_heartbeat: None,
                            next_renewal: None,
                            next_status: None,
                        },
                    );
                    changes.create.push((identity, skeleton));
                }
                Err(error) => changes.exhausted.push((name, error)),
            }
        }
        changes
    }

    /// The Node object exists: heartbeats start now.
    pub fn node_registered(&mut self, name: &str, uid: Option<String>) {
        if let Some(node) = self.nodes.get_mut(name) {
            node.state = NodeState::Registered;
            node.uid = uid;
            node.next_renewal = Some(Instant::now());
            node.next_status = Some(Instant::now());
        }
    }

    /// Forgets a node (gone, or its creation failed) and frees its podCIDR.
    pub fn remove_node(&mut self, name: &str) -> Option<NodeEntry> {
        let node = self.nodes.remove(name)?;
        self.cidrs.release(node.pod_cidr);
        self.pods.retain(|_, pod| pod.node != name);
        Some(node)
    }

    pub fn mark_host_network(&mut self, node: &str) {
        self.host_network_nodes.insert(node.to_owned());
    }

    // ---- pods ----

    /// The IP a pod on one of our nodes gets; the same one on every call for the same pod.
    /// Host-network pods, and every pod on a host-network node, get the node's IP.
    pub fn assign_pod_ip(
        &mut self,
        key: &str,
        uid: &str,
        node: &str,
        host_network: bool,
    ) -> Result<Ipv4Addr, AssignError> {
        if let Some(pod) = self.pods.get(key)
            && pod.uid == uid
            && pod.node == node
            && let Some(ip) = pod.ip
        {
            return Ok(ip);
        }
        let entry = self
            .nodes
            .get_mut(node)
            .ok_or_else(|| AssignError::UnknownNode(node.to_owned()))?;
        let uses_node_ip = host_network || self.host_network_nodes.contains(node);
        let node_ip = entry.ipam.node_ip();
        let ip = if uses_node_ip {
            None
        } else {
            Some(entry.ipam.allocate().map_err(AssignError::Exhausted)?)
        };
        let previous = self.pods.insert(
            key.to_owned(),
            PodEntry {
                node: node.to_owned(),
                uid: uid.to_owned(),
                ip,
                phase: PodPhase::Pending,
            },
        );
        self.release_pod_ip(previous);
        Ok(ip.unwrap_or(node_ip))
    }

    /// Records a pod seen on one of our nodes; an IP it already has is claimed (adoption
    /// after a restart), so it is not handed to another pod.
    pub fn observe_pod(
        &mut self,
        key: &str,
        uid: &str,
        node: &str,
        ip: Option<Ipv4Addr>,
        phase: PodPhase,
    ) {
        let Some(entry) = self.nodes.get_mut(node) else {
            return;
        };
        if let Some(pod) = self.pods.get_mut(key)
            && pod.uid == uid
        {
            pod.phase = phase;
            return;
        }
        let claimed = ip.filter(|ip| entry.ipam.contains(*ip) && entry.ipam.claim(*ip).is_ok());
        let previous = self.pods.insert(
            key.to_owned(),
            PodEntry {
                node: node.to_owned(),
                uid: uid.to_owned(),
                ip: claimed,
                phase,
            },
        );
        self.release_pod_ip(previous);
    }

    /// Frees a finished pod's IP but keeps counting it by phase.
    pub fn pod_finished(&mut self, key: &str, phase: PodPhase) {
        if let Some(pod) = self.pods.get_mut(key) {
            pod.phase = phase;
            if let Some(ip) = pod.ip.take()
                && let Some(node) = self.nodes.get_mut(&pod.node)
            {
                node.ipam.release(ip);
            }
        }
    }

    pub fn forget_pod(&mut self, key: &str) {
        let previous = self.pods.remove(key);
        self.release_pod_ip(previous);
    }

    /// Keys of tracked pods, for sweeping the ones that are gone.
    pub fn pod_keys(&self) -> Vec<PodKey> {
        self.pods.keys().cloned().collect()
    }

    pub fn pod_counts(&self, node: Option<&str>) -> PhaseCounts {
        let mut counts = PhaseCounts::default();
        for pod in self.pods.values() {
            if node.is_none_or(|node| node == pod.node) {
                counts.add(pod.phase);
            }
        }
        counts
    }

    fn release_pod_ip(&mut self, pod: Option<PodEntry>) {
        if let Some(PodEntry {
            node, ip: Some(ip), ..
        }) = pod
            && let Some(node) = self.nodes.get_mut(&node)
        {
            node.ipam.release(ip);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AssignError {
    #[error("node {0} is not in this pool")]
    UnknownNode(String),
    #[error(transparent)]
    Exhausted(CidrError),
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKELETON: &str = "
apiVersion: v1
kind: Node
metadata:
  labels:
    node.kubernetes.io/instance-type: m5.large
status:
  capacity: { cpu: '2', memory: 8Gi, pods: '110' }
";

    fn index(pool_cidr: &str) -> PoolIndex {
        PoolIndex::new(
            "test",
            PodCidrPool::new(pool_cidr.parse().unwrap(), 24).unwrap(),
        )
    }

    fn pool_group(name: &str, desired: u32) -> Group {
        Group {
            name: name.to_owned(),
            skeleton: Arc::new(NodeSkeleton::from_yaml(SKELETON).unwrap()),
            source: GroupSource::PoolManaged { desired },
            created: Timestamp::now(),
        }
    }

    fn register_all(index: &mut PoolIndex, changes: &NodeChanges) {
        for (identity, _) in &changes.create {
            index.node_registered(&identity.name, Some(format!("uid-{}", identity.name)));
        }
    }

    #[test]
    fn a_group_gets_its_nodes_with_distinct_cidrs() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("small", 3));
        let changes = index.plan_node_changes();
        let names: Vec<_> = changes
            .create
            .iter()
            .map(|(id, _)| id.name.as_str())
            .collect();
        assert_eq!(names, ["small-0", "small-1", "small-2"]);
        let cidrs: BTreeSet<_> = changes.create.iter().map(|(id, _)| id.pod_cidr).collect();
        assert_eq!(cidrs.len(), 3);
        // Planned again before registration: nothing new, nothing twice.
        let again = index.plan_node_changes();
        assert!(again.create.is_empty() && again.delete.is_empty());
    }

    #[test]
    fn scaling_down_deletes_the_highest_nodes_and_frees_their_cidrs() {
        let mut index = index("10.0.0.0/22"); // four /24s
        index.upsert_group(pool_group("g", 4));
        let changes = index.plan_node_changes();
        register_all(&mut index, &changes);
        index.group_mut("g").unwrap().source = GroupSource::PoolManaged { desired: 2 };
        let changes = index.plan_node_changes();
        assert_eq!(changes.delete, ["g-2", "g-3"]);
        for name in &changes.delete {
            index.remove_node(name);
        }
        index.group_mut("g").unwrap().source = GroupSource::PoolManaged { desired: 4 };
        let changes = index.plan_node_changes();
        assert_eq!(changes.create.len(), 2, "freed CIDRs are reused");
        assert!(changes.exhausted.is_empty());
    }

    #[test]
    fn cidr_exhaustion_is_reported_per_node() {
        let mut index = index("10.0.0.0/23"); // two /24s
        index.upsert_group(pool_group("g", 3));
        let changes = index.plan_node_changes();
        assert_eq!(changes.create.len(), 2);
        assert_eq!(changes.exhausted.len(), 1);
    }

    #[test]
    fn deployment_groups_follow_their_seats() {
        let mut index = index("10.0.0.0/16");
        let mut group = pool_group("seats", 0);
        group.source = GroupSource::Deployment {
            namespace: "ns".into(),
            name: "d".into(),
            seats: ["seat-a", "seat-b"].map(String::from).into(),
        };
        index.upsert_group(group);
        let changes = index.plan_node_changes();
        register_all(&mut index, &changes);
        assert_eq!(changes.create.len(), 2);
        if let GroupSource::Deployment { seats, .. } = &mut index.group_mut("seats").unwrap().source
        {
            seats.remove("seat-a");
        }
        assert_eq!(index.plan_node_changes().delete, ["seat-a"]);
    }

    #[test]
    fn pod_ips_are_stable_unique_and_released() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 1));
        let changes = index.plan_node_changes();
        register_all(&mut index, &changes);
        let cidr = changes.create[0].0.pod_cidr;
        let a = index.assign_pod_ip("ns/a", "uid-a", "g-0", false).unwrap();
        let b = index.assign_pod_ip("ns/b", "uid-b", "g-0", false).unwrap();
        assert_ne!(a, b);
        assert!(cidr.contains(&a) && cidr.contains(&b));
        assert_eq!(
            index.assign_pod_ip("ns/a", "uid-a", "g-0", false).unwrap(),
            a
        );
        let host = index.assign_pod_ip("ns/h", "uid-h", "g-0", true).unwrap();
        assert_eq!(host, index.node("g-0").unwrap().internal_ip());
        index.forget_pod("ns/a");
        assert_eq!(index.node("g-0").unwrap().ipam.in_use(), 1);
    }

    #[test]
    fn adopted_pods_keep_their_ips() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 1));
        let changes = index.plan_node_changes();
        register_all(&mut index, &changes);
        let node_ip = index.node("g-0").unwrap().internal_ip();
        let existing = Ipv4Addr::from(u32::from(node_ip) + 1);
        index.observe_pod(
            "ns/old",
            "uid-old",
            "g-0",
            Some(existing),
            PodPhase::Running,
        );
        for n in 0..10 {
            let ip = index
                .assign_pod_ip(&format!("ns/new-{n}"), &format!("u{n}"), "g-0", false)
                .unwrap();
            assert_ne!(ip, existing);
        }
        assert_eq!(index.pod_counts(Some("g-0")).running, 1);
        assert_eq!(index.pod_counts(None).pending, 10);
    }

    #[test]
    fn nodes_of_other_pools_are_not_adopted() {
        let mut index = index("10.0.0.0/16");
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "x", "labels": { GROUP_LABEL: "g", POOL_LABEL: "other" } },
            "spec": { "podCIDR": "10.0.1.0/24" }
        }))
        .unwrap();
        assert!(matches!(
            index.adopt_node(&node),
            Err(AdoptError::NotOurs(_))
        ));
    }
}
