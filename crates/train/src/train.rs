//! `programl-train train`: the training loop, its checkpoints and its log.
//!
//! The run directory:
//!
//! ```text
//! RUN/
//!   vocabulary.json   the vocabulary, built from the train split at the first start
//!   checkpoint/       state.json, weights.safetensors, optimizer.safetensors (replaced whole)
//!   model/            the best model so far by validation F1: a bundle
//!   candidate/        adaptive depth: the model last validated, as a bundle
//!   log.csv           one row per training-loss window and per validation
//!   curves.png        loss and validation F1 against examples seen
//! ```
//!
//! Determinism: the example order of epoch `e` is
//! `permutation(n, mix(seed ^ e))`, batches are the core's greedy plan over
//! it, dropout is reseeded from (seed, batch number) before every batch, and
//! validations happen at fixed example counts. The checkpoint holds
//! everything else (weights, AdamW moments, the position in the epoch, the
//! log), so a run killed at any point and started again with the same
//! command continues exactly where its last checkpoint left it: with an
//! example budget and a fixed thread count, the final model is bit for bit
//! the one an uninterrupted run makes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use programl::analysis::Task;
use programl::batch::{permutation, plan};
use programl::hash::mix;
use programl::vocab::Vocabulary;
use programl_dataset::{Dataset, Split, Subset};
use programl_infer::config::Stop;
use programl_model::bundle::{self, Bundle, Config, Head, Provenance};
use programl_model::{Aggregation, Ggnn, Hyper, Prepared, Until};
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use crate::checkpoint::Checkpoint;
use crate::data::Examples;
use crate::engine::{evaluate, evaluate_with, until_step, Evaluation, Predictor};
use crate::optim::AdamW;

/// A bound on a run: wall time or examples, cumulative across resumes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Budget {
    Seconds(f64),
    Examples(u64),
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Budget, String> {
        let s = s.trim();
        let (num, mult) = if let Some(n) = s.strip_suffix('h') {
            (n, 3600.0)
        } else if let Some(n) = s.strip_suffix('m') {
            (n, 60.0)
        } else if let Some(n) = s.strip_suffix('s') {
            (n, 1.0)
        } else {
            return s
                .replace('_', "")
                .parse::<u64>()
                .map(Budget::Examples)
                .map_err(|_| format!("budget '{s}': expected a duration (45m, 2h, 90s) or an example count"));
        };
        num.parse::<f64>().ok().filter(|x| *x > 0.0).map(|x| Budget::Seconds(x * mult)).ok_or_else(|| format!("budget '{s}': bad duration"))
    }
}

