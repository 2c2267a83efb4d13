//! Progress bars for long transfers, drawn on stderr only when it is a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub fn bytes(total: Option<u64>, what: &str) -> ProgressBar {
    let bar = match total {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {bytes} ({bytes_per_sec})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.set_message(what.to_owned());
    bar
}
