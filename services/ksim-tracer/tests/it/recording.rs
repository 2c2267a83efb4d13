//! End to end on a real control plane: the tracer records exactly the changes made, in order,
//! with pod lifetimes, for namespaced and cluster-scoped kinds, CRDs that appear late included;
//! exports honour windows and filters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::{Recorded, changes, create_namespace, object_json};
use k8s_openapi::api::{
    apps::v1::Deployment, batch::v1::CronJob, core::v1::Pod, scheduling::v1::PriorityClass,
};
use ksim_localenv::wait;
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::time::timestamp;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
    discovery,
};
use serde_json::json;

const CONFIG: &str = r#"
trackedKinds:
  - { apiVersion: apps/v1, kind: Deployment, podTemplatePaths: [/spec/template], trackLifecycles: true }
  - { apiVersion: apps/v1, kind: ReplicaSet, podTemplatePaths: [/spec/template], trackLifecycles: true, skipOwned: true }
  - { apiVersion: batch/v1, kind: CronJob, podTemplatePaths: [/spec/jobTemplate/spec/template], trackLifecycles: true }
  - { apiVersion: batch/v1, kind: Job, podTemplatePaths: [/spec/template], trackLifecycles: true, skipOwned: true }
  - { apiVersion: scheduling.k8s.io/v1, kind: PriorityClass }
  - { apiVersion: example.com/v1, kind: Widget }
  - { apiVersion: v1, kind: Pod, podTemplatePaths: [""], trackLifecycles: true, skipOwned: true }
"#;

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image, "env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}]}}
        }
    }))
    .unwrap()
}

async fn sleep_tick() {
    // Changes a few ms apart get distinct timestamps, so order is checkable.
    tokio::time::sleep(Duration::from_millis(20)).await;
}

