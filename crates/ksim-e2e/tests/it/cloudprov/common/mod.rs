//! A real control plane, a real virtual node pool and the cloud provider over a real socket,
//! for the provider's end-to-end tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
};
use ksim_cloudprov::{
    apiserver::ApiCluster,
    provider::{Provider, ScaleEvent, Settings},
    runtime,
};
use ksim_grpc::{Running, ServeArgs, TlsArgs};
/// The fixtures every provider test builds its groups from, through `use super::common::*`.
pub use ksim_localenv::fixtures::{
    C5_XLARGE_TAINTED_SKELETON, M5_LARGE_TAINTED_SKELETON, P3_2XLARGE_DRA_SKELETON,
    P3_2XLARGE_SKELETON, gpu_claim_template, gpu_device_class, seat_deployment,
};
use ksim_localenv::{ClientTls, ControlPlane, pki::CertificateAuthority, wait};
use ksim_nodes::{
    labels::{GROUP_LABEL, RELEASED_ANNOTATION, RETIRING_ANNOTATION},
    seats::SeatDeployment,
};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
    self as pb, cloud_provider_client::CloudProviderClient,
};
use ksim_vnode::{config::PoolConfig, pool::Pool, runtime as vnode};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::broadcast::{Receiver, error::TryRecvError};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub const DEADLINE: Duration = Duration::from_secs(120);
pub const NAMESPACE: &str = "default";

pub struct Env {
    pub control_plane: ControlPlane,
    pub client: Client,
    pub pool: Arc<Pool>,
    pub provider: Arc<Provider<ApiCluster>>,
    _services: (vnode::Service, runtime::Watched),
}

pub async fn start() -> Env {
    start_with(settings()).await
}

/// [`start`], with the provider answering from `settings`.
pub async fn start_with(settings: Settings) -> Env {
    ksim_e2e::init_logs();
    let control_plane = ControlPlane::builder()
        .controller_manager_arg("--node-monitor-period=1s")
        .controller_manager_arg("--node-monitor-grace-period=6s")
        .start()
        .await
        .unwrap();
    let client = control_plane.client();
    let pool = vnode::start(
        client.clone(),
        PoolConfig {
            pool_name: "test".to_owned(),
            namespace: NAMESPACE.to_owned(),
            lease_duration_seconds: 4,
            ..PoolConfig::default()
        },
        ServeArgs::ephemeral(),
    )
    .await
    .unwrap();
    // Served by each test as it needs (plaintext, TLS, restarted), over `provider`.
    let provider = runtime::Watched::start(client.clone(), settings, 100);
    Env {
        control_plane,
        client,
        pool: pool.pool.clone(),
        provider: provider.provider.clone(),
        _services: (pool, provider),
    }
}

pub fn settings() -> Settings {
    Settings {
        pool_name: "test".to_owned(),
        gpu_label: "ksim.io/gpu-type".to_owned(),
        pricing: None,
        group_options: Default::default(),
        settle_timeout: Duration::from_secs(60),
    }
}

/// [`settings`], with GetOptions answering for `group` (a 5 s scale-down-unneeded time, the
/// tests' fast global value too, so the answer itself is what differs between groups).
pub fn settings_answering_options_for(group: &str) -> Settings {
    let mut settings = settings();
    settings.group_options.insert(
        group.to_owned(),
        ksim_cloudprov::domain::options::GroupOptions {
            scale_down_unneeded_time: Some(Duration::from_secs(5)),
            ..Default::default()
        },
    );
    settings
}

/// Whether CA `version` takes MaxNodeStartupTime per group from GetOptions, whose externalgrpc
/// answer has no field for it (kubernetes/autoscaler#10245): from 1.35 on, a group whose
/// options are answered gets 0, so its nodes count as unready, not as starting, from the moment
/// they register, and a scale-up can be repeated before they turn Ready.
pub fn startup_time_comes_from_options(version: &str) -> bool {
    let minor: u32 = version.split('.').nth(1).unwrap().parse().unwrap();
    minor >= 35
}

/// The cluster-autoscaler release `version`, built by deploy/cluster-autoscaler/build.sh.
pub fn release(version: &str) -> ksim_localenv::ClusterAutoscalerBinary {
    ksim_localenv::ClusterAutoscalerBinary::locate_release(version).unwrap_or_else(|e| {
        panic!("{e} (for this release: deploy/cluster-autoscaler/build.sh {version})")
    })
}

