//! Logs through `tracing`, and OpenTelemetry traces exported over OTLP/gRPC when the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` variable is set.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing_subscriber::{
    EnvFilter, Layer, Registry, fmt::writer::BoxMakeWriter, layer::SubscriberExt,
    util::SubscriberInitExt,
};

use crate::{Error, LogArgs, LogFormat};

const OTLP_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Keeps the trace pipeline alive; dropping it flushes spans not yet exported.
#[derive(Debug)]
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "flushing traces at shutdown failed");
        }
    }
}

/// Installs the process-wide log subscriber, writing to stdout, and, if an OTLP endpoint is
/// configured, the trace exporter. W3C trace-context becomes the propagation format either way.
pub fn init_telemetry(service_name: &str, args: &LogArgs) -> Result<TelemetryGuard, Error> {
    init(service_name, args, Output::Stdout)
}

/// As [`init_telemetry`], for a command line: log records go to stderr, so stdout holds only
/// what the command prints.
pub fn init_cli_telemetry(service_name: &str, args: &LogArgs) -> Result<TelemetryGuard, Error> {
    init(service_name, args, Output::Stderr)
}

#[derive(Clone, Copy)]
enum Output {
    Stdout,
    Stderr,
}

fn init(service_name: &str, args: &LogArgs, output: Output) -> Result<TelemetryGuard, Error> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_new(&args.log_filter).map_err(|source| Error::LogFilter {
        filter: args.log_filter.clone(),
        source,
    })?;
    let provider = match std::env::var_os(OTLP_ENDPOINT_VAR) {
        Some(_) => Some(otlp_provider(service_name)?),
        None => None,
    };
    // Colours only for a terminal: a log file or a pipe gets plain text.
    let (ansi, writer) = match output {
        Output::Stdout => (
            std::io::stdout().is_terminal(),
            BoxMakeWriter::new(std::io::stdout),
        ),
        Output::Stderr => (
            std::io::stderr().is_terminal(),
            BoxMakeWriter::new(std::io::stderr),
        ),
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.with_ansi(ansi).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    Registry::default()
        .with(provider.as_ref().map(|p| otel_layer(p, service_name)))
        .with(fmt.with_filter(filter))
        .try_init()?;
    Ok(TelemetryGuard { provider })
}

/// Builds the `tracing` layer that turns spans into OpenTelemetry spans of `provider`.
pub fn otel_layer<S>(provider: &SdkTracerProvider, service_name: &str) -> impl Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer(service_name.to_owned()))
}

fn otlp_provider(service_name: &str) -> Result<SdkTracerProvider, Error> {
    // The exporter reads the endpoint, headers and timeout from the standard OTEL_* variables.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build())
}
