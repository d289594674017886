//! Which libtorch this process runs, against the one it was built with.
//!
//! tch's C++ glue is compiled against one libtorch's headers (the project
//! pins torch 2.13.0). Another version found at run time (an
//! `LD_LIBRARY_PATH` pointing elsewhere, a moved runtime library) loads
//! without complaint and then fails far from the cause: scalar types are
//! numbered differently between versions, so the first tensor is refused
//! ("incoherent element sizes in bytes") or the process crashes. Checked
//! once, before any tensor work, this is one error naming both versions.

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The version of the libtorch this crate was built against, read by
/// build.rs from that libtorch's `version.py` or `build-version`.
pub const BUILT: &str = env!("PROGRAML_LIBTORCH_VERSION");

include!("../torch-version.rs");

/// The version a libtorch `lib/` directory belongs to (its parent's
/// `version.py` or `build-version`); `None` where neither says.
pub fn version_of(lib: &Path) -> Option<String> {
    libtorch_version_at(lib.parent()?)
}

/// The release part of a version (`2.13.0` of `2.13.0+cu130`).
fn release(v: &str) -> &str {
    v.split(['+', 'a', 'b', 'r']).next().unwrap_or(v)
}

/// The error for running `running` (from `lib`) when built against
/// `built`; `None` when their releases agree or either is unknown.
pub fn mismatch(built: &str, running: Option<&str>, lib: &Path) -> Option<String> {
    let running = running?;
    if built.is_empty() || release(built) == release(running) {
        return None;
    }
    Some(format!(
        "libtorch {running} (loaded from {}) is not the libtorch {built} this program was built against; \
         run it with that libtorch's lib/ (the project venv's torch/lib) or rebuild against this one",
        lib.display()
    ))
}

/// The directory of the `libtorch_cpu.so` mapped into this process.
pub fn loaded_lib_dir() -> Option<PathBuf> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: libc::size_t, out: *mut libc::c_void) -> libc::c_int {
        // SAFETY: the loader passes a valid entry; its name is NUL-terminated or NULL.
        let name = unsafe { (*info).dlpi_name };
        if name.is_null() {
            return 0;
        }
        let path = Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(name) }.to_bytes()));
        if path.file_name().is_some_and(|f| f == "libtorch_cpu.so") {
            // SAFETY: `out` is the `Option<PathBuf>` passed below.
            unsafe { *(out as *mut Option<PathBuf>) = path.parent().map(Path::to_path_buf) };
            return 1;
        }
        0
    }
    let mut found: Option<PathBuf> = None;
    // SAFETY: the callback only reads the entries and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut _ as *mut libc::c_void) };
    found
}

/// `Err` with [`mismatch`]'s message when the loaded libtorch is another
/// release than [`BUILT`]. Cheap (one walk of the loaded objects and one
/// small file read); callers run it once per process.
pub fn check() -> Result<(), String> {
    let Some(lib) = loaded_lib_dir() else { return Ok(()) };
    match mismatch(BUILT, version_of(&lib).as_deref(), &lib) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_the_libtorch_it_was_built_against() {
        let lib = loaded_lib_dir().expect("libtorch_cpu.so is mapped into a test of this crate");
        assert!(!BUILT.is_empty(), "build.rs found the version of {}", lib.display());
        assert_eq!(version_of(&lib).as_deref().map(release), Some(release(BUILT)));
        check().unwrap();
    }

    #[test]
    fn another_release_is_one_error_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("version.py"), "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n")
            .unwrap();
        let lib = dir.path().join("lib");
        assert_eq!(version_of(&lib).as_deref(), Some("2.11.0+cu130"));
        let e = mismatch("2.13.0+cu130", version_of(&lib).as_deref(), &lib).unwrap();
        assert!(
            e.contains("libtorch 2.11.0+cu130") && e.contains("libtorch 2.13.0+cu130") && e.contains(&lib.display().to_string()),
            "{e}"
        );
        // The same release with another local suffix (a CPU or CUDA build) is fine; so is an unknown one.
        assert_eq!(mismatch("2.13.0+cu130", Some("2.13.0+cpu"), &lib), None);
        assert_eq!(mismatch("2.13.0", None, &lib), None);
        std::fs::remove_file(dir.path().join("version.py")).unwrap();
        std::fs::write(dir.path().join("build-version"), "2.12.1+cpu\n").unwrap();
        assert_eq!(version_of(&lib).as_deref(), Some("2.12.1+cpu"));
    }
}
