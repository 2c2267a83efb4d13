//! The in-memory view every RPC is answered from: seat Deployments, their seat pods and the
//! virtual nodes, fed by watches (see `kube`). Reads never call the apiserver, so TargetSize and
//! friends stay fast however often cluster-autoscaler asks. Tests apply objects directly.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, core::v1::Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ksim_nodes::{
    labels::{
        DELETION_COST_ANNOTATION, GROUP_LABEL, HELD_ANNOTATION, OWNER_LABEL, OWNER_SEATS,
        PROVISIONING_ANNOTATION, RELEASED_ANNOTATION, RETIRING_ANNOTATION, STOCKOUT_ANNOTATION,
        TO_BE_DELETED_TAINT,
    },
    node::parse_provider_id,
    seats::group_of,
    skeleton::NodeSkeleton,
};
use tokio::sync::watch;

use crate::domain::{
    group::{GroupState, Member, NodeState, Seat, member_of},
    limits::{LimitsError, SizeLimits},
};

/// The label the Deployment controller puts on a ReplicaSet's pods: the suffix of the
/// ReplicaSet's name after the Deployment's.
const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// A group's node skeleton, as far as it could be resolved.
#[derive(Debug, Clone)]
pub enum Skeleton {
    /// The pod template names no skeleton.
    Missing,
    Parsed(Arc<NodeSkeleton>),
    /// Named but unreadable or invalid; the reason.
    Invalid(String),
}

/// What NodeGroups and NodeGroupForNode report for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    pub id: String,
    pub min: i32,
    pub max: i32,
    /// Names the Deployment behind the group.
    pub debug: String,
}

/// Which watch a sync mark is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Deployments,
    Seats,
    Nodes,
}

pub type ObjectKey = (String, String);

#[derive(Debug, Clone)]
struct DeploymentEntry {
    group: String,
    replicas: i32,
    resource_version: String,
    limits: Result<SizeLimits, LimitsError>,
    skeleton: Skeleton,
    /// Being prepared for a replay that has not started: frozen at its size too.
    held: bool,
    /// Out of capacity, and why (see [`ksim_nodes::labels::STOCKOUT_ANNOTATION`]).
    stockout: Option<String>,
    /// About to be deleted: frozen at its size for cluster-autoscaler (see [`Index::groups`]).
    retiring: bool,
    /// The provider has told the deleter that CA let go of it.
    released: bool,
    /// Deleted after its release; still answered for until CA's next Refresh, since the loop
    /// under way holds the group (see [`Index::purge_gone`]).
    gone: bool,
    /// Its provisioning model has a termination delay: the pool deletes removed nodes.
    nodes_linger: bool,
}

#[derive(Debug, Clone)]
struct SeatEntry {
    group: String,
    /// The Deployment whose ReplicaSet made the pod (its controller): a pod merely labelled
    /// with a group is no seat of it.
    owner: Option<String>,
    deleting: bool,
    terminated: bool,
    ready: bool,
    deletion_cost: i32,
}

#[derive(Debug, Clone, Copy)]
struct NodeEntry {
    /// The Node object has a deletionTimestamp.
    deleting: bool,
    /// cluster-autoscaler has tainted it for removal: a scale-down of it is under way.
    removing: bool,
    /// Labelled with the group its provider ID names (`ksim.io/node-group`).
    group_labelled: bool,
    /// Labelled as a seat Deployment's node (`ksim.io/group-owner=seats`) of the group its
    /// provider ID names, under the name its provider ID names. Labels anyone can write: the
    /// node is the group's only with a seat of the group behind it (see [`State::member`]).
    seat_labelled: bool,
    /// Reports Ready=True.
    ready: bool,
    /// NotReady because it is booting by its group's provisioning model.
    booting: bool,
}

