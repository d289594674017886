//! Algorithm classification on POJ-104 (SPEC.md §4): which of 104
//! programming problems does a student's program solve? A graph-level GGNN
//! over each program's graph, with one class per problem.
//!
//! The data is `poj104/<class>/<n>.cpp` (the dataset's tarball unpacked
//! into the cache, or any directory laid out the same way). Programs are
//! compiled by [`compile::Harness`] at the chosen -O levels; the split is
//! by program (a hash of `<class>/<file>`: 80% train, 10% validation, 10%
//! test), so every -O variant of a program is in one split. Training uses
//! every level's graphs of the training programs; validation and test use
//! the first level, which is also what the bundle records for compiling
//! new programs (`eval --data DIR`).
//!
//! Runs are resumable: `RUN/checkpoint/` (weights, AdamW moments, the
//! position in the epoch) is replaced whole every few minutes and at
//! every epoch's end, and the command run again continues from it.

pub mod compile;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use programl::batch::GraphInput;
use programl::builder::{build_file, BuildOptions};
use programl::graph::Edge;
use programl::hash::Fnv1a;
use programl::vocab::{Counts, Vocabulary};
use programl_model::bundle::{self, Bundle, Config, Head, Provenance, SourceCompile};
use programl_model::{Ggnn, GraphHead, Hyper, Pool};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tch::Device;

use crate::graphtask::{self, RunSettings};
use compile::{Compiled, Harness};

/// The task name in bundles.
pub const TASK: &str = "poj104";
/// Extensions of program files.
const EXTENSIONS: [&str; 5] = ["cpp", "cc", "cxx", "c", "C"];

/// A program of a class directory.
#[derive(Clone, Debug)]
pub struct Program {
    pub class: usize,
    /// `<class>/<file>`: the split's key.
    pub rel: String,
    pub path: PathBuf,
}

/// Which split a program is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Val,
    Test,
}

/// The split of the program `<class>/<file>`: by a hash of that name.
pub fn split_of(rel: &str) -> Split {
    let mut h = Fnv1a::default();
    h.write(rel.as_bytes());
    match programl::hash::mix(h.finish()) % 10 {
        0 => Split::Test,
        1 => Split::Val,
        _ => Split::Train,
    }
}

/// The classes (subdirectories, numerically ordered where every name is a
/// number) and programs of `dir`. Files that are not sources are skipped.
pub fn list(dir: &Path) -> Result<(Vec<String>, Vec<Program>)> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("{}: cannot read the directory", dir.display()))?;
    // Names as text (lossily, for classes and messages); paths as the
    // directory gives them, so that a name that is not UTF-8 still reads.
    let mut classes: Vec<(String, PathBuf)> = Vec::new();
    for e in entries {
        let e = e.with_context(|| format!("{}: cannot read the directory", dir.display()))?;
        // Symbolic links followed (a class linked in from elsewhere).
        if e.path().is_dir() {
            classes.push((e.file_name().to_string_lossy().into_owned(), e.path()));
        }
    }
    if classes.is_empty() {
        bail!("{}: no class subdirectories (expected DIR/<class>/<n>.cpp)", dir.display());
    }
    sort_names(&mut classes);
    let mut programs = Vec::new();
    for (c, (class, sub)) in classes.iter().enumerate() {
        let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(sub)
            .with_context(|| format!("{}: cannot read the directory", sub.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_file())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .filter(|(_, path)| path.extension().is_some_and(|x| EXTENSIONS.iter().any(|e| x == *e)))
            .collect();
        sort_names(&mut files);
        for (f, path) in files {
            programs.push(Program { class: c, rel: format!("{class}/{f}"), path });
        }
    }
    if programs.is_empty() {
        bail!("{}: no programs (*.cpp, *.cc, *.c) in its class subdirectories", dir.display());
    }
    Ok((classes.into_iter().map(|(name, _)| name).collect(), programs))
}

/// Numeric order where a name's stem is a number, then by name (then by
/// path: two names that are not UTF-8 may read the same).
fn sort_names(entries: &mut [(String, PathBuf)]) {
    entries.sort_by_key(|(n, path)| {
        let stem = n.split('.').next().unwrap_or(n);
        (stem.parse::<u64>().unwrap_or(u64::MAX), n.clone(), path.clone())
    });
}

/// A graph as node text ids (into an [`Interner`]) and edges: compact, so
/// 100k of them fit in memory.
pub struct Encoded {
    texts: Vec<u32>,
    edges: Vec<(u32, u32, Edge)>,
}

impl Encoded {
    pub fn nodes(&self) -> usize {
        self.texts.len()
    }
}

/// Node texts, each stored once.
#[derive(Default)]
pub struct Interner {
    ids: HashMap<String, u32>,
    texts: Vec<String>,
}

impl Interner {
    fn id(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.to_string());
        self.ids.insert(text.to_string(), id);
        id
    }
}

/// What became of one program at one level.
pub enum Outcome {
    Graph(Encoded),
    Failed(String),
    /// Not attempted: the compile budget ran out.
    Skipped,
}

