//! The files a user names: inputs read with a stated size limit, outputs written only where a
//! regular file is (or nothing is). Every ksim binary reads and writes user files through
//! these, so a `/dev/zero` skeleton or a `--fix /dev/null` fails the same way everywhere.

use std::fs::{File, FileType};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A user's file that cannot be used. Each message names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },

    /// Larger than `limit`; `size` when the file says its size (a device or a pipe does not).
    #[error(
        "{}: {} the {} limit for {what}",
        path.display(),
        size.map_or_else(|| "does not end within".to_owned(), |size| format!("{size} bytes is over")),
        describe_bytes(*limit)
    )]
    TooLarge {
        what: &'static str,
        path: PathBuf,
        size: Option<u64>,
        limit: usize,
    },

    #[error("{}: {what} is not UTF-8 text", path.display())]
    NotText { what: &'static str, path: PathBuf },

    /// An output path that is something other than a regular file.
    #[error("{label}: not a regular file ({kind}); ksim writes only regular files or new paths")]
    NotRegular { label: String, kind: &'static str },

    /// An output that is one of the command's inputs: writing it would replace what is read.
    #[error("the output {label} is the input {}; write to another file", input.display())]
    OutputIsInput { label: String, input: PathBuf },
}

/// The whole of `path`, if it is at most `limit` bytes. `what` says what the file is for, as
/// the errors name it ("a node skeleton"). Reads at most `limit + 1` bytes, so an endless
/// file (`/dev/zero`) or a pipe fails as soon as it is over.
pub fn read_bounded(path: &Path, limit: usize, what: &'static str) -> Result<Vec<u8>, FileError> {
    let read_error = |source| FileError::Read {
        what,
        path: path.to_owned(),
        source,
    };
    let too_large = |size| FileError::TooLarge {
        what,
        path: path.to_owned(),
        size,
        limit,
    };
    let file = File::open(path).map_err(read_error)?;
    // A regular file says its size: refused before a byte is read.
    let size = file
        .metadata()
        .ok()
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len());
    if size.is_some_and(|size| size > limit as u64) {
        return Err(too_large(size));
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > limit {
        return Err(too_large(None));
    }
    Ok(bytes)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_text_bounded(
    path: &Path,
    limit: usize,
    what: &'static str,
) -> Result<String, FileError> {
    String::from_utf8(read_bounded(path, limit, what)?).map_err(|_| FileError::NotText {
        what,
        path: path.to_owned(),
    })
}

/// Checks that `path` may be written the way ksim writes files (a temporary file beside it,
/// renamed over it): nothing is there yet, or a regular file is, possibly through a symlink.
/// A device, a directory, a FIFO or a socket is refused: a rename would replace it with a
/// file. `label` names the path in the error, with its flag where it has one ("--fix
/// /dev/null"). Call it before any work, so nothing is done for an output that is refused.
pub fn check_output(label: &str, path: &Path) -> Result<(), FileError> {
    // Follows symlinks: what matters is what the path leads to. A dangling symlink is a new
    // path (the rename replaces the link).
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => Ok(()),
        Ok(metadata) => Err(FileError::NotRegular {
            label: label.to_owned(),
            kind: describe_type(metadata.file_type()),
        }),
        Err(_) => Ok(()),
    }
}

/// Refuses an output that is one of `inputs`: the same file through any path, symlink or hard
/// link (its device and inode). An output that does not exist yet (or a dangling symlink) is a
/// new file, so no input. An input that cannot be found is left for its reader to name.
/// `label` names the output as [`check_output`] does.
pub fn check_not_input(label: &str, output: &Path, inputs: &[&Path]) -> Result<(), FileError> {
    match inputs.iter().find(|input| same_file(output, input)) {
        Some(input) => Err(FileError::OutputIsInput {
            label: label.to_owned(),
            input: input.to_path_buf(),
        }),
        None => Ok(()),
    }
}

/// Whether both paths lead to one existing file. Follows symlinks on both sides: an output
/// linking to the input, or the reverse, is it.
#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Without inodes, by the paths resolved (a hard link goes unseen).
#[cfg(not(unix))]
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn describe_type(file_type: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// `bytes` as the limits are stated: "1 GiB", "256 KiB", "1000 bytes".
pub fn describe_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    const GIB: usize = 1024 * 1024 * 1024;
    match bytes {
        0 => "0 bytes".to_owned(),
        _ if bytes.is_multiple_of(GIB) => format!("{} GiB", bytes / GIB),
        _ if bytes.is_multiple_of(MIB) => format!("{} MiB", bytes / MIB),
        _ if bytes.is_multiple_of(KIB) => format!("{} KiB", bytes / KIB),
        _ => format!("{bytes} bytes"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_read_only_to_its_limit() {
        let error = read_bounded(Path::new("/dev/zero"), 1 << 20, "a node skeleton").unwrap_err();
        assert_eq!(
            error.to_string(),
            "/dev/zero: does not end within the 1 MiB limit for a node skeleton"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_named_with_its_size_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m5.yaml");
        std::fs::write(&path, vec![b'#'; 300 * 1024]).unwrap();
        let error = read_text_bounded(&path, 256 * 1024, "a node skeleton").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}: 307200 bytes is over the 256 KiB limit for a node skeleton",
                path.display()
            )
        );
        // At the limit exactly, it is read whole.
        assert_eq!(
            read_bounded(&path, 300 * 1024, "x").unwrap().len(),
            300 * 1024
        );
    }

    #[test]
    fn missing_files_and_bytes_that_are_not_text_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let error = read_bounded(&missing, 10, "a rules file").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot read a rules file {}: ", missing.display())),
            "{error}"
        );
        let binary = dir.path().join("binary");
        std::fs::write(&binary, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_text_bounded(&binary, 10, "a rules file")
                .unwrap_err()
                .to_string(),
            format!("{}: a rules file is not UTF-8 text", binary.display())
        );
    }

    #[test]
    fn outputs_are_regular_files_or_new_paths() {
        let dir = tempfile::tempdir().unwrap();
        let regular = dir.path().join("old.ktrace");
        std::fs::write(&regular, b"old").unwrap();
        check_output("OUTPUT", &regular).unwrap();
        check_output("OUTPUT", &dir.path().join("new.ktrace")).unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let link_to_device = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &link_to_device).unwrap();
        let link_to_file = dir.path().join("link");
        std::os::unix::fs::symlink(&regular, &link_to_file).unwrap();
        check_output("OUTPUT", &link_to_file).unwrap();
        for (path, kind) in [
            (Path::new("/dev/null"), "a character device"),
            (dir.path(), "a directory"),
            (fifo.as_path(), "a FIFO"),
            (link_to_device.as_path(), "a character device"),
        ] {
            let label = format!("--fix {}", path.display());
            assert_eq!(
                check_output(&label, path).unwrap_err().to_string(),
                format!(
                    "{label}: not a regular file ({kind}); ksim writes only regular files or new paths"
                )
            );
        }
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_through_any_path() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let input = dir.path().join("ce.ktrace");
        std::fs::write(&input, b"recording").unwrap();
        let other = dir.path().join("other.ktrace");
        std::fs::write(&other, b"other").unwrap();
        let symlink = dir.path().join("link.ktrace");
        std::os::unix::fs::symlink(&input, &symlink).unwrap();
        let hard_link = dir.path().join("hard.ktrace");
        std::fs::hard_link(&input, &hard_link).unwrap();
        let through_dots = sub.join("..").join(".").join("ce.ktrace");
        let dangling = dir.path().join("dangling.ktrace");
        std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).unwrap();

        for output in [&input, &through_dots, &symlink, &hard_link] {
            let label = format!("-o {}", output.display());
            let error = check_not_input(&label, output, &[&other, &input]).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "the output {label} is the input {}; write to another file",
                    input.display()
                )
            );
        }
        // An input through a symlink to the output is the output too.
        assert!(check_not_input("x", &input, &[&symlink]).is_err());
        // Relative to the working directory, as a user types it.
        let relative = Path::new("./Cargo.toml");
        let absolute = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        assert!(check_not_input("Cargo.toml", relative, &[&absolute]).is_err());

        // Accepted: another file, a new path, a dangling symlink, an input that is missing.
        let new = dir.path().join("new.ktrace");
        for output in [&other, &new, &dangling] {
            check_not_input("out", output, &[&input]).unwrap();
        }
        check_not_input("out", &other, &[&new]).unwrap();
        check_not_input("out", &other, &[]).unwrap();
        // Nothing was written or removed by checking.
        assert_eq!(std::fs::read(&input).unwrap(), b"recording");
        assert!(!new.exists());
    }

    #[test]
    fn limits_are_stated_in_the_largest_whole_unit() {
        assert_eq!(describe_bytes(1 << 30), "1 GiB");
        assert_eq!(describe_bytes(1 << 20), "1 MiB");
        assert_eq!(describe_bytes(256 * 1024), "256 KiB");
        assert_eq!(describe_bytes(1000), "1000 bytes");
    }
}
