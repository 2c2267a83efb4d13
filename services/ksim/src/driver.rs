//! The driver's gRPC API as the CLI reaches it.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ksim_proto::ksim::driver::v1::{GetReportRequest, Report, driver_client::DriverClient};
use tonic::transport::{Channel, Endpoint};

/// Reports carry a bucket per second of replay; hours of it exceed tonic's 4 MiB default.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// Where the driver's gRPC API is.
#[derive(Debug, Clone, Args)]
pub struct DriverArgs {
    /// The driver's gRPC API (`ksim up` serves it on port 7064).
    #[arg(
        long = "driver",
        value_name = "URL",
        env = "KSIM_DRIVER_URL",
        default_value = "http://127.0.0.1:7064"
    )]
    pub url: String,
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
    anyhow::anyhow!("{what}: {:?}: {}", status.code(), status.message())
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
