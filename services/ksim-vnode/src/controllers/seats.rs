//! Deployment-backed node groups: a Deployment labelled `ksim.io/node-group=<group>` whose
//! pods ("seats") carry the same label. The pool registers one node per live seat, named
//! after it, and deletes the node when its seat goes.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Pod},
    jiff::Timestamp,
};
use ksim_kube::skeletons::SkeletonResolver;
use kube::{
    Api, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::{sync::Notify, task::JoinSet};

use super::{Context, notify_on_change};
use crate::{
    domain::{
        labels::GROUP_LABEL,
        pod::is_terminal,
        provisioning,
        seats::{group_of, provisioning_of},
    },
    index::{Group, GroupSource},
};

/// The unreadable provisioning annotations already warned about, by Deployment, so each is
/// logged once rather than on every watch event.
type Warned = Mutex<BTreeMap<(String, String), String>>;

pub async fn run(ctx: Context) {
    let client = ctx.client.clone();
    let (deployments, deployment_writer) = reflector::store::<Deployment>();
    let (seats, seat_writer) = reflector::store::<Pod>();
    let changed = Arc::new(Notify::new());
    // The watches run in tasks of their own so the stores fill while this loop waits; the
    // JoinSet aborts them when this controller is aborted.
    let mut watches = JoinSet::new();
    watches.spawn(notify_on_change(
        "seat Deployments",
        watcher(
            Api::<Deployment>::all(client.clone()),
            watcher::Config::default().labels(GROUP_LABEL),
        )
        .default_backoff()
        .reflect(deployment_writer),
        changed.clone(),
    ));
    watches.spawn(notify_on_change(
        "seats",
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
    let skeletons = SkeletonResolver::new(ctx.client.clone());
    let warned = Warned::default();
    loop {
        sync_groups(&ctx, &deployments, &seats, &skeletons, &warned).await;
        // A notification that came during the sync is kept as a permit, so none is lost.
        changed.notified().await;
    }
}

async fn sync_groups(
    ctx: &Context,
    deployments: &Store<Deployment>,
    seats: &Store<Pod>,
    skeletons: &SkeletonResolver,
    warned: &Warned,
) {
    let mut wanted: BTreeMap<String, Group> = BTreeMap::new();
    for deployment in deployments.state() {
        let Some(group) = group_of(&deployment).map(str::to_owned) else {
            continue;
        };
        let namespace = deployment.namespace().unwrap_or_default();
        let skeleton = match skeletons.resolve(&deployment).await {
            Ok(skeleton) => skeleton,
            Err(reason) => {
                tracing::warn!(
                    group,
                    deployment = deployment.name_any(),
                    %reason,
                    "node group skipped"
                );
                continue;
            }
        };
        // A seat's creation is its node's scale-up: the registration delay counts from it.
        let seat_names: BTreeMap<String, Timestamp> = seats
            .state()
            .iter()
            .filter(|pod| {
                pod.namespace().as_deref() == Some(namespace.as_str())
                    && pod.labels().get(GROUP_LABEL) == Some(&group)
                    && pod.metadata.deletion_timestamp.is_none()
                    && !is_terminal(pod)
            })
            .map(|pod| {
                let created = pod.metadata.creation_timestamp.as_ref();
                (pod.name_any(), created.map_or_else(Timestamp::now, |t| t.0))
            })
            .collect();
        let provisioning = group_provisioning(&deployment, warned);
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
                provisioning,
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
                Some(GroupSource::Karpenter) => {
                    tracing::warn!(
                        group = name,
                        "a Karpenter NodePool has this name; Deployment ignored"
                    );
                }
                _ => index.upsert_group(group),
            }
        }
    }
    ctx.reconcile_nodes.notify_one();
}

/// The Deployment's provisioning model. An unreadable one runs the group with no delays, and
/// says so (once per annotation text) naming the Deployment and what is wrong.
fn group_provisioning(
    deployment: &Deployment,
    warned: &Warned,
) -> Option<ksim_provisioning::GroupProvisioning> {
    let text = provisioning_of(deployment)?;
    match provisioning::parse(text) {
        Ok(parsed) => parsed,
        Err(error) => {
            let key = (
                deployment.namespace().unwrap_or_default(),
                deployment.name_any(),
            );
            let mut warned = warned.lock().unwrap_or_else(|e| e.into_inner());
            if warned.get(&key).map(String::as_str) != Some(text) {
                tracing::warn!(
                    deployment = format!("{}/{}", key.0, key.1),
                    %error,
                    "the ksim.io/provisioning annotation cannot be read; the group runs without delays"
                );
                warned.insert(key, text.to_owned());
            }
            None
        }
    }
}
