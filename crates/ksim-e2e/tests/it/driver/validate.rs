//! `ksim trace validate` against the real control plane: a trace recorded here by the tracer,
//! and a trace made to break every rule (its kinds checked against the cluster's discovery),
//! each fixed with `--fix`, validated clean, and replayed through the driver to SUCCEEDED.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use super::common::*;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1 as pb;
use kube::{Api, api::PostParams};
use serde_json::json;

/// Runs `ksim` with `args`; returns (exit code, stdout, stderr).
fn ksim(args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        .env_remove("KSIM_KUBECONFIG")
        .env_remove("KSIM_CONTEXT")
        .output()
        .unwrap();
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        err,
    )
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Replays `file` at 10x on a fresh pool group and expects SUCCEEDED with no object refused.
async fn replays(mesh: &mut TestMesh, file: &Path, group: &str) {
    let spec = pb::SimulationSpec {
        trace_source: uploaded(std::fs::read(file).unwrap()),
        speed: 10.0,
        node_groups: vec![pool_group(group, 2)],
        ..Default::default()
    };
    let id = mesh.start_simulation(spec).await.unwrap().id;
    let ended = mesh.until_done(&id).await;
    assert_eq!(
        ended.state(),
        pb::SimulationState::Succeeded,
        "{}: {}",
        file.display(),
        ended.error_message
    );
    let report = mesh.report(&id).await;
    assert!(
        report.object_errors.is_empty(),
        "{}: {:?}",
        file.display(),
        report.object_errors
    );
    assert!(report.events_applied > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_trace_and_a_broken_one_are_fixed_validate_clean_and_replay() {
    let mut mesh = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = mesh.env.kubeconfig_path().to_owned();

    // Record: the tracer does not track ConfigMaps, so the Deployment's reference to one is
    // missing from the recorded trace.
    let client = mesh.client.clone();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap(),
        )
        .await
        .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let mut web = Workload::new("web", 2).json();
    web["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "settings"}}]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(web).unwrap(),
        )
        .await
        .unwrap();
    let recorded = dir.path().join("recorded.ktrace");
    let tracer = mesh.tracer_url.clone();
    wait::until("the tracer to record the Deployment", DEADLINE, || {
        let recorded = recorded.clone();
        let tracer = tracer.clone();
        async move {
            let (code, _, err) = ksim(&[
                "trace",
                "export",
                "--server",
                &tracer,
                "-n",
                "shop",
                "-o",
                path(&recorded),
            ]);
            if code != 0 {
                return Err(err);
            }
            let trace = ksim_trace::read_trace(&std::fs::read(&recorded).unwrap())
                .map_err(|e| e.to_string())?;
            trace
                .events
                .iter()
                .any(|e| e.applied.iter().any(|o| o.name == "web"))
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        }
    })
    .await
    .unwrap();

    let (code, out, err) = ksim(&[
        "trace",
        "validate",
        path(&recorded),
        "--kubeconfig",
        path(&kubeconfig),
    ]);
    assert_eq!(code, 3, "{out}\n{err}");
    let findings: Vec<&str> = out.lines().filter(|l| !l.contains(" events, ")).collect();
    assert_eq!(findings.len(), 1, "{out}");
    assert!(
        findings[0].starts_with("error KS001 missing-reference:")
            && findings[0].contains("apps/v1.Deployment shop/web")
            && findings[0].contains("ConfigMap shop/settings"),
        "{out}"
    );
    let recorded_fixed = dir.path().join("recorded-fixed.ktrace");
    let (code, out, err) = ksim(&[
        "trace",
        "validate",
        path(&recorded),
        "--kubeconfig",
        path(&kubeconfig),
        "--fix",
        path(&recorded_fixed),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("removed envFrom ConfigMap settings"), "{out}");
    let (code, out, _) = ksim(&[
        "trace",
        "validate",
        path(&recorded_fixed),
        "--kubeconfig",
        path(&kubeconfig),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": 0 errors, 0 warnings"), "{out}");

    // A trace made to break every rule, its kinds checked against this cluster.
    let broken = dir.path().join("broken.ktrace");
    {
        let start = 1_700_000_000_000i64;
        let header = ksim_trace::pb::TraceHeader {
            start_time: Some(ksim_trace::time::timestamp(start)),
            end_time: Some(ksim_trace::time::timestamp(start + 5_000)),
            created_by: "driver::validate".into(),
            ..Default::default()
        };
        let object = |value: serde_json::Value| ksim_trace::pb::TraceObject {
            gvk: Some(ksim_trace::gvk::from_api_version(
                value["apiVersion"].as_str().unwrap(),
                value["kind"].as_str().unwrap(),
            )),
            namespace: "team".into(),
            name: value["metadata"]["name"].as_str().unwrap().into(),
            object_json: serde_json::to_vec(&value).unwrap(),
        };
        let mut api = Workload::new("api", 2).json();
        api["metadata"]["uid"] = json!("recorded-uid");
        api["metadata"]["resourceVersion"] = json!("42");
        api["status"] = json!({"replicas": 2});
        api["spec"]["template"]["spec"]["serviceAccountName"] = json!("robot");
        api["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
        api["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
        let mut owned = config_map("owned");
        owned["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gone", "uid": "x"}]);
        let widget =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let mut writer =
            ksim_trace::TraceWriter::new(std::fs::File::create(&broken).unwrap(), &header)
                .unwrap()
                .unordered();
        for (offset, objects) in [
            (2_000, vec![object(api), object(widget)]),
            (1_000, vec![object(owned)]),
            (6_000, vec![object(Workload::new("late", 1).json())]),
        ] {
            writer
                .write_event(&ksim_trace::pb::TraceEvent {
                    timestamp_ms: start + offset,
                    applied: objects,
                    deleted: Vec::new(),
                })
                .unwrap();
        }
        writer.finish().unwrap();
    }
    let (code, out, err) = ksim(&[
        "trace",
        "validate",
        path(&broken),
        "--kubeconfig",
        path(&kubeconfig),
    ]);
    assert_eq!(code, 3, "{out}\n{err}");
    for rule in ["KS001", "KS002", "KS003", "KS004", "KS005"] {
        assert!(
            out.lines().any(|l| l.contains(&format!(" {rule} "))),
            "{rule}: {out}"
        );
    }
    assert!(
        out.contains("the cluster does not serve example.com/v1.Widget"),
        "{out}"
    );
    // Without a cluster, KS004 is not checked.
    let (_, out, _) = ksim(&["trace", "validate", path(&broken)]);
    assert!(!out.contains("KS004"), "{out}");

    let broken_fixed = dir.path().join("broken-fixed.ktrace");
    let (code, out, err) = ksim(&[
        "trace",
        "validate",
        path(&broken),
        "--kubeconfig",
        path(&kubeconfig),
        "--fix",
        path(&broken_fixed),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("it validates with 0 errors and 0 warnings"),
        "{out}"
    );
    let (code, out, _) = ksim(&[
        "trace",
        "validate",
        path(&broken_fixed),
        "--kubeconfig",
        path(&kubeconfig),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": 0 errors, 0 warnings"), "{out}");

    replays(&mut mesh, &recorded_fixed, "rec").await;
    replays(&mut mesh, &broken_fixed, "fix").await;
}
