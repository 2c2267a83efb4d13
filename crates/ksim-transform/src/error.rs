//! The crate's errors: a rules file that cannot be used, and a transform that cannot go on.

/// A rules file that cannot be used. Rules are numbered from 1, in file order; lines are the
/// YAML file's, from 1.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// Not YAML, or not the rules model, and not inside a rule (the parser's own line/column).
    #[error("{0}")]
    Yaml(String),

    /// Rule `index`, which starts at `line`, is wrong.
    #[error("rule {index} (line {line}): {message}")]
    Rule {
        index: usize,
        line: u64,
        message: String,
    },

    /// Rule `index`'s `match` is not valid CEL; `cel_line`:`cel_column` is the position in the
    /// expression (from 1), as the CEL parser reports it.
    #[error(
        "rule {index} (line {line}): match is not valid CEL at {cel_line}:{cel_column} of the expression: {message}"
    )]
    Cel {
        index: usize,
        line: u64,
        cel_line: i64,
        cel_column: i64,
        message: String,
    },
}

/// Why a transform stopped. Nothing after the record named was transformed.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    /// A rule needs the trace's start time and the header has none.
    #[error("rule {index} (line {line}): {message}")]
    Rule {
        index: usize,
        line: u64,
        message: String,
    },

    /// A rule failed on one object: a JSON Patch that does not apply, a selector that does not
    /// yield a bool, an object whose JSON does not parse.
    #[error("rule {index} (line {line}): {kind} {object} in the event at {time_ms} ms: {message}")]
    Object {
        index: usize,
        line: u64,
        kind: String,
        /// `namespace/name`, or `name` for cluster-scoped objects.
        object: String,
        time_ms: i64,
        message: String,
    },

    /// The input trace could not be read. (Not a `source`: the message already holds it, and
    /// error chains would print it twice.)
    #[error("reading the trace: {0}")]
    Read(ksim_trace::TraceError),

    /// The output trace could not be written.
    #[error("writing the trace: {0}")]
    Write(ksim_trace::TraceError),
}
