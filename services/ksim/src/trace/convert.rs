use std::path::Path;

use anyhow::Context;

pub fn run(input: &Path, output: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
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
