//! The nodes' kubelet resource endpoints: for every node of the pool, one HTTPS listener on the
//! advertised address and the node's own port (so the listener tells which node is asked),
//! serving `GET /metrics/resource` as that node's kubelet would, from the pods' usage meters.
//!
//! Callers must present a client certificate signed by the configured CA, as a kubelet with
//! `--client-ca-file` and no anonymous access requires; what the kubelet then asks the
//! apiserver (webhook authorization: may this user get `nodes/metrics`?) is not modelled. The
//! serving certificate is self-signed, made at start: metrics-server runs with
//! `--kubelet-insecure-tls`, as it does against kubelets without CA-signed serving certificates.
//!
//! The endpoints read one snapshot of every metered pod, taken at most [`SNAPSHOT_AGE`]
//! before: metrics-server scrapes all nodes at once, so one pass over the pods serves them all.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use ipnet::Ipv4Net;
use k8s_openapi::jiff::Timestamp;
use rustls::{
    ServerConfig,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
    server::WebPkiClientVerifier,
};
use tokio::{net::TcpListener, task::JoinSet};
use tokio_rustls::TlsAcceptor;

use k8s_openapi::api::core::v1::Node;

use super::Context;
use crate::tls;
use crate::{
    apiserver::NodeClient,
    config::KubeletEndpointConfig,
    domain::{
        kubelet_endpoint::{PortRange, advertised},
        resource_metrics::{MeteredPod, render},
    },
    index::{NodeState, PoolIndex},
};

/// The path metrics-server scrapes.
pub const RESOURCE_PATH: &str = "/metrics/resource";
/// How old the pods' snapshot may be when a scrape reads it.
pub const SNAPSHOT_AGE: Duration = Duration::from_secs(1);
/// How often the listeners are brought to the pool's nodes.
const RESYNC: Duration = Duration::from_secs(1);
/// A node whose port could not be bound is tried again after this long.
const BIND_RETRY: Duration = Duration::from_secs(10);
/// A TLS handshake or a request's headers taking longer than this is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one node's endpoint holds at once; more are closed at once. metrics-server
/// keeps one per node.
const MAX_CONNECTIONS_PER_NODE: usize = 8;
/// A client CA bundle is a few KiB.
const MAX_CA_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error(
        "--kubelet-endpoint needs --kubelet-client-ca-file: the endpoints accept no anonymous callers"
    )]
    NoClientCa,
    #[error("--kubelet-client-ca-file: {0}")]
    ReadCa(#[from] ksim_grpc::files::FileError),
    #[error("--kubelet-client-ca-file {path}: {reason}")]
    BadCa { path: String, reason: String },
    #[error("the endpoints' serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the endpoints' TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// What every node's endpoint shares.
pub struct Endpoints {
    ip: IpAddr,
    ports: PortRange,
    pod_cidr_pool: Ipv4Net,
    tls: TlsAcceptor,
    snapshot: Mutex<Option<Arc<Snapshot>>>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("ip", &self.ip)
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Snapshot {
    taken: Instant,
    at: Timestamp,
    by_node: HashMap<String, Vec<MeteredPod>>,
}

impl Endpoints {
    /// The endpoints `config` asks for, `None` when it asks for none; a missing or unreadable
    /// client CA is an error.
    pub fn new(
        config: &KubeletEndpointConfig,
        pod_cidr_pool: Ipv4Net,
    ) -> Result<Option<Self>, KubeletError> {
        let Some(ip) = config.endpoint else {
            return Ok(None);
        };
        let ca_file = config
            .client_ca_file
            .as_ref()
            .ok_or(KubeletError::NoClientCa)?;
        let tls = tls_config(ip, ca_file)?;
        Ok(Some(Self {
            ip,
            ports: config.ports,
            pod_cidr_pool,
            tls: TlsAcceptor::from(Arc::new(tls)),
            snapshot: Mutex::new(None),
        }))
    }

    /// The address and port a node with this podCIDR advertises, if it has one.
    pub fn endpoint_of(&self, pod_cidr: Ipv4Net) -> Option<(IpAddr, u16)> {
        self.ports
            .port_for(self.pod_cidr_pool, pod_cidr)
            .map(|port| (self.ip, port))
    }

    /// The body of a scrape of `node`'s endpoint.
    fn scrape(&self, ctx: &Context, node: &str) -> String {
        let snapshot = {
            let mut held = self
                .snapshot
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match held.as_ref() {
                Some(snapshot) if snapshot.taken.elapsed() < SNAPSHOT_AGE => snapshot.clone(),
                _ => {
                    let snapshot = Arc::new(take_snapshot(ctx));
                    *held = Some(snapshot.clone());
                    snapshot
                }
            }
        };
        let pods = snapshot.by_node.get(node).map_or(&[][..], Vec::as_slice);
        render(pods, snapshot.at)
    }
}

/// Makes the pool's existing nodes advertise `endpoints` (or the kubelet's default port when
/// there are none) where they advertise something else: a restart may have changed the flags.
/// The node's InternalIP and hostname stay.
pub async fn readvertise(
    nodes: &NodeClient,
    index: &PoolIndex,
    endpoints: Option<&Endpoints>,
    existing: &[Node],
) -> Result<(), kube::Error> {
    for node in existing {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let Some(entry) = index.node(name) else {
            continue;
        };
        let endpoint = endpoints.and_then(|endpoints| endpoints.endpoint_of(entry.pod_cidr));
        if let Some((addresses, daemon_endpoints)) = advertised(node.status.as_ref(), endpoint) {
            nodes
                .set_addresses(name, &addresses, &daemon_endpoints)
                .await?;
        }
    }
    Ok(())
}

/// Every metered running pod at one time, by node.
fn take_snapshot(ctx: &Context) -> Snapshot {
    let at = Timestamp::now();
    let taken = Instant::now();
    let mut by_node: HashMap<String, Vec<MeteredPod>> = HashMap::new();
    let index = ctx.index();
    for pod in index.pod_usage() {
        by_node
            .entry(pod.node.to_owned())
            .or_default()
            .push(MeteredPod {
                namespace: pod.namespace().to_owned(),
                name: pod.name().to_owned(),
                containers: pod.meter.read(at),
            });
    }
    Snapshot { taken, at, by_node }
}

/// Reads the client CA and makes the serving certificate for `ip`.
fn tls_config(ip: IpAddr, ca_file: &Path) -> Result<ServerConfig, KubeletError> {
    let bad_ca = |reason: String| KubeletError::BadCa {
        path: ca_file.display().to_string(),
        reason,
    };
    let pem = ksim_grpc::files::read_bounded(ca_file, MAX_CA_BYTES, "the kubelet client CA")?;
    let roots = tls::client_roots(&pem).map_err(bad_ca)?;
    let provider = tls::provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad_ca(e.to_string()))?;
    let serving = rcgen::generate_simple_self_signed(vec![ip.to_string()])?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        serving.signing_key.serialize_der(),
    ));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![serving.cert.der().clone()], key)?;
    // HTTP/1.1 only: a scrape is one small GET.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Keeps one listener per node of the pool (registered, or being registered) until the task
