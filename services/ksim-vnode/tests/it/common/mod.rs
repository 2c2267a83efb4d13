//! A real control plane plus a pool, for the pool's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Node, Pod};
use ksim_localenv::{ControlPlane, wait};
use ksim_vnode::{config::PoolConfig, pool::Pool};
use kube::{Api, Client, api::PostParams};
use serde_json::json;

pub const DEADLINE: Duration = Duration::from_secs(120);
/// Short enough that the node lifecycle controller's grace period passes during a test.
pub const LEASE_SECONDS: u32 = 4;
pub const GRACE_SECONDS: u64 = 6;

/// The pool's tests' node (`ksim_localenv::fixtures`, one definition for every test).
pub const SKELETON: &str = ksim_localenv::fixtures::M5_XLARGE_SKELETON;

pub struct Env {
    pub control_plane: ControlPlane,
    pub client: Client,
}

/// A control plane whose node lifecycle controller gives up on a silent node after
/// GRACE_SECONDS, so "stays Ready" is tested against a real deadline.
/// Group `group`'s seats in namespace `default`: `replicas` nodes of [`SKELETON`], booting as
/// the JSON `provisioning` model says when one is given. No min or max: nothing autoscales
/// them here.
pub fn seat_deployment(
    group: &str,
    replicas: i32,
    provisioning: Option<String>,
) -> k8s_openapi::api::apps::v1::Deployment {
    ksim_nodes::seats::SeatDeployment {
        min_size: None,
        max_size: None,
        provisioning,
        ..ksim_localenv::fixtures::seat_deployment(group, replicas, 0, 0, SKELETON)
    }
    .to_deployment()
}

pub async fn control_plane() -> Env {
    let control_plane = ControlPlane::builder()
        .controller_manager_arg("--node-monitor-period=1s")
        .controller_manager_arg(format!("--node-monitor-grace-period={GRACE_SECONDS}s"))
        .start()
        .await
        .unwrap();
    let client = control_plane.client();
    Env {
        control_plane,
        client,
    }
}

/// Applies the shipped namespace and RBAC (deploy/vnode) and returns a client acting as the
/// pool's ServiceAccount, so a test shows that RBAC is enough for what it does.
pub async fn as_pool_service_account(env: &Env) -> Client {
    const NAMESPACE_YAML: &str = include_str!("../../../../../deploy/vnode/namespace.yaml");
    const RBAC_YAML: &str = include_str!("../../../../../deploy/vnode/rbac.yaml");
    ksim_localenv::manifests::apply(&env.client, NAMESPACE_YAML)
        .await
        .unwrap();
    ksim_localenv::manifests::apply(&env.client, RBAC_YAML)
        .await
        .unwrap();
    env.control_plane
        .client_as(
            "system:serviceaccount:ksim-system:ksim-vnode",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:ksim-system",
            ],
        )
        .await
        .unwrap()
}

pub fn pool_config() -> PoolConfig {
    PoolConfig {
        pool_name: "test".to_owned(),
        namespace: "default".to_owned(),
        lease_duration_seconds: LEASE_SECONDS,
        node_status_period_seconds: 10,
        ..PoolConfig::default()
    }
}

/// The pool's logs show with a failing test's output (RUST_LOG filters them).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
}

/// A pool without its gRPC server, for tests that drive it directly.
pub async fn start_pool(client: &Client, config: PoolConfig) -> Arc<Pool> {
    init_logs();
    Arc::new(Pool::start(client.clone(), config).await.unwrap())
}

/// Nodes with the given group label, once `count` of them are Ready.
pub async fn ready_nodes(client: &Client, group: &str, count: usize) -> Vec<Node> {
    ksim_localenv::nodes::ready_nodes(
        client,
        &format!("ksim.io/node-group={group}"),
        count,
        DEADLINE,
    )
    .await
    .unwrap()
}

pub async fn pods_in_phase(
    client: &Client,
    namespace: &str,
    selector: &str,
    phase: &str,
    count: usize,
) -> Vec<Pod> {
    ksim_localenv::pods::in_phase(client, namespace, selector, phase, count, DEADLINE)
        .await
        .unwrap()
}

/// Tolerates the virtual-node taint, as replayed workloads do.
pub fn virtual_toleration() -> serde_json::Value {
    json!({ "key": "ksim.io/virtual-node", "operator": "Exists", "effect": "NoSchedule" })
}

pub async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    wait::default_service_account(client, name, DEADLINE)
        .await
        .unwrap();
}
