//! The ksim trace file format.
