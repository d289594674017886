//! Writing files atomically: the one implementation used by the CLI, the
//! plugin, the dataset store and the vocabulary.
//!
//! The bytes go to a temporary file in the target's directory, which is
//! renamed over the target once complete, so a reader (or a resumed run)
//! never sees a partial file under the final name. With
//! [`Durability::Synced`] the file is fsynced before the rename and the
//! directory after it, so the rename survives a power cut too (the dataset
//! store's commit protocol needs that; graph files do not).
//!
//! A target that exists and is not a regular file or a directory (a device
//! such as `/dev/null` or `/dev/stdout`, a FIFO) is written in place: renaming
//! over it would replace the device node with a file (as root, `-o
//! /dev/null` would have replaced `/dev/null`).
//!
//! A failed write (a full disk: `ENOSPC`; a file size limit: `EFBIG`, when
//! the process ignores `SIGXFSZ`) is an error naming the target, never the
//! temporary file, and leaves the target as it was: a complete earlier
//! version, or nothing.

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
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return write_in_place(path, durability, write).map_err(|e| named("cannot write", path, e));
    }
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
    // Through the `File`, not the `NamedTempFile`, whose errors name the
    // temporary file, which is gone by the time the user reads them. On
    // every error below, dropping `tmp` deletes the temporary file.
    let mut out = BufWriter::new(tmp.as_file());
    write(&mut out).and_then(|()| out.flush()).map_err(|e| named("cannot write", path, e))?;
    drop(out);
    if durability == Durability::Synced {
        tmp.as_file().sync_all().map_err(|e| named("cannot sync", path, e))?;
    }
    tmp.persist(path).map_err(|e| named("cannot rename into place", path, e.error))?;
    if durability == Durability::Synced {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Writes into an existing special file (device, FIFO) without replacing it.
fn write_in_place(path: &Path, durability: Durability, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let mut out = BufWriter::new(&file);
    write(&mut out)?;
    out.flush()?;
    drop(out);
    if durability == Durability::Synced {
        // Devices and FIFOs may not support fsync; there is nothing to
        // make durable in them.
        match file.sync_all() {
            Err(e) if e.kind() != io::ErrorKind::InvalidInput => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The text of an error of this module without its leading `PATH: `, for
/// callers whose own error type names the path (so that it is not named
/// twice); other errors' texts unchanged.
pub fn cause(path: &Path, error: &io::Error) -> String {
    let text = error.to_string();
    match text.strip_prefix(&format!("{}: ", path.display())) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// Reads a whole file that must be a regular file (or a symbolic link to
/// one): a FIFO, a device or a directory is an `InvalidInput` error,
/// before anything is opened. A FIFO's `open` would block until some
/// writer came, hanging the compiler that reads a bundle (a bundle's
/// files, a vocabulary).
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Opened without blocking (a FIFO's open returns at once), then asked
    // what it is: no window for a swap between the question and the read.
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "not a regular file" };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_regular(path)?).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// Writes `bytes` to `path` atomically.
pub fn write_bytes_atomically(path: &Path, durability: Durability, bytes: &[u8]) -> io::Result<()> {
    write_atomically(path, durability, |w| w.write_all(bytes))
}

/// Whether a file may grow to `end` bytes under the process's file size
/// limit (`ulimit -f`, `RLIMIT_FSIZE`): an `EFBIG`-kind error saying so when
/// it may not. A write past the limit raises `SIGXFSZ`, which kills a
/// process that has not set it aside, and a compiler's handler fails the
/// compile even when it has: code that runs inside another program (the
/// plugin) asks first and writes nothing.
pub fn check_size_limit(end: u64) -> io::Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return Ok(());
    }
    if end > limit.rlim_cur {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("a file of {end} bytes would pass the file size limit of {} bytes (ulimit -f); nothing written", limit.rlim_cur),
        ));
    }
    Ok(())
}

/// Takes an exclusive `flock` on `path` (created if missing) without
/// waiting: the open file holds it until it is closed, also when the
/// process is killed. A lock another process holds is an error of kind
/// `WouldBlock`. (The dataset build's and a training run's directory lock.)
pub fn try_lock(path: &Path) -> io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// fsyncs a directory, so that renames in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: cannot sync directory: {e}", dir.display())))
}

/// The project's cache directory (derived data: corpora, datasets, compiled
/// kernels): `$PROGRAML_CACHE`, else `$XDG_CACHE_HOME/programl-rs`, else
/// `$HOME/.cache/programl-rs`, as `scripts/bootstrap.sh` sets it.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(dir) = std::env::var_os("PROGRAML_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("programl-rs");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/programl-rs")
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

    #[test]
    fn errors_name_the_target_not_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let e = write_atomically(&path, Durability::Synced, |w| {
            w.write_all(&[b'x'; 100_000])?;
            Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
        })
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert_eq!(e.to_string(), format!("{}: cannot write: disk full", path.display()));
        assert_eq!(cause(&path, &e), "cannot write: disk full");
        assert_eq!(cause(Path::new("other"), &e), e.to_string(), "another path's error is kept whole");
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no temporary file left behind");
    }

    /// A FIFO stands for the devices (`/dev/null`, `/dev/stdout`): written
    /// in place, never replaced by a regular file.
    #[cfg(unix)]
    #[test]
    fn special_files_are_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(status.success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_bytes_atomically(&fifo, Durability::Synced, b"through the pipe").unwrap();
        // Checked before joining: a reader of a replaced FIFO waits forever.
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file");
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
