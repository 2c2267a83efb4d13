//! Booting nodes (a provisioning model's `ready` delay) in a group that answers GetOptions,
//! against one that does not, on every tested cluster-autoscaler (CA) release: CA 1.35+ takes
//! a startup time of 0 for the first (the externalgrpc answer has no field for it), so its
//! booting nodes count as unready, not upcoming (docs/compatibility.md). Counts and log lines,
//! never timings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, time::Duration};

use super::common::*;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_grpc::ServeArgs;
use ksim_localenv::fixtures::Workload;
use ksim_localenv::{CloudConfig, ClusterAutoscaler, wait};
use ksim_nodes::seats::SeatDeployment;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use serde_json::json;

/// The booting nodes' 45 s and CA's scale-ups and removals around them, on a loaded machine.
const CA_DEADLINE: Duration = Duration::from_secs(300);
/// What CA logs, at warning level, for each loop it skips because too many nodes are unready.
const UNHEALTHY: &str = "Cluster is not ready for autoscaling";

/// Registered at once, Ready 3 recorded minutes later at 4x: 45 s, long against CA's 1 s loop.
fn booting() -> String {
    json!({
        "model": "e2e-booting",
        "seed": 5,
        "speed": 4.0,
        "nodes": { "registration": "0s", "ready": "3m", "termination": "0s" },
    })
    .to_string()
}

fn group(name: &str) -> SeatDeployment {
    SeatDeployment {
        provisioning: Some(booting()),
        ..seat_deployment(name, 0, 0, 8, M5_LARGE_TAINTED_SKELETON)
    }
}

/// Two pods of `group`, each needing a node of its own (1.5 of a node's 1.93 CPUs).
fn work(group: &str) -> Deployment {
    Workload::new(&format!("work-{group}"), 2)
        .requests("1500m", "1Gi")
        .on_group(group)
        .deployment()
}

/// The nodes the Running pods of `group`'s workload are on.
async fn hosts(env: &Env, group: &str) -> BTreeSet<String> {
    Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("app=work-{group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|pod| pod.spec.and_then(|s| s.node_name))
        .collect()
}

/// Two groups whose nodes boot for 45 s, two pods pending on each; only `opts` answers
/// GetOptions. Before 1.35 each group gets one node per pod. From 1.35 `plain` still does,
/// while `opts` is scaled up again for the same pods, the cluster is unhealthy until its nodes
/// are Ready (CA skips those loops), and the extra nodes go only after, named by CA.
pub(crate) async fn booting_nodes_in_a_group_with_options(version: &str) {
    let binary = release(version);
    let env = start_with(settings_answering_options_for("opts")).await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    for name in ["opts", "plain"] {
        create_seats(&env.client, &group(name)).await;
    }
    let ca = ClusterAutoscaler::builder(
        &env.control_plane,
        CloudConfig::plaintext(server.grpc_addr().to_string()),
    )
    .fast()
    .binary(binary)
    // 1.36 logs the startup time it took at level 5 (1.35 at level 1).
    .arg("--v=5")
    .start()
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    for name in ["opts", "plain"] {
        Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &work(name))
            .await
            .unwrap();
    }

    // Settled: both pods of each group run, each group has exactly their two nodes, and every
    // node CA added beyond them is one it named for removal.
    wait::until("both groups down to their pods' nodes", CA_DEADLINE, || {
        resizes.poll();
        let added = (resizes.increased("opts"), resizes.increased("plain"));
        let deleted = (resizes.deleted("opts"), resizes.deleted("plain"));
        let env = &env;
        async move {
            let mut state = Vec::new();
            let mut settled = true;
            for (name, added, deleted) in [
                ("opts", added.0, &deleted.0),
                ("plain", added.1, &deleted.1),
            ] {
                let nodes = node_names(&env.client, name).await;
                let hosts = hosts(env, name).await;
                settled &= hosts.len() == 2
                    && nodes == hosts
                    && usize::try_from(added).unwrap() == 2 + deleted.len();
                state.push(format!(
                    "{name}: nodes {nodes:?}, pods on {hosts:?}, added {added}, named {deleted:?}"
                ));
            }
            settled.then_some(()).ok_or(state.join("; "))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ca.log_tail()));
    resizes.poll();

    // Without options a booting node is upcoming on every release: one node per pod.
    assert_eq!(resizes.increased("plain"), 2, "{}", ca.log_tail());
    assert_eq!(resizes.deleted("plain"), BTreeSet::new());
    let kept = node_names(&env.client, "opts").await;
    assert!(resizes.deleted("opts").is_disjoint(&kept));
    if startup_time_comes_from_options(version) {
        // Unready, not upcoming: the same two pods got more nodes while the first booted
        // (4 on 1.35.2, 5 on 1.36.1 when measured), the group stopping only as unhealthy.
        assert!(
            resizes.increased("opts") > 2,
            "added {}\n{}",
            resizes.increased("opts"),
            ca.log_tail()
        );
        assert!(
            ca.log_contains("using maxNodeStartupTime = 0s"),
            "{}",
            ca.log_tail()
        );
        // More than ok-total-unready-count (3) and 45% of the nodes unready: CA skipped whole
        // loops, scale-down and every other group's scale-up with them.
        assert!(ca.log_contains(UNHEALTHY), "{}", ca.log_tail());
    } else {
        assert_eq!(resizes.increased("opts"), 2, "{}", ca.log_tail());
        assert_eq!(resizes.deleted("opts"), BTreeSet::new());
        assert!(!ca.log_contains(UNHEALTHY), "{}", ca.log_tail());
    }
}
