//! The mesh on the real control plane, in this process: the virtual node pool, the tracer store
//! and the driver, each started as its binary starts it (`runtime::start`) on a port of its own.
#![allow(dead_code)]

use std::{num::NonZeroUsize, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Namespace;
use ksim_driver::{config::Settings, mesh::Mesh, runtime as driver};
use ksim_grpc::ServeArgs;
pub use ksim_localenv::fixtures::Workload;
use ksim_localenv::{ControlPlane, wait};
use ksim_proto::ksim::driver::v1::{self as pb, driver_client::DriverClient};
use ksim_tracer::{config::TracerArgs, runtime as tracer};
use ksim_vnode::{config::PoolConfig, pool::Pool, runtime as vnode};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use tonic::transport::Channel;

pub const DEADLINE: Duration = Duration::from_secs(180);
pub const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;
pub const SEATS_NAMESPACE: &str = "ksim-system";

pub struct TestMesh {
    pub env: ControlPlane,
    pub client: Client,
    pub pool: Arc<Pool>,
    pub driver: DriverClient<Channel>,
    pub driver_url: String,
    pub pool_url: String,
    pub tracer_url: String,
    _services: (vnode::Service, tracer::Service, driver::Service),
    /// The pool's metrics API, when the mesh serves one.
    _metrics_api: Option<ksim_vnode::metrics_api::MetricsApiServer>,
    _data: tempfile::TempDir,
}

/// What a test needs of the mesh beyond the defaults.
#[derive(Debug, Default)]
pub struct MeshOptions<'a> {
    /// The driver talks to the apiserver as (user, groups) instead of the admin.
    pub identity: Option<(&'a str, &'a [&'a str])>,
    /// Extra kube-controller-manager flags.
    pub controller_manager_args: &'a [&'a str],
    /// The pool serves `metrics.k8s.io` behind the aggregation layer, as `ksim up` runs it.
    pub metrics_api: bool,
}

pub async fn start() -> TestMesh {
    start_with(MeshOptions::default()).await
}

/// The mesh with the driver talking to the apiserver as `identity` (user, groups) instead of
/// the admin.
pub async fn start_as(identity: Option<(&str, &[&str])>) -> TestMesh {
    start_with(MeshOptions {
        identity,
        ..MeshOptions::default()
    })
    .await
}

pub async fn start_with(options: MeshOptions<'_>) -> TestMesh {
    let identity = options.identity;
    ksim_e2e::init_logs();
    let mut builder = ControlPlane::builder();
    for arg in options.controller_manager_args {
        builder = builder.controller_manager_arg(*arg);
    }
    let env = builder.start().await.unwrap();
    let client = env.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let system =
        serde_json::from_value(serde_json::json!({"metadata": {"name": SEATS_NAMESPACE}})).unwrap();
    namespaces
        .create(&PostParams::default(), &system)
        .await
        .unwrap();

    let pool = vnode::start(
        client.clone(),
        PoolConfig {
            namespace: SEATS_NAMESPACE.to_owned(),
            job_duration_ms: 3000,
            ..PoolConfig::default()
        },
        ServeArgs::ephemeral(),
    )
    .await
    .unwrap();

    let metrics_api = if options.metrics_api {
        let ip = ksim_kube::aggregation::advertise_address()
            .expect("a non-loopback IPv4 address for the metrics API");
        let config = ksim_vnode::config::MetricsApiConfig {
            addr: Some(std::net::SocketAddr::new(ip, 0)),
            ..Default::default()
        };
        let server = ksim_vnode::metrics_api::start_if_enabled(
            client.clone(),
            pool.pool.clone(),
            "e2e",
            SEATS_NAMESPACE,
            &config,
        )
        .await
        .unwrap();
        let api_services: Api<
            k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
        > = Api::all(client.clone());
        wait::until("the metrics API to be Available", DEADLINE, || async {
            let api_service = api_services
                .get("v1beta1.metrics.k8s.io")
                .await
                .map_err(|e| e.to_string())?;
            ksim_kube::aggregation::available(&api_service)
        })
        .await
        .unwrap();
        server
    } else {
        None
    };

    let data = tempfile::tempdir().unwrap();
    let mut tracer_args = TracerArgs::with_data_dir(data.path()).unwrap();
    tracer_args.retry_interval = Duration::from_secs(1);
    let tracer = tracer::start(
        ksim_kube::KubeArgs::file(env.kubeconfig_path())
            .connect()
            .await
            .unwrap(),
        &tracer_args,
        ServeArgs::ephemeral(),
    )
    .await
    .unwrap();

    let driver_client = match identity {
        Some((user, groups)) => env.client_as(user, groups).await.unwrap(),
        None => client.clone(),
    };
    let driver = driver::start(
        driver::Clients {
            // No test through this harness interrupts spot nodes: the one client does.
            evictions: driver_client.clone(),
            client: driver_client,
        },
        Mesh::new(&pool.url(), Some(&tracer.url()), None, None).unwrap(),
        Settings {
            namespace: SEATS_NAMESPACE.to_owned(),
            report_dir: data.path().join("reports"),
            lease_duration: Duration::from_secs(15),
            max_in_flight: NonZeroUsize::new(8).unwrap(),
            keep_finished: 32,
            ready_deadline: Duration::from_secs(120),
            cleanup_deadline: Duration::from_secs(180),
        },
        ServeArgs::ephemeral(),
    )
    .await
    .unwrap();
    TestMesh {
        client,
        pool: pool.pool.clone(),
        driver: DriverClient::connect(driver.url()).await.unwrap(),
        driver_url: driver.url(),
        pool_url: pool.url(),
        tracer_url: tracer.url(),
        env,
        _services: (pool, tracer, driver),
        _metrics_api: metrics_api,
        _data: data,
    }
}

/// The provisioning model without delays: nodes and pods come at once.
pub fn instant_provisioning() -> pb::ProvisioningModel {
    pb::ProvisioningModel {
        source: "built in".to_owned(),
        yaml: "name: instant\n".to_owned(),
    }
}

pub fn pool_group(name: &str, count: i32) -> pb::NodeGroupSpec {
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

impl TestMesh {
    /// Starts `spec`; one that names no provisioning model runs the instant one: these tests
    /// are about the replay, and the default (the published model) would delay every pod.
    pub async fn start_simulation(
        &mut self,
        mut spec: pb::SimulationSpec,
    ) -> Result<pb::Simulation, tonic::Status> {
        spec.provisioning.get_or_insert_with(instant_provisioning);
        self.driver
            .start_simulation(pb::StartSimulationRequest { spec: Some(spec) })
            .await
            .map(|r| r.into_inner().simulation.unwrap())
    }

    pub async fn cancel(&mut self, id: &str) -> pb::Simulation {
        self.driver
            .cancel_simulation(pb::CancelSimulationRequest { id: id.to_owned() })
            .await
            .unwrap()
            .into_inner()
            .simulation
            .unwrap()
    }

    /// Follows WatchSimulation to its last message and returns the simulation then.
    pub async fn until_done(&mut self, id: &str) -> pb::Simulation {
        let mut stream = self
            .driver
            .watch_simulation(pb::WatchSimulationRequest {
                id: id.to_owned(),
                interval: None,
            })
            .await
            .unwrap()
            .into_inner();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        while let Some(message) = tokio::time::timeout_at(deadline, stream.message())
            .await
            .expect("the simulation ended in time")
            .unwrap()
        {
            let state = message.progress.unwrap().state();
            assert_ne!(state, pb::SimulationState::Unspecified);
        }
        self.simulation(id).await
    }

    pub async fn simulation(&mut self, id: &str) -> pb::Simulation {
        self.driver
            .get_simulation(pb::GetSimulationRequest { id: id.to_owned() })
            .await
            .unwrap()
            .into_inner()
            .simulation
            .unwrap()
    }

    pub async fn report(&mut self, id: &str) -> pb::Report {
        self.driver
            .get_report(pb::GetReportRequest { id: id.to_owned() })
            .await
            .unwrap()
            .into_inner()
            .report
            .unwrap()
    }

    /// Waits until the state is `state`.
    pub async fn until_state(&self, id: &str, state: pb::SimulationState) {
        until_state_of(&self.driver, id, state).await;
    }

    /// Asserts that nothing of simulation `id` is left: no namespace, no root, no pods, no pool
    /// group of its own.
    pub async fn assert_nothing_left(&self, id: &str, groups: &[&str]) {
        let label = format!("ksim.io/simulation={id}");
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let left = namespaces
            .list(&ListParams::default().labels(&label))
            .await
            .unwrap();
        assert!(
            left.items.is_empty(),
            "namespaces left: {:?}",
            names(&left.items)
        );
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(self.client.clone());
        let left = pods
            .list(&ListParams::default().labels(&label))
            .await
            .unwrap();
        assert!(left.items.is_empty(), "pods left: {:?}", names(&left.items));
        let roots: Api<kube::api::DynamicObject> = Api::all_with(
            self.client.clone(),
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("ksim.io", "v1alpha1", "SimulationRoot"),
                "simulationroots",
            ),
        );
        let left = roots
            .list(&ListParams::default().labels(&label))
            .await
            .unwrap();
        assert!(left.items.is_empty(), "roots left");
        for group in groups {
            assert!(self.pool.group(group).is_err(), "pool group {group} left");
        }
    }
}

/// Waits until the simulation `id` the driver behind `client` runs is in `state`; returns it.
pub async fn until_state_of(
    client: &DriverClient<Channel>,
    id: &str,
    state: pb::SimulationState,
) -> pb::Simulation {
    until_simulation(client, id, &format!("{state:?}"), |s| s == state).await
}

/// Waits until the simulation `id` is in a state `accept` takes (`what` names it); returns it.
pub async fn until_simulation(
    client: &DriverClient<Channel>,
    id: &str,
    what: &str,
    accept: impl Fn(pb::SimulationState) -> bool + Copy,
) -> pb::Simulation {
    until_simulation_is(client, id, what, |simulation| accept(simulation.state())).await
}

/// Waits until `accept` takes the simulation `id` as the driver reports it (its state, its
/// progress); `what` names the wait. Returns it.
pub async fn until_simulation_is(
    client: &DriverClient<Channel>,
    id: &str,
    what: &str,
    accept: impl Fn(&pb::Simulation) -> bool + Copy,
) -> pb::Simulation {
    wait::until(&format!("simulation {id} {what}"), DEADLINE, || {
        let mut client = client.clone();
        async move {
            let simulation = client
                .get_simulation(pb::GetSimulationRequest { id: id.to_owned() })
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .simulation
                .unwrap();
            let applied = simulation.progress.as_ref().map_or(0, |p| p.events_applied);
            accept(&simulation)
                .then_some(simulation.clone())
                .ok_or(format!(
                    "{:?}, {applied} events applied {}",
                    simulation.state(),
                    simulation.error_message
                ))
        }
    })
    .await
    .unwrap()
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .map(|i| i.meta().name.clone().unwrap_or_default())
        .collect()
}

/// One object of a synthetic trace: kind (`apps/v1.Deployment`), namespace, name, JSON.
pub type TraceObject = (&'static str, &'static str, &'static str, serde_json::Value);

/// A ksim trace file whose events are at the given offsets (ms) from its start; the window
/// ends at `end_ms`.
pub fn trace_file(events: Vec<(i64, Vec<TraceObject>)>, end_ms: i64) -> Vec<u8> {
    trace_file_with_lifecycles(events, Vec::new(), end_ms)
}

/// As [`trace_file`], with pod lifecycles whose start and end are offsets (ms) from the start
/// (an end of 0 stays 0: the pod had not ended).
pub fn trace_file_with_lifecycles(
    events: Vec<(i64, Vec<TraceObject>)>,
    lifecycles: Vec<ksim_trace::pb::PodLifecycle>,
    end_ms: i64,
) -> Vec<u8> {
    let events = events
        .into_iter()
        .map(|(offset, applied)| (offset, applied, Vec::new()))
        .collect();
    trace_file_with_deletes(events, lifecycles, end_ms)
}

/// As [`trace_file_with_lifecycles`], each event with the objects it deletes too.
pub fn trace_file_with_deletes(
    events: Vec<(i64, Vec<TraceObject>, Vec<TraceObject>)>,
    lifecycles: Vec<ksim_trace::pb::PodLifecycle>,
    end_ms: i64,
) -> Vec<u8> {
    trace_file_with_usage(events, lifecycles, Vec::new(), 0, end_ms)
}

/// As [`trace_file_with_deletes`], with usage samples (times are offsets, ms) read every
/// `usage_interval_ms`.
pub fn trace_file_with_usage(
    events: Vec<(i64, Vec<TraceObject>, Vec<TraceObject>)>,
    lifecycles: Vec<ksim_trace::pb::PodLifecycle>,
    usage: Vec<ksim_trace::pb::UsageSample>,
    usage_interval_ms: i64,
    end_ms: i64,
) -> Vec<u8> {
    use ksim_trace::pb;
    let objects = |objects: Vec<TraceObject>| -> Vec<pb::TraceObject> {
        objects
            .into_iter()
            .map(|(kind, namespace, name, object)| pb::TraceObject {
                gvk: Some(ksim_trace::gvk::parse(kind).unwrap()),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                object_json: serde_json::to_vec(&object).unwrap(),
            })
            .collect()
    };
    let start = 1_700_000_000_000;
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        start_time: Some(ksim_trace::time::timestamp(start)),
        end_time: Some(ksim_trace::time::timestamp(start + end_ms)),
        created_by: "ksim-driver tests".to_owned(),
        tracer_config: (usage_interval_ms > 0).then(|| pb::TracerConfig {
            usage_recording: pb::UsageRecording::Recorded as i32,
            usage_interval_ms,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut writer = ksim_trace::TraceWriter::new(Vec::new(), &header).unwrap();
    for (offset, applied, deleted) in events {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: start + offset,
                applied: objects(applied),
                deleted: objects(deleted),
            })
            .unwrap();
    }
    for lifecycle in lifecycles {
        let ended = lifecycle.end_ms != 0;
        writer
            .write_lifecycle(&pb::PodLifecycle {
                start_ms: start + lifecycle.start_ms,
                end_ms: if ended { start + lifecycle.end_ms } else { 0 },
                ..lifecycle
            })
            .unwrap();
    }
    for sample in usage {
        writer
            .write_usage(&pb::UsageSample {
                timestamp_ms: start + sample.timestamp_ms,
                ..sample
            })
            .unwrap();
    }
    writer.finish().unwrap().0
}

pub fn uploaded(file: Vec<u8>) -> Option<pb::simulation_spec::TraceSource> {
    Some(pb::simulation_spec::TraceSource::TraceFile(file))
}

pub fn config_map(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}
