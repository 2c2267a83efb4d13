//! Feeds the index from three label-selected watches: seat Deployments (with their skeletons
//! resolved), seat pods and virtual nodes.

use std::collections::BTreeSet;

use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_kube::skeletons::{ResolveError, SkeletonResolver};
use ksim_nodes::labels::GROUP_LABEL;
use kube::{
    Api, Client, Resource,
    runtime::{WatchStreamExt, watcher},
};
use tokio::task::JoinSet;

use crate::index::{Index, ObjectKey, Skeleton, Source, object_key};

/// Runs the watches until the returned set is dropped.
pub fn spawn(client: Client, index: Index) -> JoinSet<()> {
    let selector = watcher::Config::default().labels(GROUP_LABEL);
    let mut tasks = JoinSet::new();
    let deployments = watcher(Api::<Deployment>::all(client.clone()), selector.clone());
    let resolver = SkeletonResolver::new(client.clone());
    tasks.spawn(feed(
        deployments,
        index.clone(),
        Source::Deployments,
        move |index, deployment: Deployment| {
            let resolver = resolver.clone();
            async move {
                let skeleton = skeleton_of(&resolver, &deployment).await;
                if let Err(error) = index.apply_deployment(&deployment, skeleton) {
                    tracing::warn!(deployment = ?object_key(&deployment.metadata), %error,
                        "seat Deployment not served as a node group");
                }
            }
        },
        |index, key| index.delete_deployment(&key.0, &key.1),
    ));
    tasks.spawn(feed(
        watcher(Api::<Pod>::all(client.clone()), selector.clone()),
        index.clone(),
        Source::Seats,
        |index, pod: Pod| async move { index.apply_pod(&pod) },
        |index, key| index.delete_pod(&key.0, &key.1),
    ));
    tasks.spawn(feed(
        watcher(Api::<Node>::all(client), selector),
        index,
        Source::Nodes,
        |index, node: Node| async move { index.apply_node(&node) },
        |index, key| index.delete_node(&key.1),
    ));
    tasks
}

async fn feed<K, S, A, F>(
    events: S,
    index: Index,
    source: Source,
    apply: A,
    delete: impl Fn(&Index, ObjectKey),
) where
    K: Resource,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    A: Fn(Index, K) -> F,
    F: Future<Output = ()>,
{
    let mut events = std::pin::pin!(events.default_backoff());
    // Objects listed since the current (re)list began; the rest were deleted meanwhile.
    let mut listed = BTreeSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(object)) => {
                listed.insert(object_key(object.meta()));
                apply(index.clone(), object).await;
            }
            Ok(watcher::Event::InitDone) => {
                index.retain(source, &std::mem::take(&mut listed));
                index.mark_synced(source);
            }
            Ok(watcher::Event::Apply(object)) => apply(index.clone(), object).await,
            Ok(watcher::Event::Delete(object)) => delete(&index, object_key(object.meta())),
            Err(error) => tracing::warn!(?source, %error, "watch failed; retrying"),
        }
    }
}

/// The index's view of a Deployment's skeleton: none named, parsed, or named but unusable.
async fn skeleton_of(resolver: &SkeletonResolver, deployment: &Deployment) -> Skeleton {
    match resolver.resolve(deployment).await {
        Ok(skeleton) => Skeleton::Parsed(skeleton),
        Err(ResolveError::NoSource(_)) => Skeleton::Missing,
        Err(error) => Skeleton::Invalid(error.to_string()),
    }
}
