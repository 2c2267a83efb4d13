use clap::{Parser, Subcommand};

/// Replays recorded Kubernetes cluster activity on a simulated cluster of virtual nodes,
/// with the real scheduler, controllers and cluster-autoscaler acting on it.
#[derive(Debug, Parser)]
#[command(name = "ksim", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    #[command(flatten)]
    pub log: ksim_grpc::LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the local environment (a real etcd, kube-apiserver, kube-controller-manager and
    /// kube-scheduler on loopback) and keep it running until Ctrl-C.
    Up,
    /// Run the demo on the local environment: virtual nodes and a workload on them.
    Demo,
    /// Trace files: export from and import into a tracer store, inspect, convert.
    #[command(subcommand)]
    Trace(Box<crate::trace::TraceCommand>),
}
