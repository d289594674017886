//! Building a dataset: IR files → labelled records → shards, in parallel,
//! resumable.
//!
//! Workers (a rayon pool) each take one IR file at a time: a fresh LLVM
//! context, the graph, the analyses, the encoded record. They send it over a
//! bounded channel to one writer thread, which batches records into shards
//! and commits each shard (write to a temporary name, fsync, rename, fsync
//! the directory, then append the shard's line to the manifest and fsync
//! it). Memory stays bounded whatever the corpus size: at most one file per
//! worker, the channel's few records and one shard's buffer.
//!
//! Resuming: [`Builder::open`] reads the manifest, deletes shard files no
//! manifest line names (a kill between rename and manifest append) and
//! temporary files, drops the lines of committed shards that are gone from
//! the disk or cut short ([`LostShard`]: their inputs are read again), and
//! skips every input that a committed shard or a failure line already
//! records. An input is thus in exactly one committed record or failure,
//! however often the build is killed.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use programl::journal::Journal;
use rayon::prelude::*;

use super::manifest::{self, Appender, Line, Manifest};
use super::shard;
use super::{split_key, split_of, DatasetError, Example, Record, StoredGraph, Task};
use programl::analysis::Analyzer;
use programl::builder::{build_file, BuildOptions};

/// Records per shard unless told otherwise.
pub const DEFAULT_SHARD_RECORDS: usize = 256;
/// A shard is also closed once its encoded records reach this many bytes.
pub const DEFAULT_SHARD_BYTES: usize = 64 << 20;

/// What to build, and where.
#[derive(Clone, Debug)]
pub struct BuildConfig {
    /// The directory searched (recursively) for `.ll` and `.bc` files.
    pub ir: PathBuf,
    /// The dataset directory (created if missing; resumed if it exists).
    pub out: PathBuf,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
    /// The root-sampling seed; a resumed build must use the same.
    pub seed: u64,
    /// Close a shard after this many records.
    pub shard_records: usize,
    /// Close a shard after this many encoded bytes.
    pub shard_bytes: usize,
    /// Try again the inputs that failed in an earlier run.
    pub retry_failed: bool,
}

impl BuildConfig {
    /// A configuration with the defaults: all cores, seed 0,
    /// [`DEFAULT_SHARD_RECORDS`], [`DEFAULT_SHARD_BYTES`].
    pub fn new(ir: impl Into<PathBuf>, out: impl Into<PathBuf>) -> BuildConfig {
        BuildConfig {
            ir: ir.into(),
            out: out.into(),
            jobs: 0,
            seed: 0,
            shard_records: DEFAULT_SHARD_RECORDS,
            shard_bytes: DEFAULT_SHARD_BYTES,
            retry_failed: false,
        }
    }
}

/// Progress, reported from the writer thread as it happens.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// An input was labelled (its record is buffered, not yet committed).
    Done {
        /// Its relative path.
        input: &'a str,
        /// Examples over all tasks.
        examples: usize,
    },
    /// An input failed; the failure is recorded in the manifest.
    Failed {
        /// Its relative path.
        input: &'a str,
        /// Why.
        error: &'a str,
    },
    /// A shard was committed.
    Shard {
        /// Its file name.
        file: &'a str,
        /// Records in it.
        records: usize,
    },
}

/// What a build did, with the figures for benchmarks.
#[derive(Clone, Debug, Default)]
pub struct BuildReport {
    /// IR files found under the IR directory.
    pub inputs: usize,
    /// Inputs skipped because an earlier run recorded them.
    pub skipped: usize,
    /// Inputs labelled by this run.
    pub ok: usize,
    /// Inputs that failed in this run: (relative path, error).
    pub failed: Vec<(String, String)>,
    /// Records in the dataset after the run.
    pub total_records: usize,
    /// Failed inputs recorded in the dataset after the run.
    pub total_failures: usize,
    /// Shards committed by this run.
    pub shards_written: usize,
    /// Bytes of the shards committed by this run.
    pub shard_bytes: u64,
    /// Orphan shards and temporary files deleted when the run started.
    pub orphans_removed: usize,
    /// Examples made by this run, per task.
    pub examples: BTreeMap<Task, u64>,
    /// Time spent labelling (eligible roots + analyses), per task, summed
    /// over workers.
    pub label_time: BTreeMap<Task, Duration>,
    /// Time spent loading IR and building graphs, summed over workers.
    pub graph_time: Duration,
    /// Nodes of the graphs labelled by this run.
    pub nodes: u64,
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// Peak resident memory of the process (VmHWM), KiB, where known.
    pub peak_rss_kib: Option<u64>,
}

