//! Tooling around the reference implementation (ProGraML 0.3.2's
//! `llvm2graph-10`): rewriting IR so LLVM 10 can read it, locating and running
//! the reference binaries, and comparing graphs as multisets. Used by the
//! conformance test (`tests/conformance.rs`) and the construction benchmark
//! (`benches/construction.rs`); see SPEC.md §1, "Reference implementation as
//! an oracle".
//!
//! The flow for one C file:
//!
//! 1. `clang-16 -Xclang -no-opaque-pointers -S -emit-llvm` gives typed-pointer
//!    IR;
//! 2. [`rewrite_for_llvm10`] removes what LLVM 10's parser rejects;
//! 3. [`Oracle::graph`] runs `llvm2graph-10 | graph2json` on it and reads the
//!    node-link JSON back into a [`ProgramGraph`];
//! 4. our builder, in [`programl::builder::Mode::Programl03`], builds a graph
//!    from the same rewritten text;
//! 5. [`compare`] matches the two as multisets (node order and block numbers
//!    differ legitimately: upstream walks hash-ordered containers).
//!
//! Nothing here panics on bad input: errors are [`OracleError`] values.

pub mod fuzz;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use petgraph::visit::EdgeRef;

use programl::graph::{Flow, Node, NodeKind, ProgramGraph};

// ---------------------------------------------------------------------------
// 1. Rewriting LLVM 16 typed-pointer IR for LLVM 10
// ---------------------------------------------------------------------------

/// Attributes (bare keywords) that LLVM 10's parser does not know; dropped.
const DROPPED_WORDS: &[&str] = &[
    "noundef",
    "mustprogress",
    "willreturn",
    "nofree",
    "nosync",
    "nocallback",
    "allocalign",
    "allocptr",
    "noprofile",
    "skipprofile",
    "nosanitize_bounds",
    "nosanitize_coverage",
    "disable_sanitizer_instrumentation",
    "fn_ret_thunk_extern",
    "presplitcoroutine",
    "swiftasync",
    "nomerge",
    "null_pointer_is_valid",
];

/// Attributes with an argument list that LLVM 10 does not know; dropped with
/// their arguments (`elementtype` only when [`Rewrite::keep_typed`] is off).
const DROPPED_CALLS: &[&str] = &["memory", "byref", "allockind", "vscale_range", "preallocated"];

/// Attributes whose argument LLVM 10 does not know: `sret(T)` → `sret`
/// (`sret` and `inalloca` only when [`Rewrite::keep_typed`] is off).
const STRIPPED_CALLS: &[&str] = &["sret", "inalloca", "uwtable"];
/// Typed attributes LLVM 16 requires the type of.
const TYPED: &[&str] = &["sret", "inalloca", "elementtype"];

/// Rewrites LLVM IR text printed by LLVM 16 (typed pointers, from
/// `clang-16 -Xclang -no-opaque-pointers`) into IR that LLVM 10 — and so
/// ProGraML 0.3.2's `llvm2graph-10` — parses (SPEC.md §1):
///
/// - attribute group definitions (`attributes #0 = { ... }`) become empty
///   lines, and `#N` references are removed;
/// - attributes LLVM 10 does not know are removed: `noundef`,
///   `mustprogress`, `willreturn`, `nofree`, `nosync`, `nocallback`, ...
///   (see `DROPPED_WORDS`), and with their arguments `memory(...)`,
///   `elementtype(T)`, `byref(T)`, `allockind(...)`, `vscale_range(...)`;
/// - `sret(T)` → `sret`, `inalloca(T)` → `inalloca`, `uwtable(sync)` →
///   `uwtable`;
/// - `, align N` is removed from `atomicrmw` and `cmpxchg`;
/// - `poison` → `undef`.
///
/// Quoted strings (`c"...#1..."`, `@"name"`, metadata strings) and comments
/// are never touched, and names carrying a sigil (`%noundef`, `@poison`,
/// `!noundef`) or used as labels (`poison:`) are kept. Line numbers are
/// kept, so parse errors point at the original line.
pub fn rewrite_for_llvm10(ir: &str) -> String {
    Rewrite::default().apply(ir)
}

