//! Deployment-backed node groups: one seat Deployment per group, which the pool turns into
//! virtual nodes and the cloud provider offers to cluster-autoscaler. The simulation root owns
//! it, so the simulation's cleanup removes the group too.

use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::apis::meta::v1::OwnerReference};
use ksim_nodes::seats::{SeatDeployment, SkeletonSource};
use kube::{Api, Client, api::PostParams};

use crate::domain::{RootRef, SIMULATION_LABEL};

#[derive(Debug)]
pub struct SeatGroup<'a> {
    pub name: &'a str,
    pub skeleton_yaml: &'a str,
    pub min_size: i32,
    pub max_size: i32,
    pub initial_size: i32,
}

/// Creates the seat Deployment of `group` in `namespace`; one that exists already (another
/// simulation's, or a real group) is a 409 conflict, never taken over.
pub async fn create(
    client: &Client,
    namespace: &str,
    group: &SeatGroup<'_>,
    root: &RootRef,
    simulation_id: &str,
) -> Result<Deployment, kube::Error> {
    let mut deployment = SeatDeployment {
        group: group.name.to_owned(),
        namespace: namespace.to_owned(),
        replicas: group.initial_size,
        skeleton: SkeletonSource::Inline(group.skeleton_yaml.to_owned()),
        min_size: Some(group.min_size),
        max_size: Some(group.max_size),
    }
    .to_deployment();
    deployment.metadata.owner_references = Some(vec![OwnerReference {
        api_version: root.api_version.clone(),
        kind: root.kind.clone(),
        name: root.name.clone(),
        uid: root.uid.clone(),
        block_owner_deletion: Some(true),
        controller: Some(false),
    }]);
    deployment
        .metadata
        .labels
        .get_or_insert_default()
        .insert(SIMULATION_LABEL.to_owned(), simulation_id.to_owned());
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &deployment).await
}