impl BuildReport {
    /// Examples of `task` per second of labelling time (summed over workers).
    pub fn labels_per_second(&self, task: Task) -> Option<f64> {
        let n = *self.examples.get(&task)? as f64;
        let t = self.label_time.get(&task)?.as_secs_f64();
        (t > 0.0).then_some(n / t)
    }
}

/// One IR file to label.
#[derive(Clone, Debug)]
struct Input {
    path: PathBuf,
    relative: String,
}

/// A build, opened (dataset locked, manifest read, orphans removed, inputs
/// listed) and ready to [`run`](Builder::run).
pub struct Builder {
    config: BuildConfig,
    manifest: Manifest,
    _lock: std::fs::File,
    pending: Vec<Input>,
    /// Inputs of `pending` that were being read when an earlier run died:
    /// read first, one at a time ([`JOURNAL`]).
    suspects: usize,
    /// An input on which an earlier run died reading it alone, recorded
    /// as failed by this open.
    died_on: Option<String>,
    inputs: usize,
    orphans_removed: usize,
    lost: Vec<LostShard>,
    next_shard: u64,
}

/// A shard the manifest committed that is no longer on the disk as it was
/// committed (deleted, cut short, overwritten by another size). The build
/// drops its manifest line and reads its inputs again; a file that is there
/// but wrong is kept beside it, renamed, never deleted. (A shard of the
/// right size with damaged bytes is caught by its checksum when read, as
/// `programl dataset stats` does for every shard.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostShard {
    /// Its file name in the dataset directory.
    pub file: String,
    /// Records the manifest committed in it.
    pub records: u32,
    /// What was wrong with it.
    pub reason: String,
    /// Where the file that was there now is (`<file>.damaged`, or
    /// `<file>.damaged-N` when that is taken).
    pub kept_as: Option<PathBuf>,
}

/// Finds the committed shards of `manifest` that are missing or of another
/// size than committed, and moves those that are there aside.
fn set_aside_lost_shards(out: &Path, manifest: &Manifest) -> Result<Vec<LostShard>, DatasetError> {
    let mut lost = Vec::new();
    for shard in &manifest.shards {
        let path = out.join(&shard.file);
        // (Symbolic links followed: readers follow them, and a shard moved
        // to another disk and linked back is still there.)
        let reason = match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() == shard.bytes => continue,
            Ok(m) if m.is_file() => format!("{} bytes on the disk, {} committed", m.len(), shard.bytes),
            Ok(_) => "not a plain file".to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "missing".to_string(),
            Err(e) => return Err(DatasetError::Io { path, source: e }),
        };
        let kept_as = if std::fs::symlink_metadata(&path).is_err() {
            None
        } else {
            let aside = (0..)
                .map(|n| out.join(if n == 0 { format!("{}.damaged", shard.file) } else { format!("{}.damaged-{n}", shard.file) }))
                .find(|p| std::fs::symlink_metadata(p).is_err())
                .unwrap_or_else(|| out.join(format!("{}.damaged", shard.file)));
            std::fs::rename(&path, &aside).map_err(DatasetError::io(&path))?;
            Some(aside)
        };
        lost.push(LostShard { file: shard.file.clone(), records: shard.records, reason, kept_as });
    }
    if lost.iter().any(|l| l.kept_as.is_some()) {
        programl::fsutil::sync_dir(out).map_err(DatasetError::io(out))?;
    }
    Ok(lost)
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder").field("config", &self.config).field("pending", &self.pending.len()).finish()
    }
}

fn lock(dir: &Path) -> Result<std::fs::File, DatasetError> {
    let path = dir.join(".lock");
    programl::fsutil::try_lock(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => DatasetError::Locked { path: dir.to_path_buf() },
        _ => DatasetError::Io { path, source: e },
    })
}

