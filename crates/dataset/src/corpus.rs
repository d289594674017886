//! The corpora an IR directory holds, as `scripts/corpus.sh` describes them.
//!
//! Each corpus set that `corpus.sh` builds has a `corpus-manifest.json`
//! beside its projects: the locked sources (`scripts/corpus.lock`), the
//! compiler, the files per project and -O level, and an `id` over all of
//! them. A dataset built from a directory records the manifests found at
//! its top or one level down (`ddf-cxx-ir/{c,cxx}/corpus-manifest.json`),
//! and a bundle trained on the dataset carries their names, so that
//! "trained on the corpus" has one meaning.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::DatasetError;

/// The file `scripts/corpus.sh` writes beside a corpus set's projects.
pub const MANIFEST_FILE: &str = "corpus-manifest.json";
/// Its `format` field.
const FORMAT: &str = "programl-corpus-manifest";
/// The manifest versions this build reads.
const VERSION: u32 = 1;

/// One corpus manifest, as a dataset records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CorpusRef {
    /// The manifest's path relative to the IR directory, `/`-separated.
    pub path: String,
    /// The set: `corpus` (C), `cxx`, `unseen`, `unseen-cxx`.
    pub set: String,
    /// `typed` or `opaque`.
    pub pointers: String,
    /// The -O levels, as `corpus.sh --levels` gave them.
    pub levels: Vec<String>,
    /// The manifest's id: 16 hex digits over the set, pointers, levels,
    /// compiler and every project's source, version, sha256 and files.
    pub id: String,
}

impl CorpusRef {
    /// `SET-POINTERS-LEVELS@ID`, as a bundle's provenance names it:
    /// `corpus-opaque-O0-O1-O2-O3@1f0c…`.
    pub fn name(&self) -> String {
        format!("{}-{}-{}@{}", self.set, self.pointers, self.levels.join("-"), self.id)
    }
}

/// The fields of a manifest that a dataset keeps; the rest (projects,
/// missing ones) stays in the file.
#[derive(Deserialize)]
struct File {
    format: String,
    version: u32,
    id: String,
    set: String,
    pointers: String,
    levels: Vec<String>,
}

/// The corpus manifests of `ir`: `ir/corpus-manifest.json` and
/// `ir/*/corpus-manifest.json`, sorted by path. A manifest that does not
/// parse, or is of another format, is an error naming it.
pub fn find(ir: &Path) -> Result<Vec<CorpusRef>, DatasetError> {
    let mut candidates = vec![(ir.join(MANIFEST_FILE), MANIFEST_FILE.to_string())];
    for entry in std::fs::read_dir(ir).map_err(DatasetError::io(ir))? {
        let entry = entry.map_err(DatasetError::io(ir))?;
        if entry.file_type().map_err(DatasetError::io(entry.path()))?.is_dir() {
            let name = entry.file_name().to_string_lossy().into_owned();
            candidates.push((entry.path().join(MANIFEST_FILE), format!("{name}/{MANIFEST_FILE}")));
        }
    }
    let mut found = Vec::new();
    for (path, relative) in candidates {
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(DatasetError::Io { path, source: e }),
        };
        let bad = |detail: String| DatasetError::Corpus { path: path.clone(), detail };
        let file: File = serde_json::from_slice(&text).map_err(|e| bad(format!("not a corpus manifest: {e}")))?;
        if file.format != FORMAT {
            return Err(bad(format!("format {:?}, expected {FORMAT:?}", file.format)));
        }
        if file.version != VERSION {
            return Err(bad(format!("manifest version {}, this programl reads version {VERSION}", file.version)));
        }
        if file.id.len() != 16 || !file.id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(format!("id {:?} is not 16 hex digits", file.id)));
        }
        found.push(CorpusRef { path: relative, set: file.set, pointers: file.pointers, levels: file.levels, id: file.id });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(id: &str, set: &str) -> String {
        format!(
            r#"{{"format": "programl-corpus-manifest", "version": 1, "id": "{id}", "set": "{set}", "pointers": "opaque",
               "levels": ["O0", "O3"], "compiler": "clang", "projects": [], "missing": [], "not_in_lock": []}}"#
        )
    }

    #[test]
    fn finds_the_top_and_one_level_down_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["cxx", "c", "c/deeper"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("cxx").join(MANIFEST_FILE), manifest("00000000000000bb", "cxx")).unwrap();
        std::fs::write(dir.path().join("c").join(MANIFEST_FILE), manifest("00000000000000aa", "corpus")).unwrap();
        // Two levels down: a project's own directory, not a set's.
        std::fs::write(dir.path().join("c/deeper").join(MANIFEST_FILE), manifest("00000000000000cc", "x")).unwrap();
        let found = find(dir.path()).unwrap();
        let names: Vec<(String, String)> = found.iter().map(|c| (c.path.clone(), c.name())).collect();
        assert_eq!(
            names,
            [
                ("c/corpus-manifest.json".to_string(), "corpus-opaque-O0-O3@00000000000000aa".to_string()),
                ("cxx/corpus-manifest.json".to_string(), "cxx-opaque-O0-O3@00000000000000bb".to_string()),
            ]
        );
        assert!(find(&dir.path().join("c/deeper")).unwrap().len() == 1);
    }

    #[test]
    fn none_is_an_empty_list_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(find(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join(MANIFEST_FILE), r#"{"format": "something-else"}"#).unwrap();
        let e = find(dir.path()).unwrap_err().to_string();
        assert!(e.contains(MANIFEST_FILE) && e.contains("not a corpus manifest"), "{e}");
        std::fs::write(dir.path().join(MANIFEST_FILE), manifest("xyz", "corpus")).unwrap();
        let e = find(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is not 16 hex digits"), "{e}");
    }
}
