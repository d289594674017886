//! `programl-train`: trains the ProGraML GGNN on DeepDataFlow tasks,
//! evaluates and runs model bundles, and measures its speed.
//!
//! ```text
//! programl-train train   --task T --data DATA --out RUN [--budget 45m|2000000]
//! programl-train eval    --model BUNDLE --data DATA|IR_DIR [--subset ddf-30] [--steps T] [--json]
//! programl-train predict --model BUNDLE FILE.ll [--roots sample|all|ID,...] [--json]
//! programl-train bench   [--mode train|infer --steps T] [--json]
//! programl-train devmap  --platform amd|nvidia [--input sources|csv|ncc] [--protocol P] [--no-aux] [--out BUNDLE] [--json]
//! programl-train poj104  --out RUN [--levels O0] [--epochs N] [--budget 45m] [--json]
//! programl-train eval    --model POJ104_BUNDLE --data DIR   (DIR/<class>/<n>.cpp)
//! ```

mod bench;
mod checkpoint;
mod data;
mod devmap;
mod engine;
mod graphtask;
mod harness;
mod interrupt;
mod metrics;
mod optim;
mod plot;
mod poj104;
mod predict_graph;
mod recipe;
mod train;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use programl::analysis::Analyzer;
use programl::batch::{GraphInput, Sample};
use programl_dataset::{Dataset, Split, Subset};
use programl_model::bundle::Bundle;
use programl_model::{select_device, DeviceChoice, Precision};
use serde_json::json;

use crate::data::Examples;
use crate::metrics::BUCKETS;

#[derive(Parser)]
#[command(name = "programl-train", version, about = "Train, evaluate, run and benchmark the ProGraML GGNN")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Runtime {
    /// Threads (default: the machine's cores): libtorch's intra-op threads
    /// for training and CUDA, and the torch-free inference's own pool for
    /// eval, predict and bench's infer mode on the CPU.
    #[arg(long)]
    threads: Option<i32>,
    /// cpu, cuda, or auto (CUDA if available, else CPU).
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// Matmul precision: f32; bf16 (BF16 products where the CPU has BF16
    /// instructions, AVX512-BF16 or AMX; FP32 elsewhere, said on stderr);
    /// for inference only (eval, predict, bench's infer mode) int8 (INT8
    /// products, on every CPU path); or auto, the learned pass's default:
    /// int8 where the CPU has AVX-512 VNNI, else f32, for eval and
    /// predict (what the pass computes on this machine), f32 for training
    /// and bench. The shipped models were trained in f32; models/README.md
    /// gives each one's figures and the precision they were measured in.
    #[arg(long, default_value = "auto")]
    dtype: Dtype,
    /// The highest CPU kernel path for eval and predict: vnni, avx512,
    /// avxvnni, avx2 or portable (default: the best this CPU runs; a path
    /// it lacks is an error). For tests and benchmarks of one path.
    #[arg(long)]
    isa: Option<programl_infer::Isa>,
}

/// `--dtype`: a [`Precision`], or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    Auto,
    Is(Precision),
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Dtype, String> {
        if s == "auto" {
            return Ok(Dtype::Auto);
        }
        s.parse().map(Dtype::Is).map_err(|_| format!("dtype '{s}' is not one of auto, f32, bf16, int8"))
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dtype::Auto => f.write_str("auto"),
            Dtype::Is(p) => p.fmt(f),
        }
    }
}

impl Runtime {
    /// The runtime for a command that trains: INT8 is inference's,
    /// and `auto` is f32.
    fn apply_training(&self, what: &str) -> Result<tch::Device> {
        if self.dtype == Dtype::Is(Precision::Int8) {
            bail!("--dtype int8: INT8 products are for inference (eval, predict, bench --mode infer); {what} trains in f32 or bf16");
        }
        self.apply_as(Precision::F32)
    }

    /// For a command that runs inference the way the learned pass does
    /// (eval, predict): `auto` is INT8 where the CPU has AVX-512 VNNI.
    fn apply_inference(&self) -> Result<tch::Device> {
        self.apply_as(if programl_model::int8_preferred() { Precision::Int8 } else { Precision::F32 })
    }

    /// Whether inference runs on the CPU (`--device cpu`, or `auto`
    /// without a GPU): then eval and predict use the torch-free inference,
    /// the learned pass's.
    fn on_cpu(&self, device: tch::Device) -> bool {
        device == tch::Device::Cpu
    }

    /// The torch-free inference's options for one call (`--threads`,
    /// `--dtype`, `--isa`), after checking that the CPU runs `--isa`.
    fn infer_options(&self) -> Result<programl_infer::Options> {
        if let Some(isa) = self.isa {
            isa.check().map_err(anyhow::Error::msg)?;
        }
        let dtype = match self.dtype {
            Dtype::Auto => programl_infer::Dtype::Auto,
            Dtype::Is(Precision::F32) => programl_infer::Dtype::F32,
            Dtype::Is(Precision::Bf16) => programl_infer::Dtype::Bf16,
            Dtype::Is(Precision::Int8) => programl_infer::Dtype::Int8,
        };
        let threads = tch::get_num_threads().max(1) as usize;
        Ok(programl_infer::Options { steps: None, threads, dtype, isa: self.isa })
    }