/// Programs compiled at each level and built into graphs.
pub struct Corpus {
    pub classes: Vec<String>,
    pub programs: Vec<Program>,
    /// `outcomes[level][program]`.
    pub outcomes: Vec<Vec<Outcome>>,
    pub interner: Interner,
    pub repaired: usize,
}

impl Corpus {
    /// Compiles (or reads from the harnesses' caches) and encodes every
    /// program at every harness's level, in parallel, with progress on
    /// stderr. Past `budget_s` seconds, the rest is skipped: run again to
    /// continue (the cache keeps what is done).
    pub fn build(
        classes: Vec<String>,
        programs: Vec<Program>,
        harnesses: &[Harness],
        budget_s: Option<f64>,
        quiet: bool,
    ) -> Result<Corpus> {
        let interner = Mutex::new(Interner::default());
        let total = programs.len() * harnesses.len();
        let done = AtomicUsize::new(0);
        let repaired = AtomicUsize::new(0);
        let start = Instant::now();
        let last = Mutex::new(Instant::now());
        let mut outcomes = Vec::new();
        for h in harnesses {
            let level: Vec<Outcome> = programs
                .par_iter()
                .map(|p| -> Result<Outcome> {
                    if budget_s.is_some_and(|b| start.elapsed().as_secs_f64() > b) {
                        return Ok(Outcome::Skipped);
                    }
                    let source = std::fs::read(&p.path).with_context(|| format!("{}: cannot read", p.path.display()))?;
                    let outcome = match h.compile(&source)? {
                        Compiled::Ir { path, repaired: r } => {
                            repaired.fetch_add(r as usize, Ordering::Relaxed);
                            match build_file(&path, &BuildOptions::MODEL) {
                                Ok(g) => {
                                    let texts: Vec<&str> = g.graph.node_weights().map(|n| n.text.as_str()).collect();
                                    let edges = g
                                        .graph
                                        .edge_references()
                                        .map(|e| {
                                            use petgraph::visit::EdgeRef;
                                            (e.source().index() as u32, e.target().index() as u32, *e.weight())
                                        })
                                        .collect();
                                    let mut i = interner.lock().unwrap();
                                    Outcome::Graph(Encoded { texts: texts.iter().map(|t| i.id(t)).collect(), edges })
                                }
                                Err(e) => Outcome::Failed(format!("IR does not load: {e}")),
                            }
                        }
                        Compiled::Failed { cause } => Outcome::Failed(cause),
                    };
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if !quiet {
                        let mut last = last.lock().unwrap();
                        if last.elapsed().as_secs_f64() >= 10.0 || n == total {
                            *last = Instant::now();
                            let rate = n as f64 / start.elapsed().as_secs_f64().max(1e-9);
                            eprintln!(
                                "poj104: {n}/{total} programs compiled and built ({rate:.1}/s, ETA {:.0}s)",
                                (total - n) as f64 / rate
                            );
                        }
                    }
                    Ok(outcome)
                })
                .collect::<Result<_>>()?;
            outcomes.push(level);
        }
        Ok(Corpus { classes, programs, outcomes, interner: interner.into_inner().unwrap(), repaired: repaired.into_inner() })
    }

    /// Failure causes (first level) with their program counts.
    pub fn failures(&self, level: usize) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for o in &self.outcomes[level] {
            if let Outcome::Failed(cause) = o {
                *out.entry(cause.clone()).or_insert(0) += 1;
            }
        }
        out
    }

    pub fn count(&self, level: usize, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes[level].iter().filter(|o| f(o)).count()
    }

    fn graph(&self, level: usize, program: usize) -> Option<&Encoded> {
        match &self.outcomes[level][program] {
            Outcome::Graph(g) => Some(g),
            _ => None,
        }
    }

    /// The model input of an encoded graph under `vocab`.
    pub fn input(&self, g: &Encoded, vocab: &Vocabulary) -> GraphInput {
        GraphInput::from_parts(g.texts.iter().map(|&t| self.interner.texts[t as usize].as_str()), g.edges.iter().copied(), vocab)
            .expect("a built graph is a valid input")
    }

    /// The vocabulary of the training programs' graphs at every level.
    pub fn vocabulary(&self, train: &[usize]) -> Vocabulary {
        let mut per_text = vec![0u64; self.interner.texts.len()];
        let mut total = 0;
        for level in 0..self.outcomes.len() {
            for &p in train {
                if let Some(g) = self.graph(level, p) {
                    for &t in &g.texts {
                        per_text[t as usize] += 1;
                    }
                    total += g.texts.len() as u64;
                }
            }
        }
        let mut counts = Counts::default();
        for (t, &n) in per_text.iter().enumerate() {
            if n > 0 {
                counts.texts.insert(self.interner.texts[t].clone(), n);
            }
        }
        counts.total = total;
        Vocabulary::from_counts(&counts, 1, None)
    }
}

/// Training settings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    pub levels: Vec<String>,
    pub epochs: usize,
    pub steps: i64,
    pub lr: f64,
    pub batch_nodes: usize,
    /// Training graphs larger than this are left out (they are rare and
    /// make batches of one).
    pub max_nodes: usize,
    pub pool: Pool,
    pub seed: u64,
    /// Runs started before the schedule existed were constant.
    #[serde(default)]
    pub lr_schedule: graphtask::LrSchedule,
    /// The state width (absent: SPEC.md §3's 34, as runs from before the
    /// flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<i64>,
}

