//! Plays the kubelet for the nodes Karpenter's KWOK provider creates (`--karpenter`): each is
//! claimed by this pool (its labels, a podCIDR, a lease), boots by its NodePool's provisioning
//! model, then heartbeats and runs pods like any node of the pool. Karpenter decides when the
//! nodes come and go: the pool forgets a node when the Node object is gone and never deletes
//! one. The pool's group of a node is named after its NodePool.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures::{StreamExt, stream};
use k8s_openapi::{
    api::core::v1::{Node, Taint},
    jiff::Timestamp,
};
use ksim_kube::karpenter::nodepools;
use kube::{
    Api, ResourceExt,
    api::DynamicObject,
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
        heartbeat::lease_seconds,
        karpenter::nodepool_of,
        kubelet_endpoint::advertise,
        labels::{KARPENTER_NODEPOOL_LABEL, OWNER_KARPENTER, PROVISIONING_ANNOTATION},
        node::{Phase, adopted_labels, kubelet_status, phase_conditions},
        provisioning::{self, format_time},
        skeleton::NodeSkeleton,
    },
    index::{Adopted, Group, GroupSource},
};

/// A claim or write that failed is tried again on the next pass, at the latest after this.
const RESYNC: Duration = Duration::from_secs(5);

/// The taint the node lifecycle controller keeps on a node whose Ready condition is not True;
/// written with the claim of a booting node, so no pod is bound to it before its status says
/// it is booting (Karpenter's node has no conditions until then).
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

