//! The bundle on disk: one directory holding a trained model.
//!
//! ```text
//! BUNDLE/
//!   config.json          format name and version, task, head, hyperparameters, provenance
//!   weights.safetensors  the parameters (names and shapes: [`Hyper::tensor_shapes`]), f32
//!   vocabulary.json      the node-text vocabulary (programl::vocab's format)
//! ```
//!
//! [`read_config`] checks `config.json`; [`crate::weights`] checks every
//! tensor's name, shape and dtype. Each failure is a [`BundleError`]
//! naming the file and what does not match. Packed weights live in memory
//! only: a bundle on disk is these three files.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Hyper;

/// `config.json`'s `format`.
pub const FORMAT: &str = "programl-model";
/// `config.json`'s `version`: bumped by any change to the files' meaning.
pub const VERSION: u32 = 1;

pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "weights.safetensors";
pub const VOCABULARY_FILE: &str = "vocabulary.json";

/// The largest `hyper.positions` a bundle may have (the position table then
/// takes 8.9 MB; SPEC.md §3's is 1024 rows).
pub const MAX_POSITIONS: i64 = 1 << 16;
/// The largest `hyper.steps` a bundle may have (SPEC.md §3: 30).
pub const MAX_STEPS: i64 = 10_000;
/// The widest state a bundle may ask for (`hyper.hidden`).
pub const MAX_HIDDEN: i64 = 512;

/// `config.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub format: String,
    pub version: u32,
    /// The task, lowercase (`reachability`, …, as in `models/<task>`).
    pub task: String,
    /// `node` (a prediction per node) or `graph`.
    pub head: Head,
    /// Class names, index = logit column (`["negative", "positive"]`).
    pub classes: Vec<String>,
    pub hyper: Hyper,
    pub provenance: Provenance,
    /// For models of source programs (device mapping, POJ-104): how the
    /// sources were compiled to IR, so that new sources are compiled alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceCompile>,
    /// The precision `dtype=auto` runs this bundle at where it was measured
    /// to need another than the rule for every bundle (INT8 where the CPU
    /// prefers it, else FP32): `f32` when INT8 was measured outside its
    /// bound on the bundle's own task (models/README.md, "INT8 against
    /// FP32"). An explicit `dtype` is honoured whatever it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_dtype: Option<AutoDtype>,
}

/// What `dtype=auto` runs a bundle at ([`Config::auto_dtype`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoDtype {
    /// FP32 on every CPU.
    F32,
}

/// The compiler and flags that turned the training sources into IR.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceCompile {
    pub compiler: String,
    pub flags: Vec<String>,
    /// Text force-included before every source (POJ-104's headers and
    /// `using namespace std;`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prelude: Option<String>,
    /// Device mapping: which input the training graphs came from
    /// (`sources`, `csv` or `ncc`: `programl-train devmap --input`); a
    /// bundle without it was trained on `csv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The optimisation levels of the training IR (`O0` to `O3`) where the
    /// sources were compiled at several (POJ-104's four-level run: `flags`
    /// then names the first); absent: the one level in `flags`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Vec<String>>,
}

/// The levels of training IR from a bundle's `source.levels`, else from
/// the `-O` flag among its `source.flags` (shared with the learned pass,
/// which reads only those two fields).
pub fn levels_of(flags: &[String], levels: Option<&[String]>) -> Vec<String> {
    match levels {
        Some(levels) => levels.to_vec(),
        None => flags.iter().filter_map(|f| f.strip_prefix('-').filter(|l| l.starts_with('O'))).map(String::from).collect(),
    }
}

impl SourceCompile {
    /// The levels the training IR was compiled at: [`SourceCompile::levels`],
    /// else the `-O` flag in `flags` (`-O2` gives `O2`); empty when
    /// neither says (NCC's IR, compiled by its authors).
    pub fn trained_levels(&self) -> Vec<String> {
        levels_of(&self.flags, self.levels.as_deref())
    }

    /// Whether the training IR included optimised IR (a level other than
    /// `O0`) and unoptimised IR (`O0`): `(unoptimised, optimised)`, both
    /// false when the levels are unknown.
    pub fn trained_on(&self) -> (bool, bool) {
        trained_on(&self.trained_levels())
    }
}

/// `(unoptimised, optimised)`: whether `levels` hold `O0`, and a level
/// other than `O0`.
pub fn trained_on(levels: &[String]) -> (bool, bool) {
    (levels.iter().any(|l| l == "O0"), levels.iter().any(|l| l != "O0"))
}

/// What the model predicts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Head {
    Node,
    Graph,
}

/// Where the model came from: what the learned pass checks before trusting
/// it on a module.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The graph mode of the training graphs: `paper` or `programl-0.3`.
    pub graph_mode: String,
    /// The LLVM major version the training graphs were built with.
    pub llvm_major: u32,
    /// Whether the training IR used opaque pointers.
    pub opaque_pointers: bool,
    /// [`programl::batch::LAYOUT_VERSION`] at training time.
    pub featurisation_version: u32,
    /// A hash of the training data (the dataset store's manifest).
    pub training_data_hash: String,
    /// Training examples seen.
    pub examples_seen: u64,
    /// Training wall time, seconds.
    pub wall_time_s: f64,
    /// The matmul precision the model was trained and validated with.
    pub dtype: String,
    /// The tool that wrote the bundle, with its version.
    pub created_by: String,
    /// The corpora the training data was built from, as
    /// `SET-POINTERS-LEVELS@ID` (`programl_dataset::corpus::CorpusRef::name`:
    /// the `corpus-manifest.json` of each set `scripts/corpus.sh` built).
    /// Empty where none was recorded: data of no corpus set (DevMap,
    /// POJ-104's own), or a store built before corpus manifests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corpus: Vec<String>,
}

