//! What a running simulation shows on the cluster: the driver's Lease (one simulation per
//! cluster, held by the simulation's id) and the simulation's root (`SimulationRoot sim-<id>`,
//! which owns what the replay created and lists the pool groups it made). The driver writes
//! both; the environment and the pool read them to refuse changes under a running simulation.
//! One definition, so that the names the three services use cannot drift apart.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::coordination::v1::Lease,
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};

/// The driver's single-simulation Lease, in the namespace of the services.
pub const DRIVER_LEASE: &str = "ksim-driver";

pub const ROOT_GROUP: &str = "ksim.io";
pub const ROOT_VERSION: &str = "v1alpha1";
pub const ROOT_KIND: &str = "SimulationRoot";
pub const ROOT_PLURAL: &str = "simulationroots";

/// Root annotation: the pool-managed groups the simulation created, comma-separated (the root
/// does not own them, so a driver restarted after a crash reads here what to delete).
pub const POOL_GROUPS_ANNOTATION: &str = "ksim.io/pool-groups";

/// The root's API resource.
pub fn root_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(ROOT_GROUP, ROOT_VERSION, ROOT_KIND),
        ROOT_PLURAL,
    )
}

/// The name of simulation `id`'s root.
pub fn root_name(id: &str) -> String {
    format!("sim-{id}")
}

/// The pool groups a root's annotations list.
pub fn pool_groups(annotations: Option<&BTreeMap<String, String>>) -> Vec<String> {
    annotations
        .and_then(|annotations| annotations.get(POOL_GROUPS_ANNOTATION))
        .map(|groups| {
            groups
                .split(',')
                .filter(|group| !group.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The holder of a lease that has not expired at `now`, as the driver reads it.
pub fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let expires = renewed
        .checked_add(SignedDuration::from_secs(seconds))
        .ok()?;
    (expires > now).then_some(holder)
}

/// The simulation holding the driver's Lease now, and its root as the apiserver has it.
#[derive(Debug, Clone)]
pub struct Running {
    pub simulation: String,
    /// `None` before the driver created it (or with no root CRD yet).
    pub root: Option<DynamicObject>,
}

/// The live holder of the driver's Lease in `namespace` and its root; `None` when no
/// simulation holds it.
pub async fn running(client: &Client, namespace: &str) -> Result<Option<Running>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Some(simulation) = leases
        .get_opt(DRIVER_LEASE)
        .await?
        .and_then(|lease| live_holder(&lease, Timestamp::now()))
    else {
        return Ok(None);
    };
    let roots: Api<DynamicObject> = Api::all_with(client.clone(), &root_resource());
    let root = match roots.get_opt(&root_name(&simulation)).await {
        Ok(root) => root,
        // No CRD yet: no simulation has created a root.
        Err(error) if crate::is_not_found(&error) => None,
        Err(error) => return Err(error),
    };
    Ok(Some(Running { simulation, root }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::{
        api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime,
    };

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + seconds).unwrap()
    }

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(at(0))),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_is_held_until_its_duration_has_passed_since_renewal() {
        assert_eq!(
            live_holder(&lease(Some("5f-1")), at(14)).as_deref(),
            Some("5f-1")
        );
        assert_eq!(live_holder(&lease(Some("5f-1")), at(15)), None);
        assert_eq!(live_holder(&lease(None), at(1)), None);
        assert_eq!(live_holder(&lease(Some("")), at(1)), None);
        assert_eq!(live_holder(&Lease::default(), at(1)), None);
    }

    #[test]
    fn a_roots_pool_groups_are_its_annotations_list() {
        let annotations: BTreeMap<String, String> =
            [(POOL_GROUPS_ANNOTATION.to_owned(), "small,,big".to_owned())].into();
        assert_eq!(pool_groups(Some(&annotations)), ["small", "big"]);
        assert!(pool_groups(None).is_empty());
        assert!(pool_groups(Some(&BTreeMap::new())).is_empty());
        assert_eq!(root_name("5f-1"), "sim-5f-1");
        assert_eq!(root_resource().plural, "simulationroots");
    }
}
