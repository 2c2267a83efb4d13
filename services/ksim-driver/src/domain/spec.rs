//! A simulation spec, checked whole before anything is created: every error names the field.

use std::{collections::BTreeSet, time::Duration};

use ksim_nodes::{
    karpenter::ZONE_LABEL,
    limits::{MAX_NODES_PER_GROUP, MAX_POOL_GROUP_NAME_LEN},
    skeleton::NodeSkeleton,
};

use super::disruptions::{GroupFacts, GroupKind};
use ksim_proto::ksim::{driver::v1 as pb, env::v1 as env};
use ksim_provisioning::Model;

/// Namespace prefix when the spec leaves it empty.
pub const DEFAULT_NAMESPACE_PREFIX: &str = "virtual";

/// Speeds outside these bounds are refused (the CLI refuses them too).
pub use ksim_report::{MAX_SPEED, MIN_SPEED};

/// Longest wall-clock replay a spec may ask for (a year): timers past it overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest prefix that still leaves room for a recorded namespace name (63 characters in all).
const MAX_PREFIX_LEN: usize = 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {problem}")]
pub struct SpecError {
    pub field: String,
    pub problem: String,
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Where the trace comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceSource {
    Stored(pb::StoredTrace),
    Uploaded(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    Continue,
    Stop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeGroup {
    /// A fixed-size group the pool creates through its API.
    PoolManaged {
        name: String,
        skeleton_yaml: String,
        count: i32,
    },
    /// A seat Deployment the cloud provider offers to cluster-autoscaler.
    Deployment {
        name: String,
        skeleton_yaml: String,
        min_size: i32,
        max_size: i32,
        initial_size: i32,
    },
    /// A Karpenter NodePool the run creates; Karpenter launches its nodes.
    Karpenter {
        name: String,
        /// The NodePool as given, less what the cluster sets (`domain::nodepool`).
        nodepool: serde_json::Value,
    },
}

impl NodeGroup {
    pub fn name(&self) -> &str {
        match self {
            Self::PoolManaged { name, .. }
            | Self::Deployment { name, .. }
            | Self::Karpenter { name, .. } => name,
        }
    }

    /// The skeleton its nodes are made from; `None` for a NodePool, whose nodes are of the
    /// instance types Karpenter chooses.
    pub fn skeleton_yaml(&self) -> Option<&str> {
        match self {
            Self::PoolManaged { skeleton_yaml, .. } | Self::Deployment { skeleton_yaml, .. } => {
                Some(skeleton_yaml)
            }
            Self::Karpenter { .. } => None,
        }
    }

    /// Its skeleton's `topology.kubernetes.io/zone`; `None` for a NodePool (Karpenter picks a
    /// zone per node) or a skeleton without one.
    pub fn zone(&self) -> Option<String> {
        let skeleton = NodeSkeleton::from_yaml(self.skeleton_yaml()?).ok()?;
        skeleton.labels.get(ZONE_LABEL).cloned()
    }

    /// A NodePool: Karpenter launches its nodes.
    pub fn is_karpenter(&self) -> bool {
        matches!(self, Self::Karpenter { .. })
    }

    /// Nodes the group has when the replay starts.
    pub fn initial_nodes(&self) -> i32 {
        match self {
            Self::PoolManaged { count, .. } => *count,
            Self::Deployment { initial_size, .. } => *initial_size,
            // Karpenter launches for pending pods only.
            Self::Karpenter { .. } => 0,
        }
    }
}

/// A spec that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulationSpec {
    pub source: TraceSource,
    pub speed: f64,
    pub duration: Option<Duration>,
    pub namespace_prefix: String,
    pub on_error: OnError,
    pub node_groups: Vec<NodeGroup>,
    pub enable_autoscaler: bool,
    /// Recreate bare pods the simulation removes, as `<name>-clone-<n>`.
    pub reschedule_bare_pods: bool,
    /// Apply the trace's first instant and let it settle before the clock starts.
    pub settle_start: bool,
    /// The scheduler and CA configuration under test, as given; `None`: the environment's.
    pub configuration: Option<env::Configuration>,
    /// The provisioning model given, checked against the groups; `None`: the trace's own, or
    /// the published default (see `domain::provisioning`).
    pub provisioning: Option<Model>,
    /// Who decides scaled workloads' replica counts, as given (`domain::autoscaled` resolves
    /// the default against the trace).
    pub replicas: pb::ReplicaSource,
    /// Failures injected into the replay, checked against the groups.
    pub disruptions: Vec<super::disruptions::Disruption>,
    /// Chooses the nodes each disruption takes.
    pub disruption_seed: u64,
    /// Replay the failures the recording observed, beside `disruptions`.
    pub replay_recorded_failures: bool,
    /// The pods whose scheduling the report explains; `None`: none.
    pub explain: Option<super::explain::ExplainScope>,
    /// The request's spec without uploaded bytes, echoed back in `Simulation.spec`.
    pub echo: pb::SimulationSpec,
}

impl SimulationSpec {
    /// Whether the run may fail nodes: it has disruptions, or replays the recording's.
    pub fn has_disruptions(&self) -> bool {
        !self.disruptions.is_empty() || self.replay_recorded_failures
    }

    pub fn from_proto(spec: Option<pb::SimulationSpec>) -> Result<Self, SpecError> {
        let spec = spec.ok_or_else(|| invalid("spec", "is required"))?;
        let source = match &spec.trace_source {
            Some(pb::simulation_spec::TraceSource::StoredTrace(stored)) => {
                TraceSource::Stored(stored.clone())
            }
            Some(pb::simulation_spec::TraceSource::TraceFile(bytes)) if bytes.is_empty() => {
                return Err(invalid("spec.trace_file", "is empty"));
            }
            Some(pb::simulation_spec::TraceSource::TraceFile(bytes)) => {
                TraceSource::Uploaded(bytes.clone())
            }
            None => {
                return Err(invalid(
                    "spec.trace_source",
                    "set stored_trace or trace_file",
                ));
            }
        };
        let speed = match spec.speed {
            0.0 => 1.0,
            speed if (MIN_SPEED..=MAX_SPEED).contains(&speed) => speed,
            speed => {
                return Err(invalid(
                    "spec.speed",
                    format!("must be between {MIN_SPEED} and {MAX_SPEED} (0 means 1), got {speed}"),
                ));
            }
        };
        let duration = spec
            .duration
            .map(|d| {
                Duration::try_from(d)
                    .ok()
                    .filter(|d| !d.is_zero() && *d <= MAX_DURATION)
                    .ok_or_else(|| {
                        invalid(
                            "spec.duration",
                            format!(
                                "must be positive and at most {} days",
                                MAX_DURATION.as_secs() / 86_400
                            ),
                        )
                    })
            })
            .transpose()?;
        let namespace_prefix = match spec.namespace_prefix.as_str() {
            "" => DEFAULT_NAMESPACE_PREFIX.to_owned(),
            prefix if prefix.len() <= MAX_PREFIX_LEN && is_dns_label(prefix) => prefix.to_owned(),
            prefix => {
                return Err(invalid(
                    "spec.namespace_prefix",
                    format!(
                        "{prefix:?} must be a DNS label (lowercase letters, digits, '-') of at most {MAX_PREFIX_LEN} characters"
                    ),
                ));
            }
        };
        let on_error = match pb::OnErrorPolicy::try_from(spec.on_error) {
            Ok(pb::OnErrorPolicy::Stop) => OnError::Stop,
            Ok(pb::OnErrorPolicy::Continue | pb::OnErrorPolicy::Unspecified) => OnError::Continue,
            Err(_) => {
                return Err(invalid(
                    "spec.on_error",
                    format!("unknown policy {}", spec.on_error),
                ));
            }
        };
        let replicas = pb::ReplicaSource::try_from(spec.replicas).map_err(|_| {
            invalid(
                "spec.replicas",
                format!("unknown replica source {}", spec.replicas),
            )
        })?;
        let node_groups = node_groups(&spec.node_groups)?;
        // Checked first: with NodePools alone, "not both" names the mistake, where "needs a
        // deployment group" would send the user to add one.
        if spec.enable_autoscaler && node_groups.iter().any(NodeGroup::is_karpenter) {
            return Err(invalid(
                "spec.enable_autoscaler",
                "a simulation runs one node autoscaler: cluster-autoscaler (enable_autoscaler) \
                 or Karpenter (karpenter node groups), not both",
            ));
        }
        if spec.enable_autoscaler
            && !node_groups
                .iter()
                .any(|g| matches!(g, NodeGroup::Deployment { .. }))
        {
            return Err(invalid(
                "spec.enable_autoscaler",
                "needs at least one deployment node group for cluster-autoscaler to resize",
            ));
        }
        let provisioning = spec
            .provisioning
            .as_ref()
            .map(|given| provisioning(given, &node_groups))
            .transpose()?;
        let zones: Vec<Option<String>> = node_groups.iter().map(NodeGroup::zone).collect();
        let facts: Vec<GroupFacts<'_>> = node_groups
            .iter()
            .zip(&zones)
            .map(|(group, zone)| GroupFacts {
                name: group.name(),
                zone: zone.as_deref(),
                kind: match group {
                    NodeGroup::PoolManaged { .. } => GroupKind::Pool,
                    NodeGroup::Deployment { .. } => GroupKind::Autoscaled,
                    NodeGroup::Karpenter { .. } => GroupKind::NodePool,
                },
                size: match group {
                    NodeGroup::PoolManaged { count, .. } => u32::try_from(*count).ok(),
                    NodeGroup::Deployment { .. } | NodeGroup::Karpenter { .. } => None,
                },
            })
            .collect();
        let disruptions = super::disruptions::from_proto(&spec.disruptions, &facts)
            .map_err(|refused| invalid(refused.field, refused.problem))?;
        let explain = spec
            .explain
            .as_ref()
            .map(super::explain::ExplainScope::from_proto)
            .transpose()
            .map_err(|refused| invalid(refused.field, refused.problem))?;
        let mut echo = spec.clone();
        if matches!(source, TraceSource::Uploaded(_)) {
            echo.trace_source = Some(pb::simulation_spec::TraceSource::TraceFile(Vec::new()));
        }
        echo.speed = speed;
        echo.namespace_prefix = namespace_prefix.clone();
        Ok(Self {
            source,
            speed,
            duration,
            namespace_prefix,
            on_error,
            node_groups,
            enable_autoscaler: spec.enable_autoscaler,
            reschedule_bare_pods: spec.reschedule_bare_pods,
            settle_start: spec.settle_start,
            provisioning,
            replicas,
            disruptions,
            disruption_seed: spec.disruption_seed,
            replay_recorded_failures: spec.replay_recorded_failures,
            explain,
            configuration: spec
                .configuration
                .filter(|c| *c != env::Configuration::default()),
            echo,
        })
    }

    /// What the environment is asked to run the simulation with; `workload_autoscaling`: the
    /// run's HPAs decide replica counts (`domain::autoscaled` resolves it with the trace).
    pub fn environment_run(&self, workload_autoscaling: bool) -> env::Run {
        env::Run {
            configuration: self.configuration.clone(),
            speed: self.speed,
            autoscaler: self.enable_autoscaler,
            workload_autoscaling,
            karpenter: self.node_groups.iter().any(NodeGroup::is_karpenter),
            node_lifecycle: self.has_disruptions(),
        }
    }
}

/// The given model, parsed and checked; one that names a group the spec lacks is refused.
fn provisioning(given: &pb::ProvisioningModel, groups: &[NodeGroup]) -> Result<Model, SpecError> {
    let source = if given.source.is_empty() {
        "the provisioning model"
    } else {
        given.source.as_str()
    };
    let refused =
        |error: ksim_provisioning::ModelError| invalid("spec.provisioning", error.to_string());
    let mut model = Model::parse(source, &given.yaml).map_err(refused)?;
    model
        .check_groups(groups.iter().map(NodeGroup::name))
        .map_err(refused)?;
    if model.source.is_empty() {
        model.source = source.to_owned();
    }
    Ok(model)
}

fn node_groups(groups: &[pb::NodeGroupSpec]) -> Result<Vec<NodeGroup>, SpecError> {
    let mut names = BTreeSet::new();
    let mut valid = Vec::with_capacity(groups.len());
    for (index, group) in groups.iter().enumerate() {
        let field = format!("spec.node_groups[{index}]");
        let group = match &group.kind {
            Some(pb::node_group_spec::Kind::PoolManaged(pool)) => {
                if pool.count < 0 {
                    return Err(invalid(
                        format!("{field}.pool_managed.count"),
                        format!("must not be negative, got {}", pool.count),
                    ));
                }
                // The pool's own limits: refused here, before the run creates anything.
                if !fits_a_group(pool.count) {
                    return Err(invalid(
                        format!("{field}.pool_managed.count"),
                        format!(
                            "must be at most {MAX_NODES_PER_GROUP} (nodes per group), got {}",
                            pool.count
                        ),
                    ));
                }
                if pool.name.len() > MAX_POOL_GROUP_NAME_LEN {
                    return Err(invalid(
                        format!("{field}.name"),
                        format!(
                            "{:?} is {} characters long; a pool-managed group's name has at most \
                             {MAX_POOL_GROUP_NAME_LEN}",
                            pool.name,
                            pool.name.len()
                        ),
                    ));
                }
                NodeGroup::PoolManaged {
                    name: pool.name.clone(),
                    skeleton_yaml: pool.node_skeleton_yaml.clone(),
                    count: pool.count,
                }
            }
            Some(pb::node_group_spec::Kind::Deployment(d)) => {
                if d.min_size < 0 || d.max_size < 1 || d.min_size > d.max_size {
                    return Err(invalid(
                        format!("{field}.deployment"),
                        format!(
                            "need 0 <= min_size <= max_size and max_size >= 1, got min {} max {}",
                            d.min_size, d.max_size
                        ),
                    ));
                }
                if !fits_a_group(d.max_size) {
                    return Err(invalid(
                        format!("{field}.deployment.max_size"),
                        format!(
                            "must be at most {MAX_NODES_PER_GROUP} (nodes per group), got {}",
                            d.max_size
                        ),
                    ));
                }
                if !(d.min_size..=d.max_size).contains(&d.initial_size) {
                    return Err(invalid(
                        format!("{field}.deployment.initial_size"),
                        format!(
                            "{} is outside min_size {} and max_size {}",
                            d.initial_size, d.min_size, d.max_size
                        ),
                    ));
                }
                NodeGroup::Deployment {
                    name: d.name.clone(),
                    skeleton_yaml: d.node_skeleton_yaml.clone(),
                    min_size: d.min_size,
                    max_size: d.max_size,
                    initial_size: d.initial_size,
                }
            }
            Some(pb::node_group_spec::Kind::Karpenter(pool)) => {
                let (name, nodepool) = super::nodepool::parse(&pool.nodepool_yaml)
                    .map_err(|why| invalid(format!("{field}.karpenter.nodepool_yaml"), why))?;
                NodeGroup::Karpenter { name, nodepool }
            }
            None => {
                return Err(invalid(field, "set pool_managed, deployment or karpenter"));
            }
        };
        let name = group.name();
        if !is_dns_label(name) {
            return Err(invalid(
                format!("{field}.name"),
                format!("{name:?} is not a DNS label"),
            ));
        }
        if !names.insert(name.to_owned()) {
            return Err(invalid(
                format!("{field}.name"),
                format!("{name:?} is used twice"),
            ));
        }
        if let Some(skeleton) = group.skeleton_yaml() {
            NodeSkeleton::from_yaml(skeleton).map_err(|error| {
                invalid(
                    format!("{field}.node_skeleton_yaml"),
                    format!("group {name}: {error}"),
                )
            })?;
        }
        valid.push(group);
    }
    Ok(valid)
}

/// Whether a group of `nodes` nodes stays within the pool's limit.
fn fits_a_group(nodes: i32) -> bool {
    u32::try_from(nodes).is_ok_and(|nodes| nodes <= MAX_NODES_PER_GROUP)
}

/// RFC 1123 label: what Kubernetes accepts as a namespace or label value here.
pub use ksim_nodes::names::is_dns_label;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const SKELETON: &str = include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml");

    fn uploaded() -> pb::SimulationSpec {
        pb::SimulationSpec {
            trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(vec![1, 2, 3])),
            ..Default::default()
        }
    }

