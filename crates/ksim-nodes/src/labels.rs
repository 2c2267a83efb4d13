//! Names the pool writes onto nodes, pods and leases, kept in one place so the adapter, the
//! controllers and the manifests under `deploy/` cannot drift apart.

/// Label naming the node group a virtual node belongs to; also selects a group's seat Deployment.
pub const GROUP_LABEL: &str = "ksim.io/node-group";

/// Label naming who owns a virtual node's group: [`OWNER_POOL`] (a pool-managed group, sized
/// through the pool's API) or [`OWNER_SEATS`] (a seat Deployment, sized by cluster-autoscaler
/// through the cloud provider). Each acts only on nodes it owns, so a Deployment that takes a
/// pool-managed group's name never resizes or deletes that group's nodes.
pub const OWNER_LABEL: &str = "ksim.io/group-owner";

/// [`OWNER_LABEL`] value of nodes of pool-managed groups.
pub const OWNER_POOL: &str = "pool";

/// [`OWNER_LABEL`] value of nodes of seat Deployments.
pub const OWNER_SEATS: &str = "seats";

/// [`OWNER_LABEL`] value of nodes Karpenter created (through its KWOK provider) and the pool
/// plays the kubelet for: Karpenter decides when they come and go, never the pool.
pub const OWNER_KARPENTER: &str = "karpenter";

/// Label Karpenter puts on every node it launches, naming its NodePool; the pool's group of
/// such a node is named after it.
pub const KARPENTER_NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";

/// Annotation (value [`KWOK_FAKE_VALUE`]) Karpenter's KWOK provider puts on the nodes it
/// creates: no machine backs them, so whoever plays their kubelet may take them.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// Value of [`KWOK_NODE_ANNOTATION`] on a node nothing runs.
pub const KWOK_FAKE_VALUE: &str = "fake";

/// Label marking a node as virtual (value [`TRUE_VALUE`]).
pub const VIRTUAL_LABEL: &str = "ksim.io/virtual-node";

/// Label naming the pool instance that owns a node, so two pools on one cluster leave each other's
/// nodes alone.
pub const POOL_LABEL: &str = "ksim.io/pool";

/// Taint key keeping real workloads off virtual nodes (value [`TRUE_VALUE`], effect
/// [`NO_SCHEDULE`]); simulated workloads tolerate it.
pub const VIRTUAL_TAINT_KEY: &str = "ksim.io/virtual-node";

/// Label and taint key (value [`TRUE_VALUE`], effect [`NO_SCHEDULE`]) of the host node where seat
/// pods run; only seats select and tolerate it.
pub const SEAT_HOST_LABEL: &str = "ksim.io/seat-host";

/// Pod annotation the ReplicaSet controller ranks pods by at a scale-down (the lowest goes
/// first): the cloud provider and the driver's upgrades mark the seat to remove with it.
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Pod annotation: how long the pod runs, in milliseconds, before it completes.
pub const LIFETIME_ANNOTATION: &str = "ksim.io/lifetime-ms";

/// Pod annotation (value [`TRUE_VALUE`]): the driver gives this pod its own lifetime once it
/// sees it start, and removes this annotation with that patch. Until then the pool starts no
/// lifetime clock: a pod must not end on its template's lifetime before its own is known. The
/// lifetime still counts from the pod's start, so a late patch does not lengthen it.
pub const LIFETIME_PENDING_ANNOTATION: &str = "ksim.io/lifetime-pending";

/// Seat pod template annotation holding the node skeleton as inline YAML.
pub const SKELETON_ANNOTATION: &str = "ksim.io/node-skeleton";

/// Seat pod template annotation naming a ConfigMap (in the seat's namespace) holding the skeleton.
pub const SKELETON_CONFIGMAP_ANNOTATION: &str = "ksim.io/node-skeleton-configmap";

/// Seat Deployment annotation: the fewest nodes cluster-autoscaler may scale the group down to.
pub const MIN_SIZE_ANNOTATION: &str = "ksim.io/min-size";

/// Seat Deployment annotation: the most nodes cluster-autoscaler may scale the group up to.
pub const MAX_SIZE_ANNOTATION: &str = "ksim.io/max-size";

/// Seat Deployment annotation set while a simulation prepares the group: the cloud provider
/// offers it frozen at its size, so cluster-autoscaler removes none of its still-empty nodes
/// before the replay's clock starts. The driver removes it when the clock starts.
pub const HELD_ANNOTATION: &str = "ksim.io/held";

/// Seat Deployment annotation set while the group's cloud has no capacity (a run's stockout or
/// zone outage): the cloud provider refuses every scale-up of the group, as a cloud answers
/// one it cannot fill, with the annotation's value as the reason. The driver removes it when
/// the window ends.
pub const STOCKOUT_ANNOTATION: &str = "ksim.io/stockout";

/// Seat Deployment annotation set by whoever is about to delete the group (the driver's
/// cleanup): the cloud provider stops offering the group to cluster-autoscaler.
pub const RETIRING_ANNOTATION: &str = "ksim.io/retiring";

