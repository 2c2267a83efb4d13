//! The files the CLI is given. Inputs are read with a stated size limit
//! (`ksim_grpc::files::read_bounded`, the same the services use). Outputs are checked before
//! any work (a regular file or a new path, never a device, a directory or a FIFO), then written
//! beside the target and renamed over it, so a failure leaves the old file or none.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use tempfile::NamedTempFile;

pub use ksim_grpc::files::{read_bounded, read_text_bounded};

/// The largest configuration file read: scheduler and provider configurations, experiments
/// (written by hand; the largest real ones are a few KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// The largest trace read whole into memory: a SimKube trace (one MessagePack document), and
/// the trace file `ksim run` sends in its request (the driver's own request limit, 16 MiB by
/// default, then decides).
pub const MAX_WHOLE_TRACE_BYTES: usize = 1 << 30;

/// Refuses an output path that is not a regular file or a new path, naming it by `label` (the
/// path, with its flag where it has one: "--fix PATH").
pub fn check_output(label: &str, output: &Path) -> anyhow::Result<()> {
    Ok(ksim_grpc::files::check_output(label, output)?)
}

/// [`check_output`] for a command that reads `inputs` to write `output`: also refuses an
/// output that is one of them (through any path or link), which the rename would replace.
pub fn check_output_of(label: &str, output: &Path, inputs: &[&Path]) -> anyhow::Result<()> {
    check_output(label, output)?;
    Ok(ksim_grpc::files::check_not_input(label, output, inputs)?)
}

/// A temporary file in `output`'s directory, for a command that writes the whole output or
/// none of it: [`persist`] renames it onto `output` once everything is written.
pub fn file_beside(output: &Path) -> anyhow::Result<NamedTempFile> {
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    NamedTempFile::new_in(dir).with_context(|| format!("creating a file in {}", dir.display()))
}

/// Renames the finished `file` over `output`. Checked again first: the path may have become
/// something else while the output was made.
pub fn persist(file: NamedTempFile, label: &str, output: &Path) -> anyhow::Result<()> {
    check_output(label, output)?;
    file.persist(output)
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(())
}

/// `bytes` written whole to `output` (checked, beside it, renamed).
pub fn write_whole(label: &str, output: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    check_output(label, output)?;
    let mut file = file_beside(output)?;
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .with_context(|| format!("writing {}", output.display()))?;
    persist(file, label, output)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_replaced_and_a_device_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("comparison.json");
        std::fs::write(&old, b"old").unwrap();
        write_whole("comparison.json", &old, b"new").unwrap();
        assert_eq!(std::fs::read(&old).unwrap(), b"new");
        let new = dir.path().join("new.json");
        write_whole("new.json", &new, b"first").unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"first");

        let error = write_whole("--write-trace /dev/null", Path::new("/dev/null"), b"x")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "--write-trace /dev/null: not a regular file (a character device); ksim writes only \
             regular files or new paths"
        );
        // Only the two files written: no temporary file was left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_and_any_other_checked_as_an_output() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("x.ktrace");
        std::fs::write(&input, b"recording").unwrap();
        let error = check_output_of("-o x.ktrace", &input, &[&input]).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "the output -o x.ktrace is the input {}; write to another file",
                input.display()
            )
        );
        check_output_of("y.ktrace", &dir.path().join("y.ktrace"), &[&input]).unwrap();
        let error = check_output_of("/dev/null", Path::new("/dev/null"), &[&input]).unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
        assert_eq!(std::fs::read(&input).unwrap(), b"recording");
    }
}
