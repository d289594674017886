//! DeepDataFlow datasets (SPEC.md §2): labelled program graphs on disk.
//!
//! A dataset directory holds
//!
//! - `manifest.jsonl`: one JSON object per line: first the dataset's
//!   parameters (format version, seed, IR directory, and the corpus
//!   manifests found there: [`corpus`]), then one line per
//!   committed shard (its file, checksum and the inputs it holds) and one
//!   per input that failed (with its error). It is appended to, and
//!   rewritten (atomically) only to drop the line of a shard lost from the
//!   disk; a line that a kill cut short is dropped when a build resumes.
//! - `shard-NNNNNN.pgds`: zstd-compressed, checksummed batches of
//!   [`Record`]s (see [`shard`] for the layout).
//!
//! One [`Record`] per IR file: its path relative to the IR directory, its
//! split key and [`Split`], its graph in the compact [`StoredGraph`] form
//! (node kinds, texts and functions, edges) and, per [`Task`], the sampled
//! [`Example`]s (root, steps, positives).
//!
//! # The split rule
//!
//! Examples are split 3:1:1 into train, validation and test *by source*:
//! every IR file compiled from one source file lands in one split, for every
//! task, so a test program is never seen in training at another optimisation
//! level. The **split key** ([`split_key`]) is the file's path relative to
//! the IR directory, with `/` separators, with:
//!
//! 1. the `.ll` or `.bc` extension removed;
//! 2. an optimisation-level marker removed, the marker being one of `O0`,
//!    `O1`, `O2`, `O3`, `Os`, `Oz`:
//!    - a whole path component (directory or file stem) that is a marker,
//!      optionally preceded by `-`, `.` or `_` (`O2/foo.ll`, `foo/-O3.ll`);
//!    - a marker at the end of the file stem, preceded by `.`, `-` or `_`
//!      (`foo.O2.ll`, `foo-O2.ll`, `foo_Oz.bc`).
//!
//! So `proj/foo.O2.ll`, `proj/foo.O0.bc`, `O3/proj/foo.ll` and
//! `proj/foo-Os.ll` all have the key `proj/foo`. A key that would be empty
//! falls back to the unmodified relative path. The split is
//! [`key_hash`]`(key) mod 5`: 0, 1, 2 → train, 3 → validation, 4 → test,
//! where [`key_hash`] is FNV-1a (64 bit) over the key's UTF-8 bytes followed
//! by SplitMix64's finalizer ([`mix`]). The hash is fixed: it never depends
//! on the seed, the platform or the build. The key names the source by its
//! path only (the source text is not available from the IR), so two copies
//! of one program under different names may land in different splits.
//!
//! # Roots
//!
//! For each task the roots are [`Analyzer::sampled_roots`]`(task, --seed)`:
//! n = min(⌈|V|/10⌉, 10) distinct eligible roots, using the node count |V|
//! (the paper's rule), sampled with a seed derived from `--seed`, the task
//! and the graph's content. `programl analyze --task T --seed S FILE`
//! therefore prints exactly the examples a dataset built with `--seed S`
//! holds for FILE.
//!
//! [`Analyzer::sampled_roots`]: programl::analysis::Analyzer::sampled_roots
//!
//! # Subsets
//!
//! [`Subset`]: DDF-30, DDF-60, DDF-200 hold the examples whose step count is
//! at most 30, 60, 200; DDF holds all of them.
//!
//! # Export
//!
//! [`export`] writes a split in upstream ProGraML's layout (`graphs/`,
//! `labels/<analysis>/`, `train|val|test/` links, `vocab/programl.csv`), for
//! readers outside Rust.
//!
//! **Boundary:** the on-disk types (serde, postcard) are private to this
//! module; the rest of the crate sees [`Record`] and [`StoredGraph`].

pub mod build;
pub mod corpus;
pub mod export;
mod manifest;
pub mod read;
pub mod shard;
pub mod stats;
pub mod vocab;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

pub use programl::analysis::Task;
use programl::graph::{Flow, NodeKind, ProgramGraph};
use programl::hash::{fnv1a, mix};

