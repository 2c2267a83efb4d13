//! The signals that end a service: SIGTERM (how Kubernetes stops a pod) or SIGINT (Ctrl-C).

use crate::Error;

/// Resolves on the first SIGTERM (how Kubernetes stops a pod) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(Error::Signal)?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = interrupt.recv() => tracing::info!("SIGINT received, shutting down"),
    }
    Ok(())
}
