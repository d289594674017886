//! Fuzzing the graph readers (`programl::format::read_graph`) with mutated
//! files: binary and text protocol buffers and node-link JSON of graphs
//! built from real code (generated C programs compiled by clang-16 with and
//! without optimisation, typed and opaque pointers; the hand-written IR of
//! tests/data; small llvm-stress-16 modules), in both graph modes.
//!
//! Every mutant must give, without a panic, either an error or a graph
//! that passes `ProgramGraph::validate` and is a fixed point of writing and
//! reading again in its format. Every fourth mutant is also read as each
//! other format (garbage to that reader). A failure keeps its input under
//! `$CARGO_TARGET_TMPDIR/fuzz-formats/` and names its seed.
//!
//! The list reader (`read_graph_list`, upstream's `ProgramGraphList`) gets
//! the same treatment on lists of one to three of the binary seeds: a list
//! it accepts holds only valid graphs and is a fixed point of writing and
//! reading again.
//!
//! `PROGRAML_FUZZ_ITERS=N` mutants per format (default 3000),
//! `PROGRAML_FUZZ_SEED` a different base seed; `--nocapture` prints the
//! tally by outcome and error kind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use programl::builder::{build, check, BuildOptions, Mode};
use programl::format::{read_graph, read_graph_list, write_graph, write_graph_list, Format};
use programl::ProgramGraph;
use programl_testkit::fuzz::{self, Mutator};

const READABLE: [Format; 3] = [Format::Pb, Format::PbTxt, Format::Json];

/// Seed files larger than this are left out.
const MAX_SEED_BYTES: usize = 48 << 10;

const JSON_TOKENS: &[&str] = &[
    "\"nodes\"",
    "\"links\"",
    "\"source\":",
    "\"target\":",
    "\"flow\":",
    "\"position\":",
    "\"function\":",
    "\"type\":",
    "\"id\":",
    "\"block\":",
    "\"key\":",
    "\"text\":",
    "\"features\":",
    "\"full_text\":",
    "\"entry_node\":",
    "\"graph\":",
    "\"module\":",
    "null",
    "true",
    "[]",
    "{}",
    ",",
    "]",
    "}",
    "\"\\ud800\"",
];

const PBTXT_TOKENS: &[&str] = &[
    "node {",
    "edge {",
    "function {",
    "module {",
    "flow: CALL",
    "flow: DATA",
    "type: VARIABLE",
    "type: CONSTANT",
    "position: ",
    "source: ",
    "target: ",
    "function: ",
    "block: ",
    "features {",
    "feature {",
    "int64_list { value: ",
    "bytes_list { value: ",
    "key: \"entry_node\"",
    "}",
    "\"",
    "\\",
];

/// Field tags and lengths of the `ProgramGraph` message.
const PB_TOKENS: &[&str] = &["\u{8}", "\u{10}", "\u{12}", "\u{18}", "\u{1a}", "\u{20}", "\u{22}", "\u{28}", "\u{2a}\u{0}", "\u{7f}"];

