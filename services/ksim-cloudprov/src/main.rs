//! `ksim-cloudprov`: serves cluster-autoscaler's externalgrpc API; see
//! [`ksim_cloudprov::runtime`].

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ksim_cloudprov::runtime::Args::parse().run().await
}
