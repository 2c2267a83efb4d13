//! Bounds on the strings a request carries and on what an error says back about them: an
//! oversized ID or flag is refused as INVALID_ARGUMENT before any work linear in it, and no
//! error echoes it whole (a message of megabytes would not fit the caller's header limit and
//! come back RESOURCE_EXHAUSTED instead of the error).

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use ksim_proto::ksim::{env::v1::Configuration, trace::v1::TraceFilter};
use tonic::Status;
use tower::{Layer, Service};

/// The longest name or ID any service takes: a Kubernetes object name (a DNS subdomain).
pub const NAME_MAX: usize = 253;
/// The longest one-line value a request may give: a path (Linux's `PATH_MAX`), a flag's
/// value, a label selector.
pub const VALUE_MAX: usize = 4096;
/// The longest configuration text (YAML or JSON) a request may carry: as long as the CLI
/// reads a configuration file (a node skeleton has a tighter bound of its own).
pub const TEXT_MAX: usize = 1 << 20;
/// The most of a refused value an error echoes.
pub const ECHO_MAX: usize = 64;
/// The longest error message a service answers with; longer ones are cut to it.
pub const MESSAGE_MAX: usize = 1024;

/// A value as an error may echo it: whole when short, else its first [`ECHO_MAX`] characters
/// and its size, e.g. `xxxx… (1048576 bytes)`.
#[derive(Debug, Clone, Copy)]
pub struct Echo<'a>(pub &'a str);

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(ECHO_MAX) {
            None => f.write_str(self.0),
            Some((end, _)) => write!(f, "{}… ({} bytes)", &self.0[..end], self.0.len()),
        }
    }
}

/// `value` of `field`, refused as INVALID_ARGUMENT when longer than `max` bytes. O(1): call it
/// before parsing, looking up or formatting the value.
pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.len() > max {
        return Err(Status::invalid_argument(format!(
            "{field}: {} bytes is longer than the {max} allowed: {}",
            value.len(),
            Echo(value)
        )));
    }
    Ok(())
}

/// [`check_len`] with [`NAME_MAX`], for an ID or a name.
pub fn check_name(field: &str, value: &str) -> Result<(), Status> {
    check_len(field, value, NAME_MAX)
}

/// A trace filter's strings within bounds, before any selector is parsed. The tracer's Export
/// and the driver's StartSimulation both take one.
pub fn check_trace_filter(field: &str, filter: &TraceFilter) -> Result<(), Status> {
    for (name, values, max) in [
        ("include_namespaces", &filter.include_namespaces, NAME_MAX),
        ("exclude_namespaces", &filter.exclude_namespaces, NAME_MAX),
        (
            "include_label_selectors",
            &filter.include_label_selectors,
            VALUE_MAX,
        ),
        (
            "exclude_label_selectors",
            &filter.exclude_label_selectors,
            VALUE_MAX,
        ),
    ] {
        for value in values {
            check_len(&format!("{field}.{name}"), value, max)?;
        }
    }
    for gvk in &filter.include_kinds {
        for (name, value) in [
            ("group", &gvk.group),
            ("version", &gvk.version),
            ("kind", &gvk.kind),
        ] {
            check_name(&format!("{field}.include_kinds.{name}"), value)?;
        }
    }
    Ok(())
}

/// A configuration under test's strings within bounds, before any is parsed or handed to a
/// binary. The environment's Check/ApplyConfiguration and the driver's StartSimulation both
/// take one. cluster-autoscaler's flags get their exact bounds where they are parsed; here a
/// flag is at most a name, `=` and a value.
pub fn check_configuration(field: &str, configuration: &Configuration) -> Result<(), Status> {
    const FLAG_MAX: usize = NAME_MAX + 1 + VALUE_MAX;
    if let Some(scheduler) = &configuration.scheduler {
        check_len(
            &format!("{field}.scheduler.source"),
            &scheduler.source,
            VALUE_MAX,
        )?;
        check_len(
            &format!("{field}.scheduler.yaml"),
            &scheduler.yaml,
            TEXT_MAX,
        )?;
    }
    if let Some(provider) = &configuration.provider {
        check_len(
            &format!("{field}.provider.source"),
            &provider.source,
            VALUE_MAX,
        )?;
        check_len(&format!("{field}.provider.yaml"), &provider.yaml, TEXT_MAX)?;
    }
    for arg in &configuration.autoscaler_args {
        check_len(&format!("{field}.autoscaler_args"), arg, FLAG_MAX)?;
    }
    if let Some(recorded) = &configuration.recorded_autoscaler {
        check_len(
            &format!("{field}.recorded_autoscaler.source"),
            &recorded.source,
            VALUE_MAX,
        )?;
        for arg in &recorded.args {
            check_len(&format!("{field}.recorded_autoscaler.args"), arg, FLAG_MAX)?;
        }
    }
    Ok(())
}

/// `status` with its message cut to [`MESSAGE_MAX`] bytes (at a character boundary, saying how
/// long it was); code, details and metadata kept.
pub fn bounded(status: Status) -> Status {
    let message = status.message();
    if message.len() <= MESSAGE_MAX {
        return status;
    }
    let mut end = MESSAGE_MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = format!("{}… ({} bytes)", &message[..end], message.len());
    Status::with_details_and_metadata(
        status.code(),
        cut,
        status.details().to_vec().into(),
        status.metadata().clone(),
    )
}

