//! The admin HTTP port: Prometheus metrics and a liveness probe, apart from gRPC traffic.

use std::sync::Arc;

use axum::{Router, extract::State, http::header, response::IntoResponse, routing::get};
use prometheus_client::{encoding::text::encode, registry::Registry};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(crate) fn router(registry: Registry) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(Arc::new(registry))
}

async fn metrics(State(registry): State<Arc<Registry>>) -> axum::response::Response {
    let mut body = String::new();
    match encode(&mut body, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding metrics failed");
            http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
