//! Node objects, their leases in `kube-node-lease`, and the ResourceSlices of their devices.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        core::v1::{
            Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, ObjectReference,
            Taint,
        },
        resource::v1::ResourceSlice,
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference},
    jiff::Timestamp,
};
use ksim_nodes::devices::DEVICES_NOT_PUBLISHED_REASON;
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::events::{Event, EventType, Recorder},
};
use serde_json::json;

use crate::domain::labels::{
    BOOTING_UNTIL_ANNOTATION, FIELD_MANAGER, POOL_LABEL, TERMINATING_UNTIL_ANNOTATION,
};
use ksim_kube::{is_conflict, is_not_found};

const LEASE_NAMESPACE: &str = "kube-node-lease";

#[derive(Clone)]
pub struct NodeClient {
    nodes: Api<Node>,
    leases: Api<Lease>,
    slices: Api<ResourceSlice>,
    recorder: Recorder,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient").finish_non_exhaustive()
    }
}

/// What publishing a node's devices did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Published,
    /// The apiserver cleared fields of a feature gate it runs without (e.g.
    /// `allowMultipleAllocations` without `DRAConsumableCapacity`): the slice was withdrawn
    /// rather than left to be allocated otherwise than the skeleton says.
    Withdrawn(String),
}

/// What a lease renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The lease is gone, usually because its node was deleted.
    LeaseMissing,
}

