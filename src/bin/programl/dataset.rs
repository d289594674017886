//! `programl dataset build|stats` and `programl vocab build`: DeepDataFlow
//! datasets (SPEC.md §2) and their node-text vocabulary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use programl::analysis::Task;
use programl::dataset::build::{BuildConfig, Builder, Event, DEFAULT_SHARD_RECORDS};
use programl::dataset::stats::PlotFont;
use programl::dataset::{Dataset, Split, Stats, Vocabulary};

/// `programl dataset …`
#[derive(Subcommand)]
pub enum DatasetCommand {
    /// Label every .ll/.bc file under --ir (recursively) for the five
    /// DeepDataFlow tasks and store graphs and examples in --out. Resumable:
    /// run it again after a crash or kill and it labels only what is
    /// missing. Failed inputs are recorded and reported, not retried.
    Build(BuildArgs),
    /// Print a dataset's example counts per task, split and subset, label
    /// balance and histograms, and plot them as a PNG (DATA/stats.png).
    Stats(StatsArgs),
}

/// `programl dataset build`
#[derive(Args)]
pub struct BuildArgs {
    /// Directory of IR files (searched recursively).
    #[arg(long)]
    ir: PathBuf,
    /// Dataset directory (created, or resumed if it exists).
    #[arg(long)]
    out: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(short = 'j', long)]
    jobs: Option<usize>,
    /// Seed of the root sampling (a resumed build must use the same).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Records per shard.
    #[arg(long, default_value_t = DEFAULT_SHARD_RECORDS, hide = true)]
    shard_size: usize,
    /// Try the inputs that failed in earlier runs again.
    #[arg(long)]
    retry_failed: bool,
}

/// `programl dataset stats`
#[derive(Args)]
pub struct StatsArgs {
    /// Dataset directory.
    data: PathBuf,
    /// Where to draw the statistics as a PNG (default: DATA/stats.png).
    #[arg(long, conflicts_with = "no_plot")]
    plot: Option<PathBuf>,
    /// Print the statistics only.
    #[arg(long)]
    no_plot: bool,
    /// TrueType font for the plot's texts (default: $PROGRAML_FONT, then
    /// DejaVu Sans or Liberation Sans); `none` draws no text.
    #[arg(long)]
    font: Option<PathBuf>,
}

/// `programl vocab …`
#[derive(Subcommand)]
pub enum VocabCommand {
    /// Build the node-text vocabulary from a dataset's train split and
    /// report its coverage of the validation and test splits.
    Build(VocabArgs),
}

/// `programl vocab build`
#[derive(Args)]
pub struct VocabArgs {
    /// Dataset directory.
    data: PathBuf,
    /// Output file (default: DATA/vocab.json).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Keep only texts seen at least this often in training.
    #[arg(long, default_value_t = 1)]
    min_count: u64,
    /// Keep at most this many texts (the most frequent).
    #[arg(long)]
    max_size: Option<usize>,
}

/// Runs a `dataset` subcommand; `Ok(false)` means "finished, with errors".
pub fn run_dataset(command: DatasetCommand) -> Result<bool> {
    match command {
        DatasetCommand::Build(args) => build(&args),
        DatasetCommand::Stats(args) => stats(&args),
    }
}

