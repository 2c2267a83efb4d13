//! `ksim up`: the local environment, until Ctrl-C or SIGTERM.

use std::io::Write;

use anyhow::Context;
use ksim_testenv::ControlPlane;

pub async fn run() -> anyhow::Result<()> {
    let control_plane = ControlPlane::start()
        .await
        .context("starting the local control plane")?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "ksim: local control plane {} is up at {}",
        ksim_testenv::kubernetes_version(),
        control_plane.apiserver_url()
    )?;
    writeln!(
        out,
        "  export KUBECONFIG={}",
        control_plane.kubeconfig_path().display()
    )?;
    for (component, pid) in control_plane.pids() {
        writeln!(out, "  {component:<24} pid {pid}")?;
    }
    writeln!(out, "Press Ctrl-C to stop it.")?;
    drop(out);
    ksim_grpc::shutdown_signal().await?;
    drop(control_plane);
    Ok(())
}
