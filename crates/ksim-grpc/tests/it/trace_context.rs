//! W3C trace-context across a real gRPC call: the server span continues the caller's trace.
// Test helpers may unwrap too: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, sync::OnceLock, time::Duration};

use ksim_grpc::{GrpcServer, ServeArgs};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{InMemorySpanExporter, SdkTracerProvider, SpanData},
};
use tonic::transport::Endpoint;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{Registry, layer::SubscriberExt};

const CHECK_SPAN: &str = "grpc.health.v1.Health/Check";

/// Spans end up in the returned exporter while the guard is held. The test runtime is
/// single-threaded, so the server's tasks see this thread's subscriber too.
fn capture_spans() -> (
    InMemorySpanExporter,
    SdkTracerProvider,
    tracing::subscriber::DefaultGuard,
) {
    keep_a_second_dispatcher();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = Registry::default().with(ksim_grpc::otel_layer(&provider, "test"));
    (
        exporter,
        provider,
        tracing::subscriber::set_default(subscriber),
    )
}

/// While only one dispatcher is registered, tracing-core decides a new callsite's interest
/// from the registering thread's default alone and caches it. A `serve` test on the other
/// test thread, with no subscriber, would then register the server span's callsite as
/// "never" and this thread's subscriber would not see it. A second dispatcher that lives
/// as long as the process makes every callsite ask all of them.
fn keep_a_second_dispatcher() {
    static SECOND: OnceLock<tracing::Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(Registry::default()));
}

async fn start_server() -> SocketAddr {
    let bound = GrpcServer::new(ServeArgs::ephemeral())
        .bind()
        .await
        .unwrap();
    let addr = bound.grpc_addr().unwrap();
    tokio::spawn(bound.serve_until(std::future::pending()));
    addr
}

/// The server span closes once the response body is done, which may be just after the
/// client has its answer.
async fn server_span(exporter: &InMemorySpanExporter) -> SpanData {
    for _ in 0..100 {
        let spans = exporter.get_finished_spans().unwrap();
        if let Some(span) = spans.into_iter().find(|span| span.name == CHECK_SPAN) {
            return span;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no server span named {CHECK_SPAN} was exported");
}

#[tokio::test]
async fn a_call_carrying_a_traceparent_continues_the_callers_trace() {
    let (exporter, _provider, _guard) = capture_spans();
    let addr = start_server().await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let mut request = tonic::Request::new(HealthCheckRequest::default());
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{parent_id}-01").parse().unwrap(),
    );
    HealthClient::new(channel).check(request).await.unwrap();

    let span = server_span(&exporter).await;
    assert_eq!(
        span.span_context.trace_id(),
        TraceId::from_hex(trace_id).unwrap()
    );
    assert_eq!(span.parent_span_id, SpanId::from_hex(parent_id).unwrap());
    assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Server);
}

#[tokio::test]
async fn a_client_passes_its_current_trace_to_the_server() {
    let (exporter, _provider, _guard) = capture_spans();
    let addr = start_server().await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let channel = tower::ServiceBuilder::new()
        .map_request(ksim_grpc::inject_trace_context::<tonic::body::Body>)
        .service(channel);

    let caller = tracing::info_span!("caller");
    let caller_context = caller.context().span().span_context().clone();
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .instrument(caller)
        .await
        .unwrap();

    let span = server_span(&exporter).await;
    assert!(caller_context.is_valid());
    assert_eq!(span.span_context.trace_id(), caller_context.trace_id());
    assert_eq!(span.parent_span_id, caller_context.span_id());
}

#[tokio::test]
async fn a_call_without_a_traceparent_starts_a_new_trace() {
    let (exporter, _provider, _guard) = capture_spans();
    let addr = start_server().await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .unwrap();

    let span = server_span(&exporter).await;
    assert!(span.span_context.is_valid());
    assert_eq!(span.parent_span_id, SpanId::INVALID);
}
