//! The pool's in-memory index: node groups, the nodes they should have, the nodes that
//! exist, and the pod IPs handed out. Controllers and the gRPC adapter share it behind a
//! mutex that is never held across an await.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::Ipv4Addr,
    sync::Arc,
    time::{Duration, Instant},
};

use ipnet::Ipv4Net;
use k8s_openapi::{api::core::v1::Node, jiff::Timestamp};

use ksim_provisioning::GroupProvisioning;

use crate::domain::{
    cidr::{CidrError, NodeIpam, PodCidrPool},
    groups::scale_plan_avoiding,
    heartbeat::initial_offset,
    labels::{
        BOOTING_UNTIL_ANNOTATION, GROUP_LABEL, OWNER_KARPENTER, OWNER_LABEL, OWNER_POOL,
        OWNER_SEATS, POOL_LABEL, TERMINATING_UNTIL_ANNOTATION,
    },
    limits::{self, NodePressure, PodLimits, PodMemory},
    node::{NodeIdentity, Phase},
    pod::PodPhase,
    provisioning::{
        GroupModel, NodeDelays, NodeTimes, after, annotated_time, next_wait, register_at,
    },
    skeleton::{NodeSkeleton, quantity_value},
    usage::{self, ContainerUsage, PodMeter, UsageError},
};

/// Where a group's nodes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSource {
    /// Created through the gRPC API; the pool keeps `desired` nodes.
    PoolManaged {
        desired: u32,
        /// When a request last raised `desired`: the scale-up its new nodes count from.
        scaled_up: Timestamp,
    },
    /// One node per seat pod of a Deployment labelled with the group.
    Deployment {
        namespace: String,
        name: String,
        /// Seat name -> its creationTimestamp, the scale-up its node counts from.
        seats: BTreeMap<String, Timestamp>,
    },
    /// The nodes Karpenter launched for the NodePool the group is named after. Karpenter
    /// creates and deletes them; the pool only plays their kubelet.
    Karpenter,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub skeleton: Arc<NodeSkeleton>,
    pub source: GroupSource,
    pub created: Timestamp,
    /// The provisioning model the group's nodes follow; `None`: no delays.
    pub provisioning: Option<GroupProvisioning>,
}

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// A podCIDR is reserved; the Node object is created at `register_at` (the model's
    /// registration delay after the scale-up).
    Waiting,
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
    /// Drawn from the group's model when the node was planned (zero without one).
    pub delays: NodeDelays,
    /// `delays` came from the group's model. A node that existed before its group had one
    /// (a group's initial nodes, or nodes adopted after a restart) gets its termination drawn
    /// when the model arrives: a cloud's every instance takes its termination time.
    pub drawn: bool,
    /// When a [`NodeState::Waiting`] node is to be created.
    pub register_at: Option<Timestamp>,
    /// When the node turns Ready by its model; `None`: Ready from its registration.
    pub ready_at: Option<Timestamp>,
    /// The apiserver shows the node booting: its Ready write is still to come.
    pub booting: bool,
    /// Shutting down since, gone at: its seat went or its group shrank.
    pub terminating: Option<(Timestamp, Timestamp)>,
    /// Someone else (Karpenter) created the node and deletes it: the pool never plans it away.
    pub external: bool,
    /// The node's own shape, for a node whose group's nodes differ (Karpenter picks an
    /// instance type per node); `None`: its group's skeleton.
    pub shape: Option<Arc<NodeSkeleton>>,
    /// A status write for the node is in flight: one writer at a time, so a heartbeat's
    /// booting conditions never land after the write that made the node Ready.
    pub status_busy: bool,
    /// Stopped by `FailNodes`, as a machine that lost power: no lease renewal, no status
    /// write, its pods left as they are.
    pub failed: bool,
    /// When the node last came back from a failure: its conditions changed then, whatever
    /// its model says (the node lifecycle controller had set them Unknown).
    pub recovered: Option<Timestamp>,
}

impl NodeEntry {
    pub fn internal_ip(&self) -> Ipv4Addr {
        self.ipam.node_ip()
    }

    pub fn is_ready(&self) -> bool {
        self.state == NodeState::Registered
            && self.last_heartbeat.is_some()
            && !self.booting
            && self.terminating.is_none()
            && !self.failed
    }

    /// When the node's life changes by its model.
    pub fn times(&self) -> NodeTimes {
        NodeTimes {
            created: self.created,
            ready_at: self.ready_at,
            terminating: self.terminating,
        }
    }

    /// The node's phase at `now`, and since when its Ready condition says so.
    pub fn phase(&self, now: Timestamp) -> (Phase, Timestamp) {
        let (phase, since) = self.times().phase(now);
        (phase, self.recovered.map_or(since, |at| since.max(at)))
    }

