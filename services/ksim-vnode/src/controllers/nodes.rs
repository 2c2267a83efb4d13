//! Brings the registered nodes to what the groups want: creates missing nodes with their
//! leases, deletes surplus ones, and plays each group's provisioning model: a node registers
//! when its registration delay has passed, turns Ready when its ready delay has, and a node
//! whose seat went stays unschedulable and NotReady until its termination delay has.

use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::{api::resource::v1::ResourceSlice, jiff::Timestamp};

use super::Context;
use crate::{
    apiserver::Published,
    domain::{
        heartbeat::lease_seconds,
        kubelet_endpoint::advertise,
        labels::BOOTING_UNTIL_ANNOTATION,
        node::{Phase, phase_conditions, virtual_node},
        provisioning::format_time,
    },
    index::NewNode,
};

const RESYNC: Duration = Duration::from_secs(10);

/// After a pass with a failed write, the next waits at least this long: a due change that
/// keeps failing is retried, not spun on.
const RETRY: Duration = Duration::from_secs(1);

pub async fn run(ctx: Context) {
    loop {
        let failed = reconcile(&ctx).await;
        // Sleep until the next node is due by its model, or something changes; a missed
        // notification is caught by the periodic resync.
        let due = ctx.index().next_wait(Timestamp::now());
        let wait = due.map_or(RESYNC, |due| due.min(RESYNC));
        let wait = if failed { wait.max(RETRY) } else { wait };
        let _ = tokio::time::timeout(wait, ctx.reconcile_nodes.notified()).await;
    }
}

/// One pass; whether any write failed.
pub async fn reconcile(ctx: &Context) -> bool {
    let now = Timestamp::now();
    let changes = ctx.index().plan_node_changes(now);
    for (node, error) in &changes.exhausted {
        tracing::warn!(node, %error, "no podCIDR left for a virtual node");
    }
    let concurrency = usize::from(ctx.config.api_concurrency);
    let creates = stream::iter(changes.create)
        .map(|new| register(ctx, new))
        .buffer_unordered(concurrency)
        .collect::<Vec<bool>>();
    let deletes = stream::iter(changes.delete)
        .map(|name| async move {
            match ctx.nodes.delete(&name).await {
                Ok(()) => {
                    ctx.index().remove_node(&name);
                    true
                }
                Err(error) => {
                    ctx.metrics.api_error("delete node", &error);
                    if let Some(node) = ctx.index().node_mut(&name) {
                        node.state = crate::index::NodeState::Registered;
                    }
                    false
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<bool>>();
    let terminations = stream::iter(changes.terminate)
        .map(|(name, gone)| async move {
            let conditions = phase_conditions(Phase::ShuttingDown, now, now);
            let marked = match ctx.nodes.mark_terminating(&name, &format_time(gone)).await {
                Ok(()) => {
                    ctx.index().termination_written(&name, Timestamp::now());
                    ctx.nodes.refresh_conditions(&name, &conditions).await
                }
                Err(error) => Err(error),
            };
            match marked {
                Ok(()) => true,
                Err(error) => {
                    ctx.metrics.api_error("mark node shutting down", &error);
                    ctx.index().termination_failed(&name);
                    false
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<bool>>();
    let readies = stream::iter(changes.ready)
        .map(|(name, ready_at)| async move {
            let conditions = phase_conditions(Phase::Ready, Timestamp::now(), ready_at);
            let written = ctx.nodes.refresh_conditions(&name, &conditions).await;
            if let Err(error) = &written {
                ctx.metrics.api_error("make node Ready", error);
            }
            ctx.index().ready_written(&name, written.is_ok());
            written.is_ok()
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<bool>>();
    let (created, deleted, terminated, readied) =
        tokio::join!(creates, deletes, terminations, readies);
    [created, deleted, terminated, readied]
        .iter()
        .flatten()
        .any(|ok| !ok)
}

/// Publishes a node's devices; one the apiserver would change is withdrawn and said so, and
/// the node runs without them (a retry would change nothing).
async fn publish(ctx: &Context, slice: &ResourceSlice) -> Result<(), kube::Error> {
    match ctx.nodes.publish_devices(slice).await? {
        Published::Published => {}
        Published::Withdrawn(why) => tracing::error!(
            node = slice.spec.node_name.as_deref().unwrap_or_default(),
            why,
            "the node's devices were not published"
        ),
    }
    Ok(())
}

/// Creates the Node (booting, when its model says so), its lease and its devices' slice.
async fn register(ctx: &Context, new: NewNode) -> bool {
    let NewNode {
        identity,
        skeleton,
        ready_at,
    } = new;
    let now = Timestamp::now();
    let mut node = virtual_node(&skeleton, &identity, now);
    if let (Some(endpoints), Some(status)) = (&ctx.kubelet, node.status.as_mut()) {
        advertise(status, endpoints.endpoint_of(identity.pod_cidr));
    }
    if let Some(ready_at) = ready_at {
        // Booting: NotReady with the reason the provider knows, and when it ends on the node
        // itself, so a restarted pool knows it too.
        node.metadata
            .annotations
            .get_or_insert_default()
            .insert(BOOTING_UNTIL_ANNOTATION.to_owned(), format_time(ready_at));
        if let Some(status) = node.status.as_mut() {
            status.conditions = Some(phase_conditions(Phase::Booting, now, now));
        }
    }
    let registered = ctx.nodes.register(&node).await;
    let lease = match &registered {
        Ok(node) => {
            let uid = node.metadata.uid.clone().unwrap_or_default();
            let duration = lease_seconds(ctx.lease.get());
            ctx.nodes.ensure_lease(&identity.name, &uid, duration).await
        }
        Err(_) => Ok(()),
    };
    let published = match (&registered, &skeleton.devices) {
        (Ok(node), Some(devices)) => {
            let uid = node.metadata.uid.clone().unwrap_or_default();
            publish(ctx, &devices.slice_for(&identity.name, &uid)).await
        }
        _ => Ok(()),
    };
    let lease = lease.and(published);
    match (registered, lease) {
        (Ok(node), Ok(())) => {
            ctx.metrics.nodes_registered.inc();
            ctx.index()
                .node_registered(&identity.name, node.metadata.uid);
            true
        }
        (Err(error), _) | (Ok(_), Err(error)) => {
            ctx.metrics.api_error("register node", &error);
            // Forgotten here, planned again on the next pass.
            ctx.index().remove_node(&identity.name);
            false
        }
    }
}