/// What `train` is asked to do. Everything but `budget`, `threads` and the
/// checkpoint interval must match on resume.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
pub struct TrainArgs {
    /// reachability, dominance, datadep, liveness or subexpressions.
    #[arg(long)]
    pub task: String,
    /// A dataset store (`programl dataset build`). Not part of the run's
    /// identity: the examples' fingerprint is, so a store rebuilt elsewhere
    /// (another path, another machine) resumes the run.
    #[serde(skip)]
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 2.5e-4, value_parser = learning_rate)]
    pub lr: f64,
    /// Warm-up: the rate rises linearly from 0 to --lr over this many
    /// training examples (0: none, --lr from the first batch).
    #[arg(long, default_value_t = 0)]
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub warmup: u64,
    /// Cosine decay: after the warm-up, the rate falls from --lr along a
    /// half cosine to 0 over this many training examples, and stays at 0
    /// (give the run the same budget in examples). Absent: --lr throughout.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine_examples: Option<u64>,
    /// Start from this bundle's weights (and vocabulary) instead of a
    /// random initialisation, with fresh AdamW moments: continues a model
    /// at another learning rate. Read at the first start only (a resumed
    /// run continues from its checkpoint); the run validates it before
    /// training, so its `model/` is never worse on val than the bundle it
    /// started from.
    #[serde(skip)]
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// With --init: append the training split's node texts that the
    /// bundle's vocabulary lacks (C++'s `invoke`, `landingpad`, `resume`
    /// after a C corpus), with embedding rows of their own; the bundle's
    /// ids and rows are kept. Read at the first start only.
    #[serde(skip)]
    #[arg(long, requires = "init")]
    pub extend_vocab: bool,
    /// Message-passing steps T.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(i64).range(1..=programl_infer::bundle::MAX_STEPS))]
    pub steps: i64,
    /// The examples trained and validated on, by the step count each
    /// needs: `ddf-30` (the paper's training set), `ddf-60`, `ddf-200` or
    /// `ddf` (every one).
    #[arg(long, default_value = "ddf-30")]
    #[serde(default = "ddf30", skip_serializing_if = "is_ddf30")]
    pub subset: String,
    /// Train only on the examples that need more than this many steps
    /// (validation keeps the subset's sample, so that selecting the best
    /// checkpoint still weighs every depth): a curriculum phase on the long
    /// tail, which is a few per cent of the examples.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longer_than: Option<u32>,
    /// Adaptive depth: the bundle's stopping rule (`hyper.stop`) stops a
    /// graph's message passing at the first step that moves no entry of
    /// its states by more than this. Training then runs each batch for its
    /// examples' recorded step counts plus up to `--extra-steps` more
    /// (batches grouped by step count), adds the settling term
    /// (`--stability`), and validates with the rule on the torch-free
    /// inference the pass runs.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_tolerance: Option<f64>,
    /// Adaptive depth: the cap on steps (`hyper.stop.max_steps`). Training
    /// skips (and counts) examples that need more.
    #[arg(long, default_value_t = 400)]
    #[serde(default = "default_cap", skip_serializing_if = "is_default_cap")]
    pub stop_max_steps: i64,
    /// Adaptive depth: a batch runs its largest step count plus a number
    /// of steps drawn from 0..=this (seeded by the batch), so that the
    /// answer must hold, and the states rest, past the depth it needs.
    #[arg(long, default_value_t = 10)]
    #[serde(default = "default_extra", skip_serializing_if = "is_default_extra")]
    pub extra_steps: i64,
    /// Adaptive depth: the weight of the settling term, the mean of
    /// `(h_T − h_{T−1})²` over the batch's state entries.
    #[arg(long, default_value_t = 1.0)]
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub stability: f64,
    /// Adaptive depth: train as the rule infers. Each batch runs its
    /// examples' step count plus the drawn margin, then on until no state
    /// entry of the batch moves by more than the tolerance (or the cap),
    /// and the loss is taken there; without it, at the margin's end.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_settled: bool,
    /// Scale each batch's gradients down to this global L2 norm where they
    /// exceed it (0: never). For adaptive depth, whose batches
    /// back-propagate through hundreds of steps.
    #[arg(long, default_value_t = 0.0)]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clip_norm: f64,
    /// Back-propagate through a checkpointed tape: keep the state entering
    /// every N-step segment and recompute each segment's record in the
    /// backward. The same gradients for a second forward, in memory for
    /// T/N states and N records instead of T records (a record is about
    /// 1 KiB a node): for adaptive depth whose examples need thousands of
    /// steps. Not with --state-dropout.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tape_segment: Option<usize>,
    /// Dropout on the GRU state at every step in training. Upstream's
    /// DeepDataFlow runs set it to 0 (`tasks/dataflow/flags/programl.txt`,
    /// `--graph_state_dropout=0.0`; 0.2 is only its model's default, which
    /// `bench` keeps): a label that must survive T dropouts on its way from
    /// the root is learned far more slowly.
    #[arg(long, default_value_t = 0.0)]
    #[serde(default)]
    pub state_dropout: f64,
    /// How a node combines its incoming messages: `mean` (SPEC.md §3's,
    /// reachability's bundles), `sum`, the channel-wise `max`, or
    /// `mean-max`, the mean over forward edges plus the max over backward
    /// ones (`hyper.aggregation`; every precision runs each).
    /// With `--init`, the bundle's weights start a model of this kind.
    /// Absent: the `--init` bundle's own (a max bundle fine-tunes as a
    /// max), a resumed run's own, else the mean.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "mean_or_absent")]
    pub aggregation: Option<Aggregation>,
    /// The state width (`hyper.hidden`): an even number of entries, the
    /// text embedding's then the root selector's 2. SPEC.md §3's 34 trains
    /// on the CPU's fused loops, any other width on libtorch's operations.
    /// With `--init` of a narrower bundle (34 to 66, 98, ...: the text
    /// widths a whole multiple), its weights carry into the wider state
    /// (`programl_model::widen`), the new channels' starting weights being
    /// the fresh initialisation scaled by 0.01. Absent: the `--init`
    /// bundle's width, a resumed run's own, else 34.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<i64>,
    /// Weight of the positive class in the training loss (the negative
    /// class weighs 1; the loss is averaged over the weights). Positives
    /// are rare (subexpressions: 0.2% of nodes, datadep 1.1%), and an
    /// unweighted loss is minimised early by predicting none.
    #[arg(long, default_value_t = 1.0)]
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub pos_weight: f64,
    /// Which nodes the training loss averages over: `all` of the batch's
    /// (every shipped bundle's), or only the `labelled` ones, the task's
    /// node kind (instructions; variables for liveness), which the F1 is
    /// measured on: the others are always negative and easy.
    #[arg(long, value_enum, default_value_t = LossNodes::All)]
    #[serde(default, skip_serializing_if = "LossNodes::is_all")]
    pub loss_nodes: LossNodes,
    /// The loss weight of the negatives that read one of the root's
    /// operands (an instruction with a data edge from a node that has a
    /// data edge into the root): subexpressions' false positives are such
    /// look-alikes, a small share of its negatives. 1: weighed as the
    /// other nodes.
    #[arg(long, default_value_t = 1.0)]
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub near_weight: f64,
    /// Nodes per batch (a larger graph alone).
    #[arg(long, default_value_t = 10_000)]
    pub batch_nodes: usize,
    /// Training skips (and counts) examples whose graph has more nodes:
    /// bounds training memory (autograd keeps T steps of state).
    #[arg(long, default_value_t = 60_000)]
    pub max_nodes: usize,
    /// Validation examples (val split, DDF-30, chosen by seed).
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
    pub val_examples: usize,
    /// Validate every this many training examples.
    #[arg(long, default_value_t = 20_000)]
    pub val_every: u64,
    /// Wall time (45m, 2h, 90s) or examples (2000000), cumulative over resumes.
    #[serde(skip)]
    #[arg(long)]
    pub budget: Option<Budget>,
    /// Seconds between checkpoints (also at every validation).
    #[serde(skip)]
    #[arg(long = "checkpoint-every", default_value_t = 120.0)]
    pub checkpoint_every_s: f64,
    /// libtorch threads in use (set from --threads, not a flag of its own).
    #[serde(skip)]
    #[arg(skip)]
    pub threads: i32,
    #[serde(skip)]
    #[arg(long)]
    pub quiet: bool,
}

