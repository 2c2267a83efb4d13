//! The Kubernetes side of the driver: the simulation root and lease, applying replayed
//! objects, seat Deployments, watching what the simulated cluster does, and giving started pods
//! their recorded lifetimes.

pub mod applier;
pub mod launch_lifetimes;
pub mod lease;
pub mod observer;
pub mod root;
pub mod seats;
