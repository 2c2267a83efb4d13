//! The segmented, append-only event log.