    /// The threads, the device and the precision (`auto`'s: `auto`).
    fn apply_as(&self, auto: Precision) -> Result<tch::Device> {
        let threads =
            self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS as usize) as i32));
        // Each thread has its stack and libgomp's: thousands exhaust the
        // process's (a stack overflow, a segfault) before they could help.
        if !(1..=MAX_THREADS).contains(&threads) {
            bail!("--threads {threads}: from 1 to {MAX_THREADS}");
        }
        tch::set_num_threads(threads);
        let device = select_device(self.device).map_err(anyhow::Error::msg)?;
        let wanted = match self.dtype {
            Dtype::Auto => auto,
            Dtype::Is(p) => p,
        };
        let precision = programl_model::set_matmul_precision(wanted).map_err(|e| anyhow::anyhow!("--dtype {wanted}: {e}"))?;
        if precision != wanted {
            eprintln!("--dtype {wanted}: this CPU has no BF16 instructions ({}); matmuls stay f32", bench::cpu_summary());
        }
        Ok(device)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Train a model on one task's DDF-30 train split; resumable.
    Train {
        #[command(flatten)]
        args: train::TrainArgs,
        /// The run directory (re-running the same command resumes it).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        runtime: Runtime,
    },
    /// Run a shipped model's training recipe (DIR/recipe.json: its phases,
    /// rates, limits and budgets) to its end and ship the bundle into DIR
    /// as a whole; resumable, and continued from the checkpoints kept in
    /// DIR on a machine without the runs.
    Recipe {
        /// The bundle's directory, holding recipe.json (e.g. models/liveness).
        dir: PathBuf,
        /// The dataset store the phases train on.
        #[arg(long)]
        data: PathBuf,
        /// Where the phases' runs live (default: $PROGRAML_CACHE/runs/recipes).
        #[arg(long)]
        runs: Option<PathBuf>,
        /// Train from scratch, ignoring the checkpoints kept in DIR.
        #[arg(long)]
        fresh: bool,
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        runtime: Runtime,
    },
    /// Precision, recall and F1 of a bundle on a dataset split or on IR files.
    Eval {
        #[arg(long)]
        model: PathBuf,
        /// A dataset store, or a directory of .ll/.bc files (labelled on the fly).
        #[arg(long)]
        data: PathBuf,
        /// ddf-30, ddf-60, ddf-200 or ddf.
        #[arg(long, default_value = "ddf")]
        subset: String,
        /// Message-passing steps (default: the bundle's T, or its stopping
        /// rule); with --stop, the cap on steps (default 200). 1 to 10,000
        /// (a bundle's own bound, `MAX_STEPS`).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=MAX_STEPS))]
        steps: Option<i64>,
        /// Adaptive depth for a DeepDataFlow bundle: each graph runs until
        /// no state entry moves by more than this in one step (or the cap,
        /// --steps), on the torch-free inference. The steps each example
        /// ran are reported beside its analysis's own step count.
        #[arg(long)]
        stop: Option<f64>,
        /// Dataset split to evaluate.
        #[arg(long, default_value = "test")]
        split: String,
        /// Root-sampling seed for IR files (the dataset's rule).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long, default_value_t = 10_000)]
        batch_nodes: usize,
        /// Evaluate a sample of at most this many examples, chosen by
        /// --seed (the same sample every time): T = 200 over every example
        /// of a large split takes hours on a CPU.
        #[arg(long)]
        limit: Option<usize>,
        /// Evaluate only the examples whose analysis needs more than this
        /// many steps: the long tail, where a stopping rule's cap binds
        /// (applied before --limit).
        #[arg(long)]
        longer_than: Option<u32>,
        /// POJ-104: compile the sources at this -O level (O0, O1, O2, O3,
        /// Os or Oz) in place of the level the bundle records, to see how
        /// it classifies IR of other levels (its `source.levels` says
        /// which it was trained on).
        #[arg(long)]
        level: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        runtime: Runtime,
    },
    /// Predictions for one file: a node-level bundle's per-node
    /// probabilities for roots of an IR file; a graph-level bundle's class
    /// for each graph of an IR, OpenCL (.cl) or source file (per kernel for
    /// device mapping).
    Predict {
        #[arg(long)]
        model: PathBuf,
        file: PathBuf,
        /// sample (the dataset's rule), all (every eligible root), or node ids.
        #[arg(long, default_value = "sample")]
        roots: String,
        /// A graph head's auxiliary inputs, e.g. transfer=4194304,wgsize=256
        /// (device mapping); without them, the bundle's noaux/ decides.
        #[arg(long)]
        aux: Option<String>,
        /// Message-passing steps (default: the bundle's T, or its stopping
        /// rule's cap), 1 to 10,000.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..=MAX_STEPS))]
        steps: Option<i64>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        runtime: Runtime,
    },
    /// OpenCL device mapping (CPU or GPU) on the DevMap dataset: three
    /// protocols (10-fold stratified, the paper's; 10-fold grouped by
    /// kernel; PERFOGRAPH's 10 random 67-row test sets); with --out, then a
    /// model trained on every row, as a bundle. The defaults are the
    /// shipped models' settings.
    Devmap {
        #[arg(long)]
        platform: String,
        /// Where the kernels come from: `sources` (each row's kernel
        /// compiled from its program's own file, headers and build options:
        /// gpgpu-sources.tar.xz), `csv` (the CSV's normalised `src` column,
        /// repaired where clang fails) or `ncc` (the LLVM 9 IR of
        /// ncc-task_devmap.zip that ProGraML's experiments used).
        #[arg(long, default_value = "sources")]
        input: String,
        /// The -O level the sources input is compiled at (O0, O1, O2, O3,
        /// Os, Oz); the bundle records it, and `eval` and `predict` compile
        /// kernels at the bundle's level.
        #[arg(long, default_value = devmap::DEFAULT_LEVEL)]
        opt_level: String,
        /// The dataset directory (amd.csv, nvidia.csv, gpgpu-sources.tar.xz);
        /// default ../shared/datasets/devmap from the project root.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Where compiled kernels are cached (default $PROGRAML_CACHE/devmap).
        #[arg(long)]
        cache: Option<PathBuf>,
        #[arg(long, default_value_t = 10)]
        folds: usize,
        /// Without the auxiliary inputs (transfer size, work-group size).
        #[arg(long)]
        no_aux: bool,
        /// Training epochs per model (the sources' graphs are 4x the CSV's:
        /// 10 keeps the default run within 50 minutes on 2 cores).
        #[arg(long, default_value_t = 10)]
        epochs: usize,
        /// Message-passing steps.
        #[arg(long, default_value_t = 6)]
        steps: i64,
        #[arg(long, default_value_t = 1e-3, value_parser = train::learning_rate)]
        lr: f64,
        #[arg(long, default_value_t = 10_000)]
        batch_nodes: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// How the nodes pool into the graph's logits: gated (a gated mean
        /// of the final node states, then a linear layer; measured best on
        /// both platforms), or mean or sum (upstream's) of the node logits.
        #[arg(long, default_value = "gated")]
        pool: String,
        /// Start from this bundle's weights (a DeepDataFlow model, e.g.
        /// models/reachability): its embedding rows for the texts it knows,
        /// its message passing, and every other tensor of the same name and
        /// shape (transfer).
        #[arg(long)]
        init: Option<PathBuf>,
        /// Weight of a second cross-entropy on the graph's pooled logits
        /// before the auxiliary inputs join them (upstream's intermediate
        /// loss, 0.2 there): the graph's vector must predict the device
        /// from the code alone too. 0: none. Training only; the bundle's
        /// shape does not change.
        #[arg(long, default_value_t = 0.0)]
        code_loss: f64,
        /// Dropout on the node states between message-passing steps, in
        /// training only (upstream's graph-state dropout: 0.2).
        #[arg(long, default_value_t = 0.0)]
        state_dropout: f64,
        /// Share of each model's training rows held out (stratified by
        /// device) to choose the epoch whose weights it keeps: the lowest
        /// error on them. 0: the last epoch's.
        #[arg(long, default_value_t = 0.0)]
        val_share: f64,
        /// `cosine` (the shipped models'): the rate falls along a half
        /// cosine over the epochs, from --lr at the first; or `constant`.
        /// Cosine measured 1.6-2.4 points lower error in four paired
        /// cross-validations (docs/perf/models.md).
        #[arg(long, default_value = "cosine")]
        lr_schedule: String,
        /// What the auxiliary inputs join in the classifier: `state` (with
        /// --pool gated, the default there: the pooled H-wide graph vector
        /// itself; 0.8-2.9 points lower error in four paired runs) or `logits` (the
        /// graph's 2 pooled logits, upstream's; the default for mean and sum).
        #[arg(long)]
        join: Option<String>,
        /// The state width (`hyper.hidden`): an even number, the text
        /// embedding's entries then the root selector's 2. SPEC.md §3's 34
        /// trains on the CPU's fused loops, any other on libtorch's
        /// operations (about three times slower at 66).
        #[arg(long, default_value_t = programl_model::HIDDEN)]
        hidden: i64,
        /// Cross-validation only: train N models per split, differing only
        /// by their seed (the first is the single model's), and average
        /// their GPU probabilities. Each member's predictions are kept, so
        /// raising N trains only the new members.
        #[arg(long, default_value_t = 1)]
        ensemble: usize,
        /// After training, refit the classifier after the graph vector on
        /// all the training rows at once, the message passing frozen: N
        /// full-batch steps at --lr, then its normalisation statistics set
        /// to the rows' own (0: the statistics only; `off`: neither, the
        /// default before 2026-11-29). 300 measured 5.4-5.7 points lower
        /// stratified error on AMD over two paired seeds (docs/perf/models.md).
        #[arg(long, default_value = "300")]
        refit_head: String,
        /// The protocols, comma-separated (stratified, grouped, perfograph)
        /// or all; default stratified,grouped (PERFOGRAPH's 10 random
        /// 67-row test sets take as long again).
        #[arg(long)]
        protocol: Option<String>,
        /// Train a final model on every compiled row and save it here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Skip cross-validation (with --out: only the final model).
        #[arg(long)]
        no_cv: bool,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        runtime: Runtime,
    },
    /// POJ-104 algorithm classification: compiles the programs (resumable,
    /// cached), trains a graph-level model (resumable: run the same command
    /// again), keeps the best on validation in RUN/model, and reports its
    /// test accuracy.
    Poj104 {
        /// The run directory (checkpoint/, model/, log.csv, results.json).
        #[arg(long)]
        out: PathBuf,
        /// DIR/<class>/<n>.cpp, or a directory holding poj104.tar.xz; default
        /// the dataset's tarball (../shared/datasets/poj104), unpacked into
        /// the cache.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Where sources are unpacked and IR is cached (default $PROGRAML_CACHE/poj104).
        #[arg(long)]
        cache: Option<PathBuf>,
        /// -O levels, comma-separated: all train and are tested; the first
        /// is validated and recorded in the bundle.
        #[arg(long, default_value = "O0")]
        levels: String,
        #[arg(long, default_value_t = 10)]
        epochs: usize,
        #[arg(long, default_value_t = 6)]
        steps: i64,
        #[arg(long, default_value_t = 1e-3, value_parser = train::learning_rate)]
        lr: f64,
        #[arg(long, default_value_t = 10_000)]
        batch_nodes: usize,
        #[arg(long, default_value_t = 10_000)]
        max_nodes: usize,
        /// How the nodes pool into graph logits: mean or sum (upstream's) of
        /// the node logits, or gated (a gated mean of the final node states).
        #[arg(long, default_value = "mean")]
        pool: String,
        /// `constant`, or `cosine`: the rate falls along a half cosine,
        /// batch by batch, from --lr at the start to 0 at the last epoch's
        /// end (raising --epochs on a resumed run stretches the rest).
        #[arg(long, default_value = "constant")]
        lr_schedule: String,
        /// The state width (`hyper.hidden`): an even number, the text
        /// embedding's entries then the root selector's 2. SPEC.md §3's 34
        /// (the default) trains on the CPU's fused loops, any other width
        /// on libtorch's operations. A resumed run takes the same width.
        #[arg(long)]
        hidden: Option<i64>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Stop training after this long (45m, 2h, 90s); run again to continue.
        #[arg(long)]
        budget: Option<train::Budget>,
        /// Stop compiling after this long; run again to continue.
        #[arg(long)]
        compile_budget: Option<train::Budget>,
        /// Compile and report failures only.
        #[arg(long)]
        compile_only: bool,
        /// Test the run's current best bundle (OUT/model) at every level
        /// and stop, training nothing (figures for a run under way).
        #[arg(long)]
        test_only: bool,
        /// Only the first N programs of each class (a quick run).
        #[arg(long)]
        per_class: Option<usize>,
        /// Copy the test split's programs to DIR/<class>/<file> and stop
        /// (for `eval --data DIR`).
        #[arg(long)]
        export_test: Option<PathBuf>,
        /// When training stops (finished, or --budget spent), replace DIR
        /// whole, atomically, with the run's best bundle, checkpoint/,
        /// log.csv, compile.json and (once finished) results.json.
        #[arg(long)]
        ship: Option<PathBuf>,
        /// The same as --ship, only when the run's best validation accuracy
        /// beats the best in DIR/log.csv (or DIR has none): how a run
        /// under way replaces the shipped bundle once it is better.
        #[arg(long)]
        ship_if_better: Option<PathBuf>,
        #[arg(long, default_value_t = 300.0)]
        checkpoint_every: f64,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        runtime: Runtime,
    },
    /// Training and inference speed on a seeded synthetic batch.
    Bench {
        /// train or infer; without it, all three modes (train T=30, infer
        /// T=30, infer T=200), each in its own process.
        #[arg(long)]
        mode: Option<String>,
        #[arg(long, default_value_t = 30)]
        steps: i64,
        #[arg(long, default_value_t = 10_000)]
        batch_nodes: usize,
        #[arg(long, default_value_t = 1440)]
        graph_nodes: usize,
        /// Timed iterations (median reported), after --warmup.
        #[arg(long, default_value_t = 10)]
        iters: usize,
        #[arg(long, default_value_t = 2)]
        warmup: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: bool,
        /// Train through autograd's backward instead of the hand-written
        /// one `train` uses (to compare them).
        #[arg(long)]
        autograd: bool,
        /// Train mode: back-propagate through a checkpointed tape of
        /// N-step segments (`train --tape-segment`), without state dropout;
        /// against a segment of T steps (the full tape's cost), its time
        /// and peak memory.
        #[arg(long)]
        tape_segment: Option<usize>,
        #[command(flatten)]
        runtime: Runtime,
    },
}

