//! Conformance with the reference implementation (SPEC.md §1, "Reference
//! implementation as an oracle"): our builder in `Mode::Programl03` must give
//! the same graph as ProGraML 0.3.2's `llvm2graph-10`, compared as multisets
//! of nodes (type, text, full_text) and edges (flow, position, end nodes).
//!
//! Inputs, each compiled/rewritten as the oracle needs (typed-pointer IR from
//! clang-16, then `programl_testkit::rewrite_for_llvm10`):
//! - the C programs bundled in `tests/data/conformance/`, at -O0 and -O2;
//! - a fixed sample of 150 files of the real-code corpus built by
//!   `scripts/corpus.sh` (under `$PROGRAML_CACHE/corpus`), or all of it
//!   with `PROGRAML_CONFORMANCE_ALL=1`.
//!
//! Every graph of ours passes `programl::builder::check` (the graph
//! invariants, and operand positions and types against LLVM), and every
//! reference graph `ProgramGraph::validate` (the reader checks it).
//!
//! Both need the reference binaries (`bash scripts/bootstrap.sh` installs
//! them) and fail, saying so, when they are missing. Mismatches print their
//! first differing nodes and edges; set `PROGRAML_CONFORMANCE_REPORT=FILE`
//! to append every mismatch's diff to FILE, and
//! `PROGRAML_CONFORMANCE_FILES=a.ll:b.ll` to check just those IR files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use programl::builder::{build, check, BuildOptions, Mode};
use programl_testkit::{compare, GraphDiff, Oracle};
use rayon::prelude::*;

/// Exact-match share required of every input set.
const REQUIRED_SHARE: f64 = 0.99;

/// Size of the fixed corpus sample.
const SAMPLE: usize = 150;

fn oracle() -> Oracle {
    match Oracle::locate() {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    }
}

fn clang() -> PathBuf {
    let bundled = Path::new(programl::LLVM_BINDIR).join("clang");
    if bundled.is_file() {
        bundled
    } else {
        PathBuf::from(format!("clang-{}", programl::LLVM_MAJOR))
    }
}

enum Outcome {
    Match,
    Mismatch(GraphDiff),
    /// llvm2graph-10 rejected the rewritten IR (a gap in the rewrite).
    OracleFailed(String),
    /// LLVM 16 rejected the rewritten IR.
    LoadFailed(String),
    /// Our graph breaks an invariant (`programl::builder::check`).
    Invalid(String),
}

/// Rewrites `ir` (LLVM 16 typed-pointer text) for LLVM 10 and compares our
/// compat graph of the rewritten text with the reference graph. Our side
/// reads the same rewrite except that it keeps `elementtype(T)`, which
/// LLVM 16 requires on inline-asm memory operands (see `programl_testkit::Rewrite`).
fn check_ir(oracle: &Oracle, name: &str, ir: &str) -> Outcome {
    let rewritten = programl_testkit::rewrite_for_llvm10(ir);
    let reference = match oracle.graph(rewritten.as_bytes()) {
        Ok(g) => g,
        Err(e) => return Outcome::OracleFailed(e.to_string()),
    };
    let ours_text = programl_testkit::Rewrite::FOR_LLVM16.apply(ir);
    let context = inkwell::context::Context::create();
    let module = match programl::ir::parse_module(&context, ours_text.as_bytes(), name) {
        Ok(m) => m,
        Err(e) => return Outcome::LoadFailed(e.to_string()),
    };
    let ours = build(&module, &BuildOptions { mode: Mode::Programl03, ..Default::default() });
    if let Err(errors) = check(&module, &ours, Mode::Programl03) {
        return Outcome::Invalid(errors.into_iter().take(3).collect::<Vec<_>>().join("; "));
    }
    let diff = compare(&ours, &reference);
    if diff.is_match() {
        Outcome::Match
    } else {
        Outcome::Mismatch(diff)
    }
}

/// Results of one input set.
#[derive(Default)]
struct Tally {
    total: usize,
    matched: usize,
    mismatched: Vec<(String, GraphDiff)>,
    oracle_failed: Vec<(String, String)>,
    load_failed: Vec<(String, String)>,
    invalid: Vec<(String, String)>,
    /// Per group (corpus project): (files, matches).
    groups: BTreeMap<String, (usize, usize)>,
}