pub use build::{BuildConfig, BuildReport, Builder, Event, LostShard};
pub use export::{ExportConfig, ExportEvent, ExportReport};
pub use programl::vocab::Vocabulary;
pub use read::{Dataset, DatasetInfo, ExampleItem, Failure, Query, Records, ShardInfo};
pub use stats::Stats;

/// The dataset format version, stored in the manifest and in every shard.
///
/// - 1: the first store;
/// - 2: step counts as SPEC.md §2 revised them (synchronous rounds, not
///   passes), clean roots, recorded function entries and names. A version-1
///   store is refused: its step counts mean something else.
pub const FORMAT_VERSION: u32 = 2;

/// The manifest's file name inside a dataset directory.
pub const MANIFEST: &str = "manifest.jsonl";

/// Why a dataset could not be built or read. Every variant names the file
/// (input, shard, manifest or vocabulary) it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// An I/O error on `path` (named once, also when `source` comes from
    /// `programl::fsutil`, whose errors name it already).
    #[error("{}: {}", path.display(), programl::fsutil::cause(path, source))]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A shard failed its checks (magic, version, length, checksum, codec or
    /// references); its records are unusable, other shards are not affected.
    #[error("{}: corrupt shard: {detail}", shard.display())]
    CorruptShard {
        /// The shard file.
        shard: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// A line of the manifest could not be understood.
    #[error("{}:{line}: bad manifest line: {detail}", path.display())]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        detail: String,
    },
    /// `path` holds no dataset (no manifest).
    #[error("{}: not a dataset (no {MANIFEST})", path.display())]
    NotADataset {
        /// The directory.
        path: PathBuf,
    },
    /// Another build holds the dataset's lock.
    #[error("{}: another `dataset build` is writing this dataset", path.display())]
    Locked {
        /// The dataset directory.
        path: PathBuf,
    },
    /// A corpus manifest (`scripts/corpus.sh`'s) of the IR directory could
    /// not be read.
    #[error("{}: {detail}", path.display())]
    Corpus {
        /// The manifest file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The build's parameters disagree with the dataset being resumed.
    #[error("{}: {detail}", path.display())]
    Mismatch {
        /// The dataset directory.
        path: PathBuf,
        /// Which parameter differs.
        detail: String,
    },
    /// A vocabulary file could not be read or written.
    #[error(transparent)]
    Vocabulary(#[from] programl::vocab::VocabError),
    /// The plot could not be drawn.
    #[error("{}: cannot draw the plot: {detail}", path.display())]
    Plot {
        /// The image file.
        path: PathBuf,
        /// The drawing backend's error.
        detail: String,
    },
}

impl DatasetError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DatasetError {
        let path = path.into();
        move |source| DatasetError::Io { path, source }
    }
}

/// One of the three splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Split {
    /// Training: hash mod 5 ∈ {0, 1, 2}.
    Train = 0,
    /// Validation: hash mod 5 = 3.
    Val = 1,
    /// Test: hash mod 5 = 4.
    Test = 2,
}

impl Split {
    /// All splits, in index order.
    pub const ALL: [Split; 3] = [Split::Train, Split::Val, Split::Test];

