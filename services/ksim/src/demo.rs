//! `ksim demo`: what the local environment can show today. The trace replay with virtual
//! nodes and cluster-autoscaler comes with the driver; until then this says so plainly.

use std::{io::Write, time::Duration};

use anyhow::Context;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_testenv::{ControlPlane, wait};
use kube::{
    Api,
    api::{ListParams, PostParams},
};

const DEADLINE: Duration = Duration::from_secs(120);

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

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &web_deployment()?)
        .await
        .context("creating the demo Deployment")?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pending = wait::until("3 web pods", DEADLINE, || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .map_err(|e| e.to_string())?;
        if list.items.len() == 3 {
            Ok(list.items)
        } else {
            Err(format!("{} pods", list.items.len()))
        }
    })
    .await?;
    writeln!(
        out,
        "  Deployment web (3 replicas) -> ReplicaSet -> {} pods, all Pending: no nodes exist yet",
        pending.len()
    )?;
    writeln!(
        out,
        "\nNot yet: virtual nodes (ksim-vnode), cluster-autoscaler (ksim-cloudprov) and the trace \
         replay with its report (ksim-driver) are still to be built. This demo only shows the \
         real control plane they will run on."
    )?;
    Ok(())
}

fn web_deployment() -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "registry.example/web:1" }] }
            }
        }
    }))?)
}
