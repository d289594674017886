//! The builder and the CLI on hostile and random input: llvm-stress modules,
//! bitcode of both pointer flavours, and broken files. Nothing may panic;
//! bad files get one error line naming them.
//!
//! The llvm-stress target is the builder's fuzz target: `PROGRAML_FUZZ_ITERS=N`
//! modules (default 150; seeds from `PROGRAML_FUZZ_SEED`, default 0), sizes
//! cycling through [`SIZES`], each raw and after `opt-16 -O2`, in both modes;
//! every graph passes `programl::builder::check` (the graph invariants, and
//! operand positions and types against LLVM) and reads back from every
//! format. `--nocapture` prints the tally. `scripts/stress.sh` runs the CLI
//! and the pass (out of process) over many more.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use programl::builder::{build, check, BuildOptions, Mode};
use programl::format::{read_graph, write_graph, Format};
use programl_testkit::fuzz;

fn tool(name: &str) -> PathBuf {
    Path::new(programl::LLVM_BINDIR).join(name)
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// llvm-stress `-size` values the target cycles through: from a few
/// blocks to functions of thousands of instructions.
const SIZES: [u64; 5] = [10, 60, 250, 1000, 3000];

/// Builds `path` in both modes, checks each graph against the module, and
/// writes and reads it back in every format; returns (nodes, edges) of the
/// paper graph, or every problem found.
fn build_all_ways(path: &Path) -> Result<(usize, usize), Vec<String>> {
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, path).map_err(|e| vec![e.to_string()])?;
    let mut size = (0, 0);
    let mut problems = Vec::new();
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = match fuzz::no_panic(|| build(&module, &BuildOptions { mode, ..Default::default() })) {
            Ok(g) => g,
            Err(panic) => {
                problems.push(format!("{mode:?}: the builder panicked: {panic}"));
                continue;
            }
        };
        if mode == Mode::Paper {
            size = (g.node_count(), g.edge_count());
        }
        if let Err(errors) = check(&module, &g, mode) {
            problems.extend(errors.into_iter().take(5).map(|e| format!("{mode:?}: {e}")));
        }
        for format in Format::ALL {
            let mut bytes = Vec::new();
            write_graph(&g, format, &mut bytes).unwrap();
            if format != Format::Dot {
                match read_graph(&bytes, format) {
                    Ok(back) if (back.node_count(), back.edge_count()) == (g.node_count(), g.edge_count()) => {}
                    Ok(_) => problems.push(format!("{mode:?}: {format}: read back with other counts")),
                    Err(e) => problems.push(format!("{mode:?}: {format}: {e}")),
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(size)
    } else {
        Err(problems)
    }
}

#[derive(Default)]
struct StressTally {
    modules: usize,
    graphs: usize,
    nodes: usize,
    edges: usize,
    largest: usize,
    failures: Vec<String>,
}

#[test]
fn llvm_stress_modules() {
    let n = fuzz::iterations(150);
    let base = fuzz::base_seed();
    let dir = tempfile::tempdir().unwrap();
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-builder");
    let tally = Mutex::new(StressTally::default());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let start = std::time::Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (dir, keep, tally) = (dir.path(), &keep, &tally);
            scope.spawn(move || {
                for k in (t..n).step_by(threads) {
                    let seed = base + k as u64;
                    let size = SIZES[k % SIZES.len()];
                    let ll = dir.join(format!("stress-{seed}-{size}.ll"));
                    run(Command::new(tool("llvm-stress")).args(["-seed", &seed.to_string(), "-size", &size.to_string(), "-o"]).arg(&ll));
                    // Optimized, to get phis, selects, vector shuffles and
                    // intrinsics.
                    let opt_ll = dir.join(format!("stress-{seed}-{size}.O2.ll"));
                    run(Command::new(tool("opt")).args(["-O2", "-S", "-o"]).arg(&opt_ll).arg(&ll));
                    for file in [&ll, &opt_ll] {
                        let result = build_all_ways(file);
                        let mut t = tally.lock().unwrap();
                        t.graphs += 2;
                        match result {
                            Ok((nodes, edges)) => {
                                t.nodes += nodes;
                                t.edges += edges;
                                t.largest = t.largest.max(nodes);
                            }
                            Err(problems) => {
                                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                                let kept = keep.join(&name);
                                let _ = std::fs::create_dir_all(keep);
                                let _ = std::fs::copy(file, &kept);
                                t.failures.push(format!("{} (seed {seed}, size {size}): {}", kept.display(), problems.join("; ")));
                            }
                        }
                    }
                    tally.lock().unwrap().modules += 1;
                    let _ = std::fs::remove_file(&ll);
                    let _ = std::fs::remove_file(&opt_ll);
                }
            });
        }
    });
    let t = tally.into_inner().unwrap();
    println!(
        "fuzz builder: {} llvm-stress modules (seeds {base}..{}, sizes {SIZES:?}), each raw and -O2: {} graphs checked (both modes), \
         {} nodes and {} edges (paper mode), largest {} nodes, {} failures, {:.1} s",
        t.modules,
        base + n as u64,
        t.graphs,
        t.nodes,
        t.edges,
        t.largest,
        t.failures.len(),
        start.elapsed().as_secs_f64()
    );
    assert_eq!(t.modules, n);
    assert!(t.failures.is_empty(), "{} failures:\n{}", t.failures.len(), t.failures.join("\n"));
}