    fn pool_group(name: &str, count: i32) -> pb::NodeGroupSpec {
        pb::NodeGroupSpec {
            kind: Some(pb::node_group_spec::Kind::PoolManaged(
                pb::PoolManagedNodeGroup {
                    name: name.to_owned(),
                    node_skeleton_yaml: SKELETON.to_owned(),
                    count,
                },
            )),
        }
    }

    fn deployment_group(name: &str) -> pb::NodeGroupSpec {
        pb::NodeGroupSpec {
            kind: Some(pb::node_group_spec::Kind::Deployment(
                pb::DeploymentNodeGroup {
                    name: name.to_owned(),
                    node_skeleton_yaml: SKELETON.to_owned(),
                    min_size: 0,
                    max_size: 3,
                    initial_size: 0,
                },
            )),
        }
    }

    fn error(spec: pb::SimulationSpec) -> SpecError {
        SimulationSpec::from_proto(Some(spec)).unwrap_err()
    }

    #[test]
    fn defaults_fill_in_and_uploaded_bytes_are_not_echoed() {
        let spec = SimulationSpec::from_proto(Some(uploaded())).unwrap();
        assert_eq!(spec.speed, 1.0);
        assert_eq!(spec.namespace_prefix, "virtual");
        assert_eq!(spec.on_error, OnError::Continue);
        assert_eq!(spec.source, TraceSource::Uploaded(vec![1, 2, 3]));
        assert_eq!(
            spec.echo.trace_source,
            Some(pb::simulation_spec::TraceSource::TraceFile(Vec::new()))
        );
    }