/// Bounds the message of every error answered at once (a "trailers-only" response, which is
/// every refused request): a last guard for errors whose text echoes input the handler did not
/// check. A stream's error after its first message passes unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BoundedErrorsLayer;

impl<S> Layer<S> for BoundedErrorsLayer {
    type Service = BoundedErrors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BoundedErrors { inner }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct BoundedErrors<S> {
    inner: S,
}

impl<S, B, R> Service<http::Request<B>> for BoundedErrors<S>
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
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            bound_headers(response.headers_mut());
            Ok(response)
        })
    }
}

/// Cuts the `grpc-message` of a response's headers to [`MESSAGE_MAX`] decoded bytes.
fn bound_headers(headers: &mut http::HeaderMap) {
    // Percent-encoding at most triples a message: shorter headers decode under the bound.
    let long = headers
        .get("grpc-message")
        .is_some_and(|value| value.len() > MESSAGE_MAX);
    if !long {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    // Metadata stays where it is: only the status headers are rewritten.
    let status = bounded(Status::new(status.code(), status.message().to_owned()));
    if status.add_header(headers).is_err() {
        // Not expected (the message is percent-encoded); never let the long one through.
        headers.remove("grpc-message");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn echo_keeps_a_short_value_and_cuts_a_long_one_at_a_character() {
        assert_eq!(Echo("m5-large").to_string(), "m5-large");
        let exact = "x".repeat(ECHO_MAX);
        assert_eq!(Echo(&exact).to_string(), exact);
        let long = "é".repeat(100_000);
        let echoed = Echo(&long).to_string();
        assert_eq!(
            echoed,
            format!("{}… ({} bytes)", "é".repeat(ECHO_MAX), long.len())
        );
    }

    #[test]
    fn check_len_refuses_past_the_bound_naming_the_field_and_echoing_a_prefix() {
        assert!(check_len("id", &"a".repeat(10), 10).is_ok());
        let huge = "a".repeat(1 << 20);
        let status = check_len("id", &huge, 10).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().starts_with("id: 1048576 bytes"),
            "{status}"
        );
        assert!(status.message().len() < 200, "{}", status.message().len());
        assert!(check_name("name", &"n".repeat(NAME_MAX)).is_ok());
        assert!(check_name("name", &"n".repeat(NAME_MAX + 1)).is_err());
    }

    #[test]
    fn a_filter_or_configuration_with_one_oversized_string_is_refused_naming_it() {
        use ksim_proto::ksim::{env::v1::RecordedAutoscalerFlags, trace::v1::GroupVersionKind};
        let huge = "x".repeat(1 << 20);
        let fine = TraceFilter {
            include_namespaces: vec!["shop".into()],
            include_label_selectors: vec!["app in (a, b)".into()],
            ..Default::default()
        };
        assert!(check_trace_filter("filter", &fine).is_ok());
        let filter = TraceFilter {
            include_kinds: vec![GroupVersionKind {
                kind: huge.clone(),
                ..Default::default()
            }],
            ..fine
        };
        let status = check_trace_filter("spec.filter", &filter).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status
                .message()
                .starts_with("spec.filter.include_kinds.kind: 1048576 bytes"),
            "{status}"
        );
        let fine = Configuration {
            autoscaler_args: vec![format!("expander={}", "p".repeat(VALUE_MAX))],
            ..Default::default()
        };
        assert!(check_configuration("run.configuration", &fine).is_ok());
        let configuration = Configuration {
            recorded_autoscaler: Some(RecordedAutoscalerFlags {
                source: "file ca-flags.txt".into(),
                args: vec![huge],
            }),
            ..fine
        };
        let status = check_configuration("run.configuration", &configuration).unwrap_err();
        assert!(
            status
                .message()
                .starts_with("run.configuration.recorded_autoscaler.args: 1048576 bytes"),
            "{status}"
        );
    }

    #[test]
    fn bounded_cuts_a_long_message_at_a_character_and_keeps_the_code() {
        let short = Status::not_found("no trace abc");
        assert_eq!(bounded(short).message(), "no trace abc");
        let long = format!("x{}", "é".repeat(1 << 20));
        let cut = bounded(Status::failed_precondition(long.clone()));
        assert_eq!(cut.code(), Code::FailedPrecondition);
        assert!(
            cut.message().len() <= MESSAGE_MAX + 32,
            "{}",
            cut.message().len()
        );
        assert!(
            cut.message()
                .ends_with(&format!("… ({} bytes)", long.len()))
        );
        assert!(long.starts_with(cut.message().split('…').next().unwrap()));
    }

    #[test]
    fn the_layer_bounds_a_trailers_only_error_in_the_headers() {
        let mut headers = http::HeaderMap::new();
        let message = format!("bad name {}", "é".repeat(1 << 20));
        Status::invalid_argument(message.clone())
            .add_header(&mut headers)
            .unwrap();
        bound_headers(&mut headers);
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().starts_with("bad name é"), "{status}");
        assert!(status.message().len() <= MESSAGE_MAX + 32);
        // A short one is left as it is.
        let mut headers = http::HeaderMap::new();
        Status::not_found("no such group")
            .add_header(&mut headers)
            .unwrap();
        bound_headers(&mut headers);
        assert_eq!(
            Status::from_header_map(&headers).unwrap().message(),
            "no such group"
        );
    }
}
