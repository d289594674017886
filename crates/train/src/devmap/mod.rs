//! OpenCL heterogeneous device mapping (SPEC.md §4): should a kernel run on
//! the CPU or the GPU? A graph-level GGNN over each kernel's program graph,
//! with the row's transfer size and work-group size as auxiliary inputs.
//!
//! The rows are the DevMap dataset's (`amd.csv`, `nvidia.csv`: 680 rows per
//! platform, 256 kernels), read in place. A row's kernel comes from one of
//! three inputs ([`Input`]): its program's own sources ([`sources`], the
//! default), NCC's LLVM 9 IR ([`ncc`]), or the CSV's `src` column (this
//! file). Training and prediction go through [`crate::graphtask`]: one
//! graph per kernel, one item per row.
//!
//! For the CSV input, each row's `src` is compiled to LLVM IR with clang
//! ([`CLANG`] and [`CLANG_FLAGS`]); the IR goes to a cache keyed by the
//! source's hash, so a second run compiles nothing.
//!
//! **Sources that do not compile as given.** The dataset's sources were
//! normalised (identifiers renamed to `A`, `B`, …, `a`, `b`, …) and lost
//! their helper functions and macros, so a quarter of the kernels refer to
//! names they no longer define, or call a helper whose new name collides
//! with another function. [`compile_kernel`] repairs what clang reports,
//! one round at a time, and never anything else:
//! - an undeclared `__clc_f` (a libclc internal) becomes the builtin `f`;
//! - another undeclared name that is called becomes `#define X(...) 0`
//!   (the call is dropped), and one that is not, `#define X 1` (constants
//!   are typed nodes without values in a program graph);
//! - a call that does not fit the function its name now denotes (arity,
//!   argument types, or a variable called as a function) is renamed to a
//!   fresh stub, dropped the same way.
//!
//! Kernels that still fail are counted per cause, and their rows count as
//! errors (the paper's figures cover every row).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use programl::batch::{Batch, GraphInput, Sample};
use programl::builder::{build_file, BuildOptions};
use programl::hash::Fnv1a;
use programl::metrics::Confusion;
use programl::vocab::{Counts, Vocabulary};
use programl::ProgramGraph;
use programl_model::bundle::{self, Bundle, Config, Head, Provenance, SourceCompile};
use programl_model::{Ggnn, GraphHead, Hyper, Join, Pool};
use rayon::prelude::*;
use regex::Regex;
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use crate::graphtask;
use crate::optim::AdamW;

pub mod ncc;
pub mod sources;

/// The compiler of the kernels (`PROGRAML_CLANG` overrides it).
pub const CLANG: &str = "clang-16";
/// OpenCL C 1.2 with the default header, for the generic 64-bit SPIR
/// target (no vendor's builtins, the same IR whichever device runs the
/// kernel), at -O1, whose pipeline the learned pass sees the end of under
/// `clang -O1`.
pub const CLANG_FLAGS: &[&str] =
    &["-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", "-target", "spir64", "-O1", "-emit-llvm", "-S"];
/// The -O level of the default build ([`CLANG_FLAGS`]); `devmap
/// --opt-level` trains at another, and a bundle records its own.
pub const DEFAULT_LEVEL: &str = "O1";

/// [`CLANG_FLAGS`] at the -O level `level` (`O0`..`O3`, `Os`, `Oz`).
pub fn clang_flags(level: &str) -> Result<Vec<&'static str>> {
    let o = match level.trim_start_matches('-') {
        "O0" => "-O0",
        "O1" => "-O1",
        "O2" => "-O2",
        "O3" => "-O3",
        "Os" => "-Os",
        "Oz" => "-Oz",
        other => bail!("--opt-level '{other}': expected O0, O1, O2, O3, Os or Oz"),
    };
    Ok(CLANG_FLAGS.iter().map(|&f| if f == "-O1" { o } else { f }).collect())
}

/// The clang flags a device-mapping bundle's kernels are compiled with:
/// its recorded -O level (bundles from before the flag: -O1).
pub fn bundle_flags(config: &Config) -> Vec<&'static str> {
    let level = config.source.as_ref().and_then(|s| s.flags.iter().find(|f| f.starts_with("-O")).cloned());
    level.and_then(|l| clang_flags(&l).ok()).unwrap_or_else(|| CLANG_FLAGS.to_vec())
}

/// The auxiliary inputs, in input order: the row's `transfer` (bytes moved
/// to and from the device) and `wgsize` (work-group size).
pub const AUX: [&str; 2] = ["transfer", "wgsize"];
/// Classes, index = logit column; the positive class is the GPU.
pub const CLASSES: [&str; 2] = ["cpu", "gpu"];
/// Rounds of repair before a kernel counts as failed.
const REPAIR_ROUNDS: usize = 12;

/// One row of a DevMap CSV.
#[derive(Clone, Debug)]
pub struct Row {
    /// `benchmark` (suite, benchmark and kernel name).
    pub benchmark: String,
    /// `dataset` (the input size's name).
    pub dataset: String,
    pub transfer: f64,
    pub wgsize: f64,
    /// The oracle: the GPU was faster.
    pub gpu: bool,
    pub src: String,
}

/// Reads a DevMap CSV (`amd.csv` or `nvidia.csv`).
pub fn read_rows(path: &Path) -> Result<Vec<Row>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let headers = reader.headers().with_context(|| format!("{}: no header row", path.display()))?.clone();
    let column = |name: &str| headers.iter().position(|h| h == name).with_context(|| format!("{}: no column '{name}'", path.display()));
    let (benchmark, dataset, transfer, wgsize, oracle, src) =
        (column("benchmark")?, column("dataset")?, column("transfer")?, column("wgsize")?, column("oracle")?, column("src")?);
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        // A record's own first line (its `src` spans many); the count of
        // records where the reader could not say.
        let line = match &record {
            Ok(r) => r.position().map_or(i as u64 + 2, |p| p.line()),
            Err(e) => e.position().map_or(i as u64 + 2, |p| p.line()),
        };
        let record = record.with_context(|| format!("{}:{line}: not a CSV record", path.display()))?;
        let field = |c: usize| record.get(c).unwrap_or("");
        let number = |c: usize, name: &str| -> Result<f64> {
            field(c)
                .trim()
                .parse::<f64>()
                .ok()
                // The model reads it as f32: past f32's range, it would
                // make the probabilities NaN.
                .filter(|v| v.is_finite() && *v >= 0.0 && (*v as f32).is_finite())
                .with_context(|| {
                    format!("{}:{line}: {name} '{}' is not a non-negative number within f32's range", path.display(), field(c))
                })
        };
        let gpu = match field(oracle) {
            "GPU" => true,
            "CPU" => false,
            other => bail!("{}:{line}: oracle '{other}' is neither CPU nor GPU", path.display()),
        };
        rows.push(Row {
            benchmark: field(benchmark).to_string(),
            dataset: field(dataset).to_string(),
            transfer: number(transfer, "transfer")?,
            wgsize: number(wgsize, "wgsize")?,
            gpu,
            src: field(src).to_string(),
        });
    }
    if rows.is_empty() {
        bail!("{}: no rows", path.display());
    }
    Ok(rows)
}

/// The compiler to run: `PROGRAML_CLANG`, else [`CLANG`] on the PATH.
pub fn clang() -> PathBuf {
    std::env::var_os("PROGRAML_CLANG").map_or_else(|| PathBuf::from(CLANG), PathBuf::from)
}

pub use crate::harness::Compiled;

/// A hex key of a source text.
pub fn source_key(src: &str) -> String {
    let mut h = Fnv1a::default();
    h.write(src.as_bytes());
    format!("{:016x}", h.finish())
}

/// Compiles `src` to IR under `cache` (`<key>.ll`, or `<key>.fail` holding
/// the cause), repairing as the module docs say. Cached results are reused;
/// each file is written atomically. An error is returned only when clang
/// cannot be run or the cache cannot be written.
pub fn compile_kernel(src: &str, cache: &Path, clang: &Path) -> Result<Compiled> {
    struct Kernel<'a> {
        clang: &'a Path,
        src: String,
        prelude: Vec<String>,
        stubs: usize,
    }
    impl crate::harness::Repairs for Kernel<'_> {
        fn attempt(&mut self, work: &Path) -> Result<std::process::Output> {
            let input = work.join("kernel.cl");
            let text = format!("{}\n#line 1 \"kernel.cl\"\n{}", self.prelude.join("\n"), self.src);
            std::fs::write(&input, text).with_context(|| format!("{}: cannot write", input.display()))?;
            crate::harness::run_clang(self.clang, None, CLANG_FLAGS, &[], &work.join("kernel.ll"), &input)
        }
        fn repair(&mut self, stderr: &str) -> bool {
            repair(stderr, &mut self.src, &mut self.prelude, &mut self.stubs)
        }
        fn record(&self) -> String {
            self.prelude.join("\n")
        }
    }
    let mut kernel = Kernel { clang, src: src.to_string(), prelude: Vec::new(), stubs: 0 };
    crate::harness::Cache::new(cache, false).compile(&source_key(src), REPAIR_ROUNDS, "kernel.ll", &mut kernel)
}

/// A diagnostic of `kernel.cl`: line (1-based), column (1-based), kind, text.
struct Diagnostic<'a> {
    line: usize,
    column: usize,
    error: bool,
    message: &'a str,
}

fn diagnostics(stderr: &str) -> Vec<Diagnostic<'_>> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let re = LINE.get_or_init(|| Regex::new(r"kernel\.cl:(\d+):(\d+): (error|note): (.*)").unwrap());
    re.captures_iter(stderr)
        .map(|c| Diagnostic {
            line: c[1].parse().unwrap_or(0),
            column: c[2].parse().unwrap_or(0),
            error: &c[3] == "error",
            message: c.get(4).map_or("", |m| m.as_str()),
        })
        .collect()
}

