//! `ksim up`: the local environment in the foreground, until Ctrl-C or SIGTERM (which `ksim
//! down` sends). The environment is the `ksim-env` service; `ksim up` parses its flags and
//! becomes it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ksim_localenv::environment::{
    EnvironmentOptions, process,
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

impl UpArgs {
    /// The environment these flags ask for, in the default state directory (KSIM_STATE_DIR).
    fn options(self) -> EnvironmentOptions {
        EnvironmentOptions {
            autoscaler: self.autoscaler,
            karpenter: self.karpenter,
            instance_types: self.instance_types,
            kubeconfig: self.kubeconfig,
            context: self.context,
            state_dir: None,
            provider_config: self.provider_config,
            autoscaler_flags: self.autoscaler_flags,
            port_base: Some(self.port_base),
        }
    }
}

/// Becomes `ksim-env` (exec: the same process, so Ctrl-C and `ksim down` reach it), which runs
/// the environment in the foreground; returns only if it could not.
pub fn run(args: UpArgs, log: &ksim_grpc::LogArgs) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let binary = process::binary()?;
    let format = clap::ValueEnum::to_possible_value(&log.log_format)
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default();
    let error = std::process::Command::new(&binary)
        .args(args.options().args())
        .args(["--log-format", &format, "--log-filter", &log.log_filter])
        .exec();
    Err(error).with_context(|| format!("running {}", binary.display()))
}