    /// The split's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test => "test",
        }
    }

    /// Parses [`Split::name`] (also `validation`).
    pub fn parse(name: &str) -> Option<Split> {
        match name {
            "validation" => Some(Split::Val),
            _ => Split::ALL.into_iter().find(|s| s.name() == name),
        }
    }

    /// The split of a key hash (see the module docs).
    pub fn of_hash(hash: u64) -> Split {
        match hash % 5 {
            0..=2 => Split::Train,
            3 => Split::Val,
            _ => Split::Test,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Split> {
        Split::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A subset of examples by step count (SPEC.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Subset {
    /// At most 30 steps.
    Ddf30,
    /// At most 60 steps.
    Ddf60,
    /// At most 200 steps.
    Ddf200,
    /// Every example.
    #[default]
    Ddf,
}

impl Subset {
    /// All subsets, smallest first.
    pub const ALL: [Subset; 4] = [Subset::Ddf30, Subset::Ddf60, Subset::Ddf200, Subset::Ddf];

    /// The largest step count in the subset, `None` for DDF.
    pub fn max_steps(self) -> Option<u32> {
        match self {
            Subset::Ddf30 => Some(30),
            Subset::Ddf60 => Some(60),
            Subset::Ddf200 => Some(200),
            Subset::Ddf => None,
        }
    }

    /// Whether an example of `steps` steps belongs to the subset.
    pub fn contains(self, steps: u32) -> bool {
        self.max_steps().is_none_or(|m| steps <= m)
    }

    /// The paper's name: `DDF-30`, `DDF-60`, `DDF-200`, `DDF`.
    pub fn name(self) -> &'static str {
        match self {
            Subset::Ddf30 => "DDF-30",
            Subset::Ddf60 => "DDF-60",
            Subset::Ddf200 => "DDF-200",
            Subset::Ddf => "DDF",
        }
    }

    /// Parses a name, case-insensitively: `ddf-30`, `30`, `ddf`, `all`.
    pub fn parse(name: &str) -> Option<Subset> {
        match name.to_ascii_lowercase().as_str() {
            "ddf-30" | "30" => Some(Subset::Ddf30),
            "ddf-60" | "60" => Some(Subset::Ddf60),
            "ddf-200" | "200" => Some(Subset::Ddf200),
            "ddf" | "all" => Some(Subset::Ddf),
            _ => None,
        }
    }
}

impl fmt::Display for Subset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The optimisation-level markers removed from split keys.
const OPT_MARKERS: [&str; 6] = ["O0", "O1", "O2", "O3", "Os", "Oz"];

fn is_marker(s: &str) -> bool {
    let s = s.strip_prefix(['-', '.', '_']).unwrap_or(s);
    OPT_MARKERS.contains(&s)
}

/// The split key of an IR file from its path relative to the IR directory
/// (see the module docs for the rule).
pub fn split_key(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if let Some(last) = parts.last_mut() {
        for ext in [".ll", ".bc"] {
            if let Some(stem) = last.strip_suffix(ext) {
                *last = stem.to_string();
                break;
            }
        }
        if !is_marker(last) {
            for marker in OPT_MARKERS {
                let cut = last.len().saturating_sub(marker.len() + 1);
                if last.len() > marker.len() + 1 && last.ends_with(marker) && matches!(last.as_bytes()[cut], b'.' | b'-' | b'_') {
                    last.truncate(cut);
                    break;
                }
            }
        }
    }
    let key: Vec<&str> = parts.iter().map(String::as_str).filter(|p| !is_marker(p)).collect();
    if key.is_empty() {
        parts.join("/")
    } else {
        key.join("/")
    }
}

/// The fixed 64-bit hash of a split key: FNV-1a over the UTF-8 bytes, then
/// [`mix`].
pub fn key_hash(key: &str) -> u64 {
    mix(fnv1a(key.as_bytes()))
}

/// The split of a split key.
pub fn split_of(key: &str) -> Split {
    Split::of_hash(key_hash(key))
}

/// One edge of a [`StoredGraph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoredEdge {
    /// Source node id.
    pub source: u32,
    /// Target node id.
    pub target: u32,
    /// What the edge carries.
    pub flow: Flow,
    /// Operand or successor position (see [`programl::graph::Edge`]).
    pub position: u32,
}

/// A program graph in the compact form kept in datasets: what a model and
/// the analyses need, without the printed IR, blocks or module features.
/// Node `i` is node `i` of the [`ProgramGraph`] it was made from.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StoredGraph {
    /// Node kinds.
    pub kinds: Vec<NodeKind>,
    /// Node texts (opcode for instructions, type for values).
    pub texts: Vec<String>,
    /// The function of each node; `None` for `[external]` and constants.
    pub functions: Vec<Option<u32>>,
    /// Edges, in the graph's edge order.
    pub edges: Vec<StoredEdge>,
    /// Function names, in the graph's function order.
    pub function_names: Vec<String>,
    /// Each function's recorded entry instruction ([`programl::graph::Function::entry`]).
    pub function_entries: Vec<Option<u32>>,
}

impl StoredGraph {
    /// The model input of this graph under `vocab`: the core's
    /// featurisation, as for a graph built from IR (training and the Python
    /// package read stores through this).
    pub fn model_input(&self, vocab: &programl::vocab::Vocabulary) -> Result<programl::batch::GraphInput, programl::batch::InputError> {
        programl::batch::GraphInput::from_parts(
            self.texts.iter().map(String::as_str),
            self.edges.iter().map(|e| (e.source, e.target, programl::graph::Edge { flow: e.flow, position: e.position })),
            vocab,
        )
    }

    /// The nodes that carry a label for `task` ([`programl::analysis::labelled_nodes`]).
    pub fn labelled(&self, task: Task) -> Vec<u32> {
        programl::analysis::labelled_nodes(task, &self.kinds, self.texts.iter().map(String::as_str))
    }

    /// The compact form of `graph`.
    pub fn from_graph(graph: &ProgramGraph) -> StoredGraph {
        let g = &graph.graph;
        let mut s = StoredGraph {
            kinds: Vec::with_capacity(g.node_count()),
            texts: Vec::with_capacity(g.node_count()),
            functions: Vec::with_capacity(g.node_count()),
            edges: Vec::with_capacity(g.edge_count()),
            function_names: graph.functions.iter().map(|f| f.name.clone()).collect(),
            function_entries: graph.functions.iter().map(|f| f.entry).collect(),
        };
        for n in g.node_weights() {
            s.kinds.push(n.kind);
            s.texts.push(n.text.clone());
            s.functions.push(n.function);
        }
        for e in g.raw_edges() {
            s.edges.push(StoredEdge {
                source: e.source().index() as u32,
                target: e.target().index() as u32,
                flow: e.weight.flow,
                position: e.weight.position,
            });
        }
        s
    }

    /// The graph back as a [`ProgramGraph`], for the analyses and for
    /// export: node kinds, texts and functions, edges, function names and
    /// entries, and one module. What the store does not keep stays empty:
    /// `full_text` (`None`), blocks (0) and module features.
    pub fn to_program_graph(&self) -> ProgramGraph {
        let mut g = ProgramGraph::default();
        g.modules.push(programl::graph::Module::default());
        g.functions = self
            .function_names
            .iter()
            .zip(&self.function_entries)
            .map(|(name, &entry)| programl::graph::Function { name: name.clone(), module: 0, entry })
            .collect();
        g.graph.reserve_exact_nodes(self.kinds.len());
        g.graph.reserve_exact_edges(self.edges.len());
        for ((&kind, text), &function) in self.kinds.iter().zip(&self.texts).zip(&self.functions) {
            g.add_node(programl::graph::Node { kind, text: text.clone(), full_text: None, function, block: 0 });
        }
        for e in &self.edges {
            g.add_edge(e.flow, e.position, petgraph_index(e.source), petgraph_index(e.target));
        }
        g
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.kinds.len()
    }

    /// Number of nodes of `kind`.
    pub fn count_kind(&self, kind: NodeKind) -> usize {
        self.kinds.iter().filter(|k| **k == kind).count()
    }
}

fn petgraph_index(i: u32) -> programl::graph::NodeId {
    programl::graph::NodeId::new(i as usize)
}

/// One labelled example: a root, the steps the analysis needed, and the
/// positive nodes (all other labelled nodes are negative).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Example {
    /// The root node (the "vertex selector").
    pub root: u32,
    /// Steps of the classical analysis (SPEC.md §2).
    pub steps: u32,
    /// Positive node ids, ascending.
    pub positives: Vec<u32>,
}

