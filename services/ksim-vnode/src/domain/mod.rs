//! The pool's rules, free of Kubernetes I/O so they are unit-tested directly.

pub mod cidr;
pub mod groups;
pub mod heartbeat;
pub mod labels;
pub mod node;
pub mod pod;
pub mod skeleton;