/// The graph invariants on real code: `programl::builder::check` in both
/// modes on a fixed sample of the real-code corpus (`scripts/corpus.sh`).
/// `PROGRAML_CHECK_DIRS=a:b` checks other IR directories,
/// `PROGRAML_CHECK_FILES=N|all` more files (default 60).
#[test]
fn corpus_graphs_pass_check() {
    let dirs: Vec<PathBuf> = match std::env::var_os("PROGRAML_CHECK_DIRS") {
        Some(list) => std::env::split_paths(&list).collect(),
        None => vec![programl_testkit::cache_dir().join("corpus")],
    };
    let want = match std::env::var("PROGRAML_CHECK_FILES").as_deref() {
        Ok("all") => usize::MAX,
        Ok(n) => n.parse().unwrap_or_else(|_| panic!("PROGRAML_CHECK_FILES={n:?} is not a number or `all`")),
        Err(_) => 60,
    };
    let mut files = Vec::new();
    for dir in &dirs {
        let mut found = programl::ir::find_ir_files(dir).unwrap_or_default();
        if found.is_empty() {
            programl_testkit::skip_unless_ci(
                "corpus_graphs_pass_check",
                &format!("no IR files in {}: build the corpus with `bash scripts/corpus.sh`", dir.display()),
            );
            continue;
        }
        found.sort();
        // A sample spread evenly over the sorted list: the same everywhere.
        let n = found.len().min(want);
        files.extend((0..n).map(|i| found[i * found.len() / n].clone()));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let graphs = std::sync::atomic::AtomicUsize::new(0);
    let start = std::time::Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(file) = files.get(i) else { break };
                let context = inkwell::context::Context::create();
                let module = match programl::ir::load_module(&context, file) {
                    Ok(m) => m,
                    Err(e) => {
                        failures.lock().unwrap().push(e.to_string());
                        continue;
                    }
                };
                for mode in [Mode::Paper, Mode::Programl03] {
                    let g = build(&module, &BuildOptions { mode, ..Default::default() });
                    graphs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Err(errors) = check(&module, &g, mode) {
                        failures.lock().unwrap().push(format!(
                            "{}: {mode:?}: {}",
                            file.display(),
                            errors[..errors.len().min(3)].join("; ")
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!(
        "check on real code: {} files of {}, {} graphs (both modes), {} failures, {:.1} s",
        files.len(),
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        graphs.into_inner(),
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

const SOURCE: &str =
    "struct s { int a; struct s *next; };\nint len(struct s *p) { int n = 0; while (p) { n++; p = p->next; } return n; }\n";

fn compile(dir: &Path, flags: &[&str], out: &str) -> PathBuf {
    let c = dir.join("list.c");
    std::fs::write(&c, SOURCE).unwrap();
    let path = dir.join(out);
    run(Command::new(tool("clang")).args(flags).args(["-c", "-emit-llvm", "-o"]).arg(&path).arg(&c));
    path
}

fn texts(path: &Path) -> Vec<String> {
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, path).unwrap_or_else(|e| panic!("{e}"));
    build(&module, &BuildOptions { mode: Mode::Programl03, ..Default::default() }).graph.node_weights().map(|n| n.text.clone()).collect()
}

#[test]
fn bitcode_keeps_its_pointer_flavour() {
    let dir = tempfile::tempdir().unwrap();
    let typed = compile(dir.path(), &["-Xclang", "-no-opaque-pointers"], "typed.bc");
    let opaque = compile(dir.path(), &[], "opaque.bc");
    let t = texts(&typed);
    assert!(t.iter().any(|x| x == "struct*"), "{t:?}");
    assert!(!t.iter().any(|x| x == "ptr"));
    let o = texts(&opaque);
    assert!(o.iter().any(|x| x == "ptr"), "{o:?}");
    assert!(!o.iter().any(|x| x.ends_with('*')));
}

#[test]
fn broken_inputs_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = compile(dir.path(), &[], "good.bc");
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad-dominance.ll", b"define i32 @f(i1 %c) {\nentry:\n  br i1 %c, label %a, label %b\na:\n  %x = add i32 1, 2\n  br label %b\nb:\n  ret i32 %x\n}\n".to_vec()),
        ("syntax.ll", b"define i32 @f( {\n".to_vec()),
        ("undefined-value.ll", b"define i32 @f() {\n  ret i32 %x\n}\n".to_vec()),
        ("truncated.bc", bytes[..bytes.len() / 2].to_vec()),
        ("noise.bc", (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect()),
        ("magic-only.bc", b"BC\xC0\xDE\x35\x14\x00\x00".to_vec()),
        // Empty bitcode: a failed or cut-short compile (was: an empty module).
        ("zero.bc", Vec::new()),
    ];
    for (name, content) in &cases {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let context = inkwell::context::Context::create();
        let err = programl::ir::load_module(&context, &path).err().unwrap_or_else(|| panic!("{name} was accepted"));
        let message = err.to_string();
        assert!(message.contains(name), "{message}");
        assert_eq!(message.lines().count(), 1, "{message}");
    }

    // An empty file is a valid, empty module.
    let empty = dir.path().join("empty.ll");
    std::fs::write(&empty, "").unwrap();
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, &empty).unwrap();
    assert_eq!(build(&module, &BuildOptions::default()).node_count(), 1);

    // The CLI goes on with the good file, and its exit code says some failed.
    let out_dir = dir.path().join("graphs");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_programl"));
    cmd.args(["graph", "--format", "json", "-o"]).arg(&out_dir).arg(&good);
    for (name, _) in &cases {
        cmd.arg(dir.path().join(name));
    }
    cmd.arg(dir.path().join("missing.ll"));
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (name, _) in &cases {
        assert_eq!(stderr.lines().filter(|l| l.contains(name)).count(), 1, "{name}: {stderr}");
    }
    assert!(stderr.contains("missing.ll"), "{stderr}");
    assert!(stderr.contains(&format!("{} of {} files failed", cases.len() + 1, cases.len() + 2)), "{stderr}");
    assert!(out_dir.join("good.json").is_file());
}

#[test]
fn cli_single_input_goes_to_stdout_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let bc = compile(dir.path(), &["-O1"], "list.bc");
    let out = run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "--format", "pb"]).arg(&bc));
    let g = read_graph(&out.stdout, Format::Pb).unwrap();
    assert!(g.functions.iter().any(|f| f.name == "len"));
    // -o with a file name writes that file; summary reads it back.
    let pb = dir.path().join("list.pb");
    run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-o"]).arg(&pb).arg(&bc));
    assert_eq!(std::fs::read(&pb).unwrap(), out.stdout);
    // -o - is standard output (it wrote a file named '-'), one input only.
    let dash = run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-o", "-"]).arg(&bc).current_dir(dir.path()));
    assert_eq!(dash.stdout, out.stdout);
    assert!(!dir.path().join("-").exists());
    let two = Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-o", "-"]).arg(&bc).arg(&bc).output().unwrap();
    assert!(!two.status.success() && String::from_utf8_lossy(&two.stderr).contains("-o -: standard output takes one input"));
    let summary = run(Command::new(env!("CARGO_BIN_EXE_programl")).arg("summary").arg(&pb));
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(text.contains(&format!("{} nodes", g.node_count())), "{text}");
    // convert: pb -> json reads back to the same graph; a non-graph input
    // is one error line and exit 1.
    let json = run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["convert", "--format", "json"]).arg(&pb));
    let back = read_graph(&json.stdout, Format::Json).unwrap();
    assert_eq!((back.node_count(), back.edge_count()), (g.node_count(), g.edge_count()));
    let out = Command::new(env!("CARGO_BIN_EXE_programl")).args(["convert", "--format", "dot"]).arg(&bc).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("list.bc: unknown graph format"));
    // --resume finishes an interrupted directory run: only missing graphs
    // are built.
    let inputs = dir.path().join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::copy(&bc, inputs.join("a.bc")).unwrap();
    std::fs::copy(&bc, inputs.join("b.bc")).unwrap();
    let graphs = dir.path().join("graphs");
    run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-o"]).arg(&graphs).arg(&inputs));
    std::fs::remove_file(graphs.join("b.pb")).unwrap();
    std::fs::write(graphs.join("a.pb"), b"kept").unwrap();
    let out = run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "--resume", "-o"]).arg(&graphs).arg(&inputs));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 graphs were already written"));
    assert_eq!(std::fs::read(graphs.join("a.pb")).unwrap(), b"kept");
    assert_eq!(std::fs::read(graphs.join("b.pb")).unwrap(), std::fs::read(&pb).unwrap());
    // Several inputs without -o is a usage error, not a guess.
    let out = Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph"]).arg(&bc).arg(&pb).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o DIR"));
    // `a.ll` beside `a.bc` would both write `a.pb`: refused before anything
    // is built, naming both (one graph had silently replaced the other).
    let both = dir.path().join("both");
    std::fs::create_dir_all(&both).unwrap();
    std::fs::copy(&bc, both.join("a.bc")).unwrap();
    run(Command::new(tool("llvm-dis")).arg(&bc).arg("-o").arg(both.join("a.ll")));
    let clash = dir.path().join("clash");
    let out = Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-o"]).arg(&clash).arg(&both).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a.bc and ") && stderr.contains("a.ll would both write") && stderr.contains("a.pb"), "{stderr}");
    assert!(!clash.exists(), "nothing written");
    // `-o x.json` without --format writes JSON (it wrote protobuf, which
    // summary then refused by its name).
    let named = dir.path().join("named.json");
    run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-o"]).arg(&named).arg(&bc));
    let back = read_graph(&std::fs::read(&named).unwrap(), Format::Json).unwrap();
    assert_eq!((back.node_count(), back.edge_count()), (g.node_count(), g.edge_count()));
    run(Command::new(env!("CARGO_BIN_EXE_programl")).arg("summary").arg(&named));
}

