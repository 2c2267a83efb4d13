//! `ksim down`: stops the environment a `ksim up` recorded in `env.json`.
//!
//! The file names a pid, and a pid outlives its process: once `ksim up` is gone it may be any
//! other process's, and the file may have been edited. So only a pid that can be a process is
//! signalled, and only when its process is the one `ksim up` recorded (start time and command
//! line, `EnvState::process`).

use std::{
    io::Write,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::bail;

use ksim_localenv::environment::{
    services::{is_alive, terminate},
    state::{self, EnvState, ProcessIdentity},
};

/// How long `ksim up` gets to stop its services and cluster after SIGTERM.
const DEADLINE: Duration = Duration::from_secs(30);

pub async fn run() -> anyhow::Result<()> {
    let state_dir = state::state_dir()?;
    stop(&state_dir, &mut std::io::stdout(), terminate).await
}

/// Why `ksim down` does not signal the pid `env.json` names.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    /// kill(2) reads 0 as its caller's process group, -1 as every process it may signal and
    /// other negatives as groups; 1 is init.
    #[error("pid {0} cannot be an environment's process")]
    Impossible(i64),
    #[error("it does not say which process pid {0} was (an older ksim wrote it)")]
    Unrecorded(u32),
    #[error(
        "pid {pid} is another process now: it started at {now} clock ticks after boot, the \
         environment at {recorded}"
    )]
    StartTime { pid: u32, recorded: u64, now: u64 },
    #[error("pid {pid} is another process now: it runs `{}`, the environment ran `{}`",
        now.join(" "), recorded.join(" "))]
    Cmdline {
        pid: u32,
        recorded: Vec<String>,
        now: Vec<String>,
    },
}

/// `pid` if it can be a process other than init: a positive pid_t above 1.
fn signallable(pid: i64) -> Result<u32, Refusal> {
    match i32::try_from(pid) {
        Ok(valid) if valid > 1 => u32::try_from(valid).map_err(|_| Refusal::Impossible(pid)),
        _ => Err(Refusal::Impossible(pid)),
    }
}

/// Whether the process `now` at `pid` is the one `ksim up` recorded.
fn same_process(
    pid: u32,
    recorded: Option<&ProcessIdentity>,
    now: &ProcessIdentity,
) -> Result<(), Refusal> {
    let recorded = recorded.ok_or(Refusal::Unrecorded(pid))?;
    if recorded.start_time != now.start_time {
        return Err(Refusal::StartTime {
            pid,
            recorded: recorded.start_time,
            now: now.start_time,
        });
    }
    if recorded.cmdline != now.cmdline {
        return Err(Refusal::Cmdline {
            pid,
            recorded: recorded.cmdline.clone(),
            now: now.cmdline.clone(),
        });
    }
    Ok(())
}

