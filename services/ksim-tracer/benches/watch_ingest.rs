//! Tracer ingest end to end from a watch, on the real control plane: how fast the tracer records
//! a relist of a cluster already full of objects, and how far it trails objects created live.
//!
//! cargo bench -p ksim-tracer --bench watch_ingest -- --objects 5000
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use ksim_localenv::ControlPlane;
use ksim_tracer::{
    domain::{kinds::TrackedKind, sanitize::EnvRedaction},
    log::{FsyncPolicy, LogConfig},
    store::Store,
    watch,
};
use kube::{Api, Client, api::PostParams};
use serde_json::json;
use tokio::sync::mpsc;

fn objects_arg() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--objects")
        .and_then(|i| args.get(i + 1))
        .map_or(5_000, |n| n.parse().unwrap())
}

async fn create(client: &Client, namespace: &str, from: usize, to: usize) -> Duration {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    stream::iter(from..to)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let object: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:06}"), "labels": {"app": "bench", "shard": (i % 16).to_string()}},
                    "data": {"config.yaml": format!("replicas: {i}\nimage: registry.example.com/app:{}\n", i % 7)}
                }))
                .unwrap();
                api.create(&PostParams::default(), &object).await.unwrap();
            }
        })
        .await;
    started.elapsed()
}

async fn recorded(store: &Store, at_least: u64, deadline: Duration) -> Duration {
    let started = Instant::now();
    while store.object_count("", "ConfigMap") < at_least && started.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let objects = objects_arg();
    let control_plane = ControlPlane::builder()
        .without_scheduler()
        .start()
        .await
        .unwrap();
    let client = control_plane.client();
    let create_before = create(&client, "default", 0, objects).await;
    println!(
        "created {objects} ConfigMaps before the tracer started in {:.1} s",
        create_before.as_secs_f64()
    );

    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    let kind = TrackedKind {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        pod_template_paths: vec![],
        track_lifecycles: false,
        skip_owned: false,
    };
    let (store, _) = Store::open(config, vec![kind], EnvRedaction::default()).unwrap();
    let started = Instant::now();
    let (observations, receiver) = mpsc::channel(4096);
    let _recorder = store.clone().run_recorder(receiver);
    let _maintenance = store.clone().run_maintenance(Duration::from_millis(100));
    let _watches = watch::spawn(
        client.clone(),
        store.kinds(),
        observations,
        store.statuses().clone(),
        Duration::from_secs(1),
    );
    let relist = recorded(&store, objects as u64, Duration::from_secs(300)).await;
    let relist = relist.max(started.elapsed());
    println!(
        "relist recorded: {objects} objects in {:.2} s = {:.0} objects/s (list pages + sanitise + hash + append)",
        relist.as_secs_f64(),
        objects as f64 / relist.as_secs_f64()
    );

    let live_started = Instant::now();
    let create_live = create(&client, "default", objects, 2 * objects).await;
    let trailing = recorded(&store, 2 * objects as u64, Duration::from_secs(300)).await;
    println!(
        "live: {objects} creates took {:.2} s ({:.0}/s, the apiserver's pace); the tracer had recorded all {:.3} s after the last create returned ({:.0} objects/s end to end)",
        create_live.as_secs_f64(),
        objects as f64 / create_live.as_secs_f64(),
        trailing.as_secs_f64(),
        objects as f64 / live_started.elapsed().as_secs_f64()
    );
}
