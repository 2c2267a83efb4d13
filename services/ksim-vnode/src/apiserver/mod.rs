//! The pool's Kubernetes adapter: every read and write of the apiserver goes through here.

mod group_store;
mod nodes;
mod pods;

pub use group_store::{GroupStore, StoredGroup};
pub use nodes::{NodeClient, Renewal};
pub use pods::PodClient;

/// True for "not found" answers, which deletes and renewals treat as done or gone.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}
