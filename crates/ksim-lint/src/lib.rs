//! Rules that check a trace before it is replayed, and the fixes `ksim trace validate --fix`
//! makes.
//!
//! Every rule ([`rules::RULES`]) has a stable id (`KS001`), a name (`missing-reference`), a
//! title, a [`Severity`] and an explanation of why it matters for a replay and what the fix
//! does; ids never change meaning. The rules are pure: they read the records of a trace
//! ([`ksim_trace::TraceReader`]) and never reach a cluster; the kinds a target cluster serves
//! are passed in ([`Options::cluster_kinds`]).
//!
//! [`lint`] is one streaming pass. Per-record rules (server fields, event order) report as
//! they read; the rules that need the trace's whole set of objects (missing references, absent
//! owners, unknown kinds) keep only identities (kind, namespace, name), one entry per distinct
//! object or (object, reference) pair, and report at the end. Memory follows the number of
//! distinct objects, not the number of events.
//!
//! [`fix`] is a second pass over the same input that writes the corrected trace and reports
//! each [`Change`]; only sorting events that are out of order holds events in memory.

mod error;
mod fix;
mod lint;
pub mod object;
pub mod rules;

pub use error::LintError;
pub use fix::{Change, fix};
pub use lint::{Finding, Gvk, Linter, Location, Options, Summary, lint};
pub use rules::{RULES, Rule, Severity, find_rule};

#[cfg(test)]
mod tests;
