//! A shipped DeepDataFlow model's training recipe, as data:
//! `models/<task>/recipe.json` lists the settings every phase shares and
//! the phases in order (learning rate, graph size limit, budget), and
//! `programl-train recipe models/<task> --data DATA` runs it.
//!
//! Each phase is a `train` run of its own (`RUNS/<task>-<phase>`),
//! resumable and with a cumulative budget; every phase but the first
//! starts from the previous phase's bundle (`--init`: validated first, so a
//! phase never ships worse than what it started from). When the last
//! phase's budget is spent, the last run's bundle is shipped into the
//! recipe's directory as a whole (`bundle::replace_dir`: staged, then
//! renamed; a kill leaves the old bundle or the new one), with the recipe
//! and every phase's record (checkpoint, `log.csv`, `curves.png`: the
//! first phase's in the directory itself, the others' in `<phase>/`).
//!
//! On a machine without the runs (a fresh clone), each run starts from
//! the checkpoint kept in the bundle's directory, so running the recipe
//! again with larger budgets continues where the last session stopped;
//! `--fresh` ignores those and trains from scratch.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use programl_model::bundle;
use serde::{Deserialize, Serialize};
use tch::Device;

use crate::train::{self, Budget, TrainArgs};

/// `recipe.json`'s `format`, and the version this program reads.
pub const FORMAT: &str = "programl-recipe";
pub const VERSION: u32 = 1;
pub const FILE: &str = "recipe.json";

/// A model's recipe. Settings left out take `train`'s defaults.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub format: String,
    pub version: u32,
    /// reachability, dominance, datadep, liveness or subexpressions.
    pub task: String,
    /// What the phases share (`train`'s flags of the same names).
    pub settings: Settings,
    pub phases: Vec<Phase>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub seed: u64,
    pub steps: i64,
    pub state_dropout: f64,
    pub pos_weight: f64,
    pub batch_nodes: usize,
    pub val_examples: usize,
    pub val_every: u64,
    /// `train --aggregation` (default `mean`): every phase's model is of
    /// one kind.
    #[serde(default, skip_serializing_if = "programl_model::Aggregation::is_mean")]
    pub aggregation: programl_model::Aggregation,
    /// `train --loss-nodes` (default `all`).
    #[serde(default, skip_serializing_if = "crate::train::LossNodes::is_all")]
    pub loss_nodes: crate::train::LossNodes,
    /// The message-passing steps the shipped bundle runs at
    /// (`hyper.steps`), where they differ from the training T above:
    /// chosen after training, on validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference: Option<Inference>,
}

/// How a shipped bundle runs where it differs from how it trained, and
/// why: its depth (`hyper.steps`), a stopping rule chosen on validation for
/// a bundle trained at a fixed T (`hyper.stop`), and what `dtype=auto`
/// runs it at (`auto_dtype` in its config).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Inference {
    /// Absent: the training T.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<i64>,
    /// Absent: the last phase's (none unless it is adaptive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<programl_infer::config::Stop>,
    /// Absent: the rule for every bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_dtype: Option<bundle::AutoDtype>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
}

