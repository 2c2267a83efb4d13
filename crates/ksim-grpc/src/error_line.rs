//! An error as the one line a command prints on failure.

/// The error and its causes joined by ": ", as anyhow's `{error:#}` joins them, but a cause
/// whose text the error it caused already shows (a `thiserror` message with `{source}` that
/// also marks it `#[source]`, a context formatted with the error it wraps) is left out: each
/// cause once.
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut outer = String::new();
    let mut cause = Some(error);
    while let Some(error) = cause {
        let text = error.to_string();
        if line.is_empty() {
            line.clone_from(&text);
        } else if !outer.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        outer = text;
        cause = error.source();
    }
    line
}