impl RunSettings for Settings {
    /// Everything but the epoch count (a target: a run can be extended).
    /// A width of SPEC.md §3's 34 is the same run with or without
    /// `--hidden` (runs from before the flag record none).
    fn continues(&self, saved: &Settings) -> bool {
        let same = |s: &Settings| Settings { epochs: 0, hidden: s.hidden.filter(|&h| h != programl_model::HIDDEN), ..s.clone() };
        same(saved) == same(self)
    }
}

fn accuracy(predicted: &[usize], labels: &[usize]) -> f64 {
    let right = predicted.iter().zip(labels).filter(|(p, l)| p == l).count();
    right as f64 / labels.len().max(1) as f64
}

/// A hash of what training reads: the programs' names and the graphs'
/// sizes (a corpus rebuilt alike resumes the run).
fn data_hash(corpus: &Corpus, train: &[usize]) -> String {
    let mut h = Fnv1a::default();
    for &p in train {
        h.write(corpus.programs[p].rel.as_bytes());
        for level in 0..corpus.outcomes.len() {
            h.write(&(corpus.graph(level, p).map_or(0, |g| g.nodes() + 1) as u64).to_le_bytes());
        }
    }
    format!("{:016x}", h.finish())
}

/// The bundle config of a POJ-104 model trained on the IR of `levels`
/// (`level_flags`: the first level's flags, what `eval` and `predict`
/// compile new sources with; the levels are recorded where there are
/// several, so that the learned pass knows the bundle's IR).
#[allow(clippy::too_many_arguments)]
pub fn bundle_config(
    classes: &[String],
    hyper: &Hyper,
    level_flags: Vec<String>,
    levels: &[String],
    data_hash: &str,
    examples: u64,
    wall_s: f64,
) -> Config {
    Config {
        format: bundle::FORMAT.into(),
        version: bundle::VERSION,
        task: TASK.into(),
        head: Head::Graph,
        classes: classes.to_vec(),
        hyper: hyper.clone(),
        provenance: Provenance {
            graph_mode: programl_dataset::export::GRAPH_MODE.into(),
            llvm_major: programl::LLVM_MAJOR.parse().unwrap_or(0),
            opaque_pointers: programl::LLVM_MAJOR.parse::<u32>().unwrap_or(0) >= 16,
            featurisation_version: programl::batch::LAYOUT_VERSION,
            training_data_hash: data_hash.into(),
            examples_seen: examples,
            wall_time_s: (wall_s * 10.0).round() / 10.0,
            // Trained through autograd, whose products stay FP32 under
            // --dtype bf16 (only the hand-written DDF step and inference
            // compute theirs in BF16).
            dtype: programl_model::Precision::F32.to_string(),
            created_by: format!("programl-train {}", env!("CARGO_PKG_VERSION")),
            corpus: Vec::new(),
        },
        source: Some(SourceCompile {
            compiler: compile::CLANG.into(),
            flags: level_flags,
            prelude: Some(compile::PRELUDE.into()),
            input: None,
            levels: (levels.len() > 1).then(|| levels.to_vec()),
        }),
        auto_dtype: None,
    }
}

/// What `programl-train poj104` was asked for.
pub struct Options {
    pub data: Option<PathBuf>,
    pub cache: Option<PathBuf>,
    pub out: PathBuf,
    pub budget_s: Option<f64>,
    pub compile_budget_s: Option<f64>,
    pub compile_only: bool,
    pub per_class: Option<usize>,
    /// Copy the test split's sources to this directory (DIR/<class>/<file>)
    /// and stop: a directory for `eval --data`.
    pub export_test: Option<PathBuf>,
    pub checkpoint_every_s: f64,
    /// Test the run's current best bundle (RUN/model) at every level and
    /// stop, training nothing: figures for a run still under way.
    pub test_only: bool,
    /// When training stops (finished, or its budget spent), replace this
    /// directory whole with the run's record ([`ship`]).
    pub ship: Option<PathBuf>,
    /// The same, only when the run's best validation accuracy beats the
    /// best in this directory's `log.csv` (or it has none).
    pub ship_if_better: Option<PathBuf>,
    pub json: bool,
    pub quiet: bool,
}

/// The best validation accuracy in `dir/log.csv` (none: no such log).
fn best_in_log(dir: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join("log.csv")).ok()?;
    let mut lines = text.lines();
    let column = lines.next()?.split(',').position(|c| c == "val_accuracy")?;
    lines.filter_map(|l| l.split(',').nth(column)?.parse::<f64>().ok()).reduce(f64::max)
}

/// `--ship` and `--ship-if-better` at the end of a training session.
fn ship_all(o: &Options, best_val: f64, compile: &serde_json::Value) -> Result<()> {
    if let Some(dir) = &o.ship {
        ship(&o.out, dir, compile)?;
    }
    if let Some(dir) = o.ship_if_better.as_ref().filter(|_| o.out.join("model").join(bundle::CONFIG_FILE).exists()) {
        match best_in_log(dir) {
            Some(theirs) if theirs >= best_val => {
                eprintln!("poj104: validation {best_val:.4} does not beat {}'s {theirs:.4}: not shipped there", dir.display())
            }
            theirs => {
                ship(&o.out, dir, compile)?;
                eprintln!("poj104: validation {best_val:.4} against {theirs:?}: shipped to {}", dir.display());
            }
        }
    }
    Ok(())
}

