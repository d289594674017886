//! `programl`: ProGraML program graphs from LLVM IR files.
//!
//! ```text
//! programl graph [--format pb|pbtxt|json|dot] [--compat programl-0.3] [-o OUT] FILES...
//! programl summary GRAPH...
//! programl convert --format FORMAT [-o OUT] GRAPH
//! programl analyze --task TASK [--root N] FILE
//! programl dataset build --ir DIR --out DATA | dataset stats DATA
//! programl vocab build DATA
//! programl annotations ANNOTATED.ll...
//! programl plugin-path
//! ```

mod analyze;
mod annotations;
mod crash;
mod dataset;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use programl::builder::{build_file, BuildOptions, Mode};
use programl::format::{write_graph, Format};
use programl::graph::{Flow, NodeKind};

#[derive(Parser)]
#[command(name = "programl", version, about = "ProGraML program graphs from LLVM IR")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the program graph of each .ll/.bc file (directories are
    /// searched for them). One input without -o writes to stdout; several
    /// inputs need -o DIR, where outputs mirror the inputs' names.
    Graph(GraphArgs),
    /// Convert a graph file (.pb, .pbtxt, .json) to another format; to
    /// stdout unless -o is given.
    Convert {
        /// Output format.
        #[arg(long, value_parser = parse_format)]
        format: Format,
        /// Output file.
        #[arg(short, long)]
        output: Option<PathBuf>,
        file: PathBuf,
    },
    /// Print node and edge counts by type of graph files (.pb, .pbtxt, .json).
    Summary {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run a DeepDataFlow analysis on one IR file; prints one JSON object
    /// per root: {"task","root","steps","positives"}.
    Analyze(analyze::AnalyzeArgs),
    /// DeepDataFlow datasets: label IR files for the five tasks (build),
    /// print their statistics (stats), write a split as upstream's files
    /// (export).
    #[command(subcommand)]
    Dataset(dataset::DatasetCommand),
    /// Node-text vocabulary of a dataset's train split.
    #[command(subcommand)]
    Vocab(dataset::VocabCommand),
    /// Read the learned pass's annotations (`programl-infer` metadata) back
    /// from IR files as JSON, one object per file.
    Annotations(annotations::AnnotationsArgs),
    /// Print the absolute path of the LLVM pass plugin.
    PluginPath,
}

/// `programl graph`
#[derive(clap::Args)]
struct GraphArgs {
    /// Output format (default: `-o FILE`'s extension where it names one of
    /// them, else pb).
    #[arg(long, value_parser = parse_format)]
    format: Option<Format>,
    /// Reproduce another implementation's graphs: `programl-0.3`.
    #[arg(long, value_parser = parse_mode)]
    compat: Option<Mode>,
    /// Output file (one input) or directory.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(short = 'j', long)]
    jobs: Option<usize>,
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// With -o DIR: skip inputs whose graph is already there (outputs are
    /// written atomically, so a present file is complete), to finish an
    /// interrupted run.
    #[arg(long)]
    resume: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| format!("unknown format '{s}' (expected pb, pbtxt, json or dot)"))
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown compat mode '{s}' (expected programl-0.3)"))
}

fn main() -> ExitCode {
    // Past a file size limit (`ulimit -f`), write() fails with EFBIG once
    // SIGXFSZ is ignored, and the write's error names the file; by default
    // the signal kills the process, without a word on which file. An atomic
    // write cut short either way leaves the target as it was.
    // SAFETY: setting a signal's disposition to SIG_IGN, before any thread.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    // LLVM's reader killing the process on a damaged file: name the file.
    crash::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Graph(args) => graph(&args),
        Command::Summary { files } => summary(&files),
        Command::Convert { format, output, file } => convert(&file, format, stdout_dash(output.as_deref())),
        Command::Analyze(args) => analyze::run(&args),
        Command::Dataset(command) => dataset::run_dataset(command),
        Command::Vocab(command) => dataset::run_vocab(command),
        Command::Annotations(args) => annotations::run(&args),
        Command::PluginPath => plugin_path().and_then(|p| {
            writeln!(stdout(), "{}", p.display())?;
            Ok(true)
        }),
    };
    // Rust flushes stdout at exit and drops the error: a tail lost to a full
    // disk would go unnoticed.
    let result = result.and_then(|ok| stdout().flush().map(|()| ok).map_err(Into::into));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        // A closed pipe (`programl ... | head`) is the reader's choice.
        Err(e) if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("programl: {}", message(&e));
            ExitCode::from(2)
        }
    }
}