/// Every call `name(` in `text`: (start of the name, end of the name, end
/// of the closing parenthesis).
fn calls(text: &str, name: &str) -> Vec<(usize, usize, usize)> {
    let re = Regex::new(&format!(r"\b{}\s*\(", regex::escape(name))).unwrap();
    let bytes = text.as_bytes();
    re.find_iter(text)
        .map(|m| {
            let mut depth = 1;
            let mut i = m.end();
            while i < bytes.len() && depth > 0 {
                match bytes[i] {
                    b'(' => depth += 1,
                    b')' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            (m.start(), m.start() + name.len(), i)
        })
        .collect()
}

/// The function whose parameter list is open at `at` (a note pointing at
/// one of its parameters).
fn function_open_at(text: &str, at: usize) -> Option<String> {
    static NAME: OnceLock<Regex> = OnceLock::new();
    let re = NAME.get_or_init(|| Regex::new(r"(\w+)\s*\(").unwrap());
    let head = &text[..at.min(text.len())];
    re.captures_iter(head)
        .filter(|c| {
            let rest = &head[c.get(0).unwrap().end()..];
            let depth: i32 = rest.bytes().map(|b| (b == b'(') as i32 - (b == b')') as i32).sum();
            depth >= 0
        })
        .last()
        .map(|c| c[1].to_string())
}

/// One round of repairs from clang's `stderr`; false if nothing applies.
fn repair(stderr: &str, src: &mut String, prelude: &mut Vec<String>, stubs: &mut usize) -> bool {
    static UNDECLARED: OnceLock<Regex> = OnceLock::new();
    let undeclared = UNDECLARED.get_or_init(|| Regex::new(r"use of undeclared identifier '(\w+)'").unwrap());
    let mut changed = false;
    let mut names: Vec<String> = undeclared.captures_iter(stderr).map(|c| c[1].to_string()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let called = !calls(src, &name).is_empty();
        let define = match name.strip_prefix("__clc_") {
            Some(builtin) if !builtin.is_empty() => format!("#define {name} {builtin}"),
            _ if called => format!("#define {name}(...) 0"),
            _ => format!("#define {name} 1"),
        };
        if !prelude.contains(&define) {
            prelude.push(define);
            changed = true;
        }
    }
    // Calls that do not fit their callee: rename the call site to a stub.
    let diags = diagnostics(stderr);
    let mut sites: Vec<(usize, usize)> = Vec::new();
    for (i, d) in diags.iter().enumerate() {
        if !d.error {
            continue;
        }
        let Some(at) = crate::harness::offset(src, d.line, d.column) else { continue };
        let callee = if d.message.starts_with("called object type") {
            static IDENT: OnceLock<Regex> = OnceLock::new();
            let ident = IDENT.get_or_init(|| Regex::new(r"^\w+").unwrap());
            ident.find(&src[at..]).map(|m| m.as_str().to_string())
        } else if d.message.starts_with("too few arguments to function call")
            || d.message.starts_with("too many arguments to function call")
            || d.message.contains("to parameter of")
        {
            diags[i + 1..].iter().take_while(|n| !n.error).find_map(|n| {
                if let Some(name) = n.message.strip_suffix("' declared here").and_then(|m| m.strip_prefix('\'')) {
                    Some(name.to_string())
                } else if n.message.starts_with("passing argument to parameter") {
                    crate::harness::offset(src, n.line, n.column).and_then(|o| function_open_at(src, o))
                } else {
                    None
                }
            })
        } else {
            None
        };
        let Some(callee) = callee else { continue };
        // The last call of the callee that starts at or before the error
        // and is not its definition.
        let site =
            calls(src, &callee).into_iter().filter(|&(start, _, close)| start <= at && !src[close..].trim_start().starts_with('{')).last();
        if let Some((start, end, _)) = site {
            if !sites.contains(&(start, end)) {
                sites.push((start, end));
            }
        }
    }
    sites.sort_unstable_by(|a, b| b.cmp(a));
    for (start, end) in sites {
        *stubs += 1;
        let stub = format!("__programl_stub{stubs}");
        src.replace_range(start..end, &stub);
        prelude.push(format!("#define {stub}(...) 0"));
        changed = true;
    }
    changed
}

/// The kernels of a platform's rows, compiled and built into graphs.
pub struct Kernels {
    /// Unique sources in first-seen order; `row_kernel[r]` indexes it.
    pub graphs: Vec<Option<ProgramGraph>>,
    pub row_kernel: Vec<usize>,
    /// Failure causes with their kernel counts.
    pub failures: BTreeMap<String, usize>,
    pub repaired: usize,
}

impl Kernels {
    /// Compiles (or reads from `cache`) every distinct source of `rows`.
    pub fn build(rows: &[Row], cache: &Path, quiet: bool) -> Result<Kernels> {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut sources: Vec<&str> = Vec::new();
        let row_kernel = rows
            .iter()
            .map(|r| {
                *index.entry(r.src.as_str()).or_insert_with(|| {
                    sources.push(r.src.as_str());
                    sources.len() - 1
                })
            })
            .collect();
        let clang = clang();
        let progress = crate::harness::Progress::new("devmap", "kernels", sources.len(), quiet);
        let compiled: Vec<Result<Compiled>> = sources
            .par_iter()
            .map(|src| {
                let c = compile_kernel(src, cache, &clang);
                progress.tick();
                c
            })
            .collect();
        let mut graphs = Vec::with_capacity(sources.len());
        let mut failures = BTreeMap::new();
        let mut repaired = 0;
        for c in compiled {
            match c? {
                Compiled::Ir { path, repaired: r } => {
                    repaired += r as usize;
                    match build_file(&path, &BuildOptions::MODEL) {
                        Ok(g) => graphs.push(Some(g)),
                        Err(e) => {
                            *failures.entry(format!("IR does not load: {e}")).or_insert(0) += 1;
                            graphs.push(None);
                        }
                    }
                }
                Compiled::Failed { cause } => {
                    *failures.entry(cause).or_insert(0) += 1;
                    graphs.push(None);
                }
            }
        }
        Ok(Kernels { graphs, row_kernel, failures, repaired })
    }

    /// The node counts of the graphs, ascending.
    pub fn node_counts(&self) -> Vec<usize> {
        let mut n: Vec<usize> = self.graphs.iter().flatten().map(|g| g.node_count()).collect();
        n.sort_unstable();
        n
    }

    /// Whether row `r`'s kernel has a graph.
    pub fn compiled(&self, r: usize) -> bool {
        self.graphs[self.row_kernel[r]].is_some()
    }
}

/// The vocabulary of the graphs of `kernels` (every text seen once or more).
pub fn vocabulary_of<'g>(graphs: impl IntoIterator<Item = &'g ProgramGraph>) -> Vocabulary {
    let mut counts = Counts::default();
    for g in graphs {
        for n in g.graph.node_weights() {
            *counts.texts.entry(n.text.clone()).or_default() += 1;
            counts.total += 1;
        }
    }
    Vocabulary::from_counts(&counts, 1, None)
}

/// Folds of `rows`: the paper's protocol, stratified by label (each
/// label's rows, shuffled by `seed`, dealt round-robin), or grouped by
/// kernel (rows of one benchmark kernel, or of one source, stay together;
/// groups, shuffled, then largest first, go to the fold with fewest rows).
pub fn folds(rows: &[Row], k: usize, grouped: bool, seed: u64) -> Vec<usize> {
    let mut fold = vec![0; rows.len()];
    if !grouped {
        let mut next = 0;
        for label in [false, true] {
            let ids: Vec<usize> = (0..rows.len()).filter(|&r| rows[r].gpu == label).collect();
            for &p in &programl::batch::permutation(ids.len(), programl::hash::mix(seed ^ label as u64)) {
                fold[ids[p]] = next % k;
                next += 1;
            }
        }
        return fold;
    }
    // Union-find over rows sharing a benchmark or a source.
    let mut parent: Vec<usize> = (0..rows.len()).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (r, row) in rows.iter().enumerate() {
        for key in [row.benchmark.as_str(), row.src.as_str()] {
            let other = *first.entry(key).or_insert(r);
            let (a, b) = (find(&mut parent, r), find(&mut parent, other));
            parent[a] = b;
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for r in 0..rows.len() {
        let g = find(&mut parent, r);
        groups.entry(g).or_default().push(r);
    }
    let groups: Vec<Vec<usize>> = groups.into_values().collect();
    let mut order: Vec<usize> = programl::batch::permutation(groups.len(), programl::hash::mix(seed ^ 0x6772_6f75_70));
    order.sort_by_key(|&g| std::cmp::Reverse(groups[g].len())); // stable: shuffled within a size
    let mut sizes = vec![0usize; k];
    for g in order {
        let f = (0..k).min_by_key(|&f| (sizes[f], f)).unwrap();
        sizes[f] += groups[g].len();
        for &r in &groups[g] {
            fold[r] = f;
        }
    }
    fold
}

/// Training settings of a device-mapping model.
#[derive(Clone, Debug)]
pub struct Settings {
    pub aux: bool,
    pub epochs: usize,
    pub steps: i64,
    pub lr: f64,
    pub batch_nodes: usize,
    pub aux_hidden: i64,
    /// How node logits pool into the graph vector (upstream: sum).
    pub pool: Pool,
    pub seed: u64,
    /// A bundle to start from ([`transfer`]).
    pub init: Option<PathBuf>,
    /// Weight of the code-only cross-entropy on the pooled logits
    /// ([`graphtask::train_step`]); 0 for none.
    pub code_loss: f64,
    /// Dropout on the node states between steps, in training only.
    pub state_dropout: f64,
    /// Share of the training rows held out, stratified by device, to
    /// choose the epoch whose weights are kept (the lowest error on them;
    /// a run that collapses onto one device late keeps its better epoch).
    /// 0: none, the last epoch's weights.
    pub val_share: f64,
    /// The learning rate falls along a half cosine over the epochs (epoch
    /// e of E at `lr · (1 + cos(π e / E)) / 2`), instead of staying put.
    pub cosine: bool,
    /// What the auxiliary inputs join: the pooled logits, or (gated
    /// pooling) the pooled state ([`Join`]).
    pub join: Join,
    /// The state width (`hyper.hidden`): SPEC.md §3's 34 or a wider one.
    pub hidden: i64,
    /// After training, refit the classifier after the graph vector on the
    /// training rows with the rest frozen ([`graphtask::refit_head`]):
    /// this many full-batch steps, then its normalisation statistics set
    /// exactly (0: the statistics only). None: neither.
    pub refit_head: Option<usize>,
}

impl Settings {
    /// What a kept split's predictions depend on among the settings: their
    /// `Debug` text, less the fields added after splits were first kept
    /// where those are at their defaults (so such splits still resume).
    fn resume_key(&self) -> String {
        const LATER_DEFAULTS: [&str; 7] = [
            ", code_loss: 0.0",
            ", state_dropout: 0.0",
            ", val_share: 0.0",
            ", cosine: false",
            ", join: Logits",
            ", hidden: 34",
            ", refit_head: None",
        ];
        LATER_DEFAULTS.iter().fold(format!("{self:?}"), |key, field| key.replace(field, ""))
    }
}

/// A model trained on some rows, with the vocabulary it reads.
pub struct Trained {
    pub model: Ggnn,
    pub vocabulary: Vocabulary,
    pub hyper: Hyper,
    pub rows_seen: u64,
    /// With held-out rows: the error on them after each epoch, and the
    /// epoch (from 1) whose weights were kept.
    pub val_errors: Vec<f64>,
    pub best_epoch: Option<usize>,
}

/// The learning rate of epoch `epoch` (from 0) under `s`'s schedule.
pub fn epoch_lr(s: &Settings, epoch: usize) -> f64 {
    match s.cosine {
        true => graphtask::half_cosine(s.lr, epoch as f64 / s.epochs.max(1) as f64),
        false => s.lr,
    }
}

/// The epoch with the lowest held-out error so far, and a copy of its
/// weights (parameters and buffers).
#[derive(Default)]
pub struct BestEpoch {
    /// The held-out error after each epoch offered.
    pub errors: Vec<f64>,
    kept: Option<(usize, Vec<Tensor>)>,
}

impl BestEpoch {
    /// The model after the next epoch, with its held-out error: kept if no
    /// earlier epoch did better (a tie keeps the later epoch: more
    /// training, the same error).
    pub fn offer(&mut self, model: &Ggnn, error: f64) {
        if self.errors.iter().all(|&e| error <= e) {
            let _guard = tch::no_grad_guard();
            self.kept = Some((self.errors.len() + 1, model.named_tensors().iter().map(|(_, t)| t.detach().copy()).collect()));
        }
        self.errors.push(error);
    }

    /// Puts the kept epoch's weights back into `model`; its epoch (from 1),
    /// or None if nothing was offered.
    pub fn restore(&self, model: &Ggnn) -> Option<usize> {
        let (epoch, kept) = self.kept.as_ref()?;
        let _guard = tch::no_grad_guard();
        for ((_, t), k) in model.named_tensors().iter().zip(kept) {
            t.shallow_clone().copy_(k);
        }
        Some(*epoch)
    }
}

/// Splits `ids` into rows to fit and rows held out: `share` of each
/// device's rows (at least one where the device has two or more), chosen
/// by `seed`.
pub fn hold_out(rows: &[Row], ids: &[usize], share: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let (mut fit, mut held) = (Vec::new(), Vec::new());
    for gpu in [false, true] {
        let of: Vec<usize> = ids.iter().copied().filter(|&r| rows[r].gpu == gpu).collect();
        let n = if share > 0.0 && of.len() >= 2 { ((of.len() as f64 * share).round() as usize).clamp(1, of.len() - 1) } else { 0 };
        let order = programl::batch::permutation(of.len(), programl::hash::mix(seed ^ 0x686f_6c64 ^ gpu as u64));
        for (k, &i) in order.iter().enumerate() {
            if k < n {
                held.push(of[i])
            } else {
                fit.push(of[i])
            }
        }
    }
    fit.sort_unstable();
    held.sort_unstable();
    (fit, held)
}

/// The examples of `rows` (indices) whose kernels compiled, featurised with
/// `vocabulary`: one graph per kernel, one item per row (its device and,
/// for an aux head, its transfer and work-group sizes).
fn examples(rows: &[Row], kernels: &Kernels, ids: &[usize], vocabulary: &Vocabulary) -> graphtask::Examples {
    let ids: Vec<usize> = ids.iter().copied().filter(|&r| kernels.compiled(r)).collect();
    let mut kernel_ids: Vec<usize> = ids.iter().map(|&r| kernels.row_kernel[r]).collect();
    kernel_ids.sort_unstable();
    kernel_ids.dedup();
    let inputs = kernel_ids
        .iter()
        .map(|&k| GraphInput::new(kernels.graphs[k].as_ref().unwrap(), vocabulary).expect("a built graph is a valid input"))
        .collect();
    let items = ids
        .iter()
        .map(|&r| graphtask::Item {
            graph: kernel_ids.binary_search(&kernels.row_kernel[r]).unwrap(),
            label: rows[r].gpu as usize,
            aux: vec![rows[r].transfer as f32, rows[r].wgsize as f32],
        })
        .collect();
    graphtask::Examples { inputs, items }
}

/// Trains on the compiled rows among `train` (row indices).
pub fn train_model(rows: &[Row], kernels: &Kernels, train: &[usize], s: &Settings, device: Device) -> Result<Trained> {
    let compiled: Vec<usize> = train.iter().copied().filter(|&r| kernels.compiled(r)).collect();
    let (compiled, held) = hold_out(rows, &compiled, s.val_share, s.seed);
    let vocabulary = vocabulary_of(
        compiled
            .iter()
            .map(|&r| kernels.row_kernel[r])
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(|k| kernels.graphs[k].as_ref()),
    );
    // Transfer: the source's ids first, so its embedding rows carry over.
    let source = match &s.init {
        Some(dir) => Some(Bundle::load(dir, Device::Cpu).with_context(|| format!("--init {}", dir.display()))?),
        None => None,
    };
    let vocabulary = match &source {
        Some(b) => b.vocabulary.extended(&vocabulary),
        None => vocabulary,
    };
    let data = examples(rows, kernels, &compiled, &vocabulary);
    let head = GraphHead {
        aux: if s.aux { AUX.iter().map(|a| a.to_string()).collect() } else { Vec::new() },
        aux_hidden: s.aux_hidden,
        pool: s.pool,
        join: if s.aux { s.join } else { Join::Logits },
    };
    let hyper =
        Hyper { steps: s.steps, state_dropout: s.state_dropout, graph: Some(head), hidden: s.hidden, ..Hyper::spec(vocabulary.len()) };
    if let Some(b) = source.as_ref().filter(|b| b.config.hyper.hidden != s.hidden) {
        bail!("--init: the bundle's state is {} wide, this run's {} (--hidden)", b.config.hyper.hidden, s.hidden);
    }
    // libtorch's generator is the process's: splits trained at once seed
    // and initialise one at a time, so a model's start depends on its
    // seed only (nothing after initialisation draws from it).
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let model = {
        let _one = INIT.lock().unwrap_or_else(|e| e.into_inner());
        tch::manual_seed(programl::hash::mix(s.seed) as i64);
        Ggnn::new(&hyper, device)
    };
    if let Some(b) = &source {
        transfer(&b.model, &model);
    }
    let params = model.parameters();
    let mut opt = AdamW::new(&params, s.lr);
    let mut rows_seen = 0;
    let items: Vec<usize> = (0..data.items.len()).collect();
    let held_data = examples(rows, kernels, &held, &vocabulary);
    let held_items: Vec<usize> = (0..held_data.items.len()).collect();
    let mut best = BestEpoch::default();
    for epoch in 0..s.epochs {
        opt.lr = epoch_lr(s, epoch);
        // Batch statistics (the aux inputs' normalisation) need two rows.
        for batch in graphtask::epoch_batches(&data, &items, s.seed, epoch, s.batch_nodes, 2) {
            graphtask::train_step(&model, &mut opt, &params, &data, &batch, s.code_loss)
                .with_context(|| format!("devmap: epoch {}", epoch + 1))?;
            rows_seen += batch.len() as u64;
        }
        if !held_items.is_empty() {
            let probs = graphtask::probabilities(&model, &held_data, &held_items, hyper.steps, s.batch_nodes);
            let wrong = probs.iter().zip(&held_data.items).filter(|(p, item)| (p[1] >= 0.5) != (item.label == 1)).count();
            best.offer(&model, wrong as f64 / held_items.len() as f64);
        }
    }
    let best_epoch = best.restore(&model);
    if let Some(head_steps) = s.refit_head {
        graphtask::refit_head(&model, &data, &items, s.lr, head_steps, s.batch_nodes).context("devmap: --refit-head")?;
    }
    Ok(Trained { model, vocabulary, hyper, rows_seen, val_errors: best.errors, best_epoch })
}

/// Copies into `to` every parameter of `from` with the same name and shape,
/// and of the embedding the rows `from` has (its vocabulary is a prefix of
/// `to`'s: [`Vocabulary::extended`]). Returns the names copied.
pub fn transfer(from: &Ggnn, to: &Ggnn) -> Vec<&'static str> {
    let source: HashMap<&str, &Tensor> = from.named_parameters().into_iter().collect();
    let mut copied = Vec::new();
    tch::no_grad(|| {
        for (name, target) in to.named_parameters() {
            let Some(src) = source.get(name) else { continue };
            let (a, b) = (src.size(), target.size());
            if a == b {
                target.shallow_clone().copy_(&src.to_device(target.device()));
                copied.push(name);
            } else if name == "embedding.weight" && a.len() == 2 && a[1] == b[1] && a[0] <= b[0] {
                target.narrow(0, 0, a[0]).copy_(&src.to_device(target.device()));
                copied.push(name);
            }
        }
    });
    copied
}

/// GPU probabilities of `rows` (indices) whose kernels compiled. Each
/// kernel's graph runs once; its rows differ only in their auxiliary inputs.
pub fn predict(t: &Trained, rows: &[Row], kernels: &Kernels, ids: &[usize], batch_nodes: usize) -> HashMap<usize, f64> {
    let compiled: Vec<usize> = ids.iter().copied().filter(|&r| kernels.compiled(r)).collect();
    let data = examples(rows, kernels, &compiled, &t.vocabulary);
    let items: Vec<usize> = (0..compiled.len()).collect();
    let probs = graphtask::probabilities(&t.model, &data, &items, t.hyper.steps, batch_nodes);
    compiled.into_iter().zip(probs).map(|(r, p)| (r, p[1] as f64)).collect()
}

/// Figures of one protocol.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    pub rows: usize,
    pub rows_failed: usize,
    pub errors: usize,
    pub error: f64,
    pub static_error: f64,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub per_fold: Vec<FoldFigures>,
    /// Test rows whose kernel (the CSV's `src`) no training row of their split has,
    /// and how many of those the model got wrong: the rows that only
    /// generalising from code can get right (`scripts/devmap_lookup.py`
    /// gives the static mapping's and a kernel lookup's figures).
    pub unseen_rows: usize,
    pub unseen_errors: usize,
    /// Seconds the protocol took in this run (its trainings and
    /// predictions; near 0 where every split was kept from an earlier run).
    pub wall_s: f64,
    /// Seconds its splits took, summed, whenever each ran (a kept split
    /// brings its own): what the protocol costs, resumed or not. None where
    /// a kept split predates the record.
    pub split_s: Option<f64>,
}

impl Figures {
    /// Error on the test rows whose kernel was in training, and on those
    /// whose kernel was not (None where a part is empty).
    pub fn error_by_kernel(&self) -> (Option<f64>, Option<f64>) {
        let seen = self.rows - self.unseen_rows;
        let part = |errors: usize, rows: usize| (rows > 0).then(|| errors as f64 / rows as f64);
        (part(self.errors - self.unseen_errors, seen), part(self.unseen_errors, self.unseen_rows))
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FoldFigures {
    pub fold: usize,
    pub rows: usize,
    pub rows_failed: usize,
    pub error: f64,
    pub static_error: f64,
    pub f1: f64,
}

/// What a model is trained on and tested on: row indices.
pub struct Split {
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

/// How rows are split into training and test sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The paper's: k folds stratified by label.
    Stratified,
    /// k folds, a kernel's rows in one fold.
    Grouped,
    /// PERFOGRAPH's (NeurIPS 2023): 10 random test sets of 67 rows each,
    /// a model trained on the other rows for each.
    Perfograph,
}

/// PERFOGRAPH's repetitions and test-set size.
pub const PERFOGRAPH_SETS: usize = 10;
pub const PERFOGRAPH_TEST_ROWS: usize = 67;

impl std::str::FromStr for Protocol {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Protocol> {
        match s {
            "stratified" => Ok(Protocol::Stratified),
            "grouped" => Ok(Protocol::Grouped),
            "perfograph" => Ok(Protocol::Perfograph),
            other => bail!("--protocol '{other}': expected stratified, grouped or perfograph"),
        }
    }
}

/// `--protocol`: a comma-separated list of protocols, or `all`. Without
/// it, the two the JSON's contract keys need: stratified (`error`) and
/// kernel-grouped (`error_grouped`); PERFOGRAPH's sets take as long again.
pub fn protocols(list: Option<&str>) -> Result<Vec<Protocol>> {
    let all = [Protocol::Stratified, Protocol::Grouped, Protocol::Perfograph];
    let Some(list) = list else { return Ok(all[..2].to_vec()) };
    if list.trim() == "all" {
        return Ok(all.to_vec());
    }
    let mut out: Vec<Protocol> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let p: Protocol = name.parse()?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        bail!("--protocol: name at least one of stratified, grouped, perfograph (or all)");
    }
    Ok(out)
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Stratified => "stratified",
            Protocol::Grouped => "grouped",
            Protocol::Perfograph => "perfograph",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Protocol::Stratified => "stratified (the paper's protocol)",
            Protocol::Grouped => "grouped by kernel",
            Protocol::Perfograph => "10 random 67-row test sets (PERFOGRAPH's protocol)",
        }
    }
}

