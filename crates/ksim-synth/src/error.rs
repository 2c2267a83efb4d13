//! Why a synthetic trace could not be made: a parameter out of range, or the trace writer's error.

use ksim_trace::TraceError;

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// A parameter outside what the generator can make sense of; names the parameter.
    #[error("{name} is {value}: {expected}")]
    BadParameter {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(transparent)]
    Trace(#[from] TraceError),
}
