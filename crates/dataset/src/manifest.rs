//! `manifest.jsonl`: the dataset's journal, appended to (and rewritten,
//! atomically, only to drop the line of a shard lost from the disk).
//!
//! Line 1 is the dataset line (format, seed, IR directory); every later line
//! is a committed shard or a failed input. A shard line is appended (and the
//! manifest fsynced) only after its shard was renamed into place, so a shard
//! file that no line names is an orphan of a kill and is never read. A last
//! line without its newline is a write cut short by a kill: readers ignore
//! it and a resuming build truncates it away.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::corpus::CorpusRef;
use super::{DatasetError, FORMAT_VERSION};

/// One manifest line. Private: a boundary type.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Line {
    Dataset {
        format: u32,
        seed: u64,
        ir: String,
        builder: String,
        /// The corpus manifests of the IR directory when the build began
        /// (none for a dataset built before they existed).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        corpus: Vec<CorpusRef>,
    },
    Shard { file: String, records: u32, bytes: u64, crc32: u32, inputs: Vec<String> },
    Failure { input: String, error: String },
}

/// The builder the examples were made with, as recorded in the manifest.
pub(crate) const BUILDER: &str = "paper";

/// A parsed manifest.
#[derive(Clone, Debug)]
pub(crate) struct Manifest {
    pub path: PathBuf,
    pub seed: u64,
    pub ir: String,
    /// The corpus manifests of the IR directory.
    pub corpus: Vec<CorpusRef>,
    /// Shard lines, in commit order: (file, records, crc32, inputs).
    pub shards: Vec<ShardLine>,
    /// Failure lines, in order: (input, error).
    pub failures: Vec<(String, String)>,
    /// Bytes of complete, parsed lines; anything after is a torn write.
    pub valid_len: u64,
}

/// A committed shard as the manifest records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShardLine {
    pub file: String,
    pub records: u32,
    pub bytes: u64,
    pub crc32: u32,
    pub inputs: Vec<String>,
}

impl Manifest {
    /// Reads the manifest of `dir`. A final line without its newline is
    /// ignored (a write cut short), and so is an unparseable final line; a
    /// resuming build truncates them away.
    pub fn read(dir: &Path) -> Result<Manifest, DatasetError> {
        let path = dir.join(super::MANIFEST);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(DatasetError::NotADataset { path: dir.to_path_buf() }),
            Err(e) => return Err(DatasetError::Io { path, source: e }),
        };
        let bad = |line: usize, detail: String| DatasetError::Manifest { path: path.clone(), line, detail };
        let mut m = Manifest { path: path.clone(), seed: 0, ir: String::new(), corpus: Vec::new(), shards: Vec::new(), failures: Vec::new(), valid_len: 0 };
        let mut at = 0usize;
        let mut number = 0;
        while let Some(nl) = text[at..].iter().position(|&b| b == b'\n') {
            number += 1;
            let raw = &text[at..at + nl];
            let is_last = at + nl + 1 == text.len();
            let line: Line = match serde_json::from_slice(raw) {
                Ok(l) => l,
                // A complete but garbled last line: a write the OS never
                // finished (power loss). Treated like a torn line.
                Err(_) if is_last && number > 1 => break,
                Err(e) => return Err(bad(number, e.to_string())),
            };
            match (number, line) {
                (1, Line::Dataset { format, seed, ir, builder, corpus }) => {
                    if format != FORMAT_VERSION {
                        let why = if format < FORMAT_VERSION {
                            "its step counts and roots follow an older SPEC.md §2; rebuild it with `programl dataset build` into a new directory"
                        } else {
                            "it was written by a newer programl"
                        };
                        return Err(bad(1, format!("dataset format {format}, this programl reads format {FORMAT_VERSION}: {why}")));
                    }
                    if builder != BUILDER {
                        return Err(bad(1, format!("graphs built by {builder:?}, expected {BUILDER:?}")));
                    }
                    m.seed = seed;
                    m.ir = ir;
                    m.corpus = corpus;
                }
                (1, _) => return Err(bad(1, "the first line must describe the dataset".into())),
                (_, Line::Dataset { .. }) => return Err(bad(number, "a second dataset line".into())),
                (_, Line::Shard { file, records, bytes, crc32, inputs }) => {
                    if !is_shard_name(&file) {
                        return Err(bad(number, format!("{file:?} is not a shard file name")));
                    }
                    m.shards.push(ShardLine { file, records, bytes, crc32, inputs })
                }
                (_, Line::Failure { input, error }) => m.failures.push((input, error)),
            }
            at += nl + 1;
            m.valid_len = at as u64;
        }
        if number == 0 || m.valid_len == 0 {
            return Err(bad(1, "empty manifest: no dataset line".into()));
        }
        Ok(m)
    }

    /// Creates the manifest of a new dataset (atomically, so it always has
    /// its dataset line).
    pub fn create(dir: &Path, seed: u64, ir: &str, corpus: &[CorpusRef]) -> Result<(), DatasetError> {
        let path = dir.join(super::MANIFEST);
        let line =
            Line::Dataset { format: FORMAT_VERSION, seed, ir: ir.to_string(), builder: BUILDER.to_string(), corpus: corpus.to_vec() };
        programl::fsutil::write_bytes_atomically(&path, programl::fsutil::Durability::Synced, &to_line(&line))
            .map_err(DatasetError::io(&path))
    }
}

