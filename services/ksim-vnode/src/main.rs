//! `ksim-vnode`: serves the virtual node pool; see [`ksim_vnode::runtime`].

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ksim_vnode::runtime::Args::parse().run().await
}