/// Runs a `vocab` subcommand.
pub fn run_vocab(command: VocabCommand) -> Result<bool> {
    match command {
        VocabCommand::Build(args) => vocab(&args),
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn build(args: &BuildArgs) -> Result<bool> {
    let config = BuildConfig {
        jobs: args.jobs.unwrap_or(0),
        seed: args.seed,
        shard_records: args.shard_size,
        retry_failed: args.retry_failed,
        ..BuildConfig::new(&args.ir, &args.out)
    };
    let builder = Builder::open(config)?;
    if builder.orphans_removed() > 0 {
        eprintln!("programl: removed {} uncommitted shard(s) of an interrupted build", builder.orphans_removed());
    }
    let skipped = builder.inputs() - builder.pending();
    let bar = ProgressBar::new(builder.pending() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} files  {per_sec}  ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if skipped > 0 {
        bar.println(format!("resuming: {skipped} of {} inputs already recorded", builder.inputs()));
    }
    let examples = AtomicUsize::new(0);
    let shards = AtomicUsize::new(0);
    let report = builder.run(&|event| match event {
        Event::Done { examples: n, .. } => {
            let total = examples.fetch_add(n, Ordering::Relaxed) + n;
            bar.set_message(format!("{total} examples, {} shards", shards.load(Ordering::Relaxed)));
            bar.inc(1);
        }
        Event::Failed { error, .. } => {
            bar.suspend(|| eprintln!("programl: {}", error.lines().next().unwrap_or(error)));
            bar.inc(1);
        }
        Event::Shard { .. } => {
            shards.fetch_add(1, Ordering::Relaxed);
        }
    });
    bar.finish_and_clear();
    let report = report?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "dataset {}:", args.out.display())?;
    writeln!(
        out,
        "  inputs: {} IR files, {} already recorded; this run: {} ok, {} failed, {} shard(s) ({})",
        report.inputs,
        report.skipped,
        report.ok,
        report.failed.len(),
        report.shards_written,
        mib(report.shard_bytes / 1024)
    )?;
    writeln!(out, "  dataset now: {} records, {} failed inputs", report.total_records, report.total_failures)?;
    let per_task: Vec<String> = Task::ALL.iter().map(|t| format!("{t} {}", report.examples.get(t).copied().unwrap_or(0))).collect();
    writeln!(out, "  examples this run: {}", per_task.join(", "))?;
    writeln!(out, "  labelling time per task (eligible roots + analyses, summed over workers):")?;
    for task in Task::ALL {
        let n = report.examples.get(&task).copied().unwrap_or(0);
        let t = report.label_time.get(&task).copied().unwrap_or_default();
        let rate = report.labels_per_second(task).map_or("-".to_string(), |r| format!("{r:.0}"));
        writeln!(out, "    {:<15} {n:>8} examples  {:>9.3} s  {rate:>9} labels/s", task.name(), t.as_secs_f64())?;
    }
    writeln!(
        out,
        "  graph construction: {} graphs, {} nodes, {:.3} s summed over workers",
        report.ok,
        report.nodes,
        report.graph_time.as_secs_f64()
    )?;
    let wall = report.wall.as_secs_f64();
    let rate = if wall > 0.0 { (report.ok + report.failed.len()) as f64 / wall } else { 0.0 };
    writeln!(out, "  wall time {wall:.2} s ({rate:.1} files/s); peak RSS {}", report.peak_rss_kib.map_or("unknown".to_string(), mib))?;
    if !report.failed.is_empty() {
        writeln!(out, "failed inputs (recorded; `--retry-failed` tries them again):")?;
        for (_, error) in &report.failed {
            writeln!(out, "  {}", error.lines().next().unwrap_or(error))?;
        }
    }
    Ok(true)
}

fn stats(args: &StatsArgs) -> Result<bool> {
    let dataset = Dataset::open(&args.data)?;
    let stats = Stats::collect(&dataset);
    let mut out = std::io::stdout().lock();
    writeln!(out, "dataset {}: seed {}, IR from {}", dataset.dir().display(), dataset.info().seed, dataset.info().ir.display())?;
    write!(out, "{}", stats.render())?;
    for f in dataset.failures() {
        writeln!(out, "failed input: {}", f.error.lines().next().unwrap_or(&f.error))?;
    }
    let plot = (!args.no_plot).then(|| args.plot.clone().unwrap_or_else(|| args.data.join("stats.png")));
    if let Some(path) = &plot {
        let font = match args.font.as_deref() {
            None => PlotFont::Auto,
            Some(f) if f == Path::new("none") => PlotFont::None,
            Some(f) => PlotFont::File(f),
        };
        let outcome = stats.plot(path, font)?;
        match outcome.font {
            Some(font) => writeln!(out, "plot: {} (font {})", path.display(), font.display())?,
            None if font == PlotFont::None => writeln!(out, "plot: {} (no text)", path.display())?,
            None => eprintln!(
                "programl: no TrueType font found (install fonts-dejavu-core, or pass --font or set PROGRAML_FONT): {} has no text",
                path.display()
            ),
        }
    }
    for (_, e) in &stats.shard_errors {
        eprintln!("programl: {e}");
    }
    Ok(stats.shard_errors.is_empty())
}

fn vocab(args: &VocabArgs) -> Result<bool> {
    let dataset = Dataset::open(&args.data)?;
    let (vocab, report) = Vocabulary::build(&dataset, args.min_count, args.max_size)?;
    let output = args.output.clone().unwrap_or_else(|| args.data.join("vocab.json"));
    vocab.save(&output).with_context(|| format!("saving the vocabulary of {}", args.data.display()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "vocabulary: {} texts + the unknown token (id 0), from the train split -> {}", vocab.len() - 1, output.display())?;
    for split in Split::ALL {
        let Some(c) = report.covered.iter().find(|c| c.0 == split) else { continue };
        match report.coverage(split) {
            Some(share) => writeln!(out, "  coverage {:<5} {:>8.3}%  ({} of {} node occurrences)", split.name(), share * 100.0, c.1, c.2)?,
            None => writeln!(out, "  coverage {:<5}        -  (no records)", split.name())?,
        }
    }
    Ok(true)
}
