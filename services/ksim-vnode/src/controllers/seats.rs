//! Deployment-backed node groups: a Deployment labelled `ksim.io/node-group=<group>` whose
//! pods ("seats") carry the same label. The pool registers one node per live seat, named
//! after it, and deletes the node when its seat goes.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Pod},
    },
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::{sync::Notify, task::JoinSet};

use super::Context;
use crate::{
    domain::{
        labels::GROUP_LABEL,
        pod::is_terminal,
        seats::{SKELETON_CONFIGMAP_KEY, SkeletonSource, group_of, skeleton_source},
        skeleton::NodeSkeleton,
    },
    index::{Group, GroupSource},
};

pub async fn run(ctx: Context) {
    let client = ctx.client.clone();
    let (deployments, deployment_writer) = reflector::store::<Deployment>();
    let (seats, seat_writer) = reflector::store::<Pod>();
    let changed = Arc::new(Notify::new());
    // The watches run in tasks of their own so the stores fill while this loop waits; the
    // JoinSet aborts them when this controller is aborted.
    let mut watches = JoinSet::new();
    watches.spawn(drive(
        watcher(
            Api::<Deployment>::all(client.clone()),
            watcher::Config::default().labels(GROUP_LABEL),
        )
        .default_backoff()
        .reflect(deployment_writer),
        changed.clone(),
    ));
    watches.spawn(drive(
        watcher(
            Api::<Pod>::all(client),
            watcher::Config::default().labels(GROUP_LABEL),
        )
        .default_backoff()
        .reflect(seat_writer),
        changed.clone(),
    ));
    // Until both stores hold a full list, a missing Deployment may just not be listed yet:
    // acting on that would delete its nodes.
    if deployments.wait_until_ready().await.is_err() || seats.wait_until_ready().await.is_err() {
        return;
    }
    let mut skeletons = SkeletonCache::default();
    loop {
        sync_groups(&ctx, &deployments, &seats, &mut skeletons).await;
        // A notification that came during the sync is kept as a permit, so none is lost.
        changed.notified().await;
    }
}

async fn drive<S, T, E>(events: S, changed: Arc<Notify>)
where
    S: futures::Stream<Item = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(_) => changed.notify_one(),
            Err(error) => tracing::warn!(%error, "node group watch failed; retrying"),
        }
    }
}

/// Parsed skeletons by their source text, so unchanged Deployments are not parsed again.
#[derive(Debug, Default)]
struct SkeletonCache(BTreeMap<String, Arc<NodeSkeleton>>);

async fn sync_groups(
    ctx: &Context,
    deployments: &Store<Deployment>,
    seats: &Store<Pod>,
    cache: &mut SkeletonCache,
) {
    let mut wanted: BTreeMap<String, Group> = BTreeMap::new();
    for deployment in deployments.state() {
        let Some(group) = group_of(&deployment).map(str::to_owned) else {
            continue;
        };
        let namespace = deployment.namespace().unwrap_or_default();
        let skeleton = match skeleton_of(ctx, &deployment, cache).await {
            Ok(skeleton) => skeleton,
            Err(reason) => {
                tracing::warn!(
                    group,
                    deployment = deployment.name_any(),
                    reason,
                    "node group skipped"
                );
                continue;
            }
        };
        let seat_names: BTreeSet<String> = seats
            .state()
            .iter()
            .filter(|pod| {
                pod.namespace().as_deref() == Some(namespace.as_str())
                    && pod.labels().get(GROUP_LABEL) == Some(&group)
                    && pod.metadata.deletion_timestamp.is_none()
                    && !is_terminal(pod)
            })
            .map(|pod| pod.name_any())
            .collect();
        wanted.insert(
            group.clone(),
            Group {
                name: group,
                skeleton,
                source: GroupSource::Deployment {
                    namespace,
                    name: deployment.name_any(),
                    seats: seat_names,
                },
                created: deployment
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or_else(Timestamp::now, |t| t.0),
            },
        );
    }
    {
        let mut index = ctx.index();
        let gone: Vec<String> = index
            .groups()
            .filter(|g| {
                matches!(g.source, GroupSource::Deployment { .. }) && !wanted.contains_key(&g.name)
            })
            .map(|g| g.name.clone())
            .collect();
        for name in gone {
            index.remove_group(&name);
        }
        for (name, group) in wanted {
            match index.group(&name).map(|g| &g.source) {
                Some(GroupSource::PoolManaged { .. }) => {
                    tracing::warn!(
                        group = name,
                        "a pool-managed group has this name; Deployment ignored"
                    );
                }
                _ => index.upsert_group(group),
            }
        }
    }
    ctx.reconcile_nodes.notify_one();
}

/// The node skeleton a Deployment's pod template carries inline or names in a ConfigMap.
async fn skeleton_of(
    ctx: &Context,
    deployment: &Deployment,
    cache: &mut SkeletonCache,
) -> Result<Arc<NodeSkeleton>, String> {
    let yaml = match skeleton_source(deployment).map_err(|e| e.to_string())? {
        SkeletonSource::Inline(yaml) => yaml,
        SkeletonSource::ConfigMap(name) => {
            let namespace = deployment.namespace().unwrap_or_default();
            let config_map = Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace)
                .get(&name)
                .await
                .map_err(|e| format!("cannot read ConfigMap {namespace}/{name}: {e}"))?;
            config_map
                .data
                .and_then(|mut data| data.remove(SKELETON_CONFIGMAP_KEY))
                .ok_or_else(|| {
                    format!("ConfigMap {namespace}/{name} has no {SKELETON_CONFIGMAP_KEY}")
                })?
        }
    };
    if let Some(skeleton) = cache.0.get(&yaml) {
        return Ok(skeleton.clone());
    }
    let skeleton = Arc::new(NodeSkeleton::from_yaml(&yaml).map_err(|e| e.to_string())?);
    cache.0.insert(yaml, skeleton.clone());
    Ok(skeleton)
}
