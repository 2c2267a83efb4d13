//! `ksim-driver`: replays traces on a simulated cluster and reports on them; see
//! [`ksim_driver::runtime`].

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ksim_driver::runtime::Args::parse().run().await
}
