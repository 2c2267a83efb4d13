//! The shipped RBAC (deploy/tracer/rbac.yaml) is enough to watch every default kind and read
//! pods' usage from the metrics API, grants nothing but reads, and no Secrets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use ksim_localenv::{ControlPlane, MetricsServer, manifests, wait};
use ksim_proto::ksim::trace::v1 as pb;
use ksim_tracer::{
    domain::{kinds::default_kinds, sanitize::EnvRedaction},
    log::LogConfig,
    store::Store,
    usage, watch,
};
use kube::{Api, api::ListParams};
use tokio::sync::mpsc;

const NAMESPACE_YAML: &str = include_str!("../../../../deploy/tracer/namespace.yaml");
const RBAC_YAML: &str = include_str!("../../../../deploy/tracer/rbac.yaml");
const SERVICE_ACCOUNT: &str = "system:serviceaccount:ksim-system:ksim-tracer";

#[test]
fn rbac_rules_are_read_only_and_name_every_resource() {
    assert_eq!(
        manifests::wildcard_rules(RBAC_YAML).unwrap(),
        Vec::<String>::new()
    );
    let objects = manifests::parse(RBAC_YAML).unwrap();
    let role = objects
        .iter()
        .find(|o| o.types.as_ref().unwrap().kind == "ClusterRole")
        .unwrap();
    for rule in role.data["rules"].as_array().unwrap() {
        let verbs: Vec<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            verbs.iter().all(|v| ["get", "list", "watch"].contains(v)),
            "{rule}"
        );
        assert!(
            !rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "secrets"),
            "{rule}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tracer_watches_every_default_kind_as_its_service_account() {
    let control_plane = ControlPlane::builder()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let admin = control_plane.client();
    manifests::apply(&admin, NAMESPACE_YAML).await.unwrap();
    manifests::apply(&admin, RBAC_YAML).await.unwrap();
    let as_tracer = control_plane
        .client_as(
            SERVICE_ACCOUNT,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:ksim-system",
            ],
        )
        .await
        .unwrap();

    let data = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(
        LogConfig::new(data.path()),
        default_kinds(),
        EnvRedaction::default(),
    )
    .unwrap();
    let (observations, receiver) = mpsc::channel(64);
    let _recorder = store.clone().run_recorder(receiver);
    // The metrics API through the aggregation layer: the apiserver authorizes the tracer's
    // read of metrics.k8s.io pods before it proxies it to metrics-server.
    let _metrics_server = MetricsServer::builder(&control_plane)
        .start()
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let _usage = usage::spawn(
        as_tracer.clone(),
        Duration::from_secs(1),
        store.usage().clone(),
        observations.clone(),
    );
    let _watches = watch::spawn(
        as_tracer.clone(),
        store.kinds(),
        observations,
        store.statuses().clone(),
        Duration::from_secs(1),
    );

    wait::until(
        "every default kind is watched",
        crate::common::DEADLINE,
        || {
            let statuses = store.statuses().get();
            async move {
                if statuses
                    .iter()
                    .all(|s| s.state == pb::TrackedKindState::Watching)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "{:?}",
                        statuses
                            .iter()
                            .map(|s| (s.state, s.message.clone()))
                            .collect::<Vec<_>>()
                    ))
                }
            }
        },
    )
    .await
    .unwrap();

    wait::until(
        "the tracer's account to read the metrics API",
        crate::common::DEADLINE,
        || {
            let recording = store.usage().recording();
            async move {
                (recording == pb::UsageRecording::Recorded)
                    .then_some(())
                    .ok_or(format!("{recording:?}"))
            }
        },
    )
    .await
    .unwrap();

    let secrets = Api::<Secret>::all(as_tracer)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&secrets, kube::Error::Api(status) if status.code == 403),
        "{secrets:?}"
    );
}