/// Options of the LLVM 10 rewrite; the default is [`rewrite_for_llvm10`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// Keep `elementtype(T)`, `sret(T)` and `inalloca(T)` as they are.
    /// LLVM 10 rejects these spellings, but LLVM 16 *requires* them
    /// (`elementtype` on the pointer operands of indirect inline-asm
    /// constraints such as `=*m`, the type in `sret` and `inalloca`), so the
    /// text our LLVM 16 builder reads keeps them while the text given to
    /// `llvm2graph-10` does not.
    pub keep_typed: bool,
}

impl Rewrite {
    /// The rewrite for our own LLVM 16 loader: everything
    /// [`rewrite_for_llvm10`] does but to `elementtype(T)`, `sret(T)` and
    /// `inalloca(T)`, which LLVM 16 needs.
    pub const FOR_LLVM16: Rewrite = Rewrite { keep_typed: true };

    /// Rewrites `ir`; see [`rewrite_for_llvm10`].
    pub fn apply(&self, ir: &str) -> String {
        let mut out = String::with_capacity(ir.len());
        for (i, line) in ir.split('\n').enumerate() {
            if i > 0 {
                out.push('\n');
            }
            if line.trim_start().starts_with("attributes #") {
                continue;
            }
            rewrite_line(line, self, &mut out);
        }
        out
    }
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'-')
}

