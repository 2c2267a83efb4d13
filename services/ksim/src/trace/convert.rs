use std::path::Path;

use anyhow::Context;

pub fn run(input: &Path, output: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let file = super::file_beside(output)?;
    let created_by = format!("ksim {}", env!("CARGO_PKG_VERSION"));
    let (file, conversion) = ksim_trace::simkube::convert(&bytes, file, &created_by)
        .with_context(|| format!("{} is not a convertible SimKube trace", input.display()))?;
    file.persist(output)
        .with_context(|| format!("writing {}", output.display()))?;
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