fn tool(name: &str) -> PathBuf {
    Path::new(programl::LLVM_BINDIR).join(name)
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (run scripts/bootstrap.sh)"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The IR files the seeds are built from.
fn seed_ir(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ll"))
        .collect();
    files.sort();
    for i in 0..4 {
        let c = dir.join(format!("prog{i}.c"));
        std::fs::write(&c, programl_testkit::c_program(i)).unwrap();
        for (level, typed) in [("-O0", true), ("-O2", false)] {
            let ll = dir.join(format!("prog{i}{level}.ll"));
            let mut cmd = Command::new(tool("clang"));
            cmd.args(["-S", "-emit-llvm", "-w", level, "-o"]).arg(&ll).arg(&c);
            if typed {
                cmd.args(["-Xclang", "-no-opaque-pointers"]);
            }
            run(&mut cmd);
            files.push(ll);
        }
    }
    for seed in 0..3 {
        let ll = dir.join(format!("stress{seed}.ll"));
        run(Command::new(tool("llvm-stress")).args(["-seed", &seed.to_string(), "-size", "40", "-o"]).arg(&ll));
        files.push(ll);
    }
    files
}

/// Every seed graph written in every readable format: (label, format, bytes).
fn seeds() -> Vec<(String, Format, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    for ll in seed_ir(dir.path()) {
        let context = inkwell::context::Context::create();
        let module = programl::ir::load_module(&context, &ll).unwrap_or_else(|e| panic!("{e}"));
        for mode in [Mode::Paper, Mode::Programl03] {
            let g = build(&module, &BuildOptions { mode, ..Default::default() });
            check(&module, &g, mode).unwrap_or_else(|e| panic!("{}: {mode:?}: {e:#?}", ll.display()));
            for format in READABLE {
                let mut bytes = Vec::new();
                write_graph(&g, format, &mut bytes).unwrap();
                // Small seeds: more mutants per second, and a mutation
                // matters more in a small file.
                if bytes.len() > MAX_SEED_BYTES {
                    continue;
                }
                let name = ll.file_name().unwrap().to_string_lossy();
                out.push((format!("{name} {mode:?}"), format, bytes));
            }
        }
    }
    out
}

/// A step into a JSON document.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Paths to every value of `v` (the root excluded).
fn json_paths(v: &serde_json::Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    let children: Vec<(Step, &serde_json::Value)> = match v {
        serde_json::Value::Object(map) => map.iter().map(|(k, c)| (Step::Key(k.clone()), c)).collect(),
        serde_json::Value::Array(items) => items.iter().enumerate().map(|(i, c)| (Step::Index(i), c)).collect(),
        _ => return,
    };
    for (step, child) in children {
        prefix.push(step);
        out.push(prefix.clone());
        json_paths(child, prefix, out);
        prefix.pop();
    }
}

fn show(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Key(k) => format!(".{k}"),
            Step::Index(i) => format!("[{i}]"),
        })
        .collect()
}

