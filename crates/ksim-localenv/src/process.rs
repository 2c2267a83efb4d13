//! A component process, killed by the PID this crate started when dropped.

use std::{
    fs::File,
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use crate::Error;

#[derive(Debug)]
pub struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
    /// Where the component serves its API, health and metrics, once known.
    url: Option<String>,
}

impl Process {
    /// Starts `binary` with `args`, stdout and stderr going to `<log_dir>/<name>.log`.
    pub fn spawn(
        name: &'static str,
        binary: &Path,
        args: &[String],
        log_dir: &Path,
    ) -> Result<Self, Error> {
        Self::spawn_with_env(name, binary, args, &[], log_dir)
    }

    /// As [`Process::spawn`], with `env` added to the inherited environment (for a component
    /// that takes its configuration from variables, such as Karpenter's `KUBECONFIG`).
    pub fn spawn_with_env(
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self, Error> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).map_err(Error::io("cannot create", &log))?;
        let err = out.try_clone().map_err(Error::io("cannot reopen", &log))?;
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(Error::io("cannot start", binary))?;
        tracing::debug!(component = name, pid = child.id(), "started");
        Ok(Self {
            name,
            child,
            log,
            url: None,
        })
    }

    pub fn with_url(mut self, url: String) -> Self {
        self.url = Some(url);
        self
    }

    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status, once the process has exited (reaped, so no zombie is left).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// An error if the process has already exited, with the end of its log.
    pub fn check_running(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(Error::Exited {
                component: self.name,
                status,
                log_tail: self.log_tail(),
            }),
            Ok(None) => Ok(()),
            Err(source) => Err(Error::Io {
                action: "cannot check",
                path: PathBuf::from(self.name),
                source,
            }),
        }
    }

    /// The last lines of the component's log, for error messages.
    pub fn log_tail(&self) -> String {
        const TAIL_BYTES: u64 = 4096;
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log) {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text.lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Only the PID this process started is ever signalled; never anything found by name.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