fn parse_pool(name: &str) -> Result<programl_model::Pool> {
    match name {
        "mean" => Ok(programl_model::Pool::Mean),
        "sum" => Ok(programl_model::Pool::Sum),
        "gated" => Ok(programl_model::Pool::Gated),
        other => bail!("--pool '{other}': expected mean, sum or gated"),
    }
}

fn main() {
    // Past a file size limit (RLIMIT_FSIZE), SIGXFSZ would kill the process
    // without a word on which file; ignored, the write fails with EFBIG and
    // the error names the file. Every output is written atomically, so a
    // write cut short leaves the previous file (or none) in place.
    // SAFETY: setting a signal's disposition, before any thread starts.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    // A reader that closes the pipe early (`predict --json | head`) ends
    // the process quietly, as it ends any Unix filter: Rust ignores SIGPIPE,
    // and `println!` then panics with a backtrace. What was written stays
    // whole (outputs are written atomically).
    // SAFETY: as above.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // Standard output that cannot be written (a full disk, `> /dev/full`):
    // `println!` panics; said as the other write errors are, one line and
    // exit 2, not a panic's backtrace (the CLI writes through `writeln!`).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info.payload().downcast_ref::<String>().map(String::as_str).or_else(|| info.payload().downcast_ref::<&str>().copied());
        if let Some(cause) = text.and_then(|t| t.strip_prefix("failed printing to stdout: ")) {
            eprintln!("programl-train: <stdout>: cannot write: {cause}");
            std::process::exit(2);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    if let Err(e) = programl_model::libtorch::check() {
        eprintln!("programl-train: {e}");
        std::process::exit(1);
    }
    if let Err(e) = run(cli) {
        eprintln!("programl-train: {}", programl::error_line(e.as_ref()));
        // Stopped by Ctrl-C or SIGTERM after saving: ended by that signal,
        // so that a shell script running it stops too.
        if let Some(i) = e.downcast_ref::<interrupt::Interrupted>() {
            interrupt::end_by(i.signal);
        }
        std::process::exit(1);
    }
}

fn parse_subset(s: &str) -> Result<Subset> {
    Subset::parse(s).with_context(|| format!("subset '{s}': expected ddf-30, ddf-60, ddf-200 or ddf"))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train { mut args, out, runtime } => {
            let device = runtime.apply_training("train")?;
            args.val_every = args.val_every.max(1);
            args.threads = tch::get_num_threads();
            train::run(&args, &out, device)
        }
        Command::Recipe { dir, data, runs, fresh, quiet, runtime } => {
            let device = runtime.apply_training("recipe")?;
            let runs = runs.unwrap_or_else(|| programl::fsutil::cache_dir().join("runs").join("recipes"));
            let options = recipe::Options { data, runs, fresh, threads: tch::get_num_threads(), quiet };
            recipe::run(&dir, &options, device)
        }
        Command::Eval { model, data, subset, steps, stop, split, seed, batch_nodes, limit, longer_than, level, json, runtime } => {
            let device = runtime.apply_inference()?;
            let config = programl_infer::bundle::read_config(&model)?;
            if level.is_some() && config.task != poj104::TASK {
                bail!("--level: {} is a {} bundle; --level compiles POJ-104 sources", model.display(), config.task);
            }
            if stop.is_some() || config.hyper.stop.is_some() {
                // A stopping rule runs on the torch-free inference only (the
                // libtorch model refuses such bundles).
                if !runtime.on_cpu(device) {
                    bail!("{}: adaptive depth (a stopping rule) evaluates on the CPU; use --device cpu", model.display());
                }
                if config.head != programl_infer::bundle::Head::Node {
                    bail!("--stop: {} is a graph-level bundle; adaptive depth evaluates DeepDataFlow bundles", model.display());
                }
                if let Some(t) = stop.filter(|t| !(t.is_finite() && *t >= 0.0)) {
                    bail!("--stop {t}: the tolerance is a finite value ≥ 0");
                }
                // `--steps` caps the rule: the bundle's, or `--stop`'s. The
                // cap goes into the rule, so the report names the one run.
                let cpu = match (stop, steps) {
                    (Some(tolerance), _) => programl_infer::Model::open_with(&model, |c| {
                        c.hyper.stop = Some(programl_infer::config::Stop { tolerance, max_steps: steps.unwrap_or(200) })
                    })?,
                    (None, Some(cap)) => programl_infer::Model::open_with(&model, |c| {
                        if let Some(rule) = c.hyper.stop.as_mut() {
                            rule.max_steps = cap;
                        }
                    })?,
                    (None, None) => programl_infer::Model::open(&model)?,
                };
                let steps = None;
                let predictor = engine::Predictor::Cpu(&cpu, runtime.infer_options()?);
                let ddf = DdfEval { data: &data, subset: &subset, split: &split, seed, batch_nodes, limit, longer_than, json };
                return ddf.run(&cpu.config.task, &cpu.vocabulary, &predictor, steps, cpu.config.hyper.stop.as_ref());
            }
            // A graph-level bundle scores whole programs: the flags that
            // choose node-level examples would be ignored.
            if config.hyper.graph.is_some() {
                if let Some(flag) = [("--limit", limit.is_some()), ("--longer-than", longer_than.is_some())].iter().find(|f| f.1) {
                    bail!(
                        "{}: {} is a graph-level ({}) bundle; {} selects node-level (DeepDataFlow) examples",
                        flag.0,
                        model.display(),
                        config.task,
                        flag.0
                    );
                }
            }
            let bundle = Bundle::load(&model, device)?;
            if bundle.config.task == poj104::TASK {
                if data.join(programl_dataset::MANIFEST).exists() || !data.is_dir() {
                    bail!("{}: a POJ-104 bundle evaluates a directory of sources, DIR/<class>/<n>.cpp", data.display());
                }
                let cpu_model = if runtime.on_cpu(device) { Some(programl_infer::Model::open(&model)?) } else { None };
                let cpu = match &cpu_model {
                    Some(m) => Some((m, runtime.infer_options()?)),
                    None => None,
                };
                return poj104::eval_dir(&bundle, cpu, &data, None, steps, batch_nodes, level.as_deref(), json);
            }
            if bundle.config.task.starts_with("devmap") {
                if !runtime.on_cpu(device) {
                    bail!("--device cuda: device-mapping eval runs on the CPU (the pass's inference); use --device cpu");
                }
                if data.is_dir() {
                    // Kernels alone give no transfer or work-group sizes:
                    // a bundle that needs them decides by its noaux/
                    // model, as `predict` and the learned pass do.
                    let needs_aux = bundle.config.hyper.graph.as_ref().is_some_and(|h| !h.aux.is_empty());
                    let noaux = model.join("noaux");
                    let dir = if needs_aux && noaux.join(programl_model::bundle::CONFIG_FILE).exists() {
                        eprintln!(
                            "eval: {} has no transfer or work-group sizes; {} decides (trained without them)",
                            data.display(),
                            noaux.display()
                        );
                        noaux
                    } else {
                        model.clone()
                    };
                    let cpu = programl_infer::Model::open(&dir)?;
                    return devmap::eval_cl_dir(&cpu, &programl_infer::Options { steps, ..runtime.infer_options()? }, &data, json);
                }
                let cpu = programl_infer::Model::open(&model)?;
                if !data.is_file() {
                    bail!(
                        "{}: a device-mapping bundle evaluates a DevMap CSV (benchmark, dataset, transfer, wgsize, oracle, src) or a directory DIR/cpu/*.cl, DIR/gpu/*.cl",
                        data.display()
                    );
                }
                return devmap::eval_csv(&cpu, &programl_infer::Options { steps, ..runtime.infer_options()? }, &data, json);
            }
            let cpu_model = if runtime.on_cpu(device) { Some(programl_infer::Model::open(&model)?) } else { None };
            let predictor = match &cpu_model {
                Some(m) => engine::Predictor::Cpu(m, runtime.infer_options()?),
                None => engine::Predictor::Torch(&bundle.model),
            };
            let ddf = DdfEval { data: &data, subset: &subset, split: &split, seed, batch_nodes, limit, longer_than, json };
            ddf.run(&bundle.config.task, &bundle.vocabulary, &predictor, Some(steps.unwrap_or(bundle.model.hyper().steps)), None)
        }
        Command::Devmap {
            platform,
            input,
            opt_level,
            data,
            cache,
            folds,
            no_aux,
            epochs,
            steps,
            lr,
            batch_nodes,
            seed,
            pool,
            protocol,
            out,
            no_cv,
            json,
            quiet,
            init,
            code_loss,
            state_dropout,
            val_share,
            lr_schedule,
            join,
            hidden,
            ensemble,
            refit_head,
            runtime,
        } => {
            let device = runtime.apply_training("devmap")?;
            train::check_hidden(hidden)?;
            if ensemble == 0 {
                bail!("--ensemble 0: at least 1 model per split");
            }
            let pool = parse_pool(&pool)?;
            let gated = pool == programl_model::Pool::Gated;
            let join = match join.as_deref().unwrap_or(if gated { "state" } else { "logits" }) {
                "logits" => programl_model::Join::Logits,
                "state" if gated => programl_model::Join::State,
                "state" => anyhow::bail!("--join state joins the gated pooling's state: it needs --pool gated"),
                other => anyhow::bail!("--join '{other}': expected logits or state"),
            };
            if !(code_loss.is_finite() && code_loss >= 0.0) {
                anyhow::bail!("--code-loss {code_loss} is not a finite weight >= 0");
            }
            if !(0.0..1.0).contains(&state_dropout) {
                anyhow::bail!("--state-dropout {state_dropout} is not a rate in [0, 1)");
            }
            if !(0.0..0.5).contains(&val_share) {
                anyhow::bail!("--val-share {val_share} is not a share in [0, 0.5)");
            }
            let settings = devmap::Settings {
                aux: !no_aux,
                epochs,
                steps,
                lr,
                batch_nodes,
                aux_hidden: 32,
                pool,
                seed,
                init,
                code_loss,
                state_dropout,
                val_share,
                cosine: match lr_schedule.as_str() {
                    "constant" => false,
                    "cosine" => true,
                    other => anyhow::bail!("--lr-schedule '{other}': expected constant or cosine"),
                },
                // Without auxiliary inputs nothing joins: the settings (and
                // the key kept splits resume by) say so.
                join: if no_aux { programl_model::Join::Logits } else { join },
                hidden,
                // Without auxiliary inputs there is nothing to refit: the
                // settings (and the key kept splits resume by) say so.
                refit_head: match refit_head.as_str() {
                    _ if no_aux => None,
                    "off" => None,
                    n => Some(n.parse().map_err(|_| anyhow::anyhow!("--refit-head '{n}': expected a number of steps or off"))?),
                },
            };
            let options = devmap::Options {
                platform,
                input: input.parse()?,
                data,
                cache,
                folds,
                protocol,
                out,
                no_cv,
                level: opt_level,
                ensemble,
                json,
                quiet,
            };
            devmap::run(&options, &settings, device)
        }
        Command::Poj104 {
            out,
            data,
            cache,
            levels,
            epochs,
            steps,
            lr,
            batch_nodes,
            max_nodes,
            pool,
            lr_schedule,
            hidden,
            seed,
            budget,
            compile_budget,
            compile_only,
            test_only,
            per_class,
            export_test,
            ship,
            ship_if_better,
            checkpoint_every,
            json,
            quiet,
            runtime,
        } => {
            let device = runtime.apply_training("poj104")?;
            let seconds = |b: Option<train::Budget>, flag: &str| -> Result<Option<f64>> {
                match b {
                    None => Ok(None),
                    Some(train::Budget::Seconds(s)) => Ok(Some(s)),
                    Some(train::Budget::Examples(_)) => bail!("--{flag}: a duration (45m, 2h, 90s)"),
                }
            };
            let levels = levels.split(',').map(|l| l.trim().trim_start_matches('-').to_string()).filter(|l| !l.is_empty()).collect();
            let pool = parse_pool(&pool)?;
            let lr_schedule = graphtask::LrSchedule::parse(&lr_schedule)?;
            let settings = poj104::Settings { levels, epochs, steps, lr, batch_nodes, max_nodes, pool, seed, lr_schedule, hidden };
            let options = poj104::Options {
                data,
                cache,
                out,
                budget_s: seconds(budget, "budget")?,
                compile_budget_s: seconds(compile_budget, "compile-budget")?,
                compile_only,
                per_class,
                export_test,
                checkpoint_every_s: checkpoint_every,
                test_only,
                ship,
                ship_if_better,
                json,
                quiet,
            };
            poj104::run(&options, &settings, device)
        }
        Command::Predict { model, file, roots, aux, steps, seed, json, runtime } => {
            let device = runtime.apply_inference()?;
            if programl_infer::bundle::read_config(&model).is_ok_and(|c| c.hyper.graph.is_some()) {
                let cpu = if runtime.on_cpu(device) { Some(runtime.infer_options()?) } else { None };
                return predict_graph::run(&model, &file, aux.as_deref(), steps, cpu, device, json);
            }
            if aux.is_some() {
                bail!("--aux: {} is a node-level bundle (no graph head)", model.display());
            }
            // On the CPU, the torch-free inference alone (libtorch is not
            // loaded; a bundle with a stopping rule runs under it, `--steps`
            // its cap); on CUDA, the libtorch model at `--steps` or its T.
            if runtime.on_cpu(device) {
                let cpu = programl_infer::Model::open(&model)?;
                let predictor = engine::Predictor::Cpu(&cpu, runtime.infer_options()?);
                return predict(&cpu.config.task, &cpu.vocabulary, &predictor, &file, &roots, steps, seed, json);
            }
            let bundle = Bundle::load(&model, device)?;
            let steps = Some(steps.unwrap_or(bundle.model.hyper().steps));
            predict(&bundle.config.task, &bundle.vocabulary, &engine::Predictor::Torch(&bundle.model), &file, &roots, steps, seed, json)
        }
        Command::Bench { mode, steps, batch_nodes, graph_nodes, iters, warmup, seed, json, autograd, tape_segment, runtime } => {
            if tape_segment == Some(0) {
                bail!("--tape-segment 0: a segment holds at least one step");
            }
            if tape_segment.is_some() && autograd {
                bail!("--tape-segment is the hand-written backward's; not with --autograd");
            }
            let tape = tape_segment.map_or(programl_model::Tape::Full, programl_model::Tape::Segments);
            let int8 = runtime.dtype == Dtype::Is(Precision::Int8);
            let device = if mode.as_deref() == Some("train") {
                runtime.apply_training("bench --mode train")?
            } else {
                runtime.apply_as(Precision::F32)?
            };
            let shape = bench::Shape { batch_nodes, graph_nodes, seed };
            let modes: Vec<(String, i64)> = match mode {
                Some(m) => vec![(m, steps)],
                // INT8 is inference's: its bench has no training mode.
                None if int8 => vec![("infer".into(), 30), ("infer".into(), 200)],
                None => vec![("train".into(), 30), ("infer".into(), 30), ("infer".into(), 200)],
            };
            if !json {
                println!("cpu: {}", bench::cpu_summary());
            }
            if modes.len() == 1 {
                // Inference on the CPU: the torch-free inference, what eval,
                // predict and the learned pass run (`auto` is f32 here).
                let cpu = runtime.infer_options()?;
                let cpu = programl_infer::Options {
                    dtype: if runtime.dtype == Dtype::Auto { programl_infer::Dtype::F32 } else { cpu.dtype },
                    ..cpu
                };
                let f = bench::run_mode(&shape, &modes[0].0, modes[0].1, iters.max(1), warmup, device, autograd, tape, Some(cpu))?;
                print_figures(&f, json);
                return Ok(());
            }
            // Each mode in its own process, so each peak RSS is its own.
            let exe = std::env::current_exe()?;
            for (m, t) in modes {
                let mut cmd = std::process::Command::new(&exe);
                cmd.args(["bench", "--mode", &m, "--steps", &t.to_string(), "--batch-nodes", &batch_nodes.to_string()]);
                cmd.args(["--graph-nodes", &graph_nodes.to_string(), "--iters", &iters.to_string(), "--warmup", &warmup.to_string()]);
                cmd.args([
                    "--seed",
                    &seed.to_string(),
                    "--threads",
                    &tch::get_num_threads().to_string(),
                    "--device",
                    &runtime.device.to_string(),
                    "--dtype",
                    &runtime.dtype.to_string(),
                ]);
                if json {
                    cmd.arg("--json");
                }
                if autograd {
                    cmd.arg("--autograd");
                }
                if let (Some(n), "train") = (tape_segment, m.as_str()) {
                    cmd.args(["--tape-segment", &n.to_string()]);
                }
                let status = cmd.status()?;
                if !status.success() {
                    bail!("bench --mode {m} --steps {t} failed ({status})");
                }
            }
            Ok(())
        }
    }
}