/// The splits of `protocol` over `rows`.
pub fn splits(rows: &[Row], protocol: Protocol, k: usize, seed: u64) -> Vec<Split> {
    let n = rows.len();
    match protocol {
        Protocol::Stratified | Protocol::Grouped => {
            let fold_of = folds(rows, k, protocol == Protocol::Grouped, seed);
            (0..k)
                .map(|f| Split {
                    train: (0..n).filter(|&r| fold_of[r] != f).collect(),
                    test: (0..n).filter(|&r| fold_of[r] == f).collect(),
                })
                .filter(|s| !s.test.is_empty())
                .collect()
        }
        Protocol::Perfograph => (0..PERFOGRAPH_SETS)
            .map(|i| {
                let order = programl::batch::permutation(n, programl::hash::mix(seed ^ 0x7065_7266 ^ ((i as u64 + 1) << 40)));
                // 67 of DevMap's 680 rows; a tenth of a smaller set.
                let size = PERFOGRAPH_TEST_ROWS.min(n / 10).max(1).min(n);
                let mut test: Vec<usize> = order[..size].to_vec();
                test.sort_unstable();
                let mut train: Vec<usize> = order[size..].to_vec();
                train.sort_unstable();
                Split { train, test }
            })
            .collect(),
    }
}

/// A model per split, trained on its training rows and tested on its test
/// rows, `workers` splits at a time (each on one libtorch thread). Rows
/// whose kernel failed to compile count as errors where they are tested.
/// The static mapping predicts the training rows' majority device. Figures
/// sum over every split's test rows; `progress` hears of each split as it
/// finishes.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_splits(
    rows: &[Row],
    kernels: &Kernels,
    splits: &[Split],
    s: &Settings,
    device: Device,
    resume: Option<&Resume>,
    workers: usize,
    members: usize,
    mut progress: impl FnMut(usize, &FoldFigures),
) -> Result<Figures> {
    let mut total = Confusion::default();
    let (mut errors, mut static_errors, mut failed, mut tested) = (0, 0, 0, 0);
    let (mut unseen_rows, mut unseen_errors) = (0, 0);
    let mut per_fold = Vec::new();
    // One member's test predictions for split `f`, and its seconds. Member
    // 0 is the single model (its seed, and so its kept file, as without an
    // ensemble); member k > 0 differs only by its seed.
    let member_probs = |f: usize, k: usize| -> Result<(HashMap<usize, f64>, Option<f64>)> {
        let split = &splits[f];
        let settings = Settings { seed: s.seed ^ (f as u64) << 32 ^ (k as u64) << 48, ..s.clone() };
        let kept = resume.map(|r| r.path(split, &settings));
        // A kept file counts only if it holds exactly the split's compiled
        // test rows.
        let compiled: Vec<usize> = split.test.iter().copied().filter(|&r| kernels.compiled(r)).collect();
        if let Some((probs, seconds)) = kept.as_deref().and_then(Resume::read) {
            if probs.len() == compiled.len() && compiled.iter().all(|r| probs.contains_key(r)) {
                return Ok((probs, seconds));
            }
        }
        let t0 = std::time::Instant::now();
        let trained = train_model(rows, kernels, &split.train, &settings, device)?;
        let probs = predict(&trained, rows, kernels, &split.test, s.batch_nodes);
        let seconds = t0.elapsed().as_secs_f64();
        if let Some(path) = &kept {
            Resume::write(path, &probs, seconds)?;
        }
        Ok((probs, Some(seconds)))
    };
    // The ensemble's: the members' GPU probabilities, averaged.
    let split_probs = |f: usize| -> Result<(HashMap<usize, f64>, Option<f64>)> {
        let (mut sum, mut seconds) = member_probs(f, 0)?;
        for k in 1..members.max(1) {
            let (probs, s) = member_probs(f, k)?;
            for (r, p) in &mut sum {
                *p += probs.get(r).copied().unwrap_or(0.5);
            }
            seconds = seconds.zip(s).map(|(a, b)| a + b);
        }
        let n = members.max(1) as f64;
        Ok((sum.into_iter().map(|(r, p)| (r, p / n)).collect(), seconds))
    };
    let mut split_s = Some(0.0);
    let (send, done) = std::sync::mpsc::channel::<(usize, Result<(HashMap<usize, f64>, Option<f64>)>)>();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| -> Result<()> {
        for _ in 0..workers.clamp(1, splits.len().max(1)) {
            let (send, next, split_probs) = (send.clone(), &next, &split_probs);
            scope.spawn(move || loop {
                let f = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if f >= splits.len() || send.send((f, split_probs(f))).is_err() {
                    break;
                }
            });
        }
        drop(send);
        for (f, probs) in done.iter() {
            let probs = match probs {
                Ok((p, seconds)) => {
                    split_s = split_s.zip(seconds).map(|(a, b)| a + b);
                    p
                }
                Err(e) => {
                    // Stop handing out splits; the running ones finish.
                    next.store(splits.len(), std::sync::atomic::Ordering::Relaxed);
                    return Err(e);
                }
            };
            let (train, test) = (&splits[f].train, &splits[f].test);
            let majority_gpu = 2 * train.iter().filter(|&&r| rows[r].gpu).count() > train.len();
            // A kernel is the CSV's `src` (as the grouped protocol and
            // devmap_lookup.py take it): the sources input compiles a
            // program once per dataset, so its graphs differ by row.
            let trained_kernels: std::collections::HashSet<&str> = train.iter().map(|&r| rows[r].src.as_str()).collect();
            let mut fold = Confusion::default();
            let (mut fold_errors, mut fold_static, mut fold_failed) = (0, 0, 0);
            for &r in test {
                // A failed kernel: the wrong device.
                let predicted = probs.get(&r).map_or(!rows[r].gpu, |&p| p >= 0.5);
                fold.record(predicted, rows[r].gpu);
                fold_errors += (predicted != rows[r].gpu) as usize;
                fold_static += (majority_gpu != rows[r].gpu) as usize;
                fold_failed += !probs.contains_key(&r) as usize;
                if !trained_kernels.contains(rows[r].src.as_str()) {
                    unseen_rows += 1;
                    unseen_errors += (predicted != rows[r].gpu) as usize;
                }
            }
            let figures = FoldFigures {
                fold: f,
                rows: test.len(),
                rows_failed: fold_failed,
                error: fold_errors as f64 / test.len() as f64,
                static_error: fold_static as f64 / test.len() as f64,
                f1: fold.f1(),
            };
            progress(f, &figures);
            per_fold.push(figures);
            total.add(&fold);
            errors += fold_errors;
            static_errors += fold_static;
            failed += fold_failed;
            tested += test.len();
        }
        Ok(())
    })?;
    per_fold.sort_by_key(|f: &FoldFigures| f.fold);
    let n = tested.max(1);
    Ok(Figures {
        rows: tested,
        rows_failed: failed,
        errors,
        error: errors as f64 / n as f64,
        static_error: static_errors as f64 / n as f64,
        precision: total.precision(),
        recall: total.recall(),
        f1: total.f1(),
        per_fold,
        unseen_rows,
        unseen_errors,
        wall_s: 0.0,
        split_s,
    })
}

