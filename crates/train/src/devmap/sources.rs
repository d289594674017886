//! DevMap's default input: each row's kernel compiled from its program's
//! own source file, with the headers it includes and the build options its
//! host code passes to `clBuildProgram`, and none of the repairs that the
//! normalised `src` column needs.
//!
//! The sources are `gpgpu-sources.tar.xz` (the seven suites as the DevMap
//! authors kept them), unpacked once into the cache. Which file holds a
//! row's kernel, and the options its program is built with, are data:
//! `crates/train/data/devmap-builds.json`, one entry per program, each with
//! the host-code line it was read from. Options may name the row: `{class}`
//! (NPB's class letter, the `dataset` column), `{class_num}` (its number
//! as NPB's host code passes it), `{wgsize}` and `{dataset}`, and `{stubs}`
//! (a directory of empty stand-ins for host-only headers that a kernel
//! header includes). A few options stand in for what an OpenCL runtime
//! did and clang does not (`-D__OPENCL_VERSION__=120`, a prepended
//! header); the table's notes say which and why. Nothing edits a source.
//!
//! **One kernel's graph.** A program's kernels share a module; a row's graph
//! is its kernel and what that kernel calls, the module's other kernels left
//! out ([`ProgramGraph::call_closure`]), and a module of one kernel is
//! taken whole. That is what the learned pass sees inside clang, where each
//! kernel of a module gets its own decision from the same rule, and it
//! keeps the real helper functions, which the normalised `src` column lost.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use programl::builder::{build_file, BuildOptions};
use programl::hash::Fnv1a;
use programl::ProgramGraph;
use rayon::prelude::*;
use regex::Regex;
use serde::Deserialize;

use super::{Kernels, Row};

/// The build table, compiled in.
pub const BUILDS: &str = include_str!("../../data/devmap-builds.json");
/// Its format line.
const FORMAT: &str = "programl-devmap-builds v1";
/// The tarball of sources in the dataset directory.
pub const TARBALL: &str = "gpgpu-sources.tar.xz";

/// How one program's kernels are built.
#[derive(Clone, Debug, Deserialize)]
pub struct ProgramBuild {
    /// The `benchmark` column's prefix: `<suite>-<program>`.
    pub program: String,
    /// Its directory under `gpgpu/`.
    pub dir: String,
    /// Kernel name to the file (relative to `dir`) that defines it.
    pub kernels: BTreeMap<String, String>,
    /// Build options, with placeholders.
    #[serde(default)]
    pub options: Vec<String>,
    /// Options that replace `options` for a dataset.
    #[serde(default)]
    pub per_dataset: BTreeMap<String, Vec<String>>,
    /// The kernel is a string literal inside host code, not a `.cl` file.
    #[serde(default)]
    pub embedded: bool,
    /// Where the options were read from (kept in the table for readers).
    #[serde(default)]
    #[allow(dead_code)]
    pub evidence: String,
}

/// The build table.
#[derive(Clone, Debug, Deserialize)]
pub struct Builds {
    pub format: String,
    /// Files that stand in for host-only headers a kernel includes (name
    /// to text), written into one directory that `{stubs}` names.
    #[serde(default)]
    pub stubs: BTreeMap<String, String>,
    pub programs: Vec<ProgramBuild>,
}

/// What compiles one row's kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unit {
    /// The program's directory (relative to `gpgpu/`): clang runs there.
    pub dir: String,
    /// The file, relative to `dir`.
    pub file: String,
    /// Options with the row's values in.
    pub options: Vec<String>,
    pub embedded: bool,
    /// The kernel's name.
    pub kernel: String,
}

impl Builds {
    /// The shipped table.
    pub fn shipped() -> Result<Builds> {
        Builds::parse(BUILDS).context("crates/train/data/devmap-builds.json")
    }

    pub fn parse(text: &str) -> Result<Builds> {
        let b: Builds = serde_json::from_str(text)?;
        if b.format != FORMAT {
            bail!("format '{}': expected '{FORMAT}'", b.format);
        }
        Ok(b)
    }

