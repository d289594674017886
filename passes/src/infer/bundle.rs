//! What the pass reads of a bundle itself, before any libtorch is loaded:
//! `config.json` (task, head, classes, steps, provenance) and
//! `vocabulary.json` (the core's vocabulary, which featurisation needs).
//!
//! The runtime checks the whole bundle again when it opens it (weights,
//! shapes, vocabulary size); here the point is to refuse a bundle that
//! cannot fit the module, a provenance mismatch above all, without paying
//! for libtorch.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use programl::vocab::Vocabulary;
use serde::Deserialize;

/// `config.json`'s `format` and `version` that this plugin reads.
pub const FORMAT: &str = "programl-model";
pub const VERSION: u32 = 1;
/// The graph mode the pass builds.
pub const GRAPH_MODE: &str = "paper";

#[derive(Clone, Debug, Deserialize)]
pub struct Config {
    pub format: String,
    pub version: u32,
    pub task: String,
    pub head: String,
    pub classes: Vec<String>,
    pub hyper: Hyper,
    pub provenance: Provenance,
    /// How the training sources were compiled (graph-level bundles): the
    /// pass reads the levels, to say when a module's IR is of a level the
    /// bundle never saw.
    #[serde(default)]
    pub source: Option<Source>,
}

/// `config.json`'s `source`, the part the pass reads (other fields, now
/// or later, are left to `programl_infer::bundle::SourceCompile`).
#[derive(Clone, Debug, Deserialize)]
pub struct Source {
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub levels: Option<Vec<String>>,
}

impl Source {
    /// The levels the training IR was compiled at, as
    /// `programl_infer::bundle::SourceCompile::trained_levels`.
    pub fn trained_levels(&self) -> Vec<String> {
        programl_infer::bundle::levels_of(&self.flags, self.levels.as_deref())
    }

