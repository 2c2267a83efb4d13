//! The provider end to end on the real control plane and the real virtual node pool, called
//! the way cluster-autoscaler calls it (Refresh first, placeholder nodes, retries). The same
//! scenarios against a real cluster-autoscaler are in tests/autoscaler.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use super::common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_pb::api::core::v1 as k8s;
use ksim_localenv::wait;
use ksim_nodes::seats::{SeatDeployment, SkeletonSource};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc as pb;
use kube::{Api, api::PostParams};
use prost::Message;
use serde_json::json;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn scale_up_then_delete_exactly_the_chosen_nodes_never_below_min() {
    let env = start().await;
    let (_server, mut ca) = plaintext_client(&env).await;
    create_seats(
        &env.client,
        &seat_deployment("m5", 1, 1, 4, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    refreshed(&ca).await;
    let groups = wait::until("NodeGroups to list m5", DEADLINE, || {
        let mut ca = ca.clone();
        async move {
            let groups = ca
                .node_groups(pb::NodeGroupsRequest {})
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .node_groups;
            if groups.is_empty() {
                Err("no groups".to_owned())
            } else {
                Ok(groups)
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        groups,
        vec![pb::NodeGroup {
            id: "m5".to_owned(),
            min_size: 1,
            max_size: 4,
            debug: "Deployment default/seats-m5".to_owned()
        }]
    );
    let first = ready_nodes(&env.client, "m5", 1).await;

    // NodeGroupForNode: our node, a node that is not ours, and a placeholder.
    let lookup = ca.clone();
    let group_of = |node: pb::ExternalGrpcNode| {
        let mut ca = lookup.clone();
        async move {
            ca.node_group_for_node(pb::NodeGroupForNodeRequest { node: Some(node) })
                .await
                .unwrap()
                .into_inner()
                .node_group
                .unwrap()
        }
    };
    assert_eq!(group_of(grpc_node(&first[0])).await.max_size, 4);
    let mut real = grpc_node(&first[0]);
    real.provider_id = "aws:///us-east-1a/i-0abc".to_owned();
    assert_eq!(group_of(real).await.id, "");

    // Scale up by 2: the target moves at once, nodes follow.
    ca.node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
        id: "m5".to_owned(),
        delta: 2,
    })
    .await
    .unwrap();
    let target = |mut ca: pb::cloud_provider_client::CloudProviderClient<_>| async move {
        ca.node_group_target_size(pb::NodeGroupTargetSizeRequest {
            id: "m5".to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .target_size
    };
    assert_eq!(target(ca.clone()).await, 3);
    // While seats are unregistered, CA asks about placeholders built from their instance ids.
    let instances = ca
        .node_group_nodes(pb::NodeGroupNodesRequest {
            id: "m5".to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(instances.len(), 3);
    for instance in &instances {
        assert_eq!(group_of(placeholder_node(&instance.id)).await.id, "m5");
    }
    let nodes = ready_nodes(&env.client, "m5", 3).await;
    wait::until("3 running instances", DEADLINE, || {
        let mut ca = ca.clone();
        async move {
            let instances = ca
                .node_group_nodes(pb::NodeGroupNodesRequest {
                    id: "m5".to_owned(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .instances;
            let running = instances
                .iter()
                .filter(|i| {
                    i.status.as_ref().unwrap().instance_state
                        == i32::from(pb::instance_status::InstanceState::InstanceRunning)
                })
                .count();
            (running == 3 && instances.len() == 3)
                .then_some(())
                .ok_or(format!("{instances:?}"))
        }
    })
    .await
    .unwrap();
    // Every instance id is a registered node's providerID.
    let provider_ids: BTreeSet<String> = nodes
        .iter()
        .map(|n| n.spec.as_ref().unwrap().provider_id.clone().unwrap())
        .collect();
    let instance_ids: BTreeSet<String> = ca
        .node_group_nodes(pb::NodeGroupNodesRequest {
            id: "m5".to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .instances
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(instance_ids, provider_ids);

    let err = ca
        .node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
            id: "m5".to_owned(),
            delta: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("max size 4"), "{}", err.message());

    // Scale down the first and the last node by name: exactly those go.
    let mut names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    let chosen: Vec<_> = nodes
        .iter()
        .filter(|n| [&names[0], &names[2]].contains(&n.metadata.name.as_ref().unwrap()))
        .map(grpc_node)
        .collect();
    let request = pb::NodeGroupDeleteNodesRequest {
        id: "m5".to_owned(),
        nodes: chosen.clone(),
    };
    ca.node_group_delete_nodes(request.clone()).await.unwrap();
    assert_eq!(target(ca.clone()).await, 1);
    let survivor: BTreeSet<String> = [names[1].clone()].into();
    wait::until("only the unchosen node left", DEADLINE, || async {
        let nodes = node_names(&env.client, "m5").await;
        let seats = live_seats(&env.client, "m5").await;
        (nodes == survivor && seats == survivor)
            .then_some(())
            .ok_or(format!("nodes {nodes:?}, seats {seats:?}"))
    })
    .await
    .unwrap();
    // CA retries after a timeout: nothing more goes.
    ca.node_group_delete_nodes(request).await.unwrap();
    assert_eq!(target(ca.clone()).await, 1);
    assert_eq!(ready_nodes(&env.client, "m5", 1).await.len(), 1);

    // Min size holds, and DecreaseTargetSize never takes a registered node.
    let last = ready_nodes(&env.client, "m5", 1).await;
    let err = ca
        .node_group_delete_nodes(pb::NodeGroupDeleteNodesRequest {
            id: "m5".to_owned(),
            nodes: vec![grpc_node(&last[0])],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let err = ca
        .node_group_decrease_target_size(pb::NodeGroupDecreaseTargetSizeRequest {
            id: "m5".to_owned(),
            delta: -1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(node_names(&env.client, "m5").await, survivor);

    // Malformed input.
    let err = ca
        .node_group_target_size(pb::NodeGroupTargetSizeRequest {
            id: "c5".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = ca
        .node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
            id: "m5".to_owned(),
            delta: -3,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_at_zero_scales_up_from_its_template() {
    let env = start().await;
    let (_server, mut ca) = plaintext_client(&env).await;
    // The skeleton comes from a ConfigMap here, the other way a seat template can carry it.
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "c5-shape" },
        "data": { "node.yaml": M5_LARGE_TAINTED_SKELETON }
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    create_seats(
        &env.client,
        &SeatDeployment {
            skeleton: SkeletonSource::ConfigMap("c5-shape".to_owned()),
            ..seat_deployment("c5", 0, 0, 3, M5_LARGE_TAINTED_SKELETON)
        },
    )
    .await;
    refreshed(&ca).await;
    let template = wait::until("a template node for c5", DEADLINE, || {
        let mut ca = ca.clone();
        async move {
            ca.node_group_template_node_info(pb::NodeGroupTemplateNodeInfoRequest {
                id: "c5".to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|e| e.to_string())
        }
    })
    .await
    .unwrap();
    assert_eq!(template.node_info, template.node_bytes);
    let template = k8s::Node::decode(template.node_bytes.as_slice()).unwrap();
    let status = template.status.clone().unwrap();
    assert_eq!(
        status
            .allocatable
            .get("pods")
            .and_then(|q| q.string.as_deref()),
        Some("29")
    );

    ca.node_group_increase_size(pb::NodeGroupIncreaseSizeRequest {
        id: "c5".to_owned(),
        delta: 1,
    })
    .await
    .unwrap();
    let node = ready_nodes(&env.client, "c5", 1).await.remove(0);
    // The template promised what the node has: labels (but the per-node hostname) and taints.
    let mut template_labels = template.metadata.unwrap().labels;
    let mut node_labels = node.metadata.labels.unwrap();
    template_labels.remove("kubernetes.io/hostname");
    node_labels.remove("kubernetes.io/hostname");
    assert_eq!(template_labels, node_labels);
    let template_taints: Vec<(String, String)> = template
        .spec
        .unwrap()
        .taints
        .into_iter()
        .map(|t| (t.key.unwrap(), t.effect.unwrap()))
        .collect();
    // The node lifecycle controller taints a node not-ready for a moment after it registers,
    // as it does a kubelet's; the promise is about the taints the node settles with.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client.clone());
    let name = node.metadata.name.clone().unwrap();
    wait::until(
        "the node's taints to settle on the template's",
        DEADLINE,
        || async {
            let node = nodes.get(&name).await.map_err(|e| e.to_string())?;
            let node_taints: Vec<(String, String)> = node
                .spec
                .and_then(|spec| spec.taints)
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.key, t.effect))
                .collect();
            (node_taints == template_taints)
                .then_some(())
                .ok_or(format!("{node_taints:?} vs {template_taints:?}"))
        },
    )
    .await
    .unwrap();
}

/// Issue 14, finding 2: a seat Deployment taking a pool-managed group's name used to make the
/// provider serve the pool's nodes as its instances and delete one when CA named it. Issue 53,
/// finding 7: a group's members are its own seats' nodes, so the name no longer matters (and a
/// Node labelled as the pool's no longer hides a group): the autoscaler group is served, and the
/// pool's nodes are neither claimed nor deleted through it.
#[tokio::test(flavor = "multi_thread")]
async fn a_seat_deployment_named_like_a_pool_managed_group_never_takes_its_nodes() {
    let env = start().await;
    let (_server, mut ca) = plaintext_client(&env).await;
    env.pool
        .create_group("race", M5_LARGE_TAINTED_SKELETON, 2)
        .await
        .unwrap();
    let pool_nodes = ready_nodes(&env.client, "race", 2).await;
    let uids: BTreeSet<String> = pool_nodes
        .iter()
        .map(|n| n.metadata.uid.clone().unwrap())
        .collect();
    create_seats(
        &env.client,
        &seat_deployment("race", 1, 0, 3, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    refreshed(&ca).await;
    served(&ca, "race").await;

    let owner = ca
        .node_group_for_node(pb::NodeGroupForNodeRequest {
            node: Some(grpc_node(&pool_nodes[0])),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group;
    assert!(
        owner.as_ref().is_none_or(|g| g.id.is_empty()),
        "the pool's node was claimed by {owner:?}"
    );
    let refused = ca
        .node_group_delete_nodes(pb::NodeGroupDeleteNodesRequest {
            id: "race".to_owned(),
            nodes: vec![grpc_node(&pool_nodes[0])],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("is not a node of node group race"),
        "{}",
        refused.message()
    );

    // The pool's nodes are the same objects: none was deleted and registered again.
    let after: BTreeSet<String> = ready_nodes(&env.client, "race", 2)
        .await
        .iter()
        .map(|n| n.metadata.uid.clone().unwrap())
        .collect();
    assert_eq!(after, uids);
}

/// Issue 39, finding 1: DeleteNodes to an autoscaler group naming a pool-managed node under the
/// group's provider ID (`ksim://m5/<pool node>`) answered OK and deleted the pool's Node, and
/// NodeGroupForNode claimed it for the group: the provider trusted the ID it was sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_provider_id_deletes_no_node_the_group_does_not_own() {
    let env = start().await;
    let (_server, mut ca) = plaintext_client(&env).await;
    env.pool
        .create_group("fixed", M5_LARGE_TAINTED_SKELETON, 1)
        .await
        .unwrap();
    let fixed = ready_nodes(&env.client, "fixed", 1).await.remove(0);
    let fixed_name = fixed.metadata.name.clone().unwrap();
    let fixed_uid = fixed.metadata.uid.clone().unwrap();
    create_seats(
        &env.client,
        &seat_deployment("m5", 2, 0, 4, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    refreshed(&ca).await;
    served(&ca, "m5").await;
    let seats = ready_nodes(&env.client, "m5", 2).await;

    let mut forged = grpc_node(&fixed);
    forged.provider_id = format!("ksim://m5/{fixed_name}");
    // The request also names a node the group does own: nothing of it is carried out.
    let refused = ca
        .node_group_delete_nodes(pb::NodeGroupDeleteNodesRequest {
            id: "m5".to_owned(),
            nodes: vec![grpc_node(&seats[0]), forged.clone()],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains(&format!("{fixed_name:?}")),
        "{}",
        refused.message()
    );
    let group = ca
        .node_group_for_node(pb::NodeGroupForNodeRequest { node: Some(forged) })
        .await
        .unwrap()
        .into_inner()
        .node_group;
    assert!(
        group.as_ref().is_none_or(|g| g.id.is_empty()),
        "the pool's node was claimed by {group:?}"
    );

    // The pool's node is the same object, and the group lost nothing.
    let still = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .get(&fixed_name)
        .await
        .unwrap();
    assert_eq!(still.metadata.uid.as_deref(), Some(fixed_uid.as_str()));
    assert!(still.metadata.deletion_timestamp.is_none());
    let target = ca
        .node_group_target_size(pb::NodeGroupTargetSizeRequest {
            id: "m5".to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .target_size;
    assert_eq!(target, 2);
    let seat_names: BTreeSet<String> = seats
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(live_seats(&env.client, "m5").await, seat_names);
}