#[derive(Debug, Default)]
struct State {
    deployments: BTreeMap<ObjectKey, DeploymentEntry>,
    /// Group id -> the Deployment serving it (the first by namespace/name if several claim it).
    groups: HashMap<String, ObjectKey>,
    seats: BTreeMap<ObjectKey, SeatEntry>,
    /// Group id -> node name -> entry; only nodes with a `ksim://` provider ID.
    nodes: HashMap<String, BTreeMap<String, NodeEntry>>,
    node_groups: HashMap<String, String>,
    departed: Departed,
    synced: BTreeSet<Source>,
    /// Nodes labelled as a served group's that are none of its members, each warned of once
    /// (a Mutex: found under the read lock, by the calls that answer for a group).
    ignored: Mutex<BTreeSet<String>>,
}

/// Members (group, name) whose seat or Node the index saw go, newest last, so a retried
/// DeleteNodes naming one is told apart from a node the group never had.
#[derive(Debug, Default)]
struct Departed {
    order: VecDeque<(String, String)>,
    members: HashSet<(String, String)>,
}

/// Departed members remembered. CA retries a DeleteNodes within seconds, while far fewer
/// nodes than this go; the bound keeps a long simulation's memory flat.
const DEPARTED_KEPT: usize = 10_000;

impl Departed {
    fn record(&mut self, group: &str, name: &str) {
        let member = (group.to_owned(), name.to_owned());
        if self.members.contains(&member) {
            return;
        }
        if self.order.len() == DEPARTED_KEPT
            && let Some(oldest) = self.order.pop_front()
        {
            self.members.remove(&oldest);
        }
        self.order.push_back(member.clone());
        self.members.insert(member);
    }

    fn contains(&self, group: &str, name: &str) -> bool {
        self.members.contains(&(group.to_owned(), name.to_owned()))
    }
}

/// Shared, cheaply cloned handle to the index.
#[derive(Debug, Clone)]
pub struct Index {
    state: Arc<RwLock<State>>,
    changes: Arc<watch::Sender<u64>>,
    default_max: i32,
}

impl Index {
    /// `default_max` is the max size of groups whose Deployment does not set one.
    pub fn new(default_max: i32) -> Self {
        Self {
            state: Arc::default(),
            changes: Arc::new(watch::Sender::new(0)),
            default_max,
        }
    }

