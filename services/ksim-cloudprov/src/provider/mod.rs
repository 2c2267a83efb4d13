//! The provider's operations over the index, and the writes they make through
//! [`ProviderWrites`]. Each group's resizes are serialised, so concurrent calls from cluster-autoscaler see each
//! other's effects and every invariant (limits, exactly the chosen seats) holds.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, TryStreamExt};
use ksim_nodes::{
    pricing::{Pricing, PricingError},
    skeleton::NodeSkeleton,
};
use thiserror::Error;

use crate::{
    domain::{
        group::{GroupState, Instance, Member, member_of},
        options::{GroupOptions, ResolvedOptions},
        plan::{
            CHOSEN_DELETION_COST, NodeRef, PlanError, Removal, plan_decrease, plan_delete_nodes,
            plan_increase, removal_hazards,
        },
        template::template_node_bytes,
    },
    index::{GroupInfo, Index, Skeleton},
};

/// The writes the provider makes; implemented against the apiserver in `apiserver`.
pub trait ProviderWrites: Send + Sync + 'static {
    /// Sets (`Some`) or removes (`None`) a seat's pod-deletion-cost annotation.
    fn set_deletion_cost(
        &self,
        namespace: &str,
        pod: &str,
        cost: Option<i32>,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Sets a Deployment's replicas if its resourceVersion is still `resource_version`.
    fn scale(
        &self,
        namespace: &str,
        deployment: &str,
        replicas: i32,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Deletes a Node object; one already gone is not an error.
    fn delete_node(&self, name: &str) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Marks a retiring group's Deployment released (`ksim.io/released`).
    fn mark_released(
        &self,
        namespace: &str,
        deployment: &str,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClusterError {
    #[error("{0} changed concurrently")]
    Conflict(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("Kubernetes API error: {0}")]
    Api(String),
}

#[derive(Debug, Error)]
pub enum ProviderError {
    #[error("node group {0:?} not found")]
    UnknownGroup(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("the provider has not finished its first list of Deployments, seats and nodes")]
    NotSynced,
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("node group {group}: {what} did not happen within {timeout:?}")]
    Timeout {
        group: String,
        what: String,
        timeout: Duration,
    },
    #[error("node group {0} has no node skeleton")]
    NoSkeleton(String),
    #[error("node group {group} has an invalid node skeleton: {reason}")]
    InvalidSkeleton { group: String, reason: String },
    #[error("{0} is not configured")]
    NotConfigured(&'static str),
    #[error(transparent)]
    Pricing(#[from] PricingError),
}

/// A resize the provider carried out, for whoever watches the simulation (the driver's report,
/// tests asserting exactly what cluster-autoscaler asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleEvent {
    Increased {
        group: String,
        delta: i32,
    },
    /// The nodes cluster-autoscaler named, by name.
    NodesDeleted {
        group: String,
        nodes: Vec<String>,
    },
    TargetDecreased {
        group: String,
        delta: i32,
    },
}

/// Events kept for a slow subscriber before it starts missing some.
const EVENT_BUFFER: usize = 1024;

/// Settings that shape answers rather than writes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Pool label value the template node carries, as the pool registering the nodes writes it.
    pub pool_name: String,
    /// Node label naming a node's GPU type.
    pub gpu_label: String,
    pub pricing: Option<Pricing>,
    pub group_options: HashMap<String, GroupOptions>,
    /// How long to wait for the watches to show a write, or for seats to become ready.
    pub settle_timeout: Duration,
}

#[derive(Debug)]
pub struct Provider<C> {
    index: Index,
    cluster: C,
    settings: Settings,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    events: tokio::sync::broadcast::Sender<ScaleEvent>,
}

/// How often a scale is retried when only the Deployment's status moved underneath it.
const SCALE_ATTEMPTS: usize = 5;

/// Seat marks or Node deletions of one resize sent at once: CA removes up to
/// `--max-scale-down-parallelism` (10) nodes at once, more with a higher setting.
const WRITES_IN_FLIGHT: usize = 16;

impl<C: ProviderWrites> Provider<C> {
    pub fn new(index: Index, cluster: C, settings: Settings) -> Self {
        Self {
            index,
            cluster,
            settings,
            locks: Mutex::default(),
            events: tokio::sync::broadcast::Sender::new(EVENT_BUFFER),
        }
    }

    /// Every resize carried out from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ScaleEvent> {
        self.events.subscribe()
    }

    fn emit(&self, event: ScaleEvent) {
        // No subscriber is the normal case, not an error.
        let _ = self.events.send(event);
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Succeeds once the index holds full lists; every answer comes from it.
    ///
    /// CA calls Refresh at the start of each loop and asks for its groups afresh after it: the
    /// groups deleted since are forgotten now, and the retiring ones it has seen frozen (see
    /// [`Index::groups`]) and removes no node of any more are marked released, so their
    /// deleter may go on. A failed mark is retried at the next Refresh.
    pub async fn refresh(&self) -> Result<(), ProviderError> {
        if !self.index.is_synced() {
            return Err(ProviderError::NotSynced);
        }
        self.index.purge_gone();
        for (namespace, deployment) in self.index.unreleased() {
            if let Err(error) = self.cluster.mark_released(&namespace, &deployment).await {
                tracing::warn!(%namespace, %deployment, %error, "cannot mark a retiring group released");
            }
        }
        Ok(())
    }

    pub fn groups(&self) -> Vec<GroupInfo> {
        self.index.groups()
    }

    /// The group of the node with `provider_id`; `None` for nodes the provider does not know
    /// as a served group's (see [`Index::group_for_provider_id`]).
    pub fn group_for_provider_id(&self, provider_id: &str) -> Option<GroupInfo> {
        self.index.group_for_provider_id(provider_id)
    }

    pub fn target_size(&self, id: &str) -> Result<i32, ProviderError> {
        self.index.target_size(id).ok_or_else(|| self.unknown(id))
    }

    pub fn instances(&self, id: &str) -> Result<Vec<Instance>, ProviderError> {
        Ok(self.state(id)?.0.instances())
    }

    pub fn template_node(&self, id: &str) -> Result<Vec<u8>, ProviderError> {
        match self.skeleton(id)? {
            Skeleton::Parsed(skeleton) => {
                Ok(template_node_bytes(&skeleton, id, &self.settings.pool_name))
            }
            Skeleton::Missing => Err(ProviderError::NoSkeleton(id.to_owned())),
            Skeleton::Invalid(reason) => Err(ProviderError::InvalidSkeleton {
                group: id.to_owned(),
                reason,
            }),
        }
    }

    /// GPU types named by the groups' skeletons under the GPU label.
    pub fn gpu_types(&self) -> Vec<String> {
        let mut types: Vec<String> = self
            .index
            .skeletons()
            .iter()
            .filter_map(|s: &Arc<NodeSkeleton>| s.labels.get(&self.settings.gpu_label).cloned())
            .collect();
        types.sort();
        types.dedup();
        types
    }

    pub fn options(
        &self,
        id: &str,
        defaults: &ResolvedOptions,
    ) -> Result<ResolvedOptions, ProviderError> {
        // CA asks once for every node it weighs for scale-down: a snapshot of the group per
        // question was most of the provider's CPU at 1,000 nodes.
        if !self.index.serves(id) {
            return Err(self.unknown(id));
        }
        let options = self
            .settings
            .group_options
            .get(id)
            .ok_or(ProviderError::NotConfigured(
                "per-group autoscaling options",
            ))?;
        Ok(options.resolve(defaults))
    }

    pub fn pricing(&self) -> Result<&Pricing, ProviderError> {
        self.settings
            .pricing
            .as_ref()
            .ok_or(ProviderError::NotConfigured("pricing"))
    }

    pub async fn increase_size(&self, id: &str, delta: i32) -> Result<(), ProviderError> {
        let lock = self.lock(id);
        let _held = lock.lock().await;
        let (state, _) = self.state(id)?;
        let replicas = plan_increase(&state, delta)?;
        tracing::info!(group = id, delta, replicas, "increasing node group");
        self.scale(&state, replicas).await?;
        self.emit(ScaleEvent::Increased {
            group: id.to_owned(),
            delta,
        });
        Ok(())
    }

    pub async fn delete_nodes(&self, id: &str, nodes: &[NodeRef]) -> Result<(), ProviderError> {
        let lock = self.lock(id);
        let held = lock.lock().await;
        let (state, _) = self.state(id)?;
        let named = nodes
            .iter()
            .filter_map(|node| match member_of(&node.provider_id)? {
                (_, Member::Seat(name)) => Some(name),
                (_, Member::Placeholder) => None,
            })
            .collect::<Vec<_>>();
        let departed = self.index.departed(id, named.iter().map(String::as_str));
        let removal = plan_delete_nodes(&state, nodes, &departed)?;
        tracing::info!(group = id, seats = ?removal.seats, placeholders = removal.placeholders,
            replicas = removal.replicas, "deleting nodes");
        self.remove(&state, &removal).await?;
        // The group's size is settled once its seats are gone: the Node deletions need no lock,
        // and CA's next IncreaseSize or DeleteNodes on the group must not wait behind them (at
        // CA's scale-down parallelism they queued past its gRPC timeout).
        drop(held);
        // With a termination delay the pool deletes them when it has passed; until then they
        // are Deleting instances (their seats are gone), as a cloud's instances shutting down.
        if !state.nodes_linger {
            let mut deletions = Vec::with_capacity(removal.nodes.len());
            for node in &removal.nodes {
                deletions.push(self.cluster.delete_node(node));
            }
            futures::stream::iter(deletions)
                .buffer_unordered(WRITES_IN_FLIGHT)
                .try_collect::<()>()
                .await?;
        }
        self.emit(ScaleEvent::NodesDeleted {
            group: id.to_owned(),
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        });
        Ok(())
    }

    pub async fn decrease_target_size(&self, id: &str, delta: i32) -> Result<(), ProviderError> {
        let lock = self.lock(id);
        let _held = lock.lock().await;
        let (state, _) = self.state(id)?;
        let removal = plan_decrease(&state, delta)?;
        tracing::info!(group = id, delta, seats = ?removal.seats, replicas = removal.replicas,
            "decreasing node group target size");
        self.remove(&state, &removal).await?;
        self.emit(ScaleEvent::TargetDecreased {
            group: id.to_owned(),
            delta,
        });
        Ok(())
    }

    fn state(&self, id: &str) -> Result<(GroupState, String), ProviderError> {
        self.index.group_state(id).ok_or_else(|| self.unknown(id))
    }

    fn skeleton(&self, id: &str) -> Result<Skeleton, ProviderError> {
        self.index.skeleton(id).ok_or_else(|| self.unknown(id))
    }

    fn unknown(&self, id: &str) -> ProviderError {
        ProviderError::UnknownGroup(id.to_owned())
    }

    fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// Marks the chosen seats, waits until the ReplicaSet can only pick them, then lowers
    /// replicas and waits for the chosen seats to go.
    async fn remove(&self, state: &GroupState, removal: &Removal) -> Result<(), ProviderError> {
        if !removal.lowers_replicas(state) {
            return Ok(());
        }
        // Each mark is its own pod's: sent together, a scale-down of many seats waits one
        // round trip for them, not one per seat.
        // Built whole before awaiting: an iterator adapter held across the await would make
        // the future's Send depend on its closure's lifetimes, which rustc cannot prove.
        let mut marks = Vec::with_capacity(removal.unmark.len() + removal.seats.len());
        for seat in &removal.unmark {
            marks.push(self.cluster.set_deletion_cost(&state.namespace, seat, None));
        }
        for seat in &removal.seats {
            let chosen = Some(CHOSEN_DELETION_COST);
            marks.push(
                self.cluster
                    .set_deletion_cost(&state.namespace, seat, chosen),
            );
        }
        futures::stream::iter(marks)
            .buffer_unordered(WRITES_IN_FLIGHT)
            .try_collect::<()>()
            .await?;
        // The ReplicaSet controller ranks seats from its informer: lowering replicas before it
        // sees the marks could remove the wrong seats.
        self.settle(state, "the deletion-cost marks to be visible", |now| {
            removal.seats.iter().all(|name| {
                now.seat(name)
                    .is_some_and(|s| s.deletion_cost == CHOSEN_DELETION_COST)
            }) && removal.unmark.iter().all(|name| {
                now.seat(name)
                    .is_none_or(|s| s.deletion_cost != CHOSEN_DELETION_COST)
            })
        })
        .await?;
        self.settle(state, "every other seat to be ready", |now| {
            removal_hazards(now, removal).is_empty()
        })
        .await?;
        self.scale(state, removal.replicas).await?;
        self.settle(state, "the chosen seats to be deleted", |now| {
            removal
                .seats
                .iter()
                .all(|name| now.seat(name).is_none_or(|s| s.deleting))
        })
        .await
    }

    /// Sets replicas to `replicas`, as long as nobody else changed them since `planned`, and
    /// waits until the index shows it so the next resize starts from it.
    async fn scale(&self, planned: &GroupState, replicas: i32) -> Result<(), ProviderError> {
        for attempt in 1..=SCALE_ATTEMPTS {
            let (now, resource_version) = self.state(&planned.id)?;
            if now.replicas != planned.replicas {
                return Err(ClusterError::Conflict(format!(
                    "the target size of node group {} (from {} to {})",
                    planned.id, planned.replicas, now.replicas
                ))
                .into());
            }
            match self
                .cluster
                .scale(&now.namespace, &now.deployment, replicas, &resource_version)
                .await
            {
                Ok(()) => break,
                // Usually the Deployment's status moved; the replicas check above decides.
                Err(ClusterError::Conflict(_)) if attempt < SCALE_ATTEMPTS => {
                    self.index
                        .wait_until(self.settings.settle_timeout, |index| {
                            index
                                .group_state(&planned.id)
                                .is_none_or(|(_, rv)| rv != resource_version)
                        })
                        .await;
                }
                Err(error) => return Err(error.into()),
            }
        }
        self.settle(planned, "the new target size to be visible", |now| {
            now.replicas == replicas
        })
        .await
    }

    async fn settle(
        &self,
        planned: &GroupState,
        what: &str,
        done: impl Fn(&GroupState) -> bool,
    ) -> Result<(), ProviderError> {
        let timeout = self.settings.settle_timeout;
        let id = &planned.id;
        let settled = self
            .index
            .wait_until(timeout, |index| {
                index.group_state(id).is_some_and(|(now, _)| done(&now))
            })
            .await;
        if settled {
            Ok(())
        } else {
            Err(ProviderError::Timeout {
                group: id.clone(),
                what: what.to_owned(),
                timeout,
            })
        }
    }
}

#[cfg(test)]
mod tests;
