//! The pool serving the resource metrics API (`metrics.k8s.io/v1beta1`) itself, registered
//! with the apiserver's aggregation layer in place of metrics-server: `kubectl top` and the
//! HPA read the usage set through `SetPodUsage` unchanged. The rules live in
//! [`crate::domain::metrics_api`]; this is the HTTPS server, its authentication and
//! authorization, the label reflectors, and the registration.

mod auth;

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use k8s_openapi::{
    api::core::v1::{Node, Pod},
    jiff::Timestamp,
};
use ksim_kube::aggregation::{AggregatedApi, advertise_address};
use kube::{
    Api, Client,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher::{self, watcher},
    },
};
use tokio::{net::TcpListener, sync::Semaphore, task::JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::tls;
pub use crate::tls::TlsError;
pub use auth::AuthConfigError;

use crate::{
    config::MetricsApiConfig,
    domain::metrics_api::{self as rules, API_SERVICE, MeteredPod, ReadTime, Reply},
    pool::Pool,
};
use auth::{Authorizer, FrontProxy};

/// Labels the pool's APIService, Service and EndpointSlice with the pool's name: what tells
/// its own APIService (taken back on a restart) from another component's (refused).
pub const OWNER_LABEL: &str = "ksim.io/metrics-api-pool";
const FIELD_MANAGER: &str = "ksim-vnode";
const SERVICE: &str = "ksim-vnode-metrics";
/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum MetricsApiError {
    #[error(
        "APIService {api_service} already exists and is not this pool's (it routes to \
         {target}; owner label {OWNER_LABEL}={owner:?}): delete it, or stop the component \
         that serves it (e.g. metrics-server), before starting the pool with --metrics-api-addr"
    )]
    Taken {
        api_service: String,
        target: String,
        owner: Option<String>,
    },
    #[error(
        "no address to advertise the metrics API on: set --metrics-api-advertise (the \
         apiserver refuses loopback addresses in EndpointSlices)"
    )]
    NoAdvertiseAddress,
    #[error(
        "the metrics API cannot be advertised on loopback address {0}: the apiserver refuses \
         it in EndpointSlices"
    )]
    Loopback(IpAddr),
    #[error("binding the metrics API to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    AuthConfig(#[from] AuthConfigError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("registering the metrics API: {0}")]
    Kube(#[from] kube::Error),
}

/// The running metrics API; dropping it stops the server. The APIService stays registered
/// (unavailable until a pool serves it again): [`MetricsApiServer::unregister`] removes it.
pub struct MetricsApiServer {
    local_addr: SocketAddr,
    advertised: SocketAddr,
    api: AggregatedApi,
    client: Client,
    _tasks: JoinSet<()>,
}

