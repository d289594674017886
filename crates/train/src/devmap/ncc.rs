//! DevMap's paper-faithful input: the LLVM IR that ProGraML's own DevMap
//! experiments built their graphs from (`ncc-task_devmap.zip`, published
//! with NCC: Apple LLVM 9.1, an x86-64 triple, typed pointers, optimised).
//!
//! A row's file is `kernels_ir/<benchmark>_<dataset>.ll` where there is one
//! (NPB, whose sizes are compile-time classes), else `<benchmark>.ll`; every
//! row of both CSVs resolves. The graph is the whole file, as ProGraML's
//! was: 162 files call helpers that the archive only declares, and one
//! (`rodinia-3.1-cfd-time_step`) holds a second kernel.
//!
//! LLVM 16 reads the typed-pointer IR as it is, apart from one construct
//! that LLVM 12 changed: a bare `byval` parameter attribute, which now names
//! its type (`T* byval` becomes `T* byval(T)`; one file). [`upgrade`] makes
//! that change when the archive is unpacked; nothing else is touched.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use programl::builder::{build_file, BuildOptions};
use rayon::prelude::*;
use regex::Regex;

use super::{Kernels, Row};

/// The archive in the dataset directory.
pub const ARCHIVE: &str = "ncc-task_devmap.zip";
/// The IR directory inside it.
const IR_DIR: &str = "kernels_ir/";

/// `text` with each bare `T* byval` made `T* byval(T)`, and how many it
/// changed.
pub fn upgrade(text: &str) -> (String, usize) {
    static BYVAL: OnceLock<Regex> = OnceLock::new();
    // A pointee type that may precede `*`: a named or literal struct, an
    // integer or float type, an array or a vector.
    let byval = BYVAL.get_or_init(|| {
        let ty = r#"(?:%[-\w.$]+|%"[^"]+"|i\d+|half|float|double|x86_fp80|fp128|\[[^\[\]]*\]|<[^<>]*>|\{[^{}]*\})"#;
        Regex::new(&format!(r"({ty})\*((?: (?:nocapture|readonly|noalias|nonnull))*) byval\b([^(]|$)")).unwrap()
    });
    let mut n = 0;
    let out = byval.replace_all(text, |c: &regex::Captures| {
        n += 1;
        format!("{}*{} byval({}){}", &c[1], &c[2], &c[1], &c[3])
    });
    (out.into_owned(), n)
}

/// `cache/ncc-ir/`: the archive's `kernels_ir/*.ll`, upgraded, unpacked
/// once (into a temporary directory, then renamed).
pub fn ir_dir(data: &Path, cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("ncc-ir");
    if dir.is_dir() {
        return Ok(dir);
    }
    let archive = data.join(ARCHIVE);
    let file = std::fs::File::open(&archive).with_context(|| format!("{}: cannot open", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file).with_context(|| format!("{}: not a zip archive", archive.display()))?;
    std::fs::create_dir_all(cache).with_context(|| format!("{}: cannot create", cache.display()))?;
    let tmp = tempfile::tempdir_in(cache).with_context(|| format!("{}: cannot create a temporary directory", cache.display()))?;
    let (mut files, mut upgraded) = (0, 0);
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).with_context(|| format!("{}: entry {i} unreadable", archive.display()))?;
        let name = entry.name().to_string();
        let Some(base) = name.strip_prefix(IR_DIR).filter(|b| b.ends_with(".ll") && !b.contains('/') && !b.starts_with("._")) else {
            continue;
        };
        let mut text = String::new();
        entry.read_to_string(&mut text).with_context(|| format!("{}: {name}: unreadable", archive.display()))?;
        let (text, n) = upgrade(&text);
        upgraded += (n > 0) as usize;
        std::fs::write(tmp.path().join(base), text).with_context(|| format!("{}: cannot write", tmp.path().display()))?;
        files += 1;
    }
    if files == 0 {
        bail!("{}: no {IR_DIR}*.ll files", archive.display());
    }
    eprintln!("devmap: unpacked {files} NCC IR files from {} ({upgraded} upgraded)", archive.display());
    std::fs::rename(tmp.keep(), &dir).with_context(|| format!("{}: cannot write", dir.display()))?;
    Ok(dir)
}