    /// Notified after every change; see [`Index::wait_until`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated in a way readers
        // could misread (every update is a single insert/remove), so poisoning is ignored.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> Changed<'_> {
        Changed {
            state: self.state.write().unwrap_or_else(|e| e.into_inner()),
            changes: &self.changes,
        }
    }

    /// Stores a seat Deployment. An error means its size annotations are invalid: it is kept
    /// but not served until they are fixed.
    pub fn apply_deployment(
        &self,
        deployment: &Deployment,
        skeleton: Skeleton,
    ) -> Result<(), LimitsError> {
        let key = object_key(&deployment.metadata);
        let Some(group) = group_of(deployment) else {
            self.delete_deployment(&key.0, &key.1);
            return Ok(());
        };
        let annotations = deployment.metadata.annotations.as_ref();
        let annotated = |key: &str| annotations.is_some_and(|a| a.contains_key(key));
        let entry = DeploymentEntry {
            group: group.to_owned(),
            // Kubernetes defaults an unset replicas to 1.
            replicas: deployment
                .spec
                .as_ref()
                .and_then(|spec| spec.replicas)
                .unwrap_or(1),
            resource_version: deployment
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default(),
            limits: SizeLimits::from_annotations(
                annotations.unwrap_or(&BTreeMap::new()),
                self.default_max,
            ),
            skeleton,
            held: annotated(HELD_ANNOTATION),
            stockout: annotations
                .and_then(|a| a.get(STOCKOUT_ANNOTATION))
                .cloned(),
            retiring: annotated(RETIRING_ANNOTATION),
            released: annotated(RELEASED_ANNOTATION),
            gone: false,
            nodes_linger: nodes_linger(annotations.and_then(|a| a.get(PROVISIONING_ANNOTATION))),
        };
        let result = entry.limits.clone().map(|_| ());
        let mut state = self.write();
        state.deployments.insert(key, entry);
        state.regroup();
        result
    }

    pub fn delete_deployment(&self, namespace: &str, name: &str) {
        let mut state = self.write();
        state.forget_deployment(&(namespace.to_owned(), name.to_owned()));
        state.regroup();
    }

    /// Forgets the released groups that went since the last call: CA calls Refresh at the start
    /// of each loop and asks for its groups afresh after it.
    pub fn purge_gone(&self) {
        let mut state = self.write();
        state.deployments.retain(|_, entry| !entry.gone);
        state.regroup();
    }

    pub fn apply_pod(&self, pod: &Pod) {
        let key = object_key(&pod.metadata);
        let Some(group) = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(GROUP_LABEL))
        else {
            self.delete_pod(&key.0, &key.1);
            return;
        };
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        let ready = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
            && phase == Some("Running")
            && status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
        let entry = SeatEntry {
            group: group.clone(),
            owner: owning_deployment(pod),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            terminated: matches!(phase, Some("Succeeded" | "Failed")),
            ready,
            deletion_cost: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DELETION_COST_ANNOTATION))
                .and_then(|cost| cost.parse().ok())
                .unwrap_or(0),
        };
        self.write().seats.insert(key, entry);
    }

    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.write()
            .forget_seat(&(namespace.to_owned(), name.to_owned()));
    }

    pub fn apply_node(&self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let parsed = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .and_then(parse_provider_id);
        let labels = node.metadata.labels.as_ref();
        let label = |key: &str| {
            labels
                .and_then(|labels| labels.get(key))
                .map(String::as_str)
        };
        let mut state = self.write();
        // An update, not a departure: the entry is replaced below.
        state.remove_node(&name);
        if let Some((group, id_name)) = parsed {
            let group_labelled = label(GROUP_LABEL) == Some(group.as_str());
            let entry = NodeEntry {
                deleting: node.metadata.deletion_timestamp.is_some(),
                removing: node
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.taints.as_ref())
                    .is_some_and(|taints| taints.iter().any(|t| t.key == TO_BE_DELETED_TAINT)),
                ready: ksim_nodes::node::is_ready(node),
                booting: ksim_nodes::node::is_booting(node),
                group_labelled,
                seat_labelled: label(OWNER_LABEL) == Some(OWNER_SEATS)
                    && group_labelled
                    && id_name == name,
            };
            state
                .nodes
                .entry(group.clone())
                .or_default()
                .insert(name.clone(), entry);
            state.node_groups.insert(name, group);
        }
    }

    pub fn delete_node(&self, name: &str) {
        self.write().forget_node(name);
    }

    /// Drops the objects of `source` a relist did not return (deleted while disconnected).
    pub fn retain(&self, source: Source, seen: &BTreeSet<ObjectKey>) {
        let mut state = self.write();
        match source {
            Source::Deployments => {
                let gone: Vec<ObjectKey> = state
                    .deployments
                    .keys()
                    .filter(|key| !seen.contains(*key))
                    .cloned()
                    .collect();
                for key in gone {
                    state.forget_deployment(&key);
                }
                state.regroup();
            }
            Source::Seats => {
                let gone: Vec<ObjectKey> = state
                    .seats
                    .keys()
                    .filter(|key| !seen.contains(*key))
                    .cloned()
                    .collect();
                for key in gone {
                    state.forget_seat(&key);
                }
            }
            Source::Nodes => {
                let gone: Vec<String> = state
                    .node_groups
                    .keys()
                    .filter(|name| !seen.contains(&(String::new(), (*name).clone())))
                    .cloned()
                    .collect();
                for name in gone {
                    state.forget_node(&name);
                }
            }
        }
    }

    /// Records that `source` delivered its first full list.
    pub fn mark_synced(&self, source: Source) {
        self.write().synced.insert(source);
    }

    /// Whether every watch has delivered a full list: before that, a missing object may just
    /// not be listed yet.
    pub fn is_synced(&self) -> bool {
        self.read().synced.len() == 3
    }

    /// The groups offered to cluster-autoscaler. A retiring group stays offered, so a loop or a
    /// scale-down under way finishes without "not found", but frozen at its size (min = max =
    /// target), so CA starts nothing new on it. A held group is offered frozen the same way.
    pub fn groups(&self) -> Vec<GroupInfo> {
        let state = self.read();
        let mut groups: Vec<GroupInfo> = state
            .groups
            .keys()
            .filter_map(|id| state.offered(id))
            .collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        groups
    }

    /// The nodes warned of as labelled like a served group's without being its members.
    pub fn ignored_nodes(&self) -> Vec<String> {
        let state = self.read();
        let ignored = state.ignored.lock().unwrap_or_else(|e| e.into_inner());
        ignored.iter().cloned().collect()
    }

    /// Group `id` as offered to cluster-autoscaler (see [`Index::groups`]).
    pub fn group(&self, id: &str) -> Option<GroupInfo> {
        self.read().offered(id)
    }

    /// The Deployments (namespace, name) of retiring groups not yet released, of which
    /// cluster-autoscaler is removing no node.
    pub fn unreleased(&self) -> Vec<ObjectKey> {
        let state = self.read();
        let removing = |group: &str| {
            state.nodes.get(group).is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|(name, node)| node.removing && state.member(group, name, node))
            })
        };
        state
            .deployments
            .iter()
            .filter(|(_, entry)| entry.retiring && !entry.released && !removing(&entry.group))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The group's target size (`spec.replicas`).
    pub fn target_size(&self, id: &str) -> Option<i32> {
        let state = self.read();
        state.served(id).map(|(_, entry, _)| entry.replicas)
    }

    /// A snapshot of the group and its Deployment's resourceVersion.
    pub fn group_state(&self, id: &str) -> Option<(GroupState, String)> {
        let state = self.read();
        let ((namespace, deployment), entry, limits) = state.served(id)?;
        let nodes = state.nodes.get(id);
        let ours = |name: &str| {
            nodes
                .and_then(|n| n.get(name))
                .filter(|node| state.member(id, name, node))
        };
        let node_state = |name: &str| match ours(name) {
            None => NodeState::Absent,
            Some(node) if node.deleting => NodeState::Deleting,
            Some(_) => NodeState::Registered,
        };
        let seats: Vec<Seat> = state
            .seats
            .iter()
            .filter(|((ns, _), seat)| {
                ns == namespace && seat.owned_by(id, deployment) && !seat.terminated
            })
            .map(|((_, name), seat)| Seat {
                name: name.clone(),
                deleting: seat.deleting,
                ready: seat.ready,
                deletion_cost: seat.deletion_cost,
                node: node_state(name),
                node_ready: ours(name).is_some_and(|node| node.ready),
                node_booting: ours(name).is_some_and(|node| node.booting),
            })
            .collect();
        // A set, not a scan of the seats per node: this runs for every answer CA gets about
        // the group, and a 1,000-node group made it a million comparisons.
        let seat_names: BTreeSet<&str> = seats.iter().map(|seat| seat.name.as_str()).collect();
        let mut orphan_nodes = Vec::new();
        let mut ignored = Vec::new();
        for (name, node) in nodes.into_iter().flatten() {
            if state.member(id, name, node) {
                if !seat_names.contains(name.as_str()) {
                    orphan_nodes.push(name.clone());
                }
            } else if node.group_labelled || node.seat_labelled {
                ignored.push(name);
            }
        }
        state.warn_ignored(id, &ignored);
        Some((
            GroupState {
                id: id.to_owned(),
                namespace: namespace.clone(),
                deployment: deployment.clone(),
                limits,
                replicas: entry.replicas,
                seats,
                orphan_nodes,
                nodes_linger: entry.nodes_linger,
                held: entry.held && !entry.retiring && !entry.gone,
                stockout: entry.stockout.clone(),
            },
            entry.resource_version.clone(),
        ))
    }

    /// Of the seat `names` named in a request to group `id`, those the index saw go.
    pub fn departed<'a>(
        &self,
        id: &str,
        names: impl IntoIterator<Item = &'a str>,
    ) -> BTreeSet<String> {
        let state = self.read();
        names
            .into_iter()
            .filter(|name| state.departed.contains(id, name))
            .map(str::to_owned)
            .collect()
    }

    /// The group of the node with `provider_id`, if this provider knows the node as a served
    /// group's: a seat, a Node labelled as the group's, or a replica not seated yet. The
    /// provider ID only says where to look; a pool-managed or unknown node has no group.
    pub fn group_for_provider_id(&self, provider_id: &str) -> Option<GroupInfo> {
        let (group, member) = member_of(provider_id)?;
        let state = self.read();
        state.served(&group)?;
        let known = match member {
            // Instance ids the provider made up for replicas without a seat pod; no Node has one.
            Member::Placeholder => true,
            Member::Seat(name) => {
                let node = state.nodes.get(&group).and_then(|nodes| nodes.get(&name));
                node.is_some_and(|node| state.member(&group, &name, node))
                    || state
                        .seat(&group, &name)
                        .is_some_and(|seat| !seat.terminated)
            }
        };
        if known { state.offered(&group) } else { None }
    }

    /// Whether this provider serves group `id`: what [`Index::group_state`] answers `Some` for,
    /// without building the group's snapshot.
    pub fn serves(&self, id: &str) -> bool {
        self.read().served(id).is_some()
    }

    /// The group's skeleton; `None` for an unknown group.
    pub fn skeleton(&self, id: &str) -> Option<Skeleton> {
        let state = self.read();
        state.served(id).map(|(_, entry, _)| entry.skeleton.clone())
    }

    /// The skeletons of every served group.
    pub fn skeletons(&self) -> Vec<Arc<NodeSkeleton>> {
        let state = self.read();
        state
            .groups
            .keys()
            .filter_map(|id| match state.served(id)?.1.skeleton {
                Skeleton::Parsed(ref skeleton) => Some(skeleton.clone()),
                _ => None,
            })
            .collect()
    }

    /// Waits until `ready` holds for the index, or `timeout` passes; the final verdict.
    pub async fn wait_until(
        &self,
        timeout: std::time::Duration,
        mut ready: impl FnMut(&Index) -> bool,
    ) -> bool {
        let mut changes = self.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.mark_unchanged();
            if ready(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return ready(self),
            }
        }
    }
}

