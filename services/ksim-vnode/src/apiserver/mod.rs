//! The pool's Kubernetes adapter: every read and write of the apiserver goes through here.

mod group_store;
mod nodes;
mod pods;

pub use group_store::{GroupStore, StoredGroup};
pub use nodes::{NodeClient, Published, Renewal};
pub use pods::PodClient;

/// The recorder of the pool's events, which name it as their reporting instance.
fn recorder(client: kube::Client, pool: &str) -> kube::runtime::events::Recorder {
    let reporter = kube::runtime::events::Reporter {
        controller: crate::domain::labels::FIELD_MANAGER.to_owned(),
        instance: Some(pool.to_owned()),
    };
    kube::runtime::events::Recorder::new(client, reporter)
}