impl Tally {
    fn add(&mut self, name: String, group: &str, outcome: Outcome) {
        self.total += 1;
        let g = self.groups.entry(group.to_string()).or_default();
        g.0 += 1;
        match outcome {
            Outcome::Match => {
                self.matched += 1;
                g.1 += 1;
            }
            Outcome::Mismatch(d) => self.mismatched.push((name, d)),
            Outcome::OracleFailed(e) => self.oracle_failed.push((name, e)),
            Outcome::LoadFailed(e) => self.load_failed.push((name, e)),
            Outcome::Invalid(e) => self.invalid.push((name, e)),
        }
    }

    fn share(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.matched as f64 / self.total as f64
        }
    }

    /// Prints the result and, if asked, writes every diff to a file.
    fn report(&mut self, title: &str) -> String {
        self.mismatched.sort_by(|a, b| a.0.cmp(&b.0));
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{title}: {}/{} files match llvm2graph-10 exactly ({:.2}%); {} mismatches, {} rejected by llvm2graph-10, {} rejected by LLVM 16",
            self.matched,
            self.total,
            100.0 * self.share(),
            self.mismatched.len(),
            self.oracle_failed.len(),
            self.load_failed.len()
        );
        if self.groups.len() > 1 {
            for (group, (n, m)) in &self.groups {
                let _ = writeln!(s, "  {group:<12} {m:>5}/{n:<5} match");
            }
        }
        for (name, e) in self.oracle_failed.iter().take(5) {
            let _ = writeln!(s, "  llvm2graph-10 rejected {name}: {e}");
        }
        for (name, e) in self.load_failed.iter().take(5) {
            let _ = writeln!(s, "  LLVM 16 rejected {name}: {e}");
        }
        if !self.invalid.is_empty() {
            let _ = writeln!(s, "  {} graphs of ours break an invariant", self.invalid.len());
        }
        for (name, e) in self.invalid.iter().take(5) {
            let _ = writeln!(s, "  INVALID {name}: {e}");
        }
        for (name, d) in self.mismatched.iter().take(5) {
            let _ = write!(s, "  MISMATCH {name}: {}", d.summary(4));
        }
        print!("{s}");
        if let Ok(path) = std::env::var("PROGRAML_CONFORMANCE_REPORT") {
            let mut full = s.clone();
            for (name, d) in &self.mismatched {
                let _ = write!(full, "=== {name}\n{}", d.summary(50));
            }
            for (name, e) in &self.oracle_failed {
                let _ = writeln!(full, "=== {name}\nllvm2graph-10: {e}");
            }
            use std::io::Write as _;
            let mut file =
                std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
            file.write_all(full.as_bytes()).unwrap_or_else(|e| panic!("writing {path}: {e}"));
        }
        s
    }

    fn assert_share(&mut self, title: &str) {
        let text = self.report(title);
        self.assert_reported(title, &text);
    }

    fn assert_reported(&self, title: &str, text: &str) {
        assert!(self.total > 0, "{title}: no inputs");
        assert!(self.invalid.is_empty(), "{title}: {} graphs break an invariant\n{text}", self.invalid.len());
        assert!(
            self.share() >= REQUIRED_SHARE,
            "{title}: only {:.2}% of files match the reference exactly (need {:.0}%)\n{text}",
            100.0 * self.share(),
            100.0 * REQUIRED_SHARE
        );
    }
}

/// Checks `files` (IR files; group = their corpus project) in parallel,
/// printing progress every 10%.
fn check_files(oracle: &Oracle, root: &Path, files: &[PathBuf]) -> Tally {
    let done = AtomicUsize::new(0);
    let start = Instant::now();
    let step = (files.len() / 10).max(1);
    let outcomes: Vec<(String, String, Outcome)> = files
        .par_iter()
        .map(|path| {
            let rel = path.strip_prefix(root).unwrap_or(path).display().to_string();
            let group = rel.split('/').next().unwrap_or("").to_string();
            let outcome = match std::fs::read(path) {
                Ok(bytes) => check_ir(oracle, &rel, &String::from_utf8_lossy(&bytes)),
                Err(e) => Outcome::LoadFailed(format!("reading: {e}")),
            };
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(step) || n == files.len() {
                eprintln!("  checked {n}/{} files ({:.0?})", files.len(), start.elapsed());
            }
            (rel, group, outcome)
        })
        .collect();
    let mut tally = Tally::default();
    for (rel, group, outcome) in outcomes {
        tally.add(rel, &group, outcome);
    }
    tally
}