    /// `(unoptimised, optimised)`: whether the training IR had each.
    pub fn trained_on(&self) -> (bool, bool) {
        programl_infer::bundle::trained_on(&self.trained_levels())
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Hyper {
    pub steps: i64,
    /// Adaptive depth (`programl_infer::config::Stop`): present, the pass
    /// leaves the number of steps to it unless `steps=` is given.
    #[serde(default)]
    pub stop: Option<serde_json::Value>,
    /// A graph-level head (head `graph`).
    #[serde(default)]
    pub graph: Option<GraphHead>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct GraphHead {
    /// The auxiliary inputs the model takes, by name (`transfer`, `wgsize`).
    pub aux: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Provenance {
    pub graph_mode: String,
    pub llvm_major: u32,
    pub opaque_pointers: bool,
    pub featurisation_version: u32,
}

/// A bundle as the pass knows it.
pub struct Bundle {
    /// The canonical directory (the cache key).
    pub dir: PathBuf,
    pub config: Config,
    pub vocabulary: Vocabulary,
}

/// The bundle in `dir`, read once per process (failures are not kept, so
/// a bundle fixed mid-build is picked up).
pub fn read(dir: &Path) -> Result<Arc<Bundle>, String> {
    static BUNDLES: OnceLock<Mutex<HashMap<PathBuf, Arc<Bundle>>>> = OnceLock::new();
    let canonical = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    if !canonical.is_dir() {
        return Err(format!("{}: not a bundle directory", dir.display()));
    }
    let cache = BUNDLES.get_or_init(Default::default);
    if let Some(b) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&canonical) {
        return Ok(b.clone());
    }
    let config_path = dir.join("config.json");
    let text = programl::fsutil::read_regular_to_string(&config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let config = parse_config(&text).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let vocabulary = Vocabulary::load(dir.join("vocabulary.json")).map_err(|e| e.to_string())?;
    let bundle = Arc::new(Bundle { dir: canonical.clone(), config, vocabulary });
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(canonical, bundle.clone());
    Ok(bundle)
}

/// `config.json`'s text, checked for what the pass relies on.
pub fn parse_config(text: &str) -> Result<Config, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let format = value.get("format").and_then(|v| v.as_str()).unwrap_or("");
    let version = value.get("version").and_then(|v| v.as_u64());
    if format != FORMAT || version != Some(VERSION as u64) {
        return Err(format!(
            "not a programl model of a version this plugin reads: format '{format}' version {}, expected '{FORMAT}' version {VERSION}",
            version.map_or("none".to_string(), |v| v.to_string())
        ));
    }
    let config: Config = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if !matches!(config.head.as_str(), "node" | "graph") {
        return Err(format!("head '{}' is neither node nor graph", config.head));
    }
    if config.classes.is_empty() {
        return Err("no classes".into());
    }
    Ok(config)
}

/// What the module is, for the provenance check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleFacts {
    pub llvm_major: u32,
    pub opaque_pointers: bool,
}

/// Every way the bundle's provenance differs from the module and this
/// plugin; empty if it fits.
pub fn mismatches(p: &Provenance, module: ModuleFacts) -> Vec<String> {
    let mut out = Vec::new();
    if p.graph_mode != GRAPH_MODE {
        out.push(format!("it was trained on {} graphs, this pass builds {GRAPH_MODE} graphs", p.graph_mode));
    }
    if p.llvm_major != module.llvm_major {
        out.push(format!("it was trained on LLVM {} IR, this is LLVM {}", p.llvm_major, module.llvm_major));
    }
    if p.opaque_pointers != module.opaque_pointers {
        let kind = |opaque| if opaque { "opaque-pointer" } else { "typed-pointer" };
        out.push(format!("it was trained on {} IR, this module has {} IR", kind(p.opaque_pointers), kind(module.opaque_pointers)));
    }
    if p.featurisation_version != programl::batch::LAYOUT_VERSION {
        out.push(format!("its featurisation version is {}, this plugin's is {}", p.featurisation_version, programl::batch::LAYOUT_VERSION));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{"format":"programl-model","version":1,"task":"reachability","head":"node",
        "classes":["negative","positive"],"hyper":{"vocab_size":3,"positions":1024,"selector_value":50.0,"steps":30,
        "state_dropout":0.2,"classes":2},"provenance":{"graph_mode":"paper","llvm_major":16,"opaque_pointers":true,
        "featurisation_version":1,"training_data_hash":"x","examples_seen":1,"wall_time_s":1.0,"dtype":"f32","created_by":"t"}}"#;

    #[test]
    fn config_and_provenance() {
        let c = parse_config(CONFIG).unwrap();
        assert_eq!((c.task.as_str(), c.hyper.steps, c.classes.len()), ("reachability", 30, 2));
        let facts = ModuleFacts { llvm_major: 16, opaque_pointers: true };
        assert!(mismatches(&c.provenance, facts).is_empty());
        let m = mismatches(&c.provenance, ModuleFacts { llvm_major: 15, opaque_pointers: false });
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].contains("LLVM 16 IR, this is LLVM 15"), "{m:?}");
        assert!(m[1].contains("opaque-pointer IR, this module has typed-pointer IR"), "{m:?}");
        let other = Provenance { graph_mode: "programl-0.3".into(), featurisation_version: 9, ..c.provenance.clone() };
        let m = mismatches(&other, facts);
        assert!(m[0].contains("programl-0.3 graphs") && m[1].contains("featurisation version is 9"), "{m:?}");
    }

    #[test]
    fn bad_configs_say_why() {
        assert!(parse_config("{").unwrap_err().starts_with("not JSON"));
        assert!(parse_config(&CONFIG.replace("\"version\":1", "\"version\":7")).unwrap_err().contains("version 7"));
        assert!(parse_config(&CONFIG.replace("\"head\":\"node\"", "\"head\":\"edge\"")).unwrap_err().contains("head 'edge'"));
        assert!(parse_config(&CONFIG.replace("\"task\":\"reachability\",", "")).unwrap_err().contains("task"));
    }
}
