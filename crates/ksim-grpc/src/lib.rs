//! The serving runtime shared by every ksim service: gRPC health and reflection, `tracing`
//! logs and OpenTelemetry traces with W3C trace-context propagation, a Prometheus admin port
//! (with every method's call counts and times), optional (mutual) TLS, message size limits and
//! graceful shutdown; [`error_line`], an error as the one line a command prints; `files`, the bounded reads and checked writes of the files users name;
//! and `input`, the bounds on request strings and on the error messages that echo them.

mod admin;
mod args;
mod error;
mod error_line;
pub mod files;
pub mod input;
mod limits;
mod metrics;
mod propagation;
mod server;
mod shutdown;
mod telemetry;
mod tls;

pub use args::{LogArgs, LogFormat, MessageLimits, ServeArgs, TlsArgs};
pub use error::Error;
pub use error_line::error_line;
pub use limits::LimitedService;
pub use propagation::{inject_trace_context, server_span};
pub use server::{BoundAddrs, BoundServer, GrpcServer, Running};
pub use shutdown::shutdown_signal;
pub use telemetry::{TelemetryGuard, init_cli_telemetry, init_telemetry, otel_layer};
pub use tls::server_tls_config;
