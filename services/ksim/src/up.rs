//! `ksim up`: the local environment in the foreground, until Ctrl-C or SIGTERM (which `ksim
//! down` sends). The environment is the `ksim-env` service; `ksim up` parses its flags and
//! becomes it. The flags are `ksim_localenv::environment::EnvironmentOptions`, the same
//! `ksim-env` parses.

use anyhow::Context;
use ksim_localenv::environment::{EnvironmentOptions, process};

/// Becomes `ksim-env` (exec: the same process, so Ctrl-C and `ksim down` reach it), which runs
/// the environment in the foreground; returns only if it could not.
pub fn run(options: &EnvironmentOptions, log: &ksim_grpc::LogArgs) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let binary = process::binary()?;
    let format = clap::ValueEnum::to_possible_value(&log.log_format)
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default();
    let error = std::process::Command::new(&binary)
        .args(options.args())
        .args(["--log-format", &format, "--log-filter", &log.log_filter])
        .exec();
    Err(error).with_context(|| format!("running {}", binary.display()))
}
