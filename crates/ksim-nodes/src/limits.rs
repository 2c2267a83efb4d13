//! The sizes the pool holds a node group to. Whoever asks for a group (the driver's spec check,
//! the CLI's flags) refuses one past them before anything is created, instead of learning it
//! from the pool halfway through preparing a run.

/// Most nodes one group may hold: larger counts are almost certainly typos, and each node costs
/// a lease renewal every few seconds.
pub const MAX_NODES_PER_GROUP: u32 = 10_000;

/// Longest pool-managed group name: its node names are `<group>-<index>` and must stay valid DNS
/// labels (63 characters).
pub const MAX_POOL_GROUP_NAME_LEN: usize = 40;