/// `<dataset>/.inflight`, the journal of the inputs being read: a line
/// `S\tINPUT` (started beside others) or `A\tINPUT` (started alone) before
/// an input is read, `F\tINPUT` once it is done with. An input started and
/// not done is one a run died reading: LLVM's bitcode reader crashes the
/// process (SIGSEGV, or abort on "out of memory") on some damaged files,
/// where no Rust code can catch it. The next run reads those first, one at
/// a time; the one it dies on alone, the run after records as failed.
/// Removed when a run ends, by success or error ([`programl::journal`]).
pub const JOURNAL: &str = programl::journal::JOURNAL;

/// The `.ll` and `.bc` files under `dir`, sorted by relative path. Symbolic
/// links to files are followed, to directories not (no cycles).
fn collect_inputs(dir: &Path) -> Result<Vec<Input>, DatasetError> {
    let files = programl::ir::find_ir_files(dir).map_err(DatasetError::io(dir))?;
    let mut found: Vec<Input> = files
        .into_iter()
        .map(|path| {
            let relative =
                path.strip_prefix(dir).unwrap_or(&path).components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
            Input { path, relative }
        })
        .collect();
    found.sort_by(|a, b| a.relative.cmp(&b.relative));
    // Names that are not UTF-8 are recorded lossily: two that become the
    // same name would be one input, and the other silently dropped.
    if let Some(w) = found.windows(2).find(|w| w[0].relative == w[1].relative) {
        return Err(DatasetError::Io {
            path: w[1].path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("its name is not UTF-8 and reads as {}'s, {}: rename it", w[0].path.display(), w[0].relative),
            ),
        });
    }
    Ok(found)
}