/// Replaces `dir` as a whole (a reader or a kill sees the old directory or
/// the new one, [`bundle::replace_dir`]) with the run's record: the best
/// bundle, `checkpoint/`, `log.csv`, the compile report as `compile.json`,
/// and `results.json` once every epoch is done. A run still under way
/// ships too, so that another machine continues it from `dir/checkpoint`;
/// before its first epoch ends it has no bundle, and ships without one.
pub fn ship(run: &Path, dir: &Path, compile: &serde_json::Value) -> Result<()> {
    crate::checkpoint::recover_run(run)?;
    let model = run.join("model");
    let has_bundle = model.join(bundle::CONFIG_FILE).exists();
    bundle::replace_dir(dir, |staging| {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| bundle::BundleError::Io { path, source }
        };
        for f in [bundle::CONFIG_FILE, bundle::WEIGHTS_FILE, bundle::VOCABULARY_FILE].into_iter().filter(|_| has_bundle) {
            std::fs::copy(model.join(f), staging.join(f)).map_err(io(&model.join(f)))?;
        }
        for f in ["log.csv", "results.json"] {
            if run.join(f).exists() {
                std::fs::copy(run.join(f), staging.join(f)).map_err(io(&run.join(f)))?;
            }
        }
        let ckpt = run.join("checkpoint");
        crate::recipe::copy_dir(&ckpt, &staging.join("checkpoint")).map_err(io(&ckpt))?;
        let path = staging.join("compile.json");
        let text = serde_json::to_string_pretty(compile).expect("a report serialises") + "\n";
        std::fs::write(&path, text).map_err(io(&path))
    })?;
    Ok(())
}

/// The program directory: `--data`, else the dataset's tarball unpacked
/// once into `cache/poj104/` (atomically: into a temporary directory, then
/// renamed).
fn programs_dir(o: &Options, cache: &Path) -> Result<PathBuf> {
    if let Some(d) = &o.data {
        if d.is_file() {
            bail!("{}: expected a directory of <class>/<n>.cpp (unpack the tarball, or leave --data out)", d.display());
        }
        if d.join("poj104.tar.xz").is_file() && !d.join("poj104").is_dir() {
            return unpack(&d.join("poj104.tar.xz"), cache);
        }
        return Ok(if d.join("poj104").is_dir() { d.join("poj104") } else { d.clone() });
    }
    let tar = crate::devmap::default_dataset("poj104").join("poj104.tar.xz");
    unpack(&tar, cache)
}

fn unpack(tar: &Path, cache: &Path) -> Result<PathBuf> {
    if !tar.is_file() && !cache.join("poj104").is_dir() {
        bail!("{}: not found (give --data DIR with DIR/<class>/<n>.cpp)", tar.display());
    }
    crate::harness::unpack_tar(tar, cache, "poj104")
}

