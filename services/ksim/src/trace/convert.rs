//! `ksim trace convert`: a SimKube trace rewritten as a ksim trace file.

use std::path::Path;

use anyhow::Context;

pub fn run(input: &Path, output: &Path) -> anyhow::Result<()> {
    let label = output.display().to_string();
    crate::files::check_output_of(&label, output, &[input])?;
    let bytes = super::input::Opened::open(input)?.read_whole()?;
    let file = crate::files::file_beside(output)?;
    let created_by = format!("ksim {}", env!("CARGO_PKG_VERSION"));
    let (file, conversion) = ksim_trace::simkube::convert(&bytes, file, &created_by)
        .with_context(|| format!("{} is not a convertible SimKube trace", input.display()))?;
    crate::files::persist(file, &label, output)?;
    eprintln!(
        "wrote {}: {} events, {} object changes (applies and deletes), {} pod lifecycles ({} empty SimKube lifecycles skipped)",
        output.display(),
        conversion.events,
        conversion.objects,
        conversion.lifecycles,
        conversion.skipped_lifecycles
    );
    Ok(())
}
