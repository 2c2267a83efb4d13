//! Crash safety on a real control plane: `kill -9` while changes stream in, changes while the
//! tracer is down, then a restart on the same log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use crate::common::{Tracer, changes};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Namespace};
use ksim_localenv::{ControlPlane, wait};
use ksim_proto::ksim::trace::v1 as pb;
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;

const CONFIG: &str = "trackedKinds:\n- { apiVersion: apps/v1, kind: Deployment, podTemplatePaths: [/spec/template] }\n";
const OBJECTS: usize = 120;

fn deployment(i: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": format!("d-{i:03}"), "namespace": "churn"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    }))
    .unwrap()
}

fn only_churn() -> pb::ExportRequest {
    pb::ExportRequest {
        filter: Some(pb::TraceFilter {
            include_namespaces: vec!["churn".into()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_loses_no_acknowledged_event_and_invents_no_delete() {
    let control_plane = ControlPlane::builder()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let client = control_plane.client();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("tracer");
    let args = ["--fsync=always", "--segment-bytes=16Ki"];
    let tracer = Tracer::start(
        control_plane.kubeconfig_path(),
        &data_dir,
        Some(CONFIG),
        &args,
    )
    .await;
    tracer.wait_watching(&["Deployment"]).await;

    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "churn"}})).unwrap(),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "churn");
    // Creates, and every third step deletes the previous one: a stream of both.
    let writer = {
        let deployments = deployments.clone();
        tokio::spawn(async move {
            for i in 0..OBJECTS {
                deployments
                    .create(&PostParams::default(), &deployment(i))
                    .await
                    .unwrap();
                if i % 3 == 2 {
                    deployments
                        .delete(&format!("d-{:03}", i - 1), &DeleteParams::default())
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    // Acknowledged: what an export showed. Then the crash, mid-stream.
    wait::until("some changes are recorded", crate::common::DEADLINE, || {
        let tracer = &tracer;
        async move {
            let n = changes(
                &tracer
                    .export(only_churn())
                    .await
                    .map_err(|e| e.to_string())?,
            )
            .len();
            if n >= 30 {
                Ok(())
            } else {
                Err(format!("{n} changes"))
            }
        }
    })
    .await
    .unwrap();
    let acknowledged = changes(&tracer.export(only_churn()).await.unwrap());
    let data_dir = tracer.kill9().await;

    writer.await.unwrap();
    // The cluster moves on while the tracer is down: the writer's last changes, and two made
    // here for certain (d-000 was acknowledged and is never deleted by the writer).
    deployments
        .create(&PostParams::default(), &deployment(OBJECTS))
        .await
        .unwrap();
    deployments
        .delete("d-000", &DeleteParams::default())
        .await
        .unwrap();
    let created_while_down = format!("churn/d-{OBJECTS:03}");
    assert!(
        acknowledged
            .iter()
            .any(|c| c.1 == "apply" && c.3 == "churn/d-000")
    );
    let existing: BTreeSet<String> = deployments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();

    let tracer = Tracer::start(
        control_plane.kubeconfig_path(),
        &data_dir,
        Some(CONFIG),
        &args,
    )
    .await;
    tracer.wait_watching(&["Deployment"]).await;
    let expected: BTreeSet<String> = existing.iter().map(|n| format!("churn/{n}")).collect();
    let after = wait::until(
        "the restarted tracer caught up with the cluster",
        crate::common::DEADLINE,
        || {
            let tracer = &tracer;
            let expected = expected.clone();
            async move {
                let trace = tracer
                    .export(only_churn())
                    .await
                    .map_err(|e| e.to_string())?;
                let live = live_objects(&changes(&trace));
                if live == expected {
                    Ok(trace)
                } else {
                    Err(format!("{} live, {} expected", live.len(), expected.len()))
                }
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", tracer.log_tail()));
    let after = changes(&after);

    let missing: Vec<_> = acknowledged.iter().filter(|c| !after.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the kill, lost after it: {missing:?}"
    );
    for (_, verb, _, name) in &after {
        if *verb == "delete" {
            assert!(
                !expected.contains(name),
                "{name} exists in the cluster but the trace deletes it"
            );
        }
    }
    let mut applies: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, verb, _, name) in &after {
        if *verb == "apply" {
            *applies.entry(name.as_str()).or_default() += 1;
        }
    }
    assert!(
        applies.values().all(|n| *n == 1),
        "an unchanged object was recorded again after the restart: {applies:?}"
    );
    let kill_ms = acknowledged.last().map_or(0, |c| c.0);
    assert!(
        after
            .iter()
            .any(|c| c.1 == "delete" && c.3 == "churn/d-000" && c.0 > kill_ms),
        "a delete made while the tracer was down is recorded after the restart"
    );
    assert!(
        after
            .iter()
            .any(|c| c.1 == "apply" && c.3 == created_while_down)
    );
    for name in &expected {
        assert_eq!(
            applies.get(name.as_str()),
            Some(&1),
            "{name} exists, so the trace creates it once"
        );
    }
}

/// The objects a sequence of changes leaves in existence.
fn live_objects(changes: &[(i64, &'static str, String, String)]) -> BTreeSet<String> {
    let mut live = BTreeSet::new();
    for (_, verb, _, name) in changes {
        if *verb == "apply" {
            live.insert(name.clone());
        } else {
            live.remove(name);
        }
    }
    live
}
