//! Pool-managed node groups: names, node naming and the plan that scales a group to a count.

use std::collections::BTreeSet;

use thiserror::Error;

// Shared with the driver and the CLI, which refuse a group past them before creating anything.
pub use ksim_nodes::limits::{MAX_NODES_PER_GROUP, MAX_POOL_GROUP_NAME_LEN as MAX_GROUP_NAME_LEN};

/// Why a group name or node count was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GroupError {
    #[error("node group name must not be empty")]
    EmptyName,
    #[error(
        "node group name {name:?} is {len} characters long; at most {MAX_GROUP_NAME_LEN} are allowed so node names derived from it stay valid"
    )]
    NameTooLong { name: String, len: usize },
    #[error(
        "node group name {name:?} contains {found:?}: only lowercase letters, digits and '-' are allowed (a DNS-1123 label)"
    )]
    InvalidNameCharacter { name: String, found: char },
    #[error("node group name {name:?} must start and end with a lowercase letter or digit")]
    InvalidNameEdge { name: String },
    #[error("node count {count} is negative")]
    NegativeCount { count: i32 },
    #[error("node count {count} exceeds the limit of {MAX_NODES_PER_GROUP} nodes per group")]
    CountTooLarge { count: i32 },
}

/// Checks that `name` is a DNS-1123 label short enough to derive node names from.
pub fn validate_group_name(name: &str) -> Result<(), GroupError> {
    if name.is_empty() {
        return Err(GroupError::EmptyName);
    }
    let len = name.chars().count();
    if len > MAX_GROUP_NAME_LEN {
        return Err(GroupError::NameTooLong {
            name: name.to_owned(),
            len,
        });
    }
    if let Some(found) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(GroupError::InvalidNameCharacter {
            name: name.to_owned(),
            found,
        });
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(GroupError::InvalidNameEdge {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Checks a requested node count (as it arrives over gRPC) and converts it.
pub fn validate_count(count: i32) -> Result<u32, GroupError> {
    let Ok(count_u32) = u32::try_from(count) else {
        return Err(GroupError::NegativeCount { count });
    };
    if count_u32 > MAX_NODES_PER_GROUP {
        return Err(GroupError::CountTooLarge { count });
    }
    Ok(count_u32)
}

/// Name of the pool-managed node with `index` in `group`, e.g. `m5-large-0`.
pub fn pool_node_name(group: &str, index: u32) -> String {
    format!("{group}-{index}")
}

/// The index of `node` if it is one of `group`'s pool node names. Only the canonical spelling
/// counts (no leading zeros), so a name maps to one index and back.
pub fn parse_pool_node_index(group: &str, node: &str) -> Option<u32> {
    let digits = node.strip_prefix(group)?.strip_prefix('-')?;
    let canonical = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !canonical {
        return None;
    }
    digits.parse().ok()
}

/// Nodes to create and delete to bring a group to its desired count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScalePlan {
    /// In ascending index order.
    pub create: Vec<String>,
    /// In descending index order (newest first).
    pub delete: Vec<String>,
}

impl ScalePlan {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty()
    }
}

/// Plans scaling `group` to `desired` nodes given the node names that exist. Growth fills the
/// lowest unused indexes (names stay compact after churn); shrinking removes the highest indexes
/// first, like a StatefulSet. Names that are not this group's pool node names are ignored.
pub fn scale_plan(group: &str, desired: u32, existing: &BTreeSet<String>) -> ScalePlan {
    scale_plan_avoiding(group, desired, existing, &BTreeSet::new())
}

/// [`scale_plan`], creating none of the names in `taken` (nodes still shutting down: they
/// neither count toward `desired` nor give up their names).
pub fn scale_plan_avoiding(
    group: &str,
    desired: u32,
    existing: &BTreeSet<String>,
    taken: &BTreeSet<String>,
) -> ScalePlan {
    let indexes: BTreeSet<u32> = existing
        .iter()
        .filter_map(|node| parse_pool_node_index(group, node))
        .collect();
    let taken: BTreeSet<u32> = taken
        .iter()
        .filter_map(|node| parse_pool_node_index(group, node))
        .collect();
    let current = indexes.len();
    let desired = usize::try_from(desired).unwrap_or(usize::MAX);
    let mut plan = ScalePlan::default();
    if desired > current {
        plan.create = (0..=u32::MAX)
            .filter(|index| !indexes.contains(index) && !taken.contains(index))
            .take(desired - current)
            .map(|index| pool_node_name(group, index))
            .collect();
    } else {
        plan.delete = indexes
            .iter()
            .rev()
            .take(current - desired)
            .map(|&index| pool_node_name(group, index))
            .collect();
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn valid_group_names() {
        for name in ["m5-large", "a", "0", "gpu-a100-80g", &"x".repeat(40)] {
            assert_eq!(validate_group_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn invalid_group_names_name_the_rule() {
        assert_eq!(validate_group_name(""), Err(GroupError::EmptyName));
        let long = "x".repeat(41);
        let error = validate_group_name(&long).unwrap_err();
        assert_eq!(
            error,
            GroupError::NameTooLong {
                name: long.clone(),
                len: 41
            }
        );
        assert!(error.to_string().contains("at most 40"), "{error}");
        for (name, found) in [
            ("M5-large", 'M'),
            ("m5.large", '.'),
            ("m5_large", '_'),
            ("m5 l", ' '),
        ] {
            let error = validate_group_name(name).unwrap_err();
            assert_eq!(
                error,
                GroupError::InvalidNameCharacter {
                    name: name.to_owned(),
                    found
                }
            );
            assert!(error.to_string().contains(name), "{error}");
        }
        for name in ["-m5", "m5-", "-"] {
            assert_eq!(
                validate_group_name(name),
                Err(GroupError::InvalidNameEdge {
                    name: name.to_owned()
                })
            );
        }
    }

    #[test]
    fn longest_group_and_index_make_a_valid_node_name() {
        let node = pool_node_name(&"x".repeat(MAX_GROUP_NAME_LEN), MAX_NODES_PER_GROUP - 1);
        assert!(node.len() <= 63, "{node}");
    }

    #[test]
    fn counts_are_bounded() {
        assert_eq!(validate_count(0), Ok(0));
        assert_eq!(validate_count(10_000), Ok(10_000));
        let error = validate_count(-3).unwrap_err();
        assert_eq!(error, GroupError::NegativeCount { count: -3 });
        assert!(error.to_string().contains("-3"));
        let error = validate_count(10_001).unwrap_err();
        assert_eq!(error, GroupError::CountTooLarge { count: 10_001 });
        assert!(error.to_string().contains("10001"));
        assert_eq!(
            validate_count(i32::MIN),
            Err(GroupError::NegativeCount { count: i32::MIN })
        );
    }

    #[test]
    fn node_names_round_trip() {
        assert_eq!(pool_node_name("m5-large", 0), "m5-large-0");
        for index in [0, 7, 42, 9_999, u32::MAX] {
            assert_eq!(
                parse_pool_node_index("m5-large", &pool_node_name("m5-large", index)),
                Some(index)
            );
        }
    }

    #[test]
    fn foreign_and_non_canonical_names_do_not_parse() {
        for node in [
            "m5-large",
            "m5-large-",
            "m5-large-x",
            "m5-large-01",
            "m5-large-1a",
            "m5-large--1",
            "m5-large-+1",
            "m5-large-4294967296",
            "m5-xlarge-0",
            "other-0",
        ] {
            assert_eq!(parse_pool_node_index("m5-large", node), None, "{node}");
        }
        // A group whose name prefixes another's must not claim the other's nodes.
        assert_eq!(parse_pool_node_index("m5", "m5-large-0"), None);
        assert_eq!(parse_pool_node_index("m5-large", "m5-0"), None);
    }

    #[test]
    fn scale_up_from_zero() {
        let plan = scale_plan("g", 3, &BTreeSet::new());
        assert_eq!(plan.create, ["g-0", "g-1", "g-2"]);
        assert!(plan.delete.is_empty());
    }

    #[test]
    fn scale_up_fills_gaps_first() {
        let plan = scale_plan("g", 5, &names(&["g-0", "g-2", "g-5"]));
        assert_eq!(plan.create, ["g-1", "g-3"]);
        assert!(plan.delete.is_empty());
    }

    #[test]
    fn scale_down_removes_highest_indexes_numerically() {
        // Lexical order would put g-10 before g-2; the plan must use numeric order.
        let existing = names(&["g-0", "g-1", "g-2", "g-10", "g-9"]);
        let plan = scale_plan("g", 2, &existing);
        assert_eq!(plan.delete, ["g-10", "g-9", "g-2"]);
        assert!(plan.create.is_empty());
        assert_eq!(scale_plan("g", 0, &existing).delete.len(), 5);
    }

    #[test]
    fn steady_state_is_an_empty_plan_even_with_gaps() {
        let plan = scale_plan("g", 3, &names(&["g-0", "g-4", "g-7"]));
        assert!(plan.is_empty(), "{plan:?}");
    }

    #[test]
    fn other_names_are_ignored() {
        let existing = names(&["g-0", "gg-1", "g-01", "ksim-seat-host", "g-x"]);
        let plan = scale_plan("g", 2, &existing);
        assert_eq!(plan.create, ["g-1"]);
        let plan = scale_plan("g", 0, &existing);
        assert_eq!(plan.delete, ["g-0"]);
    }

    #[test]
    fn names_of_nodes_shutting_down_are_not_reused() {
        let existing: BTreeSet<String> = ["g-0".to_owned()].into();
        let taken: BTreeSet<String> = ["g-1".to_owned()].into();
        let plan = scale_plan_avoiding("g", 3, &existing, &taken);
        assert_eq!(plan.create, ["g-2", "g-3"]);
        assert!(plan.delete.is_empty());
    }
}