/// Directory runs read IR on worker threads: a type nested 8,000 deep, which
/// the main thread reads, overflowed a worker's default 2 MiB stack and
/// aborted the run (`graph -o DIR` and `dataset build`).
#[test]
fn deeply_nested_types_build_on_worker_threads() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    let mut ty = String::from("i8");
    for _ in 0..8000 {
        ty = format!("[1 x {ty}]");
    }
    std::fs::write(inputs.join("deep.ll"), format!("@g = global {ty} zeroinitializer\ndefine i32 @main() {{\n  ret i32 0\n}}\n")).unwrap();
    let graphs = dir.path().join("graphs");
    run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-j", "2", "-o"]).arg(&graphs).arg(&inputs));
    assert!(graphs.join("deep.pb").is_file());
    let data = dir.path().join("data");
    let out = run(Command::new(env!("CARGO_BIN_EXE_programl"))
        .args(["dataset", "build", "-j", "2", "--ir"])
        .arg(&inputs)
        .arg("--out")
        .arg(&data));
    assert!(String::from_utf8_lossy(&out.stdout).contains("this run: 1 ok, 0 failed"), "{}", String::from_utf8_lossy(&out.stdout));
    // A mistyped --ir (no IR there, or no such directory) is refused before
    // anything is created: it once left a dataset tied to the wrong
    // directory, which the right one could then not resume.
    let sources = dir.path().join("sources");
    std::fs::create_dir_all(&sources).unwrap();
    std::fs::write(sources.join("x.c"), "int main(void) { return 0; }\n").unwrap();
    for ir in [sources.clone(), dir.path().join("nowhere")] {
        let wrong = dir.path().join("wrong");
        let out = Command::new(env!("CARGO_BIN_EXE_programl"))
            .args(["dataset", "build", "--ir"])
            .arg(&ir)
            .arg("--out")
            .arg(&wrong)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains(&*ir.to_string_lossy()), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!wrong.exists(), "{} created", wrong.display());
    }
}

