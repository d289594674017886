//! Writing files atomically: the one implementation used by the CLI, the
//! plugin, the dataset store and the vocabulary.
//!
//! The bytes go to a temporary file in the target's directory, which is
//! renamed over the target once complete, so a reader (or a resumed run)
//! never sees a partial file under the final name. With
//! [`Durability::Synced`] the file is fsynced before the rename and the
//! directory after it, so the rename survives a power cut too (the dataset
//! store's commit protocol needs that; graph files do not).

use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Whether to fsync the file and its directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Rename only: atomic for readers, not durable across a crash.
    #[default]
    Atomic,
    /// fsync the file before the rename and the directory after it.
    Synced,
}

/// Writes `path` atomically: `write` fills a temporary file in the same
/// directory (created if missing), which then replaces `path`. On error the
/// temporary file is removed and `path` is untouched. Errors name the path.
pub fn write_atomically(path: &Path, durability: Durability, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let named = |what: &str, p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {what}: {e}", p.display()));
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| named("cannot create directory", dir, e))?;
    let mut builder = tempfile::Builder::new();
    // tempfile creates 0600 files; outputs get the usual 0666 & !umask,
    // as `File::create` would give them.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder
        .prefix(&format!(".{}.", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| named("cannot create a temporary file", dir, e))?;
    let mut out = BufWriter::new(tmp);
    write(&mut out).and_then(|()| out.flush()).map_err(|e| named("cannot write", path, e))?;
    let tmp = out.into_inner().map_err(|e| named("cannot write", path, e.into_error()))?;
    if durability == Durability::Synced {
        tmp.as_file().sync_all().map_err(|e| named("cannot sync", path, e))?;
    }
    tmp.persist(path).map_err(|e| named("cannot rename into place", path, e.error))?;
    if durability == Durability::Synced {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically.
pub fn write_bytes_atomically(path: &Path, durability: Durability, bytes: &[u8]) -> io::Result<()> {
    write_atomically(path, durability, |w| w.write_all(bytes))
}

/// fsyncs a directory, so that renames in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: cannot sync directory: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/out.txt");
        write_bytes_atomically(&path, Durability::Synced, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let e = write_atomically(&path, Durability::Atomic, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("out.txt") && e.to_string().contains("boom"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"first", "a failed write leaves the old file");
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "no temporary file left behind: {left:?}");
    }

    #[cfg(unix)]
    #[test]
    fn files_get_the_umask_mode_not_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_bytes_atomically(&path, Durability::Atomic, b"x").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        // The process umask, read without changing it (Linux).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status.lines().find_map(|l| l.strip_prefix("Umask:")).map(|m| u32::from_str_radix(m.trim(), 8).unwrap()).unwrap();
        assert_eq!(mode, 0o666 & !umask, "mode {mode:o} with umask {umask:o}");
    }
}