    /// The unit of `row`, or why there is none.
    pub fn unit_of(&self, row: &Row) -> std::result::Result<Unit, String> {
        let p = self
            .programs
            .iter()
            .filter(|p| row.benchmark.strip_prefix(p.program.as_str()).is_some_and(|rest| rest.starts_with('-')))
            .max_by_key(|p| p.program.len())
            .ok_or_else(|| "no program in the build table".to_string())?;
        let kernel = &row.benchmark[p.program.len() + 1..];
        let file = p.kernels.get(kernel).ok_or_else(|| "kernel not in the build table".to_string())?;
        let options = p.per_dataset.get(&row.dataset).unwrap_or(&p.options);
        let options = options.iter().map(|o| substitute(o, row)).collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Unit { dir: p.dir.clone(), file: file.clone(), options, embedded: p.embedded, kernel: kernel.to_string() })
    }
}

/// NPB's class number (`S`=0, `W`=1, `A`=2, `B`=3, `C`=4, as its host code
/// numbers them).
fn class_num(class: &str) -> Option<usize> {
    ["S", "W", "A", "B", "C", "D", "E"].iter().position(|c| *c == class)
}

/// `option` with the row's values in place of its placeholders.
fn substitute(option: &str, row: &Row) -> std::result::Result<String, String> {
    let mut out = option.replace("{dataset}", &row.dataset).replace("{wgsize}", &format!("{}", row.wgsize as u64));
    if out.contains("{class") {
        let n = class_num(&row.dataset).ok_or_else(|| format!("dataset '{}' is not an NPB class", row.dataset))?;
        out = out.replace("{class_num}", &n.to_string()).replace("{class}", &row.dataset);
    }
    Ok(out)
}