/// One phase: a `train` run at its own rate and graph size limit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Names the run (`<task>-<name>`) and, but for the first phase, the
    /// subdirectory of the bundle that keeps its record.
    pub name: String,
    pub lr: f64,
    /// Examples of linear warm-up to `lr` (`train --warmup`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup: u64,
    /// Examples of cosine decay from `lr` to 0 after the warm-up (`train
    /// --cosine-examples`); absent: `lr` throughout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine_examples: Option<u64>,
    /// Training skips examples whose graph has more nodes.
    pub max_nodes: usize,
    /// Examples (`61066`) or wall time (`45m`), cumulative over resumes.
    pub budget: String,
    /// The store this phase trains on, relative to `$PROGRAML_CACHE`
    /// unless absolute (default: `--data`): a later phase may train on a
    /// larger corpus than the earlier ones (a run refuses other data than
    /// it started with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<PathBuf>,
    /// Extend the previous phase's vocabulary by the training split's new
    /// texts (`train --extend-vocab`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub extend_vocab: bool,
    /// The examples trained and validated on (`train --subset`; default
    /// `ddf-30`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// `train --longer-than`: train on the long tail only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longer_than: Option<u32>,
    /// Adaptive depth (`train --stop-tolerance` and the flags beside it):
    /// the phase trains, and ships, a bundle with a stopping rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<Adaptive>,
    /// `train --loss-nodes` for this phase, where it differs from the
    /// settings' (a phase that moves the loss to the labelled nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_nodes: Option<crate::train::LossNodes>,
    /// `train --pos-weight` for this phase, where it differs from the
    /// settings' (a phase that trades recall for precision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pos_weight: Option<f64>,
    /// `train --near-weight` for this phase (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_weight: Option<f64>,
    /// `train --aggregation` for this phase, where it differs from the
    /// settings' (a phase that starts a max model from a mean bundle's
    /// weights; the phases after it take the settings' unless they say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation: Option<programl_model::Aggregation>,
    /// `train --hidden` for this phase: a wider state, the previous
    /// phase's weights carried into it. Absent: the previous phase's
    /// width (34 for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<i64>,
    /// `train --val-examples` for this phase, where it differs from the
    /// settings'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_examples: Option<usize>,
    /// `train --val-every` for this phase, where it differs from the
    /// settings' (an adaptive phase, whose examples train fast, validates
    /// more often).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_every: Option<u64>,
    /// Why this phase (kept with the data).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
}

/// A phase's adaptive-depth settings (`train`'s flags of the same names).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Adaptive {
    pub stop_tolerance: f64,
    pub stop_max_steps: i64,
    pub extra_steps: i64,
    pub stability: f64,
    #[serde(default)]
    pub clip_norm: f64,
    #[serde(default)]
    pub until_settled: bool,
    /// `train --tape-segment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tape_segment: Option<usize>,
}

impl Recipe {
    /// Reads and checks `dir/recipe.json`.
    pub fn read(dir: &Path) -> Result<Recipe> {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read the recipe", path.display()))?;
        let r: Recipe = serde_json::from_str(&text).with_context(|| format!("{}: not a recipe", path.display()))?;
        if r.format != FORMAT || r.version != VERSION {
            bail!("{}: format '{}' version {}, expected '{FORMAT}' version {VERSION}", path.display(), r.format, r.version);
        }
        if r.phases.is_empty() {
            bail!("{}: no phases", path.display());
        }
        if let Some(steps) = r.settings.inference.as_ref().and_then(|i| i.steps) {
            if steps < 1 {
                bail!("{}: settings.inference.steps {steps} is not at least 1", path.display());
            }
        }
        if let Some(stop) = r.settings.inference.as_ref().and_then(|i| i.stop.as_ref()) {
            stop.check("settings.inference.stop").map_err(|detail| anyhow::anyhow!("{}: {detail}", path.display()))?;
        }
        for (i, p) in r.phases.iter().enumerate() {
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                bail!("{}: phase {i}'s name '{}' is not a plain name (letters, digits, - and _)", path.display(), p.name);
            }
            if r.phases[..i].iter().any(|q| q.name == p.name) {
                bail!("{}: two phases named '{}'", path.display(), p.name);
            }
            p.budget.parse::<Budget>().map_err(|e| anyhow::anyhow!("{}: phase '{}': {e}", path.display(), p.name))?;
            if !(p.lr.is_finite() && p.lr > 0.0) {
                bail!("{}: phase '{}': lr {} is not positive", path.display(), p.name, p.lr);
            }
        }
        Ok(r)
    }

    /// Where phase `i` keeps its record inside the bundle's directory.
    fn record(&self, dir: &Path, i: usize) -> PathBuf {
        if i == 0 {
            dir.to_path_buf()
        } else {
            dir.join(&self.phases[i].name)
        }
    }
}

/// How `recipe` runs.
pub struct Options {
    pub data: PathBuf,
    /// Where the phases' runs live.
    pub runs: PathBuf,
    /// Train from scratch: ignore the checkpoints kept in the bundle.
    pub fresh: bool,
    pub threads: i32,
    pub quiet: bool,
}

