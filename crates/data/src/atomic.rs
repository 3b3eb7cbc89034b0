//! Atomic file replacement.
//!
//! A training run is killed at arbitrary moments (Ctrl-C, a preempted node, out of
//! memory). If a checkpoint or a metrics file were rewritten in place, a kill in the
//! middle would leave a half-written file and destroy the previous good one. Instead we
//! write a temporary file *in the same directory* (a rename is only atomic within one
//! file system), flush it to disk, and rename it over the target. Readers therefore see
//! either the old file or the new one, never a mixture.

use brrr_backend::{Error, Result};
use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` atomically; see [`write_atomic_with`].
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Creates or replaces `path` with what `write` produces, atomically.
///
/// `write` receives a buffered writer onto a temporary file next to `path`. Only if it
/// returns `Ok` is the data flushed, `fsync`ed and renamed over `path` (and, on unix,
/// the directory `fsync`ed so that the rename itself survives a power cut). If `write`
/// or any later step fails, `path` is left exactly as it was and the temporary file is
/// removed.
///
/// A new file gets the usual permissions (`0o666` minus the umask on unix) rather than
/// the owner-only mode of a temporary file, because checkpoints and loss curves are
/// meant to be shared.
pub fn write_atomic_with<F>(path: impl AsRef<Path>, write: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> io::Result<()>,
{
    let path = path.as_ref();
    let shown = path.display();
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::file(path, "cannot write: the path does not name a file"))?;
    // `Path::parent` is `Some("")` for a bare file name: that means the current directory.
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };

    let mut builder = tempfile::Builder::new();
    // A dot-prefixed name that says what it is, in case a crash leaves it behind.
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(file_name);
    prefix.push(".tmp");
    builder.prefix(&prefix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder.tempfile_in(dir).map_err(|e| {
        Error::io(
            format!("{shown}: creating a temporary file in {}", dir.display()),
            e,
        )
    })?;

    {
        let mut w = io::BufWriter::new(tmp.as_file());
        write(&mut w).map_err(|e| Error::io(format!("{shown}: writing"), e))?;
        w.flush()
            .map_err(|e| Error::io(format!("{shown}: writing"), e))?;
    }
    // Data must be on disk before the rename makes it visible, or a crash right after
    // the rename could expose an empty or partial file under the final name.
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io(format!("{shown}: syncing to disk"), e))?;
    tmp.persist(path).map_err(|e| {
        Error::io(
            format!("{shown}: renaming the temporary file into place"),
            e.error,
        )
    })?;

    #[cfg(unix)]
    {
        // The rename is an update of the directory; without this it may be lost on a
        // power cut even though the file data is safe.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(format!("{shown}: syncing directory {}", dir.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn creates_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        write_atomic(&p, b"first").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        write_atomic(&p, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
        write_atomic(&p, b"").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"");
        assert_eq!(entries(dir.path()), vec!["out.bin"]);
    }

    #[test]
    fn failed_write_leaves_the_old_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ckpt.safetensors");
        write_atomic(&p, b"the good checkpoint").unwrap();

        // Writes a large prefix (more than BufWriter's buffer, so bytes really reach
        // the temporary file) and then fails, as a full disk or a kill would.
        let err = write_atomic_with(&p, |w| {
            w.write_all(&vec![7u8; 1 << 20])?;
            Err(io::Error::other("disk full (simulated)"))
        })
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("ckpt.safetensors") && msg.contains("disk full"),
            "{msg}"
        );

        assert_eq!(std::fs::read(&p).unwrap(), b"the good checkpoint");
        // No temporary file is left behind.
        assert_eq!(entries(dir.path()), vec!["ckpt.safetensors"]);
    }

    #[test]
    fn failed_first_write_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("new.csv");
        write_atomic_with(&p, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn missing_directory_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/dir/file.txt");
        let msg = write_atomic(&p, b"x").unwrap_err().to_string();
        assert!(msg.contains("file.txt"), "{msg}");
    }

    #[cfg(unix)]
    #[test]
    fn new_files_get_the_same_mode_as_file_create() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let plain = dir.path().join("plain.svg");
        std::fs::File::create(&plain).unwrap();
        let atomic = dir.path().join("atomic.svg");
        write_atomic(&atomic, b"<svg/>").unwrap();
        // Both are 0o666 minus the umask, whatever the umask is.
        assert_eq!(mode(&atomic), mode(&plain));
    }
}
