//! `ksim-cloudprov`: serves cluster-autoscaler's externalgrpc API. Wiring only.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use ksim_cloudprov::{
    apiserver::ApiCluster, config::ProviderArgs, grpc::CloudProviderService, index::Index,
    provider::Provider, watches,
};
use ksim_grpc::{GrpcServer, ServeArgs};

/// The ksim cloud provider: cluster-autoscaler scales Deployments of virtual-node seats.
#[derive(Debug, Parser)]
#[command(name = "ksim-cloudprov", version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    provider: ProviderArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = ksim_grpc::init_telemetry("ksim-cloudprov", &args.serve.log)?;
    let settings = args.provider.settings()?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let index = Index::new(args.provider.default_max_size);
    let _watches = watches::spawn(client.clone(), index.clone());
    let provider = Arc::new(Provider::new(index, ApiCluster::new(client), settings));
    GrpcServer::new(args.serve)
        .add_service(CloudProviderService::new(provider).into_server())
        .serve()
        .await?;
    Ok(())
}