/// Runs `dir`'s recipe to its end and ships the bundle into `dir`.
pub fn run(dir: &Path, o: &Options, device: Device) -> Result<()> {
    let recipe = Recipe::read(dir)?;
    std::fs::create_dir_all(&o.runs).with_context(|| format!("{}: cannot create the runs' directory", o.runs.display()))?;
    let runs: Vec<PathBuf> = recipe.phases.iter().map(|p| o.runs.join(format!("{}-{}", recipe.task, p.name))).collect();
    for (i, phase) in recipe.phases.iter().enumerate() {
        let run = &runs[i];
        if !o.fresh {
            seed(run, &recipe.record(dir, i), dir)?;
        }
        let s = &recipe.settings;
        let args = TrainArgs {
            task: recipe.task.clone(),
            data: phase.data.as_ref().map_or_else(|| o.data.clone(), |d| programl::fsutil::cache_dir().join(d)),
            seed: s.seed,
            lr: phase.lr,
            warmup: phase.warmup,
            cosine_examples: phase.cosine_examples,
            init: (i > 0).then(|| runs[i - 1].join("model")),
            extend_vocab: phase.extend_vocab && i > 0,
            steps: s.steps,
            subset: phase.subset.clone().unwrap_or_else(|| "ddf-30".into()),
            longer_than: phase.longer_than,
            stop_tolerance: phase.adaptive.as_ref().map(|a| a.stop_tolerance),
            stop_max_steps: phase.adaptive.as_ref().map_or(400, |a| a.stop_max_steps),
            extra_steps: phase.adaptive.as_ref().map_or(10, |a| a.extra_steps),
            stability: phase.adaptive.as_ref().map_or(1.0, |a| a.stability),
            clip_norm: phase.adaptive.as_ref().map_or(0.0, |a| a.clip_norm),
            until_settled: phase.adaptive.as_ref().is_some_and(|a| a.until_settled),
            tape_segment: phase.adaptive.as_ref().and_then(|a| a.tape_segment),
            state_dropout: s.state_dropout,
            aggregation: Some(phase.aggregation.unwrap_or(s.aggregation)),
            hidden: phase.hidden,
            pos_weight: phase.pos_weight.unwrap_or(s.pos_weight),
            near_weight: phase.near_weight.unwrap_or(1.0),
            loss_nodes: phase.loss_nodes.unwrap_or(s.loss_nodes),
            batch_nodes: s.batch_nodes,
            max_nodes: phase.max_nodes,
            val_examples: phase.val_examples.unwrap_or(s.val_examples),
            val_every: phase.val_every.unwrap_or(s.val_every).max(1),
            budget: Some(phase.budget.parse::<Budget>().map_err(anyhow::Error::msg)?),
            checkpoint_every_s: 120.0,
            threads: o.threads,
            quiet: o.quiet,
        };
        // A phase whose budget is spent is done (its data need not be the
        // store given now: a later phase may train on a larger one).
        if spent(run, args.budget.expect("set above")) {
            if !o.quiet {
                eprintln!("[recipe] {}: phase {} ({}) is done", recipe.task, i + 1, phase.name);
            }
            continue;
        }
        if !o.quiet {
            eprintln!(
                "[recipe] {}: phase {} of {} ({}), lr {}, budget {}",
                recipe.task,
                i + 1,
                recipe.phases.len(),
                phase.name,
                phase.lr,
                phase.budget
            );
        }
        train::run(&args, run, device).with_context(|| format!("{}: phase '{}'", dir.display(), phase.name))?;
    }
    ship(dir, &recipe, &runs)
}

/// Whether the run in `run` has spent `budget` (by its checkpoint).
fn spent(run: &Path, budget: Budget) -> bool {
    let Ok(text) = std::fs::read_to_string(run.join("checkpoint/state.json")) else { return false };
    let Ok(state) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    match budget {
        Budget::Examples(n) => state["examples_seen"].as_u64().is_some_and(|e| e >= n),
        Budget::Seconds(t) => state["wall_s"].as_f64().is_some_and(|w| w >= t),
    }
}