/// The OpenCL source of an embedded kernel: the string literals of the
/// initializer (or the run of adjacent literals) that holds `kernel void
/// NAME`, concatenated as `clCreateProgramWithSource` joins its strings.
pub fn embedded_source(host: &str, name: &str) -> Option<String> {
    static LITERAL: OnceLock<Regex> = OnceLock::new();
    let literal = LITERAL.get_or_init(|| Regex::new(r#""((?:[^"\\\n]|\\.)*)""#).unwrap());
    let marker = Regex::new(&format!(r"kernel\s+void\s+{}\s*\(", regex::escape(name))).ok()?;
    let spans: Vec<(usize, usize)> = literal.find_iter(host).map(|m| (m.start(), m.end())).collect();
    let hit = spans.iter().position(|&(a, b)| marker.is_match(&host[a + 1..b - 1]))?;
    // The run of literals around it that only commas and white space part.
    let joined = |x: (usize, usize), y: (usize, usize)| host[x.1..y.0].chars().all(|c| c.is_whitespace() || c == ',');
    let mut first = hit;
    while first > 0 && joined(spans[first - 1], spans[first]) {
        first -= 1;
    }
    let mut last = hit;
    while last + 1 < spans.len() && joined(spans[last], spans[last + 1]) {
        last += 1;
    }
    let src: String = spans[first..=last].iter().map(|&(a, b)| unescape(&host[a + 1..b - 1])).collect();
    Some(src)
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// The unpacked `gpgpu/` directory: `data/gpgpu` if there is one (sources
/// already unpacked), else `data/gpgpu-sources.tar.xz` unpacked once into
/// `cache/gpgpu`.
pub fn sources_root(data: &Path, cache: &Path) -> Result<PathBuf> {
    let direct = data.join("gpgpu");
    if direct.is_dir() {
        return Ok(direct);
    }
    crate::harness::unpack_tar(&data.join(TARBALL), cache, "gpgpu")
}

/// What became of one unit's module.
enum Module {
    /// The IR, and whether it needed a repair.
    Ir(PathBuf, bool),
    Failed(String),
}

/// Compiles `unit`'s file under `cache` (`<key>.ll`, or `<key>.fail` with
/// the cause); the key hashes the file's text, the options and the flags.
fn compile(unit: &Unit, root: &Path, cache: &Path, stubs: &Path, clang: &Path, flags: &[&str]) -> Result<Module> {
    // Absolute: clang runs in the program's directory.
    let absolute = |p: &Path| std::path::absolute(p).with_context(|| format!("{}: no absolute path", p.display()));
    let (dir, cache, stubs) = (absolute(&root.join(&unit.dir))?, absolute(cache)?, absolute(stubs)?);
    let (cache, stubs) = (cache.as_path(), stubs.as_path());
    let path = dir.join(&unit.file);
    // Bytes: some sources are Latin-1, which clang reads as it is.
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return Ok(Module::Failed(format!("source not found: {e}"))),
    };
    let bytes = if unit.embedded {
        match embedded_source(&String::from_utf8_lossy(&bytes), &unit.kernel) {
            Some(s) => s.into_bytes(),
            None => return Ok(Module::Failed("no embedded kernel source".into())),
        }
    } else {
        bytes
    };
    let mut h = Fnv1a::default();
    for part in [unit.dir.as_bytes(), unit.file.as_bytes(), &bytes].into_iter().chain(unit.options.iter().map(|o| o.as_bytes())) {
        h.write(part);
        h.write_u8(0);
    }
    for f in flags {
        h.write(f.as_bytes());
    }
    // The repairs' version: a module that failed before a repair existed
    // is compiled again.
    h.write(REPAIRS.as_bytes());
    let key = format!("{:016x}", h.finish());
    // The real sources are compiled as they are: no call is dropped and no
    // helper stubbed. The one repair moves a `__local` declaration that
    // clang 16 refuses in an inner scope of a kernel to the kernel's
    // outermost scope ([`hoist_local_declarations`]), which changes no
    // storage: a kernel's local variables are the work-group's for its
    // whole run wherever they are declared.
    struct Build<'a> {
        clang: &'a Path,
        flags: &'a [&'a str],
        dir: &'a Path,
        /// The program's file, or the embedded kernel's text.
        input: std::result::Result<&'a Path, &'a [u8]>,
        /// The text clang reads (for a repair).
        text: &'a [u8],
        /// The repaired text, once there is one, and how many
        /// declarations it moved.
        repaired: Option<(Vec<u8>, usize)>,
        options: Vec<String>,
    }
    impl crate::harness::Repairs for Build<'_> {
        fn attempt(&mut self, work: &Path) -> Result<std::process::Output> {
            // A file to write: the repaired text, else an embedded kernel's.
            let written = self.repaired.as_ref().map(|(t, _)| t.as_slice()).or(self.input.err());
            let input = match (written, self.input) {
                (Some(text), _) => {
                    let p = work.join("kernel.cl");
                    std::fs::write(&p, text).with_context(|| format!("{}: cannot write", p.display()))?;
                    p
                }
                (None, Ok(path)) => path.to_path_buf(),
                (None, Err(_)) => unreachable!("an embedded kernel is written"),
            };
            let mut options = self.options.clone();
            if self.repaired.is_some() {
                // The copy's `#include "..."` still finds the program's headers.
                options.push(format!("-I{}", self.dir.display()));
            }
            crate::harness::run_clang(self.clang, Some(self.dir), self.flags, &options, &work.join("kernel.ll"), &input)
        }
        fn repair(&mut self, stderr: &str) -> bool {
            let name = match (&self.repaired, self.input) {
                (None, Ok(path)) => path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                _ => "kernel.cl".to_string(),
            };
            let text = self.repaired.as_ref().map_or(self.text, |(t, _)| t.as_slice());
            match hoist_local_declarations(text, stderr, &name) {
                Some((next, moved)) => {
                    let before = self.repaired.as_ref().map_or(0, |r| r.1);
                    self.repaired = Some((next, before + moved));
                    true
                }
                None => false,
            }
        }
        fn record(&self) -> String {
            let moved = self.repaired.as_ref().map_or(0, |r| r.1);
            format!("moved {moved} __local declaration(s) from an inner scope to their kernel's outermost scope")
        }
    }
    let options: Vec<String> = unit.options.iter().map(|o| o.replace("{stubs}", &stubs.to_string_lossy())).collect();
    let mut task = Build {
        clang,
        flags,
        dir: &dir,
        input: if unit.embedded { Err(bytes.as_slice()) } else { Ok(path.as_path()) },
        text: &bytes,
        repaired: None,
        options,
    };
    Ok(match crate::harness::Cache::new(cache, false).compile(&key, 2, "kernel.ll", &mut task)? {
        crate::harness::Compiled::Ir { path, repaired } => Module::Ir(path, repaired),
        crate::harness::Compiled::Failed { cause } => Module::Failed(cause),
    })
}