/// The file of `row`: `<benchmark>_<dataset>.ll`, else `<benchmark>.ll`.
pub fn file_of(dir: &Path, row: &Row) -> Option<PathBuf> {
    // A name, never a path out of the directory.
    let plain = |s: &str| !s.contains(['/', '\\']) && !s.contains("..");
    if !plain(&row.benchmark) || !plain(&row.dataset) {
        return None;
    }
    [format!("{}_{}.ll", row.benchmark, row.dataset), format!("{}.ll", row.benchmark)]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
}

impl Kernels {
    /// The graph of every row's NCC file under `dir`: one per distinct file.
    pub fn from_ncc(rows: &[Row], dir: &Path) -> Result<Kernels> {
        let mut index: HashMap<Option<PathBuf>, usize> = HashMap::new();
        let mut files: Vec<Option<PathBuf>> = Vec::new();
        let row_kernel = rows
            .iter()
            .map(|r| {
                let f = file_of(dir, r);
                *index.entry(f.clone()).or_insert_with(|| {
                    files.push(f);
                    files.len() - 1
                })
            })
            .collect();
        let built: Vec<std::result::Result<programl::ProgramGraph, String>> = files
            .par_iter()
            .map(|f| match f {
                None => Err("no NCC IR file for the row".to_string()),
                Some(p) => build_file(p, &BuildOptions::MODEL).map_err(|e| format!("IR does not load: {e}")),
            })
            .collect();
        let mut failures: BTreeMap<String, usize> = BTreeMap::new();
        let graphs = built
            .into_iter()
            .map(|b| match b {
                Ok(g) => Some(g),
                Err(cause) => {
                    *failures.entry(cause).or_default() += 1;
                    None
                }
            })
            .collect();
        Ok(Kernels { graphs, row_kernel, failures, repaired: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_byval_names_its_type_and_nothing_else_changes() {
        let old = "define void @k(%struct.par* nocapture readonly byval align 8, float* byval %p, i32* byval(i32) %q) {\n  ret void\n}\n";
        let (new, n) = upgrade(old);
        assert_eq!(n, 2);
        assert_eq!(
            new,
            "define void @k(%struct.par* nocapture readonly byval(%struct.par) align 8, float* byval(float) %p, i32* byval(i32) %q) {\n  ret void\n}\n"
        );
        let plain = "define void @f(i32* %a) {\n  ret void\n}\n";
        assert_eq!(upgrade(plain), (plain.to_string(), 0));
    }

    /// The upgraded text is IR that LLVM reads and the builder turns into a
    /// graph, where the bare form is refused.
    #[test]
    fn the_upgraded_ir_builds() {
        let old = "%struct.par = type { float, i32 }\ndefine void @k(%struct.par* byval align 8 %p) {\n  ret void\n}\n";
        let dir = tempfile::tempdir().unwrap();
        let (bare, fixed) = (dir.path().join("bare.ll"), dir.path().join("fixed.ll"));
        std::fs::write(&bare, old).unwrap();
        std::fs::write(&fixed, upgrade(old).0).unwrap();
        assert!(build_file(&bare, &BuildOptions::default()).is_err());
        let g = build_file(&fixed, &BuildOptions::default()).unwrap();
        assert!(g.node_count() > 1);
        let rows = [
            Row { benchmark: "s-p-k".into(), dataset: "A".into(), transfer: 0.0, wgsize: 0.0, gpu: true, src: String::new() },
            Row { benchmark: "s-p-k".into(), dataset: "B".into(), transfer: 0.0, wgsize: 0.0, gpu: true, src: String::new() },
            Row { benchmark: "s-q-k".into(), dataset: "default".into(), transfer: 0.0, wgsize: 0.0, gpu: true, src: String::new() },
        ];
        std::fs::copy(&fixed, dir.path().join("s-p-k_A.ll")).unwrap();
        std::fs::copy(&fixed, dir.path().join("s-p-k.ll")).unwrap();
        assert_eq!(file_of(dir.path(), &rows[0]).unwrap(), dir.path().join("s-p-k_A.ll"));
        assert_eq!(file_of(dir.path(), &rows[1]).unwrap(), dir.path().join("s-p-k.ll"));
        let k = Kernels::from_ncc(&rows, dir.path()).unwrap();
        assert_eq!(k.graphs.len(), 3);
        assert_eq!(k.failures.get("no NCC IR file for the row"), Some(&1));
    }
}