/// is aborted. A failed node has none: like a machine without power, it refuses connections
/// until it recovers.
pub async fn run(ctx: Context, endpoints: Arc<Endpoints>) {
    let mut listeners: HashMap<String, (u16, tokio::task::AbortHandle)> = HashMap::new();
    let mut failed: HashMap<String, Instant> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut ticker = tokio::time::interval(RESYNC);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        while tasks.try_join_next().is_some() {}
        let wanted: HashMap<String, u16> = {
            let index = ctx.index();
            index
                .nodes()
                .filter(|node| matches!(node.state, NodeState::Creating | NodeState::Registered))
                .filter(|node| !node.failed)
                .filter_map(|node| {
                    endpoints
                        .endpoint_of(node.pod_cidr)
                        .map(|(_, port)| (node.name.clone(), port))
                })
                .collect()
        };
        listeners.retain(|name, (port, task)| {
            let keep = wanted.get(name) == Some(port);
            if !keep {
                task.abort();
            }
            keep
        });
        failed.retain(|name, at| wanted.contains_key(name) && at.elapsed() < BIND_RETRY);
        for (name, port) in wanted {
            if listeners.contains_key(&name) || failed.contains_key(&name) {
                continue;
            }
            match TcpListener::bind(SocketAddr::new(endpoints.ip, port)).await {
                Ok(listener) => {
                    let task = tasks.spawn(serve_node(
                        ctx.clone(),
                        endpoints.clone(),
                        name.clone(),
                        listener,
                    ));
                    listeners.insert(name, (port, task));
                }
                Err(error) => {
                    tracing::warn!(node = name, port, %error, "kubelet endpoint not served; trying again");
                    failed.insert(name, Instant::now());
                }
            }
        }
        ctx.metrics.kubelet_listeners.set(listeners.len() as i64);
    }
}

/// Accepts one node's connections; they end with the listener's task.
async fn serve_node(ctx: Context, endpoints: Arc<Endpoints>, node: String, listener: TcpListener) {
    let node: Arc<str> = node.into();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if connections.len() < MAX_CONNECTIONS_PER_NODE => {
                    connections.spawn(serve_connection(
                        ctx.clone(),
                        endpoints.clone(),
                        node.clone(),
                        stream,
                    ));
                }
                Ok(_) => {}
                Err(error) => {
                    // Out of file descriptors, usually: wait rather than spin.
                    tracing::warn!(node = &*node, %error, "accepting a kubelet endpoint connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(
    ctx: Context,
    endpoints: Arc<Endpoints>,
    node: Arc<str>,
    stream: tokio::net::TcpStream,
) {
    // A caller without a certificate of the CA fails here.
    let tls = match tokio::time::timeout(CLIENT_TIMEOUT, endpoints.tls.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(node = &*node, %error, "kubelet endpoint handshake refused");
            return;
        }
        Err(_) => return,
    };
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let response = respond(&ctx, &endpoints, &node, &request);
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "kubelet endpoint connection");
    }
}

fn respond(
    ctx: &Context,
    endpoints: &Endpoints,
    node: &str,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, RESOURCE_PATH) => (
            StatusCode::OK,
            // The text format's content type, as the kubelet sends it.
            "text/plain; version=0.0.4; charset=utf-8",
            {
                ctx.metrics.kubelet_scrapes.inc();
                endpoints.scrape(ctx, node)
            },
        ),
        (_, RESOURCE_PATH) => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}