fn corpus_dir() -> PathBuf {
    std::env::var_os("PROGRAML_CORPUS").map(PathBuf::from).unwrap_or_else(|| programl_testkit::cache_dir().join("corpus"))
}

fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    programl::ir::find_ir_files(dir).unwrap_or_default()
}

/// `n` files spread evenly over the sorted list: the same sample on every
/// machine with the same corpus.
fn fixed_sample(files: &[PathBuf], n: usize) -> Vec<PathBuf> {
    if files.len() <= n {
        return files.to_vec();
    }
    (0..n).map(|i| files[i * files.len() / n].clone()).collect()
}

#[test]
fn bundled_programs_match_reference() {
    let oracle = oracle();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&data)
        .unwrap_or_else(|e| panic!("{}: {e}", data.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    assert!(sources.len() >= 4, "expected the bundled C programs in {}", data.display());
    let tmp = tempfile::tempdir().unwrap();
    let mut tally = Tally::default();
    for src in &sources {
        for opt in ["-O0", "-O1", "-O2"] {
            let name = format!("{}{opt}", src.file_stem().unwrap().to_string_lossy());
            let ll = tmp.path().join(format!("{name}.ll"));
            let out = Command::new(clang())
                .args(["-Xclang", "-no-opaque-pointers", "-S", "-emit-llvm", opt, "-o"])
                .arg(&ll)
                .arg(src)
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e} (run scripts/bootstrap.sh)", clang().display()));
            assert!(out.status.success(), "clang failed on {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
            let ir = std::fs::read_to_string(&ll).unwrap();
            tally.add(name.clone(), "bundled", check_ir(&oracle, &name, &ir));
        }
    }
    let text = tally.report("bundled C programs");
    // Every bundled file must at least be read by both sides.
    assert!(tally.oracle_failed.is_empty() && tally.load_failed.is_empty(), "rewrite gaps:\n{text}");
    assert!(tally.invalid.is_empty(), "graphs breaking an invariant:\n{text}");
    // They exercise what LLVM 16 prints differently (atomics.c: `sret(T)`,
    // `elementtype(T)`, aligned atomics): every one must match exactly.
    assert_eq!(tally.matched, tally.total, "mismatches:\n{text}");
}

#[test]
fn corpus_matches_reference() {
    let oracle = oracle();
    // PROGRAML_CONFORMANCE_FILES=a.ll:b.ll checks just those files (any
    // LLVM 16 typed-pointer IR), e.g. a reproducer.
    if let Ok(list) = std::env::var("PROGRAML_CONFORMANCE_FILES") {
        let files: Vec<PathBuf> = std::env::split_paths(&list).collect();
        let mut tally = check_files(&oracle, Path::new(""), &files);
        tally.assert_share("PROGRAML_CONFORMANCE_FILES");
        return;
    }
    let dir = corpus_dir();
    let files = corpus_files(&dir);
    assert!(!files.is_empty(), "no IR corpus in {}: build it with `bash scripts/corpus.sh` (scripts/test.sh does)", dir.display());
    let all = std::env::var("PROGRAML_CONFORMANCE_ALL").is_ok_and(|v| v == "1");
    let chosen = if all { files.clone() } else { fixed_sample(&files, SAMPLE) };
    let title = if all {
        format!("corpus (all {} files)", chosen.len())
    } else {
        format!("corpus sample ({} of {} files)", chosen.len(), files.len())
    };
    let mut tally = check_files(&oracle, &dir, &chosen);
    tally.assert_share(&title);
}

#[test]
fn rewrite_keeps_strings_and_is_idempotent_on_corpus_sample() {
    // The rewrite must never change quoted strings, and a second pass must
    // change nothing. Checked on a sample of the corpus.
    let files = fixed_sample(&corpus_files(&corpus_dir()), 40);
    assert!(!files.is_empty(), "no IR corpus in {}: run `bash scripts/corpus.sh`", corpus_dir().display());
    for path in &files {
        let ir = std::fs::read_to_string(path).unwrap();
        let once = programl_testkit::rewrite_for_llvm10(&ir);
        assert_eq!(programl_testkit::rewrite_for_llvm10(&once), once, "{} not idempotent", path.display());
        let strings = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| !l.trim_start().starts_with("attributes #"))
                .flat_map(|l| l.split('"').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>())
                .collect()
        };
        assert_eq!(strings(&ir), strings(&once), "{}: quoted strings changed", path.display());
    }
}
