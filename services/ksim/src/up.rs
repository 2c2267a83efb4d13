//! `ksim up`: the local environment, until Ctrl-C or SIGTERM (which `ksim down` sends).

use std::{io::Write, path::PathBuf};

use clap::Args;

use crate::env::{
    EnvOptions, LocalEnv,
    services::{DEFAULT_PORT_BASE, MAX_PORT_BASE, MIN_PORT_BASE},
};

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Also start cluster-autoscaler against the cloud provider (needs its binary).
    #[arg(long, conflicts_with = "karpenter")]
    pub autoscaler: bool,
    /// Start the real Karpenter (its KWOK provider) as the node autoscaler instead, with the
    /// KWOKNodeClass `default` for your NodePools; the pool plays its nodes' kubelet. The
    /// embedded control plane only.
    #[arg(long, conflicts_with_all = ["kubeconfig", "context"])]
    pub karpenter: bool,
    /// An instance type Karpenter may launch, as a node skeleton (repeatable), priced by the
    /// provider config's `pricing.instanceTypes`; without any, the KWOK provider's own list.
    #[arg(
        long = "instance-type",
        value_name = "SKELETON",
        requires = "karpenter"
    )]
    pub instance_types: Vec<PathBuf>,
    /// Simulate on the existing cluster of this kubeconfig instead of the embedded control plane.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context of that existing cluster.
    #[arg(long)]
    pub context: Option<String>,
    /// The cloud provider's prices per instance type (for CA's price expander and the
    /// reports' costs) and per-group options, as YAML (`pricing:`, `nodeGroups:`).
    #[arg(long, value_name = "FILE")]
    pub provider_config: Option<PathBuf>,
    /// A cluster-autoscaler flag of the environment as FLAG=VALUE (repeatable), over CA's own
    /// defaults and under a recording's and a run's flags; only flags a run may set.
    #[arg(long = "autoscaler-flag", value_name = "FLAG=VALUE")]
    pub autoscaler_flags: Vec<String>,
    /// The tracer's gRPC port; the pool, cloud provider, driver and environment API take the
    /// next four, and each its metrics port 2100 above. Another environment runs beside this
    /// one with a base of its own and its own KSIM_STATE_DIR.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = DEFAULT_PORT_BASE,
        value_parser = clap::value_parser!(u16).range(i64::from(MIN_PORT_BASE)..=i64::from(MAX_PORT_BASE)),
    )]
    pub port_base: u16,
}

/// How often `ksim up` checks that its services are still running.
const SUPERVISE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    writeln!(out, "ksim: starting the local environment ...")?;
    let env = LocalEnv::start(EnvOptions {
        autoscaler: args.autoscaler,
        karpenter: args.karpenter,
        instance_types: args.instance_types,
        kubeconfig: args.kubeconfig,
        context: args.context,
        state_dir: None,
        provider_config: args.provider_config,
        autoscaler_flags: args.autoscaler_flags,
        port_base: Some(args.port_base),
    })
    .await?;
    print(&env, &mut out).await?;
    writeln!(out, "Press Ctrl-C (or run `ksim down`) to stop it.")?;
    let mut env = env;
    let signal = ksim_grpc::shutdown_signal();
    tokio::pin!(signal);
    let mut check = tokio::time::interval(SUPERVISE_EVERY);
    let signal = loop {
        tokio::select! {
            signal = &mut signal => break signal,
            _ = check.tick() => {
                for event in env.supervise().await {
                    writeln!(out, "ksim: {event}")?;
                }
            }
        }
    };
    writeln!(out, "ksim: stopping ...")?;
    env.shutdown().await;
    signal?;
    Ok(())
}

/// How to reach a running environment.
pub async fn print(env: &LocalEnv, out: &mut impl Write) -> anyhow::Result<()> {
    match env.apiserver_url() {
        Some(apiserver_url) => writeln!(
            out,
            "ksim: local control plane {} at {apiserver_url}",
            ksim_localenv::kubernetes_version(),
        )?,
        None => writeln!(out, "ksim: using the existing cluster")?,
    }
    writeln!(
        out,
        "  export KUBECONFIG={}",
        env.kubeconfig_path().display()
    )?;
    match crate::kubectl::path() {
        Ok(kubectl) => writeln!(
            out,
            "  kubectl    {}  (or: ksim kubectl get nodes)",
            kubectl.display()
        )?,
        Err(error) => writeln!(out, "  kubectl    none: {error:#}")?,
    }
    for (spec, pid, log) in env.services().await {
        writeln!(
            out,
            "  {:<10} {}  pid {}  (metrics {}/metrics, log {})",
            spec.name,
            spec.url(),
            pid.unwrap_or_default(),
            spec.admin_url(),
            log.display()
        )?;
    }
    if let Some((pid, metrics_url, log)) = env.karpenter().await {
        writeln!(
            out,
            "  {:<10} {}  pid {pid}  (metrics {metrics_url}/metrics, log {})",
            "karpenter",
            ksim_localenv::karpenter::karpenter_version(),
            log.display()
        )?;
    }
    if let Some((pid, metrics_url, log)) = env.autoscaler().await {
        writeln!(
            out,
            "  {:<10} pid {pid}  (metrics {metrics_url}, log {})",
            "autoscaler",
            log.display()
        )?;
    }
    let driver = env.urls().driver.trim_start_matches("http://").to_owned();
    writeln!(out, "  try: grpcurl -plaintext {driver} list")?;
    writeln!(out, "       ksim run <TRACE_FILE>")?;
    writeln!(out, "  state: {}", env.state_dir().display())?;
    Ok(())
}