/// A write guard that tells subscribers about the change when dropped.
struct Changed<'a> {
    state: RwLockWriteGuard<'a, State>,
    changes: &'a watch::Sender<u64>,
}

impl std::ops::Deref for Changed<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Changed<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Changed<'_> {
    fn drop(&mut self) {
        self.changes.send_modify(|version| *version += 1);
    }
}

impl State {
    fn regroup(&mut self) {
        self.groups.clear();
        for (key, entry) in &self.deployments {
            self.groups
                .entry(entry.group.clone())
                .or_insert_with(|| key.clone());
        }
    }

    /// The Deployment serving group `id`, if its limits are valid. Nodes never decide it: a
    /// pool-managed group's nodes are not the group's members (see [`State::member`]), so
    /// nothing resizes or deletes them through it, and a Node anyone labels cannot hide it.
    fn served(&self, id: &str) -> Option<(&ObjectKey, &DeploymentEntry, SizeLimits)> {
        let key = self.groups.get(id)?;
        let entry = self.deployments.get(key)?;
        let limits = entry.limits.clone().ok()?;
        Some((key, entry, limits))
    }

    /// Seat `name` of group `id`, made by the ReplicaSet of the Deployment serving it.
    fn seat(&self, id: &str, name: &str) -> Option<&SeatEntry> {
        let ((namespace, deployment), _, _) = self.served(id)?;
        self.seats
            .get(&(namespace.clone(), name.to_owned()))
            .filter(|seat| seat.owned_by(id, deployment))
    }

