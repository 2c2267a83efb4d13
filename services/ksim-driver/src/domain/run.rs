//! A run resolved once, when the driver accepts it: the spec with what the recording adds to
//! it, the trace, who decides replica counts, what the environment is asked to run and the
//! provisioning model. The phases (configure, prepare, the clock, the report) read it; none
//! decides any of it again.

use ksim_proto::ksim::env::v1 as env;
use ksim_provisioning::Model;
use ksim_trace::Trace;

use super::{
    autoscaled::{self, ReplicaSource},
    provisioning::Chosen,
    recorded::recorded_autoscaler,
    spec::SimulationSpec,
};

/// A run as decided at its start.
#[derive(Debug)]
pub struct ResolvedRun {
    /// The spec as given, with the recorded cluster-autoscaler flags added where the run takes
    /// them (see [`ResolvedRun::resolve`]).
    pub spec: SimulationSpec,
    pub trace: Trace,
    /// Who decides the replica counts of scaled workloads, and why.
    pub replicas: autoscaled::Resolved,
    /// What the environment is asked to run the simulation with; `None` without one.
    pub environment: Option<env::Run>,
    /// The provisioning model: given, learned from the trace, or the published default.
    pub provisioning: Chosen,
}

impl ResolvedRun {
    /// Resolves `spec` against `trace`. With an environment and the autoscaler on,
    /// cluster-autoscaler runs as the recorded cluster ran it unless the spec gives its flags.
    /// `learn` teaches a model from the trace's recording (`provisioning::learn`).
    pub fn resolve(
        mut spec: SimulationSpec,
        trace: Trace,
        has_environment: bool,
        learn: impl FnOnce(&Trace) -> Option<Model>,
    ) -> Self {
        let given = spec
            .configuration
            .as_ref()
            .is_some_and(|c| c.recorded_autoscaler.is_some());
        if has_environment
            && spec.enable_autoscaler
            && !given
            && let Some(recorded) = recorded_autoscaler(&trace)
        {
            spec.configuration
                .get_or_insert_with(Default::default)
                .recorded_autoscaler = Some(recorded);
        }
        let replicas = autoscaled::resolve(spec.replicas, &trace);
        let environment =
            has_environment.then(|| spec.environment_run(replicas.source == ReplicaSource::Hpa));
        let provisioning = Chosen::of(spec.provisioning.as_ref(), &trace, learn);
        Self {
            spec,
            trace,
            replicas,
            environment,
            provisioning,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use ksim_proto::ksim::driver::v1 as pb;

    use super::*;
    use crate::domain::{
        provisioning::Origin,
        recorded::tests::{kube_system_deployment, trace_applying},
    };

    const SKELETON: &str = include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml");

    /// A spec with one group for cluster-autoscaler to resize.
    fn spec(enable_autoscaler: bool, replicas: pb::ReplicaSource) -> SimulationSpec {
        let group = pb::NodeGroupSpec {
            kind: Some(pb::node_group_spec::Kind::Deployment(
                pb::DeploymentNodeGroup {
                    name: "ca".to_owned(),
                    node_skeleton_yaml: SKELETON.to_owned(),
                    min_size: 0,
                    max_size: 3,
                    initial_size: 0,
                },
            )),
        };
        SimulationSpec::from_proto(Some(pb::SimulationSpec {
            trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(vec![1])),
            enable_autoscaler,
            replicas: replicas.into(),
            node_groups: vec![group],
            ..Default::default()
        }))
        .unwrap()
    }

    /// A trace whose recording ran cluster-autoscaler with one flag.
    fn trace_with_ca() -> Trace {
        trace_applying(vec![kube_system_deployment(
            "cluster-autoscaler",
            &["./cluster-autoscaler", "--scale-down-unneeded-time=3m"],
        )])
    }

    #[test]
    fn with_an_environment_the_run_takes_the_recorded_autoscaler_and_asks_for_what_it_resolved() {
        let run = ResolvedRun::resolve(
            spec(true, pb::ReplicaSource::Hpa),
            trace_with_ca(),
            true,
            |_| None,
        );
        let recorded = run
            .spec
            .configuration
            .as_ref()
            .and_then(|c| c.recorded_autoscaler.as_ref())
            .expect("the recorded flags are the run's");
        assert_eq!(recorded.args, ["scale-down-unneeded-time=3m"]);
        let environment = run.environment.expect("an environment is asked");
        // What the environment is asked for is what the run resolved, once.
        assert_eq!(run.replicas.source, ReplicaSource::Hpa);
        assert!(environment.workload_autoscaling && environment.autoscaler);
        assert_eq!(environment.configuration, run.spec.configuration);
        assert_eq!(run.provisioning.origin, Origin::Default);
    }

    #[test]
    fn without_an_environment_or_the_autoscaler_nothing_is_added() {
        for (enable_autoscaler, has_environment) in [(true, false), (false, true)] {
            let run = ResolvedRun::resolve(
                spec(enable_autoscaler, pb::ReplicaSource::Unspecified),
                trace_with_ca(),
                has_environment,
                crate::domain::provisioning::learn,
            );
            assert_eq!(run.spec.configuration, None);
            assert_eq!(run.environment.is_some(), has_environment);
            assert_eq!(run.replicas.source, ReplicaSource::Recorded);
            // A trace without recorded nodes teaches nothing: the named default.
            assert_eq!(run.provisioning.origin, Origin::Default);
        }
    }

    #[test]
    fn a_model_learned_from_the_trace_is_the_runs_when_none_is_given() {
        let learned = Model::published();
        let run = ResolvedRun::resolve(
            spec(false, pb::ReplicaSource::Unspecified),
            trace_with_ca(),
            false,
            |_| Some(learned.clone()),
        );
        assert_eq!(run.provisioning.origin, Origin::Learned);
    }
}
