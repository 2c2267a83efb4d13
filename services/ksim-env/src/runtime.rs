//! The flags of `ksim-env` (those of `ksim up`, which runs it) and the one way to start it:
//! [`Args::run`] starts the environment, prints how to reach it, supervises it until SIGINT or
//! SIGTERM (which `ksim down` sends), and stops it in order.

use std::{io::Write, process::ExitCode};

use clap::Parser;
use ksim_localenv::environment::EnvironmentOptions;

use crate::environment::LocalEnv;

/// How often the environment checks that its services are still running.
const SUPERVISE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The local environment: a cluster, the ksim services and the node autoscaler, supervised,
/// with the environment API; until SIGINT or SIGTERM.
#[derive(Debug, Parser)]
#[command(name = "ksim-env", version)]
pub struct Args {
    #[command(flatten)]
    pub environment: EnvironmentOptions,
    #[command(flatten)]
    pub log: ksim_grpc::LogArgs,
}

impl Args {
    /// Runs the environment until a signal; a failure is one line on stderr and exit 1.
    pub async fn run(self) -> ExitCode {
        let _telemetry = match ksim_grpc::init_cli_telemetry("ksim-env", &self.log) {
            Ok(guard) => guard,
            Err(error) => return fail(&error.into()),
        };
        match serve(self.environment).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        }
    }
}

fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("ksim-env: error: {}", ksim_grpc::error_line(error.as_ref()));
    ExitCode::FAILURE
}

async fn serve(options: EnvironmentOptions) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    writeln!(out, "ksim: starting the local environment ...")?;
    // Listened for from the start: a signal while it starts stops what has started.
    let signal = ksim_grpc::shutdown_signal();
    tokio::pin!(signal);
    let env = tokio::select! {
        env = LocalEnv::start(options) => env?,
        signal = &mut signal => {
            signal?;
            anyhow::bail!("stopped while starting");
        }
    };
    print(&env, &mut out).await?;
    writeln!(out, "Press Ctrl-C (or run `ksim down`) to stop it.")?;
    let mut env = env;
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
async fn print(env: &LocalEnv, out: &mut impl Write) -> anyhow::Result<()> {
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
    match ksim_localenv::ControlPlaneBinaries::locate().and_then(|binaries| binaries.kubectl()) {
        Ok(kubectl) => writeln!(
            out,
            "  kubectl    {}  (or: ksim kubectl get nodes)",
            kubectl.display()
        )?,
        Err(error) => writeln!(out, "  kubectl    none: {error}")?,
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
    writeln!(
        out,
        "  {:<10} {}  pid {}  (metrics {}/metrics)",
        "environment",
        env.urls().environment,
        std::process::id(),
        env.environment_admin_url(),
    )?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// What a client starts (`EnvironmentOptions::args`) is what this service parses: every
    /// option survives the trip, so `ksim up`, `ksim demo` and an experiment's runs get the
    /// environment they asked for.
    #[test]
    fn every_option_a_client_writes_reads_back() {
        let options = EnvironmentOptions {
            autoscaler: false,
            karpenter: true,
            instance_types: vec!["a.yaml".into(), "b.yaml".into()],
            kubeconfig: None,
            context: None,
            state_dir: Some("/state".into()),
            provider_config: Some("p.yaml".into()),
            autoscaler_flags: vec!["scan-interval=10s".into(), "expander=price".into()],
            port_base: 8000,
        };
        let parse = |options: &EnvironmentOptions| {
            let mut argv = vec![std::ffi::OsString::from("ksim-env")];
            argv.extend(options.args());
            Args::try_parse_from(argv).unwrap().environment
        };
        assert_eq!(parse(&options), options);
        let existing = EnvironmentOptions {
            autoscaler: true,
            kubeconfig: Some("/kube/config".into()),
            context: Some("prod".into()),
            state_dir: Some("/state".into()),
            ..EnvironmentOptions::default()
        };
        assert_eq!(parse(&existing), existing);
    }
}
