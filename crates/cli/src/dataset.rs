//! `programl dataset build|stats|export` and `programl vocab build`:
//! DeepDataFlow datasets (SPEC.md §2), their export to upstream ProGraML's
//! layout, and their node-text vocabulary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use programl::analysis::Task;
use programl_dataset::build::{BuildConfig, Builder, Event, DEFAULT_SHARD_RECORDS};
use programl_dataset::export::{self, ExportConfig, ExportEvent, GRAPH_MODE};
use programl_dataset::stats::PlotFont;
use programl_dataset::{Dataset, Split, Stats, Subset};

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
    /// Write one split of a dataset in upstream ProGraML's on-disk layout,
    /// readable with plain protobuf.
    ///
    /// The layout of upstream's Documentation/DataflowDataset.md:
    /// OUT/graphs/NAME.ProgramGraph.pb, one ProgramGraph per IR file, in the
    /// store's graph mode (the paper's: one node per value);
    /// OUT/labels/ANALYSIS/NAME.ProgramGraphFeaturesList.pb, one
    /// ProgramGraphFeatures per example (node lists data_flow_root_node and
    /// data_flow_value, graph features data_flow_step_count and
    /// data_flow_active_node_count), ANALYSIS being reachability, domtree,
    /// datadep, liveness or subexpressions; OUT/SPLIT/, relative links to
    /// the split's graphs; OUT/vocab/programl.csv, the node texts of the
    /// train split, most frequent first. NAME is the IR file's path in the
    /// corpus with `/` as `+` and other unsafe bytes as %XX.
    ///
    /// data_flow_step_count holds this project's step counts (SPEC.md §2:
    /// synchronous rounds), not upstream's. A graph with no example left in
    /// the subset is not written. Exporting again into OUT is safe, and
    /// exports of other splits and tasks into one OUT add up.
    Export(ExportArgs),
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

/// `programl dataset export`
#[derive(Args)]
pub struct ExportArgs {
    /// Dataset directory.
    #[arg(long)]
    data: PathBuf,
    /// The split to export: train, val or test.
    #[arg(long, value_parser = parse_split)]
    split: Split,
    /// reachability, dominance (or upstream's name, domtree), datadep,
    /// liveness, subexpressions, or all.
    #[arg(long, value_parser = parse_tasks)]
    task: Tasks,
    /// Step-count subset: DDF-30, DDF-60, DDF-200 or DDF (all examples).
    #[arg(long, value_parser = parse_subset, default_value = "DDF")]
    subset: Subset,
    /// Export directory (created if missing).
    #[arg(long)]
    out: PathBuf,
}

/// The tasks of `--task`.
#[derive(Clone)]
pub struct Tasks(Vec<Task>);

fn parse_split(s: &str) -> Result<Split, String> {
    Split::parse(s).ok_or_else(|| format!("unknown split '{s}' (expected train, val or test)"))
}

fn parse_tasks(s: &str) -> Result<Tasks, String> {
    match s {
        "all" => Ok(Tasks(Task::ALL.to_vec())),
        "domtree" => Ok(Tasks(vec![Task::Dominance])),
        _ => Task::parse(s).map(|t| Tasks(vec![t])).ok_or_else(|| {
            format!("unknown task '{s}' (expected {}, domtree or all)", Task::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", "))
        }),
    }
}

fn parse_subset(s: &str) -> Result<Subset, String> {
    Subset::parse(s).ok_or_else(|| format!("unknown subset '{s}' (expected DDF-30, DDF-60, DDF-200 or DDF)"))
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
        DatasetCommand::Export(args) => export(&args),
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
    for lost in builder.lost_shards() {
        let kept = lost.kept_as.as_ref().map(|p| format!(", the file kept as {}", p.display())).unwrap_or_default();
        eprintln!(
            "programl: committed shard {} is lost ({}{kept}): its {} record(s) are built again",
            args.out.join(&lost.file).display(),
            lost.reason,
            lost.records
        );
    }
    if let Some(input) = builder.died_on() {
        eprintln!("programl: the last build died reading {input} alone: recorded as failed (--retry-failed tries it again)");
    }
    if builder.suspects() > 0 {
        eprintln!("programl: the last build died reading one of {} input(s): reading them first, one at a time", builder.suspects());
    }
    let skipped = builder.inputs() - builder.pending();
    let bar = ProgressBar::new(builder.pending() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} files  {per_sec:1}  ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if skipped > 0 {
        // (A hidden bar drops its println: stderr not a terminal.)
        bar.suspend(|| eprintln!("programl: resuming: {skipped} of {} inputs already recorded", builder.inputs()));
    }
    let examples = AtomicUsize::new(0);
    let shards = AtomicUsize::new(0);
    let progress = PlainProgress::new(&bar, builder.pending());
    let report = builder.run(&|event| match event {
        Event::Done { examples: n, .. } => {
            let total = examples.fetch_add(n, Ordering::Relaxed) + n;
            bar.set_message(format!("{total} examples, {} shards", shards.load(Ordering::Relaxed)));
            bar.inc(1);
            progress.tick(&format!("{total} examples"));
        }
        Event::Failed { error, .. } => {
            bar.suspend(|| eprintln!("programl: {}", error.lines().next().unwrap_or(error)));
            bar.inc(1);
            progress.tick(&format!("{} examples", examples.load(Ordering::Relaxed)));
        }
        Event::Shard { .. } => {
            shards.fetch_add(1, Ordering::Relaxed);
        }
    });
    bar.finish_and_clear();
    let report = report?;

    let mut out = crate::stdout();
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

/// Progress as plain lines on stderr, every [`PlainProgress::EVERY`], where
/// the bar is hidden (stderr is not a terminal: a build under nohup, in CI,
/// or with `2>log`), so that a long build still says its rate and ETA.
pub(crate) struct PlainProgress<'a> {
    bar: &'a ProgressBar,
    total: usize,
    start: std::time::Instant,
    last: std::sync::Mutex<std::time::Instant>,
}