/// Index just past the balanced parenthesis group starting at `open`
/// (`bytes[open] == b'('`), skipping quoted strings; `None` if unbalanced.
fn skip_parens(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Removes the space left before a dropped token when the next character
/// does not need it (`i32 noundef)` → `i32)`), so no double spaces appear.
fn drop_token(bytes: &[u8], mut next: usize, out: &mut String) -> usize {
    if next < bytes.len() && bytes[next] == b' ' && (out.is_empty() || out.ends_with([' ', '(', ','])) {
        next += 1;
    } else if out.ends_with(' ') && (next >= bytes.len() || matches!(bytes[next], b')' | b',' | b' ')) {
        out.pop();
    }
    next
}

fn rewrite_line(line: &str, options: &Rewrite, out: &mut String) {
    let bytes = line.as_bytes();
    let n = bytes.len();
    let mut atomic = false;
    // Start of the pending run of bytes copied unchanged.
    let mut i = 0;
    while i < n {
        let c = bytes[i];
        match c {
            b'"' => {
                // A quoted string: copy through the closing quote. LLVM
                // escapes quotes inside strings as \22, so no `\"` occurs.
                let end = bytes[i + 1..].iter().position(|&b| b == b'"').map_or(n, |p| i + 1 + p + 1);
                out.push_str(&line[i..end]);
                i = end;
            }
            b';' => {
                out.push_str(&line[i..]);
                return;
            }
            b'#' if i + 1 < n && bytes[i + 1].is_ascii_digit() && (i == 0 || !is_ident_char(bytes[i - 1])) => {
                // An attribute group reference `#12`.
                let mut j = i + 1;
                while j < n && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                i = drop_token(bytes, j, out);
            }
            b',' if atomic && align_follows(bytes, i + 1).is_some() => {
                i = align_follows(bytes, i + 1).unwrap_or(i + 1);
            }
            _ if c.is_ascii_alphabetic() || c == b'_' => {
                let mut j = i;
                while j < n && is_ident_char(bytes[j]) {
                    j += 1;
                }
                let word = &line[i..j];
                let sigil = i > 0 && matches!(bytes[i - 1], b'%' | b'@' | b'!' | b'$' | b'#' | b'^');
                let label = j < n && bytes[j] == b':';
                if sigil || label {
                    out.push_str(word);
                    i = j;
                    continue;
                }
                let paren = j < n && bytes[j] == b'(';
                let kept = options.keep_typed && TYPED.contains(&word);
                if word == "atomicrmw" || word == "cmpxchg" {
                    atomic = true;
                }
                if DROPPED_WORDS.contains(&word) {
                    i = drop_token(bytes, j, out);
                } else if kept {
                    out.push_str(word);
                    i = j;
                } else if paren && (DROPPED_CALLS.contains(&word) || word == "elementtype") {
                    match skip_parens(bytes, j) {
                        Some(end) => i = drop_token(bytes, end, out),
                        None => {
                            out.push_str(word);
                            i = j;
                        }
                    }
                } else if paren && STRIPPED_CALLS.contains(&word) {
                    out.push_str(word);
                    i = skip_parens(bytes, j).unwrap_or(j);
                } else if word == "poison" {
                    out.push_str("undef");
                    i = j;
                } else {
                    out.push_str(word);
                    i = j;
                }
            }
            _ => {
                // Copy a run of bytes that cannot start anything above.
                let mut j = i + 1;
                while j < n && !matches!(bytes[j], b'"' | b';' | b'#' | b',') && !(bytes[j].is_ascii_alphabetic() || bytes[j] == b'_') {
                    j += 1;
                }
                // Identifier characters glued to the previous run (digits of
                // `%12`, say) are copied here, so a word never starts inside
                // another identifier.
                while j < n && is_ident_char(bytes[j]) && is_ident_char(bytes[j - 1]) {
                    j += 1;
                }
                out.push_str(&line[i..j]);
                i = j;
            }
        }
    }
}

/// If `bytes[from..]` is ` align N` (spaces, `align`, spaces, digits) followed
/// by the end, a comma or a space, returns the index just past it.
fn align_follows(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < bytes.len() && bytes[i] == b' ' {
        i += 1;
    }
    let rest = &bytes[i..];
    if !rest.starts_with(b"align") {
        return None;
    }
    i += 5;
    let spaces = i;
    while i < bytes.len() && bytes[i] == b' ' {
        i += 1;
    }
    let digits = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    if i == digits || spaces == digits {
        return None;
    }
    match bytes.get(i) {
        None | Some(b',') | Some(b' ') => Some(i),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// 2. Running the reference binaries
// ---------------------------------------------------------------------------

/// Whether this is a CI run: `CI` is set to anything but empty, `0` or
/// `false` (`.ci/run` exports `CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// A prerequisite of `test` (a tool, the corpus) is missing. In CI every
/// tool the bootstrap installs is required, so this panics with `why`.
/// Elsewhere it writes `SKIP: test: why` straight to the process's stderr
/// (past the test harness's capture, so the line shows even when the test
/// passes; `scripts/test.sh` counts these lines as skips, never as passes)
/// and returns: the caller then leaves out what needed the prerequisite.
#[track_caller]
pub fn skip_unless_ci(test: &str, why: &str) {
    if in_ci() {
        panic!("{test}: {why} (CI=true: every tool the bootstrap installs is required; run `bash scripts/bootstrap.sh`)");
    }
    let line = format!("SKIP: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The unpacked source of the corpus project `project` (a project of
/// `scripts/corpus.lock`'s `corpus` set, as `scripts/corpus.sh` fetches it
/// into `$PROGRAML_CACHE/corpus-src/<package>/`), or why it is not there:
/// the reason the default corpus's manifest gives for the project, or that
/// `scripts/corpus.sh` has not run.
pub fn corpus_source(project: &str) -> Result<PathBuf, String> {
    corpus_source_in(&programl::fsutil::cache_dir(), project)
}

fn corpus_source_in(cache: &Path, project: &str) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lock = root.join("scripts/corpus.lock");
    let text = std::fs::read_to_string(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    let source = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|c| c.len() == 5 && c[0] == "corpus" && c[1] == project)
        .map(|c| c[2].to_string())
        .ok_or_else(|| format!("{project} is not a project of the corpus set in {}", lock.display()))?;
    let package = source.strip_prefix("debian:").ok_or_else(|| format!("{project}'s source {source} is not a Debian package"))?;
    let dir = cache.join("corpus-src").join(package);
    let unpacked = std::fs::read_dir(&dir).ok().and_then(|d| d.flatten().map(|e| e.path()).find(|p| p.is_dir()));
    if let Some(found) = unpacked {
        return Ok(found);
    }
    let manifest = cache.join("corpus").join("corpus-manifest.json");
    let why = match std::fs::read(&manifest) {
        Err(_) => format!("scripts/corpus.sh has not run here (no {})", manifest.display()),
        Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|m| {
                m["missing"]
                    .as_array()?
                    .iter()
                    .find(|x| x["project"] == project)
                    .and_then(|x| x["reason"].as_str().map(|r| format!("the corpus lacks it: {r} ({})", manifest.display())))
            })
            .unwrap_or_else(|| format!("not under {} (run scripts/corpus.sh)", dir.display())),
    };
    Err(format!("corpus project {project} ({source}): {why}"))
}

/// Why the reference tools could not produce a graph.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error(
        "ProGraML 0.3.2 reference binaries not found: {0} (run `bash scripts/bootstrap.sh`, \
         or set PROGRAML_ORACLE_DIR to the wheel's programl/bin directory)"
    )]
    NotFound(String),
    #[error("running {tool}: {message}")]
    Spawn { tool: String, message: String },
    #[error("{tool} failed ({status}): {stderr}")]
    Failed { tool: String, status: String, stderr: String },
    #[error("reading graph2json output: {0}")]
    Json(String),
}

