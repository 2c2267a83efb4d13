//! The pool's Kubernetes adapter: every read and write of the apiserver goes through here.

mod group_store;
mod nodes;
mod pods;

pub use group_store::{GroupStore, StoredGroup};
pub use nodes::{NodeClient, Published, Renewal};
pub use pods::PodClient;