/// Where finished splits keep their test predictions, so that a killed
/// cross-validation resumes at the first split it had not finished. A
/// split's file is named by a hash of everything its predictions depend
/// on: the rows and input, the graphs' sizes, the settings (its seed
/// included) and the split's rows.
pub struct Resume {
    dir: PathBuf,
    base: u64,
}

/// Bumped when what a kept split's predictions depend on changes in code.
const RESUME_FORMAT: &str = "devmap-split v1";

impl Resume {
    /// `init`: the `--init` bundle, whose files are hashed (a retrained
    /// bundle at the same path is another start).
    pub fn new(dir: PathBuf, rows: &[Row], input: Input, kernels: &Kernels, init: Option<&Path>, device: Device) -> Resume {
        let mut h = Fnv1a::default();
        h.write(RESUME_FORMAT.as_bytes());
        h.write(format!("{device:?}").as_bytes());
        h.write(rows_hash(rows, input).as_bytes());
        // The graphs themselves: node texts and edges, in order.
        for g in &kernels.graphs {
            match g {
                None => h.write_u8(0),
                Some(g) => {
                    h.write_u8(1);
                    for n in g.graph.node_weights() {
                        h.write(n.text.as_bytes());
                        h.write_u8(0);
                    }
                    for e in g.graph.edge_references() {
                        use petgraph::visit::EdgeRef;
                        h.write(&(e.source().index() as u64).to_le_bytes());
                        h.write(&(e.target().index() as u64).to_le_bytes());
                        h.write(&[e.weight().flow as u8]);
                        h.write(&e.weight().position.to_le_bytes());
                    }
                }
            }
        }
        for &k in &kernels.row_kernel {
            h.write(&(k as u64).to_le_bytes());
        }
        if let Some(init) = init {
            for f in ["config.json", "vocabulary.json", "weights.safetensors"] {
                h.write(&std::fs::read(init.join(f)).unwrap_or_default());
            }
        }
        Resume { dir, base: h.finish() }
    }

