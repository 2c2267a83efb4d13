//! Karpenter's API as ksim's services reach it: the NodePool resource, read by the pool (its
//! provisioning models) and created by the driver (a run's NodePools).

use kube::api::ApiResource;

/// `karpenter.sh/v1` NodePools, cluster-scoped.
pub fn nodepools() -> ApiResource {
    ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: "NodePool".into(),
        plural: "nodepools".into(),
    }
}