    #[test]
    fn a_provisioning_model_is_checked_against_the_groups() {
        let given = |yaml: &str| pb::SimulationSpec {
            node_groups: vec![pool_group("a", 1)],
            provisioning: Some(pb::ProvisioningModel {
                source: "model.yaml".into(),
                yaml: yaml.into(),
            }),
            ..uploaded()
        };
        let spec =
            SimulationSpec::from_proto(Some(given("name: m\nnodes: {groups: {a: {ready: 5s}}}")))
                .unwrap();
        let model = spec.provisioning.unwrap();
        assert_eq!(
            (model.name.as_str(), model.source.as_str()),
            ("m", "model.yaml")
        );
        for (yaml, says) in [
            (
                "name: m\nnodes: {groups: {b: {ready: 5s}}}",
                "nodes.groups.b: the run has no node group b (it has: a)",
            ),
            (
                "name: m\nnodes: {default: {ready: {p50: 1m, p90: 10s}}}",
                "nodes.default.ready: p90 (10s) is shorter than p50 (1m)",
            ),
            ("name: m\nnodes: {default: {ready: -1s}}", "model.yaml: "),
        ] {
            let error = error(given(yaml));
            assert_eq!(error.field, "spec.provisioning");
            assert!(error.problem.contains(says), "{yaml}: {}", error.problem);
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(
            error(pb::SimulationSpec::default()).field,
            "spec.trace_source"
        );
        assert_eq!(
            error(pb::SimulationSpec {
                speed: -2.0,
                ..uploaded()
            })
            .field,
            "spec.speed"
        );
        for speed in [f64::NAN, f64::INFINITY, 1e308, 1e20, 1000.5, 0.0001] {
            let error = error(pb::SimulationSpec {
                speed,
                ..uploaded()
            });
            assert_eq!(error.field, "spec.speed", "{speed}");
            assert!(error.problem.contains("between 0.001 and 1000"), "{error}");
        }
        for speed in [MIN_SPEED, MAX_SPEED] {
            let spec = pb::SimulationSpec {
                speed,
                ..uploaded()
            };
            assert_eq!(SimulationSpec::from_proto(Some(spec)).unwrap().speed, speed);
        }
        for seconds in [0, -1, 365 * 24 * 3600 + 1, i64::MAX] {
            let spec = pb::SimulationSpec {
                duration: Some(prost_types::Duration { seconds, nanos: 0 }),
                ..uploaded()
            };
            assert_eq!(error(spec).field, "spec.duration", "{seconds}");
        }
        assert_eq!(
            error(pb::SimulationSpec {
                namespace_prefix: "Bad_Prefix".to_owned(),
                ..uploaded()
            })
            .field,
            "spec.namespace_prefix"
        );
        assert_eq!(
            error(pb::SimulationSpec {
                node_groups: vec![pool_group("a", -1)],
                ..uploaded()
            })
            .field,
            "spec.node_groups[0].pool_managed.count"
        );
        assert_eq!(
            error(pb::SimulationSpec {
                node_groups: vec![pool_group("a", 1), pool_group("a", 2)],
                ..uploaded()
            })
            .field,
            "spec.node_groups[1].name"
        );
        assert_eq!(
            error(pb::SimulationSpec {
                enable_autoscaler: true,
                node_groups: vec![pool_group("a", 1)],
                ..uploaded()
            })
            .field,
            "spec.enable_autoscaler"
        );
    }

    #[test]
    fn a_run_of_nodepools_asks_for_karpenter_and_not_for_cluster_autoscaler_too() {
        let nodepool = pb::NodeGroupSpec {
            kind: Some(pb::node_group_spec::Kind::Karpenter(
                pb::KarpenterNodePool {
                    nodepool_yaml: "apiVersion: karpenter.sh/v1\nkind: NodePool\n\
                                metadata: {name: general}\nspec: {}\n"
                        .to_owned(),
                },
            )),
        };
        let spec = SimulationSpec::from_proto(Some(pb::SimulationSpec {
            node_groups: vec![pool_group("fixed", 1), nodepool.clone()],
            ..uploaded()
        }))
        .unwrap();
        let run = spec.environment_run(false);
        assert!(run.karpenter && !run.autoscaler);
        let fixed = SimulationSpec::from_proto(Some(pb::SimulationSpec {
            node_groups: vec![pool_group("fixed", 1)],
            ..uploaded()
        }))
        .unwrap();
        assert!(!fixed.environment_run(false).karpenter);

        for node_groups in [
            vec![nodepool.clone(), deployment_group("seats")],
            vec![nodepool],
        ] {
            let both = error(pb::SimulationSpec {
                enable_autoscaler: true,
                node_groups,
                ..uploaded()
            });
            assert_eq!(both.field, "spec.enable_autoscaler");
            assert!(both.problem.contains("not both"), "{}", both.problem);
        }
    }

    #[test]
    fn groups_past_the_pools_limits_are_refused_before_anything_is_created() {
        let at_limit = i32::try_from(MAX_NODES_PER_GROUP).unwrap();
        assert!(
            SimulationSpec::from_proto(Some(pb::SimulationSpec {
                node_groups: vec![pool_group(&"a".repeat(MAX_POOL_GROUP_NAME_LEN), at_limit)],
                ..uploaded()
            }))
            .is_ok()
        );
        let too_many = error(pb::SimulationSpec {
            node_groups: vec![pool_group("ok", 1), pool_group("m5", 1_000_000)],
            ..uploaded()
        });
        assert_eq!(too_many.field, "spec.node_groups[1].pool_managed.count");
        assert!(
            too_many.problem.contains("at most 10000") && too_many.problem.contains("1000000"),
            "{too_many}"
        );
        let long_name = error(pb::SimulationSpec {
            node_groups: vec![pool_group(&"a".repeat(MAX_POOL_GROUP_NAME_LEN + 1), 1)],
            ..uploaded()
        });
        assert_eq!(long_name.field, "spec.node_groups[0].name");
        let deployment = pb::NodeGroupSpec {
            kind: Some(pb::node_group_spec::Kind::Deployment(
                pb::DeploymentNodeGroup {
                    name: "ca".to_owned(),
                    node_skeleton_yaml: SKELETON.to_owned(),
                    min_size: 0,
                    max_size: at_limit + 1,
                    initial_size: 1,
                },
            )),
        };
        assert_eq!(
            error(pb::SimulationSpec {
                node_groups: vec![deployment],
                ..uploaded()
            })
            .field,
            "spec.node_groups[0].deployment.max_size"
        );
    }

    #[test]
    fn deployment_sizes_must_nest_and_skeletons_must_parse() {
        let deployment = |min, max, initial, skeleton: &str| pb::SimulationSpec {
            node_groups: vec![pb::NodeGroupSpec {
                kind: Some(pb::node_group_spec::Kind::Deployment(
                    pb::DeploymentNodeGroup {
                        name: "ca".to_owned(),
                        node_skeleton_yaml: skeleton.to_owned(),
                        min_size: min,
                        max_size: max,
                        initial_size: initial,
                    },
                )),
            }],
            ..uploaded()
        };
        assert!(SimulationSpec::from_proto(Some(deployment(1, 5, 2, SKELETON))).is_ok());
        assert_eq!(
            error(deployment(1, 5, 9, SKELETON)).field,
            "spec.node_groups[0].deployment.initial_size"
        );
        assert_eq!(
            error(deployment(3, 2, 2, SKELETON)).field,
            "spec.node_groups[0].deployment"
        );
        let bad = error(deployment(1, 5, 2, "kind: [unclosed"));
        assert_eq!(bad.field, "spec.node_groups[0].node_skeleton_yaml");
        assert!(bad.problem.contains("group ca"), "{bad}");
    }
}
