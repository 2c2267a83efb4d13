//! The ResourceClaims a pod runs with: the kubelet starts a pod only once each is allocated and
//! reserved for it (the scheduler does both before it binds), then has the claims' drivers
//! prepare the devices. A virtual node's devices need no preparing, so allocated and reserved
//! is prepared.

use k8s_openapi::api::{core::v1::Pod, resource::v1::ResourceClaim};

/// The names of `pod`'s claims, or the first one not known yet: a claim made from a template
/// is named in the pod's status by the resource claim controller, which may not have yet.
pub fn claim_names(pod: &Pod) -> Result<Vec<String>, String> {
    let Some(claims) = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.resource_claims.as_ref())
    else {
        return Ok(Vec::new());
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|status| status.resource_claim_statuses.as_deref())
        .unwrap_or_default();
    claims
        .iter()
        .map(|claim| {
            if let Some(name) = &claim.resource_claim_name {
                return Ok(name.clone());
            }
            statuses
                .iter()
                .find(|status| status.name == claim.name)
                .and_then(|status| status.resource_claim_name.clone())
                .ok_or_else(|| claim.name.clone())
        })
        .collect()
}

/// Whether `claim` is allocated and reserved for the pod with UID `pod_uid`.
pub fn prepared(claim: &ResourceClaim, pod_uid: &str) -> bool {
    let Some(status) = &claim.status else {
        return false;
    };
    status.allocation.is_some()
        && status
            .reserved_for
            .iter()
            .flatten()
            .any(|consumer| consumer.resource == "pods" && consumer.uid == pod_uid)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(claims: serde_json::Value, statuses: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "train", "namespace": "ml", "uid": "p-1"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": claims},
            "status": {"resourceClaimStatuses": statuses},
        }))
        .unwrap()
    }

    #[test]
    fn claims_are_named_directly_or_by_the_pods_status() {
        let by_name = pod(
            json!([{"name": "gpu", "resourceClaimName": "shared-gpu"}]),
            json!([]),
        );
        assert_eq!(claim_names(&by_name), Ok(vec!["shared-gpu".to_owned()]));
        let template = json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]);
        let unnamed = pod(template.clone(), json!([]));
        assert_eq!(claim_names(&unnamed), Err("gpu".to_owned()));
        let named = pod(
            template,
            json!([{"name": "gpu", "resourceClaimName": "train-gpu-x7k2p"}]),
        );
        assert_eq!(claim_names(&named), Ok(vec!["train-gpu-x7k2p".to_owned()]));
    }

    #[test]
    fn a_claim_is_prepared_once_allocated_and_reserved_for_the_pod() {
        let claim = |status: serde_json::Value| -> ResourceClaim {
            serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "ml"},
                "spec": {},
                "status": status,
            }))
            .unwrap()
        };
        let allocation = json!({"devices": {"results": [{"request": "gpu", "driver": "gpu.ksim.io", "pool": "n", "device": "gpu-0"}]}});
        let for_pod = json!([{"resource": "pods", "name": "train", "uid": "p-1"}]);
        assert!(prepared(
            &claim(json!({"allocation": allocation, "reservedFor": for_pod})),
            "p-1"
        ));
        assert!(!prepared(&claim(json!({"reservedFor": for_pod})), "p-1"));
        assert!(!prepared(&claim(json!({"allocation": allocation})), "p-1"));
        assert!(!prepared(
            &claim(json!({"allocation": allocation, "reservedFor": for_pod})),
            "p-2"
        ));
    }
}
