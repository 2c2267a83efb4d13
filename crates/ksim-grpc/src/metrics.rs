//! Per-method gRPC server metrics on the admin port, by go-grpc-prometheus's names and labels
//! (`grpc_server_handled_total{grpc_service, grpc_method, grpc_code}` and
//! `grpc_server_handling_seconds{grpc_service, grpc_method}`, under the registry's `ksim_`
//! prefix), so dashboards written for Go services read them. cluster-autoscaler waits on the
//! provider's answers once per node per loop: how long they take is worth seeing.
//!
//! A call's time runs to its response headers: a unary call's whole handling, a stream's start.
//! Its code is the `grpc-status` those headers carry (an error answered at once) or OK; a stream
//! that fails after its first message counts as OK.

use std::{
    collections::HashSet,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use prost::Message as _;
use prost_types::FileDescriptorSet;
use tonic::Code;
use tower::{Layer, Service};

/// What a call's path is counted under when it names no method this server has: a caller
/// chooses the path, and one label set per made-up name would grow without bound.
const OTHER: &str = "other";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    grpc_service: String,
    grpc_method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    grpc_service: String,
    grpc_method: String,
    grpc_code: &'static str,
}

/// The metrics and the methods they are kept for. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct ServerMetrics {
    handled: Family<CodeLabels, Counter>,
    handling_seconds: Family<MethodLabels, Histogram>,
    /// `/package.Service/Method` of every method served.
    methods: Arc<HashSet<String>>,
}

impl ServerMetrics {
    /// Metrics for the methods of `services` found in the descriptor sets, registered in
    /// `registry`.
    pub(crate) fn register(
        registry: &mut Registry,
        services: &[&str],
        descriptor_sets: &[&[u8]],
    ) -> Self {
        let metrics = Self {
            handled: Family::default(),
            // 100 µs to ~3 s: a loopback answer to CA's longest wait worth telling apart.
            handling_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 16))
            }),
            methods: Arc::new(methods(services, descriptor_sets)),
        };
        registry.register(
            "grpc_server_handled",
            "gRPC calls answered, by method and status code",
            metrics.handled.clone(),
        );
        registry.register(
            "grpc_server_handling_seconds",
            "How long gRPC calls took to answer (a stream: to start), by method",
            metrics.handling_seconds.clone(),
        );
        metrics
    }

    fn labels(&self, path: &str) -> MethodLabels {
        let split = path
            .strip_prefix('/')
            .and_then(|rest| rest.split_once('/'))
            .filter(|_| self.methods.contains(path));
        let (service, method) = split.unwrap_or((OTHER, OTHER));
        MethodLabels {
            grpc_service: service.to_owned(),
            grpc_method: method.to_owned(),
        }
    }

    fn observe(&self, labels: MethodLabels, code: Code, started: Instant) {
        self.handling_seconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.handled
            .get_or_create(&CodeLabels {
                grpc_service: labels.grpc_service,
                grpc_method: labels.grpc_method,
                grpc_code: code_name(code),
            })
            .inc();
    }
}

/// Every method path of `services` in `descriptor_sets`; a set that does not decode adds none.
fn methods(services: &[&str], descriptor_sets: &[&[u8]]) -> HashSet<String> {
    descriptor_sets
        .iter()
        .filter_map(|bytes| FileDescriptorSet::decode(*bytes).ok())
        .flat_map(|set| set.file)
        .flat_map(|file| {
            let package = file.package.clone().unwrap_or_default();
            file.service.into_iter().flat_map(move |service| {
                let name = match (package.as_str(), service.name()) {
                    ("", name) => name.to_owned(),
                    (package, name) => format!("{package}.{name}"),
                };
                service
                    .method
                    .into_iter()
                    .map(move |method| (name.clone(), method.name().to_owned()))
            })
        })
        .filter(|(service, _)| services.contains(&service.as_str()))
        .map(|(service, method)| format!("/{service}/{method}"))
        .collect()
}