/// The reference tools: `llvm2graph-10` and `graph2json` of the `programl`
/// 0.3.2 wheel.
#[derive(Clone, Debug)]
pub struct Oracle {
    /// The wheel's `programl/bin` directory.
    pub bin_dir: PathBuf,
}

/// The project's cache directory ([`programl::fsutil::cache_dir`]).
pub fn cache_dir() -> PathBuf {
    programl::fsutil::cache_dir()
}

/// Where `scripts/bootstrap.sh` unpacks the wheel's binaries.
pub fn default_oracle_dir() -> PathBuf {
    cache_dir().join("oracle/programl-0.3.2.data/purelib/programl/bin")
}

impl Oracle {
    /// Finds the binaries in `$PROGRAML_ORACLE_DIR`, else in
    /// [`default_oracle_dir`], and checks that `llvm2graph-10` runs.
    pub fn locate() -> Result<Oracle, OracleError> {
        let dir = std::env::var_os("PROGRAML_ORACLE_DIR").filter(|d| !d.is_empty()).map(PathBuf::from).unwrap_or_else(default_oracle_dir);
        Oracle::in_dir(&dir)
    }

    /// Uses the binaries in `dir`.
    pub fn in_dir(dir: &Path) -> Result<Oracle, OracleError> {
        for tool in ["llvm2graph-10", "graph2json"] {
            if !dir.join(tool).is_file() {
                return Err(OracleError::NotFound(format!("no {tool} in {}", dir.display())));
            }
        }
        let oracle = Oracle { bin_dir: dir.to_path_buf() };
        let out = Command::new(oracle.llvm2graph())
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| OracleError::NotFound(format!("{}: {e}", oracle.llvm2graph().display())))?;
        if !out.status.success() {
            return Err(OracleError::NotFound(format!(
                "{} --version failed (is libtinfo5 installed?): {}",
                oracle.llvm2graph().display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(oracle)
    }

    /// Path of `llvm2graph-10`.
    pub fn llvm2graph(&self) -> PathBuf {
        self.bin_dir.join("llvm2graph-10")
    }

    /// Path of `graph2json`.
    pub fn graph2json(&self) -> PathBuf {
        self.bin_dir.join("graph2json")
    }

    /// `llvm2graph-10 --stdout_fmt=pb < ir`: the binary `ProgramGraph`
    /// protocol buffer of LLVM 10 IR text (see [`rewrite_for_llvm10`]).
    pub fn graph_pb(&self, ir: &[u8]) -> Result<Vec<u8>, OracleError> {
        pipe(&self.llvm2graph(), &["--stdout_fmt=pb"], ir)
    }

    /// The node-link JSON of a binary `ProgramGraph` (`graph2json
    /// --stdin_fmt=pb`).
    pub fn pb_to_json(&self, pb: &[u8]) -> Result<Vec<u8>, OracleError> {
        pipe(&self.graph2json(), &["--stdin_fmt=pb"], pb)
    }

    /// The reference graph of LLVM 10 IR text.
    pub fn graph(&self, ir: &[u8]) -> Result<ProgramGraph, OracleError> {
        let pb = self.graph_pb(ir)?;
        let json = self.pb_to_json(&pb)?;
        read_node_link_json(&json)
    }
}

/// Runs `tool args` with `input` on stdin; returns stdout, or an error with
/// the tool's exit status and stderr.
pub fn pipe(tool: &Path, args: &[&str], input: &[u8]) -> Result<Vec<u8>, OracleError> {
    let name = tool.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| OracleError::Spawn { tool: name.clone(), message: e.to_string() })?;
    // Feed stdin from a thread so a full stdout pipe cannot deadlock us.
    let mut stdin = child.stdin.take();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            // The tool may exit early on a parse error: a broken pipe is
            // reported through its exit status instead.
            let _ = s.write_all(&input);
        }
        drop(stdin);
    });
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_end(&mut stdout).map_err(|e| OracleError::Spawn { tool: name.clone(), message: e.to_string() })?;
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut stderr);
    }
    let status = child.wait().map_err(|e| OracleError::Spawn { tool: name.clone(), message: e.to_string() })?;
    let _ = writer.join();
    if !status.success() {
        let text = String::from_utf8_lossy(&stderr);
        let text: String = text.lines().take(3).collect::<Vec<_>>().join(" | ");
        return Err(OracleError::Failed { tool: name, status: status.to_string(), stderr: text });
    }
    Ok(stdout)
}