    fn path(&self, split: &Split, s: &Settings) -> PathBuf {
        let mut h = Fnv1a::default();
        h.write(&self.base.to_le_bytes());
        h.write(format!("{} {}", s.resume_key(), env!("CARGO_PKG_VERSION")).as_bytes());
        for part in [&split.train, &split.test] {
            h.write(&(part.len() as u64).to_le_bytes());
            for &r in part {
                h.write(&(r as u64).to_le_bytes());
            }
        }
        self.dir.join(format!("{:016x}.json", h.finish()))
    }

    /// A kept split's test predictions (row, GPU probability) and the
    /// seconds the split took: `{"probs": [[row, p], ...], "seconds": s}`,
    /// or a bare list of pairs (written before the time was kept: None).
    fn read(path: &Path) -> Option<(HashMap<usize, f64>, Option<f64>)> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Kept {
            Timed { probs: Vec<(usize, f64)>, seconds: f64 },
            Bare(Vec<(usize, f64)>),
        }
        let text = std::fs::read_to_string(path).ok()?;
        Some(match serde_json::from_str(&text).ok()? {
            Kept::Timed { probs, seconds } => (probs.into_iter().collect(), Some(seconds)),
            Kept::Bare(pairs) => (pairs.into_iter().collect(), None),
        })
    }

    fn write(path: &Path, probs: &HashMap<usize, f64>, seconds: f64) -> Result<()> {
        let mut pairs: Vec<(usize, f64)> = probs.iter().map(|(&r, &p)| (r, p)).collect();
        pairs.sort_by_key(|&(r, _)| r);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        }
        let text = serde_json::to_vec(&serde_json::json!({ "probs": pairs, "seconds": seconds }))?;
        programl::fsutil::write_bytes_atomically(path, programl::fsutil::Durability::Atomic, &text)
            .with_context(|| format!("{}: cannot write", path.display()))
    }
}

/// A hash of the rows a model is trained on.
pub fn rows_hash(rows: &[Row], input: Input) -> String {
    let mut h = Fnv1a::default();
    h.write(input.name().as_bytes());
    for r in rows {
        for field in [&r.benchmark, &r.dataset, &r.src] {
            h.write(field.as_bytes());
            h.write_u8(0);
        }
        h.write(&r.transfer.to_le_bytes());
        h.write(&r.wgsize.to_le_bytes());
        h.write_u8(r.gpu as u8);
    }
    format!("{:016x}", h.finish())
}

/// Saves `t` as a graph-head bundle for `platform`.
pub fn save_bundle(dir: &Path, t: &Trained, platform: &str, rows: &[Row], input: Input, flags: &[&str], wall_s: f64) -> Result<()> {
    let config = Config {
        format: bundle::FORMAT.into(),
        version: bundle::VERSION,
        task: format!("devmap-{platform}"),
        head: Head::Graph,
        classes: CLASSES.iter().map(|c| c.to_string()).collect(),
        hyper: t.hyper.clone(),
        provenance: Provenance {
            graph_mode: programl_dataset::export::GRAPH_MODE.into(),
            llvm_major: programl::LLVM_MAJOR.parse().unwrap_or(0),
            // clang 16 and later emit opaque pointers only; NCC's IR is LLVM 9's.
            opaque_pointers: input != Input::Ncc && programl::LLVM_MAJOR.parse::<u32>().unwrap_or(0) >= 16,
            featurisation_version: programl::batch::LAYOUT_VERSION,
            training_data_hash: rows_hash(rows, input),
            examples_seen: t.rows_seen,
            wall_time_s: (wall_s * 10.0).round() / 10.0,
            // Trained through autograd, whose products stay FP32 under
            // --dtype bf16 (only the hand-written DDF step and inference
            // compute theirs in BF16).
            dtype: programl_model::Precision::F32.to_string(),
            created_by: format!("programl-train {}", env!("CARGO_PKG_VERSION")),
            corpus: Vec::new(),
        },
        // NCC's IR was compiled by its authors (Apple LLVM 9.1), not by us.
        source: Some(SourceCompile {
            compiler: if input == Input::Ncc { "Apple LLVM 9.1 (NCC's archive)".into() } else { CLANG.into() },
            flags: match input {
                Input::Ncc => Vec::new(),
                Input::Csv => CLANG_FLAGS.iter().map(|f| f.to_string()).collect(),
                Input::Sources => flags.iter().map(|f| f.to_string()).collect(),
            },
            prelude: None,
            input: Some(input.name().into()),
            levels: None,
        }),
        auto_dtype: None,
    };
    Bundle::save(dir, &config, &t.model, &t.vocabulary).with_context(|| format!("{}: cannot save the bundle", dir.display()))
}

/// Where the rows' kernels come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Each row's kernel compiled from its program's own file, with its
    /// headers and build options ([`sources`]): the default.
    Sources,
    /// The CSV's normalised `src` column, repaired where clang fails
    /// ([`compile_kernel`]).
    Csv,
    /// The IR that ProGraML's DevMap experiments used ([`ncc`]): LLVM 9,
    /// typed pointers, x86-64. For comparison with the paper; a bundle
    /// trained on it reads graphs unlike the pass's.
    Ncc,
}

impl std::str::FromStr for Input {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Input> {
        match s {
            "sources" => Ok(Input::Sources),
            "csv" => Ok(Input::Csv),
            "ncc" => Ok(Input::Ncc),
            other => bail!("--input '{other}': expected sources, csv or ncc"),
        }
    }
}

impl Input {
    pub fn name(self) -> &'static str {
        match self {
            Input::Sources => "sources",
            Input::Csv => "csv",
            Input::Ncc => "ncc",
        }
    }
}

/// What `programl-train devmap` was asked for.
pub struct Options {
    pub platform: String,
    pub input: Input,
    pub data: Option<PathBuf>,
    pub cache: Option<PathBuf>,
    pub folds: usize,
    pub protocol: Option<String>,
    pub out: Option<PathBuf>,
    pub no_cv: bool,
    /// The -O level the programs' sources are compiled at ([`DEFAULT_LEVEL`]).
    pub level: String,
    /// Models per split in cross-validation, their GPU probabilities
    /// averaged (1: one model, as the bundle).
    pub ensemble: usize,
    pub json: bool,
    pub quiet: bool,
}

/// `../shared/datasets/<name>` from the project root: the current
/// directory's, else the one this binary was built in (`target/<profile>/`).
pub fn default_dataset(name: &str) -> PathBuf {
    let relative = Path::new("../shared/datasets").join(name);
    let from_exe = std::env::current_exe().ok().and_then(|exe| exe.parent()?.parent()?.parent().map(|root| root.join(&relative)));
    match from_exe {
        Some(p) if !relative.exists() && p.exists() => p,
        _ => relative,
    }
}

