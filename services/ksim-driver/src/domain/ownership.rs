//! What a replay may touch: it changes or deletes only what it created. A namespaced object is
//! confined to the run's prefixed namespaces; a cluster-scoped one (a Namespace included) is
//! the run's only when it carries [`SIMULATION_LABEL`] with the run's id, as the rewriter and
//! the prepare phase give everything cluster-scoped they create. Anything else the cluster
//! holds (`cluster-admin`, an APIService, the driver's own namespace) is left alone.

use std::collections::BTreeMap;

use super::SIMULATION_LABEL;

/// Why an existing object is not this run's to change or delete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCreatedHere {
    #[error("it has no {SIMULATION_LABEL} label")]
    Unlabelled,
    #[error("its {SIMULATION_LABEL} label names simulation {0:?}")]
    OtherSimulation(String),
}

/// Whether simulation `simulation` may change or delete an existing object with `labels`.
/// An empty id matches nothing: a run always has one, and an empty label is no one's.
pub fn may_touch(
    simulation: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<(), NotCreatedHere> {
    match labels.and_then(|labels| labels.get(SIMULATION_LABEL)) {
        Some(owner) if !simulation.is_empty() && owner == simulation => Ok(()),
        Some(owner) => Err(NotCreatedHere::OtherSimulation(owner.clone())),
        None => Err(NotCreatedHere::Unlabelled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn an_object_labelled_with_this_run_is_its_own() {
        let own = labels(&[(SIMULATION_LABEL, "sim-1"), ("app", "x")]);
        assert_eq!(may_touch("sim-1", Some(&own)), Ok(()));
    }

    #[test]
    fn an_unlabelled_object_is_refused() {
        // cluster-admin, kube-system, an APIService: what the cluster had before any replay.
        assert_eq!(may_touch("sim-1", None), Err(NotCreatedHere::Unlabelled));
        let other = labels(&[("kubernetes.io/bootstrapping", "rbac-defaults")]);
        assert_eq!(
            may_touch("sim-1", Some(&other)),
            Err(NotCreatedHere::Unlabelled)
        );
    }

    #[test]
    fn another_simulations_object_is_refused() {
        let theirs = labels(&[(SIMULATION_LABEL, "sim-2")]);
        assert_eq!(
            may_touch("sim-1", Some(&theirs)),
            Err(NotCreatedHere::OtherSimulation("sim-2".to_owned()))
        );
        // A prefix of the id is another id.
        let longer = labels(&[(SIMULATION_LABEL, "sim-10")]);
        assert!(may_touch("sim-1", Some(&longer)).is_err());
    }

    #[test]
    fn an_empty_id_matches_nothing() {
        let empty = labels(&[(SIMULATION_LABEL, "")]);
        assert_eq!(
            may_touch("", Some(&empty)),
            Err(NotCreatedHere::OtherSimulation(String::new()))
        );
    }

    #[test]
    fn the_refusal_names_the_label() {
        assert_eq!(
            NotCreatedHere::Unlabelled.to_string(),
            "it has no ksim.io/simulation label"
        );
        assert_eq!(
            NotCreatedHere::OtherSimulation("sim-2".to_owned()).to_string(),
            "its ksim.io/simulation label names simulation \"sim-2\""
        );
    }
}
