//! Brings the registered nodes to what the groups want: creates missing nodes with their
//! leases, deletes surplus ones.

use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;

use super::Context;
use crate::domain::node::virtual_node;

const RESYNC: Duration = Duration::from_secs(10);

pub async fn run(ctx: Context) {
    loop {
        reconcile(&ctx).await;
        // A missed notification is caught by the periodic resync.
        let _ = tokio::time::timeout(RESYNC, ctx.reconcile_nodes.notified()).await;
    }
}

pub async fn reconcile(ctx: &Context) {
    let changes = ctx.index().plan_node_changes();
    for (node, error) in &changes.exhausted {
        tracing::warn!(node, %error, "no podCIDR left for a virtual node");
    }
    let concurrency = usize::from(ctx.config.api_concurrency);
    let creates = stream::iter(changes.create)
        .map(|(identity, skeleton)| async move {
            let node = virtual_node(&skeleton, &identity, Timestamp::now());
            let registered = ctx.nodes.register(&node).await;
            let lease = match &registered {
                Ok(node) => {
                    let uid = node.metadata.uid.clone().unwrap_or_default();
                    let duration =
                        i32::try_from(ctx.config.lease_duration_seconds).unwrap_or(i32::MAX);
                    ctx.nodes.ensure_lease(&identity.name, &uid, duration).await
                }
                Err(_) => Ok(()),
            };
            match (registered, lease) {
                (Ok(node), Ok(())) => {
                    ctx.metrics.nodes_registered.inc();
                    ctx.index()
                        .node_registered(&identity.name, node.metadata.uid);
                }
                (Err(error), _) | (Ok(_), Err(error)) => {
                    ctx.metrics.api_error("register node", &error);
                    // Forgotten here, planned again on the next pass.
                    ctx.index().remove_node(&identity.name);
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>();
    let deletes = stream::iter(changes.delete)
        .map(|name| async move {
            match ctx.nodes.delete(&name).await {
                Ok(()) => {
                    ctx.index().remove_node(&name);
                }
                Err(error) => {
                    ctx.metrics.api_error("delete node", &error);
                    if let Some(node) = ctx.index().node_mut(&name) {
                        node.state = crate::index::NodeState::Registered;
                    }
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>();
    tokio::join!(creates, deletes);
}