impl NodeClient {
    pub fn new(client: Client, pool: &str) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            slices: Api::all(client.clone()),
            recorder: super::recorder(client.clone(), pool),
            leases: Api::namespaced(client, LEASE_NAMESPACE),
        }
    }

    /// Creates the node and writes its status (create ignores status). A node that already
    /// exists (a retry, or a restart) is taken as it is, with the status written again.
    pub async fn register(&self, node: &Node) -> Result<Node, kube::Error> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match self.nodes.create(&params, node).await {
            Ok(_) => {}
            Err(error) if is_conflict(&error) => {}
            Err(error) => return Err(error),
        }
        self.nodes
            .patch_status(
                &name,
                &patch_params(),
                &Patch::Merge(json!({ "status": node.status })),
            )
            .await
    }

    /// Writes a node's ResourceSlice (server-side apply: the same object again after a
    /// restart, owned by the Node, so it goes with it), and checks the apiserver kept every
    /// field given.
    pub async fn publish_devices(&self, slice: &ResourceSlice) -> Result<Published, kube::Error> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let written = self
            .slices
            .patch(&name, &patch_params().force(), &Patch::Apply(slice))
            .await?;
        // Quantities come back in canonical form: only which gated fields are there counts.
        fn kept(slice: &ResourceSlice) -> Vec<(bool, Vec<&String>)> {
            slice
                .spec
                .devices
                .iter()
                .flatten()
                .map(|device| {
                    let policies: Vec<&String> = device
                        .capacity
                        .iter()
                        .flatten()
                        .filter(|(_, capacity)| capacity.request_policy.is_some())
                        .map(|(name, _)| name)
                        .collect();
                    (device.allow_multiple_allocations == Some(true), policies)
                })
                .collect()
        }
        if kept(&written) == kept(slice) {
            return Ok(Published::Published);
        }
        self.withdraw_devices(&name).await?;
        let why = format!(
            "the apiserver dropped fields of ResourceSlice {name} (allowMultipleAllocations or a capacity's requestPolicy): its devices cannot be shared there without the DRAConsumableCapacity feature gate"
        );
        // On the Node, where a report (and `kubectl describe node`) finds it.
        if let Some(node) = slice.metadata.owner_references.iter().flatten().next() {
            let event = Event {
                type_: EventType::Warning,
                reason: DEVICES_NOT_PUBLISHED_REASON.to_owned(),
                note: Some(why.clone()),
                action: "PublishDevices".to_owned(),
                secondary: None,
            };
            let regarding = ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Node".to_owned()),
                name: Some(node.name.clone()),
                uid: Some(node.uid.clone()),
                ..ObjectReference::default()
            };
            self.recorder.publish(&event, &regarding).await?;
        }
        Ok(Published::Withdrawn(why))
    }

    pub async fn withdraw_devices(&self, name: &str) -> Result<(), kube::Error> {
        match self.slices.delete(name, &DeleteParams::default()).await {
            Err(error) if !is_not_found(&error) => Err(error),
            _ => Ok(()),
        }
    }

    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        match self.nodes.delete(name, &DeleteParams::default()).await {
            Err(error) if !is_not_found(&error) => Err(error),
            _ => Ok(()),
        }
    }

    /// A node shutting down: unschedulable at once, and when it goes on the node itself, so a
    /// restarted pool knows it too. One write.
    pub async fn mark_terminating(&self, name: &str, gone_at: &str) -> Result<(), kube::Error> {
        let patch = json!({
            "metadata": { "annotations": { TERMINATING_UNTIL_ANNOTATION: gone_at } },
            "spec": { "unschedulable": true },
        });
        self.nodes
            .patch(name, &patch_params(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    /// Rewrites the kubelet-owned conditions; other writers' conditions are kept because a
    /// strategic merge patch merges conditions by type.
    pub async fn refresh_conditions(
        &self,
        name: &str,
        conditions: &[NodeCondition],
    ) -> Result<(), kube::Error> {
        let patch = json!({ "status": { "conditions": conditions } });
        self.nodes
            .patch_status(name, &patch_params(), &Patch::Strategic(patch))
            .await
            .map(drop)
    }

    /// Rewrites the node's addresses and daemon endpoints: a merge patch replaces the whole
    /// address list, so the caller passes every address the node keeps.
    pub async fn set_addresses(
        &self,
        name: &str,
        addresses: &[NodeAddress],
        daemon_endpoints: &NodeDaemonEndpoints,
    ) -> Result<(), kube::Error> {
        let patch = json!({
            "status": { "addresses": addresses, "daemonEndpoints": daemon_endpoints },
        });
        self.nodes
            .patch_status(name, &patch_params(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    /// Claims a node someone else created (Karpenter's): the pool's labels, its podCIDR when
    /// the node has none, when it boots until and its taints when they change. One write, made against the version the
    /// claim was decided on, so of two pools claiming one node the second gets a conflict.
    pub async fn claim(
        &self,
        name: &str,
        resource_version: &str,
        labels: &BTreeMap<String, String>,
        pod_cidr: Option<&str>,
        booting_until: Option<&str>,
        taints: Option<&[Taint]>,
    ) -> Result<Node, kube::Error> {
        let mut patch = json!({
            "metadata": { "resourceVersion": resource_version, "labels": labels },
        });
        if let Some(cidr) = pod_cidr {
            patch["spec"]["podCIDR"] = json!(cidr);
            patch["spec"]["podCIDRs"] = json!([cidr]);
        }
        if let Some(taints) = taints {
            // A merge patch replaces the list: the caller passes every taint the node keeps,
            // and the resourceVersion makes sure none was added in between.
            patch["spec"]["taints"] = json!(taints);
        }
        if let Some(until) = booting_until {
            patch["metadata"]["annotations"] = json!({ BOOTING_UNTIL_ANNOTATION: until });
        }
        self.nodes
            .patch(name, &patch_params(), &Patch::Merge(patch))
            .await
    }

    /// Writes the status fields a kubelet owns (a merge patch: fields left `None` are kept).
    pub async fn write_status(&self, name: &str, status: &NodeStatus) -> Result<(), kube::Error> {
        self.nodes
            .patch_status(
                name,
                &patch_params(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map(drop)
    }

    /// Nodes this pool registered, found by its label.
    pub async fn list_pool_nodes(&self, pool: &str) -> Result<Vec<Node>, kube::Error> {
        let params = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
        Ok(self.nodes.list(&params).await?.items)
    }

    /// Creates the node's lease, owned by the node so it goes when the node goes.
    pub async fn ensure_lease(
        &self,
        node: &str,
        node_uid: &str,
        duration_seconds: i32,
    ) -> Result<(), kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(node.to_owned()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Node".to_owned(),
                    name: node.to_owned(),
                    uid: node_uid.to_owned(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(node.to_owned()),
                lease_duration_seconds: Some(duration_seconds),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        match self.leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(error) if is_conflict(&error) => {
                self.renew_lease(node, duration_seconds).await.map(drop)
            }
            Err(error) => Err(error),
        }
    }

    /// One write per renewal: a merge patch of renewTime, no read first. The duration goes
    /// with it, as a kubelet's does, so a lease changed since shows on the Lease.
    pub async fn renew_lease(
        &self,
        node: &str,
        duration_seconds: i32,
    ) -> Result<Renewal, kube::Error> {
        let patch = json!({ "spec": {
            "renewTime": MicroTime(Timestamp::now()),
            "leaseDurationSeconds": duration_seconds,
        } });
        match self
            .leases
            .patch(node, &patch_params(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(Renewal::Renewed),
            Err(error) if is_not_found(&error) => Ok(Renewal::LeaseMissing),
            Err(error) => Err(error),
        }
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}