pub fn run(o: &Options, s: &Settings, device: Device) -> Result<()> {
    if !matches!(o.platform.as_str(), "amd" | "nvidia") {
        bail!("--platform '{}': expected amd or nvidia", o.platform);
    }
    if o.folds < 2 {
        bail!("--folds {}: at least 2", o.folds);
    }
    if s.epochs == 0 || s.steps < 1 {
        bail!("--epochs and --steps must be at least 1");
    }
    let protocols = protocols(o.protocol.as_deref())?;
    let flags = clang_flags(&o.level)?;
    if o.input != Input::Sources && o.level.trim_start_matches('-') != DEFAULT_LEVEL {
        bail!("--opt-level {}: only the sources input is compiled here (--input {} is not)", o.level, o.input.name());
    }
    if let Some(dir) = &s.init {
        let b = Bundle::load(dir, Device::Cpu).with_context(|| format!("--init {}", dir.display()))?;
        if b.model.hyper().hidden != programl_model::HIDDEN {
            bail!("--init {}: a state {} wide; device mapping's is {}", dir.display(), b.model.hyper().hidden, programl_model::HIDDEN);
        }
    }
    crate::engine::tune_allocator();
    let data = o.data.clone().unwrap_or_else(|| default_dataset("devmap"));
    let csv = data.join(format!("{}.csv", o.platform));
    let rows = read_rows(&csv)?;
    let cache = o.cache.clone().unwrap_or_else(|| programl::fsutil::cache_dir().join("devmap"));
    let start = std::time::Instant::now();
    let kernels = match o.input {
        Input::Sources => {
            let root = sources::sources_root(&data, &cache)?;
            Kernels::from_sources(&rows, &sources::Builds::shipped()?, &root, &cache.join("sources"), &clang(), &flags, o.quiet)?
        }
        Input::Csv => Kernels::build(&rows, &cache, o.quiet)?,
        Input::Ncc => Kernels::from_ncc(&rows, &ncc::ir_dir(&data, &cache)?)?,
    };
    let failed_kernels: usize = kernels.failures.values().sum();
    let rows_failed = (0..rows.len()).filter(|&r| !kernels.compiled(r)).count();
    if !o.json {
        println!(
            "{}: {} rows, {} kernels: {} compiled ({} after repairs), {} failed ({} rows)",
            csv.display(),
            rows.len(),
            kernels.graphs.len(),
            kernels.graphs.len() - failed_kernels,
            kernels.repaired,
            failed_kernels,
            rows_failed
        );
        for (cause, n) in &kernels.failures {
            println!("  failed: {n} x {cause}");
        }
        let sizes = kernels.node_counts();
        if !sizes.is_empty() {
            println!(
                "  graphs: median {} nodes, mean {:.0}, max {}; {} nodes in all",
                sizes[sizes.len() / 2],
                sizes.iter().sum::<usize>() as f64 / sizes.len() as f64,
                sizes[sizes.len() - 1],
                sizes.iter().sum::<usize>()
            );
        }
    }
    let resume = Resume::new(cache.join("cv"), &rows, o.input, &kernels, s.init.as_deref(), device);
    // On the CPU, --threads N trains N splits at once, each on one
    // libtorch thread (a split's small graphs keep one thread busy, and
    // training is the run's time).
    let threads = tch::get_num_threads();
    let workers = if device == Device::Cpu { threads.max(1) as usize } else { 1 };
    if workers > 1 {
        tch::set_num_threads(1);
    }
    let mut results: Vec<(Protocol, Figures)> = Vec::new();
    if !o.no_cv {
        for &protocol in &protocols {
            let name = protocol.describe();
            let splits = splits(&rows, protocol, o.folds, s.seed);
            let t0 = std::time::Instant::now();
            let mut done = 0;
            let mut figures = evaluate_splits(&rows, &kernels, &splits, s, device, Some(&resume), workers, o.ensemble, |f, fig| {
                // Progress on stderr, also with --json (stdout).
                done += 1;
                if !o.quiet {
                    let per = t0.elapsed().as_secs_f64() / done as f64;
                    eprintln!(
                        "devmap {} {name}: split {} ({done} of {} done): {} rows ({} failed), error {:.3}, static {:.3}, F1 {:.3} ({per:.0}s/split, ETA {:.0}s)",
                        o.platform,
                        f + 1,
                        splits.len(),
                        fig.rows,
                        fig.rows_failed,
                        fig.error,
                        fig.static_error,
                        fig.f1,
                        per * (splits.len() - done) as f64
                    );
                }
            })?;
            figures.wall_s = t0.elapsed().as_secs_f64();
            if !o.json {
                println!(
                    "{name}, {} splits, aux {}: error {:.4} ({} of {} rows, {} failed to compile; {} rows of kernels unseen in training, {} wrong), static mapping {:.4}, precision {:.4} recall {:.4} F1 {:.4} (GPU positive), {:.0}s",
                    splits.len(),
                    s.aux,
                    figures.error,
                    figures.errors,
                    figures.rows,
                    figures.rows_failed,
                    figures.unseen_rows,
                    figures.unseen_errors,
                    figures.static_error,
                    figures.precision,
                    figures.recall,
                    figures.f1,
                    figures.wall_s
                );
            }
            results.push((protocol, figures));
        }
    }
    if o.json {
        let get = |p: Protocol| results.iter().find(|(x, _)| *x == p).map(|(_, f)| f);
        let main = get(Protocol::Stratified).or(get(Protocol::Grouped));
        let summary: BTreeMap<&str, serde_json::Value> = results
            .iter()
            .map(|(p, f)| {
                let (seen, unseen) = f.error_by_kernel();
                let v = serde_json::json!({
                    "error": f.error, "precision": f.precision, "recall": f.recall, "f1": f.f1,
                    "static_error": f.static_error, "rows_tested": f.rows, "splits": f.per_fold.len(), "wall_s": f.wall_s,
                    "split_s": f.split_s,
                    "rows_unseen_kernel": f.unseen_rows, "error_seen_kernel": seen, "error_unseen_kernel": unseen,
                });
                (p.name(), v)
            })
            .collect();
        let out = serde_json::json!({
            "platform": o.platform,
            "input": o.input.name(),
            "folds": o.folds,
            "aux": s.aux,
            "rows": rows.len(),
            "rows_failed": rows_failed,
            "kernels": kernels.graphs.len(),
            "kernels_failed": failed_kernels,
            "kernels_repaired": kernels.repaired,
            "compile_failures": kernels.failures,
            "error": get(Protocol::Stratified).map(|f| f.error),
            "error_grouped": get(Protocol::Grouped).map(|f| f.error),
            "error_perfograph": get(Protocol::Perfograph).map(|f| f.error),
            "static_error": main.map(|f| f.static_error),
            "precision": get(Protocol::Stratified).map(|f| f.precision),
            "recall": get(Protocol::Stratified).map(|f| f.recall),
            "f1": get(Protocol::Stratified).map(|f| f.f1),
            "protocols": summary,
            "per_fold": get(Protocol::Stratified).map(|f| &f.per_fold),
            "per_fold_grouped": get(Protocol::Grouped).map(|f| &f.per_fold),
            "per_split_perfograph": get(Protocol::Perfograph).map(|f| &f.per_fold),
            "epochs": s.epochs,
            "steps": s.steps,
            "lr": s.lr,
            "pool": s.pool,
            "init": s.init.as_ref().map(|p| p.display().to_string()),
            "code_loss": s.code_loss,
            "val_share": s.val_share,
            "lr_schedule": if s.cosine { "cosine" } else { "constant" },
            "join": if s.aux && s.join == Join::State { "state" } else { "logits" },
            "state_dropout": s.state_dropout,
            "ensemble": o.ensemble,
            "refit_head": s.refit_head,
            "wall_s": start.elapsed().as_secs_f64(),
        });
        println!("{out}");
    }
    tch::set_num_threads(threads);
    if let Some(dir) = &o.out {
        let t0 = std::time::Instant::now();
        let all: Vec<usize> = (0..rows.len()).collect();
        let trained = train_model(&rows, &kernels, &all, s, device)?;
        save_bundle(dir, &trained, &o.platform, &rows, o.input, &flags, t0.elapsed().as_secs_f64())?;
        // How well it fits what it trained on (libtorch's forward, in
        // evaluation mode: `eval` of the bundle on the CSV gives the same).
        let probs = predict(&trained, &rows, &kernels, &all, s.batch_nodes);
        let wrong = all.iter().filter(|&&r| probs.get(&r).is_none_or(|&p| (p >= 0.5) != rows[r].gpu)).count();
        if !o.json {
            println!(
                "saved {} (trained on every compiled row, {:.0}s; error on those rows {:.4})",
                dir.display(),
                t0.elapsed().as_secs_f64(),
                wrong as f64 / all.len().max(1) as f64
            );
            if let Some(e) = trained.best_epoch {
                let curve: Vec<String> = trained.val_errors.iter().map(|v| format!("{v:.3}")).collect();
                println!("held-out rows' error by epoch: {}; kept epoch {e}", curve.join(" "));
                if s.refit_head.is_some() {
                    println!("(measured before the classifier's refit on every training row, --refit-head)");
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept split reads with its seconds, and one written before the
    /// seconds were kept (a bare list of pairs) reads without them.
    #[test]
    fn kept_splits_read_in_both_formats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cv").join("split.json");
        let probs: HashMap<usize, f64> = [(3, 0.25), (1, 0.75)].into_iter().collect();
        Resume::write(&path, &probs, 12.5).unwrap();
        assert_eq!(Resume::read(&path), Some((probs.clone(), Some(12.5))));
        std::fs::write(&path, "[[1,0.75],[3,0.25]]").unwrap();
        assert_eq!(Resume::read(&path), Some((probs, None)));
        std::fs::write(&path, "{\"probs\": 3}").unwrap();
        assert_eq!(Resume::read(&path), None);
    }

    fn clang() -> PathBuf {
        Path::new(programl::LLVM_BINDIR).join("clang")
    }

    fn row(benchmark: &str, src: &str, gpu: bool) -> Row {
        Row { benchmark: benchmark.into(), dataset: "default".into(), transfer: 1.0, wgsize: 1.0, gpu, src: src.into() }
    }

    /// The kinds of damage the dataset's normalisation left, each repaired:
    /// a libclc internal, a helper that lost its definition, a constant that
    /// lost its macro, and a call whose helper was renamed onto the kernel.
    #[test]
    fn repairs_what_clang_reports_and_caches_the_outcome() {
        let cache = tempfile::tempdir().unwrap();
        let src = "__kernel void A(__global float* a, int b) {\n  int c = get_global_id(0);\n  a[c] = __clc_pow(2.0f, 3.0f) + K;\n  B(a, c);\n  A(a);\n}\n";
        let Compiled::Ir { path, repaired } = compile_kernel(src, cache.path(), &clang()).unwrap() else {
            panic!("not repaired: {:?}", compile_kernel(src, cache.path(), &clang()).unwrap());
        };
        assert!(repaired);
        let ir = std::fs::read_to_string(&path).unwrap();
        assert!(ir.contains("spir_kernel void @A("), "{ir}");
        let defines = std::fs::read_to_string(cache.path().join(format!("{}.repaired", source_key(src)))).unwrap();
        for d in ["#define __clc_pow pow", "#define B(...) 0", "#define K 1", "#define __programl_stub1(...) 0"] {
            assert!(defines.contains(d), "{d} missing from {defines}");
        }
        // A source as given compiles unrepaired.
        let clean = "__kernel void A(__global int* a) { a[get_global_id(0)] = 1; }\n";
        assert!(matches!(compile_kernel(clean, cache.path(), &clang()).unwrap(), Compiled::Ir { repaired: false, .. }));
        // What cannot be repaired is a failure with its cause, cached.
        let broken = "__kernel void A(__global int* a) { a[0] = ; }\n";
        let Compiled::Failed { cause } = compile_kernel(broken, cache.path(), &clang()).unwrap() else { panic!("compiled") };
        assert_eq!(cause, "expected expression");
        let Compiled::Failed { cause: again } = compile_kernel(broken, cache.path(), Path::new("/no/clang")).unwrap() else { panic!() };
        assert_eq!(again, cause, "the second time comes from the cache, without clang");
        assert!(
            compile_kernel("__kernel void Z() {}", cache.path(), Path::new("/no/clang")).is_err(),
            "a missing clang is an error, not a failure"
        );
    }

    #[test]
    fn the_cosine_schedule_falls_from_the_rate_by_half_a_cosine() {
        let s = Settings {
            aux: true,
            epochs: 10,
            steps: 2,
            lr: 1e-3,
            batch_nodes: 1000,
            aux_hidden: 4,
            pool: Pool::Gated,
            seed: 0,
            init: None,
            code_loss: 0.0,
            state_dropout: 0.0,
            val_share: 0.0,
            cosine: true,
            join: Join::Logits,
            hidden: 34,
            refit_head: None,
        };
        let rates: Vec<f64> = (0..10).map(|e| epoch_lr(&s, e)).collect();
        assert_eq!(rates[0], 1e-3);
        assert!((rates[5] - 5e-4).abs() < 1e-12, "{rates:?}");
        assert!(rates.windows(2).all(|w| w[1] < w[0]) && rates[9] > 0.0 && rates[9] < 3e-5, "{rates:?}");
        assert!((0..10).all(|e| epoch_lr(&Settings { cosine: false, ..s.clone() }, e) == 1e-3));
    }

    /// The best epoch's weights, buffers included, come back whatever
    /// was trained after it.
    #[test]
    fn the_best_epoch_is_restored() {
        let head = GraphHead { aux: vec!["transfer".into(), "wgsize".into()], aux_hidden: 4, pool: Pool::Gated, join: Default::default() };
        let hyper = Hyper { steps: 2, state_dropout: 0.0, graph: Some(head), ..Hyper::spec(5) };
        let model = Ggnn::new(&hyper, Device::Cpu);
        let snapshot = |m: &Ggnn| -> Vec<Vec<f32>> {
            m.named_tensors().iter().map(|(_, t)| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()).collect()
        };
        let bump = |m: &Ggnn, by: f64| {
            let _g = tch::no_grad_guard();
            for (_, t) in m.named_tensors() {
                let _ = t.shallow_clone().f_add_scalar_(by).unwrap();
            }
        };
        let mut best = BestEpoch::default();
        assert_eq!(best.restore(&model), None);
        best.offer(&model, 0.4);
        bump(&model, 1.0);
        best.offer(&model, 0.2);
        let second = snapshot(&model);
        bump(&model, 1.0);
        best.offer(&model, 0.3);
        bump(&model, 1.0);
        best.offer(&model, 0.2);
        let fourth = snapshot(&model);
        bump(&model, 1.0);
        assert_ne!(snapshot(&model), fourth);
        // Epochs 2 and 4 tie: the later is kept.
        assert_eq!(best.restore(&model), Some(4));
        assert_eq!(snapshot(&model), fourth);
        assert_ne!(second, fourth);
        assert_eq!(best.errors, vec![0.4, 0.2, 0.3, 0.2]);
    }

    /// The held-out rows: a share of each device's rows, disjoint from the
    /// rows to fit, the same for a seed, other for another; none at 0.
    #[test]
    fn held_out_rows_are_a_stratified_share() {
        let rows: Vec<Row> = (0..40).map(|i| row(&format!("b{i}"), &format!("k{i}"), i % 4 == 0)).collect();
        let ids: Vec<usize> = (0..40).collect();
        let (fit, held) = hold_out(&rows, &ids, 0.2, 3);
        assert_eq!((fit.len(), held.len()), (32, 8));
        assert_eq!(held.iter().filter(|&&r| rows[r].gpu).count(), 2, "10 GPU rows: 2 held out");
        let mut all: Vec<usize> = fit.iter().chain(&held).copied().collect();
        all.sort_unstable();
        assert_eq!(all, ids);
        assert_eq!(hold_out(&rows, &ids, 0.2, 3), (fit, held.clone()));
        assert_ne!(hold_out(&rows, &ids, 0.2, 4).1, held);
        assert_eq!(hold_out(&rows, &ids, 0.0, 3), (ids.clone(), Vec::new()));
        // A device with a single row keeps it for fitting.
        let one: Vec<usize> = (1..8).collect();
        let (fit, held) = hold_out(&rows, &one, 0.2, 3);
        assert!(fit.contains(&4) && held.len() == 1 && !held.contains(&4), "row 4 is the only GPU row: {fit:?} {held:?}");
    }

    #[test]
    fn stratified_folds_balance_labels_and_grouped_folds_keep_kernels_together() {
        // 12 kernels, 5 rows each; kernel 0's source is also kernel 1's,
        // so those two are one group.
        let rows: Vec<Row> = (0..60)
            .map(|i| {
                let k = if i == 0 { 1 } else { i % 12 };
                row(&format!("suite-b{}-k", i % 12), &format!("src{k}"), i % 3 == 0)
            })
            .collect();
        let f = folds(&rows, 5, false, 7);
        for label in [false, true] {
            let counts: Vec<usize> = (0..5).map(|k| (0..60).filter(|&r| f[r] == k && rows[r].gpu == label).count()).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{label}: {counts:?}");
        }
        assert_eq!(f, folds(&rows, 5, false, 7), "seeded");
        assert_ne!(f, folds(&rows, 5, false, 8));
        let g = folds(&rows, 5, true, 7);
        for a in 0..60 {
            for b in 0..60 {
                if rows[a].benchmark == rows[b].benchmark || rows[a].src == rows[b].src {
                    assert_eq!(g[a], g[b], "rows {a} and {b} share a kernel");
                }
            }
        }
        assert_eq!(g[0], g[1]);
        // 11 groups over 5 folds: none empty, sizes within one group's.
        let sizes: Vec<usize> = (0..5).map(|k| g.iter().filter(|&&f| f == k).count()).collect();
        assert!(sizes.iter().all(|&n| n > 0) && sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 10, "{sizes:?}");
    }

    /// Transfer copies the source's embedding rows (its vocabulary a
    /// prefix of the target's), its message passing and readout, and
    /// leaves what it lacks (new rows, a state pooling) as initialised.
    #[test]
    fn transfer_copies_what_matches_and_keeps_the_rest() {
        let other = GraphHead { aux: vec!["x".into(), "y".into()], aux_hidden: 4, pool: Pool::Mean, join: Default::default() };
        let from = Ggnn::new(&Hyper { graph: Some(other), ..Hyper::spec(3) }, Device::Cpu);
        let head = GraphHead { aux: vec!["a".into()], aux_hidden: 4, pool: Pool::Gated, join: Default::default() };
        let to = Ggnn::new(&Hyper { graph: Some(head), ..Hyper::spec(5) }, Device::Cpu);
        let before: HashMap<&str, Tensor> = to.named_parameters().into_iter().map(|(n, t)| (n, t.copy())).collect();
        let copied = transfer(&from, &to);
        for name in ["embedding.weight", "messages.weight", "gate.weight", "gru.weight_ih", "gru.bias_hh", "readout.gate.weight"] {
            assert!(copied.contains(&name), "{name}: {copied:?}");
        }
        // Same name and shape only: two auxiliary inputs' normalisation is
        // not one's, while the hidden layer's bias (4 wide in both) is.
        assert!(!copied.iter().any(|n| n.starts_with("pool.")), "{copied:?}");
        assert!(!copied.contains(&"aux.norm.weight") && !copied.contains(&"aux.hidden.weight"), "{copied:?}");
        assert!(copied.contains(&"aux.hidden.bias"), "{copied:?}");
        let get = |m: &Ggnn, name: &str| m.named_parameters().into_iter().find(|(n, _)| *n == name).unwrap().1.copy();
        let (e_from, e_to) = (get(&from, "embedding.weight"), get(&to, "embedding.weight"));
        assert!(e_to.narrow(0, 0, 3).equal(&e_from));
        assert!(e_to.narrow(0, 3, 2).equal(&before["embedding.weight"].narrow(0, 3, 2)), "new rows keep their initialisation");
        assert!(get(&to, "messages.weight").equal(&get(&from, "messages.weight")));
        assert!(get(&to, "pool.gate.weight").equal(&before["pool.gate.weight"]));
    }

    #[test]
    fn the_opt_level_replaces_the_defaults_and_a_bundle_keeps_its_own() {
        assert_eq!(clang_flags("O1").unwrap(), CLANG_FLAGS);
        let o3 = clang_flags("-O3").unwrap();
        assert!(o3.contains(&"-O3") && !o3.contains(&"-O1") && o3.len() == CLANG_FLAGS.len(), "{o3:?}");
        assert!(clang_flags("O4").unwrap_err().to_string().contains("'O4'"));
        // The shipped bundle records -O1; one trained at -O2 compiles at -O2.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/devmap-amd");
        let mut config = programl_infer::bundle::read_config(&root).unwrap();
        assert_eq!(bundle_flags(&config), CLANG_FLAGS);
        config.source.as_mut().unwrap().flags = clang_flags("O2").unwrap().iter().map(|f| f.to_string()).collect();
        assert_eq!(bundle_flags(&config), clang_flags("O2").unwrap());
        config.source = None;
        assert_eq!(bundle_flags(&config), CLANG_FLAGS, "a bundle without a record: the default");
    }

    #[test]
    fn protocol_lists_default_to_the_contracts_two() {
        use Protocol::*;
        assert_eq!(protocols(None).unwrap(), [Stratified, Grouped]);
        assert_eq!(protocols(Some("all")).unwrap(), [Stratified, Grouped, Perfograph]);
        assert_eq!(protocols(Some("perfograph, stratified,perfograph")).unwrap(), [Perfograph, Stratified]);
        assert!(protocols(Some("random")).unwrap_err().to_string().contains("'random'"));
        assert!(protocols(Some(",")).is_err());
    }

    #[test]
    fn perfograph_splits_are_ten_random_67_row_test_sets() {
        let rows: Vec<Row> = (0..680).map(|i| row(&format!("s-b{}-k", i % 256), "x", i % 3 == 0)).collect();
        let sets = splits(&rows, Protocol::Perfograph, 10, 0);
        assert_eq!(sets.len(), PERFOGRAPH_SETS);
        for s in &sets {
            assert_eq!(s.test.len(), 67);
            assert_eq!(s.train.len(), 680 - 67);
            let mut all: Vec<usize> = s.train.iter().chain(&s.test).copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..680).collect::<Vec<_>>(), "train and test partition the rows");
        }
        assert_ne!(sets[0].test, sets[1].test, "each set is drawn anew");
        assert_eq!(splits(&rows, Protocol::Perfograph, 10, 0)[3].test, sets[3].test, "seeded");
        // The folds: every row tested once.
        let folds = splits(&rows, Protocol::Stratified, 10, 0);
        let mut tested: Vec<usize> = folds.iter().flat_map(|s| s.test.iter().copied()).collect();
        tested.sort_unstable();
        assert_eq!(tested, (0..680).collect::<Vec<_>>());
    }
}

/// `programl-train eval` of a device-mapping bundle on a DevMap CSV (the
/// dataset's columns: benchmark, dataset, transfer, wgsize, oracle, src):
/// every row's kernel graph from the input the bundle was trained on
/// (`source.input`; the programs' sources, `gpgpu-sources.tar.xz` or
/// `gpgpu/`, and NCC's archive are read beside the CSV; a bundle without a
/// record used the `src` column, with the same cache and repairs), run
/// through the torch-free CPU inference with the
/// row's transfer and work-group size, the decision against the oracle. A
/// kernel that does not compile counts as the wrong device, as in the
/// cross-validation. Keys: `error`, `accuracy`, `rows`, `rows_failed`,
/// `precision`/`recall`/`f1` of the GPU class, and `static_error` (always
/// the CSV's majority device).
pub fn eval_csv(model: &programl_infer::Model, opts: &programl_infer::Options, csv: &Path, json: bool) -> Result<()> {
    let rows = read_rows(csv)?;
    let head = model.config.hyper.graph.as_ref().with_context(|| format!("{}: not a graph-level bundle", model.dir.display()))?;
    if !head.aux.is_empty() && head.aux != ["transfer", "wgsize"] {
        bail!("{}: auxiliary inputs {:?}; a DevMap CSV gives transfer and wgsize", model.dir.display(), head.aux);
    }
    let cache = programl::fsutil::cache_dir().join("devmap");
    // The input the bundle was trained on (one without a record: the CSV's
    // `src` column, the only input before there were others); the
    // programs' sources are read beside the CSV.
    let dir = csv.parent().unwrap_or(Path::new("."));
    let input: Input = match model.config.source.as_ref().and_then(|s| s.input.as_deref()) {
        None => Input::Csv,
        Some(name) => name.parse().with_context(|| format!("{}: source.input", model.dir.display()))?,
    };
    let kernels = match input {
        Input::Sources => {
            let root = sources::sources_root(dir, &cache)?;
            Kernels::from_sources(
                &rows,
                &sources::Builds::shipped()?,
                &root,
                &cache.join("sources"),
                &clang(),
                &bundle_flags(&model.config),
                json,
            )?
        }
        Input::Csv => Kernels::build(&rows, &cache, json)?,
        Input::Ncc => Kernels::from_ncc(&rows, &ncc::ir_dir(dir, &cache)?)?,
    };
    let examples: Vec<Example<'_>> = rows
        .iter()
        .enumerate()
        .map(|(r, row)| Example {
            name: format!("{}:{}", csv.display(), r + 2),
            graph: kernels.graphs[kernels.row_kernel[r]].as_ref(),
            aux: Some([row.transfer as f32, row.wgsize as f32]),
            gpu: row.gpu,
        })
        .collect();
    let mut figures = score(model, opts, &examples)?;
    figures["data"] = csv.display().to_string().into();
    figures["input"] = input.name().into();
    figures["kernels"] = kernels.graphs.len().into();
    figures["kernel_failures"] = serde_json::to_value(&kernels.failures)?;
    print_eval(model, &figures, json);
    Ok(())
}

/// One example of a device-mapping eval: its graph (`None`: it did not
/// compile), its auxiliary inputs where known, its label.
pub struct Example<'g> {
    pub name: String,
    pub graph: Option<&'g ProgramGraph>,
    pub aux: Option<[f32; 2]>,
    pub gpu: bool,
}