/// Serves the provider with `args` (an ephemeral port unless they name one) until the handle
/// drops.
pub async fn serve(provider: Arc<Provider<ApiCluster>>, args: ServeArgs) -> Running {
    runtime::spawn(provider, args).await.unwrap()
}

/// A throwaway PKI for mutual TLS: the provider's serving certificate for `localhost` (the host
/// cluster-autoscaler must dial, as it checks the certificate against its `address`), and a
/// client certificate signed by the same authority.
pub struct MutualTls {
    _dir: tempfile::TempDir,
    pub server: TlsArgs,
    pub client: ClientTls,
}

impl MutualTls {
    pub fn create() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let authority = CertificateAuthority::create(dir.path(), "ksim-cloudprov-ca").unwrap();
        let serving = authority
            .server_cert("server", &["localhost"], &["127.0.0.1".parse().unwrap()])
            .unwrap();
        let client = authority
            .client_cert("client", "cluster-autoscaler", None)
            .unwrap();
        Self {
            server: TlsArgs {
                tls_cert: Some(serving.cert),
                tls_key: Some(serving.key),
                tls_client_ca: Some(authority.cert_file().to_owned()),
            },
            client: ClientTls {
                cert: client.cert,
                key: client.key,
                cacert: authority.cert_file().to_owned(),
            },
            _dir: dir,
        }
    }

    /// Serving arguments on an ephemeral port with the server's certificate.
    pub fn serve_args(&self) -> ServeArgs {
        ServeArgs {
            tls: self.server.clone(),
            ..ServeArgs::ephemeral()
        }
    }

    /// `https://localhost:<port>`, the name on the server's certificate.
    pub fn endpoint(port: u16) -> Endpoint {
        Endpoint::from_shared(format!("https://localhost:{port}")).unwrap()
    }

    /// A client that trusts the server, presenting the client certificate.
    pub async fn client(&self, port: u16) -> CloudProviderClient<Channel> {
        let identity = Identity::from_pem(
            std::fs::read(&self.client.cert).unwrap(),
            std::fs::read(&self.client.key).unwrap(),
        );
        let channel = Self::endpoint(port)
            .tls_config(self.trust().identity(identity))
            .unwrap()
            .connect()
            .await
            .unwrap();
        CloudProviderClient::new(channel)
    }

    /// Whether the server on `port` refuses a client that trusts it but has no certificate:
    /// either the handshake or the first call fails.
    pub async fn refuses_client_without_certificate(&self, port: u16) -> bool {
        let connected = Self::endpoint(port)
            .tls_config(self.trust())
            .unwrap()
            .connect()
            .await;
        match connected {
            Err(_) => true,
            Ok(channel) => CloudProviderClient::new(channel)
                .node_groups(pb::NodeGroupsRequest {})
                .await
                .is_err(),
        }
    }

    fn trust(&self) -> ClientTlsConfig {
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(
            std::fs::read(&self.client.cacert).unwrap(),
        ))
    }
}

/// A client of the provider served over plaintext; the server stops when its handle drops.
pub async fn plaintext_client(env: &Env) -> (Running, CloudProviderClient<Channel>) {
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let client = CloudProviderClient::connect(server.grpc_url())
        .await
        .unwrap();
    (server, client)
}