impl std::fmt::Debug for MetricsApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsApiServer")
            .field("local_addr", &self.local_addr)
            .field("advertised", &self.advertised)
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl MetricsApiServer {
    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where the apiserver reaches it (the EndpointSlice's address).
    pub fn advertised_addr(&self) -> SocketAddr {
        self.advertised
    }

    /// The APIService and the objects routing it.
    pub fn aggregated_api(&self) -> &AggregatedApi {
        &self.api
    }

    /// Deletes the APIService, Service and EndpointSlice, then stops.
    pub async fn unregister(self) -> Result<(), kube::Error> {
        self.api.unregister(&self.client).await
    }
}

/// Starts the metrics API when `config` names an address; `None` when it is off.
pub async fn start_if_enabled(
    client: Client,
    pool: Arc<Pool>,
    pool_name: &str,
    namespace: &str,
    config: &MetricsApiConfig,
) -> Result<Option<MetricsApiServer>, MetricsApiError> {
    match config.addr {
        Some(addr) => start(client, pool, pool_name, namespace, addr, config)
            .await
            .map(Some),
        None => Ok(None),
    }
}

/// Checks the APIService is free (or the pool's), binds `addr`, starts serving and registers
/// the APIService with a fresh serving CA as its `caBundle`.
pub async fn start(
    client: Client,
    pool: Arc<Pool>,
    pool_name: &str,
    namespace: &str,
    addr: SocketAddr,
    config: &MetricsApiConfig,
) -> Result<MetricsApiServer, MetricsApiError> {
    let api = AggregatedApi {
        api_service: API_SERVICE.to_owned(),
        group: rules::GROUP.to_owned(),
        version: rules::VERSION.to_owned(),
        namespace: namespace.to_owned(),
        service: SERVICE.to_owned(),
        field_manager: FIELD_MANAGER.to_owned(),
        labels: BTreeMap::from([(OWNER_LABEL.to_owned(), pool_name.to_owned())]),
    };
    check_free(&client, &api, pool_name).await?;
    let ip = match config.advertise {
        Some(ip) => ip,
        None if addr.ip().is_unspecified() => {
            advertise_address().ok_or(MetricsApiError::NoAdvertiseAddress)?
        }
        None => addr.ip(),
    };
    if ip.is_loopback() {
        return Err(MetricsApiError::Loopback(ip));
    }
    let front_proxy = FrontProxy::load(&client).await?;
    let serving = tls::serving_certificate(&api.service_dns(), ip)?;
    let ca_pem = serving.ca_pem.clone();
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(serving, &front_proxy.ca)?));
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsApiError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| MetricsApiError::Bind { addr, source })?;

    let mut tasks = JoinSet::new();
    let pods = label_store::<Pod>(&client, &mut tasks);
    let nodes = label_store::<Node>(&client, &mut tasks);
    let state = Arc::new(State {
        pool,
        front_proxy,
        authorizer: Authorizer::new(client.clone()),
        pods,
        nodes,
        window: config.window,
    });
    tasks.spawn(accept(listener, acceptor, state));
    api.register(&client, ip, local_addr.port(), ca_pem.as_bytes())
        .await?;
    tracing::info!(%local_addr, advertised = %ip, "serving the metrics API");
    Ok(MetricsApiServer {
        local_addr,
        advertised: SocketAddr::new(ip, local_addr.port()),
        api,
        client,
        _tasks: tasks,
    })
}

/// Refuses an APIService someone else registered: taking it over would silently cut off
/// their metrics server.
async fn check_free(
    client: &Client,
    api: &AggregatedApi,
    pool_name: &str,
) -> Result<(), MetricsApiError> {
    let Some(existing) = api.get(client).await? else {
        return Ok(());
    };
    let owner = existing
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(OWNER_LABEL))
        .cloned();
    if owner.as_deref() == Some(pool_name) {
        return Ok(());
    }
    let target = match existing
        .spec
        .as_ref()
        .and_then(|spec| spec.service.as_ref())
    {
        Some(service) => format!(
            "Service {}/{}",
            service.namespace.as_deref().unwrap_or(""),
            service.name.as_deref().unwrap_or("")
        ),
        None => "the apiserver itself".to_owned(),
    };
    Err(MetricsApiError::Taken {
        api_service: api.api_service.clone(),
        target,
        owner,
    })
}

/// A metadata-only reflector of `K` (labels for selectors), without managed fields or
/// annotations, which no selector reads.
fn label_store<K>(client: &Client, tasks: &mut JoinSet<()>) -> Store<PartialObjectMeta<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
    K: std::fmt::Debug + Send + Sync + 'static,
{
    use futures::StreamExt;
    let (store, writer) = reflector::store::<PartialObjectMeta<K>>();
    // An Api of PartialObjectMeta lists and watches metadata only.
    let api = Api::<PartialObjectMeta<K>>::all(client.clone());
    let events = watcher(api, watcher::Config::default())
        .modify(|object| {
            object.metadata.managed_fields = None;
            object.metadata.annotations = None;
        })
        .default_backoff()
        .reflect(writer);
    tasks.spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                tracing::warn!(%error, kind = K::kind(&()).as_ref(), "metrics API label watch failed; retrying");
            }
        }
    });
    store
}