pub fn run(o: &Options, s: &Settings, device: Device) -> Result<()> {
    if s.levels.is_empty() {
        bail!("--levels: at least one -O level");
    }
    for l in &s.levels {
        if !compile::LEVELS.contains(&l.as_str()) {
            bail!("--levels: '{l}' is not one of {}", compile::LEVELS.join(" "));
        }
    }
    if s.epochs == 0 || s.steps < 1 || s.batch_nodes == 0 {
        bail!("--epochs, --steps and --batch-nodes must be at least 1");
    }
    if let Some(h) = s.hidden {
        crate::train::check_hidden(h)?;
    }
    crate::engine::tune_allocator();
    let cache = o.cache.clone().unwrap_or_else(|| programl::fsutil::cache_dir().join("poj104"));
    let dir = programs_dir(o, &cache)?;
    let (classes, mut programs) = list(&dir)?;
    if let Some(k) = o.per_class {
        let mut seen = vec![0usize; classes.len()];
        programs.retain(|p| {
            seen[p.class] += 1;
            seen[p.class] <= k
        });
    }
    if let Some(to) = &o.export_test {
        let mut n = 0;
        for p in programs.iter().filter(|p| split_of(&p.rel) == Split::Test) {
            let target = to.join(&p.rel);
            std::fs::create_dir_all(target.parent().unwrap()).with_context(|| format!("{}: cannot create", to.display()))?;
            std::fs::copy(&p.path, &target).with_context(|| format!("{}: cannot write", target.display()))?;
            n += 1;
        }
        eprintln!("poj104: {n} test programs copied to {}", to.display());
        return Ok(());
    }
    let clang = compile::clang();
    let harnesses: Vec<Harness> =
        s.levels.iter().map(|l| Harness::new(&clang, &compile::flags(l), compile::PRELUDE, &cache.join("ir"))).collect::<Result<_>>()?;
    let t0 = Instant::now();
    let corpus = Corpus::build(classes, programs, &harnesses, o.compile_budget_s, o.quiet)?;
    let n = corpus.programs.len();
    let report = compile_report(&corpus, &s.levels);
    if !o.json {
        eprintln!("{}", report.text);
    }
    let skipped = corpus.count(0, |o| matches!(o, Outcome::Skipped));
    if o.compile_only || skipped > 0 {
        if skipped > 0 {
            eprintln!("poj104: the compile budget ran out ({:.0}s); run again to continue", t0.elapsed().as_secs_f64());
        }
        if o.json {
            println!("{}", report.json);
        }
        return Ok(());
    }
    let split: Vec<Split> = corpus.programs.iter().map(|p| split_of(&p.rel)).collect();
    let ids = |want: Split| -> Vec<usize> { (0..n).filter(|&p| split[p] == want).collect() };
    let (train, val, test) = (ids(Split::Train), ids(Split::Val), ids(Split::Test));
    let vocabulary = corpus.vocabulary(&train);
    // The vocabulary is rebuilt from the corpus at every start, and the
    // data hash sees only the graphs' sizes: a run continued on IR of
    // another clang or prelude (the same sizes, other texts) would read
    // its embedding rows as other texts'. The run's bundle records the
    // vocabulary it was trained with; another one is refused.
    let _lock = crate::checkpoint::lock_run(&o.out)?;
    crate::checkpoint::recover_run(&o.out)?;
    let trained_with = o.out.join("model").join(bundle::VOCABULARY_FILE);
    if o.out.join("checkpoint/state.json").exists() && trained_with.exists() {
        let kept = Vocabulary::load(&trained_with).with_context(|| format!("{}: cannot read", trained_with.display()))?;
        if !kept.tokens().map(|(t, _)| t).eq(vocabulary.tokens().map(|(t, _)| t)) {
            let differ =
                kept.tokens().zip(vocabulary.tokens()).position(|((a, _), (b, _))| a != b).unwrap_or(kept.len().min(vocabulary.len()));
            bail!(
                "{}: the run was trained with another vocabulary ({} texts) than this corpus gives ({}; the first difference at id {}): its IR comes from another compiler or prelude. Use another --out, or the IR the run was trained on",
                o.out.display(),
                kept.len(),
                vocabulary.len(),
                differ + 1
            );
        }
    }
    let hyper = Hyper {
        steps: s.steps,
        state_dropout: 0.0,
        classes: corpus.classes.len() as i64,
        graph: Some(GraphHead { aux: Vec::new(), aux_hidden: 32, pool: s.pool, join: Default::default() }),
        hidden: s.hidden.unwrap_or(programl_model::HIDDEN),
        ..Hyper::spec(vocabulary.len())
    };
    // Training examples: (program, level) with a graph, within max_nodes.
    let examples: Vec<(usize, usize)> = train
        .iter()
        .flat_map(|&p| (0..s.levels.len()).map(move |l| (p, l)))
        .filter(|&(p, l)| corpus.graph(l, p).is_some_and(|g| g.nodes() <= s.max_nodes))
        .collect();
    let inputs: Vec<GraphInput> = examples.iter().map(|&(p, l)| corpus.input(corpus.graph(l, p).unwrap(), &vocabulary)).collect();
    let val_ids: Vec<usize> = val.iter().copied().filter(|&p| corpus.graph(0, p).is_some()).collect();
    let val_inputs: Vec<GraphInput> = val_ids.iter().map(|&p| corpus.input(corpus.graph(0, p).unwrap(), &vocabulary)).collect();
    let val_labels: Vec<usize> = val_ids.iter().map(|&p| corpus.programs[p].class).collect();
    let hash = data_hash(&corpus, &train);
    if !o.quiet {
        eprintln!(
            "poj104: {} classes; {} train programs ({} graphs over {} levels), {} val, {} test; vocabulary {}",
            corpus.classes.len(),
            train.len(),
            inputs.len(),
            s.levels.len(),
            val_ids.len(),
            test.len(),
            vocabulary.len()
        );
    }

    // The run: resume or start, then epochs until the target.
    let data = graphtask::Examples {
        inputs,
        items: examples
            .iter()
            .enumerate()
            .map(|(i, &(p, _))| graphtask::Item { graph: i, label: corpus.programs[p].class, aux: Vec::new() })
            .collect(),
    };
    let val_data = graphtask::Examples {
        inputs: val_inputs,
        items: val_labels.iter().enumerate().map(|(i, &label)| graphtask::Item { graph: i, label, aux: Vec::new() }).collect(),
    };
    let val_items: Vec<usize> = (0..val_data.items.len()).collect();
    if o.test_only {
        let best = Bundle::load(&o.out.join("model"), device)
            .with_context(|| format!("--test-only: {} has no bundle yet", o.out.join("model").display()))?;
        let by_level = test_by_level(&best, &corpus, &test, &s.levels, s.batch_nodes);
        let results = serde_json::json!({
            "task": TASK,
            "levels": s.levels,
            "test_programs": test.len(),
            "by_level": by_level,
            "examples_seen": best.config.provenance.examples_seen,
            "partial": true,
        });
        println!("{results}");
        return Ok(());
    }
    tch::manual_seed(programl::hash::mix(s.seed) as i64);
    let model = Ggnn::new(&hyper, device);
    let level_flags = compile::flags(&s.levels[0]);
    let run = graphtask::Run {
        name: TASK,
        out: &o.out,
        settings: s.clone(),
        data_hash: hash.clone(),
        epochs: s.epochs,
        schedule: s.lr_schedule,
        seed: s.seed,
        batch_nodes: s.batch_nodes,
        min_items: 1,
        budget_s: o.budget_s,
        checkpoint_every_s: o.checkpoint_every_s,
        quiet: o.quiet,
    };
    if o.out.join("checkpoint").exists() || !o.out.join("results.json").exists() {
        // Test figures describe a finished run's bundle: none while training.
        let _ = std::fs::remove_file(o.out.join("results.json"));
    }
    let train_items: Vec<usize> = (0..data.items.len()).collect();
    let ending = graphtask::fit(
        &run,
        &model,
        s.lr,
        &data,
        &train_items,
        |m| {
            let predicted: Vec<usize> =
                graphtask::probabilities(m, &val_data, &val_items, s.steps, s.batch_nodes).iter().map(|p| graphtask::argmax(p).0).collect();
            accuracy(&predicted, &val_labels)
        },
        |m, state| {
            let config = bundle_config(&corpus.classes, &hyper, level_flags.clone(), &s.levels, &hash, state.examples_seen, state.wall_s);
            Bundle::save(&o.out.join("model"), &config, m, &vocabulary)?;
            Ok(())
        },
    )?;
    let state = match ending {
        graphtask::Ending::Finished(state) => state,
        graphtask::Ending::Stopped(state) => {
            ship_all(o, state.best_val, &report.json)?;
            eprintln!(
                "poj104: the budget ran out at epoch {}, batch {} ({} examples); run the same command again to continue",
                state.epoch + 1,
                state.batch,
                state.examples_seen
            );
            return Ok(());
        }
    };
    // Test: the best bundle on the test programs at every level (compile
    // failures are errors in error_all); the top-level figures are the
    // first level's, the one the bundle records.
    let best = Bundle::load(&o.out.join("model"), device)?;
    let by_level = test_by_level(&best, &corpus, &test, &s.levels, s.batch_nodes);
    let first = &by_level[s.levels[0].as_str()];
    let (acc, examples) = (first["accuracy"].as_f64().unwrap_or(0.0), first["examples"].as_u64().unwrap_or(0) as usize);
    let right = (acc * examples as f64).round() as usize;
    let results = serde_json::json!({
        "task": TASK,
        "levels": s.levels,
        "programs": n,
        "compile_failures": report.failed,
        "compile_failure_rate": report.failed as f64 / n as f64,
        "test_programs": test.len(),
        "examples": examples,
        "accuracy": acc,
        "error": 1.0 - acc,
        "error_all": 1.0 - right as f64 / test.len().max(1) as f64,
        "by_level": by_level,
        "best_val_accuracy": state.best_val,
        "epochs": state.epoch,
        "examples_seen": state.examples_seen,
        "wall_s": state.wall_s,
        "threads": tch::get_num_threads(),
    });
    programl::fsutil::write_bytes_atomically(
        &o.out.join("results.json"),
        programl::fsutil::Durability::Atomic,
        serde_json::to_string_pretty(&results).unwrap().as_bytes(),
    )?;
    ship_all(o, state.best_val, &report.json)?;
    if o.json {
        println!("{results}");
    } else {
        println!(
            "poj104 test (-{}): {} programs classified, accuracy {:.4}, error {:.4} ({} of {} test programs did not compile; error counting them {:.4})",
            s.levels[0],
            examples,
            acc,
            1.0 - acc,
            test.len() - examples,
            test.len(),
            1.0 - right as f64 / test.len().max(1) as f64
        );
    }
    Ok(())
}

