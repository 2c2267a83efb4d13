//! The in-memory view every RPC is answered from: seat Deployments, their seat pods and the
//! virtual nodes, fed by watches (see `kube`). Reads never call the apiserver, so TargetSize and
//! friends stay fast however often cluster-autoscaler asks. Tests apply objects directly.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node, core::v1::Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ksim_nodes::{
    labels::GROUP_LABEL, node::parse_provider_id, seats::group_of, skeleton::NodeSkeleton,
};
use tokio::sync::watch;

use crate::domain::{
    group::{GroupState, NodeState, Seat},
    limits::{LimitsError, SizeLimits},
};

/// The annotation the ReplicaSet controller ranks seats by.
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

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
}

#[derive(Debug, Clone)]
struct SeatEntry {
    group: String,
    deleting: bool,
    terminated: bool,
    ready: bool,
    deletion_cost: i32,
}

#[derive(Debug, Default)]
struct State {
    deployments: BTreeMap<ObjectKey, DeploymentEntry>,
    /// Group id -> the Deployment serving it (the first by namespace/name if several claim it).
    groups: HashMap<String, ObjectKey>,
    seats: BTreeMap<ObjectKey, SeatEntry>,
    /// Group id -> node name -> deleting; only nodes with a `ksim://` provider ID.
    nodes: HashMap<String, BTreeMap<String, bool>>,
    node_groups: HashMap<String, String>,
    synced: BTreeSet<Source>,
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
                deployment
                    .metadata
                    .annotations
                    .as_ref()
                    .unwrap_or(&BTreeMap::new()),
                self.default_max,
            ),
            skeleton,
        };
        let result = entry.limits.clone().map(|_| ());
        let mut state = self.write();
        state.deployments.insert(key, entry);
        state.regroup();
        result
    }

    pub fn delete_deployment(&self, namespace: &str, name: &str) {
        let mut state = self.write();
        state
            .deployments
            .remove(&(namespace.to_owned(), name.to_owned()));
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
            .seats
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    pub fn apply_node(&self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let group = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .and_then(parse_provider_id)
            .map(|(group, _)| group);
        let mut state = self.write();
        state.forget_node(&name);
        if let Some(group) = group {
            let deleting = node.metadata.deletion_timestamp.is_some();
            state
                .nodes
                .entry(group.clone())
                .or_default()
                .insert(name.clone(), deleting);
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
                state.deployments.retain(|key, _| seen.contains(key));
                state.regroup();
            }
            Source::Seats => state.seats.retain(|key, _| seen.contains(key)),
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

    pub fn groups(&self) -> Vec<GroupInfo> {
        let state = self.read();
        let mut groups: Vec<GroupInfo> = state
            .groups
            .keys()
            .filter_map(|id| state.group_info(id))
            .collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        groups
    }

    pub fn group(&self, id: &str) -> Option<GroupInfo> {
        self.read().group_info(id)
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
        let node_state = |name: &str| match nodes.and_then(|n| n.get(name)) {
            None => NodeState::Absent,
            Some(false) => NodeState::Registered,
            Some(true) => NodeState::Deleting,
        };
        let seats: Vec<Seat> = state
            .seats
            .iter()
            .filter(|((ns, _), seat)| ns == namespace && seat.group == id && !seat.terminated)
            .map(|((_, name), seat)| Seat {
                name: name.clone(),
                deleting: seat.deleting,
                ready: seat.ready,
                deletion_cost: seat.deletion_cost,
                node: node_state(name),
            })
            .collect();
        let orphan_nodes = nodes
            .into_iter()
            .flat_map(|n| n.keys())
            .filter(|node| !seats.iter().any(|seat| &seat.name == *node))
            .cloned()
            .collect();
        Some((
            GroupState {
                id: id.to_owned(),
                namespace: namespace.clone(),
                deployment: deployment.clone(),
                limits,
                replicas: entry.replicas,
                seats,
                orphan_nodes,
            },
            entry.resource_version.clone(),
        ))
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

    /// The Deployment serving group `id`, if its limits are valid.
    fn served(&self, id: &str) -> Option<(&ObjectKey, &DeploymentEntry, SizeLimits)> {
        let key = self.groups.get(id)?;
        let entry = self.deployments.get(key)?;
        let limits = entry.limits.clone().ok()?;
        Some((key, entry, limits))
    }

    fn group_info(&self, id: &str) -> Option<GroupInfo> {
        let ((namespace, name), _, limits) = self.served(id)?;
        Some(GroupInfo {
            id: id.to_owned(),
            min: limits.min,
            max: limits.max,
            debug: format!("Deployment {namespace}/{name}"),
        })
    }

    fn forget_node(&mut self, name: &str) {
        if let Some(group) = self.node_groups.remove(name)
            && let Some(nodes) = self.nodes.get_mut(&group)
        {
            nodes.remove(name);
        }
    }
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
