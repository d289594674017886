//! Export to upstream ProGraML's on-disk layout (its
//! `Documentation/DataflowDataset.md`), so that a dataset can be read
//! outside Rust, by upstream's tools or plain `protobuf`.
//!
//! [`export`] writes one split, for one or more tasks and one step-count
//! subset, into a directory `OUT`:
//!
//! - `graphs/<name>.ProgramGraph.pb`: the graph of each IR file with at
//!   least one example left in the subset, as a binary `ProgramGraph` (the
//!   writer of `programl graph --format pb`; the store keeps no printed IR,
//!   blocks or module features, so those are absent);
//! - `labels/<analysis>/<name>.ProgramGraphFeaturesList.pb`: one
//!   `ProgramGraphFeatures` per example (root) of the subset, in stored
//!   order, as upstream's analyses write them: node feature lists
//!   `data_flow_root_node` and `data_flow_value` (one int64 per graph node)
//!   and graph features `data_flow_step_count` and
//!   `data_flow_active_node_count`. `<analysis>` is upstream's directory
//!   name ([`analysis_dir`]: `domtree` for dominance). The step count is
//!   this project's (SPEC.md §2: synchronous rounds), not upstream's;
//! - `train/`, `val/` or `test/`: relative symbolic links
//!   `<name>.ProgramGraph.pb -> ../graphs/<name>.ProgramGraph.pb`, marking
//!   the split as upstream does;
//! - `vocab/programl.csv`: the node-text vocabulary ([`write_vocab_csv`]).
//!
//! The graphs are the store's, built in its graph mode ([`GRAPH_MODE`]: the
//! paper's one node per value, not ProGraML 0.3's per-use variables).
//! `<name>` is [`graph_name`] of the file's path relative to the IR
//! directory (the key of a record in the store).
//!
//! Every file is written atomically, so exporting again into the same
//! directory is safe and gives the same bytes. Exports of other splits and
//! tasks into one directory add up to upstream's full layout: graphs and
//! split links are only ever added, while the label files of the exported
//! split and tasks are made exactly those of the subset (a stale one, from
//! an export of a larger subset, is removed).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rayon::prelude::*;

use programl::format::{write_features_list, write_graph, Format, GraphFeatures};
use programl::fsutil::{write_atomically, Durability};
use programl::hash::{fnv1a, mix};
use programl::vocab::{Counts, Vocabulary};

use crate::{Dataset, DatasetError, Record, Split, Subset, Task};

/// The graph mode of every store this crate reads (its manifest records
/// the builder; a store of another mode is refused when opened): the
/// paper's graphs, `programl::builder::Mode::Paper`.
pub const GRAPH_MODE: &str = crate::manifest::BUILDER;

/// File name suffix of graphs (as upstream).
pub const GRAPH_SUFFIX: &str = ".ProgramGraph.pb";
/// File name suffix of label files (as upstream).
pub const LABELS_SUFFIX: &str = ".ProgramGraphFeaturesList.pb";
/// The vocabulary file, relative to the export directory.
pub const VOCAB_CSV: &str = "vocab/programl.csv";
/// The vocabulary file's header line (without its newline).
pub const VOCAB_HEADER: &str = "cumulative_frequency\tcumulative_node_frequency\tcount\ttext";

/// Longest [`graph_name`], in bytes, leaving room for the suffixes within
/// the usual 255-byte file name limit.
const MAX_NAME: usize = 200;

/// Upstream's directory name under `labels/` for `task`.
pub fn analysis_dir(task: Task) -> &'static str {
    match task {
        Task::Reachability => "reachability",
        Task::Dominance => "domtree",
        Task::DataDep => "datadep",
        Task::Liveness => "liveness",
        Task::Subexpressions => "subexpressions",
    }
}