/// `eval` of a DeepDataFlow bundle on a dataset split or IR files.
struct DdfEval<'a> {
    data: &'a Path,
    subset: &'a str,
    split: &'a str,
    seed: u64,
    batch_nodes: usize,
    limit: Option<usize>,
    longer_than: Option<u32>,
    json: bool,
}

impl DdfEval<'_> {
    /// `steps`: a fixed T, or `None` for `stop`, the model's stopping rule.
    fn run(
        &self,
        task: &str,
        vocabulary: &programl::vocab::Vocabulary,
        predictor: &engine::Predictor<'_>,
        steps: Option<i64>,
        stop: Option<&programl_infer::config::Stop>,
    ) -> Result<()> {
        let DdfEval { data, subset, split, seed, batch_nodes, limit, longer_than, json } = *self;
        let task = train::parse_task(task)?;
        let subset = parse_subset(subset)?;
        let examples = if data.join(programl_dataset::MANIFEST).exists() {
            let split = Split::parse(split).with_context(|| format!("split '{split}': expected train, val or test"))?;
            let dataset = Dataset::open(data)?;
            Examples::from_dataset(&dataset, task, split, subset, vocabulary)?
        } else if data.exists() {
            Examples::from_ir(data, task, subset, vocabulary, seed)?
        } else {
            bail!("{}: no such dataset or IR directory", data.display());
        };
        if limit == Some(0) {
            bail!("--limit 0: evaluate at least one example");
        }
        // The examples in range; a seeded sample of them under --limit.
        let eligible: Vec<usize> = match longer_than {
            Some(n) => (0..examples.examples.len()).filter(|&i| examples.examples[i].steps > n).collect(),
            None => (0..examples.examples.len()).collect(),
        };
        let available = eligible.len();
        if let (0, Some(n)) = (available, longer_than) {
            bail!("{}: no {} example of {task} needs more than {n} steps (--longer-than {n})", data.display(), subset.name());
        }
        // Nothing evaluated is no score (precision and recall of nothing
        // would read 1.0).
        if available == 0 {
            bail!(
                "{}: no {} example of {task} to evaluate (no IR file read, or none with an example in this split and subset)",
                data.display(),
                subset.name()
            );
        }
        let ids: Vec<usize> = match limit {
            Some(n) if n < available => {
                let mut ids: Vec<usize> = programl::batch::permutation(available, programl::hash::mix(seed ^ 0x6576_616c))
                    .into_iter()
                    .take(n)
                    .map(|i| eligible[i])
                    .collect();
                ids.sort_unstable();
                ids
            }
            _ => eligible,
        };
        let bar = if json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(ids.len() as u64) };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} examples ({per_sec:1}, ETA {eta})").unwrap(),
        );
        let e = engine::evaluate_with(predictor, &examples, &ids, steps, batch_nodes, |n| bar.inc(n as u64));
        bar.finish_and_clear();
        let t = e.total;
        let depth = match (steps, stop) {
            (Some(t), _) => format!("T={t}"),
            (None, Some(s)) => format!("adaptive depth (tolerance {}, at most {} steps)", s.tolerance, s.max_steps),
            (None, None) => unreachable!("a fixed T or a stopping rule"),
        };
        let mean = |(sum, n): (u64, u64)| if n > 0 { sum as f64 / n as f64 } else { 0.0 };
        if json {
            let by_steps: Vec<serde_json::Value> = BUCKETS
                .iter()
                .enumerate()
                .filter(|(i, _)| e.buckets[*i].0 > 0)
                .map(|(i, (name, _, _))| {
                    let (n, c) = e.buckets[i];
                    json!({
                        "steps": name, "examples": n, "precision": c.precision(), "recall": c.recall(), "f1": c.f1(),
                        "mean_steps_run": mean((e.steps[i].0, n)), "mean_steps_needed": mean((e.steps[i].1, n)),
                    })
                })
                .collect();
            println!(
                "{}",
                json!({
                    "task": task.to_string(), "subset": subset.name().to_lowercase(), "steps": steps,
                    "stop": stop.map(|s| json!({"tolerance": s.tolerance, "max_steps": s.max_steps})),
                    "examples": e.examples,
                    "precision": t.precision(), "recall": t.recall(), "f1": t.f1(),
                    "tp": t.tp, "fp": t.fp, "fn": t.fn_, "vocab_coverage": examples.vocab_coverage(),
                    "examples_available": available, "by_steps": by_steps,
                })
            );
        } else {
            let sample = if ids.len() < available { format!(" (a seeded sample of {available})") } else { String::new() };
            println!("{task} {} at {depth}: {} examples{sample}, {} labelled nodes", subset.name(), e.examples, t.labelled());
            println!(
                "  precision {:.4}  recall {:.4}  F1 {:.4}  (tp {} fp {} fn {})",
                t.precision(),
                t.recall(),
                t.f1(),
                t.tp,
                t.fp,
                t.fn_
            );
            println!("  by step count:");
            for (i, (name, _, _)) in BUCKETS.iter().enumerate() {
                let (n, c) = e.buckets[i];
                if n > 0 {
                    let ran = if steps.is_none() {
                        format!("  steps run {:.1} (the analysis's {:.1})", mean((e.steps[i].0, n)), mean((e.steps[i].1, n)))
                    } else {
                        String::new()
                    };
                    println!(
                        "    {name:>7} steps: {n:6} examples  precision {:.4}  recall {:.4}  F1 {:.4}{ran}",
                        c.precision(),
                        c.recall(),
                        c.f1()
                    );
                }
            }
            println!("  vocabulary coverage: {:.2}% of {} graph nodes", 100.0 * examples.vocab_coverage(), examples.all_nodes);
        }
        Ok(())
    }
}

