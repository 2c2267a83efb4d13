//! `ksim-env`: the local environment, until SIGINT or SIGTERM; see [`ksim_env::runtime`].

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    ksim_env::runtime::Args::parse().run().await
}