/// Seeds the run directory `run` from the record kept in `kept` (a run of
/// an earlier session or machine): its checkpoint, log and curves, and
/// the shipped bundle as its best model so far.
fn seed(run: &Path, kept: &Path, shipped: &Path) -> Result<()> {
    crate::checkpoint::recover_run(run)?;
    if run.join("checkpoint/state.json").exists() || !kept.join("checkpoint/state.json").exists() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(run);
    std::fs::create_dir_all(run.join("model"))?;
    copy_dir(&kept.join("checkpoint"), &run.join("checkpoint"))?;
    for f in ["log.csv", "curves.png"] {
        if kept.join(f).exists() {
            std::fs::copy(kept.join(f), run.join(f))?;
        }
    }
    for f in [bundle::CONFIG_FILE, bundle::WEIGHTS_FILE, bundle::VOCABULARY_FILE] {
        if shipped.join(f).exists() {
            std::fs::copy(shipped.join(f), run.join("model").join(f))?;
        }
    }
    // The run's vocabulary: the shipped one is the last phase's, which a
    // phase that extends the vocabulary (`extend_vocab`) made longer by
    // appending; an earlier phase's is its first rows, as many as the
    // phase's checkpoint has embedding rows (less the unknown text's).
    let rows = embedding_rows(&run.join("checkpoint/weights.safetensors"))?;
    let path = shipped.join(bundle::VOCABULARY_FILE);
    let mut vocabulary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path)?).with_context(|| format!("{}: not a vocabulary", path.display()))?;
    let tokens = vocabulary["tokens"].as_array_mut().with_context(|| format!("{}: no tokens", path.display()))?;
    if rows < 1 || rows - 1 > tokens.len() {
        bail!("{}: {rows} embedding rows, more than {} holds texts for", run.join("checkpoint").display(), path.display());
    }
    tokens.truncate(rows - 1);
    std::fs::write(run.join(bundle::VOCABULARY_FILE), serde_json::to_vec_pretty(&vocabulary)?)?;
    Ok(())
}

/// The rows of `embedding.weight` in a safetensors file, from its header.
fn embedding_rows(weights: &Path) -> Result<usize> {
    let bytes = std::fs::read(weights).with_context(|| format!("{}: cannot read", weights.display()))?;
    let (_, metadata) =
        safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| anyhow::anyhow!("{}: not safetensors: {e}", weights.display()))?;
    metadata
        .info("embedding.weight")
        .and_then(|t| t.shape.first().copied())
        .with_context(|| format!("{}: no embedding.weight", weights.display()))
}

