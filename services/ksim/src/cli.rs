//! The command line's shape: every subcommand and flag, as clap parses them.

use clap::{Parser, Subcommand};

/// Replays recorded Kubernetes cluster activity on a simulated cluster of virtual nodes,
/// with the real scheduler, controllers and cluster-autoscaler acting on it.
#[derive(Debug, Parser)]
#[command(name = "ksim", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    #[command(flatten)]
    pub log: LogArgs,
}

/// Log records, on stderr: stdout holds only what a command prints (progress, reports).
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Log what the environment and the commands do: `-v` info, `-vv` debug (default: warnings
    /// only), before the command (`ksim -v demo`; after `kubectl`, `-v` is kubectl's). The
    /// services `ksim up` starts log to the files it names.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log line format.
    #[arg(long, env = "KSIM_LOG_FORMAT", value_enum, default_value_t = ksim_grpc::LogFormat::Text)]
    pub log_format: ksim_grpc::LogFormat,

    /// Which logs to keep, in `RUST_LOG` syntax; instead of `-v`.
    #[arg(long, env = "RUST_LOG")]
    pub log_filter: Option<String>,
}

impl LogArgs {
    /// As the shared telemetry setup takes them.
    pub fn telemetry(&self) -> ksim_grpc::LogArgs {
        let by_verbosity = match self.verbose {
            // kube's client logs each failed request as an error before returning it; the
            // command says what failed, in one line, itself.
            0 => "warn,kube_client=off",
            1 => "info",
            _ => "debug",
        };
        ksim_grpc::LogArgs {
            log_format: self.log_format,
            log_filter: self
                .log_filter
                .clone()
                .unwrap_or_else(|| by_verbosity.to_owned()),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the local environment (a real etcd, kube-apiserver, kube-controller-manager and
    /// kube-scheduler on loopback, and the ksim services) and keep it running until Ctrl-C.
    Up(ksim_localenv::environment::EnvironmentOptions),
    /// Stop the environment `ksim up` started.
    Down,
    /// Replay a trace on the simulated cluster through the driver and print its report.
    Run(Box<crate::run::RunArgs>),
    /// Print the report of a simulation.
    Report {
        /// The simulation's id, as `ksim run` printed it (with --pod or --owner, also a report
        /// directory, holding its report.json).
        id: String,
        /// Print the whole report as JSON instead of a summary.
        #[arg(long, conflicts_with_all = ["pod", "owner", "html"])]
        json: bool,
        /// Write the report as one self-contained web page here (charts to hover, tables to
        /// sort, the explained pods to search; nothing fetched when it is viewed). Needs the
        /// charting library deploy/uplot/fetch.sh caches.
        #[arg(long, value_name = "FILE.html", conflicts_with_all = ["pod", "owner"])]
        html: Option<std::path::PathBuf>,
        /// Print why this pod went where it did (a run with --explain): NAMESPACE/NAME, its
        /// recorded namespace.
        #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with = "owner")]
        pod: Option<String>,
        /// The same for every explained pod of a workload: KIND/NAME (e.g. Deployment/web), or
        /// NAMESPACE/KIND/NAME.
        #[arg(long, value_name = "KIND/NAME")]
        owner: Option<String>,
        #[command(flatten)]
        driver: crate::driver::DriverArgs,
    },
    /// Put two or more reports side by side: node-hours, cost, pending time, packing, ...,
    /// each with its difference to the first (the baseline).
    Compare(crate::compare::CompareArgs),
    /// What-if experiments: variants of a configuration on one trace, repeated, compared and
    /// asserted over.
    #[command(subcommand)]
    Experiment(crate::experiment::ExperimentCommand),
    /// Run the demo: start the local environment, replay the bundled trace (a web Deployment
    /// scaling 2 -> 20 -> 5 and a Job) through the driver, print the report, stop.
    Demo {
        /// Replay speed; the bundled trace is 130 s long.
        #[arg(long, default_value_t = 4.0)]
        speed: f64,
        /// Write the bundled trace to this file and exit (for `ksim run` or an experiment).
        #[arg(long, value_name = "FILE")]
        write_trace: Option<std::path::PathBuf>,
    },
    /// Trace files: export from and import into a tracer store, inspect, convert, transform,
    /// validate (and explain its rules), show.
    #[command(subcommand)]
    Trace(Box<crate::trace::TraceCommand>),
    /// Run kubectl (built with the local control plane, same version) against the environment
    /// `ksim up` started: `ksim kubectl get nodes`. Exits with kubectl's status.
    #[command(disable_help_flag = true)]
    Kubectl {
        /// kubectl's arguments, as kubectl takes them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Print a shell completion script, e.g. `ksim completions bash > ~/.local/share/bash-completion/completions/ksim`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}