/// `DIR/ir`: crash.bc (tests/data/llvm16-reader-crash.bc, on which LLVM
/// 16's reader crashes the process), good.bc and four copies of it, and
/// broken.ll (which does not parse).
fn ir_with_a_reader_crash(dir: &Path) -> PathBuf {
    let ir = dir.join("ir");
    std::fs::create_dir_all(&ir).unwrap();
    let crash = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/llvm16-reader-crash.bc");
    std::fs::copy(&crash, ir.join("crash.bc")).unwrap();
    compile(&ir, &["-O1"], "good.bc");
    std::fs::write(ir.join("broken.ll"), "define i32 @f( {\n").unwrap();
    for i in 0..4 {
        std::fs::copy(ir.join("good.bc"), ir.join(format!("copy{i}.bc"))).unwrap();
    }
    ir
}

/// Bitcode on which LLVM 16's reader crashes the process (SIGSEGV: hello.c's
/// bitcode with bytes flipped, tests/data/llvm16-reader-crash.bc), among good
/// and broken inputs. No Rust code can catch that, so `dataset build` keeps
/// a journal of what it is reading: the run after a crash reads the inputs
/// in flight one at a time, and the run after that records the one it died
/// on as failed. The build gets past it, losing nothing else, instead of
/// dying on it at every resume.
#[test]
fn dataset_build_gets_past_bitcode_that_crashes_llvm() {
    let dir = tempfile::tempdir().unwrap();
    let ir = ir_with_a_reader_crash(dir.path());
    let data = dir.path().join("data");
    let mut runs = Vec::new();
    for _ in 0..4 {
        let out = Command::new(env!("CARGO_BIN_EXE_programl"))
            .args(["dataset", "build", "-j", "2", "--ir"])
            .arg(&ir)
            .arg("--out")
            .arg(&data)
            .output()
            .unwrap();
        runs.push(out.status.code());
        if out.status.success() {
            break;
        }
    }
    assert_eq!(runs.last(), Some(&Some(0)), "the build never got past the crash: {runs:?}");
    assert!(runs.len() <= 3, "{runs:?}");
    let stats = run(Command::new(env!("CARGO_BIN_EXE_programl")).args(["dataset", "stats", "--no-plot"]).arg(&data));
    let text = String::from_utf8_lossy(&stats.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("failed input:")).count(), 2, "{text}");
    assert!(text.contains("broken.ll"), "{text}");
    if programl::LLVM_MAJOR == "16" {
        // This LLVM crashes on it: two runs died, the third recorded it.
        assert_eq!(runs, [None, None, Some(0)], "{runs:?}");
        assert!(text.contains("crash.bc: the build died reading it"), "{text}");
    }
    assert!(!data.join(".inflight").exists(), "the journal goes when a run ends");
}