/// `train --loss-nodes`: the nodes the training loss is averaged over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LossNodes {
    /// Every node of the batch (runs recorded before the flag).
    #[default]
    All,
    /// Only the nodes that carry the task's label ([`crate::data::Graph::labelled`]).
    Labelled,
}

impl LossNodes {
    pub fn is_all(&self) -> bool {
        *self == LossNodes::All
    }
}

/// `--pos-weight`'s default, also for runs recorded before it existed.
fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

fn ddf30() -> String {
    "ddf-30".into()
}

fn is_ddf30(s: &String) -> bool {
    s == "ddf-30"
}

fn default_cap() -> i64 {
    400
}

fn is_default_cap(x: &i64) -> bool {
    *x == default_cap()
}

fn default_extra() -> i64 {
    10
}

fn is_default_extra(x: &i64) -> bool {
    *x == default_extra()
}

impl TrainArgs {
    /// The learning rate after `examples` training examples: `--warmup`'s
    /// linear rise, then `--cosine-examples`' half cosine to 0 (or --lr).
    pub fn rate(&self, examples: u64) -> f64 {
        if examples < self.warmup {
            return self.lr * (examples + 1) as f64 / self.warmup as f64;
        }
        match self.cosine_examples {
            None => self.lr,
            Some(span) => {
                let done = ((examples - self.warmup) as f64 / span.max(1) as f64).min(1.0);
                crate::graphtask::half_cosine(self.lr, done)
            }
        }
    }

    /// The stopping rule the bundle gets (adaptive depth), checked.
    pub fn stop(&self) -> Result<Option<Stop>> {
        let Some(tolerance) = self.stop_tolerance else { return Ok(None) };
        if !(tolerance.is_finite() && tolerance >= 0.0) {
            bail!("--stop-tolerance {tolerance} is not a finite value >= 0");
        }
        if !(1..=programl_infer::bundle::MAX_STEPS).contains(&self.stop_max_steps) {
            bail!("--stop-max-steps {} is outside 1..={}", self.stop_max_steps, programl_infer::bundle::MAX_STEPS);
        }
        if self.extra_steps < 0 {
            bail!("--extra-steps {} is negative", self.extra_steps);
        }
        if !(self.stability.is_finite() && self.stability >= 0.0) {
            bail!("--stability {} is not a finite weight >= 0", self.stability);
        }
        Ok(Some(Stop { tolerance, max_steps: self.stop_max_steps }))
    }

    /// The step count a batch of adaptive training runs: its examples'
    /// largest, plus 0..=`extra_steps` drawn from the run's seed and the
    /// batch's number, within the cap.
    fn adaptive_steps(&self, needed: u32, batch_number: u64) -> i64 {
        let extra = mix(self.seed ^ mix(batch_number ^ 0x5e77_1e00)) % (self.extra_steps as u64 + 1);
        (i64::from(needed.max(1)) + extra as i64).min(self.stop_max_steps)
    }
}

/// One line of `log.csv`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// `train` (mean loss over the window) or `val`.
    pub kind: String,
    pub examples: u64,
    pub wall_s: f64,
    pub loss: f64,
    /// Validation rows only.
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    pub f1: Option<f64>,
    /// Validation rows of adaptive depth: the mean steps run per example,
    /// and the mean its analysis needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_run: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_needed: Option<f64>,
}

/// `checkpoint/state.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct State {
    version: u32,
    args: TrainArgs,
    data_hash: String,
    epoch: u64,
    /// Batches of the current epoch already trained.
    batch_in_epoch: u64,
    batches_total: u64,
    examples_seen: u64,
    wall_s: f64,
    adam_step: i64,
    best_f1: f64,
    best_examples: u64,
    next_val: u64,
    /// Training-loss window not yet logged.
    window_loss: f64,
    window_batches: u64,
    history: Vec<Row>,
    /// Examples and training seconds of the bundle given to `--init`,
    /// added to this run's own in the bundles it writes (their
    /// provenance counts the model's whole training).
    #[serde(default)]
    init: Option<InitRecord>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct InitRecord {
    /// The bundle directory as given.
    from: String,
    examples: u64,
    wall_s: f64,
}

const STATE_VERSION: u32 = 1;
const LOSS_WINDOW: u64 = 20;

/// The training data's identity: the fingerprints of what the model sees
/// of the train and val examples ([`Examples::fingerprint`]), so a store
/// rebuilt from the same IR on another machine resumes the same run, and any
/// change to the examples is refused.
pub fn data_hash(train: &Examples, val: &Examples) -> String {
    format!("{:016x}", mix(train.fingerprint() ^ mix(val.fingerprint())))
}

pub fn parse_task(name: &str) -> Result<Task> {
    Task::parse(name).with_context(|| format!("unknown task '{name}' (reachability, dominance, datadep, liveness, subexpressions)"))
}

/// A run's recorded arguments leave the mean out, as before the flag was
/// optional, so runs recorded then resume.
fn mean_or_absent(a: &Option<Aggregation>) -> bool {
    a.map_or(true, |a| a.is_mean())
}

/// `--hidden H` of any trainer: an even state width the bundle format takes.
/// `--lr`: a finite rate above 0 (NaN or infinity would train a model of
/// NaNs, and clap reads `-1` as a flag).
pub fn learning_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(lr) if lr.is_finite() && lr > 0.0 => Ok(lr),
        Ok(lr) => Err(format!("{lr} is not a finite learning rate above 0")),
        Err(e) => Err(format!("'{text}': {e}")),
    }
}