/// The repairs [`compile`] makes, by version (part of the compile key).
const REPAIRS: &str = "repairs v1: inner __local declarations hoisted";

/// clang's error for a `__local` variable declared in an inner scope of a
/// kernel (OpenCL C 1.2 §6.5.2 puts them at kernel scope; the vendors'
/// compilers of the dataset's day took them anywhere).
const INNER_LOCAL: &str = "variables in the local address space can only be declared in the outermost scope of a kernel function";

/// `text` with each declaration that clang's `stderr` reports as a
/// `__local` variable in an inner scope (errors located in `file`) moved
/// to the start of its kernel's body, and how many statements moved;
/// `None` when no such error is reported or one cannot be placed.
/// Comments, string and character literals are skipped when finding
/// statements and braces; what this gets wrong still fails to compile
/// and is counted by cause.
fn hoist_local_declarations(text: &[u8], stderr: &str, file: &str) -> Option<(Vec<u8>, usize)> {
    let mut at = Vec::new();
    for line in stderr.lines() {
        let Some((place, message)) = line.split_once(": error: ") else { continue };
        if message.trim() != INNER_LOCAL {
            continue;
        }
        let mut parts = place.rsplitn(3, ':');
        let (column, line, path) = (parts.next()?, parts.next()?, parts.next()?);
        if !path.ends_with(file) {
            continue;
        }
        let (line, column): (usize, usize) = (line.parse().ok()?, column.parse().ok()?);
        let start: usize = text.split_inclusive(|&b| b == b'\n').take(line.checked_sub(1)?).map(<[u8]>::len).sum();
        let offset = start + column.checked_sub(1)?;
        if offset >= text.len() {
            return None;
        }
        at.push(offset);
    }
    if at.is_empty() {
        return None;
    }
    // One pass over the code (preprocessor lines skipped too): statement
    // ends and braces, and at each reported place the kernel's body, the
    // outermost open brace that follows a `)` (a function's; not an
    // `extern "C" {` or a struct's).
    at.sort_unstable();
    let (mut bounds, mut semis) = (Vec::new(), Vec::new());
    let mut open: Vec<(usize, bool)> = Vec::new();
    let mut body_at = Vec::with_capacity(at.len());
    let (mut i, mut last, mut line_start) = (0, 0u8, true);
    while i < text.len() {
        while body_at.len() < at.len() && at[body_at.len()] <= i {
            body_at.push(open.iter().find(|o| o.1).map(|o| o.0));
        }
        let mut code = true;
        match (text[i], text.get(i + 1).copied()) {
            (b'#', _) if line_start => {
                // To the line's end, over `\` continuations.
                while i < text.len() && !(text[i] == b'\n' && text[i - 1] != b'\\') {
                    i += 1;
                }
                code = false;
            }
            (b'/', Some(b'/')) => {
                i = text[i..].iter().position(|&b| b == b'\n').map_or(text.len(), |n| i + n);
                code = false;
            }
            (b'/', Some(b'*')) => {
                i = text[i + 2..].windows(2).position(|w| w == b"*/").map_or(text.len(), |n| i + 2 + n + 1);
                code = false;
            }
            (q @ (b'"' | b'\''), _) => {
                i += 1;
                while i < text.len() && text[i] != q && text[i] != b'\n' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
            }
            (b'{', _) => {
                open.push((i, last == b')'));
                bounds.push(i);
            }
            (b'}', _) => {
                open.pop();
                bounds.push(i);
            }
            (b';', _) => {
                bounds.push(i);
                semis.push(i);
            }
            _ => {}
        }
        if i < text.len() {
            if code && !text[i].is_ascii_whitespace() {
                last = text[i];
            }
            line_start = text[i] == b'\n' || (line_start && text[i].is_ascii_whitespace());
        }
        i += 1;
    }
    body_at.resize(at.len(), None);
    // (statement start, end, the body's brace), each statement once.
    let mut moves: Vec<(usize, usize, usize)> = Vec::new();
    for (&p, body) in at.iter().zip(&body_at) {
        let body = (*body)?;
        let start = bounds.iter().rev().find(|&&b| b < p)? + 1;
        let end = semis.iter().find(|&&s| s > p)? + 1;
        if body + 1 >= start {
            return None;
        }
        if !moves.iter().any(|m| m.0 == start) {
            moves.push((start, end, body));
        }
    }
    moves.sort_unstable();
    let mut out = Vec::with_capacity(text.len() + 1);
    let mut i = 0;
    while i < text.len() {
        if let Some(&(_, end, _)) = moves.iter().find(|m| m.0 == i) {
            i = end;
            continue;
        }
        out.push(text[i]);
        for &(start, end, _) in moves.iter().filter(|m| m.2 == i) {
            let statement = &text[start..end];
            let lead = statement.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(statement.len());
            out.push(b'\n');
            out.extend_from_slice(&statement[lead..]);
        }
        i += 1;
    }
    Some((out, moves.len()))
}