/// `programl graph -o DIR` over inputs among which one crashes LLVM 16's
/// reader (tests/data/llvm16-reader-crash.bc): the journal (DIR/.inflight)
/// has the run after a crash read the inputs in flight alone, and the run
/// after that skip the one it died on, as failed, writing every other
/// graph; later runs, --resume or not, skip it too while the journal names
/// it, and read it again once the journal is deleted.
#[test]
fn graph_into_a_directory_gets_past_bitcode_that_crashes_llvm() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let ir = ir_with_a_reader_crash(dir.path());
    let out = dir.path().join("graphs");
    let graph = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_programl")).args(["graph", "-j", "2"]).args(extra).arg(&ir).arg("-o").arg(&out).output().unwrap()
    };
    let mut runs = Vec::new();
    let last = loop {
        let o = graph(&[]);
        runs.push((o.status.code(), o.status.signal()));
        if o.status.code().is_some() || runs.len() == 4 {
            break o;
        }
    };
    let stderr = String::from_utf8_lossy(&last.stderr).into_owned();
    // Ended in an orderly way, with broken.ll (and crash.bc, where this
    // LLVM crashes on it) failed and every good input's graph written.
    assert_eq!(last.status.code(), Some(1), "{runs:?} {stderr}");
    for name in ["good", "copy0", "copy1", "copy2", "copy3"] {
        assert!(out.join(format!("{name}.pb")).is_file(), "{name}.pb: {runs:?} {stderr}");
    }
    assert!(stderr.contains("broken.ll"), "{stderr}");
    if programl::LLVM_MAJOR != "16" {
        return;
    }
    // Died twice by the signal (beside others, then alone), then skipped it.
    assert_eq!(runs, [(None, Some(libc::SIGSEGV)), (None, Some(libc::SIGSEGV)), (Some(1), None)], "{stderr}");
    assert!(stderr.contains("crash.bc: skipped: an earlier run into"), "{stderr}");
    assert!(stderr.contains("2 of 7 files failed"), "{stderr}");
    let journal = std::fs::read_to_string(out.join(".inflight")).unwrap();
    assert_eq!(journal, "C\tcrash.bc\n");
    // Again, with --resume: nothing read, the culprit still skipped.
    let again = graph(&["--resume"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("5 of 7 graphs were already written") && stderr.contains("crash.bc: skipped"), "{stderr}");
    // Without the journal, it is read again (and crashes).
    std::fs::remove_file(out.join(".inflight")).unwrap();
    assert_eq!(graph(&["--resume"]).status.signal(), Some(libc::SIGSEGV));
}

/// When LLVM's reader kills `programl graph` (this LLVM 16 segfaults on
/// tests/data/llvm16-reader-crash.bc), the CLI's fatal-signal handler names
/// the file it was reading before the process dies by the signal.
#[test]
fn a_crash_in_llvm_names_the_file_being_read() {
    use std::os::unix::process::ExitStatusExt;
    let crash = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/llvm16-reader-crash.bc");
    let dir = tempfile::tempdir().unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_programl")).arg("graph").arg(&crash).arg("-o").arg(dir.path().join("g.pb")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if programl::LLVM_MAJOR == "16" {
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
        assert!(stderr.starts_with("programl: killed by signal 11 while reading"), "{stderr}");
        assert!(stderr.lines().nth(1).is_some_and(|l| l.trim() == crash.display().to_string()), "{stderr}");
    } else {
        // Another LLVM may read it as the broken file it is.
        assert!(out.status.code() == Some(1) || out.status.signal().is_some(), "{stderr}");
    }
}