    fn new(name: String, group: String, cidr: Ipv4Net, created: Timestamp) -> Self {
        Self {
            name,
            group,
            pod_cidr: cidr,
            ipam: NodeIpam::new(cidr),
            state: NodeState::Creating,
            uid: None,
            created,
            last_heartbeat: None,
            next_renewal: None,
            next_status: None,
            delays: NodeDelays::default(),
            drawn: false,
            register_at: None,
            ready_at: None,
            booting: false,
            terminating: None,
            status_busy: false,
            external: false,
            shape: None,
            failed: false,
            recovered: None,
        }
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
    /// What the pod uses, once someone set it.
    usage: Option<PodMeter>,
    /// What enforcing its limits needs; most pods have none to keep.
    limits: Option<Box<PodLimits>>,
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

/// A node to register now.
#[derive(Debug, Clone)]
pub struct NewNode {
    pub identity: NodeIdentity,
    pub skeleton: Arc<NodeSkeleton>,
    /// Registered booting, Ready at this time; `None`: Ready at once.
    pub ready_at: Option<Timestamp>,
}

/// Nodes to create, delete and change to reach the groups' desired state.
#[derive(Debug, Default)]
pub struct NodeChanges {
    pub create: Vec<NewNode>,
    pub delete: Vec<String>,
    /// Nodes that could not get a podCIDR.
    pub exhausted: Vec<(String, CidrError)>,
    /// Nodes to mark shutting down (unschedulable, NotReady), with when they go.
    pub terminate: Vec<(String, Timestamp)>,
    /// Booting nodes whose time to be Ready came, with that time.
    pub ready: Vec<(String, Timestamp)>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("node {0} has no pool labels")]
    NotOurs(String),
    #[error("node {node} has no usable podCIDR: {reason}")]
    BadCidr { node: String, reason: String },
    #[error("no podCIDR is left for node {node}: {source}")]
    NoCidr { node: String, source: CidrError },
}

/// A node someone else created that the pool now plays the kubelet for; what its first
/// writes (labels, podCIDR, status, lease) need.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub identity: NodeIdentity,
    /// Whether the node has no podCIDR yet: the pool's is written with its labels.
    pub set_pod_cidr: bool,
    /// Booting until then by its group's model; `None`: Ready at once.
    pub ready_at: Option<Timestamp>,
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
    /// The provisioning model of each group that has one, with its draws so far.
    models: HashMap<String, GroupModel>,
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
            models: HashMap::new(),
        }
    }

    pub fn pool(&self) -> &str {
        &self.pool
    }

    // ---- groups ----

    /// Adds or replaces a group. Its model's stream goes on while the model stays the same,
    /// and starts again when the model changes.
    pub fn upsert_group(&mut self, group: Group) {
        match &group.provisioning {
            Some(provisioning) => {
                let same = self
                    .models
                    .get(&group.name)
                    .is_some_and(|model| model.provisioning() == provisioning);
                if !same {
                    self.models.insert(
                        group.name.clone(),
                        GroupModel::new(provisioning.clone(), &group.name),
                    );
                }
            }
            None => {
                self.models.remove(&group.name);
            }
        }
        let name = group.name.clone();
        self.groups.insert(group.name.clone(), group);
        self.draw_for_existing(&name);
    }

    /// Draws the termination of the group's nodes that exist without draws, in name order,
    /// from the group's model: they registered and turned Ready before it came, so only how
    /// long they take to go is still to be decided.
    fn draw_for_existing(&mut self, group: &str) {
        let Some(model) = self.models.get_mut(group) else {
            return;
        };
        for node in self.nodes.values_mut() {
            if node.group == group && !node.drawn && !node.external {
                node.delays.termination = model.next_node().termination;
                node.drawn = true;
            }
        }
    }

    /// An internal group: its nodes are managed like any other but it is not listed, and
    /// every pod on them uses the node's own IP.
    pub fn upsert_internal_group(&mut self, group: Group) {
        self.internal_groups.insert(group.name.clone());
        self.upsert_group(group);
    }

    pub fn remove_group(&mut self, name: &str) -> Option<Group> {
        self.models.remove(name);
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
        let mut entry = NodeEntry::new(name.clone(), group.clone(), cidr, created);
        entry.state = NodeState::Registered;
        entry.uid = node.metadata.uid.clone();
        // Renew at once: the previous process may have been gone a while.
        entry.next_renewal = Some(Instant::now());
        entry.next_status = Some(Instant::now());
        // What the model decided before the restart is on the node; the first status
        // refresh writes the phase these times give now.
        entry.ready_at = annotated_time(node, BOOTING_UNTIL_ANNOTATION);
        entry.booting = entry.ready_at.is_some_and(|at| Timestamp::now() < at);
        entry.terminating = annotated_time(node, TERMINATING_UNTIL_ANNOTATION)
            .map(|gone| (Timestamp::now().min(gone), gone));
        // Karpenter's node: it stays until Karpenter deletes it, whatever groups exist yet.
        if labels.get(OWNER_LABEL).map(String::as_str) == Some(OWNER_KARPENTER) {
            entry.external = true;
            entry.shape = NodeSkeleton::from_node(node.clone()).ok().map(Arc::new);
        }
        self.nodes.insert(name, entry);
        // Its draws were not kept across the restart; the model still decides how it goes.
        self.draw_for_existing(group);
        Ok(())
    }

    /// Takes over a node Karpenter created for `group` (its NodePool), which must exist: a
    /// podCIDR is claimed (the node's own, after a restart) or allocated, and the group's model
    /// draws its delays. The node boots from its creation for the model's registration and
    /// ready delays together: Karpenter made the Node object at once, the instance behind it
    /// would still be coming up. `Ok(None)`: the node is the pool's already.
    pub fn adopt_external(
        &mut self,
        node: &Node,
        group: &str,
        now: Timestamp,
    ) -> Result<Option<Adopted>, AdoptError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        if self.nodes.contains_key(&name) {
            return Ok(None);
        }
        let existing = node
            .spec
            .as_ref()
            .and_then(|spec| spec.pod_cidr.as_deref())
            .filter(|cidr| !cidr.is_empty());
        let cidr = match existing {
            Some(cidr) => {
                let bad_cidr = |reason: String| AdoptError::BadCidr {
                    node: name.clone(),
                    reason,
                };
                let cidr: Ipv4Net = cidr.parse().map_err(|e| bad_cidr(format!("{e}")))?;
                self.cidrs
                    .claim(cidr)
                    .map_err(|e| bad_cidr(e.to_string()))?;
                cidr
            }
            None => self.cidrs.allocate().map_err(|source| AdoptError::NoCidr {
                node: name.clone(),
                source,
            })?,
        };
        let created = node
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |time| time.0);
        let delays = self
            .models
            .get_mut(group)
            .map(GroupModel::next_node)
            .unwrap_or_default();
        let boot = delays.registration.saturating_add(delays.ready);
        // A node adopted again after a restart keeps the time its model gave it.
        let ready_at = annotated_time(node, BOOTING_UNTIL_ANNOTATION)
            .or_else(|| (!boot.is_zero()).then(|| after(created, boot)));
        let mut entry = NodeEntry::new(name.clone(), group.to_owned(), cidr, created);
        entry.delays = delays;
        entry.drawn = self.models.contains_key(group);
        entry.external = true;
        entry.shape = NodeSkeleton::from_node(node.clone()).ok().map(Arc::new);
        entry.uid = node.metadata.uid.clone();
        entry.ready_at = ready_at;
        entry.booting = ready_at.is_some_and(|at| now < at);
        let identity = NodeIdentity {
            name: name.clone(),
            group: group.to_owned(),
            pool: self.pool.clone(),
            owner: OWNER_KARPENTER,
            pod_cidr: cidr,
            internal_ip: entry.ipam.node_ip(),
        };
        self.nodes.insert(name, entry);
        Ok(Some(Adopted {
            identity,
            set_pod_cidr: existing.is_none(),
            ready_at: ready_at.filter(|at| now < *at),
        }))
    }

    /// What to create, delete and change at `now` so every group has exactly its desired
    /// nodes. Nodes to create get their podCIDR reserved here, so concurrent plans never
    /// collide, and their delays drawn from their group's model, in the order they are
    /// created (scale-up time, then name).
    pub fn plan_node_changes(&mut self, now: Timestamp) -> NodeChanges {
        let mut changes = NodeChanges::default();
        // Node name -> (group, the scale-up it counts from).
        let mut desired: BTreeMap<String, (String, Timestamp)> = BTreeMap::new();
        for group in self.groups.values() {
            match &group.source {
                GroupSource::PoolManaged {
                    desired: count,
                    scaled_up,
                } => {
                    let existing: BTreeSet<String> = self
                        .nodes_of(&group.name)
                        .filter(|node| {
                            node.state != NodeState::Deleting && node.terminating.is_none()
                        })
                        .map(|node| node.name.clone())
                        .collect();
                    // A node shutting down keeps its name until it is gone.
                    let taken: BTreeSet<String> = self
                        .nodes_of(&group.name)
                        .filter(|node| node.terminating.is_some())
                        .map(|node| node.name.clone())
                        .collect();
                    let plan = scale_plan_avoiding(&group.name, *count, &existing, &taken);
                    let deleting: BTreeSet<&String> = plan.delete.iter().collect();
                    let names = existing
                        .iter()
                        .filter(|name| !deleting.contains(name))
                        .cloned()
                        .chain(plan.create);
                    for name in names {
                        desired.insert(name, (group.name.clone(), *scaled_up));
                    }
                }
                GroupSource::Deployment { seats, .. } => {
                    for (seat, created) in seats {
                        desired.insert(seat.clone(), (group.name.clone(), *created));
                    }
                }
                // Karpenter creates and deletes its nodes itself.
                GroupSource::Karpenter => {}
            }
        }
        let lingers = |index: &Self, group: &str| {
            index.groups.contains_key(group)
                && index.models.get(group).is_some_and(GroupModel::lingers)
        };
        let mut forget = Vec::new();
        for node in self.nodes.values() {
            let wanted = node.external
                || desired
                    .get(&node.name)
                    .is_some_and(|(group, _)| *group == node.group);
            match (node.state, node.terminating) {
                (NodeState::Waiting, _) if !wanted => forget.push(node.name.clone()),
                // Gone when its time comes, or at once when its group (or its group's model)
                // went: a run's cleanup removes nodes without waiting.
                (NodeState::Registered, Some((_, gone)))
                    if gone <= now || !lingers(self, &node.group) =>
                {
                    changes.delete.push(node.name.clone());
                }
                (NodeState::Registered, None) if !wanted => {
                    let termination = node.delays.termination;
                    // A failed node has no kubelet to shut it down: the cloud deletes the
                    // dead machine.
                    if termination.is_zero() || !lingers(self, &node.group) || node.failed {
                        changes.delete.push(node.name.clone());
                    } else {
                        changes
                            .terminate
                            .push((node.name.clone(), after(now, termination)));
                    }
                }
                (NodeState::Registered, None)
                    if node.booting
                        && !node.status_busy
                        && !node.failed
                        && node.ready_at.is_some_and(|at| at <= now) =>
                {
                    // Since its ready time, or its recovery if that came later.
                    changes.ready.push((node.name.clone(), node.phase(now).1));
                }
                _ => {}
            }
        }
        for name in forget {
            self.remove_node(&name);
        }
        for name in &changes.delete {
            if let Some(node) = self.nodes.get_mut(name) {
                node.state = NodeState::Deleting;
            }
        }
        for (name, gone) in &changes.terminate {
            if let Some(node) = self.nodes.get_mut(name) {
                node.terminating = Some((now, *gone));
                node.booting = false;
            }
        }
        for (name, _) in &changes.ready {
            if let Some(node) = self.nodes.get_mut(name) {
                node.status_busy = true;
            }
        }
        // Waiting nodes whose registration came.
        let due: Vec<String> = self
            .nodes
            .values()
            .filter(|node| {
                node.state == NodeState::Waiting && node.register_at.is_some_and(|at| at <= now)
            })
            .map(|node| node.name.clone())
            .collect();
        for name in due {
            if let Some(new) = self.start_creating(&name, now) {
                changes.create.push(new);
            }
        }
        // New nodes, in the order their groups scaled up.
        let mut new: Vec<(String, Timestamp, String)> = desired
            .into_iter()
            .filter(|(name, _)| !self.nodes.contains_key(name))
            .map(|(name, (group, scaled_up))| (group, scaled_up, name))
            .collect();
        new.sort();
        for (group, scaled_up, name) in new {
            if !self.groups.contains_key(&group) {
                continue;
            }
            match self.cidrs.allocate() {
                Ok(cidr) => {
                    let model = self.models.get_mut(&group);
                    let drawn = model.is_some();
                    let delays = model.map(GroupModel::next_node).unwrap_or_default();
                    let mut entry = NodeEntry::new(name.clone(), group, cidr, now);
                    entry.delays = delays;
                    entry.drawn = drawn;
                    entry.state = NodeState::Waiting;
                    let due = register_at(scaled_up, &delays);
                    entry.register_at = Some(due);
                    self.nodes.insert(name.clone(), entry);
                    // Without a registration delay, on this very pass, as without a model.
                    if (delays.registration.is_zero() || due <= now)
                        && let Some(new) = self.start_creating(&name, now)
                    {
                        changes.create.push(new);
                    }
                }
                Err(error) => changes.exhausted.push((name, error)),
            }
        }
        changes
    }

    /// A waiting node is registered now: booting until its ready delay has passed.
    fn start_creating(&mut self, name: &str, now: Timestamp) -> Option<NewNode> {
        let node = self.nodes.get(name)?;
        let group = self.groups.get(&node.group)?;
        let owner = match group.source {
            GroupSource::PoolManaged { .. } => OWNER_POOL,
            GroupSource::Deployment { .. } => OWNER_SEATS,
            GroupSource::Karpenter => OWNER_KARPENTER,
        };
        let skeleton = group.skeleton.clone();
        let node = self.nodes.get_mut(name)?;
        let ready_at = (!node.delays.ready.is_zero()).then(|| after(now, node.delays.ready));
        node.state = NodeState::Creating;
        node.register_at = None;
        node.created = now;
        node.ready_at = ready_at;
        node.booting = ready_at.is_some();
        Some(NewNode {
            identity: NodeIdentity {
                name: node.name.clone(),
                group: node.group.clone(),
                pool: self.pool.clone(),
                owner,
                pod_cidr: node.pod_cidr,
                internal_ip: node.ipam.node_ip(),
            },
            skeleton,
            ready_at,
        })
    }

    /// How long until the next node is due to register, turn Ready or go; `None` if none is.
    pub fn next_wait(&self, now: Timestamp) -> Option<Duration> {
        next_wait(
            now,
            self.nodes.values().filter_map(|node| match node.state {
                NodeState::Waiting => node.register_at,
                NodeState::Registered => match node.terminating {
                    Some((_, gone)) => Some(gone),
                    // A Ready write in flight wakes the controller when it ends; a failed
                    // node's comes with its recovery, from the heartbeats.
                    None if node.booting && !node.status_busy && !node.failed => node.ready_at,
                    None => None,
                },
                NodeState::Creating | NodeState::Deleting => None,
            }),
        )
    }

    /// The write that made a booting node Ready ended.
    pub fn ready_written(&mut self, name: &str, written: bool) {
        if let Some(node) = self.nodes.get_mut(name) {
            node.status_busy = false;
            if written {
                node.booting = false;
            }
        }
    }

    /// The node's shutdown was written at `at`: its termination counts from then, the moment
    /// the cluster sees its removal begin, not from the plan (a write to a busy apiserver takes
    /// seconds, which a recording of this pool would take off every node's termination). The
    /// annotation keeps the planned time, so a restart resumes up to that write's latency early.
    pub fn termination_written(&mut self, name: &str, at: Timestamp) {
        if let Some(node) = self.nodes.get_mut(name)
            && let Some((since, _)) = node.terminating
        {
            node.terminating = Some((since, after(at, node.delays.termination)));
        }
    }

    /// Marking a node shutting down failed: it is planned again.
    pub fn termination_failed(&mut self, name: &str) {
        if let Some(node) = self.nodes.get_mut(name) {
            node.terminating = None;
        }
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

    /// Whether `name` is a node the API lists: registered, of a listed group.
    fn is_listed_node(&self, name: &str) -> bool {
        self.nodes.get(name).is_some_and(|node| {
            node.state == NodeState::Registered && !self.internal_groups.contains(&node.group)
        })
    }

    /// Stops the named nodes, as machines that lost power; a refused name changes nothing.
    /// The names of the nodes that were not failed yet.
    pub fn fail_nodes(&mut self, names: &[String]) -> Result<Vec<String>, NodeNamesError> {
        check_node_names(names, |name| self.is_listed_node(name))?;
        let mut failed = Vec::new();
        for name in names {
            if let Some(node) = self.nodes.get_mut(name)
                && !node.failed
            {
                node.failed = true;
                failed.push(name.clone());
            }
        }
        Ok(failed)
    }

    /// Brings failed nodes back at `now`: their lease renewal and status write are due at
    /// `due`. A refused name changes nothing. The names of the nodes that were failed.
    pub fn recover_nodes(
        &mut self,
        names: &[String],
        now: Timestamp,
        due: Instant,
    ) -> Result<Vec<String>, NodeNamesError> {
        check_node_names(names, |name| self.is_listed_node(name))?;
        let mut recovered = Vec::new();
        for name in names {
            if let Some(node) = self.nodes.get_mut(name)
                && node.failed
            {
                node.failed = false;
                node.recovered = Some(now);
                node.next_renewal = Some(due);
                node.next_status = Some(due);
                recovered.push(name.clone());
            }
        }
        Ok(recovered)
    }

    /// Whether `node` is the pool's and failed.
    pub fn is_failed(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|node| node.failed)
    }

    /// How many of the pool's nodes are failed.
    pub fn failed_nodes(&self) -> usize {
        self.nodes.values().filter(|node| node.failed).count()
    }

    /// Spreads every registered node's next lease renewal over `interval` from `now` by its
    /// name's phase: after the lease changed, a shorter interval applies at once rather than
    /// after the renewals already planned at the old one.
    pub fn respread_renewals(&mut self, interval: Duration, now: Instant) {
        for node in self.nodes.values_mut() {
            if node.state == NodeState::Registered && node.next_renewal.is_some() {
                node.next_renewal = Some(now + initial_offset(&node.name, interval));
            }
        }
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
                usage: None,
                limits: None,
            },
        );
        self.release_pod_ip(previous);
        Ok(ip.unwrap_or(node_ip))
    }

    /// Records a pod seen on one of our nodes with its limits (which a resize may change);
    /// an IP it already has is claimed (adoption after a restart), so it is not handed to
    /// another pod.
    pub fn observe_pod(
        &mut self,
        key: &str,
        uid: &str,
        node: &str,
        ip: Option<Ipv4Addr>,
        phase: PodPhase,
        limits: Option<Box<PodLimits>>,
    ) {
        let Some(entry) = self.nodes.get_mut(node) else {
            return;
        };
        if let Some(pod) = self.pods.get_mut(key)
            && pod.uid == uid
        {
            pod.phase = phase;
            pod.limits = limits;
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
                usage: None,
                limits,
            },
        );
        self.release_pod_ip(previous);
    }

    /// Frees a finished pod's IP but keeps counting it by phase.
    pub fn pod_finished(&mut self, key: &str, phase: PodPhase) {
        if let Some(pod) = self.pods.get_mut(key) {
            pod.phase = phase;
            pod.usage = None;
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

    // ---- usage ----

    /// Sets what a pod uses from `now` on, as its limits let it (`domain::limits`): CPU above a
    /// limit is capped and counted as throttled, memory above one kills the container, whose
    /// usage starts over from nothing. Only a running pod of this pool takes usage: `Ok(None)`
    /// says there is none by that key, and nothing was set. Bad figures are refused whether or
    /// not the pod is ours.
    pub fn set_pod_usage(
        &mut self,
        key: &str,
        containers: Vec<ContainerUsage>,
        now: Timestamp,
    ) -> Result<Option<LimitEvents>, UsageError> {
        usage::validate(&containers)?;
        if !self.runs_pod(key) {
            return Ok(None);
        }
        let Some(pod) = self.pods.get_mut(key) else {
            return Ok(None);
        };
        let limits = pod.limits.as_deref();
        let enforced = limits::enforce(containers, limits.map_or(&[], |l| &l.containers));
        let meter = match pod.usage.take() {
            Some(meter) => meter,
            None => PodMeter::new(enforced.usage.clone(), now)?,
        };
        let meter = pod.usage.insert(meter);
        let throttled = meter.set_throttled(enforced.usage, &enforced.throttled, now)?;
        for container in &enforced.oom_killed {
            meter.restart(container, now);
        }
        Ok(Some(LimitEvents {
            oom_killed: enforced.oom_killed,
            restarts: limits.is_none_or(|l| l.restart_policy.restarts_after_oom()),
            throttled,
        }))
    }

    /// The node a tracked pod is bound to.
    pub fn pod_node(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|pod| pod.node.as_str())
    }

    /// The memory capacity a node registered with (`status.capacity.memory` of its own shape
    /// or its group's skeleton), bytes; `None` for a node whose group is gone.
    pub fn memory_capacity(&self, node: &str) -> Option<u64> {
        let node = self.nodes.get(node)?;
        let skeleton = match &node.shape {
            Some(shape) => shape,
            None => &self.groups.get(&node.group)?.skeleton,
        };
        let value = quantity_value(&skeleton.capacity.get("memory")?.0)?;
        // The skeleton's quantities were checked; `as` saturates anything absurd.
        (value.is_finite() && value >= 0.0).then(|| value.round() as u64)
    }

    /// The memory pressure on each of `nodes` that is short of memory (`domain::limits`): its
    /// metered running pods' working sets against its capacity, in one pass over the pods. A
    /// pod not measured yet uses nothing, as a pod without stats is not ranked by a kubelet.
    pub fn memory_pressure(&self, nodes: &BTreeSet<String>) -> Vec<(String, NodePressure<PodKey>)> {
        let mut on_node: BTreeMap<&str, Vec<PodMemory<PodKey>>> = BTreeMap::new();
        for (key, pod) in &self.pods {
            if pod.phase != PodPhase::Running || !nodes.contains(&pod.node) {
                continue;
            }
            // A failed node's kubelet evicts nothing.
            if self.is_failed(&pod.node) {
                continue;
            }
            let Some(meter) = &pod.usage else { continue };
            on_node.entry(&pod.node).or_default().push(PodMemory {
                key: key.clone(),
                used: meter.total().1,
                requested: pod.limits.as_ref().map_or(0, |l| l.memory_requested),
                priority: pod.limits.as_ref().map_or(0, |l| l.priority),
            });
        }
        on_node
            .into_iter()
            .filter_map(|(node, mut pods)| {
                let capacity = self.memory_capacity(node)?;
                // The pods come from a hash map: a fixed order keeps ties deterministic.
                pods.sort_by(|a, b| a.key.cmp(&b.key));
                let pressure = limits::node_pressure(capacity, &pods)?;
                Some((node.to_owned(), pressure))
            })
            .collect()
    }

    /// Whether a pod of this pool is running by that key. A failed node's pods are not: no
    /// kubelet measures them, kills or evicts them.
    pub fn runs_pod(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|pod| pod.phase == PodPhase::Running && !self.is_failed(&pod.node))
    }

    /// Stops metering a pod: it is reported without usage, as a pod no kubelet measured yet.
    pub fn clear_pod_usage(&mut self, key: &str) -> bool {
        self.pods
            .get_mut(key)
            .is_some_and(|pod| pod.usage.take().is_some())
    }

    /// The metered running pods, each with its node; none of a failed node, whose kubelet
    /// answers no scrape.
    pub fn pod_usage(&self) -> impl Iterator<Item = PodUsage<'_>> {
        let failed: BTreeSet<&str> = self
            .nodes
            .values()
            .filter(|node| node.failed)
            .map(|node| node.name.as_str())
            .collect();
        self.pods.iter().filter_map(move |(key, pod)| {
            let meter = pod.usage.as_ref().filter(|_| {
                pod.phase == PodPhase::Running
                    && (failed.is_empty() || !failed.contains(pod.node.as_str()))
            })?;
            Some(PodUsage {
                key,
                node: &pod.node,
                meter,
            })
        })
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