async fn scale(client: &Client, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), "shop")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_holds_exactly_the_changes_made_in_order() {
    let Recorded {
        control_plane,
        tracer,
        ..
    } = &Recorded::start(Some(CONFIG)).await;
    let client = control_plane.client();
    tracer
        .wait_watching(&["Deployment", "CronJob", "PriorityClass", "Pod"])
        .await;

    // A kind whose CRD is missing is reported, and does not hold up the others.
    let kinds = tracer.tracked_kinds().await;
    let widget = kinds
        .iter()
        .find(|k| k.config.as_ref().unwrap().gvk.as_ref().unwrap().kind == "Widget")
        .unwrap();
    assert_eq!(
        widget.state(),
        pb::TrackedKindState::WaitingForCrd,
        "{widget:?}"
    );
    assert!(widget.message.contains("CRD"), "{}", widget.message);
    let deployments = kinds
        .iter()
        .find(|k| k.config.as_ref().unwrap().gvk.as_ref().unwrap().kind == "Deployment")
        .unwrap();
    assert_eq!(deployments.config.as_ref().unwrap().plural, "deployments");

    create_namespace(&client, "shop").await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deploys
        .create(&PostParams::default(), &deployment("web", 1, "web:1"))
        .await
        .unwrap();
    sleep_tick().await;
    scale(&client, "web", 3).await;
    sleep_tick().await;
    let after_scale_ms = ksim_trace::time::now_ms();
    sleep_tick().await;
    deploys
        .patch("web", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "web:2"}]}}}})))
        .await
        .unwrap();
    sleep_tick().await;
    deploys
        .create(&PostParams::default(), &deployment("api", 1, "api:1"))
        .await
        .unwrap();
    sleep_tick().await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "shop");
    cronjobs
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "nightly", "namespace": "shop"},
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "c", "image": "batch:1"}]}}}}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    sleep_tick().await;
    let priorities: Api<PriorityClass> = Api::all(client.clone());
    priorities
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "batch-low"}, "value": 10}))
                .unwrap(),
        )
        .await
        .unwrap();
    sleep_tick().await;

    // A pod of web runs (there is no kubelet here, so its status is written as one would),
    // then web is deleted and the garbage collector takes its pods: the lifetime ends.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let pod_name = wait::until("web's pods exist", crate::common::DEADLINE, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .first()
                .and_then(|p| p.metadata.name.clone())
                .ok_or_else(|| "no pods yet".to_owned())
        }
    })
    .await
    .unwrap();
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    pods.patch_status(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"phase": "Running", "containerStatuses": [{
            "name": "c", "image": "web:1", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": started}}}]}}),
        ),
    )
    .await
    .unwrap();
    sleep_tick().await;

    // A CRD installed while the tracer runs is picked up without a restart.
    install_widget_crd(&client).await;
    let widgets = wait::until("the Widget CRD is served", crate::common::DEADLINE, || {
        let client = client.clone();
        async move {
            let (resource, _) = discovery::pinned_kind(
                &client,
                &GroupVersionKind::gvk("example.com", "v1", "Widget"),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Api::<DynamicObject>::all_with(client.clone(), &resource))
        }
    })
    .await
    .unwrap();
    tracer.wait_watching(&["Widget"]).await;
    widgets
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "gizmo"}, "spec": {"size": 3}})).unwrap())
        .await
        .unwrap();
    sleep_tick().await;

    cronjobs
        .delete("nightly", &DeleteParams::default())
        .await
        .unwrap();
    sleep_tick().await;
    deploys
        .delete("web", &DeleteParams::foreground())
        .await
        .unwrap();
    wait::until("web and its pods are gone", crate::common::DEADLINE, || {
        let pods = pods.clone();
        let deploys = deploys.clone();
        async move {
            let left = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            let web = deploys.get_opt("web").await.map_err(|e| e.to_string())?;
            if left == 0 && web.is_none() {
                Ok(())
            } else {
                Err(format!("{left} pods left"))
            }
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let trace = tracer
        .export(pb::ExportRequest {
            filter: Some(pb::TraceFilter {
                exclude_namespaces: vec![
                    "kube-system".into(),
                    "kube-public".into(),
                    "kube-node-lease".into(),
                    "default".into(),
                ],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    // The control plane's own PriorityClasses (system-*) were there before the tracer.
    let got: Vec<(&str, String, String)> = changes(&trace)
        .into_iter()
        .filter(|c| !c.3.starts_with("/system-"))
        .map(|(_, verb, kind, name)| (verb, kind, name))
        .collect();
    let expected: Vec<(&str, String, String)> = [
        ("apply", "Deployment", "shop/web"),
        ("apply", "Deployment", "shop/web"),
        ("apply", "Deployment", "shop/web"),
        ("apply", "Deployment", "shop/api"),
        ("apply", "CronJob", "shop/nightly"),
        ("apply", "PriorityClass", "/batch-low"),
        ("apply", "Widget", "/gizmo"),
        ("delete", "CronJob", "shop/nightly"),
        ("delete", "Deployment", "shop/web"),
    ]
    .into_iter()
    .map(|(v, k, n)| (v, k.to_owned(), n.to_owned()))
    .collect();
    assert_eq!(got, expected, "full export:\n{:#?}", changes(&trace));
    let timestamps: Vec<i64> = changes(&trace).iter().map(|c| c.0).collect();
    assert!(
        timestamps.windows(2).all(|w| w[0] <= w[1]),
        "events in order: {timestamps:?}"
    );

    let web = object_json(&trace, "Deployment", "web");
    assert_eq!(
        web.iter()
            .map(|w| w["spec"]["replicas"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3, 3]
    );
    assert_eq!(
        web[2]["spec"]["template"]["spec"]["containers"][0]["image"],
        "web:2"
    );
    for version in &web {
        assert!(
            version.get("status").is_none()
                && version["metadata"].get("uid").is_none()
                && version["metadata"].get("managedFields").is_none()
        );
        assert_eq!(
            version["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
            "<redacted>"
        );
    }

    // One lifetime: web's pod, owned by web (not its ReplicaSet), ended by the deletion.
    assert_eq!(trace.lifecycles.len(), 1, "{:#?}", trace.lifecycles);
    let lifetime = &trace.lifecycles[0];
    assert_eq!(
        (
            lifetime.owner_gvk.as_ref().unwrap().kind.as_str(),
            lifetime.owner_name.as_str()
        ),
        ("Deployment", "web")
    );
    assert_eq!(lifetime.pod_name, pod_name);
    assert!(
        lifetime.start_ms > 0 && lifetime.end_ms > lifetime.start_ms,
        "{lifetime:?}"
    );
    assert_eq!(lifetime.outcome(), pb::PodOutcome::Deleted);

    // A window from after the scale: web flattened into the first event with 3 replicas.
    let windowed = tracer
        .export(pb::ExportRequest {
            start_time: Some(timestamp(after_scale_ms)),
            filter: Some(pb::TraceFilter {
                include_namespaces: vec!["shop".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = &windowed.events[0];
    assert_eq!(first.timestamp_ms, after_scale_ms);
    assert_eq!(
        first
            .applied
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["web"]
    );
    let flattened: serde_json::Value =
        serde_json::from_slice(&first.applied[0].object_json).unwrap();
    assert_eq!(flattened["spec"]["replicas"], 3);
    let later: Vec<_> = changes(&windowed)
        .into_iter()
        .skip(1)
        .map(|c| (c.1, c.3))
        .collect();
    assert_eq!(
        later,
        [
            ("apply", "shop/web"),
            ("apply", "shop/api"),
            ("apply", "shop/nightly"),
            ("delete", "shop/nightly"),
            ("delete", "shop/web")
        ]
        .map(|(v, n)| (v, n.to_owned()))
    );
    assert!(
        changes(&windowed).iter().all(|c| !c.3.starts_with('/')),
        "namespace filter drops cluster-scoped objects"
    );

    // Label filters and a bad filter.
    let only_api = tracer
        .export(pb::ExportRequest {
            filter: Some(pb::TraceFilter {
                include_label_selectors: vec!["app in (api)".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        changes(&only_api).iter().all(|c| c.3 == "shop/api"),
        "{:?}",
        changes(&only_api)
    );
    assert!(!changes(&only_api).is_empty());

    let stats = tracer
        .client()
        .await
        .stats(pb::StatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let deployment_stats = stats
        .kinds
        .iter()
        .find(|k| k.gvk.as_ref().unwrap().kind == "Deployment")
        .unwrap();
    assert_eq!(
        (
            deployment_stats.applies,
            deployment_stats.deletes,
            deployment_stats.objects
        ),
        (4, 1, 1),
        "{deployment_stats:?}"
    );
    assert!(
        stats.events >= 9 && stats.bytes_on_disk > 0 && stats.lifecycles >= 2,
        "{stats:?}"
    );
}

async fn install_widget_crd(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
}
