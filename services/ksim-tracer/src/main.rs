//! `ksim-tracer`: records a real cluster's object changes and serves them as traces; see
//! [`ksim_tracer::runtime`].

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ksim_tracer::runtime::Args::parse().run().await
}