/// The file name stem of the graph of the IR file at `path` (relative to
/// the IR directory, `/`-separated): a stable, filesystem-safe and unique
/// name.
///
/// ASCII letters, digits, `.`, `_` and `-` are kept; `/` becomes `+`; every
/// other byte is `%XX` (upper-case hexadecimal), and so is a leading `.` (no
/// hidden files, no `.` or `..`). So `proj/foo.O2.ll` is `proj+foo.O2.ll`
/// and `a b/c+d.ll` is `a%20b+c%2Bd.ll`: distinct paths get distinct names.
/// A name longer than 200 bytes is cut to 183 and ends in `~` and 16
/// hexadecimal digits of a hash of the path (`~` never appears otherwise).
pub fn graph_name(path: &str) -> String {
    let mut name = String::with_capacity(path.len());
    for (i, b) in path.bytes().enumerate() {
        match b {
            b'/' => name.push('+'),
            b'.' if i == 0 => name.push_str("%2E"),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-' => name.push(b as char),
            _ => name.push_str(&format!("%{b:02X}")),
        }
    }
    if name.len() > MAX_NAME {
        name.truncate(MAX_NAME - 17);
        name.push_str(&format!("~{:016x}", mix(fnv1a(path.as_bytes()))));
    }
    name
}

/// What to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportConfig {
    /// The export directory (created if missing).
    pub out: PathBuf,
    /// The split to export.
    pub split: Split,
    /// The tasks whose labels to write (at least one).
    pub tasks: Vec<Task>,
    /// Only examples of this subset; a graph left with none is not written.
    pub subset: Subset,
}

/// Progress of an export.
#[derive(Debug)]
pub enum ExportEvent<'a> {
    /// A record was read (every split is read: the vocabulary counts the
    /// train split). `exported` is whether its graph was written.
    Record {
        /// Its path relative to the IR directory.
        input: &'a str,
        /// Whether this export wrote its graph.
        exported: bool,
    },
    /// A shard could not be read; its records are missing from the export.
    Corrupt {
        /// The error, naming the shard.
        error: &'a DatasetError,
    },
}

/// What an export wrote.
#[derive(Debug, Default)]
pub struct ExportReport {
    /// Records of the split.
    pub records: usize,
    /// Graphs written (records of the split with an example left).
    pub graphs: usize,
    /// Examples written, per task.
    pub examples: BTreeMap<Task, usize>,
    /// Label files written, per task.
    pub label_files: BTreeMap<Task, usize>,
    /// Stale label files removed (graphs of the split now without examples).
    pub removed: usize,
    /// The vocabulary file and its number of texts, if written (it is not
    /// when a shard could not be read).
    pub vocab: Option<(PathBuf, usize)>,
    /// Shards that could not be read, each naming the shard.
    pub shard_errors: Vec<DatasetError>,
}