/// Reads upstream `graph2json` output (networkx node-link JSON, SPEC.md §1
/// "Interchange") into a [`ProgramGraph`], with the project's reader
/// ([`programl::format::read_graph`]).
pub fn read_node_link_json(bytes: &[u8]) -> Result<ProgramGraph, OracleError> {
    programl::format::read_graph(bytes, programl::format::Format::Json).map_err(|e| OracleError::Json(e.to_string()))
}

// ---------------------------------------------------------------------------
// 3. Comparing graphs as multisets
// ---------------------------------------------------------------------------

/// A node as the comparison sees it: (type, text, full_text).
pub type NodeKey = (NodeKind, String, Option<String>);
/// An edge as the comparison sees it: (flow, position, source, target).
pub type EdgeKey = (Flow, u32, NodeKey, NodeKey);

/// The difference of two graphs compared as multisets of nodes, of edges
/// (with their end nodes' keys), and of function names. Node order and block
/// numbers are not compared. "left" is the first argument of [`compare`]
/// (ours), "right" the second (the reference).
#[derive(Clone, Debug, Default)]
pub struct GraphDiff {
    pub left_nodes: usize,
    pub right_nodes: usize,
    pub left_edges: usize,
    pub right_edges: usize,
    /// Nodes with more copies on the left, with the surplus count.
    pub nodes_only_left: Vec<(NodeKey, usize)>,
    pub nodes_only_right: Vec<(NodeKey, usize)>,
    pub edges_only_left: Vec<(EdgeKey, usize)>,
    pub edges_only_right: Vec<(EdgeKey, usize)>,
    pub functions_only_left: Vec<String>,
    pub functions_only_right: Vec<String>,
}

impl GraphDiff {
    /// True when the graphs are equal as multisets.
    pub fn is_match(&self) -> bool {
        self.nodes_only_left.is_empty()
            && self.nodes_only_right.is_empty()
            && self.edges_only_left.is_empty()
            && self.edges_only_right.is_empty()
            && self.functions_only_left.is_empty()
            && self.functions_only_right.is_empty()
    }

    /// Writes at most `limit` items of each kind of difference.
    pub fn summary(&self, limit: usize) -> String {
        let mut s = String::new();
        self.write_summary(&mut s, limit).ok();
        s
    }