/// `e` and its causes on one line ([`programl::error_line`]).
fn message(e: &anyhow::Error) -> String {
    programl::error_line(e.as_ref())
}

/// Standard output, locked; its write errors name it (`<stdout>: cannot
/// write: ...`), keeping their kind (a closed pipe stays one).
pub(crate) struct Stdout(std::io::StdoutLock<'static>);

pub(crate) fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

impl Stdout {
    fn named(e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("<stdout>: cannot write: {e}"))
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).map_err(Stdout::named)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_all(buf).map_err(Stdout::named)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(Stdout::named)
    }
}

/// One input file and where its graph goes (relative to the output dir).
struct Job {
    input: PathBuf,
    relative: PathBuf,
}

fn collect_inputs(args: &[PathBuf]) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for arg in args {
        if arg.is_dir() {
            let found = programl::ir::find_ir_files(arg)?;
            for input in found {
                let relative = input.strip_prefix(arg).unwrap_or(&input).to_path_buf();
                jobs.push(Job { input, relative });
            }
        } else {
            let name = arg.file_name().map(PathBuf::from).unwrap_or_else(|| arg.clone());
            jobs.push(Job { input: arg.clone(), relative: name });
        }
    }
    Ok(jobs)
}

/// Writes `bytes` to `path` atomically, so readers never see a partial graph;
/// its errors name `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    programl::fsutil::write_bytes_atomically(path, programl::fsutil::Durability::Atomic, bytes)
}

fn render(input: &Path, format: Format, options: &BuildOptions) -> Result<Vec<u8>> {
    let graph = build_file(input, options)?;
    let mut out = Vec::new();
    write_graph(&graph, format, &mut out).with_context(|| format!("{}: writing {format}", input.display()))?;
    Ok(out)
}

/// `-o -` is standard output, as it is to clang and most tools (it wrote a
/// file named `-`); `-o ./-` names such a file.
fn stdout_dash(output: Option<&Path>) -> Option<&Path> {
    output.filter(|o| o.as_os_str() != "-")
}