/// A count of at least 1 (`--val-examples`: an F1 over no examples would
/// read as a perfect 1.0).
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0: at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("'{text}': {e}")),
    }
}

pub fn check_hidden(hidden: i64) -> Result<()> {
    if !(4..=programl_infer::bundle::MAX_HIDDEN).contains(&hidden) || hidden % 2 != 0 {
        bail!("--hidden {hidden} is not an even width in 4..={}", programl_infer::bundle::MAX_HIDDEN);
    }
    Ok(())
}

/// What scales a widened model's new weights (`--hidden` above an
/// `--init` bundle's width): small enough that the model starts within a
/// rounding of the bundle's predictions, large enough to break the
/// symmetry that would keep the new channels at zero.
const WIDEN_NOISE: f64 = 0.01;

pub fn run(args: &TrainArgs, out: &Path, device: Device) -> Result<()> {
    let started = Instant::now();
    let task = parse_task(&args.task)?;
    let dataset = Dataset::open(&args.data).with_context(|| format!("{}: cannot open the dataset", args.data.display()))?;
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create the run directory", out.display()))?;
    let say = |s: &str| {
        if !args.quiet {
            eprintln!("{s}");
        }
    };

    // The vocabulary: fixed at the first start.
    let vocab_path = out.join(bundle::VOCABULARY_FILE);
    let _lock = crate::checkpoint::lock_run(out)?;
    crate::checkpoint::recover_run(out)?;
    let fresh = !out.join("checkpoint").join("state.json").exists();
    let init = match (&args.init, fresh) {
        (Some(dir), true) => {
            let b = Bundle::load_to_train(dir, device).with_context(|| format!("--init {}", dir.display()))?;
            if b.config.task != task.to_string() || b.config.head != Head::Node {
                bail!("--init {}: a {} bundle, not {task}", dir.display(), b.config.task);
            }
            Some(b)
        }
        _ => None,
    };
    let saved: Option<State> = if fresh { None } else { Some(Checkpoint::state_of(out, STATE_VERSION)?) };
    // `--aggregation` absent: the --init bundle's, or a resumed run's own,
    // else the mean. Fine-tuning a max bundle without the flag must not
    // silently train its weights as a mean's.
    let resolved;
    let args = if args.aggregation.is_some() {
        args
    } else {
        let inherited = match (&init, &saved) {
            (Some(b), _) => Some(b.config.hyper.aggregation),
            (None, Some(s)) => s.args.aggregation,
            (None, None) => None,
        };
        if let (Some(_), Some(a)) = (&init, inherited.filter(|a| !a.is_mean())) {
            say(&format!("aggregation: {} (the --init bundle's; --aggregation sets another)", a.name()));
        }
        resolved = TrainArgs { aggregation: inherited, ..args.clone() };
        &resolved
    };
    // `--hidden` absent: the --init bundle's width, or a resumed run's own
    // (recorded only where it is not 34, so that 34-wide runs resume as
    // before the flag existed).
    let widened;
    let args = match (args.hidden, &init, &saved) {
        (None, Some(b), _) if b.config.hyper.hidden != programl_model::HIDDEN => {
            widened = TrainArgs { hidden: Some(b.config.hyper.hidden), ..args.clone() };
            &widened
        }
        (None, None, Some(s)) if s.args.hidden.is_some() => {
            widened = TrainArgs { hidden: s.args.hidden, ..args.clone() };
            &widened
        }
        _ => args,
    };
    let vocab = if let Some(b) = &init {
        let v = if args.extend_vocab {
            let (store, _) = programl_dataset::vocab::build(&dataset, 1, None)?;
            let v = b.vocabulary.extended(&store);
            say(&format!(
                "vocabulary: {} ids from {}, {} added from the training split",
                b.vocabulary.len(),
                b.dir.display(),
                v.len() - b.vocabulary.len()
            ));
            v
        } else {
            b.vocabulary.clone()
        };
        v.save(&vocab_path)?;
        v
    } else if vocab_path.exists() {
        Vocabulary::load(&vocab_path)?
    } else {
        let (v, _) = programl_dataset::vocab::build(&dataset, 1, None)?;
        v.save(&vocab_path)?;
        v
    };

    let subset =
        Subset::parse(&args.subset).with_context(|| format!("--subset '{}': expected ddf-30, ddf-60, ddf-200 or ddf", args.subset))?;
    let stop = args.stop()?;
    let train = Examples::from_dataset(&dataset, task, Split::Train, subset, &vocab)?;
    let cap = stop.as_ref().map_or(u32::MAX, |s| s.max_steps as u32);
    let kept: Vec<usize> = (0..train.examples.len()).filter(|&i| train.size(i) <= args.max_nodes).collect();
    let too_deep = kept.iter().filter(|&&i| train.examples[i].steps > cap).count();
    let kept: Vec<usize> = kept.into_iter().filter(|&i| train.examples[i].steps <= cap).collect();
    let skipped = train.examples.len() - kept.len() - too_deep;
    let (kept, short) = match args.longer_than {
        Some(n) => {
            let long: Vec<usize> = kept.iter().copied().filter(|&i| train.examples[i].steps > n).collect();
            let short = kept.len() - long.len();
            (long, short)
        }
        None => (kept, 0),
    };
    if train.examples.is_empty() {
        // Not a matter of --max-nodes: the split itself is empty.
        bail!(
            "{}: the training split holds no {task} {subset} example (its programs fell in val and test, or failed to build: `programl dataset stats` shows the splits)",
            args.data.display()
        );
    }
    if kept.is_empty() {
        let long = args.longer_than.map_or(String::new(), |n| format!(", needs more than {n} steps (--longer-than)"));
        bail!("{}: no {} {subset} training example has at most {} nodes{long}", args.data.display(), task, args.max_nodes);
    }
    let val = Examples::from_dataset(&dataset, task, Split::Val, subset, &vocab)?;
    let hash = data_hash(&train, &val);
    let corpus: Vec<String> = dataset.info().corpus.iter().map(|c| c.name()).collect();
    let mut val_ids = permutation(val.examples.len(), mix(args.seed ^ 0x7661_6c00));
    val_ids.truncate(args.val_examples);
    val_ids.sort_unstable();
    let kept_nodes: usize = kept.iter().map(|&i| train.size(i)).sum();
    say(&format!(
        "train: {task}, {} {subset} examples ({} graphs, {:.0} nodes per example), {skipped} skipped for more than --max-nodes {} nodes{}; val: {} examples; vocabulary {} ids",
        kept.len(),
        train.graphs.len(),
        kept_nodes as f64 / kept.len() as f64,
        args.max_nodes,
        match &stop {
            Some(s) => format!(", {too_deep} for needing more than --stop-max-steps {} steps", s.max_steps),
            None => String::new(),
        } + &args.longer_than.map_or(String::new(), |n| format!(", {short} for needing at most --longer-than {n}")),
        val_ids.len(),
        vocab.len()
    ));

    if !(0.0..1.0).contains(&args.state_dropout) {
        bail!("--state-dropout {} is not in [0, 1)", args.state_dropout);
    }
    if !(args.clip_norm.is_finite() && args.clip_norm >= 0.0) {
        bail!("--clip-norm {} is not a finite norm >= 0", args.clip_norm);
    }
    match args.tape_segment {
        Some(0) => bail!("--tape-segment 0: a segment holds at least one step"),
        Some(n) if args.state_dropout > 0.0 => {
            bail!("--tape-segment {n} with --state-dropout {}: a recomputed segment would draw new dropout masks", args.state_dropout)
        }
        _ => {}
    }
    if !(args.pos_weight.is_finite() && args.pos_weight > 0.0) {
        bail!("--pos-weight {} is not a positive number", args.pos_weight);
    }
    if !(args.near_weight.is_finite() && args.near_weight > 0.0) {
        bail!("--near-weight {} is not a positive number", args.near_weight);
    }
    let hidden = args.hidden.unwrap_or(programl_model::HIDDEN);
    check_hidden(hidden)?;
    let hyper = Hyper {
        steps: args.steps,
        state_dropout: args.state_dropout,
        aggregation: args.aggregation.unwrap_or_default(),
        hidden,
        ..Hyper::spec(vocab.len())
    };
    tch::manual_seed(mix(args.seed) as i64);
    let model = Ggnn::new(&hyper, device);
    let mut opt = AdamW::new(&model.parameters(), args.lr);
    let ckpt = Checkpoint::new(out, &model);
    if let Some(b) = &init {
        // A narrower bundle loads into a model of its own width, then
        // widens into this one.
        let from = b.config.hyper.hidden;
        let narrow = (from != hidden).then(|| Ggnn::new(&Hyper { hidden: from, ..hyper.clone() }, device));
        let into = narrow.as_ref().unwrap_or(&model);
        if args.extend_vocab {
            bundle::load_weights_grown(into, &b.dir.join(bundle::WEIGHTS_FILE)).with_context(|| format!("--init {}", b.dir.display()))?;
        } else {
            bundle::load_weights(into, &b.dir.join(bundle::WEIGHTS_FILE)).with_context(|| format!("--init {}", b.dir.display()))?;
        }
        if let Some(narrow) = &narrow {
            programl_model::widen(&model, narrow, WIDEN_NOISE).map_err(|e| anyhow!("--init {} --hidden {hidden}: {e}", b.dir.display()))?;
            say(&format!("state: {from} entries of {} widened to {hidden}", b.dir.display()));
        }
        if b.config.provenance.training_data_hash != hash {
            eprintln!(
                "warning: --init {}: trained on other examples (fingerprint {}, this run's {hash})",
                b.dir.display(),
                b.config.provenance.training_data_hash
            );
        }
    }
    let mut state = if let Some(s) = saved {
        // `--hidden` at its default is the run's width as much as no
        // `--hidden`: compared as one.
        let canonical = |mut v: serde_json::Value| {
            if let Some(o) = v.as_object_mut() {
                if o.get("hidden").and_then(serde_json::Value::as_i64) == Some(programl_model::HIDDEN) {
                    o.remove("hidden");
                }
            }
            v
        };
        let (then, now) = (canonical(serde_json::to_value(&s.args)?), canonical(serde_json::to_value(args)?));
        if then != now {
            // The arguments that differ, by name: then and now.
            let differ: Vec<String> = match (then.as_object(), now.as_object()) {
                (Some(a), Some(b)) => a
                    .keys()
                    .chain(b.keys().filter(|k| !a.contains_key(*k)))
                    .filter(|k| a.get(*k) != b.get(*k))
                    .map(|k| {
                        let shown = |v: Option<&serde_json::Value>| v.map_or_else(|| "unset".to_string(), ToString::to_string);
                        format!("{k}: {} then, {} now", shown(a.get(k)), shown(b.get(k)))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            bail!(
                "{}: this run was started with other arguments ({}); use another --out or the same arguments (those then, defaults left out: {})",
                out.display(),
                differ.join("; "),
                serde_json::to_string(&s.args)?
            );
        }
        if s.data_hash != hash {
            bail!(
                "{}: the training data changed since this run started (fingerprint {} then, {hash} now)",
                args.data.display(),
                s.data_hash
            );
        }
        ckpt.restore(&model, &mut opt, s.adam_step)?;
        say(&format!("resuming at {} examples ({:.0} s of training so far)", s.examples_seen, s.wall_s));
        s
    } else {
        State {
            version: STATE_VERSION,
            args: args.clone(),
            data_hash: hash.clone(),
            epoch: 0,
            batch_in_epoch: 0,
            batches_total: 0,
            examples_seen: 0,
            wall_s: 0.0,
            adam_step: 0,
            best_f1: -1.0,
            best_examples: 0,
            next_val: args.val_every,
            window_loss: 0.0,
            window_batches: 0,
            history: Vec::new(),
            init: init.as_ref().map(|b| InitRecord {
                from: b.dir.display().to_string(),
                examples: b.config.provenance.examples_seen,
                wall_s: b.config.provenance.wall_time_s,
            }),
        }
    };
    if let Some(b) = &init {
        say(&format!(
            "starting from {} ({} examples, {:.0} s of training) at lr {}",
            b.dir.display(),
            b.config.provenance.examples_seen,
            b.config.provenance.wall_time_s,
            args.lr
        ));
    }

    let session = Instant::now();
    let wall_before = state.wall_s;
    let wall = |_: &State| wall_before + session.elapsed().as_secs_f64();
    let exhausted = |s: &State| match args.budget {
        Some(Budget::Examples(n)) => s.examples_seen >= n,
        Some(Budget::Seconds(t)) => wall(s) >= t,
        None => false,
    };
    let bar = progress_bar(args, &state);
    let mut last_checkpoint = Instant::now();

    let checkpoint = |state: &mut State, model: &Ggnn, opt: &AdamW| -> Result<()> {
        state.wall_s = wall(state);
        state.adam_step = opt.step;
        ckpt.save(state, model, opt)?;
        write_log(out, &state.history)?;
        Ok(())
    };

    // The bundle's hyperparameters: the model's, with the stopping rule.
    let bundle_hyper = Hyper { stop: stop.clone(), ..hyper.clone() };
    let config_now = |state: &State| {
        let (base_examples, base_wall) = state.init.as_ref().map_or((0, 0.0), |i| (i.examples, i.wall_s));
        bundle_config(task, &bundle_hyper, &hash, &corpus, vocab.id("ptr") != 0, base_examples + state.examples_seen, base_wall + wall(state))
    };
    let validate = |state: &mut State, model: &Ggnn| -> Result<()> {
        let e = match &stop {
            None => evaluate(model, &val, &val_ids, args.steps, args.batch_nodes.max(1), |_| {}),
            Some(_) => validate_adaptive(&out.join("candidate"), &config_now(state), model, &vocab, &val, &val_ids, args)?,
        };
        // Diverged (the last step made the weights NaN or infinite): stop
        // before anything of this state is recorded, so that the bundle and
        // the checkpoint keep the last good one and the run can resume.
        if !e.loss.is_finite() {
            bail!(
                "the model diverged at {} examples (validation loss {}): stopping; the checkpoint and the bundle keep the last good state (a new run, in another --out, with a lower --lr or a --clip-norm avoids it)",
                state.examples_seen,
                e.loss
            );
        }
        let t = e.total;
        let (ran, needed) = e.steps.iter().fold((0, 0), |(r, n), &(a, b)| (r + a, n + b));
        let per_example = |x: u64| stop.as_ref().map(|_| x as f64 / e.examples.max(1) as f64);
        let (steps_run, steps_needed) = (per_example(ran), per_example(needed));
        state.history.push(Row {
            kind: "val".into(),
            examples: state.examples_seen,
            wall_s: wall(state),
            loss: e.loss,
            precision: Some(t.precision()),
            recall: Some(t.recall()),
            f1: Some(t.f1()),
            steps_run,
            steps_needed,
        });
        let depth = match (steps_run, steps_needed) {
            (Some(r), Some(n)) => format!(", steps run {r:.1} per example (needed {n:.1})"),
            _ => String::new(),
        };
        let line = format!(
            "val at {} examples: loss {:.4}, precision {:.4}, recall {:.4}, F1 {:.4} (best {:.4}){depth}",
            state.examples_seen,
            e.loss,
            t.precision(),
            t.recall(),
            t.f1(),
            state.best_f1.max(t.f1())
        );
        if t.f1() > state.best_f1 {
            state.best_f1 = t.f1();
            state.best_examples = state.examples_seen;
            Bundle::save(&out.join("model"), &config_now(state), model, &vocab)?;
        }
        if let Err(e) = crate::plot::curves(&out.join("curves.png"), &state.history, &format!("{task}")) {
            eprintln!("warning: {}: plot not drawn: {e}", out.join("curves.png").display());
        }
        bar.println(line);
        Ok(())
    };

    let _armed = crate::interrupt::armed();
    // A run started from a bundle first measures it: the bar to beat.
    if state.init.is_some() && state.history.is_empty() {
        validate(&mut state, &model)?;
        checkpoint(&mut state, &model, &opt)?;
    }
    let n = kept.len();
    'outer: while !exhausted(&state) {
        let mut order: Vec<usize> =
            permutation(n, mix(args.seed ^ state.epoch.wrapping_mul(0x9E37_79B9))).into_iter().map(|i| kept[i]).collect();
        if stop.is_some() {
            // Adaptive depth: a batch holds examples of like step counts
            // (it runs as many steps as its deepest one needs), and the
            // batches come in a shuffled order.
            order.sort_by_key(|&i| train.examples[i].steps);
        }
        let mut batches = plan(order.iter().map(|&i| train.size(i)), args.batch_nodes);
        if stop.is_some() {
            let shuffle = permutation(batches.len(), mix(args.seed ^ 0xba7c_4e00 ^ state.epoch.wrapping_mul(0x9E37_79B9)));
            batches = shuffle.into_iter().map(|k| batches[k].clone()).collect();
        }
        while (state.batch_in_epoch as usize) < batches.len() {
            if let Some(signal) = crate::interrupt::caught() {
                bar.suspend(|| crate::interrupt::saying(signal));
                checkpoint(&mut state, &model, &opt)?;
                bar.finish_and_clear();
                let at = format!("{} examples, {:.0} s of training", state.examples_seen, state.wall_s);
                return Err(crate::interrupt::Interrupted { signal, at }.into());
            }
            if exhausted(&state) {
                break 'outer;
            }
            let ids = &order[batches[state.batch_in_epoch as usize].clone()];
            let batch = train.batch(ids);
            let mut input = Prepared::new(&batch, &hyper, device);
            if args.near_weight != 1.0 {
                let mask = train.near_weighted_mask(ids, args.loss_nodes == LossNodes::Labelled, args.near_weight as f32);
                input.loss_weights = Some(Tensor::from_slice(&mask).to_device(device));
            } else if args.loss_nodes == LossNodes::Labelled {
                input.loss_weights = Some(Tensor::from_slice(&train.labelled_mask(ids)).to_device(device));
            }
            tch::manual_seed(mix(args.seed ^ mix(state.batches_total + 1)) as i64);
            let (steps, until, stability) = match &stop {
                Some(s) => {
                    let needed = ids.iter().map(|&i| train.examples[i].steps).max().unwrap_or(1);
                    let least = args.adaptive_steps(needed, state.batches_total + 1);
                    match args.until_settled {
                        true => (s.max_steps, Some(Until { tolerance: s.tolerance, min_steps: least }), args.stability),
                        false => (least, None, args.stability),
                    }
                }
                None => (args.steps, None, 0.0),
            };
            opt.lr = args.rate(state.examples_seen);
            let tape = args.tape_segment.map_or(programl_model::Tape::Full, programl_model::Tape::Segments);
            let (loss, _) = until_step(&model, &mut opt, &input, steps, until, tape, args.pos_weight, stability, args.clip_norm);
            if !loss.is_finite() {
                bail!("the training loss is {loss} at {} examples: stopping (checkpoint at the last good state)", state.examples_seen);
            }
            state.batch_in_epoch += 1;
            state.batches_total += 1;
            state.examples_seen += ids.len() as u64;
            state.window_loss += loss;
            state.window_batches += 1;
            if state.window_batches >= LOSS_WINDOW {
                state.history.push(Row {
                    kind: "train".into(),
                    examples: state.examples_seen,
                    wall_s: wall(&state),
                    loss: state.window_loss / state.window_batches as f64,
                    precision: None,
                    recall: None,
                    f1: None,
                    steps_run: None,
                    steps_needed: None,
                });
                bar.set_message(format!(
                    "loss {:.4}, best val F1 {:.4}",
                    state.window_loss / state.window_batches as f64,
                    state.best_f1.max(0.0)
                ));
                state.window_loss = 0.0;
                state.window_batches = 0;
            }
            match args.budget {
                Some(Budget::Seconds(_)) => bar.set_position(wall(&state) as u64),
                _ => bar.set_position(state.examples_seen),
            }
            if state.examples_seen >= state.next_val {
                state.next_val += args.val_every;
                validate(&mut state, &model)?;
                checkpoint(&mut state, &model, &opt)?;
                last_checkpoint = Instant::now();
            } else if last_checkpoint.elapsed().as_secs_f64() >= args.checkpoint_every_s {
                checkpoint(&mut state, &model, &opt)?;
                last_checkpoint = Instant::now();
            }
        }
        state.epoch += 1;
        state.batch_in_epoch = 0;
    }
    // A final validation unless the last batch just had one.
    if state.history.last().is_none_or(|r| r.kind != "val" || r.examples != state.examples_seen) {
        validate(&mut state, &model)?;
    }
    checkpoint(&mut state, &model, &opt)?;
    bar.finish_and_clear();
    if let Some(signal) = crate::interrupt::caught() {
        // Caught during the final validation: saved, and not done.
        let at = format!("{} examples, {:.0} s of training", state.examples_seen, state.wall_s);
        return Err(crate::interrupt::Interrupted { signal, at }.into());
    }
    say(&format!(
        "done: {} examples in {:.0} s of training ({:.0} s this session); best val F1 {:.4} at {} examples -> {}",
        state.examples_seen,
        state.wall_s,
        started.elapsed().as_secs_f64(),
        state.best_f1,
        state.best_examples,
        out.join("model").display()
    ));
    Ok(())
}

fn progress_bar(args: &TrainArgs, state: &State) -> indicatif::ProgressBar {
    let (len, unit) = match args.budget {
        Some(Budget::Seconds(t)) => (t as u64, "s"),
        Some(Budget::Examples(n)) => (n, "examples"),
        None => (0, "examples"),
    };
    let bar = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(len) };
    let template = format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{per_sec:1}}, ETA {{eta}}) {{msg}}");
    bar.set_style(indicatif::ProgressStyle::with_template(&template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    bar.set_position(match args.budget {
        Some(Budget::Seconds(_)) => state.wall_s as u64,
        _ => state.examples_seen,
    });
    bar.reset_eta();
    bar
}

/// The bundle's config for a model trained on `task`.
/// `opaque`: whether the training IR had opaque pointers (its vocabulary has `ptr`).
/// `corpus`: the names of the corpora the data came from ([`Provenance::corpus`]).
pub fn bundle_config(task: Task, hyper: &Hyper, data_hash: &str, corpus: &[String], opaque: bool, examples: u64, wall_s: f64) -> Config {
    Config {
        format: bundle::FORMAT.into(),
        version: bundle::VERSION,
        task: task.to_string(),
        head: Head::Node,
        classes: vec!["negative".into(), "positive".into()],
        hyper: hyper.clone(),
        provenance: Provenance {
            graph_mode: programl_dataset::export::GRAPH_MODE.into(),
            llvm_major: programl::LLVM_MAJOR.parse().unwrap_or(0),
            opaque_pointers: opaque,
            featurisation_version: programl::batch::LAYOUT_VERSION,
            training_data_hash: data_hash.into(),
            examples_seen: examples,
            wall_time_s: (wall_s * 10.0).round() / 10.0,
            dtype: programl_model::matmul_precision().to_string(),
            created_by: format!("programl-train {}", env!("CARGO_PKG_VERSION")),
            corpus: corpus.to_vec(),
        },
        source: None,
        auto_dtype: None,
    }
}

/// Validation of an adaptive-depth model: the model is saved as a bundle
/// with its stopping rule (`dir`, replaced whole) and evaluated there by
/// the torch-free inference the learned pass and `eval` run, in FP32, each
/// graph stopping by the rule.
fn validate_adaptive(
    dir: &Path,
    config: &Config,
    model: &Ggnn,
    vocab: &Vocabulary,
    val: &Examples,
    ids: &[usize],
    args: &TrainArgs,
) -> Result<Evaluation> {
    Bundle::save(dir, config, model, vocab)?;
    let cpu = programl_infer::Model::open(dir).with_context(|| format!("{}: the validation bundle", dir.display()))?;
    let options =
        programl_infer::Options { steps: None, threads: args.threads.max(1) as usize, dtype: programl_infer::Dtype::F32, isa: None };
    Ok(evaluate_with(&Predictor::Cpu(&cpu, options), val, ids, None, args.batch_nodes.max(1), |_| {}))
}

fn write_log(out: &Path, rows: &[Row]) -> Result<()> {
    let path = out.join("log.csv");
    programl::fsutil::write_atomically(&path, programl::fsutil::Durability::Atomic, |w| {
        // Adaptive-depth runs add the validations' mean steps run and needed.
        let adaptive = rows.iter().any(|r| r.steps_run.is_some());
        writeln!(w, "kind,examples,wall_s,loss,precision,recall,f1{}", if adaptive { ",steps_run,steps_needed" } else { "" })?;
        for r in rows {
            let f = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.6}"));
            write!(w, "{},{},{:.1},{:.6},{},{},{}", r.kind, r.examples, r.wall_s, r.loss, f(r.precision), f(r.recall), f(r.f1))?;
            if adaptive {
                let g = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.2}"));
                write!(w, ",{},{}", g(r.steps_run), g(r.steps_needed))?;
            }
            writeln!(w)?;
        }
        Ok(())
    })
    .with_context(|| format!("{}: cannot write the log", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: TrainArgs,
    }

    fn args(extra: &[&str]) -> TrainArgs {
        let base = ["train", "--task", "dominance", "--data", "d", "--lr", "1e-3"];
        Cli::try_parse_from(base.iter().chain(extra)).unwrap().args
    }

    /// The rate rises over the warm-up, then falls along a half cosine to
    /// 0 and stays there; without either flag it is --lr throughout, and a
    /// run recorded before the flags existed reads as that.
    #[test]
    fn the_rate_warms_up_then_decays_along_a_cosine() {
        let a = args(&["--warmup", "100", "--cosine-examples", "1000"]);
        assert!((a.rate(0) - 1e-5).abs() < 1e-15 && (a.rate(49) - 5e-4).abs() < 1e-15);
        assert_eq!(a.rate(100), 1e-3);
        assert!((a.rate(600) - 5e-4).abs() < 1e-12);
        assert!(a.rate(1100).abs() < 1e-15 && a.rate(5000).abs() < 1e-15);
        let plain = args(&[]);
        assert!([0, 10, 1_000_000].iter().all(|&e| plain.rate(e) == 1e-3));
        let recorded = serde_json::to_value(&plain).unwrap();
        assert!(recorded.get("warmup").is_none() && recorded.get("cosine_examples").is_none(), "{recorded}");
        let back: TrainArgs = serde_json::from_value(recorded).unwrap();
        assert_eq!((back.warmup, back.cosine_examples), (0, None));
    }
}