    fn write_summary(&self, s: &mut String, limit: usize) -> fmt::Result {
        use std::fmt::Write as _;
        writeln!(
            s,
            "{} nodes / {} edges (ours) vs {} / {} (reference)",
            self.left_nodes, self.left_edges, self.right_nodes, self.right_edges
        )?;
        let node = |k: &NodeKey| format!("{} {:?} {:?}", k.0, k.1, k.2.as_deref().unwrap_or("<none>"));
        for (side, items) in [("ours only", &self.nodes_only_left), ("reference only", &self.nodes_only_right)] {
            for (k, c) in items.iter().take(limit) {
                writeln!(s, "  node {side} x{c}: {}", node(k))?;
            }
            if items.len() > limit {
                writeln!(s, "  ... {} more nodes {side}", items.len() - limit)?;
            }
        }
        for (side, items) in [("ours only", &self.edges_only_left), ("reference only", &self.edges_only_right)] {
            for ((flow, pos, src, dst), c) in items.iter().take(limit) {
                writeln!(s, "  edge {side} x{c}: {flow} pos {pos}: {} -> {}", node(src), node(dst))?;
            }
            if items.len() > limit {
                writeln!(s, "  ... {} more edges {side}", items.len() - limit)?;
            }
        }
        for (side, items) in [("ours only", &self.functions_only_left), ("reference only", &self.functions_only_right)] {
            if !items.is_empty() {
                writeln!(s, "  functions {side}: {:?}", items.iter().take(limit).collect::<Vec<_>>())?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for GraphDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary(5))
    }
}

fn node_key(n: &Node) -> NodeKey {
    (n.kind, n.text.clone(), n.full_text.clone())
}

/// Items with their surplus count on one side of a multiset difference.
type Surplus<K> = Vec<(K, usize)>;

fn multiset_diff<K: Ord + Clone>(left: BTreeMap<K, usize>, mut right: BTreeMap<K, usize>) -> (Surplus<K>, Surplus<K>) {
    let mut only_left = Vec::new();
    for (k, l) in left {
        let r = right.remove(&k).unwrap_or(0);
        if l > r {
            only_left.push((k.clone(), l - r));
        } else if r > l {
            right.insert(k, r - l);
        }
    }
    (only_left, right.into_iter().collect())
}

fn count<K: Ord>(items: impl Iterator<Item = K>) -> BTreeMap<K, usize> {
    let mut m = BTreeMap::new();
    for k in items {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// Compares `left` (ours) and `right` (the reference) as multisets: nodes by
/// (type, text, full_text); edges by (flow, position, source node key,
/// target node key); function names.
pub fn compare(left: &ProgramGraph, right: &ProgramGraph) -> GraphDiff {
    let nodes = |g: &ProgramGraph| count(g.graph.node_weights().map(node_key));
    let edges = |g: &ProgramGraph| {
        count(
            g.graph
                .edge_references()
                .map(|e| (e.weight().flow, e.weight().position, node_key(&g.graph[e.source()]), node_key(&g.graph[e.target()]))),
        )
    };
    let functions = |g: &ProgramGraph| count(g.functions.iter().map(|f| f.name.clone()));
    let (nodes_only_left, nodes_only_right) = multiset_diff(nodes(left), nodes(right));
    let (edges_only_left, edges_only_right) = multiset_diff(edges(left), edges(right));
    let (fl, fr) = multiset_diff(functions(left), functions(right));
    let flatten = |v: Vec<(String, usize)>| v.into_iter().flat_map(|(k, c)| std::iter::repeat_n(k, c)).collect();
    GraphDiff {
        left_nodes: left.node_count(),
        right_nodes: right.node_count(),
        left_edges: left.edge_count(),
        right_edges: right.edge_count(),
        nodes_only_left,
        nodes_only_right,
        edges_only_left,
        edges_only_right,
        functions_only_left: flatten(fl),
        functions_only_right: flatten(fr),
    }
}

/// C source of generated test program `i`: a mix of loops, branches, switches, recursion,
/// pointer chasing and arithmetic, with a long chain of branches in some
/// programs so step counts reach past 30 and 60.
pub fn c_program(i: usize) -> String {
    let ops = ["+", "-", "*", "^", "|", "&"];
    let mut s = String::from("struct node { int value; struct node *next; };\nint table[64];\n");
    let functions = 1 + i % 5;
    for f in 0..functions {
        let op = ops[(i + f) % ops.len()];
        let k = 3 + (i * 7 + f) % 11;
        s += &match (i + f) % 6 {
            0 => format!("int f{f}(int n) {{ int s = 0; for (int j = 0; j < n; j++) s = s {op} table[j % 64] {op} {k}; return s; }}\n"),
            1 => format!(
                "int f{f}(int n) {{ int s = 0; for (int a = 0; a < n; a++) for (int b = 0; b < a; b++) s += (a {op} b) * (a {op} b) + {k}; return s; }}\n"
            ),
            2 => format!(
                "int f{f}(int x) {{ if (x > {k}) return x {op} 1; else if (x < -{k}) return x * 2; else if (x == 0) return {k}; return x - {k}; }}\n"
            ),
            3 => format!(
                "int f{f}(int x) {{ switch (x % 5) {{ case 0: return x {op} {k}; case 1: return x + 1; case 2: x *= 3; /* fall through */ case 3: return x - {k}; default: return 0; }} }}\n"
            ),
            4 => format!("int f{f}(int n) {{ return n < 2 ? n : f{f}(n - 1) {op} f{f}(n - 2); }}\n"),
            _ => format!(
                "int f{f}(struct node *p) {{ int s = {k}; while (p) {{ if (p->value > s) s = p->value {op} s; p = p->next; }} return s; }}\n"
            ),
        };
    }
    // A chain of branches: long control paths, many blocks.
    let chain = if i.is_multiple_of(3) { 10 + (i * 13) % 70 } else { 0 };
    s += "int chain(int x) {\n";
    for c in 0..chain {
        s += &format!("  if (x > {c}) x = x * {} + {c}; else x ^= {};\n", c % 7 + 1, c + 3);
    }
    s += "  return x;\n}\n";
    s += "int main(int argc, char **argv) {\n  int r = chain(argc);\n  struct node n = { argc, 0 };\n";
    for f in 0..functions {
        let arg = if (i + f) % 6 == 5 { "&n".to_string() } else { format!("argc + {f}") };
        s += &format!("  r += f{f}({arg});\n");
    }
    s += "  int a = argc * r + 7, b = argc * r + 7;\n  return a ^ b ^ r;\n}\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(s: &str) -> String {
        rewrite_for_llvm10(s)
    }

    /// A corpus project's source is found where corpus.sh unpacks it, and
    /// its absence is explained by the manifest's reason, or by corpus.sh
    /// not having run.
    #[test]
    fn corpus_sources_are_found_or_their_absence_explained() {
        let cache = std::env::temp_dir().join(format!("programl-testkit-corpus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let e = corpus_source_in(&cache, "zlib").unwrap_err();
        assert!(e.contains("corpus project zlib (debian:zlib)") && e.contains("scripts/corpus.sh has not run"), "{e}");
        std::fs::create_dir_all(cache.join("corpus")).unwrap();
        std::fs::write(
            cache.join("corpus/corpus-manifest.json"),
            r#"{"missing": [{"project": "zlib", "reason": "the mirror lists no version of zlib"}]}"#,
        )
        .unwrap();
        let e = corpus_source_in(&cache, "zlib").unwrap_err();
        assert!(e.contains("the corpus lacks it: the mirror lists no version of zlib"), "{e}");
        let e = corpus_source_in(&cache, "lua").unwrap_err();
        assert!(e.contains("corpus project lua (debian:lua5.4)") && e.contains("run scripts/corpus.sh"), "{e}");
        let dir = cache.join("corpus-src/lua5.4/lua5.4-5.4.4");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(corpus_source_in(&cache, "lua").unwrap(), dir);
        assert!(corpus_source_in(&cache, "no-such-project").unwrap_err().contains("not a project of the corpus set"));
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn drops_attribute_groups_and_references() {
        let ir = "define i32 @f(i32 noundef %0) #0 {\n  ret i32 %0\n}\nattributes #0 = { noinline nounwind }\n";
        assert_eq!(rw(ir), "define i32 @f(i32 %0) {\n  ret i32 %0\n}\n\n");
        assert_eq!(rw("  %3 = call i32 @g(i32 %2) #12, !tbaa !3"), "  %3 = call i32 @g(i32 %2), !tbaa !3");
    }

    #[test]
    fn keeps_strings_comments_and_sigils() {
        let s = "@.str = private constant [9 x i8] c\"#1 poison\\00\", align 1 ; noundef #2";
        assert_eq!(rw(s), s);
        let names = "  %noundef = load i32, i32* @poison, !noundef !0\npoison:";
        assert_eq!(rw(names), names);
        assert_eq!(rw("@\"noundef #3\" = global i32 0"), "@\"noundef #3\" = global i32 0");
    }

    #[test]
    fn rewrites_typed_attributes() {
        assert_eq!(
            rw("define void @f(%struct.S* noalias sret(%struct.S) align 4 %0, i32* byref(i32) %1)"),
            "define void @f(%struct.S* noalias sret align 4 %0, i32* %1)"
        );
        let asm = "call void asm \"\", \"=*m\"(i32* elementtype(i32) %x) #3";
        assert_eq!(rw(asm), "call void asm \"\", \"=*m\"(i32* %x)");
        assert_eq!(Rewrite::FOR_LLVM16.apply(asm), "call void asm \"\", \"=*m\"(i32* elementtype(i32) %x)");
        let sret = "call void @f(%S* noundef sret(%S) align 8 %1) #2";
        assert_eq!(Rewrite::FOR_LLVM16.apply(sret), "call void @f(%S* sret(%S) align 8 %1)");
        assert_eq!(rw("call void @g({ i32, [2 x i8] }* inalloca({ i32, [2 x i8] }) %a)"), "call void @g({ i32, [2 x i8] }* inalloca %a)");
        assert_eq!(rw("declare noundef i32 @h(i8* nocapture noundef)"), "declare i32 @h(i8* nocapture)");
    }

    #[test]
    fn rewrites_atomics_and_poison() {
        assert_eq!(rw("  %5 = atomicrmw add i32* %p, i32 1 seq_cst, align 4"), "  %5 = atomicrmw add i32* %p, i32 1 seq_cst");
        assert_eq!(
            rw("  %6 = cmpxchg i32* %p, i32 0, i32 1 seq_cst seq_cst, align 4, !pcsections !0"),
            "  %6 = cmpxchg i32* %p, i32 0, i32 1 seq_cst seq_cst, !pcsections !0"
        );
        assert_eq!(rw("  %7 = load i32, i32* %p, align 4"), "  %7 = load i32, i32* %p, align 4");
        assert_eq!(
            rw("  %8 = shufflevector <4 x i32> %v, <4 x i32> poison, <4 x i32> zeroinitializer"),
            "  %8 = shufflevector <4 x i32> %v, <4 x i32> undef, <4 x i32> zeroinitializer"
        );
    }

    #[test]
    fn never_panics_on_odd_input() {
        for s in ["\"", "#", "memory(", "sret(", "atomicrmw ,", ", align", "\u{e9}#1 \"x", "a#1", ""] {
            let _ = rw(s);
        }
        assert_eq!(rw("x memory(unbalanced"), "x memory(unbalanced");
    }

    use programl::graph::Function;

    #[test]
    fn compares_as_multisets() {
        let mut a = ProgramGraph::new();
        let i = a.add_node(Node {
            kind: NodeKind::Instruction,
            text: "ret".into(),
            full_text: Some("ret void".into()),
            function: Some(0),
            block: 0,
        });
        a.add_edge(Flow::Call, 0, ProgramGraph::external(), i);
        a.functions.push(Function { name: "f".into(), module: 0, entry: None });
        let mut b = a.clone();
        assert!(compare(&a, &b).is_match());
        b.graph[i].block = 7;
        assert!(compare(&a, &b).is_match(), "block numbers are not compared");
        b.add_edge(Flow::Call, 0, ProgramGraph::external(), i);
        let d = compare(&a, &b);
        assert!(!d.is_match());
        assert_eq!(d.edges_only_right.len(), 1);
        assert_eq!(d.edges_only_right[0].1, 1);
        assert!(d.summary(3).contains("edge reference only x1"));
    }

    #[test]
    fn reads_node_link_json() {
        let json = br#"{"directed":true,"multigraph":true,"graph":{"function":[{"module":0,"name":"f"}],
            "module":[{"features":{"llvm_target_triple":["x86_64"]},"name":"a.c"}]},
            "nodes":[{"block":0,"function":0,"id":0,"text":"[external]","type":0},
                     {"block":0,"features":{"full_text":["ret void"]},"function":0,"id":1,"text":"ret","type":0}],
            "links":[{"flow":2,"key":0,"position":0,"source":0,"target":1}]}"#;
        let g = read_node_link_json(json).unwrap();
        assert_eq!(g.node_count(), 2);
        assert_eq!(g.edge_count(), 1);
        assert_eq!(g.node(1.into()).full_text.as_deref(), Some("ret void"));
        assert_eq!(g.modules[0].features["llvm_target_triple"], "x86_64");
        assert!(read_node_link_json(b"{").is_err());
    }
}
