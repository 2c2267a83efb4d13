//! An experiment's runs fanned out over a cluster (`ksim experiment run --cluster`): one
//! Indexed Job whose pods each run one run in an environment of their own, the experiment and
//! its files going to them as a bundle and their reports coming back, both through ConfigMaps.
//! The CLI decides, applies and follows; this library holds what it and the runs' pods share.
//!
//! - [`bundle`]: the experiment and its files as one blob, and its chunks.
//! - [`store`]: blobs in the namespace's ConfigMaps, written and read back whole.
//! - [`job`]: the Job, its pods' resources and security, its owner reference.
//! - [`runs`]: what each run is doing, read from the Job and its pods.

pub mod bundle;
pub mod job;
pub mod runs;
pub mod store;