/// The code as Go's `codes.Code.String()` spells it, as go-grpc-prometheus labels it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// The code a response's headers carry: an error answered at once ("trailers-only"), else OK
/// (a successful call's status comes in its trailers).
fn response_code(headers: &http::HeaderMap) -> Code {
    headers
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<i32>().ok())
        .map_or(Code::Ok, Code::from_i32)
}

/// Counts and times every call of the service it wraps.
#[derive(Debug, Clone)]
pub(crate) struct MetricsLayer(pub(crate) ServerMetrics);

impl<S> Layer<S> for MetricsLayer {
    type Service = Metered<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Metered {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Metered<S> {
    inner: S,
    metrics: ServerMetrics,
}

impl<S, B, R> Service<http::Request<B>> for Metered<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let labels = self.metrics.labels(request.uri().path());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answered = answer.await;
            let code = match &answered {
                Ok(response) => response_code(response.headers()),
                // The transport failed the call before any status was sent.
                Err(_) => Code::Unknown,
            };
            metrics.observe(labels, code, started);
            answered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> (Registry, ServerMetrics) {
        let mut registry = Registry::with_prefix("ksim");
        let metrics = ServerMetrics::register(
            &mut registry,
            &["grpc.health.v1.Health"],
            &[
                tonic_health::pb::FILE_DESCRIPTOR_SET,
                b"not a descriptor set",
            ],
        );
        (registry, metrics)
    }

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn only_the_methods_served_get_a_label_of_their_own() {
        let (_, metrics) = metrics();
        assert_eq!(
            metrics.labels("/grpc.health.v1.Health/Check"),
            MethodLabels {
                grpc_service: "grpc.health.v1.Health".into(),
                grpc_method: "Check".into(),
            }
        );
        for made_up in [
            "/grpc.health.v1.Health/Chec",
            "/x.Y/Check",
            "/grpc.health.v1.Health",
            "grpc.health.v1.Health/Check",
            "/",
        ] {
            assert_eq!(metrics.labels(made_up).grpc_method, OTHER, "{made_up}");
        }
    }

    #[test]
    fn codes_come_from_trailers_only_headers_else_ok() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(response_code(&headers), Code::Ok);
        headers.insert("grpc-status", http::HeaderValue::from_static("5"));
        assert_eq!(response_code(&headers), Code::NotFound);
        headers.insert("grpc-status", http::HeaderValue::from_static("garbage"));
        assert_eq!(response_code(&headers), Code::Ok);
        assert_eq!(code_name(Code::Cancelled), "Canceled");
    }

    #[tokio::test]
    async fn a_call_is_counted_with_its_code_and_timed() {
        let (registry, metrics) = metrics();
        let mut service = MetricsLayer(metrics).layer(tower::service_fn(
            |request: http::Request<()>| async move {
                let mut response = http::Response::new(());
                if request.uri().path().ends_with("Watch") {
                    response
                        .headers_mut()
                        .insert("grpc-status", http::HeaderValue::from_static("12"));
                }
                Ok::<_, std::convert::Infallible>(response)
            },
        ));
        for path in [
            "/grpc.health.v1.Health/Check",
            "/grpc.health.v1.Health/Check",
            "/grpc.health.v1.Health/Watch",
            "/made.Up/Watch",
        ] {
            let request = http::Request::builder().uri(path).body(()).unwrap();
            service.call(request).await.unwrap();
        }
        let text = encoded(&registry);
        for line in [
            r#"ksim_grpc_server_handled_total{grpc_service="grpc.health.v1.Health",grpc_method="Check",grpc_code="OK"} 2"#,
            r#"ksim_grpc_server_handled_total{grpc_service="grpc.health.v1.Health",grpc_method="Watch",grpc_code="Unimplemented"} 1"#,
            r#"ksim_grpc_server_handled_total{grpc_service="other",grpc_method="other",grpc_code="Unimplemented"} 1"#,
            r#"ksim_grpc_server_handling_seconds_count{grpc_service="grpc.health.v1.Health",grpc_method="Check"} 2"#,
        ] {
            assert!(text.contains(line), "{line}\nnot in\n{text}");
        }
    }
}