/// Every example through the torch-free CPU inference; an example without
/// a graph counts as the wrong device. The figures' keys: `task`,
/// `rows`, `rows_failed`, `error`, `accuracy`, `static_error` (always the
/// examples' majority device), `precision`, `recall`, `f1`.
fn score(model: &programl_infer::Model, opts: &programl_infer::Options, examples: &[Example<'_>]) -> Result<serde_json::Value> {
    let head = model.config.hyper.graph.as_ref().with_context(|| format!("{}: not a graph-level bundle", model.dir.display()))?;
    let gpu_class =
        model.config.classes.iter().position(|c| c == "gpu").with_context(|| format!("{}: no 'gpu' class", model.dir.display()))?;
    let mut confusion = Confusion::default();
    let (mut errors, mut failed) = (0usize, 0usize);
    let n = examples.len();
    let majority_gpu = 2 * examples.iter().filter(|e| e.gpu).count() > n;
    let static_errors = examples.iter().filter(|e| e.gpu != majority_gpu).count();
    let mut inputs: HashMap<*const ProgramGraph, GraphInput> = HashMap::new();
    for e in examples {
        let predicted = match e.graph {
            None => {
                failed += 1;
                !e.gpu
            }
            Some(graph) => {
                let key = graph as *const ProgramGraph;
                if !inputs.contains_key(&key) {
                    inputs.insert(key, GraphInput::new(graph, &model.vocabulary).map_err(|err| anyhow::anyhow!("{}: {err}", e.name))?);
                }
                let batch = Batch::from_samples(&[Sample { graph: &inputs[&key], root: None, positives: None }]).expect("a valid input");
                let aux = match (head.aux.is_empty(), &e.aux) {
                    (true, _) => None,
                    (false, Some(a)) => Some(&a[..]),
                    (false, None) => bail!("{}: {} needs the auxiliary inputs {:?}", e.name, model.dir.display(), head.aux),
                };
                let out = model.graph_probabilities(&batch, aux, opts).map_err(|err| anyhow::anyhow!("{}: {err}", model.dir.display()))?;
                out.probabilities[gpu_class] >= 0.5
            }
        };
        confusion.record(predicted, e.gpu);
        errors += (predicted != e.gpu) as usize;
    }
    let d = n.max(1) as f64;
    Ok(serde_json::json!({
        "task": model.config.task, "rows": n, "rows_failed": failed,
        "error": errors as f64 / d, "accuracy": 1.0 - errors as f64 / d, "static_error": static_errors as f64 / d,
        "precision": confusion.precision(), "recall": confusion.recall(), "f1": confusion.f1(),
    }))
}

fn print_eval(model: &programl_infer::Model, f: &serde_json::Value, json: bool) {
    if json {
        println!("{f}");
        return;
    }
    let pct = |k: &str| 100.0 * f[k].as_f64().unwrap_or(f64::NAN);
    let num = |k: &str| f[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{}: {} on {} rows ({} input, {} kernels, {} rows failed to compile): error {:.1}% (static mapping {:.1}%), GPU precision {:.3} recall {:.3} F1 {:.3}",
        model.dir.display(),
        model.config.task,
        f["rows"],
        f["input"].as_str().unwrap_or("?"),
        f["kernels"],
        f["rows_failed"],
        pct("error"),
        pct("static_error"),
        num("precision"),
        num("recall"),
        num("f1")
    );
}

/// `programl-train eval` of a device-mapping bundle on a directory of
/// OpenCL files labelled by their subdirectory, `DIR/cpu/*.cl` and
/// `DIR/gpu/*.cl`: each file compiled as `devmap` compiles the programs'
/// sources (from its own directory, `-I.`), each of its kernels an example
/// with its file's label and its own graph (the kernel and its callees).
/// There are no transfer or work-group sizes, so the bundle must be one
/// without auxiliary inputs (a `noaux/` bundle: `eval` passes a bundle's
/// own `noaux/` where it has one).
pub fn eval_cl_dir(model: &programl_infer::Model, opts: &programl_infer::Options, dir: &Path, json: bool) -> Result<()> {
    let head = model.config.hyper.graph.as_ref().with_context(|| format!("{}: not a graph-level bundle", model.dir.display()))?;
    if !head.aux.is_empty() {
        bail!(
            "{}: needs the auxiliary inputs {:?}, which a directory of kernels does not give; use a bundle without them (its noaux/) or a DevMap CSV",
            model.dir.display(),
            head.aux
        );
    }
    let cache = programl::fsutil::cache_dir().join("devmap").join("sources");
    let mut files = Vec::new();
    for (label, gpu) in [("cpu", false), ("gpu", true)] {
        let sub = dir.join(label);
        let Ok(entries) = std::fs::read_dir(&sub) else { continue };
        // A name that is not UTF-8 cannot go into the compile's cache key
        // (sources::Unit): such a file is a failure by that cause, by name.
        let mut names: Vec<(String, bool)> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n.as_encoded_bytes().ends_with(b".cl"))
            .map(|n| (n.to_string_lossy().into_owned(), n.to_str().is_some()))
            .collect();
        names.sort();
        files.extend(names.into_iter().map(|(n, utf8)| (label, n, gpu, utf8)));
    }
    if files.is_empty() {
        bail!("{}: no DIR/cpu/*.cl or DIR/gpu/*.cl files", dir.display());
    }
    let clang = clang();
    let mut graphs: Vec<(String, Option<ProgramGraph>, bool)> = Vec::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    for (label, file, gpu, utf8) in &files {
        let name = format!("{label}/{file}");
        if !utf8 {
            *failures.entry("file name is not UTF-8".into()).or_default() += 1;
            graphs.push((name, None, *gpu));
            continue;
        }
        let unit = sources::Unit {
            dir: label.to_string(),
            file: file.clone(),
            options: vec!["-I.".into()],
            embedded: false,
            kernel: String::new(),
        };
        match sources::module_graph(&unit, dir, &cache, &clang, &bundle_flags(&model.config))? {
            Err(cause) => {
                *failures.entry(cause).or_default() += 1;
                graphs.push((name, None, *gpu));
            }
            // Compiled, and nothing to map to a device: counted, not a row
            // (a file that does not compile is one row, its kernels unknown).
            Ok((_, kernels)) if kernels.is_empty() => {
                *failures.entry("no kernel in the file".into()).or_default() += 1;
            }
            Ok((graph, kernels)) => {
                for k in &kernels {
                    let sub = sources::kernel_subgraph(&graph, k, &kernels);
                    if sub.is_none() {
                        *failures.entry("kernel not in its module's graph".into()).or_default() += 1;
                    }
                    graphs.push((format!("{name}:{k}"), sub, *gpu));
                }
            }
        }
    }
    // Every file compiled to a module without a kernel: nothing to score
    // (an accuracy over no kernels would read as a perfect one).
    if graphs.is_empty() {
        let causes: Vec<String> = failures.iter().map(|(cause, n)| format!("{n} {cause}")).collect();
        bail!("{}: no kernel to evaluate in its {} .cl files ({})", dir.display(), files.len(), causes.join(", "));
    }
    let examples: Vec<Example<'_>> =
        graphs.iter().map(|(name, g, gpu)| Example { name: name.clone(), graph: g.as_ref(), aux: None, gpu: *gpu }).collect();
    let mut figures = score(model, opts, &examples)?;
    figures["data"] = dir.display().to_string().into();
    figures["input"] = "directory".into();
    figures["files"] = files.len().into();
    figures["kernels"] = graphs.len().into();
    figures["kernel_failures"] = serde_json::to_value(&failures)?;
    print_eval(model, &figures, json);
    Ok(())
}
