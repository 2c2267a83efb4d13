//! Command-line and environment settings shared by every service binary.
//! Each service flattens [`ServeArgs`] into its own clap parser.

use std::{net::SocketAddr, path::PathBuf};

/// How a service serves gRPC and its admin port.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address the gRPC server listens on.
    #[arg(long, env = "KSIM_GRPC_ADDR", default_value = "127.0.0.1:50051")]
    pub grpc_addr: SocketAddr,

    /// Address of the admin HTTP server (`/metrics`, `/healthz`).
    #[arg(long, env = "KSIM_ADMIN_ADDR", default_value = "127.0.0.1:9090")]
    pub admin_addr: SocketAddr,

    /// Seconds in-flight calls (open streams included) get to finish after SIGTERM.
    #[arg(long, env = "KSIM_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
    pub shutdown_grace_seconds: u64,

    /// Once both ports are bound, write their addresses here (`grpc=<addr>` and `admin=<addr>`
    /// lines): how a supervisor learns the ports of a service started on port 0.
    #[arg(long, env = "KSIM_BOUND_ADDRS_FILE")]
    pub bound_addrs_file: Option<PathBuf>,

    #[command(flatten)]
    pub tls: TlsArgs,

    #[command(flatten)]
    pub limits: MessageLimits,

    #[command(flatten)]
    pub log: LogArgs,
}

impl ServeArgs {
    /// Free loopback ports for gRPC and admin, a one-second shutdown grace, defaults
    /// otherwise: for tests and for servers embedded in another process.
    pub fn ephemeral() -> Self {
        let loopback_any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        Self {
            grpc_addr: loopback_any_port,
            admin_addr: loopback_any_port,
            shutdown_grace_seconds: 1,
            bound_addrs_file: None,
            tls: TlsArgs::default(),
            limits: MessageLimits::default(),
            log: LogArgs::default(),
        }
    }
}

/// Serving certificate, and the CA that client certificates must chain to for mutual TLS.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM certificate chain served to clients; enables TLS (with --tls-key).
    #[arg(long, env = "KSIM_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "KSIM_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS).
    #[arg(long, env = "KSIM_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
}

/// Per-message size limits, applied to every ksim service (see [`crate::LimitedService`]).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct MessageLimits {
    /// Largest request message a service decodes, in bytes.
    #[arg(long, env = "KSIM_MAX_REQUEST_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_request_bytes: usize,

    /// Largest response message a service encodes, in bytes.
    #[arg(long, env = "KSIM_MAX_RESPONSE_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_response_bytes: usize,
}

impl Default for MessageLimits {
    fn default() -> Self {
        Self {
            max_request_bytes: 16 * 1024 * 1024,
            max_response_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Log output. Traces go to OTLP when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "KSIM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Which logs to keep, in `RUST_LOG` syntax.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,
}

impl Default for LogArgs {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Text,
            log_filter: "info".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn flags_override_defaults() {
        let cli = Cli::try_parse_from([
            "svc",
            "--grpc-addr",
            "0.0.0.0:7000",
            "--log-format",
            "json",
            "--max-request-bytes",
            "1024",
        ])
        .unwrap();
        assert_eq!(cli.serve.grpc_addr, "0.0.0.0:7000".parse().unwrap());
        assert_eq!(cli.serve.log.log_format, LogFormat::Json);
        assert_eq!(cli.serve.limits.max_request_bytes, 1024);
        assert!(cli.serve.tls.tls_cert.is_none());
    }

    #[test]
    fn bad_address_is_rejected_with_the_flag_name() {
        let err = Cli::try_parse_from(["svc", "--grpc-addr", "not-an-addr"]).unwrap_err();
        assert!(err.to_string().contains("--grpc-addr"), "{err}");
    }
}
