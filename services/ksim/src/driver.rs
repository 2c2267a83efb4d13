//! The driver's gRPC API as the CLI reaches it.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ksim_proto::ksim::driver::v1::{GetReportRequest, Report, driver_client::DriverClient};
use tonic::transport::{Channel, Endpoint};

/// Reports carry a bucket per second of replay; hours of it exceed tonic's 4 MiB default.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// Where the driver's gRPC API is.
#[derive(Debug, Clone, Args)]
pub struct DriverArgs {
    /// The driver's gRPC API [default: the driver of the environment `ksim up` runs in
    /// KSIM_STATE_DIR, else http://127.0.0.1:7064]
    #[arg(long = "driver", value_name = "URL", env = "KSIM_DRIVER_URL")]
    pub url: Option<String>,
}

impl DriverArgs {
    /// The URL given, else the running environment's driver, else the default environment's.
    pub fn resolve(&self) -> anyhow::Result<String> {
        Ok(ksim_localenv::environment::state::service_url(
            self.url.as_deref(),
            |urls| urls.driver,
            ksim_localenv::environment::services::DRIVER,
        )?)
    }
}

pub async fn connect(url: &str) -> anyhow::Result<DriverClient<Channel>> {
    let channel = Endpoint::from_shared(url.to_owned())
        .with_context(|| format!("invalid driver URL {url:?}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("cannot reach the driver at {url} (is `ksim up` running?)"))?;
    Ok(DriverClient::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
        // Trace files travel in the request; the driver's own limit decides, with its message.
        .max_encoding_message_size(usize::MAX))
}

/// A status as one line: code and message, without tonic's metadata dump.
pub fn status_error(what: &str, status: &tonic::Status) -> anyhow::Error {
    if lost_connection(status) {
        return anyhow::anyhow!(
            "{what}: the driver stopped answering (did it die? see its log): {}",
            status.message()
        );
    }
    anyhow::anyhow!("{what}: {:?}: {}", status.code(), status.message())
}

/// Whether `status` is the client's own, for a connection that broke: what a driver killed
/// mid-call looks like ("h2 protocol error", a reset or closed connection), not an answer.
fn lost_connection(status: &tonic::Status) -> bool {
    const HINTS: &[&str] = &[
        "h2 protocol error",
        "transport error",
        "connection reset",
        "connection refused",
        "broken pipe",
        "stream closed",
        "error reading a body from connection",
    ];
    matches!(
        status.code(),
        tonic::Code::Unknown | tonic::Code::Unavailable | tonic::Code::Internal
    ) && {
        let message = status.message().to_ascii_lowercase();
        HINTS.iter().any(|hint| message.contains(hint))
    }
}

pub async fn get_report(client: &mut DriverClient<Channel>, id: &str) -> anyhow::Result<Report> {
    client
        .get_report(GetReportRequest { id: id.to_owned() })
        .await
        .map_err(|status| status_error(&format!("getting the report of {id}"), &status))?
        .into_inner()
        .report
        .context("the driver answered without a report")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_reads_as_a_driver_that_stopped_answering() {
        let died =
            tonic::Status::unknown("h2 protocol error: error reading a body from connection");
        let said = status_error("watching simulation x", &died).to_string();
        assert!(said.contains("the driver stopped answering"), "{said}");

        // The driver's own answers keep their code.
        let busy = tonic::Status::unavailable("apiserver: timed out");
        let said = status_error("starting the simulation", &busy).to_string();
        assert_eq!(
            said,
            "starting the simulation: Unavailable: apiserver: timed out"
        );
    }
}
