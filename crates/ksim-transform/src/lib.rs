//! Trace transforms: an ordered list of rules, read from YAML, that rewrite a ksim trace as it
//! streams through, record by record, so memory does not grow with the trace's length.
//!
//! ```yaml
//! rules:
//!   - name: traffic doubles
//!     match: 'kind == "Deployment" && ns == "shop"'
//!     scaleReplicas: 2
//!   - match: 'kind == "Secret"'
//!     drop: true
//!   - keepWindow: { start: 10m, end: 40m }
//! ```
//!
//! Each rule has one operation and, for the object operations, an optional `match`: a CEL
//! expression (the language Kubernetes uses for validation and admission rules) that must be
//! `true` for a record the rule changes. A CEL program sees:
//!
//! - `kind`, `group`, `version`, `ns`, `name`: the object's identity (a pod lifecycle's owner
//!   for lifecycles); `ns` is the namespace (`namespace` is a reserved word in CEL), `""` for
//!   cluster-scoped objects;
//! - `object`: the object as Kubernetes JSON (a map). A delete recorded without the object, and a
//!   lifecycle, see `{apiVersion, kind, metadata: {name, namespace}}`;
//! - `op`: `"apply"`, `"delete"` or `"lifecycle"`;
//! - `time_ms`: the record's time as it is at this rule (earlier time rules included), in
//!   milliseconds since the Unix epoch (an event's timestamp, a lifecycle's start);
//! - `offset_ms`: the same time less the trace's start (the header's start time).
//!
//! A program that fails on a record (a missing field: `object.spec.replicas` on a ConfigMap)
//! does not match it; such failures are counted per rule ([`Stats::selector_errors`]). Use
//! `has(object.spec.replicas)` to say what is meant. A program that yields something other than
//! a bool is an error.
//!
//! Operations ([`rules`] has the YAML keys): drop objects (`drop`); patch objects with an RFC
//! 7386 merge patch (`mergePatch`) or an RFC 6902 JSON Patch (`jsonPatch`); scale
//! `spec.replicas` by a factor (`scaleReplicas`); scale or set the requests and limits of the
//! containers in a pod template (`scaleResources`, `setResources`: rightsizing); keep a time window (`keepWindow`); shift time
//! (`shiftTime`); stretch time around the trace's start (`stretchTime`); end the trace later,
//! so a replay goes on after its last record (`extendEnd`); rename a namespace
//! (`renameNamespace`). Time rules apply to the whole trace and take no `match`, so events stay
//! in timestamp order.
//!
//! The result is deterministic: the same trace and rules give the same bytes (objects a rule
//! changed are written back with their keys sorted; the others are kept byte for byte). The
//! output header lists the rules applied ([`Rules::descriptions`]).
//!
//! Depends on the trace format (`ksim-trace`) and Kubernetes quantities (`ksim-nodes`) only: no
//! Kubernetes client, no gRPC.

mod error;
mod resources;
pub mod rules;
mod select;
mod stream;
mod transformer;

pub use error::{RuleError, TransformError};
pub use rules::Rules;
pub use stream::{Summary, transform_trace};
pub use transformer::{Stats, Transformer};
