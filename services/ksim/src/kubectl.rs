//! `ksim kubectl ...`: the kubectl built with the control plane, run against the environment
//! `ksim up` recorded in `env.json`.

use std::{ffi::OsString, path::PathBuf, process::ExitCode};

use anyhow::Context;

use ksim_localenv::environment::state::{self, EnvState};

/// Runs kubectl with `args` and the environment's kubeconfig; its exit status is ksim's.
pub fn run(args: &[OsString]) -> anyhow::Result<ExitCode> {
    let state_dir = state::state_dir()?;
    let env = EnvState::read(&state_dir)?.with_context(|| {
        format!(
            "no environment is up (no {}); start one with `ksim up`",
            EnvState::path(&state_dir).display()
        )
    })?;
    let kubectl = path()?;
    let status = std::process::Command::new(&kubectl)
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .status()
        .with_context(|| format!("running {}", kubectl.display()))?;
    // A kubectl killed by a signal has no code: a failure all the same.
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// The kubectl beside the control-plane binaries (deploy/control-plane/build.sh builds it).
pub fn path() -> anyhow::Result<PathBuf> {
    Ok(ksim_localenv::ControlPlaneBinaries::locate()?.kubectl()?)
}