impl Builder {
    /// Opens (or creates) the dataset `config.out` for building from
    /// `config.ir`: takes the dataset's lock, checks that a resumed dataset
    /// has the same seed and IR directory, deletes orphan shards and
    /// temporary files, and lists the inputs not yet recorded.
    pub fn open(config: BuildConfig) -> Result<Builder, DatasetError> {
        let out = &config.out;
        // The IR directory is checked before anything is created: a
        // mistyped --ir must not leave a dataset tied to it.
        let ir = config.ir.canonicalize().map_err(DatasetError::io(&config.ir))?;
        if !ir.is_dir() {
            return Err(DatasetError::Io {
                path: config.ir.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory"),
            });
        }
        let all = collect_inputs(&ir)?;
        let corpus = super::corpus::find(&ir)?;
        if all.is_empty() && !out.join(super::MANIFEST).exists() {
            return Err(DatasetError::Io {
                path: config.ir.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no .ll or .bc files"),
            });
        }
        if out.exists() && !out.is_dir() {
            // create_dir_all would say only "File exists".
            return Err(DatasetError::Io {
                path: out.clone(),
                source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "not a directory: --out is the dataset's directory"),
            });
        }
        std::fs::create_dir_all(out).map_err(DatasetError::io(out))?;
        let lock = lock(out)?;
        let ir_text = ir.to_string_lossy().into_owned();
        if !out.join(super::MANIFEST).exists() {
            Manifest::create(out, config.seed, &ir_text, &corpus)?;
        }
        let manifest = Manifest::read(out)?;
        if manifest.seed != config.seed {
            return Err(DatasetError::Mismatch {
                path: out.clone(),
                detail: format!(
                    "built with --seed {}, resumed with --seed {}: use the same seed or a new directory",
                    manifest.seed, config.seed
                ),
            });
        }
        if manifest.ir != ir_text {
            return Err(DatasetError::Mismatch {
                path: out.clone(),
                detail: format!("built from {}, resumed from {ir_text}: use the same IR directory or a new dataset directory", manifest.ir),
            });
        }
        // The corpus must be the one the dataset began with: a resumed
        // build would otherwise mix two. A dataset that recorded none (built
        // before corpus manifests) resumes as it was.
        if !manifest.corpus.is_empty() && manifest.corpus != corpus {
            let names = |c: &[super::corpus::CorpusRef]| {
                if c.is_empty() { "none".to_string() } else { c.iter().map(|c| format!("{} ({})", c.name(), c.path)).collect::<Vec<_>>().join(", ") }
            };
            return Err(DatasetError::Mismatch {
                path: out.clone(),
                detail: format!(
                    "built from the corpus {}, and {ir_text} now holds {}: build into a new dataset directory (scripts/corpus.sh rebuilt or changed a set)",
                    names(&manifest.corpus),
                    names(&corpus)
                ),
            });
        }
        // Committed shards gone from the disk or of another size than
        // committed: their lines go from the manifest and their inputs are
        // read again, so that a resumed build completes the dataset.
        let lost = set_aside_lost_shards(out, &manifest)?;
        let manifest = if lost.is_empty() {
            manifest
        } else {
            manifest.drop_shards(&lost.iter().map(|l| l.file.as_str()).collect())?;
            Manifest::read(out)?
        };
        let committed: HashSet<&str> = manifest.shards.iter().map(|s| s.file.as_str()).collect();
        let mut orphans_removed = 0;
        for entry in std::fs::read_dir(out).map_err(DatasetError::io(out))? {
            let entry = entry.map_err(DatasetError::io(out))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let orphan = (manifest::is_shard_name(&name) && !committed.contains(name.as_str()))
                || (name.ends_with(".tmp") && {
                    // programl::fsutil's temporary names: `.NAME.XXXXXX.tmp`.
                    let stem = name.strip_prefix('.').unwrap_or(&name);
                    stem.starts_with("shard-") || stem.starts_with(super::MANIFEST)
                });
            if orphan {
                std::fs::remove_file(entry.path()).map_err(DatasetError::io(entry.path()))?;
                orphans_removed += 1;
            }
        }
        if orphans_removed > 0 {
            programl::fsutil::sync_dir(out).map_err(DatasetError::io(out))?;
        }
        let mut done: HashSet<&str> = manifest.shards.iter().flat_map(|s| s.inputs.iter().map(String::as_str)).collect();
        if !config.retry_failed {
            done.extend(manifest.failures.iter().map(|(i, _)| i.as_str()));
        }
        // What an earlier run was reading when it died (LLVM's reader
        // crashes the process on some damaged bitcode; a kill looks the
        // same): the input it died on alone is recorded as failed, so that
        // no resume dies on it again; those in flight beside others are
        // read first, one at a time, to find out.
        let journal = out.join(JOURNAL);
        let record = Journal::read(&journal).map_err(DatasetError::io(&journal))?;
        let (died_alone, in_flight) = (record.died_alone, record.in_flight);
        let died_on = died_alone.filter(|r| !done.contains(r.as_str()));
        if let Some(relative) = &died_on {
            let mut appender = Appender::open(&manifest)?;
            appender.append(&Line::Failure {
                input: relative.clone(),
                error: format!(
                    "{}: the build died reading it (LLVM's reader crashed on it, or the build was killed then); --retry-failed tries it again",
                    ir.join(relative).display()
                ),
            })?;
            appender.sync()?;
        }
        let inputs = all.len();
        let (mut pending, rest): (Vec<Input>, Vec<Input>) = all
            .into_iter()
            .filter(|i| !done.contains(i.relative.as_str()) && died_on.as_deref() != Some(i.relative.as_str()))
            .partition(|i| in_flight.contains(&i.relative));
        let suspects = pending.len();
        pending.extend(rest);
        let next_shard = manifest.shards.iter().filter_map(|s| manifest::shard_number(&s.file)).max().unwrap_or(0) + 1;
        let manifest = if died_on.is_some() { Manifest::read(out)? } else { manifest };
        Ok(Builder { config, manifest, _lock: lock, pending, suspects, died_on, inputs, orphans_removed, lost, next_shard })
    }

    /// Committed shards that [`Builder::open`] found missing or of
    /// another size than committed; their inputs are pending again.
    pub fn lost_shards(&self) -> &[LostShard] {
        &self.lost
    }

    /// Inputs this run will label.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Of [`Builder::pending`], those an earlier run died reading beside
    /// others, which this run reads first, one at a time ([`JOURNAL`]).
    pub fn suspects(&self) -> usize {
        self.suspects
    }

    /// The input an earlier run died reading alone, which this open
    /// recorded as failed ([`JOURNAL`]).
    pub fn died_on(&self) -> Option<&str> {
        self.died_on.as_deref()
    }

    /// IR files found under the IR directory.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Orphan shards and temporary files deleted by [`Builder::open`].
    pub fn orphans_removed(&self) -> usize {
        self.orphans_removed
    }

    /// Labels the pending inputs and commits them, calling `on_event` (from
    /// the writer thread) as files finish and shards are committed. On an
    /// I/O error the workers stop, and what was committed stays valid.
    pub fn run(self, on_event: &(dyn Fn(Event<'_>) + Sync)) -> Result<BuildReport, DatasetError> {
        let start = Instant::now();
        let Builder { config, manifest, _lock, pending, suspects, died_on: _, inputs, orphans_removed, lost: _, next_shard } = self;
        let journal = Journal::create(&config.out.join(JOURNAL), []).map_err(DatasetError::io(config.out.join(JOURNAL)))?;
        let (alone, together) = pending.split_at(suspects);
        let mut report = BuildReport { inputs, skipped: inputs - pending.len(), orphans_removed, ..Default::default() };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(config.jobs)
            .thread_name(|i| format!("programl-dataset-{i}"))
            .stack_size(programl::WORKER_STACK)
            .build()
            .map_err(|e| DatasetError::Io { path: config.out.clone(), source: std::io::Error::other(e.to_string()) })?;
        let (tx, rx) = mpsc::sync_channel::<Msg>(2 * pool.current_num_threads());
        let abort = AtomicBool::new(false);
        let mut writer = Writer {
            dir: config.out.clone(),
            appender: Appender::open(&manifest)?,
            next_shard,
            buffer: Vec::new(),
            buffer_inputs: Vec::new(),
            buffer_bytes: 0,
            shard_records: config.shard_records.max(1),
            shard_bytes: config.shard_bytes.max(1),
        };
        let seed = config.seed;
        let written = std::thread::scope(|scope| {
            let writer_thread = scope.spawn(|| {
                let result = writer.consume(rx, on_event, &mut report);
                if result.is_err() {
                    abort.store(true, Ordering::Relaxed);
                }
                result
            });
            // One input, journalled as started (`A` alone, `S` beside
            // others) and as done.
            let read = |tag: char, input: &Input, tx: &mpsc::SyncSender<Msg>| {
                journal.note(tag, &input.relative);
                let msg = label_file(input, seed);
                journal.note('F', &input.relative);
                if tx.send(msg).is_err() {
                    abort.store(true, Ordering::Relaxed);
                }
            };
            pool.install(|| {
                // What an earlier run died reading beside others: one at a
                // time, so that a crash names its input.
                for input in alone.iter().take_while(|_| !abort.load(Ordering::Relaxed)) {
                    read('A', input, &tx);
                }
                together.par_iter().for_each_with(tx, |tx, input| {
                    if !abort.load(Ordering::Relaxed) {
                        read('S', input, tx);
                    }
                });
            });
            writer_thread.join().unwrap_or_else(|_| {
                Err(DatasetError::Io { path: config.out.clone(), source: std::io::Error::other("the shard writer panicked") })
            })
        });
        // An orderly end, an error's included, finished every input it
        // started: only a crash or a kill leaves the journal.
        drop(journal);
        let _ = std::fs::remove_file(config.out.join(JOURNAL));
        written?;
        let after = Manifest::read(&config.out)?;
        let recorded: HashSet<&str> = after.shards.iter().flat_map(|s| s.inputs.iter().map(String::as_str)).collect();
        report.total_records = after.shards.iter().map(|s| s.records as usize).sum();
        report.total_failures =
            after.failures.iter().map(|(i, _)| i.as_str()).filter(|i| !recorded.contains(i)).collect::<HashSet<_>>().len();
        report.wall = start.elapsed();
        report.peak_rss_kib = peak_rss_kib();
        Ok(report)
    }
}

/// A worker's result for one input.
enum Msg {
    Done { relative: String, bytes: Vec<u8>, examples: [u32; 5], label_time: [Duration; 5], graph_time: Duration, nodes: usize },
    Failed { relative: String, error: String },
}

fn task_index(task: Task) -> usize {
    Task::ALL.iter().position(|t| *t == task).unwrap_or(0)
}

fn label_file(input: &Input, seed: u64) -> Msg {
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| label(input, seed)));
    let result = caught.unwrap_or_else(|panic| {
        let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
        Err(format!("{}: internal error: {}", input.path.display(), what.unwrap_or_else(|| "panic".into())))
    });
    match result {
        Ok(msg) => msg,
        Err(error) => Msg::Failed { relative: input.relative.clone(), error },
    }
}

