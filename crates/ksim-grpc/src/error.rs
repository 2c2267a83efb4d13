//! Why a service could not start or keep serving.

use std::{net::SocketAddr, path::PathBuf};

/// Why a service could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file given by flag (a TLS certificate, key or CA) that cannot be read.
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    #[error("TLS needs both --tls-cert and --tls-key (got only {given})")]
    IncompleteTls { given: &'static str },
    #[error("invalid TLS configuration: {0}")]
    Tls(#[source] tonic::transport::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write the bound addresses to {path}: {source}")]
    WriteBoundAddrs {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the server task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
    #[error("gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
    #[error("admin HTTP server failed: {0}")]
    Admin(#[source] std::io::Error),
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("cannot install the log subscriber: {0}")]
    Subscriber(#[from] tracing_subscriber::util::TryInitError),
    #[error("invalid log filter {filter:?}: {source}")]
    LogFilter {
        filter: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot build the OTLP span exporter: {0}")]
    OtlpExporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("cannot listen for shutdown signals: {0}")]
    Signal(#[source] std::io::Error),
}