/// The bundle's test figures at each level: {"O2": {"examples",
/// "accuracy", "error", "error_all"}, ...}, `error_all` counting the
/// programs that did not compile at that level as errors.
fn test_by_level(best: &Bundle, corpus: &Corpus, test: &[usize], levels: &[String], batch_nodes: usize) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (l, name) in levels.iter().enumerate() {
        let ok: Vec<usize> = test.iter().copied().filter(|&p| corpus.graph(l, p).is_some()).collect();
        let data = graphtask::Examples {
            inputs: ok.iter().map(|&p| corpus.input(corpus.graph(l, p).unwrap(), &best.vocabulary)).collect(),
            items: ok
                .iter()
                .enumerate()
                .map(|(i, &p)| graphtask::Item { graph: i, label: corpus.programs[p].class, aux: Vec::new() })
                .collect(),
        };
        let labels: Vec<usize> = ok.iter().map(|&p| corpus.programs[p].class).collect();
        let predicted: Vec<usize> =
            graphtask::probabilities(&best.model, &data, &(0..labels.len()).collect::<Vec<_>>(), best.model.hyper().steps, batch_nodes)
                .iter()
                .map(|p| graphtask::argmax(p).0)
                .collect();
        let acc = accuracy(&predicted, &labels);
        let right = (acc * labels.len() as f64).round() as usize;
        out.insert(
            name.clone(),
            serde_json::json!({
                "examples": labels.len(),
                "accuracy": acc,
                "error": 1.0 - acc,
                "error_all": 1.0 - right as f64 / test.len().max(1) as f64,
            }),
        );
    }
    serde_json::Value::Object(out)
}