/// Which nodes carry a label for `task` (SPEC.md §2): variables for
/// liveness, instructions otherwise. `[external]` is never positive but is an
/// instruction; it is not counted as labelled.
pub fn labels_kind(task: Task) -> NodeKind {
    match task {
        Task::Liveness => NodeKind::Variable,
        _ => NodeKind::Instruction,
    }
}

/// Everything a dataset holds about one IR file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The file's path relative to the IR directory, `/`-separated.
    pub path: String,
    /// Its split key ([`split_key`]).
    pub key: String,
    /// Its split ([`split_of`] the key).
    pub split: Split,
    /// Its graph.
    pub graph: StoredGraph,
    /// The examples of each task (a task with no eligible root has none).
    pub examples: BTreeMap<Task, Vec<Example>>,
}

impl Record {
    /// The examples of `task` (empty if none).
    pub fn examples(&self, task: Task) -> &[Example] {
        self.examples.get(&task).map_or(&[], Vec::as_slice)
    }

    /// How many nodes of the graph carry a label for `task` (the
    /// denominator of the positive share), `[external]` excluded.
    pub fn labelled_count(&self, task: Task) -> usize {
        let kind = labels_kind(task);
        let n = self.graph.count_kind(kind);
        if kind == NodeKind::Instruction {
            n.saturating_sub(1)
        } else {
            n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: &str) -> String {
        split_key(Path::new(p))
    }

    #[test]
    fn split_key_removes_optimisation_markers() {
        for p in [
            "proj/foo.O2.ll",
            "proj/foo.O0.ll",
            "proj/foo.O3.bc",
            "proj/foo-Os.ll",
            "proj/foo_Oz.ll",
            "proj/foo.ll",
            "O1/proj/foo.ll",
            "proj/O2/foo.ll",
            "proj/-O3/foo.ll",
            "proj/foo/O2.ll",
        ] {
            assert_eq!(key(p), "proj/foo", "{p}");
        }
        // Not markers: kept.
        assert_eq!(key("proj/fooO2.ll"), "proj/fooO2");
        assert_eq!(key("proj/foo.O4.ll"), "proj/foo.O4");
        assert_eq!(key("proj/foo.O2.c.ll"), "proj/foo.O2.c");
        assert_eq!(key("Oxford/a.ll"), "Oxford/a");
        // A key that would be empty keeps the path.
        assert_eq!(key("O2.ll"), "O2");
        assert_eq!(key("O2/O3.ll"), "O2/O3");
    }

    #[test]
    fn split_hash_is_pinned() {
        // These values must never change: they decide which programs are test
        // programs in every dataset ever built (computed independently).
        assert_eq!(key_hash("proj/foo"), 0x07218eb45ec88cfd);
        assert_eq!(key_hash("a"), 0x5f29c2aadd9b8527);
        assert_eq!(key_hash("b"), 0x56f6a47e30923664);
        assert_eq!(split_of("proj/foo"), Split::Test);
        assert_eq!(split_of("a"), Split::Val);
        assert_eq!(split_of("b"), Split::Train);
        assert_eq!(split_of(&split_key(Path::new("proj/foo.O0.ll"))), Split::Test);
    }

    #[test]
    fn splits_are_roughly_three_one_one() {
        let mut counts = [0usize; 3];
        for i in 0..10_000 {
            counts[split_of(&format!("dir{}/prog{i}", i % 7)) as usize] += 1;
        }
        assert!((5700..6300).contains(&counts[0]), "{counts:?}");
        assert!((1800..2200).contains(&counts[1]), "{counts:?}");
        assert!((1800..2200).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn subsets_nest() {
        assert!(Subset::Ddf30.contains(30) && !Subset::Ddf30.contains(31));
        assert!(Subset::Ddf60.contains(60) && !Subset::Ddf60.contains(61));
        assert!(Subset::Ddf200.contains(200) && !Subset::Ddf200.contains(201));
        assert!(Subset::Ddf.contains(u32::MAX));
        for s in Subset::ALL {
            assert_eq!(Subset::parse(s.name()), Some(s));
        }
        for s in Split::ALL {
            assert_eq!(Split::parse(s.name()), Some(s));
        }
    }
}
