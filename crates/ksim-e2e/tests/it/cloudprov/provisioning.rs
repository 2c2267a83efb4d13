//! An autoscaler group with a provisioning model (`ksim.io/provisioning`), as the provider and the
//! real cluster-autoscaler see it: an instance stays Creating until its node registers, a
//! booting node is no problem, and a removed node lingers as a Deleting instance. States and
//! orders, never timings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, time::Duration};

use super::common::*;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_grpc::ServeArgs;
use ksim_localenv::{CloudConfig, ClusterAutoscaler, wait};
use ksim_nodes::{
    labels::{GROUP_LABEL, PROVISIONING_ANNOTATION, VIRTUAL_TAINT_KEY},
    node::{is_booting, is_shutting_down},
    seats::SeatDeployment,
};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb, cloud_provider_client::CloudProviderClient, instance_status::InstanceState,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tonic::transport::Channel;

/// CA's scale-up, the seat and the pool's turn on a loaded machine.
const CA_DEADLINE: Duration = Duration::from_secs(240);

/// A model's JSON as the driver annotates it (`GroupProvisioning::to_json`), delays fixed.
fn provisioning(registration: &str, ready: &str, termination: &str) -> String {
    json!({
        "model": "e2e-model",
        "seed": 5,
        "speed": 1.0,
        "nodes": { "registration": registration, "ready": ready, "termination": termination },
    })
    .to_string()
}

fn modelled_seats(replicas: i32, min: i32, max: i32, provisioning: String) -> SeatDeployment {
    SeatDeployment {
        provisioning: Some(provisioning),
        ..seat_deployment("m5", replicas, min, max, M5_LARGE_TAINTED_SKELETON)
    }
}

