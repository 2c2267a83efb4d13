//! The configure phase, first of a replay: the environment runs the scheduler and
//! cluster-autoscaler with the run's configuration (a run without one gets the environment's
//! own, restarting nothing that already runs so). It comes first so that no object of the
//! simulation meets the scheduler or CA of another configuration.

use std::time::Duration;

use ksim_trace::time::now_ms;

use super::{cleanup::Created, context::RunContext, prepare::PrepareError};
use crate::domain::run::ResolvedRun;

/// What the configure phase settled for the rest of the run.
#[derive(Debug)]
pub struct Configured {
    /// When the configuration was applied: a CA started before may hold an earlier run's
    /// counts (`domain::nodes_kept`).
    pub applied_at_ms: i64,
    /// How the environment runs the scheduler and CA now; `None` without an environment.
    pub configuration: Option<ksim_report::AppliedConfiguration>,
}

pub async fn configure(
    ctx: &RunContext,
    run: &ResolvedRun,
    created: &mut Created,
) -> Result<Configured, PrepareError> {
    let applied_at_ms = now_ms();
    let configuration = match &run.environment {
        Some(environment) => {
            // Before the call: a request that fails half-way may have restarted a component,
            // and the cleanup must restore the environment's own configuration then too.
            created.configured = true;
            let applied = ctx
                .mesh
                .apply_configuration(environment.clone())
                .await
                .map_err(PrepareError::Configuration)?;
            if let Some(lease) = node_lease(&applied) {
                // Healthy nodes must renew well within the node lifecycle controller's grace
                // period at this speed, as a kubelet's 40 s leases do within its 50 s.
                created.node_lifecycle = true;
                ctx.mesh
                    .set_node_lease(Some(lease))
                    .await
                    .map_err(PrepareError::NodeLease)?;
            }
            Some(applied)
        }
        None => None,
    };
    Ok(Configured {
        applied_at_ms,
        configuration,
    })
}

/// The lease the pool's nodes hold in a run whose node lifecycle controller runs at the
/// replay's speed: four fifths of its grace period as run (a kubelet's 40 s to KCM's 50 s).
/// `None` for a run that left the controller as the environment runs it.
fn node_lease(applied: &ksim_report::AppliedConfiguration) -> Option<Duration> {
    let grace = applied
        .controller_manager_flags
        .iter()
        .find(|flag| flag.name == NODE_MONITOR_GRACE_PERIOD)?;
    let grace = ksim_provisioning::go_duration::parse(&grace.as_run).ok()?;
    Some(grace.mul_f64(0.8))
}

const NODE_MONITOR_GRACE_PERIOD: &str = "node-monitor-grace-period";

#[cfg(test)]
mod tests {
    use ksim_proto::ksim::driver::v1 as pb;

    use ksim_trace::Trace;

    use super::*;
    use crate::{
        config::Settings,
        domain::{provisioning::learn, spec::SimulationSpec},
        mesh::Mesh,
    };

    /// A context whose services are never reached, except an environment at `environment`.
    fn context(environment: Option<&str>) -> RunContext {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        RunContext {
            client: kube::Client::try_from(config.clone()).unwrap(),
            evictions: kube::Client::try_from(config).unwrap(),
            mesh: Mesh::new("http://127.0.0.1:9", None, None, environment).unwrap(),
            settings: Settings {
                namespace: "ksim-system".to_owned(),
                report_dir: std::env::temp_dir(),
                lease_duration: Duration::from_secs(15),
                max_in_flight: std::num::NonZeroUsize::MIN,
                keep_finished: 1,
                ready_deadline: Duration::from_secs(1),
                cleanup_deadline: Duration::from_secs(1),
            },
            metrics: crate::metrics::ReplayMetrics::default(),
        }
    }

    /// A run with nothing to replay, resolved as the driver resolves it with or without an
    /// environment.
    fn run(has_environment: bool) -> ResolvedRun {
        let spec = SimulationSpec::from_proto(Some(pb::SimulationSpec {
            trace_source: Some(pb::simulation_spec::TraceSource::TraceFile(vec![1])),
            ..Default::default()
        }))
        .unwrap();
        let trace = Trace {
            header: ksim_trace::pb::TraceHeader::default(),
            events: Vec::new(),
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            usage: Vec::new(),
            trailer: ksim_trace::pb::TraceTrailer::default(),
        };
        ResolvedRun::resolve(spec, trace, has_environment, learn)
    }

    #[tokio::test]
    async fn without_an_environment_nothing_is_applied() {
        let mut created = Created::default();
        let configured = configure(&context(None), &run(false), &mut created)
            .await
            .unwrap();
        assert_eq!(configured.configuration, None);
        assert!(!created.configured, "the cleanup would restore nothing");
    }

    #[tokio::test]
    async fn an_environment_that_cannot_apply_fails_the_run_and_leaves_it_to_the_cleanup() {
        // Nothing listens on port 9 (discard): the call fails.
        let mut created = Created::default();
        let error = configure(
            &context(Some("http://127.0.0.1:9")),
            &run(true),
            &mut created,
        )
        .await
        .unwrap_err();
        assert!(matches!(error, PrepareError::Configuration(_)), "{error}");
        assert!(
            created.configured,
            "the cleanup must restore the environment's configuration"
        );
    }
}
