//! Cancel, one simulation at a time, bad input, and objects the cluster refuses or a replay may
//! not touch: each against the real control plane and pool, through the driver's gRPC API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::*;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Namespace, rbac::v1::ClusterRole};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use ksim_proto::ksim::driver::v1 as pb;
use kube::{Api, api::PostParams};
use serde_json::json;

fn spec(file: Vec<u8>, group: &str, on_error: pb::OnErrorPolicy) -> pb::SimulationSpec {
    pb::SimulationSpec {
        trace_source: uploaded(file),
        node_groups: vec![pool_group(group, 2)],
        on_error: on_error.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_run_cleans_up_and_a_second_simulation_is_refused_meanwhile() {
    let mut mesh = start().await;
    // Another group's nodes, Ready before the run: the run's pods must not land there.
    mesh.pool.create_group("other", SKELETON, 2).await.unwrap();
    // Two minutes of trace: the second event is never reached.
    let file = trace_file(
        vec![
            (
                0,
                vec![(
                    "apps/v1.Deployment",
                    "team",
                    "api",
                    Workload::new("api", 2).json(),
                )],
            ),
            (
                120_000,
                vec![("v1.ConfigMap", "team", "late", config_map("late"))],
            ),
        ],
        180_000,
    );
    let first = mesh
        .start_simulation(spec(file.clone(), "c1", pb::OnErrorPolicy::Continue))
        .await
        .unwrap();
    let id = first.id.clone();
    mesh.until_state(&id, pb::SimulationState::Running).await;
    ksim_localenv::wait::until("2 replayed pods Running", DEADLINE, || {
        let mut driver = mesh.driver.clone();
        let id = id.clone();
        async move {
            let simulation = driver
                .get_simulation(pb::GetSimulationRequest { id })
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .simulation
                .unwrap();
            let running = simulation
                .progress
                .and_then(|p| p.pods)
                .map_or(0, |p| p.running);
            if running == 2 {
                Ok(())
            } else {
                Err(format!("{running} Running"))
            }
        }
    })
    .await
    .unwrap();

    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(mesh.client.clone());
    let placed: Vec<String> = pods
        .list(&kube::api::ListParams::default().labels(&format!("ksim.io/simulation={id}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|pod| pod.spec?.node_name)
        .collect();
    assert_eq!(placed.len(), 2);
    assert!(
        placed.iter().all(|node| node.starts_with("c1-")),
        "pods on another group's nodes: {placed:?}"
    );

    let refused = mesh
        .start_simulation(spec(file, "c2", pb::OnErrorPolicy::Continue))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains(&id), "{}", refused.message());

    let cancelled = mesh.cancel(&id).await;
    assert_eq!(
        cancelled.state(),
        pb::SimulationState::Cancelled,
        "{}",
        cancelled.error_message
    );
    mesh.assert_nothing_left(&id, &["c1"]).await;
    let report = mesh.report(&id).await;
    assert!(report.complete);
    assert_eq!(report.events_applied, 1, "only the first event was due");
    let progress = cancelled.progress.unwrap_or_default();
    assert_eq!(
        progress.events_applied, report.events_applied,
        "GetSimulation and the report agree"
    );

    // The lease went with the cancelled simulation: the cluster takes a new one.
    let lease: Api<Lease> = Api::namespaced(mesh.client.clone(), SEATS_NAMESPACE);
    let holder = lease
        .get("ksim-driver")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity;
    assert_eq!(holder, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_traces_and_specs_are_invalid_argument_and_create_nothing() {
    let mut mesh = start().await;
    let garbage = mesh
        .start_simulation(spec(
            b"certainly not a trace".to_vec(),
            "g",
            pb::OnErrorPolicy::Continue,
        ))
        .await
        .unwrap_err();
    assert_eq!(garbage.code(), tonic::Code::InvalidArgument);
    assert!(
        garbage.message().contains("spec.trace_file"),
        "{}",
        garbage.message()
    );

    let mut truncated = trace_file(
        vec![(0, vec![("v1.ConfigMap", "a", "b", config_map("b"))])],
        1000,
    );
    truncated.truncate(truncated.len() - 8);
    let truncated = mesh
        .start_simulation(spec(truncated, "g", pb::OnErrorPolicy::Continue))
        .await
        .unwrap_err();
    assert_eq!(
        truncated.code(),
        tonic::Code::InvalidArgument,
        "{truncated:?}"
    );

    let mut negative = spec(trace_file(vec![], 1000), "g", pb::OnErrorPolicy::Continue);
    negative.speed = -1.0;
    let negative = mesh.start_simulation(negative).await.unwrap_err();
    assert_eq!(negative.code(), tonic::Code::InvalidArgument);
    assert!(
        negative.message().contains("spec.speed"),
        "{}",
        negative.message()
    );

    // Speeds that overflowed the trace position (1e308 panicked the replay and left it
    // RUNNING for good; 1e20 broke GetSimulation) are refused up front.
    for speed in [1e308, 1e20, 1000.5] {
        let mut fast = spec(trace_file(vec![], 1000), "g", pb::OnErrorPolicy::Continue);
        fast.speed = speed;
        let fast = mesh.start_simulation(fast).await.unwrap_err();
        assert_eq!(fast.code(), tonic::Code::InvalidArgument, "{speed}");
        assert!(
            fast.message().contains("spec.speed") && fast.message().contains("1000"),
            "{}",
            fast.message()
        );
    }
    let mut long = spec(trace_file(vec![], 1000), "g", pb::OnErrorPolicy::Continue);
    long.duration = Some(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    });
    let long = mesh.start_simulation(long).await.unwrap_err();
    assert_eq!(long.code(), tonic::Code::InvalidArgument);
    assert!(
        long.message().contains("spec.duration"),
        "{}",
        long.message()
    );

    // A configuration under test needs an environment to run it; this driver has none.
    let mut configured = spec(trace_file(vec![], 1000), "g", pb::OnErrorPolicy::Continue);
    configured.configuration = Some(ksim_proto::ksim::env::v1::Configuration {
        scheduler: None,
        autoscaler_args: vec!["expander=price".to_owned()],
        provider: None,
        recorded_autoscaler: None,
    });
    let configured = mesh.start_simulation(configured).await.unwrap_err();
    assert_eq!(configured.code(), tonic::Code::FailedPrecondition);
    assert!(
        configured.message().contains("--environment-url"),
        "{}",
        configured.message()
    );

    let unknown = mesh
        .driver
        .get_simulation(pb::GetSimulationRequest {
            id: "nope".to_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    // Nothing was created: no lease taken, no node group.
    let lease: Api<Lease> = Api::namespaced(mesh.client.clone(), SEATS_NAMESPACE);
    assert!(lease.get_opt("ksim-driver").await.unwrap().is_none());
    assert!(mesh.pool.group("g").is_err());

    // A node group name already in use fails the run, and the group that was there survives
    // the cleanup.
    mesh.pool.create_group("taken", SKELETON, 1).await.unwrap();
    let file = trace_file(
        vec![(0, vec![("v1.ConfigMap", "a", "b", config_map("b"))])],
        1000,
    );
    let clash = mesh
        .start_simulation(spec(file, "taken", pb::OnErrorPolicy::Continue))
        .await
        .unwrap();
    let ended = mesh.until_done(&clash.id).await;
    assert_eq!(ended.state(), pb::SimulationState::Failed);
    assert!(
        ended.error_message.contains("taken"),
        "{}",
        ended.error_message
    );
    assert_eq!(mesh.pool.group("taken").unwrap().desired, 1);
    mesh.assert_nothing_left(&clash.id, &[]).await;

    // A namespace another simulation left is not taken over (this run's cleanup would delete
    // it): the run fails naming it, and the namespace stays.
    let namespaces: Api<Namespace> = Api::all(mesh.client.clone());
    let theirs = serde_json::from_value(json!({"metadata": {
        "name": "virtual-shared",
        "labels": {"ksim.io/simulation": "0abc-0002"},
    }}))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let file = trace_file(
        vec![(0, vec![("v1.ConfigMap", "shared", "b", config_map("b"))])],
        1000,
    );
    let taken = mesh
        .start_simulation(spec(file, "g2", pb::OnErrorPolicy::Continue))
        .await
        .unwrap();
    let ended = mesh.until_done(&taken.id).await;
    assert_eq!(ended.state(), pb::SimulationState::Failed);
    assert!(
        ended.error_message.contains("virtual-shared") && ended.error_message.contains("0abc-0002"),
        "{}",
        ended.error_message
    );
    assert!(
        namespaces
            .get_opt("virtual-shared")
            .await
            .unwrap()
            .is_some()
    );
    mesh.assert_nothing_left(&taken.id, &["g2"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_the_cluster_refuses_are_reported_and_on_error_decides() {
    let mut mesh = start().await;
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let mut invalid = Workload::new("broken", 1).json();
    invalid["spec"]["selector"]["matchLabels"]["app"] = json!("does-not-match");
    let file = trace_file(
        vec![
            (
                0,
                vec![
                    ("v1.ConfigMap", "team", "first", config_map("first")),
                    ("example.com/v1.Widget", "team", "w", widget),
                    ("apps/v1.Deployment", "team", "broken", invalid),
                ],
            ),
            (
                1000,
                vec![("v1.ConfigMap", "team", "second", config_map("second"))],
            ),
        ],
        2000,
    );

    let kept_going = mesh
        .start_simulation(spec(file.clone(), "e1", pb::OnErrorPolicy::Continue))
        .await
        .unwrap();
    let ended = mesh.until_done(&kept_going.id).await;
    assert_eq!(
        ended.state(),
        pb::SimulationState::Succeeded,
        "{}",
        ended.error_message
    );
    let report = mesh.report(&kept_going.id).await;
    assert_eq!(report.events_applied, 2);
    let mut refused: Vec<(String, String)> = report
        .object_errors
        .iter()
        .map(|e| (e.gvk.clone().unwrap().kind, e.name.clone()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        [
            ("Deployment".to_owned(), "broken".to_owned()),
            ("Widget".to_owned(), "w".to_owned())
        ]
    );
    for error in &report.object_errors {
        assert_eq!(error.namespace, "virtual-team");
        assert_eq!(error.event_index, 0);
        assert!(!error.message.is_empty());
    }
    mesh.assert_nothing_left(&kept_going.id, &["e1"]).await;

    let stopped = mesh
        .start_simulation(spec(file, "e2", pb::OnErrorPolicy::Stop))
        .await
        .unwrap();
    let ended = mesh.until_done(&stopped.id).await;
    assert_eq!(ended.state(), pb::SimulationState::Failed);
    assert!(
        ended.error_message.contains("on_error is STOP"),
        "{}",
        ended.error_message
    );
    let report = mesh.report(&stopped.id).await;
    assert!(
        report.events_applied < 2,
        "the second event was not applied"
    );
    mesh.assert_nothing_left(&stopped.id, &["e2"]).await;

    cluster_scoped_objects_it_did_not_create_are_left_alone(&mut mesh).await;
}

const CLUSTER_ROLE: &str = "rbac.authorization.k8s.io/v1.ClusterRole";
/// A ClusterRole the control plane made, which the trace overwrites.
const CONTROLLER_ROLE: &str = "system:controller:deployment-controller";
/// An APIService the control plane registered, which the trace deletes.
const API_SERVICE: &str = "v1.node.k8s.io";
/// A ClusterRole the trace creates, then deletes.
const OWN_ROLE: &str = "ksim-e2e-own";

fn named(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}})
}

/// Issue 53: a trace that deletes `cluster-admin` and an APIService it did not create, and
/// overwrites a controller's ClusterRole. They survive unchanged, and the report names each
/// refusal; the ClusterRole the trace created itself is deleted by the trace's own delete,
/// before the cleanup. (A Namespace the run did not create fails the run in its prepare
/// phase, as above.)
async fn cluster_scoped_objects_it_did_not_create_are_left_alone(mesh: &mut TestMesh) {
    let roles: Api<ClusterRole> = Api::all(mesh.client.clone());
    let api_services: Api<APIService> = Api::all(mesh.client.clone());
    let admin = roles.get("cluster-admin").await.unwrap().metadata;
    let controller = roles.get(CONTROLLER_ROLE).await.unwrap().metadata;
    let api_service = api_services.get(API_SERVICE).await.unwrap().metadata;

    let overwrite = json!({"metadata": {"name": CONTROLLER_ROLE}, "rules": []});
    let own = json!({
        "metadata": {"name": OWN_ROLE},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    });
    // Ten minutes of trace: the run is cancelled once both events are applied, so the own
    // role's absence is the trace's delete, not the cleanup's.
    let file = trace_file_with_deletes(
        vec![
            (
                0,
                vec![
                    (CLUSTER_ROLE, "", CONTROLLER_ROLE, overwrite),
                    (CLUSTER_ROLE, "", OWN_ROLE, own),
                ],
                vec![
                    (CLUSTER_ROLE, "", "cluster-admin", named("cluster-admin")),
                    (
                        "apiregistration.k8s.io/v1.APIService",
                        "",
                        API_SERVICE,
                        named(API_SERVICE),
                    ),
                ],
            ),
            (
                1000,
                Vec::new(),
                vec![(CLUSTER_ROLE, "", OWN_ROLE, named(OWN_ROLE))],
            ),
        ],
        Vec::new(),
        600_000,
    );
    let id = mesh
        .start_simulation(spec(file, "e3", pb::OnErrorPolicy::Continue))
        .await
        .unwrap()
        .id;
    // Or the run ended: its state and error say why, sooner than the deadline would.
    let applied = until_simulation_is(&mesh.driver, &id, "applied both events", |simulation| {
        let applied = simulation.progress.as_ref().map_or(0, |p| p.events_applied);
        let ended = matches!(
            simulation.state(),
            pb::SimulationState::Succeeded
                | pb::SimulationState::Failed
                | pb::SimulationState::Cancelled
        );
        applied >= 2 || ended
    })
    .await;
    assert_eq!(
        applied.state(),
        pb::SimulationState::Running,
        "{}",
        applied.error_message
    );
    assert!(
        roles.get_opt(OWN_ROLE).await.unwrap().is_none(),
        "the trace deleted the ClusterRole it created"
    );
    let cancelled = mesh.cancel(&id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    mesh.assert_nothing_left(&id, &["e3"]).await;

    let report = mesh.report(&id).await;
    let mut refused: Vec<(String, String, pb::ObjectOperation)> = report
        .object_errors
        .iter()
        .map(|e| (e.gvk.clone().unwrap().kind, e.name.clone(), e.operation()))
        .collect();
    refused.sort();
    let refusal = |kind: &str, name: &str, operation| (kind.to_owned(), name.to_owned(), operation);
    assert_eq!(
        refused,
        [
            refusal("APIService", API_SERVICE, pb::ObjectOperation::Delete),
            refusal("ClusterRole", "cluster-admin", pb::ObjectOperation::Delete),
            refusal("ClusterRole", CONTROLLER_ROLE, pb::ObjectOperation::Apply),
        ],
        "{:?}",
        report.object_errors
    );
    for error in &report.object_errors {
        assert!(
            error.message.contains(&error.name)
                && error.message.contains("not created by this replay"),
            "{}",
            error.message
        );
    }

    // Each is the object it was (the same uid: an APIService deleted would be registered
    // again, under another), the ClusterRoles unchanged.
    let admin_after = roles.get("cluster-admin").await.unwrap().metadata;
    assert_eq!(
        (admin_after.uid, admin_after.resource_version),
        (admin.uid, admin.resource_version)
    );
    let controller_after = roles.get(CONTROLLER_ROLE).await.unwrap().metadata;
    assert_eq!(
        (controller_after.uid, controller_after.resource_version),
        (controller.uid, controller.resource_version)
    );
    let api_service_after = api_services.get(API_SERVICE).await.unwrap().metadata;
    assert_eq!(api_service_after.uid, api_service.uid);
    assert_eq!(api_service_after.deletion_timestamp, None);
}
