//! `ksim demo`: what the local environment runs today: the real control plane, the
//! virtual node pool, and a workload on virtual nodes. The trace replay and
//! cluster-autoscaler come with the driver and cloud provider; until then it says so.

use std::{io::Write, time::Duration};

use anyhow::Context;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_testenv::{ControlPlane, wait};
use ksim_vnode::{config::PoolConfig, pool::Pool};
use kube::{
    Api,
    api::{ListParams, PostParams},
};

const DEADLINE: Duration = Duration::from_secs(120);
const SKELETON: &str = include_str!("../../../deploy/vnode/examples/skeleton-m5-large.yaml");

pub async fn run() -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    writeln!(out, "ksim demo: starting the local control plane ...")?;
    let control_plane = ControlPlane::start()
        .await
        .context("starting the local control plane")?;
    let client = control_plane.client();
    let version = client.apiserver_version().await?;
    writeln!(
        out,
        "  kube-apiserver {} at {} (etcd, controller-manager and scheduler running)",
        version.git_version,
        control_plane.apiserver_url()
    )?;

    let pool = Pool::start(
        client.clone(),
        PoolConfig {
            namespace: "default".to_owned(),
            ..PoolConfig::default()
        },
    )
    .await
    .context("starting the virtual node pool")?;
    pool.create_group("m5-large", SKELETON, 3).await?;
    wait::until("3 Ready virtual nodes", DEADLINE, || async {
        let ready = pool.group("m5-large").map_err(|e| e.to_string())?.ready;
        if ready == 3 {
            Ok(())
        } else {
            Err(format!("{ready} Ready"))
        }
    })
    .await?;
    writeln!(
        out,
        "  virtual node pool: node group m5-large with 3 Ready nodes"
    )?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &web_deployment()?)
        .await
        .context("creating the demo Deployment")?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let running = wait::until("6 Running web pods", DEADLINE, || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .map_err(|e| e.to_string())?;
        let running: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        if running.len() == 6 {
            Ok(running)
        } else {
            Err(format!("{} Running", running.len()))
        }
    })
    .await?;
    writeln!(
        out,
        "  Deployment web: 6 pods scheduled by kube-scheduler and Running:"
    )?;
    for pod in &running {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        writeln!(
            out,
            "    {:<28} on {node:<12} ip {ip}",
            pod.metadata.name.as_deref().unwrap_or_default()
        )?;
    }
    let stats = pool.stats();
    writeln!(
        out,
        "  pool: {} nodes Ready, {} pods Running",
        stats.nodes_ready, stats.pods.running
    )?;
    writeln!(
        out,
        "\nNot yet: the replay with its report (ksim-driver) is still to be built; the tracer \
         (ksim-tracer, `ksim trace ...`) and ksim-cloudprov are built but not yet part of this demo."
    )?;
    Ok(())
}

fn web_deployment() -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 6,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": {
                    "tolerations": [{ "key": "ksim.io/virtual-node", "operator": "Exists" }],
                    "containers": [{
                        "name": "web",
                        "image": "registry.example/web:1",
                        "resources": { "requests": { "cpu": "250m", "memory": "256Mi" } }
                    }]
                }
            }
        }
    }))?)
}
