//! The shipped RBAC (deploy/vnode/rbac.yaml) is enough for the pool and has no wildcards:
//! the pool runs a full scenario as its ServiceAccount, without a single forbidden call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_localenv::{manifests, wait};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;

const RBAC_YAML: &str = include_str!("../../../../deploy/vnode/rbac.yaml");

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
    let as_pool = as_pool_service_account(&env).await;
    let config = ksim_vnode::config::PoolConfig {
        namespace: "ksim-system".to_owned(),
        ..pool_config()
    };
    let pool = start_pool(&as_pool, config).await;
    // The metrics API registers and authorizes as the ServiceAccount too.
    let metrics_config = ksim_vnode::config::MetricsApiConfig {
        addr: Some(std::net::SocketAddr::new(
            ksim_kube::aggregation::advertise_address().expect("a non-loopback IPv4 address"),
            0,
        )),
        ..Default::default()
    };
    let _metrics_api = ksim_vnode::metrics_api::start_if_enabled(
        as_pool.clone(),
        pool.clone(),
        "test",
        "ksim-system",
        &metrics_config,
    )
    .await
    .unwrap();
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
    let running = pods_in_phase(&env.client, "default", "app=web", "Running", 4).await;
    let usage = running
        .iter()
        .map(|pod| ksim_vnode::pool::PodUsageUpdate {
            namespace: "default".to_owned(),
            name: pod.metadata.name.clone().unwrap(),
            containers: vec![ksim_vnode::domain::usage::ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: 100_000_000,
                memory_bytes: 1 << 20,
            }],
        })
        .collect();
    pool.set_pod_usage(usage, k8s_openapi::jiff::Timestamp::now())
        .await
        .unwrap();
    // Served through the apiserver once the aggregator finds it (its SubjectAccessReview,
    // made as the pool, says yes to the admin).
    wait::until(
        "the pool's metrics API to list the web pods",
        DEADLINE,
        || async {
            let list: serde_json::Value = env
                .client
                .request(
                    http::Request::get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
                        .body(Vec::new())
                        .unwrap(),
                )
                .await
                .map_err(|e| e.to_string())?;
            match list["items"].as_array().map(Vec::len) {
                Some(4) => Ok(()),
                other => Err(format!("{other:?} items")),
            }
        },
    )
    .await
    .unwrap();

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