impl Manifest {
    /// Rewrites the manifest without the shard lines naming `files`
    /// (atomically: a kill leaves the old manifest or the new one), every
    /// other line kept as it was, in its order; a torn tail is dropped.
    /// A build does this for shards that are lost from the disk, so that
    /// their inputs are read again ([`crate::build::Builder::open`]).
    pub fn drop_shards(&self, files: &std::collections::HashSet<&str>) -> Result<(), DatasetError> {
        let text = std::fs::read(&self.path).map_err(DatasetError::io(&self.path))?;
        let valid = text.get(..self.valid_len as usize).ok_or_else(|| DatasetError::Io {
            path: self.path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the manifest shrank while the build was opening it"),
        })?;
        let mut kept = Vec::with_capacity(valid.len());
        for raw in valid.split_inclusive(|&b| b == b'\n') {
            // Every line up to valid_len parsed when the manifest was read.
            let named = match serde_json::from_slice::<Line>(raw.strip_suffix(b"\n").unwrap_or(raw)) {
                Ok(Line::Shard { file, .. }) => files.contains(file.as_str()),
                _ => false,
            };
            if !named {
                kept.extend_from_slice(raw);
            }
        }
        programl::fsutil::write_bytes_atomically(&self.path, programl::fsutil::Durability::Synced, &kept)
            .map_err(DatasetError::io(&self.path))
    }
}

