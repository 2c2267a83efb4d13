//! The shipped RBAC (deploy/cloudprov/rbac.yaml) is enough and has no wildcards: the provider
//! scales a group up and down, and releases a retiring one, as its ServiceAccount.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use super::common::*;
use ksim_cloudprov::runtime;
use ksim_grpc::ServeArgs;
use ksim_localenv::{manifests, wait};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb, cloud_provider_client::CloudProviderClient,
};

const NAMESPACE_YAML: &str = include_str!("../../../../../deploy/vnode/namespace.yaml");
const RBAC_YAML: &str = include_str!("../../../../../deploy/cloudprov/rbac.yaml");
const SERVICE_ACCOUNT: &str = "system:serviceaccount:ksim-system:ksim-cloudprov";

#[test]
fn rbac_rules_name_every_verb_and_resource() {
    assert_eq!(
        manifests::wildcard_rules(RBAC_YAML).unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_provider_scales_up_and_down_and_releases_as_its_service_account() {
    let env = start().await;
    manifests::apply(&env.client, NAMESPACE_YAML).await.unwrap();
    manifests::apply(&env.client, RBAC_YAML).await.unwrap();
    let as_provider = env
        .control_plane
        .client_as(
            SERVICE_ACCOUNT,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:ksim-system",
            ],
        )
        .await
        .unwrap();
    let provider = runtime::Watched::start(as_provider, settings(), 10);
    let server = provider.serve(ServeArgs::ephemeral()).await.unwrap();
    let addr = server.grpc_addr();
    let mut ca = CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap();

    create_seats(
        &env.client,
        &seat_deployment("m5", 1, 1, 3, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    refreshed(&ca).await;
    served(&ca, "m5").await;
    ca.node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
        id: "m5".to_owned(),
        delta: 1,
    })
    .await
    .unwrap();
    let nodes = ready_nodes(&env.client, "m5", 2).await;
    ca.node_group_delete_nodes(pb::NodeGroupDeleteNodesRequest {
        id: "m5".to_owned(),
        nodes: vec![grpc_node(&nodes[0])],
    })
    .await
    .unwrap();
    let survivor: BTreeSet<String> = [nodes[1].metadata.name.clone().unwrap()].into();
    wait::until("the unchosen node alone", DEADLINE, || async {
        let names = node_names(&env.client, "m5").await;
        (names == survivor)
            .then_some(())
            .ok_or(format!("{names:?}"))
    })
    .await
    .unwrap();

    // Retired by its deleter, the group is marked released at the next Refresh.
    retire(&env.client, "m5").await;
    wait::until("m5 released", DEADLINE, || {
        let mut ca = ca.clone();
        let client = env.client.clone();
        async move {
            ca.refresh(pb::RefreshRequest {})
                .await
                .map_err(|e| e.to_string())?;
            released(&client, "m5").await
        }
    })
    .await
    .unwrap();
}