/// Refresh succeeds once the provider has listed everything; CA calls it first each loop.
pub async fn refreshed(client: &CloudProviderClient<Channel>) {
    wait::until("Refresh to succeed", DEADLINE, || {
        let mut client = client.clone();
        async move {
            client
                .refresh(pb::RefreshRequest {})
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await
    .unwrap();
}

/// Waits until the provider serves `group` (its watch has seen the Deployment).
pub async fn served(client: &CloudProviderClient<Channel>, group: &str) {
    wait::until(&format!("{group} to be served"), DEADLINE, || {
        let mut client = client.clone();
        let id = group.to_owned();
        async move {
            client
                .node_group_target_size(pb::NodeGroupTargetSizeRequest { id })
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await
    .unwrap();
}

/// Creates the seat Deployment `seats` (one of [`seat_deployment`]'s, in [`NAMESPACE`]).
pub async fn create_seats(client: &Client, seats: &SeatDeployment) {
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &seats.to_deployment())
        .await
        .unwrap();
}

/// The group's nodes, once exactly `count` exist and all are Ready.
pub async fn ready_nodes(client: &Client, group: &str, count: usize) -> Vec<Node> {
    ksim_localenv::nodes::ready_nodes(client, &format!("{GROUP_LABEL}={group}"), count, DEADLINE)
        .await
        .unwrap()
}

pub async fn node_names(client: &Client, group: &str) -> BTreeSet<String> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect()
}

/// Seat pods not being deleted.
pub async fn live_seats(client: &Client, group: &str) -> BTreeSet<String> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

pub fn grpc_node(node: &Node) -> pb::ExternalGrpcNode {
    pb::ExternalGrpcNode {
        provider_id: node.spec.as_ref().unwrap().provider_id.clone().unwrap(),
        name: node.metadata.name.clone().unwrap(),
        labels: node
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        annotations: Default::default(),
    }
}

/// What CA builds for an instance without a Kubernetes node: name and providerID are the id.
pub fn placeholder_node(instance_id: &str) -> pb::ExternalGrpcNode {
    pb::ExternalGrpcNode {
        provider_id: instance_id.to_owned(),
        name: instance_id.to_owned(),
        labels: Default::default(),
        annotations: [(
            "k8s.io/cluster-autoscaler/fake-node-reason".to_owned(),
            "upcoming".to_owned(),
        )]
        .into_iter()
        .collect(),
    }
}

/// Marks group `group`'s seat Deployment retiring, as the driver's cleanup does.
pub async fn retire(client: &Client, group: &str) {
    let patch = json!({ "metadata": { "annotations": { RETIRING_ANNOTATION: "true" } } });
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .patch(
            &format!("seats-{group}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// Whether the provider has marked group `group`'s seat Deployment released; Err says why not.
pub async fn released(client: &Client, group: &str) -> Result<(), String> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(&format!("seats-{group}"))
        .await
        .map_err(|e| e.to_string())?;
    let annotations = deployment.metadata.annotations.unwrap_or_default();
    annotations
        .contains_key(RELEASED_ANNOTATION)
        .then_some(())
        .ok_or(format!("{annotations:?}"))
}

/// The resizes the provider carried out for CA, from [`Provider::subscribe`].
pub struct Resizes {
    events: Receiver<ScaleEvent>,
    seen: Vec<ScaleEvent>,
}

impl Resizes {
    pub fn new(env: &Env) -> Self {
        Self {
            events: env.provider.subscribe(),
            seen: Vec::new(),
        }
    }

    /// Waits for CA's first completed DeleteNodes on `group` from now on, for at most `within`.
    pub async fn next_deletion(&mut self, group: &str, within: Duration) {
        self.poll();
        let deletion = async {
            loop {
                let event = self.events.recv().await.unwrap();
                let done =
                    matches!(&event, ScaleEvent::NodesDeleted { group: g, .. } if g == group);
                self.seen.push(event);
                if done {
                    return;
                }
            }
        };
        tokio::time::timeout(within, deletion)
            .await
            .unwrap_or_else(|_| panic!("no DeleteNodes on {group} within {within:?}"));
    }

    pub fn poll(&mut self) -> &[ScaleEvent] {
        loop {
            match self.events.try_recv() {
                Ok(event) => self.seen.push(event),
                Err(TryRecvError::Empty | TryRecvError::Closed) => return &self.seen,
                Err(TryRecvError::Lagged(n)) => panic!("missed {n} scale events"),
            }
        }
    }

    /// The nodes CA had deleted from `group`, each once.
    pub fn deleted(&mut self, group: &str) -> BTreeSet<String> {
        self.poll()
            .iter()
            .filter_map(|event| match event {
                ScaleEvent::NodesDeleted { group: g, nodes } if g == group => Some(nodes),
                _ => None,
            })
            .flatten()
            .cloned()
            .collect()
    }

    /// How many nodes CA added to `group` in all.
    pub fn increased(&mut self, group: &str) -> i32 {
        self.poll()
            .iter()
            .map(|event| match event {
                ScaleEvent::Increased { group: g, delta } if g == group => *delta,
                _ => 0,
            })
            .sum()
    }
}