/// Why a bundle could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: {detail}", path.display())]
    Invalid { path: PathBuf, detail: String },
    #[error("{}: not a programl model of a version this build reads: {detail}", path.display())]
    Version { path: PathBuf, detail: String },
    /// The vocabulary's own error names its file.
    #[error("{source}")]
    Vocabulary { path: PathBuf, source: programl::vocab::VocabError },
}

pub(crate) fn invalid(path: &Path, detail: impl Into<String>) -> BundleError {
    BundleError::Invalid { path: path.to_path_buf(), detail: detail.into() }
}

/// Reads and checks `dir/config.json`.
pub fn read_config(dir: &Path) -> Result<Config, BundleError> {
    let path = dir.join(CONFIG_FILE);
    let text = programl::fsutil::read_regular_to_string(&path).map_err(|source| BundleError::Io { path: path.clone(), source })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(&path, format!("not JSON: {e}")))?;
    let format = value.get("format").and_then(|v| v.as_str()).unwrap_or("");
    let version = value.get("version").and_then(|v| v.as_u64());
    if format != FORMAT || version != Some(VERSION as u64) {
        return Err(BundleError::Version {
            path,
            detail: format!(
                "format '{format}' version {}, expected '{FORMAT}' version {VERSION}",
                version.map_or("none".to_string(), |v| v.to_string())
            ),
        });
    }
    let config: Config = serde_json::from_value(value).map_err(|e| invalid(&path, e.to_string()))?;
    check_config(dir, &config)?;
    Ok(config)
}

/// The checks [`read_config`] makes of a config it read, for a config built
/// or edited in memory (errors name `dir`'s config file).
pub fn check_config(dir: &Path, config: &Config) -> Result<(), BundleError> {
    let path = dir.join(CONFIG_FILE);
    if config.hyper.classes as usize != config.classes.len() {
        return Err(invalid(&path, format!("{} class names for {} classes", config.classes.len(), config.hyper.classes)));
    }
    if (config.head == Head::Graph) != config.hyper.graph.is_some() {
        let detail = match config.head {
            Head::Graph => "head \"graph\" without hyper.graph (the graph head's settings)",
            Head::Node => "head \"node\" with hyper.graph (settings of a graph head)",
        };
        return Err(invalid(&path, detail));
    }
    if config.hyper.vocab_size == 0 || config.hyper.positions < 1 || config.hyper.classes < 1 {
        return Err(invalid(&path, "hyper: vocab_size, positions and classes must be positive"));
    }
    // `Ggnn::new` allocates the position table (positions × 34 f32) before
    // any weight is read, and inference runs `steps` steps unless told
    // otherwise: unbounded, a corrupt number is an allocation failure,
    // which aborts the process (the compiler, under the learned pass), or
    // a prediction that never ends (found by tests/fuzz_bundle.rs).
    if config.hyper.positions > MAX_POSITIONS {
        return Err(invalid(&path, format!("hyper.positions {} is above {MAX_POSITIONS}", config.hyper.positions)));
    }
    if !(1..=MAX_STEPS).contains(&config.hyper.steps) {
        return Err(invalid(&path, format!("hyper.steps {} is outside 1..={MAX_STEPS}", config.hyper.steps)));
    }
    let h = config.hyper.hidden;
    if !(4..=MAX_HIDDEN).contains(&h) || h % 2 != 0 {
        return Err(invalid(
            &path,
            format!("hyper.hidden {h} is not an even width in 4..={MAX_HIDDEN} (an even text embedding and the 2 selector entries)"),
        ));
    }
    if let Some(g) = config.hyper.graph.as_ref().filter(|g| g.join == crate::config::Join::State) {
        if g.pool != crate::config::Pool::Gated || g.aux.is_empty() {
            return Err(invalid(
                &path,
                "hyper.graph.join \"state\" needs pool \"gated\" and auxiliary inputs (the state it joins them with)",
            ));
        }
    }
    if let Some(stop) = &config.hyper.stop {
        stop.check("hyper.stop").map_err(|detail| invalid(&path, detail))?;
    }
    // The root's input entry, as f32: an infinite one (anything past f32's
    // range) makes every probability NaN.
    let selector = config.hyper.selector_value;
    if !(selector as f32).is_finite() {
        return Err(invalid(&path, format!("hyper.selector_value {selector:e} is not a finite f32")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(flags: &[&str], levels: Option<&[&str]>) -> SourceCompile {
        SourceCompile {
            compiler: "clang-16".into(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
            prelude: None,
            input: None,
            levels: levels.map(|l| l.iter().map(|x| x.to_string()).collect()),
        }
    }

    /// The levels a bundle was trained at: its `levels` where it has them,
    /// else the `-O` flag it compiled with; the shipped bundles' configs
    /// say what they were trained on.
    #[test]
    fn trained_levels_come_from_levels_else_the_flag() {
        assert_eq!(source(&["-x", "c++", "-O0", "-S"], None).trained_on(), (true, false));
        assert_eq!(source(&["-target", "spir64", "-O1"], None).trained_on(), (false, true));
        assert_eq!(source(&["-O0"], Some(&["O0", "O1", "O2", "O3"])).trained_on(), (true, true));
        assert_eq!(source(&[], None).trained_on(), (false, false));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let shipped = |dir: &str| read_config(&root.join(dir)).unwrap().source.unwrap();
        assert_eq!(shipped("poj104-O0").trained_levels(), ["O0"]);
        assert_eq!(shipped("poj104").trained_levels(), ["O0", "O1", "O2", "O3"]);
        assert_eq!(shipped("devmap-amd").trained_on(), (false, true));
    }
}