/// The graph of `unit`'s module (compiled under `cache`) and its kernels'
/// names, or why there is none.
pub fn module_graph(
    unit: &Unit,
    root: &Path,
    cache: &Path,
    clang: &Path,
    flags: &[&str],
) -> Result<std::result::Result<(ProgramGraph, Vec<String>), String>> {
    Ok(repaired_module_graph(unit, root, cache, clang, flags)?.map(|(g, names, _)| (g, names)))
}

/// [`module_graph`], and whether the module needed a repair.
fn repaired_module_graph(
    unit: &Unit,
    root: &Path,
    cache: &Path,
    clang: &Path,
    flags: &[&str],
) -> Result<std::result::Result<(ProgramGraph, Vec<String>, bool), String>> {
    Ok(match compile(unit, root, cache, &cache.join("stubs"), clang, flags)? {
        Module::Failed(cause) => Err(cause),
        Module::Ir(path, repaired) => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
            match build_file(&path, &BuildOptions::MODEL) {
                Ok(g) => Ok((g, kernel_names(&text), repaired)),
                Err(e) => Err(format!("IR does not load: {e}")),
            }
        }
    })
}

/// The kernels (`spir_kernel` definitions) of a module's IR text.
pub fn kernel_names(ir: &str) -> Vec<String> {
    static DEFINE: OnceLock<Regex> = OnceLock::new();
    let define = DEFINE.get_or_init(|| Regex::new(r#"(?m)^define\b[^@\n]*\bspir_kernel\b[^@\n]*@("?)([^\s("]+)"#).unwrap());
    define.captures_iter(ir).map(|c| c[2].to_string()).collect()
}

/// The graph of `kernel` in `graph` ([`ProgramGraph::kernel_subgraph`]:
/// the learned pass's rule, so training sees what the pass sees).
pub fn kernel_subgraph(graph: &ProgramGraph, kernel: &str, kernels: &[String]) -> Option<ProgramGraph> {
    graph.kernel_subgraph(kernel, kernels)
}

impl Kernels {
    /// Compiles (or reads from `cache`) the unit of every row, from the
    /// sources under `root`: one graph per distinct (unit, kernel).
    pub fn from_sources(
        rows: &[Row],
        builds: &Builds,
        root: &Path,
        cache: &Path,
        clang: &Path,
        flags: &[&str],
        quiet: bool,
    ) -> Result<Kernels> {
        let mut index: HashMap<std::result::Result<Unit, String>, usize> = HashMap::new();
        let mut units: Vec<std::result::Result<Unit, String>> = Vec::new();
        let row_kernel = rows
            .iter()
            .map(|r| {
                let u = builds.unit_of(r);
                *index.entry(u.clone()).or_insert_with(|| {
                    units.push(u);
                    units.len() - 1
                })
            })
            .collect();
        // One compile per module: a program's kernels share one, and an
        // embedded kernel's module is its own string.
        let module_key = |u: &Unit| Unit { kernel: if u.embedded { u.kernel.clone() } else { String::new() }, ..u.clone() };
        let mut modules: Vec<Unit> = units.iter().filter_map(|u| u.as_ref().ok()).map(module_key).collect();
        modules.sort();
        modules.dedup();
        let stubs = cache.join("stubs");
        if !builds.stubs.is_empty() {
            std::fs::create_dir_all(&stubs).with_context(|| format!("{}: cannot create", stubs.display()))?;
            for (name, text) in &builds.stubs {
                let path = stubs.join(name);
                if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                    programl::fsutil::write_bytes_atomically(&path, programl::fsutil::Durability::Atomic, text.as_bytes())?;
                }
            }
        }
        let progress = crate::harness::Progress::new("devmap", "modules", modules.len(), quiet);
        let built: Vec<Result<std::result::Result<(ProgramGraph, Vec<String>, bool), String>>> = modules
            .par_iter()
            .map(|m| {
                let unit = Unit { kernel: m.kernel.clone(), ..m.clone() };
                let out = repaired_module_graph(&unit, root, cache, clang, flags);
                progress.tick();
                out
            })
            .collect();
        let mut module_of: HashMap<&Unit, std::result::Result<(ProgramGraph, Vec<String>, bool), String>> = HashMap::new();
        for (m, b) in modules.iter().zip(built) {
            module_of.insert(m, b?);
        }
        let mut graphs = Vec::with_capacity(units.len());
        let mut failures: BTreeMap<String, usize> = BTreeMap::new();
        let mut repaired = 0;
        for u in &units {
            let graph = match u {
                Err(cause) => Err(cause.clone()),
                Ok(u) => match &module_of[&module_key(u)] {
                    Err(cause) => Err(cause.clone()),
                    Ok((g, names, fixed)) => {
                        repaired += *fixed as usize;
                        kernel_subgraph(g, &u.kernel, names).ok_or_else(|| "kernel not defined in its module".to_string())
                    }
                },
            };
            match graph {
                Ok(g) => graphs.push(Some(g)),
                Err(cause) => {
                    *failures.entry(cause).or_default() += 1;
                    graphs.push(None);
                }
            }
        }
        Ok(Kernels { graphs, row_kernel, failures, repaired })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(benchmark: &str, dataset: &str, wgsize: f64) -> Row {
        Row { benchmark: benchmark.into(), dataset: dataset.into(), transfer: 0.0, wgsize, gpu: false, src: String::new() }
    }

    #[test]
    fn rows_find_their_program_file_and_options() {
        let b = Builds::parse(
            r#"{"format": "programl-devmap-builds v1", "programs": [
                {"program": "npb-3.3-CG", "dir": "npb-3.3/CG", "kernels": {"makea_3": "cg_gpu_makea.cl"},
                 "options": ["-I.", "-DCLASS={class_num}", "-DLSIZE={wgsize}"]},
                {"program": "npb-3.3-CGX", "dir": "x", "kernels": {"k": "k.cl"}, "per_dataset": {"big": ["-DN=9"]}}]}"#,
        )
        .unwrap();
        let u = b.unit_of(&row("npb-3.3-CG-makea_3", "A", 64.0)).unwrap();
        assert_eq!((u.dir.as_str(), u.file.as_str(), u.kernel.as_str()), ("npb-3.3/CG", "cg_gpu_makea.cl", "makea_3"));
        assert_eq!(u.options, ["-I.", "-DCLASS=2", "-DLSIZE=64"]);
        // The longest program prefix wins; per-dataset options replace the default.
        let u = b.unit_of(&row("npb-3.3-CGX-k", "big", 1.0)).unwrap();
        assert_eq!((u.dir.as_str(), u.options.clone()), ("x", vec!["-DN=9".to_string()]));
        assert!(b.unit_of(&row("npb-3.3-CG-nope", "A", 1.0)).unwrap_err().contains("kernel"));
        assert!(b.unit_of(&row("npb-3.3-CG-makea_3", "large", 1.0)).unwrap_err().contains("NPB class"));
        assert!(b.unit_of(&row("shoc-X-k", "default", 1.0)).unwrap_err().contains("program"));
    }

    /// A kernel that declares `__local` arrays inside an `if` (as
    /// Rodinia's lavaMD does): clang 16 refuses it, and the declarations
    /// moved to the kernel's outermost scope compile, the rest unchanged.
    #[test]
    fn inner_local_declarations_move_to_the_kernels_scope() {
        // As lavaMD's: an `extern "C" {` that only C++ sees, and a macro
        // with a brace.
        let source = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n#define EMPTY() \\\n  {}\n\
            typedef struct { float x, y; } V;\n\
            __kernel void k(__global float *out) {\n\
            \tint i = get_local_id(0); /* { not a brace */\n\
            \tif (i < 4) {\n\
            \t\tchar br = '}'; (void)br;\n\
            \t\t// the shared copy\n\
            \t\t__local V a[4];\n\
            \t\t__local float b[4], c[4];\n\
            \t\ta[i].x = 1.0f; b[i] = 2.0f; c[i] = 3.0f;\n\
            \t\tbarrier(CLK_LOCAL_MEM_FENCE);\n\
            \t\tout[i] = a[i].x + b[3 - i] + c[i];\n\
            \t}\n\
            }\n\
            #ifdef __cplusplus\n}\n#endif\n";
        let dir = tempfile::tempdir().unwrap();
        let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
        let run = |text: &[u8]| {
            let file = dir.path().join("kernel.cl");
            std::fs::write(&file, text).unwrap();
            let out = std::process::Command::new(&clang)
                .args(["-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", "-target", "spir64", "-O1", "-S", "-emit-llvm"])
                .arg(&file)
                .arg("-o")
                .arg(dir.path().join("kernel.ll"))
                .output()
                .unwrap();
            (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        let (ok, stderr) = run(source.as_bytes());
        assert!(!ok && stderr.contains(INNER_LOCAL), "{stderr}");
        let (fixed, moved) = hoist_local_declarations(source.as_bytes(), &stderr, "kernel.cl").unwrap();
        assert_eq!(moved, 2, "one statement per declaration, b and c together");
        let fixed = String::from_utf8(fixed).unwrap();
        assert!(
            fixed.contains(
                "__kernel void k(__global float *out) {\n// the shared copy\n\t\t__local V a[4];\n__local float b[4], c[4];\n\tint i"
            ),
            "{fixed}"
        );
        assert_eq!(fixed.matches("__local").count(), 2, "{fixed}");
        assert!(fixed.contains("'}'") && fixed.contains("/* { not a brace */"), "literals and comments untouched: {fixed}");
        let (ok, stderr) = run(fixed.as_bytes());
        assert!(ok, "{stderr}\n{fixed}");
        // Nothing to move: another error, or the error in another file.
        assert!(hoist_local_declarations(source.as_bytes(), "k.cl:3:1: error: use of undeclared identifier 'x'", "kernel.cl").is_none());
        assert!(hoist_local_declarations(source.as_bytes(), &stderr.replace("kernel.cl", "other.h"), "kernel.cl").is_none());
    }

    #[test]
    fn an_embedded_kernel_is_its_joined_literals() {
        let host = "int x;\nconst char *src[] = {\n \"__kernel void Triad(__global float *a, \",\n \"float s)\",\n \"{ a[0] = s; }\"\n};\nfoo(\"other\");\n";
        assert_eq!(embedded_source(host, "Triad").unwrap(), "__kernel void Triad(__global float *a, float s){ a[0] = s; }");
        // The kernel in a later literal of the run; an earlier string with
        // an `=` in it does not cut the run.
        let later = "log(\"a = b\");\nconst char *k[] = {\"// header = 1\\n\",\n \"__kernel void T(int x) {}\"};\n";
        assert_eq!(embedded_source(later, "T").unwrap(), "// header = 1\n__kernel void T(int x) {}");
        assert!(embedded_source(host, "Other").is_none());
    }

    /// A program of two kernels sharing a helper, built with an option
    /// that its source needs: each row's graph is its own kernel with the
    /// helper, never the other kernel; a missing kernel and a failing
    /// build are counted by cause; the second build comes from the cache.
    #[test]
    fn each_row_gets_its_own_kernel_from_its_programs_file() {
        // Under the current directory, given as a relative path: clang runs
        // in the program's directory, so every path it gets is absolute.
        let root = tempfile::Builder::new().prefix(".devmap-test-").tempdir_in(".").unwrap();
        let relative = PathBuf::from(root.path().file_name().unwrap());
        let dir = root.path().join("suite/prog");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("defs.h"), "#define SCALE 3\n").unwrap();
        std::fs::write(
            dir.join("k.cl"),
            "#include \"defs.h\"\n#include \"host_only.h\"\n#ifndef LSIZE\n#error LSIZE unset\n#endif\n\
             float helper(float x) { return x * SCALE + LSIZE; }\n\
             __kernel void first(__global float *a) { a[get_global_id(0)] = helper(a[0]); }\n\
             __kernel void second(__global int *b) { b[get_local_id(0)] += 1; }\n",
        )
        .unwrap();
        let builds = Builds::parse(
            r#"{"format": "programl-devmap-builds v1", "stubs": {"host_only.h": "/* stands in */\n"}, "programs": [
                {"program": "suite-prog", "dir": "suite/prog", "kernels": {"first": "k.cl", "second": "k.cl", "gone": "missing.cl"},
                 "options": ["-I.", "-I{stubs}", "-DLSIZE={wgsize}"]},
                {"program": "suite-bad", "dir": "suite/prog", "kernels": {"first": "k.cl"}, "options": ["-I{stubs}"]}]}"#,
        )
        .unwrap();
        let rows = [
            row("suite-prog-first", "default", 64.0),
            row("suite-prog-second", "default", 64.0),
            row("suite-prog-first", "default", 64.0),
            row("suite-prog-first", "default", 128.0),
            row("suite-prog-gone", "default", 64.0),
            row("suite-bad-first", "default", 64.0),
            row("other-x-y", "default", 64.0),
        ];
        let cache = tempfile::tempdir().unwrap();
        let clang = Path::new(programl::LLVM_BINDIR).join("clang");
        let k = Kernels::from_sources(&rows, &builds, &relative, cache.path(), &clang, super::super::CLANG_FLAGS, true).unwrap();
        assert_eq!(k.row_kernel[0], k.row_kernel[2], "one graph per (unit, kernel)");
        assert_ne!(k.row_kernel[0], k.row_kernel[3], "another option value is another build");
        let names = |r: usize| -> Vec<String> {
            let g = k.graphs[k.row_kernel[r]].as_ref().unwrap_or_else(|| panic!("row {r}: {:?}", k.failures));
            let mut v: Vec<String> =
                g.graph.node_weights().filter_map(|n| n.function).map(|f| g.functions[f as usize].name.clone()).collect();
            v.sort();
            v.dedup();
            v
        };
        let (first, second) = (names(0), names(1));
        assert!(first.contains(&"first".to_string()) && first.contains(&"helper".to_string()), "{first:?}");
        assert!(!first.contains(&"second".to_string()), "{first:?}");
        assert!(second.contains(&"second".to_string()), "{second:?}");
        assert!(!second.contains(&"first".to_string()) && !second.contains(&"helper".to_string()), "{second:?}");
        assert_eq!(k.failures.values().sum::<usize>(), 3, "{:?}", k.failures);
        assert!(k.failures.keys().any(|c| c.starts_with("source not found")), "{:?}", k.failures);
        assert!(k.failures.keys().any(|c| c.contains("LSIZE unset")), "{:?}", k.failures);
        assert!(k.failures.contains_key("no program in the build table"), "{:?}", k.failures);
        // The cache answers the second time, with no clang to run.
        let again = Kernels::from_sources(&rows, &builds, &relative, cache.path(), Path::new("/no/clang"), super::super::CLANG_FLAGS, true)
            .unwrap();
        assert_eq!(again.failures, k.failures);
        assert_eq!(
            again.graphs[again.row_kernel[1]].as_ref().map(|g| g.node_count()),
            k.graphs[k.row_kernel[1]].as_ref().map(|g| g.node_count())
        );
    }

    #[test]
    fn kernel_names_are_the_spir_kernel_definitions() {
        let ir = "define spir_kernel void @a(ptr %x) {\n}\ndefine dso_local spir_func i32 @helper() {\n}\ndefine dso_local spir_kernel void @\"b.c\"() #0 {\n}\ndeclare spir_kernel void @c()\n";
        assert_eq!(kernel_names(ir), ["a", "b.c"]);
    }
}
