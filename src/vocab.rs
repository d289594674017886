//! The node-text vocabulary: node texts of the training split, each with an
//! id, for the model's embedding table.
//!
//! Ids are assigned deterministically: id [`UNKNOWN_ID`] (0) is the unknown
//! token, then the texts by descending count, ties by text (byte order).
//! Counting is the dataset store's business (`programl-dataset` counts the
//! train split and reports coverage); this module only turns [`Counts`] into
//! ids and reads and writes the file, so the compiler plugin can map a
//! graph's texts exactly as training did.
//!
//! Stored as JSON:
//!
//! ```json
//! {"format": "programl-vocabulary", "version": 1,
//!  "unknown": {"id": 0, "text": "<unknown>"},
//!  "tokens": [{"id": 1, "text": "i32", "count": 5021}, …]}
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{write_bytes_atomically, Durability};

/// Why a vocabulary file could not be read or written; names the file.
#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    /// An I/O error on `path` (named once, also when `source` comes from
    /// [`crate::fsutil`], whose errors name it already).
    #[error("{}: {}", path.display(), crate::fsutil::cause(path, source))]
    Io {
        /// The vocabulary file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a vocabulary this version understands.
    #[error("{}: bad vocabulary: {detail}", path.display())]
    Format {
        /// The vocabulary file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
}

/// The id of texts not in the vocabulary.
pub const UNKNOWN_ID: u32 = 0;
/// The unknown token's display text.
pub const UNKNOWN_TEXT: &str = "<unknown>";
const FORMAT: &str = "programl-vocabulary";
const VERSION: u32 = 1;

/// A node-text vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocabulary {
    /// Texts with their training counts; entry `i` has id `i + 1`.
    tokens: Vec<(String, u64)>,
    index: HashMap<String, u32>,
}

