//! W3C trace-context across gRPC calls: servers continue the caller's trace, clients pass
//! theirs on. The propagator is the global one that [`crate::init_telemetry`] installs.

use opentelemetry::global;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Opens the server span for one gRPC call, parented on the caller's `traceparent` if any.
pub fn server_span<B>(request: &http::Request<B>) -> tracing::Span {
    let (service, method) = split_grpc_path(request.uri().path());
    let span = tracing::info_span!(
        "grpc.server",
        otel.name = %format_args!("{service}/{method}"),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    );
    let parent = global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(request.headers()))
    });
    // Fails only when no OpenTelemetry layer is installed: then there is no trace to continue.
    let _ = span.set_parent(parent);
    span
}

/// Writes the current span's context into an outgoing request. Use it on a client channel:
/// `tower::ServiceBuilder::new().map_request(inject_trace_context).service(channel)`.
pub fn inject_trace_context<B>(mut request: http::Request<B>) -> http::Request<B> {
    let context = tracing::Span::current().context();
    global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(request.headers_mut()));
    });
    request
}

/// `/pkg.Service/Method` -> (`pkg.Service`, `Method`); anything else is kept whole.
fn split_grpc_path(path: &str) -> (&str, &str) {
    path.trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""))
}

#[cfg(test)]
mod tests {
    use super::split_grpc_path;

    #[test]
    fn grpc_paths_split_into_service_and_method() {
        assert_eq!(
            split_grpc_path("/grpc.health.v1.Health/Check"),
            ("grpc.health.v1.Health", "Check")
        );
        assert_eq!(split_grpc_path("/metrics"), ("/metrics", ""));
    }
}