    /// Whether `node` is a member of group `id`: labelled as its seat node, and the node of a
    /// seat the group's Deployment made (present, or seen going: the pool removes a node
    /// after its seat). Labels alone make no member, whoever wrote them.
    fn member(&self, id: &str, name: &str, node: &NodeEntry) -> bool {
        node.seat_labelled && (self.seat(id, name).is_some() || self.departed.contains(id, name))
    }

    /// Warns once of each of `names`, nodes labelled as group `id`'s that are none of its
    /// members; not before every watch has listed, when a seat may just not be seen yet.
    fn warn_ignored(&self, id: &str, names: &[&String]) {
        if names.is_empty() || self.synced.len() < 3 {
            return;
        }
        let mut ignored = self.ignored.lock().unwrap_or_else(|e| e.into_inner());
        for name in names {
            if ignored.insert((*name).clone()) {
                tracing::warn!(node = %name, group = id,
                    "node labelled as the group's but made for none of its seats; ignored for the group");
            }
        }
    }

    fn offered(&self, id: &str) -> Option<GroupInfo> {
        let ((namespace, name), entry, limits) = self.served(id)?;
        let (min, max, state) = if entry.retiring || entry.gone {
            (entry.replicas, entry.replicas, ", retiring")
        } else if entry.held {
            (entry.replicas, entry.replicas, ", held")
        } else {
            (limits.min, limits.max, "")
        };
        Some(GroupInfo {
            id: id.to_owned(),
            min,
            max,
            debug: format!("Deployment {namespace}/{name}{state}"),
        })
    }