/// Builds, labels and encodes one file. Errors name the file.
fn label(input: &Input, seed: u64) -> Result<Msg, String> {
    let t0 = Instant::now();
    let graph = build_file(&input.path, &BuildOptions::MODEL).map_err(|e| e.to_string())?;
    let graph_time = t0.elapsed();
    let key = split_key(Path::new(&input.relative));
    let split = split_of(&key);
    let nodes = graph.node_count();
    let mut analyzer = Analyzer::new(&graph);
    let mut examples = BTreeMap::new();
    let mut counts = [0u32; 5];
    let mut label_time = [Duration::ZERO; 5];
    for task in Task::ALL {
        let t = Instant::now();
        let roots = analyzer.sampled_roots(task, seed);
        let mut list = Vec::with_capacity(roots.len());
        for root in roots {
            let labels = analyzer.analyze(task, root).map_err(|e| format!("{}: {task}: {e}", input.path.display()))?;
            list.push(Example { root, steps: labels.steps, positives: labels.positives });
        }
        label_time[task_index(task)] = t.elapsed();
        counts[task_index(task)] = list.len() as u32;
        examples.insert(task, list);
    }
    let record = Record { path: input.relative.clone(), key, split, graph: StoredGraph::from_graph(&graph), examples };
    let bytes = shard::encode_record(&record);
    Ok(Msg::Done { relative: input.relative.clone(), bytes, examples: counts, label_time, graph_time, nodes })
}