fn json_at<'a>(v: &'a mut serde_json::Value, path: &[Step]) -> &'a mut serde_json::Value {
    path.iter().fold(v, |v, step| match step {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

/// A structure-aware mutant of a node-link document: one to three values
/// replaced by numbers near the graph's size or of another type, removed,
/// duplicated, or swapped with another value, so that it still parses and
/// reaches the reader's checks.
fn mutate_json(m: &mut Mutator, doc: &serde_json::Value) -> (Vec<u8>, String) {
    let mut doc = doc.clone();
    let n = doc["nodes"].as_array().map_or(0, Vec::len) as i64;
    let mut done = Vec::new();
    for _ in 0..1 + m.below(3) {
        let mut paths = Vec::new();
        json_paths(&doc, &mut Vec::new(), &mut paths);
        if paths.is_empty() {
            break;
        }
        let path = paths[m.below(paths.len())].clone();
        let (parent_path, last) = path.split_at(path.len() - 1);
        // Mostly integers, which pass the parser and test the references.
        let replacement: serde_json::Value = match m.below(12) {
            0..=3 => (n - 1 + m.below(3) as i64).into(),
            4..=7 => [-1i64, 0, 1, 2, 3, 4, i64::from(u32::MAX), i64::MAX][m.below(8)].into(),
            8 => serde_json::Value::Null,
            9 => "x".into(),
            10 => serde_json::json!([]),
            _ => 1.5.into(),
        };
        let parent = json_at(&mut doc, parent_path);
        let what = match (m.below(4), &last[0], parent) {
            (0, Step::Key(k), serde_json::Value::Object(map)) => {
                map.remove(k);
                format!("remove {}", show(&path))
            }
            (0, Step::Index(i), serde_json::Value::Array(items)) => {
                items.remove(*i);
                format!("remove {}", show(&path))
            }
            (1, Step::Index(i), serde_json::Value::Array(items)) => {
                let copy = items[*i].clone();
                let to = m.below(items.len() + 1);
                items.insert(to, copy);
                format!("copy {} to [{to}]", show(&path))
            }
            (2, Step::Index(i), serde_json::Value::Array(items)) => {
                let j = m.below(items.len());
                items.swap(*i, j);
                format!("swap {} with [{j}]", show(&path))
            }
            (_, step, parent) => {
                let target = match step {
                    Step::Key(k) => &mut parent[k.as_str()],
                    Step::Index(i) => &mut parent[*i],
                };
                *target = replacement.clone();
                format!("set {} to {replacement}", show(&path))
            }
        };
        done.push(what);
    }
    (serde_json::to_vec(&doc).unwrap(), format!("structured: {}", done.join(", ")))
}

/// The name of an error's variant: `Json`, `DanglingEdge`, `Invalid`, ...
fn kind(e: &programl::format::FormatError) -> String {
    let debug = format!("{e:?}");
    debug.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("").to_string()
}

#[derive(Default)]
struct Tally {
    inputs: usize,
    accepted: usize,
    rejected: BTreeMap<String, usize>,
    failures: Vec<String>,
}

#[test]
fn readers_never_panic_and_accept_only_valid_graphs() {
    let start = std::time::Instant::now();
    let seeds = seeds();
    println!(
        "seeds: {} files, {} bytes in all, built in {:.1} s",
        seeds.len(),
        seeds.iter().map(|s| s.2.len()).sum::<usize>(),
        start.elapsed().as_secs_f64()
    );
    let iters = fuzz::iterations(3000);
    let base = fuzz::base_seed();
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-formats");
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    for (fi, format) in READABLE.into_iter().enumerate() {
        let pool: Vec<&(String, Format, Vec<u8>)> = seeds.iter().filter(|s| s.1 == format).collect();
        let parsed: Vec<serde_json::Value> =
            if format == Format::Json { pool.iter().map(|s| serde_json::from_slice(&s.2).unwrap()).collect() } else { Vec::new() };
        let tokens = match format {
            Format::Json => JSON_TOKENS,
            Format::PbTxt => PBTXT_TOKENS,
            _ => PB_TOKENS,
        };
        let seed = base.wrapping_mul(31).wrapping_add(fi as u64);
        let mut m = Mutator::new(seed, tokens);
        let tally = tallies.entry(format.name()).or_default();
        for i in 0..iters {
            let k = m.below(pool.len());
            let (label, _, bytes) = pool[k];
            let other = &pool[m.below(pool.len())].2;
            let (mutant, what) =
                if format == Format::Json && i % 2 == 1 { mutate_json(&mut m, &parsed[k]) } else { m.mutate(bytes, other) };
            tally.inputs += 1;
            let mut problems: Vec<String> = Vec::new();
            let mut fail = |why: String| problems.push(why);
            match fuzz::no_panic(|| read_graph(&mutant, format)) {
                Err(panic) => fail(format!("panicked: {panic}")),
                Ok(Err(e)) => {
                    if e.to_string().trim().is_empty() {
                        fail(format!("an error without a message: {e:?}"));
                    }
                    *tally.rejected.entry(kind(&e)).or_default() += 1;
                }
                Ok(Ok(g)) => {
                    tally.accepted += 1;
                    if let Err(errors) = g.validate() {
                        fail(format!("accepted an invalid graph: {errors:?}"));
                    } else {
                        let mut again = Vec::new();
                        match write_graph(&g, format, &mut again).map_err(|e| e.to_string()).and_then(|()| {
                            fuzz::no_panic(|| read_graph(&again, format)).map_err(|p| format!("panicked: {p}"))?.map_err(|e| e.to_string())
                        }) {
                            Ok(back) if back == g => {}
                            Ok(_) => fail("writing and reading the accepted graph changed it".into()),
                            Err(e) => fail(format!("the accepted graph does not read back: {e}")),
                        }
                    }
                }
            }
            if i % 4 == 0 {
                for wrong in READABLE.into_iter().filter(|f| *f != format) {
                    if let Err(panic) = fuzz::no_panic(|| read_graph(&mutant, wrong)) {
                        fail(format!("panicked when read as {wrong}: {panic}"));
                    }
                }
            }
            for why in problems {
                let file = fuzz::keep_failure(&keep, &format!("{}-{seed}-{i}.{}", format.name(), format.extension()), &mutant);
                tally.failures.push(format!("{format} seed {seed} #{i} ({label}; {what}): {why}; input kept as {}", file.display()));
            }
        }
    }
    let mut failures = Vec::new();
    for (format, t) in &tallies {
        let rejected: usize = t.rejected.values().sum();
        let kinds: Vec<String> = t.rejected.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "fuzz {format}: {} mutants of {} seed files: {} accepted (valid, round-trip), {rejected} rejected ({}), {} failures",
            t.inputs,
            seeds.iter().filter(|s| s.1.name() == *format).count(),
            t.accepted,
            kinds.join(", "),
            t.failures.len()
        );
        failures.extend(t.failures.iter().cloned());
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.iter().take(20).cloned().collect::<Vec<_>>().join("\n"));
    // The mutations must reach past the first check: some mutants are
    // accepted, and rejections come from more than one check.
    for (format, t) in &tallies {
        assert!(t.accepted > 0 && t.rejected.len() >= 3, "{format}: the fuzzer only scratches the surface: {:?}", t.rejected);
    }
}

#[test]
fn the_list_reader_never_panics_and_accepts_only_valid_graphs() {
    let seeds: Vec<Vec<u8>> = seeds().into_iter().filter(|s| s.1 == Format::Pb).map(|s| s.2).collect();
    let graphs: Vec<ProgramGraph> = seeds.iter().map(|b| read_graph(b, Format::Pb).unwrap()).collect();
    let iters = fuzz::iterations(3000);
    let seed = fuzz::base_seed().wrapping_mul(31).wrapping_add(7);
    let mut m = Mutator::new(seed, PB_TOKENS);
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-formats");
    let (mut accepted, mut rejected, mut failures) = (0usize, BTreeMap::<String, usize>::new(), Vec::new());
    let list = |m: &mut Mutator| {
        let n = 1 + m.below(3);
        let chosen: Vec<&ProgramGraph> = (0..n).map(|_| &graphs[m.below(graphs.len())]).collect();
        let mut bytes = Vec::new();
        write_graph_list(chosen, &mut bytes).unwrap();
        bytes
    };
    for i in 0..iters {
        let (input, other) = (list(&mut m), list(&mut m));
        let (mutant, what) = m.mutate(&input, &other);
        let mut problems: Vec<String> = Vec::new();
        match fuzz::no_panic(|| read_graph_list(&mutant)) {
            Err(panic) => problems.push(format!("panicked: {panic}")),
            Ok(Err(e)) => {
                if e.to_string().trim().is_empty() {
                    problems.push(format!("an error without a message: {e:?}"));
                }
                // A bad graph in the list: which of the graph checks refused it.
                let k = match &e {
                    programl::format::FormatError::ListItem { source, .. } => format!("ListItem/{}", kind(source)),
                    _ => kind(&e),
                };
                *rejected.entry(k).or_default() += 1;
            }
            Ok(Ok(list)) => {
                accepted += 1;
                for (k, g) in list.iter().enumerate() {
                    if let Err(errors) = g.validate() {
                        problems.push(format!("accepted an invalid graph {k}: {errors:?}"));
                    }
                }
                let mut again = Vec::new();
                write_graph_list(&list, &mut again).unwrap();
                match read_graph_list(&again) {
                    Ok(back) if back == list => {}
                    Ok(_) => problems.push("writing and reading the accepted list changed it".into()),
                    Err(e) => problems.push(format!("the accepted list does not read back: {e}")),
                }
            }
        }
        for why in problems {
            let file = fuzz::keep_failure(&keep, &format!("list-{seed}-{i}.pb"), &mutant);
            failures.push(format!("list seed {seed} #{i} ({what}): {why}; input kept as {}", file.display()));
        }
    }
    let kinds: Vec<String> = rejected.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "fuzz list: {iters} mutants of lists of {} seed graphs: {accepted} accepted, rejected ({}), {} failures",
        graphs.len(),
        kinds.join(", "),
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.iter().take(20).cloned().collect::<Vec<_>>().join("\n"));
    // Mutants reach the graphs inside: some lists are accepted, and more
    // than the list's own framing rejects the others.
    assert!(accepted > 0 && rejected.len() >= 3, "the fuzzer only scratches the surface: {rejected:?}");
}
