//! `ksim trace transform`, and the transform `ksim trace export --transform` and
//! `ksim run --transform` apply: rules from a YAML file, a trace file to a trace file.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;
use ksim_transform::{Rules, Summary};

/// Reads and checks a rules file; the error names the file, the rule and its line.
pub fn load_rules(path: &Path) -> anyhow::Result<Rules> {
    let text = crate::files::read_text_bounded(
        path,
        ksim_transform::rules::MAX_RULES_BYTES,
        "the rules file",
    )?;
    Rules::parse(&text).with_context(|| format!("{}", path.display()))
}

/// Transforms the trace file `input` (ksim or SimKube) into `output`, written beside it and
/// renamed at the end, so a failure leaves no output file. `label` names `output` in errors
/// (with its flag, if it has one); callers check it with `files::check_output` first.
pub fn transform_file(
    input: &Path,
    output: &Path,
    label: &str,
    rules: &Rules,
) -> anyhow::Result<Summary> {
    let file = crate::files::file_beside(output)?;
    let (file, summary) = transform_to(input, file, rules)?;
    crate::files::persist(file, label, output)?;
    Ok(summary)
}

/// Transforms `input` into `out`, returning it flushed.
pub fn transform_to<W: Write>(input: &Path, out: W, rules: &Rules) -> anyhow::Result<(W, Summary)> {
    let opened = super::input::Opened::open(input)?;
    let created_by = format!("ksim {}", env!("CARGO_PKG_VERSION"));
    let writer = BufWriter::new(out);
    // A SimKube trace is one MessagePack document: converted in memory, as inspect does.
    let result = if opened.is_simkube() {
        let bytes = opened.read_whole()?;
        let (converted, _) = ksim_trace::simkube::convert(&bytes, Vec::new(), &created_by)
            .with_context(|| format!("{} is not a valid SimKube trace", input.display()))?;
        ksim_transform::transform_trace(rules, converted.as_slice(), writer, &created_by)
    } else {
        ksim_transform::transform_trace(rules, opened.into_reader(), writer, &created_by)
    };
    let (writer, summary) = result.with_context(|| format!("transforming {}", input.display()))?;
    let out = writer
        .into_inner()
        .map_err(|error| error.into_error())
        .context("writing the transformed trace")?;
    Ok((out, summary))
}

/// The summary line, and a warning per rule whose `match` failed on some records.
pub fn report(output: &Path, rules: &Rules, summary: &Summary) {
    let stats = &summary.stats;
    eprintln!(
        "wrote {}: {} of {} events, {} of {} pod lifecycles, {} objects dropped, {} changed ({} rules)",
        output.display(),
        stats.events_out,
        stats.events_in,
        stats.lifecycles_out,
        stats.lifecycles_in,
        stats.objects_dropped,
        stats.objects_changed,
        rules.len()
    );
    for (position, failures) in stats.selector_errors.iter().enumerate() {
        if *failures > 0 {
            eprintln!(
                "ksim: warning: rule {}'s match failed on {failures} records (a missing field?), which it did not match",
                position + 1
            );
        }
    }
}

pub fn run(input: &Path, output: &Path, rules_path: &Path) -> anyhow::Result<()> {
    let label = output.display().to_string();
    crate::files::check_output_of(&label, output, &[input, rules_path])?;
    let rules = load_rules(rules_path)?;
    let summary = transform_file(input, output, &label, &rules)?;
    report(output, &rules, &summary);
    Ok(())
}