impl<'a> PlainProgress<'a> {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    pub(crate) fn new(bar: &'a ProgressBar, total: usize) -> PlainProgress<'a> {
        let now = std::time::Instant::now();
        PlainProgress { bar, total, start: now, last: std::sync::Mutex::new(now) }
    }

    /// After an input: a line if the bar is hidden and one is due.
    pub(crate) fn tick(&self, what: &str) {
        if !self.bar.is_hidden() {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        // Nothing for a run shorter than one interval: its report says it all.
        if last.elapsed() < Self::EVERY {
            return;
        }
        let done = self.bar.position() as usize;
        *last = std::time::Instant::now();
        let rate = done as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
        let eta = if rate > 0.0 { format!("{:.0} s", (self.total - done.min(self.total)) as f64 / rate) } else { "-".into() };
        eprintln!("programl: {done}/{} inputs ({rate:.1}/s, ETA {eta}), {what}", self.total);
    }
}

fn stats(args: &StatsArgs) -> Result<bool> {
    let dataset = Dataset::open(&args.data)?;
    let stats = Stats::collect(&dataset);
    let mut out = crate::stdout();
    writeln!(out, "dataset {}: seed {}, IR from {}", dataset.dir().display(), dataset.info().seed, dataset.info().ir.display())?;
    match dataset.info().corpus.as_slice() {
        [] => writeln!(out, "corpus: none recorded (its IR directory held no corpus-manifest.json of scripts/corpus.sh)")?,
        corpus => {
            for c in corpus {
                writeln!(out, "corpus: {} ({})", c.name(), c.path)?;
            }
        }
    }
    write!(out, "{}", stats.render())?;
    for f in dataset.failures() {
        writeln!(out, "failed input: {}", f.error.lines().next().unwrap_or(&f.error))?;
    }
    let plot = (!args.no_plot).then(|| args.plot.clone().unwrap_or_else(|| args.data.join("stats.png")));
    if let Some(path) = &plot {
        let font = match args.font.as_deref() {
            None => PlotFont::Auto,
            Some(f) if f == Path::new("none") => PlotFont::None,
            // A font asked for by name that cannot be read is an error, not
            // a plot quietly drawn in another.
            Some(f) => {
                std::fs::File::open(f).with_context(|| format!("--font {}", f.display()))?;
                PlotFont::File(f)
            }
        };
        let outcome = stats.plot(path, font)?;
        if let (PlotFont::File(asked), Some(used)) = (font, &outcome.font) {
            if used.as_path() != asked {
                eprintln!("programl: --font {}: not a usable TrueType font; the plot used {}", asked.display(), used.display());
            }
        }
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

fn export(args: &ExportArgs) -> Result<bool> {
    let dataset = Dataset::open(&args.data)?;
    let config = ExportConfig { out: args.out.clone(), split: args.split, tasks: args.task.0.clone(), subset: args.subset };
    let bar = ProgressBar::new(dataset.record_count() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} records  {per_sec:1}  ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let written = AtomicUsize::new(0);
    let report = export::export(&dataset, &config, &|event| match event {
        ExportEvent::Record { exported, .. } => {
            if exported {
                let n = written.fetch_add(1, Ordering::Relaxed) + 1;
                bar.set_message(format!("{n} graphs written"));
            }
            bar.inc(1);
        }
        ExportEvent::Corrupt { error } => bar.suspend(|| eprintln!("programl: {error}")),
    });
    bar.finish_and_clear();
    let report = report.with_context(|| format!("exporting {} to {}", args.data.display(), args.out.display()))?;

    let mut out = crate::stdout();
    writeln!(
        out,
        "export {}: {} split of {}, subset {}, graphs in the store's mode {GRAPH_MODE:?} (the paper's: one node per value)",
        args.out.display(),
        args.split,
        args.data.display(),
        args.subset
    )?;
    writeln!(
        out,
        "  graphs: {} written to graphs/ and linked from {}/; {} of the split's {} records have no example in {} and were left out",
        report.graphs,
        args.split,
        report.records - report.graphs,
        report.records,
        args.subset
    )?;
    for &task in &config.tasks {
        let files = report.label_files.get(&task).copied().unwrap_or(0);
        let examples = report.examples.get(&task).copied().unwrap_or(0);
        writeln!(out, "  {:<15} {examples:>8} examples in {files:>6} files -> labels/{}/", task.name(), export::analysis_dir(task))?;
    }
    if report.removed > 0 {
        writeln!(out, "  removed {} stale label file(s) of graphs now without examples", report.removed)?;
    }
    match &report.vocab {
        Some((path, texts)) => writeln!(out, "  vocabulary: {texts} node texts of the train split -> {}", path.display())?,
        None => writeln!(out, "  vocabulary: not written (a shard could not be read)")?,
    }
    writeln!(out, "  data_flow_step_count holds this project's step counts (SPEC.md §2: synchronous rounds), not upstream's")?;
    for e in &report.shard_errors {
        eprintln!("programl: {e}");
    }
    Ok(report.shard_errors.is_empty())
}

fn vocab(args: &VocabArgs) -> Result<bool> {
    let dataset = Dataset::open(&args.data)?;
    let (vocab, report) = programl_dataset::vocab::build(&dataset, args.min_count, args.max_size)?;
    let output = args.output.clone().unwrap_or_else(|| args.data.join("vocab.json"));
    vocab.save(&output).with_context(|| format!("saving the vocabulary of {}", args.data.display()))?;
    let mut out = crate::stdout();
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