/// Stops the environment recorded in `state_dir`, sending its process SIGTERM with `signal`
/// only once it is proven to be that environment's.
async fn stop(state_dir: &Path, out: &mut impl Write, signal: impl Fn(u32)) -> anyhow::Result<()> {
    let path = EnvState::path(state_dir);
    let Some(env) = EnvState::read(state_dir)? else {
        bail!(
            "no environment is up (no {}); start one with `ksim up`",
            path.display()
        );
    };
    // Before anything reaches the pid, even `kill -0`.
    let pid = signallable(i64::from(env.pid)).map_err(|refusal| {
        anyhow::anyhow!(
            "{}: {refusal}; nothing was signalled; remove the file if no environment is up",
            path.display()
        )
    })?;
    if !is_alive(pid) {
        state::remove(state_dir)?;
        writeln!(
            out,
            "ksim: the environment (pid {pid}) had already stopped; removed its state file"
        )?;
        return Ok(());
    }
    let now = ProcessIdentity::of(pid).map_err(|error| {
        anyhow::anyhow!(
            "{}: cannot tell whether pid {pid} is the environment ({error}); nothing was signalled",
            path.display()
        )
    })?;
    match same_process(pid, env.process.as_ref(), &now) {
        Ok(()) => {}
        Err(refusal @ Refusal::Unrecorded(_)) => bail!(
            "{}: {refusal}, so it is not signalled; if `ps -o args= -p {pid}` shows a `ksim up`, \
             stop it with Ctrl-C or `kill {pid}`, then remove the file",
            path.display()
        ),
        // The recorded process has exited (its pid went to another): as for a pid that runs
        // nothing, the file is stale.
        Err(refusal) => {
            state::remove(state_dir)?;
            bail!(
                "{} was stale: {refusal}; nothing was signalled, the state file was removed",
                path.display()
            );
        }
    }
    let died = state::supervision(state_dir);
    if !died.is_empty() {
        writeln!(out, "ksim: while it was up:")?;
        for line in &died {
            writeln!(out, "  {line}")?;
        }
    }
    signal(pid);
    let started = Instant::now();
    // Until it exits; a process that took its pid since is not waited for.
    while is_alive(pid)
        && ProcessIdentity::of(pid)
            .is_ok_and(|process| same_process(pid, Some(&now), &process).is_ok())
    {
        if started.elapsed() > DEADLINE {
            bail!(
                "the environment (pid {pid}) is still running {}s after SIGTERM",
                DEADLINE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // `ksim up` removes it itself on a clean stop; this covers the rest.
    state::remove(state_dir)?;
    writeln!(out, "ksim: stopped the environment (pid {pid})")?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use ksim_localenv::environment::state::testing::{Unrelated, write_state};

    fn identity(start_time: u64, cmdline: &[&str]) -> ProcessIdentity {
        ProcessIdentity {
            start_time,
            cmdline: cmdline.iter().map(|arg| (*arg).to_owned()).collect(),
        }
    }

    #[test]
    fn pids_that_cannot_be_the_environment_are_refused() {
        // 0: kill(0) is the caller's own group; -1 and u32::MAX (as pid_t, -1): every process.
        for pid in [0, 1, -1, -2, i64::from(u32::MAX), i64::from(i32::MAX) + 1] {
            assert_eq!(signallable(pid), Err(Refusal::Impossible(pid)), "{pid}");
        }
        assert_eq!(signallable(2), Ok(2));
        assert_eq!(signallable(4242), Ok(4242));
        assert_eq!(
            signallable(i64::from(i32::MAX)),
            Ok(u32::try_from(i32::MAX).unwrap())
        );
        assert_eq!(
            Refusal::Impossible(4_294_967_295).to_string(),
            "pid 4294967295 cannot be an environment's process"
        );
    }

    #[test]
    fn only_the_recorded_start_time_and_command_line_are_the_environment() {
        let up = identity(1000, &["ksim", "up"]);
        assert_eq!(same_process(42, Some(&up), &up), Ok(()));
        let later = identity(2000, &["ksim", "up"]);
        assert_eq!(
            same_process(42, Some(&up), &later),
            Err(Refusal::StartTime {
                pid: 42,
                recorded: 1000,
                now: 2000
            })
        );
        let other = identity(1000, &["sleep", "30"]);
        let refusal = same_process(42, Some(&up), &other).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "pid 42 is another process now: it runs `sleep 30`, the environment ran `ksim up`"
        );
        assert_eq!(
            same_process(42, None, &up),
            Err(Refusal::Unrecorded(42)),
            "a file without the identity proves nothing"
        );
    }

    #[tokio::test]
    async fn an_unrelated_process_at_the_recorded_pid_is_not_signalled() {
        let mut sleep = Unrelated::spawn();
        let pid = sleep.pid();
        let real = ProcessIdentity::of(pid).unwrap();
        let up = identity(real.start_time, &["ksim", "up"]);
        let earlier = identity(real.start_time.saturating_sub(1), &["sleep", "30"]);
        for (recorded, removed, says) in [
            (
                Some(up),
                true,
                "it runs `sleep 30`, the environment ran `ksim up`",
            ),
            (Some(earlier), true, "clock ticks after boot"),
            (None, false, "an older ksim wrote it"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write_state(dir.path(), pid, recorded);
            let mut out = Vec::new();
            let error = stop(dir.path(), &mut out, terminate).await.unwrap_err();
            let error = format!("{error:#}");
            assert!(error.contains(says), "{error}");
            assert!(error.contains("nothing was signalled") || error.contains("not signalled"));
            assert!(sleep.running(), "{error}");
            assert_eq!(!EnvState::path(dir.path()).exists(), removed, "{error}");
        }
        // Still running after the refusals, not merely not yet reaped.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(sleep.running());
    }

    #[tokio::test]
    async fn the_recorded_process_is_stopped_and_its_file_removed() {
        let mut sleep = Unrelated::spawn();
        let pid = sleep.pid();
        let dir = tempfile::tempdir().unwrap();
        write_state(dir.path(), pid, Some(ProcessIdentity::of(pid).unwrap()));
        let mut out = Vec::new();
        stop(dir.path(), &mut out, terminate).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("ksim: stopped the environment (pid {pid})\n")
        );
        assert!(!sleep.running());
        assert!(!EnvState::path(dir.path()).exists());
    }

    #[tokio::test]
    async fn impossible_pids_in_the_file_are_refused_before_any_signal() {
        for pid in [0, 1, u32::MAX, u32::try_from(i32::MAX).unwrap() + 1] {
            let dir = tempfile::tempdir().unwrap();
            write_state(dir.path(), pid, Some(identity(1, &["ksim", "up"])));
            let signalled = RefCell::new(Vec::new());
            let mut out = Vec::new();
            let error = stop(dir.path(), &mut out, |pid| signalled.borrow_mut().push(pid))
                .await
                .unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "{}: pid {pid} cannot be an environment's process; nothing was signalled; \
                     remove the file if no environment is up",
                    EnvState::path(dir.path()).display()
                )
            );
            assert!(signalled.borrow().is_empty());
            assert!(EnvState::path(dir.path()).exists());
        }
    }
}