    /// A released group's entry outlives its Deployment until [`Index::purge_gone`].
    fn forget_deployment(&mut self, key: &ObjectKey) {
        match self.deployments.get_mut(key) {
            Some(entry) if entry.released => entry.gone = true,
            Some(_) => {
                self.deployments.remove(key);
            }
            None => {}
        }
    }

    fn remove_node(&mut self, name: &str) -> Option<(String, NodeEntry)> {
        let group = self.node_groups.remove(name)?;
        let node = self.nodes.get_mut(&group)?.remove(name)?;
        Some((group, node))
    }

    fn forget_node(&mut self, name: &str) {
        let member = self
            .node_groups
            .get(name)
            .and_then(|group| Some((group, self.nodes.get(group)?.get(name)?)))
            .is_some_and(|(group, node)| self.member(group, name, node));
        if let Some((group, _)) = self.remove_node(name)
            && member
        {
            self.departed.record(&group, name);
        }
        self.ignored
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    fn forget_seat(&mut self, key: &ObjectKey) {
        // Only a seat a Deployment made: its node may outlive it as the group's.
        if let Some(seat) = self.seats.remove(key)
            && seat.owner.is_some()
        {
            self.departed.record(&seat.group, &key.1);
        }
    }
}

impl SeatEntry {
    /// A seat of group `id` made by Deployment `deployment`'s ReplicaSet.
    fn owned_by(&self, id: &str, deployment: &str) -> bool {
        self.group == id && self.owner.as_deref() == Some(deployment)
    }
}

/// The Deployment whose ReplicaSet controls `pod`: the Deployment controller names each
/// ReplicaSet `<deployment>-<pod-template-hash>` and labels its pods with the hash.
fn owning_deployment(pod: &Pod) -> Option<String> {
    let hash = pod.metadata.labels.as_ref()?.get(POD_TEMPLATE_HASH_LABEL)?;
    let owner = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|owner| owner.controller == Some(true) && owner.kind == "ReplicaSet")?;
    let deployment = owner.name.strip_suffix(hash.as_str())?.strip_suffix('-')?;
    (!deployment.is_empty()).then(|| deployment.to_owned())
}

/// Whether a provisioning annotation keeps removed nodes a while. One the pool cannot read
/// runs without delays there, so none here either.
fn nodes_linger(annotation: Option<&String>) -> bool {
    annotation
        .and_then(|text| ksim_provisioning::GroupProvisioning::from_json(text).ok())
        .is_some_and(|provisioning| !provisioning.nodes.termination.is_zero())
}

/// The key [`Index::retain`] expects for an object: (namespace, name), namespace empty for nodes.
pub fn object_key(meta: &ObjectMeta) -> ObjectKey {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
pub(crate) mod tests;