/// Exports `config.split` of `dataset` (see the [module docs](self)),
/// reading one shard at a time and writing its records in parallel.
///
/// A shard that cannot be read is reported (an event and
/// [`ExportReport::shard_errors`]) and skipped, and the vocabulary is then
/// not written; any other error (writing, two paths with one name) stops the
/// export and names the input and the file.
pub fn export(dataset: &Dataset, config: &ExportConfig, on_event: &(dyn Fn(ExportEvent<'_>) + Sync)) -> Result<ExportReport, DatasetError> {
    let split_dir = config.out.join(config.split.name());
    let graphs_dir = config.out.join("graphs");
    for dir in [&split_dir, &graphs_dir] {
        std::fs::create_dir_all(dir).map_err(DatasetError::io(dir.as_path()))?;
    }
    let mut report = ExportReport::default();
    let mut train = Counts::default();
    let mut names: HashMap<String, String> = HashMap::new();
    let graphs = AtomicUsize::new(0);
    let removed = AtomicUsize::new(0);
    let tally: Mutex<BTreeMap<Task, (usize, usize)>> = Mutex::default();

    for i in 0..dataset.shards().len() {
        let records = match dataset.read_shard(i) {
            Ok(r) => r,
            Err(e) => {
                on_event(ExportEvent::Corrupt { error: &e });
                report.shard_errors.push(e);
                continue;
            }
        };
        let mut selected = Vec::new();
        for r in &records {
            if r.split == Split::Train {
                count_texts(&mut train, r);
            }
            if r.split != config.split {
                on_event(ExportEvent::Record { input: &r.path, exported: false });
                continue;
            }
            let name = graph_name(&r.path);
            if let Some(other) = names.insert(name.clone(), r.path.clone()) {
                return Err(DatasetError::Io {
                    path: graphs_dir.join(format!("{name}{GRAPH_SUFFIX}")),
                    source: io::Error::other(format!("inputs {other} and {} have the same export name", r.path)),
                });
            }
            selected.push((r, name));
        }
        report.records += selected.len();
        selected.par_iter().try_for_each(|(r, name)| -> Result<(), DatasetError> {
            let written = export_record(r, name, config, &tally, &removed)?;
            if written {
                graphs.fetch_add(1, Ordering::Relaxed);
            }
            on_event(ExportEvent::Record { input: &r.path, exported: written });
            Ok(())
        })?;
    }

    report.graphs = graphs.into_inner();
    report.removed = removed.into_inner();
    for (task, (files, examples)) in tally.into_inner().unwrap_or_else(|e| e.into_inner()) {
        report.label_files.insert(task, files);
        report.examples.insert(task, examples);
    }
    if report.shard_errors.is_empty() {
        let path = config.out.join(VOCAB_CSV);
        let texts = write_vocab_csv(&path, &train)?;
        report.vocab = Some((path, texts));
    }
    Ok(report)
}

fn count_texts(counts: &mut Counts, r: &Record) {
    for t in &r.graph.texts {
        match counts.texts.get_mut(t) {
            Some(n) => *n += 1,
            None => {
                counts.texts.insert(t.clone(), 1);
            }
        }
    }
    counts.total += r.graph.texts.len() as u64;
}

/// Writes one record's files; returns whether its graph was written.
fn export_record(
    r: &Record,
    name: &str,
    config: &ExportConfig,
    tally: &Mutex<BTreeMap<Task, (usize, usize)>>,
    removed: &AtomicUsize,
) -> Result<bool, DatasetError> {
    // Errors name the input and the file.
    let failed = |path: &Path, e: io::Error| DatasetError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(e.kind(), format!("exporting {}: {}", r.path, programl::fsutil::cause(path, &e))),
    };
    let node_count = r.graph.node_count();
    let per_task: Vec<(Task, Vec<GraphFeatures>)> = config
        .tasks
        .iter()
        .map(|&task| {
            let features = r
                .examples(task)
                .iter()
                .filter(|e| config.subset.contains(e.steps))
                .map(|e| GraphFeatures::data_flow(node_count, e.root, &e.positives, e.steps))
                .collect::<Result<Vec<_>, _>>();
            features.map(|f| (task, f))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| failed(&config.out, io::Error::new(io::ErrorKind::InvalidData, e.to_string())))?;

    for (task, features) in &per_task {
        let path = config.out.join("labels").join(analysis_dir(*task)).join(format!("{name}{LABELS_SUFFIX}"));
        if features.is_empty() {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    removed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(failed(&path, e)),
            }
            continue;
        }
        write_atomically(&path, Durability::Atomic, |w| write_features_list(features, w)).map_err(|e| failed(&path, e))?;
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        let entry = t.entry(*task).or_default();
        entry.0 += 1;
        entry.1 += features.len();
    }
    if per_task.iter().all(|(_, f)| f.is_empty()) {
        return Ok(false);
    }
    let file = format!("{name}{GRAPH_SUFFIX}");
    let graph_path = config.out.join("graphs").join(&file);
    let graph = r.graph.to_program_graph();
    write_atomically(&graph_path, Durability::Atomic, |w| write_graph(&graph, Format::Pb, w)).map_err(|e| failed(&graph_path, e))?;
    let link = config.out.join(config.split.name()).join(&file);
    link_atomically(&Path::new("../graphs").join(&file), &link).map_err(|e| failed(&link, e))?;
    Ok(true)
}

/// Makes `link` a symbolic link to `target`, atomically (a link under a
/// temporary name renamed over it); a link already right is left alone.
fn link_atomically(target: &Path, link: &Path) -> io::Result<()> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let file = link.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = link.with_file_name(format!(".{file}.{}.{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Formats `x` as C++ streams do with `std::setprecision(4)` in the default
/// float format (C's `%.4g`): 4 significant digits, trailing zeros
/// dropped, an exponent below -4 or from 4 on in scientific notation.
pub fn format_g4(x: f64) -> String {
    const P: i32 = 4;
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let sci = format!("{:.*e}", (P - 1) as usize, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..P).contains(&exp) {
        format!("{}e{}{:02}", trim(mantissa), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        trim(&format!("{:.*}", (P - 1 - exp) as usize, x))
    }
}

/// A text as a field of a tab-separated line that Python's `csv` module
/// reads back: quoted (with doubled quotes) only if it holds a tab, a line
/// break or starts with a quote.
fn csv_field(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(['\t', '\n', '\r']) || text.starts_with('"') {
        format!("\"{}\"", text.replace('"', "\"\"")).into()
    } else {
        text.into()
    }
}

/// Writes the vocabulary of `counts` (node texts of the train split) as
/// upstream's `vocab/programl.csv`: the header [`VOCAB_HEADER`], then one
/// tab-separated line per text, most frequent first (ties by text, in byte
/// order): the cumulative share of the node occurrences counted covered by
/// this and the earlier lines, the same share of all nodes (equal here:
/// every node has a text), the text's count and the text. Shares are
/// printed as upstream's C++ does ([`format_g4`]). Upstream kept only one
/// text per distinct count (its ordered set compared counts alone); every
/// text is kept here. Returns the number of texts.
pub fn write_vocab_csv(path: &Path, counts: &Counts) -> Result<usize, DatasetError> {
    let vocab = Vocabulary::from_counts(counts, 1, None);
    let total = counts.total.max(1) as f64;
    write_atomically(path, Durability::Atomic, |w| {
        writeln!(w, "{VOCAB_HEADER}")?;
        let mut cumulative = 0u64;
        for (text, count) in vocab.tokens() {
            cumulative += count;
            let share = format_g4(cumulative as f64 / total);
            writeln!(w, "{share}\t{share}\t{count}\t{}", csv_field(text))?;
        }
        Ok(())
    })
    .map_err(DatasetError::io(path))?;
    Ok(vocab.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_distinct() {
        assert_eq!(graph_name("proj/foo.O2.ll"), "proj+foo.O2.ll");
        assert_eq!(graph_name("a b/c+d.ll"), "a%20b+c%2Bd.ll");
        assert_eq!(graph_name(".hidden/x.ll"), "%2Ehidden+x.ll");
        assert_eq!(graph_name("a/../b.bc"), "a+..+b.bc");
        assert_eq!(graph_name("é%~.ll"), "%C3%A9%25%7E.ll");
        let paths = ["a/b.ll", "a+b.ll", "a%2Bb.ll", "a_b.ll", "a/b.bc", "A/b.ll", ".a.ll", "%2Ea.ll"];
        let names: std::collections::HashSet<String> = paths.iter().map(|p| graph_name(p)).collect();
        assert_eq!(names.len(), paths.len(), "{names:?}");
        for n in &names {
            assert!(n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-+%~".contains(&b)) && !n.starts_with('.'), "{n}");
        }
        let long = format!("{}/x.ll", "d".repeat(300));
        let other = format!("{}/y.ll", "d".repeat(300));
        let (a, b) = (graph_name(&long), graph_name(&other));
        assert_eq!(a.len(), MAX_NAME);
        assert!(a != b && a.starts_with("ddd") && a.as_bytes()[MAX_NAME - 17] == b'~', "{a}");
        assert!((MAX_NAME + LABELS_SUFFIX.len()) <= 255);
        assert_eq!(graph_name(&long), a, "stable");
    }

    #[test]
    fn shares_print_like_cpp_setprecision_4() {
        for (x, s) in [
            (1.0, "1"),
            (0.5, "0.5"),
            (0.123456, "0.1235"),
            (0.99999, "1"),
            (0.1, "0.1"),
            (0.00012345, "0.0001234"),
            (0.0000123456, "1.235e-05"),
            (2.0 / 3.0, "0.6667"),
            (12345.0, "1.234e+04"),
            (1234.0, "1234"),
            (0.0, "0"),
        ] {
            assert_eq!(format_g4(x), s, "{x}");
        }
    }

    #[test]
    fn vocab_csv_is_upstreams_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(VOCAB_CSV);
        let mut counts = Counts::default();
        for (t, c) in [("i32", 5u64), ("add", 2), ("br", 2), ("a\tb", 1)] {
            counts.texts.insert(t.into(), c);
            counts.total += c;
        }
        assert_eq!(write_vocab_csv(&path, &counts).unwrap(), 4);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "cumulative_frequency\tcumulative_node_frequency\tcount\ttext\n\
             0.5\t0.5\t5\ti32\n0.7\t0.7\t2\tadd\n0.9\t0.9\t2\tbr\n1\t1\t1\t\"a\tb\"\n"
        );
    }

    #[test]
    fn analysis_dirs_are_upstreams() {
        let dirs: Vec<&str> = Task::ALL.iter().map(|&t| analysis_dir(t)).collect();
        assert_eq!(dirs, ["reachability", "domtree", "datadep", "liveness", "subexpressions"]);
    }
}