/// The group's instances as CA gets them: (id, state, whether an error is attached).
async fn instances(
    client: &CloudProviderClient<Channel>,
) -> Result<Vec<(String, InstanceState, bool)>, String> {
    let response = client
        .clone()
        .node_group_nodes(pb::NodeGroupNodesRequest {
            id: "m5".to_owned(),
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok(response
        .into_inner()
        .instances
        .into_iter()
        .map(|instance| {
            let status = instance.status.unwrap_or_default();
            (
                instance.id,
                status.instance_state(),
                status.error_info.is_some(),
            )
        })
        .collect())
}

async fn nodes(env: &Env) -> Vec<Node> {
    Api::<Node>::all(env.client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}=m5")))
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_scales_from_zero_and_the_instance_stays_creating_while_its_node_registers() {
    let env = start().await;
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address: SocketAddr = server.grpc_addr();
    let (_client_server, client) = plaintext_client(&env).await;
    // A day to register: the node never appears during the test.
    create_seats(
        &env.client,
        &modelled_seats(0, 0, 3, provisioning("24h", "0s", "0s")),
    )
    .await;
    let _ca = ClusterAutoscaler::builder(
        &env.control_plane,
        CloudConfig::plaintext(address.to_string()),
    )
    .fast()
    // The tests' two minutes would have CA give the instance up; a real cloud's 15 min.
    .arg("--max-node-provision-time=15m")
    .start()
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "work", "labels": { "app": "work" } },
        "spec": {
            "nodeSelector": { GROUP_LABEL: "m5" },
            "tolerations": [
                { "key": "dedicated", "operator": "Exists", "effect": "NoSchedule" },
                { "key": VIRTUAL_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule" }
            ],
            "containers": [{ "name": "work", "image": "registry.example/work:1",
                "resources": { "requests": { "cpu": "1500m", "memory": "1Gi" } } }]
        }
    }))
    .unwrap();
    Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();

    // CA scaled up from the template; the seat exists and runs, its node is not due.
    let seat = wait::until("a seated instance, Creating", CA_DEADLINE, || async {
        let seats = live_seats(&env.client, "m5").await;
        let listed = instances(&client).await?;
        match (seats.iter().next(), listed.as_slice()) {
            (Some(seat), [(id, InstanceState::InstanceCreating, false)])
                if *id == format!("ksim://m5/{seat}") =>
            {
                Ok(seat.clone())
            }
            _ => Err(format!("seats {seats:?}, instances {listed:?}")),
        }
    })
    .await
    .unwrap();
    ksim_localenv::pods::in_phase(
        &env.client,
        NAMESPACE,
        &format!("{GROUP_LABEL}=m5"),
        "Running",
        1,
        DEADLINE,
    )
    .await
    .unwrap();
    // The pool has seen the running seat and made no node for it: target size 1, none
    // registered, as in a cloud whose instance is still booting.
    assert!(nodes(&env).await.is_empty());
    let group = env.pool.group("m5").unwrap();
    assert_eq!((group.desired, group.registered), (1, 0));
    assert_eq!(group.provisioning_model.as_deref(), Some("e2e-model"));
    assert_eq!(
        instances(&client).await.unwrap(),
        [(
            format!("ksim://m5/{seat}"),
            InstanceState::InstanceCreating,
            false
        )]
    );
    let work = Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
        .get("work")
        .await
        .unwrap();
    assert_eq!(
        work.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_booting_node_is_no_problem_and_a_removed_one_lingers_as_a_deleting_instance() {
    let env = start().await;
    let (_server, client) = plaintext_client(&env).await;
    // Registered at once, an hour to be Ready, an hour to go.
    create_seats(
        &env.client,
        &modelled_seats(1, 0, 3, provisioning("0s", "1h", "1h")),
    )
    .await;
    refreshed(&client).await;
    let node = wait::until("the node registered, booting", DEADLINE, || async {
        let nodes = nodes(&env).await;
        match nodes.as_slice() {
            [node] if is_booting(node) => Ok(node.clone()),
            _ => Err(format!("{nodes:?}")),
        }
    })
    .await
    .unwrap();
    let name = node.metadata.name.clone().unwrap();
    let id = format!("ksim://m5/{name}");
    // Running, and no "is its pool running?" error: it boots, as its model says.
    let running = wait::until("the instance Running", DEADLINE, || async {
        let listed = instances(&client).await?;
        match listed.as_slice() {
            [(listed_id, InstanceState::InstanceRunning, error)] if *listed_id == id => Ok(*error),
            _ => Err(format!("{listed:?}")),
        }
    })
    .await
    .unwrap();
    assert!(!running, "a booting node has no error attached");

    // CA removes it: the seat goes at once, the node stays, unschedulable and shutting down,
    // a Deleting instance, until its hour has passed.
    client
        .clone()
        .node_group_delete_nodes(pb::NodeGroupDeleteNodesRequest {
            id: "m5".to_owned(),
            nodes: vec![grpc_node(&node)],
        })
        .await
        .unwrap();
    let lingering = wait::until(
        "the node shutting down, its seat gone",
        DEADLINE,
        || async {
            let seats = live_seats(&env.client, "m5").await;
            let nodes = nodes(&env).await;
            let listed = instances(&client).await?;
            match (seats.is_empty(), nodes.as_slice(), listed.as_slice()) {
                (true, [node], [(listed_id, InstanceState::InstanceDeleting, false)])
                    if is_shutting_down(node) && *listed_id == id =>
                {
                    Ok(node.clone())
                }
                _ => Err(format!("seats {seats:?}, instances {listed:?}")),
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(lingering.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(
        lingering.metadata.uid, node.metadata.uid,
        "the same node, not a new one"
    );

    // The run's cleanup takes the model away: the node goes at once.
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .patch(
            "seats-m5",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "annotations": { PROVISIONING_ANNOTATION: null } } }),
            ),
        )
        .await
        .unwrap();
    wait::until("the node gone", DEADLINE, || async {
        let nodes = nodes(&env).await;
        let listed = instances(&client).await?;
        (nodes.is_empty() && listed.is_empty())
            .then_some(())
            .ok_or(format!("nodes {}, instances {listed:?}", nodes.len()))
    })
    .await
    .unwrap();
}