fn graph(args: &GraphArgs) -> Result<bool> {
    let (files, jobs) = (&args.files, args.jobs);
    let output = stdout_dash(args.output.as_deref());
    if output.is_none() && args.output.is_some() && (collect_inputs(files)?.len() != 1 || files[0].is_dir()) {
        bail!("-o -: standard output takes one input's graph; for several, give an output directory with -o DIR");
    }
    let options = &BuildOptions { mode: args.compat.unwrap_or_default(), ..Default::default() };
    let inputs = collect_inputs(files)?;
    if inputs.is_empty() {
        bail!("no .ll or .bc files in {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(" "));
    }
    let single = inputs.len() == 1 && !files[0].is_dir();
    // One input: stdout, or -o names the file unless it is a directory.
    if single && output.is_none_or(|o| !o.is_dir() && !o.to_string_lossy().ends_with('/')) {
        // `-o x.json` without --format writes JSON, not protobuf under a
        // .json name that `summary` and `convert` would then refuse.
        let by_name = output.and_then(|o| o.extension()).and_then(|e| e.to_str()).and_then(Format::parse);
        let format = args.format.or(by_name).unwrap_or(Format::Pb);
        let input = &inputs[0].input;
        return match render(input, format, options) {
            Ok(bytes) => {
                match output {
                    Some(path) => write_atomically(path, &bytes)?,
                    None => stdout().write_all(&bytes)?,
                }
                Ok(true)
            }
            Err(e) => {
                eprintln!("programl: {}", message(&e));
                Ok(false)
            }
        };
    }
    let format = args.format.unwrap_or(Format::Pb);
    let Some(dir) = output else {
        bail!("{} inputs: give an output directory with -o DIR", inputs.len());
    };
    // By the file each would write: `a.ll` and `a.bc` both write `a.pb`.
    let targets: Vec<PathBuf> = inputs.iter().map(|job| dir.join(job.relative.with_extension(format.extension()))).collect();
    let mut seen = std::collections::HashMap::new();
    for (job, target) in inputs.iter().zip(&targets) {
        if let Some(first) = seen.insert(target, &job.input) {
            bail!(
                "{} and {} would both write {}: pass them in separate runs, or their common parent directory",
                first.display(),
                job.input.display(),
                target.display()
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create directory", dir.display()))?;

    // LLVM's reader crashes the process on some damaged bitcode, beyond any
    // error handling: a journal of the inputs being read (`DIR/.inflight`,
    // programl::journal) lets the next run read those an earlier one died
    // reading alone, first, and skip (as failed) the one it died on alone,
    // in this run and every later one while the journal names it.
    let journal_path = dir.join(programl::journal::JOURNAL);
    let record = programl::journal::Journal::read(&journal_path).with_context(|| format!("{}: cannot read", journal_path.display()))?;
    let mut crashed = record.crashed;
    crashed.extend(record.died_alone);
    let key = |job: &Job| job.relative.to_string_lossy().into_owned();
    let journal = programl::journal::Journal::create(&journal_path, crashed.iter().map(String::as_str))
        .with_context(|| format!("{}: cannot write", journal_path.display()))?;
    let (mut order, mut alone) = (Vec::with_capacity(inputs.len()), 0);
    for first in [true, false] {
        for (i, job) in inputs.iter().enumerate() {
            if record.in_flight.contains(&key(job)) == first {
                order.push(i);
                alone += first as usize;
            }
        }
    }

    // The main thread's stack (8 MiB) and more: deeply nested IR types
    // recurse in LLVM and the builder, and a 2 MiB worker overflowed on IR
    // that one file on the main thread read.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.unwrap_or(0))
        .stack_size(programl::WORKER_STACK)
        .build()
        .context("starting worker threads")?;
    let bar = ProgressBar::new(inputs.len() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} files  {per_sec:1}  ETA {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let failed = AtomicUsize::new(0);
    let skipped = AtomicUsize::new(0);
    // A full disk (or a read-only one) fails every file after it: the run
    // stops at the first such error instead of trying them all.
    let full = std::sync::OnceLock::<String>::new();
    let left = AtomicUsize::new(0);
    let progress = dataset::PlainProgress::new(&bar, inputs.len());
    let one = |tag: char, i: usize| {
        let (job, target) = (&inputs[i], &targets[i]);
        // Written by an earlier run: done, full disk or not.
        if args.resume && target.is_file() {
            skipped.fetch_add(1, Ordering::Relaxed);
            bar.inc(1);
            return;
        }
        if full.get().is_some() {
            left.fetch_add(1, Ordering::Relaxed);
            bar.inc(1);
            return;
        }
        let name = key(job);
        let result = if crashed.contains(&name) {
            Err(anyhow::anyhow!(
                "{}: skipped: an earlier run into {} died reading it alone (LLVM's reader crashes on some damaged bitcode; delete {} to read it again)",
                job.input.display(),
                dir.display(),
                journal_path.display()
            ))
        } else {
            journal.note(tag, &name);
            let result = render(&job.input, format, options).and_then(|bytes| write_atomically(target, &bytes).map_err(Into::into));
            journal.note('F', &name);
            result
        };
        if let Err(e) = result {
            failed.fetch_add(1, Ordering::Relaxed);
            bar.suspend(|| eprintln!("programl: {}", message(&e)));
            let kind = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>()).map(std::io::Error::kind);
            if matches!(
                kind,
                Some(std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded | std::io::ErrorKind::ReadOnlyFilesystem)
            ) {
                let _ = full.set(e.chain().last().map_or_else(String::new, ToString::to_string));
            }
        }
        bar.inc(1);
        progress.tick(&format!("{} failed", failed.load(Ordering::Relaxed)));
    };
    pool.install(|| {
        // What an earlier run died reading beside others: one at a time,
        // so that a crash names its input.
        for &i in &order[..alone] {
            one('A', i);
        }
        order[alone..].par_iter().for_each(|&i| one('S', i));
    });
    bar.finish_and_clear();
    // An orderly end: the journal keeps only the inputs known to crash.
    drop(journal);
    if crashed.is_empty() {
        let _ = std::fs::remove_file(&journal_path);
    } else {
        programl::journal::Journal::create(&journal_path, crashed.iter().map(String::as_str))
            .with_context(|| format!("{}: cannot write", journal_path.display()))?;
    }
    let skipped = skipped.into_inner();
    if skipped > 0 {
        eprintln!("programl: {skipped} of {} graphs were already written (--resume)", inputs.len());
    }
    let failed = failed.into_inner();
    if failed > 0 {
        eprintln!("programl: {failed} of {} files failed", inputs.len());
    }
    if let Some(cause) = full.into_inner() {
        eprintln!(
            "programl: stopped: {} cannot take more ({cause}); {} files not tried: make room and run again with --resume",
            dir.display(),
            left.into_inner()
        );
        return Ok(false);
    }
    Ok(failed == 0)
}

fn summary(files: &[PathBuf]) -> Result<bool> {
    let mut ok = true;
    let mut out = stdout();
    for path in files {
        match summarize(path) {
            Ok(text) => out.write_all(text.as_bytes())?,
            Err(e) => {
                eprintln!("programl: {}", message(&e));
                ok = false;
            }
        }
    }
    Ok(ok)
}

/// Reads a graph file, its format named by its extension.
fn read_graph_file(path: &Path) -> Result<programl::ProgramGraph> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let format = Format::parse(ext)
        .filter(|f| *f != Format::Dot)
        .with_context(|| format!("{}: unknown graph format (expected .pb, .pbtxt or .json)", path.display()))?;
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    programl::format::read_graph(&bytes, format).with_context(|| format!("{}: not a program graph", path.display()))
}

fn convert(path: &Path, format: Format, output: Option<&Path>) -> Result<bool> {
    let g = match read_graph_file(path) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("programl: {}", message(&e));
            return Ok(false);
        }
    };
    let mut bytes = Vec::new();
    write_graph(&g, format, &mut bytes).with_context(|| format!("{}: writing {format}", path.display()))?;
    match output {
        Some(out) => write_atomically(out, &bytes)?,
        None => stdout().write_all(&bytes)?,
    }
    Ok(true)
}

fn summarize(path: &Path) -> Result<String> {
    let g = read_graph_file(path)?;
    let nodes = g.node_counts();
    let edges = g.edge_counts();
    let max_position = g.graph.edge_weights().map(|e| e.position).max().unwrap_or(0);
    let mut s = format!(
        "{}: {} module(s), {} function(s), {} nodes, {} edges\n",
        path.display(),
        g.modules.len(),
        g.functions.len(),
        g.node_count(),
        g.edge_count()
    );
    let kinds = NodeKind::ALL.iter().filter(|k| nodes[**k as usize] > 0 || **k != NodeKind::Type);
    s += &format!("  nodes:{}\n", kinds.map(|k| format!("  {} {}", k, nodes[*k as usize])).collect::<String>());
    let flows = Flow::ALL.iter().filter(|f| edges[**f as usize] > 0 || **f != Flow::Type);
    s += &format!("  edges:{}\n", flows.map(|f| format!("  {} {}", f, edges[*f as usize])).collect::<String>());
    s += &format!("  max edge position: {max_position}\n");
    Ok(s)
}

/// The plugin sits next to this binary in a cargo target dir, or in
/// `../lib` of an installed prefix.
fn plugin_path() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the programl binary")?;
    let dir = exe.parent().context("locating the programl binary's directory")?;
    let name = format!("{}programl_passes{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    for candidate in [dir.join(&name), dir.join("../lib").join(&name), dir.join("../release").join(&name)] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize().unwrap_or(candidate));
        }
    }
    bail!("the plugin {name} is not built next to {}: run `cargo build --release -p programl-passes`", exe.display())
}
