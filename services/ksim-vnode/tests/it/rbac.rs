//! The shipped RBAC (deploy/vnode/rbac.yaml) is enough for the pool and has no wildcards:
//! the pool runs a full scenario as its ServiceAccount, without a single forbidden call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_testenv::{manifests, wait};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

const NAMESPACE_YAML: &str = include_str!("../../../../deploy/vnode/namespace.yaml");
const RBAC_YAML: &str = include_str!("../../../../deploy/vnode/rbac.yaml");
const SERVICE_ACCOUNT: &str = "system:serviceaccount:ksim-system:ksim-vnode";

#[test]
fn rbac_rules_name_every_verb_and_resource() {
    assert_eq!(
        manifests::wildcard_rules(RBAC_YAML).unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pool_runs_as_its_service_account_with_the_shipped_rbac() {
    let env = control_plane().await;
    manifests::apply(&env.client, NAMESPACE_YAML).await.unwrap();
    manifests::apply(&env.client, RBAC_YAML).await.unwrap();
    let as_pool = env
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
    let config = ksim_vnode::config::PoolConfig {
        namespace: "ksim-system".to_owned(),
        ..pool_config()
    };
    let pool = start_pool(&as_pool, config).await;
    pool.create_group("workers", SKELETON, 2).await.unwrap();
    ready_nodes(&env.client, "workers", 2).await;

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 4, "selector": { "matchLabels": { "app": "web" } },
                  "template": { "metadata": { "labels": { "app": "web" } }, "spec": {
                      "tolerations": [virtual_toleration()],
                      "nodeSelector": { "ksim.io/node-group": "workers" },
                      "containers": [{ "name": "app", "image": "registry.example/app:1" }] } } }
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    pods_in_phase(&env.client, "default", "app=web", "Running", 4).await;

    // Deletion goes through the pool too (pod delete permission).
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    wait::until("the web pods to be deleted", DEADLINE, || async {
        let left = pods
            .list(&kube::api::ListParams::default().labels("app=web"))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await
    .unwrap();
    pool.scale_group("workers", 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    assert_eq!(
        pool.stats().api_errors,
        0,
        "some request was refused or failed"
    );
}