pub async fn run(ctx: Context) {
    let (nodes, node_writer) = reflector::store::<Node>();
    let pool_writer = reflector::store::Writer::<DynamicObject>::new(nodepools());
    let pools = pool_writer.as_reader();
    let changed = Arc::new(Notify::new());
    let mut watches = JoinSet::new();
    watches.spawn(notify_on_change(
        "Karpenter's nodes",
        watcher(
            Api::<Node>::all(ctx.client.clone()),
            watcher::Config::default().labels(KARPENTER_NODEPOOL_LABEL),
        )
        .default_backoff()
        .reflect(node_writer),
        changed.clone(),
    ));
    // Only for the NodePools' provisioning models: until it lists (or without Karpenter's
    // CRDs) nodes are still taken, without delays.
    watches.spawn(notify_on_change(
        "NodePools",
        watcher(
            Api::<DynamicObject>::all_with(ctx.client.clone(), &nodepools()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(pool_writer),
        changed.clone(),
    ));
    // Until the node store holds a full list, a missing node may just not be listed yet.
    if nodes.wait_until_ready().await.is_err() {
        return;
    }
    loop {
        sync(&ctx, &nodes, &pools).await;
        let _ = tokio::time::timeout(RESYNC, changed.notified()).await;
    }
}

/// One pass: groups for the NodePools, new nodes claimed, gone nodes forgotten.
async fn sync(ctx: &Context, nodes: &Store<Node>, pools: &Store<DynamicObject>) {
    let now = Timestamp::now();
    let pool = ctx.config.pool_name.clone();
    let listed = nodes.state();
    let mut claims = Vec::new();
    {
        let mut index = ctx.index();
        let present: BTreeSet<String> = listed.iter().map(|node| node.name_any()).collect();
        let gone: Vec<String> = index
            .nodes()
            .filter(|node| node.external && !present.contains(&node.name))
            .map(|node| node.name.clone())
            .collect();
        for name in gone {
            index.remove_node(&name);
        }
        for node in &listed {
            let Some(nodepool) = nodepool_of(node, &pool) else {
                continue;
            };
            let known = index.node(&node.name_any()).is_some();
            let has_group = index.group(nodepool).is_some();
            if known && has_group {
                continue;
            }
            let shape = match NodeSkeleton::from_node(Node::clone(node)) {
                Ok(shape) => Arc::new(shape),
                Err(error) => {
                    tracing::warn!(node = node.name_any(), %error, "Karpenter's node not taken");
                    continue;
                }
            };
            let provisioning = pool_provisioning(pools, nodepool);
            let created = index.group(nodepool).map_or(now, |group| group.created);
            match index.group(nodepool).map(|group| &group.source) {
                None | Some(GroupSource::Karpenter) => index.upsert_group(Group {
                    name: nodepool.to_owned(),
                    // The group shows the shape of its latest node.
                    skeleton: shape,
                    source: GroupSource::Karpenter,
                    created,
                    provisioning,
                }),
                Some(_) => {
                    tracing::warn!(
                        group = nodepool,
                        "another node group has this NodePool's name; its nodes are not taken"
                    );
                    continue;
                }
            }
            if known {
                continue;
            }
            match index.adopt_external(node, nodepool, now) {
                Ok(Some(adopted)) => claims.push((Node::clone(node), adopted)),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "Karpenter's node not taken"),
            }
        }
        // A NodePool gone with its last node leaves no group behind.
        let empty: Vec<String> = index
            .groups()
            .filter(|group| group.source == GroupSource::Karpenter)
            .filter(|group| index.nodes_of(&group.name).next().is_none())
            .filter(|group| {
                pools
                    .get(&reflector::ObjectRef::new_with(&group.name, nodepools()))
                    .is_none()
            })
            .map(|group| group.name.clone())
            .collect();
        for name in empty {
            index.remove_group(&name);
        }
    }
    stream::iter(claims)
        .map(|(node, adopted)| claim(ctx, node, adopted))
        .buffer_unordered(usize::from(ctx.config.api_concurrency))
        .collect::<Vec<()>>()
        .await;
}

/// The NodePool's provisioning model (its `ksim.io/provisioning` annotation); an unreadable
/// one runs without delays, and says so.
fn pool_provisioning(
    pools: &Store<DynamicObject>,
    name: &str,
) -> Option<ksim_provisioning::GroupProvisioning> {
    let pool = pools.get(&reflector::ObjectRef::new_with(name, nodepools()))?;
    let text = pool.annotations().get(PROVISIONING_ANNOTATION)?;
    provisioning::parse(text).unwrap_or_else(|error| {
        tracing::warn!(
            nodepool = name,
            %error,
            "the ksim.io/provisioning annotation cannot be read; the NodePool's nodes boot without delays"
        );
        None
    })
}

/// Claims the node, writes what its kubelet reports and creates its lease; on any failure the
/// node is forgotten, to be taken again on a later pass.
async fn claim(ctx: &Context, node: Node, adopted: Adopted) {
    let Adopted {
        identity,
        set_pod_cidr,
        ready_at,
    } = adopted;
    let name = identity.name.clone();
    let labels = adopted_labels(&identity.group, &identity.pool, OWNER_KARPENTER);
    let cidr = identity.pod_cidr.trunc().to_string();
    let booting_until = ready_at.map(format_time);
    let result = async {
        let resource_version = node.resource_version().unwrap_or_default();
        let claimed = ctx
            .nodes
            .claim(
                &name,
                &resource_version,
                &labels,
                set_pod_cidr.then_some(cidr.as_str()),
                booting_until.as_deref(),
                ready_at
                    .is_some()
                    .then(|| not_ready_taints(&node))
                    .as_deref(),
            )
            .await?;
        let now = Timestamp::now();
        let phase = ctx.index().node(&name).map(|entry| entry.phase(now));
        let (phase, since) = phase.unwrap_or((Phase::Ready, now));
        let info = claimed
            .status
            .as_ref()
            .and_then(|status| status.node_info.clone())
            .unwrap_or_default();
        let mut status = kubelet_status(&info, &identity, phase_conditions(phase, now, since));
        if let Some(endpoints) = &ctx.kubelet {
            advertise(&mut status, endpoints.endpoint_of(identity.pod_cidr));
        }
        ctx.nodes.write_status(&name, &status).await?;
        let uid = claimed.metadata.uid.clone().unwrap_or_default();
        let duration = lease_seconds(ctx.lease.get());
        ctx.nodes.ensure_lease(&name, &uid, duration).await?;
        Ok::<_, kube::Error>(claimed.metadata.uid)
    }
    .await;
    match result {
        Ok(uid) => {
            ctx.metrics.nodes_registered.inc();
            ctx.index().node_registered(&name, uid);
            // A booting node's Ready write is the node controller's.
            ctx.reconcile_nodes.notify_one();
        }
        Err(error) => {
            // Changed or gone meanwhile: the watch brings what happened next.
            if !ksim_kube::is_conflict(&error) && !ksim_kube::is_not_found(&error) {
                ctx.metrics.api_error("take Karpenter's node", &error);
            }
            ctx.index().remove_node(&name);
        }
    }
}

/// The node's taints plus the not-ready one, once.
fn not_ready_taints(node: &Node) -> Vec<Taint> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|taint| taint.key == NOT_READY_TAINT) {
        taints.push(Taint {
            key: NOT_READY_TAINT.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Taint::default()
        });
    }
    taints
}