struct Report {
    failed: usize,
    text: String,
    json: serde_json::Value,
}

/// Compile figures per level, failures per cause (first level).
fn compile_report(corpus: &Corpus, levels: &[String]) -> Report {
    let n = corpus.programs.len();
    let mut text = String::new();
    let mut per_level = serde_json::Map::new();
    for (l, name) in levels.iter().enumerate() {
        let ok = corpus.count(l, |o| matches!(o, Outcome::Graph(_)));
        let failed = corpus.count(l, |o| matches!(o, Outcome::Failed(_)));
        let skipped = corpus.count(l, |o| matches!(o, Outcome::Skipped));
        text.push_str(&format!(
            "poj104 -{name}: {n} programs: {ok} built, {failed} failed ({:.2}%), {skipped} not attempted\n",
            100.0 * failed as f64 / n as f64
        ));
        per_level.insert(name.clone(), serde_json::json!({"built": ok, "failed": failed, "skipped": skipped}));
    }
    let failures = corpus.failures(0);
    let mut causes: Vec<(&String, &usize)> = failures.iter().collect();
    causes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (cause, k) in &causes {
        text.push_str(&format!("  failed -{}: {k} x {cause}\n", levels[0]));
    }
    text.push_str(&format!("  repaired (compiled after repairs): {}", corpus.repaired));
    let failed = corpus.count(0, |o| matches!(o, Outcome::Failed(_)));
    Report {
        failed,
        text,
        json: serde_json::json!({"programs": n, "levels": per_level, "failed": failed, "failure_rate": failed as f64 / n as f64, "causes": failures, "repaired": corpus.repaired}),
    }
}

/// `programl-train eval --model BUNDLE --data DIR` for a POJ-104 bundle:
/// DIR's subdirectories are class names holding sources; each is compiled
/// as the bundle records and classified.
/// `cpu`: the torch-free model and its options (eval on the CPU: the
/// learned pass's figures); `None`: the bundle's libtorch model. `level`:
/// compile at this -O level in place of the bundle's.
#[allow(clippy::too_many_arguments)]
pub fn eval_dir(
    bundle: &Bundle,
    cpu: Option<(&programl_infer::Model, programl_infer::Options)>,
    dir: &Path,
    cache: Option<&Path>,
    steps: Option<i64>,
    batch_nodes: usize,
    level: Option<&str>,
    json: bool,
) -> Result<()> {
    let source = bundle
        .config
        .source
        .as_ref()
        .with_context(|| format!("{}: the bundle records no compiler and flags (config.json `source`)", bundle.dir.display()))?;
    if let Some(l) = level.filter(|l| !compile::LEVELS.contains(l)) {
        bail!("--level {l}: not one of {}", compile::LEVELS.join(" "));
    }
    let flags = at_level(&source.flags, level);
    let compiled_at =
        flags.iter().rev().find_map(|f| f.strip_prefix('-').filter(|l| compile::LEVELS.contains(l))).unwrap_or("").to_string();
    let (classes, programs) = list(dir)?;
    let mut class_of = Vec::with_capacity(classes.len());
    for c in &classes {
        let Some(i) = bundle.config.classes.iter().position(|b| b == c) else {
            bail!(
                "{}: class '{c}' (a subdirectory) is not one of the bundle's {} classes",
                dir.join(c).display(),
                bundle.config.classes.len()
            );
        };
        class_of.push(i);
    }
    let cache = cache.map_or_else(|| programl::fsutil::cache_dir().join("poj104"), Path::to_path_buf);
    let clang = std::env::var_os("PROGRAML_CLANG").map_or_else(|| PathBuf::from(&source.compiler), PathBuf::from);
    let harness = Harness::new(&clang, &flags, source.prelude.as_deref().unwrap_or(""), &cache.join("ir"))?;
    let corpus = Corpus::build(classes, programs, std::slice::from_ref(&harness), None, json)?;
    let ok: Vec<usize> = (0..corpus.programs.len()).filter(|&p| corpus.graph(0, p).is_some()).collect();
    if ok.is_empty() {
        bail!(
            "{}: none of its {} programs compiled ({}), so there is nothing to classify",
            dir.display(),
            corpus.programs.len(),
            corpus.failures(0).iter().map(|(cause, n)| format!("{n}: {cause}")).collect::<Vec<_>>().join("; ")
        );
    }
    let inputs: Vec<GraphInput> = ok.iter().map(|&p| corpus.input(corpus.graph(0, p).unwrap(), &bundle.vocabulary)).collect();
    let labels: Vec<usize> = ok.iter().map(|&p| class_of[corpus.programs[p].class]).collect();
    let steps = steps.unwrap_or(bundle.model.hyper().steps);
    let data = graphtask::Examples {
        inputs,
        items: labels.iter().enumerate().map(|(i, &label)| graphtask::Item { graph: i, label, aux: Vec::new() }).collect(),
    };
    let items: Vec<usize> = (0..labels.len()).collect();
    let probabilities = match cpu {
        Some((model, options)) => {
            graphtask::probabilities_cpu(model, &programl_infer::Options { steps: Some(steps), ..options }, &data, &items, batch_nodes)?
        }
        None => graphtask::probabilities(&bundle.model, &data, &items, steps, batch_nodes),
    };
    let predicted: Vec<usize> = probabilities.iter().map(|p| graphtask::argmax(p).0).collect();
    let acc = accuracy(&predicted, &labels);
    let right = predicted.iter().zip(&labels).filter(|(p, l)| p == l).count();
    let n = corpus.programs.len();
    let failed = n - ok.len();
    let error_all = 1.0 - right as f64 / n as f64;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "task": bundle.config.task, "level": compiled_at, "steps": steps, "programs": n, "examples": ok.len(), "compile_failures": failed,
                "accuracy": acc, "error": 1.0 - acc, "error_all": error_all, "failure_causes": corpus.failures(0),
            })
        );
    } else {
        println!(
            "{} at T={steps}, -{compiled_at}: {} of {n} programs classified, accuracy {:.4}, error {:.4}; {failed} did not compile (error counting them {:.4})",
            bundle.config.task,
            ok.len(),
            acc,
            1.0 - acc,
            error_all
        );
        for (cause, k) in corpus.failures(0) {
            println!("  failed: {k} x {cause}");
        }
    }
    Ok(())
}