struct State {
    pool: Arc<Pool>,
    front_proxy: FrontProxy,
    authorizer: Authorizer,
    pods: Store<PartialObjectMeta<Pod>>,
    nodes: Store<PartialObjectMeta<Node>>,
    window: Duration,
}

async fn accept(listener: TcpListener, acceptor: TlsAcceptor, state: Arc<State>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!(%error, "metrics API accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "metrics API TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            // One client certificate per connection: judged once, used for each request.
            let caller = state
                .front_proxy
                .check_certificate(stream.get_ref().1.peer_certificates());
            let caller = Arc::new(caller);
            let service = service_fn(move |request| {
                let (state, caller) = (state.clone(), caller.clone());
                async move { Ok::<_, Infallible>(handle(&state, &caller, request).await) }
            });
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "metrics API connection ended");
            }
        });
    }
}

async fn handle<B>(
    state: &State,
    caller: &Result<(), String>,
    request: Request<B>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let routed = rules::route(path, request.uri().query());
    if routed == Ok(rules::Request::Health) {
        return reply(Reply {
            code: 200,
            body: serde_json::Value::Null,
        });
    }
    if let Err(reason) = caller {
        return reply(Reply::unauthorized(format!("Unauthorized: {reason}")));
    }
    let user = match state.front_proxy.user(request.headers()) {
        Ok(user) => user,
        Err(reason) => return reply(Reply::unauthorized(format!("Unauthorized: {reason}"))),
    };
    if request.method() != Method::GET {
        return reply(Reply::method_not_allowed(request.method().as_str()));
    }
    let routed = match routed {
        Ok(routed) => routed,
        Err(error) => return reply(error.into()),
    };
    // The aggregator asks for aggregated discovery first and falls back to the per-version
    // documents when it is not acceptable; only those are served.
    if routed == rules::Request::GroupList && wants_aggregated_discovery(request.headers()) {
        return reply(Reply::status(
            406,
            "NotAcceptable",
            "only legacy discovery documents are served",
        ));
    }
    let access = routed.access(path);
    match state.authorizer.allowed(&user, &access).await {
        Ok(true) => {}
        Ok(false) => return reply(Reply::forbidden(&user.name, &access)),
        Err(error) => {
            tracing::warn!(%error, "metrics API authorization failed");
            return reply(Reply::status(
                500,
                "InternalError",
                format!("authorizing the request: {error}"),
            ));
        }
    }
    let read = ReadTime {
        now: Timestamp::now(),
        window: state.window,
    };
    let pods = metered_pods(state, read.now);
    let node_labels = |node: &str| {
        state
            .nodes
            .get(&ObjectRef::new(node))
            .and_then(|node| node.metadata.labels.clone())
            .unwrap_or_default()
    };
    reply(rules::respond(&routed, &pods, node_labels, read))
}

fn wants_aggregated_discovery(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("as=APIGroupDiscoveryList"))
}

/// The pool's readings with each pod's labels, as the label reflector holds them.
fn metered_pods(state: &State, now: Timestamp) -> Vec<MeteredPod> {
    state
        .pool
        .pod_readings(now)
        .into_iter()
        .map(|reading| {
            let labels = state
                .pods
                .get(&ObjectRef::new(&reading.name).within(&reading.namespace))
                .and_then(|pod| pod.metadata.labels.clone())
                .unwrap_or_default();
            MeteredPod {
                namespace: reading.namespace,
                name: reading.name,
                node: reading.node,
                labels,
                containers: reading.containers,
            }
        })
        .collect()
}

fn reply(reply: Reply) -> Response<Full<Bytes>> {
    let (content_type, body) = match reply.body {
        serde_json::Value::Null => ("text/plain", Bytes::from_static(b"ok")),
        body => (
            "application/json",
            Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() =
        StatusCode::from_u16(reply.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}