/// Seat Deployment annotation the cloud provider sets on a retiring group once
/// cluster-autoscaler has refreshed its node groups without it: CA no longer acts on the group,
/// so deleting it fails nothing on CA's side.
pub const RELEASED_ANNOTATION: &str = "ksim.io/released";

/// Seat Deployment annotation: the group's provisioning model, as
/// `ksim_provisioning::GroupProvisioning::to_json` writes it (the delays from a
/// scale-up to the Node existing and to Ready, and from a scale-down to the node being gone).
/// Absent: no delays. The pool applies it; the cloud provider reads whether nodes linger.
pub const PROVISIONING_ANNOTATION: &str = "ksim.io/provisioning";

/// Pod annotation the driver puts on the pods it replays: their owner's start delays, as
/// `ksim_provisioning::PodProvisioning::to_json` writes them (from bound to Running,
/// plus the first pull of an image on a node). Absent: the pod starts at once. The pool
/// applies it.
pub const POD_PROVISIONING_ANNOTATION: &str = "ksim.io/pod-provisioning";

/// Node annotation: the node is booting by its group's provisioning model and turns Ready at
/// this RFC 3339 time. Written at registration, so a restarted pool knows when.
pub const BOOTING_UNTIL_ANNOTATION: &str = "ksim.io/booting-until";

/// Node annotation: the node's seat is gone (or its pool-managed group shrank) and the node is
/// shutting down by its group's provisioning model; the pool deletes it at this RFC 3339 time.
pub const TERMINATING_UNTIL_ANNOTATION: &str = "ksim.io/terminating-until";

/// Taint cluster-autoscaler puts on a node it is removing, before it asks the provider to.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Scheme of `spec.providerID` on virtual nodes: `ksim://<group>/<node>`.
pub const PROVIDER_ID_SCHEME: &str = "ksim";

/// Well-known label carrying a node's instance type.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// Deprecated spelling of [`INSTANCE_TYPE_LABEL`] still found on older nodes.
pub const BETA_INSTANCE_TYPE_LABEL: &str = "beta.kubernetes.io/instance-type";

/// Well-known label carrying a node's hostname; per node, so never taken from a skeleton.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Well-known label a kubelet sets from its operating system.
pub const OS_LABEL: &str = "kubernetes.io/os";

/// Well-known label a kubelet sets from its CPU architecture.
pub const ARCH_LABEL: &str = "kubernetes.io/arch";

/// Deprecated OS label the node lifecycle controller still mirrors from [`OS_LABEL`].
pub const BETA_OS_LABEL: &str = "beta.kubernetes.io/os";

/// Deprecated architecture label the node lifecycle controller still mirrors from [`ARCH_LABEL`].
pub const BETA_ARCH_LABEL: &str = "beta.kubernetes.io/arch";

/// Field manager for server-side apply and the `fieldManager` of every write.
pub const FIELD_MANAGER: &str = "ksim-vnode";

/// Port reported in `status.daemonEndpoints.kubeletEndpoint`; the kubelet's default.
pub const KUBELET_PORT: i32 = 10250;

/// Value of the boolean marker labels and taints above.
pub const TRUE_VALUE: &str = "true";

/// Taint effect of the virtual-node and seat-host taints.
pub const NO_SCHEDULE: &str = "NoSchedule";

/// Namespace where kubelets keep their heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_are_valid_qualified_names() {
        // A malformed key would be rejected by the apiserver on the first node we create.
        for key in [
            GROUP_LABEL,
            VIRTUAL_LABEL,
            POOL_LABEL,
            VIRTUAL_TAINT_KEY,
            SEAT_HOST_LABEL,
            LIFETIME_ANNOTATION,
            SKELETON_ANNOTATION,
            SKELETON_CONFIGMAP_ANNOTATION,
            MIN_SIZE_ANNOTATION,
            MAX_SIZE_ANNOTATION,
            PROVISIONING_ANNOTATION,
            POD_PROVISIONING_ANNOTATION,
            BOOTING_UNTIL_ANNOTATION,
            TERMINATING_UNTIL_ANNOTATION,
            INSTANCE_TYPE_LABEL,
            HOSTNAME_LABEL,
        ] {
            let (prefix, name) = key.split_once('/').unwrap();
            assert!(
                prefix.contains('.'),
                "{key}: prefix must be a DNS subdomain"
            );
            assert!(
                !name.is_empty() && name.len() <= 63,
                "{key}: name part length"
            );
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{key}: name part characters"
            );
        }
    }

    #[test]
    fn ksim_keys_share_the_project_prefix() {
        for key in [
            GROUP_LABEL,
            VIRTUAL_LABEL,
            POOL_LABEL,
            SEAT_HOST_LABEL,
            LIFETIME_ANNOTATION,
        ] {
            assert!(key.starts_with("ksim.io/"), "{key}");
        }
        assert_eq!(PROVIDER_ID_SCHEME, "ksim");
        assert_eq!(KUBELET_PORT, 10250);
    }
}