/// Node-occurrence counts of one split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Occurrences per text.
    pub texts: HashMap<String, u64>,
    /// All occurrences.
    pub total: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireVocab {
    format: String,
    version: u32,
    unknown: WireUnknown,
    tokens: Vec<WireToken>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireUnknown {
    id: u32,
    text: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireToken {
    id: u32,
    text: String,
    count: u64,
}

impl Vocabulary {
    /// The vocabulary of `counts`: texts seen at least `min_count` times,
    /// the `max_size` most frequent if given (ties by text).
    pub fn from_counts(counts: &Counts, min_count: u64, max_size: Option<usize>) -> Vocabulary {
        let mut tokens: Vec<(String, u64)> =
            counts.texts.iter().filter(|(_, &c)| c >= min_count.max(1)).map(|(t, &c)| (t.clone(), c)).collect();
        tokens.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if let Some(m) = max_size {
            tokens.truncate(m);
        }
        Vocabulary::from_tokens(tokens)
    }

    fn from_tokens(tokens: Vec<(String, u64)>) -> Vocabulary {
        let index = tokens.iter().enumerate().map(|(i, (t, _))| (t.clone(), i as u32 + 1)).collect();
        Vocabulary { tokens, index }
    }

    /// This vocabulary with the texts of `more` that it lacks appended, in
    /// `more`'s order: every id it had is unchanged, so a model trained
    /// with it keeps its embedding rows and the new texts get rows of
    /// their own (`programl-train train --init B --extend-vocab`).
    pub fn extended(&self, more: &Vocabulary) -> Vocabulary {
        let mut tokens = self.tokens.clone();
        tokens.extend(more.tokens.iter().filter(|(t, _)| !self.index.contains_key(t)).cloned());
        Vocabulary::from_tokens(tokens)
    }

    /// Occurrences in `counts` whose text has an id.
    pub fn covered(&self, counts: &Counts) -> u64 {
        counts.texts.iter().filter(|(t, _)| self.index.contains_key(*t)).map(|(_, &c)| c).sum()
    }

    /// The id of `text`: its own, or [`UNKNOWN_ID`].
    pub fn id(&self, text: &str) -> u32 {
        self.index.get(text).copied().unwrap_or(UNKNOWN_ID)
    }

    /// The text of `id` ([`UNKNOWN_TEXT`] for [`UNKNOWN_ID`]).
    pub fn text(&self, id: u32) -> Option<&str> {
        match id {
            UNKNOWN_ID => Some(UNKNOWN_TEXT),
            _ => self.tokens.get(id as usize - 1).map(|t| t.0.as_str()),
        }
    }

    /// The training count of `id`'s text (0 for the unknown token).
    pub fn count_of(&self, id: u32) -> u64 {
        id.checked_sub(1).and_then(|i| self.tokens.get(i as usize)).map_or(0, |t| t.1)
    }

    /// Number of ids, the unknown token included (the embedding table's
    /// size).
    pub fn len(&self) -> usize {
        self.tokens.len() + 1
    }

    /// Whether the vocabulary has no text besides the unknown token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The vocabulary as JSON.
    pub fn to_json(&self) -> String {
        let wire = WireVocab {
            format: FORMAT.to_string(),
            version: VERSION,
            unknown: WireUnknown { id: UNKNOWN_ID, text: UNKNOWN_TEXT.to_string() },
            tokens: self.tokens.iter().enumerate().map(|(i, (t, c))| WireToken { id: i as u32 + 1, text: t.clone(), count: *c }).collect(),
        };
        // Strings and integers always serialize.
        let mut s = serde_json::to_string_pretty(&wire).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Parses [`Vocabulary::to_json`]'s output; `path` names it in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Vocabulary, VocabError> {
        let bad = |detail: String| VocabError::Format { path: path.to_path_buf(), detail };
        let w: WireVocab = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if w.format != FORMAT || w.version != VERSION {
            return Err(bad(format!("format {:?} version {}, expected {FORMAT:?} version {VERSION}", w.format, w.version)));
        }
        if w.unknown.id != UNKNOWN_ID {
            return Err(bad(format!("the unknown token has id {}, expected {UNKNOWN_ID}", w.unknown.id)));
        }
        let mut tokens = Vec::with_capacity(w.tokens.len());
        for (i, t) in w.tokens.into_iter().enumerate() {
            if t.id as usize != i + 1 {
                return Err(bad(format!("token {:?} has id {}, expected {}", t.text, t.id, i + 1)));
            }
            tokens.push((t.text, t.count));
        }
        let v = Vocabulary::from_tokens(tokens);
        if v.index.len() != v.tokens.len() {
            return Err(bad("a text appears twice".into()));
        }
        Ok(v)
    }

    /// Loads a vocabulary file.
    pub fn load(path: impl AsRef<Path>) -> Result<Vocabulary, VocabError> {
        let path = path.as_ref();
        let text = crate::fsutil::read_regular_to_string(path).map_err(|source| VocabError::Io { path: path.to_path_buf(), source })?;
        Vocabulary::from_json(&text, path)
    }

    /// Saves the vocabulary (atomically: temporary file, then rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), VocabError> {
        let path = path.as_ref();
        write_bytes_atomically(path, Durability::Atomic, self.to_json().as_bytes())
            .map_err(|source| VocabError::Io { path: path.to_path_buf(), source })
    }

    /// The texts with their counts, in id order (id `i + 1` at index `i`).
    pub fn tokens(&self) -> impl ExactSizeIterator<Item = (&str, u64)> + '_ {
        self.tokens.iter().map(|(t, c)| (t.as_str(), *c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> Counts {
        Counts { texts: pairs.iter().map(|(t, c)| (t.to_string(), *c)).collect(), total: pairs.iter().map(|p| p.1).sum() }
    }

    /// Extending keeps every id and appends only the new texts, in the
    /// other vocabulary's order; the result reads back from its JSON.
    #[test]
    fn extending_keeps_ids_and_appends_new_texts() {
        let c = Vocabulary::from_counts(&counts(&[("load", 9), ("br", 5), ("call", 3)]), 1, None);
        let cxx =
            Vocabulary::from_counts(&counts(&[("invoke", 40), ("load", 30), ("landingpad", 20), ("call", 10), ("resume", 2)]), 1, None);
        let v = c.extended(&cxx);
        assert_eq!([v.id("load"), v.id("br"), v.id("call")], [c.id("load"), c.id("br"), c.id("call")]);
        assert_eq!([v.id("invoke"), v.id("landingpad"), v.id("resume")], [4, 5, 6]);
        assert_eq!(v.len(), 7);
        assert_eq!(Vocabulary::from_json(&v.to_json(), Path::new("v.json")).unwrap(), v);
        assert_eq!(c.extended(&c), c);
    }

    #[test]
    fn ids_by_count_then_text_with_unknown_first() {
        let v = Vocabulary::from_counts(&counts(&[("i32", 5), ("br", 2), ("add", 2), ("ret", 9)]), 1, None);
        assert_eq!(v.len(), 5);
        assert_eq!([v.id("ret"), v.id("i32"), v.id("add"), v.id("br")], [1, 2, 3, 4]);
        assert_eq!(v.id("never seen"), UNKNOWN_ID);
        assert_eq!(v.text(0), Some(UNKNOWN_TEXT));
        assert_eq!(v.text(3), Some("add"));
        assert_eq!(v.count_of(2), 5);
        let back = Vocabulary::from_json(&v.to_json(), Path::new("v.json")).unwrap();
        assert_eq!(back, v);
        assert_eq!(v.covered(&counts(&[("add", 3), ("xor", 1)])), 3);
        let small = Vocabulary::from_counts(&counts(&[("i32", 5), ("br", 2), ("add", 2), ("ret", 9)]), 3, Some(1));
        assert_eq!(small.len(), 2);
        assert_eq!(small.id("ret"), 1);
        assert_eq!(small.id("i32"), UNKNOWN_ID);
    }

    #[test]
    fn bad_files_are_named() {
        let p = Path::new("dir/v.json");
        for text in [
            "{",
            r#"{"format":"x","version":1,"unknown":{"id":0,"text":"u"},"tokens":[]}"#,
            r#"{"format":"programl-vocabulary","version":1,"unknown":{"id":0,"text":"u"},"tokens":[{"id":2,"text":"a","count":1}]}"#,
            r#"{"format":"programl-vocabulary","version":1,"unknown":{"id":0,"text":"u"},"tokens":[{"id":1,"text":"a","count":1},{"id":2,"text":"a","count":1}]}"#,
        ] {
            let e = Vocabulary::from_json(text, p).unwrap_err().to_string();
            assert!(e.starts_with("dir/v.json: bad vocabulary"), "{e}");
        }
    }
}