/// Replaces `dir` as a whole: the last run's bundle, the recipe, and each
/// phase's record.
fn ship(dir: &Path, recipe: &Recipe, runs: &[PathBuf]) -> Result<()> {
    let last = runs.last().expect("a recipe has phases").join("model");
    bundle::replace_dir(dir, |staging| {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| bundle::BundleError::Io { path, source }
        };
        for f in [bundle::CONFIG_FILE, bundle::WEIGHTS_FILE, bundle::VOCABULARY_FILE] {
            std::fs::copy(last.join(f), staging.join(f)).map_err(io(&last.join(f)))?;
        }
        if let Some(inference) = &recipe.settings.inference {
            let mut config = bundle::read_config(staging)?;
            config.hyper.steps = inference.steps.unwrap_or(config.hyper.steps);
            if inference.stop.is_some() {
                config.hyper.stop = inference.stop.clone();
            }
            config.auto_dtype = inference.auto_dtype;
            programl_infer::bundle::check_config(staging, &config)?;
            let path = staging.join(bundle::CONFIG_FILE);
            let json = serde_json::to_string_pretty(&config).expect("a config serialises") + "\n";
            std::fs::write(&path, json).map_err(io(&path))?;
        }
        let text = serde_json::to_string_pretty(recipe).expect("a recipe serialises") + "\n";
        std::fs::write(staging.join(FILE), text).map_err(io(&staging.join(FILE)))?;
        for (i, run) in runs.iter().enumerate() {
            let record = recipe.record(staging, i);
            std::fs::create_dir_all(&record).map_err(io(&record))?;
            for f in ["log.csv", "curves.png"] {
                if run.join(f).exists() {
                    std::fs::copy(run.join(f), record.join(f)).map_err(io(&run.join(f)))?;
                }
            }
            copy_dir(&run.join("checkpoint"), &record.join("checkpoint")).map_err(io(&run.join("checkpoint")))?;
        }
        // Files of the old bundle that no phase writes (a README, a
        // `noaux/` variant) stay.
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let to = staging.join(&name);
            let phase_dir = recipe.phases.iter().any(|p| p.name == name.to_string_lossy());
            if !to.exists() && !phase_dir && name != "checkpoint" {
                let from = entry.path();
                if from.is_dir() {
                    copy_dir(&from, &to).map_err(io(&from))?;
                } else {
                    std::fs::copy(&from, &to).map_err(io(&from))?;
                }
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// Copies the tree `from` to `to` (created), files and directories.
pub(crate) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shipped DeepDataFlow bundle's recipe reads, and its bundle
    /// runs as the recipe says: at `settings.inference.steps` where set,
    /// else the training T, and with its `auto_dtype`; with the last
    /// phase's aggregation, and its stopping rule: the recipe's
    /// `settings.inference.stop` (reachability-adaptive), else the last
    /// phase's where that phase is adaptive (datadep-adaptive,
    /// dominance-adaptive, liveness-adaptive).
    #[test]
    fn shipped_recipes_read_and_match_their_bundles() {
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let mut read = 0;
        for (name, task) in [
            ("reachability", "reachability"),
            ("dominance", "dominance"),
            ("datadep", "datadep"),
            ("liveness", "liveness"),
            ("subexpressions", "subexpressions"),
            ("datadep-adaptive", "datadep"),
            ("dominance-adaptive", "dominance"),
            ("liveness-adaptive", "liveness"),
            ("reachability-adaptive", "reachability"),
        ] {
            let dir = models.join(name);
            let recipe = Recipe::read(&dir).unwrap();
            assert_eq!(recipe.task, task);
            let config = bundle::read_config(&dir).unwrap();
            let inference = recipe.settings.inference.as_ref();
            let want = inference.and_then(|i| i.steps).unwrap_or(recipe.settings.steps);
            assert_eq!(config.hyper.steps, want, "{}", dir.display());
            assert_eq!(config.auto_dtype, inference.and_then(|i| i.auto_dtype), "{}", dir.display());
            let last = recipe.phases.last().unwrap();
            assert_eq!(config.hyper.aggregation, last.aggregation.unwrap_or(recipe.settings.aggregation), "{}", dir.display());
            let stop = config.hyper.stop.as_ref().map(|s| (s.tolerance, s.max_steps));
            let want = inference.and_then(|i| i.stop.as_ref()).map(|s| (s.tolerance, s.max_steps));
            let want = want.or(last.adaptive.as_ref().map(|a| (a.stop_tolerance, a.stop_max_steps)));
            assert_eq!(stop, want, "{}", dir.display());
            read += 1;
        }
        assert_eq!(read, 9);
    }

    /// Seeding each phase of a shipped bundle whose last phase extended the
    /// vocabulary (datadep: main, finetune, large, then max with
    /// `extend_vocab`): every run gets the vocabulary its checkpoint's
    /// embedding was trained with, the shipped one's first rows before the
    /// extension and the whole of it after; the checkpoint, log and bundle
    /// are copied.
    #[test]
    fn seeded_phases_get_the_vocabulary_of_their_checkpoint() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/datadep");
        let recipe = Recipe::read(&dir).unwrap();
        let shipped = programl::vocab::Vocabulary::load(dir.join(bundle::VOCABULARY_FILE)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mut lengths = Vec::new();
        for (i, phase) in recipe.phases.iter().enumerate() {
            let run = tmp.path().join(&phase.name);
            seed(&run, &recipe.record(&dir, i), &dir).unwrap();
            let rows = embedding_rows(&run.join("checkpoint/weights.safetensors")).unwrap();
            let vocabulary = programl::vocab::Vocabulary::load(run.join(bundle::VOCABULARY_FILE)).unwrap();
            assert_eq!(vocabulary.len(), rows, "{}: ids, the unknown text's included", phase.name);
            assert!(vocabulary.tokens().zip(shipped.tokens()).all(|(a, b)| a == b), "{}: not the shipped one's first rows", phase.name);
            assert!(run.join("model").join(bundle::CONFIG_FILE).exists() && run.join("checkpoint/state.json").exists());
            lengths.push(vocabulary.len());
        }
        assert!(lengths[0] < shipped.len() && lengths[3] == shipped.len(), "{lengths:?} of {}", shipped.len());
        // A phase's run already under way is not seeded again.
        std::fs::write(tmp.path().join("main/marker"), "").unwrap();
        seed(&tmp.path().join("main"), &dir, &dir).unwrap();
        assert!(tmp.path().join("main/marker").exists());
    }
}