fn to_line(line: &Line) -> Vec<u8> {
    // Serializing strings and integers cannot fail.
    let mut bytes = serde_json::to_vec(line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Whether `name` is a shard's file name: `shard-` digits `.pgds`.
pub(crate) fn is_shard_name(name: &str) -> bool {
    name.strip_prefix("shard-")
        .and_then(|s| s.strip_suffix(".pgds"))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The number in a shard's file name.
pub(crate) fn shard_number(name: &str) -> Option<u64> {
    name.strip_prefix("shard-")?.strip_suffix(".pgds")?.parse().ok()
}

/// The shard file name of `number`.
pub(crate) fn shard_name(number: u64) -> String {
    format!("shard-{number:06}.pgds")
}

/// Appends lines to a manifest whose torn tail (if any) was cut off.
pub(crate) struct Appender {
    path: PathBuf,
    file: std::fs::File,
}

impl Appender {
    /// Opens `manifest` for appending after truncating it to its valid part.
    pub fn open(manifest: &Manifest) -> Result<Appender, DatasetError> {
        let path = manifest.path.clone();
        let file = std::fs::OpenOptions::new().write(true).open(&path).map_err(DatasetError::io(&path))?;
        let len = file.metadata().map_err(DatasetError::io(&path))?.len();
        if len != manifest.valid_len {
            file.set_len(manifest.valid_len).map_err(DatasetError::io(&path))?;
            file.sync_all().map_err(DatasetError::io(&path))?;
        }
        drop(file);
        let file = std::fs::OpenOptions::new().append(true).open(&path).map_err(DatasetError::io(&path))?;
        Ok(Appender { path, file })
    }

    /// Appends one line; durable only after [`Appender::sync`].
    pub fn append(&mut self, line: &Line) -> Result<(), DatasetError> {
        self.file.write_all(&to_line(line)).map_err(DatasetError::io(&self.path))
    }

    /// fsyncs the manifest.
    pub fn sync(&mut self) -> Result<(), DatasetError> {
        self.file.sync_data().map_err(DatasetError::io(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_tail_is_ignored_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::create(dir.path(), 7, "/ir", &[]).unwrap();
        let m = Manifest::read(dir.path()).unwrap();
        let mut a = Appender::open(&m).unwrap();
        let shard = Line::Shard { file: shard_name(1), records: 2, bytes: 10, crc32: 5, inputs: vec!["a.ll".into(), "b.ll".into()] };
        a.append(&shard).unwrap();
        a.append(&Line::Failure { input: "c.ll".into(), error: "c.ll: bad".into() }).unwrap();
        a.sync().unwrap();
        drop(a);
        let path = dir.path().join(crate::MANIFEST);
        let good_len = std::fs::metadata(&path).unwrap().len();
        // A kill in the middle of the next append.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"kind":"shard","file":"shard-000002.pg"#).unwrap();
        drop(f);
        let m = Manifest::read(dir.path()).unwrap();
        assert_eq!((m.seed, m.ir.as_str()), (7, "/ir"));
        assert_eq!(m.shards.len(), 1);
        assert_eq!(m.shards[0].inputs, ["a.ll", "b.ll"]);
        assert_eq!(m.failures, [("c.ll".to_string(), "c.ll: bad".to_string())]);
        assert_eq!(m.valid_len, good_len);
        let mut a = Appender::open(&m).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
        a.append(&Line::Failure { input: "d.ll".into(), error: "x".into() }).unwrap();
        drop(a);
        assert_eq!(Manifest::read(dir.path()).unwrap().failures.len(), 2);
    }

    #[test]
    fn dropping_shards_keeps_every_other_line_in_its_order() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::create(dir.path(), 3, "/ir", &[]).unwrap();
        let mut a = Appender::open(&Manifest::read(dir.path()).unwrap()).unwrap();
        for n in 1..=3 {
            a.append(&Line::Shard { file: shard_name(n), records: 1, bytes: 9, crc32: n as u32, inputs: vec![format!("{n}.ll")] }).unwrap();
            a.append(&Line::Failure { input: format!("bad{n}.ll"), error: "x".into() }).unwrap();
        }
        a.sync().unwrap();
        drop(a);
        let path = dir.path().join(crate::MANIFEST);
        let before = std::fs::read_to_string(&path).unwrap();
        // A torn tail goes with the rewrite.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"kind":"fail"#).unwrap();
        drop(f);
        let m = Manifest::read(dir.path()).unwrap();
        m.drop_shards(&[shard_name(2).as_str()].into_iter().collect()).unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        let expected: String = before.split_inclusive('\n').filter(|l| !l.contains(&shard_name(2))).collect();
        assert_eq!(after, expected);
        let m = Manifest::read(dir.path()).unwrap();
        assert_eq!(m.shards.iter().map(|s| s.file.as_str()).collect::<Vec<_>>(), [shard_name(1), shard_name(3)]);
        assert_eq!(m.failures.len(), 3);
        assert_eq!(m.seed, 3);
    }

    #[test]
    fn a_store_of_an_older_format_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::create(dir.path(), 0, "/ir", &[]).unwrap();
        let path = dir.path().join(crate::MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap();
        let current = format!("\"format\":{FORMAT_VERSION}");
        assert!(text.contains(&current), "{text}");
        std::fs::write(&path, text.replace(&current, "\"format\":1")).unwrap();
        let e = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains(&format!("dataset format 1, this programl reads format {FORMAT_VERSION}")), "{e}");
        assert!(e.contains("older SPEC.md §2") && e.contains("rebuild"), "{e}");
    }

    #[test]
    fn garbage_in_the_middle_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::create(dir.path(), 0, "/ir", &[]).unwrap();
        let path = dir.path().join(crate::MANIFEST);
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"nonsense\n{\"kind\":\"failure\",\"input\":\"a\",\"error\":\"b\"}\n").unwrap();
        drop(f);
        let e = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("manifest.jsonl:2: bad manifest line"), "{e}");
        assert!(matches!(Manifest::read(&dir.path().join("none")), Err(DatasetError::NotADataset { .. })));
    }

    #[test]
    fn shard_names() {
        assert!(is_shard_name(&shard_name(12)));
        assert_eq!(shard_number(&shard_name(12)), Some(12));
        assert!(!is_shard_name("shard-.pgds") && !is_shard_name("shard-1.pgds.tmp") && !is_shard_name("../x"));
    }
}