/// What a pod's limits made of the usage set for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitEvents {
    /// Containers killed for memory above their limit.
    pub oom_killed: Vec<String>,
    /// Whether killed containers start again (the pod's restart policy says so).
    pub restarts: bool,
    /// Throttled CPU-seconds each container accrued since the pod's previous set.
    pub throttled: Vec<(String, f64)>,
}

/// A metered pod as the readers of usage see it.
#[derive(Debug, Clone, Copy)]
pub struct PodUsage<'a> {
    /// `namespace/name`.
    pub key: &'a str,
    pub node: &'a str,
    pub meter: &'a PodMeter,
}

impl<'a> PodUsage<'a> {
    pub fn namespace(&self) -> &'a str {
        self.key
            .split_once('/')
            .map_or("", |(namespace, _)| namespace)
    }

    pub fn name(&self) -> &'a str {
        self.key.split_once('/').map_or(self.key, |(_, name)| name)
    }
}

/// Why the node names of a `FailNodes` or `RecoverNodes` request are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNamesError {
    #[error("no node named: name at least one")]
    Empty,
    #[error("node {0:?} is named twice")]
    Repeated(String),
    #[error("node {0:?} is not a registered node of this pool")]
    Unknown(String),
}

/// Checks a request's node names: at least one, none twice, each `known`; the malformed
/// request is refused before any name is looked up, then the first unknown name.
pub fn check_node_names(
    names: &[String],
    known: impl Fn(&str) -> bool,
) -> Result<(), NodeNamesError> {
    if names.is_empty() {
        return Err(NodeNamesError::Empty);
    }
    let mut seen = BTreeSet::new();
    if let Some(repeated) = names.iter().find(|name| !seen.insert(name.as_str())) {
        return Err(NodeNamesError::Repeated(repeated.clone()));
    }
    match names.iter().find(|name| !known(name)) {
        Some(unknown) => Err(NodeNamesError::Unknown(unknown.clone())),
        None => Ok(()),
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
            source: GroupSource::PoolManaged {
                desired,
                scaled_up: start(),
            },
            created: start(),
            provisioning: None,
        }
    }

    fn start() -> Timestamp {
        "2026-03-01T12:00:00Z".parse().unwrap()
    }

    fn secs(n: i64) -> Timestamp {
        start() + k8s_openapi::jiff::SignedDuration::from_secs(n)
    }

    fn set_desired(index: &mut PoolIndex, group: &str, count: u32, at: Timestamp) {
        index.group_mut(group).unwrap().source = GroupSource::PoolManaged {
            desired: count,
            scaled_up: at,
        };
    }

    fn register_all(index: &mut PoolIndex, changes: &NodeChanges) {
        for new in &changes.create {
            let name = &new.identity.name;
            index.node_registered(name, Some(format!("uid-{name}")));
        }
    }

    fn created(changes: &NodeChanges) -> Vec<&str> {
        changes
            .create
            .iter()
            .map(|new| new.identity.name.as_str())
            .collect()
    }

    fn model(registration: u64, ready: u64, termination: u64) -> GroupProvisioning {
        use ksim_provisioning::{Delay, NodeDelays as ModelDelays};
        GroupProvisioning {
            model: "test-model".to_owned(),
            seed: 7,
            speed: 2.0,
            nodes: ModelDelays {
                registration: Delay::fixed_secs(registration),
                ready: Delay::fixed_secs(ready),
                termination: Delay::fixed_secs(termination),
            },
        }
    }

    fn modelled(name: &str, desired: u32, provisioning: GroupProvisioning) -> Group {
        Group {
            provisioning: Some(provisioning),
            ..pool_group(name, desired)
        }
    }

    #[test]
    fn a_node_registers_then_turns_ready_when_its_model_says() {
        let mut index = index("10.0.0.0/16");
        // Recorded 60 s, 30 s and 20 s at speed 2.
        index.upsert_group(modelled("g", 1, model(60, 30, 20)));
        let changes = index.plan_node_changes(start());
        assert!(
            changes.create.is_empty(),
            "not before its registration delay"
        );
        assert_eq!(index.node("g-0").unwrap().state, NodeState::Waiting);
        assert_eq!(index.next_wait(start()), Some(Duration::from_secs(30)));
        assert!(index.plan_node_changes(secs(29)).create.is_empty());
        let changes = index.plan_node_changes(secs(30));
        assert_eq!(created(&changes), ["g-0"]);
        assert_eq!(changes.create[0].ready_at, Some(secs(45)));
        register_all(&mut index, &changes);
        let node = index.node("g-0").unwrap();
        assert!(node.booting && !node.is_ready());
        assert_eq!(node.phase(secs(40)), (Phase::Booting, secs(30)));
        assert_eq!(index.next_wait(secs(40)), Some(Duration::from_secs(5)));
        assert!(index.plan_node_changes(secs(44)).ready.is_empty());
        let changes = index.plan_node_changes(secs(45));
        assert_eq!(changes.ready, [("g-0".to_owned(), secs(45))]);
        // The write is in flight: not planned twice, not waited for.
        assert!(index.plan_node_changes(secs(46)).ready.is_empty());
        assert_eq!(index.next_wait(secs(46)), None);
        index.ready_written("g-0", true);
        assert!(!index.node("g-0").unwrap().booting);
        assert_eq!(
            index.node("g-0").unwrap().phase(secs(50)),
            (Phase::Ready, secs(45))
        );
    }

    #[test]
    fn a_removed_node_shuts_down_then_goes_and_keeps_its_name_meanwhile() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(modelled("g", 1, model(0, 0, 20)));
        let changes = index.plan_node_changes(start());
        assert_eq!(created(&changes), ["g-0"]);
        register_all(&mut index, &changes);
        set_desired(&mut index, "g", 0, start());
        let changes = index.plan_node_changes(secs(100));
        assert!(changes.delete.is_empty());
        assert_eq!(changes.terminate, [("g-0".to_owned(), secs(110))]);
        assert_eq!(
            index.node("g-0").unwrap().phase(secs(101)),
            (Phase::ShuttingDown, secs(100))
        );
        assert_eq!(index.next_wait(secs(105)), Some(Duration::from_secs(5)));
        // Scaled up again meanwhile: a new node, under another name.
        set_desired(&mut index, "g", 1, secs(105));
        let changes = index.plan_node_changes(secs(105));
        assert_eq!(created(&changes), ["g-1"]);
        assert!(changes.terminate.is_empty() && changes.delete.is_empty());
        let changes = index.plan_node_changes(secs(110));
        assert_eq!(changes.delete, ["g-0"]);
    }

    #[test]
    fn a_node_lingers_its_termination_from_when_its_shutdown_was_written() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(modelled("g", 1, model(0, 0, 20)));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        set_desired(&mut index, "g", 0, start());
        // 20 s recorded at speed 2.
        assert_eq!(
            index.plan_node_changes(secs(100)).terminate,
            [("g-0".to_owned(), secs(110))]
        );
        // The write landed three seconds after the plan.
        index.termination_written("g-0", secs(103));
        assert_eq!(index.next_wait(secs(110)), Some(Duration::from_secs(3)));
        assert!(index.plan_node_changes(secs(110)).delete.is_empty());
        assert_eq!(
            index.node("g-0").unwrap().phase(secs(111)),
            (Phase::ShuttingDown, secs(100))
        );
        assert_eq!(index.plan_node_changes(secs(113)).delete, ["g-0"]);
    }

    #[test]
    fn nodes_shutting_down_go_at_once_when_their_model_does() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(modelled("g", 1, model(0, 0, 20)));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        set_desired(&mut index, "g", 0, start());
        assert_eq!(index.plan_node_changes(secs(1)).terminate.len(), 1);
        // The run's cleanup takes the model away: no more waiting.
        index.upsert_group(pool_group("g", 0));
        assert_eq!(index.plan_node_changes(secs(2)).delete, ["g-0"]);
    }

    #[test]
    fn nodes_that_existed_before_the_model_still_take_its_termination() {
        let mut index = index("10.0.0.0/16");
        // The group's initial nodes, registered before the driver put the model on it.
        index.upsert_group(pool_group("g", 2));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        assert_eq!(
            index.node("g-0").unwrap().delays.termination,
            Duration::ZERO
        );
        // Recorded 40 s at speed 2.
        index.upsert_group(modelled("g", 2, model(0, 0, 40)));
        for name in ["g-0", "g-1"] {
            let node = index.node(name).unwrap();
            assert_eq!(node.delays.termination, Duration::from_secs(20), "{name}");
            assert_eq!(
                node.delays.registration,
                Duration::ZERO,
                "{name} is registered"
            );
        }
        // The same model again draws nothing more; a removed node lingers its termination.
        index.upsert_group(modelled("g", 2, model(0, 0, 40)));
        set_desired(&mut index, "g", 1, start());
        let changes = index.plan_node_changes(secs(1));
        assert!(changes.delete.is_empty(), "{:?}", changes.delete);
        assert_eq!(changes.terminate, [("g-1".to_owned(), secs(21))]);
    }

    #[test]
    fn a_node_still_waiting_to_register_is_dropped_without_a_write() {
        let mut index = index("10.0.0.0/23"); // two /24s
        index.upsert_group(modelled("g", 1, model(86_400, 0, 0)));
        assert!(index.plan_node_changes(start()).create.is_empty());
        assert_eq!(index.free_cidrs(), 1, "its podCIDR is reserved");
        set_desired(&mut index, "g", 0, start());
        let changes = index.plan_node_changes(secs(1));
        assert!(changes.delete.is_empty() && changes.terminate.is_empty());
        assert!(index.node("g-0").is_none());
        assert_eq!(index.free_cidrs(), 2);
    }

    #[test]
    fn zero_delays_plan_exactly_as_no_model() {
        let plan = |group: Group| {
            let mut index = index("10.0.0.0/16");
            index.upsert_group(group);
            let changes = index.plan_node_changes(start());
            let first: Vec<(String, Option<Timestamp>)> = changes
                .create
                .iter()
                .map(|new| (new.identity.name.clone(), new.ready_at))
                .collect();
            register_all(&mut index, &changes);
            set_desired(&mut index, "g", 1, start());
            let changes = index.plan_node_changes(start());
            let wait = index.next_wait(start());
            (first, changes.delete, changes.terminate, wait)
        };
        let without = plan(pool_group("g", 3));
        assert_eq!(plan(modelled("g", 3, model(0, 0, 0))), without);
        assert_eq!(without.0.len(), 3);
        assert_eq!(without.1, ["g-1", "g-2"]);
        assert_eq!(without.3, None, "nothing to wake up for");
    }

    #[test]
    fn delays_are_drawn_in_the_order_the_seats_scaled_up() {
        use ksim_provisioning::{Delay, NodeDelays as ModelDelays};
        let spread = Delay::Samples((1..=50).map(Duration::from_secs).collect());
        let provisioning = GroupProvisioning {
            model: "spread".to_owned(),
            seed: 3,
            speed: 1.0,
            nodes: ModelDelays {
                registration: spread.clone(),
                ready: spread.clone(),
                termination: spread,
            },
        };
        let mut group = modelled("s", 0, provisioning.clone());
        // Named against their creation order.
        group.source = GroupSource::Deployment {
            namespace: "ns".into(),
            name: "d".into(),
            seats: [
                ("seat-z", start()),
                ("seat-a", secs(5)),
                ("seat-m", secs(9)),
            ]
            .map(|(name, at)| (name.to_owned(), at))
            .into(),
        };
        let mut index = index("10.0.0.0/16");
        index.upsert_group(group.clone());
        index.plan_node_changes(start());
        let mut expected = GroupModel::new(provisioning, "s");
        for seat in ["seat-z", "seat-a", "seat-m"] {
            assert_eq!(
                index.node(seat).unwrap().delays,
                expected.next_node(),
                "{seat}"
            );
        }
        // The same group again (the next watch event) goes on with the same stream.
        index.upsert_group(group);
        if let GroupSource::Deployment { seats, .. } = &mut index.group_mut("s").unwrap().source {
            seats.insert("seat-b".to_owned(), secs(20));
        }
        index.plan_node_changes(secs(20));
        assert_eq!(index.node("seat-b").unwrap().delays, expected.next_node());
        // A seat's registration counts from its creation, not from when the pool saw it.
        let node = index.node("seat-z").unwrap();
        assert_eq!(
            node.register_at,
            Some(
                start()
                    + k8s_openapi::jiff::SignedDuration::try_from(node.delays.registration)
                        .unwrap()
            )
        );
    }

    #[test]
    fn a_group_gets_its_nodes_with_distinct_cidrs() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("small", 3));
        let changes = index.plan_node_changes(start());
        assert_eq!(created(&changes), ["small-0", "small-1", "small-2"]);
        let cidrs: BTreeSet<_> = changes
            .create
            .iter()
            .map(|new| new.identity.pod_cidr)
            .collect();
        assert_eq!(cidrs.len(), 3);
        // Planned again before registration: nothing new, nothing twice.
        let again = index.plan_node_changes(start());
        assert!(again.create.is_empty() && again.delete.is_empty());
    }

    #[test]
    fn scaling_down_deletes_the_highest_nodes_and_frees_their_cidrs() {
        let mut index = index("10.0.0.0/22"); // four /24s
        index.upsert_group(pool_group("g", 4));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        set_desired(&mut index, "g", 2, start());
        let changes = index.plan_node_changes(start());
        assert_eq!(changes.delete, ["g-2", "g-3"]);
        for name in &changes.delete {
            index.remove_node(name);
        }
        set_desired(&mut index, "g", 4, start());
        let changes = index.plan_node_changes(start());
        assert_eq!(changes.create.len(), 2, "freed CIDRs are reused");
        assert!(changes.exhausted.is_empty());
    }

    #[test]
    fn cidr_exhaustion_is_reported_per_node() {
        let mut index = index("10.0.0.0/23"); // two /24s
        index.upsert_group(pool_group("g", 3));
        let changes = index.plan_node_changes(start());
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
            seats: ["seat-a", "seat-b"].map(|s| (s.to_owned(), start())).into(),
        };
        index.upsert_group(group);
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        assert_eq!(changes.create.len(), 2);
        if let GroupSource::Deployment { seats, .. } = &mut index.group_mut("seats").unwrap().source
        {
            seats.remove("seat-a");
        }
        assert_eq!(index.plan_node_changes(start()).delete, ["seat-a"]);
    }

    #[test]
    fn pod_ips_are_stable_unique_and_released() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 1));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        let cidr = changes.create[0].identity.pod_cidr;
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
    fn only_running_pods_of_the_pool_take_usage_and_finishing_drops_it() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 1));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        let app = || {
            vec![ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 250_000_000,
                memory_bytes: 64 << 20,
            }]
        };
        index.assign_pod_ip("ns/a", "uid-a", "g-0", false).unwrap();
        // Pending: no kubelet measures a pod that has not started.
        assert_eq!(index.set_pod_usage("ns/a", app(), secs(1)), Ok(None));
        index.observe_pod("ns/a", "uid-a", "g-0", None, PodPhase::Running, None);
        assert!(matches!(
            index.set_pod_usage("ns/a", app(), secs(2)),
            Ok(Some(_))
        ));
        assert_eq!(
            index.set_pod_usage("ns/elsewhere", app(), secs(2)),
            Ok(None)
        );
        // Bad figures are refused even for a pod the pool does not run.
        assert!(
            index
                .set_pod_usage("ns/elsewhere", vec![], secs(2))
                .is_err()
        );
        let metered: Vec<(&str, &str, &str, u64)> = index
            .pod_usage()
            .map(|pod| (pod.namespace(), pod.name(), pod.node, pod.meter.total().0))
            .collect();
        assert_eq!(metered, [("ns", "a", "g-0", 250_000_000)]);
        index.pod_finished("ns/a", PodPhase::Succeeded);
        assert_eq!(index.pod_usage().count(), 0);
    }

    #[test]
    fn a_pods_limits_cap_its_cpu_and_kill_it_for_memory() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 1));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        let limits = PodLimits {
            containers: vec![limits::ContainerLimits {
                name: "app".to_owned(),
                cpu_nanocores: Some(200_000_000),
                memory_bytes: Some(64 << 20),
            }],
            ..PodLimits::default()
        };
        index.observe_pod(
            "ns/a",
            "uid-a",
            "g-0",
            None,
            PodPhase::Running,
            Some(Box::new(limits)),
        );
        let app = |millicores: u64, mebibytes: u64| {
            vec![ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: millicores * 1_000_000,
                memory_bytes: mebibytes << 20,
            }]
        };
        let events = index.set_pod_usage("ns/a", app(500, 32), secs(0)).unwrap();
        assert_eq!(
            events,
            Some(LimitEvents {
                restarts: true,
                ..LimitEvents::default()
            })
        );
        let reading = |index: &PoolIndex| index.pod_usage().next().unwrap().meter.read(secs(10));
        assert_eq!(
            reading(&index)[0].cpu_nanocores,
            200_000_000,
            "capped at the limit"
        );
        assert!((reading(&index)[0].cpu_seconds_total - 2.0).abs() < 1e-9);
        // 10 s wanting 300m above the limit; then 128 MiB over a 64 MiB limit kills the app.
        let events = index
            .set_pod_usage("ns/a", app(100, 128), secs(10))
            .unwrap()
            .unwrap();
        assert_eq!(events.oom_killed, ["app"]);
        assert_eq!(events.throttled.len(), 1);
        assert!((events.throttled[0].1 - 3.0).abs() < 1e-9);
        let restarted = &reading(&index)[0];
        assert_eq!((restarted.cpu_nanocores, restarted.memory_bytes), (0, 0));
        assert_eq!(restarted.started, secs(10));
    }

    #[test]
    fn memory_pressure_ranks_the_metered_running_pods_of_each_node_against_its_capacity() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 2));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        assert_eq!(index.memory_capacity("g-0"), Some(8 << 30));
        let ranked = |requested_mi: u64, priority: i32| {
            Some(Box::new(PodLimits {
                memory_requested: requested_mi << 20,
                priority,
                ..PodLimits::default()
            }))
        };
        // On g-0: 8 GiB used of 8 GiB. "greedy" is over its request, "steady" within it,
        // "unmeasured" has no usage (nor requests or priority).
        for (key, node, limits) in [
            ("ns/greedy", "g-0", ranked(1_024, 0)),
            ("ns/steady", "g-0", ranked(6_144, 0)),
            ("ns/unmeasured", "g-0", None),
            ("ns/elsewhere", "g-1", None),
        ] {
            index.observe_pod(key, key, node, None, PodPhase::Running, limits);
        }
        let memory = |mebibytes: u64| {
            vec![ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 0,
                memory_bytes: mebibytes << 20,
            }]
        };
        for (key, mebibytes) in [
            ("ns/greedy", 3_072),
            ("ns/steady", 5_120),
            ("ns/elsewhere", 8_192),
        ] {
            index
                .set_pod_usage(key, memory(mebibytes), secs(0))
                .unwrap();
        }
        let only_g0: BTreeSet<String> = ["g-0".to_owned()].into();
        assert_eq!(
            index.memory_pressure(&only_g0),
            [(
                "g-0".to_owned(),
                NodePressure {
                    available: 0,
                    evicted: vec!["ns/greedy".to_owned()],
                }
            )]
        );
        // g-1's lone pod without requests uses all of it: evicted too when g-1 is asked about.
        let both: BTreeSet<String> = ["g-0".to_owned(), "g-1".to_owned()].into();
        let pressure = index.memory_pressure(&both);
        assert_eq!(pressure.len(), 2);
        assert_eq!(pressure[1].1.evicted, ["ns/elsewhere"]);
        // A finished pod is not counted: g-0 has room again.
        index.pod_finished("ns/greedy", PodPhase::Failed);
        assert!(index.memory_pressure(&only_g0).is_empty());
        assert_eq!(index.pod_node("ns/steady"), Some("g-0"));
    }

    #[test]
    fn adopted_pods_keep_their_ips() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 1));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        let node_ip = index.node("g-0").unwrap().internal_ip();
        let existing = Ipv4Addr::from(u32::from(node_ip) + 1);
        index.observe_pod(
            "ns/old",
            "uid-old",
            "g-0",
            Some(existing),
            PodPhase::Running,
            None,
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
    fn a_restarted_pool_takes_booting_and_shutting_down_times_from_the_nodes() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(modelled("g", 1, model(0, 3600, 3600)));
        let later = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
        let node = |name: &str, cidr: &str, key: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "labels": { GROUP_LABEL: "g", POOL_LABEL: "test" },
                    "annotations": { key: later.to_string() },
                },
                "spec": { "podCIDR": cidr }
            }))
            .unwrap()
        };
        index
            .adopt_node(&node("g-0", "10.0.1.0/24", BOOTING_UNTIL_ANNOTATION))
            .unwrap();
        index
            .adopt_node(&node("g-1", "10.0.2.0/24", TERMINATING_UNTIL_ANNOTATION))
            .unwrap();
        let booting = index.node("g-0").unwrap();
        assert!(booting.booting);
        assert_eq!(booting.ready_at, Some(later));
        assert_eq!(booting.phase(Timestamp::now()).0, Phase::Booting);
        let going = index.node("g-1").unwrap();
        assert_eq!(going.terminating.map(|(_, gone)| gone), Some(later));
        // Still wanted (g-0) or still going (g-1): neither is touched before its time.
        let changes = index.plan_node_changes(Timestamp::now());
        assert!(changes.delete.is_empty() && changes.ready.is_empty());
        assert!(changes.terminate.is_empty() && changes.create.is_empty());
        let changes = index.plan_node_changes(later);
        assert_eq!(changes.delete, ["g-1"]);
        assert_eq!(changes.ready, [("g-0".to_owned(), later)]);
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

    fn karpenter_node(name: &str, pod_cidr: Option<&str>, created: Timestamp) -> Node {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": "u-1",
                "labels": {"karpenter.sh/nodepool": "default",
                    "node.kubernetes.io/instance-type": "c-2x-amd64-linux"},
                "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": format!("kwok://{name}")},
            "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "32"}}
        }))
        .unwrap();
        node.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created),
        );
        if let Some(cidr) = pod_cidr {
            node.spec.as_mut().unwrap().pod_cidr = Some(cidr.to_owned());
        }
        node
    }

    fn karpenter_group(provisioning: Option<GroupProvisioning>) -> Group {
        Group {
            name: "default".to_owned(),
            skeleton: Arc::new(NodeSkeleton::from_yaml(SKELETON).unwrap()),
            source: GroupSource::Karpenter,
            created: start(),
            provisioning,
        }
    }

    #[test]
    fn karpenters_node_gets_a_podcidr_boots_by_its_model_and_is_never_planned_away() {
        let mut index = index("10.0.0.0/16");
        // Registration and ready delays both pass booting (the Node existed at once), in
        // recorded time at the model's speed 2: (2 + 3) / 2 s.
        index.upsert_group(karpenter_group(Some(model(2, 3, 7))));
        let ready = start() + k8s_openapi::jiff::SignedDuration::from_millis(2500);
        let node = karpenter_node("kwok-default-a", None, start());
        let adopted = index
            .adopt_external(&node, "default", secs(1))
            .unwrap()
            .unwrap();
        assert!(adopted.set_pod_cidr);
        assert_eq!(adopted.identity.owner, OWNER_KARPENTER);
        assert_eq!(adopted.ready_at, Some(ready));
        assert!(
            adopted
                .identity
                .pod_cidr
                .contains(&adopted.identity.internal_ip),
            "the node's address is in its podCIDR"
        );
        // Its own shape, not the group's: memory from the node (4Gi), not the skeleton (8Gi).
        assert_eq!(index.memory_capacity("kwok-default-a"), Some(4 << 30));
        // Taken once only.
        assert!(
            index
                .adopt_external(&node, "default", secs(1))
                .unwrap()
                .is_none()
        );
        index.node_registered("kwok-default-a", Some("u-1".into()));

        // The pool neither deletes nor shuts it down, with its group or without; it turns
        // Ready when its time comes.
        let changes = index.plan_node_changes(secs(2));
        assert!(changes.delete.is_empty() && changes.terminate.is_empty());
        assert!(changes.ready.is_empty());
        let changes = index.plan_node_changes(secs(3));
        assert_eq!(changes.ready, vec![("kwok-default-a".to_owned(), ready)]);
        index.ready_written("kwok-default-a", true);
        index.remove_group("default");
        let changes = index.plan_node_changes(secs(60));
        assert!(changes.delete.is_empty() && changes.terminate.is_empty());
        assert!(index.node("kwok-default-a").is_some());

        // Gone when Karpenter deleted it: its podCIDR goes back to the pool.
        let free = index.free_cidrs();
        index.remove_node("kwok-default-a");
        assert_eq!(index.free_cidrs(), free + 1);
    }

    #[test]
    fn karpenters_node_keeps_its_podcidr_and_boot_time_across_a_restart() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(karpenter_group(Some(model(0, 30, 0))));
        let mut node = karpenter_node("kwok-default-b", Some("10.0.7.0/24"), start());
        node.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(BOOTING_UNTIL_ANNOTATION.to_owned(), secs(10).to_string());
        let adopted = index
            .adopt_external(&node, "default", secs(2))
            .unwrap()
            .unwrap();
        assert!(!adopted.set_pod_cidr);
        assert_eq!(adopted.identity.pod_cidr.to_string(), "10.0.7.0/24");
        // What the model decided before the restart, not a new draw.
        assert_eq!(adopted.ready_at, Some(secs(10)));
        // Another node claiming the same podCIDR is refused by name.
        let twin = karpenter_node("kwok-default-c", Some("10.0.7.0/24"), start());
        assert!(matches!(
            index.adopt_external(&twin, "default", secs(2)),
            Err(AdoptError::BadCidr { node, .. }) if node == "kwok-default-c"
        ));
    }

    #[test]
    fn karpenters_node_without_a_model_is_ready_at_once() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(karpenter_group(None));
        let node = karpenter_node("kwok-default-d", None, start());
        let adopted = index
            .adopt_external(&node, "default", secs(1))
            .unwrap()
            .unwrap();
        assert_eq!(adopted.ready_at, None);
        assert!(!index.node("kwok-default-d").unwrap().booting);
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn node_names_need_one_each_once_and_all_known() {
        let known = |name: &str| name.starts_with("g-");
        assert_eq!(check_node_names(&[], known), Err(NodeNamesError::Empty));
        assert_eq!(check_node_names(&names(&["g-0", "g-1"]), known), Ok(()));
        assert_eq!(
            check_node_names(&names(&["g-0", "x", "y"]), known),
            Err(NodeNamesError::Unknown("x".to_owned())),
            "the first unknown one"
        );
        // A malformed request is refused as such, whatever its names.
        assert_eq!(
            check_node_names(&names(&["x", "g-1", "x"]), known),
            Err(NodeNamesError::Repeated("x".to_owned()))
        );
    }

    #[test]
    fn failing_and_recovering_changes_all_named_nodes_or_none() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 2));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        for name in ["g-0", "g-1"] {
            index.node_mut(name).unwrap().last_heartbeat = Some(start());
        }
        assert!(index.node("g-0").unwrap().is_ready());

        assert_eq!(index.fail_nodes(&names(&["g-0"])), Ok(names(&["g-0"])));
        assert!(index.is_failed("g-0") && !index.node("g-0").unwrap().is_ready());
        assert!(index.node("g-1").unwrap().is_ready());
        assert_eq!(index.failed_nodes(), 1);
        // Failing a failed node changes nothing; an unknown name changes nothing either.
        assert_eq!(index.fail_nodes(&names(&["g-0"])), Ok(vec![]));
        assert_eq!(
            index.fail_nodes(&names(&["g-1", "g-9"])),
            Err(NodeNamesError::Unknown("g-9".to_owned()))
        );
        assert!(!index.is_failed("g-1"));
        assert_eq!(
            index.recover_nodes(&names(&["g-0", "g-9"]), secs(5), Instant::now()),
            Err(NodeNamesError::Unknown("g-9".to_owned()))
        );
        assert!(index.is_failed("g-0"));

        let due = Instant::now();
        assert_eq!(
            index.recover_nodes(&names(&["g-0", "g-1"]), secs(30), due),
            Ok(names(&["g-0"])),
            "only the failed one recovers"
        );
        let node = index.node("g-0").unwrap();
        assert!(!node.failed && node.is_ready());
        assert_eq!(
            (node.next_renewal, node.next_status),
            (Some(due), Some(due))
        );
        // Its conditions turned again at the recovery, not at its registration.
        assert_eq!(node.phase(secs(40)), (Phase::Ready, secs(30)));
        assert_eq!(index.node("g-1").unwrap().phase(secs(40)).1, start());
    }

    #[test]
    fn only_registered_nodes_of_listed_groups_can_fail() {
        let mut index = index("10.0.0.0/16");
        index.upsert_internal_group(pool_group("seat-host", 1));
        index.upsert_group(modelled("g", 1, model(3600, 0, 0)));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        assert_eq!(index.node("g-0").unwrap().state, NodeState::Waiting);
        for name in ["seat-host-0", "g-0"] {
            assert_eq!(
                index.fail_nodes(&names(&[name])),
                Err(NodeNamesError::Unknown(name.to_owned()))
            );
        }
    }

    #[test]
    fn a_failed_node_is_not_made_ready_nor_shut_down_and_its_removal_forgets_the_failure() {
        let mut index = index("10.0.0.0/16");
        // Ready 10 s after registering (20 s recorded at speed 2); 20 s to go.
        index.upsert_group(modelled("g", 2, model(0, 20, 40)));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        index.fail_nodes(&names(&["g-0", "g-1"])).unwrap();
        let changes = index.plan_node_changes(secs(11));
        assert!(
            changes.ready.is_empty(),
            "no status write for a failed node"
        );
        assert_eq!(index.next_wait(secs(11)), None, "nothing to wake up for");

        // The group shrinks: the dead machine is deleted, not shut down.
        set_desired(&mut index, "g", 1, secs(12));
        let changes = index.plan_node_changes(secs(12));
        assert_eq!(changes.delete, ["g-1"]);
        assert!(changes.terminate.is_empty());
        index.remove_node("g-1");

        // Recovered after its ready time: made Ready as of the recovery.
        index
            .recover_nodes(&names(&["g-0"]), secs(20), Instant::now())
            .unwrap();
        let changes = index.plan_node_changes(secs(21));
        assert_eq!(changes.ready, [("g-0".to_owned(), secs(20))]);

        // Registered again under the same name, the node has no failure.
        set_desired(&mut index, "g", 2, secs(30));
        let changes = index.plan_node_changes(secs(30));
        assert_eq!(created(&changes), ["g-1"]);
        register_all(&mut index, &changes);
        assert!(!index.is_failed("g-1"));
        assert_eq!(index.failed_nodes(), 0);
    }

    #[test]
    fn a_failed_nodes_pods_take_no_usage_are_not_served_and_not_evicted() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 2));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        let memory = |mebibytes: u64| {
            vec![ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 1,
                memory_bytes: mebibytes << 20,
            }]
        };
        for (key, node) in [("ns/a", "g-0"), ("ns/b", "g-1")] {
            index.observe_pod(key, key, node, None, PodPhase::Running, None);
            index.set_pod_usage(key, memory(8_192), secs(0)).unwrap();
        }
        index.fail_nodes(&names(&["g-0"])).unwrap();
        let served: Vec<&str> = index.pod_usage().map(|pod| pod.key).collect();
        assert_eq!(served, ["ns/b"]);
        assert!(!index.runs_pod("ns/a") && index.runs_pod("ns/b"));
        assert_eq!(index.set_pod_usage("ns/a", memory(1), secs(1)), Ok(None));
        let both: BTreeSet<String> = ["g-0".to_owned(), "g-1".to_owned()].into();
        let pressed: Vec<String> = index
            .memory_pressure(&both)
            .into_iter()
            .map(|(node, _)| node)
            .collect();
        assert_eq!(pressed, ["g-1"]);

        index
            .recover_nodes(&names(&["g-0"]), secs(2), Instant::now())
            .unwrap();
        assert_eq!(index.pod_usage().count(), 2);
        assert!(index.runs_pod("ns/a"));
    }

    #[test]
    fn a_new_lease_respreads_every_registered_nodes_next_renewal_over_its_interval() {
        let mut index = index("10.0.0.0/16");
        index.upsert_group(pool_group("g", 20));
        let changes = index.plan_node_changes(start());
        register_all(&mut index, &changes);
        let long = Instant::now() + Duration::from_secs(3600);
        for node in index.nodes_mut() {
            node.next_renewal = Some(long);
        }
        let now = Instant::now();
        let interval = Duration::from_millis(500);
        index.respread_renewals(interval, now);
        for node in index.nodes() {
            assert_eq!(
                node.next_renewal,
                Some(now + initial_offset(&node.name, interval)),
                "{}",
                node.name
            );
            assert!(node.next_renewal.unwrap() < now + interval);
        }
    }
}
