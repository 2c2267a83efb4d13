//! DRA on virtual nodes, with the real scheduler and resource claim controller: the pool
//! publishes a skeleton's devices per node, the scheduler allocates them (shared by consumable
//! capacity), and the pool starts a pod only once its claims are allocated for it. The pool
//! runs as its ServiceAccount with the shipped RBAC.

use k8s_openapi::api::{
    core::v1::{Event, Pod},
    resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice},
};
use ksim_localenv::{fixtures::P3_2XLARGE_DRA_SKELETON, wait};
use ksim_nodes::devices::DEVICES_NOT_PUBLISHED_REASON;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use serde_json::{Value, json};

use crate::common::*;

const DRIVER: &str = "gpu.ksim.io";

fn claim_template(name: &str, request: Value) -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }))
    .unwrap()
}

/// A pod of `ml` that tolerates the GPU nodes' taint, with one claim: from template `template`,
/// or the existing claim `claim`.
fn gpu_pod(name: &str, claim: Value, node: Option<&str>) -> Pod {
    let mut claim = claim;
    claim["name"] = json!("gpu");
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "train"}},
        "spec": {
            "nodeName": node,
            "tolerations": [virtual_toleration(),
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "resourceClaims": [claim],
            "containers": [{"name": "train", "image": "registry.example/train:1",
                "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }))
    .unwrap()
}

/// The pool, as its ServiceAccount with the shipped RBAC, with group `gpu` of one node of
/// [`P3_2XLARGE_DRA_SKELETON`].
async fn gpu_pool(env: &Env) -> std::sync::Arc<ksim_vnode::pool::Pool> {
    let as_pool = as_pool_service_account(env).await;
    let pool = start_pool(
        &as_pool,
        ksim_vnode::config::PoolConfig {
            namespace: "ksim-system".to_owned(),
            ..pool_config()
        },
    )
    .await;
    pool.create_group("gpu", P3_2XLARGE_DRA_SKELETON, 1)
        .await
        .unwrap();
    pool
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_allocates_the_published_devices_shared_by_capacity_and_the_pool_waits_for_it()
 {
    let env = control_plane().await;
    let pool = gpu_pool(&env).await;
    pool.create_group("cpu", SKELETON, 1).await.unwrap();
    let gpu_node = ready_nodes(&env.client, "gpu", 1).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    ready_nodes(&env.client, "cpu", 1).await;

    // One slice, the GPU node's own, owned by it.
    let slices: Api<ResourceSlice> = Api::all(env.client.clone());
    let published = wait::until("the GPU node's ResourceSlice", DEADLINE, || async {
        let items = slices
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        if items.is_empty() {
            Err("none yet".to_owned())
        } else {
            Ok(items)
        }
    })
    .await
    .unwrap();
    assert_eq!(published.len(), 1, "{published:#?}");
    let slice = &published[0];
    assert_eq!(
        (
            slice.spec.driver.as_str(),
            slice.spec.node_name.as_deref(),
            slice.spec.pool.name.as_str()
        ),
        (DRIVER, Some(gpu_node.as_str()), gpu_node.as_str())
    );
    let device = &slice.spec.devices.as_ref().unwrap()[0];
    assert_eq!(
        (device.name.as_str(), device.allow_multiple_allocations),
        ("gpu-0", Some(true)),
        "the apiserver kept the shared device: the environment runs with DRAConsumableCapacity"
    );
    assert_eq!(
        slice.metadata.owner_references.as_ref().unwrap()[0].name,
        gpu_node
    );

    let classes: Api<DeviceClass> = Api::all(env.client.clone());
    let class = serde_json::from_value(json!({
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]},
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    create_namespace(&env.client, "ml").await;
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(env.client.clone(), "ml");
    let half = json!({"deviceClassName": DRIVER, "capacity": {"requests": {"memory": "8Gi"}}});
    let two = json!({"deviceClassName": DRIVER, "count": 2});
    for template in [claim_template("half", half), claim_template("two", two)] {
        templates
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
    }
    let claims: Api<ResourceClaim> = Api::namespaced(env.client.clone(), "ml");
    let manual: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "manual"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
    }))
    .unwrap();
    claims
        .create(&PostParams::default(), &manual)
        .await
        .unwrap();

    // Bound by hand past the scheduler, its claim never allocated: a kubelet does not start it.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "ml");
    let bypass = gpu_pod(
        "bypass",
        json!({"resourceClaimName": "manual"}),
        Some(&gpu_node),
    );
    pods.create(&PostParams::default(), &bypass).await.unwrap();
    for name in ["half-1", "half-2", "half-3"] {
        let pod = gpu_pod(name, json!({"resourceClaimTemplateName": "half"}), None);
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let big = gpu_pod("big", json!({"resourceClaimTemplateName": "two"}), None);
    pods.create(&PostParams::default(), &big).await.unwrap();

    // Two halves share the one GPU; the third fits no device, nor does two GPUs anywhere.
    let running = wait::until("two pods Running", DEADLINE, || async {
        let all = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        let phase = |pod: &Pod| {
            pod.status
                .as_ref()
                .and_then(|status| status.phase.clone())
                .unwrap_or_default()
        };
        let running: Vec<Pod> = all
            .iter()
            .filter(|pod| phase(pod) == "Running")
            .cloned()
            .collect();
        if running.len() >= 2 {
            return Ok(running);
        }
        let seen: Vec<String> = all
            .iter()
            .map(|pod| {
                format!(
                    "{} {}",
                    pod.metadata.name.clone().unwrap_or_default(),
                    phase(pod)
                )
            })
            .collect();
        Err(seen.join(", "))
    })
    .await
    .unwrap();
    let mut on: Vec<(String, String)> = Vec::new();
    for pod in &running {
        let name = pod.metadata.name.clone().unwrap();
        assert!(name.starts_with("half-"), "{name} runs");
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some(gpu_node.as_str())
        );
        let claim_name = pod
            .status
            .as_ref()
            .unwrap()
            .resource_claim_statuses
            .as_ref()
            .unwrap()[0]
            .resource_claim_name
            .clone()
            .unwrap();
        let claim = claims.get(&claim_name).await.unwrap();
        let status = claim.status.unwrap();
        let result = &status.allocation.unwrap().devices.unwrap().results.unwrap()[0];
        assert_eq!(
            result
                .consumed_capacity
                .as_ref()
                .and_then(|c| c.get("memory"))
                .map(|q| q.0.as_str()),
            Some("8Gi"),
            "{result:?}"
        );
        on.push((result.pool.clone(), result.device.clone()));
        assert!(
            status
                .reserved_for
                .unwrap()
                .iter()
                .any(|consumer| Some(&consumer.uid) == pod.metadata.uid.as_ref())
        );
    }
    assert_eq!(
        on,
        vec![(gpu_node.clone(), "gpu-0".to_owned()); 2],
        "both halves on the one device"
    );
    for name in ["half-1", "half-2", "half-3", "big"]
        .into_iter()
        .filter(|name| {
            !running
                .iter()
                .any(|pod| pod.metadata.name.as_deref() == Some(name))
        })
    {
        let message = wait::until(
            &format!("{name} to be found unschedulable"),
            DEADLINE,
            || async {
                let pod = pods.get(name).await.map_err(|e| e.to_string())?;
                let condition = pod
                    .status
                    .and_then(|status| status.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False");
                condition
                    .and_then(|c| c.message)
                    .ok_or_else(|| "not yet".to_owned())
            },
        )
        .await
        .unwrap();
        assert!(
            message.contains("cannot allocate all claims"),
            "{name}: {message}"
        );
    }
    // The pool started the scheduled pods and left the pod with an unallocated claim waiting.
    let bypass = pods.get("bypass").await.unwrap();
    assert_eq!(
        bypass.status.unwrap().phase.as_deref(),
        Some("Pending"),
        "a pod whose claim is not allocated for it never starts"
    );
}

/// Where the apiserver runs without `DRAConsumableCapacity`, it drops a shared device's
/// `allowMultipleAllocations`, and the device would be allocated whole: the pool withdraws
/// the slice, the node runs without devices, and a Warning event on the node says why (the
/// driver's report warns of it from there).
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_device_the_apiserver_cannot_keep_is_withdrawn_and_said_on_the_node() {
    let control_plane = ksim_localenv::ControlPlane::builder()
        .apiserver_arg("--feature-gates=DRAConsumableCapacity=false")
        .start()
        .await
        .unwrap();
    let env = Env {
        client: control_plane.client(),
        control_plane,
    };
    let _pool = gpu_pool(&env).await;
    let node = ready_nodes(&env.client, "gpu", 1).await[0]
        .metadata
        .name
        .clone()
        .unwrap();

    let events: Api<Event> = Api::all(env.client.clone());
    let said = wait::until("the node's DevicesNotPublished event", DEADLINE, || async {
        events
            .list(&ListParams::default().fields("involvedObject.kind=Node"))
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .find(|event| {
                event.reason.as_deref() == Some(DEVICES_NOT_PUBLISHED_REASON)
                    && event.involved_object.name.as_deref() == Some(node.as_str())
            })
            .ok_or_else(|| "none yet".to_owned())
    })
    .await
    .unwrap();
    assert_eq!(said.type_.as_deref(), Some("Warning"));
    let message = said.message.unwrap_or_default();
    assert!(
        message.contains("DRAConsumableCapacity") && message.contains("allowMultipleAllocations"),
        "{message}"
    );
    // Withdrawn before the event: no slice is left to be allocated whole.
    let slices: Api<ResourceSlice> = Api::all(env.client.clone());
    let left = slices.list(&ListParams::default()).await.unwrap().items;
    assert!(left.is_empty(), "{left:#?}");
}
