//! The Kubernetes side of the driver: the simulation root and lease, applying replayed
//! objects, seat Deployments, and watching what the simulated cluster does.

pub mod applier;
pub mod lease;
pub mod observer;
pub mod root;
pub mod seats;
