//! `ksim down`: stops the environment a `ksim up` recorded in `env.json`.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use anyhow::bail;

use crate::env::{
    services::{is_alive, terminate},
    state::{self, EnvState},
};

/// How long `ksim up` gets to stop its services and cluster after SIGTERM.
const DEADLINE: Duration = Duration::from_secs(30);

pub async fn run() -> anyhow::Result<()> {
    let state_dir = state::state_dir()?;
    let Some(env) = EnvState::read(&state_dir)? else {
        bail!(
            "no environment is up (no {}); start one with `ksim up`",
            EnvState::path(&state_dir).display()
        );
    };
    let mut out = std::io::stdout();
    if !is_alive(env.pid) {
        state::remove(&state_dir)?;
        writeln!(
            out,
            "ksim: the environment (pid {}) had already stopped; removed its state file",
            env.pid
        )?;
        return Ok(());
    }
    let died = state::supervision(&state_dir);
    if !died.is_empty() {
        writeln!(out, "ksim: while it was up:")?;
        for line in &died {
            writeln!(out, "  {line}")?;
        }
    }
    terminate(env.pid);
    let started = Instant::now();
    while is_alive(env.pid) {
        if started.elapsed() > DEADLINE {
            bail!(
                "the environment (pid {}) is still running {}s after SIGTERM",
                env.pid,
                DEADLINE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // `ksim up` removes it itself on a clean stop; this covers the rest.
    state::remove(&state_dir)?;
    writeln!(out, "ksim: stopped the environment (pid {})", env.pid)?;
    Ok(())
}
