//! Node failures against the real node lifecycle controller: a failed node goes unreachable
//! with its pods left as they are, and comes back; a shorter node lease is renewed at its own
//! interval.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Node, Pod},
};
use ksim_grpc::ServeArgs;
use ksim_localenv::wait;
use ksim_proto::ksim::vnode::v1::{self as pb, virtual_node_pool_client::VirtualNodePoolClient};
use ksim_vnode::{
    config::PoolConfig,
    index::NodeNamesError,
    pool::{Pool, PoolError},
    runtime,
};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;
use tonic::Code;

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// A pod bound to `node` that stays there whatever the node lifecycle controller taints it
/// with, so only the pool decides what becomes of it.
fn pod_on(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "nodeSelector": { "kubernetes.io/hostname": node },
            "tolerations": [virtual_toleration(), { "key": UNREACHABLE, "operator": "Exists" }],
            "containers": [{ "name": "app", "image": "registry.example/app:1" }],
        }
    }))
    .unwrap()
}

fn ready_status(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|condition| condition.type_ == "Ready")
        .map(|condition| condition.status.clone())
}

fn unreachable_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|taint| taint.key == UNREACHABLE && taint.effect == "NoExecute")
        })
}

fn failed_in_pool(pool: &Pool, node: &str) -> bool {
    pool.nodes(None)
        .unwrap()
        .iter()
        .any(|view| view.name == node && view.failed)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_node_goes_unreachable_with_its_pods_as_they_were_and_recovers() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("fail", SKELETON, 2).await.unwrap();
    ready_nodes(&env.client, "fail", 2).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let nodes: Api<Node> = Api::all(env.client.clone());
    pods.create(&PostParams::default(), &pod_on("doomed", "fail-0"))
        .await
        .unwrap();
    wait::until("the pod to run", DEADLINE, || async {
        let pod = pods.get("doomed").await.map_err(|e| e.to_string())?;
        match pod.status.and_then(|status| status.phase).as_deref() {
            Some("Running") => Ok(()),
            phase => Err(format!("{phase:?}")),
        }
    })
    .await
    .unwrap();

    // One unknown name refuses the whole request.
    let refused = pool
        .fail_nodes(&["fail-1".to_owned(), "fail-9".to_owned()])
        .unwrap_err();
    assert!(
        matches!(&refused, PoolError::NodeNames(NodeNamesError::Unknown(name)) if name == "fail-9"),
        "{refused:?}"
    );
    assert_eq!(tonic::Status::from(refused).code(), Code::NotFound);
    assert!(!failed_in_pool(&pool, "fail-1"));

    pool.fail_nodes(&["fail-0".to_owned()]).unwrap();
    assert!(failed_in_pool(&pool, "fail-0"));
    pods.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    // Bound to the failed node before the node lifecycle controller gives up on it.
    pods.create(&PostParams::default(), &pod_on("stranded", "fail-0"))
        .await
        .unwrap();
    wait::until("the new pod to be bound", DEADLINE, || async {
        let pod = pods.get("stranded").await.map_err(|e| e.to_string())?;
        pod.spec
            .and_then(|spec| spec.node_name)
            .ok_or_else(|| "not bound".to_owned())
    })
    .await
    .unwrap();

    wait::until("fail-0 unreachable", DEADLINE, || async {
        let node = nodes.get("fail-0").await.map_err(|e| e.to_string())?;
        let ready = ready_status(&node);
        if ready.as_deref() == Some("Unknown") && unreachable_taint(&node) {
            Ok(())
        } else {
            Err(format!(
                "Ready {ready:?}, unreachable taint {}",
                unreachable_taint(&node)
            ))
        }
    })
    .await
    .unwrap();
    // A grace period went by: the deleted pod is still terminating, the new one not started,
    // and the other node kept alive.
    let doomed = pods.get("doomed").await.unwrap();
    assert!(doomed.metadata.deletion_timestamp.is_some());
    let stranded = pods.get("stranded").await.unwrap();
    assert_eq!(
        stranded.status.and_then(|status| status.phase).as_deref(),
        Some("Pending")
    );
    let other = nodes.get("fail-1").await.unwrap();
    assert_eq!(ready_status(&other).as_deref(), Some("True"));
    assert!(!unreachable_taint(&other));

    pool.recover_nodes(&["fail-0".to_owned()]).unwrap();
    assert!(!failed_in_pool(&pool, "fail-0"));
    wait::until(
        "fail-0 Ready without the unreachable taint",
        DEADLINE,
        || async {
            let node = nodes.get("fail-0").await.map_err(|e| e.to_string())?;
            let ready = ready_status(&node);
            if ready.as_deref() == Some("True") && !unreachable_taint(&node) {
                Ok(())
            } else {
                Err(format!(
                    "Ready {ready:?}, unreachable taint {}",
                    unreachable_taint(&node)
                ))
            }
        },
    )
    .await
    .unwrap();
    wait::until(
        "the deleted pod gone, the new one running",
        DEADLINE,
        || async {
            let doomed = pods.get_opt("doomed").await.map_err(|e| e.to_string())?;
            let stranded = pods.get("stranded").await.map_err(|e| e.to_string())?;
            let phase = stranded.status.and_then(|status| status.phase);
            if doomed.is_none() && phase.as_deref() == Some("Running") {
                Ok(())
            } else {
                Err(format!(
                    "deleted pod there: {}, new pod {phase:?}",
                    doomed.is_some()
                ))
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shorter_node_lease_is_renewed_at_its_own_interval() {
    let env = control_plane().await;
    init_logs();
    // An hour: at its pace no node renews twice in this test.
    let config = PoolConfig {
        lease_duration_seconds: 3600,
        seat_host: false,
        ..pool_config()
    };
    let service = runtime::start(env.client.clone(), config, ServeArgs::ephemeral())
        .await
        .unwrap();
    let mut client = VirtualNodePoolClient::connect(service.url()).await.unwrap();
    service
        .pool
        .create_group("lease", SKELETON, 1)
        .await
        .unwrap();
    ready_nodes(&env.client, "lease", 1).await;

    let refused = client
        .fail_nodes(pb::FailNodesRequest {
            node_names: vec!["lease-0".to_owned(), "lease-7".to_owned()],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    assert!(refused.message().contains("lease-7"), "{refused:?}");
    let empty = client
        .recover_nodes(pb::RecoverNodesRequest { node_names: vec![] })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument, "{empty:?}");
    let listed = client
        .list_nodes(pb::ListNodesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.nodes.iter().all(|node| !node.failed));

    let too_short = client
        .set_node_lease(pb::SetNodeLeaseRequest {
            duration: Some(prost_types::Duration {
                seconds: 0,
                nanos: 50_000_000,
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(too_short.code(), Code::InvalidArgument, "{too_short:?}");
    let set = client
        .set_node_lease(pb::SetNodeLeaseRequest {
            duration: Some(prost_types::Duration {
                seconds: 2,
                nanos: 0,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.duration.map(|d| (d.seconds, d.nanos)), Some((2, 0)));

    // Renewed every half second now: two renewals, which an hour's lease would not give.
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    let renew_time = || async {
        let lease = leases.get("lease-0").await.map_err(|e| e.to_string())?;
        let spec = lease.spec.unwrap_or_default();
        Ok::<_, String>((spec.renew_time.map(|t| t.0), spec.lease_duration_seconds))
    };
    let (first, _) = renew_time().await.unwrap();
    let seen = std::sync::Mutex::new(vec![first]);
    let duration = wait::until(
        "two renewals of lease-0",
        Duration::from_secs(30),
        || async {
            let (renewed, duration) = renew_time().await?;
            let mut seen = seen.lock().unwrap();
            if seen.last() != Some(&renewed) {
                seen.push(renewed);
            }
            if seen.len() >= 3 {
                Ok(duration)
            } else {
                Err(format!("renewals seen: {seen:?}"))
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(duration, Some(2), "the Lease says the lease in force");

    let restored = client
        .set_node_lease(pb::SetNodeLeaseRequest { duration: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(restored.duration.map(|d| d.seconds), Some(3600));
    assert_eq!(service.pool.node_lease(), Duration::from_secs(3600));
}
