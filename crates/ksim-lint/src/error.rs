//! The one error type of the crate.

/// Why a trace could not be checked or fixed. Findings are not errors: they are the result.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// The file is not a readable trace (not a trace, truncated, corrupt) or cannot be written.
    #[error(transparent)]
    Trace(#[from] ksim_trace::TraceError),

    /// An object's JSON is not a JSON object.
    #[error("{location}: the object is not valid JSON: {reason}")]
    BadObject { location: String, reason: String },
}