/// The writer thread's state: the shard being filled and the manifest.
struct Writer {
    dir: PathBuf,
    appender: Appender,
    next_shard: u64,
    buffer: Vec<Vec<u8>>,
    buffer_inputs: Vec<String>,
    buffer_bytes: usize,
    shard_records: usize,
    shard_bytes: usize,
}

impl Writer {
    fn consume(
        &mut self,
        rx: mpsc::Receiver<Msg>,
        on_event: &(dyn Fn(Event<'_>) + Sync),
        report: &mut BuildReport,
    ) -> Result<(), DatasetError> {
        for msg in rx {
            match msg {
                Msg::Done { relative, bytes, examples, label_time, graph_time, nodes } => {
                    on_event(Event::Done { input: &relative, examples: examples.iter().map(|&n| n as usize).sum() });
                    for task in Task::ALL {
                        let i = task_index(task);
                        *report.examples.entry(task).or_default() += examples[i] as u64;
                        *report.label_time.entry(task).or_default() += label_time[i];
                    }
                    report.graph_time += graph_time;
                    report.nodes += nodes as u64;
                    report.ok += 1;
                    self.buffer_bytes += bytes.len();
                    self.buffer.push(bytes);
                    self.buffer_inputs.push(relative);
                    if self.buffer.len() >= self.shard_records || self.buffer_bytes >= self.shard_bytes {
                        self.flush(on_event, report)?;
                    }
                }
                Msg::Failed { relative, error } => {
                    on_event(Event::Failed { input: &relative, error: &error });
                    self.appender.append(&Line::Failure { input: relative.clone(), error: error.clone() })?;
                    report.failed.push((relative, error));
                }
            }
        }
        self.flush(on_event, report)?;
        self.appender.sync()
    }

    /// Commits the buffered records as one shard.
    fn flush(&mut self, on_event: &(dyn Fn(Event<'_>) + Sync), report: &mut BuildReport) -> Result<(), DatasetError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let file = manifest::shard_name(self.next_shard);
        self.next_shard += 1;
        let written = shard::write_shard(&self.dir, &file, &self.buffer)?;
        let records = self.buffer.len();
        self.appender.append(&Line::Shard {
            file: file.clone(),
            records: records as u32,
            bytes: written.bytes,
            crc32: written.crc32,
            inputs: std::mem::take(&mut self.buffer_inputs),
        })?;
        self.appender.sync()?;
        self.buffer.clear();
        self.buffer_bytes = 0;
        report.shards_written += 1;
        report.shard_bytes += written.bytes;
        on_event(Event::Shard { file: &file, records });
        Ok(())
    }
}

/// The process's peak resident set size (VmHWM in /proc/self/status), KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
