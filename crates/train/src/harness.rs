//! What the graph-level tasks share to get their inputs: unpacking a
//! dataset's tarball into the cache once.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// `cache/<name>`: the directory `<name>/` of the tarball `tar`, unpacked
/// there once (into a temporary directory, then renamed, so a killed
/// unpack leaves nothing half-written). Later calls return it as it is.
pub fn unpack_tar(tar: &Path, cache: &Path, name: &str) -> Result<PathBuf> {
    let dir = cache.join(name);
    if dir.is_dir() {
        return Ok(dir);
    }
    if !tar.is_file() {
        bail!("{}: not found", tar.display());
    }
    std::fs::create_dir_all(cache).with_context(|| format!("{}: cannot create", cache.display()))?;
    let tmp = tempfile::tempdir_in(cache).with_context(|| format!("{}: cannot create a temporary directory", cache.display()))?;
    eprintln!("unpacking {} into {}", tar.display(), cache.display());
    let status = std::process::Command::new("tar").arg("-xJf").arg(tar).arg("-C").arg(tmp.path()).status().context("cannot run tar")?;
    if !status.success() || !tmp.path().join(name).is_dir() {
        bail!("{}: tar -xJf failed or held no {name}/ directory", tar.display());
    }
    std::fs::rename(tmp.path().join(name), &dir).with_context(|| format!("{}: cannot write", dir.display()))?;
    Ok(dir)
}