fn print_figures(f: &bench::Figures, json: bool) {
    if json {
        println!("{}", serde_json::to_string(f).unwrap());
    } else {
        println!(
            "{:5} T={:3} {} threads {} {} {}: {} nodes, {} edges: {:.4} s/iter, {:.0} nodes/s, {:.1} graphs/s, {:.1} GFLOP/s (matmul {:.1} GFLOP/s), peak RSS {:.0} MiB",
            f.mode, f.steps, f.threads, f.dtype, f.device, f.engine, f.batch_nodes, f.edges, f.median_s, f.nodes_per_s, f.graphs_per_s, f.gflops, f.matmul_gflops, f.peak_rss_mb
        );
    }
}

/// Nodes per batch of `predict`'s roots (eval's default batch).
const PREDICT_BATCH_NODES: usize = 10_000;

/// `--steps`' bound: a bundle's (`hyper.steps`, `stop.max_steps`).
const MAX_STEPS: i64 = programl_infer::bundle::MAX_STEPS;

/// The most `--threads` take (a 1,024-core machine's worth).
const MAX_THREADS: i32 = 1024;

#[allow(clippy::too_many_arguments)]
fn predict(
    task: &str,
    vocabulary: &programl::vocab::Vocabulary,
    predictor: &engine::Predictor<'_>,
    file: &Path,
    roots: &str,
    steps: Option<i64>,
    seed: u64,
    json: bool,
) -> Result<()> {
    let task = train::parse_task(task)?;
    // A DeepDataFlow bundle reads IR: a source file is named as such, not
    // parsed as IR into "expected top-level entity".
    let ext = file.extension().map(|e| e.to_string_lossy().to_lowercase()).unwrap_or_default();
    if matches!(ext.as_str(), "c" | "h" | "cc" | "cpp" | "cxx" | "c++" | "hpp" | "cl" | "cu" | "i" | "ii") {
        bail!(
            "{}: a source file, and a {task} bundle reads LLVM IR (.ll, .bc): compile it first, e.g. clang-16 -O1 -S -emit-llvm {} -o x.ll",
            file.display(),
            file.display()
        );
    }
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let graph = programl::builder::build(&module, &Default::default());
    let mut analyzer = Analyzer::new(&graph);
    let chosen: Vec<u32> = match roots {
        "sample" => analyzer.sampled_roots(task, seed),
        "all" => analyzer.eligible_roots(task),
        list => {
            let eligible = analyzer.eligible_roots(task);
            list.split(',')
                .map(|s| {
                    let id: u32 = s.trim().parse().with_context(|| format!("--roots: '{s}' is not a node id"))?;
                    if eligible.binary_search(&id).is_err() {
                        // The analysis says why, as `programl analyze` does.
                        match analyzer.analyze(task, id) {
                            Err(why) => bail!("{}: {why} ({} eligible)", file.display(), eligible.len()),
                            Ok(_) => bail!("{}: node {id} is not an eligible {task} root ({} eligible)", file.display(), eligible.len()),
                        }
                    }
                    Ok(id)
                })
                .collect::<Result<_>>()?
        }
    };
    if chosen.is_empty() {
        // Said on stderr, not an empty output that reads as "nothing
        // positive"; not an error (a module without a common subexpression
        // has no subexpressions root, and a loop over files goes on).
        eprintln!("predict: {}: no eligible {task} root, nothing to predict", file.display());
        return Ok(());
    }
    let input = GraphInput::new(&graph, vocabulary)?;
    let kinds: Vec<_> = graph.graph.node_weights().map(|n| n.kind).collect();
    let labelled = data::labelled_nodes(task, &kinds, graph.graph.node_weights().map(|n| n.text.as_str()));
    // The roots in batches of copies of the graph, each copy its own root
    // (as the learned pass batches its roots): each root's result is that
    // of its graph alone.
    let per_batch = (PREDICT_BATCH_NODES / input.node_count().max(1)).max(1);
    for group in chosen.chunks(per_batch) {
        let samples: Vec<Sample<'_>> = group.iter().map(|&root| Sample { graph: &input, root: Some(root), positives: None }).collect();
        let batch = programl::batch::Batch::from_samples(&samples)?;
        let (p, ran) = predictor.positive_probabilities_per_graph(&batch, steps);
        for (g, &root) in group.iter().enumerate() {
            let p = &p[batch.offsets()[g] as usize..];
            if json {
                let nodes: Vec<_> = labelled.iter().map(|&n| json!({"node": n, "p": p[n as usize]})).collect();
                println!(
                    "{}",
                    json!({"file": file.display().to_string(), "task": task.to_string(), "root": root, "steps": ran[g], "nodes": nodes})
                );
            } else {
                let positive: Vec<u32> = labelled.iter().copied().filter(|&n| p[n as usize] > 0.5).collect();
                println!("root {root}: {} of {} labelled nodes predicted positive: {positive:?}", positive.len(), labelled.len());
            }
        }
    }
    Ok(())
}