/// `flags` with its -O level replaced by `level` (added where it has
/// none); unchanged without one.
fn at_level(flags: &[String], level: Option<&str>) -> Vec<String> {
    let Some(level) = level else { return flags.to_vec() };
    let is_level = |f: &String| f.strip_prefix('-').is_some_and(|l| compile::LEVELS.contains(&l));
    let mut out: Vec<String> = flags.iter().map(|f| if is_level(f) { format!("-{level}") } else { f.clone() }).collect();
    if !flags.iter().any(is_level) {
        out.push(format!("-{level}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `eval --level` compiles at the level asked, every other flag kept.
    #[test]
    fn a_level_replaces_the_recorded_one() {
        let flags: Vec<String> = ["-x", "c++", "-O0", "-S"].iter().map(|f| f.to_string()).collect();
        assert_eq!(at_level(&flags, Some("O2")), ["-x", "c++", "-O2", "-S"]);
        assert_eq!(at_level(&flags, None), flags);
        assert_eq!(at_level(&flags[..2], Some("Os")), ["-x", "c++", "-Os"]);
    }

    /// A checkpoint written before the schedule existed (no `lr_schedule`
    /// in its settings) resumes as the constant rate it ran at, and a
    /// cosine run does not continue a constant one.
    #[test]
    fn settings_without_a_schedule_resume_as_constant() {
        let old = r#"{"levels":["O0"],"epochs":12,"steps":6,"lr":0.003,"batch_nodes":5000,"max_nodes":10000,"pool":"mean","seed":0}"#;
        let saved: Settings = serde_json::from_str(old).unwrap();
        assert_eq!(saved.lr_schedule, graphtask::LrSchedule::Constant);
        let now = Settings { epochs: 20, ..saved.clone() };
        assert!(now.continues(&saved));
        let cosine = Settings { lr_schedule: graphtask::LrSchedule::Cosine, ..saved.clone() };
        assert!(!cosine.continues(&saved));
        // `--hidden 34` names the width a run without the flag has, both
        // ways round; another width is another run.
        let spec = Settings { hidden: Some(programl_model::HIDDEN), ..saved.clone() };
        assert!(spec.continues(&saved) && saved.continues(&spec));
        let wide = Settings { hidden: Some(66), ..saved.clone() };
        assert!(!wide.continues(&saved) && !wide.continues(&spec) && !saved.continues(&wide));
    }

    #[test]
    fn the_split_is_by_program_and_about_80_10_10() {
        let names: Vec<String> = (0..5000).map(|i| format!("{}/{}.cpp", i % 104 + 1, i)).collect();
        let count = |s: Split| names.iter().filter(|n| split_of(n) == s).count();
        let (train, val, test) = (count(Split::Train), count(Split::Val), count(Split::Test));
        assert_eq!(train + val + test, 5000);
        assert!((3800..4200).contains(&train) && (400..600).contains(&val) && (400..600).contains(&test), "{train} {val} {test}");
        assert_eq!(split_of("3/1505.cpp"), split_of("3/1505.cpp"));
    }

    #[test]
    fn classes_sort_numerically_and_non_sources_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        for (c, f) in [("10", "2.cpp"), ("9", "11.cpp"), ("9", "3.cpp"), ("9", "notes.txt")] {
            std::fs::create_dir_all(d.path().join(c)).unwrap();
            std::fs::write(d.path().join(c).join(f), "int main() { return 0; }").unwrap();
        }
        let (classes, programs) = list(d.path()).unwrap();
        assert_eq!(classes, ["9", "10"]);
        let rels: Vec<&str> = programs.iter().map(|p| p.rel.as_str()).collect();
        assert_eq!(rels, ["9/3.cpp", "9/11.cpp", "10/2.cpp"]);
        assert!(list(&d.path().join("9")).unwrap_err().to_string().contains("no class subdirectories"));
    }
}
